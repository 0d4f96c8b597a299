/*
 * wpack.c -- the packs a writer appends to (format/store.md §5, §7).
 *
 * Every pack a writer appends to is its own: it holds the pack's lock
 * (dd_pack_lock) from before its first append until the commit that
 * records its end, so no other writer appends to it, recovery cuts no
 * tail of it and gc dooms none of it.  A writer takes the newest pack when
 * it is less than half full and nobody holds it, else a new one.  A new
 * pack is created and recorded (pack.next, its packs entry at the empty
 * end) inside one short write transaction: so a pack file that no entry
 * records belongs to a creator that died in that transaction, and
 * recovery, which removes such files only inside a write transaction of
 * its own, can never remove one being created.
 */
#include "common/alloc.h"
#include "store/writer_internal.h"

/* An unrecorded file at the id a new pack gets: the leftover of a creator
 * that died before its commit (nobody can be creating it: the caller
 * holds the write transaction).  Removed, unless someone holds it. */
static int dd_pack_remove_orphan(dd_store *s, dd_err *err, uint32_t id)
{
	char name[16];           /* dd_pack_name's size */
	dd_pack *p;
	int rc = dd_pack_open(&p, err, s->st_packdir, id, 0);

	dd_pack_name(name, sizeof(name), id);
	if (!rc) {
		rc = dd_pack_lock(p, err);
		if (!rc)
			rc = dd_vdir_unlink(s->st_packdir, err, name);
		dd_pack_close(p);
		return rc;
	}
	/* no readable header: nothing in it was ever named */
	if (rc == DD_ECORRUPT &&
	    dd_vdir_unlink(s->st_packdir, NULL, name) == 0)
		return 0;
	return rc;
}

/* dd_store_new_pack in the caller's write transaction txn: the file is
 * created and locked, and its id taken, in txn (an abort of txn leaves a
 * file nobody recorded, which recovery removes once nobody holds it). */
static int dd_store_new_pack_in(dd_store *s, dd_err *err, dd_txn *txn,
				bool record, dd_pack **out)
{
	dd_pack *p = NULL;
	uint64_t next;
	int rc = dd_meta_get_u64(txn, err, "pack.next", &next);

	if (rc == DD_ENOENT)
		rc = dd_err_set(err, DD_ECORRUPT, "store metadata is "
				"incomplete: no pack.next");
	if (!rc && (next == 0 || next > UINT32_MAX))
		rc = dd_err_set(err, DD_ENOSPC, "pack ids exhausted");
	if (!rc) {
		rc = dd_pack_create(&p, err, s->st_packdir, (uint32_t)next);
		/* in a RADOS store an unrecorded object can only be a writer's
		 * that lost the store lock and may still write: never
		 * touched, its id skipped (gc's to judge) */
		for (int i = 0; rc == DD_EEXIST && s->st_rstore && i < 64 &&
				next < UINT32_MAX; i++) {
			dd_err_clear(err);
			rc = dd_pack_create(&p, err, s->st_packdir,
					    (uint32_t)++next);
		}
		if (rc == DD_EEXIST && !s->st_rstore) {
			rc = dd_pack_remove_orphan(s, err, (uint32_t)next);
			if (!rc)
				rc = dd_pack_create(&p, err, s->st_packdir,
						    (uint32_t)next);
		}
	}
	if (!rc)
		rc = dd_pack_lock(p, err);
	if (!rc && record)
		rc = dd_packs_put(txn, err, (uint32_t)next, dd_pack_end(p));
	if (!rc)
		rc = dd_meta_put_u64(txn, err, "pack.next", next + 1);
	if (!rc)
		*out = p;
	else if (p)
		dd_store_drop_new_pack(s, p);
	return rc;
}

void dd_store_drop_new_pack(dd_store *s, dd_pack *p)
{
	char name[16];

	dd_pack_name(name, sizeof(name), dd_pack_id(p));
	dd_pack_close(p);
	(void)dd_vdir_unlink(s->st_packdir, NULL, name);
}

int dd_store_new_pack(dd_store *s, dd_err *err, bool record, dd_pack **out)
{
	dd_pack *p = NULL;
	dd_txn *txn;
	int rc = dd_txn_begin(s->st_db, err, true, &txn);

	if (rc)
		return rc;
	rc = dd_store_new_pack_in(s, err, txn, record, &p);
	if (rc) {
		dd_txn_abort(txn);
		return rc;
	}
	rc = dd_txn_commit(txn, err);
	if (rc)
		dd_store_drop_new_pack(s, p);
	else
		*out = p;
	return rc;
}

/* The newest pack, if it is less than half full and nobody holds it:
 * locked, its tail past the committed end cut (a killed writer's).  0 with
 * *out NULL when there is none to take.  Never in a RADOS store: a pack
 * there has one writer for its whole life, so that a writer on another
 * machine that lost the store lock (a partition) can only ever write into
 * packs of its own, which nobody else references (format/store.md §11). */
static int dd_writer_reuse_pack(dd_writer *w, dd_pack **out)
{
	dd_store *s = w->w_store;
	dd_pack *p = NULL;
	dd_err busy;
	uint64_t next, end = 0;
	uint32_t id;
	int rc;

	*out = NULL;
	if (s->st_rstore)
		return 0;
	rc = dd_writer_renew(w);
	if (!rc)
		rc = dd_meta_get_u64(w->w_rtxn, &w->w_err, "pack.next", &next);
	if (rc || next <= 1 || next - 1 > UINT32_MAX)
		return rc == DD_ENOENT ? 0 : rc;
	id = (uint32_t)(next - 1);
	rc = dd_packs_get(w->w_rtxn, &w->w_err, id, &end);
	if (rc == DD_ENOENT || (!rc && end >= dd_store_pack_max(s) / 2))
		return 0;   /* doomed by gc, or full enough */
	if (rc)
		return rc;
	if (dd_pack_open(&p, &busy, s->st_packdir, id, 1))
		return 0;   /* recovery's to judge */
	if (dd_pack_lock(p, &busy)) {
		dd_pack_close(p);
		return 0;   /* another writer's, or gc's */
	}
	/* its end as committed once nobody else can move it */
	rc = dd_writer_renew(w);
	if (!rc)
		rc = dd_packs_get(w->w_rtxn, &w->w_err, id, &end);
	if (rc == DD_ENOENT) {
		dd_pack_close(p);
		return 0;
	}
	if (!rc) {
		dd_err e = {0};

		rc = dd_pack_truncate(p, &e, end);
		if (rc == DD_ECORRUPT) {
			/* shorter than committed: damaged, never appended to */
			dd_pack_close(p);
			return 0;
		}
		if (rc)
			dd_err_copy(&w->w_err, &e);
	}
	if (rc) {
		dd_pack_close(p);
		return rc;
	}
	*out = p;
	return 0;
}

int dd_writer_flush_packs(dd_writer *w)
{
	int rc = 0;

	for (size_t i = 0; !rc && i < w->w_nfull; i++)
		rc = dd_pack_flush(w->w_full[i], &w->w_err);
	if (!rc && w->w_pack)
		rc = dd_pack_flush(w->w_pack, &w->w_err);
	return rc;
}

int dd_writer_append(dd_writer *w, const dd_pack_rec *rec, const void *payload,
		     uint32_t *pack, uint64_t *off)
{
	int rc;

	if (w->w_pack && dd_pack_end(w->w_pack) + DD_PACK_REC_HDR_SIZE +
				 rec->pr_psize > dd_store_pack_max(w->w_store)) {
		dd_pack **full = dd_realloc(w->w_full,
					    (w->w_nfull + 1) * sizeof(*full));

		if (!full)
			return dd_err_set(&w->w_err, DD_ENOMEM, "out of memory");
		w->w_full = full;
		w->w_full[w->w_nfull++] = w->w_pack;
		w->w_pack = NULL;
	}
	/* in a commit's write transaction (a heal at a flush, wloc.c) the
	 * pack is made in it: LMDB has one writer, and this thread is it */
	if (!w->w_pack && w->w_nfull == 0 && !w->w_txn) {
		rc = dd_writer_reuse_pack(w, &w->w_pack);
		if (rc)
			return rc;
	}
	if (!w->w_pack) {
		rc = w->w_txn ? dd_store_new_pack_in(w->w_store, &w->w_err,
						     w->w_txn, true,
						     &w->w_pack)
			      : dd_store_new_pack(w->w_store, &w->w_err, true,
						  &w->w_pack);
		if (rc)
			return rc;
	}
	rc = dd_pack_append(w->w_pack, &w->w_err, rec, payload, off);
	*pack = dd_pack_id(w->w_pack);
	if (!rc) {
		w->w_new_blocks++;
		w->w_new_lsize += rec->pr_lsize;
		w->w_new_bytes += DD_PACK_REC_HDR_SIZE + (uint64_t)rec->pr_psize;
	}
	return rc;
}

int dd_writer_sync_packs(dd_writer *w)
{
	int rc = 0;

	for (size_t i = 0; !rc && i < w->w_nfull; i++)
		rc = dd_pack_sync(w->w_full[i], &w->w_err);
	if (!rc && w->w_pack)
		rc = dd_pack_sync(w->w_pack, &w->w_err);
	return rc;
}

int dd_writer_record_packs(dd_writer *w)
{
	int rc = 0;

	for (size_t i = 0; !rc && i < w->w_nfull; i++)
		rc = dd_packs_put(w->w_txn, &w->w_err, dd_pack_id(w->w_full[i]),
				  dd_pack_end(w->w_full[i]));
	if (!rc && w->w_pack)
		rc = dd_packs_put(w->w_txn, &w->w_err, dd_pack_id(w->w_pack),
				  dd_pack_end(w->w_pack));
	return rc;
}

void dd_writer_close_full(dd_writer *w)
{
	for (size_t i = 0; i < w->w_nfull; i++)
		dd_pack_close(w->w_full[i]);
	w->w_nfull = 0;
}

void dd_writer_close_packs(dd_writer *w)
{
	dd_writer_close_full(w);
	dd_free(w->w_full);
	w->w_full = NULL;
	dd_pack_close(w->w_pack);
	w->w_pack = NULL;
}
