/*
 * rstore.c -- a store in a RADOS pool: the local catalog directory, the
 * store-wide lock and the change count (rstore.h).
 *
 * Objects of the store's namespace besides packs/ and manifests/:
 *
 *   DEDUP   the text of a local store's DEDUP file (format/store.md §1),
 *           written once by an exclusive create: of two inits one wins
 *   gen     "SEQ CATALOG\n" (rstore.h), replaced by compare-and-swap only
 *   lock    the store-wide lock (no data)
 *
 * The local catalog directory holds, besides a local store's db/, lock and
 * writers/: rados.id (this catalog's random id, 32 hex digits) and
 * rados.gen (the SEQ it is consistent with).  Its packs/ and manifests/
 * directories stay empty: the vdirs of the pool take their place.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/io.h"
#include "store/rstore.h"
#include "store/store_internal.h"

#ifdef DD_HAVE_RADOS
#include "rados/rados.h"
#endif

bool dd_rstore_is_spec(const char *path)
{
	return path && !strncmp(path, "rados:", 6);
}

#ifndef DD_HAVE_RADOS

int dd_rstore_open(dd_rstore **out, dd_err *err, const char *spec,
		   const struct dd_store_conf *create, bool catch_up)
{
	(void)out;
	(void)create;
	(void)catch_up;
	return dd_err_set(err, DD_ENOTSUP, "%s: this libdedup was built "
			  "without RADOS (cmake -DDD_RADOS=ON)", spec);
}

void dd_rstore_close(dd_rstore *rs)
{
	(void)rs;
}

int dd_rstore_publish(dd_rstore *rs, dd_err *err)
{
	(void)rs;
	return dd_err_set(err, DD_ENOTSUP, "built without RADOS");
}

int dd_rstore_repair(dd_err *err, const char *spec,
		     const dd_repair_opts *opts, dd_repair_result *out)
{
	(void)opts;
	(void)out;
	return dd_err_set(err, DD_ENOTSUP, "%s: this libdedup was built "
			  "without RADOS (cmake -DDD_RADOS=ON)", spec);
}

const char *dd_rstore_local(const dd_rstore *rs)
{
	(void)rs;
	return "";
}

const char *dd_rstore_spec(const dd_rstore *rs)
{
	(void)rs;
	return "";
}

int dd_rstore_vdirs(dd_rstore *rs, dd_err *err, dd_vdir **packs,
		    dd_vdir **manifests)
{
	(void)rs;
	(void)packs;
	(void)manifests;
	return dd_err_set(err, DD_ENOTSUP, "built without RADOS");
}

int dd_rstore_enter(dd_rstore *rs, dd_err *err, unsigned wait_ms)
{
	(void)rs;
	(void)wait_ms;
	return dd_err_set(err, DD_ENOTSUP, "built without RADOS");
}

int dd_rstore_check(dd_rstore *rs, dd_err *err)
{
	(void)rs;
	(void)err;
	return 0;
}

void dd_rstore_leave(dd_rstore *rs)
{
	(void)rs;
}

#else

#define DD_RSTORE_GEN_MAX 128
#define DD_RSTORE_CONF_MAX 1024

struct dd_rstore {
	char *rs_spec;
	char *rs_local;                 /* the local catalog directory */
	char rs_id[33];                 /* this catalog's id, hex */
	dd_rados *rs_rados;
	dd_rados_pool *rs_pool;
	pthread_mutex_t rs_mu;          /* the session below */
	unsigned rs_entered;
	dd_rados_lock *rs_lock;
	uint64_t rs_base;               /* the even SEQ the session started at */
};

const char *dd_rstore_local(const dd_rstore *rs)
{
	return rs->rs_local;
}

const char *dd_rstore_spec(const dd_rstore *rs)
{
	return rs->rs_spec;
}

int dd_rstore_vdirs(dd_rstore *rs, dd_err *err, dd_vdir **packs,
		    dd_vdir **manifests)
{
	int rc = dd_rados_vdir_open(packs, err, rs->rs_pool, "packs");

	if (!rc) {
		rc = dd_rados_vdir_open(manifests, err, rs->rs_pool,
					"manifests");
		if (rc) {
			dd_vdir_close(*packs);
			*packs = NULL;
		}
	}
	return rc;
}

/* ---- small local files ---------------------------------------------------------*/

static int rs_file_read(const char *dir, const char *name, char *buf,
			size_t len)
{
	char p[4096];
	dd_err e = {0};
	size_t got = 0;
	int fd, rc;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	fd = dd_io_open(&e, p, O_RDONLY, 0);
	if (fd < 0)
		return fd;
	rc = dd_io_read(&e, fd, buf, len - 1, &got, p);
	dd_io_close(fd);
	buf[rc ? 0 : got] = 0;
	return rc;
}

static int rs_file_write(dd_err *err, const char *dir, const char *name,
			 const char *text)
{
	return dd_io_replace_file(err, dir, name, text, strlen(text));
}

/* The SEQ the local catalog is consistent with; false when unknown. */
static bool rs_local_seq(const dd_rstore *rs, uint64_t *seq)
{
	char buf[32], *end;

	if (rs_file_read(rs->rs_local, "rados.gen", buf, sizeof(buf)))
		return false;
	errno = 0;
	*seq = strtoull(buf, &end, 10);
	return !errno && end != buf && (*end == '\n' || !*end);
}

static int rs_local_seq_set(dd_rstore *rs, dd_err *err, uint64_t seq)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%" PRIu64 "\n", seq);
	return rs_file_write(err, rs->rs_local, "rados.gen", buf);
}

/* ---- gen ---------------------------------------------------------------------------*/

typedef struct rs_gen {
	uint64_t g_seq;
	char g_by[33];
	uint64_t g_version;     /* the object's, 0: no object */
} rs_gen;

static int rs_gen_read(dd_rstore *rs, dd_err *err, rs_gen *g)
{
	char buf[DD_RSTORE_GEN_MAX];
	size_t len = 0;
	int rc = dd_rados_read_versioned(rs->rs_pool, err, "gen", buf,
					 sizeof(buf) - 1, &len, &g->g_version);

	memset(g->g_by, 0, sizeof(g->g_by));
	if (rc)
		return rc;
	buf[len] = 0;
	if (sscanf(buf, "%" SCNu64 " %32s", &g->g_seq, g->g_by) != 2)
		return dd_err_set(err, DD_ECORRUPT, "%s: the object gen is "
				  "damaged", rs->rs_spec);
	return 0;
}

static int rs_gen_write(dd_rstore *rs, dd_err *err, uint64_t seq,
			uint64_t expect)
{
	char buf[DD_RSTORE_GEN_MAX];
	int n = snprintf(buf, sizeof(buf), "%" PRIu64 " %s\n", seq, rs->rs_id);

	return dd_rados_write_full_if(rs->rs_pool, err, "gen", buf, (size_t)n,
				      expect, NULL);
}

/* Is the local catalog, at local SEQ have, current under g? */
static bool rs_current(const dd_rstore *rs, const rs_gen *g, uint64_t have)
{
	return g->g_seq == have ||
	       (g->g_seq == have + 1 && !strcmp(g->g_by, rs->rs_id));
}

/* ---- the local catalog directory ------------------------------------------------*/

/* $DEDUP_CACHE_DIR, else ${XDG_CACHE_HOME:-~/.cache}/libdedup. */
static int rs_cache_root(dd_err *err, char *buf, size_t len)
{
	const char *v = getenv("DEDUP_CACHE_DIR");
	const char *home;
	struct passwd *pw;

	if (v && *v) {
		snprintf(buf, len, "%s", v);
		return 0;
	}
	v = getenv("XDG_CACHE_HOME");
	if (v && *v) {
		snprintf(buf, len, "%s/libdedup", v);
		return 0;
	}
	home = getenv("HOME");
	if ((!home || !*home) && (pw = getpwuid(getuid())) != NULL)
		home = pw->pw_dir;
	if (!home || !*home)
		return dd_err_set(err, DD_EINVAL, "no place for the local "
				  "catalog: set DEDUP_CACHE_DIR");
	snprintf(buf, len, "%s/.cache/libdedup", home);
	return 0;
}

static int rs_mkdirs(dd_err *err, const char *path)
{
	char p[4096];

	snprintf(p, sizeof(p), "%s", path);
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = 0;
		if (mkdir(p, 0755) != 0 && errno != EEXIST)
			return dd_err_set_errno(err, errno, "mkdir %s", p);
		*s = '/';
	}
	if (mkdir(p, 0755) != 0 && errno != EEXIST)
		return dd_err_set_errno(err, errno, "mkdir %s", p);
	return 0;
}

static void rs_hex(char *out, const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

/* The directory and this catalog's id; with `conf`, its DEDUP file as
 * the pool's. */
static int rs_local_dir(dd_rstore *rs, dd_err *err,
			const struct dd_store_conf *conf, bool write_conf)
{
	static const char *const dirs[] = {"packs", "manifests"};
	char root[3000], uuid[33], p[4096];
	uint8_t id[16];
	int rc = rs_cache_root(err, root, sizeof(root));

	if (rc)
		return rc;
	if (strlen(root) >= sizeof(root) - 1)
		return dd_err_set(err, DD_EINVAL, "the local catalog's "
				  "directory name is too long: %.60s...", root);
	rs_hex(uuid, conf->sc_uuid, 16);
	snprintf(p, sizeof(p), "%s/%s", root, uuid);
	rs->rs_local = dd_strdup(p);
	if (!rs->rs_local)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	rc = rs_mkdirs(err, rs->rs_local);
	for (size_t i = 0; !rc && write_conf && i < 2; i++) {
		snprintf(p, sizeof(p), "%s/%s", rs->rs_local, dirs[i]);
		if (mkdir(p, 0755) != 0 && errno != EEXIST)
			rc = dd_err_set_errno(err, errno, "mkdir %s", p);
	}
	if (rc)
		return rc;
	if (rs_file_read(rs->rs_local, "rados.id", rs->rs_id,
			 sizeof(rs->rs_id)) || strlen(rs->rs_id) != 32) {
		if (getrandom(id, sizeof(id), 0) != (ssize_t)sizeof(id))
			return dd_err_set_errno(err, errno, "getrandom");
		rs_hex(rs->rs_id, id, sizeof(id));
		/* a catalog of another id's making is not what rados.gen
		 * says: it is rebuilt */
		snprintf(p, sizeof(p), "%s/rados.gen", rs->rs_local);
		unlink(p);
		rc = rs_file_write(err, rs->rs_local, "rados.id", rs->rs_id);
	}
	return rc || !write_conf ? rc
				 : dd_store_conf_write(err, rs->rs_local, conf);
}

/* ---- open ----------------------------------------------------------------------------*/

static int rs_connect(dd_rstore *rs, dd_err *err, const char *spec)
{
	char pool[DD_RADOS_POOL_MAX], name[DD_RADOS_NAME_MAX];
	int rc = dd_rados_parse_spec(err, spec, pool, name);

	if (!rc)
		rc = dd_rados_connect(&rs->rs_rados, err, NULL);
	if (!rc)
		dd_rados_fail_fast(rs->rs_rados, true);
	if (!rc)
		rc = dd_rados_pool_open(&rs->rs_pool, err, rs->rs_rados, pool,
					name);
	return rc;
}

/* init, before the local store is made: nothing is there yet. */
static int rs_create_check(dd_rstore *rs, dd_err *err)
{
	int rc = dd_rados_stat(rs->rs_pool, err, "DEDUP", NULL, NULL);

	if (!rc)
		return dd_err_set(err, DD_EEXIST, "%s: a store exists there",
				  rs->rs_spec);
	return rc == DD_ENOENT ? 0 : rc;
}

/* init, once the local store is made: DEDUP by exclusive create -- the
 * store exists from then on -- then gen.  A gen already there (a store
 * removed object by object and made again) is moved on, so that catalogs
 * of the old one are rebuilt. */
int dd_rstore_publish(dd_rstore *rs, dd_err *err)
{
	char text[DD_RSTORE_CONF_MAX];
	uint64_t seq = 0;
	rs_gen g;
	int rc = rs_file_read(rs->rs_local, "DEDUP", text, sizeof(text));

	if (rc)
		return dd_err_set(err, rc, "%s/DEDUP: cannot read it back",
				  rs->rs_local);
	rc = dd_rados_write_full_if(rs->rs_pool, err, "DEDUP", text,
				    strlen(text), 0, NULL);
	if (rc == DD_EBUSY)
		return dd_err_set(err, DD_EEXIST, "%s: a store exists there",
				  rs->rs_spec);
	if (!rc)
		rc = rs_gen_read(rs, err, &g);
	if (rc == DD_ENOENT) {
		g.g_version = 0;
		rc = 0;
	} else if (!rc) {
		seq = (g.g_seq | 1) + 1;
	}
	if (!rc)
		rc = rs_gen_write(rs, err, seq, g.g_version);
	return rc ? rc : rs_local_seq_set(rs, err, seq);
}

static int rs_read_conf(dd_rstore *rs, dd_err *err, struct dd_store_conf *c)
{
	char text[DD_RSTORE_CONF_MAX];
	uint64_t version;
	size_t len = 0;
	int rc = dd_rados_read_versioned(rs->rs_pool, err, "DEDUP", text,
					 sizeof(text) - 1, &len, &version);

	if (rc == DD_ENOENT)
		return dd_err_set(err, DD_ENOENT, "%s: no such store (no "
				  "DEDUP object)", rs->rs_spec);
	if (rc)
		return rc;
	text[len] = 0;
	rc = dd_store_conf_parse(err, rs->rs_spec, text, c);
	if (!rc && c->sc_format < 2)
		rc = dd_err_set(err, DD_ECORRUPT, "%s: the DEDUP object is "
				"damaged", rs->rs_spec);
	return rc;
}

/* The catalog rebuilt from the pool; the SEQ read before the rebuild is
 * the one recorded, so a change made during it is caught up at the next
 * open. */
static int rs_rebuild(dd_rstore *rs, dd_err *err, const rs_gen *g,
		      const dd_repair_opts *opts, dd_repair_result *out)
{
	dd_vdir *packs = NULL, *mfs = NULL;
	int rc = dd_rstore_vdirs(rs, err, &packs, &mfs);

	if (!rc)
		rc = dd_repair_catalog(err, rs->rs_local, packs, mfs, opts,
				       out);
	if (!rc)
		rc = rs_local_seq_set(rs, err, g->g_seq);
	dd_vdir_close(packs);
	dd_vdir_close(mfs);
	return rc;
}

/* Rebuilt when another machine changed the store since the catalog last
 * followed it. */
static int rs_catch_up(dd_rstore *rs, dd_err *err)
{
	uint64_t have;
	char db[4096];
	struct stat st;
	rs_gen g;
	int rc = rs_gen_read(rs, err, &g);

	if (rc)
		return rc;
	snprintf(db, sizeof(db), "%s/db/data.mdb", rs->rs_local);
	if (rs_local_seq(rs, &have) && rs_current(rs, &g, have) &&
	    stat(db, &st) == 0)
		return 0;
	return rs_rebuild(rs, err, &g, NULL, NULL);
}

int dd_rstore_open(dd_rstore **out, dd_err *err, const char *spec,
		   const struct dd_store_conf *create, bool catch_up)
{
	dd_rstore *rs = dd_calloc(1, sizeof(*rs));
	dd_store_conf conf;
	int rc;

	if (!rs)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	pthread_mutex_init(&rs->rs_mu, NULL);
	rs->rs_spec = dd_strdup(spec);
	rc = rs->rs_spec ? rs_connect(rs, err, spec)
			 : dd_err_set(err, DD_ENOMEM, "out of memory");
	if (!rc && create) {
		rc = rs_create_check(rs, err);
		if (!rc)
			rc = rs_local_dir(rs, err, create, false);
	} else if (!rc) {
		rc = rs_read_conf(rs, err, &conf);
		if (!rc)
			rc = rs_local_dir(rs, err, &conf, true);
		if (!rc && catch_up)
			rc = rs_catch_up(rs, err);
	}
	if (rc) {
		dd_rstore_close(rs);
		return rc;
	}
	*out = rs;
	return 0;
}

void dd_rstore_close(dd_rstore *rs)
{
	if (!rs)
		return;
	if (rs->rs_lock)
		dd_rados_lock_release(rs->rs_lock, &(dd_err){0});
	dd_rados_pool_close(rs->rs_pool);
	dd_rados_disconnect(rs->rs_rados);
	pthread_mutex_destroy(&rs->rs_mu);
	dd_free(rs->rs_local);
	dd_free(rs->rs_spec);
	dd_free(rs);
}

int dd_rstore_repair(dd_err *err, const char *spec,
		     const dd_repair_opts *opts, dd_repair_result *out)
{
	dd_rstore *rs;
	rs_gen g;
	/* no catch-up first: the rebuild below is one, with opts */
	int rc = dd_rstore_open(&rs, err, spec, NULL, false);

	if (rc)
		return rc;
	rc = rs_gen_read(rs, err, &g);
	if (!rc)
		rc = rs_rebuild(rs, err, &g, opts, out);
	dd_rstore_close(rs);
	return rc;
}

/* ---- change sessions ----------------------------------------------------------------*/

static int rs_session_start(dd_rstore *rs, dd_err *err, unsigned wait_ms)
{
	uint64_t have = 0;
	rs_gen g;
	int rc = dd_rados_lock_take(&rs->rs_lock, err, rs->rs_pool, "lock",
				    DD_RSTORE_LOCK_S, wait_ms);

	if (rc)
		return rc;
	rc = dd_rados_lock_keep(rs->rs_lock, err);
	if (!rc)
		rc = rs_gen_read(rs, err, &g);
	if (!rc && (!rs_local_seq(rs, &have) || !rs_current(rs, &g, have)))
		rc = dd_err_set(err, DD_EBUSY, "%s: changed by another "
				"machine since this handle opened it: open it "
				"again", rs->rs_spec);
	/* even: mark the session; odd and ours: our own, cut short */
	if (!rc && g.g_seq == have)
		rc = rs_gen_write(rs, err, have + 1, g.g_version);
	if (!rc) {
		rs->rs_base = have;
		return 0;
	}
	dd_rados_lock_release(rs->rs_lock, &(dd_err){0});
	rs->rs_lock = NULL;
	return rc;
}

int dd_rstore_enter(dd_rstore *rs, dd_err *err, unsigned wait_ms)
{
	int rc = 0;

	pthread_mutex_lock(&rs->rs_mu);
	if (rs->rs_entered == 0)
		rc = rs_session_start(rs, err, wait_ms);
	if (!rc)
		rs->rs_entered++;
	pthread_mutex_unlock(&rs->rs_mu);
	return rc;
}

int dd_rstore_check(dd_rstore *rs, dd_err *err)
{
	int rc = 0;

	pthread_mutex_lock(&rs->rs_mu);
	if (rs->rs_lock)
		rc = dd_rados_lock_check(rs->rs_lock, err);
	pthread_mutex_unlock(&rs->rs_mu);
	return rc;
}

/* The session's end: gen to base + 2 and the catalog's rados.gen with it.
 * If either fails, the catalog is rebuilt at the next open: nothing is
 * lost, a rebuild only costs time. */
void dd_rstore_leave(dd_rstore *rs)
{
	dd_err e = {0};
	rs_gen g;

	pthread_mutex_lock(&rs->rs_mu);
	if (rs->rs_entered && --rs->rs_entered == 0) {
		if (!dd_rados_lock_check(rs->rs_lock, &e) &&
		    !rs_gen_read(rs, &e, &g) && g.g_seq == rs->rs_base + 1 &&
		    !strcmp(g.g_by, rs->rs_id) &&
		    !rs_gen_write(rs, &e, rs->rs_base + 2, g.g_version))
			(void)rs_local_seq_set(rs, &e, rs->rs_base + 2);
		dd_rados_lock_release(rs->rs_lock, &e);
		rs->rs_lock = NULL;
	}
	pthread_mutex_unlock(&rs->rs_mu);
}

#endif
