/*
 * commit.c -- the commit protocol: manifests are the truth, the catalog
 * follows them (format/manifest.md §7, format/store.md §7).
 *
 * A snapshot is committed when its manifest is published (ID.tmp renamed
 * to ID.snap) and deleted when it is renamed to ID.del; the catalog
 * transaction that records either comes right after.  A crash in between
 * leaves the catalog one step behind, which this file resolves in two
 * ways:
 *
 *  - readers see the manifests' state (visible.c): a `pend` entry whose
 *    ID.snap exists is a committed snapshot, its record taken from the
 *    manifest header; a snapshot with an ID.del is gone;
 *  - the next writer's recovery (dd_commit_recover; it acts only for
 *    writers and rm that are gone, lock.c)
 *    brings the catalog up to date: drops ID.del snapshots, rolls forward
 *    a published `pend` entry after checking its block map against the
 *    manifest, removes ID.tmp files.
 *
 * Anything else that disagrees -- an ID.snap the catalog does not know, a
 * catalog snapshot without a manifest -- means the catalog is older than
 * the store or damaged: dd_commit_check says so, naming `dedup repair`,
 * and writers refuse to build on it.
 *
 * A store of format 1 has no manifests (st_mfdir NULL): everything here is
 * then a no-op and the catalog alone is the truth, until the first writer
 * upgrades it (dd_commit_upgrade): a manifest for every snapshot, then
 * DEDUP rewritten as format 2 -- the last step, so a crash before it
 * leaves a format-1 store that the next writer upgrades again.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/endian.h"
#include "common/io.h"
#include "store/manifest.h"
#include "store/store_internal.h"

static int dd_pend_has_id(void *arg, uint64_t id, const dd_pend_rec *rec)
{
	(void)rec;
	return id == *(const uint64_t *)arg;
}

int dd_commit_id_unused(dd_store *s, dd_err *err, dd_txn *txn, uint64_t id)
{
	dd_bmap_cur *cur;
	dd_ddt_key key;
	uint64_t idx;
	int rc = dd_bmap_open(txn, err, id, &cur), used = 0;

	if (!rc) {
		rc = dd_bmap_seek(cur, err, 0, &idx, &key);
		dd_bmap_close(cur);
		used = rc == 1;
	}
	if (rc >= 0 && !used) {
		rc = dd_pend_walk(txn, err, dd_pend_has_id, &id);
		used = rc == 1;
	}
	for (int st = DD_MANIFEST_SNAP; rc >= 0 && !used && s->st_mfdir &&
	     st <= DD_MANIFEST_DEL; st++)
		used = dd_manifest_present(s, id, st);
	if (rc < 0)
		return rc;
	if (used)
		return dd_err_set(err, DD_ECORRUPT, "the catalog's next snapshot "
				  "id %llu is in use (an older or damaged "
				  "catalog): run dedup repair",
				  (unsigned long long)id);
	return 0;
}

/* ---- writing a manifest from a block map ----------------------------------*/

/* Writes manifests/ID.tmp of snapshot id from its block map as txn sees
 * it, checked against rec's digest, and durable; mw is the caller's. */
static int dd_mf_write_from_map(dd_store *s, dd_err *err, dd_txn *txn,
				const char *name, const dd_snap_rec *rec,
				dd_manifest_writer **mwp)
{
	dd_manifest_hdr h = {
		.mh_chunker = s->st_chunker,
		.mh_id = rec->sr_id, .mh_ctime = rec->sr_ctime,
		.mh_size = rec->sr_size, .mh_blocks = rec->sr_blocks,
		.mh_zero_blocks = rec->sr_zero_blocks,
		.mh_block_size = rec->sr_block_size,
		.mh_hash_kind = (uint32_t)s->st_hash_kind,
	};
	bool var = s->st_chunker != DD_CHUNKER_FIXED;
	/* a map of content-defined blocks counts bytes: a gap is a hole */
	uint64_t end = var ? rec->sr_size : rec->sr_blocks;
	dd_bmap_cur *cur = NULL;
	dd_ddt_key key;
	uint64_t idx, at = 0;
	int rc;

	memcpy(h.mh_digest, rec->sr_digest, DD_HASH_SIZE);
	h.mh_dv = rec->sr_digest_version ? rec->sr_digest_version
					 : DD_DIGEST_V1;
	snprintf(h.mh_name, sizeof(h.mh_name), "%s", name);
	rc = dd_manifest_write_begin(mwp, err, s->st_mfdir, rec->sr_id, name,
				     s->st_chunker, h.mh_dv,
				     rec->sr_block_size);
	if (!rc)
		rc = dd_bmap_open(txn, err, rec->sr_id, &cur);
	for (rc = rc ? rc : dd_bmap_seek(cur, err, 0, &idx, &key); rc == 1;
	     rc = dd_bmap_next(cur, err, &idx, &key)) {
		uint32_t len = dd_bmap_len(cur);

		if (idx >= end || (var && len > end - idx)) {
			rc = dd_err_set(err, DD_ECORRUPT, "snapshot '%s': block "
					"map entry %llu past its end", name,
					(unsigned long long)idx);
			break;
		}
		rc = dd_manifest_write_holes(*mwp, err, idx - at);
		if (!rc)
			rc = dd_manifest_write_block(*mwp, err, key.dk_hash,
						     key.dk_variant, len);
		if (rc)
			break;
		at = idx + (var ? len : 1);
	}
	dd_bmap_close(cur);
	if (!rc)
		rc = dd_manifest_write_holes(*mwp, err, end - at);
	if (!rc)
		rc = dd_manifest_write_finish(*mwp, err, &h);
	return rc;
}

int dd_commit_manifest(dd_store *s, dd_err *err, dd_txn *txn,
		       const char *name, const dd_snap_rec *rec,
		       dd_manifest_writer **mw)
{
	*mw = NULL;
	return s->st_mfdir ? dd_mf_write_from_map(s, err, txn, name, rec, mw)
			   : 0;
}

int dd_commit_publish_written(dd_store *s, dd_err *err, uint64_t id)
{
	bool moved = false;
	int rc = 0;

	if (!s->st_mfdir)
		return 0;
	/* the commit: only while this process holds a RADOS store's lock (a
	 * writer cut off past the lock's duration commits nothing) */
	if (s->st_rstore)
		rc = dd_rstore_check(s->st_rstore, err);
	if (!rc)
		rc = dd_manifest_move(s->st_mfdir, err, id, DD_MANIFEST_TMP,
				      DD_MANIFEST_SNAP, &moved);
	/* published but not known durable: a failure must leave no
	 * committed snapshot behind */
	if (rc && moved)
		dd_commit_unpublish(s, id);
	return rc;
}

int dd_commit_publish(dd_store *s, dd_err *err, dd_txn *txn, const char *name,
		      const dd_snap_rec *rec)
{
	dd_manifest_writer *mw = NULL;
	int rc = dd_commit_manifest(s, err, txn, name, rec, &mw);

	if (!rc)
		rc = dd_commit_publish_written(s, err, rec->sr_id);
	dd_manifest_write_free(mw);
	return rc;
}

void dd_commit_unpublish(dd_store *s, uint64_t id)
{
	dd_err err;
	bool moved;

	if (!s->st_mfdir)
		return;
	/* back to a temporary name first, so that a crash in between leaves
	 * a file recovery removes, never a published one */
	dd_manifest_move(s->st_mfdir, &err, id, DD_MANIFEST_SNAP,
			 DD_MANIFEST_TMP, &moved);
	if (moved)
		dd_manifest_remove(s->st_mfdir, &err, id, DD_MANIFEST_TMP);
}

int dd_commit_delete_begin(dd_store *s, dd_err *err, uint64_t id)
{
	bool moved = false;
	int rc;

	if (!s->st_mfdir)
		return 0;
	rc = dd_manifest_move(s->st_mfdir, err, id, DD_MANIFEST_SNAP,
			      DD_MANIFEST_DEL, &moved);
	if (rc == DD_ENOENT)
		return dd_err_set(err, DD_ECORRUPT, "the snapshot has no "
				  "manifest: the catalog does not match the "
				  "store: run dedup repair");
	/* renamed but not known durable: as if it never happened */
	if (rc && moved)
		dd_commit_delete_undo(s, id);
	return rc;
}

void dd_commit_delete_undo(dd_store *s, uint64_t id)
{
	dd_err err;
	bool moved;

	if (s->st_mfdir)
		dd_manifest_move(s->st_mfdir, &err, id, DD_MANIFEST_DEL,
				 DD_MANIFEST_SNAP, &moved);
}

void dd_commit_delete_end(dd_store *s, uint64_t id)
{
	dd_err err;

	/* a leftover ID.del names a snapshot the catalog no longer has:
	 * recovery removes it.  An ID.snap beside it (a RADOS rename cut
	 * short, format/store.md §11) goes first, or it would come back. */
	if (s->st_mfdir && s->st_rstore)
		dd_manifest_remove(s->st_mfdir, &err, id, DD_MANIFEST_SNAP);
	if (s->st_mfdir)
		dd_manifest_remove(s->st_mfdir, &err, id, DD_MANIFEST_DEL);
}

/* ---- comparing a block map with a manifest --------------------------------*/

int dd_commit_compare_map(dd_store *s, dd_err *err, dd_txn *txn, uint64_t id,
			  const char *name)
{
	dd_manifest_reader *mr = NULL;
	dd_manifest_hdr h;
	dd_manifest_ent e;
	dd_bmap_cur *cur = NULL;
	dd_ddt_key key;
	uint64_t idx = 0;
	int have, rc;

	rc = dd_manifest_open_at(&mr, err, s->st_mfdir, id, DD_MANIFEST_SNAP,
				 &h);
	if (rc == DD_ENOENT)
		return dd_err_set(err, DD_ENOENT, "snapshot '%s' has no "
				  "manifest", name);
	if (rc)
		return rc;
	if (strcmp(h.mh_name, name)) {
		rc = dd_err_set(err, DD_ECORRUPT, "snapshot '%s': its manifest "
				"names '%s'", name, h.mh_name);
		goto out;
	}
	if (h.mh_chunker != s->st_chunker) {
		rc = dd_err_set(err, DD_ECORRUPT, "snapshot '%s': its manifest "
				"is of another chunker", name);
		goto out;
	}
	rc = dd_bmap_open(txn, err, id, &cur);
	if (rc)
		goto out;
	/* positions: block indices, or bytes for content-defined blocks,
	 * whose lengths must agree too */
	have = dd_bmap_seek(cur, err, 0, &idx, &key);
	while (have >= 0 && (rc = dd_manifest_read_next(mr, err, &e)) == 1) {
		uint64_t at = h.mh_chunker == DD_CHUNKER_FIXED ? e.me_index
							       : e.me_off;
		uint64_t n = h.mh_chunker == DD_CHUNKER_FIXED ? e.me_count
							      : e.me_len;

		if (e.me_hole) {
			if (have == 1 && idx < at + n)
				break;   /* a map entry where a hole is */
			continue;
		}
		if (have != 1 || idx != at ||
		    (h.mh_chunker != DD_CHUNKER_FIXED &&
		     dd_bmap_len(cur) != e.me_len) ||
		    memcmp(key.dk_hash, e.me_hash, DD_HASH_SIZE) ||
		    key.dk_variant != e.me_variant)
			break;
		have = dd_bmap_next(cur, err, &idx, &key);
	}
	if (have < 0)
		rc = have;
	else if (rc == 1 || (rc == 0 && have == 1))
		rc = dd_err_set(err, DD_ECORRUPT, "snapshot '%s': its block "
				"map differs from its manifest at %s %llu",
				name, h.mh_chunker == DD_CHUNKER_FIXED
				? "block" : "byte",
				(unsigned long long)(rc == 1
				? (h.mh_chunker == DD_CHUNKER_FIXED
				   ? e.me_index : e.me_off) : idx));
out:
	dd_bmap_close(cur);
	dd_manifest_read_close(mr);
	return rc;
}

/* ---- the catalog against the manifests -------------------------------------*/

struct dd_cc {
	dd_store *cc_store;
	dd_err *cc_err;
	const dd_mfstate *cc_before, *cc_after;
	dd_idset cc_snaps;        /* ids of the catalog's snapshots */
	dd_idset cc_pend;         /* ids of pending writers */
};

static bool dd_cc_has_file(const dd_mfstate *ms, uint64_t id)
{
	return dd_idset_has(&ms->ms_set[DD_MANIFEST_SNAP], id) ||
	       dd_idset_has(&ms->ms_set[DD_MANIFEST_DEL], id);
}

static int dd_cc_snap(void *arg, const char *name, const dd_snap_rec *rec)
{
	struct dd_cc *cc = arg;

	/* committed before the transaction began: its manifest was
	 * published before that, and stays until its rm ends after it */
	if (!dd_cc_has_file(cc->cc_before, rec->sr_id) &&
	    !dd_cc_has_file(cc->cc_after, rec->sr_id))
		return dd_err_set(cc->cc_err, DD_ECORRUPT, "the catalog does "
				  "not match the snapshot manifests (snapshot "
				  "'%s' has none): run dedup repair", name);
	return dd_idset_add(cc->cc_err, &cc->cc_snaps, rec->sr_id);
}

static int dd_cc_pend(void *arg, uint64_t id, const dd_pend_rec *rec)
{
	struct dd_cc *cc = arg;

	(void)rec;
	return dd_idset_add(cc->cc_err, &cc->cc_pend, id);
}

/* Checks that every catalog snapshot has a manifest (published or being
 * deleted), and that every manifest published is a catalog snapshot or a
 * pending one.  `before` was read before txn began, `after` after it:
 * against writers running meanwhile (each publishes before its catalog
 * commit, and renames before it drops), a snapshot of txn has its file in
 * one of them, and a manifest `after` lists is in txn (pending since the
 * writer began).  With the store to itself both are the same. */
static int dd_commit_check_txn(dd_store *s, dd_err *err, dd_txn *txn,
			       const dd_mfstate *before,
			       const dd_mfstate *after,
			       const dd_scrub_pages *sp)
{
	struct dd_cc cc = {.cc_store = s, .cc_err = err, .cc_before = before,
			   .cc_after = after};
	const dd_idset *pub = &after->ms_set[DD_MANIFEST_SNAP];
	int rc = dd_scrub_pages_skip(sp, txn, err);

	if (!rc)
		rc = dd_snap_walk(txn, err, dd_cc_snap, &cc);

	if (!rc)
		rc = dd_pend_walk(txn, err, dd_cc_pend, &cc);
	/* an empty set has no array: qsort's must not be NULL (UBSan) */
	if (!rc && cc.cc_snaps.is_n)
		qsort(cc.cc_snaps.is_ids, cc.cc_snaps.is_n, sizeof(uint64_t),
		      dd_id_cmp);
	if (!rc && cc.cc_pend.is_n)
		qsort(cc.cc_pend.is_ids, cc.cc_pend.is_n, sizeof(uint64_t),
		      dd_id_cmp);
	for (size_t i = 0; !rc && i < pub->is_n; i++) {
		uint64_t id = pub->is_ids[i];
		char mf[DD_MANIFEST_NAME_MAX];
		const dd_spage *pg;

		if (dd_idset_has(&cc.cc_snaps, id) ||
		    dd_idset_has(&cc.cc_pend, id))
			continue;
		/* its record on a damaged page: scrub names it */
		rc = dd_scrub_pages_unseen(s, err, sp, id, &pg);
		if (rc == 1) {
			rc = 0;
			continue;
		}
		if (rc)
			break;
		dd_manifest_name(mf, id, DD_MANIFEST_SNAP);
		rc = dd_err_set(err, DD_ECORRUPT, "the catalog does not match "
				"the snapshot manifests (%s is not in it: an "
				"older or damaged catalog): run dedup repair",
				mf);
	}
	dd_free(cc.cc_snaps.is_ids);
	dd_free(cc.cc_pend.is_ids);
	return rc;
}

int dd_commit_check(dd_store *s, dd_err *err)
{
	return dd_commit_check_past(s, err, NULL);
}

int dd_commit_check_past(dd_store *s, dd_err *err, const dd_scrub_pages *sp)
{
	dd_mfstate before, after;
	dd_txn *txn;
	int rc = 0;

	if (!s->st_mfdir)
		return 0;
	/* a writer of another process can finish a commit and then an rm
	 * of the same snapshot between the two reads: a mismatch is only
	 * believed when it is seen three times */
	for (int attempt = 0; attempt < 3; attempt++) {
		rc = dd_mfstate_read(s, err, &before);
		if (rc)
			return rc;
		rc = dd_txn_begin(s->st_db, err, false, &txn);
		if (!rc) {
			rc = dd_mfstate_read(s, err, &after);
			if (!rc) {
				rc = dd_commit_check_txn(s, err, txn, &before,
							 &after, sp);
				dd_mfstate_free(&after);
			}
			dd_txn_abort(txn);
		}
		dd_mfstate_free(&before);
		if (rc != DD_ECORRUPT)
			break;
	}
	return rc;
}

/* ---- recovery -------------------------------------------------------------*/

struct dd_rf {
	dd_store *rf_store;
	dd_err *rf_err;
	const dd_mfstate *rf_ms;
	dd_idset rf_ids;          /* pending ids with a published manifest */
};

static int dd_rf_collect(void *arg, uint64_t id, const dd_pend_rec *rec)
{
	struct dd_rf *rf = arg;

	(void)rec;
	if (!dd_idset_has(&rf->rf_ms->ms_set[DD_MANIFEST_SNAP], id) ||
	    dd_writer_alive(rf->rf_store, id))
		return 0;   /* not published, or its writer finishes it */
	return dd_idset_add(rf->rf_err, &rf->rf_ids, id);
}

/* Rolls pending snapshot id forward: its manifest is published, so it is
 * committed; its block map must be the manifest's, entry for entry (a
 * catalog older than the writer's last intermediate commit would have a
 * shorter one -- then nothing is rolled and repair is named). */
static int dd_roll_forward(dd_store *s, dd_err *err, dd_txn *txn, uint64_t id)
{
	dd_manifest_hdr h;
	dd_snap_rec rec, existing;
	int rc = dd_manifest_read_header_at(s->st_mfdir, err, id, &h);

	if (!rc)
		rc = dd_commit_compare_map(s, err, txn, id, h.mh_name);
	if (rc == DD_ECORRUPT || rc == DD_ENOENT)
		return dd_err_wrap(err, DD_ECORRUPT, "the catalog does not "
				   "match the snapshot manifests",
				   ": run dedup repair");
	if (rc)
		return rc;
	rc = dd_snap_get(txn, err, h.mh_name, &existing);
	if (rc == 0)
		return dd_err_set(err, DD_ECORRUPT, "the catalog does not "
				  "match the snapshot manifests (two snapshots "
				  "named '%s'): run dedup repair", h.mh_name);
	if (rc != DD_ENOENT)
		return rc;
	dd_manifest_snap_rec(&rec, &h);
	rc = dd_snap_put(txn, err, h.mh_name, &rec);
	if (!rc)
		rc = dd_pend_del(txn, err, id);
	return rc;
}

/* Is the rm or writer of snapshot id gone, leaving its manifest state
 * for recovery to finish? */
static bool dd_commit_orphaned(dd_store *s, uint64_t id)
{
	return !dd_writer_alive(s, id);
}

/* Does the catalog still have snapshot id (any failure: say yes, and
 * leave its file)? */
static bool dd_commit_in_catalog(dd_store *s, uint64_t id)
{
	char name[DD_NAME_MAX + 1];
	dd_snap_rec r;
	dd_err e;
	dd_txn *txn;
	int rc = dd_txn_begin(s->st_db, &e, false, &txn);

	if (rc)
		return true;
	rc = dd_snap_find_id(txn, &e, id, name, &r);
	dd_txn_abort(txn);
	return rc != DD_ENOENT;
}

/* The catalog's side of a crash: drops the snapshots of dead rm's ID.del
 * files and rolls dead writers' published pending ones forward, in one
 * transaction -- only when there is any (a read finds out). */
static int dd_commit_catch_up(dd_store *s, dd_err *err, const dd_mfstate *ms,
			      bool *changed)
{
	struct dd_rf rf = {.rf_store = s, .rf_err = err, .rf_ms = ms};
	const dd_idset *del = &ms->ms_set[DD_MANIFEST_DEL];
	bool work = false;
	dd_txn *txn;
	int rc = dd_txn_begin(s->st_db, err, false, &txn);

	*changed = false;
	if (rc)
		return rc;
	rc = dd_pend_walk(txn, err, dd_rf_collect, &rf);
	dd_txn_abort(txn);
	work = rf.rf_ids.is_n > 0;
	for (size_t i = 0; !work && i < del->is_n; i++)
		work = dd_commit_orphaned(s, del->is_ids[i]);
	rf.rf_ids.is_n = 0;
	if (rc || !work) {
		dd_free(rf.rf_ids.is_ids);
		return rc;
	}
	rc = dd_txn_begin(s->st_db, err, true, &txn);
	if (rc) {
		dd_free(rf.rf_ids.is_ids);
		return rc;
	}
	rc = dd_pend_walk(txn, err, dd_rf_collect, &rf);
	for (size_t i = 0; !rc && i < rf.rf_ids.is_n; i++, *changed = true)
		rc = dd_roll_forward(s, err, txn, rf.rf_ids.is_ids[i]);
	for (size_t i = 0; !rc && i < del->is_n; i++) {
		dd_snap_rec r;
		char name[DD_NAME_MAX + 1];

		if (!dd_commit_orphaned(s, del->is_ids[i]))
			continue;   /* its rm is running */
		rc = dd_snap_find_id(txn, err, del->is_ids[i], name, &r);
		if (rc == DD_ENOENT) {
			rc = 0;
			continue;
		}
		if (!rc)
			rc = dd_snap_drop_refs(txn, err, r.sr_id);
		if (!rc)
			rc = dd_snap_del(txn, err, name);
		*changed = true;
	}
	dd_free(rf.rf_ids.is_ids);
	if (!rc && *changed)
		return dd_txn_commit(txn, err);
	dd_txn_abort(txn);
	return rc;
}

int dd_commit_recover(dd_store *s, dd_err *err)
{
	dd_mfstate ms;
	bool changed = false;
	int rc;

	if (!s->st_mfdir)
		return 0;
	rc = dd_mfstate_read(s, err, &ms);
	if (rc)
		return rc;
	/* nothing is changed unless the catalog agrees with the manifests
	 * once the crash's last step is accounted for (checked as readers
	 * do: other writers run meanwhile) */
	rc = dd_commit_check(s, err);
	if (!rc)
		rc = dd_commit_catch_up(s, err, &ms, &changed);
	/* ID.tmp of dead writers, ID.del of finished or dead rm whose
	 * snapshot the catalog no longer has */
	for (int st = DD_MANIFEST_TMP; !rc && st <= DD_MANIFEST_DEL; st++) {
		const dd_idset *set = &ms.ms_set[st];

		for (size_t i = 0; !rc && i < set->is_n; i++) {
			if (!dd_commit_orphaned(s, set->is_ids[i]) ||
			    (st == DD_MANIFEST_DEL &&
			     dd_commit_in_catalog(s, set->is_ids[i])))
				continue;
			rc = dd_manifest_remove(s->st_mfdir, err, set->is_ids[i],
						st);
			if (rc == DD_ENOENT)
				rc = 0;
			changed = true;
		}
	}
	if (!rc && changed)
		rc = dd_vdir_sync(s->st_mfdir, err);
	dd_mfstate_free(&ms);
	return rc;
}

/* ---- upgrading a store of format 1 -------------------------------------------*/

struct dd_up {
	dd_store *up_store;
	dd_err *up_err;
	dd_txn *up_txn;
};

static int dd_up_snap(void *arg, const char *name, const dd_snap_rec *rec)
{
	struct dd_up *up = arg;
	dd_manifest_writer *mw = NULL;
	char tmp[DD_MANIFEST_NAME_MAX], fin[DD_MANIFEST_NAME_MAX];
	int rc = dd_mf_write_from_map(up->up_store, up->up_err, up->up_txn,
				      name, rec, &mw);

	/* a crashed upgrade may have left this one: replaced, as the
	 * store is format 1 until DEDUP says otherwise */
	dd_manifest_name(tmp, rec->sr_id, DD_MANIFEST_TMP);
	dd_manifest_name(fin, rec->sr_id, DD_MANIFEST_SNAP);
	if (!rc)
		rc = dd_vdir_rename(up->up_store->st_mfdir, up->up_err, tmp,
				    fin, false);
	dd_manifest_write_free(mw);
	return rc;
}

/* Gives meta an identity if it has none, and returns the options. */
static int dd_up_conf(dd_store *s, dd_err *err, dd_store_conf *conf)
{
	dd_txn *txn;
	int rc = dd_txn_begin(s->st_db, err, true, &txn);

	if (rc)
		return rc;
	rc = dd_store_meta_read(txn, err, s->st_path, conf);
	if (!rc && !conf->sc_have_uuid) {
		rc = dd_store_conf_new_uuid(err, conf);
		if (!rc)
			rc = dd_meta_put_u64(txn, err, "store.uuid0",
					     dd_get_le64(conf->sc_uuid));
		if (!rc)
			rc = dd_meta_put_u64(txn, err, "store.uuid1",
					     dd_get_le64(conf->sc_uuid + 8));
		if (!rc)
			return dd_txn_commit(txn, err);
	}
	dd_txn_abort(txn);
	return rc;
}

int dd_commit_upgrade(dd_store *s, dd_err *err)
{
	struct dd_up up = {.up_store = s, .up_err = err};
	dd_store_conf conf = {0};
	char p[4096];
	int rc;

	if (s->st_format >= 2)
		return 0;
	snprintf(p, sizeof(p), "%s/" DD_MANIFEST_DIR, s->st_path);
	if (mkdir(p, 0755) != 0 && errno != EEXIST)
		return dd_err_set_errno(err, errno, "mkdir %s", p);
	if (!s->st_mfdir) {
		rc = dd_vdir_open_local(&s->st_mfdir, err, p);
		if (rc)
			return rc;
	}
	rc = dd_up_conf(s, err, &conf);
	if (!rc)
		rc = dd_txn_begin(s->st_db, err, false, &up.up_txn);
	if (!rc) {
		rc = dd_snap_walk(up.up_txn, err, dd_up_snap, &up);
		dd_txn_abort(up.up_txn);
	}
	if (!rc)
		rc = dd_vdir_sync(s->st_mfdir, err);
	if (!rc)
		rc = dd_io_fsync_dir(err, s->st_path);
	/* the last step: from here on the store is format 2 */
	conf.sc_format = 2;
	if (!rc)
		rc = dd_store_conf_write(err, s->st_path, &conf);
	if (!rc)
		s->st_format = 2;
	return rc;
}
