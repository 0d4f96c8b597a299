/*
 * digest.c -- the content digest of an image (format/store.md §6).
 *
 * One SHA-256 over the ordered block hashes, holes as 32 zero bytes,
 * then the image size and block size.  It depends on every block, so a
 * writer, a receiver and the raw sender and receiver compute it as the
 * blocks go by and compare it with the one they were given; a snapshot
 * records it.
 */
#include "dedup.h"
#include "chunk/chunk.h"
#include "common/alloc.h"
#include "common/endian.h"

struct dd_digest {
	dd_sha256_ctx *dg_sha;
};

int dd_digest_new(dd_digest **out, dd_err *err)
{
	dd_digest *d = dd_calloc(1, sizeof(*d));

	if (!d || dd_sha256_new(&d->dg_sha) != 0) {
		dd_free(d);
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	}
	*out = d;
	return 0;
}

void dd_digest_block(dd_digest *d, const uint8_t *hash_or_null)
{
	static const uint8_t zero[DD_HASH_SIZE];

	dd_sha256_update(d->dg_sha, hash_or_null ? hash_or_null : zero,
			 DD_HASH_SIZE);
}

void dd_digest_zeros(dd_digest *d, uint64_t count)
{
	static const uint8_t z[DD_HASH_SIZE * 256];

	while (count) {
		uint64_t n = count < 256 ? count : 256;

		dd_sha256_update(d->dg_sha, z, (size_t)n * DD_HASH_SIZE);
		count -= n;
	}
}

void dd_digest_final(dd_digest *d, uint64_t size, uint32_t block_size,
		     uint8_t out[DD_HASH_SIZE])
{
	uint8_t tail[12];

	dd_put_le64(tail, size);
	dd_put_le32(tail + 8, block_size);
	dd_sha256_update(d->dg_sha, tail, sizeof(tail));
	/* dd_sha256_final leaves the context fresh: ready for another image */
	dd_sha256_final(d->dg_sha, out);
}

void dd_digest_free(dd_digest *d)
{
	if (!d)
		return;
	dd_sha256_free(d->dg_sha);
	dd_free(d);
}
