/*
 * test_manifest.c -- unit tests of snapshot manifests (format/manifest.md,
 * libdedup/store/manifest.c): round trips on real bytes, the golden file
 * tests/golden/manifest_v1.snap, every byte flip and truncation of it
 * refused, hand-made lists that break the canonical form, the digest
 * check at write time, and the rename rules of publishing and deleting.
 *
 * Regenerate the golden file with DD_REGEN_GOLDEN=1 only when the format
 * version changes.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/crc32c.h"
#include "common/endian.h"
#include "store/manifest.h"
#include "store/store_internal.h"
#include "helpers.h"

#ifndef DD_GOLDEN_DIR
#define DD_GOLDEN_DIR "tests/golden"
#endif
#define GOLDEN DD_GOLDEN_DIR "/manifest_v1.snap"
#define GOLDEN_CDC DD_GOLDEN_DIR "/manifest_v1_cdc.snap"
#define GOLDEN_DIGEST2 DD_GOLDEN_DIR "/manifest_v1_digest2.snap"

struct fx {
	char dir[64];
	int dfd;
	dd_vdir *vd;               /* the same directory, as the store has it */
};

static int fx_setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));

	strcpy(fx->dir, "/tmp/dd_test_manifest.XXXXXX");
	assert_non_null(mkdtemp(fx->dir));
	fx->dfd = open(fx->dir, O_RDONLY | O_DIRECTORY);
	assert_true(fx->dfd >= 0);
	assert_int_equal(dd_vdir_open_local(&fx->vd, NULL, fx->dir), 0);
	*state = fx;
	return 0;
}

static int fx_teardown(void **state)
{
	struct fx *fx = *state;

	dd_vdir_close(fx->vd);
	close(fx->dfd);
	th_rm_rf(fx->dir);
	free(fx);
	return 0;
}

/* An image as a manifest sees it: per block a hash and variant, or a
 * hole (hole[i] set); for content-defined blocks (chunker fastcdc) each
 * block's length too (len[i]), holes that follow each other one. */
struct img {
	int chunker;
	uint64_t nblocks;
	uint64_t size;
	uint32_t bs;
	uint8_t (*hash)[32];
	uint8_t *variant;
	uint8_t *hole;
	uint32_t *len;
	int dv;            /* content digest version; 0 reads as 1 */
};

static int img_dv(const struct img *m)
{
	return m->dv ? m->dv : DD_DIGEST_V1;
}

static void img_digest(const struct img *m, uint8_t out[32])
{
	dd_digest *d;
	dd_err err;

	assert_int_equal(dd_digest_new(&d, &err, m->chunker, img_dv(m), m->bs),
			 0);
	for (uint64_t i = 0; i < m->nblocks; i++)
		dd_digest_block(d, m->hole[i] ? NULL : m->hash[i],
				m->len ? m->len[i] : 0);
	dd_digest_final(d, m->size, m->bs, out);
	dd_digest_free(d);
}

static void img_hdr(const struct img *m, uint64_t id, const char *name,
		    dd_manifest_hdr *h)
{
	memset(h, 0, sizeof(*h));
	h->mh_chunker = m->chunker;
	h->mh_id = id;
	h->mh_ctime = 1764547200; /* 2025-12-01T00:00:00Z */
	h->mh_size = m->size;
	h->mh_blocks = m->nblocks;
	h->mh_block_size = m->bs;
	h->mh_hash_kind = DD_HASH_SHA256;
	h->mh_dv = img_dv(m);
	/* holes of content-defined blocks: one a run */
	for (uint64_t i = 0; i < m->nblocks; i++) {
		bool joined = m->chunker && i && m->hole[i] && m->hole[i - 1];

		h->mh_zero_blocks += m->hole[i] != 0 && !joined;
		h->mh_blocks -= joined;
	}
	img_digest(m, h->mh_digest);
	snprintf(h->mh_name, sizeof(h->mh_name), "%s", name);
}

/* Writes m as manifests ID.tmp through the writer, holes in runs. */
static int img_write(dd_vdir *vd, const struct img *m,
		     const dd_manifest_hdr *h)
{
	dd_manifest_writer *mw;
	dd_err err;
	int rc = dd_manifest_write_begin(&mw, &err, vd, h->mh_id, h->mh_name,
					 m->chunker, img_dv(m), m->bs);

	if (rc)
		return rc;
	for (uint64_t i = 0; !rc && i < m->nblocks; i++) {
		uint32_t len = m->len ? m->len[i] : 0;

		rc = m->hole[i] ? dd_manifest_write_holes(mw, &err,
							  m->len ? len : 1)
				: dd_manifest_write_block(mw, &err, m->hash[i],
							  m->variant[i], len);
	}
	if (!rc)
		rc = dd_manifest_write_finish(mw, &err, h);
	if (!rc) {
		bool moved;

		rc = dd_manifest_move(vd, &err, h->mh_id, DD_MANIFEST_TMP,
				      DD_MANIFEST_SNAP, &moved);
	}
	dd_manifest_write_free(mw);
	return rc;
}

/* Reads manifest id back and checks header and every block against m. */
static void img_check(dd_vdir *vd, const struct img *m,
		      const dd_manifest_hdr *h)
{
	dd_manifest_reader *mr;
	dd_manifest_hdr got;
	dd_manifest_ent e;
	dd_err err;
	uint64_t at = 0, off = 0;
	int rc = 0;

	assert_int_equal(dd_manifest_open_at(&mr, &err, vd, h->mh_id,
					     DD_MANIFEST_SNAP, &got), 0);
	assert_int_equal(got.mh_id, h->mh_id);
	assert_int_equal(got.mh_ctime, h->mh_ctime);
	assert_int_equal(got.mh_size, h->mh_size);
	assert_int_equal(got.mh_blocks, h->mh_blocks);
	assert_int_equal(got.mh_zero_blocks, h->mh_zero_blocks);
	assert_int_equal(got.mh_block_size, h->mh_block_size);
	assert_string_equal(got.mh_name, h->mh_name);
	assert_memory_equal(got.mh_digest, h->mh_digest, 32);
	assert_int_equal(got.mh_chunker, m->chunker);
	while (m->chunker &&
	       (rc = dd_manifest_read_next(mr, &err, &e)) == 1) {
		/* content-defined: a run of the image's holes is one entry */
		uint64_t want = 0;

		assert_int_equal(e.me_off, off);
		assert_int_equal(!!m->hole[at], e.me_hole);
		if (!e.me_hole) {
			assert_memory_equal(e.me_hash, m->hash[at], 32);
			assert_int_equal(e.me_variant, m->variant[at]);
			want = m->len[at++];
		}
		while (e.me_hole && at < m->nblocks && m->hole[at])
			want += m->len[at++];
		assert_int_equal(e.me_len, want);
		off += want;
	}
	while (!m->chunker &&
	       (rc = dd_manifest_read_next(mr, &err, &e)) == 1) {
		assert_int_equal(e.me_index, at);
		for (uint64_t k = 0; k < e.me_count; k++) {
			assert_int_equal(!!m->hole[at + k], e.me_hole);
			if (!e.me_hole) {
				assert_memory_equal(e.me_hash, m->hash[at], 32);
				assert_int_equal(e.me_variant, m->variant[at]);
			}
		}
		at += e.me_count;
	}
	assert_int_equal(rc, 0);
	assert_int_equal(at, m->nblocks);
	dd_manifest_read_close(mr);
}

static void img_alloc(struct img *m, uint64_t n, uint32_t bs, uint64_t size)
{
	m->chunker = DD_CHUNKER_FIXED;
	m->len = NULL;
	m->nblocks = n;
	m->bs = bs;
	m->size = size;
	m->hash = calloc(n ? n : 1, 32);
	m->variant = calloc(n ? n : 1, 1);
	m->hole = calloc(n ? n : 1, 1);
}

static void img_free(struct img *m)
{
	free(m->len);
	free(m->hash);
	free(m->variant);
	free(m->hole);
}

static void test_roundtrip(void **state)
{
	struct fx *fx = *state;
	const uint64_t n = 5000;
	dd_manifest_hdr h;
	struct img m;

	img_alloc(&m, n, 4096, n * 4096 - 100);
	th_rng_state = 11;
	for (uint64_t i = 0; i < n; i++) {
		/* runs of holes of every length up to 7, and collisions */
		m.hole[i] = (i % 97) < (i % 8);
		for (int k = 0; k < 32; k++)
			m.hash[i][k] = (uint8_t)th_rng();
		m.variant[i] = i % 13 == 0 ? (uint8_t)(1 + i % 255) : 0;
	}
	m.hole[n - 1] = 0;
	img_hdr(&m, 0x1234, "round trip", &h);
	assert_int_equal(img_write(fx->vd, &m, &h), 0);
	img_check(fx->vd, &m, &h);
	/* an image of holes only, and an empty one */
	memset(m.hole, 1, n);
	img_hdr(&m, 7, "holes", &h);
	assert_int_equal(img_write(fx->vd, &m, &h), 0);
	img_check(fx->vd, &m, &h);
	img_free(&m);
	img_alloc(&m, 0, 131072, 0);
	img_hdr(&m, 8, "empty", &h);
	assert_int_equal(img_write(fx->vd, &m, &h), 0);
	img_check(fx->vd, &m, &h);
	img_free(&m);
}

/* The golden image: block 0, three holes, block 4 of variant 2, block 5,
 * and block 6 short (size ends 1000 bytes into it). */
static void golden_img(struct img *m, dd_manifest_hdr *h)
{
	img_alloc(m, 7, 65536, 6 * 65536 + 1000);
	for (int i = 0; i < 7; i++)
		for (int k = 0; k < 32; k++)
			m->hash[i][k] = (uint8_t)(i * 32 + k);
	m->hole[1] = m->hole[2] = m->hole[3] = 1;
	m->variant[4] = 2;
	img_hdr(m, 0x2a, "golden", h);
}

static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = malloc(1 << 16);

	if (!f)
		fail_msg("cannot open %s: %s (regenerate with "
			 "DD_REGEN_GOLDEN=1)", path, strerror(errno));
	*len = fread(buf, 1, 1 << 16, f);
	fclose(f);
	return buf;
}

/* Writes m as manifest 0x2a and compares its bytes with the golden file
 * of want_len bytes (rewritten first when DD_REGEN_GOLDEN=1), then checks
 * that the golden bytes decode to m.  Returns the golden bytes. */
static uint8_t *golden_match(struct fx *fx, const char *golden,
			     const struct img *m, const dd_manifest_hdr *h,
			     size_t want_len)
{
	char path[128];
	uint8_t *want, *got;
	size_t wlen, glen;
	int fd;

	assert_int_equal(img_write(fx->vd, m, h), 0);
	snprintf(path, sizeof(path), "%s/000000000000002a.snap", fx->dir);
	if (getenv("DD_REGEN_GOLDEN") && !strcmp(getenv("DD_REGEN_GOLDEN"), "1")) {
		FILE *f = fopen(golden, "wb");

		got = slurp(path, &glen);
		assert_non_null(f);
		assert_int_equal(fwrite(got, 1, glen, f), glen);
		fclose(f);
		free(got);
	}
	want = slurp(golden, &wlen);
	got = slurp(path, &glen);
	assert_int_equal(wlen, want_len);
	assert_int_equal(glen, wlen);
	assert_memory_equal(got, want, wlen);
	free(got);
	/* the golden bytes decode to the image */
	unlinkat(fx->dfd, "000000000000002a.snap", 0);
	fd = openat(fx->dfd, "000000000000002a.snap",
		    O_WRONLY | O_CREAT | O_EXCL, 0644);
	assert_int_equal(write(fd, want, wlen), (ssize_t)wlen);
	close(fd);
	img_check(fx->vd, m, h);
	return want;
}

static void test_golden(void **state)
{
	struct fx *fx = *state;
	dd_manifest_hdr h;
	struct img m;

	golden_img(&m, &h);
	/* header 128 + name 6 + list (33 + 9 + 34 + 33 + 33) + trailer 8 */
	free(golden_match(fx, GOLDEN, &m, &h, 128 + 6 + 142 + 8));
	img_free(&m);
}

/* Opens bytes as a manifest through a temporary file: the return code. */
static int open_bytes(struct fx *fx, const uint8_t *buf, size_t len,
		      dd_err *err)
{
	dd_manifest_reader *mr;
	dd_manifest_hdr h;
	int fd = openat(fx->dfd, "probe", O_RDWR | O_CREAT | O_TRUNC, 0644);
	int rc;

	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	rc = dd_manifest_read_open(&mr, err, fd, "probe", 0x2a, 0, &h);
	if (rc == 0) {
		dd_manifest_ent e;

		while ((rc = dd_manifest_read_next(mr, err, &e)) == 1)
			;
		dd_manifest_read_close(mr);
	}
	close(fd);
	return rc;
}

static void test_damage_refused(void **state)
{
	struct fx *fx = *state;
	size_t len;
	uint8_t *g = slurp(GOLDEN, &len), *b = malloc(len + 1);
	dd_err err;

	assert_int_equal(open_bytes(fx, g, len, &err), 0);
	/* every bit of every byte: CRCs and checks leave no silent flip */
	for (size_t i = 0; i < len; i++) {
		for (int bit = 0; bit < 8; bit++) {
			int rc;

			memcpy(b, g, len);
			b[i] ^= (uint8_t)(1u << bit);
			rc = open_bytes(fx, b, len, &err);
			if (rc != DD_ECORRUPT && rc != DD_EVERSION &&
			    rc != DD_ENOTSUP)
				fail_msg("flip of bit %d of byte %zu: rc %d",
					 bit, i, rc);
			assert_non_null(strstr(err.de_msg, "DD_E"));
		}
	}
	/* every truncation, and one byte too many */
	for (size_t n = 0; n < len; n++)
		assert_int_equal(open_bytes(fx, g, n, &err), DD_ECORRUPT);
	memcpy(b, g, len);
	b[len] = 0;
	assert_int_equal(open_bytes(fx, b, len + 1, &err), DD_ECORRUPT);
	free(b);
	free(g);
}

/* Re-seals a hand-edited golden copy: both CRCs made right again, so
 * only the rule under test can refuse it. */
static void reseal(uint8_t *b, size_t len)
{
	size_t namelen = dd_get_le16(b + 62);

	dd_put_le64(b + 96, len - 128 - namelen - 8);
	dd_put_le32(b + 124, dd_crc32c(0, b, 124));
	dd_put_le32(b + len - 4, dd_crc32c(0, b + 128, len - 128 - 8));
}

static void test_canonical_rules(void **state)
{
	struct fx *fx = *state;
	size_t len;
	uint8_t *g = slurp(GOLDEN, &len), *b = malloc(len + 64);
	size_t list = 128 + 6;     /* block 0 at list+0, holes at list+33 */
	dd_err err;

	/* the three holes as 1 + 2: adjacent runs */
	memcpy(b, g, list + 42);
	b[list + 33 + 1] = 1;
	b[list + 42] = 0x03;
	dd_put_le64(b + list + 43, 2);
	memcpy(b + list + 51, g + list + 42, len - list - 42);
	reseal(b, len + 9);
	assert_int_equal(open_bytes(fx, b, len + 9, &err), DD_ECORRUPT);
	assert_non_null(strstr(err.de_msg, "canonical"));
	/* a run of zero holes */
	memcpy(b, g, len);
	dd_put_le64(b + list + 34, 0);
	reseal(b, len);
	assert_int_equal(open_bytes(fx, b, len, &err), DD_ECORRUPT);
	/* variant 0 written as a variant entry */
	memcpy(b, g, len);
	b[list + 42 + 1] = 0;
	reseal(b, len);
	assert_int_equal(open_bytes(fx, b, len, &err), DD_ECORRUPT);
	/* an unknown tag */
	memcpy(b, g, len);
	b[list] = 0x04;
	reseal(b, len);
	assert_int_equal(open_bytes(fx, b, len, &err), DD_ECORRUPT);
	/* a hash changed: the CRCs are right, the content digest is not */
	memcpy(b, g, len);
	b[list + 5] ^= 1;
	reseal(b, len);
	assert_int_equal(open_bytes(fx, b, len, &err), DD_ECORRUPT);
	assert_non_null(strstr(err.de_msg, "digest"));
	/* a newer version is named as such */
	memcpy(b, g, len);
	dd_put_le32(b + 8, 2);
	reseal(b, len);
	assert_int_equal(open_bytes(fx, b, len, &err), DD_EVERSION);
	assert_non_null(strstr(err.de_msg, "version 2"));
	free(b);
	free(g);
}

/* ---- content-defined blocks (format/manifest.md §3.1, §4.1) ---------------*/

static void img_alloc_cdc(struct img *m, uint64_t n, uint32_t avg)
{
	img_alloc(m, n, avg, 0);
	m->chunker = DD_CHUNKER_FASTCDC;
	m->len = calloc(n ? n : 1, sizeof(*m->len));
}

static void img_sizes(struct img *m)
{
	m->size = 0;
	for (uint64_t i = 0; i < m->nblocks; i++)
		m->size += m->len[i];
}

/* The golden image: a block of 5000 bytes, two zero blocks of 3000 and
 * 4000 bytes (one hole of 7000), a 16384-byte block of variant 2 -- the
 * longest of average 4096 --, and a 1-byte tail. */
static void golden_cdc_img(struct img *m, dd_manifest_hdr *h)
{
	static const uint32_t len[5] = {5000, 3000, 4000, 16384, 1};

	img_alloc_cdc(m, 5, 4096);
	for (int i = 0; i < 5; i++) {
		m->len[i] = len[i];
		for (int k = 0; k < 32; k++)
			m->hash[i][k] = (uint8_t)(0x80 + i * 32 + k);
	}
	m->hole[1] = m->hole[2] = 1;
	m->variant[3] = 2;
	img_sizes(m);
	img_hdr(m, 0x2a, "golden", h);
}

/* Content-defined blocks of random lengths, runs of holes of every
 * length up to 7 cut blocks (each run one hole), variants. */
static void test_roundtrip_cdc(void **state)
{
	struct fx *fx = *state;
	const uint64_t n = 3000;
	dd_manifest_hdr h;
	struct img m;

	img_alloc_cdc(&m, n, 8192);
	th_rng_state = 12;
	for (uint64_t i = 0; i < n; i++) {
		m.hole[i] = (i % 97) < (i % 8);
		m.len[i] = 1 + (uint32_t)(th_rng() % 32768);
		for (int k = 0; k < 32; k++)
			m.hash[i][k] = (uint8_t)th_rng();
		m.variant[i] = i % 13 == 0 ? (uint8_t)(1 + i % 255) : 0;
	}
	img_sizes(&m);
	img_hdr(&m, 0x1235, "round trip cdc", &h);
	assert_true(h.mh_blocks < n);   /* holes joined */
	assert_int_equal(img_write(fx->vd, &m, &h), 0);
	img_check(fx->vd, &m, &h);
	/* the header of another chunker: the writer refuses it */
	h.mh_id = 0x1236;
	h.mh_chunker = DD_CHUNKER_FIXED;
	assert_int_equal(img_write(fx->vd, &m, &h), DD_EINVAL);
	img_free(&m);
}

static void test_golden_cdc(void **state)
{
	struct fx *fx = *state;
	dd_manifest_hdr h;
	struct img m;
	uint8_t *want;

	golden_cdc_img(&m, &h);
	assert_int_equal(h.mh_blocks, 4);
	assert_int_equal(h.mh_zero_blocks, 1);
	/* header 128 + name 6 + list (37 + 9 + 38 + 37) + trailer 8 */
	want = golden_match(fx, GOLDEN_CDC, &m, &h, 128 + 6 + 121 + 8);
	/* feature bit 0, the chunker in byte 104 (§3.1) */
	assert_int_equal(dd_get_le32(want + 12), 1);
	assert_int_equal(want[104], DD_CHUNKER_FASTCDC);
	free(want);
	img_free(&m);
}

/* The golden image with a content digest of version 2 (format/manifest.md
 * §3.2): feature bit 1, the list as version 1's; its digest is checked in
 * its own version -- the same bytes without the bit are refused, as the
 * version-1 golden file with it. */
static void test_golden_digest2(void **state)
{
	struct fx *fx = *state;
	dd_manifest_hdr h, h1;
	struct img m;
	uint8_t *want, *v1;
	size_t len, len1;
	dd_err err;

	golden_img(&m, &h1);
	m.dv = DD_DIGEST_V2;
	img_hdr(&m, 0x2a, "golden", &h);
	assert_memory_not_equal(h.mh_digest, h1.mh_digest, 32);
	len = 128 + 6 + 142 + 8;
	want = golden_match(fx, GOLDEN_DIGEST2, &m, &h, len);
	assert_int_equal(dd_get_le32(want + 12), 2);
	assert_int_equal(want[104], 0);
	v1 = slurp(GOLDEN, &len1);
	assert_int_equal(len1, len);
	/* only the feature bit, the digest and the header CRC differ */
	assert_memory_equal(want + 128, v1 + 128, len - 128);
	dd_put_le32(want + 12, 0);
	reseal(want, len);
	assert_int_equal(open_bytes(fx, want, len, &err), DD_ECORRUPT);
	dd_put_le32(v1 + 12, 2);
	reseal(v1, len);
	assert_int_equal(open_bytes(fx, v1, len, &err), DD_ECORRUPT);
	free(want);
	free(v1);
	img_free(&m);
}

/* Every bit flip and truncation of the golden manifest of content-
 * defined blocks is refused, and so is each rule of §4.1 broken. */
static void test_cdc_refused(void **state)
{
	struct fx *fx = *state;
	size_t len, list = 128 + 6;  /* block at list, hole at list + 37 */
	uint8_t *g = slurp(GOLDEN_CDC, &len), *b = malloc(len + 64);
	dd_err err;

	assert_int_equal(open_bytes(fx, g, len, &err), 0);
	for (size_t i = 0; i < len; i++)
		for (int bit = 0; bit < 8; bit++) {
			int rc;

			memcpy(b, g, len);
			b[i] ^= (uint8_t)(1u << bit);
			rc = open_bytes(fx, b, len, &err);
			if (rc != DD_ECORRUPT && rc != DD_EVERSION &&
			    rc != DD_ENOTSUP)
				fail_msg("flip of bit %d of byte %zu: rc %d",
					 bit, i, rc);
		}
	for (size_t n = 0; n < len; n++)
		assert_int_equal(open_bytes(fx, g, n, &err), DD_ECORRUPT);
	/* the hole as 3000 + 4000: adjacent holes */
	memcpy(b, g, list + 46);
	dd_put_le64(b + list + 38, 3000);
	b[list + 46] = 0x06;
	dd_put_le64(b + list + 47, 4000);
	memcpy(b + list + 55, g + list + 46, len - list - 46);
	dd_put_le64(b + 40, 5);        /* blocks */
	dd_put_le64(b + 48, 2);        /* holes */
	reseal(b, len + 9);
	assert_int_equal(open_bytes(fx, b, len + 9, &err), DD_ECORRUPT);
	assert_non_null(strstr(err.de_msg, "canonical"));
	/* a block longer than 4 x the average: 16385 */
	memcpy(b, g, len);
	dd_put_le32(b + list + 46 + 2, 16385);
	reseal(b, len);
	assert_int_equal(open_bytes(fx, b, len, &err), DD_ECORRUPT);
	/* a hole of no bytes */
	memcpy(b, g, len);
	dd_put_le64(b + list + 38, 0);
	reseal(b, len);
	assert_int_equal(open_bytes(fx, b, len, &err), DD_ECORRUPT);
	/* a tag of fixed blocks in a list of content-defined ones */
	memcpy(b, g, len);
	b[list] = 0x01;
	reseal(b, len);
	assert_int_equal(open_bytes(fx, b, len, &err), DD_ECORRUPT);
	/* lengths that do not add up to the size */
	memcpy(b, g, len);
	dd_put_le64(b + 32, dd_get_le64(g + 32) + 1);
	reseal(b, len);
	assert_int_equal(open_bytes(fx, b, len, &err), DD_ECORRUPT);
	/* another chunker; the feature bit without one; a chunker byte
	 * without the bit; an unknown feature; digest version 2 (bit 1),
	 * which content-defined blocks do not have */
	memcpy(b, g, len);
	b[104] = 2;
	reseal(b, len);
	assert_int_equal(open_bytes(fx, b, len, &err), DD_ECORRUPT);
	b[104] = 0;
	reseal(b, len);
	assert_int_equal(open_bytes(fx, b, len, &err), DD_ECORRUPT);
	memcpy(b, g, len);
	dd_put_le32(b + 12, 0);
	reseal(b, len);
	assert_int_equal(open_bytes(fx, b, len, &err), DD_ECORRUPT);
	memcpy(b, g, len);
	dd_put_le32(b + 12, 5);
	reseal(b, len);
	assert_int_equal(open_bytes(fx, b, len, &err), DD_ENOTSUP);
	memcpy(b, g, len);
	dd_put_le32(b + 12, 3);
	reseal(b, len);
	assert_int_equal(open_bytes(fx, b, len, &err), DD_ECORRUPT);
	free(b);
	free(g);
}

static void test_write_checks_digest(void **state)
{
	struct fx *fx = *state;
	dd_manifest_hdr h;
	struct img m;
	uint8_t first;

	golden_img(&m, &h);
	/* the block map (what is written) differs from the data (the
	 * digest): nothing is published, no temporary file stays */
	first = m.hash[0][0];
	m.hash[0][0] ^= 0xff;
	assert_int_equal(img_write(fx->vd, &m, &h), DD_ECORRUPT);
	assert_int_equal(faccessat(fx->dfd, "000000000000002a.snap", F_OK, 0),
			 -1);
	assert_int_equal(faccessat(fx->dfd, "000000000000002a.tmp", F_OK, 0),
			 -1);
	m.hash[0][0] = first;
	/* block totals that disagree with the header */
	h.mh_blocks++;
	assert_int_equal(img_write(fx->vd, &m, &h), DD_ECORRUPT);
	h.mh_blocks--;
	assert_int_equal(img_write(fx->vd, &m, &h), 0);
	img_free(&m);
}

static void test_names_and_moves(void **state)
{
	struct fx *fx = *state;
	char name[DD_MANIFEST_NAME_MAX];
	uint64_t id;
	int st;
	bool moved;
	dd_manifest_hdr h;
	dd_err err;
	struct img m;

	dd_manifest_name(name, 0xabcdef0123456789ull, DD_MANIFEST_DEL);
	assert_string_equal(name, "abcdef0123456789.del");
	assert_int_equal(dd_manifest_parse_name(name, &id, &st), 1);
	assert_true(id == 0xabcdef0123456789ull && st == DD_MANIFEST_DEL);
	assert_int_equal(dd_manifest_parse_name("abcdef0123456789.snap", &id,
						&st), 1);
	assert_int_equal(st, DD_MANIFEST_SNAP);
	assert_int_equal(dd_manifest_parse_name("ABCDEF0123456789.snap", &id,
						&st), 0);
	assert_int_equal(dd_manifest_parse_name("abcdef012345678.snap", &id,
						&st), 0);
	assert_int_equal(dd_manifest_parse_name("abcdef0123456789.snapx", &id,
						&st), 0);
	assert_int_equal(dd_manifest_parse_name(".", &id, &st), 0);
	/* publishing never replaces an ID.snap; a deleted one is gone */
	golden_img(&m, &h);
	assert_int_equal(img_write(fx->vd, &m, &h), 0);
	assert_int_equal(img_write(fx->vd, &m, &h), DD_EEXIST);
	assert_int_equal(dd_manifest_move(fx->vd, &err, 0x2a, DD_MANIFEST_SNAP,
					  DD_MANIFEST_DEL, &moved), 0);
	assert_true(moved);
	assert_int_equal(dd_manifest_open_at(NULL, &err, fx->vd, 0x2a,
					     DD_MANIFEST_SNAP, &h), DD_ENOENT);
	assert_int_equal(dd_manifest_remove(fx->vd, &err, 0x2a,
					    DD_MANIFEST_DEL), 0);
	assert_int_equal(dd_manifest_remove(fx->vd, &err, 0x2a,
					    DD_MANIFEST_DEL), DD_ENOENT);
	img_free(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_roundtrip, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_golden, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_roundtrip_cdc, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_golden_cdc, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_golden_digest2, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_cdc_refused, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_damage_refused, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_canonical_rules, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_write_checks_digest,
						fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_names_and_moves, fx_setup,
						fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
