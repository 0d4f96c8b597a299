/*
 * wloc.c -- a re-put's locality: the block map of the snapshot an image
 * was put as before answers most of its lookups (writer_internal.h says
 * when and why; format/store.md §7.2 the deferring writer it serves).
 *
 * Each pool worker keeps a cursor in the source map on its own probe
 * transaction and walks it forward as its blocks come: a block whose
 * index the map holds with the same key is an LREF, decided without the
 * DDT.  The cursors die with the transactions at every commit
 * (dd_wloc_park) and are opened again on the next snapshot.  The source
 * is adopted once, by whichever worker first matches a candidate (every
 * committed snapshot is one, the likeliest tried first), and given up
 * after a long run of misses (another image), so that another may be
 * adopted.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/io.h"
#include "store/writer_internal.h"

#define DD_WLOC_CANDS 8          /* committed snapshots a try checks */
#define DD_WLOC_TRY_EVERY 64     /* probe hits between two tries */
#define DD_WLOC_GIVE_UP 1024     /* misses in a row that drop the source */
#define DD_WLOC_SEEK_AFTER 64    /* steps forward before a seek instead */
#define DD_WLOC_RANGES 64        /* input ranges kept between flushes */
#define DD_WLOC_USED 16          /* sources remembered for the flush */

struct dd_wloc_worker {
	dd_bmap_cur *lw_cur;
	uint64_t lw_src;          /* the map lw_cur reads */
	bool lw_have;             /* lw_pos/lw_key: the cursor's entry */
	uint64_t lw_pos;
	dd_ddt_key lw_key;
	uint64_t lw_hits;         /* probe hits with no source: every
				     DD_WLOC_TRY_EVERY-th tries the next
				     DD_WLOC_CANDS candidates */
	size_t lw_next;           /* the first of them, in lc_cand */
	uint64_t lw_misses;       /* in a row, with a source */
};

struct dd_wloc_cand {
	uint64_t lk_id;
	unsigned lk_score;
};

struct dd_wloc_range {
	uint64_t lr_ioff, lr_len, lr_foff;
	int lr_fd;
};

struct dd_wloc {
	_Atomic uint64_t lc_src;  /* the adopted snapshot id, 0: none */
	/* every source adopted since the writer began, each stored before
	 * lc_src names it, for dd_wloc_sources_live: a slot is reserved
	 * (lc_nused) before its id is stored, so a slot still 0 reads as a
	 * source gone; past DD_WLOC_USED, none is known live */
	_Atomic uint64_t lc_used[DD_WLOC_USED];
	atomic_uint lc_nused;
	atomic_bool lc_off;       /* too many input ranges to keep: no LREF
				     from the first one not kept on */
	/* every committed snapshot, best candidate first (dd_wloc_order),
	 * with its name's shared prefix length with lc_name (the
	 * writer's, while dd_wloc_open walks) */
	struct dd_wloc_cand *lc_cand;
	size_t lc_ncand, lc_capc;
	const char *lc_name;
	struct dd_wloc_worker *lc_w;
	struct dd_wloc_range *lc_r;
	size_t lc_nr, lc_capr;
	uint8_t *lc_cbuf;         /* a heal's compressed block */
};

/* Candidates first by the length of the prefix their name shares with
 * the writer's ("vm7-2026-12-02" finds "vm7-2026-12-01" among a night's
 * other images), then newest first (ids only grow).  All of them, tried
 * DD_WLOC_CANDS at a time: a re-put under a name unlike its source's
 * still finds it behind the newer snapshots of other images. */
static int dd_wloc_order(const void *a, const void *b)
{
	const struct dd_wloc_cand *x = a, *y = b;

	if (x->lk_score != y->lk_score)
		return x->lk_score > y->lk_score ? -1 : 1;
	return x->lk_id > y->lk_id ? -1 : x->lk_id < y->lk_id;
}

static int dd_wloc_cand(void *arg, const char *name, const dd_snap_rec *rec)
{
	struct dd_wloc *lc = arg;
	unsigned score = 0;

	while (name[score] && name[score] == lc->lc_name[score])
		score++;
	if (lc->lc_ncand == lc->lc_capc) {
		size_t n = lc->lc_capc ? 2 * lc->lc_capc : 16;
		struct dd_wloc_cand *c = dd_realloc(lc->lc_cand,
						    n * sizeof(*c));

		if (!c)
			return -1;   /* no source: the DDT answers */
		lc->lc_cand = c;
		lc->lc_capc = n;
	}
	lc->lc_cand[lc->lc_ncand++] = (struct dd_wloc_cand){
		.lk_id = rec->sr_id, .lk_score = score};
	return 0;
}

void dd_wloc_open(dd_writer *w)
{
	struct dd_wloc *lc;
	dd_txn *txn;
	dd_err err;

	/* fixed blocks only: a content-defined map is keyed by offsets,
	 * which an edit shifts */
	if (!w->w_defer || !w->w_pipe || dd_db_varblock(w->w_store->st_db) ||
	    !(lc = dd_calloc(1, sizeof(*lc))))
		return;
	lc->lc_w = dd_calloc(w->w_nworkers, sizeof(*lc->lc_w));
	if (!lc->lc_w || dd_txn_begin(w->w_store->st_db, &err, false, &txn)) {
		dd_free(lc->lc_w);
		dd_free(lc);
		return;
	}
	lc->lc_name = w->w_name;
	if (dd_snap_walk(txn, &err, dd_wloc_cand, lc) < 0)
		lc->lc_ncand = 0;
	lc->lc_name = NULL;
	dd_txn_abort(txn);
	if (!lc->lc_ncand) {
		dd_free(lc->lc_cand);
		dd_free(lc->lc_w);
		dd_free(lc);
		return;
	}
	qsort(lc->lc_cand, lc->lc_ncand, sizeof(*lc->lc_cand), dd_wloc_order);
	w->w_loc = lc;
}

void dd_wloc_park(dd_writer *w)
{
	struct dd_wloc *lc = w->w_loc;

	for (unsigned i = 0; lc && i < w->w_nworkers; i++) {
		dd_bmap_close(lc->lc_w[i].lw_cur);
		lc->lc_w[i].lw_cur = NULL;
		lc->lc_w[i].lw_have = false;
	}
}

void dd_wloc_free(dd_writer *w)
{
	struct dd_wloc *lc = w->w_loc;

	if (!lc)
		return;
	dd_wloc_park(w);
	for (size_t i = 0; i < lc->lc_nr; i++)
		dd_io_close(lc->lc_r[i].lr_fd);
	dd_free(lc->lc_r);
	dd_free(lc->lc_w);
	dd_free(lc->lc_cand);
	dd_free(lc->lc_cbuf);
	dd_free(lc);
	w->w_loc = NULL;
}

/* The entry of map src at idx, through the worker's cursor, moved forward
 * step by step when it is near, else by a seek.  True when there is one
 * at exactly idx (*key). */
static bool dd_wloc_at(struct dd_wloc_worker *lw, dd_txn *txn, uint64_t src,
		       uint64_t idx, dd_ddt_key *key)
{
	dd_err err;
	int rc = 1;

	if (!lw->lw_cur || lw->lw_src != src) {
		dd_bmap_close(lw->lw_cur);
		lw->lw_cur = NULL;
		lw->lw_have = false;
		if (dd_bmap_open(txn, &err, src, &lw->lw_cur))
			return false;
		lw->lw_src = src;
	}
	if (!lw->lw_have || idx < lw->lw_pos ||
	    idx - lw->lw_pos > DD_WLOC_SEEK_AFTER)
		rc = dd_bmap_seek(lw->lw_cur, &err, idx, &lw->lw_pos,
				  &lw->lw_key);
	else
		while (rc == 1 && lw->lw_pos < idx)
			rc = dd_bmap_next(lw->lw_cur, &err, &lw->lw_pos,
					  &lw->lw_key);
	lw->lw_have = rc == 1;
	if (!lw->lw_have || lw->lw_pos != idx)
		return false;
	*key = lw->lw_key;
	return true;
}

static bool dd_wloc_same(const dd_ddt_key *k, const dd_blk *bk)
{
	return k->dk_variant == 0 &&
	       !memcmp(k->dk_hash, bk->bk_hash, DD_HASH_SIZE);
}

bool dd_wloc_match(dd_writer *w, unsigned worker, dd_txn *txn,
		   const dd_blk *bk)
{
	struct dd_wloc *lc = w->w_loc;
	struct dd_wloc_worker *lw = &lc->lc_w[worker];
	uint64_t src = atomic_load(&lc->lc_src);
	dd_ddt_key key;

	if (!src || atomic_load(&lc->lc_off))
		return false;
	if (dd_wloc_at(lw, txn, src, bk->bk_idx, &key) &&
	    dd_wloc_same(&key, bk)) {
		lw->lw_misses = 0;
		return true;
	}
	if (++lw->lw_misses >= DD_WLOC_GIVE_UP) {
		/* another image from here on: let a new source be found */
		lw->lw_misses = 0;
		atomic_compare_exchange_strong(&lc->lc_src, &src, 0);
	}
	return false;
}

/* Remembers source id, about to be adopted; an id adopted before is
 * there already. */
static void dd_wloc_used(struct dd_wloc *lc, uint64_t id)
{
	unsigned n = atomic_load(&lc->lc_nused), slot;

	for (unsigned i = 0; i < n && i < DD_WLOC_USED; i++)
		if (atomic_load(&lc->lc_used[i]) == id)
			return;
	slot = atomic_fetch_add(&lc->lc_nused, 1);
	if (slot < DD_WLOC_USED)
		atomic_store(&lc->lc_used[slot], id);
}

bool dd_wloc_sources_live(dd_writer *w, dd_txn *txn)
{
	struct dd_wloc *lc = w->w_loc;
	unsigned n = lc ? atomic_load(&lc->lc_nused) : 0;

	if (n > DD_WLOC_USED)
		return false;
	for (unsigned i = 0; i < n; i++) {
		uint64_t id = atomic_load(&lc->lc_used[i]);
		char name[DD_NAME_MAX + 1];
		dd_snap_rec rec;
		dd_err err;

		/* an rm drops a map's references and its record in one
		 * transaction: a record still there counts every block */
		if (!id || dd_snap_find_id(txn, &err, id, name, &rec))
			return false;
	}
	return true;
}

void dd_wloc_adopt(dd_writer *w, unsigned worker, dd_txn *txn,
		   const dd_blk *bk)
{
	struct dd_wloc *lc = w->w_loc;
	struct dd_wloc_worker *lw = &lc->lc_w[worker];

	if (atomic_load(&lc->lc_src) ||
	    lw->lw_hits++ % DD_WLOC_TRY_EVERY)
		return;
	for (unsigned t = 0; t < DD_WLOC_CANDS && t < lc->lc_ncand; t++) {
		uint64_t none = 0, id = lc->lc_cand[lw->lw_next].lk_id;
		dd_ddt_key key;

		lw->lw_next = (lw->lw_next + 1) % lc->lc_ncand;
		if (!dd_wloc_at(lw, txn, id, bk->bk_idx, &key) ||
		    !dd_wloc_same(&key, bk))
			continue;
		/* the best candidates first again at the next try */
		lw->lw_next = 0;
		/* remembered before any worker can read it as the source and
		 * make an LREF of it, which a flush may apply while this
		 * worker is still on its block: one that loses the race below
		 * is remembered too, and only costs a look */
		dd_wloc_used(lc, id);
		atomic_compare_exchange_strong(&lc->lc_src, &none, id);
		return;
	}
}

int dd_wloc_range(dd_writer *w, int fd, uint64_t off, uint64_t len)
{
	struct dd_wloc *lc = w->w_loc;
	struct dd_wloc_range *r;
	int dfd;

	if (!lc || !len || atomic_load(&lc->lc_off))
		return 0;
	if (lc->lc_nr == DD_WLOC_RANGES) {
		/* a block of this range could not be read again for a heal:
		 * set before the pipeline sees the range, so that no worker
		 * takes one of its blocks from the map */
		atomic_store(&lc->lc_off, true);
		return 0;
	}
	if (lc->lc_nr == lc->lc_capr) {
		size_t n = lc->lc_capr ? 2 * lc->lc_capr : 8;

		r = dd_realloc(lc->lc_r, n * sizeof(*r));
		if (!r)
			return dd_err_set(&w->w_err, DD_ENOMEM, "out of memory");
		lc->lc_r = r;
		lc->lc_capr = n;
	}
	/* the caller may close fd once the call returns; a heal reads it
	 * later, at the flush */
	dfd = dup(fd);
	if (dfd < 0)
		return dd_err_set_errno(&w->w_err, errno, "dup the input");
	lc->lc_r[lc->lc_nr++] = (struct dd_wloc_range){
		.lr_ioff = w->w_fed, .lr_len = len, .lr_foff = off,
		.lr_fd = dfd};
	return 0;
}

void dd_wloc_flushed(dd_writer *w, uint64_t from)
{
	struct dd_wloc *lc = w->w_loc;
	size_t keep = 0;

	for (size_t i = 0; lc && i < lc->lc_nr; i++) {
		if (lc->lc_r[i].lr_ioff + lc->lc_r[i].lr_len <= from)
			dd_io_close(lc->lc_r[i].lr_fd);
		else
			lc->lc_r[keep++] = lc->lc_r[i];
	}
	if (lc)
		lc->lc_nr = keep;
}

int dd_wloc_heal(dd_writer *w, const dd_wop *op, const dd_ddt_key *key,
		 const dd_ddt_ent *old, uint64_t refs)
{
	struct dd_wloc *lc = w->w_loc;
	const struct dd_wloc_range *r = NULL;
	dd_pack_rec rec = {.pr_lsize = op->op_lsize};
	uint8_t got[DD_HASH_SIZE];
	dd_ddt_ent ent = {0};
	int rc;

	for (size_t i = 0; lc && i < lc->lc_nr; i++)
		if (op->op_ioff >= lc->lc_r[i].lr_ioff &&
		    op->op_ioff - lc->lc_r[i].lr_ioff < lc->lc_r[i].lr_len)
			r = &lc->lc_r[i];
	if (!r)
		return dd_err_set(&w->w_err, DD_EIO, "internal error: block "
				  "%llu has no input to heal from",
				  (unsigned long long)op->op_idx);
	if (!lc->lc_cbuf &&
	    !(lc->lc_cbuf = dd_malloc(dd_codec_bound(w->w_store->st_block_max))))
		return dd_err_set(&w->w_err, DD_ENOMEM, "out of memory");
	rc = dd_io_pread_full(&w->w_err, r->lr_fd, w->w_sc.sc_dbuf,
			      op->op_lsize,
			      r->lr_foff + (op->op_ioff - r->lr_ioff),
			      "the input");
	if (rc)
		return rc;
	dd_hasher_sum(w->w_sc.sc_hasher, w->w_sc.sc_dbuf, op->op_lsize, got);
	if (memcmp(got, key->dk_hash, DD_HASH_SIZE))
		return dd_err_set(&w->w_err, DD_ECHECKSUM, "block %llu of the "
				  "input changed while it was stored, and the "
				  "store's copy of it is damaged or lost",
				  (unsigned long long)op->op_idx);
	memcpy(rec.pr_hash, got, DD_HASH_SIZE);
	rc = dd_codec_compress(w->w_sc.sc_codec, &w->w_err, lc->lc_cbuf,
			       w->w_sc.sc_dbuf, op->op_lsize, &rec.pr_psize,
			       &rec.pr_codec);
	if (!rc)
		rc = dd_writer_append(w, &rec, lc->lc_cbuf, &ent.de_pack,
				      &ent.de_offset);
	/* the record durable and its pack's end recorded before the entry
	 * that names it commits (invariant 1) */
	if (!rc)
		rc = dd_writer_sync_packs(w);
	if (!rc)
		rc = dd_writer_record_packs(w);
	if (rc)
		return rc;
	ent.de_codec = rec.pr_codec;
	ent.de_psize = rec.pr_psize;
	ent.de_lsize = op->op_lsize;
	ent.de_refcnt = refs;
	return dd_writer_takeover(w, key, old, &ent);
}
