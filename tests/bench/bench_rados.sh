#!/usr/bin/env bash
# tests/bench/bench_rados.sh -- the size of a RADOS pack object: write and
# read 512 MiB as objects of 4, 8, 16, 32 and 64 MiB on the project's
# one-node test cluster (tests/ceph/cluster.sh), best of several rounds,
# MB/s per size.  See README.md "bench_rados.sh".
#
#   tests/bench/bench_rados.sh [--rounds N] [--total-mib N] [--sizes-mib LIST]
#
# Environment:
#   BENCH_DIR  work dir (default /var/tmp/dd-bench); the run is in run-rados/
#   CEPH_CONF  an existing cluster to use instead of starting one (its pool
#              "ddbench" is created and deleted)
#   DD_BUILD   a build directory holding libdedup.a built with RADOS
#              (default: build/ under the repository root)
#   CC         the C compiler (default cc)
set -euo pipefail
# shellcheck source=tests/bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ARGS=()
while (($#)); do
	case $1 in
	--rounds | --total-mib | --sizes-mib)
		(($# >= 2)) || bench_die "$1 needs a value"
		ARGS+=("$1" "$2"); shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) bench_die "unknown argument '$1' (try --help)" ;;
	esac
	shift
done

bench_init rados
bench_static_lib -DDD_RADOS=ON
nm "$DD_BUILD/libdedup.a" 2>/dev/null | grep ' T dd_rados_connect$' >/dev/null ||
	bench_die "$DD_BUILD/libdedup.a has no RADOS client: configure it with -DDD_RADOS=ON (librados-dev)"

BIN=$BENCH_RUN/bench_rados
${CC:-cc} -O2 -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror \
	-I"$BENCH_REPO/include" -I"$BENCH_REPO/libdedup" \
	"$BENCH_LIB_DIR/bench_rados.c" "$DD_BUILD/libdedup.a" \
	$(pkg-config --libs libzstd libcrypto) -llmdb -lrados -lpthread -lm \
	-o "$BIN"

trap bench_ceph_down EXIT
bench_ceph_up
POOL=ddbench
ceph osd pool create "$POOL" 8 >/dev/null 2>&1 ||
	bench_die "cannot create pool $POOL on $CEPH_CONF"
trap 'ceph osd pool delete $POOL $POOL --yes-i-really-really-mean-it >/dev/null 2>&1 || true; bench_ceph_down' EXIT

bench_log "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN" --pool "$POOL" "${ARGS[@]}" 2>>"$BENCH_RAW"
bench_log "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
bench_log "raw figures in $BENCH_RAW"
