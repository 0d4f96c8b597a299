/*
 * vdir_local.c -- the local backend of vdir.h: a directory of the file
 * system, held open by its fd, and its files by theirs.
 *
 * Every call that reads, writes, syncs, renames or removes goes through
 * io.h, as the store's code did before it went through vdir: the faults
 * tests inject, the read delay and the messages ("read 0000002a.pack at
 * offset 4096: ...") are io.h's.  What io.h has no wrapper for -- stat,
 * listing, flock, punching holes, writeback hints -- is a plain system
 * call here, as it was in pack/ and store/, not fault-injected.
 *
 * A file is named in messages by its name alone, the directory by the
 * last part of its path ("manifests", "packs"), listing errors by the
 * whole path.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dedup.h>

#include "common/alloc.h"
#include "common/io.h"
#include "common/vdir.h"
#include "common/vdir_local.h"

struct dd_vl_dir {
	int vl_fd;
	const char *vl_label;      /* the last part of vl_path */
	char vl_path[];
};

struct dd_vl_file {
	dd_vfile vlf_base;         /* first: a dd_vfile * is a dd_vl_file * */
	int vlf_fd;
};

static struct dd_vl_dir *dd_vl_dir_of(const dd_vdir *d)
{
	return dd_vdir_priv(d);
}

static int dd_vl_fd(const dd_vfile *f)
{
	return ((const struct dd_vl_file *)f)->vlf_fd;
}

int dd_vdir_local_fd(const dd_vdir *d)
{
	return dd_vl_dir_of(d)->vl_fd;
}

static int dd_vl_open_file(dd_vdir *d, dd_err *err, const char *name,
			   int flags, dd_vfile **out)
{
	struct dd_vl_dir *vl = dd_vl_dir_of(d);
	struct dd_vl_file *f;
	int oflags = (flags & (DD_VF_WRITE | DD_VF_CREATE)) ? O_RDWR
							    : O_RDONLY;
	int fd;

	/* O_EXCL: what is created is never something overwritten */
	if (flags & DD_VF_CREATE)
		oflags |= O_CREAT | O_EXCL;
	fd = dd_io_openat(err, vl->vl_fd, name, oflags | O_CLOEXEC, 0644);
	if (fd < 0) {
		struct stat st;

		/* dd_errno_code has no EEXIST: the callers must tell a
		 * leftover of a crash from an I/O error */
		if ((flags & DD_VF_CREATE) &&
		    fstatat(vl->vl_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
			return dd_err_set(err, DD_EEXIST, "%s already exists",
					  name);
		return fd;
	}
	f = dd_calloc(1, sizeof(*f));
	if (!f) {
		dd_io_close(fd);
		return dd_err_set(err, DD_ENOMEM, "%s: out of memory", name);
	}
	f->vlf_base.vf_dir = d;
	snprintf(f->vlf_base.vf_name, sizeof(f->vlf_base.vf_name), "%s", name);
	f->vlf_fd = fd;
	*out = &f->vlf_base;
	return 0;
}

static int dd_vl_stat(dd_vdir *d, dd_err *err, const char *name,
		      uint64_t *size)
{
	struct stat st;

	if (fstatat(dd_vl_dir_of(d)->vl_fd, name, &st, 0) != 0)
		return dd_err_set_errno(err, errno, "%s", name);
	*size = st.st_size > 0 ? (uint64_t)st.st_size : 0;
	return 0;
}

static int dd_vl_unlink(dd_vdir *d, dd_err *err, const char *name)
{
	return dd_io_unlinkat(err, dd_vl_dir_of(d)->vl_fd, name, 0);
}

static int dd_vl_rename(dd_vdir *d, dd_err *err, const char *from,
			const char *to, bool noreplace)
{
	return dd_io_renameat(err, dd_vl_dir_of(d)->vl_fd, from, to,
			      noreplace ? RENAME_NOREPLACE : 0);
}

static int dd_vl_sync(dd_vdir *d, dd_err *err)
{
	struct dd_vl_dir *vl = dd_vl_dir_of(d);

	return dd_io_fsync_dirfd(err, vl->vl_fd, vl->vl_label);
}

static int dd_vl_list(dd_vdir *d, dd_err *err, dd_vdir_list_fn fn, void *arg)
{
	struct dd_vl_dir *vl = dd_vl_dir_of(d);
	/* a stream of its own: the directory's fd stays free for the
	 * *at calls of fn and of other threads */
	int dfd = dup(vl->vl_fd);
	DIR *dir = dfd >= 0 ? fdopendir(dfd) : NULL;
	struct dirent *de;
	int rc = 0;

	if (!dir) {
		rc = dd_err_set_errno(err, errno, "%s", vl->vl_path);
		if (dfd >= 0)
			close(dfd);
		return rc;
	}
	/* a dup shares the offset of the fd: start from the beginning */
	rewinddir(dir);
	while (!rc && (errno = 0, de = readdir(dir)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		rc = fn(arg, de->d_name);
	}
	if (!rc && errno)
		rc = dd_err_set_errno(err, errno, "read %s", vl->vl_path);
	closedir(dir);
	return rc;
}

static void dd_vl_close(dd_vdir *d)
{
	struct dd_vl_dir *vl = dd_vl_dir_of(d);

	dd_io_close(vl->vl_fd);
	dd_free(vl);
}

/* ---- files -----------------------------------------------------------------*/

static void dd_vl_file_close(dd_vfile *f)
{
	dd_io_close(dd_vl_fd(f));
	dd_free(f);
}

static int dd_vl_pread(dd_vfile *f, dd_err *err, void *buf, size_t len,
		       uint64_t off, size_t *got)
{
	return dd_io_pread(err, dd_vl_fd(f), buf, len, off, got, f->vf_name);
}

static int dd_vl_pwrite_full(dd_vfile *f, dd_err *err, const void *buf,
			     size_t len, uint64_t off)
{
	return dd_io_pwrite_full(err, dd_vl_fd(f), buf, len, off, f->vf_name);
}

static int dd_vl_size(dd_vfile *f, dd_err *err, uint64_t *size)
{
	return dd_io_fsize(err, dd_vl_fd(f), size, f->vf_name);
}

static int dd_vl_truncate(dd_vfile *f, dd_err *err, uint64_t len)
{
	return dd_io_ftruncate(err, dd_vl_fd(f), len, f->vf_name);
}

static int dd_vl_file_sync(dd_vfile *f, dd_err *err)
{
	return dd_io_fdatasync(err, dd_vl_fd(f), f->vf_name);
}

static void dd_vl_writeback(dd_vfile *f, uint64_t off, uint64_t len)
{
	/* a hint: its failure changes nothing, fdatasync reports errors */
	(void)sync_file_range(dd_vl_fd(f), (off64_t)off, (off64_t)len,
			      SYNC_FILE_RANGE_WRITE);
}

static int dd_vl_drop_written(dd_vfile *f, dd_err *err, uint64_t off,
			      uint64_t len, bool synced)
{
	if (synced) {
		dd_io_drop_cached(dd_vl_fd(f), off, len);
		return 0;
	}
	return dd_io_drop_written(err, dd_vl_fd(f), off, len, f->vf_name);
}

static int dd_vl_lock(dd_vfile *f, dd_err *err)
{
	while (flock(dd_vl_fd(f), LOCK_EX | LOCK_NB) != 0) {
		if (errno == EINTR)
			continue;
		if (errno == EWOULDBLOCK)
			return dd_err_set(err, DD_EBUSY, "%s is in use",
					  f->vf_name);
		return dd_err_set_errno(err, errno, "lock %s", f->vf_name);
	}
	return 0;
}

static int dd_vl_punch(dd_vfile *f, dd_err *err, uint64_t off, uint64_t len)
{
	if (fallocate(dd_vl_fd(f), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      (off_t)off, (off_t)len) == 0)
		return 0;
	if (errno == EOPNOTSUPP || errno == ENOSYS)
		return dd_err_set(err, DD_ENOTSUP, "%s: the file system "
				  "cannot punch holes", f->vf_name);
	return dd_err_set_errno(err, errno, "%s: punch %" PRIu64
				" bytes at %" PRIu64, f->vf_name, len, off);
}

int dd_vfile_local_seek_data(dd_vfile *f, uint64_t off, uint64_t *data)
{
	off_t at = lseek(dd_vl_fd(f), (off_t)off, SEEK_DATA);

	if (at < 0 && errno == ENXIO)
		return 1;
	/* any other failure tells nothing: read from off */
	*data = at > (off_t)off ? (uint64_t)at : off;
	return 0;
}

static const dd_vdir_ops dd_vl_ops = {
	.local = true,
	.open_file = dd_vl_open_file,
	.stat = dd_vl_stat,
	.unlink = dd_vl_unlink,
	.rename = dd_vl_rename,
	.sync = dd_vl_sync,
	.list = dd_vl_list,
	.close = dd_vl_close,
	.file_close = dd_vl_file_close,
	.pread = dd_vl_pread,
	.pwrite_full = dd_vl_pwrite_full,
	.size = dd_vl_size,
	.truncate = dd_vl_truncate,
	.file_sync = dd_vl_file_sync,
	.writeback = dd_vl_writeback,
	.drop_written = dd_vl_drop_written,
	.lock = dd_vl_lock,
	.punch = dd_vl_punch,
};

int dd_vdir_open_local(dd_vdir **out, dd_err *err, const char *path)
{
	size_t n = path ? strlen(path) : 0;
	struct dd_vl_dir *vl;
	const char *slash;
	int fd, rc;

	if (!out || !path)
		return dd_err_set(err, DD_EINVAL, "dd_vdir_open_local: bad "
				  "argument");
	fd = dd_io_open(err, path, O_RDONLY | O_DIRECTORY, 0);
	if (fd < 0)
		return fd;
	vl = dd_malloc(sizeof(*vl) + n + 1);
	if (!vl) {
		dd_io_close(fd);
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	}
	vl->vl_fd = fd;
	memcpy(vl->vl_path, path, n + 1);
	slash = strrchr(vl->vl_path, '/');
	vl->vl_label = slash && slash[1] ? slash + 1 : vl->vl_path;
	rc = dd_vdir_new(out, err, &dd_vl_ops, vl);
	if (rc) {
		dd_io_close(fd);
		dd_free(vl);
	}
	return rc;
}
