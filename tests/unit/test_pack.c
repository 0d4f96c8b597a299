/*
 * test_pack.c -- unit tests of the pack module (format/pack.md).
 *
 * Headers are checked on real bytes (offsets of the spec's tables), every
 * single-bit corruption of a header must be refused, codecs must round trip
 * and refuse garbage without crashing, and pack files must round trip,
 * refuse mismatches and stop cleanly at a torn tail.  The golden file
 * tests/golden/pack_v1.pack pins the format: regenerate it with
 * DD_REGEN_GOLDEN=1 only when the format version changes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <dedup.h>

#include "common/crc32c.h"
#include "common/endian.h"
#include "common/err.h"
#include "common/faults.h"
#include "hash/hash.h"
#include "pack/pack.h"

#ifndef DD_GOLDEN_DIR
#define DD_GOLDEN_DIR "tests/golden"
#endif

#define GOLDEN_ID 0x2au

/* ---- helpers --------------------------------------------------------------*/

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
	/* xorshift64: deterministic, so failures reproduce. */
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void fill_random(uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(rng_next() >> 32);
}

static void fill_text(uint8_t *p, size_t len)
{
	static const char words[] = "libdedup";

	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)words[i % 8];
}

static void make_rec(dd_pack_rec *rec, uint8_t codec, uint32_t lsize,
		     uint32_t psize)
{
	memset(rec, 0, sizeof(*rec));
	rec->pr_codec = codec;
	rec->pr_lsize = lsize;
	rec->pr_psize = psize;
	for (int i = 0; i < 32; i++)
		rec->pr_hash[i] = (uint8_t)(0xa0 + i);
}

/* Rewrites the CRC of a header after a test changed a field on purpose. */
static void fix_crc(uint8_t hdr[64])
{
	dd_put_le32(hdr + 60, dd_crc32c(0, hdr, 60));
}

struct tmpdir {
	char td_path[64];
	int td_fd;
	dd_vdir *td_vd;            /* the same directory, as the store has it */
};

static void tmpdir_make(struct tmpdir *t)
{
	strcpy(t->td_path, "/tmp/dd_test_pack.XXXXXX");
	assert_non_null(mkdtemp(t->td_path));
	t->td_fd = open(t->td_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(t->td_fd >= 0);
	assert_int_equal(dd_vdir_open_local(&t->td_vd, NULL, t->td_path), 0);
}

static void tmpdir_remove(struct tmpdir *t)
{
	DIR *d = opendir(t->td_path);
	struct dirent *e;

	assert_non_null(d);
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			unlinkat(t->td_fd, e->d_name, 0);
	closedir(d);
	dd_vdir_close(t->td_vd);
	close(t->td_fd);
	rmdir(t->td_path);
}

static uint64_t file_size_at(int dirfd, const char *name)
{
	struct stat st;

	assert_int_equal(fstatat(dirfd, name, &st, 0), 0);
	return (uint64_t)st.st_size;
}

static void truncate_at(int dirfd, const char *name, uint64_t len)
{
	int fd = openat(dirfd, name, O_WRONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)len), 0);
	close(fd);
}

static void poke_at(int dirfd, const char *name, uint64_t off, uint8_t xor)
{
	int fd = openat(dirfd, name, O_RDWR | O_CLOEXEC);
	uint8_t b;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, (off_t)off), 1);
	b ^= xor;
	assert_int_equal(pwrite(fd, &b, 1, (off_t)off), 1);
	close(fd);
}

/* ---- CRC and record headers ----------------------------------------------*/

static void test_crc32c_check_value(void **state)
{
	(void)state;
	/* format/pack.md §1 names this check value. */
	assert_int_equal(dd_crc32c(0, "123456789", 9), 0xE3069283u);
}

static void test_rec_roundtrip(void **state)
{
	uint8_t hdr[DD_PACK_REC_HDR_SIZE];
	dd_pack_rec rec, out;
	dd_err err;

	(void)state;
	make_rec(&rec, DD_CODEC_ZSTD, 131072, 40000);
	dd_pack_rec_encode(hdr, &rec);

	/* The byte table of format/pack.md §3. */
	assert_memory_equal(hdr, "DDRC", 4);
	assert_int_equal(hdr[4], 1);
	assert_int_equal(hdr[5], DD_CODEC_ZSTD);
	assert_int_equal(dd_get_le16(hdr + 6), 0);
	assert_int_equal(dd_get_le32(hdr + 8), 131072);
	assert_int_equal(dd_get_le32(hdr + 12), 40000);
	assert_memory_equal(hdr + 16, rec.pr_hash, 32);
	for (int i = 48; i < 60; i++)
		assert_int_equal(hdr[i], 0);
	assert_int_equal(dd_get_le32(hdr + 60), dd_crc32c(0, hdr, 60));

	memset(&out, 0x55, sizeof(out));
	assert_int_equal(dd_pack_rec_decode(&err, hdr, &out), 0);
	assert_int_equal(out.pr_codec, rec.pr_codec);
	assert_int_equal(out.pr_lsize, rec.pr_lsize);
	assert_int_equal(out.pr_psize, rec.pr_psize);
	assert_memory_equal(out.pr_hash, rec.pr_hash, 32);
}

static void test_rec_every_bit_flip_refused(void **state)
{
	uint8_t hdr[DD_PACK_REC_HDR_SIZE], bad[DD_PACK_REC_HDR_SIZE];
	dd_pack_rec rec, out;
	dd_err err;

	(void)state;
	make_rec(&rec, DD_CODEC_NONE, 4096, 4096);
	dd_pack_rec_encode(hdr, &rec);
	for (int i = 0; i < DD_PACK_REC_HDR_SIZE; i++) {
		for (int bit = 0; bit < 8; bit++) {
			memcpy(bad, hdr, sizeof(hdr));
			bad[i] ^= (uint8_t)(1u << bit);
			dd_err_clear(&err);
			int rc = dd_pack_rec_decode(&err, bad, &out);
			if (rc == 0)
				fail_msg("flip of byte %d bit %d accepted", i,
					 bit);
			assert_int_equal(err.de_code, rc);
			assert_true(strncmp(err.de_msg, "DD_E", 4) == 0);
		}
	}
}

static void test_rec_version_flags_codec(void **state)
{
	uint8_t hdr[DD_PACK_REC_HDR_SIZE];
	dd_pack_rec rec, out;
	dd_err err;

	(void)state;
	make_rec(&rec, DD_CODEC_NONE, 100, 100);

	dd_pack_rec_encode(hdr, &rec);
	hdr[4] = 2;
	fix_crc(hdr);
	assert_int_equal(dd_pack_rec_decode(&err, hdr, &out), DD_EVERSION);
	assert_non_null(strstr(err.de_msg, "version 2"));
	/* A newer layout may move the CRC: still "newer", not "damaged". */
	hdr[60] ^= 1;
	assert_int_equal(dd_pack_rec_decode(&err, hdr, &out), DD_EVERSION);

	dd_pack_rec_encode(hdr, &rec);
	hdr[4] = 0;
	fix_crc(hdr);
	assert_int_equal(dd_pack_rec_decode(&err, hdr, &out), DD_ECORRUPT);

	for (int bit = 0; bit < 16; bit++) {
		dd_pack_rec_encode(hdr, &rec);
		dd_put_le16(hdr + 6, (uint16_t)(1u << bit));
		fix_crc(hdr);
		assert_int_equal(dd_pack_rec_decode(&err, hdr, &out),
				 DD_ENOTSUP);
	}

	dd_pack_rec_encode(hdr, &rec);
	hdr[5] = 2;
	fix_crc(hdr);
	assert_int_equal(dd_pack_rec_decode(&err, hdr, &out), DD_ENOTSUP);
	assert_non_null(strstr(err.de_msg, "codec 2"));

	for (int i = 48; i < 60; i++) {
		dd_pack_rec_encode(hdr, &rec);
		hdr[i] = 1;
		fix_crc(hdr);
		assert_int_equal(dd_pack_rec_decode(&err, hdr, &out),
				 DD_ECORRUPT);
	}

	dd_pack_rec_encode(hdr, &rec);
	hdr[0] = 'X';
	fix_crc(hdr);
	assert_int_equal(dd_pack_rec_decode(&err, hdr, &out), DD_ECORRUPT);
}

static int decode_sizes(uint8_t codec, uint32_t lsize, uint32_t psize)
{
	uint8_t hdr[DD_PACK_REC_HDR_SIZE];
	dd_pack_rec rec, out;
	dd_err err;

	/* Encode writes whatever it is given: the decoder is the gate. */
	make_rec(&rec, codec, lsize, psize);
	dd_pack_rec_encode(hdr, &rec);
	return dd_pack_rec_decode(&err, hdr, &out);
}

static void test_rec_size_limits(void **state)
{
	const uint32_t max = DD_BLOCK_SIZE_MAX;

	(void)state;
	assert_int_equal(decode_sizes(DD_CODEC_NONE, 1, 1), 0);
	assert_int_equal(decode_sizes(DD_CODEC_NONE, max, max), 0);
	assert_int_equal(decode_sizes(DD_CODEC_NONE, 0, 0), DD_ECORRUPT);
	assert_int_equal(decode_sizes(DD_CODEC_NONE, max + 1, max + 1),
			 DD_ECORRUPT);
	assert_int_equal(decode_sizes(DD_CODEC_NONE, 100, 99), DD_ECORRUPT);
	assert_int_equal(decode_sizes(DD_CODEC_NONE, 100, 101), DD_ECORRUPT);
	assert_int_equal(decode_sizes(DD_CODEC_ZSTD, 100, 1), 0);
	assert_int_equal(decode_sizes(DD_CODEC_ZSTD, 100, 100), 0);
	assert_int_equal(decode_sizes(DD_CODEC_ZSTD, max, max), 0);
	assert_int_equal(decode_sizes(DD_CODEC_ZSTD, 100, 0), DD_ECORRUPT);
	assert_int_equal(decode_sizes(DD_CODEC_ZSTD, 100, 101), DD_ECORRUPT);
	assert_int_equal(decode_sizes(DD_CODEC_ZSTD, max + 1, 10),
			 DD_ECORRUPT);
	assert_int_equal(decode_sizes(DD_CODEC_ZSTD, 0xffffffffu, 10),
			 DD_ECORRUPT);
	assert_int_equal(decode_sizes(DD_CODEC_ZSTD, 0, 0), DD_ECORRUPT);
}

/* ---- file headers ---------------------------------------------------------*/

static void test_file_hdr(void **state)
{
	static const uint8_t magic[8] = { 0x89, 'D', 'D', 'P', 'A', 'C', 'K',
					  '\n' };
	uint8_t hdr[DD_PACK_FILE_HDR_SIZE], bad[DD_PACK_FILE_HDR_SIZE];
	uint32_t id = 0;
	dd_err err;

	(void)state;
	dd_pack_file_hdr_encode(hdr, 0xdeadbeefu);
	assert_memory_equal(hdr, magic, 8);
	assert_int_equal(dd_get_le32(hdr + 8), 1);
	assert_int_equal(dd_get_le32(hdr + 12), 0);
	assert_int_equal(dd_get_le32(hdr + 16), 0xdeadbeefu);
	for (int i = 20; i < 60; i++)
		assert_int_equal(hdr[i], 0);
	assert_int_equal(dd_get_le32(hdr + 60), dd_crc32c(0, hdr, 60));
	assert_int_equal(dd_pack_file_hdr_decode(&err, hdr, &id), 0);
	assert_int_equal(id, 0xdeadbeefu);

	for (int i = 0; i < DD_PACK_FILE_HDR_SIZE; i++) {
		for (int bit = 0; bit < 8; bit++) {
			memcpy(bad, hdr, sizeof(hdr));
			bad[i] ^= (uint8_t)(1u << bit);
			if (dd_pack_file_hdr_decode(&err, bad, &id) == 0)
				fail_msg("flip of byte %d bit %d accepted", i,
					 bit);
		}
	}

	memcpy(bad, hdr, sizeof(hdr));
	dd_put_le32(bad + 8, 7);
	fix_crc(bad);
	assert_int_equal(dd_pack_file_hdr_decode(&err, bad, &id), DD_EVERSION);
	assert_non_null(strstr(err.de_msg, "version 7"));

	memcpy(bad, hdr, sizeof(hdr));
	dd_put_le32(bad + 8, 0);
	fix_crc(bad);
	assert_int_equal(dd_pack_file_hdr_decode(&err, bad, &id), DD_ECORRUPT);

	for (int bit = 0; bit < 32; bit++) {
		memcpy(bad, hdr, sizeof(hdr));
		dd_put_le32(bad + 12, 1u << bit);
		fix_crc(bad);
		assert_int_equal(dd_pack_file_hdr_decode(&err, bad, &id),
				 DD_ENOTSUP);
	}

	memcpy(bad, hdr, sizeof(hdr));
	bad[40] = 1;
	fix_crc(bad);
	assert_int_equal(dd_pack_file_hdr_decode(&err, bad, &id), DD_ECORRUPT);
}

/* ---- codecs ---------------------------------------------------------------*/

static void test_codec_roundtrip(void **state)
{
	const size_t len = 128 * 1024;
	uint8_t *src = malloc(len), *dst = malloc(dd_codec_bound(len));
	uint8_t *back = malloc(len);
	dd_codec_ctx *c = NULL, *cn = NULL;
	dd_pack_rec rec;
	uint8_t codec;
	uint32_t psize;
	dd_err err;

	(void)state;
	assert_true(dd_codec_bound(len) >= len);
	assert_int_equal(dd_codec_new(&c, &err, DD_CODEC_ZSTD, 0), DD_EINVAL);
	assert_string_equal(err.de_msg,
			    "DD_EINVAL: zstd level 0 outside [1, 19]");
	assert_int_equal(dd_codec_new(&c, &err, DD_CODEC_ZSTD, 20), DD_EINVAL);
	assert_string_equal(err.de_msg,
			    "DD_EINVAL: zstd level 20 outside [1, 19]");
	assert_int_equal(dd_codec_new(&c, &err, 7, 1), DD_EINVAL);
	assert_string_equal(err.de_msg, "DD_EINVAL: codec 7 unknown");
	assert_int_equal(dd_codec_new(NULL, &err, DD_CODEC_NONE, 0), DD_EINVAL);
	assert_string_equal(err.de_msg, "DD_EINVAL: codec: NULL argument");
	assert_int_equal(dd_codec_new(&c, NULL, 7, 1), DD_EINVAL);
	assert_null(c);
	assert_int_equal(dd_codec_new(&c, &err, DD_CODEC_ZSTD, 3), 0);
	assert_int_equal(dd_codec_new(&cn, &err, DD_CODEC_NONE, 0), 0);

	/* Compressible: zstd, smaller. */
	fill_text(src, len);
	assert_int_equal(dd_codec_compress(c, &err, dst, src, len, &psize,
					   &codec), 0);
	assert_int_equal(codec, DD_CODEC_ZSTD);
	assert_true(psize < len / 10);
	make_rec(&rec, codec, (uint32_t)len, psize);
	memset(back, 0, len);
	assert_int_equal(dd_codec_decompress(c, &err, &rec, dst, back), 0);
	assert_memory_equal(back, src, len);
	/* A NONE context still reads zstd records. */
	memset(back, 0, len);
	assert_int_equal(dd_codec_decompress(cn, &err, &rec, dst, back), 0);
	assert_memory_equal(back, src, len);

	/* Random: does not shrink, stored as a copy. */
	fill_random(src, len);
	assert_int_equal(dd_codec_compress(c, &err, dst, src, len, &psize,
					   &codec), 0);
	assert_int_equal(codec, DD_CODEC_NONE);
	assert_int_equal(psize, len);
	assert_memory_equal(dst, src, len);
	make_rec(&rec, codec, (uint32_t)len, psize);
	assert_int_equal(dd_codec_decompress(c, &err, &rec, dst, back), 0);
	assert_memory_equal(back, src, len);

	/* One byte, and the NONE context. */
	assert_int_equal(dd_codec_compress(c, &err, dst, src, 1, &psize,
					   &codec), 0);
	assert_int_equal(codec, DD_CODEC_NONE);
	assert_int_equal(psize, 1);
	fill_text(src, len);
	assert_int_equal(dd_codec_compress(cn, &err, dst, src, len, &psize,
					   &codec), 0);
	assert_int_equal(codec, DD_CODEC_NONE);
	assert_int_equal(psize, len);

	assert_int_equal(dd_codec_compress(c, &err, dst, src, 0, &psize,
					   &codec), DD_EINVAL);
	assert_int_equal(dd_codec_compress(c, &err, dst, src,
					   DD_BLOCK_SIZE_MAX + 1, &psize,
					   &codec), DD_EINVAL);

	dd_codec_free(c);
	dd_codec_free(cn);
	dd_codec_free(NULL);
	free(src);
	free(dst);
	free(back);
}

static void test_codec_garbage(void **state)
{
	const size_t len = 64 * 1024;
	uint8_t *src = malloc(len), *frame = malloc(dd_codec_bound(len) + 16);
	uint8_t *bad = malloc(dd_codec_bound(len) + 16), *back = malloc(len);
	dd_codec_ctx *c = NULL;
	dd_pack_rec rec;
	uint8_t codec;
	uint32_t psize;
	dd_err err;

	(void)state;
	assert_int_equal(dd_codec_new(&c, NULL, DD_CODEC_ZSTD, 1), 0);

	/* Random bytes claiming to be zstd. */
	for (int i = 0; i < 200; i++) {
		uint32_t n = 1 + (uint32_t)(rng_next() % 4096);

		fill_random(bad, n);
		make_rec(&rec, DD_CODEC_ZSTD, (uint32_t)len, n);
		assert_int_equal(dd_codec_decompress(c, &err, &rec, bad, back),
				 DD_ECORRUPT);
		assert_true(strncmp(err.de_msg, "DD_ECORRUPT: ", 13) == 0);
	}

	fill_text(src, len);
	for (size_t i = 0; i < len; i += 97)
		src[i] = (uint8_t)(rng_next() >> 40);
	assert_int_equal(dd_codec_compress(c, &err, frame, src, len, &psize,
					   &codec), 0);
	assert_int_equal(codec, DD_CODEC_ZSTD);

	/* Content size differs from lsize, both ways. */
	make_rec(&rec, DD_CODEC_ZSTD, (uint32_t)len - 1, psize);
	assert_int_equal(dd_codec_decompress(c, &err, &rec, frame, back),
			 DD_ECORRUPT);
	make_rec(&rec, DD_CODEC_ZSTD, (uint32_t)len + 1, psize);
	assert_int_equal(dd_codec_decompress(c, &err, &rec, frame, back),
			 DD_ECORRUPT);
	/* Truncated frame, and a frame followed by a stray byte. */
	make_rec(&rec, DD_CODEC_ZSTD, (uint32_t)len, psize - 1);
	assert_int_equal(dd_codec_decompress(c, &err, &rec, frame, back),
			 DD_ECORRUPT);
	frame[psize] = 0;
	make_rec(&rec, DD_CODEC_ZSTD, (uint32_t)len, psize + 1);
	assert_int_equal(dd_codec_decompress(c, &err, &rec, frame, back),
			 DD_ECORRUPT);
	/* Two frames back to back (the second empty would still decode). */
	memcpy(frame + psize, frame, psize);
	make_rec(&rec, DD_CODEC_ZSTD, (uint32_t)len, 2 * psize);
	assert_int_equal(dd_codec_decompress(c, &err, &rec, frame, back),
			 DD_ECORRUPT);
	/* A frame followed by a skippable frame, which zstd itself would
	 * skip: format/pack.md §4 allows exactly one frame. */
	{
		static const uint8_t skip[] = { 0x50, 0x2a, 0x4d, 0x18,
						0x02, 0x00, 0x00, 0x00,
						0xaa, 0xbb };

		memcpy(frame + psize, skip, sizeof(skip));
		make_rec(&rec, DD_CODEC_ZSTD, (uint32_t)len,
			 psize + (uint32_t)sizeof(skip));
		assert_int_equal(dd_codec_decompress(c, &err, &rec, frame,
						     back), DD_ECORRUPT);
		assert_non_null(strstr(err.de_msg, "in a payload of"));
	}
	/* Uncompressed record with psize != lsize. */
	make_rec(&rec, DD_CODEC_NONE, 10, 9);
	assert_int_equal(dd_codec_decompress(c, &err, &rec, frame, back),
			 DD_ECORRUPT);
	/* Unknown codec. */
	make_rec(&rec, 9, 10, 10);
	assert_int_equal(dd_codec_decompress(c, &err, &rec, frame, back),
			 DD_ENOTSUP);

	/* Every single-byte change of a valid frame: an error or the right
	 * length, never a crash or an overflow (the sanitizers watch). */
	for (uint32_t i = 0; i < psize; i++) {
		memcpy(bad, frame, psize);
		bad[i] ^= (uint8_t)(1 + (rng_next() % 255));
		make_rec(&rec, DD_CODEC_ZSTD, (uint32_t)len, psize);
		int rc = dd_codec_decompress(c, &err, &rec, bad, back);
		assert_true(rc == 0 || rc == DD_ECORRUPT);
	}

	dd_codec_free(c);
	free(src);
	free(frame);
	free(bad);
	free(back);
}

static void test_codec_handmade_frames(void **state)
{
	/* A frame without a content size: magic, FHD 0, window 0, one raw
	 * last block of 4 bytes (RFC 8878 §3.1.1). */
	static const uint8_t no_fcs[] = {
		0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x00,
		0x21, 0x00, 0x00, 'a', 'b', 'c', 'd'
	};
	/* A skippable frame of 4 bytes. */
	static const uint8_t skippable[] = {
		0x50, 0x2a, 0x4d, 0x18, 0x04, 0x00, 0x00, 0x00, 1, 2, 3, 4
	};
	/* The same raw block in a single-segment frame with FCS = 4: valid. */
	static const uint8_t good[] = {
		0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x04,
		0x21, 0x00, 0x00, 'a', 'b', 'c', 'd'
	};
	dd_codec_ctx *c = NULL;
	dd_pack_rec rec;
	uint8_t back[8];
	dd_err err;

	(void)state;
	assert_int_equal(dd_codec_new(&c, NULL, DD_CODEC_NONE, 0), 0);
	make_rec(&rec, DD_CODEC_ZSTD, 4, sizeof(no_fcs));
	assert_int_equal(dd_codec_decompress(c, &err, &rec, no_fcs, back),
			 DD_ECORRUPT);
	assert_non_null(strstr(err.de_msg, "content size"));
	make_rec(&rec, DD_CODEC_ZSTD, 4, sizeof(skippable));
	assert_int_equal(dd_codec_decompress(c, &err, &rec, skippable, back),
			 DD_ECORRUPT);
	make_rec(&rec, DD_CODEC_ZSTD, 4, sizeof(good));
	assert_int_equal(dd_codec_decompress(c, &err, &rec, good, back), 0);
	assert_memory_equal(back, "abcd", 4);
	dd_codec_free(c);
}

/* ---- pack files -----------------------------------------------------------*/

#define NRECS 6

struct fixture {
	struct tmpdir fx_dir;
	uint8_t *fx_data[NRECS];     /* logical bytes */
	dd_pack_rec fx_rec[NRECS];
	uint64_t fx_off[NRECS];
	uint64_t fx_end;
};

static const uint32_t fixture_sizes[NRECS] = {
	4096, 1, 131072, 1024 * 1024, 333, 65536
};

/* Writes pack 42 with NRECS records, half compressible, half random. */
static void fixture_build(struct fixture *fx)
{
	uint8_t *payload = malloc(dd_codec_bound(DD_BLOCK_SIZE_MAX));
	dd_codec_ctx *c = NULL;
	dd_pack *p = NULL;
	dd_err err;

	tmpdir_make(&fx->fx_dir);
	assert_int_equal(dd_codec_new(&c, NULL, DD_CODEC_ZSTD, 1), 0);
	assert_int_equal(dd_pack_create(&p, &err, fx->fx_dir.td_vd, 42), 0);
	assert_int_equal(dd_pack_id(p), 42);
	assert_int_equal(dd_pack_end(p), DD_PACK_FILE_HDR_SIZE);
	for (int i = 0; i < NRECS; i++) {
		uint32_t n = fixture_sizes[i];
		dd_pack_rec *r = &fx->fx_rec[i];

		fx->fx_data[i] = malloc(n);
		if (i % 2)
			fill_random(fx->fx_data[i], n);
		else
			fill_text(fx->fx_data[i], n);
		memset(r, 0, sizeof(*r));
		r->pr_lsize = n;
		assert_int_equal(dd_codec_compress(c, &err, payload,
						   fx->fx_data[i], n,
						   &r->pr_psize, &r->pr_codec),
				 0);
		dd_sha256(fx->fx_data[i], n, r->pr_hash);
		assert_int_equal(dd_pack_append(p, &err, r, payload,
						 &fx->fx_off[i]), 0);
		assert_int_equal(dd_pack_end(p), fx->fx_off[i] + 64 +
				 r->pr_psize);
	}
	assert_int_equal(fx->fx_rec[0].pr_codec, DD_CODEC_ZSTD);
	assert_int_equal(fx->fx_rec[1].pr_codec, DD_CODEC_NONE);
	assert_int_equal(fx->fx_off[0], DD_PACK_FILE_HDR_SIZE);
	assert_int_equal(dd_pack_sync(p, &err), 0);
	fx->fx_end = dd_pack_end(p);
	dd_pack_close(p);
	dd_codec_free(c);
	free(payload);
	assert_int_equal(file_size_at(fx->fx_dir.td_fd, "0000002a.pack"),
			 fx->fx_end);
}

static int fixture_setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));

	fixture_build(fx);
	*state = fx;
	return 0;
}

static int fixture_teardown(void **state)
{
	struct fixture *fx = *state;

	for (int i = 0; i < NRECS; i++)
		free(fx->fx_data[i]);
	tmpdir_remove(&fx->fx_dir);
	free(fx);
	dd_fault_disarm_all();
	return 0;
}

struct walk_log {
	int wl_n;
	int wl_stop_at;              /* return 7 at this record; -1 never */
	uint64_t wl_off[NRECS + 2];
	const struct fixture *wl_fx;
};

static int walk_cb(void *ctx, uint64_t offset, const dd_pack_rec *rec,
		   const void *payload)
{
	struct walk_log *wl = ctx;
	const struct fixture *fx = wl->wl_fx;
	int i = wl->wl_n;

	if (i == wl->wl_stop_at)
		return 7;
	assert_true(i < NRECS);
	assert_int_equal(offset, fx->fx_off[i]);
	assert_int_equal(rec->pr_lsize, fx->fx_rec[i].pr_lsize);
	assert_int_equal(rec->pr_psize, fx->fx_rec[i].pr_psize);
	assert_int_equal(rec->pr_codec, fx->fx_rec[i].pr_codec);
	assert_memory_equal(rec->pr_hash, fx->fx_rec[i].pr_hash, 32);
	if (rec->pr_codec == DD_CODEC_NONE)
		assert_memory_equal(payload, fx->fx_data[i], rec->pr_psize);
	wl->wl_off[wl->wl_n++] = offset;
	return 0;
}

static int walk_pack(const struct fixture *fx, int writable, uint64_t limit,
		     int stop_at, int *n, uint64_t *end)
{
	struct walk_log wl = { .wl_stop_at = stop_at, .wl_fx = fx };
	dd_pack *p = NULL;
	dd_err err;
	int rc;

	assert_int_equal(dd_pack_open(&p, &err, fx->fx_dir.td_vd, 42,
				      writable), 0);
	rc = dd_pack_walk(p, &err, limit, walk_cb, &wl, end);
	if (rc)
		assert_true(strncmp(err.de_msg, "DD_E", 4) == 0 || rc == 7);
	dd_pack_close(p);
	*n = wl.wl_n;
	return rc;
}

static void test_pack_roundtrip(void **state)
{
	struct fixture *fx = *state;
	size_t buflen = 64 + DD_BLOCK_SIZE_MAX;
	uint8_t *buf = malloc(buflen), *back = malloc(DD_BLOCK_SIZE_MAX);
	dd_codec_ctx *c = NULL;
	dd_pack_rec rec;
	dd_pack *p = NULL;
	uint64_t end;
	dd_err err;
	int n;

	assert_int_equal(dd_codec_new(&c, NULL, DD_CODEC_NONE, 0), 0);
	assert_int_equal(dd_pack_open(&p, &err, fx->fx_dir.td_vd, 42, 0), 0);
	assert_int_equal(dd_pack_end(p), fx->fx_end);
	for (int i = 0; i < NRECS; i++) {
		const dd_pack_rec *want = &fx->fx_rec[i];

		/* With expect: one read of header + payload. */
		memset(&rec, 0, sizeof(rec));
		assert_int_equal(dd_pack_read_rec(p, &err, fx->fx_off[i], want,
						  &rec, buf, buflen), 0);
		assert_int_equal(rec.pr_codec, want->pr_codec);
		assert_int_equal(rec.pr_lsize, want->pr_lsize);
		assert_int_equal(rec.pr_psize, want->pr_psize);
		assert_int_equal(dd_codec_decompress(c, &err, &rec, buf + 64,
						     back), 0);
		assert_memory_equal(back, fx->fx_data[i], want->pr_lsize);

		/* Without: header, then payload; an exact buffer is enough. */
		memset(buf, 0, 64 + want->pr_psize);
		assert_int_equal(dd_pack_read_rec(p, &err, fx->fx_off[i], NULL,
						  &rec, buf,
						  64 + want->pr_psize), 0);
		assert_memory_equal(rec.pr_hash, want->pr_hash, 32);
		assert_int_equal(dd_codec_decompress(c, &err, &rec, buf + 64,
						     back), 0);
		assert_memory_equal(back, fx->fx_data[i], want->pr_lsize);
	}
	/* Writes need a writable handle. */
	assert_int_equal(dd_pack_append(p, &err, &fx->fx_rec[1], buf, &end),
			 DD_EPERM);
	assert_int_equal(dd_pack_truncate(p, &err, 64), DD_EPERM);
	dd_pack_close(p);
	dd_pack_close(NULL);

	assert_int_equal(walk_pack(fx, 0, 0, -1, &n, &end), 0);
	assert_int_equal(n, NRECS);
	assert_int_equal(end, fx->fx_end);
	assert_int_equal(walk_pack(fx, 1, fx->fx_end, -1, &n, &end), 0);
	assert_int_equal(n, NRECS);
	assert_int_equal(end, fx->fx_end);

	dd_codec_free(c);
	free(buf);
	free(back);
}

static void test_pack_name_and_exists(void **state)
{
	struct fixture *fx = *state;
	char name[16];
	dd_pack *p = NULL;
	dd_err err;

	dd_pack_name(name, sizeof(name), 42);
	assert_string_equal(name, "0000002a.pack");
	dd_pack_name(name, sizeof(name), 0xffffffffu);
	assert_string_equal(name, "ffffffff.pack");

	assert_int_equal(dd_pack_create(&p, &err, fx->fx_dir.td_vd, 42),
			 DD_EEXIST);
	assert_null(p);
	assert_int_equal(dd_pack_open(&p, &err, fx->fx_dir.td_vd, 43, 0),
			 DD_ENOENT);

	/* A pack renamed to another id is not that pack. */
	assert_int_equal(linkat(fx->fx_dir.td_fd, "0000002a.pack",
				fx->fx_dir.td_fd, "0000002b.pack", 0), 0);
	assert_int_equal(dd_pack_open(&p, &err, fx->fx_dir.td_vd, 43, 0),
			 DD_ECORRUPT);
	assert_non_null(strstr(err.de_msg, "0000002b.pack"));

	/* Shorter than a header. */
	truncate_at(fx->fx_dir.td_fd, "0000002b.pack", 63);
	assert_int_equal(dd_pack_open(&p, &err, fx->fx_dir.td_vd, 43, 0),
			 DD_ECORRUPT);
}

static void test_pack_open_newer_version(void **state)
{
	struct fixture *fx = *state;
	uint8_t hdr[DD_PACK_FILE_HDR_SIZE];
	dd_pack *p = NULL;
	dd_err err;
	int fd;

	dd_pack_file_hdr_encode(hdr, 42);
	dd_put_le32(hdr + 8, 2);
	fix_crc(hdr);
	fd = openat(fx->fx_dir.td_fd, "0000002a.pack", O_WRONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, hdr, sizeof(hdr), 0), (ssize_t)sizeof(hdr));
	close(fd);
	assert_int_equal(dd_pack_open(&p, &err, fx->fx_dir.td_vd, 42, 0),
			 DD_EVERSION);
	assert_non_null(strstr(err.de_msg, "version 2"));
	assert_true(strncmp(err.de_msg, "DD_EVERSION: ", 13) == 0);
	/* The symbol appears once, though the message was re-wrapped. */
	assert_null(strstr(err.de_msg + 1, "DD_EVERSION"));
}

static void test_pack_read_mismatch(void **state)
{
	struct fixture *fx = *state;
	size_t buflen = 64 + DD_BLOCK_SIZE_MAX;
	uint8_t *buf = malloc(buflen);
	dd_pack_rec want, rec;
	dd_pack *p = NULL;
	dd_err err;

	assert_int_equal(dd_pack_open(&p, &err, fx->fx_dir.td_vd, 42, 0), 0);

	want = fx->fx_rec[2];
	want.pr_hash[31] ^= 1;
	assert_int_equal(dd_pack_read_rec(p, &err, fx->fx_off[2], &want, &rec,
					  buf, buflen), DD_ECORRUPT);
	assert_non_null(strstr(err.de_msg, "hash differs"));

	want = fx->fx_rec[2];
	want.pr_lsize += 1;
	assert_int_equal(dd_pack_read_rec(p, &err, fx->fx_off[2], &want, &rec,
					  buf, buflen), DD_ECORRUPT);

	want = fx->fx_rec[2];
	want.pr_psize -= 1;
	assert_int_equal(dd_pack_read_rec(p, &err, fx->fx_off[2], &want, &rec,
					  buf, buflen), DD_ECORRUPT);

	/* Expected sizes that break the format never size a read. */
	want = fx->fx_rec[2];
	want.pr_psize = want.pr_lsize + 1;
	assert_int_equal(dd_pack_read_rec(p, &err, fx->fx_off[2], &want, &rec,
					  buf, buflen), DD_ECORRUPT);
	want.pr_lsize = 0xffffffffu;
	want.pr_psize = 0xfffffff0u;
	assert_int_equal(dd_pack_read_rec(p, &err, fx->fx_off[2], &want, &rec,
					  buf, buflen), DD_ECORRUPT);

	/* Buffer too small for the record, with and without expect. */
	want = fx->fx_rec[2];
	assert_int_equal(dd_pack_read_rec(p, &err, fx->fx_off[2], &want, &rec,
					  buf, 64 + want.pr_psize - 1),
			 DD_EINVAL);
	assert_int_equal(dd_pack_read_rec(p, &err, fx->fx_off[2], NULL, &rec,
					  buf, 64 + want.pr_psize - 1),
			 DD_EINVAL);
	assert_int_equal(dd_pack_read_rec(p, &err, fx->fx_off[2], NULL, &rec,
					  buf, 63), DD_EINVAL);

	/* Offsets that are not record starts. */
	assert_int_equal(dd_pack_read_rec(p, &err, 0, NULL, &rec, buf, buflen),
			 DD_ECORRUPT);
	assert_int_equal(dd_pack_read_rec(p, &err, fx->fx_off[2] + 1, NULL,
					  &rec, buf, buflen), DD_ECORRUPT);
	assert_int_equal(dd_pack_read_rec(p, &err, fx->fx_end, NULL, &rec, buf,
					  buflen), DD_ECORRUPT);
	assert_int_equal(dd_pack_read_rec(p, &err, UINT64_MAX - 10, NULL, &rec,
					  buf, buflen), DD_ECORRUPT);
	/* The record's header is checked on the expect path too. */
	want = fx->fx_rec[3];
	assert_int_equal(dd_pack_read_rec(p, &err, fx->fx_off[2], &want, &rec,
					  buf, buflen), DD_ECORRUPT);

	dd_pack_close(p);
	free(buf);
}

static void test_pack_torn_tail(void **state)
{
	struct fixture *fx = *state;
	const char *name = "0000002a.pack";
	int fd = fx->fx_dir.td_fd;
	uint8_t payload[64];
	uint64_t end, off;
	dd_pack_rec rec;
	dd_pack *p = NULL;
	dd_err err;
	int n;

	/* Cut inside the payload of the last record. */
	truncate_at(fd, name, fx->fx_end - 1);
	assert_int_equal(walk_pack(fx, 0, 0, -1, &n, &end), DD_ECORRUPT);
	assert_int_equal(n, NRECS - 1);
	assert_int_equal(end, fx->fx_off[NRECS - 1]);

	/* Cut inside the header of the last record. */
	truncate_at(fd, name, fx->fx_off[NRECS - 1] + 10);
	assert_int_equal(walk_pack(fx, 0, 0, -1, &n, &end), DD_ECORRUPT);
	assert_int_equal(n, NRECS - 1);
	assert_int_equal(end, fx->fx_off[NRECS - 1]);

	/* The next writer cuts the tail and appends after the good part. */
	assert_int_equal(dd_pack_open(&p, &err, fx->fx_dir.td_vd, 42, 1), 0);
	assert_int_equal(dd_pack_end(p), fx->fx_off[NRECS - 1] + 10);
	assert_int_equal(dd_pack_truncate(p, &err, fx->fx_end), DD_ECORRUPT);
	assert_int_equal(dd_pack_truncate(p, &err, 63), DD_EINVAL);
	assert_int_equal(dd_pack_truncate(p, &err, end), 0);
	assert_int_equal(file_size_at(fd, name), end);
	memset(payload, 'z', sizeof(payload));
	make_rec(&rec, DD_CODEC_NONE, sizeof(payload), sizeof(payload));
	assert_int_equal(dd_pack_append(p, &err, &rec, payload, &off), 0);
	assert_int_equal(off, end);
	assert_int_equal(dd_pack_sync(p, &err), 0);
	dd_pack_close(p);
	/* NRECS-1 fixture records, then the new one, which walk_cb does not
	 * know: stop there with the callback. */
	assert_int_equal(walk_pack(fx, 0, 0, NRECS - 1, &n, &end), 7);
	assert_int_equal(n, NRECS - 1);
	assert_int_equal(end, off);
}

static void test_pack_walk_damage_and_limits(void **state)
{
	struct fixture *fx = *state;
	const char *name = "0000002a.pack";
	uint64_t end;
	int n;

	/* Limits on and off record boundaries, and past the end. */
	assert_int_equal(walk_pack(fx, 0, fx->fx_off[3], -1, &n, &end), 0);
	assert_int_equal(n, 3);
	assert_int_equal(end, fx->fx_off[3]);
	assert_int_equal(walk_pack(fx, 0, fx->fx_off[3] + 100, -1, &n, &end),
			 DD_ECORRUPT);
	assert_int_equal(n, 3);
	assert_int_equal(end, fx->fx_off[3]);
	assert_int_equal(walk_pack(fx, 0, fx->fx_end + 1, -1, &n, &end),
			 DD_ECORRUPT);
	assert_int_equal(n, NRECS);
	assert_int_equal(end, fx->fx_end);

	/* The callback stops the walk. */
	assert_int_equal(walk_pack(fx, 0, 0, 2, &n, &end), 7);
	assert_int_equal(n, 2);
	assert_int_equal(end, fx->fx_off[2]);

	/* A damaged header stops the walk before it. */
	poke_at(fx->fx_dir.td_fd, name, fx->fx_off[4] + 9, 0x01);
	assert_int_equal(walk_pack(fx, 0, 0, -1, &n, &end), DD_ECORRUPT);
	assert_int_equal(n, 4);
	assert_int_equal(end, fx->fx_off[4]);
	poke_at(fx->fx_dir.td_fd, name, fx->fx_off[4] + 9, 0x01);
	assert_int_equal(walk_pack(fx, 0, 0, -1, &n, &end), 0);
	assert_int_equal(n, NRECS);
}

static void test_pack_walk_hostile(void **state)
{
	struct fixture *fx = *state;
	uint8_t hdr[DD_PACK_REC_HDR_SIZE];
	dd_pack_rec rec;
	uint64_t end;
	int fd, n;

	/* A valid header that claims a 1 MiB payload the file lacks. */
	make_rec(&rec, DD_CODEC_NONE, DD_BLOCK_SIZE_MAX, DD_BLOCK_SIZE_MAX);
	dd_pack_rec_encode(hdr, &rec);
	fd = openat(fx->fx_dir.td_fd, "0000002a.pack", O_WRONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, hdr, sizeof(hdr), (off_t)fx->fx_end),
			 (ssize_t)sizeof(hdr));
	assert_int_equal(pwrite(fd, "xyz", 3, (off_t)fx->fx_end + 64), 3);
	close(fd);
	assert_int_equal(walk_pack(fx, 0, 0, -1, &n, &end), DD_ECORRUPT);
	assert_int_equal(n, NRECS);
	assert_int_equal(end, fx->fx_end);
	/* With the committed length as limit, the tail is not looked at. */
	assert_int_equal(walk_pack(fx, 0, fx->fx_end, -1, &n, &end), 0);
	assert_int_equal(n, NRECS);
}

static void test_pack_faults(void **state)
{
	struct fixture *fx = *state;
	uint8_t payload[100], *big;
	dd_pack_rec rec;
	dd_pack *p = NULL;
	uint64_t off;
	dd_err err;

	memset(payload, 1, sizeof(payload));
	make_rec(&rec, DD_CODEC_NONE, sizeof(payload), sizeof(payload));

	/* A failed create leaves no file, so the id can be retried. */
	dd_fault_arm(DD_FAULT_WRITE, 1, EIO, 0);
	assert_int_equal(dd_pack_create(&p, &err, fx->fx_dir.td_vd, 7),
			 DD_EIO);
	assert_int_equal(faccessat(fx->fx_dir.td_fd, "00000007.pack", F_OK, 0),
			 -1);
	dd_fault_arm(DD_FAULT_SYNC, 1, EIO, 0);
	assert_int_equal(dd_pack_create(&p, &err, fx->fx_dir.td_vd, 7),
			 DD_EIO);
	assert_int_equal(faccessat(fx->fx_dir.td_fd, "00000007.pack", F_OK, 0),
			 -1);
	assert_int_equal(dd_pack_create(&p, &err, fx->fx_dir.td_vd, 7), 0);

	/* Records gather in the write buffer: the file grows at flush.  A
	 * failed write of the buffer loses its records, so the end goes
	 * back and the handle is done, as after a failed sync. */
	assert_int_equal(dd_pack_append(p, &err, &rec, payload, &off), 0);
	assert_int_equal(off, 64);
	assert_int_equal(file_size_at(fx->fx_dir.td_fd, "00000007.pack"), 64);
	assert_int_equal(dd_pack_flush(p, &err), 0);
	assert_int_equal(file_size_at(fx->fx_dir.td_fd, "00000007.pack"), 64 + 64 + 100);
	assert_int_equal(dd_pack_append(p, &err, &rec, payload, &off), 0);
	dd_fault_arm(DD_FAULT_WRITE, 1, ENOSPC, 0);
	assert_int_equal(dd_pack_flush(p, &err), DD_ENOSPC);
	assert_int_equal(dd_pack_end(p), 64 + 64 + 100);
	assert_int_equal(file_size_at(fx->fx_dir.td_fd, "00000007.pack"), 64 + 64 + 100);
	assert_int_equal(dd_pack_append(p, &err, &rec, payload, &off), DD_EIO);
	assert_int_equal(dd_pack_sync(p, &err), DD_EIO);
	dd_pack_close(p);

	/* A record bigger than the buffer is written at once: a failed
	 * write leaves the end where it was, and the handle goes on. */
	assert_int_equal(dd_pack_create(&p, &err, fx->fx_dir.td_vd, 8), 0);
	big = calloc(1, 1u << 20);
	assert_non_null(big);
	make_rec(&rec, DD_CODEC_NONE, 1u << 20, 1u << 20);
	dd_fault_arm(DD_FAULT_WRITE, 2, ENOSPC, 0);
	assert_int_equal(dd_pack_append(p, &err, &rec, big, &off), DD_ENOSPC);
	assert_int_equal(dd_pack_end(p), 64);
	assert_int_equal(dd_pack_append(p, &err, &rec, big, &off), 0);
	assert_int_equal(off, 64);
	assert_int_equal(file_size_at(fx->fx_dir.td_fd, "00000008.pack"), 64 + 64 + (1u << 20));
	free(big);
	make_rec(&rec, DD_CODEC_NONE, sizeof(payload), sizeof(payload));

	/* Invalid records are refused before any write. */
	rec.pr_psize = 99;
	assert_int_equal(dd_pack_append(p, &err, &rec, payload, &off),
			 DD_EINVAL);
	rec.pr_psize = 100;

	/* After a failed sync the handle is done. */
	dd_fault_arm(DD_FAULT_SYNC, 1, EIO, 0);
	assert_int_equal(dd_pack_sync(p, &err), DD_EIO);
	assert_int_equal(dd_pack_append(p, &err, &rec, payload, &off), DD_EIO);
	assert_int_equal(dd_pack_sync(p, &err), DD_EIO);
	dd_pack_close(p);
	dd_fault_disarm_all();
}

/* ---- drop-behind (file.c, DD_PACK_DROP_LAG) --------------------------------*/

/* Pages of [off, off + len) of dir/name in the page cache: mincore on a
 * map of the file, which reads nothing in by itself. */
static size_t resident_pages(int dirfd, const char *name, uint64_t off,
			     uint64_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), n = 0, np;
	uint64_t size = file_size_at(dirfd, name);
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	unsigned char *vec;
	void *map;

	assert_true(fd >= 0);
	map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(map != MAP_FAILED);
	off = off / page * page;
	np = (size_t)((len + page - 1) / page);
	vec = calloc(np, 1);
	assert_non_null(vec);
	assert_int_equal(mincore((uint8_t *)map + off, np * page, vec), 0);
	for (size_t i = 0; i < np; i++)
		n += vec[i] & 1;
	free(vec);
	munmap(map, size);
	close(fd);
	return n;
}

#define DROP_REC ((uint32_t)256 << 10)
#define DROP_NREC 192   /* 48 MiB: past the lag (32 MiB) and a flush */

static void drop_fill(uint8_t *buf, int i)
{
	for (uint32_t j = 0; j < DROP_REC; j += 4096)
		memset(buf + j, (i * 31 + (int)(j >> 12)) & 0xff, 4096);
}

/* Appended bytes far enough behind the end leave the page cache while the
 * pack grows, and all of them at a sync; they read back the same.  On a
 * tmpfs nothing can leave (its pages are the file), so there only the
 * bytes are checked. */
static void test_pack_drop_behind(void **state)
{
	struct fixture *fx = *state;
	const char *name = "00000009.pack";
	uint8_t *buf = malloc(DROP_REC), *back = malloc(64 + DROP_REC);
	uint64_t off[DROP_NREC], mib = 1u << 20;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	dd_pack_rec rec, got;
	dd_pack *p = NULL;
	struct statfs sf;
	bool tmpfs;
	dd_err err;

	assert_non_null(buf);
	assert_non_null(back);
	assert_int_equal(fstatfs(fx->fx_dir.td_fd, &sf), 0);
	tmpfs = sf.f_type == 0x01021994; /* TMPFS_MAGIC */
	make_rec(&rec, DD_CODEC_NONE, DROP_REC, DROP_REC);
	assert_int_equal(dd_pack_create(&p, &err, fx->fx_dir.td_vd, 9), 0);
	for (int i = 0; i < DROP_NREC; i++) {
		drop_fill(buf, i);
		assert_int_equal(dd_pack_append(p, &err, &rec, buf, &off[i]), 0);
	}
	/* 48 MiB appended, 47 of them written out: the first 7 MiB are 32
	 * MiB and a flush behind, the last 8 MiB written were not waited
	 * for and stay */
	if (!tmpfs) {
		assert_int_equal(resident_pages(fx->fx_dir.td_fd, name, 0,
						7 * mib), 0);
		assert_true(resident_pages(fx->fx_dir.td_fd, name, 40 * mib,
					   7 * mib) > 0);
	}
	assert_int_equal(dd_pack_sync(p, &err), 0);
	/* synced: all of it goes but the page the next append writes to --
	 * and the few just written that the kernel still holds in its
	 * per-CPU batches, which a drop cannot take (a hint) */
	if (!tmpfs)
		assert_true(resident_pages(fx->fx_dir.td_fd, name, 0,
					   dd_pack_end(p) / page * page) <
			    mib / page);
	for (int i = 0; i < DROP_NREC; i++) {
		drop_fill(buf, i);
		assert_int_equal(dd_pack_read_rec(p, &err, off[i], &rec, &got,
						  back, 64 + DROP_REC), 0);
		assert_memory_equal(back + 64, buf, DROP_REC);
	}
	dd_pack_close(p);

	/* The wait is where a writeback error shows, once: the append
	 * that meets it fails and the handle is done, as after a failed
	 * write -- a sync must not vouch for what was lost. */
	assert_int_equal(dd_pack_create(&p, &err, fx->fx_dir.td_vd, 10), 0);
	dd_fault_arm(DD_FAULT_SYNC, 1, EIO, 0);
	int rc = 0, i;

	for (i = 0; i < DROP_NREC && rc == 0; i++)
		rc = dd_pack_append(p, &err, &rec, buf, &off[i]);
	assert_int_equal(rc, DD_EIO);
	assert_true(i * (uint64_t)DROP_REC >= 40 * mib);
	assert_non_null(strstr(err.de_msg, "write back"));
	assert_int_equal(dd_pack_append(p, &err, &rec, buf, &off[0]), DD_EIO);
	assert_int_equal(dd_pack_sync(p, &err), DD_EIO);
	dd_pack_close(p);
	dd_fault_disarm_all();
	free(buf);
	free(back);
}

/* ---- golden file (format/pack.md §8) --------------------------------------*/

#define GOLDEN_NRECS 3

struct golden_rec {
	uint8_t gr_codec;
	uint32_t gr_lsize;
	uint8_t gr_data[4096];
};

static void golden_data(struct golden_rec g[GOLDEN_NRECS])
{
	memset(g, 0, sizeof(*g) * GOLDEN_NRECS);
	g[0].gr_codec = DD_CODEC_NONE;
	g[0].gr_lsize = 13;
	memcpy(g[0].gr_data, "hello, pack!\n", 13);
	g[1].gr_codec = DD_CODEC_ZSTD;
	g[1].gr_lsize = 4096;
	fill_text(g[1].gr_data, 4096);
	g[2].gr_codec = DD_CODEC_NONE;
	g[2].gr_lsize = 256;
	for (int i = 0; i < 256; i++)
		g[2].gr_data[i] = (uint8_t)i;
}

static uint8_t *read_whole(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf;
	long n;

	if (!f)
		fail_msg("cannot open %s: %s (regenerate with DD_REGEN_GOLDEN=1)",
			 path, strerror(errno));
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n >= 0);
	rewind(f);
	buf = malloc((size_t)n + 1);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/* Builds the golden pack through the library and copies it into place. */
static void golden_regen(const char *path)
{
	struct golden_rec g[GOLDEN_NRECS];
	uint8_t payload[8192], *bytes;
	dd_codec_ctx *c = NULL;
	struct tmpdir t;
	dd_pack *p = NULL;
	dd_pack_rec rec;
	uint64_t off;
	size_t len;
	char src[128];
	dd_err err;
	FILE *f;

	golden_data(g);
	tmpdir_make(&t);
	assert_int_equal(dd_codec_new(&c, NULL, DD_CODEC_ZSTD, 3), 0);
	assert_int_equal(dd_pack_create(&p, &err, t.td_vd, GOLDEN_ID), 0);
	for (int i = 0; i < GOLDEN_NRECS; i++) {
		memset(&rec, 0, sizeof(rec));
		rec.pr_lsize = g[i].gr_lsize;
		if (g[i].gr_codec == DD_CODEC_ZSTD) {
			assert_int_equal(dd_codec_compress(c, &err, payload,
							   g[i].gr_data,
							   g[i].gr_lsize,
							   &rec.pr_psize,
							   &rec.pr_codec), 0);
			assert_int_equal(rec.pr_codec, DD_CODEC_ZSTD);
		} else {
			rec.pr_codec = DD_CODEC_NONE;
			rec.pr_psize = g[i].gr_lsize;
			memcpy(payload, g[i].gr_data, g[i].gr_lsize);
		}
		dd_sha256(g[i].gr_data, g[i].gr_lsize, rec.pr_hash);
		assert_int_equal(dd_pack_append(p, &err, &rec, payload, &off),
				 0);
	}
	assert_int_equal(dd_pack_sync(p, &err), 0);
	dd_pack_close(p);
	dd_codec_free(c);
	snprintf(src, sizeof(src), "%s/%08x.pack", t.td_path, GOLDEN_ID);
	bytes = read_whole(src, &len);
	f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(bytes, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
	free(bytes);
	tmpdir_remove(&t);
}

static int golden_walk_cb(void *ctx, uint64_t offset, const dd_pack_rec *rec,
			  const void *payload)
{
	int *n = ctx;

	(void)offset;
	(void)rec;
	(void)payload;
	(*n)++;
	return 0;
}

static int headers_walk_cb(void *ctx, uint64_t offset, const dd_pack_rec *rec,
			   const void *payload)
{
	assert_null(payload);
	return golden_walk_cb(ctx, offset, rec, payload);
}

static void test_golden(void **state)
{
	const char *path = DD_GOLDEN_DIR "/pack_v1.pack";
	struct golden_rec g[GOLDEN_NRECS];
	uint8_t *gold, *fresh, back[4096];
	size_t glen, pos = 0, off;
	dd_codec_ctx *c = NULL;
	struct tmpdir t;
	dd_pack_rec rec, want;
	dd_pack *p = NULL;
	uint64_t end;
	uint32_t id;
	dd_err err;
	int fd, n = 0;

	(void)state;
	if (getenv("DD_REGEN_GOLDEN") &&
	    strcmp(getenv("DD_REGEN_GOLDEN"), "1") == 0)
		golden_regen(path);

	golden_data(g);
	gold = read_whole(path, &glen);
	fresh = calloc(1, glen + 64);
	assert_int_equal(dd_codec_new(&c, NULL, DD_CODEC_NONE, 0), 0);

	/* Decode the golden file field by field... */
	assert_true(glen >= 64);
	assert_int_equal(dd_pack_file_hdr_decode(&err, gold, &id), 0);
	assert_int_equal(id, GOLDEN_ID);
	dd_pack_file_hdr_encode(fresh, GOLDEN_ID);
	pos = off = 64;
	for (int i = 0; i < GOLDEN_NRECS; i++) {
		assert_true(off + 64 <= glen);
		assert_int_equal(dd_pack_rec_decode(&err, gold + off, &rec), 0);
		assert_int_equal(rec.pr_codec, g[i].gr_codec);
		assert_int_equal(rec.pr_lsize, g[i].gr_lsize);
		assert_true(off + 64 + rec.pr_psize <= glen);
		assert_int_equal(dd_codec_decompress(c, &err, &rec,
						     gold + off + 64, back), 0);
		assert_memory_equal(back, g[i].gr_data, g[i].gr_lsize);

		/* ...and encode it afresh from the known data.  Only the
		 * zstd payload (and so its psize) comes from the file:
		 * compressed bytes may change between zstd releases. */
		memset(&want, 0, sizeof(want));
		want.pr_codec = g[i].gr_codec;
		want.pr_lsize = g[i].gr_lsize;
		want.pr_psize = g[i].gr_codec == DD_CODEC_ZSTD ?
				rec.pr_psize : g[i].gr_lsize;
		dd_sha256(g[i].gr_data, g[i].gr_lsize, want.pr_hash);
		assert_true(pos + 64 + want.pr_psize <= glen);
		dd_pack_rec_encode(fresh + pos, &want);
		memcpy(fresh + pos + 64,
		       g[i].gr_codec == DD_CODEC_ZSTD ? gold + off + 64 :
							 g[i].gr_data,
		       want.pr_psize);
		pos += 64 + want.pr_psize;
		off += 64 + rec.pr_psize;
	}
	assert_int_equal(pos, glen);
	assert_memory_equal(fresh, gold, glen);

	/* The library reads it as a pack too. */
	tmpdir_make(&t);
	fd = openat(t.td_fd, "0000002a.pack", O_WRONLY | O_CREAT | O_EXCL, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, gold, glen), (ssize_t)glen);
	close(fd);
	assert_int_equal(dd_pack_open(&p, &err, t.td_vd, GOLDEN_ID, 0), 0);
	assert_int_equal(dd_pack_walk(p, &err, 0, golden_walk_cb, &n, &end), 0);
	assert_int_equal(n, GOLDEN_NRECS);
	assert_int_equal(end, glen);
	/* headers only: the same records, no payloads */
	n = 0;
	assert_int_equal(dd_pack_walk_headers(p, &err, headers_walk_cb, &n,
					      &end), 0);
	assert_int_equal(n, GOLDEN_NRECS);
	assert_int_equal(end, glen);
	dd_pack_close(p);
	tmpdir_remove(&t);

	dd_codec_free(c);
	free(gold);
	free(fresh);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc32c_check_value),
		cmocka_unit_test(test_rec_roundtrip),
		cmocka_unit_test(test_rec_every_bit_flip_refused),
		cmocka_unit_test(test_rec_version_flags_codec),
		cmocka_unit_test(test_rec_size_limits),
		cmocka_unit_test(test_file_hdr),
		cmocka_unit_test(test_codec_roundtrip),
		cmocka_unit_test(test_codec_garbage),
		cmocka_unit_test(test_codec_handmade_frames),
		cmocka_unit_test_setup_teardown(test_pack_roundtrip,
						fixture_setup, fixture_teardown),
		cmocka_unit_test_setup_teardown(test_pack_name_and_exists,
						fixture_setup, fixture_teardown),
		cmocka_unit_test_setup_teardown(test_pack_open_newer_version,
						fixture_setup, fixture_teardown),
		cmocka_unit_test_setup_teardown(test_pack_read_mismatch,
						fixture_setup, fixture_teardown),
		cmocka_unit_test_setup_teardown(test_pack_torn_tail,
						fixture_setup, fixture_teardown),
		cmocka_unit_test_setup_teardown(test_pack_walk_damage_and_limits,
						fixture_setup, fixture_teardown),
		cmocka_unit_test_setup_teardown(test_pack_walk_hostile,
						fixture_setup, fixture_teardown),
		cmocka_unit_test_setup_teardown(test_pack_faults,
						fixture_setup, fixture_teardown),
		cmocka_unit_test_setup_teardown(test_pack_drop_behind,
						fixture_setup, fixture_teardown),
		cmocka_unit_test(test_golden),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
