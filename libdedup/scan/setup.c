/*
 * setup.c -- a new scan: its options checked, the pool and its codec
 * contexts, the pipeline and its cutters, which cutters' compressed sizes
 * are estimated, and the memory split between batches and tables.
 */
#include <stddef.h>
#include <stdlib.h>

#include "common/alloc.h"
#include "pack/pack.h"
#include "scan/scan.h"

#define DD_SCAN_MEM_DEFAULT ((uint64_t)256 << 20)
#define DD_SCAN_BATCH_MAX ((size_t)8 << 20)
#define DD_SCAN_BATCH_MIN ((size_t)64 << 10)

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

int dd_scan_check_opts(dd_err *err, const dd_scan_opts *o)
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

/* Background threads by default: one per core, but for one core fewer
 * when a cutter reads every byte (FastCDC): the caller's thread then cuts
 * them all, and is busy beside the pool rather than waiting for it.  On
 * two cores a scan of both chunkers took 4.41 s with one background
 * thread and 4.58-4.67 s with two; a fixed-only scan took the same with
 * either (3.48-3.53 s; tests/bench/bench_ab_target.sh's images). */
static unsigned dd_scan_threads(const dd_scan *s)
{
	unsigned n = dd_pool_cpus();

	if (s->s_opts.threads)
		return s->s_opts.threads;
	for (size_t i = 0; i < s->s_nbz; i++)
		if (s->s_bz[i].bz_chunker != DD_CHUNKER_FIXED)
			return n > 1 ? n - 1 : 1;
	return 0;
}

/* The pool, and per worker a codec context. */
static int dd_scan_workers(dd_scan *s)
{
	const dd_scan_opts *o = &s->s_opts;
	int codec = o->compress == DD_COMPRESS_ZSTD ? DD_CODEC_ZSTD
						    : DD_CODEC_NONE;
	int rc = dd_pool_new(&s->s_pool, dd_scan_threads(s));

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

/* The cutters whose blocks dd_fastkey keys, as pc_fast_cuts. */
static unsigned dd_scan_fast_cuts(const dd_scan *s)
{
	unsigned cuts = 0;

	for (size_t i = 0; i < s->s_nbz; i++)
		if (s->s_bz[i].bz_fastkey)
			cuts |= 1u << i;
	return cuts;
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
		.pc_fast_cuts = dd_scan_fast_cuts(s),
		/* only the size of a new block's payload is kept */
		.pc_compress = s->s_opts.compress == DD_COMPRESS_NONE
				       ? NULL : dd_codec_compress,
		.pc_zctx = s->s_codec,
		.pc_zbound = dd_codec_bound(s->s_maxbs),
		.pc_bytes = s->s_opts.compress == DD_COMPRESS_NONE
				    ? DD_PIPE_BYTES_NONE : DD_PIPE_BYTES_ALL,
		.pc_read = DD_PIPE_READ_ZERO,
		.pc_ops = &dd_scan_sink_ops,
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

/* Both chunkers, compress_exact off: the FastCDC cutters' blocks are
 * keyed by dd_fastkey (XXH3-128), not SHA-256.  A scan's keys only count
 * blocks, and hashing the bytes a second time for the second chunker
 * was most of what a scan of both cost beyond one of fixed blocks: on
 * the benchmark images SHA-256 of the FastCDC blocks took 0.39 of the
 * time zstd took, XXH3 a few hundredths.  The figures differ from
 * SHA-256's only on data made to collide (hash/fastkey.h), and never in
 * what a store does; compress_exact keys them by SHA-256 too.  The fixed
 * cutters keep SHA-256, so their figures are those of a fixed-only scan
 * whatever else is scanned. */
static void dd_scan_key_choose(dd_scan *s)
{
	const dd_scan_opts *o = &s->s_opts;
	bool fast = o->nchunkers == 2 && !o->compress_exact;

	for (size_t i = 0; i < s->s_nbz; i++)
		s->s_bz[i].bz_fastkey =
			fast && s->s_bz[i].bz_chunker == DD_CHUNKER_FASTCDC;
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
	dd_scan_key_choose(s);
	s->s_tmpdir = dd_strdup(dir && *dir ? dir : "/tmp");
	if (!s->s_tmpdir)
		return dd_err_set(&s->s_err, DD_ENOMEM, "out of memory");
	s->s_opts.tmpdir = s->s_tmpdir;
	return 0;
}

int dd_scan_build(dd_scan *s, const dd_scan_opts *o)
{
	int rc = dd_scan_setup(s, o);

	if (!rc)
		rc = dd_scan_workers(s);
	if (!rc)
		rc = dd_scan_alloc(s);
	return rc;
}

