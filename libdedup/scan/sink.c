/*
 * sink.c -- the scan's stages of the block pipeline (chunk/pipeline.h).
 *
 * A scan is a sink of the same pipeline `dedup put` writes through, with
 * one cutter per chunker and block size (fixed sizes, FastCDC averages):
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
 *               with both chunkers, new blocks of the fixed sizes only
 *               (estimate.c gives the FastCDC ones theirs);
 *   4. apply    serial: the sizes go into the table entries, compressed
 *               or estimated.
 *
 * One pool job compresses batch k-1 and hashes batch k while the caller
 * reads batch k+1, so both cores are busy whether the data is new
 * (compression bound) or known (hash bound).
 *
 * Tables change shape (spill in exact mode, subsample in sample mode)
 * only between stage 4 of one batch and stage 2 of the next, when no
 * entry waits for its size: apply always runs before the next lookup, so
 * the table slots stage 2 leaves in bk_aux are valid in stage 4.
 *
 * Exactness: a table entry is what the store's DDT entry would be -- key
 * the full SHA-256, refcount the number of non-zero blocks with those
 * bytes, lsize and psize from the same codec and level (pack/codec.c;
 * psize estimated where the result says so) -- and zero blocks (short
 * tails included) are counted apart exactly as writer.c does -- a run of
 * FastCDC zero blocks as one, as the store's snapshot records count it.
 * So, with verify off, the figures equal dd_store_stat's for a new store
 * that holds the same images.
 */
#include "scan/scan.h"

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

const dd_pipe_ops dd_scan_sink_ops = {
	.po_lookup = dd_scan_lookup,
	.po_store = dd_scan_apply,
	.po_lost = dd_scan_lost,
};

