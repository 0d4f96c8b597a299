/*
 * scrub_pages.c -- damaged pages of the catalog, what each held, and the
 * snapshots and offsets they affect.
 *
 * scrub's pass 0 walks every page of the LMDB file (catalog/check.c).  A
 * damaged page of one of libdedup's tables hides the entries whose keys
 * lie in the range its parent page sends to it; the walk reports that
 * range and goes on past the page.  The pages' bounds come from parents
 * that passed the check, keys inside their own bounds: a range is never
 * narrower than what the damaged page covered.  Scrub's read transaction
 * is then told to pass over those ranges (dd_txn_skip, catalog/cursor.c),
 * so that every walk reads every other page and none of these, and scrub
 * goes on.  What each table's damage means (format/store.md §10):
 *
 *   bmap   the block-map entries from one (snapshot id, position) key up
 *          to another (format/store.md §4): each snapshot in the range
 *          is named with the offsets, its blocks are named from its
 *          manifest;
 *   ddt    (the live one) the entries of the blocks whose hashes lie in
 *          the range (format/ddt.md §2): those blocks cannot be located,
 *          nor checked; each snapshot that uses one is named with the
 *          runs of bytes they hold, from the block maps;
 *          (the other one) nothing: it is empty but during a gc's
 *          compaction (format/ddt.md §4);
 *   snap   the records of the snapshots whose names lie in the range:
 *          the manifests name them, and each is checked as the manifest
 *          has it (its map, its blocks);
 *   packs  the committed ends of the packs in the range: their blocks
 *          are read and checked, but not against an end;
 *   pend   the writers in progress in the range: a manifest published
 *          by one of them is not held against the catalog;
 *   meta   the store's settings and counters: open read the ones scrub
 *          needs (a page that cannot be read stops every transaction at
 *          its start -- each reads ddt.live -- so the store does not open
 *          and that error names the page: scrub never gets here).
 *
 * Damage to LMDB's own trees (the free list, the table of tables) or to
 * the meta page's table records leaves nothing to trust -- which page
 * holds which table -- and stops scrub there, as before, with the page
 * named.  Each report ends with the way out: the catalog is an index of
 * the packs and manifests, which dedup repair rebuilds it from.  Nothing
 * is written to a damaged catalog.
 */
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/endian.h"
#include "store/manifest.h"
#include "store/store_internal.h"

enum dd_sp_table {
	DD_SP_META, DD_SP_DDT0, DD_SP_DDT1, DD_SP_SNAP, DD_SP_BMAP,
	DD_SP_PEND, DD_SP_PACKS, DD_SP_NTABLES
};

static const char *const dd_sp_names[DD_SP_NTABLES] = {
	"meta", "ddt0", "ddt1", "snap", "bmap", "pend", "packs",
};

typedef struct dd_spage {
	int sp_table;                    /* enum dd_sp_table */
	uint64_t sp_pgno;
	uint8_t *sp_lo, *sp_hi;          /* NULL: the table's end */
	size_t sp_lolen, sp_hilen;
	uint64_t sp_id_lo, sp_pos_lo;    /* bmap: the first key it may hold */
	uint64_t sp_id_hi, sp_pos_hi;    /* bmap: the first key past it */
	char sp_msg[DD_ERRMSG_MAX];      /* its check's DD_ECORRUPT line */
} dd_spage;

struct dd_scrub_pages {
	dd_spage *p;
	size_t n, cap;
	bool stop;           /* LMDB's own trees: nothing to go on with */
	/* per table, the pages' ranges as dd_txn_skip takes them */
	dd_key_range *kr[DD_SP_NTABLES];
	size_t nkr[DD_SP_NTABLES];
};

static uint8_t *dd_sp_copy(const uint8_t *p, size_t len)
{
	uint8_t *c = dd_malloc(len ? len : 1);

	if (c)
		memcpy(c, p, len);
	return c;
}

static int dd_scrub_pages_add(void *ctx, const dd_db_damage_page *dp)
{
	dd_scrub_pages *sp = ctx;
	dd_spage *pg;
	int t;

	for (t = 0; t < DD_SP_NTABLES; t++)
		if (!strcmp(dp->dp_table, dd_sp_names[t]))
			break;
	if (t == DD_SP_NTABLES) {
		/* LMDB's free list or table of tables: which page holds
		 * what is unknown, nothing below can be trusted */
		sp->stop = true;
		return 0;
	}
	if (sp->n == sp->cap) {
		size_t n = sp->cap ? 2 * sp->cap : 8;
		dd_spage *np = dd_realloc(sp->p, n * sizeof(*np));

		if (!np)
			return -1;
		sp->p = np;
		sp->cap = n;
	}
	pg = &sp->p[sp->n];
	memset(pg, 0, sizeof(*pg));
	pg->sp_table = t;
	pg->sp_pgno = dp->dp_pgno;
	if ((dp->dp_lo && !(pg->sp_lo = dd_sp_copy(dp->dp_lo, dp->dp_lolen))) ||
	    (dp->dp_hi && !(pg->sp_hi = dd_sp_copy(dp->dp_hi, dp->dp_hilen)))) {
		dd_free(pg->sp_lo);
		return -1;
	}
	sp->n++;
	pg->sp_lolen = dp->dp_lolen;
	pg->sp_hilen = dp->dp_hilen;
	/* a bmap bound that is not a 16-byte key (damage LMDB's order
	 * still allows) is taken as the table's end on that side: more
	 * snapshots named, never fewer.  Keys: format/store.md §4 */
	pg->sp_id_lo = pg->sp_pos_lo = 0;
	pg->sp_id_hi = pg->sp_pos_hi = UINT64_MAX;
	if (dp->dp_lo && dp->dp_lolen == 16) {
		pg->sp_id_lo = dd_get_be64(dp->dp_lo);
		pg->sp_pos_lo = dd_get_be64(dp->dp_lo + 8);
	}
	if (dp->dp_hi && dp->dp_hilen == 16) {
		pg->sp_id_hi = dd_get_be64(dp->dp_hi);
		pg->sp_pos_hi = dd_get_be64(dp->dp_hi + 8);
	}
	/* the symbol is said once, by the line this goes into */
	snprintf(pg->sp_msg, sizeof(pg->sp_msg), "%s",
		 strncmp(dp->dp_msg, "DD_ECORRUPT: ", 13) ? dp->dp_msg
							  : dp->dp_msg + 13);
	return 0;
}

/* Each table's ranges for dd_txn_skip: in key order (the check walks
 * each tree left to right, one table after another), a range that ends
 * where the next begins joined to it. */
static int dd_scrub_pages_ranges(dd_scrub_pages *sp)
{
	for (size_t i = 0; i < sp->n; i++) {
		const dd_spage *pg = &sp->p[i];
		int t = pg->sp_table;
		dd_key_range *r = sp->kr[t], *last;

		if (!r) {
			r = dd_calloc(sp->n, sizeof(*r));
			if (!r)
				return -1;
			sp->kr[t] = r;
		}
		last = sp->nkr[t] ? &r[sp->nkr[t] - 1] : NULL;
		if (last && last->kr_hi && pg->sp_lo &&
		    last->kr_hilen == pg->sp_lolen &&
		    !memcmp(last->kr_hi, pg->sp_lo, pg->sp_lolen)) {
			last->kr_hi = pg->sp_hi;
			last->kr_hilen = pg->sp_hilen;
			continue;
		}
		r[sp->nkr[t]++] = (dd_key_range){pg->sp_lo, pg->sp_hi,
						 pg->sp_lolen, pg->sp_hilen};
	}
	return 0;
}

int dd_scrub_pages_check(dd_store *s, dd_err *err, dd_scrub_pages **out)
{
	dd_scrub_pages *sp = dd_calloc(1, sizeof(*sp));
	int rc;

	*out = NULL;
	if (!sp)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	rc = dd_db_check_pages(s->st_db, err, dd_scrub_pages_add, sp);
	if (rc == DD_ECANCELED) {   /* only the list's growth stops it */
		dd_scrub_pages_free(sp);
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	}
	/* damage met before any tree was walked reports no page: sp->n 0 */
	if (rc == DD_ECORRUPT && !sp->stop && sp->n) {
		if (dd_scrub_pages_ranges(sp)) {
			dd_scrub_pages_free(sp);
			return dd_err_set(err, DD_ENOMEM, "out of memory");
		}
		*out = sp;          /* libdedup's tables only: scrub goes on */
		return 0;
	}
	dd_scrub_pages_free(sp);
	return rc;
}

void dd_scrub_pages_free(dd_scrub_pages *sp)
{
	if (!sp)
		return;
	for (size_t i = 0; i < sp->n; i++) {
		dd_free(sp->p[i].sp_lo);
		dd_free(sp->p[i].sp_hi);
	}
	for (int t = 0; t < DD_SP_NTABLES; t++)
		dd_free(sp->kr[t]);
	dd_free(sp->p);
	dd_free(sp);
}

size_t dd_scrub_pages_count(const dd_scrub_pages *sp)
{
	return sp ? sp->n : 0;
}

int dd_scrub_pages_skip(const dd_scrub_pages *sp, dd_txn *txn, dd_err *err)
{
	int rc = 0;

	for (int t = 0; sp && !rc && t < DD_SP_NTABLES; t++)
		if (sp->nkr[t])
			rc = dd_txn_skip(txn, err, dd_sp_names[t], sp->kr[t],
					 sp->nkr[t]);
	return rc;
}

static int dd_sp_table_of(const char *table)
{
	for (int t = 0; t < DD_SP_NTABLES; t++)
		if (!strcmp(table, dd_sp_names[t]))
			return t;
	return -1;
}

bool dd_scrub_pages_has(const dd_scrub_pages *sp, const char *table)
{
	int t = dd_sp_table_of(table);

	return sp && t >= 0 && sp->nkr[t] > 0;
}

/* The damaged page of table t whose range holds key (klen bytes): a
 * walk of the few pages, each range compared as LMDB orders keys. */
static const dd_spage *dd_sp_find(const dd_scrub_pages *sp, int t,
				  const void *key, size_t klen)
{
	for (size_t i = 0; sp && t >= 0 && i < sp->n; i++) {
		const dd_spage *pg = &sp->p[i];
		dd_key_range r = {pg->sp_lo, pg->sp_hi, pg->sp_lolen,
				  pg->sp_hilen};

		if (pg->sp_table == t && dd_key_ranges_find(&r, 1, key, klen))
			return pg;
	}
	return NULL;
}

const dd_spage *dd_scrub_pages_find(const dd_scrub_pages *sp,
				    const char *table, const void *key,
				    size_t klen)
{
	return dd_sp_find(sp, dd_sp_table_of(table), key, klen);
}

uint64_t dd_spage_pgno(const dd_spage *pg)
{
	return pg->sp_pgno;
}

const char *dd_spage_table(const dd_spage *pg)
{
	return dd_sp_names[pg->sp_table];
}

const char *dd_spage_msg(const dd_spage *pg)
{
	return pg->sp_msg;
}

/* ---- what a page held ----------------------------------------------------*/

/* A key bound for a message: a hash's first 8 bytes in hex, a name, a
 * number -- by table; "the table's start" or "end" for none. */
static void dd_sp_bound(char *out, size_t len, int t, const uint8_t *k,
			size_t klen, bool hi)
{
	if (!k) {
		snprintf(out, len, "the table's %s", hi ? "end" : "start");
		return;
	}
	switch (t) {
	case DD_SP_DDT0:
	case DD_SP_DDT1:
		if (klen == DD_DDT_PART_KEY_MAX && k[0] == 0xff) {
			/* a run's key (format/ddt.md §5): its run, then the
			 * hash it holds */
			int n = snprintf(out, len, "run %llu ",
					 (unsigned long long)dd_get_be64(
						 k + DD_DDT_KEY_SIZE));

			if (n < 0 || (size_t)n >= len)
				return;
			out += n;
			len -= (size_t)n;
			k += DD_DDT_KEY_SIZE + 8;
			klen = DD_DDT_KEY_SIZE;
		}
		for (size_t i = 0; i < 8 && i < klen && 2 * i + 3 <= len; i++)
			snprintf(out + 2 * i, 3, "%02x", k[i]);
		if (klen == 0)
			snprintf(out, len, "''");
		return;
	case DD_SP_SNAP:
	case DD_SP_META:
		snprintf(out, len, "'%.*s'", (int)(klen < 40 ? klen : 40),
			 (const char *)k);
		return;
	case DD_SP_BMAP:
		if (klen == 16) {
			snprintf(out, len, "snapshot id %llu position %llu",
				 (unsigned long long)dd_get_be64(k),
				 (unsigned long long)dd_get_be64(k + 8));
			return;
		}
		break;
	case DD_SP_PEND:
		if (klen == 8) {
			snprintf(out, len, "%llu",
				 (unsigned long long)dd_get_be64(k));
			return;
		}
		break;
	case DD_SP_PACKS:
		if (klen == 4) {
			snprintf(out, len, "%u", dd_get_be32(k));
			return;
		}
		break;
	}
	snprintf(out, len, "a key of %zu bytes", klen);
}

/* What page pg held and what its loss means, for its report. */
static void dd_sp_meaning(const dd_spage *pg, const char *live, char *out,
			  size_t len)
{
	char lo[64], hi[64];
	int t = pg->sp_table;

	dd_sp_bound(lo, sizeof(lo), t, pg->sp_lo, pg->sp_lolen, false);
	dd_sp_bound(hi, sizeof(hi), t, pg->sp_hi, pg->sp_hilen, true);
	switch (t) {
	case DD_SP_BMAP:
		snprintf(out, len, "it held the block-map entries from %s to "
			 "%s: the snapshots they belong to are named, their "
			 "blocks checked from their manifests", lo, hi);
		break;
	case DD_SP_DDT0:
	case DD_SP_DDT1:
		if (strcmp(dd_sp_names[t], live)) {
			snprintf(out, len, "a page of the DDT table not in "
				 "use (meta ddt.live names %s): nothing reads "
				 "it but gc", live);
			break;
		}
		snprintf(out, len, "it held the DDT entries of the blocks "
			 "whose hashes run from %s to %s: those blocks cannot "
			 "be located or checked, the snapshots using them are "
			 "named", lo, hi);
		break;
	case DD_SP_SNAP:
		snprintf(out, len, "it held the records of the snapshots "
			 "named from %s to %s: ls and get do not see them; "
			 "those the manifests name are checked from them", lo,
			 hi);
		break;
	case DD_SP_PACKS:
		snprintf(out, len, "it held the committed ends of packs %s to "
			 "%s: their blocks are checked, not against those "
			 "ends; writers and gc stop at it", lo, hi);
		break;
	case DD_SP_PEND:
		snprintf(out, len, "it held the records of the writers in "
			 "progress with ids %s to %s: one that died is not "
			 "rolled back; writers stop at it", lo, hi);
		break;
	default:
		snprintf(out, len, "it held store settings and counters: "
			 "those scrub needs were read at open; writers stop "
			 "at it");
		break;
	}
}

/* The check's line without its own "run dedup repair" ending: the
 * report says it once, at its end. */
static void dd_sp_where(const dd_spage *pg, char *out, size_t len)
{
	static const char hint[] = ": the catalog is damaged: run dedup repair";
	size_t n = strlen(pg->sp_msg), h = sizeof(hint) - 1;

	snprintf(out, len, "%.*s", (int)(n >= h && !strcmp(pg->sp_msg + n - h,
							   hint) ? n - h : n),
		 pg->sp_msg);
}

int dd_scrub_pages_report(dd_store *s, const dd_scrub_pages *sp,
			  dd_txn *txn, dd_scrub_page_cb fn, void *ctx)
{
	for (size_t i = 0; sp && fn && i < sp->n; i++) {
		const dd_spage *pg = &sp->p[i];
		char where[DD_ERRMSG_MAX], what[DD_ERRMSG_MAX];
		char msg[3 * DD_ERRMSG_MAX];
		dd_scrub_page p = {.table = dd_sp_names[pg->sp_table],
				   .page = pg->sp_pgno, .message = msg};

		dd_sp_where(pg, where, sizeof(where));
		dd_sp_meaning(pg, dd_ddt_live_table(txn), what, sizeof(what));
		snprintf(msg, sizeof(msg), "%s: %s; the catalog is an index of "
			 "the packs and manifests: dedup repair %s rebuilds it",
			 where, what, s->st_path);
		if (fn(&p, ctx) != 0)
			return DD_ECANCELED;
	}
	return 0;
}

/* ---- snapshots whose records a damaged page held -------------------------*/

int dd_scrub_pages_unseen(dd_store *s, dd_err *err, const dd_scrub_pages *sp,
			  uint64_t id, const dd_spage **pg)
{
	dd_manifest_hdr h;
	uint8_t kb[8];
	int rc;

	*pg = NULL;
	dd_put_be64(kb, id);
	if (!sp || (*pg = dd_sp_find(sp, DD_SP_PEND, kb, sizeof(kb))) != NULL)
		return *pg != NULL;
	if (!sp->nkr[DD_SP_SNAP] || !s->st_mfdir)
		return 0;
	/* a manifest that does not read is not excused: the check names
	 * it */
	rc = dd_manifest_read_header_at(s->st_mfdir, err, id, &h);
	if (rc == DD_ECORRUPT || rc == DD_ENOENT)
		return 0;
	if (rc)
		return rc;
	*pg = dd_sp_find(sp, DD_SP_SNAP, h.mh_name, strlen(h.mh_name));
	return *pg != NULL;
}

int dd_scrub_pages_lost(dd_store *s, dd_err *err, const dd_scrub_pages *sp,
			dd_scrub_lost_fn fn, void *ctx)
{
	dd_mfstate ms;
	int rc;

	if (!sp || !sp->nkr[DD_SP_SNAP] || !s->st_mfdir)
		return 0;
	rc = dd_mfstate_read(s, err, &ms);
	if (rc)
		return rc;
	for (size_t i = 0; !rc && i < ms.ms_set[DD_MANIFEST_SNAP].is_n; i++) {
		uint64_t id = ms.ms_set[DD_MANIFEST_SNAP].is_ids[i];
		const dd_spage *pg;
		dd_manifest_hdr h;
		dd_snap_rec rec;

		rc = dd_manifest_read_header_at(s->st_mfdir, err, id, &h);
		if (rc == DD_ENOENT) {   /* deleted since */
			rc = 0;
			continue;
		}
		if (rc)
			break;
		pg = dd_sp_find(sp, DD_SP_SNAP, h.mh_name, strlen(h.mh_name));
		if (!pg)
			continue;
		dd_manifest_snap_rec(&rec, &h);
		rc = fn(ctx, h.mh_name, &rec, pg);
	}
	dd_mfstate_free(&ms);
	return rc;
}

/* ---- block maps on damaged pages -----------------------------------------*/

/* The positions [*from, *to) of snapshot id's map that page pg held; to
 * is UINT64_MAX for "to its end".  False if it held none of them. */
static bool dd_spage_range(const dd_spage *pg, uint64_t id, uint64_t *from,
			   uint64_t *to)
{
	if (pg->sp_table != DD_SP_BMAP || id < pg->sp_id_lo ||
	    id > pg->sp_id_hi || (id == pg->sp_id_hi && pg->sp_pos_hi == 0))
		return false;
	*from = id == pg->sp_id_lo ? pg->sp_pos_lo : 0;
	*to = id == pg->sp_id_hi ? pg->sp_pos_hi : UINT64_MAX;
	return true;
}

/* Positions [from, to) of a map as bytes of the image: block indexes of
 * fixed blocks, byte offsets of content-defined ones (format/store.md
 * §4.2). */
static void dd_spage_bytes(const dd_snap_rec *r, bool fixed, uint64_t *from,
			   uint64_t *to)
{
	if (fixed) {
		*from = *from > r->sr_size / r->sr_block_size
				? r->sr_size : *from * r->sr_block_size;
		*to = *to > r->sr_size / r->sr_block_size
			      ? r->sr_size : *to * r->sr_block_size;
	} else {
		*from = *from > r->sr_size ? r->sr_size : *from;
		*to = *to > r->sr_size ? r->sr_size : *to;
	}
}

bool dd_scrub_pages_hit(const dd_scrub_pages *sp, const dd_snap_rec *r,
			bool fixed, char *msg, size_t len)
{
	uint64_t from = UINT64_MAX, to = 0, a, b, n = 0;
	const dd_spage *first = NULL;

	for (size_t i = 0; sp && i < sp->n; i++) {
		if (!dd_spage_range(&sp->p[i], r->sr_id, &a, &b))
			continue;
		if (!first)
			first = &sp->p[i];
		n++;
		from = a < from ? a : from;
		to = b > to ? b : to;
	}
	if (!first)
		return false;
	dd_spage_bytes(r, fixed, &from, &to);
	snprintf(msg, len, "its block map entries for offsets %llu to %llu "
		 "are on %llu damaged catalog page%s: %s",
		 (unsigned long long)from, (unsigned long long)to,
		 (unsigned long long)n, n == 1 ? "" : "s", first->sp_msg);
	return true;
}

int dd_scrub_pages_hit_runs(const dd_scrub_pages *sp, const char *name,
			    const dd_snap_rec *r, bool fixed,
			    dd_scrub_page_cb fn, void *ctx)
{
	uint64_t from, to;

	for (size_t i = 0; sp && fn && i < sp->n; i++) {
		const dd_spage *pg = &sp->p[i];
		dd_scrub_page p = {.table = dd_sp_names[pg->sp_table],
				   .page = pg->sp_pgno, .snapshot = name};

		if (!dd_spage_range(pg, r->sr_id, &from, &to))
			continue;
		dd_spage_bytes(r, fixed, &from, &to);
		p.offset = from;
		p.length = to - from;
		if (fn(&p, ctx) != 0)
			return DD_ECANCELED;
	}
	return 0;
}

/* The blocks of snapshot id from its manifest, the truth its block map
 * was made from (format/manifest.md), for fn as dd_bmap_walk_all calls
 * it. */
static int dd_scrub_manifest_uses(dd_store *s, dd_err *err, uint64_t id,
				  dd_bmap_walk_fn fn, void *ctx)
{
	dd_manifest_reader *mr = NULL;
	dd_manifest_hdr h;
	dd_manifest_ent e;
	int rc;

	if (!s->st_mfdir)
		return 0;  /* a format-1 store keeps none: nothing to name */
	rc = dd_manifest_open_at(&mr, err, s->st_mfdir, id, DD_MANIFEST_SNAP,
				 &h);
	if (rc == DD_ENOENT)
		return 0;  /* deleted since (dd_commit_check sees the set) */
	while (!rc && (rc = dd_manifest_read_next(mr, err, &e)) == 1) {
		dd_ddt_key key;

		rc = 0;
		if (e.me_hole)
			continue;
		memcpy(key.dk_hash, e.me_hash, DD_HASH_SIZE);
		key.dk_variant = e.me_variant;
		rc = fn(ctx, id, h.mh_chunker == DD_CHUNKER_FIXED ? e.me_index
								 : e.me_off,
			&key);
	}
	dd_manifest_read_close(mr);
	return rc;
}

int dd_scrub_pages_uses(dd_store *s, dd_err *err, dd_txn *txn,
			const dd_scrub_pages *sp, uint64_t id,
			dd_bmap_walk_fn fn, void *ctx)
{
	dd_bmap_cur *cur = NULL;
	dd_ddt_key key;
	uint64_t pos, from, to;
	int rc;

	for (size_t i = 0; sp && i < sp->n; i++)
		if (dd_spage_range(&sp->p[i], id, &from, &to))
			return dd_scrub_manifest_uses(s, err, id, fn, ctx);
	rc = dd_bmap_open(txn, err, id, &cur);
	if (rc)
		return rc;
	for (rc = dd_bmap_seek(cur, err, 0, &pos, &key); rc == 1;
	     rc = dd_bmap_next(cur, err, &pos, &key)) {
		rc = fn(ctx, id, pos, &key);
		if (rc)
			break;
	}
	dd_bmap_close(cur);
	return rc < 0 ? rc : 0;
}
