/*
 * pool.h -- a fixed pool of worker threads running parallel-for jobs.
 *
 * A job is fn(ctx, item, worker) for item in [0, n).  `worker` is in
 * [0, dd_pool_width(pool)) and is unique among concurrently running calls,
 * so callers keep per-worker scratch (compression contexts, buffers) in an
 * array indexed by it.  Items are handed out one at a time from an atomic
 * counter, so uneven items balance themselves.
 *
 * dd_pool_run blocks and lets the calling thread work too (it is worker
 * 0).  dd_pool_start runs the job on the pool threads only and returns at
 * once; dd_pool_wait waits for it.  One job at a time per pool.
 */
#ifndef DD_COMMON_POOL_H
#define DD_COMMON_POOL_H

#include <stddef.h>

typedef struct dd_pool dd_pool;
typedef void (*dd_pool_fn)(void *ctx, size_t item, unsigned worker);

/* More threads than this is a misuse (dd_open_opts.threads), not a wish. */
#define DD_POOL_MAX_THREADS 1024

/* The online CPUs, 1 to DD_POOL_MAX_THREADS: what threads = 0 means. */
unsigned dd_pool_cpus(void);

/* threads = 0 picks dd_pool_cpus().  The pool has `threads` background
 * threads; width is threads + 1 (the caller). */
int dd_pool_new(dd_pool **out, unsigned threads);
void dd_pool_free(dd_pool *pool);
unsigned dd_pool_width(const dd_pool *pool);

void dd_pool_run(dd_pool *pool, dd_pool_fn fn, void *ctx, size_t n);
void dd_pool_start(dd_pool *pool, dd_pool_fn fn, void *ctx, size_t n);
void dd_pool_wait(dd_pool *pool);
/* Like dd_pool_wait, but the caller works on the started job's remaining
 * items first, as worker 0 (which dd_pool_start leaves unused). */
void dd_pool_join(dd_pool *pool);

#endif
