#!/usr/bin/env bash
# test_examples.sh -- examples/backup builds against the *installed*
# library, once with its Makefile through pkg-config and once as a CMake
# project through find_package(dedup CONFIG), and each binary backs up,
# lists, restores and replicates a directory tree exactly.  Also: the
# public header compiles as strict C99 and as C++11.
#
# Environment: DD_SRC (source dir, required), CC (default cc), CXX
# (default g++), DD_KEEP_TMP=1 keeps the temp dir.
set -euo pipefail

: "${DD_SRC:?DD_SRC must name the source directory}"
CC=${CC:-cc}
CXX=${CXX:-g++}
export LC_ALL=C

T=$(mktemp -d "${TMPDIR:-/tmp}/dd-examples.XXXXXX")
cleanup() {
	chmod -R u+rwx "$T" 2>/dev/null || true
	if [ "${DD_KEEP_TMP:-0}" = 1 ]; then echo "kept $T" >&2; else rm -rf "$T"; fi
}
trap cleanup EXIT
PREFIX=$T/prefix

fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
die() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }

# ---- install the library (as test_install.sh does) --------------------------
unset ASAN_OPTIONS UBSAN_OPTIONS LD_PRELOAD || true
cmake -S "$DD_SRC" -B "$T/build" -DCMAKE_INSTALL_PREFIX="$PREFIX" \
	-DBUILD_TESTING=OFF -DDD_SANITIZE=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	>"$T/configure.log" 2>&1 || { cat "$T/configure.log" >&2; exit 1; }
cmake --build "$T/build" -j 2 >"$T/build.log" 2>&1 ||
	{ tail -n 60 "$T/build.log" >&2; die "build"; }
cmake --install "$T/build" >"$T/install.log" 2>&1 ||
	{ cat "$T/install.log" >&2; die "cmake --install"; }
LIBDIR=
for d in "$PREFIX"/lib "$PREFIX"/lib64 "$PREFIX"/lib/*-linux-gnu*; do
	if [ -e "$d/libdedup.so" ]; then LIBDIR=$d; break; fi
done
[ -n "$LIBDIR" ] || die "no libdedup.so under $PREFIX/lib*"
for f in dedupConfig.cmake dedupConfigVersion.cmake dedupTargets.cmake; do
	[ -f "$LIBDIR/cmake/dedup/$f" ] || fail "missing ${LIBDIR#"$PREFIX"/}/cmake/dedup/$f"
done
# the export must name installed paths only, never the source or build tree
if grep -rqF -e "$DD_SRC" -e "$T/build" "$LIBDIR/cmake/dedup"; then
	fail "the CMake package config names the source or build tree"
fi
ok "library installed into $PREFIX"

# ---- the header as C99 and as C++ ------------------------------------------
cat >"$T/hdr.c" <<'C'
#include <dedup.h>
int main(void) { return dd_version_number() == DD_VERSION_NUMBER ? 0 : 1; }
C
if $CC -std=c99 -Wall -Wextra -pedantic -Werror -I"$PREFIX/include" \
	-o "$T/hdr_c" "$T/hdr.c" -L"$LIBDIR" -ldedup -Wl,-rpath,"$LIBDIR" \
	2>"$T/cc.log" && "$T/hdr_c"; then
	ok "dedup.h compiles as C99 -pedantic -Werror"
else
	cat "$T/cc.log" >&2; fail "dedup.h as C99"
fi
if ! command -v "$CXX" >/dev/null 2>&1; then
	echo "note: $CXX missing, installing g++" >&2
	{ apt-get install -y g++ >"$T/apt.log" 2>&1 ||
	  sudo -n apt-get install -y g++ >>"$T/apt.log" 2>&1; } || true
fi
if command -v "$CXX" >/dev/null 2>&1; then
	if $CXX -std=c++11 -Wall -Wextra -Werror -x c++ -I"$PREFIX/include" \
		-o "$T/hdr_cxx" "$T/hdr.c" -L"$LIBDIR" -ldedup \
		-Wl,-rpath,"$LIBDIR" 2>"$T/cxx.log" && "$T/hdr_cxx"; then
		ok "dedup.h compiles and links as C++11"
	else
		cat "$T/cxx.log" >&2; fail "dedup.h as C++11"
	fi
else
	fail "no C++ compiler ($CXX) to check dedup.h from C++"
fi

# ---- build the example both ways --------------------------------------------
cp -r "$DD_SRC/examples/backup" "$T/ex-make"
if PKG_CONFIG_PATH=$LIBDIR/pkgconfig make -C "$T/ex-make" CC="$CC" \
	>"$T/make.log" 2>&1; then
	ok "examples/backup built with make + pkg-config"
else
	cat "$T/make.log" >&2; fail "make examples/backup"
fi
if cmake -S "$DD_SRC/examples/backup" -B "$T/ex-cmake" \
	-DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_C_COMPILER="$CC" \
	>"$T/ex-configure.log" 2>&1 &&
   cmake --build "$T/ex-cmake" >"$T/ex-build.log" 2>&1; then
	ok "examples/backup built with cmake + find_package(dedup)"
else
	cat "$T/ex-configure.log" "$T/ex-build.log" >&2 2>/dev/null
	fail "cmake examples/backup"
fi

# ---- a tree to back up -------------------------------------------------------
SRC=$T/tree
mkdir -p "$SRC/a/b/c" "$SRC/empty-dir" "$SRC/d e"
: >"$SRC/empty-file"
head -c $((300 * 1024)) /dev/urandom >"$SRC/a/random.bin"
head -c $((512 * 1024)) /dev/zero >"$SRC/a/b/zeros.bin"
printf 'hello\n' >"$SRC/a/b/c/hello.txt"
printf 'with a space\n' >"$SRC/d e/f g.txt"
cp "$SRC/a/random.bin" "$SRC/a/b/c/random-copy.bin"   # dedups
chmod 0750 "$SRC/a/b"
chmod 0600 "$SRC/a/b/c/hello.txt"
ln -s a/random.bin "$SRC/link"                        # skipped, warned

# exercise BIN LABEL: every command of the example, end to end
exercise() {
	local bin=$1 label=$2 w=$T/run-$2 out
	mkdir -p "$w"
	if ! out=$("$bin" backup "$w/store" snap1 "$SRC" 2>"$w/err"); then
		cat "$w/err" >&2; fail "$label: backup"; return
	fi
	grep -q 'symbolic link skipped' "$w/err" ||
		fail "$label: no warning for the skipped symlink"
	"$bin" backup "$w/store" snap2 "$SRC" >/dev/null 2>&1 ||
		fail "$label: second backup"
	if "$bin" backup "$w/store" snap1 "$SRC" >/dev/null 2>"$w/err2"; then
		fail "$label: a second snap1 was accepted"
	else
		grep -q 'DD_EEXIST' "$w/err2" ||
			fail "$label: duplicate name: $(cat "$w/err2")"
	fi
	out=$("$bin" list "$w/store" 2>"$w/err") || fail "$label: list"
	[ "$(printf '%s\n' "$out" | cut -f1 | tr '\n' ' ')" = "snap1 snap2 " ] ||
		fail "$label: list says: $out"

	"$bin" restore "$w/store" snap1 "$w/restored" >/dev/null 2>"$w/err" ||
		{ cat "$w/err" >&2; fail "$label: restore"; }
	if diff -r -x link "$SRC" "$w/restored" >"$w/diff" 2>&1; then
		[ ! -e "$w/restored/link" ] || fail "$label: symlink restored"
		[ "$(stat -c %a "$w/restored/a/b")" = 750 ] &&
		[ "$(stat -c %a "$w/restored/a/b/c/hello.txt")" = 600 ] ||
			fail "$label: modes not restored"
		ok "$label: backup, list, restore (diff -r clean)"
	else
		cat "$w/diff" >&2; fail "$label: restored tree differs"
	fi

	"$bin" replicate "$w/store" snap1 "$w/store2" >/dev/null 2>"$w/err" ||
		{ cat "$w/err" >&2; fail "$label: replicate"; }
	"$bin" restore "$w/store2" snap1 "$w/restored2" >/dev/null 2>"$w/err" ||
		{ cat "$w/err" >&2; fail "$label: restore from the replica"; }
	if diff -r -x link "$SRC" "$w/restored2" >"$w/diff" 2>&1; then
		ok "$label: replicate through a pipe, restore from the replica"
	else
		cat "$w/diff" >&2; fail "$label: replica's tree differs"
	fi

	# errors: a clear message and exit status 1 (2 for usage)
	set +e
	"$bin" restore "$w/store" nosuch "$w/none" >/dev/null 2>"$w/err"
	[ $? = 1 ] && grep -q DD_ENOENT "$w/err" ||
		fail "$label: restore of a missing snapshot: $(cat "$w/err")"
	"$bin" list "$w/no-store" >/dev/null 2>"$w/err"
	[ $? = 1 ] && [ -s "$w/err" ] || fail "$label: list of a missing store"
	"$bin" bogus >/dev/null 2>&1
	[ $? = 2 ] || fail "$label: usage error is not exit 2"
	set -e
}

[ -x "$T/ex-make/ddbackup" ] && exercise "$T/ex-make/ddbackup" make
[ -x "$T/ex-cmake/ddbackup" ] && exercise "$T/ex-cmake/ddbackup" cmake

if [ "$fails" -ne 0 ]; then
	echo "test_examples: $fails check(s) failed" >&2
	exit 1
fi
echo "test_examples: all checks passed"
