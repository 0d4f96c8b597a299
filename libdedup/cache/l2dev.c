/*
 * l2dev.c -- one L2 cache device: a ring of blocks indexed by log blocks
 * (format/cache.md).
 *
 * On the device, blocks are written in batches at the hand, which moves
 * forward through the ring and wraps; each batch is its blocks followed by
 * one log block listing them, and the log blocks are chained backwards
 * from the newest, which the header points to.  Positions are logical
 * (bytes written since format, never wrapping); a position p sits at ring
 * offset p mod R, and a block written at p is intact as long as the end
 * of the newest batch is at most p + R.  That one rule tells the rebuild
 * which log blocks and entries still describe live data.
 *
 * In RAM, the index (cache_internal.h, dd_l2ent) is a ring of entries in
 * the device's own order, oldest first, plus a hash table of u32 slots
 * pointing into it.  Because both rings run in step, the entries a batch
 * will overwrite are exactly those at the front: the feeder pops them
 * before it writes.  45 bytes of RAM per cached block, fixed at open
 * (ring / block size entries): memory never grows with use.
 *
 * Write order, for a cache that is consistent after a crash: batch data
 * and log block in one write, fdatasync, then the header (in the slot its
 * sequence number selects, so the previous header survives a torn write),
 * fdatasync.  A header thus only points at a durable log block; anything
 * past it is never indexed and is overwritten.
 *
 * Concurrency: d_lock guards the index, the hand and the state; I/O runs
 * without it.  One feeder writes (cache.c serialises batches), readers
 * read.  A reader may look an entry up just before the feeder pops it and
 * read the block after the batch overwrote it: the SHA-256 check fails,
 * and a second look finds the entry gone -- a miss, not a checksum error.
 * The feeder does not write while the rebuild runs, so the rebuild sees
 * a still ring.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache_internal.h"
#include "common/alloc.h"
#include "common/endian.h"
#include "common/io.h"
#include "common/zero.h"

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

/* ---- state and warnings ----------------------------------------------------*/

/* Records a new state with its reason and a warning to give once.  Called
 * with d_lock held. */
static void dd_l2dev_set_state(dd_l2dev *d, int state, int code,
			       const char *why)
{
	size_t n = strnlen(why, sizeof(d->d_msg) - 1);

	d->d_state = state;
	memcpy(d->d_msg, why, n);       /* a reason, truncated if need be */
	d->d_msg[n] = 0;
	dd_err_set(&d->d_warn, code, "cache device %s: %s; reading without it",
		   d->d_path, why);
	d->d_warn_pending = true;
}

bool dd_l2dev_take_warning(dd_l2dev *d, dd_err *err)
{
	bool pending;

	pthread_mutex_lock(&d->d_lock);
	pending = d->d_warn_pending;
	if (pending)
		*err = d->d_warn;
	d->d_warn_pending = false;
	pthread_mutex_unlock(&d->d_lock);
	return pending;
}

/* An I/O failure: ENOSPC makes the device full (it still serves reads),
 * anything else faulted.  d_lock held. */
static void dd_l2dev_fail_io(dd_l2dev *d, const dd_err *e)
{
	if (d->d_state != DD_CACHE_ONLINE && d->d_state != DD_CACHE_FULL &&
	    d->d_state != DD_CACHE_REBUILDING)
		return;
	if (e->de_code == DD_ENOSPC)
		dd_l2dev_set_state(d, DD_CACHE_FULL, e->de_code, e->de_msg);
	else
		dd_l2dev_set_state(d, DD_CACHE_FAULTED, e->de_code, e->de_msg);
}

/* ---- the index -------------------------------------------------------------*/

static uint64_t dd_l2_h64(const uint8_t key[DD_CACHE_KEY_SIZE])
{
	/* SHA-256 bytes are uniform; the variant (0 but for verified
	 * collisions) is mixed in so that variants spread too. */
	return dd_get_le64(key) ^ (key[32] * 0x9E3779B97F4A7C15ull);
}

static uint32_t dd_l2_home(const dd_l2dev *d, uint64_t h)
{
	/* Multiply-shift maps onto any table size, not just powers of
	 * two, so the table can be sized to exactly 80% load. */
	return (uint32_t)(((h & 0xffffffffu) * d->d_tabn) >> 32);
}

static uint32_t dd_l2_lsize(const dd_l2ent *e)
{
	return (e->e_meta & 0xfffffu) + 1;
}

static uint8_t dd_l2_variant(const dd_l2ent *e)
{
	return (uint8_t)(e->e_meta >> 20);
}

static bool dd_l2_dead(const dd_l2ent *e)
{
	return (e->e_meta >> 28) & DD_L2E_DEAD;
}

static bool dd_l2_match(const dd_l2ent *e, const uint8_t key[DD_CACHE_KEY_SIZE])
{
	return memcmp(e->e_hash, key, 32) == 0 && dd_l2_variant(e) == key[32];
}

/* The table position holding key, or UINT32_MAX. */
static uint32_t dd_l2_find(const dd_l2dev *d,
			   const uint8_t key[DD_CACHE_KEY_SIZE])
{
	uint64_t h = dd_l2_h64(key);
	uint32_t fp = (uint32_t)(h >> 32) & d->d_fpmask;
	uint32_t i = dd_l2_home(d, h);

	if (!d->d_tabn)
		return UINT32_MAX;
	for (;;) {
		uint32_t s = d->d_tab[i];

		if (s == DD_L2_EMPTY)
			return UINT32_MAX;
		if ((s & d->d_fpmask) == fp &&
		    dd_l2_match(&d->d_ents[s & ~d->d_fpmask], key))
			return i;
		i = i + 1 == d->d_tabn ? 0 : i + 1;
	}
}

static void dd_l2_ent_key(const dd_l2ent *e, uint8_t key[DD_CACHE_KEY_SIZE])
{
	memcpy(key, e->e_hash, 32);
	key[32] = dd_l2_variant(e);
}

static void dd_l2_tab_insert(dd_l2dev *d, uint32_t idx)
{
	uint8_t key[DD_CACHE_KEY_SIZE];
	uint64_t h;
	uint32_t i;

	dd_l2_ent_key(&d->d_ents[idx], key);
	h = dd_l2_h64(key);
	i = dd_l2_home(d, h);
	while (d->d_tab[i] != DD_L2_EMPTY)
		i = i + 1 == d->d_tabn ? 0 : i + 1;
	d->d_tab[i] = ((uint32_t)(h >> 32) & d->d_fpmask) | idx;
}

static uint32_t dd_l2_slot_home(const dd_l2dev *d, uint32_t slot)
{
	uint8_t key[DD_CACHE_KEY_SIZE];

	dd_l2_ent_key(&d->d_ents[slot & ~d->d_fpmask], key);
	return dd_l2_home(d, dd_l2_h64(key));
}

/* Deletes table position i by backward shift: no tombstones, so lookups
 * never slow down as entries come and go. */
static void dd_l2_tab_delete(dd_l2dev *d, uint32_t i)
{
	uint32_t j = i;

	for (;;) {
		uint32_t k;

		d->d_tab[i] = DD_L2_EMPTY;
		for (;;) {
			j = j + 1 == d->d_tabn ? 0 : j + 1;
			if (d->d_tab[j] == DD_L2_EMPTY)
				return;
			k = dd_l2_slot_home(d, d->d_tab[j]);
			/* Move j back to i unless its home lies cyclically
			 * in (i, j]. */
			if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
				continue;
			break;
		}
		d->d_tab[i] = d->d_tab[j];
		i = j;
	}
}

/* Marks the entry at table position pos dead and unindexes it. */
static void dd_l2_kill(dd_l2dev *d, uint32_t pos)
{
	dd_l2ent *e = &d->d_ents[d->d_tab[pos] & ~d->d_fpmask];

	e->e_meta |= (uint32_t)DD_L2E_DEAD << 28;
	d->d_live--;
	d->d_bytes -= dd_l2_lsize(e);
	dd_l2_tab_delete(d, pos);
}

static void dd_l2_pop_front(dd_l2dev *d)
{
	dd_l2ent *e = &d->d_ents[d->d_head];

	if (!dd_l2_dead(e)) {
		uint8_t key[DD_CACHE_KEY_SIZE];

		dd_l2_ent_key(e, key);
		dd_l2_kill(d, dd_l2_find(d, key));
	}
	d->d_head = d->d_head + 1 == d->d_cap ? 0 : d->d_head + 1;
	d->d_count--;
}

/* Adds an entry at the back (a batch) or the front (the rebuild, which
 * walks from the newest).  A key already indexed is not added twice. */
static void dd_l2_push(dd_l2dev *d, const dd_l2_logent *le, bool front)
{
	uint32_t idx;
	dd_l2ent *e;

	if (d->d_count == d->d_cap || dd_l2_find(d, le->le_key) != UINT32_MAX)
		return;
	if (front) {
		d->d_head = d->d_head == 0 ? d->d_cap - 1 : d->d_head - 1;
		idx = d->d_head;
	} else {
		idx = (uint32_t)(((uint64_t)d->d_head + d->d_count) % d->d_cap);
	}
	e = &d->d_ents[idx];
	memcpy(e->e_hash, le->le_key, 32);
	e->e_off = le->le_off;
	e->e_meta = (le->le_lsize - 1) | (uint32_t)le->le_key[32] << 20;
	d->d_count++;
	d->d_live++;
	d->d_bytes += le->le_lsize;
	dd_l2_tab_insert(d, idx);
}

/* Sizes the index for a ring of `ring` bytes: one entry per block of the
 * store's size (short blocks, at the end of images, may make entries run
 * out before the ring does: the oldest then go early). */
static int dd_l2_index_alloc(dd_l2dev *d, dd_err *err, uint64_t ring)
{
	uint64_t cap = ring / d->d_block_size + 64;
	unsigned bits = 1;

	if (cap > ring / DD_L2_SECTOR)
		cap = ring / DD_L2_SECTOR;
	if (cap > (1u << 30))
		cap = 1u << 30;
	while (((uint64_t)1 << bits) <= cap)
		bits++;
	d->d_cap = (uint32_t)cap;
	d->d_tabn = (uint32_t)(cap + cap / 4 + 1);
	d->d_fpmask = ~(uint32_t)(((uint64_t)1 << bits) - 1);
	d->d_ents = dd_malloc((size_t)cap * sizeof(*d->d_ents));
	d->d_tab = dd_malloc((size_t)d->d_tabn * sizeof(*d->d_tab));
	if (!d->d_ents || !d->d_tab)
		return dd_err_set(err, DD_ENOMEM, "out of memory for the index "
				  "of cache device %s", d->d_path);
	memset(d->d_tab, 0xff, (size_t)d->d_tabn * sizeof(*d->d_tab));
	return 0;
}

/* ---- open ------------------------------------------------------------------*/

static int dd_l2_dev_bytes(int fd, uint64_t *out)
{
	off_t end = lseek(fd, 0, SEEK_END);

	if (end < 0)
		return -1;
	*out = (uint64_t)end;
	return 0;
}

/* Picks the newest valid header slot; its decode error otherwise. */
static int dd_l2_pick_hdr(dd_err *err, const uint8_t *area, dd_l2_hdr *out)
{
	dd_l2_hdr h[2];
	dd_err e[2];
	int rc[2];

	for (int i = 0; i < 2; i++)
		rc[i] = dd_l2_hdr_decode(&e[i], area + i * DD_L2_HDR_SLOT, &h[i]);
	if (rc[0] && rc[1]) {
		int w = rc[0] == DD_EFORMAT ? 1 : 0;

		return dd_err_copy(err, &e[w]);
	}
	*out = rc[0] ? h[1] : rc[1] ? h[0] : h[h[1].lh_seq > h[0].lh_seq];
	return 0;
}

/* Opens and checks the device; 0, or the state it must take. */
static int dd_l2dev_attach(dd_l2dev *d, dd_err *err)
{
	uint8_t area[DD_L2_DATA_START];
	uint64_t bytes;
	int rc;

	d->d_fd = dd_io_open(err, d->d_path, O_RDWR, 0);
	if (d->d_fd == DD_ENOENT)
		return DD_CACHE_MISSING;
	if (d->d_fd < 0)
		return DD_CACHE_FAULTED;
	if (flock(d->d_fd, LOCK_EX | LOCK_NB) != 0) {
		dd_err_set(err, DD_EBUSY, "in use by another process");
		return DD_CACHE_BUSY;
	}
	if (dd_io_pread_full(err, d->d_fd, area, sizeof(area), 0, d->d_path))
		return err->de_code == DD_ECORRUPT ? DD_CACHE_FOREIGN
						   : DD_CACHE_FAULTED;
	rc = dd_l2_pick_hdr(err, area, &d->d_hdr);
	if (rc)
		return DD_CACHE_FOREIGN;
	if (memcmp(d->d_hdr.lh_store_id, d->d_store_id, 16) != 0) {
		dd_err_set(err, DD_EFORMAT, "the cache device of another store");
		return DD_CACHE_FOREIGN;
	}
	if (dd_l2_dev_bytes(d->d_fd, &bytes) || bytes < d->d_hdr.lh_dev_bytes) {
		dd_err_set(err, DD_ECORRUPT, "shorter than its header says "
			   "(%llu bytes)",
			   (unsigned long long)d->d_hdr.lh_dev_bytes);
		return DD_CACHE_FAULTED;
	}
	if (dd_l2_index_alloc(d, err, d->d_hdr.lh_ring))
		return -1;
	d->d_end = d->d_hdr.lh_log_seq ? d->d_hdr.lh_log_lpos +
					 d->d_hdr.lh_log_size : 0;
	return 0;
}

static void *dd_l2dev_rebuild(void *arg);

int dd_l2dev_open(dd_l2dev **out, dd_err *err, const char *path,
		  uint64_t size, const uint8_t store_id[16], uint32_t block_size,
		  uint32_t block_max)
{
	dd_l2dev *d = dd_calloc(1, sizeof(*d));
	dd_err e = {0};
	int st;

	if (!d || !(d->d_path = dd_strdup(path))) {
		dd_free(d);
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	}
	d->d_fd = -1;
	d->d_conf_size = size;
	d->d_block_size = block_size;
	d->d_block_max = block_max > block_size ? block_max : block_size;
	memcpy(d->d_store_id, store_id, 16);
	pthread_mutex_init(&d->d_lock, NULL);
	pthread_cond_init(&d->d_cond, NULL);
	st = dd_l2dev_attach(d, &e);
	if (st < 0) {
		dd_err_copy(err, &e);
		dd_l2dev_close(d);
		return DD_ENOMEM;
	}
	if (st > 0) {
		dd_l2dev_set_state(d, st, e.de_code, e.de_msg);
		if (st == DD_CACHE_MISSING)
			snprintf(d->d_msg, sizeof(d->d_msg), "no such file");
		*out = d;
		return 0;
	}
	d->d_state = DD_CACHE_REBUILDING;
	d->d_rebuilding = true;
	if (pthread_create(&d->d_thread, NULL, dd_l2dev_rebuild, d) != 0) {
		d->d_rebuilding = false;
		dd_l2dev_set_state(d, DD_CACHE_FAULTED, DD_ENOMEM,
				   "cannot start the rebuild thread");
	} else {
		d->d_thread_started = true;
	}
	*out = d;
	return 0;
}

void dd_l2dev_close(dd_l2dev *d)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->d_lock);
	d->d_stop = true;
	pthread_mutex_unlock(&d->d_lock);
	if (d->d_thread_started)
		pthread_join(d->d_thread, NULL);
	if (d->d_fd >= 0)
		dd_io_close(d->d_fd);   /* releases the flock */
	pthread_mutex_destroy(&d->d_lock);
	pthread_cond_destroy(&d->d_cond);
	dd_free(d->d_ents);
	dd_free(d->d_tab);
	dd_free(d->d_batch);
	dd_free(d->d_path);
	dd_free(d);
}

const char *dd_l2dev_path(const dd_l2dev *d)
{
	return d->d_path;
}

int dd_l2dev_state(dd_l2dev *d)
{
	int st;

	pthread_mutex_lock(&d->d_lock);
	st = d->d_state;
	pthread_mutex_unlock(&d->d_lock);
	return st;
}

void dd_l2dev_info(dd_l2dev *d, dd_cache_dev *out)
{
	memset(out, 0, sizeof(*out));
	snprintf(out->path, sizeof(out->path), "%s", d->d_path);
	pthread_mutex_lock(&d->d_lock);
	out->size = d->d_conf_size ? d->d_conf_size : d->d_hdr.lh_dev_bytes;
	out->entries = d->d_live;
	out->bytes = d->d_bytes;
	out->state = d->d_state;
	if (d->d_state != DD_CACHE_ONLINE)
		snprintf(out->message, sizeof(out->message), "%s", d->d_msg);
	pthread_mutex_unlock(&d->d_lock);
}

void dd_l2dev_wait_rebuild(dd_l2dev *d)
{
	pthread_mutex_lock(&d->d_lock);
	while (d->d_rebuilding)
		pthread_cond_wait(&d->d_cond, &d->d_lock);
	pthread_mutex_unlock(&d->d_lock);
}

void dd_l2dev_figures(dd_l2dev *d, dd_l2_figures *out)
{
	pthread_mutex_lock(&d->d_lock);
	out->lf_entries = d->d_live;
	out->lf_bytes = d->d_bytes;
	out->lf_ring = d->d_state == DD_CACHE_ONLINE ||
		       d->d_state == DD_CACHE_FULL ||
		       d->d_state == DD_CACHE_REBUILDING ? d->d_hdr.lh_ring : 0;
	out->lf_rebuilds = d->d_rebuilds;
	out->lf_rebuild_entries = d->d_rebuild_entries;
	out->lf_rebuild_ms = d->d_rebuild_ms;
	out->lf_log_errors = d->d_log_errors;
	pthread_mutex_unlock(&d->d_lock);
}

/* ---- reads -------------------------------------------------------------------*/

/* Reads from the device through common/io.c, where read faults are
 * injected; without the test read delay, which models the slow disks the
 * packs sit on, where a cache device is the fast tier. */
static int dd_l2_pread(dd_l2dev *d, dd_err *err, void *buf, size_t len,
		       uint64_t off)
{
	return dd_io_pread_full_nodelay(err, d->d_fd, buf, len, off,
					d->d_path);
}

bool dd_l2dev_contains(dd_l2dev *d, const uint8_t key[DD_CACHE_KEY_SIZE])
{
	bool found;

	pthread_mutex_lock(&d->d_lock);
	found = dd_l2_find(d, key) != UINT32_MAX;
	pthread_mutex_unlock(&d->d_lock);
	return found;
}

/* After a block failed its hash: damage if the entry is still indexed at
 * the same place (then it is dropped), a race with the hand otherwise. */
static int dd_l2dev_mismatch(dd_l2dev *d, const uint8_t key[DD_CACHE_KEY_SIZE],
			     uint32_t off)
{
	uint32_t pos;
	int rc = DD_L2_MISS;

	pthread_mutex_lock(&d->d_lock);
	pos = dd_l2_find(d, key);
	if (pos != UINT32_MAX &&
	    d->d_ents[d->d_tab[pos] & ~d->d_fpmask].e_off == off) {
		dd_l2_kill(d, pos);
		rc = DD_L2_CKSUM;
	}
	pthread_mutex_unlock(&d->d_lock);
	return rc;
}

int dd_l2dev_read(dd_l2dev *d, dd_hasher *h,
		  const uint8_t key[DD_CACHE_KEY_SIZE], uint32_t lsize,
		  void *dst)
{
	uint8_t got[DD_HASH_SIZE];
	uint32_t pos, off = 0;
	dd_err e;

	pthread_mutex_lock(&d->d_lock);
	pos = d->d_state == DD_CACHE_ONLINE || d->d_state == DD_CACHE_FULL ||
	      d->d_state == DD_CACHE_REBUILDING ? dd_l2_find(d, key)
						: UINT32_MAX;
	if (pos != UINT32_MAX) {
		const dd_l2ent *ent = &d->d_ents[d->d_tab[pos] & ~d->d_fpmask];

		off = ent->e_off;
		if (dd_l2_lsize(ent) != lsize)
			pos = UINT32_MAX;   /* not the block the DDT means */
	}
	pthread_mutex_unlock(&d->d_lock);
	if (pos == UINT32_MAX)
		return DD_L2_MISS;
	if (dd_l2_pread(d, &e, dst, lsize,
			DD_L2_DATA_START + (uint64_t)off * DD_L2_SECTOR)) {
		pthread_mutex_lock(&d->d_lock);
		dd_l2dev_fail_io(d, &e);
		pthread_mutex_unlock(&d->d_lock);
		return DD_L2_IOERR;
	}
	dd_hasher_sum(h, dst, lsize, got);
	if (memcmp(got, key, DD_HASH_SIZE) != 0)
		return dd_l2dev_mismatch(d, key, off);
	return DD_L2_HIT;
}

/* ---- batches -----------------------------------------------------------------*/

uint64_t dd_l2_batch_bytes(const dd_l2_item *items)
{
	uint64_t data = 0;
	uint32_t n = 0;

	for (const dd_l2_item *it = items; it; it = it->it_next, n++)
		data += dd_l2_align(it->it_lsize);
	return data + dd_l2_log_size(n);
}

uint64_t dd_l2dev_batch_max(dd_l2dev *d)
{
	uint64_t max = d->d_hdr.lh_ring / 8;

	if (max > DD_L2_BATCH_MAX)
		max = DD_L2_BATCH_MAX;
	if (max < d->d_block_max + DD_L2_SECTOR)
		max = d->d_block_max + DD_L2_SECTOR;
	return max;
}

/* Where a batch of `total` bytes goes: skips the ring's tail when it does
 * not fit, and pops the entries of everything it claims.  d_lock held. */
static uint64_t dd_l2_claim(dd_l2dev *d, uint64_t total, uint32_t nitems)
{
	uint64_t ring = d->d_hdr.lh_ring, hand = d->d_end % ring;
	uint64_t skip_from = ring, skip_to = ring;

	if (hand + total > ring) {
		skip_from = hand;       /* [hand, ring) is given up */
		d->d_end += ring - hand;
		hand = 0;
	}
	while (d->d_count) {
		uint64_t at = (uint64_t)d->d_ents[d->d_head].e_off * DD_L2_SECTOR;
		bool claimed = (at >= hand && at < hand + total) ||
			       (at >= skip_from && at < skip_to);

		if (!claimed && d->d_count + nitems <= d->d_cap)
			break;
		dd_l2_pop_front(d);
	}
	return hand;
}

/* Lays the batch out in d_batch: blocks, then the log block. */
static int dd_l2_build(dd_l2dev *d, dd_err *err, const dd_l2_item *items,
		       uint64_t hand, uint64_t lpos, dd_l2_log *log,
		       dd_l2_logent **ents_out, uint64_t *total)
{
	uint64_t data = 0, size = dd_l2_batch_bytes(items);
	uint32_t n = 0;
	dd_l2_logent *ents;

	for (const dd_l2_item *it = items; it; it = it->it_next)
		n++;
	if (d->d_batch_cap < size) {
		uint8_t *b = dd_realloc(d->d_batch, size);

		if (!b)
			return dd_err_set(err, DD_ENOMEM, "out of memory");
		d->d_batch = b;
		d->d_batch_cap = size;
	}
	ents = dd_malloc(n * sizeof(*ents));
	if (!ents)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	n = 0;
	for (const dd_l2_item *it = items; it; it = it->it_next, n++) {
		uint64_t a = dd_l2_align(it->it_lsize);

		memcpy(d->d_batch + data, it->it_data, it->it_lsize);
		memset(d->d_batch + data + it->it_lsize, 0, a - it->it_lsize);
		memcpy(ents[n].le_key, it->it_key, DD_CACHE_KEY_SIZE);
		ents[n].le_off = (uint32_t)((hand + data) / DD_L2_SECTOR);
		ents[n].le_lsize = it->it_lsize;
		data += a;
	}
	log->ll_nents = n;
	log->ll_lpos = lpos + data;
	dd_l2_log_encode(d->d_batch + data, log, ents);
	*ents_out = ents;
	*total = size;
	return 0;
}

/* Data and log block, then the header that points at the log block. */
static int dd_l2_commit(dd_l2dev *d, dd_err *err, uint64_t hand,
			uint64_t total, const dd_l2_hdr *nh)
{
	uint8_t slot[DD_L2_HDR_SIZE];
	int rc;

	rc = dd_io_pwrite_full(err, d->d_fd, d->d_batch, total,
			       DD_L2_DATA_START + hand, d->d_path);
	if (!rc)
		rc = dd_io_fdatasync(err, d->d_fd, d->d_path);
	if (rc)
		return rc;
	dd_l2_hdr_encode(slot, nh);
	rc = dd_io_pwrite_full(err, d->d_fd, slot, sizeof(slot),
			       (nh->lh_seq % 2) * DD_L2_HDR_SLOT, d->d_path);
	if (!rc)
		rc = dd_io_fdatasync(err, d->d_fd, d->d_path);
	return rc;
}

int dd_l2dev_write_batch(dd_l2dev *d, const dd_l2_item *items,
			 uint64_t *written)
{
	dd_l2_logent *ents = NULL;
	dd_l2_log log = {0};
	dd_l2_hdr nh;
	uint64_t hand, lpos, total = dd_l2_batch_bytes(items);
	uint32_t n = 0;
	dd_err e = {0};
	int rc;

	*written = 0;
	for (const dd_l2_item *it = items; it; it = it->it_next)
		n++;
	pthread_mutex_lock(&d->d_lock);
	if (d->d_state != DD_CACHE_ONLINE || !n || total > d->d_hdr.lh_ring) {
		pthread_mutex_unlock(&d->d_lock);
		return DD_ENOENT;
	}
	hand = dd_l2_claim(d, total, n);
	lpos = d->d_end;
	nh = d->d_hdr;
	pthread_mutex_unlock(&d->d_lock);

	log.ll_seq = nh.lh_log_seq + 1;
	memcpy(log.ll_dev_id, nh.lh_dev_id, 16);
	log.ll_prev_lpos = nh.lh_log_lpos;
	log.ll_prev_size = nh.lh_log_size;
	rc = dd_l2_build(d, &e, items, hand, lpos, &log, &ents, &total);
	nh.lh_seq++;
	nh.lh_log_seq = log.ll_seq;
	nh.lh_log_lpos = log.ll_lpos;
	nh.lh_log_size = log.ll_size;
	if (!rc)
		rc = dd_l2_commit(d, &e, hand, total, &nh);

	pthread_mutex_lock(&d->d_lock);
	if (rc) {
		if (rc != DD_ENOMEM)
			dd_l2dev_fail_io(d, &e);
	} else {
		d->d_hdr = nh;
		d->d_end = lpos + total;
		for (uint32_t i = 0; i < n; i++)
			dd_l2_push(d, &ents[i], false);
		*written = total + DD_L2_HDR_SIZE;
	}
	pthread_mutex_unlock(&d->d_lock);
	dd_free(ents);
	return rc;
}

/* ---- rebuild -----------------------------------------------------------------*/

/* Indexes the entries of one log block (at ring offset phys) that are
 * still intact, newest first.  d_lock held. */
static void dd_l2_restore(dd_l2dev *d, const uint8_t *buf, const dd_l2_log *log,
			  uint64_t phys, uint64_t end)
{
	uint64_t ring = d->d_hdr.lh_ring;

	for (uint32_t i = log->ll_nents; i-- > 0;) {
		dd_l2_logent le;
		uint64_t at, lpos;

		dd_l2_log_ent(buf, i, &le);
		at = (uint64_t)le.le_off * DD_L2_SECTOR;
		/* A batch's blocks lie just before its log block. */
		if (at + dd_l2_align(le.le_lsize) > phys ||
		    le.le_lsize > d->d_block_max)
			continue;
		lpos = log->ll_lpos - (phys - at);
		if (lpos + ring < end)
			continue;       /* overwritten since */
		dd_l2_push(d, &le, true);
		d->d_rebuild_entries++;
	}
}

/* One step of the walk: reads and checks the log block at lpos. */
static int dd_l2_rebuild_step(dd_l2dev *d, dd_err *e, uint8_t *buf,
			      uint64_t seq, uint64_t lpos, uint32_t size,
			      uint64_t end, dd_l2_log *log)
{
	uint64_t ring = d->d_hdr.lh_ring, phys = lpos % ring;
	int rc;

	if (phys + size > ring)
		return dd_err_set(e, DD_ECORRUPT, "log block %llu crosses the "
				  "end of the ring", (unsigned long long)seq);
	rc = dd_l2_pread(d, e, buf, size, DD_L2_DATA_START + phys);
	if (rc)
		return rc == DD_ECORRUPT ? rc : DD_EIO;
	rc = dd_l2_log_decode(e, buf, size, log);
	if (!rc && (log->ll_seq != seq || log->ll_lpos != lpos ||
		    log->ll_size != size ||
		    memcmp(log->ll_dev_id, d->d_hdr.lh_dev_id, 16) != 0))
		rc = dd_err_set(e, DD_ECORRUPT, "log block %llu is not the "
				"one its successor names",
				(unsigned long long)seq);
	if (rc)
		return rc == DD_EIO ? DD_ECORRUPT : rc;
	pthread_mutex_lock(&d->d_lock);
	dd_l2_restore(d, buf, log, phys, end);
	pthread_mutex_unlock(&d->d_lock);
	return 0;
}

/* Walks the chain of log blocks from the newest while they are intact. */
static void dd_l2_rebuild_walk(dd_l2dev *d, uint8_t *buf)
{
	uint64_t seq = d->d_hdr.lh_log_seq, lpos = d->d_hdr.lh_log_lpos;
	uint64_t end = d->d_end, ring = d->d_hdr.lh_ring;
	uint32_t size = d->d_hdr.lh_log_size;
	dd_err e;

	while (seq > 0 && size > 0 && lpos + ring >= end) {
		dd_l2_log log;
		bool stop;
		int rc;

		pthread_mutex_lock(&d->d_lock);
		stop = d->d_stop || d->d_count == d->d_cap;
		pthread_mutex_unlock(&d->d_lock);
		if (stop)
			return;
		rc = dd_l2_rebuild_step(d, &e, buf, seq, lpos, size, end, &log);
		if (rc) {
			pthread_mutex_lock(&d->d_lock);
			if (rc == DD_EIO) {
				dd_l2dev_fail_io(d, &e);
			} else {
				/* A damaged log block ends the walk: what
				 * it and older ones held is not indexed. */
				d->d_log_errors++;
				dd_err_set(&d->d_warn, rc, "cache device %s: "
					   "%s; older entries are dropped",
					   d->d_path, e.de_msg);
				d->d_warn_pending = true;
			}
			pthread_mutex_unlock(&d->d_lock);
			return;
		}
		if (log.ll_prev_size && log.ll_prev_lpos + log.ll_prev_size > lpos)
			return;         /* chains only run backwards */
		seq--;
		lpos = log.ll_prev_lpos;
		size = log.ll_prev_size;
	}
}

static void *dd_l2dev_rebuild(void *arg)
{
	dd_l2dev *d = arg;
	uint64_t t0 = dd_cache_now_ns();
	uint8_t *buf = dd_malloc(dd_l2_log_size(DD_L2_LOG_MAX_ENTS));

	if (buf)
		dd_l2_rebuild_walk(d, buf);
	dd_free(buf);
	pthread_mutex_lock(&d->d_lock);
	if (!buf)
		dd_l2dev_set_state(d, DD_CACHE_FAULTED, DD_ENOMEM,
				   "out of memory for the rebuild");
	if (d->d_state == DD_CACHE_REBUILDING)
		d->d_state = DD_CACHE_ONLINE;
	d->d_rebuilds++;
	d->d_rebuild_ms += (dd_cache_now_ns() - t0) / 1000000;
	d->d_rebuilding = false;
	pthread_cond_broadcast(&d->d_cond);
	pthread_mutex_unlock(&d->d_lock);
	return NULL;
}

/* ---- format ------------------------------------------------------------------*/

/* Refuses a device that holds something: another store's cache, or
 * non-zero bytes where the header goes. */
static int dd_l2_format_check(dd_err *err, int fd, const char *path,
			      const uint8_t store_id[16], uint64_t bytes)
{
	uint8_t area[DD_L2_DATA_START];
	dd_l2_hdr h;
	dd_err e;
	size_t got;
	int rc;

	rc = dd_io_pread(err, fd, area, sizeof(area), 0, &got, path);
	if (rc)
		return rc;
	if (got < sizeof(area))
		memset(area + got, 0, sizeof(area) - got);
	if (dd_l2_pick_hdr(&e, area, &h) == 0) {
		if (memcmp(h.lh_store_id, store_id, 16) == 0)
			return 0;
		return dd_err_set(err, DD_EEXIST, "%s holds the cache of "
				  "another store (force to reformat)", path);
	}
	if (!dd_is_zero(area, sizeof(area)))
		return dd_err_set(err, DD_EEXIST, "%s holds data (force to "
				  "reformat it as a cache device)", path);
	(void)bytes;
	return 0;
}

/* Gives a regular file its size, allocated when the file system can. */
static int dd_l2_size_file(dd_err *err, int fd, const char *path,
			   uint64_t size)
{
	int e;

	if (dd_io_ftruncate(err, fd, size, path))
		return err->de_code;
	e = posix_fallocate(fd, 0, (off_t)size);
	if (e == ENOSPC || e == EFBIG)
		return dd_err_set_errno(err, e, "allocate %s", path);
	return 0;   /* EOPNOTSUPP etc.: stays sparse; a write may fail later */
}

/* Writes slot 0 empty and slot 1 with header seq 1. */
static int dd_l2_write_fresh(dd_err *err, int fd, const char *path,
			     const uint8_t store_id[16], uint64_t bytes)
{
	uint8_t area[DD_L2_DATA_START];
	dd_l2_hdr h;
	uint64_t ring = (bytes - DD_L2_DATA_START) / DD_L2_SECTOR * DD_L2_SECTOR;

	if (ring / DD_L2_SECTOR > UINT32_MAX)
		ring = (uint64_t)UINT32_MAX * DD_L2_SECTOR;
	memset(&h, 0, sizeof(h));
	memcpy(h.lh_store_id, store_id, 16);
	if (getrandom(h.lh_dev_id, sizeof(h.lh_dev_id), 0) !=
	    (ssize_t)sizeof(h.lh_dev_id))
		return dd_err_set_errno(err, errno, "getrandom");
	h.lh_dev_bytes = bytes;
	h.lh_ring = ring;
	h.lh_seq = 1;
	h.lh_ctime = (int64_t)time(NULL);
	memset(area, 0, sizeof(area));
	dd_l2_hdr_encode(area + DD_L2_HDR_SLOT, &h);
	if (dd_io_pwrite_full(err, fd, area, sizeof(area), 0, path) ||
	    dd_io_fdatasync(err, fd, path))
		return err->de_code;
	return 0;
}

static int dd_l2_format_fd(dd_err *err, int fd, const char *path,
			   uint64_t size, const uint8_t store_id[16],
			   bool force, bool created, uint64_t *used)
{
	struct stat st;
	uint64_t bytes;
	int rc;

	if (fstat(fd, &st) != 0 || dd_l2_dev_bytes(fd, &bytes))
		return dd_err_set_errno(err, errno, "stat %s", path);
	if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
		return dd_err_set(err, DD_EINVAL, "%s: not a regular file or "
				  "block device", path);
	if (!created && !force) {
		rc = dd_l2_format_check(err, fd, path, store_id, bytes);
		if (rc)
			return rc;
	}
	if (size == 0)
		size = bytes;
	if (size < DD_L2_MIN_BYTES)
		return dd_err_set(err, DD_EINVAL, "%s: a cache device needs at "
				  "least %llu bytes", path,
				  (unsigned long long)DD_L2_MIN_BYTES);
	if (size > bytes) {
		if (!S_ISREG(st.st_mode))
			return dd_err_set(err, DD_EINVAL, "%s: device is only "
					  "%llu bytes", path,
					  (unsigned long long)bytes);
		rc = dd_l2_size_file(err, fd, path, size);
		if (rc)
			return rc;
	}
	*used = size;
	return dd_l2_write_fresh(err, fd, path, store_id, size);
}

int dd_l2_format(dd_err *err, const char *path, uint64_t size,
		 const uint8_t store_id[16], bool force, uint64_t *used)
{
	bool created = false;
	int fd, rc;

	fd = dd_io_open(err, path, O_RDWR, 0);
	if (fd == DD_ENOENT) {
		if (size == 0)
			return dd_err_set(err, DD_EINVAL, "%s does not exist: "
					  "give its size", path);
		fd = dd_io_open(err, path, O_RDWR | O_CREAT | O_EXCL, 0600);
		created = fd >= 0;
	}
	if (fd < 0)
		return fd;
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		dd_io_close(fd);
		return dd_err_set(err, DD_EBUSY, "%s is in use by another "
				  "process", path);
	}
	rc = dd_l2_format_fd(err, fd, path, size, store_id, force, created,
			     used);
	dd_io_close(fd);
	if (rc && created)
		unlink(path);
	return rc;
}
