/*
 * store_internal.h -- what the files of store/ share (and tests reach).
 *
 * A store directory (format/store.md §1):
 *
 *   STORE/DEDUP          text: "libdedup store" / "format 1"; written last
 *                        at create, so a half-created store is not a store
 *   STORE/lock           flock(2): shared by whoever changes the store,
 *                        exclusive for repair (lock.c)
 *   STORE/gc.lock        flock(2): one gc at a time
 *   STORE/writers/ID     a running writer's registration (lock.c)
 *   STORE/db/            the LMDB environment (catalog/db.h)
 *   STORE/packs/NNNNNNNN.pack append-only block records (pack/pack.h)
 *
 * Write order, the invariant behind crash safety (DESIGN.md #1): pack
 * records are appended and fdatasync'ed, then the LMDB transaction that
 * references them (DDT entries, block maps, the pack's committed end)
 * commits.  Whoever enters the store to change it recovers first
 * (recover.c): rolls back snapshots left pending by a killed writer,
 * truncates pack tails past their committed end and removes pack files no
 * commit ever recorded -- never what a live writer holds.
 */
#ifndef DD_STORE_INTERNAL_H
#define DD_STORE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "dedup.h"
#include "common/err.h"
#include "common/pool.h"
#include "common/vdir.h"
#include "catalog/db.h"
#include "chunk/chunk.h"
#include "hash/hash.h"
#include "pack/pack.h"
#include "store/replica.h"
#include "store/rstore.h"
#include "cache/cache.h"

/* Format 2 added the manifests (format/manifest.md) and the options in
 * DEDUP; this build reads format 1 and upgrades it at the first write.
 * Format 3 is format 2 with a chunker other than fixed (format/store.md
 * §1): only such stores are written as format 3, so that builds that know
 * no chunker refuse them whole, and stores of fixed blocks stay format 2,
 * readable by those builds. */
#define DD_STORE_FORMAT 4
#define DD_STORE_FORMAT_FIXED 4
/* Format 4 is format 2 whose snapshots may have content digests of
 * version 2 (format/store.md §1, §6): new stores of fixed blocks are made
 * as format 4, and a format-2 store becomes format 4 before its first
 * such snapshot, so that a build that knows only version 1 refuses the
 * store whole rather than find its snapshots damaged. */
#define DD_STORE_FORMAT_V1ONLY 2
#define DD_STORE_FORMAT_VAR 3
/* Does DEDUP of this format name a chunker (format 3 only)? */
#define DD_STORE_FORMAT_HAS_CHUNKER(f) ((f) == DD_STORE_FORMAT_VAR)
#define DD_STORE_MAGIC_LINE "libdedup store"
/* Packs roll over past this size; small enough that gc rewrites little.
 * A pack object in RADOS stays smaller, 32 MiB: Ceph refuses objects past
 * 128 MiB by default, and tests/bench/README.md "bench_rados.sh" measured
 * no gain from larger ones. */
#define DD_PACK_MAX_BYTES ((uint64_t)256 << 20)
#define DD_PACK_MAX_BYTES_RADOS ((uint64_t)32 << 20)
#define dd_store_pack_max(s) \
	((s)->st_rstore ? DD_PACK_MAX_BYTES_RADOS : DD_PACK_MAX_BYTES)

/* Scratch for one thread that reads or writes blocks. */
typedef struct dd_scratch {
	dd_codec_ctx *sc_codec;   /* compress at the store's level; decompress */
	dd_hasher *sc_hasher;
	uint8_t *sc_rbuf;         /* a whole record: header + max payload */
	size_t sc_rbuf_len;
	uint8_t *sc_dbuf;         /* one decompressed block */
} dd_scratch;

struct dd_store {
	char *st_path;
	dd_rstore *st_rstore;      /* a store in a RADOS pool, else NULL:
				      st_path is then its local catalog */
	dd_vdir *st_packdir;       /* STORE/packs */
	dd_vdir *st_mfdir;         /* STORE/manifests; NULL in format 1 */
	int st_format;             /* of the DEDUP file (format/store.md §1) */
	dd_db *st_db;
	dd_open_opts st_opts;

	/* Store options, read from meta at open (format/store.md §2). */
	uint32_t st_block_size;    /* fixed: the size; fastcdc: the average */
	int st_chunker;            /* enum dd_chunker */
	uint32_t st_block_max;     /* its longest block (dd_chunker_max) */
	int st_verify;
	int st_compress;
	int st_level;
	int st_hash_kind;

	pthread_mutex_t st_lock;   /* guards the fields below */
	dd_err st_err;
	dd_pack **st_packs;        /* read handles by pack id, lazily opened */
	uint32_t st_npacks;

	/* The pool and its per-worker scratch belong to whoever holds
	 * st_pool_lock; a thread that cannot take it works alone. */
	pthread_mutex_t st_pool_lock;
	dd_pool *st_pool;
	dd_scratch *st_scratch;    /* st_nscratch = dd_pool_width() entries */
	unsigned st_nscratch;

	dd_cache *st_cache;        /* L1 + L2 (cache/cache.h); always set
				      once open, also counts pack reads */
};

/* ---- layout.c: the DEDUP file and meta -----------------------------------*/

#define DD_STORE_NOPTS 6
#define DD_STORE_OPT_CHUNKER 5
/* What DEDUP says (format/store.md §1); sc_opt as meta's option keys:
 * block_size, verify, compress, compress_level, hash, chunker (format 3;
 * 0, fixed, when absent). */
typedef struct dd_store_conf {
	int sc_format;
	uint64_t sc_opt[DD_STORE_NOPTS];
	unsigned sc_have;          /* bit i: sc_opt[i] was given */
	bool sc_have_uuid;
	uint8_t sc_uuid[16];
} dd_store_conf;

int dd_store_conf_read(dd_err *err, const char *path, dd_store_conf *c);
/* The same from the text of a DEDUP file (changed by the parse); path
 * names it in messages. */
int dd_store_conf_parse(dd_err *err, const char *path, char *text,
			dd_store_conf *c);
int dd_store_conf_write(dd_err *err, const char *path, const dd_store_conf *c);
int dd_store_conf_check(dd_err *err, const char *path, const dd_store_conf *c);
int dd_store_conf_new_uuid(dd_err *err, dd_store_conf *c);
/* meta's format, features, options, counters and identity. */
int dd_store_meta_init(dd_txn *txn, dd_err *err, const dd_store_conf *c,
		       uint64_t pack_next, uint64_t snap_next);
/* meta's options and identity (sc_format is not set). */
int dd_store_meta_read(dd_txn *txn, dd_err *err, const char *path,
		       dd_store_conf *out);

/* ---- lock.c: the store lock, the gc lock, the running writers --------*/

/* Takes DIR/<name> shared or exclusive, waiting not at all, for ever, or
 * up to timeout_ms (> 0): *fd holds it until dd_lock_drop.  An exclusive
 * holder writes who it is into the file; DD_EBUSY names that holder, or
 * for STORE/lock the running writers. */
int dd_lock_take_at(dd_err *err, const char *dir, const char *name,
		    bool exclusive, bool wait, unsigned timeout_ms, int *fd);
/* The same within the handle's wait rules (wait_for_lock,
 * lock_timeout_ms). */
int dd_lock_take(dd_store *s, dd_err *err, const char *name, bool exclusive,
		 int *fd);
void dd_lock_drop(int fd);
/* A running writer of snapshot id (or a deleter: start UINT64_MAX),
 * locked by it until dd_writer_unregister.  start: no block its lookups
 * found usable dies at or before it (gc keeps later deaths). */
int dd_writer_register(dd_store *s, dd_err *err, uint64_t id, uint64_t start,
		       int *fd);
void dd_writer_set_start(int fd, uint64_t start);
void dd_writer_unregister(dd_store *s, uint64_t id, int fd);
/* Does the writer of snapshot id run (its entry locked)? */
bool dd_writer_alive(dd_store *s, uint64_t id);
/* Who the running writer of id is ("pid N on HOST since T"), or "". */
void dd_writer_who(dd_store *s, uint64_t id, char *buf, size_t len);
/* The smallest start of the running writers (UINT64_MAX: none). */
int dd_writers_min_start(dd_store *s, dd_err *err, uint64_t *min);
/* Appends the running writers, who they are, to err's message. */
void dd_writers_name(const char *dir, dd_err *err);

/* ---- repair.c ------------------------------------------------------------*/

/* The catalog of local store directory `local` rebuilt from the packs
 * and manifests of the given directories (a RADOS store's pool: rstore.c),
 * moving nothing aside and removing nothing there. */
int dd_repair_catalog(dd_err *err, const char *local, dd_vdir *packs,
		      dd_vdir *manifests, const dd_repair_opts *opts,
		      dd_repair_result *out);

/* ---- store.c -----------------------------------------------------------*/

/* dd_store_fail, dd_store_failf: replica.h */

int dd_store_create_kind(dd_store **out, const char *path,
			 const dd_create_opts *opts, const dd_open_opts *oopts,
			 int hash_kind);

/* Enters the store to change it: STORE/lock shared in *lockfd (DD_EBUSY
 * naming the holder while repair has it, or waits: wait_for_lock), a
 * store of format 1 upgraded first, then recovery (recover.c).
 * dd_store_leave lets go. */
int dd_store_enter(dd_store *s, dd_err *err, int *lockfd);
/* Before dd_store_enter, by a writer of a snapshot whose content digest
 * is of version 2: a store of fixed blocks of format 1 or 2 becomes
 * format 4 (format/store.md §1) with STORE/lock exclusive -- DEDUP
 * rewritten whole, before any such snapshot exists, so a crash leaves a
 * format-4 store without one.  DD_ENOTSUP in a RADOS store of format 2;
 * DD_EBUSY as dd_lock_take.  Nothing to do in other stores. */
int dd_store_digest2(dd_store *s, dd_err *err);
void dd_store_leave(dd_store *s, int lockfd);
/* Rolls back dead writers' pending snapshots, reaps doomed packs no
 * reader needs, cuts pack tails and removes packs no commit recorded --
 * never anything a live writer holds. */
int dd_store_recover(dd_store *s, dd_err *err);

/* Unlinks the packs gc doomed that no live reader can still need, and
 * forgets them; *freed gets the bytes.  Safe from any handle at any
 * time: the packs are forgotten in one write txn, then unlinked. */
int dd_store_reap(dd_store *s, dd_err *err, uint64_t *freed);

/* space.c: giving space back on a full file system.  Punches the records
 * of locked pack p that no DDT entry names, below its committed end
 * (format/pack.md §6.1); the caller makes sure no reader older than the
 * commit that freed them is left.  DD_ENOTSUP when the file system cannot
 * punch. */
int dd_space_punch_pack(dd_store *s, dd_err *err, dd_pack *p,
			uint64_t *punched);
/* STORE/reserve (format/store.md §1): made by create and after gc, when
 * there is room (failures ignored); released by rm and gc when a commit
 * fails with DD_ENOSPC -- true if there was one to release. */
#define DD_RESERVE_NAME "reserve"
#define DD_RESERVE_BYTES ((off_t)4 << 20)
void dd_space_reserve_make(dd_store *s);
bool dd_space_reserve_release(dd_store *s);

/* A read handle of pack id, owned by the store (valid until close). */
int dd_store_pack(dd_store *s, dd_err *err, uint32_t id, dd_pack **out);

int dd_scratch_init(dd_scratch *sc, dd_err *err, const dd_store *s);
/* The same without a store handle (repair has none). */
int dd_scratch_init_for(dd_scratch *sc, dd_err *err, int compress, int level,
			int hash_kind, uint32_t block_size);
void dd_scratch_fini(dd_scratch *sc);

/* ---- writer.c ----------------------------------------------------------*/

/* Logical bytes between a writer's intermediate commits (tests lower it). */
extern uint64_t dd_writer_commit_bytes;
/* Test hook: gc calls it with dd_gc_test_ctx after its read phase summed
 * the packs' live bytes and before it takes their locks. */
extern void (*dd_gc_test_after_sum)(void *ctx);
extern void *dd_gc_test_ctx;
/* A deferring writer (store/defer.h) flushes its DDT changes once it holds
 * max(dd_writer_defer_min, min(DDT entries / 2, dd_writer_defer_max)) ops,
 * dd_writer_flush_keys distinct keys per write transaction, or more when
 * they fall on fewer leaf pages (dd_writer_flush_leaf, wops.c; 0: no
 * more), dd_writer_run_keys when they are appended to a sorted run;
 * defer_min 0: no writer defers.  Tests lower them. */
extern uint64_t dd_writer_defer_min, dd_writer_defer_max;
extern uint32_t dd_writer_flush_keys, dd_writer_flush_leaf, dd_writer_run_keys;
/* A flush leaves references to entries alive in its transaction
 * uncounted (catalog/ucnt.h); false: it counts every one, as before. */
extern bool dd_writer_uncounted;
/* Runs whose entries a flush checked on the pool (wucnt.c), all flushes
 * of the process together (tests). */
extern _Atomic uint64_t dd_wub_prechecked;
/* Key runs a flush left uncounted without looking their entries up: LREF
 * ops of a source still committed, no entry flagged (store/wucnt.c) */
extern _Atomic uint64_t dd_wub_unlooked;

/* ---- reader.c ----------------------------------------------------------*/

/* Read-ahead: 0 when the caller spends time between reads (the default),
 * 1 always, -1 never (tests). */
extern int dd_reader_ra_mode;

/* ---- block.c -----------------------------------------------------------*/

/* Reads the block of (key, ent) into dst (ent->de_lsize bytes) from its
 * pack and checks it against key's hash: DD_ECHECKSUM rather than wrong
 * bytes.  Never through the caches: scrub must see the packs. */
int dd_block_read(dd_store *s, dd_err *err, dd_scratch *sc,
		  const dd_ddt_key *key, const dd_ddt_ent *ent, void *dst);

/* The same for snapshot reads: L1, then L2 (checked against the hash),
 * then the pack, whose block then enters L1.  flags: DD_CACHE_SEQ when
 * the block belongs to a long sequential read, which L1 does not take
 * (cache/cache.c). */
int dd_block_read_cached(dd_store *s, dd_err *err, dd_scratch *sc,
			 const dd_ddt_key *key, const dd_ddt_ent *ent,
			 void *dst, unsigned flags);

/* One whole block of a dd_block_read_list: in its key, entry, where it
 * goes and its cache flags; out its result, the message in *br_err. */
typedef struct dd_block_req {
	const dd_ddt_key *br_key;
	const dd_ddt_ent *br_ent;
	void *br_dst;             /* br_ent->de_lsize bytes */
	unsigned br_flags;
	int br_rc;
	dd_err *br_err;
} dd_block_req;

/* The most blocks of one dd_block_read_list: the AVX-512 lanes. */
#define DD_BLOCK_LIST_MAX 16

/* dd_block_read_cached of req[0..n), n <= DD_BLOCK_LIST_MAX, the blocks
 * read from their packs hashed as one list.  Each gets its own result. */
void dd_block_read_list(dd_store *s, dd_scratch *sc, dd_block_req *req,
			size_t n);

/* ---- caches.c ----------------------------------------------------------*/

/* Creates st_cache from STORE/cache.conf and the open options (device
 * problems are warnings, not errors); closes it. */
int dd_store_cache_open(dd_store *s, dd_err *err);
void dd_store_cache_close(dd_store *s);

/* ---- commit.c: manifests are the truth, the catalog follows -------------*/

/* A sorted set of snapshot ids. */
typedef struct dd_idset {
	uint64_t *is_ids;
	size_t is_n, is_cap;
} dd_idset;
bool dd_idset_has(const dd_idset *set, uint64_t id);
int dd_idset_add(dd_err *err, dd_idset *set, uint64_t id);
/* qsort's comparison of two uint64_t ids */
int dd_id_cmp(const void *a, const void *b);

/* The manifests directory's ids by state (enum dd_manifest_state). */
typedef struct dd_mfstate {
	dd_idset ms_set[3];
} dd_mfstate;
int dd_mfstate_read(dd_store *s, dd_err *err, dd_mfstate *ms);
void dd_mfstate_free(dd_mfstate *ms);
/* Does manifests/ID exist in this state (enum dd_manifest_state)? */
bool dd_manifest_present(const dd_store *s, uint64_t id, int state);

/* The pending writer of snapshot name whose manifest is published (one
 * committed, not yet in the catalog), by a walk of the few pending. */
int dd_pend_find_published(const dd_store *s, dd_txn *txn, dd_err *err,
			   const char *name, uint64_t *id);
/* A snapshot record from its manifest header. */
struct dd_manifest_hdr;
void dd_manifest_snap_rec(dd_snap_rec *rec, const struct dd_manifest_hdr *h);

/* The writer's commit: manifests/ID.snap from the block map of rec's id as
 * txn sees it (checked against rec's digest), durable and published. */
int dd_commit_publish(dd_store *s, dd_err *err, dd_txn *txn, const char *name,
		      const dd_snap_rec *rec);
/* The same in two steps: manifests/ID.tmp written and durable (*mw, for
 * dd_manifest_write_free once published or given up: it removes an
 * unpublished ID.tmp) -- any thread, its own txn --; then published. */
struct dd_manifest_writer;
int dd_commit_manifest(dd_store *s, dd_err *err, dd_txn *txn,
		       const char *name, const dd_snap_rec *rec,
		       struct dd_manifest_writer **mw);
int dd_commit_publish_written(dd_store *s, dd_err *err, uint64_t id);
/* Takes a publication back when the catalog commit after it failed. */
void dd_commit_unpublish(dd_store *s, uint64_t id);
/* rm: ID.snap -> ID.del (the deletion), undone if the catalog commit
 * fails; _end removes ID.del once the catalog has dropped the snapshot. */
int dd_commit_delete_begin(dd_store *s, dd_err *err, uint64_t id);
void dd_commit_delete_undo(dd_store *s, uint64_t id);
void dd_commit_delete_end(dd_store *s, uint64_t id);

/* scrub_pages.c: damaged pages of the catalog, for scrub.  _check runs
 * the whole-file check (dd_db_check_pages): 0 and *out NULL when nothing
 * is damaged; 0 and *out the damaged pages when all of them are pages of
 * libdedup's tables (scrub goes on past them); else the check's error. */
typedef struct dd_scrub_pages dd_scrub_pages;
typedef struct dd_spage dd_spage;    /* one damaged page */
int dd_scrub_pages_check(dd_store *s, dd_err *err, dd_scrub_pages **out);
void dd_scrub_pages_free(dd_scrub_pages *sp);
size_t dd_scrub_pages_count(const dd_scrub_pages *sp);
/* Makes txn pass over every damaged page's keys (dd_txn_skip). */
int dd_scrub_pages_skip(const dd_scrub_pages *sp, dd_txn *txn, dd_err *err);
/* Is a page of table ("bmap", ...) damaged? */
bool dd_scrub_pages_has(const dd_scrub_pages *sp, const char *table);
/* The damaged page of table whose keys' range holds key, or NULL. */
const dd_spage *dd_scrub_pages_find(const dd_scrub_pages *sp,
				    const char *table, const void *key,
				    size_t klen);
uint64_t dd_spage_pgno(const dd_spage *pg);
const char *dd_spage_table(const dd_spage *pg);
/* Its check's line, without the DD_ECORRUPT symbol. */
const char *dd_spage_msg(const dd_spage *pg);
/* fn once for each damaged page: what it held, what that means and the
 * way out (dd_scrub_page, snapshot NULL).  DD_ECANCELED when fn stops. */
int dd_scrub_pages_report(dd_store *s, const dd_scrub_pages *sp,
			  dd_txn *txn, dd_scrub_page_cb fn, void *ctx);
/* Could the catalog's record of published snapshot id be on a damaged
 * page -- the id a pending writer's on a damaged `pend` page, or its
 * name (its manifest's) a record on a damaged `snap` page?  1 with *pg
 * the page, 0, or an error. */
int dd_scrub_pages_unseen(dd_store *s, dd_err *err, const dd_scrub_pages *sp,
			  uint64_t id, const dd_spage **pg);
/* fn for each published snapshot whose record a damaged `snap` page
 * held, with the record its manifest gives. */
typedef int (*dd_scrub_lost_fn)(void *ctx, const char *name,
				const dd_snap_rec *rec, const dd_spage *pg);
int dd_scrub_pages_lost(dd_store *s, dd_err *err, const dd_scrub_pages *sp,
			dd_scrub_lost_fn fn, void *ctx);
/* Does a damaged page hold part of r's block map?  msg: which offsets,
 * how many pages, the first one's message. */
bool dd_scrub_pages_hit(const dd_scrub_pages *sp, const dd_snap_rec *r,
			bool fixed, char *msg, size_t len);
/* fn for each damaged page that holds part of r's block map, with the
 * bytes of snapshot `name` whose entries it held. */
int dd_scrub_pages_hit_runs(const dd_scrub_pages *sp, const char *name,
			    const dd_snap_rec *r, bool fixed,
			    dd_scrub_page_cb fn, void *ctx);
/* fn for each block of snapshot id, as dd_bmap_walk_all calls it: from
 * its block map, or from its manifest when the map is on a damaged page
 * (sp may be NULL). */
int dd_scrub_pages_uses(dd_store *s, dd_err *err, dd_txn *txn,
			const dd_scrub_pages *sp, uint64_t id,
			dd_bmap_walk_fn fn, void *ctx);

/* DD_ECORRUPT, naming `dedup repair`, when the catalog and the manifests
 * disagree beyond what a crash leaves (format/manifest.md §7). */
int dd_commit_check(dd_store *s, dd_err *err);
/* ... for scrub, past damaged pages sp (may be NULL): their keys are not
 * read, and a published snapshot whose record may be on one of them
 * (dd_scrub_pages_unseen) is not held against the catalog. */
int dd_commit_check_past(dd_store *s, dd_err *err, const dd_scrub_pages *sp);
/* Brings the catalog up to the manifests after a crash, for writers and
 * rm that are gone, refusing (as dd_commit_check) a catalog that is older
 * or damaged. */
int dd_commit_recover(dd_store *s, dd_err *err);
/* A new snapshot id must name nothing yet: no block map, no pending
 * writer, no manifest.  A damaged or older snap.next that hands out a used
 * id is DD_ECORRUPT here, before anything is written under it (a rollback
 * of the failed writer would drop the other snapshot's map). */
int dd_commit_id_unused(dd_store *s, dd_err *err, dd_txn *txn, uint64_t id);
/* With the store to itself, a store of format 1: writes the manifests of its
 * snapshots and its options into DEDUP, then makes it format 2. */
int dd_commit_upgrade(dd_store *s, dd_err *err);
/* Compares snapshot id's block map (txn's view) with its manifest, entry
 * by entry: DD_ECORRUPT naming the first block that differs, DD_ENOENT
 * when there is no manifest. */
int dd_commit_compare_map(dd_store *s, dd_err *err, dd_txn *txn, uint64_t id,
			  const char *name);

/* Committed snapshots as the manifests say: the catalog's, without those
 * being deleted, with those published but not yet recorded. */
int dd_store_snap_get(dd_store *s, dd_err *err, dd_txn *txn, const char *name,
		      dd_snap_rec *out);
int dd_store_snap_walk(dd_store *s, dd_err *err, dd_txn *txn,
		       dd_snap_walk_fn fn, void *ctx);

#endif
