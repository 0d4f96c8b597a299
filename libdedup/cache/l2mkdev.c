/*
 * l2mkdev.c -- making an L2 cache device (dd_l2_format, `dedup cache
 * add`): a file sized and allocated, or a block device checked to hold
 * nothing else, and a fresh header written (format/cache.md §2); and
 * reading a device's header slots, which opening a device shares.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/l2dev_internal.h"
#include "common/io.h"
#include "common/zero.h"

int dd_l2_dev_bytes(int fd, uint64_t *out)
{
	off_t end = lseek(fd, 0, SEEK_END);

	if (end < 0)
		return -1;
	*out = (uint64_t)end;
	return 0;
}

/* Picks the newest valid header slot; its decode error otherwise. */
int dd_l2_pick_hdr(dd_err *err, const uint8_t *area, dd_l2_hdr *out)
{
	dd_l2_hdr h[2];
	dd_err e[2];
	int rc[2];

	for (int i = 0; i < 2; i++)
		rc[i] = dd_l2_hdr_decode(&e[i], area + i * DD_L2_HDR_SLOT, &h[i]);
	if (rc[0] && rc[1]) {
		int w = rc[0] == DD_EFORMAT ? 1 : 0;

		return dd_err_copy(err, &e[w]);
	}
	*out = rc[0] ? h[1] : rc[1] ? h[0] : h[h[1].lh_seq > h[0].lh_seq];
	return 0;
}

/* ---- format ------------------------------------------------------------------*/

/* Refuses a device that holds something: another store's cache, or
 * non-zero bytes where the header goes. */
static int dd_l2_format_check(dd_err *err, int fd, const char *path,
			      const uint8_t store_id[16])
{
	uint8_t area[DD_L2_DATA_START];
	dd_l2_hdr h;
	dd_err e;
	size_t got;
	int rc;

	rc = dd_io_pread(err, fd, area, sizeof(area), 0, &got, path);
	if (rc)
		return rc;
	if (got < sizeof(area))
		memset(area + got, 0, sizeof(area) - got);
	if (dd_l2_pick_hdr(&e, area, &h) == 0) {
		if (memcmp(h.lh_store_id, store_id, 16) == 0)
			return 0;
		return dd_err_set(err, DD_EEXIST, "%s holds the cache of "
				  "another store (force to reformat)", path);
	}
	if (!dd_is_zero(area, sizeof(area)))
		return dd_err_set(err, DD_EEXIST, "%s holds data (force to "
				  "reformat it as a cache device)", path);
	return 0;
}

/* Gives a regular file its size, allocated when the file system can. */
static int dd_l2_size_file(dd_err *err, int fd, const char *path,
			   uint64_t size)
{
	int e;

	if (dd_io_ftruncate(err, fd, size, path))
		return err->de_code;
	e = posix_fallocate(fd, 0, (off_t)size);
	if (e == ENOSPC || e == EFBIG)
		return dd_err_set_errno(err, e, "allocate %s", path);
	return 0;   /* EOPNOTSUPP etc.: stays sparse; a write may fail later */
}

/* Writes slot 0 empty and slot 1 with header seq 1. */
static int dd_l2_write_fresh(dd_err *err, int fd, const char *path,
			     const uint8_t store_id[16], uint64_t bytes)
{
	uint8_t area[DD_L2_DATA_START];
	dd_l2_hdr h;
	uint64_t ring = (bytes - DD_L2_DATA_START) / DD_L2_SECTOR * DD_L2_SECTOR;

	if (ring / DD_L2_SECTOR > UINT32_MAX)
		ring = (uint64_t)UINT32_MAX * DD_L2_SECTOR;
	memset(&h, 0, sizeof(h));
	memcpy(h.lh_store_id, store_id, 16);
	if (getrandom(h.lh_dev_id, sizeof(h.lh_dev_id), 0) !=
	    (ssize_t)sizeof(h.lh_dev_id))
		return dd_err_set_errno(err, errno, "getrandom");
	h.lh_dev_bytes = bytes;
	h.lh_ring = ring;
	h.lh_seq = 1;
	h.lh_ctime = (int64_t)time(NULL);
	memset(area, 0, sizeof(area));
	dd_l2_hdr_encode(area + DD_L2_HDR_SLOT, &h);
	if (dd_io_pwrite_full(err, fd, area, sizeof(area), 0, path) ||
	    dd_io_fdatasync(err, fd, path))
		return err->de_code;
	return 0;
}

static int dd_l2_format_fd(dd_err *err, int fd, const char *path,
			   uint64_t size, const uint8_t store_id[16],
			   bool force, bool created, uint64_t *used)
{
	struct stat st;
	uint64_t bytes;
	int rc;

	if (fstat(fd, &st) != 0 || dd_l2_dev_bytes(fd, &bytes))
		return dd_err_set_errno(err, errno, "stat %s", path);
	if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
		return dd_err_set(err, DD_EINVAL, "%s: not a regular file or "
				  "block device", path);
	if (!created && !force) {
		rc = dd_l2_format_check(err, fd, path, store_id);
		if (rc)
			return rc;
	}
	if (size == 0)
		size = bytes;
	if (size < DD_L2_MIN_BYTES)
		return dd_err_set(err, DD_EINVAL, "%s: a cache device needs at "
				  "least %llu bytes", path,
				  (unsigned long long)DD_L2_MIN_BYTES);
	if (size > bytes) {
		if (!S_ISREG(st.st_mode))
			return dd_err_set(err, DD_EINVAL, "%s: device is only "
					  "%llu bytes", path,
					  (unsigned long long)bytes);
		rc = dd_l2_size_file(err, fd, path, size);
		if (rc)
			return rc;
	}
	*used = size;
	return dd_l2_write_fresh(err, fd, path, store_id, size);
}

int dd_l2_format(dd_err *err, const char *path, uint64_t size,
		 const uint8_t store_id[16], bool force, uint64_t *used)
{
	bool created = false;
	int fd, rc;

	fd = dd_io_open(err, path, O_RDWR, 0);
	if (fd == DD_ENOENT) {
		if (size == 0)
			return dd_err_set(err, DD_EINVAL, "%s does not exist: "
					  "give its size", path);
		fd = dd_io_open(err, path, O_RDWR | O_CREAT | O_EXCL, 0600);
		created = fd >= 0;
	}
	if (fd < 0)
		return fd;
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		dd_io_close(fd);
		return dd_err_set(err, DD_EBUSY, "%s is in use by another "
				  "process", path);
	}
	rc = dd_l2_format_fd(err, fd, path, size, store_id, force, created,
			     used);
	dd_io_close(fd);
	if (rc && created)
		unlink(path);
	return rc;
}
