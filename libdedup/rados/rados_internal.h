/*
 * rados_internal.h -- what the files of libdedup/rados/ share.
 */
#ifndef DD_RADOS_RADOS_INTERNAL_H
#define DD_RADOS_RADOS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include "dedup.h"

#include "rados/librados_load.h"
#include "rados/rados.h"

struct dd_rados {
	rados_t ra_cluster;
	dd_rados_conf ra_conf;      /* the timeouts in force */
	/* dd_rados_fail_fast: when an operation ran out of time, the
	 * operations of the next ra_conf.rc_osd_op_timeout seconds fail at
	 * once (dd_rados_reachable) instead of waiting out their own bound:
	 * the cleanup steps of a failing command would otherwise multiply
	 * the bound the caller chose */
	_Atomic bool ra_fail_fast;
	_Atomic int64_t ra_timed_out_ms;   /* CLOCK_MONOTONIC, 0: never */
};

struct dd_rados_pool {
	dd_rados *rp_rados;
	rados_ioctx_t rp_io;
	/* rados_get_last_version is the last operation's on the ioctx, of
	 * whichever thread: a versioned operation and the read of its version
	 * hold this */
	pthread_mutex_t rp_vmutex;
	char rp_pool[DD_RADOS_POOL_MAX];
	char rp_ns[DD_RADOS_NAME_MAX];
};

/* Records librados's result r (a negative errno) as one line, "rados:
 * WHAT POOL/NS/OID: <strerror>" (oid may be NULL, p too), translated to a
 * DD_E* code (rados.h), and returns that code. */
int dd_rados_fail(dd_err *err, int r, const dd_rados_pool *p,
		  const char *what, const char *oid);

/* 0, or DD_EIO "rados: WHAT POOL/NS/OID: an operation timed out N s
 * ago: ..." while the connection fails fast (above). */
int dd_rados_reachable(dd_err *err, const dd_rados_pool *p, const char *what,
		       const char *oid);

/* "POOL/NS/OID" into buf, for messages ("POOL/OID" in the default
 * namespace). */
/* Records a timeout of p's connection (for dd_rados_reachable). */
void dd_rados_timed_out(const dd_rados_pool *p);

void dd_rados_where(char *buf, size_t len, const dd_rados_pool *p,
		    const char *oid);

#endif
