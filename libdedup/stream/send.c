/*
 * send.c -- dd_send: a snapshot of a store as a replication stream.
 *
 * Blocks go in order.  A block whose hash the stream has carried already,
 * or that the base snapshot holds (incremental), goes as a REF; holes go
 * as ZERO runs; everything else as DATA with its payload exactly as the
 * pack stores it (never recompressed).  "Carried already" is a dd_hmap of
 * hashes with a memory cap beyond which it spills to disk, so the sender's
 * memory does not grow with the image (ZFS send -D kept its table in RAM).
 * The table is asked first, from the block map's hash alone: only DATA
 * blocks are looked up in the DDT and read from their pack.
 *
 * A resume token (format/stream.md §10.3; written and read by
 * store/receive.c) names the snapshot's content digest and the first
 * block the receiver lacks; the stream then starts there, with REFs for
 * blocks carried before that point resolved by the receiver's store,
 * which holds them.
 *
 * A store of content-defined blocks sends its chunker in the header and
 * positions as bytes (§12): a block's offset, a hole's bytes, the next
 * position the block's end.
 *
 * A snapshot of fixed blocks goes with its own content digest version
 * (format/store.md §6; header flag DD_SH_DIGEST2), unless the options ask
 * for the other: the digest, and an incremental stream's base digest, are
 * then computed from the block maps.  The base's digest is always of the
 * stream's version, whatever the base's own.
 */
#include <stdio.h>
#include <string.h>

#include "common/hmap.h"
#include "hash/hash.h"
#include "store/replica.h"
#include "stream/stream.h"

/* "NAME", "@NAME" and "STORE@NAME" all name snapshot NAME. */
static const char *dd_base_name(const char *base)
{
	const char *at = strrchr(base, '@');

	return at ? at + 1 : base;
}

typedef struct dd_sender {
	dd_store *sd_store;
	dd_err sd_err;
	const dd_send_opts *sd_opts;
	dd_replica_iter *sd_it;
	dd_hmap *sd_sent;
	dd_senc *sd_enc;
	dd_stream_hdr sd_hdr;
} dd_sender;

/* Every block of the base goes in the table: the receiver holds them. */
static int dd_send_seed_base(dd_sender *sd, const char *base)
{
	dd_replica_iter *bit;
	dd_replica_snap binfo;
	dd_replica_blk blk;
	uint64_t idx;
	int rc = dd_replica_iter_open(&bit, &sd->sd_err, sd->sd_store, base,
				      &binfo);

	if (rc)
		return rc;
	if (binfo.rps_block_size != sd->sd_hdr.sh_block_size ||
	    binfo.rps_chunker != sd->sd_hdr.sh_chunker)
		rc = dd_err_set(&sd->sd_err, DD_EINVAL,
				"base '%s' has another block size", base);
	while (!rc && (rc = dd_replica_iter_next(bit, &sd->sd_err, 0, &idx,
						 &blk)) == 1)
		rc = dd_hmap_put(sd->sd_sent, &sd->sd_err, blk.rpb_hash, idx);
	dd_replica_iter_close(bit);
	if (rc < 0)
		return rc;
	snprintf(sd->sd_hdr.sh_base, sizeof(sd->sd_hdr.sh_base), "%s", base);
	memcpy(sd->sd_hdr.sh_base_digest, binfo.rps_digest, 32);
	if (binfo.rps_chunker == DD_CHUNKER_FIXED &&
	    binfo.rps_dv != dd_shdr_dv(&sd->sd_hdr))
		rc = dd_replica_digest(sd->sd_store, &sd->sd_err, base,
				       dd_shdr_dv(&sd->sd_hdr),
				       sd->sd_hdr.sh_base_digest);
	sd->sd_hdr.sh_flags |= DD_SH_INCREMENTAL;
	return rc;
}

static int dd_send_progress(dd_sender *sd, uint64_t idx)
{
	const dd_send_opts *o = sd->sd_opts;
	uint64_t done = sd->sd_hdr.sh_chunker == DD_CHUNKER_FIXED
				? idx * sd->sd_hdr.sh_block_size : idx;

	if (!o || !o->progress)
		return 0;
	if (done > sd->sd_hdr.sh_size)
		done = sd->sd_hdr.sh_size;
	if (o->progress(o->progress_ctx, done, sd->sd_hdr.sh_size) != 0)
		return dd_err_set(&sd->sd_err, DD_ECANCELED,
				  "send cancelled by the progress callback");
	return 0;
}

static int dd_send_blocks(dd_sender *sd, uint64_t from, uint64_t blocks)
{
	bool var = sd->sd_hdr.sh_chunker != DD_CHUNKER_FIXED;
	dd_replica_blk blk;
	uint64_t idx, next = from, seen, n = 0;
	dd_err *err = &sd->sd_err;
	int rc;

	while ((rc = dd_replica_iter_next(sd->sd_it, err, from, &idx,
					  &blk)) == 1) {
		rc = idx > next ? dd_senc_zero(sd->sd_enc, err, next, idx - next)
				: 0;
		if (rc)
			return rc;
		rc = dd_hmap_get(sd->sd_sent, err, blk.rpb_hash, &seen);
		if (rc == 0) {
			rc = dd_senc_ref(sd->sd_enc, err, idx, blk.rpb_hash,
					 blk.rpb_lsize);
		} else if (rc == DD_ENOENT) {
			/* only now the DDT and the pack: a REF needs neither */
			rc = dd_replica_iter_load(sd->sd_it, err, &blk);
			if (!rc)
				rc = dd_senc_data(sd->sd_enc, err, idx,
						  blk.rpb_hash, blk.rpb_codec,
						  blk.rpb_lsize, blk.rpb_psize,
						  blk.rpb_payload);
			if (!rc)
				rc = dd_hmap_put(sd->sd_sent, err, blk.rpb_hash,
						 idx);
		}
		/* every 256 blocks (var: offsets are bytes) */
		if (!rc && (var ? n++ & 255 : idx & 255) == 0)
			rc = dd_send_progress(sd, idx);
		if (rc)
			return rc;
		next = idx + (var ? blk.rpb_lsize : 1);
	}
	if (rc < 0)
		return rc;
	if (next < blocks)
		rc = dd_senc_zero(sd->sd_enc, err, next, blocks - next);
	if (!rc)
		rc = dd_send_progress(sd, blocks);
	return rc;
}

/* The stream's digest version: the snapshot's own, or the one asked for
 * (its digest then computed from the block map). */
static int dd_send_dv(dd_sender *sd, const char *name,
		      const dd_replica_snap *info)
{
	int dv = dd_send_opts_dv(sd->sd_opts);

	if (dv < 0)
		return dd_err_set(&sd->sd_err, DD_EINVAL, "unknown digest "
				  "version %d", sd->sd_opts->digest_version);
	if (info->rps_chunker != DD_CHUNKER_FIXED)
		return 0;   /* one digest, run-based: no flag */
	if (!dv)
		dv = info->rps_dv;
	if (dv == DD_DIGEST_V2)
		sd->sd_hdr.sh_flags |= DD_SH_DIGEST2;
	if (dv == info->rps_dv)
		return 0;
	return dd_replica_digest(sd->sd_store, &sd->sd_err, name, dv,
				 sd->sd_hdr.sh_digest);
}

static int dd_send_run(dd_sender *sd, const char *name, dd_write_fn fn,
		       void *ctx)
{
	const dd_send_opts *o = sd->sd_opts;
	dd_replica_snap info;
	uint64_t from = 0;
	int rc;

	rc = dd_replica_iter_open(&sd->sd_it, &sd->sd_err, sd->sd_store, name,
				  &info);
	if (rc)
		return rc;
	sd->sd_hdr.sh_version = DD_STREAM_VERSION;
	sd->sd_hdr.sh_chunker = info.rps_chunker;
	sd->sd_hdr.sh_block_size = info.rps_block_size;
	sd->sd_hdr.sh_hash_alg = DD_STREAM_HASH_SHA256;
	sd->sd_hdr.sh_size = info.rps_size;
	memcpy(sd->sd_hdr.sh_digest, info.rps_digest, 32);
	snprintf(sd->sd_hdr.sh_name, sizeof(sd->sd_hdr.sh_name), "%s", name);
	rc = dd_send_dv(sd, name, &info);
	if (rc)
		return rc;
	if (o && o->resume_token) {
		uint8_t want[32];

		rc = dd_replica_token_parse(&sd->sd_err, o->resume_token,
					    want, &from);
		if (!rc && memcmp(want, sd->sd_hdr.sh_digest, 32))
			rc = dd_err_set(&sd->sd_err, DD_EINVAL,
					"resume token is for another snapshot "
					"(content digest differs)");
		if (!rc && from > (info.rps_chunker == DD_CHUNKER_FIXED
				   ? info.rps_blocks : info.rps_size))
			rc = dd_err_set(&sd->sd_err, DD_EINVAL,
					"resume token is past the snapshot's end");
		if (rc)
			return rc;
		sd->sd_hdr.sh_resume_from = from;
	}
	rc = dd_hmap_new(&sd->sd_sent, &sd->sd_err, o ? o->mem_limit : 0,
			 o ? o->tmpdir : NULL);
	if (!rc && o && o->base)
		rc = dd_send_seed_base(sd, dd_base_name(o->base));
	if (!rc)
		rc = dd_senc_new(&sd->sd_enc, &sd->sd_err, fn, ctx);
	if (!rc)
		rc = dd_senc_header(sd->sd_enc, &sd->sd_err, &sd->sd_hdr);
	/* the end of positions: blocks, or bytes */
	if (!rc)
		rc = dd_send_blocks(sd, from, info.rps_chunker == DD_CHUNKER_FIXED
					      ? info.rps_blocks : info.rps_size);
	if (!rc)
		rc = dd_senc_end(sd->sd_enc, &sd->sd_err);
	return rc;
}

int dd_send(dd_store *s, const char *name, const dd_send_opts *opts,
	    dd_write_fn fn, void *ctx)
{
	dd_sender sd = {.sd_store = s, .sd_opts = opts};
	int rc;

	if (!s)
		return DD_EINVAL;
	if (!fn)
		return dd_store_failf(s, DD_EINVAL, "dd_send: no write callback");
	if (opts && (opts->version == 0 || opts->version > DD_SEND_OPTS_VERSION))
		return dd_store_failf(s, DD_EINVAL, "dd_send_opts version %u "
				      "not supported", opts->version);
	rc = dd_send_run(&sd, name, fn, ctx);
	if (rc > 0) /* an internal "found" leaking out would be a bug */
		rc = dd_err_set(&sd.sd_err, DD_EIO, "internal error %d", rc);
	dd_senc_free(sd.sd_enc);
	dd_hmap_free(sd.sd_sent);
	dd_replica_iter_close(sd.sd_it);
	return rc ? dd_store_fail(s, &sd.sd_err) : 0;
}
