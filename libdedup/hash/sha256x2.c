/*
 * sha256x2.c -- SHA-256 of two equal-length buffers at once, on the x86
 * SHA extensions (SHA-NI).
 *
 * Why: a SHA-256 block is a chain of 64 rounds, each waiting for the one
 * before, so one message keeps the SHA unit only half busy: sha256rnds2
 * has a latency of several cycles but can start every cycle or two.  Two
 * independent messages whose rounds are interleaved fill those gaps.  On
 * the AMD EPYC machines this project is measured on, two lanes hash 1.79x
 * the bytes per core of libcrypto's single-buffer SHA-NI code (3.2 vs
 * 1.8 GB/s, tests/bench/bench_hash.sh), and hashing is most of what a put
 * of a changed copy and a scan cost.  The same idea is the Linux kernel's
 * two-message SHA-256 for dm-verity and fs-verity.
 *
 * libcrypto stays the reference: single blocks, incremental digests and
 * machines without SHA-NI go through it (hash.c).  Before this code is
 * used for the first time, dd_sha256_x2_ok() checks it against the
 * portable implementation on lengths that cover every padding case; if
 * they disagree (a miscompiled build, a broken CPU), it is never used.
 *
 * Layout: SHA-NI keeps the eight state words in two registers, ABEF and
 * CDGH.  The message schedule for rounds 16..63 is computed four words at
 * a time: W[t..t+3] = msg2(msg1(W[t-16..], W[t-12..]) + W[t-7..t-4],
 * W[t-4..t-1]).
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "hash/hash.h"
#include "hash/sha256_impl.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DD_HAVE_SHANI_CODE 1
#include <cpuid.h>
#include <immintrin.h>
#endif

#ifdef DD_HAVE_SHANI_CODE

#define DD_SHANI __attribute__((target("sha,sse4.1,ssse3")))

/* Two lanes' state: lane a in a_abef/a_cdgh, lane b likewise. */
struct dd_x2_state {
	__m128i a_abef, a_cdgh, b_abef, b_cdgh;
};

/* Big-endian 32-bit words of the message into lanes. */
DD_SHANI static inline __m128i dd_load_be(const uint8_t *p)
{
	const __m128i bswap32 = _mm_set_epi64x(0x0c0d0e0f08090a0bULL,
					       0x0405060700010203ULL);

	return _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)p), bswap32);
}

/* The next four schedule words from the previous sixteen, held in m[]
 * as a ring of four registers; m[g & 3] is overwritten. */
#define DD_SCHEDULE(m, g)                                                    \
	((m)[(g) & 3] = _mm_sha256msg2_epu32(                                \
		 _mm_add_epi32(                                              \
			 _mm_sha256msg1_epu32((m)[(g) & 3],                  \
					      (m)[((g) + 1) & 3]),           \
			 _mm_alignr_epi8((m)[((g) + 3) & 3],                 \
					 (m)[((g) + 2) & 3], 4)),            \
		 (m)[((g) + 3) & 3]))

/* Compresses n 64-byte blocks of each lane, interleaving their rounds. */
DD_SHANI static void dd_x2_blocks(struct dd_x2_state *st, const uint8_t *a,
				  const uint8_t *b, size_t n)
{
	__m128i a0 = st->a_abef, a1 = st->a_cdgh;
	__m128i b0 = st->b_abef, b1 = st->b_cdgh;

	for (; n > 0; n--, a += 64, b += 64) {
		const __m128i sa0 = a0, sa1 = a1, sb0 = b0, sb1 = b1;
		__m128i ma[4], mb[4];

#pragma GCC unroll 16
		for (int g = 0; g < 16; g++) {
			__m128i k, ta, tb;

			if (g < 4) {
				ma[g] = dd_load_be(a + 16 * g);
				mb[g] = dd_load_be(b + 16 * g);
			} else {
				DD_SCHEDULE(ma, g);
				DD_SCHEDULE(mb, g);
			}
			k = _mm_loadu_si128(
				(const __m128i *)&dd_sha256_k[4 * g]);
			ta = _mm_add_epi32(ma[g & 3], k);
			tb = _mm_add_epi32(mb[g & 3], k);
			/* rounds 4g, 4g+1 then 4g+2, 4g+3 */
			a1 = _mm_sha256rnds2_epu32(a1, a0, ta);
			b1 = _mm_sha256rnds2_epu32(b1, b0, tb);
			a0 = _mm_sha256rnds2_epu32(a0, a1,
						   _mm_shuffle_epi32(ta, 0x0e));
			b0 = _mm_sha256rnds2_epu32(b0, b1,
						   _mm_shuffle_epi32(tb, 0x0e));
		}
		a0 = _mm_add_epi32(a0, sa0);
		a1 = _mm_add_epi32(a1, sa1);
		b0 = _mm_add_epi32(b0, sb0);
		b1 = _mm_add_epi32(b1, sb1);
	}
	st->a_abef = a0;
	st->a_cdgh = a1;
	st->b_abef = b0;
	st->b_cdgh = b1;
}

/* H0..H7 in memory order (A B C D / E F G H) into ABEF and CDGH. */
DD_SHANI static void dd_x2_init(__m128i *abef, __m128i *cdgh)
{
	__m128i dcba = _mm_loadu_si128((const __m128i *)&dd_sha256_h0[0]);
	__m128i hgfe = _mm_loadu_si128((const __m128i *)&dd_sha256_h0[4]);
	__m128i cdab = _mm_shuffle_epi32(dcba, 0xb1);
	__m128i efgh = _mm_shuffle_epi32(hgfe, 0x1b);

	*abef = _mm_alignr_epi8(cdab, efgh, 8);
	*cdgh = _mm_blend_epi16(efgh, cdab, 0xf0);
}

/* A state a..h (host order) into ABEF and CDGH. */
DD_SHANI static void dd_x2_load(const uint32_t s[8], __m128i *abef,
				__m128i *cdgh)
{
	*abef = _mm_set_epi32((int)s[0], (int)s[1], (int)s[4], (int)s[5]);
	*cdgh = _mm_set_epi32((int)s[2], (int)s[3], (int)s[6], (int)s[7]);
}

/* ABEF and CDGH back to the big-endian digest. */
DD_SHANI static void dd_x2_digest(__m128i abef, __m128i cdgh,
				  uint8_t out[DD_HASH_SIZE])
{
	const __m128i bswap32 = _mm_set_epi64x(0x0c0d0e0f08090a0bULL,
					       0x0405060700010203ULL);
	__m128i feba = _mm_shuffle_epi32(abef, 0x1b);
	__m128i dchg = _mm_shuffle_epi32(cdgh, 0xb1);
	__m128i dcba = _mm_blend_epi16(feba, dchg, 0xf0);
	__m128i hgfe = _mm_alignr_epi8(dchg, feba, 8);

	_mm_storeu_si128((__m128i *)out, _mm_shuffle_epi8(dcba, bswap32));
	_mm_storeu_si128((__m128i *)(out + 16),
			 _mm_shuffle_epi8(hgfe, bswap32));
}

/* Two messages of any lengths: both lanes while both have blocks, then
 * the longer alone -- in both lanes, the second copy's result dropped
 * (one lane of two costs about what single-lane code does). */
DD_SHANI static void dd_sha256_x2v_shani(const void *a, size_t la,
					 const void *b, size_t lb,
					 uint8_t out_a[DD_HASH_SIZE],
					 uint8_t out_b[DD_HASH_SIZE])
{
	struct dd_x2_state st, one;
	dd_sha256_blocks ma, mb, *longer;
	size_t j = 0, both, ra, rb;

	dd_x2_init(&st.a_abef, &st.a_cdgh);
	st.b_abef = st.a_abef;
	st.b_cdgh = st.a_cdgh;
	dd_sha256_blocks_init(&ma, a, la);
	dd_sha256_blocks_init(&mb, b, lb);
	both = ma.sb_total < mb.sb_total ? ma.sb_total : mb.sb_total;
	while (j < both) {
		const uint8_t *pa = dd_sha256_blocks_at(&ma, j, &ra);
		const uint8_t *pb = dd_sha256_blocks_at(&mb, j, &rb);
		size_t n = ra < rb ? ra : rb;

		dd_x2_blocks(&st, pa, pb, n);
		j += n;
	}
	longer = ma.sb_total > both ? &ma : &mb;
	one.a_abef = one.b_abef = longer == &ma ? st.a_abef : st.b_abef;
	one.a_cdgh = one.b_cdgh = longer == &ma ? st.a_cdgh : st.b_cdgh;
	while (j < longer->sb_total) {
		const uint8_t *p = dd_sha256_blocks_at(longer, j, &ra);

		dd_x2_blocks(&one, p, p, ra);
		j += ra;
	}
	if (longer == &ma) {
		st.a_abef = one.a_abef;
		st.a_cdgh = one.a_cdgh;
	} else if (mb.sb_total > both) {
		st.b_abef = one.a_abef;
		st.b_cdgh = one.a_cdgh;
	}
	dd_x2_digest(st.a_abef, st.a_cdgh, out_a);
	dd_x2_digest(st.b_abef, st.b_cdgh, out_b);
}

/* A list of messages (m) or of parts (parts), two lanes busy throughout:
 * a lane whose message ends starts the next one at once, so only the
 * last message's tail runs alone.  Hashing content-defined blocks in
 * pairs (dd_sha256_x2v) left the longer one's tail alone in every pair:
 * on the FastCDC blocks of a 1 GiB image (128 KiB average) 16% more lane
 * steps than the bytes need (issue 17).  A part starts from its state
 * after its first sp_at blocks (sha256x16.c hands them over). */
DD_SHANI static void dd_xn_run(const dd_hash_msg *m, dd_sha256_part *parts,
			       size_t n)
{
	struct dd_x2_state st;
	dd_sha256_blocks own[2];
	const dd_sha256_blocks *lb[2] = { NULL, NULL };
	uint8_t *out[2] = { NULL, NULL };
	size_t at[2] = { 0, 0 }, next = 0;
	__m128i *abef[2] = { &st.a_abef, &st.b_abef };
	__m128i *cdgh[2] = { &st.a_cdgh, &st.b_cdgh };

	for (;;) {
		const uint8_t *pa, *pb;
		size_t ra, rb, k;

		/* a lane without a message takes the next one */
		for (int l = 0; l < 2; l++) {
			if (lb[l] || next == n)
				continue;
			if (parts) {
				dd_sha256_part *pt = &parts[next++];

				lb[l] = &pt->sp_b;
				at[l] = pt->sp_at;
				out[l] = pt->sp_out;
				dd_x2_load(pt->sp_st, abef[l], cdgh[l]);
			} else {
				const dd_hash_msg *mm = &m[next++];

				dd_sha256_blocks_init(&own[l], mm->hm_p,
						      mm->hm_len);
				lb[l] = &own[l];
				at[l] = 0;
				out[l] = mm->hm_out;
				dd_x2_init(abef[l], cdgh[l]);
			}
		}
		if (!lb[0] || !lb[1])
			break;
		pa = dd_sha256_blocks_at(lb[0], at[0], &ra);
		pb = dd_sha256_blocks_at(lb[1], at[1], &rb);
		k = ra < rb ? ra : rb;
		dd_x2_blocks(&st, pa, pb, k);
		for (int l = 0; l < 2; l++) {
			at[l] += k;
			if (at[l] < lb[l]->sb_total)
				continue;
			dd_x2_digest(*abef[l], *cdgh[l], out[l]);
			lb[l] = NULL;
		}
	}
	/* the last message alone: in both lanes, one result dropped */
	for (int l = 0; l < 2; l++) {
		struct dd_x2_state one;

		if (!lb[l])
			continue;
		one.a_abef = one.b_abef = *abef[l];
		one.a_cdgh = one.b_cdgh = *cdgh[l];
		while (at[l] < lb[l]->sb_total) {
			size_t r;
			const uint8_t *p = dd_sha256_blocks_at(lb[l], at[l], &r);

			dd_x2_blocks(&one, p, p, r);
			at[l] += r;
		}
		dd_x2_digest(one.a_abef, one.a_cdgh, out[l]);
	}
}

DD_SHANI static void dd_sha256_xn_shani(const dd_hash_msg *m, size_t n)
{
	dd_xn_run(m, NULL, n);
}

DD_SHANI static void dd_sha256_x2_shani(const void *a, const void *b,
					size_t len, uint8_t out_a[DD_HASH_SIZE],
					uint8_t out_b[DD_HASH_SIZE])
{
	dd_sha256_x2v_shani(a, len, b, len, out_a, out_b);
}

static bool dd_cpu_has_shani(void)
{
	unsigned eax, ebx, ecx, edx;

	if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx))
		return false;
	if (!(ecx & bit_SSSE3) || !(ecx & bit_SSE4_1))
		return false;
	if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx))
		return false;
	return (ebx & bit_SHA) != 0;
}

#endif /* DD_HAVE_SHANI_CODE */

/* Known answers against the portable code: lengths around every padding
 * boundary and a few whole blocks, the two lanes differing in content,
 * and in length too (each length against the next, both ways); lists of
 * 0 to 13 of those lengths. */
static bool dd_sha256_x2_selftest(void)
{
#ifdef DD_HAVE_SHANI_CODE
	static const size_t lens[] = { 0, 1, 55, 56, 63, 64, 65, 119, 120,
				       127, 128, 1000, 4096 };
	const size_t nlens = sizeof(lens) / sizeof(lens[0]);
	uint8_t *buf = malloc(2 * 4096);
	bool ok = buf != NULL;

	for (size_t i = 0; buf && i < 2 * 4096; i++)
		buf[i] = (uint8_t)(i * 131 + (i >> 8));
	for (size_t i = 0; ok && i < 2 * nlens; i++) {
		size_t la = lens[i % nlens];
		size_t lb = i < nlens ? la : lens[(i + 1) % nlens];
		uint8_t xa[DD_HASH_SIZE], xb[DD_HASH_SIZE];
		uint8_t ra[DD_HASH_SIZE], rb[DD_HASH_SIZE];

		dd_sha256_x2v_shani(buf, la, buf + 4096, lb, xa, xb);
		dd_sha256_sw(buf, la, ra);
		dd_sha256_sw(buf + 4096, lb, rb);
		ok = !memcmp(xa, ra, DD_HASH_SIZE) &&
		     !memcmp(xb, rb, DD_HASH_SIZE);
		dd_sha256_x2v_shani(buf, lb, buf + 4096, la, xa, xb);
		dd_sha256_sw(buf, lb, ra);
		dd_sha256_sw(buf + 4096, la, rb);
		ok = ok && !memcmp(xa, ra, DD_HASH_SIZE) &&
		     !memcmp(xb, rb, DD_HASH_SIZE);
	}
	/* the list: every length once, lanes taking them as they free up */
	for (size_t k = 0; ok && k <= nlens; k++) {
		dd_hash_msg m[sizeof(lens) / sizeof(lens[0])] = { { 0 } };
		uint8_t x[sizeof(lens) / sizeof(lens[0])][DD_HASH_SIZE];
		uint8_t r[DD_HASH_SIZE];

		for (size_t i = 0; i < k; i++)
			m[i] = (dd_hash_msg){ buf + 7 * i, lens[(i + k) % nlens],
					      x[i] };
		dd_sha256_xn_shani(m, k);
		for (size_t i = 0; ok && i < k; i++) {
			dd_sha256_sw(m[i].hm_p, m[i].hm_len, r);
			ok = !memcmp(x[i], r, DD_HASH_SIZE);
		}
	}
	free(buf);
	return ok;
#else
	return false;
#endif
}

static pthread_once_t dd_x2_once = PTHREAD_ONCE_INIT;
static bool dd_x2_usable;

static void dd_x2_probe(void)
{
#ifdef DD_HAVE_SHANI_CODE
	dd_x2_usable = dd_cpu_has_shani() && dd_sha256_x2_selftest();
#endif
}

bool dd_sha256_x2_ok(void)
{
	pthread_once(&dd_x2_once, dd_x2_probe);
	return dd_x2_usable;
}

void dd_sha256_x2(const void *a, const void *b, size_t len,
		  uint8_t out_a[DD_HASH_SIZE], uint8_t out_b[DD_HASH_SIZE])
{
#ifdef DD_HAVE_SHANI_CODE
	if (dd_sha256_x2_ok()) {
		dd_sha256_x2_shani(a, b, len, out_a, out_b);
		return;
	}
#endif
	dd_sha256(a, len, out_a);
	dd_sha256(b, len, out_b);
}

void dd_sha256_xn(const dd_hash_msg *m, size_t n)
{
	if (n >= DD_SHA256_X16_MIN && dd_sha256_x16_ok()) {
		dd_sha256_x16_list(m, n);
		return;
	}
#ifdef DD_HAVE_SHANI_CODE
	if (dd_sha256_x2_ok()) {
		dd_sha256_xn_shani(m, n);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		dd_sha256(m[i].hm_p, m[i].hm_len, m[i].hm_out);
}

void dd_sha256_x2v(const void *a, size_t la, const void *b, size_t lb,
		   uint8_t out_a[DD_HASH_SIZE], uint8_t out_b[DD_HASH_SIZE])
{
#ifdef DD_HAVE_SHANI_CODE
	if (dd_sha256_x2_ok()) {
		dd_sha256_x2v_shani(a, la, b, lb, out_a, out_b);
		return;
	}
#endif
	dd_sha256(a, la, out_a);
	dd_sha256(b, lb, out_b);
}

void dd_sha256_parts_finish(dd_sha256_part *parts, size_t n)
{
#ifdef DD_HAVE_SHANI_CODE
	if (dd_sha256_x2_ok()) {
		dd_xn_run(NULL, parts, n);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++) {
		dd_sha256_part *pt = &parts[i];

		for (; pt->sp_at < pt->sp_b.sb_total; pt->sp_at++) {
			size_t run;

			dd_sha256_sw_block(pt->sp_st, dd_sha256_blocks_at(
				&pt->sp_b, pt->sp_at, &run));
		}
		dd_sha256_state_out(pt->sp_st, pt->sp_out);
	}
}
