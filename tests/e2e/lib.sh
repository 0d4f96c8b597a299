# shellcheck shell=bash
#
# lib.sh -- helpers shared by the end-to-end tests (source it first).
#
# Environment: DD_BIN   directory holding the built commands (required)
#              DD_SRC   the source tree (defaults to this file's ../..)
#
# Provides: $T (a temp dir removed on exit), $DEDUP, fail, note, run,
# assert_eq, assert_rc, assert_one_line, assert_empty, assert_same,
# assert_prefix, gen_random, gen_blocks, json_get, mount_tmpfs, avail.

set -euo pipefail

: "${DD_BIN:?set DD_BIN to the directory holding the built commands}"
DD_SRC=${DD_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
export DEDUP="$DD_BIN/dedup"
export DDSEND="$DD_BIN/ddsend"
export DDRECV="$DD_BIN/ddrecv"
TEST_NAME=$(basename "$0" .sh)
export LC_ALL=C

T=$(mktemp -d "${TMPDIR:-/tmp}/dd-e2e.XXXXXX")
trap 'rm -rf "$T"' EXIT

fail() {
	echo "FAIL [$TEST_NAME]: $*" >&2
	if [ -s "$T/err" ]; then
		echo "  last stderr:" >&2
		head -c 2000 "$T/err" | sed 's/^/    /' >&2
	fi
	exit 1
}

note() {
	echo "--- [$TEST_NAME] $*" >&2
}

# run CMD...: runs CMD with errexit off; sets RC, stdout in $T/out and
# stderr in $T/err.
run() {
	set +e
	"$@" >"$T/out" 2>"$T/err"
	RC=$?
	set -e
}

# run_in FILE CMD...: as run, with stdin from FILE.
run_in() {
	local in=$1
	shift
	set +e
	"$@" <"$in" >"$T/out" 2>"$T/err"
	RC=$?
	set -e
}

# kept_half STREAM STORE: ddrecv -s of STREAM's first half into STORE
# fails and keeps what arrived; sets tok to the resume token it printed.
kept_half() {
	local total
	total=$(stat -c %s "$1")
	run bash -c "head -c $((total / 2)) '$1' | '$DDRECV' -s '$2'"
	assert_rc 1 "the first half of $1, with -s"
	tok=$(grep -o 'ddr1:[0-9a-f]*:[0-9]*' "$T/err" | head -n 1 || true)
	[ -n "$tok" ] || fail "no resume token printed: $(cat "$T/err")"
}

assert_eq() { # EXPECTED ACTUAL MESSAGE
	[ "$1" = "$2" ] || fail "$3: expected '$1', got '$2'"
}

assert_rc() { # EXPECTED MESSAGE  (checks $RC from run)
	[ "$RC" -eq "$1" ] || fail "$2: exit status $RC, expected $1"
}

assert_nonzero() { # MESSAGE
	[ "$RC" -ne 0 ] || fail "$1: exit status 0, expected failure"
}

# stderr of the last run is exactly one non-empty line.
assert_one_line() { # MESSAGE
	local n
	n=$(wc -l <"$T/err")
	if [ "$n" -ne 1 ] || [ -z "$(tr -d '[:space:]' <"$T/err")" ]; then
		fail "$1: expected one line on stderr, got $n"
	fi
	# and it names the program, as "dedup: message"
	grep -q '^[a-z]*: ' "$T/err" || fail "$1: stderr line lacks 'PROG: '"
}

assert_empty() { # FILE MESSAGE
	[ ! -s "$1" ] || fail "$2: $(basename "$1") not empty"
}

assert_same() { # FILE1 FILE2 MESSAGE
	cmp -s "$1" "$2" || fail "$3: $1 and $2 differ"
}

assert_grep() { # ERE FILE MESSAGE
	grep -Eq -- "$1" "$2" || fail "$3: /$1/ not found in $(basename "$2")"
}

# the bytes of FILE are a prefix (possibly empty) of ORIG.
assert_prefix() { # FILE ORIG MESSAGE
	python3 - "$1" "$2" <<'EOF' || fail "$3: output is not a prefix of the original"
import sys
out = open(sys.argv[1], 'rb').read()
orig = open(sys.argv[2], 'rb').read()
sys.exit(0 if orig[:len(out)] == out else 1)
EOF
}

# gen_random FILE SIZE SEED: SIZE deterministic pseudo-random bytes.
gen_random() {
	python3 - "$1" "$2" "$3" <<'EOF'
import random, sys
path, size, seed = sys.argv[1], int(sys.argv[2]), sys.argv[3]
r = random.Random(seed)
with open(path, 'wb') as f:
    left = size
    while left > 0:
        n = min(left, 1 << 20)
        f.write(r.randbytes(n))
        left -= n
EOF
}

# gen_blocks FILE BS SPEC...: concatenates blocks of BS bytes.  Each SPEC is
#   N        distinct pseudo-random block number N (same N, same bytes)
#   z        a block of zeros
#   zN       N zero bytes (a short or unaligned run)
#   tN:S     N pseudo-random bytes from seed S (a short tail)
gen_blocks() {
	python3 - "$@" <<'EOF'
import random, sys
path, bs, specs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
with open(path, 'wb') as f:
    for s in specs:
        if s == 'z':
            f.write(bytes(bs))
        elif s.startswith('z'):
            f.write(bytes(int(s[1:])))
        elif s.startswith('t'):
            n, seed = s[1:].split(':')
            f.write(random.Random('tail-' + seed).randbytes(int(n)))
        else:
            f.write(random.Random('block-%d' % int(s)).randbytes(bs))
EOF
}

# json_get FILE EXPR: evaluates a Python expression on the parsed JSON `j`.
json_get() {
	python3 - "$1" "$2" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
v = eval(sys.argv[2], {'j': j})
print(json.dumps(v) if isinstance(v, (dict, list, bool)) or v is None else v)
EOF
}

assert_json() { # FILE MESSAGE
	python3 -m json.tool "$1" >/dev/null 2>&1 || fail "$2: not valid JSON"
}

# get_until ORIG STATS EXPR GET-ARGS...: runs `dedup get --stats STATS
# GET-ARGS` (whose output file, the last argument, must equal ORIG) up to
# five times, until the stats' JSON expression EXPR is at least 1: the L2
# index is rebuilt in the background, and on a loaded machine a whole get
# can finish before it.  UNTIL is EXPR's last value.
get_until() {
	local orig=$1 stats=$2 expr=$3 try
	shift 3
	for try in 1 2 3 4 5; do
		run "$DEDUP" get --stats "$stats" "$@"
		assert_rc 0 "get $* (try $try)"
		assert_same "$orig" "${*: -1}" "get $* (try $try)"
		UNTIL=$(json_get "$stats" "$expr")
		[ "$UNTIL" -ge 1 ] && return 0
	done
	return 0
}

# flip_record STORE FILE OFFSET...: flips a byte inside the stored record of
# the block of FILE at each OFFSET (found by its bytes in the packs: a
# store without compression).
flip_record() {
	python3 - "$@" <<'EOF'
import glob, os, sys
store, src, offs = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3:]]
data = open(src, 'rb').read()
for off in offs:
    needle = data[off:off + 64]
    for p in sorted(glob.glob(os.path.join(store, 'packs', '*.pack'))):
        b = bytearray(open(p, 'rb').read())
        i = b.find(needle)
        if i >= 0:
            b[i + 32] ^= 0x5a
            open(p, 'wb').write(b)
            break
    else:
        sys.exit('no record holds the block at %d' % off)
EOF
}

[ -x "$DEDUP" ] || fail "$DEDUP not built"

# mount_tmpfs SIZE: mounts a tmpfs of SIZE (as mount's size=) at $M
# ($T/mnt), unmounted before $T is removed, and defines avail (its free
# bytes).  Without the right to mount (not root) it prints SKIP and ends
# the test with status 0.
mount_tmpfs() {
	M="$T/mnt"
	mkdir -p "$M"
	if ! mount -t tmpfs -o "size=$1,mode=0755" tmpfs "$M" 2>"$T/mount.err"; then
		echo "SKIP [$TEST_NAME]: cannot mount tmpfs ($(head -n1 "$T/mount.err"))"
		exit 0
	fi
	trap 'umount "$M" 2>/dev/null || umount -l "$M" 2>/dev/null; rm -rf "$T"' EXIT
}
avail() { df -B1 --output=avail "$M" | tail -n1 | tr -d ' '; }
