/*
 * ucnt.c -- uncounted block-map positions (ucnt.h, format/store.md §4.3).
 */
#include <lmdb.h>
#include <stdlib.h>
#include <string.h>

#include "dedup.h"
#include "common/alloc.h"
#include "common/endian.h"
#include "catalog/db_internal.h"
#include "catalog/ucnt.h"

/* Rows live in meta, under keys no other meta key starts with: a catalog
 * needs no table it may not have (a reader of an older one writes
 * nothing), and a walk of meta, a few dozen keys more, finds them. */
#define DD_UCNT_PREFIX "ucnt/"
#define DD_UCNT_PREFIX_LEN 5

static void dd_ucnt_key(uint8_t kb[DD_UCNT_KEY_SIZE], uint64_t id,
			uint64_t row)
{
	memcpy(kb, DD_UCNT_PREFIX, DD_UCNT_PREFIX_LEN);
	dd_put_be64(kb + DD_UCNT_PREFIX_LEN, id);
	dd_put_be64(kb + DD_UCNT_PREFIX_LEN + 8, row);
}

bool dd_ucnt_none(const uint8_t *bits)
{
	for (size_t i = 0; i < DD_UCNT_BYTES; i++)
		if (bits[i])
			return false;
	return true;
}

static int dd_ucnt_load_one(void *arg, dd_err *err, const MDB_val *k,
			    const MDB_val *v)
{
	dd_ucnt_set *set = arg;
	dd_ucnt_row *r;
	uint64_t id;

	if (k->mv_size < DD_UCNT_PREFIX_LEN ||
	    memcmp(k->mv_data, DD_UCNT_PREFIX, DD_UCNT_PREFIX_LEN))
		return 0;   /* another meta key */
	if (k->mv_size != DD_UCNT_KEY_SIZE || v->mv_size != DD_UCNT_BYTES ||
	    dd_ucnt_none(v->mv_data))
		return dd_db_damage(err, "ucnt row of %zu+%zu bytes, or "
				    "without a bit", k->mv_size, v->mv_size);
	id = dd_get_be64((const uint8_t *)k->mv_data + DD_UCNT_PREFIX_LEN);
	if (set->us_only && id != set->us_only)
		return 0;
	if (set->us_n == set->us_cap) {
		size_t cap = set->us_cap ? 2 * set->us_cap : 16;
		dd_ucnt_row *nr = dd_realloc(set->us_row, cap * sizeof(*nr));

		if (!nr)
			return dd_err_set(err, DD_ENOMEM, "out of memory");
		set->us_row = nr;
		set->us_cap = cap;
	}
	r = &set->us_row[set->us_n];
	r->ur_bits = dd_malloc(DD_UCNT_BYTES);
	if (!r->ur_bits)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	memcpy(r->ur_bits, v->mv_data, DD_UCNT_BYTES);
	r->ur_id = id;
	r->ur_row = dd_get_be64((const uint8_t *)k->mv_data +
				 DD_UCNT_PREFIX_LEN + 8);
	r->ur_dirty = false;
	set->us_n++;
	return 0;
}

int dd_ucnt_load(dd_txn *txn, dd_err *err, uint64_t id, dd_ucnt_set *set)
{
	memset(set, 0, sizeof(*set));
	set->us_only = id;
	/* small (a bit per uncounted position): one walk */
	return dd_table_walk(txn, err, DD_DBI_META, dd_ucnt_load_one, set,
			     "ucnt walk");
}

static const dd_ucnt_row *dd_ucnt_find(const dd_ucnt_set *set, uint64_t id,
				       uint64_t row)
{
	size_t lo = 0, hi = set->us_n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const dd_ucnt_row *r = &set->us_row[mid];

		if (r->ur_id < id || (r->ur_id == id && r->ur_row < row))
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < set->us_n && set->us_row[lo].ur_id == id &&
	    set->us_row[lo].ur_row == row)
		return &set->us_row[lo];
	return NULL;
}

bool dd_ucnt_has(const dd_ucnt_set *set, uint64_t id, uint64_t pos)
{
	const dd_ucnt_row *r;

	if (!set->us_n)
		return false;
	r = dd_ucnt_find(set, id, pos / DD_UCNT_SPAN);
	return r && dd_ucnt_bit(r->ur_bits, pos);
}

void dd_ucnt_free(dd_ucnt_set *set)
{
	for (size_t i = 0; i < set->us_n; i++)
		dd_free(set->us_row[i].ur_bits);
	dd_free(set->us_row);
	memset(set, 0, sizeof(*set));
}

/* The catalog may now hold rows: builds that do not know them stay out
 * (meta `features`, checked at every open, store/layout.c). */
static int dd_ucnt_feature(dd_txn *txn, dd_err *err)
{
	return dd_meta_feature(txn, err, DD_META_FEATURE_UCNT, true);
}

static unsigned dd_ucnt_popcount(const uint8_t *bits)
{
	unsigned n = 0;

	for (size_t i = 0; i < DD_UCNT_BYTES; i++)
		n += (unsigned)__builtin_popcount(bits[i]);
	return n;
}

uint64_t dd_ucnt_count(const dd_ucnt_set *set)
{
	uint64_t n = 0;

	for (size_t i = 0; i < set->us_n; i++)
		n += dd_ucnt_popcount(set->us_row[i].ur_bits);
	return n;
}

int dd_ucnt_settle(dd_txn *txn, dd_err *err, const dd_ucnt_set *left)
{
	if (dd_ucnt_count(left))
		return 0;
	return dd_meta_feature(txn, err, DD_META_FEATURE_UCNT, false);
}

static int dd_ucnt_put(dd_txn *txn, dd_err *err, uint64_t id, uint64_t row,
		       const uint8_t *bits)
{
	uint8_t kb[DD_UCNT_KEY_SIZE];
	MDB_val k = {sizeof(kb), kb}, v = {DD_UCNT_BYTES, (void *)bits};
	int rc;

	dd_ucnt_key(kb, id, row);
	if (dd_ucnt_none(bits)) {
		rc = dd_table_del(txn, err, DD_DBI_META, &k, "ucnt del");
		return rc == DD_ENOENT ? 0 : rc;
	}
	return dd_table_put(txn, err, DD_DBI_META, &k, &v, 0, "ucnt put");
}

int dd_ucnt_or(dd_txn *txn, dd_err *err, uint64_t id, uint64_t row,
	       const uint8_t bits[DD_UCNT_BYTES])
{
	uint8_t kb[DD_UCNT_KEY_SIZE], merged[DD_UCNT_BYTES];
	MDB_val k = {sizeof(kb), kb}, v;
	int rc;

	rc = dd_ucnt_feature(txn, err);
	if (rc)
		return rc;
	dd_ucnt_key(kb, id, row);
	rc = dd_table_get(txn, err, DD_DBI_META, &k, &v, "ucnt get");
	if (rc && rc != DD_ENOENT)
		return rc;
	if (rc == 0 && v.mv_size != DD_UCNT_BYTES)
		return dd_db_damage(err, "ucnt row of %zu bytes", v.mv_size);
	for (size_t i = 0; i < DD_UCNT_BYTES; i++)
		merged[i] = (uint8_t)(bits[i] |
				      (rc ? 0 : ((const uint8_t *)v.mv_data)[i]));
	return dd_ucnt_put(txn, err, id, row, merged);
}

int dd_ucnt_store(dd_txn *txn, dd_err *err, dd_ucnt_set *set)
{
	for (size_t i = 0; i < set->us_n; i++) {
		dd_ucnt_row *r = &set->us_row[i];
		int rc;

		if (!r->ur_dirty)
			continue;
		rc = dd_ucnt_put(txn, err, r->ur_id, r->ur_row, r->ur_bits);
		if (rc)
			return rc;
		r->ur_dirty = false;
	}
	return 0;
}

int dd_ucnt_drop(dd_txn *txn, dd_err *err, const dd_ucnt_set *own)
{
	for (size_t i = 0; i < own->us_n; i++) {
		uint8_t kb[DD_UCNT_KEY_SIZE];
		MDB_val k = {sizeof(kb), kb};
		int rc;

		dd_ucnt_key(kb, own->us_row[i].ur_id, own->us_row[i].ur_row);
		rc = dd_table_del(txn, err, DD_DBI_META, &k, "ucnt del");
		if (rc && rc != DD_ENOENT)
			return rc;
	}
	return 0;
}

/* One row: the map's entries in its span, those with the bit set. */
static int dd_ucnt_walk_row(dd_bmap_cur *bc, dd_err *err, dd_ucnt_row *r,
			    dd_ucnt_fn fn, void *ctx)
{
	uint64_t first = r->ur_row * DD_UCNT_SPAN, pos = 0;
	unsigned want = dd_ucnt_popcount(r->ur_bits), seen = 0;
	dd_ddt_key key;
	int rc;

	for (rc = dd_bmap_seek(bc, err, first, &pos, &key);
	     rc == 1 && pos - first < DD_UCNT_SPAN;
	     rc = dd_bmap_next(bc, err, &pos, &key)) {
		if (!dd_ucnt_bit(r->ur_bits, pos))
			continue;
		seen++;
		rc = fn(ctx, r, pos, &key);
		if (rc)
			return rc;
	}
	if (rc < 0)
		return rc;
	if (seen != want)
		return dd_db_damage(err, "%u uncounted positions of map %llu "
				    "name no block", want - seen,
				    (unsigned long long)r->ur_id);
	return 0;
}

int dd_ucnt_walk(dd_txn *txn, dd_err *err, dd_ucnt_set *set, dd_ucnt_fn fn,
		 void *ctx)
{
	dd_bmap_cur *bc = NULL;
	uint64_t open_id = 0;
	int rc = 0;

	if (dd_db_varblock(txn->tx_db) && set->us_n)
		return dd_db_damage(err, "ucnt rows in a catalog of "
				    "content-defined blocks");
	for (size_t i = 0; !rc && i < set->us_n; i++) {
		dd_ucnt_row *r = &set->us_row[i];

		if (!bc || open_id != r->ur_id) {
			dd_bmap_close(bc);
			bc = NULL;
			rc = dd_bmap_open(txn, err, r->ur_id, &bc);
			if (rc)
				break;
			open_id = r->ur_id;
		}
		rc = dd_ucnt_walk_row(bc, err, r, fn, ctx);
	}
	dd_bmap_close(bc);
	return rc;
}

struct dd_ucnt_extra_ctx {
	dd_hmap *ue_map;
	dd_err *ue_err;
};

static int dd_ucnt_extra_one(void *arg, dd_ucnt_row *r, uint64_t pos,
			     const dd_ddt_key *key)
{
	struct dd_ucnt_extra_ctx *ue = arg;
	uint8_t flat[DD_HASH_SIZE];
	uint64_t n = 0;
	int rc;

	(void)r;
	(void)pos;
	dd_ddt_key_flat(key, flat);
	rc = dd_hmap_get(ue->ue_map, ue->ue_err, flat, &n);
	if (rc && rc != DD_ENOENT)
		return rc;
	return dd_hmap_put(ue->ue_map, ue->ue_err, flat, n + 1);
}

int dd_ucnt_extra(dd_txn *txn, dd_err *err, dd_hmap **out)
{
	struct dd_ucnt_extra_ctx ue = {NULL, err};
	dd_ucnt_set set;
	int rc = dd_ucnt_load(txn, err, 0, &set);

	*out = NULL;
	if (!rc && set.us_n)
		/* as scrub's table: 64 MiB in RAM, spilled beyond */
		rc = dd_hmap_new(&ue.ue_map, err, (uint64_t)64 << 20, NULL);
	if (!rc && set.us_n)
		rc = dd_ucnt_walk(txn, err, &set, dd_ucnt_extra_one, &ue);
	dd_ucnt_free(&set);
	if (rc)
		dd_hmap_free(ue.ue_map);
	else
		*out = ue.ue_map;
	return rc;
}

int dd_ucnt_extra_get(dd_hmap *map, dd_err *err, const dd_ddt_key *key,
		      uint64_t *n)
{
	uint8_t flat[DD_HASH_SIZE];
	int rc;

	*n = 0;
	if (!map)
		return 0;
	dd_ddt_key_flat(key, flat);
	rc = dd_hmap_get(map, err, flat, n);
	return rc == DD_ENOENT ? 0 : rc;
}

/* An index entry: the row's slot in the set and the position in the row,
 * plus 1; 0 once taken. */
#define DD_UCNT_IDX(slot, pos) \
	((((uint64_t)(slot) << DD_UCNT_SHIFT) | ((pos) % DD_UCNT_SPAN)) + 1)

struct dd_ucnt_index_ctx {
	dd_ucnt_set *ui_set;
	dd_hmap *ui_map;
	dd_err *ui_err;
};

static int dd_ucnt_index_one(void *arg, dd_ucnt_row *r, uint64_t pos,
			     const dd_ddt_key *key)
{
	struct dd_ucnt_index_ctx *ui = arg;
	uint8_t flat[DD_HASH_SIZE];
	uint64_t v;
	int rc;

	dd_ddt_key_flat(key, flat);
	rc = dd_hmap_get(ui->ui_map, ui->ui_err, flat, &v);
	if (rc != DD_ENOENT)
		return rc;   /* 0: an earlier position is the key's first */
	return dd_hmap_put(ui->ui_map, ui->ui_err, flat,
			   DD_UCNT_IDX(r - ui->ui_set->us_row, pos));
}

int dd_ucnt_index(dd_txn *txn, dd_err *err, dd_ucnt_set *set, dd_hmap **out)
{
	/* as scrub's table: 64 MiB in RAM, spilled beyond */
	struct dd_ucnt_index_ctx ui = {set, NULL, err};
	int rc = dd_hmap_new(&ui.ui_map, err, (uint64_t)64 << 20, NULL);

	if (!rc)
		rc = dd_ucnt_walk(txn, err, set, dd_ucnt_index_one, &ui);
	if (rc) {
		dd_hmap_free(ui.ui_map);
		ui.ui_map = NULL;
	}
	*out = ui.ui_map;
	return rc;
}

int dd_ucnt_index_take(dd_hmap *index, dd_err *err, dd_ucnt_set *set,
		       const dd_ddt_key *key, bool *taken)
{
	uint8_t flat[DD_HASH_SIZE];
	dd_ucnt_row *r;
	uint64_t v = 0;
	int rc;

	*taken = false;
	dd_ddt_key_flat(key, flat);
	rc = dd_hmap_get(index, err, flat, &v);
	if (rc == DD_ENOENT || (rc == 0 && v == 0))
		return 0;
	if (rc)
		return rc;
	v--;
	r = &set->us_row[v >> DD_UCNT_SHIFT];
	dd_ucnt_set_bit(r->ur_bits, v % DD_UCNT_SPAN, false);
	r->ur_dirty = true;
	*taken = true;
	return dd_hmap_put(index, err, flat, 0);
}
