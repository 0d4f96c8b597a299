/*
 * librados_load.c -- librados opened with dlopen (librados_load.h says
 * why).  One pthread_once load per process; the library is never closed.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "dedup.h"

#include "common/err.h"
#include "rados/librados_load.h"

/* The soname of librados's C API (Debian's librados2), stable since Ceph
 * 0.48: the ABI <rados/librados.h> describes. */
#define DD_LIBRADOS_SONAME "librados.so.2"

struct dd_librados dd_librados;

static pthread_once_t dd_librados_once = PTHREAD_ONCE_INIT;
static char dd_librados_error[512];     /* "" once loaded */

static void dd_librados_open(void)
{
	void *lib = dlopen(DD_LIBRADOS_SONAME, RTLD_NOW | RTLD_LOCAL);
	struct dd_librados table;
	const char *missing = NULL;

	if (!lib) {
		snprintf(dd_librados_error, sizeof(dd_librados_error),
			 "%s", dlerror());
		return;
	}
	/* dlsym's void * to a function pointer: POSIX guarantees the
	 * conversion; memcpy keeps the compiler's pedantry out of it */
#define DD_LIBRADOS_RESOLVE(fn) \
	if (!missing) { \
		void *sym = dlsym(lib, #fn); \
		if (sym) \
			memcpy(&table.fn, &sym, sizeof(sym)); \
		else \
			missing = #fn; \
	}
	DD_LIBRADOS_FUNCTIONS(DD_LIBRADOS_RESOLVE)
#undef DD_LIBRADOS_RESOLVE
	if (missing) {
		snprintf(dd_librados_error, sizeof(dd_librados_error),
			 "%s has no %s", DD_LIBRADOS_SONAME, missing);
		dlclose(lib);
		return;
	}
	dd_librados = table;
}

int dd_librados_load(dd_err *err)
{
	pthread_once(&dd_librados_once, dd_librados_open);
	if (dd_librados_error[0])
		return dd_err_set(err, DD_ENOTSUP, "rados: cannot load "
				  "librados (Debian: librados2): %s",
				  dd_librados_error);
	return 0;
}
