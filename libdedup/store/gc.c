/*
 * gc.c -- reclaiming the space of blocks no snapshot references.
 *
 * Under the writer lock, in one write transaction:
 *   0. every block map must be its snapshot's manifest, entry by entry
 *      (dd_gc_check_manifest), and every block a map names must have a
 *      refcount (dd_gc_check_map): a damaged catalog never frees a block
 *      a committed snapshot needs;
 *   1. live bytes per pack are summed from the DDT (refcount > 0);
 *   2. packs with nothing live are dropped; packs whose live fraction is
 *      below the threshold have their live records read (and verified),
 *      appended to a new pack, and their DDT entries pointed there;
 *   3. the new pack is synced, the dropped packs leave the packs table,
 *      and the DDT is rebuilt in key order without its refcount-0 entries
 *      (compaction, format/ddt.md §4);
 *   4. the transaction commits, with the emptied packs marked doomed; their
 *      files are unlinked once no reader that began before the commit is
 *      left (dd_store_reap, here and at every later lock), so a reader
 *      that opened a snapshot before gc keeps reading it.
 * A crash before 4 leaves the old state (the new pack, never recorded, is
 * removed by recovery); a crash after it leaves doomed packs, reaped
 * later.  Live data is never touched in place, and a live
 * block that fails verification stops gc with the store unchanged.
 */
#include <string.h>

#include "common/alloc.h"
#include "store/store_internal.h"

#define DD_GC_MAX_PACKS (1u << 24)

typedef struct dd_gc {
	dd_store *gc_store;
	dd_err *gc_err;
	dd_txn *gc_txn;
	uint64_t gc_npacks;       /* pack.next: ids are below it */
	uint64_t *gc_live;        /* live record bytes per pack id */
	uint64_t *gc_end;         /* committed end per pack id (0: none) */
	uint8_t *gc_fate;         /* per pack id: keep, drop, rewrite */
	dd_ddt_key *gc_move;      /* keys of live blocks in rewritten packs */
	size_t gc_nmove, gc_capmove;
	uint64_t gc_new_bytes;    /* size of the pack live blocks moved to */
	uint64_t gc_move_bytes;   /* their bytes, for progress */
	const dd_gc_opts *gc_opts;/* version 2: the progress callback */
	dd_gc_result gc_res;
} dd_gc;

enum { DD_GC_KEEP, DD_GC_DROP, DD_GC_REWRITE };

static int dd_gc_sum_live(void *arg, const dd_ddt_key *key,
			  const dd_ddt_ent *e)
{
	dd_gc *gc = arg;

	(void)key;
	if (e->de_refcnt == 0 || (e->de_flags & DD_DDE_MISSING))
		return 0;   /* nothing, or no bytes, in a pack */
	if (e->de_pack >= gc->gc_npacks)
		return dd_err_set(gc->gc_err, DD_ECORRUPT,
				  "ddt entry names pack %u beyond pack.next",
				  e->de_pack);
	gc->gc_live[e->de_pack] += DD_PACK_REC_HDR_SIZE + e->de_psize;
	return 0;
}

/* Every block a map names must have a reference counted.  gc drops what
 * has none, so a refcount that damage to the LMDB file lowered to 0 would
 * make it destroy a live block: it stops instead (scrub names the
 * snapshot).  One DDT lookup per map entry, before anything is chosen. */
static int dd_gc_check_map(void *arg, uint64_t id, uint64_t idx,
			   const dd_ddt_key *key)
{
	dd_gc *gc = arg;
	dd_ddt_ent ent;
	int rc = dd_ddt_get(gc->gc_txn, gc->gc_err, key, &ent);

	if (rc == DD_ENOENT || (rc == 0 && ent.de_refcnt == 0))
		return dd_err_set(gc->gc_err, DD_ECORRUPT, "block %llu of map "
				  "%llu is in use but its ddt entry counts no "
				  "reference (damaged metadata: nothing "
				  "collected; run scrub)",
				  (unsigned long long)idx,
				  (unsigned long long)id);
	return rc;
}

static int dd_gc_check_manifest(void *arg, const char *name,
				const dd_snap_rec *rec)
{
	dd_gc *gc = arg;
	int rc;

	if (gc->gc_store->st_mfdir < 0)
		return 0;
	rc = dd_commit_compare_map(gc->gc_store, gc->gc_err, gc->gc_txn,
				   rec->sr_id, name);
	if (rc == DD_ECORRUPT || rc == DD_ENOENT)
		return dd_err_wrap(gc->gc_err, DD_ECORRUPT, "gc stopped, store "
				   "unchanged", ": run dedup repair");
	return rc;
}

static int dd_gc_note_pack(void *arg, uint32_t id, uint64_t end)
{
	dd_gc *gc = arg;

	if (id >= gc->gc_npacks)
		return dd_err_set(gc->gc_err, DD_ECORRUPT,
				  "pack %u beyond pack.next", id);
	gc->gc_end[id] = end;
	return 0;
}

static int dd_gc_collect_moves(void *arg, const dd_ddt_key *key,
			       const dd_ddt_ent *e)
{
	dd_gc *gc = arg;

	if (e->de_refcnt == 0 || (e->de_flags & DD_DDE_MISSING) ||
	    gc->gc_fate[e->de_pack] != DD_GC_REWRITE)
		return 0;
	if (gc->gc_nmove == gc->gc_capmove) {
		size_t n = gc->gc_capmove ? gc->gc_capmove * 2 : 1024;
		dd_ddt_key *m = dd_realloc(gc->gc_move, n * sizeof(*m));

		if (!m)
			return dd_err_set(gc->gc_err, DD_ENOMEM, "out of memory");
		gc->gc_move = m;
		gc->gc_capmove = n;
	}
	gc->gc_move[gc->gc_nmove++] = *key;
	gc->gc_move_bytes += DD_PACK_REC_HDR_SIZE + e->de_psize;
	return 0;
}

/* dd_gc_opts version 2's callback: bytes of the moves done so far. */
static int dd_gc_progress(dd_gc *gc, uint64_t done)
{
	const dd_gc_opts *o = gc->gc_opts;

	if (!o || o->version < 2 || !o->progress)
		return 0;
	if (o->progress(o->progress_ctx, done, gc->gc_move_bytes) != 0)
		return dd_err_set(gc->gc_err, DD_ECANCELED, "gc cancelled by "
				  "the progress callback (store unchanged)");
	return 0;
}

static void dd_gc_choose(dd_gc *gc, double below)
{
	for (uint64_t id = 1; id < gc->gc_npacks; id++) {
		uint64_t end = gc->gc_end[id], data;

		gc->gc_fate[id] = DD_GC_KEEP;
		if (end == 0)
			continue;
		data = end > DD_PACK_FILE_HDR_SIZE ? end - DD_PACK_FILE_HDR_SIZE
						   : 0;
		if (gc->gc_live[id] == 0)
			gc->gc_fate[id] = DD_GC_DROP;
		else if ((double)gc->gc_live[id] < below * (double)data)
			gc->gc_fate[id] = DD_GC_REWRITE;
	}
}

/* Copies the live blocks of rewritten packs into one new pack. */
static int dd_gc_move(dd_gc *gc, dd_scratch *sc)
{
	dd_store *s = gc->gc_store;
	dd_pack *np = NULL;
	uint64_t done = 0;
	int rc = dd_gc_progress(gc, 0);

	for (size_t i = 0; !rc && i < gc->gc_nmove; i++) {
		dd_ddt_key *key = &gc->gc_move[i];
		dd_ddt_ent e;
		dd_pack_rec rec;
		uint64_t off;

		rc = dd_ddt_get(gc->gc_txn, gc->gc_err, key, &e);
		if (!rc)
			rc = dd_block_read(s, gc->gc_err, sc, key, &e,
					   sc->sc_dbuf);
		if (rc == DD_ECHECKSUM || rc == DD_ECORRUPT)
			rc = dd_err_set(gc->gc_err, rc,
					"gc stopped, store unchanged: a live "
					"block in pack %u at offset %llu is "
					"damaged (run scrub)", e.de_pack,
					(unsigned long long)e.de_offset);
		if (rc)
			break;
		if (!np) {
			uint32_t id = (uint32_t)gc->gc_npacks;

			rc = dd_pack_create(&np, gc->gc_err, s->st_packdir, id);
			if (!rc)
				rc = dd_meta_put_u64(gc->gc_txn, gc->gc_err,
						     "pack.next", id + 1);
			if (rc)
				break;
		}
		rec = (dd_pack_rec){.pr_codec = e.de_codec,
				    .pr_lsize = e.de_lsize,
				    .pr_psize = e.de_psize};
		memcpy(rec.pr_hash, key->dk_hash, DD_HASH_SIZE);
		rc = dd_pack_append(np, gc->gc_err, &rec,
				    sc->sc_rbuf + DD_PACK_REC_HDR_SIZE, &off);
		if (rc)
			break;
		e.de_pack = dd_pack_id(np);
		e.de_offset = off;
		rc = dd_ddt_put(gc->gc_txn, gc->gc_err, key, &e);
		gc->gc_res.blocks_moved++;
		done += DD_PACK_REC_HDR_SIZE + e.de_psize;
		if (!rc && (i % 256 == 255 || i + 1 == gc->gc_nmove))
			rc = dd_gc_progress(gc, done);
	}
	if (!rc && np) {
		rc = dd_pack_sync(np, gc->gc_err);
		if (!rc)
			rc = dd_packs_put(gc->gc_txn, gc->gc_err, dd_pack_id(np),
					  dd_pack_end(np));
		gc->gc_new_bytes = dd_pack_end(np);
	}
	dd_pack_close(np);
	return rc;
}

/* Counts what gc decided; the files go when no reader needs them. */
static void dd_gc_count(dd_gc *gc)
{
	for (uint64_t id = 1; id < gc->gc_npacks; id++) {
		if (gc->gc_fate[id] == DD_GC_DROP)
			gc->gc_res.packs_deleted++;
		else if (gc->gc_fate[id] == DD_GC_REWRITE)
			gc->gc_res.packs_rewritten++;
	}
}

static int dd_gc_run(dd_gc *gc, double below)
{
	dd_scratch sc;
	int rc;

	rc = dd_meta_get_u64(gc->gc_txn, gc->gc_err, "pack.next",
			     &gc->gc_npacks);
	if (!rc && (gc->gc_npacks == 0 || gc->gc_npacks > DD_GC_MAX_PACKS))
		rc = dd_err_set(gc->gc_err, DD_ECORRUPT,
				"meta pack.next out of range");
	if (rc)
		return rc;
	gc->gc_live = dd_calloc(gc->gc_npacks, sizeof(*gc->gc_live));
	gc->gc_end = dd_calloc(gc->gc_npacks, sizeof(*gc->gc_end));
	gc->gc_fate = dd_calloc(gc->gc_npacks, 1);
	if (!gc->gc_live || !gc->gc_end || !gc->gc_fate)
		return dd_err_set(gc->gc_err, DD_ENOMEM, "out of memory");
	/* nothing is freed on the word of a catalog the manifests do not
	 * back: every block map is first the manifest's, entry by entry, so
	 * with dd_gc_check_map every block a committed snapshot needs has a
	 * reference counted */
	rc = dd_snap_walk(gc->gc_txn, gc->gc_err, dd_gc_check_manifest, gc);
	if (!rc)
		rc = dd_bmap_walk_all(gc->gc_txn, gc->gc_err, dd_gc_check_map,
				      gc);
	if (!rc)
		rc = dd_ddt_walk(gc->gc_txn, gc->gc_err, dd_gc_sum_live, gc);
	if (!rc)
		rc = dd_packs_walk(gc->gc_txn, gc->gc_err, dd_gc_note_pack, gc);
	if (rc)
		return rc;
	dd_gc_choose(gc, below);
	rc = dd_ddt_walk(gc->gc_txn, gc->gc_err, dd_gc_collect_moves, gc);
	if (rc)
		return rc;
	rc = dd_scratch_init(&sc, gc->gc_err, gc->gc_store);
	if (rc)
		return rc;
	rc = dd_gc_move(gc, &sc);
	dd_scratch_fini(&sc);
	/* doomed, not deleted: a reader that began before this commit may
	 * still read them (dd_store_reap removes them later) */
	for (uint64_t id = 1; !rc && id < gc->gc_npacks; id++)
		if (gc->gc_fate[id] != DD_GC_KEEP)
			rc = dd_packs_doom(gc->gc_txn, gc->gc_err, (uint32_t)id,
					   dd_txn_id(gc->gc_txn));
	if (!rc)
		rc = dd_ddt_compact(gc->gc_txn, gc->gc_err,
				    &gc->gc_res.ddt_entries_removed);
	return rc;
}

int dd_store_gc(dd_store *s, const dd_gc_opts *opts, dd_gc_result *out)
{
	dd_err err = {0};
	dd_gc gc = {.gc_store = s, .gc_err = &err, .gc_opts = opts};
	double below = 0.8;
	int rc;

	if (!s)
		return DD_EINVAL;
	if (opts) {
		if (opts->version == 0 || opts->version > DD_GC_OPTS_VERSION)
			return dd_store_failf(s, DD_EINVAL, "dd_gc_opts "
					      "version %u not supported",
					      opts->version);
		if (opts->rewrite_below < 0 || opts->rewrite_below > 1)
			return dd_store_failf(s, DD_EINVAL, "rewrite_below "
					      "must be in [0, 1]");
		if (opts->rewrite_below > 0)
			below = opts->rewrite_below;
	}
	rc = dd_store_lock(s, &err);
	if (rc)
		return dd_store_fail(s, &err);
	rc = dd_txn_begin(s->st_db, &err, true, &gc.gc_txn);
	if (!rc) {
		rc = dd_gc_run(&gc, below);
		if (rc) {
			dd_txn_abort(gc.gc_txn);
			/* the new pack was never recorded: remove it now */
			dd_store_recover(s, &(dd_err){0});
		} else {
			rc = dd_txn_commit(gc.gc_txn, &err);
		}
	}
	if (!rc) {
		uint64_t freed = 0;

		dd_gc_count(&gc);
		/* a failure to reap is not gc's failure: the next lock
		 * holder reaps what remains */
		if (dd_store_reap(s, &err, &freed) == 0)
			gc.gc_res.bytes_reclaimed = freed > gc.gc_new_bytes
							    ? freed - gc.gc_new_bytes
							    : 0;
	}
	dd_store_unlock(s);
	dd_free(gc.gc_live);
	dd_free(gc.gc_end);
	dd_free(gc.gc_fate);
	dd_free(gc.gc_move);
	if (rc)
		return dd_store_fail(s, &err);
	if (out)
		*out = gc.gc_res;
	return 0;
}
