/*
 * writer_opts.c -- a snapshot writer's options and its cancel: progress and
 * cancellation live in the block pipeline (chunk/pipeline.h), which checks
 * the cancel flag once a batch and reports after each batch stored, so
 * writer.c itself needs no part in them.
 */
#include "chunk/pipeline.h"
#include "store/store_internal.h"
#include "store/writer_internal.h"

int dd_writer_begin_opts(dd_writer **out, dd_store *s, const char *name,
			 const dd_writer_opts *opts)
{
	int rc;

	if (opts && (opts->version == 0 ||
		     opts->version > DD_WRITER_OPTS_VERSION))
		return s ? dd_store_failf(s, DD_EINVAL, "dd_writer_opts "
					  "version %u not supported",
					  opts->version) : DD_EINVAL;
	rc = dd_writer_begin(out, s, name);
	if (rc == 0 && opts && opts->progress)
		dd_pipe_set_progress((*out)->w_pipe, opts->progress,
				     opts->progress_ctx, opts->progress_total);
	return rc;
}

void dd_writer_cancel(dd_writer *w)
{
	/* w_pipe is set before the handle is returned and stays until
	 * dd_writer_free: no lock is needed to read it */
	if (w && w->w_pipe)
		dd_pipe_cancel(w->w_pipe);
}
