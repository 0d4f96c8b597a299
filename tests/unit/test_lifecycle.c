/*
 * test_lifecycle.c -- the snapshot lifecycle calls of store/: space per
 * snapshot (usage.c: dd_snapshot_usage_get, dd_writer_stats_get),
 * differences (diff.c: dd_diff_*) and retention applied to a store
 * (prune.c: dd_prune; the selection itself is test_prune.c's).
 *
 * The figures are checked against models computed from the images' bytes
 * alone: a block is a snapshot's own when no other image holds the same
 * bytes, and two blocks differ when their bytes do.  Stores use the weak
 * test hash in verify mode, so that colliding blocks (variants) are part
 * of every check, and no compression, so that a block's stored bytes are
 * its length.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "pack/pack.h"
#include "store/store_internal.h"

#define KiB 1024u
#define BS (4 * KiB)
#define REC DD_PACK_REC_HDR_SIZE

static dd_store *create(const char *path, int verify, int comp, int kind)
{
	return th_create(path, BS, verify, comp, kind);
}

/* An image: size bytes, block i from pool block spec[i] (0: zeros). */
typedef struct img {
	const char *name;
	uint8_t *data;
	size_t size;
	int *spec;
	size_t nblk;
	int live;
} img;

static uint8_t *pool;      /* POOL blocks of random bytes */
#define POOL 400

static void pool_init(void)
{
	if (pool)
		return;
	pool = malloc((size_t)POOL * BS);
	assert_non_null(pool);
	th_rng_state = 19;
	for (size_t i = 0; i < (size_t)POOL * BS / 8; i++) {
		uint64_t v = th_rng();

		memcpy(pool + 8 * i, &v, 8);
	}
}

static void img_make(img *im, const char *name, const int *spec, size_t nblk,
		     size_t size)
{
	im->name = name;
	im->size = size;
	im->nblk = nblk;
	im->live = 1;
	im->spec = malloc(nblk * sizeof(int));
	im->data = calloc(1, nblk * BS + 1);
	assert_true(im->spec && im->data);
	assert_true(size <= nblk * BS && size > (nblk - 1) * BS);
	memcpy(im->spec, spec, nblk * sizeof(int));
	for (size_t i = 0; i < nblk; i++)
		if (spec[i])
			memcpy(im->data + i * BS,
			       pool + (size_t)(spec[i] - 1) * BS, BS);
	memset(im->data + size, 0, nblk * BS - size);
}

static void img_free(img *im)
{
	free(im->spec);
	free(im->data);
}

static size_t blk_len(const img *im, size_t i)
{
	return i + 1 < im->nblk ? BS : im->size - i * BS;
}

static int blk_zero(const img *im, size_t i)
{
	const uint8_t *p = im->data + i * BS;
	size_t n = blk_len(im, i);

	for (size_t k = 0; k < n; k++)
		if (p[k])
			return 0;
	return 1;
}

/* The bytes of block i of a equal those of block j of b (lengths too). */
static int blk_same(const img *a, size_t i, const img *b, size_t j)
{
	size_t n = blk_len(a, i);

	return n == blk_len(b, j) &&
	       memcmp(a->data + i * BS, b->data + j * BS, n) == 0;
}

/* ---- the usage model ---------------------------------------------------*/

/* dd_snapshot_usage of ims[k] from the bytes: its distinct non-zero
 * blocks that no other live image holds. */
static dd_snapshot_usage usage_model(const img *ims, size_t nims, size_t k)
{
	dd_snapshot_usage u = {.version = DD_SNAPSHOT_USAGE_VERSION};
	const img *a = &ims[k];

	for (size_t i = 0; i < a->nblk; i++) {
		int first = 1, other = 0;

		if (blk_zero(a, i))
			continue;
		u.referenced_blocks++;
		for (size_t j = 0; j < i && first; j++)
			first = !blk_same(a, j, a, i);
		for (size_t m = 0; m < nims && first && !other; m++) {
			if (m == k || !ims[m].live)
				continue;
			for (size_t j = 0; j < ims[m].nblk && !other; j++)
				other = blk_same(&ims[m], j, a, i);
		}
		if (!first || other)
			continue;
		u.unique_blocks++;
		u.unique_lsize += blk_len(a, i);
		u.unique_bytes += REC + blk_len(a, i);   /* no compression */
	}
	return u;
}

static void check_usage(dd_store *s, const img *ims, size_t nims)
{
	for (size_t k = 0; k < nims; k++) {
		dd_snapshot_usage want, got = {.version =
					       DD_SNAPSHOT_USAGE_VERSION};

		if (!ims[k].live)
			continue;
		want = usage_model(ims, nims, k);
		assert_int_equal(dd_snapshot_usage_get(s, ims[k].name, &got),
				 0);
		if (want.referenced_blocks != got.referenced_blocks ||
		    want.unique_blocks != got.unique_blocks ||
		    want.unique_lsize != got.unique_lsize ||
		    want.unique_bytes != got.unique_bytes)
			fail_msg("usage of %s: referenced %llu/%llu, unique "
				 "%llu/%llu blocks, %llu/%llu lsize, %llu/%llu "
				 "bytes (model/got)", ims[k].name,
				 (unsigned long long)want.referenced_blocks,
				 (unsigned long long)got.referenced_blocks,
				 (unsigned long long)want.unique_blocks,
				 (unsigned long long)got.unique_blocks,
				 (unsigned long long)want.unique_lsize,
				 (unsigned long long)got.unique_lsize,
				 (unsigned long long)want.unique_bytes,
				 (unsigned long long)got.unique_bytes);
	}
}

/* ---- the diff model ----------------------------------------------------*/

typedef struct range {
	uint64_t off, len;
} range;

/* The ranges dd_diff must give for (a, b), coalesced; returns the count. */
static size_t diff_model(const img *a, const img *b, range *out, size_t max)
{
	uint64_t common = a->size < b->size ? a->size : b->size;
	uint64_t end = a->size > b->size ? a->size : b->size;
	uint64_t cblk = (common + BS - 1) / BS;
	size_t n = 0;

	for (uint64_t i = 0; i <= cblk; i++) {
		uint64_t off, len;

		if (i < cblk) {
			if ((blk_zero(a, i) && blk_zero(b, i)) ||
			    blk_same(a, i, b, i))
				continue;
			off = i * BS;
			len = ((i + 1) * BS < common ? (i + 1) * BS : common) -
			      off;
		} else {
			off = common;
			len = end - common;
			if (!len)
				continue;
		}
		if (n && out[n - 1].off + out[n - 1].len == off) {
			out[n - 1].len += len;
			continue;
		}
		assert_true(n < max);
		out[n++] = (range){off, len};
	}
	return n;
}

static void check_diff(dd_store *s, const img *a, const img *b)
{
	range want[1024];
	size_t n = diff_model(a, b, want, 1024), i = 0;
	dd_diff_range r = {.version = DD_DIFF_RANGE_VERSION};
	dd_diff *d;

	assert_int_equal(dd_diff_open(&d, s, a->name, b->name), 0);
	for (;;) {
		assert_int_equal(dd_diff_next(d, &r), 0);
		if (r.length == 0)
			break;
		if (i >= n || r.offset != want[i].off ||
		    r.length != want[i].len)
			fail_msg("diff %s %s: range %zu is %llu+%llu, want "
				 "%llu+%llu (of %zu)", a->name, b->name, i,
				 (unsigned long long)r.offset,
				 (unsigned long long)r.length,
				 (unsigned long long)(i < n ? want[i].off : 0),
				 (unsigned long long)(i < n ? want[i].len : 0),
				 n);
		i++;
	}
	assert_int_equal(i, n);
	/* the end stays the end */
	assert_int_equal(dd_diff_next(d, &r), 0);
	assert_int_equal(r.length, 0);
	dd_diff_close(d);
}

/* ---- tests -------------------------------------------------------------*/

static int rand_spec(int zero_pct, int from, int span)
{
	if ((int)(th_rng() % 100) < zero_pct)
		return 0;
	return from + (int)(th_rng() % (uint64_t)span);
}

static int count_variant(void *ctx, const dd_ddt_key *key,
			 const dd_ddt_ent *ent)
{
	(void)ent;
	*(int *)ctx += key->dk_variant > 0;
	return 0;
}

/* DDT entries of variant > 0: blocks whose test hash collided. */
static int variants(dd_store *s)
{
	dd_err err = {0};
	dd_txn *txn;
	int n = 0;

	assert_int_equal(dd_txn_begin(s->st_db, &err, false, &txn), 0);
	assert_int_equal(dd_ddt_walk(txn, &err, count_variant, &n), 0);
	dd_txn_abort(txn);
	return n;
}

/* Random images over a shared pool; usage and diff of every one and
 * every pair against the models, before and after deletions; the space
 * gc gives back equals the usage of the deleted. */
static void test_usage_and_diff_model(void **state)
{
	enum { NIMG = 6 };
	static const char *names[NIMG] = {"a", "b", "c", "d", "e", "f"};
	char *path = th_tmp_store();
	dd_store *s = create(path, 1, DD_COMPRESS_NONE, DD_HASH_TEST_WEAK16);
	img ims[NIMG];
	int spec[300];

	(void)state;
	pool_init();
	th_rng_state = 7;
	for (int k = 0; k < NIMG; k++) {
		size_t nblk = 40 + th_rng() % 200, size = nblk * BS;

		for (size_t i = 0; i < nblk; i++)
			spec[i] = rand_spec(10, 1 + 50 * k, 120);
		if (k == 2)     /* a copy of a, with some blocks changed */
			for (size_t i = 0; i < nblk; i++)
				spec[i] = i < ims[0].nblk && th_rng() % 10
					? ims[0].spec[i] : rand_spec(20, 300, 100);
		if (k % 2)      /* a short last block */
			size -= 1 + th_rng() % (BS - 1);
		img_make(&ims[k], names[k], spec, nblk, size);
		assert_int_equal(th_put(s, names[k], ims[k].data, size, 10000),
				 0);
	}
	/* colliding blocks are part of the test */
	print_message("%d variants\n", variants(s));
	assert_true(variants(s) > 0);
	check_usage(s, ims, NIMG);
	for (int i = 0; i < NIMG; i++)
		for (int j = 0; j < NIMG; j++)
			check_diff(s, &ims[i], &ims[j]);

	/* delete two; the others may own more now; gc frees what the
	 * deleted owned */
	for (int k = 1; k <= 4; k += 3) {
		dd_snapshot_usage u = {.version = DD_SNAPSHOT_USAGE_VERSION};
		dd_gc_opts go = DD_GC_OPTS_INIT;
		dd_gc_result gr;

		assert_int_equal(dd_snapshot_usage_get(s, names[k], &u), 0);
		assert_true(u.unique_bytes > 0);
		assert_int_equal(dd_snapshot_delete(s, names[k]), 0);
		ims[k].live = 0;
		go.rewrite_below = 1.0;     /* every pack with dead bytes */
		assert_int_equal(dd_store_gc(s, &go, &gr), 0);
		assert_int_equal(gr.bytes_reclaimed, u.unique_bytes);
		check_usage(s, ims, NIMG);
	}
	th_check_image(s, "c", ims[2].data, ims[2].size);
	dd_store_close(s);
	for (int k = 0; k < NIMG; k++)
		img_free(&ims[k]);
	th_rm_store(path);
}

/* Sizes that differ: the tail differs; holes against holes are equal,
 * holes against data are not; an unaligned end inside a changed block. */
static void test_diff_shapes(void **state)
{
	char *path = th_tmp_store();
	dd_store *s = create(path, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256);
	static const int sa[] = {1, 0, 2, 3, 0, 4};
	static const int sb[] = {1, 0, 5, 3, 6, 4, 0, 7};
	static const int sc[] = {1, 0, 2};
	static const int sd[] = {1, 0, 0};
	static const int se[] = {0};
	img ims[6];

	(void)state;
	pool_init();
	img_make(&ims[0], "a", sa, 6, 6 * BS);
	img_make(&ims[1], "b", sb, 8, 8 * BS - 100);
	img_make(&ims[2], "c", sc, 3, 2 * BS + 5);   /* short data block */
	img_make(&ims[3], "d", sd, 3, 2 * BS + 5);   /* short hole */
	img_make(&ims[4], "e", se, 1, 1);            /* one zero byte */
	img_make(&ims[5], "same-as-a", sa, 6, 6 * BS);
	for (int k = 0; k < 6; k++)
		assert_int_equal(th_put(s, ims[k].name, ims[k].data,
					ims[k].size, 3000), 0);
	for (int i = 0; i < 6; i++)
		for (int j = 0; j < 6; j++)
			check_diff(s, &ims[i], &ims[j]);
	/* spot checks of the model itself */
	{
		range r[8];

		assert_int_equal(diff_model(&ims[0], &ims[1], r, 8), 3);
		assert_int_equal(r[0].off, 2 * BS);        /* block 2 */
		assert_int_equal(r[0].len, BS);
		assert_int_equal(r[1].off, 4 * BS);        /* 4; 5 same */
		assert_int_equal(r[1].len, BS);
		assert_int_equal(r[2].off, 6 * BS);        /* the tail */
		assert_int_equal(r[2].len, 2 * BS - 100);
		assert_int_equal(diff_model(&ims[0], &ims[5], r, 8), 0);
		/* d is a's first blocks with a hole for block 2, cut short:
		 * block 2 (hole vs data) then the tail */
		assert_int_equal(diff_model(&ims[3], &ims[0], r, 8), 1);
		assert_int_equal(r[0].off, 2 * BS);
		assert_int_equal(r[0].len, 4 * BS);
	}
	dd_store_close(s);
	for (int k = 0; k < 6; k++)
		img_free(&ims[k]);
	th_rm_store(path);
}

/* A block map that names a block its snapshot's digest does not: the
 * end of the diff says so. */
static void test_diff_damaged_map(void **state)
{
	char *path = th_tmp_store();
	dd_store *s = create(path, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256);
	static const int sx[] = {1, 2, 0, 0};
	dd_diff_range r = {.version = DD_DIFF_RANGE_VERSION};
	dd_snap_rec rec;
	dd_ddt_key key = {{0}, 0};
	dd_txn *txn;
	dd_err err = {0};
	dd_diff *d;
	img x;
	int rc;

	(void)state;
	pool_init();
	img_make(&x, "x", sx, 4, 4 * BS);
	assert_int_equal(th_put(s, "x", x.data, x.size, 5000), 0);
	assert_int_equal(th_put(s, "y", x.data, x.size, 5000), 0);
	/* y is the newest map: an entry for its hole 3 appends */
	assert_int_equal(dd_txn_begin(s->st_db, &err, true, &txn), 0);
	assert_int_equal(dd_snap_get(txn, &err, "y", &rec), 0);
	key.dk_hash[0] = 1;
	assert_int_equal(dd_bmap_append(txn, &err, rec.sr_id, 3, 0, &key), 0);
	assert_int_equal(dd_txn_commit(txn, &err), 0);

	assert_int_equal(dd_diff_open(&d, s, "x", "y"), 0);
	do
		rc = dd_diff_next(d, &r);
	while (rc == 0 && r.length);
	assert_int_equal(rc, DD_ECORRUPT);
	assert_non_null(strstr(dd_diff_errmsg(d), "second snapshot"));
	th_check_errmsg(dd_diff_errmsg(d), DD_ECORRUPT);
	/* and stays failed */
	assert_int_equal(dd_diff_next(d, &r), DD_ECORRUPT);
	dd_diff_close(d);
	dd_store_close(s);
	img_free(&x);
	th_rm_store(path);
}

static void test_diff_misuse(void **state)
{
	char *path = th_tmp_store();
	dd_store *s = create(path, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256);
	dd_diff_range r = {.version = DD_DIFF_RANGE_VERSION};
	uint8_t one[10] = {1};
	dd_diff *d = NULL;

	(void)state;
	assert_int_equal(th_put(s, "a", one, sizeof(one), 10), 0);
	assert_int_equal(dd_diff_open(NULL, s, "a", "a"), DD_EINVAL);
	assert_int_equal(dd_diff_open(&d, NULL, "a", "a"), DD_EINVAL);
	assert_int_equal(dd_diff_open(&d, s, "a/b", "a"), DD_ENAME);
	assert_int_equal(dd_diff_open(&d, s, "a", NULL), DD_ENAME);
	assert_int_equal(dd_diff_open(&d, s, "a", "nope"), DD_ENOENT);
	th_check_errmsg(dd_store_errmsg(s), DD_ENOENT);
	assert_null(d);
	assert_int_equal(dd_diff_next(NULL, &r), DD_EINVAL);
	assert_int_equal(dd_diff_open(&d, s, "a", "a"), 0);
	assert_int_equal(dd_diff_next(d, NULL), DD_EINVAL);
	r.version = 0;
	assert_int_equal(dd_diff_next(d, &r), DD_EINVAL);
	r.version = DD_DIFF_RANGE_VERSION;
	assert_int_equal(dd_diff_next(d, &r), 0);
	assert_int_equal(r.length, 0);
	/* the iterator sees the snapshot as of its open */
	assert_int_equal(dd_snapshot_delete(s, "a"), 0);
	dd_diff_close(d);
	dd_diff_close(NULL);
	assert_string_equal(dd_diff_errmsg(NULL), "DD_EINVAL: NULL diff");
	dd_store_close(s);
	th_rm_store(path);
}

/* Lost blocks (repair found them in a manifest only) hold no bytes. */
static void test_usage_missing_blocks(void **state)
{
	char *path = th_tmp_store(), packs[600];
	dd_store *s = create(path, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256);
	static const int sa[] = {1, 2, 2, 0, 3};
	dd_snapshot_usage u = {.version = DD_SNAPSHOT_USAGE_VERSION};
	dd_repair_result rr = {.version = DD_REPAIR_RESULT_VERSION};
	struct dirent *de;
	DIR *dir;
	img a;

	(void)state;
	pool_init();
	img_make(&a, "a", sa, 5, 5 * BS);
	assert_int_equal(th_put(s, "a", a.data, a.size, 5000), 0);
	assert_int_equal(dd_snapshot_usage_get(s, "a", &u), 0);
	assert_int_equal(u.referenced_blocks, 4);
	assert_int_equal(u.unique_blocks, 3);
	assert_true(u.unique_bytes > 3 * REC);
	dd_store_close(s);
	snprintf(packs, sizeof(packs), "%s/packs", path);
	dir = opendir(packs);
	assert_non_null(dir);
	while ((de = readdir(dir)) != NULL)
		if (de->d_name[0] != '.')
			assert_int_equal(unlinkat(dirfd(dir), de->d_name, 0), 0);
	closedir(dir);
	assert_int_equal(dd_store_repair(path, NULL, &rr), 0);
	assert_int_equal(rr.missing_blocks, 3);
	assert_int_equal(dd_store_open(&s, path, NULL), 0);
	assert_int_equal(dd_snapshot_usage_get(s, "a", &u), 0);
	assert_int_equal(u.referenced_blocks, 4);
	assert_int_equal(u.unique_blocks, 0);
	assert_int_equal(u.unique_bytes, 0);
	dd_store_close(s);
	img_free(&a);
	th_rm_store(path);
}

static void test_usage_misuse(void **state)
{
	char *path = th_tmp_store();
	dd_store *s = create(path, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256);
	dd_snapshot_usage u = {.version = DD_SNAPSHOT_USAGE_VERSION};
	uint8_t one[10] = {1};

	(void)state;
	assert_int_equal(th_put(s, "a", one, sizeof(one), 10), 0);
	assert_int_equal(dd_snapshot_usage_get(NULL, "a", &u), DD_EINVAL);
	assert_int_equal(dd_snapshot_usage_get(s, "a", NULL), DD_EINVAL);
	assert_int_equal(dd_snapshot_usage_get(s, "", &u), DD_ENAME);
	assert_int_equal(dd_snapshot_usage_get(s, "b", &u), DD_ENOENT);
	u.version = DD_SNAPSHOT_USAGE_VERSION + 1;
	assert_int_equal(dd_snapshot_usage_get(s, "a", &u), DD_EINVAL);
	th_check_errmsg(dd_store_errmsg(s), DD_EINVAL);
	u.version = DD_SNAPSHOT_USAGE_VERSION;
	assert_int_equal(dd_snapshot_usage_get(s, "a", &u), 0);
	assert_int_equal(u.unique_blocks, 1);
	assert_int_equal(u.unique_lsize, 10);
	dd_store_close(s);
	th_rm_store(path);
}

static uint64_t packs_bytes(const char *path)
{
	char dir_path[600];
	struct dirent *de;
	struct stat st;
	uint64_t sum = 0;
	DIR *dir;

	snprintf(dir_path, sizeof(dir_path), "%s/packs", path);
	dir = opendir(dir_path);
	assert_non_null(dir);
	while ((de = readdir(dir)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		assert_int_equal(fstatat(dirfd(dir), de->d_name, &st, 0), 0);
		sum += (uint64_t)st.st_size;
	}
	closedir(dir);
	return sum;
}

/* What a writer reports it added is what the packs grew by; a copy adds
 * nothing. */
static void test_writer_stats(void **state)
{
	char *path = th_tmp_store();
	dd_store *s = create(path, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256);
	static const int sa[] = {1, 2, 2, 0, 3, 0, 4, 1};
	dd_writer_stats ws = {.version = DD_WRITER_STATS_VERSION};
	dd_snapshot_usage u = {.version = DD_SNAPSHOT_USAGE_VERSION};
	uint64_t before;
	dd_writer *w;
	img a;

	(void)state;
	pool_init();
	img_make(&a, "a", sa, 8, 8 * BS - 7);
	before = packs_bytes(path);
	assert_int_equal(dd_writer_begin(&w, s, "a"), 0);
	assert_int_equal(dd_writer_stats_get(w, &ws), 0);
	assert_int_equal(ws.new_blocks, 0);
	assert_int_equal(dd_writer_write(w, a.data, a.size), 0);
	assert_int_equal(dd_writer_commit(w), 0);
	assert_int_equal(dd_writer_stats_get(w, &ws), 0);
	dd_writer_free(w);
	assert_int_equal(ws.bytes, a.size);
	assert_int_equal(ws.blocks, 8);
	assert_int_equal(ws.zero_blocks, 2);
	assert_int_equal(ws.new_blocks, 5);   /* 1 2 3 4 and the short 1 */
	assert_int_equal(ws.new_lsize, 5 * BS - 7);
	/* a new pack: its 64-byte header, then the records */
	assert_int_equal(packs_bytes(path) - before,
			 DD_PACK_FILE_HDR_SIZE + ws.new_bytes);
	/* the first snapshot owns all it stored */
	assert_int_equal(dd_snapshot_usage_get(s, "a", &u), 0);
	assert_int_equal(u.unique_bytes, ws.new_bytes);
	assert_int_equal(u.unique_blocks, ws.new_blocks);

	assert_int_equal(dd_writer_begin(&w, s, "copy"), 0);
	assert_int_equal(dd_writer_write(w, a.data, a.size), 0);
	assert_int_equal(dd_writer_commit(w), 0);
	assert_int_equal(dd_writer_stats_get(w, &ws), 0);
	assert_int_equal(ws.new_blocks, 0);
	assert_int_equal(ws.new_bytes, 0);
	assert_int_equal(ws.blocks, 8);
	ws.version = 0;
	assert_int_equal(dd_writer_stats_get(w, &ws), DD_EINVAL);
	assert_int_equal(dd_writer_stats_get(NULL, &ws), DD_EINVAL);
	assert_int_equal(dd_writer_stats_get(w, NULL), DD_EINVAL);
	dd_writer_free(w);
	/* now neither owns anything */
	assert_int_equal(dd_snapshot_usage_get(s, "a", &u), 0);
	assert_int_equal(u.unique_blocks, 0);
	dd_store_close(s);
	img_free(&a);
	th_rm_store(path);
}

static int has_snapshot(dd_store *s, const char *name)
{
	dd_snapshot_info si;

	return dd_snapshot_stat(s, name, &si) == 0;
}

/* dd_prune on a store: snapshots made within a second are ordered by
 * creation; a dry run deletes nothing; a prefix limits what counts. */
static void test_prune_store(void **state)
{
	static const char *names[] = {"vm-1", "vm-2", "db-1", "vm-3", "vm-4",
				      "db-2"};
	char *path = th_tmp_store();
	dd_store *s = create(path, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256);
	dd_prune_opts o = DD_PRUNE_OPTS_INIT;
	dd_prune_entry *list = NULL;
	uint8_t data[100];
	size_t n = 0;

	(void)state;
	for (size_t i = 0; i < 6; i++) {
		memset(data, (int)i + 1, sizeof(data));
		assert_int_equal(th_put(s, names[i], data, sizeof(data), 100),
				 0);
	}
	/* no rule */
	assert_int_equal(dd_prune(s, &o, &list, &n), DD_EINVAL);
	th_check_errmsg(dd_store_errmsg(s), DD_EINVAL);
	o.keep_last = 2;
	o.prefix = "vm-";
	o.dry_run = 1;
	assert_int_equal(dd_prune(s, &o, &list, &n), 0);
	assert_int_equal(n, 4);
	assert_string_equal(list[0].name, "vm-4");   /* newest first */
	assert_int_equal(list[0].mark.rule, DD_PRUNE_LAST);
	assert_int_equal(list[0].mark.rank, 1);
	assert_string_equal(list[1].name, "vm-3");
	assert_int_equal(list[1].mark.rank, 2);
	assert_string_equal(list[2].name, "vm-2");
	assert_int_equal(list[2].mark.rule, DD_PRUNE_NONE);
	assert_string_equal(list[3].name, "vm-1");
	assert_int_equal(list[3].mark.rule, DD_PRUNE_NONE);
	dd_prune_free(list);
	for (size_t i = 0; i < 6; i++)
		assert_true(has_snapshot(s, names[i]));

	o.dry_run = 0;
	assert_int_equal(dd_prune(s, &o, &list, &n), 0);
	assert_int_equal(n, 4);
	dd_prune_free(list);
	assert_false(has_snapshot(s, "vm-1"));
	assert_false(has_snapshot(s, "vm-2"));
	assert_true(has_snapshot(s, "vm-3") && has_snapshot(s, "vm-4"));
	assert_true(has_snapshot(s, "db-1") && has_snapshot(s, "db-2"));

	/* all snapshots, the newest one kept */
	o.prefix = NULL;
	o.keep_last = 1;
	assert_int_equal(dd_prune(s, &o, &list, &n), 0);
	assert_int_equal(n, 4);
	assert_string_equal(list[0].name, "db-2");
	dd_prune_free(list);
	assert_true(has_snapshot(s, "db-2"));
	assert_false(has_snapshot(s, "vm-4") || has_snapshot(s, "db-1"));
	/* nothing to consider */
	o.prefix = "none-";
	assert_int_equal(dd_prune(s, &o, &list, &n), 0);
	assert_int_equal(n, 0);
	assert_null(list);
	assert_int_equal(dd_prune(s, NULL, &list, &n), DD_EINVAL);
	dd_store_close(s);
	th_check_store(path, NULL, 0);
	th_rm_store(path);
}

static int teardown(void **state)
{
	(void)state;
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_usage_and_diff_model),
		cmocka_unit_test(test_diff_shapes),
		cmocka_unit_test(test_diff_damaged_map),
		cmocka_unit_test(test_diff_misuse),
		cmocka_unit_test(test_usage_missing_blocks),
		cmocka_unit_test(test_usage_misuse),
		cmocka_unit_test(test_writer_stats),
		cmocka_unit_test(test_prune_store),
	};
	int rc = cmocka_run_group_tests(tests, NULL, teardown);

	free(pool);
	return rc;
}
