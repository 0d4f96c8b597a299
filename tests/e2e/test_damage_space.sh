#!/usr/bin/env bash
# test_damage_space.sh -- getting out of damage and out of a full disk.
#
# 1. A truncated pack: rm of the snapshots it hurt and gc both work; gc keeps
#    the pack while a live block in it is damaged (moving the readable ones
#    and punching the dead), drops it once nothing lives in it; a put works
#    beside it all along, and every snapshot left reads back exact.
# 2. A tmpfs that a put just filled: rm, then gc, which has no room to copy
#    live records and punches the dead ones out instead (format/pack.md
#    §6.1): the removed snapshot's space comes back and the next put
#    succeeds.  At 100% full, rm and gc still work (STORE/reserve).
#
# Part 2 needs to mount a tmpfs (root); it prints SKIP when it cannot.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MIB=$((1024 * 1024))

# ---- 1. a truncated pack ------------------------------------------------------
note "rm and gc with a truncated pack"
S="$T/s"
"$DEDUP" init --compress none --block-size 64K "$S"
gen_random "$T/a.img" $((3 * MIB)) dmg-a
gen_random "$T/b.img" $((3 * MIB)) dmg-b
gen_random "$T/c.img" $((2 * MIB)) dmg-c
"$DEDUP" put "$S@a" "$T/a.img"
"$DEDUP" put "$S@b" "$T/b.img"
pack="$S/packs/00000001.pack"
# a's records first, then b's: cut in the middle of a's
truncate -s $((3 * MIB / 2)) "$pack"

run "$DEDUP" get "$S@a" "$T/a.out"
assert_rc 1 "get of a snapshot in the truncated part"
run "$DEDUP" put "$S@c" "$T/c.img"
assert_rc 0 "put beside a truncated pack"
run "$DEDUP" rm "$S@b"
assert_rc 0 "rm of a snapshot wholly in the cut-off part"
run "$DEDUP" gc "$S"
assert_rc 0 "gc with a truncated pack and a damaged live snapshot"
assert_grep 'reclaimed' "$T/out" "gc says what it reclaimed"
[ -e "$pack" ] || fail "gc dropped a pack that still holds a damaged live block"
run "$DEDUP" scrub "$S"
assert_rc 1 "scrub still names the damaged blocks of a"
run "$DEDUP" get "$S@c" "$T/c.out"
assert_rc 0 "get c"
assert_same "$T/c.img" "$T/c.out" "c after gc"
run "$DEDUP" rm "$S@a"
assert_rc 0 "rm of the damaged snapshot"
run "$DEDUP" gc "$S"
assert_rc 0 "gc after the damaged snapshot is gone"
[ ! -e "$pack" ] || fail "the truncated pack is still there with nothing live in it"
run "$DEDUP" scrub "$S"
assert_rc 0 "scrub of what is left"
run "$DEDUP" ls --json "$S"
assert_eq "c" "$(json_get "$T/out" "' '.join(s['name'] for s in j)")" "snapshots left"
run "$DEDUP" get "$S@c" "$T/c.out"
assert_same "$T/c.img" "$T/c.out" "c at the end"

# ---- 2. a full file system ------------------------------------------------------
mount_tmpfs 40m

note "gc on a tmpfs that a put just filled"
S="$M/s"
"$DEDUP" init --compress none "$S"
[ -f "$S/reserve" ] || fail "a new store has no reserve"
gen_random "$T/p.img" $((10 * MIB)) full-p
gen_random "$T/q.img" $((10 * MIB)) full-q
gen_random "$T/r.img" $((14 * MIB)) full-r
"$DEDUP" put "$S@p" "$T/p.img"
"$DEDUP" put "$S@q" "$T/q.img"
"$DEDUP" put "$S@r" "$T/r.img"
before=$(avail)
note "free after the puts: $before bytes"
[ "$before" -lt $((10 * MIB)) ] || fail "the puts did not fill the file system ($before free)"
# p, q and r share one pack: gc would have to copy 24 MiB to rewrite it
[ "$(find "$S/packs" -name '*.pack' | wc -l)" -eq 1 ] || fail "expected one pack"
run "$DEDUP" rm "$S@q"
assert_rc 0 "rm on a full file system"
run "$DEDUP" gc "$S"
assert_rc 0 "gc on a full file system"
after=$(avail)
note "free after rm and gc: $after bytes"
[ "$after" -ge $((before + 9 * MIB)) ] ||
	fail "gc did not give back q's space: $before free before, $after after"
run "$DEDUP" put "$S@s" "$T/q.img"
assert_rc 0 "the next put"
for n in p r; do
	run "$DEDUP" get "$S@$n" "$T/$n.out"
	assert_rc 0 "get $n"
	assert_same "$T/$n.img" "$T/$n.out" "$n after gc"
done
run "$DEDUP" get "$S@s" "$T/s.out"
assert_same "$T/q.img" "$T/s.out" "s"
run "$DEDUP" scrub "$S"
assert_rc 0 "scrub after punching"
[ -f "$S/reserve" ] || fail "gc did not make the reserve again"

note "rm and gc at 100% full"
dd if=/dev/zero of="$M/fill" bs=64k 2>/dev/null || true
assert_eq 0 "$(avail)" "free space after filling"
run "$DEDUP" rm "$S@p"
assert_rc 0 "rm at 100% full"
run "$DEDUP" gc "$S"
assert_rc 0 "gc at 100% full"
[ "$(avail)" -ge $((9 * MIB)) ] || fail "gc at 100% full gave back $(avail) bytes"
rm -f "$M/fill"
run "$DEDUP" ls --json "$S"
assert_eq "r s" "$(json_get "$T/out" "' '.join(sorted(s['name'] for s in j))")" "snapshots left"
run "$DEDUP" scrub "$S"
assert_rc 0 "scrub at the end"
echo "PASS [$TEST_NAME]"
