/*
 * guard.c -- checks the pages an LMDB operation will read, before LMDB
 * reads them.  This file owns the pages: which passed, reading and
 * checking one, and a transaction's snapshot (its meta page and table
 * roots); guard_walk.c the walks each LMDB operation makes, and the
 * entry points catalog/ calls; guard_free.c the free list against the
 * pages in use.
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
 * A read transaction's get is answered from the leaf its guard call
 * checked (dd_guard_get, guard_walk.c): LMDB's own descent would only
 * repeat the walk.
 *
 * Pages are read with pread (lg_read_page), bounded by the file's size.
 * Reading them in LMDB's map instead was tried twice (ae6f531, 693f4dc):
 * with the page cache warm it saves a copy and a system call a page (a
 * re-put into 4 M entries: 0.3-0.4 s of CPU), but with the DDT larger
 * than memory each first look became a synchronous 4 KiB fault
 * (MADV_RANDOM), where pread has the kernel's read-ahead: a re-put in a
 * 150 MiB cgroup, page cache dropped, 5.3-7.4 s against 4.0-5.8 s.
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
	dd_free(atomic_exchange(&db->db_guard_wcache, NULL));
}

unsigned dd_guard_memo(const dd_db *db, uint64_t pgno)
{
	uint64_t w = atomic_load_explicit(&db->db_sound[pgno / LG_PER_WORD],
					  memory_order_relaxed);

	return (unsigned)(w >> (pgno % LG_PER_WORD * 4)) & 15u;
}

void dd_guard_memo_set(dd_db *db, uint64_t pgno, unsigned v)
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
/* The branch-page cache: one block for page numbers, pages, and each
 * set's next way to replace.  Only the numbers and the ways are
 * cleared: a slot's page is read only once its number is set, and the
 * pages untouched stay unfaulted -- a write transaction's 4 MiB,
 * cleared whole by calloc, was 1,024 page faults (about 17 ms here) per
 * transaction whether it read ten branch pages or a thousand.  For the
 * same reason a write transaction's block is kept in the dd_db for the
 * next one (dd_guard_end; LMDB runs one at a time, and the exchange
 * makes two at once merely allocate). */
static size_t lg_cache_slots(const dd_txn *txn)
{
	size_t psize = txn->tx_db->db_psize;
	size_t n = (txn->tx_write ? DD_GUARD_CACHE_WRITE : DD_GUARD_CACHE_READ) /
		   psize / DD_GUARD_WAYS * DD_GUARD_WAYS;

	return n < DD_GUARD_WAYS ? DD_GUARD_WAYS : n;
}

static int lg_cache_alloc(dd_txn *txn, dd_err *err)
{
	struct dd_guard_snap *gs = &txn->tx_guard;
	size_t psize = txn->tx_db->db_psize, n = lg_cache_slots(txn);
	uint8_t *p = NULL;

	if (txn->tx_write)
		p = atomic_exchange(&txn->tx_db->db_guard_wcache, NULL);
	if (!p)
		p = dd_malloc(n * (sizeof(uint64_t) + psize) +
			      n / DD_GUARD_WAYS);
	if (!p)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	gs->gs_slot_pgno = (uint64_t *)p;
	gs->gs_slots = p + n * sizeof(uint64_t);
	gs->gs_slot_next = gs->gs_slots + n * psize;
	gs->gs_nslots = n;
	memset(gs->gs_slot_pgno, 0, n * sizeof(uint64_t));
	memset(gs->gs_slot_next, 0, n / DD_GUARD_WAYS);
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
unsigned dd_guard_role(enum dd_lm_tree_kind kind, bool leaf)
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
	unsigned role = dd_guard_role(kind, leaf);
	const uint8_t *pg = NULL;
	const char *why;
	int rc;

	*out = NULL;
	if (pgno < 2 || pgno > gs->gs_last_pg)
		return dd_guard_bad(txn, err, tree, pgno,
			      "a page number outside the file");
	if (pgno >= gs->gs_file_pgs)
		return dd_guard_bad(txn, err, tree, pgno,
			      "past the end of the file (cut short?)");
	if (!need && dd_guard_memo(db, pgno) == role)
		return 0;
	rc = lg_read_page(txn, err, pgno, leaf, &pg);
	if (rc)
		return rc;
	if (dd_guard_memo(db, pgno) == role && dd_get_le64(pg) == pgno &&
	    (dd_get_le16(pg + 10) & LM_P_KINDS) ==
		    (leaf ? LM_P_LEAF : LM_P_BRANCH)) {
		*out = pg;
		return 0;
	}
	why = dd_lm_page_verify(pg, db->db_psize, pgno, gs->gs_last_pg, leaf,
			     kind);
	if (why)
		return dd_guard_bad(txn, err, tree, pgno, why);
	dd_guard_memo_set(db, pgno, role);
	*out = pg;
	return 0;
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

	gs->gs_ready = false;
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
	/* LMDB maps the file and trusts it: a page it reads past the
	 * file's end -- cut short by a partial copy, a full disk, damage --
	 * is a SIGBUS.  So every page the guard passes must be in the file
	 * (dd_guard_page).  Not every page the meta page counts need be: a
	 * page a write transaction took and freed again ("loose") goes back
	 * to the free list unwritten (mdb_page_flush skips it), so a healthy
	 * file can end before the last page counted, and LMDB never reads a
	 * free page.  (This check was once of the whole count, and refused a
	 * sound 4 M-entry catalog whose last page was such a one.) */
	gs->gs_last_pg = dd_get_le64(meta + LM_PAGEHDR + LM_META_LAST_PG);
	gs->gs_file_pgs = (uint64_t)st.st_size / db->db_psize;
	if (gs->gs_last_pg > db->db_max_pg)
		return dd_db_damage(err, "%s: its meta page counts %llu pages, "
				    "more than the map holds (damaged)",
				    db->db_file,
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
		rc = dd_guard_from_root(txn, err, &cur, DD_GUARD_KEY, name, strlen(name),
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
	gs->gs_txnid = txnid;
	gs->gs_ready = !rc;
	return rc;
}

bool dd_guard_holds(const dd_txn *txn)
{
	const struct dd_guard_snap *gs = &txn->tx_guard;

	return !txn->tx_write && gs->gs_ready &&
	       (uint64_t)mdb_txn_id(txn->tx_mdb) == gs->gs_txnid;
}

void dd_guard_end(dd_txn *txn)
{
	uint8_t *block = (uint8_t *)txn->tx_guard.gs_slot_pgno;

	dd_free(txn->tx_guard.gs_buf);
	/* the cache's block: a write transaction's kept for the next */
	if (block && txn->tx_write)
		block = atomic_exchange(&txn->tx_db->db_guard_wcache, block);
	dd_free(block);
	txn->tx_guard.gs_buf = NULL;
	txn->tx_guard.gs_slot_pgno = NULL;
	txn->tx_guard.gs_nslots = 0;
}
