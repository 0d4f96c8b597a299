/*
 * feed.c -- the L2 feeder: blocks leaving L1 are queued here and written
 * to the cache devices by one thread, in batches, at a limited rate.
 *
 * Why a rate (ZFS: l2arc_write_max): an SSD wears with every byte
 * written, and a cache that rewrites itself at full speed wears out fast
 * while evicting what it holds for blocks read once.  The feeder wakes
 * once per interval (dd_feed_tick_ms) -- or sooner when a whole interval's
 * worth is queued -- and writes what is queued as one batch, so writes are
 * large and sequential.  A token bucket enforces the rate: tokens accrue
 * at `rate` bytes per second up to one interval's worth (or one block,
 * whichever is more) and each batch spends its bytes.
 *
 * The queue holds at most two intervals' worth: when the cache evicts
 * faster than the rate, further blocks are refused (the caller counts
 * them as feed drops) instead of piling up in RAM, as L2ARC skips what it
 * cannot write in time.  That bound is also what makes close quick:
 * closing drains the queue at the rate, so it takes at most two
 * intervals.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "cache/cache_internal.h"
#include "common/alloc.h"

_Atomic uint32_t dd_feed_tick_ms = 200;

#define DD_FEED_QUEUE_MAX ((uint64_t)256 << 20)

struct dd_feed {
	pthread_mutex_t f_lock;
	pthread_cond_t f_wake;     /* to the feeder: work, stop or drain */
	pthread_cond_t f_idle;     /* from the feeder: queue empty */
	dd_l2_item *f_head, *f_tail;
	uint64_t f_qbytes, f_qcap;
	uint64_t f_rate;
	uint32_t f_block_size;
	unsigned f_draining;       /* callers waiting in dd_feed_drain */
	bool f_stop, f_busy;
	pthread_t f_thread;
	dd_feed_write_fn f_write;
	void *f_ctx;
};

void dd_l2_item_free(dd_l2_item *it)
{
	if (!it)
		return;
	dd_free(it->it_data);
	dd_free(it);
}

static uint64_t dd_feed_tick_ns(void)
{
	return (uint64_t)atomic_load(&dd_feed_tick_ms) * 1000000;
}

/* Waits on f_wake until the monotonic time `until` (ns). */
static void dd_feed_sleep(dd_feed *f, uint64_t until)
{
	struct timespec ts = {
		.tv_sec = (time_t)(until / 1000000000),
		.tv_nsec = (long)(until % 1000000000),
	};

	pthread_cond_timedwait(&f->f_wake, &f->f_lock, &ts);
}

/* Bytes a batch of the first n queued items, and one more item of
 * lsize, takes in the ring. */
static uint64_t dd_feed_batch_bytes(uint64_t data, uint32_t n)
{
	return data + dd_l2_log_size(n);
}

/* Cuts a batch of at most `budget` ring bytes off the queue.  f_lock
 * held; the queue is not empty and its first item fits. */
static dd_l2_item *dd_feed_take(dd_feed *f, double budget, uint64_t *bytes)
{
	dd_l2_item *head = f->f_head, *last = NULL, *it = f->f_head;
	uint64_t data = 0;
	uint32_t n = 0;

	while (it && n < DD_L2_LOG_MAX_ENTS) {
		uint64_t next = dd_feed_batch_bytes(data +
						    dd_l2_align(it->it_lsize),
						    n + 1);

		if (n && ((double)next > budget || next > (16u << 20)))
			break;
		data += dd_l2_align(it->it_lsize);
		f->f_qbytes -= it->it_lsize;
		n++;
		last = it;
		it = it->it_next;
	}
	f->f_head = it;
	if (!it)
		f->f_tail = NULL;
	last->it_next = NULL;
	*bytes = dd_feed_batch_bytes(data, n);
	return head;
}

/* The most tokens can grow to: one interval, or one block. */
static double dd_feed_burst(const dd_feed *f)
{
	double tick = (double)f->f_rate * (double)dd_feed_tick_ns() / 1e9;
	double one = (double)dd_feed_batch_bytes(dd_l2_align(f->f_block_size),
						 1);

	return tick > one ? tick : one;
}

static void *dd_feed_main(void *arg)
{
	dd_feed *f = arg;
	uint64_t last = dd_cache_now_ns(), next_tick = last;
	double tokens = 0;

	pthread_mutex_lock(&f->f_lock);
	for (;;) {
		uint64_t now, need, bytes;
		dd_l2_item *batch;
		bool urgent;

		while (!f->f_head && !f->f_stop) {
			f->f_busy = false;
			pthread_cond_broadcast(&f->f_idle);
			pthread_cond_wait(&f->f_wake, &f->f_lock);
		}
		if (!f->f_head)
			break;
		f->f_busy = true;
		now = dd_cache_now_ns();
		tokens += (double)f->f_rate * (double)(now - last) / 1e9;
		last = now;
		if (tokens > dd_feed_burst(f))
			tokens = dd_feed_burst(f);
		/* Batch once per interval, unless a whole interval's worth
		 * is queued or someone waits for the queue to empty. */
		urgent = f->f_stop || f->f_draining ||
			 (double)f->f_qbytes >= dd_feed_burst(f);
		need = dd_feed_batch_bytes(dd_l2_align(f->f_head->it_lsize), 1);
		if ((!urgent && now < next_tick) || tokens < (double)need) {
			uint64_t wait = tokens < (double)need ?
				(uint64_t)(((double)need - tokens) * 1e9 /
					   (double)f->f_rate) + 1 : next_tick - now;

			dd_feed_sleep(f, now + wait);
			continue;
		}
		batch = dd_feed_take(f, tokens, &bytes);
		tokens -= (double)bytes;
		next_tick = now + dd_feed_tick_ns();
		pthread_mutex_unlock(&f->f_lock);
		f->f_write(f->f_ctx, batch);
		pthread_mutex_lock(&f->f_lock);
	}
	f->f_busy = false;
	pthread_cond_broadcast(&f->f_idle);
	pthread_mutex_unlock(&f->f_lock);
	return NULL;
}

int dd_feed_new(dd_feed **out, dd_err *err, uint64_t rate, uint32_t block_size,
		dd_feed_write_fn write, void *ctx)
{
	dd_feed *f = dd_calloc(1, sizeof(*f));
	pthread_condattr_t ca;
	uint64_t cap;

	if (!f)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	f->f_rate = rate ? rate : 1;
	f->f_block_size = block_size;
	f->f_write = write;
	f->f_ctx = ctx;
	cap = (uint64_t)((double)f->f_rate * 2 * (double)dd_feed_tick_ns() / 1e9);
	if (cap < 4 * (uint64_t)block_size)
		cap = 4 * (uint64_t)block_size;
	f->f_qcap = cap < DD_FEED_QUEUE_MAX ? cap : DD_FEED_QUEUE_MAX;
	pthread_mutex_init(&f->f_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&f->f_wake, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&f->f_idle, NULL);
	if (pthread_create(&f->f_thread, NULL, dd_feed_main, f) != 0) {
		pthread_mutex_destroy(&f->f_lock);
		pthread_cond_destroy(&f->f_wake);
		pthread_cond_destroy(&f->f_idle);
		dd_free(f);
		return dd_err_set(err, DD_ENOMEM, "cannot start the feed thread");
	}
	*out = f;
	return 0;
}

void dd_feed_free(dd_feed *f)
{
	if (!f)
		return;
	pthread_mutex_lock(&f->f_lock);
	f->f_stop = true;
	pthread_cond_signal(&f->f_wake);
	pthread_mutex_unlock(&f->f_lock);
	pthread_join(f->f_thread, NULL);
	pthread_mutex_destroy(&f->f_lock);
	pthread_cond_destroy(&f->f_wake);
	pthread_cond_destroy(&f->f_idle);
	dd_free(f);
}

bool dd_feed_offer(dd_feed *f, const uint8_t key[DD_CACHE_KEY_SIZE],
		   uint8_t *data, uint32_t lsize)
{
	dd_l2_item *it = dd_calloc(1, sizeof(*it));

	if (!it)
		return false;
	memcpy(it->it_key, key, DD_CACHE_KEY_SIZE);
	it->it_lsize = lsize;
	it->it_data = data;
	pthread_mutex_lock(&f->f_lock);
	if (f->f_stop || f->f_qbytes + lsize > f->f_qcap) {
		pthread_mutex_unlock(&f->f_lock);
		dd_free(it);            /* data stays the caller's */
		return false;
	}
	if (f->f_tail)
		f->f_tail->it_next = it;
	else
		f->f_head = it;
	f->f_tail = it;
	f->f_qbytes += lsize;
	pthread_cond_signal(&f->f_wake);
	pthread_mutex_unlock(&f->f_lock);
	return true;
}

void dd_feed_drain(dd_feed *f)
{
	if (!f)
		return;
	pthread_mutex_lock(&f->f_lock);
	f->f_draining++;
	pthread_cond_signal(&f->f_wake);
	while (f->f_head || f->f_busy)
		pthread_cond_wait(&f->f_idle, &f->f_lock);
	f->f_draining--;
	pthread_mutex_unlock(&f->f_lock);
}
