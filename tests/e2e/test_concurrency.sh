#!/usr/bin/env bash
# test_concurrency.sh -- several processes on one store.
#
# One writer at a time (a put, rm or gc holds STORE/lock, format/store.md
# §1): a second one fails fast with exit 1 and one line saying "busy", or
# with --wait waits and then succeeds.  Readers (get, ls, stat, scrub) never
# block and always read exact bytes, while a put runs and while gc rewrites
# and deletes the packs they read from.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MIB=$((1024 * 1024))
S="$T/s"
PIDS=()
WAITERS=()
# kill only what this test started (by pid), then lib.sh's cleanup
cleanup() {
	local p
	for p in "${PIDS[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	rm -rf "$T"
}
trap cleanup EXIT

locked() { ! flock -n "$S/lock" true; }
slow_running() { [ ! -e "$T/slow.rc" ]; }

# wait_locked: until some writer holds the store's lock (10 s at most)
wait_locked() {
	local i
	for ((i = 0; i < 200; i++)); do
		locked && return 0
		sleep 0.05
	done
	fail "the background writer never took the store's lock"
}

# slow_put NAME P1 P2 DELAY: a writer that stays open DELAY seconds between
# P1 and P2 (the snapshot holds P1 then P2); in the background, pid in SLOW.
slow_put() {
	local name=$1 p1=$2 p2=$3 delay=$4
	rm -f "$T/slow.rc"
	(
		set +e
		# --wait: our own flock probes (locked) may hold the lock for an
		# instant just as it starts
		{ cat "$p1"; sleep "$delay"; cat "$p2"; } |
			"$DEDUP" put --wait "$S@$name" - 2>"$T/slow.err"
		echo $? >"$T/slow.rc"
	) &
	SLOW=$!
	PIDS+=("$SLOW")
	cat "$p1" "$p2" >"$T/$name.img"
}

# join_slow: the slow writer finished successfully
join_slow() {
	wait "$SLOW" || true
	[ -f "$T/slow.rc" ] || fail "the slow put left no exit status"
	cp "$T/slow.err" "$T/err"
	assert_eq 0 "$(cat "$T/slow.rc")" "exit status of the slow put"
}

assert_busy() { # WHAT
	assert_rc 1 "$1 while another writer runs"
	assert_one_line "$1 while another writer runs"
	grep -qi 'busy' "$T/err" || fail "$1 while another writer runs: message does not say busy"
}

# get_exact NAME [TAG]: get NAME into a file of its own and compare.
get_exact() {
	local name=$1 tag=${2:-$1} rc=0
	"$DEDUP" get "$S@$name" >"$T/get.$tag" 2>"$T/get.$tag.err" || rc=$?
	if [ "$rc" -ne 0 ]; then
		cp "$T/get.$tag.err" "$T/err"
		fail "get $name ($tag) exited $rc"
	fi
	cmp -s "$T/$name.img" "$T/get.$tag" || fail "get $name ($tag) returned wrong bytes"
	rm -f "$T/get.$tag" "$T/get.$tag.err"
}

"$DEDUP" init --block-size 16K "$S"
gen_random "$T/a.rand" $((3 * MIB)) conc-a
{ cat "$T/a.rand"; head -c $((MIB)) /dev/zero; } >"$T/a.img"
gen_random "$T/b.img" $((3 * MIB + 777)) conc-b
gen_random "$T/p1" $((8 * MIB)) conc-p1
gen_random "$T/p2" $((8 * MIB)) conc-p2
gen_random "$T/small.img" $((256 * 1024)) conc-small
cp "$T/small.img" "$T/y.img"
cp "$T/small.img" "$T/old.img"
"$DEDUP" put "$S@a" "$T/a.img"
"$DEDUP" put "$S@b" "$T/b.img"
"$DEDUP" put "$S@old" "$T/small.img"

# ---- a second writer fails fast ---------------------------------------------
note "busy: put, rm, gc while a put runs"
slow_put x "$T/p1" "$T/p2" 3
wait_locked
t0=$(date +%s%N)
run "$DEDUP" put "$S@y" "$T/small.img"
t1=$(date +%s%N)
assert_busy "put"
[ $(((t1 - t0) / 1000000)) -lt 1500 ] ||
	fail "a busy put took $(((t1 - t0) / 1000000)) ms to fail, expected it to fail fast"
run "$DEDUP" rm "$S@old"
assert_busy "rm"
run "$DEDUP" gc "$S"
assert_busy "gc"
slow_running || fail "the slow put finished before the busy checks were done (machine too slow?)"

# ---- readers while the put runs ----------------------------------------------
note "readers while a put runs"
reads=0
while slow_running; do
	get_exact a
	reads=$((reads + 1))
	[ "$reads" -lt 500 ] || break
done
note "$reads gets of a while the put ran"
[ "$reads" -ge 1 ] || fail "no get ran while the put held the lock"
join_slow
run "$DEDUP" ls --json "$S"
assert_eq "a b old x" "$(json_get "$T/out" "' '.join(sorted(s['name'] for s in j))")" \
	"snapshots after the first put and the busy attempts"
get_exact x
get_exact old

# ---- --wait: writers queue behind the running one ----------------------------
note "--wait: put, rm, gc wait for the running put"
slow_put x2 "$T/p2" "$T/p1" 2
wait_locked
# each waiter records its exit status and what ls showed right after it
for job in "put --wait $S@y $T/small.img" "rm --wait $S@old" "gc --wait $S"; do
	tag=${job%% *}
	(
		set +e
		# shellcheck disable=SC2086
		"$DEDUP" $job >/dev/null 2>"$T/wait.$tag.err"
		echo $? >"$T/wait.$tag.rc"
		"$DEDUP" ls --json "$S" >"$T/wait.$tag.ls" 2>/dev/null
	) &
	PIDS+=("$!")
	WAITERS+=("$!")
done
# readers meanwhile: two gets of different snapshots at once, ls, stat, scrub
for ((i = 0; i < 3; i++)); do
	get_exact a "a$i" &
	pa=$!
	get_exact b "b$i" &
	pb=$!
	wait "$pa" || fail "concurrent get of a failed"
	wait "$pb" || fail "concurrent get of b failed"
done
for cmd in "ls $S" "stat $S" "scrub $S"; do
	# shellcheck disable=SC2086
	run "$DEDUP" $cmd
	assert_rc 0 "dedup $cmd while writers run and wait"
done
slow_running || fail "the slow put finished before the waiters were checked (machine too slow?)"
[ ! -e "$T/wait.put.rc" ] || fail "put --wait returned while the other writer still ran"
join_slow
for p in "${WAITERS[@]}"; do
	wait "$p" || true
done
for tag in put rm gc; do
	cp "$T/wait.$tag.err" "$T/err"
	[ -f "$T/wait.$tag.rc" ] || fail "$tag --wait left no exit status"
	assert_eq 0 "$(cat "$T/wait.$tag.rc")" "exit status of $tag --wait"
	# it ran after the slow put had committed
	assert_eq true "$(json_get "$T/wait.$tag.ls" "'x2' in [s['name'] for s in j]")" \
		"x2 listed once $tag --wait finished"
done
run "$DEDUP" ls --json "$S"
assert_eq "a b x x2 y" "$(json_get "$T/out" "' '.join(sorted(s['name'] for s in j))")" \
	"snapshots after the waiters"
for n in a b x x2 y; do
	get_exact "$n"
done

# ---- a get that spans a gc ------------------------------------------------------
# Deterministic: the get opens its snapshot (its read transaction) before gc,
# writes the first 8 MiB (all holes: no pack opened yet) into a pipe nobody
# reads for a second, and meanwhile gc rewrites the pack holding the rest and
# deletes it.  The snapshot is live: the get must still return every byte.
note "a slow get across a gc that moves its blocks"
{ head -c $((8 * MIB)) /dev/zero; cat "$T/p1"; } >"$T/span.img"
gen_random "$T/junk.img" $((12 * MIB)) conc-span-junk
"$DEDUP" put "$S@junk" "$T/junk.img"
"$DEDUP" put "$S@span" "$T/span.img"
"$DEDUP" rm "$S@junk"
(
	set +e
	"$DEDUP" get "$S@span" 2>"$T/span.err" | { sleep 1; cat; } >"$T/span.out"
	echo "${PIPESTATUS[0]}" >"$T/span.rc"
) &
span=$!
PIDS+=("$span")
sleep 0.3
run "$DEDUP" gc "$S"
assert_rc 0 "gc while a slow get runs"
grep -Eq '[1-9][0-9]* packs rewritten|[1-9][0-9]* packs deleted' "$T/out" "$T/err" ||
	note "gc moved nothing (this case then proves nothing): $(cat "$T/out" "$T/err")"
wait "$span" || true
cp "$T/span.err" "$T/err"
assert_eq 0 "$(cat "$T/span.rc")" "exit status of a get of a live snapshot across a gc"
assert_same "$T/span.img" "$T/span.out" "a get of a live snapshot across a gc"
rm -f "$T/span.out"

# ---- readers while gc rewrites and deletes packs -----------------------------
# A reader's LMDB read transaction may still point into a pack that gc has
# rewritten and deleted; it must still return exact bytes (or nothing wrong).
note "readers while gc rewrites packs"
reader() { # NAME ROUND: gets NAME until $T/stop exists
	local n=0
	while [ ! -e "$T/stop" ]; do
		get_exact "$1" "$1.r$2"
		n=$((n + 1))
	done
	echo "$n" >"$T/reads.$1.$2"
}
total=0
for ((round = 1; round <= 10; round++)); do
	gen_random "$T/junk.img" $((12 * MIB)) "conc-junk-$round"
	gen_random "$T/c$round.img" $((MIB)) "conc-c-$round"
	# junk and c share packs with a and b; junk's removal leaves them
	# mostly dead, so gc rewrites them and moves a, b and c.
	"$DEDUP" put "$S@junk" "$T/junk.img"
	"$DEDUP" put "$S@c$round" "$T/c$round.img"
	"$DEDUP" rm "$S@junk"
	rm -f "$T/stop"
	reader a "$round" &
	r1=$!
	reader "c$round" "$round" &
	r2=$!
	PIDS+=("$r1" "$r2")
	sleep 0.1
	run "$DEDUP" gc "$S"
	assert_rc 0 "gc with readers (round $round)"
	sleep 0.1
	touch "$T/stop"
	# a and c$round are live: gc moving their blocks must not fail a get
	wait "$r1" || fail "a get of live snapshot a failed while gc ran (round $round)"
	wait "$r2" || fail "a get of live snapshot c$round failed while gc ran (round $round)"
	total=$((total + $(cat "$T/reads.a.$round") + $(cat "$T/reads.c$round.$round")))
	[ "$round" -lt 2 ] || "$DEDUP" rm "$S@c$((round - 1))"
done
note "$total gets during 10 gc runs"
run "$DEDUP" scrub "$S"
assert_rc 0 "scrub at the end"
for n in a b x x2 y c10; do
	get_exact "$n"
done

echo "PASS [$TEST_NAME]"
