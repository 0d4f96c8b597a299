#!/usr/bin/env bash
# test_install.sh -- `cmake --install` gives a usable, well-formed library.
#
# Configures a fresh build of $DD_SRC into a temporary directory with its own
# prefix, installs it, and checks what a user of the installed copy relies
# on: the files (shared + static library, header, pkg-config file, dedup
# command, man page), an ABI that exports dd_* symbols only and every DD_API
# function of include/dedup.h, a SONAME of libdedup.so.0, and a program built
# with `pkg-config --cflags --libs libdedup` (and one linked statically with
# `--static`) that runs against the installed copy and sees
# dd_version_number() == DD_VERSION_NUMBER; installed commands that run
# from any prefix without LD_LIBRARY_PATH, and a CMake consumer of
# find_package(dedup) whose package names no path of the build machine.
#
# Environment: DD_SRC (source dir, required), DD_BIN (build's bin dir, unused
# here), CC (compiler, default cc), DD_KEEP_TMP=1 keeps the temp dir.
set -euo pipefail

: "${DD_SRC:?DD_SRC must name the source directory}"
CC=${CC:-cc}
JOBS=$(nproc 2>/dev/null || echo 2)

T=$(mktemp -d "${TMPDIR:-/tmp}/dd-install.XXXXXX")
cleanup() { if [ "${DD_KEEP_TMP:-0}" = 1 ]; then echo "kept $T" >&2; else rm -rf "$T"; fi; }
trap cleanup EXIT
PREFIX=$T/prefix

fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

# A fresh, plain build: no sanitizers, no tests, nothing from the caller's
# tree (ctest may run this inside an ASan build; the env must not leak in).
unset ASAN_OPTIONS UBSAN_OPTIONS LD_PRELOAD || true
cmake -S "$DD_SRC" -B "$T/build" -DCMAKE_INSTALL_PREFIX="$PREFIX" \
	-DBUILD_TESTING=OFF -DDD_SANITIZE=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	>"$T/configure.log" 2>&1 || { cat "$T/configure.log" >&2; exit 1; }
cmake --build "$T/build" -j "$JOBS" >"$T/build.log" 2>&1 ||
	{ tail -n 60 "$T/build.log" >&2; echo "FAIL: build" >&2; exit 1; }
cmake --install "$T/build" >"$T/install.log" 2>&1 ||
	{ cat "$T/install.log" >&2; echo "FAIL: cmake --install" >&2; exit 1; }
ok "configure, build, install into $PREFIX"

# GNUInstallDirs picks lib/ or lib/<multiarch>/ depending on the prefix.
LIBDIR=
for d in "$PREFIX"/lib "$PREFIX"/lib64 "$PREFIX"/lib/*-linux-gnu*; do
	if [ -e "$d/libdedup.so" ]; then LIBDIR=$d; break; fi
done
if [ -z "$LIBDIR" ]; then
	echo "FAIL: no libdedup.so under $PREFIX/lib*; installed:" >&2
	(cd "$PREFIX" && find . | sort) >&2
	exit 1
fi
ok "libdir is ${LIBDIR#"$PREFIX"/}"

# ---- files ----------------------------------------------------------------
for f in "$LIBDIR/libdedup.so" "$LIBDIR/libdedup.so.0" "$LIBDIR/libdedup.a" \
	 "$PREFIX/include/dedup.h" "$LIBDIR/pkgconfig/libdedup.pc" \
	 "$PREFIX/bin/dedup" "$PREFIX/share/man/man1/dedup.1"; do
	if [ -e "$f" ]; then ok "installed ${f#"$PREFIX"/}"
	else fail "missing ${f#"$PREFIX"/}"; fi
done
[ ! -e "$PREFIX/bin/dedup" ] || [ -x "$PREFIX/bin/dedup" ] ||
	fail "bin/dedup is not executable"
cmp -s "$DD_SRC/include/dedup.h" "$PREFIX/include/dedup.h" ||
	fail "installed dedup.h differs from include/dedup.h"

# ---- ABI --------------------------------------------------------------------
soname=$(objdump -p "$LIBDIR/libdedup.so" | awk '$1 == "SONAME" {print $2}')
if [ "$soname" = libdedup.so.0 ]; then ok "SONAME $soname"
else fail "SONAME is '$soname', expected libdedup.so.0"; fi

# Defined dynamic symbols, minus version nodes (type A, e.g. LIBDEDUP_0),
# with any @VERSION suffix removed.
nm -D --defined-only "$LIBDIR/libdedup.so" |
	awk '$2 != "A" {sub(/@.*/, "", $3); print $3}' | sort -u >"$T/exported"
grep -v '^dd_' "$T/exported" >"$T/foreign" || true
if [ -s "$T/foreign" ]; then
	fail "libdedup.so exports symbols without the dd_ prefix:"
	sed 's/^/    /' "$T/foreign" >&2
else
	ok "exports $(wc -l <"$T/exported") symbols, all dd_*"
fi

# Every DD_API function of the header is defined, and nothing else is
# exported: the shared library's ABI is exactly include/dedup.h.
grep -E '^DD_API' "$DD_SRC/include/dedup.h" |
	sed -E 's/\(.*//; s/.*[^A-Za-z0-9_]([A-Za-z0-9_]+)$/\1/' |
	sort -u >"$T/declared"
comm -23 "$T/declared" "$T/exported" >"$T/undefined"
comm -13 "$T/declared" "$T/exported" >"$T/extra"
if [ -s "$T/undefined" ]; then
	fail "DD_API functions of dedup.h not exported by libdedup.so:"
	sed 's/^/    /' "$T/undefined" >&2
else
	ok "all $(wc -l <"$T/declared") DD_API functions exported"
fi
if [ -s "$T/extra" ]; then
	fail "libdedup.so exports dd_ symbols not declared DD_API in dedup.h:"
	sed 's/^/    /' "$T/extra" >&2
fi

# ---- pkg-config and a program against the installed copy --------------------
export PKG_CONFIG_PATH=$LIBDIR/pkgconfig
unset PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR || true
pc_version=$(pkg-config --modversion libdedup)
hdr_version=$(awk '/^#define DD_VERSION_(MAJOR|MINOR|PATCH) / {printf "%s%s", sep, $3; sep="."}' \
	"$PREFIX/include/dedup.h")
if [ "$pc_version" = "$hdr_version" ]; then ok "pkg-config version $pc_version"
else fail "libdedup.pc says $pc_version, dedup.h says $hdr_version"; fi

# The same tree installed elsewhere at install time finds itself there.
cmake --install "$T/build" --prefix "$T/moved" >"$T/install2.log" 2>&1 ||
	{ cat "$T/install2.log" >&2; fail "cmake --install --prefix"; }
moved_pc=$(find "$T/moved" -name libdedup.pc | head -n 1)
moved_inc=$(PKG_CONFIG_PATH=${moved_pc%/*} pkg-config --variable=includedir libdedup)
if [ -e "$moved_inc/dedup.h" ] && [ "$(readlink -f "$moved_inc")" = "$(readlink -f "$T/moved/include")" ]; then
	ok "libdedup.pc is relocatable (includedir $moved_inc)"
else
	fail "libdedup.pc installed under $T/moved names includedir '$moved_inc'"
fi

cat >"$T/prog.c" <<'C'
#include <dedup.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
	unsigned v = dd_version_number();
	const char *s = dd_version_string();
	if (v != DD_VERSION_NUMBER) {
		fprintf(stderr, "dd_version_number() = %u, header says %u\n",
			v, (unsigned)DD_VERSION_NUMBER);
		return 1;
	}
	if (s == NULL || strlen(s) == 0) {
		fprintf(stderr, "dd_version_string() is empty\n");
		return 1;
	}
	if (strcmp(dd_strerror(DD_ECHECKSUM), "") == 0)
		return 1;
	printf("libdedup %s (%u)\n", s, v);
	return 0;
}
C

# Shared: the documented way, `pkg-config --cflags --libs libdedup`.
# shellcheck disable=SC2046
if $CC -std=c11 -Wall -Werror -o "$T/prog" "$T/prog.c" \
	$(pkg-config --cflags --libs libdedup) 2>"$T/cc.log"; then
	if out=$(LD_LIBRARY_PATH=$LIBDIR "$T/prog"); then
		ok "shared: $out"
	else
		fail "program linked with pkg-config --libs failed to run"
	fi
	# It must have bound to the installed copy, not some other one.
	lib=$(LD_LIBRARY_PATH=$LIBDIR ldd "$T/prog" | awk '$1 == "libdedup.so.0" {print $3}')
	[ "$(readlink -f "$lib")" = "$(readlink -f "$LIBDIR/libdedup.so.0")" ] ||
		fail "program resolved libdedup.so.0 to '$lib', not the installed copy"
else
	cat "$T/cc.log" >&2
	fail "compile/link with pkg-config --cflags --libs libdedup"
fi

# Static: libdedup.a plus `pkg-config --static` (checks Libs.private).
static_libs=$(pkg-config --static --libs-only-l libdedup | sed 's/-ldedup\b//')
# shellcheck disable=SC2046,SC2086
if $CC -std=c11 -Wall -Werror -o "$T/prog-static" "$T/prog.c" \
	$(pkg-config --cflags libdedup) "$LIBDIR/libdedup.a" $static_libs \
	2>"$T/cc-static.log"; then
	if ldd "$T/prog-static" | grep -q libdedup; then
		fail "static program still needs libdedup.so"
	elif out=$("$T/prog-static"); then
		ok "static: $out"
	else
		fail "statically linked program failed to run"
	fi
else
	cat "$T/cc-static.log" >&2
	fail "static link with libdedup.a and pkg-config --static --libs"
fi

# The installed commands run from the prefix, and from a prefix chosen at
# install time, with no LD_LIBRARY_PATH: they find libdedup.so through
# their RUNPATH ($ORIGIN/../lib...), never the build tree.
for p in "$PREFIX" "$T/moved"; do
	for tool in dedup ddsend ddrecv; do
		if out=$(env -u LD_LIBRARY_PATH "$p/bin/$tool" --version 2>&1); then
			ok "${p#"$T"/}/bin/$tool --version: $out"
		else
			fail "installed ${p#"$T"/}/bin/$tool --version failed: $out"
		fi
	done
	lib=$(env -u LD_LIBRARY_PATH ldd "$p/bin/dedup" | awk '$1 == "libdedup.so.0" {print $3}')
	case $(readlink -f "$lib") in
	"$(readlink -f "$p")"/*) ok "${p#"$T"/}/bin/dedup binds its own libdedup.so.0" ;;
	*) fail "${p#"$T"/}/bin/dedup binds libdedup.so.0 at '$lib'" ;;
	esac
done
runpath=$(objdump -p "$PREFIX/bin/dedup" | awk '$1 == "RUNPATH" || $1 == "RPATH" {print $2}')
case $runpath in
*'$ORIGIN'*) ok "bin/dedup RUNPATH $runpath" ;;
*) fail "bin/dedup RUNPATH is '$runpath', not relative to \$ORIGIN" ;;
esac

# A store round trip with the installed commands alone.
if env -u LD_LIBRARY_PATH "$PREFIX/bin/dedup" init "$T/st" 2>"$T/err" &&
   head -c 300000 /dev/urandom >"$T/img" &&
   env -u LD_LIBRARY_PATH "$PREFIX/bin/dedup" put "$T/st@a" "$T/img" 2>>"$T/err" &&
   env -u LD_LIBRARY_PATH "$PREFIX/bin/ddsend" "$T/st@a" 2>>"$T/err" |
	env -u LD_LIBRARY_PATH "$PREFIX/bin/ddrecv" "$T/st2" 2>>"$T/err" &&
   env -u LD_LIBRARY_PATH "$PREFIX/bin/dedup" get "$T/st2@a" "$T/img.back" 2>>"$T/err" &&
   cmp -s "$T/img" "$T/img.back"; then
	ok "installed dedup put, ddsend | ddrecv (a new store), get: exact"
else
	fail "installed commands round trip: $(tail -n 1 "$T/err")"
fi

# The CMake package: no path of this machine's libraries in it, and a
# consumer project links both targets with find_package(dedup).
if grep -nE '(^|[ ";])/[^ ";]*\.(so|a)([ ";]|$)' "$LIBDIR"/cmake/dedup/dedupTargets*.cmake >"$T/abs"; then
	fail "dedupTargets names absolute library paths:"
	sed 's/^/    /' "$T/abs" >&2
else
	ok "dedupTargets names no absolute library path"
fi
mkdir -p "$T/consumer"
cp "$T/prog.c" "$T/consumer/prog.c"
cat >"$T/consumer/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.18)
project(consumer LANGUAGES C)
find_package(dedup CONFIG REQUIRED)
add_executable(prog_shared prog.c)
target_link_libraries(prog_shared PRIVATE dedup::dedup)
add_executable(prog_static prog.c)
target_link_libraries(prog_static PRIVATE dedup::dedup_static)
CM
if cmake -S "$T/consumer" -B "$T/consumer/build" -DCMAKE_PREFIX_PATH="$PREFIX" \
	>"$T/consumer.log" 2>&1 &&
   cmake --build "$T/consumer/build" >>"$T/consumer.log" 2>&1; then
	if out=$(LD_LIBRARY_PATH=$LIBDIR "$T/consumer/build/prog_shared") &&
	   out2=$("$T/consumer/build/prog_static"); then
		ok "find_package(dedup): dedup::dedup ($out), dedup::dedup_static ($out2)"
	else
		fail "find_package(dedup) programs failed to run"
	fi
else
	tail -n 30 "$T/consumer.log" >&2
	fail "a consumer project with find_package(dedup)"
fi

if [ "$fails" -ne 0 ]; then
	echo "test_install: $fails check(s) failed" >&2
	exit 1
fi
echo "test_install: all checks passed"
