/*
 * cache.c -- a store handle's caches: L1, the L2 devices, the feed and
 * the figures.
 *
 * A read asks L1, then each device in turn, then gives up (the store
 * reads the pack and offers the block back with dd_cache_put).  A block
 * served by L2 enters L1 marked as being in L2, so leaving L1 later costs
 * nothing; any other block leaving L1 is offered to the feed, unless it
 * came in through a long sequential read (ZFS: l2arc_noprefetch) or the
 * feed queue is full.  The feeder spreads batches over the devices round
 * robin.
 *
 * A block of a long sequential read (DD_CACHE_SEQ: a restore, a copy, a
 * send) does not enter L1 at all: it is read once, S3-FIFO would drop it
 * unread from its small FIFO, and the copy into a fresh buffer (malloc,
 * page faults, memcpy, free) was 10-15% of a `dedup get` (issue 18).  L2
 * sees what it saw when such blocks went through L1: nothing, unless
 * l2_feed_sequential asks for them, and then they are offered to the
 * feed at once, as without L1.
 *
 * Devices open lazily, at the first read or query: a handle that never
 * reads blocks -- a writer, gc -- never takes a device's lock, so it never
 * keeps a reader in another process from using the cache.
 *
 * Locks, in the order they nest: L1's lock, then c_devlock (read), then a
 * device's lock, then the feed's.  c_devlock guards the device array; it
 * is taken for writing only to attach or detach.  Warnings are given
 * outside every lock.  The figures are relaxed atomics: each is exact,
 * a set of them is not a snapshot.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cache/cache_internal.h"
#include "common/alloc.h"

struct dd_cache {
	dd_cache_params c_p;
	char **c_paths;            /* configured devices */
	uint64_t *c_sizes;
	size_t c_npaths;
	dd_l1 *c_l1;

	pthread_mutex_t c_open_lock;
	atomic_bool c_opened;      /* devices opened (lazily) */
	pthread_rwlock_t c_devlock;
	dd_l2dev **c_devs;
	size_t c_ndevs;
	dd_feed *c_feed;           /* set once at open, before c_opened */
	size_t c_rr;               /* next device to feed (feeder only) */

	atomic_uint_least64_t c_l1_hits, c_l1_misses;
	atomic_uint_least64_t c_l2_hits, c_l2_misses, c_l2_read_bytes;
	atomic_uint_least64_t c_l2_write_bytes, c_l2_cksum, c_l2_dev_errors;
	atomic_uint_least64_t c_l2_drops, c_pack_ops, c_pack_bytes;
};

uint64_t dd_cache_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void dd_count(atomic_uint_least64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static uint64_t dd_load(atomic_uint_least64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

/* ---- warnings ---------------------------------------------------------------*/

/* Gives each device's pending warning, once; counts the failures. */
static void dd_cache_warn(dd_cache *c)
{
	dd_err e;

	pthread_rwlock_rdlock(&c->c_devlock);
	for (size_t i = 0; i < c->c_ndevs; i++) {
		int st;

		if (!dd_l2dev_take_warning(c->c_devs[i], &e))
			continue;
		st = dd_l2dev_state(c->c_devs[i]);
		if (st != DD_CACHE_ONLINE && st != DD_CACHE_REBUILDING &&
		    st != DD_CACHE_BUSY)
			dd_count(&c->c_l2_dev_errors, 1);
		if (c->c_p.cp_warn)
			c->c_p.cp_warn(c->c_p.cp_warn_ctx, &e);
	}
	pthread_rwlock_unlock(&c->c_devlock);
}

/* ---- the feed ------------------------------------------------------------------*/

/* c_devlock held for reading. */
static bool dd_cache_in_l2_locked(dd_cache *c,
				  const uint8_t key[DD_CACHE_KEY_SIZE])
{
	for (size_t i = 0; i < c->c_ndevs; i++)
		if (dd_l2dev_contains(c->c_devs[i], key))
			return true;
	return false;
}

/* The feed, when a block with these flags deserves L2; else NULL. */
static dd_feed *dd_cache_feedable(dd_cache *c,
				  const uint8_t key[DD_CACHE_KEY_SIZE],
				  unsigned flags)
{
	dd_feed *feed = NULL;

	if ((flags & DD_L1_IN_L2) ||
	    ((flags & DD_L1_SEQ) && !c->c_p.cp_feed_seq))
		return NULL;
	pthread_rwlock_rdlock(&c->c_devlock);
	if (!dd_cache_in_l2_locked(c, key))
		feed = c->c_feed;
	pthread_rwlock_unlock(&c->c_devlock);
	return feed;
}

/* Hands a block to the feed (taking data) when it deserves L2. */
static void dd_cache_offer(dd_cache *c, const uint8_t key[DD_CACHE_KEY_SIZE],
			   uint8_t *data, uint32_t lsize, unsigned flags)
{
	dd_feed *feed = dd_cache_feedable(c, key, flags);

	if (!feed) {
		dd_free(data);
		return;
	}
	if (!dd_feed_offer(feed, key, data, lsize)) {
		dd_count(&c->c_l2_drops, 1);
		dd_free(data);
	}
}

static void dd_cache_evicted(void *ctx, const uint8_t key[DD_CACHE_KEY_SIZE],
			     uint8_t *data, uint32_t lsize, unsigned flags)
{
	dd_cache_offer(ctx, key, data, lsize, flags);
}

/* The next device able to take a batch, round robin; waits for its
 * rebuild.  c_devlock held for reading. */
static dd_l2dev *dd_cache_pick(dd_cache *c)
{
	for (size_t k = 0; k < c->c_ndevs; k++) {
		dd_l2dev *d = c->c_devs[c->c_rr++ % c->c_ndevs];
		int st = dd_l2dev_state(d);

		if (st == DD_CACHE_REBUILDING) {
			dd_l2dev_wait_rebuild(d);
			st = dd_l2dev_state(d);
		}
		if (st == DD_CACHE_ONLINE)
			return d;
	}
	return NULL;
}

static void dd_cache_free_items(dd_l2_item *items)
{
	while (items) {
		dd_l2_item *nx = items->it_next;

		dd_l2_item_free(items);
		items = nx;
	}
}

/* Writes items to d in chunks the device takes in one batch. */
static void dd_cache_write_chunks(dd_cache *c, dd_l2dev *d, dd_l2_item *items)
{
	uint64_t max = dd_l2dev_batch_max(d);

	while (items) {
		dd_l2_item *last = items, *rest;
		uint64_t data = dd_l2_align(items->it_lsize), written;
		uint32_t n = 1;

		while (last->it_next && n < DD_L2_LOG_MAX_ENTS) {
			uint64_t more = data + dd_l2_align(last->it_next->it_lsize);

			if (more + dd_l2_log_size(n + 1) > max)
				break;
			data = more;
			n++;
			last = last->it_next;
		}
		rest = last->it_next;
		last->it_next = NULL;
		if (dd_l2dev_write_batch(d, items, &written) == 0)
			dd_count(&c->c_l2_write_bytes, written);
		dd_cache_free_items(items);
		items = rest;
	}
}

static void dd_cache_feed_write(void *ctx, dd_l2_item *items)
{
	dd_cache *c = ctx;
	dd_l2_item *keep = NULL, **tail = &keep;
	dd_l2dev *d;

	pthread_rwlock_rdlock(&c->c_devlock);
	/* Drop what reached L2 meanwhile (read again, evicted again). */
	while (items) {
		dd_l2_item *nx = items->it_next;

		items->it_next = NULL;
		if (dd_cache_in_l2_locked(c, items->it_key)) {
			dd_l2_item_free(items);
		} else {
			*tail = items;
			tail = &items->it_next;
		}
		items = nx;
	}
	d = dd_cache_pick(c);
	if (d)
		dd_cache_write_chunks(c, d, keep);
	pthread_rwlock_unlock(&c->c_devlock);
	while (!d && keep) {
		dd_l2_item *nx = keep->it_next;

		dd_count(&c->c_l2_drops, 1);
		dd_l2_item_free(keep);
		keep = nx;
	}
	dd_cache_warn(c);
}

/* ---- devices ---------------------------------------------------------------------*/

/* The longest block the store has (cache.h). */
static uint32_t dd_cache_block_max(const dd_cache *c)
{
	return c->c_p.cp_block_max > c->c_p.cp_block_size
		       ? c->c_p.cp_block_max : c->c_p.cp_block_size;
}

/* Opens one device into the array.  c_devlock held for writing. */
static int dd_cache_open_dev(dd_cache *c, dd_err *err, const char *path,
			     uint64_t size)
{
	dd_l2dev **devs, *d;
	int rc;

	devs = dd_realloc(c->c_devs, (c->c_ndevs + 1) * sizeof(*devs));
	if (!devs)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	c->c_devs = devs;
	rc = dd_l2dev_open(&d, err, path, size, c->c_p.cp_store_id,
			   c->c_p.cp_block_size, dd_cache_block_max(c));
	if (rc)
		return rc;
	c->c_devs[c->c_ndevs++] = d;
	return 0;
}

/* Opens the configured devices and starts the feed, once. */
static void dd_cache_open(dd_cache *c)
{
	dd_err err;

	if (atomic_load_explicit(&c->c_opened, memory_order_acquire))
		return;
	pthread_mutex_lock(&c->c_open_lock);
	if (!atomic_load_explicit(&c->c_opened, memory_order_relaxed) &&
	    !c->c_p.cp_no_l2 && c->c_npaths) {
		pthread_rwlock_wrlock(&c->c_devlock);
		for (size_t i = 0; i < c->c_npaths; i++)
			if (dd_cache_open_dev(c, &err, c->c_paths[i],
					      c->c_sizes[i]) && c->c_p.cp_warn)
				c->c_p.cp_warn(c->c_p.cp_warn_ctx, &err);
		if (dd_feed_new(&c->c_feed, &err, c->c_p.cp_l2_write_max,
				dd_cache_block_max(c), dd_cache_feed_write,
				c) && c->c_p.cp_warn)
			c->c_p.cp_warn(c->c_p.cp_warn_ctx, &err);
		pthread_rwlock_unlock(&c->c_devlock);
	}
	atomic_store_explicit(&c->c_opened, true, memory_order_release);
	pthread_mutex_unlock(&c->c_open_lock);
	dd_cache_warn(c);
}

static int dd_cache_add_path(dd_cache *c, dd_err *err, const char *path,
			     uint64_t size)
{
	char **paths = dd_realloc(c->c_paths, (c->c_npaths + 1) * sizeof(*paths));
	uint64_t *sizes;

	if (paths)
		c->c_paths = paths;
	sizes = paths ? dd_realloc(c->c_sizes, (c->c_npaths + 1) *
				   sizeof(*sizes)) : NULL;
	if (sizes)
		c->c_sizes = sizes;
	if (!paths || !sizes || !(c->c_paths[c->c_npaths] = dd_strdup(path)))
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	c->c_sizes[c->c_npaths++] = size;
	return 0;
}

int dd_cache_attach(dd_cache *c, dd_err *err, const char *path, uint64_t size)
{
	int rc = 0;

	dd_cache_open(c);
	pthread_mutex_lock(&c->c_open_lock);
	for (size_t i = 0; i < c->c_npaths; i++)
		if (!strcmp(c->c_paths[i], path))
			rc = dd_err_set(err, DD_EEXIST, "%s is a cache device "
					"of this store already", path);
	if (!rc)
		rc = dd_cache_add_path(c, err, path, size);
	if (!rc && !c->c_p.cp_no_l2) {
		pthread_rwlock_wrlock(&c->c_devlock);
		rc = dd_cache_open_dev(c, err, path, size);
		if (!rc && !c->c_feed)
			rc = dd_feed_new(&c->c_feed, err, c->c_p.cp_l2_write_max,
					 dd_cache_block_max(c),
					 dd_cache_feed_write, c);
		pthread_rwlock_unlock(&c->c_devlock);
	}
	pthread_mutex_unlock(&c->c_open_lock);
	dd_cache_warn(c);
	return rc;
}

int dd_cache_detach(dd_cache *c, const char *path)
{
	dd_l2dev *gone = NULL;
	int rc = DD_ENOENT;

	dd_cache_open(c);
	pthread_mutex_lock(&c->c_open_lock);
	for (size_t i = 0; i < c->c_npaths; i++) {
		if (strcmp(c->c_paths[i], path))
			continue;
		dd_free(c->c_paths[i]);
		memmove(&c->c_paths[i], &c->c_paths[i + 1],
			(c->c_npaths - i - 1) * sizeof(*c->c_paths));
		memmove(&c->c_sizes[i], &c->c_sizes[i + 1],
			(c->c_npaths - i - 1) * sizeof(*c->c_sizes));
		c->c_npaths--;
		rc = 0;
		break;
	}
	/* Waits for the readers and the feeder's batch on the device. */
	pthread_rwlock_wrlock(&c->c_devlock);
	for (size_t i = 0; i < c->c_ndevs; i++) {
		if (strcmp(dd_l2dev_path(c->c_devs[i]), path))
			continue;
		gone = c->c_devs[i];
		memmove(&c->c_devs[i], &c->c_devs[i + 1],
			(c->c_ndevs - i - 1) * sizeof(*c->c_devs));
		c->c_ndevs--;
		break;
	}
	pthread_rwlock_unlock(&c->c_devlock);
	pthread_mutex_unlock(&c->c_open_lock);
	dd_l2dev_close(gone);
	return rc;
}

/* ---- reads ------------------------------------------------------------------------*/

/* Asks each device; 0 and the block in dst on a hit. */
static int dd_cache_l2_get(dd_cache *c, dd_hasher *h,
			   const uint8_t key[DD_CACHE_KEY_SIZE], uint32_t lsize,
			   void *dst)
{
	int rc = DD_L2_MISS;
	bool trouble = false;

	pthread_rwlock_rdlock(&c->c_devlock);
	if (!c->c_ndevs) {
		pthread_rwlock_unlock(&c->c_devlock);
		return DD_ENOENT;       /* no L2: not an L2 miss either */
	}
	for (size_t i = 0; i < c->c_ndevs && rc != DD_L2_HIT; i++) {
		rc = dd_l2dev_read(c->c_devs[i], h, key, lsize, dst);
		if (rc == DD_L2_CKSUM)
			dd_count(&c->c_l2_cksum, 1);
		trouble |= rc == DD_L2_IOERR;
	}
	pthread_rwlock_unlock(&c->c_devlock);
	if (trouble)
		dd_cache_warn(c);
	if (rc != DD_L2_HIT) {
		dd_count(&c->c_l2_misses, 1);
		return DD_ENOENT;
	}
	dd_count(&c->c_l2_hits, 1);
	dd_count(&c->c_l2_read_bytes, lsize);
	return 0;
}

int dd_cache_get(dd_cache *c, dd_hasher *h, const uint8_t key[DD_CACHE_KEY_SIZE],
		 uint32_t lsize, void *dst, unsigned flags)
{
	bool seq = flags & DD_CACHE_SEQ;

	if (c->c_l1 && dd_l1_get(c->c_l1, key, dst, lsize, seq)) {
		dd_count(&c->c_l1_hits, 1);
		return 0;
	}
	dd_count(&c->c_l1_misses, 1);
	dd_cache_open(c);
	if (dd_cache_l2_get(c, h, key, lsize, dst) != 0)
		return DD_ENOENT;
	if (c->c_l1 && !seq)
		dd_l1_put(c->c_l1, key, dst, lsize, DD_L1_IN_L2);
	return 0;
}

void dd_cache_put(dd_cache *c, const uint8_t key[DD_CACHE_KEY_SIZE],
		  const void *src, uint32_t lsize, unsigned flags)
{
	unsigned l1flags = (flags & DD_CACHE_SEQ) ? DD_L1_SEQ : 0;
	uint8_t *copy;

	if (c->c_l1 && !l1flags) {
		dd_l1_put(c->c_l1, key, src, lsize, 0);
		return;
	}
	/* Without L1, or for a block of a sequential read that L1 does not
	 * take, nothing is ever evicted: feed L2 directly (the copy only
	 * when there is a feed to take it). */
	dd_cache_open(c);
	if (!dd_cache_feedable(c, key, l1flags) || !(copy = dd_malloc(lsize)))
		return;
	memcpy(copy, src, lsize);
	dd_cache_offer(c, key, copy, lsize, l1flags);
}

void dd_cache_count_pack(dd_cache *c, uint64_t bytes)
{
	dd_count(&c->c_pack_ops, 1);
	dd_count(&c->c_pack_bytes, bytes);
}

/* ---- lifecycle --------------------------------------------------------------------*/

int dd_cache_new(dd_cache **out, dd_err *err, const dd_cache_params *p)
{
	dd_cache *c = dd_calloc(1, sizeof(*c));
	int rc = 0;

	if (!c)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	c->c_p = *p;
	c->c_p.cp_paths = NULL;
	c->c_p.cp_sizes = NULL;
	pthread_mutex_init(&c->c_open_lock, NULL);
	pthread_rwlock_init(&c->c_devlock, NULL);
	for (size_t i = 0; !rc && i < p->cp_npaths; i++)
		rc = dd_cache_add_path(c, err, p->cp_paths[i], p->cp_sizes[i]);
	if (!rc && p->cp_l1_size &&
	    dd_l1_new(&c->c_l1, p->cp_l1_size, p->cp_block_size,
		      dd_cache_evicted, c) != 0)
		rc = dd_err_set(err, DD_ENOMEM, "out of memory");
	if (rc) {
		dd_cache_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

void dd_cache_free(dd_cache *c)
{
	if (!c)
		return;
	/* L1's blocks are not fed at close: they were fed when they last
	 * left L1, or were read once only.  The queue is drained. */
	dd_feed_free(c->c_feed);
	c->c_feed = NULL;
	dd_cache_warn(c);
	dd_l1_free(c->c_l1);
	for (size_t i = 0; i < c->c_ndevs; i++)
		dd_l2dev_close(c->c_devs[i]);
	for (size_t i = 0; i < c->c_npaths; i++)
		dd_free(c->c_paths[i]);
	dd_free(c->c_devs);
	dd_free(c->c_paths);
	dd_free(c->c_sizes);
	pthread_rwlock_destroy(&c->c_devlock);
	pthread_mutex_destroy(&c->c_open_lock);
	dd_free(c);
}

void dd_cache_drain(dd_cache *c)
{
	dd_cache_open(c);
	dd_feed_drain(c->c_feed);
	dd_cache_warn(c);
}

void dd_cache_wait_rebuild(dd_cache *c)
{
	dd_cache_open(c);
	pthread_rwlock_rdlock(&c->c_devlock);
	for (size_t i = 0; i < c->c_ndevs; i++)
		dd_l2dev_wait_rebuild(c->c_devs[i]);
	pthread_rwlock_unlock(&c->c_devlock);
	dd_cache_warn(c);
}

/* ---- figures ------------------------------------------------------------------------*/

static const char *const dd_state_names[] = {
	"online", "rebuilding", "missing", "foreign", "faulted", "full",
	"busy", "offline",
};

const char *dd_cache_state_name(int state)
{
	if (state < 0 || (size_t)state >= sizeof(dd_state_names) /
					   sizeof(dd_state_names[0]))
		return "unknown";
	return dd_state_names[state];
}

static void dd_cache_l2_figures(dd_cache *c, dd_cache_stats *out)
{
	pthread_rwlock_rdlock(&c->c_devlock);
	for (size_t i = 0; i < c->c_ndevs; i++) {
		dd_l2_figures f;

		dd_l2dev_figures(c->c_devs[i], &f);
		out->l2_size += f.lf_ring;
		out->l2_entries += f.lf_entries;
		out->l2_bytes += f.lf_bytes;
		out->l2_rebuilds += f.lf_rebuilds;
		out->l2_rebuild_entries += f.lf_rebuild_entries;
		out->l2_rebuild_ms += f.lf_rebuild_ms;
		out->l2_log_errors += f.lf_log_errors;
	}
	pthread_rwlock_unlock(&c->c_devlock);
}

void dd_cache_stats_fill(dd_cache *c, dd_cache_stats *out)
{
	unsigned version = out->version;

	/* Figures do not open the devices: a handle that never read has
	 * none open (dd_cache_devs does open them). */
	memset(out, 0, sizeof(*out));
	out->version = version;
	if (c->c_l1)
		dd_l1_usage(c->c_l1, &out->l1_bytes, &out->l1_blocks);
	out->l1_size = c->c_p.cp_l1_size;
	out->l1_hits = dd_load(&c->c_l1_hits);
	out->l1_misses = dd_load(&c->c_l1_misses);
	pthread_mutex_lock(&c->c_open_lock);
	out->l2_devices = c->c_npaths;
	pthread_mutex_unlock(&c->c_open_lock);
	dd_cache_l2_figures(c, out);
	out->l2_hits = dd_load(&c->c_l2_hits);
	out->l2_misses = dd_load(&c->c_l2_misses);
	out->l2_read_bytes = dd_load(&c->c_l2_read_bytes);
	out->l2_write_bytes = dd_load(&c->c_l2_write_bytes);
	out->l2_cksum_errors = dd_load(&c->c_l2_cksum);
	out->l2_dev_errors = dd_load(&c->c_l2_dev_errors);
	out->l2_feed_drops = dd_load(&c->c_l2_drops);
	out->l2_write_max = c->c_p.cp_l2_write_max;
	out->l2_feed_sequential = c->c_p.cp_feed_seq;
	out->pack_read_ops = dd_load(&c->c_pack_ops);
	out->pack_read_bytes = dd_load(&c->c_pack_bytes);
}

/* A configured device that is not open: offline (no_cache). */
static void dd_cache_dev_offline(dd_cache *c, size_t i, dd_cache_dev *out)
{
	memset(out, 0, sizeof(*out));
	snprintf(out->path, sizeof(out->path), "%s", c->c_paths[i]);
	out->size = c->c_sizes[i];
	out->state = DD_CACHE_OFFLINE;
	snprintf(out->message, sizeof(out->message), "not opened (no cache)");
}

int dd_cache_devs(dd_cache *c, dd_err *err, dd_cache_dev **out, size_t *n)
{
	dd_cache_dev *list = NULL;
	size_t count;

	dd_cache_wait_rebuild(c);
	pthread_mutex_lock(&c->c_open_lock);
	pthread_rwlock_rdlock(&c->c_devlock);
	count = c->c_npaths;
	if (count && !(list = dd_calloc(count, sizeof(*list)))) {
		pthread_rwlock_unlock(&c->c_devlock);
		pthread_mutex_unlock(&c->c_open_lock);
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < count; i++) {
		dd_l2dev *d = NULL;

		for (size_t j = 0; j < c->c_ndevs && !d; j++)
			if (!strcmp(dd_l2dev_path(c->c_devs[j]), c->c_paths[i]))
				d = c->c_devs[j];
		if (d)
			dd_l2dev_info(d, &list[i]);
		else
			dd_cache_dev_offline(c, i, &list[i]);
		list[i].size = c->c_sizes[i] ? c->c_sizes[i] : list[i].size;
	}
	pthread_rwlock_unlock(&c->c_devlock);
	pthread_mutex_unlock(&c->c_open_lock);
	*out = list;
	*n = count;
	return 0;
}
