/*
 * check.c -- a structural check of LMDB's data file, read with pread.
 *
 * Why: LMDB keeps no checksums and trusts every page it maps.  A damaged
 * page number, key count or node offset makes it follow a pointer out of
 * its page or its file: an assertion, a SIGSEGV or a SIGBUS, not an error
 * (docs/testing.md, "damaged LMDB file").  This walks every tree of the
 * newest snapshot through pread and bounds-checked decoding, so damage
 * becomes one DD_ECORRUPT line naming the page, before LMDB touches it.
 *
 * What is checked, for the free list, the main table and every named
 * table: each page's number is its own, its kind is the one its depth
 * calls for, its key count and free-space bounds fit the page, each node
 * lies inside the page, branch children and overflow runs lie inside the
 * file and are reached once, no tree reaches a page the free list names,
 * and the page and entry counts of the table's record agree with what
 * the walk found.  Keys and values themselves are libdedup's own bytes,
 * checked where they are decoded (ddt.c, maps.c).
 *
 * The layout is LMDB 0.9's data format 1 on a 64-bit host (lmdb.h,
 * mdb.c of liblmdb 0.9.24, Debian 12): a meta page's page number is 0 or
 * 1; which one is newest is the one whose txnid the read transaction
 * holding the snapshot reports.  The read transaction keeps LMDB from
 * reusing the snapshot's pages while they are read, so a writer in
 * another process cannot make a healthy file look damaged.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dedup.h"
#include "common/alloc.h"
#include "common/endian.h"
#include "common/io.h"
#include "catalog/db_internal.h"
#include "catalog/lmdb_page.h"

#define DD_LM_NOBOUND SIZE_MAX

struct dd_lm_check {
	int fd;
	const char *path;
	uint32_t psize;
	uint64_t last_pg;
	uint8_t *seen;          /* a bit per page: reached by a tree */
	uint8_t *freed;         /* a bit per page: named by the free list */
	uint8_t *page;          /* the page being read */
	uint8_t *big;           /* a value read from overflow pages */
	size_t big_cap;
	dd_err *err;
	uint64_t bad_pgno;      /* the page dd_lm_bad named last */
	/* With on_damage, a damaged page of a named table is reported with
	 * the key range its parent sends to it, and the walk goes on past
	 * it (dd_db_check_pages).  bound[d][0..1] is the range [lo, hi) of
	 * the page at depth d of the table being walked: the keys its
	 * parent gives (trusted: that parent passed dd_lm_page_verify and
	 * its own bounds), DD_LM_NOBOUND in blen for the table's ends. */
	dd_db_damage_fn on_damage;
	void *damage_ctx;
	uint64_t ndamaged;
	char first_msg[DD_ERRMSG_MAX];  /* the first damaged page's */
	uint8_t (*bound)[2][LM_MAXKEY];
	size_t blen[LM_MAXDEPTH][2];
};

static int dd_lm_bad(struct dd_lm_check *c, const char *table, uint64_t pgno,
		  const char *what)
{
	c->bad_pgno = pgno;
	return dd_db_damage(c->err, "%s: page %llu of LMDB table "
			    "'%s': %s", c->path,
			    (unsigned long long)pgno, table, what);
}

static bool dd_lm_bit(const uint8_t *bits, uint64_t i)
{
	return bits[i / 8] >> (i % 8) & 1;
}

static void dd_lm_set(uint8_t *bits, uint64_t i)
{
	bits[i / 8] |= (uint8_t)(1u << (i % 8));
}

/* Reads len bytes from the start of page pgno into buf: the whole page
 * or only its header.  The header must name the page. */
static int dd_lm_pread(struct dd_lm_check *c, const char *table, uint64_t pgno,
		    uint8_t *buf, size_t len)
{
	size_t got = 0;
	int rc = dd_io_pread(c->err, c->fd, buf, len, pgno * c->psize, &got,
			     c->path);

	if (rc)
		return rc;
	if (got < len)
		return dd_lm_bad(c, table, pgno, "beyond the end of the file");
	if (dd_get_le64(buf) != pgno)
		return dd_lm_bad(c, table, pgno, "its header names another page");
	return 0;
}

static int dd_lm_read(struct dd_lm_check *c, const char *table, uint64_t pgno)
{
	return dd_lm_pread(c, table, pgno, c->page, c->psize);
}

/* Marks pages [pgno, pgno + n) as reached by a tree: each once, none of
 * them a meta page or past the last page, none on the free list. */
static int dd_lm_reach(struct dd_lm_check *c, const char *table, uint64_t pgno,
		    uint64_t n)
{
	if (pgno < 2 || n == 0 || pgno > c->last_pg ||
	    n > c->last_pg - pgno + 1)
		return dd_lm_bad(c, table, pgno, "a page number outside the file");
	for (uint64_t i = pgno; i < pgno + n; i++) {
		if (dd_lm_bit(c->seen, i))
			return dd_lm_bad(c, table, i, "reached twice");
		if (c->freed && dd_lm_bit(c->freed, i))
			return dd_lm_bad(c, table, i, "in use and on the free list");
		dd_lm_set(c->seen, i);
	}
	return 0;
}

/* A leaf node's value, in a page dd_lm_page_verify passed: inline, or a
 * run of overflow pages, which must be reached once and begin with an
 * overflow page of the run's length.  Counts the overflow pages.  With
 * `load`, *val gets the value wherever it is (a long free-list record
 * lives in overflow pages); else only an inline one. */
static int dd_lm_leaf_value(struct dd_lm_check *c, const char *table,
			 const uint8_t *node, bool load, uint64_t *overflow,
			 const uint8_t **val, size_t *vlen)
{
	unsigned ksize = dd_lm_node_ksize(node);
	size_t dsize = dd_lm_node_dsize(node);
	uint64_t ov, need;
	uint8_t hdr[LM_PAGEHDR];
	int rc;

	*val = NULL;
	if (!(dd_lm_node_flags(node) & LM_F_BIGDATA)) {
		*val = node + LM_NODEHDR + ksize;
		*vlen = dsize;
		return 0;
	}
	need = (LM_PAGEHDR + dsize + c->psize - 1) / c->psize;
	ov = dd_get_le64(node + LM_NODEHDR + ksize);
	rc = dd_lm_reach(c, table, ov, need);
	if (!rc)
		rc = dd_lm_pread(c, table, ov, hdr, sizeof(hdr));
	if (rc)
		return rc;
	if ((dd_get_le16(hdr + 10) & LM_P_KINDS) != LM_P_OVERFLOW ||
	    dd_get_le32(hdr + 12) != need)
		return dd_lm_bad(c, table, ov, "not the overflow run its node names");
	*overflow += need;
	if (!load)
		return 0;
	if (dsize > c->big_cap) {
		uint8_t *big = dd_realloc(c->big, dsize);

		if (!big)
			return dd_err_set(c->err, DD_ENOMEM, "out of memory");
		c->big = big;
		c->big_cap = dsize;
	}
	rc = dd_io_pread_full(c->err, c->fd, c->big, dsize,
			      ov * c->psize + LM_PAGEHDR, c->path);
	*val = c->big;
	*vlen = dsize;
	return rc;
}

/* The range of child i of the branch page in c->page, at depth d, into
 * depth d + 1: from its key (node 0: the page's own lower bound) to the
 * next node's key (the last node: the page's own upper bound). */
static void dd_lm_child_bounds(struct dd_lm_check *c, int d, unsigned i,
			    unsigned nkeys)
{
	for (int side = 0; side < 2; side++) {
		unsigned n = i + (unsigned)side;

		if (n == 0 || n >= nkeys) {
			c->blen[d + 1][side] = c->blen[d][side];
			if (c->blen[d][side] != DD_LM_NOBOUND)
				memcpy(c->bound[d + 1][side], c->bound[d][side],
				       c->blen[d][side]);
			continue;
		}
		const uint8_t *node = dd_lm_node(c->page, n);

		c->blen[d + 1][side] = dd_lm_node_ksize(node);
		memcpy(c->bound[d + 1][side], dd_lm_node_key(node),
		       dd_lm_node_ksize(node));
	}
}

/* The keys of the page in c->page (which dd_lm_page_verify passed: they
 * increase) lie in the range its parent sends to it: a key outside it
 * is one LMDB would never find, and would make the range reported for a
 * damaged child wrong. */
static const char *dd_lm_in_bounds(const struct dd_lm_check *c, int d,
				bool leaf)
{
	unsigned nkeys = dd_lm_nkeys(c->page), first = leaf ? 0 : 1;
	const uint8_t *node;

	if (nkeys <= first)
		return NULL;
	node = dd_lm_node(c->page, first);
	if (c->blen[d][0] != DD_LM_NOBOUND &&
	    dd_lm_cmp(dd_lm_node_key(node), dd_lm_node_ksize(node),
		      c->bound[d][0], c->blen[d][0]) < 0)
		return "a key below the range its parent gives";
	node = dd_lm_node(c->page, nkeys - 1);
	if (c->blen[d][1] != DD_LM_NOBOUND &&
	    dd_lm_cmp(dd_lm_node_key(node), dd_lm_node_ksize(node),
		      c->bound[d][1], c->blen[d][1]) >= 0)
		return "a key above the range its parent gives";
	return NULL;
}

/* Damage rc found at depth d of a named table: with on_damage, reported
 * with the key range that page covers, and 0 so that the walk goes on
 * past its subtree; otherwise (or an I/O error) rc.  Damage to LMDB's
 * own trees leaves nothing to trust: reported without a range, so that
 * on_damage learns the walk stops, and rc. */
static int dd_lm_skip(struct dd_lm_check *c, const char *table,
		   enum dd_lm_tree_kind kind, int d, int rc)
{
	struct dd_db_damage_page p = { .dp_table = table,
				       .dp_pgno = c->bad_pgno,
				       .dp_msg = c->err->de_msg };

	if (!c->on_damage || rc != DD_ECORRUPT)
		return rc;
	if (kind != LM_TREE_TABLE) {
		char msg[DD_ERRMSG_MAX];

		/* the callback may set the error: the walk's is this one */
		snprintf(msg, sizeof(msg), "%s", c->err->de_msg);
		p.dp_msg = msg;
		if (c->on_damage(c->damage_ctx, &p) != 0)
			return dd_err_set(c->err, DD_ECANCELED,
					  "catalog check stopped by its caller");
		return dd_err_set_msg(c->err, DD_ECORRUPT, msg);
	}
	if (c->blen[d][0] != DD_LM_NOBOUND) {
		p.dp_lo = c->bound[d][0];
		p.dp_lolen = c->blen[d][0];
	}
	if (c->blen[d][1] != DD_LM_NOBOUND) {
		p.dp_hi = c->bound[d][1];
		p.dp_hilen = c->blen[d][1];
	}
	if (c->ndamaged++ == 0)
		snprintf(c->first_msg, sizeof(c->first_msg), "%s",
			 c->err->de_msg);
	if (c->on_damage(c->damage_ctx, &p) != 0)
		return dd_err_set(c->err, DD_ECANCELED,
				  "catalog check stopped by its caller");
	return 0;
}

typedef int (*dd_lm_value_fn)(struct dd_lm_check *c, uint64_t pgno,
			   const uint8_t *node, const uint8_t *val,
			   size_t vlen);

/*
 * Walks one table's tree from its record: depth first, one page buffer,
 * so a level's pages are re-read for their children -- a stack of page
 * numbers and node indexes instead of pages keeps memory at one page.
 * `on_value` sees each leaf value (the main table's table records, the
 * free list's page lists); it may read pages, but must not use `node` or
 * `val` after it does.  A damaged page of a named table goes to
 * dd_lm_skip, which may let the walk go on past its subtree; the counts
 * of a table with such a page are not compared (they cannot agree).
 */
static int dd_lm_walk(struct dd_lm_check *c, const char *table,
		   const struct dd_lm_db *db, enum dd_lm_tree_kind kind,
		   dd_lm_value_fn on_value)
{
	struct { uint64_t pgno; unsigned next; } stack[LM_MAXDEPTH];
	uint64_t branch = 0, leaf = 0, overflow = 0, entries = 0;
	uint64_t damaged = c->ndamaged;
	int depth = 0, rc;

	c->blen[0][0] = c->blen[0][1] = DD_LM_NOBOUND;
	if (db->root == LM_P_INVALID) {
		if (db->depth || db->branch || db->leaf || db->overflow ||
		    db->entries)
			return dd_lm_skip(c, table, kind, 0,
				       dd_lm_bad(c, table, 0, "an empty table "
					      "with counts"));
		return 0;
	}
	if (db->depth == 0 || db->depth > LM_MAXDEPTH)
		return dd_lm_skip(c, table, kind, 0,
			       dd_lm_bad(c, table, db->root,
				      "an impossible tree depth"));
	rc = dd_lm_reach(c, table, db->root, 1);
	if (rc)
		return dd_lm_skip(c, table, kind, 0, rc);
	stack[0].pgno = db->root;
	stack[0].next = 0;
	while (depth >= 0) {
		uint64_t pgno = stack[depth].pgno;
		bool is_leaf = depth == db->depth - 1;
		unsigned nkeys, i = stack[depth].next;

		rc = dd_lm_read(c, table, pgno);
		if (!rc && i == 0) { /* the first visit; later ones re-read it */
			const char *why = dd_lm_page_verify(c->page, c->psize,
							 pgno, c->last_pg,
							 is_leaf, kind);

			if (!why && kind == LM_TREE_TABLE)
				why = dd_lm_in_bounds(c, depth, is_leaf);
			if (why)
				rc = dd_lm_bad(c, table, pgno, why);
			else
				is_leaf ? leaf++ : branch++;
		}
		if (rc) {
			rc = dd_lm_skip(c, table, kind, depth, rc);
			if (rc)
				return rc;
			depth--; /* past this page and its subtree */
			continue;
		}
		nkeys = dd_lm_nkeys(c->page);
		for (; i < nkeys; i++) {
			const uint8_t *node = dd_lm_node(c->page, i);
			const uint8_t *val;
			size_t vlen = 0;

			if (!is_leaf) {
				uint64_t child = dd_lm_node_child(node);

				if (kind == LM_TREE_TABLE)
					dd_lm_child_bounds(c, depth, i, nkeys);
				rc = dd_lm_reach(c, table, child, 1);
				if (rc) {
					rc = dd_lm_skip(c, table, kind,
						     depth + 1, rc);
					if (rc)
						return rc;
					continue; /* on to the next child */
				}
				/* descend; this page is re-read on return */
				stack[depth].next = i + 1;
				depth++;
				stack[depth].pgno = child;
				stack[depth].next = 0;
				break;
			}
			rc = dd_lm_leaf_value(c, table, node, on_value != NULL,
					   &overflow, &val, &vlen);
			if (!rc && val && on_value) {
				rc = on_value(c, pgno, node, val, vlen);
				/* it may have read other pages into c->page */
				if (!rc)
					rc = dd_lm_read(c, table, pgno);
			}
			if (rc)
				break;
			entries++;
		}
		if (rc) { /* a leaf's value: the leaf is damaged */
			rc = dd_lm_skip(c, table, kind, depth, rc);
			if (rc)
				return rc;
			depth--;
			continue;
		}
		if (i >= nkeys)
			depth--; /* this page is done */
	}
	if (c->ndamaged != damaged)
		return 0;
	if (branch != db->branch || leaf != db->leaf ||
	    overflow != db->overflow || entries != db->entries)
		return dd_lm_skip(c, table, kind, 0,
			       dd_lm_bad(c, table, db->root, "its table "
				      "record's page or entry counts disagree "
				      "with the tree"));
	return 0;
}

/* The free list: a value is a count and that many page numbers. */
static int dd_lm_free_value(struct dd_lm_check *c, uint64_t pgno,
			 const uint8_t *node, const uint8_t *val, size_t vlen)
{
	const char *why = dd_lm_page_list(val, vlen, c->last_pg);

	(void)node;
	if (why)
		return dd_lm_bad(c, "(free list)", pgno, why);
	for (uint64_t i = 1; i < vlen / 8; i++)
		dd_lm_set(c->freed, dd_get_le64(val + 8 * i));
	return 0;
}

/* The main table: each record of a named table is walked in turn.  The
 * name and the record are copied out first: the walk reuses c->page. */
static int dd_lm_main_value(struct dd_lm_check *c, uint64_t pgno,
			 const uint8_t *node, const uint8_t *val, size_t vlen)
{
	char name[64];
	size_t ksize = dd_get_le16(node + 6);
	struct dd_lm_db db;

	if (!(dd_get_le16(node + 4) & LM_F_SUBDATA))
		return 0; /* a plain value: libdedup keeps none here */
	snprintf(name, sizeof(name), "%.*s", (int)(ksize < 63 ? ksize : 63),
		 (const char *)node + LM_NODEHDR);
	(void)vlen;
	dd_lm_db_decode(val, &db);
	if (db.flags != 0) /* libdedup's tables use plain byte keys */
		return dd_lm_bad(c, name, pgno, "a damaged table record");
	return dd_lm_walk(c, name, &db, LM_TREE_TABLE, NULL);
}

/* Reads meta page m; true if it is a format-1 meta page. */
static bool dd_lm_meta(struct dd_lm_check *c, unsigned m, uint32_t psize,
		    uint8_t *buf)
{
	size_t got = 0;
	dd_err ignored;

	return dd_io_pread(&ignored, c->fd, buf, psize, (uint64_t)m * psize,
			   &got, c->path) == 0 && got == psize &&
	       dd_get_le32(buf + LM_PAGEHDR) == LM_MAGIC &&
	       dd_get_le32(buf + LM_PAGEHDR + 4) == LM_DATA_VERSION &&
	       (dd_get_le16(buf + 10) & LM_P_META);
}

int dd_db_check_file(dd_err *err, int fd, const char *path, uint32_t psize,
		     uint64_t txnid, dd_db_damage_fn on_damage, void *ctx)
{
	struct dd_lm_check c = { .fd = fd, .path = path, .psize = psize,
			      .err = err, .on_damage = on_damage,
			      .damage_ctx = ctx };

	struct dd_lm_db freedb, maindb;
	const uint8_t *meta = NULL;
	size_t nbits;
	int rc;

	if (psize < 512 || psize > 65536 || (psize & (psize - 1)))
		return dd_err_set(err, DD_EINVAL, "%s: page size %u", path,
				  psize);
	c.page = dd_malloc(2 * (size_t)psize);
	if (!c.page)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	for (unsigned m = 0; m < 2 && !meta; m++)
		if (dd_lm_meta(&c, m, psize, c.page + (size_t)m * psize) &&
		    dd_get_le64(c.page + (size_t)m * psize + LM_PAGEHDR +
			    LM_META_TXNID) == txnid)
			meta = c.page + (size_t)m * psize;
	if (!meta) {
		dd_free(c.page);
		return DD_DB_CHECK_RETRY; /* a writer committed since */
	}
	c.last_pg = dd_get_le64(meta + LM_PAGEHDR + LM_META_LAST_PG);
	dd_lm_db_decode(meta + LM_PAGEHDR + LM_META_DBS, &freedb);
	dd_lm_db_decode(meta + LM_PAGEHDR + LM_META_DBS + LM_DB_SIZE, &maindb);
	/* the free list is keyed by txnid (MDB_INTEGERKEY), the main table
	 * by name */
	if ((freedb.flags & ~0x08) != 0 || maindb.flags != 0) {
		dd_free(c.page);
		return dd_db_damage(err, "%s: the newest meta page's "
				    "table records are damaged", path);
	}
	dd_free(c.page);
	c.page = dd_malloc(psize);
	nbits = (size_t)(c.last_pg / 8 + 1);
	c.seen = c.last_pg < ((uint64_t)1 << 40) ? dd_calloc(1, nbits) : NULL;
	c.freed = c.seen ? dd_calloc(1, nbits) : NULL;
	c.bound = dd_malloc(LM_MAXDEPTH * sizeof(*c.bound));
	if (!c.page || !c.seen || !c.freed || !c.bound) {
		rc = c.last_pg >= ((uint64_t)1 << 40)
			     ? dd_lm_bad(&c, "(meta)", 0, "an impossible last page")
			     : dd_err_set(err, DD_ENOMEM, "out of memory");
	} else {
		rc = dd_lm_walk(&c, "(free list)", &freedb, LM_TREE_FREE,
			     dd_lm_free_value);
		/* the free list's own pages are in use: only the trees
		 * walked after it must avoid the pages it names */
		if (!rc)
			rc = dd_lm_walk(&c, "(main)", &maindb, LM_TREE_MAIN,
				     dd_lm_main_value);
	}
	/* each damaged page reported went on: the walk's result is the
	 * first one's message */
	if (!rc && c.ndamaged)
		rc = dd_err_set_msg(err, DD_ECORRUPT, c.first_msg);
	dd_free(c.bound);
	dd_free(c.page);
	dd_free(c.big);
	dd_free(c.seen);
	dd_free(c.freed);
	return rc;
}
