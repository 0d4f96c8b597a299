#!/usr/bin/env bash
# tests/bench/bench_stream.sh -- the replication-stream benchmark (issue 3):
# ddsend | ddrecv against zstd on the same 1 GiB image and its 5%-changed
# copy as bench_store.sh, measured in one run.  Run by hand (not in CI).
#
#   tests/bench/bench_stream.sh [--quick] [--repeat N] [--no-rss] [--no-store]
#
#   --quick     256 MiB image instead of 1 GiB (RSS image 1 GiB, not 4)
#   --repeat N  rounds of the timed steps, each figure the best round
#               (default 5: on a shared machine one round can land on
#               another job's writeback)
#   --no-rss    skip the memory step (it builds a 4 GiB image)
#   --no-store  raw-file steps only (ddsend -f / ddrecv -o), no dd_send/dd_recv
#
# Environment: BENCH_DIR (default /var/tmp/dd-bench), DD_BIN (default
# build/bin under the repository root).
#
# Targets (ratios to references measured in the same run):
#   full    `ddsend S@a | ddrecv S2` (empty S2)  >= 0.7 x `zstd -1 -T2 -c A | zstd -d`
#   incr    size of `ddsend -i a S@b`            <= 1.1 x zstd -1 of B's changed blocks
#   raw     `ddrecv -o OUT < A.dds`              >= 0.8 x `zstd -d -c A.zst > OUT`
#   rss     sender and receiver, 4 GiB at 4 KiB  <  64 MiB (+ the spilled table, on disk)
# A missed target prints FAIL; the run still exits 0.  Results: a table on
# stdout, raw figures in $BENCH_DIR/run-stream/raw.tsv.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

QUICK=0 DO_RSS=1 DO_STORE=1 REPEAT=5
while (($#)); do
	arg=$1
	shift
	case $arg in
	--quick) QUICK=1 ;;
	--repeat) REPEAT=${1:-}; shift || true ;;
	--repeat=*) REPEAT=${arg#*=} ;;
	--no-rss) DO_RSS=0 ;;
	--no-store) DO_STORE=0 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) bench_die "unknown argument '$arg' (try --help)" ;;
	esac
done
[[ $REPEAT =~ ^[1-9][0-9]*$ ]] || bench_die "--repeat needs a positive number"
if ((QUICK)); then SIZE=$((256 << 20)); else SIZE=$((1024 << 20)); fi
MIB=$((SIZE >> 20))

bench_need_pkg /usr/bin/time time
bench_need_pkg zstd zstd
command -v python3 >/dev/null || bench_die "python3 is needed"
DD_BIN=${DD_BIN:-$BENCH_REPO/build/bin}
for c in dedup ddsend ddrecv; do
	[[ -x $DD_BIN/$c ]] || bench_die "no $c in $DD_BIN: build first or set DD_BIN"
done
DD_BIN=$(cd "$DD_BIN" && pwd)
DD=$DD_BIN/dedup SEND=$DD_BIN/ddsend RECV=$DD_BIN/ddrecv

bench_init stream
R=$BENCH_RUN
A=$BENCH_DIR/A-${MIB}M
B=$BENCH_DIR/B-${MIB}M
bench_make_image "$A" "$SIZE"
bench_make_changed_copy "$A" "$B" 0.05
bench_make_zst "$A"

# bench_pipe KEY 'SHELL PIPELINE': wall-clock seconds of a pipeline.
bench_pipe() {
	local key=$1 cmd=$2 t0 t1
	bench_log "timing $key: $cmd"
	t0=$(date +%s%N)
	bash -o pipefail -c "$cmd" 2>"$R/$key.err" || bench_die "$key failed: $(tail -n 3 "$R/$key.err")"
	t1=$(date +%s%N)
	bench_record "${key}_seconds" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')"
}
# a figure from raw.tsv: the best (least) of a key's rounds for times,
# else the last value
fig() {
	awk -F'\t' -v k="$1" '$1 == k { if (k !~ /_seconds$/ || v == "" || $2 + 0 < v + 0) v = $2 }
		END { print v }' "$BENCH_RAW"
}
mbs() { awk -v s="$SIZE" -v t="$1" 'BEGIN { printf "%.0f", s / t / 1e6 }'; }
verdict() { awk -v v="$1" -v t="$2" -v op="$3" 'BEGIN { ok = op == ">=" ? v >= t : v <= t; print ok ? "ok" : "FAIL" }'; }

if ((DO_STORE)); then
	"$DD" init --block-size $BENCH_BLOCK --compress zstd:1 "$R/S" 2>/dev/null
	"$DD" put "$R/S@a" "$A" 2>/dev/null
	"$DD" put "$R/S@b" "$B" 2>/dev/null
fi

# ---- timed steps, REPEAT rounds: references, raw files, full stream ----------
for ((round = 1; round <= REPEAT; round++)); do
	bench_log "---- round $round of $REPEAT"
	bench_warm "$A" "$B" "$A.zst"
	bench_pipe zstd_pipe "zstd -q -1 -T2 -c '$A' | zstd -q -d -c > /dev/null"
	rm -f "$R/zout"
	sync
	bench_time zstd_d zstd -q -d -c "$A.zst" -o "$R/zout"
	rm -f "$R/zout"

	bench_time send_f "$SEND" -f "$A" >"$R/A.dds"
	sync
	bench_time recv_o "$RECV" -o "$R/rout" <"$R/A.dds"
	cmp -s "$A" "$R/rout" || bench_die "ddrecv -o: bytes differ from $A"
	rm -f "$R/rout"

	if ((DO_STORE)); then
		rm -rf "$R/S2"
		"$DD" init --block-size $BENCH_BLOCK --compress zstd:1 "$R/S2" 2>/dev/null
		bench_warm "$R"/S/packs/*.pack
		sync
		bench_pipe full "'$SEND' '$R/S@a' | '$RECV' '$R/S2'"
		"$DD" get "$R/S2@a" - | cmp -s - "$A" || bench_die "S2@a differs from $A"
	fi
done
bench_record raw_stream_bytes "$(bench_size "$R/A.dds")"

# ---- the incremental stream's size -----------------------------------------------
if ((DO_STORE)); then
	"$SEND" -i a "$R/S@b" >"$R/incr.dds" 2>"$R/incr.err" || bench_die "ddsend -i failed"
	bench_record incr_stream_bytes "$(bench_size "$R/incr.dds")"
	# The reference: each changed 128 KiB block of B compressed alone at zstd -1.
	bench_record changed_blocks_zstd_bytes "$(python3 - "$B" "$B.blocks" "$BENCH_BLOCK" <<'EOF'
import subprocess, sys
path, listf, bs = sys.argv[1], sys.argv[2], int(sys.argv[3])
total = 0
with open(path, 'rb') as f:
    for line in open(listf):
        if line.strip():
            f.seek(int(line) * bs)
            total += len(subprocess.run(['zstd', '-q', '-1', '-c'], input=f.read(bs),
                                        stdout=subprocess.PIPE, check=True).stdout)
print(total)
EOF
)"
fi

# ---- memory: 4 GiB at 4 KiB blocks ------------------------------------------------
if ((DO_RSS)); then
	BIG=$BENCH_DIR/BIG-$((MIB * 4))M
	if [[ ! -f $BIG.ok || $(bench_size "$BIG" 2>/dev/null || echo 0) != $((SIZE * 4)) ]]; then
		bench_log "building $BIG: A four times, 1% of each copy's 4 KiB blocks changed"
		python3 - "$A" "$BIG.tmp" <<'EOF'
import random, sys
src, dst = sys.argv[1], sys.argv[2]
data = open(src, 'rb').read()
rng = random.Random(4)
with open(dst, 'wb') as f:
    for copy in range(4):
        buf = bytearray(data)
        if copy:
            for i in rng.sample(range(len(buf) // 4096), len(buf) // 4096 // 100):
                buf[i * 4096:(i + 1) * 4096] = rng.randbytes(4096)
        f.write(buf)
EOF
		mv "$BIG.tmp" "$BIG"
		date -u +%FT%TZ >"$BIG.ok"
	fi
	bench_time rss_send_f "$SEND" -b 4K -f "$BIG" >"$R/big.dds"
	bench_time rss_recv_o "$RECV" -o "$R/bigout" <"$R/big.dds"
	cmp -s "$BIG" "$R/bigout" || bench_die "ddrecv -o of $BIG: bytes differ"
	rm -f "$R/bigout"
	if ((DO_STORE)); then
		"$DD" init --block-size 4096 --compress zstd:1 "$R/S4" 2>/dev/null
		"$DD" put "$R/S4@big" "$BIG" 2>/dev/null
		"$DD" init --block-size 4096 --compress zstd:1 "$R/S5" 2>/dev/null
		bench_time rss_send "$SEND" "$R/S4@big" >"$R/big-store.dds"
		bench_time rss_recv "$RECV" "$R/S5" <"$R/big-store.dds"
	fi
	rm -f "$R/big.dds" "$R/big-store.dds"
fi

# ---- report --------------------------------------------------------------------
printf '\n%-44s %12s %12s %8s %s\n' "figure" "value" "reference" "ratio" "target"
row() { # NAME VALUE REF RATIO TARGET VERDICT
	printf '%-44s %12s %12s %8s %s %s\n' "$@"
}
zp=$(fig zstd_pipe_seconds) zd=$(fig zstd_d_seconds) ro=$(fig recv_o_seconds)
row "ddsend -f A (MB/s)" "$(mbs "$(fig send_f_seconds)")" "-" "-" "-" ""
r=$(awk -v a="$zd" -v b="$ro" 'BEGIN { printf "%.2f", a / b }')
row "ddrecv -o (MB/s) vs zstd -d" "$(mbs "$ro")" "$(mbs "$zd")" "$r" ">= 0.8" "$(verdict "$r" 0.8 '>=')"
if ((DO_STORE)); then
	fu=$(fig full_seconds)
	r=$(awk -v a="$zp" -v b="$fu" 'BEGIN { printf "%.2f", a / b }')
	row "ddsend S@a | ddrecv S2 (MB/s) vs zstd|zstd" "$(mbs "$fu")" "$(mbs "$zp")" "$r" ">= 0.7" "$(verdict "$r" 0.7 '>=')"
	ib=$(fig incr_stream_bytes) cb=$(fig changed_blocks_zstd_bytes)
	r=$(awk -v a="$ib" -v b="$cb" 'BEGIN { printf "%.3f", a / b }')
	row "incremental stream (bytes) vs changed zstd" "$ib" "$cb" "$r" "<= 1.1" "$(verdict "$r" 1.1 '<=')"
fi
if ((DO_RSS)); then
	for k in rss_send_f rss_recv_o rss_send rss_recv; do
		v=$(fig "${k}_maxrss_kib")
		[[ -n $v ]] || continue
		m=$(awk -v v="$v" 'BEGIN { printf "%.1f", v / 1024 }')
		row "$k max RSS (MiB), 4 KiB blocks" "$m" "-" "-" "< 64" "$(verdict "$m" 64 '<=')"
	done
fi
echo "raw figures: $BENCH_RAW"
