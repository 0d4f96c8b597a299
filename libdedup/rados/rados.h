/*
 * rados.h -- the object-store client RADOS stores are built on (issue
 * #15; the plan is in docs/design.md "Plan: stores in a RADOS pool").
 * Built only with DD_HAVE_RADOS (CMake -DDD_RADOS); librados itself is
 * opened at the first connection (librados_load.h), not linked.
 *
 * A store named `rados:POOL/NAME` lives in pool POOL, in the RADOS
 * namespace NAME: its objects keep plain names (`packs/0000002a`,
 * `manifests/...`), two stores of one pool never see each other's
 * objects, a listing of one store asks the OSDs for that namespace only,
 * and a Ceph key can be confined to one store (`osd 'allow rw pool=P
 * namespace=N'`).  An object-name prefix would give none of the last
 * two.
 *
 * Every wait is bounded.  The cluster is found as Ceph's own tools find
 * it -- the file CEPH_CONF names, else /etc/ceph/ceph.conf (and the other
 * places librados searches), then CEPH_ARGS -- and each of the three
 * timeouts then comes from, first to last: the caller's dd_rados_conf
 * (a value > 0), the configuration when it sets a bound other than
 * Ceph's own default, else DD_RADOS_*_DEFAULT below.  Ceph's defaults are
 * "wait forever" for OSD and monitor operations and 300 s for the mount,
 * which is never what a backup that must fail cleanly wants.  An
 * operation that runs out of time fails with DD_EIO "...: Connection
 * timed out".
 *
 * Errors: librados returns negative errno values; each is translated
 * where it comes in, into one line naming the operation and the object
 * as pool/namespace/object: "DD_EIO: rados: write dd/s1/packs/00000001:
 * Connection timed out".  ENOENT is DD_ENOENT, EEXIST DD_EEXIST, EBUSY
 * DD_EBUSY, the rest as dd_errno_code maps them.
 *
 * Threads: a dd_rados and its pools may be used from several threads at
 * once (librados is thread-safe); a dd_rados_lock by one at a time.
 */
#ifndef DD_RADOS_RADOS_H
#define DD_RADOS_RADOS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "common/err.h"

/* Seconds, when neither the caller nor the configuration bounds a wait. */
#define DD_RADOS_OSD_OP_TIMEOUT_DEFAULT 30u
#define DD_RADOS_MON_OP_TIMEOUT_DEFAULT 30u
#define DD_RADOS_MOUNT_TIMEOUT_DEFAULT 30u

/* Sizes with the terminating NUL.  A store name is a namespace: letters,
 * digits, '.', '_', '-', not starting with '.'; a pool name anything but
 * '/' and control characters (Ceph allows more; we need the '/'). */
#define DD_RADOS_POOL_MAX 128
#define DD_RADOS_NAME_MAX 64
#define DD_RADOS_SPEC_PREFIX "rados:"

/* Whole seconds: Ceph reads these options as such. */
typedef struct dd_rados_conf {
	unsigned rc_osd_op_timeout;   /* rados_osd_op_timeout */
	unsigned rc_mon_op_timeout;   /* rados_mon_op_timeout */
	unsigned rc_mount_timeout;    /* client_mount_timeout */
} dd_rados_conf;

typedef struct dd_rados dd_rados;            /* a connection */
typedef struct dd_rados_pool dd_rados_pool;  /* a pool and namespace */
typedef struct dd_rados_lock dd_rados_lock;  /* a lock this client holds */

/* Whether path names a RADOS store ("rados:..."). */
bool dd_rados_is_spec(const char *path);

/* Splits "rados:POOL/NAME" into its pool and store name, both checked.
 * DD_EINVAL with a line saying what is wrong with spec. */
int dd_rados_parse_spec(dd_err *err, const char *spec,
			char pool[DD_RADOS_POOL_MAX],
			char name[DD_RADOS_NAME_MAX]);

/* Connects to the cluster the configuration names (above), as
 * client.admin unless CEPH_ARGS says --id/--name; conf may be NULL. */
int dd_rados_connect(dd_rados **out, dd_err *err, const dd_rados_conf *conf);
void dd_rados_disconnect(dd_rados *r);     /* NULL is fine */

/* on: once an operation of r timed out, the operations of the next
 * osd_op_timeout seconds fail at once with DD_EIO "...: an operation timed
 * out N s ago: the cluster is out of reach" instead of waiting out their
 * own bound -- for a command that fails and cleans up (a store, rstore.c);
 * off (the default): every operation waits its own bound. */
void dd_rados_fail_fast(dd_rados *r, bool on);

/* The timeouts in force on r, in seconds. */
void dd_rados_timeouts(const dd_rados *r, dd_rados_conf *out);

/* Pools: create (DD_EEXIST when it exists) and delete, for tests and
 * tools; open one with a namespace ("" is the default namespace). */
int dd_rados_pool_create(dd_rados *r, dd_err *err, const char *pool);
int dd_rados_pool_delete(dd_rados *r, dd_err *err, const char *pool);
int dd_rados_pool_open(dd_rados_pool **out, dd_err *err, dd_rados *r,
		       const char *pool, const char *ns);
void dd_rados_pool_close(dd_rados_pool *p);   /* NULL is fine */

/* Object I/O.  Lengths up to DD_RADOS_IO_MAX per call (librados returns
 * an int, and an OSD refuses writes past osd_max_write_size, 90 MiB by
 * default).  write_full replaces the object whole (created if missing);
 * write writes at off; append at the end.  read reads up to len bytes at
 * off into buf, *got the bytes read (fewer at the object's end);
 * DD_ENOENT "...: no such object" when it does not exist. */
#define DD_RADOS_IO_MAX (90u << 20)
int dd_rados_write_full(dd_rados_pool *p, dd_err *err, const char *oid,
			const void *buf, size_t len);
int dd_rados_write(dd_rados_pool *p, dd_err *err, const char *oid,
		   const void *buf, size_t len, uint64_t off);
int dd_rados_append(dd_rados_pool *p, dd_err *err, const char *oid,
		    const void *buf, size_t len);
int dd_rados_read(dd_rados_pool *p, dd_err *err, const char *oid, void *buf,
		  size_t len, uint64_t off, size_t *got);
int dd_rados_stat(dd_rados_pool *p, dd_err *err, const char *oid,
		  uint64_t *size, time_t *mtime);
int dd_rados_remove(dd_rados_pool *p, dd_err *err, const char *oid);
/* A read that runs while the caller does something else: aio_read starts
 * it (buf must stay until the wait), aio_wait waits for it, gives what
 * dd_rados_read would (*got, DD_ENOENT, DD_EIO on a timeout) and frees
 * a.  Every started read is waited for exactly once. */
typedef struct dd_rados_aio dd_rados_aio;
int dd_rados_aio_read(dd_rados_pool *p, dd_err *err, const char *oid,
		      void *buf, size_t len, uint64_t off, dd_rados_aio **out);
int dd_rados_aio_wait(dd_rados_aio *a, dd_err *err, size_t *got);

/* Cuts or extends (with zeros) an existing object to size bytes. */
int dd_rados_truncate(dd_rados_pool *p, dd_err *err, const char *oid,
		      uint64_t size);

/* Calls fn for each object of p's namespace whose name starts with
 * prefix ("" for all), in no particular order; a non-zero return of fn
 * stops the walk and is returned. */
typedef int (*dd_rados_list_fn)(void *arg, const char *oid);
int dd_rados_list(dd_rados_pool *p, dd_err *err, const char *prefix,
		  dd_rados_list_fn fn, void *arg);

/* Compare-and-swap, for the objects that order commits across machines.
 * An object's version is RADOS's: it grows with every change, and no
 * object that exists has version 0.  read_versioned reads the whole
 * object (at most cap bytes: DD_ECORRUPT if larger) and its version in
 * one operation.  write_full_if replaces it only if its version is still
 * expect -- with expect 0, only if it does not exist --, and gives the
 * new version; a writer that read an older state gets DD_EBUSY "...:
 * changed since version V was read" and must read again. */
int dd_rados_read_versioned(dd_rados_pool *p, dd_err *err, const char *oid,
			    void *buf, size_t cap, size_t *len,
			    uint64_t *version);
int dd_rados_write_full_if(dd_rados_pool *p, dd_err *err, const char *oid,
			   const void *buf, size_t len, uint64_t expect,
			   uint64_t *version);

/* An advisory exclusive lock on object oid (which need not hold data),
 * taken for duration_s seconds: the holder renews it before then, and if
 * the holder dies the lock expires after at most duration_s.  Its holder
 * is named by "pid N on HOST since T" (T the lock's start, UTC).  take
 * tries until wait_ms has passed (0: once); a lock held by another gives
 * DD_EBUSY "rados: lock POOL/NS/OID: held by pid N on HOST since T".
 * renew extends it by duration_s from now; if the lock was lost (expired
 * and taken, or broken) it gives DD_EBUSY "...: lock lost" and the holder
 * must stop what the lock protected.  release lets it go and frees l,
 * whatever it returns. */
int dd_rados_lock_take(dd_rados_lock **out, dd_err *err, dd_rados_pool *p,
		       const char *oid, unsigned duration_s, unsigned wait_ms);
int dd_rados_lock_renew(dd_rados_lock *l, dd_err *err);
int dd_rados_lock_release(dd_rados_lock *l, dd_err *err);

/* keep renews l from a thread of its own every third of its duration,
 * until release (which stops it); the caller then calls no renew.  check
 * is 0 while l is held, and once a renewal was refused -- or none
 * succeeded for a whole duration (the OSD away) -- DD_EBUSY "...lock
 * lost..." for good: a holder checks before each step the lock protects
 * (a commit).  check of a lock not kept is 0. */
int dd_rados_lock_keep(dd_rados_lock *l, dd_err *err);
int dd_rados_lock_check(dd_rados_lock *l, dd_err *err);

/* Who holds the lock on oid, as above; "" when nobody does. */
int dd_rados_lock_holder(dd_rados_pool *p, dd_err *err, const char *oid,
			 char *buf, size_t len);

/* ---- vdir_rados.c ---------------------------------------------------------*/

struct dd_vdir;
/* The directory `dir` ("packs", "manifests") of the store in p's
 * namespace, as a vdir (common/vdir.h) whose files are the objects
 * "DIR/NAME".  p must outlive it. */
int dd_rados_vdir_open(struct dd_vdir **out, dd_err *err, dd_rados_pool *p,
		       const char *dir);

#endif
