#!/usr/bin/env bash
# tests/bench/bench_codec.sh -- zstd parameter variants on the store's unit
# of compression (independent 128 KiB blocks of image A): why level 1 in
# libdedup uses a minimum match of 5 (pack/codec.c).  See README.md.
#
#   tests/bench/bench_codec.sh [--quick] [--rounds N]
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

quick=0 rounds=3
while (($#)); do
	case $1 in
	--quick) quick=1 ;;
	--rounds) rounds=$2; shift ;;
	*) bench_die "unknown option $1" ;;
	esac
	shift
done
bench_init codec
bench_need_pkg cc gcc
[[ -e /usr/include/zstd.h ]] || bench_need_pkg /usr/include/zstd.h libzstd-dev
if ((quick)); then size=268435456; else size=1073741824; fi
A=$BENCH_DIR/A-$((size >> 20))M
bench_make_image "$A" "$size"
cc -O2 -o "$BENCH_RUN/bench_codec" "$BENCH_LIB_DIR/bench_codec.c" -lzstd
bench_log "compressing $A in $BENCH_BLOCK-byte blocks, $rounds rounds per variant"
"$BENCH_RUN/bench_codec" "$A" "$BENCH_BLOCK" "$rounds" | tee "$BENCH_RUN/report.txt"
