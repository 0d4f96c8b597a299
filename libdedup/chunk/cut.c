/*
 * cut.c -- cutters: where a byte stream's blocks end (chunk.h), and the
 * chunkers' rules (format/chunker.md §1).
 *
 * Two chunkers.  The fixed-size cutter cuts images and devices every
 * block-size bytes from their start, as the fixed formats assume
 * (format/store.md §4: block i is bytes [i * bs, (i + 1) * bs), the last
 * one short).  The content-defined cutter (fastcdc.c) cuts where the
 * bytes say, between a quarter and four times its average; both sit
 * behind the same dd_cut_fn.
 */
#include "dedup.h"
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
	*c = (dd_cutter){
		.cu_next = dd_cut_fixed,
		.cu_min = bs,
		.cu_max = bs,
		.cu_avg = bs,
	};
}

bool dd_chunker_valid(int chunker, uint64_t bs)
{
	switch (chunker) {
	case DD_CHUNKER_FIXED:
		return dd_block_size_valid(bs);
	case DD_CHUNKER_FASTCDC:
		return bs >= DD_FASTCDC_AVG_MIN && bs <= DD_FASTCDC_AVG_MAX &&
		       (bs & (bs - 1)) == 0;
	}
	return false;
}

uint32_t dd_chunker_max(int chunker, uint32_t bs)
{
	return chunker == DD_CHUNKER_FASTCDC ? 4 * bs : bs;
}

const char *dd_chunker_name(int chunker)
{
	switch (chunker) {
	case DD_CHUNKER_FIXED:
		return "fixed";
	case DD_CHUNKER_FASTCDC:
		return "fastcdc";
	}
	return "?";
}

void dd_cutter_init(dd_cutter *c, int chunker, uint32_t bs)
{
	if (chunker == DD_CHUNKER_FASTCDC)
		dd_cutter_fastcdc(c, bs);
	else
		dd_cutter_fixed(c, bs);
}
