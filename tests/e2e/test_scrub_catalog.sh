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
python3 - "$S" $BS "$DD_SRC/tests/e2e" >"$T/expect" <<'EOF'
import struct, sys
store, bs = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, sys.argv[3])
from lmdb_walk import Db

db = Db(store)
ids, sizes = {}, {}
for key, val in db.entries('snap').items():
    ids[struct.unpack_from('<Q', val, 8)[0]] = key.decode()
    sizes[key.decode()] = struct.unpack_from('<Q', val, 16)[0]
bmap = db.table_leaves('bmap')
if len(bmap) < 8:
    sys.exit('the block maps span only %d leaves' % len(bmap))

def ids_in(leaf):
    return {struct.unpack_from('>Q', k)[0] for _, k, _ in db.nodes(leaf)}

byname = {v: k for k, v in ids.items()}
# a leaf of b alone, not b's first; the leaf holding c's last key and d's
# first
inside_b = [l for l in bmap if ids_in(l[0]) == {byname['b']}][1]
across = [l for l in bmap if ids_in(l[0]) == {byname['c'], byname['d']}][0]
for pgno, lo, hi in (inside_b, across):
    db.zero(pgno)
    lid, lidx = struct.unpack('>QQ', lo)
    hid, hidx = struct.unpack('>QQ', hi)
    for i in range(lid, hid + 1):
        if i not in ids or (i == hid and hidx == 0):
            continue
        n, size = ids[i], sizes[ids[i]]
        frm = lidx * bs if i == lid else 0
        to = min(hidx * bs, size) if i == hid else size
        print(n, frm, to, pgno)
db.save()
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
while read -r name from to pgno; do
	assert_grep "^damaged catalog page $pgno of table bmap: .*it held the block-map entries from .*; the catalog is an index of the packs and manifests: dedup repair $S rebuilds it\$" \
		"$T/out" "scrub reports page $pgno and the way out"
	assert_grep "^damaged catalog page $pgno of table bmap affects $name at offsets $from to $to\$" \
		"$T/out" "scrub names the bytes of $name page $pgno held"
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

# ==== the DDT, the snapshot table and a pack, damaged at once ================
# 48 snapshots of long names (10 to 20 records a leaf: the snapshot table
# spans several leaves), each of six blocks, its first block twice (a run
# of two when that block's DDT entry is on the damaged page): 240 distinct
# blocks, 30 to 54 DDT entries a leaf.
note "a store whose DDT and snapshot table span several LMDB leaves"
S2="$T/s2"
LONG=$(printf 'x%.0s' $(seq 1 110))
"$DEDUP" init --block-size $BS --compress none "$S2"
for i in $(seq 10 57); do
	gen_blocks "$T/e$i.img" $BS $((i * 10 + 1)) $((i * 10 + 1)) \
		$((i * 10 + 2)) $((i * 10 + 3)) $((i * 10 + 4)) $((i * 10 + 5))
	"$DEDUP" put "$S2@e$i-$LONG" "$T/e$i.img"
done

# The expected report, computed from the images' bytes (hashlib) and
# LMDB's pages: a DDT leaf (the one holding e30's first block, if it has
# keys on both sides) and a snapshot-table leaf in the middle are zeroed;
# it prints "ddt PAGE", "snap PAGE", "run NAME OFFSET LENGTH" for each run
# of a snapshot's blocks whose hashes lie in the DDT leaf's range (joined
# while consecutive), "blocks NAME N RUNS FROM TO" for each snapshot with
# runs, "lost NAME SIZE" for each snapshot whose name lies in the
# snapshot leaf's range, and "flip IMAGE OFFSET NAME": a block of a lost
# snapshot outside the DDT range, whose pack record the test flips.
python3 - "$S2" $BS "$T" "$DD_SRC/tests/e2e" >"$T/expect2" <<'EOF'
import hashlib, os, struct, sys
store, bs, tdir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sys.path.insert(0, sys.argv[4])
from lmdb_walk import Db, in_range

db = Db(store)
recs = db.entries('snap')
names = sorted(k.decode() for k in recs)
assert len(names) == 48
size = {n: struct.unpack_from('<Q', recs[n.encode()], 16)[0] for n in names}
blocks = {}             # name -> [(offset, length, DDT key)], no holes
for n in names:
    img = open(os.path.join(tdir, n.split('-')[0] + '.img'), 'rb').read()
    blocks[n] = [(o, len(img[o:o + bs]),
                  hashlib.sha256(img[o:o + bs]).digest() + b'\0')
                 for o in range(0, len(img), bs) if any(img[o:o + bs])]
# the live DDT table, and where each key is in it: its main part, or a
# sorted run (format/ddt.md §5: 0xff x 33, the run, the key)
meta = db.entries('meta')
live = 'ddt%d' % struct.unpack('<Q', meta.get(b'ddt.live', bytes(8)))[0]
nruns = struct.unpack('<Q', meta.get(b'ddt.runs', bytes(8)))[0]
ddt_keys = set(db.entries(live))
def part_key(key):
    if key in ddt_keys:
        return key
    runs = [b'\xff' * 33 + struct.pack('>Q', r) + key
            for r in range(1, nruns + 1)
            if b'\xff' * 33 + struct.pack('>Q', r) + key in ddt_keys]
    assert len(runs) == 1, key.hex()
    return runs[0]
for n in names:
    blocks[n] = [(o, ln, part_key(k)) for o, ln, k in blocks[n]]
print('live', live, nruns)
ddt = db.table_leaves(live)
snap = db.table_leaves('snap')
if len(ddt) < 4 or len(snap) < 3 or nruns < 2:
    sys.exit('%d DDT leaves, %d snapshot leaves, %d runs' %
             (len(ddt), len(snap), nruns))
# a leaf of a run: e50 is in one (each put of a few new blocks appends
# one, and the 33rd folded the first 32 into the main part)
e50 = [n for n in names if n.startswith('e50-')][0]
assert blocks[e50][0][2][0] == 0xff, 'e50 not in a run'
dleaf = [l for l in ddt if in_range(blocks[e50][0][2], l[1], l[2])][0]
if dleaf[1] is None or dleaf[2] is None:
    dleaf = ddt[len(ddt) // 2]
sleaf = snap[len(snap) // 2]
print('ddt', dleaf[0])
print('snap', sleaf[0])
flip = None
for n in names:
    runs, nblk = [], 0
    for off, ln, key in blocks[n]:
        if not in_range(key, dleaf[1], dleaf[2]):
            continue
        nblk += 1
        if runs and runs[-1][0] + runs[-1][1] == off:
            runs[-1][1] += ln
        else:
            runs.append([off, ln])
    for off, ln in runs:
        print('run', n, off, ln)
    if runs:
        print('blocks', n, nblk, len(runs), runs[0][0],
              runs[-1][0] + runs[-1][1])
    if in_range(n.encode(), sleaf[1], sleaf[2]):
        print('lost', n, size[n])
        for off, ln, key in blocks[n][2:]:
            if not flip and not in_range(key, dleaf[1], dleaf[2]):
                flip = (os.path.join(tdir, n.split('-')[0] + '.img'), off, n)
print('flip', *flip)
db.zero(dleaf[0])
db.zero(sleaf[0])
db.save()
EOF
DDTPG=$(awk '$1 == "ddt" {print $2}' "$T/expect2")
LIVE=$(awk '$1 == "live" {print $2}' "$T/expect2")
note "the live DDT is $LIVE, with $(awk '$1 == "live" {print $3}' "$T/expect2") runs"
SNAPPG=$(awk '$1 == "snap" {print $2}' "$T/expect2")
read -r _ FLIPIMG FLIPOFF FLIPNAME < <(grep '^flip ' "$T/expect2")
awk '$1 == "run" {print $2, $3, $4}' "$T/expect2" | sort >"$T/runs"
awk '$1 == "lost" {print $2, 0, $3}' "$T/expect2" | sort >"$T/lost"
cut -d' ' -f1 "$T/runs" "$T/lost" | sort -u >"$T/named"
[ -s "$T/runs" ] && [ -s "$T/lost" ] || fail "the damaged pages hold no snapshot"
note "DDT page $DDTPG: $(wc -l <"$T/runs") runs; snapshot page $SNAPPG: $(wc -l <"$T/lost") records"
flip_record "$S2" "$FLIPIMG" "$FLIPOFF"
(cd "$S2" && find . -type f ! -name lock.mdb | sort | xargs sha256sum) >"$T/before"

note "scrub goes on past the damaged DDT and snapshot pages and names what they affect"
run "$DEDUP" scrub "$S2"
assert_rc 1 "scrub of a store with damaged DDT and snapshot pages"
assert_one_line "scrub's error"
assert_grep "^dedup: DD_ECORRUPT: $(wc -l <"$T/named") snapshots with damaged metadata, e\.g\. " \
	"$T/err" "scrub's last line counts the damaged snapshots"
assert_grep "^damaged catalog page $DDTPG of table $LIVE: .*page $DDTPG of LMDB table '$LIVE'.*: it held the DDT entries of the blocks whose hashes run from (run [0-9]+ )?[0-9a-f]{16} to (run [0-9]+ )?[0-9a-f]{16}: .*; the catalog is an index of the packs and manifests: dedup repair $S2 rebuilds it\$" \
	"$T/out" "scrub reports the DDT page, what it held and the way out"
assert_grep "^damaged catalog page $SNAPPG of table snap: .*page $SNAPPG of LMDB table 'snap'.*: it held the records of the snapshots named from 'e[0-9]+-x+' to 'e[0-9]+-x+': .*dedup repair $S2 rebuilds it\$" \
	"$T/out" "scrub reports the snapshot page"
assert_eq 2 "$(grep -c '^damaged catalog page [0-9]* of table [a-z0-9]*: ' "$T/out")" \
	"two damaged pages"
sed -n "s/^damaged catalog page $DDTPG of table $LIVE affects \([^ ]*\) at offsets \([0-9]*\) to \([0-9]*\)\$/\1 \2 \3/p" "$T/out" |
	awk '{print $1, $2, $3 - $2}' | sort >"$T/got_runs"
diff "$T/runs" "$T/got_runs" >"$T/err" ||
	fail "scrub's runs of the DDT page are not the expected ones (diff below)"
sed -n "s/^damaged catalog page $SNAPPG of table snap affects \([^ ]*\) at offsets \([0-9]*\) to \([0-9]*\)\$/\1 \2 \3/p" "$T/out" |
	sort >"$T/got_lost"
diff "$T/lost" "$T/got_lost" >"$T/err" ||
	fail "scrub's snapshots of the snapshot page are not the expected ones (diff below)"
assert_eq "$(($(wc -l <"$T/runs") + $(wc -l <"$T/lost")))" \
	"$(grep -c '^damaged catalog page .* affects ' "$T/out")" \
	"no other affected range"
grep '^damaged snapshot ' "$T/out" | cut -d' ' -f3 | tr -d : | sort >"$T/got_named"
diff "$T/named" "$T/got_named" >"$T/err" ||
	fail "scrub names other damaged snapshots (diff below)"
# the line ends with the message of the first page that affects it: the
# snapshot page's for a snapshot whose record is lost too
while read -r _ name n runs from to; do
	[ "$runs" = 1 ] && s="" || s=s
	page="$DDTPG of LMDB table '$LIVE'"
	grep -q "^$name " "$T/lost" && page="$SNAPPG of LMDB table 'snap'"
	assert_grep "^damaged snapshot $name: DD_ECORRUPT: snapshot '$name': (its record .*; )?$n of its blocks, in $runs run$s from offset $from to $to, have their DDT entries on damaged catalog pages and cannot be located; .*page $page: .*run dedup repair\$" \
		"$T/out" "scrub names $name's blocks on the DDT page"
done < <(grep '^blocks ' "$T/expect2")
while read -r name _ _; do
	assert_grep "^damaged snapshot $name: DD_ECORRUPT: snapshot '$name': its record is on a damaged catalog page, so ls and get do not see it \(it was checked from its manifest\); .*page $SNAPPG of LMDB table 'snap'.*run dedup repair\$" \
		"$T/out" "scrub names $name, whose record the page held"
done <"$T/lost"
assert_grep "used by $FLIPNAME at offset $FLIPOFF\$" "$T/out" \
	"scrub names the bad block, used by a snapshot whose record is lost"
assert_eq 1 "$(grep -c '^bad block ' "$T/out")" "one bad block use"
(cd "$S2" && find . -type f ! -name lock.mdb | sort | xargs sha256sum) >"$T/after"
diff "$T/before" "$T/after" >"$T/err" ||
	fail "scrub changed the damaged store (files that differ below)"

run "$DEDUP" scrub --json "$S2"
assert_rc 1 "scrub --json"
assert_json "$T/out" "scrub --json"
assert_eq "[[\"$LIVE\", $DDTPG, \"DD_ECORRUPT\"], [\"snap\", $SNAPPG, \"DD_ECORRUPT\"]]" \
	"$(json_get "$T/out" "sorted([p['table'], p['page'], p['error']] for p in j['damaged_pages'])")" \
	"scrub --json: the damaged pages"
json_get "$T/out" "'\\n'.join(sorted('%s %d %d' % (r['snapshot'], r['offset'], r['length']) for r in j['affected_ranges'] if r['table'] == '$LIVE' and r['page'] == $DDTPG))" >"$T/got_runs"
diff "$T/runs" "$T/got_runs" >"$T/err" ||
	fail "scrub --json: the DDT page's runs (diff below)"
json_get "$T/out" "'\\n'.join(sorted('%s %d %d' % (r['snapshot'], r['offset'], r['length']) for r in j['affected_ranges'] if r['table'] == 'snap' and r['page'] == $SNAPPG))" >"$T/got_lost"
diff "$T/lost" "$T/got_lost" >"$T/err" ||
	fail "scrub --json: the snapshot page's snapshots (diff below)"
assert_eq "$(($(wc -l <"$T/runs") + $(wc -l <"$T/lost")))" \
	"$(json_get "$T/out" "len(j['affected_ranges'])")" \
	"scrub --json: no other affected range"
json_get "$T/out" "'\\n'.join(sorted(d['snapshot'] for d in j['damaged_snapshots']))" >"$T/got_named"
diff "$T/named" "$T/got_named" >"$T/err" ||
	fail "scrub --json: the damaged snapshots (diff below)"
assert_eq "[[\"$FLIPNAME\", $FLIPOFF]]" \
	"$(json_get "$T/out" "[[b['snapshot'], b['offset']] for b in j['bad']]")" \
	"scrub --json: the bad block's use"

# ---- repair, heal, and every snapshot exact -------------------------------
note "after repair only the bad block is left; a put of its data heals it"
"$DEDUP" repair "$S2" >/dev/null
run "$DEDUP" scrub "$S2"
assert_rc 1 "scrub after repair"
assert_grep 'scrub found 1 bad block' "$T/err" "scrub's last line after repair"
assert_eq 0 "$(grep -c '^damaged ' "$T/out" || true)" \
	"nothing damaged in the catalog after repair"
assert_grep "used by $FLIPNAME at offset $FLIPOFF\$" "$T/out" \
	"the bad block, after repair"
"$DEDUP" put "$S2@heal" "$FLIPIMG"
run "$DEDUP" scrub "$S2"
assert_rc 0 "scrub after repair and heal"
for i in $(seq 10 57); do
	"$DEDUP" get "$S2@e$i-$LONG" "$T/e$i.out"
	assert_same "$T/e$i.img" "$T/e$i.out" "get e$i after repair"
done

# ---- the packs table ----------------------------------------------------------
# its one page zeroed: the packs' committed ends are unknown; every block
# is still read and checked, no snapshot is affected, and scrub says so
note "a damaged page of the packs table"
python3 - "$S2" "$DD_SRC/tests/e2e" >"$T/packs" <<'EOF'
import sys
sys.path.insert(0, sys.argv[2])
from lmdb_walk import Db

db = Db(sys.argv[1])
leaves = db.table_leaves('packs')
assert len(leaves) == 1 and leaves[0][1] is None and leaves[0][2] is None
db.zero(leaves[0][0])
db.save()
print(leaves[0][0])
EOF
PACKSPG=$(cat "$T/packs")
run "$DEDUP" scrub "$S2"
assert_rc 1 "scrub of a store with a damaged packs page"
assert_one_line "scrub's error"
assert_grep "^dedup: DD_ECORRUPT: 1 damaged catalog page, e\.g\. .*page $PACKSPG of LMDB table 'packs'" \
	"$T/err" "scrub's last line names the page"
assert_grep "^damaged catalog page $PACKSPG of table packs: .*it held the committed ends of packs the table's start to the table's end: .*dedup repair $S2 rebuilds it\$" \
	"$T/out" "scrub reports the packs page"
assert_eq 1 "$(grep -c '^damaged ' "$T/out")" "the page, and nothing else damaged"
run "$DEDUP" scrub --json "$S2"
assert_rc 1 "scrub --json of a store with a damaged packs page"
assert_eq "240 0 [] [] 0 [[\"packs\", $PACKSPG]]" \
	"$(json_get "$T/out" "'%d %d %s %s %d %s' % (j['blocks_checked'], j['bad_blocks'], j['bad'], j['damaged_snapshots'], len(j['affected_ranges']), [[p['table'], p['page']] for p in j['damaged_pages']])" | tr "'" '"')" \
	"scrub --json: every block read and checked, the page alone damaged"
# the healed block's first, damaged record is still in its pack: repair
# reads the records of a hash that several hold and takes the good one
"$DEDUP" repair "$S2" >/dev/null
run "$DEDUP" scrub "$S2"
assert_rc 0 "scrub after repair"
echo "PASS [$TEST_NAME]"
