/*
 * gc.c -- reclaiming the space of blocks no snapshot references, beside
 * running writers (docs/design.md "Concurrent writers").
 *
 * One gc at a time (STORE/gc.lock, whose busy message names the holder);
 * writers, rm and readers go on meanwhile.  Which dead blocks gc may free
 * is the writers' epoch rule: a writer references only entries alive when
 * it looked, or dead since its start (dd_writer_usable), so gc keeps every
 * dead entry that died at or after the oldest running writer's start
 * (STORE/writers, read after gc's read transaction began -- a writer that
 * registers later starts later than anything gc saw die).
 *
 * Read phase, in a read transaction, no lock on the catalog:
 *   0. every block map must be its snapshot's manifest, entry by entry,
 *      and every block a map names must have a refcount (dd_gc_check_map):
 *      a damaged catalog never frees a block a committed snapshot needs;
 *   1. live bytes per pack are summed from the DDT: alive entries and the
 *      dead ones kept for writers;
 *   2. packs with nothing live are to be dropped, packs whose live fraction
 *      is below the threshold rewritten -- each only if gc gets its lock
 *      (never a pack a writer appends to), and only if the live bytes
 *      summed again after the locks were taken are the same (a deferring
 *      writer's flush names records of its packs after their ends were
 *      committed: dd_gc_recheck_live);
 *   3. the live records of rewritten packs are read (and verified) and
 *      appended to a new pack, which is synced.
 * Write phase, one short write transaction:
 *   4. a chosen pack whose committed end moved (a writer committed to it
 *      before gc got its lock) stays; each moved entry still at its old
 *      place is pointed at its copy;
 *      each dead entry gc chose to free is deleted if it is still dead
 *      since the same transaction -- one a writer revived meanwhile keeps
 *      its pack;
 *   5. the chosen packs are doomed; when no writer runs, the DDT is also
 *      rebuilt in key order (compaction, format/ddt.md §4).
 * The doomed packs' files are unlinked once no reader that began before
 * the commit is left (dd_store_reap).  A crash before 5 leaves the old
 * state and a new pack no commit recorded, which recovery removes; live data
 * is never touched in place.  A live block that fails verification stays
 * where it is, its pack kept (scrub names it); its pack's other live
 * blocks still move.
 *
 * Under pressure (format/pack.md §6.1, space.c): when the copy finds no
 * room (DD_ENOSPC) the packs to rewrite are kept instead; after the
 * commit, once no older reader is left, the dead records of every pack
 * kept are punched out in place, which needs no space.  A commit that
 * finds the file system full releases STORE/reserve and is tried once
 * more; gc makes the reserve again when it is done.
 */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "store/writer_internal.h"

#define DD_GC_MAX_PACKS (1u << 24)

/* Test hook (store_internal.h): run after the read phase summed the live
 * bytes, before it takes packs' locks. */
void (*dd_gc_test_after_sum)(void *ctx);
void *dd_gc_test_ctx;

/* An entry gc moves (the place it was read at) or frees (its death). */
typedef struct dd_gc_key {
	dd_ddt_key gk_key;
	uint32_t gk_pack;
	uint64_t gk_off;          /* a move: its offset; a free: dead_since */
} dd_gc_key;

typedef struct dd_gc_keys {
	dd_gc_key *gk;
	size_t n, cap;
} dd_gc_keys;

typedef struct dd_gc {
	dd_store *gc_store;
	dd_err *gc_err;
	dd_txn *gc_txn;           /* the read phase's, then the write phase's */
	uint64_t gc_keep_since;   /* dead entries dying at or after it stay */
	uint64_t gc_npacks;       /* pack.next: ids are below it */
	uint64_t *gc_live;        /* live record bytes per pack id */
	uint64_t *gc_end;         /* committed end per pack id (0: none) */
	uint8_t *gc_fate;         /* per pack id: keep, drop, rewrite */
	dd_pack **gc_held;        /* per pack id: gc's handle, locked */
	dd_defer_set gc_defer;    /* pending maps that count part of their
				     entries (store/defer.h) */
	dd_gc_keys gc_move;       /* live entries of rewritten packs */
	dd_gc_keys gc_free;       /* dead entries to delete */
	dd_pack *gc_new;          /* where moved blocks go */
	uint64_t gc_new_bytes;    /* its size */
	uint64_t gc_move_bytes;   /* their bytes, for progress */
	uint64_t gc_commit;       /* the write transaction's id */
	uint64_t gc_damaged;      /* live blocks left in place, damaged */
	bool gc_no_room;          /* the copy failed writing, DD_ENOSPC */
	const dd_gc_opts *gc_opts;/* version 2: the progress callback */
	dd_gc_result gc_res;
} dd_gc;

enum { DD_GC_KEEP, DD_GC_DROP, DD_GC_REWRITE };

static int dd_gc_keys_add(dd_gc *gc, dd_gc_keys *ks, const dd_ddt_key *key,
			  uint32_t pack, uint64_t off)
{
	if (ks->n == ks->cap) {
		size_t n = ks->cap ? ks->cap * 2 : 1024;
		dd_gc_key *k = dd_realloc(ks->gk, n * sizeof(*k));

		if (!k)
			return dd_err_set(gc->gc_err, DD_ENOMEM, "out of memory");
		ks->gk = k;
		ks->cap = n;
	}
	ks->gk[ks->n++] = (dd_gc_key){*key, pack, off};
	return 0;
}

/* Does gc keep this entry's bytes: alive, or dead only since a running
 * writer started? */
static bool dd_gc_keeps(const dd_gc *gc, const dd_ddt_ent *e)
{
	return e->de_refcnt > 0 || e->de_dead_since >= gc->gc_keep_since;
}

/* ---- read phase ------------------------------------------------------------*/

static int dd_gc_sum_live(void *arg, const dd_ddt_key *key,
			  const dd_ddt_ent *e)
{
	dd_gc *gc = arg;

	(void)key;
	if ((e->de_flags & DD_DDE_MISSING) || !dd_gc_keeps(gc, e))
		return 0;   /* no bytes in a pack, or none to keep */
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
 * snapshot).  One DDT lookup per map entry, before anything is chosen.
 * Maps of running writers count too: their references commit with them. */
static int dd_gc_check_map(void *arg, uint64_t id, uint64_t idx,
			   const dd_ddt_key *key)
{
	dd_gc *gc = arg;
	dd_ddt_ent ent;
	int rc;

	if (!dd_defer_set_counted(&gc->gc_defer, id, idx, key))
		return 0;   /* a deferring writer's, not applied yet */
	rc = dd_ddt_get(gc->gc_txn, gc->gc_err, key, &ent);
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

	if (!gc->gc_store->st_mfdir)
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

/* Packs to drop or rewrite, by their live bytes -- each only once gc
 * holds its lock: a pack a writer holds stays as it is this time. */
static int dd_gc_choose(dd_gc *gc, double below)
{
	dd_store *s = gc->gc_store;

	for (uint64_t id = 1; id < gc->gc_npacks; id++) {
		uint64_t end = gc->gc_end[id], data;
		dd_err busy;
		dd_pack *p;
		int rc;

		gc->gc_fate[id] = DD_GC_KEEP;
		if (end == 0)
			continue;
		data = end > DD_PACK_FILE_HDR_SIZE ? end - DD_PACK_FILE_HDR_SIZE
						   : 0;
		if (gc->gc_live[id] != 0 &&
		    (double)gc->gc_live[id] >= below * (double)data)
			continue;
		rc = dd_pack_open(&p, gc->gc_err, s->st_packdir, (uint32_t)id,
				  1);
		if (rc)
			return rc;
		if (dd_pack_lock(p, &busy)) {
			dd_pack_close(p);
			continue;
		}
		gc->gc_held[id] = p;
		gc->gc_fate[id] = gc->gc_live[id] ? DD_GC_REWRITE : DD_GC_DROP;
	}
	return 0;
}

/* dd_gc_recheck_live's walk: the live bytes of the chosen packs now. */
static int dd_gc_sum_chosen(void *arg, const dd_ddt_key *key,
			    const dd_ddt_ent *e)
{
	void **ctx = arg;
	dd_gc *gc = ctx[0];
	uint64_t *live = ctx[1];

	(void)key;
	if ((e->de_flags & DD_DDE_MISSING) || !dd_gc_keeps(gc, e) ||
	    e->de_pack >= gc->gc_npacks ||
	    gc->gc_fate[e->de_pack] == DD_GC_KEEP)
		return 0;
	live[e->de_pack] += DD_PACK_REC_HDR_SIZE + e->de_psize;
	return 0;
}

/* A deferring writer commits its packs' ends at an interval and the DDT
 * entries naming their records at its flush, later, and lets go of the
 * packs' locks only after that (format/store.md §7.2): so a pack whose
 * lock gc took after its read began may hold records that read never
 * saw named, and its committed end has not moved since.  The chosen
 * packs' live bytes are therefore summed again in a read transaction
 * begun after every lock was taken -- it sees every flush of their
 * former holders --, and a pack whose sum differs stays as it is. */
static int dd_gc_recheck_live(dd_gc *gc)
{
	uint64_t *live;
	void *ctx[2];
	dd_txn *txn;
	bool chosen = false;
	int rc;

	for (uint64_t id = 1; id < gc->gc_npacks; id++)
		chosen |= gc->gc_fate[id] != DD_GC_KEEP;
	if (!chosen)
		return 0;
	live = dd_calloc(gc->gc_npacks, sizeof(*live));
	if (!live)
		return dd_err_set(gc->gc_err, DD_ENOMEM, "out of memory");
	ctx[0] = gc;
	ctx[1] = live;
	rc = dd_txn_begin(gc->gc_store->st_db, gc->gc_err, false, &txn);
	if (!rc) {
		rc = dd_ddt_walk(txn, gc->gc_err, dd_gc_sum_chosen, ctx);
		dd_txn_abort(txn);
	}
	for (uint64_t id = 1; !rc && id < gc->gc_npacks; id++)
		if (gc->gc_fate[id] != DD_GC_KEEP && live[id] != gc->gc_live[id])
			gc->gc_fate[id] = DD_GC_KEEP;
	dd_free(live);
	return rc;
}

/* Entries of the chosen packs: those kept move (rewritten packs), the
 * others are freed; dead entries elsewhere are freed too (their records
 * stay, garbage, until gc rewrites their pack). */
static int dd_gc_collect(void *arg, const dd_ddt_key *key, const dd_ddt_ent *e)
{
	dd_gc *gc = arg;

	if (e->de_flags & DD_DDE_MISSING)
		return 0;
	if (!dd_gc_keeps(gc, e))
		return dd_gc_keys_add(gc, &gc->gc_free, key, e->de_pack,
				      e->de_dead_since);
	if (gc->gc_fate[e->de_pack] != DD_GC_REWRITE)
		return 0;
	gc->gc_move_bytes += DD_PACK_REC_HDR_SIZE + e->de_psize;
	return dd_gc_keys_add(gc, &gc->gc_move, key, e->de_pack, e->de_offset);
}

/* Copies the blocks to move into gc's new pack, and syncs it. */
static int dd_gc_copy(dd_gc *gc, dd_scratch *sc, uint64_t *new_off)
{
	dd_store *s = gc->gc_store;
	uint64_t done = 0;
	int rc = dd_gc_progress(gc, 0);

	for (size_t i = 0; !rc && i < gc->gc_move.n; i++) {
		const dd_ddt_key *key = &gc->gc_move.gk[i].gk_key;
		dd_ddt_ent e;
		dd_pack_rec rec;

		rc = dd_ddt_get(gc->gc_txn, gc->gc_err, key, &e);
		if (!rc)
			rc = dd_block_read(s, gc->gc_err, sc, key, &e,
					   sc->sc_dbuf);
		if ((rc == DD_ECHECKSUM || rc == DD_ECORRUPT) &&
		    gc->gc_move.gk[i].gk_pack < gc->gc_npacks) {
			/* damaged: it stays, and so does its pack; the
			 * others move, and the dead around it are punched */
			gc->gc_fate[gc->gc_move.gk[i].gk_pack] = DD_GC_KEEP;
			gc->gc_damaged++;
			new_off[i] = UINT64_MAX;
			dd_err_clear(gc->gc_err);
			rc = 0;
		} else {
			if (!rc && !gc->gc_new) {
				rc = dd_store_new_pack(s, gc->gc_err, false,
						       &gc->gc_new);
				gc->gc_no_room = rc == DD_ENOSPC;
			}
			if (rc)
				break;
			rec = (dd_pack_rec){.pr_codec = e.de_codec,
					    .pr_lsize = e.de_lsize,
					    .pr_psize = e.de_psize};
			memcpy(rec.pr_hash, key->dk_hash, DD_HASH_SIZE);
			rc = dd_pack_append(gc->gc_new, gc->gc_err, &rec,
					    sc->sc_rbuf + DD_PACK_REC_HDR_SIZE,
					    &new_off[i]);
			gc->gc_no_room = rc == DD_ENOSPC;
		}
		done += DD_PACK_REC_HDR_SIZE + e.de_psize;
		if (!rc && (i % 256 == 255 || i + 1 == gc->gc_move.n))
			rc = dd_gc_progress(gc, done);
	}
	if (!rc && gc->gc_new) {
		rc = dd_pack_sync(gc->gc_new, gc->gc_err);
		gc->gc_no_room = rc == DD_ENOSPC;
	}
	return rc;
}

/* Drops gc's new pack, uncommitted: its file goes at once. */
static void dd_gc_drop_new(dd_gc *gc)
{
	char name[16];   /* dd_pack_name's size */

	if (!gc->gc_new)
		return;
	dd_pack_name(name, sizeof(name), dd_pack_id(gc->gc_new));
	dd_pack_close(gc->gc_new);
	gc->gc_new = NULL;
	(void)dd_vdir_unlink(gc->gc_store->st_packdir, NULL, name);
}

/* No room for the copies: the packs to rewrite are kept, still locked,
 * and their dead records punched after the commit instead. */
static void dd_gc_no_room(dd_gc *gc)
{
	dd_gc_drop_new(gc);
	for (uint64_t id = 1; id < gc->gc_npacks; id++)
		if (gc->gc_fate[id] == DD_GC_REWRITE)
			gc->gc_fate[id] = DD_GC_KEEP;
	gc->gc_move.n = 0;
	gc->gc_move_bytes = 0;
}

static int dd_gc_read_phase(dd_gc *gc, double below, uint64_t **new_off)
{
	dd_scratch sc;
	int rc;

	rc = dd_meta_get_u64(gc->gc_txn, gc->gc_err, "pack.next",
			     &gc->gc_npacks);
	if (!rc && (gc->gc_npacks == 0 || gc->gc_npacks > DD_GC_MAX_PACKS))
		rc = dd_err_set(gc->gc_err, DD_ECORRUPT,
				"meta pack.next out of range");
	if (!rc)
		rc = dd_writers_min_start(gc->gc_store, gc->gc_err,
					  &gc->gc_keep_since);
	if (rc)
		return rc;
	gc->gc_live = dd_calloc(gc->gc_npacks, sizeof(*gc->gc_live));
	gc->gc_end = dd_calloc(gc->gc_npacks, sizeof(*gc->gc_end));
	gc->gc_fate = dd_calloc(gc->gc_npacks, 1);
	gc->gc_held = dd_calloc(gc->gc_npacks, sizeof(*gc->gc_held));
	if (!gc->gc_live || !gc->gc_end || !gc->gc_fate || !gc->gc_held)
		return dd_err_set(gc->gc_err, DD_ENOMEM, "out of memory");
	/* nothing is freed on the word of a catalog the manifests do not
	 * back: every block map is first the manifest's, entry by entry, so
	 * with dd_gc_check_map every block a committed snapshot needs has a
	 * reference counted */
	rc = dd_snap_walk(gc->gc_txn, gc->gc_err, dd_gc_check_manifest, gc);
	if (!rc)
		rc = dd_defer_set_load(gc->gc_txn, gc->gc_err, &gc->gc_defer);
	if (!rc)
		rc = dd_bmap_walk_all(gc->gc_txn, gc->gc_err, dd_gc_check_map,
				      gc);
	if (!rc)
		rc = dd_ddt_walk(gc->gc_txn, gc->gc_err, dd_gc_sum_live, gc);
	if (!rc)
		rc = dd_packs_walk(gc->gc_txn, gc->gc_err, dd_gc_note_pack, gc);
	if (!rc && dd_gc_test_after_sum)
		dd_gc_test_after_sum(dd_gc_test_ctx);
	if (!rc)
		rc = dd_gc_choose(gc, below);
	if (!rc)
		rc = dd_gc_recheck_live(gc);
	if (!rc)
		rc = dd_ddt_walk(gc->gc_txn, gc->gc_err, dd_gc_collect, gc);
	if (rc)
		return rc;
	*new_off = dd_calloc(gc->gc_move.n + 1, sizeof(**new_off));
	if (!*new_off)
		return dd_err_set(gc->gc_err, DD_ENOMEM, "out of memory");
	rc = dd_scratch_init(&sc, gc->gc_err, gc->gc_store);
	if (rc)
		return rc;
	rc = dd_gc_copy(gc, &sc, *new_off);
	dd_scratch_fini(&sc);
	if (rc == DD_ENOSPC && gc->gc_no_room) {
		dd_gc_no_room(gc);
		dd_err_clear(gc->gc_err);
		rc = 0;
	}
	return rc;
}

/* ---- write phase -----------------------------------------------------------*/

/* Points each moved entry that is still where gc read it at its copy. */
static int dd_gc_repoint(dd_gc *gc, const uint64_t *new_off)
{
	int rc = 0;

	for (size_t i = 0; !rc && i < gc->gc_move.n; i++) {
		const dd_gc_key *m = &gc->gc_move.gk[i];
		dd_ddt_ent e;

		if (new_off[i] == UINT64_MAX)
			continue;   /* damaged: not copied */
		rc = dd_ddt_get(gc->gc_txn, gc->gc_err, &m->gk_key, &e);
		if (rc == DD_ENOENT) {
			rc = 0;
			continue;
		}
		if (rc || e.de_pack != m->gk_pack || e.de_offset != m->gk_off ||
		    (e.de_flags & DD_DDE_MISSING))
			continue;
		e.de_pack = dd_pack_id(gc->gc_new);
		e.de_offset = new_off[i];
		rc = dd_ddt_put(gc->gc_txn, gc->gc_err, &m->gk_key, &e);
		gc->gc_res.blocks_moved++;
	}
	return rc;
}

/* Deletes the dead entries gc chose, each only if it is still dead since
 * the same transaction; one that changed (a writer revived it) keeps the
 * pack it is in. */
static int dd_gc_free(dd_gc *gc)
{
	int rc = 0;

	for (size_t i = 0; !rc && i < gc->gc_free.n; i++) {
		const dd_gc_key *f = &gc->gc_free.gk[i];
		dd_ddt_ent e;

		rc = dd_ddt_get(gc->gc_txn, gc->gc_err, &f->gk_key, &e);
		if (rc == DD_ENOENT) {
			rc = 0;
			continue;
		}
		if (rc)
			break;
		if (e.de_refcnt == 0 && e.de_dead_since == f->gk_off &&
		    !(e.de_flags & DD_DDE_MISSING)) {
			rc = dd_ddt_del(gc->gc_txn, gc->gc_err, &f->gk_key);
			gc->gc_res.ddt_entries_removed++;
		} else if (!(e.de_flags & DD_DDE_MISSING) &&
			   e.de_pack < gc->gc_npacks) {
			gc->gc_fate[e.de_pack] = DD_GC_KEEP;
		}
	}
	return rc;
}

/* A chosen pack whose committed end moved since the read phase took
 * blocks a writer committed before gc got its lock: it stays. */
static int dd_gc_recheck_ends(dd_gc *gc)
{
	int rc = 0;

	for (uint64_t id = 1; !rc && id < gc->gc_npacks; id++) {
		uint64_t end;

		if (gc->gc_fate[id] == DD_GC_KEEP)
			continue;
		rc = dd_packs_get(gc->gc_txn, gc->gc_err, (uint32_t)id, &end);
		if (rc == DD_ENOENT || (!rc && end != gc->gc_end[id])) {
			gc->gc_fate[id] = DD_GC_KEEP;
			rc = 0;
		}
	}
	return rc;
}

static int dd_gc_write_phase(dd_gc *gc, const uint64_t *new_off)
{
	uint64_t running, removed = 0;
	int rc = dd_gc_recheck_ends(gc);

	/* counted afresh when a commit is tried again (dd_gc_run) */
	gc->gc_res.blocks_moved = gc->gc_res.ddt_entries_removed = 0;
	gc->gc_res.packs_deleted = gc->gc_res.packs_rewritten = 0;
	gc->gc_commit = dd_txn_id(gc->gc_txn);

	if (!rc)
		rc = dd_gc_repoint(gc, new_off);

	if (!rc)
		rc = dd_gc_free(gc);
	if (!rc && gc->gc_new) {
		gc->gc_new_bytes = dd_pack_end(gc->gc_new);
		rc = dd_packs_put(gc->gc_txn, gc->gc_err,
				  dd_pack_id(gc->gc_new), gc->gc_new_bytes);
	}
	/* doomed, not deleted: a reader that began before this commit may
	 * still read them (dd_store_reap removes them later) */
	for (uint64_t id = 1; !rc && id < gc->gc_npacks; id++) {
		if (gc->gc_fate[id] == DD_GC_DROP)
			gc->gc_res.packs_deleted++;
		else if (gc->gc_fate[id] == DD_GC_REWRITE)
			gc->gc_res.packs_rewritten++;
		if (gc->gc_fate[id] != DD_GC_KEEP)
			rc = dd_packs_doom(gc->gc_txn, gc->gc_err, (uint32_t)id,
					   dd_txn_id(gc->gc_txn));
	}
	/* With no writer running -- asked under the write lock, which any
	 * new one needs to register -- every dead entry left may go, and
	 * the DDT is rebuilt dense. */
	if (!rc)
		rc = dd_writers_min_start(gc->gc_store, gc->gc_err, &running);
	if (!rc && running == UINT64_MAX) {
		rc = dd_ddt_compact(gc->gc_txn, gc->gc_err, &removed);
		gc->gc_res.ddt_entries_removed += removed;
	}
	return rc;
}

/* ---- the run ---------------------------------------------------------------*/

static int dd_gc_run(dd_gc *gc, double below)
{
	dd_store *s = gc->gc_store;
	uint64_t *new_off = NULL;
	int rc = dd_txn_begin(s->st_db, gc->gc_err, false, &gc->gc_txn);

	if (!rc) {
		rc = dd_gc_read_phase(gc, below, &new_off);
		dd_txn_abort(gc->gc_txn);
		gc->gc_txn = NULL;
	}
	for (int tries = 0; !rc; tries++) {
		rc = dd_txn_begin(s->st_db, gc->gc_err, true, &gc->gc_txn);
		if (rc)
			break;
		rc = dd_gc_write_phase(gc, new_off);
		if (rc)
			dd_txn_abort(gc->gc_txn);
		else
			rc = dd_txn_commit(gc->gc_txn, gc->gc_err);
		gc->gc_txn = NULL;
		/* a full file system: the reserve makes room for the
		 * catalog's pages, once */
		if (rc != DD_ENOSPC || tries || !dd_space_reserve_release(s))
			break;
		dd_err_clear(gc->gc_err);
		rc = 0;
	}
	dd_free(new_off);
	return rc;
}

/* Punches the dead records of the packs gc keeps (space.c), once no
 * reader that began before gc's commit is left -- one could still read
 * an entry the commit deleted; the next gc punches what this one could
 * not.  Packs gc chose and kept (no room, damage) are punched; the others
 * only when their file holds more than their live bytes, and only if gc
 * gets their lock.  Failures
 * are not gc's: it has committed. */
static uint64_t dd_gc_punch(dd_gc *gc)
{
	dd_store *s = gc->gc_store;
	/* a pack's allocated blocks say what is left to give back; only a
	 * local directory has them (and holes: dd_vfile_punch) */
	int pfd = dd_vdir_fd(s->st_packdir);
	uint64_t oldest, total = 0;
	dd_err e = {0};

	if (pfd < 0)
		return 0;
	if (dd_db_oldest_reader(s->st_db, &e, &oldest) || oldest < gc->gc_commit)
		return 0;
	for (uint64_t id = 1; id < gc->gc_npacks; id++) {
		uint64_t end = gc->gc_end[id], punched = 0;
		dd_pack *p = gc->gc_held[id];
		char name[16];   /* dd_pack_name's size */
		struct stat st;
		int rc;

		if (gc->gc_fate[id] != DD_GC_KEEP || end <= DD_PACK_FILE_HDR_SIZE)
			continue;
		dd_pack_name(name, sizeof(name), (uint32_t)id);
		if (!p && (fstatat(pfd, name, &st, 0) != 0 ||
			   (uint64_t)st.st_blocks * 512 <=
			   gc->gc_live[id] + DD_PACK_FILE_HDR_SIZE + 65536))
			continue;   /* nothing much dead left in it */
		if (!p) {
			if (dd_pack_open(&p, &e, s->st_packdir, (uint32_t)id,
					 1))
				continue;
			if (dd_pack_lock(p, &e)) {
				dd_pack_close(p);
				continue;
			}
			gc->gc_held[id] = p;
		}
		rc = dd_space_punch_pack(s, &e, p, &punched);
		total += punched;
		if (rc == DD_ENOTSUP)
			break;      /* the file system cannot */
	}
	return total;
}

/* Lets go of the packs; the new one goes too unless gc committed. */
static void dd_gc_free_state(dd_gc *gc, bool committed)
{
	for (uint64_t id = 0; gc->gc_held && id < gc->gc_npacks; id++)
		dd_pack_close(gc->gc_held[id]);
	if (!committed)
		dd_gc_drop_new(gc);
	dd_pack_close(gc->gc_new);
	dd_free(gc->gc_held);
	dd_defer_set_free(&gc->gc_defer);
	dd_free(gc->gc_live);
	dd_free(gc->gc_end);
	dd_free(gc->gc_fate);
	dd_free(gc->gc_move.gk);
	dd_free(gc->gc_free.gk);
}

int dd_store_gc(dd_store *s, const dd_gc_opts *opts, dd_gc_result *out)
{
	dd_err err = {0};
	dd_gc gc = {.gc_store = s, .gc_err = &err, .gc_opts = opts};
	double below = 0.8;
	int gcfd = -1, lockfd = -1, rc;

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
	if (s->st_opts.readonly)
		return dd_store_failf(s, DD_EPERM, "%s: store opened "
				      "read-only", s->st_path);
	rc = dd_lock_take(s, &err, "gc.lock", true, &gcfd);
	if (!rc)
		rc = dd_store_enter(s, &err, &lockfd);
	if (!rc)
		rc = dd_gc_run(&gc, below);
	if (!rc) {
		uint64_t freed = 0, punched;

		/* a failure to reap is not gc's failure: the next one to
		 * enter the store reaps what remains */
		if (dd_store_reap(s, &err, &freed) == 0)
			gc.gc_res.bytes_reclaimed =
				freed > gc.gc_new_bytes ? freed - gc.gc_new_bytes
							: 0;
		punched = dd_gc_punch(&gc);
		gc.gc_res.bytes_reclaimed += punched;
		dd_space_reserve_make(s);
	}
	dd_gc_free_state(&gc, rc == 0);
	dd_store_leave(s, lockfd);
	dd_lock_drop(gcfd);
	if (rc)
		return dd_store_fail(s, &err);
	if (out)
		*out = gc.gc_res;
	return 0;
}
