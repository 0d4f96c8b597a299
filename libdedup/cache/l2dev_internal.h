/*
 * l2dev_internal.h -- one L2 cache device's state, shared by the files
 * that make up the device: l2dev.c (life, reads, batch writes), l2index.c
 * (the index in RAM and its rebuild from the log) and l2mkdev.c (header
 * slots, formatting).  Nothing outside cache/l2*.c includes it.
 */
#ifndef DD_CACHE_L2DEV_INTERNAL_H
#define DD_CACHE_L2DEV_INTERNAL_H

#include <pthread.h>

#include "cache/cache_internal.h"

#define DD_L2_EMPTY UINT32_MAX
#define DD_L2_BATCH_MAX ((uint64_t)16 << 20)

#define DD_L2_EMPTY UINT32_MAX
#define DD_L2_BATCH_MAX ((uint64_t)16 << 20)

struct dd_l2dev {
	char *d_path;
	uint64_t d_conf_size;
	uint8_t d_store_id[16];
	uint32_t d_block_size;      /* typical: one index slot per */
	uint32_t d_block_max;       /* the longest block */
	int d_fd;

	pthread_mutex_t d_lock;    /* everything below */
	pthread_cond_t d_cond;     /* the rebuild ended */
	int d_state;               /* enum dd_cache_state */
	char d_msg[256];
	bool d_warn_pending;
	dd_err d_warn;
	dd_l2_hdr d_hdr;           /* as on the device */
	uint64_t d_end;            /* logical end of the newest batch */

	dd_l2ent *d_ents;          /* ring of d_cap entries, oldest at d_head */
	uint32_t d_cap, d_head, d_count;
	uint32_t *d_tab;           /* d_tabn slots: fingerprint | index */
	uint32_t d_tabn;
	uint32_t d_fpmask;         /* the fingerprint bits of a slot */
	uint64_t d_live, d_bytes;  /* live entries and their bytes */

	bool d_stop;               /* close: the rebuild stops early */
	bool d_rebuilding;
	bool d_thread_started;
	pthread_t d_thread;
	uint64_t d_rebuilds, d_rebuild_entries, d_rebuild_ms, d_log_errors;

	uint8_t *d_batch;          /* the feeder's write buffer */
	size_t d_batch_cap;
};

/* ---- l2dev.c ---------------------------------------------------------------*/

/* Records a new state with its reason and a warning to give once.  Called
 * with d_lock held. */
void dd_l2dev_set_state(dd_l2dev *d, int state, int code, const char *why);
/* An I/O failure: ENOSPC makes the device full (it still serves reads),
 * anything else faulted.  d_lock held. */
void dd_l2dev_fail_io(dd_l2dev *d, const dd_err *e);
/* len bytes at device offset off, without the test read delay. */
int dd_l2_pread(dd_l2dev *d, dd_err *err, void *buf, size_t len,
		uint64_t off);

/* ---- l2index.c: the index (d_lock held unless said) -------------------------*/

/* The entry's logical size. */
uint32_t dd_l2_lsize(const dd_l2ent *e);
/* The table position holding key, or UINT32_MAX. */
uint32_t dd_l2_find(const dd_l2dev *d, const uint8_t key[DD_CACHE_KEY_SIZE]);
/* Marks the entry at table position pos dead and unindexes it. */
void dd_l2_kill(dd_l2dev *d, uint32_t pos);
/* Drops the oldest entry (a batch is about to overwrite it). */
void dd_l2_pop_front(dd_l2dev *d);
/* Adds an entry at the back (a batch) or the front (the rebuild, which
 * walks from the newest). */
void dd_l2_push(dd_l2dev *d, const dd_l2_logent *le, bool front);
/* Sizes the index for a ring of `ring` bytes (at open). */
int dd_l2_index_alloc(dd_l2dev *d, dd_err *err, uint64_t ring);
/* The rebuild thread: indexes what the log still describes, then puts the
 * device online. */
void *dd_l2dev_rebuild(void *arg);

/* ---- l2mkdev.c -------------------------------------------------------------*/

/* The device's size in bytes (lseek to its end); -1 on failure. */
int dd_l2_dev_bytes(int fd, uint64_t *out);
/* Picks the newest valid header slot of area (DD_L2_DATA_START bytes);
 * its decode error otherwise. */
int dd_l2_pick_hdr(dd_err *err, const uint8_t *area, dd_l2_hdr *out);

#endif
