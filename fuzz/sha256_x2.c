/*
 * sha256_x2.c -- libFuzzer harness, differential: the two-lane SHA-NI
 * SHA-256 (libdedup/hash/sha256x2.c) against the portable implementation
 * and libcrypto.  Not a parser, but a block's hash is its identity: a
 * digest that differs on some length or content would make two blocks
 * share storage.
 *
 * Input: the first byte picks how the rest is split into the two lanes
 * (equal lengths, so the lanes overlap when the rest is short); any
 * difference aborts.  The same two lanes are then hashed with different
 * lengths (dd_sha256_x2v, for content-defined blocks): lane b cut short
 * by the second byte's count of bytes.  Last, a list of 9 to 40 messages
 * (the third byte's count) cut from the rest, each at its own start and
 * length (dd_sha256_xn: sixteen AVX-512 lanes where usable,
 * libdedup/hash/sha256x16.c, lanes ending at different blocks and the
 * list's end handed over to two SHA-NI lanes).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hash/hash.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t xa[DD_HASH_SIZE], xb[DD_HASH_SIZE], ra[DD_HASH_SIZE],
		rb[DD_HASH_SIZE], ea[DD_HASH_SIZE];
	const uint8_t *a, *b;
	size_t len;

	/* before the first hash: sixteen lanes wherever they pass their
	 * self-test, not only where they time faster (sha256x16.c) */
	static bool lanes_set;

	if (!lanes_set) {
		lanes_set = true;
		setenv("DEDUP_SHA256_X16", "1", 1);
	}
	if (size < 1)
		return 0;
	/* lane b starts `shift` bytes after lane a: both are len bytes */
	size_t shift = data[0] % (size < 64 ? size : 64);

	len = size - 1 - shift;
	a = data + 1;
	b = data + 1 + shift;
	dd_sha256_x2(a, b, len, xa, xb);
	dd_sha256_sw(a, len, ra);
	dd_sha256_sw(b, len, rb);
	dd_sha256(a, len, ea);
	if (memcmp(xa, ra, DD_HASH_SIZE) || memcmp(xb, rb, DD_HASH_SIZE) ||
	    memcmp(ea, ra, DD_HASH_SIZE))
		abort();
	if (size >= 2) {
		size_t lb = len - (data[1] < len ? data[1] : len);

		dd_sha256_x2v(a, len, b, lb, xa, xb);
		dd_sha256_sw(b, lb, rb);
		if (memcmp(xa, ra, DD_HASH_SIZE) || memcmp(xb, rb, DD_HASH_SIZE))
			abort();
		dd_sha256_x2v(b, lb, a, len, xb, xa);
		if (memcmp(xa, ra, DD_HASH_SIZE) || memcmp(xb, rb, DD_HASH_SIZE))
			abort();
	}
	if (size >= 3) {
		enum { MAXN = 40 };
		dd_hash_msg m[MAXN];
		uint8_t out[MAXN][DD_HASH_SIZE];
		size_t n = 9 + data[2] % (MAXN - 8), rest = size - 3;

		/* message i: from byte (i * 13) % (rest + 1) of the rest, as
		 * long as the byte there says, times 37, within the rest */
		for (size_t i = 0; i < n; i++) {
			size_t at = rest ? (i * 13) % (rest + 1) : 0;
			size_t want = at < rest ? 37u * data[3 + at] : 0;

			m[i] = (dd_hash_msg){ data + 3 + at,
					      want < rest - at ? want
							       : rest - at,
					      out[i] };
		}
		dd_sha256_xn(m, n);
		for (size_t i = 0; i < n; i++) {
			dd_sha256_sw(m[i].hm_p, m[i].hm_len, ra);
			if (memcmp(out[i], ra, DD_HASH_SIZE))
				abort();
		}
	}
	return 0;
}
