/*
 * cursor.c -- a cursor's moves, each checked by the guard before LMDB
 * makes it, and the key ranges a read transaction passes over.
 *
 * Why ranges: scrub goes on past the damaged pages the whole-file check
 * reports (store/scrub_pages.c), each with the range of keys its parent
 * sends to it.  A walk must then read every other page of the table and
 * none of those: LMDB trusts every page it reads, and the guard would
 * stop the walk at the first damaged one.  So a transaction can be given
 * the ranges to skip (dd_txn_skip), and every cursor of catalog/ moves
 * through here:
 *
 *   - a seek to a key inside a range goes to the range's end instead:
 *     the descent by key hi reaches the subtree that begins at hi, so it
 *     passes beside the damaged one, never through it;
 *   - a step from a leaf's last key to the next leaf is stopped by the
 *     guard (lg_step) when the key that begins the next leaf -- a key of
 *     a branch page above that passed the guard -- lies in a range: the
 *     next leaf is the damaged page, or below it.  DD_GUARD_JUMP, and
 *     the cursor seeks the range's end instead.
 *
 * Invariant: no key in a range is returned, every key outside the ranges
 * is, in order, and no page a range stands for is read.  A range
 * narrower than the damage -- one from an older snapshot of a tree that
 * changed since -- lets the guard meet the damaged page, which it
 * reports as DD_ECORRUPT naming it: the walk stops, as it would without
 * ranges, and nothing crashes.
 */
#include <string.h>

#include "dedup.h"
#include "catalog/db_internal.h"

int dd_txn_skip(dd_txn *txn, dd_err *err, const char *table,
		const dd_key_range *r, size_t n)
{
	if (txn->tx_write)
		return dd_err_set(err, DD_EINVAL, "dd_txn_skip: a write "
				  "transaction reads every page it changes");
	for (int t = 0; t < DD_DBI_COUNT; t++) {
		if (strcmp(dd_db_names[t], table) != 0)
			continue;
		txn->tx_skip[t] = n ? r : NULL;
		txn->tx_nskip[t] = n;
		/* the leaf a walk last checked may lie past a range that
		 * its cached descent would now step into */
		txn->tx_guard.gs_leaf[t].gl_valid = false;
		return 0;
	}
	return dd_err_set(err, DD_EINVAL, "dd_txn_skip: no table '%s'", table);
}

const dd_key_range *dd_key_ranges_find(const dd_key_range *r, size_t n,
				       const void *key, size_t klen)
{
	size_t lo = 0, hi = n;

	if (!key)
		return n && !r[0].kr_lo ? &r[0] : NULL;
	/* the first range that ends past key */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (r[mid].kr_hi && dd_lm_cmp(key, klen, r[mid].kr_hi,
					      r[mid].kr_hilen) >= 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == n || (r[lo].kr_lo && dd_lm_cmp(key, klen, r[lo].kr_lo,
						 r[lo].kr_lolen) < 0))
		return NULL;
	return &r[lo];
}

static int dd_cursor_get(dd_err *err, MDB_cursor *mc, MDB_val *k, MDB_val *v,
			 MDB_cursor_op op, const char *what)
{
	int rc = mdb_cursor_get(mc, k, v, op);

	if (rc == MDB_NOTFOUND)
		return 0;
	return rc ? dd_mdb_error(err, rc, what) : 1;
}

int dd_cursor_seek(dd_txn *txn, dd_err *err, MDB_cursor *mc,
		   struct dd_guard_cur *g, const void *key, size_t klen,
		   MDB_val *k, MDB_val *v, const char *what)
{
	int tree = g->gc_tree;

	for (;;) {
		const dd_key_range *r = dd_key_ranges_find(txn->tx_skip[tree],
							   txn->tx_nskip[tree],
							   key, klen);
		int rc;

		if (r && !r->kr_hi)
			return 0;          /* skipped to the table's end */
		if (r) {
			key = r->kr_hi;    /* in no range: they do not touch */
			klen = r->kr_hilen;
		}
		rc = dd_guard_seek(txn, err, g, key, klen);
		if (rc == DD_GUARD_JUMP) {
			/* the key's leaf holds nothing at or after it, and
			 * the next leaf begins in a range: on past it */
			if (!g->gc_jump->kr_hi)
				return 0;
			key = g->gc_jump->kr_hi;
			klen = g->gc_jump->kr_hilen;
			continue;
		}
		if (rc)
			return rc;
		if (!key)
			return dd_cursor_get(err, mc, k, v, MDB_FIRST, what);
		k->mv_data = (void *)key;
		k->mv_size = klen;
		return dd_cursor_get(err, mc, k, v, MDB_SET_RANGE, what);
	}
}

int dd_cursor_next(dd_txn *txn, dd_err *err, MDB_cursor *mc,
		   struct dd_guard_cur *g, MDB_val *k, MDB_val *v,
		   const char *what)
{
	int rc = dd_guard_next(txn, err, g, k->mv_data, k->mv_size);

	if (rc == DD_GUARD_JUMP)
		return g->gc_jump->kr_hi
			       ? dd_cursor_seek(txn, err, mc, g, g->gc_jump->kr_hi,
						g->gc_jump->kr_hilen, k, v, what)
			       : 0;
	if (rc)
		return rc;
	return dd_cursor_get(err, mc, k, v, MDB_NEXT, what);
}
