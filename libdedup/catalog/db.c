/*
 * db.c -- the LMDB environment of a store and its generic operations.
 *
 * One environment per store directory (STORE/db).  LMDB's rule that an
 * environment is opened once per process is kept by a registry keyed by the
 * directory's (device, inode): a second dd_db_open of the same store shares
 * the handle.  Transactions are MDB_NOTLS so that a read transaction held by
 * a reader may be used from whichever thread that reader runs on.
 *
 * LMDB codes are translated here, where they enter (STYLE.md):
 * MDB_MAP_FULL -> DD_ENOSPC, MDB_CORRUPTED/MDB_PAGE_NOTFOUND -> DD_ECORRUPT,
 * MDB_VERSION_MISMATCH/MDB_INVALID -> DD_ECORRUPT, errno values via
 * dd_errno_code.
 */
#include <errno.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>

#include "dedup.h"
#include "common/alloc.h"
#include "common/endian.h"
#include "catalog/db_internal.h"
#include "catalog/lmdb_page.h"

/* Virtual size of the map: the data file grows only as pages are used.
 * A build may lower it: ThreadSanitizer leaves applications a few TiB of
 * address space, which four open stores fill. */
#ifndef DD_DB_MAPSIZE
#define DD_DB_MAPSIZE ((size_t)1 << 40)
#endif

const char *const dd_db_names[DD_DBI_COUNT] = {
	[DD_DBI_META] = "meta", [DD_DBI_DDT0] = "ddt0",
	[DD_DBI_DDT1] = "ddt1", [DD_DBI_SNAP] = "snap",
	[DD_DBI_BMAP] = "bmap", [DD_DBI_PEND] = "pend",
	[DD_DBI_PACKS] = "packs",
};

static pthread_mutex_t dd_db_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static dd_db *dd_db_registry;

int dd_mdb_error(dd_err *err, int rc, const char *what)
{
	int code;

	switch (rc) {
	case MDB_MAP_FULL:
	case MDB_TXN_FULL:
		code = DD_ENOSPC;
		break;
	case MDB_NOTFOUND:
		code = DD_ENOENT;
		break;
	case MDB_CORRUPTED:
	case MDB_PAGE_NOTFOUND:
	case MDB_INVALID:
	case MDB_VERSION_MISMATCH:
	case MDB_BAD_VALSIZE:
		code = DD_ECORRUPT;
		break;
	case MDB_READERS_FULL:
		code = DD_EBUSY;
		break;
	default:
		code = rc > 0 ? dd_errno_code(rc) : DD_EIO;
		break;
	}
	if (code == DD_ECORRUPT)
		return dd_db_damage(err, "%s: %s", what, mdb_strerror(rc));
	return dd_err_set(err, code, "%s: %s", what, mdb_strerror(rc));
}

#define DD_DB_REPAIR_HINT "the catalog is damaged: run dedup repair"

int dd_db_damage(dd_err *err, const char *fmt, ...)
{
	char msg[DD_ERRMSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return dd_err_set(err, DD_ECORRUPT, "%s: " DD_DB_REPAIR_HINT, msg);
}

static int dd_db_open_dbis(dd_db *db, dd_err *err, bool create)
{
	MDB_txn *txn;
	int rc = mdb_txn_begin(db->db_env, NULL, create ? 0 : MDB_RDONLY, &txn);

	if (rc)
		return dd_mdb_error(err, rc, "lmdb begin");
	for (int i = 0; i < DD_DBI_COUNT; i++) {
		rc = mdb_dbi_open(txn, dd_db_names[i], create ? MDB_CREATE : 0,
				  &db->db_dbi[i]);
		if (rc) {
			mdb_txn_abort(txn);
			if (rc == MDB_NOTFOUND)
				return dd_db_damage(err,
						    "lmdb table '%s' is missing",
						    dd_db_names[i]);
			return dd_mdb_error(err, rc, "lmdb open table");
		}
	}
	rc = mdb_txn_commit(txn);
	if (rc)
		return dd_mdb_error(err, rc, "lmdb commit");
	return 0;
}

/* The newest meta page's page count, the page size and data.mdb's fd. */
static int dd_db_file_info(MDB_env *env, dd_err *err, MDB_envinfo *info,
			   MDB_stat *ms, int *fd)
{
	int rc = mdb_env_info(env, info);

	if (!rc)
		rc = mdb_env_stat(env, ms);
	if (!rc)
		rc = mdb_env_get_fd(env, fd);
	return rc ? dd_mdb_error(err, rc, "lmdb") : 0;
}

/* The structural check of the newest snapshot, holding a read txn so
 * that its pages stay as they are while read.  A writer in another
 * process that commits twice meanwhile moves both meta pages past it:
 * then the check starts over on the new snapshot. */
/* Do the guard and the whole-file check know the linked LMDB's page
 * layout?  They read LMDB's pages themselves (lmdb_page.h, written for
 * 0.9.x): under another release they would call sound pages damaged or
 * damaged ones sound, so they stand aside, and damage to LMDB's own
 * structure may then crash it -- dedup repair rebuilds the catalog. */
static bool dd_db_layout_known(void)
{
	int major, minor, patch;

	mdb_version(&major, &minor, &patch);
	return dd_lm_layout_known(major, minor);
}

static int dd_db_check_env(MDB_env *env, dd_err *err, uint64_t max_bytes,
			   dd_db_damage_fn fn, void *ctx)
{
	char path[4096];
	const char *dir = NULL;
	MDB_envinfo info;
	MDB_stat ms;
	MDB_txn *txn;
	int fd, rc = dd_db_file_info(env, err, &info, &ms, &fd);

	if (rc)
		return rc;
	rc = mdb_env_get_path(env, &dir);
	if (rc)
		return dd_mdb_error(err, rc, "lmdb");
	if (((uint64_t)info.me_last_pgno + 1) * ms.ms_psize > max_bytes ||
	    !dd_db_layout_known())
		return 0;
	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	for (int attempt = 0; attempt < 16; attempt++) {
		rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
		if (rc)
			return dd_mdb_error(err, rc, "lmdb begin");
		rc = dd_db_check_file(err, fd, path, ms.ms_psize,
				      mdb_txn_id(txn), fn, ctx);
		mdb_txn_abort(txn);
		if (rc != DD_DB_CHECK_RETRY)
			return rc;
	}
	return 0; /* writers kept committing: unchecked, not damaged */
}

int dd_db_check(dd_db *db, dd_err *err)
{
	return dd_db_check_env(db->db_env, err, UINT64_MAX, NULL, NULL);
}

int dd_db_check_pages(dd_db *db, dd_err *err, dd_db_damage_fn fn, void *ctx)
{
	return dd_db_check_env(db->db_env, err, UINT64_MAX, fn, ctx);
}

/* LMDB does not tell where its map is (me_mapaddr is set only with
 * MDB_FIXEDMAP): find the read-only mapping of data.mdb by device and
 * inode in /proc/self/maps.  Without it, no MADV_RANDOM hint.  A read
 * transaction's get is answered in it (dd_guard_get) only if it is the
 * file's one such mapping: the registry opens an environment once per
 * process, but a caller's own LMDB environment on the same file would map
 * it too, and may unmap it while this one lives. */
static void dd_db_find_map(dd_db *db)
{
	const char *dir;
	char path[4096], line[4352];
	struct stat st;
	unsigned found = 0;
	FILE *f;

	if (mdb_env_get_path(db->db_env, &dir) != 0)
		return;
	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	if (stat(path, &st) != 0 || !(f = fopen("/proc/self/maps", "re")))
		return;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi, off, ino;
		unsigned maj, min;
		char perms[8];

		if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu", &lo, &hi, perms,
			   &off, &maj, &min, &ino) != 7 || off != 0 ||
		    ino != (unsigned long)st.st_ino ||
		    maj != major(st.st_dev) || min != minor(st.st_dev) ||
		    perms[1] != '-')
			continue;
		found++;
		if (hi - lo > db->db_map_len) {
			db->db_map = (void *)lo;   /* the read-only map */
			db->db_map_len = hi - lo;
		}
	}
	fclose(f);
	db->db_map_read = found == 1;
}

static int dd_txn_start(dd_txn *txn, dd_err *err, bool renew);

/* The guard's state, and its check of the pages LMDB reads to open the
 * tables (the main table's path to each name). */
static int dd_db_guard_open(dd_db *db, dd_err *err, const char *dir)
{
	char file[4200];
	MDB_envinfo info;
	MDB_stat ms;
	dd_txn *probe;
	int fd, rc = dd_db_file_info(db->db_env, err, &info, &ms, &fd);

	if (rc)
		return rc;
	snprintf(file, sizeof(file), "%s/data.mdb", dir);
	rc = dd_guard_open(db, err, fd, ms.ms_psize, info.me_mapsize, file);
	if (rc)
		return rc;
	probe = dd_calloc(1, sizeof(*probe));
	if (!probe)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	probe->tx_db = db;
	rc = dd_txn_start(probe, err, false);
	if (!rc)
		mdb_txn_abort(probe->tx_mdb);
	dd_guard_end(probe);
	dd_free(probe);
	return rc;
}

/* DD_DB_CHECK_AT_OPEN_MAX, or DEDUP_OPEN_CHECK_MAX from the environment
 * (decimal bytes; 0 leaves the whole-file check to scrub, the guard
 * still checks what each operation reads). */
static uint64_t dd_db_check_at_open_max(void)
{
	const char *v = getenv("DEDUP_OPEN_CHECK_MAX");
	char *end;
	unsigned long long n;

	if (!v || !*v)
		return DD_DB_CHECK_AT_OPEN_MAX;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno || *end || *v == '-')
		return DD_DB_CHECK_AT_OPEN_MAX;
	return n;
}

static dd_db *dd_db_registry_find(dev_t dev, ino_t ino)
{
	for (dd_db *d = dd_db_registry; d; d = d->db_next)
		if (d->db_dev == dev && d->db_ino == ino)
			return d;
	return NULL;
}

static int dd_db_open_flags(dd_db **out, dd_err *err, const char *dir,
			    bool create, bool readonly, unsigned mdb_flags,
			    uint64_t check_max);

int dd_db_open(dd_db **out, dd_err *err, const char *dir, bool create,
	       bool readonly)
{
	return dd_db_open_flags(out, err, dir, create, readonly, 0,
				dd_db_check_at_open_max());
}

int dd_db_open_unchecked(dd_db **out, dd_err *err, const char *dir,
			 bool readonly)
{
	return dd_db_open_flags(out, err, dir, false, readonly, 0, 0);
}

int dd_db_open_unsynced(dd_db **out, dd_err *err, const char *dir)
{
	return dd_db_open_flags(out, err, dir, true, false, MDB_NOSYNC,
				dd_db_check_at_open_max());
}

int dd_db_sync(dd_db *db, dd_err *err)
{
	int rc = mdb_env_sync(db->db_env, 1);

	return rc ? dd_mdb_error(err, rc, "lmdb sync") : 0;
}

static int dd_db_open_flags(dd_db **out, dd_err *err, const char *dir,
			    bool create, bool readonly, unsigned mdb_flags,
			    uint64_t check_max)
{
	struct stat st, data;
	char file[4200];
	dd_db *db;
	int rc;

	/* LMDB creates a missing data.mdb: only a new store may get one.
	 * A missing catalog is damage with a way out, and the command that
	 * meets it must leave the store as it is for repair. */
	snprintf(file, sizeof(file), "%s/data.mdb", dir);
	if (!create && (stat(dir, &st) != 0 || stat(file, &data) != 0))
		return errno == ENOENT
			       ? dd_db_damage(err, "%s is missing", file)
			       : dd_err_set_errno(err, errno, "%s", file);
	if (stat(dir, &st) != 0)
		return dd_err_set(err, dd_errno_code(errno), "%s: %s", dir,
				  strerror(errno));
	pthread_mutex_lock(&dd_db_registry_lock);
	db = dd_db_registry_find(st.st_dev, st.st_ino);
	if (db) {
		db->db_refs++;
		pthread_mutex_unlock(&dd_db_registry_lock);
		*out = db;
		return 0;
	}
	db = dd_calloc(1, sizeof(*db));
	if (!db) {
		rc = dd_err_set(err, DD_ENOMEM, "out of memory");
		goto unlock;
	}
	pthread_mutex_init(&db->db_kf_lock, NULL);
	rc = mdb_env_create(&db->db_env);
	if (rc) {
		rc = dd_mdb_error(err, rc, "lmdb env");
		goto fail;
	}
	mdb_env_set_maxdbs(db->db_env, DD_DBI_COUNT + 2);
	mdb_env_set_mapsize(db->db_env, DD_DB_MAPSIZE);
	mdb_env_set_maxreaders(db->db_env, 1022);
	rc = mdb_env_open(db->db_env, dir,
			  MDB_NOTLS | mdb_flags | (readonly ? MDB_RDONLY : 0),
			  0644);
	if (rc) {
		rc = dd_mdb_error(err, rc, dir);
		goto fail;
	}
	db->db_guard_off = !dd_db_layout_known();
	dd_db_find_map(db);
	/* DDT lookups are random: a hint against read-ahead.  It does not
	 * stop fault-around (measured on Linux 6.18: 16 pages mapped per
	 * fault with or without it).  The map's pages are page cache, not
	 * memory this process owns (docs/design.md, Memory): they are never
	 * trimmed -- dropping them cost a 4 KiB put of a 1 GiB copy 11 s of
	 * system time in faults once the catalog was 300 MiB */
	if (db->db_map)
		madvise(db->db_map, db->db_map_len, MADV_RANDOM);
	/* the guard's probe first: it checks that the file holds every page
	 * the meta page counts, before anything reads the pages */
	rc = dd_db_guard_open(db, err, dir);
	if (!rc)
		rc = dd_db_check_env(db->db_env, err, check_max, NULL, NULL);
	if (!rc)
		rc = dd_db_open_dbis(db, err, create);
	if (rc)
		goto fail;
	db->db_dev = st.st_dev;
	db->db_ino = st.st_ino;
	db->db_refs = 1;
	db->db_next = dd_db_registry;
	dd_db_registry = db;
	pthread_mutex_unlock(&dd_db_registry_lock);
	*out = db;
	return 0;
fail:
	dd_guard_close(db);
	if (db->db_env)
		mdb_env_close(db->db_env);
	pthread_mutex_destroy(&db->db_kf_lock);
	dd_free(db);
unlock:
	pthread_mutex_unlock(&dd_db_registry_lock);
	return rc;
}

void dd_db_close(dd_db *db)
{
	if (!db)
		return;
	pthread_mutex_lock(&dd_db_registry_lock);
	if (--db->db_refs > 0) {
		pthread_mutex_unlock(&dd_db_registry_lock);
		return;
	}
	for (dd_db **pp = &dd_db_registry; *pp; pp = &(*pp)->db_next) {
		if (*pp == db) {
			*pp = db->db_next;
			break;
		}
	}
	pthread_mutex_unlock(&dd_db_registry_lock);
	dd_guard_close(db);
	dd_db_kf_close(db);
	mdb_env_close(db->db_env);
	pthread_mutex_destroy(&db->db_kf_lock);
	dd_free(db);
}

/* The live DDT is named in meta (format/ddt.md §4), and its runs
 * counted (§5); read once per txn. */
static int dd_txn_load_ddt(dd_txn *txn, dd_err *err)
{
	uint64_t which = 0;
	int rc = dd_meta_get_u64(txn, err, "ddt.live", &which);

	if (rc == DD_ENOENT)
		which = 0;
	else if (rc)
		return rc;
	if (which > 1)
		return dd_db_damage(err,
				    "meta ddt.live is %llu, expected 0 or 1",
				    (unsigned long long)which);
	txn->tx_ddt = txn->tx_db->db_dbi[which ? DD_DBI_DDT1 : DD_DBI_DDT0];
	txn->tx_ddt_other = txn->tx_db->db_dbi[which ? DD_DBI_DDT0 : DD_DBI_DDT1];
	txn->tx_ddt_which = (unsigned)which;
	return dd_ddt_runs_load(txn, err);
}

/* Begins txn's LMDB transaction (or renews a parked read one) and the
 * guard's view of its snapshot.  Two commits landing in between take
 * the snapshot's meta page away: then it starts over.  On failure no
 * LMDB transaction is live (a parked one stays parked). */
static int dd_txn_start(dd_txn *txn, dd_err *err, bool renew)
{
	dd_db *db = txn->tx_db;

	for (int attempt = 0; attempt < 16; attempt++) {
		int rc = renew ? mdb_txn_renew(txn->tx_mdb)
			       : mdb_txn_begin(db->db_env, NULL, txn->tx_write
					       ? 0 : MDB_RDONLY, &txn->tx_mdb);

		if (rc)
			return dd_mdb_error(err, rc, renew ? "lmdb renew"
							   : "lmdb begin");
		txn->tx_same_snap = renew && dd_guard_holds(txn);
		if (txn->tx_same_snap)
			return 0;
		rc = dd_guard_begin(txn, err);
		if (rc == 0)
			return 0;
		if (renew)
			mdb_txn_reset(txn->tx_mdb);
		else
			mdb_txn_abort(txn->tx_mdb);
		if (rc != DD_DB_CHECK_RETRY)
			return rc;
	}
	return dd_err_set(err, DD_EBUSY, "lmdb: writers kept committing while "
			  "a transaction began");
}

int dd_txn_begin(dd_db *db, dd_err *err, bool write, dd_txn **out)
{
	dd_txn *txn = dd_calloc(1, sizeof(*txn));
	int rc;

	if (!txn)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	txn->tx_db = db;
	txn->tx_write = write;
	rc = dd_txn_start(txn, err, false);
	if (rc) {
		dd_guard_end(txn);
		dd_free(txn);
		return rc;
	}
	rc = dd_txn_load_ddt(txn, err);
	if (rc) {
		dd_txn_abort(txn);
		return rc;
	}
	*out = txn;
	return 0;
}

/* LMDB reports a short write as EIO (errno is not set for it): on a full
 * file system that is ENOSPC, which is what the user needs to hear. */
static int dd_commit_error(dd_db *db, dd_err *err, int rc)
{
	const char *path;
	struct statvfs vfs;

	if (rc == EIO && mdb_env_get_path(db->db_env, &path) == 0 &&
	    statvfs(path, &vfs) == 0 &&
	    (uint64_t)vfs.f_bavail * vfs.f_frsize < ((uint64_t)4 << 20))
		return dd_err_set(err, DD_ENOSPC, "lmdb commit: %s",
				  strerror(ENOSPC));
	return dd_mdb_error(err, rc, "lmdb commit");
}

int dd_txn_commit(dd_txn *txn, dd_err *err)
{
	dd_db *db = txn->tx_db;
	uint64_t id = txn->tx_write ? (uint64_t)mdb_txn_id(txn->tx_mdb) : 0;
	/* the filter's bits of the keys this commit inserts first, and its
	 * chain of commits (kfilter.h's invariant) */
	int rc = dd_kf_txn_commit(txn, err);

	if (!rc)   /* and the chain of the unflagged claim (ddt.c) */
		rc = dd_ddt_txn_commit(txn, err);
	if (rc) {
		dd_txn_abort(txn);
		return rc;
	}
	rc = mdb_txn_commit(txn->tx_mdb);

	/* LMDB's own commit on a snapshot whose free list was checked leaves
	 * one that needs no check (guard.c, dd_guard_free_pages) */
	if (!rc && id)
		atomic_compare_exchange_strong(&db->db_free_checked,
					       &(uint64_t){id - 1}, id);

	dd_guard_end(txn);
	dd_free(txn);
	if (rc)
		return dd_commit_error(db, err, rc);
	return 0;
}

void dd_txn_abort(dd_txn *txn)
{
	if (!txn)
		return;
	mdb_txn_abort(txn->tx_mdb);
	dd_guard_end(txn);
	dd_free(txn);
}

void dd_txn_reset(dd_txn *txn)
{
	if (!txn || txn->tx_write || txn->tx_parked)
		return;
	mdb_txn_reset(txn->tx_mdb);
	txn->tx_parked = true;
}

int dd_txn_renew(dd_txn *txn, dd_err *err)
{
	int rc;

	if (txn->tx_write)
		return dd_err_set(err, DD_EINVAL, "lmdb renew of a write txn");
	if (!txn->tx_parked)
		return 0;
	rc = dd_txn_start(txn, err, true);
	if (rc)
		return rc; /* still parked */
	txn->tx_parked = false;
	return txn->tx_same_snap ? 0 : dd_txn_load_ddt(txn, err);
}

/* ---- a table's operations, guarded ------------------------------------------*/

int dd_table_get(dd_txn *txn, dd_err *err, int tree, MDB_val *k, MDB_val *v,
		 const char *what)
{
	int rc = dd_guard_key(txn, err, tree, k->mv_data, k->mv_size,
			      DD_GUARD_READ);

	if (rc)
		return rc;
	rc = dd_guard_get(txn, tree, k, v);
	if (rc >= 0)
		return rc ? 0 : DD_ENOENT;
	rc = mdb_get(txn->tx_mdb, txn->tx_db->db_dbi[tree], k, v);
	if (rc == MDB_NOTFOUND)
		return DD_ENOENT;
	return rc ? dd_mdb_error(err, rc, what) : 0;
}

int dd_table_put(dd_txn *txn, dd_err *err, int tree, MDB_val *k, MDB_val *v,
		 unsigned flags, const char *what)
{
	int rc = dd_guard_key(txn, err, tree, k->mv_data, k->mv_size,
			      (flags & MDB_APPEND) ? DD_GUARD_APPEND
						   : DD_GUARD_PUT);

	if (rc)
		return rc;
	rc = mdb_put(txn->tx_mdb, txn->tx_db->db_dbi[tree], k, v, flags);
	/* MDB_APPEND: the key is not past the last; MDB_NOOVERWRITE: it is
	 * there, and v now points at its value */
	if (rc == MDB_KEYEXIST && (flags & (MDB_APPEND | MDB_NOOVERWRITE)))
		return DD_EEXIST;
	return rc ? dd_mdb_error(err, rc, what) : 0;
}

int dd_table_del(dd_txn *txn, dd_err *err, int tree, MDB_val *k,
		 const char *what)
{
	int rc = dd_guard_key(txn, err, tree, k->mv_data, k->mv_size,
			      DD_GUARD_DEL);

	if (rc)
		return rc;
	rc = mdb_del(txn->tx_mdb, txn->tx_db->db_dbi[tree], k, NULL);
	if (rc == MDB_NOTFOUND)
		return DD_ENOENT;
	return rc ? dd_mdb_error(err, rc, what) : 0;
}

int dd_table_walk(dd_txn *txn, dd_err *err, int tree, dd_table_fn fn,
		  void *ctx, const char *what)
{
	struct dd_guard_cur guard;
	MDB_cursor *cur;
	MDB_val k, v;
	int rc = mdb_cursor_open(txn->tx_mdb, txn->tx_db->db_dbi[tree], &cur);

	if (rc)
		return dd_mdb_error(err, rc, what);
	dd_guard_cur_init(&guard, tree);
	for (rc = dd_cursor_seek(txn, err, cur, &guard, NULL, 0, &k, &v, what);
	     rc == 1; rc = dd_cursor_next(txn, err, cur, &guard, &k, &v, what)) {
		int r = fn(ctx, err, &k, &v);

		if (r) {
			mdb_cursor_close(cur);
			return r;
		}
	}
	mdb_cursor_close(cur);
	return rc;
}

/* ---- meta ---------------------------------------------------------------*/

int dd_meta_get_u64(dd_txn *txn, dd_err *err, const char *key, uint64_t *out)
{
	MDB_val k = {strlen(key), (void *)key}, v;
	int rc = dd_table_get(txn, err, DD_DBI_META, &k, &v, "lmdb get meta");

	if (rc)
		return rc;
	if (v.mv_size != 8)
		return dd_db_damage(err,
				    "meta %s has %zu bytes, expected 8", key,
				    v.mv_size);
	*out = dd_get_le64(v.mv_data);
	return 0;
}

int dd_meta_put_u64(dd_txn *txn, dd_err *err, const char *key, uint64_t val)
{
	uint8_t buf[8];
	MDB_val k = {strlen(key), (void *)key}, v = {8, buf};

	dd_put_le64(buf, val);
	return dd_table_put(txn, err, DD_DBI_META, &k, &v, 0, "lmdb put meta");
}

int dd_meta_feature(dd_txn *txn, dd_err *err, uint64_t bit, bool on)
{
	uint64_t f = 0, want;
	int rc = dd_meta_get_u64(txn, err, "features", &f);

	if (rc == DD_ENOENT)
		dd_err_clear(err);
	else if (rc)
		return rc;
	want = on ? f | bit : f & ~bit;
	return want == f ? 0 : dd_meta_put_u64(txn, err, "features", want);
}

int dd_db_usage_get(dd_txn *txn, dd_err *err, dd_db_usage *out)
{
	MDB_stat st;
	MDB_envinfo info;
	int rc;

	memset(out, 0, sizeof(*out));
	for (int i = 0; i < DD_DBI_COUNT; i++) {
		MDB_dbi dbi = txn->tx_db->db_dbi[i];
		uint64_t bytes;

		rc = mdb_stat(txn->tx_mdb, dbi, &st);
		if (rc)
			return dd_mdb_error(err, rc, "lmdb stat");
		bytes = (uint64_t)(st.ms_branch_pages + st.ms_leaf_pages +
				   st.ms_overflow_pages) * st.ms_psize;
		if (dbi == txn->tx_ddt) {
			out->ddt_entries = st.ms_entries;
			out->ddt_bytes = bytes;
		} else {
			out->meta_bytes += bytes;
		}
	}
	rc = mdb_env_info(txn->tx_db->db_env, &info);
	if (rc)
		return dd_mdb_error(err, rc, "lmdb info");
	rc = mdb_env_stat(txn->tx_db->db_env, &st);
	if (rc)
		return dd_mdb_error(err, rc, "lmdb stat");
	out->file_bytes = (uint64_t)(info.me_last_pgno + 1) * st.ms_psize;
	return 0;
}

/* ---- readers ----------------------------------------------------------------*/

struct dd_reader_scan {
	uint64_t rs_oldest;
};

/* mdb_reader_list prints a header line, then "pid thread txnid" per
 * reader slot, txnid "-" for a slot without a transaction. */
static int dd_reader_line(const char *msg, void *arg)
{
	struct dd_reader_scan *rs = arg;
	unsigned long long txnid;
	char tid[32];
	int pid;

	if (sscanf(msg, "%d %31s %llu", &pid, tid, &txnid) == 3 &&
	    txnid < rs->rs_oldest)
		rs->rs_oldest = txnid;
	return 0;
}

int dd_db_last_commit(dd_db *db, dd_err *err, uint64_t *txnid)
{
	MDB_envinfo info;
	int rc = mdb_env_info(db->db_env, &info);

	if (rc)
		return dd_mdb_error(err, rc, "lmdb env info");
	*txnid = (uint64_t)info.me_last_txnid;
	/* what was set before that commit, as this process reads it next */
	atomic_thread_fence(memory_order_acquire);
	return 0;
}

int dd_db_oldest_reader(dd_db *db, dd_err *err, uint64_t *txnid)
{
	struct dd_reader_scan rs = {UINT64_MAX};
	int dead, rc = mdb_reader_check(db->db_env, &dead);

	if (rc)
		return dd_mdb_error(err, rc, "lmdb reader check");
	rc = mdb_reader_list(db->db_env, dd_reader_line, &rs);
	if (rc < 0)
		return dd_err_set(err, DD_EIO, "lmdb reader list failed");
	*txnid = rs.rs_oldest;
	return 0;
}

