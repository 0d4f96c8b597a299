#!/usr/bin/env bash
# tests/bench/bench_flat.sh -- is new data flat as the DDT grows (issue 18)?
# bench_small.sh times each round once, in a row, on a shared VM whose
# rounds swing by a second (page-cache backing, writeback of the rounds
# before); its last / first ratio is one sample of each.  Here the first
# and the last round are repeated, alternated, on the same state each
# time, and the best of each is compared:
#
#   a: round 1 (1 GiB of new 4 KiB blocks) into an empty store;
#   b: round N into a copy of a store of rounds 1..N-1 (its catalog
#      copied, its packs hard-linked but the newest, which the put may
#      append to).
#
#   tests/bench/bench_flat.sh [--rounds N] [--trials K]
#
#   --rounds N   the last round (default 16: the store holds 15 x 262,144
#                = 3.9 M entries when it starts, 4.2 M after)
#   --trials K   times each is run (default 3)
#
# Environment: DD_BIN (default build/bin; build Release), BENCH_DIR.  The
# inputs are bench_small.sh's (made here when missing).  Results on stdout
# and in $BENCH_DIR/results-flat.json.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

ROUNDS=16 TRIALS=3
while [[ $# -gt 0 ]]; do
	case $1 in
	--rounds) ROUNDS=$2; shift ;;
	--trials) TRIALS=$2; shift ;;
	*) bench_die "unknown option $1" ;;
	esac
	shift
done
((ROUNDS >= 2)) || bench_die "--rounds must be at least 2"
bench_init flat
DD=${DD_BIN:-$BENCH_REPO/build/bin}/dedup
[[ -x $DD ]] || bench_die "no $DD: build first (Release)"
SIZE=1073741824
need=$(((ROUNDS + 2) * SIZE / 100 * 115))
avail=$(($(df --output=avail -B1 "$BENCH_DIR" | tail -n 1)))
((avail >= need)) ||
	bench_die "$((need >> 30)) GiB needed in $BENCH_DIR, $((avail >> 30)) GiB free"

data_file() { bench_rand_file "$SIZE" "$1"; }
prefault() { bench_prefault; }
# timed KEY CMD...: wall seconds and CPU (user + system) of one run
timed() {
	local key=$1 t0 t1
	shift
	t0=$(date +%s%N)
	/usr/bin/time -f '%U %S' -o "$BENCH_RUN/$key.time" "$@" >/dev/null 2>"$BENCH_RUN/$key.err" ||
		bench_die "$key: '$*' failed; stderr in $BENCH_RUN/$key.err"
	t1=$(date +%s%N)
	awk -v a="$t0" -v b="$t1" -v k="$key" '
		{ cpu = $1 + $2 }
		END { printf "%s %.3f %.2f\n", k, (b - a) / 1e9, cpu }' \
		"$BENCH_RUN/$key.time"
}

BASE=$BENCH_RUN/base
rm -rf "$BASE"
"$DD" init --block-size 4K --compress none "$BASE" >/dev/null
bench_log "building the store of rounds 1..$((ROUNDS - 1))"
for ((i = 1; i < ROUNDS; i++)); do
	"$DD" put "$BASE@img$i-new" "$(data_file "$i")" >/dev/null
done
LAST=$(data_file "$ROUNDS")
FIRST=$(data_file 1)
sync

: >"$BENCH_RUN/times"
for ((t = 1; t <= TRIALS; t++)); do
	E=$BENCH_RUN/empty
	rm -rf "$E"
	"$DD" init --block-size 4K --compress none "$E" >/dev/null
	bench_warm "$FIRST"
	prefault
	sync
	timed "first$t" "$DD" put "$E@img1-new" "$FIRST" | tee -a "$BENCH_RUN/times"
	rm -rf "$E"

	C=$BENCH_RUN/copy
	rm -rf "$C"
	mkdir "$C"
	for f in "$BASE"/*; do
		if [[ $(basename "$f") == packs ]]; then
			cp -al "$f" "$C/packs"
		else
			cp -a "$f" "$C/"
		fi
	done
	# a writer appends to the newest pack while it has room: that one
	# copied, or the put would write into the base's (a hard link)
	newest=$(find "$C/packs" -name '*.pack' | sort | tail -n 1)
	if [[ -n $newest ]]; then
		cp "$newest" "$newest.tmp"
		mv "$newest.tmp" "$newest"
	fi
	bench_warm "$LAST"
	cat "$C/db/data.mdb" >/dev/null
	prefault
	sync
	timed "last$t" "$DD" put "$C@img$ROUNDS-new" "$LAST" | tee -a "$BENCH_RUN/times"
	rm -rf "$C"
done
ENTRIES=$(( (ROUNDS - 1) * 262144 ))
best() { awk -v p="$1" '$1 ~ "^" p { if (b == "" || $2 < b) { b = $2; c = $3 } } END { print b, c }' "$BENCH_RUN/times"; }
read -r FW FC < <(best first)
read -r LW LC < <(best last)
RATIO=$(awk -v a="$FW" -v b="$LW" 'BEGIN { printf "%.2f", a / b }')
CRATIO=$(awk -v a="$FC" -v b="$LC" 'BEGIN { printf "%.2f", a / b }')
echo "round 1 into an empty store: best of $TRIALS $FW s (CPU $FC s)"
echo "round $ROUNDS into $ENTRIES entries: best of $TRIALS $LW s (CPU $LC s)"
echo "flat: round $ROUNDS / round 1 = $RATIO by wall time, $CRATIO by CPU (target >= 0.8)"
printf '{"bench":"flat","rounds":%d,"trials":%d,"entries_before_last":%d,"first_s":%s,"first_cpu_s":%s,"last_s":%s,"last_cpu_s":%s,"flat":%s,"flat_cpu":%s}\n' \
	"$ROUNDS" "$TRIALS" "$ENTRIES" "$FW" "$FC" "$LW" "$LC" "$RATIO" "$CRATIO" \
	>"$BENCH_DIR/results-flat.json"
rm -rf "$BASE"
