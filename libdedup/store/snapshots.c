/*
 * snapshots.c -- listing, describing and deleting snapshots.
 *
 * Deleting a snapshot drops its references with the catalog's
 * dd_snap_drop_refs (catalog/maps.c), as the rollback of a killed writer
 * does.
 */
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "store/store_internal.h"

/* ---- public: list, stat, delete --------------------------------------------*/

static void dd_info_fill(dd_snapshot_info *out, const char *name,
			 const dd_snap_rec *r)
{
	memset(out, 0, sizeof(*out));
	strncpy(out->name, name, DD_NAME_MAX);
	out->size = r->sr_size;
	out->blocks = r->sr_blocks;
	out->zero_blocks = r->sr_zero_blocks;
	out->ctime = r->sr_ctime;
	memcpy(out->digest, r->sr_digest, DD_HASH_SIZE);
}

static int dd_info_cmp(const void *a, const void *b)
{
	return strcmp(((const dd_snapshot_info *)a)->name,
		      ((const dd_snapshot_info *)b)->name);
}

struct dd_list_ctx {
	dd_err *lc_err;
	dd_snapshot_info *lc_list;
	size_t lc_count, lc_cap;
};

static int dd_list_one(void *arg, const char *name, const dd_snap_rec *r)
{
	struct dd_list_ctx *lc = arg;

	if (lc->lc_count == lc->lc_cap) {
		size_t n = lc->lc_cap ? lc->lc_cap * 2 : 16;
		dd_snapshot_info *nl = dd_realloc(lc->lc_list, n * sizeof(*nl));

		if (!nl)
			return dd_err_set(lc->lc_err, DD_ENOMEM, "out of memory");
		lc->lc_list = nl;
		lc->lc_cap = n;
	}
	dd_info_fill(&lc->lc_list[lc->lc_count++], name, r);
	return 0;
}

int dd_snapshot_list(dd_store *s, dd_snapshot_info **out, size_t *count)
{
	dd_err err = {0};
	struct dd_list_ctx lc = {&err, NULL, 0, 0};
	dd_txn *txn;
	int rc;

	if (!s || !out || !count)
		return s ? dd_store_failf(s, DD_EINVAL,
					  "dd_snapshot_list: NULL argument")
			 : DD_EINVAL;
	rc = dd_commit_check(s, &err);
	if (!rc)
		rc = dd_txn_begin(s->st_db, &err, false, &txn);
	if (rc)
		return dd_store_fail(s, &err);
	rc = dd_store_snap_walk(s, &err, txn, dd_list_one, &lc);
	dd_txn_abort(txn);
	if (rc) {
		dd_free(lc.lc_list);
		return dd_store_fail(s, &err);
	}
	/* in name order: one published after a crash comes last */
	if (lc.lc_count > 1)
		qsort(lc.lc_list, lc.lc_count, sizeof(*lc.lc_list),
		      dd_info_cmp);
	*out = lc.lc_list;
	*count = lc.lc_count;
	return 0;
}

void dd_snapshot_list_free(dd_snapshot_info *list)
{
	dd_free(list);
}

int dd_snapshot_stat(dd_store *s, const char *name, dd_snapshot_info *out)
{
	dd_err err = {0};
	dd_snap_rec r;
	dd_txn *txn;
	int rc;

	if (!s || !out)
		return s ? dd_store_failf(s, DD_EINVAL, "dd_snapshot_stat: "
					  "NULL argument") : DD_EINVAL;
	if (dd_name_check(name))
		return dd_store_failf(s, DD_ENAME, "invalid snapshot name");
	rc = dd_txn_begin(s->st_db, &err, false, &txn);
	if (rc)
		return dd_store_fail(s, &err);
	rc = dd_store_snap_get(s, &err, txn, name, &r);
	dd_txn_abort(txn);
	if (rc)
		return dd_store_fail(s, &err);
	dd_info_fill(out, name, &r);
	return 0;
}

/* The deletion in one write transaction: the manifest renamed to ID.del
 * (the deletion itself, format/manifest.md §7), then the catalog
 * follows.  The deleter registers as the snapshot's (lock.c), so that
 * recovery beside it leaves its ID.del alone. */
static int dd_snapshot_delete_txn(dd_store *s, dd_err *err, const char *name,
				  int *regfd, uint64_t *id)
{
	dd_snap_rec r;
	dd_txn *txn;
	int rc = dd_txn_begin(s->st_db, err, true, &txn);

	if (rc)
		return rc;
	rc = dd_snap_get(txn, err, name, &r);
	if (rc == DD_ENOENT)
		dd_err_set(err, rc, "no snapshot '%s'", name);
	if (!rc)
		rc = dd_writer_register(s, err, r.sr_id, UINT64_MAX, regfd);
	if (!rc) {
		*id = r.sr_id;
		rc = dd_commit_delete_begin(s, err, r.sr_id);
	}
	if (rc) {
		dd_txn_abort(txn);
		return rc;
	}
	rc = dd_snap_drop_refs(txn, err, r.sr_id);
	if (!rc)
		rc = dd_snap_del(txn, err, name);
	if (rc)
		dd_txn_abort(txn);
	else
		rc = dd_txn_commit(txn, err);
	if (rc)
		dd_commit_delete_undo(s, r.sr_id);
	else
		dd_commit_delete_end(s, r.sr_id);
	return rc;
}

int dd_snapshot_delete(dd_store *s, const char *name)
{
	dd_err err = {0};
	uint64_t id = 0;
	int lockfd, regfd = -1, rc;

	if (!s)
		return DD_EINVAL;
	if (dd_name_check(name))
		return dd_store_failf(s, DD_ENAME, "invalid snapshot name");
	rc = dd_store_enter(s, &err, &lockfd);
	if (rc)
		return dd_store_fail(s, &err);
	rc = dd_snapshot_delete_txn(s, &err, name, &regfd, &id);
	dd_writer_unregister(s, id, regfd);
	/* a full file system: STORE/reserve makes room for the catalog's
	 * pages (format/store.md §1); the deletion was undone, so it is
	 * tried once more from the start */
	if (rc == DD_ENOSPC && dd_space_reserve_release(s)) {
		dd_err_clear(&err);
		regfd = -1;
		rc = dd_snapshot_delete_txn(s, &err, name, &regfd, &id);
		dd_writer_unregister(s, id, regfd);
	}
	dd_store_leave(s, lockfd);
	return rc ? dd_store_fail(s, &err) : 0;
}
