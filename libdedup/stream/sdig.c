/*
 * sdig.c -- the stream digest on a thread of its own (sdig.h).
 *
 * The caller fills one chunk while the thread digests the other.  The
 * hand-off is the only shared state, under sg_mu: sg_give/sg_len name the
 * chunk the thread holds while sg_busy; the caller touches that chunk
 * again only once sg_busy is false.  Without a thread (a short stream, or
 * one that could not start, or a chunk that could not be allocated) the
 * caller digests the bytes itself, in the same order.
 */
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>

#include "dedup.h"
#include "common/alloc.h"
#include "hash/hash.h"
#include "stream/sdig.h"

#define DD_SDIG_CHUNK ((size_t)1 << 20)

struct dd_sdig {
	dd_sha256_ctx *sg_sha;    /* the caller's until the thread starts,
				     then the thread's until it is joined */
	uint8_t *sg_buf[2];
	unsigned sg_cur;          /* the chunk the caller fills */
	size_t sg_fill;
	bool sg_inline;           /* no thread: the caller digests */
	bool sg_thread;           /* started, not joined */
	pthread_t sg_tid;
	pthread_mutex_t sg_mu;
	pthread_cond_t sg_cv;
	/* under sg_mu */
	bool sg_busy, sg_stop;
	const uint8_t *sg_give;
	size_t sg_len;
};

int dd_sdig_new(dd_sdig **out)
{
	dd_sdig *g = dd_calloc(1, sizeof(*g));

	if (!g || dd_sha256_new(&g->sg_sha) != 0) {
		dd_free(g);
		return DD_ENOMEM;
	}
	pthread_mutex_init(&g->sg_mu, NULL);
	pthread_cond_init(&g->sg_cv, NULL);
	*out = g;
	return 0;
}

static void *dd_sdig_main(void *arg)
{
	dd_sdig *g = arg;

	pthread_mutex_lock(&g->sg_mu);
	for (;;) {
		const uint8_t *p;
		size_t n;

		while (!g->sg_busy && !g->sg_stop)
			pthread_cond_wait(&g->sg_cv, &g->sg_mu);
		if (!g->sg_busy)
			break;                /* stopped, nothing given */
		p = g->sg_give;
		n = g->sg_len;
		pthread_mutex_unlock(&g->sg_mu);
		dd_sha256_update(g->sg_sha, p, n);
		pthread_mutex_lock(&g->sg_mu);
		g->sg_busy = false;
		pthread_cond_broadcast(&g->sg_cv);
	}
	pthread_mutex_unlock(&g->sg_mu);
	return NULL;
}

/* Until the thread holds no chunk. */
static void dd_sdig_wait(dd_sdig *g)
{
	pthread_mutex_lock(&g->sg_mu);
	while (g->sg_busy)
		pthread_cond_wait(&g->sg_cv, &g->sg_mu);
	pthread_mutex_unlock(&g->sg_mu);
}

/* The filling chunk is full (or the stream ended): to the thread, which
 * starts with the first full chunk; or digested here. */
static void dd_sdig_give(dd_sdig *g)
{
	uint8_t *chunk = g->sg_buf[g->sg_cur];

	if (!g->sg_thread && !g->sg_inline) {
		sigset_t all, old;

		/* signals are for the host's threads, as in the pool */
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		if ((g->sg_buf[1] = dd_malloc(DD_SDIG_CHUNK)) != NULL &&
		    pthread_create(&g->sg_tid, NULL, dd_sdig_main, g) == 0)
			g->sg_thread = true;
		else
			g->sg_inline = true;
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	if (!g->sg_thread) {
		dd_sha256_update(g->sg_sha, chunk, g->sg_fill);
		g->sg_fill = 0;
		return;
	}
	pthread_mutex_lock(&g->sg_mu);
	while (g->sg_busy)
		pthread_cond_wait(&g->sg_cv, &g->sg_mu);
	g->sg_give = chunk;
	g->sg_len = g->sg_fill;
	g->sg_busy = true;
	pthread_cond_broadcast(&g->sg_cv);
	pthread_mutex_unlock(&g->sg_mu);
	g->sg_cur ^= 1;
	g->sg_fill = 0;
}

void dd_sdig_update(dd_sdig *g, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	if (!g->sg_buf[0] && !g->sg_inline &&
	    !(g->sg_buf[0] = dd_malloc(DD_SDIG_CHUNK)))
		g->sg_inline = true;
	if (g->sg_inline && !g->sg_thread && !g->sg_fill) {
		dd_sha256_update(g->sg_sha, p, len);
		return;
	}
	while (len) {
		size_t n = DD_SDIG_CHUNK - g->sg_fill;

		if (n > len)
			n = len;
		memcpy(g->sg_buf[g->sg_cur] + g->sg_fill, p, n);
		g->sg_fill += n;
		p += n;
		len -= n;
		if (g->sg_fill == DD_SDIG_CHUNK)
			dd_sdig_give(g);
	}
}

/* Joins the thread; sg_sha is the caller's again. */
static void dd_sdig_join(dd_sdig *g)
{
	if (!g->sg_thread)
		return;
	pthread_mutex_lock(&g->sg_mu);
	g->sg_stop = true;
	pthread_cond_broadcast(&g->sg_cv);
	pthread_mutex_unlock(&g->sg_mu);
	pthread_join(g->sg_tid, NULL);
	g->sg_thread = false;
}

void dd_sdig_final(dd_sdig *g, uint8_t out[32])
{
	if (g->sg_fill)
		dd_sdig_give(g);
	if (g->sg_thread)
		dd_sdig_wait(g);
	dd_sdig_join(g);
	g->sg_inline = true;       /* no thread from here on */
	dd_sha256_final(g->sg_sha, out);
}

void dd_sdig_free(dd_sdig *g)
{
	if (!g)
		return;
	dd_sdig_join(g);
	pthread_mutex_destroy(&g->sg_mu);
	pthread_cond_destroy(&g->sg_cv);
	dd_sha256_free(g->sg_sha);
	dd_free(g->sg_buf[0]);
	dd_free(g->sg_buf[1]);
	dd_free(g);
}
