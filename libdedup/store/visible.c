/*
 * visible.c -- what is committed, as readers see it: the manifests
 * directory's state, and the catalog's snapshots corrected by it
 * (format/manifest.md §7).
 *
 * A crash between a manifest's publication (or deletion) and the catalog
 * transaction that records it leaves the catalog one step behind, until
 * the next writer's recovery catches up (commit.c).  Meanwhile readers
 * list and open what the manifests say: a pending snapshot whose manifest
 * is published is there, its record taken from the manifest header; a
 * snapshot whose manifest is renamed to ID.del is gone.  And a catalog
 * record must match its manifest header -- LMDB keeps no checksum, and a
 * damaged name, size, time or digest would otherwise be listed as it is.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "store/manifest.h"
#include "store/store_internal.h"

/* ---- the manifests directory --------------------------------------------*/

int dd_id_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int dd_idset_add(dd_err *err, dd_idset *set, uint64_t id)
{
	if (set->is_n == set->is_cap) {
		size_t n = set->is_cap ? set->is_cap * 2 : 32;
		uint64_t *ids = dd_realloc(set->is_ids, n * sizeof(*ids));

		if (!ids)
			return dd_err_set(err, DD_ENOMEM, "out of memory");
		set->is_ids = ids;
		set->is_cap = n;
	}
	set->is_ids[set->is_n++] = id;
	return 0;
}

bool dd_idset_has(const dd_idset *set, uint64_t id)
{
	return set->is_n && bsearch(&id, set->is_ids, set->is_n,
				    sizeof(uint64_t), dd_id_cmp) != NULL;
}

/* Removes from sorted set `from` the ids of sorted set `these`. */
static void dd_idset_drop(dd_idset *from, const dd_idset *these)
{
	size_t kept = 0;

	for (size_t i = 0; i < from->is_n; i++)
		if (!dd_idset_has(these, from->is_ids[i]))
			from->is_ids[kept++] = from->is_ids[i];
	from->is_n = kept;
}

void dd_mfstate_free(dd_mfstate *ms)
{
	for (int i = 0; i < 3; i++)
		dd_free(ms->ms_set[i].is_ids);
	memset(ms, 0, sizeof(*ms));
}

struct dd_mfstate_scan {
	dd_err *ms_err;
	dd_mfstate *ms_state;
};

static int dd_mfstate_add(void *arg, const char *name)
{
	struct dd_mfstate_scan *sc = arg;
	uint64_t id;
	int state;

	if (!dd_manifest_parse_name(name, &id, &state))
		return 0;
	return dd_idset_add(sc->ms_err, &sc->ms_state->ms_set[state], id);
}

int dd_mfstate_read(dd_store *s, dd_err *err, dd_mfstate *ms)
{
	struct dd_mfstate_scan sc = {.ms_err = err, .ms_state = ms};
	int rc;

	memset(ms, 0, sizeof(*ms));
	if (!s->st_mfdir)
		return 0;
	rc = dd_vdir_list(s->st_mfdir, err, dd_mfstate_add, &sc);
	for (int i = 0; i < 3; i++)
		if (ms->ms_set[i].is_n)
			qsort(ms->ms_set[i].is_ids, ms->ms_set[i].is_n,
			      sizeof(uint64_t), dd_id_cmp);
	if (rc) {
		dd_mfstate_free(ms);
		return rc;
	}
	/* a rename in a RADOS store is two steps (format/store.md §11): cut
	 * short, it leaves the id in both states, and the later one counts */
	dd_idset_drop(&ms->ms_set[DD_MANIFEST_TMP], &ms->ms_set[DD_MANIFEST_SNAP]);
	dd_idset_drop(&ms->ms_set[DD_MANIFEST_SNAP], &ms->ms_set[DD_MANIFEST_DEL]);
	return 0;
}

bool dd_manifest_present(const dd_store *s, uint64_t id, int state)
{
	char name[DD_MANIFEST_NAME_MAX];

	dd_manifest_name(name, id, state);
	return dd_vdir_stat(s->st_mfdir, NULL, name, NULL) == 0;
}

/* ---- a pending writer by name: the catalog and the manifests -----------------*/

struct dd_find {
	uint64_t fd_id;
	const dd_store *fd_store;
	const char *fd_name;
};

/* A name may be pending for several ids at once -- a running receive and
 * dead writers' kept receives (wlife.c) --, of which at most the running
 * one has published its manifest. */
static int dd_find_pend(void *arg, uint64_t id, const dd_pend_rec *rec)
{
	struct dd_find *f = arg;

	if (strcmp(rec->pr_name, f->fd_name) ||
	    !dd_manifest_present(f->fd_store, id, DD_MANIFEST_SNAP))
		return 0;
	f->fd_id = id;
	return 1;
}

/* The pending writer of snapshot name that has published its manifest
 * (a walk of the few pending). */
int dd_pend_find_published(const dd_store *s, dd_txn *txn, dd_err *err,
			   const char *name, uint64_t *id)
{
	struct dd_find f = {.fd_store = s, .fd_name = name};
	int rc = dd_pend_walk(txn, err, dd_find_pend, &f);

	if (rc == 1)
		*id = f.fd_id;
	return rc == 1 ? 0 : rc ? rc : DD_ENOENT;
}

/* The record of a published snapshot, from its manifest header. */
void dd_manifest_snap_rec(dd_snap_rec *rec, const dd_manifest_hdr *h)
{
	memset(rec, 0, sizeof(*rec));
	rec->sr_id = h->mh_id;
	rec->sr_block_size = h->mh_block_size;
	rec->sr_size = h->mh_size;
	rec->sr_blocks = h->mh_blocks;
	rec->sr_zero_blocks = h->mh_zero_blocks;
	rec->sr_ctime = h->mh_ctime;
	memcpy(rec->sr_digest, h->mh_digest, DD_HASH_SIZE);
	rec->sr_digest_version = h->mh_dv;
}

/* ---- snapshots as the manifests have them -----------------------------------*/

/* The catalog's record of a snapshot must be its manifest's: LMDB keeps
 * no checksum, and a name, size, time or digest damaged in data.mdb would
 * otherwise be listed as it is.  DD_ENOENT when the manifest is gone
 * (deleted meanwhile). */
static int dd_snap_matches_manifest(dd_store *s, dd_err *err,
				    const char *name, const dd_snap_rec *rec)
{
	dd_manifest_hdr h;
	dd_snap_rec m;
	int rc = dd_manifest_read_header_at(s->st_mfdir, err, rec->sr_id, &h);

	if (rc)
		return rc;
	dd_manifest_snap_rec(&m, &h);
	if (strcmp(h.mh_name, name) || h.mh_chunker != s->st_chunker ||
	    m.sr_id != rec->sr_id ||
	    m.sr_block_size != rec->sr_block_size || m.sr_size != rec->sr_size ||
	    m.sr_blocks != rec->sr_blocks ||
	    m.sr_zero_blocks != rec->sr_zero_blocks ||
	    m.sr_ctime != rec->sr_ctime ||
	    (s->st_chunker == DD_CHUNKER_FIXED &&
	     m.sr_digest_version != rec->sr_digest_version) ||
	    memcmp(m.sr_digest, rec->sr_digest, DD_HASH_SIZE))
		return dd_err_set(err, DD_ECORRUPT, "snapshot '%s': the "
				  "catalog's record differs from its manifest "
				  "(a damaged catalog): run dedup repair", name);
	return 0;
}

int dd_store_snap_get(dd_store *s, dd_err *err, dd_txn *txn, const char *name,
		      dd_snap_rec *out)
{
	dd_manifest_hdr h;
	uint64_t pid = 0;
	int rc = dd_snap_get(txn, err, name, out);

	if (!s->st_mfdir)
		return rc;
	if (rc == 0) {
		rc = dd_snap_matches_manifest(s, err, name, out);
		if (rc == DD_ENOENT)
			return dd_err_set(err, DD_ENOENT, "no snapshot '%s' "
					  "(being deleted)", name);
		return rc;
	}
	if (rc != DD_ENOENT)
		return rc;
	/* committed by its manifest, not yet by the catalog? */
	rc = dd_pend_find_published(s, txn, err, name, &pid);
	if (rc == DD_ENOENT)
		return dd_err_set(err, DD_ENOENT, "no snapshot '%s'", name);
	if (rc)
		return rc;
	rc = dd_manifest_read_header_at(s->st_mfdir, err, pid, &h);
	if (rc)
		return rc;
	if (strcmp(h.mh_name, name) || h.mh_chunker != s->st_chunker)
		return dd_err_set(err, DD_ECORRUPT, "snapshot '%s' is being "
				  "committed under id %llu, whose manifest "
				  "names '%s': run dedup repair", name,
				  (unsigned long long)pid, h.mh_name);
	dd_manifest_snap_rec(out, &h);
	return 0;
}

struct dd_sw {
	dd_store *sw_store;
	dd_err *sw_err;
	const dd_mfstate *sw_ms;
	dd_snap_walk_fn sw_fn;
	void *sw_ctx;
};

static int dd_sw_snap(void *arg, const char *name, const dd_snap_rec *rec)
{
	struct dd_sw *sw = arg;
	int rc;

	if (dd_idset_has(&sw->sw_ms->ms_set[DD_MANIFEST_DEL], rec->sr_id))
		return 0;
	rc = dd_snap_matches_manifest(sw->sw_store, sw->sw_err, name, rec);
	if (rc == DD_ENOENT)
		return 0;    /* deleted since the directory was read */
	return rc ? rc : sw->sw_fn(sw->sw_ctx, name, rec);
}

static int dd_sw_pend(void *arg, uint64_t id, const dd_pend_rec *prec)
{
	struct dd_sw *sw = arg;
	dd_manifest_hdr h;
	dd_snap_rec rec;
	int rc;

	if (!dd_idset_has(&sw->sw_ms->ms_set[DD_MANIFEST_SNAP], id))
		return 0;
	rc = dd_manifest_read_header_at(sw->sw_store->st_mfdir, sw->sw_err,
					id, &h);
	if (rc)
		return rc;
	if (strcmp(h.mh_name, prec->pr_name) ||
	    h.mh_chunker != sw->sw_store->st_chunker)
		return dd_err_set(sw->sw_err, DD_ECORRUPT, "snapshot '%s' is "
				  "being committed under id %llu, whose "
				  "manifest names '%s': run dedup repair",
				  prec->pr_name, (unsigned long long)id,
				  h.mh_name);
	dd_manifest_snap_rec(&rec, &h);
	return sw->sw_fn(sw->sw_ctx, h.mh_name, &rec);
}

int dd_store_snap_walk(dd_store *s, dd_err *err, dd_txn *txn,
		       dd_snap_walk_fn fn, void *ctx)
{
	dd_mfstate ms;
	struct dd_sw sw = {s, err, &ms, fn, ctx};
	int rc;

	if (!s->st_mfdir)
		return dd_snap_walk(txn, err, fn, ctx);
	rc = dd_mfstate_read(s, err, &ms);
	if (rc)
		return rc;
	rc = dd_snap_walk(txn, err, dd_sw_snap, &sw);
	if (!rc)
		rc = dd_pend_walk(txn, err, dd_sw_pend, &sw);
	dd_mfstate_free(&ms);
	return rc;
}
