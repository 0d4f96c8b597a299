/*
 * reader.c -- random-access reads of a committed snapshot.
 *
 * A reader holds one LMDB read transaction for its lifetime: block map and
 * DDT stay consistent with each other as of the open, even if the snapshot
 * is deleted or gc moves blocks meanwhile (a pack gc removed after the open
 * is an error, never other bytes).  A read walks the block map with one
 * cursor from the first block of the range (a missing index is a hole),
 * looks every block up in the DDT, then reads, decompresses and verifies
 * the blocks in parallel on the store's pool -- or alone, when another
 * thread has the pool.  Whole blocks decompress straight into the caller's
 * buffer; only partial ones go through scratch.
 *
 * A reader also checks the block map itself: LMDB keeps no checksums, and
 * a map entry lost, moved or renamed by damage to the LMDB file would
 * otherwise read as a hole -- zeros for data, with no error.  While reads
 * go forward block by block from the image's start (a restore, a copy),
 * the reader feeds the hashes the map names, holes as zeros, into the
 * content digest (format/store.md §6); the read that reaches the last
 * block compares it with the snapshot's own and fails with DD_ECORRUPT on
 * a mismatch.  Any other read order stops the check: random access costs
 * nothing.
 *
 * Blocks are read through the store's caches (block.c).  A reader tells
 * them when it is in a long sequential run -- contiguous preads adding up
 * to DD_READER_SEQ_BYTES -- so that a restore or a copy is not fed to L2
 * by default (ZFS: l2arc_noprefetch).
 *
 * Read-ahead.  In a long sequential run, a read that ends before the
 * image does starts the next window -- as long as the read itself, at
 * most DD_READER_RA_BYTES and DD_READER_ROUND blocks -- decoding on the
 * reader's own pool (read-ahead pool, made at the first window) while the
 * caller uses what it got; the next read that starts where the window
 * does and covers it joins the job and copies the window out.  Blocks are
 * read and checked there exactly as in a read of the moment (hash before
 * bytes; a block that fails is DD_ECHECKSUM, or zeros and a report under
 * salvage, decided when the window is taken, not when it was decoded),
 * and in order.  Memory: one window of DD_READER_RA_BYTES (8 MiB) and
 * DD_READER_ROUND block records, and per read-ahead worker one record and
 * one block buffer and a decompression context.  Its own pool, not the
 * store's: a job outlives the call that started it, and the store's pool
 * is held through st_pool_lock, a mutex only the thread that locked it may
 * unlock -- the next read may come from another thread (dedup mount).
 * Any other read drops the window (and, since the window's blocks were
 * taken into the content digest, stops the digest check).
 *
 * When.  Taking a window costs a copy of it (the caller's next buffer is
 * not known ahead), about a tenth of decoding it; it pays only while the
 * caller spends time of its own between reads (writing the bytes
 * somewhere).  Measured here (2 shared cores, best of 5), `dedup get` of
 * 1 GiB to /dev/null, whose caller spends no time, took 3.98 s with
 * read-ahead on every read and 3.31 s without.  So a
 * window is started only when the time since the last read returned was
 * at least a quarter of how long the last read that decoded its own
 * blocks took (dd_reader_ra_mode 0); tests force it (1) or forbid it
 * (-1).
 *
 * Content-defined blocks (format/store.md §4.2) are found by offset: the
 * map's entry holding the first byte (dd_bmap_find: a seek and a few
 * steps, O(log n)), then entries in order until the range ends; each
 * entry's length must be its DDT entry's, exactly.  Gaps are holes.  The
 * digest then follows bytes, not indices: r_dig_next is the first byte
 * it has not taken in, and a hole is fed as far as a read reaches (the
 * digest joins the pieces of a run of holes).
 */
#include <string.h>
#include <time.h>

#include "chunk/chunk.h"
#include "common/alloc.h"
#include "store/store_internal.h"

/* Blocks looked up and read per round: bounds the reader's memory. */
#define DD_READER_ROUND 512
/* Contiguous bytes after which reads count as sequential. */
#define DD_READER_SEQ_BYTES ((uint64_t)4 << 20)
/* The most bytes read ahead. */
#define DD_READER_RA_BYTES ((uint64_t)8 << 20)
/* dd_reader_queue: the read-ahead window holds DD_READER_ROUND blocks */
#define DD_READER_FULL 2

int dd_reader_ra_mode = 0;

typedef struct dd_rblk {
	dd_ddt_key rb_key;
	dd_ddt_ent rb_ent;
	uint8_t *rb_dst;       /* where the wanted part goes */
	uint32_t rb_skip;      /* bytes of the block before the wanted part */
	uint32_t rb_len;       /* wanted bytes */
	uint64_t rb_ioff;      /* where the wanted part is in the image */
	unsigned rb_flags;     /* DD_CACHE_SEQ */
	int rb_rc;
	dd_err rb_err;
} dd_rblk;

/* A job of the pool: the blocks, rj_group an item (dd_read_group), and
 * a scratch a worker. */
typedef struct dd_rjob {
	dd_store *rj_store;
	dd_rblk *rj_blk;
	size_t rj_n;
	size_t rj_group;
	dd_scratch *rj_sc;
} dd_rjob;

struct dd_reader {
	dd_store *r_store;
	dd_err r_err;
	dd_txn *r_txn;
	dd_bmap_cur *r_cur;
	dd_snap_rec r_snap;
	dd_scratch r_sc;       /* when the pool is busy */
	dd_rblk *r_blk;        /* DD_READER_ROUND entries */
	size_t r_nblk;
	uint64_t r_next_off;   /* where the last pread ended */
	uint64_t r_run;        /* contiguous bytes up to there */
	unsigned r_flags;      /* DD_CACHE_SEQ while in a long run */
	dd_digest *r_digest;   /* the content digest of blocks read in order */
	uint64_t r_dig_next;   /* the next block it wants (var: byte);
				  DD_DIG_OFF: none */
	bool r_var;            /* content-defined blocks, keyed by offset */
	dd_salvage_cb r_salvage;  /* during dd_reader_pread_salvage */
	void *r_salvage_ctx;
	uint64_t r_zero_to;    /* the image's bytes up to here are in the
				  buffer being filled, or zeroed (holes) */
	/* read-ahead: the window [r_ra_off, r_ra_end), none when equal */
	dd_pool *r_ra_pool;
	dd_scratch *r_ra_sc;   /* one a worker of r_ra_pool */
	unsigned r_ra_nsc;
	dd_rblk *r_ra_blk;     /* DD_READER_ROUND */
	size_t r_ra_nblk;
	uint8_t *r_ra_buf;     /* DD_READER_RA_BYTES */
	uint64_t r_ra_off, r_ra_end;
	bool r_ra_filling;     /* collecting a window: queue, do not read */
	bool r_ra_running;     /* its job is on r_ra_pool */
	dd_rjob r_ra_job;
	uint64_t r_ret_ns;     /* when the last read returned; 0: none */
	uint64_t r_decode_ns;  /* how long the last read that decoded its
				  blocks itself took */
};

#define DD_DIG_OFF UINT64_MAX

int dd_reader_open(dd_reader **out, dd_store *s, const char *name)
{
	dd_reader *r;
	int rc;

	if (!s || !out)
		return s ? dd_store_failf(s, DD_EINVAL, "dd_reader_open: NULL "
					  "argument") : DD_EINVAL;
	if (dd_name_check(name))
		return dd_store_failf(s, DD_ENAME, "invalid snapshot name");
	r = dd_calloc(1, sizeof(*r));
	if (!r)
		return dd_store_failf(s, DD_ENOMEM, "out of memory");
	r->r_store = s;
	r->r_blk = dd_calloc(DD_READER_ROUND, sizeof(*r->r_blk));
	rc = r->r_blk ? 0 : dd_err_set(&r->r_err, DD_ENOMEM, "out of memory");
	if (!rc)
		rc = dd_scratch_init(&r->r_sc, &r->r_err, s);
	if (!rc)
		rc = dd_txn_begin(s->st_db, &r->r_err, false, &r->r_txn);
	if (!rc)
		rc = dd_store_snap_get(s, &r->r_err, r->r_txn, name,
				       &r->r_snap);
	if (!rc && r->r_snap.sr_block_size != s->st_block_size)
		rc = dd_err_set(&r->r_err, DD_ECORRUPT,
				"snapshot '%s' has block size %u, store %u",
				name, r->r_snap.sr_block_size, s->st_block_size);
	if (!rc)
		rc = dd_bmap_open(r->r_txn, &r->r_err, r->r_snap.sr_id, &r->r_cur);
	if (!rc)
		rc = dd_digest_new(&r->r_digest, &r->r_err, s->st_chunker,
				   r->r_snap.sr_digest_version,
				   r->r_snap.sr_block_size);
	if (rc) {
		dd_store_fail(s, &r->r_err);
		dd_reader_close(r);
		return rc;
	}
	r->r_var = s->st_chunker != DD_CHUNKER_FIXED;
	*out = r;
	return 0;
}

uint64_t dd_reader_size(const dd_reader *r)
{
	return r ? r->r_snap.sr_size : 0;
}

static int dd_rblk_read(dd_store *s, dd_scratch *sc, dd_rblk *rb)
{
	int rc = dd_block_read_cached(s, &rb->rb_err, sc, &rb->rb_key,
				      &rb->rb_ent, sc->sc_dbuf, rb->rb_flags);

	if (!rc)
		memcpy(rb->rb_dst, sc->sc_dbuf + rb->rb_skip, rb->rb_len);
	return rc;
}

static bool dd_rblk_whole(const dd_rblk *rb)
{
	return rb->rb_skip == 0 && rb->rb_len == rb->rb_ent.de_lsize;
}

static void dd_rblk_req(dd_rblk *rb, dd_block_req *req)
{
	req->br_key = &rb->rb_key;
	req->br_ent = &rb->rb_ent;
	req->br_dst = rb->rb_dst;
	req->br_flags = rb->rb_flags;
	req->br_err = &rb->rb_err;
}

/* Blocks blk[0..n), n <= DD_BLOCK_LIST_MAX: whole ones decompress
 * straight into the caller's buffer, hashed as one list; only partial
 * ones (the ends of a read) go through scratch, one at a time. */
static void dd_rblk_list(dd_store *s, dd_scratch *sc, dd_rblk *blk, size_t n)
{
	dd_block_req req[DD_BLOCK_LIST_MAX];
	dd_rblk *who[DD_BLOCK_LIST_MAX];
	size_t nw = 0;

	for (size_t i = 0; i < n; i++) {
		if (!dd_rblk_whole(&blk[i])) {
			blk[i].rb_rc = dd_rblk_read(s, sc, &blk[i]);
			continue;
		}
		dd_rblk_req(&blk[i], &req[nw]);
		who[nw++] = &blk[i];
	}
	if (nw == 0)
		return;
	dd_block_read_list(s, sc, req, nw);
	for (size_t i = 0; i < nw; i++)
		who[i]->rb_rc = req[i].br_rc;
}

/* Blocks a job item reads, of n, by `threads` threads: one hash list,
 * so as many as the hasher has lanes (dd_hasher_list_width: a shorter
 * list leaves lanes idle), unless that leaves a thread without an item;
 * two at least (a pair is what SHA-NI hashes at once). */
static size_t dd_read_group(size_t n, unsigned threads)
{
	size_t g = dd_hasher_list_width();

	if (threads == 0)
		threads = 1;
	if (g > DD_BLOCK_LIST_MAX)
		g = DD_BLOCK_LIST_MAX;
	if (n < g * threads)
		g = (n + threads - 1) / threads;
	return g < 2 ? 2 : g;
}

static size_t dd_read_items(const dd_rjob *j)
{
	return (j->rj_n + j->rj_group - 1) / j->rj_group;
}

static void dd_read_job(void *arg, size_t i, unsigned worker)
{
	dd_rjob *j = arg;
	size_t first = i * j->rj_group;
	size_t n = j->rj_n - first < j->rj_group ? j->rj_n - first
						 : j->rj_group;

	dd_rblk_list(j->rj_store, &j->rj_sc[worker], &j->rj_blk[first], n);
}

/* Feeds the digest with the holes before block idx and idx itself (key,
 * or NULL for a hole), when idx is the block it wants next or later. */
static void dd_reader_digest(dd_reader *r, uint64_t idx, const dd_ddt_key *key)
{
	if (r->r_dig_next == DD_DIG_OFF || idx < r->r_dig_next)
		return;
	if (idx > r->r_dig_next)   /* O(1) in a digest of version 2 */
		dd_digest_zeros(r->r_digest, idx - r->r_dig_next);
	dd_digest_block(r->r_digest, key ? key->dk_hash : NULL, 0);
	r->r_dig_next = idx + 1;
}

/* The same with content-defined blocks: the hole up to the block at
 * byte pos, then the block, when pos is the byte it wants next or later
 * (a block that began before it was taken in by an earlier read). */
static void dd_reader_digest_var(dd_reader *r, uint64_t pos, uint32_t len,
				 const dd_ddt_key *key)
{
	if (r->r_dig_next == DD_DIG_OFF || pos < r->r_dig_next)
		return;
	if (pos > r->r_dig_next)
		dd_digest_block(r->r_digest, NULL, pos - r->r_dig_next);
	dd_digest_block(r->r_digest, key->dk_hash, len);
	r->r_dig_next = pos + len;
}

/* Compares the digest of what the map named with the snapshot's. */
static int dd_reader_digest_end(dd_reader *r)
{
	uint8_t got[DD_HASH_SIZE];

	r->r_dig_next = DD_DIG_OFF;
	dd_digest_final(r->r_digest, r->r_snap.sr_size,
			r->r_snap.sr_block_size, got);
	if (memcmp(got, r->r_snap.sr_digest, DD_HASH_SIZE) != 0)
		return dd_err_set(&r->r_err, DD_ECORRUPT,
				  "the block map of the snapshot does not match "
				  "its content digest (damaged metadata; run "
				  "scrub)");
	return 0;
}

/* After a read of blocks up to last: at the image's end, the digest of
 * what the map named must be the snapshot's (a damaged map otherwise
 * reads as holes or other blocks, never as an error). */
static int dd_reader_digest_check(dd_reader *r, uint64_t last)
{
	if (r->r_dig_next == DD_DIG_OFF || r->r_dig_next > last + 1)
		return 0;
	dd_digest_zeros(r->r_digest, last + 1 - r->r_dig_next);
	r->r_dig_next = last + 1;
	if (r->r_dig_next < r->r_snap.sr_blocks)
		return 0;
	return dd_reader_digest_end(r);
}

/* The same with content-defined blocks, after a read up to byte end: the
 * hole up to there, and at the image's end the check. */
static int dd_reader_digest_check_var(dd_reader *r, uint64_t end)
{
	if (r->r_dig_next == DD_DIG_OFF || r->r_dig_next > end)
		return 0;
	if (end > r->r_dig_next)
		dd_digest_block(r->r_digest, NULL, end - r->r_dig_next);
	r->r_dig_next = end;
	return end < r->r_snap.sr_size ? 0 : dd_reader_digest_end(r);
}

/* Salvage: a block whose stored bytes are damaged or gone (not a lack
 * of memory) reads as zeros, and is reported.  True when rb was. */
static bool dd_reader_salvage(dd_reader *r, dd_rblk *rb)
{
	if (!r->r_salvage || (rb->rb_rc != DD_ECHECKSUM &&
			      rb->rb_rc != DD_ECORRUPT && rb->rb_rc != DD_EIO))
		return false;
	memset(rb->rb_dst, 0, rb->rb_len);
	if (r->r_salvage(r->r_salvage_ctx, rb->rb_ioff, rb->rb_len, rb->rb_rc,
			 rb->rb_err.de_msg) != 0) {
		rb->rb_rc = dd_err_set(&rb->rb_err, DD_ECANCELED, "read "
				       "stopped by its salvage callback");
		return false;
	}
	return true;
}

/* The results of blocks read: a failure is the read's error, or under
 * salvage zeros and a report. */
static int dd_reader_results(dd_reader *r, dd_rblk *blk, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		dd_rblk *rb = &blk[i];

		if (rb->rb_rc && dd_reader_salvage(r, rb))
			continue;
		if (rb->rb_rc)
			return dd_err_copy(&r->r_err, &rb->rb_err);
	}
	return 0;
}

/* Reads the r_nblk blocks collected for this round. */
static int dd_reader_round(dd_reader *r)
{
	dd_store *s = r->r_store;
	dd_rjob job = {
		.rj_store = s, .rj_blk = r->r_blk, .rj_n = r->r_nblk,
		.rj_sc = s->st_scratch,
	};
	int rc;

	if (r->r_nblk > 2 && pthread_mutex_trylock(&s->st_pool_lock) == 0) {
		job.rj_group = dd_read_group(r->r_nblk,
					     dd_pool_width(s->st_pool));
		dd_pool_run(s->st_pool, dd_read_job, &job,
			    dd_read_items(&job));
		pthread_mutex_unlock(&s->st_pool_lock);
	} else {
		job.rj_sc = &r->r_sc;
		job.rj_group = dd_read_group(r->r_nblk, 1);
		for (size_t i = 0; i < dd_read_items(&job); i++)
			dd_read_job(&job, i, 0);
	}
	rc = dd_reader_results(r, r->r_blk, r->r_nblk);
	if (!rc)
		r->r_nblk = 0;
	return rc;
}

/* Queues the block at bstart (found in the map with key; of len bytes,
 * or var 0: fixed, block size) for the round. */
static int dd_reader_queue(dd_reader *r, const dd_ddt_key *key,
			   uint64_t bstart, uint32_t len, uint64_t off,
			   uint64_t end, uint8_t *buf)
{
	uint64_t bs = len ? len : r->r_snap.sr_block_size;
	uint64_t from = off > bstart ? off : bstart;
	uint64_t to = end < bstart + bs ? end : bstart + bs;
	dd_rblk *rb = &r->r_blk[r->r_nblk];
	int rc = dd_ddt_get(r->r_txn, &r->r_err, key, &rb->rb_ent);

	/* holes: zero what no block fills, and only that */
	if (from > r->r_zero_to)
		memset(buf + (r->r_zero_to - off), 0,
		       (size_t)(from - r->r_zero_to));
	if (to > r->r_zero_to)
		r->r_zero_to = to;

	if (rc == DD_ENOENT)
		return dd_err_set(&r->r_err, DD_ECORRUPT,
				  "the block at byte %llu of the snapshot is "
				  "missing from the ddt",
				  (unsigned long long)bstart);
	if (rc)
		return rc;
	if (rb->rb_ent.de_lsize < to - bstart ||
	    (len && rb->rb_ent.de_lsize != len))
		return dd_err_set(&r->r_err, DD_ECORRUPT,
				  "the block at byte %llu: ddt size %u, the "
				  "snapshot's block %llu bytes",
				  (unsigned long long)bstart,
				  rb->rb_ent.de_lsize,
				  (unsigned long long)(len ? len
						       : to - bstart));
	rb->rb_key = *key;
	rb->rb_dst = buf + (from - off);
	rb->rb_skip = (uint32_t)(from - bstart);
	rb->rb_len = (uint32_t)(to - from);
	rb->rb_ioff = from;
	rb->rb_flags = r->r_flags;
	rb->rb_rc = 0;
	if (++r->r_nblk == DD_READER_ROUND)
		return r->r_ra_filling ? DD_READER_FULL : dd_reader_round(r);
	return 0;
}

/* The blocks of [off, end) in a content-defined map, found by offset. */
static int dd_reader_collect_var(dd_reader *r, uint64_t off, uint64_t end,
				 uint8_t *buf)
{
	uint64_t pos;
	dd_ddt_key key;
	int rc;

	for (rc = dd_bmap_find(r->r_cur, &r->r_err, off, &pos, &key);
	     rc == 1 && pos < end;
	     rc = dd_bmap_next(r->r_cur, &r->r_err, &pos, &key)) {
		uint32_t blen = dd_bmap_len(r->r_cur);

		if (blen > r->r_snap.sr_size - pos)
			return dd_err_set(&r->r_err, DD_ECORRUPT, "a block map "
					  "entry runs past the snapshot's end "
					  "(damaged metadata; run scrub)");
		rc = dd_reader_queue(r, &key, pos, blen, off, end, buf);
		if (rc < 0)
			return rc;
		dd_reader_digest_var(r, pos, blen, &key);
		if (rc)
			return rc;
	}
	return rc;
}

/* The blocks of [off, end) in a map of fixed blocks, by index. */
static int dd_reader_collect(dd_reader *r, uint64_t off, uint64_t end,
			     uint8_t *buf)
{
	uint64_t bs = r->r_snap.sr_block_size, idx;
	uint64_t first = off / bs, last = (end - 1) / bs;
	dd_ddt_key key;
	int rc;

	for (rc = dd_bmap_seek(r->r_cur, &r->r_err, first, &idx, &key);
	     rc == 1 && idx <= last;
	     rc = dd_bmap_next(r->r_cur, &r->r_err, &idx, &key)) {
		rc = dd_reader_queue(r, &key, idx * bs, 0, off, end, buf);
		if (rc < 0)
			return rc;
		dd_reader_digest(r, idx, &key);
		if (rc)
			return rc;
	}
	return rc;
}

/* After blocks of [off, end) were read: the digest's holes up to there,
 * and at the image's end its check. */
static int dd_reader_digest_to(dd_reader *r, uint64_t end)
{
	return r->r_var ? dd_reader_digest_check_var(r, end)
			: dd_reader_digest_check(r, (end - 1) /
						 r->r_snap.sr_block_size);
}

/* Reads [off, end) of the image into buf: the blocks the map names over
 * zeros. */
static int dd_reader_range(dd_reader *r, uint8_t *buf, uint64_t off,
			   uint64_t end)
{
	int rc;

	r->r_nblk = 0;
	r->r_zero_to = off;
	rc = r->r_var ? dd_reader_collect_var(r, off, end, buf)
		      : dd_reader_collect(r, off, end, buf);
	if (rc < 0)
		return rc;
	if (end > r->r_zero_to)
		memset(buf + (r->r_zero_to - off), 0,
		       (size_t)(end - r->r_zero_to));
	rc = dd_reader_round(r);
	return rc ? rc : dd_reader_digest_to(r, end);
}

/* ---- read-ahead ----------------------------------------------------------*/

/* Drops the window: the job finishes first (it writes into the window).
 * The window's blocks were taken into the digest ahead of the reads, so
 * the check stops. */
static void dd_reader_ra_drop(dd_reader *r)
{
	if (r->r_ra_running)
		dd_pool_wait(r->r_ra_pool);
	r->r_ra_running = false;
	if (r->r_ra_end > r->r_ra_off)
		r->r_dig_next = DD_DIG_OFF;
	r->r_ra_off = r->r_ra_end = 0;
}

/* Gives back what read-ahead holds (its window dropped first). */
static void dd_reader_ra_free(dd_reader *r)
{
	dd_reader_ra_drop(r);
	dd_pool_free(r->r_ra_pool);
	r->r_ra_pool = NULL;
	for (unsigned i = 0; i < r->r_ra_nsc; i++)
		dd_scratch_fini(&r->r_ra_sc[i]);
	r->r_ra_nsc = 0;
	dd_free(r->r_ra_sc);
	dd_free(r->r_ra_blk);
	dd_free(r->r_ra_buf);
	r->r_ra_sc = NULL;
	r->r_ra_blk = NULL;
	r->r_ra_buf = NULL;
}

/* The pool (as many threads as the store's), scratch and buffers of
 * read-ahead, at its first window; all or nothing. */
static int dd_reader_ra_setup(dd_reader *r)
{
	dd_store *s = r->r_store;
	unsigned width;
	int rc;

	if (r->r_ra_pool)
		return 0;
	r->r_ra_blk = dd_calloc(DD_READER_ROUND, sizeof(*r->r_ra_blk));
	r->r_ra_buf = dd_malloc(DD_READER_RA_BYTES);
	rc = r->r_ra_blk && r->r_ra_buf ? 0 : DD_ENOMEM;
	if (!rc)
		rc = dd_pool_new(&r->r_ra_pool, dd_pool_width(s->st_pool) - 1);
	width = rc ? 0 : dd_pool_width(r->r_ra_pool);
	if (!rc && !(r->r_ra_sc = dd_calloc(width, sizeof(*r->r_ra_sc))))
		rc = DD_ENOMEM;
	for (; !rc && r->r_ra_nsc < width; r->r_ra_nsc++) {
		rc = dd_scratch_init(&r->r_ra_sc[r->r_ra_nsc], &r->r_err, s);
		if (rc)
			break;
	}
	if (rc)
		dd_reader_ra_free(r);
	return rc;
}

/* Starts the window of the next len bytes at off (a read of them ended
 * here).  Read-ahead is a wish: whatever fails, the next read reads. */
static void dd_reader_ra_start(dd_reader *r, uint64_t off, uint64_t len)
{
	dd_err keep = r->r_err;
	uint64_t end = off + len;
	dd_rblk *blk = r->r_blk;
	int rc;

	if (dd_reader_ra_setup(r) != 0) {
		r->r_err = keep;
		return;
	}
	if (len > DD_READER_RA_BYTES)
		end = off + DD_READER_RA_BYTES;
	if (end > r->r_snap.sr_size)
		end = r->r_snap.sr_size;
	/* collect into the window's records, none read yet */
	r->r_blk = r->r_ra_blk;
	r->r_nblk = 0;
	r->r_zero_to = off;
	r->r_ra_filling = true;
	rc = r->r_var ? dd_reader_collect_var(r, off, end, r->r_ra_buf)
		      : dd_reader_collect(r, off, end, r->r_ra_buf);
	r->r_ra_filling = false;
	r->r_ra_nblk = r->r_nblk;
	r->r_blk = blk;
	r->r_nblk = 0;
	if (rc < 0) {
		/* the next read meets the same failure, as its own */
		r->r_err = keep;
		r->r_dig_next = DD_DIG_OFF;
		return;
	}
	if (rc == DD_READER_FULL) /* it ends with its last block */
		end = r->r_zero_to;
	if (end > r->r_zero_to)
		memset(r->r_ra_buf + (r->r_zero_to - off), 0,
		       (size_t)(end - r->r_zero_to));
	r->r_ra_off = off;
	r->r_ra_end = end;
	r->r_ra_job = (dd_rjob){
		.rj_store = r->r_store, .rj_blk = r->r_ra_blk,
		.rj_n = r->r_ra_nblk, .rj_sc = r->r_ra_sc,
		.rj_group = dd_read_group(r->r_ra_nblk,
					  dd_pool_width(r->r_ra_pool)),
	};
	if (r->r_ra_nblk) {
		dd_pool_start(r->r_ra_pool, dd_read_job, &r->r_ra_job,
			      dd_read_items(&r->r_ra_job));
		r->r_ra_running = true;
	}
}

/* A read from off to end or further takes the window: waits for it
 * (working on it too), then its blocks' results and bytes; the digest up
 * to its end.  Returns the bytes taken, or a failure. */
static int dd_reader_ra_take(dd_reader *r, uint8_t *buf, uint64_t *taken)
{
	uint64_t n = r->r_ra_end - r->r_ra_off;
	int rc;

	if (r->r_ra_running)
		dd_pool_join(r->r_ra_pool);
	r->r_ra_running = false;
	rc = dd_reader_results(r, r->r_ra_blk, r->r_ra_nblk);
	if (!rc)
		rc = dd_reader_digest_to(r, r->r_ra_end);
	r->r_ra_off = r->r_ra_end = 0;
	if (rc)
		return rc;
	if (buf)   /* NULL: a window of holes, skipped (dd_reader_next_data) */
		memcpy(buf, r->r_ra_buf, (size_t)n);
	*taken = n;
	return 0;
}

static uint64_t dd_reader_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Is a window worth its copy: does the caller spend, between reads, at
 * least a quarter of the time a read takes to decode? */
static bool dd_reader_ra_wanted(const dd_reader *r, uint64_t gap_ns)
{
	if (dd_reader_ra_mode)
		return dd_reader_ra_mode > 0;
	return r->r_ret_ns && gap_ns >= r->r_decode_ns / 4;
}

int dd_reader_pread(dd_reader *r, void *buf, size_t len, uint64_t off,
		    size_t *nread)
{
	uint64_t size, end, first, taken = 0, t0 = dd_reader_now_ns();
	uint64_t gap = r && r->r_ret_ns ? t0 - r->r_ret_ns : 0;
	int rc = 0;

	if (!r)
		return DD_EINVAL;
	if ((!buf && len) || !nread)
		return dd_err_set(&r->r_err, DD_EINVAL,
				  "dd_reader_pread: NULL argument");
	size = r->r_snap.sr_size;
	*nread = 0;
	if (off >= size || len == 0)
		return 0;
	end = size - off < len ? size : off + len;
	r->r_run = off == r->r_next_off ? r->r_run + (end - off) : end - off;
	r->r_next_off = end;
	r->r_flags = r->r_run >= DD_READER_SEQ_BYTES ? DD_CACHE_SEQ : 0;
	/* the window is taken whole by a read from its start, else dropped */
	if (r->r_ra_end > r->r_ra_off &&
	    (off != r->r_ra_off || end < r->r_ra_end))
		dd_reader_ra_drop(r);
	first = r->r_var ? off : off / r->r_snap.sr_block_size;
	/* the digest follows reads that go on where the last one ended */
	if (r->r_dig_next != DD_DIG_OFF && first > r->r_dig_next &&
	    r->r_ra_end == r->r_ra_off)
		r->r_dig_next = DD_DIG_OFF;
	if (r->r_ra_end > r->r_ra_off)
		rc = dd_reader_ra_take(r, buf, &taken);
	if (!rc && off + taken < end)
		rc = dd_reader_range(r, (uint8_t *)buf + taken, off + taken,
				     end);
	if (rc) {
		r->r_nblk = 0;
		r->r_dig_next = DD_DIG_OFF;
		memset(buf, 0, (size_t)(end - off)); /* no partial data */
		return rc;
	}
	*nread = (size_t)(end - off);
	if (taken < end - off)
		r->r_decode_ns = dd_reader_now_ns() - t0;
	if (r->r_flags & DD_CACHE_SEQ && end < size &&
	    dd_reader_ra_wanted(r, gap))
		dd_reader_ra_start(r, end, end - off);
	r->r_ret_ns = dd_reader_now_ns();
	return 0;
}

int dd_reader_pread_salvage(dd_reader *r, void *buf, size_t len,
			    uint64_t off, size_t *nread, dd_salvage_cb cb,
			    void *ctx)
{
	int rc;

	if (!r)
		return DD_EINVAL;
	if (!cb)
		return dd_err_set(&r->r_err, DD_EINVAL,
				  "dd_reader_pread_salvage: NULL callback");
	r->r_salvage = cb;
	r->r_salvage_ctx = ctx;
	rc = dd_reader_pread(r, buf, len, off, nread);
	r->r_salvage = NULL;
	r->r_salvage_ctx = NULL;
	return rc;
}

/* ---- skipping holes ------------------------------------------------------*/

/* The first byte at or after off (< size) in a block the map names, or
 * the size: the holes before it are proven by the map. */
static int dd_reader_find_data(dd_reader *r, uint64_t off, uint64_t *to)
{
	uint64_t size = r->r_snap.sr_size, bs = r->r_snap.sr_block_size, pos;
	dd_ddt_key key;
	int rc;

	if (r->r_var) {
		rc = dd_bmap_find(r->r_cur, &r->r_err, off, &pos, &key);
		/* an entry that ends before off: off is in the hole after it */
		while (rc == 1 && pos + dd_bmap_len(r->r_cur) <= off)
			rc = dd_bmap_next(r->r_cur, &r->r_err, &pos, &key);
	} else {
		rc = dd_bmap_seek(r->r_cur, &r->r_err, off / bs, &pos, &key);
		if (rc == 1)
			pos = pos < r->r_snap.sr_blocks ? pos * bs : size;
	}
	if (rc < 0)
		return rc;
	if (rc == 1 && pos >= size)
		return dd_err_set(&r->r_err, DD_ECORRUPT, "a block map entry "
				  "lies past the snapshot's end (damaged "
				  "metadata; run scrub)");
	*to = rc == 0 ? size : pos > off ? pos : off;
	return 0;
}

/* The holes of [off, to), proven by the map, into the digest where it
 * has taken in everything before them (a read of them would have); at
 * the image's end, its check. */
static int dd_reader_skip_digest(dd_reader *r, uint64_t off, uint64_t to)
{
	uint64_t from = r->r_var ? off : off / r->r_snap.sr_block_size;

	if (r->r_dig_next == DD_DIG_OFF || r->r_dig_next < from)
		return 0;   /* a gap: the next read stops the check */
	return dd_reader_digest_to(r, to);
}

int dd_reader_next_data(dd_reader *r, uint64_t off, uint64_t *data_off)
{
	uint64_t size, to = 0, taken;
	int rc;

	if (!r)
		return DD_EINVAL;
	if (!data_off)
		return dd_err_set(&r->r_err, DD_EINVAL,
				  "dd_reader_next_data: NULL argument");
	size = r->r_snap.sr_size;
	*data_off = off < size ? off : size;
	if (off >= size)
		return 0;
	rc = dd_reader_find_data(r, off, &to);
	if (rc || to == off)
		return rc;
	if (r->r_ra_end > r->r_ra_off) {
		if (off != r->r_ra_off) {
			dd_reader_ra_drop(r);   /* as a read elsewhere would */
		} else if (to < r->r_ra_end) {
			return 0;   /* data in the window: read from off */
		} else {
			/* a window of holes: taken, not copied */
			rc = dd_reader_ra_take(r, NULL, &taken);
			if (rc)
				return rc;
		}
	}
	rc = dd_reader_skip_digest(r, off, to);
	if (rc)
		return rc;
	/* the next read, at to, goes on where this left off */
	if (r->r_next_off == off)
		r->r_next_off = to;
	*data_off = to;
	return 0;
}

void dd_reader_close(dd_reader *r)
{
	if (!r)
		return;
	dd_reader_ra_free(r);
	dd_bmap_close(r->r_cur);
	dd_txn_abort(r->r_txn);
	dd_scratch_fini(&r->r_sc);
	dd_digest_free(r->r_digest);
	dd_free(r->r_blk);
	dd_free(r);
}

const char *dd_reader_errmsg(const dd_reader *r)
{
	if (!r)
		return "DD_EINVAL: NULL reader";
	return r->r_err.de_code ? r->r_err.de_msg : "no error";
}
