/*
 * lock.c -- who may change a store, and who does: the store lock, the gc
 * lock and the registry of running writers (format/store.md §1, §7).
 *
 *   STORE/lock        flock(2): shared by every writer (put, receive, rm,
 *                     gc, scrub, repair --from) for as long as it runs,
 *                     exclusive for what needs
 *                     the store to itself (repair, the format upgrade).
 *                     An exclusive holder writes who it is into it, so
 *                     that a refused writer can name it.
 *   STORE/gc.lock     exclusive while one gc runs; names its holder.
 *   STORE/writers/ID  one file a running writer (ID: its snapshot id, 16
 *                     hex digits), created and locked inside the write
 *                     transaction that records the writer pending, and
 *                     removed when it ends.  Its lock is the writer's
 *                     liveness -- a killed writer's lock is gone with its
 *                     process, and recovery then takes over its pending
 *                     snapshot -- and its text says who it is and the
 *                     catalog transaction it started at, below which gc
 *                     may free dead blocks.
 *
 * Every lock here is flock(2) on a descriptor of its own, so two writers
 * of one process (two threads) hold and test them independently.  Waits
 * are polled (LOCK_NB, 20 ms apart) so that they can end at a deadline.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/holder.h"
#include "common/io.h"
#include "store/store_internal.h"

#define DD_WRITERS_DIR "writers"
#define DD_LOCK_POLL_NS (20 * 1000 * 1000)

static double dd_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* "pid N on HOST since TIME start T\n", a holder line (format/store.md
 * §1). */
static void dd_holder_text(char *buf, size_t len, uint64_t start)
{
	char who[320];

	dd_holder_ident(who, sizeof(who));
	snprintf(buf, len, "%s start %" PRIu64 "\n", who, start);
}

/* The holder a lock file names, without its trailing "start N", for a
 * message; "" when it names none. */
static void dd_holder_read(int fd, char *buf, size_t len)
{
	ssize_t n = pread(fd, buf, len - 1, 0);
	char *cut;

	buf[n > 0 ? n : 0] = 0;
	if ((cut = strstr(buf, " start ")) != NULL)
		*cut = 0;
	if ((cut = strchr(buf, '\n')) != NULL)
		*cut = 0;
}

void dd_writer_set_start(int fd, uint64_t start)
{
	char text[400];

	dd_holder_text(text, sizeof(text), start);
	if (ftruncate(fd, 0) == 0 &&
	    pwrite(fd, text, strlen(text), 0) < 0)
		return;    /* a name for messages only */
}

/* flock(fd, how) within the wait rules: not at all, until a deadline
 * (timeout_ms > 0), or forever.  1 taken, 0 busy, < 0 an error. */
static int dd_flock_wait(dd_err *err, int fd, int how, bool wait,
			 unsigned timeout_ms, const char *what)
{
	double deadline = timeout_ms ? dd_now() + timeout_ms / 1000.0 : 0;

	for (;;) {
		struct timespec nap = {0, DD_LOCK_POLL_NS};

		if (flock(fd, how | LOCK_NB) == 0)
			return 1;
		if (errno == EINTR)
			continue;
		if (errno != EWOULDBLOCK)
			return dd_err_set_errno(err, errno, "%s", what);
		if (!wait || (deadline && dd_now() >= deadline))
			return 0;
		nanosleep(&nap, NULL);
	}
}

int dd_lock_take_at(dd_err *err, const char *dir, const char *name,
		    bool exclusive, bool wait, unsigned timeout_ms, int *fd_out)
{
	char path[4200], holder[400];
	int fd, rc;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = dd_io_open(err, path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd == DD_EPERM && !exclusive)
		fd = dd_io_open(err, path, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return fd;
	rc = dd_flock_wait(err, fd, exclusive ? LOCK_EX : LOCK_SH, wait,
			   timeout_ms, path);
	if (rc == 1) {
		if (exclusive)
			dd_writer_set_start(fd, 0);
		*fd_out = fd;
		return 0;
	}
	if (rc == 0) {
		dd_holder_read(fd, holder, sizeof(holder));
		rc = dd_err_set(err, DD_EBUSY, "%s: store is busy: %s%s%s%s",
				dir, exclusive ? "in use"
				: "another process has it to itself",
				*holder ? " (" : "", holder, *holder ? ")" : "");
		if (exclusive && !strcmp(name, "lock"))
			dd_writers_name(dir, err);
	}
	dd_io_close(fd);
	return rc;
}

int dd_lock_take(dd_store *s, dd_err *err, const char *name, bool exclusive,
		 int *fd_out)
{
	return dd_lock_take_at(err, s->st_path, name, exclusive,
			       s->st_opts.wait_for_lock,
			       s->st_opts.lock_timeout_ms, fd_out);
}

void dd_lock_drop(int fd)
{
	if (fd >= 0)
		dd_io_close(fd);    /* and the lock with it */
}

/* ---- the registry of running writers ------------------------------------------*/

static void dd_writer_file(char *buf, size_t len, const dd_store *s,
			   uint64_t id)
{
	snprintf(buf, len, "%s/" DD_WRITERS_DIR "/%016" PRIx64, s->st_path, id);
}

/* LOCK_EX on a registration: the liveness tests (dd_writer_alive,
 * dd_writers_each) hold a dead writer's for an instant, so a few short
 * retries tell those from a live holder. */
static bool dd_flock_briefly(int fd)
{
	for (int i = 0; i < 100; i++) {
		struct timespec nap = {0, 1000 * 1000};

		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return true;
		if (errno != EWOULDBLOCK && errno != EINTR)
			return false;
		nanosleep(&nap, NULL);
	}
	return false;
}

int dd_writer_register(dd_store *s, dd_err *err, uint64_t id, uint64_t start,
		       int *fd_out)
{
	char path[4300];
	int fd;

	snprintf(path, sizeof(path), "%s/" DD_WRITERS_DIR, s->st_path);
	if (mkdir(path, 0755) != 0 && errno != EEXIST)
		return dd_err_set_errno(err, errno, "mkdir %s", path);
	dd_writer_file(path, sizeof(path), s, id);
	for (;;) {
		struct stat held, named;

		fd = dd_io_open(err, path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		if (fd < 0)
			return fd;
		if (!dd_flock_briefly(fd)) {
			dd_io_close(fd);
			return dd_err_set(err, DD_EBUSY, "snapshot id %" PRIu64
					  " has a writer already", id);
		}
		/* the file may have been unlinked by the writer it was
		 * (dd_writer_unregister) between the open and the lock: a
		 * lock on that is nobody's to see */
		if (fstat(fd, &held) == 0 && stat(path, &named) == 0 &&
		    held.st_ino == named.st_ino && held.st_dev == named.st_dev)
			break;
		dd_io_close(fd);
	}
	dd_writer_set_start(fd, start);
	*fd_out = fd;
	return 0;
}

void dd_writer_unregister(dd_store *s, uint64_t id, int fd)
{
	char path[4300];

	if (fd < 0)
		return;
	dd_writer_file(path, sizeof(path), s, id);
	unlink(path);         /* first: no one may take the lock of a ghost */
	dd_io_close(fd);
}

bool dd_writer_alive(dd_store *s, uint64_t id)
{
	char path[4300];
	int fd;
	bool alive;

	dd_writer_file(path, sizeof(path), s, id);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return false;     /* never registered, or gone */
	alive = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
	close(fd);
	return alive;
}

void dd_writer_who(dd_store *s, uint64_t id, char *buf, size_t len)
{
	char path[4300];
	int fd;

	buf[0] = 0;
	dd_writer_file(path, sizeof(path), s, id);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	if (flock(fd, LOCK_SH | LOCK_NB) != 0)
		dd_holder_read(fd, buf, len);
	close(fd);
}

/* Calls fn for each running writer: its id, the transaction it started
 * at, and who it is. */
typedef void (*dd_writer_fn)(void *ctx, uint64_t id, uint64_t start,
			     const char *who);

static int dd_writers_each(const char *dir, dd_err *err, dd_writer_fn fn,
			   void *ctx)
{
	char path[4300];
	DIR *d;
	struct dirent *de;

	snprintf(path, sizeof(path), "%s/" DD_WRITERS_DIR, dir);
	if (!(d = opendir(path)))
		return errno == ENOENT ? 0
				       : dd_err_set_errno(err, errno, "%s", path);
	while ((de = readdir(d)) != NULL) {
		char text[400], *end, *st;
		uint64_t id, start = 0;
		int fd;

		errno = 0;
		id = strtoull(de->d_name, &end, 16);
		if (strlen(de->d_name) != 16 || *end || errno)
			continue;
		fd = openat(dirfd(d), de->d_name, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			fd = openat(dirfd(d), de->d_name, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			/* not running: a killed writer's, removed while its
			 * lock is ours (a registration racing this finds the
			 * file gone and makes a new one: dd_writer_register) */
			unlinkat(dirfd(d), de->d_name, 0);
			close(fd);
			continue;
		}
		text[0] = 0;
		{
			ssize_t n = pread(fd, text, sizeof(text) - 1, 0);

			text[n > 0 ? n : 0] = 0;
		}
		close(fd);
		/* a writer between creating and naming itself protects
		 * everything (start 0) */
		if ((st = strstr(text, " start ")) != NULL) {
			start = strtoull(st + 7, NULL, 10);
			*st = 0;
		}
		fn(ctx, id, start, text);
	}
	closedir(d);
	return 0;
}

static void dd_min_start(void *ctx, uint64_t id, uint64_t start,
			 const char *who)
{
	uint64_t *min = ctx;

	(void)id;
	(void)who;
	if (start < *min)
		*min = start;
}

int dd_writers_min_start(dd_store *s, dd_err *err, uint64_t *min)
{
	*min = UINT64_MAX;
	return dd_writers_each(s->st_path, err, dd_min_start, min);
}

struct dd_names {
	char *nm_buf;
	size_t nm_len, nm_n;
};

static void dd_name_one(void *ctx, uint64_t id, uint64_t start,
			const char *who)
{
	struct dd_names *nm = ctx;
	size_t used = strlen(nm->nm_buf);

	(void)id;
	(void)start;
	if (nm->nm_n++ < 3 && used + 4 < nm->nm_len)
		snprintf(nm->nm_buf + used, nm->nm_len - used, "%s%s",
			 used ? "; " : "", who);
}

void dd_writers_name(const char *dir, dd_err *err)
{
	char list[400] = "", tail[480];
	struct dd_names nm = {list, sizeof(list), 0};
	size_t used = strlen(err->de_msg);

	if (dd_writers_each(dir, &(dd_err){0}, dd_name_one, &nm) || !nm.nm_n)
		return;
	snprintf(tail, sizeof(tail), " (%zu writer%s: %s%s)", nm.nm_n,
		 nm.nm_n == 1 ? "" : "s", list, nm.nm_n > 3 ? "; ..." : "");
	if (used < sizeof(err->de_msg) - 1)
		snprintf(err->de_msg + used, sizeof(err->de_msg) - used, "%s",
			 tail);
}
