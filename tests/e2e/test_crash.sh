#!/usr/bin/env bash
# test_crash.sh -- SIGKILL of writers (put, rm, gc, repair) at random
# moments; after each, a copy of the store without its catalog is
# repaired and must list exactly the committed set.
#
# Invariant 1 (DESIGN.md) and format/store.md §5, §7: a crash at any instant
# leaves the store opening cleanly, every committed snapshot reading back
# byte-identical, a snapshot visible only once its writer committed, and
# whatever a killed writer left behind (pack tails, `pend` ids, orphan
# packs) rolled back by the next handle to open the store and reclaimed by
# gc.
#
# Environment:
#   DD_CRASH_KILLS  number of put kills (default 30, the CI mode; set
#                   DD_CRASH_KILLS=200 for the long mode, a few minutes)
#   DD_CRASH_SEED   seed for $RANDOM (the kill timing); printed, so that a
#                   failing run can be repeated with the same choices
#   DD_CRASH_PUT_MS a put is killed 0..DD_CRASH_PUT_MS-1 ms after it starts
#                   (default 300; larger lets more puts finish and commit)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BS=4096
KILLS=${DD_CRASH_KILLS:-30}
SEED=${DD_CRASH_SEED:-$$}
PUT_MS=${DD_CRASH_PUT_MS:-300}
RANDOM=$SEED
note "kills=$KILLS put window=${PUT_MS} ms seed=$SEED (repeat with DD_CRASH_SEED=$SEED)"

S="$T/s"
MIB=$((1024 * 1024))

# ---- the two snapshots whose content we keep -------------------------------------
# a: random, a compressible run whose blocks repeat (dedup hits inside a),
#    zeros (holes) and a short random tail.
gen_random "$T/a.rand" $((6 * MIB)) crash-a
{
	cat "$T/a.rand"
	head -c $((MIB)) < <(yes 'libdedup crash test: the same line again')
	head -c $((MIB)) /dev/zero
	gen_random "$T/a.tail" 1000 crash-a-tail && cat "$T/a.tail"
} >"$T/a.img"
# b: random plus a copy of part of a (shared blocks).
gen_random "$T/b.rand" $((3 * MIB)) crash-b
{ cat "$T/b.rand"; head -c $((2 * MIB)) "$T/a.img"; } >"$T/b.img"

"$DEDUP" init --block-size $BS "$S"
"$DEDUP" put "$S@a" "$T/a.img"
"$DEDUP" put "$S@b" "$T/b.img"

# big.img K: 64 MiB, different for each K: two copies of a (dedup hits, 18 MiB),
# 40 MiB of random (new blocks), then zeros.
make_big() {
	local k=$1 out=$2
	gen_random "$T/big.rand" $((40 * MIB)) "crash-big-$k"
	cat "$T/a.img" "$T/a.img" "$T/big.rand" >"$out"
	truncate -s $((64 * MIB)) "$out"  # the rest: zeros
	rm -f "$T/big.rand"
}

# extra.img K: 16 MiB: 14 MiB new random (work for the gc that follows its
# rm), 2 MiB of b.
make_extra() {
	local k=$1 out=$2
	gen_random "$T/extra.rand" $((14 * MIB)) "crash-extra-$k"
	{ cat "$T/extra.rand"; head -c $((2 * MIB)) "$T/b.rand"; } >"$out"
	rm -f "$T/extra.rand"
}

# image_of NAME OUT: regenerates the bytes committed snapshot NAME holds.
image_of() {
	case $1 in
	tmp*) make_big "${1#tmp}" "$2" ;;
	x*) make_extra "${1#x}" "$2" ;;
	*) fail "image_of: unknown snapshot $1" ;;
	esac
}

# committed snapshots besides a and b, "name digest" lines
: >"$T/committed"

# a random delay of 0..MAX-1 milliseconds
rand_sleep() { # MAX
	local ms=$(((RANDOM * 32768 + RANDOM) % $1))
	sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
}

# kill_after MAX CMD...: starts CMD, SIGKILLs it after a random delay; sets
# KRC to its exit status (137 when the kill landed while it ran).
kill_after() {
	local max=$1 pid
	shift
	"$@" >/dev/null 2>"$T/kerr" &
	pid=$!
	rand_sleep "$max"
	kill -9 "$pid" 2>/dev/null || true
	set +e
	{ wait "$pid"; } 2>/dev/null  # no "Killed" job notice
	KRC=$?
	set -e
	if [ "$KRC" -ne 0 ] && [ "$KRC" -ne 137 ]; then
		cp "$T/kerr" "$T/err"
		fail "$* exited $KRC (neither success nor killed)"
	fi
}

# has_snap NAME: the snapshot is listed by ls (uses $T/ls.json)
has_snap() {
	python3 - "$T/ls.json" "$1" <<'EOF'
import json, sys
names = [s['name'] for s in json.load(open(sys.argv[1]))]
sys.exit(0 if sys.argv[2] in names else 1)
EOF
}

digest_of() { # NAME (from $T/ls.json)
	json_get "$T/ls.json" "[s['digest'] for s in j if s['name'] == '$1'][0]"
}

# check_store WHAT: after a kill.  The store opens and lists; a and b read back
# exact; every snapshot committed before is still there with its digest and
# nothing unexpected is listed; scrub passes.
check_store() {
	local what=$1
	run "$DEDUP" ls --json "$S"
	assert_rc 0 "ls after $what"
	cp "$T/out" "$T/ls.json"
	assert_json "$T/ls.json" "ls --json after $what"
	python3 - "$T/ls.json" "$T/committed" <<'EOF' || fail "snapshot list after $what"
import json, re, sys
snaps = {s['name']: s for s in json.load(open(sys.argv[1]))}
want = dict(l.split() for l in open(sys.argv[2]) if l.strip())
bad = []
for n in ('a', 'b'):
    if n not in snaps:
        bad.append('%s missing' % n)
for n, d in want.items():
    if n not in snaps:
        bad.append('committed %s missing' % n)
    elif snaps[n]['digest'] != d:
        bad.append('%s digest changed' % n)
for n in snaps:
    if n not in ('a', 'b') and not re.fullmatch(r'(tmp|x)[0-9]+', n):
        bad.append('unexpected snapshot %r' % n)
if bad:
    print('; '.join(bad), file=sys.stderr)
    sys.exit(1)
EOF
	for n in a b; do
		run "$DEDUP" get "$S@$n"
		assert_rc 0 "get $n after $what"
		assert_same "$T/$n.img" "$T/out" "$n after $what"
	done
	run "$DEDUP" scrub "$S"
	assert_rc 0 "scrub after $what"
	repair_check "$what"
}

# repair_check WHAT: the catalog is an index over the packs and manifests
# (format/store.md §9): a copy of the store without its catalog, repaired,
# lists exactly what the store lists -- no deleted snapshot back, no
# committed one missing -- and reads a and b back exact.  The copy links
# the packs and manifests (repair only reads and renames them).
repair_check() {
	local what=$1 r="$T/r"
	rm -rf "$r"
	cp -al "$S" "$r"
	rm -rf "$r/db" "$r/db.repair"
	run "$DEDUP" repair "$r"
	assert_rc 0 "repair of a copy without its catalog after $what"
	run "$DEDUP" ls --json "$r"
	assert_rc 0 "ls of the repaired copy after $what"
	python3 - "$T/ls.json" "$T/out" <<'EOF' || fail "repair after $what does not give the committed set"
import json, sys
key = lambda s: (s['name'], s['size'], s['ctime'], s['digest'])
a = sorted(key(s) for s in json.load(open(sys.argv[1])))
b = sorted(key(s) for s in json.load(open(sys.argv[2])))
if a != b:
    print('store   ', a, '\nrepaired', b, file=sys.stderr)
    sys.exit(1)
EOF
	for n in a b; do
		run "$DEDUP" get "$r@$n"
		assert_rc 0 "get $n from the repaired copy after $what"
		assert_same "$T/$n.img" "$T/out" "$n from the repaired copy after $what"
	done
	rm -rf "$r"
}

# check_new NAME RC WHAT: a snapshot whose writer was killed (RC 137) may
# exist only if it committed; then, and when the writer finished (RC 0), it
# reads back exact.  Records it as committed.
check_new() {
	local name=$1 krc=$2 what=$3
	if has_snap "$name"; then
		image_of "$name" "$T/want.img"
		run "$DEDUP" get "$S@$name" "$T/got.img"
		assert_rc 0 "get $name after $what"
		assert_same "$T/want.img" "$T/got.img" "$name after $what"
		rm -f "$T/want.img" "$T/got.img"
		echo "$name $(digest_of "$name")" >>"$T/committed"
	elif [ "$krc" -eq 0 ]; then
		fail "$what finished (exit 0) but $name is not listed"
	fi
}

midput=0 doneput=0 midrm=0 midgc=0 nrm=0 ngc=0 midrep=0 nrep=0
for ((k = 1; k <= KILLS; k++)); do
	make_big "$k" "$T/big.img"
	# 0..PUT_MS-1 ms: from "killed while opening (and rolling back the previous
	# victim's leftovers)" to "killed after its commit".
	kill_after "$PUT_MS" "$DEDUP" put "$S@tmp$k" "$T/big.img"
	if [ "$KRC" -eq 137 ]; then midput=$((midput + 1)); else doneput=$((doneput + 1)); fi
	check_store "put tmp$k killed (exit $KRC)"
	check_new "tmp$k" "$KRC" "put tmp$k (exit $KRC)"
	rm -f "$T/big.img"

	# every third round: kill an rm of a committed snapshot, then a gc
	if [ $((k % 3)) -eq 0 ]; then
		victim=$(head -n1 "$T/committed" | cut -d' ' -f1)
		if [ -z "$victim" ]; then
			victim="x$k"
			make_extra "$k" "$T/extra.img"
			"$DEDUP" put "$S@$victim" "$T/extra.img"
			rm -f "$T/extra.img"
			run "$DEDUP" ls --json "$S"
			cp "$T/out" "$T/ls.json"
			echo "$victim $(digest_of "$victim")" >>"$T/committed"
		fi
		# the victim is no longer promised: drop it before the kill
		grep -v "^$victim " "$T/committed" >"$T/committed.new" || true
		mv "$T/committed.new" "$T/committed"
		kill_after 40 "$DEDUP" rm "$S@$victim"
		nrm=$((nrm + 1))
		[ "$KRC" -eq 137 ] && midrm=$((midrm + 1))
		check_store "rm $victim killed (exit $KRC)"
		if has_snap "$victim"; then
			[ "$KRC" -eq 0 ] && fail "rm $victim exited 0 but it is still listed"
			# still there: it must still be whole, and is promised again
			check_new "$victim" 0 "killed rm of $victim"
		fi
		# keep at most two committed extras (bounded size and run time)
		while [ "$(wc -l <"$T/committed")" -gt 2 ]; do
			old=$(head -n1 "$T/committed" | cut -d' ' -f1)
			run "$DEDUP" rm "$S@$old"
			assert_rc 0 "rm $old"
			sed -i 1d "$T/committed"
		done
		# a repair killed at any point leaves a catalog that works:
		# the old one until the swap, the new one after it
		kill_after 30 "$DEDUP" repair "$S"
		nrep=$((nrep + 1))
		[ "$KRC" -eq 137 ] && midrep=$((midrep + 1))
		check_store "repair killed (exit $KRC)"
		kill_after 150 "$DEDUP" gc "$S"
		ngc=$((ngc + 1))
		[ "$KRC" -eq 137 ] && midgc=$((midgc + 1))
		check_store "gc killed (exit $KRC)"
		# snapshots that survived the gc kill read back exact
		cp "$T/committed" "$T/survivors"
		: >"$T/committed"
		for n in $(cut -d' ' -f1 "$T/survivors"); do
			check_new "$n" 0 "gc killed (exit $KRC)"
		done
	fi
done
note "put kills: $midput of $KILLS landed mid-write ($doneput puts had finished)"
note "rm kills: $midrm of $nrm mid-run; gc kills: $midgc of $ngc mid-run; repair kills: $midrep of $nrep mid-run"

# ---- clean up and check that gc reclaimed what the killed runs wrote ------------
run "$DEDUP" ls --json "$S"
assert_rc 0 "final ls"
cp "$T/out" "$T/ls.json"
for n in $(json_get "$T/ls.json" "' '.join(s['name'] for s in j if s['name'] not in ('a', 'b'))"); do
	run "$DEDUP" rm "$S@$n"
	assert_rc 0 "final rm $n"
done
run "$DEDUP" gc "$S"
assert_rc 0 "final gc"
run "$DEDUP" ls --json "$S"
assert_eq '["a", "b"]' "$(json_get "$T/out" "sorted(s['name'] for s in j)")" "snapshots at the end"
for n in a b; do
	run "$DEDUP" get "$S@$n"
	assert_rc 0 "final get $n"
	assert_same "$T/$n.img" "$T/out" "final $n"
done
run "$DEDUP" scrub "$S"
assert_rc 0 "final scrub"

"$DEDUP" stat --json "$S" >"$T/st.json"
assert_eq 0 "$(json_get "$T/st.json" "j['unreferenced_blocks']")" "unreferenced_blocks after gc"
want_unique=$(python3 - "$T/a.img" "$T/b.img" $BS <<'EOF'
import hashlib, sys
bs = int(sys.argv[3])
seen = set()
for p in sys.argv[1:3]:
    with open(p, 'rb') as f:
        while True:
            blk = f.read(bs)
            if not blk:
                break
            if blk.count(0) == len(blk):
                continue
            seen.add(hashlib.sha256(blk).digest())
print(len(seen))
EOF
)
assert_eq "$want_unique" "$(json_get "$T/st.json" "j['unique_blocks']")" "unique_blocks after gc"

# a fresh store holding only a and b gives the reference size
F="$T/fresh"
"$DEDUP" init --block-size $BS "$F"
"$DEDUP" put "$F@a" "$T/a.img"
"$DEDUP" put "$F@b" "$T/b.img"
"$DEDUP" stat --json "$F" >"$T/fst.json"
fresh=$(json_get "$T/fst.json" "j['pack_bytes']")
limit=$((fresh * 3 / 2 + MIB))
pack_bytes=$(json_get "$T/st.json" "j['pack_bytes']")
on_disk=$(find "$S/packs" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
note "pack_bytes $pack_bytes (files: $on_disk), fresh store $fresh, limit $limit"
[ "$pack_bytes" -le "$limit" ] ||
	fail "gc left pack_bytes $pack_bytes > $limit (fresh store: $fresh)"
[ "$on_disk" -le "$limit" ] ||
	fail "gc left $on_disk bytes of files in packs/ > $limit (fresh store: $fresh)"

echo "PASS [$TEST_NAME]: $midput of $KILLS put kills mid-write"
