/*
 * test_hash.c -- hash/: SHA-256 against FIPS 180-4 vectors through every
 * entry point (one-shot, hasher, incremental, portable fallback), the
 * weakened test hash, and a scan's fast key (XXH3-128) against xxhsum.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedup.h"
#include "hash/fastkey.h"
#include "hash/hash.h"
#include "hash/sha256_impl.h"

static const char *const hex_empty =
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
static const char *const hex_abc =
	"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
static const char *const hex_448 =
	"248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1";
static const char *const hex_million_a =
	"cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
static const char *const msg_448 =
	"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";

static void assert_hex(const uint8_t h[DD_HASH_SIZE], const char *want)
{
	char buf[2 * DD_HASH_SIZE + 1];

	dd_hash_hex(h, buf);
	assert_string_equal(buf, want);
}

static void test_sha256_vectors(void **state)
{
	uint8_t h[DD_HASH_SIZE];
	char *a = malloc(1000000);

	(void)state;
	assert_non_null(a);
	memset(a, 'a', 1000000);

	dd_sha256("", 0, h);
	assert_hex(h, hex_empty);
	dd_sha256("abc", 3, h);
	assert_hex(h, hex_abc);
	dd_sha256(msg_448, strlen(msg_448), h);
	assert_hex(h, hex_448);
	dd_sha256(a, 1000000, h);
	assert_hex(h, hex_million_a);

	dd_sha256_sw("", 0, h);
	assert_hex(h, hex_empty);
	dd_sha256_sw("abc", 3, h);
	assert_hex(h, hex_abc);
	dd_sha256_sw(msg_448, strlen(msg_448), h);
	assert_hex(h, hex_448);
	dd_sha256_sw(a, 1000000, h);
	assert_hex(h, hex_million_a);
	free(a);
}

static void test_sha256_sw_lengths(void **state)
{
	uint8_t buf[300], h1[DD_HASH_SIZE], h2[DD_HASH_SIZE];

	(void)state;
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 31 + 7);
	/* Every padding case (0..299 bytes) against libcrypto. */
	for (size_t len = 0; len < sizeof(buf); len++) {
		dd_sha256(buf, len, h1);
		dd_sha256_sw(buf, len, h2);
		assert_memory_equal(h1, h2, DD_HASH_SIZE);
	}
}

static void test_hasher(void **state)
{
	uint8_t h[DD_HASH_SIZE], w[DD_HASH_SIZE], z[DD_HASH_SIZE] = {0};
	dd_hasher *s, *weak;

	(void)state;
	assert_int_equal(dd_hasher_new(&s, DD_HASH_SHA256), DD_OK);
	assert_int_equal(dd_hasher_new(&weak, DD_HASH_TEST_WEAK16), DD_OK);
	/* The context is reused: several sums in a row stay right. */
	for (int i = 0; i < 3; i++) {
		dd_hasher_sum(s, "abc", 3, h);
		assert_hex(h, hex_abc);
		dd_hasher_sum(s, "", 0, h);
		assert_hex(h, hex_empty);
	}
	dd_hasher_sum(weak, "abc", 3, w);
	assert_int_equal(w[0], 0xba);
	assert_int_equal(w[1], 0x78);
	assert_memory_equal(w + 2, z, DD_HASH_SIZE - 2);
	dd_hasher_sum(weak, msg_448, strlen(msg_448), w);
	assert_int_equal(w[0], 0x24);
	assert_int_equal(w[1], 0x8d);
	assert_memory_equal(w + 2, z, DD_HASH_SIZE - 2);

	/* 16 bits collide quickly: find two different inputs that do. */
	{
		static uint8_t seen[65536];
		uint32_t i;
		int found = 0;

		memset(seen, 0, sizeof(seen));
		for (i = 0; i < 100000 && !found; i++) {
			dd_hasher_sum(weak, &i, sizeof(i), w);
			unsigned k = (unsigned)w[0] << 8 | w[1];

			found = seen[k];
			seen[k] = 1;
		}
		assert_true(found);
	}
	dd_hasher_free(s);
	dd_hasher_free(weak);
	dd_hasher_free(NULL);

	assert_int_equal(dd_hasher_new(&s, 0), DD_EINVAL);
	assert_int_equal(dd_hasher_new(&s, 2), DD_EINVAL);
	assert_int_equal(dd_hasher_new(NULL, DD_HASH_SHA256), DD_EINVAL);
}

static void test_sha256_incremental(void **state)
{
	enum { N = 100000 };
	uint8_t *buf = malloc(N), one[DD_HASH_SIZE], inc[DD_HASH_SIZE];
	dd_sha256_ctx *c;

	(void)state;
	assert_non_null(buf);
	for (size_t i = 0; i < N; i++)
		buf[i] = (uint8_t)(i ^ (i >> 8));
	dd_sha256(buf, N, one);
	assert_int_equal(dd_sha256_new(&c), DD_OK);
	/* Pieces of awkward sizes, including empty ones. */
	for (size_t off = 0, step = 0; off < N; step = (step * 7 + 13) % 997) {
		size_t n = step < N - off ? step : N - off;

		dd_sha256_update(c, buf + off, n);
		off += n;
	}
	dd_sha256_final(c, inc);
	assert_memory_equal(one, inc, DD_HASH_SIZE);

	/* After final the context starts over. */
	dd_sha256_update(c, "ab", 2);
	dd_sha256_update(c, "c", 1);
	dd_sha256_final(c, inc);
	assert_hex(inc, hex_abc);
	dd_sha256_final(c, inc);
	assert_hex(inc, hex_empty);
	dd_sha256_free(c);
	dd_sha256_free(NULL);
	assert_int_equal(dd_sha256_new(NULL), DD_EINVAL);
	free(buf);
}

/* Does /proc/cpuinfo list the SHA extensions?  Read apart from the
 * library's own cpuid probe, so that a probe or self-test that wrongly
 * turns the two-lane code off is caught here. */
static bool cpuinfo_has(const char *flag)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[8192], word[64];
	bool found = false;

	snprintf(word, sizeof(word), " %s", flag);
	while (f && !found && fgets(line, sizeof(line), f)) {
		const char *at = strstr(line, word);
		size_t n = strlen(word);

		found = !strncmp(line, "flags", 5) && at &&
			(at[n] == ' ' || at[n] == '\n' || at[n] == 0);
	}
	if (f)
		fclose(f);
	return found;
}

static bool cpuinfo_has_sha_ni(void)
{
	return cpuinfo_has("sha_ni");
}

static void test_sha256_x2(void **state)
{
	enum { MAX = 1100, BIG = (1 << 20) + 77 };
	uint8_t *buf = malloc(2 * BIG + 2), xa[DD_HASH_SIZE], xb[DD_HASH_SIZE];
	uint8_t ra[DD_HASH_SIZE], rb[DD_HASH_SIZE];
	uint64_t rng = 0x9e3779b97f4a7c15ull;

	(void)state;
	assert_non_null(buf);
	for (size_t i = 0; i < 2 * BIG + 2; i++) {
		rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
		buf[i] = (uint8_t)rng;
	}
	if (cpuinfo_has_sha_ni())
		assert_true(dd_sha256_x2_ok());
	/* Every padding case over several 64-byte blocks; lane b starts at an
	 * odd address, lane a at an even one. */
	for (size_t len = 0; len <= MAX; len++) {
		const uint8_t *a = buf + 2 * (len % 32), *b = buf + MAX + 1 + len;

		dd_sha256_x2(a, b, len, xa, xb);
		dd_sha256(a, len, ra);
		dd_sha256(b, len, rb);
		assert_memory_equal(xa, ra, DD_HASH_SIZE);
		assert_memory_equal(xb, rb, DD_HASH_SIZE);
	}
	/* Block sizes the store uses, an odd large one, both lanes the same
	 * buffer, and the lanes swapped. */
	static const size_t big_lens[] = { 4096, 131072, 1 << 20, BIG };

	for (size_t i = 0; i < sizeof(big_lens) / sizeof(big_lens[0]); i++) {
		size_t len = big_lens[i];

		dd_sha256_x2(buf, buf + BIG + 1, len, xa, xb);
		dd_sha256(buf, len, ra);
		dd_sha256(buf + BIG + 1, len, rb);
		assert_memory_equal(xa, ra, DD_HASH_SIZE);
		assert_memory_equal(xb, rb, DD_HASH_SIZE);
		dd_sha256_x2(buf + BIG + 1, buf, len, xb, xa);
		assert_memory_equal(xa, ra, DD_HASH_SIZE);
		assert_memory_equal(xb, rb, DD_HASH_SIZE);
		dd_sha256_x2(buf, buf, len, xa, xb);
		assert_memory_equal(xa, ra, DD_HASH_SIZE);
		assert_memory_equal(xb, ra, DD_HASH_SIZE);
	}
	dd_sha256_x2("abc", msg_448, 0, xa, xb);
	assert_hex(xa, hex_empty);
	assert_hex(xb, hex_empty);
	free(buf);
}

/* Two lanes of different lengths: every pair of lengths around the
 * padding cases, both orders, and lengths of content-defined blocks
 * (one lane ending whole blocks before the other, or in its tail). */
static void test_sha256_x2v(void **state)
{
	enum { MAX = 300, BIG = (1 << 20) + 77 };
	uint8_t *buf = malloc(2 * BIG + 2), xa[DD_HASH_SIZE], xb[DD_HASH_SIZE];
	uint8_t ra[DD_HASH_SIZE], rb[DD_HASH_SIZE];
	uint64_t rng = 0x2545f4914f6cdd1dull;
	static const size_t big[][2] = {
		{131072, 131073}, {107498, 250414}, {1 << 20, 46450},
		{BIG, 0}, {65536 + 55, 65536 + 56}, {4096, 1 << 20},
	};
	dd_hasher *h;

	(void)state;
	assert_non_null(buf);
	assert_int_equal(dd_hasher_new(&h, DD_HASH_SHA256), DD_OK);
	for (size_t i = 0; i < 2 * BIG + 2; i++) {
		rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
		buf[i] = (uint8_t)rng;
	}
	for (size_t la = 0; la <= MAX; la += 1 + la / 64)
		for (size_t lb = 0; lb <= MAX; lb++) {
			const uint8_t *a = buf + la % 7, *b = buf + BIG + 1;

			dd_sha256_x2v(a, la, b, lb, xa, xb);
			dd_sha256(a, la, ra);
			dd_sha256(b, lb, rb);
			assert_memory_equal(xa, ra, DD_HASH_SIZE);
			assert_memory_equal(xb, rb, DD_HASH_SIZE);
		}
	for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++)
		for (int swap = 0; swap < 2; swap++) {
			size_t la = big[i][swap], lb = big[i][!swap];

			dd_hash_msg m[2] = {{buf, la, xa},
					    {buf + BIG + 1, lb, xb}};

			dd_hasher_sum_list(h, m, 2);
			dd_sha256(buf, la, ra);
			dd_sha256(buf + BIG + 1, lb, rb);
			assert_memory_equal(xa, ra, DD_HASH_SIZE);
			assert_memory_equal(xb, rb, DD_HASH_SIZE);
		}
	dd_hasher_free(h);
	free(buf);
}

/* Lists: every list length up to 40 of random lengths (tails, whole
 * blocks, content-defined sizes), each digest against dd_sha256; and the
 * test hash truncates every one. */
static void test_hasher_sum_list(void **state)
{
	enum { N = 40, BIG = 600000 };
	uint8_t *buf = malloc(BIG), out[N][DD_HASH_SIZE], r[DD_HASH_SIZE];
	uint64_t rng = 0x9e3779b97f4a7c15ull;
	dd_hash_msg m[N];
	dd_hasher *h, *weak;

	(void)state;
	assert_non_null(buf);
	assert_int_equal(dd_hasher_new(&h, DD_HASH_SHA256), DD_OK);
	assert_int_equal(dd_hasher_new(&weak, DD_HASH_TEST_WEAK16), DD_OK);
	for (size_t i = 0; i < BIG; i++) {
		rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
		buf[i] = (uint8_t)rng;
	}
	for (size_t n = 0; n <= N; n++) {
		for (size_t i = 0; i < n; i++) {
			size_t len;

			rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
			len = i % 3 == 0 ? rng % 300 : i % 3 == 1
				? 32768 + rng % 480000 : 4096 * (1 + rng % 8);
			m[i] = (dd_hash_msg){ buf + rng % (BIG - len), len,
					      out[i] };
		}
		dd_hasher_sum_list(h, m, n);
		for (size_t i = 0; i < n; i++) {
			dd_sha256(m[i].hm_p, m[i].hm_len, r);
			assert_memory_equal(out[i], r, DD_HASH_SIZE);
		}
		dd_hasher_sum_list(weak, m, n);
		for (size_t i = 0; i < n; i++) {
			dd_sha256(m[i].hm_p, m[i].hm_len, r);
			assert_memory_equal(out[i], r, 2);
			assert_true(out[i][2] == 0 && out[i][DD_HASH_SIZE - 1] == 0);
		}
	}
	dd_hasher_free(h);
	dd_hasher_free(weak);
	free(buf);
}

/* Sixteen lanes (sha256x16.c), each digest against the portable code:
 * lists of equal 4 KiB blocks at odd addresses, of every length 9 to 40;
 * lists of lengths around the padding cases, rotated so lanes end at
 * different blocks; and lists whose last messages are long, so that the
 * end is handed over part way through (dd_sha256_parts_finish) -- also
 * parts finished directly from states the lanes would hand over. */
static void test_sha256_x16(void **state)
{
	enum { N = 40, BIG = 300000 };
	static const size_t lens[] = { 0, 1, 55, 56, 63, 64, 65, 119, 120,
				       127, 128, 129, 4096, 4097, 5000 };
	const size_t nl = sizeof(lens) / sizeof(lens[0]);
	uint8_t *buf = malloc(BIG), out[N][DD_HASH_SIZE], r[DD_HASH_SIZE];
	uint64_t rng = 0x243f6a8885a308d3ull;
	dd_hash_msg m[N];

	(void)state;
	assert_non_null(buf);
	/* main() set DEDUP_SHA256_X16=1: used wherever it passes its
	 * self-test, whichever is faster here */
	if (cpuinfo_has("avx512f") && cpuinfo_has("avx512bw"))
		assert_true(dd_sha256_x16_ok());
	for (size_t i = 0; i < BIG; i++) {
		rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
		buf[i] = (uint8_t)rng;
	}
	for (size_t n = DD_SHA256_X16_MIN; n <= N; n++) {
		for (size_t i = 0; i < n; i++)
			m[i] = (dd_hash_msg){ buf + 4096 * i + i % 7, 4096,
					      out[i] };
		dd_sha256_x16_list(m, n);
		for (size_t i = 0; i < n; i++) {
			dd_sha256_sw(m[i].hm_p, m[i].hm_len, r);
			assert_memory_equal(out[i], r, DD_HASH_SIZE);
		}
	}
	for (size_t rot = 0; rot < 2 * nl; rot++) {
		size_t n = DD_SHA256_X16_MIN + rot % (N - DD_SHA256_X16_MIN);

		for (size_t i = 0; i < n; i++) {
			size_t len = lens[(i + rot) % nl];

			/* the second half of the rotations: the last few
			 * messages long, so that lanes go idle while they
			 * run and hand them over */
			if (rot >= nl && i + 4 >= n)
				len = 65536 + 64 * i + rot;
			m[i] = (dd_hash_msg){ buf + 3 * i + rot, len, out[i] };
		}
		dd_sha256_x16_list(m, n);
		for (size_t i = 0; i < n; i++) {
			dd_sha256_sw(m[i].hm_p, m[i].hm_len, r);
			assert_memory_equal(out[i], r, DD_HASH_SIZE);
		}
	}
	/* parts: a message's state after some of its blocks, finished */
	for (size_t k = 0; k < 5; k++) {
		dd_sha256_part part[5];

		for (size_t i = 0; i < k; i++) {
			dd_sha256_part *pt = &part[i];
			size_t len = lens[(3 * i + k) % nl] + 64 * i, run;

			memcpy(pt->sp_st, dd_sha256_h0, sizeof(pt->sp_st));
			dd_sha256_blocks_init(&pt->sp_b, buf + i, len);
			pt->sp_at = pt->sp_b.sb_total / 2;
			for (size_t j = 0; j < pt->sp_at; j++)
				dd_sha256_sw_block(pt->sp_st,
						   dd_sha256_blocks_at(
							   &pt->sp_b, j, &run));
			pt->sp_out = out[i];
		}
		dd_sha256_parts_finish(part, k);
		for (size_t i = 0; i < k; i++) {
			dd_sha256_sw(buf + i, lens[(3 * i + k) % nl] + 64 * i,
				     r);
			assert_memory_equal(out[i], r, DD_HASH_SIZE);
		}
	}
	free(buf);
}

/* A list of two, as a read hashes a pair (dd_block_read_list): the
 * digests, and the test hash's truncation. */
static void test_hasher_pair(void **state)
{
	uint8_t a[DD_HASH_SIZE], b[DD_HASH_SIZE], z[DD_HASH_SIZE] = {0};
	dd_hash_msg m[2] = {{"abc", 3, a}, {"xyz", 3, b}};
	dd_hasher *s, *weak;

	(void)state;
	assert_int_equal(dd_hasher_new(&s, DD_HASH_SHA256), DD_OK);
	assert_int_equal(dd_hasher_new(&weak, DD_HASH_TEST_WEAK16), DD_OK);
	dd_hasher_sum_list(s, m, 2);
	assert_hex(a, hex_abc);
	dd_sha256("xyz", 3, z);
	assert_memory_equal(b, z, DD_HASH_SIZE);
	memset(z, 0, sizeof(z));
	m[0] = (dd_hash_msg){msg_448, strlen(msg_448), a};
	m[1] = (dd_hash_msg){msg_448, strlen(msg_448), b};
	dd_hasher_sum_list(weak, m, 2);
	assert_int_equal(a[0], 0x24);
	assert_int_equal(a[1], 0x8d);
	assert_memory_equal(a + 2, z, DD_HASH_SIZE - 2);
	assert_memory_equal(a, b, DD_HASH_SIZE);
	dd_hasher_free(s);
	dd_hasher_free(weak);
}

static void test_hash_hex(void **state)
{
	uint8_t h[DD_HASH_SIZE];
	char buf[2 * DD_HASH_SIZE + 2];

	(void)state;
	for (int i = 0; i < DD_HASH_SIZE; i++)
		h[i] = (uint8_t)(i * 8 + 0x0f);
	memset(buf, 'z', sizeof(buf));
	dd_hash_hex(h, buf);
	assert_string_equal(buf, "0f171f272f373f474f575f676f777f87"
			    "8f979fa7afb7bfc7cfd7dfe7eff7ff07");
	assert_int_equal(buf[2 * DD_HASH_SIZE + 1], 'z');
}

/* dd_fastkey: XXH3-128 as the reference tool prints it (`xxhsum -H2`,
 * xxHash 0.8.1: the canonical big-endian bytes), then 16 zero bytes; the
 * AVX2 and SSE2 variants agree on every length across xxHash's size
 * classes (0-16, 17-128, 129-240, longer, stripes and blocks). */
static void test_fastkey(void **state)
{
	static const char *const want_empty =
		"99aa06d3014798d86001c324468d497f"
		"00000000000000000000000000000000";
	static const char *const want_abc =
		"06b05ab6733a618578af5f94892f3950"
		"00000000000000000000000000000000";
	static const char *const want_a100000 =
		"819d5302938c790308f809ef04c54838"
		"00000000000000000000000000000000";
	static const char *const want_ramp5000 =
		"c98ae385d09887cc799aaddd7339581d"
		"00000000000000000000000000000000";
	size_t n = 100000;
	uint8_t *buf = malloc(n), h[DD_HASH_SIZE], h2[DD_HASH_SIZE];

	(void)state;
	assert_non_null(buf);
	dd_fastkey("", 0, h);
	assert_hex(h, want_empty);
	dd_fastkey("abc", 3, h);
	assert_hex(h, want_abc);
	memset(buf, 'a', n);
	dd_fastkey(buf, n, h);
	assert_hex(h, want_a100000);
	for (size_t i = 0; i < 5000; i++)
		buf[i] = (uint8_t)(i * 7 + 3);
	dd_fastkey(buf, 5000, h);
	assert_hex(h, want_ramp5000);
	for (size_t i = 0; i < n; i++)
		buf[i] = (uint8_t)((i * 2654435761u) >> 13);
	for (size_t len = 0; len < 4200; len += len < 300 ? 1 : 37) {
		dd_fastkey_sse2(buf + 1, len, h);
		dd_fastkey(buf + 1, len, h2);
		assert_memory_equal(h, h2, DD_HASH_SIZE);
#if defined(__x86_64__)
		if (__builtin_cpu_supports("avx2")) {
			dd_fastkey_avx2(buf + 1, len, h2);
			assert_memory_equal(h, h2, DD_HASH_SIZE);
		}
#endif
	}
	free(buf);
}

int main(void)
{
	/* before the first hash: the sixteen lanes used where they pass
	 * their self-test, not only where they are faster (sha256x16.c) */
	setenv("DEDUP_SHA256_X16", "1", 1);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sha256_vectors),
		cmocka_unit_test(test_sha256_sw_lengths),
		cmocka_unit_test(test_hasher),
		cmocka_unit_test(test_sha256_incremental),
		cmocka_unit_test(test_sha256_x2),
		cmocka_unit_test(test_sha256_x2v),
		cmocka_unit_test(test_sha256_x16),
		cmocka_unit_test(test_hasher_pair),
		cmocka_unit_test(test_hasher_sum_list),
		cmocka_unit_test(test_hash_hex),
		cmocka_unit_test(test_fastkey),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
