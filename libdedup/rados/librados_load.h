/*
 * librados_load.h -- librados, loaded when a RADOS store is first used.
 *
 * libdedup does not link librados: it opens librados.so.2 with dlopen at
 * the first dd_rados_connect.  Linked, the Ceph libraries' static
 * initialisers cost every process that loads libdedup about 35 ms at
 * start (measured: `dedup --version` 0.04 s linked, under 0.01 s not) and
 * Ceph's packages at run time, whether or not it ever names a rados:
 * store.  A command on a local store pays neither now.
 *
 * Every librados call in libdedup/rados/ goes through the table
 * dd_librados, whose members have the names and the types (taken from
 * <rados/librados.h> with __typeof__) of the functions they point to:
 * dd_librados.rados_read(io, oid, buf, len, off).  A function used
 * anywhere in libdedup/rados/ must be listed in DD_LIBRADOS_FUNCTIONS.
 *
 * Invariant: the table is filled, completely, before dd_librados_load
 * returns 0, and never changes afterwards (the library stays loaded for
 * the life of the process); callers reach it only through a connection,
 * which dd_rados_connect makes after loading.
 */
#ifndef DD_RADOS_LIBRADOS_LOAD_H
#define DD_RADOS_LIBRADOS_LOAD_H

#include <rados/librados.h>

#include "common/err.h"

#define DD_LIBRADOS_FUNCTIONS(X) \
	X(rados_create) X(rados_conf_read_file) X(rados_conf_parse_env) \
	X(rados_conf_get) X(rados_conf_set) X(rados_connect) \
	X(rados_shutdown) X(rados_pool_create) X(rados_pool_delete) \
	X(rados_ioctx_create) X(rados_ioctx_destroy) \
	X(rados_ioctx_set_namespace) X(rados_get_last_version) \
	X(rados_read) X(rados_write) X(rados_write_full) X(rados_append) \
	X(rados_trunc) X(rados_stat) X(rados_remove) \
	X(rados_aio_create_completion) X(rados_aio_read) \
	X(rados_aio_wait_for_complete) X(rados_aio_get_return_value) \
	X(rados_aio_release) \
	X(rados_create_read_op) X(rados_read_op_stat) X(rados_read_op_read) \
	X(rados_read_op_operate) X(rados_release_read_op) \
	X(rados_create_write_op) X(rados_write_op_create) \
	X(rados_write_op_write_full) X(rados_write_op_assert_version) \
	X(rados_write_op_operate) X(rados_release_write_op) \
	X(rados_nobjects_list_open) X(rados_nobjects_list_next) \
	X(rados_nobjects_list_close) \
	X(rados_lock_exclusive) X(rados_unlock) X(rados_list_lockers)

#define DD_LIBRADOS_MEMBER(fn) __typeof__(fn) *fn;
struct dd_librados {
	DD_LIBRADOS_FUNCTIONS(DD_LIBRADOS_MEMBER)
};
#undef DD_LIBRADOS_MEMBER

extern struct dd_librados dd_librados;

/* 0 once librados is loaded and dd_librados filled (the first call loads
 * it; later calls, from any thread, return the first call's result), or
 * DD_ENOTSUP "rados: cannot load librados.so.2 (Debian: librados2):
 * <dlerror>" -- also when a function is missing from it. */
int dd_librados_load(dd_err *err);

#endif
