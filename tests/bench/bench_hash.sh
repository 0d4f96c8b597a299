#!/usr/bin/env bash
# tests/bench/bench_hash.sh -- SHA-256 per core: `openssl speed -evp
# sha256` and libcrypto's EVP called the way the store did before, against
# libdedup's two-lane SHA-NI code (hash/sha256x2.c), and lists of 32
# blocks (sixteen AVX-512 lanes where usable: hash/sha256x16.c), at 4 KiB
# and 128 KiB.  (At 128 KiB the block pipeline's lists are the two blocks
# of a 256 KiB region, which go to the two SHA-NI lanes.)
# See README.md.
#
#   tests/bench/bench_hash.sh [--seconds N]
#
# Environment: DD_BUILD, a libdedup build directory (default build/ under
# the repo root) whose libdedup.a is linked.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

secs=3
while (($#)); do
	case $1 in
	--seconds) secs=$2; shift ;;
	*) bench_die "unknown option $1" ;;
	esac
	shift
done
bench_init hash
bench_need_pkg cc gcc
bench_need_pkg openssl openssl
DD_BUILD=${DD_BUILD:-$BENCH_REPO/build}
[[ -f $DD_BUILD/libdedup.a ]] || bench_die "no $DD_BUILD/libdedup.a: build libdedup or set DD_BUILD"
cc -O2 -o "$BENCH_RUN/bench_hash" "$BENCH_LIB_DIR/bench_hash.c" \
	-I"$BENCH_REPO/libdedup" -I"$BENCH_REPO/include" "$DD_BUILD/libdedup.a" \
	-lcrypto -lzstd -llmdb -lpthread -lm
printf '%-8s %14s %14s %14s %14s %8s %8s\n' block "openssl speed" "EVP 1 lane" "dd 2 lanes" \
	"dd lists of 32" "x2/ossl" "list/ossl"
for bs in 4096 131072; do
	ossl=$(openssl speed -seconds "$secs" -evp sha256 -bytes "$bs" 2>/dev/null |
		awk '/^sha256/ { sub(/k$/, "", $2); print $2 * 1000 / 1e6 }')
	out=$("$BENCH_RUN/bench_hash" "$bs" "$secs")
	evp=$(awk '$1 == "evp_1lane_mbps" { print $2 }' <<<"$out")
	x2=$(awk '$1 == "dd_x2_mbps" { print $2 }' <<<"$out")
	active=$(awk '$1 == "dd_x2_active" { print $2 }' <<<"$out")
	list=$(awk '$1 == "dd_list_mbps" { print $2 }' <<<"$out")
	((active)) || bench_log "two-lane code inactive (no SHA-NI?): dd figure is two EVP calls"
	bench_record "sha256_${bs}_openssl_mbps" "$ossl"
	bench_record "sha256_${bs}_evp_mbps" "$evp"
	bench_record "sha256_${bs}_dd_x2_mbps" "$x2"
	bench_record "sha256_${bs}_dd_list_mbps" "$list"
	printf '%-8s %9.0f MB/s %9.0f MB/s %9.0f MB/s %9.0f MB/s %7.2fx %7.2fx\n' "$bs" "$ossl" \
		"$evp" "$x2" "$list" "$(awk -v a="$x2" -v b="$ossl" 'BEGIN { print a / b }')" \
		"$(awk -v a="$list" -v b="$ossl" 'BEGIN { print a / b }')"
done | tee "$BENCH_RUN/report.txt"
