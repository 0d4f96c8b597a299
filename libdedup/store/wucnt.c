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
 * heals or fails as before.
 *
 * The bits are set in memory per row of the positions the flush's ops
 * span, and ORed into its ucnt rows by each of its transactions, the one
 * that moves the mark past their keys: every committed state has each
 * position counted by the DDT, uncounted with its bit set, or past the
 * mark (store/defer.h).  Fixed blocks only: a content-defined map's
 * positions are byte offsets.
 */
#include <string.h>

#include "catalog/ucnt.h"
#include "common/alloc.h"
#include "store/writer_internal.h"

bool dd_writer_uncounted = true;

/* An op's block-map position; fixed blocks: its index. */
static uint64_t dd_wub_pos(const dd_wop *op)
{
	return op->op_idx;
}

void dd_wub_free(dd_writer *w)
{
	dd_free(w->w_ub.wu_row);
	dd_free(w->w_ub.wu_bits);
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

int dd_wub_apply(dd_writer *w, dd_wop **run, size_t n, bool *done)
{
	struct dd_wubits *ub = &w->w_ub;
	dd_ddt_ent ent;
	int rc;

	*done = false;
	if (!ub->wu_n)
		return 0;
	rc = dd_ddt_get_w(w->w_txn, &w->w_err, &run[0]->op_key, &ent);
	if (rc == DD_ENOENT)
		return 0;
	if (rc)
		return rc;
	if (ent.de_refcnt == 0 ||
	    (ent.de_flags & (DD_DDE_MISSING | DD_DDE_DAMAGED)))
		return 0;
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
