/*
 * test_stream.c -- the replication stream (format/stream.md): encoder and
 * decoder round trips, golden streams, hostile input (every truncation,
 * every byte flip, bad versions, features, types, sizes, names, order),
 * and the store-less functions dd_send_fd / dd_recv_fd / dd_stream_check.
 *
 * Golden streams use codec none and a hand-built zstd RLE frame, so their
 * bytes do not depend on the zstd version.  Regenerate them with
 * DD_REGEN_GOLDEN=1 only when the format version changes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "dedup.h"
#include "helpers.h"
#include "common/faults.h"
#include "common/crc32c.h"
#include "common/endian.h"
#include "common/err.h"
#include "hash/hash.h"
#include "pack/pack.h"
#include "stream/sdig.h"
#include "stream/stream.h"
#include "store/store_internal.h"

#ifndef DD_GOLDEN_DIR
#define DD_GOLDEN_DIR "tests/golden"
#endif

#define BS 4096u

/* ---- memory callbacks -----------------------------------------------------*/

static th_mem mem_of(const uint8_t *p, size_t len)
{
	th_mem m = {0};

	m.p = malloc(len ? len : 1);
	assert_non_null(m.p);
	memcpy(m.p, p, len);
	m.len = m.cap = len;
	return m;
}

struct tmpfile {
	char path[64];
	int fd;
};

static void tmp_open(struct tmpfile *t)
{
	strcpy(t->path, "/tmp/dd_test_stream.XXXXXX");
	t->fd = mkstemp(t->path);
	assert_true(t->fd >= 0);
}

static void tmp_close(struct tmpfile *t)
{
	close(t->fd);
	unlink(t->path);
}

/* ---- test data ------------------------------------------------------------*/

static uint64_t rng_state;

static void fill_random(uint8_t *p, size_t len, uint64_t seed)
{
	rng_state = seed * 0x9e3779b97f4a7c15ull + 1;
	for (size_t i = 0; i < len; i++) {
		rng_state = rng_state * 6364136223846793005ull +
			1442695040888963407ull;
		p[i] = (uint8_t)(rng_state >> 56);
	}
}

/* A zstd frame of one RLE block: `n` bytes of value `b` (n >= 256,
 * n < 65792).  Built by hand so the golden bytes do not depend on the
 * zstd version (RFC 8878 §3.1.1). */
static size_t zstd_rle_frame(uint8_t out[11], uint32_t n, uint8_t b)
{
	uint32_t bh = 1u | (1u << 1) | (n << 3);

	dd_put_le32(out, 0xFD2FB528u);
	out[4] = 0x60;               /* FCS 2 bytes, single segment */
	dd_put_le16(out + 5, (uint16_t)(n - 256));
	out[7] = (uint8_t)bh;
	out[8] = (uint8_t)(bh >> 8);
	out[9] = (uint8_t)(bh >> 16);
	out[10] = b;
	return 11;
}

/* The image of the golden full stream: 7 blocks of 4 KiB, the last short:
 * random, 'A'*4096, zero, zero, copy of block 0, random, 1000-byte tail. */
#define G_SIZE (6 * BS + 1000)

static void golden_image(uint8_t *img)
{
	memset(img, 0, G_SIZE);
	fill_random(img, BS, 1);
	memset(img + BS, 'A', BS);
	memcpy(img + 4 * BS, img, BS);
	fill_random(img + 5 * BS, BS, 2);
	fill_random(img + 6 * BS, 1000, 3);
}

static void content_digest(const uint8_t *img, uint64_t size, uint32_t bs,
			   uint8_t out[32])
{
	dd_sha256_ctx *c;
	uint8_t h[32], t[12];

	assert_int_equal(dd_sha256_new(&c), 0);
	for (uint64_t off = 0; off < size; off += bs) {
		size_t n = size - off < bs ? (size_t)(size - off) : bs;
		bool zero = true;

		for (size_t i = 0; i < n && zero; i++)
			zero = img[off + i] == 0;
		if (zero)
			memset(h, 0, 32);
		else
			dd_sha256(img + off, n, h);
		dd_sha256_update(c, h, 32);
	}
	dd_put_le64(t, size);
	dd_put_le32(t + 8, bs);
	dd_sha256_update(c, t, 12);
	dd_sha256_final(c, out);
	dd_sha256_free(c);
}

/* The same, version 2 (format/store.md §6): each data block's hash and
 * length, each run of holes once with its bytes, then size, block size
 * and chunker 0 -- from the format's words, not from dd_digest. */
static void content_digest_v2(const uint8_t *img, uint64_t size, uint32_t bs,
			      uint8_t out[32])
{
	dd_sha256_ctx *c;
	uint8_t h[32], t[13], len[8];
	uint64_t run = 0;

	assert_int_equal(dd_sha256_new(&c), 0);
	for (uint64_t off = 0; off <= size; off += bs) {
		size_t n = off == size ? 0
			   : size - off < bs ? (size_t)(size - off) : bs;
		bool zero = n > 0;

		for (size_t i = 0; i < n && zero; i++)
			zero = img[off + i] == 0;
		if (zero) {
			run += n;
			continue;
		}
		memset(h, 0, 32);
		dd_put_le64(len, run);
		if (run) {   /* the run before this block, or the end */
			dd_sha256_update(c, h, 32);
			dd_sha256_update(c, len, 8);
		}
		run = 0;
		if (!n)
			break;
		dd_sha256(img + off, n, h);
		dd_put_le64(len, n);
		dd_sha256_update(c, h, 32);
		dd_sha256_update(c, len, 8);
	}
	dd_put_le64(t, size);
	dd_put_le32(t + 8, bs);
	t[12] = 0;
	dd_sha256_update(c, t, 13);
	dd_sha256_final(c, out);
	dd_sha256_free(c);
}

static void hdr_init(dd_stream_hdr *h, const char *name, uint64_t size)
{
	memset(h, 0, sizeof(*h));
	h->sh_version = DD_STREAM_VERSION;
	h->sh_block_size = BS;
	h->sh_hash_alg = DD_STREAM_HASH_SHA256;
	h->sh_codec = DD_CODEC_ZSTD;
	snprintf(h->sh_name, sizeof(h->sh_name), "%s", name);
	h->sh_size = size;
}

/* The golden full stream, encoded afresh, its content digest of
 * version dv (2: header flag bit 1). */
static void encode_golden_full_dv(th_mem *out, int dv)
{
	static uint8_t img[G_SIZE];
	uint8_t h[32], rle[11];
	dd_stream_hdr hdr;
	dd_senc *e;
	dd_err err = {0};

	golden_image(img);
	hdr_init(&hdr, "golden", G_SIZE);
	if (dv == DD_DIGEST_V2) {
		hdr.sh_flags = DD_SH_DIGEST2;
		content_digest_v2(img, G_SIZE, BS, hdr.sh_digest);
	} else {
		content_digest(img, G_SIZE, BS, hdr.sh_digest);
	}
	assert_int_equal(dd_senc_new(&e, &err, th_mem_write, out), 0);
	assert_int_equal(dd_senc_header(e, &err, &hdr), 0);
	dd_sha256(img, BS, h);
	assert_int_equal(dd_senc_data(e, &err, 0, h, DD_CODEC_NONE, BS, BS,
				      img), 0);
	dd_sha256(img + BS, BS, h);
	assert_int_equal(dd_senc_data(e, &err, 1, h, DD_CODEC_ZSTD, BS,
				      (uint32_t)zstd_rle_frame(rle, BS, 'A'),
				      rle), 0);
	assert_int_equal(dd_senc_zero(e, &err, 2, 1), 0);
	assert_int_equal(dd_senc_zero(e, &err, 3, 1), 0);  /* merged */
	dd_sha256(img, BS, h);
	assert_int_equal(dd_senc_ref(e, &err, 4, h, BS), 0);
	dd_sha256(img + 5 * BS, BS, h);
	assert_int_equal(dd_senc_data(e, &err, 5, h, DD_CODEC_NONE, BS, BS,
				      img + 5 * BS), 0);
	dd_sha256(img + 6 * BS, 1000, h);
	assert_int_equal(dd_senc_data(e, &err, 6, h, DD_CODEC_NONE, 1000,
				      1000, img + 6 * BS), 0);
	assert_int_equal(dd_senc_end(e, &err), 0);
	assert_int_equal(dd_senc_bytes(e), out->len);
	dd_senc_free(e);
}

static void encode_golden_full(th_mem *out)
{
	encode_golden_full_dv(out, DD_DIGEST_V1);
}

static void encode_golden_digest2(th_mem *out)
{
	encode_golden_full_dv(out, DD_DIGEST_V2);
}

/* The golden incremental stream: 3 blocks against base "monday": a REF to
 * a base block ('B'*4096), a new block ('C'*4096, zstd RLE), a zero. */
static void encode_golden_incr(th_mem *out)
{
	uint8_t blk[BS], h[32], rle[11];
	dd_stream_hdr hdr;
	dd_senc *e;
	dd_err err = {0};

	hdr_init(&hdr, "tuesday", 3 * BS);
	hdr.sh_flags = DD_SH_INCREMENTAL;
	strcpy(hdr.sh_base, "monday");
	for (int i = 0; i < 32; i++) {
		hdr.sh_digest[i] = (uint8_t)i;
		hdr.sh_base_digest[i] = (uint8_t)(0xa0 + i);
	}
	assert_int_equal(dd_senc_new(&e, &err, th_mem_write, out), 0);
	assert_int_equal(dd_senc_header(e, &err, &hdr), 0);
	memset(blk, 'B', BS);
	dd_sha256(blk, BS, h);
	assert_int_equal(dd_senc_ref(e, &err, 0, h, BS), 0);
	memset(blk, 'C', BS);
	dd_sha256(blk, BS, h);
	assert_int_equal(dd_senc_data(e, &err, 1, h, DD_CODEC_ZSTD, BS,
				      (uint32_t)zstd_rle_frame(rle, BS, 'C'),
				      rle), 0);
	assert_int_equal(dd_senc_zero(e, &err, 2, 1), 0);
	assert_int_equal(dd_senc_end(e, &err), 0);
	dd_senc_free(e);
}

/* The image of the golden stream of content-defined blocks (§12), cut
 * as a FastCDC sender of average 4 KiB (blocks of 1 to 16 KiB) would
 * hand it over: a 5000-byte random block, 3000 bytes of 'A', a hole of
 * 20000 bytes (two zero blocks, one hole), a copy of the first block,
 * and a 777-byte tail. */
#define GC_SIZE (5000 + 3000 + 20000 + 5000 + 777)

static void golden_cdc_image(uint8_t *img)
{
	memset(img, 0, GC_SIZE);
	fill_random(img, 5000, 4);
	memset(img + 5000, 'A', 3000);
	memcpy(img + 28000, img, 5000);
	fill_random(img + 33000, 777, 5);
}

/* The content-defined digest of format/store.md §6, written out: per
 * block its hash and le64 length, per run of holes 32 zero bytes and its
 * le64 length, then le64 size, le32 block size, the chunker byte. */
static void cdc_digest(const uint8_t *img, const uint32_t *len, size_t n,
		       uint32_t avg, uint8_t out[32])
{
	dd_sha256_ctx *c;
	uint64_t off = 0, hole = 0;
	uint8_t h[32], t[13];

	assert_int_equal(dd_sha256_new(&c), 0);
	for (size_t i = 0; i <= n; i++) {
		bool zero = i < n;

		for (uint32_t k = 0; i < n && k < len[i] && zero; k++)
			zero = img[off + k] == 0;
		if (zero) {
			hole += len[i];
			off += len[i];
			continue;
		}
		if (hole) {
			memset(h, 0, 32);
			dd_put_le64(t, hole);
			dd_sha256_update(c, h, 32);
			dd_sha256_update(c, t, 8);
			hole = 0;
		}
		if (i == n)
			break;
		dd_sha256(img + off, len[i], h);
		dd_put_le64(t, len[i]);
		dd_sha256_update(c, h, 32);
		dd_sha256_update(c, t, 8);
		off += len[i];
	}
	dd_put_le64(t, off);
	dd_put_le32(t + 8, avg);
	t[12] = DD_CHUNKER_FASTCDC;
	dd_sha256_update(c, t, 13);
	dd_sha256_final(c, out);
	dd_sha256_free(c);
}

/* The golden stream of content-defined blocks: DATA, DATA (zstd RLE),
 * ZERO of two zero blocks given one by one (one record), REF, DATA. */
static void encode_golden_cdc(th_mem *out)
{
	static uint8_t img[GC_SIZE];
	static const uint32_t len[] = {5000, 3000, 12000, 8000, 5000, 777};
	uint8_t h[32], rle[11];
	dd_stream_hdr hdr;
	dd_senc *e;
	dd_err err = {0};

	golden_cdc_image(img);
	hdr_init(&hdr, "golden-cdc", GC_SIZE);
	hdr.sh_chunker = DD_CHUNKER_FASTCDC;
	cdc_digest(img, len, 6, BS, hdr.sh_digest);
	assert_int_equal(dd_senc_new(&e, &err, th_mem_write, out), 0);
	assert_int_equal(dd_senc_header(e, &err, &hdr), 0);
	dd_sha256(img, 5000, h);
	assert_int_equal(dd_senc_data(e, &err, 0, h, DD_CODEC_NONE, 5000, 5000,
				      img), 0);
	dd_sha256(img + 5000, 3000, h);
	assert_int_equal(dd_senc_data(e, &err, 5000, h, DD_CODEC_ZSTD, 3000,
				      (uint32_t)zstd_rle_frame(rle, 3000, 'A'),
				      rle), 0);
	assert_int_equal(dd_senc_zero(e, &err, 8000, 12000), 0);
	assert_int_equal(dd_senc_zero(e, &err, 20000, 8000), 0); /* merged */
	dd_sha256(img, 5000, h);
	assert_int_equal(dd_senc_ref(e, &err, 28000, h, 5000), 0);
	dd_sha256(img + 33000, 777, h);
	assert_int_equal(dd_senc_data(e, &err, 33000, h, DD_CODEC_NONE, 777,
				      777, img + 33000), 0);
	assert_int_equal(dd_senc_end(e, &err), 0);
	assert_int_equal(dd_senc_bytes(e), out->len);
	dd_senc_free(e);
}

/* Decodes a whole stream; returns 0 or the first error.  Records are
 * counted per type in counts[1..5]. */
static int decode_all(const uint8_t *p, size_t len, size_t max_read,
		      dd_stream_hdr *hdr, uint64_t counts[6], dd_err *err)
{
	th_mem m = mem_of(p, len);
	dd_stream_hdr h;
	dd_sdec *d;
	dd_srec r;
	int rc;

	m.max_read = max_read;
	memset(counts, 0, 6 * sizeof(*counts));
	assert_int_equal(dd_sdec_new(&d, err, th_mem_read, &m), 0);
	rc = dd_sdec_header(d, err, hdr ? hdr : &h);
	while (rc == 0) {
		rc = dd_sdec_next(d, err, &r);
		if (rc < 0)
			break;
		assert_int_equal(rc, r.sr_type);
		counts[rc]++;
		if (rc == DD_SREC_END) {
			rc = dd_sdec_expect_eof(d, err);
			break;
		}
		rc = 0;
	}
	dd_sdec_free(d);
	free(m.p);
	return rc;
}

/* Recomputes both CRCs of the record starting at off. */
static void fix_record(uint8_t *p, size_t off)
{
	uint32_t len = dd_get_le32(p + off + 4);

	dd_put_le32(p + off + 8, dd_crc32c(0, p + off + 16, len));
	dd_put_le32(p + off + 12, dd_crc32c(0, p + off, 12));
}

/* Offset of record number n (0 = HEADER). */
static size_t record_off(const uint8_t *p, size_t n)
{
	size_t off = 0;

	while (n--)
		off += 16 + dd_get_le32(p + off + 4);
	return off;
}

static void read_file(const char *path, th_mem *m)
{
	struct stat st;
	int fd = open(path, O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	*m = (th_mem){0};
	m->len = m->cap = (size_t)st.st_size;
	m->p = malloc(m->len);
	assert_non_null(m->p);
	assert_int_equal(read(fd, m->p, m->len), (ssize_t)m->len);
	close(fd);
}

static void write_file(const char *path, const th_mem *m)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, m->p, m->len), (ssize_t)m->len);
	close(fd);
}

/* ---- round trips ----------------------------------------------------------*/

static void test_roundtrip_every_record(void **state)
{
	th_mem s = {0};
	dd_stream_hdr h;
	dd_srec r;
	dd_sdec *d;
	dd_err err = {0};
	uint8_t img[G_SIZE], want[32];

	(void)state;
	golden_image(img);
	encode_golden_full(&s);
	for (size_t max_read = 0; max_read < 40; max_read += 7) {
		s.pos = 0;
		s.max_read = max_read;   /* partial reads of every size */
		assert_int_equal(dd_sdec_new(&d, &err, th_mem_read, &s), 0);
		assert_int_equal(dd_sdec_header(d, &err, &h), 0);
		assert_string_equal(h.sh_name, "golden");
		assert_string_equal(h.sh_base, "");
		assert_int_equal(h.sh_size, G_SIZE);
		assert_int_equal(h.sh_block_size, BS);
		assert_int_equal(h.sh_flags, 0);
		content_digest(img, G_SIZE, BS, want);
		assert_memory_equal(h.sh_digest, want, 32);

		assert_int_equal(dd_sdec_next(d, &err, &r), DD_SREC_DATA);
		assert_int_equal(r.sr_idx, 0);
		assert_int_equal(r.sr_codec, DD_CODEC_NONE);
		assert_int_equal(r.sr_lsize, BS);
		assert_int_equal(r.sr_psize, BS);
		assert_memory_equal(r.sr_payload, img, BS);
		dd_sha256(img, BS, want);
		assert_memory_equal(r.sr_hash, want, 32);

		assert_int_equal(dd_sdec_next(d, &err, &r), DD_SREC_DATA);
		assert_int_equal(r.sr_idx, 1);
		assert_int_equal(r.sr_codec, DD_CODEC_ZSTD);
		assert_int_equal(r.sr_psize, 11);

		assert_int_equal(dd_sdec_next(d, &err, &r), DD_SREC_ZERO);
		assert_int_equal(r.sr_idx, 2);
		assert_int_equal(r.sr_count, 2);

		assert_int_equal(dd_sdec_next(d, &err, &r), DD_SREC_REF);
		assert_int_equal(r.sr_idx, 4);
		assert_int_equal(r.sr_lsize, BS);
		assert_memory_equal(r.sr_hash, want, 32);

		assert_int_equal(dd_sdec_next(d, &err, &r), DD_SREC_DATA);
		assert_int_equal(r.sr_idx, 5);
		assert_int_equal(dd_sdec_next(d, &err, &r), DD_SREC_DATA);
		assert_int_equal(r.sr_idx, 6);
		assert_int_equal(r.sr_lsize, 1000);
		assert_memory_equal(r.sr_payload, img + 6 * BS, 1000);

		assert_int_equal(dd_sdec_next(d, &err, &r), DD_SREC_END);
		assert_int_equal(r.sr_blocks, 7);
		assert_int_equal(r.sr_data, 4);
		assert_int_equal(r.sr_refs, 1);
		assert_int_equal(r.sr_zero_blocks, 2);
		assert_int_equal(dd_sdec_next(d, &err, &r), DD_SREC_END);
		assert_int_equal(dd_sdec_expect_eof(d, &err), 0);
		assert_int_equal(dd_sdec_bytes(d), s.len);
		dd_sdec_free(d);
	}
	free(s.p);
}

static void test_golden(void **state)
{
	struct {
		const char *file;
		void (*encode)(th_mem *);
	} g[] = {
		{DD_GOLDEN_DIR "/stream_v1_full.dds", encode_golden_full},
		{DD_GOLDEN_DIR "/stream_v1_incr.dds", encode_golden_incr},
		{DD_GOLDEN_DIR "/stream_v1_cdc.dds", encode_golden_cdc},
		{DD_GOLDEN_DIR "/stream_v1_digest2.dds", encode_golden_digest2},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(g) / sizeof(g[0]); i++) {
		th_mem fresh = {0}, gold;
		uint64_t counts[6];
		dd_err err = {0};

		g[i].encode(&fresh);
		if (getenv("DD_REGEN_GOLDEN"))
			write_file(g[i].file, &fresh);
		read_file(g[i].file, &gold);
		assert_int_equal(gold.len, fresh.len);
		assert_memory_equal(gold.p, fresh.p, gold.len);
		assert_int_equal(decode_all(gold.p, gold.len, 0, NULL, counts,
					    &err), 0);
		free(fresh.p);
		free(gold.p);
	}
}

static void test_golden_fields(void **state)
{
	th_mem gold;
	dd_stream_hdr h;
	uint64_t counts[6];
	dd_err err = {0};

	(void)state;
	read_file(DD_GOLDEN_DIR "/stream_v1_incr.dds", &gold);
	/* §2: frame of the HEADER; §4: magic at payload offset 0. */
	assert_int_equal(gold.p[0], DD_SREC_HEADER);
	assert_memory_equal(gold.p + 16, "DDSTREAM", 8);
	assert_int_equal(dd_get_le32(gold.p + 16 + 8), 1);
	assert_int_equal(decode_all(gold.p, gold.len, 0, &h, counts, &err), 0);
	assert_int_equal(h.sh_flags, DD_SH_INCREMENTAL);
	assert_string_equal(h.sh_name, "tuesday");
	assert_string_equal(h.sh_base, "monday");
	assert_int_equal(h.sh_base_digest[0], 0xa0);
	assert_int_equal(counts[DD_SREC_REF], 1);
	assert_int_equal(counts[DD_SREC_DATA], 1);
	assert_int_equal(counts[DD_SREC_ZERO], 1);
	assert_int_equal(counts[DD_SREC_END], 1);
	free(gold.p);
}

/* dd_recv_fd of stream s (from its start) into a temporary file. */
static int recv_fd_rc(th_mem *s)
{
	struct tmpfile out;
	dd_stream_info info;
	int rc;

	tmp_open(&out);
	s->pos = 0;
	rc = dd_recv_fd(out.fd, NULL, th_mem_read, s, &info);
	tmp_close(&out);
	return rc;
}

/* The golden stream with a content digest of version 2: flag bit 1 where
 * §4 puts it, the records as version 1's; a raw receiver rebuilds the
 * image and checks the digest in the header's version -- the same stream
 * without the flag (or the version-1 golden one with it) fails at the
 * end with DD_ECHECKSUM.  The flag lifts the 2^32-block cap (§3.1), and
 * content-defined blocks do not take it. */
static void test_golden_digest2(void **state)
{
	static uint8_t img[G_SIZE];
	th_mem gold, v1;
	dd_stream_hdr h;
	uint64_t counts[6];
	uint8_t want[32];
	dd_senc *e;
	dd_err err = {0};

	(void)state;
	golden_image(img);
	read_file(DD_GOLDEN_DIR "/stream_v1_digest2.dds", &gold);
	read_file(DD_GOLDEN_DIR "/stream_v1_full.dds", &v1);
	assert_int_equal(dd_get_le32(gold.p + 16 + 16), DD_SH_DIGEST2);
	assert_int_equal(decode_all(gold.p, gold.len, 0, &h, counts, &err), 0);
	assert_int_equal(h.sh_flags, DD_SH_DIGEST2);
	content_digest_v2(img, G_SIZE, BS, want);
	assert_memory_equal(h.sh_digest, want, 32);
	assert_int_equal(recv_fd_rc(&gold), 0);
	dd_put_le32(gold.p + 16 + 16, 0);
	fix_record(gold.p, 0);
	assert_int_equal(recv_fd_rc(&gold), DD_ECHECKSUM);
	dd_put_le32(v1.p + 16 + 16, DD_SH_DIGEST2);
	fix_record(v1.p, 0);
	assert_int_equal(recv_fd_rc(&v1), DD_ECHECKSUM);
	free(gold.p);
	free(v1.p);
	/* 2^62 bytes of 4 KiB blocks: version 2 only */
	gold = (th_mem){0};
	hdr_init(&h, "huge", (uint64_t)1 << 62);
	assert_int_equal(dd_senc_new(&e, &err, th_mem_write, &gold), 0);
	assert_int_not_equal(dd_senc_header(e, &err, &h), 0);
	dd_senc_free(e);
	h.sh_flags = DD_SH_DIGEST2;
	assert_int_equal(dd_senc_new(&e, &err, th_mem_write, &gold), 0);
	assert_int_equal(dd_senc_header(e, &err, &h), 0);
	dd_senc_free(e);
	h.sh_chunker = DD_CHUNKER_FASTCDC;
	h.sh_size = G_SIZE;
	assert_int_equal(dd_senc_new(&e, &err, th_mem_write, &gold), 0);
	assert_int_not_equal(dd_senc_header(e, &err, &h), 0);
	dd_senc_free(e);
	free(gold.p);
}

/* The same on the golden stream of content-defined blocks. */
static void header_patch_refused_cdc(size_t field, uint32_t value, int code,
				     const char *needle)
{
	th_mem s = {0};
	uint64_t counts[6];
	dd_err err = {0};

	encode_golden_cdc(&s);
	if (field == 26)
		s.p[16 + 26] = (uint8_t)value;
	else
		dd_put_le32(s.p + 16 + field, value);
	fix_record(s.p, 0);
	assert_int_equal(decode_all(s.p, s.len, 0, NULL, counts, &err), code);
	if (!strstr(err.de_msg, needle))
		fail_msg("'%s' lacks '%s'", err.de_msg, needle);
	free(s.p);
}

/* §12: the golden stream of content-defined blocks decodes to offsets
 * and byte counts; feature bit 0 and the chunker byte are where the
 * format puts them; a raw receiver rebuilds the image and checks the
 * content digest the test computed from the format's words. */
static void test_golden_cdc(void **state)
{
	static uint8_t img[GC_SIZE];
	th_mem gold;
	struct tmpfile out;
	dd_stream_info info;
	dd_stream_hdr h;
	uint64_t counts[6];
	uint8_t *back = malloc(GC_SIZE);
	dd_err err = {0};

	(void)state;
	read_file(DD_GOLDEN_DIR "/stream_v1_cdc.dds", &gold);
	assert_int_equal(dd_get_le32(gold.p + 16 + 12), DD_SF_VARBLOCK);
	assert_int_equal(gold.p[16 + 26], DD_CHUNKER_FASTCDC);
	assert_int_equal(decode_all(gold.p, gold.len, 0, &h, counts, &err), 0);
	assert_int_equal(h.sh_chunker, DD_CHUNKER_FASTCDC);
	assert_int_equal(h.sh_block_size, BS);
	assert_int_equal(counts[DD_SREC_DATA], 3);
	assert_int_equal(counts[DD_SREC_ZERO], 1);
	assert_int_equal(counts[DD_SREC_REF], 1);
	golden_cdc_image(img);
	tmp_open(&out);
	gold.pos = 0;
	assert_int_equal(dd_recv_fd(out.fd, NULL, th_mem_read, &gold, &info), 0);
	assert_int_equal(pread(out.fd, back, GC_SIZE, 0), GC_SIZE);
	assert_memory_equal(back, img, GC_SIZE);
	assert_int_equal(info.zero_records, 1);
	assert_int_equal(info.zero_blocks, 1);  /* one hole */
	assert_int_equal(info.ref_records, 1);
	tmp_close(&out);
	free(back);
	free(gold.p);
}

/* §12's rules, each broken once in the golden stream (re-sealed): a
 * record that leaves a gap or overlaps, a block longer than 4 x the
 * average, a hole past the image, another chunker, an average out of
 * range; and the encoder refuses the same. */
static void test_cdc_rules(void **state)
{
	th_mem s = {0};
	uint64_t counts[6];
	dd_err err = {0};
	size_t off;
	dd_stream_hdr hdr;
	dd_senc *e;
	uint8_t h[32] = {1};

	(void)state;
	encode_golden_cdc(&s);
	/* record 2 (DATA at 5000) moved to 5001: a gap */
	off = record_off(s.p, 2);
	dd_put_le64(s.p + off + 16, 5001);
	fix_record(s.p, off);
	assert_int_equal(decode_all(s.p, s.len, 0, NULL, counts, &err),
			 DD_EFORMAT);
	assert_non_null(strstr(err.de_msg, "out of order"));
	dd_put_le64(s.p + off + 16, 4999);   /* overlapping */
	fix_record(s.p, off);
	assert_int_equal(decode_all(s.p, s.len, 0, NULL, counts, &err),
			 DD_EFORMAT);
	dd_put_le64(s.p + off + 16, 5000);
	fix_record(s.p, off);
	/* lsize 16385 > 4 x 4096 (REF, record 4) */
	off = record_off(s.p, 4);
	dd_put_le32(s.p + off + 16 + 40, 16385);
	fix_record(s.p, off);
	assert_int_equal(decode_all(s.p, s.len, 0, NULL, counts, &err),
			 DD_EFORMAT);
	assert_non_null(strstr(err.de_msg, "lsize 16385"));
	dd_put_le32(s.p + off + 16 + 40, 5000);
	fix_record(s.p, off);
	/* the hole past the image */
	off = record_off(s.p, 3);
	dd_put_le64(s.p + off + 16 + 8, GC_SIZE);
	fix_record(s.p, off);
	assert_int_equal(decode_all(s.p, s.len, 0, NULL, counts, &err),
			 DD_EFORMAT);
	free(s.p);
	/* another chunker; an average too large; chunker without the bit */
	header_patch_refused_cdc(26, 2, DD_ENOTSUP, "chunker 2");
	header_patch_refused_cdc(20, 512 * 1024, DD_EFORMAT, "block size");
	header_patch_refused_cdc(12, 0, DD_EFORMAT, "reserved header bytes");
	header_patch_refused_cdc(16, DD_SH_DIGEST2, DD_EFORMAT,
				 "digest version 2");
	/* the encoder: a gap, a block too long */
	memset(&s, 0, sizeof(s));
	hdr_init(&hdr, "x", 100000);
	hdr.sh_chunker = DD_CHUNKER_FASTCDC;
	assert_int_equal(dd_senc_new(&e, &err, th_mem_write, &s), 0);
	assert_int_equal(dd_senc_header(e, &err, &hdr), 0);
	assert_int_equal(dd_senc_ref(e, &err, 10, h, 100), DD_EINVAL);
	dd_senc_free(e);
	assert_int_equal(dd_senc_new(&e, &err, th_mem_write, &s), 0);
	assert_int_equal(dd_senc_header(e, &err, &hdr), 0);
	assert_int_equal(dd_senc_ref(e, &err, 0, h, 4 * BS + 1), DD_EINVAL);
	dd_senc_free(e);
	free(s.p);
}

/* ---- hostile input --------------------------------------------------------*/

static void test_truncation_every_byte(void **state)
{
	th_mem s = {0};
	uint64_t counts[6];
	dd_err err = {0};
	char want[64];

	(void)state;
	encode_golden_full(&s);
	for (size_t cut = 0; cut < s.len; cut++) {
		int rc = decode_all(s.p, cut, 0, NULL, counts, &err);

		assert_int_equal(rc, DD_EFORMAT);
		snprintf(want, sizeof(want), "stream cut short at byte %zu ",
			 cut);
		if (!strstr(err.de_msg, want))
			fail_msg("cut %zu: '%s'", cut, err.de_msg);
	}
	free(s.p);
}

static void test_every_byte_flip(void **state)
{
	th_mem s = {0};
	uint64_t counts[6];
	dd_err err = {0};

	(void)state;
	encode_golden_full(&s);
	for (size_t i = 0; i < s.len; i++) {
		for (int bit = 0; bit < 8; bit += 7) {
			int rc;

			s.p[i] ^= (uint8_t)(1u << bit);
			rc = decode_all(s.p, s.len, 0, NULL, counts, &err);
			s.p[i] ^= (uint8_t)(1u << bit);
			if (rc == 0)
				fail_msg("flip at byte %zu accepted", i);
			/* A damaged length may make the stream look short;
			 * everything else is a CRC failure at its record. */
			if (rc != DD_ECHECKSUM && rc != DD_EFORMAT)
				fail_msg("flip at %zu: %d %s", i, rc,
					 err.de_msg);
			if (rc == DD_ECHECKSUM &&
			    !strstr(err.de_msg, "stream record "))
				fail_msg("flip at %zu: '%s'", i, err.de_msg);
		}
	}
	free(s.p);
}

/* Patches a HEADER field and fixes its CRCs; expects code. */
static void header_patch_refused(size_t field, uint32_t v, int code,
				 const char *needle)
{
	th_mem s = {0};
	uint64_t counts[6];
	dd_err err = {0};

	encode_golden_full(&s);
	dd_put_le32(s.p + 16 + field, v);
	fix_record(s.p, 0);
	assert_int_equal(decode_all(s.p, s.len, 0, NULL, counts, &err), code);
	if (!strstr(err.de_msg, needle))
		fail_msg("'%s' lacks '%s'", err.de_msg, needle);
	free(s.p);
}

static void test_version_feature_flags(void **state)
{
	(void)state;
	header_patch_refused(8, 2, DD_EVERSION, "version 2 is newer");
	header_patch_refused(8, 0, DD_EFORMAT, "version 0");
	header_patch_refused(12, 4, DD_ENOTSUP, "feature flags 0x4");
	header_patch_refused(16, 4, DD_EFORMAT, "header flags");
	header_patch_refused(16, DD_SH_INCREMENTAL, DD_EFORMAT,
			     "without a base");
	header_patch_refused(20, 8192 + 1, DD_EFORMAT, "block size");
	header_patch_refused(20, 2048, DD_EFORMAT, "block size");
	header_patch_refused(20, 2u << 20, DD_EFORMAT, "block size");
	header_patch_refused(24, 2, DD_ENOTSUP, "hash algorithm");
	header_patch_refused(0, 0x58534444, DD_EFORMAT, "bad magic");
}

static void test_unknown_type_and_frame(void **state)
{
	th_mem s = {0};
	uint64_t counts[6];
	dd_err err = {0};
	size_t off;

	(void)state;
	encode_golden_full(&s);
	off = record_off(s.p, 1);
	s.p[off] = 9;
	fix_record(s.p, off);
	assert_int_equal(decode_all(s.p, s.len, 0, NULL, counts, &err),
			 DD_EFORMAT);
	assert_non_null(strstr(err.de_msg, "unknown record type 9"));
	assert_non_null(strstr(err.de_msg, "record 1 "));
	s.p[off] = DD_SREC_DATA;
	s.p[off + 1] = 1;             /* frame flags */
	fix_record(s.p, off);
	assert_int_equal(decode_all(s.p, s.len, 0, NULL, counts, &err),
			 DD_ENOTSUP);
	s.p[off + 1] = 0;
	s.p[off] = DD_SREC_HEADER;    /* a second HEADER */
	fix_record(s.p, off);
	assert_int_equal(decode_all(s.p, s.len, 0, NULL, counts, &err),
			 DD_EFORMAT);
	assert_non_null(strstr(err.de_msg, "second HEADER"));
	/* First record not a HEADER. */
	s.p[0] = DD_SREC_ZERO;
	fix_record(s.p, 0);
	assert_int_equal(decode_all(s.p, s.len, 0, NULL, counts, &err),
			 DD_EFORMAT);
	free(s.p);
}

/* A stream of an oversize record must be refused from its frame alone,
 * before any payload is read: the claimed payload is not even there. */
static void test_oversize_records(void **state)
{
	uint8_t f[16];
	th_mem s = {0};
	uint64_t counts[6];
	dd_err err = {0};
	size_t off;

	(void)state;
	memset(f, 0, sizeof(f));
	f[0] = DD_SREC_HEADER;
	dd_put_le32(f + 4, 4097);
	dd_put_le32(f + 12, dd_crc32c(0, f, 12));
	assert_int_equal(decode_all(f, sizeof(f), 0, NULL, counts, &err),
			 DD_EFORMAT);
	assert_non_null(strstr(err.de_msg, "payload length 4097 out of range"));
	dd_put_le32(f + 4, 0xffffffffu);
	dd_put_le32(f + 12, dd_crc32c(0, f, 12));
	assert_int_equal(decode_all(f, sizeof(f), 0, NULL, counts, &err),
			 DD_EFORMAT);

	encode_golden_full(&s);
	off = record_off(s.p, 1);     /* DATA: 64 + psize <= 64 + BS */
	dd_put_le32(s.p + off + 4, 64 + BS + 1);
	dd_put_le32(s.p + off + 12, dd_crc32c(0, s.p + off, 12));
	assert_int_equal(decode_all(s.p, s.len, 0, NULL, counts, &err),
			 DD_EFORMAT);
	assert_non_null(strstr(err.de_msg, "out of range"));
	free(s.p);
}

static void test_bad_names(void **state)
{
	static const char *const bad[] = {"a/b", "..", ".", "x@y", "t\tab"};
	th_mem s = {0};
	uint64_t counts[6];
	dd_err err = {0};
	size_t name_off = 16 + 110;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		dd_stream_hdr h;
		dd_senc *e;

		/* The encoder refuses them... */
		hdr_init(&h, bad[i], 0);
		s.len = 0;
		assert_int_equal(dd_senc_new(&e, &err, th_mem_write, &s), 0);
		assert_int_equal(dd_senc_header(e, &err, &h), DD_EINVAL);
		dd_senc_free(e);
	}
	/* ...and the decoder too: patch "golden" (6 bytes) into "../../". */
	s.len = 0;
	encode_golden_full(&s);
	memcpy(s.p + name_off, "../../", 6);
	fix_record(s.p, 0);
	assert_int_equal(decode_all(s.p, s.len, 0, NULL, counts, &err),
			 DD_ENAME);
	memcpy(s.p + name_off, "gol\0en", 6);
	fix_record(s.p, 0);
	assert_int_equal(decode_all(s.p, s.len, 0, NULL, counts, &err),
			 DD_ENAME);
	memcpy(s.p + name_off, "..", 2);     /* length 6 name ".." + "lden" */
	dd_put_le16(s.p + name_off - 2, 2);  /* now the lengths do not fit */
	fix_record(s.p, 0);
	assert_int_equal(decode_all(s.p, s.len, 0, NULL, counts, &err),
			 DD_ENAME);
	free(s.p);
}

/* Record 4 is the REF of block 4: move it before DATA 1's index, or past
 * the image, and fix the CRCs: refused as out of order / past the image. */
static void test_order_and_bounds(void **state)
{
	static const struct {
		uint64_t idx;
		const char *needle;
	} cases[] = {
		{1, "out of order"}, {3, "out of order"}, {7, "past the image"},
		{UINT64_MAX, "past the image"},
	};
	th_mem s = {0};
	uint64_t counts[6];
	dd_err err = {0};
	size_t off;

	(void)state;
	encode_golden_full(&s);
	off = record_off(s.p, 4);
	assert_int_equal(s.p[off], DD_SREC_REF);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		dd_put_le64(s.p + off + 16, cases[i].idx);
		fix_record(s.p, off);
		assert_int_equal(decode_all(s.p, s.len, 0, NULL, counts, &err),
				 DD_EFORMAT);
		if (!strstr(err.de_msg, cases[i].needle))
			fail_msg("idx %llu: '%s'",
				 (unsigned long long)cases[i].idx, err.de_msg);
	}
	/* A wrong lsize on a full block. */
	dd_put_le64(s.p + off + 16, 4);
	dd_put_le32(s.p + off + 16 + 40, 1000);
	fix_record(s.p, off);
	assert_int_equal(decode_all(s.p, s.len, 0, NULL, counts, &err),
			 DD_EFORMAT);
	assert_non_null(strstr(err.de_msg, "lsize 1000, expected 4096"));
	/* A zero run whose count overflows. */
	dd_put_le32(s.p + off + 16 + 40, BS);
	fix_record(s.p, off);
	off = record_off(s.p, 3);
	assert_int_equal(s.p[off], DD_SREC_ZERO);
	dd_put_le64(s.p + off + 16 + 8, UINT64_MAX - 1);
	fix_record(s.p, off);
	assert_int_equal(decode_all(s.p, s.len, 0, NULL, counts, &err),
			 DD_EFORMAT);
	free(s.p);
}

static void test_end_totals_and_digest(void **state)
{
	th_mem s = {0};
	uint64_t counts[6];
	dd_err err = {0};
	size_t off;

	(void)state;
	encode_golden_full(&s);
	off = record_off(s.p, 7);
	assert_int_equal(s.p[off], DD_SREC_END);
	for (size_t field = 0; field < 72; field += 8) {
		s.p[off + 16 + field] ^= 1;
		fix_record(s.p, off);
		assert_int_equal(decode_all(s.p, s.len, 0, NULL, counts, &err),
				 DD_ECHECKSUM);
		s.p[off + 16 + field] ^= 1;
	}
	fix_record(s.p, off);
	assert_int_equal(decode_all(s.p, s.len, 0, NULL, counts, &err), 0);
	/* Bytes after END. */
	s.p = realloc(s.p, s.len + 1);
	s.p[s.len] = 0;
	assert_int_equal(decode_all(s.p, s.len + 1, 0, NULL, counts, &err),
			 DD_EFORMAT);
	assert_non_null(strstr(err.de_msg, "after the END"));
	free(s.p);
}

static void test_encoder_misuse(void **state)
{
	th_mem s = {0};
	dd_stream_hdr h;
	uint8_t hash[32] = {1}, pay[BS] = {1};
	dd_senc *e;
	dd_err err = {0};

	(void)state;
	hdr_init(&h, "x", 3 * BS);
	assert_int_equal(dd_senc_new(&e, &err, th_mem_write, &s), 0);
	assert_int_equal(dd_senc_ref(e, &err, 0, hash, BS), DD_ESTATE);
	assert_int_equal(dd_senc_header(e, &err, &h), 0);
	assert_int_equal(dd_senc_data(e, &err, 1, hash, DD_CODEC_NONE, BS, BS,
				      pay), 0);
	assert_int_equal(dd_senc_ref(e, &err, 1, hash, BS), DD_EINVAL);
	dd_senc_free(e);

	assert_int_equal(dd_senc_new(&e, &err, th_mem_write, &s), 0);
	assert_int_equal(dd_senc_header(e, &err, &h), 0);
	assert_int_equal(dd_senc_zero(e, &err, 0, 4), DD_EINVAL);
	dd_senc_free(e);
	assert_int_equal(dd_senc_new(&e, &err, th_mem_write, &s), 0);
	assert_int_equal(dd_senc_header(e, &err, &h), 0);
	assert_int_equal(dd_senc_data(e, &err, 0, hash, 7, BS, BS, pay),
			 DD_EINVAL);
	dd_senc_free(e);
	assert_int_equal(dd_senc_new(&e, &err, th_mem_write, &s), 0);
	assert_int_equal(dd_senc_header(e, &err, &h), 0);
	assert_int_equal(dd_senc_zero(e, &err, 0, 2), 0);
	assert_int_equal(dd_senc_end(e, &err), DD_EINVAL);  /* incomplete */
	dd_senc_free(e);
	free(s.p);
}

/* ---- store-less send / receive / check --------------------------------------*/

/* 128 KiB blocks: 0 1 0 zero zero 2 1 zero, then a 5000-byte tail. */
#define RT_BS (128u << 10)
#define RT_SIZE (8 * RT_BS + 5000)

static uint8_t *rt_image(void)
{
	uint8_t *img = calloc(1, RT_SIZE);
	static const int map[8] = {0, 1, 0, -1, -1, 2, 1, -1};

	assert_non_null(img);
	for (int i = 0; i < 8; i++)
		if (map[i] >= 0)
			for (size_t k = 0; k < RT_BS; k += 64)
				/* compressible, distinct per block */
				memset(img + i * RT_BS + k, 'a' + map[i] +
				       (int)(k / 4096 % 7), 48);
	fill_random(img + 8 * RT_BS, 5000, 9);
	return img;
}

static void send_image(const uint8_t *img, size_t size, th_mem *out)
{
	struct tmpfile in;

	tmp_open(&in);
	assert_int_equal(write(in.fd, img, size), (ssize_t)size);
	assert_int_equal(dd_send_fd(in.fd, "img", RT_BS, 0, NULL, th_mem_write,
				    out), 0);
	tmp_close(&in);
}

/* The last progress dd_send_fd reported. */
static int send_progress(void *ctx, uint64_t done, uint64_t total)
{
	uint64_t *last = ctx;

	assert_true(done <= total);
	assert_true(done >= last[0]);
	last[0] = done;
	last[1] = total;
	return 0;
}

/* img[0..size) written sparsely: only its 4 KiB pieces that are not all
 * zeros, the rest left as holes (ftruncate), into a temporary file. */
static void sparse_file(struct tmpfile *t, const uint8_t *img, size_t size)
{
	static const uint8_t zero[4096];

	tmp_open(t);
	assert_int_equal(ftruncate(t->fd, (off_t)size), 0);
	for (size_t k = 0; k < size; k += 4096) {
		size_t n = size - k < 4096 ? size - k : 4096;

		if (memcmp(img + k, zero, n) != 0)
			assert_int_equal(pwrite(t->fd, img + k, n, (off_t)k),
					 (ssize_t)n);
	}
}

/* ddsend -f of a sparse file (format/stream.md §10.2): the holes found by
 * SEEK_DATA are not read, and the stream is the one the same bytes give
 * written whole, byte for byte -- holes of whole blocks, inside a block
 * (a block partly data), and at the end --; the progress ends at the
 * size; the round trip is exact. */
static void test_send_fd_sparse(void **state)
{
	enum { TAIL = 3 * RT_BS + 100 };   /* zeros after the image */
	uint8_t *img = calloc(1, RT_SIZE + TAIL), *base = rt_image(), *back;
	dd_send_opts so = DD_SEND_OPTS_INIT;
	uint64_t last[2] = {0, 0};
	struct tmpfile in, out;
	dd_stream_info info;

	(void)state;
	assert_non_null(img);
	memcpy(img, base, RT_SIZE);
	img[3 * RT_BS + 5000] = 7;    /* a block of holes but one piece */
	for (size_t size = RT_SIZE; size <= RT_SIZE + TAIL; size += TAIL) {
		th_mem dense = {0}, sparse = {0};

		send_image(img, size, &dense);
		sparse_file(&in, img, size);
		so.progress = send_progress;
		so.progress_ctx = last;
		last[0] = 0;
		assert_int_equal(dd_send_fd(in.fd, "img", RT_BS, 0, &so,
					    th_mem_write, &sparse), 0);
		tmp_close(&in);
		assert_int_equal(last[0], size);
		assert_int_equal(last[1], size);
		assert_int_equal(sparse.len, dense.len);
		assert_memory_equal(sparse.p, dense.p, dense.len);
		tmp_open(&out);
		assert_int_equal(dd_recv_fd(out.fd, NULL, th_mem_read, &sparse,
					    &info), 0);
		back = malloc(size);
		assert_non_null(back);
		assert_int_equal(pread(out.fd, back, size, 0), (ssize_t)size);
		assert_memory_equal(back, img, size);
		free(back);
		tmp_close(&out);
		free(dense.p);
		free(sparse.p);
	}
	free(base);
	free(img);
}

static void test_send_recv_fd_roundtrip(void **state)
{
	uint8_t *img = rt_image(), *back, want[32];
	th_mem s = {0};
	struct tmpfile out;
	dd_stream_info info;
	struct stat st;

	(void)state;
	send_image(img, RT_SIZE, &s);
	tmp_open(&out);
	assert_int_equal(write(out.fd, "junk", 4), 4); /* truncated first */
	assert_int_equal(dd_recv_fd(out.fd, NULL, th_mem_read, &s, &info), 0);
	assert_int_equal(fstat(out.fd, &st), 0);
	assert_int_equal(st.st_size, RT_SIZE);
	back = malloc(RT_SIZE);
	assert_int_equal(pread(out.fd, back, RT_SIZE, 0), RT_SIZE);
	assert_memory_equal(back, img, RT_SIZE);
	assert_string_equal(info.name, "img");
	assert_int_equal(info.size, RT_SIZE);
	assert_int_equal(info.block_size, RT_BS);
	assert_int_equal(info.data_records, 4);   /* blocks 0 1 2 tail */
	assert_int_equal(info.ref_records, 2);
	assert_int_equal(info.zero_records, 2);   /* 3-4 and 7 */
	assert_int_equal(info.zero_blocks, 3);
	assert_int_equal(info.stream_bytes, s.len);
	assert_true(info.data_bytes < 3 * RT_BS); /* compressed */
	/* dd_send_fd's digest is of version 2 (holes counted by runs) */
	content_digest_v2(img, RT_SIZE, RT_BS, want);
	assert_memory_equal(info.digest, want, 32);
	/* The zero blocks are holes. */
	assert_true((uint64_t)st.st_blocks * 512 < RT_SIZE);
	tmp_close(&out);

	memset(&info, 0, sizeof(info));
	s.pos = 0;
	assert_int_equal(dd_stream_check(NULL, th_mem_read, &s, &info), 0);
	assert_int_equal(info.data_records, 4);
	assert_int_equal(info.ref_records, 2);
	assert_int_equal(info.zero_blocks, 3);
	free(s.p);

	/* asked for version 1 (for an older receiver): flag clear, the
	 * digest of version 1, the same image back */
	{
		dd_send_opts so = DD_SEND_OPTS_INIT;
		struct tmpfile in;

		so.digest_version = DD_DIGEST_V1;
		s = (th_mem){0};
		tmp_open(&in);
		assert_int_equal(write(in.fd, img, RT_SIZE), (ssize_t)RT_SIZE);
		assert_int_equal(dd_send_fd(in.fd, "img", RT_BS, 0, &so,
					    th_mem_write, &s), 0);
		so.digest_version = 3;
		assert_int_equal(dd_send_fd(in.fd, "img", RT_BS, 0, &so,
					    th_mem_write, &s), DD_EINVAL);
		tmp_close(&in);
		assert_int_equal(dd_get_le32(s.p + 16 + 16), 0);
		tmp_open(&out);
		assert_int_equal(dd_recv_fd(out.fd, NULL, th_mem_read, &s, &info),
				 0);
		content_digest(img, RT_SIZE, RT_BS, want);
		assert_memory_equal(info.digest, want, 32);
		assert_int_equal(pread(out.fd, back, RT_SIZE, 0), RT_SIZE);
		assert_memory_equal(back, img, RT_SIZE);
		tmp_close(&out);
	}
	free(back);
	free(img);
	free(s.p);
}

/* ddsend --chunker fastcdc -f: the file cut by content, blocks of any
 * length as offsets, a run of zeros one hole, rebuilt byte for byte by
 * dd_recv_fd; the header's content digest is the one the format defines
 * over the cutter's own cut points. */
static void test_send_recv_fd_cdc(void **state)
{
	const size_t n = 3 * 1024 * 1024 + 12345;
	uint8_t *img = malloc(n), *back = malloc(n), want[32];
	uint32_t *len = malloc(n / 1024 * sizeof(*len));
	dd_send_opts so = DD_SEND_OPTS_INIT;
	th_mem s = {0};
	struct tmpfile in, out;
	dd_stream_info info;
	dd_cutter c;
	size_t k = 0;

	(void)state;
	fill_random(img, n, 7);
	memset(img + 1000000, 0, 400000);           /* zero blocks */
	memcpy(img + 2000000, img + 100000, 300000); /* a repeat */
	dd_cutter_fastcdc(&c, 16384);
	for (size_t off = 0; off < n; off += len[k++])
		len[k] = (uint32_t)c.cu_next(&c, img + off, n - off, true);
	cdc_digest(img, len, k, 16384, want);
	tmp_open(&in);
	assert_int_equal(write(in.fd, img, n), (ssize_t)n);
	so.chunker = DD_CHUNKER_FASTCDC;
	assert_int_equal(dd_send_fd(in.fd, "cdc", 16384, 0, &so, th_mem_write,
				    &s), 0);
	tmp_open(&out);
	assert_int_equal(dd_recv_fd(out.fd, NULL, th_mem_read, &s, &info), 0);
	assert_int_equal(pread(out.fd, back, n, 0), (ssize_t)n);
	assert_memory_equal(back, img, n);
	assert_memory_equal(info.digest, want, 32);
	assert_int_equal(info.block_size, 16384);
	assert_int_equal(info.zero_records, 1);
	assert_true(info.ref_records >= 3);
	/* an average the chunker has not: refused */
	assert_int_equal(dd_send_fd(in.fd, "cdc", 512 * 1024, 0, &so,
				    th_mem_write, &s), DD_EINVAL);
	tmp_close(&in);
	tmp_close(&out);
	free(len);
	free(back);
	free(img);
	free(s.p);
}

static void test_send_fd_edge_sizes(void **state)
{
	static const size_t sizes[] = {0, 1, RT_BS, RT_BS + 1, 3 * RT_BS};

	(void)state;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint8_t *img = calloc(1, sizes[i] + 1), *back;
		th_mem s = {0};
		struct tmpfile out;
		dd_stream_info info;

		fill_random(img, sizes[i] / 2, i);
		send_image(img, sizes[i], &s);
		tmp_open(&out);
		assert_int_equal(dd_recv_fd(out.fd, NULL, th_mem_read, &s,
					    &info), 0);
		back = calloc(1, sizes[i] + 1);
		assert_int_equal(pread(out.fd, back, sizes[i] + 1, 0),
				 (ssize_t)sizes[i]);
		assert_memory_equal(back, img, sizes[i]);
		tmp_close(&out);
		free(back);
		free(img);
		free(s.p);
	}
}

static void test_recv_fd_refuses_damage(void **state)
{
	uint8_t *img = rt_image();
	th_mem s = {0};
	struct tmpfile out;
	size_t off;

	(void)state;
	send_image(img, RT_SIZE, &s);
	/* A REF whose hash was never sent: record 3 is the REF of block 2. */
	off = record_off(s.p, 3);
	assert_int_equal(s.p[off], DD_SREC_REF);
	s.p[off + 16 + 8] ^= 0xff;
	fix_record(s.p, off);
	tmp_open(&out);
	/* The stream digest no longer matches, but the REF fails first. */
	assert_int_equal(dd_recv_fd(out.fd, NULL, th_mem_read, &s, NULL),
			 DD_EFORMAT);
	assert_non_null(strstr(dd_last_errmsg(), "never sent"));
	s.pos = 0;
	assert_int_equal(dd_stream_check(NULL, th_mem_read, &s, NULL),
			 DD_EFORMAT);
	s.p[off + 16 + 8] ^= 0xff;
	fix_record(s.p, off);
	/* A DATA block whose bytes do not match its hash (record 5: block
	 * 5, which no REF names, so the hash check is what fails). */
	off = record_off(s.p, 5);
	assert_int_equal(s.p[off], DD_SREC_DATA);
	s.p[off + 16 + 8] ^= 1;
	fix_record(s.p, off);
	/* ...with a consistent END, so that only the block check can fail. */
	off = record_off(s.p, 9);
	assert_int_equal(s.p[off], DD_SREC_END);
	dd_sha256(s.p, off, s.p + off + 16 + 40);
	fix_record(s.p, off);
	s.pos = 0;
	assert_int_equal(dd_recv_fd(out.fd, NULL, th_mem_read, &s, NULL),
			 DD_ECHECKSUM);
	assert_non_null(strstr(dd_last_errmsg(), "sha256 mismatch"));
	s.pos = 0;
	assert_int_equal(dd_stream_check(NULL, th_mem_read, &s, NULL),
			 DD_ECHECKSUM);
	tmp_close(&out);
	free(img);
	free(s.p);
}

static void test_check_incremental_base_refs(void **state)
{
	th_mem gold;
	dd_stream_info info;
	struct tmpfile out;
	uint64_t base_refs = 0;

	(void)state;
	read_file(DD_GOLDEN_DIR "/stream_v1_incr.dds", &gold);
	/* The golden incremental's content digest is synthetic: the check
	 * computes the real one and refuses it. */
	assert_int_equal(dd_stream_check_ex(NULL, th_mem_read, &gold, &info,
					    &base_refs), DD_ECHECKSUM);
	assert_int_equal(base_refs, 0);
	/* Fix the header digest: hashes of 'B'*4096, 'C'*4096, zeros. */
	{
		uint8_t blk[BS], h[32], t[12];
		dd_sha256_ctx *c;

		assert_int_equal(dd_sha256_new(&c), 0);
		memset(blk, 'B', BS);
		dd_sha256(blk, BS, h);
		dd_sha256_update(c, h, 32);
		memset(blk, 'C', BS);
		dd_sha256(blk, BS, h);
		dd_sha256_update(c, h, 32);
		memset(h, 0, 32);
		dd_sha256_update(c, h, 32);
		dd_put_le64(t, 3 * BS);
		dd_put_le32(t + 8, BS);
		dd_sha256_update(c, t, 12);
		dd_sha256_final(c, gold.p + 16 + 44);
		dd_sha256_free(c);
	}
	fix_record(gold.p, 0);
	/* The END digest covers the HEADER: recompute it too. */
	{
		size_t off = record_off(gold.p, 4);

		dd_sha256(gold.p, off, gold.p + off + 16 + 40);
		fix_record(gold.p, off);
	}
	gold.pos = 0;
	assert_int_equal(dd_stream_check_ex(NULL, th_mem_read, &gold, &info,
					    &base_refs), 0);
	assert_int_equal(base_refs, 1);
	assert_string_equal(info.base, "monday");
	assert_int_equal(info.ref_records, 1);
	assert_int_equal(info.data_records, 1);
	/* A raw file cannot take an incremental stream. */
	gold.pos = 0;
	tmp_open(&out);
	assert_int_equal(dd_recv_fd(out.fd, NULL, th_mem_read, &gold, NULL),
			 DD_ENOTSUP);
	tmp_close(&out);
	free(gold.p);
}

/* The header alone, from the first bytes of a stream: what dd_stream_check
 * says of it, without the counts; a cut or foreign header refused. */
static void test_stream_header(void **state)
{
	th_mem gold;
	dd_stream_info all, hdr;
	size_t len;

	(void)state;
	read_file(DD_GOLDEN_DIR "/stream_v1_full.dds", &gold);
	assert_int_equal(dd_stream_check(NULL, th_mem_read, &gold, &all), 0);
	len = gold.len < DD_STREAM_HEADER_MAX ? gold.len : DD_STREAM_HEADER_MAX;
	memset(&hdr, 0xa5, sizeof(hdr));
	assert_int_equal(dd_stream_header(gold.p, len, &hdr), 0);
	assert_int_equal(hdr.format_version, all.format_version);
	assert_int_equal(hdr.block_size, all.block_size);
	assert_string_equal(hdr.name, all.name);
	assert_string_equal(hdr.base, all.base);
	assert_int_equal(hdr.size, all.size);
	assert_memory_equal(hdr.digest, all.digest, 32);
	assert_int_equal(hdr.resume_from, all.resume_from);
	assert_int_equal(hdr.data_records, 0);
	assert_int_equal(hdr.stream_bytes, 0);
	assert_string_equal(hdr.resume_token, "");
	/* the header record alone is enough */
	len = record_off(gold.p, 1);
	assert_int_equal(dd_stream_header(gold.p, len, &hdr), 0);
	assert_int_equal(hdr.block_size, all.block_size);
	assert_int_equal(dd_stream_header(gold.p, len - 1, &hdr), DD_EFORMAT);
	assert_non_null(strstr(dd_last_errmsg(), "cut short"));
	/* junk fails the frame CRC (format/stream.md §2, step 2) */
	assert_int_equal(dd_stream_header("not a stream, not at all", 24, &hdr),
			 DD_ECHECKSUM);
	assert_int_equal(dd_stream_header("DD", 2, &hdr), DD_EFORMAT);
	gold.p[20] ^= 1;  /* the block size, under the frame's CRC */
	assert_int_equal(dd_stream_header(gold.p, len, &hdr), DD_ECHECKSUM);
	assert_int_equal(dd_stream_header(NULL, 10, &hdr), DD_EINVAL);
	assert_int_equal(dd_stream_header(gold.p, len, NULL), DD_EINVAL);
	free(gold.p);
}

static void test_send_fd_refuses_pipe(void **state)
{
	th_mem s = {0};
	int p[2];

	(void)state;
	assert_int_equal(pipe(p), 0);
	assert_int_equal(dd_send_fd(p[0], "x", 0, 0, NULL, th_mem_write, &s),
			 DD_ENOTSUP);
	assert_non_null(strstr(dd_last_errmsg(), "pipe"));
	assert_int_equal(dd_send_fd(p[0], "a/b", 0, 0, NULL, th_mem_write, &s),
			 DD_ENAME);
	assert_int_equal(s.len, 0);
	close(p[0]);
	close(p[1]);
}

/* The sender checks each DATA block's DDT entry against the snapshot
 * before it reads the pack: an entry whose size was damaged stops the
 * stream with DD_ECORRUPT -- no block of the wrong size is ever sent. */
static void test_send_refuses_damaged_ddt_entry(void **state)
{
	const size_t n = 8 * BS;
	dd_create_opts co = DD_CREATE_OPTS_INIT;
	char *path = th_tmp_store();
	uint8_t *img = malloc(n);
	th_mem out = {0};
	dd_ddt_key key = {.dk_variant = 0};
	dd_ddt_ent ent;
	dd_store *s;
	dd_txn *txn;
	dd_err err;

	(void)state;
	for (size_t i = 0; i < n; i++)
		img[i] = (uint8_t)(i * 2654435761u >> 13);
	co.block_size = BS;
	assert_int_equal(dd_store_create(&s, path, &co, NULL), 0);
	assert_int_equal(th_put(s, "a", img, n, n), 0);
	assert_int_equal(dd_send(s, "a", NULL, th_mem_write, &out), 0);

	/* block 3's entry now claims half a block */
	dd_sha256_sw(img + 3 * BS, BS, key.dk_hash);
	assert_int_equal(dd_txn_begin(s->st_db, &err, true, &txn), 0);
	assert_int_equal(dd_ddt_get(txn, &err, &key, &ent), 0);
	ent.de_lsize = BS / 2;
	assert_int_equal(dd_ddt_put(txn, &err, &key, &ent), 0);
	assert_int_equal(dd_txn_commit(txn, &err), 0);
	free(out.p);
	memset(&out, 0, sizeof(out));
	assert_int_equal(dd_send(s, "a", NULL, th_mem_write, &out), DD_ECORRUPT);
	assert_non_null(strstr(dd_store_errmsg(s), "ddt size"));
	dd_store_close(s);
	free(out.p);
	free(img);
	th_rm_store(path);
}

/* ---- receive progress ends at the image's size -------------------------------*/

struct recv_meter {
	uint64_t calls, done, total;
};

static int recv_meter_cb(void *ctx, uint64_t done, uint64_t total)
{
	struct recv_meter *m = ctx;

	assert_true(done >= m->done);
	assert_true(done <= total);
	m->calls++;
	m->done = done;
	m->total = total;
	return 0;
}

/* A small image (fewer than 256 blocks: it used to end at 0%) and a
 * larger one whose last blocks are a ZERO run (it used to stop short). */
static void test_recv_progress_ends_at_size(void **state)
{
	static const size_t sizes[] = {37 * BS + 100, 700 * BS};
	char *pa = th_tmp_store(), *pb = th_tmp_store();
	dd_store *a = th_create(pa, BS, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256);
	dd_store *b = th_create(pb, BS, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256);

	(void)state;
	for (size_t i = 0; i < 2; i++) {
		uint8_t *img = calloc(1, sizes[i]);
		dd_recv_opts ro = DD_RECV_OPTS_INIT;
		struct recv_meter m = {0};
		th_mem s = {0};
		char name[8];

		snprintf(name, sizeof(name), "i%zu", i);
		fill_random(img, sizes[i] / 2, 100 + i);  /* zeros after */
		assert_int_equal(th_put(a, name, img, sizes[i], sizes[i]), 0);
		assert_int_equal(dd_send(a, name, NULL, th_mem_write, &s), 0);
		ro.progress = recv_meter_cb;
		ro.progress_ctx = &m;
		assert_int_equal(dd_recv(b, &ro, th_mem_read, &s, NULL), 0);
		assert_int_equal(m.total, sizes[i]);
		assert_int_equal(m.done, sizes[i]);
		assert_true(m.calls >= 2);
		free(s.p);
		free(img);
	}
	dd_store_close(a);
	dd_store_close(b);
	th_rm_store(pa);
	th_rm_store(pb);
}

/* A store's receive takes DATA blocks in lists hashed together
 * (receive.c): a block that fails its hash in the middle of a list still
 * ends the receive at that block -- those before it kept (resumable),
 * none after it stored -- and the stream that resumes the kept receive
 * carries exactly from it.  With every list stored whole, or none, the
 * resume would start at a list's edge instead. */
static void test_recv_bad_block_mid_list(void **state)
{
	const size_t nblk = 40, bad = 21;
	char *pa = th_tmp_store(), *pb = th_tmp_store();
	dd_store *a = th_create(pa, BS, 0, DD_COMPRESS_NONE, DD_HASH_SHA256);
	dd_store *b = th_create(pb, BS, 0, DD_COMPRESS_NONE, DD_HASH_SHA256);
	uint8_t *img = malloc(nblk * BS);
	dd_recv_opts ro = DD_RECV_OPTS_INIT;
	dd_send_opts so = DD_SEND_OPTS_INIT;
	dd_stream_info info;
	th_mem s = {0}, rest = {0};
	char tok[128], want[32];
	size_t off;

	(void)state;
	fill_random(img, nblk * BS, 4242);
	assert_int_equal(th_put(a, "img", img, nblk * BS, nblk * BS), 0);
	assert_int_equal(dd_send(a, "img", NULL, th_mem_write, &s), 0);
	/* record 0 is the header; random blocks are one DATA record each */
	off = record_off(s.p, 1 + bad);
	assert_int_equal(s.p[off], DD_SREC_DATA);
	s.p[off + 16 + 8] ^= 1;   /* its hash: the bytes no longer match */
	fix_record(s.p, off);
	ro.resumable = 1;
	assert_int_equal(dd_recv(b, &ro, th_mem_read, &s, NULL), DD_ECHECKSUM);
	snprintf(want, sizeof(want), "block %zu:", bad);
	assert_non_null(strstr(dd_store_errmsg(b), want));
	assert_int_equal(dd_recv_resume_token(b, tok, sizeof(tok)), 0);
	so.resume_token = tok;
	assert_int_equal(dd_send(a, "img", &so, th_mem_write, &rest), 0);
	assert_int_equal(dd_recv(b, &ro, th_mem_read, &rest, &info), 0);
	assert_int_equal(info.resume_from, bad);
	assert_int_equal(info.data_records, nblk - bad);
	th_check_image(b, "img", img, nblk * BS);
	dd_store_close(a);
	dd_store_close(b);
	th_rm_store(pa);
	th_rm_store(pb);
	free(img);
	free(s.p);
	free(rest.p);
}

/* Into a store in verify mode, blocks held in a list are compared byte
 * for byte with the store's (held ones against one another too, and
 * against blocks stored earlier in the interval): a stream of repeats
 * of blocks the store holds adds no DDT entry -- a comparison against
 * the wrong bytes would store each as a new variant -- and reads back
 * as sent. */
static void test_recv_verify_store(void **state)
{
	const size_t nblk = 48, distinct = 12;
	char *pa = th_tmp_store(), *pb = th_tmp_store();
	dd_store *a = th_create(pa, BS, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256);
	dd_store *b = th_create(pb, BS, 1, DD_COMPRESS_ZSTD, DD_HASH_SHA256);
	uint8_t *img = malloc(nblk * BS), *half = malloc(nblk * BS / 2);
	th_mem s = {0};
	dd_stat before = {.version = DD_STAT_VERSION},
		after = {.version = DD_STAT_VERSION};

	(void)state;
	fill_random(img, distinct * BS, 99);
	for (size_t i = distinct; i < nblk; i++)   /* repeats, shuffled */
		memcpy(img + i * BS, img + ((i * 7) % distinct) * BS, BS);
	/* the receiving store holds half the distinct blocks already */
	memcpy(half, img, distinct / 2 * BS);
	assert_int_equal(th_put(b, "half", half, distinct / 2 * BS,
				distinct / 2 * BS), 0);
	assert_int_equal(th_put(a, "img", img, nblk * BS, nblk * BS), 0);
	assert_int_equal(dd_send(a, "img", NULL, th_mem_write, &s), 0);
	assert_int_equal(dd_store_stat(b, &before), 0);
	if (dd_recv(b, NULL, th_mem_read, &s, NULL) != 0)
		fail_msg("recv: %s", dd_store_errmsg(b));
	assert_int_equal(dd_store_stat(b, &after), 0);
	assert_int_equal(after.ddt_entries, distinct);
	assert_int_equal(before.ddt_entries, distinct / 2);
	th_check_image(b, "img", img, nblk * BS);
	dd_store_close(a);
	dd_store_close(b);
	th_rm_store(pa);
	th_rm_store(pb);
	free(img);
	free(half);
	free(s.p);
}

/* ---- a receiver that refuses: the sender fails, never dies or hangs ----------*/

struct refusing_recv {
	dd_store *store;
	int fd;
	int rc;
};

/* Cancels at the first progress report past the start: mid-stream. */
static int cancel_past_start(void *ctx, uint64_t done, uint64_t total)
{
	(void)ctx;
	(void)total;
	return done > 0;
}

static void *refusing_recv_thread(void *arg)
{
	struct refusing_recv *r = arg;
	dd_recv_opts ro = DD_RECV_OPTS_INIT;

	ro.progress = cancel_past_start;
	r->rc = dd_recv(r->store, &ro, dd_fd_read, &r->fd, NULL);
	/* what include/dedup.h asks of a receiver that fails */
	close(r->fd);
	return NULL;
}

/* SIGPIPE keeps its default action here (death): were it raised, the test
 * would die with it.  alarm() ends a hang. */
static void test_refused_over_socketpair(void **state)
{
	const size_t n = 4u << 20; /* random: far more than a socket buffer */
	char *pa = th_tmp_store(), *pb = th_tmp_store();
	uint8_t *img = malloc(n);
	struct refusing_recv r = {0};
	dd_store *a, *b;
	pthread_t tid;
	sigset_t pending;
	int sv[2], p[2], rc;

	(void)state;
	signal(SIGPIPE, SIG_DFL);
	alarm(120);
	assert_non_null(img);
	fill_random(img, n, 77);
	a = th_create(pa, BS, 0, DD_COMPRESS_NONE, DD_HASH_SHA256);
	b = th_create(pb, BS, 0, DD_COMPRESS_NONE, DD_HASH_SHA256);
	assert_int_equal(th_put(a, "a", img, n, n), 0);

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	r.store = b;
	r.fd = sv[1];
	assert_int_equal(pthread_create(&tid, NULL, refusing_recv_thread, &r),
			 0);
	rc = dd_send(a, "a", NULL, dd_fd_write, &sv[0]);
	assert_int_equal(pthread_join(tid, NULL), 0);
	close(sv[0]);
	assert_int_equal(r.rc, DD_ECANCELED);
	assert_int_equal(rc, DD_EIO);
	assert_non_null(strstr(dd_store_errmsg(a), "DD_EIO"));
	/* nothing left pending for the host, and the mask as it was */
	assert_int_equal(sigpending(&pending), 0);
	assert_int_equal(sigismember(&pending, SIGPIPE), 0);
	assert_int_equal(pthread_sigmask(SIG_BLOCK, NULL, &pending), 0);
	assert_int_equal(sigismember(&pending, SIGPIPE), 0);
	/* the refused receive left nothing */
	assert_int_equal(dd_snapshot_stat(b, "a", &(dd_snapshot_info){0}),
			 DD_ENOENT);

	/* A pipe whose reader is gone: EPIPE, not SIGPIPE. */
	assert_int_equal(pipe(p), 0);
	close(p[0]);
	assert_int_equal(dd_fd_write(&p[1], "x", 1), DD_EIO);
	assert_non_null(strstr(dd_last_errmsg(), "Broken pipe"));
	close(p[1]);
	assert_int_equal(sigpending(&pending), 0);
	assert_int_equal(sigismember(&pending, SIGPIPE), 0);

	alarm(0);
	dd_store_close(a);
	dd_store_close(b);
	th_rm_store(pa);
	th_rm_store(pb);
	free(img);
}

/* ---- receiving under injected faults ------------------------------------------*/

static const int recv_faults[] = {DD_FAULT_ALLOC, DD_FAULT_READ,
				  DD_FAULT_WRITE, DD_FAULT_SYNC,
				  DD_FAULT_RENAME, DD_FAULT_OPEN};

#define FW_BLOCKS 48
#define FW_SIZE (FW_BLOCKS * BS + 777)

/* 4 KiB blocks of every kind a stream carries: random (DATA), compressible
 * (DATA, zstd), zero (ZERO), repeats (REF), and a short tail. */
static void fw_image(uint8_t *img, uint64_t seed)
{
	memset(img, 0, FW_SIZE);
	for (size_t i = 0; i < FW_BLOCKS; i++) {
		uint8_t *b = img + i * BS;

		switch (i % 5) {
		case 0:
		case 4:
			fill_random(b, BS, seed * 1000 + i);
			break;
		case 1:
			for (size_t k = 0; k < BS; k += 64)
				memset(b + k, (int)('a' + (i + k / 64) % 26), 40);
			break;
		case 3:
			memcpy(b, b - 3 * BS, BS);
			break;
		}
	}
	fill_random(img + FW_BLOCKS * BS, 777, seed);
}

/* One receive walk: a stream read from a file into a copy of store
 * `tmpl`, which
 * holds the first `nbefore` of imgs; a success adds imgs[nbefore].  With
 * `src` the receive is resumable: a failure may keep what arrived, which
 * a stream from src resuming at the token must then complete. */
typedef struct recv_walk {
	th_tmpl st;               /* first: th_tmpl_walk_reset */
	int stream_fd;             /* read with dd_fd_read: faults hit it */
	th_image imgs[2];
	size_t nbefore;
	dd_store *src;
	uint64_t resumed;          /* failures whose receive was resumed */
} recv_walk;

static int recv_walk_op(void *ctx)
{
	recv_walk *rw = ctx;
	dd_recv_opts ro = DD_RECV_OPTS_INIT;

	ro.resumable = rw->src != NULL;
	assert_int_equal(lseek(rw->stream_fd, 0, SEEK_SET), 0);
	return dd_recv(rw->st.s, &ro, dd_fd_read, &rw->stream_fd, NULL);
}

/* A kept partial receive, completed by a stream that resumes it. */
static void recv_walk_resume(recv_walk *rw, const char *token)
{
	dd_send_opts so = DD_SEND_OPTS_INIT;
	const th_image *img = &rw->imgs[rw->nbefore];
	th_mem rest = {0};
	int rc;

	so.resume_token = token;
	if (rw->nbefore)
		so.base = rw->imgs[0].name;
	assert_int_equal(dd_send(rw->src, img->name, &so, th_mem_write, &rest), 0);
	rc = dd_recv(rw->st.s, NULL, th_mem_read, &rest, NULL);
	if (rc)
		fail_msg("resuming at %s: %s", token, dd_store_errmsg(rw->st.s));
	th_check_image(rw->st.s, img->name, img->data, img->size);
	free(rest.p);
	rw->resumed++;
}

static void recv_walk_after(void *ctx, int rc)
{
	recv_walk *rw = ctx;
	dd_snapshot_info si;
	char token[128];
	bool done = rc == 0;

	if (rc) {
		th_check_errmsg(dd_store_errmsg(rw->st.s), rc);
		/* nothing visible, and nothing kept unless resumable */
		assert_int_equal(dd_snapshot_stat(rw->st.s,
						  rw->imgs[rw->nbefore].name,
						  &si), DD_ENOENT);
		rc = dd_recv_resume_token(rw->st.s, token, sizeof(token));
		assert_true(rc == DD_ENOENT || (rc == 0 && rw->src));
		if (rc == 0) {
			recv_walk_resume(rw, token);
			done = true;
		}
	}
	th_tmpl_check(&rw->st, rw->imgs, rw->nbefore + done);
}

/* An empty store or one holding `base` (received from full): a new
 * th_tmp_store path. */
static char *recv_walk_store(const th_mem *full)
{
	dd_create_opts co = DD_CREATE_OPTS_INIT;
	char *path = th_tmp_store();
	dd_store *s;

	co.block_size = BS;
	assert_int_equal(dd_store_create(&s, path, &co, NULL), 0);
	if (full) {
		th_mem m = *full;

		m.pos = 0;
		assert_int_equal(dd_recv(s, NULL, th_mem_read, &m, NULL), 0);
	}
	dd_store_close(s);
	return path;
}

/* A temporary file holding the stream m. */
static void stream_file(struct tmpfile *t, const th_mem *m)
{
	tmp_open(t);
	assert_int_equal(write(t->fd, m->p, m->len), (ssize_t)m->len);
}

static uint64_t recv_walk_run(recv_walk *rw, char *tmpl, const char *what)
{
	th_walk w = {.what = what, .classes = recv_faults,
		     .nclasses = sizeof(recv_faults) / sizeof(recv_faults[0]),
		     .max_steps = 5000, .ctx = rw, .reset = th_tmpl_walk_reset,
		     /* a resumed receive changed the store */
		     .reset_every_step = rw->src != NULL,
		     .op = recv_walk_op, .after = recv_walk_after};
	uint64_t failures;

	th_tmpl_init(&rw->st, tmpl);
	failures = th_fault_walk(&w);
	th_tmpl_fini(&rw->st);
	return failures;
}

/* dd_recv under injected faults, a full stream into an empty store and an
 * incremental one into a store holding its base: every failure is a clean
 * error that leaves no snapshot and no partial receive behind, the store
 * opens, scrub passes and what it held reads back exact.  Then both again,
 * resumable: what a failure keeps is completed by a resuming stream. */
static void test_fault_walk_recv(void **state)
{
	uint8_t *mon = malloc(FW_SIZE), *tue = malloc(FW_SIZE);
	th_mem full = {0}, incr = {0};
	struct tmpfile full_f, incr_f;
	dd_send_opts so = DD_SEND_OPTS_INIT;
	char *src = recv_walk_store(NULL);
	dd_store *s;

	(void)state;
	fw_image(mon, 1);
	memcpy(tue, mon, FW_SIZE);
	for (size_t i = 0; i < FW_BLOCKS; i += 7)  /* a few new blocks */
		fill_random(tue + i * BS + 100, 200, 50 + i);
	assert_int_equal(dd_store_open(&s, src, NULL), 0);
	assert_int_equal(th_put(s, "mon", mon, FW_SIZE, 10000), 0);
	assert_int_equal(th_put(s, "tue", tue, FW_SIZE, 10000), 0);
	assert_int_equal(dd_send(s, "mon", NULL, th_mem_write, &full), 0);
	so.base = "mon";
	assert_int_equal(dd_send(s, "tue", &so, th_mem_write, &incr), 0);
	stream_file(&full_f, &full);
	stream_file(&incr_f, &incr);

	for (int resumable = 0; resumable < 2; resumable++) {
		recv_walk rw = {.stream_fd = full_f.fd,
				.imgs = {{"mon", mon, FW_SIZE}}, .nbefore = 0,
				.src = resumable ? s : NULL};

		assert_true(recv_walk_run(&rw, recv_walk_store(NULL),
					  resumable ? "recv full resumable"
						    : "recv full") > 0);
		assert_true(!resumable || rw.resumed > 0);
		rw = (recv_walk){.stream_fd = incr_f.fd,
				 .imgs = {{"mon", mon, FW_SIZE},
					  {"tue", tue, FW_SIZE}},
				 .nbefore = 1, .src = resumable ? s : NULL};
		assert_true(recv_walk_run(&rw, recv_walk_store(&full),
					  resumable ? "recv incremental resumable"
						    : "recv incremental") > 0);
		assert_true(!resumable || rw.resumed > 0);
	}
	dd_store_close(s);
	th_rm_store(src);
	tmp_close(&full_f);
	tmp_close(&incr_f);
	free(full.p);
	free(incr.p);
	free(mon);
	free(tue);
}

/* dd_recv_fd (a raw file, no store) under injected faults: each failure is
 * a clean error in dd_last_errmsg(); the last step rebuilds exact bytes. */
typedef struct recv_fd_walk {
	int stream_fd;
	int fd;
} recv_fd_walk;

static int recv_fd_walk_op(void *ctx)
{
	recv_fd_walk *fw = ctx;

	assert_int_equal(lseek(fw->stream_fd, 0, SEEK_SET), 0);
	return dd_recv_fd(fw->fd, NULL, dd_fd_read, &fw->stream_fd, NULL);
}

static void recv_fd_walk_after(void *ctx, int rc)
{
	if (rc)
		th_check_errmsg(dd_last_errmsg(), rc);
	(void)ctx;
}

static void test_fault_walk_recv_fd(void **state)
{
	uint8_t *img = malloc(FW_SIZE), *back = malloc(FW_SIZE + 1);
	th_mem s = {0};
	struct tmpfile in, out, sf;
	recv_fd_walk fw = {0};
	th_walk w = {.what = "recv_fd", .classes = recv_faults,
		     .nclasses = sizeof(recv_faults) / sizeof(recv_faults[0]),
		     .max_steps = 5000, .ctx = &fw, .op = recv_fd_walk_op,
		     .after = recv_fd_walk_after};

	(void)state;
	fw_image(img, 2);
	tmp_open(&in);
	assert_int_equal(write(in.fd, img, FW_SIZE), FW_SIZE);
	assert_int_equal(dd_send_fd(in.fd, "img", BS, 0, NULL, th_mem_write, &s),
			 0);
	tmp_close(&in);
	stream_file(&sf, &s);
	tmp_open(&out);
	fw.stream_fd = sf.fd;
	fw.fd = out.fd;
	assert_true(th_fault_walk(&w) > 0);
	assert_int_equal(pread(out.fd, back, FW_SIZE + 1, 0), FW_SIZE);
	assert_memory_equal(back, img, FW_SIZE);
	tmp_close(&out);
	tmp_close(&sf);
	free(s.p);
	free(img);
	free(back);
}

/* dd_recv_partial_walk's callback: counts the kept receives. */
static int count_kept(const char *name, const char *token, void *ctx)
{
	(void)name;
	(void)token;
	++*(int *)ctx;
	return 0;
}

static int kept_receives(dd_store *s)
{
	int n = 0;

	assert_int_equal(dd_recv_partial_walk(s, count_kept, &n), 0);
	return n;
}

/* A receive into the name of a kept partial receive (issue 21): a put of
 * that name is refused; a receive is admitted beside it, and its commit
 * drops it: the snapshot reads exact and nothing is kept.  A second
 * resumable receive of a name that has a kept one, cut too, keeps a
 * second one beside it; resuming the second commits the name and drops
 * the first.  A name whose writer runs still refuses a receive. */
static void test_recv_over_kept(void **state)
{
	enum { N = 64 * BS + 100 };
	char *sp = th_tmp_store(), *dp = th_tmp_store();
	dd_store *src = th_create(sp, BS, 0, DD_COMPRESS_NONE, DD_HASH_SHA256);
	dd_store *dst = th_create(dp, BS, 0, DD_COMPRESS_NONE, DD_HASH_SHA256);
	uint8_t *img = malloc(N);
	dd_recv_opts ro = DD_RECV_OPTS_INIT;
	dd_send_opts so = DD_SEND_OPTS_INIT;
	th_mem full = {0}, cut, rest = {0};
	dd_stream_info info;
	dd_writer *w;
	char tok[128];

	(void)state;
	assert_non_null(img);
	fill_random(img, N, 77);
	assert_int_equal(th_put(src, "a", img, N, N), 0);
	assert_int_equal(dd_send(src, "a", NULL, th_mem_write, &full), 0);

	/* a resumable receive of x, cut half-way: kept */
	ro.name = "x";
	ro.resumable = 1;
	cut = mem_of(full.p, full.len / 2);
	assert_int_not_equal(dd_recv(dst, &ro, th_mem_read, &cut, &info), 0);
	assert_int_equal(kept_receives(dst), 1);
	/* a put of x is refused, naming the kept receive */
	assert_int_equal(dd_writer_begin(&w, dst, "x"), DD_EEXIST);
	assert_non_null(strstr(dd_store_errmsg(dst), "kept for resuming"));
	/* a whole receive of x commits and drops it */
	ro.resumable = 0;
	full.pos = 0;
	assert_int_equal(dd_recv(dst, &ro, th_mem_read, &full, &info), 0);
	th_check_image(dst, "x", img, N);
	assert_int_equal(kept_receives(dst), 0);
	assert_int_equal(dd_recv_resume_token(dst, tok, sizeof(tok)), DD_ENOENT);

	/* y: two cut resumable receives, two kept */
	ro.name = "y";
	ro.resumable = 1;
	cut.pos = 0;
	assert_int_not_equal(dd_recv(dst, &ro, th_mem_read, &cut, &info), 0);
	free(cut.p);
	cut = mem_of(full.p, full.len / 3);
	assert_int_not_equal(dd_recv(dst, &ro, th_mem_read, &cut, &info), 0);
	snprintf(tok, sizeof(tok), "%s", info.resume_token);
	assert_true(strncmp(tok, "ddr1:", 5) == 0);
	assert_int_equal(kept_receives(dst), 2);
	assert_int_equal(dd_snapshot_stat(dst, "y", &(dd_snapshot_info){0}),
			 DD_ENOENT);
	/* the second resumed: y committed, both gone */
	so.resume_token = tok;
	assert_int_equal(dd_send(src, "a", &so, th_mem_write, &rest), 0);
	assert_true(rest.len < full.len);
	assert_int_equal(dd_recv(dst, &ro, th_mem_read, &rest, &info), 0);
	assert_true(info.resume_from > 0);
	th_check_image(dst, "y", img, N);
	assert_int_equal(kept_receives(dst), 0);

	/* a name whose writer runs refuses a receive of it */
	assert_int_equal(dd_writer_begin(&w, dst, "z"), 0);
	ro.name = "z";
	ro.resumable = 0;
	full.pos = 0;
	assert_int_equal(dd_recv(dst, &ro, th_mem_read, &full, &info), DD_EEXIST);
	assert_non_null(strstr(dd_store_errmsg(dst), "being written"));
	dd_writer_abort(w);
	dd_writer_free(w);

	/* gc then leaves exactly x and y, both exact */
	assert_int_equal(dd_store_gc(dst, NULL, NULL), 0);
	th_check_image(dst, "x", img, N);
	th_check_image(dst, "y", img, N);
	assert_int_equal(dd_store_scrub(dst, NULL, NULL, NULL), 0);
	free(cut.p);
	free(full.p);
	free(rest.p);
	free(img);
	dd_store_close(src);
	dd_store_close(dst);
	th_rm_store(sp);
	th_rm_store(dp);
}

/* The stream digest on its own thread (sdig.h) is SHA-256 of the bytes
 * in order, for streams shorter than a chunk (no thread), of exactly one
 * chunk, and of several, fed in pieces of every size from 1 byte to more
 * than a chunk; and a digest abandoned mid-stream frees cleanly. */
static void test_stream_digest_thread(void **state)
{
	const size_t n = (size_t)5 << 20, chunk = (size_t)1 << 20;
	const size_t lens[] = {0, 1, 4095, chunk - 1, chunk, chunk + 1, n};
	uint8_t *buf = malloc(n);
	uint8_t want[32], got[32];

	(void)state;
	assert_non_null(buf);
	for (size_t i = 0; i < n; i++)
		buf[i] = (uint8_t)(th_rng() >> 24);
	for (size_t t = 0; t < sizeof(lens) / sizeof(lens[0]); t++) {
		size_t len = lens[t];

		for (int how = 0; how < 3; how++) {
			dd_sdig *g;
			size_t off = 0;

			assert_int_equal(dd_sdig_new(&g), 0);
			while (off < len) {
				/* one piece; pieces of 16 and 4096 bytes, as
				 * frames and payloads; random pieces up to
				 * 1.5 chunks */
				size_t k = how == 0 ? len - off
					   : how == 1 ? ((off / 16) % 2 ? 4096 : 16)
						      : 1 + th_rng() % (chunk + chunk / 2);

				if (k > len - off)
					k = len - off;
				dd_sdig_update(g, buf + off, k);
				off += k;
			}
			dd_sdig_final(g, got);
			dd_sdig_free(g);
			dd_sha256(buf, len, want);
			assert_memory_equal(got, want, 32);
		}
	}
	{
		dd_sdig *g;

		assert_int_equal(dd_sdig_new(&g), 0);
		dd_sdig_update(g, buf, 3 * chunk + 5);
		dd_sdig_free(g);    /* no final: the thread is joined */
	}
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip_every_record),
		cmocka_unit_test(test_stream_digest_thread),
		cmocka_unit_test(test_golden),
		cmocka_unit_test(test_golden_fields),
		cmocka_unit_test(test_golden_cdc),
		cmocka_unit_test(test_golden_digest2),
		cmocka_unit_test(test_cdc_rules),
		cmocka_unit_test(test_truncation_every_byte),
		cmocka_unit_test(test_every_byte_flip),
		cmocka_unit_test(test_version_feature_flags),
		cmocka_unit_test(test_unknown_type_and_frame),
		cmocka_unit_test(test_oversize_records),
		cmocka_unit_test(test_bad_names),
		cmocka_unit_test(test_order_and_bounds),
		cmocka_unit_test(test_end_totals_and_digest),
		cmocka_unit_test(test_encoder_misuse),
		cmocka_unit_test(test_send_recv_fd_roundtrip),
		cmocka_unit_test(test_send_recv_fd_cdc),
		cmocka_unit_test(test_send_fd_edge_sizes),
		cmocka_unit_test(test_recv_fd_refuses_damage),
		cmocka_unit_test(test_check_incremental_base_refs),
		cmocka_unit_test(test_stream_header),
		cmocka_unit_test(test_send_fd_refuses_pipe),
		cmocka_unit_test(test_send_refuses_damaged_ddt_entry),
		cmocka_unit_test(test_recv_progress_ends_at_size),
		cmocka_unit_test(test_recv_bad_block_mid_list),
		cmocka_unit_test(test_recv_verify_store),
		cmocka_unit_test(test_refused_over_socketpair),
		cmocka_unit_test(test_fault_walk_recv),
		cmocka_unit_test(test_fault_walk_recv_fd),
		cmocka_unit_test(test_recv_over_kept),
		cmocka_unit_test(test_send_fd_sparse),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
