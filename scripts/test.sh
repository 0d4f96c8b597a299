#!/usr/bin/env bash
# test.sh -- set up, build, and run the whole libdedup test suite.
#
#   sudo bash scripts/test.sh           # warnings as errors, then ASan+UBSan,
#                                       # then the unit tests under TSan
#   sudo bash scripts/test.sh --quick   # skip the sanitizer builds
#
# Build directories: build/ (or $BUILD_DIR), build-asan/ (or
# $ASAN_BUILD_DIR), build-release/ and build-tsan/ under the repository.
# Every suite runs even if one before it fails; the exit status is
# non-zero if any failed.
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
		sed -n '2,11s/^# \{0,1\}//p' "$0"
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

	# the unit tests run the library's threads (pool, prefetch, cache
	# feed, concurrent readers and writers); about 80 s under TSan
	step "build with ThreadSanitizer, unit tests ($SRC/build-tsan)"
	if ! { cmake -S "$SRC" -B "$SRC/build-tsan" -DBUILD_TESTING=ON \
		-DDD_WERROR=ON -DDD_TSAN=ON >/dev/null &&
	       cmake --build "$SRC/build-tsan" -j "$JOBS" >/dev/null &&
	       (cd "$SRC/build-tsan" && TSAN_OPTIONS=halt_on_error=1 \
		ctest --output-on-failure -j2 -R '^unit\.'); }; then
		failed+=("thread sanitizer build")
	fi
fi

if [ ${#failed[@]} -ne 0 ]; then
	echo "FAILED: ${failed[*]}" >&2
	exit 1
fi
echo "all tests passed"
