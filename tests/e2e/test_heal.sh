#!/usr/bin/env bash
# test_heal.sh -- after damage (issue 21): a good copy heals a damaged
# block -- by put, by receive, after rm before gc --; get --salvage
# restores everything readable; scrub names every damaged block with the
# snapshots and offsets that use it.
#
# Stores use --compress none, so a block's bytes are found verbatim in its
# pack and one flipped byte damages exactly that record.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BS=4096

# zeroed FILE OUT OFF:LEN...: FILE with each range zeroed, into OUT.
zeroed() {
	python3 - "$@" <<'EOF'
import sys
src, out, ranges = sys.argv[1], sys.argv[2], sys.argv[3:]
b = bytearray(open(src, 'rb').read())
for r in ranges:
    off, n = (int(x) for x in r.split(':'))
    b[off:off + n] = bytes(n)
open(out, 'wb').write(b)
EOF
}

gen_random "$T/a.img" $((2 * 1024 * 1024 + 1000)) heal-a
gen_random "$T/b.img" $((512 * 1024)) heal-b
cat "$T/b.img" "$T/a.img" >"$T/c.img"     # a's blocks again, shifted by b
A5=$((5 * BS))
A9=$((9 * BS))
A300=$((300 * BS))

new_store() { # DIR: a store holding a and b
	"$DEDUP" init --block-size $BS --compress none "$1"
	"$DEDUP" put "$1@a" "$T/a.img"
	"$DEDUP" put "$1@b" "$T/b.img"
}

# ---- scrub reports every damaged block, with snapshots and offsets -------
note "scrub: several damaged blocks"
S="$T/s1"
new_store "$S"
"$DEDUP" put "$S@c" "$T/c.img"
flip_record "$S" "$T/a.img" $A5 $A9 $A300
run "$DEDUP" scrub "$S"
assert_rc 1 "scrub of a store with three damaged blocks"
for off in $A5 $A9 $A300; do
	assert_grep "used by a at offset $off\$" "$T/out" "scrub names a@$off"
	coff=$((off + 512 * 1024))
	assert_grep "used by c at offset $coff\$" "$T/out" "scrub names c@$coff"
done
assert_eq 6 "$(grep -c '^bad block' "$T/out")" "uses of bad blocks listed"
assert_grep 'scrub found 3 bad blocks' "$T/err" "scrub's last line"
run "$DEDUP" scrub --json "$S"
assert_rc 1 "scrub --json"
assert_json "$T/out" "scrub --json"
assert_eq 3 "$(json_get "$T/out" "j['bad_blocks']")" "scrub --json bad_blocks"
assert_eq "[$A5, $A9, $A300]" \
	"$(json_get "$T/out" "sorted(b['offset'] for b in j['bad'] if b['snapshot'] == 'a')")" \
	"scrub --json: the offsets in a"

# ---- get --salvage ---------------------------------------------------------
note "get --salvage"
run "$DEDUP" get --salvage "$S@a" "$T/a.out"
assert_rc 1 "get --salvage of a damaged snapshot"
zeroed "$T/a.img" "$T/a.want" $A5:$BS $A9:$BS $A300:$BS
assert_same "$T/a.out" "$T/a.want" "get --salvage: all but the damaged blocks"
assert_grep "damaged: bytes $A5\\.\\.$((A5 + BS)) \\($BS bytes\\) written as zeros: DD_ECHECKSUM" \
	"$T/err" "get --salvage lists the first range"
assert_grep "damaged: bytes $A300\\.\\.$((A300 + BS)) " "$T/err" \
	"get --salvage lists the last range"
assert_grep "3 damaged ranges \\($((3 * BS)) bytes\\) written as zeros" \
	"$T/err" "get --salvage's last line"
run "$DEDUP" get --salvage --json "$S@a" "$T/a.out2"
assert_rc 1 "get --salvage --json"
assert_json "$T/out" "get --salvage --json"
assert_eq "[[$A5, $BS], [$A9, $BS], [$A300, $BS]]" \
	"$(json_get "$T/out" "[[d['offset'], d['length']] for d in j['damaged']]")" \
	"get --salvage --json ranges"
assert_eq "DD_ECHECKSUM" "$(json_get "$T/out" "j['damaged'][0]['error']")" \
	"get --salvage --json error"
assert_same "$T/a.out2" "$T/a.want" "get --salvage --json: the image"
# to stdout, and an undamaged snapshot: exact, exit 0
run "$DEDUP" get --salvage "$S@c"
assert_rc 1 "get --salvage to stdout"
zeroed "$T/c.img" "$T/c.want" $((A5 + 524288)):$BS $((A9 + 524288)):$BS \
	$((A300 + 524288)):$BS
assert_same "$T/out" "$T/c.want" "get --salvage to stdout"
run "$DEDUP" get --salvage "$S@b" "$T/b.out"
assert_rc 0 "get --salvage of an undamaged snapshot"
assert_same "$T/b.out" "$T/b.img" "get --salvage of an undamaged snapshot"
# without --salvage, as ever: one line, no wrong bytes
run "$DEDUP" get "$S@a"
assert_nonzero "get of a damaged snapshot"
assert_one_line "get of a damaged snapshot"

# ---- scrub goes on past damaged snapshots in the catalog -------------------
note "scrub: damaged block maps, every snapshot named"
SM="$T/s1m"
cp -a "$S" "$SM"
# the block-map value of block IDX of snapshot ID (format/store.md §4.1:
# key id, index big-endian, then the 33-byte DDT key) flipped in the LMDB
# file: the map no longer matches the DDT nor the snapshot's digest
python3 - "$SM/db/data.mdb" "$T/b.img" 2 3 "$T/c.img" 3 7 <<'EOF'
import hashlib, struct, sys
db = sys.argv[1]
b = bytearray(open(db, 'rb').read())
args = sys.argv[2:]
for k in range(0, len(args), 3):
    img, sid, idx = args[k], int(args[k + 1]), int(args[k + 2])
    blk = open(img, 'rb').read()[idx * 4096:(idx + 1) * 4096]
    needle = struct.pack('>QQ', sid, idx) + hashlib.sha256(blk).digest()
    i = b.find(needle)
    if i < 0 or b.find(needle, i + 1) >= 0:
        sys.exit('block map entry %d/%d not found once' % (sid, idx))
    b[i + 16 + 5] ^= 0x01
open(db, 'wb').write(b)
EOF
run "$DEDUP" scrub "$SM"
assert_rc 1 "scrub of damaged block maps"
assert_grep "^damaged snapshot b: " "$T/out" "scrub names snapshot b"
assert_grep "^damaged snapshot c: " "$T/out" "scrub names snapshot c"
assert_grep "used by a at offset $A300\$" "$T/out" \
	"scrub still names the damaged blocks"
assert_grep "2 snapshots with damaged metadata" "$T/err" "scrub's last line"
run "$DEDUP" scrub --json "$SM"
assert_rc 1 "scrub --json of damaged block maps"
assert_json "$T/out" "scrub --json of damaged block maps"
assert_eq '["b", "c"]' \
	"$(json_get "$T/out" "[d['snapshot'] for d in j['damaged_snapshots']]")" \
	"scrub --json damaged_snapshots"
assert_eq 3 "$(json_get "$T/out" "j['bad_blocks']")" \
	"scrub --json bad_blocks beside damaged maps"

# ---- heal by put ------------------------------------------------------------
note "heal by put"
"$DEDUP" put "$S@a2" "$T/a.img"
for n in a a2; do
	run "$DEDUP" get "$S@$n" "$T/got"
	assert_rc 0 "get $n after a put of the same data"
	assert_same "$T/got" "$T/a.img" "$n healed by put"
done
run "$DEDUP" get "$S@c" "$T/got"
assert_rc 0 "get c after the heal"
assert_same "$T/got" "$T/c.img" "c healed by put"
run "$DEDUP" scrub "$S"
assert_rc 0 "scrub after the heal"
# the damaged records are still in their pack beside the fresh copies: a
# repair (headers only, no --verify) must point the entries at the good
# ones, or the heal is lost again
run "$DEDUP" repair "$S"
assert_rc 0 "repair after the heal"
for n in a a2 c; do
	run "$DEDUP" get "$S@$n" "$T/got"
	assert_rc 0 "get $n after a repair of the healed store"
	assert_same "$T/got" "$T/${n%2}.img" "$n after a repair of the healed store"
done
run "$DEDUP" scrub "$S"
assert_rc 0 "scrub after a repair of the healed store"

# ---- heal by receive --------------------------------------------------------
note "heal by receive"
S2="$T/s2"
O="$T/other"
new_store "$S2"
"$DEDUP" init --block-size $BS "$O"
"$DEDUP" put "$O@good" "$T/a.img"
flip_record "$S2" "$T/a.img" $A9
run "$DEDUP" scrub "$S2"
assert_rc 1 "scrub names the damaged block"
assert_grep "used by a at offset $A9\$" "$T/out" "scrub names a@$A9"
"$DDSEND" "$O@good" | "$DDRECV" "$S2@r"
run "$DEDUP" get "$S2@a" "$T/got"
assert_rc 0 "get a after receiving a good copy"
assert_same "$T/got" "$T/a.img" "a healed by receive"
run "$DEDUP" scrub "$S2"
assert_rc 0 "scrub after the receive"

# ---- put after rm, before gc --------------------------------------------------
note "put after rm, before gc"
S3="$T/s3"
new_store "$S3"
"$DEDUP" rm "$S3@a"
flip_record "$S3" "$T/a.img" $A5
"$DEDUP" put "$S3@a" "$T/a.img"
run "$DEDUP" get "$S3@a" "$T/got"
assert_rc 0 "get after put after rm"
assert_same "$T/got" "$T/a.img" "put after rm stores a fresh copy"
run "$DEDUP" scrub "$S3"
assert_rc 0 "scrub after put after rm"
"$DEDUP" gc "$S3" >/dev/null
run "$DEDUP" get "$S3@a" "$T/got"
assert_same "$T/got" "$T/a.img" "exact after gc"
run "$DEDUP" scrub "$S3"
assert_rc 0 "scrub after gc"

note "ok"
