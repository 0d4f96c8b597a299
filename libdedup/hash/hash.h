/*
 * hash.h -- block hashing.  The only includer of OpenSSL headers.
 *
 * Blocks are keyed by SHA-256 of their logical bytes.  DD_HASH_TEST_WEAK16
 * keeps only the first 2 bytes of SHA-256 (the rest zero): a test-only
 * hash that forces collisions so verify mode can be tested; a store
 * records which one it uses (format/store.md).
 */
#ifndef DD_HASH_HASH_H
#define DD_HASH_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DD_HASH_SIZE 32

enum dd_hash_kind {
	DD_HASH_SHA256 = 1,
	DD_HASH_TEST_WEAK16 = 0x7f01
};

typedef struct dd_hasher dd_hasher;

/* One hasher per thread; it keeps its digest context between calls. */
int dd_hasher_new(dd_hasher **out, int kind);
void dd_hasher_free(dd_hasher *h);
void dd_hasher_sum(dd_hasher *h, const void *buf, size_t len,
		   uint8_t out[DD_HASH_SIZE]);

/* One message of a list: its bytes, and where its digest goes. */
typedef struct dd_hash_msg {
	const void *hm_p;
	size_t hm_len;
	uint8_t *hm_out;
} dd_hash_msg;

/* Each of n messages of any lengths: sixteen AVX-512 lanes (sha256x16.c)
 * for lists of at least 9 where the CPU has them, else two SHA-NI lanes
 * (sha256x2.c), each lane busy until the list's last messages. */
void dd_hasher_sum_list(dd_hasher *h, const dd_hash_msg *m, size_t n);
/* How many messages a list needs to keep every lane of the code
 * dd_hasher_sum_list would use busy here: 16 with the AVX-512 lanes, else
 * 2.  Callers that choose how many blocks to list together ask it. */
size_t dd_hasher_list_width(void);

/* Incremental SHA-256 (always the real one): digests of whole images. */
typedef struct dd_sha256_ctx dd_sha256_ctx;
int dd_sha256_new(dd_sha256_ctx **out);
void dd_sha256_update(dd_sha256_ctx *c, const void *buf, size_t len);
void dd_sha256_final(dd_sha256_ctx *c, uint8_t out[DD_HASH_SIZE]);
void dd_sha256_free(dd_sha256_ctx *c);

/* One-shot SHA-256. */
void dd_sha256(const void *buf, size_t len, uint8_t out[DD_HASH_SIZE]);

/* The same through a portable implementation that needs no library and
 * cannot fail; used when libcrypto does, and by tests. */
void dd_sha256_sw(const void *buf, size_t len, uint8_t out[DD_HASH_SIZE]);

/* SHA-256 of two buffers of the same length, their rounds interleaved on
 * the SHA extensions (sha256x2.c); two dd_sha256 calls where those are
 * missing or failed their self-test.  dd_sha256_x2_ok says which. */
bool dd_sha256_x2_ok(void);
void dd_sha256_x2(const void *a, const void *b, size_t len,
		  uint8_t out_a[DD_HASH_SIZE], uint8_t out_b[DD_HASH_SIZE]);
/* The same for two buffers of different lengths. */
void dd_sha256_x2v(const void *a, size_t la, const void *b, size_t lb,
		   uint8_t out_a[DD_HASH_SIZE], uint8_t out_b[DD_HASH_SIZE]);

/* The same for a list of messages (dd_hasher_sum_list). */
void dd_sha256_xn(const dd_hash_msg *m, size_t n);

/* Lower-case hex of a hash into buf (>= 65 bytes). */
void dd_hash_hex(const uint8_t hash[DD_HASH_SIZE], char *buf);

#endif
