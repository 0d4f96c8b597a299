/*
 * pipeline_internal.h -- the block pipeline's state, shared by
 * pipeline.c (batches, cutting, stages, the ring) and prange.c (a file's
 * ranges, read by stage 1).  Only those two include it.
 */
#ifndef DD_CHUNK_PIPELINE_INTERNAL_H
#define DD_CHUNK_PIPELINE_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chunk/pipeline.h"
#include "chunk/pstage.h"

/* Stage 1's unit: big enough that small blocks do not cost a pread and a
 * job item each, small enough to stay in a core's cache. */
#define DD_PIPE_REGION_MIN ((size_t)256 << 10)
/* ... and at most this when grown to list more blocks for the hasher's
 * lanes (dd_hasher_list_width): sixteen 128 KiB blocks, within a core's
 * L2 cache on the machines measured (2 MiB). */
#define DD_PIPE_REGION_WIDE ((size_t)2 << 20)

struct dd_pipe {
	dd_pipe_cfg pp_cfg;
	dd_cutter pp_cut[DD_PIPE_MAX_CUT];
	bool pp_reads;            /* a cutter needs the bytes to cut */
	size_t pp_cap;            /* batch bytes: a multiple of pp_region */
	size_t pp_region;
	size_t pp_align;
	size_t pp_maxblk;         /* dd_blk slots a batch */
	dd_pbatch pp_b[DD_PIPE_RING];
	int pp_cur;
	dd_pbatch *pp_hashing;    /* stage 1 of the running job, or NULL */
	dd_pbatch *pp_working;    /* stage 3 of the running job, or NULL */
	size_t pp_job_nwork;      /* job items below this are stage 3's */
	dd_pstage pp_stage;       /* the job, on the pool or alone (pstage.h),
				     and the workers' hashers */
	size_t pp_pos[DD_PIPE_MAX_CUT];   /* the next block's first byte */
	uint64_t pp_idx[DD_PIPE_MAX_CUT]; /* ... its index in the image */
	uint64_t pp_ioff[DD_PIPE_MAX_CUT];/* ... and its offset there */
	uint64_t pp_image;        /* images ended */
	unsigned pp_width;
	uint8_t **pp_hot;         /* per pool worker: one region */
	/* stage 3's output: pc_zkeep, two of a batch's payloads, else one
	 * payload per worker */
	uint8_t **pp_zout;
	unsigned pp_nzout;
	uint8_t *pp_zout_of[DD_PIPE_RING];   /* pc_zkeep, by pb_id */
	uint64_t pp_nworked;
	/* dd_pipe_cancel (any thread), read once a step; progress after
	 * each batch stored */
	atomic_bool pp_cancel;
	dd_progress_fn pp_progress;
	void *pp_progress_ctx;
	uint64_t pp_progress_total;
	uint64_t pp_stored;       /* logical bytes through stage 4 */
};

/* ---- prange.c -------------------------------------------------------------*/

/* Reads batch bytes [beg, end) of b's range into dst (any thread): false
 * when they failed to read and the pipeline fails (DD_PIPE_READ_FAIL);
 * what failed becomes zeros otherwise (DD_PIPE_READ_ZERO).  The first
 * failure leaves its message in b for the step. */
bool dd_pipe_read(const dd_pipe *p, dd_pbatch *b, uint8_t *dst, size_t beg,
		  size_t end);
/* b's range is read: its descriptor goes, and a failure is reported (the
 * pipeline's error, or po_lost).  Caller's thread. */
int dd_pipe_end_range(dd_pipe *p, dd_pbatch *b);
/* Reads b's range now, on this thread, into place, and ends it. */
int dd_pipe_read_now(dd_pipe *p, dd_pbatch *b);

#endif
