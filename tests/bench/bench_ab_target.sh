#!/usr/bin/env bash
# tests/bench/bench_ab_target.sh -- one issue target with two builds
# alternated (old first in odd rounds, new first in even ones, so that
# load hits both alike), each figure the best of ROUNDS, the load average
# beside every run.
#
#   tests/bench/bench_ab_target.sh scan OLD_BIN NEW_BIN [ROUNDS]   (issue 17)
#   tests/bench/bench_ab_target.sh get  OLD_BIN NEW_BIN [ROUNDS]   (issue 18)
#   tests/bench/bench_ab_target.sh putb OLD_BIN NEW_BIN [ROUNDS]   (issue 18)
#
# scan: `dedup scan --json --chunker fixed` and `--chunker fixed,fastcdc`,
#   128K, over img1+img2+img3 of bench_cdc.sh ($BENCH_DIR/{A,B,C}-1024M,
#   default /var/tmp/dd-bench, where bench_cdc.sh makes them); the two builds' results must be
#   equal.  Also the CPU time (user + system, best round): under load
#   the steadier figure.
# get: `dedup get S@a - > /dev/null` against `zstd -d -c A.zst >
#   /dev/null` (one thread, in the same rounds); S a 128K zstd:1 store of
#   A made once by NEW ($BENCH_DIR/ab-get-store, default BENCH_DIR
#   /var/tmp/dd-bench with bench_store.sh's A-1024M and A-1024M.zst).
# putb: `dedup put S@x B` of bench_store.sh's 5%-changed copy into a
#   128K zstd:1 store of A (made once by each build, as for small: NEW's
#   at $BENCH_DIR/ab-putb-store, OLD's at ab-putb-store-old;
#   the snapshot removed and gc run after each round, so each round stores
#   B's new blocks again), against `openssl speed -multi 2 -evp sha256
#   -bytes 131072` measured in every round (the best of them).
# small: 4 KiB blocks, --compress none (issue 18): `dedup put` of 1 GiB
#   the store holds already (rand-1 again, into a store of rand-1..4,
#   1 M entries, made once by each build: NEW's at
#   $BENCH_DIR/ab-small-store, OLD's at ab-small-store-old, since a commit
#   of one build may void what the other keeps in meta, such as the
#   unflagged claim a re-put relies on; the snapshot removed after each
#   round), and of 1 GiB of new data (rand-5) into an empty store; `sync`
#   and a second's pause before each.  The data is bench_small.sh's
#   ($BENCH_DIR/rand-1073741824-{1..5}).
# stream: `ddsend S@r1 > /dev/null` and `ddrecv` of its stream (1 GiB of
#   4 KiB blocks, kept in the run's directory) into an empty store, S the
#   store of `small` (made as there).
set -euo pipefail
MODE=${1:?scan, get, putb, small or stream} OLD=${2:?old bin dir} NEW=${3:?new bin dir} R=${4:-4}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
declare -A best cpu

# keep KEY SECONDS CPU: the best of each
keep() {
	if [[ -z ${best[$1]:-} ]] || (($(echo "$2 < ${best[$1]}" | bc))); then best[$1]=$2; fi
	if [[ -z ${cpu[$1]:-} ]] || (($(echo "$3 < ${cpu[$1]}" | bc))); then cpu[$1]=$3; fi
}

# timed KEY CMD...: runs CMD, prints and keeps its wall and CPU time
timed() {
	local k=$1 l s e d c
	shift
	l=$(cut -d' ' -f1 /proc/loadavg)
	s=$(date +%s.%N)
	/usr/bin/time -f '%U %S' -o "$W/time" "$@"
	e=$(date +%s.%N)
	d=$(echo "$e - $s" | bc)
	c=$(awk '{ print $1 + $2 }' "$W/time")
	printf '%-18s %6.3f s  cpu %6.2f s  load %s\n' "$k" "$d" "$c" "$l"
	keep "$k" "$d" "$c"
}

case $MODE in
scan)
	D=${BENCH_DIR:-/var/tmp/dd-bench}
	IMG=("$D/A-1024M" "$D/B-1024M" "$D/C-1024M")
	NEED=("${IMG[@]}")
	;;
get)
	D=${BENCH_DIR:-/var/tmp/dd-bench}
	A=$D/A-1024M S=$D/ab-get-store
	NEED=("$A" "$A.zst")
	;;
putb)
	D=${BENCH_DIR:-/var/tmp/dd-bench}
	A=$D/A-1024M B=$D/B-1024M S=$D/ab-putb-store
	NEED=("$A" "$B")
	;;
small | stream)
	D=${BENCH_DIR:-/var/tmp/dd-bench}
	S=$D/ab-small-store
	NEED=()
	for i in 1 2 3 4 5; do NEED+=("$D/rand-1073741824-$i"); done
	;;
*) echo "bench_ab_target: scan, get, putb, small or stream, not $MODE" >&2; exit 2 ;;
esac
for f in "${NEED[@]}"; do
	[[ -f $f ]] || { echo "bench_ab_target: $f missing: run bench_cdc.sh / bench_store.sh / bench_small.sh first" >&2; exit 2; }
done
# small_store BIN STORE: the 1 M-entry store of rand-1..4, made once by BIN
small_store() {
	if [[ ! -f $2/ok ]]; then
		rm -rf "$2"
		"$1/dedup" init --block-size 4096 --compress none "$2" >/dev/null
		for i in 1 2 3 4; do "$1/dedup" put "$2@r$i" "${NEED[$((i - 1))]}"; done
		touch "$2/ok"
	fi
	"$1/dedup" rm "$2@x" >/dev/null 2>&1 || true   # an interrupted run's
}
if [[ $MODE == small || $MODE == stream ]]; then
	small_store "$NEW" "$S"
	[[ $MODE == stream ]] || small_store "$OLD" "$S-old"
fi
# The 4 KiB modes' timed steps for one build: STEP V BIN.
small_step() {
	local s=$S
	[[ $1 == new ]] || s=$S-old
	sync; sleep 1
	timed "$1 dup" "$2/dedup" put "$s@x" "${NEED[0]}"
	"$2/dedup" rm "$s@x" >/dev/null
	rm -rf "$W/new"
	"$2/dedup" init --block-size 4096 --compress none "$W/new" >/dev/null
	sync; sleep 1
	timed "$1 new" "$2/dedup" put "$W/new@n" "${NEED[4]}"
	rm -rf "$W/new"
}
stream_step() {
	sync; sleep 1
	timed "$1 send" bash -c "'$2/ddsend' '$S@r1' > /dev/null"
	rm -rf "$W/new"
	"$2/dedup" init --block-size 4096 --compress none "$W/new" >/dev/null
	sync; sleep 1
	timed "$1 recv" bash -c "'$2/ddrecv' '$W/new' < '$W/r1.stream'"
	rm -rf "$W/new"
}
# alternate STEP KEY...: R rounds of STEP, old first in odd rounds, then
# the best of each KEY (1 GiB each)
alternate() {
	local step=$1 r v order
	shift
	for ((r = 1; r <= R; r++)); do
		order="old new"
		((r % 2)) || order="new old"
		for v in $order; do
			if [[ $v == new ]]; then "$step" new "$NEW"; else "$step" old "$OLD"; fi
		done
	done
	for k in "$@"; do
		printf 'best %-9s %.3f s  %.0f MB/s  (cpu %.2f s)\n' "$k" "${best[$k]}" \
			"$(echo "1073741824 / ${best[$k]} / 1000000" | bc -l)" "${cpu[$k]}"
	done
	echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
}
if [[ $MODE == stream ]]; then
	"$OLD/ddsend" "$S@r1" >"$W/r1.stream"
	alternate stream_step "old send" "new send" "old recv" "new recv"
	exit 0
fi
if [[ $MODE == small ]]; then
	alternate small_step "old dup" "new dup" "old new" "new new"
	exit 0
fi
if [[ $MODE == putb ]]; then
	# putb_store BIN STORE: the store of A, made once by BIN
	putb_store() {
		if [[ ! -f $2/ok ]]; then
			rm -rf "$2"
			"$1/dedup" init --block-size 131072 --compress zstd:1 "$2" >/dev/null
			"$1/dedup" put "$2@a" "$A"
			touch "$2/ok"
		fi
		"$1/dedup" rm "$2@x" >/dev/null 2>&1 || true   # an interrupted run's
		"$1/dedup" gc "$2" >/dev/null
	}
	putb_store "$NEW" "$S"
	putb_store "$OLD" "$S-old"
	sha=0
	putb_step() {
		local bps
		bps=$(openssl speed -multi 2 -evp sha256 -bytes 131072 -seconds 2 2>/dev/null |
			awk '/^sha256/ { v = $NF } END { sub(/k$/, "", v); printf "%.0f", v * 1000 }')
		printf '%-18s %6.0f MB/s\n' "openssl -multi 2" "$(echo "$bps / 1000000" | bc -l)"
		((bps > sha)) && sha=$bps
		local s=$S
		[[ $1 == new ]] || s=$S-old
		cat "$B" >/dev/null; sync
		timed "$1" "$2/dedup" put "$s@x" "$B"
		"$2/dedup" rm "$s@x" >/dev/null
		"$2/dedup" gc "$s" >/dev/null
	}
	alternate putb_step old new
	for k in old new; do
		printf 'put(B) / openssl -multi 2 at 128K (%.0f MB/s): %s %.3f\n' \
			"$(echo "$sha / 1000000" | bc -l)" "$k" \
			"$(echo "$(stat -c %s "$B") / ${best[$k]} / $sha" | bc -l)"
	done
	exit 0
fi
if [[ $MODE == get && ! -f $S/ok ]]; then
	rm -rf "$S"
	"$NEW/dedup" init "$S" >/dev/null
	"$NEW/dedup" put "$S@a" "$A"
	"$NEW/dedup" get "$S@a" - | cmp - "$A"
	touch "$S/ok"
fi
if [[ $MODE == scan ]]; then cat "${IMG[@]}" >/dev/null; else cat "$A.zst" "$S"/packs/* >/dev/null; fi

for ((r = 1; r <= R; r++)); do
	order="old new"
	((r % 2)) || order="new old"
	for v in $order; do
		bin=$OLD
		[[ $v == new ]] && bin=$NEW
		if [[ $MODE == get ]]; then
			timed "$v" bash -c "'$bin/dedup' get '$S@a' - > /dev/null"
			continue
		fi
		for ch in fixed fixed,fastcdc; do
			timed "$v $ch" bash -c "'$bin/dedup' scan --json --chunker $ch \
				--block-size 128K ${IMG[*]} > '$W/$v-$ch.json'"
		done
	done
	if [[ $MODE == get ]]; then
		timed zstd bash -c "zstd -q -d -c '$A.zst' > /dev/null"
		continue
	fi
	# the figures must agree; `"key"` (which hash told blocks apart) is
	# left out: a build before it has no such line
	for ch in fixed fixed,fastcdc; do
		cmp -s <(grep -v '"key":' "$W/old-$ch.json") \
			<(grep -v '"key":' "$W/new-$ch.json") ||
			{ echo "bench_ab_target: results of $ch differ" >&2; exit 1; }
	done
done

if [[ $MODE == scan ]]; then
	for v in old new; do
		printf '%s: fixed %.2f s, fixed,fastcdc %.2f s: %.3f x; CPU %.2f s, %.2f s: %.3f x\n' \
			"$v" "${best[$v fixed]}" "${best[$v fixed,fastcdc]}" \
			"$(echo "${best[$v fixed,fastcdc]} / ${best[$v fixed]}" | bc -l)" \
			"${cpu[$v fixed]}" "${cpu[$v fixed,fastcdc]}" \
			"$(echo "${cpu[$v fixed,fastcdc]} / ${cpu[$v fixed]}" | bc -l)"
	done
else
	for k in old new zstd; do
		printf 'best %-5s %.3f s  %.0f MB/s  (cpu %.2f s)\n' "$k" "${best[$k]}" \
			"$(echo "$(stat -c %s "$A") / ${best[$k]} / 1000000" | bc -l)" "${cpu[$k]}"
	done
	printf 'get speed / zstd -d speed: old %.3f, new %.3f\n' \
		"$(echo "${best[zstd]} / ${best[old]}" | bc -l)" \
		"$(echo "${best[zstd]} / ${best[new]}" | bc -l)"
fi
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
