#!/usr/bin/env bash
# test_embed_example.sh -- docs/examples/embed_example.c, the program the
# embedding guide (docs/embedding.md) takes its snippets from, compiles as
# strict C99 (-std=c99 -pedantic -Werror) against include/dedup.h and the
# library of this build tree, and runs to exit 0: create, write (copying
# and zero-copy), read from two threads, send and receive through memory
# and a file descriptor, cancel, list, delete, gc, scrub.
#
# Environment: DD_BIN (the build's bin dir; the library is in DD_BIN/..),
# DD_SRC (source dir), CC (default: the build's C compiler, else cc).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BUILD=$(cd "$DD_BIN/.." && pwd)
EXAMPLE=$DD_SRC/docs/examples/embed_example.c
[ -f "$EXAMPLE" ] || fail "$EXAMPLE missing"
[ -e "$BUILD/libdedup.so" ] || fail "$BUILD/libdedup.so not built"

cache_get() { # VAR: a value from the build's CMakeCache.txt
	sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt" 2>/dev/null | head -n 1
}
CC=${CC:-$(cache_get CMAKE_C_COMPILER)}
CC=${CC:-cc}
flags=()
# A sanitizer build's libdedup.so needs the sanitizer runtime in the program.
if [ "$(cache_get DD_SANITIZE)" = ON ]; then
	flags+=(-fsanitize=address,undefined -fno-sanitize-recover=all)
fi

note "compile with $CC -std=c99 -Wall -Wextra -pedantic -Werror ${flags[*]}"
run "$CC" -std=c99 -Wall -Wextra -pedantic -Werror "${flags[@]}" \
	-I"$DD_SRC/include" "$EXAMPLE" -L"$BUILD" -ldedup \
	-Wl,-rpath,"$BUILD" -o "$T/embed_example"
assert_rc 0 "compile docs/examples/embed_example.c"

note "run"
run env TMPDIR="$T" "$T/embed_example"
assert_rc 0 "embed_example"
assert_empty "$T/err" "embed_example stderr"
assert_grep '^ok$' "$T/out" "embed_example output"
assert_grep '^received tuesday on monday: ' "$T/out" "incremental receive"
assert_grep '^cancelled send: DD_ECANCELED' "$T/out" "cancellation"
assert_grep '^refused receive: DD_EBLOCKSIZE' "$T/out" "a refused receive over a socketpair"
assert_grep '^its sender: DD_EIO: .*Broken pipe' "$T/out" "its sender fails, neither killed nor blocked"
# it removes its temporary stores
! ls -d "$T"/dd-embed-* >/dev/null 2>&1 || fail "embed_example left $(ls -d "$T"/dd-embed-*)"
note "ok"
