/*
 * diff.c -- the byte ranges in which two snapshots differ (dd_diff_*,
 * `dedup diff`), from their block maps alone.
 *
 * Both maps are swept together, one cursor each, in block order
 * (format/store.md §4: a missing index is a hole).  Block i differs when
 * exactly one map names it, or both name different keys (hash and
 * variant); no map naming it means two holes, the same bytes.  All
 * snapshots of a store share its block size, so block i covers the same
 * bytes in both.  Up to the end of the shorter snapshot a changed block
 * gives its bytes (the shorter one's last block may be short); everything
 * past that end differs.  Ranges are coalesced as they are found: the
 * iterator holds back one, and hands it out when the next changed bytes
 * do not continue it.
 *
 * Memory is constant: two cursors and two ranges.  The read transaction
 * opened with the iterator keeps both maps as they were at the open.
 * Every entry of both maps, also past the shorter end, is fed into its
 * snapshot's content digest (format/store.md §6), holes as zeros; at the
 * end each must equal the snapshot's own, or the map is damaged
 * (DD_ECORRUPT), as a reader reading in order finds (reader.c).
 *
 * Content-defined blocks (format/store.md §4.2) fall where their bytes
 * say, so the two maps' blocks need not line up: the sweep goes by
 * bytes, from one block end (of either side) to the next.  A stretch is
 * the same when both sides are holes there, or the same block -- key,
 * first byte and length -- covers it on both; otherwise it differs.
 */
#include <string.h>

#include "common/alloc.h"
#include "store/store_internal.h"

typedef struct dd_diff_side {
	dd_snap_rec ds_rec;
	dd_bmap_cur *ds_cur;
	bool ds_have;             /* ds_idx / ds_key: its next entry */
	uint64_t ds_idx;          /* var: the block's first byte */
	uint32_t ds_len;          /* var: its length */
	dd_ddt_key ds_key;
	dd_digest *ds_digest;
	uint64_t ds_dig_next;     /* the next block index the digest wants
				     (var: byte) */
} dd_diff_side;

struct dd_diff {
	dd_store *df_store;
	dd_err df_err;
	dd_txn *df_txn;
	dd_diff_side df_side[2];  /* from, to */
	uint64_t df_bs;
	uint64_t df_common;       /* bytes both snapshots have */
	uint64_t df_common_blocks;
	/* The range being grown, and one complete range ready to hand out. */
	bool df_have_pend, df_have_ready;
	uint64_t df_pend_off, df_pend_end;
	uint64_t df_ready_off, df_ready_end;
	bool df_eof;              /* both maps walked and checked */
	int df_rc;                /* a failure, returned by every later call */
	bool df_var;              /* content-defined blocks, by offset */
	uint64_t df_at;           /* var: the first byte not yet compared */
};

/* Adds the changed bytes [off, end): grows the pending range, or makes it
 * ready and starts a new one. */
static void dd_diff_add(dd_diff *d, uint64_t off, uint64_t end)
{
	if (off >= end)
		return;
	if (d->df_have_pend && d->df_pend_end == off) {
		d->df_pend_end = end;
		return;
	}
	if (d->df_have_pend) {
		d->df_ready_off = d->df_pend_off;
		d->df_ready_end = d->df_pend_end;
		d->df_have_ready = true;
	}
	d->df_pend_off = off;
	d->df_pend_end = end;
	d->df_have_pend = true;
}

/* Feeds the holes before block idx and idx itself into side's digest. */
static void dd_diff_digest(dd_diff_side *sd, uint64_t idx,
			   const dd_ddt_key *key)
{
	if (sd->ds_len) {   /* var: the hole before, then the block */
		if (idx > sd->ds_dig_next)
			dd_digest_block(sd->ds_digest, NULL,
					idx - sd->ds_dig_next);
		dd_digest_block(sd->ds_digest, key->dk_hash, sd->ds_len);
		sd->ds_dig_next = idx + sd->ds_len;
		return;
	}
	/* a run of holes at once: O(1) in a digest of version 2 */
	if (idx > sd->ds_dig_next)
		dd_digest_zeros(sd->ds_digest, idx - sd->ds_dig_next);
	dd_digest_block(sd->ds_digest, key ? key->dk_hash : NULL, 0);
	sd->ds_dig_next = idx + 1;
}

/* The entry the cursor gave: in order and inside the image. */
static int dd_diff_check_entry(dd_diff *d, dd_diff_side *sd)
{
	const dd_snap_rec *r = &sd->ds_rec;

	sd->ds_len = dd_bmap_len(sd->ds_cur);
	if (!sd->ds_have || (d->df_var
			     ? sd->ds_idx >= sd->ds_dig_next &&
			       sd->ds_idx < r->sr_size &&
			       sd->ds_len <= r->sr_size - sd->ds_idx
			     : sd->ds_idx < r->sr_blocks &&
			       sd->ds_idx >= sd->ds_dig_next))
		return 0;
	return dd_err_set(&d->df_err, DD_ECORRUPT,
			  "block map entry %llu out of order or past the "
			  "snapshot's end (damaged metadata; run scrub)",
			  (unsigned long long)sd->ds_idx);
}

/* Moves side past its current entry (fed to the digest) to the next. */
static int dd_diff_advance(dd_diff *d, dd_diff_side *sd)
{
	int rc;

	dd_diff_digest(sd, sd->ds_idx, &sd->ds_key);
	rc = dd_bmap_next(sd->ds_cur, &d->df_err, &sd->ds_idx, &sd->ds_key);
	if (rc < 0)
		return rc;
	sd->ds_have = rc == 1;
	return dd_diff_check_entry(d, sd);
}

/* Both maps walked: each digest against its snapshot's, then the tail
 * past the shorter end. */
static int dd_diff_finish(dd_diff *d)
{
	static const char *const which[2] = {"first", "second"};
	uint8_t got[DD_HASH_SIZE];

	for (int i = 0; i < 2; i++) {
		dd_diff_side *sd = &d->df_side[i];

		if (d->df_var && sd->ds_rec.sr_size > sd->ds_dig_next)
			dd_digest_block(sd->ds_digest, NULL,
					sd->ds_rec.sr_size - sd->ds_dig_next);
		if (!d->df_var && sd->ds_rec.sr_blocks > sd->ds_dig_next)
			dd_digest_zeros(sd->ds_digest, sd->ds_rec.sr_blocks -
						       sd->ds_dig_next);
		if (!d->df_var)
			sd->ds_dig_next = sd->ds_rec.sr_blocks;
		dd_digest_final(sd->ds_digest, sd->ds_rec.sr_size,
				sd->ds_rec.sr_block_size, got);
		if (memcmp(got, sd->ds_rec.sr_digest, DD_HASH_SIZE) != 0)
			return dd_err_set(&d->df_err, DD_ECORRUPT,
					  "the block map of the %s snapshot "
					  "does not match its content digest "
					  "(damaged metadata; run scrub)",
					  which[i]);
	}
	dd_diff_add(d, d->df_common,
		    d->df_side[0].ds_rec.sr_size > d->df_side[1].ds_rec.sr_size
		    ? d->df_side[0].ds_rec.sr_size
		    : d->df_side[1].ds_rec.sr_size);
	d->df_eof = true;
	return 0;
}

/* var: side's stretch that holds byte x -- its block [ds_idx, end), or
 * a hole up to its next block or its end. */
static uint64_t dd_diff_stretch(const dd_diff_side *sd, uint64_t x,
				bool *hole)
{
	*hole = !sd->ds_have || sd->ds_idx > x;
	if (!sd->ds_have)
		return sd->ds_rec.sr_size;
	return *hole ? sd->ds_idx : sd->ds_idx + sd->ds_len;
}

/* Walks content-defined maps by bytes until a range is ready or both
 * maps end; past the shorter snapshot's end, the maps are only walked
 * for their digests. */
static int dd_diff_step_var(dd_diff *d)
{
	dd_diff_side *a = &d->df_side[0], *b = &d->df_side[1];
	int rc = 0;

	while (!d->df_have_ready && !d->df_eof) {
		uint64_t x = d->df_at, ea, eb, end;
		bool ha, hb, same;

		if (x >= d->df_common) {
			while (!rc && a->ds_have)
				rc = dd_diff_advance(d, a);
			while (!rc && b->ds_have)
				rc = dd_diff_advance(d, b);
			return rc ? rc : dd_diff_finish(d);
		}
		ea = dd_diff_stretch(a, x, &ha);
		eb = dd_diff_stretch(b, x, &hb);
		same = ha && hb;
		if (!ha && !hb)
			same = a->ds_idx == b->ds_idx && ea == eb &&
			       !memcmp(&a->ds_key.dk_hash, &b->ds_key.dk_hash,
				       DD_HASH_SIZE) &&
			       a->ds_key.dk_variant == b->ds_key.dk_variant;
		end = ea < eb ? ea : eb;
		if (end > d->df_common)
			end = d->df_common;
		if (!same)
			dd_diff_add(d, x, end);
		d->df_at = end;
		if (!ha && ea <= end && (rc = dd_diff_advance(d, a)) != 0)
			return rc;
		if (!hb && eb <= end && (rc = dd_diff_advance(d, b)) != 0)
			return rc;
	}
	return 0;
}

/* Walks until a range is ready or both maps end. */
static int dd_diff_step(dd_diff *d)
{
	dd_diff_side *a = &d->df_side[0], *b = &d->df_side[1];
	int rc = 0;

	while (!d->df_have_ready && !d->df_eof) {
		uint64_t i;
		bool ina, inb, same;

		if (!a->ds_have && !b->ds_have)
			return dd_diff_finish(d);
		i = !a->ds_have ? b->ds_idx : !b->ds_have ? a->ds_idx
			: a->ds_idx < b->ds_idx ? a->ds_idx : b->ds_idx;
		ina = a->ds_have && a->ds_idx == i;
		inb = b->ds_have && b->ds_idx == i;
		same = ina && inb &&
		       memcmp(&a->ds_key.dk_hash, &b->ds_key.dk_hash,
			      DD_HASH_SIZE) == 0 &&
		       a->ds_key.dk_variant == b->ds_key.dk_variant;
		if (ina && (rc = dd_diff_advance(d, a)) != 0)
			return rc;
		if (inb && (rc = dd_diff_advance(d, b)) != 0)
			return rc;
		if (!same && i < d->df_common_blocks) {
			uint64_t end = (i + 1) * d->df_bs;

			dd_diff_add(d, i * d->df_bs,
				    end < d->df_common ? end : d->df_common);
		}
	}
	return 0;
}

static int dd_diff_side_open(dd_diff *d, dd_diff_side *sd, const char *name)
{
	dd_store *s = d->df_store;
	int rc = dd_store_snap_get(s, &d->df_err, d->df_txn, name, &sd->ds_rec);

	if (!rc && sd->ds_rec.sr_block_size != s->st_block_size)
		rc = dd_err_set(&d->df_err, DD_ECORRUPT,
				"snapshot '%s' has block size %u, store %u",
				name, sd->ds_rec.sr_block_size,
				s->st_block_size);
	if (!rc)
		rc = dd_digest_new(&sd->ds_digest, &d->df_err, s->st_chunker,
				   sd->ds_rec.sr_digest_version,
				   sd->ds_rec.sr_block_size);
	if (!rc)
		rc = dd_bmap_open(d->df_txn, &d->df_err, sd->ds_rec.sr_id,
				  &sd->ds_cur);
	if (!rc)
		rc = dd_bmap_seek(sd->ds_cur, &d->df_err, 0, &sd->ds_idx,
				  &sd->ds_key);
	if (rc < 0)
		return rc;
	sd->ds_have = rc == 1;
	rc = dd_diff_check_entry(d, sd);
	if (rc)
		dd_err_wrap(&d->df_err, 0, name, NULL);
	return rc;
}

int dd_diff_open(dd_diff **out, dd_store *s, const char *from, const char *to)
{
	dd_diff *d;
	int rc;

	if (!s || !out)
		return s ? dd_store_failf(s, DD_EINVAL, "dd_diff_open: NULL "
					  "argument") : DD_EINVAL;
	if (dd_name_check(from) || dd_name_check(to))
		return dd_store_failf(s, DD_ENAME, "invalid snapshot name");
	d = dd_calloc(1, sizeof(*d));
	if (!d)
		return dd_store_failf(s, DD_ENOMEM, "out of memory");
	d->df_store = s;
	d->df_bs = s->st_block_size;
	d->df_var = s->st_chunker != DD_CHUNKER_FIXED;
	rc = dd_txn_begin(s->st_db, &d->df_err, false, &d->df_txn);
	if (!rc)
		rc = dd_diff_side_open(d, &d->df_side[0], from);
	if (!rc)
		rc = dd_diff_side_open(d, &d->df_side[1], to);
	if (rc) {
		dd_store_fail(s, &d->df_err);
		dd_diff_close(d);
		return rc;
	}
	d->df_common = d->df_side[0].ds_rec.sr_size < d->df_side[1].ds_rec.sr_size
		? d->df_side[0].ds_rec.sr_size : d->df_side[1].ds_rec.sr_size;
	d->df_common_blocks = (d->df_common + d->df_bs - 1) / d->df_bs;
	*out = d;
	return 0;
}

int dd_diff_next(dd_diff *d, dd_diff_range *out)
{
	if (!d)
		return DD_EINVAL;
	if (!out)
		return dd_err_set(&d->df_err, DD_EINVAL,
				  "dd_diff_next: NULL argument");
	if (out->version == 0 || out->version > DD_DIFF_RANGE_VERSION)
		return dd_err_set(&d->df_err, DD_EINVAL, "dd_diff_range "
				  "version %u not supported (set "
				  "DD_DIFF_RANGE_VERSION)", out->version);
	out->offset = 0;
	out->length = 0;
	if (d->df_rc)
		return d->df_rc;
	d->df_rc = d->df_var ? dd_diff_step_var(d) : dd_diff_step(d);
	if (d->df_rc)
		return d->df_rc;
	if (!d->df_have_ready && d->df_eof && d->df_have_pend) {
		/* the last range: nothing more can continue it */
		d->df_ready_off = d->df_pend_off;
		d->df_ready_end = d->df_pend_end;
		d->df_have_ready = true;
		d->df_have_pend = false;
	}
	if (d->df_have_ready) {
		out->offset = d->df_ready_off;
		out->length = d->df_ready_end - d->df_ready_off;
		d->df_have_ready = false;
	}
	return 0;
}

void dd_diff_close(dd_diff *d)
{
	if (!d)
		return;
	for (int i = 0; i < 2; i++) {
		dd_bmap_close(d->df_side[i].ds_cur);
		dd_digest_free(d->df_side[i].ds_digest);
	}
	dd_txn_abort(d->df_txn);
	dd_free(d);
}

const char *dd_diff_errmsg(const dd_diff *d)
{
	if (!d)
		return "DD_EINVAL: NULL diff";
	return d->df_err.de_code ? d->df_err.de_msg : "no error";
}
