#!/usr/bin/env bash
# test_cli_habits.sh -- what a user meets first (issue 20): per-command
# help and `dedup help CMD`, -q everywhere, get refusing a terminal,
# --json summaries of put, get, rm, gc, scrub, ddsend and ddrecv that
# parse (scrub's naming each bad block with its snapshot and offset), the
# resume token in `ls --json`, progress that reaches 100% and is drawn
# with '\r' only on a terminal (a log gets whole lines).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BS=65536
S=$T/s
"$DEDUP" init --block-size $BS --compress none "$S" 2>"$T/err" || fail "init"
gen_random "$T/a" $((3 * 1024 * 1024 + 5000)) habits-a
gen_random "$T/b" $((1024 * 1024)) habits-b
gen_random "$T/c" $((1024 * 1024)) habits-c

# ttyrun.py OUT-FILE FDS CMD...: runs CMD with FDS ("1", "2" or "12") on a
# pseudo-terminal whose output goes to OUT-FILE, the other descriptors
# inherited; exits with CMD's status (ends CMD after 60 s).
cat >"$T/ttyrun.py" <<'EOF'
import os, subprocess, sys
out, fds, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
master, slave = os.openpty()
kw = {}
if '1' in fds:
    kw['stdout'] = slave
if '2' in fds:
    kw['stderr'] = slave
p = subprocess.Popen(cmd, **kw)
os.close(slave)
data = b''
while True:
    try:
        chunk = os.read(master, 65536)
    except OSError:
        break
    if not chunk:
        break
    data += chunk
open(out, 'wb').write(data)
sys.exit(p.wait(timeout=60))
EOF

# ---- help -------------------------------------------------------------------
note "per-command help"
for cmd in init put get ls rm diff prune stat gc scrub repair scan; do
	run "$DEDUP" "$cmd" --help
	assert_rc 0 "$cmd --help"
	assert_empty "$T/err" "$cmd --help stderr"
	assert_grep "^  dedup $cmd" "$T/out" "$cmd --help names $cmd"
	others=$(grep -cE '^  dedup [a-z]+' "$T/out")
	[ "$others" -eq 1 ] || fail "$cmd --help lists $others commands, not one"
	cp "$T/out" "$T/help.$cmd"
	run "$DEDUP" help "$cmd"
	assert_rc 0 "dedup help $cmd"
	assert_same "$T/help.$cmd" "$T/out" "dedup help $cmd = dedup $cmd --help"
done
grep -q -- '--no-cache' "$T/help.put" || fail "put --help lacks the store options"
! grep -q -- '--no-cache' "$T/help.init" || fail "init --help shows store options"
run "$DEDUP" help
assert_rc 0 "dedup help"
[ "$(grep -cE '^  dedup [a-z]+' "$T/out")" -gt 10 ] || fail "dedup help lists every command"
run "$DEDUP" help frob
assert_rc 2 "dedup help of an unknown command"
assert_one_line "dedup help of an unknown command"

# ---- -q -----------------------------------------------------------------------
note "-q, --quiet"
run "$DEDUP" put -q -v "$S@a" "$T/a"
assert_rc 0 "put -q -v"
assert_empty "$T/err" "put -q -v: quiet wins"
run "$DEDUP" --quiet put "$S@a0" "$T/a"
assert_rc 0 "--quiet before the command"
assert_empty "$T/err" "dedup --quiet put"
for c in "gc -q $S" "scrub -q $S" "ls -q $S" "stat -q $S" "rm -q $S@a0"; do
	# shellcheck disable=SC2086
	run "$DEDUP" $c
	assert_rc 0 "$c"
	assert_empty "$T/err" "$c (stderr)"
done
run "$DEDUP" gc -q "$S"
assert_empty "$T/out" "gc -q prints no result line"
"$DDSEND" -q "$S@a" 2>"$T/err" | "$DDRECV" -q -v "$T/q" 2>>"$T/err" || fail "ddsend -q | ddrecv -q"
assert_empty "$T/err" "ddsend -q | ddrecv -q -v"
run "$DEDUP" put "$S@x" "$T/a" -- -q
assert_rc 2 "-q after -- is an argument"

# ---- get refuses a terminal ---------------------------------------------------
note "get refuses a terminal"
set +e
python3 "$T/ttyrun.py" "$T/pty.out" 12 "$DEDUP" get "$S@a"
rc=$?
set -e
[ "$rc" = 1 ] || fail "get to a terminal: exit $rc"
grep -q 'refusing to write a snapshot to a terminal' "$T/pty.out" ||
	fail "get to a terminal: $(head -c 300 "$T/pty.out")"
[ "$(wc -c <"$T/pty.out")" -lt 1000 ] || fail "get wrote the image to the terminal"
# a FILE, or a redirected stdout, still works from a terminal
set +e
python3 "$T/ttyrun.py" "$T/pty.out" 12 "$DEDUP" get "$S@a" "$T/a.tty"
rc=$?
set -e
[ "$rc" = 0 ] || fail "get to a FILE from a terminal: exit $rc"
assert_same "$T/a" "$T/a.tty" "get FILE from a terminal"

# ---- progress: 100% at the end, lines in a log, '\r' on a terminal --------------
note "progress"
"$DDSEND" "$S@a" >"$T/a.dds" 2>"$T/err" || fail "ddsend"
run_in "$T/a.dds" "$DDRECV" -v "$T/p"
assert_rc 0 "ddsend | ddrecv -v into a new store"
assert_grep "created store" "$T/err" "ddrecv -v creates the store"
assert_grep '^ddrecv: 3\.00 MiB / 3\.00 MiB \(100%\)' "$T/err" "ddrecv -v ends at 100%"
! grep -q $'\r' "$T/err" || fail "ddrecv -v into a log wrote '\\r'"
# a small snapshot: fewer than 256 blocks, once stuck at 0%
"$DEDUP" put "$S@small" "$T/b" 2>"$T/err" || fail "put small"
"$DDSEND" "$S@small" | "$DDRECV" -v "$T/p@small" 2>"$T/err" || fail "small receive"
assert_grep '\(100%\)' "$T/err" "a small receive ends at 100%"
for c in "gc -v" "scrub -v"; do
	# shellcheck disable=SC2086
	run "$DEDUP" $c "$S"
	assert_rc 0 "$c"
	assert_grep "^${c% *}: " "$T/err" "$c shows progress"
	! grep -q $'\r' "$T/err" || fail "$c into a log wrote '\\r'"
done
assert_grep '\(100%\)' "$T/err" "scrub -v ends at 100%"
run "$DEDUP" put -v "$S@pv" "$T/a"
assert_grep '\(100%\)' "$T/err" "put -v ends at 100%"
assert_grep 'MiB/s' "$T/err" "rates in MiB/s"
! grep -q 'MB/s' "$T/err" || fail "MB/s beside MiB"
set +e
python3 "$T/ttyrun.py" "$T/pty.out" 2 "$DDRECV" -n -v <"$T/a.dds" >/dev/null
set -e
grep -q $'\r' "$T/pty.out" || fail "progress on a terminal is not redrawn with '\\r'"
# a slow receive into a log: a whole line every 5 seconds, each with the
# rate and an ETA (the stream announces its size), then the last at 100%.
# 8 MiB of 4 KiB blocks reach ddrecv at 1 MiB every 1.5 s (progress is
# heard every 256 blocks, 1 MiB).
"$DEDUP" init --block-size 4K "$T/s4" >/dev/null
gen_random "$T/slow.img" $((8 * 1024 * 1024)) cli-slow
"$DEDUP" put "$T/s4@slow" "$T/slow.img" 2>"$T/err" || fail "put slow.img"
"$DDSEND" "$T/s4@slow" >"$T/slow.dds" 2>"$T/err" || fail "ddsend slow"
python3 -c '
import sys, time
d = open(sys.argv[1], "rb").read()
step = 1 << 20
for i in range(0, len(d), step):
    sys.stdout.buffer.write(d[i:i + step]); sys.stdout.flush(); time.sleep(1.5)
' "$T/slow.dds" | "$DDRECV" -v "$T/s4b@slow" 2>"$T/err" || fail "slow receive"
n=$(grep -c 'MiB/s  ETA [0-9]*:[0-9][0-9]$' "$T/err" || true)
[ "$n" -ge 2 ] || fail "a slow receive into a log: $n progress lines with an ETA, expected 2 or more ($(tr '\n' '|' <"$T/err"))"
[ "$n" -le 3 ] || fail "a slow receive into a log: $n progress lines in ~12 s, expected one per 5 s"
assert_grep '^ddrecv: 8 MiB / 8 MiB \(100%\).*MiB/s  in ' "$T/err" "a slow receive ends at 100%"
! grep -q $'\r' "$T/err" || fail "a slow receive into a log wrote '\\r'"

# ---- --json ---------------------------------------------------------------------
note "--json"
json_ok() { # FILE MESSAGE EXPR
	assert_json "$1" "$2"
	assert_eq true "$(json_get "$1" "$3")" "$2: $3"
}
run "$DEDUP" put --json "$S@j" "$T/a"
assert_rc 0 "put --json"
json_ok "$T/out" "put --json" "j['snapshot'] == 'j' and j['bytes'] == $(stat -c %s "$T/a") and j['new_bytes'] == 0"
run "$DEDUP" put --json "$S@jb" "$T/c"
json_ok "$T/out" "put --json of new data" "j['new_blocks'] == 16 and j['new_bytes'] > $((1024 * 1024))"
run "$DEDUP" get --json "$S@j" "$T/j.back"
assert_rc 0 "get --json FILE"
json_ok "$T/out" "get --json FILE" "j['bytes'] == $(stat -c %s "$T/a")"
assert_same "$T/a" "$T/j.back" "get --json FILE"
run "$DEDUP" get --json "$S@j"
assert_rc 0 "get --json to stdout"
assert_same "$T/a" "$T/out" "get --json keeps stdout for the image"
json_ok "$T/err" "get --json to stdout: the summary on stderr" "j['snapshot'] == 'j'"
run "$DEDUP" rm --json "$S@jb"
json_ok "$T/out" "rm --json" "j == {'snapshot': 'jb', 'removed': True}"
run "$DEDUP" gc --json "$S"
# (the pack stays mostly live: gc leaves it, and frees no bytes yet)
json_ok "$T/out" "gc --json" "isinstance(j['bytes_freed'], int) and j['ddt_entries_removed'] == 16 and set(j) == {'bytes_freed', 'ddt_entries_removed', 'packs_deleted', 'packs_rewritten', 'blocks_moved'}"
run "$DEDUP" scrub --json "$S"
json_ok "$T/out" "scrub --json" "j['bad_blocks'] == 0 and j['bad'] == [] and j['blocks_checked'] > 0"

# ddsend / ddrecv: the summary on stderr or into a file, the stream clean
"$DDSEND" --json "$S@a" 2>"$T/send.json" | cmp -s - "$T/a.dds" ||
	fail "ddsend --json changed the stream"
json_ok "$T/send.json" "ddsend --json" "j['snapshot'] == '$S@a' and j['stream_bytes'] == $(stat -c %s "$T/a.dds") and j['bytes'] == $(stat -c %s "$T/a")"
"$DDSEND" --json="$T/send2.json" "$S@a" 2>"$T/err" | cmp -s - "$T/a.dds" ||
	fail "ddsend --json=FILE changed the stream"
assert_empty "$T/err" "ddsend --json=FILE (stderr)"
json_ok "$T/send2.json" "ddsend --json=FILE" "j['base'] is None"
run_in "$T/a.dds" "$DDRECV" --json "$T/r"
assert_rc 0 "ddrecv --json"
assert_empty "$T/out" "ddrecv --json (stdout)"
json_ok "$T/err" "ddrecv --json" "j['store'] == '$T/r' and j['created'] and j['name'] == 'a' and j['size'] == $(stat -c %s "$T/a")"
run_in "$T/a.dds" "$DDRECV" --json="$T/recv.json" "$T/r@a2"
json_ok "$T/recv.json" "ddrecv --json=FILE" "not j['created'] and j['name'] == 'a2' and j['stream_bytes'] == $(stat -c %s "$T/a.dds")"
run_in "$T/a.dds" "$DDRECV" --json -o "$T/a.raw"
json_ok "$T/err" "ddrecv -o --json" "j['output'] == '$T/a.raw'"
assert_same "$T/a" "$T/a.raw" "ddrecv -o --json"

# scrub --json names each bad block with its snapshot and offset
"$DEDUP" init --block-size $BS --compress none "$T/d" 2>"$T/err" || fail "init d"
"$DEDUP" put "$T/d@x" "$T/b" 2>"$T/err" || fail "put d"
python3 - "$T/d/packs" "$T/b" <<'EOF' || fail "could not damage a pack"
import glob, sys
needle = open(sys.argv[2], 'rb').read()[5 * 65536:5 * 65536 + 64]
for p in glob.glob(sys.argv[1] + '/*.pack'):
    data = bytearray(open(p, 'rb').read())
    i = data.find(needle)
    if i >= 0:
        data[i + 10] ^= 0x5a
        open(p, 'wb').write(data)
        sys.exit(0)
sys.exit(1)
EOF
run "$DEDUP" scrub --json "$T/d"
assert_rc 1 "scrub --json of a damaged store"
assert_one_line "scrub --json of a damaged store"
json_ok "$T/out" "scrub --json, a bad block" "j['bad_blocks'] == 1 and j['bad'][0]['snapshot'] == 'x' and j['bad'][0]['offset'] == 5 * 65536 and j['bad'][0]['error'] == 'DD_ECHECKSUM'"

# the resume token in ls --json
len=$(stat -c %s "$T/a.dds")
head -c $((len / 2)) "$T/a.dds" >"$T/half.dds"
run_in "$T/half.dds" "$DDRECV" -s "$T/r@part"
assert_rc 1 "a cut resumable receive"
token=$(sed -n 's/^ddrecv: resume token: //p' "$T/err")
[ -n "$token" ] || fail "no resume token printed"
run "$DEDUP" ls --json "$T/r"
assert_rc 0 "ls --json with a partial receive"
json_ok "$T/out" "ls --json shows the partial receive" "j[-1] == {'name': None, 'partial': True, 'snapshot': 'part', 'resume_token': '$token'} and [s['name'] for s in j[:-1]] == ['a', 'a2']"
# a second partial receive, of another snapshot: both listed, oldest first
gen_random "$T/other" $((700 * 1024)) habits-other
"$DEDUP" put "$S@other" "$T/other" 2>"$T/err" || fail "put other"
"$DDSEND" "$S@other" >"$T/o.dds" 2>"$T/err" || fail "ddsend other"
head -c $(($(stat -c %s "$T/o.dds") / 2)) "$T/o.dds" >"$T/half2.dds"
run_in "$T/half2.dds" "$DDRECV" -s "$T/r@part2"
assert_rc 1 "a second cut resumable receive"
token2=$(sed -n 's/^ddrecv: resume token: //p' "$T/err")
[ -n "$token2" ] && [ "$token2" != "$token" ] || fail "no second resume token"
run "$DEDUP" ls --json "$T/r"
assert_rc 0 "ls --json with two partial receives"
json_ok "$T/out" "ls --json shows both partial receives" "j[-2:] == [{'name': None, 'partial': True, 'snapshot': 'part', 'resume_token': '$token'}, {'name': None, 'partial': True, 'snapshot': 'part2', 'resume_token': '$token2'}] and [s['name'] for s in j[:-2]] == ['a', 'a2']"
run "$DEDUP" ls "$T/r"
assert_rc 0 "ls with two partial receives"
assert_grep "^partial receive of part: resume with 'ddsend -t $token " "$T/out" "ls names the first partial receive"
assert_grep "^partial receive of part2: resume with 'ddsend -t $token2 " "$T/out" "ls names the second partial receive"
"$DDRECV" -A "$T/r" 2>"$T/err" || fail "ddrecv -A"
run "$DEDUP" ls --json "$T/r"
json_ok "$T/out" "ls --json without a partial receive" "all(not s.get('partial') for s in j)"

note "ok"
