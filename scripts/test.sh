#!/usr/bin/env bash
# test.sh -- set up, build, and run the whole libdedup test suite.
#
#   sudo bash scripts/test.sh           # warnings as errors, then ASan+UBSan
#   sudo bash scripts/test.sh --quick   # skip the sanitizer build
#
# Build directories: build/ (or $BUILD_DIR) and build-asan/ (or
# $ASAN_BUILD_DIR) under the repository.  Both suites run even if the first
# fails; the exit status is non-zero if either failed.
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$SRC/build}
ASAN_BUILD_DIR=${ASAN_BUILD_DIR:-$SRC/build-asan}
JOBS=$(nproc 2>/dev/null || echo 2)

quick=0
for arg in "$@"; do
	case $arg in
	--quick) quick=1 ;;
	-h|--help)
		sed -n '2,9s/^# \{0,1\}//p' "$0"
		exit 0 ;;
	*) echo "test.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
	esac
done

step() { printf '\n== %s\n' "$*" >&2; }

# configure, build and test one tree; returns non-zero on any failure.
suite() {
	local dir=$1; shift
	cmake -S "$SRC" -B "$dir" -DBUILD_TESTING=ON "$@" &&
	cmake --build "$dir" -j "$JOBS" &&
	(cd "$dir" && ctest --output-on-failure -j2)
}

step "setup"
bash "$SRC/scripts/setup.sh"

failed=()

step "build and test with -Werror ($BUILD_DIR)"
if ! suite "$BUILD_DIR" -DDD_WERROR=ON -DDD_SANITIZE=OFF; then
	failed+=("default build")
fi

if [ "$quick" -eq 0 ]; then
	# -O3 warns about things -O2 does not (maybe-uninitialized, overread)
	step "build with -O3 -Werror ($SRC/build-release), no tests"
	if ! { cmake -S "$SRC" -B "$SRC/build-release" -DCMAKE_BUILD_TYPE=Release \
		-DDD_WERROR=ON -DBUILD_TESTING=OFF >/dev/null &&
	       cmake --build "$SRC/build-release" -j "$JOBS" >/dev/null; }; then
		failed+=("release build")
	fi

	step "build and test with ASan+UBSan ($ASAN_BUILD_DIR)"
	if ! ASAN_OPTIONS=detect_leaks=1 \
	     UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	     suite "$ASAN_BUILD_DIR" -DDD_WERROR=ON -DDD_SANITIZE=ON; then
		failed+=("sanitizer build")
	fi
fi

if [ ${#failed[@]} -ne 0 ]; then
	echo "FAILED: ${failed[*]}" >&2
	exit 1
fi
echo "all tests passed"
