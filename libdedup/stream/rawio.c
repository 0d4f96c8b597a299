/*
 * rawio.c -- what the store-less sender (rsend.c) and receiver (rrecv.c)
 * share besides the block pipeline: the fd I/O callbacks behind `ddsend`
 * and `ddrecv`, and per-worker codec contexts.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <time.h>

#include "dedup.h"
#include "common/alloc.h"
#include "common/io.h"
#include "pack/pack.h"
#include "stream/stream.h"

/* A receiver that went away is an error for the sender, never SIGPIPE:
 * the host may be a daemon whose other work would die with it (exit status
 * 141).  SIGPIPE is blocked in the calling thread for the write -- the one
 * way that covers pipes as well as sockets (MSG_NOSIGNAL is for sockets
 * only) -- and one the write raised is taken back before the mask is
 * restored, unless one was pending already.  The write fails with EPIPE:
 * DD_EIO. */
int dd_fd_write(void *ctx, const void *buf, size_t len)
{
	static const struct timespec now = {0, 0};
	sigset_t pipe_set, old, pending;
	bool was_pending;
	int rc;

	if (!ctx || (!buf && len))
		return dd_err_set(dd_thread_err(), DD_EINVAL,
				  "dd_fd_write: NULL argument");
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	if (pthread_sigmask(SIG_BLOCK, &pipe_set, &old) != 0)
		return dd_err_set(dd_thread_err(), DD_EIO,
				  "dd_fd_write: cannot block SIGPIPE");
	was_pending = sigpending(&pending) == 0 &&
		      sigismember(&pending, SIGPIPE) == 1;
	rc = dd_io_write_full(dd_thread_err(), *(const int *)ctx, buf, len,
			      "stream output");
	if (rc && !was_pending && sigpending(&pending) == 0 &&
	    sigismember(&pending, SIGPIPE) == 1)
		while (sigtimedwait(&pipe_set, NULL, &now) < 0 && errno == EINTR)
			;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
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
