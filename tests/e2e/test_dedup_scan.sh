#!/usr/bin/env bash
# test_dedup_scan.sh -- `dedup scan`: its figures equal `dedup stat` of a new
# store that holds the same files (one snapshot per file) at each block size;
# the histogram equals one computed independently in python (hashlib); the
# spill path (tiny --memory) gives the same exact figures; --sample stays
# within its stated bound; walks, stdin, sparse files, bad input.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

D="$T/data"
mkdir -p "$D"
# Blocks are 4 KiB pieces: at 16K and 128K the same pieces make other
# (fewer) duplicates, which is the point of several sizes in one pass.
gen_blocks "$D/a" 4096 1 2 3 1 2 3 z z 4 5 1 t100:a
gen_blocks "$D/b" 4096 1 2 3 1 2 3 z z 4 5 1 t100:a          # a copy of a
gen_blocks "$D/c" 4096 $(seq 1 40) $(seq 1 40) z z z z z z z z $(seq 30 70) z1000
gen_blocks "$D/d" 4096 7 z 7 z 7 z 7 z 9 t5:x
gen_random "$D/e" 300000 e                                   # unaligned, unique
FILES=("$D/a" "$D/b" "$D/c" "$D/d" "$D/e")
SIZES=(4096 16384 131072)

# expected FILE...: per block size, the figures of one snapshot per file,
# from hashlib alone (zero blocks apart, short tails their own blocks).
expected() {
	python3 - "$@" <<'EOF'
import hashlib, json, sys
out = {}
for bs in (4096, 16384, 131072):
    refs, lsize = {}, {}
    zero = 0
    for path in sys.argv[1:]:
        data = open(path, 'rb').read()
        for off in range(0, len(data), bs):
            blk = data[off:off + bs]
            if blk.count(0) == len(blk):
                zero += 1
                continue
            h = hashlib.sha256(blk).digest()
            refs[h] = refs.get(h, 0) + 1
            lsize[h] = len(blk)
    hist = {}
    for h, r in refs.items():
        b = r.bit_length() - 1
        row = hist.setdefault(b, [0, 0, 0, 0])
        row[0] += 1; row[1] += lsize[h]; row[2] += r; row[3] += r * lsize[h]
    ref_bytes = sum(r * lsize[h] for h, r in refs.items())
    uniq_bytes = sum(lsize.values())
    out[bs] = {
        'zero_blocks': zero, 'unique_blocks': len(refs),
        'referenced_blocks': sum(refs.values()), 'referenced_bytes': ref_bytes,
        'unique_bytes': uniq_bytes,
        'dedup_ratio': ref_bytes / uniq_bytes if uniq_bytes else 1.0,
        'hist': [[1 << b] + hist[b] for b in sorted(hist)],
    }
print(json.dumps(out))
EOF
}

# check_scan_json SCAN.JSON EXPECTED.JSON: every block size's figures and
# histogram (allocated and referenced blocks and LSIZE) as computed.
check_scan_json() {
	python3 - "$1" "$2" <<'EOF' || fail "scan figures differ from hashlib's"
import json, sys
scan = json.load(open(sys.argv[1]))
exp = json.load(open(sys.argv[2]))
assert scan['mode'] == 'exact', scan['mode']
got = {r['block_size']: r for r in scan['results']}
assert sorted(got) == [4096, 16384, 131072], sorted(got)
for bs, e in exp.items():
    r = got[int(bs)]
    for k in ('zero_blocks', 'unique_blocks', 'referenced_blocks',
              'referenced_bytes', 'unique_bytes'):
        assert r[k] == e[k], (bs, k, r[k], e[k])
    assert abs(r['dedup_ratio'] - e['dedup_ratio']) < 1e-12, (bs, r['dedup_ratio'], e)
    h = [[x['refcnt_min'], x['blocks'], x['lsize'], x['ref_blocks'], x['ref_lsize']]
         for x in r['histogram']]
    assert h == e['hist'], (bs, h, e['hist'])
    assert r['ddt_bytes'] == 79 * e['unique_blocks']
    assert r['dedup_error'] == 0 and r['confidence'] == 1
EOF
}

# ---- exact: equal to hashlib and to dedup stat ---------------------------------
note "exact scan vs hashlib"
expected "${FILES[@]}" >"$T/expected.json"
run "$DEDUP" scan --json --block-size 4K,16K,128K "${FILES[@]}"
assert_rc 0 "scan --json"
assert_json "$T/out" "scan --json"
assert_empty "$T/err" "scan --json (stderr)"
cp "$T/out" "$T/scan.json"
check_scan_json "$T/scan.json" "$T/expected.json"

note "exact scan vs dedup put + dedup stat, per block size"
for bs in "${SIZES[@]}"; do
	S="$T/store-$bs"
	"$DEDUP" init --block-size "$bs" "$S"
	i=0
	for f in "${FILES[@]}"; do
		"$DEDUP" put "$S@f$i" "$f"
		i=$((i + 1))
	done
	"$DEDUP" stat --json "$S" >"$T/stat-$bs.json"
	python3 - "$T/scan.json" "$T/stat-$bs.json" "$bs" <<'EOF' || fail "scan != stat at block size $bs"
import json, sys
scan = json.load(open(sys.argv[1]))
st = json.load(open(sys.argv[2]))
r = [x for x in scan['results'] if x['block_size'] == int(sys.argv[3])][0]
for k in ('dedup_ratio', 'compress_ratio', 'unique_blocks', 'referenced_blocks',
          'zero_blocks', 'unique_bytes', 'referenced_bytes', 'stored_bytes'):
    assert r[k] == st[k], (k, r[k], st[k])
assert r['histogram'] == st['histogram'], (r['histogram'], st['histogram'])
EOF
done

note "text report"
run "$DEDUP" scan --block-size 4K,16K,128K "${FILES[@]}"
assert_rc 0 "scan (text)"
python3 - "$T/out" "$T/scan.json" <<'EOF' || fail "text report"
import json, re, sys
text = open(sys.argv[1]).read()
scan = json.load(open(sys.argv[2]))
lines = re.findall(r'^dedup = ([\d.]+), compress = ([\d.]+), dedup \* compress = ([\d.]+)$',
                   text, re.M)
assert len(lines) == 3, lines
for (d, c, dc), r in zip(lines, scan['results']):
    assert d == '%.2f' % r['dedup_ratio'], (d, r['dedup_ratio'])
    assert c == '%.2f' % r['compress_ratio'], (c, r['compress_ratio'])
    assert dc == '%.2f' % (r['dedup_ratio'] * r['compress_ratio'])
assert 'block size 4 KiB:' in text and 'block size 128 KiB:' in text
assert re.search(r'^unique blocks: \d+; DDT on disk', text, re.M)
rows = [l for l in text.splitlines() if re.match(r'^\s+\d+[KMG]?\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+#+$', l)]
assert rows, 'no histogram rows with bars'
# the widest bar is the full width, and columns line up
assert max(len(l.split()[-1]) for l in rows) == 30
assert len({l.index('#') for l in rows if l.split()[-1] == '#' * 30}) >= 1
EOF
assert_grep '^scan: 5 images, .* mode exact; compress zstd:1$' "$T/out" "text header"

# ---- spill: a tiny memory gives the same figures -------------------------------
note "spill with --memory 256K"
python3 - "$D/many" <<'EOF'
import random, sys
r = random.Random('many')
blocks = [r.randbytes(4096) for _ in range(3000)]
with open(sys.argv[1], 'wb') as f:
    for b in blocks: f.write(b)
    for b in blocks[:1500]: f.write(b)      # refcount 2, met again after spills
EOF
run "$DEDUP" scan --json --block-size 4K,16K,128K "$D/many" "${FILES[@]}"
assert_rc 0 "scan big"
cp "$T/out" "$T/big.json"
run "$DEDUP" scan --json --memory 256K --tmpdir "$T" --block-size 4K,16K,128K "$D/many" "${FILES[@]}"
assert_rc 0 "scan --memory 256K"
cp "$T/out" "$T/spill.json"
[ -z "$(ls "$T" | grep dd-scan)" ] || fail "spill files left in --tmpdir"
expected "$D/many" "${FILES[@]}" >"$T/expected-big.json"
check_scan_json "$T/spill.json" "$T/expected-big.json"
python3 - "$T/big.json" "$T/spill.json" <<'EOF' || fail "spilled scan differs"
import json, sys
a = json.load(open(sys.argv[1]))['results']
b = json.load(open(sys.argv[2]))['results']
assert b[0]['spill_runs'] > 2, b[0]['spill_runs']
assert a[0]['spill_runs'] == 0
for x, y in zip(a, b):
    for k in x:
        if k not in ('spill_runs', 'spill_bytes'):
            assert x[k] == y[k], (k, x[k], y[k])
EOF

# ---- sample: within the stated bound -------------------------------------------
note "sample mode"
run "$DEDUP" scan --json --sample --memory 256K --block-size 4K "$D/many" "${FILES[@]}"
assert_rc 0 "scan --sample"
python3 - "$T/out" "$T/big.json" <<'EOF' || fail "sample outside its bound"
import json, sys
s = json.load(open(sys.argv[1]))
e = json.load(open(sys.argv[2]))['results'][0]
assert s['mode'] == 'sample'
r = s['results'][0]
assert r['sample_rate'] < 1 and r['sampled_blocks'] > 0, r
assert r['confidence'] == 0.99
assert r['referenced_blocks'] == e['referenced_blocks']     # exact in both
assert r['zero_blocks'] == e['zero_blocks']
err = abs(r['dedup_ratio'] - e['dedup_ratio']) / e['dedup_ratio']
assert err <= r['dedup_error'], (err, r['dedup_error'])
cerr = abs(r['compress_ratio'] - e['compress_ratio']) / e['compress_ratio']
assert cerr <= r['compress_error'], (cerr, r['compress_error'])
EOF
run "$DEDUP" scan --sample-rate 4 --block-size 4K "$D/many"
assert_rc 0 "scan --sample-rate 4"
assert_grep '^sample: 1 in 4 block contents, [0-9]+ sampled; at 99% confidence dedup within [0-9.]+%' \
	"$T/out" "sample line"
assert_grep 'mode sample' "$T/out" "sample mode in header"

# ---- compress none -------------------------------------------------------------
run "$DEDUP" scan --json --compress none "$D/c"
assert_rc 0 "scan --compress none"
assert_eq 1 "$(json_get "$T/out" "j['results'][0]['compress_ratio']")" "compress none ratio"
assert_eq none "$(json_get "$T/out" "j['compress']")" "compress none named"
run "$DEDUP" scan --json --compress zstd:19 "$D/c"
assert_rc 0 "scan --compress zstd:19"
assert_eq zstd:19 "$(json_get "$T/out" "j['compress']")" "zstd level named"

# ---- stdin, directories, special inputs -----------------------------------------
note "stdin"
cat "$D/a" | "$DEDUP" scan --json - >"$T/stdin.json" 2>"$T/err" || fail "scan -"
"$DEDUP" scan --json "$D/a" >"$T/file.json"
python3 - "$T/stdin.json" "$T/file.json" <<'EOF' || fail "stdin differs from the file"
import json, sys
a, b = (json.load(open(p))['results'] for p in sys.argv[1:])
assert a == b
EOF

note "directories"
mkdir -p "$T/tree/sub/deeper" "$T/tree/empty"
cp "$D/a" "$T/tree/sub/"
cp "$D/b" "$T/tree/sub/deeper/"
cp "$D/d" "$T/tree/"
ln -s "$D/e" "$T/tree/link-to-e"         # never followed
ln -s .. "$T/tree/sub/loop"               # no loop
mkfifo "$T/tree/fifo"                     # never opened
run "$DEDUP" scan --json "$T/tree"
assert_rc 0 "scan a tree"
expected "$D/d" "$D/a" "$D/b" >"$T/expected-tree.json"
python3 - "$T/out" "$T/expected-tree.json" <<'EOF' || fail "tree figures"
import json, sys
s = json.load(open(sys.argv[1]))
e = json.load(open(sys.argv[2]))['131072']
assert s['images'] == 3 and s['special_files'] == 1 and s['skipped_count'] == 0, s
r = s['results'][0]
assert (r['unique_blocks'], r['referenced_blocks'], r['zero_blocks']) == \
       (e['unique_blocks'], e['referenced_blocks'], e['zero_blocks']), (r, e)
EOF

note "unreadable, vanished: warned, listed, exit 1"
cp "$D/c" "$T/tree/locked"
chmod 000 "$T/tree/locked"
mkdir "$T/tree/closed" && cp "$D/c" "$T/tree/closed/x" && chmod 000 "$T/tree/closed"
run "$DEDUP" scan --json "$T/tree" "$T/vanished"
chmod 755 "$T/tree/closed"
chmod 644 "$T/tree/locked"
if [ "$(id -u)" -ne 0 ]; then
	assert_rc 1 "scan with unreadable entries"
	assert_json "$T/out" "scan --json with skips"
	assert_eq 3 "$(json_get "$T/out" "j['skipped_count']")" "skipped count"
	assert_eq '["DD_EPERM", "DD_EPERM", "DD_ENOENT"]' \
		"$(json_get "$T/out" "[x['error'] for x in j['skipped']]")" "skipped list"
	assert_grep 'locked: DD_EPERM' "$T/err" "warning for the locked file"
	assert_grep 'closed: DD_EPERM' "$T/err" "warning for the closed directory"
else
	assert_rc 1 "scan with a vanished path"
	assert_eq 1 "$(json_get "$T/out" "j['skipped_count']")" "skipped count (root)"
fi
assert_grep 'vanished: stat: No such file or directory \(skipped\)' "$T/err" "vanished warning"
assert_grep 'skipped or partly read' "$T/err" "final line"
run "$DEDUP" scan "$T/vanished"
assert_rc 1 "scan of a vanished path (text)"
assert_grep '^skipped or partly read: 1$' "$T/out" "text lists the skipped"
assert_grep '^  .*/vanished: stat: No such file' "$T/out" "text names the skipped"

note "empty input"
: >"$T/empty"
run "$DEDUP" scan --json "$T/empty"
assert_rc 0 "scan an empty file"
assert_eq "1 0 0 1" "$(json_get "$T/out" "' '.join(str(j[k]) for k in ('images',)) + ' ' + ' '.join(str(j['results'][0][k]) for k in ('blocks', 'unique_blocks', 'dedup_ratio'))")" "empty file"
run "$DEDUP" scan "$T/tree/empty"
assert_rc 0 "scan an empty directory"
assert_grep 'nothing to scan' "$T/err" "empty directory warning"
run "$DEDUP" scan /dev/null
assert_rc 0 "scan /dev/null"

note "sparse file"
python3 - "$T/sparse" <<'EOF'
import os, sys
with open(sys.argv[1], 'wb') as f:
    f.truncate(256 << 20)
    f.seek(100 << 20); f.write(os.urandom(4096))
EOF
run "$DEDUP" scan --json --block-size 4K,1M "$T/sparse"
assert_rc 0 "scan sparse"
assert_eq "65536 65535 1 256 255" \
	"$(json_get "$T/out" "' '.join(str(r[k]) for r in j['results'] for k in (('blocks', 'zero_blocks', 'unique_blocks') if r['block_size'] == 4096 else ('blocks', 'zero_blocks')))")" \
	"sparse zero blocks"

note "sample too small: the headline gives a bound, not a figure"
for mem in 64K 256K; do
	run "$DEDUP" scan --sample --memory $mem --block-size 4K,128K "$D/many" "${FILES[@]}"
	assert_rc 0 "scan --sample --memory $mem"
	cp "$T/out" "$T/sample-$mem.txt"
	run "$DEDUP" scan --json --sample --memory $mem --block-size 4K,128K "$D/many" "${FILES[@]}"
	python3 - "$T/sample-$mem.txt" "$T/out" <<'EOF' || fail "sample headline at --memory $mem"
import json, re, sys
text = open(sys.argv[1]).read()
res = json.load(open(sys.argv[2]))['results']
heads = re.findall(r'^dedup = (.*), compress = (.*), dedup \* compress = (.*)$', text, re.M)
assert len(heads) == len(res) == 2, heads
for (d, c, dc), r in zip(heads, res):
    e = r['dedup_error']
    if e is None:                       # no bound at all
        assert d == 'unbounded' and dc == 'unbounded', d
    elif e > 0.5:                       # a bound too wide for a figure
        assert d.startswith('between '), d
    else:
        assert d == '%.2f (+/- %.1f%%)' % (r['dedup_ratio'], e * 100), (d, r)
    # the table's totals are the figures around it
    h = r['histogram']
    assert sum(x['ref_blocks'] for x in h) == r['referenced_blocks'], r
    assert sum(x['ref_lsize'] for x in h) == r['referenced_bytes'], r
    assert sum(x['blocks'] for x in h) == r['unique_blocks'], r
    assert sum(x['lsize'] for x in h) == r['unique_bytes'], r
    assert sum(x['blocks'] for x in h) <= r['referenced_blocks'], r
EOF
done
# a sample of a few blocks never prints a bare figure
grep -E '^dedup = (unbounded|between)' "$T/sample-64K.txt" >/dev/null ||
	fail "--memory 64K: a confident headline from a tiny sample: $(grep '^dedup' "$T/sample-64K.txt")"

note "progress with -v"
run "$DEDUP" scan -v "$D/many"
assert_rc 0 "scan -v"
assert_grep 'scan: .*MiB/s' "$T/err" "progress line on stderr"

# ---- usage errors --------------------------------------------------------------
note "usage errors"
usage_error() { # MESSAGE ARGS...
	local msg=$1
	shift
	run "$DEDUP" scan "$@"
	assert_rc 2 "$msg"
	assert_one_line "$msg"
	assert_empty "$T/out" "$msg (stdout)"
}
usage_error "no path"
usage_error "block size not a power of two" --block-size 5000 "$D/a"
usage_error "block size too small" --block-size 2K "$D/a"
usage_error "block size too large" --block-size 2M "$D/a"
usage_error "block size twice" --block-size 4K,4096 "$D/a"
usage_error "block size junk" --block-size 4K,x "$D/a"
usage_error "block size empty item" --block-size 4K,,8K "$D/a"
usage_error "too many block sizes" --block-size 4K,8K,16K,32K,64K,128K,256K,512K,1M,4K "$D/a"
usage_error "bad compressor" --compress lz4 "$D/a"
usage_error "bad zstd level" --compress zstd:20 "$D/a"
usage_error "bad memory" --memory 12x "$D/a"
usage_error "memory too small" --memory 1K "$D/a"
usage_error "sample rate not a power of two" --sample-rate 3 "$D/a"
usage_error "unknown option" --frob "$D/a"
run "$DEDUP" scan --help
assert_rc 0 "scan --help"
assert_grep 'dedup scan' "$T/out" "scan in --help"
run "$DEDUP" --help
assert_grep 'dedup scan' "$T/out" "scan in dedup --help"
exit 0
