#!/usr/bin/env bash
# test_catalog_big.sh -- random damage to a catalog of over 64 MiB.
#
# Opening a store checks the whole of data.mdb only up to 64 MiB
# (DD_DB_CHECK_AT_OPEN_MAX); beyond that, what stands between LMDB and
# damage is the guard (catalog/guard.c) -- the pages each operation will
# read, and for a writer the free list against the pages in use -- and
# scrub's whole-file check (format/store.md §7, the policy).  Here a store
# whose catalog is over 64 MiB (400,000 distinct 4 KiB blocks that
# compress to almost nothing, and two small snapshots) gets random byte
# flips in data.mdb, and every command -- ls, stat, get, scrub, then the
# writers put, rm and gc -- either works exactly or refuses with one line
# naming the problem: never a crash, a hang, or wrong bytes with exit 0.
# A snapshot that read back exactly before the writers still does after
# them (a failed writer leaves the store as it was), and a scrub that
# passes means the big snapshot reads back exactly too.
#
#   DD_CATALOG_BIG_ROUNDS  damage rounds (default 6; 3 in a sanitizer build)
#   DD_CATALOG_BIG_SEED    their seed (default: the process id; printed)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if grep -qs '^DD_SANITIZE:BOOL=ON' "$DD_BIN/../CMakeCache.txt"; then
	ROUNDS=${DD_CATALOG_BIG_ROUNDS:-3}
else
	ROUNDS=${DD_CATALOG_BIG_ROUNDS:-6}
fi
SEED=${DD_CATALOG_BIG_SEED:-$$}
NBLOCKS=400000
note "rounds=$ROUNDS seed=$SEED (repeat with DD_CATALOG_BIG_SEED=$SEED)"

# block i: its number and a seed, then zeros: distinct, and tiny once
# compressed, so that the catalog is large and the packs small
cat >"$T/gen.py" <<'EOF'
import struct, sys
n, seed = int(sys.argv[1]), int(sys.argv[2])
zeros = bytes(4096 - 16)
out = sys.stdout.buffer
for i in range(0, n, 256):
    out.write(b''.join(struct.pack('<QQ', j, seed) + zeros
                       for j in range(i, min(n, i + 256))))
EOF
S="$T/s"
"$DEDUP" init --block-size 4K "$S" >/dev/null
python3 "$T/gen.py" $NBLOCKS 1 | "$DEDUP" put "$S@big" -
a_sum=$(python3 "$T/gen.py" $NBLOCKS 1 | sha256sum | cut -d' ' -f1)
gen_random "$T/b.img" $((300 * 1024)) big-b
gen_random "$T/d.img" $((200 * 1024)) big-d
gen_random "$T/c.img" $((100 * 1024)) big-c
"$DEDUP" put "$S@b" "$T/b.img"
"$DEDUP" put "$S@d" "$T/d.img"
size=$(stat -c %s "$S/db/data.mdb")
[ "$size" -gt $((64 * 1024 * 1024)) ] ||
	fail "the catalog is $size bytes, not over 64 MiB"
note "catalog $size bytes"

# run_cmd LABEL CMD...: the command must exit 0 or 1, with one line when
# 1; a crash, a hang or a sanitizer report fails the test.  Sets RC.
run_cmd() {
	local label=$1
	shift
	set +e
	timeout 120 "$@" >"$T/out" 2>"$T/err"
	RC=$?
	set -e
	[ "$RC" -ne 124 ] || fail "$label: no exit within 120 s"
	if [ "$RC" -ge 2 ] || grep -q 'Sanitizer\|runtime error' "$T/err"; then
		fail "$label: crashed or misbehaved (exit $RC)"
	fi
	if [ "$RC" -eq 1 ]; then
		assert_one_line "$label"
	fi
}

got_b=0 got_big=0 refused=0
for ((r = 1; r <= ROUNDS; r++)); do
	W="$T/w"
	rm -rf "$W"
	cp -a "$S" "$W"
	flips=$(python3 - "$W/db/data.mdb" "$SEED" "$r" <<'EOF'
import os, random, sys
path, seed, r = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed * 1000 + r)
size = os.path.getsize(path)
done = []
with open(path, 'r+b') as f:
    for _ in range(rng.randrange(1, 4)):
        off = rng.randrange(2 * 4096, size)   # meta pages: test_repair
        f.seek(off)
        b = f.read(1)[0]
        f.seek(off)
        f.write(bytes([b ^ (1 << rng.randrange(8))]))
        done.append(off)
print(' '.join(map(str, done)))
EOF
)
	what="round $r (flips at $flips)"
	run_cmd "$what: ls" "$DEDUP" ls "$W"
	run_cmd "$what: stat" "$DEDUP" stat "$W"
	run_cmd "$what: get b" "$DEDUP" get "$W@b" "$T/got"
	b_ok=$RC
	if [ "$RC" -eq 0 ]; then
		assert_same "$T/got" "$T/b.img" "$what: get b"
		got_b=$((got_b + 1))
	fi
	run_cmd "$what: get d" "$DEDUP" get "$W@d" "$T/got"
	d_ok=$RC
	[ "$RC" -ne 0 ] || assert_same "$T/got" "$T/d.img" "$what: get d"
	run_cmd "$what: scrub" "$DEDUP" scrub "$W"
	if [ "$RC" -eq 0 ]; then
		# scrub passed: every snapshot reads back exactly
		[ "$b_ok" -eq 0 ] && [ "$d_ok" -eq 0 ] ||
			fail "$what: scrub passed, but b or d did not read back"
		sum=$("$DEDUP" get "$W@big" - | sha256sum | cut -d' ' -f1)
		assert_eq "$a_sum" "$sum" "$what: scrub passed, the big snapshot"
		got_big=$((got_big + 1))
	else
		refused=$((refused + 1))
	fi
	run_cmd "$what: put c" "$DEDUP" put "$W@c" "$T/c.img"
	if [ "$RC" -eq 0 ]; then
		run_cmd "$what: get c" "$DEDUP" get "$W@c" "$T/got"
		assert_eq 0 "$RC" "$what: get of the snapshot put just now"
		assert_same "$T/got" "$T/c.img" "$what: get c"
	fi
	run_cmd "$what: rm b" "$DEDUP" rm "$W@b"
	run_cmd "$what: gc" "$DEDUP" gc "$W"
	# d read back before the writers: a writer either committed a catalog
	# in which it still does, or failed and left the store as it was
	if [ "$d_ok" -eq 0 ]; then
		run_cmd "$what: get d after the writers" "$DEDUP" get "$W@d" \
			"$T/got"
		assert_eq 0 "$RC" "$what: get d after the writers"
		assert_same "$T/got" "$T/d.img" "$what: d after the writers"
	fi
done
note "$ROUNDS rounds: b read back in $got_b, scrub passed in $got_big, refused in $refused"
echo "PASS [$TEST_NAME]"
