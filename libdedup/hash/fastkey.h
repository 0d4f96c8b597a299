/*
 * fastkey.h -- a fast 128-bit key of a block's bytes, for counting only.
 *
 * XXH3-128 (xxHash 0.8, its header alone: XXH_INLINE_ALL, nothing linked)
 * runs at 6 GB/s per core with SSE2 and 13 with AVX2 here, where SHA-256
 * with the SHA extensions does 1.7.  It is not collision-resistant: data
 * made to collide can be made.  So it never keys a store, a stream or
 * anything that decides which bytes a reader gets; a scan uses it where
 * a key only counts blocks (scan/setup.c, dd_scan_key_choose), and a
 * collision there makes a figure wrong, never a byte.
 *
 * The key fills a DD_HASH_SIZE buffer: the 128 bits big-endian
 * (XXH128_canonical), then 16 zero bytes, so every table keyed by
 * SHA-256 holds it unchanged (its bucket from bytes 8..15, a sample's
 * leading bits from byte 0).
 */
#ifndef DD_HASH_FASTKEY_H
#define DD_HASH_FASTKEY_H

#include <stddef.h>
#include <stdint.h>

#include "hash/hash.h"

void dd_fastkey(const void *buf, size_t len, uint8_t out[DD_HASH_SIZE]);

/* The variants dd_fastkey chooses from at its first call: AVX2 where the
 * CPU has it (fastkey_avx2.c, compiled with -mavx2), SSE2 otherwise. */
void dd_fastkey_sse2(const void *buf, size_t len, uint8_t out[DD_HASH_SIZE]);
void dd_fastkey_avx2(const void *buf, size_t len, uint8_t out[DD_HASH_SIZE]);

#endif
