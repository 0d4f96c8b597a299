/*
 * sha256_impl.h -- what the SHA-256 implementations of hash/ share: the
 * portable one (hash.c), the two-lane SHA-NI one (sha256x2.c) and the
 * sixteen-lane AVX-512 one (sha256x16.c).  Only hash/ includes it.
 */
#ifndef DD_HASH_SHA256_IMPL_H
#define DD_HASH_SHA256_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash/hash.h"

/* FIPS 180-4 §4.2.2 round constants and §5.3.3 initial hash value. */
extern const uint32_t dd_sha256_k[64];
extern const uint32_t dd_sha256_h0[8];

/* The last len % 64 bytes of a len-byte message at p, with SHA-256's
 * padding and bit length, into tail: returns the blocks written, one, or
 * two when fewer than 9 bytes of the first are free. */
size_t dd_sha256_pad(const uint8_t *p, size_t len, uint8_t tail[128]);

/* The portable compression function: one 64-byte block into state s
 * (a..h, host order). */
void dd_sha256_sw_block(uint32_t s[8], const uint8_t *p);

/* One message as 64-byte blocks: its whole blocks in place, then its
 * padded tail (one or two blocks). */
typedef struct dd_sha256_blocks {
	const uint8_t *sb_p;
	size_t sb_full;           /* whole blocks at sb_p */
	size_t sb_total;          /* and the tail's */
	uint8_t sb_tail[128];
} dd_sha256_blocks;

static inline void dd_sha256_blocks_init(dd_sha256_blocks *b, const void *p,
					 size_t len)
{
	b->sb_p = p;
	b->sb_full = len / 64;
	b->sb_total = b->sb_full + dd_sha256_pad(p, len, b->sb_tail);
}

/* Block j of b, and how many blocks from it on lie one after the other. */
static inline const uint8_t *dd_sha256_blocks_at(const dd_sha256_blocks *b,
						 size_t j, size_t *run)
{
	if (j < b->sb_full) {
		*run = b->sb_full - j;
		return b->sb_p + 64 * j;
	}
	*run = b->sb_total - j;
	return b->sb_tail + 64 * (j - b->sb_full);
}

/* A message part way through: its state (a..h, host order) after its
 * first sp_at blocks.  The sixteen-lane code hands its last few messages
 * over as these, when too few are left to keep its lanes busy. */
typedef struct dd_sha256_part {
	uint32_t sp_st[8];
	dd_sha256_blocks sp_b;
	size_t sp_at;
	uint8_t *sp_out;
} dd_sha256_part;

/* Finishes each of n parts and writes its digest: on two SHA-NI lanes
 * where dd_sha256_x2_ok(), else with the portable code. */
void dd_sha256_parts_finish(dd_sha256_part *parts, size_t n);

/* The digest (big-endian) of final state s. */
static inline void dd_sha256_state_out(const uint32_t s[8], uint8_t out[32])
{
	for (int i = 0; i < 8; i++) {
		out[4 * i] = (uint8_t)(s[i] >> 24);
		out[4 * i + 1] = (uint8_t)(s[i] >> 16);
		out[4 * i + 2] = (uint8_t)(s[i] >> 8);
		out[4 * i + 3] = (uint8_t)s[i];
	}
}

/* Sixteen lanes (sha256x16.c): are they usable here (AVX-512F and BW,
 * and a passed self-test)?  dd_sha256_x16_list hashes a list of at least
 * DD_SHA256_X16_MIN messages with them. */
#define DD_SHA256_X16_MIN 9
bool dd_sha256_x16_ok(void);
void dd_sha256_x16_list(const dd_hash_msg *m, size_t n);

#endif
