#!/usr/bin/env bash
# test_scrub_catalog.sh -- scrub past damaged catalog pages (issue 21):
# in a store of four snapshots whose block maps span many LMDB pages, two
# leaves of the block-map table are zeroed -- one inside snapshot b's map,
# one across the end of c's and the start of d's -- and two pack records
# flipped (blocks of a and of b).  scrub must report every damaged block
# with its snapshot and offset (b's from its manifest: its map is
# unreadable), name exactly b, c and d as damaged with the offsets the
# damaged pages held, exit 1 with one line on stderr, and leave the store
# as it was; after dedup repair, only the damaged blocks remain.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BS=4096
S="$T/s"
# 4 KiB blocks, 64 or so block-map entries per LMDB leaf: a's map spans
# two leaves, b's four, c's and d's two each
gen_blocks "$T/a.img" $BS $(seq 1 120)
gen_blocks "$T/b.img" $BS $(seq 1001 1260) t777:b
gen_blocks "$T/c.img" $BS $(seq 2001 2100) z z $(seq 2101 2130)
gen_blocks "$T/d.img" $BS $(seq 3001 3140)
"$DEDUP" init --block-size $BS --compress none "$S"
for n in a b c d; do
	"$DEDUP" put "$S@$n" "$T/$n.img"
done
run "$DEDUP" scrub "$S"
assert_rc 0 "scrub of the undamaged store"

# ---- the damage ---------------------------------------------------------------
# Walks LMDB 0.9's pages (64-bit, 4 KiB pages; as test_dedup_lmdb_damage.sh)
# to the block-map table's leaves, zeroes the two chosen ones and prints,
# for each snapshot a damaged page held part of, "NAME FROM TO": the byte
# offsets of the keys its parent page gives it (its first key, the next
# leaf's first key), as scrub must report them.
python3 - "$S" $BS >"$T/expect" <<'EOF'
import os, struct, sys
store, bs = sys.argv[1], int(sys.argv[2])
PS = 4096
path = os.path.join(store, 'db', 'data.mdb')
data = bytearray(open(path, 'rb').read())

def page(p):
    return data[p * PS:(p + 1) * PS]

def nodes(pg):
    lower, = struct.unpack_from('<H', pg, 12)
    for i in range((lower - 16) // 2):
        off, = struct.unpack_from('<H', pg, 16 + 2 * i)
        lo, hi, flags, ksize = struct.unpack_from('<HHHH', pg, off)
        yield lo | hi << 16 | flags << 32, bytes(pg[off + 8:off + 8 + ksize]), \
            bytes(pg[off + 8 + ksize:off + 8 + ksize + (lo | hi << 16)])

metas = [page(m) for m in (0, 1)]
meta = max(metas, key=lambda m: struct.unpack_from('<Q', m, 144)[0])
main_root, = struct.unpack_from('<Q', meta, 88 + 40)

def leaves(root, lo=None, hi=None):
    """[(pgno, lo key, hi key)] of a tree's leaves, in key order"""
    pg = page(root)
    if not struct.unpack_from('<H', pg, 10)[0] & 0x01:
        return [(root, lo, hi)]
    ns = list(nodes(pg))
    out = []
    for i, (child, key, _) in enumerate(ns):
        clo = lo if i == 0 else key
        chi = hi if i + 1 == len(ns) else ns[i + 1][1]
        out += leaves(child & (2**48 - 1), clo, chi)
    return out

tables = {}
for p, _, _ in leaves(main_root):
    for dsize, key, val in nodes(page(p)):
        tables[key.decode()] = struct.unpack_from('<Q', val, 40)[0]
ids, sizes = {}, {}
for p, _, _ in leaves(tables['snap']):
    for _, key, val in nodes(page(p)):
        ids[struct.unpack_from('<Q', val, 8)[0]] = key.decode()
        sizes[key.decode()] = struct.unpack_from('<Q', val, 16)[0]
bmap = leaves(tables['bmap'])
if len(bmap) < 8:
    sys.exit('the block maps span only %d leaves' % len(bmap))

def ids_in(leaf):
    return {struct.unpack_from('>Q', k)[0] for _, k, _ in nodes(page(leaf))}

byname = {v: k for k, v in ids.items()}
# a leaf of b alone, not b's first; the leaf holding c's last key and d's
# first
inside_b = [l for l in bmap if ids_in(l[0]) == {byname['b']}][1]
across = [l for l in bmap if ids_in(l[0]) == {byname['c'], byname['d']}][0]
for pgno, lo, hi in (inside_b, across):
    data[pgno * PS:(pgno + 1) * PS] = bytes(PS)
    lid, lidx = struct.unpack('>QQ', lo)
    hid, hidx = struct.unpack('>QQ', hi)
    for i in range(lid, hid + 1):
        if i not in ids or (i == hid and hidx == 0):
            continue
        n, size = ids[i], sizes[ids[i]]
        frm = lidx * bs if i == lid else 0
        to = min(hidx * bs, size) if i == hid else size
        print(n, frm, to)
open(path, 'wb').write(data)
EOF
note "damaged pages hold: $(tr '\n' ';' <"$T/expect")"
assert_eq "b c d" "$(cut -d' ' -f1 "$T/expect" | tr '\n' ' ' | sed 's/ $//')" \
	"the damaged pages hold parts of b, c and d"
# damaged blocks: a's 10th, b's 200th (on an undamaged page of b's map)
flip_record "$S" "$T/a.img" $((9 * BS))
flip_record "$S" "$T/b.img" $((199 * BS))
# LMDB's lock file (its reader table) changes with every open: not the store
(cd "$S" && find . -type f ! -name lock.mdb | sort | xargs sha256sum) >"$T/before"

# ---- scrub -------------------------------------------------------------------
note "scrub names the damaged blocks and the snapshots on damaged pages"
run "$DEDUP" scrub "$S"
assert_rc 1 "scrub of a store with damaged catalog pages"
assert_one_line "scrub's error"
assert_grep '^dedup: DD_ECORRUPT: 3 snapshots with damaged metadata' "$T/err" \
	"scrub's last line counts the damaged snapshots"
assert_grep "used by a at offset $((9 * BS))\$" "$T/out" "scrub names a's bad block"
assert_grep "used by b at offset $((199 * BS))\$" "$T/out" \
	"scrub names b's bad block from b's manifest"
assert_eq 2 "$(grep -c '^bad block ' "$T/out")" "two bad block uses"
while read -r name from to; do
	assert_grep "^damaged snapshot $name: DD_ECORRUPT: snapshot '$name': its block map entries for offsets $from to $to are on 1 damaged catalog page: .*page [0-9]+ of LMDB table 'bmap'.*run dedup repair\$" \
		"$T/out" "scrub names $name with the offsets the page held"
done <"$T/expect"
assert_eq 3 "$(grep -c '^damaged snapshot ' "$T/out")" \
	"exactly three damaged snapshots"
(cd "$S" && find . -type f ! -name lock.mdb | sort | xargs sha256sum) >"$T/after"
diff "$T/before" "$T/after" >"$T/err" ||
	fail "scrub changed the damaged store (files that differ below)"

run "$DEDUP" scrub --json "$S"
assert_rc 1 "scrub --json"
assert_json "$T/out" "scrub --json"
assert_eq '["b", "c", "d"]' \
	"$(json_get "$T/out" "sorted(d['snapshot'] for d in j['damaged_snapshots'])")" \
	"scrub --json: the damaged snapshots"
assert_eq '[["a", 36864], ["b", 815104]]' \
	"$(json_get "$T/out" "sorted([b['snapshot'], b['offset']] for b in j['bad'])")" \
	"scrub --json: the bad blocks' uses"

# the other commands refuse the damaged catalog with one line
run "$DEDUP" ls "$S"
assert_rc 1 "ls of the damaged catalog"
assert_one_line "ls's error"
assert_grep 'run dedup repair' "$T/err" "ls names dedup repair"

# ---- repair: the catalog rebuilt, the blocks still damaged ---------------------
note "after repair, scrub names only the damaged blocks"
"$DEDUP" repair "$S" >/dev/null
run "$DEDUP" scrub "$S"
assert_rc 1 "scrub after repair"
assert_eq 0 "$(grep -c '^damaged snapshot ' "$T/out" || true)" \
	"no damaged snapshot after repair"
assert_grep "used by a at offset $((9 * BS))\$" "$T/out" "a's bad block, after repair"
assert_grep "used by b at offset $((199 * BS))\$" "$T/out" "b's bad block, after repair"
assert_grep 'scrub found 2 bad blocks' "$T/err" "scrub's last line after repair"
for n in c d; do
	"$DEDUP" get "$S@$n" "$T/$n.out"
	assert_same "$T/$n.img" "$T/$n.out" "get $n after repair"
done
echo "PASS [$TEST_NAME]"
