/*
 * scan.c -- dedup scan: what deduplication would save, in one read pass.
 *
 * A scan is a sink of the block pipeline (chunk/pipeline.h), the same
 * pipeline `dedup put` writes through, with one cutter per chunker and
 * block size (fixed sizes, FastCDC averages): images are read in batches,
 * every cutter cuts each image from its own start, as `dedup put` into a
 * store of that chunker would, and the pipeline's stage 1 finds zero
 * blocks and hashes the rest on the pool.  This file is the other
 * stages:
 *
 *   2. lookup   serial: each block's hash is counted in its block size's
 *               table; a block seen for the first time is "new";
 *   3. compress on the pool (the pipeline), new blocks only: only their
 *               compressed size is kept (a block's size depends on its
 *               bytes alone, so a copy never needs compressing again);
 *   4. apply    serial: the sizes go into the table entries.
 *
 * One pool job compresses batch k-1 and hashes batch k while the caller
 * reads batch k+1, so both cores are busy whether the data is new
 * (compression bound) or known (hash bound).  A regular file is not read
 * by the caller at all: it hands the pipeline byte ranges, read on the
 * pool where they are hashed; with --compress none no stage needs the
 * bytes after hashing, so they go to a worker's own buffer that stays in
 * cache (DD_PIPE_BYTES_NONE).  Bytes a file no longer has when they are
 * read (it shrank), or that fail to read, count as zeros, with a warning
 * (DD_PIPE_READ_ZERO).
 *
 * Tables change shape (spill in exact mode, subsample in sample mode)
 * only between stage 4 of one batch and stage 2 of the next, when no
 * entry waits for its size: apply always runs before the next lookup.
 *
 * Exactness: a table entry is what the store's DDT entry would be -- key
 * the full SHA-256, refcount the number of non-zero blocks with those
 * bytes, lsize and psize from the same codec and level (pack/codec.c) --
 * and zero blocks (short tails included) are counted apart exactly as
 * writer.c does -- a run of FastCDC zero blocks as one, as the store's
 * snapshot records count it.  So, with verify off, the figures equal
 * dd_store_stat's for a new store that holds the same images.
 *
 * FastCDC's cut points depend on every byte, so with it the holes of a
 * sparse file are read, not skipped: skipping is for fixed sizes alone.
 *
 * Sample mode and its bound: see dd_scan_bounds() below.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chunk/pipeline.h"
#include "common/alloc.h"
#include "common/io.h"
#include "common/pool.h"
#include "pack/pack.h"
#include "scan/scan.h"

#define DD_SCAN_MEM_DEFAULT ((uint64_t)256 << 20)
#define DD_SCAN_BATCH_MAX ((size_t)8 << 20)
#define DD_SCAN_BATCH_MIN ((size_t)64 << 10)

/* bk_kind, past the pipeline's: counted and new (bk_aux its table slot),
 * compressed (NEW) or its size to estimate (EST); or left out of the
 * sample.  A source cutter's block that was found keeps DD_BLK_DATA, with
 * bk_aux its slot too. */
enum { DD_BK_NEW = DD_BLK_SINK, DD_BK_EST, DD_BK_SKIP };
enum { DD_SC_OPEN, DD_SC_FAILED, DD_SC_FINISHED };

struct dd_scan {
	dd_err s_err;
	int s_state;
	dd_scan_opts s_opts;
	char *s_tmpdir;
	dd_scan_bsz s_bz[DD_SCAN_MAX_RESULTS];
	size_t s_nbz;
	size_t s_nsizes;          /* block sizes: s_nbz / chunkers */
	uint32_t s_maxbs;         /* the longest block of any cutter */
	uint32_t s_skipbs;        /* hole skipping: the largest block size,
				     0 when a cutter reads the bytes */
	size_t s_table_budget;    /* bytes for all tables */
	dd_pipe *s_pipe;
	dd_pool *s_pool;
	unsigned s_nwk;
	dd_codec_ctx **s_codec;   /* per pool worker */
	bool s_est;               /* some cutter's sizes are estimated */
	uint64_t s_images, s_bytes, s_skipped, s_special;
	uint64_t s_short_warned;  /* the last image warned of missing bytes */
};

/* ---- errors and warnings -----------------------------------------------*/

/* Reports a skipped or partly read input through the warning callback
 * and counts it in dd_scan_info.skipped. */
static void dd_scan_warn(dd_scan *s, const char *path, int code,
			 const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void dd_scan_warn(dd_scan *s, const char *path, int code,
			 const char *fmt, ...)
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

static int dd_scan_fail(dd_scan *s, int rc)
{
	s->s_state = DD_SC_FAILED;
	return rc;
}

/* po_lost: bytes of a file's range that read as zeros, reported once per
 * image. */
static void dd_scan_lost(void *ctx, const char *label, uint64_t image,
			 uint64_t bytes, const dd_err *why)
{
	dd_scan *s = ctx;

	if (s->s_short_warned == image + 1)
		return;
	s->s_short_warned = image + 1;
	dd_scan_warn(s, label, why->de_code, "%llu bytes could not be read "
		     "(%s); counted as zeros", (unsigned long long)bytes,
		     why->de_msg);
}

/* ---- stage 2: lookup (serial) ------------------------------------------*/

/* Makes room in every table for one batch's blocks (nper per size): in
 * exact mode the table goes to disk as a sorted run, in sample mode half
 * the sample goes (as often as needed). */
static int dd_scan_make_room(dd_scan *s, const size_t *nper)
{
	for (size_t i = 0; i < s->s_nbz; i++) {
		dd_scan_bsz *bz = &s->s_bz[i];
		dd_scan_table *t = &bz->bz_tab;
		int rc;

		rc = dd_scan_table_reserve(t, nper[i]);
		if (rc)
			return dd_err_set(&s->s_err, rc, "out of memory for the "
					  "%u-byte block table", bz->bz_bs);
		if (t->tb_count + nper[i] <= t->tb_max)
			continue;
		if (s->s_opts.mode == DD_SCAN_SAMPLE) {
			while (t->tb_count + nper[i] > t->tb_max)
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

static void dd_lookup_blk(dd_scan *s, dd_pbatch *b, size_t i)
{
	dd_blk *bk = &b->pb_blk[i];
	dd_scan_bsz *bz = &s->s_bz[bk->bk_cut];
	dd_scan_ent *e;
	size_t slot;
	bool found;

	bz->bz_logical += bk->bk_len;
	if (bz->bz_chunker != DD_CHUNKER_FIXED) {
		/* a run of zero blocks is one hole (format/chunker.md §5) */
		bool joined = bk->bk_kind == DD_BLK_ZERO && bk->bk_idx > 0 &&
			      bz->bz_prev_zero;

		bz->bz_prev_zero = bk->bk_kind == DD_BLK_ZERO;
		if (joined)
			return;
	}
	bz->bz_blocks++;
	if (bk->bk_kind == DD_BLK_ZERO) {
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
	bk->bk_aux = slot;
	if (found)
		return;
	e->se_lsize = bk->bk_len;
	e->se_psize = bk->bk_len;
	if (s->s_opts.compress == DD_COMPRESS_NONE)
		return;
	if (bz->bz_src >= 0) {
		bk->bk_kind = DD_BK_EST;
		return;
	}
	bk->bk_kind = DD_BK_NEW;
	dd_pipe_mark(b, i);
}

static int dd_scan_lookup(void *ctx, dd_pbatch *b)
{
	dd_scan *s = ctx;
	size_t nper[DD_SCAN_MAX_RESULTS] = {0};
	int rc;

	for (size_t i = 0; i < b->pb_nblk; i++)
		nper[b->pb_blk[i].bk_cut]++;
	rc = dd_scan_make_room(s, nper);
	for (size_t i = 0; !rc && i < b->pb_nblk; i++)
		dd_lookup_blk(s, b, i);
	return rc;
}

/* ---- stage 4: apply (serial) -------------------------------------------*/

/* The source cutters' blocks of b, in order, as segments of the
 * estimate: their new blocks' sizes are in their entries by now, and a
 * block found has its entry's (set by an earlier batch, or by a new
 * block of this one). */
static int dd_scan_est_feed(dd_scan *s, dd_pbatch *b)
{
	for (size_t i = 0; i < b->pb_nblk; i++) {
		const dd_blk *bk = &b->pb_blk[i];
		dd_scan_bsz *src = &s->s_bz[bk->bk_cut];
		uint32_t psize = 0;

		if (!src->bz_feeds)
			continue;
		if (bk->bk_idx == 0)
			src->bz_image++;
		if (bk->bk_kind != DD_BLK_ZERO)
			psize = src->bz_tab.tb_ent[bk->bk_aux].se_psize;
		if (dd_scan_est_add(&src->bz_segs, src->bz_image, bk->bk_ioff,
				    bk->bk_len, psize))
			return dd_err_set(&s->s_err, DD_ENOMEM, "out of "
					  "memory");
	}
	return 0;
}

/* The estimated cutters' new blocks of b get their sizes; then each
 * source drops the segments its estimated cutter has gone past. */
static void dd_scan_est_apply(dd_scan *s, dd_pbatch *b)
{
	for (size_t i = 0; i < b->pb_nblk; i++) {
		const dd_blk *bk = &b->pb_blk[i];
		dd_scan_bsz *bz = &s->s_bz[bk->bk_cut];

		if (bz->bz_src < 0)
			continue;
		if (bk->bk_idx == 0)
			bz->bz_image++;
		bz->bz_done = bk->bk_ioff + bk->bk_len;
		if (bk->bk_kind == DD_BK_EST)
			bz->bz_tab.tb_ent[bk->bk_aux].se_psize =
				dd_scan_est_psize(&s->s_bz[bz->bz_src].bz_segs,
						  bz->bz_image, bk->bk_ioff,
						  bk->bk_len);
	}
	for (size_t c = 0; c < s->s_nbz; c++) {
		const dd_scan_bsz *bz = &s->s_bz[c];

		if (bz->bz_src >= 0)
			dd_scan_est_trim(&s->s_bz[bz->bz_src].bz_segs,
					 bz->bz_image, bz->bz_done);
	}
}

static int dd_scan_apply(void *ctx, dd_pbatch *b)
{
	dd_scan *s = ctx;
	int rc;

	for (size_t j = 0; j < b->pb_nnew; j++) {
		const dd_blk *bk = &b->pb_blk[b->pb_new[j]];

		s->s_bz[bk->bk_cut].bz_tab.tb_ent[bk->bk_aux].se_psize =
			bk->bk_psize;
	}
	if (!s->s_est)
		return 0;
	rc = dd_scan_est_feed(s, b);
	if (!rc)
		dd_scan_est_apply(s, b);
	return rc;
}

static const dd_pipe_ops dd_scan_ops = {
	.po_lookup = dd_scan_lookup,
	.po_store = dd_scan_apply,
	.po_lost = dd_scan_lost,
};

/* ---- reading images ----------------------------------------------------*/

/* Counts len bytes of holes at an offset aligned to the largest block size:
 * zero blocks of every size, without reading them (fixed sizes only:
 * s_skipbs is 0 with FastCDC). */
static void dd_scan_count_hole(dd_scan *s, uint64_t len)
{
	for (size_t i = 0; i < s->s_nbz; i++) {
		dd_scan_bsz *bz = &s->s_bz[i];
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
		len = ((uint64_t)data - *pos) / s->s_skipbs * s->s_skipbs;
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

/* Hands the pipeline as much of regular file fd as the batch has room
 * for, up to the file's current size, as a range read on the pool, and
 * moves the file offset past it.  Returns the bytes handed over: 0 at or
 * past the file's end (then the caller reads on, for what is appended
 * while it is scanned) or when no range can be kept (no descriptor
 * left: the caller reads). */
static size_t dd_scan_hand_over(dd_scan *s, int fd, const char *label,
				uint64_t pos)
{
	size_t len = dd_pipe_room(s->s_pipe);
	struct stat st;
	dd_err keep = s->s_err;

	if (fstat(fd, &st) != 0 || (uint64_t)st.st_size <= pos)
		return 0;
	if ((uint64_t)st.st_size - pos < len)
		len = (size_t)((uint64_t)st.st_size - pos);
	if (lseek(fd, (off_t)(pos + len), SEEK_SET) < 0)
		return 0;
	if (dd_pipe_range(s->s_pipe, fd, pos, len, label) != 0) {
		s->s_err = keep; /* not the scan's error: it reads instead */
		(void)lseek(fd, (off_t)pos, SEEK_SET);
		return 0;
	}
	return len;
}

/* Reads fd to its end into the pipeline (a regular file by ranges, then
 * on to EOF).  *rerr gets a read error, which is the input's problem (a
 * warning), not the scan's. */
static int dd_scan_read_image(dd_scan *s, int fd, const char *label,
			      bool regular, uint64_t *pos, dd_err *rerr)
{
	for (;;) {
		size_t got = 0, room = dd_pipe_room(s->s_pipe);
		bool handed = false;
		int rc = 0;

		if (regular && s->s_skipbs) {
			dd_scan_skip_hole(s, fd, pos);
			got = dd_scan_hand_over(s, fd, label, *pos);
			handed = got > 0;
		}
		if (!handed) {
			void *buf;

			dd_pipe_buffer(s->s_pipe, &buf, &room);
			rc = dd_io_read(rerr, fd, buf, room, &got, label);
		}
		*pos += got;
		s->s_bytes += got;
		if (rc) /* what was read before the error counts */
			return dd_pipe_produce(s->s_pipe, got);
		rc = dd_scan_progress(s);
		if (!rc) /* a full batch goes on */
			rc = dd_pipe_produce(s->s_pipe, handed ? 0 : got);
		if (rc)
			return rc;
		if (got < room) {
			if (handed)
				continue; /* up to its size: read on to EOF */
			return 0;
		}
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
		rc = dd_pipe_end_image(s->s_pipe);
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

/* ---- setup -------------------------------------------------------------*/

static int dd_scan_check_sizes(dd_err *err, const dd_scan_opts *o)
{
	if (o->nblock_sizes > DD_SCAN_MAX_BLOCK_SIZES)
		return dd_err_set(err, DD_EINVAL, "at most %d block sizes, "
				  "not %zu", DD_SCAN_MAX_BLOCK_SIZES,
				  o->nblock_sizes);
	if (o->nblock_sizes && !o->block_sizes)
		return dd_err_set(err, DD_EINVAL, "block_sizes is NULL");
	if (o->nchunkers > 2 || (o->nchunkers && !o->chunkers))
		return dd_err_set(err, DD_EINVAL, "chunkers: at most the two "
				  "there are");
	for (size_t c = 0; c < o->nchunkers; c++) {
		if (o->chunkers[c] != DD_CHUNKER_FIXED &&
		    o->chunkers[c] != DD_CHUNKER_FASTCDC)
			return dd_err_set(err, DD_EINVAL, "unknown chunker %d",
					  o->chunkers[c]);
		if (c && o->chunkers[c] == o->chunkers[0])
			return dd_err_set(err, DD_EINVAL, "chunker %s listed "
					  "twice",
					  dd_chunker_name(o->chunkers[c]));
	}
	for (size_t i = 0; i < o->nblock_sizes; i++) {
		uint32_t bs = o->block_sizes[i];

		if (!dd_block_size_valid(bs))
			return dd_err_set(err, DD_EINVAL, "block size %u is "
					  "not a power of two from 4 KiB to "
					  "1 MiB", bs);
		for (size_t c = 0; c < o->nchunkers; c++)
			if (!dd_chunker_valid(o->chunkers[c], bs))
				return dd_err_set(err, DD_EINVAL, "a FastCDC "
						  "average is 4 KiB to 256 "
						  "KiB, not %u", bs);
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

/* The pool, and per worker a codec context. */
static int dd_scan_workers(dd_scan *s)
{
	const dd_scan_opts *o = &s->s_opts;
	int codec = o->compress == DD_COMPRESS_ZSTD ? DD_CODEC_ZSTD
						    : DD_CODEC_NONE;
	int rc = dd_pool_new(&s->s_pool, o->threads);

	if (rc)
		return dd_err_set(&s->s_err, rc, "cannot start worker threads");
	s->s_nwk = dd_pool_width(s->s_pool);
	s->s_codec = dd_calloc(s->s_nwk, sizeof(*s->s_codec));
	if (!s->s_codec)
		return dd_err_set(&s->s_err, DD_ENOMEM, "out of memory");
	for (unsigned i = 0; i < s->s_nwk; i++) {
		rc = dd_codec_new(&s->s_codec[i], NULL, codec,
				  o->compress_level ? o->compress_level : 1);
		if (rc)
			return dd_err_set(&s->s_err, rc, "cannot set up "
					  "compression");
	}
	return 0;
}

/* The block pipeline: a cutter per block size; batches of 1/32 of the
 * memory limit, 64 KiB .. 8 MiB, and four of the largest blocks at
 * least. */
static int dd_scan_pipe(dd_scan *s, uint64_t mem)
{
	dd_cutter cut[DD_SCAN_MAX_RESULTS];
	size_t cap = DD_SCAN_BATCH_MAX;
	dd_pipe_cfg cfg = {
		.pc_pool = s->s_pool,
		.pc_hash_kind = DD_HASH_SHA256,
		.pc_cut = cut,
		.pc_ncut = s->s_nbz,
		/* only the size of a new block's payload is kept */
		.pc_compress = s->s_opts.compress == DD_COMPRESS_NONE
				       ? NULL : dd_codec_compress,
		.pc_zctx = s->s_codec,
		.pc_zbound = dd_codec_bound(s->s_maxbs),
		.pc_bytes = s->s_opts.compress == DD_COMPRESS_NONE
				    ? DD_PIPE_BYTES_NONE : DD_PIPE_BYTES_ALL,
		.pc_read = DD_PIPE_READ_ZERO,
		.pc_ops = &dd_scan_ops,
		.pc_ctx = s,
		.pc_err = &s->s_err,
	};

	while (cap > DD_SCAN_BATCH_MIN && cap > mem / 32)
		cap /= 2;
	if (cap < 4 * (size_t)s->s_maxbs)
		cap = 4 * (size_t)s->s_maxbs;
	cfg.pc_batch = cap;
	for (size_t i = 0; i < s->s_nbz; i++)
		dd_cutter_init(&cut[i], s->s_bz[i].bz_chunker, s->s_bz[i].bz_bs);
	return dd_pipe_new(&s->s_pipe, &cfg);
}

/*
 * Memory: the pipeline's batches, block records and worker buffers are
 * fixed by the batch size; a reserve of 8 MiB + 1/32 (at most 3/4 of the
 * limit) covers what the process needs besides: code and libraries
 * (~6.5 MiB resident, measured), thread stacks, codec contexts; the
 * tables get the rest, so that the process's peak RSS stays within the
 * limit from about 16 MiB up.  The tables are split in proportion to
 * 1/block size -- the number of blocks each size cuts.  Each table holds
 * at least two batches' blocks, so a tiny limit still works (and spills
 * often).
 */
static int dd_scan_alloc(dd_scan *s)
{
	uint64_t mem = s->s_opts.mem_limit ? s->s_opts.mem_limit
					   : DD_SCAN_MEM_DEFAULT;
	uint64_t fixed, reserve = ((uint64_t)8 << 20) + mem / 32;
	double wsum = 0;
	size_t cap;
	int rc = dd_scan_pipe(s, mem);

	if (rc)
		return rc;
	fixed = dd_pipe_mem(s->s_pipe);
	cap = dd_pipe_batch_bytes(s->s_pipe);
	/* at 16 MiB half the limit was 0.2% short of the process's own needs
	 * (measured: 16.03 MiB peak; 16.2 with zstd contexts) */
	if (reserve > mem / 4 * 3)
		reserve = mem / 4 * 3;
	s->s_table_budget = mem > fixed + reserve ? (size_t)(mem - fixed -
							     reserve) : 0;
	for (size_t i = 0; i < s->s_nbz; i++)
		wsum += 1.0 / s->s_bz[i].bz_bs;
	for (size_t i = 0; i < s->s_nbz; i++) {
		dd_scan_bsz *bz = &s->s_bz[i];
		double share = (1.0 / bz->bz_bs) / wsum;
		/* a batch's blocks: FastCDC cuts down to a quarter of its
		 * average */
		size_t shortest = bz->bz_chunker == DD_CHUNKER_FIXED
					  ? bz->bz_bs : bz->bz_bs / 4;
		size_t minent = cap / shortest + cap / s->s_maxbs;

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

/* Both chunkers, exact mode, compressed, compress_exact off: each
 * FastCDC cutter's sizes are estimated from the fixed cutter of its block
 * size (estimate.c), which compresses as in a scan of one chunker.  The
 * same size, because how well zstd does depends on the length of what it
 * compresses: fixed 4 KiB blocks of text estimated 128 KiB FastCDC blocks
 * 20% too large. */
static void dd_scan_est_choose(dd_scan *s)
{
	const dd_scan_opts *o = &s->s_opts;
	bool est = o->nchunkers == 2 && o->mode == DD_SCAN_EXACT &&
		   o->compress != DD_COMPRESS_NONE && !o->compress_exact;

	for (size_t i = 0; i < s->s_nbz; i++) {
		dd_scan_bsz *bz = &s->s_bz[i];
		size_t src;

		bz->bz_src = -1;
		if (!est || bz->bz_chunker != DD_CHUNKER_FASTCDC)
			continue;
		/* the other chunker's cutter of the same size */
		src = i >= s->s_nsizes ? i - s->s_nsizes : i + s->s_nsizes;
		bz->bz_src = (int)src;
		s->s_bz[src].bz_feeds = true;
		s->s_est = true;
	}
}

/* One cutter per chunker and block size, chunker after chunker (the
 * results' order, dd_scan_result_get). */
static int dd_scan_setup(dd_scan *s, const dd_scan_opts *o)
{
	static const uint32_t dflt = DD_BLOCK_SIZE_DEFAULT;
	static const int dflt_chunker = DD_CHUNKER_FIXED;
	const uint32_t *sizes = o->nblock_sizes ? o->block_sizes : &dflt;
	const int *chunkers = o->nchunkers ? o->chunkers : &dflt_chunker;
	size_t nchunkers = o->nchunkers ? o->nchunkers : 1;
	const char *dir = o->tmpdir ? o->tmpdir : getenv("TMPDIR");

	s->s_opts = *o;
	s->s_opts.block_sizes = NULL;
	s->s_opts.chunkers = NULL;
	s->s_nsizes = o->nblock_sizes ? o->nblock_sizes : 1;
	s->s_nbz = nchunkers * s->s_nsizes;
	for (size_t i = 0; i < s->s_nbz; i++) {
		dd_scan_bsz *bz = &s->s_bz[i];

		bz->bz_chunker = chunkers[i / s->s_nsizes];
		bz->bz_bs = sizes[i % s->s_nsizes];
		bz->bz_max = dd_chunker_max(bz->bz_chunker, bz->bz_bs);
		if (bz->bz_max > s->s_maxbs)
			s->s_maxbs = bz->bz_max;
		if (bz->bz_chunker == DD_CHUNKER_FIXED && bz->bz_bs > s->s_skipbs)
			s->s_skipbs = bz->bz_bs;
	}
	for (size_t i = 0; i < s->s_nbz; i++)
		if (s->s_bz[i].bz_chunker != DD_CHUNKER_FIXED)
			s->s_skipbs = 0;   /* every byte must be cut */
	dd_scan_est_choose(s);
	s->s_tmpdir = dd_strdup(dir && *dir ? dir : "/tmp");
	if (!s->s_tmpdir)
		return dd_err_set(&s->s_err, DD_ENOMEM, "out of memory");
	s->s_opts.tmpdir = s->s_tmpdir;
	return 0;
}

/* ---- public ------------------------------------------------------------*/

int dd_scan_new(dd_scan **out, const dd_scan_opts *opts)
{
	static const dd_scan_opts dflt = DD_SCAN_OPTS_INIT;
	dd_err *terr = dd_thread_err();
	dd_scan_opts v2;
	dd_scan *s;
	int rc;

	if (!out)
		return dd_err_set(terr, DD_EINVAL, "dd_scan_new: NULL out");
	if (!opts)
		opts = &dflt;
	/* a version-1 struct ends before `chunkers` (fixed blocks), a
	 * version-2 one before `compress_exact` */
	if (opts->version == 1 || opts->version == 2) {
		v2 = dflt;
		memcpy(&v2, opts, opts->version == 1
		       ? offsetof(dd_scan_opts, chunkers)
		       : offsetof(dd_scan_opts, compress_exact));
		opts = &v2;
	}
	rc = dd_scan_check_opts(terr, opts);
	if (rc)
		return rc;
	s = dd_calloc(1, sizeof(*s));
	if (!s)
		return dd_err_set(terr, DD_ENOMEM, "out of memory");
	/* dd_scan_free closes what these name, even after a failure half-way
	 * here: from calloc they would name descriptor 0 */
	for (size_t i = 0; i < DD_SCAN_MAX_RESULTS; i++)
		s->s_bz[i].bz_spill.sp_fd = -1;
	rc = dd_scan_setup(s, opts);
	if (!rc)
		rc = dd_scan_workers(s);
	if (!rc)
		rc = dd_scan_alloc(s);
	if (rc) {
		dd_err_copy(terr, &s->s_err);
		dd_scan_free(s);
		return rc;
	}
	*out = s;
	return 0;
}

/* dd_walk's callbacks. */
static int dd_scan_walk_image(void *ctx, int fd, const char *path,
			      uint64_t size_hint, bool regular)
{
	return dd_scan_image(ctx, fd, path, size_hint, regular);
}

static void dd_scan_walk_warn(void *ctx, const char *path, int code,
			      const char *msg)
{
	dd_scan_warn(ctx, path, code, "%s", msg);
}

static void dd_scan_walk_special(void *ctx)
{
	dd_scan *s = ctx;

	s->s_special++;
}

static const dd_walk_ops dd_scan_walk_ops = {
	.wo_image = dd_scan_walk_image,
	.wo_warn = dd_scan_walk_warn,
	.wo_special = dd_scan_walk_special,
};

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
	rc = dd_walk(path, &s->s_err, &dd_scan_walk_ops, s);
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
	rc = dd_pipe_drain(s->s_pipe);
	if (!rc) { /* the merges get the memory */
		dd_pipe_free(s->s_pipe);
		s->s_pipe = NULL;
	}
	for (size_t i = 0; !rc && i < s->s_nbz; i++)
		rc = dd_scan_table_done(&s->s_bz[i], &s->s_err);
	for (size_t i = 0; !rc && i < s->s_nbz; i++)
		rc = dd_scan_result_one(&s->s_bz[i], &s->s_err,
					s->s_table_budget, s->s_opts.mode);
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
	/* a version-1 struct ends before `chunker`, a version-2 one before
	 * `stored_estimated` */
	memcpy(out, &s->s_bz[index].bz_res,
	       version >= 3 ? sizeof(*out)
	       : version == 2 ? offsetof(dd_scan_result, stored_estimated)
	       : offsetof(dd_scan_result, chunker));
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
	out->nblock_sizes = s->s_nsizes;
	if (out->version >= 2)
		out->nresults = s->s_nbz;
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
	dd_pipe_free(s->s_pipe); /* first: its job may be running */
	for (unsigned i = 0; s->s_codec && i < s->s_nwk; i++)
		dd_codec_free(s->s_codec[i]);
	dd_free(s->s_codec);
	dd_pool_free(s->s_pool);
	for (size_t i = 0; i < s->s_nbz; i++) {
		dd_scan_table_fini(&s->s_bz[i].bz_tab);
		dd_scan_spill_fini(&s->s_bz[i].bz_spill);
	}
	for (size_t i = 0; i < s->s_nbz; i++)
		dd_scan_est_fini(&s->s_bz[i].bz_segs);
	dd_free(s->s_tmpdir);
	dd_free(s);
}
