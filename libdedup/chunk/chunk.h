/*
 * chunk.h -- blocks: size rules, the length of an image's last block,
 * zero blocks (all bytes zero: holes, never hashed, never stored,
 * DESIGN.md) and the content digest over an image's block hashes.
 */
#ifndef DD_CHUNK_CHUNK_H
#define DD_CHUNK_CHUNK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "hash/hash.h"

/* True when len bytes at buf are all zero.  Word-at-a-time. */
bool dd_is_zero(const void *buf, size_t len);

/* True for a power of two in [DD_BLOCK_SIZE_MIN, DD_BLOCK_SIZE_MAX]. */
bool dd_block_size_valid(uint64_t bs);

/* Number of blocks an image of `size` bytes has. */
static inline uint64_t dd_block_count(uint64_t size, uint32_t bs)
{
	return size / bs + (size % bs != 0);
}

/* The logical size of block idx (< dd_block_count) of an image of `size`
 * bytes: bs, except for a short last block. */
static inline uint32_t dd_block_lsize(uint64_t size, uint32_t bs, uint64_t idx)
{
	uint64_t off = idx * bs;

	return size - off >= bs ? bs : (uint32_t)(size - off);
}

/* ---- the content digest (digest.c; format/store.md §6) --------------------*/

/* SHA-256 over each block's hash in order (32 zero bytes for a hole),
 * then the image size (le64) and block size (le32). */
typedef struct dd_digest dd_digest;

int dd_digest_new(dd_digest **out, dd_err *err);
void dd_digest_block(dd_digest *d, const uint8_t *hash_or_null);
/* count holes at once */
void dd_digest_zeros(dd_digest *d, uint64_t count);
/* Writes the digest; d is then ready for another image. */
void dd_digest_final(dd_digest *d, uint64_t size, uint32_t block_size,
		     uint8_t out[DD_HASH_SIZE]);
void dd_digest_free(dd_digest *d);

#endif
