/*
 * defer.c -- the mark of a writer that defers its DDT changes, and what
 * readers of pending maps do with it (defer.h, format/store.md §7.2).
 */
#include <string.h>

#include "common/alloc.h"
#include "common/endian.h"
#include "store/defer.h"

int dd_ddt_key_cmp(const dd_ddt_key *a, const dd_ddt_key *b)
{
	int c = memcmp(a->dk_hash, b->dk_hash, DD_HASH_SIZE);

	if (c)
		return c;
	return (a->dk_variant > b->dk_variant) - (a->dk_variant < b->dk_variant);
}

void dd_defer_encode(const dd_defer_mark *m, uint8_t out[DD_DEFER_STATE_SIZE])
{
	out[0] = DD_DEFER_STATE_VERSION;
	dd_put_le64(out + 1, m->dm_done);
	dd_put_le64(out + 9, m->dm_end);
	memcpy(out + 17, m->dm_key.dk_hash, DD_HASH_SIZE);
	out[49] = m->dm_key.dk_variant;
}

bool dd_defer_decode(const dd_pend_rec *rec, dd_defer_mark *m)
{
	const uint8_t *p = rec->pr_state;

	if (rec->pr_state_len != DD_DEFER_STATE_SIZE ||
	    p[0] != DD_DEFER_STATE_VERSION)
		return false;
	m->dm_done = dd_get_le64(p + 1);
	m->dm_end = dd_get_le64(p + 9);
	memcpy(m->dm_key.dk_hash, p + 17, DD_HASH_SIZE);
	m->dm_key.dk_variant = p[49];
	return true;
}

bool dd_pend_is_receive(const dd_pend_rec *rec)
{
	dd_defer_mark m;

	return rec->pr_state_len && !dd_defer_decode(rec, &m);
}

bool dd_defer_counted(const dd_defer_mark *m, uint64_t pos,
		      const dd_ddt_key *key)
{
	if (pos < m->dm_done)
		return true;
	return pos < m->dm_end && dd_ddt_key_cmp(key, &m->dm_key) < 0;
}

bool dd_defer_counted_cb(void *ctx, uint64_t pos, const dd_ddt_key *key)
{
	return dd_defer_counted(ctx, pos, key);
}

static int dd_defer_set_add(void *arg, uint64_t id, const dd_pend_rec *rec)
{
	dd_defer_set *ds = arg;
	dd_defer_mark m;

	if (!dd_defer_decode(rec, &m))
		return 0;
	if (ds->ds_n == ds->ds_cap) {
		size_t n = ds->ds_cap ? ds->ds_cap * 2 : 4;
		uint64_t *id2 = dd_realloc(ds->ds_id, n * sizeof(*id2));
		dd_defer_mark *m2;

		if (!id2)
			return dd_err_set(ds->ds_err, DD_ENOMEM,
					  "out of memory");
		ds->ds_id = id2;
		m2 = dd_realloc(ds->ds_mark, n * sizeof(*m2));
		if (!m2)
			return dd_err_set(ds->ds_err, DD_ENOMEM,
					  "out of memory");
		ds->ds_mark = m2;
		ds->ds_cap = n;
	}
	ds->ds_id[ds->ds_n] = id;
	ds->ds_mark[ds->ds_n++] = m;
	return 0;
}

int dd_defer_set_load(dd_txn *txn, dd_err *err, dd_defer_set *ds)
{
	int rc;

	memset(ds, 0, sizeof(*ds));
	ds->ds_err = err;
	rc = dd_pend_walk(txn, err, dd_defer_set_add, ds);
	ds->ds_err = NULL;
	return rc < 0 ? rc : 0;
}

bool dd_defer_set_counted(const dd_defer_set *ds, uint64_t id, uint64_t pos,
			  const dd_ddt_key *key)
{
	for (size_t i = 0; i < ds->ds_n; i++)
		if (ds->ds_id[i] == id)
			return dd_defer_counted(&ds->ds_mark[i], pos, key);
	return true;
}

void dd_defer_set_free(dd_defer_set *ds)
{
	dd_free(ds->ds_id);
	dd_free(ds->ds_mark);
	memset(ds, 0, sizeof(*ds));
}
