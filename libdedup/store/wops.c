/*
 * wops.c -- a writer's commit interval: the decisions its lookups made,
 * and the commit that applies them (format/store.md §7).
 *
 * A writer decides each block's fate against a read transaction, so that
 * it holds no lock while it hashes, compresses and appends:
 *
 *   REF   the DDT holds the block in an entry this writer may reference
 *         (dd_writer_usable): alive, or dead only since the writer
 *         started, which gc keeps for it;
 *   NEW   nothing usable holds it: the writer appends it to its own pack;
 *   PREF  a NEW block of this same interval holds it (the key index
 *         below finds those);
 *   LREF  a REF found in the block map of the snapshot a re-put repeats
 *         (wloc.c), its entry's flags checked at the flush.
 *
 * The commit syncs the writer's packs, then applies the ops in one write
 * transaction: each REF and PREF counts a reference; each NEW adds its
 * entry -- unless another writer committed the same block meanwhile,
 * then that entry gets the reference and this copy is garbage for gc
 * (in verify mode only once the two copies compare equal; a lost entry,
 * DD_DDE_MISSING, one scrub found damaged, DD_DDE_DAMAGED, and a dead
 * one take this copy as their own) --; the block map is
 * appended.  The DDT changes go in key order, one update per key (all
 * its references counted at once, a NEW entry inserted with its PREF
 * ops counted): a descent per distinct key where one per op and two per
 * reference were, its upper pages shared with the key before.  Other
 * writers wait for the LMDB lock only as long as that transaction, a few
 * milliseconds per thousand blocks.
 *
 * A deferring writer (store/defer.h: a put without verify) keeps its ops
 * -- and the key index, so PREF spans them -- from one flush to the
 * next: its interval commits, every 65,536 blocks, only append their
 * block map and record the packs' ends; a flush applies the DDT changes
 * as above, dd_writer_flush_keys keys a transaction, moving its mark.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/kfilter.h"
#include "common/alloc.h"
#include "common/endian.h"
#include "store/writer_internal.h"

/* Bytes between intermediate commits; a variable so tests can make a
 * small image commit several times (store_internal.h). */
uint64_t dd_writer_commit_bytes = (uint64_t)512 << 20;
#define DD_WRITER_COMMIT_BLOCKS 8192u

/* A deferring writer's flushes (store/defer.h).  Half the DDT's entries
 * per flush: each leaf page it rewrites then takes a dozen changes or
 * more, whatever the table's size; at most 512 Ki ops (about 57 MiB of
 * ops, sort order and key index, and 8 MiB while they are sorted), which
 * bounds what the writer owns.  A
 * flush transaction applies 8192 distinct keys, as a commit interval
 * did, which bounds LMDB's dirty pages in the heap. */
uint64_t dd_writer_defer_min = 65536;
uint64_t dd_writer_defer_max = 524288;
uint32_t dd_writer_flush_keys = 8192;
/* ... or more: a flush's keys are in key order, so a transaction of k of
 * its K keys rewrites the leaves of k / K of the key space only, about
 * (E + K) / 32 * k / K pages of a DDT of E entries before it (a 4 KiB
 * leaf holds 54 entries full, 27 just split).  A transaction may take as
 * many keys as keep that at dd_writer_flush_keys pages: all of them into
 * an empty DDT, 52 Ki of 256 Ki into one of 1 M entries, 15 Ki into one
 * of 4 M -- a commit (two fdatasyncs, 4 ms each here) for each, where
 * there were 32.  0: dd_writer_flush_keys keys, whatever the DDT (tests
 * that want many transactions). */
uint32_t dd_writer_flush_leaf = 32;
/* A flush that appends to a run (dd_flush_to_runs) takes this many keys
 * a transaction, whatever the DDT: a run's pages cost what an empty
 * table's do.  Not more: LMDB allocates each page a transaction dirties
 * from the heap and reuses them in the next, so a transaction of 262,144
 * new keys (about 21 MiB of pages) first-touched 5,800 pages more than
 * four of 65,536 did -- 0.1-0.15 s of a 1.8 s put of 1 GiB of 4 KiB
 * blocks, for three more commits of a few milliseconds each. */
uint32_t dd_writer_run_keys = 65536;

/* ---- the ops list and its key index -------------------------------------*/

/*
 * The key index: open addressing, linear probing, at most half full.  A
 * slot holds a NEW op's index + 1 in its low 32 bits (0: empty) and 32
 * other bits of the key's hash in its high ones, its tag.  Nearly every
 * key a put asks about is not in it (new data) or is the one in the
 * first slot it probes (a block repeated in the interval); the tag
 * answers "not this one" from the slot alone, so a probe reads the op
 * itself only for a likely match -- one cache miss a lookup, not two at
 * 262,144 ops (about 5% of a put's main thread at 4 KiB blocks), and
 * that one prefetched (dd_wops_prefetch_key).
 */
static size_t dd_wops_slot_of(const dd_wops *wo, const uint8_t *hash,
			      uint8_t variant)
{
	uint64_t h = dd_get_le64(hash) ^
		     (uint64_t)variant * 0x9e3779b97f4a7c15ull;

	return (size_t)(h >> 7) & (wo->wo_ixcap - 1);
}

static size_t dd_wops_slot(const dd_wops *wo, const dd_ddt_key *key)
{
	return dd_wops_slot_of(wo, key->dk_hash, key->dk_variant);
}

/* Bits 64-95 of the hash: independent of the slot's. */
static uint64_t dd_wops_tag(const dd_ddt_key *key)
{
	return (uint64_t)dd_get_le32(key->dk_hash + 8) << 32;
}

#define DD_WOPS_IX_AT(e) ((uint32_t)(e) - 1)
#define DD_WOPS_IX_TAG(e) ((e) & 0xffffffff00000000ull)

static bool dd_key_eq(const dd_ddt_key *a, const dd_ddt_key *b)
{
	return a->dk_variant == b->dk_variant &&
	       !memcmp(a->dk_hash, b->dk_hash, DD_HASH_SIZE);
}

static void dd_wops_index(dd_wops *wo, uint32_t at)
{
	const dd_ddt_key *key = &wo->wo_op[at].op_key;
	size_t i = dd_wops_slot(wo, key);

	while (wo->wo_ix[i])
		i = (i + 1) & (wo->wo_ixcap - 1);
	wo->wo_ix[i] = dd_wops_tag(key) | ((uint64_t)at + 1);
}

/* The key index at cap slots (a power of two, at least twice the NEW
 * ops): every NEW op re-entered. */
static int dd_wops_index_at(dd_wops *wo, dd_err *err, size_t cap)
{
	uint64_t *ix = dd_calloc(cap, sizeof(*ix));

	if (!ix)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	dd_advise_huge(ix, cap * sizeof(*ix));
	dd_free(wo->wo_ix);
	wo->wo_ix = ix;
	wo->wo_ixcap = cap;
	for (size_t i = 0; i < wo->wo_n; i++)
		if (wo->wo_op[i].op_kind == DD_OP_NEW)
			dd_wops_index(wo, (uint32_t)i);
	return 0;
}

/* Keeps the index at most half full: doubles it. */
static int dd_wops_grow_index(dd_wops *wo, dd_err *err)
{
	return dd_wops_index_at(wo, err, wo->wo_ixcap ? wo->wo_ixcap * 2
						       : 4096);
}

void dd_wops_reserve(dd_wops *wo, size_t n)
{
	size_t cap = wo->wo_ixcap ? wo->wo_ixcap : 4096;

	if (n > UINT32_MAX)
		n = UINT32_MAX;
	if (n > wo->wo_cap) {
		dd_wop *ops = dd_realloc(wo->wo_op, n * sizeof(*ops));

		if (!ops)
			return;
		dd_advise_huge(ops, n * sizeof(*ops));
		wo->wo_op = ops;
		wo->wo_cap = n;
	}
	while (cap < 2 * n)
		cap *= 2;
	if (cap != wo->wo_ixcap)
		(void)dd_wops_index_at(wo, NULL, cap);   /* a hint */
}

int dd_wops_add(dd_wops *wo, dd_err *err, const dd_wop *op, uint32_t *at)
{
	if (wo->wo_n == wo->wo_cap) {
		size_t n = wo->wo_cap ? wo->wo_cap * 2 : 1024;
		dd_wop *ops = n <= UINT32_MAX
				      ? dd_realloc(wo->wo_op, n * sizeof(*ops))
				      : NULL;

		if (!ops)
			return dd_err_set(err, DD_ENOMEM, "out of memory");
		dd_advise_huge(ops, n * sizeof(*ops));
		wo->wo_op = ops;
		wo->wo_cap = n;
	}
	wo->wo_op[wo->wo_n] = *op;
	if (at)
		*at = (uint32_t)wo->wo_n;
	wo->wo_n++;
	if (op->op_kind != DD_OP_NEW)
		return 0;
	if (2 * (wo->wo_nnew + 1) > wo->wo_ixcap) {
		int rc = dd_wops_grow_index(wo, err);

		if (rc) {
			wo->wo_n--;
			return rc;
		}
	} else {
		dd_wops_index(wo, (uint32_t)(wo->wo_n - 1));
	}
	wo->wo_nnew++;
	return 0;
}

dd_wop *dd_wops_find_new(dd_wops *wo, const dd_ddt_key *key, uint32_t *at)
{
	uint64_t tag = dd_wops_tag(key);

	if (!wo->wo_nnew)
		return NULL;
	for (size_t i = dd_wops_slot(wo, key); wo->wo_ix[i];
	     i = (i + 1) & (wo->wo_ixcap - 1)) {
		uint64_t e = wo->wo_ix[i];
		dd_wop *op;

		if (DD_WOPS_IX_TAG(e) != tag)
			continue;
		op = &wo->wo_op[DD_WOPS_IX_AT(e)];
		if (dd_key_eq(&op->op_key, key)) {
			*at = DD_WOPS_IX_AT(e);
			return op;
		}
	}
	return NULL;
}

void dd_wops_prefetch_key(const dd_wops *wo, const uint8_t *hash)
{
	if (wo->wo_nnew)
		__builtin_prefetch(&wo->wo_ix[dd_wops_slot_of(wo, hash, 0)]);
}

void dd_wops_reset(dd_wops *wo)
{
	if (wo->wo_nnew)
		memset(wo->wo_ix, 0, wo->wo_ixcap * sizeof(*wo->wo_ix));
	wo->wo_n = 0;
	wo->wo_nnew = 0;
	wo->wo_mapped = 0;
}

void dd_wops_free(dd_wops *wo)
{
	dd_free(wo->wo_op);
	dd_free(wo->wo_ix);
	dd_free(wo->wo_ord);
	dd_free(wo->wo_kstart);
	memset(wo, 0, sizeof(*wo));
}

/* ---- applying them -------------------------------------------------------*/

/* n more references to the entry of key, which must be there: a writer
 * references only entries gc keeps for it (dd_writer_usable).  idx is the
 * first block that names it, for the message. */
static int dd_apply_ref(dd_writer *w, const dd_ddt_key *key, uint64_t n,
			uint64_t idx)
{
	dd_ddt_ent ent;
	int rc = dd_ddt_add_refs(w->w_txn, &w->w_err, key, n, &ent);

	if (rc == DD_ENOENT)
		return dd_err_set(&w->w_err, DD_ECORRUPT, "block %llu: the "
				  "stored block it references left the store "
				  "before the commit (freed by gc, or lost)",
				  (unsigned long long)idx);
	return rc;
}

/* The entry of key takes this writer's copy as its record, keeping its
 * references and adding this writer's: it was lost (MISSING), found
 * damaged (DAMAGED) or dead, and the copy is the block (its hash is the
 * key).  Readers of older catalogs still see the old record, which gc
 * reclaims like any garbage; gc's repointing skips an entry that moved
 * since it read it (gc.c), so this copy is never undone. */
int dd_writer_takeover(dd_writer *w, const dd_ddt_key *key,
		       const dd_ddt_ent *old, const dd_ddt_ent *ours)
{
	dd_ddt_ent ent = *ours;

	ent.de_refcnt = old->de_refcnt + ours->de_refcnt;
	return dd_ddt_put(w->w_txn, &w->w_err, key, &ent);
}

static int dd_apply_takeover(dd_writer *w, dd_wop *op, const dd_ddt_key *key,
			     const dd_ddt_ent *old, const dd_ddt_ent *ours)
{
	op->op_key = *key;
	return dd_writer_takeover(w, key, old, ours);
}

/* n references found through a snapshot's block map (LREF, wloc.c),
 * the first op lref: as REFs, but an entry lost or found damaged since is
 * healed from the input instead of referenced as it is. */
static int dd_apply_lref(dd_writer *w, const dd_wop *lref,
			 const dd_ddt_key *key, uint64_t n)
{
	dd_ddt_ent ent;
	int rc = dd_ddt_add_refs(w->w_txn, &w->w_err, key, n, &ent);

	if (rc == 0)   /* counted already: the heal adds none */
		return ent.de_flags & DD_DDE_DAMAGED
			       ? dd_wloc_heal(w, lref, key, &ent, 0) : 0;
	if (rc != DD_ENOENT)
		return rc;
	/* absent, or MISSING (no bytes: dd_ddt_add_refs counts none) */
	rc = dd_ddt_get(w->w_txn, &w->w_err, key, &ent);
	if (rc == 0 && (ent.de_flags & DD_DDE_MISSING))
		return dd_wloc_heal(w, lref, key, &ent, n);
	return rc && rc != DD_ENOENT ? rc : dd_apply_ref(w, key, n,
							 lref->op_idx);
}

/* A NEW op and the refs blocks of this interval that named it (its PREF
 * ops, and itself): its entry, or references to the same block another
 * writer committed meanwhile.  op_key gets the variant it ends under. */
static int dd_apply_new(dd_writer *w, dd_wop *op, uint64_t refs)
{
	const dd_ddt_ent ours = {
		.de_codec = op->op_codec, .de_pack = op->op_pack,
		.de_offset = op->op_off, .de_psize = op->op_psize,
		.de_lsize = op->op_lsize, .de_refcnt = refs,
	};
	dd_ddt_key key = op->op_key;
	bool have_bytes = false;

	if (!op->op_placed)
		return dd_err_set(&w->w_err, DD_EIO, "internal error: block "
				  "%llu committed before it was stored",
				  (unsigned long long)op->op_idx);
	for (unsigned v = key.dk_variant; v <= DD_DDT_MAX_VARIANT; v++) {
		dd_ddt_ent ent;
		bool same = true;
		int rc;

		key.dk_variant = (uint8_t)v;
		rc = op->op_absent && w->w_absent_ok && v == 0
			     ? dd_ddt_insert_absent(w->w_txn, &w->w_err, &key,
						    &ours, &ent)
			     : dd_ddt_insert(w->w_txn, &w->w_err, &key, &ours,
					     &ent);
		if (rc == 0) {
			op->op_key = key;
			return 0;
		}
		if (rc != DD_EEXIST)
			return rc;
		if (dd_ddt_ent_flagged(&ent))
			/* a block repair found no copy of, or scrub found
			 * damaged: this is it */
			return dd_apply_takeover(w, op, &key, &ent, &ours);
		if (w->w_store->st_verify) {
			if (!have_bytes) {
				rc = dd_block_read(w->w_store, &w->w_err,
						   &w->w_sc, &op->op_key, &ours,
						   w->w_vbuf);
				if (rc)
					return rc;
				have_bytes = true;
			}
			rc = dd_writer_same_ent(w, &key, &ent, w->w_vbuf,
						op->op_lsize, &same);
			if (rc)
				return rc;
		}
		if (same && ent.de_refcnt == 0)
			/* never revive a dead record unread: it may have been
			 * damaged while nothing used it (format/ddt.md §3) */
			return dd_apply_takeover(w, op, &key, &ent, &ours);
		if (same) {
			op->op_key = key;
			return dd_apply_ref(w, &key, refs, op->op_idx);
		}
	}
	return dd_err_set(&w->w_err, DD_ENOSPC,
			  "more than %d different blocks share one hash",
			  DD_DDT_MAX_VARIANT + 1);
}

/* The commit's order: by the key the lookup chose, so that one key's ops
 * are one run and neighbouring keys' descents share their upper pages;
 * within a key, the image's order (the list's). */
int dd_wop_cmp(const void *a, const void *b)
{
	const dd_wop *x = *(dd_wop *const *)a, *y = *(dd_wop *const *)b;
	int c = dd_ddt_key_cmp(&x->op_key, &y->op_key);

	if (c)
		return c;
	return x < y ? -1 : x > y;
}

/* One key's ops: its REF ops are one update of the entry (+ their
 * number); its NEW op -- at most one: a later block of the key finds it
 * and becomes a PREF -- is inserted with its PREF ops counted, and they
 * take the key it ends under.  REF before NEW, as in the image: a block
 * found usable and later not (scrub flagged it meanwhile).  *wrote: the
 * DDT changed (not when every REF was left uncounted and there is no
 * NEW). */
static int dd_apply_run(dd_writer *w, dd_wop **run, size_t n, bool *wrote)
{
	dd_wop *nw = NULL, *lref = NULL;
	uint64_t refs = 0, prefs = 0, ref_idx = 0;
	bool uncounted = false;
	int rc = 0;

	for (size_t i = 0; i < n; i++) {
		dd_wop *op = run[i];

		if (op->op_kind == DD_OP_NEW) {
			nw = op;
		} else if (op->op_kind == DD_OP_PREF) {
			prefs++;
		} else {
			if (!refs++)
				ref_idx = op->op_idx;
			if (op->op_kind == DD_OP_LREF && !lref)
				lref = op;
		}
	}
	if (refs)   /* a flush may leave them uncounted (wucnt.c) */
		rc = dd_wub_apply(w, run, n, &uncounted);
	if (!rc && refs && !uncounted)
		rc = lref ? dd_apply_lref(w, lref, &run[0]->op_key, refs)
			  : dd_apply_ref(w, &run[0]->op_key, refs, ref_idx);
	*wrote = (refs && !uncounted) || nw;
	if (rc)
		return rc;
	if (!nw)
		return prefs ? dd_err_set(&w->w_err, DD_EIO, "internal error: "
					  "a reference to a new block of the "
					  "interval without it") : 0;
	rc = dd_apply_new(w, nw, 1 + prefs);
	for (size_t i = 0; !rc && i < n; i++)
		if (run[i]->op_kind == DD_OP_PREF)
			run[i]->op_key = nw->op_key;
	return rc;
}

/* wo_ord: the ops in the commit's order. */
/* One stable counting pass of a radix sort: `from` by the 16 bits of
 * each item at `shift`, into `to`. */
static void dd_wops_radix_pass(const uint64_t *from, uint64_t *to, size_t n,
			       unsigned shift, uint32_t *count)
{
	memset(count, 0, 65536 * sizeof(*count));
	for (size_t i = 0; i < n; i++)
		count[(from[i] >> shift) & 0xffff]++;
	for (uint32_t d = 0, sum = 0; d < 65536; d++) {
		uint32_t c = count[d];

		count[d] = sum;
		sum += c;
	}
	for (size_t i = 0; i < n; i++)
		to[count[(from[i] >> shift) & 0xffff]++] = from[i];
}

/* wo_ord, the ops in dd_wop_cmp's order.  The keys are SHA-256 hashes,
 * uniform, so a stable radix sort of (first 32 bits of the hash, op
 * index) -- two passes of 16 bits -- orders them all but the runs of one
 * prefix, which are kept in the image's order: a key the image repeats,
 * already in dd_wop_cmp's order (its ops by address), and rarely two keys
 * (or variants of one hash, or the test-only weak hash), which qsort then
 * orders.  At 4 KiB blocks qsort of the whole list was 5-7% of a put's
 * CPU, on the thread that commits: each comparison chased two op
 * pointers to memory in no order. */
int dd_wops_order(dd_wops *wo, dd_err *err)
{
	size_t n = wo->wo_n;
	uint64_t *a;
	uint32_t *count;

	if (!n)
		return 0;
	if (n > wo->wo_ordcap) {
		dd_wop **ord = dd_realloc(wo->wo_ord, wo->wo_cap * sizeof(*ord));
		uint8_t *ks;

		if (!ord)
			return dd_err_set(err, DD_ENOMEM, "out of memory");
		dd_advise_huge(ord, wo->wo_cap * sizeof(*ord));
		wo->wo_ord = ord;
		ks = dd_realloc(wo->wo_kstart, wo->wo_cap);
		if (!ks)
			return dd_err_set(err, DD_ENOMEM, "out of memory");
		wo->wo_kstart = ks;
		wo->wo_ordcap = wo->wo_cap;
	}
	a = dd_malloc(2 * n * sizeof(*a));
	count = dd_malloc(65536 * sizeof(*count));
	if (!a || !count) {
		dd_free(a);
		dd_free(count);
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	}
	dd_advise_huge(a, 2 * n * sizeof(*a));
	for (size_t i = 0; i < n; i++)   /* dd_wops_add: n <= UINT32_MAX */
		a[i] = (uint64_t)dd_get_be32(wo->wo_op[i].op_key.dk_hash) << 32 |
		       (uint32_t)i;
	dd_wops_radix_pass(a, a + n, n, 32, count);
	dd_wops_radix_pass(a + n, a, n, 48, count);
	dd_free(count);
	for (size_t i = 0; i < n; i++)
		wo->wo_ord[i] = &wo->wo_op[(uint32_t)a[i]];
	wo->wo_nkeys = 0;
	for (size_t i = 0, j; i < n; i = j) {
		bool sorted = true;

		for (j = i + 1; j < n && a[j] >> 32 == a[i] >> 32; j++)
			if (sorted && dd_wop_cmp(&wo->wo_ord[j - 1],
						 &wo->wo_ord[j]) > 0)
				sorted = false;
		if (!sorted)
			qsort(wo->wo_ord + i, j - i, sizeof(*wo->wo_ord),
			      dd_wop_cmp);
		wo->wo_kstart[i] = 1;
		wo->wo_nkeys++;
		for (size_t k = i + 1; k < j; k++) {
			wo->wo_kstart[k] = !dd_key_eq(&wo->wo_ord[k - 1]->op_key,
						      &wo->wo_ord[k]->op_key);
			wo->wo_nkeys += wo->wo_kstart[k];
		}
	}
	dd_free(a);
	return 0;
}

static int dd_wops_sort(dd_writer *w)
{
	return dd_wops_order(&w->w_ops, &w->w_err);
}

/* The end of the run of one key's ops that starts at wo_ord[i].  By the
 * marks dd_wops_order left, not the keys: wo_ord points into wo_op in no
 * order, and comparing the next op's key was a cache miss per op, 14% of
 * a 4 KiB re-put's final flush. */
static size_t dd_wops_run_end(const dd_wops *wo, size_t i)
{
	size_t j = i + 1;

	while (j < wo->wo_n && !wo->wo_kstart[j])
		j++;
	return j;
}

/* Asks for the op a few runs ahead of wo_ord[i] to be in the cache when
 * the loop gets there: the ops lie in wo_op in the image's order, read
 * here in key order. */
#define DD_WOPS_AHEAD 16

static void dd_wops_prefetch(const dd_wops *wo, size_t i)
{
	const dd_wop *op;

	if (i + DD_WOPS_AHEAD >= wo->wo_n)
		return;
	/* both ends of it (GCC 12 drops the prefetch of a pointer cast to
	 * char *, so no byte arithmetic here) */
	op = wo->wo_ord[i + DD_WOPS_AHEAD];
	__builtin_prefetch(op);
	__builtin_prefetch(&op->op_target);
}

/* Appends the block map of the ops not in it yet, in the image's order. */
static int dd_wops_map(dd_writer *w)
{
	dd_wops *wo = &w->w_ops;
	int rc = 0;

	for (; !rc && wo->wo_mapped < wo->wo_n; wo->wo_mapped++) {
		const dd_wop *op = &wo->wo_op[wo->wo_mapped];

		rc = dd_bmap_append_block(w->w_txn, &w->w_err, w->w_id,
					  op->op_idx, op->op_ioff,
					  op->op_lsize, &op->op_key);
	}
	return rc;
}

/* The interval's DDT changes in key order, one update per key; then its
 * block map in the image's order.  Room in the key filter first, for its
 * new keys at most, as a deferring writer's flush makes (dd_flush_absent):
 * a writer that does not defer (a receive, verify mode) would otherwise
 * fill its newest segment past full over its commits, and the next
 * writer's open would rebuild the filter from a walk of the whole DDT
 * (format/kfilter.md §4). */
static int dd_apply_ops(dd_writer *w)
{
	dd_wops *wo = &w->w_ops;
	int rc;

	if (!wo->wo_n)
		return 0;                /* holes only */
	rc = dd_kf_txn_reserve(w->w_txn, &w->w_err, wo->wo_nnew);
	if (!rc)
		rc = dd_wops_sort(w);
	for (size_t i = 0, j; !rc && i < wo->wo_n; i = j) {
		bool wrote;

		dd_wops_prefetch(wo, i);
		j = dd_wops_run_end(wo, i);
		rc = dd_apply_run(w, wo->wo_ord + i, j - i, &wrote);
	}
	return rc ? rc : dd_wops_map(w);
}

/* A deferring writer's interval holds no DDT change, only its block map
 * and its packs' ends, which matter to no one before its flush (a crash
 * rolls the snapshot back): it commits every 65,536 blocks -- or as often
 * as it may flush, if that is more often -- instead of 8192, a
 * transaction and two fdatasyncs where eight were. */
static uint64_t dd_writer_commit_blocks(const dd_writer *w)
{
	if (!w->w_defer)
		return DD_WRITER_COMMIT_BLOCKS;
	return w->w_defer_min < 65536 ? w->w_defer_min : 65536;
}

bool dd_writer_commit_due(const dd_writer *w, uint64_t bytes, uint64_t blocks)
{
	return w->w_uncommitted + bytes >= dd_writer_commit_bytes ||
	       w->w_uncommitted_blocks + blocks >= dd_writer_commit_blocks(w);
}

/* Parks the probes' read txns, so that none holds back pages LMDB could
 * reuse or packs gc doomed. */
static void dd_writer_probe_park(dd_writer *w)
{
	dd_wloc_park(w);
	for (unsigned i = 0; w->w_probe && i < w->w_nworkers; i++)
		dd_txn_reset(w->w_probe[i]);
}

/* Commits w_txn, or aborts it when rc says a step failed. */
static int dd_writer_txn_end(dd_writer *w, int rc)
{
	if (rc)
		dd_txn_abort(w->w_txn);
	else
		rc = dd_txn_commit(w->w_txn, &w->w_err);
	w->w_txn = NULL;
	return rc;
}

/* ---- deferring writers (store/defer.h) -----------------------------------*/

static int dd_writer_pend_mark(dd_writer *w, dd_txn *txn,
			       const dd_defer_mark *m)
{
	uint8_t state[DD_DEFER_STATE_SIZE];

	dd_defer_encode(m, state);
	return dd_pend_put_state(txn, &w->w_err, w->w_id, w->w_name, state,
				 sizeof(state));
}

int dd_writer_pend_put(dd_writer *w, dd_txn *txn)
{
	if (!w->w_defer)
		return dd_pend_put(txn, &w->w_err, w->w_id, w->w_name);
	memset(&w->w_mark, 0, sizeof(w->w_mark));
	return dd_writer_pend_mark(w, txn, &w->w_mark);
}

/* An op's block-map key, as dd_bmap_append_block chooses it: a block
 * index, or a content-defined block's offset (format/store.md §4.2). */
static uint64_t dd_wop_pos(const dd_writer *w, const dd_wop *op)
{
	return dd_db_varblock(w->w_store->st_db) ? op->op_ioff : op->op_idx;
}

bool dd_writer_defer_setup(dd_writer *w)
{
	const char *v = getenv("DEDUP_DEFER_OPS");
	char *end;
	unsigned long long n;

	w->w_defer_min = dd_writer_defer_min;
	w->w_defer_max = dd_writer_defer_max;
	if (v && *v && *v != '-') {
		errno = 0;
		n = strtoull(v, &end, 10);
		if (!errno && !*end)
			w->w_defer_min = w->w_defer_max = n;
	}
	return w->w_defer_min != 0;
}

/* Ops to gather before a flush, for a DDT of `entries`. */
static uint64_t dd_writer_defer_due(const dd_writer *w, uint64_t entries)
{
	uint64_t due = entries / 2;

	if (due > w->w_defer_max)
		due = w->w_defer_max;
	return due < w->w_defer_min ? w->w_defer_min : due;
}

/* An interval's write transaction: its ops applied -- a deferring
 * writer's only appended to the block map, not counted (the mark is
 * before them) --, the commit hook run, the packs' ends recorded.  With
 * entries, the DDT's size as it leaves it. */
static int dd_writer_commit_txn(dd_writer *w, uint64_t *entries)
{
	int rc = dd_txn_begin(w->w_store->st_db, &w->w_err, true, &w->w_txn);

	if (rc)
		return rc;
	rc = w->w_defer ? dd_wops_map(w) : dd_apply_ops(w);
	if (!rc && w->w_on_commit && w->w_state == DD_W_OPEN)
		rc = w->w_on_commit(w->w_on_commit_ctx);
	if (!rc)
		rc = dd_writer_record_packs(w);
	if (!rc && entries)
		rc = dd_ddt_count(w->w_txn, &w->w_err, entries);
	return dd_writer_txn_end(w, rc);
}

/* Keys per transaction of a flush (dd_writer_flush_leaf), read in its
 * first, w_txn, before it changes anything. */
/* The keys a flush will change the DDT for: with uncounted references
 * (wucnt.c) only the new ones, nearly. */
static uint64_t dd_writer_flush_changing(const dd_writer *w)
{
	return w->w_ub.wu_n ? w->w_ops.wo_nnew : w->w_ops.wo_nkeys;
}

static int dd_writer_flush_txn_keys(dd_writer *w, uint64_t *per_txn,
				    uint64_t *entries)
{
	uint64_t k = dd_writer_flush_changing(w);
	uint64_t e, scaled;
	int rc = dd_ddt_count(w->w_txn, &w->w_err, &e);

	if (rc)
		return rc;
	*entries = e;
	*per_txn = dd_writer_flush_keys ? dd_writer_flush_keys : 1;
	if (!dd_writer_flush_leaf || !k)
		return 0;
	/* k <= 2^32 ops, the rest small: no overflow */
	scaled = *per_txn * dd_writer_flush_leaf * k / (e + k);
	if (scaled > *per_txn)
		*per_txn = scaled;
	return 0;
}

/*
 * In a flush's first transaction: every new key's bits into the key
 * filter -- synced once, at its commit, not by each transaction --
 * and, asked first, which of them no entry of the DDT it starts from
 * has (op_absent; format/ddt.md §5).  Not in verify mode, where a
 * hash's match is only where comparing starts.  *gen: the filter asked
 * (0: no answer is trusted after this transaction).
 */
#define DD_FLUSH_KF_AHEAD 8

static int dd_flush_absent(dd_writer *w, uint64_t *gen)
{
	dd_wops *wo = &w->w_ops;
	bool verify = w->w_store->st_verify;
	/* room for the new keys first: a segment added to a full filter
	 * is a copy of it, where filling it past full would cost a walk
	 * of the DDT at the next writer's open (format/kfilter.md §4) */
	int rc = dd_kf_txn_reserve(w->w_txn, &w->w_err, wo->wo_nnew);

	for (size_t k = 0; k < wo->wo_n; k++) {
		dd_wop *op = &wo->wo_op[k];
		bool absent = false;

		/* each asks a random block (and its sum) of every segment:
		 * fetched some keys ahead */
		if (!rc && k + DD_FLUSH_KF_AHEAD < wo->wo_n &&
		    wo->wo_op[k + DD_FLUSH_KF_AHEAD].op_kind == DD_OP_NEW)
			dd_kf_txn_prefetch(
				w->w_txn,
				wo->wo_op[k + DD_FLUSH_KF_AHEAD].op_key.dk_hash);
		if (!rc && op->op_kind == DD_OP_NEW)
			rc = dd_kf_txn_test_add(w->w_txn, &w->w_err,
						op->op_key.dk_hash, &absent);
		op->op_absent = absent && !verify &&
				op->op_key.dk_variant == 0;
	}
	*gen = rc ? 0 : dd_kf_txn_gen(w->w_txn);
	w->w_absent_ok = !rc;
	return rc;
}

/* May a later transaction of the flush trust the ops' op_absent?  Only
 * while the DDT it starts from is the one they were asked about with
 * only this flush's earlier transactions on it: it starts from *expect,
 * the flush's previous commit, and the filter asked still holds every
 * key of it (a rebuild, a damaged block, or a commit of a build that
 * does not keep it breaks that).  *expect moves to this one. */
static int dd_flush_trusts(dd_writer *w, uint64_t *expect, uint64_t *gen)
{
	uint64_t id = dd_txn_id(w->w_txn);
	bool holds = false;
	int rc = 0;

	if (*gen && id - 1 == *expect)
		rc = dd_kf_txn_holds(w->w_txn, &w->w_err, *gen, &holds);
	if (!holds)
		*gen = 0;    /* broken once, broken for the rest */
	w->w_absent_ok = holds;
	*expect = id;
	return rc;
}

/* Does a flush of `nnew` new keys into a DDT of `entries` append them to
 * a sorted run (format/ddt.md §5)?  Into the main table they cost up to
 * a leaf each (random keys, few per leaf); a run costs a page per ~50 of
 * them, plus its share of the fold every DD_DDT_RUNS_MAX runs (the whole
 * table rewritten in order: about entries / 50 / 32 pages per run).  So
 * a run once the new keys are about 1/1024 of the table or more. */
static bool dd_flush_to_runs(uint64_t nnew, uint64_t entries)
{
	return nnew && nnew >= entries / 1024;
}

/* Applies every op held, in key order, dd_writer_flush_keys keys that
 * change the DDT per write transaction; each moves the mark past the
 * keys it applied, so that a crash between them leaves a map whose
 * counted entries are exactly the DDT's (recovery rolls it back by the
 * mark).  The last takes the mark out of the `pend` value when the
 * snapshot is about to be published. */
static int dd_writer_flush(dd_writer *w, bool last)
{
	dd_wops *wo = &w->w_ops;
	dd_defer_mark m = w->w_mark;
	size_t i = 0;
	int rc = dd_wops_sort(w);
	uint64_t per_txn = 0, expect = 0, gen = 0, entries = 0;
	bool to_runs = false;

	if (!rc)
		rc = dd_wub_begin(w);
	if (wo->wo_n)
		m.dm_end = dd_wop_pos(w, &wo->wo_op[wo->wo_n - 1]) + 1;
	for (bool done = false; !rc && !done;) {
		rc = dd_txn_begin(w->w_store->st_db, &w->w_err, true,
				  &w->w_txn);
		if (rc)
			break;
		if (!per_txn) {
			rc = dd_flush_absent(w, &gen);
			expect = dd_txn_id(w->w_txn);
		} else {
			rc = dd_flush_trusts(w, &expect, &gen);
		}
		dd_wub_lrefs(w);
		if (!rc && !per_txn) {   /* aborted below if it fails */
			rc = dd_writer_flush_txn_keys(w, &per_txn, &entries);
			to_runs = dd_flush_to_runs(wo->wo_nnew, entries);
			/* appended to a run, new keys cost what they would
			 * in an empty table: a page per ~50 */
			if (to_runs && dd_writer_flush_leaf)
				per_txn = dd_writer_run_keys;
			/* one transaction for every op (a re-put): its
			 * checks first, on the pool */
			if (!rc && dd_writer_flush_changing(w) <= per_txn)
				dd_wub_precheck(w);
		}
		dd_ddt_use_runs(w->w_txn, to_runs);
		/* keys that change the DDT: runs left uncounted dirty no
		 * leaf, and a re-put's flush is one transaction */
		for (uint64_t keys = 0; !rc && i < wo->wo_n &&
					keys < per_txn;) {
			size_t j = dd_wops_run_end(wo, i);
			bool wrote;

			dd_wops_prefetch(wo, i);
			rc = dd_apply_run(w, wo->wo_ord + i, j - i, &wrote);
			keys += wrote;
			i = j;
		}
		done = i == wo->wo_n;
		if (done) {
			m.dm_done = m.dm_end;
			memset(&m.dm_key, 0, sizeof(m.dm_key));
		} else {
			m.dm_key = wo->wo_ord[i]->op_key;
		}
		if (!rc)   /* the bits of the positions the mark passes */
			rc = dd_wub_store(w);
		if (!rc)
			rc = done && last ? dd_pend_put(w->w_txn, &w->w_err,
							w->w_id, w->w_name)
					  : dd_writer_pend_mark(w, w->w_txn,
								&m);
		rc = dd_writer_txn_end(w, rc);
		dd_wub_precheck_end(w);
		if (!rc)
			w->w_mark = m;
	}
	w->w_absent_ok = false;
	dd_wub_free(w);
	return rc;
}

static int dd_writer_sync_commit_as(dd_writer *w, bool last,
				    void (*mapped)(void *), void *arg)
{
	bool flush = last || !w->w_defer;
	uint64_t entries = 0;
	int rc;

	dd_writer_probe_park(w);
	dd_txn_reset(w->w_rtxn);
	/* data before the metadata that names it (invariant 1) */
	rc = dd_writer_sync_packs(w);
	if (!rc)
		rc = dd_writer_commit_txn(w, flush ? NULL : &entries);
	if (!rc && mapped)
		mapped(arg);
	if (!rc && !flush)
		flush = w->w_ops.wo_n >= dd_writer_defer_due(w, entries);
	if (!rc && flush && w->w_defer)
		rc = dd_writer_flush(w, last);
	if (rc)
		return rc;
	w->w_uncommitted = 0;
	w->w_uncommitted_blocks = 0;
	if (!flush)
		return 0;   /* the ops stay, and the packs they name locked */
	dd_writer_close_full(w);
	dd_wops_reset(&w->w_ops);
	dd_wloc_flushed(w, w->w_size);
	w->w_ncommit++;
	return 0;
}

int dd_writer_sync_commit(dd_writer *w)
{
	return dd_writer_sync_commit_as(w, false, NULL, NULL);
}

int dd_writer_sync_commit_last(dd_writer *w, void (*mapped)(void *),
			       void *arg)
{
	return dd_writer_sync_commit_as(w, true, mapped, arg);
}
