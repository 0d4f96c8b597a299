# shellcheck shell=bash disable=SC2034
# tests/bench/lib.sh -- shared helpers for the hand-run benchmarks.
#
# Source it from a benchmark script (bash, `set -euo pipefail`):
#
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#   bench_init store            # BENCH_DIR, BENCH_RUN, BENCH_RAW, repo root
#   bench_make_image  "$BENCH_DIR/A-1024M" 1073741824
#   bench_make_changed_copy "$BENCH_DIR/A-1024M" "$BENCH_DIR/B-1024M" 0.05
#   bench_warm "$A" "$B"
#   bench_time put_a "$DD" put "$S@a" "$A"      # records put_a_seconds, put_a_maxrss_kib
#   bench_record some_key 123
#
# Conventions:
#  - every message goes to stderr (the timed commands' stdout is often
#    redirected to /dev/null by the caller);
#  - measurements are appended as "key<TAB>value" lines to $BENCH_RAW, which
#    the benchmark's report step reads;
#  - any error stops the benchmark (bench_die); a missed target never does.

BENCH_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BENCH_REPO=$(cd "$BENCH_LIB_DIR/../.." && pwd)

# Image layout shared by the benchmarks.
BENCH_BLOCK=131072          # 128 KiB: the store's block size and B's unit of change
BENCH_SEED=20240501         # fixed seed: B changes the same blocks every time

bench_log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
bench_die() { printf '[bench] ERROR: %s\n' "$*" >&2; exit 1; }

# bench_init NAME: sets BENCH_DIR (default /var/tmp/dd-bench, cached data),
# BENCH_RUN (a fresh per-benchmark run directory) and BENCH_RAW.
bench_init() {
	local name=$1
	BENCH_DIR=${BENCH_DIR:-/var/tmp/dd-bench}
	mkdir -p "$BENCH_DIR"
	BENCH_DIR=$(cd "$BENCH_DIR" && pwd)
	BENCH_RUN=$BENCH_DIR/run-$name
	rm -rf "$BENCH_RUN"
	mkdir -p "$BENCH_RUN"
	BENCH_RAW=$BENCH_RUN/raw.tsv
	: >"$BENCH_RAW"
	export BENCH_DIR BENCH_RUN BENCH_RAW
	bench_log "work dir $BENCH_DIR, this run's files in $BENCH_RUN"
}

# bench_static_lib [CMAKE_OPTION...]: sets DD_BUILD (default build/ under
# the repository) and checks it holds libdedup.a, for the benchmarks that
# link a C program against the static library; the options are the ones
# the message tells to configure it with.
bench_static_lib() {
	DD_BUILD=${DD_BUILD:-$BENCH_REPO/build}
	[[ -f $DD_BUILD/libdedup.a ]] ||
		bench_die "no $DD_BUILD/libdedup.a: build it (cmake -S . -B build -DCMAKE_BUILD_TYPE=Release${1:+ $*} && cmake --build build -j2) or set DD_BUILD"
}

# bench_need_pkg CMD PACKAGE: installs the Debian package when CMD is missing.
bench_need_pkg() {
	local cmd=$1 pkg=$2
	if [[ $cmd == /* ]]; then [[ -x $cmd ]] && return 0
	else command -v "$cmd" >/dev/null 2>&1 && return 0; fi
	[[ $(id -u) == 0 ]] || bench_die "$cmd is missing: install Debian package '$pkg' (needs root)"
	bench_log "installing Debian package $pkg (for $cmd)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq "$pkg" >&2 ||
		{ apt-get update -qq >&2 && apt-get install -y -qq "$pkg" >&2; } ||
		bench_die "could not install $pkg"
}

# bench_record KEY VALUE
bench_record() {
	printf '%s\t%s\n' "$1" "$2" >>"$BENCH_RAW"
	bench_log "  $1 = $2"
}

bench_size() { stat -c %s "$1"; }

# bench_make_image OUT SIZE: OUT = the first SIZE bytes of
#   tar(/usr/lib/x86_64-linux-gnu) + tar(/usr/share) + tar(rest of /usr/lib)
# (tars in name order, so the bytes depend only on the installed files).
# Cached: rebuilt only when OUT is missing, has the wrong size, or was left
# half-built.
bench_make_image() {
	local out=$1 size=$2
	if [[ -f $out && -f $out.ok && $(bench_size "$out") == "$size" ]]; then
		bench_log "using cached $out"
		return 0
	fi
	rm -f "$out" "$out.ok" "$out.tmp"
	bench_log "building $out ($size bytes) from a tar of /usr/lib/x86_64-linux-gnu ..."
	# head stops reading once it has SIZE bytes: the tars then die of SIGPIPE,
	# which is expected, so the pipeline's status is head's alone here.
	set +o pipefail
	{
		tar -cf - --sort=name -C / usr/lib/x86_64-linux-gnu
		tar -cf - --sort=name -C / usr/share
		tar -cf - --sort=name -C / --exclude=usr/lib/x86_64-linux-gnu usr/lib
	} 2>/dev/null | head -c "$size" >"$out.tmp"
	set -o pipefail
	[[ $(bench_size "$out.tmp") == "$size" ]] ||
		bench_die "$out: only $(bench_size "$out.tmp") of $size bytes from /usr (not enough files?)"
	mv "$out.tmp" "$out"
	date -u +%FT%TZ >"$out.ok"
}

# bench_make_changed_copy SRC OUT FRACTION [BLOCK]: OUT = SRC with FRACTION of
# its whole BLOCK-sized blocks (default 128 KiB) overwritten in place with
# random bytes.  Block indices and bytes come from a fixed seed.  The list of
# changed block indices is written to OUT.blocks.
bench_make_changed_copy() {
	local src=$1 out=$2 frac=$3 bs=${4:-$BENCH_BLOCK}
	if [[ -f $out && -f $out.ok && $(bench_size "$out") == "$(bench_size "$src")" &&
	      ! $src.ok -nt $out.ok ]]; then
		bench_log "using cached $out"
		return 0
	fi
	rm -f "$out" "$out.ok" "$out.tmp"
	bench_log "building $out: $src with $frac of its $bs-byte blocks randomised (seed $BENCH_SEED)"
	python3 - "$src" "$out.tmp" "$frac" "$bs" "$BENCH_SEED" "$out.blocks" <<'EOF' >&2
import os, random, shutil, sys
src, dst, frac, bs, seed, listf = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
shutil.copyfile(src, dst)
n = os.path.getsize(dst) // bs           # whole blocks only
k = round(n * frac)
rng = random.Random(seed)
idx = sorted(rng.sample(range(n), k))
with open(dst, "r+b") as f:
    for i in idx:
        f.seek(i * bs)
        f.write(rng.randbytes(bs))
with open(listf, "w") as f:
    f.write("\n".join(map(str, idx)) + "\n")
print(f"  overwrote {k} of {n} blocks")
EOF
	mv "$out.tmp" "$out"
	date -u +%FT%TZ >"$out.ok"
}

# bench_make_prefix SRC OUT SIZE: OUT = the first SIZE bytes of SRC (cached).
bench_make_prefix() {
	local src=$1 out=$2 size=$3
	if [[ -f $out && -f $out.ok && $(bench_size "$out") == "$size" && ! $src.ok -nt $out.ok ]]; then
		bench_log "using cached $out"
		return 0
	fi
	rm -f "$out" "$out.ok"
	head -c "$size" "$src" >"$out.tmp"
	[[ $(bench_size "$out.tmp") == "$size" ]] || bench_die "$out: short prefix"
	mv "$out.tmp" "$out"
	date -u +%FT%TZ >"$out.ok"
}

# bench_make_zst SRC: SRC.zst = zstd -1 of SRC (cached), for the decompression reference.
bench_make_zst() {
	local src=$1
	if [[ -f $src.zst && -f $src.zst.ok && ! $src.ok -nt $src.zst.ok ]]; then
		bench_log "using cached $src.zst"
		return 0
	fi
	rm -f "$src.zst" "$src.zst.ok"
	bench_log "compressing $src -> $src.zst (zstd -1)"
	zstd -q -1 -T2 -c "$src" >"$src.zst.tmp"
	mv "$src.zst.tmp" "$src.zst"
	date -u +%FT%TZ >"$src.zst.ok"
}

# bench_warm FILE...: flush dirty pages, then read the files into the page cache.
bench_warm() {
	sync
	cat "$@" >/dev/null
}

# bench_wait_anon PID VAR: waits for PID (a /usr/bin/time or sh wrapper),
# sampling the peak RssAnon (KiB) of its child every 50 ms without
# forking -- what the process owns, not its file maps -- into VAR; returns
# PID's exit status.
bench_wait_anon() {
	local pid=$1 child="" top=0 k v rest
	while kill -0 "$pid" 2>/dev/null; do
		[[ -n $child ]] || child=$(pgrep -P "$pid" | head -n 1 || true)
		if [[ -n $child && -r /proc/$child/status ]]; then
			while read -r k v rest; do
				[[ $k == RssAnon: ]] && ((v > top)) && top=$v
			done <"/proc/$child/status" 2>/dev/null || true
		fi
		sleep 0.05
	done
	printf -v "$2" '%s' "$top"
	wait "$pid"
}

# bench_time_v_elapsed FILE: the wall clock seconds of `/usr/bin/time -v`'s
# report FILE ("Elapsed (wall clock) time (h:mm:ss or m:ss): 0:00.52").
bench_time_v_elapsed() {
	awk -F': ' '/Elapsed \(wall clock\) time/ {
		n = split($NF, p, ":"); s = 0
		for (i = 1; i <= n; i++) s = s * 60 + p[i]
		printf "%.3f", s }' "$1"
}

# bench_time KEY CMD [ARG...]: runs CMD under /usr/bin/time -v and records
# KEY_seconds (wall clock, ns resolution), KEY_maxrss_kib (file maps
# included) and KEY_anon_kib (peak RssAnon: what the process owns).  CMD's stdout
# is the caller's (redirect it there); its stderr goes to $BENCH_RUN/KEY.err.
# A non-zero exit stops the benchmark.
bench_time() {
	local key=$1
	shift
	local tf=$BENCH_RUN/$key.time ef=$BENCH_RUN/$key.err t0 t1 rc=0 rss secs
	local pid peak
	bench_log "timing $key: $*"
	t0=$(date +%s%N)
	# <&0: an asynchronous command's stdin is otherwise /dev/null, and
	# some callers feed the command (bench_time K ddrecv ... <stream)
	/usr/bin/time -v -o "$tf" "$@" 2>"$ef" <&0 &
	pid=$!
	bench_wait_anon "$pid" peak || rc=$?
	t1=$(date +%s%N)
	if ((rc != 0)); then
		tail -n 20 "$ef" >&2 || true
		bench_die "$key: '$*' failed (exit $rc); stderr in $ef"
	fi
	rss=$(awk -F': *' '/Maximum resident set size/ {print $2}' "$tf")
	# the command's own wall clock, as time(1) took it: t1 - t0 is late
	# by bench_wait_anon's poll (60-70 ms measured around `sleep 0.31`)
	secs=$(bench_time_v_elapsed "$tf")
	[[ -n $secs ]] ||
		secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
	bench_record "${key}_seconds" "$secs"
	bench_record "${key}_maxrss_kib" "$rss"
	bench_record "${key}_anon_kib" "$peak"
}

# bench_openssl_sha256 BYTES [PROCS]: prints SHA-256 throughput in bytes/s as
# measured by `openssl speed -evp sha256` (3 s), on one core or PROCS cores.
bench_openssl_sha256() {
	local bytes=$1 procs=${2:-1} out v
	local multi=()
	((procs > 1)) && multi=(-multi "$procs")
	out=$(openssl speed "${multi[@]}" -evp sha256 -bytes "$bytes" -seconds 3 2>/dev/null) ||
		bench_die "openssl speed failed"
	# The last line is "sha256   1735711.03k": thousands of bytes per second.
	v=$(awk '$1 == "sha256" { v = $NF } END { print v }' <<<"$out")
	[[ $v == *k ]] || bench_die "cannot parse openssl speed output: $(tail -n 2 <<<"$out")"
	awk -v k="${v%k}" 'BEGIN { printf "%.0f", k * 1000 }'
}

# bench_du DIR: apparent size in bytes (du -sb).
bench_du() { du -sb "$1" | awk '{ print $1 }'; }
# bench_du_alloc DIR: allocated size in bytes.
bench_du_alloc() { du -s --block-size=1 "$1" | awk '{ print $1 }'; }

# bench_anon_peak CMD...: runs CMD (its output discarded), prints the peak
# RssAnon (KiB) it reached -- the memory the process owns; the pages of
# LMDB's file map are page cache, not counted (docs/design.md, memory).
bench_anon_peak() {
	local pid peak=0 v
	"$@" >/dev/null 2>&1 &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		v=$(awk '/^RssAnon:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
		[[ -n $v && $v -gt $peak ]] && peak=$v
		sleep 0.02
	done
	wait "$pid" || bench_die "failed: $*"
	echo "$peak"
}

# bench_ceph_up: exports CEPH_CONF, the cluster to use -- the caller's, or
# a one-node cluster of the project's own (tests/ceph/cluster.sh) started
# in $BENCH_RUN/cluster; bench_ceph_down stops the latter (call it from the
# EXIT trap).
BENCH_CLUSTER=
bench_ceph_up() {
	if [[ -z ${CEPH_CONF:-} ]]; then
		BENCH_CLUSTER=$BENCH_RUN/cluster
		bench_log "starting a one-node cluster in $BENCH_CLUSTER"
		CEPH_CONF=$(bash "$BENCH_REPO/tests/ceph/cluster.sh" up "$BENCH_CLUSTER")
	fi
	export CEPH_CONF
}
bench_ceph_down() {
	[[ -z $BENCH_CLUSTER ]] || bash "$BENCH_REPO/tests/ceph/cluster.sh" down "$BENCH_CLUSTER" || true
}

# bench_rand_file SIZE N: the path of round N's random input of SIZE bytes
# (bench_small.sh, bench_flat.sh), made when missing: AES-CTR of zeros,
# so the bytes depend on the round alone.
bench_rand_file() {
	local f=$BENCH_DIR/rand-$1-$2
	if [[ ! -f $f.ok ]]; then
		bench_log "making $f"
		openssl enc -aes-128-ctr -nosalt -pbkdf2 -pass "pass:libdedup-small-$2" \
			-in /dev/zero 2>/dev/null | head -c "$1" >"$f"
		touch "$f.ok"
	fi
	echo "$f"
}

# bench_prefault: touches 3 GiB of anonymous memory and frees it.  Guest
# memory of a VM costs at its first touch (here 2-3 s a GiB: the host backs
# the page then), and page cache for new packs is such memory unless
# something freed it just before; so before a timed put the page cache it
# fills comes from backed pages.
bench_prefault() {
	python3 -c 'import mmap
m = mmap.mmap(-1, 3 << 30)
for o in range(0, 3 << 30, 4096): m[o] = 1'
}
