#!/usr/bin/env bash
# bench_lifecycle.sh -- the snapshot lifecycle commands: what `dedup ls`
# pays for the space of every snapshot (unique_bytes), `dedup diff` of two
# 1 GiB snapshots at 128 KiB, and sequential reads through `dedup mount`
# against `dedup get` in the same run.
#
#   tests/bench/bench_lifecycle.sh [--quick] [--repeat N] [--no-mount]
#
#  --quick     256 MiB images instead of 1 GiB (the ls store: 8 snapshots
#              of 64 MiB instead of 1 GiB, at 4 KiB blocks)
#  --repeat N  rounds of each timed step (default 5); the best counts
#  --no-mount  skip the mount step (no FUSE here)
#
# Targets (issue 19): diff of 1 GiB snapshots at 128 KiB in at most 1 s;
# reads through the mount at least 0.7 x dedup get.  ls has no target: its
# cost per block reference is what it reports.  Results:
# $BENCH_DIR/results-lifecycle.json.  Environment: DD_BIN (default
# build/bin; build with -DCMAKE_BUILD_TYPE=Release), BENCH_DIR.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

QUICK=0
REPEAT=5
MOUNT=1
while (($#)); do
	case $1 in
	--quick) QUICK=1 ;;
	--repeat) REPEAT=$2; shift ;;
	--no-mount) MOUNT=0 ;;
	*) bench_die "unknown option $1" ;;
	esac
	shift
done

DD_BIN=${DD_BIN:-$BENCH_REPO/build/bin}
DD=$DD_BIN/dedup
[[ -x $DD ]] || bench_die "no $DD: build first (cmake --build build)"
bench_need_pkg /usr/bin/time time
bench_init lifecycle
if ((QUICK)); then SIZE=$((256 << 20)); LSIZE=$((64 << 20)); else
	SIZE=$((1 << 30)); LSIZE=$((1 << 30)); fi

bench_make_image "$BENCH_DIR/A-$((SIZE >> 20))M" "$SIZE"
A=$BENCH_DIR/A-$((SIZE >> 20))M
B=$BENCH_RUN/B.img
bench_make_changed_copy "$A" "$B" 0.05
bench_log "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

# best TIMEFILE: the smallest number in the file
best() { sort -g "$1" | head -n1; }
# timed OUT CMD...: appends CMD's wall time in seconds to OUT
timed() {
	local out=$1 t0 t1
	shift
	t0=$(date +%s%N)
	"$@"
	t1=$(date +%s%N)
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", (b - a) / 1e9 }' >>"$out"
}

# ---- dedup diff, 128 KiB blocks -------------------------------------------------
S=$BENCH_RUN/s
"$DD" init "$S" >&2
"$DD" put "$S@a" "$A" >&2
"$DD" put "$S@b" "$B" >&2
bench_warm "$S"/packs/* "$S"/db/data.mdb
: >"$BENCH_RUN/diff.t"
for ((i = 0; i < REPEAT; i++)); do
	timed "$BENCH_RUN/diff.t" "$DD" diff "$S@a" b >"$BENCH_RUN/diff.out"
done
ranges=$(wc -l <"$BENCH_RUN/diff.out")
changed=$(wc -l <"$B.blocks")
bench_record diff_seconds "$(best "$BENCH_RUN/diff.t")"
bench_record diff_ranges "$ranges"
bench_record diff_changed_blocks "$changed"

# ---- reads: dedup get against the mount -------------------------------------------
if ((MOUNT)); then
	M=$BENCH_RUN/mnt
	mkdir -p "$M"
	: >"$BENCH_RUN/get.t"
	: >"$BENCH_RUN/mount.t"
	for ((i = 0; i < REPEAT; i++)); do
		timed "$BENCH_RUN/get.t" "$DD" get "$S@a" - >/dev/null
		# a fresh mount each round: no page cache of the file
		"$DD" mount "$S" "$M" || bench_die "dedup mount failed (use --no-mount)"
		timed "$BENCH_RUN/mount.t" cat "$M/a" >/dev/null
		"$DD" umount "$M"
	done
	g=$(best "$BENCH_RUN/get.t")
	m=$(best "$BENCH_RUN/mount.t")
	bench_record get_mbps "$(awk -v s="$SIZE" -v t="$g" 'BEGIN { printf "%.0f", s / t / 1e6 }')"
	bench_record mount_read_mbps "$(awk -v s="$SIZE" -v t="$m" 'BEGIN { printf "%.0f", s / t / 1e6 }')"
	bench_record mount_vs_get "$(awk -v g="$g" -v m="$m" 'BEGIN { printf "%.3f", g / m }')"
fi

# ---- dedup ls: unique_bytes of every snapshot, 4 KiB blocks -----------------------
L=$BENCH_RUN/l
"$DD" init --block-size 4K "$L" >&2
bench_make_prefix "$A" "$BENCH_RUN/L.img" "$LSIZE"
bench_make_changed_copy "$BENCH_RUN/L.img" "$BENCH_RUN/L2.img" 0.05
for i in 1 2 3 4 5 6 7; do
	"$DD" put "$L@s$i" "$BENCH_RUN/L.img" >&2
done
"$DD" put "$L@s8" "$BENCH_RUN/L2.img" >&2
refs=$(python3 -c "
import json, subprocess, sys
j = json.loads(subprocess.check_output([sys.argv[1], 'stat', '--json', sys.argv[2]]))
print(j['referenced_blocks'], j['unique_blocks'])" "$DD" "$L")
bench_record ls_store_block_refs "${refs% *}"
bench_record ls_store_ddt_entries "${refs#* }"
bench_warm "$L"/db/data.mdb
: >"$BENCH_RUN/ls.t"
: >"$BENCH_RUN/stat.t"
for ((i = 0; i < REPEAT; i++)); do
	timed "$BENCH_RUN/ls.t" "$DD" ls --json "$L" >"$BENCH_RUN/ls.json"
	timed "$BENCH_RUN/stat.t" "$DD" stat --json "$L" >/dev/null
done
l=$(best "$BENCH_RUN/ls.t")
bench_record ls_seconds "$l"
bench_record stat_seconds "$(best "$BENCH_RUN/stat.t")"
bench_record ls_us_per_block_ref "$(awk -v t="$l" -v n="${refs% *}" 'BEGIN { printf "%.3f", t * 1e6 / n }')"
bench_record ls_unique_bytes_s8 "$(python3 -c "
import json, sys
print([x for x in json.load(open(sys.argv[1])) if x['name'] == 's8'][0]['unique_bytes'])" "$BENCH_RUN/ls.json")"
bench_log "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$BENCH_RAW" "$BENCH_DIR/results-lifecycle.json" <<'EOF'
import json, sys
raw = dict(l.rstrip('\n').split('\t') for l in open(sys.argv[1]) if '\t' in l)
json.dump(raw, open(sys.argv[2], 'w'), indent=1)
ok = float(raw['diff_seconds']) <= 1.0
print('diff: %s s for %s ranges (%s blocks changed): %s (target <= 1 s)'
      % (raw['diff_seconds'], raw['diff_ranges'], raw['diff_changed_blocks'],
         'ok' if ok else 'FAIL'))
if 'mount_vs_get' in raw:
    r = float(raw['mount_vs_get'])
    print('mount: %s MB/s, get %s MB/s: %.2f x get: %s (target >= 0.7)'
          % (raw['mount_read_mbps'], raw['get_mbps'], r,
             'ok' if r >= 0.7 else 'FAIL'))
print('ls: %s s for %s block references (%s DDT entries): %s us each; '
      'stat %s s' % (raw['ls_seconds'], raw['ls_store_block_refs'],
                      raw['ls_store_ddt_entries'],
                      raw['ls_us_per_block_ref'], raw['stat_seconds']))
EOF
