/*
 * walk.c -- which inputs a scan reads: files, devices, directory trees.
 *
 * A path named by the caller is followed if it is a symlink (the user
 * asked for it) and may be anything readable: a file, a block device, a
 * fifo.  Inside a directory only regular files are read, symlinks are
 * never followed (no loops, no escaping the tree), and fifos, sockets and
 * devices are counted, not opened (a fifo would block; /dev would read
 * every disk).  Entries are opened O_NOFOLLOW | O_NONBLOCK and checked
 * again with fstat, so an entry replaced between listing and opening is
 * still never followed or blocked on.
 *
 * Directories are listed whole and closed before descending, so the walk
 * holds one directory descriptor at a time whatever the depth; names are
 * sorted, so warnings and progress come out in a stable order.  Anything
 * that fails -- permissions, an entry that vanished, a path too long --
 * is a warning, and the walk goes on.  What a walk finds goes to its
 * caller's callbacks (dd_walk_ops): walk.c knows nothing of scanning.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/io.h"
#include "scan/scan.h"

typedef struct dd_names {
	char **nm_v;
	size_t nm_n, nm_cap;
} dd_names;

static void dd_names_free(dd_names *nm)
{
	for (size_t i = 0; i < nm->nm_n; i++)
		dd_free(nm->nm_v[i]);
	dd_free(nm->nm_v);
	memset(nm, 0, sizeof(*nm));
}

static int dd_names_add(dd_names *nm, const char *name)
{
	if (nm->nm_n == nm->nm_cap) {
		size_t cap = nm->nm_cap ? 2 * nm->nm_cap : 32;
		char **v = dd_realloc(nm->nm_v, cap * sizeof(*v));

		if (!v)
			return DD_ENOMEM;
		nm->nm_v = v;
		nm->nm_cap = cap;
	}
	nm->nm_v[nm->nm_n] = dd_strdup(name);
	if (!nm->nm_v[nm->nm_n])
		return DD_ENOMEM;
	nm->nm_n++;
	return 0;
}

static int dd_name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Lists directory path (sorted, without . and ..).  A directory that
 * cannot be opened or read to its end is described in *oerr (a warning
 * for the caller); the return is DD_ENOMEM or 0. */
static int dd_list_dir(const char *path, bool follow, dd_names *nm,
		       dd_err *oerr)
{
	int flags = O_RDONLY | O_DIRECTORY | (follow ? 0 : O_NOFOLLOW);
	int fd = dd_io_open(oerr, path, flags, 0);
	struct dirent *de;
	DIR *d;
	int rc = 0;

	if (fd < 0)
		return 0;
	d = fdopendir(fd);
	if (!d) {
		dd_err_set_errno(oerr, errno, "opendir %s", path);
		dd_io_close(fd);
		return 0;
	}
	for (;;) {
		errno = 0;
		de = readdir(d);
		if (!de)
			break;
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		rc = dd_names_add(nm, de->d_name);
		if (rc)
			break;
	}
	if (!rc && errno)
		dd_err_set_errno(oerr, errno, "readdir %s", path);
	closedir(d);
	if (nm->nm_n)
		qsort(nm->nm_v, nm->nm_n, sizeof(char *), dd_name_cmp);
	return rc;
}

/* path + "/" + name into buf; false when it does not fit. */
static bool dd_join(char *buf, size_t len, const char *path, const char *name)
{
	size_t pl = strlen(path);
	bool slash = pl > 0 && path[pl - 1] == '/';
	int n = snprintf(buf, len, "%s%s%s", path, slash ? "" : "/", name);

	return n >= 0 && (size_t)n < len;
}

/* ---- walking -----------------------------------------------------------*/

/* A walk and where it reports (dd_walk_ops). */
typedef struct dd_walker {
	const dd_walk_ops *wk_ops;
	void *wk_ctx;
	dd_err *wk_err;
} dd_walker;

static void dd_walk_warn(dd_walker *wk, const char *path, int code,
			 const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void dd_walk_warn(dd_walker *wk, const char *path, int code,
			 const char *fmt, ...)
{
	char msg[DD_ERRMSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	wk->wk_ops->wo_warn(wk->wk_ctx, path, code, msg);
}

static void dd_warn_errno(dd_walker *wk, const char *path, int e,
			  const char *what)
{
	dd_walk_warn(wk, path, dd_errno_code(e), "%s: %s (skipped)", what,
		     strerror(e));
}

static int dd_walk_file(dd_walker *wk, const char *path, bool top)
{
	int flags = O_RDONLY | O_NOCTTY | (top ? 0 : O_NOFOLLOW | O_NONBLOCK);
	dd_err oerr = {0};
	int fd = dd_io_open(&oerr, path, flags, 0);
	struct stat st;
	int rc;

	if (fd < 0) {
		dd_walk_warn(wk, path, fd, "%s (skipped)", oerr.de_msg);
		return 0;
	}
	if (fstat(fd, &st) != 0) {
		dd_warn_errno(wk, path, errno, "stat");
		dd_io_close(fd);
		return 0;
	}
	if (!top && !S_ISREG(st.st_mode)) {
		wk->wk_ops->wo_special(wk->wk_ctx); /* replaced since listed */
		dd_io_close(fd);
		return 0;
	}
	if (S_ISDIR(st.st_mode)) {
		dd_walk_warn(wk, path, DD_EINVAL, "is a directory now "
			     "(replaced while scanned; skipped)");
		dd_io_close(fd);
		return 0;
	}
	if (!top)
		(void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
	rc = wk->wk_ops->wo_image(wk->wk_ctx, fd, path,
				  S_ISREG(st.st_mode) ? (uint64_t)st.st_size
						      : UINT64_MAX,
				  S_ISREG(st.st_mode));
	dd_io_close(fd);
	return rc;
}

static int dd_walk_dir(dd_walker *wk, const char *path, bool top);

static int dd_walk_entry(dd_walker *wk, const char *dir, const char *name)
{
	char child[PATH_MAX];
	struct stat st;

	if (!dd_join(child, sizeof(child), dir, name)) {
		dd_walk_warn(wk, dir, DD_EINVAL, "entry '%.100s...': path "
			     "longer than %d bytes (skipped)", name, PATH_MAX);
		return 0;
	}
	if (lstat(child, &st) != 0) {
		dd_warn_errno(wk, child, errno, "stat");
		return 0;
	}
	if (S_ISLNK(st.st_mode))
		return 0;   /* never followed: counted by nobody, by design */
	if (S_ISDIR(st.st_mode))
		return dd_walk_dir(wk, child, false);
	if (!S_ISREG(st.st_mode)) {
		wk->wk_ops->wo_special(wk->wk_ctx);
		return 0;
	}
	return dd_walk_file(wk, child, false);
}

static int dd_walk_dir(dd_walker *wk, const char *path, bool top)
{
	dd_names nm = {0};
	dd_err oerr = {0};
	int rc;

	rc = dd_list_dir(path, top, &nm, &oerr);
	if (rc) {
		dd_names_free(&nm);
		return dd_err_set(wk->wk_err, rc, "listing %s: out of memory",
				  path);
	}
	if (oerr.de_code)
		dd_walk_warn(wk, path, oerr.de_code, "%s (%s)", oerr.de_msg,
			     nm.nm_n ? "partly listed" : "skipped");
	for (size_t i = 0; !rc && i < nm.nm_n; i++)
		rc = dd_walk_entry(wk, path, nm.nm_v[i]);
	dd_names_free(&nm);
	return rc;
}

int dd_walk(const char *path, dd_err *err, const dd_walk_ops *ops, void *ctx)
{
	dd_walker wk = {ops, ctx, err};
	struct stat st;

	if (stat(path, &st) != 0) {
		dd_warn_errno(&wk, path, errno, "stat");
		return 0;
	}
	if (S_ISDIR(st.st_mode))
		return dd_walk_dir(&wk, path, true);
	return dd_walk_file(&wk, path, true);
}

/* ---- sizing (for progress) ---------------------------------------------*/

static uint64_t dd_size_tree(const char *path, bool top);

static uint64_t dd_size_dir(const char *path, bool top)
{
	char child[PATH_MAX];
	dd_names nm = {0};
	dd_err oerr = {0};
	uint64_t total = 0;

	if (dd_list_dir(path, top, &nm, &oerr) == 0)
		for (size_t i = 0; i < nm.nm_n; i++)
			if (dd_join(child, sizeof(child), path, nm.nm_v[i]))
				total += dd_size_tree(child, false);
	dd_names_free(&nm);
	return total;
}

static uint64_t dd_size_device(const char *path)
{
	int fd = dd_io_open(NULL, path, O_RDONLY | O_NONBLOCK, 0);
	off_t end;

	if (fd < 0)
		return 0;
	end = lseek(fd, 0, SEEK_END);
	dd_io_close(fd);
	return end > 0 ? (uint64_t)end : 0;
}

static uint64_t dd_size_tree(const char *path, bool top)
{
	struct stat st;

	if ((top ? stat(path, &st) : lstat(path, &st)) != 0)
		return 0;
	if (S_ISDIR(st.st_mode))
		return dd_size_dir(path, top);
	if (S_ISREG(st.st_mode))
		return (uint64_t)st.st_size;
	if (top && S_ISBLK(st.st_mode))
		return dd_size_device(path);
	return 0;
}

int dd_scan_path_bytes(const char *path, uint64_t *out)
{
	dd_err *terr = dd_thread_err();
	struct stat st;

	if (!path || !out)
		return dd_err_set(terr, DD_EINVAL, "dd_scan_path_bytes: NULL "
				  "argument");
	if (stat(path, &st) != 0)
		return dd_err_set_errno(terr, errno, "%s", path);
	*out = dd_size_tree(path, true);
	return 0;
}
