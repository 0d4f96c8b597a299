/*
 * wlife.c -- a writer's life: entering the store, reserving its snapshot,
 * the commit that makes it visible, and letting go (format/store.md §7,
 * docs/design.md "Concurrent writers").
 *
 *   open     the store lock, shared (only repair and a format upgrade take
 *            it exclusive), and recovery of what dead writers left; then
 *            one write transaction reserves the snapshot: its id from
 *            snap.next, a `pend` entry naming it (a name already
 *            committed or pending is refused) and the writer's entry in
 *            STORE/writers, locked for as long as it runs.  That entry is
 *            made before the reservation commits, so a pending snapshot
 *            whose entry nobody holds is a dead writer's, for recovery;
 *            and its `start` -- the catalog as of right after -- tells gc
 *            which dead blocks this writer may still reference;
 *   finish   the last interval's commit; the manifest, published from the
 *            block map (the snapshot is committed from here on); a short
 *            write transaction that records it and drops `pend`;
 *   release  read transactions ended, packs closed (their locks go), the
 *            registration removed, the store lock dropped.  An aborted
 *            writer runs recovery at once, which rolls its snapshot back
 *            now that nobody holds its entry.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "store/writer_internal.h"

/* The reservation's checks and changes, in its write transaction. */
static int dd_writer_reserve_txn(dd_writer *w, dd_txn *txn)
{
	dd_store *s = w->w_store;
	dd_snap_rec existing;
	uint64_t other;
	char who[400];
	int rc = dd_snap_get(txn, &w->w_err, w->w_name, &existing);

	if (rc == 0)
		return dd_err_set(&w->w_err, DD_EEXIST,
				  "snapshot '%s' already exists", w->w_name);
	if (rc != DD_ENOENT)
		return rc;
	rc = dd_pend_find_name(txn, &w->w_err, w->w_name, &other);
	if (rc == 0 && other != w->w_id) {
		dd_writer_who(s, other, who, sizeof(who));
		if (*who)
			return dd_err_set(&w->w_err, DD_EEXIST, "snapshot '%s' "
					  "is being written (%s)", w->w_name,
					  who);
		return dd_err_set(&w->w_err, DD_EEXIST, "snapshot '%s' is a "
				  "receive kept for resuming (ddrecv -A "
				  "discards it)", w->w_name);
	}
	if (rc == 0 || (rc == DD_ENOENT && w->w_id))
		/* a resumed receive: its own entry, or gone */
		return rc == 0 ? 0 : dd_err_set(&w->w_err, DD_ENOENT,
						"the partial receive of '%s' "
						"is gone", w->w_name);
	if (rc != DD_ENOENT)
		return rc;
	rc = dd_meta_get_u64(txn, &w->w_err, "snap.next", &w->w_id);
	if (rc == DD_ENOENT)
		rc = dd_err_set(&w->w_err, DD_ECORRUPT,
				"store metadata is incomplete");
	if (!rc)
		rc = dd_commit_id_unused(s, &w->w_err, txn, w->w_id);
	if (!rc)
		rc = dd_meta_put_u64(txn, &w->w_err, "snap.next", w->w_id + 1);
	if (!rc)
		rc = dd_pend_put(txn, &w->w_err, w->w_id, w->w_name);
	return rc;
}

/* Reserves the snapshot and registers the writer, in one commit (a
 * resumed receive keeps its id and pending record); then its start. */
static int dd_writer_reserve(dd_writer *w)
{
	dd_store *s = w->w_store;
	dd_txn *txn;
	int rc = dd_txn_begin(s->st_db, &w->w_err, true, &txn);

	if (rc)
		return rc;
	rc = dd_writer_reserve_txn(w, txn);
	/* start 0 until it is known: gc frees no dead block meanwhile */
	if (!rc)
		rc = dd_writer_register(s, &w->w_err, w->w_id, 0, &w->w_regfd);
	if (!rc)
		rc = dd_txn_commit(txn, &w->w_err);
	else
		dd_txn_abort(txn);
	if (rc) {
		dd_writer_unregister(s, w->w_id, w->w_regfd);
		w->w_regfd = -1;
		return rc;
	}
	/* Every lookup reads a catalog at least this new.  A gc that missed
	 * the registration read the catalog before it, so a block it frees
	 * died at or before this start, and dd_writer_usable refuses it. */
	rc = dd_writer_renew(w);
	if (!rc) {
		w->w_start = dd_txn_id(w->w_rtxn);
		dd_writer_set_start(w->w_regfd, w->w_start);
		dd_txn_reset(w->w_rtxn);
	}
	return rc;
}

int dd_writer_open(dd_writer **out, dd_store *s, const char *name,
		   uint64_t resume_id)
{
	dd_writer *w;
	int rc;

	if (!s || !out)
		return s ? dd_store_failf(s, DD_EINVAL, "dd_writer_begin: "
					  "NULL argument") : DD_EINVAL;
	if (dd_name_check(name))
		return dd_store_failf(s, DD_ENAME, "invalid snapshot name "
				      "(1-255 bytes, no '/', '@', control "
				      "characters, '.' or '..')");
	w = dd_calloc(1, sizeof(*w));
	if (!w)
		return dd_store_failf(s, DD_ENOMEM, "out of memory");
	w->w_store = s;
	w->w_bs = s->st_block_size;
	w->w_id = resume_id;
	w->w_lockfd = -1;
	w->w_regfd = -1;
	snprintf(w->w_name, sizeof(w->w_name), "%s", name);
	w->w_state = DD_W_OPEN;
	rc = dd_store_enter(s, &w->w_err, &w->w_lockfd);
	if (!rc)
		rc = dd_scratch_init(&w->w_sc, &w->w_err, s);
	if (!rc && s->st_verify &&
	    !(w->w_vbuf = dd_malloc(s->st_block_max)))
		rc = dd_err_set(&w->w_err, DD_ENOMEM, "out of memory");
	if (!rc)
		rc = dd_digest_new(&w->w_digest, &w->w_err, s->st_chunker);
	if (!rc)
		rc = dd_writer_reserve(w);
	if (rc) {
		dd_store_fail(s, &w->w_err);
		/* nothing of it is pending: no recovery to run */
		w->w_state = DD_W_ABORTED;
		dd_writer_free(w);
		return rc;
	}
	*out = w;
	return 0;
}

/* Ends the read txns: the writer lets go of the store after this. */
static void dd_writer_txns_end(dd_writer *w)
{
	for (unsigned i = 0; w->w_probe && i < w->w_nworkers; i++) {
		dd_txn_abort(w->w_probe[i]);
		w->w_probe[i] = NULL;
	}
	dd_txn_abort(w->w_rtxn);
	w->w_rtxn = NULL;
}

void dd_writer_release(dd_writer *w, bool recover)
{
	dd_store *s = w->w_store;

	dd_writer_txns_end(w);
	dd_writer_close_packs(w);
	dd_writer_unregister(s, w->w_id, w->w_regfd);
	w->w_regfd = -1;
	/* Roll back what intermediate commits made durable and cut the
	 * packs' tails; if this fails, the next writer's recovery does it. */
	if (recover && w->w_lockfd >= 0)
		dd_store_recover(s, &(dd_err){0});
	dd_store_leave(w->w_lockfd);
	w->w_lockfd = -1;
}

/* Publishes the manifest from the block map as a fresh read of the
 * catalog has it. */
static int dd_writer_publish(dd_writer *w, const dd_snap_rec *rec)
{
	int rc = dd_writer_renew(w);

	if (!rc)
		rc = dd_commit_publish(w->w_store, &w->w_err, w->w_rtxn,
				       w->w_name, rec);
	dd_txn_reset(w->w_rtxn);
	return rc;
}

/* Records the published snapshot in the catalog and drops its pending
 * entry (the reservation keeps the name for it: nobody else can have
 * taken it). */
static int dd_writer_record(dd_writer *w, const dd_snap_rec *rec)
{
	dd_txn *txn;
	int rc = dd_txn_begin(w->w_store->st_db, &w->w_err, true, &txn);

	if (rc)
		return rc;
	rc = dd_snap_put(txn, &w->w_err, w->w_name, rec);
	if (!rc)
		rc = dd_pend_del(txn, &w->w_err, w->w_id);
	if (rc) {
		dd_txn_abort(txn);
		return rc;
	}
	return dd_txn_commit(txn, &w->w_err);
}

int dd_writer_finish(dd_writer *w, const uint8_t *expect_digest)
{
	dd_snap_rec rec;
	int rc;

	rec = (dd_snap_rec){
		.sr_id = w->w_id,
		.sr_block_size = w->w_bs,
		.sr_size = w->w_size,
		.sr_ctime = (int64_t)time(NULL),
	};
	/* blocks as the formats count them: a run of holes of a content-
	 * defined image is one (format/chunker.md §5) */
	dd_digest_counts(w->w_digest, &rec.sr_blocks, &rec.sr_zero_blocks);
	dd_digest_final(w->w_digest, w->w_size, w->w_bs, rec.sr_digest);
	if (expect_digest && memcmp(expect_digest, rec.sr_digest, DD_HASH_SIZE))
		return dd_err_set(&w->w_err, DD_ECHECKSUM,
				  "content digest of '%s' does not match the "
				  "one announced", w->w_name);
	/* The commit (format/manifest.md §7): data and block map durable
	 * first, the snapshot still pending; then the manifest, published
	 * from that map -- from here on the snapshot is committed --; then
	 * the catalog records it.  Should that last commit fail, the
	 * publication is taken back: a failed commit leaves no snapshot. */
	rc = dd_writer_sync_commit(w);
	w->w_on_commit = NULL; /* done: no state to keep */
	if (!rc)
		rc = dd_writer_publish(w, &rec);
	if (rc)
		return rc;
	rc = dd_writer_record(w, &rec);
	if (rc) {
		dd_commit_unpublish(w->w_store, w->w_id);
		return rc;
	}
	w->w_state = DD_W_COMMITTED;
	dd_writer_release(w, false);
	return 0;
}
