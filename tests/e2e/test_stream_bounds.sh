#!/usr/bin/env bash
# test_stream_bounds.sh -- what a stream claims costs nothing before it is
# checked (format/stream.md §3.1).
#
# A 249-byte stream with valid checksums whose HEADER claims an image of
# 2^62 bytes, all one ZERO record, used to keep `ddrecv -n` and a receive
# into a store hashing 2^48 holes into the content digest (about 100 days).
# It is refused within a second by both, the store left as it was; so is a
# stream one block over the limit of 2^32 blocks.  A zero run within the
# limit (64 GiB of holes) is accepted within a second by both.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

GEN="$DD_SRC/tests/e2e/zero_stream.py"

# within_1s CMD...: runs CMD (stdin as given), fails unless it ended in
# under a second; $RC as run sets it.
within_1s() {
	local t0=$EPOCHREALTIME t1
	run timeout 20 "$@"
	t1=$EPOCHREALTIME
	python3 -c "import sys; sys.exit(0 if $t1 - $t0 < 1.0 else 1)" ||
		fail "$*: took $(python3 -c "print(round($t1 - $t0, 2))") s"
}

python3 "$GEN" "$T/z62.dds" $((1 << 62)) 16384 z
assert_eq 249 "$(stat -c %s "$T/z62.dds")" "size of the 2^62 stream"
python3 "$GEN" "$T/over.dds" $(((1 << 32) * 4096 + 1)) 4096 over
python3 "$GEN" "$T/z36.dds" $((1 << 36)) 1048576 z36

S="$T/s"
"$DEDUP" init --block-size 16K "$S"
gen_random "$T/a.img" 100000 bounds-a
"$DEDUP" put "$S@a" "$T/a.img"
"$DEDUP" ls --json "$S" >"$T/ls.before"

for f in z62 over; do
	note "$f: refused by ddrecv -n and by a receive into a store"
	within_1s sh -c "exec \"\$0\" -n <\"\$1\"" "$DDRECV" "$T/$f.dds"
	assert_rc 1 "ddrecv -n of $f"
	assert_one_line "ddrecv -n of $f"
	assert_grep 'DD_EFORMAT: .*over the limit of 2\^32' "$T/err" "ddrecv -n of $f"
	within_1s sh -c "exec \"\$0\" -q \"\$1\" <\"\$2\"" "$DDRECV" "$S" "$T/$f.dds"
	assert_rc 1 "receive of $f into a store"
	assert_one_line "receive of $f into a store"
	assert_grep 'over the limit of 2\^32' "$T/err" "receive of $f"
	"$DEDUP" ls --json "$S" >"$T/ls.after"
	assert_same "$T/ls.before" "$T/ls.after" "the store after $f"
done

note "64 GiB of holes: accepted within a second"
within_1s sh -c "exec \"\$0\" -n <\"\$1\"" "$DDRECV" "$T/z36.dds"
assert_rc 0 "ddrecv -n of 64 GiB of holes"
S2="$T/s2"
"$DEDUP" init --block-size 1M "$S2"
within_1s sh -c "exec \"\$0\" -q \"\$1\" <\"\$2\"" "$DDRECV" "$S2" "$T/z36.dds"
assert_rc 0 "receive of 64 GiB of holes"
run "$DEDUP" ls --json "$S2"
assert_eq $((1 << 36)) "$(json_get "$T/out" "j[0]['size']")" "size received"
run "$DEDUP" scrub "$S2"
assert_rc 0 "scrub after the zero run"
echo "PASS [$TEST_NAME]"
