#!/usr/bin/env bash
# test_digest2.sh -- content digests of version 1 and 2 side by side
# (format/store.md §1, §3, §6; format/manifest.md §3.2; format/stream.md
# §4, §4.3, §10).
#
#  - a stream of version 1 (ddsend --digest-version 1) received into a
#    new store: the snapshot keeps version 1 (its manifest without feature
#    bit 1), scrubs clean, and goes out again as version 1; put writes
#    version 2 beside it; repair rebuilds both;
#  - a store of format 2 (an older build's) is read as it is and becomes
#    format 4 at its first put, its old snapshot still of version 1; a
#    store whose DEDUP says format 5 is refused with one line;
#  - incremental streams across versions: the sender's base of version 1
#    and the receiver's of version 2, and the other way round, and a
#    stream of version 1 against a base of version 2;
#  - a receive of a snapshot sent as version 1, cut and kept (-s): the
#    rest sent as version 2 is refused by the sender (the token names the
#    version-1 digest), sent as version 1 it completes, version 1.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BS=4096
# features FILE: a manifest's feature bits (format/manifest.md §3)
features() { od -An -t u4 -j 12 -N 4 "$1" | tr -d ' '; }
# stream_flags FILE: a stream's HEADER flags (frame 16 bytes, offset 16)
stream_flags() { od -An -t u4 -j 32 -N 4 "$1" | tr -d ' '; }
# manifest_of STORE SNAP: the published manifest of a snapshot, found by
# the name it holds (format/manifest.md §2: n at offset 62, the name at 128)
manifest_of() {
	python3 - "$1/manifests" "$2" <<'EOF'
import os, struct, sys
d, want = sys.argv[1], sys.argv[2].encode()
for f in sorted(os.listdir(d)):
    if f.endswith('.snap'):
        b = open(os.path.join(d, f), 'rb').read(128 + 255)
        n = struct.unpack_from('<H', b, 62)[0]
        if b[128:128 + n] == want:
            print(os.path.join(d, f))
EOF
}

gen_blocks "$T/a.img" $BS 1 2 z z z 3 t100:4
gen_blocks "$T/b.img" $BS 1 5 z z z 3 6 z t700:7
gen_blocks "$T/c.img" $BS 8 z 9 z z z z 1 t300:2
"$DDSEND" -b 4K -f "$T/c.img" >"$T/c2.dds"

note "a stream of version 1 into a new store stays version 1"
A="$T/a" B="$T/b"
"$DEDUP" init --block-size 4K "$A"
"$DEDUP" init --block-size 4K "$B"
assert_grep '^format 4$' "$A/DEDUP" "a new fixed store"
run "$DDSEND" --digest-version 1 -b 4K -f "$T/a.img"
assert_rc 0 "ddsend --digest-version 1 -f"
mv "$T/out" "$T/a1.dds"
assert_eq 0 "$(stream_flags "$T/a1.dds")" "flags of a stream of version 1"
run "$DDSEND" -b 4K -f "$T/a.img"
assert_rc 0 "ddsend -f"
assert_eq 2 "$(stream_flags "$T/out")" "flags of ddsend -f: digest version 2"
run sh -c "exec \"\$0\" -q \"\$1\" <\"\$2\"" "$DDRECV" "$A" "$T/a1.dds"
assert_rc 0 "receive of a stream of version 1"
assert_eq 0 "$(features "$(manifest_of "$A" a.img)")" \
	"manifest of the received snapshot: version 1"
"$DEDUP" put "$A@b" "$T/b.img"
assert_eq 2 "$(features "$(manifest_of "$A" b)")" "manifest of a put: version 2"
run "$DEDUP" scrub "$A"
assert_rc 0 "scrub of a store of both versions"
"$DEDUP" get "$A@a.img" "$T/got"
assert_same "$T/got" "$T/a.img" "get of the snapshot of version 1"
run sh -c "exec \"\$0\" \"\$1\" >\"\$2\"" "$DDSEND" "$A@a.img" "$T/a1again.dds"
assert_rc 0 "ddsend of the snapshot of version 1"
assert_eq 0 "$(stream_flags "$T/a1again.dds")" \
	"a snapshot of version 1 goes as version 1"
run sh -c "exec \"\$0\" --digest-version 2 \"\$1\" | \"\$2\" -q \"\$3\"" \
	"$DDSEND" "$A@a.img" "$DDRECV" "$B"
assert_rc 0 "ddsend --digest-version 2 of a snapshot of version 1"
assert_eq 2 "$(features "$(manifest_of "$B" a.img)")" \
	"received as version 2: its manifest"
run "$DEDUP" scrub "$B"
assert_rc 0 "scrub after a conversion to version 2"
rm -rf "$A/db"
run "$DEDUP" repair "$A"
assert_rc 0 "repair of a store of both versions"
run "$DEDUP" scrub "$A"
assert_rc 0 "scrub after repair"
for n in a.img:a b:b; do
	"$DEDUP" get "$A@${n%%:*}" "$T/got"
	assert_same "$T/got" "$T/${n#*:}.img" "get ${n%%:*} after repair"
done

note "incremental: the sender's base of version 1, the receiver's of 2"
# A: a.img (v1), b (v2); B: a.img (v2)
run sh -c "exec \"\$0\" -i a.img \"\$1\" >\"\$2\"" "$DDSEND" "$A@b" "$T/i1.dds"
assert_rc 0 "ddsend -i of a base of version 1"
assert_eq 3 "$(stream_flags "$T/i1.dds")" "flags: incremental, version 2"
run sh -c "exec \"\$0\" -q \"\$1\" <\"\$2\"" "$DDRECV" "$B" "$T/i1.dds"
assert_rc 0 "receive against a base of version 2"
"$DEDUP" get "$B@b" "$T/got"
assert_same "$T/got" "$T/b.img" "b received incrementally"

note "incremental: the sender's base of version 2, the receiver's of 1"
C="$T/c" D="$T/d"
"$DEDUP" init --block-size 4K "$C"
"$DEDUP" init --block-size 4K "$D"
"$DEDUP" put "$C@b" "$T/b.img"
"$DEDUP" put "$C@c" "$T/c.img"
run sh -c "exec \"\$0\" --digest-version 1 \"\$1\" | \"\$2\" -q \"\$3\"" \
	"$DDSEND" "$C@b" "$DDRECV" "$D"
assert_rc 0 "ddsend --digest-version 1 of a snapshot of version 2"
assert_eq 0 "$(features "$(manifest_of "$D" b)")" "D's base: version 1"
run sh -c "exec \"\$0\" -i b \"\$1\" | \"\$2\" -q \"\$3\"" \
	"$DDSEND" "$C@c" "$DDRECV" "$D"
assert_rc 0 "a stream of version 2 against a base of version 1"
"$DEDUP" get "$D@c" "$T/got"
assert_same "$T/got" "$T/c.img" "c received against a base of version 1"

note "incremental: a stream of version 1 against a base of version 2"
E="$T/e"
"$DEDUP" init --block-size 4K "$E"
run sh -c "exec \"\$0\" \"\$1\" | \"\$2\" -q \"\$3\"" \
	"$DDSEND" "$C@b" "$DDRECV" "$E"
assert_rc 0 "full stream of b into E"
run sh -c "exec \"\$0\" --digest-version 1 -i b \"\$1\" >\"\$2\"" \
	"$DDSEND" "$C@c" "$T/i3.dds"
assert_rc 0 "ddsend --digest-version 1 -i"
assert_eq 1 "$(stream_flags "$T/i3.dds")" "flags: incremental, version 1"
run sh -c "exec \"\$0\" -q \"\$1\" <\"\$2\"" "$DDRECV" "$E" "$T/i3.dds"
assert_rc 0 "a stream of version 1 against a base of version 2"
assert_eq 0 "$(features "$(manifest_of "$E" c)")" "c kept the stream's version 1"
"$DEDUP" get "$E@c" "$T/got"
assert_same "$T/got" "$T/c.img" "c of version 1 received"
run "$DEDUP" scrub "$E"
assert_rc 0 "scrub of E"
# a base of other content is still refused, its digest computed in the
# stream's version: G's b (version 2) holds a.img, not b.img
G="$T/g"
"$DEDUP" init --block-size 4K "$G"
"$DEDUP" put "$G@b" "$T/a.img"
run sh -c "exec \"\$0\" -q \"\$1\" <\"\$2\"" "$DDRECV" "$G" "$T/i3.dds"
assert_rc 1 "a stream of version 1 against a base of other content"
assert_one_line "a base of other content"
assert_grep 'other content' "$T/err" "the refusal names the base's content"
run "$DEDUP" ls --json "$G"
assert_eq 1 "$(json_get "$T/out" "len(j)")" "G after the refusal"
run sh -c "exec \"\$0\" -q \"\$1@c2\" <\"\$2\"" "$DDRECV" "$E" "$T/i3.dds"
assert_rc 0 "the same stream again, as c2"

note "a put into a format-2 store with another process in it: version 1"
H="$T/h"
"$DEDUP" init --block-size 4K "$H"
sed -i 's/^format 4$/format 2/' "$H/DEDUP"
# a process of this or an older build holds STORE/lock shared while
# it runs: the upgrade, which wants it alone, is put off
(exec 9>>"$H/lock" && flock -s 9 && exec sleep 30) &
holder=$!
sleep 0.2
run "$DEDUP" put "$H@b" "$T/b.img"
assert_rc 0 "put into a busy format-2 store"
assert_grep '^format 2$' "$H/DEDUP" "a busy store stays format 2"
assert_eq 0 "$(features "$(manifest_of "$H" b)")" "the put wrote version 1"
run sh -c "exec \"\$0\" -q \"\$1\" <\"\$2\"" "$DDRECV" "$H" "$T/c2.dds"
assert_rc 1 "receive of version 2 into a busy format-2 store"
assert_one_line "receive of version 2 into a busy format-2 store"
assert_grep 'DD_EBUSY' "$T/err" "the receive names the busy store"
kill "$holder"
wait "$holder" 2>/dev/null || true
run "$DEDUP" put "$H@c" "$T/c.img"
assert_rc 0 "put into the format-2 store alone"
assert_grep '^format 4$' "$H/DEDUP" "the store alone is upgraded"
assert_eq 2 "$(features "$(manifest_of "$H" c)")" "then a put writes version 2"
run "$DEDUP" scrub "$H"
assert_rc 0 "scrub of H"

note "a store of format 2 becomes format 4 at its first put"
F="$T/f"
"$DEDUP" init --block-size 4K "$F"
run sh -c "exec \"\$0\" -q \"\$1\" <\"\$2\"" "$DDRECV" "$F" "$T/a1.dds"
assert_rc 0 "a snapshot of version 1 into F"
sed -i 's/^format 4$/format 2/' "$F/DEDUP"
run "$DEDUP" scrub "$F"
assert_rc 0 "scrub of a format-2 store"
assert_grep '^format 2$' "$F/DEDUP" "a reader leaves format 2 as it is"
run "$DEDUP" put "$F@b" "$T/b.img"
assert_rc 0 "put into a format-2 store"
assert_grep '^format 4$' "$F/DEDUP" "DEDUP after the first put"
grep -q '^chunker' "$F/DEDUP" && fail "format 4 names a chunker"
for k in block_size verify compress compress_level hash uuid; do
	assert_grep "^$k " "$F/DEDUP" "DEDUP of format 4 names $k"
done
assert_eq 0 "$(features "$(manifest_of "$F" a.img)")" "the old snapshot: version 1"
assert_eq 2 "$(features "$(manifest_of "$F" b)")" "the new one: version 2"
run "$DEDUP" scrub "$F"
assert_rc 0 "scrub after the upgrade"
sed -i 's/^format 4$/format 5/' "$F/DEDUP"
for cmd in "ls $F" "scrub $F" "get $F@b $T/got"; do
	# shellcheck disable=SC2086
	run "$DEDUP" $cmd
	assert_rc 1 "dedup $cmd of format 5"
	assert_one_line "dedup $cmd of format 5"
	assert_grep 'DD_EVERSION.*store format 5 is newer' "$T/err" "dedup $cmd of format 5"
done
run sh -c "exec \"\$0\" -q \"\$1\" <\"\$2\"" "$DDRECV" "$F" "$T/a1.dds"
assert_rc 1 "receive into a store of format 5"
assert_one_line "receive into a store of format 5"

note "a resumed receive of a snapshot sent as version 1"
# The kept receive and its token name the digest of the version that was
# sent (format/store.md §5): the rest must be sent in the same version.
R="$T/r" R2="$T/r2"
"$DEDUP" init --block-size 4K "$R"
"$DEDUP" init --block-size 4K "$R2"
gen_random "$T/big" $((1024 * 1024)) digest2-resume
"$DEDUP" put "$R@big" "$T/big" 2>"$T/err" || fail "put big"
assert_eq 2 "$(features "$(manifest_of "$R" big)")" "a put's snapshot: version 2"
"$DDSEND" --digest-version 1 "$R@big" >"$T/big1.dds" 2>"$T/err" || fail "ddsend --digest-version 1"
assert_eq 0 "$(($(stream_flags "$T/big1.dds") & 2))" "the converted stream: version 1"
kept_half "$T/big1.dds" "$R2"
run bash -c "'$DDSEND' -t '$tok' '$R@big' | '$DDRECV' -s '$R2'"
assert_rc 1 "the rest sent as version 2"
assert_grep 'resume token is for another snapshot' "$T/err" "the sender refuses the token"
"$DEDUP" ls "$R2" >"$T/ls" 2>&1 || fail "ls after the refused resume"
assert_grep "$tok" "$T/ls" "the kept receive is still there"
run bash -c "'$DDSEND' --digest-version 1 -t '$tok' '$R@big' | '$DDRECV' -s '$R2'"
assert_rc 0 "the rest sent as version 1"
"$DEDUP" get "$R2@big" "$T/big.back" 2>"$T/err" || fail "get after the resume"
assert_same "$T/big" "$T/big.back" "the resumed snapshot"
assert_eq 0 "$(features "$(manifest_of "$R2" big)")" "the resumed snapshot: version 1"
run "$DEDUP" scrub "$R2"
assert_rc 0 "scrub after the resume"
echo "PASS [$TEST_NAME]"
