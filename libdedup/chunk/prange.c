/*
 * prange.c -- a file's bytes in the block pipeline (pipeline.h,
 * dd_pipe_range and dd_pipe_file): a range of a file is handed to the
 * filling batch without being read; stage 1 reads it on the pool, each
 * worker the part of its region (pipeline.c), so the copy out of the page
 * cache is spread over the cores.  A batch keeps one range, with a
 * descriptor of its own; a range that does not continue it (another
 * file, image or offset) makes the caller read the batch's range first.
 * What fails to read, or is no longer there (the file shrank), fails the
 * pipeline or becomes zeros the sink hears of (DD_PIPE_READ_*).
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#include "dedup.h"
#include "chunk/pipeline_internal.h"
#include "common/alloc.h"
#include "common/io.h"

/* Reads batch bytes [beg, end) of b's range into dst.  What fails to read
 * or is no longer there (the file shrank) fails the batch, or becomes
 * zeros (DD_PIPE_READ_ZERO); the first failure leaves its message, which
 * the step reports before the batch's lookup.  Any thread. */
bool dd_pipe_read(const dd_pipe *p, dd_pbatch *b, uint8_t *dst,
			 size_t beg, size_t end)
{
	uint64_t off = b->pb_src_off + (beg - b->pb_src_start);
	size_t got = 0;
	dd_err err;
	int rc = dd_io_pread(&err, b->pb_src_fd, dst, end - beg, off, &got,
			     b->pb_src_label);

	if (got == end - beg)
		return true;
	if (!rc && p->pp_cfg.pc_read == DD_PIPE_READ_ZERO)
		rc = dd_err_set(&err, DD_EIO, "the file shrank while read");
	else if (!rc)
		rc = dd_err_set(&err, DD_EIO, "%s ends at offset %llu, inside "
				"the range being read (did it shrink while "
				"read?)", b->pb_src_label,
				(unsigned long long)(off + got));
	if (atomic_exchange(&b->pb_src_failed, 1) == 0)
		dd_err_copy(&b->pb_src_err, &err);
	if (p->pp_cfg.pc_read != DD_PIPE_READ_ZERO)
		return false;
	memset(dst + got, 0, end - beg - got);
	atomic_fetch_add(&b->pb_src_missing, end - beg - got);
	return true;
}

/* ---- file ranges ---------------------------------------------------------*/

/* The range is read: b lets its descriptor go.  A read that failed is
 * the pipeline's error (DD_PIPE_READ_FAIL) or the sink's news (po_lost).
 * Caller's thread. */
int dd_pipe_end_range(dd_pipe *p, dd_pbatch *b)
{
	const dd_pipe_cfg *c = &p->pp_cfg;
	int rc = 0;

	if (b->pb_src_fd < 0)
		return 0;
	dd_io_close(b->pb_src_fd);
	b->pb_src_fd = -1;
	if (atomic_load(&b->pb_src_failed)) {
		if (c->pc_read != DD_PIPE_READ_ZERO)
			rc = dd_err_copy(c->pc_err, &b->pb_src_err);
		else if (c->pc_ops->po_lost)
			c->pc_ops->po_lost(c->pc_ctx, b->pb_src_label,
					   b->pb_src_image,
					   atomic_load(&b->pb_src_missing),
					   &b->pb_src_err);
	}
	dd_free(b->pb_src_label);
	b->pb_src_label = NULL;
	return rc;
}

/* Reads b's range now, on this thread, into place. */
int dd_pipe_read_now(dd_pipe *p, dd_pbatch *b)
{
	if (b->pb_src_fd >= 0)
		dd_pipe_read(p, b, b->pb_data + b->pb_src_start,
			     b->pb_src_start, b->pb_src_end);
	return dd_pipe_end_range(p, b);
}

int dd_pipe_range(dd_pipe *p, int fd, uint64_t off, size_t n,
		  const char *label)
{
	dd_pbatch *b = &p->pp_b[p->pp_cur];
	struct stat st;
	int rc;

	if (n == 0)
		return 0;
	if (n > p->pp_cap - b->pb_fill)
		return dd_err_set(p->pp_cfg.pc_err, DD_EINVAL, "dd_pipe_range: "
				  "%zu bytes is more than the batch's room", n);
	if (fstat(fd, &st) != 0)
		return dd_err_set_errno(p->pp_cfg.pc_err, errno, "fstat %s",
					label);
	if (b->pb_src_fd >= 0 &&
	    (b->pb_src_dev != st.st_dev || b->pb_src_ino != st.st_ino ||
	     b->pb_src_image != p->pp_image || b->pb_src_end != b->pb_fill ||
	     b->pb_src_off + (b->pb_src_end - b->pb_src_start) != off)) {
		rc = dd_pipe_read_now(p, b);
		if (rc)
			return rc;
	}
	if (b->pb_src_fd < 0) {
		char *copy = dd_strdup(label);
		int dup;

		if (!copy)
			return dd_err_set(p->pp_cfg.pc_err, DD_ENOMEM,
					  "out of memory");
		dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
		if (dup < 0) {
			rc = dd_err_set_errno(p->pp_cfg.pc_err, errno, "cannot "
					      "keep a descriptor of %s", label);
			dd_free(copy);
			return rc;
		}
		b->pb_src_fd = dup;
		b->pb_src_label = copy;
		b->pb_src_dev = st.st_dev;
		b->pb_src_ino = st.st_ino;
		b->pb_src_image = p->pp_image;
		b->pb_src_off = off;
		b->pb_src_start = b->pb_src_end = b->pb_fill;
		atomic_store(&b->pb_src_missing, 0);
		atomic_store(&b->pb_src_failed, 0);
		dd_err_clear(&b->pb_src_err);
	}
	b->pb_src_end = b->pb_fill + n;
	b->pb_fill += n;
	return 0;
}

int dd_pipe_file(dd_pipe *p, int fd, uint64_t off, uint64_t len,
		 const char *label)
{
	int rc = 0;

	while (!rc && len > 0) {
		size_t n = dd_pipe_room(p);

		if (n > len)
			n = (size_t)len;
		rc = dd_pipe_range(p, fd, off, n, label);
		if (!rc)
			rc = dd_pipe_produce(p, 0);
		off += n;
		len -= n;
	}
	return rc;
}

