/*
 * scan.c -- dedup scan: what deduplication would save, in one read pass;
 * the public API (include/dedup.h, dd_scan_*): a scan's life, from
 * dd_scan_new to dd_scan_free.
 *
 * The pieces are in scan.h: setup.c builds a scan, read.c feeds it
 * images, sink.c counts their blocks as the pipeline hands them over,
 * result.c makes the figures.  Sample mode and its bound: result.c,
 * dd_scan_bounds().
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "pack/pack.h"
#include "scan/scan.h"

/* ---- public ------------------------------------------------------------*/

int dd_scan_new(dd_scan **out, const dd_scan_opts *opts)
{
	static const dd_scan_opts dflt = DD_SCAN_OPTS_INIT;
	dd_err *terr = dd_thread_err();
	dd_scan_opts v2;
	dd_scan *s;
	int rc;

	if (!out)
		return dd_err_set(terr, DD_EINVAL, "dd_scan_new: NULL out");
	if (!opts)
		opts = &dflt;
	/* a version-1 struct ends before `chunkers` (fixed blocks), a
	 * version-2 one before `compress_exact` */
	if (opts->version == 1 || opts->version == 2) {
		v2 = dflt;
		memcpy(&v2, opts, opts->version == 1
		       ? offsetof(dd_scan_opts, chunkers)
		       : offsetof(dd_scan_opts, compress_exact));
		opts = &v2;
	}
	rc = dd_scan_check_opts(terr, opts);
	if (rc)
		return rc;
	s = dd_calloc(1, sizeof(*s));
	if (!s)
		return dd_err_set(terr, DD_ENOMEM, "out of memory");
	/* dd_scan_free closes what these name, even after a failure half-way
	 * here: from calloc they would name descriptor 0 */
	for (size_t i = 0; i < DD_SCAN_MAX_RESULTS; i++)
		s->s_bz[i].bz_spill.sp_fd = -1;
	rc = dd_scan_build(s, opts);
	if (rc) {
		dd_err_copy(terr, &s->s_err);
		dd_scan_free(s);
		return rc;
	}
	*out = s;
	return 0;
}

/* dd_walk's callbacks. */
static int dd_scan_walk_image(void *ctx, int fd, const char *path,
			      uint64_t size_hint, bool regular)
{
	return dd_scan_image(ctx, fd, path, size_hint, regular);
}

static void dd_scan_walk_warn(void *ctx, const char *path, int code,
			      const char *msg)
{
	dd_scan_warn(ctx, path, code, "%s", msg);
}

static void dd_scan_walk_special(void *ctx)
{
	dd_scan *s = ctx;

	s->s_special++;
}

static const dd_walk_ops dd_scan_walk_ops = {
	.wo_image = dd_scan_walk_image,
	.wo_warn = dd_scan_walk_warn,
	.wo_special = dd_scan_walk_special,
};

static int dd_scan_check_open(dd_scan *s)
{
	if (s->s_state == DD_SC_OPEN)
		return 0;
	return dd_err_set(&s->s_err, DD_ESTATE, "scan is %s",
			  s->s_state == DD_SC_FINISHED ? "finished"
						       : "stopped by an error");
}

int dd_scan_add_path(dd_scan *s, const char *path)
{
	int rc;

	if (!s)
		return DD_EINVAL;
	if (!path || !*path)
		return dd_err_set(&s->s_err, DD_EINVAL, "empty path");
	rc = dd_scan_check_open(s);
	if (rc)
		return rc;
	rc = dd_walk(path, &s->s_err, &dd_scan_walk_ops, s);
	return rc ? dd_scan_fail(s, rc) : 0;
}

int dd_scan_add_fd(dd_scan *s, int fd, const char *label)
{
	char name[32];
	struct stat st;
	bool regular;
	int rc;

	if (!s)
		return DD_EINVAL;
	if (fd < 0)
		return dd_err_set(&s->s_err, DD_EINVAL, "bad fd %d", fd);
	rc = dd_scan_check_open(s);
	if (rc)
		return rc;
	if (!label) {
		snprintf(name, sizeof(name), "fd %d", fd);
		label = name;
	}
	/* Sizes of regular files only detect shrinking; a file read from
	 * the middle has no known remaining size, so none is checked. */
	regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
		  lseek(fd, 0, SEEK_CUR) == 0;
	return dd_scan_image(s, fd, label,
			     regular ? (uint64_t)st.st_size : UINT64_MAX,
			     regular);
}

int dd_scan_finish(dd_scan *s)
{
	int rc;

	if (!s)
		return DD_EINVAL;
	rc = dd_scan_check_open(s);
	if (rc)
		return rc;
	rc = dd_pipe_drain(s->s_pipe);
	if (!rc) { /* the merges get the memory */
		dd_pipe_free(s->s_pipe);
		s->s_pipe = NULL;
	}
	for (size_t i = 0; !rc && i < s->s_nbz; i++)
		rc = dd_scan_table_done(&s->s_bz[i], &s->s_err);
	for (size_t i = 0; !rc && i < s->s_nbz; i++)
		rc = dd_scan_result_one(&s->s_bz[i], &s->s_err,
					s->s_table_budget, s->s_opts.mode);
	if (rc)
		return dd_scan_fail(s, rc);
	s->s_state = DD_SC_FINISHED;
	return 0;
}

int dd_scan_result_get(const dd_scan *s, size_t index, dd_scan_result *out)
{
	unsigned version;

	if (!s || !out)
		return DD_EINVAL;
	if (s->s_state != DD_SC_FINISHED)
		return DD_ESTATE;
	if (index >= s->s_nbz || out->version == 0 ||
	    out->version > DD_SCAN_RESULT_VERSION)
		return DD_EINVAL;
	version = out->version;
	/* a version-1 struct ends before `chunker`, a version-2 one before
	 * `stored_estimated`, a version-3 one before `key_fast` */
	memcpy(out, &s->s_bz[index].bz_res,
	       version >= 4 ? sizeof(*out)
	       : version == 3 ? offsetof(dd_scan_result, key_fast)
	       : version == 2 ? offsetof(dd_scan_result, stored_estimated)
	       : offsetof(dd_scan_result, chunker));
	out->version = version;
	return 0;
}

int dd_scan_info_get(const dd_scan *s, dd_scan_info *out)
{
	if (!s || !out || out->version == 0 ||
	    out->version > DD_SCAN_INFO_VERSION)
		return DD_EINVAL;
	out->images = s->s_images;
	out->bytes = s->s_bytes;
	out->skipped = s->s_skipped;
	out->special = s->s_special;
	out->nblock_sizes = s->s_nsizes;
	if (out->version >= 2)
		out->nresults = s->s_nbz;
	return 0;
}

const char *dd_scan_errmsg(const dd_scan *s)
{
	if (!s)
		return "DD_EINVAL: NULL scan";
	return s->s_err.de_code ? s->s_err.de_msg : "no error";
}

void dd_scan_free(dd_scan *s)
{
	if (!s)
		return;
	dd_pipe_free(s->s_pipe); /* first: its job may be running */
	for (unsigned i = 0; s->s_codec && i < s->s_nwk; i++)
		dd_codec_free(s->s_codec[i]);
	dd_free(s->s_codec);
	dd_pool_free(s->s_pool);
	for (size_t i = 0; i < s->s_nbz; i++) {
		dd_scan_table_fini(&s->s_bz[i].bz_tab);
		dd_scan_spill_fini(&s->s_bz[i].bz_spill);
	}
	for (size_t i = 0; i < s->s_nbz; i++)
		dd_scan_est_fini(&s->s_bz[i].bz_segs);
	dd_free(s->s_tmpdir);
	dd_free(s);
}

