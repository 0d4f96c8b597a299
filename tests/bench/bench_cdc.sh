#!/usr/bin/env bash
# tests/bench/bench_cdc.sh -- content-defined blocks (issue 17), each
# figure against its reference measured in the same run, on the same
# data, in page cache.  See README.md, "bench_cdc.sh".
#
#   img1  A: the 1 GiB tar of system libraries (bench_store.sh's A)
#   img2  B: img1 with 5% of its 128 KiB blocks overwritten
#   img3  C: img2 with 1 MiB + 1000 random bytes inserted at 10 MiB
#
# Targets:
#   store size   a fastcdc store (average 128K) holding img1+img2+img3
#                is smaller than restic's repository of the same three;
#   cutter       >= 1000 MB/s on one core (shown beside `openssl speed
#                -evp sha256` on one core; both divide by the CPU time
#                used, as openssl speed does without -elapsed);
#   put          put of new data (img1 into an empty store): fastcdc >=
#                0.8 x fixed 128K;
#   scan         `dedup scan --chunker fixed,fastcdc` <= 1.3 x
#                `--chunker fixed`, 128K, zstd:1 (the default), on
#                img1+img2+img3.
#
#   tests/bench/bench_cdc.sh [--quick] [--repeat N] [--no-restic] [--strict]
#
# Timed steps run REPEAT rounds (default 3), fixed and fastcdc alternating
# within each round; the best round counts.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

QUICK=0 REPEAT=3 STRICT=0 RESTIC=1
while (($#)); do
	case $1 in
	--quick) QUICK=1 ;;
	--repeat) REPEAT=$2; shift ;;
	--no-restic) RESTIC=0 ;;
	--strict) STRICT=1 ;;
	-h | --help) sed -n '2,25p' "$0"; exit 0 ;;
	*) bench_die "unknown option $1" ;;
	esac
	shift
done

bench_init cdc
bench_need_pkg /usr/bin/time time
bench_need_pkg openssl openssl
bench_need_pkg cc gcc
((RESTIC)) && bench_need_pkg restic restic
# DD_BIN=build-release/bin alone takes libdedup.a (for the cutter) from
# build-release/ too: the cutter of another build is not the one timed.
if [[ -n ${DD_BIN:-} && -z ${DD_BUILD:-} ]]; then
	DD_BUILD=$(dirname "$DD_BIN")
fi
DD_BUILD=${DD_BUILD:-$BENCH_REPO/build}
DD_BIN=${DD_BIN:-$DD_BUILD/bin}
DD=$DD_BIN/dedup
[[ -x $DD ]] || bench_die "$DD not built"
[[ -f $DD_BUILD/libdedup.a ]] || bench_die "no $DD_BUILD/libdedup.a: set DD_BUILD"
SIZE=$((QUICK ? 256 << 20 : 1 << 30))
A=$BENCH_DIR/A-$((SIZE >> 20))M
B=$BENCH_DIR/B-$((SIZE >> 20))M
C=$BENCH_DIR/C-$((SIZE >> 20))M
bench_make_image "$A" "$SIZE"
bench_make_changed_copy "$A" "$B" 0.05
if [[ ! -f $C.ok || $B.ok -nt $C.ok ]]; then
	bench_log "building $C: $B with 1 MiB + 1000 random bytes inserted at 10 MiB"
	python3 - "$B" "$C.tmp" "$BENCH_SEED" <<'EOF'
import random, sys
src, dst, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
at, n = 10 << 20, (1 << 20) + 1000
with open(src, 'rb') as f, open(dst, 'wb') as o:
    o.write(f.read(at))
    o.write(random.Random(seed + 3).randbytes(n))
    while True:
        b = f.read(1 << 24)
        if not b:
            break
        o.write(b)
EOF
	mv "$C.tmp" "$C"
	date -u +%FT%TZ >"$C.ok"
fi
bench_log "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- the cutter alone, beside openssl's SHA-256 on one core ------------------
cc -O2 -o "$BENCH_RUN/bench_cutter" "$BENCH_LIB_DIR/bench_cutter.c" \
	-I"$BENCH_REPO/libdedup" -I"$BENCH_REPO/include" "$DD_BUILD/libdedup.a" \
	-lcrypto -lzstd -llmdb -lpthread -lm
for ((i = 1; i <= REPEAT; i++)); do
	bench_record "sha256_1core_128k.r$i" "$(bench_openssl_sha256 131072 1)"
	out=$("$BENCH_RUN/bench_cutter" 131072 3 "$A")
	bench_record "cutter_128k_mbps.r$i" "$(awk '$1 == "fastcdc_mbps" { print $2 }' <<<"$out")"
	bench_record "cutter_128k_wall_mbps.r$i" "$(awk '$1 == "fastcdc_wall_mbps" { print $2 }' <<<"$out")"
	bench_record "cutter_128k_mean_block.r$i" "$(awk '$1 == "fastcdc_mean_block" { print $2 }' <<<"$out")"
	out=$("$BENCH_RUN/bench_cutter" 4096 3 "$A")
	bench_record "cutter_4k_mbps.r$i" "$(awk '$1 == "fastcdc_mbps" { print $2 }' <<<"$out")"
done

# ---- put of new data, scan: fixed and fastcdc in turn -------------------------
for ((i = 1; i <= REPEAT; i++)); do
	for ch in fixed fastcdc; do
		rm -rf "$BENCH_RUN/put-$ch"
		"$DD" init --chunker "$ch" --block-size 128K "$BENCH_RUN/put-$ch" 2>/dev/null
		bench_warm "$A"
		bench_time "put_$ch.r$i" "$DD" put "$BENCH_RUN/put-$ch@a" "$A"
		rm -rf "$BENCH_RUN/put-$ch"
	done
	for ch in fixed fixed,fastcdc; do
		bench_warm "$A" "$B" "$C"
		bench_time "scan_${ch/,/_}.r$i" "$DD" scan --json --chunker "$ch" \
			--block-size 128K "$A" "$B" "$C" >"$BENCH_RUN/scan_${ch/,/_}.json"
	done
done

# ---- what holds img1 + img2 + img3 --------------------------------------------
for ch in fixed fastcdc; do
	S=$BENCH_RUN/store-$ch
	"$DD" init --chunker "$ch" --block-size 128K "$S" 2>/dev/null
	for img in "$A" "$B" "$C"; do
		"$DD" put "$S@$(basename "$img")" "$img" 2>/dev/null
	done
	"$DD" stat --json "$S" >"$BENCH_RUN/stat-$ch.json"
	bench_record "store_${ch}_bytes" "$(bench_du "$S")"
	rm -rf "$S"
done
if ((RESTIC)); then
	R=$BENCH_RUN/restic
	export RESTIC_PASSWORD=bench RESTIC_CACHE_DIR=$BENCH_RUN/restic-cache
	restic init --repo "$R" >/dev/null
	for img in "$A" "$B" "$C"; do
		bench_time "restic_backup_$(basename "$img")" restic --repo "$R" \
			backup --quiet "$img"
	done
	bench_record restic_bytes "$(bench_du "$R")"
	bench_record restic_version "$(restic version | awk '{ print $2 }')"
	rm -rf "$R" "$RESTIC_CACHE_DIR"
fi
bench_log "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- report --------------------------------------------------------------------
python3 - "$BENCH_RAW" "$BENCH_DIR/results-cdc.json" "$SIZE" "$STRICT" "$RESTIC" <<'EOF'
import json, sys
raw_path, out_path, size, strict, restic = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
raw = {}
for line in open(raw_path):
    k, v = line.rstrip('\n').split('\t')
    raw[k] = v
def rounds(key):
    return [float(v) for k, v in raw.items() if k.startswith(key + '.r')]
def best_secs(key):
    return min(float(v) for k, v in raw.items()
               if k.startswith(key + '.r') and k.endswith('_seconds'))
fig, tgt = {}, []
fig['sha256_1core_128k_MBps'] = max(rounds('sha256_1core_128k')) / 1e6
fig['cutter_128k_MBps'] = max(rounds('cutter_128k_mbps'))
fig['cutter_128k_wall_MBps'] = max(rounds('cutter_128k_wall_mbps'))
fig['cutter_4k_MBps'] = max(rounds('cutter_4k_mbps'))
fig['cutter_128k_mean_block'] = max(rounds('cutter_128k_mean_block'))
for ch in ('fixed', 'fastcdc'):
    fig['put_%s_MBps' % ch] = size / best_secs('put_' + ch) / 1e6
for ch in ('fixed', 'fixed_fastcdc'):
    fig['scan_%s_seconds' % ch] = best_secs('scan_' + ch)
fig['store_fixed_MB'] = int(raw['store_fixed_bytes']) / 1e6
fig['store_fastcdc_MB'] = int(raw['store_fastcdc_bytes']) / 1e6
if restic:
    fig['restic_MB'] = int(raw['restic_bytes']) / 1e6
    fig['restic_version'] = raw['restic_version']
def target(name, value, limit, ok):
    tgt.append({'target': name, 'value': round(value, 3), 'limit': round(limit, 3),
                'result': 'ok' if ok else 'FAIL'})
put_ratio = fig['put_fastcdc_MBps'] / fig['put_fixed_MBps']
scan_ratio = fig['scan_fixed_fastcdc_seconds'] / fig['scan_fixed_seconds']
target('cutter 128K >= 1000 MB/s on one core', fig['cutter_128k_MBps'], 1000,
       fig['cutter_128k_MBps'] >= 1000)
target('put of new data: fastcdc / fixed >= 0.8', put_ratio, 0.8, put_ratio >= 0.8)
target('scan fixed,fastcdc / fixed (time) <= 1.3', scan_ratio, 1.3, scan_ratio <= 1.3)
if restic:
    target('fastcdc store / restic repo (img1+2+3) < 1', fig['store_fastcdc_MB'] / fig['restic_MB'],
           1.0, fig['store_fastcdc_MB'] < fig['restic_MB'])
print('\nfigures')
for k, v in fig.items():
    print('  %-34s %s' % (k, '%.1f' % v if isinstance(v, float) else v))
print('  %-34s %.2f x openssl sha256 on one core' % ('cutter_128k / sha256',
      fig['cutter_128k_MBps'] / fig['sha256_1core_128k_MBps']))
print('\ntargets')
for t in tgt:
    print('  %-4s %-48s %10.3f  (limit %.3f)' % (t['result'], t['target'], t['value'], t['limit']))
json.dump({'figures': fig, 'targets': tgt, 'raw': raw}, open(out_path, 'w'), indent=1)
print('\nresults in %s' % out_path)
sys.exit(3 if strict and any(t['result'] != 'ok' for t in tgt) else 0)
EOF
