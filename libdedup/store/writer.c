/*
 * writer.c -- writing a snapshot: the store's sink of the block pipeline.
 *
 * Bytes arrive through dd_writer_write, dd_writer_buffer/_produce and
 * dd_writer_write_file into the block pipeline (chunk/pipeline.h), in
 * batches of 4 MiB or 16 blocks, whichever is larger, cut into the
 * store's block size.  The pipeline's stage 1 finds holes and hashes
 * (two blocks at a time), its stage 3 compresses with the store's
 * codecs; this file is the stages in between and after:
 *
 *   2. lookup   serial, in the writer's LMDB transaction: each block is a
 *               hole, a reference to a block the DDT holds (refcount + 1),
 *               or new.  A new block gets a PENDING placeholder entry at
 *               once, so a later block of the same batch dedups against
 *               it.  In verify mode a hash match is compared byte by byte
 *               (the batch's own bytes for a placeholder, a checked read
 *               for a stored block); a mismatch tries the next variant of
 *               the key (format/ddt.md §2);
 *   3. compress on the pool (the pipeline), new blocks only -- never
 *               compress what the DDT already holds;
 *   4. store    serial: records appended to the active pack, placeholders
 *               replaced by the real location.
 *
 * One pool job hashes batch k and compresses batch k-1 while the caller
 * fills batch k+1, so both cores stay busy whether the data is new
 * (compression bound) or known (hash bound); batch k-2 is stored on the
 * caller's thread while that job runs (dd_writer_store_late says why
 * that order is safe).  Placeholders are never committed.  A file range
 * (dd_writer_write_file) is read by the hash stage, region by region into
 * a worker's own buffer, and a block the DDT holds already is never
 * copied into the batch (dd_writer_keep).
 *
 * Commits: every dd_writer_commit_bytes (512 MiB) the pack is synced and the
 * transaction committed, to bound LMDB's dirty pages; the snapshot is still
 * invisible (only a `pend` entry names it, so a crash is rolled back by the
 * next writer, store.c).  dd_writer_commit syncs the pack, then commits the
 * transaction that adds the snapshot record: data before metadata.  A
 * writer fed with blocks instead of bytes (receive.c) has no pipeline and
 * shares the rest: the DDT, the packs and the commits.
 */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "chunk/pipeline.h"
#include "common/alloc.h"
#include "store/replica.h"
#include "store/writer_internal.h"

/* Bytes between intermediate commits; a variable so tests can make a
 * small image commit several times (store_internal.h). */
uint64_t dd_writer_commit_bytes = (uint64_t)512 << 20;
#define DD_WRITER_COMMIT_BLOCKS 8192u

int dd_writer_fail(dd_writer *w, int rc)
{
	w->w_state = DD_W_FAILED;
	dd_store_fail(w->w_store, &w->w_err);
	return rc;
}

/* ---- stage 1: hash (chunk/pipeline.c) ----------------------------------*/

/* Does the DDT hold this key already?  Then the block is a reference and
 * its bytes are never needed: the lookup stage will find the entry, since
 * entries only go away under the writer lock this writer holds (gc,
 * recovery).  Worker 0 is the writer's own thread, inside dd_pool_join
 * (pool.h): it asks the write transaction; the others ask their own read
 * transaction.  Any failure answers no, which only costs a copy. */
static bool dd_writer_probe(dd_writer *w, const dd_ddt_key *key,
			    unsigned worker, uint64_t idx)
{
	dd_txn *txn = w->w_txn;
	dd_ddt_ent ent;
	dd_err err;

	/* the probes fault DDT pages in too, on their own threads */
	dd_replica_trim_map(w->w_store, idx + 1);

	if (worker > 0) {
		dd_txn **t = &w->w_probe[worker];

		if (!*t && dd_txn_begin(w->w_store->st_db, &err, false, t)) {
			*t = NULL;
			return false;
		}
		if (dd_txn_renew(*t, &err))
			return false;
		txn = *t;
	}
	/* a lost block (DD_DDE_MISSING) is to be stored: its bytes count */
	return txn && dd_ddt_get(txn, &err, key, &ent) == 0 &&
	       !(ent.de_flags & DD_DDE_MISSING);
}

/* Parks the probes' read txns: called before every commit, so that none
 * holds back pages LMDB could reuse. */
static void dd_writer_probe_park(dd_writer *w)
{
	for (unsigned i = 0; w->w_probe && i < w->w_nworkers; i++)
		dd_txn_reset(w->w_probe[i]);
}

/* po_keep: block i was read from a file into the worker's buffer and
 * hashed there.  One the DDT holds already needs no bytes; any other is
 * copied into the batch for the lookup (verify) and compress stages, so
 * most of a changed copy's blocks are never copied at all. */
static bool dd_writer_keep(void *ctx, const dd_pbatch *b, size_t i,
			   unsigned worker)
{
	dd_writer *w = ctx;
	const dd_blk *bk = &b->pb_blk[i];
	dd_ddt_key key = {.dk_variant = 0};

	if (w->w_store->st_verify)
		return true;
	memcpy(key.dk_hash, bk->bk_hash, DD_HASH_SIZE);
	return !dd_writer_probe(w, &key, worker, bk->bk_idx);
}

/* ---- stage 2: lookup ---------------------------------------------------*/

/* The bytes of block i of batch b. */
static const uint8_t *dd_writer_bytes(dd_writer *w, unsigned batch, size_t i)
{
	const dd_pbatch *b = dd_pipe_batch(w->w_pipe, batch);

	return b->pb_data + b->pb_blk[i].bk_off;
}

/* Verify mode: is the block of `ent` byte-identical to data? */
static int dd_same_bytes(dd_writer *w, const dd_ddt_key *key,
			 const dd_ddt_ent *ent, const uint8_t *data,
			 uint32_t lsize, bool *same)
{
	int rc;

	*same = false;
	if (ent->de_lsize != lsize)
		return 0;
	if (ent->de_flags & DD_DDE_PENDING) {
		/* a block of this batch or of the one still being stored */
		const uint8_t *pend = dd_writer_bytes(w,
				(unsigned)(ent->de_offset >> 32),
				ent->de_offset & 0xffffffffu);

		*same = !memcmp(pend, data, lsize);
		return 0;
	}
	rc = dd_block_read(w->w_store, &w->w_err, &w->w_sc, key, ent,
			   w->w_sc.sc_dbuf);
	/* A damaged stored copy is not the same bytes: store this one apart
	 * under another variant, so the new image stays readable. */
	if (rc == DD_ECHECKSUM || rc == DD_ECORRUPT)
		return 0;
	if (rc)
		return rc;
	*same = !memcmp(w->w_sc.sc_dbuf, data, lsize);
	return 0;
}

/* Block i's DDT entry: a reference taken, or a PENDING placeholder for a
 * new block (listed for compression).  bk_aux keeps the key's variant. */
static int dd_lookup_blk(dd_writer *w, dd_pbatch *b, size_t i)
{
	dd_blk *bk = &b->pb_blk[i];
	const uint8_t *data = b->pb_data + bk->bk_off;
	dd_ddt_key key;
	dd_ddt_ent ent;
	int rc;

	memcpy(key.dk_hash, bk->bk_hash, DD_HASH_SIZE);
	for (unsigned v = 0; v <= DD_DDT_MAX_VARIANT; v++) {
		bool same = true;

		key.dk_variant = (uint8_t)v;
		bk->bk_aux = v;
		rc = dd_ddt_get(w->w_txn, &w->w_err, &key, &ent);
		if (rc == DD_ENOENT && bk->bk_nodata)
			/* dd_writer_probe found it: see why it cannot go */
			return dd_err_set(&w->w_err, DD_ECORRUPT, "block %llu: "
					  "a DDT entry vanished while this "
					  "writer held the lock",
					  (unsigned long long)bk->bk_idx);
		if (rc == DD_ENOENT) {
			ent = (dd_ddt_ent){
				.de_flags = DD_DDE_PENDING,
				/* where the bytes are until stored: the
				 * pipeline's batch, block in it */
				.de_offset = (uint64_t)b->pb_id << 32 | i,
				.de_lsize = bk->bk_len,
				.de_refcnt = 1,
			};
			bk->bk_kind = DD_BLK_SINK; /* new */
			dd_pipe_mark(b, i);
			return dd_ddt_put(w->w_txn, &w->w_err, &key, &ent);
		}
		if (rc)
			return rc;
		if (ent.de_flags & DD_DDE_MISSING) {
			/* a block repair found no copy of: this one is it
			 * (its hash says so), stored under the same key so
			 * that every snapshot using it reads again */
			ent.de_flags = DD_DDE_PENDING;
			ent.de_offset = (uint64_t)b->pb_id << 32 | i;
			ent.de_lsize = bk->bk_len;
			ent.de_refcnt++;
			bk->bk_kind = DD_BLK_SINK; /* new */
			dd_pipe_mark(b, i);
			return dd_ddt_put(w->w_txn, &w->w_err, &key, &ent);
		}
		if (w->w_store->st_verify) {
			rc = dd_same_bytes(w, &key, &ent, data, bk->bk_len,
					   &same);
			if (rc)
				return rc;
		}
		if (same) {
			ent.de_refcnt++;
			return dd_ddt_put(w->w_txn, &w->w_err, &key, &ent);
		}
	}
	return dd_err_set(&w->w_err, DD_ENOSPC,
			  "more than %d different blocks share one hash",
			  DD_DDT_MAX_VARIANT + 1);
}

/* po_lookup: new blocks are listed for compression. */
static int dd_writer_lookup(void *ctx, dd_pbatch *b)
{
	dd_writer *w = ctx;

	for (size_t i = 0; i < b->pb_nblk; i++) {
		dd_blk *bk = &b->pb_blk[i];
		dd_ddt_key key;
		int rc;

		if (bk->bk_kind == DD_BLK_ZERO) {
			w->w_zero++;
			dd_digest_block(w->w_digest, NULL, bk->bk_len);
			continue;
		}
		/* lookups touch random DDT pages: keep RSS bounded
		 * (store/replica.h) */
		dd_replica_trim_map(w->w_store, bk->bk_idx + 1);
		rc = dd_lookup_blk(w, b, i);
		memcpy(key.dk_hash, bk->bk_hash, DD_HASH_SIZE);
		key.dk_variant = (uint8_t)bk->bk_aux;
		if (!rc)
			rc = dd_bmap_append_block(w->w_txn, &w->w_err, w->w_id,
						  bk->bk_idx, bk->bk_ioff,
						  bk->bk_len, &key);
		if (rc)
			return rc;
		dd_digest_block(w->w_digest, bk->bk_hash, bk->bk_len);
	}
	w->w_blocks += b->pb_nblk;
	w->w_size += b->pb_bytes;
	return 0;
}

/* ---- stage 4: store ----------------------------------------------------*/

/* Makes the active pack durable and records its end in the transaction:
 * data before the metadata that names it (invariant 1). */
static int dd_writer_seal_pack(dd_writer *w)
{
	int rc;

	if (!w->w_pack)
		return 0;
	rc = dd_pack_sync(w->w_pack, &w->w_err);
	if (!rc)
		rc = dd_packs_put(w->w_txn, &w->w_err, dd_pack_id(w->w_pack),
				  dd_pack_end(w->w_pack));
	return rc;
}

static int dd_writer_new_pack(dd_writer *w)
{
	uint32_t id;
	int rc;

	if (w->w_pack) {
		rc = dd_writer_seal_pack(w);
		if (rc)
			return rc;
		dd_pack_close(w->w_pack);
		w->w_pack = NULL;
	}
	if (w->w_pack_next > UINT32_MAX)
		return dd_err_set(&w->w_err, DD_ENOSPC, "pack ids exhausted");
	id = (uint32_t)w->w_pack_next++;
	rc = dd_pack_create(&w->w_pack, &w->w_err, w->w_store->st_packdir, id);
	if (!rc)
		rc = dd_packs_put(w->w_txn, &w->w_err, id,
				  dd_pack_end(w->w_pack));
	if (!rc)
		rc = dd_meta_put_u64(w->w_txn, &w->w_err, "pack.next",
				     w->w_pack_next);
	return rc;
}

/* Appends one record to the active pack, rolling over to a new pack when
 * it would pass DD_PACK_MAX_BYTES. */
int dd_writer_append(dd_writer *w, const dd_pack_rec *rec, const void *payload,
		     uint32_t *pack, uint64_t *off)
{
	int rc;

	if (!w->w_pack || dd_pack_end(w->w_pack) + DD_PACK_REC_HDR_SIZE +
				  rec->pr_psize > DD_PACK_MAX_BYTES) {
		rc = dd_writer_new_pack(w);
		if (rc)
			return rc;
	}
	rc = dd_pack_append(w->w_pack, &w->w_err, rec, payload, off);
	*pack = dd_pack_id(w->w_pack);
	if (!rc) {
		w->w_new_blocks++;
		w->w_new_lsize += rec->pr_lsize;
		w->w_new_bytes += DD_PACK_REC_HDR_SIZE + (uint64_t)rec->pr_psize;
	}
	return rc;
}

/* Stores the j-th new block of b: its record appended, its placeholder
 * replaced by the real location. */
static int dd_store_blk(dd_writer *w, dd_pbatch *b, size_t j)
{
	dd_blk *bk = &b->pb_blk[b->pb_new[j]];
	dd_pack_rec rec = {
		.pr_codec = bk->bk_codec,
		.pr_lsize = bk->bk_len,
		.pr_psize = bk->bk_psize,
	};
	dd_ddt_key key = {.dk_variant = (uint8_t)bk->bk_aux};
	dd_ddt_ent ent;
	uint32_t pack;
	uint64_t off;
	int rc;

	memcpy(rec.pr_hash, bk->bk_hash, DD_HASH_SIZE);
	memcpy(key.dk_hash, bk->bk_hash, DD_HASH_SIZE);
	rc = dd_writer_append(w, &rec, dd_pipe_payload(w->w_pipe, b, j), &pack,
			      &off);
	if (!rc)
		rc = dd_ddt_get(w->w_txn, &w->w_err, &key, &ent);
	if (rc)
		return rc;
	ent.de_flags &= (uint16_t)~DD_DDE_PENDING;
	ent.de_codec = bk->bk_codec;
	ent.de_pack = pack;
	ent.de_offset = off;
	ent.de_psize = bk->bk_psize;
	return dd_ddt_put(w->w_txn, &w->w_err, &key, &ent);
}

bool dd_writer_commit_due(const dd_writer *w, uint64_t bytes, uint64_t blocks)
{
	return w->w_uncommitted + bytes >= dd_writer_commit_bytes ||
	       w->w_uncommitted_blocks + blocks >= DD_WRITER_COMMIT_BLOCKS;
}

/* Data first: sync the pack, record its end, then commit (invariant 1). */
int dd_writer_sync_commit(dd_writer *w, bool reopen)
{
	int rc = 0;

	dd_writer_probe_park(w);
	if (w->w_on_commit && w->w_state == DD_W_OPEN)
		rc = w->w_on_commit(w->w_on_commit_ctx);
	if (!rc)
		rc = dd_writer_seal_pack(w);
	if (rc)
		return rc;
	rc = dd_txn_commit(w->w_txn, &w->w_err);
	w->w_txn = NULL;
	if (rc)
		return rc;
	w->w_uncommitted = 0;
	w->w_uncommitted_blocks = 0;
	dd_db_trim_map(w->w_store->st_db);
	if (reopen)
		rc = dd_txn_begin(w->w_store->st_db, &w->w_err, true, &w->w_txn);
	return rc;
}

/* po_store_late: an intermediate commit must not see placeholders, so at
 * a commit point the batch is stored and committed before the next batch
 * is looked up.  Otherwise it waits, and is stored while the pool works:
 * a block of the next batch that this one holds meets its PENDING
 * placeholder, takes a reference on it, and storing this batch then
 * fills in the location. */
static bool dd_writer_store_late(void *ctx, const dd_pbatch *b)
{
	return !dd_writer_commit_due(ctx, b->pb_bytes, b->pb_nblk);
}

/* po_store: stage 4 for a compressed batch, and the commit that is due
 * after it -- only ever after a batch stored first (dd_writer_store_late
 * said so): one stored late leaves the count below the mark. */
static int dd_writer_store(void *ctx, dd_pbatch *b)
{
	dd_writer *w = ctx;
	int rc = 0;

	for (size_t j = 0; !rc && j < b->pb_nnew; j++)
		rc = dd_store_blk(w, b, j);
	if (rc)
		return rc;
	w->w_uncommitted += b->pb_bytes;
	w->w_uncommitted_blocks += b->pb_nblk;
	if (dd_writer_commit_due(w, 0, 0))
		rc = dd_writer_sync_commit(w, true);
	return rc;
}

static const dd_pipe_ops dd_writer_ops = {
	.po_lookup = dd_writer_lookup,
	.po_store = dd_writer_store,
	.po_store_late = dd_writer_store_late,
	.po_keep = dd_writer_keep,
};

/* ---- public ------------------------------------------------------------*/

/* The byte pipeline (chunk/pipeline.h) on the store's pool and its
 * workers' codecs, in batches of 4 MiB or 16 blocks; the probes. */
static int dd_writer_pipe(dd_writer *w)
{
	dd_store *s = w->w_store;
	dd_cutter cut;
	dd_pipe_cfg cfg = {
		.pc_pool = s->st_pool,
		.pc_pool_lock = &s->st_pool_lock,
		.pc_hash_kind = s->st_hash_kind,
		.pc_cut = &cut,
		.pc_ncut = 1,
		.pc_compress = dd_codec_compress,
		.pc_zbound = dd_codec_bound(s->st_block_max),
		.pc_zkeep = true,
		.pc_batch = DD_WRITER_BATCH_BYTES > 16 * (size_t)s->st_block_max
				    ? DD_WRITER_BATCH_BYTES
				    : 16 * (size_t)s->st_block_max,
		.pc_bytes = DD_PIPE_BYTES_SOME,
		.pc_read = DD_PIPE_READ_FAIL,
		.pc_ops = &dd_writer_ops,
		.pc_ctx = w,
		.pc_err = &w->w_err,
	};
	w->w_nworkers = s->st_nscratch;
	w->w_probe = dd_calloc(w->w_nworkers, sizeof(*w->w_probe));
	w->w_zctx = dd_calloc(w->w_nworkers, sizeof(*w->w_zctx));
	if (!w->w_probe || !w->w_zctx)
		return dd_err_set(&w->w_err, DD_ENOMEM, "out of memory");
	for (unsigned i = 0; i < w->w_nworkers; i++)
		w->w_zctx[i] = s->st_scratch[i].sc_codec;
	cfg.pc_zctx = w->w_zctx;
	dd_cutter_init(&cut, s->st_chunker, w->w_bs);
	return dd_pipe_new(&w->w_pipe, &cfg);
}

/* Ends the probes' read txns: the writer gives up its lock after this. */
static void dd_writer_probe_end(dd_writer *w)
{
	for (unsigned i = 0; w->w_probe && i < w->w_nworkers; i++) {
		dd_txn_abort(w->w_probe[i]);
		w->w_probe[i] = NULL;
	}
}

/* Reserves a snapshot id and records it pending, in its own commit, so a
 * crash from here on is rolled back by the next writer.  A resumed
 * receive (w_id already set) keeps its id and pending record. */
static int dd_writer_reserve(dd_writer *w)
{
	dd_snap_rec existing;
	dd_txn *txn;
	int rc = dd_txn_begin(w->w_store->st_db, &w->w_err, true, &txn);

	if (rc)
		return rc;
	rc = dd_snap_get(txn, &w->w_err, w->w_name, &existing);
	if (rc == 0)
		rc = dd_err_set(&w->w_err, DD_EEXIST,
				"snapshot '%s' already exists", w->w_name);
	else if (rc == DD_ENOENT && w->w_id)
		rc = 0;
	else if (rc == DD_ENOENT) {
		rc = dd_meta_get_u64(txn, &w->w_err, "snap.next", &w->w_id);
		if (!rc)
			rc = dd_commit_id_unused(w->w_store, &w->w_err, txn,
						 w->w_id);
		if (!rc)
			rc = dd_meta_put_u64(txn, &w->w_err, "snap.next",
					     w->w_id + 1);
		if (!rc)
			rc = dd_pend_put(txn, &w->w_err, w->w_id, w->w_name);
	}
	if (!rc)
		rc = dd_meta_get_u64(txn, &w->w_err, "pack.next",
				     &w->w_pack_next);
	if (rc == DD_ENOENT)
		rc = dd_err_set(&w->w_err, DD_ECORRUPT,
				"store metadata is incomplete");
	if (rc) {
		dd_txn_abort(txn);
		return rc;
	}
	return dd_txn_commit(txn, &w->w_err);
}

/* Appends to the newest pack if it has room, else a new one is made at the
 * first new block. */
static int dd_writer_open_pack(dd_writer *w)
{
	uint64_t end;
	uint32_t last;
	int rc;

	if (w->w_pack_next <= 1)
		return 0;
	last = (uint32_t)(w->w_pack_next - 1);
	rc = dd_packs_get(w->w_txn, &w->w_err, last, &end);
	if (rc == DD_ENOENT)
		return 0; /* removed by gc */
	if (rc || end >= DD_PACK_MAX_BYTES / 2)
		return rc;
	rc = dd_pack_open(&w->w_pack, &w->w_err, w->w_store->st_packdir, last, 1);
	if (!rc)
		rc = dd_pack_truncate(w->w_pack, &w->w_err, end);
	return rc;
}

int dd_writer_open(dd_writer **out, dd_store *s, const char *name,
		   uint64_t resume_id)
{
	dd_writer *w;
	int rc;

	if (!s || !out)
		return s ? dd_store_failf(s, DD_EINVAL, "dd_writer_begin: "
					  "NULL argument") : DD_EINVAL;
	if (dd_name_check(name))
		return dd_store_failf(s, DD_ENAME, "invalid snapshot name "
				      "(1-255 bytes, no '/', '@', control "
				      "characters, '.' or '..')");
	w = dd_calloc(1, sizeof(*w));
	if (!w)
		return dd_store_failf(s, DD_ENOMEM, "out of memory");
	w->w_store = s;
	w->w_bs = s->st_block_size;
	w->w_id = resume_id;
	strcpy(w->w_name, name);
	rc = dd_store_lock(s, &w->w_err);
	if (rc) {
		dd_store_fail(s, &w->w_err);
		dd_free(w);
		return rc;
	}
	w->w_state = DD_W_OPEN;
	rc = dd_scratch_init(&w->w_sc, &w->w_err, s);
	if (!rc)
		rc = dd_digest_new(&w->w_digest, &w->w_err, s->st_chunker);
	if (!rc)
		rc = dd_writer_reserve(w);
	if (!rc)
		rc = dd_txn_begin(s->st_db, &w->w_err, true, &w->w_txn);
	if (!rc)
		rc = dd_writer_open_pack(w);
	if (rc) {
		dd_store_fail(s, &w->w_err);
		dd_writer_free(w);
		return rc;
	}
	*out = w;
	return 0;
}

int dd_writer_begin(dd_writer **out, dd_store *s, const char *name)
{
	dd_writer *w;
	int rc;

	if (!out)
		return s ? dd_store_failf(s, DD_EINVAL, "dd_writer_begin: "
					  "NULL argument") : DD_EINVAL;
	rc = dd_writer_open(&w, s, name, 0);
	if (rc)
		return rc;
	rc = dd_writer_pipe(w);
	if (rc) {
		dd_store_fail(s, &w->w_err);
		dd_writer_free(w);
		return rc;
	}
	*out = w;
	return 0;
}

/* The entry check of every call that adds bytes: DD_EINVAL for NULL. */
static int dd_writer_check_open(dd_writer *w)
{
	if (!w)
		return DD_EINVAL;
	if (w->w_state != DD_W_OPEN)
		return dd_err_set(&w->w_err, DD_ESTATE,
				  "writer is not open (after an error, commit "
				  "or abort)");
	if (!w->w_pipe)
		return dd_writer_fail(w, dd_err_set(&w->w_err, DD_EINVAL,
				"a receiving writer takes blocks, not bytes"));
	return 0;
}

int dd_writer_buffer(dd_writer *w, void **buf, size_t *len)
{
	int rc;

	if (!w)
		return DD_EINVAL;
	if (!buf || !len)
		return dd_writer_fail(w, dd_err_set(&w->w_err, DD_EINVAL,
						    "NULL argument"));
	rc = dd_writer_check_open(w);
	if (rc)
		return rc;
	dd_pipe_buffer(w->w_pipe, buf, len);
	return 0;
}

int dd_writer_produce(dd_writer *w, size_t n)
{
	int rc;

	rc = dd_writer_check_open(w);
	if (rc)
		return rc;
	if (n > dd_pipe_room(w->w_pipe))
		return dd_writer_fail(w, dd_err_set(&w->w_err, DD_EINVAL,
				"dd_writer_produce: %zu bytes is more than the "
				"buffer given", n));
	rc = dd_pipe_produce(w->w_pipe, n);
	return rc ? dd_writer_fail(w, rc) : 0;
}

int dd_writer_write(dd_writer *w, const void *buf, size_t len)
{
	int rc;

	if (!w)
		return DD_EINVAL;
	if (!buf && len)
		return dd_writer_fail(w, dd_err_set(&w->w_err, DD_EINVAL,
						    "NULL buffer"));
	rc = dd_writer_check_open(w);
	if (rc)
		return rc;
	rc = dd_pipe_write(w->w_pipe, buf, len);
	return rc ? dd_writer_fail(w, rc) : 0;
}

/* The range goes to the pipeline, whose hash stage reads it on the pool
 * (chunk/pipeline.c). */
int dd_writer_write_file(dd_writer *w, int fd, uint64_t off, uint64_t len)
{
	int rc;

	rc = dd_writer_check_open(w);
	if (rc)
		return rc;
	if (fd < 0 || off > INT64_MAX || len > INT64_MAX - off)
		return dd_writer_fail(w, dd_err_set(&w->w_err, DD_EINVAL,
				"dd_writer_write_file: bad descriptor or range"));
	rc = dd_pipe_file(w->w_pipe, fd, off, len, "the input");
	return rc ? dd_writer_fail(w, rc) : 0;
}

int dd_writer_finish(dd_writer *w, const uint8_t *expect_digest)
{
	dd_snap_rec rec, existing;
	int rc;

	rec = (dd_snap_rec){
		.sr_id = w->w_id,
		.sr_block_size = w->w_bs,
		.sr_size = w->w_size,
		.sr_ctime = (int64_t)time(NULL),
	};
	/* blocks as the formats count them: a run of holes of a content-
	 * defined image is one (format/chunker.md §5) */
	dd_digest_counts(w->w_digest, &rec.sr_blocks, &rec.sr_zero_blocks);
	dd_digest_final(w->w_digest, w->w_size, w->w_bs, rec.sr_digest);
	if (expect_digest && memcmp(expect_digest, rec.sr_digest, DD_HASH_SIZE))
		return dd_err_set(&w->w_err, DD_ECHECKSUM,
				  "content digest of '%s' does not match the "
				  "one announced", w->w_name);
	rc = dd_snap_get(w->w_txn, &w->w_err, w->w_name, &existing);
	if (rc == 0)
		rc = dd_err_set(&w->w_err, DD_EEXIST,
				"snapshot '%s' already exists", w->w_name);
	else if (rc == DD_ENOENT)
		rc = 0;
	/* The commit (format/manifest.md §7): data and block map durable
	 * first, the snapshot still pending; then the manifest, published
	 * from that map -- from here on the snapshot is committed --; then
	 * the catalog records it.  Should that last commit fail, the
	 * publication is taken back: a failed commit leaves no snapshot. */
	if (!rc)
		rc = dd_writer_sync_commit(w, true);
	if (!rc)
		rc = dd_commit_publish(w->w_store, &w->w_err, w->w_txn,
				       w->w_name, &rec);
	if (rc)
		return rc;
	rc = dd_snap_put(w->w_txn, &w->w_err, w->w_name, &rec);
	if (!rc)
		rc = dd_pend_del(w->w_txn, &w->w_err, w->w_id);
	w->w_on_commit = NULL; /* done: no state to keep */
	if (!rc)
		rc = dd_writer_sync_commit(w, false);
	if (rc) {
		dd_commit_unpublish(w->w_store, w->w_id);
		return rc;
	}
	w->w_state = DD_W_COMMITTED;
	dd_writer_probe_end(w);
	dd_pack_close(w->w_pack);
	w->w_pack = NULL;
	dd_store_unlock(w->w_store);
	return 0;
}

int dd_writer_commit(dd_writer *w)
{
	int rc;

	rc = dd_writer_check_open(w);
	if (rc)
		return rc;
	rc = dd_pipe_drain(w->w_pipe);
	if (!rc)
		rc = dd_writer_finish(w, NULL);
	return rc ? dd_writer_fail(w, rc) : 0;
}

void dd_writer_abort(dd_writer *w)
{
	dd_err err;

	if (!w || w->w_state == DD_W_COMMITTED || w->w_state == DD_W_ABORTED ||
	    w->w_state == DD_W_SUSPENDED)
		return;
	dd_pipe_wait(w->w_pipe);
	dd_writer_probe_end(w);
	dd_txn_abort(w->w_txn);
	w->w_txn = NULL;
	dd_pack_close(w->w_pack);
	w->w_pack = NULL;
	/* Roll back what intermediate commits made durable and cut the pack
	 * tail; if this fails, the next writer's recovery does it. */
	dd_store_recover(w->w_store, &err);
	dd_store_unlock(w->w_store);
	w->w_state = DD_W_ABORTED;
}

void dd_writer_free(dd_writer *w)
{
	if (!w)
		return;
	if (w->w_state == DD_W_OPEN || w->w_state == DD_W_FAILED)
		dd_writer_abort(w);
	dd_pipe_free(w->w_pipe);
	dd_writer_probe_end(w);
	dd_free(w->w_probe);
	dd_free(w->w_zctx);
	dd_scratch_fini(&w->w_sc);
	dd_digest_free(w->w_digest);
	dd_free(w);
}

const char *dd_writer_errmsg(const dd_writer *w)
{
	if (!w)
		return "DD_EINVAL: NULL writer";
	return w->w_err.de_code ? w->w_err.de_msg : "no error";
}
