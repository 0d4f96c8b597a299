/*
 * store_internal.h -- what the files of store/ share (and tests reach).
 *
 * A store directory (format/store.md §1):
 *
 *   STORE/DEDUP          text: "libdedup store" / "format 1"; written last
 *                        at create, so a half-created store is not a store
 *   STORE/lock           flock(2) target: the single-writer lock
 *   STORE/db/            the LMDB environment (catalog/db.h)
 *   STORE/packs/NNNNNNNN.pack append-only block records (pack/pack.h)
 *
 * Write order, the invariant behind crash safety (DESIGN.md #1): pack
 * records are appended and fdatasync'ed, then the LMDB transaction that
 * references them (DDT entries, block maps, the pack's committed end)
 * commits.  Whoever takes the writer lock first recovers (store.c): rolls
 * back snapshots left pending by a killed writer, truncates pack tails past
 * their committed end and removes pack files no commit ever recorded.
 */
#ifndef DD_STORE_INTERNAL_H
#define DD_STORE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "dedup.h"
#include "common/err.h"
#include "common/pool.h"
#include "catalog/db.h"
#include "chunk/chunk.h"
#include "hash/hash.h"
#include "pack/pack.h"
#include "store/replica.h"
#include "cache/cache.h"

#define DD_STORE_FORMAT 1
#define DD_STORE_MAGIC_LINE "libdedup store"
/* Packs roll over past this size; small enough that gc rewrites little. */
#define DD_PACK_MAX_BYTES ((uint64_t)256 << 20)

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
	int st_packdir;            /* fd of STORE/packs */
	int st_lockfd;             /* fd of STORE/lock */
	dd_db *st_db;
	dd_open_opts st_opts;

	/* Store options, read from meta at open (format/store.md §2). */
	uint32_t st_block_size;
	int st_verify;
	int st_compress;
	int st_level;
	int st_hash_kind;

	pthread_mutex_t st_lock;   /* guards the fields below */
	dd_err st_err;
	bool st_writer_held;       /* this handle holds the writer lock */
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

/* ---- store.c -----------------------------------------------------------*/

/* dd_store_fail, dd_store_failf: replica.h */

int dd_store_create_kind(dd_store **out, const char *path,
			 const dd_create_opts *opts, const dd_open_opts *oopts,
			 int hash_kind);

/* Takes the writer lock (DD_EBUSY, or waits with wait_for_lock) and
 * recovers what a killed writer left.  dd_store_unlock releases it. */
int dd_store_lock(dd_store *s, dd_err *err);
void dd_store_unlock(dd_store *s);
int dd_store_recover(dd_store *s, dd_err *err);

/* Unlinks the packs gc doomed that no live reader can still need, and
 * forgets them; *freed gets the bytes.  Under the writer lock. */
int dd_store_reap(dd_store *s, dd_err *err, uint64_t *freed);

/* A read handle of pack id, owned by the store (valid until close). */
int dd_store_pack(dd_store *s, dd_err *err, uint32_t id, dd_pack **out);

int dd_scratch_init(dd_scratch *sc, dd_err *err, const dd_store *s);
void dd_scratch_fini(dd_scratch *sc);

/* ---- writer.c ----------------------------------------------------------*/

/* Logical bytes between a writer's intermediate commits (tests lower it). */
extern uint64_t dd_writer_commit_bytes;

/* ---- block.c -----------------------------------------------------------*/

/* Reads the block of (key, ent) into dst (ent->de_lsize bytes) from its
 * pack and checks it against key's hash: DD_ECHECKSUM rather than wrong
 * bytes.  Never through the caches: scrub must see the packs. */
int dd_block_read(dd_store *s, dd_err *err, dd_scratch *sc,
		  const dd_ddt_key *key, const dd_ddt_ent *ent, void *dst);

/* The same for snapshot reads: L1, then L2 (checked against the hash),
 * then the pack, whose block then enters L1.  flags: DD_CACHE_SEQ when
 * the block belongs to a long sequential read. */
int dd_block_read_cached(dd_store *s, dd_err *err, dd_scratch *sc,
			 const dd_ddt_key *key, const dd_ddt_ent *ent,
			 void *dst, unsigned flags);

/* ---- cache/api.c -------------------------------------------------------*/

/* Creates st_cache from STORE/cache.conf and the open options (device
 * problems are warnings, not errors); closes it. */
int dd_store_cache_open(dd_store *s, dd_err *err);
void dd_store_cache_close(dd_store *s);

/* ---- snapshots.c --------------------------------------------------------*/

/* Drops every block-map reference of snapshot id (refcount - 1 each) and
 * deletes its map.  Write transaction. */
int dd_snap_drop_refs(dd_txn *txn, dd_err *err, uint64_t id);

#endif
