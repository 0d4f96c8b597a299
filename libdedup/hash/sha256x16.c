/*
 * sha256x16.c -- SHA-256 of sixteen messages at once, one in each 32-bit
 * lane of the AVX-512 registers.
 *
 * Why: the SHA-NI code (sha256x2.c) gains from its second lane only
 * where sha256rnds2 leaves the SHA unit idle between dependent rounds.
 * On the Intel Xeon this project now runs on it does not: two lanes hash
 * what one does, about 0.9 GB/s a core (tests/bench/README.md, "The
 * commit path's CPU").  Sixteen lanes of plain vector arithmetic do not
 * wait on one another: rotations are one instruction (vprord), Ch, Maj
 * and the three-way XORs one each (vpternlogd), and lists of 4 KiB blocks
 * hash about 1.75 times the bytes a core of libcrypto's SHA-NI does
 * (bench_hash.sh; 2.2 times in a bare loop over equal blocks).  Small
 * blocks come in lists of equal lengths, which is what sixteen lanes
 * need; it is the technique of
 * Intel's multi-buffer SHA (isa-l_crypto) and of Linux's former
 * sha256-mb.
 *
 * Layout: lane l of s[i] is word i (a..h) of lane l's state, and lane l
 * of w[t] is word t of the block lane l compresses; the sixteen blocks
 * are loaded one per register and transposed (16 x 16 words, in four
 * passes of shuffles).
 *
 * Lanes: each takes the next message of the list as soon as its own
 * ends, so lengths may differ.  A lane without a message compresses a
 * block of zeros whose result nobody reads.  Once the list has no
 * message left and only a few lanes are busy, sixteen lanes would run
 * mostly idle: the busy ones go, part way through, to two SHA-NI lanes
 * (dd_sha256_parts_finish), where that code is usable.
 *
 * Before first use dd_sha256_x16_ok() checks this code against
 * one-message SHA-256 (dd_sha256) on lengths that cover every padding
 * case and on lists that hand over; if any digest differs it is never
 * used.  Where the SHA-NI code is usable too, it then times both once and
 * keeps the faster (dd_x16_faster).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hash/hash.h"
#include "hash/sha256_impl.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DD_HAVE_X16_CODE 1
#include <immintrin.h>
#endif

/* Busy lanes at or below which the list's end goes to two SHA-NI lanes:
 * sixteen lanes cost about what 16 / 2 of those do. */
#define DD_X16_HANDOFF 7

#ifdef DD_HAVE_X16_CODE

#define DD_AVX512 __attribute__((target("avx512f,avx512bw")))

/* r[0..15], a block of 16 words per register, into w[0..15], word t of
 * every block per register. */
DD_AVX512 static inline void dd_x16_transpose(__m512i r[16])
{
	__m512i t[16];

	for (int i = 0; i < 16; i += 2) {
		t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
		t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
	}
	for (int i = 0; i < 16; i += 4) {
		r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
		r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
		r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
		r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
	}
	for (int i = 0; i < 16; i += 8)
		for (int j = 0; j < 4; j++) {
			t[i + j] = _mm512_shuffle_i32x4(r[i + j], r[i + j + 4],
						       0x88);
			t[i + j + 4] = _mm512_shuffle_i32x4(r[i + j],
							   r[i + j + 4], 0xdd);
		}
	for (int j = 0; j < 8; j++) {
		r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
		r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd);
	}
}

#define DD_ROR(x, n) _mm512_ror_epi32((x), (n))
#define DD_XOR3(a, b, c) _mm512_ternarylogic_epi32((a), (b), (c), 0x96)
#define DD_CH(e, f, g) _mm512_ternarylogic_epi32((e), (f), (g), 0xca)
#define DD_MAJ(a, b, c) _mm512_ternarylogic_epi32((a), (b), (c), 0xe8)

/* One 64-byte block of each lane, p[l] lane l's, into the state s. */
DD_AVX512 static void dd_x16_block(__m512i s[8], const uint8_t *const p[16])
{
	const __m512i bswap32 = _mm512_set4_epi32(0x0c0d0e0f, 0x08090a0b,
						  0x04050607, 0x00010203);
	__m512i w[16], a = s[0], b = s[1], c = s[2], d = s[3];
	__m512i e = s[4], f = s[5], g = s[6], h = s[7];

	for (int l = 0; l < 16; l++)
		w[l] = _mm512_loadu_si512((const void *)p[l]);
	dd_x16_transpose(w);
	for (int t = 0; t < 16; t++)
		w[t] = _mm512_shuffle_epi8(w[t], bswap32);
#pragma GCC unroll 64
	for (int t = 0; t < 64; t++) {
		__m512i wt, t1, t2;

		if (t < 16) {
			wt = w[t];
		} else {
			/* w[t & 15] holds W[t - 16] until overwritten */
			__m512i w15 = w[(t - 15) & 15], w2 = w[(t - 2) & 15];
			__m512i s0 = DD_XOR3(DD_ROR(w15, 7), DD_ROR(w15, 18),
					     _mm512_srli_epi32(w15, 3));
			__m512i s1 = DD_XOR3(DD_ROR(w2, 17), DD_ROR(w2, 19),
					     _mm512_srli_epi32(w2, 10));

			wt = _mm512_add_epi32(
				_mm512_add_epi32(w[t & 15], s0),
				_mm512_add_epi32(w[(t - 7) & 15], s1));
			w[t & 15] = wt;
		}
		t1 = _mm512_add_epi32(
			_mm512_add_epi32(h, _mm512_set1_epi32(
						    (int)dd_sha256_k[t])),
			wt);
		t1 = _mm512_add_epi32(t1, DD_XOR3(DD_ROR(e, 6), DD_ROR(e, 11),
						  DD_ROR(e, 25)));
		t1 = _mm512_add_epi32(t1, DD_CH(e, f, g));
		t2 = _mm512_add_epi32(DD_XOR3(DD_ROR(a, 2), DD_ROR(a, 13),
					      DD_ROR(a, 22)),
				      DD_MAJ(a, b, c));
		h = g, g = f, f = e, e = _mm512_add_epi32(d, t1);
		d = c, c = b, b = a, a = _mm512_add_epi32(t1, t2);
	}
	s[0] = _mm512_add_epi32(s[0], a), s[1] = _mm512_add_epi32(s[1], b);
	s[2] = _mm512_add_epi32(s[2], c), s[3] = _mm512_add_epi32(s[3], d);
	s[4] = _mm512_add_epi32(s[4], e), s[5] = _mm512_add_epi32(s[5], f);
	s[6] = _mm512_add_epi32(s[6], g), s[7] = _mm512_add_epi32(s[7], h);
}

/* What a lane works on. */
struct dd_x16_lane {
	dd_sha256_blocks xl_b;
	size_t xl_at;             /* blocks compressed */
	uint8_t *xl_out;
};

/* A 64-byte block for lanes without a message; what it gives is unread. */
static const uint8_t dd_x16_idle[64] __attribute__((aligned(64)));

/* Lane ln takes the list's next message, if there is one. */
static bool dd_x16_take(struct dd_x16_lane *ln, const dd_hash_msg *m,
			size_t n, size_t *next)
{
	if (*next == n)
		return false;
	dd_sha256_blocks_init(&ln->xl_b, m[*next].hm_p, m[*next].hm_len);
	ln->xl_at = 0;
	ln->xl_out = m[(*next)++].hm_out;
	return true;
}

/* The list, handing its end over at or below `handoff` busy lanes. */
DD_AVX512 static void dd_x16_run(const dd_hash_msg *m, size_t n,
				 unsigned handoff)
{
	struct dd_x16_lane lane[16];
	uint32_t st[8][16];
	const uint8_t *p[16];
	__m512i s[8];
	uint32_t busy = 0;
	size_t next = 0;

	for (int i = 0; i < 8; i++)
		s[i] = _mm512_set1_epi32((int)dd_sha256_h0[i]);
	for (int l = 0; l < 16; l++) {
		p[l] = dd_x16_idle;
		if (dd_x16_take(&lane[l], m, n, &next))
			busy |= 1u << l;
	}
	while (busy) {
		uint32_t done = 0, fresh = 0;

		if (next == n &&
		    (unsigned)__builtin_popcount(busy) <= handoff)
			break;
		for (uint32_t b = busy; b; b &= b - 1) {
			int l = __builtin_ctz(b);
			size_t run;

			p[l] = dd_sha256_blocks_at(&lane[l].xl_b,
						   lane[l].xl_at, &run);
		}
		dd_x16_block(s, p);
		for (uint32_t b = busy; b; b &= b - 1) {
			int l = __builtin_ctz(b);

			if (++lane[l].xl_at == lane[l].xl_b.sb_total)
				done |= 1u << l;
		}
		if (!done)
			continue;
		for (int i = 0; i < 8; i++)
			_mm512_storeu_si512((void *)st[i], s[i]);
		for (uint32_t b = done; b; b &= b - 1) {
			int l = __builtin_ctz(b);
			uint32_t col[8];

			for (int i = 0; i < 8; i++)
				col[i] = st[i][l];
			dd_sha256_state_out(col, lane[l].xl_out);
			busy &= ~(1u << l);
			p[l] = dd_x16_idle;
			if (!dd_x16_take(&lane[l], m, n, &next))
				continue;
			busy |= 1u << l;
			fresh |= 1u << l;
		}
		for (int i = 0; fresh && i < 8; i++)
			s[i] = _mm512_mask_mov_epi32(
				s[i], (__mmask16)fresh,
				_mm512_set1_epi32((int)dd_sha256_h0[i]));
	}
	if (busy) {
		dd_sha256_part part[16];
		size_t np = 0;

		for (int i = 0; i < 8; i++)
			_mm512_storeu_si512((void *)st[i], s[i]);
		for (uint32_t b = busy; b; b &= b - 1) {
			int l = __builtin_ctz(b);
			dd_sha256_part *pt = &part[np++];

			for (int i = 0; i < 8; i++)
				pt->sp_st[i] = st[i][l];
			pt->sp_b = lane[l].xl_b;
			pt->sp_at = lane[l].xl_at;
			pt->sp_out = lane[l].xl_out;
		}
		dd_sha256_parts_finish(part, np);
	}
}

static bool dd_cpu_has_avx512(void)
{
	/* both check that the OS saves the registers (XCR0) too */
	return __builtin_cpu_supports("avx512f") &&
	       __builtin_cpu_supports("avx512bw");
}

#endif /* DD_HAVE_X16_CODE */

/* Known answers against one-message SHA-256, dd_sha256 (OpenSSL's, or the
 * portable code where libcrypto fails; the portable code alone cost each
 * process about 12 ms here, before its first block was hashed): lists of
 * every length around the padding boundaries, each list rotated so that
 * lanes start and end at different blocks; a long message among short
 * ones (the hand-over); and 40 equal 4 KiB blocks, the common case. */
static bool dd_sha256_x16_selftest(void)
{
#ifdef DD_HAVE_X16_CODE
	static const size_t lens[] = { 0, 1, 55, 56, 63, 64, 65, 119, 120,
				       127, 128, 1000, 4096, 5000 };
	enum { NL = sizeof(lens) / sizeof(lens[0]), NM = 40, BUF = 4 * 4096 };
	dd_hash_msg msg[NM];
	uint8_t (*x)[DD_HASH_SIZE] = malloc(NM * DD_HASH_SIZE);
	uint8_t (*r)[DD_HASH_SIZE] = malloc(NM * DD_HASH_SIZE);
	uint8_t *buf = malloc(BUF);
	bool ok = buf && x && r;

	for (size_t i = 0; buf && i < BUF; i++)
		buf[i] = (uint8_t)(i * 131 + (i >> 8));
	for (size_t rot = 0; ok && rot < NL + 3; rot++) {
		size_t n = rot < NL ? NM : rot - NL + 16; /* 16, 17, 18 too */

		for (size_t i = 0; i < n; i++) {
			size_t len = lens[(i + rot) % NL];

			/* one long message, late in the list: handed over */
			if (rot % 3 == 1 && i == n - 5)
				len = 2 * 4096 + 77;
			msg[i] = (dd_hash_msg){ buf + (i * 37) % 4096, len,
						x[i] };
			dd_sha256(msg[i].hm_p, len, r[i]);
		}
		for (unsigned h = 0; ok && h <= DD_X16_HANDOFF; h +=
							DD_X16_HANDOFF) {
			dd_x16_run(msg, n, h);
			ok = !memcmp(x, r, n * DD_HASH_SIZE);
		}
	}
	for (size_t i = 0; ok && i < NM; i++) {
		msg[i] = (dd_hash_msg){ buf + 64 * i, 4096, x[i] };
		dd_sha256(msg[i].hm_p, 4096, r[i]);
	}
	if (ok) {
		dd_x16_run(msg, NM, DD_X16_HANDOFF);
		ok = !memcmp(x, r, NM * DD_HASH_SIZE);
	}
	free(buf);
	free(x);
	free(r);
	return ok;
#else
	return false;
#endif
}

#ifdef DD_HAVE_X16_CODE
static double dd_x16_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Do sixteen lanes beat two SHA-NI lanes on this CPU?  On the Intel Xeon
 * measured here by 1.6-2.2 times; where SHA-NI is fast and AVX-512 runs
 * at half width (AMD's Zen 4) they may not.  Timed once, on a list of 32
 * blocks of 4 KiB, best of five each way, alternated; ties keep SHA-NI. */
static bool dd_x16_faster(void)
{
	enum { N = 32, LEN = 4096 };
	uint8_t *buf = malloc(N * LEN), out[N][DD_HASH_SIZE];
	dd_hash_msg m[N];
	dd_sha256_part *part = malloc(N * sizeof(*part));
	double best16 = 1e9, best2 = 1e9;

	if (!buf || !part) {
		free(buf);
		free(part);
		return false;
	}
	memset(buf, 0x5c, N * LEN);
	for (size_t i = 0; i < N; i++)
		m[i] = (dd_hash_msg){ buf + i * LEN, LEN, out[i] };
	for (int round = 0; round < 6; round++) {
		double t0 = dd_x16_now(), t1, t2;

		dd_x16_run(m, N, DD_X16_HANDOFF);
		t1 = dd_x16_now();
		for (size_t i = 0; i < N; i++) {
			memcpy(part[i].sp_st, dd_sha256_h0, sizeof(part[i].sp_st));
			dd_sha256_blocks_init(&part[i].sp_b, m[i].hm_p, LEN);
			part[i].sp_at = 0;
			part[i].sp_out = out[i];
		}
		dd_sha256_parts_finish(part, N);
		t2 = dd_x16_now();
		if (round == 0)
			continue;   /* both warm: code, data, clocks */
		best16 = t1 - t0 < best16 ? t1 - t0 : best16;
		best2 = t2 - t1 < best2 ? t2 - t1 : best2;
	}
	free(buf);
	free(part);
	return best16 < best2;
}
#endif

static pthread_once_t dd_x16_once = PTHREAD_ONCE_INIT;
static bool dd_x16_usable;

static void dd_x16_probe(void)
{
#ifdef DD_HAVE_X16_CODE
	/* DEDUP_SHA256_X16=0: never used, =1: used without the timing (both
	 * for tests and benchmarks); self-tested either way */
	const char *mode = getenv("DEDUP_SHA256_X16");

	if (mode && !strcmp(mode, "0"))
		return;
	dd_x16_usable = dd_cpu_has_avx512() && dd_sha256_x16_selftest();
	if (dd_x16_usable && !(mode && !strcmp(mode, "1")) &&
	    dd_sha256_x2_ok())
		dd_x16_usable = dd_x16_faster();
#endif
}

bool dd_sha256_x16_ok(void)
{
	pthread_once(&dd_x16_once, dd_x16_probe);
	return dd_x16_usable;
}

void dd_sha256_x16_list(const dd_hash_msg *m, size_t n)
{
#ifdef DD_HAVE_X16_CODE
	if (dd_sha256_x16_ok()) {
		dd_x16_run(m, n, dd_sha256_x2_ok() ? DD_X16_HANDOFF : 0);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		dd_sha256(m[i].hm_p, m[i].hm_len, m[i].hm_out);
}
