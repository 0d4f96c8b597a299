/*
 * store.c -- creating, opening and locking a store; recovery after a crash.
 *
 * Creation writes everything else first and STORE/DEDUP last (through a
 * temporary file and rename), so a directory is a store only once it is
 * whole.  Opening checks the format line before touching LMDB: a store
 * written by a newer format is refused with a message that says so.
 *
 * The writer lock is flock(2) on STORE/lock, so it dies with its process:
 * a killed writer never leaves a store locked.  The first holder after a
 * crash recovers (dd_store_recover): it is the only one allowed to change
 * anything, so recovery never races a live writer.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/io.h"
#include "store/manifest.h"
#include "store/store_internal.h"

int dd_store_fail(dd_store *s, const dd_err *err)
{
	int code;

	pthread_mutex_lock(&s->st_lock);
	dd_err_copy(&s->st_err, err);
	/* a failure must never read as success, even if a path forgot to
	 * record its code */
	if (s->st_err.de_code >= 0)
		dd_err_set(&s->st_err, DD_EIO,
			   "internal error: a failure left no error code");
	code = s->st_err.de_code;
	pthread_mutex_unlock(&s->st_lock);
	return code;
}

int dd_store_failf(dd_store *s, int code, const char *fmt, ...)
{
	dd_err err;
	char msg[DD_ERRMSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	dd_err_set(&err, code, "%s", msg);
	return dd_store_fail(s, &err);
}

const char *dd_store_errmsg(const dd_store *s)
{
	const dd_err *e = s ? &s->st_err : dd_thread_err();

	return e->de_code ? e->de_msg : "no error";
}

int dd_name_check(const char *name)
{
	size_t len;

	if (!name)
		return DD_ENAME;
	len = strnlen(name, DD_NAME_MAX + 1);
	if (len == 0 || len > DD_NAME_MAX)
		return DD_ENAME;
	if (!strcmp(name, ".") || !strcmp(name, ".."))
		return DD_ENAME;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)name[i];

		if (c < 0x20 || c == 0x7f || c == '/' || c == '@')
			return DD_ENAME;
	}
	return 0;
}

/* ---- scratch ------------------------------------------------------------*/

int dd_scratch_init(dd_scratch *sc, dd_err *err, const dd_store *s)
{
	return dd_scratch_init_for(sc, err, s->st_compress, s->st_level,
				   s->st_hash_kind, s->st_block_size);
}

int dd_scratch_init_for(dd_scratch *sc, dd_err *err, int compress, int level,
			int hash_kind, uint32_t block_size)
{
	int rc;

	memset(sc, 0, sizeof(*sc));
	rc = dd_codec_new(&sc->sc_codec, err, compress, level);
	if (rc)
		return rc;
	rc = dd_hasher_new(&sc->sc_hasher, hash_kind);
	if (rc) {
		dd_scratch_fini(sc);
		return dd_err_set(err, rc, "cannot create hasher");
	}
	sc->sc_rbuf_len = DD_PACK_REC_HDR_SIZE + dd_codec_bound(block_size);
	sc->sc_rbuf = dd_malloc(sc->sc_rbuf_len);
	sc->sc_dbuf = dd_malloc(block_size);
	if (!sc->sc_rbuf || !sc->sc_dbuf) {
		dd_scratch_fini(sc);
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	}
	return 0;
}

void dd_scratch_fini(dd_scratch *sc)
{
	dd_codec_free(sc->sc_codec);
	dd_hasher_free(sc->sc_hasher);
	dd_free(sc->sc_rbuf);
	dd_free(sc->sc_dbuf);
	memset(sc, 0, sizeof(*sc));
}

/* ---- options: DEDUP and meta (layout.c) ----------------------------------*/

/* Reads the options from meta; in format 2 they must be DEDUP's. */
static int dd_store_load_options(dd_store *s, dd_err *err,
				 const dd_store_conf *conf)
{
	dd_store_conf meta = {0};
	dd_txn *txn;
	int rc = dd_txn_begin(s->st_db, err, false, &txn);

	if (rc)
		return rc;
	rc = dd_store_meta_read(txn, err, s->st_path, &meta);
	dd_txn_abort(txn);
	if (rc)
		return rc;
	if (conf->sc_format >= 2 &&
	    (memcmp(meta.sc_opt, conf->sc_opt, sizeof(meta.sc_opt)) ||
	     !meta.sc_have_uuid ||
	     memcmp(meta.sc_uuid, conf->sc_uuid, sizeof(meta.sc_uuid))))
		return dd_err_set(err, DD_ECORRUPT, "%s: the catalog's options "
				  "or identity differ from the DEDUP file's "
				  "(a catalog of another store, or damaged): "
				  "run dedup repair", s->st_path);
	s->st_format = conf->sc_format;
	s->st_block_size = (uint32_t)meta.sc_opt[0];
	s->st_verify = (int)meta.sc_opt[1];
	s->st_compress = (int)meta.sc_opt[2];
	s->st_level = (int)meta.sc_opt[3];
	s->st_hash_kind = (int)meta.sc_opt[4];
	return 0;
}

static int dd_store_init_meta(dd_store *s, dd_err *err,
			      const dd_store_conf *conf)
{
	dd_txn *txn;
	int rc = dd_txn_begin(s->st_db, err, true, &txn);

	if (rc)
		return rc;
	rc = dd_store_meta_init(txn, err, conf, 1, 1);
	if (rc) {
		dd_txn_abort(txn);
		return rc;
	}
	return dd_txn_commit(txn, err);
}

/* ---- open and close -------------------------------------------------------*/

static int dd_store_alloc(dd_store **out, dd_err *err, const char *path,
			  const dd_open_opts *oopts)
{
	dd_store *s;

	if (oopts && (oopts->version == 0 ||
		      oopts->version > DD_OPEN_OPTS_VERSION))
		return dd_err_set(err, DD_EINVAL,
				  "dd_open_opts version %u not supported",
				  oopts->version);
	s = dd_calloc(1, sizeof(*s));
	if (!s)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	s->st_packdir = -1;
	s->st_mfdir = -1;
	s->st_lockfd = -1;
	pthread_mutex_init(&s->st_lock, NULL);
	pthread_mutex_init(&s->st_pool_lock, NULL);
	/* A version-1 struct ends at `threads`: copy only what the caller
	 * has, the later (cache) fields keep their defaults. */
	s->st_opts = (dd_open_opts)DD_OPEN_OPTS_INIT;
	if (oopts && oopts->version == 1)
		memcpy(&s->st_opts, oopts, offsetof(dd_open_opts, no_cache));
	else if (oopts)
		s->st_opts = *oopts;
	s->st_opts.version = DD_OPEN_OPTS_VERSION;
	s->st_path = dd_strdup(path);
	if (!s->st_path) {
		dd_store_close(s);
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	}
	*out = s;
	return 0;
}

/* Opens db, packs, manifests and lock. */
static int dd_store_attach(dd_store *s, dd_err *err, bool create,
			   const dd_store_conf *conf)
{
	char p[4096];
	int rc;

	snprintf(p, sizeof(p), "%s/db", s->st_path);
	rc = dd_db_open(&s->st_db, err, p, create, false);
	if (rc == DD_EPERM && !create) {
		s->st_opts.readonly = 1;
		rc = dd_db_open(&s->st_db, err, p, false, true);
	}
	if (rc)
		return rc;
	snprintf(p, sizeof(p), "%s/packs", s->st_path);
	s->st_packdir = dd_io_open(err, p, O_RDONLY | O_DIRECTORY, 0);
	if (s->st_packdir < 0)
		return s->st_packdir;
	if (conf->sc_format >= 2) {
		snprintf(p, sizeof(p), "%s/" DD_MANIFEST_DIR, s->st_path);
		s->st_mfdir = dd_io_open(err, p, O_RDONLY | O_DIRECTORY, 0);
		if (s->st_mfdir < 0)
			return s->st_mfdir;
	}
	snprintf(p, sizeof(p), "%s/lock", s->st_path);
	s->st_lockfd = dd_io_open(err, p, O_RDWR | O_CREAT, 0644);
	if (s->st_lockfd == DD_EPERM)
		s->st_lockfd = dd_io_open(err, p, O_RDONLY, 0);
	if (s->st_lockfd < 0)
		return s->st_lockfd;
	return 0;
}

static int dd_store_start_pool(dd_store *s, dd_err *err)
{
	unsigned width;
	int rc = dd_pool_new(&s->st_pool, s->st_opts.threads);

	if (rc)
		return dd_err_set(err, rc, "cannot start worker threads");
	width = dd_pool_width(s->st_pool);
	s->st_scratch = dd_calloc(width, sizeof(*s->st_scratch));
	if (!s->st_scratch)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	s->st_nscratch = width;
	for (unsigned i = 0; i < width; i++) {
		rc = dd_scratch_init(&s->st_scratch[i], err, s);
		if (rc)
			return rc;
	}
	return 0;
}

/* The common end of open and create: options, workers, caches; on any
 * failure (rc, or one of these) the handle is closed. */
static int dd_store_ready(dd_store *s, dd_err *err, int rc,
			  const dd_store_conf *conf, dd_store **out)
{
	if (!rc)
		rc = dd_store_load_options(s, err, conf);
	if (!rc)
		rc = dd_store_start_pool(s, err);
	if (!rc)
		rc = dd_store_cache_open(s, err);   /* caches.c */
	if (rc) {
		dd_store_close(s);
		return rc;
	}
	*out = s;
	return 0;
}

int dd_store_open(dd_store **out, const char *path, const dd_open_opts *oopts)
{
	dd_err *err = dd_thread_err();
	dd_store_conf conf;
	dd_store *s = NULL;
	int rc;

	dd_err_clear(err);
	if (!out || !path || !*path)
		return dd_err_set(err, DD_EINVAL, "dd_store_open: no path");
	rc = dd_store_conf_read(err, path, &conf);
	if (!rc)
		rc = dd_store_alloc(&s, err, path, oopts);
	if (!rc)
		rc = dd_store_attach(s, err, false, &conf);
	return dd_store_ready(s, err, rc, &conf, out);
}

static int dd_dir_prepare(dd_err *err, const char *path)
{
	DIR *d;
	struct dirent *de;
	int nonempty = 0;

	if (mkdir(path, 0755) == 0)
		return 0;
	if (errno != EEXIST)
		return dd_err_set(err, dd_errno_code(errno), "%s: %s", path,
				  strerror(errno));
	d = opendir(path);
	if (!d)
		return dd_err_set(err, errno == ENOTDIR ? DD_EEXIST
							 : dd_errno_code(errno),
				  "%s: %s", path,
				  errno == ENOTDIR ? "exists and is not a directory"
						   : strerror(errno));
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			nonempty = 1;
	closedir(d);
	if (nonempty)
		return dd_err_set(err, DD_EEXIST,
				  "%s: directory is not empty", path);
	return 0;
}

static int dd_create_opts_check(dd_err *err, const dd_create_opts *in,
				dd_create_opts *o)
{
	*o = (dd_create_opts)DD_CREATE_OPTS_INIT;
	if (in) {
		if (in->version == 0 || in->version > DD_CREATE_OPTS_VERSION)
			return dd_err_set(err, DD_EINVAL,
					  "dd_create_opts version %u not supported",
					  in->version);
		*o = *in;
	}
	if (o->block_size == 0)
		o->block_size = DD_BLOCK_SIZE_DEFAULT;
	if (o->block_size < DD_BLOCK_SIZE_MIN ||
	    o->block_size > DD_BLOCK_SIZE_MAX ||
	    (o->block_size & (o->block_size - 1)))
		return dd_err_set(err, DD_EINVAL,
				  "block size %u: must be a power of two from "
				  "4 KiB to 1 MiB", o->block_size);
	if (o->compress != DD_COMPRESS_NONE && o->compress != DD_COMPRESS_ZSTD)
		return dd_err_set(err, DD_EINVAL, "unknown compression %d",
				  o->compress);
	if (o->compress_level == 0)
		o->compress_level = 1;
	if (o->compress_level < 1 || o->compress_level > 19)
		return dd_err_set(err, DD_EINVAL,
				  "compression level %d: must be 1 to 19",
				  o->compress_level);
	return 0;
}

int dd_store_create_kind(dd_store **out, const char *path,
			 const dd_create_opts *opts, const dd_open_opts *oopts,
			 int hash_kind)
{
	dd_err *err = dd_thread_err();
	dd_create_opts o;
	dd_store_conf conf = {.sc_format = DD_STORE_FORMAT};
	dd_store *s = NULL;
	static const char *const dirs[] = {"db", "packs", DD_MANIFEST_DIR};
	char p[4096];
	int rc;

	dd_err_clear(err);
	if (!out || !path || !*path)
		return dd_err_set(err, DD_EINVAL, "dd_store_create: no path");
	if (strlen(path) > 3000)
		return dd_err_set(err, DD_EINVAL, "store path too long");
	/* before anything is made on disk: a refused create leaves no trace */
	if (oopts && (oopts->version == 0 ||
		      oopts->version > DD_OPEN_OPTS_VERSION))
		return dd_err_set(err, DD_EINVAL,
				  "dd_open_opts version %u not supported",
				  oopts->version);
	rc = dd_create_opts_check(err, opts, &o);
	if (!rc)
		rc = dd_store_conf_new_uuid(err, &conf);
	if (!rc)
		rc = dd_dir_prepare(err, path);
	if (rc)
		return rc;
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", path, dirs[i]);
		if (mkdir(p, 0755) != 0)
			return dd_err_set(err, dd_errno_code(errno), "%s: %s",
					  p, strerror(errno));
	}
	conf.sc_opt[0] = o.block_size;
	conf.sc_opt[1] = o.verify ? 1 : 0;
	conf.sc_opt[2] = (uint64_t)o.compress;
	conf.sc_opt[3] = (uint64_t)o.compress_level;
	conf.sc_opt[4] = (uint64_t)hash_kind;
	rc = dd_store_alloc(&s, err, path, oopts);
	if (!rc)
		rc = dd_store_attach(s, err, true, &conf);
	if (!rc)
		rc = dd_store_init_meta(s, err, &conf);
	/* written last: a directory without it is not a store */
	if (!rc)
		rc = dd_store_conf_write(err, path, &conf);
	return dd_store_ready(s, err, rc, &conf, out);
}

int dd_store_create(dd_store **out, const char *path,
		    const dd_create_opts *opts, const dd_open_opts *oopts)
{
	return dd_store_create_kind(out, path, opts, oopts, DD_HASH_SHA256);
}

void dd_store_close(dd_store *s)
{
	if (!s)
		return;
	/* First: the L2 feed drains (at its rate) and writes its last log
	 * block while everything else is still there. */
	dd_store_cache_close(s);
	if (s->st_pool)
		dd_pool_free(s->st_pool);
	if (s->st_scratch) {
		for (size_t i = 0; i < s->st_nscratch; i++)
			dd_scratch_fini(&s->st_scratch[i]);
		dd_free(s->st_scratch);
	}
	for (uint32_t i = 0; i < s->st_npacks; i++)
		dd_pack_close(s->st_packs[i]);
	dd_free(s->st_packs);
	if (s->st_lockfd >= 0)
		dd_io_close(s->st_lockfd);
	if (s->st_packdir >= 0)
		dd_io_close(s->st_packdir);
	if (s->st_mfdir >= 0)
		dd_io_close(s->st_mfdir);
	dd_db_close(s->st_db);
	pthread_mutex_destroy(&s->st_lock);
	pthread_mutex_destroy(&s->st_pool_lock);
	dd_free(s->st_path);
	dd_free(s);
}

int dd_store_info_get(dd_store *s, dd_store_info *out)
{
	if (!s || !out)
		return s ? dd_store_failf(s, DD_EINVAL, "dd_store_info_get: "
					  "NULL argument") : DD_EINVAL;
	out->block_size = s->st_block_size;
	out->verify = s->st_verify;
	out->compress = s->st_compress;
	out->compress_level = s->st_level;
	out->format_version = DD_STORE_FORMAT;
	return 0;
}

/* ---- pack handles -----------------------------------------------------------*/

int dd_store_pack(dd_store *s, dd_err *err, uint32_t id, dd_pack **out)
{
	dd_pack *p = NULL;
	int rc = 0;

	pthread_mutex_lock(&s->st_lock);
	if (id < s->st_npacks && s->st_packs[id]) {
		*out = s->st_packs[id];
		goto out;
	}
	/* Open first, grow the table after: the id comes from a DDT value,
	 * which damage to the LMDB file can turn into any 32-bit number, and
	 * the table is indexed by id -- only a pack that exists may size it
	 * (a damaged id once made scrub allocate and clear 18 GB). */
	rc = dd_pack_open(&p, err, s->st_packdir, id, 0);
	if (!rc && id >= s->st_npacks) {
		uint32_t n = id + 16;
		dd_pack **np = dd_realloc(s->st_packs, n * sizeof(*np));

		if (!np) {
			dd_pack_close(p);
			rc = dd_err_set(err, DD_ENOMEM, "out of memory");
			goto out;
		}
		memset(np + s->st_npacks, 0,
		       (n - s->st_npacks) * sizeof(*np));
		s->st_packs = np;
		s->st_npacks = n;
	}
	if (!rc) {
		s->st_packs[id] = p;
		*out = p;
	}
out:
	pthread_mutex_unlock(&s->st_lock);
	return rc;
}

/* ---- the writer lock and recovery ---------------------------------------------*/

int dd_store_lock(dd_store *s, dd_err *err)
{
	int rc;

	if (s->st_opts.readonly)
		return dd_err_set(err, DD_EPERM, "%s: store opened read-only",
				  s->st_path);
	pthread_mutex_lock(&s->st_lock);
	if (s->st_writer_held) {
		pthread_mutex_unlock(&s->st_lock);
		return dd_err_set(err, DD_EBUSY,
				  "%s: store is busy: this handle has a writer "
				  "open", s->st_path);
	}
	s->st_writer_held = true;
	pthread_mutex_unlock(&s->st_lock);
	for (;;) {
		if (flock(s->st_lockfd,
			  LOCK_EX | (s->st_opts.wait_for_lock ? 0 : LOCK_NB)) == 0)
			break;
		if (errno == EINTR)
			continue;
		rc = errno == EWOULDBLOCK
			     ? dd_err_set(err, DD_EBUSY,
					  "%s: store is busy: another writer "
					  "holds its lock", s->st_path)
			     : dd_err_set(err, dd_errno_code(errno),
					  "%s/lock: %s", s->st_path,
					  strerror(errno));
		goto fail;
	}
	rc = dd_store_recover(s, err);
	if (!rc)
		rc = dd_commit_upgrade(s, err);
	if (rc) {
		flock(s->st_lockfd, LOCK_UN);
		goto fail;
	}
	return 0;
fail:
	pthread_mutex_lock(&s->st_lock);
	s->st_writer_held = false;
	pthread_mutex_unlock(&s->st_lock);
	return rc;
}

void dd_store_unlock(dd_store *s)
{
	flock(s->st_lockfd, LOCK_UN);
	pthread_mutex_lock(&s->st_lock);
	s->st_writer_held = false;
	pthread_mutex_unlock(&s->st_lock);
}

/* Pending ids to roll back: every one but a resumable receive's. */
struct dd_pend_ids {
	dd_err *pi_err;
	uint64_t *pi_id;
	size_t pi_n, pi_cap;
};

static int dd_pend_collect(void *arg, uint64_t id, const dd_pend_rec *rec)
{
	struct dd_pend_ids *pi = arg;

	if (rec->pr_state_len)
		return 0;
	if (pi->pi_n == pi->pi_cap) {
		size_t n = pi->pi_cap ? pi->pi_cap * 2 : 8;
		uint64_t *ids = dd_realloc(pi->pi_id, n * sizeof(*ids));

		if (!ids)
			return dd_err_set(pi->pi_err, DD_ENOMEM, "out of memory");
		pi->pi_id = ids;
		pi->pi_cap = n;
	}
	pi->pi_id[pi->pi_n++] = id;
	return 0;
}

/* Rolls back every snapshot a killed writer left pending, in one
 * transaction: its references are dropped and its map deleted. */
static int dd_recover_pending(dd_store *s, dd_err *err)
{
	struct dd_pend_ids pi = {err, NULL, 0, 0};
	dd_txn *txn;
	int rc = dd_txn_begin(s->st_db, err, true, &txn);

	if (rc)
		return rc;
	rc = dd_pend_walk(txn, err, dd_pend_collect, &pi);
	for (size_t i = 0; !rc && i < pi.pi_n; i++) {
		rc = dd_snap_drop_refs(txn, err, pi.pi_id[i]);
		if (!rc)
			rc = dd_pend_del(txn, err, pi.pi_id[i]);
	}
	if (!rc && pi.pi_n)
		rc = dd_txn_commit(txn, err);
	else
		dd_txn_abort(txn);
	dd_free(pi.pi_id);
	return rc;
}

/* ---- doomed packs ------------------------------------------------------------*/

struct dd_doomed {
	dd_err *dm_err;
	uint64_t dm_oldest;       /* reap those doomed at or before this */
	uint32_t *dm_id;
	size_t dm_n, dm_cap;
	bool dm_all;              /* collect all, reapable or not */
};

static int dd_doomed_collect(void *arg, uint32_t id, uint64_t since)
{
	struct dd_doomed *dm = arg;

	if (!dm->dm_all && since > dm->dm_oldest)
		return 0;
	if (dm->dm_n == dm->dm_cap) {
		size_t n = dm->dm_cap ? dm->dm_cap * 2 : 16;
		uint32_t *ids = dd_realloc(dm->dm_id, n * sizeof(*ids));

		if (!ids)
			return dd_err_set(dm->dm_err, DD_ENOMEM, "out of memory");
		dm->dm_id = ids;
		dm->dm_cap = n;
	}
	dm->dm_id[dm->dm_n++] = id;
	return 0;
}

int dd_store_reap(dd_store *s, dd_err *err, uint64_t *freed)
{
	struct dd_doomed dm = {.dm_err = err};
	dd_txn *txn;
	int rc = dd_db_oldest_reader(s->st_db, err, &dm.dm_oldest);

	*freed = 0;
	if (!rc)
		rc = dd_txn_begin(s->st_db, err, true, &txn);
	if (rc)
		return rc;
	rc = dd_packs_walk_doomed(txn, err, dd_doomed_collect, &dm);
	for (size_t i = 0; !rc && i < dm.dm_n; i++)
		rc = dd_packs_del(txn, err, dm.dm_id[i]);
	if (rc || dm.dm_n == 0) {
		dd_txn_abort(txn);
		dd_free(dm.dm_id);
		return rc;
	}
	rc = dd_txn_commit(txn, err);
	/* forgotten first, unlinked after: a crash in between leaves files
	 * no record names, which recovery removes */
	for (size_t i = 0; !rc && i < dm.dm_n; i++) {
		char name[32];
		struct stat st;

		dd_pack_name(name, sizeof(name), dm.dm_id[i]);
		if (fstatat(s->st_packdir, name, &st, 0) == 0)
			*freed += (uint64_t)st.st_size;
		unlinkat(s->st_packdir, name, 0);
	}
	if (!rc)
		fsync(s->st_packdir);
	dd_free(dm.dm_id);
	return rc;
}

/* Is pack id doomed (its file must stay)? */
static bool dd_is_doomed(const struct dd_doomed *dm, uint32_t id)
{
	for (size_t i = 0; i < dm->dm_n; i++)
		if (dm->dm_id[i] == id)
			return true;
	return false;
}

struct dd_live_probe {
	dd_txn *lp_txn;
	uint32_t lp_pack;
	uint64_t lp_from;
	bool lp_live;
	uint64_t lp_offset;
};

static int dd_live_probe_rec(void *ctx, uint64_t offset,
			     const dd_pack_rec *rec, const void *payload)
{
	struct dd_live_probe *lp = ctx;
	dd_ddt_key key;
	dd_ddt_ent ent;
	dd_err e;

	(void)payload;
	if (offset + DD_PACK_REC_HDR_SIZE + rec->pr_psize <= lp->lp_from)
		return 0; /* wholly before the cut */
	memcpy(key.dk_hash, rec->pr_hash, DD_HASH_SIZE);
	for (unsigned v = 0; v <= DD_DDT_MAX_VARIANT; v++) {
		key.dk_variant = (uint8_t)v;
		if (dd_ddt_get(lp->lp_txn, &e, &key, &ent) != 0)
			return 0; /* no (more) entries with this hash */
		if (ent.de_pack == lp->lp_pack && ent.de_offset == offset &&
		    !(ent.de_flags & DD_DDE_PENDING)) {
			lp->lp_live = true;
			lp->lp_offset = offset;
			return 1;
		}
	}
	return 0;
}

/* May recovery cut pack p back to `from` (remove it: from 0)?  Only if
 * no DDT entry names a record that reaches past it.  A writer or gc that
 * died before committing left nothing a committed entry names; a
 * committed end or a packs entry damaged in the LMDB file would, and
 * destroying live blocks on its word is what recovery must never do:
 * DD_ECORRUPT then.  The walk reads headers from the pack's start (a
 * damaged end need not fall on a record) and stops at a torn record (a
 * killed writer's last one): nothing past it can be named either. */
static int dd_pack_tail_is_dead(dd_txn *txn, dd_err *err, dd_pack *p,
				uint64_t from)
{
	struct dd_live_probe lp = {.lp_txn = txn, .lp_pack = dd_pack_id(p),
				   .lp_from = from};
	dd_err walk_err;
	char name[16];           /* dd_pack_name's size */
	int rc = dd_pack_walk_headers(p, &walk_err, dd_live_probe_rec, &lp,
				      NULL);

	if (lp.lp_live) {
		dd_pack_name(name, sizeof(name), lp.lp_pack);
		return dd_err_set(err, DD_ECORRUPT, "pack %s: the store's "
				  "metadata says it ends at %llu, but a live "
				  "block is at %llu (damaged metadata: not "
				  "cutting it; run scrub)", name,
				  (unsigned long long)from,
				  (unsigned long long)lp.lp_offset);
	}
	if (rc == DD_EIO || rc == DD_ENOMEM)
		return dd_err_copy(err, &walk_err);
	return 0;
}

static int dd_names_pack(void *ctx, const dd_ddt_key *key,
			 const dd_ddt_ent *ent)
{
	(void)key;
	return ent->de_pack == *(const uint32_t *)ctx &&
	       !(ent->de_flags & DD_DDE_PENDING);
}

/* Recovery's check for a pack whose header cannot be read: no committed
 * DDT entry may name it (one DDT walk; only after such a crash). */
static int dd_pack_unnamed(dd_txn *txn, dd_err *err, uint32_t id)
{
	char name[16];           /* dd_pack_name's size */
	int rc = dd_ddt_walk(txn, err, dd_names_pack, &id);

	if (rc != 1)
		return rc;
	dd_pack_name(name, sizeof(name), id);
	return dd_err_set(err, DD_ECORRUPT, "pack %s holds live blocks but "
			  "the store's metadata does not list it and its "
			  "header is unreadable (damage: not removing it; "
			  "run scrub)", name);
}

struct dd_pack_present {
	dd_store *pp_store;
	dd_err *pp_err;
};

static int dd_pack_present(void *arg, uint32_t id, uint64_t end)
{
	struct dd_pack_present *pp = arg;
	char name[16];           /* dd_pack_name's size */
	struct stat st;

	(void)end;
	dd_pack_name(name, sizeof(name), id);
	if (fstatat(pp->pp_store->st_packdir, name, &st, 0) == 0)
		return 0;
	if (errno != ENOENT)
		return dd_err_set_errno(pp->pp_err, errno, "%s", name);
	return dd_err_set(pp->pp_err, DD_ECORRUPT, "pack %s is in the catalog "
			  "but not in packs/ (a catalog older than the store, "
			  "or a lost file): run dedup repair", name);
}

/* Truncates pack tails past their committed end; removes pack files that
 * no commit recorded (created by a writer that died before committing).
 * Neither happens to a pack holding a block the DDT names (metadata
 * damage): dd_pack_tail_is_dead. */
static int dd_recover_packs(dd_store *s, dd_err *err)
{
	int dfd = dup(s->st_packdir);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	struct dirent *de;
	dd_txn *txn;
	int rc;

	if (!d) {
		if (dfd >= 0)
			close(dfd);
		return dd_err_set(err, dd_errno_code(errno), "%s/packs: %s",
				  s->st_path, strerror(errno));
	}
	struct dd_doomed doomed = {.dm_err = err, .dm_all = true};

	rc = dd_txn_begin(s->st_db, err, false, &txn);
	if (rc) {
		closedir(d);
		return rc;
	}
	rc = dd_packs_walk_doomed(txn, err, dd_doomed_collect, &doomed);
	/* every pack the catalog records must be there before anything is
	 * cut: a catalog that lists vanished packs is not one to trust with
	 * deciding what else is dead */
	if (!rc)
		rc = dd_packs_walk(txn, err, dd_pack_present,
				   &(struct dd_pack_present){s, err});
	rewinddir(d);
	while (!rc && (de = readdir(d)) != NULL) {
		char *end;
		unsigned long id;
		uint64_t committed;
		struct stat st;

		if (strlen(de->d_name) != 13 ||
		    strcmp(de->d_name + 8, ".pack") != 0)
			continue;
		errno = 0;
		id = strtoul(de->d_name, &end, 16);
		if (errno || end != de->d_name + 8 || id == 0 ||
		    id > UINT32_MAX)
			continue;
		if (dd_is_doomed(&doomed, (uint32_t)id))
			continue; /* a reader may still need it */
		rc = dd_packs_get(txn, err, (uint32_t)id, &committed);
		if (rc == DD_ENOENT) {
			dd_pack *p;

			rc = dd_pack_open(&p, err, s->st_packdir, (uint32_t)id,
					  0);
			if (!rc) {
				rc = dd_pack_tail_is_dead(txn, err, p, 0);
				dd_pack_close(p);
			} else if (rc == DD_ECORRUPT) {
				/* no readable header (a writer died before it
				 * was written): no record to walk, so ask the
				 * DDT whether any entry names the pack */
				rc = dd_pack_unnamed(txn, err, (uint32_t)id);
			}
			if (!rc && unlinkat(s->st_packdir, de->d_name, 0) != 0)
				rc = dd_err_set(err, dd_errno_code(errno),
						"remove %s: %s", de->d_name,
						strerror(errno));
			continue;
		}
		if (rc)
			break;
		if (fstatat(s->st_packdir, de->d_name, &st, 0) != 0) {
			rc = dd_err_set(err, dd_errno_code(errno), "%s: %s",
					de->d_name, strerror(errno));
			break;
		}
		if ((uint64_t)st.st_size < committed) {
			rc = dd_err_set(err, DD_ECORRUPT,
					"pack %s is %lld bytes, shorter than its "
					"committed %llu", de->d_name,
					(long long)st.st_size,
					(unsigned long long)committed);
		} else if ((uint64_t)st.st_size > committed) {
			dd_pack *p = NULL;

			rc = dd_pack_open(&p, err, s->st_packdir, (uint32_t)id, 1);
			if (!rc)
				rc = dd_pack_tail_is_dead(txn, err, p, committed);
			if (!rc)
				rc = dd_pack_truncate(p, err, committed);
			dd_pack_close(p);
		}
	}
	dd_txn_abort(txn);
	closedir(d);
	dd_free(doomed.dm_id);
	if (!rc && fsync(s->st_packdir) != 0)
		rc = dd_err_set(err, dd_errno_code(errno), "sync %s/packs: %s",
				s->st_path, strerror(errno));
	return rc;
}

int dd_store_recover(dd_store *s, dd_err *err)
{
	uint64_t freed;
	/* the manifests first: they say what is committed, and nothing is
	 * cut or removed from a store whose catalog disagrees with them */
	int rc = dd_commit_recover(s, err);

	if (!rc)
		rc = dd_recover_pending(s, err);
	if (!rc)
		rc = dd_store_reap(s, err, &freed);
	if (!rc)
		rc = dd_recover_packs(s, err);
	return rc;
}

