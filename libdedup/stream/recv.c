/*
 * recv.c -- dd_recv: a replication stream into a store.
 *
 * The header is checked first (format, block size, name, and for an
 * incremental stream that the store holds the base with the same content
 * digest), then records go to a receiving writer (store/replica.h), which
 * verifies every block's SHA-256 before storing it and dedups against the
 * whole store.  The snapshot becomes visible only when END checks out and
 * the content digest matches the header's.  Any failure aborts the writer,
 * which rolls back: the store is as it was.  With opts->resumable, a
 * failure instead keeps what arrived (dd_replica_suspend) and the caller
 * can print dd_recv_resume_token for `ddsend -t`.
 */
#include <stdio.h>
#include <string.h>

#include "store/replica.h"
#include "stream/stream.h"

typedef struct dd_receiver {
	dd_store *rv_store;
	dd_err rv_err;
	const dd_recv_opts *rv_opts;
	dd_sdec *rv_dec;
	dd_replica_writer *rv_w;
	dd_stream_hdr rv_hdr;
	dd_stream_info rv_info;
	uint64_t rv_reported;      /* bytes done at the last progress call */
} dd_receiver;

/* An incremental stream needs the base, with the same content: its
 * digest in the stream's version (computed from its block map when the
 * base has the other one). */
static int dd_recv_check_base(dd_receiver *rv)
{
	dd_snapshot_info si;
	uint8_t local[32];
	int rc;

	if (!(rv->rv_hdr.sh_flags & DD_SH_INCREMENTAL))
		return 0;
	rc = dd_snapshot_stat(rv->rv_store, rv->rv_hdr.sh_base, &si);
	if (rc == DD_ENOENT || rc == DD_ENAME)
		return dd_err_set(&rv->rv_err, DD_ENOENT,
				  "incremental stream: base snapshot '%s' is "
				  "not in the store", rv->rv_hdr.sh_base);
	if (rc)
		return dd_err_set_msg(&rv->rv_err, rc,
				      dd_store_errmsg(rv->rv_store));
	rc = dd_replica_digest(rv->rv_store, &rv->rv_err, rv->rv_hdr.sh_base,
			       dd_shdr_dv(&rv->rv_hdr), local);
	if (rc)
		return rc;
	if (memcmp(local, rv->rv_hdr.sh_base_digest, 32))
		return dd_err_set(&rv->rv_err, DD_ECHECKSUM,
				  "incremental stream: base snapshot '%s' in "
				  "the store has other content than the "
				  "sender's", rv->rv_hdr.sh_base);
	return 0;
}

/* The image up to position next (a block index; a byte offset of a
 * content-defined stream) is done: the callback hears of it every 256
 * blocks' worth of bytes (average blocks when content-defined), whatever
 * records carry them (a ZERO run too), and dd_recv_run calls it once more
 * after the commit, so a receive's progress ends at its size. */
static int dd_recv_progress(dd_receiver *rv, uint64_t next)
{
	const dd_recv_opts *o = rv->rv_opts;
	bool fixed = rv->rv_hdr.sh_chunker == DD_CHUNKER_FIXED;
	uint64_t done = fixed ? next * rv->rv_hdr.sh_block_size : next;
	uint64_t step = 256 * (uint64_t)rv->rv_hdr.sh_block_size;

	if (!o || !o->progress)
		return 0;
	if (rv->rv_reported && done / step == rv->rv_reported / step)
		return 0;
	rv->rv_reported = done;
	if (done > rv->rv_hdr.sh_size)
		done = rv->rv_hdr.sh_size;
	if (o->progress(o->progress_ctx, done, rv->rv_hdr.sh_size) != 0)
		return dd_err_set(&rv->rv_err, DD_ECANCELED,
				  "receive cancelled by the progress callback");
	return 0;
}

/* How far a DATA or REF record moves the position: one block, or its
 * bytes in a content-defined stream. */
static uint64_t dd_recv_span(const dd_receiver *rv, const dd_srec *r)
{
	return rv->rv_hdr.sh_chunker == DD_CHUNKER_FIXED ? 1 : r->sr_lsize;
}

static int dd_recv_records(dd_receiver *rv)
{
	dd_stream_info *in = &rv->rv_info;
	dd_srec r;
	int rc;

	for (;;) {
		rc = dd_sdec_next(rv->rv_dec, &rv->rv_err, &r);
		if (rc < 0)
			return rc;
		rc = 0;
		switch (r.sr_type) {
		case DD_SREC_DATA:
			rc = dd_replica_put_data(rv->rv_w, r.sr_idx, r.sr_hash,
					      r.sr_codec, r.sr_lsize,
					      r.sr_psize, r.sr_payload);
			in->data_records++;
			in->data_bytes += r.sr_psize;
			break;
		case DD_SREC_REF:
			rc = dd_replica_put_ref(rv->rv_w, r.sr_idx, r.sr_hash,
					     r.sr_lsize);
			in->ref_records++;
			break;
		case DD_SREC_ZERO:
			in->zero_records++;
			in->zero_blocks += r.sr_count;
			break;
		case DD_SREC_END:
			/* nothing may follow END: junk means a damaged pipe */
			return dd_sdec_expect_eof(rv->rv_dec, &rv->rv_err);
		default:
			return dd_err_set(&rv->rv_err, DD_EFORMAT,
					  "unexpected record type %d",
					  r.sr_type);
		}
		if (rc)
			return dd_err_set_msg(&rv->rv_err, rc,
					      dd_replica_errmsg(rv->rv_w));
		rc = dd_recv_progress(rv, r.sr_idx + (r.sr_type == DD_SREC_ZERO
						       ? r.sr_count
						       : dd_recv_span(rv, &r)));
		if (rc)
			return rc;
	}
}

void dd_stream_info_of(dd_stream_info *in, const dd_stream_hdr *h,
		       const char *name)
{
	in->format_version = h->sh_version;
	in->block_size = h->sh_block_size;
	in->chunker = h->sh_chunker;
	snprintf(in->name, sizeof(in->name), "%s", name);
	snprintf(in->base, sizeof(in->base), "%s", h->sh_base);
	in->size = h->sh_size;
	memcpy(in->digest, h->sh_digest, 32);
	memcpy(in->base_digest, h->sh_base_digest, 32);
	in->resume_from = h->sh_resume_from;
}

static void dd_recv_fill_info(dd_receiver *rv, const char *name)
{
	dd_stream_info_of(&rv->rv_info, &rv->rv_hdr, name);
}

static int dd_recv_open_writer(dd_receiver *rv, const char *name)
{
	const dd_stream_hdr *h = &rv->rv_hdr;
	int rc;

	if (h->sh_resume_from)
		return dd_replica_resume(&rv->rv_w, &rv->rv_err, rv->rv_store,
				      h->sh_digest, h->sh_resume_from,
				      h->sh_chunker, h->sh_block_size,
				      dd_shdr_dv(h));
	rc = dd_replica_begin(&rv->rv_w, &rv->rv_err, rv->rv_store, name,
			   h->sh_chunker, h->sh_block_size, dd_shdr_dv(h));
	if (!rc && rv->rv_opts && rv->rv_opts->resumable)
		rc = dd_replica_set_resumable(rv->rv_w, h->sh_size, h->sh_digest);
	return rc;
}

static int dd_recv_run(dd_receiver *rv, dd_read_fn fn, void *ctx)
{
	const dd_recv_opts *o = rv->rv_opts;
	const char *name;
	int rc;

	rc = dd_sdec_new(&rv->rv_dec, &rv->rv_err, fn, ctx);
	if (!rc)
		rc = dd_sdec_header(rv->rv_dec, &rv->rv_err, &rv->rv_hdr);
	if (rc)
		return rc;
	name = o && o->name ? o->name : rv->rv_hdr.sh_name;
	if (dd_name_check(name))
		return dd_err_set(&rv->rv_err, DD_ENAME,
				  "invalid snapshot name '%.64s'", name);
	dd_recv_fill_info(rv, name);
	rc = dd_recv_check_base(rv);
	if (!rc)
		rc = dd_recv_open_writer(rv, name);
	if (!rc)
		rc = dd_recv_records(rv);
	if (!rc) {
		rc = dd_replica_finish(rv->rv_w, rv->rv_hdr.sh_size,
				    rv->rv_hdr.sh_digest);
		if (rc)
			dd_err_set_msg(&rv->rv_err, rc,
				       dd_replica_errmsg(rv->rv_w));
	}
	/* committed: the last call says all of it (a cancel is too late) */
	if (!rc && rv->rv_opts && rv->rv_opts->progress)
		rv->rv_opts->progress(rv->rv_opts->progress_ctx,
				      rv->rv_hdr.sh_size, rv->rv_hdr.sh_size);
	rv->rv_info.stream_bytes = dd_sdec_bytes(rv->rv_dec);
	return rc;
}

int dd_recv(dd_store *s, const dd_recv_opts *opts, dd_read_fn fn, void *ctx,
	    dd_stream_info *info)
{
	dd_receiver rv = {.rv_store = s, .rv_opts = opts};
	int rc;

	if (!s)
		return DD_EINVAL;
	if (!fn)
		return dd_store_failf(s, DD_EINVAL, "dd_recv: no read callback");
	if (opts && (opts->version == 0 || opts->version > DD_RECV_OPTS_VERSION))
		return dd_store_failf(s, DD_EINVAL, "dd_recv_opts version %u "
				      "not supported", opts->version);
	rc = dd_recv_run(&rv, fn, ctx);
	if (rc > 0) /* a record type or "found" leaking out would be a bug */
		rc = dd_err_set(&rv.rv_err, DD_EIO, "internal error %d", rc);
	/* resumable: keep what arrived; the error stands, and the token
	 * (dd_recv_resume_token) says where to resume */
	if (rc && rv.rv_w && opts && opts->resumable &&
	    dd_replica_suspend(rv.rv_w) == 0)
		dd_replica_writer_token(rv.rv_w, rv.rv_info.resume_token,
				     sizeof(rv.rv_info.resume_token));
	dd_replica_free(rv.rv_w); /* aborts, rolling back, unless done/kept */
	dd_sdec_free(rv.rv_dec);
	if (info)
		*info = rv.rv_info;
	return rc ? dd_store_fail(s, &rv.rv_err) : 0;
}

_Static_assert(DD_STREAM_HEADER_MAX == 16 + DD_SHDR_MAX,
	       "format/stream.md §2: a 16-byte frame, then the payload");

/* dd_stream_header's bytes: handed out once, then the end of the stream,
 * so a header longer than the buffer is "cut short". */
struct dd_hdr_bytes {
	const uint8_t *hb_p;
	size_t hb_len;
};

static int dd_hdr_bytes_read(void *ctx, void *buf, size_t len, size_t *got)
{
	struct dd_hdr_bytes *hb = ctx;
	size_t n = hb->hb_len < len ? hb->hb_len : len;

	memcpy(buf, hb->hb_p, n);
	hb->hb_p += n;
	hb->hb_len -= n;
	*got = n;
	return 0;
}

int dd_stream_header(const void *buf, size_t len, dd_stream_info *info)
{
	struct dd_hdr_bytes hb = {buf, len};
	dd_err *err = dd_thread_err();
	dd_stream_hdr h;
	dd_sdec *d = NULL;
	int rc;

	if (!buf || !info)
		return dd_err_set(err, DD_EINVAL, "dd_stream_header: NULL "
				  "argument");
	rc = dd_sdec_new(&d, err, dd_hdr_bytes_read, &hb);
	if (!rc)
		rc = dd_sdec_header(d, err, &h);
	dd_sdec_free(d);
	if (rc)
		return rc;
	memset(info, 0, sizeof(*info));
	dd_stream_info_of(info, &h, h.sh_name);
	return 0;
}

int dd_recv_abort_partial(dd_store *s)
{
	dd_err err = {0};

	if (!s)
		return DD_EINVAL;
	return dd_replica_discard(s, &err) ? dd_store_fail(s, &err) : 0;
}

int dd_recv_partial_walk(dd_store *s, dd_recv_partial_fn fn, void *ctx)
{
	dd_err err = {0};

	if (!s || !fn)
		return s ? dd_store_failf(s, DD_EINVAL, "dd_recv_partial_walk: "
					  "no callback") : DD_EINVAL;
	return dd_replica_tokens(s, &err, fn, ctx) ? dd_store_fail(s, &err)
						   : 0;
}

int dd_recv_resume_token(dd_store *s, char *buf, size_t len)
{
	dd_err err = {0};

	if (!s || !buf || !len)
		return s ? dd_store_failf(s, DD_EINVAL, "dd_recv_resume_token: "
					  "no buffer") : DD_EINVAL;
	return dd_replica_token(s, &err, buf, len, NULL, 0)
		       ? dd_store_fail(s, &err) : 0;
}
