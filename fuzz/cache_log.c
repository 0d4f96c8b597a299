/*
 * cache_log.c -- libFuzzer harness for the cache formats: the L2 device
 * header and log block decoders (format/cache.md §2, §4;
 * libdedup/cache/l2fmt.c) and the STORE/cache.conf parser
 * (format/store.md §8; libdedup/cache/conf.c).
 *
 * The first byte of the input picks what the rest is (mod 3):
 *   0  a device: a 128-byte header slot (zero padded when shorter), then
 *      a log block;
 *   1  a log block;
 *   2  the text of cache.conf, read by dd_cache_conf_read from a
 *      temporary directory.
 * Headers and log blocks are decoded as they are and again with their
 * CRC set right, so the checks after the CRC are reached as well; every
 * entry of a log block that decodes is read with dd_l2_log_ent.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedup.h"
#include "cache/cache_internal.h"
#include "common/crc32c.h"
#include "common/endian.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t fz_sink;

static void fz_hdr(const uint8_t *data, size_t size)
{
	uint8_t h[DD_L2_HDR_SIZE] = {0};
	dd_err err = {0};
	dd_l2_hdr hdr;

	memcpy(h, data, size < sizeof(h) ? size : sizeof(h));
	if (dd_l2_hdr_decode(&err, h, &hdr) == 0)
		fz_sink += hdr.lh_ring + hdr.lh_log_size;
	dd_put_le32(h + 124, dd_crc32c(0, h, 124));
	if (dd_l2_hdr_decode(&err, h, &hdr) == 0)
		fz_sink += hdr.lh_ring + hdr.lh_log_size;
}

static void fz_log_one(const uint8_t *buf, size_t len)
{
	dd_err err = {0};
	dd_l2_log log;
	dd_l2_logent ent;

	if (dd_l2_log_decode(&err, buf, len, &log) != 0)
		return;
	for (uint32_t i = 0; i < log.ll_nents; i++) {
		dd_l2_log_ent(buf, i, &ent);
		fz_sink += ent.le_off + ent.le_lsize + ent.le_key[32];
	}
}

static void fz_log(const uint8_t *data, size_t size)
{
	uint8_t *c;
	uint32_t nents, lsize, crc;

	fz_log_one(data, size);
	if (size < DD_L2_LOG_HDR_SIZE)
		return;
	nents = dd_get_le32(data + 52);
	lsize = dd_get_le32(data + 56);
	if (nents == 0 || nents > DD_L2_LOG_MAX_ENTS ||
	    lsize != dd_l2_log_size(nents) || lsize > size)
		return;
	c = malloc(size);
	if (!c)
		return;
	memcpy(c, data, size);
	crc = dd_crc32c(0, c, 60);
	crc = dd_crc32c(crc, c + DD_L2_LOG_HDR_SIZE,
			(size_t)nents * DD_L2_LOG_ENT_SIZE);
	dd_put_le32(c + 60, crc);
	fz_log_one(c, size);
	free(c);
}

static void fz_conf(const uint8_t *data, size_t size)
{
	char path[4200];
	dd_err err = {0};
	dd_cache_conf conf;

	snprintf(path, sizeof(path), "%s/cache.conf", fz_tmpdir());
	fz_write_file(path, data, size);
	if (dd_cache_conf_read(&err, fz_tmpdir(), &conf) == 0) {
		for (size_t i = 0; i < conf.cf_ndevs; i++)
			fz_sink += strlen(conf.cf_devs[i].cd_path) +
				   conf.cf_devs[i].cd_size;
		dd_cache_conf_fini(&conf);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	switch (data[0] % 3) {
	case 0:
		fz_hdr(data + 1, size - 1);
		if (size - 1 > DD_L2_HDR_SIZE)
			fz_log(data + 1 + DD_L2_HDR_SIZE,
			       size - 1 - DD_L2_HDR_SIZE);
		break;
	case 1:
		fz_log(data + 1, size - 1);
		break;
	default:
		fz_conf(data + 1, size - 1);
		break;
	}
	return 0;
}
