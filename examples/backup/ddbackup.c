/*
 * ddbackup.c -- a small backup program built on libdedup's public API
 * (include/dedup.h only).  It is the example of docs/embedding.md for a
 * whole program, and tests/e2e/test_examples.sh builds it against the
 * installed library, through pkg-config and through find_package(dedup).
 *
 *   ddbackup backup    STORE NAME DIR       back DIR up as snapshot NAME
 *   ddbackup list      STORE                list the snapshots
 *   ddbackup restore   STORE NAME DESTDIR   recreate the tree in DESTDIR
 *   ddbackup replicate SRCSTORE NAME DSTSTORE
 *                                           copy NAME through a pipe
 *
 * A snapshot holds an archive stream: an 8-byte magic "DDBKUP01", then one
 * entry per directory or regular file, in name order, parents first:
 *
 *   offset  size  field
 *   0       1     type: 'D' directory, 'F' regular file, 'E' end
 *   1       4     mode (permission bits), little-endian
 *   5       4     path length in bytes (1..PATH_BYTES), little-endian
 *   9       8     size: bytes of content that follow the path ('F' only)
 *   17      n     path, relative to the backed-up directory, '/'-separated
 *   17+n    size  content
 *
 * The 'E' entry has mode, path length and size 0.  Symbolic links and
 * special files are skipped with a warning.  Fields are encoded byte by
 * byte, so the archive reads the same on any machine.
 *
 * Exit status: 0 done, 1 an error (message on stderr), 2 bad usage.
 */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700

#include <dedup.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAGIC "DDBKUP01"
#define MAGIC_LEN 8
#define HDR_LEN 17
#define PATH_BYTES 4095
#define CHUNK (256u * 1024)

static const char *prog = "ddbackup";
static unsigned long warnings;

/* ---- messages -------------------------------------------------------------*/

static int fail(const char *what, const char *msg)
{
	fprintf(stderr, "%s: %s: %s\n", prog, what, msg);
	return -1;
}

/* A library error: the handle's message names the code and the context. */
static int fail_dd(const char *what, int rc, const char *msg)
{
	if (!msg || strcmp(msg, "no error") == 0)
		msg = dd_strerror(rc);
	fprintf(stderr, "%s: %s: %s\n", prog, what, msg);
	return -1;
}

static int fail_errno(const char *what, const char *path)
{
	fprintf(stderr, "%s: %s %s: %s\n", prog, what, path, strerror(errno));
	return -1;
}

static void warn(const char *path, const char *msg)
{
	fprintf(stderr, "%s: warning: %s: %s\n", prog, path, msg);
	warnings++;
}

/* ---- little-endian fields -------------------------------------------------*/

static void put_le(unsigned char *p, uint64_t v, int n)
{
	int i;

	for (i = 0; i < n; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int n)
{
	uint64_t v = 0;
	int i;

	for (i = n - 1; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* ---- stores ---------------------------------------------------------------*/

/* Opens the store at path; with `create`, makes it first if it is missing
 * (block size and compression copied from `like` when given). */
static int open_store(dd_store **out, const char *path, int create,
		      const dd_store_info *like)
{
	dd_create_opts co = DD_CREATE_OPTS_INIT;
	int rc;

	if (dd_version_number() / 10000 != DD_VERSION_MAJOR)
		fprintf(stderr, "%s: built with libdedup %d.%d.%d, running %s\n",
			prog, DD_VERSION_MAJOR, DD_VERSION_MINOR,
			DD_VERSION_PATCH, dd_version_string());
	rc = dd_store_open(out, path, NULL);
	if (rc == DD_ENOENT && create) {
		if (like) {
			co.block_size = like->block_size;
			co.verify = like->verify;
			co.compress = like->compress;
			co.compress_level = like->compress_level;
		}
		rc = dd_store_create(out, path, &co, NULL);
	}
	if (rc < 0)
		return fail_dd(path, rc, dd_last_errmsg());
	return 0;
}

/* ---- backup ---------------------------------------------------------------*/

struct backup {
	dd_writer *w;
	char path[PATH_BYTES + 1];  /* full path of the entry */
	size_t root_len;            /* bytes of DIR plus its '/' */
};

static int put_header(struct backup *b, int type, uint32_t mode,
		      uint64_t size)
{
	unsigned char hdr[HDR_LEN];
	const char *rel = b->path + b->root_len;
	size_t n = type == 'E' ? 0 : strlen(rel);
	int rc;

	hdr[0] = (unsigned char)type;
	put_le(hdr + 1, mode, 4);
	put_le(hdr + 5, n, 4);
	put_le(hdr + 9, size, 8);
	if ((rc = dd_writer_write(b->w, hdr, sizeof(hdr))) < 0 ||
	    (rc = dd_writer_write(b->w, rel, n)) < 0)
		return fail_dd("write", rc, dd_writer_errmsg(b->w));
	return 0;
}

/* Hands the file's `size` bytes to the writer by range: its workers read
 * them where they hash them, through their own descriptor, so fd can be
 * closed at once.  A file that shrinks before they get to it fails the
 * backup at a later call (DD_EIO). */
static int put_file(struct backup *b, const struct stat *sb)
{
	uint64_t size = (uint64_t)sb->st_size;
	int fd, rc;

	fd = open(b->path, O_RDONLY | O_NOFOLLOW);
	if (fd < 0)
		return fail_errno("cannot open", b->path);
	rc = put_header(b, 'F', (uint32_t)(sb->st_mode & 07777), size);
	if (rc == 0 && size > 0) {
		rc = dd_writer_write_file(b->w, fd, 0, size);
		if (rc < 0)
			fail_dd(b->path, rc, dd_writer_errmsg(b->w));
	}
	close(fd);
	return rc < 0 ? -1 : 0;
}

static int walk(struct backup *b);

/* One entry of the directory in b->path: b->path is extended by name and
 * restored before returning. */
static int put_entry(struct backup *b, const char *name)
{
	size_t len = strlen(b->path), nlen = strlen(name);
	struct stat sb;
	int rc = 0;

	if (len + 1 + nlen > PATH_BYTES)
		return fail(b->path, "path too long");
	b->path[len] = '/';
	memcpy(b->path + len + 1, name, nlen + 1);
	if (lstat(b->path, &sb) < 0) {
		rc = fail_errno("cannot stat", b->path);
	} else if (S_ISLNK(sb.st_mode)) {
		warn(b->path, "symbolic link skipped");
	} else if (S_ISDIR(sb.st_mode)) {
		rc = put_header(b, 'D', (uint32_t)(sb.st_mode & 07777), 0);
		if (rc == 0)
			rc = walk(b);
	} else if (S_ISREG(sb.st_mode)) {
		rc = put_file(b, &sb);
	} else {
		warn(b->path, "special file skipped");
	}
	b->path[len] = 0;
	return rc;
}

static int skip_dots(const struct dirent *d)
{
	return strcmp(d->d_name, ".") != 0 && strcmp(d->d_name, "..") != 0;
}

/* The entries of directory b->path, in name order. */
static int walk(struct backup *b)
{
	struct dirent **list;
	int i, n, rc = 0;

	n = scandir(b->path, &list, skip_dots, alphasort);
	if (n < 0)
		return fail_errno("cannot read directory", b->path);
	for (i = 0; i < n; i++) {
		if (rc == 0)
			rc = put_entry(b, list[i]->d_name);
		free(list[i]);
	}
	free(list);
	return rc;
}

static int cmd_backup(const char *store_path, const char *name,
		      const char *dir)
{
	struct backup b;
	struct stat sb;
	dd_store *st = NULL;
	int rc;

	if ((rc = dd_name_check(name)) < 0)
		return fail_dd(name, rc, "DD_ENAME: not a valid snapshot name");
	if (stat(dir, &sb) < 0)
		return fail_errno("cannot stat", dir);
	if (!S_ISDIR(sb.st_mode))
		return fail(dir, "not a directory");
	if (strlen(dir) + 1 > PATH_BYTES)
		return fail(dir, "path too long");
	strcpy(b.path, dir);
	while (strlen(b.path) > 1 && b.path[strlen(b.path) - 1] == '/')
		b.path[strlen(b.path) - 1] = 0;
	b.root_len = strlen(b.path) + 1;
	if (open_store(&st, store_path, 1, NULL) < 0)
		return -1;
	rc = dd_writer_begin(&b.w, st, name);
	if (rc < 0) {
		fail_dd("cannot start snapshot", rc, dd_store_errmsg(st));
		dd_store_close(st);
		return -1;
	}
	rc = dd_writer_write(b.w, MAGIC, MAGIC_LEN);
	if (rc < 0)
		rc = fail_dd("write", rc, dd_writer_errmsg(b.w));
	if (rc == 0)
		rc = walk(&b);
	if (rc == 0) {
		b.path[b.root_len - 1] = 0;
		rc = put_header(&b, 'E', 0, 0);
	}
	if (rc == 0) {
		rc = dd_writer_commit(b.w);
		if (rc < 0)
			rc = fail_dd("commit", rc, dd_writer_errmsg(b.w));
	}
	dd_writer_free(b.w);   /* aborts unless committed */
	dd_store_close(st);
	if (rc == 0)
		printf("backed up %s as %s (%lu warning%s)\n", dir, name,
		       warnings, warnings == 1 ? "" : "s");
	return rc;
}

/* ---- list -----------------------------------------------------------------*/

static int cmd_list(const char *store_path)
{
	dd_snapshot_info *list;
	dd_store *st;
	size_t count, i;
	int rc;

	if (open_store(&st, store_path, 0, NULL) < 0)
		return -1;
	rc = dd_snapshot_list(st, &list, &count);
	if (rc < 0) {
		fail_dd("list", rc, dd_store_errmsg(st));
		dd_store_close(st);
		return -1;
	}
	for (i = 0; i < count; i++) {
		time_t t = (time_t)list[i].ctime;
		struct tm tm;
		char when[32] = "?";

		if (localtime_r(&t, &tm))
			strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
		printf("%s\t%" PRIu64 "\t%s\n", list[i].name, list[i].size,
		       when);
	}
	dd_snapshot_list_free(list);
	dd_store_close(st);
	return 0;
}

/* ---- restore --------------------------------------------------------------*/

/* Sequential reading of a snapshot through dd_reader_pread. */
struct source {
	dd_reader *r;
	uint64_t off;
	unsigned char *buf;
	size_t pos, len;
};

static int src_read(struct source *s, void *dst, size_t n)
{
	unsigned char *p = dst;

	while (n > 0) {
		size_t take;

		if (s->pos == s->len) {
			int rc = dd_reader_pread(s->r, s->buf, CHUNK, s->off,
						 &s->len);

			if (rc < 0)
				return fail_dd("read", rc,
					       dd_reader_errmsg(s->r));
			if (s->len == 0)
				return fail("archive", "truncated");
			s->off += s->len;
			s->pos = 0;
		}
		take = s->len - s->pos < n ? s->len - s->pos : n;
		memcpy(p, s->buf + s->pos, take);
		s->pos += take;
		p += take;
		n -= take;
	}
	return 0;
}

/* A relative path with no empty, "." or ".." component: nothing restored
 * lands outside DESTDIR. */
static int path_ok(const char *p)
{
	const char *c = p;

	if (*p == '/' || *p == 0)
		return 0;
	while (*c) {
		size_t n = strcspn(c, "/");

		if (n == 0 || (n == 1 && c[0] == '.') ||
		    (n == 2 && c[0] == '.' && c[1] == '.'))
			return 0;
		c += n;
		if (*c == '/')
			c++;
		if (*c == 0 && c[-1] == '/')
			return 0;
	}
	return 1;
}

struct dirmode {
	char *path;
	mode_t mode;
};

static int restore_file(struct source *s, const char *path, mode_t mode,
			uint64_t size)
{
	unsigned char *buf = malloc(CHUNK);
	int fd = -1, rc = -1;

	if (!buf)
		return fail("restore", "out of memory");
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
	if (fd < 0) {
		fail_errno("cannot create", path);
		goto out;
	}
	while (size > 0) {
		size_t n = size < CHUNK ? (size_t)size : CHUNK, done = 0;

		if (src_read(s, buf, n) < 0)
			goto out;
		while (done < n) {
			ssize_t k = write(fd, buf + done, n - done);

			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0) {
				fail_errno("cannot write", path);
				goto out;
			}
			done += (size_t)k;
		}
		size -= n;
	}
	if (fchmod(fd, mode) < 0) {
		fail_errno("cannot chmod", path);
		goto out;
	}
	rc = 0;
out:
	if (fd >= 0 && close(fd) < 0 && rc == 0)
		rc = fail_errno("cannot write", path);
	free(buf);
	return rc;
}

static int restore_entries(struct source *s, const char *dest,
			   struct dirmode **dirs, size_t *ndirs)
{
	unsigned char hdr[HDR_LEN], magic[MAGIC_LEN];
	char rel[PATH_BYTES + 1], full[2 * PATH_BYTES + 2];

	if (src_read(s, magic, MAGIC_LEN) < 0)
		return -1;
	if (memcmp(magic, MAGIC, MAGIC_LEN) != 0)
		return fail("archive", "not a ddbackup snapshot (bad magic)");
	for (;;) {
		int type;
		mode_t mode;
		uint64_t plen, size;

		if (src_read(s, hdr, HDR_LEN) < 0)
			return -1;
		type = hdr[0];
		mode = (mode_t)(get_le(hdr + 1, 4) & 07777);
		plen = get_le(hdr + 5, 4);
		size = get_le(hdr + 9, 8);
		if (type == 'E')
			return 0;
		if ((type != 'D' && type != 'F') || plen == 0 ||
		    plen > PATH_BYTES || (type == 'D' && size != 0))
			return fail("archive", "damaged entry header");
		if (src_read(s, rel, (size_t)plen) < 0)
			return -1;
		rel[plen] = 0;
		if (memchr(rel, 0, (size_t)plen) || !path_ok(rel))
			return fail("archive", "unsafe or invalid path");
		snprintf(full, sizeof(full), "%s/%s", dest, rel);
		if (type == 'D') {
			struct dirmode *d;

			if (mkdir(full, 0700) < 0)
				return fail_errno("cannot create", full);
			d = realloc(*dirs, (*ndirs + 1) * sizeof(**dirs));
			if (!d)
				return fail("restore", "out of memory");
			*dirs = d;
			d[*ndirs].mode = mode;
			d[*ndirs].path = strdup(full);
			if (!d[*ndirs].path)
				return fail("restore", "out of memory");
			(*ndirs)++;
		} else if (restore_file(s, full, mode, size) < 0) {
			return -1;
		}
	}
}

static int cmd_restore(const char *store_path, const char *name,
		       const char *dest)
{
	struct source s = {NULL, 0, NULL, 0, 0};
	struct dirmode *dirs = NULL;
	size_t ndirs = 0, i;
	dd_store *st;
	int rc;

	if (mkdir(dest, 0700) < 0 && errno != EEXIST)
		return fail_errno("cannot create", dest);
	if (open_store(&st, store_path, 0, NULL) < 0)
		return -1;
	rc = dd_reader_open(&s.r, st, name);
	if (rc < 0) {
		fail_dd(name, rc, dd_store_errmsg(st));
		dd_store_close(st);
		return -1;
	}
	s.buf = malloc(CHUNK);
	rc = s.buf ? restore_entries(&s, dest, &dirs, &ndirs)
		   : fail("restore", "out of memory");
	/* Modes last, deepest first: a read-only directory is filled first. */
	for (i = ndirs; i-- > 0;) {
		if (rc == 0 && chmod(dirs[i].path, dirs[i].mode) < 0)
			rc = fail_errno("cannot chmod", dirs[i].path);
		free(dirs[i].path);
	}
	free(dirs);
	free(s.buf);
	dd_reader_close(s.r);
	dd_store_close(st);
	if (rc == 0)
		printf("restored %s into %s\n", name, dest);
	return rc;
}

/* ---- replicate ------------------------------------------------------------*/

struct sender {
	dd_store *st;
	const char *name;
	int fd;          /* the pipe's write end, closed by the thread */
	int rc;
};

static void *send_thread(void *arg)
{
	struct sender *snd = arg;

	snd->rc = dd_send(snd->st, snd->name, NULL, dd_fd_write, &snd->fd);
	close(snd->fd);  /* end of stream for the receiver */
	return NULL;
}

static int cmd_replicate(const char *src_path, const char *name,
			 const char *dst_path)
{
	struct sender snd;
	dd_stream_info info;
	dd_store_info si;
	dd_store *src = NULL, *dst = NULL;
	pthread_t tid;
	int fds[2], rc;

	if (open_store(&src, src_path, 0, NULL) < 0)
		return -1;
	rc = dd_store_info_get(src, &si);
	if (rc < 0) {
		fail_dd(src_path, rc, dd_store_errmsg(src));
		goto out;
	}
	if (open_store(&dst, dst_path, 1, &si) < 0) {
		rc = -1;
		goto out;
	}
	/* A receiver that stops early must not kill us with SIGPIPE: the
	 * sender gets DD_EIO instead. */
	signal(SIGPIPE, SIG_IGN);
	if (pipe(fds) < 0) {
		rc = fail_errno("cannot create", "pipe");
		goto out;
	}
	snd.st = src;
	snd.name = name;
	snd.fd = fds[1];
	snd.rc = 0;
	if (pthread_create(&tid, NULL, send_thread, &snd) != 0) {
		close(fds[0]);
		close(fds[1]);
		rc = fail("replicate", "cannot start the sending thread");
		goto out;
	}
	rc = dd_recv(dst, NULL, dd_fd_read, &fds[0], &info);
	close(fds[0]);   /* unblocks a sender whose receiver gave up */
	pthread_join(tid, NULL);
	if (snd.rc < 0) {
		/* the sender's error explains a receiver's truncated stream */
		rc = fail_dd("send", snd.rc, dd_store_errmsg(src));
	} else if (rc < 0) {
		rc = fail_dd("receive", rc, dd_store_errmsg(dst));
	} else {
		printf("replicated %s: %" PRIu64 " bytes, %" PRIu64
		       " stream bytes\n", info.name, info.size,
		       info.stream_bytes);
	}
out:
	dd_store_close(dst);
	dd_store_close(src);
	return rc < 0 ? -1 : 0;
}

/* ---- main -----------------------------------------------------------------*/

static int usage(void)
{
	fprintf(stderr,
		"usage: %s backup STORE NAME DIR\n"
		"       %s list STORE\n"
		"       %s restore STORE NAME DESTDIR\n"
		"       %s replicate SRCSTORE NAME DSTSTORE\n",
		prog, prog, prog, prog);
	return 2;
}

int main(int argc, char **argv)
{
	int rc;

	if (argc < 2)
		return usage();
	if (strcmp(argv[1], "backup") == 0 && argc == 5)
		rc = cmd_backup(argv[2], argv[3], argv[4]);
	else if (strcmp(argv[1], "list") == 0 && argc == 3)
		rc = cmd_list(argv[2]);
	else if (strcmp(argv[1], "restore") == 0 && argc == 5)
		rc = cmd_restore(argv[2], argv[3], argv[4]);
	else if (strcmp(argv[1], "replicate") == 0 && argc == 5)
		rc = cmd_replicate(argv[2], argv[3], argv[4]);
	else
		return usage();
	return rc < 0 ? 1 : 0;
}
