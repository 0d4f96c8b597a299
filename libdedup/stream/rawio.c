/*
 * rawio.c -- what the store-less sender (rsend.c) and receiver (rrecv.c)
 * share besides the block pipeline: the fd I/O callbacks behind `ddsend`
 * and `ddrecv`, and per-worker codec contexts.
 */
#include "dedup.h"
#include "common/alloc.h"
#include "common/io.h"
#include "pack/pack.h"
#include "stream/stream.h"

int dd_fd_write(void *ctx, const void *buf, size_t len)
{
	if (!ctx || (!buf && len))
		return dd_err_set(dd_thread_err(), DD_EINVAL,
				  "dd_fd_write: NULL argument");
	return dd_io_write_full(dd_thread_err(), *(const int *)ctx, buf, len,
				"stream output");
}

int dd_fd_read(void *ctx, void *buf, size_t len, size_t *got)
{
	if (!ctx || !got || (!buf && len))
		return dd_err_set(dd_thread_err(), DD_EINVAL,
				  "dd_fd_read: NULL argument");
	return dd_io_read(dd_thread_err(), *(const int *)ctx, buf, len, got,
			  "stream input");
}

int dd_raw_codecs(dd_codec_ctx ***out, dd_err *err, unsigned n, int codec,
		  int level)
{
	dd_codec_ctx **c = dd_calloc(n, sizeof(*c));
	int rc = 0;

	if (!c)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	for (unsigned i = 0; !rc && i < n; i++)
		rc = dd_codec_new(&c[i], err, codec, level);
	if (rc) {
		dd_raw_codecs_free(c, n);
		return rc;
	}
	*out = c;
	return 0;
}

void dd_raw_codecs_free(dd_codec_ctx **c, unsigned n)
{
	if (!c)
		return;
	for (unsigned i = 0; i < n; i++)
		dd_codec_free(c[i]);
	dd_free(c);
}
