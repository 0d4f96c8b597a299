/*
 * scan.h -- internals of the dedup-ratio scanner (dedup scan).
 *
 * The scanner reads images (files, devices, streams), cuts each one from
 * its own start into blocks of one or more sizes in a single read pass,
 * and counts, per block size, how often each distinct block occurs --
 * exactly what `dedup put` of the same images into a new store would put
 * in its DDT, without writing anything.
 *
 * Pieces:
 *   table.c  an open-addressing table per block size: SHA-256 -> (refcount,
 *            logical size, compressed size), 48 bytes an entry, bounded by a
 *            byte budget;
 *   spill.c  exact mode: a full table is sorted and written out as a run
 *            to an unlinked temp file; at the end the runs are merged
 *            (several passes when there are too many for the memory), and
 *            entries with the same hash in several runs are summed;
 *   scan.c   the public API: a scan's life;
 *   setup.c  a new scan: options, the pool and codecs, the pipeline and
 *            its cutters, the memory split;
 *   read.c   images into the pipeline (regular files as ranges read on
 *            the pool, holes skipped), and the warnings;
 *   sink.c   the sink of the block pipeline (chunk/pipeline.h) that
 *            counts what it hashes: lookup, then the compressed or
 *            estimated sizes;
 *   estimate.c with two chunkers, the FastCDC blocks' compressed sizes
 *            estimated from the fixed blocks' compression of the same
 *            bytes, unless the exact figure is asked for;
 *   result.c the figures, once everything is counted: sums, the merge of
 *            spilled runs, sample-mode estimates and their bounds;
 *   walk.c   paths: files, block devices, directories (recursively, never
 *            following symlinks), warnings for what is skipped; it hands
 *            what it finds to callbacks.
 *
 * Nothing here outlives a run: temp files are unlinked as soon as they are
 * created, so format/ has no spec for them.
 */
#ifndef DD_SCAN_SCAN_H
#define DD_SCAN_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dedup.h"
#include "chunk/pipeline.h"
#include "common/err.h"
#include "common/pool.h"
#include "hash/hash.h"

/* ---- the table (table.c) -----------------------------------------------*/

/* One distinct block.  se_refcnt == 0 marks an empty slot. */
typedef struct dd_scan_ent {
	uint8_t se_hash[DD_HASH_SIZE];
	uint64_t se_refcnt;
	uint32_t se_lsize;
	uint32_t se_psize;
} dd_scan_ent;
_Static_assert(sizeof(dd_scan_ent) == 48, "dd_scan_ent is 48 bytes");

typedef struct dd_scan_table {
	dd_scan_ent *tb_ent;
	size_t tb_cap;        /* slots */
	size_t tb_count;      /* used slots */
	size_t tb_max;        /* used slots allowed (load factor 3/4) */
	size_t tb_limit;      /* slots the budget allows */
} dd_scan_table;

/* A table of at most `budget` bytes (but room for at least `min_entries`
 * entries), starting small. */
int dd_scan_table_init(dd_scan_table *t, size_t budget, size_t min_entries);
void dd_scan_table_fini(dd_scan_table *t);
/* Grows the table, within its budget, until `more` entries fit or it can
 * grow no more (the caller then spills or subsamples).  DD_ENOMEM. */
int dd_scan_table_reserve(dd_scan_table *t, size_t more);
/* Empties the table; at full budget from then on.  DD_ENOMEM. */
int dd_scan_table_clear(dd_scan_table *t);

/* Finds hash or inserts it with refcount 0 (the caller then counts it);
 * *slot gets its index, *found whether it was there.  The caller keeps
 * tb_count <= tb_max (a full table would probe forever). */
void dd_scan_table_upsert(dd_scan_table *t, const uint8_t *hash,
			  size_t *slot, bool *found);

/* Moves every used entry to the front and sorts them by hash (memcmp
 * order, the order of runs on disk).  The table must be cleared after. */
void dd_scan_table_sort(dd_scan_table *t);

/* Sample mode: keeps the entries whose hash has its first `shift` bits
 * zero and rebuilds the table with them. */
void dd_scan_table_subsample(dd_scan_table *t, unsigned shift);

/* True when hash's first `shift` bits are all zero (the sample: 1 block
 * content in 2^shift, chosen by content, so every copy of a sampled block
 * is counted). */
bool dd_scan_sampled(const uint8_t *hash, unsigned shift);

/* ---- spill runs (spill.c) ----------------------------------------------*/

#define DD_SCAN_REC_SIZE 48   /* hash 32, refcnt le64, lsize le32, psize le32 */

typedef struct dd_scan_run {
	uint64_t sr_off;      /* byte offset in the spill file */
	uint64_t sr_count;    /* records */
} dd_scan_run;

typedef struct dd_scan_spill {
	int sp_fd;            /* -1 until the first run */
	const char *sp_dir;   /* where the temp file goes */
	uint64_t sp_end;      /* append offset */
	dd_scan_run *sp_runs;
	size_t sp_nruns, sp_capruns;
	uint64_t sp_total_runs;  /* runs written, merge passes included */
	uint64_t sp_bytes;       /* bytes written */
} dd_scan_spill;

/* Called once per distinct block, in hash order, by the final merge. */
typedef void (*dd_scan_sink_fn)(void *ctx, const dd_scan_ent *e);

void dd_scan_spill_init(dd_scan_spill *sp, const char *dir);
void dd_scan_spill_fini(dd_scan_spill *sp);

/* Writes the first t->tb_count entries (sorted) as a new run. */
int dd_scan_spill_run(dd_scan_spill *sp, dd_err *err, const dd_scan_table *t);

/* Merges every run into sink using at most `budget` bytes of buffers
 * (extra merge passes write intermediate runs when the runs are too many
 * for it). */
int dd_scan_spill_merge(dd_scan_spill *sp, dd_err *err, size_t budget,
			dd_scan_sink_fn sink, void *ctx);

/* Record encoding, field by field (STYLE.md). */
void dd_scan_rec_encode(uint8_t *out, const dd_scan_ent *e);
void dd_scan_rec_decode(const uint8_t *in, dd_scan_ent *e);

/* ---- estimated compressed sizes (estimate.c) ----------------------------*/

/* A block of the source cutter: where its bytes are and what they
 * compressed to. */
typedef struct dd_scan_seg {
	uint64_t sg_image;    /* the cutter's image count */
	uint64_t sg_ioff;     /* first byte, in the image */
	uint32_t sg_len;
	uint32_t sg_psize;    /* 0: a zero block */
} dd_scan_seg;

typedef struct dd_scan_est {
	dd_scan_seg *es_seg;  /* in (image, offset) order */
	size_t es_n, es_cap;
	uint64_t es_lsum, es_psum;  /* every segment added: the fallback */
} dd_scan_est;

void dd_scan_est_init(dd_scan_est *e);
void dd_scan_est_fini(dd_scan_est *e);
/* Appends a source block, after every one before it.  DD_ENOMEM. */
int dd_scan_est_add(dd_scan_est *e, uint64_t image, uint64_t ioff,
		    uint32_t len, uint32_t psize);
/* The estimated compressed size of len bytes at ioff of image: 1 ..
 * len. */
uint32_t dd_scan_est_psize(const dd_scan_est *e, uint64_t image,
			   uint64_t ioff, uint32_t len);
/* Drops the segments no block at or past (image, ioff) needs. */
void dd_scan_est_trim(dd_scan_est *e, uint64_t image, uint64_t ioff);

/* ---- results (result.c) ------------------------------------------------*/

/* Everything about one chunker and block size. */
typedef struct dd_scan_bsz {
	int bz_chunker;           /* enum dd_chunker */
	uint32_t bz_bs;           /* FastCDC: the average */
	uint32_t bz_max;          /* the longest block */
	bool bz_prev_zero;        /* FastCDC: the image's last block was a
				     zero block (a run of them counts once) */
	dd_scan_table bz_tab;
	dd_scan_spill bz_spill;
	unsigned bz_shift;        /* sample mode: 1 in 2^shift */
	uint64_t bz_blocks, bz_zero, bz_logical;
	uint64_t bz_ref_blocks, bz_ref_bytes;
	/* estimate.c: a FastCDC cutter whose compressed sizes are estimated
	 * names its source, the fixed cutter of its block size, which keeps
	 * the segments of its blocks */
	int bz_src;               /* -1: compressed */
	bool bz_feeds;            /* a source */
	bool bz_fastkey;          /* blocks keyed by dd_fastkey (setup.c) */
	dd_scan_est bz_segs;      /* a source's segments */
	uint64_t bz_image;        /* images this cutter began (bk_idx 0) */
	uint64_t bz_done;         /* the end of its last block, in image
				     bz_image */
	dd_scan_result bz_res;
} dd_scan_bsz;

/* Phase 1 of the results, for every block size before any merge: a table
 * that spilled goes to disk as its last run, one that did not is counted
 * now; either way its memory is given back, so that the merges have the
 * whole table budget for their buffers. */
int dd_scan_table_done(dd_scan_bsz *bz, dd_err *err);

/* Phase 2: merge the runs (if any, within `budget` bytes) and fill in
 * bz_res for scan mode `mode`. */
int dd_scan_result_one(dd_scan_bsz *bz, dd_err *err, size_t budget, int mode);

/* ---- the scan (scan.c, setup.c, read.c, sink.c) ---------------------------*/

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


/* setup.c: the checks of dd_scan_new's options (errors to err), and a
 * new scan built from them (errors to s->s_err; dd_scan_free undoes a
 * build that failed half-way). */
int dd_scan_check_opts(dd_err *err, const dd_scan_opts *o);
int dd_scan_build(dd_scan *s, const dd_scan_opts *o);

/* sink.c: the scan's stages of the pipeline, ctx the dd_scan. */
extern const dd_pipe_ops dd_scan_sink_ops;

/* read.c: a warning about an input (counted in dd_scan_info.skipped,
 * reported through the warning callback); a failure that stops the
 * scan (returns rc). */
void dd_scan_warn(dd_scan *s, const char *path, int code, const char *fmt,
		  ...) __attribute__((format(printf, 4, 5)));
int dd_scan_fail(dd_scan *s, int rc);

/* Scans one image from fd (its current position to EOF).  size_hint is
 * the expected size for a regular file (a shorter read is reported as a
 * file that shrank), or UINT64_MAX.  Returns 0, a warning already
 * reported (the image is counted up to the failure), or a fatal code. */
int dd_scan_image(dd_scan *s, int fd, const char *label, uint64_t size_hint,
		  bool regular);

/* ---- walking paths (walk.c) ----------------------------------------------*/

/* What a walk finds, reported on the walking thread. */
typedef struct dd_walk_ops {
	/* An input to read: fd (closed after the call), its path,
	 * size_hint and regular as dd_scan_image takes them.  A code other
	 * than 0 ends the walk with it. */
	int (*wo_image)(void *ctx, int fd, const char *path,
			uint64_t size_hint, bool regular);
	/* An input skipped or only partly read. */
	void (*wo_warn)(void *ctx, const char *path, int code,
			const char *msg);
	/* A fifo, socket or device met inside a directory (not read). */
	void (*wo_special)(void *ctx);
} dd_walk_ops;

/* Walks path: a file or device, or a directory tree.  Fatal failures
 * (out of memory) go to err; everything else is a warning. */
int dd_walk(const char *path, dd_err *err, const dd_walk_ops *ops, void *ctx);

#endif
