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
 *   2. lookup   serial, against a read transaction moved to the newest
 *               commit at every batch: each block is a hole, a reference
 *               (to a usable DDT entry, or to a block new earlier in this
 *               commit interval), or new -- an op of the interval each
 *               (wops.c).  A block read from a file was asked about
 *               already by the hash stage's probe, and its answer stands
 *               (dd_writer_keep) -- or, in a re-put, found in the block map
 *               of the snapshot it repeats (wloc.c).  In verify mode a
 *               hash match is compared
 *               byte by byte (the batch's own bytes for a block not yet
 *               stored, a checked read otherwise); a mismatch tries the
 *               next variant of the key (format/ddt.md §2);
 *   3. compress on the pool (the pipeline), new blocks only -- never
 *               compress what the DDT already holds;
 *   4. store    serial: records appended to the writer's own pack
 *               (wpack.c), their ops placed.
 *
 * One pool job hashes batch k and compresses batch k-1 while the caller
 * fills batch k+1, so both cores stay busy whether the data is new
 * (compression bound) or known (hash bound); batch k-2 is stored on the
 * caller's thread while that job runs (dd_writer_store_late says why
 * that order is safe).  A file range (dd_writer_write_file) is read by
 * the hash stage, region by region into a worker's own buffer, and a
 * block the DDT holds already is never copied into the batch
 * (dd_writer_keep).
 *
 * Commits (wops.c): every dd_writer_commit_bytes (512 MiB) or 8192
 * blocks the packs are synced and one short write transaction applies
 * the interval's ops (a put without verify defers its DDT changes to
 * flushes, and commits every 65,536 blocks: store/defer.h); the
 * snapshot is still invisible (only a `pend`
 * entry names it, so a crash is rolled back by recovery).  The writer
 * holds no catalog lock in between: other writers, rm and gc go on
 * (wlife.c).  A writer fed with blocks instead of bytes (receive.c) has
 * no pipeline and shares the rest: the ops, the packs and the commits.
 */
#include <stdint.h>
#include <string.h>

#include "catalog/kfilter.h"
#include "chunk/pipeline.h"
#include "common/alloc.h"
#include "store/replica.h"
#include "store/writer_internal.h"

int dd_writer_fail(dd_writer *w, int rc)
{
	w->w_state = DD_W_FAILED;
	dd_store_fail(w->w_store, &w->w_err);
	return rc;
}

bool dd_writer_usable(const dd_writer *w, const dd_ddt_ent *ent)
{
	/* lost, or its record found damaged: the writer brings a copy */
	if (dd_ddt_ent_flagged(ent))
		return false;
	return ent->de_refcnt > 0 || ent->de_dead_since > w->w_start;
}

int dd_writer_renew(dd_writer *w)
{
	if (!w->w_rtxn)
		return dd_txn_begin(w->w_store->st_db, &w->w_err, false,
				    &w->w_rtxn);
	dd_txn_reset(w->w_rtxn);
	return dd_txn_renew(w->w_rtxn, &w->w_err);
}

/* ---- stage 1: hash (chunk/pipeline.c) ----------------------------------*/

/* Pool worker `worker`'s own read transaction, begun after the writer's
 * start and moved to the newest commit only after each commit parks it
 * (a transaction per probe would cost the guard's page checks afresh
 * every time); NULL when it cannot be had. */
static dd_txn *dd_writer_probe_txn(dd_writer *w, unsigned worker)
{
	dd_txn **t = &w->w_probe[worker];
	dd_err err;

	if (!*t && dd_txn_begin(w->w_store->st_db, &err, false, t)) {
		*t = NULL;
		return NULL;
	}
	if (dd_txn_renew(*t, &err))   /* nothing unless parked */
		return NULL;
	return *t;
}

/* Does the DDT hold this key, usable, as t sees it?  1: yes, so the block
 * is a reference and its bytes are never needed: the lookup stage takes
 * this answer without a descent of its own (bk_nodata), as gc keeps the
 * entry usable for this writer.  0: no.  -1: no answer (no t, or a
 * failure), which only costs a copy and the lookup stage's own descent. */
static int dd_writer_probe(dd_writer *w, dd_txn *t, const dd_ddt_key *key)
{
	dd_ddt_ent ent;
	dd_err err;
	int rc;

	if (!t)
		return -1;
	/* most new blocks stop here, without a DDT read (kfilter.h) */
	if (!dd_db_kf_maybe(w->w_store->st_db, key->dk_hash))
		return 0;
	rc = dd_ddt_get(t, &err, key, &ent);
	if (rc == DD_ENOENT)
		return 0;
	if (rc)
		return -1;
	return dd_writer_usable(w, &ent);
}

/* bk_aux of a block the probe found no usable entry for, from the hash
 * stage until the lookup stage reads it (and sets bk_aux to 0 or its op):
 * this bit, and the writer's commits at the probe.  With no commit of
 * this writer between the probe and the lookup (whose interval's NEW
 * ops the lookup finds in memory), the block is NEW without a descent
 * of the lookup stage's own.  Another writer's commit since the probe's
 * read may have added its entry; this commit then takes a reference on
 * it and the copy is garbage for gc, as for two writers storing one
 * block at once (wops.c).  The pool never runs during a commit
 * (po_store_late), so w_ncommit is read here and written there in turn. */
#define DD_AUX_PROBED_NEW ((uint64_t)1 << 63)
/* bk_aux of a block found in the locality source's map (wloc.c): LREF */
#define DD_AUX_LOCAL ((uint64_t)1 << 62)

static bool dd_writer_probed_new(const dd_writer *w, uint64_t aux)
{
	return aux == (DD_AUX_PROBED_NEW |
		       (w->w_ncommit & (DD_AUX_PROBED_NEW - 1)));
}

/* po_keep: block i was read from a file into the worker's buffer and
 * hashed there.  One the DDT holds already needs no bytes; any other is
 * copied into the batch for the lookup (verify) and compress stages, so
 * most of a changed copy's blocks are never copied at all. */
static bool dd_writer_keep(void *ctx, const dd_pbatch *b, size_t i,
			   unsigned worker)
{
	dd_writer *w = ctx;
	dd_blk *bk = &b->pb_blk[i];   /* bk_aux is the sink's own */
	dd_ddt_key key = {.dk_variant = 0};
	dd_txn *t;

	if (w->w_store->st_verify)
		return true;
	t = dd_writer_probe_txn(w, worker);
	if (t && w->w_loc && dd_wloc_match(w, worker, t, bk)) {
		bk->bk_aux = DD_AUX_LOCAL;
		return false;
	}
	memcpy(key.dk_hash, bk->bk_hash, DD_HASH_SIZE);
	switch (dd_writer_probe(w, t, &key)) {
	case 1:
		if (w->w_loc)
			dd_wloc_adopt(w, worker, t, bk);
		return false;
	case 0:
		bk->bk_aux = DD_AUX_PROBED_NEW |
			     (w->w_ncommit & (DD_AUX_PROBED_NEW - 1));
		return true;
	default:
		return true;
	}
}

/* po_keep_ahead: the key filter's blocks for block i, whose probe comes
 * a few blocks later -- one cache miss per segment, waited for once
 * for several blocks instead of once per block. */
static void dd_writer_keep_ahead(void *ctx, const dd_pbatch *b, size_t i)
{
	dd_writer *w = ctx;

	if (!w->w_store->st_verify)
		dd_db_kf_prefetch(w->w_store->st_db, b->pb_blk[i].bk_hash);
}

/* ---- stage 2: lookup ---------------------------------------------------*/

int dd_writer_same_ent(dd_writer *w, const dd_ddt_key *key,
		       const dd_ddt_ent *ent, const uint8_t *data,
		       uint32_t lsize, bool *same)
{
	int rc;

	*same = false;
	if (ent->de_lsize != lsize)
		return 0;
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

int dd_writer_same_op(dd_writer *w, const dd_wop *op, const uint8_t *data,
		      uint32_t lsize, bool *same)
{
	const dd_pbatch *b;
	dd_ddt_ent ent;

	*same = false;
	if (op->op_lsize != lsize)
		return 0;
	if (op->op_placed) {
		/* the record may still be in this writer's pack buffer */
		int rc = dd_writer_flush_packs(w);

		if (rc)
			return rc;
		ent = (dd_ddt_ent){.de_codec = op->op_codec,
				   .de_pack = op->op_pack,
				   .de_offset = op->op_off,
				   .de_psize = op->op_psize,
				   .de_lsize = op->op_lsize};
		return dd_writer_same_ent(w, &op->op_key, &ent, data, lsize,
					  same);
	}
	/* a block of this batch or of the one still being stored */
	b = dd_pipe_batch(w->w_pipe, (unsigned)(op->op_off >> 32));
	*same = !memcmp(b->pb_data + b->pb_blk[op->op_off & 0xffffffffu].bk_off,
			data, lsize);
	return 0;
}

/* Block i's fate, as an op of the interval: a reference to a NEW block of
 * this interval or to a usable DDT entry, or new -- listed for
 * compression, bk_aux its op.  In verify mode a hash match is compared
 * byte by byte; a mismatch tries the next variant of the key
 * (format/ddt.md §2). */
static int dd_lookup_blk(dd_writer *w, dd_pbatch *b, size_t i,
			 bool probed_new, bool local)
{
	dd_blk *bk = &b->pb_blk[i];
	const uint8_t *data = b->pb_data + bk->bk_off;
	dd_wop op = {.op_idx = bk->bk_idx, .op_ioff = bk->bk_ioff,
		     .op_lsize = bk->bk_len};
	dd_ddt_ent ent;
	uint32_t at;
	int rc;

	memcpy(op.op_key.dk_hash, bk->bk_hash, DD_HASH_SIZE);
	for (unsigned v = 0; v <= DD_DDT_MAX_VARIANT; v++) {
		const dd_wop *mine;
		bool same = true;

		op.op_key.dk_variant = (uint8_t)v;
		mine = dd_wops_find_new(&w->w_ops, &op.op_key, &at);
		if (mine) {
			if (w->w_store->st_verify)
				rc = dd_writer_same_op(w, mine, data,
						       bk->bk_len, &same);
			else
				rc = 0;
			if (rc)
				return rc;
			if (!same)
				continue;
			op.op_kind = DD_OP_PREF;
			op.op_target = at;
			return dd_wops_add(&w->w_ops, &w->w_err, &op, NULL);
		}
		if (bk->bk_nodata) {
			/* dd_writer_probe found the entry usable, and gc keeps
			 * it so for this writer: no second descent (a commit
			 * that no longer finds it fails, dd_apply_ref); or a
			 * committed snapshot's map holds it (wloc.c) */
			op.op_kind = local ? DD_OP_LREF : DD_OP_REF;
			w->w_map_blocks += local;
			return dd_wops_add(&w->w_ops, &w->w_err, &op, NULL);
		}
		if (probed_new ||
		    !dd_db_kf_maybe(w->w_store->st_db, bk->bk_hash)) {
			rc = DD_ENOENT;    /* see DD_AUX_PROBED_NEW */
		} else {
			rc = dd_ddt_get(w->w_rtxn, &w->w_err, &op.op_key, &ent);
			if (rc == 0 && !dd_writer_usable(w, &ent))
				rc = DD_ENOENT;
		}
		if (rc == DD_ENOENT) {
			op.op_kind = DD_OP_NEW;
			/* where the bytes are until stored: the pipeline's
			 * batch, block in it */
			op.op_off = (uint64_t)b->pb_id << 32 | i;
			rc = dd_wops_add(&w->w_ops, &w->w_err, &op, &at);
			if (rc)
				return rc;
			bk->bk_kind = DD_BLK_SINK; /* new */
			bk->bk_aux = at;
			dd_pipe_mark(b, i);
			return 0;
		}
		if (rc)
			return rc;
		if (w->w_store->st_verify) {
			rc = dd_writer_same_ent(w, &op.op_key, &ent, data,
						bk->bk_len, &same);
			if (rc)
				return rc;
		}
		if (same) {
			op.op_kind = DD_OP_REF;
			return dd_wops_add(&w->w_ops, &w->w_err, &op, NULL);
		}
	}
	return dd_err_set(&w->w_err, DD_ENOSPC,
			  "more than %d different blocks share one hash",
			  DD_DDT_MAX_VARIANT + 1);
}

/* Blocks of a batch whose key-index slot is fetched before their lookup
 * (dd_wops_prefetch_key): a few lookups' time covers a miss to memory. */
#define DD_LOOKUP_AHEAD 8

/* po_lookup: against the newest commit, parked again after the batch so
 * that a writer waiting for input holds nothing back. */
static int dd_writer_lookup(void *ctx, dd_pbatch *b)
{
	dd_writer *w = ctx;
	int rc = dd_writer_renew(w);

	for (size_t i = 0; !rc && i < b->pb_nblk; i++) {
		dd_blk *bk = &b->pb_blk[i];
		bool probed_new = dd_writer_probed_new(w, bk->bk_aux);
		bool local = bk->bk_aux == DD_AUX_LOCAL;

		const dd_blk *ahead = i + DD_LOOKUP_AHEAD < b->pb_nblk
					      ? &b->pb_blk[i + DD_LOOKUP_AHEAD]
					      : NULL;

		if (ahead && ahead->bk_kind != DD_BLK_ZERO)
			dd_wops_prefetch_key(&w->w_ops, ahead->bk_hash);
		bk->bk_aux = 0;
		if (bk->bk_kind == DD_BLK_ZERO) {
			w->w_zero++;
			dd_digest_block(w->w_digest, NULL, bk->bk_len);
			continue;
		}
		rc = dd_lookup_blk(w, b, i, probed_new, local);
		if (!rc)
			dd_digest_block(w->w_digest, bk->bk_hash, bk->bk_len);
	}
	dd_txn_reset(w->w_rtxn);
	if (rc)
		return rc;
	w->w_blocks += b->pb_nblk;
	w->w_size += b->pb_bytes;
	return 0;
}

/* ---- stage 4: store ----------------------------------------------------*/

/* A store without compression keeps each new block's own bytes, which
 * stay in the batch until it is stored: stage 3 only names the codec
 * (dd_writer_raw), and the record is appended from the batch.  At 4 KiB
 * blocks the copy stage 3 made was 4% of a new put's CPU. */
static bool dd_writer_raw_store(const dd_writer *w)
{
	return w->w_store->st_compress == DD_COMPRESS_NONE;
}

static int dd_writer_raw(dd_codec_ctx *c, dd_err *err, void *dst,
			 const void *src, size_t len, uint32_t *psize,
			 uint8_t *codec)
{
	(void)c;
	(void)err;
	(void)dst;
	(void)src;
	*psize = (uint32_t)len;
	*codec = DD_CODEC_NONE;
	return 0;
}

/* Stores the j-th new block of b: its record appended, its op placed. */
static int dd_store_blk(dd_writer *w, dd_pbatch *b, size_t j)
{
	dd_blk *bk = &b->pb_blk[b->pb_new[j]];
	dd_wop *op = &w->w_ops.wo_op[bk->bk_aux];
	dd_pack_rec rec = {
		.pr_codec = bk->bk_codec,
		.pr_lsize = bk->bk_len,
		.pr_psize = bk->bk_psize,
	};
	int rc;

	memcpy(rec.pr_hash, bk->bk_hash, DD_HASH_SIZE);
	rc = dd_writer_append(w, &rec, dd_writer_raw_store(w)
					       ? b->pb_data + bk->bk_off
					       : dd_pipe_payload(w->w_pipe, b, j),
			      &op->op_pack, &op->op_off);
	if (rc)
		return rc;
	op->op_placed = true;
	op->op_codec = bk->bk_codec;
	op->op_psize = bk->bk_psize;
	return 0;
}

/* po_store_late: a commit must find every NEW op placed, so at a commit
 * point the batch is stored and committed before the next batch is
 * looked up.  Otherwise it waits, and is stored while the pool works: a
 * block of the next batch that this one holds finds its NEW op (a PREF),
 * and storing this batch then places it. */
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
		rc = dd_writer_sync_commit(w);
	return rc;
}

static const dd_pipe_ops dd_writer_ops = {
	.po_lookup = dd_writer_lookup,
	.po_store = dd_writer_store,
	.po_store_late = dd_writer_store_late,
	.po_keep = dd_writer_keep,
	.po_keep_ahead = dd_writer_keep_ahead,
};

/* ---- public ------------------------------------------------------------*/

/* The byte pipeline (chunk/pipeline.h) on the store's pool and its
 * workers' codecs, in batches of 4 MiB or 16 blocks; the probes. */
static int dd_writer_pipe(dd_writer *w)
{
	dd_store *s = w->w_store;
	dd_cutter cut;
	int rc;
	dd_pipe_cfg cfg = {
		.pc_pool = s->st_pool,
		.pc_pool_lock = &s->st_pool_lock,
		.pc_hash_kind = s->st_hash_kind,
		.pc_cut = &cut,
		.pc_ncut = 1,
		.pc_compress = dd_writer_raw_store(w) ? dd_writer_raw
						      : dd_codec_compress,
		.pc_zbound = dd_codec_bound(s->st_block_max),
		.pc_zkeep = !dd_writer_raw_store(w),
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
	cfg.pc_zctx_solo = w->w_sc.sc_codec;
	dd_cutter_init(&cut, s->st_chunker, w->w_bs);
	rc = dd_pipe_new(&w->w_pipe, &cfg);
	if (!rc)
		dd_wloc_open(w);
	return rc;
}

int dd_writer_begin(dd_writer **out, dd_store *s, const char *name)
{
	dd_writer *w;
	int rc;

	if (!out)
		return s ? dd_store_failf(s, DD_EINVAL, "dd_writer_begin: "
					  "NULL argument") : DD_EINVAL;
	rc = dd_writer_open(&w, s, name, 0, false, 0);
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
	w->w_fed += n;
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
	w->w_fed += len;
	return rc ? dd_writer_fail(w, rc) : 0;
}

/* The range goes to the pipeline, whose hash stage reads it on the pool
 * (chunk/pipeline.c). */
/* A deferring writer keeps each block's op until its flush, at most
 * w_defer_max of them (wops.c): room for a file of len bytes' ops. */
static void dd_writer_reserve_ops(dd_writer *w, uint64_t len)
{
	uint64_t n = len / w->w_store->st_block_size + 1;

	if (n > w->w_defer_max)
		n = w->w_defer_max;
	dd_wops_reserve(&w->w_ops, w->w_ops.wo_n + (size_t)n);
}

int dd_writer_write_file(dd_writer *w, int fd, uint64_t off, uint64_t len)
{
	int rc;

	rc = dd_writer_check_open(w);
	if (rc)
		return rc;
	if (fd < 0 || off > INT64_MAX || len > INT64_MAX - off)
		return dd_writer_fail(w, dd_err_set(&w->w_err, DD_EINVAL,
				"dd_writer_write_file: bad descriptor or range"));
	rc = dd_wloc_range(w, fd, off, len);
	if (!rc && w->w_defer)
		dd_writer_reserve_ops(w, len);
	if (!rc)
		rc = dd_pipe_file(w->w_pipe, fd, off, len, "the input");
	w->w_fed += len;
	return rc ? dd_writer_fail(w, rc) : 0;
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
	if (!w || w->w_state == DD_W_COMMITTED || w->w_state == DD_W_ABORTED ||
	    w->w_state == DD_W_SUSPENDED)
		return;
	dd_pipe_wait(w->w_pipe);
	dd_writer_release(w, true);
	w->w_state = DD_W_ABORTED;
}

void dd_writer_free(dd_writer *w)
{
	if (!w)
		return;
	if (w->w_state == DD_W_OPEN || w->w_state == DD_W_FAILED)
		dd_writer_abort(w);
	dd_pipe_free(w->w_pipe);
	if (w->w_lockfd >= 0 || w->w_regfd >= 0)
		dd_writer_release(w, false);
	dd_wloc_free(w);
	dd_free(w->w_probe);
	dd_free(w->w_zctx);
	dd_wops_free(&w->w_ops);
	dd_wub_free(w);
	dd_scratch_fini(&w->w_sc);
	dd_free(w->w_vbuf);
	dd_digest_free(w->w_digest);
	dd_free(w);
}

const char *dd_writer_errmsg(const dd_writer *w)
{
	if (!w)
		return "DD_EINVAL: NULL writer";
	return w->w_err.de_code ? w->w_err.de_msg : "no error";
}
