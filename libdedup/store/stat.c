/*
 * stat.c -- store statistics: ratios, DDT size and the refcount histogram.
 *
 * Computed from one read transaction by walking the DDT and the snapshot
 * table, so the figures are always consistent with each other.  Ratios are
 * those of `zdb -S` (DESIGN.md): on logical sizes, zero blocks excluded.
 */
#include <stddef.h>
#include <string.h>

#include "catalog/kfilter.h"
#include "catalog/ucnt.h"
#include "common/hist.h"
#include "store/store_internal.h"

struct dd_stat_walk {
	dd_stat *sw_st;
	dd_hmap *sw_extra;        /* uncounted references (catalog/ucnt.h) */
	dd_err *sw_err;
};

static int dd_stat_ddt(void *arg, const dd_ddt_key *key, const dd_ddt_ent *e)
{
	struct dd_stat_walk *sw = arg;
	dd_stat *st = sw->sw_st;
	uint64_t refs = 0;
	int rc = dd_ucnt_extra_get(sw->sw_extra, sw->sw_err, key, &refs);

	if (rc)
		return rc;
	refs += e->de_refcnt;
	if (refs == 0) {
		st->unreferenced_blocks++;
		return 0;
	}
	st->unique_blocks++;
	st->unique_bytes += e->de_lsize;
	st->stored_bytes += e->de_psize;
	st->referenced_blocks += refs;
	st->referenced_bytes += refs * e->de_lsize;
	dd_hist_add(st->hist, refs, e->de_lsize, e->de_psize);
	return 0;
}

static int dd_stat_snap(void *arg, const char *name, const dd_snap_rec *r)
{
	dd_stat *st = arg;

	(void)name;
	st->snapshots++;
	st->logical_bytes += r->sr_size;
	st->zero_blocks += r->sr_zero_blocks;
	return 0;
}

struct dd_stat_packs {
	dd_store *sp_store;
	dd_stat *sp_stat;
};

static int dd_stat_pack(void *arg, uint32_t id, uint64_t end)
{
	struct dd_stat_packs *sp = arg;
	char name[32];
	uint64_t size;

	dd_pack_name(name, sizeof(name), id);
	sp->sp_stat->pack_files++;
	if (dd_vdir_stat(sp->sp_store->st_packdir, NULL, name, &size) == 0)
		sp->sp_stat->pack_bytes += size;
	else
		sp->sp_stat->pack_bytes += end;
	return 0;
}

int dd_store_stat(dd_store *s, dd_stat *out)
{
	dd_err err = {0};
	dd_db_usage use;
	dd_kf_info kfi = {0};
	struct dd_stat_packs sp;
	struct dd_stat_walk sw;
	dd_stat st;
	dd_txn *txn;
	int rc;

	if (!s || !out)
		return s ? dd_store_failf(s, DD_EINVAL, "dd_store_stat: NULL "
					  "argument") : DD_EINVAL;
	if (out->version == 0 || out->version > DD_STAT_VERSION)
		return dd_store_failf(s, DD_EINVAL, "dd_stat version %u not "
				      "supported (set DD_STAT_VERSION)",
				      out->version);
	memset(&st, 0, sizeof(st));
	st.version = out->version;
	sp = (struct dd_stat_packs){s, &st};
	rc = dd_commit_check(s, &err);
	if (!rc)
		rc = dd_txn_begin(s->st_db, &err, false, &txn);
	if (rc)
		return dd_store_fail(s, &err);
	sw = (struct dd_stat_walk){&st, NULL, &err};
	rc = dd_ucnt_extra(txn, &err, &sw.sw_extra);
	if (!rc)
		rc = dd_ddt_scan(txn, &err, dd_stat_ddt, &sw);
	dd_hmap_free(sw.sw_extra);
	if (!rc)
		rc = dd_store_snap_walk(s, &err, txn, dd_stat_snap, &st);
	if (!rc)
		rc = dd_packs_walk(txn, &err, dd_stat_pack, &sp);
	if (!rc)
		rc = dd_db_usage_get(txn, &err, &use);
	if (!rc)
		rc = dd_kf_txn_info(txn, &err, &kfi);
	st.ddt_runs = dd_ddt_runs(txn);
	dd_txn_abort(txn);
	if (rc)
		return dd_store_fail(s, &err);
	st.ddt_entries = use.ddt_entries;
	st.ddt_bytes = use.ddt_bytes;
	st.meta_bytes = use.meta_bytes;
	st.lmdb_file_bytes = use.file_bytes;
	st.dedup_ratio = st.unique_bytes
		? (double)st.referenced_bytes / (double)st.unique_bytes : 1.0;
	st.compress_ratio = st.stored_bytes
		? (double)st.unique_bytes / (double)st.stored_bytes : 1.0;
	st.filter_segments = kfi.ki_segments;
	st.filter_bytes = kfi.ki_bytes;
	st.filter_bits_per_entry = st.ddt_entries
		? (double)kfi.ki_bits / (double)st.ddt_entries : 0.0;
	/* no further than the caller's version of the struct reaches */
	memcpy(out, &st, out->version >= 2 ? sizeof(st)
					   : offsetof(dd_stat, ddt_runs));
	return 0;
}
