#!/usr/bin/env bash
# tests/bench/bench_cache.sh -- the L1/L2 cache benchmark: random block reads
# from packs made slow by the test I/O layer (every pack pread waits
# --delay-us), over a working set larger than L1 and smaller than L2.
# Throughput with no cache, L1 only, cold L2, warm L2 and after a restart
# (target: within 10% of warm, without re-reading the working set from the
# packs), then the rebuild time and index RAM of a full L2.  See README.md.
#
#   tests/bench/bench_cache.sh [--quick] [--strict] [-- bench_cache options]
#
#   --quick    working set 64 MiB, L1 16 MiB, L2 256 MiB, full L2 256 MiB
#   --strict   exit 3 when a target is missed
#   options after -- go to the C program: --ws-mib N --l1-mib N --l2-mib N
#              --full-mib N --write-max-mib N --delay-us N --threads N --reads N
#
# Environment:
#   BENCH_DIR  work dir (default /var/tmp/dd-bench); the run is in run-cache/
#   DD_BUILD   a build directory holding libdedup.a (default: build/ under the
#              repository root; cmake -S . -B build -DCMAKE_BUILD_TYPE=Release)
#   CC         the C compiler (default cc)
set -euo pipefail
# shellcheck source=tests/bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

QUICK=0 STRICT=0 EXTRA=()
while (($#)); do
	case $1 in
	--quick) QUICK=1 ;;
	--strict) STRICT=1 ;;
	--) shift; EXTRA=("$@"); break ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) bench_die "unknown argument '$1' (try --help)" ;;
	esac
	shift
done

bench_init cache
bench_static_lib

# The program uses the test I/O layer (common/faults.h), so it links the
# static library, as the unit tests do.
BIN=$BENCH_RUN/bench_cache
${CC:-cc} -O2 -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror \
	-I"$BENCH_REPO/include" -I"$BENCH_REPO/libdedup" \
	"$BENCH_LIB_DIR/bench_cache.c" "$DD_BUILD/libdedup.a" \
	$(pkg-config --libs libzstd libcrypto) -llmdb -lpthread -lm -o "$BIN"

ARGS=(--dir "$BENCH_RUN")
((QUICK)) && ARGS+=(--ws-mib 64 --l1-mib 16 --l2-mib 256 --full-mib 256)
bench_log "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN" "${ARGS[@]}" "${EXTRA[@]}" | tee "$BENCH_RUN/out.txt"
bench_log "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
tail -n 1 "$BENCH_RUN/out.txt" >"$BENCH_DIR/results-cache.json"
python3 -m json.tool "$BENCH_DIR/results-cache.json" >/dev/null ||
	bench_die "the program's last line is not JSON"

# ---- targets ------------------------------------------------------------------
python3 - "$BENCH_DIR/results-cache.json" "$STRICT" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
w, rs, nc = r["warm-l2"], r["restart"], r["no-cache"]
rows = [
    ("restart within 10% of warm", rs["mbps"] >= 0.9 * w["mbps"],
     "%.1f vs %.1f MB/s (%.1f%%)" % (rs["mbps"], w["mbps"], 100 * rs["mbps"] / w["mbps"])),
    ("restart re-reads < 1% of its reads from packs",
     rs["pack_reads"] * 100 <= rs["reads"],
     "%d pack reads of %d" % (rs["pack_reads"], rs["reads"])),
    ("warm L2 beats no cache 5x", w["mbps"] >= 5 * nc["mbps"],
     "%.1f vs %.1f MB/s" % (w["mbps"], nc["mbps"])),
    ("no L2 checksum errors", r["cksum_errors"] == 0, str(r["cksum_errors"])),
    ("RAM per L2 block <= 48 bytes (full device)",
     r["full_entries"] == 0 or r["full_index_bytes_per_entry"] <= 48,
     "%.1f bytes as laid out, %.1f by RSS" % (r["full_index_bytes_per_entry"],
                                              r["full_rss_bytes_per_entry"])),
]
missed = 0
for name, ok, fig in rows:
    print("%-48s %-4s %s" % (name, "ok" if ok else "FAIL", fig))
    missed += not ok
sys.exit(3 if missed and sys.argv[2] == "1" else 0)
EOF
