#!/usr/bin/env bash
# test_stream_resume.sh -- resumable receive: a stream cut at several
# points is received with `ddrecv -s`, which keeps what arrived and prints
# a token; `dedup ls` shows it; `ddsend -t TOKEN` sends the rest and the
# snapshot reads back exact.  Also: a token of another snapshot is
# refused, `ddrecv -A` drops a partial receive and gc then reclaims it,
# and a plain (not -s) receive that is cut leaves nothing behind; a put
# into the name of a kept partial is refused, a whole receive into it
# commits and drops the partial.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DDSEND=$DD_BIN/ddsend
DDRECV=$DD_BIN/ddrecv
S=$T/s S2=$T/s2
"$DEDUP" init --block-size 65536 "$S" 2>"$T/err" || fail "init"
# random blocks, a run of zeros, repeats, and a short tail
gen_random "$T/r" $((6 * 1024 * 1024)) resume
{ cat "$T/r"; head -c 1048576 /dev/zero; head -c 2097152 "$T/r";
  head -c 1000 "$T/r"; } >"$T/a"
"$DEDUP" put "$S@a" "$T/a" 2>"$T/err" || fail "put a"
"$DDSEND" "$S@a" >"$T/a.dds" 2>"$T/err" || fail "ddsend"
total=$(stat -c %s "$T/a.dds")

token_of() { grep -o 'ddr1:[0-9a-f]*:[0-9]*' "$1" | head -n 1 || true; }
unique_blocks() { "$DEDUP" stat --json "$1" >"$T/stat.json" && json_get "$T/stat.json" 'j["unique_blocks"]'; }

for cut in 70000 $((total / 3)) $((total * 2 / 3)) $((total - 10)); do
	note "cut at byte $cut of $total"
	rm -rf "$S2"
	"$DEDUP" init --block-size 65536 "$S2" 2>"$T/err" || fail "init s2"
	run bash -c "head -c $cut '$T/a.dds' | '$DDRECV' -s '$S2'"
	assert_rc 1 "cut stream with -s"
	tok=$(token_of "$T/err")
	[ -n "$tok" ] || fail "no resume token printed (cut $cut): $(cat "$T/err")"
	"$DEDUP" ls "$S2" >"$T/ls" 2>&1 || fail "ls after a cut"
	[ "$(token_of "$T/ls")" = "$tok" ] || fail "dedup ls does not show the token"
	grep -q '^a ' "$T/ls" && fail "a partial receive is listed as a snapshot"
	# the rest, from the block the token names
	run bash -c "'$DDSEND' -t '$tok' '$S@a' | '$DDRECV' -s '$S2'"
	assert_rc 0 "resumed receive (cut $cut)"
	"$DEDUP" get "$S2@a" "$T/a.back" 2>"$T/err" || fail "get after resume"
	assert_same "$T/a" "$T/a.back" "resumed snapshot (cut $cut)"
	"$DEDUP" ls "$S2" >"$T/ls" 2>&1
	grep -q 'ddr1:' "$T/ls" && fail "token still listed after the resume"
	"$DEDUP" scrub "$S2" >/dev/null 2>"$T/err" || fail "scrub after resume"
done

# The partial receive's block map waits while other writers commit
# theirs: a put between the cut and the resume (and one running during
# the resumed receive) must not get in its way.
note "resume after other writers committed"
rm -rf "$S2"
"$DEDUP" init --block-size 65536 "$S2" 2>"$T/err" || fail "init s2"
run bash -c "head -c $((total / 2)) '$T/a.dds' | '$DDRECV' -s '$S2'"
assert_rc 1 "cut stream with -s"
tok=$(token_of "$T/err")
[ -n "$tok" ] || fail "no resume token printed: $(cat "$T/err")"
gen_random "$T/other" $((3 * 1024 * 1024)) resume-other
"$DEDUP" put "$S2@other" "$T/other" 2>"$T/err" || fail "put between cut and resume"
mkfifo "$T/slowput"
"$DEDUP" put "$S2@during" "$T/slowput" 2>"$T/during.err" &
dpid=$!
exec 9>"$T/slowput"
head -c 1000000 "$T/other" >&9
run bash -c "'$DDSEND' -t '$tok' '$S@a' | '$DDRECV' -s '$S2'"
assert_rc 0 "resumed receive after another writer committed"
head -c 2000000 "$T/r" >&9
exec 9>&-
wait "$dpid" || fail "the put during the resume failed: $(cat "$T/during.err")"
"$DEDUP" get "$S2@a" "$T/a.back" 2>"$T/err" || fail "get after resume"
assert_same "$T/a" "$T/a.back" "snapshot resumed after another writer"
"$DEDUP" get "$S2@other" "$T/other.back" 2>"$T/err" || fail "get other"
assert_same "$T/other" "$T/other.back" "the snapshot put in between"
{ head -c 1000000 "$T/other"; head -c 2000000 "$T/r"; } >"$T/during"
"$DEDUP" get "$S2@during" "$T/during.back" 2>"$T/err" || fail "get during"
assert_same "$T/during" "$T/during.back" "the snapshot put during the resume"
"$DEDUP" scrub "$S2" >/dev/null 2>"$T/err" || fail "scrub after the resume"

note "a token of another snapshot is refused"
gen_random "$T/b" 300000 other
"$DEDUP" put "$S@b" "$T/b" 2>"$T/err" || fail "put b"
rm -rf "$S2"
"$DEDUP" init --block-size 65536 "$S2" 2>"$T/err"
run bash -c "head -c $((total / 2)) '$T/a.dds' | '$DDRECV' -s '$S2'"
tok=$(token_of "$T/err")
run "$DDSEND" -t "$tok" "$S@b"
assert_rc 1 "ddsend -t with the token of another snapshot"
assert_one_line "ddsend -t wrong snapshot"

note "ddrecv -A drops the partial receive; gc reclaims it"
run "$DDRECV" -A "$S2"
assert_rc 0 "ddrecv -A"
"$DEDUP" ls "$S2" >"$T/ls" 2>&1
grep -q 'ddr1:' "$T/ls" && fail "token listed after ddrecv -A"
"$DEDUP" gc "$S2" >/dev/null 2>"$T/err" || fail "gc after -A"
blocks=$(unique_blocks "$S2")
assert_eq 0 "$blocks" "unique blocks after -A and gc"
run "$DDRECV" -A "$S2"
assert_rc 1 "ddrecv -A with nothing to drop"

note "a stream cut inside its header: nothing to resume"
rm -rf "$S2"
"$DEDUP" init --block-size 65536 "$S2" 2>"$T/err"
run bash -c "head -c 100 '$T/a.dds' | '$DDRECV' -s '$S2'"
assert_rc 1 "stream cut in its header"
assert_one_line "stream cut in its header"

note "a cut receive without -s leaves nothing"
run bash -c "head -c $((total / 2)) '$T/a.dds' | '$DDRECV' '$S2'"
assert_rc 1 "cut stream without -s"
[ -z "$(token_of "$T/err")" ] || fail "token printed without -s"
"$DEDUP" ls "$S2" >"$T/ls" 2>&1
grep -q 'ddr1:' "$T/ls" && fail "partial kept without -s"
"$DEDUP" gc "$S2" >/dev/null 2>"$T/err" || fail "gc"
blocks=$(unique_blocks "$S2")
assert_eq 0 "$blocks" "unique blocks after a failed plain receive and gc"

note "a whole receive into the name of a kept partial drops it"
rm -rf "$S2"
"$DEDUP" init --block-size 65536 "$S2" 2>"$T/err"
run bash -c "head -c $((total / 2)) '$T/a.dds' | '$DDRECV' -s '$S2'"
assert_rc 1 "cut stream with -s"
[ -n "$(token_of "$T/err")" ] || fail "no resume token printed"
run "$DEDUP" put "$S2@a" "$T/a"
assert_rc 1 "put into the name of a kept partial receive"
assert_one_line "put into the name of a kept partial receive"
assert_grep 'DD_EEXIST: .*kept for resuming' "$T/err" "put names the kept receive"
run_in "$T/a.dds" "$DDRECV" "$S2"
assert_rc 0 "a whole receive into the name of a kept partial"
"$DEDUP" get "$S2@a" "$T/a.back" 2>"$T/err" || fail "get after the whole receive"
assert_same "$T/a" "$T/a.back" "the whole receive's snapshot"
"$DEDUP" ls --json "$S2" >"$T/ls" 2>&1 || fail "ls --json"
json_get "$T/ls" "[s['name'] for s in j]" >"$T/names"
assert_eq '["a"]' "$(cat "$T/names")" "ls after the whole receive: a, no partial"
run "$DDRECV" -A "$S2"
assert_rc 1 "ddrecv -A: the partial is gone already"
"$DEDUP" gc "$S2" >/dev/null 2>"$T/err" || fail "gc after the whole receive"
"$DEDUP" scrub "$S2" >/dev/null 2>"$T/err" || fail "scrub after the whole receive"
"$DEDUP" get "$S2@a" "$T/a.back" 2>"$T/err" || fail "get after gc"
assert_same "$T/a" "$T/a.back" "the whole receive's snapshot after gc"

echo "test_stream_resume: ok"
