/*
 * test_catalog.c -- unit tests of the catalog over LMDB (libdedup/catalog/,
 * format/ddt.md, format/store.md §2-§5).
 *
 * Every test gets a fresh environment in its own temporary directory.
 * Encodings are checked on the real bytes LMDB holds (read back with
 * mdb_get through the txn's internals), and damaged values are planted the
 * same way -- written raw with mdb_put -- to check that every reader refuses
 * them with DD_ECORRUPT / DD_EVERSION instead of trusting or crashing.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <dedup.h>

#include "common/endian.h"
#include "common/err.h"
#include "catalog/db.h"
#include "catalog/db_internal.h"
#include "catalog/kfilter.h"
#include "catalog/lmdb_page.h"
#include "catalog/ucnt.h"

#define OK(expr) assert_int_equal((expr), 0)

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

struct fixture {
	char fx_dir[64];
	dd_db *fx_db;
	dd_err fx_err;
};

static void dir_remove(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	char buf[512];

	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(buf, sizeof(buf), "%s/%s", path, e->d_name);
		unlink(buf);
	}
	closedir(d);
	rmdir(path);
}

static int fixture_setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));

	assert_non_null(fx);
	strcpy(fx->fx_dir, "/tmp/dd_test_catalog.XXXXXX");
	assert_non_null(mkdtemp(fx->fx_dir));
	OK(dd_db_open(&fx->fx_db, &fx->fx_err, fx->fx_dir, true, false));
	assert_non_null(fx->fx_db);
	*state = fx;
	return 0;
}

static int fixture_teardown(void **state)
{
	struct fixture *fx = *state;

	dd_db_close(fx->fx_db);
	dir_remove(fx->fx_dir);
	free(fx);
	return 0;
}

static dd_txn *begin(struct fixture *fx, bool write)
{
	dd_txn *txn = NULL;

	OK(dd_txn_begin(fx->fx_db, &fx->fx_err, write, &txn));
	assert_non_null(txn);
	return txn;
}

static void commit(struct fixture *fx, dd_txn *txn)
{
	OK(dd_txn_commit(txn, &fx->fx_err));
}

/* Raw access to a table, bypassing the encoders under test. */
static void raw_put(dd_txn *txn, MDB_dbi dbi, const void *k, size_t klen,
		    const void *v, size_t vlen)
{
	MDB_val mk = {klen, (void *)k}, mv = {vlen, (void *)v};

	OK(mdb_put(txn->tx_mdb, dbi, &mk, &mv, 0));
}

static MDB_val raw_get(dd_txn *txn, MDB_dbi dbi, const void *k, size_t klen)
{
	MDB_val mk = {klen, (void *)k}, mv = {0, NULL};

	OK(mdb_get(txn->tx_mdb, dbi, &mk, &mv));
	return mv;
}

static uint64_t table_entries(dd_txn *txn, MDB_dbi dbi)
{
	MDB_stat st;

	OK(mdb_stat(txn->tx_mdb, dbi, &st));
	return st.ms_entries;
}

static void key_bytes(uint8_t out[DD_DDT_KEY_SIZE], const dd_ddt_key *k)
{
	memcpy(out, k->dk_hash, DD_HASH_SIZE);
	out[DD_HASH_SIZE] = k->dk_variant;
}

static void assert_ent_equal(const dd_ddt_ent *a, const dd_ddt_ent *b)
{
	assert_int_equal(a->de_codec, b->de_codec);
	assert_int_equal(a->de_flags, b->de_flags);
	assert_int_equal(a->de_pack, b->de_pack);
	assert_true(a->de_offset == b->de_offset);
	assert_int_equal(a->de_psize, b->de_psize);
	assert_int_equal(a->de_lsize, b->de_lsize);
	assert_true(a->de_refcnt == b->de_refcnt);
	assert_true(a->de_dead_since == b->de_dead_since);
}

/* ---- dedup table: round trip ----------------------------------------------*/

#define NEDGE 6

struct edge {
	dd_ddt_key ek_key;
	dd_ddt_ent ek_ent;
};

static void edge_entries(struct edge e[NEDGE])
{
	memset(e, 0, NEDGE * sizeof(*e));
	/* all-zero key, smallest values */
	e[0].ek_ent = (dd_ddt_ent){.de_codec = 0, .de_lsize = 1, .de_psize = 0};
	/* all-0xff key, variant 255, largest values */
	memset(e[1].ek_key.dk_hash, 0xff, DD_HASH_SIZE);
	e[1].ek_key.dk_variant = DD_DDT_MAX_VARIANT;
	e[1].ek_ent = (dd_ddt_ent){
		.de_codec = 1, .de_flags = DD_DDE_PENDING,
		.de_pack = UINT32_MAX, .de_offset = UINT64_MAX,
		.de_psize = DD_BLOCK_SIZE_MAX, .de_lsize = DD_BLOCK_SIZE_MAX,
		/* the largest count: bit 63 marks a dead entry (ddt.md §3) */
		.de_refcnt = DD_DDT_DEAD - 1};
	/* same hash as [1], variant 0: sorts just before it */
	memset(e[2].ek_key.dk_hash, 0xff, DD_HASH_SIZE);
	e[2].ek_ent = (dd_ddt_ent){
		.de_codec = 1, .de_pack = 7,
		.de_offset = (5ull << 30) + 3, /* > 4 GiB */
		.de_psize = 1, .de_lsize = 1, .de_refcnt = 1};
	/* a hash differing only in its last byte from [0] */
	e[3].ek_key.dk_hash[DD_HASH_SIZE - 1] = 1;
	e[3].ek_key.dk_variant = 1;
	e[3].ek_ent = (dd_ddt_ent){
		.de_codec = 0, .de_pack = 1, .de_offset = 0x100000000ull,
		.de_psize = DD_BLOCK_SIZE_MAX, .de_lsize = DD_BLOCK_SIZE_MAX,
		.de_refcnt = DD_DDT_DEAD - 2};
	/* random hashes */
	for (int i = 4; i < NEDGE; i++) {
		fill_random(e[i].ek_key.dk_hash, DD_HASH_SIZE);
		e[i].ek_key.dk_variant = (uint8_t)(i * 37);
		e[i].ek_ent = (dd_ddt_ent){
			.de_codec = (uint8_t)(i & 1), .de_pack = (uint32_t)i,
			.de_offset = rng_next(), .de_psize = 4000,
			.de_lsize = 4096, .de_refcnt = (uint64_t)i << 40};
	}
}

struct walk_log {
	int wl_n;
	int wl_stop_at;
	uint8_t wl_keys[NEDGE][DD_DDT_KEY_SIZE];
	dd_ddt_ent wl_ents[NEDGE];
};

static int walk_log_cb(void *ctx, const dd_ddt_key *key,
		       const dd_ddt_ent *ent)
{
	struct walk_log *wl = ctx;

	assert_true(wl->wl_n < NEDGE);
	key_bytes(wl->wl_keys[wl->wl_n], key);
	wl->wl_ents[wl->wl_n] = *ent;
	if (wl->wl_n++ == wl->wl_stop_at)
		return 42;
	return 0;
}

static void test_ddt_roundtrip(void **state)
{
	struct fixture *fx = *state;
	struct edge e[NEDGE];
	dd_ddt_ent got;
	dd_txn *txn;

	edge_entries(e);
	txn = begin(fx, true);
	/* no meta ddt.live yet: the live table is ddt0 */
	assert_int_equal(txn->tx_ddt_which, 0);
	assert_int_equal(txn->tx_ddt, fx->fx_db->db_dbi[DD_DBI_DDT0]);
	for (int i = 0; i < NEDGE; i++) {
		assert_int_equal(dd_ddt_get(txn, &fx->fx_err, &e[i].ek_key,
					    &got), DD_ENOENT);
		OK(dd_ddt_put(txn, &fx->fx_err, &e[i].ek_key, &e[i].ek_ent));
		OK(dd_ddt_get(txn, &fx->fx_err, &e[i].ek_key, &got));
		assert_ent_equal(&got, &e[i].ek_ent);
	}
	commit(fx, txn);

	txn = begin(fx, false);
	for (int i = 0; i < NEDGE; i++) {
		memset(&got, 0xa5, sizeof(got));
		OK(dd_ddt_get(txn, &fx->fx_err, &e[i].ek_key, &got));
		assert_ent_equal(&got, &e[i].ek_ent);
	}
	assert_int_equal(table_entries(txn, txn->tx_ddt), NEDGE);
	assert_int_equal(table_entries(txn, txn->tx_ddt_other), 0);

	/* The walk yields memcmp order of hash||variant. */
	struct walk_log wl = {.wl_stop_at = -1};
	OK(dd_ddt_walk(txn, &fx->fx_err, walk_log_cb, &wl));
	assert_int_equal(wl.wl_n, NEDGE);
	for (int i = 1; i < NEDGE; i++)
		assert_true(memcmp(wl.wl_keys[i - 1], wl.wl_keys[i],
				   DD_DDT_KEY_SIZE) < 0);
	for (int i = 0; i < NEDGE; i++) {
		uint8_t kb[DD_DDT_KEY_SIZE];
		int j;

		key_bytes(kb, &e[i].ek_key);
		for (j = 0; j < NEDGE; j++)
			if (!memcmp(kb, wl.wl_keys[j], DD_DDT_KEY_SIZE))
				break;
		assert_true(j < NEDGE);
		assert_ent_equal(&wl.wl_ents[j], &e[i].ek_ent);
	}
	/* Known order of the hand-made keys: [0] < [3] < ... < [2] < [1]. */
	{
		uint8_t k0[DD_DDT_KEY_SIZE], k1[DD_DDT_KEY_SIZE],
			k2[DD_DDT_KEY_SIZE], k3[DD_DDT_KEY_SIZE];

		key_bytes(k0, &e[0].ek_key);
		key_bytes(k1, &e[1].ek_key);
		key_bytes(k2, &e[2].ek_key);
		key_bytes(k3, &e[3].ek_key);
		assert_memory_equal(wl.wl_keys[0], k0, DD_DDT_KEY_SIZE);
		assert_memory_equal(wl.wl_keys[1], k3, DD_DDT_KEY_SIZE);
		assert_memory_equal(wl.wl_keys[NEDGE - 2], k2, DD_DDT_KEY_SIZE);
		assert_memory_equal(wl.wl_keys[NEDGE - 1], k1, DD_DDT_KEY_SIZE);
	}
	/* A callback's non-zero return stops the walk with that value. */
	struct walk_log wl2 = {.wl_stop_at = 2};
	assert_int_equal(dd_ddt_walk(txn, &fx->fx_err, walk_log_cb, &wl2), 42);
	assert_int_equal(wl2.wl_n, 3);
	dd_txn_abort(txn);

	/* Delete: gone, a second delete and an absent key are DD_ENOENT. */
	txn = begin(fx, true);
	OK(dd_ddt_del(txn, &fx->fx_err, &e[2].ek_key));
	assert_int_equal(dd_ddt_get(txn, &fx->fx_err, &e[2].ek_key, &got),
			 DD_ENOENT);
	assert_int_equal(dd_ddt_del(txn, &fx->fx_err, &e[2].ek_key), DD_ENOENT);
	/* the other variant of the same hash is untouched */
	OK(dd_ddt_get(txn, &fx->fx_err, &e[1].ek_key, &got));
	assert_ent_equal(&got, &e[1].ek_ent);
	dd_ddt_key absent = e[0].ek_key;
	absent.dk_variant = 1;
	assert_int_equal(dd_ddt_get(txn, &fx->fx_err, &absent, &got), DD_ENOENT);
	assert_int_equal(dd_ddt_del(txn, &fx->fx_err, &absent), DD_ENOENT);
	/* put over an existing key replaces its value */
	e[0].ek_ent.de_refcnt = 99;
	OK(dd_ddt_put(txn, &fx->fx_err, &e[0].ek_key, &e[0].ek_ent));
	/* insert leaves an existing key as it is and hands its entry back;
	 * an absent one it adds */
	{
		dd_ddt_ent other = e[3].ek_ent;

		other.de_refcnt = 7;
		memset(&got, 0xa5, sizeof(got));
		assert_int_equal(dd_ddt_insert(txn, &fx->fx_err, &e[0].ek_key,
					       &other, &got), DD_EEXIST);
		assert_ent_equal(&got, &e[0].ek_ent);
		OK(dd_ddt_get(txn, &fx->fx_err, &e[0].ek_key, &got));
		assert_ent_equal(&got, &e[0].ek_ent);
		OK(dd_ddt_insert(txn, &fx->fx_err, &e[2].ek_key, &other, &got));
		OK(dd_ddt_get(txn, &fx->fx_err, &e[2].ek_key, &got));
		assert_ent_equal(&got, &other);
		OK(dd_ddt_del(txn, &fx->fx_err, &e[2].ek_key));
	}
	commit(fx, txn);

	txn = begin(fx, false);
	assert_int_equal(dd_ddt_get(txn, &fx->fx_err, &e[2].ek_key, &got),
			 DD_ENOENT);
	OK(dd_ddt_get(txn, &fx->fx_err, &e[0].ek_key, &got));
	assert_true(got.de_refcnt == 99);
	assert_int_equal(table_entries(txn, txn->tx_ddt), NEDGE - 1);
	dd_txn_abort(txn);
}

/* dd_table_get of k in the packs table finds v, and the guard leaves
 * the answer to LMDB (dd_guard_get: -1). */
static void get_by_lmdb(struct fixture *fx, dd_txn *txn, void *k,
			size_t klen, const void *v, size_t vlen)
{
	MDB_val mk = {klen, k}, mv = {0, NULL};

	OK(dd_table_get(txn, &fx->fx_err, DD_DBI_PACKS, &mk, &mv, "test"));
	assert_int_equal(mv.mv_size, vlen);
	assert_memory_equal(mv.mv_data, v, vlen);
	assert_int_equal(dd_guard_get(txn, DD_DBI_PACKS, &mk, &mv), -1);
}

/* A read transaction renewed on the snapshot it parked on -- nothing
 * committed meanwhile -- keeps what the guard and the DDT's meta told it
 * (tx_same_snap); one renewed after a commit reads them again, and sees
 * the commit: a table emptied, meta's runs, a key added. */
static void test_renew_same_snapshot(void **state)
{
	struct fixture *fx = *state;
	uint8_t k[36] = {1}, v[32] = {2};
	MDB_val mk = {sizeof(k), k}, mv;
	dd_txn *w = begin(fx, true), *r;

	raw_put(w, fx->fx_db->db_dbi[DD_DBI_PACKS], k, sizeof(k), v, sizeof(v));
	commit(fx, w);
	r = begin(fx, false);
	OK(dd_table_get(r, &fx->fx_err, DD_DBI_PACKS, &mk, &mv, "get"));
	dd_txn_reset(r);
	OK(dd_txn_renew(r, &fx->fx_err));
	assert_true(r->tx_same_snap);
	OK(dd_table_get(r, &fx->fx_err, DD_DBI_PACKS, &mk, &mv, "get"));
	assert_int_equal(mv.mv_size, sizeof(v));
	dd_txn_reset(r);
	w = begin(fx, true);
	k[0] = 3;
	raw_put(w, fx->fx_db->db_dbi[DD_DBI_PACKS], k, sizeof(k), v, sizeof(v));
	OK(dd_meta_put_u64(w, &fx->fx_err, "ddt.runs", 2));
	commit(fx, w);
	OK(dd_txn_renew(r, &fx->fx_err));
	assert_false(r->tx_same_snap);
	assert_int_equal(dd_ddt_runs(r), 2);
	OK(dd_table_get(r, &fx->fx_err, DD_DBI_PACKS, &mk, &mv, "get"));
	/* and renewed on that one again: the same answers */
	dd_txn_reset(r);
	OK(dd_txn_renew(r, &fx->fx_err));
	assert_true(r->tx_same_snap);
	assert_int_equal(dd_ddt_runs(r), 2);
	OK(dd_table_get(r, &fx->fx_err, DD_DBI_PACKS, &mk, &mv, "get"));
	dd_txn_abort(r);
}

/* A read transaction's gets are answered from the leaf the guard
 * checked (dd_guard_get), not by a second descent: on a table of three
 * levels, every key present and absent gets mdb_get's answer (bytes,
 * and the very address in LMDB's map), and a write transaction still
 * sees its own uncommitted changes (LMDB answers it). */
static void test_guard_get(void **state)
{
	struct fixture *fx = *state;
	enum { N = 20000 };
	uint8_t k[36] = {0}, v[32];
	dd_txn *txn = begin(fx, true);
	MDB_stat st;

	for (uint32_t i = 0; i < N; i++) {
		uint32_t x = i * 2654435761u;   /* spread over the leaves */

		memcpy(k, &x, 4);
		memset(v, (int)(i & 0xff), sizeof(v));
		memcpy(v, &i, 4);
		raw_put(txn, fx->fx_db->db_dbi[DD_DBI_PACKS], k, sizeof(k), v,
			sizeof(v));
	}
	commit(fx, txn);
	txn = begin(fx, false);
	OK(mdb_stat(txn->tx_mdb, fx->fx_db->db_dbi[DD_DBI_PACKS], &st));
	assert_true(st.ms_depth >= 3);
	assert_true(fx->fx_db->db_map_read);   /* else nothing is tested */
	for (uint32_t i = 0; i < 2 * N; i++) {
		uint32_t x = (i / 2) * 2654435761u + (i & 1); /* odd: absent */
		MDB_val mk = {sizeof(k), k}, mv = {0, NULL}, want = {0, NULL};
		int rc, mrc;

		memcpy(k, &x, 4);
		OK(dd_guard_key(txn, &fx->fx_err, DD_DBI_PACKS, k, sizeof(k),
				DD_GUARD_READ));
		rc = dd_guard_get(txn, DD_DBI_PACKS, &mk, &mv);
		mrc = mdb_get(txn->tx_mdb, fx->fx_db->db_dbi[DD_DBI_PACKS],
			      &mk, &want);
		assert_int_equal(rc, mrc == 0 ? 1 : 0);
		if (rc == 1) {
			assert_int_equal(mv.mv_size, want.mv_size);
			assert_ptr_equal(mv.mv_data, want.mv_data);
		}
	}
	dd_txn_abort(txn);

	txn = begin(fx, true);
	memset(k, 0, sizeof(k));
	memset(v, 0xee, sizeof(v));
	raw_put(txn, fx->fx_db->db_dbi[DD_DBI_PACKS], k, sizeof(k), v,
		sizeof(v));
	get_by_lmdb(fx, txn, k, sizeof(k), v, sizeof(v));
	dd_txn_abort(txn);
}

/* Another map of data.mdb in the process (a caller's own LMDB
 * environment, say) when the catalog opens: the guard does not read
 * pages through a map that may be that one, and gets still answer. */
static void test_guard_foreign_map(void **state)
{
	struct fixture *fx = *state;
	uint8_t k[8] = {1, 2, 3}, v[16] = {9, 8, 7};
	char path[300];
	dd_txn *txn = begin(fx, true);
	struct stat st;
	void *other;
	int fd;

	raw_put(txn, fx->fx_db->db_dbi[DD_DBI_PACKS], k, sizeof(k), v,
		sizeof(v));
	commit(fx, txn);
	dd_db_close(fx->fx_db);
	snprintf(path, sizeof(path), "%s/data.mdb", fx->fx_dir);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	other = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(other != MAP_FAILED);
	close(fd);
	OK(dd_db_open(&fx->fx_db, &fx->fx_err, fx->fx_dir, false, false));
	assert_false(fx->fx_db->db_map_read);
	txn = begin(fx, false);
	get_by_lmdb(fx, txn, k, sizeof(k), v, sizeof(v));
	dd_txn_abort(txn);
	munmap(other, (size_t)st.st_size);
}

/* dd_ddt_add_refs: n references in one descent, a dead entry alive
 * again, an absent or MISSING entry refused (DD_ENOENT) and an overflow
 * refused (DD_ECORRUPT), each leaving every entry as it was. */
static void test_ddt_add_refs(void **state)
{
	struct fixture *fx = *state;
	struct edge e[NEDGE];
	dd_ddt_ent got, want;
	dd_ddt_key absent;
	dd_txn *txn;

	edge_entries(e);
	e[0].ek_ent.de_refcnt = 5;
	e[3].ek_ent.de_refcnt = 0;          /* dead since transaction 77 */
	e[3].ek_ent.de_dead_since = 77;
	e[4].ek_ent = (dd_ddt_ent){.de_flags = DD_DDE_MISSING,
				   .de_lsize = 4096, .de_refcnt = 2};
	e[5].ek_ent.de_refcnt = DD_DDT_DEAD - 2;
	txn = begin(fx, true);
	for (int i = 0; i < NEDGE; i++)
		OK(dd_ddt_put(txn, &fx->fx_err, &e[i].ek_key, &e[i].ek_ent));
	commit(fx, txn);

	txn = begin(fx, true);
	memset(&got, 0xa5, sizeof(got));
	OK(dd_ddt_add_refs(txn, &fx->fx_err, &e[0].ek_key, 3, &got));
	want = e[0].ek_ent;
	want.de_refcnt = 8;
	assert_ent_equal(&got, &want);
	e[0].ek_ent = want;
	OK(dd_ddt_add_refs(txn, &fx->fx_err, &e[3].ek_key, 1, &got));
	want = e[3].ek_ent;
	want.de_refcnt = 1;
	want.de_dead_since = 0;
	assert_ent_equal(&got, &want);
	e[3].ek_ent = want;
	absent = e[0].ek_key;
	absent.dk_hash[7] ^= 0x40;
	assert_int_equal(dd_ddt_add_refs(txn, &fx->fx_err, &absent, 1, &got),
			 DD_ENOENT);
	assert_int_equal(dd_ddt_add_refs(txn, &fx->fx_err, &e[4].ek_key, 1,
					 &got), DD_ENOENT);
	assert_int_equal(dd_ddt_add_refs(txn, &fx->fx_err, &e[5].ek_key, 2,
					 &got), DD_ECORRUPT);
	OK(dd_ddt_add_refs(txn, &fx->fx_err, &e[5].ek_key, 1, &got));
	e[5].ek_ent.de_refcnt = DD_DDT_DEAD - 1;
	commit(fx, txn);

	txn = begin(fx, false);
	for (int i = 0; i < NEDGE; i++) {
		OK(dd_ddt_get(txn, &fx->fx_err, &e[i].ek_key, &got));
		assert_ent_equal(&got, &e[i].ek_ent);
	}
	assert_int_equal(dd_ddt_get(txn, &fx->fx_err, &absent, &got),
			 DD_ENOENT);
	assert_int_equal(table_entries(txn, txn->tx_ddt), NEDGE);
	dd_txn_abort(txn);
}

/* format/ddt.md §2-§3 on the bytes LMDB stores. */
static void test_ddt_encoding_bytes(void **state)
{
	struct fixture *fx = *state;
	dd_ddt_key key;
	dd_ddt_ent ent = {
		.de_codec = 1, .de_flags = 0, .de_pack = 0x01020304,
		.de_offset = 0x0000000123456789ull, .de_psize = 0x1000,
		.de_lsize = 0x100000, .de_refcnt = 0x1122334455667788ull};
	static const uint8_t want[DD_DDT_VAL_SIZE] = {
		0x01, 0x01, 0x00, 0x00,                         /* ver codec flags */
		0x04, 0x03, 0x02, 0x01,                         /* pack */
		0x89, 0x67, 0x45, 0x23, 0x01, 0x00, 0x00, 0x00, /* offset */
		0x00, 0x10, 0x00, 0x00,                         /* psize */
		0x00, 0x00, 0x10, 0x00,                         /* lsize */
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, /* refcnt */
	};
	uint8_t kb[DD_DDT_KEY_SIZE];
	dd_txn *txn;
	MDB_val v;

	for (int i = 0; i < DD_HASH_SIZE; i++)
		key.dk_hash[i] = (uint8_t)i;
	key.dk_variant = 0xab;
	txn = begin(fx, true);
	OK(dd_ddt_put(txn, &fx->fx_err, &key, &ent));
	for (int i = 0; i < DD_HASH_SIZE; i++)
		kb[i] = (uint8_t)i;
	kb[DD_HASH_SIZE] = 0xab;
	v = raw_get(txn, txn->tx_ddt, kb, sizeof(kb));
	assert_int_equal(v.mv_size, DD_DDT_VAL_SIZE);
	assert_memory_equal(v.mv_data, want, sizeof(want));
	/* a dead entry: bit 63 and the transaction that killed it, read
	 * back as refcount 0; with no such transaction, 0 as ever */
	ent.de_refcnt = 0;
	ent.de_dead_since = 0x0000123456789abcull;
	OK(dd_ddt_put(txn, &fx->fx_err, &key, &ent));
	v = raw_get(txn, txn->tx_ddt, kb, sizeof(kb));
	assert_int_equal(dd_get_le64((const uint8_t *)v.mv_data + 24),
			 0x8000123456789abcull);
	memset(&ent, 0xff, sizeof(ent));
	OK(dd_ddt_get(txn, &fx->fx_err, &key, &ent));
	assert_int_equal(ent.de_refcnt, 0);
	assert_int_equal(ent.de_dead_since, 0x0000123456789abcull);
	ent.de_dead_since = 0;
	OK(dd_ddt_put(txn, &fx->fx_err, &key, &ent));
	v = raw_get(txn, txn->tx_ddt, kb, sizeof(kb));
	assert_int_equal(dd_get_le64((const uint8_t *)v.mv_data + 24), 0);
	/* DAMAGED (bit 2) keeps the location it names; beside MISSING,
	 * which has none, it is refused (format/ddt.md §3) */
	ent = (dd_ddt_ent){.de_codec = 1, .de_flags = DD_DDE_DAMAGED,
			   .de_pack = 5, .de_offset = 64, .de_psize = 10,
			   .de_lsize = 4096, .de_refcnt = 3};
	OK(dd_ddt_put(txn, &fx->fx_err, &key, &ent));
	v = raw_get(txn, txn->tx_ddt, kb, sizeof(kb));
	assert_int_equal(((const uint8_t *)v.mv_data)[2], 0x04);
	assert_int_equal(((const uint8_t *)v.mv_data)[3], 0x00);
	memset(&ent, 0, sizeof(ent));
	OK(dd_ddt_get(txn, &fx->fx_err, &key, &ent));
	assert_int_equal(ent.de_flags, DD_DDE_DAMAGED);
	assert_int_equal(ent.de_pack, 5);
	assert_int_equal(ent.de_refcnt, 3);
	ent = (dd_ddt_ent){.de_flags = DD_DDE_MISSING | DD_DDE_DAMAGED,
			   .de_lsize = 4096, .de_refcnt = 1};
	OK(dd_ddt_put(txn, &fx->fx_err, &key, &ent));
	assert_int_equal(dd_ddt_get(txn, &fx->fx_err, &key, &ent),
			 DD_ECORRUPT);
	ent.de_flags = DD_DDE_MISSING;
	OK(dd_ddt_put(txn, &fx->fx_err, &key, &ent));
	OK(dd_ddt_get(txn, &fx->fx_err, &key, &ent));
	dd_txn_abort(txn);
}

/* ---- dedup table: damaged values ------------------------------------------*/

struct damage {
	const char *dm_what;
	size_t dm_len;
	int dm_off;     /* byte to overwrite, -1 none */
	uint8_t dm_byte;
	int dm_off32;   /* le32 field to overwrite, -1 none */
	uint32_t dm_u32;
	int dm_want;
};

static int walk_nop(void *ctx, const dd_ddt_key *key, const dd_ddt_ent *ent)
{
	(*(int *)ctx)++;
	return 0;
}

static void test_ddt_damaged(void **state)
{
	struct fixture *fx = *state;
	/* A valid value: codec 1, pack 3, offset 64, psize 100, lsize 4096. */
	const dd_ddt_ent good = {.de_codec = 1, .de_pack = 3, .de_offset = 64,
				 .de_psize = 100, .de_lsize = 4096,
				 .de_refcnt = 2};
	static const struct damage dm[] = {
		{"31 bytes", 31, -1, 0, -1, 0, DD_ECORRUPT},
		{"33 bytes", 33, -1, 0, -1, 0, DD_ECORRUPT},
		{"1 byte", 1, -1, 0, -1, 0, DD_ECORRUPT},
		{"empty", 0, -1, 0, -1, 0, DD_ECORRUPT},
		{"version 2", 32, 0, 2, -1, 0, DD_EVERSION},
		{"version 255", 32, 0, 255, -1, 0, DD_EVERSION},
		{"version 0", 32, 0, 0, -1, 0, DD_ECORRUPT},
		{"flag bit 1", 32, 2, 0x02, -1, 0, DD_ECORRUPT},
		{"flag bit 3", 32, 2, 0x08, -1, 0, DD_ECORRUPT},
		{"flags 0x0e", 32, 2, 0x0e, -1, 0, DD_ECORRUPT},
		{"flag bit 15", 32, 3, 0x80, -1, 0, DD_ECORRUPT},
		{"codec 2", 32, 1, 2, -1, 0, DD_ECORRUPT},
		{"codec 7", 32, 1, 7, -1, 0, DD_ECORRUPT},
		{"codec 255", 32, 1, 255, -1, 0, DD_ECORRUPT},
		{"lsize 0", 32, -1, 0, 20, 0, DD_ECORRUPT},
		{"lsize 0, psize 0", 32, 16, 0, 20, 0, DD_ECORRUPT},
		{"lsize 1 MiB + 1", 32, -1, 0, 20, DD_BLOCK_SIZE_MAX + 1,
		 DD_ECORRUPT},
		{"lsize 2^32-1", 32, -1, 0, 20, UINT32_MAX, DD_ECORRUPT},
		{"psize 4097 > lsize 4096", 32, -1, 0, 16, 4097, DD_ECORRUPT},
		{"psize 2^32-1", 32, -1, 0, 16, UINT32_MAX, DD_ECORRUPT},
	};
	dd_ddt_key key;
	uint8_t kb[DD_DDT_KEY_SIZE], vb[64];
	dd_ddt_ent got;
	dd_txn *txn;

	fill_random(key.dk_hash, DD_HASH_SIZE);
	key.dk_variant = 0;
	key_bytes(kb, &key);

	for (size_t i = 0; i < sizeof(dm) / sizeof(dm[0]); i++) {
		MDB_val v;
		int n = 0, rc;

		txn = begin(fx, true);
		OK(dd_ddt_put(txn, &fx->fx_err, &key, &good));
		v = raw_get(txn, txn->tx_ddt, kb, sizeof(kb));
		assert_int_equal(v.mv_size, DD_DDT_VAL_SIZE);
		memset(vb, 0, sizeof(vb));
		memcpy(vb, v.mv_data, DD_DDT_VAL_SIZE);
		if (dm[i].dm_off >= 0)
			vb[dm[i].dm_off] = dm[i].dm_byte;
		if (dm[i].dm_off32 >= 0)
			dd_put_le32(vb + dm[i].dm_off32, dm[i].dm_u32);
		raw_put(txn, txn->tx_ddt, kb, sizeof(kb), vb, dm[i].dm_len);
		commit(fx, txn);

		txn = begin(fx, false);
		memset(&fx->fx_err, 0, sizeof(fx->fx_err));
		rc = dd_ddt_get(txn, &fx->fx_err, &key, &got);
		if (rc != dm[i].dm_want)
			fail_msg("%s: dd_ddt_get returned %d, want %d",
				 dm[i].dm_what, rc, dm[i].dm_want);
		assert_int_equal(fx->fx_err.de_code, dm[i].dm_want);
		assert_true(fx->fx_err.de_msg[0] != 0);
		rc = dd_ddt_walk(txn, &fx->fx_err, walk_nop, &n);
		if (rc != dm[i].dm_want)
			fail_msg("%s: dd_ddt_walk returned %d, want %d",
				 dm[i].dm_what, rc, dm[i].dm_want);
		assert_int_equal(n, 0);
		dd_txn_abort(txn);

		/* compaction refuses to carry damage over */
		txn = begin(fx, true);
		uint64_t removed = 77;
		assert_int_equal(dd_ddt_compact(txn, &fx->fx_err, &removed),
				 dm[i].dm_want);
		dd_txn_abort(txn);
	}

	/* The undamaged value still decodes (the table above is relative to
	 * it), and a key of the wrong size in the table is refused by the
	 * walk. */
	txn = begin(fx, true);
	OK(dd_ddt_put(txn, &fx->fx_err, &key, &good));
	OK(dd_ddt_get(txn, &fx->fx_err, &key, &got));
	assert_ent_equal(&got, &good);
	{
		uint8_t shortkey[DD_DDT_KEY_SIZE - 1] = {0};
		int n = 0;

		MDB_val gv = raw_get(txn, txn->tx_ddt, kb, sizeof(kb));

		memcpy(vb, gv.mv_data, DD_DDT_VAL_SIZE);
		raw_put(txn, txn->tx_ddt, shortkey, sizeof(shortkey), vb,
			DD_DDT_VAL_SIZE);
		assert_int_equal(dd_ddt_walk(txn, &fx->fx_err, walk_nop, &n),
				 DD_ECORRUPT);
	}
	dd_txn_abort(txn);

	/* A committed PENDING entry is damage (format/ddt.md §3): compaction
	 * refuses it rather than write it out. */
	txn = begin(fx, true);
	dd_ddt_ent pend = good;
	pend.de_flags = DD_DDE_PENDING;
	OK(dd_ddt_put(txn, &fx->fx_err, &key, &pend));
	assert_int_equal(dd_ddt_compact(txn, &fx->fx_err, NULL), DD_ECORRUPT);
	dd_txn_abort(txn);
}

/* ---- dedup table: compaction ----------------------------------------------*/

#define NCOMPACT 20000

struct compact_ent {
	dd_ddt_key ce_key;
	dd_ddt_ent ce_ent;
};

struct order_ctx {
	uint8_t oc_prev[DD_DDT_KEY_SIZE];
	uint64_t oc_n;
};

static int order_cb(void *ctx, const dd_ddt_key *key, const dd_ddt_ent *ent)
{
	struct order_ctx *oc = ctx;
	uint8_t kb[DD_DDT_KEY_SIZE];

	key_bytes(kb, key);
	if (oc->oc_n)
		assert_true(memcmp(oc->oc_prev, kb, sizeof(kb)) < 0);
	memcpy(oc->oc_prev, kb, sizeof(kb));
	assert_true(ent->de_refcnt > 0);
	oc->oc_n++;
	return 0;
}

static void check_compacted(struct fixture *fx, const struct compact_ent *ce,
			    uint64_t live, unsigned which)
{
	dd_txn *txn = begin(fx, false);
	struct order_ctx oc = {.oc_n = 0};
	dd_db_usage u;
	uint64_t v = 99;
	dd_ddt_ent got;

	OK(dd_meta_get_u64(txn, &fx->fx_err, "ddt.live", &v));
	assert_true(v == which);
	assert_int_equal(txn->tx_ddt_which, which);
	assert_int_equal(txn->tx_ddt,
			 fx->fx_db->db_dbi[which ? DD_DBI_DDT1 : DD_DBI_DDT0]);
	/* the old table was emptied in the same transaction */
	assert_int_equal(table_entries(txn, txn->tx_ddt_other), 0);
	for (int i = 0; i < NCOMPACT; i++) {
		int rc = dd_ddt_get(txn, &fx->fx_err, &ce[i].ce_key, &got);

		if (ce[i].ce_ent.de_refcnt == 0) {
			assert_int_equal(rc, DD_ENOENT);
		} else {
			assert_int_equal(rc, 0);
			assert_ent_equal(&got, &ce[i].ce_ent);
		}
	}
	OK(dd_ddt_walk(txn, &fx->fx_err, order_cb, &oc));
	assert_true(oc.oc_n == live);
	OK(dd_db_usage_get(txn, &fx->fx_err, &u));
	assert_true(u.ddt_entries == live);
	print_message("after compaction to ddt%u: %llu entries, %llu bytes, "
		      "%.1f bytes/entry\n", which,
		      (unsigned long long)u.ddt_entries,
		      (unsigned long long)u.ddt_bytes,
		      (double)u.ddt_bytes / (double)u.ddt_entries);
	assert_true(u.ddt_bytes / u.ddt_entries <= 100);
	dd_txn_abort(txn);
}

static void test_ddt_compact(void **state)
{
	struct fixture *fx = *state;
	struct compact_ent *ce = calloc(NCOMPACT, sizeof(*ce));
	uint64_t zeros = 0, removed = 12345, before_per_ent;
	dd_db_usage u0, u1;
	dd_txn *txn;

	assert_non_null(ce);
	txn = begin(fx, true);
	for (int i = 0; i < NCOMPACT; i++) {
		fill_random(ce[i].ce_key.dk_hash, DD_HASH_SIZE);
		ce[i].ce_key.dk_variant = (i % 97 == 0) ? 1 : 0;
		ce[i].ce_ent = (dd_ddt_ent){
			.de_codec = (uint8_t)(i & 1), .de_pack = (uint32_t)(i / 100),
			.de_offset = (uint64_t)i * 4160 + (i & 4 ? 5ull << 30 : 0),
			.de_psize = (uint32_t)(1 + i % 4096), .de_lsize = 4096,
			.de_refcnt = (i % 5 == 0) ? 0 : (uint64_t)(i % 7 + 1)};
		if (ce[i].ce_ent.de_refcnt == 0)
			zeros++;
		OK(dd_ddt_put(txn, &fx->fx_err, &ce[i].ce_key, &ce[i].ce_ent));
	}
	commit(fx, txn);

	txn = begin(fx, false);
	OK(dd_db_usage_get(txn, &fx->fx_err, &u0));
	dd_txn_abort(txn);
	assert_true(u0.ddt_entries == NCOMPACT);
	before_per_ent = u0.ddt_bytes / u0.ddt_entries;
	print_message("before compaction: %llu entries, %llu bytes, "
		      "%.1f bytes/entry\n", (unsigned long long)u0.ddt_entries,
		      (unsigned long long)u0.ddt_bytes,
		      (double)u0.ddt_bytes / (double)u0.ddt_entries);

	/* First compaction: ddt0 -> ddt1. */
	txn = begin(fx, true);
	assert_int_equal(txn->tx_ddt_which, 0);
	OK(dd_ddt_compact(txn, &fx->fx_err, &removed));
	assert_true(removed == zeros);
	assert_int_equal(txn->tx_ddt_which, 1);
	/* the txn now reads and writes the new table */
	OK(dd_db_usage_get(txn, &fx->fx_err, &u1));
	assert_true(u1.ddt_entries == NCOMPACT - zeros);
	{
		dd_ddt_ent got;

		OK(dd_ddt_get(txn, &fx->fx_err, &ce[1].ce_key, &got));
		assert_ent_equal(&got, &ce[1].ce_ent);
		assert_int_equal(dd_ddt_get(txn, &fx->fx_err, &ce[0].ce_key,
					    &got), DD_ENOENT);
	}
	commit(fx, txn);
	check_compacted(fx, ce, NCOMPACT - zeros, 1);

	txn = begin(fx, false);
	OK(dd_db_usage_get(txn, &fx->fx_err, &u1));
	dd_txn_abort(txn);
	print_message("bytes/entry %llu -> %llu\n",
		      (unsigned long long)before_per_ent,
		      (unsigned long long)(u1.ddt_bytes / u1.ddt_entries));
	assert_true(u1.ddt_bytes / u1.ddt_entries < before_per_ent);
	assert_true(u1.ddt_bytes < u0.ddt_bytes);

	/* Second compaction flips back to ddt0 and removes nothing. */
	txn = begin(fx, true);
	removed = 12345;
	OK(dd_ddt_compact(txn, &fx->fx_err, &removed));
	assert_true(removed == 0);
	commit(fx, txn);
	check_compacted(fx, ce, NCOMPACT - zeros, 0);

	/* An aborted compaction leaves the live table as it was. */
	txn = begin(fx, true);
	OK(dd_ddt_compact(txn, &fx->fx_err, NULL));
	assert_int_equal(txn->tx_ddt_which, 1);
	dd_txn_abort(txn);
	check_compacted(fx, ce, NCOMPACT - zeros, 0);

	/* A read transaction may not compact. */
	txn = begin(fx, false);
	assert_int_equal(dd_ddt_compact(txn, &fx->fx_err, &removed), DD_EINVAL);
	dd_txn_abort(txn);
	free(ce);
}

/* ---- sorted runs (format/ddt.md §5) ---------------------------------------*/

#define NRUNKEYS 600

struct run_ent {
	dd_ddt_key re_key;
	dd_ddt_ent re_ent;
	bool re_gone;
};

static int run_ent_cmp(const void *a, const void *b)
{
	const struct run_ent *x = a, *y = b;
	int c = memcmp(x->re_key.dk_hash, y->re_key.dk_hash, DD_HASH_SIZE);

	return c ? c : (int)x->re_key.dk_variant - (int)y->re_key.dk_variant;
}

static dd_ddt_ent run_ent_make(int i)
{
	return (dd_ddt_ent){.de_codec = (uint8_t)(i & 1),
			    .de_pack = (uint32_t)(1 + i / 50),
			    .de_offset = (uint64_t)i * 4160,
			    .de_psize = (uint32_t)(1 + i % 4000),
			    .de_lsize = 4096,
			    .de_refcnt = (uint64_t)(i % 9 + 1)};
}

struct run_walk {
	const struct run_ent *rw_ref;
	size_t rw_n, rw_seen;
	uint8_t rw_last[DD_DDT_KEY_SIZE];
};

static int run_walk_one(void *ctx, const dd_ddt_key *key,
			const dd_ddt_ent *ent)
{
	struct run_walk *rw = ctx;
	uint8_t kb[DD_DDT_KEY_SIZE];
	struct run_ent probe = {.re_key = *key}, *hit;

	memcpy(kb, key->dk_hash, DD_HASH_SIZE);
	kb[DD_HASH_SIZE] = key->dk_variant;
	/* strictly increasing over all parts */
	if (rw->rw_seen)
		assert_true(memcmp(rw->rw_last, kb, sizeof(kb)) < 0);
	memcpy(rw->rw_last, kb, sizeof(kb));
	hit = bsearch(&probe, rw->rw_ref, rw->rw_n, sizeof(probe),
		      run_ent_cmp);
	assert_non_null(hit);
	assert_false(hit->re_gone);
	assert_ent_equal(ent, &hit->re_ent);
	rw->rw_seen++;
	return 0;
}

/* Every entry not gone is found by get and by the merged walk, in key
 * order, and the count is theirs. */
static void check_runs(struct fixture *fx, struct run_ent *re, size_t n,
		       size_t live)
{
	struct run_walk rw = {re, n, 0, {0}};
	dd_txn *txn = begin(fx, false);
	uint64_t count;

	for (size_t i = 0; i < n; i++) {
		dd_ddt_ent got;
		int rc = dd_ddt_get(txn, &fx->fx_err, &re[i].re_key, &got);

		if (re[i].re_gone) {
			assert_int_equal(rc, DD_ENOENT);
			continue;
		}
		OK(rc);
		assert_ent_equal(&got, &re[i].re_ent);
	}
	OK(dd_ddt_walk(txn, &fx->fx_err, run_walk_one, &rw));
	assert_int_equal(rw.rw_seen, live);
	OK(dd_ddt_count(txn, &fx->fx_err, &count));
	assert_int_equal(count, live);
	dd_txn_abort(txn);
}

static uint64_t meta_u64(struct fixture *fx, const char *key)
{
	dd_txn *txn = begin(fx, false);
	uint64_t v = 0;
	int rc = dd_meta_get_u64(txn, &fx->fx_err, key, &v);

	dd_txn_abort(txn);
	assert_true(rc == 0 || rc == DD_ENOENT);
	return v;
}

/* Inserts re[from..to) in key order, in a transaction whose inserts go
 * to a run; absent: by dd_ddt_insert_absent. */
static void runs_insert(struct fixture *fx, struct run_ent *re, size_t from,
			size_t to, bool absent)
{
	dd_txn *txn = begin(fx, true);

	dd_ddt_use_runs(txn, true);
	for (size_t i = from; i < to; i++) {
		dd_ddt_ent old;

		OK(absent ? dd_ddt_insert_absent(txn, &fx->fx_err,
						 &re[i].re_key, &re[i].re_ent,
						 &old)
			  : dd_ddt_insert(txn, &fx->fx_err, &re[i].re_key,
					  &re[i].re_ent, &old));
	}
	commit(fx, txn);
}

static void test_ddt_runs(void **state)
{
	struct fixture *fx = *state;
	struct run_ent *re = calloc(NRUNKEYS, sizeof(*re));
	struct run_ent *main_part, *run_part;
	uint8_t rk[DD_DDT_PART_KEY_MAX];
	dd_ddt_ent got, old;
	dd_txn *txn;
	MDB_val v;

	assert_non_null(re);
	for (int i = 0; i < NRUNKEYS; i++) {
		fill_random(re[i].re_key.dk_hash, DD_HASH_SIZE);
		re[i].re_ent = run_ent_make(i);
	}
	/* 200 in the main part, in random order */
	main_part = re;
	txn = begin(fx, true);
	for (int i = 0; i < 200; i++)
		OK(dd_ddt_put(txn, &fx->fx_err, &main_part[i].re_key,
			      &main_part[i].re_ent));
	commit(fx, txn);
	assert_int_equal(meta_u64(fx, "features") & DD_META_FEATURE_DDT_RUNS,
			 0);

	/* 400 more in runs: sorted, as a flush inserts them */
	run_part = re + 200;
	qsort(run_part, 400, sizeof(*re), run_ent_cmp);
	runs_insert(fx, run_part, 0, 150, false);       /* run 1 */
	assert_int_equal(meta_u64(fx, "ddt.runs"), 1);
	assert_true(meta_u64(fx, "features") & DD_META_FEATURE_DDT_RUNS);
	/* keys past run 1's last go on with it, from another transaction */
	runs_insert(fx, run_part, 150, 250, true);
	assert_int_equal(meta_u64(fx, "ddt.runs"), 1);
	/* every other key of the rest, in two passes: the first goes on
	 * with run 1, the second starts over from a lower key: run 2 */
	{
		struct run_ent tail[150];
		size_t n = 0;

		for (size_t i = 250; i < 400; i += 2)
			tail[n++] = run_part[i];
		for (size_t i = 251; i < 400; i += 2)
			tail[n++] = run_part[i];
		runs_insert(fx, tail, 0, 75, true);
		assert_int_equal(meta_u64(fx, "ddt.runs"), 1);
		runs_insert(fx, tail, 75, 150, false);
	}
	assert_int_equal(meta_u64(fx, "ddt.runs"), 2);
	qsort(re, NRUNKEYS, sizeof(*re), run_ent_cmp);
	check_runs(fx, re, NRUNKEYS, NRUNKEYS);

	/* the layout of §5: 0xff x 33, the run (BE64), the key */
	txn = begin(fx, false);
	{
		struct run_ent probe = {.re_key = run_part[0].re_key};
		struct run_ent *e = bsearch(&probe, re, NRUNKEYS, sizeof(*re),
					    run_ent_cmp);

		assert_non_null(e);
		memset(rk, 0xff, DD_DDT_KEY_SIZE);
		dd_put_be64(rk + DD_DDT_KEY_SIZE, 1);
		memcpy(rk + DD_DDT_KEY_SIZE + 8, e->re_key.dk_hash,
		       DD_HASH_SIZE);
		rk[DD_DDT_PART_KEY_MAX - 1] = e->re_key.dk_variant;
		v = raw_get(txn, txn->tx_ddt, rk, sizeof(rk));
		assert_int_equal(v.mv_size, DD_DDT_VAL_SIZE);
		/* and not in the main part */
		{
			MDB_val mk = {DD_DDT_KEY_SIZE,
				      rk + DD_DDT_KEY_SIZE + 8};

			assert_int_equal(mdb_get(txn->tx_mdb, txn->tx_ddt,
						 &mk, &v), MDB_NOTFOUND);
		}
	}
	dd_txn_abort(txn);

	/* an insert finds a key in any part; changes land where it is */
	txn = begin(fx, true);
	dd_ddt_use_runs(txn, true);
	for (int i = 0; i < NRUNKEYS; i += 7)
		assert_int_equal(dd_ddt_insert(txn, &fx->fx_err, &re[i].re_key,
					       &re[i].re_ent, &old),
				 DD_EEXIST);
	for (int i = 0; i < NRUNKEYS; i += 5) {
		OK(dd_ddt_add_refs(txn, &fx->fx_err, &re[i].re_key, 3, &got));
		re[i].re_ent.de_refcnt += 3;
		assert_ent_equal(&got, &re[i].re_ent);
	}
	for (int i = 1; i < NRUNKEYS; i += 11) {
		re[i].re_ent.de_pack += 1000;
		OK(dd_ddt_put(txn, &fx->fx_err, &re[i].re_key, &re[i].re_ent));
	}
	for (int i = 2; i < NRUNKEYS; i += 13) {
		OK(dd_ddt_del(txn, &fx->fx_err, &re[i].re_key));
		re[i].re_gone = true;
	}
	commit(fx, txn);
	{
		size_t live = 0;

		for (int i = 0; i < NRUNKEYS; i++)
			live += !re[i].re_gone;
		check_runs(fx, re, NRUNKEYS, live);
		assert_int_equal(meta_u64(fx, "ddt.runs"), 2);

		/* gc's compaction folds them: one table, no runs */
		txn = begin(fx, true);
		OK(dd_ddt_compact(txn, &fx->fx_err, NULL));
		assert_int_equal(dd_ddt_runs(txn), 0);
		commit(fx, txn);
		assert_int_equal(meta_u64(fx, "ddt.runs"), 0);
		assert_int_equal(meta_u64(fx, "features") &
				 DD_META_FEATURE_DDT_RUNS, 0);
		check_runs(fx, re, NRUNKEYS, live);
	}
	free(re);
}

/* A flush that would start run 33 folds the 32 first, keeping dead
 * entries (only gc removes those). */
static void test_ddt_runs_fold(void **state)
{
	struct fixture *fx = *state;
	struct run_ent re[DD_DDT_RUNS_MAX + 1];
	dd_txn *txn;

	for (int i = 0; i <= DD_DDT_RUNS_MAX; i++) {
		fill_random(re[i].re_key.dk_hash, DD_HASH_SIZE);
		re[i].re_key.dk_hash[0] = (uint8_t)(200 - i); /* descending */
		re[i].re_key.dk_variant = 0;
		re[i].re_ent = run_ent_make(i);
		re[i].re_ent.de_refcnt = i % 3 ? 1 : 0;
		re[i].re_ent.de_dead_since = i % 3 ? 0 : 77;
		re[i].re_gone = false;
	}
	for (int i = 0; i < DD_DDT_RUNS_MAX; i++) {
		runs_insert(fx, re, (size_t)i, (size_t)i + 1, true);
		assert_int_equal(meta_u64(fx, "ddt.runs"), i + 1);
	}
	txn = begin(fx, false);
	assert_int_equal(txn->tx_ddt_which, 0);
	dd_txn_abort(txn);
	runs_insert(fx, re, DD_DDT_RUNS_MAX, DD_DDT_RUNS_MAX + 1, true);
	txn = begin(fx, false);
	assert_int_equal(txn->tx_ddt_which, 1);  /* folded into ddt1 */
	assert_int_equal(dd_ddt_runs(txn), 1);   /* and the new run */
	dd_txn_abort(txn);
	qsort(re, DD_DDT_RUNS_MAX + 1, sizeof(*re), run_ent_cmp);
	check_runs(fx, re, DD_DDT_RUNS_MAX + 1, DD_DDT_RUNS_MAX + 1);
}

/* The merged walk stops with DD_ECORRUPT, its message naming `what`. */
static void walk_damaged(struct fixture *fx, const struct run_ent *re,
			 size_t n, const char *what)
{
	struct run_walk rw = {re, n, 0, {0}};
	dd_txn *txn = begin(fx, false);

	assert_int_equal(dd_ddt_walk(txn, &fx->fx_err, run_walk_one, &rw),
			 DD_ECORRUPT);
	assert_non_null(strstr(fx->fx_err.de_msg, what));
	dd_txn_abort(txn);
}

/* A key in two parts -- what a damaged key filter could let a flush do
 * -- is damage the merged walk reports; meta ddt.runs out of range and
 * a run key past it are damage too. */
static void test_ddt_runs_damage(void **state)
{
	struct fixture *fx = *state;
	struct run_ent re[3];
	uint8_t rk[DD_DDT_PART_KEY_MAX], vb[DD_DDT_VAL_SIZE] = {1};
	dd_txn *txn;

	for (int i = 0; i < 3; i++) {
		fill_random(re[i].re_key.dk_hash, DD_HASH_SIZE);
		re[i].re_key.dk_variant = 0;
		re[i].re_ent = run_ent_make(i);
		re[i].re_gone = false;
	}
	qsort(re, 3, sizeof(*re), run_ent_cmp);
	txn = begin(fx, true);
	OK(dd_ddt_put(txn, &fx->fx_err, &re[1].re_key, &re[1].re_ent));
	commit(fx, txn);
	runs_insert(fx, re, 0, 3, true);   /* re[1] is in main already */
	walk_damaged(fx, re, 3, "two places");

	/* a run past meta ddt.runs */
	txn = begin(fx, true);
	memset(rk, 0xff, DD_DDT_KEY_SIZE);
	dd_put_be64(rk + DD_DDT_KEY_SIZE, 9);
	memcpy(rk + DD_DDT_KEY_SIZE + 8, re[0].re_key.dk_hash, DD_HASH_SIZE);
	rk[DD_DDT_PART_KEY_MAX - 1] = 0;
	raw_put(txn, txn->tx_ddt, rk, sizeof(rk), vb, sizeof(vb));
	OK(dd_ddt_del(txn, &fx->fx_err, &re[1].re_key));  /* from main */
	commit(fx, txn);
	walk_damaged(fx, re, 3, "past meta");

	txn = begin(fx, true);
	OK(dd_meta_put_u64(txn, &fx->fx_err, "ddt.runs", DD_DDT_RUNS_MAX + 1));
	commit(fx, txn);
	{
		dd_txn *bad = NULL;

		assert_int_equal(dd_txn_begin(fx->fx_db, &fx->fx_err, false,
					      &bad), DD_ECORRUPT);
		assert_null(bad);
	}
}

/* meta ddt.live must be 0 or 1 and 8 bytes; otherwise no txn begins. */
static void test_ddt_live_meta(void **state)
{
	struct fixture *fx = *state;
	dd_txn *txn;
	dd_txn *bad = NULL;
	uint8_t v4[4] = {1, 0, 0, 0};
	static const char live[] = "ddt.live";

	txn = begin(fx, true);
	OK(dd_meta_put_u64(txn, &fx->fx_err, live, 2));
	commit(fx, txn);
	assert_int_equal(dd_txn_begin(fx->fx_db, &fx->fx_err, false, &bad),
			 DD_ECORRUPT);
	assert_null(bad);

	/* (a write txn cannot begin either; repair it through LMDB) */
	{
		MDB_txn *mt;
		MDB_val k = {strlen(live), (void *)live}, v = {4, v4};

		OK(mdb_txn_begin(fx->fx_db->db_env, NULL, 0, &mt));
		OK(mdb_put(mt, fx->fx_db->db_dbi[DD_DBI_META], &k, &v, 0));
		OK(mdb_txn_commit(mt));
	}
	assert_int_equal(dd_txn_begin(fx->fx_db, &fx->fx_err, true, &bad),
			 DD_ECORRUPT);
	assert_null(bad);

	{
		MDB_txn *mt;
		MDB_val k = {strlen(live), (void *)live};

		OK(mdb_txn_begin(fx->fx_db->db_env, NULL, 0, &mt));
		OK(mdb_del(mt, fx->fx_db->db_dbi[DD_DBI_META], &k, NULL));
		OK(mdb_txn_commit(mt));
	}
	txn = begin(fx, false);
	assert_int_equal(txn->tx_ddt_which, 0);
	dd_txn_abort(txn);

	txn = begin(fx, true);
	OK(dd_meta_put_u64(txn, &fx->fx_err, live, 1));
	commit(fx, txn);
	txn = begin(fx, false);
	assert_int_equal(txn->tx_ddt_which, 1);
	assert_int_equal(txn->tx_ddt, fx->fx_db->db_dbi[DD_DBI_DDT1]);
	assert_int_equal(txn->tx_ddt_other, fx->fx_db->db_dbi[DD_DBI_DDT0]);
	dd_txn_abort(txn);
}

/* ---- snapshots --------------------------------------------------------------*/

static dd_snap_rec snap_rec(uint64_t id, uint32_t bs, uint64_t size,
			    uint64_t zero, int64_t ctime)
{
	dd_snap_rec r = {.sr_id = id, .sr_block_size = bs, .sr_size = size,
			 .sr_blocks = size / bs + (size % bs != 0),
			 .sr_zero_blocks = zero, .sr_ctime = ctime};

	memset(r.sr_digest, (int)(id & 0xff), DD_HASH_SIZE);
	return r;
}

static void assert_snap_equal(const dd_snap_rec *a, const dd_snap_rec *b)
{
	assert_true(a->sr_id == b->sr_id);
	assert_int_equal(a->sr_block_size, b->sr_block_size);
	assert_true(a->sr_size == b->sr_size);
	assert_true(a->sr_blocks == b->sr_blocks);
	assert_true(a->sr_zero_blocks == b->sr_zero_blocks);
	assert_true(a->sr_ctime == b->sr_ctime);
	assert_memory_equal(a->sr_digest, b->sr_digest, DD_HASH_SIZE);
}

struct snap_log {
	int sl_n;
	char sl_names[8][DD_NAME_MAX + 1];
	dd_snap_rec sl_recs[8];
};

static int snap_log_cb(void *ctx, const char *name, const dd_snap_rec *rec)
{
	struct snap_log *sl = ctx;

	assert_true(sl->sl_n < 8);
	strcpy(sl->sl_names[sl->sl_n], name);
	sl->sl_recs[sl->sl_n++] = *rec;
	return 0;
}

static void test_snap(void **state)
{
	struct fixture *fx = *state;
	char longname[DD_NAME_MAX + 1];
	const char *names[] = {"gamma", "alpha", "a", "beta", longname};
	dd_snap_rec recs[5];
	/* walk order: memcmp of the names */
	const int order[] = {2, 1, 3, 0, 4};
	dd_snap_rec got;
	dd_txn *txn;

	memset(longname, 'z', DD_NAME_MAX);
	longname[DD_NAME_MAX] = 0;
	recs[0] = snap_rec(1, 4096, 10000, 1, -2);
	recs[1] = snap_rec(2, 4096, 0, 0, 0);
	recs[2] = snap_rec(3, 1048576, 1048576, 1, INT64_MAX);
	recs[3] = snap_rec(4, 4096, UINT64_MAX, 0, INT64_MIN);
	recs[4] = snap_rec(UINT64_MAX, 65536, 65537, 0, 1700000000);
	assert_true(recs[0].sr_blocks == 3);
	assert_true(recs[4].sr_blocks == 2);

	txn = begin(fx, true);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(dd_snap_get(txn, &fx->fx_err, names[i], &got),
				 DD_ENOENT);
		OK(dd_snap_put(txn, &fx->fx_err, names[i], &recs[i]));
	}
	commit(fx, txn);

	txn = begin(fx, false);
	for (int i = 0; i < 5; i++) {
		OK(dd_snap_get(txn, &fx->fx_err, names[i], &got));
		assert_snap_equal(&got, &recs[i]);
	}
	struct snap_log sl = {0};
	OK(dd_snap_walk(txn, &fx->fx_err, snap_log_cb, &sl));
	assert_int_equal(sl.sl_n, 5);
	for (int i = 0; i < 5; i++) {
		assert_string_equal(sl.sl_names[i], names[order[i]]);
		assert_snap_equal(&sl.sl_recs[i], &recs[order[i]]);
	}
	/* format/store.md §3 on the stored bytes of "gamma" */
	{
		uint8_t want[80] = {
			1, 0, 0, 0, 0x00, 0x10, 0, 0,          /* ver, bs */
			1, 0, 0, 0, 0, 0, 0, 0,                /* id */
			0x10, 0x27, 0, 0, 0, 0, 0, 0,          /* size 10000 */
			3, 0, 0, 0, 0, 0, 0, 0,                /* blocks */
			1, 0, 0, 0, 0, 0, 0, 0,                /* zero blocks */
			0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, /* -2 */
		};
		MDB_val v;

		memset(want + 48, 1, 32);
		v = raw_get(txn, fx->fx_db->db_dbi[DD_DBI_SNAP], "gamma", 5);
		assert_int_equal(v.mv_size, 80);
		assert_memory_equal(v.mv_data, want, 80);
	}
	dd_txn_abort(txn);

	txn = begin(fx, true);
	OK(dd_snap_del(txn, &fx->fx_err, "alpha"));
	assert_int_equal(dd_snap_del(txn, &fx->fx_err, "alpha"), DD_ENOENT);
	assert_int_equal(dd_snap_get(txn, &fx->fx_err, "alpha", &got),
			 DD_ENOENT);
	/* a prefix of an existing name is a different key */
	assert_int_equal(dd_snap_get(txn, &fx->fx_err, "gam", &got), DD_ENOENT);
	commit(fx, txn);
	txn = begin(fx, false);
	memset(&sl, 0, sizeof(sl));
	OK(dd_snap_walk(txn, &fx->fx_err, snap_log_cb, &sl));
	assert_int_equal(sl.sl_n, 4);
	assert_string_equal(sl.sl_names[0], "a");
	assert_string_equal(sl.sl_names[1], "beta");
	dd_txn_abort(txn);
}

static int snap_nop(void *ctx, const char *name, const dd_snap_rec *rec)
{
	(*(int *)ctx)++;
	return 0;
}

static void test_snap_damaged(void **state)
{
	struct fixture *fx = *state;
	const dd_snap_rec good = snap_rec(9, 4096, 8192 + 1, 1, 5);
	struct {
		const char *what;
		size_t len;
		int off;    /* -1 none */
		uint8_t byte;
	} dm[] = {
		{"79 bytes", 79, -1, 0},
		{"81 bytes", 81, -1, 0},
		{"empty", 0, -1, 0},
		{"version 0", 80, 0, 0},
		{"version 2", 80, 0, 2},
		{"block size 0", 80, 5, 0},      /* 4096 = 00 10 00 00 */
		{"blocks 2 for 8193 bytes", 80, 24, 2},
		{"blocks 4 for 8193 bytes", 80, 24, 4},
		{"size 8192 with 3 blocks", 80, 16, 0},
		{"zero blocks > blocks", 80, 32, 4},
		{"blocks high byte", 80, 31, 1},
	};
	uint8_t vb[96];
	dd_snap_rec got;
	dd_txn *txn;

	for (size_t i = 0; i < sizeof(dm) / sizeof(dm[0]); i++) {
		MDB_val v;
		int n = 0, rc;

		txn = begin(fx, true);
		OK(dd_snap_put(txn, &fx->fx_err, "s", &good));
		v = raw_get(txn, fx->fx_db->db_dbi[DD_DBI_SNAP], "s", 1);
		assert_int_equal(v.mv_size, 80);
		memset(vb, 0, sizeof(vb));
		memcpy(vb, v.mv_data, 80);
		if (dm[i].off >= 0)
			vb[dm[i].off] = dm[i].byte;
		raw_put(txn, fx->fx_db->db_dbi[DD_DBI_SNAP], "s", 1, vb,
			dm[i].len);
		rc = dd_snap_get(txn, &fx->fx_err, "s", &got);
		if (rc != DD_ECORRUPT)
			fail_msg("%s: dd_snap_get returned %d", dm[i].what, rc);
		rc = dd_snap_walk(txn, &fx->fx_err, snap_nop, &n);
		if (rc != DD_ECORRUPT)
			fail_msg("%s: dd_snap_walk returned %d", dm[i].what, rc);
		assert_int_equal(n, 0);
		dd_txn_abort(txn);
	}
	/* the base record is valid */
	txn = begin(fx, true);
	OK(dd_snap_put(txn, &fx->fx_err, "s", &good));
	OK(dd_snap_get(txn, &fx->fx_err, "s", &got));
	assert_snap_equal(&got, &good);
	/* a key with a NUL byte is not a name: the walk refuses it */
	{
		int n = 0;

		memcpy(vb, raw_get(txn, fx->fx_db->db_dbi[DD_DBI_SNAP], "s",
				   1).mv_data, 80);
		raw_put(txn, fx->fx_db->db_dbi[DD_DBI_SNAP], "t\0u", 3, vb, 80);
		assert_int_equal(dd_snap_walk(txn, &fx->fx_err, snap_nop, &n),
				 DD_ECORRUPT);
	}
	dd_txn_abort(txn);
}

/* ---- block maps -------------------------------------------------------------*/

static dd_ddt_key bkey(uint64_t id, uint64_t idx)
{
	dd_ddt_key k;

	memset(k.dk_hash, 0, sizeof(k.dk_hash));
	dd_put_le64(k.dk_hash, id);
	dd_put_le64(k.dk_hash + 8, idx);
	k.dk_hash[31] = 0x5a;
	k.dk_variant = (uint8_t)(idx * 3);
	return k;
}

static void assert_bkey(const dd_ddt_key *k, uint64_t id, uint64_t idx)
{
	dd_ddt_key want = bkey(id, idx);

	assert_memory_equal(k->dk_hash, want.dk_hash, DD_HASH_SIZE);
	assert_int_equal(k->dk_variant, want.dk_variant);
}

static const uint64_t id1_idx[] = {0, 1, 5, 6, 100, 0x100000000ull};
static const uint64_t id2_idx[] = {0, 3};
#define N1 (sizeof(id1_idx) / sizeof(id1_idx[0]))
#define N2 (sizeof(id2_idx) / sizeof(id2_idx[0]))

struct bmap_log {
	int bl_n;
	int bl_fail_at;          /* return DD_EIO at this call; -1 never */
	uint64_t bl_id[32];
	uint64_t bl_idx[32];
	dd_ddt_key bl_key[32];
};

static int bmap_drop_cb(void *ctx, uint64_t idx, const dd_ddt_key *key)
{
	struct bmap_log *bl = ctx;

	if (bl->bl_n == bl->bl_fail_at)
		return DD_EIO;
	assert_true(bl->bl_n < 32);
	bl->bl_idx[bl->bl_n] = idx;
	bl->bl_key[bl->bl_n++] = *key;
	return 0;
}

static int bmap_walk_cb(void *ctx, uint64_t id, uint64_t idx,
			const dd_ddt_key *key)
{
	struct bmap_log *bl = ctx;

	assert_true(bl->bl_n < 32);
	bl->bl_id[bl->bl_n] = id;
	bl->bl_idx[bl->bl_n] = idx;
	bl->bl_key[bl->bl_n++] = *key;
	return 0;
}

static void fill_two_maps(struct fixture *fx)
{
	dd_txn *txn = begin(fx, true);
	dd_ddt_key k;

	for (size_t i = 0; i < N1; i++) {
		k = bkey(1, id1_idx[i]);
		OK(dd_bmap_append(txn, &fx->fx_err, 1, id1_idx[i], 0, &k));
	}
	for (size_t i = 0; i < N2; i++) {
		k = bkey(2, id2_idx[i]);
		OK(dd_bmap_append(txn, &fx->fx_err, 2, id2_idx[i], 0, &k));
	}
	commit(fx, txn);
}

static void test_bmap_seek(void **state)
{
	struct fixture *fx = *state;
	dd_bmap_cur *cur;
	dd_ddt_key k;
	uint64_t idx;
	dd_txn *txn;

	fill_two_maps(fx);
	txn = begin(fx, false);

	/* format/store.md §4 on the stored bytes */
	{
		static const uint8_t kb[16] = {0, 0, 0, 0, 0, 0, 0, 1,
					       0, 0, 0, 1, 0, 0, 0, 0};
		uint8_t want[DD_DDT_KEY_SIZE];
		dd_ddt_key bk = bkey(1, 0x100000000ull);
		MDB_val v = raw_get(txn, fx->fx_db->db_dbi[DD_DBI_BMAP], kb, 16);

		key_bytes(want, &bk);
		assert_int_equal(v.mv_size, DD_DDT_KEY_SIZE);
		assert_memory_equal(v.mv_data, want, DD_DDT_KEY_SIZE);
	}

	OK(dd_bmap_open(txn, &fx->fx_err, 1, &cur));
	assert_int_equal(dd_bmap_seek(cur, &fx->fx_err, 0, &idx, &k), 1);
	assert_true(idx == 0);
	assert_bkey(&k, 1, 0);
	for (size_t i = 1; i < N1; i++) {
		assert_int_equal(dd_bmap_next(cur, &fx->fx_err, &idx, &k), 1);
		assert_true(idx == id1_idx[i]);
		assert_bkey(&k, 1, id1_idx[i]);
	}
	/* the next entry is id 2's: the end of id 1's map */
	assert_int_equal(dd_bmap_next(cur, &fx->fx_err, &idx, &k), 0);
	/* seek into a hole lands on the next present index */
	assert_int_equal(dd_bmap_seek(cur, &fx->fx_err, 2, &idx, &k), 1);
	assert_true(idx == 5);
	assert_bkey(&k, 1, 5);
	assert_int_equal(dd_bmap_next(cur, &fx->fx_err, &idx, &k), 1);
	assert_true(idx == 6);
	assert_int_equal(dd_bmap_seek(cur, &fx->fx_err, 7, &idx, &k), 1);
	assert_true(idx == 100);
	assert_int_equal(dd_bmap_seek(cur, &fx->fx_err, 101, &idx, &k), 1);
	assert_true(idx == 0x100000000ull);
	/* seek exactly onto an entry */
	assert_int_equal(dd_bmap_seek(cur, &fx->fx_err, 6, &idx, &k), 1);
	assert_true(idx == 6);
	/* past the end (id 2 follows) */
	assert_int_equal(dd_bmap_seek(cur, &fx->fx_err, 0x100000001ull, &idx,
				      &k), 0);
	assert_int_equal(dd_bmap_seek(cur, &fx->fx_err, UINT64_MAX, &idx, &k),
			 0);
	dd_bmap_close(cur);

	OK(dd_bmap_open(txn, &fx->fx_err, 2, &cur));
	assert_int_equal(dd_bmap_seek(cur, &fx->fx_err, 1, &idx, &k), 1);
	assert_true(idx == 3);
	assert_bkey(&k, 2, 3);
	/* past the end of the table */
	assert_int_equal(dd_bmap_next(cur, &fx->fx_err, &idx, &k), 0);
	assert_int_equal(dd_bmap_seek(cur, &fx->fx_err, 4, &idx, &k), 0);
	assert_int_equal(dd_bmap_seek(cur, &fx->fx_err, 0, &idx, &k), 1);
	assert_true(idx == 0);
	dd_bmap_close(cur);

	/* ids without a map: before, between (none here), after */
	for (uint64_t id = 0; id <= 3; id += 3) {
		OK(dd_bmap_open(txn, &fx->fx_err, id, &cur));
		assert_int_equal(dd_bmap_seek(cur, &fx->fx_err, 0, &idx, &k),
				 0);
		dd_bmap_close(cur);
	}
	dd_bmap_close(NULL);

	struct bmap_log bl = {.bl_fail_at = -1};
	OK(dd_bmap_walk_all(txn, &fx->fx_err, bmap_walk_cb, &bl));
	assert_int_equal(bl.bl_n, N1 + N2);
	for (size_t i = 0; i < N1 + N2; i++) {
		uint64_t id = i < N1 ? 1 : 2;
		uint64_t ix = i < N1 ? id1_idx[i] : id2_idx[i - N1];

		assert_true(bl.bl_id[i] == id);
		assert_true(bl.bl_idx[i] == ix);
		assert_bkey(&bl.bl_key[i], id, ix);
	}
	dd_txn_abort(txn);
}

/*
 * Block maps of content-defined blocks (format/store.md §4.2): keyed by
 * (id, byte offset), the value the DDT key and the block's le32 length.
 * Snapshot 1: blocks [0,100) [100,4196) [4196,4197) [8000,12000)
 * [12000,28384) -- a hole of 3803 bytes between the third and fourth --;
 * snapshot 2 after it.  Longest block 16384.
 */
static const uint64_t var_off[] = {0, 100, 4196, 8000, 12000};
static const uint32_t var_len[] = {100, 4096, 1, 4000, 16384};
#define NV (sizeof(var_off) / sizeof(var_off[0]))

static void test_bmap_var(void **state)
{
	struct fixture *fx = *state;
	dd_bmap_cur *cur;
	dd_ddt_key k;
	uint64_t off;
	dd_txn *txn;
	struct {
		uint64_t at;       /* byte looked for */
		uint64_t off;      /* entry found, or UINT64_MAX: none */
	} finds[] = {
		{0, 0}, {99, 0}, {100, 100}, {4195, 100}, {4196, 4196},
		{4197, 8000}, {7999, 8000}, {8000, 8000}, {11999, 8000},
		{12000, 12000}, {28383, 12000}, {28384, UINT64_MAX},
		{1u << 30, UINT64_MAX},
	};

	assert_int_equal(dd_db_varblock(fx->fx_db), 0);
	dd_db_set_varblock(fx->fx_db, 16384);
	txn = begin(fx, true);
	for (size_t i = 0; i < NV; i++) {
		k = bkey(1, var_off[i]);
		OK(dd_bmap_append_block(txn, &fx->fx_err, 1, i, var_off[i],
					var_len[i], &k));
	}
	k = bkey(2, 0);
	OK(dd_bmap_append(txn, &fx->fx_err, 2, 0, 5, &k));
	/* a length of 0 or past the longest block is refused */
	assert_int_equal(dd_bmap_append(txn, &fx->fx_err, 2, 10, 0, &k),
			 DD_EINVAL);
	assert_int_equal(dd_bmap_append(txn, &fx->fx_err, 2, 10, 16385, &k),
			 DD_EINVAL);
	commit(fx, txn);
	txn = begin(fx, false);
	/* §4.2 on the stored bytes: key (id, offset), value key + le32 */
	{
		static const uint8_t kb[16] = {0, 0, 0, 0, 0, 0, 0, 1,
					       0, 0, 0, 0, 0, 0, 0x2e, 0xe0};
		uint8_t want[DD_DDT_KEY_SIZE + 4];
		dd_ddt_key bk = bkey(1, 12000);
		MDB_val v = raw_get(txn, fx->fx_db->db_dbi[DD_DBI_BMAP], kb, 16);

		key_bytes(want, &bk);
		dd_put_le32(want + DD_DDT_KEY_SIZE, 16384);
		assert_int_equal(v.mv_size, DD_DDT_KEY_SIZE + 4);
		assert_memory_equal(v.mv_data, want, DD_DDT_KEY_SIZE + 4);
	}
	OK(dd_bmap_open(txn, &fx->fx_err, 1, &cur));
	/* in order, with lengths */
	assert_int_equal(dd_bmap_seek(cur, &fx->fx_err, 0, &off, &k), 1);
	for (size_t i = 0; i < NV; i++) {
		assert_true(off == var_off[i]);
		assert_int_equal(dd_bmap_len(cur), var_len[i]);
		assert_bkey(&k, 1, var_off[i]);
		assert_int_equal(dd_bmap_next(cur, &fx->fx_err, &off, &k),
				 i + 1 < NV);
	}
	/* the block holding a byte, or the next after a hole */
	for (size_t i = 0; i < sizeof(finds) / sizeof(finds[0]); i++) {
		int rc = dd_bmap_find(cur, &fx->fx_err, finds[i].at, &off, &k);

		if (finds[i].off == UINT64_MAX) {
			assert_int_equal(rc, 0);
			continue;
		}
		assert_int_equal(rc, 1);
		if (off != finds[i].off)
			fail_msg("byte %llu: entry %llu, not %llu",
				 (unsigned long long)finds[i].at,
				 (unsigned long long)off,
				 (unsigned long long)finds[i].off);
		assert_bkey(&k, 1, off);
	}
	dd_bmap_close(cur);
	dd_txn_abort(txn);
	/* a value of the other kind is damage, named as such */
	dd_db_set_varblock(fx->fx_db, 0);
	txn = begin(fx, false);
	OK(dd_bmap_open(txn, &fx->fx_err, 1, &cur));
	assert_int_equal(dd_bmap_seek(cur, &fx->fx_err, 0, &off, &k),
			 DD_ECORRUPT);
	assert_non_null(strstr(fx->fx_err.de_msg, "run dedup repair"));
	assert_int_equal(dd_bmap_find(cur, &fx->fx_err, 0, &off, &k),
			 DD_EINVAL);
	dd_bmap_close(cur);
	dd_txn_abort(txn);
	/* a length past the longest block the catalog allows: damage */
	dd_db_set_varblock(fx->fx_db, 4096);
	txn = begin(fx, false);
	OK(dd_bmap_open(txn, &fx->fx_err, 1, &cur));
	assert_int_equal(dd_bmap_find(cur, &fx->fx_err, 13000, &off, &k),
			 DD_ECORRUPT);
	dd_bmap_close(cur);
	dd_txn_abort(txn);
	dd_db_set_varblock(fx->fx_db, 0);
}

/*
 * dd_bmap_append writes with MDB_APPEND, which compares the new key with
 * the last key of the whole bmap table (not of the id, and across
 * transactions): a map can only be appended to while its id is the highest
 * in the table.  That holds because snapshot ids only grow (snap.next) and
 * one writer writes one snapshot at a time; interleaving two ids, or going
 * back in one, is refused as DD_ECORRUPT "out of order" and writes nothing.
 */
/* Within one snapshot the indices only increase; several snapshots' maps
 * may grow side by side (writers at the same time). */
static void test_bmap_append_order(void **state)
{
	struct fixture *fx = *state;
	dd_ddt_key k = bkey(1, 7);
	dd_txn *txn;

	fill_two_maps(fx);
	txn = begin(fx, true);
	/* id 1 again after id 2's entries: fine past id 1's last index, also
	 * in a later txn (was refused while one writer held the store) */
	OK(dd_bmap_append(txn, &fx->fx_err, 1, 0x100000001ull, 0, &k));
	/* same id, smaller or equal index: refused */
	assert_int_equal(dd_bmap_append(txn, &fx->fx_err, 1, 0x100000001ull, 0,
					&k), DD_ECORRUPT);
	assert_non_null(strstr(fx->fx_err.de_msg, "out of order"));
	assert_int_equal(dd_bmap_append(txn, &fx->fx_err, 2, 3, 0, &k),
			 DD_ECORRUPT);
	assert_int_equal(dd_bmap_append(txn, &fx->fx_err, 2, 2, 0, &k),
			 DD_ECORRUPT);
	assert_int_equal(fx->fx_err.de_code, DD_ECORRUPT);
	/* a higher index of any id, or a new id, is fine */
	OK(dd_bmap_append(txn, &fx->fx_err, 2, 4, 0, &k));
	OK(dd_bmap_append(txn, &fx->fx_err, 3, 0, 0, &k));
	OK(dd_bmap_append(txn, &fx->fx_err, 2, 5, 0, &k));
	assert_int_equal(dd_bmap_append(txn, &fx->fx_err, 2, 5, 0, &k),
			 DD_ECORRUPT);
	assert_int_equal(table_entries(txn, fx->fx_db->db_dbi[DD_DBI_BMAP]),
			 N1 + N2 + 4);
	dd_txn_abort(txn);

	/* Within one transaction on an empty table: ids 1, 2, 1 interleave;
	 * a repeated index of one is refused */
	txn = begin(fx, true);
	OK(mdb_drop(txn->tx_mdb, fx->fx_db->db_dbi[DD_DBI_BMAP], 0));
	OK(dd_bmap_append(txn, &fx->fx_err, 1, 0, 0, &k));
	OK(dd_bmap_append(txn, &fx->fx_err, 2, 0, 0, &k));
	OK(dd_bmap_append(txn, &fx->fx_err, 1, 1, 0, &k));
	assert_int_equal(dd_bmap_append(txn, &fx->fx_err, 1, 1, 0, &k),
			 DD_ECORRUPT);
	assert_int_equal(dd_bmap_append(txn, &fx->fx_err, 1, 0, 0, &k),
			 DD_ECORRUPT);
	assert_int_equal(table_entries(txn, fx->fx_db->db_dbi[DD_DBI_BMAP]), 3);
	dd_txn_abort(txn);
}

static void test_bmap_drop(void **state)
{
	struct fixture *fx = *state;
	struct bmap_log bl = {.bl_fail_at = -1};
	dd_bmap_cur *cur;
	dd_ddt_key k;
	uint64_t idx;
	dd_txn *txn;

	fill_two_maps(fx);

	/* fn failing stops the drop with its code; the caller aborts */
	txn = begin(fx, true);
	bl.bl_fail_at = 2;
	assert_int_equal(dd_bmap_drop(txn, &fx->fx_err, 1, bmap_drop_cb, &bl),
			 DD_EIO);
	assert_int_equal(bl.bl_n, 2);
	dd_txn_abort(txn);

	txn = begin(fx, true);
	memset(&bl, 0, sizeof(bl));
	bl.bl_fail_at = -1;
	OK(dd_bmap_drop(txn, &fx->fx_err, 1, bmap_drop_cb, &bl));
	assert_int_equal(bl.bl_n, N1);
	for (size_t i = 0; i < N1; i++) {
		assert_true(bl.bl_idx[i] == id1_idx[i]);
		assert_bkey(&bl.bl_key[i], 1, id1_idx[i]);
	}
	/* dropping an id with no map calls nothing */
	memset(&bl, 0, sizeof(bl));
	bl.bl_fail_at = -1;
	OK(dd_bmap_drop(txn, &fx->fx_err, 7, bmap_drop_cb, &bl));
	OK(dd_bmap_drop(txn, &fx->fx_err, 0, bmap_drop_cb, &bl));
	assert_int_equal(bl.bl_n, 0);
	commit(fx, txn);

	txn = begin(fx, false);
	OK(dd_bmap_open(txn, &fx->fx_err, 1, &cur));
	assert_int_equal(dd_bmap_seek(cur, &fx->fx_err, 0, &idx, &k), 0);
	dd_bmap_close(cur);
	memset(&bl, 0, sizeof(bl));
	OK(dd_bmap_walk_all(txn, &fx->fx_err, bmap_walk_cb, &bl));
	assert_int_equal(bl.bl_n, N2);
	for (size_t i = 0; i < N2; i++) {
		assert_true(bl.bl_id[i] == 2);
		assert_true(bl.bl_idx[i] == id2_idx[i]);
		assert_bkey(&bl.bl_key[i], 2, id2_idx[i]);
	}
	dd_txn_abort(txn);

	/* Drop id 2 (the last in the table), with no callback. */
	txn = begin(fx, true);
	OK(dd_bmap_drop(txn, &fx->fx_err, 2, NULL, NULL));
	assert_int_equal(table_entries(txn, fx->fx_db->db_dbi[DD_DBI_BMAP]), 0);
	commit(fx, txn);
}

/* A large drop whose callback writes to the DDT, as snapshot deletion does
 * (db.h: "fn may write to the DDT"), spanning many pages, next to another
 * large map. */
#define NBIG 3000

struct unref_ctx {
	dd_txn *uc_txn;
	dd_err *uc_err;
	uint64_t uc_n;
	uint64_t uc_next;
};

static dd_ddt_key big_key(uint64_t idx)
{
	dd_ddt_key k;

	memset(&k, 0, sizeof(k));
	dd_put_be64(k.dk_hash, idx % 500);
	k.dk_hash[31] = 0x77;
	return k;
}

static int unref_cb(void *ctx, uint64_t idx, const dd_ddt_key *key)
{
	struct unref_ctx *uc = ctx;
	dd_ddt_key want = big_key(idx);
	dd_ddt_ent e;
	int rc;

	assert_true(idx == uc->uc_next);
	uc->uc_next = idx + 2;
	assert_memory_equal(key, &want, sizeof(want));
	rc = dd_ddt_get(uc->uc_txn, uc->uc_err, key, &e);
	if (rc)
		return rc;
	assert_true(e.de_refcnt > 0);
	e.de_refcnt--;
	uc->uc_n++;
	return dd_ddt_put(uc->uc_txn, uc->uc_err, key, &e);
}

static int count_refs(void *ctx, const dd_ddt_key *key, const dd_ddt_ent *e)
{
	*(uint64_t *)ctx += e->de_refcnt;
	return 0;
}

static void test_bmap_drop_big(void **state)
{
	struct fixture *fx = *state;
	dd_txn *txn = begin(fx, true);
	struct unref_ctx uc = {.uc_err = &fx->fx_err};
	uint64_t refs = 0;
	dd_ddt_ent e = {.de_lsize = 4096, .de_psize = 4096};

	/* 500 DDT entries referenced 6 times each from ids 10 and 11 */
	for (uint64_t i = 0; i < 500; i++) {
		dd_ddt_key k = big_key(i);

		e.de_refcnt = 2 * NBIG / 500;
		OK(dd_ddt_put(txn, &fx->fx_err, &k, &e));
	}
	for (uint64_t id = 10; id <= 11; id++)
		for (uint64_t i = 0; i < NBIG; i++) {
			dd_ddt_key k = big_key(2 * i);

			OK(dd_bmap_append(txn, &fx->fx_err, id, 2 * i, 0, &k));
		}
	commit(fx, txn);

	txn = begin(fx, true);
	uc.uc_txn = txn;
	OK(dd_bmap_drop(txn, &fx->fx_err, 10, unref_cb, &uc));
	assert_true(uc.uc_n == NBIG);
	assert_int_equal(table_entries(txn, fx->fx_db->db_dbi[DD_DBI_BMAP]),
			 NBIG);
	commit(fx, txn);

	txn = begin(fx, false);
	OK(dd_ddt_walk(txn, &fx->fx_err, count_refs, &refs));
	assert_true(refs == NBIG);
	{
		dd_bmap_cur *cur;
		dd_ddt_key k;
		uint64_t idx, n = 0;
		int rc;

		OK(dd_bmap_open(txn, &fx->fx_err, 11, &cur));
		for (rc = dd_bmap_seek(cur, &fx->fx_err, 0, &idx, &k); rc == 1;
		     rc = dd_bmap_next(cur, &fx->fx_err, &idx, &k)) {
			dd_ddt_key want = big_key(idx);

			assert_true(idx == 2 * n);
			assert_memory_equal(&k, &want, sizeof(k));
			n++;
		}
		assert_int_equal(rc, 0);
		assert_true(n == NBIG);
		dd_bmap_close(cur);
		OK(dd_bmap_open(txn, &fx->fx_err, 10, &cur));
		assert_int_equal(dd_bmap_seek(cur, &fx->fx_err, 0, &idx, &k), 0);
		dd_bmap_close(cur);
	}
	dd_txn_abort(txn);
}

static void test_bmap_damaged(void **state)
{
	struct fixture *fx = *state;
	dd_txn *txn;
	dd_bmap_cur *cur;
	dd_ddt_key k;
	uint64_t idx;
	struct bmap_log bl = {.bl_fail_at = -1};
	uint8_t kb[16], vb[DD_DDT_KEY_SIZE] = {0};

	fill_two_maps(fx);
	txn = begin(fx, true);
	/* id 1 index 2: a 32-byte value */
	dd_put_be64(kb, 1);
	dd_put_be64(kb + 8, 2);
	raw_put(txn, fx->fx_db->db_dbi[DD_DBI_BMAP], kb, 16, vb, 32);
	OK(dd_bmap_open(txn, &fx->fx_err, 1, &cur));
	assert_int_equal(dd_bmap_seek(cur, &fx->fx_err, 2, &idx, &k),
			 DD_ECORRUPT);
	dd_bmap_close(cur);
	assert_int_equal(dd_bmap_walk_all(txn, &fx->fx_err, bmap_walk_cb, &bl),
			 DD_ECORRUPT);
	assert_int_equal(bl.bl_n, 2);
	dd_txn_abort(txn);

	/* a 15-byte key */
	txn = begin(fx, true);
	raw_put(txn, fx->fx_db->db_dbi[DD_DBI_BMAP], kb, 15, vb, sizeof(vb));
	memset(&bl, 0, sizeof(bl));
	assert_int_equal(dd_bmap_walk_all(txn, &fx->fx_err, bmap_walk_cb, &bl),
			 DD_ECORRUPT);
	dd_txn_abort(txn);
}

/* ---- pend and packs -----------------------------------------------------------*/

static void test_pend(void **state)
{
	struct fixture *fx = *state;
	uint64_t id = 99;
	dd_txn *txn = begin(fx, true);

	assert_int_equal(dd_pend_first(txn, &fx->fx_err, &id), 0);
	assert_true(id == 99);
	OK(dd_pend_put(txn, &fx->fx_err, 0x100, "seven"));
	OK(dd_pend_put(txn, &fx->fx_err, 3, "three"));
	OK(dd_pend_put(txn, &fx->fx_err, UINT64_MAX, "max"));
	commit(fx, txn);

	txn = begin(fx, true);
	/* big-endian keys: numeric order (0x100 > 3 although its low byte
	 * is smaller) */
	assert_int_equal(dd_pend_first(txn, &fx->fx_err, &id), 1);
	assert_true(id == 3);
	{
		uint8_t kb[8];
		MDB_val v;

		dd_put_be64(kb, 0x100);
		v = raw_get(txn, fx->fx_db->db_dbi[DD_DBI_PEND], kb, 8);
		assert_int_equal(v.mv_size, 5);
		assert_memory_equal(v.mv_data, "seven", 5);
	}
	OK(dd_pend_del(txn, &fx->fx_err, 3));
	assert_int_equal(dd_pend_first(txn, &fx->fx_err, &id), 1);
	assert_true(id == 0x100);
	OK(dd_pend_del(txn, &fx->fx_err, 0x100));
	/* deleting an absent id is not an error */
	OK(dd_pend_del(txn, &fx->fx_err, 0x100));
	assert_int_equal(dd_pend_first(txn, &fx->fx_err, &id), 1);
	assert_true(id == UINT64_MAX);
	OK(dd_pend_del(txn, &fx->fx_err, UINT64_MAX));
	assert_int_equal(dd_pend_first(txn, &fx->fx_err, &id), 0);
	commit(fx, txn);

	/* a key that is not 8 bytes */
	txn = begin(fx, true);
	raw_put(txn, fx->fx_db->db_dbi[DD_DBI_PEND], "abc", 3, "x", 1);
	assert_int_equal(dd_pend_first(txn, &fx->fx_err, &id), DD_ECORRUPT);
	dd_txn_abort(txn);
}

struct packs_log {
	int pl_n;
	uint32_t pl_id[8];
	uint64_t pl_end[8];
};

static int packs_log_cb(void *ctx, uint32_t id, uint64_t end)
{
	struct packs_log *pl = ctx;

	assert_true(pl->pl_n < 8);
	pl->pl_id[pl->pl_n] = id;
	pl->pl_end[pl->pl_n++] = end;
	return 0;
}

static int packs_stop_cb(void *ctx, uint32_t id, uint64_t end)
{
	return 5;
}

static void test_packs(void **state)
{
	struct fixture *fx = *state;
	const uint32_t ids[] = {0x01000000u, 1, UINT32_MAX, 2};
	const uint64_t ends[] = {5ull << 30, 100, UINT64_MAX, 0};
	/* numeric order of the big-endian keys */
	const int order[] = {1, 3, 0, 2};
	struct packs_log pl = {0};
	uint64_t end;
	dd_txn *txn = begin(fx, true);

	assert_int_equal(dd_packs_get(txn, &fx->fx_err, 1, &end), DD_ENOENT);
	for (int i = 0; i < 4; i++)
		OK(dd_packs_put(txn, &fx->fx_err, ids[i], ends[i]));
	commit(fx, txn);

	txn = begin(fx, false);
	for (int i = 0; i < 4; i++) {
		OK(dd_packs_get(txn, &fx->fx_err, ids[i], &end));
		assert_true(end == ends[i]);
	}
	OK(dd_packs_walk(txn, &fx->fx_err, packs_log_cb, &pl));
	assert_int_equal(pl.pl_n, 4);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pl.pl_id[i], ids[order[i]]);
		assert_true(pl.pl_end[i] == ends[order[i]]);
	}
	assert_int_equal(dd_packs_walk(txn, &fx->fx_err, packs_stop_cb, NULL),
			 5);
	/* format/store.md §5 on the stored bytes */
	{
		static const uint8_t kb[4] = {1, 0, 0, 0};
		static const uint8_t want[16] = {1, 0, 0, 0, 0, 0, 0, 0,
						 0, 0, 0, 0x40, 1, 0, 0, 0};
		MDB_val v = raw_get(txn, fx->fx_db->db_dbi[DD_DBI_PACKS], kb, 4);

		assert_int_equal(v.mv_size, 16);
		assert_memory_equal(v.mv_data, want, 16);
	}
	dd_txn_abort(txn);

	txn = begin(fx, true);
	OK(dd_packs_del(txn, &fx->fx_err, 1));
	OK(dd_packs_del(txn, &fx->fx_err, 1));
	assert_int_equal(dd_packs_get(txn, &fx->fx_err, 1, &end), DD_ENOENT);
	OK(dd_packs_put(txn, &fx->fx_err, 2, 4096));
	commit(fx, txn);
	txn = begin(fx, false);
	memset(&pl, 0, sizeof(pl));
	OK(dd_packs_walk(txn, &fx->fx_err, packs_log_cb, &pl));
	assert_int_equal(pl.pl_n, 3);
	assert_int_equal(pl.pl_id[0], 2);
	assert_true(pl.pl_end[0] == 4096);
	dd_txn_abort(txn);
}

static void test_packs_damaged(void **state)
{
	struct fixture *fx = *state;
	static const uint8_t kb[4] = {0, 0, 0, 9};
	struct {
		const char *what;
		size_t len;
		uint8_t ver;
	} dm[] = {
		{"15 bytes", 15, 1},
		{"17 bytes", 17, 1},
		{"version 0", 16, 0},
		{"version 2", 16, 2},
	};
	uint8_t vb[32];
	uint64_t end;

	for (size_t i = 0; i < sizeof(dm) / sizeof(dm[0]); i++) {
		struct packs_log pl = {0};
		dd_txn *txn = begin(fx, true);
		int rc;

		memset(vb, 0, sizeof(vb));
		vb[0] = dm[i].ver;
		vb[8] = 0x10;
		raw_put(txn, fx->fx_db->db_dbi[DD_DBI_PACKS], kb, 4, vb,
			dm[i].len);
		rc = dd_packs_get(txn, &fx->fx_err, 9, &end);
		if (rc != DD_ECORRUPT)
			fail_msg("%s: dd_packs_get returned %d", dm[i].what, rc);
		/* the walk must refuse what get refuses */
		rc = dd_packs_walk(txn, &fx->fx_err, packs_log_cb, &pl);
		if (rc != DD_ECORRUPT)
			fail_msg("%s: dd_packs_walk returned %d", dm[i].what,
				 rc);
		assert_int_equal(pl.pl_n, 0);
		dd_txn_abort(txn);
	}
}

/* ---- meta ---------------------------------------------------------------------*/

static void test_meta(void **state)
{
	struct fixture *fx = *state;
	uint64_t v = 7;
	dd_txn *txn = begin(fx, true);
	static const uint8_t want[8] = {0x08, 0x07, 0x06, 0x05,
					0x04, 0x03, 0x02, 0x01};

	assert_int_equal(dd_meta_get_u64(txn, &fx->fx_err, "format", &v),
			 DD_ENOENT);
	assert_true(v == 7);
	OK(dd_meta_put_u64(txn, &fx->fx_err, "format", 1));
	OK(dd_meta_put_u64(txn, &fx->fx_err, "snap.next", UINT64_MAX));
	OK(dd_meta_put_u64(txn, &fx->fx_err, "zero", 0));
	OK(dd_meta_put_u64(txn, &fx->fx_err, "le", 0x0102030405060708ull));
	commit(fx, txn);

	txn = begin(fx, true);
	OK(dd_meta_get_u64(txn, &fx->fx_err, "format", &v));
	assert_true(v == 1);
	OK(dd_meta_get_u64(txn, &fx->fx_err, "snap.next", &v));
	assert_true(v == UINT64_MAX);
	OK(dd_meta_get_u64(txn, &fx->fx_err, "zero", &v));
	assert_true(v == 0);
	{
		MDB_val mv = raw_get(txn, fx->fx_db->db_dbi[DD_DBI_META], "le", 2);

		assert_int_equal(mv.mv_size, 8);
		assert_memory_equal(mv.mv_data, want, 8);
	}
	/* a key is the exact string: no prefix match */
	assert_int_equal(dd_meta_get_u64(txn, &fx->fx_err, "form", &v),
			 DD_ENOENT);
	/* overwrite */
	OK(dd_meta_put_u64(txn, &fx->fx_err, "format", 2));
	OK(dd_meta_get_u64(txn, &fx->fx_err, "format", &v));
	assert_true(v == 2);
	/* values of the wrong size */
	raw_put(txn, fx->fx_db->db_dbi[DD_DBI_META], "short", 5, want, 7);
	raw_put(txn, fx->fx_db->db_dbi[DD_DBI_META], "long", 4, "123456789", 9);
	raw_put(txn, fx->fx_db->db_dbi[DD_DBI_META], "empty", 5, "", 0);
	v = 7;
	assert_int_equal(dd_meta_get_u64(txn, &fx->fx_err, "short", &v),
			 DD_ECORRUPT);
	assert_int_equal(fx->fx_err.de_code, DD_ECORRUPT);
	assert_non_null(strstr(fx->fx_err.de_msg, "short"));
	assert_int_equal(dd_meta_get_u64(txn, &fx->fx_err, "long", &v),
			 DD_ECORRUPT);
	assert_int_equal(dd_meta_get_u64(txn, &fx->fx_err, "empty", &v),
			 DD_ECORRUPT);
	assert_true(v == 7);
	dd_txn_abort(txn);

	/* a read transaction cannot write */
	txn = begin(fx, false);
	assert_true(dd_meta_put_u64(txn, &fx->fx_err, "x", 1) < 0);
	dd_txn_abort(txn);
}

/* ---- transactions and handles -----------------------------------------------*/

static int count_snaps(void *ctx, const char *name, const dd_snap_rec *r)
{
	(*(int *)ctx)++;
	return 0;
}

static int count_packs(void *ctx, uint32_t id, uint64_t end)
{
	(*(int *)ctx)++;
	return 0;
}

static int count_bmap(void *ctx, uint64_t id, uint64_t idx,
		      const dd_ddt_key *key)
{
	(*(int *)ctx)++;
	return 0;
}

static void test_txn_abort(void **state)
{
	struct fixture *fx = *state;
	struct edge e[NEDGE];
	dd_snap_rec r = snap_rec(1, 4096, 4096, 0, 0), got;
	dd_ddt_ent ent;
	dd_txn *txn;
	uint64_t v, id;
	int n;

	edge_entries(e);
	txn = begin(fx, true);
	for (int i = 0; i < NEDGE; i++)
		OK(dd_ddt_put(txn, &fx->fx_err, &e[i].ek_key, &e[i].ek_ent));
	OK(dd_meta_put_u64(txn, &fx->fx_err, "snap.next", 5));
	OK(dd_snap_put(txn, &fx->fx_err, "s", &r));
	OK(dd_bmap_append(txn, &fx->fx_err, 1, 0, 0, &e[0].ek_key));
	OK(dd_pend_put(txn, &fx->fx_err, 1, "s"));
	OK(dd_packs_put(txn, &fx->fx_err, 1, 4096));
	OK(dd_ddt_get(txn, &fx->fx_err, &e[0].ek_key, &ent));
	dd_txn_abort(txn);
	dd_txn_abort(NULL);

	txn = begin(fx, false);
	for (int i = 0; i < NEDGE; i++)
		assert_int_equal(dd_ddt_get(txn, &fx->fx_err, &e[i].ek_key,
					    &ent), DD_ENOENT);
	n = 0;
	OK(dd_ddt_walk(txn, &fx->fx_err, walk_nop, &n));
	assert_int_equal(n, 0);
	assert_int_equal(dd_meta_get_u64(txn, &fx->fx_err, "snap.next", &v),
			 DD_ENOENT);
	assert_int_equal(dd_snap_get(txn, &fx->fx_err, "s", &got), DD_ENOENT);
	OK(dd_snap_walk(txn, &fx->fx_err, count_snaps, &n));
	OK(dd_bmap_walk_all(txn, &fx->fx_err, count_bmap, &n));
	OK(dd_packs_walk(txn, &fx->fx_err, count_packs, &n));
	assert_int_equal(n, 0);
	assert_int_equal(dd_pend_first(txn, &fx->fx_err, &id), 0);
	for (int i = 0; i < DD_DBI_COUNT; i++)
		assert_int_equal(table_entries(txn, fx->fx_db->db_dbi[i]), 0);
	dd_txn_abort(txn);

	/* A read transaction keeps its snapshot while a writer commits. */
	dd_txn *rd = begin(fx, false);
	txn = begin(fx, true);
	OK(dd_ddt_put(txn, &fx->fx_err, &e[0].ek_key, &e[0].ek_ent));
	commit(fx, txn);
	assert_int_equal(dd_ddt_get(rd, &fx->fx_err, &e[0].ek_key, &ent),
			 DD_ENOENT);
	dd_txn_abort(rd);
	rd = begin(fx, false);
	OK(dd_ddt_get(rd, &fx->fx_err, &e[0].ek_key, &ent));
	dd_txn_abort(rd);
}

static void test_db_shared(void **state)
{
	struct fixture *fx = *state;
	dd_db *a = NULL, *b = NULL, *other = NULL;
	char dir2[64], path[128];
	dd_ddt_ent ent = {.de_lsize = 1, .de_refcnt = 3}, got;
	dd_ddt_key key = {.dk_variant = 4};
	dd_txn *txn;

	/* The fixture holds one reference; two more opens share it, also
	 * through another spelling of the same directory. */
	OK(dd_db_open(&a, &fx->fx_err, fx->fx_dir, true, false));
	snprintf(path, sizeof(path), "%s/./", fx->fx_dir);
	OK(dd_db_open(&b, &fx->fx_err, path, false, false));
	assert_ptr_equal(a, fx->fx_db);
	assert_ptr_equal(b, fx->fx_db);
	assert_int_equal(fx->fx_db->db_refs, 3);

	OK(dd_txn_begin(a, &fx->fx_err, true, &txn));
	OK(dd_ddt_put(txn, &fx->fx_err, &key, &ent));
	OK(dd_txn_commit(txn, &fx->fx_err));
	dd_db_close(a);
	dd_db_close(b);
	assert_int_equal(fx->fx_db->db_refs, 1);
	/* still usable through the remaining reference */
	txn = begin(fx, false);
	OK(dd_ddt_get(txn, &fx->fx_err, &key, &got));
	assert_true(got.de_refcnt == 3);
	dd_txn_abort(txn);

	/* A different directory gets its own handle. */
	strcpy(dir2, "/tmp/dd_test_catalog.XXXXXX");
	assert_non_null(mkdtemp(dir2));
	OK(dd_db_open(&other, &fx->fx_err, dir2, true, false));
	assert_ptr_not_equal(other, fx->fx_db);
	OK(dd_txn_begin(other, &fx->fx_err, false, &txn));
	assert_int_equal(dd_ddt_get(txn, &fx->fx_err, &key, &got), DD_ENOENT);
	dd_txn_abort(txn);
	dd_db_close(other);

	/* Close the last reference, reopen: the data persisted. */
	dd_db_close(fx->fx_db);
	fx->fx_db = NULL;
	OK(dd_db_open(&a, &fx->fx_err, fx->fx_dir, false, true));
	OK(dd_db_open(&b, &fx->fx_err, fx->fx_dir, false, true));
	assert_ptr_equal(a, b);
	assert_int_equal(a->db_refs, 2);
	OK(dd_txn_begin(a, &fx->fx_err, false, &txn));
	OK(dd_ddt_get(txn, &fx->fx_err, &key, &got));
	assert_true(got.de_refcnt == 3);
	dd_txn_abort(txn);
	dd_db_close(b);
	dd_db_close(a);
	dd_db_close(NULL);

	/* Reopen again through the fixture (for its teardown). */
	OK(dd_db_open(&fx->fx_db, &fx->fx_err, fx->fx_dir, false, false));
	assert_int_equal(fx->fx_db->db_refs, 1);

	/* A directory that does not exist. */
	strcat(dir2, "/missing");
	other = (dd_db *)&other;
	assert_int_equal(dd_db_open(&other, &fx->fx_err, dir2, true, false),
			 DD_ENOENT);
	assert_ptr_equal(other, (dd_db *)&other);
	dir2[strlen(dir2) - strlen("/missing")] = 0;

	/* An environment without the tables, opened without create. */
	{
		char dir3[64];

		strcpy(dir3, "/tmp/dd_test_catalog.XXXXXX");
		assert_non_null(mkdtemp(dir3));
		other = NULL;
		assert_int_equal(dd_db_open(&other, &fx->fx_err, dir3, false,
					    false), DD_ECORRUPT);
		assert_null(other);
		assert_non_null(strstr(fx->fx_err.de_msg, "missing"));
		dir_remove(dir3);
	}
	dir_remove(dir2);
}

/* Patches n bytes at off of data.mdb (the db must be closed); returns
 * what was there. */
static void patch_file(const char *dir, off_t off, const void *bytes,
		       size_t n, void *old)
{
	char path[128];
	int fd;

	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	if (old)
		assert_int_equal(pread(fd, old, n, off), (ssize_t)n);
	assert_int_equal(pwrite(fd, bytes, n, off), (ssize_t)n);
	close(fd);
}

/* The newest meta page of data.mdb into page; its offset (0 or 4096). */
static off_t newest_meta(const char *dir, uint8_t page[4096])
{
	uint8_t meta[2][4096];
	char path[128];
	int fd, m;

	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, meta, sizeof(meta), 0), (ssize_t)sizeof(meta));
	close(fd);
	m = dd_get_le64(meta[1] + LM_PAGEHDR + LM_META_TXNID) >
	    dd_get_le64(meta[0] + LM_PAGEHDR + LM_META_TXNID);
	memcpy(page, meta[m], 4096);
	return m * 4096;
}

/* The newest meta page's main table root page number. */
static uint64_t main_root(const char *dir)
{
	uint8_t meta[4096];

	newest_meta(dir, meta);
	/* the main table record at 88 (its root at +40) */
	return dd_get_le64(meta + 128);
}

/* A sound file may end before the last page its meta page counts: LMDB
 * does not write a page a transaction took and freed again (a loose
 * one), and never reads it.  Such a file opens, reads, takes commits and
 * checks clean.  A file cut short of a page a tree uses is DD_ECORRUPT,
 * not a SIGBUS. */
static void test_db_file_ends_early(void **state)
{
	struct fixture *fx = *state;
	enum { N = 5000 };
	dd_ddt_key *keys = calloc(N, sizeof(*keys));
	dd_ddt_ent ent = {.de_lsize = 4096, .de_psize = 100, .de_refcnt = 1};
	uint8_t last[8];
	char path[128];
	struct stat st;
	uint8_t page[4096];
	off_t meta;
	dd_txn *txn;
	dd_db *db;

	assert_non_null(keys);
	txn = begin(fx, true);
	for (int i = 0; i < N; i++) {
		fill_random(keys[i].dk_hash, DD_HASH_SIZE);
		ent.de_offset = (uint64_t)i * 4096;
		OK(dd_ddt_put(txn, &fx->fx_err, &keys[i], &ent));
	}
	commit(fx, txn);
	dd_db_close(fx->fx_db);
	fx->fx_db = NULL;

	/* the meta page counts one page past the file's end */
	snprintf(path, sizeof(path), "%s/data.mdb", fx->fx_dir);
	assert_int_equal(stat(path, &st), 0);
	meta = newest_meta(fx->fx_dir, page);
	dd_put_le64(last, (uint64_t)st.st_size / 4096);
	patch_file(fx->fx_dir, meta + LM_PAGEHDR + LM_META_LAST_PG, last, 8,
		   NULL);
	OK(dd_db_open(&fx->fx_db, &fx->fx_err, fx->fx_dir, false, false));
	txn = begin(fx, false);
	for (int i = 0; i < N; i += 7) {
		dd_ddt_ent got;

		OK(dd_ddt_get(txn, &fx->fx_err, &keys[i], &got));
		assert_true(got.de_offset == (uint64_t)i * 4096);
	}
	dd_txn_abort(txn);
	txn = begin(fx, true);
	for (int i = 0; i < N; i += 2)
		OK(dd_ddt_put(txn, &fx->fx_err, &keys[i], &ent));
	commit(fx, txn);
	OK(dd_db_check(fx->fx_db, &fx->fx_err));
	dd_db_close(fx->fx_db);
	fx->fx_db = NULL;

	/* cut short of the main table's root: damage, one message */
	assert_int_equal(truncate(path, (off_t)(main_root(fx->fx_dir) * 4096)),
			 0);
	db = (dd_db *)&db;
	assert_int_equal(dd_db_open(&db, &fx->fx_err, fx->fx_dir, false, false),
			 DD_ECORRUPT);
	assert_ptr_equal(db, (dd_db *)&db);
	assert_non_null(strstr(fx->fx_err.de_msg, "data.mdb"));
	free(keys);
}

/* dd_db_check walks LMDB's pages: a healthy file passes after many
 * commits, deletions (a free list) and a compaction (a whole table
 * freed); a damaged page header or key count is DD_ECORRUPT at open and
 * in dd_db_check, naming the file and the page. */
static void test_db_check(void **state)
{
	struct fixture *fx = *state;
	enum { N = 30000 };
	dd_ddt_key *keys = calloc(N, sizeof(*keys));
	dd_ddt_ent ent = {.de_lsize = 4096, .de_psize = 100, .de_refcnt = 1};
	uint8_t bad[8], old[8];
	uint64_t root;
	dd_txn *txn;
	dd_db *db;

	assert_non_null(keys);
	for (int round = 0; round < 3; round++) {
		txn = begin(fx, true);
		for (int i = round * N / 3; i < (round + 1) * N / 3; i++) {
			fill_random(keys[i].dk_hash, DD_HASH_SIZE);
			ent.de_offset = (uint64_t)i * 4096;
			OK(dd_ddt_put(txn, &fx->fx_err, &keys[i], &ent));
		}
		commit(fx, txn);
		OK(dd_db_check(fx->fx_db, &fx->fx_err));
	}
	txn = begin(fx, true);
	for (int i = 0; i < N; i += 3) {
		ent.de_refcnt = 0;
		OK(dd_ddt_put(txn, &fx->fx_err, &keys[i], &ent));
	}
	OK(dd_ddt_compact(txn, &fx->fx_err, NULL));
	commit(fx, txn);
	OK(dd_db_check(fx->fx_db, &fx->fx_err));
	txn = begin(fx, true); /* the next commit reuses freed pages */
	for (int i = 1; i < N; i += 3)
		OK(dd_ddt_put(txn, &fx->fx_err, &keys[i], &ent));
	commit(fx, txn);
	OK(dd_db_check(fx->fx_db, &fx->fx_err));
	dd_db_close(fx->fx_db);
	fx->fx_db = NULL;

	/* the main root's header names another page */
	root = main_root(fx->fx_dir);
	dd_put_le64(bad, root + 1);
	patch_file(fx->fx_dir, (off_t)(root * 4096), bad, 8, old);
	db = (dd_db *)&db;
	assert_int_equal(dd_db_open(&db, &fx->fx_err, fx->fx_dir, false, false),
			 DD_ECORRUPT);
	assert_ptr_equal(db, (dd_db *)&db);
	assert_non_null(strstr(fx->fx_err.de_msg, "data.mdb: page"));
	assert_non_null(strstr(fx->fx_err.de_msg, "(main)"));
	patch_file(fx->fx_dir, (off_t)(root * 4096), old, 8, NULL);

	/* its key count (mp_lower) runs past its free space */
	dd_put_le16(bad, 4000);
	patch_file(fx->fx_dir, (off_t)(root * 4096 + 12), bad, 2, old);
	assert_int_equal(dd_db_open(&db, &fx->fx_err, fx->fx_dir, false, false),
			 DD_ECORRUPT);
	assert_non_null(strstr(fx->fx_err.de_msg, "key count"));
	patch_file(fx->fx_dir, (off_t)(root * 4096 + 12), old, 2, NULL);

	/* repaired: it opens and checks clean, every entry there */
	OK(dd_db_open(&fx->fx_db, &fx->fx_err, fx->fx_dir, false, false));
	OK(dd_db_check(fx->fx_db, &fx->fx_err));
	txn = begin(fx, false);
	for (int i = 1; i < N; i += 3) {
		dd_ddt_ent got;

		OK(dd_ddt_get(txn, &fx->fx_err, &keys[i], &got));
		assert_true(got.de_refcnt == 0);
	}
	dd_txn_abort(txn);
	free(keys);
}

/* The DDT leaf that holds key, found the way LMDB finds it: the newest
 * meta page, the main table's record of ddt0, then down by key. */
/* The leaf of table `table` (one of more than one level) whose range
 * holds key. */
static uint64_t leaf_of(const char *dir, const char *table, const void *key,
			size_t klen)
{
	uint8_t pg[4096];
	uint64_t pgno = main_root(dir), depth = 0;
	size_t tlen = strlen(table);
	char path[128];
	int fd;

	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, pg, 4096, (off_t)(pgno * 4096)), 4096);
	for (unsigned i = 0; i < dd_lm_nkeys(pg); i++) { /* main: one leaf */
		const uint8_t *node = dd_lm_node(pg, i);

		if (dd_lm_node_ksize(node) == tlen &&
		    !memcmp(dd_lm_node_key(node), table, tlen)) {
			depth = dd_get_le16(node + LM_NODEHDR + tlen + 6);
			pgno = dd_get_le64(node + LM_NODEHDR + tlen + 40);
		}
	}
	assert_true(depth >= 2); /* a branch above the leaves */
	for (uint64_t d = 0; d + 1 < depth; d++) {
		unsigned i = 0;

		assert_int_equal(pread(fd, pg, 4096, (off_t)(pgno * 4096)), 4096);
		while (i + 1 < dd_lm_nkeys(pg) &&
		       dd_lm_cmp(key, klen, dd_lm_node_key(dd_lm_node(pg, i + 1)),
			      dd_lm_node_ksize(dd_lm_node(pg, i + 1))) >= 0)
			i++;
		pgno = dd_lm_node_child(dd_lm_node(pg, i));
	}
	close(fd);
	return pgno;
}

static uint64_t ddt_leaf_of(const char *dir, const dd_ddt_key *key)
{
	uint8_t kb[DD_DDT_KEY_SIZE];

	memcpy(kb, key->dk_hash, DD_HASH_SIZE);
	kb[DD_HASH_SIZE] = key->dk_variant;
	return leaf_of(dir, "ddt0", kb, sizeof(kb));
}

/* n random DDT keys, committed in one transaction. */
static dd_ddt_key *ddt_random(struct fixture *fx, int n)
{
	dd_ddt_key *keys = calloc((size_t)n, sizeof(*keys));
	dd_ddt_ent ent = {.de_lsize = 4096, .de_psize = 100, .de_refcnt = 1};
	dd_txn *txn;

	assert_non_null(keys);
	txn = begin(fx, true);
	for (int i = 0; i < n; i++) {
		fill_random(keys[i].dk_hash, DD_HASH_SIZE);
		OK(dd_ddt_put(txn, &fx->fx_err, &keys[i], &ent));
	}
	commit(fx, txn);
	return keys;
}

/* N random DDT keys in a table of many leaves, the db closed; *other
 * the first key on another leaf than keys[0], leaf[] the two leaves. */
static dd_ddt_key *ddt_two_leaves(struct fixture *fx, int n, uint64_t leaf[2],
				  int *other)
{
	dd_ddt_key *keys = ddt_random(fx, n);

	dd_db_close(fx->fx_db);
	fx->fx_db = NULL;
	leaf[0] = ddt_leaf_of(fx->fx_dir, &keys[0]);
	*other = -1;
	for (int i = 1; i < n && *other < 0; i++)
		if (ddt_leaf_of(fx->fx_dir, &keys[i]) != leaf[0])
			*other = i;
	assert_true(*other > 0);
	leaf[1] = ddt_leaf_of(fx->fx_dir, &keys[*other]);
	return keys;
}

static int ddt_walk_count(void *ctx, const dd_ddt_key *key,
			  const dd_ddt_ent *ent)
{
	(void)key;
	(void)ent;
	++*(int *)ctx;
	return 0;
}

/* With the whole-file check at open off (a store too big for it), the
 * guard stands between LMDB and a damaged page: a lookup, an insert and a
 * walk that would read it are DD_ECORRUPT naming the page; lookups that
 * do not read it still work; repaired, everything reads again. */
static void test_db_guard(void **state)
{
	struct fixture *fx = *state;
	enum { N = 20000 };
	dd_ddt_ent ent = {.de_lsize = 4096, .de_psize = 100, .de_refcnt = 1};
	dd_ddt_ent got;
	uint8_t bad[2] = {2, 0}, old[2];
	uint64_t leaves[2], leaf;
	off_t ptr_off;
	char page[32];
	int other, count = 0;
	dd_txn *txn;
	dd_ddt_key *keys = ddt_two_leaves(fx, N, leaves, &other);

	leaf = leaves[0];

	/* node 0's offset into the page header */
	ptr_off = (off_t)(leaf * 4096 + LM_PAGEHDR);
	patch_file(fx->fx_dir, ptr_off, bad, 2, old);
	assert_int_equal(setenv("DEDUP_OPEN_CHECK_MAX", "0", 1), 0);
	OK(dd_db_open(&fx->fx_db, &fx->fx_err, fx->fx_dir, false, false));
	snprintf(page, sizeof(page), "page %llu ", (unsigned long long)leaf);
	txn = begin(fx, false);
	assert_int_equal(dd_ddt_get(txn, &fx->fx_err, &keys[0], &got),
			 DD_ECORRUPT);
	assert_non_null(strstr(fx->fx_err.de_msg, page));
	assert_non_null(strstr(fx->fx_err.de_msg, "'ddt0'"));
	assert_non_null(strstr(fx->fx_err.de_msg, "node offset"));
	OK(dd_ddt_get(txn, &fx->fx_err, &keys[other], &got));
	assert_int_equal(dd_ddt_walk(txn, &fx->fx_err, ddt_walk_count, &count),
			 DD_ECORRUPT);
	assert_true(count < N); /* stopped at the leaf */
	dd_txn_abort(txn);
	txn = begin(fx, true);
	ent.de_refcnt = 2;
	assert_int_equal(dd_ddt_put(txn, &fx->fx_err, &keys[0], &ent),
			 DD_ECORRUPT);
	dd_txn_abort(txn);
	assert_int_equal(dd_db_check(fx->fx_db, &fx->fx_err), DD_ECORRUPT);
	dd_db_close(fx->fx_db);
	fx->fx_db = NULL;

	/* repaired: every entry reads, the walk sees them all */
	patch_file(fx->fx_dir, ptr_off, old, 2, NULL);
	OK(dd_db_open(&fx->fx_db, &fx->fx_err, fx->fx_dir, false, false));
	assert_int_equal(unsetenv("DEDUP_OPEN_CHECK_MAX"), 0);
	txn = begin(fx, false);
	for (int i = 0; i < N; i++)
		OK(dd_ddt_get(txn, &fx->fx_err, &keys[i], &got));
	count = 0;
	OK(dd_ddt_walk(txn, &fx->fx_err, ddt_walk_count, &count));
	assert_int_equal(count, N);
	dd_txn_abort(txn);
	free(keys);
}

/* What dd_db_check_pages reported: each damaged page and its range. */
struct damage_seen {
	int n, stop_at;
	uint64_t pgno[4];
	char table[4][16];
	uint8_t lo[4][64], hi[4][64];
	size_t lolen[4], hilen[4];   /* SIZE_MAX: no bound */
};

static int damage_record(void *ctx, const dd_db_damage_page *p)
{
	struct damage_seen *ds = ctx;
	int i = ds->n++;

	assert_true(i < 4);
	ds->pgno[i] = p->dp_pgno;
	snprintf(ds->table[i], sizeof(ds->table[i]), "%s", p->dp_table);
	assert_non_null(strstr(p->dp_msg, "DD_ECORRUPT"));
	ds->lolen[i] = p->dp_lo ? p->dp_lolen : SIZE_MAX;
	ds->hilen[i] = p->dp_hi ? p->dp_hilen : SIZE_MAX;
	assert_true(!p->dp_lo || p->dp_lolen <= sizeof(ds->lo[i]));
	assert_true(!p->dp_hi || p->dp_hilen <= sizeof(ds->hi[i]));
	if (p->dp_lo)
		memcpy(ds->lo[i], p->dp_lo, p->dp_lolen);
	if (p->dp_hi)
		memcpy(ds->hi[i], p->dp_hi, p->dp_hilen);
	return ds->n == ds->stop_at;
}

/* Is DDT key k in reported range i? */
static bool damage_holds(const struct damage_seen *ds, int i,
			 const dd_ddt_key *k)
{
	uint8_t kb[DD_DDT_KEY_SIZE];

	memcpy(kb, k->dk_hash, DD_HASH_SIZE);
	kb[DD_HASH_SIZE] = k->dk_variant;
	return (ds->lolen[i] == SIZE_MAX ||
		dd_lm_cmp(kb, sizeof(kb), ds->lo[i], ds->lolen[i]) >= 0) &&
	       (ds->hilen[i] == SIZE_MAX ||
		dd_lm_cmp(kb, sizeof(kb), ds->hi[i], ds->hilen[i]) < 0);
}

/* Damages the two leaves (node 0's offset into the page header); old[j]
 * gets what was there.  Returns how many keys they held. */
static unsigned damage_two_leaves(struct fixture *fx, const uint64_t leaf[2],
				  uint8_t old[2][2])
{
	uint8_t bad[2] = {2, 0}, pg[4096];
	unsigned held = 0;
	char path[128];
	int fd;

	snprintf(path, sizeof(path), "%s/data.mdb", fx->fx_dir);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	for (int j = 0; j < 2; j++) {
		assert_int_equal(pread(fd, pg, 4096, (off_t)(leaf[j] * 4096)),
				 4096);
		held += dd_lm_nkeys(pg);
	}
	close(fd);
	for (int j = 0; j < 2; j++)
		patch_file(fx->fx_dir, (off_t)(leaf[j] * 4096 + LM_PAGEHDR),
			   bad, 2, old[j]);
	return held;
}

/* scrub's pass 0 (dd_db_check_pages) goes on past damaged pages of a
 * table: two damaged DDT leaves are both reported, each with the range
 * of keys its parent sends to it -- exactly the keys the leaf held --,
 * and the result is DD_ECORRUPT naming the first; dd_db_check stops at
 * it; dd_db_open refuses the file, dd_db_open_unchecked opens it; a
 * callback's non-zero return stops the walk with DD_ECANCELED. */
static void test_db_check_pages(void **state)
{
	struct fixture *fx = *state;
	enum { N = 20000 };
	uint8_t old[2][2];
	struct damage_seen ds = {0};
	uint64_t leaf[2];
	unsigned held;
	int other, in_range[2] = {0, 0};
	dd_db *db;
	dd_ddt_key *keys = ddt_two_leaves(fx, N, leaf, &other);

	held = damage_two_leaves(fx, leaf, old);

	assert_int_equal(dd_db_open(&db, &fx->fx_err, fx->fx_dir, false, false),
			 DD_ECORRUPT);
	OK(dd_db_open_unchecked(&fx->fx_db, &fx->fx_err, fx->fx_dir, false));
	assert_int_equal(dd_db_check(fx->fx_db, &fx->fx_err), DD_ECORRUPT);
	assert_int_equal(dd_db_check_pages(fx->fx_db, &fx->fx_err,
					   damage_record, &ds), DD_ECORRUPT);
	assert_int_equal(ds.n, 2);
	for (int j = 0; j < 2; j++) {
		assert_string_equal(ds.table[j], "ddt0");
		assert_true(ds.pgno[j] == leaf[0] || ds.pgno[j] == leaf[1]);
	}
	assert_true(ds.pgno[0] != ds.pgno[1]);
	assert_non_null(strstr(fx->fx_err.de_msg, "'ddt0'"));
	assert_non_null(strstr(fx->fx_err.de_msg, "run dedup repair"));
	/* each range holds its leaf's keys and no other */
	for (int i = 0; i < N; i++)
		for (int j = 0; j < 2; j++)
			in_range[j] += damage_holds(&ds, j, &keys[i]);
	assert_int_equal(in_range[0] + in_range[1], (int)held);
	for (int j = 0; j < 2; j++) {
		int k = ds.pgno[j] == leaf[0] ? 0 : other;

		assert_true(damage_holds(&ds, j, &keys[k]));
		assert_true(in_range[j] > 0);
	}
	/* the caller stops it at the first */
	memset(&ds, 0, sizeof(ds));
	ds.stop_at = 1;
	assert_int_equal(dd_db_check_pages(fx->fx_db, &fx->fx_err,
					   damage_record, &ds), DD_ECANCELED);
	assert_int_equal(ds.n, 1);
	dd_db_close(fx->fx_db);
	fx->fx_db = NULL;

	for (int j = 0; j < 2; j++)
		patch_file(fx->fx_dir, (off_t)(leaf[j] * 4096 + LM_PAGEHDR),
			   old[j], 2, NULL);
	OK(dd_db_open(&fx->fx_db, &fx->fx_err, fx->fx_dir, false, false));
	memset(&ds, 0, sizeof(ds));
	OK(dd_db_check_pages(fx->fx_db, &fx->fx_err, damage_record, &ds));
	assert_int_equal(ds.n, 0);
	free(keys);
}

/* Damages page pgno of the closed db (node 0's offset into the page
 * header), opens it unchecked and runs the page check: that page of
 * `table`, alone, is reported into ds. */
static void damage_one(struct fixture *fx, uint64_t pgno, const char *table,
		       struct damage_seen *ds)
{
	uint8_t bad[2] = {2, 0};

	patch_file(fx->fx_dir, (off_t)(pgno * 4096 + LM_PAGEHDR), bad, 2, NULL);
	OK(dd_db_open_unchecked(&fx->fx_db, &fx->fx_err, fx->fx_dir, false));
	assert_int_equal(dd_db_check_pages(fx->fx_db, &fx->fx_err,
					   damage_record, ds), DD_ECORRUPT);
	assert_int_equal(ds->n, 1);
	assert_string_equal(ds->table[0], table);
	assert_int_equal(ds->pgno[0], pgno);
}

/* The ranges dd_db_check_pages reported, as dd_txn_skip takes them:
 * in key order already (the walk goes left to right), a range that ends
 * where the next begins joined to it. */
static size_t damage_ranges(const struct damage_seen *ds, dd_key_range *r)
{
	size_t n = 0;

	for (int i = 0; i < ds->n; i++) {
		if (n && r[n - 1].kr_hi && ds->lolen[i] != SIZE_MAX &&
		    !dd_lm_cmp(r[n - 1].kr_hi, r[n - 1].kr_hilen, ds->lo[i],
			       ds->lolen[i])) {
			r[n - 1].kr_hi = ds->hilen[i] == SIZE_MAX ? NULL
								  : ds->hi[i];
			r[n - 1].kr_hilen = ds->hilen[i];
			continue;
		}
		r[n].kr_lo = ds->lolen[i] == SIZE_MAX ? NULL : ds->lo[i];
		r[n].kr_lolen = ds->lolen[i];
		r[n].kr_hi = ds->hilen[i] == SIZE_MAX ? NULL : ds->hi[i];
		r[n].kr_hilen = ds->hilen[i];
		n++;
	}
	return n;
}

/* A walk past skipped ranges: each key once, in order, none in them. */
struct skip_walk {
	const struct damage_seen *sw_ds;
	uint8_t sw_last[DD_DDT_KEY_SIZE];
	int sw_n;
};

static int skip_walk_cb(void *ctx, const dd_ddt_key *key,
			const dd_ddt_ent *ent)
{
	struct skip_walk *sw = ctx;
	uint8_t kb[DD_DDT_KEY_SIZE];

	(void)ent;
	key_bytes(kb, key);
	if (sw->sw_n++)
		assert_true(memcmp(sw->sw_last, kb, sizeof(kb)) < 0);
	memcpy(sw->sw_last, kb, sizeof(kb));
	for (int i = 0; i < sw->sw_ds->n; i++)
		assert_false(damage_holds(sw->sw_ds, i, key));
	return 0;
}

/* A read transaction told to pass over the ranges of two damaged DDT
 * leaves (dd_txn_skip) walks every other entry, in order, and none of
 * theirs, where without them the walk stops at the first with
 * DD_ECORRUPT; a lookup of a key on them is still DD_ECORRUPT, others
 * read; a write txn or an unknown table is refused. */
static void test_txn_skip(void **state)
{
	struct fixture *fx = *state;
	enum { N = 20000 };
	uint8_t old[2][2];
	struct damage_seen ds = {0};
	struct skip_walk sw = {.sw_ds = &ds};
	dd_key_range r[4];
	dd_ddt_ent got;
	uint64_t leaf[2];
	unsigned held;
	int other, count = 0;
	dd_txn *txn;
	size_t nr;
	dd_ddt_key *keys = ddt_two_leaves(fx, N, leaf, &other);

	held = damage_two_leaves(fx, leaf, old);
	OK(dd_db_open_unchecked(&fx->fx_db, &fx->fx_err, fx->fx_dir, false));
	assert_int_equal(dd_db_check_pages(fx->fx_db, &fx->fx_err,
					   damage_record, &ds), DD_ECORRUPT);
	assert_int_equal(ds.n, 2);
	nr = damage_ranges(&ds, r);

	txn = begin(fx, false);
	assert_string_equal(dd_ddt_live_table(txn), "ddt0");
	assert_int_equal(dd_ddt_walk(txn, &fx->fx_err, ddt_walk_count, &count),
			 DD_ECORRUPT);
	assert_true(count < N - (int)held);
	OK(dd_txn_skip(txn, &fx->fx_err, "ddt0", r, nr));
	OK(dd_ddt_walk(txn, &fx->fx_err, skip_walk_cb, &sw));
	assert_int_equal(sw.sw_n, N - (int)held);
	assert_int_equal(dd_ddt_get(txn, &fx->fx_err, &keys[0], &got),
			 DD_ECORRUPT);
	for (int i = 0; i < N; i++)
		if (!damage_holds(&ds, 0, &keys[i]) &&
		    !damage_holds(&ds, 1, &keys[i]))
			OK(dd_ddt_get(txn, &fx->fx_err, &keys[i], &got));
	assert_int_equal(dd_txn_skip(txn, &fx->fx_err, "nope", r, nr),
			 DD_EINVAL);
	/* no ranges: the walk meets the damage again */
	OK(dd_txn_skip(txn, &fx->fx_err, "ddt0", NULL, 0));
	count = 0;
	assert_int_equal(dd_ddt_walk(txn, &fx->fx_err, ddt_walk_count, &count),
			 DD_ECORRUPT);
	dd_txn_abort(txn);
	txn = begin(fx, true);
	assert_int_equal(dd_txn_skip(txn, &fx->fx_err, "ddt0", r, nr),
			 DD_EINVAL);
	dd_txn_abort(txn);
	free(keys);
}

/* Block maps of one entry each, so that a snapshot's map can end on its
 * leaf's last key: with the next leaf damaged, a cursor that reaches
 * the map's end would step onto it -- DD_ECORRUPT --, and told to skip
 * its range (dd_txn_skip) ends there instead, never reading it; a seek
 * into the range lands past it, and the walk of every map returns all
 * but the damaged leaf's entries. */
static void test_txn_skip_step(void **state)
{
	struct fixture *fx = *state;
	enum { N = 2000 };
	uint8_t kb[16], pg[4096];
	struct damage_seen ds = {0};
	dd_key_range r[4];
	dd_bmap_cur *cur;
	dd_ddt_key key;
	uint64_t a = 0, idx, lf, next_lf;
	int count = 0;
	char path[128];
	dd_txn *txn;
	size_t nr;
	int fd;

	txn = begin(fx, true);
	for (uint64_t id = 1; id <= N; id++) {
		key = bkey(id, 0);
		OK(dd_bmap_append(txn, &fx->fx_err, id, 0, 0, &key));
	}
	commit(fx, txn);
	dd_db_close(fx->fx_db);
	fx->fx_db = NULL;
	/* a map in the middle whose only key ends its leaf */
	for (uint64_t id = N / 2; id < N - 2 && !a; id++) {
		dd_put_be64(kb, id);
		dd_put_be64(kb + 8, 0);
		lf = leaf_of(fx->fx_dir, "bmap", kb, sizeof(kb));
		dd_put_be64(kb, id + 1);
		next_lf = leaf_of(fx->fx_dir, "bmap", kb, sizeof(kb));
		if (next_lf != lf)
			a = id;
	}
	assert_true(a > 0);
	snprintf(path, sizeof(path), "%s/data.mdb", fx->fx_dir);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, pg, 4096, (off_t)(next_lf * 4096)), 4096);
	close(fd);
	assert_true(dd_lm_nkeys(pg) > 1);
	damage_one(fx, next_lf, "bmap", &ds);
	assert_int_equal(dd_get_be64(ds.lo[0]), a + 1);
	nr = damage_ranges(&ds, r);

	txn = begin(fx, false);
	OK(dd_bmap_open(txn, &fx->fx_err, a, &cur));
	assert_int_equal(dd_bmap_seek(cur, &fx->fx_err, 0, &idx, &key), 1);
	assert_int_equal(dd_bmap_next(cur, &fx->fx_err, &idx, &key),
			 DD_ECORRUPT);
	dd_bmap_close(cur);
	OK(dd_txn_skip(txn, &fx->fx_err, "bmap", r, nr));
	OK(dd_bmap_open(txn, &fx->fx_err, a, &cur));
	assert_int_equal(dd_bmap_seek(cur, &fx->fx_err, 0, &idx, &key), 1);
	assert_bkey(&key, a, 0);
	assert_int_equal(dd_bmap_next(cur, &fx->fx_err, &idx, &key), 0);
	dd_bmap_close(cur);
	/* a map on the damaged leaf reads as empty; the first past it is
	 * there */
	OK(dd_bmap_open(txn, &fx->fx_err, a + 1, &cur));
	assert_int_equal(dd_bmap_seek(cur, &fx->fx_err, 0, &idx, &key), 0);
	dd_bmap_close(cur);
	OK(dd_bmap_open(txn, &fx->fx_err, dd_get_be64(ds.hi[0]), &cur));
	assert_int_equal(dd_bmap_seek(cur, &fx->fx_err, 0, &idx, &key), 1);
	assert_bkey(&key, dd_get_be64(ds.hi[0]), 0);
	dd_bmap_close(cur);
	OK(dd_bmap_walk_all(txn, &fx->fx_err, count_bmap, &count));
	assert_int_equal(count, N - (int)dd_lm_nkeys(pg));
	dd_txn_abort(txn);
}

/* Damage to LMDB's own free list stops the page check: reported as
 * "(free list)", without a range, and the check's result. */
static void test_db_check_pages_free(void **state)
{
	struct fixture *fx = *state;
	enum { N = 4000 };
	uint8_t meta[2][4096];
	struct damage_seen ds = {0};
	uint64_t root;
	char path[128];
	dd_txn *txn;
	int fd;
	/* pages freed by later commits: a free list */
	dd_ddt_key *keys = ddt_random(fx, N);

	for (int round = 0; round < 2; round++) {
		txn = begin(fx, true);
		for (int i = round; i < N; i += 3)
			OK(dd_ddt_del(txn, &fx->fx_err, &keys[i]));
		commit(fx, txn);
	}
	dd_db_close(fx->fx_db);
	fx->fx_db = NULL;
	snprintf(path, sizeof(path), "%s/data.mdb", fx->fx_dir);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, meta, sizeof(meta), 0), (ssize_t)sizeof(meta));
	close(fd);
	/* the newest meta page's free-list record at 40, its root at +40 */
	root = dd_get_le64(meta[dd_get_le64(meta[1] + 144) >
				dd_get_le64(meta[0] + 144)] + 80);
	assert_true(root > 1 && root != UINT64_MAX);
	damage_one(fx, root, "(free list)", &ds);
	assert_int_equal(ds.lolen[0], SIZE_MAX);
	assert_int_equal(ds.hilen[0], SIZE_MAX);
	assert_non_null(strstr(fx->fx_err.de_msg, "'(free list)'"));
	free(keys);
}

/* The guard reads LMDB's pages itself, so it runs only under the LMDB
 * releases whose layout it knows -- the one linked here among them. */
static void test_guard_layout_known(void **state)
{
	int major, minor, patch;

	(void)state;
	assert_true(dd_lm_layout_known(0, 9));
	assert_false(dd_lm_layout_known(0, 10));
	assert_false(dd_lm_layout_known(1, 0));
	assert_false(dd_lm_layout_known(0, 8));
	mdb_version(&major, &minor, &patch);
	assert_true(dd_lm_layout_known(major, minor));
}


/* ---- the key filter (catalog/kfilter.c, format/kfilter.md) ---------------*/

static void kf_insert(struct fixture *fx, const uint8_t *hashes, size_t n)
{
	const dd_ddt_ent ent = {.de_pack = 1, .de_offset = 64,
				.de_psize = 10, .de_lsize = 10,
				.de_refcnt = 1};
	dd_txn *txn = begin(fx, true);
	dd_ddt_ent old;

	for (size_t i = 0; i < n; i++) {
		dd_ddt_key key = {.dk_variant = 0};

		memcpy(key.dk_hash, hashes + i * DD_HASH_SIZE, DD_HASH_SIZE);
		OK(dd_ddt_insert(txn, &fx->fx_err, &key, &ent, &old));
	}
	commit(fx, txn);
}

static uint64_t kf_meta_gen(struct fixture *fx)
{
	dd_txn *txn = begin(fx, false);
	uint64_t gen = 0;

	OK(dd_meta_get_u64(txn, &fx->fx_err, "ddt.filter", &gen));
	dd_txn_abort(txn);
	return gen;
}

/* Closes and reopens the catalog, as another process would map the file
 * afresh: its writer rebuilt the filter as generation gen, with the n
 * hashes at h. */
static void kf_reopen_rebuilt(struct fixture *fx, const uint8_t *h, size_t n,
			      uint64_t gen)
{
	dd_db_close(fx->fx_db);
	OK(dd_db_open(&fx->fx_db, &fx->fx_err, fx->fx_dir, false, false));
	OK(dd_db_kf_prepare(fx->fx_db, &fx->fx_err));
	assert_int_equal(kf_meta_gen(fx), gen);
	for (size_t i = 0; i < n; i++)
		assert_true(dd_db_kf_maybe(fx->fx_db, h + i * DD_HASH_SIZE));
}

static void kf_path(struct fixture *fx, char *out, size_t cap)
{
	snprintf(out, cap, "%s/%s", fx->fx_dir, DD_KF_FILE);
}

static off_t kf_size(struct fixture *fx)
{
	char path[128];
	struct stat st;

	kf_path(fx, path, sizeof(path));
	OK(stat(path, &st));
	return st.st_size;
}

/* How many of n random hashes the filter calls "maybe". */
static size_t kf_false_maybes(struct fixture *fx, size_t n)
{
	size_t maybe = 0;

	for (size_t i = 0; i < n; i++) {
		uint8_t h[DD_HASH_SIZE];

		fill_random(h, sizeof(h));
		maybe += dd_db_kf_maybe(fx->fx_db, h);
	}
	return maybe;
}

/* Every key the DDT held at the build, and every key inserted since, is
 * "maybe"; absent keys mostly "no"; the file is meta's generation. */
static void test_kf_build_insert(void **state)
{
	struct fixture *fx = *state;
	enum { N = 20000, M = 5000 };
	uint8_t *h = malloc((N + M) * DD_HASH_SIZE);

	assert_non_null(h);
	fill_random(h, (N + M) * DD_HASH_SIZE);
	/* no filter: every hash is a "maybe" */
	assert_false(dd_db_kf_mapped(fx->fx_db));
	assert_int_equal(kf_false_maybes(fx, 100), 100);
	kf_insert(fx, h, N);
	OK(dd_db_kf_prepare(fx->fx_db, &fx->fx_err));
	assert_true(dd_db_kf_mapped(fx->fx_db));
	assert_int_equal(kf_meta_gen(fx), 1);
	assert_int_equal(kf_size(fx), DD_KF_HDR_SIZE +
				       DD_KF_MIN_BLOCKS * (DD_KF_BLOCK + 4));
	/* inserted after the build: the insert adds them */
	kf_insert(fx, h + N * DD_HASH_SIZE, M);
	for (size_t i = 0; i < N + M; i++)
		assert_true(dd_db_kf_maybe(fx->fx_db, h + i * DD_HASH_SIZE));
	/* 25,000 keys in 2 Mbit: about 0.01% false "maybe" */
	assert_true(kf_false_maybes(fx, 100000) < 100);
	/* prepared again, it is current: no rebuild */
	OK(dd_db_kf_prepare(fx->fx_db, &fx->fx_err));
	assert_int_equal(kf_meta_gen(fx), 1);
	free(h);
}

/* Under DD_KF_MIN_BITS per entry it is rebuilt at DD_KF_BUILD_BITS, and
 * keeps every key. */
static void test_kf_grows(void **state)
{
	struct fixture *fx = *state;
	enum { N = 300000 };
	uint8_t *h = malloc((size_t)N * DD_HASH_SIZE);
	size_t fp;

	assert_non_null(h);
	fill_random(h, (size_t)N * DD_HASH_SIZE);
	kf_insert(fx, h, 1000);
	OK(dd_db_kf_prepare(fx->fx_db, &fx->fx_err));
	kf_insert(fx, h + 1000 * DD_HASH_SIZE, N - 1000);
	/* 300,000 keys in 2 Mbit: many false "maybe"s, none false "no" */
	for (size_t i = 0; i < N; i++)
		assert_true(dd_db_kf_maybe(fx->fx_db, h + i * DD_HASH_SIZE));
	fp = kf_false_maybes(fx, 20000);
	assert_true(fp > 200);
	OK(dd_db_kf_prepare(fx->fx_db, &fx->fx_err));
	assert_int_equal(kf_meta_gen(fx), 2);
	assert_int_equal(kf_size(fx), DD_KF_HDR_SIZE +
				       (N * DD_KF_BUILD_BITS + 511) / 512 *
					       (DD_KF_BLOCK + 4));
	for (size_t i = 0; i < N; i++)
		assert_true(dd_db_kf_maybe(fx->fx_db, h + i * DD_HASH_SIZE));
	assert_true(kf_false_maybes(fx, 20000) < fp / 4);
	free(h);
}

/* A damaged, truncated, missing or stale file is rebuilt, not read. */
static void test_kf_damaged(void **state)
{
	struct fixture *fx = *state;
	enum { N = 3000 };
	uint8_t h[N * DD_HASH_SIZE], byte;
	char path[128];
	int fd;

	fill_random(h, sizeof(h));
	kf_insert(fx, h, N);
	kf_path(fx, path, sizeof(path));
	OK(dd_db_kf_prepare(fx->fx_db, &fx->fx_err));
	assert_int_equal(kf_meta_gen(fx), 1);

	/* a header byte flipped: the CRC fails */
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &byte, 1, 33), 1);
	byte ^= 0x40;
	assert_int_equal(pwrite(fd, &byte, 1, 33), 1);
	close(fd);
	/* the mapping of generation 1 is this process's; a writer of
	 * another process would map the file afresh: close and reopen */
	kf_reopen_rebuilt(fx, h, N, 2);

	/* cut short */
	OK(truncate(path, 1000));
	dd_db_close(fx->fx_db);
	OK(dd_db_open(&fx->fx_db, &fx->fx_err, fx->fx_dir, false, false));
	OK(dd_db_kf_prepare(fx->fx_db, &fx->fx_err));
	assert_int_equal(kf_meta_gen(fx), 3);
	assert_int_equal(kf_size(fx), DD_KF_HDR_SIZE +
				       DD_KF_MIN_BLOCKS * (DD_KF_BLOCK + 4));

	/* gone */
	OK(unlink(path));
	dd_db_close(fx->fx_db);
	OK(dd_db_open(&fx->fx_db, &fx->fx_err, fx->fx_dir, false, false));
	OK(dd_db_kf_prepare(fx->fx_db, &fx->fx_err));
	assert_int_equal(kf_meta_gen(fx), 4);

	/* meta names a generation the file is not (a rebuild cut short
	 * before its commit): stale.  An insert of this process adds to
	 * no file meanwhile; the next prepare rebuilds, with the key. */
	dd_txn *txn = begin(fx, true);
	OK(dd_meta_put_u64(txn, &fx->fx_err, "ddt.filter", 9));
	commit(fx, txn);
	uint8_t late[DD_HASH_SIZE];
	fill_random(late, sizeof(late));
	kf_insert(fx, late, 1);
	assert_false(dd_db_kf_mapped(fx->fx_db));
	OK(dd_db_kf_prepare(fx->fx_db, &fx->fx_err));
	assert_int_equal(kf_meta_gen(fx), 10);
	assert_true(dd_db_kf_maybe(fx->fx_db, late));
	for (size_t i = 0; i < N; i++)
		assert_true(dd_db_kf_maybe(fx->fx_db, h + i * DD_HASH_SIZE));
}

/* Every block's bits zeroed, their sums left. */
static void kf_zero_blocks(struct fixture *fx, const char *path)
{
	uint8_t zero[DD_KF_BLOCK] = {0};
	off_t nblocks = (kf_size(fx) - DD_KF_HDR_SIZE) / (DD_KF_BLOCK + 4);
	int fd = open(path, O_RDWR);

	assert_true(fd >= 0);
	for (off_t b = 0; b < nblocks; b++)
		assert_int_equal(pwrite(fd, zero, sizeof(zero),
					DD_KF_HDR_SIZE + b * DD_KF_BLOCK),
				 (ssize_t)sizeof(zero));
	close(fd);
}

/* A block's bits damaged -- zeroed, as a lost write leaves them: its sum
 * fails.  A process that maps the file then rebuilds it; one that mapped
 * it before finds the sum failing at the block, trusts no "no" of it,
 * and withdraws the filter at its commit; the next writer rebuilds. */
static void test_kf_block_sums(void **state)
{
	struct fixture *fx = *state;
	enum { N = 3000 };
	uint8_t h[N * DD_HASH_SIZE];
	char path[128];
	bool absent = true;
	dd_txn *txn;

	fill_random(h, sizeof(h));
	kf_insert(fx, h, N);
	kf_path(fx, path, sizeof(path));
	OK(dd_db_kf_prepare(fx->fx_db, &fx->fx_err));
	assert_int_equal(kf_meta_gen(fx), 1);

	/* at open: the file is rebuilt, every key in it */
	kf_zero_blocks(fx, path);
	kf_reopen_rebuilt(fx, h, N, 2);

	/* while mapped: zeroed under this process */
	kf_zero_blocks(fx, path);
	/* the probe may say "no" now (it costs a copy)... */
	assert_false(dd_db_kf_maybe(fx->fx_db, h));
	/* ...but a flush's question is not answered */
	txn = begin(fx, true);
	OK(dd_kf_txn_test_add(txn, &fx->fx_err, h, &absent));
	assert_false(absent);
	assert_int_equal(dd_kf_txn_gen(txn), 0);
	commit(fx, txn);
	assert_int_equal(kf_meta_gen(fx), 0);   /* withdrawn */
	OK(dd_db_kf_prepare(fx->fx_db, &fx->fx_err));
	assert_int_equal(kf_meta_gen(fx), 3);
	for (size_t i = 0; i < N; i++)
		assert_true(dd_db_kf_maybe(fx->fx_db, h + i * DD_HASH_SIZE));
	/* and a hash not in the DDT is a trusted "no" again */
	{
		uint8_t other[DD_HASH_SIZE];

		do
			fill_random(other, sizeof(other));
		while (dd_db_kf_maybe(fx->fx_db, other));
		txn = begin(fx, true);
		OK(dd_kf_txn_test_add(txn, &fx->fx_err, other, &absent));
		assert_true(absent);
		dd_txn_abort(txn);
	}
}

/* The header's fields a test reads: segments, entries walked, and a
 * segment's blocks and `added` (format/kfilter.md §1). */
struct kf_hdr {
	unsigned segs;
	uint64_t walked, blocks[DD_KF_SEG_MAX], added[DD_KF_SEG_MAX];
};

static struct kf_hdr kf_read_hdr(struct fixture *fx)
{
	uint8_t h[DD_KF_HDR_SIZE];
	struct kf_hdr out = {0};
	char path[128];
	int fd;

	kf_path(fx, path, sizeof(path));
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);
	out.segs = dd_get_le32(h + 16);
	out.walked = dd_get_le64(h + 32);
	for (unsigned s = 0; s < out.segs && s < DD_KF_SEG_MAX; s++) {
		out.blocks[s] = dd_get_le64(h + 64 + 16 * s);
		out.added[s] = dd_get_le64(h + 72 + 16 * s);
	}
	return out;
}

/* What a flush does: room for n keys, then the n inserted. */
static void kf_flush(struct fixture *fx, const uint8_t *h, size_t n,
		     uint64_t reserve)
{
	const dd_ddt_ent ent = {.de_pack = 1, .de_offset = 64,
				.de_psize = 10, .de_lsize = 10,
				.de_refcnt = 1};
	dd_txn *txn = begin(fx, true);
	dd_ddt_ent old;

	OK(dd_kf_txn_reserve(txn, &fx->fx_err, reserve));
	for (size_t i = 0; i < n; i++) {
		dd_ddt_key key = {.dk_variant = 0};

		memcpy(key.dk_hash, h + i * DD_HASH_SIZE, DD_HASH_SIZE);
		OK(dd_ddt_insert(txn, &fx->fx_err, &key, &ent, &old));
	}
	commit(fx, txn);
}

static void kf_all_maybe(struct fixture *fx, const uint8_t *h, size_t n)
{
	for (size_t i = 0; i < n; i++)
		assert_true(dd_db_kf_maybe(fx->fx_db, h + i * DD_HASH_SIZE));
}

/* A flush that would fill the newest segment adds one -- appended to the
 * file, no walk of the DDT (the header's count of entries walked stays)
 * -- and every key stays in the filter, in this process and in one that
 * maps the file afresh, with few false "maybe"s.  Past the most
 * segments it is rebuilt, one segment again.  A growth that finds a
 * block failing its sum withdraws the filter, and the next writer
 * rebuilds it. */
static void test_kf_segments(void **state)
{
	struct fixture *fx = *state;
	enum { K0 = 1000, K1 = 100000 };
	uint8_t *h = malloc((size_t)(K0 + K1) * DD_HASH_SIZE);
	struct kf_hdr kh;
	dd_txn *txn;

	assert_non_null(h);
	fill_random(h, (size_t)(K0 + K1) * DD_HASH_SIZE);
	kf_insert(fx, h, K0);
	OK(dd_db_kf_prepare(fx->fx_db, &fx->fx_err));
	kh = kf_read_hdr(fx);
	assert_int_equal(kh.segs, 1);
	assert_int_equal(kh.walked, K0);

	/* 100,000 more do not fit segment 0 (4096 blocks: 87,381 keys at
	 * 24 bits): a segment for the 101,000 entries to be */
	kf_flush(fx, h + K0 * DD_HASH_SIZE, K1, K1);
	assert_int_equal(kf_meta_gen(fx), 2);
	kh = kf_read_hdr(fx);
	assert_int_equal(kh.segs, 2);
	assert_int_equal(kh.walked, K0);           /* not walked again */
	assert_int_equal(kh.blocks[0], DD_KF_MIN_BLOCKS);
	assert_int_equal(kh.added[1], K0);
	assert_int_equal(kh.blocks[1], ((K0 + K1) * 32 + 511) / 512);
	kf_all_maybe(fx, h, K0 + K1);
	/* 32 bits per key in each: about 0.005% */
	assert_true(kf_false_maybes(fx, 100000) < 50);
	kf_reopen_rebuilt(fx, h, K0 + K1, 2);      /* mapped afresh: kept */
	assert_int_equal(kf_read_hdr(fx).segs, 2);

	/* room for 200,000 more: segment 1 is full, and with at most two
	 * segments it is rebuilt, one segment for 301,000 keys */
	dd_kf_seg_max = 2;
	kf_flush(fx, h, 0, 200000);
	dd_kf_seg_max = DD_KF_SEG_MAX;
	assert_int_equal(kf_meta_gen(fx), 3);
	kh = kf_read_hdr(fx);
	assert_int_equal(kh.segs, 1);
	assert_int_equal(kh.walked, K0 + K1);
	assert_int_equal(kh.blocks[0], (301000 * 32 + 511) / 512);
	kf_all_maybe(fx, h, K0 + K1);

	/* a segment added, then the bits of segment 0 lost under this
	 * process: the next growth finds a sum failing, adds nothing, and
	 * the commit withdraws the filter; the next open rebuilds it */
	kf_flush(fx, h, 0, 400000);
	assert_int_equal(kf_meta_gen(fx), 4);
	assert_int_equal(kf_read_hdr(fx).segs, 2);
	{
		char path[128];
		uint8_t *zero = calloc(kh.blocks[0], DD_KF_BLOCK);
		int fd;

		assert_non_null(zero);
		kf_path(fx, path, sizeof(path));
		fd = open(path, O_WRONLY);
		assert_true(fd >= 0);
		assert_int_equal(pwrite(fd, zero, kh.blocks[0] * DD_KF_BLOCK,
					DD_KF_HDR_SIZE),
				 (ssize_t)(kh.blocks[0] * DD_KF_BLOCK));
		close(fd);
		free(zero);
	}
	txn = begin(fx, true);
	OK(dd_kf_txn_reserve(txn, &fx->fx_err, 5000000));
	assert_int_equal(dd_kf_txn_gen(txn), 0);
	commit(fx, txn);
	assert_int_equal(kf_meta_gen(fx), 0);
	assert_int_equal(kf_read_hdr(fx).segs, 2);   /* none was added */
	OK(dd_db_kf_prepare(fx->fx_db, &fx->fx_err));
	assert_int_equal(kf_meta_gen(fx), 5);
	assert_int_equal(kf_read_hdr(fx).segs, 1);
	kf_all_maybe(fx, h, K0 + K1);
	free(h);
}

/* A commit of a build that knows no filter (plain LMDB here) inserts a
 * key the filter lacks; the next commit of this build finds the chain of
 * commit ids broken and withdraws the filter, and the next writer's
 * rebuild has the key. */
static void test_kf_chain(void **state)
{
	struct fixture *fx = *state;
	uint8_t h[100 * DD_HASH_SIZE], k[DD_HASH_SIZE + 1];
	MDB_val mk = {sizeof(k), k}, mv;
	uint8_t val[256];
	MDB_txn *raw;
	dd_txn *txn;

	fill_random(h, sizeof(h));
	kf_insert(fx, h, 100);
	OK(dd_db_kf_prepare(fx->fx_db, &fx->fx_err));
	kf_insert(fx, h, 0);       /* a commit of this build: the chain holds */
	assert_int_equal(kf_meta_gen(fx), 1);

	/* the other build: a copy of the first entry under a new hash */
	txn = begin(fx, false);
	memcpy(k, h, DD_HASH_SIZE);
	k[DD_HASH_SIZE] = 0;
	mv = raw_get(txn, txn->tx_ddt, k, sizeof(k));
	assert_true(mv.mv_size <= sizeof(val));
	memcpy(val, mv.mv_data, mv.mv_size);
	mv.mv_data = val;
	dd_txn_abort(txn);
	fill_random(k, DD_HASH_SIZE);
	OK(mdb_txn_begin(fx->fx_db->db_env, NULL, 0, &raw));
	OK(mdb_put(raw, fx->fx_db->db_dbi[DD_DBI_DDT0], &mk, &mv, 0));
	OK(mdb_txn_commit(raw));
	assert_false(dd_db_kf_maybe(fx->fx_db, k));   /* the filter lacks it */

	/* this build's next commit, of anything */
	txn = begin(fx, true);
	OK(dd_meta_put_u64(txn, &fx->fx_err, "test.other", 1));
	commit(fx, txn);
	assert_int_equal(kf_meta_gen(fx), 0);
	OK(dd_db_kf_prepare(fx->fx_db, &fx->fx_err));
	assert_int_equal(kf_meta_gen(fx), 2);   /* never one used before */
	assert_true(dd_db_kf_maybe(fx->fx_db, k));
	for (size_t i = 0; i < 100; i++)
		assert_true(dd_db_kf_maybe(fx->fx_db, h + i * DD_HASH_SIZE));
}

/* ---- the unflagged claim (ddt.c, format/store.md §2) -----------------------*/

/* Does the claim hold, as a read transaction sees the catalog? */
static bool unflagged(struct fixture *fx)
{
	dd_txn *txn = begin(fx, false);
	bool out = true;

	OK(dd_ddt_unflagged(txn, &fx->fx_err, &out));
	dd_txn_abort(txn);
	return out;
}

/* Writes an entry of hash with these flags; the claim then holds in its
 * transaction exactly when `holds` says. */
static void put_flags(struct fixture *fx, const uint8_t *hash, uint16_t flags,
		      bool holds)
{
	dd_ddt_ent e = {.de_pack = 1, .de_offset = 64, .de_psize = 10,
			.de_lsize = 10, .de_refcnt = 1, .de_flags = flags};
	dd_ddt_key key = {.dk_variant = 0};
	dd_txn *txn = begin(fx, true);
	bool now = !holds;

	if (flags & DD_DDE_MISSING)
		e.de_pack = 0, e.de_offset = 0, e.de_psize = 0;
	memcpy(key.dk_hash, hash, DD_HASH_SIZE);
	OK(dd_ddt_put(txn, &fx->fx_err, &key, &e));
	/* the transaction itself knows at once */
	OK(dd_ddt_unflagged(txn, &fx->fx_err, &now));
	assert_true(now == holds);
	commit(fx, txn);
}

static uint64_t census(struct fixture *fx)
{
	dd_txn *txn = begin(fx, true);
	uint64_t n = 99;

	OK(dd_ddt_census(txn, &fx->fx_err, &n));
	commit(fx, txn);
	return n;
}

/* The claim is unknown in a catalog without it, and the first writer's
 * preparation takes a census; a flagged entry withdraws it until the next
 * census, and so does a commit of a build that does not keep it (plain
 * LMDB here), even one that writes nothing flagged: it could have. */
static void test_ddt_unflagged(void **state)
{
	struct fixture *fx = *state;
	uint8_t h[8 * DD_HASH_SIZE];
	bool known = true;
	MDB_val mk = {5, "other"}, mv = {1, "x"};
	MDB_txn *raw;
	dd_txn *txn;

	fill_random(h, sizeof(h));
	kf_insert(fx, h, 8);
	txn = begin(fx, false);
	OK(dd_ddt_unflagged_known(txn, &fx->fx_err, &known));
	dd_txn_abort(txn);
	assert_false(known);
	assert_false(unflagged(fx));
	OK(dd_db_kf_prepare(fx->fx_db, &fx->fx_err));
	assert_true(unflagged(fx));
	kf_insert(fx, h, 0);          /* this build's commits keep it */
	put_flags(fx, h, 0, true);
	assert_true(unflagged(fx));

	put_flags(fx, h + DD_HASH_SIZE, DD_DDE_DAMAGED, false);
	assert_false(unflagged(fx));
	put_flags(fx, h + DD_HASH_SIZE, 0, false);   /* healed: not known yet */
	assert_false(unflagged(fx));
	put_flags(fx, h + 2 * DD_HASH_SIZE, DD_DDE_MISSING, false);
	assert_int_equal(census(fx), 1);
	assert_false(unflagged(fx));
	put_flags(fx, h + 2 * DD_HASH_SIZE, 0, false);
	OK(dd_db_kf_prepare(fx->fx_db, &fx->fx_err));  /* known: no census */
	assert_false(unflagged(fx));
	assert_int_equal(census(fx), 0);
	assert_true(unflagged(fx));
	/* format/store.md §2: the commit's id, 8 bytes little-endian */
	{
		MDB_envinfo info;
		uint8_t want[8];
		MDB_val v;

		OK(mdb_env_info(fx->fx_db->db_env, &info));
		dd_put_le64(want, (uint64_t)info.me_last_txnid);
		txn = begin(fx, false);
		v = raw_get(txn, fx->fx_db->db_dbi[DD_DBI_META],
			    "ddt.unflagged", 13);
		assert_int_equal(v.mv_size, 8);
		assert_memory_equal(v.mv_data, want, 8);
		dd_txn_abort(txn);
	}

	/* the other build, writing only into meta */
	OK(mdb_txn_begin(fx->fx_db->db_env, NULL, 0, &raw));
	OK(mdb_put(raw, fx->fx_db->db_dbi[DD_DBI_META], &mk, &mv, 0));
	OK(mdb_txn_commit(raw));
	assert_false(unflagged(fx));
	kf_insert(fx, h, 0);          /* withdrawn by this build's next */
	assert_false(unflagged(fx));
	assert_int_equal(census(fx), 0);
	assert_true(unflagged(fx));
}

static void hex_in(const char *hex, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned v;

		assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
		out[i] = (uint8_t)v;
	}
}

/* A row of uncounted positions (format/store.md §4.3) is the bytes of
 * tests/golden/ucnt_row_v1.bin, written by hand from the spec: key
 * "ucnt/", id 0x0102030405060708, row 3; bits of positions 0, 9 and
 * 8191 of the row.  ORing more bits merges; the row loads back; clearing
 * every bit deletes it; and the features bit comes with the first row. */
static void test_ucnt_golden(void **state)
{
	struct fixture *fx = *state;
	uint8_t want[DD_UCNT_KEY_SIZE + DD_UCNT_BYTES], bits[DD_UCNT_BYTES];
	const uint64_t id = 0x0102030405060708ull, first = 3 * DD_UCNT_SPAN;
	FILE *g = fopen(DD_GOLDEN_DIR "/ucnt_row_v1.bin", "rb");
	MDB_val k = {DD_UCNT_KEY_SIZE, want}, v;
	dd_ucnt_set set;
	uint64_t f = 0;
	dd_txn *txn;

	assert_non_null(g);
	assert_int_equal(fread(want, 1, sizeof(want), g), sizeof(want));
	fclose(g);
	OK(dd_txn_begin(fx->fx_db, &fx->fx_err, true, &txn));
	memset(bits, 0, sizeof(bits));
	dd_ucnt_set_bit(bits, first + 9, true);
	OK(dd_ucnt_or(txn, &fx->fx_err, id, 3, bits));
	memset(bits, 0, sizeof(bits));
	dd_ucnt_set_bit(bits, first, true);
	dd_ucnt_set_bit(bits, first + 8191, true);
	OK(dd_ucnt_or(txn, &fx->fx_err, id, 3, bits));
	OK(dd_table_get(txn, &fx->fx_err, DD_DBI_META, &k, &v, "get"));
	assert_int_equal(v.mv_size, DD_UCNT_BYTES);
	assert_memory_equal(v.mv_data, want + DD_UCNT_KEY_SIZE, DD_UCNT_BYTES);
	OK(dd_meta_get_u64(txn, &fx->fx_err, "features", &f));
	assert_true(f & DD_META_FEATURE_UCNT);

	OK(dd_ucnt_load(txn, &fx->fx_err, 0, &set));
	assert_int_equal(set.us_n, 1);
	assert_true(set.us_row[0].ur_id == id && set.us_row[0].ur_row == 3);
	assert_int_equal(dd_ucnt_count(&set), 3);
	assert_true(dd_ucnt_has(&set, id, first + 8191));
	assert_false(dd_ucnt_has(&set, id, first + 8190));
	assert_false(dd_ucnt_has(&set, id + 1, first));
	/* cleared: the row goes, and with no row left, the features bit */
	memset(set.us_row[0].ur_bits, 0, DD_UCNT_BYTES);
	set.us_row[0].ur_dirty = true;
	OK(dd_ucnt_store(txn, &fx->fx_err, &set));
	assert_int_equal(dd_table_get(txn, &fx->fx_err, DD_DBI_META, &k, &v,
				      "get"), DD_ENOENT);
	OK(dd_ucnt_settle(txn, &fx->fx_err, &set));
	OK(dd_meta_get_u64(txn, &fx->fx_err, "features", &f));
	assert_false(f & DD_META_FEATURE_UCNT);
	dd_ucnt_free(&set);
	OK(dd_ucnt_load(txn, &fx->fx_err, 0, &set));
	assert_int_equal(set.us_n, 0);
	dd_txn_abort(txn);
}

/* The bytes of format/kfilter.md: the header, and exactly the bits §2
 * names in the segments §4 makes, as an independent implementation
 * computed them (tests/golden/kfilter_v3.txt): a build of two keys, a
 * segment added for the keys a flush is about to insert, and a third
 * key inserted there. */
static void test_kf_golden(void **state)
{
	struct fixture *fx = *state;
	static const unsigned seg_blocks[2] = {4096, 8192};
	uint8_t want_hdr[DD_KF_HDR_SIZE];
	uint8_t hashes[3][DD_HASH_SIZE], *file;
	unsigned seg[3], blk[3], bit[3][10], sum_seg[3], sum_blk[3], sum[3];
	unsigned zero = 0;
	char line[1024], path[128];
	size_t nh = 0, ns = 0, len, set = 0, at;
	FILE *g = fopen(DD_GOLDEN_DIR "/kfilter_v3.txt", "r");
	dd_txn *txn;
	int fd;

	assert_non_null(g);
	while (fgets(line, sizeof(line), g)) {
		char hex[200];

		if (!strncmp(line, "header ", 7)) {
			hex_in(line + 7, want_hdr, sizeof(want_hdr));
		} else if (!strncmp(line, "hash ", 5)) {
			assert_true(nh < 3);
			assert_int_equal(sscanf(line + 5, "%64s %u %u %u %u %u "
						"%u %u %u %u %u %u %u", hex,
						&seg[nh], &blk[nh],
						&bit[nh][0], &bit[nh][1],
						&bit[nh][2], &bit[nh][3],
						&bit[nh][4], &bit[nh][5],
						&bit[nh][6], &bit[nh][7],
						&bit[nh][8], &bit[nh][9]), 13);
			hex_in(hex, hashes[nh], DD_HASH_SIZE);
			nh++;
		} else if (!strncmp(line, "sum ", 4)) {
			assert_true(ns < 3);
			assert_int_equal(sscanf(line + 4, "%u %u %x",
						&sum_seg[ns], &sum_blk[ns],
						&sum[ns]), 3);
			ns++;
		} else if (!strncmp(line, "zero ", 5)) {
			assert_int_equal(sscanf(line + 5, "%x", &zero), 1);
		}
	}
	fclose(g);
	assert_int_equal(nh, 3);
	assert_int_equal(ns, 3);
	kf_insert(fx, hashes[0], 2);
	OK(dd_db_kf_prepare(fx->fx_db, &fx->fx_err));
	assert_int_equal(kf_meta_gen(fx), 1);
	/* room for 131,070 more: a segment for 131,072 keys, 8192 blocks */
	txn = begin(fx, true);
	OK(dd_kf_txn_reserve(txn, &fx->fx_err, 131070));
	{
		const dd_ddt_ent ent = {.de_pack = 1, .de_offset = 64,
					.de_psize = 10, .de_lsize = 10,
					.de_refcnt = 1};
		dd_ddt_key key = {.dk_variant = 0};
		dd_ddt_ent old;

		memcpy(key.dk_hash, hashes[2], DD_HASH_SIZE);
		OK(dd_ddt_insert(txn, &fx->fx_err, &key, &ent, &old));
	}
	commit(fx, txn);
	assert_int_equal(kf_meta_gen(fx), 2);
	kf_path(fx, path, sizeof(path));
	len = (size_t)kf_size(fx);
	/* the header, then each segment's blocks and their sums (§1) */
	assert_int_equal(len, DD_KF_HDR_SIZE +
				      (4096 + 8192) * (DD_KF_BLOCK + 4));
	file = malloc(len);
	assert_non_null(file);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, file, len, 0), (ssize_t)len);
	close(fd);
	assert_memory_equal(file, want_hdr, sizeof(want_hdr));
	at = DD_KF_HDR_SIZE;
	for (unsigned s = 0; s < 2; s++) {
		const uint8_t *bits = file + at;
		const uint8_t *sums = bits + (size_t)seg_blocks[s] * DD_KF_BLOCK;

		for (size_t i = 0; i < nh; i++)
			for (int j = 0; s == seg[i] && j < 10; j++) {
				const uint8_t *b = bits + (size_t)blk[i] *
								 DD_KF_BLOCK;

				assert_true(b[bit[i][j] / 8] &
					    (1u << (bit[i][j] % 8)));
			}
		for (size_t i = 0; i < (size_t)seg_blocks[s] * DD_KF_BLOCK; i++)
			set += (size_t)__builtin_popcount(bits[i]);
		for (unsigned b = 0; b < seg_blocks[s]; b++) {
			unsigned want = zero;

			for (size_t i = 0; i < ns; i++)
				if (sum_seg[i] == s && sum_blk[i] == b)
					want = sum[i];
			assert_int_equal(dd_get_le32(sums + 4 * b), want);
		}
		at += (size_t)seg_blocks[s] * (DD_KF_BLOCK + 4);
	}
	assert_true(set <= 30);   /* no bit the three do not name */
	free(file);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_guard_layout_known),
#define T(fn) cmocka_unit_test_setup_teardown(fn, fixture_setup, fixture_teardown)
		T(test_ddt_roundtrip),
		T(test_ddt_add_refs),
		T(test_guard_get),
		T(test_renew_same_snapshot),
		T(test_guard_foreign_map),
		T(test_ddt_encoding_bytes),
		T(test_ddt_damaged),
		T(test_ddt_compact),
		T(test_ddt_live_meta),
		T(test_ddt_runs),
		T(test_ddt_runs_fold),
		T(test_ddt_runs_damage),
		T(test_snap),
		T(test_snap_damaged),
		T(test_bmap_seek),
		T(test_bmap_var),
		T(test_bmap_append_order),
		T(test_bmap_drop),
		T(test_bmap_drop_big),
		T(test_bmap_damaged),
		T(test_pend),
		T(test_packs),
		T(test_packs_damaged),
		T(test_meta),
		T(test_txn_abort),
		T(test_db_shared),
		T(test_db_check),
		T(test_db_file_ends_early),
		T(test_db_guard),
		T(test_db_check_pages),
		T(test_txn_skip),
		T(test_txn_skip_step),
		T(test_db_check_pages_free),
		T(test_kf_build_insert),
		T(test_kf_grows),
		T(test_kf_damaged),
		T(test_kf_block_sums),
		T(test_kf_chain),
		T(test_ddt_unflagged),
		T(test_kf_golden),
		T(test_kf_segments),
		T(test_ucnt_golden),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
