/*
 * lmdb_page.c -- what one LMDB page must hold before LMDB may read it.
 *
 * LMDB trusts its pages: a node offset, key size or child page number
 * out of bounds sends it off its page or its file (a SIGSEGV, a SIGBUS),
 * and a branch page with fewer than two keys trips an assertion.  This is
 * the one description of a sound page, shared by the whole-file check
 * (check.c) and the per-operation guard (guard.c).
 */
#include <string.h>

#include "catalog/lmdb_page.h"

int dd_lm_cmp(const void *a, size_t alen, const void *b, size_t blen)
{
	int diff = memcmp(a, b, alen < blen ? alen : blen);

	if (diff)
		return diff;
	return alen < blen ? -1 : alen > blen;
}

/* The free list is keyed by txnid, an 8-byte integer (MDB_INTEGERKEY):
 * its order is numeric, not bytewise. */
static int dd_lm_key_order(enum dd_lm_tree_kind kind, const uint8_t *a,
			unsigned alen, const uint8_t *b, unsigned blen)
{
	if (kind == LM_TREE_FREE) {
		uint64_t x = dd_get_le64(a), y = dd_get_le64(b);

		return x < y ? -1 : x > y;
	}
	return dd_lm_cmp(a, alen, b, blen);
}

bool dd_lm_layout_known(int major, int minor)
{
	return major == LM_KNOWN_MAJOR && minor == LM_KNOWN_MINOR;
}

const char *dd_lm_page_list(const uint8_t *val, size_t vlen, uint64_t last_pg)
{
	uint64_t n;

	if (vlen < 8 || vlen % 8 || (n = dd_get_le64(val)) != vlen / 8 - 1)
		return "a damaged free page list";
	for (uint64_t i = 1; i <= n; i++) {
		uint64_t p = dd_get_le64(val + 8 * i);

		if (p < 2 || p > last_pg)
			return "a free page number outside the file";
	}
	return NULL;
}

/* A leaf node's flags and value for its tree; room is the bytes from the
 * node to the end of the page. */
static const char *dd_lm_leaf_node(const uint8_t *node, size_t room,
				uint32_t psize, uint64_t last_pg,
				enum dd_lm_tree_kind kind)
{
	unsigned flags = dd_lm_node_flags(node), ksize = dd_lm_node_ksize(node);
	size_t dsize = dd_lm_node_dsize(node);

	if (ksize == 0)
		return "a leaf node without a key";
	switch (kind) {
	case LM_TREE_FREE:
		if (flags & ~LM_F_BIGDATA)
			return "a free-list node with table flags";
		break;
	case LM_TREE_MAIN:
		if (flags & ~LM_F_SUBDATA)
			return "a damaged table record node";
		if ((flags & LM_F_SUBDATA) && dsize != LM_DB_SIZE)
			return "a table record of the wrong size";
		break;
	case LM_TREE_TABLE:
		/* libdedup's values are at most a few hundred bytes: never an
		 * overflow run, never a sub-table */
		if (flags)
			return "a node with flags libdedup never writes";
		break;
	}
	if (flags & LM_F_BIGDATA) {
		uint64_t ov, need = (LM_PAGEHDR + dsize + psize - 1) / psize;

		if (room < LM_NODEHDR + (size_t)ksize + 8)
			return "a node runs off the page";
		ov = dd_get_le64(node + LM_NODEHDR + ksize);
		if (ov < 2 || ov > last_pg || need > last_pg - ov + 1)
			return "an overflow run outside the file";
		return NULL;
	}
	if (room < LM_NODEHDR + (size_t)ksize + dsize)
		return "a node runs off the page";
	if (kind == LM_TREE_FREE)
		return dd_lm_page_list(node + LM_NODEHDR + ksize, dsize, last_pg);
	return NULL;
}

static size_t dd_lm_even(size_t n)
{
	return (n + 1) & ~(size_t)1;
}

const char *dd_lm_page_verify(const uint8_t *pg, uint32_t psize, uint64_t pgno,
			   uint64_t last_pg, bool leaf, enum dd_lm_tree_kind kind)
{
	unsigned lower = dd_get_le16(pg + 12), upper = dd_get_le16(pg + 14);
	unsigned nkeys, min_keys;
	const uint8_t *prev = NULL;
	unsigned prev_len = 0;
	size_t node_bytes = 0;     /* the nodes' sizes, as LMDB packs them */

	if (dd_get_le64(pg) != pgno)
		return "its header names another page";
	if ((dd_get_le16(pg + 10) & LM_P_KINDS) !=
	    (leaf ? LM_P_LEAF : LM_P_BRANCH))
		return leaf ? "not a leaf page at leaf depth"
			    : "not a branch page above the leaves";
	if (lower < LM_PAGEHDR || lower % 2 || lower > upper || upper > psize)
		return "its key count or free space does not fit the page";
	nkeys = (lower - LM_PAGEHDR) / 2;
	/* mdb_page_search_root asserts two keys in a branch page, except in
	 * the free list, which a writer may leave with one */
	min_keys = leaf ? 0 : kind == LM_TREE_FREE ? 1 : 2;
	if (nkeys < min_keys)
		return "a branch page with too few keys";
	for (unsigned i = 0; i < nkeys; i++) {
		unsigned off = dd_get_le16(pg + LM_PAGEHDR + 2 * i), ksize;
		const uint8_t *node = pg + off;
		const char *why;

		if (off < upper || off % 2 || off + LM_NODEHDR > psize)
			return "a node offset outside the page's node area";
		ksize = dd_lm_node_ksize(node);
		if (ksize > LM_MAXKEY || off + LM_NODEHDR + ksize > psize)
			return "a key runs off the page";
		if (leaf) {
			why = dd_lm_leaf_node(node, psize - off, psize, last_pg,
					   kind);
			if (why)
				return why;
			node_bytes += dd_lm_even(LM_NODEHDR + ksize +
				(dd_lm_node_flags(node) & LM_F_BIGDATA
					 ? 8 : dd_lm_node_dsize(node)));
		} else {
			node_bytes += dd_lm_even(LM_NODEHDR + ksize);
			uint64_t child = dd_lm_node_child(node);

			if (child < 2 || child > last_pg)
				return "a child page number outside the file";
			if (i == 0)
				continue; /* node 0 of a branch has no key */
		}
		if (kind == LM_TREE_FREE && ksize != 8)
			return "a free-list key that is not a txnid";
		if (prev && dd_lm_key_order(kind, prev, prev_len,
					 dd_lm_node_key(node), ksize) >= 0)
			return "its keys are out of order";
		prev = dd_lm_node_key(node);
		prev_len = ksize;
	}
	/* LMDB packs nodes from the page's end down to upper, each an even
	 * number of bytes, and closes the gap a deleted one leaves: they
	 * fill psize - upper exactly.  A size that lies (a flipped byte of
	 * a node header) fails that -- where each node alone still fits,
	 * and LMDB would move the wrong bytes when it shifts them. */
	if (node_bytes != psize - upper)
		return "its nodes' sizes do not fill its node area";
	return NULL;
}

unsigned dd_lm_search(const uint8_t *pg, bool leaf, const void *key, size_t klen,
		   bool *exact)
{
	unsigned n = dd_lm_nkeys(pg), i = 0;
	int lo = leaf ? 0 : 1, hi = (int)n - 1, rc = 0;

	while (lo <= hi) {
		const uint8_t *node;

		i = (unsigned)(lo + hi) / 2;
		node = dd_lm_node(pg, i);
		rc = dd_lm_cmp(key, klen, dd_lm_node_key(node), dd_lm_node_ksize(node));
		if (rc == 0)
			break;
		if (rc > 0)
			lo = (int)i + 1;
		else
			hi = (int)i - 1;
	}
	if (rc > 0)
		i++;
	*exact = rc == 0 && n > 0;
	return i;
}
