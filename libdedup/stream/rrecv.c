/*
 * rrecv.c -- replication streams into a file or device, without a store:
 * dd_recv_fd rebuilds the image, dd_stream_check verifies a stream and
 * describes it, writing nothing.
 *
 * The calling thread decodes records (framing, CRCs, stream digest:
 * serial by nature) and queues DATA and REF blocks in a batch; full
 * batches go to the pool threads (chunk/pstage.h, the pool stage the
 * block pipeline uses too), which decompress DATA
 * or read a REF's earlier copy back from the output, and check each
 * block's SHA-256 with the block pipeline's hash stage (dd_blk_hash: the
 * zero test, and two blocks at a time), while the calling thread decodes
 * the next batch.  Checked batches go to a writer thread, which writes
 * them in order in runs of adjacent blocks, so neither decoding nor
 * checking waits for the page cache; a ring of small batches bounds what
 * is in flight.  A REF whose source block is not written yet forces the
 * pending batches out first, so a REF is always read from bytes already
 * written and verified.  The content digest is computed from the
 * records' hashes in order and checked at END.  dd_stream_check is the
 * same loop with no output: REFs only have to name a hash seen before
 * (or, in an incremental or resumed stream, one the receiver is expected
 * to hold).
 *
 * A stream of content-defined blocks (format/stream.md §12) gives byte
 * offsets where a fixed one gives block indices, and blocks of any length
 * up to its chunker's longest: a batch keeps its blocks back to back in
 * rrb_out (rj_ooff), the seen-table maps a hash to the offset of its
 * first copy, and a ZERO record is a hole of that many bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/fs.h>

#include "dedup.h"
#include "chunk/pipeline.h"
#include "chunk/pstage.h"
#include "common/alloc.h"
#include "common/hmap.h"
#include "common/io.h"
#include "common/pool.h"
#include "pack/pack.h"
#include "stream/stream.h"

/* A ring of 4 batches of 2 MiB (2 blocks of 1 MiB at least): one filling,
 * one being checked, two with the writer, so a slow write does not stall
 * decoding at once.  Smaller batches cost more pool hand-offs, each
 * ending with workers idle while the batch's last block is checked
 * (1 MiB batches measured 4% slower). */
#define DD_RRECV_BATCH ((size_t)2 << 20)
#define DD_RRECV_BATCH_MIN 2
#define DD_RRECV_RING 4
/* Largest pwrite of the output.  Measured on Linux 6.18 / ext4: writing
 * 1 GiB in 2 MiB pwrites took 1.2-1.3 s of kernel time (the copy into the
 * page cache), in 1 MiB or smaller ones 0.3-0.4 s. */
#define DD_RRECV_WRITE_MAX ((size_t)1 << 20)
#define DD_RRECV_ZERO_CHUNK ((size_t)1 << 20)

/* An inner message without its "DD_EXXX: " symbol, to nest it in ours. */
static const char *dd_rrecv_inner(const dd_err *e)
{
	const char *p = strstr(e->de_msg, ": ");

	return p && strncmp(e->de_msg, "DD_E", 4) == 0 ? p + 2 : e->de_msg;
}

/*
 * A receive runs in three stages over a ring of DD_RRECV_RING batches, each
 * on its own threads, so that decoding, checking and writing overlap:
 *
 *   fill   the calling thread decodes records into batch rr_nfilled;
 *   check  the pool decompresses each DATA block, reads each REF's first
 *          copy back from the output, and checks every block's SHA-256,
 *          one batch at a time (the caller helps once it has filled the
 *          next batch);
 *   write  the writer thread writes checked batches in order.
 *
 * Batches [rr_nwritten, rr_nqueued) are checked and wait for the writer,
 * rr_fly is with the pool, rr_cur is being filled.  A batch is filled only
 * once the batch DD_RRECV_RING before it is written, so no buffer is reused
 * while the writer reads it; only checked batches are queued, so nothing
 * unverified is written.  Without an output (dd_stream_check) there is no
 * writer thread and a checked batch is retired at once.
 */

typedef struct dd_rjob {
	uint64_t rj_idx;           /* position: block index, or var byte */
	uint64_t rj_src;           /* REF: block holding the first copy */
	size_t rj_ooff;            /* its bytes in rrb_out */
	uint64_t rj_count;         /* ZERO: blocks in the run */
	uint8_t rj_hash[32];
	uint8_t rj_kind;           /* DD_SREC_DATA, _REF, or _ZERO (a zero
				      run to write on a device) */
	uint8_t rj_codec;
	uint32_t rj_lsize, rj_psize;
	size_t rj_poff;            /* DATA: payload offset in rrb_pay */
} dd_rjob;

typedef struct dd_rrbatch {
	dd_rjob *rrb_job;
	size_t rrb_n;
	uint8_t *rrb_pay;           /* DATA payloads, back to back */
	size_t rrb_plen;
	uint8_t *rrb_out;           /* the jobs' blocks, back to back */
	size_t rrb_olen;
	uint64_t rrb_fail_idx;      /* lowest failing block, or UINT64_MAX */
	dd_err rrb_err;
} dd_rrbatch;

typedef struct dd_rrecv {
	dd_sdec *rr_dec;
	dd_stream_hdr rr_h;
	int rr_fd;                 /* -1: check only */
	bool rr_dev;               /* a block device: write zero runs */
	bool rr_var;               /* content-defined: positions are bytes */
	uint32_t rr_max;           /* the longest block */
	dd_pool *rr_pool;
	dd_pstage rr_stage;        /* the batch with the pool, and hashers */
	unsigned rr_width;
	dd_codec_ctx **rr_codec;
	size_t rr_cap;             /* jobs (and out slots) per batch */
	dd_rrbatch rr_b[DD_RRECV_RING];
	dd_rrbatch *rr_cur;         /* filling: rr_b[rr_nfilled % ring] */
	dd_rrbatch *rr_fly;         /* with the pool, or NULL */
	uint64_t rr_nfilled;       /* batches handed to the pool */
	/* rr_mu guards the writer's state below and the batches' failures */
	pthread_mutex_t rr_mu;
	pthread_cond_t rr_wcv;     /* to the writer: a batch queued, or stop */
	pthread_cond_t rr_dcv;     /* to the caller: a batch written */
	pthread_t rr_writer;
	bool rr_writer_on;
	bool rr_wstop;             /* the writer writes nothing more */
	uint64_t rr_nqueued;       /* batches checked and queued */
	uint64_t rr_nwritten;      /* batches written (or skipped) */
	dd_err rr_werr;            /* the writer's first failure */
	dd_hmap *rr_seen;          /* hash -> block index of the first copy */
	dd_digest *rr_digest;
	bool rr_digest_on;         /* resume_from == 0: every block is seen */
	uint64_t rr_base_refs;     /* REFs to blocks not in this stream */
	dd_stream_info rr_info;
	const dd_recv_opts *rr_opts;
	dd_err *rr_err;
} dd_rrecv;

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
	dd_blk_hash(r->rr_stage.ps_hasher[worker], blk, n, b->rrb_out, 0);
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

static int dd_rwriter_start(dd_rrecv *r)
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
static void dd_rwriter_stop(dd_rrecv *r)
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
static int dd_rrecv_drain(dd_rrecv *r)
{
	int rc = dd_rrecv_submit(r);

	if (!rc)
		rc = dd_rrecv_land(r);
	return rc ? rc : dd_rrecv_wait_writer(r, 0);
}

/* The next job of the filling batch, with room for lsize bytes of
 * output after the others' (each at most rr_max: a batch of rr_cap jobs
 * fits its rr_cap * rr_max bytes). */
static dd_rjob *dd_rrecv_slot(dd_rrecv *r, uint32_t lsize, int *rc)
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

static int dd_rrecv_data(dd_rrecv *r, const dd_srec *s)
{
	dd_rrbatch *b;
	dd_rjob *j;
	int rc;

	r->rr_info.data_records++;
	r->rr_info.data_bytes += s->sr_psize;
	rc = dd_hmap_put(r->rr_seen, r->rr_err, s->sr_hash, s->sr_idx);
	if (rc)
		return rc;
	j = dd_rrecv_slot(r, s->sr_lsize, &rc);
	if (!j)
		return rc;
	b = r->rr_cur;
	j->rj_idx = s->sr_idx;
	j->rj_kind = DD_SREC_DATA;
	j->rj_codec = s->sr_codec;
	j->rj_lsize = s->sr_lsize;
	j->rj_psize = s->sr_psize;
	memcpy(j->rj_hash, s->sr_hash, 32);
	j->rj_poff = b->rrb_plen;
	memcpy(b->rrb_pay + b->rrb_plen, s->sr_payload, s->sr_psize);
	b->rrb_plen += s->sr_psize;
	return 0;
}

/* The lowest block index not yet written to the output: the first block
 * of the oldest batch in flight, else of the filling one. */
static uint64_t dd_rrecv_unwritten(dd_rrecv *r)
{
	uint64_t w;

	pthread_mutex_lock(&r->rr_mu);
	w = r->rr_nwritten;
	pthread_mutex_unlock(&r->rr_mu);
	if (w < r->rr_nfilled)
		return r->rr_b[w % DD_RRECV_RING].rrb_job[0].rj_idx;
	return r->rr_cur->rrb_n ? r->rr_cur->rrb_job[0].rj_idx : UINT64_MAX;
}

static int dd_rrecv_ref(dd_rrecv *r, const dd_srec *s, uint64_t nrec)
{
	const dd_stream_hdr *h = &r->rr_h;
	uint64_t src;
	dd_rjob *j;
	int rc;

	r->rr_info.ref_records++;
	rc = dd_hmap_get(r->rr_seen, r->rr_err, s->sr_hash, &src);
	if (rc == DD_ENOENT &&
	    (h->sh_flags & DD_SH_INCREMENTAL || h->sh_resume_from) &&
	    r->rr_fd < 0) {
		/* Held by the base, or sent before the resume point. */
		r->rr_base_refs++;
		return 0;
	}
	if (rc == DD_ENOENT)
		return dd_err_set(r->rr_err, DD_EFORMAT,
				  "stream record %llu (REF) for block %llu: "
				  "references a block never sent",
				  (unsigned long long)nrec,
				  (unsigned long long)s->sr_idx);
	if (rc)
		return rc;
	/* var: a copy of another length fails its hash when read back */
	if (!r->rr_var &&
	    dd_block_lsize(h->sh_size, h->sh_block_size, src) != s->sr_lsize)
		return dd_err_set(r->rr_err, DD_EFORMAT,
				  "stream record %llu (REF) for block %llu: "
				  "its hash names block %llu, of another size",
				  (unsigned long long)nrec,
				  (unsigned long long)s->sr_idx,
				  (unsigned long long)src);
	if (r->rr_fd < 0)
		return 0;
	/* a REF is read back from bytes already written and checked */
	if (src >= dd_rrecv_unwritten(r)) {
		rc = dd_rrecv_drain(r);
		if (rc)
			return rc;
	}
	j = dd_rrecv_slot(r, s->sr_lsize, &rc);
	if (!j)
		return rc;
	j->rj_idx = s->sr_idx;
	j->rj_src = src;
	j->rj_kind = DD_SREC_REF;
	j->rj_lsize = s->sr_lsize;
	memcpy(j->rj_hash, s->sr_hash, 32);
	return 0;
}

/* A zero run: a hole in a regular file (sized with ftruncate at the
 * start, so nothing to write), zeros written on a device. */
static int dd_rrecv_zero(dd_rrecv *r, const dd_srec *s)
{
	dd_rjob *j;
	int rc;

	r->rr_info.zero_records++;
	r->rr_info.zero_blocks += r->rr_var ? 1 : s->sr_count;
	if (r->rr_digest_on && r->rr_var)
		dd_digest_block(r->rr_digest, NULL, s->sr_count);
	else if (r->rr_digest_on)
		dd_digest_zeros(r->rr_digest, s->sr_count);
	if (!r->rr_dev)
		return 0;
	j = dd_rrecv_slot(r, 0, &rc);
	if (!j)
		return rc;
	j->rj_idx = s->sr_idx;
	j->rj_count = s->sr_count;
	j->rj_kind = DD_SREC_ZERO;
	j->rj_lsize = 0;
	return 0;
}

static int dd_rrecv_end(dd_rrecv *r)
{
	uint8_t digest[32];
	int rc = dd_rrecv_drain(r);

	if (rc)
		return rc;
	if (r->rr_digest_on) {
		dd_digest_final(r->rr_digest, r->rr_h.sh_size,
				r->rr_h.sh_block_size, digest);
		if (memcmp(digest, r->rr_h.sh_digest, 32) != 0)
			return dd_err_set(r->rr_err, DD_ECHECKSUM,
					  "content digest of the blocks "
					  "received does not match the "
					  "stream header's");
	}
	return dd_sdec_expect_eof(r->rr_dec, r->rr_err);
}

static int dd_rrecv_record(dd_rrecv *r, const dd_srec *s, uint64_t nrec)
{
	if (r->rr_digest_on && s->sr_type != DD_SREC_ZERO &&
	    s->sr_type != DD_SREC_END)
		dd_digest_block(r->rr_digest, s->sr_hash, s->sr_lsize);
	switch (s->sr_type) {
	case DD_SREC_DATA:
		return dd_rrecv_data(r, s);
	case DD_SREC_REF:
		return dd_rrecv_ref(r, s, nrec);
	case DD_SREC_ZERO:
		return dd_rrecv_zero(r, s);
	default:
		return dd_rrecv_end(r);
	}
}

static int dd_rrecv_loop(dd_rrecv *r)
{
	const dd_recv_opts *o = r->rr_opts;
	uint64_t bs = r->rr_h.sh_block_size, nrec = 1;
	dd_srec s;
	int rc, type;

	do {
		type = dd_sdec_next(r->rr_dec, r->rr_err, &s);
		if (type < 0)
			return type;
		rc = dd_rrecv_record(r, &s, nrec++);
		if (rc)
			return rc;
		if (o->progress && s.sr_type != DD_SREC_END) {
			uint64_t last = s.sr_idx + (s.sr_count ? s.sr_count :
						    r->rr_var ? s.sr_lsize : 1);
			uint64_t done = r->rr_var ? last : last * bs;

			if (o->progress(o->progress_ctx,
					done > r->rr_h.sh_size ? r->rr_h.sh_size
							       : done,
					r->rr_h.sh_size) != 0)
				return dd_err_set(r->rr_err, DD_ECANCELED,
						  "stopped by the progress "
						  "callback");
		}
	} while (type != DD_SREC_END);
	return 0;
}

static int dd_rrecv_setup(dd_rrecv *r)
{
	size_t bs;
	int rc;

	r->rr_var = r->rr_h.sh_chunker != DD_CHUNKER_FIXED;
	r->rr_max = dd_stream_block_max(&r->rr_h);
	bs = r->rr_max;   /* a job's room in a batch: the longest block */

	r->rr_cap = DD_RRECV_BATCH / bs;
	if (r->rr_cap < DD_RRECV_BATCH_MIN)
		r->rr_cap = DD_RRECV_BATCH_MIN;
	for (int i = 0; i < DD_RRECV_RING; i++) {
		dd_rrbatch *b = &r->rr_b[i];

		b->rrb_job = dd_calloc(r->rr_cap, sizeof(*b->rrb_job));
		b->rrb_pay = dd_malloc(r->rr_cap * bs);
		b->rrb_out = dd_malloc(r->rr_cap * bs);
		if (!b->rrb_job || !b->rrb_pay || !b->rrb_out)
			return dd_err_set(r->rr_err, DD_ENOMEM,
					  "out of memory");
	}
	r->rr_cur = &r->rr_b[0];
	rc = dd_pool_new(&r->rr_pool, 0);
	if (rc)
		return dd_err_set(r->rr_err, rc, "cannot start worker threads");
	r->rr_width = dd_pool_width(r->rr_pool);
	rc = dd_raw_codecs(&r->rr_codec, r->rr_err, r->rr_width,
			   DD_CODEC_NONE, 0);
	if (!rc)
		rc = dd_pstage_init(&r->rr_stage, r->rr_err, r->rr_pool, NULL,
				    DD_HASH_SHA256);
	if (rc)
		return rc;
	r->rr_digest_on = r->rr_h.sh_resume_from == 0;
	rc = dd_digest_new(&r->rr_digest, r->rr_err, r->rr_h.sh_chunker);
	if (rc)
		return rc;
	return dd_hmap_new(&r->rr_seen, r->rr_err, r->rr_opts->mem_limit,
			   r->rr_opts->tmpdir);
}

/* The pool first (its job may read rr_fly), then the writer: neither runs
 * once the buffers are freed. */
static void dd_rrecv_cleanup(dd_rrecv *r)
{
	dd_pstage_fini(&r->rr_stage);
	dd_rwriter_stop(r);
	dd_pool_free(r->rr_pool);
	dd_raw_codecs_free(r->rr_codec, r->rr_width);
	for (int i = 0; i < DD_RRECV_RING; i++) {
		dd_free(r->rr_b[i].rrb_job);
		dd_free(r->rr_b[i].rrb_pay);
		dd_free(r->rr_b[i].rrb_out);
	}
	dd_hmap_free(r->rr_seen);
	dd_digest_free(r->rr_digest);
	dd_sdec_free(r->rr_dec);
	pthread_cond_destroy(&r->rr_wcv);
	pthread_cond_destroy(&r->rr_dcv);
	pthread_mutex_destroy(&r->rr_mu);
}

/* Prepares the output: a regular file is emptied and sized (so an image
 * too large for it fails now, and zero runs stay holes); a device must
 * be large enough.  A file that is empty already is not truncated to 0:
 * ext4 (auto_da_alloc) then writes the whole file back when it is closed,
 * which would make close() wait for the image to reach the disk. */
static int dd_rrecv_output(dd_rrecv *r)
{
	struct stat st;
	uint64_t devsize;
	int rc;

	if (fstat(r->rr_fd, &st) != 0)
		return dd_err_set_errno(r->rr_err, errno, "fstat output");
	if (S_ISREG(st.st_mode)) {
		rc = st.st_size ? dd_io_ftruncate(r->rr_err, r->rr_fd, 0,
						  "output") : 0;
		return rc ? rc : dd_io_ftruncate(r->rr_err, r->rr_fd,
						 r->rr_h.sh_size, "output");
	}
	if (!S_ISBLK(st.st_mode))
		return dd_err_set(r->rr_err, DD_ENOTSUP, "output is not a "
				  "regular file or block device");
	if (ioctl(r->rr_fd, BLKGETSIZE64, &devsize) != 0)
		return dd_err_set_errno(r->rr_err, errno,
					"BLKGETSIZE64 on output");
	if (devsize < r->rr_h.sh_size)
		return dd_err_set(r->rr_err, DD_ENOSPC, "output device holds "
				  "%llu bytes, the image has %llu",
				  (unsigned long long)devsize,
				  (unsigned long long)r->rr_h.sh_size);
	r->rr_dev = true;
	return 0;
}

static int dd_rrecv_run(dd_rrecv *r, dd_read_fn fn, void *ctx)
{
	int rc;

	rc = dd_sdec_new(&r->rr_dec, r->rr_err, fn, ctx);
	if (!rc)
		rc = dd_sdec_header(r->rr_dec, r->rr_err, &r->rr_h);
	if (rc)
		return rc;
	dd_stream_info_of(&r->rr_info, &r->rr_h, r->rr_h.sh_name);
	if (r->rr_fd >= 0 && (r->rr_h.sh_flags & DD_SH_INCREMENTAL))
		return dd_err_set(r->rr_err, DD_ENOTSUP, "incremental stream "
				  "(base '%s'): it needs its base, receive it "
				  "into a store", r->rr_h.sh_base);
	if (r->rr_fd >= 0 && r->rr_h.sh_resume_from)
		return dd_err_set(r->rr_err, DD_ENOTSUP, "resumed stream "
				  "(from block %llu): receive it into the store "
				  "that holds the first part",
				  (unsigned long long)r->rr_h.sh_resume_from);
	rc = dd_rrecv_setup(r);
	if (!rc && r->rr_fd >= 0)
		rc = dd_rrecv_output(r);
	if (!rc && r->rr_fd >= 0)
		rc = dd_rwriter_start(r);
	if (!rc)
		rc = dd_rrecv_loop(r);
	r->rr_info.stream_bytes = dd_sdec_bytes(r->rr_dec);
	return rc;
}

static int dd_rrecv_main(int fd, const dd_recv_opts *opts, dd_read_fn fn,
			 void *ctx, dd_stream_info *info, uint64_t *base_refs)
{
	static const dd_recv_opts defaults = DD_RECV_OPTS_INIT;
	dd_err *err = dd_thread_err();
	dd_rrecv r;
	int rc;

	dd_err_clear(err);
	if (!opts)
		opts = &defaults;
	if (!fn)
		return dd_err_set(err, DD_EINVAL, "no read callback");
	if (opts->version == 0 || opts->version > DD_RECV_OPTS_VERSION)
		return dd_err_set(err, DD_EINVAL, "dd_recv_opts version %u "
				  "not supported", opts->version);
	memset(&r, 0, sizeof(r));
	pthread_mutex_init(&r.rr_mu, NULL);
	pthread_cond_init(&r.rr_wcv, NULL);
	pthread_cond_init(&r.rr_dcv, NULL);
	r.rr_fd = fd;
	r.rr_opts = opts;
	r.rr_err = err;
	rc = dd_rrecv_run(&r, fn, ctx);
	dd_rrecv_cleanup(&r);
	if (rc)
		return rc;
	if (info)
		*info = r.rr_info;
	if (base_refs)
		*base_refs = r.rr_base_refs;
	return 0;
}

int dd_recv_fd(int fd, const dd_recv_opts *opts, dd_read_fn fn, void *ctx,
	       dd_stream_info *info)
{
	if (fd < 0)
		return dd_err_set(dd_thread_err(), DD_EINVAL,
				  "dd_recv_fd: bad fd %d", fd);
	return dd_rrecv_main(fd, opts, fn, ctx, info, NULL);
}

int dd_stream_check(const dd_recv_opts *opts, dd_read_fn fn, void *ctx,
		    dd_stream_info *info)
{
	return dd_rrecv_main(-1, opts, fn, ctx, info, NULL);
}

int dd_stream_check_ex(const dd_recv_opts *opts, dd_read_fn fn, void *ctx,
		       dd_stream_info *info, uint64_t *base_refs)
{
	return dd_rrecv_main(-1, opts, fn, ctx, info, base_refs);
}
