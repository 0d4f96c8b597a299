#!/usr/bin/env bash
# test_dedup_lmdb_damage.sh -- a damaged LMDB file (STORE/db/data.mdb):
# random byte flips, truncations and zeroed ranges with a fixed seed, plus
# chosen spots found by walking LMDB's own pages (both meta pages, a leaf
# and a branch of the DDT and of the block maps, the snapshot, meta and
# packs tables, truncations).
#
# After each damage, on a copy of a store holding two snapshots made by
# `dedup put`: `dedup ls`, `dedup stat`, `dedup get` of each snapshot and
# `dedup scrub` must each either succeed -- get with byte-exact output --
# or exit non-zero with one clear line on stderr.  Never a crash (a
# signal, a sanitizer report), a hang, or wrong bytes with exit 0
# (invariants 2 and 3 of DESIGN.md); and scrub must not pass a store with
# a listed snapshot that does not read back exact.
#
# LMDB keeps no checksums: damage it cannot see may change what ls and
# stat print (a flipped time, a rolled-back meta page); the test counts
# those, they are not failures.  Damage to LMDB's own page structure used
# to crash LMDB inside its own code; libdedup now checks that structure
# when it opens a small store (catalog/check.c), scrub does too, and before
# each LMDB call the pages it will read (catalog/guard.c), so any crash fails
# the test.  Then the writers run on the damaged copy: put of a third
# snapshot, get of it, rm and gc -- each succeeds or refuses with one
# line, never a crash.
#
#   DD_LMDB_DAMAGE_ROUNDS  random rounds (default 100; the ASan build runs 30,
#                          tests/CMakeLists.txt says why)
#   DD_LMDB_DAMAGE_SEED    their seed (default 6); printed at the start
#   DD_LMDB_DAMAGE_ONLY    run only the case of this name (as printed), and
#                          leave its damaged store in DD_LMDB_DAMAGE_KEEP
#   DD_LMDB_DAMAGE_VERBOSE 1: print every case with each command's status
#   DD_LMDB_DAMAGE_WRITES  0: skip the writers (default 1)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROUNDS=${DD_LMDB_DAMAGE_ROUNDS:-100}
SEED=${DD_LMDB_DAMAGE_SEED:-6}
BS=4096
S="$T/s"

# Two snapshots sharing blocks, with zero blocks, repeats and a short
# tail; 4 KiB blocks so that the DDT and the block maps span several
# LMDB pages (leaves under a branch).
gen_blocks "$T/a.img" $BS $(seq 1 150) z z $(seq 1 20) z $(seq 151 230) t3000:a
gen_blocks "$T/b.img" $BS $(seq 101 200) z $(seq 300 360) $(seq 1 60) t1234:b
gen_blocks "$T/c.img" $BS $(seq 1 40) $(seq 500 540) $(seq 201 260) z
"$DEDUP" init --block-size $BS "$S"
"$DEDUP" put "$S@a" "$T/a.img"
"$DEDUP" put "$S@b" "$T/b.img"

# Each case runs twice: as shipped, and with the whole-file check at
# open turned off (DEDUP_OPEN_CHECK_MAX=0), as on a store too big for it,
# where only the guard (catalog/guard.c) stands between LMDB and the damage.
damage_cases() {
python3 - "$DEDUP" "$S" "$T" "$SEED" "$ROUNDS" <<'EOF'
import os, random, shutil, struct, subprocess, sys

dedup, store, tmp, seed, rounds = sys.argv[1], sys.argv[2], sys.argv[3], \
    int(sys.argv[4]), int(sys.argv[5])
PS = 4096
orig = open(os.path.join(store, 'db', 'data.mdb'), 'rb').read()
size = len(orig)
images = {n: open(os.path.join(tmp, n + '.img'), 'rb').read() for n in 'abc'}

# Chosen damage that makes LMDB crash inside its own code (an assertion,
# a wild read) before libdedup sees anything: LMDB trusts its page
# structure, keeps no checksums, and has no call to check a page before
# it follows it.  name -> what is damaged.

# ---- regions: LMDB's pages (lmdb 0.9, 64-bit; page header 16 bytes) --------
#
# Each byte of the file is classified: 'lmdb' (LMDB's own structure: meta
# pages, page headers and pointer arrays, node headers -- which hold the
# child page numbers of branch nodes --, the table catalog in the main
# table, the free list), 'key' and 'value' (the bytes libdedup encodes:
# leaf keys and values and branch keys of its tables) or 'unused' (free
# space inside pages, pages no live tree reaches).  Damage touching
# 'lmdb' bytes may crash LMDB (the known limitation); damage confined to
# keys, values and unused bytes, and any truncation, must not crash.
P_BRANCH = 0x01
F_BIGDATA, F_SUBDATA = 0x01, 0x02
UNUSED, LMDB_OWN, KEY, VALUE = 0, 1, 2, 3
NAMES = {UNUSED: 'unused', LMDB_OWN: 'lmdb', KEY: 'key', VALUE: 'value'}
region = bytearray(size)

def mark(off, n, what):
    region[off:off + n] = bytes([what]) * len(region[off:off + n])

def page(pgno):
    return orig[pgno * PS:(pgno + 1) * PS]

def nodes(pg):
    lower = struct.unpack_from('<H', pg, 12)[0]
    for i in range((lower - 16) // 2):
        off = struct.unpack_from('<H', pg, 16 + 2 * i)[0]
        lo, hi, flags, ksize = struct.unpack_from('<HHHH', pg, off)
        yield off, lo | hi << 16, flags, ksize

def live_meta():
    best = None
    for m in (0, 1):
        magic, = struct.unpack_from('<I', page(m), 16)
        txn, = struct.unpack_from('<Q', page(m), 144)
        if magic == 0xBEEFC0DE and (best is None or txn > best[1]):
            best = (m, txn)
    return page(best[0])

def tree(root, ours):
    """walks a B-tree and classifies its bytes; returns [(pgno, kind, page)]"""
    out, todo = [], [root] if root != 2**64 - 1 else []
    while todo:
        p = todo.pop(0)
        pg, base = page(p), p * PS
        kind = 'branch' if struct.unpack_from('<H', pg, 10)[0] & P_BRANCH \
            else 'leaf'
        mark(base, struct.unpack_from('<H', pg, 12)[0], LMDB_OWN)
        out.append((p, kind, pg))
        for off, dsize, fl, ksize in nodes(pg):
            mark(base + off, 8, LMDB_OWN)
            mark(base + off + 8, ksize, KEY if ours else LMDB_OWN)
            if kind == 'branch':
                todo.append(dsize | fl << 32)
            elif fl & F_BIGDATA:            # a value in overflow pages
                ov, = struct.unpack_from('<Q', pg, off + 8 + ksize)
                n, = struct.unpack_from('<I', page(ov), 12)
                mark(base + off + 8 + ksize, 8, LMDB_OWN)
                mark(ov * PS, n * PS, VALUE if ours else LMDB_OWN)
                mark(ov * PS, 16, LMDB_OWN)
            else:
                mark(base + off + 8 + ksize, dsize, VALUE if ours else LMDB_OWN)
    return out

mark(0, 2 * PS, LMDB_OWN)
meta = live_meta()
free_list = tree(struct.unpack_from('<Q', meta, 40 + 40)[0], False)
tabs = {}
for p, kind, pg in tree(struct.unpack_from('<Q', meta, 88 + 40)[0], False):
    for off, dsize, flags, ksize in nodes(pg) if kind == 'leaf' else []:
        if flags & F_SUBDATA:
            name = pg[off + 8:off + 8 + ksize].decode()
            root, = struct.unpack_from('<Q', pg, off + 8 + ksize + 40)
            tabs[name] = tree(root, True)

# ---- the damage ------------------------------------------------------------------
cases = []          # (name, [(op, offset, arg)])

def flip(off, mask=0x5a):
    return ('flip', off, mask)

def zero(off, n):
    return ('zero', off, n)

def cut(n):
    return ('cut', n, 0)

for m in (0, 1):
    base = m * PS
    cases += [('meta%d-magic' % m, [flip(base + 16)]),
              ('meta%d-main-root' % m, [flip(base + 128, 0x07)]),
              ('meta%d-last-pgno' % m, [flip(base + 136, 0x40)]),
              ('meta%d-txnid' % m, [flip(base + 144, 0x01)]),
              ('meta%d-zeroed' % m, [zero(base, PS)])]
cases.append(('meta-both-zeroed', [zero(0, 2 * PS)]))

def first(table, kind):
    for p, k, pg in tabs.get(table, []):
        if k == kind:
            return p, pg
    return None, None

def node_at(pg, key=None):
    """(offset, ksize) of the node with this key, else the middle one"""
    ns = list(nodes(pg))
    for off, dsize, flags, ksize in ns:
        if pg[off + 8:off + 8 + ksize] == key:
            return off, ksize
    off, dsize, flags, ksize = ns[len(ns) // 2]
    return off, ksize

def leaf_cases(label, table, key_offs, value_flips, key=None):
    p, pg = first(table, 'leaf')
    if p is None:
        sys.exit('no leaf page in table ' + table)
    base = p * PS
    off, ksize = node_at(pg, key)
    if key is None:
        cases.append((label + '-zeroed', [zero(base, PS)]))
        cases.append((label + '-lower', [flip(base + 12, 0x10)]))
    for k in key_offs:
        cases.append(('%s-key+%d' % (label, k),
                      [flip(base + off + 8 + k, 0x01)]))
    for v, mask in value_flips:
        cases.append(('%s-value+%d' % (label, v),
                      [flip(base + off + 8 + ksize + v, mask)]))

def branch_cases(label, table):
    p, pg = first(table, 'branch')
    if p is None:
        sys.exit('no branch page in table ' + table)
    off, ksize = node_at(pg)
    cases.extend([(label + '-zeroed', [zero(p * PS, PS)]),
                  (label + '-child', [flip(p * PS + off, 0x01)]),
                  (label + '-key', [flip(p * PS + off + 8, 0x80)])])

# DDT value: version, codec, flags, pack id, offset, psize, lsize, refcount
leaf_cases('ddt-leaf', 'ddt0', [0, 32],
           [(0, 0x02), (1, 0x01), (2, 0x02), (4, 0x01), (8, 0x40),
            (16, 0x01), (20, 0x01), (24, 0x01)])
branch_cases('ddt-branch', 'ddt0')
# block map key: snapshot id, block index; value: hash, variant
leaf_cases('bmap-leaf', 'bmap', [7, 15], [(0, 0x01), (32, 0x01)])
branch_cases('bmap-branch', 'bmap')
# snapshot "a": version, block size, id, size (low bits, then a bit that
# changes the block count too), blocks, zero blocks, ctime, digest; name
leaf_cases('snap-a', 'snap', [0],
           [(0, 0x02), (4, 0x01), (8, 0x01), (16, 0x01), (17, 0x10),
            (24, 0x01), (32, 0x01), (40, 0x01), (48, 0x01)], key=b'a')
leaf_cases('snap-leaf', 'snap', [], [])
for k in ('block_size', 'ddt.live', 'hash', 'compress', 'snap.next'):
    leaf_cases('meta-' + k, 'meta', [], [(0, 0x01)], key=k.encode())
# packs: pack id; version, committed end (a bit of it set: made smaller,
# scrub names the blocks past it, and the next writer's recovery refuses
# to cut them off -- test_store.c, test_recovery_keeps_live_blocks)
leaf_cases('packs-leaf', 'packs', [3], [(0, 0x02), (10, 0x01)])
p, pg = first('packs', 'leaf')
off, ksize = node_at(pg)
end_at = p * PS + off + 8 + ksize + 8 + 1
cases.append(('packs-end-smaller', [flip(end_at, orig[end_at] & -orig[end_at])]))
# What a writer could build on (format/store.md §7): a page of the free
# list that is in use -- LMDB would hand it to the next writer, which
# would overwrite a live block-map leaf -- and a block-map key whose bytes
# still sort right in its page, the last of the first leaf turned into
# the next snapshot's id: rm of a then wrongly kept or dropped entries.
# A free-list record is a count and page numbers in descending order;
# LMDB hands out the last (smallest) first: that one becomes a live leaf
# of b's block map (b has the higher id: the last leaf).
bmap_leaves = [p for p, k, pg in tabs.get('bmap', []) if k == 'leaf']
free_case = None
for p, k, pg in free_list:
    for off, dsize, flags, ksize in nodes(pg) if k == 'leaf' else []:
        n = dsize // 8 - 1
        if not flags & F_BIGDATA and n >= 1 and bmap_leaves and not free_case:
            at = p * PS + off + 8 + ksize + 8 * n
            live = struct.pack('<Q', bmap_leaves[-1])
            free_case = ('free-list-live-page',
                         [('set', at + i, live[i]) for i in range(8)])
if free_case:
    cases.append(free_case)
p0, pg0 = first('bmap', 'leaf')
last_off = list(nodes(pg0))[-1][0]
cases.append(('bmap-leaf-last-key-id', [flip(p0 * PS + last_off + 8 + 7, 0x03)]))
cases += [('cut-0', [cut(0)]), ('cut-1-page', [cut(PS)]),
          ('cut-2-pages', [cut(2 * PS)]),
          ('cut-half', [cut(size // PS // 2 * PS)]),
          ('cut-last-page', [cut(size - PS)]), ('cut-1-byte', [cut(size - 1)]),
          ('cut-odd', [cut(size // 2 + 123)])]
chosen = len(cases)

rng = random.Random(seed)
used = sorted({off // PS for off in range(size) if region[off] != UNUSED})
for r in range(rounds):
    kind = rng.choice(['flip', 'flip-used', 'flip-used', 'flips', 'zero',
                       'zero-used', 'cut'])
    if kind == 'flip':
        ops = [flip(rng.randrange(size), 1 << rng.randrange(8))]
    elif kind == 'flip-used':
        p = rng.choice(used)
        ops = [flip(p * PS + rng.randrange(PS), 1 << rng.randrange(8))]
    elif kind == 'flips':
        ops = [flip(rng.randrange(size), rng.randrange(1, 256))
               for _ in range(rng.randrange(2, 9))]
    elif kind == 'zero':
        n = rng.randrange(1, 2 * PS)
        ops = [zero(rng.randrange(size - n), n)]
    elif kind == 'zero-used':
        p = rng.choice(used)
        n = rng.randrange(1, PS)
        ops = [zero(p * PS + rng.randrange(PS - n + 1), n)]
    else:
        ops = [cut(rng.randrange(size))]
    cases.append(('random-%d-%s' % (r, kind), ops))

def touched(ops):
    """the regions a damage touches ('cut' for a truncation)"""
    out = set()
    for op, off, arg in ops:
        if op == 'cut':
            out.add('cut')
        elif op in ('flip', 'set'):
            out.add(NAMES[region[off]])
        else:
            out.update(NAMES[b] for b in set(region[off:off + arg]))
    return out

# ---- the commands, on a copy ----------------------------------------------------
work = os.path.join(tmp, 'w')
shutil.rmtree(work, ignore_errors=True)
shutil.copytree(store, work)
env = dict(os.environ)
env['ASAN_OPTIONS'] = env.get('ASAN_OPTIONS', 'detect_leaks=1') + ':exitcode=99'
env.setdefault('UBSAN_OPTIONS', 'print_stacktrace=1:halt_on_error=1')

def run(args):
    try:
        p = subprocess.run([dedup] + args, capture_output=True, timeout=30,
                           env=env)
    except subprocess.TimeoutExpired:
        return 'hang', b'', b''
    return p.returncode, p.stdout, p.stderr

def check(cmd, arg):
    """runs one command on the damaged copy: (exit status, problem or None)"""
    outfile = os.path.join(tmp, 'out')
    if os.path.exists(outfile):
        os.unlink(outfile)
    extra = [outfile] if cmd == 'get' else [os.path.join(tmp, 'c.img')] \
        if cmd == 'put' else []
    rc, out, err = run([cmd, arg] + extra)
    text = err.decode(errors='replace')
    if rc == 'hang':
        return rc, 'no exit within 30 s', text
    if rc < 0 or rc >= 128 or rc == 99 or 'Sanitizer' in text or \
            'runtime error' in text:
        return rc, 'crashed (exit %d)' % rc, text
    if rc == 0 and cmd == 'get':
        got = open(outfile, 'rb').read() if os.path.exists(outfile) else None
        if got != images[arg.split('@')[1]]:
            return rc, 'exit 0 with wrong bytes', text
    elif rc == 0 and cmd in ('ls', 'stat') and out != base[cmd]:
        return rc, 'changed', text
    elif rc != 0:
        lines = text.splitlines()
        if len(lines) != 1 or not lines[0].startswith('dedup: '):
            return rc, 'exit %d without one clear line: %r' % (rc, text[:300]), text
        if cmd == 'get' and os.path.exists(outfile):
            return rc, 'a failed get left its output file', text
    return rc, None, text

writes = os.environ.get('DD_LMDB_DAMAGE_WRITES', '1') == '1'
only = os.environ.get('DD_LMDB_DAMAGE_ONLY')
if only:
    cases = [c for c in cases if c[0] == only]
    print('%s: %r, in %s' % (only, cases[0][1] if cases else 'no such case',
                             '+'.join(sorted(touched(cases[0][1])))
                             if cases else '-'))
base = {c: run([c, work])[1] for c in ('ls', 'stat')}   # undamaged
problems, silent = [], {}
full = 0
for ci, (name, ops) in enumerate(cases):
    data = bytearray(orig)
    for op, off, arg in ops:
        if op == 'flip':
            data[off] ^= arg
        elif op == 'set':
            data[off] = arg
        elif op == 'zero':
            data[off:off + arg] = bytes(len(data[off:off + arg]))
        else:
            del data[off:]
    if writes:  # the last case's writers changed packs, not only data.mdb
        shutil.rmtree(work)
        shutil.copytree(store, work)
    with open(os.path.join(work, 'db', 'data.mdb'), 'wb') as f:
        f.write(data)
    if os.path.exists(os.path.join(work, 'db', 'lock.mdb')):
        os.unlink(os.path.join(work, 'db', 'lock.mdb'))
    where = '+'.join(sorted(touched(ops)))
    if only and os.environ.get('DD_LMDB_DAMAGE_KEEP'):
        shutil.copytree(work, os.environ['DD_LMDB_DAMAGE_KEEP'])
    rcs = {}
    for cmd, arg in (('ls', work), ('stat', work), ('get', work + '@a'),
                     ('get', work + '@b'), ('scrub', work)):
        label = cmd + ' ' + arg.replace(work, 'S')
        rcs[label], why, text = check(cmd, arg)
        if why == 'changed':
            silent.setdefault(label, []).append(name)
        elif why:
            problems.append('%s (damage in %s): %s: %s' % (name, where, label,
                                                           why))
            if why.startswith('crashed'):
                problems.append('    ' + text[-1500:].replace('\n', '\n    '))
    # then the writers on what the readers saw: put (its DDT lookups and
    # inserts), the new snapshot read back, rm (deletes), gc (walks, moves,
    # compaction): each succeeds or refuses with one line, never crashes
    if writes:
        for cmd, arg in (('put', work + '@c'), ('get', work + '@c'),
                         ('rm', work + '@a'), ('gc', work)):
            label = cmd + ' ' + arg.replace(work, 'S')
            wrc, why, text = check(cmd, arg)
            if why and why != 'changed':
                problems.append('%s (damage in %s): %s: %s' % (
                    name, where, label, why))
                if why.startswith('crashed'):
                    problems.append('    ' + text[-1500:].replace('\n', '\n    '))
        # a write either commits a catalog in which every other snapshot
        # still reads exactly, or fails and leaves the store as it was:
        # b read back before, so it must still, byte for byte
        if rcs['get S@b'] == 0:
            brc, why, text = check('get', work + '@b')
            if brc != 0 or why:
                problems.append('%s (damage in %s): after the writers, '
                                'get S@b failed: %s' % (
                                    name, where, why or text.strip()))
    # scrub passing means every snapshot ls lists reads back exact
    if rcs['scrub S'] == 0:
        rc, out, err = run(['ls', '--json', work])
        listed = out.decode(errors='replace').replace('":"', '": "')
        for n in 'ab':
            if rc == 0 and '"name": "%s"' % n in listed and \
                    rcs['get S@' + n] != 0:
                problems.append('%s (damage in %s): scrub passed, but get '
                                'of listed snapshot %s failed' % (name, where, n))
    full += all(v == 0 for v in rcs.values())
    if os.environ.get('DD_LMDB_DAMAGE_VERBOSE') == '1':
        print('%-28s %-26s %s' % (name, where, ' '.join(
            '%s=%s' % (k.split()[0] + k.split()[1][1:], v)
            for k, v in rcs.items())))

print('%d damage cases (%d chosen, %d random): %d read back fully, %d '
      'refused by at least one command' % (
          len(cases), chosen, len(cases) - chosen, full, len(cases) - full))
for label, names in sorted(silent.items()):
    print('not detectable (LMDB keeps no checksums), output changed: %s in '
          '%d cases (e.g. %s)' % (label, len(names), ', '.join(names[:4])))
if problems:
    print('\n'.join(problems), file=sys.stderr)
    sys.exit(1)
EOF
}

note "seed $SEED, $ROUNDS random rounds, whole-file check at open"
damage_cases
note "the same, guard only"
DEDUP_OPEN_CHECK_MAX=0 damage_cases
echo "PASS [$TEST_NAME]"
