/*
 * chunk.h -- cutting a byte stream into fixed-size blocks.  No I/O.
 *
 * A chunker collects bytes pushed in any sizes and hands out whole blocks
 * in order; the last block of an image may be short.  Zero blocks (all
 * bytes zero) are holes: never hashed, never stored (DESIGN.md).
 */
#ifndef DD_CHUNK_CHUNK_H
#define DD_CHUNK_CHUNK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* dd_is_zero(buf, len): a zero block is all zero bytes. */
#include "common/zero.h"

/* True for a power of two in [DD_BLOCK_SIZE_MIN, DD_BLOCK_SIZE_MAX]. */
bool dd_block_size_valid(uint64_t bs);

/* Number of blocks an image of `size` bytes has. */
static inline uint64_t dd_block_count(uint64_t size, uint32_t bs)
{
	return size / bs + (size % bs != 0);
}

#endif
