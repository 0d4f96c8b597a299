/*
 * wucnt.c -- a flush's uncounted references (catalog/ucnt.h).
 *
 * A deferring writer's flush applies a key's REF and LREF ops -- blocks
 * the store held already -- by marking their positions uncounted when the
 * key's entry is alive in the flush's transaction: count at least 1, and
 * neither lost nor found damaged.  Invariant U then holds for each from
 * the start, and the transaction writes a row of bits where it would have
 * rewritten the entry's DDT leaf: a 1 GiB re-put at 4 KiB blocks writes
 * 32 KiB of bits instead of nearly every leaf of the DDT.  Any other entry
 * (dead, lost, damaged, absent) takes the counted path (wops.c), which
 * heals or fails as before.  A run of LREF ops only -- blocks a re-put
 * found at their place in a committed snapshot's map -- needs no look at
 * its entry when that snapshot is still there and no entry is flagged
 * (dd_wub_lrefs).
 *
 * The bits are set in memory per row of the positions the flush's ops
 * span, and ORed into its ucnt rows by each of its transactions, the one
 * that moves the mark past their keys: every committed state has each
 * position counted by the DDT, uncounted with its bit set, or past the
 * mark (store/defer.h).  Fixed blocks only: a content-defined map's
 * positions are byte offsets.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "catalog/ucnt.h"
#include "common/pool.h"
#include "common/alloc.h"
#include "store/writer_internal.h"

bool dd_writer_uncounted = true;
_Atomic uint64_t dd_wub_unlooked;   /* writers of a process may flush at once */

/* wu_pre: what the pool found of a run's entry (dd_wub_precheck) */
enum { DD_WUB_UNCHECKED = 0, DD_WUB_ALIVE, DD_WUB_NOT };

/* An op's block-map position; fixed blocks: its index. */
static uint64_t dd_wub_pos(const dd_wop *op)
{
	return op->op_idx;
}

void dd_wub_free(dd_writer *w)
{
	dd_free(w->w_ub.wu_row);
	dd_free(w->w_ub.wu_bits);
	dd_free(w->w_ub.wu_pre);
	memset(&w->w_ub, 0, sizeof(w->w_ub));
}

int dd_wub_begin(dd_writer *w)
{
	const dd_wops *wo = &w->w_ops;
	struct dd_wubits *ub = &w->w_ub;
	size_t n = 0;

	dd_wub_free(w);
	if (!dd_writer_uncounted || !w->w_defer ||
	    dd_db_varblock(w->w_store->st_db) || !wo->wo_n)
		return 0;
	/* the ops are in the image's order: their rows ascend */
	for (size_t i = 0; i < wo->wo_n; i++)
		if (!i || dd_wub_pos(&wo->wo_op[i]) / DD_UCNT_SPAN !=
				  dd_wub_pos(&wo->wo_op[i - 1]) / DD_UCNT_SPAN)
			n++;
	ub->wu_row = dd_malloc(n * sizeof(*ub->wu_row));
	ub->wu_bits = dd_calloc(n, DD_UCNT_BYTES);
	if (!ub->wu_row || !ub->wu_bits) {
		dd_wub_free(w);
		return dd_err_set(&w->w_err, DD_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < wo->wo_n; i++) {
		uint64_t row = dd_wub_pos(&wo->wo_op[i]) / DD_UCNT_SPAN;

		if (!ub->wu_n || ub->wu_row[ub->wu_n - 1] != row)
			ub->wu_row[ub->wu_n++] = row;
	}
	return 0;
}

/* The slot of the row of pos, one of the flush's. */
static size_t dd_wub_slot(const struct dd_wubits *ub, uint64_t pos)
{
	uint64_t row = pos / DD_UCNT_SPAN;
	size_t lo = 0, hi = ub->wu_n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (ub->wu_row[mid] < row)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Does entry ent leave a key's references uncounted? */
static bool dd_wub_alive(const dd_ddt_ent *ent)
{
	return ent->de_refcnt > 0 &&
	       !dd_ddt_ent_flagged(ent);
}

/* Are the n ops of run all LREF? */
static bool dd_wub_lref_run(dd_wop *const *run, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (run[i]->op_kind != DD_OP_LREF)
			return false;
	return true;
}

/*
 * A re-put's LREF needs no look at its entry when the flush's transaction
 * shows two things: the snapshot it was read from is still committed, so
 * the entry is counted, or uncounted and held at 1 (invariant U) -- alive;
 * and no DDT entry is flagged, so it is neither MISSING nor DAMAGED.  At
 * 4 M entries and 4 KiB blocks the looks were a third of a re-put's time
 * (perf), and with the DDT outgrowing memory all its DDT reads.
 */
void dd_wub_lrefs(dd_writer *w)
{
	bool unflagged = false;
	dd_err err;

	w->w_ub.wu_lrefs_live =
		w->w_ub.wu_n && w->w_loc &&
		!dd_ddt_unflagged(w->w_txn, &err, &unflagged) && unflagged &&
		dd_wloc_sources_live(w, w->w_txn);
}

int dd_wub_apply(dd_writer *w, dd_wop **run, size_t n, bool *done)
{
	struct dd_wubits *ub = &w->w_ub;
	uint8_t pre = ub->wu_pre ? ub->wu_pre[run - w->w_ops.wo_ord]
				 : DD_WUB_UNCHECKED;
	dd_ddt_ent ent;
	int rc;

	*done = false;
	if (!ub->wu_n || pre == DD_WUB_NOT)
		return 0;
	if (ub->wu_lrefs_live && pre != DD_WUB_ALIVE &&
	    dd_wub_lref_run(run, n)) {
		atomic_fetch_add_explicit(&dd_wub_unlooked, 1,
					  memory_order_relaxed);
	} else if (pre != DD_WUB_ALIVE) {
		rc = dd_ddt_get_w(w->w_txn, &w->w_err, &run[0]->op_key, &ent);
		if (rc == DD_ENOENT)
			return 0;
		if (rc)
			return rc;
		if (!dd_wub_alive(&ent))
			return 0;
	}
	for (size_t i = 0; i < n; i++) {
		const dd_wop *op = run[i];
		size_t slot;

		if (op->op_kind != DD_OP_REF && op->op_kind != DD_OP_LREF)
			continue;
		slot = dd_wub_slot(ub, dd_wub_pos(op));
		if (slot == ub->wu_n ||
		    ub->wu_row[slot] != dd_wub_pos(op) / DD_UCNT_SPAN)
			return dd_err_set(&w->w_err, DD_EIO, "internal error: "
					  "block %llu outside its flush",
					  (unsigned long long)op->op_idx);
		dd_ucnt_set_bit(ub->wu_bits + slot * DD_UCNT_BYTES,
				dd_wub_pos(op), true);
	}
	*done = true;
	return 0;
}

/* ---- the checks on the pool ------------------------------------------------*/

/*
 * A re-put's flush checks each key's entry before it leaves the key's
 * references uncounted: at 1 M DDT entries a descent per key, 0.16 s of
 * a 0.9 s re-put of 1 GiB at 4 KiB blocks, on one thread after the last
 * block (perf).  When the flush is one transaction, the checks run first
 * on the pool, in read transactions begun after the flush's write
 * transaction: while that holds LMDB's writer lock nobody else commits,
 * so they read its starting state; and the flush writes no key it checks
 * before the key's own run, as each key is one run.  ALIVE: the run is
 * left uncounted without a look of its own; NOT: the counted path, which
 * looks again and heals or fails as before; a check that could not read
 * leaves its run UNCHECKED, for dd_wub_apply to look and report.
 */
#define DD_WUB_PRE_OPS 4096      /* ops a pool item checks, in key order */

/* atomic: writers of one process may flush at once */
_Atomic uint64_t dd_wub_prechecked;

struct dd_wub_pre {
	dd_writer *wp_w;
	dd_txn **wp_txn;          /* per pool worker, begun at its first item */
};

/* Does the run at wo_ord[i] need a look: does it hold a reference (REF
 * or LREF), and is it not one dd_wub_apply leaves uncounted unlooked at
 * (LREF ops only, wu_lrefs_live)? */
static bool dd_wub_run_to_check(const dd_writer *w, size_t i)
{
	const dd_wops *wo = &w->w_ops;
	bool refs = false, lrefs_only = w->w_ub.wu_lrefs_live;

	for (size_t j = i; j < wo->wo_n && (j == i || !wo->wo_kstart[j]);
	     j++) {
		uint8_t kind = wo->wo_ord[j]->op_kind;

		refs |= kind == DD_OP_REF || kind == DD_OP_LREF;
		lrefs_only &= kind == DD_OP_LREF;
	}
	return refs && !lrefs_only;
}

/* Item k: the runs that start among ops [k, k + 1) * DD_WUB_PRE_OPS. */
static void dd_wub_pre_job(void *arg, size_t item, unsigned worker)
{
	struct dd_wub_pre *wp = arg;
	dd_writer *w = wp->wp_w;
	const dd_wops *wo = &w->w_ops;
	uint8_t *res = w->w_ub.wu_pre;
	size_t end = (item + 1) * DD_WUB_PRE_OPS;
	dd_txn **txn = &wp->wp_txn[worker];
	dd_err err;

	if (!*txn && dd_txn_begin(w->w_store->st_db, &err, false, txn)) {
		*txn = NULL;
		return;   /* unchecked: dd_wub_apply looks */
	}
	if (end > wo->wo_n)
		end = wo->wo_n;
	for (size_t i = item * DD_WUB_PRE_OPS; i < end; i++) {
		dd_ddt_ent ent;
		int rc;

		if (!wo->wo_kstart[i] || !dd_wub_run_to_check(w, i))
			continue;
		rc = dd_ddt_get(*txn, &err, &wo->wo_ord[i]->op_key, &ent);
		if (rc == DD_ENOENT || (!rc && !dd_wub_alive(&ent)))
			res[i] = DD_WUB_NOT;
		else if (!rc)
			res[i] = DD_WUB_ALIVE;
	}
}

void dd_wub_precheck(dd_writer *w)
{
	dd_store *s = w->w_store;
	const dd_wops *wo = &w->w_ops;
	struct dd_wub_pre wp = { .wp_w = w };
	size_t items = (wo->wo_n + DD_WUB_PRE_OPS - 1) / DD_WUB_PRE_OPS;
	unsigned width = dd_pool_width(s->st_pool);
	uint64_t checked = 0;

	if (!w->w_ub.wu_n || !s->st_pool || items < 2 ||
	    pthread_mutex_trylock(&s->st_pool_lock) != 0)
		return;   /* checked one run at a time, as they come */
	w->w_ub.wu_pre = dd_calloc(wo->wo_n, 1);
	wp.wp_txn = dd_calloc(width, sizeof(*wp.wp_txn));
	if (w->w_ub.wu_pre && wp.wp_txn)
		dd_pool_run(s->st_pool, dd_wub_pre_job, &wp, items);
	pthread_mutex_unlock(&s->st_pool_lock);
	for (unsigned i = 0; wp.wp_txn && i < width; i++)
		if (wp.wp_txn[i])
			dd_txn_abort(wp.wp_txn[i]);
	dd_free(wp.wp_txn);
	for (size_t i = 0; w->w_ub.wu_pre && i < wo->wo_n; i++)
		checked += w->w_ub.wu_pre[i] != DD_WUB_UNCHECKED;
	atomic_fetch_add_explicit(&dd_wub_prechecked, checked,
				  memory_order_relaxed);
}

void dd_wub_precheck_end(dd_writer *w)
{
	dd_free(w->w_ub.wu_pre);
	w->w_ub.wu_pre = NULL;
}

int dd_wub_store(dd_writer *w)
{
	struct dd_wubits *ub = &w->w_ub;

	for (size_t i = 0; i < ub->wu_n; i++) {
		uint8_t *bits = ub->wu_bits + i * DD_UCNT_BYTES;
		int rc;

		if (dd_ucnt_none(bits))
			continue;   /* nothing set since the last store */
		rc = dd_ucnt_or(w->w_txn, &w->w_err, w->w_id, ub->wu_row[i],
				bits);
		if (rc)
			return rc;
		memset(bits, 0, DD_UCNT_BYTES);
	}
	return 0;
}
