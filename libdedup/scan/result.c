/*
 * result.c -- a scan's figures, per block size, once every block is
 * counted: the tables' entries summed as dd_store_stat sums DDT entries
 * (through the runs' merge when a table spilled), and in sample mode the
 * estimates scaled up with their error bounds.
 */
#include <math.h>
#include <string.h>

#include "common/hist.h"
#include "scan/scan.h"

#define DD_SCAN_CONFIDENCE 0.99

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

int dd_scan_table_done(dd_scan_bsz *bz, dd_err *err)
{
	int rc = 0;

	memset(&bz->bz_res, 0, sizeof(bz->bz_res));
	if (bz->bz_spill.sp_nruns) {
		dd_scan_table_sort(&bz->bz_tab);
		rc = dd_scan_spill_run(&bz->bz_spill, err, &bz->bz_tab);
	} else {
		dd_scan_table_acc(&bz->bz_tab, &bz->bz_res);
	}
	dd_scan_table_fini(&bz->bz_tab);
	return rc;
}

/* Ratios and bounds from the counted figures. */
static void dd_scan_ratios(dd_scan_result *r, const dd_scan_bsz *bz)
{
	if (r->mode == DD_SCAN_SAMPLE && bz->bz_shift > 0) {
		uint64_t sb = r->unique_bytes, ss = r->stored_bytes;

		r->sample_shift = bz->bz_shift;
		dd_scan_scale(r, bz->bz_shift);
		dd_scan_bounds(r, sb, ss, bz->bz_max);
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

int dd_scan_result_one(dd_scan_bsz *bz, dd_err *err, size_t budget, int mode)
{
	dd_scan_result *r = &bz->bz_res;
	int rc;

	if (bz->bz_spill.sp_nruns) {
		rc = dd_scan_spill_merge(&bz->bz_spill, err, budget,
					 dd_scan_acc, r);
		if (rc)
			return rc;
	}
	r->version = DD_SCAN_RESULT_VERSION;
	r->block_size = bz->bz_bs;
	r->chunker = bz->bz_chunker;
	r->stored_estimated = bz->bz_src >= 0;
	r->key_fast = bz->bz_fastkey;
	r->mode = mode;
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

