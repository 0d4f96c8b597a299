/*
 * test_reader.c -- store/reader.c's sequential reads: the read-ahead
 * window (decoded on the reader's own pool while the caller uses the last
 * read) must give exactly the bytes of a read of the moment, in order,
 * whatever the read sizes, jumps and threads; a damaged block fails the
 * read that covers it and no other (or, salvaged, is reported once); and
 * the content digest still catches a damaged map at the end.  Random
 * access is test_store.c's.  Read-ahead is forced on every sequential
 * read (dd_reader_ra_mode 1) but in test_threads_in_turn, whose reader
 * takes its time between reads, as a caller must for the default mode to
 * read ahead.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dedup.h"
#include "helpers.h"
#include "store/store_internal.h"

#define KiB 1024u
#define MiB (1024u * 1024u)

/* Random runs, text runs and runs of zeros (holes), 4 KiB at a time. */
static void fill_mixed(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i += 4096) {
		size_t l = n - i < 4096 ? n - i : 4096;
		uint64_t kind = (i / (64 * KiB)) % 5;

		for (size_t j = 0; j < l; j++)
			p[i + j] = kind == 4 ? 0
				 : kind == 3 ? (uint8_t)"ab cd"[th_rng() % 5]
					     : (uint8_t)(th_rng() >> 24);
	}
}

/* A store holding snapshot "a" of n bytes made by fill (seeded), and a
 * read buffer of buflen bytes. */
struct fx {
	char *path;
	dd_store *s;
	uint8_t *img, *buf;
	size_t n;
};

static void fx_init(struct fx *f, dd_store *s, char *path, size_t n,
		    size_t buflen, uint64_t seed, void (*fill)(uint8_t *, size_t))
{
	f->path = path;
	f->s = s;
	f->n = n;
	f->img = malloc(n);
	f->buf = malloc(buflen);
	assert_non_null(f->img);
	assert_non_null(f->buf);
	th_rng_state = seed;
	fill(f->img, n);
	assert_int_equal(th_put(s, "a", f->img, n, MiB), 0);
}

static void fx_fini(struct fx *f)
{
	dd_store_close(f->s);
	free(f->img);
	free(f->buf);
	th_rm_store(f->path);
}

/* fill_mixed, its last MiB zeros (holes). */
static void fill_mixed_zero_tail(uint8_t *p, size_t n)
{
	fill_mixed(p, n);
	memset(p + n - MiB, 0, MiB);
}

/* Reads [off, off + len) and compares it with the image. */
static void read_check(dd_reader *r, const uint8_t *img, size_t n,
		       uint64_t off, size_t len, uint8_t *buf)
{
	size_t got = 0, want = off >= n ? 0 : n - off < len ? n - off : len;

	assert_int_equal(dd_reader_pread(r, buf, len, off, &got), 0);
	assert_int_equal(got, want);
	if (want && memcmp(buf, img + off, want) != 0)
		fail_msg("bytes differ at %llu (+%zu)",
			 (unsigned long long)off, len);
}

/* Reads the whole image in pieces of `step`, from `from`. */
static void read_through(dd_reader *r, const uint8_t *img, size_t n,
			 uint64_t from, size_t step, uint8_t *buf)
{
	for (uint64_t off = from; off < n; off += step)
		read_check(r, img, n, off, step, buf);
}

/* Sequential reads of every size against the image: windows of one
 * block's part, of many blocks, of more than DD_READER_ROUND blocks (a
 * window ends at its 512th block, the read takes it and reads the rest),
 * reads that shrink (the window is dropped), jumps back and forth in a
 * run, and a store of 4 KiB and one of 64 KiB blocks, compressed. */
static void check_store_reads(uint32_t bs)
{
	const size_t n = 21 * MiB + 12345;
	char *path = th_tmp_store();
	static const size_t steps[] = {1 * MiB, 8 * MiB, 3 * MiB + 7, 77777,
				       4096, 5 * MiB};
	struct fx f;
	uint8_t *img, *buf;
	dd_reader *r;

	fx_init(&f, th_create(path, bs, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256),
		path, n, 9 * MiB, 1234 + bs, fill_mixed);
	img = f.img;
	buf = f.buf;
	assert_int_equal(dd_reader_open(&r, f.s, "a"), 0);
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
		read_through(r, img, n, 0, steps[i], buf);
	/* shrinking reads in a run */
	for (uint64_t off = 0, len = 8 * MiB; off < n;
	     off += len, len = len > 4096 ? len / 2 : 4096)
		read_check(r, img, n, off, len, buf);
	/* a run, a jump back into what was read ahead, a run again */
	for (uint64_t off = 0; off < 10 * MiB; off += MiB)
		read_check(r, img, n, off, MiB, buf);
	read_check(r, img, n, 10 * MiB + 100, MiB, buf);
	read_check(r, img, n, 3 * MiB + 5, 2 * MiB, buf);
	read_through(r, img, n, 5 * MiB + 5, MiB, buf);
	dd_reader_close(r);
	/* a reader closed with a window in flight */
	assert_int_equal(dd_reader_open(&r, f.s, "a"), 0);
	for (uint64_t off = 0; off < 6 * MiB; off += 2 * MiB)
		read_check(r, img, n, off, 2 * MiB, buf);
	dd_reader_close(r);
	fx_fini(&f);
}

static void test_sequential_4k(void **state)
{
	(void)state;
	check_store_reads(4 * KiB);
}

static void test_sequential_64k(void **state)
{
	(void)state;
	check_store_reads(64 * KiB);
}

/* Content-defined blocks: windows by byte offset, and of more than
 * DD_READER_ROUND blocks at a 4 KiB average. */
static void test_sequential_cdc(void **state)
{
	const size_t n = 13 * MiB + 999;
	char *path = th_tmp_store();
	dd_create_opts co = DD_CREATE_OPTS_INIT;
	struct fx f;
	dd_reader *r;
	dd_store *s;

	(void)state;
	co.block_size = 4 * KiB;
	co.chunker = DD_CHUNKER_FASTCDC;
	assert_int_equal(dd_store_create(&s, path, &co, NULL), 0);
	fx_init(&f, s, path, n, 9 * MiB, 77, fill_mixed);
	assert_int_equal(dd_reader_open(&r, s, "a"), 0);
	read_through(r, f.img, n, 0, 8 * MiB, f.buf);
	read_through(r, f.img, n, 0, MiB - 1, f.buf);
	read_through(r, f.img, n, 0, 100000, f.buf);
	dd_reader_close(r);
	fx_fini(&f);
}

/* One reader, its reads from two threads in turn: a window started on
 * one is taken on the other (under ThreadSanitizer too). */
struct turn {
	dd_reader *r;
	const uint8_t *img;
	size_t n;
	uint64_t off;
	uint8_t *buf;
	int rc;
};

static void *turn_read(void *arg)
{
	struct turn *t = arg;
	size_t got;

	t->rc = dd_reader_pread(t->r, t->buf, MiB, t->off, &got);
	if (!t->rc && memcmp(t->buf, t->img + t->off, got) != 0)
		t->rc = -1000;
	return NULL;
}

static void test_threads_in_turn(void **state)
{
	const size_t n = 12 * MiB;
	char *path = th_tmp_store();
	struct fx f;
	struct turn t = {.n = n};

	(void)state;
	dd_reader_ra_mode = 0;
	fx_init(&f, th_create(path, 64 * KiB, 0, DD_COMPRESS_ZSTD,
			      DD_HASH_SHA256), path, n, MiB, 5, fill_mixed);
	t.img = f.img;
	t.buf = f.buf;
	assert_int_equal(dd_reader_open(&t.r, f.s, "a"), 0);
	for (t.off = 0; t.off < n; t.off += MiB) {
		if (t.off / MiB % 2) {
			pthread_t th;

			assert_int_equal(pthread_create(&th, NULL, turn_read,
							&t), 0);
			assert_int_equal(pthread_join(th, NULL), 0);
		} else {
			turn_read(&t);
		}
		assert_int_equal(t.rc, 0);
		usleep(20000);  /* the caller's own work */
	}
	dd_reader_close(t.r);
	fx_fini(&f);
	dd_reader_ra_mode = 1;
}

static void fill_random(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(th_rng() >> 24);
}

/* Flips a payload byte of the record of the 4 KiB block at data, found
 * through its DDT entry, in the store's pack file (closed meanwhile). */
static void damage_block(struct fx *f, const uint8_t *data)
{
	dd_ddt_key key = {.dk_variant = 0};
	dd_ddt_ent ent;
	dd_err err = {0};
	dd_txn *txn;
	char pf[512];

	dd_sha256(data, 4096, key.dk_hash);
	assert_int_equal(dd_txn_begin(f->s->st_db, &err, false, &txn), 0);
	assert_int_equal(dd_ddt_get(txn, &err, &key, &ent), 0);
	dd_txn_abort(txn);
	dd_store_close(f->s);
	snprintf(pf, sizeof(pf), "%s/packs/%08x.pack", f->path, ent.de_pack);
	th_flip_byte(pf, ent.de_offset + 64 + 100);   /* in the payload */
	assert_int_equal(dd_store_open(&f->s, f->path, NULL), 0);
}

struct salvaged {
	int n;
	uint64_t off, len;
};

static int salvage_cb(void *ctx, uint64_t off, uint64_t len, int error,
		      const char *msg)
{
	struct salvaged *sv = ctx;

	assert_int_equal(error, DD_ECHECKSUM);
	assert_non_null(strstr(msg, "DD_ECHECKSUM"));
	sv->n++;
	sv->off = off;
	sv->len = len;
	return 0;
}

/* The damaged block is in the window read ahead while the caller has the
 * read before it: that read succeeds, the one that covers the block
 * fails with DD_ECHECKSUM and no bytes, the reads after it succeed.
 * Under salvage the block is zeros, reported once, every other byte the
 * image's. */
static void test_damage_ahead(void **state)
{
	const size_t n = 10 * MiB;
	const uint64_t bad = 1600;   /* in [6 MiB, 7 MiB) */
	char *path = th_tmp_store();
	uint8_t *img, *buf, *want = malloc(n);
	struct salvaged sv = {0};
	struct fx f;
	dd_reader *r;
	dd_store *s;
	size_t got;

	(void)state;
	fx_init(&f, th_create(path, 4 * KiB, 0, DD_COMPRESS_NONE,
			      DD_HASH_SHA256), path, n, MiB, 11, fill_random);
	img = f.img;
	buf = f.buf;
	damage_block(&f, img + bad * 4096);
	s = f.s;
	assert_int_equal(dd_reader_open(&r, s, "a"), 0);
	for (uint64_t off = 0; off < n; off += MiB) {
		bool hit = off / MiB == bad * 4096 / MiB;

		got = 12345;
		assert_int_equal(dd_reader_pread(r, buf, MiB, off, &got),
				 hit ? DD_ECHECKSUM : 0);
		assert_int_equal(got, hit ? 0 : MiB);
		if (hit)
			assert_non_null(strstr(dd_reader_errmsg(r), "pack 1"));
		else
			assert_memory_equal(buf, img + off, MiB);
	}
	dd_reader_close(r);
	memcpy(want, img, n);
	memset(want + bad * 4096, 0, 4096);
	assert_int_equal(dd_reader_open(&r, s, "a"), 0);
	for (uint64_t off = 0; off < n; off += MiB) {
		assert_int_equal(dd_reader_pread_salvage(r, buf, MiB, off, &got,
							 salvage_cb, &sv), 0);
		assert_int_equal(got, MiB);
		assert_memory_equal(buf, want + off, MiB);
	}
	assert_int_equal(sv.n, 1);
	assert_int_equal(sv.off, bad * 4096);
	assert_int_equal(sv.len, 4096);
	dd_reader_close(r);
	free(want);
	fx_fini(&f);
}

/* A block map that names a block where the snapshot has a hole (the
 * last block of an image ending in zeros): every block reads and checks,
 * so only the content digest can tell -- and it still does, at the read
 * that reaches the end, with read-ahead feeding it. */
/* Damages f's map of 64 KiB blocks: its last block, a hole, named as
 * the image's first block. */
static void fx_map_over_tail(struct fx *f)
{
	dd_ddt_key key = {.dk_variant = 0};
	dd_snap_rec rec;
	dd_err err = {0};
	dd_txn *txn;

	dd_sha256(f->img, 64 * KiB, key.dk_hash);
	assert_int_equal(dd_txn_begin(f->s->st_db, &err, true, &txn), 0);
	assert_int_equal(dd_snap_get(txn, &err, "a", &rec), 0);
	assert_int_equal(dd_bmap_append(txn, &err, rec.sr_id,
					f->n / (64 * KiB) - 1, 0, &key), 0);
	assert_int_equal(dd_txn_commit(txn, &err), 0);
}

static void test_digest_with_read_ahead(void **state)
{
	const size_t n = 9 * MiB;
	char *path = th_tmp_store();
	struct fx f;
	dd_reader *r;
	dd_store *s;
	uint8_t *img, *buf;
	size_t got;

	(void)state;
	fx_init(&f, th_create(path, 64 * KiB, 0, DD_COMPRESS_ZSTD,
			      DD_HASH_SHA256), path, n, MiB, 8,
		fill_mixed_zero_tail);
	s = f.s;
	img = f.img;
	buf = f.buf;
	fx_map_over_tail(&f);
	assert_int_equal(dd_reader_open(&r, s, "a"), 0);
	for (uint64_t off = 0; off + MiB < n; off += MiB) {
		assert_int_equal(dd_reader_pread(r, buf, MiB, off, &got), 0);
		assert_memory_equal(buf, img + off, MiB);
	}
	assert_int_equal(dd_reader_pread(r, buf, MiB, n - MiB, &got),
			 DD_ECORRUPT);
	assert_non_null(strstr(dd_reader_errmsg(r), "content digest"));
	dd_reader_close(r);
	fx_fini(&f);
}

/* Reads the image as dedup get does: a hole skipped with
 * dd_reader_next_data, then up to step bytes read.  Each skip lands on a
 * block that holds data (or the end) and passes over zeros only; the
 * bytes read are the image's.  Returns the first failure's code. */
static int read_skipping(dd_reader *r, const uint8_t *img, size_t n,
			 uint8_t *buf, size_t step, uint32_t bs, size_t *skipped)
{
	uint64_t off = 0, data;
	size_t got;
	int rc;

	*skipped = 0;
	while (off < n) {
		rc = dd_reader_next_data(r, off, &data);
		if (rc)
			return rc;
		assert_true(data >= off && data <= n);
		for (uint64_t i = off; i < data; i++)
			assert_int_equal(img[i], 0);
		/* data, or a block boundary before it (never past data) */
		assert_true(data == n || data == off || data % bs == 0);
		if (data < n && data > off) {
			bool any = false;

			for (uint64_t i = data; i < data + bs && i < n; i++)
				any |= img[i] != 0;
			assert_true(any);
		}
		*skipped += (size_t)(data - off);
		off = data;
		if (off >= n)
			break;
		rc = dd_reader_pread(r, buf, step, off, &got);
		if (rc)
			return rc;
		assert_memory_equal(buf, img + off, got);
		off += got;
	}
	return 0;
}

/* dd_reader_next_data: the holes of an image (runs of them in the middle,
 * and its last MiB) skipped, as a restore does, with and without
 * read-ahead; past the end and at a data byte it returns where it was.
 * The skips keep the content-digest check on: a map entry added over the
 * hole at the end (see test_digest_with_read_ahead) is still caught at
 * the read of the end, and a skip that reaches the end checks the
 * digest itself. */
static void test_next_data(void **state)
{
	const size_t n = 9 * MiB;
	char *path = th_tmp_store();
	struct fx f;
	dd_reader *r;
	uint64_t data;
	size_t skipped;

	(void)state;
	fx_init(&f, th_create(path, 64 * KiB, 0, DD_COMPRESS_ZSTD,
			      DD_HASH_SHA256), path, n, MiB, 8,
		fill_mixed_zero_tail);
	for (int ra = -1; ra <= 1; ra += 2) {
		dd_reader_ra_mode = ra;
		assert_int_equal(dd_reader_open(&r, f.s, "a"), 0);
		assert_int_equal(read_skipping(r, f.img, n, f.buf, MiB,
					       64 * KiB, &skipped), 0);
		/* the zero tail and the runs of zeros before it */
		assert_true(skipped >= MiB);
		assert_int_equal(dd_reader_next_data(r, n + 5, &data), 0);
		assert_int_equal(data, n);
		assert_int_equal(dd_reader_next_data(r, 5, &data), 0);
		assert_int_equal(data, 5);   /* a data byte */
		assert_int_equal(dd_reader_next_data(r, 0, NULL), DD_EINVAL);
		dd_reader_close(r);
	}
	/* the map names a block where the image has a hole, at the end */
	fx_map_over_tail(&f);
	for (int ra = -1; ra <= 1; ra += 2) {
		uint8_t *want = malloc(n);

		assert_non_null(want);
		memcpy(want, f.img, n);
		memcpy(want + n - 64 * KiB, f.img, 64 * KiB);
		dd_reader_ra_mode = ra;
		assert_int_equal(dd_reader_open(&r, f.s, "a"), 0);
		assert_int_equal(read_skipping(r, want, n, f.buf, MiB,
					       64 * KiB, &skipped),
				 DD_ECORRUPT);
		assert_non_null(strstr(dd_reader_errmsg(r), "content digest"));
		dd_reader_close(r);
		free(want);
	}
	dd_reader_ra_mode = 1;
	fx_fini(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sequential_4k),
		cmocka_unit_test(test_sequential_64k),
		cmocka_unit_test(test_sequential_cdc),
		cmocka_unit_test(test_threads_in_turn),
		cmocka_unit_test(test_damage_ahead),
		cmocka_unit_test(test_digest_with_read_ahead),
		cmocka_unit_test(test_next_data),
	};

	dd_reader_ra_mode = 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
