/*
 * err.c -- error codes, their names, and the per-handle message.
 *
 * A message is always "<SYMBOL>: <context>" and always NUL-terminated
 * within DD_ERRMSG_MAX bytes: truncation is preferred to failing, because
 * the message is only ever reported, never parsed.  The message is first
 * formatted into a local buffer so that a caller may pass err->de_msg as an
 * argument (to add context to a lower-level message) without the source and
 * destination of vsnprintf overlapping.  errno is preserved so that a
 * caller may record an error and then still inspect errno.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "dedup.h"
#include "common/err.h"

struct dd_err_name {
	const char *den_symbol;
	const char *den_text;   /* "SYMBOL: description", for dd_strerror */
};

/* Indexed by -code; codes are stable (include/dedup.h), so is this table. */
static const struct dd_err_name dd_err_names[] = {
	[0] = {"DD_OK", "DD_OK: success"},
	[1] = {"DD_EINVAL", "DD_EINVAL: invalid argument"},
	[2] = {"DD_ENOMEM", "DD_ENOMEM: out of memory"},
	[3] = {"DD_EIO", "DD_EIO: input/output error"},
	[4] = {"DD_ENOSPC", "DD_ENOSPC: no space left"},
	[5] = {"DD_ENOENT", "DD_ENOENT: no such store or snapshot"},
	[6] = {"DD_EEXIST", "DD_EEXIST: already exists"},
	[7] = {"DD_EBUSY", "DD_EBUSY: another writer holds the store"},
	[8] = {"DD_ECHECKSUM", "DD_ECHECKSUM: checksum mismatch"},
	[9] = {"DD_ECORRUPT", "DD_ECORRUPT: damaged or inconsistent data"},
	[10] = {"DD_EVERSION", "DD_EVERSION: newer format version"},
	[11] = {"DD_ENOTSUP", "DD_ENOTSUP: unsupported feature"},
	[12] = {"DD_ENAME", "DD_ENAME: invalid snapshot name"},
	[13] = {"DD_EPERM", "DD_EPERM: permission denied"},
	[14] = {"DD_ECANCELED", "DD_ECANCELED: canceled by callback"},
	[15] = {"DD_ESTATE", "DD_ESTATE: handle in the wrong state"},
	[16] = {"DD_EFORMAT", "DD_EFORMAT: not in the expected format"},
	[17] = {"DD_EBLOCKSIZE", "DD_EBLOCKSIZE: block size differs from the "
		"store's"},
};

#define DD_NERR_NAMES (sizeof(dd_err_names) / sizeof(dd_err_names[0]))

static const struct dd_err_name *dd_err_lookup(int code)
{
	/* Compare before negating: -INT_MIN overflows. */
	if (code > 0 || code <= -(int)DD_NERR_NAMES)
		return NULL;
	return &dd_err_names[-code];
}

const char *dd_err_symbol(int code)
{
	const struct dd_err_name *n = dd_err_lookup(code);

	return n ? n->den_symbol : "DD_E?";
}

DD_API const char *dd_strerror(int code)
{
	const struct dd_err_name *n = dd_err_lookup(code);

	return n ? n->den_text : "DD_E?: unknown error";
}

int dd_errno_code(int errnum)
{
	switch (errnum) {
	case 0:
		/* A failed call that left errno unset is still a failure. */
		return DD_EIO;
	case ENOSPC:
	case EDQUOT:
	case EFBIG:
		return DD_ENOSPC;
	case EACCES:
	case EPERM:
	case EROFS:
		return DD_EPERM;
	case ENOENT:
		return DD_ENOENT;
	case ENOMEM:
		return DD_ENOMEM;
	default:
		return DD_EIO;
	}
}

/* Appends s to the message at *pos, truncating at the buffer's end. */
static void dd_err_append(dd_err *err, size_t *pos, const char *s)
{
	size_t room = sizeof(err->de_msg) - 1 - *pos;
	size_t n = strlen(s);

	if (n > room)
		n = room;
	memcpy(err->de_msg + *pos, s, n);
	*pos += n;
	err->de_msg[*pos] = '\0';
}

static void dd_err_vset(dd_err *err, int code, const char *suffix,
			const char *fmt, va_list ap)
{
	char ctx[DD_ERRMSG_MAX];
	size_t pos = 0;

	ctx[0] = '\0';
	if (fmt)
		vsnprintf(ctx, sizeof(ctx), fmt, ap);
	err->de_code = code;
	err->de_msg[0] = '\0';
	if (ctx[0] == '\0' && !suffix) {
		dd_err_append(err, &pos, dd_strerror(code));
		return;
	}
	dd_err_append(err, &pos, dd_err_symbol(code));
	dd_err_append(err, &pos, ": ");
	dd_err_append(err, &pos, ctx);
	if (suffix) {
		if (ctx[0])
			dd_err_append(err, &pos, ": ");
		dd_err_append(err, &pos, suffix);
	}
}

int dd_err_set(dd_err *err, int code, const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	if (!err)
		return code;
	va_start(ap, fmt);
	dd_err_vset(err, code, NULL, fmt, ap);
	va_end(ap);
	errno = saved;
	return code;
}

/* strerror_r comes in a GNU and an XSI flavour; hide the difference. */
static const char *dd_errno_text(int errnum, char *buf, size_t len)
{
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
	return strerror_r(errnum, buf, len);
#else
	if (strerror_r(errnum, buf, len) != 0)
		snprintf(buf, len, "error %d", errnum);
	return buf;
#endif
}

int dd_err_set_errno(dd_err *err, int errnum, const char *fmt, ...)
{
	int saved = errno;
	int code = dd_errno_code(errnum);
	char buf[128];
	va_list ap;

	if (!err)
		return code;
	va_start(ap, fmt);
	dd_err_vset(err, code, dd_errno_text(errnum, buf, sizeof(buf)), fmt,
		    ap);
	va_end(ap);
	errno = saved;
	return code;
}

int dd_err_copy(dd_err *dst, const dd_err *src)
{
	if (!src) {
		dd_err_clear(dst);
		return DD_OK;
	}
	if (dst && dst != src) {
		dst->de_code = src->de_code;
		/* src may come from anywhere: never trust its terminator. */
		memcpy(dst->de_msg, src->de_msg, sizeof(dst->de_msg));
		dst->de_msg[sizeof(dst->de_msg) - 1] = '\0';
	}
	return src->de_code;
}

void dd_err_clear(dd_err *err)
{
	if (!err)
		return;
	err->de_code = DD_OK;
	err->de_msg[0] = '\0';
}

static _Thread_local dd_err dd_thread_err_rec;

dd_err *dd_thread_err(void)
{
	return &dd_thread_err_rec;
}

DD_API const char *dd_last_errmsg(void)
{
	return dd_thread_err_rec.de_code ? dd_thread_err_rec.de_msg : "no error";
}

int dd_err_wrap(dd_err *err, int code, const char *prefix, const char *suffix)
{
	char old[DD_ERRMSG_MAX];
	const char *m = err->de_msg, *sym = dd_err_symbol(err->de_code);
	size_t n = strlen(sym);

	if (!strncmp(m, sym, n) && m[n] == ':')
		m += n + 1 + (m[n + 1] == ' ');
	snprintf(old, sizeof(old), "%s", m);
	return dd_err_set(err, code ? code : err->de_code, "%s: %s%s", prefix,
			  old, suffix ? suffix : "");
}

int dd_err_set_msg(dd_err *err, int code, const char *msg)
{
	if (!err)
		return code;
	if (!strncmp(msg, "DD_", 3)) {
		err->de_code = code;
		snprintf(err->de_msg, sizeof(err->de_msg), "%s", msg);
		return code;
	}
	return dd_err_set(err, code, "%s", msg);
}
