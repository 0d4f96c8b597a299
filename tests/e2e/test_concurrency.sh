#!/usr/bin/env bash
# test_concurrency.sh -- many processes in one store at once.
#
# Writers (put, ddrecv), rm and gc run side by side and none waits for
# another (format/store.md §7): four puts and a ddrecv started together
# all commit exact snapshots; a writer killed with SIGKILL among others
# leaves them whole and its space to gc; gc and rm in a loop beside
# running writers change no committed snapshot.  What needs the store to
# itself (repair) or one at a time (gc) is refused naming the holder, or
# waited for with --wait[=SECONDS].  Readers (get, ls, stat, scrub) never
# block and always read exact bytes, also while gc rewrites and deletes
# the packs they read from.
#
# Environment: DD_CONC_ROUNDS  rounds of the gc/rm loop (default 8; the
#                              long mode is 100)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MIB=$((1024 * 1024))
S="$T/s"
ROUNDS=${DD_CONC_ROUNDS:-8}
PIDS=()
# kill only what this test started (by pid), then lib.sh's cleanup
cleanup() {
	local p
	touch "$T/stop" 2>/dev/null || true
	for p in "${PIDS[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	rm -rf "$T"
}
trap cleanup EXIT

# get_exact NAME [TAG]: get NAME into a file of its own and compare with
# $T/NAME.img.
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

# bg NAME CMD...: runs CMD in the background, its exit status to
# $T/NAME.rc and stderr to $T/NAME.err.
bg() {
	local name=$1
	shift
	(
		set +e
		"$@" >/dev/null 2>"$T/$name.err"
		echo $? >"$T/$name.rc"
	) &
	PIDS+=("$!")
}

# joined NAME: the background job NAME exited 0.
joined() {
	[ -f "$T/$1.rc" ] || fail "$1 left no exit status"
	cp "$T/$1.err" "$T/err"
	assert_eq 0 "$(cat "$T/$1.rc")" "exit status of $1 ($(head -c 300 "$T/$1.err"))"
}

scrub_clean() { # WHEN
	run "$DEDUP" scrub "$S"
	assert_rc 0 "scrub $1"
}

stat_get() { # EXPR
	"$DEDUP" stat --json "$S" >"$T/stat.json" 2>"$T/err" || fail "stat"
	json_get "$T/stat.json" "$1"
}

"$DEDUP" init --block-size 4K "$S"

# ---- four puts and a ddrecv at once --------------------------------------------
# Every image holds a common 4 MiB, each one 8 MiB of its own: shared
# blocks are kept once, whoever stores them first.
note "4 puts and a ddrecv started together"
gen_random "$T/common" $((4 * MIB)) conc-common
for i in 1 2 3 4 r; do
	gen_random "$T/own$i" $((8 * MIB)) "conc-own-$i"
	cat "$T/common" "$T/own$i" >"$T/p$i.img"
done
"$DEDUP" init --block-size 4K "$T/src"
"$DEDUP" put "$T/src@pr" "$T/pr.img"
"$DDSEND" "$T/src@pr" >"$T/pr.dds"
for i in 1 2 3 4; do
	bg "put$i" "$DEDUP" put "$S@p$i" "$T/p$i.img"
done
bg recv bash -c "'$DDRECV' '$S' <'$T/pr.dds'"
wait
for i in 1 2 3 4; do
	joined "put$i"
done
joined recv
for i in 1 2 3 4 r; do
	get_exact "p$i"
done
scrub_clean "after the five writers"
assert_eq $(((4 * MIB + 5 * 8 * MIB) / 4096)) "$(stat_get "j['unique_blocks']")" \
	"distinct blocks kept once each"

# ---- a writer killed among others ------------------------------------------------
# The victim has committed intermediate work (8192 blocks a commit: its
# references show in the store's count) when the others start; it dies
# while they run, and they commit regardless.
note "SIGKILL of one writer while others run"
# references held beyond the committed snapshots' blocks: a pending
# writer's committed intervals
pending_refs() {
	"$DEDUP" ls --json "$S" >"$T/ls.json" 2>"$T/err" || fail "ls"
	stat_get "j['referenced_blocks'] - sum(s['blocks'] - s['zero_blocks'] for s in __import__('json').load(open('$T/ls.json')))"
}
gen_random "$T/victim" $((48 * MIB)) conc-victim
mkfifo "$T/fifo"
# it flushes its deferred DDT changes every 8192 ops (format/store.md
# §7.2), so that they count while it runs
DEDUP_DEFER_OPS=8192 "$DEDUP" put "$S@victim" - <"$T/fifo" 2>"$T/victim.err" &
vpid=$!
PIDS+=("$vpid")
exec 8>"$T/fifo"
cat "$T/victim" >&8
for ((i = 0; i < 200; i++)); do
	[ "$(pending_refs)" -lt 8192 ] || break
	sleep 0.05
done
[ "$(pending_refs)" -ge 8192 ] || fail "the victim committed nothing in 10 s"
for i in 5 6 7; do
	gen_random "$T/own$i" $((6 * MIB)) "conc-own-$i"
	cat "$T/own$i" "$T/common" >"$T/p$i.img"
	bg "put$i" "$DEDUP" put "$S@p$i" "$T/p$i.img"
done
sleep 0.2
kill -9 "$vpid"
exec 8>&-
wait
for i in 5 6 7; do
	joined "put$i"
	get_exact "p$i"
done
run "$DEDUP" ls --json "$S"
assert_eq "p1 p2 p3 p4 p5 p6 p7 pr" "$(json_get "$T/out" "' '.join(sorted(s['name'] for s in j))")" \
	"snapshots after the kill"
scrub_clean "after the kill"
run "$DEDUP" gc "$S"
assert_rc 0 "gc after the kill"
assert_eq 0 "$(pending_refs)" "references of the dead writer after recovery"
stored=$(stat_get "j['stored_bytes']")
# the packs' allocated bytes, not their sizes: a pack whose records are
# mostly live is not rewritten but has its dead records punched out
# (store/gc.c), which frees their blocks and keeps the file's size -- the
# victim appends to a pack the writers before it left, or to its own,
# depending on timing
packs=$(du -B1 -c "$S"/packs/*.pack | tail -n 1 | cut -f1)
# what is left is live: payloads, 64-byte record headers, pack headers
[ "$packs" -le $((stored + stored / 50 + MIB)) ] ||
	fail "after gc the packs hold $packs bytes for $stored of live payload: the victim's space was not reclaimed"
assert_eq 0 "$(stat_get "j['unreferenced_blocks']")" "blocks awaiting gc after gc"
for i in 1 5; do
	get_exact "p$i"
done
scrub_clean "after gc"

# ---- gc and rm in a loop beside running writers -------------------------------------
# Two writers put generation after generation; each generation keeps half
# of the previous one's blocks, so rm of an older generation kills blocks
# a running writer has just referenced.  Every round removes all but the
# newest generations and runs gc; no snapshot that stays may change.
note "gc and rm beside running writers: $ROUNDS rounds"
writer_loop() { # W: generation k is half of k-1's new blocks, half new
	local w=$1 k=0
	head -c $((2 * MIB)) "$T/common" >"$T/$w-half"
	while [ ! -e "$T/stop" ]; do
		# at most two generations ahead of the rounds: on a slow build
		# (ASan) writers that outpace rm would make every round longer
		# than the last, without end
		if [ "$k" -ge $((2 * $(cat "$T/round") + 2)) ]; then
			sleep 0.1
			continue
		fi
		k=$((k + 1))
		gen_random "$T/$w-new" $((2 * MIB)) "loop-$w-$k"
		cat "$T/$w-half" "$T/$w-new" >"$T/$w$k.img"
		if ! "$DEDUP" put "$S@$w$k" "$T/$w$k.img" 2>"$T/$w.err"; then
			echo "put $w$k: $(cat "$T/$w.err")" >"$T/$w.failed"
			return
		fi
		echo "$w$k" >>"$T/$w.done"
		cp "$T/$w-new" "$T/$w-half"
	done
}
rm -f "$T/stop"
echo 0 >"$T/round"
for w in wa wb; do
	: >"$T/$w.done"
	: >"$T/$w.removed"
done
writer_loop wa &
PIDS+=("$!")
writer_loop wb &
PIDS+=("$!")
"$DEDUP" ls --json "$S" >"$T/fixed.json"
# the generations of writer W committed and not removed
live_gens() { grep -vxFf "$T/$1.removed" "$T/$1.done" || true; }
for ((round = 1; round <= ROUNDS; round++)); do
	echo "$round" >"$T/round"
	sleep 0.2
	for w in wa wb; do
		[ ! -e "$T/$w.failed" ] || fail "$(cat "$T/$w.failed")"
		# all but the newest two of this writer's generations
		live_gens "$w" | head -n -2 >"$T/$w.old"
		while read -r n; do
			"$DEDUP" rm "$S@$n" 2>"$T/err" || fail "rm $n (round $round)"
			echo "$n" >>"$T/$w.removed"
			rm -f "$T/$n.img"
		done <"$T/$w.old"
	done
	run "$DEDUP" gc "$S"
	assert_rc 0 "gc beside writers (round $round)"
	scrub_clean "beside writers (round $round)"
	# the snapshots from before the loop are as they were
	run "$DEDUP" ls --json "$S"
	python3 - "$T/fixed.json" "$T/out" <<'EOF' || fail "a committed snapshot changed (round $round)"
import json, sys
fixed = {s['name']: s['digest'] for s in json.load(open(sys.argv[1]))}
now = {s['name']: s['digest'] for s in json.load(open(sys.argv[2]))}
bad = [n for n in fixed if now.get(n) != fixed[n]]
sys.exit(1 if bad else 0)
EOF
	# and the newest generation of each writer reads back exact
	for w in wa wb; do
		n=$(live_gens "$w" | tail -n 1)
		[ -z "$n" ] || get_exact "$n" "$n.r$round"
	done
done
touch "$T/stop"
wait
for w in wa wb; do
	[ ! -e "$T/$w.failed" ] || fail "$(cat "$T/$w.failed")"
	note "$w committed $(wc -l <"$T/$w.done") generations beside $ROUNDS gc"
	while read -r n; do
		get_exact "$n"
	done < <(live_gens "$w")
done
scrub_clean "after the loop"

# ---- busy: the holder is named; --wait[=SECONDS] --------------------------------------
# flock(1) stands in for a repair (STORE/lock exclusive) and for a second
# gc (STORE/gc.lock), with the holder line lock.c writes.
note "busy: repair holds the store, a gc runs"
holder='pid 4242 on elsewhere since 2026-01-01T00:00:00Z start 0'
# hold FILE until RELEASE exists (a loaded machine must not end the hold
# before the test is done with it), then wait until the hold has begun
hold() { # FILE RELEASE
	rm -f "$2"
	flock -x "$1" bash -c 'while [ ! -e "$0" ]; do sleep 0.05; done' "$2" &
	PIDS+=("$!")
	while flock -n "$1" true; do sleep 0.05; done
}
printf '%s\n' "$holder" >"$S/lock"
hold "$S/lock" "$T/release"
gen_random "$T/late.img" $((256 * 1024)) conc-late
run "$DEDUP" put "$S@late" "$T/late.img"
assert_rc 1 "put while repair has the store"
assert_one_line "put while repair has the store"
assert_grep 'busy.*pid 4242 on elsewhere' "$T/err" "the busy message names the holder"
run "$DEDUP" rm "$S@p1"
assert_rc 1 "rm while repair has the store"
t0=$(date +%s%N)
run "$DEDUP" put --wait=1 "$S@late" "$T/late.img"
t1=$(date +%s%N)
assert_rc 1 "put --wait=1 while repair has the store for longer"
ms=$(((t1 - t0) / 1000000))
[ "$ms" -ge 900 ] && [ "$ms" -lt 3500 ] || fail "put --wait=1 gave up after $ms ms"
(sleep 1; touch "$T/release") &
run "$DEDUP" put --wait "$S@late" "$T/late.img"
assert_rc 0 "put --wait once repair is done"
get_exact late
# ddrecv the same way: refused at once, or after --wait=S, or waiting
hold "$S/lock" "$T/release"
run bash -c "'$DDRECV' '$S@prw' <'$T/pr.dds'"
assert_rc 1 "ddrecv while repair has the store"
assert_grep 'busy.*pid 4242 on elsewhere' "$T/err" "ddrecv's busy message names the holder"
t0=$(date +%s%N)
run bash -c "'$DDRECV' --wait=1 '$S@prw' <'$T/pr.dds'"
t1=$(date +%s%N)
assert_rc 1 "ddrecv --wait=1 while repair has the store for longer"
ms=$(((t1 - t0) / 1000000))
# the upper bound is the slack of a slow start (ASan, load), as put's
[ "$ms" -ge 900 ] && [ "$ms" -lt 3500 ] || fail "ddrecv --wait=1 gave up after $ms ms"
(sleep 1; touch "$T/release") &
run bash -c "'$DDRECV' --wait '$S@prw' <'$T/pr.dds'"
assert_rc 0 "ddrecv --wait once repair is done"
cp "$T/pr.img" "$T/prw.img"
get_exact prw
printf '%s\n' "$holder" >"$S/gc.lock"
hold "$S/gc.lock" "$T/release"
run "$DEDUP" gc "$S"
assert_rc 1 "gc while another gc runs"
assert_grep 'busy.*pid 4242 on elsewhere' "$T/err" "the busy gc message names the holder"
run "$DEDUP" rm "$S@late"
assert_rc 0 "rm while a gc runs"
run bash -c "'$DDRECV' --wait=0.5 '$S@pr2' <'$T/pr.dds'"
assert_rc 0 "ddrecv while a gc runs"
(sleep 1; touch "$T/release") &
run "$DEDUP" gc --wait "$S"
assert_rc 0 "gc --wait after the other gc"
get_exact p2
cp "$T/pr.img" "$T/pr2.img"
get_exact pr2

# ---- a get that spans a gc ------------------------------------------------------
# Deterministic: the get opens its snapshot (its read transaction) before gc,
# writes the first 8 MiB (all holes: no pack opened yet) into a pipe nobody
# reads for a second, and meanwhile gc rewrites the pack holding the rest and
# deletes it.  The snapshot is live: the get must still return every byte.
note "a slow get across a gc that moves its blocks"
gen_random "$T/p1span" $((4 * MIB)) conc-span
{ head -c $((8 * MIB)) /dev/zero; cat "$T/p1span"; } >"$T/span.img"
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
for ((round = 1; round <= 4; round++)); do
	gen_random "$T/junk.img" $((12 * MIB)) "conc-junk-$round"
	gen_random "$T/c$round.img" $((MIB)) "conc-c-$round"
	"$DEDUP" put "$S@junk" "$T/junk.img"
	"$DEDUP" put "$S@c$round" "$T/c$round.img"
	"$DEDUP" rm "$S@junk"
	rm -f "$T/stop"
	reader p3 "$round" &
	r1=$!
	reader "c$round" "$round" &
	r2=$!
	PIDS+=("$r1" "$r2")
	sleep 0.1
	run "$DEDUP" gc "$S"
	assert_rc 0 "gc with readers (round $round)"
	sleep 0.1
	touch "$T/stop"
	wait "$r1" || fail "a get of live snapshot p3 failed while gc ran (round $round)"
	wait "$r2" || fail "a get of live snapshot c$round failed while gc ran (round $round)"
	total=$((total + $(cat "$T/reads.p3.$round") + $(cat "$T/reads.c$round.$round")))
	[ "$round" -lt 2 ] || "$DEDUP" rm "$S@c$((round - 1))"
done
note "$total gets during 4 gc runs"
scrub_clean "at the end"
for n in p1 p4 pr c4; do
	get_exact "$n"
done

echo "PASS [$TEST_NAME]"
