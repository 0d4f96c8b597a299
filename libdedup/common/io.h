/*
 * io.h -- the library's only system-call wrappers for file I/O.
 *
 * They retry EINTR and short transfers, translate errno into DD_E* codes,
 * fill in an error message with the path and offset, and are the one place
 * where tests inject I/O faults (faults.h).
 */
#ifndef DD_COMMON_IO_H
#define DD_COMMON_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"

/* open(2); returns the fd or a negative DD_E* code.  `what` names the file
 * in the message. */
int dd_io_open(dd_err *err, const char *path, int flags, mode_t mode);
int dd_io_openat(dd_err *err, int dirfd, const char *name, int flags,
		 mode_t mode);
void dd_io_close(int fd);

/* Reads exactly len bytes at off.  DD_ECORRUPT "short read" at EOF. */
int dd_io_pread_full(dd_err *err, int fd, void *buf, size_t len, uint64_t off,
		     const char *what);
/* The same without the test read delay (dd_fault_set_read_delay_us),
 * which models the slow disks under the packs: for the L2 cache devices,
 * the fast tier.  Injected read faults apply as to every read. */
int dd_io_pread_full_nodelay(dd_err *err, int fd, void *buf, size_t len,
			     uint64_t off, const char *what);
/* Reads up to len bytes; *got gets the count (0 at EOF). */
int dd_io_pread(dd_err *err, int fd, void *buf, size_t len, uint64_t off,
		size_t *got, const char *what);
int dd_io_pwrite_full(dd_err *err, int fd, const void *buf, size_t len,
		      uint64_t off, const char *what);
/* read(2)/write(2) on a stream (pipe, terminal, file): full transfers. */
int dd_io_read(dd_err *err, int fd, void *buf, size_t len, size_t *got,
	       const char *what);
int dd_io_write_full(dd_err *err, int fd, const void *buf, size_t len,
		     const char *what);
int dd_io_fdatasync(dd_err *err, int fd, const char *what);
/* Drops the clean pages of [off, off + len) of fd from the page cache:
 * whole pages only, the one holding off + len kept (an append to it would
 * read it back first).  A hint: dirty pages stay. */
void dd_io_drop_cached(int fd, uint64_t off, uint64_t len);
/* Waits until [off, off + len) of fd is written back (starting what is
 * not), then drops it as dd_io_drop_cached does.  Durable it is not:
 * that is still dd_io_fdatasync's.  An error is a write error, reported
 * here instead of by the next fdatasync of this fd (the kernel reports a
 * writeback error once per open file): the caller must treat the data as
 * lost.  Where the file system cannot wait for a range (EINVAL, ESPIPE,
 * ENOSYS) it is 0 and nothing is dropped. */
int dd_io_drop_written(dd_err *err, int fd, uint64_t off, uint64_t len,
		       const char *what);
int dd_io_fsync_dir(dd_err *err, const char *dir);
int dd_io_ftruncate(dd_err *err, int fd, uint64_t len, const char *what);
int dd_io_rename(dd_err *err, const char *from, const char *to);
int dd_io_fsize(dd_err *err, int fd, uint64_t *out, const char *what);
/* DIR/NAME replaced whole by buf: written as DIR/NAME.tmp, fdatasync'ed,
 * renamed over NAME, the directory synced -- a crash leaves the old file
 * or the new one. */
int dd_io_replace_file(dd_err *err, const char *dir, const char *name,
		       const void *buf, size_t len);

/* Names relative to a directory descriptor (the store's manifests/ and
 * packs/).  dd_io_renameat takes renameat2(2) flags (RENAME_NOREPLACE,
 * RENAME_EXCHANGE); a rename and an unlink are faults of class RENAME,
 * a directory sync of class SYNC. */
int dd_io_renameat(dd_err *err, int dirfd, const char *from, const char *to,
		   unsigned flags);
int dd_io_unlinkat(dd_err *err, int dirfd, const char *name, int flags);
/* fsync(2) of an open directory; a file system that cannot sync one
 * (EINVAL) is not an error. */
int dd_io_fsync_dirfd(dd_err *err, int dirfd, const char *what);

#endif
