/*
 * hash.c -- block hashing through libcrypto EVP.  The only includer of
 * <openssl/...> (DESIGN.md "Architecture").
 *
 * The SHA-256 EVP_MD is fetched once per process (EVP_MD_fetch is a
 * provider lookup, too slow to repeat per block) and each hasher keeps one
 * EVP_MD_CTX that EVP_DigestInit_ex2 resets between blocks, so hashing a
 * block allocates nothing.  dd_sha256 keeps one such context per thread.
 *
 * A block's hash is its identity: a wrong hash could make two different
 * blocks share storage.  The sum functions cannot report an error, so if
 * libcrypto ever fails on an already initialised context (it does not for
 * SHA-256 with the default provider), they compute the digest with the
 * portable implementation at the end of this file instead.
 */
#include <pthread.h>
#include <string.h>

#include <openssl/evp.h>

#include "dedup.h"
#include "common/alloc.h"
#include "hash/hash.h"
#include "hash/sha256_impl.h"

struct dd_hasher {
	int dh_kind;
	EVP_MD_CTX *dh_ctx;
};

struct dd_sha256_ctx {
	EVP_MD_CTX *dsc_ctx;
	int dsc_failed;   /* an EVP call failed: the digest is unknown */
};

static EVP_MD *dd_sha256_md;
static pthread_once_t dd_sha256_once = PTHREAD_ONCE_INIT;
static pthread_key_t dd_sha256_key;
static int dd_sha256_key_ok;

static void dd_sha256_ctx_destroy(void *p)
{
	EVP_MD_CTX_free(p);
}

static void dd_sha256_init_once(void)
{
	dd_sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
	dd_sha256_key_ok =
		pthread_key_create(&dd_sha256_key, dd_sha256_ctx_destroy) == 0;
}

static const EVP_MD *dd_md(void)
{
	pthread_once(&dd_sha256_once, dd_sha256_init_once);
	return dd_sha256_md;
}

/* A context ready for EVP_DigestInit_ex2; the first init allocates the
 * provider state, later ones only reset it. */
static EVP_MD_CTX *dd_evp_ctx_new(void)
{
	const EVP_MD *md = dd_md();
	EVP_MD_CTX *ctx;

	if (!md)
		return NULL;
	ctx = EVP_MD_CTX_new();
	if (ctx && EVP_DigestInit_ex2(ctx, md, NULL) != 1) {
		EVP_MD_CTX_free(ctx);
		ctx = NULL;
	}
	return ctx;
}

static int dd_evp_sum(EVP_MD_CTX *ctx, const void *buf, size_t len,
		      uint8_t out[DD_HASH_SIZE])
{
	unsigned n = 0;

	if (!ctx || EVP_DigestInit_ex2(ctx, dd_md(), NULL) != 1 ||
	    EVP_DigestUpdate(ctx, buf, len) != 1 ||
	    EVP_DigestFinal_ex(ctx, out, &n) != 1 || n != DD_HASH_SIZE)
		return -1;
	return 0;
}

static void dd_sha256_with(EVP_MD_CTX *ctx, const void *buf, size_t len,
			   uint8_t out[DD_HASH_SIZE])
{
	if (dd_evp_sum(ctx, buf, len, out) != 0)
		dd_sha256_sw(buf, len, out);
}

int dd_hasher_new(dd_hasher **out, int kind)
{
	dd_hasher *h;

	if (!out || (kind != DD_HASH_SHA256 && kind != DD_HASH_TEST_WEAK16))
		return DD_EINVAL;
	if (!dd_md())
		return DD_ENOTSUP;
	h = dd_calloc(1, sizeof(*h));
	if (!h)
		return DD_ENOMEM;
	h->dh_kind = kind;
	h->dh_ctx = dd_evp_ctx_new();
	if (!h->dh_ctx) {
		dd_free(h);
		return DD_ENOMEM;
	}
	*out = h;
	return DD_OK;
}

void dd_hasher_free(dd_hasher *h)
{
	if (!h)
		return;
	EVP_MD_CTX_free(h->dh_ctx);
	dd_free(h);
}

void dd_hasher_sum(dd_hasher *h, const void *buf, size_t len,
		   uint8_t out[DD_HASH_SIZE])
{
	dd_sha256_with(h->dh_ctx, buf, len, out);
	if (h->dh_kind == DD_HASH_TEST_WEAK16)
		/* 16 bits left: collisions within a few hundred blocks. */
		memset(out + 2, 0, DD_HASH_SIZE - 2);
}

void dd_hasher_sum_list(dd_hasher *h, const dd_hash_msg *m, size_t n)
{
	if ((n >= DD_SHA256_X16_MIN && dd_sha256_x16_ok()) || dd_sha256_x2_ok())
		dd_sha256_xn(m, n);
	else
		for (size_t i = 0; i < n; i++)
			dd_sha256_with(h->dh_ctx, m[i].hm_p, m[i].hm_len,
				       m[i].hm_out);
	if (h->dh_kind == DD_HASH_TEST_WEAK16)
		for (size_t i = 0; i < n; i++)
			memset(m[i].hm_out + 2, 0, DD_HASH_SIZE - 2);
}

size_t dd_hasher_list_width(void)
{
	return dd_sha256_x16_ok() ? 16 : 2;
}

void dd_sha256(const void *buf, size_t len, uint8_t out[DD_HASH_SIZE])
{
	EVP_MD_CTX *ctx = NULL;

	if (dd_md() && dd_sha256_key_ok) {
		ctx = pthread_getspecific(dd_sha256_key);
		if (!ctx) {
			ctx = dd_evp_ctx_new();
			if (ctx && pthread_setspecific(dd_sha256_key, ctx) != 0) {
				EVP_MD_CTX_free(ctx);
				ctx = NULL;
			}
		}
	}
	dd_sha256_with(ctx, buf, len, out);
}

int dd_sha256_new(dd_sha256_ctx **out)
{
	dd_sha256_ctx *c;

	if (!out)
		return DD_EINVAL;
	if (!dd_md())
		return DD_ENOTSUP;
	c = dd_calloc(1, sizeof(*c));
	if (!c)
		return DD_ENOMEM;
	c->dsc_ctx = dd_evp_ctx_new();
	if (!c->dsc_ctx) {
		dd_free(c);
		return DD_ENOMEM;
	}
	*out = c;
	return DD_OK;
}

void dd_sha256_update(dd_sha256_ctx *c, const void *buf, size_t len)
{
	if (!c->dsc_failed && EVP_DigestUpdate(c->dsc_ctx, buf, len) != 1)
		c->dsc_failed = 1;
}

void dd_sha256_final(dd_sha256_ctx *c, uint8_t out[DD_HASH_SIZE])
{
	unsigned n = 0;

	/* The bytes already fed are gone, so a failure cannot be repaired
	 * here: the digest comes out all zero, which no real input has in
	 * practice, rather than as a plausible wrong value. */
	if (c->dsc_failed || EVP_DigestFinal_ex(c->dsc_ctx, out, &n) != 1 ||
	    n != DD_HASH_SIZE)
		memset(out, 0, DD_HASH_SIZE);
	/* Ready for another image, as a fresh context would be. */
	c->dsc_failed = EVP_DigestInit_ex2(c->dsc_ctx, dd_md(), NULL) != 1;
}

void dd_sha256_free(dd_sha256_ctx *c)
{
	if (!c)
		return;
	EVP_MD_CTX_free(c->dsc_ctx);
	dd_free(c);
}

void dd_hash_hex(const uint8_t hash[DD_HASH_SIZE], char *buf)
{
	static const char hex[] = "0123456789abcdef";

	for (int i = 0; i < DD_HASH_SIZE; i++) {
		buf[2 * i] = hex[hash[i] >> 4];
		buf[2 * i + 1] = hex[hash[i] & 15];
	}
	buf[2 * DD_HASH_SIZE] = '\0';
}

/* ---- portable SHA-256 (FIPS 180-4) ---------------------------------------*/

const uint32_t dd_sha256_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
	0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
	0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
	0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
	0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
	0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
	0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

const uint32_t dd_sha256_h0[8] = {
	0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
	0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

size_t dd_sha256_pad(const uint8_t *p, size_t len, uint8_t tail[128])
{
	size_t rest = len % 64, nblk = rest < 56 ? 1 : 2;
	uint64_t bits = (uint64_t)len * 8;

	memset(tail, 0, 128);
	if (rest) /* p may be NULL when len is 0 */
		memcpy(tail, p + (len - rest), rest);
	tail[rest] = 0x80;
	for (int i = 0; i < 8; i++)
		tail[nblk * 64 - 1 - i] = (uint8_t)(bits >> (8 * i));
	return nblk;
}

static uint32_t dd_ror(uint32_t x, int n)
{
	return (x >> n) | (x << (32 - n));
}

void dd_sha256_sw_block(uint32_t s[8], const uint8_t *p)
{
	uint32_t w[64], a, b, c, d, e, f, g, h;

	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = dd_ror(w[i - 15], 7) ^ dd_ror(w[i - 15], 18) ^
			      (w[i - 15] >> 3);
		uint32_t s1 = dd_ror(w[i - 2], 17) ^ dd_ror(w[i - 2], 19) ^
			      (w[i - 2] >> 10);

		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	a = s[0], b = s[1], c = s[2], d = s[3];
	e = s[4], f = s[5], g = s[6], h = s[7];
	for (int i = 0; i < 64; i++) {
		uint32_t t1 = h + (dd_ror(e, 6) ^ dd_ror(e, 11) ^ dd_ror(e, 25)) +
			      ((e & f) ^ (~e & g)) + dd_sha256_k[i] + w[i];
		uint32_t t2 = (dd_ror(a, 2) ^ dd_ror(a, 13) ^ dd_ror(a, 22)) +
			      ((a & b) ^ (a & c) ^ (b & c));

		h = g, g = f, f = e, e = d + t1;
		d = c, c = b, b = a, a = t1 + t2;
	}
	s[0] += a, s[1] += b, s[2] += c, s[3] += d;
	s[4] += e, s[5] += f, s[6] += g, s[7] += h;
}

void dd_sha256_sw(const void *buf, size_t len, uint8_t out[DD_HASH_SIZE])
{
	uint32_t s[8];
	const uint8_t *p = buf;
	uint8_t tail[128];
	size_t nblk;

	memcpy(s, dd_sha256_h0, sizeof(s));
	for (size_t i = 0; i < len / 64; i++)
		dd_sha256_sw_block(s, p + 64 * i);
	nblk = dd_sha256_pad(p, len, tail);
	for (size_t i = 0; i < nblk; i++)
		dd_sha256_sw_block(s, tail + 64 * i);
	dd_sha256_state_out(s, out);
}
