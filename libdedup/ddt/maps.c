/*
 * maps.c -- snapshots, block maps, pending writers and packs in LMDB.
 *
 * Encodings are in format/store.md §3-§4: every key that is a number is
 * big-endian so that LMDB's byte order is numeric order (block maps are
 * then appended with MDB_APPEND and read with one cursor sweep); every
 * value is little-endian, encoded field by field.
 */
#include <string.h>

#include "dedup.h"
#include "common/alloc.h"
#include "common/endian.h"
#include "ddt/db_internal.h"

#define DD_SNAP_VAL_SIZE 80
#define DD_SNAP_VAL_VERSION 1
#define DD_BMAP_KEY_SIZE 16
#define DD_PACKS_VAL_SIZE 16
#define DD_PACKS_VAL_VERSION 1

#define DBI(txn, which) ((txn)->tx_db->db_dbi[which])

/* ---- snapshots (format/store.md §3) -------------------------------------*/

static void dd_snap_encode(uint8_t out[DD_SNAP_VAL_SIZE], const dd_snap_rec *r)
{
	memset(out, 0, DD_SNAP_VAL_SIZE);
	out[0] = DD_SNAP_VAL_VERSION;
	dd_put_le32(out + 4, r->sr_block_size);
	dd_put_le64(out + 8, r->sr_id);
	dd_put_le64(out + 16, r->sr_size);
	dd_put_le64(out + 24, r->sr_blocks);
	dd_put_le64(out + 32, r->sr_zero_blocks);
	dd_put_le64(out + 40, (uint64_t)r->sr_ctime);
	memcpy(out + 48, r->sr_digest, DD_HASH_SIZE);
}

static int dd_snap_decode(dd_err *err, const MDB_val *v, dd_snap_rec *r)
{
	const uint8_t *p = v->mv_data;

	if (v->mv_size != DD_SNAP_VAL_SIZE || p[0] != DD_SNAP_VAL_VERSION)
		return dd_err_set(err, DD_ECORRUPT,
				  "snapshot record of %zu bytes, version %u",
				  v->mv_size, v->mv_size ? p[0] : 0);
	r->sr_block_size = dd_get_le32(p + 4);
	r->sr_id = dd_get_le64(p + 8);
	r->sr_size = dd_get_le64(p + 16);
	r->sr_blocks = dd_get_le64(p + 24);
	r->sr_zero_blocks = dd_get_le64(p + 32);
	r->sr_ctime = (int64_t)dd_get_le64(p + 40);
	memcpy(r->sr_digest, p + 48, DD_HASH_SIZE);
	if (r->sr_block_size == 0 || r->sr_zero_blocks > r->sr_blocks ||
	    r->sr_blocks != r->sr_size / r->sr_block_size +
				    (r->sr_size % r->sr_block_size != 0))
		return dd_err_set(err, DD_ECORRUPT,
				  "snapshot record sizes disagree");
	return 0;
}

int dd_snap_get(dd_txn *txn, dd_err *err, const char *name, dd_snap_rec *out)
{
	MDB_val k = {strlen(name), (void *)name}, v;
	int rc = mdb_get(txn->tx_mdb, DBI(txn, DD_DBI_SNAP), &k, &v);

	if (rc == MDB_NOTFOUND)
		return DD_ENOENT;
	if (rc)
		return dd_mdb_error(err, rc, "snapshot get");
	return dd_snap_decode(err, &v, out);
}

int dd_snap_put(dd_txn *txn, dd_err *err, const char *name,
		const dd_snap_rec *rec)
{
	uint8_t buf[DD_SNAP_VAL_SIZE];
	MDB_val k = {strlen(name), (void *)name}, v = {sizeof(buf), buf};
	int rc;

	dd_snap_encode(buf, rec);
	rc = mdb_put(txn->tx_mdb, DBI(txn, DD_DBI_SNAP), &k, &v, 0);
	if (rc)
		return dd_mdb_error(err, rc, "snapshot put");
	return 0;
}

int dd_snap_del(dd_txn *txn, dd_err *err, const char *name)
{
	MDB_val k = {strlen(name), (void *)name};
	int rc = mdb_del(txn->tx_mdb, DBI(txn, DD_DBI_SNAP), &k, NULL);

	if (rc == MDB_NOTFOUND)
		return DD_ENOENT;
	if (rc)
		return dd_mdb_error(err, rc, "snapshot del");
	return 0;
}

int dd_snap_walk(dd_txn *txn, dd_err *err, dd_snap_walk_fn fn, void *ctx)
{
	MDB_cursor *cur;
	MDB_val k, v;
	char name[DD_NAME_MAX + 1];
	dd_snap_rec rec;
	int rc = mdb_cursor_open(txn->tx_mdb, DBI(txn, DD_DBI_SNAP), &cur);

	if (rc)
		return dd_mdb_error(err, rc, "snapshot cursor");
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		int r = 0;

		if (k.mv_size == 0 || k.mv_size > DD_NAME_MAX ||
		    memchr(k.mv_data, 0, k.mv_size))
			r = dd_err_set(err, DD_ECORRUPT,
				       "snapshot name of %zu bytes", k.mv_size);
		if (!r) {
			memcpy(name, k.mv_data, k.mv_size);
			name[k.mv_size] = 0;
			r = dd_snap_decode(err, &v, &rec);
		}
		if (!r)
			r = fn(ctx, name, &rec);
		if (r) {
			mdb_cursor_close(cur);
			return r;
		}
	}
	mdb_cursor_close(cur);
	if (rc != MDB_NOTFOUND)
		return dd_mdb_error(err, rc, "snapshot walk");
	return 0;
}

/* ---- block maps (format/store.md §4) -------------------------------------*/

struct dd_bmap_cur {
	MDB_cursor *bc_cur;
	uint64_t bc_id;
};

static void dd_bmap_key(uint8_t out[DD_BMAP_KEY_SIZE], uint64_t id,
			uint64_t idx)
{
	dd_put_be64(out, id);
	dd_put_be64(out + 8, idx);
}

/* Decodes one bmap pair; returns 1 if it belongs to id, 0 if not. */
static int dd_bmap_decode(dd_err *err, const MDB_val *k, const MDB_val *v,
			  uint64_t id, uint64_t *idx, dd_ddt_key *key)
{
	if (k->mv_size != DD_BMAP_KEY_SIZE || v->mv_size != DD_DDT_KEY_SIZE)
		return dd_err_set(err, DD_ECORRUPT,
				  "block map entry of %zu/%zu bytes",
				  k->mv_size, v->mv_size);
	if (dd_get_be64(k->mv_data) != id)
		return 0;
	*idx = dd_get_be64((const uint8_t *)k->mv_data + 8);
	memcpy(key->dk_hash, v->mv_data, DD_HASH_SIZE);
	key->dk_variant = ((const uint8_t *)v->mv_data)[DD_HASH_SIZE];
	return 1;
}

int dd_bmap_append(dd_txn *txn, dd_err *err, uint64_t id, uint64_t idx,
		   const dd_ddt_key *key)
{
	uint8_t kb[DD_BMAP_KEY_SIZE], vb[DD_DDT_KEY_SIZE];
	MDB_val k = {sizeof(kb), kb}, v = {sizeof(vb), vb};
	int rc;

	dd_bmap_key(kb, id, idx);
	memcpy(vb, key->dk_hash, DD_HASH_SIZE);
	vb[DD_HASH_SIZE] = key->dk_variant;
	rc = mdb_put(txn->tx_mdb, DBI(txn, DD_DBI_BMAP), &k, &v, MDB_APPEND);
	if (rc == MDB_KEYEXIST)
		return dd_err_set(err, DD_ECORRUPT,
				  "block map append out of order (id %llu, "
				  "block %llu)", (unsigned long long)id,
				  (unsigned long long)idx);
	if (rc)
		return dd_mdb_error(err, rc, "block map put");
	return 0;
}

int dd_bmap_open(dd_txn *txn, dd_err *err, uint64_t id, dd_bmap_cur **out)
{
	dd_bmap_cur *bc = dd_calloc(1, sizeof(*bc));
	int rc;

	if (!bc)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	rc = mdb_cursor_open(txn->tx_mdb, DBI(txn, DD_DBI_BMAP), &bc->bc_cur);
	if (rc) {
		dd_free(bc);
		return dd_mdb_error(err, rc, "block map cursor");
	}
	bc->bc_id = id;
	*out = bc;
	return 0;
}

static int dd_bmap_get(dd_bmap_cur *bc, dd_err *err, MDB_val *k,
		       MDB_cursor_op op, uint64_t *idx_out, dd_ddt_key *key)
{
	MDB_val v;
	int rc = mdb_cursor_get(bc->bc_cur, k, &v, op);

	if (rc == MDB_NOTFOUND)
		return 0;
	if (rc)
		return dd_mdb_error(err, rc, "block map read");
	return dd_bmap_decode(err, k, &v, bc->bc_id, idx_out, key);
}

int dd_bmap_seek(dd_bmap_cur *bc, dd_err *err, uint64_t idx,
		 uint64_t *idx_out, dd_ddt_key *key)
{
	uint8_t kb[DD_BMAP_KEY_SIZE];
	MDB_val k = {sizeof(kb), kb};

	dd_bmap_key(kb, bc->bc_id, idx);
	return dd_bmap_get(bc, err, &k, MDB_SET_RANGE, idx_out, key);
}

int dd_bmap_next(dd_bmap_cur *bc, dd_err *err, uint64_t *idx_out,
		 dd_ddt_key *key)
{
	MDB_val k;

	return dd_bmap_get(bc, err, &k, MDB_NEXT, idx_out, key);
}

void dd_bmap_close(dd_bmap_cur *bc)
{
	if (!bc)
		return;
	mdb_cursor_close(bc->bc_cur);
	dd_free(bc);
}

int dd_bmap_drop(dd_txn *txn, dd_err *err, uint64_t id, dd_bmap_drop_fn fn,
		 void *ctx)
{
	dd_bmap_cur *bc = NULL;
	uint64_t idx = 0;
	dd_ddt_key key = {{0}, 0};
	int rc = dd_bmap_open(txn, err, id, &bc);

	if (rc)
		return rc;
	for (rc = dd_bmap_seek(bc, err, 0, &idx, &key); rc == 1;
	     rc = dd_bmap_seek(bc, err, idx + 1, &idx, &key)) {
		int r = fn ? fn(ctx, idx, &key) : 0;

		if (!r && (r = mdb_cursor_del(bc->bc_cur, 0)) != 0)
			r = dd_mdb_error(err, r, "block map del");
		if (r) {
			rc = r;
			break;
		}
	}
	dd_bmap_close(bc);
	return rc < 0 ? rc : 0;
}

int dd_bmap_walk_all(dd_txn *txn, dd_err *err, dd_bmap_walk_fn fn, void *ctx)
{
	MDB_cursor *cur;
	MDB_val k, v;
	dd_ddt_key key;
	int rc = mdb_cursor_open(txn->tx_mdb, DBI(txn, DD_DBI_BMAP), &cur);

	if (rc)
		return dd_mdb_error(err, rc, "block map cursor");
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		uint64_t id = k.mv_size == DD_BMAP_KEY_SIZE
				      ? dd_get_be64(k.mv_data) : 0, idx = 0;
		int r = dd_bmap_decode(err, &k, &v, id, &idx, &key);

		if (r == 1)
			r = fn(ctx, id, idx, &key);
		if (r) {
			mdb_cursor_close(cur);
			return r;
		}
	}
	mdb_cursor_close(cur);
	if (rc != MDB_NOTFOUND)
		return dd_mdb_error(err, rc, "block map walk");
	return 0;
}

/* ---- pending writers -----------------------------------------------------*/

int dd_pend_put_state(dd_txn *txn, dd_err *err, uint64_t id, const char *name,
		      const void *state, size_t len)
{
	uint8_t kb[8], vb[DD_NAME_MAX + 1 + DD_PEND_STATE_MAX];
	size_t nlen = strlen(name);
	MDB_val k = {8, kb}, v = {nlen + (len ? 1 + len : 0), vb};
	int rc;

	if (nlen == 0 || nlen > DD_NAME_MAX || len > DD_PEND_STATE_MAX)
		return dd_err_set(err, DD_EINVAL, "pending record too large");
	dd_put_be64(kb, id);
	memcpy(vb, name, nlen);
	if (len) {
		vb[nlen] = 0;
		memcpy(vb + nlen + 1, state, len);
	}
	rc = mdb_put(txn->tx_mdb, DBI(txn, DD_DBI_PEND), &k, &v, 0);
	if (rc)
		return dd_mdb_error(err, rc, "pending put");
	return 0;
}

int dd_pend_put(dd_txn *txn, dd_err *err, uint64_t id, const char *name)
{
	return dd_pend_put_state(txn, err, id, name, NULL, 0);
}

static int dd_pend_decode(dd_err *err, const MDB_val *k, const MDB_val *v,
			  uint64_t *id, dd_pend_rec *rec)
{
	const uint8_t *p = v->mv_data, *nul;
	size_t nlen;

	if (k->mv_size != 8 || v->mv_size == 0 ||
	    v->mv_size > DD_NAME_MAX + 1 + DD_PEND_STATE_MAX)
		return dd_err_set(err, DD_ECORRUPT, "pending record damaged");
	*id = dd_get_be64(k->mv_data);
	nul = memchr(p, 0, v->mv_size);
	nlen = nul ? (size_t)(nul - p) : v->mv_size;
	if (nlen == 0 || nlen > DD_NAME_MAX ||
	    (nul && v->mv_size - nlen - 1 > DD_PEND_STATE_MAX))
		return dd_err_set(err, DD_ECORRUPT, "pending record damaged");
	memcpy(rec->pr_name, p, nlen);
	rec->pr_name[nlen] = 0;
	rec->pr_state_len = nul ? v->mv_size - nlen - 1 : 0;
	memcpy(rec->pr_state, p + nlen + (nul ? 1 : 0), rec->pr_state_len);
	return 0;
}

int dd_pend_walk(dd_txn *txn, dd_err *err, dd_pend_walk_fn fn, void *ctx)
{
	MDB_cursor *cur;
	MDB_val k, v;
	dd_pend_rec rec;
	uint64_t id = 0;
	int rc = mdb_cursor_open(txn->tx_mdb, DBI(txn, DD_DBI_PEND), &cur);

	if (rc)
		return dd_mdb_error(err, rc, "pending cursor");
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		int r = dd_pend_decode(err, &k, &v, &id, &rec);

		if (!r)
			r = fn(ctx, id, &rec);
		if (r) {
			mdb_cursor_close(cur);
			return r;
		}
	}
	mdb_cursor_close(cur);
	if (rc != MDB_NOTFOUND)
		return dd_mdb_error(err, rc, "pending walk");
	return 0;
}

int dd_pend_del(dd_txn *txn, dd_err *err, uint64_t id)
{
	uint8_t kb[8];
	MDB_val k = {8, kb};
	int rc;

	dd_put_be64(kb, id);
	rc = mdb_del(txn->tx_mdb, DBI(txn, DD_DBI_PEND), &k, NULL);
	if (rc && rc != MDB_NOTFOUND)
		return dd_mdb_error(err, rc, "pending del");
	return 0;
}

int dd_pend_first(dd_txn *txn, dd_err *err, uint64_t *id)
{
	MDB_cursor *cur;
	MDB_val k, v;
	int rc = mdb_cursor_open(txn->tx_mdb, DBI(txn, DD_DBI_PEND), &cur);

	if (rc)
		return dd_mdb_error(err, rc, "pending cursor");
	rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
	mdb_cursor_close(cur);
	if (rc == MDB_NOTFOUND)
		return 0;
	if (rc)
		return dd_mdb_error(err, rc, "pending read");
	if (k.mv_size != 8)
		return dd_err_set(err, DD_ECORRUPT, "pending key of %zu bytes",
				  k.mv_size);
	*id = dd_get_be64(k.mv_data);
	return 1;
}

/* ---- packs (format/store.md §5) ------------------------------------------*/

#define DD_PACKS_DOOMED 0x01

static void dd_packs_key(uint8_t kb[4], uint32_t id)
{
	kb[0] = (uint8_t)(id >> 24);
	kb[1] = (uint8_t)(id >> 16);
	kb[2] = (uint8_t)(id >> 8);
	kb[3] = (uint8_t)id;
}

/* Decodes a packs value: *flags and the u64 (end, or doomed-since). */
static int dd_packs_decode(dd_err *err, uint32_t id, const MDB_val *v,
			   uint8_t *flags, uint64_t *val)
{
	const uint8_t *p = v->mv_data;

	if (v->mv_size != DD_PACKS_VAL_SIZE || p[0] != DD_PACKS_VAL_VERSION ||
	    (p[1] & ~DD_PACKS_DOOMED))
		return dd_err_set(err, DD_ECORRUPT, "pack record %u damaged", id);
	*flags = p[1];
	*val = dd_get_le64(p + 8);
	return 0;
}

int dd_packs_get(dd_txn *txn, dd_err *err, uint32_t id, uint64_t *end)
{
	uint8_t kb[4], flags = 0;
	MDB_val k = {4, kb}, v;
	int rc;

	dd_packs_key(kb, id);
	rc = mdb_get(txn->tx_mdb, DBI(txn, DD_DBI_PACKS), &k, &v);
	if (rc == MDB_NOTFOUND)
		return DD_ENOENT;
	if (rc)
		return dd_mdb_error(err, rc, "packs get");
	rc = dd_packs_decode(err, id, &v, &flags, end);
	if (!rc && (flags & DD_PACKS_DOOMED))
		return DD_ENOENT;
	return rc;
}

static int dd_packs_set(dd_txn *txn, dd_err *err, uint32_t id, uint8_t flags,
			uint64_t val)
{
	uint8_t kb[4], vb[DD_PACKS_VAL_SIZE] = {DD_PACKS_VAL_VERSION, flags};
	MDB_val k = {4, kb}, v = {sizeof(vb), vb};
	int rc;

	dd_packs_key(kb, id);
	dd_put_le64(vb + 8, val);
	rc = mdb_put(txn->tx_mdb, DBI(txn, DD_DBI_PACKS), &k, &v, 0);
	if (rc)
		return dd_mdb_error(err, rc, "packs put");
	return 0;
}

int dd_packs_doom(dd_txn *txn, dd_err *err, uint32_t id, uint64_t since)
{
	return dd_packs_set(txn, err, id, DD_PACKS_DOOMED, since);
}

uint64_t dd_txn_id(const dd_txn *txn)
{
	return (uint64_t)mdb_txn_id(txn->tx_mdb);
}

int dd_packs_put(dd_txn *txn, dd_err *err, uint32_t id, uint64_t end)
{
	return dd_packs_set(txn, err, id, 0, end);
}

int dd_packs_del(dd_txn *txn, dd_err *err, uint32_t id)
{
	uint8_t kb[4];
	MDB_val k = {4, kb};
	int rc;

	dd_packs_key(kb, id);
	rc = mdb_del(txn->tx_mdb, DBI(txn, DD_DBI_PACKS), &k, NULL);
	if (rc && rc != MDB_NOTFOUND)
		return dd_mdb_error(err, rc, "packs del");
	return 0;
}

/* Walks every pack record; fn gets the flags (live or doomed). */
static int dd_packs_walk_all(dd_txn *txn, dd_err *err, bool doomed,
			     int (*fn)(void *, uint32_t, uint64_t), void *ctx)
{
	MDB_cursor *cur;
	MDB_val k, v;
	int rc = mdb_cursor_open(txn->tx_mdb, DBI(txn, DD_DBI_PACKS), &cur);

	if (rc)
		return dd_mdb_error(err, rc, "packs cursor");
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		const uint8_t *kp = k.mv_data;
		uint32_t id = 0;
		uint64_t val = 0;
		uint8_t flags = 0;
		int r = 0;

		if (k.mv_size != 4)
			r = dd_err_set(err, DD_ECORRUPT, "pack record damaged");
		if (!r) {
			id = (uint32_t)kp[0] << 24 | (uint32_t)kp[1] << 16 |
			     (uint32_t)kp[2] << 8 | kp[3];
			r = dd_packs_decode(err, id, &v, &flags, &val);
		}
		if (!r && !!(flags & DD_PACKS_DOOMED) == doomed)
			r = fn(ctx, id, val);
		if (r) {
			mdb_cursor_close(cur);
			return r;
		}
	}
	mdb_cursor_close(cur);
	if (rc != MDB_NOTFOUND)
		return dd_mdb_error(err, rc, "packs walk");
	return 0;
}

int dd_packs_walk(dd_txn *txn, dd_err *err, dd_packs_walk_fn fn, void *ctx)
{
	return dd_packs_walk_all(txn, err, false, fn, ctx);
}

int dd_packs_walk_doomed(dd_txn *txn, dd_err *err, dd_doomed_walk_fn fn,
			 void *ctx)
{
	return dd_packs_walk_all(txn, err, true, fn, ctx);
}
