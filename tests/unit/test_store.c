/*
 * test_store.c -- the store through its API: round trips, random-access
 * reads, verify mode under forced collisions, abort and crash rollback,
 * gc, scrub, damage, format versions and injected faults.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dedup.h"
#include "helpers.h"
#include "common/endian.h"
#include "common/faults.h"
#include "hash/hash.h"
#include "catalog/kfilter.h"
#include "catalog/ucnt.h"
#include "store/defer.h"
#include "store/store_internal.h"

#define KiB 1024u
#define MiB (1024u * 1024u)

/* ---- helpers ------------------------------------------------------------*/

static void fill_random(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(th_rng() >> 24);
}

/* Text-like compressible bytes. */
static void fill_text(uint8_t *p, size_t n)
{
	static const char words[][8] = {"block", "dedup", "store", "pack ",
					"hash ", "zstd ", "lmdb ", "snap "};

	for (size_t i = 0; i < n;) {
		const char *w = words[th_rng() % 8];

		for (size_t k = 0; w[k] && i < n; k++)
			p[i++] = (uint8_t)w[k];
	}
}

static dd_store *create(const char *path, uint32_t bs, int verify, int comp,
			int kind)
{
	return th_create(path, bs, verify, comp, kind);
}

static uint64_t stat_field(dd_store *s, size_t offset)
{
	dd_stat st = {.version = DD_STAT_VERSION};

	assert_int_equal(dd_store_stat(s, &st), 0);
	return *(uint64_t *)((char *)&st + offset);
}
#define STAT(s, f) stat_field((s), offsetof(dd_stat, f))

/* ---- round trips --------------------------------------------------------*/

static void test_roundtrip_shapes(void **state)
{
	static const uint32_t sizes[] = {0, 1, 4095, 4096, 4097, 65536 + 17,
					 3 * MiB + 5};
	char *path = th_tmp_store();
	dd_store *s = create(path, 4 * KiB, 0, DD_COMPRESS_ZSTD,
			     DD_HASH_SHA256);
	uint8_t *data = malloc(3 * MiB + 5);

	(void)state;
	th_rng_state = 42;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char name[32];

		fill_text(data, sizes[i]);
		/* a zero run inside and at the end */
		if (sizes[i] > 20000) {
			memset(data + 8192, 0, 12288);
			memset(data + sizes[i] - 5000, 0, 5000);
		}
		snprintf(name, sizeof(name), "img%zu", i);
		assert_int_equal(th_put(s, name, data, sizes[i], 1000 + i * 777), 0);
		th_check_image(s, name, data, sizes[i]);
	}
	dd_store_close(s);
	/* reopen: everything still there */
	assert_int_equal(dd_store_open(&s, path, NULL), 0);
	th_check_image(s, "img6", data, sizes[6]);
	dd_store_close(s);
	free(data);
	th_rm_store(path);
}

static void test_random_reads(void **state)
{
	const size_t n = 5 * MiB + 333;
	char *path = th_tmp_store();
	dd_store *s = create(path, 16 * KiB, 0, DD_COMPRESS_ZSTD,
			     DD_HASH_SHA256);
	uint8_t *data = malloc(n), *buf = malloc(n);
	dd_reader *r;

	(void)state;
	th_rng_state = 7;
	fill_text(data, n);
	memset(data + 100000, 0, 300000);
	assert_int_equal(th_put(s, "x", data, n, 1 << 20), 0);
	assert_int_equal(dd_reader_open(&r, s, "x"), 0);
	for (int i = 0; i < 300; i++) {
		uint64_t off = th_rng() % (n + 100);
		size_t len = (size_t)(th_rng() % (i % 3 ? 70000 : 2 * MiB)), got;

		assert_int_equal(dd_reader_pread(r, buf, len, off, &got), 0);
		if (off >= n)
			assert_int_equal(got, 0);
		else
			assert_int_equal(got, len < n - off ? len : n - off);
		if (got)
			assert_memory_equal(buf, data + off, got);
	}
	dd_reader_close(r);
	dd_store_close(s);
	free(data);
	free(buf);
	th_rm_store(path);
}

/* Dedup ratio equals what the test computes from its block pattern. */
static void test_dedup_accounting(void **state)
{
	const uint32_t bs = 4 * KiB;
	char *path = th_tmp_store();
	dd_store *s = create(path, bs, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256);
	uint8_t *pool = malloc(10 * bs), *img = malloc(100 * bs);
	uint64_t refs = 0, zeros = 0;

	(void)state;
	th_rng_state = 99;
	fill_random(pool, 10 * bs);
	for (int i = 0; i < 100; i++) {
		int k = (int)(th_rng() % 12); /* 10, 11: zero blocks */

		if (k >= 10) {
			memset(img + (size_t)i * bs, 0, bs);
			zeros++;
		} else {
			memcpy(img + (size_t)i * bs, pool + (size_t)k * bs, bs);
			refs++;
		}
	}
	assert_int_equal(th_put(s, "a", img, 100 * bs, 12345), 0);
	assert_int_equal(th_put(s, "b", img, 100 * bs, 100 * bs), 0);
	/* every pool block appears with this seed; checked, not assumed */
	uint8_t seen[10] = {0};
	for (int i = 0; i < 100; i++)
		for (int k = 0; k < 10; k++)
			if (!memcmp(img + (size_t)i * bs, pool + (size_t)k * bs, bs))
				seen[k] = 1;
	uint64_t distinct = 0;
	for (int k = 0; k < 10; k++)
		distinct += seen[k];
	assert_int_equal(STAT(s, unique_blocks), distinct);
	assert_int_equal(STAT(s, referenced_blocks), 2 * refs);
	assert_int_equal(STAT(s, zero_blocks), 2 * zeros);
	assert_int_equal(STAT(s, ddt_entries), distinct);
	dd_stat st = {.version = DD_STAT_VERSION};
	assert_int_equal(dd_store_stat(s, &st), 0);
	assert_true(st.dedup_ratio == (double)(2 * refs) / (double)distinct);
	dd_store_close(s);
	free(pool);
	free(img);
	th_rm_store(path);
}

/* ---- verify mode --------------------------------------------------------*/

/* 3000 distinct random 4 KiB blocks under a 16-bit hash: dozens of
 * collisions (birthday bound ~ 3000^2 / 2^17 ~ 68). */
#define VBLOCKS 3000

static uint8_t *collision_image(void)
{
	uint8_t *img = malloc((size_t)VBLOCKS * 4 * KiB);

	th_rng_state = 1234;
	fill_random(img, (size_t)VBLOCKS * 4 * KiB);
	return img;
}

static size_t count_collisions(const uint8_t *img)
{
	static uint8_t seen[65536];
	dd_hasher *h;
	size_t coll = 0;

	memset(seen, 0, sizeof(seen));
	assert_int_equal(dd_hasher_new(&h, DD_HASH_TEST_WEAK16), 0);
	for (size_t i = 0; i < VBLOCKS; i++) {
		uint8_t d[DD_HASH_SIZE];

		dd_hasher_sum(h, img + i * 4 * KiB, 4 * KiB, d);
		coll += seen[d[0] << 8 | d[1]]++ > 0;
	}
	dd_hasher_free(h);
	return coll;
}

static void test_verify_mode_exact(void **state)
{
	char *path = th_tmp_store();
	dd_store *s = create(path, 4 * KiB, 1, DD_COMPRESS_ZSTD,
			     DD_HASH_TEST_WEAK16);
	uint8_t *img = collision_image();
	size_t coll = count_collisions(img), n = (size_t)VBLOCKS * 4 * KiB;

	(void)state;
	assert_true(coll > 20);
	/* two images: the second repeats the first half then reverses */
	assert_int_equal(th_put(s, "one", img, n, 64 * KiB), 0);
	uint8_t *img2 = malloc(n);
	for (size_t i = 0; i < VBLOCKS; i++)
		memcpy(img2 + i * 4 * KiB,
		       img + (i < VBLOCKS / 2 ? i : VBLOCKS - 1 - i) * 4 * KiB,
		       4 * KiB);
	assert_int_equal(th_put(s, "two", img2, n, 1 * MiB), 0);
	th_check_image(s, "one", img, n);
	th_check_image(s, "two", img2, n);
	/* every distinct block stored once, colliding ones as variants */
	assert_int_equal(STAT(s, unique_blocks), VBLOCKS);
	assert_int_equal(STAT(s, referenced_blocks), 2 * VBLOCKS);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	dd_store_close(s);
	free(img);
	free(img2);
	th_rm_store(path);
}

/* Verify mode compares a repeated block with the copy the writer placed
 * earlier in its own pack, still in the pack's write buffer: it must be
 * written out first, or the compare fails and the block is stored twice.
 * Holes (never appended) lie between the two, 12 MiB of them (three
 * batches), so the first copy is placed and still buffered by then. */
static void test_verify_repeat_in_own_pack(void **state)
{
	char *path = th_tmp_store();
	dd_store *s = create(path, 4 * KiB, 1, DD_COMPRESS_NONE,
			     DD_HASH_SHA256);
	const size_t n = 12 * MiB + 8 * KiB;
	uint8_t *img = calloc(1, n);

	(void)state;
	assert_non_null(img);
	for (size_t i = 0; i < 4 * KiB; i++)
		img[i] = (uint8_t)(i * 7 + 1);
	memcpy(img + n - 4 * KiB, img, 4 * KiB);
	assert_int_equal(th_put(s, "rep", img, n, 1 * MiB), 0);
	th_check_image(s, "rep", img, n);
	assert_int_equal(STAT(s, referenced_blocks), 2);
	assert_int_equal(STAT(s, unique_blocks), 1);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	dd_store_close(s);
	free(img);
	th_rm_store(path);
}

/* ---- dd_writer_write_file ----------------------------------------------*/

/* Writes data to a new file beside the store; returns its descriptor. */
static int temp_file(const char *store, const uint8_t *data, size_t n)
{
	char fpath[4096];
	int fd;

	snprintf(fpath, sizeof(fpath), "%s.input", store);
	fd = open(fpath, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, n), (ssize_t)n);
	unlink(fpath);
	return fd;
}

static int put_file(dd_store *s, const char *name, int fd, uint64_t off,
		    uint64_t len)
{
	dd_writer *w;
	int rc = dd_writer_begin(&w, s, name);

	if (rc)
		return rc;
	rc = dd_writer_write_file(w, fd, off, len);
	if (!rc)
		rc = dd_writer_commit(w);
	dd_writer_free(w);
	return rc;
}

/* Ranges read by the workers give the same snapshot as bytes written:
 * whole files, a second copy (its blocks never copied, dd_writer_probe),
 * ranges mixed with memory writes and not contiguous, any batch split. */
static void test_write_file(void **state)
{
	const size_t n = 3 * MiB + 5;
	char *path = th_tmp_store();
	dd_store *s = create(path, 16 * KiB, 0, DD_COMPRESS_ZSTD,
			     DD_HASH_SHA256);
	uint8_t *data = malloc(n), *mixed = malloc(n);
	uint64_t unique;
	dd_writer *w;
	int fd;

	(void)state;
	th_rng_state = 99;
	fill_text(data, n);
	memset(data + 40000, 0, 70000); /* a zero run across blocks */
	memcpy(data + 2 * MiB, data, 256 * KiB); /* repeats within */
	fd = temp_file(path, data, n);
	assert_int_equal(th_put(s, "mem", data, n, 100000), 0);
	unique = STAT(s, unique_blocks);
	assert_int_equal(put_file(s, "file", fd, 0, n), 0);
	assert_int_equal(put_file(s, "again", fd, 0, n), 0);
	th_check_image(s, "file", data, n);
	th_check_image(s, "again", data, n);
	assert_int_equal(STAT(s, unique_blocks), unique);

	/* 1000 bytes from memory, file [1000, 501000), file [700000, n) */
	memcpy(mixed, data, 1000);
	memcpy(mixed + 1000, data + 1000, 500000);
	memcpy(mixed + 501000, data + 700000, n - 700000);
	assert_int_equal(dd_writer_begin(&w, s, "mixed"), 0);
	assert_int_equal(dd_writer_write(w, data, 1000), 0);
	assert_int_equal(dd_writer_write_file(w, fd, 1000, 500000), 0);
	assert_int_equal(dd_writer_write_file(w, fd, 700000, n - 700000), 0);
	assert_int_equal(dd_writer_commit(w), 0);
	dd_writer_free(w);
	th_check_image(s, "mixed", mixed, 501000 + n - 700000);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	dd_store_close(s);
	close(fd);
	free(data);
	free(mixed);
	th_rm_store(path);
}

/* The Nth read, allocation or write of a put from a file fails: the read
 * happens on a pool worker, the error comes back on the writer's thread,
 * cleanly, and the store keeps what it had.  Walked for a new file and
 * for a copy of it (whose blocks take the probe path). */
static void test_write_file_fault_walk(void **state)
{
	static const int classes[] = {DD_FAULT_READ, DD_FAULT_ALLOC,
				      DD_FAULT_WRITE};
	const size_t n = 384 * KiB;
	char *path = th_tmp_store();
	dd_store *s = create(path, 4 * KiB, 0, DD_COMPRESS_ZSTD,
			     DD_HASH_SHA256);
	uint8_t *a = malloc(n);
	int fd;

	(void)state;
	/* descriptor 0 must survive a half-built writer: fill it if closed */
	if (fcntl(0, F_GETFD) < 0)
		assert_int_equal(open("/dev/null", O_RDONLY), 0);
	for (size_t c = 0; c < 3; c++) {
		th_rng_state = 17 + c; /* new bytes for each class */
		fill_text(a, n);
		fd = temp_file(path, a, n);
		for (int copy = 0; copy < 2; copy++) {
			int failures = 0, rc = -1;
			char name[16];

			snprintf(name, sizeof(name), "f%zu.%d", c, copy);
			for (uint64_t k = 1; rc != 0 && k < 5000; k++) {
				dd_snapshot_info info;

				dd_fault_arm(classes[c], k, k % 2 ? EIO : ENOMEM,
					     0);
				rc = put_file(s, name, fd, 0, n);
				dd_fault_disarm_all();
				if (rc == 0)
					break;
				failures++;
				assert_true(rc == DD_EIO || rc == DD_ENOMEM);
				assert_true(fcntl(0, F_GETFD) >= 0);
				assert_int_equal(dd_snapshot_stat(s, name, &info),
						 DD_ENOENT);
			}
			assert_int_equal(rc, 0);
			/* a copy writes nothing to packs */
			if (!(classes[c] == DD_FAULT_WRITE && copy))
				assert_true(failures > 0);
			th_check_image(s, name, a, n);
		}
		close(fd);
	}
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	assert_int_equal(dd_store_gc(s, NULL, NULL), 0);
	assert_int_equal(STAT(s, unreferenced_blocks), 0);
	th_check_image(s, "f2.0", a, n);
	dd_store_close(s);
	free(a);
	th_rm_store(path);
}

/* Verify mode keeps every block's bytes for the comparison: files read by
 * the workers read back exact under forced collisions. */
static void test_write_file_verify(void **state)
{
	char *path = th_tmp_store();
	dd_store *s = create(path, 4 * KiB, 1, DD_COMPRESS_ZSTD,
			     DD_HASH_TEST_WEAK16);
	uint8_t *img = collision_image();
	size_t n = (size_t)VBLOCKS * 4 * KiB;
	int fd = temp_file(path, img, n);

	(void)state;
	assert_true(count_collisions(img) > 20);
	assert_int_equal(put_file(s, "one", fd, 0, n), 0);
	assert_int_equal(put_file(s, "two", fd, 0, n), 0);
	th_check_image(s, "one", img, n);
	th_check_image(s, "two", img, n);
	assert_int_equal(STAT(s, unique_blocks), VBLOCKS);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	dd_store_close(s);
	close(fd);
	free(img);
	th_rm_store(path);
}

/* A range past the end of the file (it shrank) fails the snapshot with
 * DD_EIO; the store keeps what it had. */
static void test_write_file_short(void **state)
{
	const size_t n = 1 * MiB;
	char *path = th_tmp_store();
	dd_store *s = create(path, 4 * KiB, 0, DD_COMPRESS_ZSTD,
			     DD_HASH_SHA256);
	uint8_t *data = malloc(n);
	dd_snapshot_info si;
	dd_writer *w;
	int fd, rc;

	(void)state;
	th_rng_state = 5;
	fill_random(data, n);
	fd = temp_file(path, data, n);
	assert_int_equal(put_file(s, "whole", fd, 0, n), 0);
	assert_int_equal(put_file(s, "short", fd, 0, n + 10000), DD_EIO);
	assert_non_null(strstr(dd_store_errmsg(s), "shrink"));
	assert_int_equal(dd_snapshot_stat(s, "short", &si), DD_ENOENT);
	/* the same, with the error found by a later write */
	assert_int_equal(dd_writer_begin(&w, s, "later"), 0);
	rc = dd_writer_write_file(w, fd, n / 2, n);
	for (int i = 0; !rc && i < 8; i++)
		rc = dd_writer_write(w, data, n);
	if (!rc)
		rc = dd_writer_commit(w);
	assert_int_equal(rc, DD_EIO);
	dd_writer_free(w);
	assert_int_equal(dd_writer_write_file(NULL, fd, 0, 1), DD_EINVAL);
	assert_int_equal(dd_writer_begin(&w, s, "bad"), 0);
	assert_int_equal(dd_writer_write_file(w, -1, 0, 1), DD_EINVAL);
	dd_writer_free(w);
	th_check_image(s, "whole", data, n);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	dd_store_close(s);
	close(fd);
	free(data);
	th_rm_store(path);
}

/* Without verify a hash match is trusted: with a weak hash, colliding
 * blocks read back as the first block of their hash -- the documented
 * risk of dedup without verify, shown here; SHA-256 makes it negligible. */
static void test_no_verify_shows_risk(void **state)
{
	char *path = th_tmp_store();
	dd_store *s = create(path, 4 * KiB, 0, DD_COMPRESS_ZSTD,
			     DD_HASH_TEST_WEAK16);
	uint8_t *img = collision_image(), *buf;
	size_t coll = count_collisions(img), n = (size_t)VBLOCKS * 4 * KiB;
	size_t wrong = 0, got;
	dd_reader *r;

	(void)state;
	assert_int_equal(th_put(s, "one", img, n, 64 * KiB), 0);
	assert_int_equal(STAT(s, unique_blocks), VBLOCKS - coll);
	buf = malloc(n);
	assert_int_equal(dd_reader_open(&r, s, "one"), 0);
	assert_int_equal(dd_reader_pread(r, buf, n, 0, &got), 0);
	for (size_t i = 0; i < VBLOCKS; i++)
		wrong += memcmp(buf + i * 4 * KiB, img + i * 4 * KiB, 4 * KiB) != 0;
	assert_int_equal(wrong, coll);
	dd_reader_close(r);
	dd_store_close(s);
	free(img);
	free(buf);
	th_rm_store(path);
}

/* ---- lifecycle: abort, crash rollback, lock -----------------------------*/

static void test_abort_leaves_nothing(void **state)
{
	char *path = th_tmp_store();
	dd_store *s = create(path, 4 * KiB, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256);
	uint8_t *data = malloc(4 * MiB);
	dd_writer *w;
	dd_snapshot_info info;
	uint64_t packs_before;

	(void)state;
	th_rng_state = 5;
	fill_random(data, 4 * MiB);
	assert_int_equal(th_put(s, "keep", data, MiB, MiB), 0);
	packs_before = STAT(s, pack_bytes);
	dd_writer_commit_bytes = MiB; /* make it commit part of the image */
	assert_int_equal(dd_writer_begin(&w, s, "gone"), 0);
	assert_int_equal(dd_writer_write(w, data + MiB, 3 * MiB), 0);
	dd_writer_abort(w);
	assert_int_equal(dd_writer_commit(w), DD_ESTATE);
	dd_writer_free(w);
	dd_writer_commit_bytes = (uint64_t)512 << 20;
	assert_int_equal(dd_snapshot_stat(s, "gone", &info), DD_ENOENT);
	assert_int_equal(STAT(s, unique_blocks), 256);
	assert_int_equal(dd_store_gc(s, NULL, NULL), 0);
	assert_int_equal(STAT(s, unreferenced_blocks), 0);
	assert_true(STAT(s, pack_bytes) <= packs_before);
	th_check_image(s, "keep", data, MiB);
	dd_store_close(s);
	free(data);
	th_rm_store(path);
}

/* A writer killed after intermediate commits: the next writer rolls it
 * back; gc then reclaims its blocks. */
static void test_killed_writer_rolled_back(void **state)
{
	char *path = th_tmp_store();
	dd_store *s = create(path, 4 * KiB, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256);
	uint8_t *data = malloc(6 * MiB);
	dd_snapshot_info info;
	pid_t pid;
	int status;

	(void)state;
	th_rng_state = 6;
	fill_random(data, 6 * MiB);
	assert_int_equal(th_put(s, "keep", data, MiB, MiB), 0);
	dd_store_close(s);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dd_writer *w;

		dd_writer_commit_bytes = MiB;
		/* it defers its DDT changes (store/defer.h): flushed every
		 * 1024 ops, 300 keys a transaction, so that some count */
		dd_writer_defer_min = dd_writer_defer_max = 1024;
		dd_writer_flush_keys = 300;
		dd_writer_flush_leaf = 0;
		if (dd_store_open(&s, path, NULL) || dd_writer_begin(&w, s, "dead"))
			_exit(2);
		/* 18 MiB, sharing blocks with "keep": the pipeline stores and
		 * commits the first batches before the child dies */
		for (int i = 0; i < 3; i++)
			if (dd_writer_write(w, data, 6 * MiB))
				_exit(3);
		_exit(0); /* no commit, no abort: as if killed */
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(dd_store_open(&s, path, NULL), 0);
	assert_int_equal(dd_snapshot_stat(s, "dead", &info), DD_ENOENT);
	/* the dead writer's references are still counted until recovery */
	assert_true(STAT(s, referenced_blocks) > 256);
	assert_int_equal(dd_store_gc(s, NULL, NULL), 0); /* locks: recovers */
	assert_int_equal(STAT(s, referenced_blocks), 256);
	assert_int_equal(STAT(s, unique_blocks), 256);
	assert_int_equal(STAT(s, unreferenced_blocks), 0);
	th_check_image(s, "keep", data, MiB);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	dd_store_close(s);
	free(data);
	th_rm_store(path);
}

/* Sets pack 1's committed end (or removes its packs entry: end 0) in the
 * LMDB file, as damage to it would. */
static void damage_pack_end(dd_store *s, uint64_t end)
{
	dd_txn *txn;
	dd_err err;

	assert_int_equal(dd_txn_begin(s->st_db, &err, true, &txn), 0);
	if (end)
		assert_int_equal(dd_packs_put(txn, &err, 1, end), 0);
	else
		assert_int_equal(dd_packs_del(txn, &err, 1), 0);
	assert_int_equal(dd_txn_commit(txn, &err), 0);
}

/* Recovery cuts pack tails back to the committed end and removes packs no
 * commit names -- but never on the word of damaged metadata: a pack whose
 * "dead" part holds a block the DDT names is left alone, and the writer
 * refuses with DD_ECORRUPT. */
static void test_recovery_keeps_live_blocks(void **state)
{
	const size_t n = 512 * KiB;
	char *path = th_tmp_store();
	dd_store *s = create(path, 4 * KiB, 0, DD_COMPRESS_NONE,
			     DD_HASH_SHA256);
	uint8_t *data = malloc(n);
	char pack[4096];
	uint8_t hdr[8];
	struct stat st;
	dd_writer *w;
	off_t size;
	int fd;

	(void)state;
	th_rng_state = 8;
	fill_random(data, n);
	assert_int_equal(th_put(s, "keep", data, n, n), 0);
	snprintf(pack, sizeof(pack), "%s/packs/00000001.pack", path);
	assert_int_equal(stat(pack, &st), 0);
	size = st.st_size;

	damage_pack_end(s, (uint64_t)size / 2);
	assert_int_equal(dd_writer_begin(&w, s, "next"), DD_ECORRUPT);
	assert_non_null(strstr(dd_store_errmsg(s), "live block"));
	assert_int_equal(stat(pack, &st), 0);
	assert_int_equal(st.st_size, size);

	damage_pack_end(s, 0);
	assert_int_equal(dd_writer_begin(&w, s, "next"), DD_ECORRUPT);
	assert_int_equal(stat(pack, &st), 0);
	assert_int_equal(st.st_size, size);

	/* ... and its header unreadable too: the DDT still names it */
	fd = open(pack, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, hdr, sizeof(hdr), 0), (ssize_t)sizeof(hdr));
	assert_int_equal(pwrite(fd, "XXXXXXXX", 8, 0), 8);
	assert_int_equal(dd_writer_begin(&w, s, "next"), DD_ECORRUPT);
	assert_non_null(strstr(dd_store_errmsg(s), "not removing"));
	assert_int_equal(stat(pack, &st), 0);
	assert_int_equal(st.st_size, size);
	assert_int_equal(pwrite(fd, hdr, sizeof(hdr), 0), (ssize_t)sizeof(hdr));
	close(fd);

	/* repaired, everything is there and writing goes on */
	damage_pack_end(s, (uint64_t)size);
	th_check_image(s, "keep", data, n);
	assert_int_equal(th_put(s, "next", data, n, n), 0);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	dd_store_close(s);
	free(data);
	th_rm_store(path);
}

/* Damage to the LMDB file, as libdedup's own code would write it: the
 * reference count of key's DDT entry becomes refcnt; returns the old. */
static uint64_t poke_refcnt(dd_store *s, const dd_ddt_key *key,
			    uint64_t refcnt)
{
	dd_ddt_ent ent;
	dd_txn *txn;
	dd_err err;
	uint64_t old;

	assert_int_equal(dd_txn_begin(s->st_db, &err, true, &txn), 0);
	assert_int_equal(dd_ddt_get(txn, &err, key, &ent), 0);
	old = ent.de_refcnt;
	ent.de_refcnt = refcnt;
	assert_int_equal(dd_ddt_put(txn, &err, key, &ent), 0);
	assert_int_equal(dd_txn_commit(txn, &err), 0);
	return old;
}

/* gc drops what no reference counts: a refcount lowered to 0 by damage
 * to the LMDB file must stop it, not cost a live block. */
static void test_gc_refuses_lost_refcount(void **state)
{
	const size_t n = 64 * KiB;
	char *path = th_tmp_store();
	dd_store *s = create(path, 4 * KiB, 0, DD_COMPRESS_ZSTD,
			     DD_HASH_SHA256);
	uint8_t *data = malloc(n);
	dd_ddt_key key = {.dk_variant = 0};
	uint64_t before;

	(void)state;
	th_rng_state = 9;
	fill_random(data, n);
	assert_int_equal(th_put(s, "keep", data, n, n), 0);
	before = STAT(s, ddt_entries);
	dd_sha256_sw(data + 5 * 4 * KiB, 4 * KiB, key.dk_hash);
	poke_refcnt(s, &key, 0);

	assert_int_equal(dd_store_gc(s, NULL, NULL), DD_ECORRUPT);
	assert_non_null(strstr(dd_store_errmsg(s), "counts no reference"));
	assert_int_equal(STAT(s, ddt_entries), before);   /* none dropped */
	th_check_image(s, "keep", data, n);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), DD_ECORRUPT);
	dd_store_close(s);
	free(data);
	th_rm_store(path);
}

/* A block map damaged so that the catalog agrees with itself: snapshot
 * "b"'s map now names "a"'s blocks and b's own blocks count no reference
 * (as a rewritten map and counts would).  gc, which frees what counts no
 * reference, must first find the maps unlike the manifests and stop:
 * b stays readable after a repair. */
static void test_gc_refuses_map_unlike_manifest(void **state)
{
	const size_t n = 32 * KiB, bs = 4 * KiB;
	char *path = th_tmp_store();
	dd_store *s = create(path, bs, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256);
	uint8_t *a = malloc(n), *b = malloc(n);
	dd_snap_rec rec;
	dd_txn *txn;
	dd_err err;
	uint64_t before;

	(void)state;
	th_rng_state = 19;
	fill_random(a, n);
	fill_random(b, n);
	assert_int_equal(th_put(s, "a", a, n, n), 0);
	assert_int_equal(th_put(s, "b", b, n, n), 0);
	before = STAT(s, pack_bytes);
	assert_int_equal(dd_txn_begin(s->st_db, &err, true, &txn), 0);
	assert_int_equal(dd_snap_get(txn, &err, "b", &rec), 0);
	assert_int_equal(dd_snap_drop_refs(txn, &err, rec.sr_id), 0);
	for (size_t i = 0; i < n / bs; i++) {
		dd_ddt_key key = {.dk_variant = 0};
		dd_ddt_ent ent;

		dd_sha256_sw(a + i * bs, bs, key.dk_hash);
		assert_int_equal(dd_ddt_get(txn, &err, &key, &ent), 0);
		ent.de_refcnt++;
		assert_int_equal(dd_ddt_put(txn, &err, &key, &ent), 0);
		assert_int_equal(dd_bmap_append(txn, &err, rec.sr_id, i, 0, &key),
				 0);
	}
	assert_int_equal(dd_txn_commit(txn, &err), 0);

	assert_int_equal(dd_store_gc(s, NULL, NULL), DD_ECORRUPT);
	assert_non_null(strstr(dd_store_errmsg(s), "differs from its manifest"));
	assert_non_null(strstr(dd_store_errmsg(s), "dedup repair"));
	assert_int_equal(STAT(s, pack_bytes), before);   /* nothing freed */
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), DD_ECORRUPT);
	dd_store_close(s);
	assert_int_equal(dd_store_repair(path, NULL, NULL), 0);
	assert_int_equal(dd_store_open(&s, path, NULL), 0);
	th_check_image(s, "a", a, n);
	th_check_image(s, "b", b, n);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	dd_store_close(s);
	free(a);
	free(b);
	th_rm_store(path);
}

/* Scrub counts the block-map entries naming each block and compares the
 * DDT's reference counts: one damaged high (never collected) or low but
 * not 0 (the next rm would bring a live block to 0) is named; repaired,
 * scrub passes. */
static void test_scrub_counts_references(void **state)
{
	const size_t n = 64 * KiB;
	char *path = th_tmp_store();
	dd_store *s = create(path, 4 * KiB, 0, DD_COMPRESS_ZSTD,
			     DD_HASH_SHA256);
	uint8_t *data = malloc(n);
	dd_ddt_key key = {.dk_variant = 0};

	(void)state;
	th_rng_state = 11;
	fill_random(data, n);
	/* every reference counted: the counts scrub compares are the DDT's
	 * (test_uncounted_scrub: the uncounted ones) */
	dd_writer_uncounted = false;
	assert_int_equal(th_put(s, "a", data, n, n), 0);
	assert_int_equal(th_put(s, "b", data, n, n), 0);
	dd_writer_uncounted = true;
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	dd_sha256_sw(data + 3 * 4 * KiB, 4 * KiB, key.dk_hash);
	for (int delta = 1; delta >= -1; delta -= 2) {
		/* a and b name it */
		assert_true(poke_refcnt(s, &key, (uint64_t)(2 + delta)) == 2);
		assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL),
				 DD_ECORRUPT);
		assert_non_null(strstr(dd_store_errmsg(s),
				       "wrong number of references"));
		th_check_image(s, "a", data, n); /* reads are unaffected */
		poke_refcnt(s, &key, 2);
		assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	}
	dd_store_close(s);
	free(data);
	th_rm_store(path);
}

static void test_names_and_misuse(void **state)
{
	char *path = th_tmp_store();
	dd_store *s = create(path, 4 * KiB, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256);
	char longname[300];
	dd_writer *w;
	dd_reader *r;
	size_t got;
	uint8_t b[10];

	(void)state;
	memset(longname, 'n', 256);
	longname[256] = 0;
	assert_int_equal(dd_name_check(longname), DD_ENAME);
	longname[255] = 0;
	assert_int_equal(dd_name_check(longname), 0);
	assert_int_equal(dd_writer_begin(&w, s, "a/b"), DD_ENAME);
	assert_int_equal(dd_writer_begin(&w, s, ".."), DD_ENAME);
	assert_int_equal(dd_writer_begin(&w, s, ""), DD_ENAME);
	assert_int_equal(dd_writer_begin(&w, s, NULL), DD_ENAME);
	assert_int_equal(dd_writer_begin(&w, s, "a\nb"), DD_ENAME);
	assert_int_equal(dd_writer_begin(NULL, s, "a"), DD_EINVAL);
	assert_int_equal(dd_reader_open(&r, s, "missing"), DD_ENOENT);
	assert_non_null(strstr(dd_store_errmsg(s), "missing"));
	assert_int_equal(dd_writer_begin(&w, s, "ok"), 0);
	assert_int_equal(dd_writer_write(w, NULL, 5), DD_EINVAL);
	assert_int_equal(dd_writer_write(w, b, 5), DD_ESTATE);
	dd_writer_free(w);
	assert_int_equal(th_put(s, "ok", b, 0, 1), 0);
	assert_int_equal(dd_reader_open(&r, s, "ok"), 0);
	assert_int_equal(dd_reader_pread(r, b, 10, 0, &got), 0);
	assert_int_equal(got, 0);
	assert_int_equal(dd_reader_pread(r, b, 10, 0, NULL), DD_EINVAL);
	dd_reader_close(r);
	assert_int_equal(dd_snapshot_delete(s, "nope"), DD_ENOENT);
	dd_store_close(s);
	/* creating over a non-empty dir; opening a non-store */
	assert_int_equal(dd_store_create(&s, path, NULL, NULL), DD_EEXIST);
	assert_int_equal(dd_store_open(&s, "/tmp", NULL), DD_ENOENT);
	assert_non_null(strstr(dd_store_errmsg(NULL), "not a libdedup store"));
	dd_create_opts o = DD_CREATE_OPTS_INIT;
	o.block_size = 3000;
	char *p2 = th_tmp_store();
	assert_int_equal(dd_store_create(&s, p2, &o, NULL), DD_EINVAL);
	o.block_size = 2 * MiB;
	assert_int_equal(dd_store_create(&s, p2, &o, NULL), DD_EINVAL);
	th_rm_store(p2);
	th_rm_store(path);
}

/* ---- content-defined blocks (chunker fastcdc) ------------------------------*/

static dd_store *create_cdc(const char *path, uint32_t avg, int verify)
{
	dd_create_opts o = DD_CREATE_OPTS_INIT;
	dd_store *s = NULL;

	o.chunker = DD_CHUNKER_FASTCDC;
	o.block_size = avg;
	o.verify = verify;
	assert_int_equal(dd_store_create(&s, path, &o, NULL), 0);
	return s;
}

/* Random text and random bytes in turn, a run of zeros, a short tail. */
static void fill_cdc_image(uint8_t *p, size_t n)
{
	for (size_t off = 0; off < n; off += 200000) {
		size_t k = n - off < 200000 ? n - off : 200000;

		if ((off / 200000) % 2)
			fill_random(p + off, k);
		else
			fill_text(p + off, k);
	}
	memset(p + 2 * MiB, 0, 700000);
}

/* Reads [off, off + len) of snapshot name and compares it with data. */
static void check_range(dd_reader *r, const uint8_t *data, size_t n,
			uint64_t off, size_t len, uint8_t *buf)
{
	size_t got, want = off >= n ? 0 : n - off < len ? n - off : len;

	assert_int_equal(dd_reader_pread(r, buf, len, off, &got), 0);
	assert_int_equal(got, want);
	if (want && memcmp(buf, data + off, want))
		fail_msg("bytes differ at %llu (+%zu)",
			 (unsigned long long)off, len);
}

/* A store of content-defined blocks: images round-trip through every
 * way of writing; reads at, before and after every block edge, across
 * holes, random and sequential ones; an insertion costs only the blocks
 * around it; the record counts a run of holes once; the store says it is
 * format 3 and fastcdc; and it reopens. */
static void test_cdc_roundtrip(void **state)
{
	const size_t n = 6 * MiB + 4321, ins = 1000, at = MiB + 77;
	char *path = th_tmp_store();
	dd_store *s = create_cdc(path, 16 * KiB, 0);
	uint8_t *a = malloc(n), *b = malloc(n + ins), *buf = malloc(3 * MiB);
	dd_snapshot_info si;
	dd_store_info info;
	dd_cutter c;
	dd_reader *r;
	uint64_t unique_a, off;
	int chunker = -1;

	(void)state;
	th_rng_state = 99;
	fill_cdc_image(a, n);
	assert_int_equal(th_put(s, "a", a, n, 100003), 0);
	th_check_image(s, "a", a, n);
	unique_a = STAT(s, unique_bytes);
	/* b: 1000 bytes inserted into a */
	memcpy(b, a, at);
	fill_random(b + at, ins);
	memcpy(b + at + ins, a + at, n - at);
	assert_int_equal(th_put(s, "b", b, n + ins, 1 << 20), 0);
	th_check_image(s, "b", b, n + ins);
	/* only the blocks around the insertion are new */
	assert_true(STAT(s, unique_bytes) - unique_a < 4 * 64 * KiB);
	assert_int_equal(dd_store_chunker_get(s, &chunker), 0);
	assert_int_equal(chunker, DD_CHUNKER_FASTCDC);
	assert_int_equal(dd_store_info_get(s, &info), 0);
	assert_int_equal(info.format_version, 3);
	assert_int_equal(info.block_size, 16 * KiB);
	/* the record: blocks as cut, the zero blocks one hole */
	assert_int_equal(dd_snapshot_stat(s, "a", &si), 0);
	assert_int_equal(si.zero_blocks, 1);
	dd_cutter_fastcdc(&c, 16 * KiB);
	{
		uint64_t blocks = 0, zeros = 0;
		bool prev_zero = false;

		for (off = 0; off < n;) {
			size_t l = c.cu_next(&c, a + off, n - off, true);
			bool z = true;

			for (size_t i = 0; i < l && z; i++)
				z = a[off + i] == 0;
			blocks += !(z && prev_zero);
			zeros += z && !prev_zero;
			prev_zero = z;
			off += l;
		}
		assert_int_equal(si.blocks, blocks);
		assert_int_equal(zeros, 1);
	}
	/* reads at and around every block edge, short and across blocks */
	assert_int_equal(dd_reader_open(&r, s, "a"), 0);
	for (off = 0; off < n;) {
		size_t l = c.cu_next(&c, a + off, n - off, true);

		for (int d = -2; d <= 2; d++) {
			uint64_t x = off + l + (uint64_t)(int64_t)d;

			if (x > n + 2)
				continue;
			check_range(r, a, n, x, 1, buf);
			check_range(r, a, n, x, 3, buf);
			check_range(r, a, n, x, 70000, buf);
		}
		off += l;
	}
	/* random ranges, some inside the hole, and past the end */
	for (int i = 0; i < 300; i++) {
		uint64_t x = th_rng() % (n + 100);
		size_t len = (size_t)(th_rng() % (i % 3 ? 80000 : 3 * MiB));

		check_range(r, a, n, x, len, buf);
	}
	check_range(r, a, n, 2 * MiB + 100, 1000, buf);   /* in the hole */
	dd_reader_close(r);
	/* sequential reads in odd pieces: the digest check at the end */
	assert_int_equal(dd_reader_open(&r, s, "b"), 0);
	for (off = 0; off < n + ins; off += 77777)
		check_range(r, b, n + ins, off, 77777, buf);
	dd_reader_close(r);
	dd_store_close(s);
	assert_int_equal(dd_store_open(&s, path, NULL), 0);
	th_check_image(s, "b", b, n + ins);
	dd_store_close(s);
	free(buf);
	free(a);
	free(b);
	th_rm_store(path);
}

/* dd_writer_write_file and intermediate commits; verify mode; then rm,
 * gc, scrub and diff, and a repair from the manifests alone. */
static void test_cdc_lifecycle(void **state)
{
	const size_t n = 5 * MiB + 99;
	char *path = th_tmp_store(), file[64] = "/tmp/dd_test_cdc.XXXXXX";
	dd_store *s = create_cdc(path, 8 * KiB, 1);
	uint8_t *a = malloc(n), *c2 = malloc(n);
	dd_writer *w;
	dd_diff *d;
	dd_diff_range rg = {.version = DD_DIFF_RANGE_VERSION};
	dd_scrub_result sr;
	dd_repair_result rr = {.version = DD_REPAIR_RESULT_VERSION};
	th_image imgs[1];
	uint64_t covered = 0;
	int fd;

	(void)state;
	th_rng_state = 5;
	fill_cdc_image(a, n);
	fd = mkstemp(file);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, a, n), (ssize_t)n);
	dd_writer_commit_bytes = MiB; /* several commits */
	assert_int_equal(dd_writer_begin(&w, s, "a"), 0);
	assert_int_equal(dd_writer_write_file(w, fd, 0, n), 0);
	assert_int_equal(dd_writer_commit(w), 0);
	dd_writer_free(w);
	dd_writer_commit_bytes = (uint64_t)512 << 20;
	close(fd);
	unlink(file);
	th_check_image(s, "a", a, n);
	/* c2: 5000 bytes overwritten at 4 MiB, in place */
	memcpy(c2, a, n);
	fill_random(c2 + 4 * MiB, 5000);
	assert_int_equal(th_put(s, "c2", c2, n, 65536), 0);
	assert_int_equal(dd_diff_open(&d, s, "a", "c2"), 0);
	while (dd_diff_next(d, &rg) == 0 && rg.length) {
		/* only where the bytes changed, and the blocks holding them */
		assert_true(rg.offset < 4 * MiB + 5000 &&
			    rg.offset + rg.length > 4 * MiB);
		covered += rg.length;
	}
	assert_true(covered >= 5000 && covered <= 5000 + 4 * 32 * KiB);
	dd_diff_close(d);
	assert_int_equal(dd_snapshot_delete(s, "a"), 0);
	assert_int_equal(dd_store_gc(s, NULL, NULL), 0);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, &sr), 0);
	th_check_image(s, "c2", c2, n);
	dd_store_close(s);
	/* the catalog lost: rebuilt from packs and manifests */
	{
		char db[4200];

		snprintf(db, sizeof(db), "%s/db", path);
		th_rm_rf(db);
	}
	assert_int_equal(dd_store_repair(path, NULL, &rr), 0);
	assert_int_equal(rr.snapshots, 1);
	assert_int_equal(rr.missing_blocks, 0);
	imgs[0] = (th_image){"c2", c2, n};
	th_check_store(path, imgs, 1);
	free(a);
	free(c2);
	th_rm_store(path);
}

/* Asserts that path/DEDUP names format `format` on its second line, and
 * copies its chunker line into out ("" when it has none). */
static void dedup_file_chunker(const char *path, int format, char *out,
			       size_t len)
{
	char f[4200], line[256], want[32];
	FILE *fp;

	snprintf(f, sizeof(f), "%s/DEDUP", path);
	snprintf(want, sizeof(want), "format %d\n", format);
	fp = fopen(f, "r");
	assert_non_null(fp);
	assert_non_null(fgets(line, sizeof(line), fp));
	assert_non_null(fgets(line, sizeof(line), fp));
	assert_string_equal(line, want);
	out[0] = '\0';
	while (fgets(line, sizeof(line), fp))
		if (!strncmp(line, "chunker", 7))
			snprintf(out, len, "%s", line);
	fclose(fp);
}

/* dd_create_opts: a version-1 struct makes a fixed store whatever
 * follows it; a fastcdc average must be 4 KiB to 256 KiB; a store of
 * fixed blocks is format 4 (content digests of version 2 allowed), no
 * chunker in DEDUP. */
static void test_cdc_options(void **state)
{
	char *path = th_tmp_store(), line[256];
	dd_create_opts o = DD_CREATE_OPTS_INIT;
	dd_store *s = NULL;
	int chunker = -1;

	(void)state;
	o.version = 1;
	o.chunker = 77;       /* not a version-1 field: never read */
	assert_int_equal(dd_store_create(&s, path, &o, NULL), 0);
	assert_int_equal(dd_store_chunker_get(s, &chunker), 0);
	assert_int_equal(chunker, DD_CHUNKER_FIXED);
	dd_store_close(s);
	dedup_file_chunker(path, 4, line, sizeof(line));
	assert_string_equal(line, "");
	th_rm_store(path);
	path = th_tmp_store();
	o = (dd_create_opts)DD_CREATE_OPTS_INIT;
	o.chunker = DD_CHUNKER_FASTCDC;
	o.block_size = 512 * KiB;
	assert_int_equal(dd_store_create(&s, path, &o, NULL), DD_EINVAL);
	o.block_size = 2 * KiB;
	assert_int_equal(dd_store_create(&s, path, &o, NULL), DD_EINVAL);
	o.chunker = 2;
	o.block_size = 0;
	assert_int_equal(dd_store_create(&s, path, &o, NULL), DD_EINVAL);
	o.chunker = DD_CHUNKER_FASTCDC;
	assert_int_equal(dd_store_create(&s, path, &o, NULL), 0);
	dd_store_close(s);
	dedup_file_chunker(path, 3, line, sizeof(line));
	assert_string_equal(line, "chunker 1\n");
	th_rm_store(path);
}

static void test_newer_format_refused(void **state)
{
	char *path = th_tmp_store();
	dd_store *s = create(path, 4 * KiB, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256);
	char f[512];
	FILE *fp;

	(void)state;
	dd_store_close(s);
	snprintf(f, sizeof(f), "%s/DEDUP", path);
	fp = fopen(f, "w");
	fprintf(fp, "libdedup store\nformat %d\n", DD_STORE_FORMAT + 1);
	fclose(fp);
	assert_int_equal(dd_store_open(&s, path, NULL), DD_EVERSION);
	assert_non_null(strstr(dd_store_errmsg(NULL), "newer"));
	th_rm_store(path);
}

/* Rewrites the `format` line of path's DEDUP from `from` to `to` (an older
 * build's store, or one from the future). */
static void dedup_file_set_format(const char *path, int from, int to)
{
	char f[4200], want[32], *text = calloc(1, 4096), *at;
	size_t len;
	FILE *fp;

	assert_non_null(text);
	snprintf(f, sizeof(f), "%s/DEDUP", path);
	snprintf(want, sizeof(want), "\nformat %d\n", from);
	fp = fopen(f, "r");
	assert_non_null(fp);
	len = fread(text, 1, 4095, fp);
	fclose(fp);
	at = strstr(text, want);
	assert_non_null(at);
	at[8] = (char)('0' + to);
	fp = fopen(f, "w");
	assert_non_null(fp);
	assert_int_equal(fwrite(text, 1, len, fp), len);
	fclose(fp);
	free(text);
}

/* A store of fixed blocks of format 2 (an older build's) is read as it
 * is, and becomes format 4 at its first put, before the snapshot -- of
 * content digest version 2 -- is written; its options stay. */
static void test_format2_upgraded_at_put(void **state)
{
	char *path = th_tmp_store(), line[256];
	dd_store *s = create(path, 4 * KiB, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256);
	dd_store_info info;
	uint8_t *a = malloc(64 * KiB);

	(void)state;
	dd_store_close(s);
	dedup_file_set_format(path, 4, 2);
	assert_int_equal(dd_store_open(&s, path, NULL), 0);
	assert_int_equal(dd_store_info_get(s, &info), 0);
	assert_int_equal(info.format_version, 2);
	fill_random(a, 64 * KiB);
	memset(a + 8 * KiB, 0, 16 * KiB);   /* a run of holes */
	assert_int_equal(th_put(s, "a", a, 64 * KiB, 4 * KiB), 0);
	assert_int_equal(dd_store_info_get(s, &info), 0);
	assert_int_equal(info.format_version, 4);
	dd_store_close(s);
	dedup_file_chunker(path, 4, line, sizeof(line));
	assert_string_equal(line, "");
	assert_int_equal(dd_store_open(&s, path, NULL), 0);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	dd_store_close(s);
	free(a);
	th_rm_store(path);
}

/* ---- gc and scrub -------------------------------------------------------*/

static void test_gc_reclaims_and_compacts(void **state)
{
	const size_t n = 8 * MiB;
	char *path = th_tmp_store();
	dd_store *s = create(path, 4 * KiB, 0, DD_COMPRESS_NONE, DD_HASH_SHA256);
	uint8_t *a = malloc(n), *b = malloc(n);
	dd_gc_result res;

	(void)state;
	th_rng_state = 77;
	fill_random(a, n);
	memcpy(b, a, n);
	fill_random(b, n / 2); /* b shares its second half with a */
	assert_int_equal(th_put(s, "a", a, n, MiB), 0);
	assert_int_equal(th_put(s, "b", b, n, MiB), 0);
	uint64_t before = STAT(s, pack_bytes);
	assert_int_equal(dd_snapshot_delete(s, "a"), 0);
	assert_int_equal(STAT(s, unreferenced_blocks), n / 2 / (4 * KiB));
	assert_int_equal(dd_store_gc(s, NULL, &res), 0);
	assert_int_equal(res.ddt_entries_removed, n / 2 / (4 * KiB));
	assert_true(res.bytes_reclaimed > n / 3);
	assert_true(STAT(s, pack_bytes) < before - n / 3);
	assert_int_equal(STAT(s, unreferenced_blocks), 0);
	assert_int_equal(STAT(s, ddt_entries), n / (4 * KiB));
	/* compacted: well under 100 bytes per entry */
	assert_true(STAT(s, ddt_bytes) / STAT(s, ddt_entries) <= 100);
	th_check_image(s, "b", b, n);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	/* new writes after gc append fine */
	assert_int_equal(th_put(s, "a2", a, n, MiB), 0);
	th_check_image(s, "a2", a, n);
	dd_store_close(s);
	free(a);
	free(b);
	th_rm_store(path);
}

/* Progress as a meter sees it: calls, the last figures, order kept. */
struct meter {
	uint64_t calls, done, total;
	uint64_t stop_after;      /* a non-zero return at this call (0: never) */
};

static int meter_cb(void *ctx, uint64_t done, uint64_t total)
{
	struct meter *m = ctx;

	assert_true(done >= m->done);   /* never backwards */
	assert_true(done <= total);
	m->calls++;
	m->done = done;
	m->total = total;
	return m->stop_after && m->calls == m->stop_after;
}

/* gc and scrub report progress to the end (done == total), and stop
 * cleanly when it says so: gc then leaves the store as it was. */
static void test_gc_scrub_progress(void **state)
{
	const size_t n = 4 * MiB;
	char *path = th_tmp_store();
	dd_store *s = create(path, 4 * KiB, 0, DD_COMPRESS_NONE, DD_HASH_SHA256);
	uint8_t *a = malloc(n), *b = malloc(n);
	dd_gc_opts go = DD_GC_OPTS_INIT;
	dd_scrub_opts so = DD_SCRUB_OPTS_INIT;
	struct meter m = {0};
	dd_scrub_result sr;
	dd_gc_result res;
	uint64_t before;

	(void)state;
	th_rng_state = 78;
	fill_random(a, n);
	memcpy(b, a, n);
	fill_random(b, n / 4);   /* b keeps 3/4 of a: the pack is rewritten */
	assert_int_equal(th_put(s, "a", a, n, MiB), 0);
	assert_int_equal(th_put(s, "b", b, n, MiB), 0);

	so.progress = meter_cb;
	so.progress_ctx = &m;
	assert_int_equal(dd_store_scrub_ext(s, &so, &sr), 0);
	assert_true(m.calls >= 2);
	assert_true(m.total >= (n + n / 4));  /* the packs' bytes */
	assert_int_equal(m.done, m.total);
	memset(&m, 0, sizeof(m));
	m.stop_after = 2;
	assert_int_equal(dd_store_scrub_ext(s, &so, &sr), DD_ECANCELED);
	assert_non_null(strstr(dd_store_errmsg(s), "DD_ECANCELED"));
	so.version = 99;
	assert_int_equal(dd_store_scrub_ext(s, &so, &sr), DD_EINVAL);

	assert_int_equal(dd_snapshot_delete(s, "a"), 0);
	before = STAT(s, pack_bytes);
	go.rewrite_below = 1.0;
	go.progress = meter_cb;
	go.progress_ctx = &m;
	memset(&m, 0, sizeof(m));
	m.stop_after = 3;
	assert_int_equal(dd_store_gc(s, &go, &res), DD_ECANCELED);
	assert_int_equal(STAT(s, pack_bytes), before);   /* unchanged */
	th_check_image(s, "b", b, n);
	memset(&m, 0, sizeof(m));
	assert_int_equal(dd_store_gc(s, &go, &res), 0);
	assert_true(res.blocks_moved > 0);
	assert_true(m.calls >= 2);
	assert_true(m.total >= res.blocks_moved * 4 * KiB);
	assert_int_equal(m.done, m.total);
	th_check_image(s, "b", b, n);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	dd_store_close(s);
	free(a);
	free(b);
	th_rm_store(path);
}

/* A writer's progress: after each batch, to the image's size at commit;
 * a callback that says stop cancels it and nothing becomes visible;
 * dd_writer_write_file reports as it reads. */
static void test_writer_progress(void **state)
{
	const size_t n = 13 * MiB + 1234;
	char *path = th_tmp_store();
	dd_store *s = create(path, 64 * KiB, 0, DD_COMPRESS_NONE, DD_HASH_SHA256);
	uint8_t *a = malloc(n);
	dd_writer_opts wo = DD_WRITER_OPTS_INIT;
	struct meter m = {0};
	dd_snapshot_info si;
	dd_writer *w;
	char tmp[] = "/tmp/dd-test-wf-XXXXXX";
	int fd;

	(void)state;
	th_rng_state = 79;
	fill_random(a, n);
	memset(a + 5 * MiB, 0, 2 * MiB);   /* holes count as bytes done */
	wo.progress = meter_cb;
	wo.progress_ctx = &m;
	wo.progress_total = n;
	assert_int_equal(dd_writer_begin_opts(&w, s, "p", &wo), 0);
	assert_int_equal(dd_writer_write(w, a, n), 0);
	assert_true(m.calls >= 1);           /* while writing, not at the end */
	assert_true(m.done < n);
	assert_int_equal(dd_writer_commit(w), 0);
	assert_int_equal(m.done, n);
	assert_int_equal(m.total, n);
	assert_true(m.calls >= 3);
	dd_writer_free(w);
	th_check_image(s, "p", a, n);

	/* the callback stops it: the call fails, nothing is visible */
	memset(&m, 0, sizeof(m));
	m.stop_after = 1;   /* the first report comes inside the write */
	assert_int_equal(dd_writer_begin_opts(&w, s, "stopped", &wo), 0);
	assert_int_equal(dd_writer_write(w, a, n), DD_ECANCELED);
	assert_non_null(strstr(dd_writer_errmsg(w), "DD_ECANCELED"));
	assert_int_equal(dd_writer_commit(w), DD_ESTATE);
	dd_writer_free(w);
	assert_int_equal(dd_snapshot_stat(s, "stopped", &si), DD_ENOENT);

	/* a file: progress while dd_writer_write_file reads it */
	fd = mkstemp(tmp);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, a, n), (ssize_t)n);
	memset(&m, 0, sizeof(m));
	assert_int_equal(dd_writer_begin_opts(&w, s, "f", &wo), 0);
	assert_int_equal(dd_writer_write_file(w, fd, 0, n), 0);
	assert_true(m.calls >= 1);
	assert_true(m.done >= n - 3 * 4 * MiB); /* read as it went */
	assert_int_equal(dd_writer_commit(w), 0);
	assert_int_equal(m.done, n);
	dd_writer_free(w);
	close(fd);
	unlink(tmp);
	th_check_image(s, "f", a, n);

	wo.version = 99;
	assert_int_equal(dd_writer_begin_opts(&w, s, "v", &wo), DD_EINVAL);
	assert_int_equal(dd_writer_begin_opts(&w, s, "v", NULL), 0);
	dd_writer_free(w);
	dd_store_close(s);
	free(a);
	th_rm_store(path);
}

/* dd_writer_cancel from another thread: a writer writing without end
 * stops within one batch (4 MiB) of its bytes after the cancel. */
struct cancel_run {
	dd_writer *w;
	const uint8_t *chunk;
	_Atomic uint64_t written;  /* bytes the writer accepted */
	int rc;
};

static void *cancel_writer_thread(void *arg)
{
	struct cancel_run *r = arg;

	for (;;) {
		r->rc = dd_writer_write(r->w, r->chunk, 256 * KiB);
		if (r->rc)
			return NULL;
		atomic_fetch_add(&r->written, 256 * KiB);
	}
}

static void test_writer_cancel_thread(void **state)
{
	char *path = th_tmp_store();
	dd_store *s = create(path, 64 * KiB, 0, DD_COMPRESS_NONE, DD_HASH_SHA256);
	uint8_t *chunk = malloc(256 * KiB);
	struct cancel_run r = {0};
	dd_snapshot_info si;
	uint64_t at_cancel;
	pthread_t tid;

	(void)state;
	th_rng_state = 80;
	fill_random(chunk, 256 * KiB);  /* the same chunk: dedups, fast */
	r.chunk = chunk;
	assert_int_equal(dd_writer_begin(&r.w, s, "endless"), 0);
	assert_int_equal(pthread_create(&tid, NULL, cancel_writer_thread, &r),
			 0);
	while (atomic_load(&r.written) < 5 * MiB)
		usleep(1000);
	at_cancel = atomic_load(&r.written);
	dd_writer_cancel(r.w);
	assert_int_equal(pthread_join(tid, NULL), 0);
	assert_int_equal(r.rc, DD_ECANCELED);
	/* the write in flight at the cancel, then at most one batch more */
	assert_true(atomic_load(&r.written) <= at_cancel + 256 * KiB + 4 * MiB);
	dd_writer_cancel(r.w);             /* again: harmless */
	dd_writer_free(r.w);
	assert_int_equal(dd_snapshot_stat(s, "endless", &si), DD_ENOENT);
	dd_writer_cancel(NULL);
	/* the store goes on */
	assert_int_equal(th_put(s, "after", chunk, 256 * KiB, 64 * KiB), 0);
	th_check_image(s, "after", chunk, 256 * KiB);
	dd_store_close(s);
	free(chunk);
	th_rm_store(path);
}

struct bad_seen {
	int n;
	char snap[64];
	uint64_t offset;
};

static int scrub_cb(const dd_scrub_bad *bad, void *ctx)
{
	struct bad_seen *bs = ctx;

	bs->n++;
	if (bad->snapshot)
		snprintf(bs->snap, sizeof(bs->snap), "%s", bad->snapshot);
	bs->offset = bad->offset;
	assert_int_equal(bad->error, DD_ECHECKSUM);
	return 0;
}

/* Flips one payload byte of block `blk` of a 4 KiB, uncompressed image
 * stored whole in pack `pack` (header 64, then 64 + 4096 per block). */
static void flip_block(const char *path, unsigned pack, unsigned blk)
{
	char pf[512];
	off_t at = 64 + (off_t)blk * (64 + 4096) + 64 + 100;
	uint8_t x;
	int fd;

	snprintf(pf, sizeof(pf), "%s/packs/%08x.pack", path, pack);
	fd = open(pf, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &x, 1, at), 1);
	x ^= 0x40;
	assert_int_equal(pwrite(fd, &x, 1, at), 1);
	close(fd);
}

/* A 4 KiB store at path holding snapshot "a" of n random bytes (seed),
 * its block 5 damaged on disk; opened again. */
static dd_store *store_damaged(const char *path, uint8_t *a, size_t n,
			       uint64_t seed)
{
	dd_store *s = create(path, 4 * KiB, 0, DD_COMPRESS_NONE, DD_HASH_SHA256);

	th_rng_state = seed;
	fill_random(a, n);
	assert_int_equal(th_put(s, "a", a, n, n), 0);
	dd_store_close(s);
	flip_block(path, 1, 5);
	assert_int_equal(dd_store_open(&s, path, NULL), 0);
	return s;
}

static void test_damage_detected(void **state)
{
	const size_t n = 64 * KiB;
	char *path = th_tmp_store();
	uint8_t *a = malloc(n), buf[64 * KiB];
	dd_store *s = store_damaged(path, a, n, 3);
	struct bad_seen seen = {0};
	dd_reader *r;
	size_t got;

	(void)state;
	assert_int_equal(dd_reader_open(&r, s, "a"), 0);
	assert_int_equal(dd_reader_pread(r, buf, n, 0, &got), DD_ECHECKSUM);
	assert_int_equal(got, 0);
	assert_non_null(strstr(dd_reader_errmsg(r), "pack 1"));
	/* blocks around it still read */
	assert_int_equal(dd_reader_pread(r, buf, 4096, 4 * 4096, &got), 0);
	assert_memory_equal(buf, a + 4 * 4096, 4096);
	dd_reader_close(r);
	assert_int_equal(dd_store_scrub(s, scrub_cb, &seen, NULL), DD_ECHECKSUM);
	assert_int_equal(seen.n, 1);
	assert_string_equal(seen.snap, "a");
	assert_int_equal(seen.offset, 5 * 4096);
	dd_store_close(s);
	free(a);
	th_rm_store(path);
}

/* What a salvaging read reported: the last report, and the first four
 * one by one. */
struct salvaged {
	int n;
	uint64_t off, len;
	int error;
	uint64_t offs[4], lens[4];
	int errors[4];
};

static int salvage_cb(void *ctx, uint64_t off, uint64_t len, int error,
		      const char *msg)
{
	struct salvaged *sv = ctx;

	if (sv->n < 4) {
		sv->offs[sv->n] = off;
		sv->lens[sv->n] = len;
		sv->errors[sv->n] = error;
	}
	sv->n++;
	sv->off = off;
	sv->len = len;
	sv->error = error;
	assert_non_null(strstr(msg, "DD_ECHECKSUM"));
	return 0;
}

/* dd_reader_pread_salvage: the damaged block reads as zeros and is
 * reported with the part of the range it covers; every other byte is the
 * image's; a callback that says stop stops the read. */
static void test_reader_salvage(void **state)
{
	const size_t n = 64 * KiB;
	char *path = th_tmp_store();
	uint8_t *a = malloc(n), *want = malloc(n), buf[64 * KiB];
	dd_store *s = store_damaged(path, a, n, 5);
	struct salvaged sv = {0};
	dd_reader *r;
	size_t got;

	(void)state;
	memcpy(want, a, n);
	memset(want + 5 * 4096, 0, 4096);
	assert_int_equal(dd_reader_open(&r, s, "a"), 0);
	assert_int_equal(dd_reader_pread_salvage(r, buf, n, 0, &got,
						 salvage_cb, &sv), 0);
	assert_int_equal(got, n);
	assert_memory_equal(buf, want, n);
	assert_int_equal(sv.n, 1);
	assert_int_equal(sv.off, 5 * 4096);
	assert_int_equal(sv.len, 4096);
	assert_int_equal(sv.error, DD_ECHECKSUM);
	/* a range that begins inside the damaged block */
	memset(&sv, 0, sizeof(sv));
	assert_int_equal(dd_reader_pread_salvage(r, buf, 5000, 5 * 4096 + 100,
						 &got, salvage_cb, &sv), 0);
	assert_int_equal(got, 5000);
	assert_memory_equal(buf, want + 5 * 4096 + 100, 5000);
	assert_int_equal(sv.n, 1);
	assert_int_equal(sv.off, 5 * 4096 + 100);
	assert_int_equal(sv.len, 3996);
	/* the plain read still fails; no callback is misuse */
	assert_int_equal(dd_reader_pread(r, buf, n, 0, &got), DD_ECHECKSUM);
	assert_int_equal(dd_reader_pread_salvage(r, buf, n, 0, &got, NULL,
						 NULL), DD_EINVAL);
	dd_reader_close(r);
	dd_store_close(s);
	free(a);
	free(want);
	th_rm_store(path);
}

/* A read of 64 blocks: each pool item hashes its blocks as one list
 * (sixteen where the AVX-512 lanes are, which main() asks for), and two
 * damaged blocks in different lists fail on their own -- each reported
 * and zeroed under salvage, every other block's bytes the image's. */
static void test_reader_lists(void **state)
{
	const size_t n = 64 * 4096;
	char *path = th_tmp_store();
	uint8_t *a = malloc(n), *want = malloc(n), *buf = malloc(n);
	dd_store *s = store_damaged(path, a, n, 9);
	struct salvaged sv = {0};
	dd_reader *r;
	size_t got;

	(void)state;
	dd_store_close(s);
	flip_block(path, 1, 40);
	assert_int_equal(dd_store_open(&s, path, NULL), 0);
	memcpy(want, a, n);
	memset(want + 5 * 4096, 0, 4096);
	memset(want + 40 * 4096, 0, 4096);
	assert_int_equal(dd_reader_open(&r, s, "a"), 0);
	assert_int_equal(dd_reader_pread_salvage(r, buf, n, 0, &got,
						 salvage_cb, &sv), 0);
	assert_int_equal(got, n);
	assert_memory_equal(buf, want, n);
	assert_int_equal(sv.n, 2);
	assert_int_equal(sv.offs[0], 5 * 4096);
	assert_int_equal(sv.offs[1], 40 * 4096);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(sv.lens[i], 4096);
		assert_int_equal(sv.errors[i], DD_ECHECKSUM);
	}
	assert_int_equal(dd_reader_pread(r, buf, n, 0, &got), DD_ECHECKSUM);
	/* the lists without a damaged block read */
	assert_int_equal(dd_reader_pread(r, buf, 32 * 4096, 8 * 4096, &got),
			 0);
	assert_memory_equal(buf, a + 8 * 4096, 32 * 4096);
	dd_reader_close(r);
	dd_store_close(s);
	free(a);
	free(want);
	free(buf);
	th_rm_store(path);
}

/* The DDT entry of the 4 KiB block at data. */
static dd_ddt_ent block_ent(dd_store *s, const uint8_t *data)
{
	dd_ddt_key key = {.dk_variant = 0};
	dd_ddt_ent ent;
	dd_txn *txn;
	dd_err err;

	dd_sha256(data, 4096, key.dk_hash);
	assert_int_equal(dd_txn_begin(s->st_db, &err, false, &txn), 0);
	assert_int_equal(dd_ddt_get(txn, &err, &key, &ent), 0);
	dd_txn_abort(txn);
	return ent;
}

/* Every reference to the block of data: those its DDT entry counts, and
 * uncounted block-map positions that name it (catalog/ucnt.h). */
static uint64_t block_refs(dd_store *s, const uint8_t *data)
{
	dd_ddt_key key = {.dk_variant = 0};
	dd_ddt_ent ent = block_ent(s, data);
	dd_hmap *extra = NULL;
	uint64_t n = 0;
	dd_txn *txn;
	dd_err err;

	dd_sha256(data, 4096, key.dk_hash);
	assert_int_equal(dd_txn_begin(s->st_db, &err, false, &txn), 0);
	assert_int_equal(dd_ucnt_extra(txn, &err, &extra), 0);
	assert_int_equal(dd_ucnt_extra_get(extra, &err, &key, &n), 0);
	dd_hmap_free(extra);
	dd_txn_abort(txn);
	return ent.de_refcnt + n;
}

/* Healing (format/ddt.md §3): scrub flags the entry of a damaged record
 * DAMAGED; a put of the same data stores a fresh copy, the entry points
 * at it, and the snapshot that used the damaged record reads again.  A
 * dead entry (after rm, before gc) is never revived with its record, so
 * a record damaged while nothing used it does not come back.  A flag on
 * a record that reads well is cleared by scrub. */
static void test_scrub_marks_put_heals(void **state)
{
	const size_t n = 64 * KiB;
	char *path = th_tmp_store();
	uint8_t *a = malloc(n);
	dd_store *s = store_damaged(path, a, n, 21);
	struct bad_seen seen = {0};
	dd_ddt_ent e, e2;
	dd_txn *txn;
	dd_err err;

	(void)state;
	e = block_ent(s, a + 5 * 4096);
	assert_int_equal(e.de_flags, 0);
	assert_int_equal(dd_store_scrub(s, scrub_cb, &seen, NULL), DD_ECHECKSUM);
	assert_int_equal(seen.n, 1);
	e2 = block_ent(s, a + 5 * 4096);
	assert_int_equal(e2.de_flags, DD_DDE_DAMAGED);
	assert_int_equal(e2.de_pack, e.de_pack);
	assert_int_equal(e2.de_offset, e.de_offset);
	assert_int_equal(e2.de_refcnt, 1);
	/* only that one */
	assert_int_equal(block_ent(s, a + 4 * 4096).de_flags, 0);

	/* a put of the same bytes heals it: both snapshots read exact */
	assert_int_equal(th_put(s, "b", a, n, n), 0);
	e2 = block_ent(s, a + 5 * 4096);
	assert_int_equal(e2.de_flags, 0);
	assert_int_equal(e2.de_refcnt, 2);
	assert_true(e2.de_pack != e.de_pack || e2.de_offset != e.de_offset);
	th_check_image(s, "a", a, n);
	th_check_image(s, "b", a, n);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);

	/* dead entries: both snapshots removed, a record damaged since;
	 * the next put stores fresh copies and reads exact */
	assert_int_equal(dd_snapshot_delete(s, "a"), 0);
	assert_int_equal(dd_snapshot_delete(s, "b"), 0);
	dd_store_close(s);
	flip_block(path, 1, 9);
	assert_int_equal(dd_store_open(&s, path, NULL), 0);
	e = block_ent(s, a + 9 * 4096);
	assert_int_equal(e.de_refcnt, 0);
	assert_int_equal(th_put(s, "c", a, n, n), 0);
	e2 = block_ent(s, a + 9 * 4096);
	assert_int_equal(e2.de_refcnt, 1);
	assert_true(e2.de_pack != e.de_pack || e2.de_offset != e.de_offset);
	th_check_image(s, "c", a, n);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);

	/* a flag on a record that reads well: scrub clears it */
	e = block_ent(s, a + 2 * 4096);
	e.de_flags = DD_DDE_DAMAGED;
	{
		dd_ddt_key key = {.dk_variant = 0};

		dd_sha256(a + 2 * 4096, 4096, key.dk_hash);
		assert_int_equal(dd_txn_begin(s->st_db, &err, true, &txn), 0);
		assert_int_equal(dd_ddt_put(txn, &err, &key, &e), 0);
		assert_int_equal(dd_txn_commit(txn, &err), 0);
	}
	th_check_image(s, "c", a, n);   /* a read tries the record anyway */
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	assert_int_equal(block_ent(s, a + 2 * 4096).de_flags, 0);
	dd_store_close(s);
	free(a);
	th_rm_store(path);
}

/* ---- injected faults -----------------------------------------------------*/

/* The Nth write or sync fails (ENOSPC / EIO): the put fails cleanly, the
 * store still opens and scrubs, and the committed snapshot is exact.  N
 * walks forward until the put succeeds. */
static void test_fault_walk(void **state)
{
	const size_t n = 512 * KiB;
	static const int classes[] = {DD_FAULT_WRITE, DD_FAULT_SYNC,
				      DD_FAULT_ALLOC};
	char *path = th_tmp_store();
	dd_store *s = create(path, 4 * KiB, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256);
	uint8_t *a = malloc(n), *b = malloc(n);

	(void)state;
	th_rng_state = 11;
	fill_text(a, n);
	fill_random(b, n);
	assert_int_equal(th_put(s, "a", a, n, 100000), 0);
	for (size_t c = 0; c < 3; c++) {
		int failures = 0;
		char name[16];

		snprintf(name, sizeof(name), "b%zu", c);
		for (uint64_t k = 1; k < 5000; k++) {
			int rc;

			dd_fault_arm(classes[c], k,
				     classes[c] == DD_FAULT_ALLOC ? ENOMEM
				     : k % 2 ? ENOSPC : EIO, 0);
			rc = th_put(s, name, b, n, 100000);
			dd_fault_disarm_all();
			if (rc == 0)
				break;
			failures++;
			assert_true(rc == DD_ENOSPC || rc == DD_EIO ||
				    rc == DD_ENOMEM);
			dd_snapshot_info info;
			assert_int_equal(dd_snapshot_stat(s, name, &info),
					 DD_ENOENT);
			th_check_image(s, "a", a, n);
		}
		assert_true(failures > 0);
		th_check_image(s, name, b, n);
		assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	}
	dd_store_close(s);
	assert_int_equal(dd_store_open(&s, path, NULL), 0);
	assert_int_equal(dd_store_gc(s, NULL, NULL), 0);
	assert_int_equal(STAT(s, unreferenced_blocks), 0);
	th_check_image(s, "a", a, n);
	th_check_image(s, "b2", b, n);
	dd_store_close(s);
	free(a);
	free(b);
	th_rm_store(path);
}

/* The fault classes every walk below goes through. */
static const int all_faults[] = {DD_FAULT_ALLOC, DD_FAULT_READ,
				 DD_FAULT_WRITE, DD_FAULT_SYNC,
				 DD_FAULT_RENAME, DD_FAULT_OPEN};

/* gc under injected faults: a store whose pack is partly dead (snapshot
 * "a" deleted, "b" and "c" kept) is copied from a template before the
 * walk; each step runs gc with rewrite_below = 1, so the pack is rewritten
 * and the DDT compacted.  After a failure: a clean error, the store opens,
 * scrub passes, "b" and "c" read back exact, and nothing was reclaimed
 * (gc is all or nothing).  A gc that finds no room for its copy punches
 * the dead records out instead and succeeds.  The last step's gc must
 * reclaim everything. */
typedef struct gc_walk {
	th_tmpl st;               /* first: th_tmpl_walk_reset */
	th_image imgs[2];
	uint64_t unref;            /* unreferenced blocks before gc */
	dd_gc_result res;
} gc_walk;

static int gc_walk_op(void *ctx)
{
	gc_walk *g = ctx;
	dd_gc_opts o = DD_GC_OPTS_INIT;

	o.rewrite_below = 1.0;
	memset(&g->res, 0, sizeof(g->res));
	return dd_store_gc(g->st.s, &o, &g->res);
}

static void gc_walk_after(void *ctx, int rc)
{
	gc_walk *g = ctx;

	if (rc)
		th_check_errmsg(dd_store_errmsg(g->st.s), rc);
	th_tmpl_check(&g->st, g->imgs, 2);
	if (rc) {
		assert_int_equal(STAT(g->st.s, unreferenced_blocks), g->unref);
		return;
	}
	assert_int_equal(STAT(g->st.s, unreferenced_blocks), 0);
	assert_int_equal(g->res.ddt_entries_removed, g->unref);
	if (g->res.packs_rewritten == 0) {
		/* no room for the copy (an injected DD_ENOSPC on a write of
		 * the new pack): the pack stays and its dead records are
		 * punched out instead (format/pack.md §6.1) */
		assert_int_equal(g->res.blocks_moved, 0);
		assert_true(g->res.bytes_reclaimed > 0);
		return;
	}
	assert_int_equal(g->res.packs_rewritten, 1);
	assert_true(g->res.blocks_moved > 0);
}

static void test_fault_walk_gc(void **state)
{
	const size_t n = 256 * KiB;
	uint8_t *a = malloc(n), *b = malloc(n), *c = malloc(n / 4);
	char *tmpl = th_tmp_store();
	dd_store *s = create(tmpl, 4 * KiB, 0, DD_COMPRESS_ZSTD,
			     DD_HASH_SHA256);
	gc_walk g = {.imgs = {{"b", b, n}, {"c", c, n / 4}}};
	th_walk w = {.what = "gc", .classes = all_faults,
		     .nclasses = sizeof(all_faults) / sizeof(all_faults[0]),
		     .max_steps = 5000, .ctx = &g, .reset = th_tmpl_walk_reset,
		     .op = gc_walk_op, .after = gc_walk_after};

	(void)state;
	th_rng_state = 21;
	fill_random(a, n / 2);
	fill_text(a + n / 2, n / 2);
	memcpy(b, a, n);
	fill_random(b, n / 4);       /* b shares its last 3/4 with a */
	memset(b + n / 4, 0, 8 * KiB);
	fill_random(c, n / 4);
	assert_int_equal(th_put(s, "a", a, n, 50000), 0);
	assert_int_equal(th_put(s, "b", b, n, 50000), 0);
	assert_int_equal(th_put(s, "c", c, n / 4, 50000), 0);
	assert_int_equal(dd_snapshot_delete(s, "a"), 0);
	g.unref = STAT(s, unreferenced_blocks);
	/* a's blocks that b overwrote: n / 4 random, then two zero blocks */
	assert_int_equal(g.unref, n / 4 / (4 * KiB) + 2);
	dd_store_close(s);
	th_tmpl_init(&g.st, tmpl);
	assert_true(th_fault_walk(&w) > 0);
	th_tmpl_fini(&g.st);
	free(a);
	free(b);
	free(c);
}

/* repair under injected faults of every class, from a catalog of random
 * bytes (so that the new one is exchanged with it): a failure is a clean
 * error that leaves either the old catalog, byte for byte, or the whole
 * new one; and a repair without faults then succeeds.  With verify, so
 * that every payload is read and hashed as well. */
typedef struct repair_walk {
	char *tmpl;               /* a th_tmp_store path: the template */
	char work[4200];
	char garbage[4200];       /* the damaged catalog's bytes */
	th_image imgs[2];
} repair_walk;

static void repair_walk_reset(void *ctx)
{
	repair_walk *r = ctx;

	th_copy_tree(r->tmpl, r->work);
}

static int repair_walk_op(void *ctx)
{
	repair_walk *r = ctx;
	dd_repair_opts o = DD_REPAIR_OPTS_INIT;
	dd_repair_result res = {.version = DD_REPAIR_RESULT_VERSION};
	int rc;

	o.verify = 1;
	rc = dd_store_repair(r->work, &o, &res);
	if (rc == 0) {
		assert_int_equal(res.snapshots, 2);
		assert_int_equal(res.incomplete_snapshots, 0);
		assert_int_equal(res.damaged_records, 0);
	}
	return rc;
}

static bool same_file(const char *a, const char *b)
{
	char cmd[9000];

	snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", a, b);
	return system(cmd) == 0;
}

static void repair_walk_after(void *ctx, int rc)
{
	repair_walk *r = ctx;
	char db[4300];
	dd_repair_opts o = DD_REPAIR_OPTS_INIT;

	snprintf(db, sizeof(db), "%s/db/data.mdb", r->work);
	if (rc) {
		th_check_errmsg(dd_last_errmsg(), rc);
		/* before the exchange: the old catalog as it was */
		if (same_file(db, r->garbage)) {
			assert_int_equal(dd_store_repair(r->work, &o, NULL), 0);
		}
	}
	th_check_store(r->work, r->imgs, 2);
}

static void test_fault_walk_repair(void **state)
{
	const size_t n = 192 * KiB;
	uint8_t *a = malloc(n), *b = malloc(n);
	repair_walk r = {.imgs = {{"a", a, n}, {"b", b, n}}};
	th_walk w = {.what = "repair", .classes = all_faults,
		     .nclasses = sizeof(all_faults) / sizeof(all_faults[0]),
		     .max_steps = 5000, .ctx = &r, .reset = repair_walk_reset,
		     .reset_every_step = true, .op = repair_walk_op,
		     .after = repair_walk_after};
	dd_store *s;
	char cmd[9000];

	(void)state;
	r.tmpl = th_tmp_store();
	s = create(r.tmpl, 4 * KiB, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256);
	th_rng_state = 23;
	fill_random(a, n / 2);
	fill_text(a + n / 2, n / 2);
	memcpy(b, a, n);
	fill_random(b, n / 4);
	memset(b + n / 4, 0, 8 * KiB);
	assert_int_equal(th_put(s, "a", a, n, 50000), 0);
	assert_int_equal(th_put(s, "b", b, n, 50000), 0);
	dd_store_close(s);
	snprintf(r.work, sizeof(r.work), "%s.work", r.tmpl);
	snprintf(r.garbage, sizeof(r.garbage), "%s.garbage", r.tmpl);
	snprintf(cmd, sizeof(cmd), "head -c $(stat -c %%s '%s/db/data.mdb') "
		 "/dev/urandom > '%s' && cp '%s' '%s/db/data.mdb'", r.tmpl,
		 r.garbage, r.garbage, r.tmpl);
	assert_int_equal(system(cmd), 0);
	assert_true(th_fault_walk(&w) > 0);
	th_rm_store(r.tmpl);   /* work and garbage are beside it */
	free(a);
	free(b);
}

/* put under injected faults of every class, in verify mode (a hash match
 * reads the stored block to compare) and with intermediate commits: a
 * failure is a clean error, leaves no snapshot, the store opens, scrub
 * passes and "a" reads back exact. */
typedef struct put_walk {
	char *path;
	dd_store *s;
	th_image imgs[2];
} put_walk;

static int put_walk_op(void *ctx)
{
	put_walk *p = ctx;

	return th_put(p->s, p->imgs[1].name, p->imgs[1].data, p->imgs[1].size,
		      100000);
}

/* Back to "a" alone, its blocks only in the DDT. */
static void put_walk_reset(void *ctx)
{
	put_walk *p = ctx;
	int rc = dd_snapshot_delete(p->s, p->imgs[1].name);

	assert_true(rc == 0 || rc == DD_ENOENT);
	assert_int_equal(dd_store_gc(p->s, NULL, NULL), 0);
	assert_int_equal(STAT(p->s, unreferenced_blocks), 0);
	dd_store_close(p->s);   /* a fresh handle: no pack handles cached */
	assert_int_equal(dd_store_open(&p->s, p->path, NULL), 0);
}

static void put_walk_after(void *ctx, int rc)
{
	put_walk *p = ctx;
	dd_snapshot_info info;

	if (rc) {
		th_check_errmsg(dd_store_errmsg(p->s), rc);
		assert_int_equal(dd_snapshot_stat(p->s, p->imgs[1].name, &info),
				 DD_ENOENT);
	}
	dd_store_close(p->s);
	th_check_store(p->path, p->imgs, rc ? 1 : 2);
	assert_int_equal(dd_store_open(&p->s, p->path, NULL), 0);
}

/* "a" put, then the walk of putting "b": new text, then a's second half
 * (and, with repeats, blocks it repeats itself). */
static void put_walk_run(const char *what, int verify, uint64_t seed,
			 bool repeats)
{
	const size_t n = 128 * KiB;
	uint8_t *a = malloc(n), *b = malloc(n);
	put_walk p = {.path = th_tmp_store()};
	th_walk w = {.what = what, .classes = all_faults,
		     .nclasses = sizeof(all_faults) / sizeof(all_faults[0]),
		     .max_steps = 5000, .ctx = &p, .reset = put_walk_reset,
		     .op = put_walk_op, .after = put_walk_after};

	p.s = create(p.path, 4 * KiB, verify, DD_COMPRESS_ZSTD,
		     DD_HASH_SHA256);
	th_rng_state = seed;
	fill_random(a, n);
	memcpy(b, a, n);
	fill_text(b, n / 2);
	if (repeats)
		memcpy(b + n / 4, b, 8 * KiB);
	assert_int_equal(th_put(p.s, "a", a, n, 100000), 0);
	p.imgs[0] = (th_image){"a", a, n};
	p.imgs[1] = (th_image){"b", b, n};
	assert_true(th_fault_walk(&w) > 0);
	dd_store_close(p.s);
	free(a);
	free(b);
	th_rm_store(p.path);
}

static void test_fault_walk_put_verify(void **state)
{
	(void)state;
	dd_writer_commit_bytes = 64 * KiB;
	put_walk_run("put verify", 1, 31, false);
	dd_writer_commit_bytes = (uint64_t)512 << 20;
}

/* The same walk without verify, where a put defers its DDT changes
 * (store/defer.h) and flushes them in several transactions: every 16 ops,
 * 3 keys a transaction, a commit interval every 4 blocks.  A failure
 * between two of a flush's transactions leaves a mark that counts part of
 * the map; recovery rolls back exactly those references, so that scrub
 * then finds every count right. */
static void test_fault_walk_put_defer(void **state)
{
	(void)state;
	dd_writer_commit_bytes = 16 * KiB;
	dd_writer_defer_min = dd_writer_defer_max = 16;
	dd_writer_flush_keys = 3;
	dd_writer_flush_leaf = 0;
	put_walk_run("put defer", 0, 37, true);
	dd_writer_commit_bytes = (uint64_t)512 << 20;
	dd_writer_defer_min = 65536;
	dd_writer_defer_max = 524288;
	dd_writer_flush_keys = 8192;
	dd_writer_flush_leaf = 32;
}

/* put_file, and the writer's stats before it is freed. */
static int put_file_stats(dd_store *s, const char *name, int fd, size_t n,
			  dd_writer_stats *ws)
{
	dd_writer *w;
	int rc = dd_writer_begin(&w, s, name);

	if (rc)
		return rc;
	rc = dd_writer_write_file(w, fd, 0, n);
	if (!rc)
		rc = dd_writer_commit(w);
	ws->version = DD_WRITER_STATS_VERSION;
	assert_int_equal(dd_writer_stats_get(w, ws), 0);
	dd_writer_free(w);
	return rc;
}

/* put_file_stats, which must succeed: the key runs its flush left
 * uncounted without looking their entries up (wucnt.c).  It fills *ws:
 * compare with ws's fields only after the call (argument order). */
static uint64_t put_unlooked(dd_store *s, const char *name, int fd, size_t n,
			     dd_writer_stats *ws)
{
	uint64_t before = dd_wub_unlooked;

	assert_int_equal(put_file_stats(s, name, fd, n, ws), 0);
	return dd_wub_unlooked - before;
}

/* Sets the flags of the entry of data's block (4 KiB). */
static void set_flags(dd_store *s, const uint8_t *data, uint16_t flags)
{
	dd_ddt_key key = {.dk_variant = 0};
	dd_ddt_ent e = block_ent(s, data);
	dd_txn *txn;
	dd_err err;

	e.de_flags = flags;
	if (flags & DD_DDE_MISSING)     /* no record: as repair leaves it */
		e.de_pack = 0, e.de_offset = 0, e.de_psize = 0, e.de_codec = 0;
	dd_sha256(data, 4096, key.dk_hash);
	assert_int_equal(dd_txn_begin(s->st_db, &err, true, &txn), 0);
	assert_int_equal(dd_ddt_put(txn, &err, &key, &e), 0);
	assert_int_equal(dd_txn_commit(txn, &err), 0);
}

/* Uncounted positions of every map, and whether meta's features say the
 * catalog has them (catalog/ucnt.h). */
static uint64_t ucnt_positions(dd_store *s, bool *feature)
{
	dd_ucnt_set set;
	uint64_t n, f = 0;
	dd_txn *txn;
	dd_err err;
	int rc;

	assert_int_equal(dd_txn_begin(s->st_db, &err, false, &txn), 0);
	assert_int_equal(dd_ucnt_load(txn, &err, 0, &set), 0);
	rc = dd_meta_get_u64(txn, &err, "features", &f);
	assert_true(rc == 0 || rc == DD_ENOENT);
	dd_txn_abort(txn);
	n = dd_ucnt_count(&set);
	dd_ucnt_free(&set);
	*feature = f & DD_META_FEATURE_UCNT;
	return n;
}

/* a: n random bytes from seed; c: its first half, then n / 2 new ones. */
static void half_new_pair(uint64_t seed, size_t n, uint8_t **a, uint8_t **c)
{
	*a = malloc(n);
	*c = malloc(n);
	assert_non_null(*a);
	assert_non_null(*c);
	th_rng_state = seed;
	fill_random(*a, n);
	memcpy(*c, *a, n);
	fill_random(*c + n / 2, n / 2);
}

/* A new 4 KiB store without verify or compression, and half_new_pair's
 * images of 1 MiB. */
static dd_store *pair_store(uint64_t seed, char **path, uint8_t **a,
			    uint8_t **c)
{
	*path = th_tmp_store();
	half_new_pair(seed, MiB, a, c);
	return create(*path, 4 * KiB, 0, DD_COMPRESS_NONE, DD_HASH_SHA256);
}

/* The end of a test of half_new_pair's images: the store scrubs clean,
 * snapshot `first` reads as a and "c" as c; then all of it is freed. */
static void pair_done(dd_store *s, char *path, const char *first,
		      uint8_t *a, uint8_t *c, size_t n)
{
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	th_check_image(s, first, a, n);
	th_check_image(s, "c", c, n);
	dd_store_close(s);
	free(a);
	free(c);
	th_rm_store(path);
}

/* The id of the store's last commit. */
static uint64_t last_commit(dd_store *s)
{
	dd_txn *txn;
	dd_err err;
	uint64_t id;

	assert_int_equal(dd_txn_begin(s->st_db, &err, false, &txn), 0);
	id = dd_txn_id(txn);
	dd_txn_abort(txn);
	return id;
}

/* A flush transaction is bounded by the keys that change the DDT: the
 * flush of a re-put, every reference uncounted, is one transaction where
 * 3 keys a transaction made 86; a put of half new blocks still takes a
 * transaction per 3 of its new keys. */
static void test_uncounted_flush_txns(void **state)
{
	const size_t n = MiB, nblk = n / 4096;
	char *path;
	uint8_t *a, *c;
	dd_store *s = pair_store(57, &path, &a, &c);
	uint64_t t0, t1, t2;
	bool feature;

	(void)state;
	assert_int_equal(th_put(s, "a", a, n, n), 0);
	dd_writer_flush_keys = 3;
	dd_writer_flush_leaf = 0;
	t0 = last_commit(s);
	assert_int_equal(th_put(s, "b", a, n, n), 0);
	t1 = last_commit(s);
	assert_int_equal(ucnt_positions(s, &feature), nblk);
	assert_true(t1 - t0 < 10);
	assert_int_equal(th_put(s, "c", c, n, n), 0);
	t2 = last_commit(s);
	assert_int_equal(ucnt_positions(s, &feature), nblk + nblk / 2);
	assert_true(t2 - t1 >= nblk / 2 / 3);
	dd_writer_flush_keys = 8192;
	dd_writer_flush_leaf = 32;
	pair_done(s, path, "b", a, c, n);
}

/* The DDT's sorted runs (format/ddt.md §5), as a transaction loads them
 * from meta ddt.runs. */
static uint64_t ddt_runs(dd_store *s)
{
	dd_txn *txn;
	dd_err err;
	uint64_t n;

	assert_int_equal(dd_txn_begin(s->st_db, &err, false, &txn), 0);
	n = dd_ddt_runs(txn);
	dd_txn_abort(txn);
	return n;
}

/* A flush that appends its new keys to a run takes dd_writer_run_keys of
 * them a transaction (wops.c: LMDB's dirty pages are reused from one to
 * the next), and each transaction after the first continues the run the
 * one before it left: one run per flush, whatever its transactions. */
static void test_run_flush_txns(void **state)
{
	const size_t n = MiB, nblk = n / 4096;
	char *path;
	uint8_t *a, *c;
	dd_store *s = pair_store(58, &path, &a, &c);
	uint64_t t0, t1, t2;

	(void)state;
	dd_writer_run_keys = 5;
	t0 = last_commit(s);
	assert_int_equal(th_put(s, "a", a, n, n), 0);
	t1 = last_commit(s);
	assert_true(t1 - t0 >= nblk / 5);
	assert_int_equal(ddt_runs(s), 1);
	/* half of c is new: a flush into a second run, in 26 transactions */
	assert_int_equal(th_put(s, "c", c, n, n), 0);
	t2 = last_commit(s);
	assert_true(t2 - t1 >= nblk / 2 / 5);
	assert_int_equal(ddt_runs(s), 2);
	dd_writer_run_keys = 65536;
	assert_int_equal(STAT(s, ddt_entries), nblk + nblk / 2);
	pair_done(s, path, "a", a, c, n);
}

/* A re-put of blocks the store holds leaves their references uncounted:
 * the DDT counts one, a bit per block stands for the other; stat, usage
 * and scrub see both.  rm of the snapshot that counts them gives the
 * entries their references back from the other's bits (invariant U), so
 * gc frees nothing the re-put names; rm of the re-put itself touches no
 * count.  The last bit gone, the features bit goes too. */
static void test_uncounted_refs(void **state)
{
	const size_t n = MiB, nblk = n / 4096;
	char *path = th_tmp_store();
	dd_store *s = create(path, 4 * KiB, 0, DD_COMPRESS_NONE,
			     DD_HASH_SHA256);
	dd_snapshot_usage u = {.version = DD_SNAPSHOT_USAGE_VERSION};
	uint8_t *a, *c;
	bool feature;

	(void)state;
	half_new_pair(53, n, &a, &c);    /* c: half new, half a's */
	assert_int_equal(th_put(s, "a", a, n, n), 0);
	assert_int_equal(ucnt_positions(s, &feature), 0);
	assert_false(feature);
	assert_int_equal(th_put(s, "b", a, n, n), 0);
	assert_int_equal(ucnt_positions(s, &feature), nblk);
	assert_true(feature);
	assert_int_equal(block_ent(s, a + 7 * 4096).de_refcnt, 1);
	assert_int_equal(block_refs(s, a + 7 * 4096), 2);
	assert_int_equal(STAT(s, referenced_blocks), 2 * nblk);
	assert_int_equal(STAT(s, unique_blocks), nblk);
	assert_int_equal(dd_snapshot_usage_get(s, "a", &u), 0);
	assert_int_equal(u.unique_blocks, 0);     /* b names them all too */
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);

	/* rm a: every count reaches 0 and comes back from b's bits */
	assert_int_equal(dd_snapshot_delete(s, "a"), 0);
	assert_int_equal(ucnt_positions(s, &feature), 0);
	assert_false(feature);
	assert_int_equal(block_ent(s, a + 7 * 4096).de_refcnt, 1);
	assert_int_equal(STAT(s, unreferenced_blocks), 0);
	assert_int_equal(dd_store_gc(s, NULL, NULL), 0);
	th_check_image(s, "b", a, n);
	assert_int_equal(dd_snapshot_usage_get(s, "b", &u), 0);
	assert_int_equal(u.unique_blocks, nblk);

	/* c repeats half of b, uncounted; rm c touches no count */
	assert_int_equal(th_put(s, "c", c, n, n), 0);
	assert_int_equal(ucnt_positions(s, &feature), nblk / 2);
	assert_int_equal(block_refs(s, a + 7 * 4096), 2);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	assert_int_equal(dd_snapshot_delete(s, "c"), 0);
	assert_int_equal(ucnt_positions(s, &feature), 0);
	assert_false(feature);
	assert_int_equal(block_ent(s, a + 7 * 4096).de_refcnt, 1);
	assert_int_equal(STAT(s, referenced_blocks), nblk);
	assert_int_equal(dd_store_gc(s, NULL, NULL), 0);
	assert_int_equal(STAT(s, unique_blocks), nblk);

	/* d and e repeat b; rm b and d: e's references come back */
	assert_int_equal(th_put(s, "d", a, n, n), 0);
	assert_int_equal(th_put(s, "e", a, n, n), 0);
	assert_int_equal(ucnt_positions(s, &feature), 2 * nblk);
	assert_int_equal(dd_snapshot_delete(s, "b"), 0);
	assert_int_equal(ucnt_positions(s, &feature), nblk);
	assert_int_equal(dd_snapshot_delete(s, "d"), 0);
	assert_int_equal(ucnt_positions(s, &feature), 0);
	assert_int_equal(dd_store_gc(s, NULL, NULL), 0);
	th_check_image(s, "e", a, n);
	assert_int_equal(STAT(s, referenced_blocks), nblk);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);

	/* repair rebuilds every reference counted */
	assert_int_equal(th_put(s, "f", a, n, n), 0);
	assert_int_equal(ucnt_positions(s, &feature), nblk);
	dd_store_close(s);
	assert_int_equal(dd_store_repair(path, NULL, NULL), 0);
	assert_int_equal(dd_store_open(&s, path, NULL), 0);
	assert_int_equal(ucnt_positions(s, &feature), 0);
	assert_false(feature);
	assert_int_equal(block_ent(s, a + 7 * 4096).de_refcnt, 2);
	th_check_image(s, "f", a, n);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	dd_store_close(s);
	free(a);
	free(c);
	th_rm_store(path);
}

/* ORs one bit into map id's ucnt row (as damage would). */
static void poke_ucnt(dd_store *s, uint64_t id, uint64_t pos)
{
	uint8_t bits[DD_UCNT_BYTES] = {0};
	dd_txn *txn;
	dd_err err;

	dd_ucnt_set_bit(bits, pos, true);
	assert_int_equal(dd_txn_begin(s->st_db, &err, true, &txn), 0);
	assert_int_equal(dd_ucnt_or(txn, &err, id, pos / DD_UCNT_SPAN, bits),
			 0);
	assert_int_equal(dd_txn_commit(txn, &err), 0);
}

static uint64_t snap_id(dd_store *s, const char *name)
{
	dd_snap_rec rec;
	dd_txn *txn;
	dd_err err;

	assert_int_equal(dd_txn_begin(s->st_db, &err, false, &txn), 0);
	assert_int_equal(dd_snap_get(txn, &err, name, &rec), 0);
	dd_txn_abort(txn);
	return rec.sr_id;
}

/* Damage scrub finds in uncounted positions: a bit where the map has no
 * block, and a block whose entry counts no reference while c's uncounted
 * positions name it (the next gc would free a block in use: it
 * refuses). */
static void test_uncounted_scrub(void **state)
{
	const size_t n = 64 * KiB;
	char *path = th_tmp_store();
	dd_store *s = create(path, 4 * KiB, 0, DD_COMPRESS_NONE,
			     DD_HASH_SHA256);
	uint8_t *a = malloc(n);
	dd_ddt_key key = {.dk_variant = 0};

	(void)state;
	th_rng_state = 59;
	fill_random(a, n);
	assert_int_equal(th_put(s, "a", a, n, n), 0);
	assert_int_equal(th_put(s, "b", a, n, n), 0);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);

	poke_ucnt(s, snap_id(s, "b"), 100);          /* b has 16 blocks */
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), DD_ECORRUPT);
	assert_non_null(strstr(dd_store_errmsg(s), "1 uncounted block-map "
					       "position(s) name no block"));
	dd_store_close(s);
	assert_int_equal(dd_store_repair(path, NULL, NULL), 0);
	assert_int_equal(dd_store_open(&s, path, NULL), 0);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);

	assert_int_equal(th_put(s, "c", a, n, n), 0);
	dd_sha256_sw(a + 3 * 4096, 4096, key.dk_hash);
	assert_true(poke_refcnt(s, &key, 0) == 2);    /* a and b, repaired */
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), DD_ECORRUPT);
	assert_non_null(strstr(dd_store_errmsg(s), "refcount 0"));
	assert_int_equal(dd_store_gc(s, NULL, NULL), DD_ECORRUPT);
	th_check_image(s, "c", a, n);
	dd_store_close(s);
	free(a);
	th_rm_store(path);
}

/* Nine snapshots PREFIX0..PREFIX8 of one 4 KiB block each, the i-th at
 * a + i * stride: newer than the snapshots before them, and unlike them. */
static void put_small_snaps(dd_store *s, const char *prefix, const uint8_t *a,
			    size_t stride)
{
	for (int i = 0; i < 9; i++) {
		char nm[16];

		snprintf(nm, sizeof(nm), "%s%d", prefix, i);
		assert_int_equal(th_put(s, nm, a + (size_t)i * stride, 4096,
					4096), 0);
	}
}

/* A re-put whose source snapshot is removed before its flush: the flush
 * cannot take the source's word that the entries are alive -- the rm took
 * their counts to 0 -- and looks each up, counting the references it
 * would have left uncounted (else they would name entries of count 0,
 * against invariant U, and gc would stop with DD_ECORRUPT).  And the
 * unflagged claim, withdrawn by a flagged entry, comes back with a scrub
 * that finds no damage, or with a heal that leaves none. */
static void test_reput_source_gone(void **state)
{
	const size_t n = 8 * MiB, nblk = n / 4096;
	char *path = th_tmp_store();
	uint8_t *a = malloc(n);
	dd_store *s = create(path, 4 * KiB, 0, DD_COMPRESS_NONE,
			     DD_HASH_SHA256);
	dd_writer_stats ws = {.version = DD_WRITER_STATS_VERSION};
	dd_heal_opts ho = DD_HEAL_OPTS_INIT;
	dd_heal_result hr;
	uint64_t unlooked;
	char *good;
	dd_store *g;
	bool feature;
	dd_writer *w;
	int fd;

	(void)state;
	th_rng_state = 43;
	fill_random(a, n);
	fd = temp_file(path, a, n);
	assert_int_equal(put_file_stats(s, "a", fd, n, &ws), 0);
	unlooked = dd_wub_unlooked;
	assert_int_equal(dd_writer_begin(&w, s, "b"), 0);
	assert_int_equal(dd_writer_write_file(w, fd, 0, n), 0);
	assert_int_equal(dd_snapshot_delete(s, "a"), 0);
	assert_int_equal(block_ent(s, a + 100 * 4096).de_refcnt, 0);
	assert_int_equal(dd_writer_commit(w), 0);
	assert_int_equal(dd_writer_stats_get(w, &ws), 0);
	dd_writer_free(w);
	assert_true(ws.map_blocks > nblk / 2);
	assert_int_equal(dd_wub_unlooked - unlooked, 0);
	assert_int_equal(ucnt_positions(s, &feature), 0);
	assert_int_equal(block_ent(s, a + 100 * 4096).de_refcnt, 1);
	assert_int_equal(dd_store_gc(s, NULL, NULL), 0);
	th_check_image(s, "b", a, n);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);

	/* a flag set and cleared: the claim is withdrawn until a scrub */
	set_flags(s, a + 7 * 4096, DD_DDE_DAMAGED);
	set_flags(s, a + 7 * 4096, 0);
	assert_int_equal(put_unlooked(s, "c", fd, n, &ws), 0);
	assert_true(ws.map_blocks > nblk / 2);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	unlooked = put_unlooked(s, "d", fd, n, &ws);
	assert_int_equal(unlooked, ws.map_blocks);
	th_check_image(s, "d", a, n);

	/* a record damaged and flagged by scrub, then healed from a good
	 * copy: the heal's census brings the claim back */
	good = th_tmp_store();
	g = create(good, 4 * KiB, 0, DD_COMPRESS_NONE, DD_HASH_SHA256);
	assert_int_equal(th_put(g, "good", a, n, n), 0);
	dd_store_close(g);
	dd_store_close(s);
	flip_block(path, 1, 9);
	assert_int_equal(dd_store_open(&s, path, NULL), 0);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), DD_ECHECKSUM);
	ho.source = good;
	assert_int_equal(dd_store_heal_from(s, &ho, &hr), 0);
	assert_int_equal(hr.healed, 1);
	assert_int_equal(hr.missing, 0);
	unlooked = put_unlooked(s, "e", fd, n, &ws);
	assert_int_equal(unlooked, ws.map_blocks);
	th_check_image(s, "e", a, n);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	close(fd);
	dd_store_close(s);
	free(a);
	th_rm_store(path);
	th_rm_store(good);
}

/* A re-put of a file finds its blocks in the block map of the snapshot
 * it repeats (wloc.c: dd_writer_stats.map_blocks), and makes the same
 * snapshot with the same counts as probing the DDT would.  A block
 * scrub found damaged, or one lost (MISSING), is healed from the input at
 * the flush, as a probe's NEW would; a block changed in the input after
 * it was read (against dd_writer_write_file's contract) fails the commit
 * with DD_ECHECKSUM and leaves no snapshot, and a later re-put heals. */
static void test_reput_map(void **state)
{
	const size_t n = 32 * MiB, nblk = n / 4096;
	char *path = th_tmp_store();
	uint8_t *a = malloc(n);
	dd_store *s = create(path, 4 * KiB, 0, DD_COMPRESS_NONE,
			     DD_HASH_SHA256);
	dd_writer_stats ws;
	dd_snapshot_info info;
	dd_ddt_ent e, e2;
	dd_writer *w;
	uint64_t pre, unlooked;
	uint8_t x;
	int fd;

	(void)state;
	th_rng_state = 41;
	fill_random(a, n);
	fd = temp_file(path, a, n);
	assert_int_equal(put_file_stats(s, "a", fd, n, &ws), 0);
	assert_int_equal(ws.map_blocks, 0);        /* nothing to repeat */
	pre = dd_wub_prechecked;
	unlooked = put_unlooked(s, "b", fd, n, &ws);
	assert_true(ws.map_blocks > nblk * 9 / 10);
	assert_int_equal(ws.new_blocks, 0);
	/* no entry flagged, its source still there: the blocks b took from
	 * a's map were left uncounted without a look at their entries; the
	 * probe's, before a was adopted, were looked at */
	assert_int_equal(unlooked, ws.map_blocks);
	assert_int_equal(dd_wub_prechecked - pre, nblk - ws.map_blocks);
	th_check_image(s, "b", a, n);
	/* a counts it; b's reference is uncounted (its entry was alive) */
	assert_int_equal(block_ent(s, a + 100 * 4096).de_refcnt, 1);
	assert_int_equal(block_refs(s, a + 100 * 4096), 2);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);

	/* block 2005 damaged on disk and flagged by scrub; block 2009 lost
	 * (blocks well after the first, which the probe finds before the
	 * source is adopted) */
	dd_store_close(s);
	flip_block(path, 1, 2005);
	assert_int_equal(dd_store_open(&s, path, NULL), 0);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), DD_ECHECKSUM);
	e = block_ent(s, a + 2005 * 4096);
	assert_int_equal(e.de_flags, DD_DDE_DAMAGED);
	set_flags(s, a + 2009 * 4096, DD_DDE_MISSING);
	pre = dd_wub_prechecked;
	/* its flush's entries were checked on the pool (wucnt.c), the two
	 * flagged ones among them: with an entry flagged, none is left
	 * unlooked at */
	assert_int_equal(put_unlooked(s, "c", fd, n, &ws), 0);
	assert_int_equal(dd_wub_prechecked - pre, nblk);
	assert_true(ws.map_blocks > nblk * 9 / 10);
	assert_int_equal(ws.new_blocks, 2);  /* the two, stored again */
	e2 = block_ent(s, a + 2005 * 4096);
	assert_int_equal(e2.de_flags, 0);
	assert_int_equal(block_refs(s, a + 2005 * 4096), 3);
	assert_true(e2.de_pack != e.de_pack || e2.de_offset != e.de_offset);
	e2 = block_ent(s, a + 2009 * 4096);
	assert_int_equal(e2.de_flags, 0);
	assert_int_equal(block_refs(s, a + 2009 * 4096), 3);
	th_check_image(s, "a", a, n);
	th_check_image(s, "b", a, n);
	th_check_image(s, "c", a, n);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);

	/* block 2007 flagged, then changed in the file after the put read
	 * it (all but the last batches are read when dd_writer_write_file
	 * returns) */
	set_flags(s, a + 2007 * 4096, DD_DDE_DAMAGED);
	assert_int_equal(dd_writer_begin(&w, s, "d"), 0);
	assert_int_equal(dd_writer_write_file(w, fd, 0, n), 0);
	x = a[2007 * 4096] ^ 1;
	assert_int_equal(pwrite(fd, &x, 1, 2007 * 4096), 1);
	assert_int_equal(dd_writer_commit(w), DD_ECHECKSUM);
	assert_non_null(strstr(dd_writer_errmsg(w), "block 2007 of the input "
					       "changed"));
	dd_writer_free(w);
	assert_int_equal(dd_snapshot_stat(s, "d", &info), DD_ENOENT);
	assert_int_equal(pwrite(fd, &a[2007 * 4096], 1, 2007 * 4096), 1);
	assert_int_equal(put_file_stats(s, "e", fd, n, &ws), 0);
	assert_int_equal(block_ent(s, a + 2007 * 4096).de_flags, 0);
	assert_int_equal(block_refs(s, a + 2007 * 4096), 4);
	th_check_image(s, "e", a, n);

	/* fed in 128 ranges: the writer keeps 64 for heals, and takes no
	 * block of the others from the map */
	assert_int_equal(dd_writer_begin(&w, s, "f"), 0);
	for (size_t i = 0; i < 128; i++)
		assert_int_equal(dd_writer_write_file(w, fd, i * (n / 128),
						      n / 128), 0);
	assert_int_equal(dd_writer_commit(w), 0);
	ws.version = DD_WRITER_STATS_VERSION;
	assert_int_equal(dd_writer_stats_get(w, &ws), 0);
	dd_writer_free(w);
	assert_true(ws.map_blocks > 0 && ws.map_blocks <= nblk / 2);
	th_check_image(s, "f", a, n);

	/* the source found by its name among more snapshots than the
	 * writer tries: "img-2" repeats "img-1", nine snapshots later */
	assert_int_equal(put_file_stats(s, "img-1", fd, n, &ws), 0);
	put_small_snaps(s, "zz", a, 4096);
	assert_int_equal(put_file_stats(s, "img-2", fd, n, &ws), 0);
	assert_true(ws.map_blocks > nblk * 9 / 10);
	th_check_image(s, "img-2", a, n);
	/* ... and under a name like none, behind more newer snapshots than
	 * one try checks: the later tries go on down the list */
	put_small_snaps(s, "yy", a, 8192);
	assert_int_equal(put_file_stats(s, "q", fd, n, &ws), 0);
	assert_true(ws.map_blocks > nblk * 9 / 10);
	th_check_image(s, "q", a, n);
	assert_int_equal(dd_store_gc(s, NULL, NULL), 0);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	close(fd);
	dd_store_close(s);
	free(a);
	th_rm_store(path);
}

/* The heal through the map (dd_wloc_heal: a pack made, a record appended,
 * synced and recorded inside a flush's transaction) under injected faults
 * of every class.  The template holds "a", put from a file; before each
 * step the entry of block 60 is flagged DAMAGED, and "b" is put from the
 * same file -- with one pool thread, block 0's probe adopts "a" as the
 * source and blocks 1-63 come from its map.  A failure leaves no "b" and
 * a store that scrubs and reads "a" back exact. */
typedef struct reput_walk {
	put_walk pw;              /* first: put_walk_reset/_after take it */
	int fd;
} reput_walk;

static void reput_walk_reset(void *ctx)
{
	reput_walk *r = ctx;
	dd_open_opts o = DD_OPEN_OPTS_INIT;

	put_walk_reset(ctx);
	dd_store_close(r->pw.s);
	o.threads = 1;
	assert_int_equal(dd_store_open(&r->pw.s, r->pw.path, &o), 0);
	set_flags(r->pw.s, r->pw.imgs[0].data + 60 * 4096, DD_DDE_DAMAGED);
}

static int reput_walk_op(void *ctx)
{
	reput_walk *r = ctx;
	dd_writer_stats ws;

	return put_file_stats(r->pw.s, "b", r->fd, r->pw.imgs[0].size, &ws);
}

static void test_fault_walk_reput_heal(void **state)
{
	const size_t n = 256 * KiB;
	uint8_t *a = malloc(n);
	reput_walk r = {.pw.path = th_tmp_store()};
	th_walk w = {.what = "re-put heal", .classes = all_faults,
		     .nclasses = sizeof(all_faults) / sizeof(all_faults[0]),
		     .max_steps = 5000, .ctx = &r, .reset = reput_walk_reset,
		     .reset_every_step = true, .op = reput_walk_op,
		     .after = put_walk_after};
	dd_writer_stats ws;

	(void)state;
	r.pw.s = create(r.pw.path, 4 * KiB, 0, DD_COMPRESS_ZSTD,
			DD_HASH_SHA256);
	th_rng_state = 43;
	fill_random(a, n);
	r.fd = temp_file(r.pw.path, a, n);
	assert_int_equal(put_file_stats(r.pw.s, "a", r.fd, n, &ws), 0);
	r.pw.imgs[0] = (th_image){"a", a, n};
	r.pw.imgs[1] = (th_image){"b", a, n};
	/* the fault-free run heals block 60 through the map */
	reput_walk_reset(&r);
	assert_int_equal(put_file_stats(r.pw.s, "b", r.fd, n, &ws), 0);
	assert_int_equal(ws.map_blocks, n / 4096 - 1);
	assert_int_equal(ws.new_blocks, 1);
	assert_int_equal(block_ent(r.pw.s, a + 60 * 4096).de_flags, 0);
	assert_true(th_fault_walk(&w) > 0);
	dd_store_close(r.pw.s);
	close(r.fd);
	free(a);
	th_rm_store(r.pw.path);
}

/* A deferring writer's mark in its pend value (format/store.md §7.2):
 * tests/golden/pend_mark_v2.bin, written from the spec's table by hand
 * (done 2^32 + 2, end 2^32 + 0x2345, hash a0..bf, variant 1), decodes to
 * those fields and is what the encoder writes; which entries it counts;
 * a receive's state is not a mark. */
static void test_defer_mark_golden(void **state)
{
	dd_pend_rec rec = {.pr_name = "x"};
	dd_defer_mark m, want = {.dm_done = ((uint64_t)1 << 32) + 2,
				 .dm_end = ((uint64_t)1 << 32) + 0x2345};
	uint8_t enc[DD_DEFER_STATE_SIZE];
	dd_ddt_key k;
	FILE *f = fopen(DD_GOLDEN_DIR "/pend_mark_v2.bin", "rb");

	(void)state;
	assert_non_null(f);
	rec.pr_state_len = fread(rec.pr_state, 1, sizeof(rec.pr_state), f);
	fclose(f);
	assert_int_equal(rec.pr_state_len, DD_DEFER_STATE_SIZE);
	for (int i = 0; i < DD_HASH_SIZE; i++)
		want.dm_key.dk_hash[i] = (uint8_t)(0xa0 + i);
	want.dm_key.dk_variant = 1;
	assert_true(dd_defer_decode(&rec, &m));
	assert_false(dd_pend_is_receive(&rec));
	assert_true(m.dm_done == want.dm_done && m.dm_end == want.dm_end);
	assert_memory_equal(&m.dm_key, &want.dm_key, sizeof(m.dm_key));
	dd_defer_encode(&want, enc);
	assert_memory_equal(enc, rec.pr_state, sizeof(enc));

	/* below done: counted whatever the key; in [done, end): only keys
	 * below the mark's, hash first, then variant; at end and beyond: no */
	k = want.dm_key;
	assert_true(dd_defer_counted(&m, want.dm_done - 1, &k));
	assert_false(dd_defer_counted(&m, want.dm_done, &k));
	k.dk_variant = 0;
	assert_true(dd_defer_counted(&m, want.dm_done, &k));
	assert_false(dd_defer_counted(&m, want.dm_end, &k));
	k = want.dm_key;
	k.dk_hash[31]--;
	k.dk_variant = 9;
	assert_true(dd_defer_counted(&m, want.dm_end - 1, &k));
	k.dk_hash[0]++;
	k.dk_variant = 0;
	assert_false(dd_defer_counted(&m, want.dm_done, &k));

	/* a receive's state (version 1, 69 bytes), or a mark's bytes of
	 * another version or length, is not a mark */
	rec.pr_state[0] = 1;
	assert_false(dd_defer_decode(&rec, &m));
	assert_true(dd_pend_is_receive(&rec));
	rec.pr_state[0] = DD_DEFER_STATE_VERSION;
	rec.pr_state_len = 69;
	assert_false(dd_defer_decode(&rec, &m));
	rec.pr_state_len = 0;
	assert_false(dd_pend_is_receive(&rec));
}

/* The upgrade of a format-2 store to format 4 at its first put of digest
 * version 2 (format/store.md §1), under injected faults of every class.
 * The template holds "a", of version 1: put while another open file held
 * STORE/lock shared, so the put could not upgrade and left format 2.
 * Each step puts "b".  A failure is a clean error that leaves no "b" and
 * a store of format 2 or 4 that opens, scrubs and reads "a" back exact;
 * DEDUP is never half written.  The last step's put makes it format 4. */
typedef struct up_walk {
	th_tmpl st;               /* first: th_tmpl_walk_reset */
	th_image imgs[2];
} up_walk;

static int up_walk_op(void *ctx)
{
	up_walk *u = ctx;

	return th_put(u->st.s, "b", u->imgs[1].data, u->imgs[1].size, 50000);
}

static void up_walk_after(void *ctx, int rc)
{
	up_walk *u = ctx;
	dd_snapshot_info si;
	dd_store_info info;

	if (rc) {
		th_check_errmsg(dd_store_errmsg(u->st.s), rc);
		assert_int_equal(dd_snapshot_stat(u->st.s, "b", &si),
				 DD_ENOENT);
	}
	th_tmpl_check(&u->st, u->imgs, rc ? 1 : 2);
	assert_int_equal(dd_store_info_get(u->st.s, &info), 0);
	if (rc)
		assert_true(info.format_version == 2 ||
			    info.format_version == 4);
	else
		assert_int_equal(info.format_version, 4);
}

static void test_fault_walk_format2_upgrade(void **state)
{
	const size_t n = 96 * KiB;
	uint8_t *a = malloc(n), *b = malloc(n);
	char *tmpl = th_tmp_store(), lockf[4200];
	dd_store *s = create(tmpl, 4 * KiB, 0, DD_COMPRESS_ZSTD,
			     DD_HASH_SHA256);
	dd_store_info info;
	up_walk u = {.imgs = {{"a", a, n}, {"b", b, n}}};
	th_walk w = {.what = "format 2 to 4", .classes = all_faults,
		     .nclasses = sizeof(all_faults) / sizeof(all_faults[0]),
		     .max_steps = 5000, .ctx = &u, .reset = th_tmpl_walk_reset,
		     .op = up_walk_op, .after = up_walk_after};
	int fd;

	(void)state;
	th_rng_state = 41;
	fill_random(a, n);
	memset(a + 16 * KiB, 0, 32 * KiB);   /* a run of holes */
	memcpy(b, a, n);
	fill_text(b, n / 3);
	dd_store_close(s);
	dedup_file_set_format(tmpl, 4, 2);
	assert_int_equal(dd_store_open(&s, tmpl, NULL), 0);
	snprintf(lockf, sizeof(lockf), "%s/lock", tmpl);
	fd = open(lockf, O_RDWR | O_CREAT, 0644);
	assert_true(fd >= 0);
	assert_int_equal(flock(fd, LOCK_SH), 0);   /* "another process" */
	assert_int_equal(th_put(s, "a", a, n, 50000), 0);
	close(fd);
	assert_int_equal(dd_store_info_get(s, &info), 0);
	assert_int_equal(info.format_version, 2);
	dd_store_close(s);
	th_tmpl_init(&u.st, tmpl);
	assert_true(th_fault_walk(&w) > 0);
	th_tmpl_fini(&u.st);
	free(a);
	free(b);
}

/* ---- get under faults ----------------------------------------------------*/

typedef struct get_walk {
	char *path;
	th_image imgs[2];
	uint8_t *buf;
} get_walk;

/* What `dedup get` does: open the store, read each snapshot whole.  A read
 * that fails returns no bytes (the buffer is zeroed); one that succeeds
 * returns the image exactly. */
static int get_walk_op(void *ctx)
{
	get_walk *g = ctx;
	dd_store *s;
	int rc = dd_store_open(&s, g->path, NULL);

	if (rc) {
		th_check_errmsg(dd_store_errmsg(NULL), rc);
		return rc;
	}
	for (size_t i = 0; !rc && i < 2; i++) {
		const th_image *im = &g->imgs[i];
		dd_reader *r;
		size_t got = 0;

		rc = dd_reader_open(&r, s, im->name);
		if (rc) {
			th_check_errmsg(dd_store_errmsg(s), rc);
			break;
		}
		memset(g->buf, 0xa5, im->size);
		rc = dd_reader_pread(r, g->buf, im->size, 0, &got);
		if (rc) {
			th_check_errmsg(dd_reader_errmsg(r), rc);
			for (size_t k = 0; k < im->size; k++)
				assert_int_equal(g->buf[k], 0);
		} else {
			assert_int_equal(got, im->size);
			assert_memory_equal(g->buf, im->data, im->size);
		}
		dd_reader_close(r);
	}
	dd_store_close(s);
	return rc;
}

/* A get changes nothing: the store stays as it was. */
static void get_walk_after(void *ctx, int rc)
{
	get_walk *g = ctx;

	(void)rc;
	th_check_store(g->path, g->imgs, 2);
}

static void test_fault_walk_get(void **state)
{
	const size_t n = 256 * KiB;
	uint8_t *a = malloc(n), *b = malloc(n);
	get_walk g = {.path = th_tmp_store(), .buf = malloc(n)};
	th_walk w = {.what = "get", .classes = all_faults,
		     .nclasses = sizeof(all_faults) / sizeof(all_faults[0]),
		     .max_steps = 5000, .ctx = &g, .op = get_walk_op,
		     .after = get_walk_after};
	dd_store *s = create(g.path, 4 * KiB, 0, DD_COMPRESS_ZSTD,
			     DD_HASH_SHA256);

	(void)state;
	th_rng_state = 41;
	fill_text(a, n);
	memcpy(b, a, n);
	fill_random(b + n / 2, n / 4);
	memset(b, 0, 3 * 4 * KiB);          /* holes too */
	assert_int_equal(th_put(s, "a", a, n, 100000), 0);
	assert_int_equal(th_put(s, "b", b, n, 100000), 0);
	dd_store_close(s);
	g.imgs[0] = (th_image){"a", a, n};
	g.imgs[1] = (th_image){"b", b, n};
	assert_true(th_fault_walk(&w) > 0);
	free(a);
	free(b);
	free(g.buf);
	th_rm_store(g.path);
}

/* Zeroes the key filter's bits, and with sums also their sums
 * (format/kfilter.md §1: a 256-byte header; one segment here). */
static void kfilter_zero(const char *path, bool sums)
{
	char flt[4200];
	struct stat st;
	uint8_t *zero;
	off_t nblocks, len;
	int fd;

	snprintf(flt, sizeof(flt), "%s/db/keys.flt", path);
	assert_int_equal(stat(flt, &st), 0);
	nblocks = (st.st_size - 256) / 68;
	assert_int_equal(256 + nblocks * 68, st.st_size);
	len = sums ? st.st_size - 256 : nblocks * 64;
	zero = calloc(1, (size_t)len);
	assert_non_null(zero);
	fd = open(flt, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, zero, (size_t)len, 256), len);
	close(fd);
	free(zero);
}

/* The DDT's key filter lost its bits.  At rest (sums and all): the open
 * finds the sums failing and rebuilds it, so a put of blocks the DDT
 * holds stores none.  Under a running process (bits only): its probes
 * say "no", so the put stores the blocks again; its commit finds the
 * sums failing, trusts none of the filter's answers, references the
 * entries -- the copies are garbage that gc reclaims, and the images,
 * counts and scrub are as if nothing had happened -- and withdraws the
 * filter, which the next writer rebuilds: later copies store
 * nothing. */
static void test_kfilter_lost_bits(void **state)
{
	const size_t n = 256 * KiB;
	char *path = th_tmp_store();
	dd_store *s = create(path, 4 * KiB, 0, DD_COMPRESS_NONE,
			     DD_HASH_SHA256);
	uint8_t *a = malloc(n);
	dd_writer_stats ws;
	dd_gc_result gr;
	uint64_t unique;
	int fd;

	(void)state;
	th_rng_state = 4242;
	fill_random(a, n);
	assert_int_equal(th_put(s, "a", a, n, n), 0);
	unique = STAT(s, unique_blocks);
	assert_int_equal(unique, n / (4 * KiB));
	dd_store_close(s);
	kfilter_zero(path, true);

	assert_int_equal(dd_store_open(&s, path, NULL), 0);
	fd = temp_file(path, a, n);
	assert_int_equal(put_file_stats(s, "b", fd, n, &ws), 0);
	assert_int_equal(ws.new_blocks, 0);   /* rebuilt at the open */
	kfilter_zero(path, false);
	assert_int_equal(put_file_stats(s, "c", fd, n, &ws), 0);
	assert_int_equal(ws.new_blocks, n / (4 * KiB));   /* stored again */
	/* c's commit withdrew the filter: this writer rebuilds it */
	assert_int_equal(th_put(s, "d", a, n, n), 0);
	dd_store_close(s);
	assert_int_equal(dd_store_open(&s, path, NULL), 0);
	assert_int_equal(STAT(s, unique_blocks), unique);
	assert_int_equal(STAT(s, referenced_blocks), 4 * unique);
	th_check_image(s, "c", a, n);
	th_check_image(s, "d", a, n);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	assert_int_equal(dd_store_gc(s, NULL, &gr), 0);
	assert_true(gr.bytes_reclaimed >= n);   /* c's copy */
	/* the filter has the bits again: a fifth copy stores nothing */
	assert_int_equal(put_file_stats(s, "e", fd, n, &ws), 0);
	assert_int_equal(ws.new_blocks, 0);
	th_check_image(s, "a", a, n);
	th_check_image(s, "e", a, n);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	close(fd);
	dd_store_close(s);
	free(a);
	th_rm_store(path);
}

/* The key filter's header: segments, and the DDT entries its last
 * rebuild walked (format/kfilter.md §1). */
static void kfilter_hdr(const char *path, uint32_t *segs, uint64_t *walked)
{
	uint8_t h[40];
	char flt[4200];
	int fd;

	snprintf(flt, sizeof(flt), "%s/db/keys.flt", path);
	fd = open(flt, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);
	*segs = dd_get_le32(h + 16);
	*walked = dd_get_le64(h + 32);
}

/* *s, just written, closed: its filter has more than one segment, and the
 * next writer's open keeps it -- no rebuild walked the DDT again.  *s is
 * open again after. */
static void kfilter_grew_and_kept(const char *path, dd_store **s,
				  const uint8_t *block)
{
	uint64_t walked, walked2;
	uint32_t segs, segs2;

	dd_store_close(*s);
	kfilter_hdr(path, &segs, &walked);
	assert_true(segs > 1);
	assert_int_equal(dd_store_open(s, path, NULL), 0);
	assert_int_equal(th_put(*s, "b", block, 4 * KiB, 4 * KiB), 0);
	kfilter_hdr(path, &segs2, &walked2);
	assert_int_equal(segs2, segs);
	assert_int_equal(walked2, walked);
}

/* Writers that do not defer their DDT changes -- verify mode, a receive --
 * make room in the key filter at each commit, as a deferring one does at
 * its flush: with segments of 64 blocks (1,365 keys before full at 24
 * bits, 2,730 before overfilled at 12), 4,096 new keys grow the filter by
 * segments as they go, never filling one past full; so the next writer's
 * open finds room and keeps the filter instead of rebuilding it from a
 * walk of the DDT (the header's count of entries walked stays).  Checked
 * to fail without the room made (the segments stay 1, the open walks). */
static void test_kfilter_room_without_defer(void **state)
{
	const size_t n = 4096 * 4 * KiB;
	char *path = th_tmp_store(), *path2 = th_tmp_store();
	dd_store *s = create(path, 4 * KiB, 1, DD_COMPRESS_NONE,
			     DD_HASH_SHA256);
	dd_store *r;
	uint8_t *a = malloc(n);
	th_mem m = {0};

	(void)state;
	assert_non_null(a);
	dd_kf_min_blocks = 64;
	th_rng_state = 777;
	fill_random(a, n);
	assert_int_equal(th_put(s, "a", a, n, n), 0);
	kfilter_grew_and_kept(path, &s, a);

	/* a receive of the same 4,096 blocks into a new store */
	assert_int_equal(dd_send(s, "a", NULL, th_mem_write, &m), 0);
	r = create(path2, 4 * KiB, 0, DD_COMPRESS_NONE, DD_HASH_SHA256);
	assert_int_equal(dd_recv(r, NULL, th_mem_read, &m, NULL), 0);
	th_check_image(r, "a", a, n);
	kfilter_grew_and_kept(path2, &r, a);
	assert_int_equal(dd_store_scrub(r, NULL, NULL, NULL), 0);
	dd_store_close(r);
	dd_kf_min_blocks = DD_KF_MIN_BLOCKS;
	dd_store_close(s);
	free(m.p);
	free(a);
	th_rm_store(path);
	th_rm_store(path2);
}

/* dd_stat version 2: a deferring put of new blocks leaves a sorted run
 * (its flush appends one, format/ddt.md §5), which gc's compaction folds;
 * the key filter's segments, file size and bits per entry, and none in
 * force once its file is gone.  A version 1 caller gets the version 1
 * fields and nothing written past them. */
static void test_stat_runs_and_filter(void **state)
{
	const size_t n = 64 * 4 * KiB;
	char *path = th_tmp_store(), flt[4200];
	dd_store *s = create(path, 4 * KiB, 0, DD_COMPRESS_NONE,
			     DD_HASH_SHA256);
	uint8_t *a = malloc(n);
	dd_stat st = {.version = DD_STAT_VERSION};
	union {
		dd_stat st;
		unsigned char raw[sizeof(dd_stat)];
	} v1;
	dd_gc_result gr;

	(void)state;
	assert_non_null(a);
	th_rng_state = 2026;
	fill_random(a, n);
	assert_int_equal(th_put(s, "a", a, n, n), 0);
	assert_int_equal(dd_store_stat(s, &st), 0);
	assert_int_equal(st.ddt_entries, 64);
	assert_int_equal(st.ddt_runs, 1);
	assert_true(st.filter_segments >= 1);
	assert_true(st.filter_bytes > 256);
	assert_true(st.filter_bits_per_entry >= 24);

	memset(&v1, 0xa5, sizeof(v1));
	v1.st.version = 1;
	assert_int_equal(dd_store_stat(s, &v1.st), 0);
	assert_int_equal(v1.st.ddt_entries, 64);
	for (size_t i = offsetof(dd_stat, ddt_runs); i < sizeof(v1); i++)
		assert_int_equal(v1.raw[i], 0xa5);

	assert_int_equal(dd_store_gc(s, NULL, &gr), 0);
	assert_int_equal(dd_store_stat(s, &st), 0);
	assert_int_equal(st.ddt_runs, 0);   /* compacted */
	assert_int_equal(st.ddt_entries, 64);
	dd_store_close(s);

	snprintf(flt, sizeof(flt), "%s/db/keys.flt", path);
	assert_int_equal(unlink(flt), 0);
	assert_int_equal(dd_store_open(&s, path, NULL), 0);
	assert_int_equal(dd_store_stat(s, &st), 0);
	assert_int_equal(st.filter_segments, 0);
	assert_int_equal(st.filter_bytes, 0);
	assert_true(st.filter_bits_per_entry == 0.0);
	/* the next writer builds it */
	assert_int_equal(th_put(s, "b", a, 4 * KiB, 4 * KiB), 0);
	assert_int_equal(dd_store_stat(s, &st), 0);
	assert_int_equal(st.filter_segments, 1);
	dd_store_close(s);
	free(a);
	th_rm_store(path);
}

int main(void)
{
	/* the sixteen lanes without their timing where the CPU has them, so
	 * that reads hash lists of sixteen blocks (test_reader_lists) in a
	 * build whose lanes would not time faster (-O0) */
	setenv("DEDUP_SHA256_X16", "1", 0);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip_shapes),
		cmocka_unit_test(test_random_reads),
		cmocka_unit_test(test_dedup_accounting),
		cmocka_unit_test(test_write_file),
		cmocka_unit_test(test_write_file_short),
		cmocka_unit_test(test_write_file_verify),
		cmocka_unit_test(test_write_file_fault_walk),
		cmocka_unit_test(test_kfilter_lost_bits),
		cmocka_unit_test(test_kfilter_room_without_defer),
		cmocka_unit_test(test_stat_runs_and_filter),
		cmocka_unit_test(test_verify_mode_exact),
		cmocka_unit_test(test_verify_repeat_in_own_pack),
		cmocka_unit_test(test_no_verify_shows_risk),
		cmocka_unit_test(test_abort_leaves_nothing),
		cmocka_unit_test(test_killed_writer_rolled_back),
		cmocka_unit_test(test_recovery_keeps_live_blocks),
		cmocka_unit_test(test_gc_refuses_lost_refcount),
		cmocka_unit_test(test_gc_refuses_map_unlike_manifest),
		cmocka_unit_test(test_scrub_counts_references),
		cmocka_unit_test(test_names_and_misuse),
		cmocka_unit_test(test_newer_format_refused),
		cmocka_unit_test(test_cdc_roundtrip),
		cmocka_unit_test(test_cdc_lifecycle),
		cmocka_unit_test(test_cdc_options),
		cmocka_unit_test(test_format2_upgraded_at_put),
		cmocka_unit_test(test_gc_reclaims_and_compacts),
		cmocka_unit_test(test_gc_scrub_progress),
		cmocka_unit_test(test_writer_progress),
		cmocka_unit_test(test_writer_cancel_thread),
		cmocka_unit_test(test_damage_detected),
		cmocka_unit_test(test_scrub_marks_put_heals),
		cmocka_unit_test(test_reader_salvage),
		cmocka_unit_test(test_reader_lists),
		cmocka_unit_test(test_fault_walk),
		cmocka_unit_test(test_fault_walk_gc),
		cmocka_unit_test(test_fault_walk_put_verify),
		cmocka_unit_test(test_fault_walk_put_defer),
		cmocka_unit_test(test_defer_mark_golden),
		cmocka_unit_test(test_reput_map),
		cmocka_unit_test(test_reput_source_gone),
		cmocka_unit_test(test_uncounted_refs),
		cmocka_unit_test(test_uncounted_flush_txns),
		cmocka_unit_test(test_run_flush_txns),
		cmocka_unit_test(test_uncounted_scrub),
		cmocka_unit_test(test_fault_walk_reput_heal),
		cmocka_unit_test(test_fault_walk_format2_upgrade),
		cmocka_unit_test(test_fault_walk_get),
		cmocka_unit_test(test_fault_walk_repair),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
