"""lmdb_walk.py -- LMDB 0.9's pages as the e2e tests read them (64-bit,
4 KiB pages): a store's db/data.mdb, its tables, and each table's leaves
with the key range the parent pages send to each -- the range scrub must
report for a damaged page (format/store.md §10).  Independent of
libdedup's own reader (catalog/check.c), so that a test can compute what
scrub must say."""
import os
import struct

PS = 4096


class Db:
    def __init__(self, store):
        self.path = os.path.join(store, 'db', 'data.mdb')
        self.data = bytearray(open(self.path, 'rb').read())
        metas = [self.page(m) for m in (0, 1)]
        meta = max(metas, key=lambda m: struct.unpack_from('<Q', m, 144)[0])
        self.tables = {}
        for p, _, _ in self.leaves(struct.unpack_from('<Q', meta, 128)[0]):
            for _, key, val in self.nodes(p):
                self.tables[key.decode()] = struct.unpack_from('<Q', val, 40)[0]

    def page(self, p):
        return self.data[p * PS:(p + 1) * PS]

    def nodes(self, p):
        """(value size or child page, key, inline value) of page p's nodes"""
        pg = self.page(p)
        lower, = struct.unpack_from('<H', pg, 12)
        for i in range((lower - 16) // 2):
            off, = struct.unpack_from('<H', pg, 16 + 2 * i)
            lo, hi, flags, ksize = struct.unpack_from('<HHHH', pg, off)
            dsize = lo | hi << 16
            yield dsize | flags << 32, bytes(pg[off + 8:off + 8 + ksize]), \
                bytes(pg[off + 8 + ksize:off + 8 + ksize + dsize])

    def leaves(self, root, lo=None, hi=None):
        """[(pgno, lo key, hi key)] of a tree's leaves, in key order; None
        for the table's ends"""
        if not struct.unpack_from('<H', self.page(root), 10)[0] & 0x01:
            return [(root, lo, hi)]
        ns = list(self.nodes(root))
        out = []
        for i, (child, key, _) in enumerate(ns):
            clo = lo if i == 0 else key
            chi = hi if i + 1 == len(ns) else ns[i + 1][1]
            out += self.leaves(child & (2**48 - 1), clo, chi)
        return out

    def table_leaves(self, name):
        return self.leaves(self.tables[name])

    def entries(self, name):
        """{key: value} of a table whose values are inline"""
        return {k: v for p, _, _ in self.table_leaves(name)
                for _, k, v in self.nodes(p)}

    def zero(self, pgno):
        self.data[pgno * PS:(pgno + 1) * PS] = bytes(PS)

    def save(self):
        open(self.path, 'wb').write(self.data)


def in_range(key, lo, hi):
    return (lo is None or key >= lo) and (hi is None or key < hi)
