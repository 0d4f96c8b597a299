#!/usr/bin/env bash
# demo.sh -- set up, build, and run a small libdedup example end to end.
#
#   sudo bash scripts/demo.sh
#
# Builds into build/ under the repository (or $BUILD_DIR), makes a store and
# two versions of a few tens of MB of data in a temporary directory, stores
# both, lists and describes the store, restores both and compares them with
# the originals.  Exits non-zero on any failure; prints "demo OK" at the end.
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$SRC/build}
JOBS=$(nproc 2>/dev/null || echo 2)

step() { printf '\n== %s\n' "$*" >&2; }
run() { printf '$ %s\n' "$*" >&2; "$@"; }

step "setup"
bash "$SRC/scripts/setup.sh"

step "configure and build ($BUILD_DIR)"
cmake -S "$SRC" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" --target dedup_cmd
DEDUP=$BUILD_DIR/bin/dedup
[ -x "$DEDUP" ] || { echo "demo: $DEDUP was not built" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/dedup-demo.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"   # relative names keep '@' out of the store path

step "make example data in $WORK"
MAX=$((48 * 1024 * 1024))
if [ -d /usr/include ]; then
	tar cf data.tar -C /usr include 2>/dev/null || true
	# Cut to a few tens of MB; the image need not be a valid tar.
	if [ -f data.tar ] && [ "$(stat -c %s data.tar)" -gt "$MAX" ]; then
		truncate -s "$MAX" data.tar
	fi
fi
if [ ! -s data.tar ] || [ "$(stat -c %s data.tar)" -lt $((4 * 1024 * 1024)) ]; then
	# No usable /usr/include: generate 32 MiB with text (compressible),
	# repeats (dedupable), zeros (holes) and random bytes.
	python3 - data.tar <<'PY'
import os, random, sys
rnd = random.Random(1)
words = [b"block", b"dedup", b"store", b"snapshot", b"hash", b"pack", b"zstd"]
with open(sys.argv[1], "wb") as f:
    chunk = b" ".join(rnd.choice(words) for _ in range(200000))[:1 << 20]
    for i in range(32):
        kind = i % 4
        if kind == 0:
            f.write(os.urandom(1 << 20))
        elif kind == 1:
            f.write(chunk)                 # the same MiB again and again
        elif kind == 2:
            f.write(bytes(1 << 20))        # zeros
        else:
            f.write(b" ".join(rnd.choice(words) for _ in range(200000))[:1 << 20])
PY
fi
ls -l data.tar >&2

# Version 2: the same image with a few ranges overwritten by random bytes.
cp data.tar data2.tar
size=$(stat -c %s data2.tar)
for frac in 10 35 60 85; do
	off=$((size * frac / 100 / 65536))          # in 64 KiB units
	dd if=/dev/urandom of=data2.tar bs=64K seek="$off" count=1 \
		conv=notrunc status=none
done

step "store both versions"
run "$DEDUP" init store
run "$DEDUP" put store@v1 data.tar
run "$DEDUP" put store@v2 data2.tar

step "list and describe"
run "$DEDUP" ls store
run "$DEDUP" stat store

step "restore and compare"
run "$DEDUP" get store@v1 out1
run cmp data.tar out1
printf '$ %s\n' "$DEDUP get store@v2 - > out2" >&2
"$DEDUP" get store@v2 - > out2
run cmp data2.tar out2

echo "demo OK"
