#!/usr/bin/env bash
# bench_writers.sh -- many writers in one store: 4 `dedup put` and 1
# `ddrecv` started together, against the same five run one after another,
# in the same run, each into a fresh store (issue 14).
#
#   tests/bench/bench_writers.sh [--quick] [--repeat N] [--block-size B]
#
#  --quick         48 MiB per writer instead of 192 MiB
#  --repeat N      rounds of each (default 3); the best counts
#  --block-size B  the stores' block size (default 128K)
#
# The five inputs are distinct slices of the benchmark image (a tar of
# /usr: compressible, with some dedup inside), the stream one sent ahead of
# time to a file.  Target: concurrent wall time <= 1.25 x sequential on 2
# cores.  Also reported: the pack bytes each way (blocks two writers stored
# at once are garbage until gc) and what gc then reclaims.  Results:
# $BENCH_DIR/results-writers.json.  Environment: DD_BIN (default
# build/bin; build with -DCMAKE_BUILD_TYPE=Release), BENCH_DIR.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

QUICK=0
REPEAT=3
BS=128K
while (($#)); do
	case $1 in
	--quick) QUICK=1 ;;
	--repeat) REPEAT=$2; shift ;;
	--block-size) BS=$2; shift ;;
	*) bench_die "unknown option $1" ;;
	esac
	shift
done

DD_BIN=${DD_BIN:-$BENCH_REPO/build/bin}
DD=$DD_BIN/dedup
[[ -x $DD ]] || bench_die "no $DD: build first (cmake --build build)"
bench_init writers
if ((QUICK)); then SLICE=$((48 << 20)); else SLICE=$((192 << 20)); fi
SIZE=$((1 << 30))
bench_make_image "$BENCH_DIR/A-$((SIZE >> 20))M" "$SIZE"
A=$BENCH_DIR/A-$((SIZE >> 20))M
for i in 1 2 3 4 5; do
	dd if="$A" of="$BENCH_RUN/in$i" bs=1M skip=$(((i - 1) * SLICE >> 20)) \
	   count=$((SLICE >> 20)) status=none
done
"$DD" init --block-size "$BS" "$BENCH_RUN/src" >&2
"$DD" put "$BENCH_RUN/src@r" "$BENCH_RUN/in5" >&2
"$DD_BIN/ddsend" "$BENCH_RUN/src@r" >"$BENCH_RUN/r.dds"
rm -rf "$BENCH_RUN/src"
bench_warm "$BENCH_RUN"/in? "$BENCH_RUN/r.dds"
bench_log "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
bench_record slice_bytes "$SLICE"
bench_record block_size "$BS"

best() { sort -g "$1" | head -n1; }
now() { date +%s%N; }
pack_bytes() {
	"$DD" stat --json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pack_bytes"])'
}

# one_round MODE: the five writers into a fresh store, one after another
# (seq) or all at once (conc); appends the wall time to MODE.t and the
# store's pack bytes to MODE.packs
one_round() {
	local mode=$1 S=$BENCH_RUN/s t0 t1 pids=() p
	rm -rf "$S"
	"$DD" init --block-size "$BS" "$S" >&2
	sync
	t0=$(now)
	if [[ $mode == seq ]]; then
		for i in 1 2 3 4; do
			"$DD" put "$S@p$i" "$BENCH_RUN/in$i"
		done
		"$DD_BIN/ddrecv" "$S" <"$BENCH_RUN/r.dds"
	else
		for i in 1 2 3 4; do
			"$DD" put "$S@p$i" "$BENCH_RUN/in$i" &
			pids+=("$!")
		done
		"$DD_BIN/ddrecv" "$S" <"$BENCH_RUN/r.dds" &
		pids+=("$!")
		for p in "${pids[@]}"; do
			wait "$p" || bench_die "a concurrent writer failed"
		done
	fi
	t1=$(now)
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", (b - a) / 1e9 }' >>"$BENCH_RUN/$mode.t"
	pack_bytes "$S" >>"$BENCH_RUN/$mode.packs"
}

: >"$BENCH_RUN/seq.t"
: >"$BENCH_RUN/conc.t"
for ((r = 0; r < REPEAT; r++)); do
	# alternate, so that drift in the machine's load hits both alike
	one_round seq
	one_round conc
done
S=$BENCH_RUN/s
for i in 1 2 3 4; do
	"$DD" get "$S@p$i" - | cmp -s - "$BENCH_RUN/in$i" || bench_die "p$i is not its input"
done
"$DD" get "$S@r" - | cmp -s - "$BENCH_RUN/in5" || bench_die "r is not its input"
"$DD" scrub "$S" >&2 || bench_die "scrub after the concurrent round"
before=$(pack_bytes "$S")
gc_out=$("$DD" gc "$S")
after=$(pack_bytes "$S")
seq=$(best "$BENCH_RUN/seq.t")
conc=$(best "$BENCH_RUN/conc.t")
bench_record seq_seconds "$seq"
bench_record conc_seconds "$conc"
bench_record conc_vs_seq "$(awk -v a="$conc" -v b="$seq" 'BEGIN { printf "%.3f", a / b }')"
bench_record seq_pack_bytes "$(head -n1 "$BENCH_RUN/seq.packs")"
bench_record conc_pack_bytes "$before"
bench_record conc_pack_bytes_after_gc "$after"
bench_record input_mbps_conc "$(awk -v s="$SLICE" -v t="$conc" 'BEGIN { printf "%.0f", 5 * s / t / 1e6 }')"
bench_log "gc: $gc_out"
bench_log "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$BENCH_RAW" "$BENCH_DIR/results-writers.json" <<'EOF'
import json, sys
raw = dict(l.rstrip('\n').split('\t') for l in open(sys.argv[1]) if '\t' in l)
json.dump(raw, open(sys.argv[2], 'w'), indent=1)
r = float(raw['conc_vs_seq'])
print('5 writers of %d MiB each (%s blocks): sequential %s s, concurrent %s s: '
      '%.2f x: %s (target <= 1.25)'
      % (int(raw['slice_bytes']) >> 20, raw['block_size'], raw['seq_seconds'],
         raw['conc_seconds'], r, 'ok' if r <= 1.25 else 'FAIL'))
print('packs: sequential %s bytes, concurrent %s, after gc %s'
      % (raw['seq_pack_bytes'], raw['conc_pack_bytes'],
         raw['conc_pack_bytes_after_gc']))
EOF
