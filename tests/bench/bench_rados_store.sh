#!/usr/bin/env bash
# tests/bench/bench_rados_store.sh -- a store in a RADOS pool against a
# local store, in one run on the same data (issue #15): `dedup put` of
# image A into a new store, then `dedup get` of it to /dev/null, best of
# several rounds each, on the one-node test cluster (tests/ceph/cluster.sh,
# memstore: the OSD keeps objects in RAM, so this measures libdedup and
# librados, not a disk); and the bytes each machine keeps locally (its
# catalog) per GiB stored.  Goals: RADOS/local >= 0.7 for put and get;
# local bytes <= 2% of the bytes stored.
#
#   tests/bench/bench_rados_store.sh [--rounds N] [--size-mib N]
#
# Environment:
#   BENCH_DIR  work dir (default /var/tmp/dd-bench); the image A-<N>M is
#              made there once (bench_make_image), this run is in
#              run-rados-store/
#   DD_BIN     the built commands (default build-rel/bin, then build/bin)
#   CEPH_CONF  an existing cluster instead of a fresh one (its pool
#              "ddbenchst" is created and deleted)
set -euo pipefail
# shellcheck source=tests/bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROUNDS=3
SIZE_MIB=512          # the test cluster's memstore holds 2 GiB
while (($#)); do
	case $1 in
	--rounds) ROUNDS=$2; shift ;;
	--size-mib) SIZE_MIB=$2; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) bench_die "unknown argument '$1' (try --help)" ;;
	esac
	shift
done

bench_init rados-store
if [[ -z ${DD_BIN:-} ]]; then
	for d in build-rel/bin build/bin; do
		[[ -x $BENCH_REPO/$d/dedup ]] && { DD_BIN=$BENCH_REPO/$d; break; }
	done
fi
DD=${DD_BIN:?no built dedup: set DD_BIN}/dedup
A=$BENCH_DIR/A-${SIZE_MIB}M
[[ -f $A ]] || bench_make_image "$A" $((SIZE_MIB << 20))
bench_warm "$A"

trap bench_ceph_down EXIT
bench_ceph_up
# a pool per round, deleted after it: memstore keeps every object in RAM
POOL=
drop_pool() {
	[[ -z $POOL ]] || ceph osd pool delete "$POOL" "$POOL" --yes-i-really-really-mean-it >/dev/null 2>&1 || true
	POOL=
}
trap 'drop_pool; bench_ceph_down' EXIT
export DEDUP_CACHE_DIR=$BENCH_RUN/catalogs

bench_log "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
best() { sort -g | head -n 1; }
for r in $(seq 1 "$ROUNDS"); do
	# alternate which goes first: a noisy neighbour hurts both alike
	for kind in local rados; do
		[[ $((r % 2)) == 0 ]] && kind=$([[ $kind == local ]] && echo rados || echo local)
		if [[ $kind == local ]]; then
			S=$BENCH_RUN/local-$r
		else
			POOL=ddbenchst$r
			ceph osd pool create "$POOL" 8 >/dev/null 2>&1 ||
				bench_die "cannot create pool $POOL on $CEPH_CONF"
			S=rados:$POOL/r$r
		fi
		"$DD" init "$S" >/dev/null
		sync
		bench_time "put_${kind}_$r" "$DD" put "$S@a" "$A" >/dev/null
		sync
		bench_time "get_${kind}_$r" "$DD" get "$S@a" - >/dev/null
		if [[ $kind == rados ]]; then
			bench_record "local_bytes_$r" "$(bench_du "$DEDUP_CACHE_DIR")"
			bench_record "local_alloc_$r" "$(bench_du_alloc "$DEDUP_CACHE_DIR")"
			rm -rf "$DEDUP_CACHE_DIR"
			drop_pool
		else
			rm -rf "$S"
		fi
	done
done
bench_log "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

fig() { awk -v k="$1" -F'\t' '$1 ~ "^"k"_[0-9]+_seconds$" { print $2 }' "$BENCH_RAW" | best; }
pl=$(fig put_local) pr=$(fig put_rados) gl=$(fig get_local) gr=$(fig get_rados)
kept=$(awk -F'\t' '$1 ~ /^local_bytes_/ { print $2 }' "$BENCH_RAW" | sort -g | tail -n 1)
alloc=$(awk -F'\t' '$1 ~ /^local_alloc_/ { print $2 }' "$BENCH_RAW" | sort -g | tail -n 1)
size=$(bench_size "$A")
awk -v pl="$pl" -v pr="$pr" -v gl="$gl" -v gr="$gr" -v kept="$kept" -v alloc="$alloc" -v size="$size" 'BEGIN {
	mb = size / 1e6
	printf "put  local %.0f MB/s  rados %.0f MB/s  rados/local %.2f (goal >= 0.7)\n", mb / pl, mb / pr, pl / pr
	printf "get  local %.0f MB/s  rados %.0f MB/s  rados/local %.2f (goal >= 0.7)\n", mb / gl, mb / gr, gl / gr
	printf "kept locally: %d bytes (%d allocated) for %d stored = %.3f%% (goal <= 2%%)\n", kept, alloc, size, 100 * kept / size
}'
bench_log "raw figures in $BENCH_RAW"
