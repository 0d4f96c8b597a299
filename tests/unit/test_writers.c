/*
 * test_writers.c -- many writers in one store at once (store/wlife.c,
 * wops.c, wpack.c, gc.c, lock.c): writers on one handle and on several,
 * a block two of them store at once kept once, rm and gc beside open
 * writers never taking a block a writer references, what needs the store
 * to itself refused naming its holder, and eight threads through one
 * handle (run under ThreadSanitizer by scripts/test.sh).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "dedup.h"
#include "hash/hash.h"
#include "helpers.h"
#include "store/writer_internal.h"

#define KiB 1024u
#define MiB (1024u * 1024u)
#define BS (4 * KiB)

static uint64_t stat_field(dd_store *s, size_t offset)
{
	dd_stat st = {.version = DD_STAT_VERSION};

	assert_int_equal(dd_store_stat(s, &st), 0);
	return *(uint64_t *)((char *)&st + offset);
}
#define STAT(s, f) stat_field((s), offsetof(dd_stat, f))

static void fill_random(uint8_t *p, size_t n)
{
	if (!th_rng_state)
		th_rng_state = 0x5eed;
	for (size_t i = 0; i + 8 <= n; i += 8) {
		uint64_t v = th_rng();

		memcpy(p + i, &v, 8);
	}
	for (size_t i = n & ~(size_t)7; i < n; i++)
		p[i] = (uint8_t)th_rng();
}

static uint8_t *random_image(size_t n)
{
	uint8_t *p = malloc(n);

	if (!th_rng_state)
		th_rng_state = 0x5eed;

	assert_non_null(p);
	fill_random(p, n);
	return p;
}

static void write_all(dd_writer *w, const uint8_t *p, size_t n, size_t chunk)
{
	for (size_t off = 0; off < n; off += chunk) {
		size_t len = n - off < chunk ? n - off : chunk;

		assert_int_equal(dd_writer_write(w, p + off, len), 0);
	}
}

/* ---- two writers ------------------------------------------------------------*/

/* Two writers on one handle and one on another, all open at once,
 * writing blocks they share: every snapshot exact, each shared block one
 * DDT entry, the spare copies garbage that gc takes back.  The pipeline
 * looks blocks up a batch (4 MiB) or two behind the input, so each writer
 * writes the shared part and then holes enough to push it through: all
 * three store it before any commits. */
static void test_writers_side_by_side(void **state)
{
	char *path = th_tmp_store();
	dd_store *s = th_create(path, BS, 0, DD_COMPRESS_NONE, DD_HASH_SHA256);
	dd_store *s2;
	dd_writer *w1, *w2, *w3;
	const size_t n = 12 * MiB, own_n = 64 * BS;
	uint8_t *img = calloc(1, 2 * n + own_n);
	uint64_t packs_before, packs_after;
	dd_gc_result res;

	(void)state;
	assert_non_null(img);
	fill_random(img, n);                  /* then n of holes */
	fill_random(img + 2 * n, own_n);      /* three's own */
	assert_int_equal(dd_store_open(&s2, path, NULL), 0);
	assert_int_equal(dd_writer_begin(&w1, s, "one"), 0);
	assert_int_equal(dd_writer_begin(&w2, s, "two"), 0);
	assert_int_equal(dd_writer_begin(&w3, s2, "three"), 0);
	write_all(w1, img, 2 * n, 1 * MiB);
	write_all(w2, img, 2 * n, 3 * MiB);
	write_all(w3, img, 2 * n + own_n, 5 * BS);
	assert_int_equal(dd_writer_commit(w2), 0);
	assert_int_equal(dd_writer_commit(w3), 0);
	assert_int_equal(dd_writer_commit(w1), 0);
	dd_writer_free(w1);
	dd_writer_free(w2);
	dd_writer_free(w3);
	th_check_image(s, "one", img, 2 * n);
	th_check_image(s, "two", img, 2 * n);
	th_check_image(s2, "one", img, 2 * n);
	th_check_image(s, "three", img, 2 * n + own_n);
	/* kept once: the shared blocks and three's own */
	assert_int_equal(STAT(s, unique_blocks), n / BS + 64);
	assert_int_equal(STAT(s, referenced_blocks), 3 * (n / BS) + 64);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	packs_before = STAT(s, pack_bytes);
	assert_true(packs_before >= 3 * n);   /* three copies written */
	/* two spare copies of the shared part: garbage */
	assert_int_equal(dd_store_gc(s2, NULL, &res), 0);
	packs_after = STAT(s, pack_bytes);
	assert_true(packs_after + 2 * n <= packs_before);
	assert_true(res.bytes_reclaimed >= 2 * n);
	assert_true(packs_after < n + own_n + n / 16);
	th_check_image(s, "three", img, 2 * n + own_n);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	dd_store_close(s2);
	dd_store_close(s);
	free(img);
	th_rm_store(path);
}

/* ---- one writer's commits ------------------------------------------------*/

/* Writes n bytes of img through a file (dd_writer_write_file: the hash
 * stage's probes answer for the lookup stage) and returns new_blocks. */
static uint64_t put_file(dd_store *s, const char *name, const uint8_t *img,
			 size_t n)
{
	char file[] = "/tmp/dd-test-img-XXXXXX";
	int fd = mkstemp(file);
	dd_writer_stats st = {.version = DD_WRITER_STATS_VERSION};
	dd_writer *w;

	assert_true(fd >= 0);
	assert_int_equal(unlink(file), 0);
	assert_int_equal(write(fd, img, n), (ssize_t)n);
	assert_int_equal(dd_writer_begin(&w, s, name), 0);
	assert_int_equal(dd_writer_write_file(w, fd, 0, n), 0);
	assert_int_equal(dd_writer_commit(w), 0);
	assert_int_equal(dd_writer_stats_get(w, &st), 0);
	dd_writer_free(w);
	close(fd);
	return st.new_blocks;
}

/* n random bytes, any n (fill_random fills whole 8-byte words). */
static void fill_bytes(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(th_rng() >> 24);
}

/* Distinct keys of ops in key order. */
static size_t distinct_keys(dd_wop *const *ord, size_t n)
{
	size_t d = n ? 1 : 0;

	for (size_t i = 1; i < n; i++)
		d += ord[i]->op_key.dk_variant != ord[i - 1]->op_key.dk_variant ||
		     memcmp(ord[i]->op_key.dk_hash, ord[i - 1]->op_key.dk_hash,
			    DD_HASH_SIZE) != 0;
	return d;
}

/* A commit's ops in key order (dd_wops_order, a radix sort of the
 * hashes' first 32 bits) are exactly dd_wop_cmp's order -- what qsort
 * gave -- for keys in no order, keys the image repeats, keys that share
 * their first 4 or 31 bytes, variants of one hash, and hashes of the
 * test-only weak hash (2 bytes, the rest zero); and it counts the
 * distinct keys (a flush sizes its transactions by them). */
static void test_ops_order(void **state)
{
	const size_t n = 20000;
	dd_wops wo;
	dd_wop **want = calloc(n, sizeof(*want));
	dd_err err;

	(void)state;
	assert_non_null(want);
	memset(&wo, 0, sizeof(wo));
	dd_err_clear(&err);
	for (size_t i = 0; i < n; i++) {
		dd_wop op;

		memset(&op, 0, sizeof(op));
		op.op_kind = DD_OP_REF;
		op.op_idx = i;
		switch (th_rng() % 6) {
		case 0:   /* a key seen before, maybe another variant */
			if (i) {
				op.op_key = wo.wo_op[th_rng() % i].op_key;
				if (th_rng() % 4 == 0)
					op.op_key.dk_variant = (uint8_t)(th_rng() % 3);
				break;
			}
			/* fall through */
		case 1:
		case 2:
			fill_bytes(op.op_key.dk_hash, DD_HASH_SIZE);
			break;
		case 3:   /* the first 4 bytes of one before */
			if (i)
				memcpy(op.op_key.dk_hash,
				       wo.wo_op[th_rng() % i].op_key.dk_hash, 4);
			fill_bytes(op.op_key.dk_hash + 4, DD_HASH_SIZE - 4);
			break;
		case 4:   /* the first 31 */
			if (i)
				memcpy(op.op_key.dk_hash,
				       wo.wo_op[th_rng() % i].op_key.dk_hash, 31);
			fill_bytes(op.op_key.dk_hash + 31, 1);
			break;
		default:  /* the weak hash's shape */
			fill_bytes(op.op_key.dk_hash, 2);
			break;
		}
		assert_int_equal(dd_wops_add(&wo, &err, &op, NULL), 0);
	}
	assert_int_equal(dd_wops_order(&wo, &err), 0);
	for (size_t i = 0; i < n; i++)
		want[i] = &wo.wo_op[i];
	qsort(want, n, sizeof(*want), dd_wop_cmp);
	for (size_t i = 0; i < n; i++)
		assert_ptr_equal(wo.wo_ord[i], want[i]);
	assert_int_equal(wo.wo_nkeys, distinct_keys(want, n));
	/* and again after more ops: the order array grows */
	for (size_t i = 0; i < 3000; i++) {
		dd_wop op = wo.wo_op[th_rng() % n];

		op.op_idx = n + i;
		assert_int_equal(dd_wops_add(&wo, &err, &op, NULL), 0);
	}
	assert_int_equal(dd_wops_order(&wo, &err), 0);
	want = realloc(want, wo.wo_n * sizeof(*want));
	assert_non_null(want);
	for (size_t i = 0; i < wo.wo_n; i++)
		want[i] = &wo.wo_op[i];
	qsort(want, wo.wo_n, sizeof(*want), dd_wop_cmp);
	for (size_t i = 0; i < wo.wo_n; i++)
		assert_ptr_equal(wo.wo_ord[i], want[i]);
	assert_int_equal(wo.wo_nkeys, distinct_keys(want, wo.wo_n));
	free(want);
	dd_wops_free(&wo);
}

/* The index of an interval's NEW ops by key (wops.c): a slot compares a
 * tag of the hash (bytes 8-11) before the op's key.  Keys that share the
 * slot's bits (bytes 0-7) but not the tag, keys that share both and
 * differ after byte 11, and variants of one hash, entered past several
 * doublings of the index, are each found as the op they were added as;
 * each altered in one byte of any of those spans, or with another
 * variant, is not, and neither is any REF op's key. */
static void test_wops_key_index(void **state)
{
	const size_t n = 12000;
	dd_wops wo;
	dd_err err;

	(void)state;
	memset(&wo, 0, sizeof(wo));
	dd_err_clear(&err);
	dd_wops_prefetch_key(&wo, (const uint8_t[DD_HASH_SIZE]){0}); /* empty */
	for (size_t i = 0; i < n; i++) {
		dd_wop op;
		uint32_t at = UINT32_MAX;

		memset(&op, 0, sizeof(op));
		op.op_idx = i;
		op.op_kind = i % 5 == 4 ? DD_OP_REF : DD_OP_NEW;
		fill_bytes(op.op_key.dk_hash, DD_HASH_SIZE);
		if (i >= 3 && i % 3 == 0)   /* the slot's bits of one before */
			memcpy(op.op_key.dk_hash, wo.wo_op[i - 3].op_key.dk_hash, 8);
		if (i >= 3 && i % 3 == 1)   /* ... and its tag */
			memcpy(op.op_key.dk_hash, wo.wo_op[i - 3].op_key.dk_hash, 12);
		if (i % 7 == 6) {           /* a variant of one before */
			op.op_key = wo.wo_op[i - 1].op_key;
			op.op_key.dk_variant = (uint8_t)(op.op_key.dk_variant + 1);
		}
		assert_int_equal(dd_wops_add(&wo, &err, &op, &at), 0);
		assert_int_equal(at, i);
	}
	assert_true(wo.wo_ixcap >= 2 * wo.wo_nnew);
	for (size_t i = 0; i < n; i++) {
		dd_ddt_key key = wo.wo_op[i].op_key;
		static const size_t alter[] = { 0, 7, 8, 11, 12, 31 };
		uint32_t at = UINT32_MAX;
		dd_wop *got = dd_wops_find_new(&wo, &key, &at);

		dd_wops_prefetch_key(&wo, key.dk_hash);
		if (wo.wo_op[i].op_kind != DD_OP_NEW) {
			assert_null(got);   /* no NEW op has a REF's key here */
			continue;
		}
		assert_ptr_equal(got, &wo.wo_op[i]);
		assert_int_equal(at, i);
		for (size_t a = 0; a < sizeof(alter) / sizeof(alter[0]); a++) {
			dd_ddt_key k = key;

			k.dk_hash[alter[a]] ^= 0x5a;
			assert_null(dd_wops_find_new(&wo, &k, &at));
		}
		key.dk_variant = (uint8_t)(key.dk_variant + 9);
		assert_null(dd_wops_find_new(&wo, &key, &at));
	}
	dd_wops_free(&wo);
}

/* A commit applies its DDT changes in key order, one update per key
 * (wops.c), and the lookup stage takes the probe's answers (writer.c):
 * an image of 200 distinct blocks repeated in every order, holes among
 * them, half of them already stored, committed after every batch -- so
 * each interval has runs of references to one key (REF), new blocks
 * named again later in their interval (PREF) and blocks new in the
 * interval before (probed before that commit, looked up after it).
 * Every block is stored exactly once (no spare copy), every count is
 * exact (scrub counts the block maps' references against the DDT), and
 * the images read back. */
static void test_commit_runs_exact(void **state)
{
	extern uint64_t dd_writer_commit_bytes;
	char *path = th_tmp_store();
	dd_store *s = th_create(path, BS, 0, DD_COMPRESS_NONE, DD_HASH_SHA256);
	uint64_t saved = dd_writer_commit_bytes;
	const size_t ndist = 200, nblk = 6144, n = nblk * BS;
	uint8_t *dist = random_image(ndist * BS);
	uint8_t *img = calloc(1, n), *half = calloc(1, n);
	size_t holes = 0, half_refs = 0;

	(void)state;
	assert_non_null(img);
	assert_non_null(half);
	for (size_t i = 0; i < nblk; i++) {
		size_t d = (size_t)(th_rng() % (ndist + 20));

		if (d >= ndist) {
			holes++;              /* left zero */
			continue;
		}
		memcpy(img + i * BS, dist + d * BS, BS);
	}
	/* the first snapshot: the even distinct blocks, each once */
	for (size_t d = 0; d < ndist; d += 2, half_refs++)
		memcpy(half + d * BS, dist + d * BS, BS);
	assert_int_equal(put_file(s, "half", half, n), ndist / 2);
	dd_writer_commit_bytes = 1;          /* a commit after every batch */
	assert_int_equal(put_file(s, "all", img, n), ndist / 2);
	assert_int_equal(put_file(s, "again", img, n), 0);
	assert_int_equal(th_put(s, "buffered", img, n, 3 * BS), 0);
	dd_writer_commit_bytes = saved;
	assert_int_equal(STAT(s, unique_blocks), ndist);
	assert_int_equal(STAT(s, referenced_blocks),
			 half_refs + 3 * (nblk - holes));
	dd_store_close(s);
	{
		const th_image imgs[] = {{"half", half, n}, {"all", img, n},
					 {"again", img, n},
					 {"buffered", img, n}};

		th_check_store(path, imgs, 4);   /* scrub, every byte */
	}
	free(dist);
	free(img);
	free(half);
	th_rm_store(path);
}

/* A name being written is taken: a second writer of it is refused naming
 * the first; once committed, the name exists. */
static void test_name_reserved(void **state)
{
	char *path = th_tmp_store();
	dd_store *s = th_create(path, BS, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256);
	dd_writer *w, *w2;
	uint8_t data[3 * BS] = {7};
	char pid[32];

	(void)state;
	snprintf(pid, sizeof(pid), "pid %ld ", (long)getpid());
	assert_int_equal(dd_writer_begin(&w, s, "a"), 0);
	assert_int_equal(dd_writer_begin(&w2, s, "a"), DD_EEXIST);
	assert_non_null(strstr(dd_store_errmsg(s), "being written"));
	assert_non_null(strstr(dd_store_errmsg(s), pid));
	assert_int_equal(dd_writer_write(w, data, sizeof(data)), 0);
	assert_int_equal(dd_writer_commit(w), 0);
	dd_writer_free(w);
	assert_int_equal(dd_writer_begin(&w2, s, "a"), DD_EEXIST);
	assert_non_null(strstr(dd_store_errmsg(s), "already exists"));
	th_check_image(s, "a", data, sizeof(data));
	dd_store_close(s);
	th_rm_store(path);
}

/* rm and gc run while a writer is open, and never free what it
 * references: blocks of a snapshot deleted after the writer began (the
 * writer holds references to them, not yet committed), and blocks dead
 * since before it began, which it must store again itself.  Holes after
 * them push them through the pipeline's lookups before rm and gc run. */
static void test_rm_gc_beside_writer(void **state)
{
	char *path = th_tmp_store();
	dd_store *s = th_create(path, BS, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256);
	dd_store *s2;
	dd_writer *w;
	const size_t n = 48 * BS, holes = 12 * MiB;
	uint8_t *early = random_image(n), *late = random_image(n);
	uint8_t *img = calloc(1, 2 * n + holes);
	dd_gc_opts o = DD_GC_OPTS_INIT;
	dd_gc_result res;

	(void)state;
	o.rewrite_below = 1.0;   /* move everything live: the worst case */
	memcpy(img, early, n);
	memcpy(img + n, late, n);
	assert_int_equal(th_put(s, "early", early, n, n), 0);
	assert_int_equal(th_put(s, "late", late, n, n), 0);
	assert_int_equal(dd_snapshot_delete(s, "early"), 0);
	assert_int_equal(dd_store_open(&s2, path, NULL), 0);
	assert_int_equal(dd_writer_begin(&w, s, "w"), 0);
	/* `early` died before w began: w stores it anew */
	write_all(w, img, 2 * n + holes, 7 * BS);
	/* `late` dies now, after w referenced its blocks */
	assert_int_equal(dd_snapshot_delete(s2, "late"), 0);
	assert_int_equal(dd_store_gc(s2, &o, &res), 0);
	/* gc freed early's old entries, none of late's */
	assert_int_equal(res.ddt_entries_removed, 48);
	assert_int_equal(dd_writer_commit(w), 0);
	dd_writer_free(w);
	th_check_image(s, "w", img, 2 * n + holes);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	/* with the writer gone, gc frees what nobody references */
	assert_int_equal(dd_store_gc(s2, &o, &res), 0);
	assert_int_equal(STAT(s, unreferenced_blocks), 0);
	th_check_image(s2, "w", img, 2 * n + holes);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	dd_store_close(s2);
	dd_store_close(s);
	free(early);
	free(late);
	free(img);
	th_rm_store(path);
}

/* The race behind a deferring writer's flush (format/store.md §7.2):
 * its packs' ends are committed at an interval, the DDT entries naming
 * their records at its flush, and the packs' locks let go after that.  gc
 * sums live bytes before the flush (the packs look empty) and takes the
 * locks after the writer is done (dd_gc_test_after_sum runs the commit
 * in between): it must not drop or rewrite those packs on its stale sums
 * -- their ends did not move -- but find the new entries and keep them. */
struct race_ctx {
	dd_writer *w;
	int rc;
};

static void race_commit(void *ctx)
{
	struct race_ctx *rc = ctx;

	if (!rc->w)
		return;
	rc->rc = dd_writer_commit(rc->w);
	dd_writer_free(rc->w);
	rc->w = NULL;
}

static void test_gc_beside_flush(void **state)
{
	extern uint64_t dd_writer_commit_bytes;
	extern void (*dd_gc_test_after_sum)(void *ctx);
	extern void *dd_gc_test_ctx;
	char *path = th_tmp_store();
	dd_store *s = th_create(path, BS, 0, DD_COMPRESS_NONE, DD_HASH_SHA256);
	dd_store *s2;
	/* holes after the data push it through the pipeline's lookups (a
	 * batch or two behind) and its intervals' commits */
	const size_t n = 1 * MiB + 12 * MiB;
	uint8_t *a = random_image(n);
	uint64_t saved = dd_writer_commit_bytes;
	struct race_ctx rc = {NULL, -1};
	dd_gc_opts o = DD_GC_OPTS_INIT;
	dd_gc_result res;

	(void)state;
	memset(a + 1 * MiB, 0, 12 * MiB);
	o.rewrite_below = 1.0;   /* any pack with dead bytes is chosen */
	dd_writer_commit_bytes = 8 * BS;
	assert_int_equal(dd_store_open(&s2, path, NULL), 0);
	assert_int_equal(dd_writer_begin(&rc.w, s, "w"), 0);
	write_all(rc.w, a, n, 64 * KiB);
	dd_gc_test_after_sum = race_commit;
	dd_gc_test_ctx = &rc;
	assert_int_equal(dd_store_gc(s2, &o, &res), 0);
	dd_gc_test_after_sum = NULL;
	dd_writer_commit_bytes = saved;
	assert_int_equal(rc.rc, 0);
	assert_int_equal(res.packs_deleted + res.packs_rewritten, 0);
	th_check_image(s, "w", a, n);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	/* the next gc, beside no writer, has nothing to take either */
	assert_int_equal(dd_store_gc(s2, &o, &res), 0);
	th_check_image(s2, "w", a, n);
	assert_int_equal(dd_store_scrub(s2, NULL, NULL, NULL), 0);
	dd_store_close(s2);
	dd_store_close(s);
	free(a);
	th_rm_store(path);
}

/* An aborted writer (after intermediate commits) is rolled back while
 * another goes on; gc then reclaims its space. */
static void test_abort_beside_writer(void **state)
{
	extern uint64_t dd_writer_commit_bytes;
	char *path = th_tmp_store();
	dd_store *s = th_create(path, BS, 0, DD_COMPRESS_NONE, DD_HASH_SHA256);
	dd_writer *w1, *w2;
	const size_t n = 6 * MiB;   /* batches of 4 MiB: commits mid-way */
	uint8_t *a = random_image(n), *b = random_image(n);
	uint64_t saved = dd_writer_commit_bytes;

	(void)state;
	dd_writer_commit_bytes = 8 * BS;
	assert_int_equal(dd_writer_begin(&w1, s, "gone"), 0);
	assert_int_equal(dd_writer_begin(&w2, s, "kept"), 0);
	write_all(w1, a, n, 64 * KiB);
	write_all(w2, b, n, 96 * KiB);
	dd_writer_abort(w1);
	dd_writer_free(w1);
	assert_int_equal(dd_writer_commit(w2), 0);
	dd_writer_free(w2);
	dd_writer_commit_bytes = saved;
	th_check_image(s, "kept", b, n);
	assert_int_equal(STAT(s, snapshots), 1);
	assert_int_equal(STAT(s, unique_blocks), n / BS);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	assert_int_equal(dd_store_gc(s, NULL, NULL), 0);
	assert_int_equal(STAT(s, unreferenced_blocks), 0);
	assert_true(STAT(s, pack_bytes) < n + n / 2);
	dd_store_close(s);
	free(a);
	free(b);
	th_rm_store(path);
}

/* ---- what needs the store to itself --------------------------------------------*/

/* Holds STORE/<name> exclusively as another process would, naming itself
 * as lock.c's holders do. */
static int hold_lock(const char *path, const char *name)
{
	char p[4200];
	const char who[] = "pid 4242 on elsewhere since 2026-01-01T00:00:00Z "
			   "start 0\n";
	int fd;

	snprintf(p, sizeof(p), "%s/%s", path, name);
	fd = open(p, O_RDWR | O_CREAT, 0644);
	assert_true(fd >= 0);
	assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0);
	assert_int_equal(ftruncate(fd, 0), 0);
	assert_int_equal(pwrite(fd, who, strlen(who), 0), (ssize_t)strlen(who));
	return fd;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* While repair has the store (STORE/lock exclusive), writers, rm and gc
 * are refused naming it; with wait_for_lock and a timeout they wait that
 * long, then give up the same way.  A second gc is refused naming the
 * first. */
static void test_busy_names_holder(void **state)
{
	char *path = th_tmp_store();
	dd_store *s = th_create(path, BS, 0, DD_COMPRESS_NONE, DD_HASH_SHA256);
	dd_open_opts oo = DD_OPEN_OPTS_INIT;
	dd_store *sw;
	dd_writer *w;
	uint8_t data[BS] = {1};
	double t0, t1;
	int fd;

	(void)state;
	assert_int_equal(th_put(s, "a", data, sizeof(data), BS), 0);
	fd = hold_lock(path, "lock");
	assert_int_equal(dd_writer_begin(&w, s, "b"), DD_EBUSY);
	assert_non_null(strstr(dd_store_errmsg(s), "busy"));
	assert_non_null(strstr(dd_store_errmsg(s), "pid 4242 on elsewhere"));
	assert_int_equal(dd_snapshot_delete(s, "a"), DD_EBUSY);
	assert_int_equal(dd_store_gc(s, NULL, NULL), DD_EBUSY);
	/* waiting, with a limit */
	oo.wait_for_lock = 1;
	oo.lock_timeout_ms = 300;
	assert_int_equal(dd_store_open(&sw, path, &oo), 0);
	t0 = now_ms();
	assert_int_equal(dd_writer_begin(&w, sw, "b"), DD_EBUSY);
	t1 = now_ms();
	assert_true(t1 - t0 >= 290);
	assert_non_null(strstr(dd_store_errmsg(sw), "pid 4242"));
	close(fd);
	/* free again: the waiting handle writes */
	assert_int_equal(th_put(sw, "b", data, sizeof(data), BS), 0);
	/* one gc at a time */
	fd = hold_lock(path, "gc.lock");
	assert_int_equal(dd_store_gc(s, NULL, NULL), DD_EBUSY);
	assert_non_null(strstr(dd_store_errmsg(s), "pid 4242 on elsewhere"));
	/* but writers and rm go on beside a gc */
	assert_int_equal(th_put(s, "c", data, sizeof(data), BS), 0);
	assert_int_equal(dd_snapshot_delete(s, "a"), 0);
	close(fd);
	assert_int_equal(dd_store_gc(s, NULL, NULL), 0);
	th_check_image(s, "b", data, sizeof(data));
	th_check_image(s, "c", data, sizeof(data));
	dd_store_close(sw);
	dd_store_close(s);
	th_rm_store(path);
}

/* ---- eight threads, one handle ---------------------------------------------------*/

#define NTHREADS 8
#define TN (96 * BS)

typedef struct thread_job {
	dd_store *s;
	int k;
	const uint8_t *common;
	uint8_t *img;
	int rc;
} thread_job;

/* Thread k: a third shared by all, a third shared with thread k ^ 1, a
 * third its own; in pieces of a size of its own. */
static void *thread_put(void *arg)
{
	thread_job *j = arg;
	char name[16];

	snprintf(name, sizeof(name), "t%d", j->k);
	j->rc = th_put(j->s, name, j->img, TN, (size_t)(j->k + 1) * 3000);
	return NULL;
}

static void test_eight_threads_one_handle(void **state)
{
	char *path = th_tmp_store();
	dd_store *s = th_create(path, BS, 0, DD_COMPRESS_ZSTD, DD_HASH_SHA256);
	thread_job jobs[NTHREADS];
	pthread_t t[NTHREADS];
	uint8_t *common = random_image(TN / 3), *pair[NTHREADS / 2];

	(void)state;
	for (int p = 0; p < NTHREADS / 2; p++)
		pair[p] = random_image(TN / 3);
	for (int k = 0; k < NTHREADS; k++) {
		uint8_t *img = malloc(TN);

		memcpy(img, common, TN / 3);
		memcpy(img + TN / 3, pair[k / 2], TN / 3);
		fill_random(img + 2 * (TN / 3), TN - 2 * (TN / 3));
		jobs[k] = (thread_job){.s = s, .k = k, .img = img};
	}
	for (int k = 0; k < NTHREADS; k++)
		assert_int_equal(pthread_create(&t[k], NULL, thread_put,
						&jobs[k]), 0);
	for (int k = 0; k < NTHREADS; k++) {
		char name[16];

		assert_int_equal(pthread_join(t[k], NULL), 0);
		assert_int_equal(jobs[k].rc, 0);
		snprintf(name, sizeof(name), "t%d", k);
		th_check_image(s, name, jobs[k].img, TN);
	}
	/* 32 common + 4 x 32 pair + 8 x 32 own blocks, each kept once */
	assert_int_equal(STAT(s, unique_blocks), 32 + 4 * 32 + 8 * 32);
	assert_int_equal(STAT(s, referenced_blocks), 8 * 96);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	assert_int_equal(dd_store_gc(s, NULL, NULL), 0);
	for (int k = 0; k < NTHREADS; k++) {
		char name[16];

		snprintf(name, sizeof(name), "t%d", k);
		th_check_image(s, name, jobs[k].img, TN);
		free(jobs[k].img);
	}
	for (int p = 0; p < NTHREADS / 2; p++)
		free(pair[p]);
	free(common);
	dd_store_close(s);
	th_rm_store(path);
}

/* ---- content-defined blocks -------------------------------------------------*/

/* Two writers of a fastcdc store on one handle, taking turns with commits
 * of 1 MiB between: their block maps, keyed by byte offset, grow side by
 * side (each append past the other's keys), a block both write is kept
 * once, and each snapshot reads back exact -- after gc too. */
static void test_fastcdc_side_by_side(void **state)
{
	extern uint64_t dd_writer_commit_bytes;
	char *path = th_tmp_store();
	dd_create_opts co = DD_CREATE_OPTS_INIT;
	uint64_t saved = dd_writer_commit_bytes;
	const size_t n = 10 * MiB, shared = 2 * MiB;
	uint8_t *a = random_image(n), *b = random_image(n);
	dd_writer *wa, *wb;
	dd_gc_result res;
	dd_store *s;

	(void)state;
	memcpy(b + 3 * MiB + 12345, a + 5 * MiB, shared);  /* shifted */
	co.block_size = BS;
	co.chunker = DD_CHUNKER_FASTCDC;
	co.compress = DD_COMPRESS_NONE;
	assert_int_equal(dd_store_create(&s, path, &co, NULL), 0);
	dd_writer_commit_bytes = MiB;
	assert_int_equal(dd_writer_begin(&wa, s, "a"), 0);
	assert_int_equal(dd_writer_begin(&wb, s, "b"), 0);
	for (size_t off = 0; off < n; off += MiB) {
		assert_int_equal(dd_writer_write(wa, a + off, MiB), 0);
		assert_int_equal(dd_writer_write(wb, b + off, MiB), 0);
	}
	assert_int_equal(dd_writer_commit(wb), 0);
	assert_int_equal(dd_writer_commit(wa), 0);
	dd_writer_free(wa);
	dd_writer_free(wb);
	dd_writer_commit_bytes = saved;
	th_check_image(s, "a", a, n);
	th_check_image(s, "b", b, n);
	/* the shared run cuts the same way inside both images once the
	 * cutter is in step: most of its blocks are one entry each */
	assert_true(STAT(s, referenced_blocks) - STAT(s, unique_blocks) >=
		    shared / BS / 2);
	assert_int_equal(dd_store_scrub(s, NULL, NULL, NULL), 0);
	assert_int_equal(dd_store_gc(s, NULL, &res), 0);
	th_check_image(s, "a", a, n);
	th_check_image(s, "b", b, n);
	free(a);
	free(b);
	dd_store_close(s);
	th_rm_store(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_writers_side_by_side),
		cmocka_unit_test(test_ops_order),
		cmocka_unit_test(test_wops_key_index),
		cmocka_unit_test(test_commit_runs_exact),
		cmocka_unit_test(test_name_reserved),
		cmocka_unit_test(test_rm_gc_beside_writer),
		cmocka_unit_test(test_gc_beside_flush),
		cmocka_unit_test(test_abort_beside_writer),
		cmocka_unit_test(test_busy_names_holder),
		cmocka_unit_test(test_eight_threads_one_handle),
		cmocka_unit_test(test_fastcdc_side_by_side),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
