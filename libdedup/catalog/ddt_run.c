/*
 * ddt_run.c -- the DDT's sorted runs (format/ddt.md §5).
 *
 * Why: a flush inserts its new keys in key order, but random hashes land
 * on every leaf of a large table: 262,144 new keys into a DDT of 4 M
 * entries rewrote about 104,000 of its 115,000 leaves, some 400 MB of
 * scattered page writes per GiB of 4 KiB blocks, so each round of new
 * data was slower than the one before.  A large flush instead appends
 * its new entries, in key order, to a run at the end of the live table
 * (MDB_APPEND: full pages, each written once): the pages a new entry
 * costs no longer grow with the table.
 *
 * Layout: run r's entries are keyed 33 bytes 0xff, r (BE64), then the
 * entry's own 33-byte key.  LMDB orders keys by their bytes, then the
 * shorter first, so every run entry sorts after every entry of the main
 * part, and run r's after run r-1's: the newest run is the table's end,
 * where MDB_APPEND writes.  Runs are 1..n, n in meta ddt.runs.
 *
 * Invariant R: a key has at most one entry -- in the main part or in
 * one run.  An insert keeps it by looking in every part first, or (a
 * flush's new keys) on the key filter's "no" taken while the chain of
 * commits holds (store/wops.c).  Damage to the filter's file could break
 * it: the merged walk meets such a key twice and reports damage, and
 * repair's rebuild keeps one entry.
 *
 * Reads look in the part the last key was found in, then main, then the
 * runs newest first: a re-put finds its blocks in one part.  Walks merge
 * the parts in key order.  gc's compaction folds the runs into the other
 * table; so does a flush that would start run DD_DDT_RUNS_MAX + 1.
 */
#include <stdio.h>
#include <string.h>

#include "dedup.h"
#include "catalog/db_internal.h"
#include "common/alloc.h"
#include "common/endian.h"

#define DD_RUN_PREFIX_SIZE DD_DDT_KEY_SIZE
#define DD_RUN_HEAD_SIZE (DD_RUN_PREFIX_SIZE + 8)
#define DD_DDT_RUNS_META "ddt.runs"

/* Run keys: the table's part `run` (0: main, where a key is itself). */
static size_t dd_run_key(uint8_t out[DD_RUN_KEY_SIZE], uint64_t run,
			 const uint8_t kb[DD_DDT_KEY_SIZE])
{
	if (!run) {
		memcpy(out, kb, DD_DDT_KEY_SIZE);
		return DD_DDT_KEY_SIZE;
	}
	memset(out, 0xff, DD_RUN_PREFIX_SIZE);
	dd_put_be64(out + DD_RUN_PREFIX_SIZE, run);
	memcpy(out + DD_RUN_HEAD_SIZE, kb, DD_DDT_KEY_SIZE);
	return DD_RUN_KEY_SIZE;
}

/* The run a table key belongs to: 0 for a main key, else its run (and
 * *kb the entry's key); UINT64_MAX: neither (damage). */
static uint64_t dd_run_of(const MDB_val *k, const uint8_t **kb)
{
	const uint8_t *p = k->mv_data;

	if (k->mv_size == DD_DDT_KEY_SIZE) {
		*kb = p;
		return 0;
	}
	if (k->mv_size != DD_RUN_KEY_SIZE)
		return UINT64_MAX;
	for (size_t i = 0; i < DD_RUN_PREFIX_SIZE; i++)
		if (p[i] != 0xff)
			return UINT64_MAX;
	*kb = p + DD_RUN_HEAD_SIZE;
	return dd_get_be64(p + DD_RUN_PREFIX_SIZE);
}

/* A walk's table key: *run its part (0: main) and *kb the entry's key,
 * or damage -- a key of no part, or of a run past the last: no walk may
 * pass over an entry unseen. */
static int dd_run_check(dd_err *err, const MDB_val *k, uint64_t runs,
			uint64_t *run, const uint8_t **kb)
{
	*run = dd_run_of(k, kb);
	if (*run == UINT64_MAX)
		return dd_db_damage(err, "ddt key of %zu bytes, expected %d",
				    k->mv_size, DD_DDT_KEY_SIZE);
	if (*run > runs)
		return dd_db_damage(err, "ddt run %llu past meta %s (%llu)",
				    (unsigned long long)*run, DD_DDT_RUNS_META,
				    (unsigned long long)runs);
	return 0;
}

int dd_ddt_runs_load(dd_txn *txn, dd_err *err)
{
	uint64_t n = 0;
	int rc = dd_meta_get_u64(txn, err, DD_DDT_RUNS_META, &n);

	if (rc == DD_ENOENT) {
		dd_err_clear(err);
		n = 0;
	} else if (rc) {
		return rc;
	}
	if (n > DD_DDT_RUNS_MAX)
		return dd_db_damage(err, "meta %s is %llu, at most %d",
				    DD_DDT_RUNS_META, (unsigned long long)n,
				    DD_DDT_RUNS_MAX);
	txn->tx_ddt_runs = n;
	if (txn->tx_ddt_hit > n)
		txn->tx_ddt_hit = 0;
	return 0;
}

uint64_t dd_ddt_runs(const dd_txn *txn)
{
	return txn->tx_ddt_runs;
}

/* ---- finding a key's part ------------------------------------------------*/

int dd_ddt_locate(dd_txn *txn, dd_err *err, int tree,
		  const uint8_t kb[DD_DDT_KEY_SIZE], MDB_cursor *cur,
		  uint8_t rk[DD_RUN_KEY_SIZE], size_t *rklen, MDB_val *v,
		  uint8_t *passed, size_t *passed_len)
{
	uint64_t n = txn->tx_ddt_runs;
	size_t skipped = 0;

	if (passed_len)
		*passed_len = 0;
	for (uint64_t i = 0; i <= n + 1; i++) {
		/* the last hit first, then main and the runs newest first */
		uint64_t run = i == 0 ? txn->tx_ddt_hit
			     : i == 1 ? 0 : n + 2 - i;
		MDB_val k;
		int rc;

		if (i > 0 && run == txn->tx_ddt_hit)
			continue;
		k.mv_size = dd_run_key(rk, run, kb);
		k.mv_data = rk;
		if (dd_key_ranges_find(txn->tx_skip[tree], txn->tx_nskip[tree],
				       rk, k.mv_size)) {
			/* on a damaged page the transaction passes over */
			if (passed && !skipped)
				memcpy(passed, rk, *passed_len = k.mv_size);
			skipped++;
			continue;
		}
		if (!cur) {
			rc = dd_table_get(txn, err, tree, &k, v, "ddt get");
		} else {
			rc = dd_guard_key(txn, err, tree, rk, k.mv_size,
					  DD_GUARD_PUT);
			if (rc)
				return rc;
			rc = mdb_cursor_get(cur, &k, v, MDB_SET_KEY);
			if (rc == MDB_NOTFOUND)
				rc = DD_ENOENT;
			else if (rc)
				return dd_mdb_error(err, rc, "ddt get");
		}
		if (rc == DD_ENOENT)
			continue;
		if (rc)
			return rc;
		*rklen = k.mv_size;
		txn->tx_ddt_hit = run;
		return 0;
	}
	/* absent from every part read: not an answer when one was not */
	if (skipped && !passed)
		return dd_db_damage(err, "the ddt entry of %02x%02x%02x%02x... "
				    "may be on a damaged page", kb[0], kb[1],
				    kb[2], kb[3]);
	return DD_ENOENT;
}

/* ---- appending to a run --------------------------------------------------*/

/* meta `features` bit 2 while runs may exist (store.md §2): builds that
 * do not know them stay out until a compaction folds them. */
static int dd_ddt_runs_feature(dd_txn *txn, dd_err *err, bool on)
{
	return dd_meta_feature(txn, err, DD_META_FEATURE_DDT_RUNS, on);
}

int dd_ddt_runs_folded(dd_txn *txn, dd_err *err)
{
	int rc;

	if (txn->tx_ddt_run_cur) {
		mdb_cursor_close(txn->tx_ddt_run_cur);
		txn->tx_ddt_run_cur = NULL;
	}
	txn->tx_ddt_run = 0;
	txn->tx_ddt_hit = 0;
	if (!txn->tx_ddt_runs)
		return 0;
	txn->tx_ddt_runs = 0;
	rc = dd_meta_put_u64(txn, err, DD_DDT_RUNS_META, 0);
	return rc ? rc : dd_ddt_runs_feature(txn, err, false);
}

/* Where an append of kb goes: on the run the table ends with when kb
 * follows its last key (this transaction's run, or the one a flush's
 * earlier transaction left), else a new run -- after folding them all
 * when there are DD_DDT_RUNS_MAX already. */
static int dd_ddt_run_start(dd_txn *txn, dd_err *err,
			    const uint8_t kb[DD_DDT_KEY_SIZE])
{
	int tree = txn->tx_ddt_which ? DD_DBI_DDT1 : DD_DBI_DDT0;
	MDB_val k, v;
	const uint8_t *last = NULL;
	int rc;

	if (txn->tx_ddt_runs >= DD_DDT_RUNS_MAX) {
		rc = dd_ddt_fold(txn, err);
		if (rc)
			return rc;
		tree = txn->tx_ddt_which ? DD_DBI_DDT1 : DD_DBI_DDT0;
	}
	if (!txn->tx_ddt_run_cur) {
		rc = mdb_cursor_open(txn->tx_mdb, txn->tx_db->db_dbi[tree],
				     &txn->tx_ddt_run_cur);
		if (rc) {
			txn->tx_ddt_run_cur = NULL;
			return dd_mdb_error(err, rc, "ddt run cursor");
		}
		/* the committed pages of the table's right edge, which the
		 * first append rewrites; later ones meet only this
		 * transaction's copies */
		rc = dd_guard_key(txn, err, tree, kb, DD_DDT_KEY_SIZE,
				  DD_GUARD_APPEND);
		if (rc)
			return rc;
	}
	rc = mdb_cursor_get(txn->tx_ddt_run_cur, &k, &v, MDB_LAST);
	if (rc && rc != MDB_NOTFOUND)
		return dd_mdb_error(err, rc, "ddt run end");
	if (!rc && txn->tx_ddt_runs &&
	    dd_run_of(&k, &last) == txn->tx_ddt_runs &&
	    memcmp(last, kb, DD_DDT_KEY_SIZE) < 0) {
		txn->tx_ddt_run = txn->tx_ddt_runs;
		return 0;
	}
	txn->tx_ddt_run = ++txn->tx_ddt_runs;
	rc = dd_meta_put_u64(txn, err, DD_DDT_RUNS_META, txn->tx_ddt_runs);
	return rc ? rc : dd_ddt_runs_feature(txn, err, true);
}

int dd_ddt_run_append(dd_txn *txn, dd_err *err,
		      const uint8_t kb[DD_DDT_KEY_SIZE],
		      const uint8_t vb[DD_DDT_VAL_SIZE])
{
	uint8_t rk[DD_RUN_KEY_SIZE];
	MDB_val k = {sizeof(rk), rk}, v = {DD_DDT_VAL_SIZE, (void *)vb};
	int rc = 0;

	if (!txn->tx_ddt_run ||
	    memcmp(kb, txn->tx_ddt_run_last, DD_DDT_KEY_SIZE) <= 0)
		rc = dd_ddt_run_start(txn, err, kb);
	if (rc)
		return rc;
	dd_run_key(rk, txn->tx_ddt_run, kb);
	rc = mdb_cursor_put(txn->tx_ddt_run_cur, &k, &v, MDB_APPEND);
	if (rc)
		return dd_mdb_error(err, rc, "ddt run append");
	memcpy(txn->tx_ddt_run_last, kb, DD_DDT_KEY_SIZE);
	return 0;
}

/* ---- the merged walk -----------------------------------------------------*/

struct dd_ddt_part {
	MDB_cursor *dp_cur;
	struct dd_guard_cur dp_guard;
	uint64_t dp_run;
	bool dp_at;                /* on an entry of its part */
	const uint8_t *dp_kb;      /* that entry's 33-byte key */
	MDB_val dp_k, dp_v;
};

/* rc from a cursor move (1: on an entry): is it still in its part? */
static int dd_ddt_part_moved(dd_err *err, struct dd_ddt_part *p,
			     uint64_t runs, int rc)
{
	uint64_t run;

	p->dp_at = false;
	if (rc != 1)
		return rc;
	rc = dd_run_check(err, &p->dp_k, runs, &run, &p->dp_kb);
	p->dp_at = !rc && run == p->dp_run;
	return rc;
}

static int dd_ddt_part_open(dd_txn *txn, dd_err *err, int tree,
			    struct dd_ddt_part *p, uint64_t run)
{
	uint8_t head[DD_RUN_HEAD_SIZE];
	int rc = mdb_cursor_open(txn->tx_mdb, txn->tx_db->db_dbi[tree],
				 &p->dp_cur);

	if (rc) {
		p->dp_cur = NULL;
		return dd_mdb_error(err, rc, "ddt walk");
	}
	p->dp_run = run;
	dd_guard_cur_init(&p->dp_guard, tree);
	memset(head, 0xff, DD_RUN_PREFIX_SIZE);
	dd_put_be64(head + DD_RUN_PREFIX_SIZE, run);
	rc = dd_cursor_seek(txn, err, p->dp_cur, &p->dp_guard,
			    run ? head : NULL, run ? sizeof(head) : 0,
			    &p->dp_k, &p->dp_v, "ddt walk");
	return dd_ddt_part_moved(err, p, txn->tx_ddt_runs, rc);
}

/* Invariant R broken: a key in parts a and b (a damaged key filter let a
 * flush append a key another part held). */
static int dd_ddt_twice(dd_err *err, const struct dd_ddt_part *a,
			const struct dd_ddt_part *b)
{
	char where[32] = "the main part";

	if (a->dp_run)
		snprintf(where, sizeof(where), "run %llu",
			 (unsigned long long)a->dp_run);
	return dd_db_damage(err, "ddt key %02x%02x%02x%02x... in two places "
			    "(%s and run %llu)", a->dp_kb[0], a->dp_kb[1],
			    a->dp_kb[2], a->dp_kb[3], where,
			    (unsigned long long)b->dp_run);
}

int dd_ddt_parts_walk(dd_txn *txn, dd_err *err, int tree, dd_table_fn fn,
		      void *ctx)
{
	size_t n = (size_t)txn->tx_ddt_runs + 1;
	struct dd_ddt_part *parts = dd_calloc(n, sizeof(*parts));
	int rc = 0;

	if (!parts)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	for (size_t i = 0; !rc && i < n; i++)
		rc = dd_ddt_part_open(txn, err, tree, &parts[i], i);
	/* each part's entries in key order: the least head is next */
	while (!rc) {
		struct dd_ddt_part *min = NULL;
		MDB_val k = {DD_DDT_KEY_SIZE, NULL};

		for (size_t i = 0; i < n && !rc; i++) {
			int c;

			if (!parts[i].dp_at)
				continue;
			c = min ? memcmp(parts[i].dp_kb, min->dp_kb,
					 DD_DDT_KEY_SIZE) : -1;
			if (c == 0)   /* invariant R broken */
				rc = dd_ddt_twice(err, min, &parts[i]);
			else if (c < 0)
				min = &parts[i];
		}
		if (rc || !min)
			break;
		k.mv_data = (void *)min->dp_kb;
		rc = fn(ctx, err, &k, &min->dp_v);
		if (!rc)
			rc = dd_ddt_part_moved(err, min, n - 1,
					       dd_cursor_next(txn, err,
						       min->dp_cur,
						       &min->dp_guard,
						       &min->dp_k, &min->dp_v,
						       "ddt walk"));
	}
	for (size_t i = 0; i < n; i++)
		if (parts[i].dp_cur)
			mdb_cursor_close(parts[i].dp_cur);
	dd_free(parts);
	return rc;
}

/* ---- the walk in table order ---------------------------------------------*/

struct dd_ddt_scan {
	uint64_t ds_runs;
	dd_table_fn ds_fn;
	void *ds_ctx;
};

static int dd_ddt_scan_one(void *arg, dd_err *err, const MDB_val *k,
			   const MDB_val *v)
{
	struct dd_ddt_scan *ds = arg;
	const uint8_t *kb = NULL;
	uint64_t run;
	MDB_val key = {DD_DDT_KEY_SIZE, NULL};
	int rc = dd_run_check(err, k, ds->ds_runs, &run, &kb);

	if (rc)
		return rc;
	key.mv_data = (void *)kb;
	return ds->ds_fn(ds->ds_ctx, err, &key, v);
}

int dd_ddt_parts_scan(dd_txn *txn, dd_err *err, int tree, dd_table_fn fn,
		      void *ctx)
{
	struct dd_ddt_scan ds = {txn->tx_ddt_runs, fn, ctx};

	return dd_table_walk(txn, err, tree, dd_ddt_scan_one, &ds, "ddt walk");
}
