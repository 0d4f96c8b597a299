/*
 * pstage.h -- the pool stage of a ring of batches: what the block
 * pipeline (pipeline.c) and the raw receiver (stream/rrecv*.c) share to
 * hand a batch to the pool and take it back.
 *
 * Both keep a ring of batches in which one batch at a time is worked on
 * by the pool while the caller fills the next; both check blocks with
 * the pipeline's hash stage (dd_blk_hash), which needs a hasher per pool
 * worker.  A dd_pstage owns those hashers and the one job in flight:
 *
 *   dd_pstage_start  runs fn(ctx, item, worker) for n items on the pool
 *                    and returns at once -- or, when the pool is shared
 *                    (ps_lock) and another ring holds it, runs them all on
 *                    the caller's thread first (dd_pstage_solo says so,
 *                    for per-worker state the caller keeps for that case);
 *   dd_pstage_wait   takes the job back: the caller works on its remaining
 *                    items (dd_pool_join), then lets the shared pool go.
 *
 * Invariant: at most one job in flight per stage, and the pool's lock,
 * when there is one, is held exactly while it is.  A stage must be waited
 * for before the batches its job reads are reused or freed.
 */
#ifndef DD_CHUNK_PSTAGE_H
#define DD_CHUNK_PSTAGE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "common/pool.h"
#include "hash/hash.h"

typedef struct dd_pstage {
	dd_pool *ps_pool;
	pthread_mutex_t *ps_lock;  /* the pool's, when shared; or NULL */
	unsigned ps_width;         /* the pool's workers */
	dd_hasher **ps_hasher;     /* one per worker */
	bool ps_running;           /* a job was started and not waited for */
	bool ps_held;              /* ... holding ps_lock */
	bool ps_solo;              /* a job runs alone on the caller's thread */
} dd_pstage;

/* Hashers of hash_kind (hash/hash.h) for every worker of pool; lock as
 * above.  On failure the stage needs only dd_pstage_fini. */
int dd_pstage_init(dd_pstage *ps, dd_err *err, dd_pool *pool,
		   pthread_mutex_t *lock, int hash_kind);
/* Waits for the job in flight, then frees the hashers. */
void dd_pstage_fini(dd_pstage *ps);

void dd_pstage_start(dd_pstage *ps, dd_pool_fn fn, void *ctx, size_t n);
void dd_pstage_wait(dd_pstage *ps);

/* Is the job running alone on the caller's thread (so `worker` is 0 but
 * the caller's own scratch, not worker 0's, must be used)? */
static inline bool dd_pstage_solo(const dd_pstage *ps)
{
	return ps->ps_solo;
}

static inline bool dd_pstage_busy(const dd_pstage *ps)
{
	return ps->ps_running;
}

#endif
