/*
 * writer.c -- writing a snapshot: cut, hash, deduplicate, compress, store.
 *
 * Data arrives through dd_writer_write into a ring of three batch
 * buffers (4 MiB or 16 blocks, whichever is larger).  Each batch goes
 * through four stages:
 *
 *   1. hash     on the pool: SHA-256 per block, two blocks at a time
 *               (dd_hash_pair), and zero blocks found (holes: never
 *               hashed into the DDT);
 *   2. lookup   serial, in the writer's LMDB transaction: each block is a
 *               hole, a reference to a block the DDT holds (refcount + 1),
 *               or new.  A new block gets a PENDING placeholder entry at
 *               once, so a later block of the same batch dedups against
 *               it.  In verify mode a hash match is compared byte by byte
 *               (the batch's own bytes for a placeholder, a checked read
 *               for a stored block); a mismatch tries the next variant of
 *               the key (format/ddt.md §2);
 *   3. compress on the pool, new blocks only -- never compress what the
 *               DDT already holds;
 *   4. store    serial: records appended to the active pack, placeholders
 *               replaced by the real location.
 *
 * When batch k is full, one pool job starts that hashes batch k and
 * compresses batch k-1 together, and the caller goes on filling batch k+1
 * meanwhile, so both cores stay busy whether the data is new (compression
 * bound) or known (hash bound).  The next step waits for that job, looks
 * k up, starts the next job, and only then stores k-1 -- on the caller's
 * thread while the pool works (dd_pipeline_step says why that order is
 * safe).  Placeholders are never committed.
 *
 * Commits: every dd_writer_commit_bytes (512 MiB) the pack is synced and the
 * transaction committed, to bound LMDB's dirty pages; the snapshot is still
 * invisible (only a `pend` entry names it, so a crash is rolled back by the
 * next writer, store.c).  dd_writer_commit syncs the pack, then commits the
 * transaction that adds the snapshot record: data before metadata.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "chunk/chunk.h"
#include "common/alloc.h"
#include "common/io.h"
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

/* ---- stage 1: hash -----------------------------------------------------*/

/* Reads bytes [beg, end) of batch b's file range into dst.  A failed or
 * short read (the file shrank) fails the batch: the first one leaves its
 * message, and the lookup stage reports it. */
static bool dd_read_range(dd_batch *b, uint8_t *dst, size_t beg, size_t end)
{
	uint64_t off = b->bt_src_off + (beg - b->bt_src_start);
	size_t got = 0;
	dd_err err;
	int rc = dd_io_pread(&err, b->bt_src_fd, dst, end - beg, off, &got,
			     "the input");

	if (!rc && got < end - beg)
		rc = dd_err_set(&err, DD_EIO, "the input ends at offset %llu, "
				"inside the range given to the writer (did it "
				"shrink while read?)",
				(unsigned long long)(off + got));
	if (!rc)
		return true;
	if (atomic_exchange(&b->bt_read_failed, 1) == 0)
		dd_err_copy(&b->bt_read_err, &err);
	return false;
}

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

/* Stage 1, first half: block i's size, its bytes found and checked for
 * zeros.  A block that dd_writer_write_file handed over whole is read
 * into `hot`, this worker's buffer that stays in its cache for SHA-256,
 * and is copied into the batch later only if a later stage may need the
 * bytes (dd_hash_keep): most of a changed copy's blocks are never copied
 * at all.  Returns the bytes to hash, or NULL for a hole or a failed
 * read. */
static const uint8_t *dd_hash_prepare(dd_writer *w, dd_batch *b, size_t i,
				      uint8_t *hot)
{
	dd_slot *sl = &b->bt_slot[i];
	uint8_t *data = b->bt_data + i * w->w_bs;
	size_t beg = i * w->w_bs, end;

	sl->sl_lsize = (uint32_t)(b->bt_fill - beg < w->w_bs
					  ? b->bt_fill - beg : w->w_bs);
	sl->sl_key.dk_variant = 0;
	sl->sl_rc = 0;
	sl->sl_nodata = false;
	sl->sl_kind = DD_SLOT_ZERO; /* holes keep no bytes */
	end = beg + sl->sl_lsize;
	if (b->bt_src_fd >= 0 && beg < b->bt_src_end && end > b->bt_src_start) {
		size_t rb = beg > b->bt_src_start ? beg : b->bt_src_start;
		size_t re = end < b->bt_src_end ? end : b->bt_src_end;

		/* a block wholly in the file goes to `hot`; one that is part
		 * memory, part file gets its file part read into place */
		if (rb == beg && re == end)
			data = hot;
		if (!dd_read_range(b, data + (rb - beg), rb, re))
			return NULL;
	}
	if (dd_is_zero(data, sl->sl_lsize))
		return NULL;
	sl->sl_kind = DD_SLOT_DUP;
	return data;
}

/* Stage 1, second half, for a block hashed from the worker's buffer: one
 * the DDT holds already needs no bytes; any other is copied into the
 * batch for the lookup (verify) and compress stages. */
static void dd_hash_keep(dd_writer *w, dd_batch *b, size_t i,
			 unsigned worker, const uint8_t *hot)
{
	dd_slot *sl = &b->bt_slot[i];

	if (!w->w_store->st_verify &&
	    dd_writer_probe(w, &sl->sl_key, worker, b->bt_first + i))
		sl->sl_nodata = true;
	else
		memcpy(b->bt_data + i * w->w_bs, hot, sl->sl_lsize);
}

/* Stage 1 for blocks 2p and 2p+1: two blocks of the same size are hashed
 * together, their SHA-256 rounds interleaved (dd_hasher_sum2), which on
 * SHA-NI is 1.8 times the speed of one at a time. */
static void dd_hash_pair(dd_writer *w, dd_batch *b, size_t p, unsigned worker)
{
	dd_hasher *h = w->w_store->st_scratch[worker].sc_hasher;
	size_t first = 2 * p, n = first + 1 < b->bt_nblk ? 2 : 1;
	const uint8_t *data[2] = { NULL, NULL };
	uint8_t *hot = w->w_hot[worker];
	dd_slot *sl = &b->bt_slot[first];

	for (size_t k = 0; k < n; k++)
		data[k] = dd_hash_prepare(w, b, first + k, hot + k * w->w_bs);
	if (data[0] && data[1] && sl[0].sl_lsize == sl[1].sl_lsize) {
		dd_hasher_sum2(h, data[0], data[1], sl[0].sl_lsize,
			       sl[0].sl_key.dk_hash, sl[1].sl_key.dk_hash);
	} else {
		for (size_t k = 0; k < n; k++)
			if (data[k])
				dd_hasher_sum(h, data[k], sl[k].sl_lsize,
					      sl[k].sl_key.dk_hash);
	}
	for (size_t k = 0; k < n; k++)
		if (data[k] && data[k] == hot + k * w->w_bs)
			dd_hash_keep(w, b, first + k, worker, data[k]);
}

/* ---- stage 2: lookup ---------------------------------------------------*/

/* Verify mode: is the block of `ent` byte-identical to slot data? */
static int dd_same_bytes(dd_writer *w, dd_batch *b, const dd_ddt_key *key,
			 const dd_ddt_ent *ent, const uint8_t *data,
			 uint32_t lsize, bool *same)
{
	int rc;

	*same = false;
	if (ent->de_lsize != lsize)
		return 0;
	if (ent->de_flags & DD_DDE_PENDING) {
		/* a block of this batch or of the one still being stored */
		const dd_batch *pb = &w->w_batch[ent->de_offset >> 32];

		*same = !memcmp(pb->bt_data + (ent->de_offset & 0xffffffffu) *
						     w->w_bs,
				data, lsize);
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

static int dd_lookup_slot(dd_writer *w, dd_batch *b, size_t i)
{
	dd_slot *sl = &b->bt_slot[i];
	const uint8_t *data = b->bt_data + i * w->w_bs;
	dd_ddt_ent ent;
	int rc;

	for (unsigned v = 0; v <= DD_DDT_MAX_VARIANT; v++) {
		bool same = true;

		sl->sl_key.dk_variant = (uint8_t)v;
		rc = dd_ddt_get(w->w_txn, &w->w_err, &sl->sl_key, &ent);
		if (rc == DD_ENOENT && sl->sl_nodata)
			/* dd_writer_probe found it: see why it cannot go */
			return dd_err_set(&w->w_err, DD_ECORRUPT, "block %llu: "
					  "a DDT entry vanished while this "
					  "writer held the lock",
					  (unsigned long long)(b->bt_first + i));
		if (rc == DD_ENOENT) {
			ent = (dd_ddt_ent){
				.de_flags = DD_DDE_PENDING,
				/* where the bytes are until stored: ring
				 * slot of the batch, block in it */
				.de_offset = (uint64_t)(b - w->w_batch) << 32 | i,
				.de_lsize = sl->sl_lsize,
				.de_refcnt = 1,
			};
			sl->sl_kind = DD_SLOT_NEW;
			b->bt_new[b->bt_nnew++] = (uint32_t)i;
			return dd_ddt_put(w->w_txn, &w->w_err, &sl->sl_key, &ent);
		}
		if (rc)
			return rc;
		if (ent.de_flags & DD_DDE_MISSING) {
			/* a block repair found no copy of: this one is it
			 * (its hash says so), stored under the same key so
			 * that every snapshot using it reads again */
			ent.de_flags = DD_DDE_PENDING;
			ent.de_offset = (uint64_t)(b - w->w_batch) << 32 | i;
			ent.de_lsize = sl->sl_lsize;
			ent.de_refcnt++;
			sl->sl_kind = DD_SLOT_NEW;
			b->bt_new[b->bt_nnew++] = (uint32_t)i;
			return dd_ddt_put(w->w_txn, &w->w_err, &sl->sl_key, &ent);
		}
		if (w->w_store->st_verify) {
			rc = dd_same_bytes(w, b, &sl->sl_key, &ent, data,
					   sl->sl_lsize, &same);
			if (rc)
				return rc;
		}
		if (same) {
			ent.de_refcnt++;
			return dd_ddt_put(w->w_txn, &w->w_err, &sl->sl_key, &ent);
		}
	}
	return dd_err_set(&w->w_err, DD_ENOSPC,
			  "more than %d different blocks share one hash",
			  DD_DDT_MAX_VARIANT + 1);
}

/* The range is read: the batch lets its descriptor go. */
static void dd_batch_end_range(dd_batch *b)
{
	if (b->bt_src_fd >= 0)
		dd_io_close(b->bt_src_fd);
	b->bt_src_fd = -1;
}

static int dd_lookup_batch(dd_writer *w, dd_batch *b)
{
	if (b->bt_src_fd >= 0) {
		dd_batch_end_range(b); /* the hash stage has read it */
		if (atomic_load(&b->bt_read_failed))
			return dd_err_copy(&w->w_err, &b->bt_read_err);
	}
	b->bt_nnew = 0;
	for (size_t i = 0; i < b->bt_nblk; i++) {
		dd_slot *sl = &b->bt_slot[i];
		int rc;

		if (sl->sl_kind == DD_SLOT_ZERO) {
			w->w_zero++;
			dd_digest_block(w->w_digest, NULL);
			continue;
		}
		/* lookups touch random DDT pages: keep RSS bounded
		 * (store/replica.h) */
		dd_replica_trim_map(w->w_store, b->bt_first + i + 1);
		rc = dd_lookup_slot(w, b, i);
		if (!rc)
			rc = dd_bmap_append(w->w_txn, &w->w_err, w->w_id,
					    b->bt_first + i, &sl->sl_key);
		if (rc)
			return rc;
		dd_digest_block(w->w_digest, sl->sl_key.dk_hash);
	}
	return 0;
}

/* ---- stage 3: compress -------------------------------------------------*/

static void dd_compress_one(dd_writer *w, dd_batch *b, size_t j,
			    unsigned worker)
{
	uint32_t i = b->bt_new[j];
	dd_slot *sl = &b->bt_slot[i];
	dd_err err;

	sl->sl_rc = dd_codec_compress(w->w_store->st_scratch[worker].sc_codec,
				      &err, b->bt_out + (size_t)i * w->w_stride,
				      b->bt_data + (size_t)i * w->w_bs,
				      sl->sl_lsize, &sl->sl_psize,
				      &sl->sl_codec);
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

static int dd_store_slot(dd_writer *w, dd_batch *b, uint32_t i)
{
	dd_slot *sl = &b->bt_slot[i];
	dd_pack_rec rec = {
		.pr_codec = sl->sl_codec,
		.pr_lsize = sl->sl_lsize,
		.pr_psize = sl->sl_psize,
	};
	dd_ddt_ent ent;
	uint32_t pack;
	uint64_t off;
	int rc;

	if (sl->sl_rc)
		return dd_err_set(&w->w_err, sl->sl_rc,
				  "compressing block %llu failed",
				  (unsigned long long)(b->bt_first + i));
	memcpy(rec.pr_hash, sl->sl_key.dk_hash, DD_HASH_SIZE);
	rc = dd_writer_append(w, &rec, b->bt_out + (size_t)i * w->w_stride,
			      &pack, &off);
	if (!rc)
		rc = dd_ddt_get(w->w_txn, &w->w_err, &sl->sl_key, &ent);
	if (rc)
		return rc;
	ent.de_flags &= (uint16_t)~DD_DDE_PENDING;
	ent.de_codec = sl->sl_codec;
	ent.de_pack = pack;
	ent.de_offset = off;
	ent.de_psize = sl->sl_psize;
	return dd_ddt_put(w->w_txn, &w->w_err, &sl->sl_key, &ent);
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
	if (w->w_resumable && w->w_state == DD_W_OPEN)
		rc = dd_recv_save_state(w);
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

static void dd_writer_pool_release(dd_writer *w)
{
	if (w->w_pool_held) {
		pthread_mutex_unlock(&w->w_store->st_pool_lock);
		w->w_pool_held = false;
	}
}

/* The pool job: compress the previous batch's new blocks and hash the
 * current batch, as one parallel-for over both item lists. */
static void dd_pipeline_job(void *arg, size_t item, unsigned worker)
{
	dd_writer *w = arg;

	if (item < w->w_job_ncomp)
		dd_compress_one(w, w->w_compressing, item, worker);
	else
		dd_hash_pair(w, w->w_hashing, item - w->w_job_ncomp, worker);
}

static void dd_pipeline_wait(dd_writer *w)
{
	if (!w->w_job_running)
		return;
	/* the caller has filled its next batch: help instead of idling */
	dd_pool_join(w->w_store->st_pool);
	w->w_job_running = false;
	dd_writer_pool_release(w);
}

/* Stage 4 for a compressed batch. */
static int dd_batch_store(dd_writer *w, dd_batch *b)
{
	int rc = 0;

	for (size_t j = 0; !rc && j < b->bt_nnew; j++)
		rc = dd_store_slot(w, b, b->bt_new[j]);
	if (rc)
		return rc;
	w->w_uncommitted += b->bt_fill;
	w->w_uncommitted_blocks += b->bt_nblk;
	b->bt_fill = 0;
	b->bt_nnew = 0;
	return 0;
}

/* One step of the pipeline.  Finish the running job (it compressed batch
 * C and hashed batch H); look H up; start the next job (compress H, hash
 * the batch just filled, if any); then store C on this thread while the
 * pool works.  Looking H up before C is stored is safe: a block of H that
 * C holds meets C's PENDING placeholder, takes a reference on it, and
 * storing C then fills in the location.  An intermediate commit must not
 * see placeholders, so at a commit point C is stored and committed before
 * H is looked up.  Then filling moves to C's buffer, free again. */
static int dd_pipeline_step(dd_writer *w)
{
	dd_batch *fill = &w->w_batch[w->w_cur];
	dd_batch *comp, *hashed;
	int rc = 0;

	dd_pipeline_wait(w);
	comp = w->w_compressing;
	hashed = w->w_hashing;
	w->w_compressing = NULL;
	w->w_hashing = NULL;
	if (comp && dd_writer_commit_due(w, comp->bt_fill, comp->bt_nblk)) {
		rc = dd_batch_store(w, comp);
		comp = NULL;
		if (!rc)
			rc = dd_writer_sync_commit(w, true);
	}
	if (!rc && hashed)
		rc = dd_lookup_batch(w, hashed);
	if (rc)
		return rc;
	w->w_compressing = hashed;
	if (fill->bt_fill > 0) {
		fill->bt_nblk = (fill->bt_fill + w->w_bs - 1) / w->w_bs;
		fill->bt_first = w->w_blocks;
		fill->bt_nnew = 0;
		w->w_blocks += fill->bt_nblk;
		w->w_size += fill->bt_fill;
		w->w_hashing = fill;
		w->w_cur = (w->w_cur + 1) % DD_WRITER_RING;
	}
	w->w_job_ncomp = w->w_compressing ? w->w_compressing->bt_nnew : 0;
	if (w->w_job_ncomp || w->w_hashing) {
		pthread_mutex_lock(&w->w_store->st_pool_lock);
		w->w_pool_held = true;
		dd_pool_start(w->w_store->st_pool, dd_pipeline_job, w,
			      w->w_job_ncomp + (w->w_hashing
							? (w->w_hashing->bt_nblk + 1) / 2
							: 0));
		w->w_job_running = true;
	}
	if (comp)
		rc = dd_batch_store(w, comp);
	return rc;
}

/* Runs the pipeline until every batch is stored. */
static int dd_pipeline_drain(dd_writer *w)
{
	int rc = 0;

	while (!rc && (w->w_batch[w->w_cur].bt_fill > 0 || w->w_hashing ||
		       w->w_compressing || w->w_job_running))
		rc = dd_pipeline_step(w);
	return rc;
}

/* ---- public ------------------------------------------------------------*/

static int dd_batch_alloc(dd_writer *w, dd_batch *b)
{
	b->bt_data = dd_malloc(w->w_cap * w->w_bs);
	b->bt_slot = dd_calloc(w->w_cap, sizeof(*b->bt_slot));
	b->bt_out = dd_malloc(w->w_cap * w->w_stride);
	b->bt_new = dd_calloc(w->w_cap, sizeof(*b->bt_new));
	if (!b->bt_data || !b->bt_slot || !b->bt_out || !b->bt_new)
		return dd_err_set(&w->w_err, DD_ENOMEM, "out of memory");
	return 0;
}

static int dd_writer_alloc_workers(dd_writer *w)
{
	w->w_nworkers = w->w_store->st_nscratch;
	w->w_hot = dd_calloc(w->w_nworkers, sizeof(*w->w_hot));
	w->w_probe = dd_calloc(w->w_nworkers, sizeof(*w->w_probe));
	if (!w->w_hot || !w->w_probe)
		return dd_err_set(&w->w_err, DD_ENOMEM, "out of memory");
	for (unsigned i = 0; i < w->w_nworkers; i++)
		if (!(w->w_hot[i] = dd_malloc(2 * w->w_bs))) /* a pair */
			return dd_err_set(&w->w_err, DD_ENOMEM,
					  "out of memory");
	return 0;
}

/* Ends the probes' read txns: the writer gives up its lock after this. */
static void dd_writer_probe_end(dd_writer *w)
{
	for (unsigned i = 0; w->w_probe && i < w->w_nworkers; i++) {
		dd_txn_abort(w->w_probe[i]);
		w->w_probe[i] = NULL;
	}
}

static void dd_batch_free(dd_batch *b)
{
	dd_batch_end_range(b);
	dd_free(b->bt_data);
	dd_free(b->bt_slot);
	dd_free(b->bt_out);
	dd_free(b->bt_new);
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
	for (int i = 0; i < DD_WRITER_RING; i++)
		w->w_batch[i].bt_src_fd = -1; /* 0 would be a descriptor */
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
		rc = dd_digest_new(&w->w_digest, &w->w_err);
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
	w->w_cap = DD_WRITER_BATCH_BYTES / w->w_bs;
	if (w->w_cap < 16)
		w->w_cap = 16;
	w->w_stride = dd_codec_bound(w->w_bs);
	for (int i = 0; !rc && i < DD_WRITER_RING; i++)
		rc = dd_batch_alloc(w, &w->w_batch[i]);
	if (!rc)
		rc = dd_writer_alloc_workers(w);
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
	if (w->w_raw)
		return dd_writer_fail(w, dd_err_set(&w->w_err, DD_EINVAL,
				"a receiving writer takes blocks, not bytes"));
	return 0;
}

int dd_writer_buffer(dd_writer *w, void **buf, size_t *len)
{
	dd_batch *b;
	int rc;

	if (!w)
		return DD_EINVAL;
	if (!buf || !len)
		return dd_writer_fail(w, dd_err_set(&w->w_err, DD_EINVAL,
						    "NULL argument"));
	rc = dd_writer_check_open(w);
	if (rc)
		return rc;
	b = &w->w_batch[w->w_cur];
	*buf = b->bt_data + b->bt_fill;
	*len = w->w_cap * w->w_bs - b->bt_fill;
	return 0;
}

int dd_writer_produce(dd_writer *w, size_t n)
{
	dd_batch *b;
	int rc;

	rc = dd_writer_check_open(w);
	if (rc)
		return rc;
	b = &w->w_batch[w->w_cur];
	if (n > w->w_cap * w->w_bs - b->bt_fill)
		return dd_writer_fail(w, dd_err_set(&w->w_err, DD_EINVAL,
				"dd_writer_produce: %zu bytes is more than the "
				"buffer given", n));
	b->bt_fill += n;
	if (b->bt_fill == w->w_cap * w->w_bs) {
		rc = dd_pipeline_step(w);
		if (rc)
			return dd_writer_fail(w, rc);
	}
	return 0;
}

int dd_writer_write(dd_writer *w, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	int rc;

	if (!w)
		return DD_EINVAL;
	if (!buf && len)
		return dd_writer_fail(w, dd_err_set(&w->w_err, DD_EINVAL,
						    "NULL buffer"));
	rc = dd_writer_check_open(w);
	while (!rc && len > 0) {
		void *dst;
		size_t room;

		rc = dd_writer_buffer(w, &dst, &room);
		if (rc)
			break;
		if (room > len)
			room = len;
		memcpy(dst, p, room);
		p += room;
		len -= room;
		rc = dd_writer_produce(w, room);
	}
	return rc;
}

/* Reads the batch's pending file range now, on this thread: a batch holds
 * at most one, and the next one does not continue it. */
static int dd_batch_read_now(dd_writer *w, dd_batch *b)
{
	bool ok = dd_read_range(b, b->bt_data + b->bt_src_start,
				b->bt_src_start, b->bt_src_end);

	dd_batch_end_range(b);
	return ok ? 0 : dd_err_copy(&w->w_err, &b->bt_read_err);
}

/* Starts batch b's range at byte bt_fill: the batch keeps a descriptor of
 * its own, so the caller may close fd at once, and remembers the file by
 * device and inode, so that only the same file continues the range. */
static int dd_batch_start_range(dd_writer *w, dd_batch *b, int fd,
				const struct stat *st, uint64_t off)
{
	int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);

	if (dup < 0)
		return dd_err_set_errno(&w->w_err, errno, "dd_writer_write_file:"
					" cannot keep a descriptor of the file");
	b->bt_src_fd = dup;
	b->bt_src_dev = st->st_dev;
	b->bt_src_ino = st->st_ino;
	b->bt_src_off = off;
	b->bt_src_start = b->bt_src_end = b->bt_fill;
	atomic_store(&b->bt_read_failed, 0);
	return 0;
}

int dd_writer_write_file(dd_writer *w, int fd, uint64_t off, uint64_t len)
{
	struct stat st;
	int rc;

	rc = dd_writer_check_open(w);
	if (rc)
		return rc;
	if (fd < 0 || off > INT64_MAX || len > INT64_MAX - off)
		return dd_writer_fail(w, dd_err_set(&w->w_err, DD_EINVAL,
				"dd_writer_write_file: bad descriptor or range"));
	if (fstat(fd, &st) != 0)
		return dd_writer_fail(w, dd_err_set_errno(&w->w_err, errno,
				"dd_writer_write_file: fstat"));
	while (len > 0) {
		dd_batch *b = &w->w_batch[w->w_cur];
		size_t n = w->w_cap * w->w_bs - b->bt_fill;

		if (b->bt_src_fd >= 0 &&
		    (b->bt_src_dev != st.st_dev || b->bt_src_ino != st.st_ino ||
		     b->bt_src_end != b->bt_fill ||
		     b->bt_src_off + (b->bt_src_end - b->bt_src_start) != off))
			rc = dd_batch_read_now(w, b);
		if (!rc && b->bt_src_fd < 0)
			rc = dd_batch_start_range(w, b, fd, &st, off);
		if (rc)
			return dd_writer_fail(w, rc);
		if (n > len)
			n = (size_t)len;
		b->bt_src_end = b->bt_fill + n;
		off += n;
		len -= n;
		rc = dd_writer_produce(w, n);
		if (rc)
			return rc;
	}
	return 0;
}

int dd_writer_finish(dd_writer *w, const uint8_t *expect_digest)
{
	dd_snap_rec rec, existing;
	int rc;

	rec = (dd_snap_rec){
		.sr_id = w->w_id,
		.sr_block_size = w->w_bs,
		.sr_size = w->w_size,
		.sr_blocks = w->w_blocks,
		.sr_zero_blocks = w->w_zero,
		.sr_ctime = (int64_t)time(NULL),
	};
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
	w->w_resumable = false; /* done: no state to keep */
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
	rc = dd_pipeline_drain(w);
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
	dd_pipeline_wait(w);
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
	for (int i = 0; i < DD_WRITER_RING; i++)
		dd_batch_free(&w->w_batch[i]);
	dd_writer_probe_end(w);
	for (unsigned i = 0; w->w_hot && i < w->w_nworkers; i++)
		dd_free(w->w_hot[i]);
	dd_free(w->w_hot);
	dd_free(w->w_probe);
	dd_scratch_fini(&w->w_sc);
	dd_digest_free(w->w_digest);
	dd_free(w->w_vbuf);
	dd_free(w);
}

const char *dd_writer_errmsg(const dd_writer *w)
{
	if (!w)
		return "DD_EINVAL: NULL writer";
	return w->w_err.de_code ? w->w_err.de_msg : "no error";
}
