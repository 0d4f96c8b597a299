/*
 * rrbatch.c -- the raw receiver's ring of batches (rrecv_internal.h says
 * how its three stages overlap): the pool job that materialises each
 * block -- a DATA record decompressed, a REF's first copy read back from
 * the output -- and checks it with the block pipeline's hash stage
 * (dd_blk_hash), handed to the pool through chunk/pstage.h as the
 * pipeline's jobs are; the writer thread that writes checked batches in
 * order, in runs of adjacent blocks; and the calling thread's hand-offs
 * between them.
 *
 * Invariants: only checked batches are queued, so nothing unverified is
 * written; a batch is filled only once the batch DD_RRECV_RING before it
 * is written, so no buffer is reused while the writer reads it; a REF is
 * read back only from bytes written and checked (rrecv.c drains first).
 */
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "chunk/pipeline.h"
#include "common/io.h"
#include "pack/pack.h"
#include "stream/rrecv_internal.h"

/* An inner message without its "DD_EXXX: " symbol, to nest it in ours. */
static const char *dd_rrecv_inner(const dd_err *e)
{
	const char *p = strstr(e->de_msg, ": ");

	return p && strncmp(e->de_msg, "DD_E", 4) == 0 ? p + 2 : e->de_msg;
}

static void dd_rjob_fail(dd_rrecv *r, dd_rrbatch *b, const dd_rjob *j,
			 int code, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* Keeps the failure of the lowest block, so the report is deterministic. */
static void dd_rjob_fail(dd_rrecv *r, dd_rrbatch *b, const dd_rjob *j,
			 int code, const char *fmt, ...)
{
	char msg[300];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&r->rr_mu);
	if (j->rj_idx < b->rrb_fail_idx) {
		b->rrb_fail_idx = j->rj_idx;
		dd_err_set(&b->rrb_err, code, "%s record for block %llu: %s",
			   j->rj_kind == DD_SREC_DATA ? "DATA" : "REF",
			   (unsigned long long)j->rj_idx, msg);
	}
	pthread_mutex_unlock(&r->rr_mu);
}

static bool dd_rjob_data(dd_rrecv *r, dd_rrbatch *b, const dd_rjob *j,
			 uint8_t *dst, unsigned worker)
{
	dd_pack_rec rec;
	dd_err e = {0};

	rec.pr_codec = j->rj_codec;
	rec.pr_lsize = j->rj_lsize;
	rec.pr_psize = j->rj_psize;
	memcpy(rec.pr_hash, j->rj_hash, 32);
	if (dd_codec_decompress(r->rr_codec[worker], &e, &rec,
				b->rrb_pay + j->rj_poff, dst) == 0)
		return true;
	dd_rjob_fail(r, b, j, DD_ECORRUPT, "bad payload: %s",
		     dd_rrecv_inner(&e));
	return false;
}

static bool dd_rjob_ref(dd_rrecv *r, dd_rrbatch *b, const dd_rjob *j,
			uint8_t *dst)
{
	dd_err e = {0};

	if (dd_io_pread_full(&e, r->rr_fd, dst, j->rj_lsize,
			     r->rr_var ? j->rj_src
				       : j->rj_src * r->rr_h.sh_block_size,
			     "output") == 0)
		return true;
	dd_rjob_fail(r, b, j, e.de_code, "reading block %llu back: %s",
		     (unsigned long long)j->rj_src, dd_rrecv_inner(&e));
	return false;
}

/* Pool job: blocks 2p and 2p + 1 of the batch in flight materialised in
 * their slots, then checked with the block pipeline's hash stage
 * (dd_blk_hash): the zero test -- a DATA block of zeros should have been
 * a ZERO record -- and SHA-256, the two hashed together when their
 * lengths match. */
static void dd_rrecv_job(void *ctx, size_t p, unsigned worker)
{
	dd_rrecv *r = ctx;
	dd_rrbatch *b = r->rr_fly;
	size_t n = 0;
	const dd_rjob *job[2];
	dd_blk blk[2];

	for (size_t i = 2 * p; i < 2 * p + 2 && i < b->rrb_n; i++) {
		const dd_rjob *j = &b->rrb_job[i];
		uint8_t *dst = b->rrb_out + j->rj_ooff;
		bool ok;

		if (j->rj_kind == DD_SREC_ZERO)
			continue;  /* nothing to check: the writer's zeros */
		if (j->rj_kind == DD_SREC_DATA)
			ok = dd_rjob_data(r, b, j, dst, worker);
		else
			ok = dd_rjob_ref(r, b, j, dst);
		if (!ok)
			continue;
		blk[n] = (dd_blk){.bk_off = (uint32_t)j->rj_ooff,
				  .bk_len = j->rj_lsize};
		job[n++] = j;
	}
	dd_blk_hash(r->rr_stage.ps_hasher[worker], blk, n, b->rrb_out, 0, 0);
	for (size_t k = 0; k < n; k++) {
		const dd_rjob *j = job[k];

		if (blk[k].bk_kind == DD_BLK_ZERO && j->rj_kind == DD_SREC_DATA)
			dd_rjob_fail(r, b, j, DD_EFORMAT, "an all-zero block "
				     "(it must travel as a ZERO record)");
		else if (blk[k].bk_kind == DD_BLK_ZERO ||
			 memcmp(blk[k].bk_hash, j->rj_hash, 32) != 0)
			dd_rjob_fail(r, b, j, DD_ECHECKSUM,
				     "block sha256 mismatch%s",
				     j->rj_kind == DD_SREC_REF ?
				     " in the copy read back" : "");
	}
}

/* ---- the writer thread ----------------------------------------------------*/

/* Zeros over blocks idx .. idx + count - 1 of a device (var: bytes idx
 * .. idx + count - 1; a regular file has holes there already: it was
 * sized with ftruncate). */
static int dd_rwrite_zeros(dd_rrecv *r, dd_err *err, uint64_t idx,
			   uint64_t count)
{
	static const uint8_t z[DD_RRECV_ZERO_CHUNK];
	uint64_t bs = r->rr_h.sh_block_size;
	uint64_t off = r->rr_var ? idx : idx * bs;
	uint64_t end = r->rr_var ? idx + count :
		idx + count >= dd_block_count(r->rr_h.sh_size,
					      r->rr_h.sh_block_size) ?
		r->rr_h.sh_size : (idx + count) * bs;

	while (off < end) {
		size_t n = end - off < sizeof(z) ? (size_t)(end - off) :
			sizeof(z);
		int rc = dd_io_pwrite_full(err, r->rr_fd, z, n, off, "output");

		if (rc)
			return rc;
		off += n;
	}
	return 0;
}

/* Does job k continue the run of blocks that job k - 1 ends, in the
 * image and in rrb_out? */
static bool dd_rjob_adjacent(const dd_rrecv *r, const dd_rjob *prev,
			     const dd_rjob *k)
{
	if (k->rj_kind == DD_SREC_ZERO || prev->rj_kind == DD_SREC_ZERO ||
	    k->rj_ooff != prev->rj_ooff + prev->rj_lsize)
		return false;
	if (r->rr_var)
		return k->rj_idx == prev->rj_idx + prev->rj_lsize;
	return k->rj_idx == prev->rj_idx + 1 &&
	       prev->rj_lsize == r->rr_h.sh_block_size;
}

/* Writes a checked batch: each run of consecutive blocks, up to
 * DD_RRECV_WRITE_MAX bytes, is one pwrite (their slots in rrb_out are
 * consecutive too).  Only the writer thread writes: parallel writes to
 * one file contend on its inode lock, and many small ones cost more than
 * a few large. */
static int dd_rrbatch_write(dd_rrecv *r, const dd_rrbatch *b, dd_err *err)
{
	uint32_t bs = r->rr_h.sh_block_size;

	for (size_t i = 0, k; i < b->rrb_n; i = k) {
		const dd_rjob *j = &b->rrb_job[i];
		size_t len = j->rj_lsize;
		int rc;

		k = i + 1;
		if (j->rj_kind == DD_SREC_ZERO) {
			rc = dd_rwrite_zeros(r, err, j->rj_idx, j->rj_count);
		} else {
			for (; k < b->rrb_n &&
			       len + b->rrb_job[k].rj_lsize <= DD_RRECV_WRITE_MAX &&
			       dd_rjob_adjacent(r, &b->rrb_job[k - 1],
						&b->rrb_job[k]); k++)
				len += b->rrb_job[k].rj_lsize;
			rc = dd_io_pwrite_full(err, r->rr_fd,
					       b->rrb_out + j->rj_ooff, len,
					       r->rr_var ? j->rj_idx
							 : j->rj_idx * bs,
					       "output");
		}
		if (rc)
			return rc;
	}
	return 0;
}

/* The writer thread: writes queued batches in order until stopped.  After
 * a failure, or once stopped, it retires batches without writing them, so
 * the caller never waits for a write that will not come. */
static void *dd_rwriter_main(void *arg)
{
	dd_rrecv *r = arg;

	pthread_mutex_lock(&r->rr_mu);
	for (;;) {
		const dd_rrbatch *b;
		bool skip;
		dd_err e;
		int rc = 0;

		while (r->rr_nwritten == r->rr_nqueued && !r->rr_wstop)
			pthread_cond_wait(&r->rr_wcv, &r->rr_mu);
		if (r->rr_nwritten == r->rr_nqueued)
			break;
		b = &r->rr_b[r->rr_nwritten % DD_RRECV_RING];
		skip = r->rr_wstop || r->rr_werr.de_code;
		pthread_mutex_unlock(&r->rr_mu);
		if (!skip)
			rc = dd_rrbatch_write(r, b, &e);
		pthread_mutex_lock(&r->rr_mu);
		if (rc && !r->rr_werr.de_code)
			dd_err_copy(&r->rr_werr, &e);
		r->rr_nwritten++;
		pthread_cond_signal(&r->rr_dcv);
	}
	pthread_mutex_unlock(&r->rr_mu);
	return NULL;
}

int dd_rwriter_start(dd_rrecv *r)
{
	sigset_t all, old;
	int rc;

	/* signals are for the host's threads, as in the pool */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&r->rr_writer, NULL, dd_rwriter_main, r);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc)
		return dd_err_set(r->rr_err, DD_ENOMEM,
				  "cannot start the writer thread");
	r->rr_writer_on = true;
	return 0;
}

/* Stops the writer; what it has not written yet is dropped (after a
 * failure), or there is none (after dd_rrecv_drain). */
void dd_rwriter_stop(dd_rrecv *r)
{
	if (!r->rr_writer_on)
		return;
	pthread_mutex_lock(&r->rr_mu);
	r->rr_wstop = true;
	pthread_cond_signal(&r->rr_wcv);
	pthread_mutex_unlock(&r->rr_mu);
	pthread_join(r->rr_writer, NULL);
	r->rr_writer_on = false;
}

/* ---- the calling thread: batches through the stages -----------------------*/

/* Queues the batch just checked for the writer (without an output, it is
 * done at once). */
static void dd_rrecv_queue(dd_rrecv *r)
{
	pthread_mutex_lock(&r->rr_mu);
	r->rr_nqueued++;
	if (!r->rr_writer_on)
		r->rr_nwritten = r->rr_nqueued;
	pthread_cond_signal(&r->rr_wcv);
	pthread_mutex_unlock(&r->rr_mu);
}

/* Waits until at most `pending` queued batches are left to write; returns
 * the writer's failure, if any. */
static int dd_rrecv_wait_writer(dd_rrecv *r, uint64_t pending)
{
	int rc = 0;

	pthread_mutex_lock(&r->rr_mu);
	while (r->rr_nqueued - r->rr_nwritten > pending &&
	       !r->rr_werr.de_code)
		pthread_cond_wait(&r->rr_dcv, &r->rr_mu);
	if (r->rr_werr.de_code)
		rc = dd_err_copy(r->rr_err, &r->rr_werr);
	pthread_mutex_unlock(&r->rr_mu);
	return rc;
}

/* Waits for the batch with the pool, helping it, and queues it.  Reports
 * the first failure in block order: the writer's (on earlier batches)
 * before this batch's. */
static int dd_rrecv_land(dd_rrecv *r)
{
	dd_rrbatch *b = r->rr_fly;
	int rc;

	if (!b)
		return 0;
	dd_pstage_wait(&r->rr_stage);
	r->rr_fly = NULL;
	if (b->rrb_fail_idx != UINT64_MAX) {
		rc = dd_rrecv_wait_writer(r, 0);
		return rc ? rc : dd_err_copy(r->rr_err, &b->rrb_err);
	}
	dd_rrecv_queue(r);
	return 0;
}

/* Hands the filling batch to the pool once it has finished the previous
 * one (which goes to the writer), then waits until the next batch of the
 * ring is written out, and fills that one next. */
static int dd_rrecv_submit(dd_rrecv *r)
{
	dd_rrbatch *b = r->rr_cur;
	int rc;

	if (!b->rrb_n)
		return 0;
	rc = dd_rrecv_land(r);
	if (rc)
		return rc;
	b->rrb_fail_idx = UINT64_MAX;
	r->rr_fly = b;
	dd_pstage_start(&r->rr_stage, dd_rrecv_job, r, (b->rrb_n + 1) / 2);
	r->rr_nfilled++;
	r->rr_cur = &r->rr_b[r->rr_nfilled % DD_RRECV_RING];
	/* in flight: rr_fly and the queued ones; the ring holds one more */
	rc = dd_rrecv_wait_writer(r, DD_RRECV_RING - 2);
	r->rr_cur->rrb_n = 0;
	r->rr_cur->rrb_plen = 0;
	r->rr_cur->rrb_olen = 0;
	return rc;
}

/* Every block decoded so far checked and written. */
int dd_rrecv_drain(dd_rrecv *r)
{
	int rc = dd_rrecv_submit(r);

	if (!rc)
		rc = dd_rrecv_land(r);
	return rc ? rc : dd_rrecv_wait_writer(r, 0);
}

/* The next job of the filling batch, with room for lsize bytes of
 * output after the others' (each at most rr_max: a batch of rr_cap jobs
 * fits its rr_cap * rr_max bytes). */
dd_rjob *dd_rrecv_slot(dd_rrecv *r, uint32_t lsize, int *rc)
{
	dd_rjob *j;

	*rc = 0;
	if (r->rr_cur->rrb_n == r->rr_cap)
		*rc = dd_rrecv_submit(r);
	if (*rc)
		return NULL;
	j = &r->rr_cur->rrb_job[r->rr_cur->rrb_n++];
	j->rj_ooff = r->rr_cur->rrb_olen;
	r->rr_cur->rrb_olen += lsize;
	return j;
}

/* The lowest block index not yet written to the output: the first block
 * of the oldest batch in flight, else of the filling one. */
uint64_t dd_rrecv_unwritten(dd_rrecv *r)
{
	uint64_t w;

	pthread_mutex_lock(&r->rr_mu);
	w = r->rr_nwritten;
	pthread_mutex_unlock(&r->rr_mu);
	if (w < r->rr_nfilled)
		return r->rr_b[w % DD_RRECV_RING].rrb_job[0].rj_idx;
	return r->rr_cur->rrb_n ? r->rr_cur->rrb_job[0].rj_idx : UINT64_MAX;
}

