/*
 * replica.c -- reading a snapshot block by block, as stored, for sending.
 *
 * One read transaction for the whole iteration, as a reader has: the
 * block map and the DDT stay consistent with each other.  Each block's
 * record is read with its header checked (CRC, and that it matches the DDT
 * entry: sizes and hash) but the payload is passed on compressed; the
 * receiver decompresses and checks the SHA-256 of every block.
 */
#include <string.h>

#include "common/alloc.h"
#include "store/replica.h"
#include "store/store_internal.h"

struct dd_snap_iter {
	dd_store *it_store;
	dd_txn *it_txn;
	dd_bmap_cur *it_cur;
	dd_scratch it_sc;
	bool it_started;
	uint64_t it_count;
};

int dd_snap_iter_open(dd_snap_iter **out, dd_err *err, dd_store *s,
		      const char *name, dd_replica_snap *info)
{
	dd_snap_iter *it;
	dd_snap_rec rec;
	int rc;

	if (s->st_hash_kind != DD_HASH_SHA256)
		return dd_err_set(err, DD_ENOTSUP,
				  "store is not keyed by SHA-256");
	if (dd_name_check(name))
		return dd_err_set(err, DD_ENAME, "invalid snapshot name");
	it = dd_calloc(1, sizeof(*it));
	if (!it)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	it->it_store = s;
	rc = dd_scratch_init(&it->it_sc, err, s);
	if (!rc)
		rc = dd_txn_begin(s->st_db, err, false, &it->it_txn);
	if (!rc) {
		rc = dd_snap_get(it->it_txn, err, name, &rec);
		if (rc == DD_ENOENT)
			dd_err_set(err, rc, "no snapshot '%s'", name);
	}
	if (!rc)
		rc = dd_bmap_open(it->it_txn, err, rec.sr_id, &it->it_cur);
	if (rc) {
		dd_snap_iter_close(it);
		return rc;
	}
	info->rs_size = rec.sr_size;
	info->rs_blocks = rec.sr_blocks;
	info->rs_block_size = rec.sr_block_size;
	memcpy(info->rs_digest, rec.sr_digest, DD_HASH_SIZE);
	*out = it;
	return 0;
}

int dd_snap_iter_next(dd_snap_iter *it, dd_err *err, uint64_t from,
		      bool with_payload, uint64_t *idx, dd_replica_blk *blk)
{
	dd_ddt_key key;
	dd_ddt_ent ent;
	dd_pack_rec expect, rec;
	dd_pack *p;
	int rc;

	if (!it->it_started) {
		it->it_started = true;
		rc = dd_bmap_seek(it->it_cur, err, from, idx, &key);
	} else {
		rc = dd_bmap_next(it->it_cur, err, idx, &key);
	}
	if (rc <= 0)
		return rc;
	/* a long walk touches the whole DDT: keep RSS bounded (db.h) */
	if ((++it->it_count & 511) == 0)
		dd_db_trim_map(it->it_store->st_db);
	rc = dd_ddt_get(it->it_txn, err, &key, &ent);
	if (rc == DD_ENOENT)
		return dd_err_set(err, DD_ECORRUPT,
				  "block %llu is missing from the ddt",
				  (unsigned long long)*idx);
	if (rc)
		return rc;
	memcpy(blk->rb_hash, key.dk_hash, DD_HASH_SIZE);
	blk->rb_codec = ent.de_codec;
	blk->rb_lsize = ent.de_lsize;
	blk->rb_psize = ent.de_psize;
	blk->rb_payload = NULL;
	if (!with_payload)
		return 1;
	expect = (dd_pack_rec){.pr_codec = ent.de_codec,
			       .pr_lsize = ent.de_lsize,
			       .pr_psize = ent.de_psize};
	memcpy(expect.pr_hash, key.dk_hash, DD_HASH_SIZE);
	rc = dd_store_pack(it->it_store, err, ent.de_pack, &p);
	if (!rc)
		rc = dd_pack_read_rec(p, err, ent.de_offset, &expect, &rec,
				      it->it_sc.sc_rbuf, it->it_sc.sc_rbuf_len);
	if (rc)
		return rc;
	blk->rb_codec = rec.pr_codec;
	blk->rb_payload = it->it_sc.sc_rbuf + DD_PACK_REC_HDR_SIZE;
	return 1;
}

void dd_snap_iter_close(dd_snap_iter *it)
{
	if (!it)
		return;
	dd_bmap_close(it->it_cur);
	dd_txn_abort(it->it_txn);
	dd_scratch_fini(&it->it_sc);
	dd_free(it);
}
