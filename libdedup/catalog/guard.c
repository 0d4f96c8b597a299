/*
 * guard.c -- checks the pages an LMDB operation will read, before LMDB
 * reads them.
 *
 * Why: LMDB trusts every page it maps (lmdb_page.c), and the whole-file
 * check (check.c) costs a read of the whole file: dd_db_open runs it only
 * on small stores, scrub always.  Every other operation on a big store
 * would meet a damaged page unchecked, and LMDB crashes on one.  So each
 * LMDB call in catalog/ is preceded by a guard call that walks, in the
 * committed snapshot the transaction reads, the very pages LMDB's own
 * code will walk for that call -- the same binary search on the same
 * bytes (mdb_node_search), the same sibling steps (mdb_cursor_sibling) --
 * and passes each through dd_lm_page_verify.  Damage becomes one DD_ECORRUPT
 * line naming the page; LMDB is never called on it.
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
 * A write transaction reads through pages it has already copied and
 * changed itself (LMDB's dirty pages); those are LMDB's own, made from
 * pages the guard checked.  The guard walks the committed tree; with
 * inserts and updates, a clean page LMDB reaches through dirty ones
 * holds the same keys as in the committed tree, so the guard walked it
 * for the same key.  After deletes have rebalanced pages in the same
 * transaction that is argued, not proven (a delete's neighbourhood is
 * checked whole, which covers what a rebalance moves).
 *
 * Cost: a page passes dd_lm_page_verify once per process; four bits per
 * page record the role it passed as (tree kind, leaf or branch), so later
 * walks check only its header (number and kind: a page freed and reused
 * changes role), and point operations do not read a leaf that passed at
 * all.  The record outlives the snapshot that made it because LMDB never
 * rewrites a page in place that a snapshot can still read: a page reused
 * later is LMDB's own writing, which is sound.  Damage that lands after a
 * page passed is seen by the next process, or by scrub's whole-file
 * check.  Per transaction, the last leaf checked in each table is kept
 * with the keys that reach it (dd_guard_leaf), and branch pages in a
 * small cache.
 *
 * A write transaction also checks, once per snapshot another process
 * committed, that no page on the free list is in use by a tree
 * (dd_guard_free_pages): LMDB would hand it to the writer, which would
 * overwrite a live page and commit.
 *
 * Pages are read with pread (lg_read_page), bounded by the file's size.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "dedup.h"
#include "common/alloc.h"
#include "common/io.h"
#include "catalog/db_internal.h"
#include "catalog/lmdb_page.h"
#include "catalog/guard_internal.h"

/* ---- which pages passed --------------------------------------------------*/

/* Four bits a page: 0 not yet checked, else what it passed as (lg_role:
 * its tree's kind and leaf or branch).  Sized for the whole map, in
 * anonymous memory that costs only where pages were checked. */
#define LG_PER_WORD 16

int dd_guard_open(dd_db *db, dd_err *err, int fd, uint32_t psize,
		  uint64_t map_bytes, const char *file)
{
	size_t words = (size_t)(map_bytes / psize / LG_PER_WORD + 1);
	void *bits = mmap(NULL, words * sizeof(uint64_t),
			  PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (bits == MAP_FAILED)
		return dd_err_set(err, DD_ENOMEM, "guard map: %s",
				  strerror(errno));
	db->db_fd = fd;
	db->db_psize = psize;
	db->db_max_pg = map_bytes / psize - 1;
	db->db_sound = bits;
	db->db_sound_bytes = words * sizeof(uint64_t);
	snprintf(db->db_file, sizeof(db->db_file), "%s", file);
	return 0;
}

void dd_guard_close(dd_db *db)
{
	if (db->db_sound)
		munmap((void *)db->db_sound, db->db_sound_bytes);
	db->db_sound = NULL;
}

static unsigned lg_memo(const dd_db *db, uint64_t pgno)
{
	uint64_t w = atomic_load_explicit(&db->db_sound[pgno / LG_PER_WORD],
					  memory_order_relaxed);

	return (unsigned)(w >> (pgno % LG_PER_WORD * 4)) & 15u;
}

static void lg_memo_set(dd_db *db, uint64_t pgno, unsigned v)
{
	_Atomic uint64_t *w = &db->db_sound[pgno / LG_PER_WORD];
	unsigned shift = (unsigned)(pgno % LG_PER_WORD * 4);
	uint64_t old = atomic_load_explicit(w, memory_order_relaxed), new;

	do {
		new = (old & ~((uint64_t)15 << shift)) | (uint64_t)v << shift;
	} while (!atomic_compare_exchange_weak_explicit(
		w, &old, new, memory_order_relaxed, memory_order_relaxed));
}

/* ---- pages ---------------------------------------------------------------*/

static const char *lg_tree_name(int tree)
{
	return tree == DD_TREE_MAIN ? "(main)" : tree == DD_TREE_FREE
		? "(free list)" : dd_db_names[tree];
}

static enum dd_lm_tree_kind lg_kind(int tree)
{
	return tree == DD_TREE_MAIN ? LM_TREE_MAIN : tree == DD_TREE_FREE
		? LM_TREE_FREE : LM_TREE_TABLE;
}

int dd_guard_bad(const dd_txn *txn, dd_err *err, int tree, uint64_t pgno,
		  const char *what)
{
	return dd_db_damage(err, "%s: page %llu of LMDB table "
			    "'%s': %s",
			    txn->tx_db->db_file, (unsigned long long)pgno,
			    lg_tree_name(tree), what);
}

/*
 * Page pgno's bytes, read with pread: into the txn's cache of branch
 * pages (upper levels are read on every descent, and a snapshot's pages
 * never change), or the one buffer for a leaf.  Not through LMDB's map:
 * pages the guard alone touches -- a writer's LMDB reads its changed
 * upper pages from its own copies -- would fault into this process,
 * and the page-cache copy costs less than the faults (measured: the map
 * made `dedup put` of a duplicate 1 GiB take half again as many faults).
 */
/* The branch-page cache: one block for pages, page numbers, and each
 * set's next way to replace. */
static int lg_cache_alloc(dd_txn *txn, dd_err *err)
{
	struct dd_guard_snap *gs = &txn->tx_guard;
	size_t psize = txn->tx_db->db_psize;
	size_t n = (txn->tx_write ? DD_GUARD_CACHE_WRITE : DD_GUARD_CACHE_READ) /
		   psize / DD_GUARD_WAYS * DD_GUARD_WAYS;
	uint8_t *p;

	if (n < DD_GUARD_WAYS)
		n = DD_GUARD_WAYS;
	p = dd_calloc(1, n * (psize + sizeof(uint64_t)) + n / DD_GUARD_WAYS);
	if (!p)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	gs->gs_slot_pgno = (uint64_t *)p;
	gs->gs_slots = p + n * sizeof(uint64_t);
	gs->gs_slot_next = gs->gs_slots + n * psize;
	gs->gs_nslots = n;
	return 0;
}

static int lg_read_page(dd_txn *txn, dd_err *err, uint64_t pgno, bool leaf,
			const uint8_t **out)
{
	const dd_db *db = txn->tx_db;
	struct dd_guard_snap *gs = &txn->tx_guard;
	uint8_t *buf = gs->gs_buf;
	size_t slot = 0, set;
	int rc;

	if (!leaf) {
		if (!gs->gs_nslots && (rc = lg_cache_alloc(txn, err)) != 0)
			return rc;
		/* DD_GUARD_WAYS slots per set, the set by a hash of the page
		 * number (a table's branch pages lie all over the file) */
		set = (size_t)((pgno * 0x9E3779B97F4A7C15ull) >> 32) %
		      (gs->gs_nslots / DD_GUARD_WAYS) * DD_GUARD_WAYS;
		for (unsigned w = 0; w < DD_GUARD_WAYS; w++) {
			if (gs->gs_slot_pgno[set + w] == pgno) {
				*out = gs->gs_slots +
				       (set + w) * db->db_psize;
				return 0;
			}
		}
		/* replace the ways of a set in turn */
		slot = set + gs->gs_slot_next[set / DD_GUARD_WAYS]++ %
			     DD_GUARD_WAYS;
		buf = gs->gs_slots + slot * db->db_psize;
		gs->gs_slot_pgno[slot] = 0;
	}
	rc = dd_io_pread_full(err, db->db_fd, buf, db->db_psize,
			      pgno * db->db_psize, db->db_file);
	if (rc)
		return rc;
	if (!leaf)
		gs->gs_slot_pgno[slot] = pgno;
	*out = buf;
	return 0;
}

/* What a page passed as, for the memo: never 0. */
static unsigned lg_role(enum dd_lm_tree_kind kind, bool leaf)
{
	return 1u + 2u * (unsigned)kind + leaf;
}

/*
 * Page pgno of `tree`, which must be sound as a leaf or a branch.  One
 * that passed as that before is read only when the caller needs its
 * bytes (`need`; else *out is NULL): a writer's lookups would otherwise
 * fault in leaves LMDB itself reads from its own changed copies.
 */
int dd_guard_page(dd_txn *txn, dd_err *err, int tree, uint64_t pgno,
		   bool leaf, bool need, const uint8_t **out)
{
	dd_db *db = txn->tx_db;
	struct dd_guard_snap *gs = &txn->tx_guard;
	enum dd_lm_tree_kind kind = lg_kind(tree);
	unsigned role = lg_role(kind, leaf);
	const uint8_t *pg = NULL;
	const char *why;
	int rc;

	*out = NULL;
	if (pgno < 2 || pgno > gs->gs_last_pg)
		return dd_guard_bad(txn, err, tree, pgno,
			      "a page number outside the file");
	if (!need && lg_memo(db, pgno) == role)
		return 0;
	rc = lg_read_page(txn, err, pgno, leaf, &pg);
	if (rc)
		return rc;
	if (lg_memo(db, pgno) == role && dd_get_le64(pg) == pgno &&
	    (dd_get_le16(pg + 10) & LM_P_KINDS) ==
		    (leaf ? LM_P_LEAF : LM_P_BRANCH)) {
		*out = pg;
		return 0;
	}
	why = dd_lm_page_verify(pg, db->db_psize, pgno, gs->gs_last_pg, leaf,
			     kind);
	if (why)
		return dd_guard_bad(txn, err, tree, pgno, why);
	lg_memo_set(db, pgno, role);
	*out = pg;
	return 0;
}

/* ---- descending ------------------------------------------------------------*/

enum lg_to { LG_KEY, LG_FIRST, LG_LAST };

static void lg_fence(uint8_t *to, unsigned *len, const uint8_t *node)
{
	*len = dd_lm_node_ksize(node);
	memcpy(to, dd_lm_node_key(node), *len);
}

/* From page pgno at level `from` of cur's tree down to a leaf, as
 * mdb_page_search_root goes: by key, leftmost or rightmost.  Fills the
 * levels below `from`, and cur's leaf and last key.  With f, from the
 * root: narrows f to the keys whose descent is this one. */
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
		lg_memo_set(txn->tx_db, pgno, 0);
		return dd_guard_bad(txn, err, tree, pgno, "keys outside the range "
			      "its parent page sends to it");
	}
	return 0;
}

static int lg_down(dd_txn *txn, dd_err *err, struct dd_guard_cur *cur,
		   unsigned from, uint64_t pgno, enum lg_to to,
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
		if (to == LG_FIRST)
			i = 0;
		else if (to == LG_LAST)
			i = n ? n - 1 : 0;
		else
			i = dd_lm_search(pg, leaf, key, klen, &exact);
		if (!leaf && to == LG_KEY)
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

static int lg_from_root(dd_txn *txn, dd_err *err, struct dd_guard_cur *cur,
			enum lg_to to, const void *key, size_t klen,
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
 * right, one node right, then leftmost down to the next leaf. */
static int lg_step(dd_txn *txn, dd_err *err, struct dd_guard_cur *cur)
{
	const uint8_t *pg = NULL;
	int l, rc;

	for (l = (int)cur->gc_depth - 2; l >= 0; l--)
		if (cur->gc_lv[l].idx + 1 < cur->gc_lv[l].nkeys)
			break;
	if (l < 0) {
		cur->gc_at = false; /* the last leaf: LMDB's step ends */
		return 0;
	}
	rc = dd_guard_page(txn, err, cur->gc_tree, cur->gc_lv[l].pgno, false, true,
		     &pg);
	if (rc)
		return rc;
	cur->gc_lv[l].idx++;
	return lg_down(txn, err, cur, (unsigned)l + 1,
		       dd_lm_node_child(dd_lm_node(pg, cur->gc_lv[l].idx)), LG_FIRST,
		       NULL, 0, NULL);
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
		       LG_FIRST, NULL, 0, NULL);
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
static bool lg_covers(const struct dd_guard_leaf *c, enum lg_to to,
		      const void *key, size_t klen)
{
	const struct dd_guard_fences *f = &c->gl_fences;

	if (!c->gl_valid)
		return false;
	if (to == LG_FIRST)
		return f->gf_lo_inf;
	if (to == LG_LAST)
		return f->gf_hi_inf;
	return (f->gf_lo_inf ||
		dd_lm_cmp(key, klen, f->gf_lo, f->gf_lo_len) >= 0) &&
	       (f->gf_hi_inf || dd_lm_cmp(key, klen, f->gf_hi, f->gf_hi_len) < 0);
}

/* The leaf of the descent `to`, checked; read too with `read_leaf` (a
 * cursor needs its last key). */
static int lg_leaf(dd_txn *txn, dd_err *err, int tree, enum lg_to to,
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
	rc = lg_from_root(txn, err, &c->gl_cur, to, key, klen, &c->gl_fences);
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
	rc = lg_leaf(txn, err, tree, op == DD_GUARD_APPEND ? LG_LAST
								: LG_KEY,
			 key, klen, false, &c);

	if (!rc && op == DD_GUARD_DEL && !c->gl_neighbours) {
		rc = lg_neighbours(txn, err, &c->gl_cur);
		c->gl_neighbours = rc == 0;
	}
	return rc;
}

int dd_guard_seek(dd_txn *txn, dd_err *err, struct dd_guard_cur *cur,
		  const void *key, size_t klen)
{
	struct dd_guard_leaf *c;
	int rc;

	if (txn->tx_db->db_guard_off)
		return 0;
	rc = lg_leaf(txn, err, cur->gc_tree, key ? LG_KEY : LG_FIRST,
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
	if (lg_memo(db, ov) == lg_role(LM_TREE_FREE, true))
		return 0;
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
	lg_memo_set(db, ov, lg_role(LM_TREE_FREE, true)); /* its run */
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
	rc = lg_from_root(txn, err, &cur, LG_FIRST, NULL, 0, NULL);
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

/* ---- a transaction's snapshot ----------------------------------------------*/

static int lg_record(dd_txn *txn, dd_err *err, int tree, const uint8_t *p)
{
	struct dd_lm_db db;

	dd_lm_db_decode(p, &db);
	/* the free list is keyed by integer txnid; every other table by
	 * bytes */
	if (db.flags != (tree == DD_TREE_FREE ? 0x08 : 0) ||
	    (db.root != LM_P_INVALID &&
	     (db.depth == 0 || db.depth > LM_MAXDEPTH)))
		return dd_guard_bad(txn, err, tree, 0, "a damaged table record");
	txn->tx_guard.gs_tree[tree].root = db.root;
	txn->tx_guard.gs_tree[tree].depth = db.root == LM_P_INVALID ? 0
								     : db.depth;
	return 0;
}

/* The meta page of the snapshot with this txnid, in buf. */
static int lg_meta(dd_txn *txn, dd_err *err, uint64_t txnid, uint8_t *buf,
		   const uint8_t **out)
{
	const dd_db *db = txn->tx_db;

	for (unsigned m = 0; m < 2; m++) {
		const uint8_t *p;
		int rc = dd_io_pread_full(err, db->db_fd, buf, LM_PAGEHDR +
					  LM_META_TXNID + 8,
					  (uint64_t)m * db->db_psize,
					  db->db_file);

		if (rc)
			return rc;
		p = buf + LM_PAGEHDR;
		if (dd_get_le32(p) == LM_MAGIC &&
		    dd_get_le32(p + 4) == LM_DATA_VERSION &&
		    dd_get_le64(p + LM_META_TXNID) == txnid) {
			*out = buf;
			return 0;
		}
	}
	return DD_DB_CHECK_RETRY;
}

int dd_guard_begin(dd_txn *txn, dd_err *err)
{
	struct dd_guard_snap *gs = &txn->tx_guard;
	dd_db *db = txn->tx_db;
	uint8_t metabuf[LM_PAGEHDR + LM_META_TXNID + 8];
	uint64_t txnid = (uint64_t)mdb_txn_id(txn->tx_mdb) - txn->tx_write;
	const uint8_t *meta;
	struct stat st;
	int rc;

	if (db->db_guard_off)
		return 0;
	if (!gs->gs_buf && !(gs->gs_buf = dd_malloc(db->db_psize)))
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	if (gs->gs_nslots) /* renewed: another snapshot */
		memset(gs->gs_slot_pgno, 0, gs->gs_nslots * sizeof(uint64_t));
	for (int t = 0; t < DD_DBI_COUNT; t++)
		gs->gs_leaf[t].gl_valid = false; /* a new snapshot */
	rc = lg_meta(txn, err, txnid, metabuf, &meta);
	if (rc)
		return rc;
	if (fstat(db->db_fd, &st) != 0)
		return dd_err_set(err, dd_errno_code(errno), "%s: %s",
				  db->db_file, strerror(errno));
	/* The file must hold every page the meta page counts.  LMDB maps it
	 * and trusts that: a file cut short -- a partial copy, a full disk,
	 * damage -- makes its first touch of a missing page a SIGBUS.
	 * Writers grow the file before they write the meta page that counts
	 * the new pages, so a healthy file always passes. */
	gs->gs_last_pg = dd_get_le64(meta + LM_PAGEHDR + LM_META_LAST_PG);
	if (gs->gs_last_pg >= (uint64_t)st.st_size / db->db_psize ||
	    gs->gs_last_pg > db->db_max_pg)
		return dd_db_damage(err, "%s: %lld bytes, too short "
				    "for the %llu pages its meta page counts "
				    "(truncated or damaged)", db->db_file,
				    (long long)st.st_size,
				    (unsigned long long)gs->gs_last_pg + 1);
	rc = lg_record(txn, err, DD_TREE_FREE, meta + LM_PAGEHDR + LM_META_DBS);
	if (!rc)
		rc = lg_record(txn, err, DD_TREE_MAIN,
			       meta + LM_PAGEHDR + LM_META_DBS + LM_DB_SIZE);
	/* LMDB looks each table's record up in the main table by name */
	for (int t = 0; !rc && t < DD_DBI_COUNT; t++) {
		const char *name = dd_db_names[t];
		struct dd_guard_cur cur;
		const uint8_t *pg = NULL, *node;
		bool exact;
		unsigned i;

		gs->gs_tree[t].root = LM_P_INVALID;
		gs->gs_tree[t].depth = 0;
		dd_guard_cur_init(&cur, DD_TREE_MAIN);
		rc = lg_from_root(txn, err, &cur, LG_KEY, name, strlen(name),
				  NULL);
		if (rc || !cur.gc_at)
			continue;
		rc = dd_guard_page(txn, err, DD_TREE_MAIN,
			     cur.gc_lv[cur.gc_depth - 1].pgno, true, true, &pg);
		if (rc)
			break;
		i = dd_lm_search(pg, true, name, strlen(name), &exact);
		if (!exact)
			continue; /* not created yet */
		node = dd_lm_node(pg, i);
		if (!(dd_lm_node_flags(node) & LM_F_SUBDATA))
			rc = dd_guard_bad(txn, err, DD_TREE_MAIN,
				    cur.gc_lv[cur.gc_depth - 1].pgno,
				    "a table name without a table record");
		else
			rc = lg_record(txn, err, t, dd_lm_node_key(node) +
				       dd_lm_node_ksize(node));
	}
	if (!rc && txn->tx_write)
		rc = dd_guard_table(txn, err, DD_TREE_FREE);
	/* a snapshot another process committed: its free list against the
	 * pages in use, before LMDB hands one to this writer */
	if (!rc && txn->tx_write &&
	    atomic_load(&db->db_free_checked) != txnid) {
		rc = dd_guard_free_pages(txn, err);
		if (!rc)
			atomic_store(&db->db_free_checked, txnid);
	}
	return rc;
}

void dd_guard_end(dd_txn *txn)
{
	dd_free(txn->tx_guard.gs_buf);
	dd_free(txn->tx_guard.gs_slot_pgno); /* the cache's block */
	txn->tx_guard.gs_buf = NULL;
	txn->tx_guard.gs_slot_pgno = NULL;
	txn->tx_guard.gs_nslots = 0;
}
