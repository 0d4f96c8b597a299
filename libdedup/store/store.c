/*
 * store.c -- creating, opening and closing a store; its scratch and pack
 * handles.
 *
 * Creation writes everything else first and STORE/DEDUP last (through a
 * temporary file and rename), so a directory is a store only once it is
 * whole.  Opening checks the DEDUP file before touching LMDB: a store
 * written by a newer format is refused with a message that says so, and a
 * catalog whose options differ from DEDUP's is refused naming repair.
 * Locks are lock.c's, entering and recovery recover.c's.
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
				   s->st_hash_kind, s->st_block_max);
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
	s->st_chunker = (int)meta.sc_opt[DD_STORE_OPT_CHUNKER];
	s->st_block_max = dd_chunker_max(s->st_chunker, s->st_block_size);
	/* block maps keyed by offset, with lengths (format/store.md §4.2) */
	dd_db_set_varblock(s->st_db, s->st_chunker != DD_CHUNKER_FIXED
				     ? s->st_block_max : 0);
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
	pthread_mutex_init(&s->st_lock, NULL);
	pthread_mutex_init(&s->st_pool_lock, NULL);
	/* A version-1 struct ends at `threads`, a version-2 one at
	 * l2_feed_sequential, a version-3 one at lock_timeout_ms: copy only
	 * what the caller has, the later fields keep their defaults. */
	s->st_opts = (dd_open_opts)DD_OPEN_OPTS_INIT;
	if (oopts && oopts->version == 1)
		memcpy(&s->st_opts, oopts, offsetof(dd_open_opts, no_cache));
	else if (oopts && oopts->version == 2)
		memcpy(&s->st_opts, oopts,
		       offsetof(dd_open_opts, lock_timeout_ms));
	else if (oopts && oopts->version == 3)
		memcpy(&s->st_opts, oopts,
		       offsetof(dd_open_opts, defer_catalog_check));
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

/* Opens db, packs and manifests. */
static int dd_store_attach(dd_store *s, dd_err *err, bool create,
			   const dd_store_conf *conf)
{
	char p[4096];
	int rc;

	snprintf(p, sizeof(p), "%s/db", s->st_path);
	if (s->st_opts.defer_catalog_check && !create)
		rc = dd_db_open_unchecked(&s->st_db, err, p, false);
	else
		rc = dd_db_open(&s->st_db, err, p, create, false);
	if (rc == DD_EPERM && !create) {
		s->st_opts.readonly = 1;
		rc = s->st_opts.defer_catalog_check
			     ? dd_db_open_unchecked(&s->st_db, err, p, true)
			     : dd_db_open(&s->st_db, err, p, false, true);
	}
	if (rc)
		return rc;
	if (s->st_rstore)   /* the pool's objects, not the empty directories */
		return dd_rstore_vdirs(s->st_rstore, err, &s->st_packdir,
				       &s->st_mfdir);
	snprintf(p, sizeof(p), "%s/packs", s->st_path);
	rc = dd_vdir_open_local(&s->st_packdir, err, p);
	if (!rc && conf->sc_format >= 2) {
		snprintf(p, sizeof(p), "%s/" DD_MANIFEST_DIR, s->st_path);
		rc = dd_vdir_open_local(&s->st_mfdir, err, p);
	}
	return rc;
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
	dd_rstore *rs = NULL;
	dd_store *s = NULL;
	int rc;

	dd_err_clear(err);
	if (!out || !path || !*path)
		return dd_err_set(err, DD_EINVAL, "dd_store_open: no path");
	/* a store in a RADOS pool is opened as its local catalog, brought up
	 * to date first (rstore.h) */
	if (dd_rstore_is_spec(path)) {
		rc = dd_rstore_open(&rs, err, path, NULL, true);
		if (rc)
			return rc;
		path = dd_rstore_local(rs);
	}
	rc = dd_store_conf_read(err, path, &conf);
	if (!rc)
		rc = dd_store_alloc(&s, err, path, oopts);
	if (s)
		s->st_rstore = rs;
	else
		dd_rstore_close(rs);
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
		/* a version-1 struct ends before `chunker`: fixed blocks */
		if (in->version == 1)
			memcpy(o, in, offsetof(dd_create_opts, chunker));
		else
			*o = *in;
	}
	if (o->block_size == 0)
		o->block_size = DD_BLOCK_SIZE_DEFAULT;
	if (o->chunker != DD_CHUNKER_FIXED && o->chunker != DD_CHUNKER_FASTCDC)
		return dd_err_set(err, DD_EINVAL, "unknown chunker %d",
				  o->chunker);
	if (o->chunker == DD_CHUNKER_FASTCDC &&
	    !dd_chunker_valid(o->chunker, o->block_size))
		return dd_err_set(err, DD_EINVAL,
				  "average block size %u: must be a power of "
				  "two from 4 KiB to 256 KiB", o->block_size);
	if (!dd_chunker_valid(o->chunker, o->block_size))
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
	dd_store_conf conf = {.sc_format = DD_STORE_FORMAT_FIXED};
	dd_rstore *rs = NULL;
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
	if (rc)
		return rc;
	conf.sc_opt[0] = o.block_size;
	conf.sc_opt[1] = o.verify ? 1 : 0;
	conf.sc_opt[2] = (uint64_t)o.compress;
	conf.sc_opt[3] = (uint64_t)o.compress_level;
	conf.sc_opt[4] = (uint64_t)hash_kind;
	conf.sc_opt[DD_STORE_OPT_CHUNKER] = (uint64_t)o.chunker;
	if (o.chunker != DD_CHUNKER_FIXED)
		conf.sc_format = DD_STORE_FORMAT_VAR;
	/* a RADOS store: its local catalog is made here, in a new directory
	 * named by the new uuid; the pool gets DEDUP last (publish) */
	if (dd_rstore_is_spec(path)) {
		rc = dd_rstore_open(&rs, err, path, &conf, false);
		if (rc)
			return rc;
		path = dd_rstore_local(rs);
	} else {
		rc = dd_dir_prepare(err, path);
	}
	for (size_t i = 0; !rc && i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", path, dirs[i]);
		if (mkdir(p, 0755) != 0)
			rc = dd_err_set(err, dd_errno_code(errno), "%s: %s",
					p, strerror(errno));
	}
	if (rc) {
		dd_rstore_close(rs);
		return rc;
	}
	rc = dd_store_alloc(&s, err, path, oopts);
	if (s)
		s->st_rstore = rs;
	else
		dd_rstore_close(rs);
	if (!rc)
		rc = dd_store_attach(s, err, true, &conf);
	if (!rc)
		rc = dd_store_init_meta(s, err, &conf);
	if (!rc)
		dd_space_reserve_make(s);   /* room for rm on a full disk */
	/* written last: a directory without it is not a store */
	if (!rc)
		rc = dd_store_conf_write(err, path, &conf);
	if (!rc && rs)
		rc = dd_rstore_publish(rs, err);
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
	dd_vdir_close(s->st_packdir);
	dd_vdir_close(s->st_mfdir);
	dd_rstore_close(s->st_rstore);   /* after the vdirs on its pool */
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
	/* a format-1 store is read as format 2 (upgraded at its first write) */
	out->format_version = s->st_format >= DD_STORE_FORMAT_V1ONLY
				      ? (uint32_t)s->st_format
				      : DD_STORE_FORMAT_V1ONLY;
	return 0;
}

int dd_store_chunker_get(dd_store *s, int *out)
{
	if (!s || !out)
		return s ? dd_store_failf(s, DD_EINVAL, "dd_store_chunker_get: "
					  "NULL argument") : DD_EINVAL;
	*out = s->st_chunker;
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
