/*
 * maps.c -- snapshots, block maps, pending writers and packs in LMDB;
 * the walk that finds a snapshot by id, and
 * dropping a snapshot's references.
 *
 * Encodings are in format/store.md §3-§4: every key that is a number is
 * big-endian so that LMDB's byte order is numeric order (block maps are
 * then appended with MDB_APPEND and read with one cursor sweep); every
 * value is little-endian, encoded field by field.
 *
 * Block maps come in two kinds, one per catalog (format/store.md §4):
 * fixed blocks keyed by index, each covering index * block size on; and
 * content-defined blocks keyed by their byte offset, each entry holding
 * its length too, a gap between two entries a hole.  Finding the block
 * that holds a byte of the second kind is a seek to the byte minus the
 * longest block and a few steps forward: no block that starts before
 * that can reach the byte.  Every step is one the guard checks first
 * (guard.c: a seek, then nexts), where stepping back would need a move
 * it does not check.
 */
#include <string.h>

#include "dedup.h"
#include "chunk/chunk.h"
#include "common/alloc.h"
#include "common/endian.h"
#include "catalog/db_internal.h"
#include "catalog/ucnt.h"

#define DD_SNAP_VAL_SIZE 80
#define DD_SNAP_VAL_VERSION 1
#define DD_SNAP_VARBLOCK 0x01     /* byte 1: blocks of their own lengths */
#define DD_SNAP_DIGEST2 0x02      /* byte 1: fixed, content digest version 2 */
#define DD_BMAP_KEY_SIZE 16
#define DD_BMAP_VAR_VAL_SIZE (DD_DDT_KEY_SIZE + 4)  /* key, le32 length */
#define DD_PACKS_VAL_SIZE 16
#define DD_PACKS_VAL_VERSION 1

#define DBI(txn, which) ((txn)->tx_db->db_dbi[which])

/* ---- snapshots (format/store.md §3) -------------------------------------*/

static void dd_snap_encode(uint8_t out[DD_SNAP_VAL_SIZE], const dd_snap_rec *r,
			   bool var)
{
	memset(out, 0, DD_SNAP_VAL_SIZE);
	out[0] = DD_SNAP_VAL_VERSION;
	out[1] = var ? DD_SNAP_VARBLOCK
		     : r->sr_digest_version == DD_DIGEST_V2 ? DD_SNAP_DIGEST2 : 0;
	dd_put_le32(out + 4, r->sr_block_size);
	dd_put_le64(out + 8, r->sr_id);
	dd_put_le64(out + 16, r->sr_size);
	dd_put_le64(out + 24, r->sr_blocks);
	dd_put_le64(out + 32, r->sr_zero_blocks);
	dd_put_le64(out + 40, (uint64_t)r->sr_ctime);
	memcpy(out + 48, r->sr_digest, DD_HASH_SIZE);
}

/* A record of a content-defined catalog (var) has byte 1 set, and any
 * number of blocks its size allows (a run of holes is one); one of fixed
 * blocks has flags 0 or DD_SNAP_DIGEST2, the digest's version. */
static int dd_snap_decode(dd_err *err, const MDB_val *v, bool var,
			  dd_snap_rec *r)
{
	const uint8_t *p = v->mv_data;

	if (v->mv_size != DD_SNAP_VAL_SIZE || p[0] != DD_SNAP_VAL_VERSION ||
	    (var ? p[1] != DD_SNAP_VARBLOCK : p[1] & ~DD_SNAP_DIGEST2))
		return dd_db_damage(err,
				    "snapshot record of %zu bytes, version %u",
				    v->mv_size, v->mv_size ? p[0] : 0);
	r->sr_block_size = dd_get_le32(p + 4);
	r->sr_id = dd_get_le64(p + 8);
	r->sr_size = dd_get_le64(p + 16);
	r->sr_blocks = dd_get_le64(p + 24);
	r->sr_zero_blocks = dd_get_le64(p + 32);
	r->sr_ctime = (int64_t)dd_get_le64(p + 40);
	memcpy(r->sr_digest, p + 48, DD_HASH_SIZE);
	r->sr_digest_version = p[1] & DD_SNAP_DIGEST2 && !var ? DD_DIGEST_V2
							      : DD_DIGEST_V1;
	if (r->sr_block_size == 0 || r->sr_zero_blocks > r->sr_blocks ||
	    (var ? r->sr_blocks > r->sr_size || (r->sr_size && !r->sr_blocks)
		 : r->sr_blocks != dd_block_count(r->sr_size,
						  r->sr_block_size)))
		return dd_db_damage(err,
				    "snapshot record sizes disagree");
	return 0;
}

int dd_snap_get(dd_txn *txn, dd_err *err, const char *name, dd_snap_rec *out)
{
	MDB_val k = {strlen(name), (void *)name}, v;
	int rc = dd_table_get(txn, err, DD_DBI_SNAP, &k, &v, "snapshot get");

	return rc ? rc : dd_snap_decode(err, &v, dd_db_varblock(txn->tx_db) != 0,
					out);
}

int dd_snap_put(dd_txn *txn, dd_err *err, const char *name,
		const dd_snap_rec *rec)
{
	uint8_t buf[DD_SNAP_VAL_SIZE];
	MDB_val k = {strlen(name), (void *)name}, v = {sizeof(buf), buf};

	dd_snap_encode(buf, rec, dd_db_varblock(txn->tx_db) != 0);
	return dd_table_put(txn, err, DD_DBI_SNAP, &k, &v, 0, "snapshot put");
}

int dd_snap_del(dd_txn *txn, dd_err *err, const char *name)
{
	MDB_val k = {strlen(name), (void *)name};

	return dd_table_del(txn, err, DD_DBI_SNAP, &k, "snapshot del");
}

struct dd_snap_walk_ctx {
	dd_snap_walk_fn sw_fn;
	void *sw_ctx;
	bool sw_var;
};

static int dd_snap_walk_one(void *arg, dd_err *err, const MDB_val *k,
			    const MDB_val *v)
{
	struct dd_snap_walk_ctx *sw = arg;
	char name[DD_NAME_MAX + 1];
	dd_snap_rec rec;
	int rc;

	if (k->mv_size == 0 || k->mv_size > DD_NAME_MAX ||
	    memchr(k->mv_data, 0, k->mv_size))
		return dd_db_damage(err, "snapshot name of %zu bytes",
				    k->mv_size);
	memcpy(name, k->mv_data, k->mv_size);
	name[k->mv_size] = 0;
	rc = dd_snap_decode(err, v, sw->sw_var, &rec);
	return rc ? rc : sw->sw_fn(sw->sw_ctx, name, &rec);
}

int dd_snap_walk(dd_txn *txn, dd_err *err, dd_snap_walk_fn fn, void *ctx)
{
	struct dd_snap_walk_ctx sw = {fn, ctx, dd_db_varblock(txn->tx_db) != 0};

	return dd_table_walk(txn, err, DD_DBI_SNAP, dd_snap_walk_one, &sw,
			     "snapshot walk");
}

/* ---- block maps (format/store.md §4) -------------------------------------*/

struct dd_bmap_cur {
	dd_txn *bc_txn;
	MDB_cursor *bc_cur;
	uint64_t bc_id;
	uint32_t bc_var_max;         /* the catalog's, at open */
	bool bc_moved;               /* by a seek or a next */
	bool bc_at;                  /* bc_key is where the cursor is */
	uint8_t bc_key[DD_BMAP_KEY_SIZE];
	uint32_t bc_len;             /* of the entry last returned */
	struct dd_guard_cur bc_guard;
};

void dd_db_set_varblock(dd_db *db, uint32_t max_len)
{
	atomic_store(&db->db_var_max, max_len);
}

uint32_t dd_db_varblock(const dd_db *db)
{
	return atomic_load(&db->db_var_max);
}

static void dd_bmap_key(uint8_t out[DD_BMAP_KEY_SIZE], uint64_t id,
			uint64_t idx)
{
	dd_put_be64(out, id);
	dd_put_be64(out + 8, idx);
}

/* Decodes one bmap pair of a catalog whose blocks are at most var_max
 * bytes (0: fixed, no length); returns 1 if it belongs to id, 0 if not. */
static int dd_bmap_decode(dd_err *err, const MDB_val *k, const MDB_val *v,
			  uint32_t var_max, uint64_t id, uint64_t *pos,
			  uint32_t *len, dd_ddt_key *key)
{
	const uint8_t *vp = v->mv_data;

	if (k->mv_size != DD_BMAP_KEY_SIZE ||
	    v->mv_size != (var_max ? DD_BMAP_VAR_VAL_SIZE : DD_DDT_KEY_SIZE))
		return dd_db_damage(err,
				    "block map entry of %zu/%zu bytes",
				    k->mv_size, v->mv_size);
	if (dd_get_be64(k->mv_data) != id)
		return 0;
	*pos = dd_get_be64((const uint8_t *)k->mv_data + 8);
	*len = var_max ? dd_get_le32(vp + DD_DDT_KEY_SIZE) : 0;
	if (var_max && (*len == 0 || *len > var_max ||
			*pos > UINT64_MAX - *len))
		return dd_db_damage(err, "block map entry at byte %llu of "
				    "%u bytes", (unsigned long long)*pos, *len);
	memcpy(key->dk_hash, vp, DD_HASH_SIZE);
	key->dk_variant = vp[DD_HASH_SIZE];
	return 1;
}

int dd_bmap_append(dd_txn *txn, dd_err *err, uint64_t id, uint64_t pos,
		   uint32_t len, const dd_ddt_key *key)
{
	uint32_t var_max = dd_db_varblock(txn->tx_db);
	uint8_t kb[DD_BMAP_KEY_SIZE], vb[DD_BMAP_VAR_VAL_SIZE];
	MDB_val k = {sizeof(kb), kb};
	MDB_val v = {var_max ? DD_BMAP_VAR_VAL_SIZE : DD_DDT_KEY_SIZE, vb};
	dd_bmap_cur *cur = NULL;
	dd_ddt_key found;
	uint64_t at = 0;
	int rc;

	if (var_max && (len == 0 || len > var_max))
		return dd_err_set(err, DD_EINVAL, "block map entry of %u "
				  "bytes (blocks are 1 to %u)", len, var_max);
	dd_bmap_key(kb, id, pos);
	memcpy(vb, key->dk_hash, DD_HASH_SIZE);
	vb[DD_HASH_SIZE] = key->dk_variant;
	dd_put_le32(vb + DD_DDT_KEY_SIZE, len);
	/* the last key of the table: one cheap append (a lone writer's
	 * case, and the newest snapshot's) */
	rc = dd_table_put(txn, err, DD_DBI_BMAP, &k, &v, MDB_APPEND,
			  "block map put");
	if (rc != DD_EEXIST)
		return rc;
	/* other snapshots' maps grew past this one (writers side by side):
	 * an ordinary put, once no entry of this snapshot is at pos or
	 * above -- within one map the positions only increase */
	rc = dd_bmap_open(txn, err, id, &cur);
	if (!rc)
		rc = dd_bmap_seek(cur, err, pos, &at, &found);
	dd_bmap_close(cur);
	if (rc == 1)
		return dd_db_damage(err,
				    "block map append out of order (id %llu, "
				    "%s %llu after %llu)",
				    (unsigned long long)id,
				    var_max ? "byte" : "block",
				    (unsigned long long)pos,
				    (unsigned long long)at);
	if (rc < 0)
		return rc;
	return dd_table_put(txn, err, DD_DBI_BMAP, &k, &v, 0, "block map put");
}

int dd_bmap_append_block(dd_txn *txn, dd_err *err, uint64_t id, uint64_t idx,
			 uint64_t off, uint32_t len, const dd_ddt_key *key)
{
	return dd_bmap_append(txn, err, id,
			      dd_db_varblock(txn->tx_db) ? off : idx, len, key);
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
	bc->bc_txn = txn;
	bc->bc_id = id;
	bc->bc_var_max = dd_db_varblock(txn->tx_db);
	dd_guard_cur_init(&bc->bc_guard, DD_DBI_BMAP);
	*out = bc;
	return 0;
}

/* Where a move of the cursor (rc: dd_cursor_seek's or _next's) left
 * it. */
static int dd_bmap_at(dd_bmap_cur *bc, dd_err *err, int rc, const MDB_val *k,
		      const MDB_val *v, uint64_t *idx_out, dd_ddt_key *key)
{
	bc->bc_moved = true;
	bc->bc_at = rc == 1 && k->mv_size == DD_BMAP_KEY_SIZE;
	if (bc->bc_at)
		memcpy(bc->bc_key, k->mv_data, DD_BMAP_KEY_SIZE);
	if (rc != 1)
		return rc;
	return dd_bmap_decode(err, k, v, bc->bc_var_max, bc->bc_id, idx_out,
			      &bc->bc_len, key);
}

int dd_bmap_seek(dd_bmap_cur *bc, dd_err *err, uint64_t idx,
		 uint64_t *idx_out, dd_ddt_key *key)
{
	uint8_t kb[DD_BMAP_KEY_SIZE];
	MDB_val k, v;
	int rc;

	dd_bmap_key(kb, bc->bc_id, idx);
	rc = dd_cursor_seek(bc->bc_txn, err, bc->bc_cur, &bc->bc_guard, kb,
			    sizeof(kb), &k, &v, "block map read");
	return dd_bmap_at(bc, err, rc, &k, &v, idx_out, key);
}

int dd_bmap_next(dd_bmap_cur *bc, dd_err *err, uint64_t *idx_out,
		 dd_ddt_key *key)
{
	MDB_val k = {sizeof(bc->bc_key), bc->bc_key}, v;
	int rc;

	/* MDB_NEXT of a cursor that is nowhere yet is MDB_FIRST; past the
	 * last entry (or one it could not read) it stays there */
	if (bc->bc_at)
		rc = dd_cursor_next(bc->bc_txn, err, bc->bc_cur, &bc->bc_guard,
				    &k, &v, "block map read");
	else if (!bc->bc_moved)
		rc = dd_cursor_seek(bc->bc_txn, err, bc->bc_cur, &bc->bc_guard,
				    NULL, 0, &k, &v, "block map read");
	else
		return 0;
	return dd_bmap_at(bc, err, rc, &k, &v, idx_out, key);
}

uint32_t dd_bmap_len(const dd_bmap_cur *bc)
{
	return bc->bc_len;
}

int dd_bmap_find(dd_bmap_cur *bc, dd_err *err, uint64_t off,
		 uint64_t *off_out, dd_ddt_key *key)
{
	uint64_t from = off >= bc->bc_var_max ? off - bc->bc_var_max + 1 : 0;
	int rc;

	if (!bc->bc_var_max)
		return dd_err_set(err, DD_EINVAL, "dd_bmap_find: a map of "
				  "fixed blocks");
	/* no block that starts before `from` reaches off; of those after
	 * it, each step passes one that ends before off */
	for (rc = dd_bmap_seek(bc, err, from, off_out, key);
	     rc == 1 && *off_out + bc->bc_len <= off;
	     rc = dd_bmap_next(bc, err, off_out, key))
		;
	return rc;
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

		if (!r)
			r = dd_guard_key(txn, err, DD_DBI_BMAP, bc->bc_key,
					 sizeof(bc->bc_key), DD_GUARD_DEL);
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

struct dd_bmap_walk_ctx {
	dd_bmap_walk_fn bw_fn;
	void *bw_ctx;
	uint32_t bw_var_max;
};

static int dd_bmap_walk_one(void *arg, dd_err *err, const MDB_val *k,
			    const MDB_val *v)
{
	struct dd_bmap_walk_ctx *bw = arg;
	uint64_t id = k->mv_size == DD_BMAP_KEY_SIZE ? dd_get_be64(k->mv_data)
						     : 0, idx = 0;
	uint32_t len;
	dd_ddt_key key;
	int rc = dd_bmap_decode(err, k, v, bw->bw_var_max, id, &idx, &len,
				&key);

	return rc == 1 ? bw->bw_fn(bw->bw_ctx, id, idx, &key) : rc;
}

int dd_bmap_walk_all(dd_txn *txn, dd_err *err, dd_bmap_walk_fn fn, void *ctx)
{
	struct dd_bmap_walk_ctx bw = {fn, ctx, dd_db_varblock(txn->tx_db)};

	return dd_table_walk(txn, err, DD_DBI_BMAP, dd_bmap_walk_one, &bw,
			     "block map walk");
}

/* ---- pending writers -----------------------------------------------------*/

int dd_pend_put_state(dd_txn *txn, dd_err *err, uint64_t id, const char *name,
		      const void *state, size_t len)
{
	uint8_t kb[8], vb[DD_NAME_MAX + 1 + DD_PEND_STATE_MAX];
	size_t nlen = strlen(name);
	MDB_val k = {8, kb}, v = {nlen + (len ? 1 + len : 0), vb};

	if (nlen == 0 || nlen > DD_NAME_MAX || len > DD_PEND_STATE_MAX)
		return dd_err_set(err, DD_EINVAL, "pending record too large");
	dd_put_be64(kb, id);
	memcpy(vb, name, nlen);
	if (len) {
		vb[nlen] = 0;
		memcpy(vb + nlen + 1, state, len);
	}
	return dd_table_put(txn, err, DD_DBI_PEND, &k, &v, 0, "pending put");
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
		return dd_db_damage(err, "pending record damaged");
	*id = dd_get_be64(k->mv_data);
	nul = memchr(p, 0, v->mv_size);
	nlen = nul ? (size_t)(nul - p) : v->mv_size;
	if (nlen == 0 || nlen > DD_NAME_MAX ||
	    (nul && v->mv_size - nlen - 1 > DD_PEND_STATE_MAX))
		return dd_db_damage(err, "pending record damaged");
	memcpy(rec->pr_name, p, nlen);
	rec->pr_name[nlen] = 0;
	rec->pr_state_len = nul ? v->mv_size - nlen - 1 : 0;
	memcpy(rec->pr_state, p + nlen + (nul ? 1 : 0), rec->pr_state_len);
	return 0;
}

struct dd_pend_walk_ctx {
	dd_pend_walk_fn pw_fn;
	void *pw_ctx;
};

static int dd_pend_walk_one(void *arg, dd_err *err, const MDB_val *k,
			    const MDB_val *v)
{
	struct dd_pend_walk_ctx *pw = arg;
	dd_pend_rec rec;
	uint64_t id = 0;
	int rc = dd_pend_decode(err, k, v, &id, &rec);

	return rc ? rc : pw->pw_fn(pw->pw_ctx, id, &rec);
}

int dd_pend_walk(dd_txn *txn, dd_err *err, dd_pend_walk_fn fn, void *ctx)
{
	struct dd_pend_walk_ctx pw = {fn, ctx};

	return dd_table_walk(txn, err, DD_DBI_PEND, dd_pend_walk_one, &pw,
			     "pending walk");
}

int dd_pend_del(dd_txn *txn, dd_err *err, uint64_t id)
{
	uint8_t kb[8];
	MDB_val k = {8, kb};
	int rc;

	dd_put_be64(kb, id);
	rc = dd_table_del(txn, err, DD_DBI_PEND, &k, "pending del");
	return rc == DD_ENOENT ? 0 : rc;
}

/* Stops the walk at the first entry: 1 with its id. */
static int dd_pend_first_one(void *arg, dd_err *err, const MDB_val *k,
			     const MDB_val *v)
{
	(void)v;
	if (k->mv_size != 8)
		return dd_db_damage(err, "pending key of %zu bytes",
				    k->mv_size);
	*(uint64_t *)arg = dd_get_be64(k->mv_data);
	return 1;
}

int dd_pend_first(dd_txn *txn, dd_err *err, uint64_t *id)
{
	return dd_table_walk(txn, err, DD_DBI_PEND, dd_pend_first_one, id,
			     "pending read");
}

/* ---- lookups without an index ---------------------------------------------*/

struct dd_find {
	uint64_t fd_id;
	char *fd_name_out;
	dd_snap_rec *fd_rec;
};

static int dd_find_id(void *arg, const char *name, const dd_snap_rec *rec)
{
	struct dd_find *f = arg;

	if (rec->sr_id != f->fd_id)
		return 0;
	strcpy(f->fd_name_out, name);
	*f->fd_rec = *rec;
	return 1;
}

/* The catalog snapshot with this id (a walk: used after a crash only). */
int dd_snap_find_id(dd_txn *txn, dd_err *err, uint64_t id,
			   char name[DD_NAME_MAX + 1], dd_snap_rec *rec)
{
	struct dd_find f = {.fd_id = id, .fd_name_out = name, .fd_rec = rec};
	int rc = dd_snap_walk(txn, err, dd_find_id, &f);

	return rc == 1 ? 0 : rc ? rc : DD_ENOENT;
}

/* ---- dropping a snapshot's references ------------------------------------*/

/* Deleting a snapshot and rolling back a killed writer are the same
 * operation (dd_snap_drop_refs): each block-map entry gives back one
 * reference, and the map is removed.  Blocks whose count reaches 0 stay in
 * their pack until gc (format/ddt.md §1).  It is the only decrement of a
 * reference count, so it keeps invariant U (ucnt.h): the map's own
 * uncounted positions give nothing back, and an entry it would take to 0
 * that another map's uncounted position names keeps its count, which that
 * position's reference becomes (its bit cleared) -- no write at all. */
struct dd_drop_ctx {
	dd_txn *dc_txn;
	dd_err *dc_err;
	dd_bmap_counted_fn dc_counted;
	void *dc_ctx;
	uint64_t dc_id;
	dd_ucnt_set dc_own;       /* the map's uncounted positions */
	dd_ucnt_set dc_others;    /* every other map's */
	dd_hmap *dc_index;        /* dc_others' first position of each key,
				     built at the first count about to
				     reach 0 */
};

/* The count of key, at 1, is about to reach 0: does an uncounted
 * position of another map take it over? */
static int dd_drop_take(struct dd_drop_ctx *dc, const dd_ddt_key *key,
			bool *taken)
{
	int rc = 0;

	*taken = false;
	if (!dc->dc_others.us_n)
		return 0;
	if (!dc->dc_index)
		rc = dd_ucnt_index(dc->dc_txn, dc->dc_err, &dc->dc_others,
				   &dc->dc_index);
	return rc ? rc : dd_ucnt_index_take(dc->dc_index, dc->dc_err,
					    &dc->dc_others, key, taken);
}

static int dd_drop_one(void *arg, uint64_t idx, const dd_ddt_key *key)
{
	struct dd_drop_ctx *dc = arg;
	dd_ddt_ent ent;
	bool taken;
	int rc;

	if (dc->dc_counted && !dc->dc_counted(dc->dc_ctx, idx, key))
		return 0;    /* its reference was never counted */
	if (dd_ucnt_has(&dc->dc_own, dc->dc_id, idx))
		return 0;    /* nor this one's */
	rc = dd_ddt_get(dc->dc_txn, dc->dc_err, key, &ent);

	if (rc == DD_ENOENT)
		return dd_err_set(dc->dc_err, DD_ECORRUPT,
				  "block %llu refers to a block missing from "
				  "the ddt", (unsigned long long)idx);
	if (rc)
		return rc;
	if (ent.de_refcnt == 0)
		return dd_err_set(dc->dc_err, DD_ECORRUPT,
				  "ddt reference count underflow");
	if (ent.de_refcnt == 1) {
		rc = dd_drop_take(dc, key, &taken);
		if (rc || taken)
			return rc;
	}
	/* the last reference: record when, for gc (format/ddt.md §1) */
	if (--ent.de_refcnt == 0)
		ent.de_dead_since = dd_txn_id(dc->dc_txn);
	return dd_ddt_put(dc->dc_txn, dc->dc_err, key, &ent);
}

/* Moves every uncounted row of the map out of dc_others into dc_own. */
static int dd_drop_split(struct dd_drop_ctx *dc)
{
	dd_ucnt_set *all = &dc->dc_others;
	size_t n = 0;

	dc->dc_own.us_row = dd_calloc(all->us_n, sizeof(*dc->dc_own.us_row));
	if (!dc->dc_own.us_row)
		return dd_err_set(dc->dc_err, DD_ENOMEM, "out of memory");
	for (size_t i = 0; i < all->us_n; i++) {
		dd_ucnt_row *r = &all->us_row[i];

		if (r->ur_id == dc->dc_id)
			dc->dc_own.us_row[dc->dc_own.us_n++] = *r;
		else
			all->us_row[n++] = *r;
	}
	all->us_n = n;
	return 0;
}

int dd_snap_drop_refs_if(dd_txn *txn, dd_err *err, uint64_t id,
			 dd_bmap_counted_fn counted, void *ctx)
{
	struct dd_drop_ctx dc = {txn, err, counted, ctx, id, {0}, {0}, NULL};
	int rc = dd_ucnt_load(txn, err, 0, &dc.dc_others);
	bool any = dc.dc_others.us_n;

	if (!rc && any)
		rc = dd_drop_split(&dc);
	if (!rc)
		rc = dd_bmap_drop(txn, err, id, dd_drop_one, &dc);
	if (!rc)
		rc = dd_ucnt_drop(txn, err, &dc.dc_own);
	if (!rc)   /* the bits dd_drop_take cleared */
		rc = dd_ucnt_store(txn, err, &dc.dc_others);
	if (!rc && any)
		rc = dd_ucnt_settle(txn, err, &dc.dc_others);
	dd_hmap_free(dc.dc_index);
	dd_ucnt_free(&dc.dc_own);
	dd_ucnt_free(&dc.dc_others);
	return rc;
}

int dd_snap_drop_refs(dd_txn *txn, dd_err *err, uint64_t id)
{
	return dd_snap_drop_refs_if(txn, err, id, NULL, NULL);
}

/* ---- packs (format/store.md §5) ------------------------------------------*/

#define DD_PACKS_DOOMED 0x01

static void dd_packs_key(uint8_t kb[4], uint32_t id)
{
	dd_put_be32(kb, id);
}

/* Decodes a packs value: *flags and the u64 (end, or doomed-since). */
static int dd_packs_decode(dd_err *err, uint32_t id, const MDB_val *v,
			   uint8_t *flags, uint64_t *val)
{
	const uint8_t *p = v->mv_data;

	if (v->mv_size != DD_PACKS_VAL_SIZE || p[0] != DD_PACKS_VAL_VERSION ||
	    (p[1] & ~DD_PACKS_DOOMED))
		return dd_db_damage(err, "pack record %u damaged", id);
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
	rc = dd_table_get(txn, err, DD_DBI_PACKS, &k, &v, "packs get");
	if (rc)
		return rc;
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

	dd_packs_key(kb, id);
	dd_put_le64(vb + 8, val);
	return dd_table_put(txn, err, DD_DBI_PACKS, &k, &v, 0, "packs put");
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
	rc = dd_table_del(txn, err, DD_DBI_PACKS, &k, "packs del");
	return rc == DD_ENOENT ? 0 : rc;
}

struct dd_packs_walk_ctx {
	bool pw_doomed;          /* walk the doomed records, not the live */
	int (*pw_fn)(void *, uint32_t, uint64_t);
	void *pw_ctx;
};

static int dd_packs_walk_one(void *arg, dd_err *err, const MDB_val *k,
			     const MDB_val *v)
{
	struct dd_packs_walk_ctx *pw = arg;
	const uint8_t *kp = k->mv_data;
	uint32_t id;
	uint64_t val = 0;
	uint8_t flags = 0;
	int rc;

	if (k->mv_size != 4)
		return dd_db_damage(err, "pack record damaged");
	id = dd_get_be32(kp);
	rc = dd_packs_decode(err, id, v, &flags, &val);
	if (rc || !!(flags & DD_PACKS_DOOMED) != pw->pw_doomed)
		return rc;
	return pw->pw_fn(pw->pw_ctx, id, val);
}

/* Walks every pack record; fn gets the live ones or the doomed ones. */
static int dd_packs_walk_all(dd_txn *txn, dd_err *err, bool doomed,
			     int (*fn)(void *, uint32_t, uint64_t), void *ctx)
{
	struct dd_packs_walk_ctx pw = {doomed, fn, ctx};

	return dd_table_walk(txn, err, DD_DBI_PACKS, dd_packs_walk_one, &pw,
			     "packs walk");
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
