/*
 * heal.c -- dd_store_heal_from: damaged and lost blocks healed from
 * another store or from a replication stream (format/store.md §9.1).
 *
 * The heal itself (which entries, the copies, the commit) is the store's
 * (store/heal.c); this file finds the copies.  From a stream, every DATA
 * record is offered by its hash; REF and ZERO records carry no bytes.
 * The whole stream is decoded and checked to its END record (framing,
 * CRCs, the stream digest) before anything is committed: damaged input
 * leaves the store as it was, even when the blocks it carried checked
 * out.
 */
#include <string.h>

#include "store/replica.h"
#include "stream/stream.h"

static int dd_heal_stream(dd_heal *h, dd_err *err, dd_read_fn fn, void *ctx)
{
	dd_stream_hdr hdr;
	dd_sdec *d = NULL;
	dd_srec r;
	int rc = dd_sdec_new(&d, err, fn, ctx);

	if (!rc)
		rc = dd_sdec_header(d, err, &hdr);
	while (!rc) {
		rc = dd_sdec_next(d, err, &r);
		if (rc == DD_SREC_END) {
			rc = dd_sdec_expect_eof(d, err);
			break;
		}
		if (rc == DD_SREC_DATA)
			rc = dd_heal_offer(h, err, r.sr_hash, r.sr_codec,
					   r.sr_lsize, r.sr_psize,
					   r.sr_payload);
		else if (rc > 0)
			rc = 0;
	}
	dd_sdec_free(d);
	return rc;
}

int dd_store_heal_from(dd_store *s, const dd_heal_opts *opts,
		       dd_heal_result *out)
{
	dd_open_opts oo = DD_OPEN_OPTS_INIT;
	dd_store *src = NULL;
	dd_heal *h = NULL;
	dd_err err = {0};
	int rc;

	if (!s)
		return DD_EINVAL;
	if (!opts || opts->version == 0 || opts->version > DD_HEAL_OPTS_VERSION)
		return dd_store_failf(s, DD_EINVAL, "dd_heal_opts missing or "
				      "of an unknown version");
	if (!opts->source && !opts->read)
		return dd_store_failf(s, DD_EINVAL, "dd_store_heal_from: no "
				      "source store and no stream");
	if (out)
		memset(out, 0, sizeof(*out));
	oo.readonly = 1;
	if (opts->source) {
		rc = dd_store_open(&src, opts->source, &oo);
		if (rc)
			return dd_store_failf(s, rc, "source %s: %s",
					      opts->source, dd_last_errmsg());
	}
	rc = dd_heal_begin(&h, &err, s);
	/* a stream is read to its end even when nothing is wanted: its
	 * damage is still said */
	if (!rc && src)
		rc = dd_heal_from_store(h, &err, src);
	else if (!rc)
		rc = dd_heal_stream(h, &err, opts->read, opts->read_ctx);
	if (!rc)
		rc = dd_heal_finish(h, &err, opts->report, opts->report_ctx,
				    out);
	if (rc && h)
		dd_heal_abort(h);
	dd_heal_free(h);
	dd_store_close(src);
	if (rc > 0)   /* a record type leaking out would be a bug */
		rc = dd_err_set(&err, DD_EIO, "internal error %d", rc);
	return rc ? dd_store_fail(s, &err) : 0;
}
