/*
 * pstage.c -- the pool stage of a ring of batches (pstage.h): per-worker
 * hashers, and one job at a time handed to the pool and taken back.
 */
#include "dedup.h"
#include "chunk/pstage.h"
#include "common/alloc.h"

int dd_pstage_init(dd_pstage *ps, dd_err *err, dd_pool *pool,
		   pthread_mutex_t *lock, int hash_kind)
{
	*ps = (dd_pstage){.ps_pool = pool, .ps_lock = lock};
	ps->ps_width = dd_pool_width(pool);
	ps->ps_hasher = dd_calloc(ps->ps_width, sizeof(*ps->ps_hasher));
	if (!ps->ps_hasher)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	for (unsigned i = 0; i < ps->ps_width; i++) {
		int rc = dd_hasher_new(&ps->ps_hasher[i], hash_kind);

		if (rc)
			return dd_err_set(err, rc, "cannot set up hashing");
	}
	return 0;
}

void dd_pstage_fini(dd_pstage *ps)
{
	dd_pstage_wait(ps);
	for (unsigned i = 0; ps->ps_hasher && i < ps->ps_width; i++)
		dd_hasher_free(ps->ps_hasher[i]);
	dd_free(ps->ps_hasher);
	ps->ps_hasher = NULL;
}

void dd_pstage_start(dd_pstage *ps, dd_pool_fn fn, void *ctx, size_t n)
{
	if (ps->ps_lock && pthread_mutex_trylock(ps->ps_lock) != 0) {
		/* another ring has the pool for its job: this one works
		 * alone, on the caller's thread (waiting could be for ever
		 * when both are the same thread's) */
		ps->ps_solo = true;
		for (size_t i = 0; i < n; i++)
			fn(ctx, i, 0);
		ps->ps_solo = false;
		return;
	}
	ps->ps_held = ps->ps_lock != NULL;
	dd_pool_start(ps->ps_pool, fn, ctx, n);
	ps->ps_running = true;
}

void dd_pstage_wait(dd_pstage *ps)
{
	if (!ps->ps_running)
		return;
	/* the caller has filled its next batch: help instead of idling */
	dd_pool_join(ps->ps_pool);
	ps->ps_running = false;
	if (ps->ps_held) {
		pthread_mutex_unlock(ps->ps_lock);
		ps->ps_held = false;
	}
}
