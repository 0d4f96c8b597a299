/*
 * l2dev.c -- one L2 cache device: a ring of blocks indexed by log blocks
 * (format/cache.md).  This file owns a device's life (open, state,
 * close), its reads and its batch writes; l2index.c the index in RAM and
 * its rebuild from the log, l2mkdev.c formatting a device; l2dev_internal.h
 * the device's state, which the three share.
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
#include <unistd.h>

#include "cache/l2dev_internal.h"
#include "common/alloc.h"
#include "common/endian.h"
#include "common/io.h"

/* ---- state and warnings ----------------------------------------------------*/

/* Records a new state with its reason and a warning to give once.  Called
 * with d_lock held. */
void dd_l2dev_set_state(dd_l2dev *d, int state, int code,
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
void dd_l2dev_fail_io(dd_l2dev *d, const dd_err *e)
{
	if (d->d_state != DD_CACHE_ONLINE && d->d_state != DD_CACHE_FULL &&
	    d->d_state != DD_CACHE_REBUILDING)
		return;
	if (e->de_code == DD_ENOSPC)
		dd_l2dev_set_state(d, DD_CACHE_FULL, e->de_code, e->de_msg);
	else
		dd_l2dev_set_state(d, DD_CACHE_FAULTED, e->de_code, e->de_msg);
}

/* ---- open ------------------------------------------------------------------*/

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
int dd_l2_pread(dd_l2dev *d, dd_err *err, void *buf, size_t len,
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

