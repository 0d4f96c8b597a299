/*
 * guard_walk.c -- the guard's walks (guard.c says why): for each LMDB
 * operation catalog/ makes, the very pages LMDB's own code will walk for
 * it -- the same binary search on the same bytes (mdb_node_search), the
 * same sibling steps (mdb_cursor_sibling) --, each passed through
 * dd_guard_page before LMDB is called.
 *
 * Which pages, per operation (mdb.c of liblmdb 0.9.24):
 *   get, put            the path from the root to the key's leaf; a split
 *                       touches only that path
 *   append (MDB_APPEND) the rightmost path
 *   del                 the path, and what mdb_rebalance may read: both
 *                       siblings at every level, the leftmost path below
 *                       the first and last child of each branch page among
 *                       them (mdb_page_search_lowest in mdb_node_move and
 *                       mdb_page_merge), and the leaf after the key's one
 *                       (mdb_cursor_del0 steps onto it)
 *   cursor first/seek   the path, and the next leaf when the key is past
 *                       its leaf's last one
 *   cursor next         the next leaf when the cursor is on its leaf's last
 *                       key (dd_guard_next)
 *   drop                the whole table
 *   a write txn         the whole free list (LMDB's allocator reads it)
 *   every txn           the meta page, the main table's path to each of
 *                       libdedup's table records
 *
 * Per transaction, the last leaf checked in each table is kept with the
 * keys that reach it (dd_guard_leaf), so that most operations of a writer
 * after the first on a leaf cost a comparison or two.
 */
#include <string.h>

#include "dedup.h"
#include "common/alloc.h"
#include "common/io.h"
#include "catalog/db_internal.h"
#include "catalog/lmdb_page.h"
#include "catalog/guard_internal.h"

/* ---- descending ------------------------------------------------------------*/


static void lg_fence(uint8_t *to, unsigned *len, const uint8_t *node)
{
	*len = dd_lm_node_ksize(node);
	memcpy(to, dd_lm_node_key(node), *len);
}

/* Are the keys of page pg, reached as a child of the range r, inside it?
 * A B+tree sends the keys in [separator i, separator i+1) to child i and
 * LMDB keeps it so; a key damaged in place can still sort right within
 * its page (the last key of a leaf, say), and is then caught only here.
 * A branch's node 0 has no key.  The free list is keyed by integers, not
 * bytes: not compared. */
static int lg_in_range(dd_txn *txn, dd_err *err, int tree, uint64_t pgno,
		       const uint8_t *pg, bool leaf,
		       const struct dd_guard_fences *r)
{
	unsigned n = dd_lm_nkeys(pg), first = leaf ? 0 : 1;
	const uint8_t *lo, *hi;

	if (tree == DD_TREE_FREE || n <= first)
		return 0;
	lo = dd_lm_node(pg, first);
	hi = dd_lm_node(pg, n - 1);
	if ((!r->gf_lo_inf &&
	     dd_lm_cmp(dd_lm_node_key(lo), dd_lm_node_ksize(lo), r->gf_lo,
		       r->gf_lo_len) < 0) ||
	    (!r->gf_hi_inf &&
	     dd_lm_cmp(dd_lm_node_key(hi), dd_lm_node_ksize(hi), r->gf_hi,
		       r->gf_hi_len) >= 0)) {
		/* it passed as a page; as a child here it does not */
		dd_guard_memo_set(txn->tx_db, pgno, 0);
		return dd_guard_bad(txn, err, tree, pgno, "keys outside the range "
			      "its parent page sends to it");
	}
	return 0;
}

/* From page pgno at level `from` of cur's tree down to a leaf, as
 * mdb_page_search_root goes: by key, leftmost or rightmost.  Fills the
 * levels below `from`, and cur's leaf and last key.  With f, from the
 * root: narrows f to the keys whose descent is this one. */
static int lg_down(dd_txn *txn, dd_err *err, struct dd_guard_cur *cur,
		   unsigned from, uint64_t pgno, enum dd_guard_to to,
		   const void *key, size_t klen, struct dd_guard_fences *f)
{
	/* the range of the page at level l (open above `from`: a step or a
	 * neighbour's walk resumes below a checked branch) */
	struct dd_guard_fences r = {.gf_lo_inf = true, .gf_hi_inf = true};

	for (unsigned l = from; l < cur->gc_depth; l++) {
		bool leaf = l + 1 == cur->gc_depth, exact = false;
		const uint8_t *pg = NULL;
		unsigned n, i;
		int rc = dd_guard_page(txn, err, cur->gc_tree, pgno, leaf,
				 !leaf || cur->gc_read_leaf, &pg);

		if (!rc && pg)
			rc = lg_in_range(txn, err, cur->gc_tree, pgno, pg, leaf,
					 &r);
		if (rc)
			return rc;
		if (!pg) { /* a leaf that passed before, not read */
			cur->gc_lv[l].pgno = pgno;
			cur->gc_lv[l].idx = cur->gc_lv[l].nkeys = 0;
			cur->gc_at = true;
			cur->gc_last_len = 0;
			break;
		}
		n = dd_lm_nkeys(pg);
		if (to == DD_GUARD_FIRST)
			i = 0;
		else if (to == DD_GUARD_LAST)
			i = n ? n - 1 : 0;
		else
			i = dd_lm_search(pg, leaf, key, klen, &exact);
		if (!leaf && to == DD_GUARD_KEY)
			i = i >= n ? n - 1 : exact ? i : i - 1;
		cur->gc_lv[l].pgno = pgno;
		cur->gc_lv[l].idx = i;
		cur->gc_lv[l].nkeys = n;
		if (!leaf) {
			/* a branch sends keys in [key i, key i+1) to child i */
			if (i > 0) {
				r.gf_lo_inf = false;
				lg_fence(r.gf_lo, &r.gf_lo_len, dd_lm_node(pg, i));
			}
			if (i + 1 < n) {
				r.gf_hi_inf = false;
				lg_fence(r.gf_hi, &r.gf_hi_len,
					 dd_lm_node(pg, i + 1));
			}
			if (f && i > 0) {
				f->gf_lo_inf = false;
				lg_fence(f->gf_lo, &f->gf_lo_len, dd_lm_node(pg, i));
			}
			if (f && i + 1 < n) {
				f->gf_hi_inf = false;
				lg_fence(f->gf_hi, &f->gf_hi_len,
					 dd_lm_node(pg, i + 1));
			}
			pgno = dd_lm_node_child(dd_lm_node(pg, i));
			continue;
		}
		cur->gc_at = n > 0;
		if (n) {
			const uint8_t *last = dd_lm_node(pg, n - 1);

			cur->gc_last_len = dd_lm_node_ksize(last);
			memcpy(cur->gc_last, dd_lm_node_key(last), cur->gc_last_len);
		}
	}
	return 0;
}

int dd_guard_from_root(dd_txn *txn, dd_err *err, struct dd_guard_cur *cur,
			enum dd_guard_to to, const void *key, size_t klen,
			struct dd_guard_fences *f)
{
	const struct dd_lm_tree_root *t = &txn->tx_guard.gs_tree[cur->gc_tree];

	cur->gc_depth = t->depth;
	cur->gc_at = false;
	if (f)
		f->gf_lo_inf = f->gf_hi_inf = true;
	if (t->root == LM_P_INVALID)
		return 0; /* an empty table: LMDB reads no page of it */
	return lg_down(txn, err, cur, 0, t->root, to, key, klen, f);
}

/* mdb_cursor_sibling(mc, 1): up to the nearest level with a node to the
 * right, one node right, then leftmost down to the next leaf.  That
 * node's key begins the next leaf's range (the keys its subtree holds):
 * when a range the txn skips holds it, the next leaf is a damaged page
 * or lies after one in the same skipped subtree, and nothing is read --
 * DD_GUARD_JUMP, the cursor unmoved (cursor.c). */
static int lg_step(dd_txn *txn, dd_err *err, struct dd_guard_cur *cur)
{
	const uint8_t *pg = NULL, *node;
	int tree = cur->gc_tree, l, rc;

	for (l = (int)cur->gc_depth - 2; l >= 0; l--)
		if (cur->gc_lv[l].idx + 1 < cur->gc_lv[l].nkeys)
			break;
	if (l < 0) {
		cur->gc_at = false; /* the last leaf: LMDB's step ends */
		return 0;
	}
	rc = dd_guard_page(txn, err, tree, cur->gc_lv[l].pgno, false, true,
		     &pg);
	if (rc)
		return rc;
	node = dd_lm_node(pg, cur->gc_lv[l].idx + 1);
	if (tree < DD_DBI_COUNT && txn->tx_nskip[tree] &&
	    (cur->gc_jump = dd_key_ranges_find(txn->tx_skip[tree],
					       txn->tx_nskip[tree],
					       dd_lm_node_key(node),
					       dd_lm_node_ksize(node))))
		return DD_GUARD_JUMP;
	cur->gc_lv[l].idx++;
	return lg_down(txn, err, cur, (unsigned)l + 1, dd_lm_node_child(node),
		       DD_GUARD_FIRST, NULL, 0, NULL);
}

/* ---- deletion's neighbourhood ----------------------------------------------*/

/* The leftmost path below child i of branch page pgno at level l. */
static int lg_lowest_below(dd_txn *txn, dd_err *err,
			   const struct dd_guard_cur *at, unsigned l,
			   uint64_t pgno, unsigned i)
{
	struct dd_guard_cur scratch = *at;
	const uint8_t *pg = NULL;
	int rc = dd_guard_page(txn, err, at->gc_tree, pgno, false, true, &pg);

	if (rc)
		return rc;
	return lg_down(txn, err, &scratch, l + 1, dd_lm_node_child(dd_lm_node(pg, i)),
		       DD_GUARD_FIRST, NULL, 0, NULL);
}

static int lg_neighbours(dd_txn *txn, dd_err *err,
			 const struct dd_guard_cur *path)
{
	struct dd_guard_cur next = *path;
	int rc = 0;

	for (unsigned l = 1; l < path->gc_depth && !rc; l++) {
		const struct dd_guard_level *up = &path->gc_lv[l - 1];
		bool leaf = l + 1 == path->gc_depth;
		uint64_t kids[3];
		unsigned nkids = 0;
		const uint8_t *pg = NULL;

		rc = dd_guard_page(txn, err, path->gc_tree, up->pgno, false, true,
			     &pg);
		for (unsigned j = up->idx ? up->idx - 1 : 0;
		     !rc && j <= up->idx + 1 && j < up->nkeys; j++)
			kids[nkids++] = dd_lm_node_child(dd_lm_node(pg, j));
		for (unsigned k = 0; !rc && k < nkids; k++) {
			unsigned n;

			rc = dd_guard_page(txn, err, path->gc_tree, kids[k], leaf,
				     !leaf, &pg);
			if (rc || leaf)
				continue;
			n = dd_lm_nkeys(pg);
			rc = lg_lowest_below(txn, err, path, l, kids[k], 0);
			if (!rc)
				rc = lg_lowest_below(txn, err, path, l, kids[k],
						     n - 1);
		}
	}
	if (!rc && path->gc_at)
		rc = lg_step(txn, err, &next);
	return rc;
}

/* ---- the last leaf checked, per table --------------------------------------*/

/* A transaction reads one snapshot, so a leaf checked once stays checked
 * for it: the next operation whose descent is the same one (its key
 * between the same separators) skips it.  A lookup and the update of the
 * same key, appends, a map's entries one after another: most operations
 * of a writer after the first on a leaf cost a comparison or two. */
static bool lg_covers(const struct dd_guard_leaf *c, enum dd_guard_to to,
		      const void *key, size_t klen)
{
	const struct dd_guard_fences *f = &c->gl_fences;

	if (!c->gl_valid)
		return false;
	if (to == DD_GUARD_FIRST)
		return f->gf_lo_inf;
	if (to == DD_GUARD_LAST)
		return f->gf_hi_inf;
	return (f->gf_lo_inf ||
		dd_lm_cmp(key, klen, f->gf_lo, f->gf_lo_len) >= 0) &&
	       (f->gf_hi_inf || dd_lm_cmp(key, klen, f->gf_hi, f->gf_hi_len) < 0);
}

/* The leaf of the descent `to`, checked; read too with `read_leaf` (a
 * cursor needs its last key). */
static int lg_leaf(dd_txn *txn, dd_err *err, int tree, enum dd_guard_to to,
		   const void *key, size_t klen, bool read_leaf,
		   struct dd_guard_leaf **out)
{
	struct dd_guard_leaf *c = &txn->tx_guard.gs_leaf[tree];
	int rc;

	*out = c;
	if (lg_covers(c, to, key, klen) &&
	    (c->gl_cur.gc_read_leaf || !read_leaf))
		return 0;
	c->gl_valid = false;
	c->gl_neighbours = false;
	dd_guard_cur_init(&c->gl_cur, tree);
	c->gl_cur.gc_read_leaf = read_leaf;
	rc = dd_guard_from_root(txn, err, &c->gl_cur, to, key, klen, &c->gl_fences);
	c->gl_valid = rc == 0;
	return rc;
}

/* ---- what catalog/ calls ---------------------------------------------------------*/

void dd_guard_cur_init(struct dd_guard_cur *cur, int tree)
{
	memset(cur, 0, offsetof(struct dd_guard_cur, gc_last));
	cur->gc_tree = tree;
	cur->gc_read_leaf = true;
}

int dd_guard_key(dd_txn *txn, dd_err *err, int tree, const void *key,
		 size_t klen, enum dd_guard_op op)
{
	struct dd_guard_leaf *c;
	int rc;

	if (txn->tx_db->db_guard_off)
		return 0;
	rc = lg_leaf(txn, err, tree, op == DD_GUARD_APPEND ? DD_GUARD_LAST
								: DD_GUARD_KEY,
			 key, klen, false, &c);

	if (!rc && op == DD_GUARD_DEL && !c->gl_neighbours) {
		rc = lg_neighbours(txn, err, &c->gl_cur);
		c->gl_neighbours = rc == 0;
	}
	return rc;
}

/* LMDB's descent for a key reaches the leaf the guard's did, by the same
 * search on the same bytes (guard.c), and a read transaction's tree is
 * the committed one the guard walked: a second descent only repeats the
 * first.  A write transaction reads its own changes, which the guard
 * does not see; a node whose value is not inline (a table record, an
 * overflow) and an empty table are left to LMDB. */
int dd_guard_get(dd_txn *txn, int tree, const MDB_val *k, MDB_val *v)
{
	const dd_db *db = txn->tx_db;
	const struct dd_guard_leaf *c = &txn->tx_guard.gs_leaf[tree];
	const struct dd_guard_cur *cur = &c->gl_cur;
	const uint8_t *pg, *node;
	uint64_t pgno;
	unsigned i;
	bool exact;

	if (txn->tx_write || db->db_guard_off || !db->db_map_read ||
	    !c->gl_valid || cur->gc_depth == 0)
		return -1;
	pgno = cur->gc_lv[cur->gc_depth - 1].pgno;
	if ((pgno + 1) * db->db_psize > db->db_map_len)
		return -1;
	pg = (const uint8_t *)db->db_map + pgno * db->db_psize;
	i = dd_lm_search(pg, true, k->mv_data, k->mv_size, &exact);
	if (!exact)
		return 0;
	node = dd_lm_node(pg, i);
	if (dd_lm_node_flags(node) != 0)
		return -1;
	v->mv_size = dd_lm_node_dsize(node);
	v->mv_data = (void *)(node + LM_NODEHDR + dd_lm_node_ksize(node));
	return 1;
}

int dd_guard_seek(dd_txn *txn, dd_err *err, struct dd_guard_cur *cur,
		  const void *key, size_t klen)
{
	struct dd_guard_leaf *c;
	int rc;

	if (txn->tx_db->db_guard_off)
		return 0;
	rc = lg_leaf(txn, err, cur->gc_tree, key ? DD_GUARD_KEY : DD_GUARD_FIRST,
			 key, klen, true, &c);

	if (rc)
		return rc;
	memcpy(cur, &c->gl_cur, offsetof(struct dd_guard_cur, gc_last) +
	       c->gl_cur.gc_last_len);
	/* mdb_cursor_set: a key past its leaf's last lands on the next */
	while (!rc && key && cur->gc_at &&
	       dd_lm_cmp(key, klen, cur->gc_last, cur->gc_last_len) > 0)
		rc = lg_step(txn, err, cur);
	return rc;
}

int dd_guard_next(dd_txn *txn, dd_err *err, struct dd_guard_cur *cur,
		  const void *key, size_t klen)
{
	int rc = 0;

	if (txn->tx_db->db_guard_off)
		return 0;
	/* on the leaf's last key LMDB's next step reads the next leaf.  A
	 * key past it means this write txn reshaped the tree: catch up */
	while (!rc && cur->gc_at &&
	       dd_lm_cmp(key, klen, cur->gc_last, cur->gc_last_len) >= 0)
		rc = lg_step(txn, err, cur);
	return rc;
}

/* A free-list record in overflow pages: the run's first page names its
 * length, and the page list is sound.  The run's first page records that
 * it passed. */
static int lg_overflow_list(dd_txn *txn, dd_err *err, uint64_t leaf,
			    const uint8_t *node)
{
	dd_db *db = txn->tx_db;
	uint64_t last = txn->tx_guard.gs_last_pg, ov, need;
	size_t dsize = dd_lm_node_dsize(node);
	uint8_t hdr[LM_PAGEHDR], *list;
	const char *why = NULL;
	int rc;

	ov = dd_get_le64(dd_lm_node_key(node) + dd_lm_node_ksize(node));
	need = (LM_PAGEHDR + dsize + db->db_psize - 1) / db->db_psize;
	if (dd_guard_memo(db, ov) == dd_guard_role(LM_TREE_FREE, true))
		return 0;
	/* LMDB reads the run through its map: all of it in the file */
	if (ov < 2 || ov >= txn->tx_guard.gs_file_pgs ||
	    need > txn->tx_guard.gs_file_pgs - ov)
		return dd_guard_bad(txn, err, DD_TREE_FREE, leaf,
				    "an overflow run past the end of the file");
	rc = dd_io_pread_full(err, db->db_fd, hdr, sizeof(hdr),
			      ov * db->db_psize, db->db_file);
	if (rc)
		return rc;
	if (dd_get_le64(hdr) != ov ||
	    (dd_get_le16(hdr + 10) & LM_P_KINDS) != LM_P_OVERFLOW ||
	    dd_get_le32(hdr + 12) != need)
		return dd_guard_bad(txn, err, DD_TREE_FREE, leaf,
			      "not the overflow run its node names");
	if (!(list = dd_malloc(dsize)))
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	rc = dd_io_pread_full(err, db->db_fd, list, dsize,
			      ov * db->db_psize + LM_PAGEHDR, db->db_file);
	if (!rc)
		why = dd_lm_page_list(list, dsize, last);
	dd_free(list);
	if (rc)
		return rc;
	if (why)
		return dd_guard_bad(txn, err, DD_TREE_FREE, ov, why);
	dd_guard_memo_set(db, ov, dd_guard_role(LM_TREE_FREE, true)); /* its run */
	return 0;
}

/* Calls fn for every leaf of tree, left to right, as LMDB's cursor steps
 * onto them; fn's failure, or the walk's, ends it. */
int dd_guard_walk_leaves(dd_txn *txn, dd_err *err, int tree, dd_guard_leaf_fn fn,
			  void *ctx)
{
	struct dd_guard_cur cur;
	int rc;

	dd_guard_cur_init(&cur, tree);
	rc = dd_guard_from_root(txn, err, &cur, DD_GUARD_FIRST, NULL, 0, NULL);
	while (!rc && cur.gc_at) {
		rc = fn(txn, err, tree, cur.gc_lv[cur.gc_depth - 1].pgno, ctx);
		if (!rc)
			rc = lg_step(txn, err, &cur);
	}
	return rc;
}

/* A free-list leaf's overflow records, checked. */
static int lg_overflow_leaf(dd_txn *txn, dd_err *err, int tree, uint64_t leaf,
			    void *ctx)
{
	const uint8_t *pg = NULL;
	int rc = dd_guard_page(txn, err, tree, leaf, true, true, &pg);

	(void)ctx;
	for (unsigned i = 0; !rc && i < dd_lm_nkeys(pg); i++) {
		const uint8_t *node = dd_lm_node(pg, i);

		if (!(dd_lm_node_flags(node) & LM_F_BIGDATA))
			continue;
		rc = lg_overflow_list(txn, err, leaf, node);
		/* the page buffer may have been reused */
		if (!rc)
			rc = dd_guard_page(txn, err, tree, leaf, true, true, &pg);
	}
	return rc;
}

static int lg_no_more(dd_txn *txn, dd_err *err, int tree, uint64_t leaf,
		      void *ctx)
{
	(void)txn;
	(void)err;
	(void)tree;
	(void)leaf;
	(void)ctx;
	return 0;
}

/* Every page of a tree, leaf by leaf; in the free list, also every
 * overflow record. */
int dd_guard_table(dd_txn *txn, dd_err *err, int tree)
{
	if (txn->tx_db->db_guard_off)
		return 0;
	return dd_guard_walk_leaves(txn, err, tree, tree == DD_TREE_FREE
					      ? lg_overflow_leaf : lg_no_more,
			      NULL);
}

