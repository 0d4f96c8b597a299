/*
 * test_rados.c -- the object-store client (libdedup/rados/) against a
 * real one-node Ceph cluster.
 *
 * ctest starts the cluster (tests/ceph/cluster.sh, the `ceph` fixture) and
 * passes CEPH_CONF, DD_CEPH_DIR and DD_CEPH_SCRIPT; the OSD test stops and
 * restarts the OSD through the script.  Without a cluster every test
 * fails, saying so: a build with RADOS never passes without them.
 *
 * Each run works in a pool of its own (ddtest-PID), deleted at the end.
 * The test program is also its own helper: `test_rados --hold-lock POOL
 * NS OID SECONDS` takes a lock, says "held" on stdout and sleeps until it
 * is killed -- a holder that dies without releasing.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "dedup.h"
#include "rados/rados.h"

/* Timeouts of the test connections: short, so that the OSD test's wait
 * is short too; the slack allows for a loaded machine. */
#define T_OP_TIMEOUT 3
#define T_SLACK 4.0

static char t_pool[64];
static dd_rados *t_ra;

static double t_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static dd_rados *t_connect(unsigned op_timeout)
{
	dd_rados_conf conf = {op_timeout, op_timeout, 10};
	dd_err err = {0};
	dd_rados *ra = NULL;
	int rc = dd_rados_connect(&ra, &err, &conf);

	if (rc)
		fail_msg("cannot reach the test cluster (CEPH_CONF=%s): %s",
			 getenv("CEPH_CONF") ? getenv("CEPH_CONF") : "unset",
			 err.de_msg);
	return ra;
}

static dd_rados_pool *t_open(dd_rados *ra, const char *ns)
{
	dd_err err = {0};
	dd_rados_pool *p = NULL;

	if (dd_rados_pool_open(&p, &err, ra, t_pool, ns))
		fail_msg("open pool %s: %s", t_pool, err.de_msg);
	return p;
}

/* msg is exactly the printf of fmt with the test pool's name. */
static void t_assert_msg(const char *msg, const char *fmt)
{
	char want[512];

	snprintf(want, sizeof(want), fmt, t_pool);
	assert_string_equal(msg, want);
}

/* Two clients of the pool's namespace ns: p through the group's
 * connection, q through a second one -- another machine, to the OSD. */
struct t_two {
	dd_rados *other;
	dd_rados_pool *p, *q;
};

static struct t_two t_two_open(const char *ns)
{
	struct t_two t;

	t.other = t_connect(10);
	t.p = t_open(t_ra, ns);
	t.q = t_open(t.other, ns);
	return t;
}

static void t_two_close(struct t_two *t)
{
	dd_rados_pool_close(t->q);
	dd_rados_disconnect(t->other);
	dd_rados_pool_close(t->p);
}

static void t_fill(unsigned char *buf, size_t len, unsigned seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		buf[i] = (unsigned char)x;
	}
}

/* ---- names --------------------------------------------------------------- */

static void test_spec(void **state)
{
	char pool[DD_RADOS_POOL_MAX], name[DD_RADOS_NAME_MAX];
	char longname[200];
	dd_err err = {0};

	(void)state;
	assert_true(dd_rados_is_spec("rados:dd/s1"));
	assert_false(dd_rados_is_spec("/srv/store"));
	assert_false(dd_rados_is_spec(NULL));
	assert_int_equal(dd_rados_parse_spec(&err, "rados:dd/backup-1.a_b",
					     pool, name), 0);
	assert_string_equal(pool, "dd");
	assert_string_equal(name, "backup-1.a_b");
	assert_int_equal(dd_rados_parse_spec(&err, "rados:my pool/x", pool,
					     name), 0);
	assert_string_equal(pool, "my pool");

	static const char *const bad[] = {
		"dd/s1", "rados:", "rados:dd", "rados:/s1", "rados:dd/",
		"rados:dd/a/b", "rados:dd/.hidden", "rados:dd/sp ace",
		"rados:d\td/s1",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		dd_err_clear(&err);
		assert_int_equal(dd_rados_parse_spec(&err, bad[i], pool, name),
				 DD_EINVAL);
		assert_non_null(strstr(err.de_msg, "DD_EINVAL: "));
		assert_null(strchr(err.de_msg, '\n'));
	}
	memset(longname, 'a', sizeof(longname));
	memcpy(longname, "rados:dd/", 9);
	longname[9 + DD_RADOS_NAME_MAX] = 0;   /* one byte too long */
	assert_int_equal(dd_rados_parse_spec(&err, longname, pool, name),
			 DD_EINVAL);
	longname[9 + DD_RADOS_NAME_MAX - 1] = 0;
	assert_int_equal(dd_rados_parse_spec(&err, longname, pool, name), 0);
	assert_int_equal(strlen(name), DD_RADOS_NAME_MAX - 1);
}

/* ---- connecting ---------------------------------------------------------- */

/* A connection with conf has these timeouts in force. */
static void t_timeouts_are(const dd_rados_conf *conf, unsigned osd,
			   unsigned mon, unsigned mount)
{
	dd_rados_conf in_force;
	dd_err err = {0};
	dd_rados *ra;

	assert_int_equal(dd_rados_connect(&ra, &err, conf), 0);
	dd_rados_timeouts(ra, &in_force);
	assert_int_equal(in_force.rc_osd_op_timeout, osd);
	assert_int_equal(in_force.rc_mon_op_timeout, mon);
	assert_int_equal(in_force.rc_mount_timeout, mount);
	dd_rados_disconnect(ra);
}

static void test_timeouts(void **state)
{
	const dd_rados_conf conf = {7, 8, 9};

	(void)state;
	/* the test cluster's conf bounds nothing: ours */
	unsetenv("CEPH_ARGS");
	t_timeouts_are(NULL, DD_RADOS_OSD_OP_TIMEOUT_DEFAULT,
		       DD_RADOS_MON_OP_TIMEOUT_DEFAULT,
		       DD_RADOS_MOUNT_TIMEOUT_DEFAULT);
	/* CEPH_ARGS bounds one: kept; the caller's win over it */
	setenv("CEPH_ARGS", "--rados_osd_op_timeout 12", 1);
	t_timeouts_are(NULL, 12, DD_RADOS_MON_OP_TIMEOUT_DEFAULT,
		       DD_RADOS_MOUNT_TIMEOUT_DEFAULT);
	t_timeouts_are(&conf, 7, 8, 9);
	unsetenv("CEPH_ARGS");
}

static void test_connect_failures(void **state)
{
	const char *conf = getenv("CEPH_CONF");
	char path[] = "/tmp/dd-rados-conf-XXXXXX";
	dd_rados_conf c = {2, 2, 2};
	dd_err err = {0};
	dd_rados *ra = NULL;
	double t0;
	FILE *f;
	int fd;

	(void)state;
	assert_non_null(conf);
	/* no configuration anywhere: said so, at once */
	setenv("CEPH_CONF", "/nonexistent/ceph.conf", 1);
	assert_int_equal(dd_rados_connect(&ra, &err, &c), DD_ENOENT);
	assert_non_null(strstr(err.de_msg, "no monitor address"));
	assert_null(ra);

	/* a monitor nobody runs: fails within the mount timeout */
	fd = mkstemp(path);
	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	assert_non_null(f);
	/* port 9 (discard) on loopback: nothing listens there */
	fprintf(f, "[global]\nmon host = v2:127.0.0.1:9\n"
		"auth client required = none\n");
	fclose(f);
	setenv("CEPH_CONF", path, 1);
	t0 = t_now();
	assert_int_equal(dd_rados_connect(&ra, &err, &c), DD_EIO);
	assert_true(t_now() - t0 < 2.0 + T_SLACK);
	assert_non_null(strstr(err.de_msg, "DD_EIO: rados: connect to "));
	assert_null(strchr(err.de_msg, '\n'));
	unlink(path);
	setenv("CEPH_CONF", conf, 1);
}

/* ---- objects ------------------------------------------------------------- */

static void test_object_io(void **state)
{
	enum { N = 1 << 20 };
	dd_rados_pool *p = t_open(t_ra, "io");
	unsigned char *a = malloc(N), *b = malloc(N);
	dd_err err = {0};
	uint64_t size = 0;
	time_t mtime = 0;
	size_t got = 0;

	(void)state;
	assert_non_null(a);
	assert_non_null(b);
	t_fill(a, N, 1);
	assert_int_equal(dd_rados_write_full(p, &err, "packs/00000001", a, N),
			 0);
	assert_int_equal(dd_rados_stat(p, &err, "packs/00000001", &size,
				       &mtime), 0);
	assert_int_equal(size, N);
	assert_true(mtime > 0);
	assert_int_equal(dd_rados_read(p, &err, "packs/00000001", b, N, 0,
				       &got), 0);
	assert_int_equal(got, N);
	assert_memory_equal(a, b, N);

	/* at an offset: bytes inside, and a short read at the end */
	assert_int_equal(dd_rados_read(p, &err, "packs/00000001", b, 4096,
				       N - 1000, &got), 0);
	assert_int_equal(got, 1000);
	assert_memory_equal(b, a + N - 1000, 1000);
	assert_int_equal(dd_rados_read(p, &err, "packs/00000001", b, 4096,
				       N, &got), 0);
	assert_int_equal(got, 0);

	/* write at an offset overwrites in place; append grows */
	t_fill(a + 100, 5000, 2);
	assert_int_equal(dd_rados_write(p, &err, "packs/00000001", a + 100,
					5000, 100), 0);
	t_fill(b, 3000, 3);
	assert_int_equal(dd_rados_append(p, &err, "packs/00000001", b, 3000),
			 0);
	assert_int_equal(dd_rados_stat(p, &err, "packs/00000001", &size,
				       NULL), 0);
	assert_int_equal(size, N + 3000);
	{
		unsigned char *c = malloc(N + 3000);

		assert_non_null(c);
		assert_int_equal(dd_rados_read(p, &err, "packs/00000001", c,
					       N + 3000, 0, &got), 0);
		assert_int_equal(got, N + 3000);
		assert_memory_equal(c, a, N);
		assert_memory_equal(c + N, b, 3000);
		free(c);
	}

	/* a write_full replaces the whole object */
	assert_int_equal(dd_rados_write_full(p, &err, "packs/00000001", a, 10),
			 0);
	assert_int_equal(dd_rados_stat(p, &err, "packs/00000001", &size,
				       NULL), 0);
	assert_int_equal(size, 10);

	/* remove; then every access says which object is missing */
	assert_int_equal(dd_rados_remove(p, &err, "packs/00000001"), 0);
	assert_int_equal(dd_rados_read(p, &err, "packs/00000001", b, 10, 0,
				       &got), DD_ENOENT);
	t_assert_msg(err.de_msg, "DD_ENOENT: rados: read %s/io/packs/00000001: "
		     "no such object");
	assert_int_equal(dd_rados_stat(p, &err, "packs/00000001", &size,
				       NULL), DD_ENOENT);
	assert_int_equal(dd_rados_remove(p, &err, "packs/00000001"),
			 DD_ENOENT);
	t_assert_msg(err.de_msg, "DD_ENOENT: rados: remove "
		     "%s/io/packs/00000001: no such object");
	assert_int_equal(dd_rados_write(p, &err, "", a, 1, 0), DD_EINVAL);
	assert_int_equal(dd_rados_write_full(p, &err, "big", a,
					     DD_RADOS_IO_MAX + 1), DD_EINVAL);
	free(a);
	free(b);
	dd_rados_pool_close(p);
}

struct t_names {
	char n[16][64];
	int count;
	int stop_at;
};

static int t_collect(void *arg, const char *oid)
{
	struct t_names *t = arg;

	if (t->count < 16)
		snprintf(t->n[t->count], sizeof(t->n[0]), "%s", oid);
	t->count++;
	return t->stop_at && t->count == t->stop_at ? 42 : 0;
}

static bool t_has(const struct t_names *t, const char *name)
{
	for (int i = 0; i < t->count && i < 16; i++)
		if (strcmp(t->n[i], name) == 0)
			return true;
	return false;
}

static void test_list_and_namespaces(void **state)
{
	dd_rados_pool *a = t_open(t_ra, "storea"), *b = t_open(t_ra, "storeb");
	static const char *const names[] = {
		"packs/00000001", "packs/00000002", "manifests/0000000000000001",
		"config",
	};
	struct t_names seen;
	dd_err err = {0};
	size_t got;
	char buf[16];

	(void)state;
	for (size_t i = 0; i < 4; i++)
		assert_int_equal(dd_rados_write_full(a, &err, names[i], "x", 1),
				 0);
	assert_int_equal(dd_rados_write_full(b, &err, "packs/00000009", "y", 1),
			 0);

	memset(&seen, 0, sizeof(seen));
	assert_int_equal(dd_rados_list(a, &err, "", t_collect, &seen), 0);
	assert_int_equal(seen.count, 4);
	for (size_t i = 0; i < 4; i++)
		assert_true(t_has(&seen, names[i]));
	memset(&seen, 0, sizeof(seen));
	assert_int_equal(dd_rados_list(a, &err, "packs/", t_collect, &seen),
			 0);
	assert_int_equal(seen.count, 2);
	assert_true(t_has(&seen, "packs/00000001"));
	assert_true(t_has(&seen, "packs/00000002"));
	/* the callback stops the walk */
	memset(&seen, 0, sizeof(seen));
	seen.stop_at = 2;
	assert_int_equal(dd_rados_list(a, &err, NULL, t_collect, &seen), 42);
	assert_int_equal(seen.count, 2);

	/* store b sees only its own */
	memset(&seen, 0, sizeof(seen));
	assert_int_equal(dd_rados_list(b, &err, "", t_collect, &seen), 0);
	assert_int_equal(seen.count, 1);
	assert_string_equal(seen.n[0], "packs/00000009");
	assert_int_equal(dd_rados_read(b, &err, "config", buf, sizeof(buf), 0,
				       &got), DD_ENOENT);
	t_assert_msg(err.de_msg, "DD_ENOENT: rados: read %s/storeb/config: "
		     "no such object");

	for (size_t i = 0; i < 4; i++)
		assert_int_equal(dd_rados_remove(a, &err, names[i]), 0);
	assert_int_equal(dd_rados_remove(b, &err, "packs/00000009"), 0);
	memset(&seen, 0, sizeof(seen));
	assert_int_equal(dd_rados_list(a, &err, "", t_collect, &seen), 0);
	assert_int_equal(seen.count, 0);
	dd_rados_pool_close(a);
	dd_rados_pool_close(b);
}

static void test_missing_pool(void **state)
{
	dd_rados_pool *p = NULL;
	dd_err err = {0};

	(void)state;
	assert_int_equal(dd_rados_pool_open(&p, &err, t_ra, "no-such-pool", "s"),
			 DD_ENOENT);
	assert_string_equal(err.de_msg,
			    "DD_ENOENT: rados: pool 'no-such-pool' does not exist");
	assert_null(p);
	assert_int_equal(dd_rados_pool_open(&p, &err, t_ra, t_pool, "a/b"),
			 DD_EINVAL);
	assert_int_equal(dd_rados_pool_create(t_ra, &err, t_pool), DD_EEXIST);
}

/* ---- compare-and-swap ---------------------------------------------------- */

static void test_versions(void **state)
{
	struct t_two two = t_two_open("cas");
	dd_rados_pool *p = two.p, *q = two.q;
	uint64_t v1 = 0, v2 = 0, v3 = 0, vr = 0;
	char buf[64];
	size_t len = 0;
	dd_err err = {0};

	(void)state;
	/* create only if missing: the first wins, the second is told */
	assert_int_equal(dd_rados_write_full_if(p, &err, "head", "one", 3, 0,
						&v1), 0);
	assert_true(v1 > 0);
	assert_int_equal(dd_rados_write_full_if(q, &err, "head", "two", 3, 0,
						&v2), DD_EBUSY);
	assert_non_null(strstr(err.de_msg, "changed since version 0"));

	/* both read version v1; the first to write wins, the other is stale */
	assert_int_equal(dd_rados_read_versioned(p, &err, "head", buf,
						 sizeof(buf), &len, &vr), 0);
	assert_int_equal(vr, v1);
	assert_int_equal(len, 3);
	assert_memory_equal(buf, "one", 3);
	assert_int_equal(dd_rados_read_versioned(q, &err, "head", buf,
						 sizeof(buf), &len, &vr), 0);
	assert_int_equal(vr, v1);
	assert_int_equal(dd_rados_write_full_if(p, &err, "head", "three", 5,
						v1, &v2), 0);
	assert_true(v2 > v1);
	assert_int_equal(dd_rados_write_full_if(q, &err, "head", "four", 4, v1,
						&v3), DD_EBUSY);
	assert_true(strstr(err.de_msg, "DD_EBUSY: rados: write ") == err.de_msg);
	assert_non_null(strstr(err.de_msg, "/cas/head: changed since version"));
	/* the stale writer changed nothing */
	assert_int_equal(dd_rados_read_versioned(q, &err, "head", buf,
						 sizeof(buf), &len, &vr), 0);
	assert_int_equal(vr, v2);
	assert_int_equal(len, 5);
	assert_memory_equal(buf, "three", 5);
	/* it reads again and then succeeds */
	assert_int_equal(dd_rados_write_full_if(q, &err, "head", "four", 4, vr,
						&v3), 0);
	assert_true(v3 > v2);

	/* any other write moves the version too */
	assert_int_equal(dd_rados_append(p, &err, "head", "!", 1), 0);
	assert_int_equal(dd_rados_write_full_if(q, &err, "head", "five", 4, v3,
						NULL), DD_EBUSY);

	/* larger than the caller's buffer: refused, not cut */
	assert_int_equal(dd_rados_read_versioned(p, &err, "head", buf, 3, &len,
						 &vr), DD_ECORRUPT);
	/* removed since it was read: stale too */
	assert_int_equal(dd_rados_read_versioned(p, &err, "head", buf,
						 sizeof(buf), &len, &vr), 0);
	assert_int_equal(dd_rados_remove(q, &err, "head"), 0);
	assert_int_equal(dd_rados_write_full_if(p, &err, "head", "six", 3, vr,
						NULL), DD_EBUSY);
	assert_int_equal(dd_rados_read_versioned(p, &err, "head", buf,
						 sizeof(buf), &len, &vr),
			 DD_ENOENT);
	assert_non_null(strstr(err.de_msg, "no such object"));
	t_two_close(&two);
}

/* ---- locks --------------------------------------------------------------- */

/* "held by pid PID on HOST since " */
static void t_assert_held_by(const char *msg, long pid)
{
	char host[256] = "?", want[400];

	gethostname(host, sizeof(host) - 1);
	host[sizeof(host) - 1] = 0;
	snprintf(want, sizeof(want), "held by pid %ld on %s since ", pid,
		 host);
	if (!strstr(msg, want))
		fail_msg("'%s' does not say '%s'", msg, want);
	assert_true(strstr(msg, "DD_EBUSY: rados: lock ") == msg);
	assert_null(strchr(msg, '\n'));
}

static void test_lock_two_clients(void **state)
{
	struct t_two two = t_two_open("lk");
	dd_rados_pool *p = two.p, *q = two.q;
	dd_rados_lock *la = NULL, *lb = NULL, *lc = NULL;
	char holder[400];
	dd_err err = {0};
	double t0;

	(void)state;
	assert_int_equal(dd_rados_lock_holder(p, &err, "commit", holder,
					      sizeof(holder)), 0);
	assert_string_equal(holder, "");
	assert_int_equal(dd_rados_lock_take(&la, &err, p, "commit", 60, 0), 0);
	/* another client is refused, with the holder named */
	assert_int_equal(dd_rados_lock_take(&lb, &err, q, "commit", 60, 0),
			 DD_EBUSY);
	assert_null(lb);
	t_assert_held_by(err.de_msg, (long)getpid());
	assert_int_equal(dd_rados_lock_holder(q, &err, "commit", holder,
					      sizeof(holder)), 0);
	assert_true(strncmp(holder, "pid ", 4) == 0);
	/* and so is a second lock of this same client: cookies differ */
	assert_int_equal(dd_rados_lock_take(&lc, &err, p, "commit", 60, 0),
			 DD_EBUSY);
	/* a bounded wait ends when it says */
	t0 = t_now();
	assert_int_equal(dd_rados_lock_take(&lb, &err, q, "commit", 60, 700),
			 DD_EBUSY);
	assert_true(t_now() - t0 >= 0.7);
	assert_true(t_now() - t0 < 0.7 + T_SLACK);
	/* renewing keeps it */
	assert_int_equal(dd_rados_lock_renew(la, &err), 0);
	assert_int_equal(dd_rados_lock_take(&lb, &err, q, "commit", 60, 0),
			 DD_EBUSY);
	/* released: free for the other */
	assert_int_equal(dd_rados_lock_release(la, &err), 0);
	assert_int_equal(dd_rados_lock_holder(p, &err, "commit", holder,
					      sizeof(holder)), 0);
	assert_string_equal(holder, "");
	assert_int_equal(dd_rados_lock_take(&lb, &err, q, "commit", 60, 0), 0);
	assert_int_equal(dd_rados_lock_take(&la, &err, p, "commit", 60, 0),
			 DD_EBUSY);
	assert_int_equal(dd_rados_lock_release(lb, &err), 0);
	/* bad durations */
	assert_int_equal(dd_rados_lock_take(&la, &err, p, "commit", 0, 0),
			 DD_EINVAL);
	t_two_close(&two);
}

static void test_lock_expires(void **state)
{
	struct t_two two = t_two_open("lk");
	dd_rados_pool *p = two.p, *q = two.q;
	dd_rados_lock *la = NULL, *lb = NULL;
	dd_err err = {0};
	double t0, waited;

	(void)state;
	/* renewed every second, a 2 s lock outlives its duration */
	assert_int_equal(dd_rados_lock_take(&la, &err, p, "exp", 2, 0), 0);
	t0 = t_now();
	for (int i = 0; i < 4; i++) {
		sleep(1);
		assert_int_equal(dd_rados_lock_renew(la, &err), 0);
		assert_int_equal(dd_rados_lock_take(&lb, &err, q, "exp", 2, 0),
				 DD_EBUSY);
	}
	assert_true(t_now() - t0 > 3.5);
	/* not renewed, it expires: the other gets it within the duration */
	t0 = t_now();
	assert_int_equal(dd_rados_lock_take(&lb, &err, q, "exp", 30, 10000), 0);
	waited = t_now() - t0;
	assert_true(waited >= 1.0);
	assert_true(waited < 2.0 + T_SLACK);
	/* and the first, renewing late, learns it lost it */
	assert_int_equal(dd_rados_lock_renew(la, &err), DD_EBUSY);
	assert_non_null(strstr(err.de_msg, "lock lost"));
	assert_int_equal(dd_rados_lock_release(la, &err), 0);
	assert_int_equal(dd_rados_lock_release(lb, &err), 0);
	t_two_close(&two);
}

static void test_lock_kept(void **state)
{
	struct t_two two = t_two_open("lk");
	dd_rados_pool *p = two.p, *q = two.q;
	dd_rados_lock *la = NULL, *lb = NULL;
	dd_err err = {0};

	(void)state;
	/* a 2 s lock kept by its thread for 5 s, never once free */
	assert_int_equal(dd_rados_lock_take(&la, &err, p, "kept", 2, 0), 0);
	assert_int_equal(dd_rados_lock_check(la, &err), 0);
	assert_int_equal(dd_rados_lock_keep(la, &err), 0);
	assert_int_equal(dd_rados_lock_keep(la, &err), DD_EINVAL);
	for (int i = 0; i < 5; i++) {
		sleep(1);
		assert_int_equal(dd_rados_lock_take(&lb, &err, q, "kept", 2, 0),
				 DD_EBUSY);
		assert_int_equal(dd_rados_lock_check(la, &err), 0);
	}
	/* release stops the keeper and frees the lock at once */
	assert_int_equal(dd_rados_lock_release(la, &err), 0);
	assert_int_equal(dd_rados_lock_take(&lb, &err, q, "kept", 2, 0), 0);
	assert_int_equal(dd_rados_lock_release(lb, &err), 0);
	t_two_close(&two);
}

/* The helper: takes the lock and sleeps until killed. */
static int t_hold_lock(char **argv)
{
	dd_rados_lock *l;
	dd_rados_pool *p;
	dd_rados *ra;
	dd_err err = {0};

	if (dd_rados_connect(&ra, &err, NULL) ||
	    dd_rados_pool_open(&p, &err, ra, argv[2], argv[3]) ||
	    dd_rados_lock_take(&l, &err, p, argv[4], (unsigned)atoi(argv[5]),
			       0)) {
		fprintf(stderr, "hold-lock: %s\n", err.de_msg);
		return 1;
	}
	printf("held\n");
	fflush(stdout);
	for (;;)
		pause();
}

static void test_lock_dead_holder(void **state)
{
	dd_rados_pool *p = t_open(t_ra, "lk");
	dd_rados_lock *l = NULL;
	char line[16] = "";
	int fds[2], status;
	dd_err err = {0};
	double t_taken, waited;
	pid_t pid;
	FILE *f;

	(void)state;
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* exec at once: librados's threads are not in a forked child */
		dup2(fds[1], 1);
		close(fds[0]);
		execl("/proc/self/exe", "test_rados", "--hold-lock", t_pool, "lk",
		      "dead", "3", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	f = fdopen(fds[0], "r");
	assert_non_null(f);
	assert_non_null(fgets(line, sizeof(line), f));
	t_taken = t_now();
	fclose(f);
	assert_string_equal(line, "held\n");
	assert_int_equal(dd_rados_lock_take(&l, &err, p, "dead", 30, 0),
			 DD_EBUSY);
	t_assert_held_by(err.de_msg, (long)pid);
	/* the holder dies without a word */
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_int_equal(dd_rados_lock_take(&l, &err, p, "dead", 30, 0),
			 DD_EBUSY);
	/* and its lock is free once its 3 s are over */
	assert_int_equal(dd_rados_lock_take(&l, &err, p, "dead", 30, 15000), 0);
	waited = t_now() - t_taken;
	assert_true(waited >= 2.5);
	assert_true(waited < 3.0 + T_SLACK);
	assert_int_equal(dd_rados_lock_release(l, &err), 0);
	dd_rados_pool_close(p);
}

/* ---- a stopped OSD ------------------------------------------------------- */

static int t_cluster(const char *what)
{
	const char *script = getenv("DD_CEPH_SCRIPT");
	const char *dir = getenv("DD_CEPH_DIR");
	char cmd[4096];

	if (!script || !dir)
		fail_msg("DD_CEPH_SCRIPT and DD_CEPH_DIR are not set: run "
			 "through ctest (ctest -R unit.test_rados)");
	snprintf(cmd, sizeof(cmd), "bash '%s' %s '%s'", script, what, dir);
	return system(cmd);
}

static bool t_osd_stopped;

static int t_osd_restart(void **state)
{
	(void)state;
	if (t_osd_stopped && t_cluster("osd-start") == 0)
		t_osd_stopped = false;
	return t_osd_stopped ? -1 : 0;
}

static void test_osd_down(void **state)
{
	dd_rados *ra = t_connect(T_OP_TIMEOUT);
	dd_rados_pool *p = t_open(ra, "down");
	dd_rados_lock *kept = NULL;
	char buf[64];
	dd_err err = {0};
	double t0, took;
	size_t got;
	int rc;

	(void)state;
	assert_int_equal(dd_rados_write_full(p, &err, "before", "kept", 4), 0);
	/* a kept 2 s lock: its renewals cannot reach the OSD either */
	assert_int_equal(dd_rados_lock_take(&kept, &err, p, "kept", 2, 0), 0);
	assert_int_equal(dd_rados_lock_keep(kept, &err), 0);
	t_osd_stopped = true;
	assert_int_equal(t_cluster("osd-stop"), 0);

	/* every kind of operation fails within the bound, saying why */
	t0 = t_now();
	rc = dd_rados_write_full(p, &err, "packs/00000001", "x", 1);
	took = t_now() - t0;
	print_message("write with the OSD stopped: %.2f s (bound %u s): "
		      "%s\n", took, T_OP_TIMEOUT, err.de_msg);
	assert_int_equal(rc, DD_EIO);
	t_assert_msg(err.de_msg, "DD_EIO: rados: write %s/down/packs/00000001: "
		     "Connection timed out");
	assert_true(took >= T_OP_TIMEOUT - 0.5);
	assert_true(took < T_OP_TIMEOUT + T_SLACK);
	t0 = t_now();
	assert_int_equal(dd_rados_read(p, &err, "before", buf, sizeof(buf), 0,
				       &got), DD_EIO);
	took = t_now() - t0;
	assert_true(took < T_OP_TIMEOUT + T_SLACK);
	assert_non_null(strstr(err.de_msg, "timed out"));
	t0 = t_now();
	{
		dd_rados_lock *l = NULL;

		assert_int_equal(dd_rados_lock_take(&l, &err, p, "lock", 30, 0),
				 DD_EIO);
		assert_true(t_now() - t0 < T_OP_TIMEOUT + T_SLACK);
		assert_non_null(strstr(err.de_msg, "timed out"));
	}

	/* more than 2 s without a renewal: the keeper says the lock is lost */
	assert_int_equal(dd_rados_lock_check(kept, &err), DD_EBUSY);
	assert_non_null(strstr(err.de_msg, "lock lost"));

	/* the OSD back: everything works again, nothing lost */
	assert_int_equal(t_cluster("osd-start"), 0);
	t_osd_stopped = false;
	assert_int_equal(dd_rados_read(p, &err, "before", buf, sizeof(buf), 0,
				       &got), 0);
	assert_int_equal(got, 4);
	assert_memory_equal(buf, "kept", 4);
	assert_int_equal(dd_rados_write_full(p, &err, "after", "new", 3), 0);
	assert_int_equal(dd_rados_remove(p, &err, "after"), 0);
	assert_int_equal(dd_rados_remove(p, &err, "before"), 0);
	/* lost stays lost; releasing it is no error */
	assert_int_equal(dd_rados_lock_check(kept, &err), DD_EBUSY);
	assert_int_equal(dd_rados_lock_release(kept, &err), 0);
	dd_rados_pool_close(p);
	dd_rados_disconnect(ra);
}

static int t_group_setup(void **state)
{
	dd_err err = {0};
	int rc;

	(void)state;
	snprintf(t_pool, sizeof(t_pool), "ddtest-%ld", (long)getpid());
	t_ra = NULL;
	if (dd_rados_connect(&t_ra, &err, &(dd_rados_conf){10, 10, 20})) {
		fprintf(stderr, "test_rados: no test cluster (CEPH_CONF=%s): "
			"%s\n", getenv("CEPH_CONF") ? getenv("CEPH_CONF")
			: "unset", err.de_msg);
		return -1;
	}
	rc = dd_rados_pool_create(t_ra, &err, t_pool);
	if (rc) {
		fprintf(stderr, "test_rados: %s\n", err.de_msg);
		return -1;
	}
	return 0;
}

static int t_group_teardown(void **state)
{
	dd_err err = {0};
	int rc = 0;

	(void)state;
	if (t_ra && dd_rados_pool_delete(t_ra, &err, t_pool)) {
		fprintf(stderr, "test_rados: %s\n", err.de_msg);
		rc = -1;
	}
	dd_rados_disconnect(t_ra);
	return rc;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spec),
		cmocka_unit_test(test_timeouts),
		cmocka_unit_test(test_connect_failures),
		cmocka_unit_test(test_object_io),
		cmocka_unit_test(test_list_and_namespaces),
		cmocka_unit_test(test_missing_pool),
		cmocka_unit_test(test_versions),
		cmocka_unit_test(test_lock_two_clients),
		cmocka_unit_test(test_lock_expires),
		cmocka_unit_test(test_lock_kept),
		cmocka_unit_test(test_lock_dead_holder),
		cmocka_unit_test_teardown(test_osd_down, t_osd_restart),
	};

	if (argc == 6 && strcmp(argv[1], "--hold-lock") == 0)
		return t_hold_lock(argv);
	return cmocka_run_group_tests(tests, t_group_setup, t_group_teardown);
}
