/*
 * pool.c -- a fixed set of worker threads running one parallel-for job at
 * a time.
 *
 * Handoff: the submitter fills in the job under dp_mu, bumps dp_gen and
 * broadcasts dp_work_cv; each background thread remembers the last
 * generation it ran, so a spurious or late wakeup never runs a job twice.
 * Every background thread checks in once per job (dp_pending counts them
 * down), even when there were no items left for it; a job is complete
 * only when dp_pending reaches 0, which is also what lets the next job be
 * posted, so no thread can miss a generation.
 *
 * Items are claimed from the atomic dp_next, one at a time; the mutex
 * hand-over (lock in the submitter, unlock in the workers before it sees
 * dp_pending == 0) orders every write made by fn before dd_pool_run or
 * dd_pool_wait returns.
 *
 * Worker indices: the caller of dd_pool_run is 0, background thread i is
 * i (1..threads), so indices are unique among concurrent calls of fn.
 * fn must not submit to the same pool (it would wait for itself).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

#include "dedup.h"
#include "common/alloc.h"
#include "common/pool.h"

struct dd_pool_thread {
	dd_pool *dpt_pool;
	pthread_t dpt_thread;
	unsigned dpt_index;
};

struct dd_pool {
	pthread_mutex_t dp_mu;
	pthread_cond_t dp_work_cv;   /* a new job, or dp_stop */
	pthread_cond_t dp_done_cv;   /* dp_pending reached 0 */
	struct dd_pool_thread *dp_threads;
	unsigned dp_nthreads;

	/* The current job; written under dp_mu. */
	uint64_t dp_gen;
	dd_pool_fn dp_fn;
	void *dp_ctx;
	size_t dp_n;
	unsigned dp_pending;         /* background threads yet to check in */
	bool dp_stop;

	atomic_size_t dp_next;       /* the next unclaimed item */
};

static void dd_pool_work(dd_pool *pool, dd_pool_fn fn, void *ctx, size_t n,
			 unsigned worker)
{
	for (;;) {
		size_t i = atomic_fetch_add_explicit(&pool->dp_next, 1,
						     memory_order_relaxed);

		if (i >= n)
			break;
		fn(ctx, i, worker);
	}
}

static void *dd_pool_main(void *arg)
{
	struct dd_pool_thread *t = arg;
	dd_pool *pool = t->dpt_pool;
	uint64_t seen = 0;

	pthread_mutex_lock(&pool->dp_mu);
	for (;;) {
		while (!pool->dp_stop && pool->dp_gen == seen)
			pthread_cond_wait(&pool->dp_work_cv, &pool->dp_mu);
		if (pool->dp_stop)
			break;
		seen = pool->dp_gen;
		dd_pool_fn fn = pool->dp_fn;
		void *ctx = pool->dp_ctx;
		size_t n = pool->dp_n;

		pthread_mutex_unlock(&pool->dp_mu);
		dd_pool_work(pool, fn, ctx, n, t->dpt_index);
		pthread_mutex_lock(&pool->dp_mu);
		if (--pool->dp_pending == 0)
			pthread_cond_broadcast(&pool->dp_done_cv);
	}
	pthread_mutex_unlock(&pool->dp_mu);
	return NULL;
}

static void dd_pool_stop_threads(dd_pool *pool, unsigned started)
{
	pthread_mutex_lock(&pool->dp_mu);
	pool->dp_stop = true;
	pthread_cond_broadcast(&pool->dp_work_cv);
	pthread_mutex_unlock(&pool->dp_mu);
	for (unsigned i = 0; i < started; i++)
		pthread_join(pool->dp_threads[i].dpt_thread, NULL);
}

unsigned dd_pool_cpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1 : n > DD_POOL_MAX_THREADS ? DD_POOL_MAX_THREADS
						   : (unsigned)n;
}

int dd_pool_new(dd_pool **out, unsigned threads)
{
	sigset_t all, old;
	dd_pool *pool;
	unsigned i;
	int rc = DD_OK;

	if (!out || threads > DD_POOL_MAX_THREADS)
		return DD_EINVAL;
	if (threads == 0)
		threads = dd_pool_cpus();
	pool = dd_calloc(1, sizeof(*pool));
	if (!pool)
		return DD_ENOMEM;
	pool->dp_threads = dd_calloc(threads, sizeof(*pool->dp_threads));
	if (!pool->dp_threads) {
		dd_free(pool);
		return DD_ENOMEM;
	}
	pool->dp_nthreads = threads;
	atomic_init(&pool->dp_next, 0);
	if (pthread_mutex_init(&pool->dp_mu, NULL) != 0)
		goto fail_mu;
	if (pthread_cond_init(&pool->dp_work_cv, NULL) != 0)
		goto fail_work;
	if (pthread_cond_init(&pool->dp_done_cv, NULL) != 0)
		goto fail_done;

	/* Workers inherit a full signal mask: the host's handlers should run
	 * on the host's threads, not on ours. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (i = 0; i < threads; i++) {
		struct dd_pool_thread *t = &pool->dp_threads[i];

		t->dpt_pool = pool;
		t->dpt_index = i + 1;
		if (pthread_create(&t->dpt_thread, NULL, dd_pool_main, t) != 0)
			break;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (i < threads) {
		dd_pool_stop_threads(pool, i);
		rc = DD_ENOMEM;
		goto fail_threads;
	}
	*out = pool;
	return DD_OK;

fail_threads:
	pthread_cond_destroy(&pool->dp_done_cv);
fail_done:
	pthread_cond_destroy(&pool->dp_work_cv);
fail_work:
	pthread_mutex_destroy(&pool->dp_mu);
fail_mu:
	dd_free(pool->dp_threads);
	dd_free(pool);
	return rc ? rc : DD_ENOMEM;
}

void dd_pool_free(dd_pool *pool)
{
	if (!pool)
		return;
	dd_pool_wait(pool);
	dd_pool_stop_threads(pool, pool->dp_nthreads);
	pthread_cond_destroy(&pool->dp_done_cv);
	pthread_cond_destroy(&pool->dp_work_cv);
	pthread_mutex_destroy(&pool->dp_mu);
	dd_free(pool->dp_threads);
	dd_free(pool);
}

unsigned dd_pool_width(const dd_pool *pool)
{
	return pool ? pool->dp_nthreads + 1 : 1;
}

/* Waits for the current job's background threads; dp_mu held. */
static void dd_pool_wait_locked(dd_pool *pool)
{
	while (pool->dp_pending > 0)
		pthread_cond_wait(&pool->dp_done_cv, &pool->dp_mu);
}

/* Posts a job to the background threads; dp_mu held. */
static void dd_pool_post_locked(dd_pool *pool, dd_pool_fn fn, void *ctx,
				size_t n)
{
	/* One job at a time: a job still running finishes first. */
	dd_pool_wait_locked(pool);
	pool->dp_fn = fn;
	pool->dp_ctx = ctx;
	pool->dp_n = n;
	atomic_store_explicit(&pool->dp_next, 0, memory_order_relaxed);
	pool->dp_pending = pool->dp_nthreads;
	pool->dp_gen++;
	pthread_cond_broadcast(&pool->dp_work_cv);
}

void dd_pool_run(dd_pool *pool, dd_pool_fn fn, void *ctx, size_t n)
{
	if (!pool || !fn || n == 0)
		return;
	if (n == 1) {
		/* Not worth a wakeup; still wait out any running job so
		 * worker 0 is never shared. */
		dd_pool_wait(pool);
		fn(ctx, 0, 0);
		return;
	}
	pthread_mutex_lock(&pool->dp_mu);
	dd_pool_post_locked(pool, fn, ctx, n);
	pthread_mutex_unlock(&pool->dp_mu);

	dd_pool_work(pool, fn, ctx, n, 0);

	pthread_mutex_lock(&pool->dp_mu);
	dd_pool_wait_locked(pool);
	pthread_mutex_unlock(&pool->dp_mu);
}

void dd_pool_start(dd_pool *pool, dd_pool_fn fn, void *ctx, size_t n)
{
	if (!pool || !fn || n == 0)
		return;
	if (pool->dp_nthreads == 0) {
		/* Cannot happen with dd_pool_new, but a job must never be
		 * lost: run it here, and dd_pool_wait has nothing to do. */
		dd_pool_wait(pool);
		for (size_t i = 0; i < n; i++)
			fn(ctx, i, 0);
		return;
	}
	pthread_mutex_lock(&pool->dp_mu);
	dd_pool_post_locked(pool, fn, ctx, n);
	pthread_mutex_unlock(&pool->dp_mu);
}

void dd_pool_wait(dd_pool *pool)
{
	if (!pool)
		return;
	pthread_mutex_lock(&pool->dp_mu);
	dd_pool_wait_locked(pool);
	pthread_mutex_unlock(&pool->dp_mu);
}

void dd_pool_join(dd_pool *pool)
{
	dd_pool_fn fn;
	void *ctx;
	size_t n;
	bool running;

	if (!pool)
		return;
	pthread_mutex_lock(&pool->dp_mu);
	running = pool->dp_pending > 0;
	fn = pool->dp_fn;
	ctx = pool->dp_ctx;
	n = pool->dp_n;
	pthread_mutex_unlock(&pool->dp_mu);
	/* Items are claimed from the shared counter, so helping is safe even
	 * if the job ends meanwhile: the claims then fail past n. */
	if (running && fn)
		dd_pool_work(pool, fn, ctx, n, 0);
	dd_pool_wait(pool);
}
