/*
 * ddt.c -- the dedup table: block key -> where the block lives.
 *
 * Key (33 bytes): SHA-256 of the block's logical bytes, then a variant
 * byte.  The variant is 0 except in verify mode, when two different blocks
 * share a hash: the second is stored apart under variant 1, and so on
 * (format/ddt.md §2).  Value (32 bytes, little-endian, field by field):
 * pack, offset, sizes, codec and the reference count (§3).
 *
 * An entry's lifetime: created by a writer with refcount 1 when a block is
 * first stored; each block-map reference adds 1; deleting a snapshot (or
 * rolling back a crashed writer) subtracts 1 per reference; at 0 the entry
 * stays until gc removes it with its pack bytes.  Random hash keys leave
 * LMDB pages about half full, so gc rewrites the table in key order into
 * the other of ddt0/ddt1 (MDB_APPEND: full pages) -- §4.
 *
 * A large flush appends its new entries to a sorted run at the table's
 * end instead (ddt_run.c, §5): every operation here finds a key in the
 * part it is in, and walks merge the parts.
 */
#include <stdbool.h>
#include <string.h>

#include "dedup.h"
#include "common/endian.h"
#include "catalog/db_internal.h"

#define DD_DDT_VAL_VERSION 1
#define DD_DDE_KNOWN_FLAGS (DD_DDE_PENDING | DD_DDE_MISSING | DD_DDE_DAMAGED)

static void dd_ddt_key_encode(uint8_t out[DD_DDT_KEY_SIZE],
			      const dd_ddt_key *key)
{
	memcpy(out, key->dk_hash, DD_HASH_SIZE);
	out[DD_HASH_SIZE] = key->dk_variant;
}

void dd_ddt_key_flat(const dd_ddt_key *key, uint8_t out[DD_HASH_SIZE])
{
	uint8_t buf[DD_DDT_KEY_SIZE];

	if (key->dk_variant == 0) {
		memcpy(out, key->dk_hash, DD_HASH_SIZE);
		return;
	}
	dd_ddt_key_encode(buf, key);
	dd_sha256(buf, sizeof(buf), out);
}

static int dd_ddt_key_decode(dd_err *err, const MDB_val *k, dd_ddt_key *out)
{
	if (k->mv_size != DD_DDT_KEY_SIZE)
		return dd_db_damage(err,
				    "ddt key of %zu bytes, expected %d",
				    k->mv_size, DD_DDT_KEY_SIZE);
	memcpy(out->dk_hash, k->mv_data, DD_HASH_SIZE);
	out->dk_variant = ((const uint8_t *)k->mv_data)[DD_HASH_SIZE];
	return 0;
}

static void dd_ddt_val_encode(uint8_t out[DD_DDT_VAL_SIZE],
			      const dd_ddt_ent *e)
{
	out[0] = DD_DDT_VAL_VERSION;
	out[1] = e->de_codec;
	dd_put_le16(out + 2, e->de_flags);
	dd_put_le32(out + 4, e->de_pack);
	dd_put_le64(out + 8, e->de_offset);
	dd_put_le32(out + 16, e->de_psize);
	dd_put_le32(out + 20, e->de_lsize);
	/* format/ddt.md §3: a dead entry's count field says since when */
	dd_put_le64(out + 24, e->de_refcnt ? e->de_refcnt
			      : e->de_dead_since ? DD_DDT_DEAD | e->de_dead_since
						 : 0);
}

/* format/ddt.md §3: a value that fails these checks is damage. */
static int dd_ddt_val_decode(dd_err *err, const MDB_val *v, dd_ddt_ent *e)
{
	const uint8_t *p = v->mv_data;

	if (v->mv_size != DD_DDT_VAL_SIZE)
		return dd_db_damage(err,
				    "ddt value of %zu bytes, expected %d",
				    v->mv_size, DD_DDT_VAL_SIZE);
	if (p[0] != DD_DDT_VAL_VERSION)
		return dd_err_set(err, p[0] > DD_DDT_VAL_VERSION ? DD_EVERSION
								  : DD_ECORRUPT,
				  "ddt value version %u, this build reads %d",
				  p[0], DD_DDT_VAL_VERSION);
	e->de_codec = p[1];
	e->de_flags = dd_get_le16(p + 2);
	e->de_pack = dd_get_le32(p + 4);
	e->de_offset = dd_get_le64(p + 8);
	e->de_psize = dd_get_le32(p + 16);
	e->de_lsize = dd_get_le32(p + 20);
	e->de_refcnt = dd_get_le64(p + 24);
	e->de_dead_since = 0;
	if (e->de_refcnt & DD_DDT_DEAD) {
		e->de_dead_since = e->de_refcnt & ~DD_DDT_DEAD;
		e->de_refcnt = 0;
	}
	if ((e->de_flags & ~DD_DDE_KNOWN_FLAGS) || e->de_codec > 1 ||
	    e->de_lsize == 0 || e->de_lsize > DD_BLOCK_SIZE_MAX ||
	    e->de_psize > e->de_lsize ||
	    ((e->de_flags & DD_DDE_MISSING) &&
	     ((e->de_flags & DD_DDE_DAMAGED) || e->de_pack || e->de_offset ||
	      e->de_psize || e->de_codec)))
		return dd_db_damage(err,
				    "ddt value out of range (flags %#x, codec %u,"
				    " lsize %u, psize %u)", e->de_flags,
				    e->de_codec, e->de_lsize, e->de_psize);
	return 0;
}

bool dd_ddt_ent_flagged(const dd_ddt_ent *e)
{
	return (e->de_flags & (DD_DDE_MISSING | DD_DDE_DAMAGED)) != 0;
}

/* Every write of an entry passes here: a flagged one withdraws the
 * unflagged claim at this transaction's commit (dd_ddt_txn_commit). */
static void dd_ddt_note(dd_txn *txn, const dd_ddt_ent *e)
{
	if (dd_ddt_ent_flagged(e))
		txn->tx_ddt_flagged = true;
}

/* The guard's name for the live table, or for the other one. */
static int dd_ddt_tree(const dd_txn *txn, bool live)
{
	return (txn->tx_ddt_which ^ !live) ? DD_DBI_DDT1 : DD_DBI_DDT0;
}

const char *dd_ddt_live_table(const dd_txn *txn)
{
	return dd_db_names[dd_ddt_tree(txn, true)];
}

int dd_ddt_get_past(dd_txn *txn, dd_err *err, const dd_ddt_key *key,
		    dd_ddt_ent *out, uint8_t passed[DD_DDT_PART_KEY_MAX],
		    size_t *passed_len)
{
	uint8_t kb[DD_DDT_KEY_SIZE], rk[DD_RUN_KEY_SIZE];
	size_t rklen;
	MDB_val v;
	int rc;

	dd_ddt_key_encode(kb, key);
	rc = dd_ddt_locate(txn, err, dd_ddt_tree(txn, true), kb, NULL, rk,
			   &rklen, &v, passed, passed_len);
	if (rc)
		return rc;
	return dd_ddt_val_decode(err, &v, out);
}

int dd_ddt_get(dd_txn *txn, dd_err *err, const dd_ddt_key *key,
	       dd_ddt_ent *out)
{
	return dd_ddt_get_past(txn, err, key, out, NULL, NULL);
}

/* Overwrites key's entry in the part it is in, or adds it to main. */
int dd_ddt_put(dd_txn *txn, dd_err *err, const dd_ddt_key *key,
	       const dd_ddt_ent *ent)
{
	uint8_t kb[DD_DDT_KEY_SIZE], vb[DD_DDT_VAL_SIZE], rk[DD_RUN_KEY_SIZE];
	size_t rklen = DD_DDT_KEY_SIZE;
	MDB_val k, v;
	int tree = dd_ddt_tree(txn, true);
	int rc = dd_kf_txn_add(txn, err, key->dk_hash);

	if (rc)
		return rc;
	dd_ddt_key_encode(kb, key);
	/* without runs, main is the only place: LMDB's put finds it */
	rc = txn->tx_ddt_runs ? dd_ddt_locate(txn, err, tree, kb, NULL, rk,
					      &rklen, &v, NULL, NULL)
			      : DD_ENOENT;
	if (rc == DD_ENOENT)
		memcpy(rk, kb, rklen = DD_DDT_KEY_SIZE);
	else if (rc)
		return rc;
	dd_ddt_val_encode(vb, ent);
	dd_ddt_note(txn, ent);
	k = (MDB_val){rklen, rk};
	v = (MDB_val){sizeof(vb), vb};
	return dd_table_put(txn, err, tree, &k, &v, 0, "ddt put");
}

/* The write transaction's cursor on DDT table `tree` (db_internal.h).
 * A flush updates the DDT in key order, and a cursor that stays open
 * finds most keys on the leaf it is on (LMDB's mdb_cursor_set looks
 * there first), where a cursor opened per update descended from the
 * root each time; LMDB keeps an open cursor right through the
 * transaction's own splits and deletes.  The guard still checks every
 * page a descent from the root would read, a superset. */
static int dd_ddt_wcur(dd_txn *txn, dd_err *err, int tree, MDB_cursor **out)
{
	int rc;

	if (!txn->tx_ddt_cur || txn->tx_ddt_cur_tree != tree) {
		/* another table's (gc's compaction): LMDB closes that one too */
		rc = mdb_cursor_open(txn->tx_mdb, txn->tx_db->db_dbi[tree],
				     &txn->tx_ddt_cur);
		if (rc) {
			txn->tx_ddt_cur = NULL;
			return dd_mdb_error(err, rc, "ddt cursor");
		}
		txn->tx_ddt_cur_tree = tree;
	}
	*out = txn->tx_ddt_cur;
	return 0;
}

/* Puts the write txn's cursor at key's entry (DD_ENOENT: none), *out;
 * rk, *rklen the entry's table key (format/ddt.md §5). */
static int dd_ddt_wseek(dd_txn *txn, dd_err *err, const dd_ddt_key *key,
			uint8_t rk[DD_RUN_KEY_SIZE], size_t *rklen,
			MDB_cursor **cur, dd_ddt_ent *out)
{
	uint8_t kb[DD_DDT_KEY_SIZE];
	MDB_val v;
	int rc = dd_ddt_wcur(txn, err, dd_ddt_tree(txn, true), cur);

	if (rc)
		return rc;
	dd_ddt_key_encode(kb, key);
	/* the guard checks the pages each descent reads, and a put
	 * rewrites */
	rc = dd_ddt_locate(txn, err, dd_ddt_tree(txn, true), kb, *cur, rk,
			   rklen, &v, NULL, NULL);
	return rc ? rc : dd_ddt_val_decode(err, &v, out);
}

int dd_ddt_get_w(dd_txn *txn, dd_err *err, const dd_ddt_key *key,
		 dd_ddt_ent *out)
{
	uint8_t rk[DD_RUN_KEY_SIZE];
	size_t rklen;
	MDB_cursor *cur = NULL;

	return dd_ddt_wseek(txn, err, key, rk, &rklen, &cur, out);
}

int dd_ddt_add_refs(dd_txn *txn, dd_err *err, const dd_ddt_key *key,
		    uint64_t n, dd_ddt_ent *out)
{
	uint8_t rk[DD_RUN_KEY_SIZE], vb[DD_DDT_VAL_SIZE];
	size_t rklen;
	MDB_val k, v;
	MDB_cursor *cur = NULL;
	int rc = dd_ddt_wseek(txn, err, key, rk, &rklen, &cur, out);

	if (rc)
		return rc;
	if (out->de_flags & DD_DDE_MISSING)
		return DD_ENOENT;        /* no bytes to reference */
	if (out->de_refcnt > (DD_DDT_DEAD - 1) - n)
		return dd_db_damage(err, "ddt reference count %llu cannot "
				    "take %llu more",
				    (unsigned long long)out->de_refcnt,
				    (unsigned long long)n);
	if (out->de_refcnt == 0)
		out->de_dead_since = 0;  /* alive again */
	out->de_refcnt += n;
	dd_ddt_val_encode(vb, out);
	dd_ddt_note(txn, out);
	k = (MDB_val){rklen, rk};        /* not the page's copy it points at */
	v = (MDB_val){sizeof(vb), vb};
	/* same size: LMDB rewrites the value in place, no second descent */
	rc = mdb_cursor_put(cur, &k, &v, MDB_CURRENT);
	return rc ? dd_mdb_error(err, rc, "ddt put") : 0;
}

int dd_ddt_find_record(dd_txn *txn, dd_err *err, const uint8_t *hash,
		       uint32_t pack, uint64_t off, dd_ddt_ent *ent)
{
	dd_ddt_key key;

	memcpy(key.dk_hash, hash, DD_HASH_SIZE);
	for (unsigned v = 0; v <= DD_DDT_MAX_VARIANT; v++) {
		int rc;

		key.dk_variant = (uint8_t)v;
		rc = dd_ddt_get(txn, err, &key, ent);
		if (rc)
			return rc;   /* DD_ENOENT: variants end at the first gap */
		if (ent->de_pack == pack && ent->de_offset == off)
			return 0;
	}
	return DD_ENOENT;
}

/* An insert: look says whether key may be in a part already (else the
 * caller knows it is in none, from the key filter, which then has its
 * hash already).  New entries go to a run when the transaction says so
 * (dd_ddt_use_runs), else to the main part. */
static int dd_ddt_insert_as(dd_txn *txn, dd_err *err, const dd_ddt_key *key,
			    const dd_ddt_ent *ent, dd_ddt_ent *old, bool look)
{
	uint8_t kb[DD_DDT_KEY_SIZE], vb[DD_DDT_VAL_SIZE];
	MDB_val k = {sizeof(kb), kb}, v = {sizeof(vb), vb};
	MDB_cursor *cur = NULL;
	int tree = dd_ddt_tree(txn, true);
	int rc = look ? dd_kf_txn_add(txn, err, key->dk_hash) : 0;

	/* without runs, main's own insert below is the look */
	if (!rc && look && (txn->tx_ddt_runs || txn->tx_ddt_to_runs)) {
		uint8_t rk[DD_RUN_KEY_SIZE];
		size_t rklen;

		rc = dd_ddt_wseek(txn, err, key, rk, &rklen, &cur, old);
		if (rc == 0)
			return DD_EEXIST;
		if (rc == DD_ENOENT)
			rc = 0;
	}
	if (rc)
		return rc;
	dd_ddt_key_encode(kb, key);
	dd_ddt_val_encode(vb, ent);
	dd_ddt_note(txn, ent);
	if (txn->tx_ddt_to_runs)
		return dd_ddt_run_append(txn, err, kb, vb);
	rc = dd_guard_key(txn, err, tree, kb, sizeof(kb), DD_GUARD_PUT);
	if (!rc)
		rc = dd_ddt_wcur(txn, err, tree, &cur);
	if (rc)
		return rc;
	/* mdb_put's insert, on the transaction's cursor (dd_ddt_wcur) */
	rc = mdb_cursor_put(cur, &k, &v, MDB_NOOVERWRITE);
	if (rc && rc != MDB_KEYEXIST)
		return dd_mdb_error(err, rc, "ddt insert");
	if (!rc)
		return 0;
	/* LMDB pointed v at the entry in place */
	rc = dd_ddt_val_decode(err, &v, old);
	return rc ? rc : DD_EEXIST;
}

int dd_ddt_insert(dd_txn *txn, dd_err *err, const dd_ddt_key *key,
		  const dd_ddt_ent *ent, dd_ddt_ent *old)
{
	return dd_ddt_insert_as(txn, err, key, ent, old, true);
}

int dd_ddt_insert_absent(dd_txn *txn, dd_err *err, const dd_ddt_key *key,
			 const dd_ddt_ent *ent, dd_ddt_ent *old)
{
	return dd_ddt_insert_as(txn, err, key, ent, old, false);
}

void dd_ddt_use_runs(dd_txn *txn, bool on)
{
	txn->tx_ddt_to_runs = on;
}

int dd_ddt_del(dd_txn *txn, dd_err *err, const dd_ddt_key *key)
{
	uint8_t kb[DD_DDT_KEY_SIZE], rk[DD_RUN_KEY_SIZE];
	size_t rklen;
	MDB_val k, v;
	int tree = dd_ddt_tree(txn, true);
	int rc;

	dd_ddt_key_encode(kb, key);
	if (!txn->tx_ddt_runs) {   /* main is the only place */
		k = (MDB_val){sizeof(kb), kb};
		return dd_table_del(txn, err, tree, &k, "ddt del");
	}
	rc = dd_ddt_locate(txn, err, tree, kb, NULL, rk, &rklen, &v, NULL,
			   NULL);
	if (rc)
		return rc;
	k = (MDB_val){rklen, rk};
	return dd_table_del(txn, err, tree, &k, "ddt del");
}

int dd_ddt_count(dd_txn *txn, dd_err *err, uint64_t *n)
{
	MDB_stat st;
	int rc = mdb_stat(txn->tx_mdb, txn->tx_ddt, &st);

	if (rc)
		return dd_mdb_error(err, rc, "lmdb stat");
	*n = st.ms_entries;
	return 0;
}

struct dd_ddt_walk_ctx {
	dd_ddt_walk_fn dw_fn;
	void *dw_ctx;
};

static int dd_ddt_walk_one(void *arg, dd_err *err, const MDB_val *k,
			   const MDB_val *v)
{
	struct dd_ddt_walk_ctx *dw = arg;
	dd_ddt_key key;
	dd_ddt_ent ent;
	int rc = dd_ddt_key_decode(err, k, &key);

	if (!rc)
		rc = dd_ddt_val_decode(err, v, &ent);
	return rc ? rc : dw->dw_fn(dw->dw_ctx, &key, &ent);
}

int dd_ddt_walk(dd_txn *txn, dd_err *err, dd_ddt_walk_fn fn, void *ctx)
{
	struct dd_ddt_walk_ctx dw = {fn, ctx};

	return dd_ddt_parts_walk(txn, err, dd_ddt_tree(txn, true),
				 dd_ddt_walk_one, &dw);
}

int dd_ddt_scan(dd_txn *txn, dd_err *err, dd_ddt_walk_fn fn, void *ctx)
{
	struct dd_ddt_walk_ctx dw = {fn, ctx};

	return dd_ddt_parts_scan(txn, err, dd_ddt_tree(txn, true),
				 dd_ddt_walk_one, &dw);
}

struct dd_compact_ctx {
	dd_txn *cc_txn;
	dd_err *cc_err;
	MDB_cursor *cc_dst;
	bool cc_keep_dead;         /* a fold: every entry goes */
	uint64_t cc_removed;
};

static int dd_compact_one(void *arg, const dd_ddt_key *key,
			  const dd_ddt_ent *ent)
{
	struct dd_compact_ctx *cc = arg;
	uint8_t kb[DD_DDT_KEY_SIZE], vb[DD_DDT_VAL_SIZE];
	MDB_val k = {sizeof(kb), kb}, v = {sizeof(vb), vb};
	int rc;

	if (ent->de_refcnt == 0 && !cc->cc_keep_dead) {
		cc->cc_removed++;
		return 0;
	}
	if (ent->de_flags & DD_DDE_PENDING)
		return dd_db_damage(cc->cc_err,
				    "ddt entry still pending at compaction");
	dd_ddt_key_encode(kb, key);
	dd_ddt_val_encode(vb, ent);
	dd_ddt_note(cc->cc_txn, ent);
	rc = mdb_cursor_put(cc->cc_dst, &k, &v, MDB_APPEND);
	if (rc)
		return dd_mdb_error(cc->cc_err, rc, "ddt compact put");
	return 0;
}

/* Writes every part of the live table (its runs merged in) into the
 * other one in key order, and makes that the live one. */
static int dd_ddt_compact_as(dd_txn *txn, dd_err *err, bool keep_dead,
			     uint64_t *removed)
{
	struct dd_compact_ctx cc = {txn, err, NULL, keep_dead, 0};
	unsigned next = txn->tx_ddt_which ^ 1u;
	int rc;

	if (!txn->tx_write)
		return dd_err_set(err, DD_EINVAL, "ddt compact needs a write txn");
	/* The other table is empty except after a crash mid-compaction, which
	 * never committed; empty it anyway so MDB_APPEND starts clean. */
	rc = dd_guard_table(txn, err, dd_ddt_tree(txn, false));
	if (rc)
		return rc;
	rc = mdb_drop(txn->tx_mdb, txn->tx_ddt_other, 0);
	if (rc)
		return dd_mdb_error(err, rc, "ddt compact drop");
	/* from here the other table holds only pages this txn wrote: its
	 * appends need no guard */
	rc = mdb_cursor_open(txn->tx_mdb, txn->tx_ddt_other, &cc.cc_dst);
	if (rc)
		return dd_mdb_error(err, rc, "ddt compact cursor");
	rc = dd_ddt_walk(txn, err, dd_compact_one, &cc);
	mdb_cursor_close(cc.cc_dst);
	if (rc)
		return rc;
	rc = dd_guard_table(txn, err, dd_ddt_tree(txn, true));
	if (rc)
		return rc;
	rc = mdb_drop(txn->tx_mdb, txn->tx_ddt, 0);
	if (rc)
		return dd_mdb_error(err, rc, "ddt compact drop old");
	rc = dd_meta_put_u64(txn, err, "ddt.live", next);
	if (rc)
		return rc;
	MDB_dbi old = txn->tx_ddt;
	txn->tx_ddt = txn->tx_ddt_other;
	txn->tx_ddt_other = old;
	txn->tx_ddt_which = next;
	if (removed)
		*removed = cc.cc_removed;
	return dd_ddt_runs_folded(txn, err);
}

int dd_ddt_compact(dd_txn *txn, dd_err *err, uint64_t *removed)
{
	return dd_ddt_compact_as(txn, err, false, removed);
}

int dd_ddt_fold(dd_txn *txn, dd_err *err)
{
	return dd_ddt_compact_as(txn, err, true, NULL);
}

/* ---- the unflagged claim (db.h) ---------------------------------------------*/

#define DD_DDT_UNFLAGGED "ddt.unflagged"

/* meta's claim: *v the commit it names (0: withdrawn), *known false when
 * the key is absent (an older catalog, no census yet). */
static int dd_ddt_claim(dd_txn *txn, dd_err *err, uint64_t *v, bool *known)
{
	int rc = dd_meta_get_u64(txn, err, DD_DDT_UNFLAGGED, v);

	*known = rc != DD_ENOENT;
	if (rc == DD_ENOENT) {
		dd_err_clear(err);
		*v = 0;
		return 0;
	}
	return rc;
}

/* The commit txn starts from: a write transaction's id less one, a read
 * transaction's own (LMDB numbers commits one by one). */
static uint64_t dd_ddt_base(const dd_txn *txn)
{
	uint64_t id = (uint64_t)mdb_txn_id(txn->tx_mdb);

	return txn->tx_write ? id - 1 : id;
}

/* Does the claim hold in txn, meta naming commit v?  A flagged write or a
 * census of this transaction decides; else meta must name exactly the
 * commit txn starts from (v 0 is a withdrawn claim, never a commit's id). */
static bool dd_ddt_claim_holds(const dd_txn *txn, uint64_t v)
{
	if (txn->tx_ddt_flagged)
		return false;
	return txn->tx_ddt_census || (v != 0 && v == dd_ddt_base(txn));
}

int dd_ddt_unflagged(dd_txn *txn, dd_err *err, bool *out)
{
	uint64_t v;
	bool known;
	int rc = dd_ddt_claim(txn, err, &v, &known);

	*out = !rc && dd_ddt_claim_holds(txn, v);
	return rc;
}

int dd_ddt_unflagged_known(dd_txn *txn, dd_err *err, bool *out)
{
	uint64_t v;

	return dd_ddt_claim(txn, err, &v, out);
}

int dd_ddt_unflagged_withdrawn(dd_txn *txn, dd_err *err, bool *out)
{
	uint64_t v;
	bool known;
	int rc = dd_ddt_claim(txn, err, &v, &known);

	*out = !rc && known && !dd_ddt_claim_holds(txn, v);
	return rc;
}

void dd_ddt_census_done(dd_txn *txn, uint64_t flagged)
{
	txn->tx_ddt_census = true;
	txn->tx_ddt_flagged = flagged != 0;
}

static int dd_ddt_census_one(void *arg, const dd_ddt_key *key,
			     const dd_ddt_ent *ent)
{
	(void)key;
	*(uint64_t *)arg += dd_ddt_ent_flagged(ent);
	return 0;
}

int dd_ddt_census(dd_txn *txn, dd_err *err, uint64_t *flagged)
{
	uint64_t n = 0;
	int rc;

	if (!txn->tx_write)
		return dd_err_set(err, DD_EINVAL, "ddt census needs a write txn");
	rc = dd_ddt_scan(txn, err, dd_ddt_census_one, &n);
	if (rc)
		return rc;
	dd_ddt_census_done(txn, n);
	if (flagged)
		*flagged = n;
	return 0;
}

int dd_ddt_txn_commit(dd_txn *txn, dd_err *err)
{
	uint64_t v;
	bool known;
	int rc;

	if (!txn->tx_write)
		return 0;
	rc = dd_ddt_claim(txn, err, &v, &known);
	if (rc)
		return rc;
	if (dd_ddt_claim_holds(txn, v))
		return dd_meta_put_u64(txn, err, DD_DDT_UNFLAGGED,
				       (uint64_t)mdb_txn_id(txn->tx_mdb));
	/* withdrawn; an absent claim stays absent, for the census a writer
	 * takes at its start */
	if (known && v != 0)
		return dd_meta_put_u64(txn, err, DD_DDT_UNFLAGGED, 0);
	return 0;
}
