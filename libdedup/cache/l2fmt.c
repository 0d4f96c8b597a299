/*
 * l2fmt.c -- encodings of an L2 device: the header and the log blocks
 * (format/cache.md §2, §4).  Pure functions, no I/O: the device code and
 * the tests share them.
 *
 * Both structures end in (or carry) a CRC-32C and are canonical: reserved
 * bytes must be zero, so one value has one encoding.  The magic and the
 * version are checked before the CRC, as for packs, so that a device
 * written by a newer version is reported as such rather than as damage.
 */
#include <string.h>

#include "cache/cache_internal.h"
#include "common/crc32c.h"
#include "common/endian.h"
#include "common/zero.h"

static const uint8_t dd_l2_magic[8] = {0x89, 'D', 'D', 'C', 'A', 'C', 'H', '\n'};
static const uint8_t dd_l2_log_magic[4] = {'D', 'D', 'C', 'L'};

/* Header slot offsets (format/cache.md §2). */
enum {
	H_MAGIC = 0, H_VERSION = 8, H_FEATURES = 12, H_STORE = 16, H_DEV = 32,
	H_DEV_BYTES = 48, H_DATA_START = 56, H_RING = 64, H_SEQ = 72,
	H_LOG_SEQ = 80, H_LOG_LPOS = 88, H_LOG_SIZE = 96, H_RSV1 = 100,
	H_CTIME = 104, H_RSV2 = 112, H_CRC = 124
};

/* Log block offsets (format/cache.md §4). */
enum {
	L_MAGIC = 0, L_VERSION = 4, L_RSV = 5, L_SEQ = 8, L_DEV = 16,
	L_LPOS = 32, L_PREV_LPOS = 40, L_PREV_SIZE = 48, L_NENTS = 52,
	L_SIZE = 56, L_CRC = 60
};
enum { E_HASH = 0, E_VARIANT = 32, E_RSV1 = 33, E_OFF = 36, E_LSIZE = 40,
       E_RSV2 = 44 };

void dd_l2_hdr_encode(uint8_t out[DD_L2_HDR_SIZE], const dd_l2_hdr *h)
{
	memset(out, 0, DD_L2_HDR_SIZE);
	memcpy(out + H_MAGIC, dd_l2_magic, sizeof(dd_l2_magic));
	dd_put_le32(out + H_VERSION, DD_L2_VERSION);
	memcpy(out + H_STORE, h->lh_store_id, 16);
	memcpy(out + H_DEV, h->lh_dev_id, 16);
	dd_put_le64(out + H_DEV_BYTES, h->lh_dev_bytes);
	dd_put_le64(out + H_DATA_START, DD_L2_DATA_START);
	dd_put_le64(out + H_RING, h->lh_ring);
	dd_put_le64(out + H_SEQ, h->lh_seq);
	dd_put_le64(out + H_LOG_SEQ, h->lh_log_seq);
	dd_put_le64(out + H_LOG_LPOS, h->lh_log_lpos);
	dd_put_le32(out + H_LOG_SIZE, h->lh_log_size);
	dd_put_le64(out + H_CTIME, (uint64_t)h->lh_ctime);
	dd_put_le32(out + H_CRC, dd_crc32c(0, out, H_CRC));
}

/* Field ranges once the CRC matched. */
static int dd_l2_hdr_check(dd_err *err, const dd_l2_hdr *h, uint64_t start)
{
	if (start != DD_L2_DATA_START)
		return dd_err_set(err, DD_ECORRUPT, "cache header: data start "
				  "%llu, expected %u", (unsigned long long)start,
				  DD_L2_DATA_START);
	if (h->lh_ring % DD_L2_SECTOR ||
	    h->lh_ring < DD_L2_MIN_BYTES - DD_L2_DATA_START ||
	    h->lh_ring > h->lh_dev_bytes - DD_L2_DATA_START ||
	    h->lh_ring / DD_L2_SECTOR > UINT32_MAX)
		return dd_err_set(err, DD_ECORRUPT, "cache header: ring of "
				  "%llu bytes out of range",
				  (unsigned long long)h->lh_ring);
	if (h->lh_log_seq == 0 ? (h->lh_log_lpos || h->lh_log_size)
			       : (h->lh_log_size % DD_L2_SECTOR ||
				  h->lh_log_size == 0 ||
				  h->lh_log_size > dd_l2_log_size(DD_L2_LOG_MAX_ENTS)))
		return dd_err_set(err, DD_ECORRUPT,
				  "cache header: log pointer out of range");
	return 0;
}

int dd_l2_hdr_decode(dd_err *err, const uint8_t in[DD_L2_HDR_SIZE],
		     dd_l2_hdr *out)
{
	uint32_t version, features;

	if (memcmp(in + H_MAGIC, dd_l2_magic, sizeof(dd_l2_magic)) != 0)
		return dd_err_set(err, DD_EFORMAT, "not a cache device");
	version = dd_get_le32(in + H_VERSION);
	if (version > DD_L2_VERSION)
		return dd_err_set(err, DD_EVERSION, "cache device format %u is "
				  "newer than this build supports (%u)",
				  version, DD_L2_VERSION);
	if (version == 0 || dd_get_le32(in + H_CRC) != dd_crc32c(0, in, H_CRC))
		return dd_err_set(err, DD_ECORRUPT,
				  "cache header: damaged (crc or version)");
	features = dd_get_le32(in + H_FEATURES);
	if (features)
		return dd_err_set(err, DD_ENOTSUP, "cache header: unknown "
				  "features %#x", features);
	if (!dd_is_zero(in + H_RSV1, 4) ||
	    !dd_is_zero(in + H_RSV2, H_CRC - H_RSV2))
		return dd_err_set(err, DD_ECORRUPT,
				  "cache header: reserved bytes not zero");
	memcpy(out->lh_store_id, in + H_STORE, 16);
	memcpy(out->lh_dev_id, in + H_DEV, 16);
	out->lh_dev_bytes = dd_get_le64(in + H_DEV_BYTES);
	out->lh_ring = dd_get_le64(in + H_RING);
	out->lh_seq = dd_get_le64(in + H_SEQ);
	out->lh_log_seq = dd_get_le64(in + H_LOG_SEQ);
	out->lh_log_lpos = dd_get_le64(in + H_LOG_LPOS);
	out->lh_log_size = dd_get_le32(in + H_LOG_SIZE);
	out->lh_ctime = (int64_t)dd_get_le64(in + H_CTIME);
	if (out->lh_dev_bytes < DD_L2_MIN_BYTES)
		return dd_err_set(err, DD_ECORRUPT, "cache header: device "
				  "of %llu bytes is too small",
				  (unsigned long long)out->lh_dev_bytes);
	return dd_l2_hdr_check(err, out, dd_get_le64(in + H_DATA_START));
}

uint32_t dd_l2_log_size(uint32_t n)
{
	uint32_t raw = DD_L2_LOG_HDR_SIZE + n * DD_L2_LOG_ENT_SIZE;

	return (raw + DD_L2_SECTOR - 1) / DD_L2_SECTOR * DD_L2_SECTOR;
}

void dd_l2_log_encode(uint8_t *out, dd_l2_log *log, const dd_l2_logent *ents)
{
	uint32_t size = dd_l2_log_size(log->ll_nents);
	size_t body = (size_t)log->ll_nents * DD_L2_LOG_ENT_SIZE;
	uint32_t crc;

	memset(out, 0, size);
	log->ll_size = size;
	memcpy(out + L_MAGIC, dd_l2_log_magic, 4);
	out[L_VERSION] = DD_L2_VERSION;
	dd_put_le64(out + L_SEQ, log->ll_seq);
	memcpy(out + L_DEV, log->ll_dev_id, 16);
	dd_put_le64(out + L_LPOS, log->ll_lpos);
	dd_put_le64(out + L_PREV_LPOS, log->ll_prev_lpos);
	dd_put_le32(out + L_PREV_SIZE, log->ll_prev_size);
	dd_put_le32(out + L_NENTS, log->ll_nents);
	dd_put_le32(out + L_SIZE, size);
	for (uint32_t i = 0; i < log->ll_nents; i++) {
		uint8_t *e = out + DD_L2_LOG_HDR_SIZE + i * DD_L2_LOG_ENT_SIZE;

		memcpy(e + E_HASH, ents[i].le_key, 32);
		e[E_VARIANT] = ents[i].le_key[32];
		dd_put_le32(e + E_OFF, ents[i].le_off);
		dd_put_le32(e + E_LSIZE, ents[i].le_lsize);
	}
	/* One CRC over the header (up to the CRC) and every entry. */
	crc = dd_crc32c(0, out, L_CRC);
	crc = dd_crc32c(crc, out + DD_L2_LOG_HDR_SIZE, body);
	dd_put_le32(out + L_CRC, crc);
}

static int dd_l2_log_check_ents(dd_err *err, const uint8_t *buf, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *e = buf + DD_L2_LOG_HDR_SIZE + i * DD_L2_LOG_ENT_SIZE;
		uint32_t lsize = dd_get_le32(e + E_LSIZE);

		if (!dd_is_zero(e + E_RSV1, 3) || !dd_is_zero(e + E_RSV2, 4) ||
		    lsize == 0 || lsize > DD_L2_MAX_LSIZE)
			return dd_err_set(err, DD_ECORRUPT, "cache log block: "
					  "entry %u out of range", i);
	}
	return 0;
}

int dd_l2_log_decode(dd_err *err, const uint8_t *buf, size_t len,
		     dd_l2_log *out)
{
	uint32_t crc;
	size_t body;

	if (len < DD_L2_LOG_HDR_SIZE ||
	    memcmp(buf + L_MAGIC, dd_l2_log_magic, 4) != 0)
		return dd_err_set(err, DD_ECORRUPT, "cache log block: no magic");
	if (buf[L_VERSION] != DD_L2_VERSION)
		return dd_err_set(err, buf[L_VERSION] > DD_L2_VERSION ?
				  DD_EVERSION : DD_ECORRUPT,
				  "cache log block: version %u", buf[L_VERSION]);
	out->ll_nents = dd_get_le32(buf + L_NENTS);
	out->ll_size = dd_get_le32(buf + L_SIZE);
	if (out->ll_nents == 0 || out->ll_nents > DD_L2_LOG_MAX_ENTS ||
	    out->ll_size != dd_l2_log_size(out->ll_nents) || out->ll_size > len)
		return dd_err_set(err, DD_ECORRUPT,
				  "cache log block: size out of range");
	body = (size_t)out->ll_nents * DD_L2_LOG_ENT_SIZE;
	crc = dd_crc32c(0, buf, L_CRC);
	crc = dd_crc32c(crc, buf + DD_L2_LOG_HDR_SIZE, body);
	if (crc != dd_get_le32(buf + L_CRC))
		return dd_err_set(err, DD_ECORRUPT, "cache log block: crc mismatch");
	if (!dd_is_zero(buf + L_RSV, 3))
		return dd_err_set(err, DD_ECORRUPT,
				  "cache log block: reserved bytes not zero");
	out->ll_seq = dd_get_le64(buf + L_SEQ);
	memcpy(out->ll_dev_id, buf + L_DEV, 16);
	out->ll_lpos = dd_get_le64(buf + L_LPOS);
	out->ll_prev_lpos = dd_get_le64(buf + L_PREV_LPOS);
	out->ll_prev_size = dd_get_le32(buf + L_PREV_SIZE);
	return dd_l2_log_check_ents(err, buf, out->ll_nents);
}

void dd_l2_log_ent(const uint8_t *buf, uint32_t i, dd_l2_logent *out)
{
	const uint8_t *e = buf + DD_L2_LOG_HDR_SIZE + i * DD_L2_LOG_ENT_SIZE;

	memcpy(out->le_key, e + E_HASH, 32);
	out->le_key[32] = e[E_VARIANT];
	out->le_off = dd_get_le32(e + E_OFF);
	out->le_lsize = dd_get_le32(e + E_LSIZE);
}
