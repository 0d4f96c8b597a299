/*
 * read.c -- images into a scan's pipeline, and the scan's warnings.
 *
 * A regular file is not read by the caller at all: it hands the pipeline
 * byte ranges, read on the pool where they are hashed; with --compress
 * none no stage needs the bytes after hashing, so they go to a worker's
 * own buffer that stays in cache (DD_PIPE_BYTES_NONE).  Bytes a file no
 * longer has when they are read (it shrank), or that fail to read, count
 * as zeros, with a warning (DD_PIPE_READ_ZERO, sink.c).  Anything else
 * (pipes, devices) is read into the pipeline's buffers.
 *
 * The holes of a sparse file are skipped with fixed sizes alone: FastCDC's
 * cut points depend on every byte, so with it they are read.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/io.h"
#include "scan/scan.h"

/* ---- warnings ----------------------------------------------------------*/

/* Reports a skipped or partly read input through the warning callback
 * and counts it in dd_scan_info.skipped. */
void dd_scan_warn(dd_scan *s, const char *path, int code,
		  const char *fmt, ...)
{
	char msg[DD_ERRMSG_MAX];
	va_list ap;

	s->s_skipped++;
	if (!s->s_opts.warn)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	s->s_opts.warn(s->s_opts.warn_ctx, path, code, msg);
}

int dd_scan_fail(dd_scan *s, int rc)
{
	s->s_state = DD_SC_FAILED;
	return rc;
}

/* ---- reading images ----------------------------------------------------*/

/* Counts len bytes of holes at an offset aligned to the largest block size:
 * zero blocks of every size, without reading them (fixed sizes only:
 * s_skipbs is 0 with FastCDC). */
static void dd_scan_count_hole(dd_scan *s, uint64_t len)
{
	for (size_t i = 0; i < s->s_nbz; i++) {
		dd_scan_bsz *bz = &s->s_bz[i];
		uint64_t n = dd_block_count(len, bz->bz_bs);

		bz->bz_blocks += n;
		bz->bz_zero += n;
		bz->bz_logical += len;
	}
}

/* A sparse file's holes are zero blocks for sure: skip them (a 1 TiB VM
 * image with 10 GiB of data reads 10 GiB).  Only whole multiples of the
 * largest block size are skipped, or a hole that runs to the end of the
 * file; *pos is always such a multiple here.  Failures mean "read it". */
static void dd_scan_skip_hole(dd_scan *s, int fd, uint64_t *pos)
{
	off_t data = lseek(fd, (off_t)*pos, SEEK_DATA);
	uint64_t len;
	struct stat st;

	if (data < 0) {
		if (errno != ENXIO || fstat(fd, &st) != 0 ||
		    (uint64_t)st.st_size <= *pos)
			return;
		len = (uint64_t)st.st_size - *pos;
	} else {
		if ((uint64_t)data <= *pos)
			return;
		len = ((uint64_t)data - *pos) / s->s_skipbs * s->s_skipbs;
	}
	if (len == 0 || lseek(fd, (off_t)(*pos + len), SEEK_SET) < 0) {
		(void)lseek(fd, (off_t)*pos, SEEK_SET);
		return;
	}
	dd_scan_count_hole(s, len);
	*pos += len;
	s->s_bytes += len;
}

static int dd_scan_progress(dd_scan *s)
{
	if (s->s_opts.progress &&
	    s->s_opts.progress(s->s_opts.progress_ctx, s->s_bytes,
			       s->s_opts.progress_total))
		return dd_err_set(&s->s_err, DD_ECANCELED,
				  "scan canceled by the progress callback");
	return 0;
}

/* Hands the pipeline as much of regular file fd as the batch has room
 * for, up to the file's current size, as a range read on the pool, and
 * moves the file offset past it.  Returns the bytes handed over: 0 at or
 * past the file's end (then the caller reads on, for what is appended
 * while it is scanned) or when no range can be kept (no descriptor
 * left: the caller reads). */
static size_t dd_scan_hand_over(dd_scan *s, int fd, const char *label,
				uint64_t pos)
{
	size_t len = dd_pipe_room(s->s_pipe);
	struct stat st;
	dd_err keep = s->s_err;

	if (fstat(fd, &st) != 0 || (uint64_t)st.st_size <= pos)
		return 0;
	if ((uint64_t)st.st_size - pos < len)
		len = (size_t)((uint64_t)st.st_size - pos);
	if (lseek(fd, (off_t)(pos + len), SEEK_SET) < 0)
		return 0;
	if (dd_pipe_range(s->s_pipe, fd, pos, len, label) != 0) {
		s->s_err = keep; /* not the scan's error: it reads instead */
		(void)lseek(fd, (off_t)pos, SEEK_SET);
		return 0;
	}
	return len;
}

/* Reads fd to its end into the pipeline (a regular file by ranges, then
 * on to EOF).  *rerr gets a read error, which is the input's problem (a
 * warning), not the scan's. */
static int dd_scan_read_image(dd_scan *s, int fd, const char *label,
			      bool regular, uint64_t *pos, dd_err *rerr)
{
	for (;;) {
		size_t got = 0, room = dd_pipe_room(s->s_pipe);
		bool handed = false;
		int rc = 0;

		if (regular && s->s_skipbs) {
			dd_scan_skip_hole(s, fd, pos);
			got = dd_scan_hand_over(s, fd, label, *pos);
			handed = got > 0;
		}
		if (!handed) {
			void *buf;

			dd_pipe_buffer(s->s_pipe, &buf, &room);
			rc = dd_io_read(rerr, fd, buf, room, &got, label);
		}
		*pos += got;
		s->s_bytes += got;
		if (rc) /* what was read before the error counts */
			return dd_pipe_produce(s->s_pipe, got);
		rc = dd_scan_progress(s);
		if (!rc) /* a full batch goes on */
			rc = dd_pipe_produce(s->s_pipe, handed ? 0 : got);
		if (rc)
			return rc;
		if (got < room) {
			if (handed)
				continue; /* up to its size: read on to EOF */
			return 0;
		}
	}
}

int dd_scan_image(dd_scan *s, int fd, const char *label, uint64_t size_hint,
		  bool regular)
{
	dd_err rerr = {0};
	uint64_t pos = 0;
	int rc;

	s->s_images++;
	rc = dd_scan_read_image(s, fd, label, regular, &pos, &rerr);
	if (!rc)
		rc = dd_pipe_end_image(s->s_pipe);
	if (rc)
		return dd_scan_fail(s, rc);
	if (rerr.de_code)
		dd_scan_warn(s, label, rerr.de_code, "read error after %llu "
			     "bytes (counted up to there): %s",
			     (unsigned long long)pos, rerr.de_msg);
	else if (regular && size_hint != UINT64_MAX && pos < size_hint)
		dd_scan_warn(s, label, DD_EIO, "file shrank while read: %llu "
			     "of %llu bytes (counted as read)",
			     (unsigned long long)pos,
			     (unsigned long long)size_hint);
	return 0;
}

