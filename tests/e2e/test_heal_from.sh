#!/usr/bin/env bash
# test_heal_from.sh -- `dedup repair --from SOURCE` (issue 21): damaged
# (scrub flagged) and lost (repair flagged) blocks healed by hash from
# another store, or from a ddsend stream on stdin; a block the source
# lacks stays reported (exit 1); a damaged stream changes nothing.
#
# Stores use --compress none, so a block's bytes are found verbatim in its
# pack and one flipped byte damages exactly that record.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BS=4096

gen_random "$T/a.img" $((1024 * 1024 + 1000)) hf-a
gen_random "$T/x.img" $((64 * 1024)) hf-x
cat "$T/x.img" "$T/a.img" >"$T/c.img"   # a's blocks again, shifted
A5=$((5 * BS))
A9=$((9 * BS))
X3=$((3 * BS))

# ---- from another store --------------------------------------------------
note "repair --from a store heals damaged blocks"
A="$T/A"
B="$T/B"
"$DEDUP" init --block-size $BS --compress none "$A"
"$DEDUP" put "$A@a" "$T/a.img"
"$DEDUP" put "$A@c" "$T/c.img"
"$DEDUP" init --block-size $BS "$B"     # compressed: copies are read, not cp'd
"$DEDUP" put "$B@good" "$T/a.img"
flip_record "$A" "$T/a.img" $A5 $A9
run "$DEDUP" scrub "$A"
assert_rc 1 "scrub flags the damaged blocks"
cp -a "$A" "$T/A.damaged"
run "$DEDUP" repair --from "$B" "$A"
assert_rc 0 "repair --from B"
assert_eq 2 "$(grep -c '^healed: block ' "$T/out")" "two blocks healed"
assert_grep "^repair: 2 blocks healed from .*, 0 still damaged or lost\$" \
	"$T/out" "repair --from's summary"
for n in a c; do
	run "$DEDUP" get "$A@$n" "$T/got"
	assert_rc 0 "get $n after repair --from"
	want="$T/a.img"; [ $n = c ] && want="$T/c.img"
	assert_same "$T/got" "$want" "$n exact after repair --from"
done
run "$DEDUP" scrub "$A"
assert_rc 0 "scrub clean after repair --from"
# nothing left: a second run heals nothing and exits 0
run "$DEDUP" repair --from "$B" "$A"
assert_rc 0 "repair --from with nothing to heal"
assert_grep "^repair: 0 blocks healed" "$T/out" "nothing to heal"
# gc keeps the fresh copies and drops the damaged records
"$DEDUP" gc "$A" >/dev/null
run "$DEDUP" get "$A@a" "$T/got"
assert_same "$T/got" "$T/a.img" "exact after gc"
run "$DEDUP" scrub "$A"
assert_rc 0 "scrub clean after gc"

# ---- from a stream on stdin -----------------------------------------------
note "repair --from - heals from a ddsend stream"
A2="$T/A2"
cp -a "$T/A.damaged" "$A2"
"$DDSEND" "$B@good" >"$T/good.stream"
run_in "$T/good.stream" "$DEDUP" repair --from - "$A2"
assert_rc 0 "repair --from - (stream)"
assert_grep "^repair: 2 blocks healed from the stream, 0 still" "$T/out" \
	"repair --from -'s summary"
run "$DEDUP" get "$A2@a" "$T/got"
assert_rc 0 "get a after repair --from -"
assert_same "$T/got" "$T/a.img" "a exact after repair --from -"
run "$DEDUP" scrub "$A2"
assert_rc 0 "scrub clean after repair --from -"
# the same through a pipe
A2b="$T/A2b"
cp -a "$T/A.damaged" "$A2b"
"$DDSEND" "$B@good" | "$DEDUP" repair --from - "$A2b" >"$T/out"
assert_grep "^repair: 2 blocks healed" "$T/out" "ddsend | dedup repair --from -"
run "$DEDUP" get "$A2b@c" "$T/got"
assert_same "$T/got" "$T/c.img" "c exact after a piped heal"

# ---- a damaged stream: one line, the store as it was -----------------------
note "repair --from - with a damaged stream changes nothing"
A3="$T/A3"
cp -a "$T/A.damaged" "$A3"
python3 - "$T/good.stream" "$T/bad.stream" <<'EOF'
import sys
b = bytearray(open(sys.argv[1], 'rb').read())
b[len(b) - 40] ^= 0x01          # inside END: the stream digest fails
open(sys.argv[2], 'wb').write(b)
EOF
run_in "$T/bad.stream" "$DEDUP" repair --from - "$A3"
assert_nonzero "repair --from a damaged stream"
assert_one_line "repair --from a damaged stream"
run "$DEDUP" get "$A3@a" "$T/got"
assert_nonzero "still damaged after a refused stream"
run "$DEDUP" scrub "$A3"
assert_rc 1 "scrub still finds the damaged blocks"
assert_grep "scrub found 2 bad blocks" "$T/err" "the same two"

# ---- a block the source lacks stays reported -------------------------------
note "repair --from: what the source lacks stays damaged, exit 1"
A4="$T/A4"
cp -a "$T/A.damaged" "$A4"
flip_record "$A4" "$T/c.img" $X3             # x's block: B never had it
"$DEDUP" scrub "$A4" >/dev/null 2>&1 && fail "scrub missed x's block"
run "$DEDUP" repair --from "$B" "$A4"
assert_rc 1 "repair --from B lacking a block"
assert_eq 2 "$(grep -c '^healed: block ' "$T/out")" "two healed"
xh=$(python3 -c "import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],'rb').read()[$X3:$X3+$BS]).hexdigest())" "$T/x.img")
assert_grep "^missing: block $xh \\($BS bytes\\)\$" "$T/out" "the block B lacks is named"
assert_grep "^repair: 2 blocks healed from .*, 1 still damaged or lost\$" \
	"$T/out" "the summary counts it"
assert_grep "1 block still damaged or lost" "$T/err" "exit 1 says why"
run "$DEDUP" get "$A4@a" "$T/got"
assert_rc 0 "a reads again"
assert_same "$T/got" "$T/a.img" "a exact"
run "$DEDUP" get "$A4@c" "$T/got"
assert_nonzero "c still lacks x's block"
run "$DEDUP" repair --json --from "$B" "$A4"
assert_rc 1 "repair --json --from"
assert_json "$T/out" "repair --json --from"
assert_eq "1 0 [False]" \
	"$(json_get "$T/out" "'%d %d %s' % (j['missing'], j['healed'], [b['healed'] for b in j['blocks']])")" \
	"repair --json --from"

# ---- lost blocks (repair --verify flags them MISSING) ----------------------
note "repair --from heals lost blocks"
A5s="$T/A5"
cp -a "$T/A.damaged" "$A5s"
run "$DEDUP" repair --verify "$A5s"
assert_rc 1 "repair --verify finds the blocks lost"
run "$DEDUP" repair --from "$B" "$A5s"
assert_rc 0 "repair --from heals the lost blocks"
assert_grep "^repair: 2 blocks healed" "$T/out" "two lost blocks healed"
run "$DEDUP" get "$A5s@c" "$T/got"
assert_same "$T/got" "$T/c.img" "c exact after healing lost blocks"
run "$DEDUP" scrub "$A5s"
assert_rc 0 "scrub clean after healing lost blocks"

# ---- usage -------------------------------------------------------------------
run "$DEDUP" repair --from "$B" --verify "$A"
assert_nonzero "--from with --verify"
run "$DEDUP" repair --from "$T/nostore" "$A"
assert_nonzero "--from a store that is not there"
assert_one_line "--from a store that is not there"

note "ok"
