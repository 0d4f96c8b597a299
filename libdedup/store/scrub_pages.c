/*
 * scrub_pages.c -- damaged pages of the catalog, and the snapshots whose
 * block maps they held.
 *
 * scrub's pass 0 walks every page of the LMDB file (catalog/check.c).  A
 * damaged page of the `bmap` table hides the block-map entries whose keys
 * lie in the range its parent page sends to it: from one (snapshot id,
 * position) key up to another (format/store.md §4).  The walk reports
 * that range and goes on past the page, so scrub can name each snapshot
 * it touched and the offsets, and go on to check every block and the
 * other snapshots' maps.  The pages' bounds come from parents that passed
 * the check, keys inside their own bounds: a range is never narrower
 * than what the damaged page covered.  A damaged page of any other table
 * (the DDT, the snapshots, the packs, meta, pending writers) leaves
 * nothing scrub could go on with: it stops there, as before, with the
 * page named.  Nothing is written to a damaged catalog.
 */
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/endian.h"
#include "store/manifest.h"
#include "store/store_internal.h"

typedef struct dd_spage {
	uint64_t sp_id_lo, sp_pos_lo;    /* the first key it may hold */
	uint64_t sp_id_hi, sp_pos_hi;    /* the first key past it */
	char sp_msg[DD_ERRMSG_MAX];      /* its check's DD_ECORRUPT line */
} dd_spage;

struct dd_scrub_pages {
	dd_spage *p;
	size_t n, cap;
	bool other;          /* a page of another table: scrub stops */
};

static int dd_scrub_pages_add(void *ctx, const dd_db_damage_page *dp)
{
	dd_scrub_pages *sp = ctx;
	dd_spage *pg;

	if (strcmp(dp->dp_table, "bmap") != 0) {
		sp->other = true;
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
	pg = &sp->p[sp->n++];
	/* a bound that is not a 16-byte key (damage LMDB's order still
	 * allows) is taken as the table's end on that side: more
	 * snapshots named, never fewer.  Keys: format/store.md §4, 16 bytes */
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
	if (rc == DD_ECORRUPT && !sp->other && sp->n) {
		*out = sp;          /* block maps only: scrub goes on */
		return 0;
	}
	dd_scrub_pages_free(sp);
	return rc;
}

void dd_scrub_pages_free(dd_scrub_pages *sp)
{
	if (sp) {
		dd_free(sp->p);
		dd_free(sp);
	}
}

/* The positions [*from, *to) of snapshot id's map that page pg held; to
 * is UINT64_MAX for "to its end".  False if it held none of them. */
static bool dd_spage_range(const dd_spage *pg, uint64_t id, uint64_t *from,
			   uint64_t *to)
{
	if (id < pg->sp_id_lo || id > pg->sp_id_hi ||
	    (id == pg->sp_id_hi && pg->sp_pos_hi == 0))
		return false;
	*from = id == pg->sp_id_lo ? pg->sp_pos_lo : 0;
	*to = id == pg->sp_id_hi ? pg->sp_pos_hi : UINT64_MAX;
	return true;
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
	/* positions are block indexes of fixed blocks, byte offsets of
	 * content-defined ones (format/store.md §4.2) */
	if (fixed) {
		from = from > r->sr_size / r->sr_block_size
			       ? r->sr_size : from * r->sr_block_size;
		to = to > r->sr_size / r->sr_block_size
			     ? r->sr_size : to * r->sr_block_size;
	} else {
		from = from > r->sr_size ? r->sr_size : from;
		to = to > r->sr_size ? r->sr_size : to;
	}
	snprintf(msg, len, "its block map entries for offsets %llu to %llu "
		 "are on %llu damaged catalog page%s: %s",
		 (unsigned long long)from, (unsigned long long)to,
		 (unsigned long long)n, n == 1 ? "" : "s", first->sp_msg);
	return true;
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
