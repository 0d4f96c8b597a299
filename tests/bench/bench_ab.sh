#!/usr/bin/env bash
# tests/bench/bench_ab.sh -- two builds side by side (a refactor's "no
# figure worse by more than 5%", issue 16): put, get, scan and the stream
# commands of OLD and NEW alternated on the store benchmark's data, each
# figure the best of ROUNDS, with `zstd -d` timed in the same rounds as a
# check on the machine's load.
#
#   tests/bench/bench_ab.sh OLD_BIN NEW_BIN [ROUNDS]
#
# OLD_BIN, NEW_BIN: directories holding dedup, ddsend and ddrecv (Release
# builds).  Data: $BENCH_DIR/A-1024M, B-1024M and A-1024M.zst, made by
# bench_store.sh (default BENCH_DIR /var/tmp/dd-bench).  Prints one line a
# figure: best seconds of each build and new/old (time: below 1 is better).
set -euo pipefail
OLD=${1:?old bin dir} NEW=${2:?new bin dir} ROUNDS=${3:-3}
D=${BENCH_DIR:-/var/tmp/dd-bench}
A=$D/A-1024M B=$D/B-1024M
for f in "$A" "$B" "$A.zst"; do
	[[ -f $f ]] || { echo "bench_ab: $f missing: run bench_store.sh first" >&2; exit 2; }
done
W=$(mktemp -d "$D/ab.XXXXXX")
trap 'rm -rf "$W"' EXIT
declare -A best

# timed KEY CMD...: run CMD (its output discarded), keep the best time.
timed() {
	local key=$1 s e d
	shift
	s=$(date +%s.%N)
	"$@" >/dev/null 2>&1 || { echo "bench_ab: failed: $*" >&2; exit 1; }
	e=$(date +%s.%N)
	d=$(echo "$e - $s" | bc)
	if [[ -z ${best[$key]:-} ]] || (($(echo "$d < ${best[$key]}" | bc))); then
		best[$key]=$d
	fi
}

FIGS=(put_A put_B get_A scan_none_128K scan_none_4K scan_zstd_128K
	ddsend_f ddrecv_o send_recv)
for ((r = 1; r <= ROUNDS; r++)); do
	order="old new"
	((r % 2)) || order="new old" # neither build always runs second
	for v in $order; do
		bin=$OLD
		[[ $v == new ]] && bin=$NEW
		S=$W/s-$v
		rm -rf "$S" "$W/s2" "$W/out" "$W/a.dds"
		"$bin/dedup" init "$S" >/dev/null
		timed "$v put_A" "$bin/dedup" put "$S@a" "$A"
		timed "$v put_B" "$bin/dedup" put "$S@b" "$B"
		timed "$v get_A" bash -c "'$bin/dedup' get '$S@a' - >/dev/null"
		timed "$v scan_none_128K" "$bin/dedup" scan --compress none --block-size 128K "$A" "$B"
		timed "$v scan_none_4K" "$bin/dedup" scan --compress none --block-size 4K "$A"
		timed "$v scan_zstd_128K" "$bin/dedup" scan --block-size 128K "$A" "$B"
		timed "$v ddsend_f" bash -c "'$bin/ddsend' -f '$A' > '$W/a.dds'"
		timed "$v ddrecv_o" bash -c "'$bin/ddrecv' -o '$W/out' < '$W/a.dds'"
		timed "$v send_recv" bash -c "'$bin/ddsend' '$S@a' | '$bin/ddrecv' '$W/s2'"
		cmp -s "$A" "$W/out" || { echo "bench_ab: ddrecv -o of $v differs" >&2; exit 1; }
		rm -rf "$S" "$W/s2" "$W/out" "$W/a.dds"
		sync
	done
	timed zstd_d bash -c "zstd -q -d -c '$A.zst' >/dev/null"
done
for k in "${FIGS[@]}"; do
	printf '%-16s old %6.2f s  new %6.2f s  new/old %.3f\n' "$k" \
		"${best[old $k]}" "${best[new $k]}" \
		"$(echo "${best[new $k]} / ${best[old $k]}" | bc -l)"
done
printf 'zstd -d A.zst (reference) %.2f s\n' "${best[zstd_d]}"
