#!/usr/bin/env bash
# test_upgrade.sh -- a store of format 1 (before manifests), made by the
# build before them (tests/golden/store_v1.tgz: 4 KiB blocks, snapshots a
# and b, and a removed one), read and upgraded by this one
# (format/store.md §1).
#
#  - readers work on it as it is, and change nothing (still format 1);
#  - repair refuses it: it has no manifests to repair from;
#  - the first writer upgrades it: a manifest for each snapshot, DEDUP
#    format 2 with the options, and -- its snapshot's content digest being
#    of version 2 -- format 4 before that snapshot is written; the old
#    snapshots keep their digests of version 1 (manifests without feature
#    bit 1); then repair rebuilds its catalog like any other store's.
source "$(dirname "$0")/lib.sh"

BS=4096
tar xzf "$DD_SRC/tests/golden/store_v1.tgz" -C "$T"
S="$T/v1"
gen_blocks "$T/a.img" $BS 1 2 3 z 4 5 t700:1
gen_blocks "$T/b.img" $BS 2 3 z z 6
gen_blocks "$T/c.img" $BS 7 2 z 8

grep -qx 'format 1' "$S/DEDUP" || fail "the golden store is not format 1"
state() { find "$S" -printf '%P %s %T@\n' | grep -v '^db/lock.mdb ' | sort; }
before=$(state)
run "$DEDUP" ls "$S"
assert_rc 0 "ls of a format-1 store"
assert_eq "a b" "$(awk 'NR > 1 { print $1 }' "$T/out" | xargs)" "format-1 ls"
for n in a b; do
	run "$DEDUP" get "$S@$n" "$T/got"
	assert_rc 0 "get $n of a format-1 store"
	assert_same "$T/got" "$T/$n.img" "get $n of a format-1 store"
done
run "$DEDUP" scrub "$S"
assert_rc 0 "scrub of a format-1 store"
assert_eq "$before" "$(state)" "readers changed a format-1 store"

run "$DEDUP" repair "$S"
assert_rc 1 "repair of a format-1 store"
assert_one_line "repair of a format-1 store"
assert_grep 'DD_ENOTSUP.*format 1' "$T/err" "repair of a format-1 store"
assert_eq "$before" "$(state)" "a refused repair changed the store"

note "the first writer upgrades it"
run "$DEDUP" put "$S@c" "$T/c.img"
assert_rc 0 "put into a format-1 store"
assert_grep '^format 4$' "$S/DEDUP" "DEDUP after the upgrade"
for k in block_size verify compress compress_level hash uuid; do
	assert_grep "^$k " "$S/DEDUP" "DEDUP after the upgrade names $k"
done
assert_grep '^block_size 4096$' "$S/DEDUP" "the block size in DEDUP"
assert_eq 3 "$(find "$S/manifests" -name '*.snap' | wc -l)" \
	"manifests after the upgrade"
# manifest features (format/manifest.md §3): bit 1 is digest version 2
features() { od -An -t u4 -j 12 -N 4 "$1" | tr -d ' '; }
v2=0
for m in "$S"/manifests/*.snap; do
	[ "$(features "$m")" = 2 ] && v2=$((v2 + 1))
done
assert_eq 1 "$v2" "manifests of digest version 2 (the new snapshot only)"
rm -rf "$S/db"
run "$DEDUP" repair "$S"
assert_rc 0 "repair of the upgraded store"
run "$DEDUP" ls "$S"
assert_eq "a b c" "$(awk 'NR > 1 { print $1 }' "$T/out" | xargs)" \
	"snapshots after repair"
for n in a b c; do
	run "$DEDUP" get "$S@$n" "$T/got"
	assert_same "$T/got" "$T/$n.img" "get $n after the upgrade and repair"
done
run "$DEDUP" scrub "$S"
assert_rc 0 "scrub after the upgrade and repair"
echo "PASS [$TEST_NAME]"
