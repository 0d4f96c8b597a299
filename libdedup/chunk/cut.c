/*
 * cut.c -- cutters: where a byte stream's blocks end (chunk.h).
 *
 * Only the fixed-size cutter exists: images and devices are cut every
 * block-size bytes from their start, as the store's formats assume
 * (format/store.md §4: block i is bytes [i * bs, (i + 1) * bs), the last
 * one short).  A content-defined cutter goes here too, behind the same
 * dd_cut_fn.
 */
#include "chunk/chunk.h"

static size_t dd_cut_fixed(const dd_cutter *c, const uint8_t *data,
			   size_t len, bool final)
{
	(void)data;
	if (len >= c->cu_max)
		return c->cu_max;
	return final ? len : 0;
}

void dd_cutter_fixed(dd_cutter *c, uint32_t bs)
{
	c->cu_next = dd_cut_fixed;
	c->cu_min = bs;
	c->cu_max = bs;
	c->cu_reads = false;
}
