/*
 * client.c -- connecting to a Ceph cluster, its timeouts, pools, store
 * names and librados's errors (rados.h).
 *
 * The connection is made as `rados` and `ceph` make theirs:
 * rados_conf_read_file(NULL) reads the file CEPH_CONF names or the first
 * of librados's default places, rados_conf_parse_env(NULL) applies
 * CEPH_ARGS over it.  A missing file is no error by itself (CEPH_ARGS
 * may name the monitors); a connect without any monitor address says
 * where it looked.  The timeouts are settled before rados_connect,
 * which already waits for up to client_mount_timeout.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "rados/rados_internal.h"

/* Ceph's own defaults (Pacific's options): a value equal to these was not
 * chosen by whoever configured the cluster, or chose not to bound. */
#define DD_CEPH_OSD_OP_TIMEOUT 0u
#define DD_CEPH_MON_OP_TIMEOUT 0u
#define DD_CEPH_MOUNT_TIMEOUT 300u

bool dd_rados_is_spec(const char *path)
{
	return path && strncmp(path, DD_RADOS_SPEC_PREFIX,
			       strlen(DD_RADOS_SPEC_PREFIX)) == 0;
}

static bool dd_rados_name_ok(const char *s, size_t n)
{
	if (n == 0 || s[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		      c == '-'))
			return false;
	}
	return true;
}

int dd_rados_parse_spec(dd_err *err, const char *spec,
			char pool[DD_RADOS_POOL_MAX],
			char name[DD_RADOS_NAME_MAX])
{
	const char *p, *slash;
	size_t np, nn;

	if (!dd_rados_is_spec(spec))
		return dd_err_set(err, DD_EINVAL, "'%s' is not a RADOS store "
				  "name (rados:POOL/NAME)", spec ? spec : "");
	p = spec + strlen(DD_RADOS_SPEC_PREFIX);
	slash = strchr(p, '/');
	if (!slash)
		return dd_err_set(err, DD_EINVAL, "'%s': no store name "
				  "(rados:POOL/NAME)", spec);
	np = (size_t)(slash - p);
	nn = strlen(slash + 1);
	if (np == 0 || np >= DD_RADOS_POOL_MAX)
		return dd_err_set(err, DD_EINVAL, "'%s': the pool name must "
				  "have 1 to %d bytes", spec,
				  DD_RADOS_POOL_MAX - 1);
	for (size_t i = 0; i < np; i++)
		if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f)
			return dd_err_set(err, DD_EINVAL, "'%s': a control "
					  "character in the pool name", spec);
	if (nn == 0 || nn >= DD_RADOS_NAME_MAX ||
	    !dd_rados_name_ok(slash + 1, nn))
		return dd_err_set(err, DD_EINVAL, "'%s': the store name must "
				  "have 1 to %d letters, digits, '.', '_' or "
				  "'-', and not start with '.'", spec,
				  DD_RADOS_NAME_MAX - 1);
	memcpy(pool, p, np);
	pool[np] = 0;
	memcpy(name, slash + 1, nn + 1);
	return 0;
}

void dd_rados_where(char *buf, size_t len, const dd_rados_pool *p,
		    const char *oid)
{
	if (!p)
		snprintf(buf, len, "%s", oid ? oid : "");
	else if (!p->rp_ns[0])
		snprintf(buf, len, "%s%s%s", p->rp_pool, oid ? "/" : "",
			 oid ? oid : "");
	else
		snprintf(buf, len, "%s/%s%s%s", p->rp_pool, p->rp_ns,
			 oid ? "/" : "", oid ? oid : "");
}

static int64_t dd_rados_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void dd_rados_fail_fast(dd_rados *r, bool on)
{
	atomic_store(&r->ra_fail_fast, on);
}

void dd_rados_timed_out(const dd_rados_pool *p)
{
	if (p)
		atomic_store(&p->rp_rados->ra_timed_out_ms, dd_rados_now_ms());
}

int dd_rados_reachable(dd_err *err, const dd_rados_pool *p, const char *what,
		       const char *oid)
{
	char where[DD_RADOS_POOL_MAX + DD_RADOS_NAME_MAX + 256];
	int64_t at, ago;

	if (!p || !atomic_load(&p->rp_rados->ra_fail_fast))
		return 0;
	at = atomic_load(&p->rp_rados->ra_timed_out_ms);
	ago = dd_rados_now_ms() - at;
	if (!at || ago >= (int64_t)p->rp_rados->ra_conf.rc_osd_op_timeout * 1000)
		return 0;
	dd_rados_where(where, sizeof(where), p, oid);
	return dd_err_set(err, DD_EIO, "rados: %s%s%s: an operation timed out "
			  "%.1f s ago: the cluster is out of reach", what,
			  where[0] ? " " : "", where, (double)ago / 1000);
}

int dd_rados_fail(dd_err *err, int r, const dd_rados_pool *p,
		  const char *what, const char *oid)
{
	char where[DD_RADOS_POOL_MAX + DD_RADOS_NAME_MAX + 256];
	char buf[128];
	int e = r < 0 ? -r : r, code;

	switch (e) {
	case ENOENT:
		code = DD_ENOENT;
		break;
	case EEXIST:
		code = DD_EEXIST;
		break;
	case EBUSY:
		code = DD_EBUSY;
		break;
	default:
		code = dd_errno_code(e);
		break;
	}
	if (e == ETIMEDOUT)
		dd_rados_timed_out(p);
	dd_rados_where(where, sizeof(where), p, oid);
	return dd_err_set(err, code, "rados: %s%s%s: %s", what,
			  where[0] ? " " : "", where,
			  strerror_r(e, buf, sizeof(buf)));
}

/* Reads option key as whole seconds; a value too large for an unsigned
 * is taken as unbounded (0), to be bounded by the caller or us. */
static int dd_rados_conf_seconds(rados_t cl, const char *key, unsigned *out)
{
	char buf[64], *end;
	double v;
	int r = dd_librados.rados_conf_get(cl, key, buf, sizeof(buf));

	if (r < 0)
		return r;
	v = strtod(buf, &end);
	if (end == buf)
		return -EINVAL;
	*out = v > 0 && v < 4e9 ? (unsigned)v : 0;
	return 0;
}

/* Settles one timeout (rados.h): the caller's, the configuration's if it
 * chose a bound, else ours; records it in *in_force. */
static int dd_rados_settle(rados_t cl, dd_err *err, const char *key,
			   unsigned caller, unsigned ceph_default,
			   unsigned ours, unsigned *in_force)
{
	unsigned v = 0;
	char text[32];
	int r = dd_rados_conf_seconds(cl, key, &v);

	if (r < 0)
		return dd_rados_fail(err, r, NULL, "read option", key);
	if (caller > 0)
		v = caller;
	else if (v == 0 || v == ceph_default)
		v = ours;
	snprintf(text, sizeof(text), "%u", v);
	r = dd_librados.rados_conf_set(cl, key, text);
	if (r < 0)
		return dd_rados_fail(err, r, NULL, "set option", key);
	*in_force = v;
	return 0;
}

/* The bounded waits, in the order of dd_rados_conf's fields: the option,
 * Ceph's default, ours. */
static const struct dd_rados_bound {
	const char *rb_key;
	unsigned rb_ceph, rb_ours;
} dd_rados_bounds[] = {
	{"rados_osd_op_timeout", DD_CEPH_OSD_OP_TIMEOUT,
	 DD_RADOS_OSD_OP_TIMEOUT_DEFAULT},
	{"rados_mon_op_timeout", DD_CEPH_MON_OP_TIMEOUT,
	 DD_RADOS_MON_OP_TIMEOUT_DEFAULT},
	{"client_mount_timeout", DD_CEPH_MOUNT_TIMEOUT,
	 DD_RADOS_MOUNT_TIMEOUT_DEFAULT},
};
_Static_assert(sizeof(dd_rados_bounds) / sizeof(dd_rados_bounds[0]) == 3,
	       "one bound per field of dd_rados_conf");

int dd_rados_connect(dd_rados **out, dd_err *err, const dd_rados_conf *conf)
{
	static const dd_rados_conf none;
	dd_rados *ra;
	char mon[512] = "";
	int r, rc;

	if (!out)
		return dd_err_set(err, DD_EINVAL, "rados: connect: no handle");
	if (!conf)
		conf = &none;
	rc = dd_librados_load(err);
	if (rc)
		return rc;
	ra = dd_calloc(1, sizeof(*ra));
	if (!ra)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	r = dd_librados.rados_create(&ra->ra_cluster, NULL);
	if (r < 0) {
		dd_free(ra);
		return dd_rados_fail(err, r, NULL, "create a cluster handle",
				     NULL);
	}
	r = dd_librados.rados_conf_read_file(ra->ra_cluster, NULL);
	if (r < 0 && r != -ENOENT && r != -EINVAL) {
		rc = dd_rados_fail(err, r, NULL, "read the configuration "
				   "(CEPH_CONF, /etc/ceph/ceph.conf)", NULL);
		goto fail;
	}
	r = dd_librados.rados_conf_parse_env(ra->ra_cluster, NULL);
	if (r < 0) {
		rc = dd_rados_fail(err, r, NULL, "parse CEPH_ARGS", NULL);
		goto fail;
	}
	{
		const unsigned caller[] = {conf->rc_osd_op_timeout,
					   conf->rc_mon_op_timeout,
					   conf->rc_mount_timeout};
		unsigned *in_force[] = {&ra->ra_conf.rc_osd_op_timeout,
					&ra->ra_conf.rc_mon_op_timeout,
					&ra->ra_conf.rc_mount_timeout};

		for (size_t i = 0; i < 3; i++) {
			const struct dd_rados_bound *b = &dd_rados_bounds[i];

			rc = dd_rados_settle(ra->ra_cluster, err, b->rb_key,
					     caller[i], b->rb_ceph, b->rb_ours,
					     in_force[i]);
			if (rc)
				goto fail;
		}
	}
	if (dd_librados.rados_conf_get(ra->ra_cluster, "mon_host", mon,
				       sizeof(mon)) < 0)
		mon[0] = 0;
	if (!mon[0]) {
		rc = dd_err_set(err, DD_ENOENT, "rados: no monitor address: "
				"no ceph.conf where CEPH_CONF points or in "
				"/etc/ceph, and no --mon-host in CEPH_ARGS");
		goto fail;
	}
	r = dd_librados.rados_connect(ra->ra_cluster);
	if (r < 0) {
		char what[600];

		snprintf(what, sizeof(what), "connect to %s (within %u s)",
			 mon, ra->ra_conf.rc_mount_timeout);
		rc = dd_rados_fail(err, r, NULL, what, NULL);
		goto fail;
	}
	*out = ra;
	return 0;
fail:
	dd_librados.rados_shutdown(ra->ra_cluster);
	dd_free(ra);
	return rc;
}

void dd_rados_disconnect(dd_rados *r)
{
	if (!r)
		return;
	dd_librados.rados_shutdown(r->ra_cluster);
	dd_free(r);
}

void dd_rados_timeouts(const dd_rados *r, dd_rados_conf *out)
{
	*out = r->ra_conf;
}

static int dd_rados_pool_name_ok(dd_err *err, const char *pool)
{
	if (!pool || !pool[0] || strlen(pool) >= DD_RADOS_POOL_MAX)
		return dd_err_set(err, DD_EINVAL, "rados: a pool name must "
				  "have 1 to %d bytes", DD_RADOS_POOL_MAX - 1);
	return 0;
}

/* Creates or deletes a pool: call is rados_pool_create or _delete. */
static int dd_rados_pool_admin(dd_rados *r, dd_err *err, const char *pool,
			       int (*call)(rados_t, const char *),
			       const char *what)
{
	int rc = dd_rados_pool_name_ok(err, pool);

	if (rc)
		return rc;
	rc = call(r->ra_cluster, pool);
	return rc < 0 ? dd_rados_fail(err, rc, NULL, what, pool) : 0;
}

int dd_rados_pool_create(dd_rados *r, dd_err *err, const char *pool)
{
	return dd_rados_pool_admin(r, err, pool, dd_librados.rados_pool_create,
				   "create pool");
}

int dd_rados_pool_delete(dd_rados *r, dd_err *err, const char *pool)
{
	return dd_rados_pool_admin(r, err, pool, dd_librados.rados_pool_delete,
				   "delete pool");
}

int dd_rados_pool_open(dd_rados_pool **out, dd_err *err, dd_rados *r,
		       const char *pool, const char *ns)
{
	dd_rados_pool *p;
	int rc = dd_rados_pool_name_ok(err, pool);

	if (rc)
		return rc;
	if (!ns)
		ns = "";
	if (ns[0] && !dd_rados_name_ok(ns, strlen(ns)))
		return dd_err_set(err, DD_EINVAL, "rados: '%s' is not a store "
				  "name", ns);
	if (strlen(ns) >= DD_RADOS_NAME_MAX)
		return dd_err_set(err, DD_EINVAL, "rados: store name '%s' is "
				  "too long", ns);
	p = dd_calloc(1, sizeof(*p));
	if (!p)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	p->rp_rados = r;
	snprintf(p->rp_pool, sizeof(p->rp_pool), "%s", pool);
	snprintf(p->rp_ns, sizeof(p->rp_ns), "%s", ns);
	rc = dd_librados.rados_ioctx_create(r->ra_cluster, pool, &p->rp_io);
	if (rc < 0) {
		rc = rc == -ENOENT
			? dd_err_set(err, DD_ENOENT, "rados: pool '%s' does "
				     "not exist", pool)
			: dd_rados_fail(err, rc, NULL, "open pool", pool);
		dd_free(p);
		return rc;
	}
	dd_librados.rados_ioctx_set_namespace(p->rp_io, ns);
	pthread_mutex_init(&p->rp_vmutex, NULL);
	*out = p;
	return 0;
}

void dd_rados_pool_close(dd_rados_pool *p)
{
	if (!p)
		return;
	dd_librados.rados_ioctx_destroy(p->rp_io);
	pthread_mutex_destroy(&p->rp_vmutex);
	dd_free(p);
}
