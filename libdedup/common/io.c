/*
 * io.c -- file I/O wrappers: the one place where system calls on files are
 * made, errors translated (err.h) and faults injected (faults.h).
 *
 * Each wrapper consults its fault class once per call, before touching the
 * file, so "the Nth write fails" means the Nth dd_io_* call, whatever the
 * number of system calls it needs.  EINTR is retried and short transfers
 * are continued: a caller sees a whole transfer or an error, never half.
 * Messages name the file (`what`) and the offset, e.g.
 * "DD_EIO: read pack 0000002a.pack at offset 4096: Input/output error".
 * Every descriptor is opened O_CLOEXEC: the library must not leak fds into
 * programs its host spawns.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dedup.h"
#include "common/faults.h"
#include "common/io.h"

/* Both bounds keep off + len representable as off_t (pread's type). */
static int dd_io_range_ok(dd_err *err, uint64_t off, size_t len,
			  const char *op, const char *what)
{
	if (off > (uint64_t)INT64_MAX || len > (uint64_t)INT64_MAX - off)
		return dd_err_set(err, DD_EINVAL,
				  "%s %s: offset %llu + length %zu too large",
				  op, what, (unsigned long long)off, len);
	return 0;
}

static void dd_io_read_delay(void)
{
	uint32_t us = dd_fault_read_delay_us();
	struct timespec ts;

	if (!us)
		return;
	ts.tv_sec = us / 1000000;
	ts.tv_nsec = (long)(us % 1000000) * 1000;
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

int dd_io_open(dd_err *err, const char *path, int flags, mode_t mode)
{
	int e, fd;

	if (!path)
		return dd_err_set(err, DD_EINVAL, "open: no path");
	e = dd_fault_check(DD_FAULT_OPEN);
	if (e)
		return dd_err_set_errno(err, e, "open %s", path);
	do
		fd = open(path, flags | O_CLOEXEC, mode);
	while (fd < 0 && errno == EINTR);
	if (fd < 0)
		return dd_err_set_errno(err, errno, "open %s", path);
	return fd;
}

int dd_io_openat(dd_err *err, int dirfd, const char *name, int flags,
		 mode_t mode)
{
	int e, fd;

	if (!name)
		return dd_err_set(err, DD_EINVAL, "open: no name");
	e = dd_fault_check(DD_FAULT_OPEN);
	if (e)
		return dd_err_set_errno(err, e, "open %s", name);
	do
		fd = openat(dirfd, name, flags | O_CLOEXEC, mode);
	while (fd < 0 && errno == EINTR);
	if (fd < 0)
		return dd_err_set_errno(err, errno, "open %s", name);
	return fd;
}

void dd_io_close(int fd)
{
	int saved = errno;

	/* Linux releases the fd even when close fails with EINTR, so a retry
	 * could close a descriptor another thread just opened.  Durability
	 * is the business of dd_io_fdatasync, not of close. */
	if (fd >= 0)
		(void)close(fd);
	errno = saved;
}

/* Reads until len bytes or EOF; *got gets the count.  delay: the test
 * read delay applies (every read but the cache tier's). */
static int dd_io_pread_loop(dd_err *err, int fd, void *buf, size_t len,
			    uint64_t off, size_t *got, const char *what,
			    bool delay)
{
	size_t done = 0;
	ssize_t r;
	int e;

	*got = 0;
	e = dd_io_range_ok(err, off, len, "read", what);
	if (e)
		return e;
	e = dd_fault_check(DD_FAULT_READ);
	if (e)
		return dd_err_set_errno(err, e, "read %s at offset %llu", what,
					(unsigned long long)off);
	if (delay)
		dd_io_read_delay();
	while (done < len) {
		r = pread(fd, (char *)buf + done, len - done,
			  (off_t)(off + done));
		if (r < 0) {
			if (errno == EINTR)
				continue;
			*got = done;
			return dd_err_set_errno(err, errno,
						"read %s at offset %llu", what,
						(unsigned long long)(off + done));
		}
		if (r == 0)
			break;
		done += (size_t)r;
	}
	*got = done;
	return 0;
}

static int dd_io_pread_exact(dd_err *err, int fd, void *buf, size_t len,
			     uint64_t off, const char *what, bool delay)
{
	size_t got;
	int rc;

	if (!what)
		what = "file";
	rc = dd_io_pread_loop(err, fd, buf, len, off, &got, what, delay);
	if (rc)
		return rc;
	if (got < len)
		/* A file shorter than its index says is damage, not I/O. */
		return dd_err_set(err, DD_ECORRUPT,
				  "short read %s at offset %llu: %zu of %zu bytes",
				  what, (unsigned long long)off, got, len);
	return 0;
}

int dd_io_pread_full(dd_err *err, int fd, void *buf, size_t len, uint64_t off,
		     const char *what)
{
	return dd_io_pread_exact(err, fd, buf, len, off, what, true);
}

int dd_io_pread_full_nodelay(dd_err *err, int fd, void *buf, size_t len,
			     uint64_t off, const char *what)
{
	return dd_io_pread_exact(err, fd, buf, len, off, what, false);
}

int dd_io_pread(dd_err *err, int fd, void *buf, size_t len, uint64_t off,
		size_t *got, const char *what)
{
	size_t dummy;

	if (!what)
		what = "file";
	return dd_io_pread_loop(err, fd, buf, len, off, got ? got : &dummy,
				what, true);
}

int dd_io_pwrite_full(dd_err *err, int fd, const void *buf, size_t len,
		      uint64_t off, const char *what)
{
	size_t done = 0;
	ssize_t r;
	int e;

	if (!what)
		what = "file";
	e = dd_io_range_ok(err, off, len, "write", what);
	if (e)
		return e;
	e = dd_fault_check(DD_FAULT_WRITE);
	if (e)
		return dd_err_set_errno(err, e, "write %s at offset %llu", what,
					(unsigned long long)off);
	while (done < len) {
		r = pwrite(fd, (const char *)buf + done, len - done,
			   (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			/* pwrite returning 0 for a non-empty write makes no
			 * progress: call it no space rather than spin. */
			return dd_err_set_errno(err, r < 0 ? errno : ENOSPC,
						"write %s at offset %llu", what,
						(unsigned long long)(off + done));
		done += (size_t)r;
	}
	return 0;
}

int dd_io_read(dd_err *err, int fd, void *buf, size_t len, size_t *got,
	       const char *what)
{
	size_t done = 0, dummy;
	ssize_t r;
	int e;

	if (!what)
		what = "input";
	if (!got)
		got = &dummy;
	*got = 0;
	e = dd_fault_check(DD_FAULT_READ);
	if (e)
		return dd_err_set_errno(err, e, "read %s", what);
	/* A pipe hands out what it has; keep reading to fill the buffer so
	 * that a short count means end of stream and nothing else. */
	while (done < len) {
		r = read(fd, (char *)buf + done, len - done);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			*got = done;
			return dd_err_set_errno(err, errno,
						"read %s after %zu bytes", what,
						done);
		}
		if (r == 0)
			break;
		done += (size_t)r;
	}
	*got = done;
	return 0;
}

int dd_io_write_full(dd_err *err, int fd, const void *buf, size_t len,
		     const char *what)
{
	size_t done = 0;
	ssize_t r;
	int e;

	if (!what)
		what = "output";
	e = dd_fault_check(DD_FAULT_WRITE);
	if (e)
		return dd_err_set_errno(err, e, "write %s", what);
	while (done < len) {
		r = write(fd, (const char *)buf + done, len - done);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return dd_err_set_errno(err, r < 0 ? errno : ENOSPC,
						"write %s after %zu bytes",
						what, done);
		done += (size_t)r;
	}
	return 0;
}

int dd_io_fdatasync(dd_err *err, int fd, const char *what)
{
	int e, r;

	if (!what)
		what = "file";
	e = dd_fault_check(DD_FAULT_SYNC);
	if (e)
		return dd_err_set_errno(err, e, "fdatasync %s", what);
	do
		r = fdatasync(fd);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return dd_err_set_errno(err, errno, "fdatasync %s", what);
	return 0;
}

/* [off, off + len) to whole pages, the one holding off + len left out
 * (an append to it would read it back first): [*beg, *end). */
static void io_page_range(uint64_t off, uint64_t len, uint64_t *beg,
			  uint64_t *end)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

	*beg = off / page * page;
	*end = (off + len) / page * page;
}

void dd_io_drop_cached(int fd, uint64_t off, uint64_t len)
{
	uint64_t beg, end;

	io_page_range(off, len, &beg, &end);
	/* a hint: dirty pages stay, clean ones go, nothing is lost */
	if (end > beg)
		(void)posix_fadvise(fd, (off_t)beg, (off_t)(end - beg),
				    POSIX_FADV_DONTNEED);
}

int dd_io_drop_written(dd_err *err, int fd, uint64_t off, uint64_t len,
		       const char *what)
{
	uint64_t beg, end;
	int e, r;

	if (!what)
		what = "file";
	io_page_range(off, len, &beg, &end);
	if (end <= beg)
		return 0;
	e = dd_fault_check(DD_FAULT_SYNC);
	if (e)
		return dd_err_set_errno(err, e, "write back %s", what);
	do
		r = sync_file_range(fd, (off64_t)beg, (off64_t)(end - beg),
				    SYNC_FILE_RANGE_WAIT_BEFORE |
					    SYNC_FILE_RANGE_WRITE |
					    SYNC_FILE_RANGE_WAIT_AFTER);
	while (r < 0 && errno == EINTR);
	if (r < 0 && (errno == EINVAL || errno == ESPIPE || errno == ENOSYS))
		return 0;
	if (r < 0)
		return dd_err_set_errno(err, errno, "write back %s", what);
	dd_io_drop_cached(fd, beg, end - beg);
	return 0;
}

int dd_io_fsync_dir(dd_err *err, const char *dir)
{
	int e, fd, r;

	if (!dir)
		return dd_err_set(err, DD_EINVAL, "fsync: no directory");
	/* Makes created, renamed or removed names durable.  Counted as a
	 * sync, not an open: the open is a detail of how a directory syncs. */
	e = dd_fault_check(DD_FAULT_SYNC);
	if (e)
		return dd_err_set_errno(err, e, "fsync directory %s", dir);
	do
		fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	while (fd < 0 && errno == EINTR);
	if (fd < 0)
		return dd_err_set_errno(err, errno, "open directory %s", dir);
	do
		r = fsync(fd);
	while (r < 0 && errno == EINTR);
	/* Some file systems cannot sync a directory (EINVAL): their names are
	 * as durable as they will ever be, which is not an error of ours. */
	if (r < 0 && errno != EINVAL) {
		e = errno;
		dd_io_close(fd);
		return dd_err_set_errno(err, e, "fsync directory %s", dir);
	}
	dd_io_close(fd);
	return 0;
}

int dd_io_ftruncate(dd_err *err, int fd, uint64_t len, const char *what)
{
	int e, r;

	if (!what)
		what = "file";
	if (len > (uint64_t)INT64_MAX)
		return dd_err_set(err, DD_EINVAL, "truncate %s to %llu: too large",
				  what, (unsigned long long)len);
	e = dd_fault_check(DD_FAULT_WRITE);
	if (e)
		return dd_err_set_errno(err, e, "truncate %s to %llu", what,
					(unsigned long long)len);
	do
		r = ftruncate(fd, (off_t)len);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return dd_err_set_errno(err, errno, "truncate %s to %llu", what,
					(unsigned long long)len);
	return 0;
}

int dd_io_rename(dd_err *err, const char *from, const char *to)
{
	int e;

	if (!from || !to)
		return dd_err_set(err, DD_EINVAL, "rename: no path");
	e = dd_fault_check(DD_FAULT_RENAME);
	if (e)
		return dd_err_set_errno(err, e, "rename %s to %s", from, to);
	if (rename(from, to) < 0)
		return dd_err_set_errno(err, errno, "rename %s to %s", from, to);
	return 0;
}

int dd_io_replace_file(dd_err *err, const char *dir, const char *name,
		       const void *buf, size_t len)
{
	char tmp[4096], fin[4096];
	int fd, rc;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s/%s.tmp", dir, name) >=
	    sizeof(tmp))
		return dd_err_set(err, DD_EINVAL, "%s/%s: path too long", dir,
				  name);
	snprintf(fin, sizeof(fin), "%s/%s", dir, name);
	fd = dd_io_open(err, tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return fd;
	rc = dd_io_pwrite_full(err, fd, buf, len, 0, tmp);
	if (!rc)
		rc = dd_io_fdatasync(err, fd, tmp);
	dd_io_close(fd);
	if (!rc)
		rc = dd_io_rename(err, tmp, fin);
	if (!rc)
		rc = dd_io_fsync_dir(err, dir);
	return rc;
}

int dd_io_fsize(dd_err *err, int fd, uint64_t *out, const char *what)
{
	struct stat st;

	if (!what)
		what = "file";
	if (!out)
		return dd_err_set(err, DD_EINVAL, "stat %s: no output", what);
	if (fstat(fd, &st) < 0)
		return dd_err_set_errno(err, errno, "stat %s", what);
	if (S_ISBLK(st.st_mode)) {
		/* st_size is 0 for a block device; its end is its size.  The
		 * file offset is put back for callers reading sequentially. */
		off_t cur = lseek(fd, 0, SEEK_CUR), end;

		if (cur < 0 || (end = lseek(fd, 0, SEEK_END)) < 0)
			return dd_err_set_errno(err, errno, "size of %s", what);
		if (lseek(fd, cur, SEEK_SET) < 0)
			return dd_err_set_errno(err, errno, "seek %s", what);
		*out = (uint64_t)end;
		return 0;
	}
	*out = st.st_size > 0 ? (uint64_t)st.st_size : 0;
	return 0;
}

int dd_io_renameat(dd_err *err, int dirfd, const char *from, const char *to,
		   unsigned flags)
{
	int e = dd_fault_check(DD_FAULT_RENAME);

	if (e)
		return dd_err_set_errno(err, e, "rename %s to %s", from, to);
	if (renameat2(dirfd, from, dirfd, to, flags) < 0) {
		e = errno;
		if (e == EEXIST)
			return dd_err_set(err, DD_EEXIST, "rename %s to %s: %s "
					  "exists", from, to, to);
		return dd_err_set_errno(err, e, "rename %s to %s", from, to);
	}
	return 0;
}

int dd_io_unlinkat(dd_err *err, int dirfd, const char *name, int flags)
{
	int e = dd_fault_check(DD_FAULT_RENAME);

	if (e)
		return dd_err_set_errno(err, e, "remove %s", name);
	if (unlinkat(dirfd, name, flags) < 0)
		return dd_err_set_errno(err, errno, "remove %s", name);
	return 0;
}

int dd_io_fsync_dirfd(dd_err *err, int dirfd, const char *what)
{
	int e = dd_fault_check(DD_FAULT_SYNC), r;

	if (e)
		return dd_err_set_errno(err, e, "fsync directory %s", what);
	do
		r = fsync(dirfd);
	while (r < 0 && errno == EINTR);
	if (r < 0 && errno != EINVAL)
		return dd_err_set_errno(err, errno, "fsync directory %s", what);
	return 0;
}
