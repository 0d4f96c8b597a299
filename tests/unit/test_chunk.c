/*
 * test_chunk.c -- chunk/: zero-block detection on every length, alignment
 * and position of a single non-zero byte; block-size rules.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_is_zero_exhaustive),
		cmocka_unit_test(test_is_zero_blocks),
		cmocka_unit_test(test_block_size),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
