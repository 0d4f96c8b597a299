/*
 * recover.c -- entering a store to change it, and recovering what dead
 * writers left (format/store.md §5, §7).
 *
 * Whoever changes a store -- a writer, rm, gc -- holds STORE/lock shared
 * for as long as it runs (dd_store_enter); only repair and the format
 * upgrade take it exclusive.  Each one recovers first (dd_store_recover),
 * beside the others still running, so recovery acts only on what is
 * provably dead: a pending snapshot whose writer's registration nobody
 * holds (lock.c), a pack tail nobody's lock covers, a pack file no commit
 * recorded -- removed only under the catalog's write lock, since creating
 * one happens under it too (wpack.c).  The manifests come first
 * (commit.c): nothing is cut or removed from a store whose catalog
 * disagrees with them.  Then the pending snapshots of dead writers are
 * rolled back, the packs gc doomed are reaped once no reader needs them,
 * pack tails past their committed end are cut and packs no commit
 * recorded are removed -- never a record a DDT entry names.  Every flock
 * dies with its process, so a killed writer never leaves a store locked.
 */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/io.h"
#include "store/defer.h"
#include "store/manifest.h"
#include "store/store_internal.h"

/* ---- entering the store ------------------------------------------------------*/

/* A store of format 1 is upgraded first, with the store to itself (a
 * writer of an older build takes STORE/lock exclusive: it waits for this
 * one, or this one for it). */
static int dd_store_upgrade_alone(dd_store *s, dd_err *err)
{
	int fd, rc;

	pthread_mutex_lock(&s->st_lock);
	rc = s->st_format >= 2 ? 0 : dd_lock_take(s, err, "lock", true, &fd);
	if (!rc && s->st_format < 2) {
		rc = dd_store_recover(s, err);
		if (!rc)
			rc = dd_commit_upgrade(s, err);
		dd_lock_drop(fd);
	}
	pthread_mutex_unlock(&s->st_lock);
	return rc;
}

/* Format 2 (or 1) to 4 before a snapshot of digest version 2
 * (format/store.md §1): DEDUP rewritten whole, with the store to itself,
 * after re-reading it (another process may have done it). */
int dd_store_digest2(dd_store *s, dd_err *err)
{
	dd_store_conf conf;
	int fd = -1, rc = 0;

	if (s->st_chunker != DD_CHUNKER_FIXED || s->st_opts.readonly)
		return 0;   /* run-based already; or refused at the entry */
	pthread_mutex_lock(&s->st_lock);
	if (s->st_format >= DD_STORE_FORMAT_FIXED)
		goto out;
	if (s->st_rstore) {
		/* its DEDUP object is published once, at create */
		rc = dd_err_set(err, DD_ENOTSUP, "%s: a store of format %d in "
				"RADOS holds content digests of version 1 only",
				s->st_path, s->st_format);
		goto out;
	}
	/* alone: no build that reads format 2 only is in the store, and
	 * none enters it once DEDUP says 4 */
	rc = dd_lock_take(s, err, "lock", true, &fd);
	if (!rc && s->st_format < 2) {
		rc = dd_store_recover(s, err);
		if (!rc)
			rc = dd_commit_upgrade(s, err);
	}
	if (!rc)
		rc = dd_store_conf_read(err, s->st_path, &conf);
	if (!rc && conf.sc_format < DD_STORE_FORMAT_FIXED) {
		conf.sc_format = DD_STORE_FORMAT_FIXED;
		rc = dd_store_conf_write(err, s->st_path, &conf);
	}
	if (!rc)
		s->st_format = DD_STORE_FORMAT_FIXED;
	dd_lock_drop(fd);
out:
	pthread_mutex_unlock(&s->st_lock);
	return rc;
}

/* A RADOS store's session (rstore.h) comes first: it is what makes this
 * process the store's only changer, on every machine, before recovery
 * cuts any tail. */
static int dd_store_enter_rados(dd_store *s, dd_err *err)
{
	unsigned wait_ms = 0;

	if (!s->st_rstore)
		return 0;
	if (s->st_opts.wait_for_lock)
		wait_ms = s->st_opts.lock_timeout_ms ? s->st_opts.lock_timeout_ms
						     : UINT_MAX;
	return dd_rstore_enter(s->st_rstore, err, wait_ms);
}

int dd_store_enter(dd_store *s, dd_err *err, int *lockfd)
{
	int rc;

	*lockfd = -1;
	if (s->st_opts.readonly)
		return dd_err_set(err, DD_EPERM, "%s: store opened read-only",
				  s->st_path);
	rc = dd_store_enter_rados(s, err);
	if (rc)
		return rc;
	rc = dd_store_upgrade_alone(s, err);
	if (!rc)
		rc = dd_lock_take(s, err, "lock", false, lockfd);
	if (!rc) {
		rc = dd_store_recover(s, err);
		if (rc) {
			dd_lock_drop(*lockfd);
			*lockfd = -1;
		}
	}
	if (rc && s->st_rstore)
		dd_rstore_leave(s->st_rstore);
	return rc;
}

void dd_store_leave(dd_store *s, int lockfd)
{
	dd_lock_drop(lockfd);
	if (s->st_rstore)
		dd_rstore_leave(s->st_rstore);
}

/* ---- dead writers' pending snapshots ------------------------------------------*/

/* Pending ids to roll back: dead writers', but not a resumable receive's
 * (kept with its state for dd_replica_resume); a deferring put's with its
 * mark (defer.h). */
struct dd_pend_ids {
	dd_store *pi_store;
	dd_err *pi_err;
	uint64_t *pi_id;
	dd_defer_mark *pi_mark;   /* a deferring writer's, or dm_done = all */
	size_t pi_n, pi_cap;
};

static int dd_pend_collect(void *arg, uint64_t id, const dd_pend_rec *rec)
{
	struct dd_pend_ids *pi = arg;
	dd_defer_mark m = {.dm_done = UINT64_MAX};

	if ((rec->pr_state_len && !dd_defer_decode(rec, &m)) ||
	    dd_writer_alive(pi->pi_store, id))
		return 0;
	if (pi->pi_n == pi->pi_cap) {
		size_t n = pi->pi_cap ? pi->pi_cap * 2 : 8;
		uint64_t *ids = dd_realloc(pi->pi_id, n * sizeof(*ids));
		dd_defer_mark *marks;

		if (!ids)
			return dd_err_set(pi->pi_err, DD_ENOMEM, "out of memory");
		pi->pi_id = ids;
		marks = dd_realloc(pi->pi_mark, n * sizeof(*marks));
		if (!marks)
			return dd_err_set(pi->pi_err, DD_ENOMEM, "out of memory");
		pi->pi_mark = marks;
		pi->pi_cap = n;
	}
	pi->pi_mark[pi->pi_n] = m;
	pi->pi_id[pi->pi_n++] = id;
	return 0;
}

/* Rolls back every snapshot a dead writer left pending: its references
 * dropped, its map deleted.  A writer registers inside the transaction
 * that makes it pending and ends it inside the one that drops it, so
 * under the write lock a pending entry whose registration nobody holds
 * is a dead writer's.  A read first: most of the time there is none. */
static int dd_recover_pending(dd_store *s, dd_err *err)
{
	struct dd_pend_ids pi = {.pi_store = s, .pi_err = err};
	dd_txn *txn;
	int rc = dd_txn_begin(s->st_db, err, false, &txn);

	if (rc)
		return rc;
	rc = dd_pend_walk(txn, err, dd_pend_collect, &pi);
	dd_txn_abort(txn);
	if (rc || pi.pi_n == 0) {
		dd_free(pi.pi_id);
		dd_free(pi.pi_mark);
		return rc;
	}
	pi.pi_n = 0;
	rc = dd_txn_begin(s->st_db, err, true, &txn);
	if (rc) {
		dd_free(pi.pi_id);
		dd_free(pi.pi_mark);
		return rc;
	}
	rc = dd_pend_walk(txn, err, dd_pend_collect, &pi);
	for (size_t i = 0; !rc && i < pi.pi_n; i++) {
		/* a deferring writer's map counts only what its mark says */
		rc = dd_snap_drop_refs_if(txn, err, pi.pi_id[i],
					  dd_defer_counted_cb, &pi.pi_mark[i]);
		if (!rc)
			rc = dd_pend_del(txn, err, pi.pi_id[i]);
	}
	if (!rc && pi.pi_n)
		rc = dd_txn_commit(txn, err);
	else
		dd_txn_abort(txn);
	dd_free(pi.pi_id);
	dd_free(pi.pi_mark);
	return rc;
}

/* ---- doomed packs ------------------------------------------------------------*/

struct dd_doomed {
	dd_err *dm_err;
	uint64_t dm_oldest;       /* reap those doomed at or before this */
	uint32_t *dm_id;
	size_t dm_n, dm_cap;
	bool dm_all;              /* collect all, reapable or not */
};

static int dd_doomed_collect(void *arg, uint32_t id, uint64_t since)
{
	struct dd_doomed *dm = arg;

	if (!dm->dm_all && since > dm->dm_oldest)
		return 0;
	if (dm->dm_n == dm->dm_cap) {
		size_t n = dm->dm_cap ? dm->dm_cap * 2 : 16;
		uint32_t *ids = dd_realloc(dm->dm_id, n * sizeof(*ids));

		if (!ids)
			return dd_err_set(dm->dm_err, DD_ENOMEM, "out of memory");
		dm->dm_id = ids;
		dm->dm_cap = n;
	}
	dm->dm_id[dm->dm_n++] = id;
	return 0;
}

int dd_store_reap(dd_store *s, dd_err *err, uint64_t *freed)
{
	struct dd_doomed dm = {.dm_err = err};
	dd_txn *txn;
	int rc = dd_db_oldest_reader(s->st_db, err, &dm.dm_oldest);

	*freed = 0;
	if (!rc)
		rc = dd_txn_begin(s->st_db, err, true, &txn);
	if (rc)
		return rc;
	rc = dd_packs_walk_doomed(txn, err, dd_doomed_collect, &dm);
	for (size_t i = 0; !rc && i < dm.dm_n; i++)
		rc = dd_packs_del(txn, err, dm.dm_id[i]);
	if (rc || dm.dm_n == 0) {
		dd_txn_abort(txn);
		dd_free(dm.dm_id);
		return rc;
	}
	rc = dd_txn_commit(txn, err);
	/* forgotten first, unlinked after: a crash in between leaves files
	 * no record names, which recovery removes */
	for (size_t i = 0; !rc && i < dm.dm_n; i++) {
		char name[32];
		uint64_t size;

		dd_pack_name(name, sizeof(name), dm.dm_id[i]);
		if (dd_vdir_stat(s->st_packdir, NULL, name, &size) == 0)
			*freed += size;
		(void)dd_vdir_unlink(s->st_packdir, NULL, name);
	}
	if (!rc)
		(void)dd_vdir_sync(s->st_packdir, NULL);
	dd_free(dm.dm_id);
	return rc;
}

/* Is pack id doomed (its file must stay)? */
static bool dd_is_doomed(const struct dd_doomed *dm, uint32_t id)
{
	for (size_t i = 0; i < dm->dm_n; i++)
		if (dm->dm_id[i] == id)
			return true;
	return false;
}

struct dd_live_probe {
	dd_txn *lp_txn;
	uint32_t lp_pack;
	uint64_t lp_from;
	bool lp_live;
	uint64_t lp_offset;
	dd_err lp_err;
	int lp_rc;                /* a lookup that failed */
};

static int dd_live_probe_rec(void *ctx, uint64_t offset,
			     const dd_pack_rec *rec, const void *payload)
{
	struct dd_live_probe *lp = ctx;
	dd_ddt_ent ent;
	int rc;

	(void)payload;
	if (offset + DD_PACK_REC_HDR_SIZE + rec->pr_psize <= lp->lp_from)
		return 0; /* wholly before the cut */
	rc = dd_ddt_find_record(lp->lp_txn, &lp->lp_err, rec->pr_hash,
				lp->lp_pack, offset, &ent);
	if (rc == DD_ENOENT || (!rc && (ent.de_flags & DD_DDE_PENDING)))
		return 0;
	if (rc) {
		lp->lp_rc = rc;   /* a damaged entry: nothing is cut on it */
		return 1;
	}
	lp->lp_live = true;
	lp->lp_offset = offset;
	return 1;
}

/* May recovery cut pack p back to `from` (remove it: from 0)?  Only if
 * no DDT entry names a record that reaches past it.  A writer or gc that
 * died before committing left nothing a committed entry names; a
 * committed end or a packs entry damaged in the LMDB file would, and
 * destroying live blocks on its word is what recovery must never do:
 * DD_ECORRUPT then.  The walk reads headers from the pack's start (a
 * damaged end need not fall on a record) and stops at a torn record (a
 * killed writer's last one): nothing past it can be named either. */
static int dd_pack_tail_is_dead(dd_txn *txn, dd_err *err, dd_pack *p,
				uint64_t from)
{
	struct dd_live_probe lp = {.lp_txn = txn, .lp_pack = dd_pack_id(p),
				   .lp_from = from};
	dd_err walk_err;
	char name[16];           /* dd_pack_name's size */
	int rc = dd_pack_walk_headers(p, &walk_err, dd_live_probe_rec, &lp,
				      NULL);

	if (lp.lp_rc)
		return dd_err_copy(err, &lp.lp_err);
	if (lp.lp_live) {
		dd_pack_name(name, sizeof(name), lp.lp_pack);
		return dd_err_set(err, DD_ECORRUPT, "pack %s: the store's "
				  "metadata says it ends at %llu, but a live "
				  "block is at %llu (damaged metadata: not "
				  "cutting it; run scrub)", name,
				  (unsigned long long)from,
				  (unsigned long long)lp.lp_offset);
	}
	if (rc == DD_EIO || rc == DD_ENOMEM)
		return dd_err_copy(err, &walk_err);
	return 0;
}

static int dd_names_pack(void *ctx, const dd_ddt_key *key,
			 const dd_ddt_ent *ent)
{
	(void)key;
	return ent->de_pack == *(const uint32_t *)ctx &&
	       !(ent->de_flags & DD_DDE_PENDING);
}

/* Recovery's check for a pack whose header cannot be read: no committed
 * DDT entry may name it (one DDT walk; only after such a crash). */
static int dd_pack_unnamed(dd_txn *txn, dd_err *err, uint32_t id)
{
	char name[16];           /* dd_pack_name's size */
	int rc = dd_ddt_scan(txn, err, dd_names_pack, &id);

	if (rc != 1)
		return rc;
	dd_pack_name(name, sizeof(name), id);
	return dd_err_set(err, DD_ECORRUPT, "pack %s holds live blocks but "
			  "the store's metadata does not list it and its "
			  "header is unreadable (damage: not removing it; "
			  "run scrub)", name);
}

struct dd_pack_present {
	dd_store *pp_store;
	dd_err *pp_err;
};

static int dd_pack_present(void *arg, uint32_t id, uint64_t end)
{
	struct dd_pack_present *pp = arg;
	char name[16];           /* dd_pack_name's size */
	int rc;

	(void)end;
	dd_pack_name(name, sizeof(name), id);
	rc = dd_vdir_stat(pp->pp_store->st_packdir, pp->pp_err, name, NULL);
	if (rc != DD_ENOENT)
		return rc;
	return dd_err_set(pp->pp_err, DD_ECORRUPT, "pack %s is in the catalog "
			  "but not in packs/ (a catalog older than the store, "
			  "or a lost file): run dedup repair", name);
}

/* Cuts pack id back to its committed end, unless a live writer holds it
 * (its tail is its uncommitted work) or a live block is past the end
 * (dd_pack_tail_is_dead).  The end is read once the pack's lock is
 * ours: nobody can move it then. */
static int dd_recover_tail(dd_store *s, dd_err *err, uint32_t id)
{
	dd_pack *p = NULL;
	dd_txn *txn = NULL;
	uint64_t committed;
	dd_err busy;
	int rc = dd_pack_open(&p, err, s->st_packdir, id, 1);

	if (rc)
		return rc == DD_ENOENT ? 0 : rc;   /* reaped meanwhile */
	if (dd_pack_lock(p, &busy)) {
		dd_pack_close(p);
		return 0;
	}
	rc = dd_txn_begin(s->st_db, err, false, &txn);
	if (!rc)
		rc = dd_packs_get(txn, err, id, &committed);
	if (!rc)
		rc = dd_pack_tail_is_dead(txn, err, p, committed);
	if (!rc)
		rc = dd_pack_truncate(p, err, committed);
	if (rc == DD_ENOENT)
		rc = 0;   /* doomed meanwhile: gc's and the readers' now */
	dd_txn_abort(txn);
	dd_pack_close(p);
	return rc;
}

/* Removes pack id, which no commit recorded: a writer created it and died
 * before the transaction that records it committed.  Only inside a write
 * transaction (txn), as creation happens inside one (wpack.c): the file
 * cannot be one being created. */
static int dd_recover_orphan(dd_store *s, dd_err *err, dd_txn *txn,
			     const struct dd_doomed *doomed, uint32_t id)
{
	char name[16];           /* dd_pack_name's size */
	uint64_t end;
	dd_pack *p;
	dd_err busy;
	int rc = dd_packs_get(txn, err, id, &end);

	if (rc != DD_ENOENT || dd_is_doomed(doomed, id))
		return rc;   /* recorded since the scan */
	dd_pack_name(name, sizeof(name), id);
	rc = dd_pack_open(&p, err, s->st_packdir, id, 0);
	if (!rc) {
		if (dd_pack_lock(p, &busy) == 0)
			rc = dd_pack_tail_is_dead(txn, err, p, 0);
		else
			rc = 1;   /* someone holds it: not an orphan */
		dd_pack_close(p);
	} else if (rc == DD_ECORRUPT) {
		/* no readable header (a writer died before it was written):
		 * no record to walk, so ask the DDT whether any entry names
		 * the pack */
		rc = dd_pack_unnamed(txn, err, id);
	} else if (rc == DD_ENOENT) {
		return 0;
	}
	if (!rc) {
		rc = dd_vdir_unlink(s->st_packdir, err, name);
		if (rc == DD_ENOENT)
			rc = 0;
	}
	return rc == 1 ? 0 : rc;
}

/* What the scan of packs/ found to mend, and what it scans against. */
struct dd_pack_todo {
	dd_store *pt_store;
	dd_txn *pt_txn;
	const struct dd_doomed *pt_doomed;
	dd_err *pt_err;
	uint32_t *pt_tail, *pt_orphan;
	size_t pt_ntail, pt_norphan, pt_cap_tail, pt_cap_orphan;
};

static int dd_todo_add(dd_err *err, uint32_t **ids, size_t *n, size_t *cap,
		       uint32_t id)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 8;
		uint32_t *v = dd_realloc(*ids, c * sizeof(*v));

		if (!v)
			return dd_err_set(err, DD_ENOMEM, "out of memory");
		*ids = v;
		*cap = c;
	}
	(*ids)[(*n)++] = id;
	return 0;
}

/* One file of packs/ against the catalog of pt_txn (a dd_vdir_list_fn). */
static int dd_scan_pack(void *arg, const char *fname)
{
	struct dd_pack_todo *pt = arg;
	dd_err *err = pt->pt_err;
	char *end;
	unsigned long id;
	uint64_t committed, size;
	int rc;

	if (strlen(fname) != 13 || strcmp(fname + 8, ".pack") != 0)
		return 0;
	errno = 0;
	id = strtoul(fname, &end, 16);
	if (errno || end != fname + 8 || id == 0 || id > UINT32_MAX)
		return 0;
	if (dd_is_doomed(pt->pt_doomed, (uint32_t)id))
		return 0; /* a reader may still need it */
	rc = dd_packs_get(pt->pt_txn, err, (uint32_t)id, &committed);
	if (rc == DD_ENOENT)
		return dd_todo_add(err, &pt->pt_orphan, &pt->pt_norphan,
				   &pt->pt_cap_orphan, (uint32_t)id);
	if (rc)
		return rc;
	rc = dd_vdir_stat(pt->pt_store->st_packdir, err, fname, &size);
	if (rc)
		return rc;
	/* a pack shorter than its committed end lost records: damage, which
	 * scrub reports and reads refuse block by block; there is no tail to
	 * cut, and refusing here would keep rm and gc from removing the
	 * snapshots it hurt (format/store.md §5) */
	if (size > committed)
		return dd_todo_add(err, &pt->pt_tail, &pt->pt_ntail,
				   &pt->pt_cap_tail, (uint32_t)id);
	return 0;
}

/* Truncates pack tails past their committed end; removes pack files that
 * no commit recorded (created by a writer that died before committing).
 * Neither happens to a pack a live writer holds, nor to one holding a
 * block the DDT names (metadata damage): dd_pack_tail_is_dead.  The scan
 * reads; only the removals take the write lock, and only when there are
 * some. */
static int dd_recover_packs(dd_store *s, dd_err *err)
{
	struct dd_doomed doomed = {.dm_err = err, .dm_all = true};
	struct dd_pack_todo pt = {.pt_store = s, .pt_doomed = &doomed,
				  .pt_err = err};
	dd_txn *txn;
	int rc = dd_txn_begin(s->st_db, err, false, &txn);

	if (rc)
		return rc;
	rc = dd_packs_walk_doomed(txn, err, dd_doomed_collect, &doomed);
	/* every pack the catalog records must be there before anything is
	 * cut: a catalog that lists vanished packs is not one to trust with
	 * deciding what else is dead */
	if (!rc)
		rc = dd_packs_walk(txn, err, dd_pack_present,
				   &(struct dd_pack_present){s, err});
	pt.pt_txn = txn;
	if (!rc)
		rc = dd_vdir_list(s->st_packdir, err, dd_scan_pack, &pt);
	dd_txn_abort(txn);
	for (size_t i = 0; !rc && i < pt.pt_ntail; i++)
		rc = dd_recover_tail(s, err, pt.pt_tail[i]);
	if (!rc && pt.pt_norphan) {
		doomed.dm_n = 0;
		rc = dd_txn_begin(s->st_db, err, true, &txn);
		if (!rc) {
			rc = dd_packs_walk_doomed(txn, err, dd_doomed_collect,
						  &doomed);
			for (size_t i = 0; !rc && i < pt.pt_norphan; i++)
				rc = dd_recover_orphan(s, err, txn, &doomed,
						       pt.pt_orphan[i]);
			dd_txn_abort(txn);
		}
	}
	if (!rc && (pt.pt_ntail || pt.pt_norphan))
		rc = dd_vdir_sync(s->st_packdir, err);
	dd_free(doomed.dm_id);
	dd_free(pt.pt_tail);
	dd_free(pt.pt_orphan);
	return rc;
}

int dd_store_recover(dd_store *s, dd_err *err)
{
	uint64_t freed;
	/* the manifests first: they say what is committed, and nothing is
	 * cut or removed from a store whose catalog disagrees with them */
	int rc = dd_commit_recover(s, err);

	if (!rc)
		rc = dd_recover_pending(s, err);
	if (!rc)
		rc = dd_store_reap(s, err, &freed);
	if (!rc)
		rc = dd_recover_packs(s, err);
	return rc;
}

