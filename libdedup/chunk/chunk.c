/*
 * chunk.c -- block-level helpers: block-size rules.  Zero-block detection
 * is dd_is_zero (common/zero.c, re-exported by chunk.h).
 */
#include "dedup.h"
#include "chunk/chunk.h"

bool dd_block_size_valid(uint64_t bs)
{
	return bs >= DD_BLOCK_SIZE_MIN && bs <= DD_BLOCK_SIZE_MAX &&
	       (bs & (bs - 1)) == 0;
}
