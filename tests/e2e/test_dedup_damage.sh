#!/usr/bin/env bash
# test_dedup_damage.sh -- damaged stores: flipped pack bytes (get, ddsend,
# scrub), a truncated pack, a newer format version; and gc giving space
# back.
#
# Invariant 2 (DESIGN.md): never return wrong bytes.  A failing `get` may
# have written a prefix of the image to stdout, never anything else.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BS=4096

# flip.py PACKDIR NEEDLE-FILE NEEDLE-OFFSET: flips one byte of the first
# pack that holds the 64 bytes at NEEDLE-OFFSET of NEEDLE-FILE (stored
# verbatim with --compress none); else one byte in the middle of the
# largest pack.  Prints what it did.
cat >"$T/flip.py" <<'EOF'
import glob, os, sys
packdir, src, off = sys.argv[1], sys.argv[2], int(sys.argv[3])
needle = open(src, 'rb').read()[off:off + 64]
packs = sorted(glob.glob(os.path.join(packdir, '*.pack')))
if not packs:
    sys.exit('no pack files in ' + packdir)
target = None
for p in packs:
    data = open(p, 'rb').read()
    i = data.find(needle)
    if i >= 0:
        target = (p, i + 32, 'found')
        break
if target is None:
    p = max(packs, key=os.path.getsize)
    target = (p, os.path.getsize(p) // 2, 'fallback')
p, pos, how = target
with open(p, 'r+b') as f:
    f.seek(pos)
    b = f.read(1)
    f.seek(pos)
    f.write(bytes([b[0] ^ 0x5a]))
print('%s %s at %d' % (how, os.path.basename(p), pos))
EOF

# ---- flipped bytes in a pack payload --------------------------------------------
note "flipped pack bytes"
S="$T/s"
"$DEDUP" init --block-size $BS --compress none "$S"
# 10 MiB + a bit, so a damaged block late in the image sits after a whole
# 8 MiB read chunk: the output before it may be written, nothing after it.
gen_random "$T/a.img" $((10 * 1024 * 1024 + 300)) damage-a
gen_random "$T/b.img" $((256 * 1024)) damage-b
"$DEDUP" put "$S@a" "$T/a.img"
"$DEDUP" put "$S@b" "$T/b.img"
ls "$S"/packs/*.pack >/dev/null 2>&1 || fail "no $S/packs/*.pack after put"
bad_off=$((9 * 1024 * 1024 + 5 * BS))
python3 "$T/flip.py" "$S/packs" "$T/a.img" $bad_off >"$T/flip.log" ||
	fail "could not damage a pack"
note "damaged $(cat "$T/flip.log")"

run "$DEDUP" get "$S@a"
assert_nonzero "get of a damaged snapshot to stdout"
assert_one_line "get of a damaged snapshot"
assert_grep 'DD_ECHECKSUM|DD_ECORRUPT' "$T/err" "get of a damaged snapshot names the error"
assert_prefix "$T/out" "$T/a.img" "get of a damaged snapshot"
[ "$(stat -c %s "$T/out")" -lt "$(stat -c %s "$T/a.img")" ] ||
	fail "get of a damaged snapshot wrote the whole image"

run "$DEDUP" get "$S@a" "$T/restored"
assert_nonzero "get of a damaged snapshot to a file"
assert_one_line "get of a damaged snapshot to a file"
[ ! -e "$T/restored" ] || fail "a failed get left a partial output file"

# ddsend checks what it sends, as get does: the damage stops the stream
# at the sender, with an error, never a stream that only fails on receive
run "$DDSEND" "$S@a"
assert_rc 1 "ddsend of a damaged snapshot"
assert_one_line "ddsend of a damaged snapshot"
assert_grep 'DD_ECHECKSUM' "$T/err" "ddsend of a damaged snapshot names the error"
run "$DDSEND" "$S@b"
assert_rc 0 "ddsend of an undamaged snapshot"

# an undamaged snapshot in the same store still reads back exact
run "$DEDUP" get "$S@b"
assert_rc 0 "get of an undamaged snapshot"
assert_same "$T/b.img" "$T/out" "undamaged snapshot"

run "$DEDUP" scrub "$S"
assert_rc 1 "scrub of a damaged store"
assert_grep '^bad block [0-9a-f]{64} \(pack [0-9]+, off [0-9]+\): DD_E(CHECKSUM|CORRUPT); used by a at offset [0-9]+$' \
	"$T/out" "scrub names the bad block and its snapshot"
grep -q 'used by b ' "$T/out" && fail "scrub blames the undamaged snapshot"
assert_grep '^scrub: ' "$T/out" "scrub summary line"
assert_one_line "scrub of a damaged store (stderr)"
# the reported offset is the damaged block's (when the flip hit its bytes)
if grep -q '^found ' "$T/flip.log"; then
	off=$(sed -n 's/.*used by a at offset \([0-9]*\)$/\1/p' "$T/out" | head -n1)
	assert_eq $((bad_off / BS)) $((off / BS)) "block reported by scrub"
fi

# ---- a truncated pack -------------------------------------------------------------
note "truncated pack"
S2="$T/s2"
"$DEDUP" init --block-size $BS "$S2"
gen_random "$T/c.img" $((512 * 1024)) damage-c
"$DEDUP" put "$S2@c" "$T/c.img"
packs=("$S2"/packs/*.pack)
pack=${packs[0]}
[ -f "$pack" ] || fail "no pack in $S2/packs"
truncate -s $(($(stat -c %s "$pack") / 2)) "$pack"
run "$DEDUP" get "$S2@c"
assert_nonzero "get with a truncated pack"
assert_one_line "get with a truncated pack"
assert_prefix "$T/out" "$T/c.img" "get with a truncated pack"
[ "$(stat -c %s "$T/out")" -lt "$(stat -c %s "$T/c.img")" ] ||
	fail "get with a truncated pack wrote the whole image"
run "$DEDUP" scrub "$S2"
assert_nonzero "scrub with a truncated pack"

# ---- a newer format version ----------------------------------------------------
note "newer format"
S3="$T/s3"
"$DEDUP" init "$S3"
"$DEDUP" put "$S3@x" "$T/b.img"
grep -qx 'format 4' "$S3/DEDUP" || fail "$S3/DEDUP has no 'format 4' line"
sed -i 's/^format 4$/format 99/' "$S3/DEDUP"
for cmd in "ls $S3" "stat $S3" "get $S3@x" "scrub $S3"; do
	# shellcheck disable=SC2086
	run "$DEDUP" $cmd
	assert_rc 1 "dedup $cmd on a newer format"
	assert_one_line "dedup $cmd on a newer format"
	grep -Eiq 'newer|version' "$T/err" || fail "dedup $cmd: message does not mention the version"
	assert_empty "$T/out" "dedup $cmd on a newer format (stdout)"
done
run "$DEDUP" put "$S3@y" "$T/c.img"
assert_rc 1 "put into a newer format"
grep -qx 'format 99' "$S3/DEDUP" || fail "a refused open rewrote DEDUP"

# ---- gc after rm -------------------------------------------------------------------
note "gc after rm"
S4="$T/s4"
"$DEDUP" init --block-size $BS --compress none "$S4"
gen_random "$T/big.img" $((4 * 1024 * 1024)) gc-big
gen_random "$T/keep.img" $((256 * 1024)) gc-keep
{ cat "$T/keep.img"; head -c $((768 * 1024)) "$T/big.img"; } >"$T/shared.img"
"$DEDUP" put "$S4@big" "$T/big.img"
"$DEDUP" put "$S4@keep" "$T/keep.img"
"$DEDUP" put "$S4@shared" "$T/shared.img"  # shares blocks with both
pb() { "$DEDUP" stat --json "$S4" >"$T/st.json" && json_get "$T/st.json" "j['$1']"; }
before=$(pb pack_bytes)
ub_before=$(pb unique_blocks)
"$DEDUP" rm "$S4@big"
run "$DEDUP" gc "$S4"
assert_rc 0 "gc"
[ -s "$T/out" ] || [ -s "$T/err" ] || fail "gc printed nothing"
after=$(pb pack_bytes)
[ "$after" -lt "$before" ] || fail "gc did not reduce pack_bytes ($before -> $after)"
ub_after=$(pb unique_blocks)
# keep (64 blocks) + shared (256 blocks, 64 of them from keep) = 256 unique
assert_eq 256 "$ub_after" "unique_blocks after gc"
[ "$ub_after" -lt "$ub_before" ] || fail "unique_blocks did not drop"
assert_eq 0 "$(pb unreferenced_blocks)" "unreferenced_blocks after gc"
for n in keep shared; do
	run "$DEDUP" get "$S4@$n"
	assert_rc 0 "get $n after gc"
	assert_same "$T/$n.img" "$T/out" "$n after gc"
done
run "$DEDUP" scrub "$S4"
assert_rc 0 "scrub after gc"
# a second gc has nothing left to do and keeps the data
run "$DEDUP" gc --wait "$S4"
assert_rc 0 "second gc"
assert_eq "$after" "$(pb pack_bytes)" "second gc changed pack_bytes"
run "$DEDUP" get "$S4@shared"
assert_same "$T/shared.img" "$T/out" "shared after a second gc"

# ---- the DDT's key filter (format/kfilter.md) ------------------------------
# It is an index a writer rebuilds: a damaged header, a missing file or
# bits lost under a valid header (each block has a sum, §1) are rebuilt
# without a word, and a put stores no block again.  (Bits lost under a
# running process: tests/unit/test_store.c, test_kfilter_lost_bits.)
note "key filter: damaged, missing, bits lost"
S5=$T/s5
"$DEDUP" init --block-size 4K --compress none "$S5" >/dev/null
gen_random "$T/kf.img" $((1024 * BS)) kfilter
"$DEDUP" put "$S5@a" "$T/kf.img"
F=$S5/db/keys.flt
[ -s "$F" ] || fail "no key filter after a put"
new_blocks() { json_get "$T/out" "j['new_blocks']"; }
printf 'garbage' | dd of="$F" bs=1 seek=0 conv=notrunc status=none
run "$DEDUP" put --json "$S5@b" "$T/kf.img"
assert_rc 0 "put beside a filter with a damaged header"
[ ! -s "$T/err" ] || fail "put printed: $(cat "$T/err")"
assert_eq 0 "$(new_blocks)" "blocks stored again (header damaged: rebuilt)"
rm -f "$F"
run "$DEDUP" put --json "$S5@c" "$T/kf.img"
assert_rc 0 "put without a filter"
assert_eq 0 "$(new_blocks)" "blocks stored again (filter missing: rebuilt)"
[ -s "$F" ] || fail "the filter was not rebuilt"
size=$(stat -c %s "$F")
# past the 256-byte header: the segments' bits and sums
dd if=/dev/zero of="$F" bs=64 seek=4 count=$(((size - 256) / 64)) conv=notrunc status=none
run "$DEDUP" put --json "$S5@d" "$T/kf.img"
assert_rc 0 "put beside a filter whose bits were lost"
[ ! -s "$T/err" ] || fail "put printed: $(cat "$T/err")"
assert_eq 0 "$(new_blocks)" "blocks stored again (bits lost: the sums fail, rebuilt)"
for n in a b c d; do
	run "$DEDUP" get "$S5@$n"
	assert_rc 0 "get $n"
	assert_same "$T/kf.img" "$T/out" "$n beside the damaged filter"
done
run "$DEDUP" scrub "$S5"
assert_rc 0 "scrub after the filter's damage"
"$DEDUP" stat --json "$S5" >"$T/st.json"
assert_eq 1024 "$(json_get "$T/st.json" "j['unique_blocks']")" "unique blocks"
run "$DEDUP" gc "$S5"
assert_rc 0 "gc after the filter's damage"
assert_eq 0 "$("$DEDUP" stat --json "$S5" | python3 -c 'import json,sys; print(json.load(sys.stdin)["unreferenced_blocks"])')" "unreferenced after gc"
run "$DEDUP" put --json "$S5@e" "$T/kf.img"
assert_eq 0 "$(new_blocks)" "blocks stored again after gc"

echo "PASS [$TEST_NAME]"
