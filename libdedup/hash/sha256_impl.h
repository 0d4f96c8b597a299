/*
 * sha256_impl.h -- what the two SHA-256 implementations of hash/ share:
 * the portable one (hash.c) and the two-lane SHA-NI one (sha256x2.c).
 * Only hash/ includes it.
 */
#ifndef DD_HASH_SHA256_IMPL_H
#define DD_HASH_SHA256_IMPL_H

#include <stddef.h>
#include <stdint.h>

/* FIPS 180-4 §4.2.2 round constants and §5.3.3 initial hash value. */
extern const uint32_t dd_sha256_k[64];
extern const uint32_t dd_sha256_h0[8];

/* The last len % 64 bytes of a len-byte message at p, with SHA-256's
 * padding and bit length, into tail: returns the blocks written, one, or
 * two when fewer than 9 bytes of the first are free. */
size_t dd_sha256_pad(const uint8_t *p, size_t len, uint8_t tail[128]);

#endif
