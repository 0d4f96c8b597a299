/*
 * test_chunk.c -- chunk/: zero-block detection on every length, alignment
 * and position of a single non-zero byte; block-size rules; the content
 * digest, against SHA-256 from libcrypto.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "dedup.h"
#include "chunk/chunk.h"

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

static void ref_sha256(const void *p, size_t n, uint8_t out[32])
{
	unsigned len = 0;

	assert_int_equal(EVP_Digest(p, n, out, &len, EVP_sha256(), NULL), 1);
	assert_int_equal(len, 32);
}

/* The content digest: SHA-256 over the block hashes, 32 zero bytes for a
 * hole, then size and block size, little-endian (format/store.md §6). */
static void test_digest(void **state)
{
	uint8_t h1[32], h2[32], out[32], want[32], msg[3 * 32 + 12] = {0};
	dd_digest *d;

	(void)state;
	memset(h1, 0x11, 32);
	memset(h2, 0x22, 32);
	assert_int_equal(dd_digest_new(&d, NULL), 0);
	for (int round = 0; round < 2; round++) { /* final resets it */
		dd_digest_block(d, h1);
		dd_digest_zeros(d, 1);
		dd_digest_block(d, h2);
		dd_digest_final(d, 0x0102030405, 4096, out);
		memcpy(msg, h1, 32);
		memcpy(msg + 64, h2, 32);
		msg[96] = 0x05, msg[97] = 0x04, msg[98] = 0x03, msg[99] = 0x02;
		msg[100] = 0x01;
		msg[104 + 1] = 0x10;  /* 4096 = 0x1000 */
		ref_sha256(msg, sizeof(msg), want);
		assert_memory_equal(out, want, 32);
	}
	/* 300 holes at once, as 300 single ones */
	for (int i = 0; i < 300; i++)
		dd_digest_block(d, NULL);
	dd_digest_final(d, 300 * 4096, 4096, want);
	dd_digest_zeros(d, 300);
	dd_digest_final(d, 300 * 4096, 4096, out);
	assert_memory_equal(out, want, 32);
	dd_digest_free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_is_zero_exhaustive),
		cmocka_unit_test(test_is_zero_blocks),
		cmocka_unit_test(test_block_size),
		cmocka_unit_test(test_block_lsize),
		cmocka_unit_test(test_digest),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
