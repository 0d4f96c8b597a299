/*
 * digest.c -- the content digest of an image (format/store.md §6).
 *
 * One SHA-256 over the ordered block hashes, holes as 32 zero bytes,
 * then the image size and block size.  It depends on every block, so a
 * writer, a receiver and the raw sender and receiver compute it as the
 * blocks go by and compare it with the one they were given; a snapshot
 * records it.
 *
 * Content-defined blocks (chunker fastcdc) have lengths of their own, so
 * each block's length follows its hash, and a run of holes counts once,
 * with its total length: where a run of zeros was cut says nothing of its
 * bytes, and a block map keeps such a run as the gap between two blocks
 * (format/store.md §4.2).  The digest holds the run back until the next
 * block or the end, and counts blocks and holes the same way, for the
 * snapshot's record.
 */
#include "dedup.h"
#include "chunk/chunk.h"
#include "common/alloc.h"
#include "common/endian.h"

struct dd_digest {
	dd_sha256_ctx *dg_sha;
	int dg_chunker;
	uint64_t dg_hole;         /* var: bytes of the run of holes held back */
	uint64_t dg_blocks;       /* blocks so far, a run of holes one (var) */
	uint64_t dg_zero;         /* holes so far, likewise */
};

int dd_digest_new(dd_digest **out, dd_err *err, int chunker)
{
	dd_digest *d = dd_calloc(1, sizeof(*d));

	if (!d || dd_sha256_new(&d->dg_sha) != 0) {
		dd_free(d);
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	}
	d->dg_chunker = chunker;
	*out = d;
	return 0;
}

/* var: the run of holes held back, as one entry. */
static void dd_digest_flush(dd_digest *d)
{
	static const uint8_t zero[DD_HASH_SIZE];
	uint8_t len[8];

	if (!d->dg_hole)
		return;
	dd_put_le64(len, d->dg_hole);
	dd_sha256_update(d->dg_sha, zero, DD_HASH_SIZE);
	dd_sha256_update(d->dg_sha, len, sizeof(len));
	d->dg_hole = 0;
}

void dd_digest_block(dd_digest *d, const uint8_t *hash_or_null, uint64_t len)
{
	static const uint8_t zero[DD_HASH_SIZE];
	uint8_t lb[8];

	if (d->dg_chunker == DD_CHUNKER_FIXED) {
		dd_sha256_update(d->dg_sha, hash_or_null ? hash_or_null : zero,
				 DD_HASH_SIZE);
		d->dg_blocks++;
		d->dg_zero += !hash_or_null;
		return;
	}
	if (!hash_or_null) {
		if (!d->dg_hole) {
			d->dg_blocks++;
			d->dg_zero++;
		}
		d->dg_hole += len;
		return;
	}
	dd_digest_flush(d);
	dd_put_le64(lb, len);
	dd_sha256_update(d->dg_sha, hash_or_null, DD_HASH_SIZE);
	dd_sha256_update(d->dg_sha, lb, sizeof(lb));
	d->dg_blocks++;
}

void dd_digest_zeros(dd_digest *d, uint64_t count)
{
	static const uint8_t z[DD_HASH_SIZE * 256];

	d->dg_blocks += count;
	d->dg_zero += count;
	while (count) {
		uint64_t n = count < 256 ? count : 256;

		dd_sha256_update(d->dg_sha, z, (size_t)n * DD_HASH_SIZE);
		count -= n;
	}
}

void dd_digest_counts(const dd_digest *d, uint64_t *blocks, uint64_t *zero)
{
	*blocks = d->dg_blocks;
	*zero = d->dg_zero;
}

void dd_digest_final(dd_digest *d, uint64_t size, uint32_t block_size,
		     uint8_t out[DD_HASH_SIZE])
{
	uint8_t tail[13];
	size_t n = 12;

	dd_put_le64(tail, size);
	dd_put_le32(tail + 8, block_size);
	if (d->dg_chunker != DD_CHUNKER_FIXED) {
		dd_digest_flush(d);
		tail[n++] = (uint8_t)d->dg_chunker;
	}
	dd_sha256_update(d->dg_sha, tail, n);
	/* dd_sha256_final leaves the context fresh: ready for another image */
	dd_sha256_final(d->dg_sha, out);
	d->dg_blocks = d->dg_zero = 0;
}

void dd_digest_free(dd_digest *d)
{
	if (!d)
		return;
	dd_sha256_free(d->dg_sha);
	dd_free(d);
}
