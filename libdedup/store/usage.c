/*
 * usage.c -- space accounting per snapshot and per writer: what a
 * snapshot holds alone (dd_snapshot_usage_get, `dedup ls`), and what a
 * writer added to the packs (dd_writer_stats_get, `dedup put -v`).
 *
 * A block belongs to snapshot S alone when every one of its references
 * comes from S's block map: S's own count of the key equals the DDT
 * reference count (format/ddt.md §1: one reference per block-map entry,
 * pending writers' maps included, so a block a running or kept partial
 * receive uses is never S's alone).  The walk reads S's map with one
 * cursor sweep and looks each key up in the DDT.  A key with reference
 * count 1 is S's at once; the others are counted in a table (common/
 * hmap.h: bounded RAM, spilling to a file) until S's count reaches the
 * DDT's.  A count that passes it is damage (scrub names it).
 *
 * The bytes counted are those gc frees once the blocks are unreferenced:
 * each record's payload and header (format/pack.md).  Lost blocks
 * (DD_DDE_MISSING) hold none.
 */
#include <stddef.h>
#include <string.h>

#include "catalog/ucnt.h"
#include "common/hmap.h"
#include "store/writer_internal.h"

/* RAM for the table of shared keys before it spills: as scrub's. */
#define DD_USAGE_MEM ((uint64_t)64 << 20)

typedef struct dd_usage_walk {
	dd_txn *uw_txn;
	dd_err *uw_err;
	dd_hmap *uw_seen;         /* flat key -> references from S so far */
	dd_hmap *uw_extra;        /* uncounted references (catalog/ucnt.h) */
	dd_snapshot_usage uw_u;
} dd_usage_walk;

static void dd_usage_own(dd_usage_walk *uw, const dd_ddt_ent *ent)
{
	uw->uw_u.unique_blocks++;
	uw->uw_u.unique_lsize += ent->de_lsize;
	uw->uw_u.unique_bytes += DD_PACK_REC_HDR_SIZE + (uint64_t)ent->de_psize;
}

static int dd_usage_block(dd_usage_walk *uw, uint64_t idx,
			  const dd_ddt_key *key)
{
	uint8_t flat[DD_HASH_SIZE];
	dd_ddt_ent ent;
	uint64_t n = 0, refs = 0;
	int rc = dd_ddt_get(uw->uw_txn, uw->uw_err, key, &ent);

	if (rc == DD_ENOENT)
		return dd_err_set(uw->uw_err, DD_ECORRUPT,
				  "block %llu refers to a block missing from "
				  "the ddt (damaged metadata; run scrub)",
				  (unsigned long long)idx);
	if (!rc)
		rc = dd_ucnt_extra_get(uw->uw_extra, uw->uw_err, key, &refs);
	if (rc)
		return rc;
	/* every reference: those the DDT counts, and the uncounted ones */
	refs += ent.de_refcnt;
	uw->uw_u.referenced_blocks++;
	if (refs == 1) {
		if (!(ent.de_flags & DD_DDE_MISSING))
			dd_usage_own(uw, &ent);
		return 0;
	}
	dd_ddt_key_flat(key, flat);
	rc = dd_hmap_get(uw->uw_seen, uw->uw_err, flat, &n);
	if (rc && rc != DD_ENOENT)
		return rc;
	if (++n > refs)
		return dd_err_set(uw->uw_err, DD_ECORRUPT,
				  "block %llu: the snapshot alone references "
				  "it more often than the ddt counts (%llu; "
				  "damaged metadata, run scrub)",
				  (unsigned long long)idx,
				  (unsigned long long)refs);
	if (n == refs && !(ent.de_flags & DD_DDE_MISSING))
		dd_usage_own(uw, &ent);
	return dd_hmap_put(uw->uw_seen, uw->uw_err, flat, n);
}

static int dd_usage_map(dd_usage_walk *uw, uint64_t id)
{
	dd_bmap_cur *cur;
	dd_ddt_key key;
	uint64_t idx;
	int rc = dd_bmap_open(uw->uw_txn, uw->uw_err, id, &cur);

	if (rc)
		return rc;
	for (rc = dd_bmap_seek(cur, uw->uw_err, 0, &idx, &key); rc == 1;
	     rc = dd_bmap_next(cur, uw->uw_err, &idx, &key))
		if ((rc = dd_usage_block(uw, idx, &key)) != 0)
			break;
	dd_bmap_close(cur);
	return rc;
}

int dd_snapshot_usage_get(dd_store *s, const char *name,
			  dd_snapshot_usage *out)
{
	dd_err err = {0};
	dd_usage_walk uw = {.uw_err = &err};
	dd_snap_rec rec;
	int rc;

	if (!s || !out)
		return s ? dd_store_failf(s, DD_EINVAL, "dd_snapshot_usage_get: "
					  "NULL argument") : DD_EINVAL;
	if (out->version == 0 || out->version > DD_SNAPSHOT_USAGE_VERSION)
		return dd_store_failf(s, DD_EINVAL, "dd_snapshot_usage version "
				      "%u not supported (set "
				      "DD_SNAPSHOT_USAGE_VERSION)",
				      out->version);
	if (dd_name_check(name))
		return dd_store_failf(s, DD_ENAME, "invalid snapshot name");
	uw.uw_u.version = out->version;
	rc = dd_hmap_new(&uw.uw_seen, &err, DD_USAGE_MEM, NULL);
	if (!rc)
		rc = dd_txn_begin(s->st_db, &err, false, &uw.uw_txn);
	if (!rc) {
		rc = dd_store_snap_get(s, &err, uw.uw_txn, name, &rec);
		if (!rc)
			rc = dd_ucnt_extra(uw.uw_txn, &err, &uw.uw_extra);
		if (!rc)
			rc = dd_usage_map(&uw, rec.sr_id);
		dd_hmap_free(uw.uw_extra);
		dd_txn_abort(uw.uw_txn);
	}
	dd_hmap_free(uw.uw_seen);
	if (rc)
		return dd_store_fail(s, &err);
	*out = uw.uw_u;
	return 0;
}

int dd_writer_stats_get(const dd_writer *w, dd_writer_stats *out)
{
	if (!w || !out)
		return DD_EINVAL;
	if (out->version == 0 || out->version > DD_WRITER_STATS_VERSION)
		return DD_EINVAL;
	dd_writer_stats st = {
		.version = out->version,
		.bytes = w->w_size,
		.blocks = w->w_blocks,
		.zero_blocks = w->w_zero,
		.new_blocks = w->w_new_blocks,
		.new_lsize = w->w_new_lsize,
		.new_bytes = w->w_new_bytes,
		.map_blocks = w->w_map_blocks,
	};

	/* a caller of version 1 has the smaller struct */
	memcpy(out, &st, out->version == 1 ? offsetof(dd_writer_stats,
						      map_blocks)
					   : sizeof(st));
	return 0;
}
