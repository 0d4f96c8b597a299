/*
 * pack_records.c -- libFuzzer harness for the pack format (format/pack.md,
 * libdedup/pack/format.c, codec.c, file.c).
 *
 * Each input is read three ways:
 *   - its first 64 bytes through dd_pack_rec_decode and
 *     dd_pack_file_hdr_decode, as they are and again with their CRC
 *     fixed up (so the checks after the CRC are reached too);
 *   - the bytes after those 64 as the payload of that record:
 *     dd_codec_decompress with the decoded header, and with a header
 *     built from the raw fields (decompress must stand alone: its
 *     records may come from a damaged DDT);
 *   - the whole input as a pack file NNNNNNNN.pack in a temporary
 *     directory: dd_pack_open, then dd_pack_walk decompressing every
 *     record it hands out -- once as is, once with every header CRC on
 *     the walk's path fixed up.
 * Whatever the bytes: an error code, never a crash, leak or overflow.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dedup.h"
#include "common/crc32c.h"
#include "common/endian.h"
#include "pack/pack.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Bigger inputs than this are not written out as pack files. */
#define FUZZ_MAX_PACK (4u << 20)

static dd_codec_ctx *fz_codec;
static uint8_t *fz_dst;       /* DD_BLOCK_SIZE_MAX bytes */
static int fz_dirfd = -1;
static dd_vdir *fz_dir;        /* fz_dirfd's directory, for dd_pack_open */

static void fz_init(void)
{
	if (fz_dst)
		return;
	fz_dst = malloc(DD_BLOCK_SIZE_MAX);
	if (!fz_dst || dd_codec_new(&fz_codec, NULL, DD_CODEC_ZSTD, 1) != 0)
		abort();
	fz_dirfd = open(fz_tmpdir(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fz_dirfd < 0 || dd_vdir_open_local(&fz_dir, NULL, fz_tmpdir()) != 0)
		abort();
}

static void fz_decompress(const dd_pack_rec *rec, const uint8_t *payload,
			  size_t avail)
{
	dd_err err = {0};

	/* The caller's contract: psize payload bytes, lsize dst bytes. */
	if (rec->pr_psize > avail || rec->pr_lsize > DD_BLOCK_SIZE_MAX)
		return;
	(void)dd_codec_decompress(fz_codec, &err, rec, payload, fz_dst);
}

static void fz_headers(const uint8_t *data, size_t size)
{
	uint8_t h[64];
	dd_err err = {0};
	dd_pack_rec rec;
	uint32_t id;

	if (size < sizeof(h))
		return;
	memcpy(h, data, sizeof(h));
	if (dd_pack_rec_decode(&err, h, &rec) == 0)
		fz_decompress(&rec, data + 64, size - 64);
	(void)dd_pack_file_hdr_decode(&err, h, &id);
	dd_put_le32(h + 60, dd_crc32c(0, h, 60));
	if (dd_pack_rec_decode(&err, h, &rec) == 0)
		fz_decompress(&rec, data + 64, size - 64);
	(void)dd_pack_file_hdr_decode(&err, h, &id);

	/* The raw fields, CRC and range checks skipped. */
	rec.pr_codec = data[5];
	rec.pr_lsize = dd_get_le32(data + 8);
	rec.pr_psize = dd_get_le32(data + 12);
	memcpy(rec.pr_hash, data + 16, sizeof(rec.pr_hash));
	fz_decompress(&rec, data + 64, size - 64);
}

static int fz_walk_fn(void *ctx, uint64_t offset, const dd_pack_rec *rec,
		      const void *payload)
{
	dd_err err = {0};

	(void)ctx;
	(void)offset;
	(void)dd_codec_decompress(fz_codec, &err, rec, payload, fz_dst);
	return 0;
}

static void fz_walk(const uint8_t *data, size_t size)
{
	char name[32];
	dd_err err = {0};
	dd_pack *p;
	uint64_t end;
	uint32_t id = size >= 20 ? dd_get_le32(data + 16) : 0;

	/* The name must match the id in the header for dd_pack_open. */
	dd_pack_name(name, sizeof(name), id);
	{
		char path[4200];

		snprintf(path, sizeof(path), "%s/%s", fz_tmpdir(), name);
		fz_write_file(path, data, size);
	}
	if (dd_pack_open(&p, &err, fz_dir, id, 0) == 0) {
		(void)dd_pack_walk(p, &err, 0, fz_walk_fn, NULL, &end);
		/* A limit inside and one past the end of the file. */
		(void)dd_pack_walk(p, &err, size / 2, fz_walk_fn, NULL, &end);
		(void)dd_pack_walk(p, &err, (uint64_t)size + 1, fz_walk_fn,
				   NULL, &end);
		dd_pack_close(p);
	}
	(void)unlinkat(fz_dirfd, name, 0);
}

/* A copy with the CRC of the file header and of every record header the
 * walk would reach set right; NULL when that changes nothing. */
static uint8_t *fz_fixed(const uint8_t *data, size_t size)
{
	uint8_t *c;
	size_t off = 64;

	if (size < 64 || !(c = malloc(size)))
		return NULL;
	memcpy(c, data, size);
	dd_put_le32(c + 60, dd_crc32c(0, c, 60));
	while (size - off >= 64) {
		uint32_t psize = dd_get_le32(c + off + 12);

		dd_put_le32(c + off + 60, dd_crc32c(0, c + off, 60));
		if (psize > size - off - 64)
			break;
		off += 64 + psize;
	}
	if (memcmp(c, data, size) == 0) {
		free(c);
		return NULL;
	}
	return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *fixed;

	fz_init();
	fz_headers(data, size);
	if (size > FUZZ_MAX_PACK)
		return 0;
	fz_walk(data, size);
	fixed = fz_fixed(data, size);
	if (fixed) {
		fz_walk(fixed, size);
		free(fixed);
	}
	return 0;
}
