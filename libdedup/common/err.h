/*
 * err.h -- error codes and the per-handle one-line message.
 *
 * Every handle embeds a dd_err.  A failing function records the code and a
 * message with context, then returns the code; callers pass lower-level
 * codes up unchanged.  Messages start with the code's symbol, as LMDB's do:
 * "DD_ECHECKSUM: block sha256 mismatch (pack 3, off 40960)".
 */
#ifndef DD_COMMON_ERR_H
#define DD_COMMON_ERR_H

#include <stdarg.h>

#define DD_ERRMSG_MAX 512

typedef struct dd_err {
	int de_code;
	char de_msg[DD_ERRMSG_MAX];
} dd_err;

/* Records code and a printf-style message; returns code.  err may be NULL. */
int dd_err_set(dd_err *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Like dd_err_set, for a failed system call: records dd_errno_code(errnum)
 * and the message followed by ": " and strerror(errnum); returns the code. */
int dd_err_set_errno(dd_err *err, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Copies src's code and message into dst (both may be NULL); returns code. */
int dd_err_copy(dd_err *dst, const dd_err *src);

void dd_err_clear(dd_err *err);

/* Puts context before err's message, keeping its code unless code is not
 * 0: "DD_EX: <prefix>: <the message without its symbol><suffix>".  The
 * old message may be passed to nothing else: it is copied first. */
int dd_err_wrap(dd_err *err, int code, const char *prefix, const char *suffix);

/* Records code with a message that may already carry its symbol (one
 * taken from another handle): "DD_EX: ..." is kept as it is. */
int dd_err_set_msg(dd_err *err, int code, const char *msg);

/* This thread's error record for calls that have no handle (opening a
 * store, streams without a store, scans); dd_last_errmsg() reads it. */
dd_err *dd_thread_err(void);

/* Maps an errno value to a DD_E* code (ENOSPC -> DD_ENOSPC, EACCES/EPERM/
 * EROFS -> DD_EPERM, ENOENT -> DD_ENOENT, ENOMEM -> DD_ENOMEM, else DD_EIO). */
int dd_errno_code(int errnum);

/* The symbol alone: "DD_ECHECKSUM". */
const char *dd_err_symbol(int code);

#endif
