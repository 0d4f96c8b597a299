/*
 * conf.c -- STORE/cache.conf: the cache tunables and L2 devices kept in a
 * store (format/store.md §8).
 *
 * A small text file rather than LMDB meta keys: meta values are u64 and a
 * device is a path.  It is replaced whole through a temporary file and
 * rename(2), under STORE/conf.lock, so a reader sees the old or
 * the new file, never a mix.  A reader refuses what it does not
 * understand -- a newer format, an unknown key -- rather than guess; the
 * store then opens without L2 and says why.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache_internal.h"
#include "common/alloc.h"
#include "common/io.h"

#define DD_CONF_NAME "cache.conf"
#define DD_CONF_MAX (64u << 10)
#define DD_CONF_MAGIC "libdedup cache"
#define DD_CONF_FORMAT 1

void dd_cache_conf_fini(dd_cache_conf *c)
{
	for (size_t i = 0; i < c->cf_ndevs; i++)
		dd_free(c->cf_devs[i].cd_path);
	dd_free(c->cf_devs);
	memset(c, 0, sizeof(*c));
}

int dd_cache_conf_add_dev(dd_err *err, dd_cache_conf *c, const char *path,
			  uint64_t size)
{
	dd_cache_conf_dev *d = dd_realloc(c->cf_devs,
					  (c->cf_ndevs + 1) * sizeof(*d));

	if (!d)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	c->cf_devs = d;
	d[c->cf_ndevs].cd_path = dd_strdup(path);
	if (!d[c->cf_ndevs].cd_path)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	d[c->cf_ndevs++].cd_size = size;
	return 0;
}

void dd_cache_conf_remove_dev(dd_cache_conf *c, size_t at)
{
	dd_free(c->cf_devs[at].cd_path);
	memmove(&c->cf_devs[at], &c->cf_devs[at + 1],
		(c->cf_ndevs - at - 1) * sizeof(*c->cf_devs));
	c->cf_ndevs--;
}

bool dd_cache_conf_find(const dd_cache_conf *c, const char *path, size_t *at)
{
	for (size_t i = 0; i < c->cf_ndevs; i++) {
		if (!strcmp(c->cf_devs[i].cd_path, path)) {
			*at = i;
			return true;
		}
	}
	return false;
}

int dd_cache_conf_path_check(dd_err *err, const char *path)
{
	size_t len;

	if (!path || path[0] != '/')
		return dd_err_set(err, DD_EINVAL, "a cache device path must "
				  "be absolute");
	len = strnlen(path, DD_CACHE_PATH_MAX);
	if (len >= DD_CACHE_PATH_MAX)
		return dd_err_set(err, DD_EINVAL, "cache device path too long");
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)path[i] < 0x20)
			return dd_err_set(err, DD_EINVAL, "a cache device path "
					  "may not hold control characters");
	return 0;
}

/* A decimal u64 ending at the end of s or at a space (*end). */
static int dd_conf_u64(const char *s, uint64_t *out, const char **end)
{
	char *e;
	unsigned long long v;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &e, 10);
	if (errno || (*e && *e != ' '))
		return -1;
	*out = v;
	*end = e;
	return 0;
}

static int dd_conf_line(dd_err *err, dd_cache_conf *c, char *line,
			unsigned no)
{
	const char *rest;
	uint64_t v;

	if (!strncmp(line, "device ", 7)) {
		if (dd_conf_u64(line + 7, &v, &rest) || *rest != ' ' ||
		    rest[1] != '/' || strlen(rest + 1) >= DD_CACHE_PATH_MAX)
			goto bad;
		return dd_cache_conf_add_dev(err, c, rest + 1, v);
	}
	if (!strncmp(line, "l1_size ", 8)) {
		if (dd_conf_u64(line + 8, &v, &rest) || *rest)
			goto bad;
		c->cf_l1_size = v;
		return 0;
	}
	if (!strncmp(line, "l2_write_max ", 13)) {
		if (dd_conf_u64(line + 13, &v, &rest) || *rest || v == 0)
			goto bad;
		c->cf_l2_write_max = v;
		return 0;
	}
	if (!strncmp(line, "l2_feed_sequential ", 19)) {
		if (dd_conf_u64(line + 19, &v, &rest) || *rest || v > 1)
			goto bad;
		c->cf_feed_seq = v ? 1 : -1;
		return 0;
	}
bad:
	return dd_err_set(err, DD_ECORRUPT, "cache.conf line %u: not "
			  "understood: '%.60s'", no, line);
}

static int dd_conf_parse(dd_err *err, char *buf, dd_cache_conf *out)
{
	char *save = NULL, *line;
	unsigned no = 2;
	long fmt;
	int rc = 0;

	line = strtok_r(buf, "\n", &save);
	if (!line || strcmp(line, DD_CONF_MAGIC) != 0)
		return dd_err_set(err, DD_ECORRUPT, "cache.conf: no '%s' line",
				  DD_CONF_MAGIC);
	line = strtok_r(NULL, "\n", &save);
	if (!line || strncmp(line, "format ", 7) != 0 ||
	    (fmt = strtol(line + 7, NULL, 10)) < 1)
		return dd_err_set(err, DD_ECORRUPT, "cache.conf: no format line");
	if (fmt > DD_CONF_FORMAT)
		return dd_err_set(err, DD_EVERSION, "cache.conf format %ld is "
				  "newer than this build reads (%d)", fmt,
				  DD_CONF_FORMAT);
	while (!rc && (line = strtok_r(NULL, "\n", &save)) != NULL)
		if (line[0] != '#')
			rc = dd_conf_line(err, out, line, ++no);
	return rc;
}

int dd_cache_conf_read(dd_err *err, const char *dir, dd_cache_conf *out)
{
	char path[4096], *buf;
	size_t got = 0;
	int fd, rc;

	memset(out, 0, sizeof(*out));
	snprintf(path, sizeof(path), "%s/%s", dir, DD_CONF_NAME);
	fd = dd_io_open(err, path, O_RDONLY, 0);
	if (fd == DD_ENOENT)
		return 0;
	if (fd < 0)
		return fd;
	buf = dd_malloc(DD_CONF_MAX + 1);
	rc = buf ? dd_io_read(err, fd, buf, DD_CONF_MAX + 1, &got, path)
		 : dd_err_set(err, DD_ENOMEM, "out of memory");
	dd_io_close(fd);
	if (!rc && got > DD_CONF_MAX)
		rc = dd_err_set(err, DD_ECORRUPT, "%s: too large", path);
	if (!rc && memchr(buf, 0, got))
		rc = dd_err_set(err, DD_ECORRUPT, "%s: holds a NUL byte", path);
	if (!rc) {
		buf[got] = 0;
		rc = dd_conf_parse(err, buf, out);
	}
	dd_free(buf);
	if (rc)
		dd_cache_conf_fini(out);
	return rc;
}

/* The text of a configuration; NULL when out of memory. */
static char *dd_conf_text(const dd_cache_conf *c, size_t *len)
{
	size_t cap = 256;
	char *buf;
	int n;

	for (size_t i = 0; i < c->cf_ndevs; i++)
		cap += strlen(c->cf_devs[i].cd_path) + 32;
	buf = dd_malloc(cap);
	if (!buf)
		return NULL;
	n = snprintf(buf, cap, "%s\nformat %d\n", DD_CONF_MAGIC, DD_CONF_FORMAT);
	if (c->cf_l1_size)
		n += snprintf(buf + n, cap - (size_t)n, "l1_size %llu\n",
			      (unsigned long long)c->cf_l1_size);
	if (c->cf_l2_write_max)
		n += snprintf(buf + n, cap - (size_t)n, "l2_write_max %llu\n",
			      (unsigned long long)c->cf_l2_write_max);
	if (c->cf_feed_seq)
		n += snprintf(buf + n, cap - (size_t)n, "l2_feed_sequential %d\n",
			      c->cf_feed_seq > 0);
	for (size_t i = 0; i < c->cf_ndevs; i++)
		n += snprintf(buf + n, cap - (size_t)n, "device %llu %s\n",
			      (unsigned long long)c->cf_devs[i].cd_size,
			      c->cf_devs[i].cd_path);
	*len = (size_t)n;
	return buf;
}

int dd_cache_conf_write(dd_err *err, const char *dir, const dd_cache_conf *c)
{
	char tmp[4096], fin[4096], *text;
	size_t len;
	int fd, rc;

	text = dd_conf_text(c, &len);
	if (!text)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	snprintf(tmp, sizeof(tmp), "%s/%s.tmp", dir, DD_CONF_NAME);
	snprintf(fin, sizeof(fin), "%s/%s", dir, DD_CONF_NAME);
	fd = dd_io_open(err, tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	rc = fd < 0 ? fd : dd_io_pwrite_full(err, fd, text, len, 0, tmp);
	if (!rc)
		rc = dd_io_fdatasync(err, fd, tmp);
	if (fd >= 0)
		dd_io_close(fd);
	if (!rc)
		rc = dd_io_rename(err, tmp, fin);
	if (!rc)
		rc = dd_io_fsync_dir(err, dir);
	if (rc && fd >= 0)
		unlink(tmp);
	dd_free(text);
	return rc;
}
