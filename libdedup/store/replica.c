/*
 * replica.c -- reading a snapshot block by block, as stored, for sending.
 *
 * One read transaction for the whole iteration, as a reader has: the
 * block map and the DDT stay consistent with each other.  Walking gives
 * each block's hash from the block map alone; only a block the sender
 * carries as DATA is looked up in the DDT and read from its pack
 * (dd_replica_iter_load), so a block already sent costs no random DDT page
 * and no pack read.  Its record is read and checked in full, as a get
 * checks it (header CRC, sizes and hash against the DDT entry, payload
 * decompressed and hashed: block.c), and its payload passed on as stored;
 * the receiver checks the SHA-256 of every block again.
 */
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "store/replica.h"
#include "store/store_internal.h"

struct dd_replica_iter {
	dd_store *ri_store;
	dd_txn *ri_txn;
	dd_bmap_cur *ri_cur;
	dd_scratch ri_sc;
	bool ri_started;
	uint64_t ri_idx;          /* the current block */
	dd_ddt_key ri_key;        /* ... its DDT key */
	dd_replica_snap ri_info;
};

int dd_replica_iter_open(dd_replica_iter **out, dd_err *err, dd_store *s,
			 const char *name, dd_replica_snap *info)
{
	dd_replica_iter *it;
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
	it->ri_store = s;
	rc = dd_scratch_init(&it->ri_sc, err, s);
	if (!rc)
		rc = dd_txn_begin(s->st_db, err, false, &it->ri_txn);
	if (!rc)
		rc = dd_store_snap_get(s, err, it->ri_txn, name, &rec);
	if (!rc)
		rc = dd_bmap_open(it->ri_txn, err, rec.sr_id, &it->ri_cur);
	if (rc) {
		dd_replica_iter_close(it);
		return rc;
	}
	info->rps_size = rec.sr_size;
	info->rps_blocks = rec.sr_blocks;
	info->rps_block_size = rec.sr_block_size;
	info->rps_chunker = s->st_chunker;
	info->rps_dv = rec.sr_digest_version;
	memcpy(info->rps_digest, rec.sr_digest, DD_HASH_SIZE);
	it->ri_info = *info;
	*out = it;
	return 0;
}

int dd_replica_iter_next(dd_replica_iter *it, dd_err *err, uint64_t from,
			 uint64_t *idx, dd_replica_blk *blk)
{
	int rc;

	if (!it->ri_started) {
		it->ri_started = true;
		rc = dd_bmap_seek(it->ri_cur, err, from, idx, &it->ri_key);
	} else {
		rc = dd_bmap_next(it->ri_cur, err, idx, &it->ri_key);
	}
	if (rc <= 0)
		return rc;
	/* a long walk touches the whole block map and, through
	 * dd_replica_iter_load, the DDT: keep RSS bounded */
	memset(blk, 0, sizeof(*blk));
	if (it->ri_info.rps_chunker != DD_CHUNKER_FIXED) {
		/* a content-defined map: offsets, and lengths of its own */
		blk->rpb_lsize = dd_bmap_len(it->ri_cur);
		if (*idx >= it->ri_info.rps_size ||
		    blk->rpb_lsize > it->ri_info.rps_size - *idx)
			return dd_err_set(err, DD_ECORRUPT, "the block at byte "
					  "%llu runs past the snapshot's end",
					  (unsigned long long)*idx);
	} else if (*idx >= it->ri_info.rps_blocks) {
		/* rps_blocks is the size's block count (checked by the
		 * record's decoder), so a block before it has bytes in the
		 * image */
		return dd_err_set(err, DD_ECORRUPT, "block %llu is past the "
				  "snapshot's %llu blocks",
				  (unsigned long long)*idx,
				  (unsigned long long)it->ri_info.rps_blocks);
	} else {
		blk->rpb_lsize = dd_block_lsize(it->ri_info.rps_size,
						it->ri_info.rps_block_size,
						*idx);
	}
	it->ri_idx = *idx;
	memcpy(blk->rpb_hash, it->ri_key.dk_hash, DD_HASH_SIZE);
	return 1;
}

int dd_replica_iter_load(dd_replica_iter *it, dd_err *err,
			 dd_replica_blk *blk)
{
	dd_ddt_ent ent;
	int rc;

	rc = dd_ddt_get(it->ri_txn, err, &it->ri_key, &ent);
	if (rc == DD_ENOENT)
		return dd_err_set(err, DD_ECORRUPT,
				  "block %llu is missing from the ddt",
				  (unsigned long long)it->ri_idx);
	if (rc)
		return rc;
	if (ent.de_lsize != blk->rpb_lsize)
		return dd_err_set(err, DD_ECORRUPT, "block %llu: ddt size %u, "
				  "the snapshot's block is %u bytes",
				  (unsigned long long)it->ri_idx, ent.de_lsize,
				  blk->rpb_lsize);
	/* the whole checked read, as a get does: a block whose bytes do not
	 * match its hash stops the stream here, at the sender, not at a
	 * receiver that may be a file nobody reads until the day of the
	 * restore.  The payload goes on as stored (never recompressed). */
	rc = dd_block_read(it->ri_store, err, &it->ri_sc, &it->ri_key, &ent,
			   it->ri_sc.sc_dbuf);
	if (rc == DD_ECHECKSUM || rc == DD_ECORRUPT) {
		char where[64];

		snprintf(where, sizeof(where), "block %llu of the snapshot",
			 (unsigned long long)it->ri_idx);
		return dd_err_wrap(err, 0, where, NULL);
	}
	if (rc)
		return rc;
	blk->rpb_codec = ent.de_codec;
	blk->rpb_psize = ent.de_psize;
	blk->rpb_payload = it->ri_sc.sc_rbuf + DD_PACK_REC_HDR_SIZE;
	return 0;
}

void dd_replica_iter_close(dd_replica_iter *it)
{
	if (!it)
		return;
	dd_bmap_close(it->ri_cur);
	dd_txn_abort(it->ri_txn);
	dd_scratch_fini(&it->ri_sc);
	dd_free(it);
}

/* ---- a snapshot's digest in the other version ---------------------------*/

/* Feeds both digests with the fixed block map of rec, holes as runs. */
static int dd_replica_digest_walk(dd_txn *txn, dd_err *err,
				  const dd_snap_rec *rec, dd_digest *dg[2])
{
	dd_bmap_cur *cur;
	dd_ddt_key key;
	uint64_t idx, at = 0;
	int rc = dd_bmap_open(txn, err, rec->sr_id, &cur);

	if (rc)
		return rc;
	for (rc = dd_bmap_seek(cur, err, 0, &idx, &key); rc == 1;
	     rc = dd_bmap_next(cur, err, &idx, &key)) {
		if (idx >= rec->sr_blocks) {
			rc = dd_err_set(err, DD_ECORRUPT, "block %llu is past "
					"the snapshot's end",
					(unsigned long long)idx);
			break;
		}
		for (int i = 0; i < 2; i++) {
			dd_digest_zeros(dg[i], idx - at);
			dd_digest_block(dg[i], key.dk_hash, 0);
		}
		at = idx + 1;
	}
	dd_bmap_close(cur);
	for (int i = 0; rc == 0 && i < 2; i++)
		dd_digest_zeros(dg[i], rec->sr_blocks - at);
	return rc < 0 ? rc : 0;
}

/* The digest of rec in version dv, and its own one checked. */
static int dd_replica_digest_of(dd_store *s, dd_err *err, dd_txn *txn,
				const dd_snap_rec *rec, int dv,
				uint8_t out[32])
{
	dd_digest *dg[2] = {NULL, NULL};
	uint8_t own[DD_HASH_SIZE];
	int rc;

	if (dv == DD_DIGEST_V1 && rec->sr_blocks > (uint64_t)1 << 32)
		return dd_err_set(err, DD_EINVAL, "an image of %llu blocks has "
				  "no content digest of version 1 (at most "
				  "2^32 blocks)",
				  (unsigned long long)rec->sr_blocks);
	rc = dd_digest_new(&dg[0], err, s->st_chunker, dv, rec->sr_block_size);
	if (!rc)
		rc = dd_digest_new(&dg[1], err, s->st_chunker,
				   rec->sr_digest_version, rec->sr_block_size);
	if (!rc)
		rc = dd_replica_digest_walk(txn, err, rec, dg);
	if (!rc) {
		dd_digest_final(dg[0], rec->sr_size, rec->sr_block_size, out);
		dd_digest_final(dg[1], rec->sr_size, rec->sr_block_size, own);
		if (memcmp(own, rec->sr_digest, DD_HASH_SIZE))
			rc = dd_err_set(err, DD_ECORRUPT, "the block map of the "
					"snapshot does not match its content "
					"digest (damaged metadata; run scrub)");
	}
	dd_digest_free(dg[0]);
	dd_digest_free(dg[1]);
	return rc;
}

int dd_replica_digest(dd_store *s, dd_err *err, const char *name, int dv,
		      uint8_t out[32])
{
	dd_snap_rec rec;
	dd_txn *txn;
	int rc = dd_txn_begin(s->st_db, err, false, &txn);

	if (rc)
		return rc;
	rc = dd_store_snap_get(s, err, txn, name, &rec);
	if (!rc && (rec.sr_digest_version == dv ||
		    s->st_chunker != DD_CHUNKER_FIXED))
		memcpy(out, rec.sr_digest, DD_HASH_SIZE);
	else if (!rc)
		rc = dd_replica_digest_of(s, err, txn, &rec, dv, out);
	dd_txn_abort(txn);
	return rc;
}
