#!/usr/bin/env bash
# test_outputs.sh -- outputs look whole only once they are.
#
# `ddrecv -o FILE` and `dedup get SNAP FILE` write a regular file under a
# temporary name beside it (.FILE.ddtmp.PID) and rename it at the end:
# - a ddrecv -o killed mid-stream leaves no file of the final name (and an
#   older file of that name as it was);
# - a get that fails (a damaged block) leaves an existing FILE unchanged and
#   no temporary file behind; one that succeeds replaces it;
# - the temporary file a killed one left is removed by the next output to
#   the same FILE, unless a process of its PID runs; another FILE's stays.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MIB=$((1024 * 1024))
S="$T/s"
"$DEDUP" init --compress none --block-size 64K "$S"
gen_random "$T/a.img" $((8 * MIB)) out-a
"$DEDUP" put "$S@a" "$T/a.img"
"$DDSEND" "$S@a" >"$T/a.dds"

# kill_mid_stream OUT: ddrecv -o OUT fed half the stream, then killed.
kill_mid_stream() {
	local fifo="$T/fifo" pid
	rm -f "$fifo"
	mkfifo "$fifo"
	"$DDRECV" -q -o "$1" <"$fifo" 2>"$T/err" &
	pid=$!
	exec 7>"$fifo"
	head -c $((4 * MIB)) "$T/a.dds" >&7
	sleep 1
	kill -KILL "$pid"
	wait "$pid" 2>/dev/null || true
	exec 7>&-
}

note "an interrupted ddrecv -o to a new file"
kill_mid_stream "$T/new.img"
[ ! -e "$T/new.img" ] || fail "a killed ddrecv -o left a file of the final name"
ls -a "$T" | grep -q '^\.new\.img\.ddtmp\.' ||
	fail "no temporary file left by the killed ddrecv -o (was it interrupted?)"

note "an interrupted ddrecv -o over an existing file"
gen_random "$T/old.img" 12345 out-old
cp "$T/old.img" "$T/keep.img"
kill_mid_stream "$T/old.img"
assert_same "$T/keep.img" "$T/old.img" "the existing file after a killed ddrecv -o"

note "a whole ddrecv -o replaces it, and removes what a killed one left"
ls -a "$T" | grep -q '^\.old\.img\.ddtmp\.' ||
	fail "no temporary file left by the killed ddrecv -o over old.img"
sleep 600 &
live=$!
echo running >"$T/.old.img.ddtmp.$live"    # as if a running ddrecv wrote it
run_in "$T/a.dds" "$DDRECV" -q -o "$T/old.img"
assert_rc 0 "ddrecv -o"
assert_same "$T/a.img" "$T/old.img" "ddrecv -o output"
[ "$(cat "$T/.old.img.ddtmp.$live")" = running ] ||
	fail "the temporary file of a running process was removed"
kill "$live"
wait "$live" 2>/dev/null || true
rm "$T/.old.img.ddtmp.$live"
ls -a "$T" | grep -q '^\.old\.img\.ddtmp\.' &&
	fail "a temporary file left after a whole ddrecv -o"
ls -a "$T" | grep -q '^\.new\.img\.ddtmp\.' ||
	fail "another output's temporary file was removed"
run "$DEDUP" get "$S@a" "$T/new.img"
assert_rc 0 "get to new.img"
assert_same "$T/a.img" "$T/new.img" "get output"
ls -a "$T" | grep -q '^\.new\.img\.ddtmp\.' &&
	fail "get left the killed ddrecv's temporary file of new.img"

note "a failed get over an existing file"
cp "$T/keep.img" "$T/x.img"
# damage a payload byte of the pack's last record
pack="$S/packs/00000001.pack"
size=$(stat -c %s "$pack")
printf '\377' | dd of="$pack" bs=1 seek=$((size - 100)) conv=notrunc 2>/dev/null
run "$DEDUP" get "$S@a" "$T/x.img"
assert_rc 1 "get of a damaged snapshot"
assert_one_line "get of a damaged snapshot"
assert_same "$T/keep.img" "$T/x.img" "the existing file after a failed get"
ls -a "$T" | grep -q '^\.x\.img\.ddtmp\.' && fail "a failed get left its temporary file"
run "$DEDUP" get "$S@a" "$T/y.img"
assert_rc 1 "get of a damaged snapshot to a new file"
[ ! -e "$T/y.img" ] || fail "a failed get left a file it created"
echo "PASS [$TEST_NAME]"
