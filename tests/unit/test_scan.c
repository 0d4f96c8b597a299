/*
 * test_scan.c -- scan/: the table (upsert, backward-shift deletion under
 * subsampling, sort), spill records and the multi-pass merge, and the
 * public API against the store itself: every figure of a scan equals
 * dd_store_stat of a new store holding the same images -- in memory, with
 * a spill on every batch, and in sample mode at rate 1 -- plus sample
 * bounds, walks, warnings, bad options and injected faults.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dedup.h"
#include "helpers.h"
#include "common/faults.h"
#include "hash/hash.h"
#include "scan/scan.h"

#define KiB 1024u
#define MiB (1024u * 1024u)

/* ---- helpers ------------------------------------------------------------*/

static char tmpdir[64];

static int setup_dir(void **state)
{
	(void)state;
	strcpy(tmpdir, "/tmp/dd-test-scan-XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_dir(void **state)
{
	char cmd[256];

	(void)state;
	dd_fault_disarm_all();
	snprintf(cmd, sizeof(cmd), "chmod -R u+rwx '%s'; rm -rf '%s'", tmpdir,
		 tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

/* A pool of distinct 4 KiB pieces: half random, half text-like, so the
 * compressed sizes differ. */
#define NPIECES 64
static uint8_t pieces[NPIECES][4096];

static void make_pieces(void)
{
	th_rng_state = 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < NPIECES; i++)
		for (int j = 0; j < 4096; j++)
			pieces[i][j] = i % 2 ? (uint8_t)(th_rng() >> 24)
					     : (uint8_t)"abcdefgh"[th_rng() % 8];
}

/* An image of n 4 KiB pieces drawn from the pool (some all-zero), and a
 * tail of `tail` bytes. */
static uint8_t *make_image(size_t n, size_t tail, int npool, size_t *len)
{
	uint8_t *p = malloc(n * 4096 + tail + 1);

	assert_non_null(p);
	for (size_t i = 0; i < n; i++) {
		uint64_t r = th_rng() % (uint64_t)(npool + 4);

		if (r >= (uint64_t)npool)
			memset(p + i * 4096, 0, 4096);
		else
			memcpy(p + i * 4096, pieces[r], 4096);
	}
	for (size_t i = 0; i < tail; i++)
		p[n * 4096 + i] = (uint8_t)(th_rng() >> 20);
	*len = n * 4096 + tail;
	return p;
}

static void write_file(const char *path, const void *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, p, n), (ssize_t)n);
	close(fd);
}

/* dd_store_stat of a new store of this chunker with block size bs
 * holding the images. */
static void store_stat(int chunker, uint32_t bs, uint8_t *const *img,
		       const size_t *len, int nimg, dd_stat *st)
{
	dd_create_opts co = DD_CREATE_OPTS_INIT;
	char path[128], name[16];
	dd_store *s;

	co.block_size = bs;
	co.chunker = chunker;
	snprintf(path, sizeof(path), "%s/store-%u", tmpdir, bs);
	assert_int_equal(dd_store_create(&s, path, &co, NULL), 0);
	for (int i = 0; i < nimg; i++) {
		dd_writer *w;

		snprintf(name, sizeof(name), "i%d", i);
		assert_int_equal(dd_writer_begin(&w, s, name), 0);
		assert_int_equal(dd_writer_write(w, img[i], len[i]), 0);
		assert_int_equal(dd_writer_commit(w), 0);
		dd_writer_free(w);
	}
	memset(st, 0, sizeof(*st));
	st->version = DD_STAT_VERSION;
	assert_int_equal(dd_store_stat(s, st), 0);
	dd_store_close(s);
}

/* The figures of blocks and bytes, compressed sizes apart. */
static void assert_counts_as_store(const dd_scan_result *r, const dd_stat *st)
{
	assert_int_equal(r->zero_blocks, st->zero_blocks);
	assert_int_equal(r->referenced_blocks, st->referenced_blocks);
	assert_int_equal(r->referenced_bytes, st->referenced_bytes);
	assert_int_equal(r->unique_blocks, st->unique_blocks);
	assert_int_equal(r->unique_bytes, st->unique_bytes);
	assert_true(r->dedup_ratio == st->dedup_ratio);
}

static void assert_same_as_store(const dd_scan_result *r, const dd_stat *st)
{
	assert_counts_as_store(r, st);
	assert_int_equal(r->stored_bytes, st->stored_bytes);
	assert_true(r->compress_ratio == st->compress_ratio);
	assert_memory_equal(r->hist, st->hist, sizeof(st->hist));
	assert_int_equal(r->ddt_bytes,
			 st->unique_blocks * DD_SCAN_DDT_ENTRY_BYTES);
}

/* How far an estimated compressed size may be from the compressed one.
 * On data whose compressibility is local (test_estimate_accuracy: each
 * 4 KiB of bytes drawn from 2^1..2^8 symbols, no byte string repeated)
 * the estimate was within 1.1% at 4K, 16K and 128K averages. */
#define EST_TOLERANCE 0.03
/* The images of make_images are drawn from 64 pieces of 4 KiB: a block
 * of several pieces finds earlier ones in itself, so how well it
 * compresses depends on its length, not on its bytes alone -- the worst
 * case for the estimate (6.4% low at a 4 KiB average).  Storing them raw
 * would be 40% off. */
#define EST_TOLERANCE_PIECES 0.15

/* As assert_same_as_store, but the compressed sizes are an estimate:
 * within EST_TOLERANCE of the store's, every other figure exact. */
static void assert_estimate_of_store(const dd_scan_result *r,
				     const dd_stat *st)
{
	double rel = st->stored_bytes
		? fabs((double)r->stored_bytes - (double)st->stored_bytes) /
		  (double)st->stored_bytes
		: (double)r->stored_bytes;

	assert_counts_as_store(r, st);
	if (getenv("DD_TEST_VERBOSE"))
		fprintf(stderr, "%u: estimated %llu, stored %llu (off %.3f%%)\n",
			r->block_size, (unsigned long long)r->stored_bytes,
			(unsigned long long)st->stored_bytes, 100.0 * rel);
	assert_true(rel <= EST_TOLERANCE_PIECES);
	assert_true(r->stored_bytes <= r->unique_bytes);
	for (int i = 0; i < DD_HIST_BUCKETS; i++) {
		assert_int_equal(r->hist[i].blocks, st->hist[i].blocks);
		assert_int_equal(r->hist[i].lsize, st->hist[i].lsize);
		assert_int_equal(r->hist[i].ref_blocks, st->hist[i].ref_blocks);
		assert_int_equal(r->hist[i].ref_lsize, st->hist[i].ref_lsize);
	}
}

/* ---- the table ----------------------------------------------------------*/

static void hash_of(uint64_t i, uint8_t h[DD_HASH_SIZE])
{
	dd_sha256_sw(&i, sizeof(i), h);
}

static void test_table_upsert(void **state)
{
	dd_scan_table t;
	uint8_t h[DD_HASH_SIZE];
	size_t slot, slot2;
	bool found;

	(void)state;
	assert_int_equal(dd_scan_table_init(&t, 48 * 1000, 10), 0);
	assert_int_equal(t.tb_cap, 1000);
	assert_int_equal(t.tb_max, 750);
	for (uint64_t i = 0; i < 750; i++) {
		hash_of(i, h);
		dd_scan_table_upsert(&t, h, &slot, &found);
		assert_false(found);
		t.tb_ent[slot].se_refcnt = i + 1;
	}
	assert_int_equal(t.tb_count, 750);
	for (uint64_t i = 0; i < 750; i++) {
		hash_of(i, h);
		dd_scan_table_upsert(&t, h, &slot, &found);
		assert_true(found);
		assert_int_equal(t.tb_ent[slot].se_refcnt, i + 1);
		dd_scan_table_upsert(&t, h, &slot2, &found);
		assert_int_equal(slot, slot2);
	}
	assert_int_equal(t.tb_count, 750);
	dd_scan_table_sort(&t);
	for (size_t i = 1; i < 750; i++)
		assert_true(memcmp(t.tb_ent[i - 1].se_hash, t.tb_ent[i].se_hash,
				   DD_HASH_SIZE) < 0);
	dd_scan_table_fini(&t);

	/* The floor: a tiny budget still holds min_entries. */
	assert_int_equal(dd_scan_table_init(&t, 10, 300), 0);
	assert_true(t.tb_max >= 300);
	dd_scan_table_fini(&t);
}

/* A table starts small and grows by rehashing while the old and the new
 * array fit its budget together; every entry survives every growth, and
 * once emptied it takes the whole budget. */
static void test_table_grows(void **state)
{
	const size_t budget = 48 * 400000;   /* 400 K slots */
	dd_scan_table t;
	uint8_t h[DD_HASH_SIZE];
	size_t slot, caps = 0, last = 0;
	bool found;

	(void)state;
	assert_int_equal(dd_scan_table_init(&t, budget, 16), 0);
	assert_int_equal(t.tb_cap, 65536);
	assert_int_equal(t.tb_limit, 400000);
	for (uint64_t i = 0; i < 250000; i++) {
		if (i % 1000 == 0)
			assert_int_equal(dd_scan_table_reserve(&t, 1000), 0);
		if (t.tb_count + 1 > t.tb_max)
			break;
		if (t.tb_cap != last) {
			caps++;
			last = t.tb_cap;
		}
		hash_of(i, h);
		dd_scan_table_upsert(&t, h, &slot, &found);
		assert_false(found);
		t.tb_ent[slot].se_refcnt = i + 1;
	}
	/* 64 Ki -> 128 Ki -> 256 Ki slots; 512 Ki would not fit beside
	 * 256 Ki, and 400 K - 256 Ki = 137856 is less than 256 Ki */
	assert_int_equal(t.tb_cap, 262144);
	assert_int_equal(caps, 3);
	for (uint64_t i = 0; i < t.tb_count; i++) {
		hash_of(i, h);
		dd_scan_table_upsert(&t, h, &slot, &found);
		assert_true(found);
		assert_int_equal(t.tb_ent[slot].se_refcnt, i + 1);
	}
	assert_int_equal(dd_scan_table_clear(&t), 0);
	assert_int_equal(t.tb_cap, 400000);
	assert_int_equal(t.tb_count, 0);
	dd_scan_table_fini(&t);
}

static void test_sampled_bits(void **state)
{
	uint8_t h[DD_HASH_SIZE] = {0};

	(void)state;
	assert_true(dd_scan_sampled(h, 0));
	assert_true(dd_scan_sampled(h, 256));
	assert_false(dd_scan_sampled(h, 257));
	h[0] = 0x01;
	assert_true(dd_scan_sampled(h, 7));
	assert_false(dd_scan_sampled(h, 8));
	h[0] = 0;
	h[1] = 0x20;
	assert_true(dd_scan_sampled(h, 10));
	assert_false(dd_scan_sampled(h, 11));
	h[0] = 0x80;
	assert_true(dd_scan_sampled(h, 0));
	assert_false(dd_scan_sampled(h, 1));
}

/* Subsampling deletes in place with backward shift: afterwards exactly
 * the sampled keys remain, each still found by a probe. */
static void test_table_subsample(void **state)
{
	dd_scan_table t;
	uint8_t h[DD_HASH_SIZE];
	size_t slot, kept = 0;
	bool found;

	(void)state;
	/* A small, full table: long probe runs that wrap around the end. */
	assert_int_equal(dd_scan_table_init(&t, 48 * 211, 1), 0);
	for (uint64_t i = 0; i < t.tb_max; i++) {
		hash_of(i, h);
		dd_scan_table_upsert(&t, h, &slot, &found);
		t.tb_ent[slot].se_refcnt = i + 1;
	}
	for (unsigned shift = 1; shift <= 3; shift++) {
		dd_scan_table_subsample(&t, shift);
		kept = 0;
		for (uint64_t i = 0; i < t.tb_max + 0; i++) {
			hash_of(i, h);
			if (!dd_scan_sampled(h, shift))
				continue;
			kept++;
			dd_scan_table_upsert(&t, h, &slot, &found);
			assert_true(found);
			assert_int_equal(t.tb_ent[slot].se_refcnt, i + 1);
		}
		assert_int_equal(t.tb_count, kept);
	}
	assert_true(kept > 5 && kept < 60);
	dd_scan_table_fini(&t);
}

/* ---- spill --------------------------------------------------------------*/

static void test_rec_encoding(void **state)
{
	dd_scan_ent e = {.se_refcnt = 0x0102030405060708ull,
			 .se_lsize = 0x11223344, .se_psize = 0x55667788};
	uint8_t buf[DD_SCAN_REC_SIZE];
	dd_scan_ent back;

	(void)state;
	for (int i = 0; i < DD_HASH_SIZE; i++)
		e.se_hash[i] = (uint8_t)(0xa0 + i);
	dd_scan_rec_encode(buf, &e);
	assert_memory_equal(buf, e.se_hash, DD_HASH_SIZE);
	assert_int_equal(buf[32], 0x08);
	assert_int_equal(buf[39], 0x01);
	assert_int_equal(buf[40], 0x44);
	assert_int_equal(buf[43], 0x11);
	assert_int_equal(buf[44], 0x88);
	assert_int_equal(buf[47], 0x55);
	dd_scan_rec_decode(buf, &back);
	assert_memory_equal(&back, &e, sizeof(e));
}

struct merged {
	uint64_t n, refs;
	uint8_t last[DD_HASH_SIZE];
	uint64_t want[400];     /* expected refcount per key i */
};

static void merged_sink(void *ctx, const dd_scan_ent *e)
{
	struct merged *m = ctx;
	uint8_t h[DD_HASH_SIZE];
	uint64_t key = e->se_lsize;

	if (m->n)
		assert_true(memcmp(m->last, e->se_hash, DD_HASH_SIZE) < 0);
	memcpy(m->last, e->se_hash, DD_HASH_SIZE);
	assert_true(key < 400);
	hash_of(key, h);
	assert_memory_equal(h, e->se_hash, DD_HASH_SIZE);
	assert_int_equal(e->se_refcnt, m->want[key]);
	assert_int_equal(e->se_psize, key / 2 + 1);
	m->n++;
	m->refs += e->se_refcnt;
}

/* 40 runs of overlapping keys; a budget for only 2 buffers forces
 * intermediate passes; the merge sums refcounts across runs. */
static void test_spill_merge(void **state)
{
	static struct merged m;
	dd_scan_spill sp;
	dd_scan_table t;
	dd_err err = {0};
	uint64_t total = 0;

	(void)state;
	memset(&m, 0, sizeof(m));
	dd_scan_spill_init(&sp, tmpdir);
	assert_int_equal(dd_scan_table_init(&t, 48 * 200, 1), 0);
	for (int run = 0; run < 40; run++) {
		for (uint64_t k = (uint64_t)run * 7; k < (uint64_t)run * 7 + 60;
		     k += 1 + (uint64_t)(run % 3)) {
			uint8_t h[DD_HASH_SIZE];
			size_t slot;
			bool found;

			hash_of(k, h);
			dd_scan_table_upsert(&t, h, &slot, &found);
			assert_false(found);
			t.tb_ent[slot].se_refcnt = (uint64_t)run + 1;
			t.tb_ent[slot].se_lsize = (uint32_t)k;
			t.tb_ent[slot].se_psize = (uint32_t)(k / 2 + 1);
			m.want[k] += (uint64_t)run + 1;
			total += (uint64_t)run + 1;
		}
		dd_scan_table_sort(&t);
		assert_int_equal(dd_scan_spill_run(&sp, &err, &t), 0);
		dd_scan_table_clear(&t);
	}
	dd_scan_table_fini(&t);
	assert_int_equal(sp.sp_nruns, 40);
	assert_int_equal(dd_scan_spill_merge(&sp, &err, 32 * KiB, merged_sink,
					     &m), 0);
	assert_true(sp.sp_total_runs > 40);   /* intermediate runs */
	assert_int_equal(m.refs, total);
	for (int k = 0, n = 0; k < 400; k++) {
		n += m.want[k] != 0;
		if (k == 399)
			assert_int_equal(m.n, (uint64_t)n);
	}
	dd_scan_spill_fini(&sp);
}

static void test_spill_write_fault(void **state)
{
	dd_scan_spill sp;
	dd_scan_table t;
	dd_err err = {0};
	uint8_t h[DD_HASH_SIZE];
	size_t slot;
	bool found;

	(void)state;
	dd_scan_spill_init(&sp, tmpdir);
	assert_int_equal(dd_scan_table_init(&t, 48 * 100, 1), 0);
	hash_of(1, h);
	dd_scan_table_upsert(&t, h, &slot, &found);
	t.tb_ent[slot].se_refcnt = 1;
	dd_scan_table_sort(&t);
	dd_fault_arm(DD_FAULT_WRITE, 1, ENOSPC, 0);
	assert_int_equal(dd_scan_spill_run(&sp, &err, &t), DD_ENOSPC);
	assert_non_null(strstr(err.de_msg, "DD_ENOSPC"));
	dd_fault_disarm_all();
	dd_scan_table_fini(&t);
	dd_scan_spill_fini(&sp);

	/* No directory to spill in. */
	dd_scan_spill_init(&sp, "/nonexistent-dd-dir");
	assert_int_equal(dd_scan_table_init(&t, 48 * 100, 1), 0);
	assert_int_equal(dd_scan_spill_run(&sp, &err, &t), DD_ENOENT);
	dd_scan_table_fini(&t);
	dd_scan_spill_fini(&sp);
}

/* ---- the API against the store ------------------------------------------*/

static const uint32_t sizes3[] = {4096, 16384, 131072};

struct warns {
	int n;
	int code;
	char path[256];
	char msg[512];
};

static void warn_cb(void *ctx, const char *path, int code, const char *msg)
{
	struct warns *w = ctx;

	w->n++;
	w->code = code;
	snprintf(w->path, sizeof(w->path), "%s", path);
	snprintf(w->msg, sizeof(w->msg), "%s", msg);
}

/* Scans the images (as files) with opts; checks each block size against
 * a store. */
static void scan_vs_store(dd_scan_opts *so, uint8_t **img, size_t *len,
			  int nimg)
{
	char path[128];
	dd_scan *sc;
	dd_scan_info info = {.version = DD_SCAN_INFO_VERSION};

	assert_int_equal(dd_scan_new(&sc, so), 0);
	for (int i = 0; i < nimg; i++) {
		snprintf(path, sizeof(path), "%s/img%d", tmpdir, i);
		write_file(path, img[i], len[i]);
		assert_int_equal(dd_scan_add_path(sc, path), 0);
	}
	assert_int_equal(dd_scan_finish(sc), 0);
	assert_int_equal(dd_scan_info_get(sc, &info), 0);
	assert_int_equal(info.images, (uint64_t)nimg);
	assert_int_equal(info.skipped, 0);
	assert_int_equal(info.nblock_sizes, so->nblock_sizes);
	assert_int_equal(info.nresults, so->nblock_sizes *
			 (so->nchunkers ? so->nchunkers : 1));
	for (size_t i = 0; i < info.nresults; i++) {
		dd_scan_result r = {.version = DD_SCAN_RESULT_VERSION};
		size_t b = i % so->nblock_sizes;
		int chunker = so->nchunkers ? so->chunkers[i / so->nblock_sizes]
					    : DD_CHUNKER_FIXED;
		dd_stat st;

		bool est = so->nchunkers == 2 && !so->compress_exact &&
			   so->mode == DD_SCAN_EXACT &&
			   so->compress != DD_COMPRESS_NONE &&
			   chunker == DD_CHUNKER_FASTCDC;

		assert_int_equal(dd_scan_result_get(sc, i, &r), 0);
		assert_int_equal(r.block_size, so->block_sizes[b]);
		assert_int_equal(r.chunker, chunker);
		assert_int_equal(r.stored_estimated, est);
		/* the same figures as the store's, SHA-256 keyed */
		assert_int_equal(r.key_fast, so->nchunkers == 2 &&
				 !so->compress_exact &&
				 chunker == DD_CHUNKER_FASTCDC);
		store_stat(chunker, so->block_sizes[b], img, len, nimg, &st);
		if (est)
			assert_estimate_of_store(&r, &st);
		else
			assert_same_as_store(&r, &st);
		assert_true(r.dedup_error == 0 && r.compress_error == 0);
		if (so->mem_limit && so->mem_limit < 2 * MiB)
			assert_true(r.spill_runs > 1);
		else
			assert_int_equal(r.spill_runs, 0);
		snprintf(path, sizeof(path), "rm -rf %s/store-%u", tmpdir,
			 so->block_sizes[b]);
		assert_int_equal(system(path), 0);
	}
	dd_scan_free(sc);
}

#define NIMG 6

static void make_images(uint8_t **img, size_t *len)
{
	make_pieces();
	th_rng_state = 12345;
	/* An empty image, a short one, a zero short tail, several sizes. */
	img[0] = make_image(0, 0, NPIECES, &len[0]);
	img[1] = make_image(0, 100, NPIECES, &len[1]);
	img[2] = make_image(700, 3000, NPIECES, &len[2]);
	img[3] = make_image(1500, 0, 16, &len[3]);
	img[4] = make_image(33, 1, NPIECES, &len[4]);
	img[4][len[4] - 1] = 0;
	/* Many distinct blocks, the last third copies of the first: with a
	 * small memory their entries meet again only in the merge. */
	img[5] = make_image(3000, 0, NPIECES, &len[5]);
	for (size_t i = 0; i < 2000; i++)
		memcpy(img[5] + i * 4096 + 8, &i, sizeof(i));
	memcpy(img[5] + 2000 * 4096, img[5], 1000 * 4096);
}

static void free_images(uint8_t **img, int n)
{
	for (int i = 0; i < n; i++)
		free(img[i]);
}

static void test_exact_equals_store(void **state)
{
	dd_scan_opts so = DD_SCAN_OPTS_INIT;
	uint8_t *img[NIMG];
	size_t len[NIMG];

	(void)state;
	make_images(img, len);
	so.block_sizes = sizes3;
	so.nblock_sizes = 3;
	scan_vs_store(&so, img, len, NIMG);
	free_images(img, NIMG);
}

/* --compress none reads small-block regions into each worker's own
 * buffer (several windows of the largest size a region): the dedup
 * figures are those of the zstd scan, which equal the store's. */
static void test_none_equals_zstd(void **state)
{
	dd_scan_opts so = DD_SCAN_OPTS_INIT;
	dd_scan_result rz = {.version = DD_SCAN_RESULT_VERSION};
	dd_scan_result rn = {.version = DD_SCAN_RESULT_VERSION};
	dd_scan *sz, *sn;
	uint8_t *img[NIMG];
	size_t len[NIMG];
	char path[128];

	(void)state;
	make_images(img, len);
	so.block_sizes = sizes3;
	so.nblock_sizes = 2;       /* 4K and 16K: a region holds 8 windows */
	assert_int_equal(dd_scan_new(&sz, &so), 0);
	so.compress = DD_COMPRESS_NONE;
	assert_int_equal(dd_scan_new(&sn, &so), 0);
	for (int i = 0; i < NIMG; i++) {
		snprintf(path, sizeof(path), "%s/img%d", tmpdir, i);
		write_file(path, img[i], len[i]);
		assert_int_equal(dd_scan_add_path(sz, path), 0);
		assert_int_equal(dd_scan_add_path(sn, path), 0);
	}
	assert_int_equal(dd_scan_finish(sz), 0);
	assert_int_equal(dd_scan_finish(sn), 0);
	for (size_t b = 0; b < 2; b++) {
		assert_int_equal(dd_scan_result_get(sz, b, &rz), 0);
		assert_int_equal(dd_scan_result_get(sn, b, &rn), 0);
		assert_int_equal(rn.blocks, rz.blocks);
		assert_int_equal(rn.zero_blocks, rz.zero_blocks);
		assert_int_equal(rn.referenced_bytes, rz.referenced_bytes);
		assert_int_equal(rn.unique_blocks, rz.unique_blocks);
		assert_int_equal(rn.unique_bytes, rz.unique_bytes);
		assert_int_equal(rn.stored_bytes, rn.unique_bytes);
		assert_true(rn.dedup_ratio == rz.dedup_ratio);
	}
	dd_scan_free(sz);
	dd_scan_free(sn);
	free_images(img, NIMG);
}

/* 256 KiB: tables of a few hundred entries, so the scan spills many
 * runs; the merged figures are still the store's, exactly. */
static void test_exact_spill_equals_store(void **state)
{
	dd_scan_opts so = DD_SCAN_OPTS_INIT;
	uint8_t *img[NIMG];
	size_t len[NIMG];

	(void)state;
	make_images(img, len);
	so.block_sizes = sizes3;
	so.nblock_sizes = 2;       /* 4K and 16K: enough blocks to spill */
	so.mem_limit = 256 * KiB;
	so.tmpdir = tmpdir;
	so.threads = 1;
	scan_vs_store(&so, img, len, NIMG);
	free_images(img, NIMG);
}

/* Both chunkers in one pass, FastCDC beside two fixed sizes (and an
 * image with a long run of zeros: one hole per run, as a fastcdc store
 * counts it): with compress_exact each result equals its own store's
 * figures, in memory and spilled; without, the FastCDC results' are
 * exact but for the compressed sizes, estimated within EST_TOLERANCE,
 * and the fixed results exact. */
static void test_exact_both_chunkers(void **state)
{
	static const int both[] = {DD_CHUNKER_FIXED, DD_CHUNKER_FASTCDC};
	dd_scan_opts so = DD_SCAN_OPTS_INIT;
	uint8_t *img[NIMG + 1];
	size_t len[NIMG + 1];

	(void)state;
	make_images(img, len);
	img[NIMG] = make_image(400, 777, NPIECES, &len[NIMG]);
	memset(img[NIMG] + 100 * 4096, 0, 150 * 4096);
	so.block_sizes = sizes3;
	so.nblock_sizes = 2;
	so.chunkers = both;
	so.nchunkers = 2;
	for (int exact = 1; exact >= 0; exact--) {
		so.compress_exact = exact;
		so.mem_limit = 0;
		so.threads = 0;
		scan_vs_store(&so, img, len, NIMG + 1);
		so.mem_limit = 256 * KiB;
		so.tmpdir = tmpdir;
		so.threads = 1;
		scan_vs_store(&so, img, len, NIMG + 1);
	}
	free_images(img, NIMG + 1);
}

/* The estimate's arithmetic (estimate.c): a block takes each source
 * block's compressed size in proportion to the bytes it shares with it;
 * a part no source block covers yet takes the ratio of the nearest one
 * before it; zero blocks weigh nothing; never above the block's size,
 * never 0; and trimming keeps what later blocks need. */
static void test_estimate_arith(void **state)
{
	dd_scan_est e;

	(void)state;
	dd_scan_est_init(&e);
	/* image 1: [0,100) at 1/4, [100,200) raw, [200,300) zeros */
	assert_int_equal(dd_scan_est_add(&e, 1, 0, 100, 25), 0);
	assert_int_equal(dd_scan_est_add(&e, 1, 100, 100, 100), 0);
	assert_int_equal(dd_scan_est_add(&e, 1, 200, 100, 0), 0);
	assert_int_equal(dd_scan_est_psize(&e, 1, 0, 100), 25);
	assert_int_equal(dd_scan_est_psize(&e, 1, 60, 80), 10 + 40);
	assert_int_equal(dd_scan_est_psize(&e, 1, 150, 100), 50);
	assert_int_equal(dd_scan_est_psize(&e, 1, 200, 100), 1);
	/* past the last segment: its ratio (zeros), then the one of
	 * [100,200) for a block that starts in it */
	assert_int_equal(dd_scan_est_psize(&e, 1, 250, 150), 1);
	assert_int_equal(dd_scan_est_psize(&e, 1, 180, 200), 20);
	/* image 2 has no segment yet: the ratio of all so far, 125/300 */
	assert_int_equal(dd_scan_est_psize(&e, 2, 0, 300), 125);
	assert_int_equal(dd_scan_est_add(&e, 2, 0, 1000, 1000), 0);
	assert_int_equal(dd_scan_est_psize(&e, 2, 500, 400), 400);
	/* trimming to image 1 offset 250 keeps [200,300) onwards, and the
	 * segment before it (the ratio of the bytes nearest a block past
	 * the last one) */
	dd_scan_est_trim(&e, 1, 250);
	assert_int_equal(e.es_n, 3);
	assert_int_equal(dd_scan_est_psize(&e, 1, 150, 100), 50);
	dd_scan_est_trim(&e, 2, 0);
	assert_int_equal(e.es_n, 1);
	assert_int_equal(dd_scan_est_psize(&e, 2, 0, 2000), 2000);
	dd_scan_est_fini(&e);
}

/* Accuracy on generated data of known compressibility, against the
 * compressed figure (compress_exact): 12 MiB of 4 KiB pieces whose bytes
 * take 1 to 8 random bits each, in runs of 1..8 pieces (regions of every
 * compressibility between, at every FastCDC average), and a second image
 * holding half of the first shifted by 1000 bytes, then 4-symbol text.
 * The estimate was within 1.1% here; EST_TOLERANCE is asserted. */
static void test_estimate_accuracy(void **state)
{
	static const int both[] = {DD_CHUNKER_FIXED, DD_CHUNKER_FASTCDC};
	static const uint32_t avgs[] = {4096, 16384, 131072};
	dd_scan_opts so = DD_SCAN_OPTS_INIT;
	size_t n = 3072, len = n * 4096;
	uint8_t *img = malloc(len), *img2 = malloc(len);
	dd_scan *sc[2];
	char path[2][128];

	(void)state;
	assert_non_null(img);
	assert_non_null(img2);
	th_rng_state = 777;
	for (size_t i = 0; i < n;) {
		size_t run = 1 + th_rng() % 8;
		unsigned bits = 1 + (unsigned)(th_rng() % 8);

		for (; run-- && i < n; i++)
			for (size_t j = 0; j < 4096; j++)
				img[i * 4096 + j] = (uint8_t)(th_rng() >>
							      (64 - bits));
	}
	memcpy(img2, img + 1000, len / 2);
	for (size_t i = len / 2; i < len; i++)
		img2[i] = (uint8_t)"ab c"[th_rng() % 4];
	for (int i = 0; i < 2; i++) {
		snprintf(path[i], sizeof(path[i]), "%s/acc%d", tmpdir, i);
		write_file(path[i], i ? img2 : img, len);
	}
	so.block_sizes = avgs;
	so.nblock_sizes = 3;
	so.chunkers = both;
	so.nchunkers = 2;
	for (int exact = 0; exact < 2; exact++) {
		so.compress_exact = exact;
		assert_int_equal(dd_scan_new(&sc[exact], &so), 0);
		for (int i = 0; i < 2; i++)
			assert_int_equal(dd_scan_add_path(sc[exact], path[i]), 0);
		assert_int_equal(dd_scan_finish(sc[exact]), 0);
	}
	for (size_t i = 0; i < 6; i++) {
		dd_scan_result re = {.version = DD_SCAN_RESULT_VERSION};
		dd_scan_result rx = {.version = DD_SCAN_RESULT_VERSION};
		double rel;

		assert_int_equal(dd_scan_result_get(sc[0], i, &re), 0);
		assert_int_equal(dd_scan_result_get(sc[1], i, &rx), 0);
		assert_int_equal(rx.stored_estimated, 0);
		assert_int_equal(re.stored_estimated, i >= 3);
		assert_int_equal(re.unique_blocks, rx.unique_blocks);
		assert_int_equal(re.unique_bytes, rx.unique_bytes);
		/* the data compresses: a wrong estimate would show */
		assert_true(rx.compress_ratio > 1.3);
		rel = fabs((double)re.stored_bytes - (double)rx.stored_bytes) /
		      (double)rx.stored_bytes;
		if (getenv("DD_TEST_VERBOSE"))
			fprintf(stderr, "avg %u: estimated %llu, compressed "
				"%llu (%+.3f%%)\n", re.block_size,
				(unsigned long long)re.stored_bytes,
				(unsigned long long)rx.stored_bytes,
				100.0 * ((double)re.stored_bytes /
					 (double)rx.stored_bytes - 1.0));
		if (i < 3)
			assert_int_equal(re.stored_bytes, rx.stored_bytes);
		else
			assert_true(rel <= EST_TOLERANCE);
	}
	dd_scan_free(sc[0]);
	dd_scan_free(sc[1]);
	free(img);
	free(img2);
}

static void test_result_version1(void **state)
{
	static const int cdc = DD_CHUNKER_FASTCDC;
	dd_scan_opts so = DD_SCAN_OPTS_INIT;
	struct {
		dd_scan_result r;
		int tail;
	} v1;
	dd_scan *sc;
	uint8_t buf[70000];
	char path[128];

	(void)state;
	so.chunkers = &cdc;
	so.nchunkers = 1;
	assert_int_equal(dd_scan_new(&sc, &so), 0);
	memset(buf, 7, sizeof(buf));
	snprintf(path, sizeof(path), "%s/v1", tmpdir);
	write_file(path, buf, sizeof(buf));
	assert_int_equal(dd_scan_add_path(sc, path), 0);
	assert_int_equal(dd_scan_finish(sc), 0);
	memset(&v1, 0x5a, sizeof(v1));
	v1.r.version = 1;
	assert_int_equal(dd_scan_result_get(sc, 0, &v1.r), 0);
	assert_int_equal(v1.r.blocks, 1);
	assert_int_equal(v1.r.chunker, 0x5a5a5a5a);  /* not written */
	assert_int_equal(v1.tail, 0x5a5a5a5a);
	dd_scan_free(sc);
}

/* Sample mode with room for everything keeps every block: exact. */
static void test_sample_rate1_exact(void **state)
{
	dd_scan_opts so = DD_SCAN_OPTS_INIT;
	uint8_t *img[NIMG];
	size_t len[NIMG];

	(void)state;
	make_images(img, len);
	so.block_sizes = sizes3;
	so.nblock_sizes = 3;
	so.mode = DD_SCAN_SAMPLE;
	so.compress = DD_COMPRESS_ZSTD;
	scan_vs_store(&so, img, len, NIMG);
	free_images(img, NIMG);
}

/* Many distinct blocks, a fixed rate of 1/8: referenced and zero counts
 * stay exact, the estimates fall within the stated bounds. */
static void test_sample_bounds(void **state)
{
	static const uint32_t bs4k = 4096;
	dd_scan_opts so = DD_SCAN_OPTS_INIT;
	dd_scan_result r = {.version = DD_SCAN_RESULT_VERSION};
	size_t n = 16384, len = n * 4096;
	uint8_t *p = malloc(len);
	uint64_t uniq = 0;
	int fds[2];
	dd_scan *sc;

	(void)state;
	assert_non_null(p);
	th_rng_state = 42;
	/* Block i is distinct for i % 4 != 3, else a copy of block i-1. */
	for (size_t i = 0; i < n; i++) {
		if (i % 4 == 3) {
			memcpy(p + i * 4096, p + (i - 1) * 4096, 4096);
			continue;
		}
		for (size_t j = 0; j < 4096; j += 8) {
			uint64_t v = th_rng() & 0x0f0f0f0f0f0f0f0full;

			memcpy(p + i * 4096 + j, &v, 8);
		}
		uniq++;
	}
	so.block_sizes = &bs4k;
	so.nblock_sizes = 1;
	so.mode = DD_SCAN_SAMPLE;
	so.sample_shift = 3;
	assert_int_equal(dd_scan_new(&sc, &so), 0);
	/* Through a pipe: a stream, as stdin would be. */
	assert_int_equal(pipe(fds), 0);
	if (fork() == 0) {
		close(fds[0]);
		_exit(write(fds[1], p, len) == (ssize_t)len ? 0 : 1);
	}
	close(fds[1]);
	assert_int_equal(dd_scan_add_fd(sc, fds[0], "pipe"), 0);
	close(fds[0]);
	assert_true(wait(NULL) > 0);
	assert_int_equal(dd_scan_finish(sc), 0);
	assert_int_equal(dd_scan_result_get(sc, 0, &r), 0);
	assert_int_equal(r.mode, DD_SCAN_SAMPLE);
	assert_int_equal(r.sample_shift, 3);
	assert_int_equal(r.referenced_blocks, n);
	assert_int_equal(r.referenced_bytes, len);
	assert_int_equal(r.zero_blocks, 0);
	assert_true(r.confidence == 0.99);
	assert_true(r.sampled_blocks > uniq / 8 * 8 / 10);
	assert_true(r.dedup_error > 0 && r.dedup_error < 0.2);
	assert_true(fabs(r.dedup_ratio - (double)n / (double)uniq) /
		    ((double)n / (double)uniq) <= r.dedup_error);
	/* Nibble data compresses to about half, the same in the sample. */
	assert_true(r.compress_error > 0 && r.compress_error < 0.2);
	assert_true(r.compress_ratio > 1.5);
	dd_scan_free(sc);
	free(p);
}

/* A fixed memory: the sample rate adapts until the table fits. */
static void test_sample_adapts(void **state)
{
	static const uint32_t bs4k = 4096;
	dd_scan_opts so = DD_SCAN_OPTS_INIT;
	dd_scan_result r = {.version = DD_SCAN_RESULT_VERSION};
	size_t n = 20000, len = n * 4096;
	uint8_t *p = malloc(len);
	char path[128];
	dd_scan *sc;

	(void)state;
	assert_non_null(p);
	th_rng_state = 7;
	for (size_t i = 0; i < len; i += 8) {
		uint64_t v = th_rng();

		memcpy(p + i, &v, 8);
	}
	snprintf(path, sizeof(path), "%s/rand", tmpdir);
	write_file(path, p, len);
	so.block_sizes = &bs4k;
	so.nblock_sizes = 1;
	so.mode = DD_SCAN_SAMPLE;
	so.mem_limit = 1 * MiB;
	so.compress = DD_COMPRESS_NONE;
	assert_int_equal(dd_scan_new(&sc, &so), 0);
	assert_int_equal(dd_scan_add_path(sc, path), 0);
	assert_int_equal(dd_scan_finish(sc), 0);
	assert_int_equal(dd_scan_result_get(sc, 0, &r), 0);
	assert_true(r.sample_shift >= 1);
	assert_int_equal(r.spill_runs, 0);
	assert_true(r.compress_ratio == 1.0 && r.compress_error == 0.0);
	assert_true(r.dedup_ratio >= 1.0);
	assert_true(r.dedup_ratio - 1.0 <= r.dedup_error);
	dd_scan_free(sc);
	free(p);
}

/* ---- walks and warnings -------------------------------------------------*/

static void test_walk(void **state)
{
	static const uint32_t bs4k = 4096;
	dd_scan_opts so = DD_SCAN_OPTS_INIT;
	dd_scan_info info = {.version = DD_SCAN_INFO_VERSION};
	dd_scan_result r = {.version = DD_SCAN_RESULT_VERSION};
	struct warns w = {0};
	char d[128], p[256];
	dd_scan *sc;

	(void)state;
	make_pieces();
	snprintf(d, sizeof(d), "%s/tree", tmpdir);
	mkdir(d, 0755);
	snprintf(p, sizeof(p), "%s/sub", d);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/sub/a", d);
	write_file(p, pieces[0], 4096);
	snprintf(p, sizeof(p), "%s/b", d);
	write_file(p, pieces[1], 4096);
	/* A symlink to a file outside the tree: never followed. */
	snprintf(p, sizeof(p), "%s/outside", tmpdir);
	write_file(p, pieces[2], 4096);
	snprintf(p, sizeof(p), "%s/link", d);
	assert_int_equal(symlink("../outside", p), 0);
	snprintf(p, sizeof(p), "%s/fifo", d);
	assert_int_equal(mkfifo(p, 0644), 0);
	snprintf(p, sizeof(p), "%s/locked", d);
	write_file(p, pieces[3], 4096);
	chmod(p, 0);
	so.block_sizes = &bs4k;
	so.nblock_sizes = 1;
	so.warn = warn_cb;
	so.warn_ctx = &w;
	assert_int_equal(dd_scan_new(&sc, &so), 0);
	assert_int_equal(dd_scan_add_path(sc, d), 0);
	snprintf(p, sizeof(p), "%s/vanished", tmpdir);
	assert_int_equal(dd_scan_add_path(sc, p), 0);
	assert_int_equal(w.code, DD_ENOENT);
	assert_non_null(strstr(w.path, "vanished"));
	assert_int_equal(dd_scan_finish(sc), 0);
	assert_int_equal(dd_scan_info_get(sc, &info), 0);
	assert_int_equal(info.special, 1);
	assert_int_equal(dd_scan_result_get(sc, 0, &r), 0);
	if (geteuid() == 0) {       /* root reads mode-0 files */
		assert_int_equal(info.images, 3);
		assert_int_equal(info.skipped, 1);
	} else {
		assert_int_equal(info.images, 2);
		assert_int_equal(info.skipped, 2);
	}
	assert_int_equal(r.unique_blocks, info.images);
	dd_scan_free(sc);
}

static void test_sparse(void **state)
{
	static const uint32_t sz[] = {4096, 65536};
	dd_scan_opts so = DD_SCAN_OPTS_INIT;
	dd_scan_result r = {.version = DD_SCAN_RESULT_VERSION};
	char p[128];
	int fd;
	dd_scan *sc;

	(void)state;
	make_pieces();
	/* 64 MiB + 100 bytes, data only at 1 MiB and in the last 100 bytes. */
	snprintf(p, sizeof(p), "%s/sparse", tmpdir);
	fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, pieces[5], 4096, MiB), 4096);
	assert_int_equal(pwrite(fd, pieces[6], 100, 64 * MiB), 100);
	close(fd);
	so.block_sizes = sz;
	so.nblock_sizes = 2;
	assert_int_equal(dd_scan_new(&sc, &so), 0);
	assert_int_equal(dd_scan_add_path(sc, p), 0);
	assert_int_equal(dd_scan_finish(sc), 0);
	assert_int_equal(dd_scan_result_get(sc, 0, &r), 0);
	assert_int_equal(r.logical_bytes, 64 * MiB + 100);
	assert_int_equal(r.blocks, 16384 + 1);
	assert_int_equal(r.referenced_blocks, 2);
	assert_int_equal(r.zero_blocks, 16384 - 1);
	assert_int_equal(dd_scan_result_get(sc, 1, &r), 0);
	assert_int_equal(r.blocks, 1024 + 1);
	assert_int_equal(r.referenced_blocks, 2);
	assert_int_equal(r.unique_bytes, 65536 + 100);
	dd_scan_free(sc);
}

/* A file that is shorter than its size said when it was opened. */
static void test_shrunk_file(void **state)
{
	dd_scan_opts so = DD_SCAN_OPTS_INIT;
	dd_scan_info info = {.version = DD_SCAN_INFO_VERSION};
	dd_scan_result r = {.version = DD_SCAN_RESULT_VERSION};
	struct warns w = {0};
	char p[128];
	int fd;
	dd_scan *sc;

	(void)state;
	make_pieces();
	snprintf(p, sizeof(p), "%s/shrinks", tmpdir);
	write_file(p, pieces[9], 4096);
	so.warn = warn_cb;
	so.warn_ctx = &w;
	assert_int_equal(dd_scan_new(&sc, &so), 0);
	fd = open(p, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(dd_scan_image(sc, fd, p, 8192, true), 0);
	close(fd);
	assert_int_equal(w.n, 1);
	assert_non_null(strstr(w.msg, "shrank"));
	assert_non_null(strstr(w.msg, "4096 of 8192"));
	assert_int_equal(dd_scan_finish(sc), 0);
	assert_int_equal(dd_scan_info_get(sc, &info), 0);
	assert_int_equal(info.skipped, 1);
	assert_int_equal(dd_scan_result_get(sc, 0, &r), 0);
	assert_int_equal(r.referenced_bytes, 4096);   /* what was read */
	dd_scan_free(sc);
}

/* A regular file is handed to the hash stage as a range, read later on
 * the pool: bytes it no longer has by then (it shrank) or that fail to
 * read count as zeros, with one warning for the file. */
static void test_range_read_late(void **state)
{
	const size_t n = 3 * 131072 + 100;
	dd_scan_opts so = DD_SCAN_OPTS_INIT;
	dd_scan_info info = {.version = DD_SCAN_INFO_VERSION};
	dd_scan_result r = {.version = DD_SCAN_RESULT_VERSION};
	struct warns w = {0};
	size_t len;
	uint8_t *img;
	char p[128];
	dd_scan *sc;

	(void)state;
	make_pieces();
	th_rng_state = 77;
	img = make_image(n / 4096, n % 4096, NPIECES, &len);
	for (size_t i = 0; i < len; i++) /* no zero block of its own */
		img[i] |= 1;
	snprintf(p, sizeof(p), "%s/late", tmpdir);
	so.warn = warn_cb;
	so.warn_ctx = &w;

	/* shrinks to one block after it was handed over */
	write_file(p, img, len);
	assert_int_equal(dd_scan_new(&sc, &so), 0);
	assert_int_equal(dd_scan_add_path(sc, p), 0);
	assert_int_equal(truncate(p, 131072), 0);
	assert_int_equal(dd_scan_finish(sc), 0);
	assert_int_equal(w.n, 1);
	assert_non_null(strstr(w.msg, "shrank"));
	assert_int_equal(dd_scan_info_get(sc, &info), 0);
	assert_int_equal(info.skipped, 1);
	assert_int_equal(dd_scan_result_get(sc, 0, &r), 0);
	assert_int_equal(r.blocks, 4);
	assert_int_equal(r.zero_blocks, 3);
	assert_int_equal(r.referenced_blocks, 1);
	dd_scan_free(sc);

	/* every read of the range fails */
	w.n = 0;
	write_file(p, img, len);
	assert_int_equal(dd_scan_new(&sc, &so), 0);
	assert_int_equal(dd_scan_add_path(sc, p), 0);
	dd_fault_arm(DD_FAULT_READ, 1, EIO, 1);
	assert_int_equal(dd_scan_finish(sc), 0);
	dd_fault_disarm_all();
	assert_int_equal(w.n, 1);
	assert_int_equal(w.code, DD_EIO);
	assert_int_equal(dd_scan_result_get(sc, 0, &r), 0);
	assert_int_equal(r.blocks, 4);
	assert_int_equal(r.zero_blocks, 4);
	dd_scan_free(sc);
	free(img);
}

static void test_read_fault_is_a_warning(void **state)
{
	dd_scan_opts so = DD_SCAN_OPTS_INIT;
	struct warns w = {0};
	dd_scan_info info = {.version = DD_SCAN_INFO_VERSION};
	char p[128];
	dd_scan *sc;

	(void)state;
	make_pieces();
	snprintf(p, sizeof(p), "%s/f", tmpdir);
	write_file(p, pieces[0], 4096);
	so.warn = warn_cb;
	so.warn_ctx = &w;
	assert_int_equal(dd_scan_new(&sc, &so), 0);
	dd_fault_arm(DD_FAULT_READ, 1, EIO, 0);
	assert_int_equal(dd_scan_add_path(sc, p), 0);
	dd_fault_disarm_all();
	assert_int_equal(w.n, 1);
	assert_int_equal(w.code, DD_EIO);
	assert_non_null(strstr(w.msg, "read error"));
	dd_fault_arm(DD_FAULT_OPEN, 1, EACCES, 0);
	assert_int_equal(dd_scan_add_path(sc, p), 0);
	dd_fault_disarm_all();
	assert_int_equal(w.code, DD_EPERM);
	assert_int_equal(dd_scan_add_path(sc, p), 0);
	assert_int_equal(dd_scan_finish(sc), 0);
	assert_int_equal(dd_scan_info_get(sc, &info), 0);
	assert_int_equal(info.skipped, 2);
	assert_int_equal(info.images, 2);
	dd_scan_free(sc);
}

/* A spill that cannot be written stops the scan with the code. */
static void test_spill_fault_fails_scan(void **state)
{
	static const uint32_t bs4k = 4096;
	dd_scan_opts so = DD_SCAN_OPTS_INIT;
	uint8_t *img;
	size_t len;
	char p[128];
	dd_scan *sc;
	int rc;

	(void)state;
	make_pieces();
	th_rng_state = 99;
	img = make_image(3000, 0, NPIECES, &len);
	for (size_t i = 0; i < len; i += 4096)   /* all distinct */
		memcpy(img + i, &i, sizeof(i));
	snprintf(p, sizeof(p), "%s/many", tmpdir);
	write_file(p, img, len);
	so.block_sizes = &bs4k;
	so.nblock_sizes = 1;
	so.mem_limit = 256 * KiB;
	so.tmpdir = tmpdir;
	assert_int_equal(dd_scan_new(&sc, &so), 0);
	dd_fault_arm(DD_FAULT_WRITE, 1, ENOSPC, 1);
	rc = dd_scan_add_path(sc, p);
	if (rc == 0)
		rc = dd_scan_finish(sc);
	dd_fault_disarm_all();
	assert_int_equal(rc, DD_ENOSPC);
	assert_non_null(strstr(dd_scan_errmsg(sc), "DD_ENOSPC"));
	assert_int_equal(dd_scan_finish(sc), DD_ESTATE);
	dd_scan_free(sc);
	free(img);
}

/* ---- misuse -------------------------------------------------------------*/

static void test_bad_options(void **state)
{
	static const uint32_t bad[][2] = {
		{3000, 0}, {2048, 0}, {2 * MiB, 0}, {4096, 4096}, {0, 0},
	};
	dd_scan_opts so = DD_SCAN_OPTS_INIT;
	dd_scan_result r = {.version = DD_SCAN_RESULT_VERSION};
	dd_scan *sc = NULL;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		so.block_sizes = bad[i];
		so.nblock_sizes = bad[i][1] ? 2 : 1;
		assert_int_equal(dd_scan_new(&sc, &so), DD_EINVAL);
		assert_non_null(strstr(dd_last_errmsg(), "DD_EINVAL"));
	}
	so = (dd_scan_opts)DD_SCAN_OPTS_INIT;
	so.nblock_sizes = 10;
	assert_int_equal(dd_scan_new(&sc, &so), DD_EINVAL);
	so = (dd_scan_opts)DD_SCAN_OPTS_INIT;
	so.version = 0;
	assert_int_equal(dd_scan_new(&sc, &so), DD_EINVAL);
	so = (dd_scan_opts)DD_SCAN_OPTS_INIT;
	so.compress_level = 20;
	assert_int_equal(dd_scan_new(&sc, &so), DD_EINVAL);
	so = (dd_scan_opts)DD_SCAN_OPTS_INIT;
	so.mode = 7;
	assert_int_equal(dd_scan_new(&sc, &so), DD_EINVAL);
	/* chunkers: unknown, twice, a FastCDC average of 1 MiB, NULL */
	{
		static const int c_bad[] = {DD_CHUNKER_FASTCDC, 9};
		static const int c_twice[] = {DD_CHUNKER_FIXED,
					      DD_CHUNKER_FIXED};
		static const int c_both[] = {DD_CHUNKER_FIXED,
					     DD_CHUNKER_FASTCDC};
		static const uint32_t one_mib = MiB;

		so = (dd_scan_opts)DD_SCAN_OPTS_INIT;
		so.chunkers = c_bad;
		so.nchunkers = 2;
		assert_int_equal(dd_scan_new(&sc, &so), DD_EINVAL);
		so.chunkers = c_twice;
		assert_int_equal(dd_scan_new(&sc, &so), DD_EINVAL);
		so.chunkers = c_both;
		so.block_sizes = &one_mib;
		so.nblock_sizes = 1;
		assert_int_equal(dd_scan_new(&sc, &so), DD_EINVAL);
		assert_non_null(strstr(dd_last_errmsg(), "FastCDC"));
		so.chunkers = NULL;
		assert_int_equal(dd_scan_new(&sc, &so), DD_EINVAL);
	}
	assert_int_equal(dd_scan_new(NULL, NULL), DD_EINVAL);
	assert_null(sc);

	/* States: results only after finish, nothing added after it. */
	assert_int_equal(dd_scan_new(&sc, NULL), 0);
	assert_int_equal(dd_scan_result_get(sc, 0, &r), DD_ESTATE);
	assert_int_equal(dd_scan_add_path(sc, ""), DD_EINVAL);
	assert_int_equal(dd_scan_add_fd(sc, -1, NULL), DD_EINVAL);
	assert_int_equal(dd_scan_finish(sc), 0);
	assert_int_equal(dd_scan_result_get(sc, 0, &r), 0);
	assert_int_equal(r.block_size, DD_BLOCK_SIZE_DEFAULT);
	assert_int_equal(r.blocks, 0);
	assert_true(r.dedup_ratio == 1.0 && r.compress_ratio == 1.0);
	assert_int_equal(dd_scan_result_get(sc, 1, &r), DD_EINVAL);
	r.version = 99;
	assert_int_equal(dd_scan_result_get(sc, 0, &r), DD_EINVAL);
	assert_int_equal(dd_scan_add_path(sc, "/"), DD_ESTATE);
	assert_int_equal(dd_scan_finish(sc), DD_ESTATE);
	assert_string_equal(dd_scan_errmsg(sc),
			    "DD_ESTATE: scan is finished");
	dd_scan_free(sc);
	dd_scan_free(NULL);
	assert_int_equal(dd_scan_add_path(NULL, "/"), DD_EINVAL);
	assert_int_equal(dd_scan_path_bytes("/nonexistent-dd", &r.blocks),
			 DD_ENOENT);
}

static void test_alloc_faults(void **state)
{
	dd_scan_opts so = DD_SCAN_OPTS_INIT;
	dd_scan *sc;
	int rc = DD_ENOMEM;

	(void)state;
	so.block_sizes = sizes3;
	so.nblock_sizes = 3;
	/* descriptor 0 must survive a half-built scan: fill it if closed */
	if (fcntl(0, F_GETFD) < 0)
		assert_int_equal(open("/dev/null", O_RDONLY), 0);
	/* The Nth allocation fails, N rising until creation succeeds; every
	 * failure is a clean DD_ENOMEM (ASan checks for leaks). */
	for (uint64_t n = 1; rc == DD_ENOMEM && n < 200; n++) {
		sc = NULL;
		dd_fault_arm(DD_FAULT_ALLOC, n, ENOMEM, 0);
		rc = dd_scan_new(&sc, &so);
		dd_fault_disarm_all();
		if (rc == 0)
			dd_scan_free(sc);
		else
			assert_int_equal(rc, DD_ENOMEM);
		assert_true(fcntl(0, F_GETFD) >= 0);
	}
	assert_int_equal(rc, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table_upsert),
		cmocka_unit_test(test_table_grows),
		cmocka_unit_test(test_sampled_bits),
		cmocka_unit_test(test_table_subsample),
		cmocka_unit_test(test_rec_encoding),
		cmocka_unit_test(test_spill_merge),
		cmocka_unit_test(test_spill_write_fault),
		cmocka_unit_test(test_exact_equals_store),
		cmocka_unit_test(test_none_equals_zstd),
		cmocka_unit_test(test_exact_spill_equals_store),
		cmocka_unit_test(test_exact_both_chunkers),
		cmocka_unit_test(test_estimate_arith),
		cmocka_unit_test(test_estimate_accuracy),
		cmocka_unit_test(test_result_version1),
		cmocka_unit_test(test_sample_rate1_exact),
		cmocka_unit_test(test_sample_bounds),
		cmocka_unit_test(test_sample_adapts),
		cmocka_unit_test(test_walk),
		cmocka_unit_test(test_sparse),
		cmocka_unit_test(test_shrunk_file),
		cmocka_unit_test(test_range_read_late),
		cmocka_unit_test(test_read_fault_is_a_warning),
		cmocka_unit_test(test_spill_fault_fails_scan),
		cmocka_unit_test(test_bad_options),
		cmocka_unit_test(test_alloc_faults),
	};

	return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
