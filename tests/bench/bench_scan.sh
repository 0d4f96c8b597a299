#!/usr/bin/env bash
# bench_scan.sh -- `dedup scan` against its references, on the store
# benchmark's data (A = 1 GiB tar of /usr/lib, B = A with 5% of its 128 KiB
# blocks changed), all in page cache.  See README.md, "bench_scan.sh".
#
# Targets (issue 4):
#   --compress none   >= 0.8 x two cores of `openssl speed -evp sha256` at the
#                        block size (128 KiB and 4 KiB);
#   zstd:1            >= 0.9 x `zstd -1 -T2` on the same data;
#   10 x A at 4 KiB   max RSS <= --memory (64M: fits; 16M: spills);
#   --sample          within its stated bound of the exact ratio on A+B.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

QUICK=0 REPEAT=3 STRICT=0
while (($#)); do
	case $1 in
	--quick) QUICK=1 ;;
	--repeat) REPEAT=$2; shift ;;
	--strict) STRICT=1 ;;
	-h | --help) sed -n '2,12p' "$0"; exit 0 ;;
	*) bench_die "unknown option $1" ;;
	esac
	shift
done

bench_init scan
bench_need_pkg /usr/bin/time time
bench_need_pkg zstd zstd
bench_need_pkg openssl openssl
DD_BIN=${DD_BIN:-$BENCH_REPO/build/bin}
DD=$DD_BIN/dedup
[[ -x $DD ]] || bench_die "$DD not built"
SIZE=$((QUICK ? 256 << 20 : 1 << 30))
A=$BENCH_DIR/A-$((SIZE >> 20))M
B=$BENCH_DIR/B-$((SIZE >> 20))M
bench_make_image "$A" "$SIZE"
bench_make_changed_copy "$A" "$B" 0.05
bench_log "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

# best KEY CMD...: REPEAT timed rounds, the best wall clock recorded as
# KEY_best_seconds and the highest max RSS as KEY_maxrss_kib.
best() {
	local key=$1 i
	shift
	for ((i = 1; i <= REPEAT; i++)); do
		bench_warm "$A" "$B"
		bench_time "$key.r$i" "$@" >"$BENCH_RUN/$key.out"
	done
	python3 - "$BENCH_RAW" "$key" <<'EOF' >>"$BENCH_RAW"
import sys
rows = [l.rstrip('\n').split('\t') for l in open(sys.argv[1])]
k = sys.argv[2]
secs = [float(v) for n, v in rows if n.startswith(k + '.r') and n.endswith('_seconds')]
rss = [int(v) for n, v in rows if n.startswith(k + '.r') and n.endswith('_maxrss_kib')]
print('%s_best_seconds\t%.3f' % (k, min(secs)))
print('%s_maxrss_kib\t%d' % (k, max(rss)))
EOF
}

# ---- references --------------------------------------------------------------
bench_record sha256_2core_128k "$(bench_openssl_sha256 131072 2)"
bench_record sha256_2core_4k "$(bench_openssl_sha256 4096 2)"
best zstd_t2 zstd -1 -T2 -c "$A"

# ---- dedup scan ----------------------------------------------------------------
best scan_none_128k "$DD" scan --json --compress none --block-size 128K "$A"
best scan_none_4k "$DD" scan --json --compress none --block-size 4K "$A"
best scan_zstd_128k "$DD" scan --json --block-size 128K "$A"
best scan_zstd_3sizes "$DD" scan --json --block-size 4K,16K,128K "$A"
# "10 GiB at 4 KiB": A's bytes read 10 times, as 10 images (the path given
# 10 times: each is cut from its own start, as 10 snapshots would be).
TEN=()
for _ in 1 2 3 4 5 6 7 8 9 10; do TEN+=("$A"); done
REPEAT_SAVE=$REPEAT REPEAT=1
best big_4k_64m "$DD" scan --json --compress none --block-size 4K --memory 64M "${TEN[@]}"
best big_4k_16m "$DD" scan --json --compress none --block-size 4K --memory 16M --tmpdir "$BENCH_RUN" "${TEN[@]}"
REPEAT=$REPEAT_SAVE
# exact vs sample on A + B (a 5%-changed copy: dedup ~ 1.9)
best exact_ab "$DD" scan --json --block-size 4K,128K "$A" "$B"
best sample_ab "$DD" scan --json --sample-rate 64 --block-size 4K,128K "$A" "$B"
best sample_ab_16m "$DD" scan --json --sample --memory 16M --compress none --block-size 4K "$A" "$B"

# ---- report --------------------------------------------------------------------
python3 - "$BENCH_RUN" "$SIZE" "$STRICT" "$BENCH_DIR/results-scan.json" <<'EOF'
import json, os, sys
run, size, strict, outp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
raw = {}
for line in open(os.path.join(run, 'raw.tsv')):
    k, v = line.rstrip('\n').split('\t')
    raw[k] = float(v)
def out(key):
    return json.load(open(os.path.join(run, key + '.out')))
def mbs(key, n=size):
    return n / raw[key + '_best_seconds'] / 1e6
fig, tgt = {}, []
fig['sha256_2core_128k_MBps'] = raw['sha256_2core_128k'] / 1e6
fig['sha256_2core_4k_MBps'] = raw['sha256_2core_4k'] / 1e6
fig['zstd_T2_MBps'] = mbs('zstd_t2')
for k in ('scan_none_128k', 'scan_none_4k', 'scan_zstd_128k', 'scan_zstd_3sizes'):
    fig[k + '_MBps'] = mbs(k)
fig['big_4k_64m_MBps'] = mbs('big_4k_64m', 10 * size)
fig['big_4k_16m_MBps'] = mbs('big_4k_16m', 10 * size)
def target(name, value, limit, ok):
    tgt.append({'target': name, 'value': round(value, 3), 'limit': round(limit, 3),
                'result': 'PASS' if ok else 'FAIL'})
target('scan --compress none 128K >= 0.8 x sha256 2 cores (MB/s)', fig['scan_none_128k_MBps'],
       0.8 * fig['sha256_2core_128k_MBps'], fig['scan_none_128k_MBps'] >= 0.8 * fig['sha256_2core_128k_MBps'])
target('scan --compress none 4K >= 0.8 x sha256 2 cores (MB/s)', fig['scan_none_4k_MBps'],
       0.8 * fig['sha256_2core_4k_MBps'], fig['scan_none_4k_MBps'] >= 0.8 * fig['sha256_2core_4k_MBps'])
target('scan zstd:1 128K >= 0.9 x zstd -1 -T2 (MB/s)', fig['scan_zstd_128k_MBps'],
       0.9 * fig['zstd_T2_MBps'], fig['scan_zstd_128k_MBps'] >= 0.9 * fig['zstd_T2_MBps'])
for key, cap in (('big_4k_64m', 64), ('big_4k_16m', 16)):
    rss = raw[key + '_maxrss_kib'] / 1024
    r = out(key)['results'][0]
    fig[key + '_maxrss_MiB'] = rss
    fig[key + '_spill_runs'] = r['spill_runs']
    fig[key + '_dedup_ratio'] = r['dedup_ratio']
    target('10 x A at 4K, --memory %dM: max RSS (MiB) <= cap' % cap, rss, cap, rss <= cap)
exact = {r['block_size']: r for r in out('exact_ab')['results']}
for key in ('sample_ab', 'sample_ab_16m'):
    for r in out(key)['results']:
        e = exact[r['block_size']]
        err = abs(r['dedup_ratio'] - e['dedup_ratio']) / e['dedup_ratio']
        cerr = abs(r['compress_ratio'] - e['compress_ratio']) / e['compress_ratio'] \
            if r['compress_ratio'] != 1 else 0.0
        tag = '%s %dK' % (key, r['block_size'] >> 10)
        fig[tag + ' exact/sample/bound'] = [e['dedup_ratio'], r['dedup_ratio'], r['dedup_error'],
                                            r['sample_rate']]
        target('%s: |dedup - exact| / exact <= bound' % tag, err, r['dedup_error'] or 0,
               r['dedup_error'] is not None and err <= r['dedup_error'])
        if key == 'sample_ab':
            target('%s: |compress - exact| / exact <= bound' % tag, cerr, r['compress_error'] or 0,
                   r['compress_error'] is not None and cerr <= r['compress_error'])
print('\nfigures')
for k, v in fig.items():
    print('  %-44s %s' % (k, json.dumps(v if not isinstance(v, float) else round(v, 3))))
print('\ntargets')
for t in tgt:
    print('  %-4s %-62s %10.3f  (limit %.3f)' % (t['result'], t['target'], t['value'], t['limit']))
json.dump({'figures': fig, 'targets': tgt, 'raw': raw,
           'loadavg_end': open('/proc/loadavg').read().split()[:3]},
          open(outp, 'w'), indent=1)
print('\nwritten to', outp)
sys.exit(3 if strict and any(t['result'] == 'FAIL' for t in tgt) else 0)
EOF
bench_log "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
