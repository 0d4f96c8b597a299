/*
 * scrub.c -- read and verify every stored block; name who uses bad ones.
 *
 * Pass 0 checks LMDB's own page structure (dd_db_check): LMDB would
 * crash on damage there rather than report it.  With damaged_snapshot,
 * a damaged page of one of libdedup's tables does not stop scrub: it is
 * reported with what it held, the read transaction passes over its keys,
 * and each pass below goes on with the rest (scrub_pages.c says what
 * each table's damage costs).  Pass 1 walks the DDT in one read
 * transaction and verifies blocks in rounds on the pool (each read is
 * the full checked path of block.c).
 * Bad blocks are kept in a sorted array.  Pass 2, only when something is
 * bad, walks every block map once and reports each use of a bad block with
 * the snapshot's name and the byte offset; a bad block nothing uses is
 * reported once with no snapshot.  Pass 3 checks every snapshot's block
 * map against the DDT and the snapshot's content digest: LMDB keeps no
 * checksums, and a map damaged in the LMDB file reads as holes.  Pass 4
 * counts the block-map entries naming each key and compares each DDT
 * entry's reference count (format/ddt.md §1: the count of block-map
 * entries that name it): a count damaged low would let a later rm bring
 * a live block to 0 (gc then refuses: dd_gc_check_map), one damaged high
 * keeps a dead block forever; neither changes what reads return, so only
 * this pass can name it.  Since the block maps are checked against the
 * manifests (pass 3, format/manifest.md), the counts are checked against
 * the manifests too; and before all, the catalog's set of snapshots
 * against the manifests' (dd_commit_check): a catalog that went back in
 * time lacks the last snapshots.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/endian.h"
#include "common/hmap.h"
#include "catalog/ucnt.h"
#include "store/defer.h"
#include "store/store_internal.h"

#define DD_SCRUB_ROUND 256

typedef struct dd_sblk {
	dd_ddt_key sb_key;
	dd_ddt_ent sb_ent;
	int sb_rc;
	bool sb_used;
} dd_sblk;

typedef struct dd_sblks {
	dd_sblk *b;
	size_t n, cap;
} dd_sblks;

typedef struct dd_scrub {
	dd_store *sc_store;
	dd_err *sc_err;
	dd_txn *sc_txn;
	dd_sblk sc_round[DD_SCRUB_ROUND];
	size_t sc_n;
	dd_sblks sc_bad;          /* bad blocks: flagged DAMAGED at the end */
	dd_sblks sc_good;         /* flagged DAMAGED, read well: cleared */
	dd_scrub_result sc_res;
	dd_scrub_cb sc_cb;
	void *sc_ctx;
	dd_progress_fn sc_progress;
	void *sc_progress_ctx;
	dd_scrub_snap_cb sc_snap_cb;  /* v2: damaged snapshots, and go on */
	void *sc_snap_ctx;
	uint64_t sc_nbad_snaps;
	dd_err sc_snap_err;           /* the first damaged snapshot's */
	uint64_t sc_done, sc_total;  /* pack bytes read, committed */
	/* pass 2: snapshot id -> name */
	uint64_t *sc_ids;
	char (*sc_names)[DD_NAME_MAX + 1];
	uint32_t *sc_bs;
	size_t sc_nsnap, sc_capsnap;
	/* pass 4: key -> block-map entries naming it; entries that differ */
	dd_hmap *sc_refs;
	dd_defer_set sc_defer;    /* pending maps counting part of theirs */
	dd_ucnt_set sc_ucnt;      /* uncounted positions (catalog/ucnt.h) */
	uint64_t sc_ucnt_seen;    /* ... found in the maps */
	uint64_t sc_ucnt_dead;    /* ... whose entry counts none (not U) */
	uint64_t sc_nwrong;
	dd_ddt_key sc_wrong_key;
	uint64_t sc_wrong_refcnt, sc_wrong_refs;
	/* pass 0 with damaged_snapshot: damaged catalog pages, past which
	 * scrub goes on (scrub_pages.c); the first one's message; v3: each
	 * page and what it affects, reported */
	dd_scrub_pages *sc_pages;
	dd_err sc_pages_err;
	dd_scrub_page_cb sc_page_cb;
	void *sc_page_ctx;
	/* published snapshots whose records a damaged page held: checked
	 * as their manifests give them */
	struct dd_slost {
		char sl_name[DD_NAME_MAX + 1];
		dd_snap_rec sl_rec;
		const dd_spage *sl_pg;
	} *sc_lost;
	size_t sc_nlost, sc_caplost;
} dd_scrub;

/* Pass 3, one snapshot: its blocks whose DDT entries a damaged page held,
 * as runs of bytes, each on one page (reported as it ends). */
typedef struct dd_srun {
	const char *sr_name;
	const dd_spage *sr_pg;       /* the current run's; NULL: none yet */
	uint64_t sr_off, sr_end;     /* the current run's bytes */
	uint64_t sr_blocks, sr_runs;
	uint64_t sr_first, sr_last;  /* from the first run's start to the
					last one's end */
	const dd_spage *sr_first_pg;
} dd_srun;

static void dd_scrub_job(void *arg, size_t i, unsigned worker)
{
	dd_scrub *sc = arg;
	dd_sblk *b = &sc->sc_round[i];
	dd_scratch *scr = &sc->sc_store->st_scratch[worker];
	dd_err err;

	b->sb_rc = dd_block_read(sc->sc_store, &err, scr, &b->sb_key,
				 &b->sb_ent, scr->sc_dbuf);
}

static int dd_key_cmp(const void *a, const void *b)
{
	return memcmp(a, b, sizeof(dd_ddt_key));
}

/* A block must lie within its pack's committed end (the packs table):
 * the next writer's recovery cuts every pack back to that end (format/
 * store.md §5), so an end damaged in the LMDB file would destroy live
 * blocks -- scrub names them first. */
static int dd_scrub_pack_end(dd_scrub *sc, const dd_sblk *b)
{
	uint8_t kb[4];
	uint64_t end;
	dd_err e;
	int rc;

	/* an end on a damaged page is unknown (its page's report says so);
	 * keys: format/store.md §5 */
	dd_put_be32(kb, b->sb_ent.de_pack);
	if (dd_scrub_pages_find(sc->sc_pages, "packs", kb, sizeof(kb)))
		return 0;
	rc = dd_packs_get(sc->sc_txn, &e, b->sb_ent.de_pack, &end);

	if (rc == DD_ENOENT || (rc == 0 && b->sb_ent.de_offset +
				DD_PACK_REC_HDR_SIZE + b->sb_ent.de_psize > end))
		return DD_ECORRUPT;
	return rc;
}

static int dd_scrub_progress(dd_scrub *sc, uint64_t done)
{
	if (!sc->sc_progress)
		return 0;
	if (done > sc->sc_total)   /* a record past its pack's end: bad */
		done = sc->sc_total;
	if (sc->sc_progress(sc->sc_progress_ctx, done, sc->sc_total) != 0)
		return dd_err_set(sc->sc_err, DD_ECANCELED,
				  "scrub cancelled by the progress callback");
	return 0;
}

static int dd_scrub_pack_bytes(void *arg, uint32_t id, uint64_t end)
{
	dd_scrub *sc = arg;

	(void)id;
	sc->sc_total += end;
	return 0;
}

/* Adds a copy of b to a list of blocks (bad ones, or flagged good ones). */
static int dd_scrub_keep(dd_scrub *sc, dd_sblks *l, const dd_sblk *b)
{
	if (l->n == l->cap) {
		size_t n = l->cap ? l->cap * 2 : 64;
		dd_sblk *nb = dd_realloc(l->b, n * sizeof(*nb));

		if (!nb)
			return dd_err_set(sc->sc_err, DD_ENOMEM,
					  "out of memory");
		l->b = nb;
		l->cap = n;
	}
	l->b[l->n++] = *b;
	return 0;
}

static int dd_scrub_round(dd_scrub *sc)
{
	dd_store *s = sc->sc_store;
	int rc;

	pthread_mutex_lock(&s->st_pool_lock);
	dd_pool_run(s->st_pool, dd_scrub_job, sc, sc->sc_n);
	pthread_mutex_unlock(&s->st_pool_lock);
	for (size_t i = 0; i < sc->sc_n; i++) {
		dd_sblk *b = &sc->sc_round[i];

		sc->sc_res.blocks_checked++;
		sc->sc_res.bytes_checked += b->sb_ent.de_lsize;
		if (!(b->sb_ent.de_flags & DD_DDE_MISSING))
			sc->sc_done += DD_PACK_REC_HDR_SIZE + b->sb_ent.de_psize;
		if (b->sb_rc == 0)
			b->sb_rc = dd_scrub_pack_end(sc, b);
		if (b->sb_rc == 0 && !(b->sb_ent.de_flags & DD_DDE_DAMAGED))
			continue;
		if (b->sb_rc == 0) {   /* flagged, reads well: clear it */
			rc = dd_scrub_keep(sc, &sc->sc_good, b);
			if (rc)
				return rc;
			continue;
		}
		if (b->sb_rc == DD_ENOMEM)
			return dd_err_set(sc->sc_err, DD_ENOMEM, "out of memory");
		rc = dd_scrub_keep(sc, &sc->sc_bad, b);
		if (rc)
			return rc;
	}
	sc->sc_n = 0;
	return dd_scrub_progress(sc, sc->sc_done);
}

static int dd_scrub_ddt(void *arg, const dd_ddt_key *key, const dd_ddt_ent *e)
{
	dd_scrub *sc = arg;
	dd_sblk *b = &sc->sc_round[sc->sc_n++];

	b->sb_key = *key;
	b->sb_ent = *e;
	b->sb_used = false;
	if (sc->sc_n == DD_SCRUB_ROUND)
		return dd_scrub_round(sc);
	return 0;
}

static int dd_scrub_snap(void *arg, const char *name, const dd_snap_rec *r)
{
	dd_scrub *sc = arg;

	if (sc->sc_nsnap == sc->sc_capsnap) {
		size_t n = sc->sc_capsnap ? sc->sc_capsnap * 2 : 16;
		uint64_t *ids = dd_realloc(sc->sc_ids, n * sizeof(*ids));
		uint32_t *bs = ids ? dd_realloc(sc->sc_bs, n * sizeof(*bs)) : NULL;
		char(*names)[DD_NAME_MAX + 1] =
			bs ? dd_realloc(sc->sc_names, n * sizeof(*names)) : NULL;

		if (ids)
			sc->sc_ids = ids;
		if (bs)
			sc->sc_bs = bs;
		if (!names)
			return dd_err_set(sc->sc_err, DD_ENOMEM, "out of memory");
		sc->sc_names = names;
		sc->sc_capsnap = n;
	}
	sc->sc_ids[sc->sc_nsnap] = r->sr_id;
	sc->sc_bs[sc->sc_nsnap] = r->sr_block_size;
	strcpy(sc->sc_names[sc->sc_nsnap], name);
	sc->sc_nsnap++;
	return 0;
}

static int dd_scrub_report(dd_scrub *sc, dd_sblk *b, const char *snap,
			   uint64_t offset)
{
	dd_scrub_bad bad = {
		.pack = b->sb_ent.de_pack,
		.pack_offset = b->sb_ent.de_offset,
		.error = b->sb_rc,
		.snapshot = snap,
		.offset = offset,
	};

	memcpy(bad.hash, b->sb_key.dk_hash, DD_HASH_SIZE);
	if (sc->sc_cb && sc->sc_cb(&bad, sc->sc_ctx) != 0)
		return dd_err_set(sc->sc_err, DD_ECANCELED,
				  "scrub stopped by its callback");
	return 0;
}

static int dd_scrub_use(void *arg, uint64_t id, uint64_t idx,
			const dd_ddt_key *key)
{
	dd_scrub *sc = arg;
	dd_sblk *b = bsearch(key, sc->sc_bad.b, sc->sc_bad.n, sizeof(*b),
			     dd_key_cmp);

	if (!b)
		return 0;
	b->sb_used = true;
	/* a content-defined map is keyed by the block's offset already */
	for (size_t i = 0; i < sc->sc_nsnap; i++)
		if (sc->sc_ids[i] == id)
			return dd_scrub_report(sc, b, sc->sc_names[i],
					       sc->sc_store->st_chunker ==
					       DD_CHUNKER_FIXED
					       ? idx * sc->sc_bs[i] : idx);
	return 0; /* a writer's pending map: not a snapshot yet */
}

/* Ends run's current run of bytes: reported with its page. */
static int dd_scrub_run_end(dd_scrub *sc, dd_srun *run)
{
	dd_scrub_page p = {.snapshot = run->sr_name};

	if (!run->sr_pg || !sc->sc_page_cb)
		return 0;
	p.table = dd_spage_table(run->sr_pg);
	p.page = dd_spage_pgno(run->sr_pg);
	p.offset = run->sr_off;
	p.length = run->sr_end - run->sr_off;
	if (sc->sc_page_cb(&p, sc->sc_page_ctx) != 0)
		return dd_err_set(sc->sc_err, DD_ECANCELED,
				  "scrub stopped by its callback");
	return 0;
}

/* Bytes [off, off + len) of the image are a block whose DDT entry page
 * pg held: joined to the run they continue, on the same page. */
static int dd_scrub_run_add(dd_scrub *sc, dd_srun *run, const dd_spage *pg,
			    uint64_t off, uint64_t len)
{
	int rc = 0;

	run->sr_blocks++;
	if (run->sr_pg != pg || off != run->sr_end) {
		rc = dd_scrub_run_end(sc, run);
		if (!run->sr_runs++) {
			run->sr_first = off;
			run->sr_first_pg = pg;
		}
		run->sr_pg = pg;
		run->sr_off = off;
	}
	run->sr_end = run->sr_last = off + len;
	return rc;
}

/* Pass 3, for one snapshot: each block its map names is in the DDT,
 * referenced, of the size the image needs there -- in a content-defined
 * map, the length its entry gives, the blocks in order and inside the
 * image --, and the map hashes to the snapshot's content digest
 * (format/store.md §6).  A block whose DDT entry a damaged page held
 * cannot be looked up: it goes into run, the rest is checked. */
static int dd_scrub_map_check(dd_scrub *sc, dd_digest *dg, dd_bmap_cur *cur,
			      const dd_snap_rec *r, dd_srun *run)
{
	uint64_t idx, next = 0, bs = r->sr_block_size;
	bool var = sc->sc_store->st_chunker != DD_CHUNKER_FIXED;
	uint8_t got[DD_HASH_SIZE], passed[DD_DDT_PART_KEY_MAX];
	size_t passed_len;
	const dd_spage *pg;
	dd_ddt_key key;
	dd_ddt_ent ent;
	int rc;

	for (rc = dd_bmap_seek(cur, sc->sc_err, 0, &idx, &key); rc == 1;
	     rc = dd_bmap_next(cur, sc->sc_err, &idx, &key)) {
		uint64_t len = dd_bmap_len(cur);

		if (idx < next || (var ? idx >= r->sr_size ||
					 len > r->sr_size - idx
				       : idx >= r->sr_blocks))
			return dd_err_set(sc->sc_err, DD_ECORRUPT, "block map "
					  "entry %llu out of order or past the "
					  "image", (unsigned long long)idx);
		if (!var)
			len = idx + 1 < r->sr_blocks ? bs
						     : r->sr_size - idx * bs;
		/* a part of the DDT the key may be in (format/ddt.md §5)
		 * on a damaged page: the block cannot be located */
		rc = dd_ddt_get_past(sc->sc_txn, sc->sc_err, &key, &ent,
				     passed, &passed_len);
		pg = rc == DD_ENOENT && passed_len && sc->sc_pages
			     ? dd_scrub_pages_find(sc->sc_pages,
						   dd_ddt_live_table(sc->sc_txn),
						   passed, passed_len)
			     : NULL;
		if (pg) {
			rc = dd_scrub_run_add(sc, run, pg, var ? idx : idx * bs,
					      len);
			if (rc)
				return rc;
			goto digest;
		}
		if (rc == DD_ENOENT)
			return dd_err_set(sc->sc_err, DD_ECORRUPT, "block %llu "
					  "is not in the ddt",
					  (unsigned long long)idx);
		if (rc)
			return rc;
		if (ent.de_refcnt == 0 || ent.de_lsize != len)
			return dd_err_set(sc->sc_err, DD_ECORRUPT, "block %llu: "
					  "ddt entry of %u bytes, refcount "
					  "%llu", (unsigned long long)idx,
					  ent.de_lsize,
					  (unsigned long long)ent.de_refcnt);
digest:
		if (var) {
			if (idx > next)
				dd_digest_block(dg, NULL, idx - next);
			dd_digest_block(dg, key.dk_hash, len);
			next = idx + len;
			continue;
		}
		dd_digest_zeros(dg, idx - next);   /* O(1) in version 2 */
		dd_digest_block(dg, key.dk_hash, len);
		next = idx + 1;
	}
	if (rc < 0)
		return rc;
	if (var && next < r->sr_size)
		dd_digest_block(dg, NULL, r->sr_size - next);
	if (!var && next < r->sr_blocks)
		dd_digest_zeros(dg, r->sr_blocks - next);
	dd_digest_final(dg, r->sr_size, r->sr_block_size, got);
	if (memcmp(got, r->sr_digest, DD_HASH_SIZE) != 0)
		return dd_err_set(sc->sc_err, DD_ECORRUPT, "its block map does "
				  "not match its content digest");
	return 0;
}

/* A damaged snapshot, its message in sc_err: reported, the first one's
 * message kept, and on to the next snapshot. */
static int dd_scrub_snap_damaged(dd_scrub *sc, const char *name)
{
	if (sc->sc_nbad_snaps++ == 0)
		sc->sc_snap_err = *sc->sc_err;
	if (sc->sc_snap_cb(name, DD_ECORRUPT, sc->sc_err->de_msg,
			   sc->sc_snap_ctx) != 0)
		return dd_err_set(sc->sc_err, DD_ECANCELED,
				  "scrub stopped by its callback");
	return 0;
}

/* A message's text without its DD_E* symbol: a line says it once. */
static const char *dd_scrub_unsym(const char *m)
{
	const char *sym = "DD_ECORRUPT: ";

	return strncmp(m, sym, strlen(sym)) ? m : m + strlen(sym);
}

#define DD_SCRUB_LOST "its record is on a damaged catalog page, so ls " \
	"and get do not see it (it was checked from its manifest); "

/* Pass 3's one report of a snapshot that damaged pages affect: what
 * they did to it, what its check found besides (rc DD_ECORRUPT, the
 * finding in sc_err), and the first such page's message, which names
 * dedup repair. */
static int dd_scrub_map_report(dd_scrub *sc, const char *name,
			       const dd_spage *lost, const dd_srun *run, int rc)
{
	/* room for every part: the line is cut to DD_ERRMSG_MAX once */
	char msg[4 * DD_ERRMSG_MAX], found[DD_ERRMSG_MAX + 2] = "", runs[192] = "";

	if (rc == DD_ECORRUPT)
		snprintf(found, sizeof(found), "%s; ",
			 dd_scrub_unsym(sc->sc_err->de_msg));
	if (run->sr_blocks)
		snprintf(runs, sizeof(runs), "%llu of its blocks, in %llu "
			 "run%s from offset %llu to %llu, have their DDT "
			 "entries on damaged catalog pages and cannot be "
			 "located; ", (unsigned long long)run->sr_blocks,
			 (unsigned long long)run->sr_runs,
			 run->sr_runs == 1 ? "" : "s",
			 (unsigned long long)run->sr_first,
			 (unsigned long long)run->sr_last);
	snprintf(msg, sizeof(msg), "snapshot '%s': %s%s%s%s", name,
		 lost ? DD_SCRUB_LOST : "", runs, found,
		 dd_spage_msg(lost ? lost : run->sr_first_pg));
	dd_err_set_msg(sc->sc_err, DD_ECORRUPT, msg);
	return dd_scrub_snap_damaged(sc, name);
}

/* The whole of snapshot `name`, whose record a damaged page held, as a
 * run of that page's. */
static int dd_scrub_lost_run(dd_scrub *sc, const char *name,
			     const dd_snap_rec *r, const dd_spage *pg)
{
	dd_scrub_page p = {.table = dd_spage_table(pg),
			   .page = dd_spage_pgno(pg), .snapshot = name,
			   .offset = 0, .length = r->sr_size};

	if (sc->sc_page_cb && sc->sc_page_cb(&p, sc->sc_page_ctx) != 0)
		return dd_err_set(sc->sc_err, DD_ECANCELED,
				  "scrub stopped by its callback");
	return 0;
}

/* Pass 3 for one snapshot: lost (its record on a damaged page: r from
 * its manifest) or NULL.  A snapshot whose block map is (partly) on a
 * damaged page is reported, its map not read; any other one's map is
 * checked, past blocks whose DDT entries are on damaged pages. */
static int dd_scrub_map_one(dd_scrub *sc, const char *name,
			    const dd_snap_rec *r, const dd_spage *lost)
{
	bool fixed = sc->sc_store->st_chunker == DD_CHUNKER_FIXED;
	dd_srun run = {.sr_name = name};
	char hit[DD_ERRMSG_MAX];
	dd_bmap_cur *cur = NULL;
	dd_digest *dg = NULL;
	int rc = lost ? dd_scrub_lost_run(sc, name, r, lost) : 0;

	if (rc)
		return rc;
	if (dd_scrub_pages_hit(sc->sc_pages, r, fixed, hit, sizeof(hit))) {
		if (dd_scrub_pages_hit_runs(sc->sc_pages, name, r, fixed,
					    sc->sc_page_cb, sc->sc_page_ctx))
			return dd_err_set(sc->sc_err, DD_ECANCELED,
					  "scrub stopped by its callback");
		dd_err_set(sc->sc_err, DD_ECORRUPT, "snapshot '%s': %s%s",
			   name, lost ? DD_SCRUB_LOST : "", hit);
		return dd_scrub_snap_damaged(sc, name);
	}
	rc = dd_digest_new(&dg, sc->sc_err, sc->sc_store->st_chunker,
			   r->sr_digest_version, r->sr_block_size);
	if (!rc)
		rc = dd_bmap_open(sc->sc_txn, sc->sc_err, r->sr_id, &cur);
	if (!rc) {
		rc = dd_scrub_map_check(sc, dg, cur, r, &run);
		/* the map against the snapshot's manifest, the truth that
		 * repair rebuilds from (one deleted since this scrub began
		 * has none any more: dd_commit_check sees to the set) */
		if (!rc && sc->sc_store->st_mfdir) {
			rc = dd_commit_compare_map(sc->sc_store, sc->sc_err,
						   sc->sc_txn, r->sr_id, name);
			if (rc == DD_ENOENT)
				rc = 0;
		}
	}
	dd_bmap_close(cur);
	dd_digest_free(dg);
	if (rc && rc != DD_ECORRUPT)
		return rc;
	if (lost || run.sr_blocks) {
		int erc = dd_scrub_run_end(sc, &run);

		return erc ? erc : dd_scrub_map_report(sc, name, lost, &run,
							rc);
	}
	if (rc == DD_ECORRUPT) {
		char where[DD_NAME_MAX + 16];

		snprintf(where, sizeof(where), "snapshot '%s'", name);
		dd_err_wrap(sc->sc_err, 0, where, " (damaged metadata: "
			    "run dedup repair)");
	}
	if (rc == DD_ECORRUPT && sc->sc_snap_cb)
		return dd_scrub_snap_damaged(sc, name);
	return rc;
}

static int dd_scrub_map(void *arg, const char *name, const dd_snap_rec *r)
{
	return dd_scrub_map_one(arg, name, r, NULL);
}

/* A published snapshot whose record a damaged page held, kept for
 * passes 2 and 3. */
static int dd_scrub_lost_add(void *arg, const char *name,
			     const dd_snap_rec *rec, const dd_spage *pg)
{
	dd_scrub *sc = arg;

	if (sc->sc_nlost == sc->sc_caplost) {
		size_t n = sc->sc_caplost ? 2 * sc->sc_caplost : 8;
		struct dd_slost *l = dd_realloc(sc->sc_lost, n * sizeof(*l));

		if (!l)
			return dd_err_set(sc->sc_err, DD_ENOMEM,
					  "out of memory");
		sc->sc_lost = l;
		sc->sc_caplost = n;
	}
	snprintf(sc->sc_lost[sc->sc_nlost].sl_name, DD_NAME_MAX + 1, "%s",
		 name);
	sc->sc_lost[sc->sc_nlost].sl_rec = *rec;
	sc->sc_lost[sc->sc_nlost].sl_pg = pg;
	sc->sc_nlost++;
	return 0;
}

/* Pass 2: reports each use of a bad block (sorted first, then searched). */
static int dd_scrub_report_bad(dd_scrub *sc)
{
	bool bmap_pages = dd_scrub_pages_has(sc->sc_pages, "bmap");
	int rc;

	/* sb_key is the first member: sort and search by key */
	qsort(sc->sc_bad.b, sc->sc_bad.n, sizeof(*sc->sc_bad.b), dd_key_cmp);
	rc = dd_snap_walk(sc->sc_txn, sc->sc_err, dd_scrub_snap, sc);
	for (size_t i = 0; !rc && i < sc->sc_nlost; i++)
		rc = dd_scrub_snap(sc, sc->sc_lost[i].sl_name,
				   &sc->sc_lost[i].sl_rec);
	if (!rc && !bmap_pages)
		rc = dd_bmap_walk_all(sc->sc_txn, sc->sc_err, dd_scrub_use, sc);
	/* a map on a damaged page: one snapshot at a time, that one from
	 * its manifest */
	for (size_t i = 0; !rc && bmap_pages && i < sc->sc_nsnap; i++)
		rc = dd_scrub_pages_uses(sc->sc_store, sc->sc_err, sc->sc_txn,
					 sc->sc_pages, sc->sc_ids[i],
					 dd_scrub_use, sc);
	for (size_t i = 0; !rc && i < sc->sc_bad.n; i++)
		if (!sc->sc_bad.b[i].sb_used)
			rc = dd_scrub_report(sc, &sc->sc_bad.b[i], NULL, 0);
	sc->sc_res.bad_blocks = sc->sc_bad.n;
	return rc;
}

/* Pass 4.  The table is keyed by 32 bytes (dd_ddt_key_flat): the count of
 * block-map entries whose reference the DDT counts, and this bit when an
 * uncounted one names the key too. */
#define DD_SCRUB_UNCOUNTED ((uint64_t)1 << 63)

static int dd_scrub_ref_count(void *arg, uint64_t id, uint64_t idx,
			      const dd_ddt_key *key)
{
	dd_scrub *sc = arg;
	uint8_t k[DD_HASH_SIZE];
	uint64_t n = 0;
	int rc;

	if (!dd_defer_set_counted(&sc->sc_defer, id, idx, key))
		return 0;   /* a deferring writer's, not applied yet */
	dd_ddt_key_flat(key, k);
	rc = dd_hmap_get(sc->sc_refs, sc->sc_err, k, &n);
	if (rc && rc != DD_ENOENT)
		return rc;
	if (dd_ucnt_has(&sc->sc_ucnt, id, idx)) {
		/* not counted, but its entry must count one (invariant U) */
		sc->sc_ucnt_seen++;
		return dd_hmap_put(sc->sc_refs, sc->sc_err, k,
				   n | DD_SCRUB_UNCOUNTED);
	}
	return dd_hmap_put(sc->sc_refs, sc->sc_err, k, n + 1);
}

static int dd_scrub_ref_check(void *arg, const dd_ddt_key *key,
			      const dd_ddt_ent *e)
{
	dd_scrub *sc = arg;
	uint8_t k[DD_HASH_SIZE];
	uint64_t n = 0;
	int rc;

	dd_ddt_key_flat(key, k);
	rc = dd_hmap_get(sc->sc_refs, sc->sc_err, k, &n);
	if (rc && rc != DD_ENOENT)
		return rc;
	if ((n & DD_SCRUB_UNCOUNTED) && e->de_refcnt == 0)
		sc->sc_ucnt_dead++;
	n &= ~DD_SCRUB_UNCOUNTED;
	if (n != e->de_refcnt && sc->sc_nwrong++ == 0) {
		sc->sc_wrong_key = *key;
		sc->sc_wrong_refcnt = e->de_refcnt;
		sc->sc_wrong_refs = n;
	}
	return 0;
}

static int dd_scrub_refs(dd_scrub *sc)
{
	char hex[2 * 8 + 1];
	/* 64 MiB in RAM (under a million blocks), spilled to $TMPDIR beyond */
	int rc = dd_hmap_new(&sc->sc_refs, sc->sc_err, (uint64_t)64 << 20,
			     NULL);

	if (!rc)
		rc = dd_defer_set_load(sc->sc_txn, sc->sc_err, &sc->sc_defer);
	if (!rc)
		rc = dd_ucnt_load(sc->sc_txn, sc->sc_err, 0, &sc->sc_ucnt);
	if (!rc)
		rc = dd_bmap_walk_all(sc->sc_txn, sc->sc_err,
				      dd_scrub_ref_count, sc);
	if (!rc)
		rc = dd_ddt_walk(sc->sc_txn, sc->sc_err, dd_scrub_ref_check, sc);
	if (!rc && sc->sc_ucnt_seen != dd_ucnt_count(&sc->sc_ucnt))
		rc = dd_err_set(sc->sc_err, DD_ECORRUPT, "%llu uncounted "
				"block-map position(s) name no block (damaged "
				"metadata)", (unsigned long long)
				(dd_ucnt_count(&sc->sc_ucnt) -
				 sc->sc_ucnt_seen));
	if (!rc && sc->sc_ucnt_dead)
		rc = dd_err_set(sc->sc_err, DD_ECORRUPT, "%llu ddt entr%s "
				"count no reference, but uncounted block-map "
				"entries name them (damaged metadata)",
				(unsigned long long)sc->sc_ucnt_dead,
				sc->sc_ucnt_dead == 1 ? "y" : "ies");
	dd_defer_set_free(&sc->sc_defer);
	dd_ucnt_free(&sc->sc_ucnt);
	dd_hmap_free(sc->sc_refs);
	sc->sc_refs = NULL;
	if (rc || sc->sc_nwrong == 0)
		return rc;
	for (int i = 0; i < 8; i++)
		snprintf(hex + 2 * i, 3, "%02x", sc->sc_wrong_key.dk_hash[i]);
	return dd_err_set(sc->sc_err, DD_ECORRUPT, "%llu ddt entr%s count the "
			  "wrong number of references, e.g. block %s: %llu "
			  "counted, %llu block-map entries (damaged metadata)",
			  (unsigned long long)sc->sc_nwrong,
			  sc->sc_nwrong == 1 ? "y" : "ies", hex,
			  (unsigned long long)sc->sc_wrong_refcnt,
			  (unsigned long long)sc->sc_wrong_refs);
}

/* Damaged pages: the transaction passes over them, each is reported,
 * and the snapshots whose records they held are found in the manifests
 * (scrub_pages.c). */
static int dd_scrub_pages_begin(dd_scrub *sc)
{
	dd_scrub_pages *sp = sc->sc_pages;
	int rc;

	if (!sp)
		return 0;
	rc = dd_scrub_pages_skip(sp, sc->sc_txn, sc->sc_err);
	if (!rc && dd_scrub_pages_report(sc->sc_store, sp, sc->sc_txn,
					 sc->sc_page_cb, sc->sc_page_ctx))
		rc = dd_err_set(sc->sc_err, DD_ECANCELED,
				"scrub stopped by its callback");
	if (!rc)
		rc = dd_scrub_pages_lost(sc->sc_store, sc->sc_err, sp,
					 dd_scrub_lost_add, sc);
	return rc;
}

static int dd_scrub_run(dd_scrub *sc)
{
	int rc = dd_scrub_pages_begin(sc);

	if (!rc && sc->sc_progress)
		rc = dd_packs_walk(sc->sc_txn, sc->sc_err, dd_scrub_pack_bytes,
				   sc);
	if (!rc)
		rc = dd_ddt_walk(sc->sc_txn, sc->sc_err, dd_scrub_ddt, sc);
	if (!rc && sc->sc_n)
		rc = dd_scrub_round(sc);
	/* every block read: the rest reads the catalog only */
	if (!rc)
		rc = dd_scrub_progress(sc, sc->sc_total);
	if (!rc && sc->sc_bad.n)
		rc = dd_scrub_report_bad(sc);
	if (!rc)
		rc = dd_snap_walk(sc->sc_txn, sc->sc_err, dd_scrub_map, sc);
	for (size_t i = 0; !rc && i < sc->sc_nlost; i++)
		rc = dd_scrub_map_one(sc, sc->sc_lost[i].sl_name,
				      &sc->sc_lost[i].sl_rec,
				      sc->sc_lost[i].sl_pg);
	/* counts against damaged maps would say nothing more */
	if (!rc && sc->sc_nbad_snaps)
		return dd_err_set(sc->sc_err, DD_ECORRUPT, "%llu snapshot%s "
				  "with damaged metadata, e.g. %s",
				  (unsigned long long)sc->sc_nbad_snaps,
				  sc->sc_nbad_snaps == 1 ? "" : "s",
				  dd_scrub_unsym(sc->sc_snap_err.de_msg));
	/* damaged pages that affect no snapshot (a writer's pending map,
	 * dead DDT entries, packs' ends...): the counts cannot be checked
	 * either */
	if (!rc && sc->sc_pages) {
		size_t n = dd_scrub_pages_count(sc->sc_pages);

		return dd_err_set(sc->sc_err, DD_ECORRUPT, "%zu damaged "
				  "catalog page%s, e.g. %s", n,
				  n == 1 ? "" : "s",
				  dd_scrub_unsym(sc->sc_pages_err.de_msg));
	}
	if (!rc)
		rc = dd_scrub_refs(sc);
	if (!rc && sc->sc_bad.n)
		rc = dd_err_set(sc->sc_err, DD_ECHECKSUM,
				"scrub found %zu bad block%s", sc->sc_bad.n,
				sc->sc_bad.n == 1 ? "" : "s");
	return rc;
}

/* One block's flag, in the mark's write transaction: only while its
 * entry still names the record scrub read (a writer may have healed it,
 * gc moved it, since). */
static int dd_scrub_flag(dd_txn *txn, dd_err *err, const dd_sblk *b,
			 bool damaged)
{
	dd_ddt_ent e;
	int rc = dd_ddt_get(txn, err, &b->sb_key, &e);

	if (rc == DD_ENOENT)
		return 0;
	if (rc || (e.de_flags & DD_DDE_MISSING) ||
	    e.de_pack != b->sb_ent.de_pack ||
	    e.de_offset != b->sb_ent.de_offset ||
	    !(e.de_flags & DD_DDE_DAMAGED) == !damaged)
		return rc;
	e.de_flags = (uint16_t)(damaged ? e.de_flags | DD_DDE_DAMAGED
				       : e.de_flags & ~DD_DDE_DAMAGED);
	return dd_ddt_put(txn, err, &b->sb_key, &e);
}

/* Is the DDT's unflagged claim (catalog/db.h) withdrawn, so that a
 * census would restore it?  Not in a catalog that has never had it: a
 * scrub that finds nothing leaves an older build's store exactly as it
 * was. */
static bool dd_scrub_withdrawn(dd_store *s)
{
	bool withdrawn = false;
	dd_txn *txn;
	dd_err err;

	if (!dd_txn_begin(s->st_db, &err, false, &txn)) {
		if (dd_ddt_unflagged_withdrawn(txn, &err, &withdrawn))
			withdrawn = false;
		dd_txn_abort(txn);
	}
	return withdrawn;
}

/* Records what scrub found (format/ddt.md §3): DAMAGED on the entries of
 * bad records -- damage, not an I/O error or a lost block, which has its
 * own flag --, cleared on flagged ones that read well; so a writer that
 * brings one of these blocks stores it anew.  Under the store's lock,
 * shared like any writer's, in one short write transaction.  A scrub that
 * flags nothing also takes a census of the flags when the unflagged claim
 * is withdrawn (a heal or a re-put cleared them, or an older build
 * wrote): re-puts then leave their references uncounted without looking
 * each entry up (store/wucnt.c).  Skipped (nothing to say) in a
 * read-only handle, or while repair has the store to itself: it rebuilds
 * the DDT anyway. */
static int dd_scrub_mark(dd_scrub *sc)
{
	dd_store *s = sc->sc_store;
	dd_txn *txn = NULL;
	bool census;
	int fd = -1, rc;

	if (s->st_opts.readonly ||
	    sc->sc_pages)   /* nothing is written to a damaged catalog */
		return 0;
	census = !sc->sc_bad.n && dd_scrub_withdrawn(s);
	if (!sc->sc_bad.n && !sc->sc_good.n && !census)
		return 0;
	rc = dd_lock_take(s, sc->sc_err, "lock", false, &fd);
	if (rc == DD_EBUSY)
		return 0;
	if (!rc)
		rc = dd_txn_begin(s->st_db, sc->sc_err, true, &txn);
	for (size_t i = 0; !rc && i < sc->sc_bad.n; i++) {
		const dd_sblk *b = &sc->sc_bad.b[i];

		if (b->sb_rc == DD_ECHECKSUM || b->sb_rc == DD_ECORRUPT)
			rc = dd_scrub_flag(txn, sc->sc_err, b, true);
	}
	for (size_t i = 0; !rc && i < sc->sc_good.n; i++)
		rc = dd_scrub_flag(txn, sc->sc_err, &sc->sc_good.b[i], false);
	if (!rc && census)
		rc = dd_ddt_census(txn, sc->sc_err, NULL);
	if (txn && rc)
		dd_txn_abort(txn);
	else if (txn)
		rc = dd_txn_commit(txn, sc->sc_err);
	dd_lock_drop(fd);
	return rc;
}

int dd_store_scrub(dd_store *s, dd_scrub_cb cb, void *ctx,
		   dd_scrub_result *out)
{
	dd_scrub_opts o = DD_SCRUB_OPTS_INIT;

	o.bad = cb;
	o.bad_ctx = ctx;
	return dd_store_scrub_ext(s, &o, out);
}

int dd_store_scrub_ext(dd_store *s, const dd_scrub_opts *opts,
		       dd_scrub_result *out)
{
	dd_err err = {0};
	dd_scrub *sc;
	int rc;

	if (!s)
		return DD_EINVAL;
	if (opts && (opts->version == 0 ||
		     opts->version > DD_SCRUB_OPTS_VERSION))
		return dd_store_failf(s, DD_EINVAL, "dd_scrub_opts version %u "
				      "not supported", opts->version);
	sc = dd_calloc(1, sizeof(*sc));
	if (!sc)
		return dd_store_failf(s, DD_ENOMEM, "out of memory");
	sc->sc_store = s;
	sc->sc_err = &err;
	if (opts) {
		sc->sc_cb = opts->bad;
		sc->sc_ctx = opts->bad_ctx;
		sc->sc_progress = opts->progress;
		sc->sc_progress_ctx = opts->progress_ctx;
		if (opts->version >= 2) {
			sc->sc_snap_cb = opts->damaged_snapshot;
			sc->sc_snap_ctx = opts->damaged_snapshot_ctx;
		}
		if (opts->version >= 3) {
			sc->sc_page_cb = opts->damaged_page;
			sc->sc_page_ctx = opts->damaged_page_ctx;
		}
	}
	/* with damaged_snapshot, past damaged pages of libdedup's tables:
	 * each snapshot one affects is named in pass 3 */
	if (sc->sc_snap_cb)
		rc = dd_scrub_pages_check(s, &err, &sc->sc_pages);
	else
		rc = dd_db_check(s->st_db, &err);
	if (!rc && sc->sc_pages)
		sc->sc_pages_err = err;
	/* the catalog's snapshots are the manifests' (a catalog that went
	 * back in time lacks the last ones) */
	if (!rc)
		rc = dd_commit_check_past(s, &err, sc->sc_pages);
	if (!rc)
		rc = dd_txn_begin(s->st_db, &err, false, &sc->sc_txn);
	if (!rc) {
		dd_err merr = {0};
		int mrc;

		rc = dd_scrub_run(sc);
		dd_txn_abort(sc->sc_txn);
		/* what it found, even when it stopped later (the report went
		 * out through the callback already) */
		sc->sc_err = &merr;
		mrc = dd_scrub_mark(sc);
		if (mrc && (!rc || rc == DD_ECHECKSUM)) {
			err = merr;
			rc = mrc;
		}
	}
	if (out)
		*out = sc->sc_res;
	dd_free(sc->sc_bad.b);
	dd_free(sc->sc_good.b);
	dd_free(sc->sc_ids);
	dd_free(sc->sc_bs);
	dd_free(sc->sc_names);
	dd_scrub_pages_free(sc->sc_pages);
	dd_free(sc->sc_lost);
	dd_free(sc);
	return rc ? dd_store_fail(s, &err) : 0;
}
