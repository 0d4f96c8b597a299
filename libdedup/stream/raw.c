/*
 * raw.c -- replication streams without a store: dd_send_fd streams a
 * regular file or block device, dd_recv_fd rebuilds one, dd_stream_check
 * verifies a stream and describes it; plus the fd I/O callbacks.
 *
 * Sending (format/stream.md §10).  The HEADER carries the content digest
 * (format/store.md §6), which depends on every block, so the input is read
 * twice: a first pass hashes every block for the digest, the second hashes
 * again, deduplicates and compresses, and emits.  The second pass
 * recomputes the digest and fails before END if it differs, so an input
 * that changes while it is sent gives a stream every receiver refuses,
 * never a wrong image.  Hashing runs at ~2.5 GB/s on two cores, so the
 * first pass costs little next to compression; a pipe cannot be read
 * twice and is refused.  Each pass reads batches of ~4 MiB; a dd_pool
 * hashes a batch's blocks (zero blocks are found first and never hashed),
 * the calling thread then looks each hash up in a dd_hmap of blocks
 * already sent (a hit is a REF; a miss is inserted at once, so a repeat
 * within the batch is a REF too), the pool compresses only the new
 * blocks, and the blocks are emitted in order.  Memory: two batch buffers,
 * the encoder's 1 MiB, and the hmap up to mem_limit (it spills beyond).
 *
 * Receiving.  The calling thread decodes records (framing, CRCs, stream
 * digest: serial by nature) and queues DATA and REF blocks in a batch;
 * full batches go to the pool threads (dd_pool_start), which decompress
 * DATA and check its SHA-256, or read a REF's earlier copy back from the
 * output and check that, while the calling thread decodes the next batch.
 * Checked batches go to a writer thread, which writes them in order in
 * runs of adjacent blocks, so neither decoding nor checking waits for the
 * page cache; a ring of small batches bounds what is in flight.  A REF
 * whose source block is not written yet forces the pending batches out
 * first, so a REF is always read from bytes already written and verified.
 * The content digest is computed from the records' hashes in order and
 * checked at END.  dd_stream_check is the same loop with no output: REFs
 * only have to name a hash seen before (or, in an incremental or resumed
 * stream, one the receiver is expected to hold).
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
#include "chunk/chunk.h"
#include "common/alloc.h"
#include "common/endian.h"
#include "common/hmap.h"
#include "common/io.h"
#include "common/pool.h"
#include "hash/hash.h"
#include "pack/pack.h"
#include "stream/stream.h"

#define DD_RAW_BATCH ((size_t)4 << 20)   /* send: bytes of blocks per batch */
#define DD_RAW_BATCH_MIN 4               /* send: blocks per batch, at least */
/* Receive: a ring of 4 batches of 2 MiB (2 blocks of 1 MiB): one filling,
 * one being checked, two with the writer, so a slow write does not stall
 * decoding at once.  Payloads and output take 16 MiB, as the two 4 MiB
 * batches did when the decoding thread wrote.  1 MiB batches measured 4%
 * slower: more pool hand-offs, each ending with workers idle while the
 * last block of the batch is checked. */
#define DD_RAW_RECV_BATCH ((size_t)2 << 20)
#define DD_RAW_RECV_BATCH_MIN 2
#define DD_RAW_RING 4
/* Largest pwrite of the output.  Measured on Linux 6.18 / ext4: writing
 * 1 GiB in 2 MiB pwrites took 1.2-1.3 s of kernel time (the copy into the
 * page cache), in 1 MiB or smaller ones 0.3-0.4 s. */
#define DD_RAW_WRITE_MAX ((size_t)1 << 20)
#define DD_RAW_ZERO_CHUNK ((size_t)1 << 20)

/* ---- fd callbacks ---------------------------------------------------------*/

int dd_fd_write(void *ctx, const void *buf, size_t len)
{
	if (!ctx || (!buf && len))
		return dd_err_set(dd_thread_err(), DD_EINVAL,
				  "dd_fd_write: NULL argument");
	return dd_io_write_full(dd_thread_err(), *(const int *)ctx, buf, len,
				"stream output");
}

int dd_fd_read(void *ctx, void *buf, size_t len, size_t *got)
{
	if (!ctx || !got || (!buf && len))
		return dd_err_set(dd_thread_err(), DD_EINVAL,
				  "dd_fd_read: NULL argument");
	return dd_io_read(dd_thread_err(), *(const int *)ctx, buf, len, got,
			  "stream input");
}

/* ---- shared helpers -------------------------------------------------------*/

static size_t dd_raw_batch_blocks(size_t bytes, size_t min, uint32_t bs)
{
	size_t n = bytes / bs;

	return n < min ? min : n;
}

/* An inner message without its "DD_EXXX: " symbol, to nest it in ours. */
static const char *dd_raw_inner(const dd_err *e)
{
	const char *p = strstr(e->de_msg, ": ");

	return p && strncmp(e->de_msg, "DD_E", 4) == 0 ? p + 2 : e->de_msg;
}

static int dd_raw_progress(dd_err *err, dd_progress_fn fn, void *ctx,
			   uint64_t done, uint64_t total)
{
	if (fn && fn(ctx, done, total) != 0)
		return dd_err_set(err, DD_ECANCELED,
				  "stopped by the progress callback");
	return 0;
}

/* Per-worker codec contexts, indexed by the pool's worker number. */
static int dd_raw_codecs(dd_codec_ctx ***out, dd_err *err, unsigned n,
			 int codec, int level)
{
	dd_codec_ctx **c = dd_calloc(n, sizeof(*c));

	if (!c)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	for (unsigned i = 0; i < n; i++) {
		if (dd_codec_new(&c[i], codec, level) != 0) {
			for (unsigned j = 0; j < i; j++)
				dd_codec_free(c[j]);
			dd_free(c);
			return dd_err_set(err, DD_ENOMEM,
					  "cannot create codec contexts");
		}
	}
	*out = c;
	return 0;
}

static void dd_raw_codecs_free(dd_codec_ctx **c, unsigned n)
{
	if (!c)
		return;
	for (unsigned i = 0; i < n; i++)
		dd_codec_free(c[i]);
	dd_free(c);
}

/* ---- sending --------------------------------------------------------------*/

enum { DD_SB_ZERO, DD_SB_REF, DD_SB_DATA };

typedef struct dd_sblk {
	uint8_t sb_hash[32];
	uint32_t sb_lsize;
	uint32_t sb_psize;
	uint8_t sb_kind;
	uint8_t sb_codec;
	int sb_rc;
} dd_sblk;

typedef struct dd_rsend {
	int rs_fd;
	uint64_t rs_size, rs_nblocks;
	uint32_t rs_bs;
	dd_pool *rs_pool;
	unsigned rs_width;
	dd_codec_ctx **rs_codec;
	size_t rs_cap;             /* blocks per batch */
	uint8_t *rs_in;            /* rs_cap blocks read */
	uint8_t *rs_out;           /* rs_cap slots of rs_slot bytes */
	size_t rs_slot;
	dd_sblk *rs_blk;
	size_t rs_n;               /* blocks in the batch */
	uint64_t rs_first;         /* index of its first block */
	size_t *rs_new;            /* batch positions of blocks to compress */
	size_t rs_nnew;
	dd_hmap *rs_sent;
	dd_digest *rs_digest;
	dd_senc *rs_enc;
	const dd_send_opts *rs_opts;
	uint64_t rs_done;          /* bytes read, both passes */
	dd_err *rs_err;
	dd_err rs_werr;            /* a worker's error */
	pthread_mutex_t rs_mu;
} dd_rsend;

/* Pool job: zero check and hash of one block of the batch. */
static void dd_rsend_hash_job(void *ctx, size_t i, unsigned worker)
{
	dd_rsend *s = ctx;
	dd_sblk *b = &s->rs_blk[i];
	const uint8_t *p = s->rs_in + i * s->rs_bs;

	(void)worker;
	if (dd_is_zero(p, b->sb_lsize)) {
		b->sb_kind = DD_SB_ZERO;
		return;
	}
	b->sb_kind = DD_SB_DATA;
	dd_sha256(p, b->sb_lsize, b->sb_hash);
}

/* Pool job: compresses the i-th new block of the batch. */
static void dd_rsend_compress_job(void *ctx, size_t i, unsigned worker)
{
	dd_rsend *s = ctx;
	size_t k = s->rs_new[i];
	dd_sblk *b = &s->rs_blk[k];
	dd_err e = {0};

	b->sb_rc = dd_codec_compress(s->rs_codec[worker], &e,
				     s->rs_out + k * s->rs_slot,
				     s->rs_in + k * s->rs_bs, b->sb_lsize,
				     &b->sb_psize, &b->sb_codec);
	if (b->sb_rc) {
		pthread_mutex_lock(&s->rs_mu);
		if (!s->rs_werr.de_code)
			dd_err_copy(&s->rs_werr, &e);
		pthread_mutex_unlock(&s->rs_mu);
	}
}

/* Reads the next batch from block `first` and hashes it. */
static int dd_rsend_read(dd_rsend *s, uint64_t first)
{
	uint64_t off = first * s->rs_bs;
	uint64_t left = s->rs_size - off;
	size_t want = left < (uint64_t)s->rs_cap * s->rs_bs ?
		(size_t)left : s->rs_cap * s->rs_bs;
	size_t got;
	int rc;

	rc = dd_io_pread(s->rs_err, s->rs_fd, s->rs_in, want, off, &got,
			 "input");
	if (rc)
		return rc;
	if (got < want)
		return dd_err_set(s->rs_err, DD_EIO,
				  "input ended at byte %llu of %llu (did it "
				  "change while being sent?)",
				  (unsigned long long)(off + got),
				  (unsigned long long)s->rs_size);
	s->rs_first = first;
	s->rs_n = (size_t)dd_block_count(want, s->rs_bs);
	for (size_t i = 0; i < s->rs_n; i++)
		s->rs_blk[i].sb_lsize = dd_block_lsize(s->rs_size, s->rs_bs,
						       first + i);
	dd_pool_run(s->rs_pool, dd_rsend_hash_job, s, s->rs_n);
	s->rs_done += want;
	return dd_raw_progress(s->rs_err, s->rs_opts->progress,
			       s->rs_opts->progress_ctx, s->rs_done / 2,
			       s->rs_size);
}

static void dd_rsend_digest(dd_rsend *s)
{
	for (size_t i = 0; i < s->rs_n; i++)
		dd_digest_block(s->rs_digest,
				s->rs_blk[i].sb_kind == DD_SB_ZERO ?
				NULL : s->rs_blk[i].sb_hash);
}

/* First pass: the content digest alone. */
static int dd_rsend_pass1(dd_rsend *s, uint8_t digest[32])
{
	int rc;

	for (uint64_t i = 0; i < s->rs_nblocks; i += s->rs_n) {
		rc = dd_rsend_read(s, i);
		if (rc)
			return rc;
		dd_rsend_digest(s);
	}
	/* dd_digest_final leaves the digest ready for pass 2. */
	dd_digest_final(s->rs_digest, s->rs_size, s->rs_bs, digest);
	return 0;
}

/* Sorts the batch's blocks into REF (hash sent before, or earlier in the
 * batch) and DATA (first sight: remembered, to be compressed). */
static int dd_rsend_decide(dd_rsend *s)
{
	uint64_t at;
	int rc;

	s->rs_nnew = 0;
	for (size_t i = 0; i < s->rs_n; i++) {
		dd_sblk *b = &s->rs_blk[i];

		if (b->sb_kind == DD_SB_ZERO)
			continue;
		rc = dd_hmap_get(s->rs_sent, s->rs_err, b->sb_hash, &at);
		if (rc == 0) {
			b->sb_kind = DD_SB_REF;
			continue;
		}
		if (rc != DD_ENOENT)
			return rc;
		rc = dd_hmap_put(s->rs_sent, s->rs_err, b->sb_hash,
				 s->rs_first + i);
		if (rc)
			return rc;
		s->rs_new[s->rs_nnew++] = i;
	}
	return 0;
}

static int dd_rsend_emit(dd_rsend *s)
{
	int rc = 0;

	for (size_t i = 0; i < s->rs_n && !rc; i++) {
		dd_sblk *b = &s->rs_blk[i];
		uint64_t idx = s->rs_first + i;

		switch (b->sb_kind) {
		case DD_SB_ZERO:
			rc = dd_senc_zero(s->rs_enc, s->rs_err, idx, 1);
			break;
		case DD_SB_REF:
			rc = dd_senc_ref(s->rs_enc, s->rs_err, idx, b->sb_hash,
					 b->sb_lsize);
			break;
		default:
			rc = dd_senc_data(s->rs_enc, s->rs_err, idx, b->sb_hash,
					  b->sb_codec, b->sb_lsize,
					  b->sb_psize,
					  s->rs_out + i * s->rs_slot);
			break;
		}
	}
	return rc;
}

/* Second pass: dedup, compress, emit; the digest must come out equal. */
static int dd_rsend_pass2(dd_rsend *s, const uint8_t digest[32])
{
	uint8_t again[32];
	int rc;

	for (uint64_t i = 0; i < s->rs_nblocks; i += s->rs_n) {
		rc = dd_rsend_read(s, i);
		if (!rc)
			rc = dd_rsend_decide(s);
		if (rc)
			return rc;
		dd_rsend_digest(s);
		s->rs_werr.de_code = 0;
		dd_pool_run(s->rs_pool, dd_rsend_compress_job, s, s->rs_nnew);
		if (s->rs_werr.de_code)
			return dd_err_copy(s->rs_err, &s->rs_werr);
		rc = dd_rsend_emit(s);
		if (rc)
			return rc;
	}
	dd_digest_final(s->rs_digest, s->rs_size, s->rs_bs, again);
	if (memcmp(again, digest, 32) != 0)
		return dd_err_set(s->rs_err, DD_ECHECKSUM,
				  "input changed while it was being sent "
				  "(its content digest differs between the "
				  "two passes)");
	return 0;
}

/* Size of a regular file or block device; anything else is refused. */
static int dd_raw_input_size(dd_err *err, int fd, uint64_t *size)
{
	struct stat st;

	if (fstat(fd, &st) != 0)
		return dd_err_set_errno(err, errno, "fstat input");
	if (S_ISREG(st.st_mode)) {
		*size = (uint64_t)st.st_size;
		return 0;
	}
	if (S_ISBLK(st.st_mode)) {
		if (ioctl(fd, BLKGETSIZE64, size) != 0)
			return dd_err_set_errno(err, errno,
						"BLKGETSIZE64 on input");
		return 0;
	}
	return dd_err_set(err, DD_ENOTSUP,
			  "input is not a regular file or block device (the "
			  "stream header carries the content digest, so the "
			  "input is read twice and cannot be a pipe)");
}

static int dd_rsend_setup(dd_rsend *s, int level)
{
	int codec = level < 0 ? DD_CODEC_NONE : DD_CODEC_ZSTD;
	int rc;

	s->rs_cap = dd_raw_batch_blocks(DD_RAW_BATCH, DD_RAW_BATCH_MIN,
					 s->rs_bs);
	s->rs_slot = dd_codec_bound(s->rs_bs);
	s->rs_in = dd_malloc(s->rs_cap * s->rs_bs);
	s->rs_out = dd_malloc(s->rs_cap * s->rs_slot);
	s->rs_blk = dd_calloc(s->rs_cap, sizeof(*s->rs_blk));
	s->rs_new = dd_calloc(s->rs_cap, sizeof(*s->rs_new));
	if (!s->rs_in || !s->rs_out || !s->rs_blk || !s->rs_new)
		return dd_err_set(s->rs_err, DD_ENOMEM, "out of memory");
	rc = dd_digest_new(&s->rs_digest, s->rs_err);
	if (rc)
		return rc;
	rc = dd_pool_new(&s->rs_pool, 0);
	if (rc)
		return dd_err_set(s->rs_err, rc, "cannot start worker threads");
	s->rs_width = dd_pool_width(s->rs_pool);
	rc = dd_raw_codecs(&s->rs_codec, s->rs_err, s->rs_width, codec,
			   level <= 0 ? 1 : level);
	if (rc)
		return rc;
	return dd_hmap_new(&s->rs_sent, s->rs_err, s->rs_opts->mem_limit,
			   s->rs_opts->tmpdir);
}

static void dd_rsend_cleanup(dd_rsend *s)
{
	dd_pool_free(s->rs_pool);
	dd_raw_codecs_free(s->rs_codec, s->rs_width);
	dd_hmap_free(s->rs_sent);
	dd_digest_free(s->rs_digest);
	dd_senc_free(s->rs_enc);
	dd_free(s->rs_in);
	dd_free(s->rs_out);
	dd_free(s->rs_blk);
	dd_free(s->rs_new);
	pthread_mutex_destroy(&s->rs_mu);
}

static int dd_send_fd_args(dd_err *err, int fd, const char *name,
			   uint32_t bs, int level, const dd_send_opts *opts,
			   dd_write_fn fn)
{
	if (fd < 0 || !fn)
		return dd_err_set(err, DD_EINVAL, "dd_send_fd: bad fd or "
				  "no write callback");
	if (dd_name_check(name))
		return dd_err_set(err, DD_ENAME, "invalid stream name '%.255s' "
				  "(1-255 bytes; no '/', '@' or control "
				  "characters; not '.' or '..')",
				  name ? name : "(null)");
	if (!dd_block_size_valid(bs))
		return dd_err_set(err, DD_EINVAL, "block size %u is not a "
				  "power of two in [4 KiB, 1 MiB]", bs);
	if (level < -1 || level > 19)
		return dd_err_set(err, DD_EINVAL, "compression level %d not "
				  "in -1..19", level);
	if (opts->version == 0 || opts->version > DD_SEND_OPTS_VERSION)
		return dd_err_set(err, DD_EINVAL, "dd_send_opts version %u "
				  "not supported", opts->version);
	if (opts->base || opts->resume_token)
		return dd_err_set(err, DD_ENOTSUP, "dd_send_fd: incremental "
				  "and resumed streams need a store");
	return 0;
}

int dd_send_fd(int fd, const char *name, uint32_t block_size,
	       int compress_level, const dd_send_opts *opts, dd_write_fn fn,
	       void *ctx)
{
	static const dd_send_opts defaults = DD_SEND_OPTS_INIT;
	dd_err *err = dd_thread_err();
	dd_stream_hdr h;
	dd_rsend s;
	int rc;

	dd_err_clear(err);
	if (!block_size)
		block_size = DD_BLOCK_SIZE_DEFAULT;
	if (!opts)
		opts = &defaults;
	rc = dd_send_fd_args(err, fd, name, block_size, compress_level, opts,
			     fn);
	if (rc)
		return rc;
	memset(&s, 0, sizeof(s));
	pthread_mutex_init(&s.rs_mu, NULL);
	s.rs_fd = fd;
	s.rs_bs = block_size;
	s.rs_opts = opts;
	s.rs_err = err;
	memset(&h, 0, sizeof(h));
	rc = dd_raw_input_size(err, fd, &s.rs_size);
	if (!rc && s.rs_size > DD_STREAM_SIZE_MAX)
		rc = dd_err_set(err, DD_EINVAL, "input larger than 2^63 bytes");
	if (!rc)
		rc = dd_rsend_setup(&s, compress_level);
	if (!rc)
		rc = dd_senc_new(&s.rs_enc, err, fn, ctx);
	if (rc)
		goto out;
	s.rs_nblocks = dd_block_count(s.rs_size, s.rs_bs);
	h.sh_version = DD_STREAM_VERSION;
	h.sh_block_size = s.rs_bs;
	h.sh_hash_alg = DD_STREAM_HASH_SHA256;
	h.sh_codec = compress_level < 0 ? DD_CODEC_NONE : DD_CODEC_ZSTD;
	snprintf(h.sh_name, sizeof(h.sh_name), "%s", name);
	h.sh_size = s.rs_size;
	rc = dd_rsend_pass1(&s, h.sh_digest);
	if (!rc)
		rc = dd_senc_header(s.rs_enc, err, &h);
	if (!rc)
		rc = dd_rsend_pass2(&s, h.sh_digest);
	if (!rc)
		rc = dd_senc_end(s.rs_enc, err);
out:
	dd_rsend_cleanup(&s);
	return rc;
}

/* ---- receiving and checking -----------------------------------------------*/

/*
 * A receive runs in three stages over a ring of DD_RAW_RING batches, each
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
 * once the batch DD_RAW_RING before it is written, so no buffer is reused
 * while the writer reads it; only checked batches are queued, so nothing
 * unverified is written.  Without an output (dd_stream_check) there is no
 * writer thread and a checked batch is retired at once.
 */

typedef struct dd_rjob {
	uint64_t rj_idx;
	uint64_t rj_src;           /* REF: block holding the first copy */
	uint64_t rj_count;         /* ZERO: blocks in the run */
	uint8_t rj_hash[32];
	uint8_t rj_kind;           /* DD_SREC_DATA, _REF, or _ZERO (a zero
				      run to write on a device) */
	uint8_t rj_codec;
	uint32_t rj_lsize, rj_psize;
	size_t rj_poff;            /* DATA: payload offset in rb_pay */
} dd_rjob;

typedef struct dd_rbatch {
	dd_rjob *rb_job;
	size_t rb_n;
	uint8_t *rb_pay;           /* DATA payloads, back to back */
	size_t rb_plen;
	uint8_t *rb_out;           /* one bs-byte slot per job */
	uint64_t rb_fail_idx;      /* lowest failing block, or UINT64_MAX */
	dd_err rb_err;
} dd_rbatch;

typedef struct dd_rrecv {
	dd_sdec *rr_dec;
	dd_stream_hdr rr_h;
	int rr_fd;                 /* -1: check only */
	bool rr_dev;               /* a block device: write zero runs */
	dd_pool *rr_pool;
	unsigned rr_width;
	dd_codec_ctx **rr_codec;
	size_t rr_cap;             /* jobs (and out slots) per batch */
	dd_rbatch rr_b[DD_RAW_RING];
	dd_rbatch *rr_cur;         /* filling: rr_b[rr_nfilled % DD_RAW_RING] */
	dd_rbatch *rr_fly;         /* with the pool, or NULL */
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

static void dd_rjob_fail(dd_rrecv *r, dd_rbatch *b, const dd_rjob *j,
			 int code, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* Keeps the failure of the lowest block, so the report is deterministic. */
static void dd_rjob_fail(dd_rrecv *r, dd_rbatch *b, const dd_rjob *j,
			 int code, const char *fmt, ...)
{
	char msg[300];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&r->rr_mu);
	if (j->rj_idx < b->rb_fail_idx) {
		b->rb_fail_idx = j->rj_idx;
		dd_err_set(&b->rb_err, code, "%s record for block %llu: %s",
			   j->rj_kind == DD_SREC_DATA ? "DATA" : "REF",
			   (unsigned long long)j->rj_idx, msg);
	}
	pthread_mutex_unlock(&r->rr_mu);
}

static bool dd_rjob_data(dd_rrecv *r, dd_rbatch *b, const dd_rjob *j,
			 uint8_t *dst, unsigned worker)
{
	dd_pack_rec rec;
	dd_err e = {0};

	rec.pr_codec = j->rj_codec;
	rec.pr_lsize = j->rj_lsize;
	rec.pr_psize = j->rj_psize;
	memcpy(rec.pr_hash, j->rj_hash, 32);
	if (dd_codec_decompress(r->rr_codec[worker], &e, &rec,
				b->rb_pay + j->rj_poff, dst) != 0) {
		dd_rjob_fail(r, b, j, DD_ECORRUPT, "bad payload: %s",
			     dd_raw_inner(&e));
		return false;
	}
	if (dd_is_zero(dst, j->rj_lsize)) {
		dd_rjob_fail(r, b, j, DD_EFORMAT, "an all-zero block (it "
			     "must travel as a ZERO record)");
		return false;
	}
	return true;
}

static bool dd_rjob_ref(dd_rrecv *r, dd_rbatch *b, const dd_rjob *j,
			uint8_t *dst)
{
	dd_err e = {0};

	if (dd_io_pread_full(&e, r->rr_fd, dst, j->rj_lsize,
			     j->rj_src * r->rr_h.sh_block_size,
			     "output") == 0)
		return true;
	dd_rjob_fail(r, b, j, e.de_code, "reading block %llu back: %s",
		     (unsigned long long)j->rj_src, dd_raw_inner(&e));
	return false;
}

/* Pool job: materialise one block in its slot and check its SHA-256. */
static void dd_rrecv_job(void *ctx, size_t i, unsigned worker)
{
	dd_rrecv *r = ctx;
	dd_rbatch *b = r->rr_fly;
	const dd_rjob *j = &b->rb_job[i];
	uint8_t *dst = b->rb_out + i * (size_t)r->rr_h.sh_block_size;
	uint8_t h[32];
	bool ok;

	if (j->rj_kind == DD_SREC_ZERO)
		return;            /* nothing to check: the writer's zeros */
	if (j->rj_kind == DD_SREC_DATA)
		ok = dd_rjob_data(r, b, j, dst, worker);
	else
		ok = dd_rjob_ref(r, b, j, dst);
	if (!ok)
		return;
	dd_sha256(dst, j->rj_lsize, h);
	if (memcmp(h, j->rj_hash, 32) != 0) {
		dd_rjob_fail(r, b, j, DD_ECHECKSUM, "block sha256 mismatch%s",
			     j->rj_kind == DD_SREC_REF ?
			     " in the copy read back" : "");
		return;
	}
}

/* ---- the writer thread ----------------------------------------------------*/

/* Zeros over blocks idx .. idx + count - 1 of a device (a regular file
 * has holes there already: it was sized with ftruncate). */
static int dd_rwrite_zeros(dd_rrecv *r, dd_err *err, uint64_t idx,
			   uint64_t count)
{
	static const uint8_t z[DD_RAW_ZERO_CHUNK];
	uint64_t bs = r->rr_h.sh_block_size;
	uint64_t off = idx * bs;
	uint64_t end = idx + count >= dd_block_count(r->rr_h.sh_size,
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

/* Does job k continue the run of blocks that job k - 1 ends? */
static bool dd_rjob_adjacent(const dd_rjob *prev, const dd_rjob *k,
			     uint32_t bs)
{
	return k->rj_kind != DD_SREC_ZERO && k->rj_idx == prev->rj_idx + 1 &&
	       prev->rj_lsize == bs;
}

/* Writes a checked batch: each run of consecutive blocks, up to
 * DD_RAW_WRITE_MAX bytes, is one pwrite (their slots in rb_out are
 * consecutive too).  Only the writer thread writes: parallel writes to
 * one file contend on its inode lock, and many small ones cost more than
 * a few large. */
static int dd_rbatch_write(dd_rrecv *r, const dd_rbatch *b, dd_err *err)
{
	uint32_t bs = r->rr_h.sh_block_size;

	for (size_t i = 0, k; i < b->rb_n; i = k) {
		const dd_rjob *j = &b->rb_job[i];
		size_t len = j->rj_lsize;
		int rc;

		k = i + 1;
		if (j->rj_kind == DD_SREC_ZERO) {
			rc = dd_rwrite_zeros(r, err, j->rj_idx, j->rj_count);
		} else {
			for (; k < b->rb_n && len + bs <= DD_RAW_WRITE_MAX &&
			       dd_rjob_adjacent(&b->rb_job[k - 1],
						&b->rb_job[k], bs); k++)
				len += b->rb_job[k].rj_lsize;
			rc = dd_io_pwrite_full(err, r->rr_fd,
					       b->rb_out + i * (size_t)bs, len,
					       j->rj_idx * bs, "output");
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
		const dd_rbatch *b;
		bool skip;
		dd_err e;
		int rc = 0;

		while (r->rr_nwritten == r->rr_nqueued && !r->rr_wstop)
			pthread_cond_wait(&r->rr_wcv, &r->rr_mu);
		if (r->rr_nwritten == r->rr_nqueued)
			break;
		b = &r->rr_b[r->rr_nwritten % DD_RAW_RING];
		skip = r->rr_wstop || r->rr_werr.de_code;
		pthread_mutex_unlock(&r->rr_mu);
		if (!skip)
			rc = dd_rbatch_write(r, b, &e);
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
	dd_rbatch *b = r->rr_fly;
	int rc;

	if (!b)
		return 0;
	dd_pool_join(r->rr_pool);
	r->rr_fly = NULL;
	if (b->rb_fail_idx != UINT64_MAX) {
		rc = dd_rrecv_wait_writer(r, 0);
		return rc ? rc : dd_err_copy(r->rr_err, &b->rb_err);
	}
	dd_rrecv_queue(r);
	return 0;
}

/* Hands the filling batch to the pool once it has finished the previous
 * one (which goes to the writer), then waits until the next batch of the
 * ring is written out, and fills that one next. */
static int dd_rrecv_submit(dd_rrecv *r)
{
	dd_rbatch *b = r->rr_cur;
	int rc;

	if (!b->rb_n)
		return 0;
	rc = dd_rrecv_land(r);
	if (rc)
		return rc;
	b->rb_fail_idx = UINT64_MAX;
	r->rr_fly = b;
	dd_pool_start(r->rr_pool, dd_rrecv_job, r, b->rb_n);
	r->rr_nfilled++;
	r->rr_cur = &r->rr_b[r->rr_nfilled % DD_RAW_RING];
	/* in flight: rr_fly and the queued ones; the ring holds one more */
	rc = dd_rrecv_wait_writer(r, DD_RAW_RING - 2);
	r->rr_cur->rb_n = 0;
	r->rr_cur->rb_plen = 0;
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

static dd_rjob *dd_rrecv_slot(dd_rrecv *r, int *rc)
{
	*rc = 0;
	if (r->rr_cur->rb_n == r->rr_cap)
		*rc = dd_rrecv_submit(r);
	return *rc ? NULL : &r->rr_cur->rb_job[r->rr_cur->rb_n++];
}

static int dd_rrecv_data(dd_rrecv *r, const dd_srec *s)
{
	dd_rbatch *b;
	dd_rjob *j;
	int rc;

	r->rr_info.data_records++;
	r->rr_info.data_bytes += s->sr_psize;
	rc = dd_hmap_put(r->rr_seen, r->rr_err, s->sr_hash, s->sr_idx);
	if (rc)
		return rc;
	j = dd_rrecv_slot(r, &rc);
	if (!j)
		return rc;
	b = r->rr_cur;
	j->rj_idx = s->sr_idx;
	j->rj_kind = DD_SREC_DATA;
	j->rj_codec = s->sr_codec;
	j->rj_lsize = s->sr_lsize;
	j->rj_psize = s->sr_psize;
	memcpy(j->rj_hash, s->sr_hash, 32);
	j->rj_poff = b->rb_plen;
	memcpy(b->rb_pay + b->rb_plen, s->sr_payload, s->sr_psize);
	b->rb_plen += s->sr_psize;
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
		return r->rr_b[w % DD_RAW_RING].rb_job[0].rj_idx;
	return r->rr_cur->rb_n ? r->rr_cur->rb_job[0].rj_idx : UINT64_MAX;
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
	if (dd_block_lsize(h->sh_size, h->sh_block_size, src) != s->sr_lsize)
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
	j = dd_rrecv_slot(r, &rc);
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
	r->rr_info.zero_blocks += s->sr_count;
	if (r->rr_digest_on)
		dd_digest_zeros(r->rr_digest, s->sr_count);
	if (!r->rr_dev)
		return 0;
	j = dd_rrecv_slot(r, &rc);
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
		dd_digest_block(r->rr_digest, s->sr_hash);
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
			uint64_t last = s.sr_idx + (s.sr_count ? s.sr_count : 1);
			uint64_t done = last * bs;

			rc = dd_raw_progress(r->rr_err, o->progress,
					     o->progress_ctx,
					     done > r->rr_h.sh_size ?
					     r->rr_h.sh_size : done,
					     r->rr_h.sh_size);
			if (rc)
				return rc;
		}
	} while (type != DD_SREC_END);
	return 0;
}

static int dd_rrecv_setup(dd_rrecv *r)
{
	size_t bs = r->rr_h.sh_block_size;
	int rc;

	r->rr_cap = dd_raw_batch_blocks(DD_RAW_RECV_BATCH,
					DD_RAW_RECV_BATCH_MIN,
					r->rr_h.sh_block_size);
	for (int i = 0; i < DD_RAW_RING; i++) {
		dd_rbatch *b = &r->rr_b[i];

		b->rb_job = dd_calloc(r->rr_cap, sizeof(*b->rb_job));
		b->rb_pay = dd_malloc(r->rr_cap * bs);
		b->rb_out = dd_malloc(r->rr_cap * bs);
		if (!b->rb_job || !b->rb_pay || !b->rb_out)
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
	if (rc)
		return rc;
	r->rr_digest_on = r->rr_h.sh_resume_from == 0;
	rc = dd_digest_new(&r->rr_digest, r->rr_err);
	if (rc)
		return rc;
	return dd_hmap_new(&r->rr_seen, r->rr_err, r->rr_opts->mem_limit,
			   r->rr_opts->tmpdir);
}

/* The pool first (its job may read rr_fly), then the writer: neither runs
 * once the buffers are freed. */
static void dd_rrecv_cleanup(dd_rrecv *r)
{
	if (r->rr_fly)
		dd_pool_wait(r->rr_pool);
	dd_rwriter_stop(r);
	dd_pool_free(r->rr_pool);
	dd_raw_codecs_free(r->rr_codec, r->rr_width);
	for (int i = 0; i < DD_RAW_RING; i++) {
		dd_free(r->rr_b[i].rb_job);
		dd_free(r->rr_b[i].rb_pay);
		dd_free(r->rr_b[i].rb_out);
	}
	dd_hmap_free(r->rr_seen);
	dd_digest_free(r->rr_digest);
	dd_sdec_free(r->rr_dec);
	pthread_cond_destroy(&r->rr_wcv);
	pthread_cond_destroy(&r->rr_dcv);
	pthread_mutex_destroy(&r->rr_mu);
}

static void dd_rrecv_info(dd_rrecv *r)
{
	dd_stream_info *i = &r->rr_info;
	const dd_stream_hdr *h = &r->rr_h;

	i->format_version = h->sh_version;
	i->block_size = h->sh_block_size;
	snprintf(i->name, sizeof(i->name), "%s", h->sh_name);
	snprintf(i->base, sizeof(i->base), "%s", h->sh_base);
	i->size = h->sh_size;
	memcpy(i->digest, h->sh_digest, 32);
	memcpy(i->base_digest, h->sh_base_digest, 32);
	i->resume_from = h->sh_resume_from;
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
	dd_rrecv_info(r);
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
