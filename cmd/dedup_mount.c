/*
 * dedup_mount.c -- `dedup mount`: the snapshots of a store as read-only
 * files of a FUSE file system (libfuse3), one file per snapshot, of its
 * size; and `dedup umount`.
 *
 * Reads go through the public API only: dd_reader_pread on the store's
 * handle, so through its L1 and L2 caches, every block checked against
 * its hash.  The store handle is shared by libfuse's threads (dd_store is
 * thread-safe); a reader is not, so each open file keeps a small stack of
 * idle readers, and a read takes one for itself -- a new one, up to
 * MOUNT_READERS, when all are busy, so that the kernel's parallel
 * read-ahead requests decompress on several cores.  Snapshots never
 * change, so the kernel may keep their pages cached across opens
 * (kernel_cache).  The directory is listed from the store at each
 * readdir: a snapshot put or removed meanwhile appears or goes; a file
 * already open reads the snapshot as it was (a reader's view), until it
 * is closed.
 *
 * The store is opened after libfuse has daemonized (a fork would lose the
 * store's worker threads); before that, a first open checks it, so that
 * a bad store fails in the foreground with one line.  Built without
 * libfuse3, `dedup mount` says so and exits 1.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dedup_cmd.h"

enum { OPT_MOUNT_OPTS = 'o', OPT_FOREGROUND = 'f' };

#ifdef DD_HAVE_FUSE3

#define FUSE_USE_VERSION 31
#include <fuse.h>
#include <pthread.h>
#include <sys/stat.h>

/* Readers per open file: enough for the kernel's concurrent reads on two
 * to four cores; each holds a read transaction and a block map cursor. */
#define MOUNT_READERS 4
/* Read-ahead of a file read in order: the kernel asks for 128 KiB at a
 * time, one request after the other, which would decompress one block
 * at a time; a window this large is read with one dd_reader_pread, whose
 * blocks decompress in parallel on the store's workers.  While requests
 * are served from one window, a thread of the file fills the next. */
#define MOUNT_RA_BYTES ((uint64_t)2 << 20)

struct mount_ctx {
	const char *store_path;   /* absolute */
	dd_store *store;
	uint32_t block_size;
	uid_t uid;
	gid_t gid;
};

static struct mount_ctx mc;

struct mount_file {
	pthread_mutex_t mf_lock;
	pthread_cond_t mf_idle_cv;
	char mf_name[DD_NAME_MAX + 1];
	dd_snapshot_info mf_info;  /* as at the open: fstat of an open file */
	dd_reader *mf_idle[MOUNT_READERS];
	int mf_nidle;
	int mf_nreaders;          /* open readers, idle or in use */
	/* Read-ahead, all under mf_ra_lock: the window served from, the
	 * next one (its bytes written by the prefetch thread only while
	 * RA_FILLING), and where the last read ended. */
	pthread_mutex_t mf_ra_lock;
	pthread_cond_t mf_ra_cv;      /* a fill asked for, or done */
	struct mount_window {
		uint8_t *w_buf;       /* MOUNT_RA_BYTES once read in order */
		uint64_t w_off, w_len;
		int w_state;          /* enum mount_ra_state (next only) */
	} mf_cur, mf_nxt;
	uint64_t mf_next;
	pthread_t mf_pf_thread;
	int mf_pf_started;
	int mf_pf_stop;
	struct mount_file *mf_link;   /* in mount_open_files */
};

/* The files open now: fstat of one whose snapshot was removed since comes
 * with its name only (the kernel passes no handle), and must still see
 * the file it reads. */
static pthread_mutex_t mount_open_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mount_file *mount_open_files;

static int mount_open_info(const char *name, dd_snapshot_info *out)
{
	int found = 0;

	pthread_mutex_lock(&mount_open_lock);
	for (struct mount_file *mf = mount_open_files; mf && !found;
	     mf = mf->mf_link)
		if (strcmp(mf->mf_name, name) == 0) {
			*out = mf->mf_info;
			found = 1;
		}
	pthread_mutex_unlock(&mount_open_lock);
	return found;
}

/* errno for a library code. */
static int mount_errno(int rc)
{
	switch (rc) {
	case DD_ENOENT:
	case DD_ENAME:
		return ENOENT;
	case DD_ENOMEM:
		return ENOMEM;
	case DD_EPERM:
		return EACCES;
	default:
		return EIO;
	}
}

/* "/name" -> "name"; NULL for the root or a deeper path. */
static const char *mount_name(const char *path)
{
	if (path[0] != '/' || !path[1] || strchr(path + 1, '/'))
		return NULL;
	return path + 1;
}

static void mount_stat_snapshot(struct stat *st, const dd_snapshot_info *si)
{
	uint64_t data = (si->blocks - si->zero_blocks) *
			(uint64_t)mc.block_size;

	st->st_mode = S_IFREG | 0444;
	st->st_nlink = 1;
	st->st_size = (off_t)si->size;
	/* what du shows: the bytes that are not holes */
	st->st_blocks = (blkcnt_t)((data < si->size ? data : si->size) / 512);
	st->st_blksize = (blksize_t)mc.block_size;
	st->st_mtime = (time_t)si->ctime;
	st->st_ctime = (time_t)si->ctime;
	st->st_atime = (time_t)si->ctime;
	st->st_uid = mc.uid;
	st->st_gid = mc.gid;
}

static int mount_getattr(const char *path, struct stat *st,
			 struct fuse_file_info *fi)
{
	dd_snapshot_info si;
	const char *name;
	int rc;

	memset(st, 0, sizeof(*st));
	if (fi && fi->fh) {
		/* an open file, maybe of a snapshot removed since */
		mount_stat_snapshot(st, &((struct mount_file *)(uintptr_t)
					  fi->fh)->mf_info);
		return 0;
	}
	if (!path)
		return -ESTALE;
	if (strcmp(path, "/") == 0) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		st->st_uid = mc.uid;
		st->st_gid = mc.gid;
		return 0;
	}
	name = mount_name(path);
	if (!name || dd_name_check(name) != 0)
		return -ENOENT;
	rc = dd_snapshot_stat(mc.store, name, &si);
	if (rc == DD_ENOENT && mount_open_info(name, &si))
		rc = 0;
	if (rc != 0)
		return -mount_errno(rc);
	mount_stat_snapshot(st, &si);
	return 0;
}

static int mount_readdir(const char *path, void *buf, fuse_fill_dir_t filler,
			 off_t off, struct fuse_file_info *fi,
			 enum fuse_readdir_flags flags)
{
	dd_snapshot_info *list = NULL;
	size_t n = 0;
	int rc;

	(void)off;
	(void)fi;
	(void)flags;
	/* no path (nullpath_ok): the root, the only directory */
	if (path && strcmp(path, "/") != 0)
		return -ENOTDIR;
	rc = dd_snapshot_list(mc.store, &list, &n);
	if (rc != 0)
		return -mount_errno(rc);
	filler(buf, ".", NULL, 0, 0);
	filler(buf, "..", NULL, 0, 0);
	for (size_t i = 0; i < n; i++) {
		struct stat st;

		memset(&st, 0, sizeof(st));
		mount_stat_snapshot(&st, &list[i]);
		if (filler(buf, list[i].name, &st, 0, 0))
			break;
	}
	dd_snapshot_list_free(list);
	return 0;
}

static int mount_open(const char *path, struct fuse_file_info *fi)
{
	const char *name = mount_name(path);
	struct mount_file *mf;
	dd_reader *r = NULL;
	int rc;

	if (!name)
		return -ENOENT;
	if ((fi->flags & O_ACCMODE) != O_RDONLY)
		return -EROFS;
	mf = calloc(1, sizeof(*mf));
	if (!mf)
		return -ENOMEM;
	rc = dd_reader_open(&r, mc.store, name);
	if (rc == 0)
		rc = dd_snapshot_stat(mc.store, name, &mf->mf_info);
	if (rc != 0) {
		dd_reader_close(r);
		free(mf);
		return -mount_errno(rc);
	}
	pthread_mutex_init(&mf->mf_lock, NULL);
	pthread_cond_init(&mf->mf_idle_cv, NULL);
	pthread_mutex_init(&mf->mf_ra_lock, NULL);
	pthread_cond_init(&mf->mf_ra_cv, NULL);
	snprintf(mf->mf_name, sizeof(mf->mf_name), "%s", name);
	mf->mf_idle[0] = r;
	mf->mf_nidle = 1;
	mf->mf_nreaders = 1;
	pthread_mutex_lock(&mount_open_lock);
	mf->mf_link = mount_open_files;
	mount_open_files = mf;
	pthread_mutex_unlock(&mount_open_lock);
	fi->fh = (uint64_t)(uintptr_t)mf;
	fi->keep_cache = 1;     /* a snapshot never changes */
	return 0;
}

/* An idle reader of mf, or a new one while there are fewer than
 * MOUNT_READERS, or the next one to come back. */
static dd_reader *mount_reader_get(struct mount_file *mf)
{
	dd_reader *r = NULL;

	pthread_mutex_lock(&mf->mf_lock);
	while (!mf->mf_nidle && mf->mf_nreaders >= MOUNT_READERS)
		pthread_cond_wait(&mf->mf_idle_cv, &mf->mf_lock);
	if (mf->mf_nidle) {
		r = mf->mf_idle[--mf->mf_nidle];
		pthread_mutex_unlock(&mf->mf_lock);
		return r;
	}
	mf->mf_nreaders++;
	pthread_mutex_unlock(&mf->mf_lock);
	if (dd_reader_open(&r, mc.store, mf->mf_name) == 0)
		return r;
	/* gone meanwhile: wait for one of the readers opened before */
	pthread_mutex_lock(&mf->mf_lock);
	mf->mf_nreaders--;
	while (!mf->mf_nidle)
		pthread_cond_wait(&mf->mf_idle_cv, &mf->mf_lock);
	r = mf->mf_idle[--mf->mf_nidle];
	pthread_mutex_unlock(&mf->mf_lock);
	return r;
}

static void mount_reader_put(struct mount_file *mf, dd_reader *r)
{
	pthread_mutex_lock(&mf->mf_lock);
	mf->mf_idle[mf->mf_nidle++] = r;
	pthread_cond_signal(&mf->mf_idle_cv);
	pthread_mutex_unlock(&mf->mf_lock);
}

/* dd_reader_pread with one of mf's readers. */
static int mount_pread(struct mount_file *mf, void *buf, size_t size,
		       uint64_t off, size_t *got)
{
	dd_reader *r = mount_reader_get(mf);
	int rc = dd_reader_pread(r, buf, size, off, got);

	if (rc != 0)
		/* stderr is the terminal with -f; the reason is worth it */
		fprintf(stderr, "%s: mount: %s: %s\n", util_prog, mf->mf_name,
			lib_msg(dd_reader_errmsg(r), rc));
	mount_reader_put(mf, r);
	return rc;
}

enum mount_ra_state { RA_EMPTY, RA_FILLING, RA_READY };

static int mount_in(const struct mount_window *w, uint64_t off)
{
	return w->w_buf && off >= w->w_off && off < w->w_off + w->w_len;
}

/* The prefetch thread of a file: fills mf_nxt when asked. */
static void *mount_prefetch(void *arg)
{
	struct mount_file *mf = arg;

	pthread_mutex_lock(&mf->mf_ra_lock);
	for (;;) {
		uint64_t off;
		size_t got = 0;
		int rc;

		while (!mf->mf_pf_stop && mf->mf_nxt.w_state != RA_FILLING)
			pthread_cond_wait(&mf->mf_ra_cv, &mf->mf_ra_lock);
		if (mf->mf_pf_stop)
			break;
		off = mf->mf_nxt.w_off;
		pthread_mutex_unlock(&mf->mf_ra_lock);
		rc = mount_pread(mf, mf->mf_nxt.w_buf, MOUNT_RA_BYTES, off, &got);
		pthread_mutex_lock(&mf->mf_ra_lock);
		/* a failed prefetch is no error: the read itself tries again */
		mf->mf_nxt.w_len = rc == 0 ? got : 0;
		mf->mf_nxt.w_state = RA_READY;
		pthread_cond_broadcast(&mf->mf_ra_cv);
	}
	pthread_mutex_unlock(&mf->mf_ra_lock);
	return NULL;
}

/* Asks for the window after the current one, unless it is there or on
 * its way (or the file ends first).  Under mf_ra_lock. */
static void mount_prefetch_next(struct mount_file *mf)
{
	uint64_t end = mf->mf_cur.w_off + mf->mf_cur.w_len;

	if (mf->mf_cur.w_len < MOUNT_RA_BYTES ||
	    mf->mf_nxt.w_state == RA_FILLING ||
	    (mf->mf_nxt.w_state == RA_READY && mf->mf_nxt.w_off == end))
		return;
	if (!mf->mf_nxt.w_buf &&
	    !(mf->mf_nxt.w_buf = malloc(MOUNT_RA_BYTES)))
		return;
	if (!mf->mf_pf_started) {
		if (pthread_create(&mf->mf_pf_thread, NULL, mount_prefetch,
				   mf) != 0)
			return;
		mf->mf_pf_started = 1;
	}
	mf->mf_nxt.w_off = end;
	mf->mf_nxt.w_len = 0;
	mf->mf_nxt.w_state = RA_FILLING;
	pthread_cond_broadcast(&mf->mf_ra_cv);
}

/* A read near where the last one ended (the kernel's concurrent requests
 * may come a little out of order), or in a window: served from the
 * windows, filled ahead by the prefetch thread, or now when it is not
 * there.  -1 when the read is not in order (the caller reads it
 * directly).  Under mf_ra_lock throughout but while the next window
 * waits to be filled. */
static int mount_read_ahead(struct mount_file *mf, char *buf, size_t size,
			    uint64_t off)
{
	struct mount_window *cur = &mf->mf_cur, *nxt = &mf->mf_nxt, tmp;
	size_t got = 0;
	int rc = 0;

	pthread_mutex_lock(&mf->mf_ra_lock);
	if ((off + MOUNT_RA_BYTES < mf->mf_next ||
	     off > mf->mf_next + MOUNT_RA_BYTES) &&
	    !mount_in(cur, off) && !mount_in(nxt, off) &&
	    !(nxt->w_state == RA_FILLING && off >= nxt->w_off &&
	      off < nxt->w_off + MOUNT_RA_BYTES)) {
		pthread_mutex_unlock(&mf->mf_ra_lock);
		return -1;
	}
	for (;;) {
		if (mount_in(cur, off) &&
		    (off + size <= cur->w_off + cur->w_len ||
		     cur->w_len < MOUNT_RA_BYTES))
			break;
		if (nxt->w_state == RA_FILLING && off >= nxt->w_off &&
		    off < nxt->w_off + MOUNT_RA_BYTES) {
			pthread_cond_wait(&mf->mf_ra_cv, &mf->mf_ra_lock);
			continue;
		}
		if (nxt->w_state == RA_READY && mount_in(nxt, off)) {
			tmp = *cur;    /* the next window becomes the current */
			*cur = *nxt;
			*nxt = tmp;
			nxt->w_len = 0;
			nxt->w_state = RA_EMPTY;
			continue;
		}
		/* not there: read the window now (the read straddles the
		 * current one's end, or the prefetch was elsewhere) */
		if (!cur->w_buf && !(cur->w_buf = malloc(MOUNT_RA_BYTES))) {
			pthread_mutex_unlock(&mf->mf_ra_lock);
			return -1;
		}
		cur->w_off = off / mc.block_size * mc.block_size;
		cur->w_len = 0;
		rc = mount_pread(mf, cur->w_buf, MOUNT_RA_BYTES, cur->w_off,
				 &got);
		if (rc != 0)
			break;
		cur->w_len = got;
		if (!mount_in(cur, off))
			break;          /* at or past the end of the file */
	}
	got = 0;
	if (rc == 0 && mount_in(cur, off)) {
		uint64_t have = cur->w_off + cur->w_len - off;

		got = size < have ? size : (size_t)have;
		memcpy(buf, cur->w_buf + (off - cur->w_off), got);
		if (off + got > mf->mf_next)
			mf->mf_next = off + got;
		mount_prefetch_next(mf);
	}
	pthread_mutex_unlock(&mf->mf_ra_lock);
	return rc != 0 ? -mount_errno(rc) : (int)got;
}

static int mount_read(const char *path, char *buf, size_t size, off_t off,
		      struct fuse_file_info *fi)
{
	struct mount_file *mf = (struct mount_file *)(uintptr_t)fi->fh;
	size_t got = 0;
	int rc;

	(void)path;
	if (off < 0)
		return -EINVAL;
	if (size <= MOUNT_RA_BYTES / 2 &&
	    (rc = mount_read_ahead(mf, buf, size, (uint64_t)off)) != -1)
		return rc;
	rc = mount_pread(mf, buf, size, (uint64_t)off, &got);
	return rc != 0 ? -mount_errno(rc) : (int)got;
}

static int mount_release(const char *path, struct fuse_file_info *fi)
{
	struct mount_file *mf = (struct mount_file *)(uintptr_t)fi->fh;

	(void)path;
	pthread_mutex_lock(&mount_open_lock);
	for (struct mount_file **p = &mount_open_files; *p; p = &(*p)->mf_link)
		if (*p == mf) {
			*p = mf->mf_link;
			break;
		}
	pthread_mutex_unlock(&mount_open_lock);
	if (mf->mf_pf_started) {
		pthread_mutex_lock(&mf->mf_ra_lock);
		mf->mf_pf_stop = 1;
		pthread_cond_broadcast(&mf->mf_ra_cv);
		pthread_mutex_unlock(&mf->mf_ra_lock);
		pthread_join(mf->mf_pf_thread, NULL);
	}
	/* the kernel releases a file once no read of it is running, and the
	 * prefetch thread has given its reader back */
	for (int i = 0; i < mf->mf_nidle; i++)
		dd_reader_close(mf->mf_idle[i]);
	pthread_cond_destroy(&mf->mf_idle_cv);
	pthread_mutex_destroy(&mf->mf_lock);
	pthread_cond_destroy(&mf->mf_ra_cv);
	pthread_mutex_destroy(&mf->mf_ra_lock);
	free(mf->mf_cur.w_buf);
	free(mf->mf_nxt.w_buf);
	free(mf);
	return 0;
}

static void *mount_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	(void)conn;
	cfg->kernel_cache = 1;
	/* reads of an open file need no path: a snapshot removed while open
	 * has none, and its file still reads (the reader's view) */
	cfg->nullpath_ok = 1;
	/* the list may change (put, rm): names are looked up again after a
	 * second, as libfuse's defaults do */
	cfg->entry_timeout = 1.0;
	cfg->attr_timeout = 1.0;
	cfg->negative_timeout = 1.0;
	return NULL;
}

static const struct fuse_operations mount_ops = {
	.getattr = mount_getattr,
	.readdir = mount_readdir,
	.open = mount_open,
	.read = mount_read,
	.release = mount_release,
	.init = mount_init,
};

/* The store opens and lists its snapshots: checked before detaching. */
static void mount_check_store(const char *path)
{
	dd_open_opts oo = DD_OPEN_OPTS_INIT;
	dd_snapshot_info *list = NULL;
	dd_store_info info;
	dd_store *s = NULL;
	size_t n = 0;
	int rc;

	oo.readonly = 1;
	oo.no_cache = 1;      /* the caches are the mounted handle's */
	rc = dd_store_open(&s, path, &oo);
	if (rc != 0)
		die("%s", lib_msg(dd_store_errmsg(NULL), rc));
	rc = dd_snapshot_list(s, &list, &n);
	if (rc == 0)
		rc = dd_store_info_get(s, &info);
	if (rc != 0)
		die_store(s, rc);
	mc.block_size = info.block_size;
	dd_snapshot_list_free(list);
	dd_store_close(s);
}

int cmd_mount(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"help", no_argument, NULL, OPT_HELP},
		{"foreground", no_argument, NULL, OPT_FOREGROUND},
		CACHE_LONGOPTS,
		{NULL, 0, NULL, 0},
	};
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	char store_abs[PATH_MAX], mnt_abs[PATH_MAX], fsname[PATH_MAX + 32];
	int c, foreground = 0, rc;
	struct fuse *f;

	if (fuse_opt_add_arg(&args, "dedup") != 0)
		die("out of memory");
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hfo:", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_HELP:
			usage_exit();
		case OPT_FOREGROUND:
			foreground = 1;
			break;
		case OPT_MOUNT_OPTS:
			if (fuse_opt_add_arg(&args, "-o") != 0 ||
			    fuse_opt_add_arg(&args, optarg) != 0)
				die("out of memory");
			break;
		default:
			other_option(c, argv);
		}
	}
	want_args(argc, argv, 2, 2);
	if (!realpath(argv[optind], store_abs))
		die("%s: %s", argv[optind], strerror(errno));
	if (!realpath(argv[optind + 1], mnt_abs))
		die("%s: %s", argv[optind + 1], strerror(errno));
	mc.store_path = store_abs;
	mc.uid = getuid();
	mc.gid = getgid();
	mount_check_store(store_abs);

	/* read-only, and named after the store in /proc/mounts */
	snprintf(fsname, sizeof(fsname), "ro,fsname=dedup:%s,subtype=dedup",
		 store_abs);
	if (strchr(store_abs, ','))
		snprintf(fsname, sizeof(fsname), "ro,subtype=dedup");
	if (fuse_opt_add_arg(&args, "-o") != 0 ||
	    fuse_opt_add_arg(&args, fsname) != 0)
		die("out of memory");
	f = fuse_new(&args, &mount_ops, sizeof(mount_ops), NULL);
	if (!f)
		die("cannot set up the FUSE file system (options: see "
		    "'man mount.fuse3')");
	if (fuse_mount(f, mnt_abs) != 0) {
		fuse_destroy(f);
		die("cannot mount on %s (is /dev/fuse there, and fusermount3 "
		    "installed?)", mnt_abs);
	}
	if (fuse_set_signal_handlers(fuse_get_session(f)) != 0 ||
	    fuse_daemonize(foreground) != 0) {
		fuse_unmount(f);
		fuse_destroy(f);
		die("cannot start the FUSE session on %s", mnt_abs);
	}
	/* after the fork: the store's threads belong to this process */
	mc.store = open_store(store_abs, 0, 1);
	rc = fuse_loop_mt(f, 0);
	fuse_remove_signal_handlers(fuse_get_session(f));
	fuse_unmount(f);
	fuse_destroy(f);
	fuse_opt_free_args(&args);
	cache_cli_close(mc.store);
	return rc == 0 ? 0 : 1;
}

#else /* !DD_HAVE_FUSE3 */

int cmd_mount(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	die("mount: this dedup was built without libfuse3 (install "
	    "libfuse3-dev, then run cmake again and rebuild)");
}

#endif /* DD_HAVE_FUSE3 */

/* ---- umount -------------------------------------------------------------*/

int cmd_umount(int argc, char **argv)
{
	static const int allow[] = {0};
	struct common_opts o;
	char why[512] = "";
	const char *mnt;
	int status, fds[2];
	ssize_t n;
	pid_t pid;

	parse_common(argc, argv, allow, &o);
	want_args(argc, argv, 1, 1);
	mnt = argv[optind];
	fflush(NULL);
	/* fusermount3's complaint comes back through a pipe, to be said in
	 * our one line */
	if (pipe(fds) != 0)
		die("pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		close(fds[0]);
		dup2(fds[1], STDERR_FILENO);
		execlp("fusermount3", "fusermount3", "-u", "--", mnt,
		       (char *)NULL);
		_exit(errno == ENOENT ? 127 : 126);
	}
	close(fds[1]);
	n = read_full(fds[0], why, sizeof(why) - 1);
	why[n > 0 ? n : 0] = '\0';
	close(fds[0]);
	why[strcspn(why, "\n")] = '\0';
	if (waitpid(pid, &status, 0) < 0)
		die("waitpid: %s", strerror(errno));
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	/* no fusermount3: root can unmount itself */
	if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
		if (umount2(mnt, 0) == 0)
			return 0;
		die("umount %s: %s", mnt, strerror(errno));
	}
	die("umount %s: %s", mnt, *why ? why : "fusermount3 -u failed");
}
