/*
 * hist.h -- the reference-count histogram of dd_store_stat (store/stat.c)
 * and of a scan's results (scan/scan.c), which must count alike: a scan's
 * figures are the stat of a store holding the same images.
 */
#ifndef DD_COMMON_HIST_H
#define DD_COMMON_HIST_H

#include <stdint.h>

#include "dedup.h"

/* One distinct block of lsize logical and psize stored bytes, referenced
 * refcnt (> 0) times, into its bucket: refcounts in [2^i, 2^(i+1)), the
 * last bucket open-ended (dedup.h DD_HIST_BUCKETS). */
static inline void dd_hist_add(dd_hist_row hist[DD_HIST_BUCKETS],
			       uint64_t refcnt, uint64_t lsize, uint64_t psize)
{
	unsigned b = 0;
	dd_hist_row *row;

	for (uint64_t r = refcnt; r >>= 1;)
		b++;
	row = &hist[b < DD_HIST_BUCKETS ? b : DD_HIST_BUCKETS - 1];
	row->blocks++;
	row->lsize += lsize;
	row->psize += psize;
	row->ref_blocks += refcnt;
	row->ref_lsize += refcnt * lsize;
	row->ref_psize += refcnt * psize;
}

#endif
