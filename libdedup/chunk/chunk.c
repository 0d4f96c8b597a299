/*
 * chunk.c -- block rules: zero-block detection and block sizes (chunk.h).
 *
 * dd_is_zero runs on every block written (zero blocks become holes,
 * DESIGN.md), so it must approach memory bandwidth: bytewise up to an
 * 8-byte boundary, then 64 bytes per step ORed together (the compiler
 * vectorises this), then a bytewise tail.  Loads go through memcpy, which
 * keeps the code free of alignment and strict-aliasing assumptions while
 * compiling to plain loads.  Most non-zero blocks differ in their first
 * bytes, so checking a short prefix first makes them cheap.
 */
#include <string.h>

#include "dedup.h"
#include "chunk/chunk.h"

static inline uint64_t dd_load64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

bool dd_is_zero(const void *buf, size_t len)
{
	const unsigned char *p = buf;

	while (len && ((uintptr_t)p & 7)) {
		if (*p)
			return false;
		p++;
		len--;
	}
	if (len >= 8) {
		if (dd_load64(p))
			return false;
		p += 8;
		len -= 8;
	}
	while (len >= 64) {
		uint64_t acc = 0;

		for (int i = 0; i < 8; i++)
			acc |= dd_load64(p + 8 * i);
		if (acc)
			return false;
		p += 64;
		len -= 64;
	}
	while (len >= 8) {
		if (dd_load64(p))
			return false;
		p += 8;
		len -= 8;
	}
	while (len) {
		if (*p)
			return false;
		p++;
		len--;
	}
	return true;
}

bool dd_block_size_valid(uint64_t bs)
{
	return bs >= DD_BLOCK_SIZE_MIN && bs <= DD_BLOCK_SIZE_MAX &&
	       (bs & (bs - 1)) == 0;
}
