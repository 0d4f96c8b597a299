/*
 * replica.c -- reading a snapshot block by block, as stored, for sending.
 *
 * One read transaction for the whole iteration, as a reader has: the
 * block map and the DDT stay consistent with each other.  Walking gives
 * each block's hash from the block map alone; only a block the sender
 * carries as DATA is looked up in the DDT and read from its pack
 * (dd_snap_iter_load), so a block already sent costs no random DDT page
 * and no pack read.  Its record is read with its header checked (CRC, and
 * that it matches the DDT entry: sizes and hash) but the payload is passed
 * on compressed; the receiver decompresses and checks the SHA-256 of
 * every block.
 */
#include <string.h>
#include <sys/resource.h>

#include "common/alloc.h"
#include "store/replica.h"
#include "store/store_internal.h"

#define DD_TRIM_CHECK 16u           /* blocks between fault counts */
#define DD_TRIM_FAULTS 128          /* x 64 KiB of fault-around: 8 MiB */

/* This thread's page-fault count when it last trimmed (counts are per
 * thread, RUSAGE_THREAD, and so is the mark). */
static _Thread_local long dd_trim_mark;

void dd_replica_trim_map(dd_store *s, uint64_t n)
{
	struct rusage ru;
	long faults;

	if (n % DD_TRIM_CHECK != 0 || getrusage(RUSAGE_THREAD, &ru) != 0)
		return;
	faults = ru.ru_minflt + ru.ru_majflt;
	if (faults - dd_trim_mark < DD_TRIM_FAULTS)
		return;
	dd_db_trim_map(s->st_db);
	dd_trim_mark = faults;
}

struct dd_snap_iter {
	dd_store *it_store;
	dd_txn *it_txn;
	dd_bmap_cur *it_cur;
	dd_scratch it_sc;
	bool it_started;
	uint64_t it_idx;          /* the current block */
	dd_ddt_key it_key;        /* ... its DDT key */
	uint64_t it_walked;       /* blocks walked, for dd_replica_trim_map */
	dd_replica_snap it_info;
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
	it->it_info = *info;
	*out = it;
	return 0;
}

int dd_snap_iter_next(dd_snap_iter *it, dd_err *err, uint64_t from,
		      uint64_t *idx, dd_replica_blk *blk)
{
	int rc;

	if (!it->it_started) {
		it->it_started = true;
		rc = dd_bmap_seek(it->it_cur, err, from, idx, &it->it_key);
	} else {
		rc = dd_bmap_next(it->it_cur, err, idx, &it->it_key);
	}
	if (rc <= 0)
		return rc;
	/* a long walk touches the whole block map and, through
	 * dd_snap_iter_load, the DDT: keep RSS bounded */
	dd_replica_trim_map(it->it_store, ++it->it_walked);
	/* rs_blocks is the size's block count (checked by the record's
	 * decoder), so a block before it has bytes in the image */
	if (*idx >= it->it_info.rs_blocks)
		return dd_err_set(err, DD_ECORRUPT, "block %llu is past the "
				  "snapshot's %llu blocks",
				  (unsigned long long)*idx,
				  (unsigned long long)it->it_info.rs_blocks);
	it->it_idx = *idx;
	memset(blk, 0, sizeof(*blk));
	memcpy(blk->rb_hash, it->it_key.dk_hash, DD_HASH_SIZE);
	blk->rb_lsize = dd_block_lsize(it->it_info.rs_size,
				       it->it_info.rs_block_size, *idx);
	return 1;
}

int dd_snap_iter_load(dd_snap_iter *it, dd_err *err, dd_replica_blk *blk)
{
	dd_ddt_ent ent;
	dd_pack_rec expect, rec;
	dd_pack *p;
	int rc;

	rc = dd_ddt_get(it->it_txn, err, &it->it_key, &ent);
	if (rc == DD_ENOENT)
		return dd_err_set(err, DD_ECORRUPT,
				  "block %llu is missing from the ddt",
				  (unsigned long long)it->it_idx);
	if (rc)
		return rc;
	if (ent.de_lsize != blk->rb_lsize)
		return dd_err_set(err, DD_ECORRUPT, "block %llu: ddt size %u, "
				  "the snapshot's block is %u bytes",
				  (unsigned long long)it->it_idx, ent.de_lsize,
				  blk->rb_lsize);
	expect = (dd_pack_rec){.pr_codec = ent.de_codec,
			       .pr_lsize = ent.de_lsize,
			       .pr_psize = ent.de_psize};
	memcpy(expect.pr_hash, it->it_key.dk_hash, DD_HASH_SIZE);
	rc = dd_store_pack(it->it_store, err, ent.de_pack, &p);
	if (!rc)
		rc = dd_pack_read_rec(p, err, ent.de_offset, &expect, &rec,
				      it->it_sc.sc_rbuf, it->it_sc.sc_rbuf_len);
	if (rc)
		return rc;
	blk->rb_codec = rec.pr_codec;
	blk->rb_psize = ent.de_psize;
	blk->rb_payload = it->it_sc.sc_rbuf + DD_PACK_REC_HDR_SIZE;
	return 0;
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
