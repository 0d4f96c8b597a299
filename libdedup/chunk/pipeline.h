/*
 * pipeline.h -- the block pipeline: bytes in, an ordered stream of
 * (block, hash) out, through a sink's stages.
 *
 * Bytes come in batches from the caller's buffers (dd_pipe_buffer /
 * dd_pipe_produce, dd_pipe_write) or as ranges of a file (dd_pipe_range,
 * dd_pipe_file), in images: each image is cut from its own start
 * (dd_pipe_end_image ends one; its last block may be short).  A batch
 * goes through four stages:
 *
 *   1. hash     on the pool: each block found zero (a hole) or hashed,
 *               two blocks of one length at a time (dd_blk_hash); a
 *               file range is read here, by the worker that hashes it
 *               (chunk/pipeline.c says how);
 *   2. lookup   serial, the sink's po_lookup: each block's fate; blocks
 *               that need stage 3 are listed with dd_pipe_mark;
 *   3. compress on the pool, the listed blocks only, with the sink's
 *               compressor (pc_compress: pack/'s dd_codec_compress in
 *               every sink so far); their payloads are kept until the
 *               batch is stored (dd_pipe_payload), or only their sizes;
 *   4. store    serial, the sink's po_store, in batch order.
 *
 * A ring of DD_PIPE_RING batches keeps the stages overlapped: while the
 * caller fills batch k+1, one pool job hashes batch k and compresses
 * batch k-1, and the caller stores k-2 meanwhile (or first:
 * po_store_late).
 * Blocks reach lookup and store in image order, whatever the pool did.
 *
 * Errors: the pipeline's own (memory, descriptors, a range that failed to
 * read) go to cfg->pc_err; the sink's callbacks report theirs on their
 * own record and return its code, which the pipeline passes up.  After a
 * failure the pipeline must only be freed.
 */
#ifndef DD_CHUNK_PIPELINE_H
#define DD_CHUNK_PIPELINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "dedup.h"
#include "chunk/chunk.h"
#include "common/pool.h"

#define DD_PIPE_RING 3
/* cutters of one pipeline: scan's 9 fixed sizes and 7 FastCDC averages */
#define DD_PIPE_MAX_CUT 16

/* bk_kind after stage 1; sinks may use their own values from DD_BLK_SINK */
enum { DD_BLK_ZERO, DD_BLK_DATA, DD_BLK_SINK };

/* One block of a batch. */
typedef struct dd_blk {
	uint32_t bk_off;          /* first byte, in the batch's bytes */
	uint32_t bk_len;          /* 1 .. its cutter's cu_max */
	uint64_t bk_idx;          /* index in its image, of its cutter */
	uint64_t bk_ioff;         /* first byte, in its image */
	uint8_t bk_hash[DD_HASH_SIZE]; /* after stage 1, unless zero */
	uint8_t bk_cut;           /* its cutter */
	uint8_t bk_kind;
	bool bk_nodata;           /* its bytes never reached pb_data: stage
				     1 read them into a worker's buffer
				     (a zero block, DD_PIPE_BYTES_NONE, or
				     po_keep said no) */
	uint8_t bk_codec;         /* stage 3's results */
	uint32_t bk_psize;
	uint64_t bk_aux;          /* the sink's own */
} dd_blk;

/* Zero test and SHA-256 (or the test hash) of blk[0..n), whose bytes
 * are at buf + (bk_off - buf_off): each is marked DD_BLK_ZERO (not
 * hashed) or DD_BLK_DATA.  The data blocks are hashed as lists
 * (dd_hasher_sum_list: sixteen AVX-512 lanes, or two SHA-NI lanes at 1.8
 * times the speed of one at a time), a lane taking the next block as
 * soon as its own ends, whatever the lengths and cutters; the zero test
 * first, since most blocks that are not zero differ from it in their
 * first bytes.  A block of a cutter c
 * with bit c of fast_cuts set is keyed by dd_fastkey instead
 * (hash/fastkey.h: for counting only). */
void dd_blk_hash(dd_hasher *h, dd_blk *blk, size_t n, const uint8_t *buf,
		 size_t buf_off, unsigned fast_cuts);

typedef struct dd_pbatch {
	unsigned pb_id;           /* 0 .. DD_PIPE_RING - 1, for the sink */
	uint8_t *pb_data;
	size_t pb_fill;           /* bytes used, alignment padding included */
	dd_blk *pb_blk;
	size_t pb_nblk;
	uint64_t pb_bytes;        /* logical bytes of its blocks */
	uint32_t *pb_new;         /* blocks listed for stage 3, in order */
	size_t pb_nnew;

	/* the pipeline's own */
	size_t *pb_reg_first;     /* region r's blocks: [r], [r + 1]) */
	size_t pb_nreg;
	/* Bytes [pb_src_start, pb_src_end) are bytes of a file, read by stage
	 * 1 from pb_src_fd (a descriptor of the batch's own, closed once
	 * read) at pb_src_off onwards: one such range a batch, of the file
	 * pb_src_dev / pb_src_ino in image pb_src_image. */
	int pb_src_fd;            /* -1: every byte is in pb_data */
	dev_t pb_src_dev;
	ino_t pb_src_ino;
	uint64_t pb_src_image;
	uint64_t pb_src_off;
	size_t pb_src_start, pb_src_end;
	char *pb_src_label;
	atomic_uint_least64_t pb_src_missing; /* bytes that read as zeros */
	atomic_int pb_src_failed;  /* the first failed read left pb_src_err */
	dd_err pb_src_err;
	atomic_int pb_z_failed;    /* the first failed compression left ... */
	dd_err pb_z_err;           /* ... its message here */
} dd_pbatch;

/* Lists block i of b for stage 3 (from po_lookup). */
static inline void dd_pipe_mark(dd_pbatch *b, size_t i)
{
	b->pb_new[b->pb_nnew++] = (uint32_t)i;
}

/* Stage 3's compressor: len bytes at src into dst (room for pc_zbound
 * bytes), setting *psize and *codec; ctx is the calling pool worker's
 * own (pc_zctx[worker]).  pack/pack.h's dd_codec_compress is one. */
typedef struct dd_codec_ctx dd_codec_ctx;
typedef int (*dd_compress_fn)(dd_codec_ctx *ctx, dd_err *err, void *dst,
			      const void *src, size_t len, uint32_t *psize,
			      uint8_t *codec);

#define DD_PIPE_KEEP_AHEAD 4

typedef struct dd_pipe_ops {
	/* Stage 2, on the caller's thread, batches in order. */
	int (*po_lookup)(void *ctx, dd_pbatch *b);
	/* Stage 4, on the caller's thread, batches in order; NULL: none.
	 * A compression that failed fails the pipeline before it. */
	int (*po_store)(void *ctx, dd_pbatch *b);
	/* May b, compressed, be stored after the next batch's lookup, while
	 * the pool runs the next job?  NULL: never (it is stored first). */
	bool (*po_store_late)(void *ctx, const dd_pbatch *b);
	/* DD_PIPE_BYTES_SOME: stage 1 read block i into the worker's buffer
	 * and hashed it; must its bytes be copied into the batch for stages
	 * 2-4?  On the pool; it may set block i's bk_aux. */
	bool (*po_keep)(void *ctx, const dd_pbatch *b, size_t i,
			unsigned worker);
	/* Optional, with po_keep: block i is hashed, and po_keep will be
	 * asked about it DD_PIPE_KEEP_AHEAD blocks from now -- a chance to
	 * fetch what it will read into the cache.  On the pool. */
	void (*po_keep_ahead)(void *ctx, const dd_pbatch *b, size_t i);
	/* DD_PIPE_READ_ZERO: `bytes` of a range in image `image` failed to
	 * read (why) and became zeros.  On the caller's thread. */
	void (*po_lost)(void *ctx, const char *label, uint64_t image,
			uint64_t bytes, const dd_err *why);
} dd_pipe_ops;

/* Which blocks' bytes the sink's stages need in the batch. */
enum {
	DD_PIPE_BYTES_ALL,        /* every block's */
	DD_PIPE_BYTES_SOME,       /* those po_keep names */
	DD_PIPE_BYTES_NONE        /* none: hashes are all it wants */
};

/* What a file range that fails to read, or ends early, becomes. */
enum {
	DD_PIPE_READ_FAIL,        /* an error: the pipeline fails */
	DD_PIPE_READ_ZERO         /* zeros, reported through po_lost */
};

typedef struct dd_pipe_cfg {
	dd_pool *pc_pool;
	pthread_mutex_t *pc_pool_lock; /* held while a job runs, or NULL;
				     when another pipeline holds it, a step
				     runs its job alone on the caller's
				     thread, compressing with pc_zctx_solo */
	int pc_hash_kind;         /* hash/hash.h */
	const dd_cutter *pc_cut;  /* copied */
	size_t pc_ncut;
	unsigned pc_fast_cuts;    /* bit c: cutter c's blocks keyed by
				     dd_fastkey, not pc_hash_kind (a sink
				     that only counts them: a scan) */
	/* stage 3: NULL for none (then po_lookup lists nothing) */
	dd_compress_fn pc_compress;
	dd_codec_ctx *const *pc_zctx; /* per pool worker */
	dd_codec_ctx *pc_zctx_solo; /* the caller's own (pc_pool_lock) */
	size_t pc_zbound;         /* room for one payload */
	bool pc_zkeep;            /* keep payloads until stored, or only
				     their sizes */
	size_t pc_batch;          /* bytes per batch, before rounding */
	int pc_bytes;             /* DD_PIPE_BYTES_* */
	int pc_read;              /* DD_PIPE_READ_* */
	const dd_pipe_ops *pc_ops;
	void *pc_ctx;
	dd_err *pc_err;
} dd_pipe_cfg;

typedef struct dd_pipe dd_pipe;

int dd_pipe_new(dd_pipe **out, const dd_pipe_cfg *cfg);
/* Waits for a running job first: sinks free their state after this. */
void dd_pipe_free(dd_pipe *p);

/* Batch geometry: bytes, and the most blocks a batch can hold. */
size_t dd_pipe_batch_bytes(const dd_pipe *p);
size_t dd_pipe_batch_blocks(const dd_pipe *p);
/* Bytes stage 1 takes as one job item: their blocks are hashed as one
 * list (dd_hasher_sum_list), so for fixed blocks of up to 128 KiB as many
 * as the hasher's lanes (dd_hasher_list_width), within the batch. */
size_t dd_pipe_region_bytes(const dd_pipe *p);
/* Bytes the pipeline holds besides the sink's: batches, worker buffers. */
size_t dd_pipe_mem(const dd_pipe *p);
/* Batch pb_id (a sink finds bytes of earlier blocks there). */
dd_pbatch *dd_pipe_batch(dd_pipe *p, unsigned id);
/* The payload stage 3 made of b's j-th listed block (pc_zkeep): valid
 * until b is stored. */
const uint8_t *dd_pipe_payload(const dd_pipe *p, const dd_pbatch *b,
			       size_t j);

/* The free part of the filling batch (never empty): write up to *len
 * bytes at *buf, then dd_pipe_produce that many. */
void dd_pipe_buffer(dd_pipe *p, void **buf, size_t *len);
/* n bytes written at dd_pipe_buffer's place; a full batch goes on. */
int dd_pipe_produce(dd_pipe *p, size_t n);
int dd_pipe_write(dd_pipe *p, const void *buf, size_t len);
size_t dd_pipe_room(const dd_pipe *p);

/* Hands n <= dd_pipe_room bytes of file fd at off to the filling batch,
 * to be read by stage 1; does not move the batch on (dd_pipe_produce(p,
 * 0) does when it is full).  A range continues the batch's range if it
 * is the same file, the same image and the next bytes, else that one is
 * read first, here.  The batch keeps its own descriptor: fd may be closed
 * at once.  label names the file in messages. */
int dd_pipe_range(dd_pipe *p, int fd, uint64_t off, size_t n,
		  const char *label);
/* The same for len bytes, over as many batches as it takes. */
int dd_pipe_file(dd_pipe *p, int fd, uint64_t off, uint64_t len,
		 const char *label);

/* Ends the image: its last bytes are cut (a short block), and the next
 * image starts aligned for every cutter. */
int dd_pipe_end_image(dd_pipe *p);
/* One step: the filling batch goes on if it holds blocks. */
int dd_pipe_step(dd_pipe *p);
/* fn(ctx, bytes through stage 4, total) after each batch stored, on the
 * caller's thread; a non-zero return fails the pipeline (DD_ECANCELED). */
void dd_pipe_set_progress(dd_pipe *p, dd_progress_fn fn, void *ctx,
			  uint64_t total);
/* From any thread, until dd_pipe_free: the next step fails with
 * DD_ECANCELED -- within one batch of the caller's bytes. */
void dd_pipe_cancel(dd_pipe *p);

/* Ends the open image, then runs every batch through stage 4. */
int dd_pipe_drain(dd_pipe *p);
/* Waits for the running job, if any (before a sink unwinds). */
void dd_pipe_wait(dd_pipe *p);

#endif
