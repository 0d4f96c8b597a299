/*
 * wlife.c -- a writer's life: entering the store, reserving its snapshot,
 * the commit that makes it visible, and letting go (format/store.md §7,
 * docs/design.md "Concurrent writers").
 *
 *   open     the store lock, shared (only repair and a format upgrade take
 *            it exclusive), and recovery of what dead writers left; then
 *            one write transaction reserves the snapshot: its id from
 *            snap.next, a `pend` entry naming it (a name already
 *            committed or pending is refused -- except that a receive
 *            may share it with dead writers' kept receives, which its
 *            commit drops) and the writer's entry in
 *            STORE/writers, locked for as long as it runs.  That entry is
 *            made before the reservation commits, so a pending snapshot
 *            whose entry nobody holds is a dead writer's, for recovery;
 *            and its `start` -- the catalog as of right after -- tells gc
 *            which dead blocks this writer may still reference;
 *   finish   the last interval's commit; the manifest, published from the
 *            block map (the snapshot is committed from here on) -- a
 *            deferring writer's written while its last flush runs, and
 *            published once that has committed; a short
 *            write transaction that records it and drops `pend`; for a
 *            receive, another that drops the older kept receives of its
 *            name (they could never complete now);
 *   release  read transactions ended, packs closed (their locks go), the
 *            registration removed, the store lock dropped.  An aborted
 *            writer runs recovery at once, which rolls its snapshot back
 *            now that nobody holds its entry.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "catalog/kfilter.h"
#include "store/manifest.h"
#include "store/writer_internal.h"

/* The pending entries of a writer's name, other than its own: a live
 * writer's (it runs: registered and locked), a dead writer's kept
 * receive (ddrecv -s), or a dead writer's that recovery has not rolled
 * back yet.  Read in the reservation's write transaction, in which every
 * writer registers: a writer of the name is alive exactly when its
 * reservation committed and it has not finished. */
struct dd_name_pend {
	dd_writer *np_w;
	uint64_t np_live, np_kept, np_dead;   /* an id of each, 0: none */
	bool np_own;                          /* a resumed receive's own */
};

static int dd_name_pend_each(void *arg, uint64_t id, const dd_pend_rec *rec)
{
	struct dd_name_pend *np = arg;

	if (strcmp(rec->pr_name, np->np_w->w_name) != 0)
		return 0;
	if (id == np->np_w->w_id)
		np->np_own = true;
	else if (dd_writer_alive(np->np_w->w_store, id))
		np->np_live = id;
	else if (dd_pend_is_receive(rec))
		np->np_kept = id;
	else
		np->np_dead = id;
	return 0;
}

/* One live writer a name: another is refused, and so is anything beside
 * a kept receive but a receive (whose commit drops it). */
static int dd_writer_name_free(dd_writer *w, dd_txn *txn)
{
	struct dd_name_pend np = {.np_w = w};
	char who[400];
	int rc = dd_pend_walk(txn, &w->w_err, dd_name_pend_each, &np);

	if (rc < 0)
		return rc;
	if (np.np_live || np.np_dead) {
		dd_writer_who(w->w_store, np.np_live ? np.np_live : np.np_dead,
			      who, sizeof(who));
		return dd_err_set(&w->w_err, DD_EEXIST, "snapshot '%s' is being "
				  "written%s%s%s", w->w_name, *who ? " (" : "",
				  who, *who ? ")" : "");
	}
	if (np.np_kept && !w->w_receive)
		return dd_err_set(&w->w_err, DD_EEXIST, "snapshot '%s' is a "
				  "receive kept for resuming (ddrecv -A "
				  "discards it)", w->w_name);
	if (w->w_id && !np.np_own)   /* a resumed receive's own entry */
		return dd_err_set(&w->w_err, DD_ENOENT, "the partial receive "
				  "of '%s' is gone", w->w_name);
	return 0;
}

/* The reservation's checks and changes, in its write transaction. */
static int dd_writer_reserve_txn(dd_writer *w, dd_txn *txn)
{
	dd_store *s = w->w_store;
	dd_snap_rec existing;
	int rc = dd_snap_get(txn, &w->w_err, w->w_name, &existing);

	if (rc == 0)
		return dd_err_set(&w->w_err, DD_EEXIST,
				  "snapshot '%s' already exists", w->w_name);
	if (rc != DD_ENOENT)
		return rc;
	rc = dd_writer_name_free(w, txn);
	if (rc || w->w_id)   /* a resumed receive keeps its id */
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
		rc = dd_writer_pend_put(w, txn);
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

/* The digest version of a writer asked for dv (0: a new snapshot's),
 * the store made able to hold it first.  A new snapshot of a store that
 * cannot become format 4 now -- in RADOS, or with other writers in it
 * (lock busy) -- is of version 1: a put never fails for the upgrade,
 * which a later one makes; a receive keeps its stream's version or
 * fails. */
static int dd_writer_dv(dd_store *s, dd_err *err, int dv, int *out)
{
	int rc;

	*out = dv ? dv : DD_DIGEST_V2;
	if (s->st_chunker != DD_CHUNKER_FIXED)
		*out = DD_DIGEST_V1;   /* run-based already: one digest */
	if (*out != DD_DIGEST_V2)
		return 0;
	rc = dd_store_digest2(s, err);
	if ((rc == DD_ENOTSUP || rc == DD_EBUSY) && !dv) {
		*out = DD_DIGEST_V1;
		dd_err_clear(err);
		return 0;
	}
	return rc;
}

int dd_writer_open(dd_writer **out, dd_store *s, const char *name,
		   uint64_t resume_id, bool receive, int dv)
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
	w->w_receive = receive;
	/* a receive keeps a resumable state of its own; verify mode may pick
	 * another variant of a key at the commit, which the block map of an
	 * earlier interval would then not have */
	w->w_defer = !receive && !s->st_verify && dd_writer_defer_setup(w);
	w->w_lockfd = -1;
	w->w_regfd = -1;
	snprintf(w->w_name, sizeof(w->w_name), "%s", name);
	w->w_state = DD_W_OPEN;
	rc = dd_writer_dv(s, &w->w_err, dv, &w->w_dv);
	if (!rc)
		rc = dd_store_enter(s, &w->w_err, &w->w_lockfd);
	if (!rc)
		rc = dd_scratch_init(&w->w_sc, &w->w_err, s);
	if (!rc && s->st_verify &&
	    !(w->w_vbuf = dd_malloc(s->st_block_max)))
		rc = dd_err_set(&w->w_err, DD_ENOMEM, "out of memory");
	if (!rc)
		rc = dd_digest_new(&w->w_digest, &w->w_err, s->st_chunker,
				   w->w_dv, w->w_bs);
	if (!rc)
		rc = dd_db_kf_prepare(s->st_db, &w->w_err);
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

	dd_wloc_free(w);   /* its cursors before their txns */
	dd_writer_txns_end(w);
	dd_writer_close_packs(w);
	dd_writer_unregister(s, w->w_id, w->w_regfd);
	w->w_regfd = -1;
	/* Roll back what intermediate commits made durable and cut the
	 * packs' tails; if this fails, the next writer's recovery does it. */
	if (recover && w->w_lockfd >= 0)
		dd_store_recover(s, &(dd_err){0});
	dd_store_leave(w->w_store, w->w_lockfd);
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

/* ---- the manifest written beside the last flush ----------------------------*/

/* A deferring writer's last flush changes the DDT only: the block map the
 * last interval committed is the map published
 * (dd_writer_sync_commit_last).  So the manifest is written and synced
 * from it on a thread of its own while the flush runs -- a re-put of
 * 1 GiB at 4 KiB blocks spends about 0.1 s in each, one after the other
 * before -- and published only once the flush has committed, as ever.
 * Local stores only: a RADOS store's manifest directory is not shared
 * between threads. */
struct dd_early_mf {
	dd_writer *em_w;
	const dd_snap_rec *em_rec;
	pthread_t em_thread;
	bool em_started;
	int em_rc;
	dd_err em_err;            /* the thread's; copied to w_err */
	dd_manifest_writer *em_mw;
};

static void *dd_early_mf_main(void *arg)
{
	struct dd_early_mf *em = arg;
	dd_store *s = em->em_w->w_store;
	dd_txn *txn;

	/* begun after the last interval's commit: sees the whole map */
	em->em_rc = dd_txn_begin(s->st_db, &em->em_err, false, &txn);
	if (em->em_rc)
		return NULL;
	em->em_rc = dd_commit_manifest(s, &em->em_err, txn, em->em_w->w_name,
				       em->em_rec, &em->em_mw);
	dd_txn_abort(txn);
	return NULL;
}

/* dd_writer_sync_commit_last's `mapped`: starts the thread (with every
 * signal blocked, as the pool's: the host's handlers run on its own
 * threads); if it cannot start, the manifest is written after the flush,
 * as it was. */
static void dd_early_mf_start(void *arg)
{
	struct dd_early_mf *em = arg;
	sigset_t all, old;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	em->em_started = pthread_create(&em->em_thread, NULL,
					dd_early_mf_main, em) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* The last interval, its flush and the manifest: published once both
 * are done. */
static int dd_writer_commit_publish(dd_writer *w, const dd_snap_rec *rec)
{
	struct dd_early_mf em = { .em_w = w, .em_rec = rec };
	bool early = w->w_defer && w->w_store->st_mfdir &&
		     !w->w_store->st_rstore;
	int rc = dd_writer_sync_commit_last(w, early ? dd_early_mf_start
						     : NULL, &em);

	w->w_on_commit = NULL; /* done: no state to keep */
	if (em.em_started) {
		pthread_join(em.em_thread, NULL);
		if (!rc && em.em_rc)
			rc = dd_err_copy(&w->w_err, &em.em_err);
		if (!rc)
			rc = dd_commit_publish_written(w->w_store, &w->w_err,
						       w->w_id);
	} else if (!rc) {
		rc = dd_writer_publish(w, rec);
	}
	/* removes ID.tmp unless it was published */
	dd_manifest_write_free(em.em_mw);
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

/* The kept receives of a committed receive's name, older than it: none
 * can complete now (the name is taken).  Dead writers' only: a live
 * resumer (which the reservation would have refused) is left alone. */
static int dd_kept_of_name(void *arg, uint64_t id, const dd_pend_rec *rec)
{
	struct dd_name_pend *np = arg;

	if (!np->np_kept && dd_pend_is_receive(rec) && id < np->np_w->w_id &&
	    !strcmp(rec->pr_name, np->np_w->w_name) &&
	    !dd_writer_alive(np->np_w->w_store, id))
		np->np_kept = id;
	return 0;
}

/* Drops them, one write transaction each, as dd_recv_abort_partial does.
 * After the commit, so never at its expense: a failure (or a crash) leaves
 * a kept receive that ddrecv -A still drops. */
static void dd_writer_drop_kept(dd_writer *w)
{
	struct dd_name_pend np = {.np_w = w};
	dd_err err;

	do {
		dd_txn *txn;
		int rc;

		np.np_kept = 0;
		if (dd_txn_begin(w->w_store->st_db, &err, true, &txn))
			return;
		rc = dd_pend_walk(txn, &err, dd_kept_of_name, &np);
		if (rc >= 0 && np.np_kept)
			rc = dd_snap_drop_refs(txn, &err, np.np_kept);
		if (rc >= 0 && np.np_kept)
			rc = dd_pend_del(txn, &err, np.np_kept);
		if (rc < 0 || !np.np_kept || dd_txn_commit(txn, &err)) {
			if (rc < 0 || !np.np_kept)
				dd_txn_abort(txn);
			return;
		}
	} while (np.np_kept);
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
		.sr_digest_version = w->w_dv,
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
	rc = dd_writer_commit_publish(w, &rec);
	if (rc)
		return rc;
	rc = dd_writer_record(w, &rec);
	if (rc) {
		dd_commit_unpublish(w->w_store, w->w_id);
		return rc;
	}
	w->w_state = DD_W_COMMITTED;
	if (w->w_receive)
		dd_writer_drop_kept(w);
	dd_writer_release(w, false);
	return 0;
}
