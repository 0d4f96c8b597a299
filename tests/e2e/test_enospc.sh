#!/usr/bin/env bash
# test_enospc.sh -- a store on a full file system (a small tmpfs).
#
# A put that runs out of space fails with one line naming DD_ENOSPC, leaves
# no snapshot behind (it rolls back), and harms nothing committed: the store
# opens, lists, reads back exact and scrubs clean; gc gives the space back and
# the next put succeeds.  A sweep then fills the file system to leave a little
# less or more than a put needs, so that the failure lands in every step of
# the write order of format/store.md §7 (pack write, pack sync, LMDB commit).
#
# Needs to mount a tmpfs (root); prints SKIP and exits 0 when it cannot.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MIB=$((1024 * 1024))
mount_tmpfs 24m
pb() { "$DEDUP" stat --json "$S" >"$T/st.json" && json_get "$T/st.json" "j['$1']"; }

# check_store WHAT SNAP...: exactly SNAP... are listed, each reads back equal
# to $T/SNAP.img, and scrub passes.
check_store() {
	local what=$1
	shift
	run "$DEDUP" ls --json "$S"
	assert_rc 0 "ls after $what"
	assert_eq "$*" "$(json_get "$T/out" "' '.join(sorted(s['name'] for s in j))")" \
		"snapshots after $what"
	for n in "$@"; do
		run "$DEDUP" get "$S@$n"
		assert_rc 0 "get $n after $what"
		assert_same "$T/$n.img" "$T/out" "$n after $what"
	done
	run "$DEDUP" scrub "$S"
	assert_rc 0 "scrub after $what"
}

# assert_enospc WHAT: the last run failed with exit 1 and one line naming the
# lack of space.
assert_enospc() {
	assert_rc 1 "$1"
	assert_one_line "$1"
	grep -Eq 'DD_ENOSPC|No space' "$T/err" || fail "$1: message does not say DD_ENOSPC"
	assert_empty "$T/out" "$1 (stdout)"
}

# ---- one put much larger than the file system ----------------------------------
note "a 40 MiB put into a 24 MiB tmpfs"
S="$M/s"
"$DEDUP" init --compress none "$S"
gen_random "$T/a.img" $((2 * MIB)) enospc-a
"$DEDUP" put "$S@a" "$T/a.img"
gen_random "$T/big.img" $((40 * MIB)) enospc-big
pack_before=$(pb pack_bytes)
free_before=$(avail)

run "$DEDUP" put "$S@big" "$T/big.img"
assert_enospc "put of 40 MiB into a full store"
check_store "the failed put" a
# and through stdin, which cannot know the size in advance
run_in "$T/big.img" "$DEDUP" put "$S@big" -
assert_enospc "put of 40 MiB from stdin into a full store"
check_store "the failed put from stdin" a

run "$DEDUP" gc "$S"
assert_rc 0 "gc after the failed puts"
assert_eq "$pack_before" "$(pb pack_bytes)" "pack_bytes after the failed put and gc"
assert_eq 0 "$(pb unreferenced_blocks)" "unreferenced_blocks after the failed put and gc"
free_after=$(avail)
note "free space: $free_before before the failed puts, $free_after after gc"
[ "$free_after" -ge $((free_before - MIB)) ] ||
	fail "free space not back after gc: $free_before before, $free_after after"

gen_random "$T/c.img" $((1 * MIB + 12345)) enospc-c
run "$DEDUP" put "$S@c" "$T/c.img"
assert_rc 0 "a small put after gc"
check_store "a small put after gc" a c

# ---- a sweep of free space around what a 1 MiB put needs -----------------------
# 4 KiB blocks, so that a put makes many DDT entries and the LMDB commit needs
# pages too.  FILL holds the space we take away.
note "free-space sweep"
run "$DEDUP" rm "$S@c"
assert_rc 0 "rm c"
run "$DEDUP" gc "$S"
assert_rc 0 "gc before the sweep"
S2="$M/s2"
"$DEDUP" init --block-size 4096 --compress none "$S2"
S_SAVE=$S
S=$S2
"$DEDUP" put "$S@a" "$T/a.img"
base_pack=$(pb pack_bytes)
FILL="$M/fill"
n_ok=0 n_fail=0
steps="0 4096 16384 65536 262144 524288"
for ((f = 1036288; f <= 1200128; f += 8192)); do steps="$steps $f"; done
i=0
for free in $steps; do
	i=$((i + 1))
	gen_random "$T/d$i.img" $((1 * MIB)) "enospc-sweep-$i"
	have=$(avail)
	if [ "$have" -gt "$free" ]; then
		fallocate -l $((have - free)) "$FILL" ||
			fail "cannot fill the tmpfs to leave $free bytes"
	fi
	run "$DEDUP" put "$S@d$i" "$T/d$i.img"
	if [ "$RC" -eq 0 ]; then
		n_ok=$((n_ok + 1))
		check_store "a put with $free bytes free (it succeeded)" a "d$i"
		rm -f "$FILL"
		run "$DEDUP" rm "$S@d$i"
		assert_rc 0 "rm d$i"
	else
		n_fail=$((n_fail + 1))
		assert_rc 1 "put with $free bytes free"
		assert_one_line "put with $free bytes free"
		assert_empty "$T/out" "put with $free bytes free (stdout)"
		# a wrong message is reported at the end, after the store checks
		grep -Eq 'DD_ENOSPC|No space' "$T/err" ||
			echo "free=$free: $(cat "$T/err")" >>"$T/badmsg"
		# reading still works on the full file system
		check_store "a failed put with $free bytes free" a
		rm -f "$FILL"
		check_store "a failed put with $free bytes free, space freed" a
	fi
	run "$DEDUP" gc "$S"
	assert_rc 0 "gc after the put with $free bytes free"
	assert_eq "$base_pack" "$(pb pack_bytes)" "pack_bytes after the put with $free bytes free and gc"
	assert_eq 0 "$(pb unreferenced_blocks)" "unreferenced_blocks after the put with $free bytes free and gc"
	rm -f "$T/d$i.img"
done
note "sweep: $n_ok puts fitted, $n_fail ran out of space"
if [ -s "$T/badmsg" ]; then
	echo "  puts that ran out of space without saying DD_ENOSPC:" >&2
	sed 's/^/    /' "$T/badmsg" >&2
	: >"$T/err"
	fail "$(wc -l <"$T/badmsg") puts on a full file system did not report DD_ENOSPC"
fi
[ "$n_fail" -gt 0 ] || fail "the sweep never ran out of space"
[ "$n_ok" -gt 0 ] || fail "the sweep never had enough space"

# the first store still works after all that
S=$S_SAVE
gen_random "$T/e.img" $((512 * 1024)) enospc-e
"$DEDUP" put "$S@e" "$T/e.img"
check_store "the sweep" a e

echo "PASS [$TEST_NAME]"
