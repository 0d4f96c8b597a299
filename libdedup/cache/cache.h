/*
 * cache.h -- the block caches of a store: L1 in RAM, L2 on SSD paths.
 *
 * What the store sees of cache/.  A dd_cache belongs to one store handle;
 * block.c asks it before reading a pack (dd_cache_get) and hands it every
 * block it read from a pack (dd_cache_put).  Blocks are content-addressed
 * (SHA-256 + DDT variant), so a cached block never goes stale: it can only
 * be damaged, and every L2 read is checked against its hash.
 *
 *   L1  decompressed blocks, a byte budget, S3-FIFO eviction (l1.c)
 *   L2  per device a ring of blocks + checksummed log blocks that index
 *       them, rebuilt at open in a background thread (l2dev.c,
 *       format/cache.md); fed from L1 evictions by one throttled feeder
 *       thread (feed.c)
 *
 * The cache never fails a read: a device that is missing, foreign,
 * unreadable or full is taken out of use, reported once through the warn
 * callback and counted; the read goes on from the packs.
 *
 * cache/ depends on common/ and hash/ only; it knows nothing of a store.
 * The glue -- a store's caches at open and close, the public dd_cache_*
 * functions on a dd_store -- is store/caches.c.
 */
#ifndef DD_CACHE_CACHE_H
#define DD_CACHE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dedup.h"
#include "common/err.h"
#include "hash/hash.h"

/* A cache key: SHA-256 of the logical bytes and the DDT variant. */
#define DD_CACHE_KEY_SIZE 33

/* Flags of dd_cache_get / dd_cache_put. */
#define DD_CACHE_SEQ 0x1u      /* part of a long sequential read */

typedef struct dd_cache dd_cache;

/* Reports a device problem (once per problem); err is valid during the
 * call only.  Called from any thread, never with a cache lock held. */
typedef void (*dd_cache_warn_fn)(void *ctx, const dd_err *err);

typedef struct dd_cache_params {
	uint64_t cp_l1_size;        /* bytes of RAM for L1; 0: no L1 */
	uint64_t cp_l2_write_max;   /* L2 feed rate, bytes per second */
	bool cp_feed_seq;           /* feed blocks of sequential reads too */
	bool cp_no_l2;              /* list the devices, never open them */
	uint32_t cp_block_size;     /* the store's block size (of content-
				       defined blocks: the average) */
	uint32_t cp_block_max;      /* its longest block; 0: cp_block_size */
	uint8_t cp_store_id[16];    /* ties a device to its store */
	const char *const *cp_paths;/* L2 devices, opened at first use */
	const uint64_t *cp_sizes;   /* their configured sizes */
	size_t cp_npaths;
	dd_cache_warn_fn cp_warn;
	void *cp_warn_ctx;
} dd_cache_params;

/* Creates the cache; devices are opened lazily, at the first get, put,
 * stats or list, so a handle that never reads blocks (a writer, gc) never
 * takes a device's lock.  Errors: DD_ENOMEM. */
int dd_cache_new(dd_cache **out, dd_err *err, const dd_cache_params *p);

/* Drains the feed queue (at the write rate), writes its last log block,
 * stops the threads and frees everything.  Accepts NULL. */
void dd_cache_free(dd_cache *c);

/* Copies the block (key, lsize bytes) into dst from L1, or from L2 after
 * checking it against the hash with h (the caller's hasher, SHA-256).
 * 0 on a hit, DD_ENOENT on a miss: never an error. */
int dd_cache_get(dd_cache *c, dd_hasher *h, const uint8_t key[DD_CACHE_KEY_SIZE],
		 uint32_t lsize, void *dst, unsigned flags);

/* Offers a block just read (and verified) from a pack to L1. */
void dd_cache_put(dd_cache *c, const uint8_t key[DD_CACHE_KEY_SIZE],
		  const void *src, uint32_t lsize, unsigned flags);

/* Counts one pack record read of `bytes` (figures kept apart from L2). */
void dd_cache_count_pack(dd_cache *c, uint64_t bytes);

/* Attaches a device now (dd_cache_add).  Problems with the device itself
 * are recorded in its state, not returned.  Errors: DD_ENOMEM, DD_EEXIST
 * (already attached). */
int dd_cache_attach(dd_cache *c, dd_err *err, const char *path,
		    uint64_t size);
/* Detaches a device (dd_cache_remove): waits for its reads and writes.
 * DD_ENOENT when it is not attached. */
int dd_cache_detach(dd_cache *c, const char *path);

/* Waits until the feed queue is written and every rebuild has ended. */
void dd_cache_drain(dd_cache *c);
void dd_cache_wait_rebuild(dd_cache *c);

void dd_cache_stats_fill(dd_cache *c, dd_cache_stats *out);
/* *out gets n entries (dd_free), NULL when n is 0. */
int dd_cache_devs(dd_cache *c, dd_err *err, dd_cache_dev **out, size_t *n);

/* ---- devices (l2dev.c), for dd_cache_add ----------------------------------*/

/* Smallest device: two header slots and a ring of 4 MiB. */
#define DD_L2_MIN_BYTES ((uint64_t)(4u << 20) + 8192)

/* Writes a fresh device header for store_id (format/cache.md §2) on path,
 * creating a regular file of `size` bytes when missing (size 0: the whole
 * file or device).  A device that holds a header of another store, or
 * non-zero bytes where the header goes, is refused with DD_EEXIST unless
 * force; one of this store is reformatted.  *used gets the bytes the
 * device was formatted with.  Errors: DD_EINVAL (too small),
 * DD_EEXIST, DD_EIO, DD_ENOSPC, DD_EPERM. */
int dd_l2_format(dd_err *err, const char *path, uint64_t size,
		 const uint8_t store_id[16], bool force, uint64_t *used);

/* ---- STORE/cache.conf (conf.c, format/store.md §8) -----------------------*/

typedef struct dd_cache_conf_dev {
	char *cd_path;
	uint64_t cd_size;
} dd_cache_conf_dev;

typedef struct dd_cache_conf {
	uint64_t cf_l1_size;           /* 0: not set */
	uint64_t cf_l2_write_max;      /* 0: not set */
	int cf_feed_seq;               /* 0 not set, 1, -1 */
	dd_cache_conf_dev *cf_devs;
	size_t cf_ndevs;
} dd_cache_conf;

/* Reads dir/cache.conf; a missing file is an empty configuration.
 * DD_ECORRUPT / DD_EVERSION on a bad file. */
int dd_cache_conf_read(dd_err *err, const char *dir, dd_cache_conf *out);
/* Writes dir/cache.conf through a temporary file and rename. */
int dd_cache_conf_write(dd_err *err, const char *dir, const dd_cache_conf *c);
int dd_cache_conf_add_dev(dd_err *err, dd_cache_conf *c, const char *path,
			  uint64_t size);
/* Removes device `at` (< cf_ndevs). */
void dd_cache_conf_remove_dev(dd_cache_conf *c, size_t at);
/* True when path is a device of c: *at gets its index. */
bool dd_cache_conf_find(const dd_cache_conf *c, const char *path, size_t *at);
/* A device path cache.conf can hold: absolute, shorter than
 * DD_CACHE_PATH_MAX, no control characters.  DD_EINVAL otherwise. */
int dd_cache_conf_path_check(dd_err *err, const char *path);
void dd_cache_conf_fini(dd_cache_conf *c);

#endif
