/*
 * object.c -- object I/O in a pool's namespace: whole, at an offset,
 * appended; read, stat, remove, list; and the versioned read and
 * conditional write that order commits across machines (rados.h).
 *
 * Each call is one librados operation, bounded by rados_osd_op_timeout
 * (client.c).  The conditional write is one write operation holding an
 * assertion and the write, so the OSD applies both or neither: for an
 * existing object rados_write_op_assert_version (the write is refused
 * with ERANGE when the object is newer than the version read), for a new
 * one an exclusive create (EEXIST when someone created it first).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "rados/rados_internal.h"

static int dd_rados_io_len(dd_err *err, const dd_rados_pool *p,
			   const char *what, const char *oid, size_t len)
{
	char where[DD_RADOS_POOL_MAX + DD_RADOS_NAME_MAX + 256];

	if (!p || !oid || !oid[0])
		return dd_err_set(err, DD_EINVAL, "rados: %s: no pool or "
				  "object name", what);
	if (len <= DD_RADOS_IO_MAX)
		return dd_rados_reachable(err, p, what, oid);
	dd_rados_where(where, sizeof(where), p, oid);
	return dd_err_set(err, DD_EINVAL, "rados: %s %s: %zu bytes in one "
			  "call, more than %u", what, where, len,
			  DD_RADOS_IO_MAX);
}

int dd_rados_write_full(dd_rados_pool *p, dd_err *err, const char *oid,
			const void *buf, size_t len)
{
	int r = dd_rados_io_len(err, p, "write", oid, len);

	if (r)
		return r;
	r = dd_librados.rados_write_full(p->rp_io, oid, buf, len);
	return r < 0 ? dd_rados_fail(err, r, p, "write", oid) : 0;
}

int dd_rados_write(dd_rados_pool *p, dd_err *err, const char *oid,
		   const void *buf, size_t len, uint64_t off)
{
	int r = dd_rados_io_len(err, p, "write", oid, len);

	if (r)
		return r;
	r = dd_librados.rados_write(p->rp_io, oid, buf, len, off);
	return r < 0 ? dd_rados_fail(err, r, p, "write", oid) : 0;
}

int dd_rados_append(dd_rados_pool *p, dd_err *err, const char *oid,
		    const void *buf, size_t len)
{
	int r = dd_rados_io_len(err, p, "append to", oid, len);

	if (r)
		return r;
	r = dd_librados.rados_append(p->rp_io, oid, buf, len);
	return r < 0 ? dd_rados_fail(err, r, p, "append to", oid) : 0;
}

/* A missing object is named as such: librados's "No such file or
 * directory" reads as a local file's. */
static int dd_rados_fail_obj(dd_err *err, int r, const dd_rados_pool *p,
			     const char *what, const char *oid)
{
	char where[DD_RADOS_POOL_MAX + DD_RADOS_NAME_MAX + 256];

	if (r != -ENOENT)
		return dd_rados_fail(err, r, p, what, oid);
	dd_rados_where(where, sizeof(where), p, oid);
	return dd_err_set(err, DD_ENOENT, "rados: %s %s: no such object",
			  what, where);
}

int dd_rados_read(dd_rados_pool *p, dd_err *err, const char *oid, void *buf,
		  size_t len, uint64_t off, size_t *got)
{
	int r = dd_rados_io_len(err, p, "read", oid, len);

	*got = 0;
	if (r)
		return r;
	r = dd_librados.rados_read(p->rp_io, oid, buf, len, off);
	if (r < 0)
		return dd_rados_fail_obj(err, r, p, "read", oid);
	*got = (size_t)r;
	return 0;
}

int dd_rados_stat(dd_rados_pool *p, dd_err *err, const char *oid,
		  uint64_t *size, time_t *mtime)
{
	uint64_t sz = 0;
	time_t mt = 0;
	int r = dd_rados_io_len(err, p, "stat", oid, 0);

	if (r)
		return r;
	r = dd_librados.rados_stat(p->rp_io, oid, &sz, &mt);
	if (r < 0)
		return dd_rados_fail_obj(err, r, p, "stat", oid);
	if (size)
		*size = sz;
	if (mtime)
		*mtime = mt;
	return 0;
}

int dd_rados_remove(dd_rados_pool *p, dd_err *err, const char *oid)
{
	int r = dd_rados_io_len(err, p, "remove", oid, 0);

	if (r)
		return r;
	r = dd_librados.rados_remove(p->rp_io, oid);
	return r < 0 ? dd_rados_fail_obj(err, r, p, "remove", oid) : 0;
}

int dd_rados_truncate(dd_rados_pool *p, dd_err *err, const char *oid,
		      uint64_t size)
{
	int r = dd_rados_io_len(err, p, "truncate", oid, 0);

	if (r)
		return r;
	r = dd_librados.rados_trunc(p->rp_io, oid, size);
	return r < 0 ? dd_rados_fail_obj(err, r, p, "truncate", oid) : 0;
}

int dd_rados_list(dd_rados_pool *p, dd_err *err, const char *prefix,
		  dd_rados_list_fn fn, void *arg)
{
	rados_list_ctx_t ctx;
	size_t plen = prefix ? strlen(prefix) : 0;
	int r, rc = 0;

	if (!p || !fn)
		return dd_err_set(err, DD_EINVAL, "rados: list: no pool or "
				  "callback");
	r = dd_rados_reachable(err, p, "list", NULL);
	if (r)
		return r;
	/* the ioctx's namespace: the OSDs send this store's objects only */
	r = dd_librados.rados_nobjects_list_open(p->rp_io, &ctx);
	if (r < 0)
		return dd_rados_fail(err, r, p, "list", NULL);
	for (;;) {
		const char *entry;

		r = dd_librados.rados_nobjects_list_next(ctx, &entry, NULL, NULL);
		if (r == -ENOENT)
			break;
		if (r < 0) {
			rc = dd_rados_fail(err, r, p, "list", NULL);
			break;
		}
		if (plen && strncmp(entry, prefix, plen) != 0)
			continue;
		rc = fn(arg, entry);
		if (rc)
			break;
	}
	dd_librados.rados_nobjects_list_close(ctx);
	return rc;
}

int dd_rados_read_versioned(dd_rados_pool *p, dd_err *err, const char *oid,
			    void *buf, size_t cap, size_t *len,
			    uint64_t *version)
{
	rados_read_op_t op;
	uint64_t size = 0;
	size_t got = 0;
	int r = dd_rados_io_len(err, p, "read", oid, cap), rstat = 0,
	    rread = 0;

	if (r)
		return r;
	op = dd_librados.rados_create_read_op();
	if (!op)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	/* stat and read in one operation: the size and the bytes are of the
	 * same version, and the size tells an object larger than cap */
	dd_librados.rados_read_op_stat(op, &size, NULL, &rstat);
	dd_librados.rados_read_op_read(op, 0, cap, buf, &got, &rread);
	pthread_mutex_lock(&p->rp_vmutex);
	r = dd_librados.rados_read_op_operate(op, p->rp_io, oid, 0);
	if (r >= 0)
		*version = dd_librados.rados_get_last_version(p->rp_io);
	pthread_mutex_unlock(&p->rp_vmutex);
	dd_librados.rados_release_read_op(op);
	if (r >= 0 && rstat < 0)
		r = rstat;
	if (r >= 0 && rread < 0)
		r = rread;
	if (r < 0)
		return dd_rados_fail_obj(err, r, p, "read", oid);
	if (size > cap || got != size) {
		char where[DD_RADOS_POOL_MAX + DD_RADOS_NAME_MAX + 256];

		dd_rados_where(where, sizeof(where), p, oid);
		return dd_err_set(err, DD_ECORRUPT, "rados: read %s: %llu "
				  "bytes, more than the %zu expected", where,
				  (unsigned long long)size, cap);
	}
	*len = got;
	return 0;
}

int dd_rados_write_full_if(dd_rados_pool *p, dd_err *err, const char *oid,
			   const void *buf, size_t len, uint64_t expect,
			   uint64_t *version)
{
	char where[DD_RADOS_POOL_MAX + DD_RADOS_NAME_MAX + 256];
	rados_write_op_t op;
	int r = dd_rados_io_len(err, p, "write", oid, len);

	if (r)
		return r;
	op = dd_librados.rados_create_write_op();
	if (!op)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	if (expect == 0)
		dd_librados.rados_write_op_create(op, LIBRADOS_CREATE_EXCLUSIVE, NULL);
	else
		dd_librados.rados_write_op_assert_version(op, expect);
	dd_librados.rados_write_op_write_full(op, buf, len);
	pthread_mutex_lock(&p->rp_vmutex);
	r = dd_librados.rados_write_op_operate(op, p->rp_io, oid, NULL, 0);
	if (r >= 0 && version)
		*version = dd_librados.rados_get_last_version(p->rp_io);
	pthread_mutex_unlock(&p->rp_vmutex);
	dd_librados.rados_release_write_op(op);
	if (r >= 0)
		return 0;
	dd_rados_where(where, sizeof(where), p, oid);
	/* ERANGE: newer than expect; EEXIST: created by another; EOVERFLOW
	 * (older than expect) or ENOENT: removed since it was read -- a
	 * version only grows, and a removed object has none */
	if (r == -ERANGE || r == -EOVERFLOW || (expect == 0 && r == -EEXIST) ||
	    (expect != 0 && r == -ENOENT))
		return dd_err_set(err, DD_EBUSY, "rados: write %s: changed "
				  "since version %llu was read", where,
				  (unsigned long long)expect);
	return dd_rados_fail(err, r, p, "write", oid);
}

struct dd_rados_aio {
	rados_completion_t ra_c;
	dd_rados_pool *ra_pool;
	char ra_oid[256];
};

int dd_rados_aio_read(dd_rados_pool *p, dd_err *err, const char *oid,
		      void *buf, size_t len, uint64_t off, dd_rados_aio **out)
{
	dd_rados_aio *a;
	int r = dd_rados_io_len(err, p, "read", oid, len);

	if (r)
		return r;
	a = dd_calloc(1, sizeof(*a));
	if (!a)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	a->ra_pool = p;
	snprintf(a->ra_oid, sizeof(a->ra_oid), "%s", oid);
	r = dd_librados.rados_aio_create_completion(NULL, NULL, NULL, &a->ra_c);
	if (r >= 0) {
		r = dd_librados.rados_aio_read(p->rp_io, a->ra_oid, a->ra_c, buf, len,
				   off);
		if (r < 0)
			dd_librados.rados_aio_release(a->ra_c);
	}
	if (r < 0) {
		dd_free(a);
		return dd_rados_fail_obj(err, r, p, "read", oid);
	}
	*out = a;
	return 0;
}

int dd_rados_aio_wait(dd_rados_aio *a, dd_err *err, size_t *got)
{
	int r;

	dd_librados.rados_aio_wait_for_complete(a->ra_c);
	r = dd_librados.rados_aio_get_return_value(a->ra_c);
	dd_librados.rados_aio_release(a->ra_c);
	*got = r > 0 ? (size_t)r : 0;
	if (r < 0)
		r = dd_rados_fail_obj(err, r, a->ra_pool, "read", a->ra_oid);
	else
		r = 0;
	dd_free(a);
	return r;
}
