/*
 * rsend.c -- dd_send_fd: a regular file or block device as a replication
 * stream, without a store (format/stream.md §10.2).
 *
 * The HEADER carries the content digest (format/store.md §6), which
 * depends on every block, so the input is read twice, each time through
 * the block pipeline (chunk/pipeline.h): the first pass only hashes, for
 * the digest; the second hashes again, deduplicates, compresses and
 * emits.  The second pass recomputes the digest and fails before END if
 * it differs, so an input that changes while it is sent gives a stream
 * every receiver refuses, never a wrong image.  Hashing runs at ~2.5 GB/s
 * on two cores, so the first pass costs little next to compression; a
 * pipe cannot be read twice and is refused.
 *
 * The second pass is this file's sink of the pipeline: lookup asks a
 * dd_hmap of blocks already sent (a hit is a REF; a miss is inserted at
 * once, so a repeat within the batch is a REF too), the pipeline
 * compresses the new blocks on the pool, and store emits the batch's
 * records in order while the pool works on the next one.  Memory: three
 * batches of 1.5 MiB and two of compressed payloads, the encoder's 1 MiB,
 * and the hmap up to mem_limit (it spills beyond).
 *
 * With the FastCDC chunker (opts->chunker) the pipeline cuts by content
 * and records carry byte offsets (format/stream.md §12); zero blocks go
 * out one by one and the encoder joins them into one hole.
 *
 * Holes of a sparse file cost no reads (format/stream.md §10.2): with
 * fixed blocks, each pass walks the file's data extents (SEEK_DATA /
 * SEEK_HOLE, widened to whole blocks) as it feeds them, and each goes
 * through the pipeline as an image of its own; the whole blocks between
 * them are holes the sink counts into the digest and sends as one ZERO
 * run, never read or zero-tested.  A sink knows an extent's first block
 * by its image offset 0.  Only the extents the stages behind the feeder
 * still need are kept (dd_fsend_keep), so a file of any number of
 * extents costs memory for the few in flight.  Where SEEK_DATA is not
 * supported (or for a block device, or content-defined blocks, whose cut
 * points depend on every byte before them) the input is one extent.
 */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <unistd.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <linux/fs.h>

#include "dedup.h"
#include "chunk/pipeline.h"
#include "common/alloc.h"
#include "common/hmap.h"
#include "pack/pack.h"
#include "stream/stream.h"

#define DD_FSEND_BATCH ((size_t)3 << 19)
/* Bytes [fe_off, fe_end) of the input, which may hold data: fe_off a
 * multiple of the block size, fe_end too or the input's end. */
typedef struct dd_fext {
	uint64_t fe_off, fe_end;
} dd_fext;

enum { DD_FS_REF = DD_BLK_SINK, DD_FS_NEW };

typedef struct dd_fsend {
	int fs_fd;
	uint64_t fs_size;
	int fs_chunker;
	int fs_dv;                 /* content digest version (fixed) */
	uint32_t fs_bs;
	uint32_t fs_max;           /* the longest block */
	int fs_level;              /* -1: no compression */
	dd_pool *fs_pool;
	unsigned fs_width;
	dd_codec_ctx **fs_codec;
	dd_pipe *fs_pipe;
	dd_hmap *fs_sent;
	dd_digest *fs_digest;
	dd_senc *fs_enc;
	const dd_send_opts *fs_opts;
	uint64_t fs_done;          /* bytes hashed, both passes */
	dd_err *fs_err;
	/* The pass's extents, numbered from 0: extent k is
	 * fs_ext[k - fs_ext_base] for k in [fs_ext_base, fs_next), the
	 * ones a stage still needs (dd_fsend_keep). */
	dd_fext *fs_ext;
	size_t fs_ext_cap;
	uint64_t fs_ext_base;
	uint64_t fs_next;          /* extents fed so far */
	uint64_t fs_dg_ext;        /* the digest is in extent fs_dg_ext - 1 */
	uint64_t fs_em_ext;        /* the emitter likewise (second pass) */
	bool fs_second;
	bool fs_seek;              /* holes are found with SEEK_DATA */
	uint64_t fs_at;            /* where the walk for the next extent starts */
} dd_fsend;

static const dd_fext *dd_fsend_ext(const dd_fsend *s, uint64_t k)
{
	assert(k >= s->fs_ext_base && k < s->fs_next);
	return &s->fs_ext[k - s->fs_ext_base];
}

/* The holes before extent k (k == fs_next: after the last), in whole
 * blocks: [*from, *from + *count), and their bytes. */
static uint64_t dd_fsend_gap(const dd_fsend *s, uint64_t k, uint64_t *from,
			     uint64_t *count)
{
	uint64_t beg = k ? dd_fsend_ext(s, k - 1)->fe_end : 0;
	uint64_t end = k < s->fs_next ? dd_fsend_ext(s, k)->fe_off : s->fs_size;

	*from = (beg + s->fs_bs - 1) / s->fs_bs;
	*count = (end + s->fs_bs - 1) / s->fs_bs - *from;
	return end - beg;
}

/* The digest of the holes before extent fs_dg_ext, and on to it. */
static void dd_fsend_digest_gap(dd_fsend *s)
{
	uint64_t from, count;

	s->fs_done += dd_fsend_gap(s, s->fs_dg_ext++, &from, &count);
	if (count)
		dd_digest_zeros(s->fs_digest, count);
}

/* The progress: bytes hashed or passed over as holes, each pass half. */
static int dd_fsend_progress(dd_fsend *s)
{
	const dd_send_opts *o = s->fs_opts;

	if (o->progress && o->progress(o->progress_ctx, s->fs_done / 2,
				       s->fs_size) != 0)
		return dd_err_set(s->fs_err, DD_ECANCELED,
				  "stopped by the progress callback");
	return 0;
}

/* Both passes' lookup starts here: the digest, in block order, and the
 * progress. */
static int dd_fsend_digest(dd_fsend *s, const dd_pbatch *b)
{
	for (size_t i = 0; i < b->pb_nblk; i++) {
		if (b->pb_blk[i].bk_ioff == 0)   /* an extent's first block */
			dd_fsend_digest_gap(s);
		dd_digest_block(s->fs_digest,
				b->pb_blk[i].bk_kind == DD_BLK_ZERO
					? NULL : b->pb_blk[i].bk_hash,
				b->pb_blk[i].bk_len);
	}
	s->fs_done += b->pb_bytes;
	return dd_fsend_progress(s);
}

static int dd_fsend_pass1(void *ctx, dd_pbatch *b)
{
	return dd_fsend_digest(ctx, b);
}

/* Pass 2's lookup: each block a REF (its hash sent before, or earlier in
 * the batch) or new (remembered, to be compressed; bk_aux its payload
 * slot). */
static int dd_fsend_lookup(void *ctx, dd_pbatch *b)
{
	dd_fsend *s = ctx;
	uint64_t at;
	int rc = dd_fsend_digest(s, b);

	for (size_t i = 0; !rc && i < b->pb_nblk; i++) {
		dd_blk *bk = &b->pb_blk[i];

		if (bk->bk_kind == DD_BLK_ZERO)
			continue;
		rc = dd_hmap_get(s->fs_sent, s->fs_err, bk->bk_hash, &at);
		if (rc == 0) {
			bk->bk_kind = DD_FS_REF;
			continue;
		}
		if (rc != DD_ENOENT)
			return rc;
		rc = dd_hmap_put(s->fs_sent, s->fs_err, bk->bk_hash,
				 bk->bk_idx);
		bk->bk_kind = DD_FS_NEW;
		bk->bk_aux = b->pb_nnew;
		dd_pipe_mark(b, i);
	}
	return rc;
}

/* The holes before extent fs_em_ext as one ZERO run, and on to it. */
static int dd_fsend_emit_gap(dd_fsend *s)
{
	uint64_t from, count;

	dd_fsend_gap(s, s->fs_em_ext++, &from, &count);
	return count ? dd_senc_zero(s->fs_enc, s->fs_err, from, count) : 0;
}

/* Pass 2's store: the batch's records, in order. */
static int dd_fsend_emit(void *ctx, dd_pbatch *b)
{
	dd_fsend *s = ctx;
	bool var = s->fs_chunker != DD_CHUNKER_FIXED;
	int rc = 0;

	for (size_t i = 0; i < b->pb_nblk && !rc; i++) {
		const dd_blk *bk = &b->pb_blk[i];
		uint64_t pos;

		if (bk->bk_ioff == 0)   /* an extent's first block */
			rc = dd_fsend_emit_gap(s);
		if (rc)
			break;
		/* the position: a block index, or a byte (§12); extents of
		 * fixed blocks only start past 0 */
		pos = var ? bk->bk_ioff
			  : dd_fsend_ext(s, s->fs_em_ext - 1)->fe_off /
					    s->fs_bs +
				    bk->bk_idx;
		switch (bk->bk_kind) {
		case DD_BLK_ZERO:
			rc = dd_senc_zero(s->fs_enc, s->fs_err, pos,
					  var ? bk->bk_len : 1);
			break;
		case DD_FS_REF:
			rc = dd_senc_ref(s->fs_enc, s->fs_err, pos,
					 bk->bk_hash, bk->bk_len);
			break;
		default:
			rc = dd_senc_data(s->fs_enc, s->fs_err, pos,
					  bk->bk_hash, bk->bk_codec,
					  bk->bk_len, bk->bk_psize,
					  dd_pipe_payload(s->fs_pipe, b,
							  bk->bk_aux));
			break;
		}
	}
	return rc;
}

static bool dd_fsend_late(void *ctx, const dd_pbatch *b)
{
	(void)ctx;
	(void)b;
	return true;
}

static const dd_pipe_ops dd_fsend_ops1 = {
	.po_lookup = dd_fsend_pass1,
};

static const dd_pipe_ops dd_fsend_ops2 = {
	.po_lookup = dd_fsend_lookup,
	.po_store = dd_fsend_emit,
	.po_store_late = dd_fsend_late,
};

/* Drops the extents no stage needs any more: the digest and the
 * emitter read extent k - 1 while in extent k (dd_fsend_gap, the block
 * positions).  The stages lag the feeder by the batches in flight, so
 * what is kept is bounded by them, not by the file. */
static void dd_fsend_keep(dd_fsend *s)
{
	uint64_t keep = s->fs_dg_ext;

	if (s->fs_second && s->fs_em_ext < keep)
		keep = s->fs_em_ext;
	if (keep)
		keep--;
	if (keep <= s->fs_ext_base)
		return;
	memmove(s->fs_ext, s->fs_ext + (keep - s->fs_ext_base),
		(size_t)(s->fs_next - keep) * sizeof(*s->fs_ext));
	s->fs_ext_base = keep;
}

/* Extent e as the pass's next, fed to the pipeline as an image of its
 * own. */
static int dd_fsend_feed(dd_fsend *s, const dd_fext *e)
{
	size_t held;

	dd_fsend_keep(s);
	held = (size_t)(s->fs_next - s->fs_ext_base);
	if (held == s->fs_ext_cap) {
		size_t n = held ? 2 * held : 16;
		dd_fext *ne = dd_realloc(s->fs_ext, n * sizeof(*ne));

		if (!ne)
			return dd_err_set(s->fs_err, DD_ENOMEM, "out of memory");
		s->fs_ext = ne;
		s->fs_ext_cap = n;
	}
	s->fs_ext[held] = *e;
	if (s->fs_next++) {
		int rc = dd_pipe_end_image(s->fs_pipe);

		if (rc)
			return rc;
	}
	return dd_pipe_file(s->fs_pipe, s->fs_fd, e->fe_off,
			    e->fe_end - e->fe_off, "input");
}

/* The next data extent from fs_at on, widened to whole blocks, in *e
 * (*found false: nothing but holes to the end).  Where holes cannot be
 * found, or SEEK_DATA fails, the rest of the input is one extent. */
static void dd_fsend_find(dd_fsend *s, dd_fext *e, bool *found)
{
	uint64_t bs = s->fs_bs, at = s->fs_at;
	off_t d, h;

	*found = false;
	if (at >= s->fs_size)
		return;
	d = s->fs_seek ? lseek(s->fs_fd, (off_t)at, SEEK_DATA) : -1;
	if (d < 0 && s->fs_seek && errno == ENXIO) {
		s->fs_at = s->fs_size;   /* nothing but holes from at on */
		return;
	}
	if (d >= 0 && (uint64_t)d >= s->fs_size) {
		s->fs_at = s->fs_size;
		return;
	}
	*found = true;
	if (d < 0) {
		e->fe_off = at;
		e->fe_end = s->fs_size;
	} else {
		h = lseek(s->fs_fd, d, SEEK_HOLE);
		e->fe_off = (uint64_t)d / bs * bs;
		e->fe_end = h < 0 || (uint64_t)h >= s->fs_size
				    ? s->fs_size
				    : ((uint64_t)h + bs - 1) / bs * bs;
		if (e->fe_end > s->fs_size)
			e->fe_end = s->fs_size;
	}
	s->fs_at = e->fe_end;
}

/* The pass's extents into the pipeline, each joined with the next ones
 * it touches (a hole shorter than a block is read). */
static int dd_fsend_feed_all(dd_fsend *s)
{
	dd_fext cur, next;
	bool have, more;
	int rc = 0;

	dd_fsend_find(s, &cur, &have);
	while (!rc && have) {
		dd_fsend_find(s, &next, &more);
		while (more && next.fe_off <= cur.fe_end) {
			cur.fe_end = next.fe_end;
			dd_fsend_find(s, &next, &more);
		}
		rc = dd_fsend_feed(s, &cur);
		cur = next;
		have = more;
	}
	return rc;
}

/* One pass over the input through a pipeline of its own: the first
 * needs the hashes alone (read into the workers' buffers), the second
 * every block's bytes, and compresses. */
static int dd_fsend_pass(dd_fsend *s, const dd_pipe_ops *ops)
{
	bool second = ops == &dd_fsend_ops2;
	dd_cutter cut;
	dd_pipe_cfg cfg = {
		.pc_pool = s->fs_pool,
		.pc_hash_kind = DD_HASH_SHA256,
		.pc_cut = &cut,
		.pc_ncut = 1,
		.pc_compress = second ? dd_codec_compress : NULL,
		.pc_zctx = s->fs_codec,
		.pc_zbound = dd_codec_bound(s->fs_max),
		.pc_zkeep = true,
		.pc_batch = DD_FSEND_BATCH > 2 * (size_t)s->fs_max
				    ? DD_FSEND_BATCH : 2 * (size_t)s->fs_max,
		.pc_bytes = second ? DD_PIPE_BYTES_ALL : DD_PIPE_BYTES_NONE,
		.pc_read = DD_PIPE_READ_FAIL,
		.pc_ops = ops,
		.pc_ctx = s,
		.pc_err = s->fs_err,
	};
	int rc;

	dd_cutter_init(&cut, s->fs_chunker, s->fs_bs);
	s->fs_dg_ext = s->fs_em_ext = s->fs_next = s->fs_ext_base = 0;
	s->fs_at = 0;
	s->fs_second = second;
	rc = dd_pipe_new(&s->fs_pipe, &cfg);
	if (!rc)
		rc = dd_fsend_feed_all(s);
	if (!rc)
		rc = dd_pipe_drain(s->fs_pipe);
	dd_pipe_free(s->fs_pipe);
	s->fs_pipe = NULL;
	/* the holes after the last extent; the progress up to the end */
	if (!rc) {
		dd_fsend_digest_gap(s);
		rc = dd_fsend_progress(s);
	}
	if (!rc && second)
		rc = dd_fsend_emit_gap(s);
	return rc;
}

/* Both passes; the digest must come out the same. */
static int dd_fsend_run(dd_fsend *s, dd_stream_hdr *h)
{
	uint8_t again[DD_HASH_SIZE];
	int rc = dd_fsend_pass(s, &dd_fsend_ops1);

	if (rc)
		return rc;
	dd_digest_final(s->fs_digest, s->fs_size, s->fs_bs, h->sh_digest);
	rc = dd_senc_header(s->fs_enc, s->fs_err, h);
	if (!rc)
		rc = dd_fsend_pass(s, &dd_fsend_ops2);
	if (rc)
		return rc;
	dd_digest_final(s->fs_digest, s->fs_size, s->fs_bs, again);
	if (memcmp(again, h->sh_digest, DD_HASH_SIZE) != 0)
		return dd_err_set(s->fs_err, DD_ECHECKSUM,
				  "input changed while it was being sent "
				  "(its content digest differs between the "
				  "two passes)");
	return dd_senc_end(s->fs_enc, s->fs_err);
}

/* Size of a regular file or block device; anything else is refused.
 * *regular: a regular file (whose holes SEEK_DATA may find). */
static int dd_fsend_input_size(dd_err *err, int fd, uint64_t *size,
			       bool *regular)
{
	struct stat st;

	if (fstat(fd, &st) != 0)
		return dd_err_set_errno(err, errno, "fstat input");
	*regular = S_ISREG(st.st_mode);
	if (*regular) {
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

static int dd_fsend_setup(dd_fsend *s)
{
	int rc = dd_pool_new(&s->fs_pool, 0);

	if (rc)
		return dd_err_set(s->fs_err, rc, "cannot start worker threads");
	s->fs_width = dd_pool_width(s->fs_pool);
	rc = dd_raw_codecs(&s->fs_codec, s->fs_err, s->fs_width,
			   s->fs_level < 0 ? DD_CODEC_NONE : DD_CODEC_ZSTD,
			   s->fs_level <= 0 ? 1 : s->fs_level);
	if (!rc)
		rc = dd_digest_new(&s->fs_digest, s->fs_err, s->fs_chunker,
				   s->fs_dv, s->fs_bs);
	if (!rc)
		rc = dd_hmap_new(&s->fs_sent, s->fs_err, s->fs_opts->mem_limit,
				 s->fs_opts->tmpdir);
	return rc;
}

static void dd_fsend_cleanup(dd_fsend *s)
{
	dd_pipe_free(s->fs_pipe);
	dd_pool_free(s->fs_pool);
	dd_raw_codecs_free(s->fs_codec, s->fs_width);
	dd_hmap_free(s->fs_sent);
	dd_digest_free(s->fs_digest);
	dd_senc_free(s->fs_enc);
	dd_free(s->fs_ext);
}

static int dd_send_fd_args(dd_err *err, int fd, const char *name,
			   uint32_t bs, int level, const dd_send_opts *opts,
			   int chunker, dd_write_fn fn)
{
	if (fd < 0 || !fn)
		return dd_err_set(err, DD_EINVAL, "dd_send_fd: bad fd or "
				  "no write callback");
	if (dd_name_check(name))
		return dd_err_set(err, DD_ENAME, "invalid stream name '%.255s' "
				  "(1-255 bytes; no '/', '@' or control "
				  "characters; not '.' or '..')",
				  name ? name : "(null)");
	if (chunker != DD_CHUNKER_FIXED && chunker != DD_CHUNKER_FASTCDC)
		return dd_err_set(err, DD_EINVAL, "unknown chunker %d",
				  chunker);
	if (!dd_chunker_valid(chunker, bs))
		return dd_err_set(err, DD_EINVAL, "block size %u is not a "
				  "power of two in [4 KiB, %s]", bs,
				  chunker == DD_CHUNKER_FIXED ? "1 MiB"
							      : "256 KiB");
	if (level < -1 || level > 19)
		return dd_err_set(err, DD_EINVAL, "compression level %d not "
				  "in -1..19", level);
	if (opts->version == 0 || opts->version > DD_SEND_OPTS_VERSION)
		return dd_err_set(err, DD_EINVAL, "dd_send_opts version %u "
				  "not supported", opts->version);
	if (dd_send_opts_dv(opts) < 0)
		return dd_err_set(err, DD_EINVAL, "unknown digest version %d",
				  opts->digest_version);
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
	dd_fsend s;
	bool regular = false;
	int chunker, rc;

	dd_err_clear(err);
	if (!block_size)
		block_size = DD_BLOCK_SIZE_DEFAULT;
	if (!opts)
		opts = &defaults;
	/* a version-1 struct ends before `chunker`: fixed blocks */
	chunker = opts->version >= 2 ? opts->chunker : DD_CHUNKER_FIXED;
	rc = dd_send_fd_args(err, fd, name, block_size, compress_level, opts,
			     chunker, fn);
	if (rc)
		return rc;
	memset(&s, 0, sizeof(s));
	s.fs_fd = fd;
	s.fs_chunker = chunker;
	/* version 2 unless asked otherwise: holes cost nothing */
	s.fs_dv = chunker == DD_CHUNKER_FIXED && dd_send_opts_dv(opts) != 1
			  ? DD_DIGEST_V2 : DD_DIGEST_V1;
	s.fs_bs = block_size;
	s.fs_max = dd_chunker_max(chunker, block_size);
	s.fs_level = compress_level;
	s.fs_opts = opts;
	s.fs_err = err;
	memset(&h, 0, sizeof(h));
	rc = dd_fsend_input_size(err, fd, &s.fs_size, &regular);
	/* content-defined cut points depend on every byte before them */
	s.fs_seek = regular && chunker == DD_CHUNKER_FIXED;
	if (!rc && !dd_stream_size_ok(chunker, s.fs_dv, block_size, s.fs_size))
		rc = dd_err_set(err, DD_EINVAL, "input of %llu bytes: more "
				"than 2^63 bytes, or 2^32 blocks with a "
				"content digest of version 1 "
				"(format/stream.md §3.1)",
				(unsigned long long)s.fs_size);
	if (!rc)
		rc = dd_fsend_setup(&s);
	if (!rc)
		rc = dd_senc_new(&s.fs_enc, err, fn, ctx);
	if (!rc) {
		h.sh_version = DD_STREAM_VERSION;
		h.sh_chunker = s.fs_chunker;
		h.sh_flags = s.fs_dv == DD_DIGEST_V2 ? DD_SH_DIGEST2 : 0;
		h.sh_block_size = s.fs_bs;
		h.sh_hash_alg = DD_STREAM_HASH_SHA256;
		h.sh_codec = compress_level < 0 ? DD_CODEC_NONE : DD_CODEC_ZSTD;
		snprintf(h.sh_name, sizeof(h.sh_name), "%s", name);
		h.sh_size = s.fs_size;
		rc = dd_fsend_run(&s, &h);
	}
	dd_fsend_cleanup(&s);
	return rc;
}
