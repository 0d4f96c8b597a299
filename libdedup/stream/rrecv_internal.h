/*
 * rrecv_internal.h -- the raw receiver's state, shared by rrecv.c (the
 * records) and rrbatch.c (the ring of batches).  Only those two include
 * it.
 */
#ifndef DD_STREAM_RRECV_INTERNAL_H
#define DD_STREAM_RRECV_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "dedup.h"
#include "chunk/chunk.h"
#include "chunk/pstage.h"
#include "common/hmap.h"
#include "common/pool.h"
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

/* ---- rrbatch.c -------------------------------------------------------------*/

/* The next job of the filling batch, with room for lsize bytes of output
 * after the others' (a full batch is handed on first); NULL with *rc on
 * failure. */
dd_rjob *dd_rrecv_slot(dd_rrecv *r, uint32_t lsize, int *rc);
/* Every block decoded so far checked and written. */
int dd_rrecv_drain(dd_rrecv *r);
/* The lowest position not yet written to the output. */
uint64_t dd_rrecv_unwritten(dd_rrecv *r);
/* The writer thread, with an output only.  Stopping it drops what it has
 * not written (after a failure), or there is none (after dd_rrecv_drain). */
int dd_rwriter_start(dd_rrecv *r);
void dd_rwriter_stop(dd_rrecv *r);

#endif
