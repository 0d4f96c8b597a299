/*
 * digest.c -- the content digest of an image (format/store.md §6).
 *
 * One SHA-256 over the image's blocks in order, then its size and block
 * size.  It depends on every block, so a writer, a receiver and the raw
 * sender and receiver compute it as the blocks go by and compare it with
 * the one they were given; a snapshot records it.
 *
 * Version 1, fixed blocks: each block's hash, 32 zero bytes for a hole --
 * a run of N holes costs N x 32 bytes of SHA-256.
 *
 * Run-based (content-defined blocks, and version 2 of fixed blocks): each
 * block's hash followed by its length, and a run of holes once, with its
 * total length: where a run of zeros was cut says nothing of its bytes,
 * and a run costs one entry whatever its length.  The digest holds the
 * run back until the next block or the end.  Fixed blocks all have the
 * block size but the image's last, which only the end knows to be short:
 * so a fixed version-2 digest holds back the last block's hash too, and
 * the end takes what the size leaves out of the held-back entry.
 *
 * Blocks and holes are counted for the snapshot's record: a run of holes
 * once when content-defined, every fixed block (either version) once.
 */
#include <string.h>

#include "dedup.h"
#include "chunk/chunk.h"
#include "common/alloc.h"
#include "common/endian.h"

struct dd_digest {
	dd_sha256_ctx *dg_sha;
	int dg_chunker;
	int dg_version;           /* DD_DIGEST_V1 or _V2 (fixed only) */
	uint32_t dg_bs;           /* block size (fixed v2: a block's length) */
	uint64_t dg_hole;         /* run-based: bytes of the held-back run */
	bool dg_held;             /* fixed v2: dg_last is held back */
	uint8_t dg_last[DD_HASH_SIZE];
	uint64_t dg_blocks;       /* blocks so far, a run of holes one (var) */
	uint64_t dg_zero;         /* holes so far, likewise */
};

int dd_digest_new(dd_digest **out, dd_err *err, int chunker, int version,
		  uint32_t block_size)
{
	dd_digest *d = dd_calloc(1, sizeof(*d));

	if (!d || dd_sha256_new(&d->dg_sha) != 0) {
		dd_free(d);
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	}
	d->dg_chunker = chunker;
	d->dg_version = version;
	d->dg_bs = block_size;
	*out = d;
	return 0;
}

/* Fixed blocks hashed one by one (version 1)? */
static bool dd_digest_v1(const dd_digest *d)
{
	return d->dg_chunker == DD_CHUNKER_FIXED && d->dg_version != DD_DIGEST_V2;
}

/* One run-based entry: a hash (32 zero bytes for a hole) and a length. */
static void dd_digest_entry(dd_digest *d, const uint8_t *hash, uint64_t len)
{
	static const uint8_t zero[DD_HASH_SIZE];
	uint8_t lb[8];

	dd_put_le64(lb, len);
	dd_sha256_update(d->dg_sha, hash ? hash : zero, DD_HASH_SIZE);
	dd_sha256_update(d->dg_sha, lb, sizeof(lb));
}

/* The entry held back, less `cut` bytes (the end's short last block);
 * at most one of the two is held. */
static void dd_digest_flush(dd_digest *d, uint64_t cut)
{
	if (d->dg_held) {
		dd_digest_entry(d, d->dg_last, d->dg_bs - cut);
		d->dg_held = false;
	} else if (d->dg_hole) {
		dd_digest_entry(d, NULL, d->dg_hole - cut);
		d->dg_hole = 0;
	}
}

/* A run of holes of `bytes` joins the held-back one (a block held back
 * goes out first: it does not end the image). */
static void dd_digest_hole(dd_digest *d, uint64_t bytes)
{
	if (d->dg_held)
		dd_digest_flush(d, 0);
	d->dg_hole += bytes;
}

void dd_digest_block(dd_digest *d, const uint8_t *hash_or_null, uint64_t len)
{
	static const uint8_t zero[DD_HASH_SIZE];

	if (dd_digest_v1(d)) {
		dd_sha256_update(d->dg_sha, hash_or_null ? hash_or_null : zero,
				 DD_HASH_SIZE);
		d->dg_blocks++;
		d->dg_zero += !hash_or_null;
		return;
	}
	if (d->dg_chunker == DD_CHUNKER_FIXED) {
		if (!hash_or_null) {
			dd_digest_zeros(d, 1);
			return;
		}
		dd_digest_flush(d, 0);
		memcpy(d->dg_last, hash_or_null, DD_HASH_SIZE);
		d->dg_held = true;
		d->dg_blocks++;
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
	dd_digest_flush(d, 0);
	dd_digest_entry(d, hash_or_null, len);
	d->dg_blocks++;
}

void dd_digest_zeros(dd_digest *d, uint64_t count)
{
	static const uint8_t z[DD_HASH_SIZE * 256];

	d->dg_blocks += count;
	d->dg_zero += count;
	if (!dd_digest_v1(d)) {
		/* O(1): the run grows by whole blocks; the end takes off what
		 * the last one lacks */
		if (count)
			dd_digest_hole(d, count * d->dg_bs);
		return;
	}
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

/* Fixed v2: what the blocks counted cover beyond the size, the part of
 * the last block past the image's end (less than a block when the
 * caller counted ceil(size / block size) blocks). */
static uint64_t dd_digest_short(const dd_digest *d, uint64_t size)
{
	uint64_t covered = d->dg_blocks * d->dg_bs;

	return covered > size ? covered - size : 0;
}

void dd_digest_final(dd_digest *d, uint64_t size, uint32_t block_size,
		     uint8_t out[DD_HASH_SIZE])
{
	uint8_t tail[13];
	size_t n = 12;

	dd_put_le64(tail, size);
	dd_put_le32(tail + 8, block_size);
	if (!dd_digest_v1(d)) {
		dd_digest_flush(d, d->dg_chunker == DD_CHUNKER_FIXED
					   ? dd_digest_short(d, size) : 0);
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
