/*
 * fuzz_util.h -- what the stateful harnesses share: a private temporary
 * directory per process (removed at exit) and whole-file writes.
 * Header-only (static inline) so each harness stays one translation unit.
 */
#ifndef DD_FUZZ_UTIL_H
#define DD_FUZZ_UTIL_H

#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fz_tmp[4096];

static inline int fz_rm_one(const char *path, const struct stat *st, int flag,
			    struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static inline void fz_rmtree(const char *path)
{
	(void)nftw(path, fz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static inline void fz_cleanup(void)
{
	if (fz_tmp[0])
		fz_rmtree(fz_tmp);
}

/* The process's temporary directory, created on first use; aborts when
 * it cannot be made (a harness without it would test nothing). */
static inline const char *fz_tmpdir(void)
{
	if (!fz_tmp[0]) {
		const char *t = getenv("TMPDIR");

		snprintf(fz_tmp, sizeof(fz_tmp), "%s/ddfuzz.XXXXXX",
			 t && *t ? t : "/tmp");
		if (!mkdtemp(fz_tmp)) {
			perror("fuzz: mkdtemp");
			abort();
		}
		atexit(fz_cleanup);
	}
	return fz_tmp;
}

/* Writes (replaces) path with len bytes of data; aborts on failure. */
static inline void fz_write_file(const char *path, const void *data,
				 size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	const uint8_t *p = data;

	if (fd < 0) {
		perror(path);
		abort();
	}
	while (len) {
		ssize_t n = write(fd, p, len);

		if (n <= 0) {
			perror(path);
			abort();
		}
		p += n;
		len -= (size_t)n;
	}
	close(fd);
}

#endif
