/*
 * test_chunk.c -- chunk/: zero-block detection on every length, alignment
 * and position of a single non-zero byte; block-size rules; the content
 * digest; the block pipeline (pipeline.h): cut points, zero blocks and
 * hashes -- checked against SHA-256 from libcrypto -- of buffers, files
 * and pipes, short last blocks, several block sizes at once, a cutter of
 * varying lengths, files that shrink or fail to read, and the order in
 * which a sink sees its batches.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "dedup.h"
#include "chunk/chunk.h"
#include "chunk/pipeline.h"
#include "common/faults.h"
#include "hash/hash.h"

static void test_is_zero_exhaustive(void **state)
{
	/* Slack on both sides so misaligned starts stay in bounds. */
	static uint8_t buf[16 + 200 + 16];

	(void)state;
	memset(buf, 0, sizeof(buf));
	for (size_t start = 0; start < 16; start++) {
		uint8_t *p = buf + start;

		for (size_t len = 0; len <= 200; len++) {
			assert_true(dd_is_zero(p, len));
			for (size_t pos = 0; pos < len; pos++) {
				for (int v = 1; v < 256; v <<= 1) {
					p[pos] = (uint8_t)v;
					assert_false(dd_is_zero(p, len));
					p[pos] = 0;
				}
				p[pos] = 0xff;
				assert_false(dd_is_zero(p, len));
				p[pos] = 0;
			}
			/* Bytes just outside the range are not looked at. */
			if (start > 0)
				p[-1] = 1;
			p[len] = 1;
			assert_true(dd_is_zero(p, len));
			if (start > 0)
				p[-1] = 0;
			p[len] = 0;
		}
	}
}

static void test_is_zero_blocks(void **state)
{
	size_t bs = DD_BLOCK_SIZE_MAX;
	uint8_t *b = calloc(1, bs + 1);

	(void)state;
	assert_non_null(b);
	assert_true(dd_is_zero(b, bs));
	assert_true(dd_is_zero(b + 1, bs));
	assert_true(dd_is_zero(NULL, 0));
	size_t where[] = {0, 1, 4095, 4096, 65536, bs - 64, bs - 1};

	for (size_t i = 0; i < sizeof(where) / sizeof(where[0]); i++) {
		b[where[i]] = 0x80;
		assert_false(dd_is_zero(b, bs));
		b[where[i]] = 0;
	}
	assert_true(dd_is_zero(b, bs));
	free(b);
}

static void test_block_size(void **state)
{
	(void)state;
	assert_true(dd_block_size_valid(4096));
	assert_true(dd_block_size_valid(8192));
	assert_true(dd_block_size_valid(128 * 1024));
	assert_true(dd_block_size_valid(1024 * 1024));
	assert_true(dd_block_size_valid(DD_BLOCK_SIZE_DEFAULT));
	assert_false(dd_block_size_valid(0));
	assert_false(dd_block_size_valid(1));
	assert_false(dd_block_size_valid(2048));
	assert_false(dd_block_size_valid(4095));
	assert_false(dd_block_size_valid(4097));
	assert_false(dd_block_size_valid(12288));
	assert_false(dd_block_size_valid(2 * 1024 * 1024));
	assert_false(dd_block_size_valid(UINT64_MAX));
	assert_false(dd_block_size_valid((uint64_t)1 << 63));
	assert_false(dd_block_size_valid(((uint64_t)1 << 32) + 4096));
	/* Exactly the 9 powers of two from 4 KiB to 1 MiB. */
	int count = 0;

	for (int s = 0; s < 64; s++)
		count += dd_block_size_valid((uint64_t)1 << s);
	assert_int_equal(count, 9);

	assert_int_equal(dd_block_count(0, 4096), 0);
	assert_int_equal(dd_block_count(1, 4096), 1);
	assert_int_equal(dd_block_count(4096, 4096), 1);
	assert_int_equal(dd_block_count(4097, 4096), 2);
	assert_int_equal(dd_block_count(UINT64_MAX, 1u << 20),
			 (UINT64_MAX >> 20) + 1);
}

static void test_block_lsize(void **state)
{
	(void)state;
	assert_int_equal(dd_block_lsize(8192, 4096, 0), 4096);
	assert_int_equal(dd_block_lsize(8192, 4096, 1), 4096);
	assert_int_equal(dd_block_lsize(8193, 4096, 2), 1);
	assert_int_equal(dd_block_lsize(100, 4096, 0), 100);
	assert_int_equal(dd_block_lsize(((uint64_t)1 << 40) + 7, 1u << 20,
					(uint64_t)1 << 20), 7);
}

/* ---- helpers --------------------------------------------------------------*/

static void ref_sha256(const void *p, size_t n, uint8_t out[32])
{
	unsigned len = 0;

	assert_int_equal(EVP_Digest(p, n, out, &len, EVP_sha256(), NULL), 1);
	assert_int_equal(len, 32);
}

static uint64_t rng_state = 1;

static uint8_t rng_byte(void)
{
	rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
	return (uint8_t)(rng_state >> 56);
}

/* An image of n bytes: random, with the blocks of `bs` listed in zeros
 * (as block indices, -1 ended) all zero. */
static uint8_t *make_image(size_t n, uint32_t bs, const long *zeros)
{
	uint8_t *p = malloc(n ? n : 1);

	assert_non_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = rng_byte() | 1;
	for (; zeros && *zeros >= 0; zeros++) {
		size_t off = (size_t)*zeros * bs;

		memset(p + off, 0, n - off < bs ? n - off : bs);
	}
	return p;
}

/* The image of test_digest and test_digest_v2: a block of hash 0x11..,
 * a hole, a block of hash 0x22..; then the digest of size bytes. */
static void digest_three(dd_digest *d, uint64_t size, uint8_t out[32])
{
	uint8_t h1[32], h2[32];

	memset(h1, 0x11, 32);
	memset(h2, 0x22, 32);
	dd_digest_block(d, h1, 0);   /* fixed: lengths come from bs */
	dd_digest_zeros(d, 1);
	dd_digest_block(d, h2, 4096);
	dd_digest_final(d, size, 4096, out);
}

/* The content digest: SHA-256 over the block hashes, 32 zero bytes for a
 * hole, then size and block size, little-endian (format/store.md §6). */
static void test_digest(void **state)
{
	uint8_t out[32], want[32], msg[3 * 32 + 12] = {0};
	dd_digest *d;

	(void)state;
	assert_int_equal(dd_digest_new(&d, NULL, DD_CHUNKER_FIXED, DD_DIGEST_V1,
				       4096), 0);
	for (int round = 0; round < 2; round++) { /* final resets it */
		digest_three(d, 0x0102030405, out);
		memset(msg, 0x11, 32);
		memset(msg + 64, 0x22, 32);
		msg[96] = 0x05, msg[97] = 0x04, msg[98] = 0x03, msg[99] = 0x02;
		msg[100] = 0x01;
		msg[104 + 1] = 0x10;  /* 4096 = 0x1000 */
		ref_sha256(msg, sizeof(msg), want);
		assert_memory_equal(out, want, 32);
	}
	/* 300 holes at once, as 300 single ones */
	for (int i = 0; i < 300; i++)
		dd_digest_block(d, NULL, 0);
	dd_digest_final(d, 300 * 4096, 4096, want);
	dd_digest_zeros(d, 300);
	dd_digest_final(d, 300 * 4096, 4096, out);
	assert_memory_equal(out, want, 32);
	dd_digest_free(d);
}

/* Hex of 32 bytes, for golden values. */
static void hex32(const uint8_t h[32], char out[65])
{
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", h[i]);
}

/* Version 2 of fixed blocks (format/store.md §6): each block's hash and
 * length, a run of holes once with its bytes, then size, block size and
 * chunker 0; the last block's length is what the size leaves of it. */
static void test_digest_v2(void **state)
{
	uint8_t out[32], want[32], msg[3 * 40 + 13] = {0};
	uint64_t size = 2 * 4096 + 100, blocks, zero;
	dd_digest *d;

	(void)state;
	assert_int_equal(dd_digest_new(&d, NULL, DD_CHUNKER_FIXED, DD_DIGEST_V2,
				       4096), 0);
	for (int round = 0; round < 2; round++) { /* final resets it */
		digest_three(d, size, out);
		memset(msg, 0x11, 32);
		msg[32 + 1] = 0x10;                  /* 4096 */
		msg[72 + 1] = 0x10;                  /* the hole: 4096 */
		memset(msg + 80, 0x22, 32);
		msg[112] = 100;                      /* the short last block */
		msg[120] = 100, msg[121] = 0x20;     /* size 8292 = 0x2064 */
		msg[128 + 1] = 0x10;                 /* block size */
		msg[132] = 0;                        /* chunker fixed */
		ref_sha256(msg, sizeof(msg), want);
		assert_memory_equal(out, want, 32);
	}
	/* the counts: every fixed block, the hole one of them */
	dd_digest_zeros(d, 1);
	dd_digest_block(d, NULL, 0);
	dd_digest_counts(d, &blocks, &zero);
	assert_int_equal(blocks, 2);
	assert_int_equal(zero, 2);
	dd_digest_free(d);
}

/* A run of holes costs nothing per block in version 2: 2^38 of them (a
 * 2^50-byte image at 4 KiB) at once, a golden value; the same run fed in
 * pieces, and as single holes, is one entry too; a hole at the end is
 * as short as the size makes it. */
static void test_digest_v2_runs(void **state)
{
	uint8_t a[32], b[32], h[32];
	char hex[65];
	dd_digest *d;

	(void)state;
	memset(h, 0x33, 32);
	assert_int_equal(dd_digest_new(&d, NULL, DD_CHUNKER_FIXED, DD_DIGEST_V2,
				       4096), 0);
	dd_digest_zeros(d, (uint64_t)1 << 38);
	dd_digest_final(d, (uint64_t)1 << 50, 4096, a);
	hex32(a, hex);
	/* SHA-256(32 zero bytes, le64 2^50, le64 2^50, le32 4096, 0) */
	assert_string_equal(hex, "86114354f9e495a3a21079cbada3e828"
				 "c68df1184fe8052259e7581c174412ef");
	dd_digest_zeros(d, 1);
	dd_digest_zeros(d, ((uint64_t)1 << 38) - 2);
	dd_digest_block(d, NULL, 0);
	dd_digest_final(d, (uint64_t)1 << 50, 4096, b);
	assert_memory_equal(a, b, 32);
	/* block, 3 holes the last of 1 byte; then as one run of 3 */
	dd_digest_block(d, h, 0);
	for (int i = 0; i < 3; i++)
		dd_digest_block(d, NULL, 0);
	dd_digest_final(d, 3 * 4096 + 1, 4096, a);
	dd_digest_block(d, h, 0);
	dd_digest_zeros(d, 3);
	dd_digest_final(d, 3 * 4096 + 1, 4096, b);
	assert_memory_equal(a, b, 32);
	/* ... differs from the image one byte longer, and from version 1 */
	dd_digest_block(d, h, 0);
	dd_digest_zeros(d, 3);
	dd_digest_final(d, 3 * 4096 + 2, 4096, b);
	assert_memory_not_equal(a, b, 32);
	dd_digest_free(d);
	assert_int_equal(dd_digest_new(&d, NULL, DD_CHUNKER_FIXED, DD_DIGEST_V1,
				       4096), 0);
	dd_digest_block(d, h, 0);
	dd_digest_zeros(d, 3);
	dd_digest_final(d, 3 * 4096 + 1, 4096, b);
	assert_memory_not_equal(a, b, 32);
	dd_digest_free(d);
	/* the empty image: no entry, then size, block size and chunker */
	assert_int_equal(dd_digest_new(&d, NULL, DD_CHUNKER_FIXED, DD_DIGEST_V2,
				       4096), 0);
	dd_digest_final(d, 0, 4096, a);
	{
		uint8_t tail[13] = {0};

		tail[9] = 0x10;
		ref_sha256(tail, sizeof(tail), b);
	}
	assert_memory_equal(a, b, 32);
	dd_digest_free(d);
}

/* ---- the FastCDC cutter (format/chunker.md) --------------------------------*/

/* §2: G[i] is the first 8 bytes, little-endian, of SHA-256("libdedup
 * fastcdc gear" || i); the table's own SHA-256 is the one the format
 * names. */
static void test_fastcdc_gear(void **state)
{
	static const char want_hex[] =
		"784ea0124abc094c84ddca49c029c83dad516d971bd04d0860049813102b2c72";
	const uint64_t *g = dd_fastcdc_gear();
	uint8_t msg[22], h[32], all[256 * 8];
	char hex[65];

	(void)state;
	memcpy(msg, "libdedup fastcdc gear", 21);
	for (int i = 0; i < 256; i++) {
		uint64_t v = 0;

		msg[21] = (uint8_t)i;
		ref_sha256(msg, sizeof(msg), h);
		for (int b = 7; b >= 0; b--)
			v = v << 8 | h[b];
		assert_true(g[i] == v);
		for (int b = 0; b < 8; b++)
			all[8 * i + b] = (uint8_t)(g[i] >> (8 * b));
	}
	ref_sha256(all, sizeof(all), h);
	dd_hash_hex(h, hex);
	assert_string_equal(hex, want_hex);
	/* §5: a run of zeros matches no mask: bit 62 of -G[0] is set */
	assert_true(((0 - g[0]) >> 62) & 1);
}

/* The cut rule of §3, one byte a step, as the format writes it: the
 * reference the two-bytes cutter must agree with. */
static size_t ref_fastcdc(uint32_t avg, const uint8_t *p, size_t len,
			  bool final)
{
	const uint64_t *g = dd_fastcdc_gear();
	size_t min = avg / 4, max = 4 * (size_t)avg;
	unsigned bits = 0;
	uint64_t ms, ml, h = 0;

	while ((1u << (bits + 1)) <= avg)
		bits++;
	ms = (((uint64_t)1 << (bits + 2)) - 1) << (63 - (bits + 2));
	ml = (((uint64_t)1 << (bits - 2)) - 1) << (63 - (bits - 2));
	for (size_t l = min; l <= len && l < max; l++) {
		/* the 64 bytes ending at byte l - 1 */
		h = 0;
		for (size_t j = l - 64; j < l; j++)
			h = (h << 1) + g[p[j]];
		if (!(h & (l < avg ? ms : ml)))
			return l;
	}
	if (len >= max)
		return max;
	return final ? len : 0;
}

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* The test vector of §6: SHA-256("libdedup fastcdc test" || le64 j) for
 * j = 0, 1, ..., cut to n bytes, with n/10 zeros from 3n/8 if asked. */
static uint8_t *fastcdc_vector(size_t n, bool zeros)
{
	uint8_t *p = malloc(n + 32), msg[29];

	assert_non_null(p);
	memcpy(msg, "libdedup fastcdc test", 21);
	for (uint64_t j = 0; 32 * j < n; j++) {
		for (int b = 0; b < 8; b++)
			msg[21 + b] = (uint8_t)(j >> (8 * b));
		ref_sha256(msg, sizeof(msg), p + 32 * j);
	}
	if (zeros)
		memset(p + n / 8 * 3, 0, n / 10);
	return p;
}

/* Cuts p[0..n) to its end: the lengths into out (room for max), their
 * count returned. */
static size_t cut_all(const dd_cutter *c, const uint8_t *p, size_t n,
		      uint32_t *out, size_t max)
{
	size_t k = 0;

	for (size_t off = 0; off < n; k++) {
		size_t l = c->cu_next(c, p + off, n - off, true);

		assert_true(l >= 1 && l <= c->cu_max && k < max);
		out[k] = (uint32_t)l;
		off += l;
	}
	return k;
}

/* Golden cut points (§6): the gear table or the cut rule never changes
 * silently.  The figures are also those of a Python transcription of the
 * format's rule, byte by byte. */
static void test_fastcdc_golden(void **state)
{
	static const uint32_t want128k[] = {
		107498, 133582, 158428, 250414, 46450, 131294, 133177,
		136597, 108115, 165841, 141488, 524288, 126789, 49053,
		159652, 186890, 145201, 82587, 132598, 149702, 161914,
		192086, 132886, 159254, 146514, 222198, 109808,
	};
	static const struct {
		uint32_t avg;
		size_t n;
		bool zeros;
		size_t count;
		const char *digest;   /* SHA-256 of the lengths, le32 each */
	} vec[] = {
		{4096, 1 << 20, true, 208, "2295384481267e48380165e75653096a"
					   "e6d3ad43cfcfaddb75df9a8e5b6eac59"},
		{16384, 4 << 20, false, 233, "2f860c939fbbc0160a0d009e4f29fc66"
					     "72bb9d22abd534e350f41cd36b64d6f1"},
		{131072, 4 << 20, true, 27, "00943e67c2cac18e432a8bf06a68cd1e"
					    "8cfa833dc488180591ca68a07022689a"},
	};

	(void)state;
	for (size_t v = 0; v < sizeof(vec) / sizeof(vec[0]); v++) {
		uint8_t *p = fastcdc_vector(vec[v].n, vec[v].zeros), h[32];
		uint32_t *len = malloc(vec[v].n / 1024 * sizeof(*len));
		uint8_t *le = malloc(vec[v].n / 1024 * 4);
		char hex[65];
		dd_cutter c;
		size_t k;

		assert_non_null(len);
		assert_non_null(le);
		dd_cutter_fastcdc(&c, vec[v].avg);
		k = cut_all(&c, p, vec[v].n, len, vec[v].n / 1024);
		assert_int_equal(k, vec[v].count);
		for (size_t i = 0; i < k; i++)
			for (int b = 0; b < 4; b++)
				le[4 * i + b] = (uint8_t)(len[i] >> (8 * b));
		ref_sha256(le, 4 * k, h);
		dd_hash_hex(h, hex);
		assert_string_equal(hex, vec[v].digest);
		if (vec[v].avg == 131072)
			assert_memory_equal(len, want128k, sizeof(want128k));
		free(le);
		free(len);
		free(p);
	}
}

/* The two-bytes cutter against the byte-at-a-time reference, on every
 * average, for prefixes of every parity and both ends of the min/avg/
 * max ranges, final or not. */
static void test_fastcdc_reference(void **state)
{
	const size_t n = 1 << 20;
	uint8_t *p = malloc(n);
	uint64_t seed = 0x9e3779b97f4a7c15ull;

	(void)state;
	assert_non_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(xorshift(&seed) >> 32);
	/* long low-entropy stretches: cut points at min, avg - 1, avg */
	memset(p + 100000, 0x41, 30000);
	for (size_t i = 200000; i < 260000; i++)
		p[i] = (uint8_t)(i % 3);
	for (uint32_t avg = DD_FASTCDC_AVG_MIN; avg <= DD_FASTCDC_AVG_MAX;
	     avg *= 2) {
		dd_cutter c;
		size_t off = 0, tries = 0;

		dd_cutter_fastcdc(&c, avg);
		assert_int_equal(c.cu_min, avg / 4);
		assert_int_equal(c.cu_max, 4 * avg);
		assert_true(c.cu_reads);
		while (off < n && tries < 64) {
			size_t left = n - off;
			size_t lens[] = {1, avg / 4 - 1, avg / 4, avg / 4 + 1,
					 avg - 1, avg, avg + 1, 4 * avg - 1,
					 4 * avg, 4 * avg + 1, left};

			for (size_t j = 0; j < sizeof(lens) / sizeof(lens[0]);
			     j++) {
				size_t l = lens[j] < left ? lens[j] : left;

				for (int fin = 0; fin < 2; fin++)
					assert_int_equal(
						c.cu_next(&c, p + off, l, fin),
						ref_fastcdc(avg, p + off, l, fin));
			}
			off += c.cu_next(&c, p + off, left, true);
			tries++;
		}
	}
	free(p);
}

/* What the format promises of the lengths: min to max, an image's last
 * block shorter; the mean near 1.13 times the average on random bytes;
 * zeros cut at max; an insertion moves only the blocks around it. */
static void test_fastcdc_props(void **state)
{
	const size_t n = 16 << 20, ins = 1000, at = 3 << 20;
	uint8_t *p = malloc(n + ins);
	uint32_t *a = malloc(n / 1024 * 4), *b = malloc(n / 1024 * 4);
	uint64_t seed = 42;
	dd_cutter c;
	size_t na, nb, pa, pb, ia, ib, same = 0;

	(void)state;
	assert_true(p && a && b);
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(xorshift(&seed) >> 24);
	dd_cutter_fastcdc(&c, 65536);
	na = cut_all(&c, p, n, a, n / 1024);
	for (size_t i = 0; i + 1 < na; i++)
		assert_true(a[i] >= 16384 && a[i] <= 262144);
	assert_true((double)n / (double)na > 1.05 * 65536 &&
		    (double)n / (double)na < 1.25 * 65536);
	/* zeros: max-long blocks once a block starts inside them */
	memset(p + n - 3 * 262144, 0, 3 * 262144);
	nb = cut_all(&c, p, n, b, n / 1024);
	for (size_t i = pb = 0; i < nb; pb += b[i++])
		if (pb >= n - 3 * 262144 && i + 1 < nb) {
			assert_int_equal(b[i], 262144);
			same++;
		}
	assert_true(same >= 1);
	same = 0;
	/* 1000 bytes inserted at 3 MiB: the cut points after the next few
	 * blocks are the same bytes, 1000 further on */
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(xorshift(&seed) >> 24);
	na = cut_all(&c, p, n, a, n / 1024);
	memmove(p + at + ins, p + at, n - at);
	for (size_t i = 0; i < ins; i++)
		p[at + i] = (uint8_t)(xorshift(&seed) >> 24);
	nb = cut_all(&c, p, n + ins, b, n / 1024);
	/* cut positions past at + 2 max: each of a's, 1000 bytes on in b */
	for (ia = ib = pa = pb = 0; ia < na && ib < nb;) {
		if (pa + ins == pb) {
			if (pa >= at + 2 * 262144)
				same++;
			pa += a[ia++];
			pb += b[ib++];
		} else if (pa + ins < pb) {
			if (pa >= at + 2 * 262144)
				fail_msg("cut point %zu lost", pa);
			pa += a[ia++];
		} else {
			pb += b[ib++];
		}
	}
	assert_true(same > 150);
	free(a);
	free(b);
	free(p);
}

/* ---- a sink that records what it is handed --------------------------------*/

typedef struct rec_blk {
	size_t image;
	uint64_t idx, ioff;
	uint32_t len;
	uint8_t cut, kind;
	bool nodata;
	uint8_t hash[32];
	uint8_t *bytes;           /* copy of the batch's bytes, unless nodata */
} rec_blk;

typedef struct sink {
	dd_err err;
	rec_blk *blk;
	size_t n, cap;
	size_t image;             /* images so far, as the caller counts */
	uint64_t last_idx[DD_PIPE_MAX_CUT];
	int lookups, stores, works;
	unsigned batches_seen;    /* pb_id sequence, to check the ring order */
	int order_bad;
	uint64_t lost;
	int lost_calls;
	unsigned keep_every;      /* po_keep: keep every n-th block */
	bool mark_all;            /* list every data block for stage 3 */
	uint64_t stored_upto;     /* blocks stored so far */
	uint64_t looked_upto;
	dd_pipe *pipe;
} sink;

static int sink_lookup(void *ctx, dd_pbatch *b)
{
	sink *k = ctx;

	k->lookups++;
	if (b->pb_id != k->batches_seen % DD_PIPE_RING)
		k->order_bad++;
	k->batches_seen++;
	for (size_t i = 0; i < b->pb_nblk; i++) {
		const dd_blk *bk = &b->pb_blk[i];
		rec_blk *r;

		if (k->n == k->cap) {
			k->cap = k->cap ? 2 * k->cap : 256;
			k->blk = realloc(k->blk, k->cap * sizeof(*k->blk));
			assert_non_null(k->blk);
		}
		r = &k->blk[k->n++];
		memset(r, 0, sizeof(*r));
		r->idx = bk->bk_idx;
		r->ioff = bk->bk_ioff;
		r->len = bk->bk_len;
		r->cut = bk->bk_cut;
		r->kind = bk->bk_kind;
		r->nodata = bk->bk_nodata;
		memcpy(r->hash, bk->bk_hash, 32);
		if (!bk->bk_nodata) {
			r->bytes = malloc(bk->bk_len);
			assert_non_null(r->bytes);
			memcpy(r->bytes, b->pb_data + bk->bk_off, bk->bk_len);
		}
		if (k->mark_all && bk->bk_kind == DD_BLK_DATA)
			dd_pipe_mark(b, i);
	}
	k->looked_upto += b->pb_nblk;
	return 0;
}

/* Stage 3's compressor, for the test: the payload is the block, plus a
 * mark at its end (pc_zbound has room). */
static int copy_compress(dd_codec_ctx *c, dd_err *err, void *dst,
			 const void *src, size_t len, uint32_t *psize,
			 uint8_t *codec)
{
	(void)c;
	(void)err;
	memcpy(dst, src, len);
	((uint8_t *)dst)[len] = 0xfe;
	*psize = (uint32_t)len + 1;
	*codec = 0x7e;
	return 0;
}

static int sink_store(void *ctx, dd_pbatch *b)
{
	sink *k = ctx;

	k->stores++;
	/* stored in order, after its lookup */
	if (k->stored_upto + b->pb_nblk > k->looked_upto)
		k->order_bad++;
	k->stored_upto += b->pb_nblk;
	/* each listed block's payload, kept until now */
	for (size_t j = 0; j < b->pb_nnew; j++) {
		const dd_blk *bk = &b->pb_blk[b->pb_new[j]];
		const uint8_t *pay = dd_pipe_payload(k->pipe, b, j);

		k->works++;
		if (bk->bk_psize != bk->bk_len + 1 || bk->bk_codec != 0x7e ||
		    memcmp(pay, b->pb_data + bk->bk_off, bk->bk_len) != 0 ||
		    pay[bk->bk_len] != 0xfe)
			k->order_bad++;
	}
	return 0;
}

static bool sink_late(void *ctx, const dd_pbatch *b)
{
	(void)ctx;
	return b->pb_id != 1; /* both paths */
}

static bool sink_keep(void *ctx, const dd_pbatch *b, size_t i, unsigned w)
{
	sink *k = ctx;

	(void)w;
	return k->keep_every && b->pb_blk[i].bk_idx % k->keep_every == 0;
}

static void sink_lost(void *ctx, const char *label, uint64_t image,
		      uint64_t bytes, const dd_err *why)
{
	sink *k = ctx;

	(void)label;
	(void)image;
	assert_true(why->de_code < 0);
	k->lost += bytes;
	k->lost_calls++;
}

static const dd_pipe_ops sink_ops = {
	.po_lookup = sink_lookup,
	.po_store = sink_store,
	.po_store_late = sink_late,
	.po_keep = sink_keep,
	.po_lost = sink_lost,
};

static void sink_free(sink *k)
{
	for (size_t i = 0; i < k->n; i++)
		free(k->blk[i].bytes);
	free(k->blk);
	memset(k, 0, sizeof(*k));
}

static dd_pool *pool;

static int setup_pool(void **state)
{
	(void)state;
	return dd_pool_new(&pool, 2);
}

static int teardown_pool(void **state)
{
	(void)state;
	dd_pool_free(pool);
	return 0;
}

static dd_codec_ctx *no_ctx[8];

static dd_pipe *new_pipe(sink *k, const dd_cutter *cut, size_t ncut,
			 size_t batch, int bytes, int readmode)
{
	dd_pipe_cfg cfg = {
		.pc_pool = pool,
		.pc_hash_kind = DD_HASH_SHA256,
		.pc_cut = cut,
		.pc_ncut = ncut,
		.pc_compress = copy_compress,
		.pc_zctx = no_ctx,
		.pc_zbound = 131072 + 1,
		.pc_zkeep = true,
		.pc_batch = batch,
		.pc_bytes = bytes,
		.pc_read = readmode,
		.pc_ops = &sink_ops,
		.pc_ctx = k,
		.pc_err = &k->err,
	};
	dd_pipe *p;

	assert_int_equal(dd_pipe_new(&p, &cfg), 0);
	k->pipe = p;
	return p;
}

/* Every block of image img (n bytes) as cutter c of fixed size bs cuts
 * it, at k->blk[*at...]: indices, lengths, zero blocks, hashes against
 * libcrypto, and the bytes when they were kept. */
static void check_fixed(const sink *k, size_t *at, const uint8_t *img,
			size_t n, uint32_t bs, uint8_t c)
{
	uint64_t nb = dd_block_count(n, bs);

	for (uint64_t i = 0; i < nb; i++) {
		const rec_blk *r;
		uint8_t want[32];
		size_t len = dd_block_lsize(n, bs, i);

		while (*at < k->n && k->blk[*at].cut != c)
			(*at)++;
		assert_true(*at < k->n);
		r = &k->blk[(*at)++];
		assert_int_equal(r->idx, i);
		assert_int_equal(r->ioff, i * bs);
		assert_int_equal(r->len, len);
		if (dd_is_zero(img + i * bs, len)) {
			assert_int_equal(r->kind, DD_BLK_ZERO);
			continue;
		}
		assert_int_equal(r->kind, DD_BLK_DATA);
		ref_sha256(img + i * bs, len, want);
		assert_memory_equal(r->hash, want, 32);
		if (!r->nodata)
			assert_memory_equal(r->bytes, img + i * bs, len);
	}
}

/* ---- sources --------------------------------------------------------------*/

/* The caller's buffers, in uneven pieces; a short last block; zero
 * blocks anywhere, the short one too; batches that overlap in the ring. */
static void test_pipe_buffer(void **state)
{
	static const long zeros[] = {0, 3, 4, 17, 40, -1};
	const size_t n = 40 * 4096 + 1000;
	uint8_t *img = make_image(n, 4096, zeros);
	dd_cutter cut;
	sink k = {.mark_all = true};
	size_t at = 0, off = 0, step = 1;
	dd_pipe *p;

	(void)state;
	dd_cutter_fixed(&cut, 4096);
	p = new_pipe(&k, &cut, 1, 16384, DD_PIPE_BYTES_ALL, DD_PIPE_READ_FAIL);
	assert_int_equal(dd_pipe_batch_bytes(p) % 4096, 0);
	while (off < n) {
		size_t len = n - off < step ? n - off : step;

		assert_int_equal(dd_pipe_write(p, img + off, len), 0);
		off += len;
		step = step * 3 + 1;
	}
	assert_int_equal(dd_pipe_drain(p), 0);
	dd_pipe_free(p);
	assert_int_equal(k.n, 41);
	check_fixed(&k, &at, img, n, 4096, 0);
	assert_int_equal(k.order_bad, 0);
	assert_int_equal(k.lookups, k.stores);
	assert_true(k.lookups > DD_PIPE_RING);
	assert_int_equal(k.works, 41 - 5);
	/* the zero-copy way: dd_pipe_buffer / dd_pipe_produce */
	sink_free(&k);
	p = new_pipe(&k, &cut, 1, 16384, DD_PIPE_BYTES_ALL, DD_PIPE_READ_FAIL);
	for (off = 0; off < n;) {
		void *buf;
		size_t room;

		dd_pipe_buffer(p, &buf, &room);
		assert_true(room > 0);
		if (room > n - off)
			room = n - off;
		if (room > 5000)
			room = 5000;
		memcpy(buf, img + off, room);
		assert_int_equal(dd_pipe_produce(p, room), 0);
		off += room;
	}
	assert_int_equal(dd_pipe_drain(p), 0);
	dd_pipe_free(p);
	at = 0;
	assert_int_equal(k.n, 41);
	check_fixed(&k, &at, img, n, 4096, 0);
	sink_free(&k);
	free(img);
}

static char tmpdir[] = "/tmp/test_chunk.XXXXXX";

static int write_tmp(const char *name, const uint8_t *p, size_t n, char *path)
{
	int fd;

	snprintf(path, 256, "%s/%s", tmpdir, name);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, p, n), (ssize_t)n);
	return fd;
}

/* A file handed over as ranges, read on the pool: into the batch
 * (BYTES_ALL), into the workers' buffers with nothing kept (BYTES_NONE),
 * and with only what po_keep asks copied (BYTES_SOME); a range that
 * starts after bytes of memory, and two files one after the other. */
static void test_pipe_file(void **state)
{
	static const long zeros[] = {2, 9, 30, -1};
	const size_t n = 97 * 4096 + 123;
	const int modes[] = {DD_PIPE_BYTES_ALL, DD_PIPE_BYTES_NONE,
			     DD_PIPE_BYTES_SOME};
	uint8_t *img = make_image(n, 4096, zeros);
	char path[256];
	dd_cutter cut;
	int fd;

	(void)state;
	fd = write_tmp("f", img, n, path);
	dd_cutter_fixed(&cut, 4096);
	for (size_t m = 0; m < 3; m++) {
		sink k = {.keep_every = 3};
		size_t at = 0, nodata = 0;
		dd_pipe *p = new_pipe(&k, &cut, 1, 65536, modes[m],
				      DD_PIPE_READ_FAIL);

		/* 5000 bytes from memory, then the rest from the file in two
		 * ranges that continue each other */
		assert_int_equal(dd_pipe_write(p, img, 5000), 0);
		assert_int_equal(dd_pipe_file(p, fd, 5000, 200000, "f"), 0);
		assert_int_equal(dd_pipe_file(p, fd, 205000, n - 205000, "f"),
				 0);
		assert_int_equal(dd_pipe_drain(p), 0);
		dd_pipe_free(p);
		assert_int_equal(k.n, 98);
		check_fixed(&k, &at, img, n, 4096, 0);
		for (size_t i = 0; i < k.n; i++) {
			const rec_blk *r = &k.blk[i];

			nodata += r->nodata;
			if (modes[m] != DD_PIPE_BYTES_SOME || !r->nodata)
				continue;
			/* only blocks po_keep did not want lack bytes */
			assert_true(r->idx % 3 != 0 || r->kind == DD_BLK_ZERO);
		}
		if (modes[m] == DD_PIPE_BYTES_ALL)
			assert_int_equal(nodata, 0);
		else  /* all but the first region's, part memory */
			assert_true(nodata > (modes[m] == DD_PIPE_BYTES_SOME
					      ? 50 : 80));
		sink_free(&k);
	}
	close(fd);
	unlink(path);
	free(img);
}

/* 128 KiB blocks from a file, read into the workers' own buffers: a
 * region holds as many of them as the hasher has lanes (2 MiB with the
 * sixteen AVX-512 lanes, which main() asks for), and every block's hash
 * and kept bytes are right, the short last one's and zero ones' too. */
static void test_pipe_wide(void **state)
{
	static const long zeros[] = {3, 16, 17, 40, -1};
	const size_t bs = 131072, n = 45 * bs + 777;
	uint8_t *img = make_image(n, bs, zeros);
	char path[256];
	dd_cutter cut;
	int fd;

	(void)state;
	fd = write_tmp("w", img, n, path);
	dd_cutter_fixed(&cut, bs);
	for (int m = 0; m < 2; m++) {
		sink k = {.keep_every = 3};
		size_t at = 0;
		dd_pipe *p = new_pipe(&k, &cut, 1, (size_t)4 << 20,
				      m ? DD_PIPE_BYTES_SOME
					: DD_PIPE_BYTES_NONE,
				      DD_PIPE_READ_FAIL);

		assert_int_equal(dd_pipe_region_bytes(p),
				 dd_hasher_list_width() == 16 ? 16 * bs
							      : 2 * bs);
		assert_int_equal(dd_pipe_file(p, fd, 0, n, "w"), 0);
		assert_int_equal(dd_pipe_drain(p), 0);
		dd_pipe_free(p);
		assert_int_equal(k.n, 46);
		check_fixed(&k, &at, img, n, bs, 0);
		sink_free(&k);
	}
	close(fd);
	unlink(path);
	free(img);
}

/* A step before the batch is full leaves a part of a block uncut: its
 * bytes, a file range's, go on to the next batch with the cutter. */
static void test_pipe_early_step(void **state)
{
	const size_t n = 5 * 4096 + 10;
	uint8_t *img = make_image(n, 4096, NULL);
	char path[256];
	dd_cutter cut;
	sink k = {.mark_all = true};
	size_t at = 0;
	int fd = write_tmp("e", img, n, path);
	dd_pipe *p;

	(void)state;
	dd_cutter_fixed(&cut, 4096);
	for (int m = 0; m < 2; m++) {
		p = new_pipe(&k, &cut, 1, 65536, m ? DD_PIPE_BYTES_NONE
						   : DD_PIPE_BYTES_ALL,
			     DD_PIPE_READ_FAIL);
		assert_int_equal(dd_pipe_range(p, fd, 0, 10000, "e"), 0);
		assert_int_equal(dd_pipe_step(p), 0);
		assert_int_equal(dd_pipe_range(p, fd, 10000, n - 10000, "e"),
				 0);
		assert_int_equal(dd_pipe_drain(p), 0);
		dd_pipe_free(p);
		at = 0;
		assert_int_equal(k.n, 6);
		check_fixed(&k, &at, img, n, 4096, 0);
		assert_int_equal(k.order_bad, 0);
		sink_free(&k);
		k.mark_all = true;
	}
	close(fd);
	unlink(path);
	free(img);
}

struct feeder {
	int fd;
	const uint8_t *p;
	size_t n;
};

static void *feed_pipe(void *arg)
{
	struct feeder *f = arg;

	for (size_t off = 0; off < f->n;) {
		size_t len = f->n - off < 7777 ? f->n - off : 7777;
		ssize_t w = write(f->fd, f->p + off, len);

		assert_true(w > 0);
		off += (size_t)w;
	}
	close(f->fd);
	return NULL;
}

/* A pipe, read by the caller into dd_pipe_buffer as it comes, in short
 * reads; two images in a row, each cut from its own start. */
static void test_pipe_pipe(void **state)
{
	static const long zeros[] = {1, -1};
	const size_t n1 = 50 * 8192 + 5, n2 = 8192 * 3;
	uint8_t *img1 = make_image(n1, 8192, zeros);
	uint8_t *img2 = make_image(n2, 8192, NULL);
	const uint8_t *imgs[2] = {img1, img2};
	const size_t ns[2] = {n1, n2};
	dd_cutter cut;
	sink k = {0};
	size_t at = 0;
	dd_pipe *p;

	(void)state;
	dd_cutter_fixed(&cut, 8192);
	p = new_pipe(&k, &cut, 1, 65536, DD_PIPE_BYTES_ALL, DD_PIPE_READ_FAIL);
	for (int im = 0; im < 2; im++) {
		int fds[2];
		pthread_t t;
		struct feeder f;

		assert_int_equal(pipe(fds), 0);
		f = (struct feeder){fds[1], imgs[im], ns[im]};
		assert_int_equal(pthread_create(&t, NULL, feed_pipe, &f), 0);
		for (;;) {
			void *buf;
			size_t room;
			ssize_t got;

			dd_pipe_buffer(p, &buf, &room);
			got = read(fds[0], buf, room);
			assert_true(got >= 0);
			if (got == 0)
				break;
			assert_int_equal(dd_pipe_produce(p, (size_t)got), 0);
		}
		pthread_join(t, NULL);
		close(fds[0]);
		assert_int_equal(dd_pipe_end_image(p), 0);
	}
	assert_int_equal(dd_pipe_drain(p), 0);
	dd_pipe_free(p);
	assert_int_equal(k.n, 51 + 3);
	check_fixed(&k, &at, img1, n1, 8192, 0);
	check_fixed(&k, &at, img2, n2, 8192, 0);
	sink_free(&k);
	free(img1);
	free(img2);
}

/* Several block sizes at once (as dedup scan cuts): every size cuts each
 * image from its own start, over many small and large images sharing
 * batches; blocks of each size come in order. */
static void test_pipe_sizes(void **state)
{
	const uint32_t bs[3] = {4096, 16384, 65536};
	const size_t ns[5] = {1, 70000, 4096, 300001, 65536};
	uint8_t *imgs[5];
	dd_cutter cut[3];
	sink k = {.mark_all = true};
	size_t at[3] = {0, 0, 0}, total = 0;
	dd_pipe *p;

	(void)state;
	for (int c = 0; c < 3; c++)
		dd_cutter_fixed(&cut[c], bs[c]);
	p = new_pipe(&k, cut, 3, 262144, DD_PIPE_BYTES_NONE,
		     DD_PIPE_READ_FAIL);
	for (int im = 0; im < 5; im++) {
		static const long z[] = {1, -1};

		imgs[im] = make_image(ns[im], 4096, im == 3 ? z : NULL);
		assert_int_equal(dd_pipe_write(p, imgs[im], ns[im]), 0);
		assert_int_equal(dd_pipe_end_image(p), 0);
	}
	assert_int_equal(dd_pipe_drain(p), 0);
	dd_pipe_free(p);
	for (int im = 0; im < 5; im++) {
		size_t from[3];

		for (int c = 0; c < 3; c++) {
			/* each image's blocks of size c, from where the last
			 * image's ended */
			from[c] = at[c];
			check_fixed(&k, &at[c], imgs[im], ns[im], bs[c],
				    (uint8_t)c);
			total += at[c] > from[c];
		}
		free(imgs[im]);
	}
	assert_int_equal(total, 15);
	assert_int_equal(k.order_bad, 0);
	sink_free(&k);
}

/* A content-defined cutter, for the test: a block ends after a byte
 * 0x2a, or at 3000 bytes; at least 16 bytes. */
static size_t cut_star(const dd_cutter *c, const uint8_t *data, size_t len,
		       bool final)
{
	for (size_t i = c->cu_min - 1; i < len && i < c->cu_max; i++)
		if (data[i] == 0x2a || i + 1 == c->cu_max)
			return i + 1;
	return final ? (len < c->cu_max ? len : c->cu_max) : 0;
}

/* Blocks of varying length: cut points found in the bytes, even across
 * batches (the bytes after a batch's last cut go to the next), from a
 * buffer and from a file; hashes of blocks of every length. */
static void test_pipe_varying(void **state)
{
	const size_t n = 200000;
	uint8_t *img = make_image(n, 4096, NULL);
	dd_cutter cut = {.cu_next = cut_star, .cu_min = 16, .cu_max = 3000,
			 .cu_reads = true};
	char path[256];
	int fd;

	(void)state;
	for (size_t i = 0; i < n; i++)   /* a cut point every ~256 bytes */
		if (img[i] == 0x2b)
			img[i] = 0x2a;
	memset(img + 50000, 0, 9000);     /* a zero block or two: no 0x2a */
	fd = write_tmp("v", img, n, path);
	for (int src = 0; src < 2; src++) {
		sink k = {0};
		size_t off = 0;
		dd_pipe *p = new_pipe(&k, &cut, 1, 8192, DD_PIPE_BYTES_ALL,
				      DD_PIPE_READ_FAIL);

		if (src == 0)
			assert_int_equal(dd_pipe_write(p, img, n), 0);
		else
			assert_int_equal(dd_pipe_file(p, fd, 0, n, "v"), 0);
		assert_int_equal(dd_pipe_drain(p), 0);
		dd_pipe_free(p);
		for (size_t i = 0; i < k.n; i++) {
			const rec_blk *r = &k.blk[i];
			size_t want = cut_star(&cut, img + off, n - off, true);
			uint8_t h[32];

			assert_int_equal(r->idx, i);
			assert_int_equal(r->len, want);
			if (dd_is_zero(img + off, want)) {
				assert_int_equal(r->kind, DD_BLK_ZERO);
			} else {
				ref_sha256(img + off, want, h);
				assert_memory_equal(r->hash, h, 32);
				assert_memory_equal(r->bytes, img + off, want);
			}
			off += want;
		}
		assert_int_equal(off, n);
		assert_true(k.n > 500);
		sink_free(&k);
	}
	close(fd);
	unlink(path);
	free(img);
}

/* FastCDC beside fixed sizes, as dedup scan cuts with both chunkers:
 * each cutter cuts every image from its own start, whatever the others
 * do; content-defined blocks come out as the cutter alone cuts the
 * image, with their offsets, over batches, from a buffer and from a
 * file, the hashes of pairs of different lengths right. */
static void test_pipe_mixed(void **state)
{
	const uint32_t bs[2] = {4096, 16384};
	const size_t ns[4] = {300001, 5, 70000, 2 << 20};
	uint8_t *imgs[4];
	dd_cutter cut[3];
	char path[4][256];
	int fds[4];

	(void)state;
	dd_cutter_fastcdc(&cut[0], 8192);
	dd_cutter_fixed(&cut[1], bs[0]);
	dd_cutter_fixed(&cut[2], bs[1]);
	for (int im = 0; im < 4; im++) {
		static const long z[] = {2, 3, 4, 5, 6, 40, -1};
		char name[8];

		imgs[im] = make_image(ns[im], 4096, im == 3 ? z : NULL);
		snprintf(name, sizeof(name), "m%d", im);
		fds[im] = write_tmp(name, imgs[im], ns[im], path[im]);
	}
	for (int src = 0; src < 3; src++) {
		sink k = {.mark_all = true};
		size_t at[3] = {0, 0, 0};
		dd_pipe *p = new_pipe(&k, cut, 3, 65536, src == 2 ?
				      DD_PIPE_BYTES_NONE : DD_PIPE_BYTES_ALL,
				      DD_PIPE_READ_FAIL);

		for (int im = 0; im < 4; im++) {
			if (src == 0)
				assert_int_equal(dd_pipe_write(p, imgs[im],
							       ns[im]), 0);
			else
				assert_int_equal(dd_pipe_file(p, fds[im], 0,
							      ns[im], "m"), 0);
			assert_int_equal(dd_pipe_end_image(p), 0);
		}
		assert_int_equal(dd_pipe_drain(p), 0);
		dd_pipe_free(p);
		for (int im = 0; im < 4; im++) {
			size_t off = 0;
			uint64_t idx = 0;

			for (int c = 1; c < 3; c++)
				check_fixed(&k, &at[c], imgs[im], ns[im],
					    bs[c - 1], (uint8_t)c);
			while (off < ns[im]) {
				size_t want = cut[0].cu_next(&cut[0],
							     imgs[im] + off,
							     ns[im] - off, true);
				const rec_blk *r;
				uint8_t h[32];

				while (at[0] < k.n && k.blk[at[0]].cut != 0)
					at[0]++;
				assert_true(at[0] < k.n);
				r = &k.blk[at[0]++];
				assert_int_equal(r->idx, idx++);
				assert_int_equal(r->ioff, off);
				assert_int_equal(r->len, want);
				if (dd_is_zero(imgs[im] + off, want)) {
					assert_int_equal(r->kind, DD_BLK_ZERO);
				} else {
					ref_sha256(imgs[im] + off, want, h);
					assert_memory_equal(r->hash, h, 32);
					if (!r->nodata)
						assert_memory_equal(
							r->bytes, imgs[im] + off,
							want);
				}
				off += want;
			}
		}
		for (int c = 0; c < 3; c++) {
			while (at[c] < k.n && k.blk[at[c]].cut != c)
				at[c]++;
			assert_int_equal(at[c], k.n);
		}
		assert_int_equal(k.order_bad, 0);
		sink_free(&k);
	}
	for (int im = 0; im < 4; im++) {
		close(fds[im]);
		unlink(path[im]);
		free(imgs[im]);
	}
}

/* A pipeline over file "s" (img, n bytes) that shrinks to 10 blocks and
 * a byte once handed over (or, with `fault`, fails every read). */
static int run_damaged(sink *k, const dd_cutter *cut, const uint8_t *img,
		       size_t n, int bytes, int readmode, bool fault)
{
	char path[256];
	int fd = write_tmp("s", img, n, path);
	dd_pipe *p = new_pipe(k, cut, 1, 1 << 20, bytes, readmode);
	int rc;

	assert_int_equal(dd_pipe_file(p, fd, 0, n, "s"), 0);
	if (fault)
		dd_fault_arm(DD_FAULT_READ, 1, EIO, 1);
	else
		assert_int_equal(ftruncate(fd, 10 * 4096 + 1), 0);
	rc = dd_pipe_drain(p);
	dd_fault_disarm_all();
	dd_pipe_free(p);
	close(fd);
	unlink(path);
	return rc;
}

/* A file that shrinks after it was handed over: an error that says so
 * (DD_PIPE_READ_FAIL), or zeros reported through po_lost; a read that
 * fails: the same. */
static void test_pipe_short_file(void **state)
{
	const size_t n = 40 * 4096, cut_at = 10 * 4096 + 1;
	uint8_t *img = make_image(n, 4096, NULL);
	dd_cutter cut;
	sink k = {0};
	size_t at = 0;

	(void)state;
	dd_cutter_fixed(&cut, 4096);
	assert_int_equal(run_damaged(&k, &cut, img, n, DD_PIPE_BYTES_ALL,
				     DD_PIPE_READ_FAIL, false), DD_EIO);
	assert_non_null(strstr(k.err.de_msg, "shrink"));
	sink_free(&k);
	assert_int_equal(run_damaged(&k, &cut, img, n, DD_PIPE_BYTES_ALL,
				     DD_PIPE_READ_ZERO, false), 0);
	assert_int_equal(k.lost, n - cut_at);
	assert_int_equal(k.lost_calls, 1);
	assert_int_equal(k.blk[10].kind, DD_BLK_DATA);
	assert_int_equal(k.blk[11].kind, DD_BLK_ZERO);
	memset(img + cut_at, 0, n - cut_at);
	check_fixed(&k, &at, img, n, 4096, 0);
	sink_free(&k);
	/* every read fails */
	assert_int_equal(run_damaged(&k, &cut, img, n, DD_PIPE_BYTES_NONE,
				     DD_PIPE_READ_FAIL, true), DD_EIO);
	sink_free(&k);
	assert_int_equal(run_damaged(&k, &cut, img, n, DD_PIPE_BYTES_NONE,
				     DD_PIPE_READ_ZERO, true), 0);
	assert_int_equal(k.lost, n);
	assert_int_equal(k.n, 40);
	for (size_t i = 0; i < k.n; i++)
		assert_int_equal(k.blk[i].kind, DD_BLK_ZERO);
	sink_free(&k);
	free(img);
}

/* Bad setups are refused: no cutter, sizes that do not divide each
 * other, BYTES_SOME without po_keep.  A reading cutter beside a fixed
 * one is fine (test_pipe_mixed). */
static void test_pipe_setup(void **state)
{
	dd_cutter c[2];
	dd_pipe_ops ops = sink_ops;
	dd_err err = {0};
	dd_pipe_cfg cfg = {
		.pc_pool = pool, .pc_hash_kind = DD_HASH_SHA256, .pc_cut = c,
		.pc_ncut = 0, .pc_batch = 65536, .pc_ops = &ops,
		.pc_err = &err,
	};
	dd_pipe *p;

	(void)state;
	assert_int_equal(dd_pipe_new(&p, &cfg), DD_EINVAL);
	dd_cutter_fixed(&c[0], 4096);
	dd_cutter_fixed(&c[1], 6144);
	cfg.pc_ncut = 2;
	assert_int_equal(dd_pipe_new(&p, &cfg), DD_EINVAL);
	c[1] = (dd_cutter){.cu_next = cut_star, .cu_min = 16, .cu_max = 3000,
			   .cu_reads = true};
	if (dd_pipe_new(&p, &cfg) != 0)
		fail_msg("%s", err.de_msg);
	dd_pipe_free(p);
	cfg.pc_ncut = 1;
	cfg.pc_bytes = DD_PIPE_BYTES_SOME;
	ops.po_keep = NULL;
	assert_int_equal(dd_pipe_new(&p, &cfg), DD_EINVAL);
	ops.po_keep = sink_keep;
	if (dd_pipe_new(&p, &cfg) != 0)
		fail_msg("%s", err.de_msg);
	dd_pipe_free(p);
}

static int setup_all(void **state)
{
	assert_non_null(mkdtemp(tmpdir));
	return setup_pool(state);
}

static int teardown_all(void **state)
{
	rmdir(tmpdir);
	return teardown_pool(state);
}

int main(void)
{
	/* the sixteen lanes without their timing, where the CPU has them:
	 * test_pipe_wide's regions (and every pipeline here) use them */
	setenv("DEDUP_SHA256_X16", "1", 0);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_is_zero_exhaustive),
		cmocka_unit_test(test_is_zero_blocks),
		cmocka_unit_test(test_block_size),
		cmocka_unit_test(test_block_lsize),
		cmocka_unit_test(test_digest),
		cmocka_unit_test(test_digest_v2),
		cmocka_unit_test(test_digest_v2_runs),
		cmocka_unit_test(test_fastcdc_gear),
		cmocka_unit_test(test_fastcdc_golden),
		cmocka_unit_test(test_fastcdc_reference),
		cmocka_unit_test(test_fastcdc_props),
		cmocka_unit_test(test_pipe_buffer),
		cmocka_unit_test(test_pipe_file),
		cmocka_unit_test(test_pipe_wide),
		cmocka_unit_test(test_pipe_early_step),
		cmocka_unit_test(test_pipe_pipe),
		cmocka_unit_test(test_pipe_sizes),
		cmocka_unit_test(test_pipe_varying),
		cmocka_unit_test(test_pipe_mixed),
		cmocka_unit_test(test_pipe_short_file),
		cmocka_unit_test(test_pipe_setup),
	};

	return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
