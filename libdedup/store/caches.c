/*
 * caches.c -- a store's caches: what dd_store_open and dd_store_close do
 * about them, and the public dd_cache_* functions on a dd_store.
 *
 * The glue between store/ and cache/ (cache/cache.h), on the store's side
 * so that cache/ knows nothing of a store: this file reads STORE/cache.conf
 * and the store's identity (meta "store.uuid0" / "store.uuid1", written
 * by the first dd_cache_add), merges the tunables (dd_open_opts over
 * cache.conf over the defaults) and changes the configuration under
 * STORE/conf.lock, so two processes adding devices never lose one.
 */
#include <string.h>
#include <sys/random.h>

#include "common/alloc.h"
#include "common/endian.h"
#include "store/store_internal.h"

/* ---- the store's identity -------------------------------------------------*/

/* Reads the store id; *have is false when the store has none yet. */
static int dd_store_id_get(dd_store *s, dd_err *err, uint8_t id[16],
			   bool *have)
{
	uint64_t v[2];
	dd_txn *txn;
	int rc = dd_txn_begin(s->st_db, err, false, &txn);

	if (rc)
		return rc;
	rc = dd_meta_get_u64(txn, err, "store.uuid0", &v[0]);
	if (!rc)
		rc = dd_meta_get_u64(txn, err, "store.uuid1", &v[1]);
	dd_txn_abort(txn);
	*have = rc == 0;
	memset(id, 0, 16);
	if (rc == DD_ENOENT)
		return 0;
	if (!rc) {
		dd_put_le64(id, v[0]);
		dd_put_le64(id + 8, v[1]);
	}
	return rc;
}

/* Gives the store a random id if it has none.  Writer lock held. */
static int dd_store_id_ensure(dd_store *s, dd_err *err, uint8_t id[16])
{
	dd_txn *txn;
	bool have;
	int rc = dd_store_id_get(s, err, id, &have);

	if (rc || have)
		return rc;
	if (getrandom(id, 16, 0) != 16)
		return dd_err_set(err, DD_EIO, "getrandom failed");
	rc = dd_txn_begin(s->st_db, err, true, &txn);
	if (rc)
		return rc;
	rc = dd_meta_put_u64(txn, err, "store.uuid0", dd_get_le64(id));
	if (!rc)
		rc = dd_meta_put_u64(txn, err, "store.uuid1", dd_get_le64(id + 8));
	if (rc) {
		dd_txn_abort(txn);
		return rc;
	}
	return dd_txn_commit(txn, err);
}

/* ---- open and close (store.c) ------------------------------------------------*/

static void dd_store_cache_warn(void *ctx, const dd_err *err)
{
	dd_store_fail(ctx, err);
}

/* The tunables in effect: the handle's options over the store's. */
static void dd_cache_tunables(const dd_store *s, const dd_cache_conf *conf,
			      dd_cache_params *p)
{
	const dd_open_opts *o = &s->st_opts;
	uint64_t l1 = o->l1_size ? o->l1_size : conf->cf_l1_size;
	int seq = o->l2_feed_sequential ? o->l2_feed_sequential
					: conf->cf_feed_seq;

	if (!l1)
		l1 = DD_CACHE_L1_DEFAULT;
	p->cp_l1_size = l1 == DD_CACHE_OFF ? 0 : l1;
	p->cp_l2_write_max = o->l2_write_max ? o->l2_write_max
					     : conf->cf_l2_write_max;
	if (!p->cp_l2_write_max)
		p->cp_l2_write_max = DD_CACHE_L2_WRITE_MAX_DEFAULT;
	p->cp_feed_seq = seq > 0;
	p->cp_no_l2 = o->no_cache != 0;
}

int dd_store_cache_open(dd_store *s, dd_err *err)
{
	dd_cache_params p = {0};
	dd_cache_conf conf;
	const char **paths = NULL;
	uint64_t *sizes = NULL;
	bool have_id;
	dd_err e;
	int rc;

	if (dd_cache_conf_read(&e, s->st_path, &conf) != 0) {
		/* A configuration we cannot read costs the cache, not the
		 * store: say so and go on without L2. */
		dd_store_fail(s, &e);
		memset(&conf, 0, sizeof(conf));
	}
	if (dd_store_id_get(s, &e, p.cp_store_id, &have_id) != 0)
		dd_store_fail(s, &e);
	dd_cache_tunables(s, &conf, &p);
	p.cp_block_size = s->st_block_size;
	p.cp_block_max = s->st_block_max;
	p.cp_warn = dd_store_cache_warn;
	p.cp_warn_ctx = s;
	if (s->st_hash_kind != DD_HASH_SHA256) {
		/* A test hash is no identity: nothing may be cached by it. */
		p.cp_l1_size = 0;
		conf.cf_ndevs = 0;
	}
	if (conf.cf_ndevs) {
		paths = dd_calloc(conf.cf_ndevs, sizeof(*paths));
		sizes = dd_calloc(conf.cf_ndevs, sizeof(*sizes));
		for (size_t i = 0; paths && sizes && i < conf.cf_ndevs; i++) {
			paths[i] = conf.cf_devs[i].cd_path;
			sizes[i] = conf.cf_devs[i].cd_size;
		}
		p.cp_npaths = paths && sizes ? conf.cf_ndevs : 0;
	}
	p.cp_paths = paths;
	p.cp_sizes = sizes;
	rc = dd_cache_new(&s->st_cache, err, &p);
	dd_free(paths);
	dd_free(sizes);
	dd_cache_conf_fini(&conf);
	return rc;
}

void dd_store_cache_close(dd_store *s)
{
	dd_cache_free(s->st_cache);
	s->st_cache = NULL;
}

/* ---- figures and devices --------------------------------------------------------*/

int dd_cache_stats_get(dd_store *s, dd_cache_stats *out)
{
	if (!s || !out)
		return DD_EINVAL;
	if (out->version == 0 || out->version > DD_CACHE_STATS_VERSION)
		return dd_store_failf(s, DD_EINVAL, "dd_cache_stats version %u "
				      "not supported", out->version);
	dd_cache_stats_fill(s->st_cache, out);
	return 0;
}

int dd_cache_list(dd_store *s, dd_cache_dev **out, size_t *count)
{
	dd_err err;
	int rc;

	if (!s || !out || !count)
		return s ? dd_store_failf(s, DD_EINVAL, "dd_cache_list: NULL "
					  "argument") : DD_EINVAL;
	rc = dd_cache_devs(s->st_cache, &err, out, count);
	return rc ? dd_store_fail(s, &err) : 0;
}

void dd_cache_list_free(dd_cache_dev *list)
{
	dd_free(list);
}

int dd_cache_flush(dd_store *s)
{
	if (!s)
		return DD_EINVAL;
	dd_cache_drain(s->st_cache);
	return 0;
}

/* ---- configuration ----------------------------------------------------------------*/

/* Adds the device to cache.conf.  Writer lock held. */
static int dd_cache_add_locked(dd_store *s, dd_err *err, const char *path,
			       uint64_t size, unsigned flags, uint64_t *used)
{
	uint8_t id[16];
	dd_cache_conf conf;
	size_t at;
	int rc = dd_cache_conf_read(err, s->st_path, &conf);

	if (rc)
		return rc;
	if (dd_cache_conf_find(&conf, path, &at))
		rc = dd_err_set(err, DD_EEXIST, "%s is a cache device of this "
				"store already", path);
	if (!rc)
		rc = dd_store_id_ensure(s, err, id);
	if (!rc)
		rc = dd_l2_format(err, path, size, id,
				  flags & DD_CACHE_ADD_FORCE, used);
	if (!rc)
		rc = dd_cache_conf_add_dev(err, &conf, path, *used);
	if (!rc)
		rc = dd_cache_conf_write(err, s->st_path, &conf);
	dd_cache_conf_fini(&conf);
	return rc;
}

/* cache.conf changes one at a time (STORE/conf.lock); writers, gc and
 * readers go on. */
static int dd_cache_conf_lock(dd_store *s, dd_err *err, int *fd)
{
	if (s->st_opts.readonly)
		return dd_err_set(err, DD_EPERM, "%s: store opened read-only",
				  s->st_path);
	return dd_lock_take(s, err, "conf.lock", true, fd);
}

int dd_cache_add(dd_store *s, const char *path, uint64_t size, unsigned flags)
{
	int lockfd = -1;
	uint64_t used = 0;
	dd_err err;
	int rc;

	if (!s)
		return DD_EINVAL;
	rc = dd_cache_conf_path_check(&err, path);
	if (!rc && (flags & ~DD_CACHE_ADD_FORCE))
		rc = dd_err_set(&err, DD_EINVAL, "unknown flags %#x", flags);
	if (!rc && s->st_hash_kind != DD_HASH_SHA256)
		rc = dd_err_set(&err, DD_ENOTSUP, "a store with a test hash "
				"has no caches");
	if (!rc)
		rc = dd_cache_conf_lock(s, &err, &lockfd);
	if (rc)
		return dd_store_fail(s, &err);
	rc = dd_cache_add_locked(s, &err, path, size, flags, &used);
	dd_lock_drop(lockfd);
	if (!rc)
		rc = dd_cache_attach(s->st_cache, &err, path, used);
	return rc ? dd_store_fail(s, &err) : 0;
}

int dd_cache_remove(dd_store *s, const char *path)
{
	int lockfd = -1;
	dd_cache_conf conf;
	dd_err err;
	size_t at = 0;
	int rc;

	if (!s)
		return DD_EINVAL;
	rc = dd_cache_conf_path_check(&err, path);
	if (!rc)
		rc = dd_cache_conf_lock(s, &err, &lockfd);
	if (rc)
		return dd_store_fail(s, &err);
	rc = dd_cache_conf_read(&err, s->st_path, &conf);
	if (!rc && !dd_cache_conf_find(&conf, path, &at))
		rc = dd_err_set(&err, DD_ENOENT, "%s is not a cache device of "
				"this store", path);
	if (!rc) {
		dd_cache_conf_remove_dev(&conf, at);
		rc = dd_cache_conf_write(&err, s->st_path, &conf);
	}
	dd_cache_conf_fini(&conf);
	dd_lock_drop(lockfd);
	if (!rc)
		dd_cache_detach(s->st_cache, path);
	return rc ? dd_store_fail(s, &err) : 0;
}

int dd_cache_config_get(dd_store *s, dd_cache_config *out)
{
	dd_cache_conf conf;
	dd_err err;
	int rc;

	if (!s || !out)
		return s ? dd_store_failf(s, DD_EINVAL, "dd_cache_config_get: "
					  "NULL argument") : DD_EINVAL;
	if (out->version == 0 || out->version > DD_CACHE_CONFIG_VERSION)
		return dd_store_failf(s, DD_EINVAL, "dd_cache_config version "
				      "%u not supported", out->version);
	rc = dd_cache_conf_read(&err, s->st_path, &conf);
	if (rc)
		return dd_store_fail(s, &err);
	out->l1_size = conf.cf_l1_size;
	out->l2_write_max = conf.cf_l2_write_max;
	out->l2_feed_sequential = conf.cf_feed_seq;
	dd_cache_conf_fini(&conf);
	return 0;
}

int dd_cache_config_set(dd_store *s, const dd_cache_config *cfg)
{
	int lockfd = -1;
	dd_cache_conf conf;
	dd_err err;
	int rc;

	if (!s || !cfg)
		return s ? dd_store_failf(s, DD_EINVAL, "dd_cache_config_set: "
					  "NULL argument") : DD_EINVAL;
	if (cfg->version == 0 || cfg->version > DD_CACHE_CONFIG_VERSION ||
	    cfg->l2_feed_sequential < -1 || cfg->l2_feed_sequential > 1)
		return dd_store_failf(s, DD_EINVAL, "dd_cache_config: bad "
				      "version or value");
	rc = dd_cache_conf_lock(s, &err, &lockfd);
	if (rc)
		return dd_store_fail(s, &err);
	rc = dd_cache_conf_read(&err, s->st_path, &conf);
	if (!rc) {
		conf.cf_l1_size = cfg->l1_size;
		conf.cf_l2_write_max = cfg->l2_write_max;
		conf.cf_feed_seq = cfg->l2_feed_sequential;
		rc = dd_cache_conf_write(&err, s->st_path, &conf);
		dd_cache_conf_fini(&conf);
	}
	dd_lock_drop(lockfd);
	return rc ? dd_store_fail(s, &err) : 0;
}
