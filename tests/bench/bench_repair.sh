#!/usr/bin/env bash
# tests/bench/bench_repair.sh -- `dedup repair` (rebuilding the catalog from
# the packs and manifests) against reading the pack files, in the same run.
# Run by hand (not in CI).  See README.md.
#
#   tests/bench/bench_repair.sh [--sizes 1,10] [--block-sizes 128K,4K]
#                               [--repeat N] [--verify] [--keep]
#
#   --sizes        image sizes in GiB (default 1,10)
#   --block-sizes  store block sizes (default 128K,4K)
#   --repeat N     rounds; each figure is the best round (default 3)
#   --verify       also time `dedup repair --verify` (every payload hashed)
#   --keep         keep the stores (default: each is removed after its step)
#
# For each size and block size: a store of that many GiB of incompressible
# data (one snapshot, every block distinct: the most DDT entries, the
# largest packs), its packs read once to warm the page cache, then per
# round `cat packs/* > /dev/null` and `rm -rf db && dedup repair` -- both
# from the page cache, to /dev/null and to a new catalog.  Reports seconds
# per GiB of each and their ratio, and the peak RSS of repair (all of it,
# LMDB's file map included) and peak RssAnon (what the process owns).
#
# Environment: BENCH_DIR (default /var/tmp/dd-bench), DD_BIN (default
# build/bin under the repo root; build it Release first).
set -euo pipefail
# shellcheck source=tests/bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SIZES=1,10 BSIZES=128K,4K REPEAT=3 VERIFY=0 KEEP=0
while (($#)); do
	arg=$1
	shift
	case $arg in
	--sizes) SIZES=$1; shift ;;
	--block-sizes) BSIZES=$1; shift ;;
	--repeat) REPEAT=$1; shift ;;
	--verify) VERIFY=1 ;;
	--keep) KEEP=1 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) bench_die "unknown argument '$arg' (try --help)" ;;
	esac
done
bench_need_pkg /usr/bin/time time
bench_need_pkg bc bc
DD_BIN=${DD_BIN:-$BENCH_REPO/build/bin}
DD=$DD_BIN/dedup
[[ -x $DD ]] || bench_die "no dedup at $DD (build it, or set DD_BIN)"
bench_init repair

# best_of N CMD...: "seconds maxrss_kib" of the fastest of N runs
best_of() {
	local n=$1 best='' t i
	shift
	for ((i = 0; i < n; i++)); do
		/usr/bin/time -o "$BENCH_RUN/time" -f '%e %M' "$@" >/dev/null 2>&1 ||
			bench_die "failed: $*"
		t=$(tail -1 "$BENCH_RUN/time")
		if [[ -z $best || $(echo "${t%% *} < ${best%% *}" | bc -l) == 1 ]]; then
			best=$t
		fi
	done
	echo "$best"
}

printf '%-6s %-5s %10s %10s %8s %9s %9s %9s\n' size block 'cat s/GiB' \
	'repair' 'ratio' 'rss MiB' 'anon MiB' 'entries' | tee "$BENCH_RUN/table.txt"
for gib in ${SIZES//,/ }; do
	for bs in ${BSIZES//,/ }; do
		S=$BENCH_DIR/repair-$gib-$bs
		if [[ ! -f $S.ok ]]; then
			rm -rf "$S" "$S.ok"
			bench_log "store of $gib GiB at $bs blocks (random data) ..."
			"$DD" init --block-size "$bs" "$S" >/dev/null
			head -c $((gib << 30)) /dev/urandom | "$DD" put "$S@a" -
			touch "$S.ok"
		fi
		bench_log "warming the page cache with $S/packs"
		cat "$S"/packs/* >/dev/null
		cat_t=$(best_of "$REPEAT" sh -c "cat '$S'/packs/* >/dev/null")
		rep_t=$(best_of "$REPEAT" sh -c "rm -rf '$S/db' && '$DD' repair '$S'")
		anon=$(bench_anon_peak sh -c "rm -rf '$S/db' && exec '$DD' repair '$S'")
		entries=$("$DD" stat --json "$S" | python3 -c \
			'import json,sys; print(json.load(sys.stdin)["ddt_entries"])')
		c=$(echo "${cat_t%% *} / $gib" | bc -l)
		r=$(echo "${rep_t%% *} / $gib" | bc -l)
		printf '%-6s %-5s %10.3f %10.3f %8.2f %9d %9d %9s\n' "${gib}G" "$bs" \
			"$c" "$r" "$(echo "$r / $c" | bc -l)" \
			$((${rep_t##* } / 1024)) $((anon / 1024)) "$entries" |
			tee -a "$BENCH_RUN/table.txt"
		bench_record "repair_rss_anon_kib_${gib}G_$bs" "$anon"
		bench_record "cat_s_per_gib_${gib}G_$bs" "$c"
		bench_record "repair_s_per_gib_${gib}G_$bs" "$r"
		if ((VERIFY)); then
			v_t=$(best_of "$REPEAT" sh -c "rm -rf '$S/db' && '$DD' repair --verify '$S'")
			bench_record "repair_verify_s_per_gib_${gib}G_$bs" \
				"$(echo "${v_t%% *} / $gib" | bc -l)"
		fi
		"$DD" scrub "$S" >/dev/null || bench_die "scrub after repair failed"
		((KEEP)) || rm -rf "$S" "$S.ok"
	done
done
bench_log "table in $BENCH_RUN/table.txt, figures in $BENCH_RAW"
