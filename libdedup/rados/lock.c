/*
 * lock.c -- advisory exclusive locks on objects, with a duration
 * (rados.h).
 *
 * A lock is Ceph's cls_lock: the OSD holding the object keeps its
 * holders, keyed by (client instance, cookie), with an expiry time.  The
 * cookie is the holder's name, "pid N on HOST since T #K" (K counts the
 * locks this process took, so two of its threads never share a cookie):
 * rados_list_lockers gives cookies back, which is how a refused waiter
 * names the holder -- the part before " #".  The description carries the
 * same text for `rados lock info`.
 *
 * Liveness is the duration: a holder that dies (process, machine or
 * network) stops renewing, the lock expires on the OSD and the next
 * taker gets it.  A renewal must therefore come well inside the duration,
 * and a holder whose renewal fails has lost the lock (someone may have
 * taken it since): renewing uses LIBRADOS_LOCK_FLAG_MUST_RENEW, which
 * the OSD refuses (ENOENT) unless this holder still holds it.
 *
 * The keeper (dd_rados_lock_keep) renews from a thread of its own every
 * third of the duration.  A renewal refused means the lock is lost; one
 * that fails otherwise (a timeout: the OSD is away) is retried until a
 * whole duration has passed since the last renewal that succeeded -- the
 * OSD may have let the lock expire by then --, and the lock is then lost
 * too.  A lost lock stays lost: dd_rados_lock_check says so from then on.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "common/alloc.h"
#include "common/holder.h"
#include "rados/rados_internal.h"

/* The lock's name inside the object: one kind of lock per object. */
#define DD_RADOS_LOCK_NAME "dedup"
#define DD_RADOS_COOKIE_MAX 400
#define DD_RADOS_LOCK_POLL_MS 100
#define DD_RADOS_LOCK_DURATION_MAX (24u * 3600)

struct dd_rados_lock {
	dd_rados_pool *rl_pool;
	unsigned rl_duration;
	char rl_oid[256];
	char rl_cookie[DD_RADOS_COOKIE_MAX];
	/* the keeper (dd_rados_lock_keep): rl_mutex guards the fields below */
	bool rl_keeping;
	pthread_t rl_keeper;
	pthread_mutex_t rl_mutex;
	pthread_cond_t rl_wake;
	bool rl_stop;
	dd_err rl_lost;           /* DD_OK while the lock is held */
};

static atomic_uint dd_rados_lock_seq;

static double dd_rados_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The holder's name in a cookie: everything before " #". */
static void dd_rados_cookie_holder(const char *cookie, char *buf, size_t len)
{
	const char *cut = strstr(cookie, " #");
	size_t n = cut ? (size_t)(cut - cookie) : strlen(cookie);

	if (len == 0)
		return;
	if (n >= len)
		n = len - 1;
	memcpy(buf, cookie, n);
	buf[n] = 0;
}

int dd_rados_lock_holder(dd_rados_pool *p, dd_err *err, const char *oid,
			 char *buf, size_t len)
{
	char tag[256], clients[1024], cookies[2048], addrs[1024];
	size_t tag_len = sizeof(tag), clients_len = sizeof(clients),
	       cookies_len = sizeof(cookies), addrs_len = sizeof(addrs);
	int exclusive = 0;
	ssize_t n;

	if (len)
		buf[0] = 0;
	if (dd_rados_reachable(err, p, "list the lockers of", oid))
		return DD_EIO;
	n = dd_librados.rados_list_lockers(p->rp_io, oid, DD_RADOS_LOCK_NAME,
					   &exclusive, tag, &tag_len, clients,
					   &clients_len, cookies, &cookies_len,
					   addrs, &addrs_len);
	if (n == -ENOENT)
		return 0;    /* no object: nobody holds a lock on it */
	if (n < 0)
		return dd_rados_fail(err, (int)n, p, "list the lockers of",
				     oid);
	if (n > 0)
		dd_rados_cookie_holder(cookies, buf, len);
	return 0;
}

/* One call of rados_lock_exclusive: 0, or librados's negative errno. */
static int dd_rados_lock_call(dd_rados_lock *l, uint8_t flags)
{
	/* the cluster timed out just before: as dd_rados_reachable */
	if (dd_rados_reachable(NULL, l->rl_pool, "lock", l->rl_oid))
		return -ETIMEDOUT;
	struct timeval dur = {(time_t)l->rl_duration, 0};

	return dd_librados.rados_lock_exclusive(l->rl_pool->rp_io, l->rl_oid,
				    DD_RADOS_LOCK_NAME, l->rl_cookie,
				    l->rl_cookie, &dur, flags);
}

int dd_rados_lock_take(dd_rados_lock **out, dd_err *err, dd_rados_pool *p,
		       const char *oid, unsigned duration_s, unsigned wait_ms)
{
	char who[320], where[DD_RADOS_POOL_MAX + DD_RADOS_NAME_MAX + 256];
	double deadline = dd_rados_now() + wait_ms / 1000.0;
	dd_rados_lock *l;
	int rc;

	if (!out || !p || !oid || !oid[0] || strlen(oid) >= 256)
		return dd_err_set(err, DD_EINVAL, "rados: lock: no pool, or "
				  "no object name of fewer than 256 bytes");
	if (duration_s == 0 || duration_s > DD_RADOS_LOCK_DURATION_MAX)
		return dd_err_set(err, DD_EINVAL, "rados: lock %s: a duration "
				  "of %u s, not 1 to %u", oid, duration_s,
				  DD_RADOS_LOCK_DURATION_MAX);
	l = dd_calloc(1, sizeof(*l));
	if (!l)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	l->rl_pool = p;
	l->rl_duration = duration_s;
	snprintf(l->rl_oid, sizeof(l->rl_oid), "%s", oid);
	dd_holder_ident(who, sizeof(who));
	snprintf(l->rl_cookie, sizeof(l->rl_cookie), "%s #%u", who,
		 atomic_fetch_add(&dd_rados_lock_seq, 1) + 1);
	for (;;) {
		struct timespec nap = {0, DD_RADOS_LOCK_POLL_MS * 1000000L};

		int r = dd_rados_lock_call(l, 0);

		if (r != -EBUSY) {
			rc = r < 0 ? dd_rados_fail(err, r, p, "lock", oid) : 0;
			break;
		}
		if (dd_rados_now() >= deadline) {
			char holder[DD_RADOS_COOKIE_MAX];

			rc = dd_rados_lock_holder(p, err, oid, holder,
						  sizeof(holder));
			if (rc)
				break;
			dd_rados_where(where, sizeof(where), p, oid);
			rc = dd_err_set(err, DD_EBUSY, "rados: lock %s: held "
					"by %s", where, holder[0] ? holder :
					"another client (gone since)");
			break;
		}
		nanosleep(&nap, NULL);
	}
	if (rc) {
		dd_free(l);
		return rc;
	}
	*out = l;
	return 0;
}

int dd_rados_lock_renew(dd_rados_lock *l, dd_err *err)
{
	char where[DD_RADOS_POOL_MAX + DD_RADOS_NAME_MAX + 256];
	int r;

	if (!l)
		return dd_err_set(err, DD_EINVAL, "rados: renew: no lock");
	r = dd_rados_lock_call(l, LIBRADOS_LOCK_FLAG_MUST_RENEW);
	if (r == 0)
		return 0;
	if (r != -ENOENT && r != -EBUSY)
		return dd_rados_fail(err, r, l->rl_pool, "renew the lock on",
				     l->rl_oid);
	/* ENOENT: not ours any more; EBUSY: another's now */
	dd_rados_where(where, sizeof(where), l->rl_pool, l->rl_oid);
	return dd_err_set(err, DD_EBUSY, "rados: lock %s: lock lost (it "
			  "expired or was broken)", where);
}

static void *dd_rados_lock_keeper(void *arg)
{
	dd_rados_lock *l = arg;
	/* a third of the duration, at least 200 ms: well inside it */
	double every = l->rl_duration / 3.0 < 0.2 ? 0.2 : l->rl_duration / 3.0;
	/* the OSD counts a duration from when it takes a renewal, which is
	 * after it was sent: from the sending is on the safe side */
	double held_until = dd_rados_now() + l->rl_duration;
	double next = dd_rados_now() + every;

	pthread_mutex_lock(&l->rl_mutex);
	while (!l->rl_stop) {
		struct timespec ts = {(time_t)next,
				      (long)((next - (time_t)next) * 1e9)};
		dd_err e = {0};
		double sent;
		int rc;

		pthread_cond_timedwait(&l->rl_wake, &l->rl_mutex, &ts);
		if (l->rl_stop || dd_rados_now() < next)
			continue;
		pthread_mutex_unlock(&l->rl_mutex);
		sent = dd_rados_now();
		rc = dd_rados_lock_renew(l, &e);
		pthread_mutex_lock(&l->rl_mutex);
		next = dd_rados_now() + every;
		if (rc == 0) {
			held_until = sent + l->rl_duration;
			continue;
		}
		if (rc == DD_EBUSY || dd_rados_now() >= held_until) {
			if (rc != DD_EBUSY)
				dd_err_wrap(&e, DD_EBUSY, "lock lost: not "
					    "renewed within its duration", NULL);
			dd_err_copy(&l->rl_lost, &e);
			break;
		}
	}
	pthread_mutex_unlock(&l->rl_mutex);
	return NULL;
}

int dd_rados_lock_keep(dd_rados_lock *l, dd_err *err)
{
	pthread_condattr_t attr;
	int rc;

	if (!l || l->rl_keeping)
		return dd_err_set(err, DD_EINVAL, "rados: keep: no lock, or "
				  "one already kept");
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&l->rl_wake, &attr);
	pthread_condattr_destroy(&attr);
	pthread_mutex_init(&l->rl_mutex, NULL);
	l->rl_stop = false;
	dd_err_clear(&l->rl_lost);
	rc = pthread_create(&l->rl_keeper, NULL, dd_rados_lock_keeper, l);
	if (rc) {
		pthread_cond_destroy(&l->rl_wake);
		pthread_mutex_destroy(&l->rl_mutex);
		return dd_err_set_errno(err, rc, "rados: keep the lock on %s",
					l->rl_oid);
	}
	l->rl_keeping = true;
	return 0;
}

int dd_rados_lock_check(dd_rados_lock *l, dd_err *err)
{
	int rc = 0;

	if (!l)
		return dd_err_set(err, DD_EINVAL, "rados: check: no lock");
	if (!l->rl_keeping)
		return 0;
	pthread_mutex_lock(&l->rl_mutex);
	if (l->rl_lost.de_code)
		rc = dd_err_copy(err, &l->rl_lost);
	pthread_mutex_unlock(&l->rl_mutex);
	return rc;
}

int dd_rados_lock_release(dd_rados_lock *l, dd_err *err)
{
	int r, rc = 0;

	if (!l)
		return 0;
	if (l->rl_keeping) {
		pthread_mutex_lock(&l->rl_mutex);
		l->rl_stop = true;
		pthread_cond_signal(&l->rl_wake);
		pthread_mutex_unlock(&l->rl_mutex);
		pthread_join(l->rl_keeper, NULL);
		pthread_cond_destroy(&l->rl_wake);
		pthread_mutex_destroy(&l->rl_mutex);
	}
	/* out of reach before: the lock expires by its duration instead */
	r = dd_rados_reachable(NULL, l->rl_pool, "unlock", l->rl_oid)
		    ? 0 : dd_librados.rados_unlock(l->rl_pool->rp_io, l->rl_oid,
				       DD_RADOS_LOCK_NAME, l->rl_cookie);
	/* ENOENT: expired, nothing left to release */
	if (r < 0 && r != -ENOENT)
		rc = dd_rados_fail(err, r, l->rl_pool, "unlock", l->rl_oid);
	dd_free(l);
	return rc;
}
