/*
 * bench_hash.c -- SHA-256 throughput on one thread: libcrypto's EVP (one
 * buffer at a time, what `openssl speed -evp sha256` measures) against
 * libdedup's two-lane SHA-NI code (hash/sha256x2.c), and lists of blocks
 * (hash/sha256x16.c's sixteen AVX-512 lanes where usable), on the same
 * buffers.
 * Built and run by bench_hash.sh.
 *
 *   bench_hash BLOCK_SIZE SECONDS
 */
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hash/hash.h"

enum { NBUF = 64, LIST = 32 }; /* 64 blocks: 8 MiB at 128 KiB, beyond L2 like real data */

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	size_t bs = argc > 1 ? strtoul(argv[1], NULL, 0) : 131072;
	double secs = argc > 2 ? atof(argv[2]) : 2.0, t0, t;
	uint8_t *buf = malloc(bs * NBUF), h1[32], h2[32];
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	EVP_MD *md = EVP_MD_fetch(NULL, "SHA256", NULL);
	unsigned long long n;
	unsigned len;

	if (!buf || !ctx || !md || bs == 0)
		return 1;
	for (size_t i = 0; i < bs * NBUF; i++)
		buf[i] = (uint8_t)(i * 2654435761u >> 13);
	for (n = 0, t0 = now(); (t = now() - t0) < secs; n++) {
		const uint8_t *p = buf + (n % NBUF) * bs;

		EVP_DigestInit_ex2(ctx, md, NULL);
		EVP_DigestUpdate(ctx, p, bs);
		EVP_DigestFinal_ex(ctx, h1, &len);
	}
	printf("evp_1lane_mbps\t%.1f\n", (double)n * (double)bs / t / 1e6);
	for (n = 0, t0 = now(); (t = now() - t0) < secs; n += 2) {
		const uint8_t *p = buf + (n % NBUF) * bs;

		dd_sha256_x2(p, p + bs, bs, h1, h2);
	}
	printf("dd_x2_mbps\t%.1f\n", (double)n * (double)bs / t / 1e6);
	printf("dd_x2_active\t%d\n", dd_sha256_x2_ok() ? 1 : 0);
	/* lists of 32 blocks, as the block pipeline hashes a region's blocks
	 * (dd_blk_hash): sixteen AVX-512 lanes where usable (sha256x16.c) */
	for (n = 0, t0 = now(); (t = now() - t0) < secs; n += LIST) {
		dd_hash_msg m[LIST];
		uint8_t out[LIST][32];

		for (size_t i = 0; i < LIST; i++)
			m[i] = (dd_hash_msg){ buf + ((n + i) % NBUF) * bs, bs,
					      out[i] };
		dd_sha256_xn(m, LIST);
	}
	printf("dd_list_mbps\t%.1f\n", (double)n * (double)bs / t / 1e6);
	EVP_MD_free(md);
	EVP_MD_CTX_free(ctx);
	free(buf);
	return 0;
}
