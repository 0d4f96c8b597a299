#!/usr/bin/env bash
# test_repair.sh -- the catalog is an index over the packs and the
# manifests: dedup repair rebuilds it (format/store.md §9).
#
#  - a catalog removed, filled with random bytes, with its first 8 KiB
#    zeroed: every command refuses with one line naming dedup repair and
#    leaves db/ as it was; repair brings back every snapshot (names,
#    sizes, times, digests), get is exact, scrub clean, put works, and a
#    second repair gives the same catalog;
#  - an older copy of the catalog is refused, and repair gives the store's
#    committed set: the snapshot deleted since stays deleted;
#  - damage in a pack (a payload byte, a record header) and in a manifest:
#    repair goes on, reports it, names the incomplete snapshot with its
#    first missing byte, exits 1; a put of the original data heals it;
#  - read-only commands (ls, stat, get, scrub, ddsend, cache ls, scan)
#    create and change no file of the store.
source "$(dirname "$0")/lib.sh"

BS=4096
S="$T/s"
gen_blocks "$T/a.img" $BS z 1 2 3 4 5 z z 6 7 t1000:1
gen_blocks "$T/b.img" $BS 2 3 8 9 10 11 z 4
: >"$T/c.img"
"$DEDUP" init --block-size 4K "$S" >/dev/null
for n in a b c; do "$DEDUP" put "$S@$n" "$T/$n.img"; done
"$DEDUP" ls --json "$S" >"$T/ls.want"

# the snapshots' names, sizes, times and digests are those of LISTED (a
# comma-separated list), each of NAMES reads back exact, scrub passes
# when LISTED is NAMES
check_store() { # STORE WHAT LISTED [NAMES...]
	local st=$1 what=$2 listed=$3 n
	shift 3
	run "$DEDUP" ls --json "$st"
	assert_rc 0 "$what: ls"
	# shellcheck disable=SC2046
	python3 - "$T/out" "$T/ls.want" $(tr , ' ' <<<"$listed") <<'EOF' || fail "$what: ls differs"
import json, sys
got = json.load(open(sys.argv[1]))
want = json.load(open(sys.argv[2]))
names = sys.argv[3:]
key = lambda s: (s['name'], s['size'], s['ctime'], s['digest'])
w = sorted(key(s) for s in want if s['name'] in names)
g = sorted(key(s) for s in got)
if g != w:
    print('got ', g, '\nwant', w, file=sys.stderr)
    sys.exit(1)
EOF
	for n in "$@"; do
		run "$DEDUP" get "$st@$n" "$T/got"
		assert_rc 0 "$what: get $n"
		assert_same "$T/got" "$T/$n.img" "$what: get $n"
	done
	if [ "$listed" = "$(tr ' ' , <<<"$*")" ]; then
		run "$DEDUP" scrub "$st"
		assert_rc 0 "$what: scrub"
	fi
}

# what db/ holds: names, sizes, mtimes (nothing may create or change it).
# lock.mdb is left out: it is LMDB's reader table, shared memory that the
# first process to open the environment initializes -- a reader must
# register there so that writers do not reuse the pages it reads.
db_state() {
	{ find "$1/db" -printf '%P %s %T@\n' 2>/dev/null || true; } |
		awk '!/^lock\.mdb /' | sort
}

refused_everywhere() { # STORE WHAT
	local st=$1 what=$2 before cmd
	before=$(db_state "$st")
	for cmd in "ls $st" "stat $st" "get $st@a $T/x" "scrub $st" \
		   "put $st@z $T/b.img" "rm $st@a" "gc $st"; do
		# shellcheck disable=SC2086
		run "$DEDUP" $cmd
		assert_rc 1 "$what: dedup $cmd"
		assert_one_line "$what: dedup $cmd"
		assert_grep 'dedup repair' "$T/err" "$what: dedup $cmd"
	done
	run "$DDSEND" "$st@a"
	assert_nonzero "$what: ddsend"
	assert_one_line "$what: ddsend"
	assert_grep 'dedup repair' "$T/err" "$what: ddsend"
	assert_eq "$before" "$(db_state "$st")" "$what: db/ changed"
	[ ! -e "$T/x" ] || fail "$what: a refused get left an output file"
}

for damage in removed random zero-head; do
	note "catalog $damage"
	W="$T/w-$damage"
	cp -a "$S" "$W"
	case $damage in
	removed) rm -rf "$W/db" ;;
	random) size=$(stat -c %s "$W/db/data.mdb")
		head -c "$size" /dev/urandom >"$W/db/data.mdb" ;;
	zero-head) dd if=/dev/zero of="$W/db/data.mdb" bs=8192 count=1 \
			conv=notrunc status=none ;;
	esac
	refused_everywhere "$W" "catalog $damage"
	run "$DEDUP" repair "$W"
	assert_rc 0 "repair of a catalog $damage"
	assert_grep '^repair: 3 snapshots restored \(0 incomplete\)' "$T/out" \
		"repair of a catalog $damage"
	[ ! -e "$W/db.repair" ] || fail "repair left db.repair behind"
	check_store "$W" "after repair ($damage)" a,b,c a b c
	"$DEDUP" stat --json "$W" >"$T/stat1"
	"$DEDUP" ls --json "$W" >"$T/ls1"
	run "$DEDUP" repair --verify "$W"
	assert_rc 0 "second repair, --verify ($damage)"
	"$DEDUP" stat --json "$W" >"$T/stat2"
	"$DEDUP" ls --json "$W" >"$T/ls2"
	assert_same "$T/ls1" "$T/ls2" "repair is idempotent (ls, $damage)"
	assert_same "$T/stat1" "$T/stat2" "repair is idempotent (stat, $damage)"
	gen_blocks "$T/d.img" $BS 1 12 13 z
	run "$DEDUP" put "$W@d" "$T/d.img"
	assert_rc 0 "put after repair ($damage)"
	run "$DEDUP" get "$W@d" "$T/got"
	assert_same "$T/got" "$T/d.img" "get of a put after repair ($damage)"
done

note "an older copy of the catalog"
W="$T/w-old"
cp -a "$S" "$W"
cp -a "$W/db" "$T/db-old"
"$DEDUP" put "$W@d" "$T/d.img"
"$DEDUP" ls --json "$W" >"$T/ls.want"
"$DEDUP" rm "$W@b"
rm -rf "$W/db" && cp -a "$T/db-old" "$W/db"
for cmd in "ls $W" "put $W@e $T/b.img" "rm $W@a" "gc $W"; do
	# shellcheck disable=SC2086
	run "$DEDUP" $cmd
	assert_rc 1 "older catalog: dedup $cmd"
	assert_one_line "older catalog: dedup $cmd"
	assert_grep 'dedup repair' "$T/err" "older catalog: dedup $cmd"
done
run "$DEDUP" repair "$W"
assert_rc 0 "repair of an older catalog"
check_store "$W" "older catalog repaired (b stays deleted)" a,c,d a c d
"$DEDUP" ls --json "$S" >"$T/ls.want"

note "a catalog gone back in time (the older LMDB meta page chosen)"
W="$T/w-back"
cp -a "$S" "$W"
"$DEDUP" put "$W@d" "$T/d.img"
"$DEDUP" rm "$W@b"
# LMDB picks the meta page with the larger txnid (offset 144 of pages 0
# and 1 in the 64-bit layout): raising the older one's drops the last
# commit, here the one that dropped b.  LMDB keeps no checksum to see
# it.  (One commit back from a put is its manifest's published, pending
# state: consistent, and listed as committed.)
python3 - "$W/db/data.mdb" <<'EOF'
import struct, sys
f = open(sys.argv[1], 'r+b')
psize = 4096
ids = []
for page in (0, 1):
    f.seek(page * psize + 144)
    ids.append(struct.unpack('<Q', f.read(8))[0])
old = 0 if ids[0] < ids[1] else 1
f.seek(old * psize + 144)
f.write(struct.pack('<Q', max(ids) + 1))
EOF
for cmd in "ls $W" "scrub $W" "put $W@e $T/b.img"; do
	# shellcheck disable=SC2086
	run "$DEDUP" $cmd
	assert_rc 1 "catalog back in time: dedup $cmd"
	assert_one_line "catalog back in time: dedup $cmd"
	assert_grep 'dedup repair' "$T/err" "catalog back in time: dedup $cmd"
done
run "$DEDUP" repair "$W"
assert_rc 0 "repair of a catalog gone back in time"
run "$DEDUP" ls "$W"
assert_eq "a c d" "$(awk 'NR > 1 { print $1 }' "$T/out" | xargs)" \
	"repair: b deleted, d committed"
run "$DEDUP" get "$W@d" "$T/got"
assert_same "$T/got" "$T/d.img" "the lost commit's snapshot"

note "a damaged payload byte"
W="$T/w-payload"
cp -a "$S" "$W"
# a's first block (its bytes at 4096) is the first record of the pack:
# header at 64, payload from 128; it is a's alone
printf '\xff' | dd of="$W/packs/00000001.pack" bs=1 seek=1000 conv=notrunc \
	status=none
run "$DEDUP" repair "$W"
assert_rc 0 "repair that walks headers only"
run "$DEDUP" repair --verify "$W"
assert_rc 1 "repair --verify of a damaged payload"
assert_one_line "repair --verify of a damaged payload"
assert_grep "^records: 00000001.pack: 4160 bytes at offset 64 skipped: .*sha256" \
	"$T/out" "repair --verify reports the record"
assert_grep "^incomplete: snapshot 'a' lacks 1 block, the first at byte 4096" \
	"$T/out" "repair --verify names a's first missing byte"
run "$DEDUP" get "$W@a" "$T/got"
assert_rc 1 "get of a lost block"
assert_grep 'lost' "$T/err" "get of a lost block"
check_store "$W" "the other snapshots" a,b,c b c
run "$DEDUP" put "$W@a-again" "$T/a.img"
assert_rc 0 "put of the lost block's data"
cp "$T/a.img" "$T/a-again.img"
"$DEDUP" ls --json "$W" >"$T/ls.want"
check_store "$W" "healed by put" a,a-again,b,c a a-again b c
"$DEDUP" ls --json "$S" >"$T/ls.want"
run "$DEDUP" get "$W@a-again" "$T/got"
assert_same "$T/got" "$T/a.img" "the healing snapshot"

note "a damaged record header"
W="$T/w-header"
cp -a "$S" "$W"
printf '\xff' | dd of="$W/packs/00000001.pack" bs=1 seek=72 conv=notrunc \
	status=none
run "$DEDUP" repair "$W"
assert_rc 1 "repair of a damaged record header"
assert_grep '^records: 00000001.pack: 4160 bytes at offset 64 skipped' "$T/out" \
	"repair reports the skipped record"
assert_grep "^incomplete: snapshot 'a' lacks 1 block, the first at byte 4096" \
	"$T/out" "repair names a's first missing byte"
run "$DEDUP" repair --json "$W"
assert_rc 1 "repair --json"
assert_json "$T/out" "repair --json"
assert_eq 4160 "$(json_get "$T/out" "j['damaged_bytes']")" "bytes skipped"
check_store "$W" "records after the damaged one" a,b,c b c

note "a damaged manifest"
W="$T/w-manifest"
cp -a "$S" "$W"
m=$(ls "$W/manifests" | head -1)    # the first snapshot's: a
printf '\xff' | dd of="$W/manifests/$m" bs=1 seek=200 conv=notrunc status=none
rm -rf "$W/db"
run "$DEDUP" repair "$W"
assert_rc 1 "repair with a damaged manifest"
assert_grep "^manifest: .*$m" "$T/out" "repair names the manifest"
[ -e "$W/manifests/$m.damaged" ] || fail "the damaged manifest was not moved aside"
check_store "$W" "the other snapshots" b,c b c
run "$DEDUP" put "$W@e" "$T/b.img"
assert_rc 0 "put after a manifest was lost"

note "read-only commands change nothing"
W="$T/w-ro"
cp -a "$S" "$W"
"$DEDUP" cache add --size 8M "$W" "$T/l2" >/dev/null
state() { find "$W" -printf '%P %s %T@\n' | grep -v '^db/lock.mdb ' | sort; }
sleep 1.1   # a change would show in the mtimes
before=$(state)
for cmd in "ls $W" "ls --json $W" "stat $W" "stat --json $W" \
	   "get $W@a $T/got" "scrub $W" "cache ls $W" "scan $W"; do
	# shellcheck disable=SC2086
	run "$DEDUP" $cmd
	assert_rc 0 "dedup $cmd"
	assert_eq "$before" "$(state)" "dedup $cmd changed the store"
done
run "$DDSEND" "$W@a"
assert_rc 0 "ddsend"
assert_eq "$before" "$(state)" "ddsend changed the store"

echo "PASS [$TEST_NAME]"
