/*
 * format.c -- pack file and record header encoding (format/pack.md §2, §3).
 *
 * Pure functions, no I/O.  Headers are encoded field by field at fixed
 * offsets (never by casting a struct over the bytes) and close with a
 * CRC-32C of their first 60 bytes.  Decoding treats its input as hostile:
 * it checks magic, then version, then CRC, then flags, reserved bytes and
 * size limits, so that a header it accepts can be used to size buffers and
 * reads without further checks.  Magic and version are checked before the
 * CRC because they keep their offsets in every version: a newer header
 * with a different layout must read as "newer version", not as damage.
 */
#include <string.h>

#include <dedup.h>

#include "common/crc32c.h"
#include "common/endian.h"
#include "common/zero.h"
#include "pack.h"

/* format/pack.md §2.2: "\x89DDPACK\n". */
static const uint8_t dd_pack_file_magic[8] = {
	0x89, 'D', 'D', 'P', 'A', 'C', 'K', '\n'
};
/* format/pack.md §3: the bytes "DDRC". */
static const uint8_t dd_pack_rec_magic[4] = { 'D', 'D', 'R', 'C' };

/* File header offsets (format/pack.md §2.2). */
enum {
	FH_MAGIC = 0,
	FH_VERSION = 8,
	FH_FEATURES = 12,
	FH_PACK_ID = 16,
	FH_RESERVED = 20,
	FH_CRC = 60
};

/* Record header offsets (format/pack.md §3). */
enum {
	RH_MAGIC = 0,
	RH_VERSION = 4,
	RH_CODEC = 5,
	RH_FLAGS = 6,
	RH_LSIZE = 8,
	RH_PSIZE = 12,
	RH_HASH = 16,
	RH_RESERVED = 48,
	RH_CRC = 60
};

_Static_assert(RH_HASH + 32 == RH_RESERVED, "record hash width");
_Static_assert(RH_CRC + 4 == DD_PACK_REC_HDR_SIZE, "record header size");
_Static_assert(FH_CRC + 4 == DD_PACK_FILE_HDR_SIZE, "file header size");
_Static_assert(sizeof(((dd_pack_rec *)0)->pr_hash) == 32, "hash size");

/* Bits of the file-header feature word and of the record flags that this
 * build understands: none in version 1 (format/pack.md §7). */
#define DD_PACK_FEATURES_KNOWN 0u
#define DD_PACK_REC_FLAGS_KNOWN 0u

int dd_pack_rec_check_sizes(dd_err *err, const dd_pack_rec *rec)
{
	if (rec->pr_lsize < 1 || rec->pr_lsize > DD_BLOCK_SIZE_MAX)
		return dd_err_set(err, DD_ECORRUPT,
				  "record lsize %u outside [1, %u]",
				  (unsigned)rec->pr_lsize, DD_BLOCK_SIZE_MAX);
	switch (rec->pr_codec) {
	case DD_CODEC_NONE:
		if (rec->pr_psize != rec->pr_lsize)
			return dd_err_set(err, DD_ECORRUPT,
					  "uncompressed record with psize %u != lsize %u",
					  (unsigned)rec->pr_psize,
					  (unsigned)rec->pr_lsize);
		break;
	case DD_CODEC_ZSTD:
		if (rec->pr_psize < 1 || rec->pr_psize > rec->pr_lsize)
			return dd_err_set(err, DD_ECORRUPT,
					  "zstd record psize %u outside [1, lsize %u]",
					  (unsigned)rec->pr_psize,
					  (unsigned)rec->pr_lsize);
		break;
	default:
		return dd_err_set(err, DD_ENOTSUP,
				  "record codec %u is not supported by this build",
				  (unsigned)rec->pr_codec);
	}
	return 0;
}

void dd_pack_rec_encode(uint8_t out[DD_PACK_REC_HDR_SIZE],
			const dd_pack_rec *rec)
{
	memset(out, 0, DD_PACK_REC_HDR_SIZE);
	memcpy(out + RH_MAGIC, dd_pack_rec_magic, sizeof(dd_pack_rec_magic));
	out[RH_VERSION] = DD_PACK_VERSION;
	out[RH_CODEC] = rec->pr_codec;
	dd_put_le16(out + RH_FLAGS, 0);
	dd_put_le32(out + RH_LSIZE, rec->pr_lsize);
	dd_put_le32(out + RH_PSIZE, rec->pr_psize);
	memcpy(out + RH_HASH, rec->pr_hash, 32);
	dd_put_le32(out + RH_CRC, dd_crc32c(0, out, RH_CRC));
}

int dd_pack_rec_decode(dd_err *err, const uint8_t in[DD_PACK_REC_HDR_SIZE],
		       dd_pack_rec *out)
{
	dd_pack_rec rec;
	uint32_t crc, want;
	uint16_t flags;
	int rc;

	if (memcmp(in + RH_MAGIC, dd_pack_rec_magic,
		   sizeof(dd_pack_rec_magic)) != 0)
		return dd_err_set(err, DD_ECORRUPT,
				  "bad record header magic %02x%02x%02x%02x",
				  in[0], in[1], in[2], in[3]);
	if (in[RH_VERSION] > DD_PACK_VERSION)
		return dd_err_set(err, DD_EVERSION,
				  "pack record version %u is newer than this build supports (%u)",
				  in[RH_VERSION], DD_PACK_VERSION);
	if (in[RH_VERSION] == 0)
		return dd_err_set(err, DD_ECORRUPT, "pack record version 0");
	crc = dd_get_le32(in + RH_CRC);
	want = dd_crc32c(0, in, RH_CRC);
	if (crc != want)
		return dd_err_set(err, DD_ECORRUPT,
				  "record header CRC mismatch (stored %08x, computed %08x)",
				  (unsigned)crc, (unsigned)want);
	flags = dd_get_le16(in + RH_FLAGS);
	if (flags & ~DD_PACK_REC_FLAGS_KNOWN)
		return dd_err_set(err, DD_ENOTSUP,
				  "record flags 0x%04x not supported by this build",
				  (unsigned)(flags & ~DD_PACK_REC_FLAGS_KNOWN));
	if (!dd_is_zero(in + RH_RESERVED, RH_CRC - RH_RESERVED))
		return dd_err_set(err, DD_ECORRUPT,
				  "record header reserved bytes are not zero");

	rec.pr_codec = in[RH_CODEC];
	rec.pr_lsize = dd_get_le32(in + RH_LSIZE);
	rec.pr_psize = dd_get_le32(in + RH_PSIZE);
	memcpy(rec.pr_hash, in + RH_HASH, 32);
	/* codec before sizes: an unknown codec is ENOTSUP (§3 step 5). */
	rc = dd_pack_rec_check_sizes(err, &rec);
	if (rc)
		return rc;
	*out = rec;
	return 0;
}

void dd_pack_file_hdr_encode(uint8_t out[DD_PACK_FILE_HDR_SIZE],
			     uint32_t pack_id)
{
	memset(out, 0, DD_PACK_FILE_HDR_SIZE);
	memcpy(out + FH_MAGIC, dd_pack_file_magic, sizeof(dd_pack_file_magic));
	dd_put_le32(out + FH_VERSION, DD_PACK_VERSION);
	dd_put_le32(out + FH_FEATURES, 0);
	dd_put_le32(out + FH_PACK_ID, pack_id);
	dd_put_le32(out + FH_CRC, dd_crc32c(0, out, FH_CRC));
}

int dd_pack_file_hdr_decode(dd_err *err,
			    const uint8_t in[DD_PACK_FILE_HDR_SIZE],
			    uint32_t *pack_id)
{
	uint32_t version, features, crc, want;

	if (memcmp(in + FH_MAGIC, dd_pack_file_magic,
		   sizeof(dd_pack_file_magic)) != 0)
		return dd_err_set(err, DD_ECORRUPT,
				  "not a pack file (bad magic)");
	version = dd_get_le32(in + FH_VERSION);
	if (version > DD_PACK_VERSION)
		return dd_err_set(err, DD_EVERSION,
				  "pack format version %u is newer than this build supports (%u)",
				  (unsigned)version, DD_PACK_VERSION);
	if (version == 0)
		return dd_err_set(err, DD_ECORRUPT, "pack format version 0");
	crc = dd_get_le32(in + FH_CRC);
	want = dd_crc32c(0, in, FH_CRC);
	if (crc != want)
		return dd_err_set(err, DD_ECORRUPT,
				  "pack file header CRC mismatch (stored %08x, computed %08x)",
				  (unsigned)crc, (unsigned)want);
	features = dd_get_le32(in + FH_FEATURES);
	if (features & ~DD_PACK_FEATURES_KNOWN)
		return dd_err_set(err, DD_ENOTSUP,
				  "pack features 0x%08x not supported by this build",
				  (unsigned)(features & ~DD_PACK_FEATURES_KNOWN));
	if (!dd_is_zero(in + FH_RESERVED, FH_CRC - FH_RESERVED))
		return dd_err_set(err, DD_ECORRUPT,
				  "pack file header reserved bytes are not zero");
	*pack_id = dd_get_le32(in + FH_PACK_ID);
	return 0;
}
