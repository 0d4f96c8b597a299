/*
 * cache_internal.h -- what the files of cache/ share (and tests reach).
 *
 *   l1.c      the RAM cache (S3-FIFO)
 *   l2fmt.c   device header and log block encodings (format/cache.md)
 *   l2dev.c   one L2 device: open, state, read, batch write
 *   l2index.c its index in RAM and the rebuild from its log
 *   l2mkdev.c formatting a device, reading its header slots
 *             (l2dev_internal.h: the device's state, for the three)
 *   feed.c    the feeder thread: L1 evictions -> throttled L2 batches
 *   cache.c   dd_cache: L1 + devices + feed + figures
 *   conf.c    STORE/cache.conf (format/store.md §8)
 *
 * The store's side -- opening a store's caches, the public dd_cache_*
 * functions on a dd_store -- is store/caches.c, over cache.h.
 */
#ifndef DD_CACHE_INTERNAL_H
#define DD_CACHE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "cache/cache.h"

/* ---- L1 (l1.c) -----------------------------------------------------------*/

/* of a long sequential read: cache.c puts none in L1, the feed takes
 * one only with l2_feed_sequential */
#define DD_L1_SEQ 0x1u
#define DD_L1_IN_L2 0x2u   /* came from L2: no need to feed it back */

/* Called under the L1 lock for each block evicted; takes ownership of
 * `data` (dd_malloc'd, lsize bytes) and must dd_free it eventually. */
typedef void (*dd_l1_evict_fn)(void *ctx, const uint8_t key[DD_CACHE_KEY_SIZE],
			       uint8_t *data, uint32_t lsize, unsigned flags);

typedef struct dd_l1 dd_l1;

/* budget: bytes of blocks plus per-entry overhead.  block_size sizes the
 * ghost queue.  evict may be NULL (evicted blocks are freed). */
int dd_l1_new(dd_l1 **out, uint64_t budget, uint32_t block_size,
	      dd_l1_evict_fn evict, void *ctx);
/* Frees every block without calling evict. */
void dd_l1_free(dd_l1 *l1);
/* Copies a cached block into dst; false on a miss (or a size mismatch). */
bool dd_l1_get(dd_l1 *l1, const uint8_t key[DD_CACHE_KEY_SIZE], void *dst,
	       uint32_t lsize, bool seq);
/* Inserts a copy of src (no-op when present or larger than the budget). */
void dd_l1_put(dd_l1 *l1, const uint8_t key[DD_CACHE_KEY_SIZE],
	       const void *src, uint32_t lsize, unsigned flags);
void dd_l1_usage(dd_l1 *l1, uint64_t *bytes, uint64_t *blocks);
/* The queue a key sits in: 0 absent, 1 small, 2 main (tests). */
int dd_l1_where(dd_l1 *l1, const uint8_t key[DD_CACHE_KEY_SIZE]);

/* Bytes an entry costs beyond its data (counted in the budget). */
#define DD_L1_ENTRY_OVERHEAD 96u

/* ---- L2 on-device encodings (l2fmt.c, format/cache.md) --------------------*/

#define DD_L2_SECTOR 4096u             /* alignment of everything in the ring */
#define DD_L2_HDR_SLOT 4096u           /* two header slots at 0 and 4096 */
#define DD_L2_DATA_START 8192u
#define DD_L2_HDR_SIZE 128u            /* encoded bytes of a header slot */
#define DD_L2_LOG_HDR_SIZE 64u
#define DD_L2_LOG_ENT_SIZE 48u
#define DD_L2_LOG_MAX_ENTS 4096u       /* entries per log block, at most */
#define DD_L2_VERSION 1u
#define DD_L2_MAX_LSIZE (1u << 20)

typedef struct dd_l2_hdr {
	uint8_t lh_store_id[16];
	uint8_t lh_dev_id[16];
	uint64_t lh_dev_bytes;     /* bytes of the device when formatted */
	uint64_t lh_ring;          /* ring bytes: a multiple of DD_L2_SECTOR */
	uint64_t lh_seq;           /* header writes; the higher slot wins */
	uint64_t lh_log_seq;       /* newest log block's seq; 0: none yet */
	uint64_t lh_log_lpos;      /* its logical position */
	uint32_t lh_log_size;      /* its size in bytes */
	int64_t lh_ctime;
} dd_l2_hdr;

void dd_l2_hdr_encode(uint8_t out[DD_L2_HDR_SIZE], const dd_l2_hdr *h);
/* DD_EFORMAT: no magic; DD_EVERSION: a newer version; DD_ENOTSUP: unknown
 * features; DD_ECORRUPT: bad CRC, reserved bytes or fields out of range. */
int dd_l2_hdr_decode(dd_err *err, const uint8_t in[DD_L2_HDR_SIZE],
		     dd_l2_hdr *out);

typedef struct dd_l2_log {
	uint64_t ll_seq;
	uint8_t ll_dev_id[16];
	uint64_t ll_lpos;          /* logical position of this log block */
	uint64_t ll_prev_lpos;     /* the previous one; prev_size 0: none */
	uint32_t ll_prev_size;
	uint32_t ll_nents;
	uint32_t ll_size;          /* bytes, a multiple of DD_L2_SECTOR */
} dd_l2_log;

/* One indexed block as the log block records it. */
typedef struct dd_l2_logent {
	uint8_t le_key[DD_CACHE_KEY_SIZE];
	uint32_t le_off;           /* ring offset in DD_L2_SECTOR units */
	uint32_t le_lsize;
} dd_l2_logent;

/* Bytes n takes in the ring: rounded up to a sector. */
static inline uint64_t dd_l2_align(uint64_t n)
{
	return (n + DD_L2_SECTOR - 1) / DD_L2_SECTOR * DD_L2_SECTOR;
}

/* Bytes of a log block of n entries, rounded up to a sector. */
uint32_t dd_l2_log_size(uint32_t n);
/* Encodes header + entries into out (dd_l2_log_size(nents) bytes, zero
 * padded); sets log->ll_size. */
void dd_l2_log_encode(uint8_t *out, dd_l2_log *log, const dd_l2_logent *ents);
/* Checks and decodes the header of a log block in buf (len bytes read at
 * its place); the entries are then read with dd_l2_log_ent.  DD_ECORRUPT
 * or DD_EVERSION with a message. */
int dd_l2_log_decode(dd_err *err, const uint8_t *buf, size_t len,
		     dd_l2_log *out);
void dd_l2_log_ent(const uint8_t *buf, uint32_t i, dd_l2_logent *out);

/* ---- one L2 device (l2dev.c) ---------------------------------------------*/

/*
 * The RAM index of a device: a ring of 40-byte entries in the order their
 * blocks sit in the device's ring (oldest first), and an open-addressing
 * table of u32 slots pointing into it (index in the low bits, a
 * fingerprint of the hash in the rest), at most 80% full: 40 + 4 / 0.8 =
 * 45 bytes of RAM per slot, ≈ 46 per cached block on a full device, where
 * log blocks and the batch being written leave ~2% of slots idle (ZFS
 * L2ARC: 96 bytes per header).
 */
typedef struct dd_l2ent {
	uint8_t e_hash[32];
	uint32_t e_off;            /* ring offset in DD_L2_SECTOR units */
	uint32_t e_meta;           /* lsize - 1 (20 bits) | variant << 20 |
				      flags << 28 */
} dd_l2ent;
_Static_assert(sizeof(dd_l2ent) == 40, "dd_l2ent must stay 40 bytes");

#define DD_L2E_DEAD 0x1u           /* dropped; waits for the hand */

typedef struct dd_l2dev dd_l2dev;

/* Opens path for store_id: never fails for a problem of the device itself
 * (it is recorded in the state and message); starts the rebuild thread.
 * The index has a slot per block_size bytes of the ring; no block is
 * longer than block_max.  Errors: DD_ENOMEM. */
int dd_l2dev_open(dd_l2dev **out, dd_err *err, const char *path,
		  uint64_t size, const uint8_t store_id[16], uint32_t block_size,
		  uint32_t block_max);
/* Stops the rebuild, closes the file.  The caller has stopped the feed. */
void dd_l2dev_close(dd_l2dev *d);
const char *dd_l2dev_path(const dd_l2dev *d);
int dd_l2dev_state(dd_l2dev *d);
/* State and message (copied) for dd_cache_dev. */
void dd_l2dev_info(dd_l2dev *d, dd_cache_dev *out);
void dd_l2dev_wait_rebuild(dd_l2dev *d);
/* Takes the pending warning of a state change, once: true and *err. */
bool dd_l2dev_take_warning(dd_l2dev *d, dd_err *err);

/* Result of a read. */
enum {
	DD_L2_MISS = 0,
	DD_L2_HIT = 1,
	DD_L2_CKSUM = 2,           /* found, failed SHA-256: dropped */
	DD_L2_IOERR = 3            /* device failed: now faulted */
};
int dd_l2dev_read(dd_l2dev *d, dd_hasher *h,
		  const uint8_t key[DD_CACHE_KEY_SIZE], uint32_t lsize,
		  void *dst);
bool dd_l2dev_contains(dd_l2dev *d, const uint8_t key[DD_CACHE_KEY_SIZE]);

/* A block for a batch. */
typedef struct dd_l2_item {
	struct dd_l2_item *it_next;
	uint8_t it_key[DD_CACHE_KEY_SIZE];
	uint32_t it_lsize;
	uint8_t *it_data;
} dd_l2_item;

/* Bytes a batch of these items takes in the ring, log block included. */
uint64_t dd_l2_batch_bytes(const dd_l2_item *items);
/* Largest batch a device takes in one write. */
uint64_t dd_l2dev_batch_max(dd_l2dev *d);
/* Writes items (a list) as one batch: data, log block, header.  0, or a
 * DD_E* code when the device failed (it is then faulted or full).
 * *written gets the bytes written. */
int dd_l2dev_write_batch(dd_l2dev *d, const dd_l2_item *items,
			 uint64_t *written);

typedef struct dd_l2_figures {
	uint64_t lf_entries, lf_bytes, lf_ring;
	uint64_t lf_rebuilds, lf_rebuild_entries, lf_rebuild_ms;
	uint64_t lf_log_errors;
} dd_l2_figures;
void dd_l2dev_figures(dd_l2dev *d, dd_l2_figures *out);

/* ---- the feed (feed.c) ----------------------------------------------------*/

typedef struct dd_feed dd_feed;

/* Writes a batch (a list) to the devices; takes ownership of the items
 * (dd_l2_item_free each).  rate: bytes per second. */
typedef void (*dd_feed_write_fn)(void *ctx, dd_l2_item *items);
void dd_l2_item_free(dd_l2_item *it);
int dd_feed_new(dd_feed **out, dd_err *err, uint64_t rate, uint32_t block_size,
		dd_feed_write_fn write, void *ctx);
/* Drains the queue at the rate, then stops the thread. */
void dd_feed_free(dd_feed *f);
/* Queues a block (takes data); false when the queue is full (data is
 * then still the caller's). */
bool dd_feed_offer(dd_feed *f, const uint8_t key[DD_CACHE_KEY_SIZE],
		   uint8_t *data, uint32_t lsize);
/* Waits until the queue is empty and no batch is being written. */
void dd_feed_drain(dd_feed *f);

/* The length of one feed interval: the rate is applied per interval and a
 * batch holds at most one interval's bytes (tests shorten it). */
extern _Atomic uint32_t dd_feed_tick_ms;

/* ---- cache.c --------------------------------------------------------------*/

/* A monotonic clock in nanoseconds. */
uint64_t dd_cache_now_ns(void);

#endif
