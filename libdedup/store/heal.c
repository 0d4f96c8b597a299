/*
 * heal.c -- heal damaged and lost blocks from a good copy (dedup repair
 * --from, format/store.md §9.1).
 *
 * What it heals: the DDT entries flagged DAMAGED (scrub read their record
 * and found it bad) or MISSING (repair found no pack holding them) that
 * some snapshot still references.  Where the good copies come from:
 * another store, looked up by hash in its DDT and read through its
 * checked path (dd_block_read), or the DATA records of a replication
 * stream (stream/heal.c), each decompressed and hashed here before it is
 * kept.  Either way a copy is the block only once its SHA-256 is the key.
 *
 * Write order, as a writer's (format/store.md §7, §7.1): under the
 * store's lock shared (dd_store_enter), the copies are appended to packs
 * of this heal's own (created recorded at their empty end, locked until
 * the commit), synced, then one short write transaction points each entry
 * at its copy -- only if it is still flagged and names the record it
 * named when the heal read it (a writer may have healed it, gc moved it,
 * meanwhile: dd_apply_takeover's rule) --, keeping its references, and
 * records the packs' ends.  Nothing is committed when the heal fails
 * (a damaged stream, say): the packs are cut back to their empty ends.
 */
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "store/replica.h"
#include "store/store_internal.h"
#include "store/writer_internal.h"

typedef struct dd_hblk {
	dd_ddt_key hb_key;
	dd_ddt_ent hb_ent;        /* as the heal read it */
	bool hb_have;             /* a good copy is appended */
	int hb_state;             /* after the commit: 1 healed, -1 still
				     damaged or lost, 0 neither any more */
	uint8_t hb_codec;
	uint32_t hb_pack;
	uint64_t hb_off;
	uint32_t hb_psize;
} dd_hblk;

struct dd_heal {
	dd_store *h_store;
	int h_lockfd;
	dd_hblk *h_b;             /* sorted by key */
	size_t h_n, h_cap, h_have;
	dd_pack **h_packs;        /* ours; the last one is appended to */
	size_t h_npacks;
	dd_scratch h_sc;
	uint8_t *h_cbuf;          /* one compressed block */
	uint8_t *h_vbuf;          /* one block read from a source store */
};

static int dd_heal_key_cmp(const void *a, const void *b)
{
	return memcmp(a, b, sizeof(dd_ddt_key));
}

static int dd_heal_collect(void *arg, const dd_ddt_key *key,
			   const dd_ddt_ent *e)
{
	void **ctx = arg;
	dd_heal *h = ctx[0];
	dd_err *err = ctx[1];

	/* in use: a dead entry heals by any writer's copy (ddt.md §1) */
	if (!dd_ddt_ent_flagged(e) ||
	    e->de_refcnt == 0)
		return 0;
	if (h->h_n == h->h_cap) {
		size_t n = h->h_cap ? h->h_cap * 2 : 64;
		dd_hblk *nb = dd_realloc(h->h_b, n * sizeof(*nb));

		if (!nb)
			return dd_err_set(err, DD_ENOMEM, "out of memory");
		h->h_b = nb;
		h->h_cap = n;
	}
	memset(&h->h_b[h->h_n], 0, sizeof(*h->h_b));
	h->h_b[h->h_n].hb_key = *key;
	h->h_b[h->h_n].hb_ent = *e;
	h->h_n++;
	return 0;
}

void dd_heal_free(dd_heal *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < h->h_npacks; i++)
		dd_pack_close(h->h_packs[i]);
	dd_free(h->h_packs);
	dd_free(h->h_b);
	dd_free(h->h_cbuf);
	dd_free(h->h_vbuf);
	dd_scratch_fini(&h->h_sc);
	if (h->h_lockfd >= 0)
		dd_store_leave(h->h_store, h->h_lockfd);
	dd_free(h);
}

int dd_heal_begin(dd_heal **out, dd_err *err, dd_store *s)
{
	dd_heal *h;
	dd_txn *txn = NULL;
	void *ctx[2];
	int rc;

	*out = NULL;
	if (s->st_hash_kind != DD_HASH_SHA256)
		return dd_err_set(err, DD_ENOTSUP, "store is not keyed by "
				  "SHA-256: a copy cannot be told by its hash");
	h = dd_calloc(1, sizeof(*h));
	if (!h)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	h->h_store = s;
	h->h_lockfd = -1;
	ctx[0] = h;
	ctx[1] = err;
	rc = dd_scratch_init(&h->h_sc, err, s);
	if (!rc) {
		h->h_cbuf = dd_malloc(dd_codec_bound(s->st_block_max));
		h->h_vbuf = dd_malloc(s->st_block_max);
		if (!h->h_cbuf || !h->h_vbuf)
			rc = dd_err_set(err, DD_ENOMEM, "out of memory");
	}
	if (!rc)
		rc = dd_store_enter(s, err, &h->h_lockfd);
	if (!rc)
		rc = dd_txn_begin(s->st_db, err, false, &txn);
	if (!rc)
		rc = dd_ddt_walk(txn, err, dd_heal_collect, ctx);
	dd_txn_abort(txn);
	if (rc) {
		dd_heal_free(h);
		return rc;
	}
	/* dd_ddt_walk gives keys in order already; sorted to be sure */
	if (h->h_n)
		qsort(h->h_b, h->h_n, sizeof(*h->h_b), dd_heal_key_cmp);
	*out = h;
	return 0;
}

size_t dd_heal_wanted(const dd_heal *h)
{
	return h->h_n - h->h_have;
}

/* Appends the block in h_sc.sc_dbuf (lsize bytes, its hash checked) to
 * our pack and gives every wanted entry of that hash and size the copy. */
static int dd_heal_store(dd_heal *h, dd_err *err, size_t first,
			 uint32_t lsize)
{
	dd_store *s = h->h_store;
	dd_pack_rec rec = {.pr_lsize = lsize};
	dd_pack *p = h->h_npacks ? h->h_packs[h->h_npacks - 1] : NULL;
	uint64_t off;
	int rc;

	memcpy(rec.pr_hash, h->h_b[first].hb_key.dk_hash, DD_HASH_SIZE);
	rc = dd_codec_compress(h->h_sc.sc_codec, err, h->h_cbuf,
			       h->h_sc.sc_dbuf, lsize, &rec.pr_psize,
			       &rec.pr_codec);
	if (rc)
		return rc;
	if (!p || dd_pack_end(p) + DD_PACK_REC_HDR_SIZE + rec.pr_psize >
			  dd_store_pack_max(s)) {
		dd_pack **np = dd_realloc(h->h_packs, (h->h_npacks + 1) *
					  sizeof(*np));

		if (!np)
			return dd_err_set(err, DD_ENOMEM, "out of memory");
		h->h_packs = np;
		rc = dd_store_new_pack(s, err, true, &p);
		if (rc)
			return rc;
		h->h_packs[h->h_npacks++] = p;
	}
	rc = dd_pack_append(p, err, &rec, h->h_cbuf, &off);
	if (rc)
		return rc;
	for (size_t i = first; i < h->h_n &&
	     !memcmp(h->h_b[i].hb_key.dk_hash, rec.pr_hash, DD_HASH_SIZE); i++) {
		dd_hblk *b = &h->h_b[i];

		if (b->hb_have || b->hb_ent.de_lsize != lsize)
			continue;
		b->hb_have = true;
		b->hb_codec = rec.pr_codec;
		b->hb_pack = dd_pack_id(p);
		b->hb_off = off;
		b->hb_psize = rec.pr_psize;
		h->h_have++;
	}
	return 0;
}

/* The first wanted entry of this hash and size still without a copy:
 * its index, or h_n. */
static size_t dd_heal_find(const dd_heal *h, const uint8_t hash[DD_HASH_SIZE],
			   uint32_t lsize)
{
	size_t lo = 0, hi = h->h_n;

	while (lo < hi) {   /* the first key of this hash */
		size_t mid = lo + (hi - lo) / 2;

		if (memcmp(h->h_b[mid].hb_key.dk_hash, hash, DD_HASH_SIZE) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < h->h_n &&
	       !memcmp(h->h_b[lo].hb_key.dk_hash, hash, DD_HASH_SIZE); lo++)
		if (!h->h_b[lo].hb_have && h->h_b[lo].hb_ent.de_lsize == lsize)
			return lo;
	return h->h_n;
}

int dd_heal_offer(dd_heal *h, dd_err *err, const uint8_t hash[DD_HASH_SIZE],
		  uint8_t codec, uint32_t lsize, uint32_t psize,
		  const void *payload)
{
	dd_pack_rec rec = {.pr_codec = codec, .pr_lsize = lsize,
			   .pr_psize = psize};
	uint8_t got[DD_HASH_SIZE];
	size_t at = dd_heal_find(h, hash, lsize);
	int rc;

	if (at == h->h_n)
		return 0;   /* not wanted: skipped unread */
	if (lsize > h->h_store->st_block_max || psize == 0 ||
	    (size_t)psize > dd_codec_bound(lsize))
		return dd_err_set(err, DD_EFORMAT, "a block's payload size %u "
				  "is out of range", psize);
	memcpy(rec.pr_hash, hash, DD_HASH_SIZE);
	rc = dd_codec_decompress(h->h_sc.sc_codec, err, &rec, payload,
				 h->h_sc.sc_dbuf);
	if (rc)
		return rc;
	dd_hasher_sum(h->h_sc.sc_hasher, h->h_sc.sc_dbuf, lsize, got);
	if (memcmp(got, hash, DD_HASH_SIZE))
		return dd_err_set(err, DD_ECHECKSUM, "a block's sha256 does "
				  "not match the stream");
	return dd_heal_store(h, err, at, lsize);
}

/* A wanted block from the source store: any good record of its hash and
 * size there (in a SHA-256 store every record of a hash is the block,
 * format/store.md §9).  A source entry that is lost, damaged or of
 * another size is passed over; a record that reads badly too. */
static int dd_heal_from_one(dd_heal *h, dd_err *err, dd_store *src,
			    dd_txn *stxn, dd_scratch *ssc, size_t at)
{
	dd_ddt_key key = h->h_b[at].hb_key;
	uint32_t lsize = h->h_b[at].hb_ent.de_lsize;

	/* h_vbuf holds one block of this store; a longer lsize is damage
	 * of the entry itself, which a copy cannot heal */
	if (lsize > src->st_block_max || lsize > h->h_store->st_block_max)
		return 0;
	for (unsigned v = 0; v <= DD_DDT_MAX_VARIANT; v++) {
		dd_ddt_ent e;
		dd_err rerr;
		int rc;

		key.dk_variant = (uint8_t)v;
		rc = dd_ddt_get(stxn, err, &key, &e);
		if (rc == DD_ENOENT)
			return 0;
		if (rc)
			return rc;
		if ((e.de_flags & DD_DDE_MISSING) || e.de_lsize != lsize)
			continue;
		rc = dd_block_read(src, &rerr, ssc, &key, &e, h->h_vbuf);
		if (rc == DD_ENOMEM)
			return dd_err_set(err, rc, "out of memory");
		if (rc)
			continue;   /* damaged there too */
		memcpy(h->h_sc.sc_dbuf, h->h_vbuf, lsize);
		return dd_heal_store(h, err, at, lsize);
	}
	return 0;
}

int dd_heal_from_store(dd_heal *h, dd_err *err, dd_store *src)
{
	dd_scratch ssc;
	dd_txn *stxn = NULL;
	int rc;

	if (src->st_hash_kind != DD_HASH_SHA256)
		return dd_err_set(err, DD_ENOTSUP, "the source store is not "
				  "keyed by SHA-256");
	if (!h->h_n)
		return 0;
	rc = dd_scratch_init(&ssc, err, src);
	if (rc)
		return rc;
	rc = dd_txn_begin(src->st_db, err, false, &stxn);
	for (size_t i = 0; !rc && i < h->h_n; i++)
		if (!h->h_b[i].hb_have)
			rc = dd_heal_from_one(h, err, src, stxn, &ssc, i);
	dd_txn_abort(stxn);
	dd_scratch_fini(&ssc);
	return rc;
}

/* One entry, in the commit's write transaction: takes our copy only if it
 * is still the damaged or lost entry the heal read (dd_apply_takeover's
 * rule, format/store.md §7.1).  *state: 1 healed, 0 no longer flagged
 * (someone else healed it, or it went), -1 still flagged. */
static int dd_heal_apply(dd_txn *txn, dd_err *err, const dd_hblk *b,
			 int *state)
{
	dd_ddt_ent e;
	int rc = dd_ddt_get(txn, err, &b->hb_key, &e);

	*state = 0;
	if (rc == DD_ENOENT)
		return 0;
	if (rc)
		return rc;
	if (!dd_ddt_ent_flagged(&e))
		return 0;
	*state = -1;
	if (!b->hb_have || e.de_refcnt == 0 ||
	    e.de_flags != b->hb_ent.de_flags ||
	    e.de_pack != b->hb_ent.de_pack ||
	    e.de_offset != b->hb_ent.de_offset)
		return 0;   /* dead meanwhile: gc's; moved: looked at again */
	e.de_flags = 0;
	e.de_codec = b->hb_codec;
	e.de_pack = b->hb_pack;
	e.de_offset = b->hb_off;
	e.de_psize = b->hb_psize;
	*state = 1;
	return dd_ddt_put(txn, err, &b->hb_key, &e);
}

/* A heal that left none of the flags it knew of: when that was every
 * flag (the unflagged claim withdrawn, and a census finds none in its
 * transaction), re-puts may again leave references uncounted without a
 * look (store/wucnt.c) -- one walk of the DDT, as the heal's own start
 * took. */
static int dd_heal_census(dd_txn *txn, dd_err *err)
{
	bool withdrawn;
	int rc = dd_ddt_unflagged_withdrawn(txn, err, &withdrawn);

	return rc || !withdrawn ? rc : dd_ddt_census(txn, err, NULL);
}

int dd_heal_finish(dd_heal *h, dd_err *err, dd_heal_report_fn report,
		   void *ctx, dd_heal_result *out)
{
	dd_heal_result res = {0};
	dd_txn *txn = NULL;
	int rc = 0;

	/* data before the metadata that names it (invariant 1) */
	for (size_t i = 0; !rc && i < h->h_npacks; i++)
		rc = dd_pack_sync(h->h_packs[i], err);
	if (!rc)
		rc = dd_txn_begin(h->h_store->st_db, err, true, &txn);
	for (size_t i = 0; !rc && i < h->h_n; i++) {
		int state;

		rc = dd_heal_apply(txn, err, &h->h_b[i], &state);
		h->h_b[i].hb_state = state;
		if (state > 0)
			res.healed++;
		else if (state < 0)
			res.missing++;
	}
	for (size_t i = 0; !rc && i < h->h_npacks; i++)
		rc = dd_packs_put(txn, err, dd_pack_id(h->h_packs[i]),
				  dd_pack_end(h->h_packs[i]));
	if (!rc && !res.missing)
		rc = dd_heal_census(txn, err);
	if (rc && txn)
		dd_txn_abort(txn);
	else if (!rc)
		rc = dd_txn_commit(txn, err);
	if (rc)
		return rc;
	res.wanted = h->h_n;
	for (size_t i = 0; report && i < h->h_n; i++) {
		const dd_hblk *b = &h->h_b[i];

		if (b->hb_state)
			report(ctx, b->hb_key.dk_hash, b->hb_ent.de_lsize,
			       b->hb_state > 0);
	}
	if (out)
		*out = res;
	return 0;
}

void dd_heal_abort(dd_heal *h)
{
	dd_err e;

	/* nothing committed names these records: their empty ends */
	for (size_t i = 0; i < h->h_npacks; i++)
		(void)dd_pack_truncate(h->h_packs[i], &e,
				       DD_PACK_FILE_HDR_SIZE);
}
