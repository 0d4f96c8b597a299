/*
 * guard_free.c -- a writer's free list against the pages in use.
 *
 * LMDB hands the pages on its free list to a writer, which overwrites
 * them.  A page number that damage put on the list while the page is
 * still part of a tree would have a writer destroy a live page -- another
 * snapshot's block map, say -- and commit.  So before a write transaction
 * builds on a snapshot another process committed, every page the free
 * list names must be used by no tree (guard.c calls dd_guard_free_pages
 * from dd_guard_begin).
 *
 * The used pages are found through the branch pages alone: a tree's
 * leaves are its bottom branches' children, and libdedup's tables keep no
 * value large enough for overflow pages (the free list's own are marked by
 * its walk).  Branch pages are about one page in a hundred, already read
 * (and cached) by every descent; the leaves are not read.
 */
#include <string.h>

#include "dedup.h"
#include "common/alloc.h"
#include "common/endian.h"
#include "common/io.h"
#include "catalog/db_internal.h"
#include "catalog/lmdb_page.h"
#include "catalog/guard_internal.h"

/* ---- free pages that are in use ----------------------------------------------*/

/*
 * LMDB hands pages on the free list to a writer, which overwrites them.
 * A page number that damage put on the list while the page is still part
 * of a tree would have a writer destroy a live page -- another snapshot's
 * block map, say -- and commit.  So before a write transaction builds on
 * a snapshot, every page the free list names must be used by no tree.
 *
 * The used pages are found through the branch pages alone: a tree's
 * leaves are its bottom branches' children, and libdedup's tables keep no
 * value large enough for overflow pages (the free list's own are marked by
 * its walk).  Branch pages are about one page in a hundred, already read
 * (and cached) by every descent; the leaves are not read.  Done once per
 * snapshot another process committed: a snapshot this process's own
 * write transaction committed is LMDB's work on a checked one.
 */
struct lg_live {
	uint8_t *bits;             /* a bit a page: used by a tree */
	uint64_t npages;
};

static void lg_live_set(struct lg_live *lv, uint64_t pgno)
{
	if (pgno < lv->npages)
		lv->bits[pgno / 8] |= (uint8_t)(1u << (pgno % 8));
}

static bool lg_live_has(const struct lg_live *lv, uint64_t pgno)
{
	return pgno < lv->npages && (lv->bits[pgno / 8] >> (pgno % 8) & 1);
}

/* Marks page pgno at `level` of a tree of `depth` levels and, for a
 * branch, what lies below it. */
static int lg_mark(dd_txn *txn, dd_err *err, struct lg_live *lv, int tree,
		   uint64_t pgno, unsigned level, unsigned depth)
{
	const uint8_t *pg = NULL;
	uint64_t *kids;
	unsigned n;
	int rc;

	/* every page belongs to one place in one tree: a page reached twice
	 * is damage, and following it again could cost nkeys^depth reads */
	if (lg_live_has(lv, pgno))
		return dd_guard_bad(txn, err, tree, pgno,
				    "a page two branches name");
	lg_live_set(lv, pgno);
	if (level + 1 >= depth)
		return 0;            /* a leaf: not read */
	rc = dd_guard_page(txn, err, tree, pgno, false, true, &pg);
	if (rc)
		return rc;
	n = dd_lm_nkeys(pg);
	/* the children first: the page's buffer may be reused below */
	if (!(kids = dd_malloc((n ? n : 1) * sizeof(*kids))))
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	for (unsigned i = 0; i < n; i++)
		kids[i] = dd_lm_node_child(dd_lm_node(pg, i));
	for (unsigned i = 0; !rc && i < n; i++)
		rc = lg_mark(txn, err, lv, tree, kids[i], level + 1, depth);
	dd_free(kids);
	return rc;
}

struct lg_free_ctx {
	struct lg_live *fc_live;
	uint8_t *fc_list;          /* a record's page list */
	size_t fc_cap;
};

/* Every page number of every free-list record of one leaf, against the
 * pages in use. */
static int lg_free_leaf(dd_txn *txn, dd_err *err, int tree, uint64_t leaf,
			void *ctx)
{
	struct lg_free_ctx *fc = ctx;
	dd_db *db = txn->tx_db;
	const uint8_t *pg = NULL;
	int rc = dd_guard_page(txn, err, tree, leaf, true, true, &pg);
	unsigned n = rc ? 0 : dd_lm_nkeys(pg);

	for (unsigned i = 0; !rc && i < n; i++) {
		const uint8_t *node = dd_lm_node(pg, i);
		size_t dsize = dd_lm_node_dsize(node);
		uint64_t count;

		if (dsize > fc->fc_cap) {
			uint8_t *nl = dd_realloc(fc->fc_list, dsize);

			if (!nl)
				return dd_err_set(err, DD_ENOMEM, "out of memory");
			fc->fc_list = nl;
			fc->fc_cap = dsize;
		}
		if (dd_lm_node_flags(node) & LM_F_BIGDATA)
			rc = dd_io_pread_full(err, db->db_fd, fc->fc_list, dsize,
					      dd_get_le64(dd_lm_node_key(node) +
						dd_lm_node_ksize(node)) *
					      db->db_psize + LM_PAGEHDR,
					      db->db_file);
		else
			memcpy(fc->fc_list, dd_lm_node_key(node) +
			       dd_lm_node_ksize(node), dsize);
		/* the list was checked as a list (dd_guard_table) */
		count = rc ? 0 : dd_get_le64(fc->fc_list);
		for (uint64_t k = 1; !rc && k <= count && 8 * k < dsize; k++)
			if (lg_live_has(fc->fc_live,
					dd_get_le64(fc->fc_list + 8 * k)))
				rc = dd_guard_bad(txn, err, tree, leaf, "a page on the "
					    "free list is in use by a table");
		/* the page buffer may have been reused */
		if (!rc)
			rc = dd_guard_page(txn, err, tree, leaf, true, true, &pg);
	}
	return rc;
}

/* Marks the overflow runs of one leaf of the free list. */
static int lg_mark_overflow(dd_txn *txn, dd_err *err, int tree, uint64_t leaf,
			    void *ctx)
{
	struct lg_live *lv = ctx;
	const uint8_t *pg = NULL;
	int rc = dd_guard_page(txn, err, tree, leaf, true, true, &pg);

	for (unsigned i = 0; !rc && i < dd_lm_nkeys(pg); i++) {
		const uint8_t *node = dd_lm_node(pg, i);
		uint64_t ov, need;

		if (!(dd_lm_node_flags(node) & LM_F_BIGDATA))
			continue;
		ov = dd_get_le64(dd_lm_node_key(node) + dd_lm_node_ksize(node));
		need = (LM_PAGEHDR + dd_lm_node_dsize(node) +
			txn->tx_db->db_psize - 1) / txn->tx_db->db_psize;
		for (uint64_t k = 0; k < need; k++)
			lg_live_set(lv, ov + k);
	}
	return rc;
}

int dd_guard_free_pages(dd_txn *txn, dd_err *err)
{
	struct dd_guard_snap *gs = &txn->tx_guard;
	struct lg_live lv = {.npages = gs->gs_last_pg + 1};
	int rc = 0;

	lv.bits = dd_calloc(lv.npages / 8 + 1, 1);
	if (!lv.bits)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	lg_live_set(&lv, 0);
	lg_live_set(&lv, 1);       /* the meta pages */
	/* every tree, the free list's own included, and its overflow runs */
	for (int t = 0; !rc && t < DD_TREE_COUNT; t++) {
		const struct dd_lm_tree_root *r = &gs->gs_tree[t];

		if (r->root != LM_P_INVALID)
			rc = lg_mark(txn, err, &lv, t, r->root, 0, r->depth);
	}
	if (!rc)
		rc = dd_guard_walk_leaves(txn, err, DD_TREE_FREE, lg_mark_overflow,
				    &lv);
	if (!rc) {
		struct lg_free_ctx fc = {.fc_live = &lv};

		rc = dd_guard_walk_leaves(txn, err, DD_TREE_FREE, lg_free_leaf, &fc);
		dd_free(fc.fc_list);
	}
	dd_free(lv.bits);
	return rc;
}
