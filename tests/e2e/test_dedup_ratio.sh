#!/usr/bin/env bash
# test_dedup_ratio.sh -- `dedup stat` against data of known duplication.
#
# Two images are built from 40 distinct 4 KiB blocks, zero blocks and a
# shared short tail.  The expected counts, bytes, histogram and ratios are
# computed here from the block pattern alone (DESIGN.md: ratios on logical
# sizes, zero blocks excluded), then compared with `dedup stat --json`.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BS=4096
# Patterns: N = distinct random block N, z = zero block, tN:S = N-byte tail.
PAT_A="$(seq 0 39) $(seq 0 9) z z z 5 5 5 z $(seq 30 39) t1000:end"
PAT_B="$(seq 20 39) z z $(seq 0 4) 17 17 17 17 17 17 17 17 z t1000:end"
# shellcheck disable=SC2086
gen_blocks "$T/a.img" $BS $PAT_A
# shellcheck disable=SC2086
gen_blocks "$T/b.img" $BS $PAT_B

# expected.py PATTERN... : JSON of the stat fields the patterns imply.
cat >"$T/expected.py" <<'EOF'
import json, sys
bs = int(sys.argv[1])
refs = {}        # block identity -> (logical size, reference count)
logical = zero = 0
for pat in sys.argv[2:]:
    for tok in pat.split():
        if tok == 'z':
            zero += 1
            logical += bs
            continue
        size = int(tok[1:].split(':')[0]) if tok.startswith('t') else bs
        logical += size
        lsize, n = refs.get(tok, (size, 0))
        refs[tok] = (lsize, n + 1)
unique_blocks = len(refs)
unique_bytes = sum(l for l, _ in refs.values())
ref_blocks = sum(n for _, n in refs.values())
ref_bytes = sum(l * n for l, n in refs.values())
hist = {}
for lsize, n in refs.values():
    b = n.bit_length() - 1            # bucket i: refcounts [2^i, 2^(i+1))
    row = hist.setdefault(b, [0, 0, 0, 0])
    row[0] += 1
    row[1] += lsize
    row[2] += n
    row[3] += lsize * n
print(json.dumps({
    'snapshots': len(sys.argv) - 2,
    'logical_bytes': logical,
    'zero_blocks': zero,
    'referenced_blocks': ref_blocks,
    'referenced_bytes': ref_bytes,
    'unique_blocks': unique_blocks,
    'unique_bytes': unique_bytes,
    'dedup_ratio': ref_bytes / unique_bytes,
    'histogram': {str(b): r for b, r in sorted(hist.items())},
}))
EOF

# compare.py EXPECTED STAT [compress-none]
cat >"$T/compare.py" <<'EOF'
import json, sys
exp = json.load(open(sys.argv[1]))
st = json.load(open(sys.argv[2]))
none = len(sys.argv) > 3
errs = []
for k in ('snapshots', 'logical_bytes', 'zero_blocks', 'referenced_blocks',
          'referenced_bytes', 'unique_blocks', 'unique_bytes'):
    if st[k] != exp[k]:
        errs.append('%s: expected %r, got %r' % (k, exp[k], st[k]))
if st['dedup_ratio'] != exp['dedup_ratio']:
    errs.append('dedup_ratio: expected %r, got %r'
                % (exp['dedup_ratio'], st['dedup_ratio']))
if st['ddt_entries'] < exp['unique_blocks']:
    errs.append('ddt_entries %r < unique_blocks' % st['ddt_entries'])
for k in ('stored_bytes', 'pack_files', 'pack_bytes', 'ddt_bytes'):
    if not st[k] > 0:
        errs.append('%s should be positive, got %r' % (k, st[k]))
if st['pack_bytes'] < st['stored_bytes']:
    errs.append('pack_bytes < stored_bytes')
if abs(st['compress_ratio'] - st['unique_bytes'] / st['stored_bytes']) > 1e-12:
    errs.append('compress_ratio is not unique_bytes / stored_bytes')
if none and st['stored_bytes'] != st['unique_bytes']:
    errs.append('compress none: stored_bytes %r != unique_bytes %r'
                % (st['stored_bytes'], st['unique_bytes']))
got = {}
for row in st['histogram']:
    lo, hi = row['refcnt_min'], row['refcnt_max']
    b = lo.bit_length() - 1
    if lo != 1 << b or hi != (2 << b) - 1:
        errs.append('bad bucket bounds %r..%r' % (lo, hi))
    if row['psize'] <= 0 or row['ref_psize'] < row['psize']:
        errs.append('bucket %d: bad psize' % b)
    got[str(b)] = [row['blocks'], row['lsize'], row['ref_blocks'], row['ref_lsize']]
if got != exp['histogram']:
    errs.append('histogram: expected %r, got %r' % (exp['histogram'], got))
for e in errs:
    print(e, file=sys.stderr)
sys.exit(1 if errs else 0)
EOF

check_store() { # STORE [none]
	local store=$1 none=${2:-}
	"$DEDUP" stat --json "$store" >"$T/stat.json" || fail "stat --json $store"
	assert_json "$T/stat.json" "stat --json"
	python3 "$T/compare.py" "$T/expected.json" "$T/stat.json" ${none:+"$none"} ||
		fail "stat --json of $store does not match the block pattern"
	# the text form: the dedup line, with the ratio to 2 decimals
	"$DEDUP" stat "$store" >"$T/stat.txt" || fail "stat $store"
	local want
	want=$(python3 -c 'import json,sys; print("%.2f" % json.load(open(sys.argv[1]))["dedup_ratio"])' "$T/expected.json")
	assert_grep "^dedup = $want, compress = [0-9]+\.[0-9]{2}, dedup \* compress = [0-9]+\.[0-9]{2}$" \
		"$T/stat.txt" "stat text dedup line"
	assert_grep '^bucket +allocated +referenced' "$T/stat.txt" "stat text histogram header"
	assert_grep '^ +Total ' "$T/stat.txt" "stat text histogram total"
}

for variant in default verify-none; do
	note "store: $variant"
	S="$T/s-$variant"
	none=
	if [ "$variant" = default ]; then
		"$DEDUP" init --block-size $BS "$S"
	else
		"$DEDUP" init --block-size $BS --verify --compress none "$S"
		none=none
	fi
	"$DEDUP" put "$S@a" "$T/a.img"
	"$DEDUP" put "$S@b" "$T/b.img"
	python3 "$T/expected.py" $BS "$PAT_A" "$PAT_B" >"$T/expected.json"
	check_store "$S" ${none:+"$none"}

	# A third image equal to a: every reference of a counts twice.
	"$DEDUP" put "$S@c" "$T/a.img"
	python3 "$T/expected.py" $BS "$PAT_A" "$PAT_B" "$PAT_A" >"$T/expected.json"
	check_store "$S" ${none:+"$none"}

	# Removing it brings the figures back (before any gc).
	"$DEDUP" rm "$S@c"
	python3 "$T/expected.py" $BS "$PAT_A" "$PAT_B" >"$T/expected.json"
	check_store "$S" ${none:+"$none"}

	for n in a b; do
		"$DEDUP" get "$S@$n" "$T/got" || fail "get $n"
		assert_same "$T/$n.img" "$T/got" "round trip of $n"
	done
done

# An empty store: no blocks, no histogram rows.
"$DEDUP" init "$T/empty"
"$DEDUP" stat --json "$T/empty" >"$T/stat.json"
assert_json "$T/stat.json" "stat --json of an empty store"
assert_eq true "$(json_get "$T/stat.json" "j['unique_blocks'] == 0 and j['referenced_blocks'] == 0 and j['histogram'] == []")" \
	"empty store stat"
"$DEDUP" stat "$T/empty" >/dev/null || fail "stat text of an empty store"

# The DDT's runs and its key filter.  The default store above: its puts
# deferred their DDT changes and appended sorted runs, which gc's
# compaction folds; its key filter is in force.  With the filter's file
# gone, stat says none is, and the next writer builds it again.
S="$T/s-default"
"$DEDUP" stat --json "$S" >"$T/stat.json"
assert_eq true "$(json_get "$T/stat.json" "j['ddt_runs'] >= 1 and j['filter_segments'] >= 1 and j['filter_bytes'] > 256 and j['filter_bits_per_entry'] >= 24")" \
	"stat: runs to fold and a key filter in force"
"$DEDUP" gc "$S" >/dev/null || fail "gc"
"$DEDUP" stat --json "$S" >"$T/stat.json"
assert_eq 0 "$(json_get "$T/stat.json" "j['ddt_runs']")" "stat: runs folded by gc"
rm "$S/db/keys.flt"
"$DEDUP" stat --json "$S" >"$T/stat.json"
assert_eq 0 "$(json_get "$T/stat.json" "j['filter_segments']")" "stat: no key filter in force"
"$DEDUP" stat "$S" >"$T/stat.txt" || fail "stat text"
assert_grep '^key filter: none in force' "$T/stat.txt" "stat text without a key filter"
"$DEDUP" put "$S@d" "$T/a.img"
"$DEDUP" stat "$S" >"$T/stat.txt" || fail "stat text"
assert_grep '^key filter: 1 segment, .* bits/entry$' "$T/stat.txt" "stat text: the filter rebuilt by the next writer"
assert_grep 'sorted runs? to fold$' "$T/stat.txt" "stat text: the DDT's runs"

echo "PASS [$TEST_NAME]"
