/*
 * scan.c -- dedup scan: what deduplication would save, in one read pass.
 *
 * Pipeline (the store writer's, writer.c, without a store).  Images are
 * read into a ring of three batch buffers.  Each image starts a new
 * segment at an offset of its batch aligned to the largest block size, so
 * a batch holds several small images (or part of a large one) and every
 * block size cuts each image from its own start, as `dedup put` would.
 * A full batch goes through:
 *
 *   1. hash     on the pool: per block, for every block size, zero test
 *               and SHA-256;
 *   2. lookup   serial: each block's hash is counted in its block size's
 *               table; a block seen for the first time is "new";
 *   3. compress on the pool, new blocks only: only their compressed size is
 *               kept (a block's size depends on its bytes alone, so a copy
 *               never needs compressing again);
 *   4. apply    serial: the sizes go into the table entries.
 *
 * One pool job compresses batch k-1 and hashes batch k while the caller
 * reads batch k+1, so both cores are busy whether the data is new
 * (compression bound) or known (hash bound).  A regular file is not read
 * by the caller at all: it hands the batch a byte range, and the hash
 * stage reads it region by region (a multiple of the largest block size,
 * 128 KiB at least) where it hashes it -- the copy out of the page cache
 * is spread over the cores, and with --compress none it goes to a
 * per-worker buffer that stays in cache, since no later stage needs the
 * bytes.  Blocks are cut region by region so that a region's blocks of
 * every size are one run.
 *
 * Tables change shape (spill in exact mode, subsample in sample mode)
 * only between stage 4 of one batch and stage 2 of the next, when no
 * entry waits for its size.
 *
 * Exactness: a table entry is what the store's DDT entry would be -- key
 * the full SHA-256, refcount the number of non-zero blocks with those
 * bytes, lsize and psize from the same codec and level (pack/codec.c) --
 * and zero blocks (short tails included) are counted apart exactly as
 * writer.c does.  So, with verify off, the figures equal dd_store_stat's
 * for a new store that holds the same images.
 *
 * Sample mode and its bound: see dd_scan_bounds() below.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chunk/chunk.h"
#include "common/alloc.h"
#include "common/hist.h"
#include "common/io.h"
#include "common/pool.h"
#include "pack/pack.h"
#include "scan/scan.h"

#define DD_SCAN_MEM_DEFAULT ((uint64_t)256 << 20)
#define DD_SCAN_BATCH_MAX ((size_t)8 << 20)
#define DD_SCAN_BATCH_MIN ((size_t)64 << 10)
#define DD_SCAN_RING 3
#define DD_SCAN_REGION_MIN ((size_t)256 << 10)
#define DD_SCAN_CONFIDENCE 0.99

enum { DD_BK_ZERO, DD_BK_DATA, DD_BK_NEW, DD_BK_SKIP };
enum { DD_SC_OPEN, DD_SC_FAILED, DD_SC_FINISHED };

/* One block of a batch, for one block size. */
typedef struct dd_blk {
	uint32_t bk_off;          /* in the batch buffer */
	uint32_t bk_len;
	uint8_t bk_bsi;           /* index of its block size */
	uint8_t bk_kind;
	uint32_t bk_psize;
	int bk_rc;                /* compression result */
	size_t bk_slot;           /* table slot of a new block */
	uint8_t bk_hash[DD_HASH_SIZE];
} dd_blk;

typedef struct dd_sbatch {
	uint8_t *sb_data;
	size_t sb_fill;           /* bytes used, alignment padding included */
	size_t sb_seg;            /* where the open image's segment starts */
	dd_blk *sb_blk;
	size_t sb_nblk;
	uint32_t *sb_new;         /* blocks to compress */
	size_t sb_nnew;
	size_t sb_nper[DD_SCAN_MAX_BLOCK_SIZES];
	size_t *sb_reg_first;     /* region r's blocks: [first[r], first[r+1]) */
	size_t sb_nreg;           /* regions cut so far */
	/* Bytes [sb_src_start, sb_src_end) come from a regular file, read by
	 * the hash stage (dd_hash_region) from sb_src_fd -- a dup, closed
	 * once read -- at sb_src_off onwards.  At most one range a batch. */
	int sb_src_fd;            /* -1: every byte is in sb_data */
	uint64_t sb_src_off;
	size_t sb_src_start, sb_src_end;
	uint64_t sb_src_image;    /* s_images of the file, for one warning */
	char *sb_src_label;
	atomic_uint_least64_t sb_src_missing; /* bytes not read: zeros */
	atomic_int sb_src_failed; /* the first failed read left sb_src_err */
	dd_err sb_src_err;
} dd_sbatch;

/* Everything about one block size. */
typedef struct dd_bsz {
	uint32_t bz_bs;
	dd_scan_table bz_tab;
	dd_scan_spill bz_spill;
	unsigned bz_shift;        /* sample mode: 1 in 2^shift */
	uint64_t bz_blocks, bz_zero, bz_logical;
	uint64_t bz_ref_blocks, bz_ref_bytes;
	dd_scan_result bz_res;
} dd_bsz;

typedef struct dd_worker {
	dd_hasher *wk_hasher;
	dd_codec_ctx *wk_codec;
	uint8_t *wk_out;          /* compressed bytes, thrown away */
	uint8_t *wk_hot;          /* one region, read where it is hashed */
} dd_worker;

struct dd_scan {
	dd_err s_err;
	int s_state;
	dd_scan_opts s_opts;
	char *s_tmpdir;
	dd_bsz s_bz[DD_SCAN_MAX_BLOCK_SIZES];
	size_t s_nbz;
	uint32_t s_maxbs;
	size_t s_region;          /* hash-stage unit: a multiple of s_maxbs */
	size_t s_cap;             /* batch buffer bytes */
	size_t s_maxblk;          /* dd_blk slots per batch */
	size_t s_table_budget;    /* bytes for all tables */
	dd_sbatch s_batch[DD_SCAN_RING];
	int s_cur;
	dd_sbatch *s_hashing;
	dd_sbatch *s_compressing;
	size_t s_job_ncomp;
	bool s_job_running;
	dd_pool *s_pool;
	dd_worker *s_wk;
	unsigned s_nwk;
	uint64_t s_images, s_bytes, s_skipped, s_special;
	uint64_t s_short_warned;  /* the last image warned of missing bytes */
};

/* ---- errors and warnings -----------------------------------------------*/

dd_err *dd_scan_err(dd_scan *s)
{
	return &s->s_err;
}

void dd_scan_warn(dd_scan *s, const char *path, int code, const char *fmt,
		  ...)
{
	char msg[DD_ERRMSG_MAX];
	va_list ap;

	s->s_skipped++;
	if (!s->s_opts.warn)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	s->s_opts.warn(s->s_opts.warn_ctx, path, code, msg);
}

void dd_scan_count_special(dd_scan *s)
{
	s->s_special++;
}

static int dd_scan_fail(dd_scan *s, int rc)
{
	s->s_state = DD_SC_FAILED;
	return rc;
}

/* ---- stage 1: hash (pool) ----------------------------------------------*/

/* Hashes blocks [first, last) of batch b, two of the same size at a time
 * (dd_hasher_sum2: 1.8 times the speed of one at a time on SHA-NI).  A
 * block's bytes are at buf + (bk_off - buf_off): the batch itself
 * (buf_off 0) or a worker's buffer holding a region from batch byte
 * buf_off.  Zero blocks are marked, not hashed. */
static void dd_hash_blocks(dd_scan *s, dd_sbatch *b, size_t first,
			   size_t last, unsigned worker, const uint8_t *buf,
			   size_t buf_off)
{
	dd_hasher *h = s->s_wk[worker].wk_hasher;
	/* per block size, a block waiting for a partner of its length */
	dd_blk *wait[DD_SCAN_MAX_BLOCK_SIZES] = { NULL };

	for (size_t j = first; j < last; j++) {
		dd_blk *bk = &b->sb_blk[j], **w = &wait[bk->bk_bsi];
		const uint8_t *data = buf + (bk->bk_off - buf_off);

		if (dd_is_zero(data, bk->bk_len)) {
			bk->bk_kind = DD_BK_ZERO;
			continue;
		}
		bk->bk_kind = DD_BK_DATA;
		if (*w && (*w)->bk_len == bk->bk_len) {
			dd_hasher_sum2(h, buf + ((*w)->bk_off - buf_off), data,
				       bk->bk_len, (*w)->bk_hash, bk->bk_hash);
			*w = NULL;
			continue;
		}
		if (*w) /* a short last block meets no partner */
			dd_hasher_sum(h, buf + ((*w)->bk_off - buf_off),
				      (*w)->bk_len, (*w)->bk_hash);
		*w = bk;
	}
	for (size_t i = 0; i < s->s_nbz; i++)
		if (wait[i])
			dd_hasher_sum(h, buf + (wait[i]->bk_off - buf_off),
				      wait[i]->bk_len, wait[i]->bk_hash);
}

/* Reads batch bytes [beg, end) of the file range into dst.  What the file
 * no longer has (it shrank) or what fails to read becomes zeros, counted
 * in sb_src_missing and reported once by the lookup stage: the scan goes
 * on, as it does for a read error of a sequential read. */
static void dd_read_range(dd_sbatch *b, uint8_t *dst, size_t beg, size_t end)
{
	size_t got = 0;
	dd_err err;
	int rc = dd_io_pread(&err, b->sb_src_fd, dst, end - beg,
			     b->sb_src_off + (beg - b->sb_src_start), &got,
			     "the file");

	if (got == end - beg)
		return;
	memset(dst + got, 0, end - beg - got);
	atomic_fetch_add(&b->sb_src_missing, end - beg - got);
	if (!rc)
		rc = dd_err_set(&err, DD_EIO, "the file shrank while read");
	if (atomic_exchange(&b->sb_src_failed, 1) == 0)
		dd_err_copy(&b->sb_src_err, &err);
}

/* Stage 1 for region r: read its part of the file range, if any, then
 * hash its blocks of every size.  Without compression no later stage
 * needs the bytes, so when the range covers all of the region's blocks
 * they go to the worker's own buffer, which stays in its cache. */
static void dd_hash_region(dd_scan *s, dd_sbatch *b, size_t r,
			   unsigned worker)
{
	size_t beg = r * s->s_region, end = beg + s->s_region;
	size_t first = b->sb_reg_first[r], last = b->sb_reg_first[r + 1];
	const uint8_t *buf = b->sb_data;
	size_t buf_off = 0;

	if (b->sb_src_fd >= 0 && beg < b->sb_src_end && end > b->sb_src_start) {
		size_t rb = beg > b->sb_src_start ? beg : b->sb_src_start;
		size_t re = end < b->sb_src_end ? end : b->sb_src_end;
		size_t used = beg;

		for (size_t j = first; j < last; j++)
			if (b->sb_blk[j].bk_off + b->sb_blk[j].bk_len > used)
				used = b->sb_blk[j].bk_off + b->sb_blk[j].bk_len;
		if (s->s_opts.compress == DD_COMPRESS_NONE && rb == beg &&
		    used <= re) {
			buf = s->s_wk[worker].wk_hot;
			buf_off = beg;
			dd_read_range(b, s->s_wk[worker].wk_hot, rb, re);
		} else {
			dd_read_range(b, b->sb_data + rb, rb, re);
		}
	}
	dd_hash_blocks(s, b, first, last, worker, buf, buf_off);
}

/* ---- stage 3: compress (pool) ------------------------------------------*/

static void dd_compress_blk(dd_scan *s, dd_sbatch *b, size_t j,
			    unsigned worker)
{
	dd_blk *bk = &b->sb_blk[b->sb_new[j]];
	dd_worker *wk = &s->s_wk[worker];
	uint8_t codec;
	dd_err err;

	bk->bk_rc = dd_codec_compress(wk->wk_codec, &err, wk->wk_out,
				      b->sb_data + bk->bk_off, bk->bk_len,
				      &bk->bk_psize, &codec);
}

static void dd_scan_job(void *arg, size_t item, unsigned worker)
{
	dd_scan *s = arg;

	if (item < s->s_job_ncomp)
		dd_compress_blk(s, s->s_compressing, item, worker);
	else
		dd_hash_region(s, s->s_hashing, item - s->s_job_ncomp, worker);
}

/* ---- stage 2: lookup (serial) ------------------------------------------*/

/* Makes room in every table for one batch's blocks: in exact mode the
 * table goes to disk as a sorted run, in sample mode half the sample goes
 * (as often as needed). */
static int dd_scan_make_room(dd_scan *s, const dd_sbatch *b)
{
	for (size_t i = 0; i < s->s_nbz; i++) {
		dd_bsz *bz = &s->s_bz[i];
		dd_scan_table *t = &bz->bz_tab;
		int rc;

		rc = dd_scan_table_reserve(t, b->sb_nper[i]);
		if (rc)
			return dd_err_set(&s->s_err, rc, "out of memory for the "
					  "%u-byte block table", bz->bz_bs);
		if (t->tb_count + b->sb_nper[i] <= t->tb_max)
			continue;
		if (s->s_opts.mode == DD_SCAN_SAMPLE) {
			while (t->tb_count + b->sb_nper[i] > t->tb_max)
				dd_scan_table_subsample(t, ++bz->bz_shift);
			continue;
		}
		dd_scan_table_sort(t);
		rc = dd_scan_spill_run(&bz->bz_spill, &s->s_err, t);
		if (rc)
			return rc;
		rc = dd_scan_table_clear(t);
		if (rc)
			return dd_err_set(&s->s_err, rc, "out of memory for the "
					  "%u-byte block table", bz->bz_bs);
	}
	return 0;
}

static void dd_lookup_blk(dd_scan *s, dd_sbatch *b, size_t i)
{
	dd_blk *bk = &b->sb_blk[i];
	dd_bsz *bz = &s->s_bz[bk->bk_bsi];
	dd_scan_ent *e;
	size_t slot;
	bool found;

	if (bk->bk_kind == DD_BK_ZERO) {
		bz->bz_zero++;
		return;
	}
	bz->bz_ref_blocks++;
	bz->bz_ref_bytes += bk->bk_len;
	if (s->s_opts.mode == DD_SCAN_SAMPLE &&
	    !dd_scan_sampled(bk->bk_hash, bz->bz_shift)) {
		bk->bk_kind = DD_BK_SKIP;
		return;
	}
	dd_scan_table_upsert(&bz->bz_tab, bk->bk_hash, &slot, &found);
	e = &bz->bz_tab.tb_ent[slot];
	e->se_refcnt++;
	if (found)
		return;
	e->se_lsize = bk->bk_len;
	e->se_psize = bk->bk_len;
	if (s->s_opts.compress == DD_COMPRESS_NONE)
		return;
	bk->bk_kind = DD_BK_NEW;
	bk->bk_slot = slot;
	b->sb_new[b->sb_nnew++] = (uint32_t)i;
}

/* The hash stage has read the batch's file range: let the file go, and
 * report bytes it no longer had (once per image). */
static void dd_scan_end_range(dd_scan *s, dd_sbatch *b)
{
	uint64_t missing = atomic_load(&b->sb_src_missing);

	if (b->sb_src_fd < 0)
		return;
	if (missing && s->s_short_warned != b->sb_src_image) {
		s->s_short_warned = b->sb_src_image;
		dd_scan_warn(s, b->sb_src_label, b->sb_src_err.de_code,
			     "%llu bytes could not be read (%s); counted as "
			     "zeros", (unsigned long long)missing,
			     b->sb_src_err.de_msg);
	}
	dd_io_close(b->sb_src_fd);
	b->sb_src_fd = -1;
	dd_free(b->sb_src_label);
	b->sb_src_label = NULL;
}

static int dd_scan_lookup(dd_scan *s, dd_sbatch *b)
{
	int rc = dd_scan_make_room(s, b);

	b->sb_nnew = 0;
	for (size_t i = 0; !rc && i < b->sb_nblk; i++)
		dd_lookup_blk(s, b, i);
	return rc;
}

/* ---- stage 4: apply (serial) -------------------------------------------*/

static int dd_scan_apply(dd_scan *s, dd_sbatch *b)
{
	for (size_t j = 0; j < b->sb_nnew; j++) {
		dd_blk *bk = &b->sb_blk[b->sb_new[j]];

		if (bk->bk_rc)
			return dd_err_set(&s->s_err, bk->bk_rc,
					  "compressing a %u-byte block failed",
					  bk->bk_len);
		s->s_bz[bk->bk_bsi].bz_tab.tb_ent[bk->bk_slot].se_psize =
			bk->bk_psize;
	}
	b->sb_nnew = 0;
	b->sb_nblk = 0;
	b->sb_nreg = 0;
	b->sb_fill = 0;
	b->sb_seg = 0;
	memset(b->sb_nper, 0, sizeof(b->sb_nper));
	return 0;
}

/* ---- the pipeline ------------------------------------------------------*/

static void dd_scan_wait(dd_scan *s)
{
	if (!s->s_job_running)
		return;
	/* the reader thread has its next batch: help instead of idling */
	dd_pool_join(s->s_pool);
	s->s_job_running = false;
}

/* Finishes the running job, applies what it compressed, looks up what it
 * hashed, and starts the next job on the batch being filled (if it holds
 * blocks); filling then moves on to the buffer just applied. */
static int dd_scan_step(dd_scan *s)
{
	dd_sbatch *fill = &s->s_batch[s->s_cur];
	dd_sbatch *hashed;
	int rc = 0;

	dd_scan_wait(s);
	if (s->s_compressing) {
		rc = dd_scan_apply(s, s->s_compressing);
		s->s_compressing = NULL;
	}
	hashed = s->s_hashing;
	s->s_hashing = NULL;
	if (!rc && hashed) {
		dd_scan_end_range(s, hashed);
		rc = dd_scan_lookup(s, hashed);
		s->s_compressing = hashed;
	}
	if (rc)
		return rc;
	if (fill->sb_nblk > 0) {
		s->s_hashing = fill;
		s->s_cur = (s->s_cur + 1) % DD_SCAN_RING;
	} else {
		fill->sb_fill = 0;
		fill->sb_seg = 0;
		fill->sb_nreg = 0;
	}
	s->s_job_ncomp = s->s_compressing ? s->s_compressing->sb_nnew : 0;
	if (s->s_job_ncomp == 0 && !s->s_hashing)
		return 0;
	dd_pool_start(s->s_pool, dd_scan_job, s, s->s_job_ncomp +
		      (s->s_hashing ? s->s_hashing->sb_nreg : 0));
	s->s_job_running = true;
	return 0;
}

static int dd_scan_drain(dd_scan *s)
{
	int rc = 0;

	while (!rc && (s->s_batch[s->s_cur].sb_nblk > 0 || s->s_hashing ||
		       s->s_compressing || s->s_job_running))
		rc = dd_scan_step(s);
	return rc;
}

/* ---- cutting images into blocks ----------------------------------------*/

/* Cuts the open segment [sb_seg, sb_fill) into blocks of every size, from
 * the segment's start: the segment starts at the image's start or at a
 * multiple of the largest block size into it. */
static void dd_batch_cut(dd_scan *s, dd_sbatch *b)
{
	size_t end = b->sb_fill, seg = b->sb_seg;

	/* Window by window of the largest block size (segments start on
	 * one, so no block crosses a window, nor a region: a multiple of
	 * it); a region's first window opens its run, regions before it --
	 * alignment padding -- hold no block. */
	for (size_t win = seg; win < end; win += s->s_maxbs) {
		size_t win_end = end - win < s->s_maxbs ? end : win + s->s_maxbs;

		while (b->sb_nreg <= win / s->s_region)
			b->sb_reg_first[b->sb_nreg++] = b->sb_nblk;
		for (size_t i = 0; i < s->s_nbz; i++) {
			dd_bsz *bz = &s->s_bz[i];
			uint32_t bs = bz->bz_bs;

			for (size_t off = win; off < win_end; off += bs) {
				dd_blk *bk = &b->sb_blk[b->sb_nblk++];

				bk->bk_off = (uint32_t)off;
				bk->bk_len = (uint32_t)(end - off < bs
							? end - off : bs);
				bk->bk_bsi = (uint8_t)i;
				b->sb_nper[i]++;
				bz->bz_blocks++;
				bz->bz_logical += bk->bk_len;
			}
		}
	}
	b->sb_reg_first[b->sb_nreg] = b->sb_nblk; /* the last one's end */
	b->sb_seg = end;
}

/* Counts len bytes of holes at an offset aligned to the largest block size:
 * zero blocks of every size, without reading them. */
static void dd_scan_count_hole(dd_scan *s, uint64_t len)
{
	for (size_t i = 0; i < s->s_nbz; i++) {
		dd_bsz *bz = &s->s_bz[i];
		uint64_t n = dd_block_count(len, bz->bz_bs);

		bz->bz_blocks += n;
		bz->bz_zero += n;
		bz->bz_logical += len;
	}
}

/* A sparse file's holes are zero blocks for sure: skip them (a 1 TiB VM
 * image with 10 GiB of data reads 10 GiB).  Only whole multiples of the
 * largest block size are skipped, or a hole that runs to the end of the
 * file; *pos is always such a multiple here.  Failures mean "read it". */
static void dd_scan_skip_hole(dd_scan *s, int fd, uint64_t *pos)
{
	off_t data = lseek(fd, (off_t)*pos, SEEK_DATA);
	uint64_t len;
	struct stat st;

	if (data < 0) {
		if (errno != ENXIO || fstat(fd, &st) != 0 ||
		    (uint64_t)st.st_size <= *pos)
			return;
		len = (uint64_t)st.st_size - *pos;
	} else {
		if ((uint64_t)data <= *pos)
			return;
		len = ((uint64_t)data - *pos) / s->s_maxbs * s->s_maxbs;
	}
	if (len == 0 || lseek(fd, (off_t)(*pos + len), SEEK_SET) < 0) {
		(void)lseek(fd, (off_t)*pos, SEEK_SET);
		return;
	}
	dd_scan_count_hole(s, len);
	*pos += len;
	s->s_bytes += len;
}

static int dd_scan_progress(dd_scan *s)
{
	if (s->s_opts.progress &&
	    s->s_opts.progress(s->s_opts.progress_ctx, s->s_bytes,
			       s->s_opts.progress_total))
		return dd_err_set(&s->s_err, DD_ECANCELED,
				  "scan canceled by the progress callback");
	return 0;
}

/* Ends an image's segment; the next image starts aligned. */
static int dd_scan_end_image(dd_scan *s)
{
	dd_sbatch *b = &s->s_batch[s->s_cur];

	dd_batch_cut(s, b);
	b->sb_fill = (b->sb_fill + s->s_maxbs - 1) / s->s_maxbs * s->s_maxbs;
	b->sb_seg = b->sb_fill;
	if (b->sb_fill == s->s_cap)
		return dd_scan_step(s);
	return 0;
}

/* Hands the hash stage bytes [pos, pos + len) of regular file fd as the
 * batch's next bytes (dd_hash_region reads them).  A batch has one range:
 * one that does not continue it is read here first.  Returns false when
 * the range cannot be kept (no descriptor left): the caller reads. */
static bool dd_scan_add_range(dd_scan *s, dd_sbatch *b, int fd,
			      const char *label, uint64_t pos, size_t len)
{
	if (b->sb_src_fd >= 0 && (b->sb_src_image != s->s_images ||
				  b->sb_src_end != b->sb_fill ||
				  b->sb_src_off + (b->sb_src_end -
						   b->sb_src_start) != pos)) {
		dd_read_range(b, b->sb_data + b->sb_src_start,
			      b->sb_src_start, b->sb_src_end);
		dd_scan_end_range(s, b);
	}
	if (b->sb_src_fd < 0) {
		char *copy = dd_strdup(label);
		int dup = copy ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;

		if (dup < 0) {
			dd_free(copy);
			return false;
		}
		b->sb_src_fd = dup;
		b->sb_src_label = copy;
		b->sb_src_image = s->s_images;
		b->sb_src_off = pos;
		b->sb_src_start = b->sb_fill;
		atomic_store(&b->sb_src_missing, 0);
		atomic_store(&b->sb_src_failed, 0);
		dd_err_clear(&b->sb_src_err);
	}
	b->sb_src_end = b->sb_fill + len;
	return true;
}

/* Hands the batch as much of regular file fd as it has room for, up to
 * the file's current size, as a range (dd_scan_add_range), and moves the
 * file offset past it.  Returns the bytes handed over: 0 at or past the
 * file's end (then the caller reads on, for what is appended while it is
 * scanned) or when no range can be kept. */
static size_t dd_scan_hand_over(dd_scan *s, dd_sbatch *b, int fd,
				const char *label, uint64_t pos)
{
	size_t len = s->s_cap - b->sb_fill;
	struct stat st;

	if (fstat(fd, &st) != 0 || (uint64_t)st.st_size <= pos)
		return 0;
	if ((uint64_t)st.st_size - pos < len)
		len = (size_t)((uint64_t)st.st_size - pos);
	if (lseek(fd, (off_t)(pos + len), SEEK_SET) < 0)
		return 0;
	if (!dd_scan_add_range(s, b, fd, label, pos, len)) {
		(void)lseek(fd, (off_t)pos, SEEK_SET);
		return 0;
	}
	return len;
}

/* Reads fd to its end into the batches (a regular file by ranges, then
 * on to EOF).  *rerr gets a read error, which is the input's problem (a
 * warning), not the scan's. */
static int dd_scan_read_image(dd_scan *s, int fd, const char *label,
			      bool regular, uint64_t *pos, dd_err *rerr)
{
	for (;;) {
		dd_sbatch *b = &s->s_batch[s->s_cur];
		size_t got = 0;
		bool handed = false;
		int rc = 0;

		if (regular) {
			dd_scan_skip_hole(s, fd, pos);
			got = dd_scan_hand_over(s, b, fd, label, *pos);
			handed = got > 0;
		}
		if (!handed)
			rc = dd_io_read(rerr, fd, b->sb_data + b->sb_fill,
					s->s_cap - b->sb_fill, &got, label);
		b->sb_fill += got;
		*pos += got;
		s->s_bytes += got;
		if (rc)
			return 0;
		rc = dd_scan_progress(s);
		if (rc)
			return rc;
		if (b->sb_fill < s->s_cap) {
			if (handed)
				continue; /* up to its size: read on to EOF */
			return 0;
		}
		dd_batch_cut(s, b);
		rc = dd_scan_step(s);
		if (rc)
			return rc;
	}
}

int dd_scan_image(dd_scan *s, int fd, const char *label, uint64_t size_hint,
		  bool regular)
{
	dd_err rerr = {0};
	uint64_t pos = 0;
	int rc;

	s->s_images++;
	rc = dd_scan_read_image(s, fd, label, regular, &pos, &rerr);
	if (!rc)
		rc = dd_scan_end_image(s);
	if (rc)
		return dd_scan_fail(s, rc);
	if (rerr.de_code)
		dd_scan_warn(s, label, rerr.de_code, "read error after %llu "
			     "bytes (counted up to there): %s",
			     (unsigned long long)pos, rerr.de_msg);
	else if (regular && size_hint != UINT64_MAX && pos < size_hint)
		dd_scan_warn(s, label, DD_EIO, "file shrank while read: %llu "
			     "of %llu bytes (counted as read)",
			     (unsigned long long)pos,
			     (unsigned long long)size_hint);
	return 0;
}

/* ---- results -----------------------------------------------------------*/

/* The sink of the final merge (and of the walk of an unspilled table):
 * one distinct block, as dd_store_stat counts a DDT entry (stat.c). */
static void dd_scan_acc(void *ctx, const dd_scan_ent *e)
{
	dd_scan_result *r = ctx;

	r->unique_blocks++;
	r->unique_bytes += e->se_lsize;
	r->stored_bytes += e->se_psize;
	dd_hist_add(r->hist, e->se_refcnt, e->se_lsize, e->se_psize);
}

static uint64_t dd_scale(uint64_t v, unsigned shift)
{
	if (shift >= 64 || (v && v > (UINT64_MAX >> shift)))
		return v ? UINT64_MAX : 0;
	return v << shift;
}

/*
 * Sample-mode bounds, at 99% confidence (alpha = 0.01).
 *
 * Sampling is by content (Xie, Condict, Shete, "Estimating duplication by
 * content-based sampling", USENIX ATC 2013; cf. Harnik et al., MSST 2012,
 * who sample positions instead): a distinct block is in the sample iff its
 * SHA-256 starts with `shift` zero bits, independently with probability
 * p = 2^-shift, and then *all* its copies are counted.  Referenced bytes R
 * are counted exactly for every block, so only the unique bytes U are
 * estimated, by Û = (sampled unique bytes) / p, a sum of independent terms
 * in [0, bs].  The Chernoff bound for such sums gives
 *   P(|Û - U| >= d U) <= 2 exp(-d^2 p U / (3 bs)),
 * so d = sqrt(3 bs ln(2/alpha) / (p U)); p U is replaced by the sampled
 * unique bytes (plug-in).  The dedup ratio R/Û then lies within
 * [1/(1+d), 1/(1-d)] of the truth: relative error d/(1-d).
 * Heavy hitters (one block repeated a million times) cannot skew it, since
 * refcounts only enter through the exact R.
 *
 * Compression: the stored fraction s = psize/lsize of a sampled block is in
 * [0, 1]; given the sample size n its blocks are a uniform draw without
 * replacement from all distinct blocks, so Hoeffding bounds the mean by
 * e = sqrt(ln(2/alpha) / (2n)) (exact for full-size blocks, which are all
 * but the images' tails); the ratio 1/s is then within e/(s-e).
 */
static void dd_scan_bounds(dd_scan_result *r, uint64_t sampled_bytes,
			   uint64_t sampled_stored, uint32_t bs)
{
	double l = log(2.0 / (1.0 - DD_SCAN_CONFIDENCE));
	double d, e, sfrac;

	r->confidence = DD_SCAN_CONFIDENCE;
	if (r->sampled_blocks == 0 || sampled_bytes == 0) {
		r->dedup_error = r->referenced_blocks ? HUGE_VAL : 0.0;
		r->compress_error = r->dedup_error;
		return;
	}
	d = sqrt(3.0 * bs * l / (double)sampled_bytes);
	r->dedup_error = d < 1.0 ? d / (1.0 - d) : HUGE_VAL;
	if (sampled_stored == sampled_bytes) {
		r->compress_error = 0.0;   /* --compress none, or nothing shrank */
		return;
	}
	e = sqrt(l / (2.0 * (double)r->sampled_blocks));
	sfrac = (double)sampled_stored / (double)sampled_bytes;
	r->compress_error = sfrac > e ? e / (sfrac - e) : HUGE_VAL;
}

static void dd_scan_scale(dd_scan_result *r, unsigned shift)
{
	r->unique_blocks = dd_scale(r->unique_blocks, shift);
	r->unique_bytes = dd_scale(r->unique_bytes, shift);
	r->stored_bytes = dd_scale(r->stored_bytes, shift);
	for (int i = 0; i < DD_HIST_BUCKETS; i++) {
		dd_hist_row *h = &r->hist[i];

		h->blocks = dd_scale(h->blocks, shift);
		h->lsize = dd_scale(h->lsize, shift);
		h->psize = dd_scale(h->psize, shift);
		h->ref_blocks = dd_scale(h->ref_blocks, shift);
		h->ref_lsize = dd_scale(h->ref_lsize, shift);
		h->ref_psize = dd_scale(h->ref_psize, shift);
	}
}

/* Walks an unspilled table in slot order (the figures need no order). */
static void dd_scan_table_acc(const dd_scan_table *t, dd_scan_result *r)
{
	for (size_t i = 0; i < t->tb_cap; i++)
		if (t->tb_ent[i].se_refcnt)
			dd_scan_acc(r, &t->tb_ent[i]);
}

/* Phase 1 of the results, for every block size before any merge: a table
 * that spilled goes to disk as its last run, one that did not is counted
 * now; either way its memory is given back, so that the merges have the
 * whole table budget for their buffers. */
static int dd_scan_table_done(dd_scan *s, dd_bsz *bz)
{
	int rc = 0;

	memset(&bz->bz_res, 0, sizeof(bz->bz_res));
	if (bz->bz_spill.sp_nruns) {
		dd_scan_table_sort(&bz->bz_tab);
		rc = dd_scan_spill_run(&bz->bz_spill, &s->s_err, &bz->bz_tab);
	} else {
		dd_scan_table_acc(&bz->bz_tab, &bz->bz_res);
	}
	dd_scan_table_fini(&bz->bz_tab);
	return rc;
}

/* Ratios and bounds from the counted figures. */
static void dd_scan_ratios(dd_scan_result *r, const dd_bsz *bz)
{
	if (r->mode == DD_SCAN_SAMPLE && bz->bz_shift > 0) {
		uint64_t sb = r->unique_bytes, ss = r->stored_bytes;

		r->sample_shift = bz->bz_shift;
		dd_scan_scale(r, bz->bz_shift);
		dd_scan_bounds(r, sb, ss, bz->bz_bs);
		/* There are never more distinct blocks than blocks: an
		 * estimate past that is known to be high. */
		if (r->unique_blocks > r->referenced_blocks)
			r->unique_blocks = r->referenced_blocks;
		if (r->unique_bytes > r->referenced_bytes)
			r->unique_bytes = r->referenced_bytes;
		/* From the sample's own sums, which cannot saturate. */
		r->compress_ratio = ss ? (double)sb / (double)ss : 1.0;
		r->dedup_ratio = sb ? (double)r->referenced_bytes /
			((double)sb * ldexp(1.0, (int)bz->bz_shift)) : 1.0;
		if (r->dedup_ratio < 1.0)
			r->dedup_ratio = 1.0;
		return;
	}
	r->compress_ratio = r->stored_bytes ? (double)r->unique_bytes /
		(double)r->stored_bytes : 1.0;
	r->dedup_ratio = r->unique_bytes ? (double)r->referenced_bytes /
		(double)r->unique_bytes : 1.0;
}

/* Phase 2: merge the runs (if any) and fill in the result. */
static int dd_scan_result_one(dd_scan *s, dd_bsz *bz)
{
	dd_scan_result *r = &bz->bz_res;
	int rc;

	if (bz->bz_spill.sp_nruns) {
		rc = dd_scan_spill_merge(&bz->bz_spill, &s->s_err,
					 s->s_table_budget, dd_scan_acc, r);
		if (rc)
			return rc;
	}
	r->version = DD_SCAN_RESULT_VERSION;
	r->block_size = bz->bz_bs;
	r->mode = s->s_opts.mode;
	r->logical_bytes = bz->bz_logical;
	r->blocks = bz->bz_blocks;
	r->zero_blocks = bz->bz_zero;
	r->referenced_blocks = bz->bz_ref_blocks;
	r->referenced_bytes = bz->bz_ref_bytes;
	r->spill_runs = bz->bz_spill.sp_total_runs;
	r->spill_bytes = bz->bz_spill.sp_bytes;
	r->confidence = 1.0;
	r->sampled_blocks = r->unique_blocks;
	dd_scan_ratios(r, bz);
	r->ddt_bytes = r->unique_blocks > UINT64_MAX / DD_SCAN_DDT_ENTRY_BYTES
		? UINT64_MAX : r->unique_blocks * DD_SCAN_DDT_ENTRY_BYTES;
	dd_scan_spill_fini(&bz->bz_spill);
	return 0;
}

/* ---- setup -------------------------------------------------------------*/

static int dd_scan_check_sizes(dd_err *err, const dd_scan_opts *o)
{
	if (o->nblock_sizes > DD_SCAN_MAX_BLOCK_SIZES)
		return dd_err_set(err, DD_EINVAL, "at most %d block sizes, "
				  "not %zu", DD_SCAN_MAX_BLOCK_SIZES,
				  o->nblock_sizes);
	if (o->nblock_sizes && !o->block_sizes)
		return dd_err_set(err, DD_EINVAL, "block_sizes is NULL");
	for (size_t i = 0; i < o->nblock_sizes; i++) {
		uint32_t bs = o->block_sizes[i];

		if (!dd_block_size_valid(bs))
			return dd_err_set(err, DD_EINVAL, "block size %u is "
					  "not a power of two from 4 KiB to "
					  "1 MiB", bs);
		for (size_t j = 0; j < i; j++)
			if (o->block_sizes[j] == bs)
				return dd_err_set(err, DD_EINVAL, "block size "
						  "%u listed twice", bs);
	}
	return 0;
}

static int dd_scan_check_opts(dd_err *err, const dd_scan_opts *o)
{
	if (o->version == 0 || o->version > DD_SCAN_OPTS_VERSION)
		return dd_err_set(err, DD_EINVAL, "dd_scan_opts version %u "
				  "not supported (use DD_SCAN_OPTS_INIT)",
				  o->version);
	if (o->compress != DD_COMPRESS_NONE && o->compress != DD_COMPRESS_ZSTD)
		return dd_err_set(err, DD_EINVAL, "unknown compressor %d",
				  o->compress);
	if (o->compress_level < 0 || o->compress_level > 19)
		return dd_err_set(err, DD_EINVAL, "zstd level %d not in 1..19",
				  o->compress_level);
	if (o->mode != DD_SCAN_EXACT && o->mode != DD_SCAN_SAMPLE)
		return dd_err_set(err, DD_EINVAL, "unknown scan mode %d",
				  o->mode);
	if (o->sample_shift > 32)
		return dd_err_set(err, DD_EINVAL, "sample shift %u above 32",
				  o->sample_shift);
	return dd_scan_check_sizes(err, o);
}

static int dd_scan_workers(dd_scan *s)
{
	const dd_scan_opts *o = &s->s_opts;
	int codec = o->compress == DD_COMPRESS_ZSTD ? DD_CODEC_ZSTD
						    : DD_CODEC_NONE;
	int rc = dd_pool_new(&s->s_pool, o->threads);

	if (rc)
		return dd_err_set(&s->s_err, rc, "cannot start worker threads");
	s->s_nwk = dd_pool_width(s->s_pool);
	s->s_wk = dd_calloc(s->s_nwk, sizeof(*s->s_wk));
	if (!s->s_wk)
		return dd_err_set(&s->s_err, DD_ENOMEM, "out of memory");
	for (unsigned i = 0; i < s->s_nwk; i++) {
		dd_worker *wk = &s->s_wk[i];

		rc = dd_hasher_new(&wk->wk_hasher, DD_HASH_SHA256);
		if (!rc)
			rc = dd_codec_new(&wk->wk_codec, codec,
					  o->compress_level ? o->compress_level
							    : 1);
		if (!rc && !(wk->wk_out = dd_malloc(dd_codec_bound(s->s_maxbs))))
			rc = DD_ENOMEM;
		if (!rc && !(wk->wk_hot = dd_malloc(s->s_region)))
			rc = DD_ENOMEM;
		if (rc)
			return dd_err_set(&s->s_err, rc, "cannot set up "
					  "hashing and compression");
	}
	return 0;
}

/*
 * Memory: the batch ring and its block records are fixed by the batch
 * size (1/32 of the limit, 64 KiB .. 8 MiB); a reserve of 8 MiB + 1/32
 * (at most 3/4 of the limit) covers what the process needs besides: code and
 * libraries (~6.5 MiB resident, measured), thread stacks, codec contexts;
 * the tables get the rest, so that the process's peak RSS stays within
 * the limit from about 16 MiB up.  The tables are split in proportion to
 * 1/block size -- the number of blocks each size cuts.  Each table holds
 * at least two batches' blocks, so a tiny limit still works (and spills
 * often).
 */
static size_t dd_scan_plan_batches(dd_scan *s, uint64_t mem)
{
	size_t cap = DD_SCAN_BATCH_MAX, per = 0;

	while (cap > DD_SCAN_BATCH_MIN && cap > mem / 32)
		cap /= 2;
	if (cap < 4 * (size_t)s->s_maxbs)
		cap = 4 * (size_t)s->s_maxbs;
	s->s_cap = cap;
	/* the hash stage reads and hashes a region at a time: 256 KiB at
	 * least, so that small blocks do not cost a pread and a job item
	 * each, and two of the largest blocks, so that they too are hashed
	 * in pairs (both powers of two: a region divides the batch, which
	 * holds four of the largest blocks at least) */
	s->s_region = 2 * (size_t)s->s_maxbs;
	while (s->s_region < DD_SCAN_REGION_MIN && s->s_region < cap)
		s->s_region *= 2;
	s->s_maxblk = 0;
	for (size_t i = 0; i < s->s_nbz; i++)
		s->s_maxblk += cap / s->s_bz[i].bz_bs + cap / s->s_maxbs;
	per = cap + s->s_maxblk * (sizeof(dd_blk) + sizeof(uint32_t)) +
	      (cap / s->s_region + 1) * sizeof(size_t);
	return DD_SCAN_RING * per;
}

static int dd_scan_alloc(dd_scan *s)
{
	uint64_t mem = s->s_opts.mem_limit ? s->s_opts.mem_limit
					   : DD_SCAN_MEM_DEFAULT;
	uint64_t fixed = dd_scan_plan_batches(s, mem);
	uint64_t reserve = ((uint64_t)8 << 20) + mem / 32;
	double wsum = 0;

	/* at 16 MiB half the limit was 0.2% short of the process's own needs
	 * (measured: 16.03 MiB peak; 16.2 with zstd contexts) */
	if (reserve > mem / 4 * 3)
		reserve = mem / 4 * 3;
	s->s_table_budget = mem > fixed + reserve ? (size_t)(mem - fixed -
							     reserve) : 0;
	for (int i = 0; i < DD_SCAN_RING; i++) {
		dd_sbatch *b = &s->s_batch[i];

		b->sb_data = dd_malloc(s->s_cap);
		b->sb_blk = dd_calloc(s->s_maxblk, sizeof(dd_blk));
		b->sb_new = dd_calloc(s->s_maxblk, sizeof(uint32_t));
		b->sb_reg_first = dd_calloc(s->s_cap / s->s_region + 1,
					    sizeof(size_t));
		if (!b->sb_data || !b->sb_blk || !b->sb_new || !b->sb_reg_first)
			return dd_err_set(&s->s_err, DD_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < s->s_nbz; i++)
		wsum += 1.0 / s->s_bz[i].bz_bs;
	for (size_t i = 0; i < s->s_nbz; i++) {
		dd_bsz *bz = &s->s_bz[i];
		double share = (1.0 / bz->bz_bs) / wsum;
		size_t minent = s->s_cap / bz->bz_bs + s->s_cap / s->s_maxbs;

		if (dd_scan_table_init(&bz->bz_tab,
				       (size_t)(share * (double)s->s_table_budget),
				       2 * minent))
			return dd_err_set(&s->s_err, DD_ENOMEM, "out of memory");
		dd_scan_spill_init(&bz->bz_spill, s->s_tmpdir);
		bz->bz_shift = s->s_opts.mode == DD_SCAN_SAMPLE
			? s->s_opts.sample_shift : 0;
	}
	return 0;
}

static int dd_scan_setup(dd_scan *s, const dd_scan_opts *o)
{
	static const uint32_t dflt = DD_BLOCK_SIZE_DEFAULT;
	const uint32_t *sizes = o->nblock_sizes ? o->block_sizes : &dflt;
	const char *dir = o->tmpdir ? o->tmpdir : getenv("TMPDIR");

	s->s_opts = *o;
	s->s_opts.block_sizes = NULL;
	s->s_nbz = o->nblock_sizes ? o->nblock_sizes : 1;
	for (size_t i = 0; i < s->s_nbz; i++) {
		s->s_bz[i].bz_bs = sizes[i];
		if (sizes[i] > s->s_maxbs)
			s->s_maxbs = sizes[i];
	}
	s->s_tmpdir = dd_strdup(dir && *dir ? dir : "/tmp");
	if (!s->s_tmpdir)
		return dd_err_set(&s->s_err, DD_ENOMEM, "out of memory");
	s->s_opts.tmpdir = s->s_tmpdir;
	return 0;
}

static void dd_scan_free_batches(dd_scan *s)
{
	for (int i = 0; i < DD_SCAN_RING; i++) {
		dd_sbatch *b = &s->s_batch[i];

		if (b->sb_src_fd >= 0) /* a failed scan: no report due */
			dd_io_close(b->sb_src_fd);
		dd_free(b->sb_src_label);
		dd_free(b->sb_data);
		dd_free(b->sb_blk);
		dd_free(b->sb_new);
		dd_free(b->sb_reg_first);
		memset(b, 0, sizeof(*b));
		b->sb_src_fd = -1;
	}
}

/* ---- public ------------------------------------------------------------*/

int dd_scan_new(dd_scan **out, const dd_scan_opts *opts)
{
	static const dd_scan_opts dflt = DD_SCAN_OPTS_INIT;
	dd_err *terr = dd_thread_err();
	dd_scan *s;
	int rc;

	if (!out)
		return dd_err_set(terr, DD_EINVAL, "dd_scan_new: NULL out");
	if (!opts)
		opts = &dflt;
	rc = dd_scan_check_opts(terr, opts);
	if (rc)
		return rc;
	s = dd_calloc(1, sizeof(*s));
	if (!s)
		return dd_err_set(terr, DD_ENOMEM, "out of memory");
	/* dd_scan_free closes what these name, even after a failure half-way
	 * here: from calloc they would name descriptor 0 */
	for (int i = 0; i < DD_SCAN_RING; i++)
		s->s_batch[i].sb_src_fd = -1;
	for (size_t i = 0; i < DD_SCAN_MAX_BLOCK_SIZES; i++)
		s->s_bz[i].bz_spill.sp_fd = -1;
	rc = dd_scan_setup(s, opts);
	if (!rc)
		rc = dd_scan_alloc(s);
	if (!rc)
		rc = dd_scan_workers(s);
	if (rc) {
		dd_err_copy(terr, &s->s_err);
		dd_scan_free(s);
		return rc;
	}
	*out = s;
	return 0;
}

static int dd_scan_check_open(dd_scan *s)
{
	if (s->s_state == DD_SC_OPEN)
		return 0;
	return dd_err_set(&s->s_err, DD_ESTATE, "scan is %s",
			  s->s_state == DD_SC_FINISHED ? "finished"
						       : "stopped by an error");
}

int dd_scan_add_path(dd_scan *s, const char *path)
{
	int rc;

	if (!s)
		return DD_EINVAL;
	if (!path || !*path)
		return dd_err_set(&s->s_err, DD_EINVAL, "empty path");
	rc = dd_scan_check_open(s);
	if (rc)
		return rc;
	rc = dd_scan_walk(s, path);
	return rc ? dd_scan_fail(s, rc) : 0;
}

int dd_scan_add_fd(dd_scan *s, int fd, const char *label)
{
	char name[32];
	struct stat st;
	bool regular;
	int rc;

	if (!s)
		return DD_EINVAL;
	if (fd < 0)
		return dd_err_set(&s->s_err, DD_EINVAL, "bad fd %d", fd);
	rc = dd_scan_check_open(s);
	if (rc)
		return rc;
	if (!label) {
		snprintf(name, sizeof(name), "fd %d", fd);
		label = name;
	}
	/* Sizes of regular files only detect shrinking; a file read from
	 * the middle has no known remaining size, so none is checked. */
	regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
		  lseek(fd, 0, SEEK_CUR) == 0;
	return dd_scan_image(s, fd, label,
			     regular ? (uint64_t)st.st_size : UINT64_MAX,
			     regular);
}

int dd_scan_finish(dd_scan *s)
{
	int rc;

	if (!s)
		return DD_EINVAL;
	rc = dd_scan_check_open(s);
	if (rc)
		return rc;
	rc = dd_scan_drain(s);
	if (!rc)
		dd_scan_free_batches(s);
	for (size_t i = 0; !rc && i < s->s_nbz; i++)
		rc = dd_scan_table_done(s, &s->s_bz[i]);
	for (size_t i = 0; !rc && i < s->s_nbz; i++)
		rc = dd_scan_result_one(s, &s->s_bz[i]);
	if (rc)
		return dd_scan_fail(s, rc);
	s->s_state = DD_SC_FINISHED;
	return 0;
}

int dd_scan_result_get(const dd_scan *s, size_t index, dd_scan_result *out)
{
	unsigned version;

	if (!s || !out)
		return DD_EINVAL;
	if (s->s_state != DD_SC_FINISHED)
		return DD_ESTATE;
	if (index >= s->s_nbz || out->version == 0 ||
	    out->version > DD_SCAN_RESULT_VERSION)
		return DD_EINVAL;
	version = out->version;
	*out = s->s_bz[index].bz_res;
	out->version = version;
	return 0;
}

int dd_scan_info_get(const dd_scan *s, dd_scan_info *out)
{
	if (!s || !out || out->version == 0 ||
	    out->version > DD_SCAN_INFO_VERSION)
		return DD_EINVAL;
	out->images = s->s_images;
	out->bytes = s->s_bytes;
	out->skipped = s->s_skipped;
	out->special = s->s_special;
	out->nblock_sizes = s->s_nbz;
	return 0;
}

const char *dd_scan_errmsg(const dd_scan *s)
{
	if (!s)
		return "DD_EINVAL: NULL scan";
	return s->s_err.de_code ? s->s_err.de_msg : "no error";
}

void dd_scan_free(dd_scan *s)
{
	if (!s)
		return;
	dd_scan_wait(s);
	for (unsigned i = 0; s->s_wk && i < s->s_nwk; i++) {
		dd_hasher_free(s->s_wk[i].wk_hasher);
		dd_codec_free(s->s_wk[i].wk_codec);
		dd_free(s->s_wk[i].wk_out);
		dd_free(s->s_wk[i].wk_hot);
	}
	dd_free(s->s_wk);
	dd_pool_free(s->s_pool);
	dd_scan_free_batches(s);
	for (size_t i = 0; i < s->s_nbz; i++) {
		dd_scan_table_fini(&s->s_bz[i].bz_tab);
		dd_scan_spill_fini(&s->s_bz[i].bz_spill);
	}
	dd_free(s->s_tmpdir);
	dd_free(s);
}
