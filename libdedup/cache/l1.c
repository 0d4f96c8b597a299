/*
 * l1.c -- the RAM cache of decompressed blocks: S3-FIFO.
 *
 * Why S3-FIFO (Yang et al., SOSP 2023) rather than LRU, ARC or W-TinyLFU:
 *  - scan resistance, which is what a block cache needs most: a backup
 *    restore or a scrub-like sweep reads each block once.  New blocks go
 *    to a small FIFO (10% of the budget); one that is not read again
 *    before it reaches the end of it is dropped, leaving only its
 *    fingerprint in a ghost FIFO.  Only blocks read twice -- while in the
 *    small FIFO, or again soon after leaving it (a ghost hit) -- enter the
 *    main FIFO, so a long scan never flushes the working set;
 *  - a hit only bumps a 2-bit counter: no list is touched, so the lock is
 *    held for the copy and little else (ARC and LRU move entries on every
 *    hit; W-TinyLFU needs a sketch and a window on top);
 *  - its miss ratios match or beat ARC and W-TinyLFU on block traces.
 * The main FIFO evicts like CLOCK: a block at its end with a non-zero
 * counter is reinserted with the counter decremented.
 *
 * Blocks leaving the cache go to the evict callback (the L2 feed), which
 * takes ownership of their buffer: no copy on the way to L2.
 *
 * One mutex guards everything; a hit copies the block under it.  That
 * copy (≈ 10 µs for 128 KiB) is two orders of magnitude cheaper than the
 * pack or SSD read it saves, and the readers of one store are the few
 * threads of its pool, so a sharded or reference-counted design would add
 * complexity for no measurable gain.
 */
#include <string.h>

#include "cache/cache_internal.h"
#include "common/alloc.h"
#include "common/endian.h"

enum { DD_L1_SMALL = 0, DD_L1_MAIN = 1 };

typedef struct dd_l1e {
	struct dd_l1e *e_hnext;      /* hash chain */
	struct dd_l1e *e_prev, *e_next; /* in its FIFO: head = newest */
	uint8_t *e_data;
	uint32_t e_lsize;
	uint8_t e_key[DD_CACHE_KEY_SIZE];
	uint8_t e_freq;              /* hits, saturating at 3 */
	uint8_t e_queue;             /* DD_L1_SMALL or DD_L1_MAIN */
	uint8_t e_flags;             /* DD_L1_SEQ, DD_L1_IN_L2 */
} dd_l1e;

typedef struct dd_l1q {
	dd_l1e q_head;               /* sentinel of a circular list */
	uint64_t q_bytes;
	uint64_t q_n;
} dd_l1q;

struct dd_l1 {
	pthread_mutex_t l_lock;
	uint64_t l_budget, l_bytes, l_blocks;
	dd_l1q l_q[2];
	dd_l1e **l_bucket;
	size_t l_nbucket;            /* a power of two */
	/* The ghost FIFO: fingerprints of blocks dropped from the small
	 * FIFO, in a ring, with an open-addressing set to look them up. */
	uint64_t *l_gring;
	size_t l_gcap, l_ghead, l_gn;
	uint64_t *l_gset;
	size_t l_gsetn;              /* a power of two, >= 2 * l_gcap */
	dd_l1_evict_fn l_evict;
	void *l_ctx;
};

static uint64_t dd_l1_fp(const uint8_t key[DD_CACHE_KEY_SIZE])
{
	uint64_t fp = dd_get_le64(key) ^ (key[32] * 0x9E3779B97F4A7C15ull);

	return fp ? fp : 1;          /* 0 marks an empty ghost slot */
}

static size_t dd_pow2_at_least(uint64_t n)
{
	size_t p = 64;

	while (p < n && p < ((size_t)1 << 40))
		p <<= 1;
	return p;
}

/* ---- ghost -----------------------------------------------------------------*/

static size_t dd_l1_gfind(const dd_l1 *l1, uint64_t fp)
{
	size_t mask = l1->l_gsetn - 1, i = fp & mask;

	while (l1->l_gset[i] && l1->l_gset[i] != fp)
		i = (i + 1) & mask;
	return i;
}

static bool dd_l1_ghost_has(const dd_l1 *l1, uint64_t fp)
{
	return l1->l_gset[dd_l1_gfind(l1, fp)] == fp;
}

static void dd_l1_gset_delete(dd_l1 *l1, uint64_t fp)
{
	size_t mask = l1->l_gsetn - 1, i = dd_l1_gfind(l1, fp), j = i;

	if (l1->l_gset[i] != fp)
		return;
	/* Backward shift, as in l2dev.c. */
	for (;;) {
		l1->l_gset[i] = 0;
		for (;;) {
			size_t k;

			j = (j + 1) & mask;
			if (!l1->l_gset[j])
				return;
			k = l1->l_gset[j] & mask;
			if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
				continue;
			break;
		}
		l1->l_gset[i] = l1->l_gset[j];
		i = j;
	}
}

static void dd_l1_ghost_add(dd_l1 *l1, uint64_t fp)
{
	if (dd_l1_ghost_has(l1, fp))
		return;
	if (l1->l_gn == l1->l_gcap) {
		dd_l1_gset_delete(l1, l1->l_gring[l1->l_ghead]);
		l1->l_ghead = (l1->l_ghead + 1) % l1->l_gcap;
		l1->l_gn--;
	}
	l1->l_gring[(l1->l_ghead + l1->l_gn) % l1->l_gcap] = fp;
	l1->l_gn++;
	l1->l_gset[dd_l1_gfind(l1, fp)] = fp;
}

/* ---- FIFOs and the hash --------------------------------------------------------*/

static void dd_l1q_init(dd_l1q *q)
{
	q->q_head.e_next = q->q_head.e_prev = &q->q_head;
	q->q_bytes = q->q_n = 0;
}

static void dd_l1q_push(dd_l1 *l1, int which, dd_l1e *e)
{
	dd_l1q *q = &l1->l_q[which];

	e->e_queue = (uint8_t)which;
	e->e_next = q->q_head.e_next;
	e->e_prev = &q->q_head;
	q->q_head.e_next->e_prev = e;
	q->q_head.e_next = e;
	q->q_bytes += e->e_lsize + DD_L1_ENTRY_OVERHEAD;
	q->q_n++;
}

/* Unlinks and returns the oldest entry of a FIFO (NULL when empty). */
static dd_l1e *dd_l1q_pop(dd_l1 *l1, int which)
{
	dd_l1q *q = &l1->l_q[which];
	dd_l1e *e = q->q_head.e_prev;

	if (e == &q->q_head)
		return NULL;
	e->e_prev->e_next = &q->q_head;
	q->q_head.e_prev = e->e_prev;
	q->q_bytes -= e->e_lsize + DD_L1_ENTRY_OVERHEAD;
	q->q_n--;
	return e;
}

static dd_l1e **dd_l1_slot(dd_l1 *l1, const uint8_t key[DD_CACHE_KEY_SIZE])
{
	dd_l1e **p = &l1->l_bucket[dd_l1_fp(key) & (l1->l_nbucket - 1)];

	while (*p && memcmp((*p)->e_key, key, DD_CACHE_KEY_SIZE) != 0)
		p = &(*p)->e_hnext;
	return p;
}

/* Drops an entry already out of its FIFO: to the evict callback. */
static void dd_l1_drop(dd_l1 *l1, dd_l1e *e)
{
	dd_l1e **p = dd_l1_slot(l1, e->e_key);

	*p = e->e_hnext;
	l1->l_bytes -= e->e_lsize + DD_L1_ENTRY_OVERHEAD;
	l1->l_blocks--;
	if (l1->l_evict)
		l1->l_evict(l1->l_ctx, e->e_key, e->e_data, e->e_lsize,
			    e->e_flags);
	else
		dd_free(e->e_data);
	dd_free(e);
}

/* ---- eviction ------------------------------------------------------------------*/

/* Evicts one block (S3-FIFO): from the small FIFO while it is over 10%
 * of the budget -- promoting what was hit meanwhile -- else from main. */
static void dd_l1_evict_one(dd_l1 *l1)
{
	dd_l1e *e;

	while (l1->l_q[DD_L1_SMALL].q_n &&
	       (l1->l_q[DD_L1_SMALL].q_bytes > l1->l_budget / 10 ||
		!l1->l_q[DD_L1_MAIN].q_n)) {
		e = dd_l1q_pop(l1, DD_L1_SMALL);
		if (e->e_freq) {
			e->e_freq = 0;
			dd_l1q_push(l1, DD_L1_MAIN, e);
			continue;
		}
		dd_l1_ghost_add(l1, dd_l1_fp(e->e_key));
		dd_l1_drop(l1, e);
		return;
	}
	while ((e = dd_l1q_pop(l1, DD_L1_MAIN)) != NULL) {
		if (e->e_freq) {
			e->e_freq--;
			dd_l1q_push(l1, DD_L1_MAIN, e);
			continue;
		}
		dd_l1_drop(l1, e);
		return;
	}
}

/* ---- the interface -----------------------------------------------------------------*/

int dd_l1_new(dd_l1 **out, uint64_t budget, uint32_t block_size,
	      dd_l1_evict_fn evict, void *ctx)
{
	dd_l1 *l1 = dd_calloc(1, sizeof(*l1));
	uint64_t blocks = budget / (block_size ? block_size : 4096);

	if (!l1)
		return DD_ENOMEM;
	pthread_mutex_init(&l1->l_lock, NULL);
	l1->l_budget = budget;
	l1->l_evict = evict;
	l1->l_ctx = ctx;
	dd_l1q_init(&l1->l_q[DD_L1_SMALL]);
	dd_l1q_init(&l1->l_q[DD_L1_MAIN]);
	l1->l_nbucket = dd_pow2_at_least(blocks * 2);
	/* The ghost remembers as many blocks as the cache holds. */
	l1->l_gcap = blocks < 16 ? 16 : (size_t)blocks;
	l1->l_gsetn = dd_pow2_at_least((uint64_t)l1->l_gcap * 2);
	l1->l_bucket = dd_calloc(l1->l_nbucket, sizeof(*l1->l_bucket));
	l1->l_gring = dd_calloc(l1->l_gcap, sizeof(*l1->l_gring));
	l1->l_gset = dd_calloc(l1->l_gsetn, sizeof(*l1->l_gset));
	if (!l1->l_bucket || !l1->l_gring || !l1->l_gset) {
		dd_l1_free(l1);
		return DD_ENOMEM;
	}
	*out = l1;
	return 0;
}

void dd_l1_free(dd_l1 *l1)
{
	if (!l1)
		return;
	for (int q = 0; q < 2 && l1->l_bucket; q++) {
		dd_l1e *e;

		while ((e = dd_l1q_pop(l1, q)) != NULL) {
			dd_free(e->e_data);
			dd_free(e);
		}
	}
	pthread_mutex_destroy(&l1->l_lock);
	dd_free(l1->l_bucket);
	dd_free(l1->l_gring);
	dd_free(l1->l_gset);
	dd_free(l1);
}

bool dd_l1_get(dd_l1 *l1, const uint8_t key[DD_CACHE_KEY_SIZE], void *dst,
	       uint32_t lsize, bool seq)
{
	dd_l1e *e;

	pthread_mutex_lock(&l1->l_lock);
	e = *dd_l1_slot(l1, key);
	if (e && e->e_lsize == lsize) {
		memcpy(dst, e->e_data, lsize);
		if (e->e_freq < 3)
			e->e_freq++;
		if (!seq)
			e->e_flags &= (uint8_t)~DD_L1_SEQ;
	} else {
		e = NULL;
	}
	pthread_mutex_unlock(&l1->l_lock);
	return e != NULL;
}

void dd_l1_put(dd_l1 *l1, const uint8_t key[DD_CACHE_KEY_SIZE],
	       const void *src, uint32_t lsize, unsigned flags)
{
	dd_l1e *e, **slot;

	if ((uint64_t)lsize + DD_L1_ENTRY_OVERHEAD > l1->l_budget)
		return;
	/* Allocate and copy before taking the lock. */
	e = dd_calloc(1, sizeof(*e));
	if (e)
		e->e_data = dd_malloc(lsize);
	if (!e || !e->e_data) {
		dd_free(e);
		return;       /* a cache does without under memory pressure */
	}
	memcpy(e->e_data, src, lsize);
	memcpy(e->e_key, key, DD_CACHE_KEY_SIZE);
	e->e_lsize = lsize;
	e->e_flags = (uint8_t)flags;
	pthread_mutex_lock(&l1->l_lock);
	slot = dd_l1_slot(l1, key);
	if (*slot) {
		/* Another thread read the same block meanwhile. */
		pthread_mutex_unlock(&l1->l_lock);
		dd_free(e->e_data);
		dd_free(e);
		return;
	}
	*slot = e;
	dd_l1q_push(l1, dd_l1_ghost_has(l1, dd_l1_fp(key)) ? DD_L1_MAIN
							   : DD_L1_SMALL, e);
	l1->l_bytes += lsize + DD_L1_ENTRY_OVERHEAD;
	l1->l_blocks++;
	while (l1->l_bytes > l1->l_budget)
		dd_l1_evict_one(l1);
	pthread_mutex_unlock(&l1->l_lock);
}

void dd_l1_usage(dd_l1 *l1, uint64_t *bytes, uint64_t *blocks)
{
	pthread_mutex_lock(&l1->l_lock);
	*bytes = l1->l_bytes;
	*blocks = l1->l_blocks;
	pthread_mutex_unlock(&l1->l_lock);
}

int dd_l1_where(dd_l1 *l1, const uint8_t key[DD_CACHE_KEY_SIZE])
{
	dd_l1e *e;
	int where;

	pthread_mutex_lock(&l1->l_lock);
	e = *dd_l1_slot(l1, key);
	where = e ? 1 + e->e_queue : 0;
	pthread_mutex_unlock(&l1->l_lock);
	return where;
}
