/*
 * l2index.c -- an L2 device's index in RAM, and its rebuild from the
 * device's log at open (format/cache.md §4).
 *
 * In RAM, the index (cache_internal.h, dd_l2ent) is a ring of entries in
 * the device's own order, oldest first, plus a hash table of u32 slots
 * pointing into it.  Because both rings run in step, the entries a batch
 * will overwrite are exactly those at the front: the feeder pops them
 * before it writes.  45 bytes of RAM per cached block, fixed at open
 * (ring / block size entries): memory never grows with use.
 *
 * The rebuild walks the chain of log blocks back from the newest the
 * header names and indexes each entry still intact: a block written at
 * logical position p is, while the newest batch ends at most at p + R
 * (l2dev.c).  It runs on its own thread while the feeder waits; readers
 * find what it has indexed so far.
 */
#include <string.h>

#include "cache/l2dev_internal.h"
#include "common/alloc.h"
#include "common/endian.h"

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

uint32_t dd_l2_lsize(const dd_l2ent *e)
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
uint32_t dd_l2_find(const dd_l2dev *d,
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
void dd_l2_kill(dd_l2dev *d, uint32_t pos)
{
	dd_l2ent *e = &d->d_ents[d->d_tab[pos] & ~d->d_fpmask];

	e->e_meta |= (uint32_t)DD_L2E_DEAD << 28;
	d->d_live--;
	d->d_bytes -= dd_l2_lsize(e);
	dd_l2_tab_delete(d, pos);
}

void dd_l2_pop_front(dd_l2dev *d)
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
void dd_l2_push(dd_l2dev *d, const dd_l2_logent *le, bool front)
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
int dd_l2_index_alloc(dd_l2dev *d, dd_err *err, uint64_t ring)
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

void *dd_l2dev_rebuild(void *arg)
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

