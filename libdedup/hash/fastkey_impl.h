/*
 * fastkey_impl.h -- the body of one dd_fastkey variant; included once by
 * fastkey.c (SSE2, the x86-64 baseline) and once by fastkey_avx2.c
 * (compiled with -mavx2): xxHash picks its vector code from the compiler's
 * target, and XXH_INLINE_ALL keeps each copy static to its file.
 */
#define XXH_INLINE_ALL
#include <string.h>
#include <xxhash.h>

#include "hash/fastkey.h"

void DD_FASTKEY_NAME(const void *buf, size_t len, uint8_t out[DD_HASH_SIZE])
{
	XXH128_canonical_t c;

	XXH128_canonicalFromHash(&c, XXH3_128bits(buf, len));
	memcpy(out, c.digest, sizeof(c.digest));
	memset(out + sizeof(c.digest), 0, DD_HASH_SIZE - sizeof(c.digest));
}
