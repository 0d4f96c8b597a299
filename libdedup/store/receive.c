/*
 * receive.c -- the receiving writer: a snapshot writer (writer.c) fed
 * with hashed, compressed blocks instead of bytes.
 *
 * Used by the replication stream's receiver.  It wraps a dd_writer that
 * has no byte pipeline and keeps what only receiving needs in its own
 * struct (dd_replica_writer).  For each block, in order: the payload is
 * decompressed and its SHA-256 compared with the hash the stream claims
 * (a mismatch is DD_ECHECKSUM: nothing unverified is stored) -- DATA
 * blocks are held and hashed a list at a time, as many as the hasher
 * has lanes (dd_replica_drain), then stored one by one as if each had
 * come alone, so a failure still ends the receive at its block; the DDT is
 * consulted -- a block the store holds (from any snapshot, not only this
 * stream) gets a reference, and in verify mode only after a byte
 * comparison; a new block's payload is appended to the pack as it
 * arrived, without recompressing.  Indices not given are holes.  Commits
 * follow the writer's rules (writer.c): intermediate commits keep the
 * snapshot pending and invisible; dd_replica_finish adds it only when the
 * content digest matches the one the stream announced.
 *
 * A resumable receive writes its state (format/store.md §5) into its
 * pending entry at every commit (the writer's commit hook), so what
 * arrived survives a failure or a crash; recovery leaves such an entry
 * alone, and dd_replica_resume continues it from its next block.  The
 * resume token that names it is written and parsed here, and nowhere
 * else.
 *
 * Blocks come by position: a block index in a store of fixed blocks, a
 * byte offset in one of content-defined blocks (format/stream.md §12),
 * where the bytes between one block's end and the next block are a hole
 * and each block has the length the stream gives it (up to the store's
 * longest).  The content digest counts blocks and holes as the formats
 * do, so the snapshot's record takes its counts from it (writer.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/kfilter.h"
#include "common/alloc.h"
#include "common/endian.h"
#include "store/replica.h"
#include "store/writer_internal.h"

/* A DATA block taken but not yet stored (dd_replica_put_data). */
struct dd_replica_held {
	uint64_t rh_idx;
	uint8_t rh_hash[DD_HASH_SIZE];
	uint8_t rh_codec;
	uint32_t rh_lsize, rh_psize;
	size_t rh_pay;            /* its payload, at rpw_pay + rh_pay */
	size_t rh_data;           /* where it decompresses, in rpw_data */
};

struct dd_replica_writer {
	dd_writer *rpw_w;
	bool rpw_var;             /* content-defined: positions are bytes */
	bool rpw_resumable;       /* keep what arrived on failure */
	uint64_t rpw_final_size;  /* the size the stream announced */
	uint8_t rpw_final_digest[DD_HASH_SIZE];
	/* DATA blocks held to be hashed as one list: up to the hasher's
	 * lanes, their payloads copied (a decoder's are valid until its
	 * next record), stored in order by dd_replica_drain */
	struct dd_replica_held rpw_held[DD_BLOCK_LIST_MAX];
	size_t rpw_nheld, rpw_width;
	uint8_t *rpw_pay, *rpw_data;
	size_t rpw_pay_used, rpw_data_used, rpw_cap;
};

/* Bytes of decompressed blocks, and of their payloads, held for one
 * list: sixteen 128 KiB blocks. */
#define DD_REPLICA_HOLD_BYTES ((size_t)2 << 20)

/* Wraps writer w, which dd_writer_open opened (the caller frees it on
 * failure). */
static int dd_replica_new(dd_replica_writer **out, dd_writer *w)
{
	dd_replica_writer *rw = dd_calloc(1, sizeof(*rw));

	if (!rw)
		return dd_err_set(&w->w_err, DD_ENOMEM, "out of memory");
	rw->rpw_w = w;
	rw->rpw_var = w->w_store->st_chunker != DD_CHUNKER_FIXED;
	rw->rpw_width = dd_hasher_list_width();
	if (rw->rpw_width > DD_BLOCK_LIST_MAX)
		rw->rpw_width = DD_BLOCK_LIST_MAX;
	/* a list's blocks and payloads: DD_REPLICA_HOLD_BYTES each, or one
	 * block of the store's largest */
	rw->rpw_cap = dd_codec_bound(w->w_store->st_block_max);
	if (rw->rpw_cap < DD_REPLICA_HOLD_BYTES)
		rw->rpw_cap = DD_REPLICA_HOLD_BYTES;
	*out = rw;
	return 0;
}

/* A stream is received into a store that cuts the same way only: the
 * blocks of one would not deduplicate against the other's, and a store's
 * snapshots all have its block geometry (format/stream.md §12). */
static int dd_replica_geometry(dd_err *err, const dd_store *s, int chunker,
			       uint32_t block_size)
{
	if (chunker == s->st_chunker && block_size == s->st_block_size)
		return 0;
	if (chunker == s->st_chunker)
		return dd_err_set(err, DD_EBLOCKSIZE,
				  "stream block size %u differs from the "
				  "store's %u", block_size, s->st_block_size);
	return dd_err_set(err, DD_EBLOCKSIZE, "the stream's blocks are cut by "
			  "%s (%s %u), the store's by %s (%s %u): receive it "
			  "into a store created with the same chunker and "
			  "block size", dd_chunker_name(chunker),
			  chunker == DD_CHUNKER_FIXED ? "block size"
						      : "average",
			  block_size, dd_chunker_name(s->st_chunker),
			  s->st_chunker == DD_CHUNKER_FIXED ? "block size"
							    : "average",
			  s->st_block_size);
}

/* The position the next block may have: a block index, or a byte. */
static uint64_t dd_replica_next(const dd_replica_writer *rw)
{
	return rw->rpw_var ? rw->rpw_w->w_size : rw->rpw_w->w_blocks;
}

int dd_replica_begin(dd_replica_writer **out, dd_err *err, dd_store *s,
		     const char *name, int chunker, uint32_t block_size,
		     int dv)
{
	dd_writer *w;
	int rc;

	if (s->st_hash_kind != DD_HASH_SHA256)
		return dd_err_set(err, DD_ENOTSUP,
				  "store is not keyed by SHA-256");
	rc = dd_replica_geometry(err, s, chunker, block_size);
	if (rc)
		return rc;
	rc = dd_writer_open(&w, s, name, 0, true, dv);
	if (rc)
		return dd_err_copy(err, &s->st_err);
	rc = dd_replica_new(out, w);
	if (rc) {
		dd_err_copy(err, &w->w_err);
		dd_writer_free(w);
	}
	return rc;
}

/* Accounts the holes before idx and checks the order.  Like the other
 * checks of a block before anything is stored, a failure here leaves the
 * writer open: the receive can still be suspended (resumable) or
 * aborted. */
static int dd_replica_advance(dd_replica_writer *rw, uint64_t idx,
			      uint32_t lsize)
{
	dd_writer *w = rw->rpw_w;

	if (w->w_state != DD_W_OPEN)
		return dd_err_set(&w->w_err, DD_ESTATE, "writer is not open");
	if (idx < dd_replica_next(rw))
		return dd_err_set(&w->w_err, DD_EFORMAT,
				"block %llu out of order",
				(unsigned long long)idx);
	if (lsize == 0 || lsize > w->w_store->st_block_max)
		return dd_err_set(&w->w_err, DD_EFORMAT,
				"block %llu: size %u out of range",
				(unsigned long long)idx, lsize);
	if (rw->rpw_var) {
		/* the bytes up to the block are a hole */
		if (idx > w->w_size)
			dd_digest_block(w->w_digest, NULL, idx - w->w_size);
		w->w_size = idx;
		return 0;
	}
	/* a short block must be the image's last: nothing may follow it */
	if (w->w_size != w->w_blocks * (uint64_t)w->w_bs)
		return dd_err_set(&w->w_err, DD_EFORMAT,
				"block %llu follows a short block",
				(unsigned long long)idx);
	dd_digest_zeros(w->w_digest, idx - w->w_blocks);
	w->w_zero += idx - w->w_blocks;
	w->w_blocks = idx;
	return 0;
}

/* Lookups read the catalog as of at most this many blocks ago. */
#define DD_REPLICA_RENEW_BLOCKS 1024u

/* The next block is op: accounted, and the interval committed when due. */
static int dd_replica_account(dd_replica_writer *rw, dd_wop *op,
			      uint32_t lsize)
{
	dd_writer *w = rw->rpw_w;
	int rc;

	op->op_idx = w->w_blocks;
	op->op_ioff = w->w_size;
	op->op_lsize = lsize;
	rc = dd_wops_add(&w->w_ops, &w->w_err, op, NULL);
	if (rc)
		return rc;
	dd_digest_block(w->w_digest, op->op_key.dk_hash, lsize);
	w->w_blocks++;
	if (rw->rpw_var)
		w->w_size += lsize;
	else
		w->w_size = (w->w_blocks - 1) * (uint64_t)w->w_bs + lsize;
	w->w_uncommitted += lsize;
	++w->w_uncommitted_blocks;
	if (dd_writer_commit_due(w, 0, 0))
		return dd_writer_sync_commit(w);
	if (w->w_uncommitted_blocks % DD_REPLICA_RENEW_BLOCKS == 0)
		dd_txn_reset(w->w_rtxn);   /* renewed by the next lookup */
	return 0;
}

/* The read transaction of the lookups, moved to the newest commit when
 * parked (after a commit, and every DD_REPLICA_RENEW_BLOCKS). */
static int dd_replica_rtxn(dd_writer *w)
{
	if (w->w_rtxn && dd_txn_renew(w->w_rtxn, &w->w_err) == 0)
		return 0;
	return dd_writer_renew(w);
}

/* The op of block data (verify mode compares): a reference to a NEW block
 * of this interval (PREF) or to a usable DDT entry (REF), or NEW with
 * op_key the variant to try first. */
static int dd_replica_lookup(dd_replica_writer *rw, dd_wop *op,
			     const uint8_t *data, uint32_t lsize)
{
	dd_writer *w = rw->rpw_w;
	bool verify = w->w_store->st_verify;
	int rc = dd_replica_rtxn(w);

	for (unsigned v = 0; !rc && v <= DD_DDT_MAX_VARIANT; v++) {
		const dd_wop *mine;
		dd_ddt_ent ent;
		uint32_t at;
		bool same = true;

		op->op_key.dk_variant = (uint8_t)v;
		mine = dd_wops_find_new(&w->w_ops, &op->op_key, &at);
		if (mine) {
			if (verify)
				rc = dd_writer_same_op(w, mine, data, lsize,
						       &same);
			if (!rc && same) {
				op->op_kind = DD_OP_PREF;
				op->op_target = at;
				return 0;
			}
			continue;
		}
		/* most new blocks stop here, without a DDT read, as a put's
		 * probe does (kfilter.h: a false "no" only stores a copy
		 * that the commit turns into a reference) */
		if (!dd_db_kf_maybe(w->w_store->st_db, op->op_key.dk_hash)) {
			op->op_kind = DD_OP_NEW;
			return 0;
		}
		rc = dd_ddt_get(w->w_rtxn, &w->w_err, &op->op_key, &ent);
		if (rc == DD_ENOENT || (!rc && !dd_writer_usable(w, &ent))) {
			op->op_kind = DD_OP_NEW;
			return 0;
		}
		if (!rc && verify)
			rc = dd_writer_same_ent(w, &op->op_key, &ent, data,
						lsize, &same);
		if (!rc && same) {
			op->op_kind = DD_OP_REF;
			return 0;
		}
	}
	return rc ? rc : dd_err_set(&w->w_err, DD_ENOSPC,
				    "more than %d different blocks share one "
				    "hash", DD_DDT_MAX_VARIANT + 1);
}

/* A DATA block whose payload decompressed into data and hashed to got
 * (rc: the decompression's failure, in *derr): checked against the
 * stream's hash, then looked up, stored when new and accounted -- what
 * the serial receive did per block, in the same order of checks. */
static int dd_replica_store(dd_replica_writer *rw,
			    const struct dd_replica_held *h,
			    const void *payload, uint8_t *data,
			    const uint8_t got[DD_HASH_SIZE], int drc,
			    const dd_err *derr)
{
	dd_writer *w = rw->rpw_w;
	dd_pack_rec rec = {.pr_codec = h->rh_codec, .pr_lsize = h->rh_lsize,
			   .pr_psize = h->rh_psize};
	dd_wop op = {0};
	int rc = dd_replica_advance(rw, h->rh_idx, h->rh_lsize);

	if (rc)
		return rc;
	if (h->rh_psize == 0 ||
	    (size_t)h->rh_psize > dd_codec_bound(w->w_store->st_block_max))
		return dd_err_set(&w->w_err, DD_EFORMAT,
				  "block %llu: payload size %u out of range",
				  (unsigned long long)h->rh_idx, h->rh_psize);
	if (drc)
		return dd_err_set_msg(&w->w_err, drc, derr->de_msg);
	if (memcmp(got, h->rh_hash, DD_HASH_SIZE))
		return dd_err_set(&w->w_err, DD_ECHECKSUM,
				  "block %llu: sha256 of the received data "
				  "does not match the stream",
				  (unsigned long long)h->rh_idx);
	memcpy(rec.pr_hash, h->rh_hash, DD_HASH_SIZE);
	memcpy(op.op_key.dk_hash, h->rh_hash, DD_HASH_SIZE);
	rc = dd_replica_lookup(rw, &op, data, h->rh_lsize);
	if (!rc && op.op_kind == DD_OP_NEW) {
		/* stored as it arrived, without recompressing */
		rc = dd_writer_append(w, &rec, payload, &op.op_pack,
				      &op.op_off);
		op.op_placed = true;
		op.op_codec = h->rh_codec;
		op.op_psize = h->rh_psize;
	}
	if (!rc)
		rc = dd_replica_account(rw, &op, h->rh_lsize);
	/* the checks above leave the writer open (a resumable receive
	 * keeps what arrived); a failure to store fails it */
	return rc ? dd_writer_fail(w, rc) : 0;
}

/* Stores the held blocks, in order: each decompressed into its place,
 * all hashed as one list (sixteen lanes: SHA-256 was a third of a 4 KiB
 * receive's CPU), then each stored as dd_replica_store says.  The first
 * that fails ends it, those after it dropped (the receive stops there,
 * as it did when each block was stored as it came). */
static int dd_replica_drain(dd_replica_writer *rw)
{
	dd_writer *w = rw->rpw_w;
	size_t n = rw->rpw_nheld;
	dd_hash_msg m[DD_BLOCK_LIST_MAX];
	uint8_t got[DD_BLOCK_LIST_MAX][DD_HASH_SIZE];
	dd_err derr[DD_BLOCK_LIST_MAX];
	int drc[DD_BLOCK_LIST_MAX];
	size_t nm = 0;
	int rc = 0;

	rw->rpw_nheld = rw->rpw_pay_used = rw->rpw_data_used = 0;
	for (size_t i = 0; i < n; i++) {
		const struct dd_replica_held *h = &rw->rpw_held[i];
		dd_pack_rec rec = {.pr_codec = h->rh_codec,
				   .pr_lsize = h->rh_lsize,
				   .pr_psize = h->rh_psize};

		memset(got[i], 0, DD_HASH_SIZE);
		memcpy(rec.pr_hash, h->rh_hash, DD_HASH_SIZE);
		derr[i].de_msg[0] = 0;
		drc[i] = dd_codec_decompress(w->w_sc.sc_codec, &derr[i], &rec,
					     rw->rpw_pay + h->rh_pay,
					     rw->rpw_data + h->rh_data);
		if (!drc[i])
			m[nm++] = (dd_hash_msg){rw->rpw_data + h->rh_data,
						h->rh_lsize, got[i]};
	}
	if (nm == 1)
		dd_hasher_sum(w->w_sc.sc_hasher, m[0].hm_p, m[0].hm_len,
			      m[0].hm_out);
	else if (nm)
		dd_hasher_sum_list(w->w_sc.sc_hasher, m, nm);
	/* (verify mode reads stored blocks into sc_dbuf to compare: these
	 * are apart, in rpw_data) */
	for (size_t i = 0; !rc && i < n; i++) {
		const struct dd_replica_held *h = &rw->rpw_held[i];

		rc = dd_replica_store(rw, h, rw->rpw_pay + h->rh_pay,
				      rw->rpw_data + h->rh_data, got[i],
				      drc[i], &derr[i]);
	}
	return rc;
}

/* Whether the held list takes one more block of lsize and psize bytes:
 * the hasher's lanes, and the bytes. */
static bool dd_replica_holds(const dd_replica_writer *rw, uint32_t lsize,
			     uint32_t psize)
{
	return rw->rpw_nheld < rw->rpw_width &&
	       rw->rpw_data_used + lsize <= rw->rpw_cap &&
	       rw->rpw_pay_used + psize <= rw->rpw_cap;
}

int dd_replica_put_data(dd_replica_writer *rw, uint64_t idx,
			const uint8_t hash[32], uint8_t codec, uint32_t lsize,
			uint32_t psize, const void *payload)
{
	dd_writer *w = rw->rpw_w;
	struct dd_replica_held *h;
	int rc = 0;

	/* sizes out of range go alone, to fail in order */
	if (lsize == 0 || lsize > w->w_store->st_block_max || psize == 0 ||
	    (size_t)psize > dd_codec_bound(w->w_store->st_block_max)) {
		uint8_t none[DD_HASH_SIZE] = {0};
		dd_err unused = {0};
		struct dd_replica_held bad = {.rh_idx = idx, .rh_codec = codec,
					      .rh_lsize = lsize,
					      .rh_psize = psize};

		rc = dd_replica_drain(rw);
		/* the advance or the size check fails it, before anything
		 * is decompressed */
		if (!rc)
			rc = dd_replica_store(rw, &bad, payload, NULL, none,
					      DD_EFORMAT, &unused);
		return rc;
	}
	if (!dd_replica_holds(rw, lsize, psize))
		rc = dd_replica_drain(rw);
	if (rc)
		return rc;
	if (!rw->rpw_pay) {
		rw->rpw_pay = dd_malloc(rw->rpw_cap);
		rw->rpw_data = dd_malloc(rw->rpw_cap);
		if (!rw->rpw_pay || !rw->rpw_data)
			return dd_err_set(&w->w_err, DD_ENOMEM,
					  "out of memory");
	}
	h = &rw->rpw_held[rw->rpw_nheld++];
	h->rh_idx = idx;
	memcpy(h->rh_hash, hash, DD_HASH_SIZE);
	h->rh_codec = codec;
	h->rh_lsize = lsize;
	h->rh_psize = psize;
	h->rh_pay = rw->rpw_pay_used;
	h->rh_data = rw->rpw_data_used;
	memcpy(rw->rpw_pay + h->rh_pay, payload, psize);
	rw->rpw_pay_used += psize;
	rw->rpw_data_used += lsize;
	return 0;
}

int dd_replica_put_ref(dd_replica_writer *rw, uint64_t idx,
		       const uint8_t hash[32], uint32_t lsize)
{
	dd_writer *w = rw->rpw_w;
	dd_wop op = {.op_kind = DD_OP_REF};
	const dd_wop *mine;
	dd_ddt_ent ent;
	uint32_t at;
	/* the blocks before it first: it may name one of them */
	int rc = dd_replica_drain(rw);

	if (rc)
		return rc;
	rc = dd_replica_advance(rw, idx, lsize);

	if (rc)
		return rc;
	/* A reference names the block by its SHA-256: variant 0 is the
	 * block with that hash (variants exist only under a test hash). */
	memcpy(op.op_key.dk_hash, hash, DD_HASH_SIZE);
	mine = dd_wops_find_new(&w->w_ops, &op.op_key, &at);
	if (mine) {
		ent.de_lsize = mine->op_lsize;
		ent.de_flags = 0;
		op.op_kind = DD_OP_PREF;
		op.op_target = at;
	} else {
		rc = dd_replica_rtxn(w);
		if (!rc)
			rc = dd_ddt_get(w->w_rtxn, &w->w_err, &op.op_key, &ent);
	}
	/* An entry dead since before this writer began may still be
	 * referenced: gc may free it before the commit, which then fails
	 * naming the block (dd_apply_ref). */
	if (rc == DD_ENOENT)
		return dd_err_set(&w->w_err, DD_EFORMAT,
				  "block %llu refers to a block neither sent "
				  "nor held by the store",
				  (unsigned long long)idx);
	if (!rc && ent.de_lsize != lsize)
		return dd_err_set(&w->w_err, DD_EFORMAT,
				  "block %llu: reference of %u bytes to a "
				  "block of %u", (unsigned long long)idx, lsize,
				  ent.de_lsize);
	if (!rc && (ent.de_flags & DD_DDE_MISSING))
		return dd_err_set(&w->w_err, DD_ECORRUPT,
				  "block %llu refers to a block this store has "
				  "lost (no pack holds it): send it as data "
				  "(a full stream)", (unsigned long long)idx);
	if (!rc)
		rc = dd_replica_account(rw, &op, lsize);
	return rc ? dd_writer_fail(w, rc) : 0;
}

int dd_replica_finish(dd_replica_writer *rw, uint64_t size,
		      const uint8_t digest[32])
{
	dd_writer *w = rw->rpw_w;
	uint64_t blocks = dd_block_count(size, w->w_bs);
	int rc = dd_replica_drain(rw);

	if (rc)
		return rc;
	if (w->w_state != DD_W_OPEN)
		return dd_err_set(&w->w_err, DD_ESTATE, "writer is not open");
	if (rw->rpw_var) {
		if (w->w_size > size)
			return dd_writer_fail(w, dd_err_set(&w->w_err,
				DD_EFORMAT, "blocks received run past the image "
				"size %llu", (unsigned long long)size));
		if (size > w->w_size)
			dd_digest_block(w->w_digest, NULL, size - w->w_size);
		w->w_size = size;
		rc = dd_writer_finish(w, digest);
		return rc ? dd_writer_fail(w, rc) : 0;
	}
	if (blocks < w->w_blocks || (w->w_blocks == blocks && blocks &&
				     w->w_size != size))
		return dd_writer_fail(w, dd_err_set(&w->w_err, DD_EFORMAT,
				"blocks received disagree with the image size "
				"%llu", (unsigned long long)size));
	dd_digest_zeros(w->w_digest, blocks - w->w_blocks);
	w->w_zero += blocks - w->w_blocks;
	w->w_blocks = blocks;
	w->w_size = size;
	rc = dd_writer_finish(w, digest);
	return rc ? dd_writer_fail(w, rc) : 0;
}

/* ---- resumable receives ---------------------------------------------------*/

#define DD_REPLICA_STATE_VERSION 1
#define DD_REPLICA_STATE_SIZE 69

typedef struct dd_replica_state {
	uint32_t rcs_block_size;
	uint64_t rcs_final_size;
	uint64_t rcs_next;        /* first block not received */
	uint64_t rcs_zero;
	uint64_t rcs_size;        /* bytes up to rcs_next */
	uint8_t rcs_digest[32];   /* the content digest announced */
} dd_replica_state;

static void dd_replica_state_encode(uint8_t *p, const dd_replica_state *st)
{
	p[0] = DD_REPLICA_STATE_VERSION;
	dd_put_le32(p + 1, st->rcs_block_size);
	dd_put_le64(p + 5, st->rcs_final_size);
	dd_put_le64(p + 13, st->rcs_next);
	dd_put_le64(p + 21, st->rcs_zero);
	dd_put_le64(p + 29, st->rcs_size);
	memcpy(p + 37, st->rcs_digest, 32);
}

static int dd_replica_state_decode(const dd_pend_rec *rec, dd_replica_state *st)
{
	const uint8_t *p = rec->pr_state;

	if (rec->pr_state_len != DD_REPLICA_STATE_SIZE ||
	    p[0] != DD_REPLICA_STATE_VERSION)
		return DD_ECORRUPT;
	st->rcs_block_size = dd_get_le32(p + 1);
	st->rcs_final_size = dd_get_le64(p + 5);
	st->rcs_next = dd_get_le64(p + 13);
	st->rcs_zero = dd_get_le64(p + 21);
	st->rcs_size = dd_get_le64(p + 29);
	memcpy(st->rcs_digest, p + 37, 32);
	if (st->rcs_block_size == 0 || st->rcs_zero > st->rcs_next ||
	    st->rcs_size > st->rcs_next * (uint64_t)st->rcs_block_size)
		return DD_ECORRUPT;
	return 0;
}

/* The writer's commit hook of a resumable receive: its state goes into
 * its pending entry, in the commit's transaction. */
static int dd_replica_save_state(void *ctx)
{
	dd_replica_writer *rw = ctx;
	dd_writer *w = rw->rpw_w;
	uint8_t blob[DD_REPLICA_STATE_SIZE];
	dd_replica_state st = {
		.rcs_block_size = w->w_bs,
		.rcs_final_size = rw->rpw_final_size,
		.rcs_next = dd_replica_next(rw),
		.rcs_zero = w->w_zero,
		.rcs_size = w->w_size,
	};

	memcpy(st.rcs_digest, rw->rpw_final_digest, 32);
	dd_replica_state_encode(blob, &st);
	return dd_pend_put_state(w->w_txn, &w->w_err, w->w_id, w->w_name, blob,
				 sizeof(blob));
}

int dd_replica_set_resumable(dd_replica_writer *rw, uint64_t size,
			     const uint8_t digest[32])
{
	rw->rpw_resumable = true;
	rw->rpw_final_size = size;
	memcpy(rw->rpw_final_digest, digest, 32);
	rw->rpw_w->w_on_commit = dd_replica_save_state;
	rw->rpw_w->w_on_commit_ctx = rw;
	return 0;
}

int dd_replica_suspend(dd_replica_writer *rw)
{
	dd_writer *w = rw->rpw_w;
	int rc;

	/* what arrived is kept: the blocks held too, up to the first that
	 * fails its checks (as if each had been stored as it came; the
	 * receive's own error stands) */
	if (rw->rpw_resumable && w->w_state == DD_W_OPEN)
		(void)dd_replica_drain(rw);
	if (!rw->rpw_resumable || w->w_state != DD_W_OPEN)
		return dd_err_set(&w->w_err, DD_ESTATE,
				  "receive cannot be kept for resuming");
	rc = dd_writer_sync_commit(w);
	if (rc)
		return dd_writer_fail(w, rc);
	w->w_state = DD_W_SUSPENDED;
	dd_writer_release(w, false);
	return 0;
}

struct dd_partial {
	const uint8_t *pa_digest;   /* NULL: any */
	const uint64_t *pa_next;    /* NULL: any; else where it resumes (two
				       kept receives of one stream, cut at
				       different places, may be there) */
	uint64_t pa_id;
	dd_pend_rec pa_rec;
	dd_replica_state pa_state;
	bool pa_found;
};

static int dd_partial_match(void *arg, uint64_t id, const dd_pend_rec *rec)
{
	struct dd_partial *pa = arg;
	dd_replica_state st;

	if (!rec->pr_state_len || dd_replica_state_decode(rec, &st))
		return 0;
	if (pa->pa_digest && memcmp(pa->pa_digest, st.rcs_digest, 32))
		return 0;
	if (pa->pa_next && *pa->pa_next != st.rcs_next)
		return 0;
	pa->pa_id = id;
	pa->pa_rec = *rec;
	pa->pa_state = st;
	pa->pa_found = true;
	return 1;
}

/* fn for every pend entry, in a read transaction of its own. */
static int dd_pend_read_walk(dd_store *s, dd_err *err, dd_pend_walk_fn fn,
			     void *ctx)
{
	dd_txn *txn;
	int rc = dd_txn_begin(s->st_db, err, false, &txn);

	if (rc)
		return rc;
	rc = dd_pend_walk(txn, err, fn, ctx);
	dd_txn_abort(txn);
	return rc;
}

static int dd_partial_find(dd_store *s, dd_err *err, struct dd_partial *pa)
{
	int rc = dd_pend_read_walk(s, err, dd_partial_match, pa);

	if (rc < 0)
		return rc;
	if (!pa->pa_found)
		return dd_err_set(err, DD_ENOENT, "no partial receive in the "
				  "store");
	return 0;
}

/* Feeds the digest with the blocks already received (holes as zeros),
 * up to position next; counts them for a content-defined map, whose
 * blocks are w_blocks too (the position of fixed ones). */
static int dd_replica_replay_digest(dd_replica_writer *rw, uint64_t next)
{
	dd_writer *w = rw->rpw_w;
	dd_bmap_cur *cur;
	dd_ddt_key key;
	uint64_t idx, at = 0;
	int rc = dd_writer_renew(w);

	if (!rc)
		rc = dd_bmap_open(w->w_rtxn, &w->w_err, w->w_id, &cur);
	if (rc)
		return rc;
	for (rc = dd_bmap_seek(cur, &w->w_err, 0, &idx, &key);
	     rc == 1 && idx < next; rc = dd_bmap_next(cur, &w->w_err, &idx, &key)) {
		uint32_t len = dd_bmap_len(cur);

		if (!rw->rpw_var) {
			dd_digest_zeros(w->w_digest, idx - at);
			dd_digest_block(w->w_digest, key.dk_hash, 0);
			at = idx + 1;
			continue;
		}
		if (idx < at || len > next - idx)
			rc = dd_err_set(&w->w_err, DD_ECORRUPT, "the kept "
					"receive's block map runs past its "
					"state: run dedup repair");
		if (rc < 0)
			break;
		if (idx > at)
			dd_digest_block(w->w_digest, NULL, idx - at);
		dd_digest_block(w->w_digest, key.dk_hash, len);
		w->w_blocks++;
		at = idx + len;
	}
	dd_bmap_close(cur);
	dd_txn_reset(w->w_rtxn);
	if (rc < 0)
		return rc;
	if (rw->rpw_var && next > at)
		dd_digest_block(w->w_digest, NULL, next - at);
	else if (!rw->rpw_var)
		dd_digest_zeros(w->w_digest, next - at);
	return 0;
}

int dd_replica_resume(dd_replica_writer **out, dd_err *err, dd_store *s,
		      const uint8_t digest[32], uint64_t from, int chunker,
		      uint32_t block_size, int dv)
{
	struct dd_partial pa = {.pa_digest = digest, .pa_next = &from};
	dd_replica_writer *rw = NULL;
	dd_writer *w;
	int rc = dd_replica_geometry(err, s, chunker, block_size);

	if (!rc)
		rc = dd_partial_find(s, err, &pa);
	if (rc == DD_ENOENT) {   /* one of this stream, elsewhere: say where */
		pa.pa_next = NULL;
		rc = dd_partial_find(s, err, &pa);
	}

	if (rc == DD_ENOENT)
		return dd_err_set(err, DD_ENOENT,
				  "no partial receive of this snapshot to "
				  "resume");
	if (rc)
		return rc;
	if (pa.pa_state.rcs_block_size != block_size)
		return dd_err_set(err, DD_EBLOCKSIZE, "stream block size %u "
				  "differs from the partial receive's %u",
				  block_size, pa.pa_state.rcs_block_size);
	if (pa.pa_state.rcs_next != from)
		return dd_err_set(err, DD_EINVAL,
				  "the stream resumes at block %llu, the "
				  "partial receive at block %llu",
				  (unsigned long long)from,
				  (unsigned long long)pa.pa_state.rcs_next);
	/* the version is the resuming stream's: its digest found the kept
	 * receive, and a digest of one version is never one of the other */
	rc = dd_writer_open(&w, s, pa.pa_rec.pr_name, pa.pa_id, true, dv);
	if (rc)
		return dd_err_copy(err, &s->st_err);
	w->w_zero = pa.pa_state.rcs_zero;
	w->w_size = pa.pa_state.rcs_size;
	rc = dd_replica_new(&rw, w);
	if (!rc && rw->rpw_var && w->w_size != pa.pa_state.rcs_next)
		rc = dd_err_set(&w->w_err, DD_ECORRUPT, "the kept receive's "
				"state is damaged: discard it (ddrecv -A)");
	if (!rc) {
		/* fixed: blocks are positions; content-defined: counted */
		if (!rw->rpw_var)
			w->w_blocks = pa.pa_state.rcs_next;
		dd_replica_set_resumable(rw, pa.pa_state.rcs_final_size,
					 digest);
		rc = dd_replica_replay_digest(rw, pa.pa_state.rcs_next);
	}
	if (rc) {
		dd_err_copy(err, &w->w_err);
		/* the kept receive stays as it was: only this attempt ends */
		w->w_state = DD_W_SUSPENDED;
		dd_writer_free(w);
		dd_free(rw);
		return rc;
	}
	*out = rw;
	return 0;
}

/* format/store.md §5: "ddr1:" + the digest in lowercase hex + ":" + the
 * next block index in decimal. */
static int dd_token_format(char *buf, size_t len, const uint8_t digest[32],
			   uint64_t next)
{
	int n = snprintf(buf, len, "ddr1:");

	for (int i = 0; i < 32 && n > 0 && (size_t)n < len; i++)
		n += snprintf(buf + n, len - (size_t)n, "%02x", digest[i]);
	if (n > 0 && (size_t)n < len)
		n += snprintf(buf + n, len - (size_t)n, ":%llu",
			      (unsigned long long)next);
	return n < 0 || (size_t)n >= len ? DD_EINVAL : 0;
}

int dd_replica_token_parse(dd_err *err, const char *tok, uint8_t digest[32],
			   uint64_t *next)
{
	char *end;

	if (strncmp(tok, "ddr1:", 5) != 0 || strlen(tok) < 5 + 64 + 2 ||
	    tok[5 + 64] != ':')
		return dd_err_set(err, DD_EINVAL, "resume token is malformed");
	for (int i = 0; i < 32; i++) {
		unsigned v;

		if (sscanf(tok + 5 + 2 * i, "%2x", &v) != 1)
			return dd_err_set(err, DD_EINVAL,
					  "resume token is malformed");
		digest[i] = (uint8_t)v;
	}
	*next = strtoull(tok + 5 + 64 + 1, &end, 10);
	if (*end)
		return dd_err_set(err, DD_EINVAL, "resume token is malformed");
	return 0;
}

int dd_replica_token(dd_store *s, dd_err *err, char *buf, size_t len,
		     char *name, size_t namelen)
{
	struct dd_partial pa = {0};
	int rc = dd_partial_find(s, err, &pa);

	if (rc)
		return rc;
	if (dd_token_format(buf, len, pa.pa_state.rcs_digest,
			    pa.pa_state.rcs_next))
		return dd_err_set(err, DD_EINVAL, "token buffer too small");
	if (name)
		snprintf(name, namelen, "%s", pa.pa_rec.pr_name);
	return 0;
}

struct dd_partial_each {
	dd_replica_token_fn pe_fn;
	void *pe_ctx;
	bool pe_stopped;
};

static int dd_partial_each(void *arg, uint64_t id, const dd_pend_rec *rec)
{
	struct dd_partial_each *pe = arg;
	dd_replica_state st;
	char tok[128];

	(void)id;
	if (!rec->pr_state_len || dd_replica_state_decode(rec, &st) ||
	    dd_token_format(tok, sizeof(tok), st.rcs_digest, st.rcs_next))
		return 0;    /* not a kept receive (a running writer) */
	if (pe->pe_fn(rec->pr_name, tok, pe->pe_ctx) == 0)
		return 0;
	pe->pe_stopped = true;
	return 1;
}

int dd_replica_tokens(dd_store *s, dd_err *err, dd_replica_token_fn fn,
		      void *ctx)
{
	struct dd_partial_each pe = {fn, ctx, false};
	int rc = dd_pend_read_walk(s, err, dd_partial_each, &pe);

	if (rc < 0)
		return rc;
	return pe.pe_stopped ? dd_err_set(err, DD_ECANCELED, "stopped by the "
					  "callback") : 0;
}

int dd_replica_writer_token(const dd_replica_writer *rw, char *buf, size_t len)
{
	if (rw->rpw_w->w_state != DD_W_SUSPENDED)
		return DD_ESTATE;
	return dd_token_format(buf, len, rw->rpw_final_digest,
			       dd_replica_next(rw));
}

const char *dd_replica_errmsg(const dd_replica_writer *rw)
{
	return dd_writer_errmsg(rw ? rw->rpw_w : NULL);
}

void dd_replica_free(dd_replica_writer *rw)
{
	if (!rw)
		return;
	dd_writer_free(rw->rpw_w);
	dd_free(rw->rpw_pay);
	dd_free(rw->rpw_data);
	dd_free(rw);
}

struct dd_partial_dead {
	dd_store *pd_store;
	uint64_t pd_id;           /* the first kept receive nobody resumes */
};

static int dd_partial_collect(void *arg, uint64_t id, const dd_pend_rec *rec)
{
	struct dd_partial_dead *pd = arg;

	if (rec->pr_state_len && !pd->pd_id &&
	    !dd_writer_alive(pd->pd_store, id))
		pd->pd_id = id;
	return 0;
}

int dd_replica_discard(dd_store *s, dd_err *err)
{
	struct dd_partial_dead pd = {.pd_store = s};
	uint64_t found = 0;
	int lockfd, rc = dd_store_enter(s, err, &lockfd);

	if (rc)
		return rc;
	do {
		dd_txn *txn;

		pd.pd_id = 0;
		rc = dd_txn_begin(s->st_db, err, true, &txn);
		if (rc)
			break;
		rc = dd_pend_walk(txn, err, dd_partial_collect, &pd);
		if (!rc && pd.pd_id) {
			rc = dd_snap_drop_refs(txn, err, pd.pd_id);
			if (!rc)
				rc = dd_pend_del(txn, err, pd.pd_id);
		}
		if (!rc && pd.pd_id) {
			rc = dd_txn_commit(txn, err);
			found++;
		} else {
			dd_txn_abort(txn);
		}
	} while (!rc && pd.pd_id);
	dd_store_leave(s, lockfd);
	if (!rc && !found)
		rc = dd_err_set(err, DD_ENOENT, "no partial receive to discard");
	return rc;
}
