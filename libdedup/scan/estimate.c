/*
 * estimate.c -- the compressed size of a block estimated from another
 * cutter's compression of the same bytes.
 *
 * A scan of both chunkers cuts every byte twice.  Compressing each
 * cutter's distinct blocks (zstd per block, the scan's dominant cost)
 * then compresses the same bytes twice, for figures that hardly differ:
 * how well bytes compress depends on the bytes, little on where a block
 * boundary falls in them.  So only a source cutter (the fixed cutter of
 * the estimated one's block size, scan.h bz_src) compresses; each of
 * its blocks leaves a segment -- its image, offset, length and
 * compressed size (0 for a zero block) -- and a
 * block of an estimated cutter (FastCDC) is given the compressed size
 * of the source blocks it overlaps, each in proportion to the overlap:
 *
 *     est = sum over source blocks S overlapping B of
 *           psize(S) * |S and B| / lsize(S),   at most lsize(B).
 *
 * Incompressible bytes (stored raw, psize = lsize) estimate exactly.
 *
 * Coverage.  The pipeline moves the bytes past a batch's last cut of any
 * cutter on to the next batch, so a FastCDC block at the end of a batch
 * may reach past the last fixed block stored so far (by less than one
 * fixed block), and one at the start of a batch may begin in bytes whose
 * fixed blocks came with the batch before.  Segments are kept until
 * every estimated cutter has gone past them (dd_scan_est_trim), and a
 * part no segment covers yet takes the ratio of the nearest segment
 * before it in the same image (or, with none, of every segment so far).
 */
#include <string.h>

#include "common/alloc.h"
#include "scan/scan.h"

void dd_scan_est_init(dd_scan_est *e)
{
	memset(e, 0, sizeof(*e));
}

void dd_scan_est_fini(dd_scan_est *e)
{
	dd_free(e->es_seg);
	memset(e, 0, sizeof(*e));
}

int dd_scan_est_add(dd_scan_est *e, uint64_t image, uint64_t ioff,
		    uint32_t len, uint32_t psize)
{
	dd_scan_seg *sg;

	if (e->es_n == e->es_cap) {
		size_t cap = e->es_cap ? 2 * e->es_cap : 256;
		dd_scan_seg *n = dd_realloc(e->es_seg, cap * sizeof(*n));

		if (!n)
			return DD_ENOMEM;
		e->es_seg = n;
		e->es_cap = cap;
	}
	sg = &e->es_seg[e->es_n++];
	sg->sg_image = image;
	sg->sg_ioff = ioff;
	sg->sg_len = len;
	sg->sg_psize = psize;
	e->es_lsum += len;
	e->es_psum += psize;
	return 0;
}

/* The first segment that ends past (image, ioff): segments are in
 * (image, offset) order and do not overlap. */
static size_t dd_scan_est_find(const dd_scan_est *e, uint64_t image,
			       uint64_t ioff)
{
	size_t lo = 0, hi = e->es_n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const dd_scan_seg *sg = &e->es_seg[mid];

		if (sg->sg_image < image ||
		    (sg->sg_image == image && sg->sg_ioff + sg->sg_len <= ioff))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static double dd_scan_seg_ratio(const dd_scan_seg *sg)
{
	return sg->sg_len ? (double)sg->sg_psize / (double)sg->sg_len : 1.0;
}

uint32_t dd_scan_est_psize(const dd_scan_est *e, uint64_t image,
			   uint64_t ioff, uint32_t len)
{
	uint64_t end = ioff + len, covered = 0;
	const dd_scan_seg *near = NULL;
	size_t i = dd_scan_est_find(e, image, ioff);
	double sum = 0.0, rest;

	if (i > 0 && e->es_seg[i - 1].sg_image == image)
		near = &e->es_seg[i - 1];
	for (; i < e->es_n; i++) {
		const dd_scan_seg *sg = &e->es_seg[i];
		uint64_t a, b;

		if (sg->sg_image != image || sg->sg_ioff >= end)
			break;
		a = sg->sg_ioff > ioff ? sg->sg_ioff : ioff;
		b = sg->sg_ioff + sg->sg_len < end ? sg->sg_ioff + sg->sg_len
						   : end;
		covered += b - a;
		sum += (double)(b - a) * dd_scan_seg_ratio(sg);
		near = sg;
	}
	if (covered < len) {
		rest = near ? dd_scan_seg_ratio(near)
		     : e->es_lsum ? (double)e->es_psum / (double)e->es_lsum
				  : 1.0;
		sum += (double)(len - covered) * rest;
	}
	sum += 0.5;
	if (sum >= (double)len)
		return len;
	/* a block that is not all zeros is never stored in no bytes */
	return sum < 1.0 ? 1 : (uint32_t)sum;
}

void dd_scan_est_trim(dd_scan_est *e, uint64_t image, uint64_t ioff)
{
	size_t i = dd_scan_est_find(e, image, ioff);

	/* the segment before keeps the ratio of the nearest bytes */
	if (i > 0 && e->es_seg[i - 1].sg_image == image)
		i--;
	if (i == 0)
		return;
	memmove(e->es_seg, e->es_seg + i, (e->es_n - i) * sizeof(*e->es_seg));
	e->es_n -= i;
}
