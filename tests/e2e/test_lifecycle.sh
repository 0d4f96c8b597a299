#!/usr/bin/env bash
# test_lifecycle.sh -- a snapshot's life after put: the space each holds
# alone (`dedup ls`, `put -v`), `dedup diff` and `dedup prune`.
#
#  - unique_bytes of a snapshot is within 10% (+1 MiB) of what rm plus gc
#    then frees (here exactly: gc rewrites the pack);
#  - diff lists exactly the changed blocks of a copy with 5% of its blocks
#    overwritten (positions chosen here, expected ranges coalesced here),
#    and the tail of a longer copy, and a block that became a hole;
#  - prune --keep-last 2 leaves the two newest, --dry-run nothing, --gc
#    gives the space back; the usage errors.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BS=131072
S=$T/s
run "$DEDUP" init "$S"
assert_rc 0 "init"

# ---- space per snapshot ------------------------------------------------------
note "unique_bytes against rm + gc"
gen_random "$T/a.img" $((8 << 20)) a
# b: a's first 2 MiB, then 14 MiB of its own, a third of it compressible
python3 - "$T/a.img" "$T/b.img" <<'EOF'
import random, sys
a = open(sys.argv[1], 'rb').read()
r = random.Random('b')
own = r.randbytes(10 << 20) + b''.join(
    b'line %08d of a compressible text\n' % i for i in range(4 << 20 >> 5))
open(sys.argv[2], 'wb').write(a[:2 << 20] + own[:14 << 20])
EOF
run "$DEDUP" put -v "$S@a" "$T/a.img"
assert_rc 0 "put a"
assert_grep "put a: .* 64 new: [0-9]+ bytes stored" "$T/err" "put -v reports new bytes"
run "$DEDUP" put -v "$S@b" "$T/b.img"
assert_rc 0 "put b"
# b's first 16 blocks are a's
new_b=$(sed -n 's/.* 112 new: \([0-9]*\) bytes stored.*/\1/p' "$T/err")
[ -n "$new_b" ] || fail "put -v of b: no '112 new' in: $(cat "$T/err")"

run "$DEDUP" ls --json "$S"
assert_rc 0 "ls --json"
assert_json "$T/out" "ls --json"
cp "$T/out" "$T/ls.json"
ub=$(json_get "$T/ls.json" '[x for x in j if x["name"]=="b"][0]["unique_bytes"]')
ua=$(json_get "$T/ls.json" '[x for x in j if x["name"]=="a"][0]["unique_bytes"]')
nb=$(json_get "$T/ls.json" '[x for x in j if x["name"]=="b"][0]["unique_blocks"]')
assert_eq 112 "$nb" "unique_blocks of b"
# b owns exactly what its put stored
assert_eq "$new_b" "$ub" "unique_bytes of b = new bytes of its put"
# a shares 16 of its 64 blocks with b
na=$(json_get "$T/ls.json" '[x for x in j if x["name"]=="a"][0]["unique_blocks"]')
assert_eq 48 "$na" "unique_blocks of a"
run "$DEDUP" ls "$S"
assert_grep "^NAME +SIZE +BLOCKS +UNIQUE " "$T/out" "ls text header"
assert_grep "^b +16777216 +128 +$ub " "$T/out" "ls text row of b"
run "$DEDUP" ls --no-unique "$S"
assert_grep "^b +16777216 +128 +- " "$T/out" "ls --no-unique"
run "$DEDUP" ls --no-unique --json "$S"
assert_eq null "$(json_get "$T/out" 'j[0]["unique_bytes"]')" "ls --no-unique --json"

run "$DEDUP" rm "$S@b"
assert_rc 0 "rm b"
run "$DEDUP" gc "$S"
assert_rc 0 "gc"
freed=$(sed -n 's/^gc: reclaimed .* (\([0-9]*\) bytes).*/\1/p' "$T/out")
[ -n "$freed" ] || fail "gc output: $(cat "$T/out")"
note "b: unique_bytes $ub, rm + gc freed $freed"
python3 - "$ub" "$freed" <<'EOF' || fail "unique_bytes $ub not within 10% (+1 MiB) of the $freed bytes freed"
import sys
u, f = int(sys.argv[1]), int(sys.argv[2])
sys.exit(0 if f > 0 and abs(u - f) <= 0.1 * f + (1 << 20) else 1)
EOF
# a now owns all of its blocks
run "$DEDUP" ls --json "$S"
ua2=$(json_get "$T/out" 'j[0]["unique_blocks"]')
assert_eq 64 "$ua2" "a owns all after rm b"
[ "$(json_get "$T/out" 'j[0]["unique_bytes"]')" -gt "$ua" ] ||
	fail "a's unique_bytes did not grow after rm b"

# ---- diff ----------------------------------------------------------------------
note "diff of a copy with 5% of its blocks overwritten"
gen_random "$T/x.img" $((32 << 20)) x
# y: 13 of x's 256 blocks overwritten (5%), two of them adjacent; the
# expected ranges, coalesced, in $T/want
python3 - "$T/x.img" "$T/y.img" "$T/want" $BS <<'EOF'
import random, sys
x = bytearray(open(sys.argv[1], 'rb').read())
bs = int(sys.argv[4])
r = random.Random('y')
blocks = sorted(r.sample(range(0, 250), 11) + [251, 252])
for b in blocks:
    x[b * bs:(b + 1) * bs] = r.randbytes(bs)
open(sys.argv[2], 'wb').write(x)
ranges = []
for b in blocks:
    if ranges and ranges[-1][0] + ranges[-1][1] == b * bs:
        ranges[-1][1] += bs
    else:
        ranges.append([b * bs, bs])
with open(sys.argv[3], 'w') as f:
    for o, l in ranges:
        f.write('%d %d\n' % (o, l))
EOF
run "$DEDUP" put "$S@x" "$T/x.img"
assert_rc 0 "put x"
run "$DEDUP" put "$S@y" "$T/y.img"
assert_rc 0 "put y"
run "$DEDUP" diff "$S@x" y
assert_rc 0 "diff x y"
assert_same "$T/want" "$T/out" "diff x y lists exactly the overwritten blocks"
assert_empty "$T/err" "diff stderr"
# STORE@B names the same snapshot; --json carries the same ranges
run "$DEDUP" diff --json -v "$S@x" "$S@y"
assert_rc 0 "diff --json"
assert_json "$T/out" "diff --json"
json_get "$T/out" '"\n".join("%d %d" % (r["offset"], r["length"]) for r in j["ranges"])' >"$T/got"
assert_same "$T/want" "$T/got" "diff --json ranges"
assert_eq $((13 * BS)) "$(json_get "$T/out" 'j["changed_bytes"]')" "changed_bytes"
assert_grep "diff x y: 12 ranges, 1703936 bytes" "$T/err" "diff -v summary"
# a snapshot against itself: nothing
run "$DEDUP" diff "$S@x" x
assert_rc 0 "diff x x"
assert_empty "$T/out" "diff x x"

note "diff: a longer copy, and a block that became a hole"
python3 - "$T/x.img" "$T/z.img" $BS <<'EOF'
import sys
x = bytearray(open(sys.argv[1], 'rb').read())
bs = int(sys.argv[3])
x[5 * bs:6 * bs] = bytes(bs)           # block 5: a hole now
open(sys.argv[2], 'wb').write(x + b'tail' * 25)
EOF
run "$DEDUP" put "$S@z" "$T/z.img"
assert_rc 0 "put z"
run "$DEDUP" diff "$S@x" z
assert_rc 0 "diff x z"
printf '%d %d\n%d %d\n' $((5 * BS)) $BS $((32 << 20)) 100 >"$T/want"
assert_same "$T/want" "$T/out" "diff x z: the hole and the tail"
run "$DEDUP" diff "$S@z" x
assert_same "$T/want" "$T/out" "diff z x: the same ranges"

note "diff: errors"
run "$DEDUP" diff "$S@x" nope
assert_rc 1 "diff of a missing snapshot"
assert_one_line "diff of a missing snapshot"
assert_grep "DD_ENOENT" "$T/err" "diff names DD_ENOENT"
run "$DEDUP" diff "$S@x"
assert_rc 2 "diff with one snapshot"
run "$DEDUP" diff "$S@x" "$T/other@y"
assert_rc 2 "diff across stores"
assert_one_line "diff across stores"
run "$DEDUP" diff "$S@x" "a/b"
assert_rc 2 "diff with a bad name"

# ---- prune -------------------------------------------------------------------
note "prune --keep-last 2"
P=$T/p
run "$DEDUP" init --block-size 4K "$P"
for i in 1 2 3 4 5; do
	gen_random "$T/p$i.img" $((256 << 10)) "p$i"
	run "$DEDUP" put "$P@snap-$i" "$T/p$i.img"
	assert_rc 0 "put snap-$i"
done
run "$DEDUP" prune --keep-last 2 --dry-run "$P"
assert_rc 0 "prune --dry-run"
assert_grep "^keep \(last #1\) .* snap-5$" "$T/out" "dry run keeps snap-5"
assert_grep "^would prune .* snap-1$" "$T/out" "dry run would prune snap-1"
assert_grep "prune: 2 kept, 3 would be pruned" "$T/err" "dry run summary"
run "$DEDUP" ls --json "$P"
assert_eq 5 "$(json_get "$T/out" 'len(j)')" "a dry run deletes nothing"

run "$DEDUP" prune --keep-last 2 --json "$P"
assert_rc 0 "prune --keep-last 2"
assert_json "$T/out" "prune --json"
assert_eq '["snap-5", "snap-4"]' \
	"$(json_get "$T/out" '[s["name"] for s in j["snapshots"] if s["keep"]]')" \
	"prune keeps the two newest"
assert_eq '["last", "last"]' \
	"$(json_get "$T/out" '[s["rule"] for s in j["snapshots"] if s["keep"]]')" \
	"kept by keep-last"
run "$DEDUP" ls --json "$P"
assert_eq '["snap-4", "snap-5"]' "$(json_get "$T/out" '[s["name"] for s in j]')" \
	"ls after prune: the two newest"
for i in 4 5; do
	run "$DEDUP" get "$P@snap-$i" "$T/got"
	assert_same "$T/p$i.img" "$T/got" "snap-$i reads back after prune"
done

note "prune --gc, --prefix"
gen_random "$T/q.img" $((256 << 10)) q
run "$DEDUP" put "$P@other-1" "$T/q.img"
run "$DEDUP" prune --keep-daily 1 --prefix snap- --gc "$P"
assert_rc 0 "prune --gc"
assert_grep "^gc: reclaimed" "$T/err" "prune --gc runs gc"
run "$DEDUP" ls --json "$P"
assert_eq '["other-1", "snap-5"]' "$(json_get "$T/out" '[s["name"] for s in j]')" \
	"--prefix leaves other-1 alone"
run "$DEDUP" scrub "$P"
assert_rc 0 "scrub after prune --gc"

note "prune: usage errors"
run "$DEDUP" prune "$P"
assert_rc 2 "prune without a rule"
assert_one_line "prune without a rule"
run "$DEDUP" prune --keep-daily x "$P"
assert_rc 2 "prune with a bad count"
run "$DEDUP" prune --keep-daily -2 "$P"
assert_rc 2 "prune with a count below -1"
run "$DEDUP" prune --keep-last 1 --gc --dry-run "$P"
assert_rc 2 "prune --gc --dry-run"
run "$DEDUP" prune --keep-monthly all --dry-run "$P"
assert_rc 0 "prune --keep-monthly all"

echo "PASS [$TEST_NAME]"
