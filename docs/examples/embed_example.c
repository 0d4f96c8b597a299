/*
 * embed_example.c -- libdedup embedded in a program, end to end.
 *
 * Every snippet of docs/embedding.md comes from this file.  It creates a
 * store in a temporary directory, writes two snapshots (one with
 * dd_writer_write, one zero-copy with dd_writer_buffer/produce), reads
 * them back from two threads and compares, sends them as replication
 * streams into a memory buffer (dd_write_fn) and receives them into a
 * second store (dd_read_fn), goes through a file descriptor with
 * dd_fd_write / dd_fd_read, refuses a stream over a socketpair (the
 * sender fails, never dies or hangs), cancels a send from its progress
 * callback,
 * lists, stats, deletes, collects garbage and scrubs.  Exit status 0 on
 * success; on failure one line on stderr and exit 1.
 *
 * Build (see docs/embedding.md):
 *   cc -std=c99 -Wall -Wextra -pedantic -Werror embed_example.c \
 *      $(pkg-config --cflags --libs libdedup) -o embed_example
 *
 * Plain C99 + POSIX; the library needs none of the feature macros below,
 * the example uses them for mkdtemp, nftw and pthreads.
 */
#define _XOPEN_SOURCE 700

#include <dedup.h>

#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BLOCK (64u * 1024)         /* the stores' block size */
#define IMAGE (4u * 1024 * 1024)   /* bytes per snapshot */

static char tmpdir[512];   /* $TMPDIR (or /tmp)/dd-embed-XXXXXX */
static char path_a[600], path_b[600], path_c[600], path_stream[600];

/* ---- test data ------------------------------------------------------------*/

/* A deterministic image: pseudo-random blocks, a run of zero blocks (holes,
 * never stored) and, for `changed`, a few blocks rewritten. */
static void make_image(unsigned char *img, int changed)
{
	uint32_t x = 2463534242u;
	size_t i;

	for (i = 0; i < IMAGE; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		img[i] = (unsigned char)x;
	}
	memset(img + 8 * BLOCK, 0, 4 * BLOCK);
	if (changed) {
		memset(img + 20 * BLOCK, 'A', BLOCK);
		memset(img + 40 * BLOCK + 100, 'B', 3 * BLOCK);
	}
}

static int fail_msg(const char *what, int rc, const char *msg)
{
	fprintf(stderr, "embed_example: %s: %s (%s)\n", what, msg,
		dd_strerror(rc));
	return rc;
}

/* ---- writing --------------------------------------------------------------*/

/* [write] Writes len bytes as snapshot `name`: begin, write, commit. */
static int write_snapshot(dd_store *st, const char *name,
			  const unsigned char *data, size_t len)
{
	dd_writer *w;
	size_t off, n;
	int rc;

	rc = dd_writer_begin(&w, st, name);   /* other writers may run meanwhile */
	if (rc < 0)
		return fail_msg("dd_writer_begin", rc, dd_store_errmsg(st));
	for (off = 0; off < len; off += n) {
		n = len - off < 1000000 ? len - off : 1000000;
		rc = dd_writer_write(w, data + off, n);
		if (rc < 0)
			goto fail;
	}
	rc = dd_writer_commit(w);             /* durable and visible now */
	if (rc < 0)
		goto fail;
	dd_writer_free(w);
	return 0;
fail:
	fail_msg("write", rc, dd_writer_errmsg(w));
	dd_writer_abort(w);   /* nothing becomes visible */
	dd_writer_free(w);
	return rc;
}
/* [/write] */

/* [zerocopy] Zero-copy: fill the writer's own buffer (here with memcpy from
 * `src`; a real program would read(2) straight into it). */
static int write_snapshot_zerocopy(dd_store *st, const char *name,
				   const unsigned char *src, size_t len)
{
	dd_writer *w;
	size_t off = 0;
	int rc;

	rc = dd_writer_begin(&w, st, name);
	if (rc < 0)
		return fail_msg("dd_writer_begin", rc, dd_store_errmsg(st));
	while (off < len) {
		void *buf;
		size_t room, n;

		rc = dd_writer_buffer(w, &buf, &room);  /* room >= 1 */
		if (rc < 0)
			goto fail;
		n = len - off < room ? len - off : room;
		memcpy(buf, src + off, n);
		rc = dd_writer_produce(w, n);           /* n <= room */
		if (rc < 0)
			goto fail;
		off += n;
	}
	rc = dd_writer_commit(w);
	if (rc < 0)
		goto fail;
	dd_writer_free(w);
	return 0;
fail:
	fail_msg("zero-copy write", rc, dd_writer_errmsg(w));
	dd_writer_free(w);    /* aborts a writer that did not commit */
	return rc;
}
/* [/zerocopy] */

/* ---- reading --------------------------------------------------------------*/

/* [read] Reads snapshot `name` whole and compares it with `expect`. */
static int check_snapshot(dd_store *st, const char *name,
			  const unsigned char *expect, size_t len)
{
	static const size_t chunk = 256 * 1024;
	unsigned char *buf = malloc(chunk);
	dd_reader *r = NULL;
	uint64_t off = 0;
	int rc;

	if (!buf)
		return DD_ENOMEM;
	rc = dd_reader_open(&r, st, name);
	if (rc < 0) {
		fail_msg("dd_reader_open", rc, dd_store_errmsg(st));
		goto out;
	}
	if (dd_reader_size(r) != len) {
		rc = fail_msg(name, DD_ECORRUPT, "unexpected size");
		goto out;
	}
	while (off < len) {
		size_t got;

		rc = dd_reader_pread(r, buf, chunk, off, &got);
		if (rc < 0) {   /* e.g. DD_ECHECKSUM: never wrong bytes */
			fail_msg("dd_reader_pread", rc, dd_reader_errmsg(r));
			goto out;
		}
		if (got == 0 || memcmp(buf, expect + off, got) != 0) {
			rc = fail_msg(name, DD_ECORRUPT, "read back differs");
			goto out;
		}
		off += got;
	}
	rc = 0;
out:
	dd_reader_close(r);
	free(buf);
	return rc;
}
/* [/read] */

/* [threads] One dd_store shared by threads, one dd_reader per thread. */
struct read_job {
	dd_store *st;
	const char *name;
	const unsigned char *expect;
	int rc;
};

static void *read_thread(void *arg)
{
	struct read_job *job = arg;

	job->rc = check_snapshot(job->st, job->name, job->expect, IMAGE);
	return NULL;
}

static int read_in_parallel(dd_store *st, const unsigned char *mon,
			    const unsigned char *tue)
{
	struct read_job jobs[2] = {
		{NULL, "monday", NULL, 0}, {NULL, "tuesday", NULL, 0}
	};
	pthread_t tid[2];
	int i, started = 0, rc = 0;

	jobs[0].st = jobs[1].st = st;
	jobs[0].expect = mon;
	jobs[1].expect = tue;
	for (i = 0; i < 2; i++) {
		if (pthread_create(&tid[i], NULL, read_thread, &jobs[i]) != 0)
			break;
		started++;
	}
	for (i = 0; i < started; i++) {
		pthread_join(tid[i], NULL);
		if (jobs[i].rc < 0)
			rc = jobs[i].rc;
	}
	return started == 2 ? rc : DD_ENOMEM;
}
/* [/threads] */

/* ---- streams through memory -----------------------------------------------*/

/* [membuf] A growing memory buffer: a dd_write_fn appends to it, a
 * dd_read_fn reads it back. */
struct membuf {
	unsigned char *data;
	size_t len, cap, pos;
};

static int mem_write(void *ctx, const void *buf, size_t len)
{
	struct membuf *m = ctx;

	if (len > m->cap - m->len) {
		size_t cap = m->cap ? m->cap : 65536;
		unsigned char *p;

		while (len > cap - m->len)
			cap *= 2;
		p = realloc(m->data, cap);
		if (!p)
			return DD_ENOMEM;   /* passed up unchanged by dd_send */
		m->data = p;
		m->cap = cap;
	}
	memcpy(m->data + m->len, buf, len);
	m->len += len;
	return 0;
}

static int mem_read(void *ctx, void *buf, size_t len, size_t *got)
{
	struct membuf *m = ctx;
	size_t n = m->len - m->pos < len ? m->len - m->pos : len;

	memcpy(buf, m->data + m->pos, n);
	m->pos += n;
	*got = n;       /* 0: end of stream */
	return 0;
}
/* [/membuf] */

/* [progress] Progress: bytes done of total (0 = unknown); a non-zero return
 * cancels the operation with DD_ECANCELED. */
struct progress {
	uint64_t calls, last;
	int cancel;
};

static int on_progress(void *ctx, uint64_t done, uint64_t total)
{
	struct progress *p = ctx;

	(void)total;
	p->calls++;
	p->last = done;
	return p->cancel;
}
/* [/progress] */

/* [send] Sends `name` (incremental against `base` when not NULL) into m. */
static int send_to_memory(dd_store *st, const char *name, const char *base,
			  struct membuf *m, struct progress *pg)
{
	dd_send_opts so = DD_SEND_OPTS_INIT;
	int rc;

	so.base = base;              /* NULL: a full stream */
	so.progress = on_progress;
	so.progress_ctx = pg;
	rc = dd_send(st, name, &so, mem_write, m);
	if (rc < 0 && rc != DD_ECANCELED)
		fail_msg("dd_send", rc, dd_store_errmsg(st));
	return rc;
}
/* [/send] */

/* [recv] Receives the stream in m into store `dst`; the snapshot appears
 * only once the whole stream has checked out. */
static int recv_from_memory(dd_store *dst, struct membuf *m)
{
	dd_recv_opts ro = DD_RECV_OPTS_INIT;
	dd_stream_info info;
	int rc;

	ro.name = NULL;              /* keep the name the stream carries */
	m->pos = 0;
	rc = dd_recv(dst, &ro, mem_read, m, &info);
	if (rc < 0)
		return fail_msg("dd_recv", rc, dd_store_errmsg(dst));
	printf("received %s%s%s: %" PRIu64 " bytes, %" PRIu64
	       " DATA + %" PRIu64 " REF records, %" PRIu64 " stream bytes\n",
	       info.name, info.base[0] ? " on " : "", info.base, info.size,
	       info.data_records, info.ref_records, info.stream_bytes);
	return 0;
}
/* [/recv] */

/* [fd] Through a file descriptor: dd_fd_write / dd_fd_read take a pointer
 * to the fd as their ctx.  dd_stream_check reads a stream and describes
 * it, storing nothing; its errors go to dd_last_errmsg(). */
static int stream_via_fd(dd_store *st, const char *name, const char *path)
{
	dd_stream_info info;
	int fd, rc;

	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return fail_msg(path, DD_EIO, "cannot create");
	rc = dd_send(st, name, NULL, dd_fd_write, &fd);
	close(fd);
	if (rc < 0)
		return fail_msg("dd_send to fd", rc, dd_store_errmsg(st));

	fd = open(path, O_RDONLY);
	if (fd < 0)
		return fail_msg(path, DD_EIO, "cannot open");
	rc = dd_stream_check(NULL, dd_fd_read, &fd, &info);
	close(fd);
	if (rc < 0)
		return fail_msg("dd_stream_check", rc, dd_last_errmsg());
	printf("stream file: %s, block size %" PRIu32 ", %" PRIu64
	       " bytes\n", info.name, info.block_size, info.stream_bytes);
	return 0;
}
/* [/fd] */

/* [socket] A sender and a receiver in two threads, over a socketpair.
 * Store `to` has another block size, so dd_recv refuses the stream
 * (DD_EBLOCKSIZE) and its thread closes its end: the sender's next write
 * fails (DD_EIO, "Broken pipe") instead of blocking once the socket is
 * full.  dd_fd_write never raises SIGPIPE, so the process lives on. */
struct recv_job {
	dd_store *st;
	int fd, rc;
};

static void *recv_thread(void *arg)
{
	struct recv_job *j = arg;

	j->rc = dd_recv(j->st, NULL, dd_fd_read, &j->fd, NULL);
	close(j->fd);            /* failed or not: the sender must know */
	return NULL;
}

static int refused_over_socket(dd_store *from, const char *name,
			       dd_store *to)
{
	struct recv_job job;
	pthread_t tid;
	int sv[2], rc;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		return fail_msg("socketpair", DD_EIO, "failed");
	job.st = to;
	job.fd = sv[1];
	job.rc = 0;
	if (pthread_create(&tid, NULL, recv_thread, &job) != 0) {
		close(sv[0]);
		close(sv[1]);
		return fail_msg("pthread_create", DD_EIO, "failed");
	}
	rc = dd_send(from, name, NULL, dd_fd_write, &sv[0]);
	close(sv[0]);
	pthread_join(tid, NULL);
	printf("refused receive: %s\nits sender: %s\n", dd_store_errmsg(to),
	       dd_store_errmsg(from));
	if (job.rc != DD_EBLOCKSIZE || rc != DD_EIO)
		return fail_msg("refused receive", DD_EINVAL,
				"expected DD_EBLOCKSIZE and DD_EIO");
	return 0;
}
/* [/socket] */

/* ---- list, delete, gc, scrub, stat ----------------------------------------*/

/* [list] */
static int list_snapshots(dd_store *st)
{
	dd_snapshot_info *list;
	size_t count, i;
	int rc;

	rc = dd_snapshot_list(st, &list, &count);
	if (rc < 0)
		return fail_msg("dd_snapshot_list", rc, dd_store_errmsg(st));
	for (i = 0; i < count; i++)
		printf("  %-10s %10" PRIu64 " bytes %6" PRIu64 " blocks "
		       "(%" PRIu64 " holes)\n", list[i].name, list[i].size,
		       list[i].blocks, list[i].zero_blocks);
	dd_snapshot_list_free(list);   /* accepts NULL (count 0) */
	return 0;
}
/* [/list] */

/* [scrub] Called once per place that uses a bad block; return non-zero to
 * stop the scrub (DD_ECANCELED). */
static int on_bad_block(const dd_scrub_bad *bad, void *ctx)
{
	(void)ctx;
	fprintf(stderr, "bad block in pack %" PRIu32 " at %" PRIu64
		": %s, used by %s at %" PRIu64 "\n", bad->pack,
		bad->pack_offset, dd_strerror(bad->error),
		bad->snapshot ? bad->snapshot : "(none)", bad->offset);
	return 0;
}

static int maintain(dd_store *st)
{
	dd_gc_opts go = DD_GC_OPTS_INIT;
	dd_gc_result gr;
	dd_scrub_result sr;
	dd_stat s;
	int rc;

	rc = dd_snapshot_delete(st, "monday");  /* space returns with gc */
	if (rc < 0)
		return fail_msg("dd_snapshot_delete", rc, dd_store_errmsg(st));
	rc = dd_store_gc(st, &go, &gr);
	if (rc < 0)
		return fail_msg("dd_store_gc", rc, dd_store_errmsg(st));
	printf("gc: %" PRIu64 " DDT entries removed, %" PRIu64
	       " pack bytes reclaimed\n", gr.ddt_entries_removed,
	       gr.bytes_reclaimed);

	rc = dd_store_scrub(st, on_bad_block, NULL, &sr);
	if (rc < 0)   /* DD_ECHECKSUM when any block is bad */
		return fail_msg("dd_store_scrub", rc, dd_store_errmsg(st));
	printf("scrub: %" PRIu64 " blocks, %" PRIu64 " bad\n",
	       sr.blocks_checked, sr.bad_blocks);

	s.version = DD_STAT_VERSION;   /* output structs: set the version */
	rc = dd_store_stat(st, &s);
	if (rc < 0)
		return fail_msg("dd_store_stat", rc, dd_store_errmsg(st));
	printf("stat: %" PRIu64 " snapshots, dedup %.2f, compress %.2f\n",
	       s.snapshots, s.dedup_ratio, s.compress_ratio);
	return 0;
}
/* [/scrub] */

/* [errors] Errors are negative DD_E* codes; the handle tells why. */
static int expect_missing(dd_store *st)
{
	dd_snapshot_info info;
	int rc = dd_snapshot_stat(st, "no-such-snapshot", &info);

	if (rc != DD_ENOENT)
		return fail_msg("dd_snapshot_stat", DD_EINVAL,
				"expected DD_ENOENT");
	printf("expected error: %s / %s\n", dd_strerror(rc),
	       dd_store_errmsg(st));
	if (dd_name_check("a/b") != DD_ENAME)  /* names are checked early */
		return DD_EINVAL;
	return 0;
}
/* [/errors] */

/* [cache] The block caches' figures for this handle since it was opened. */
static int print_cache_stats(dd_store *st)
{
	dd_cache_stats cs;
	int rc;

	cs.version = DD_CACHE_STATS_VERSION;
	rc = dd_cache_stats_get(st, &cs);
	if (rc < 0)
		return fail_msg("dd_cache_stats_get", rc, dd_store_errmsg(st));
	printf("cache: L1 %" PRIu64 " hits, %" PRIu64 " misses; %" PRIu64
	       " L2 devices; %" PRIu64 " pack reads\n", cs.l1_hits,
	       cs.l1_misses, cs.l2_devices, cs.pack_read_ops);
	return 0;
}
/* [/cache] */

/* ---- main -----------------------------------------------------------------*/

static int rm_entry(const char *path, const struct stat *sb, int flag,
		    struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/* [open] Creates a store with 64 KiB blocks and zstd level 3, and opens it
 * with a writer that waits for the lock instead of failing with DD_EBUSY. */
static int create_store(dd_store **out, const char *path)
{
	dd_create_opts co = DD_CREATE_OPTS_INIT;
	dd_open_opts oo = DD_OPEN_OPTS_INIT;
	int rc;

	if (dd_version_number() != DD_VERSION_NUMBER)
		fprintf(stderr, "built with libdedup %d.%d.%d, running %s\n",
			DD_VERSION_MAJOR, DD_VERSION_MINOR, DD_VERSION_PATCH,
			dd_version_string());

	co.block_size = BLOCK;            /* fixed for the store's life */
	co.compress = DD_COMPRESS_ZSTD;
	co.compress_level = 3;
	oo.wait_for_lock = 1;
	/* an existing store: dd_store_open(out, path, &oo) */
	rc = dd_store_create(out, path, &co, &oo);
	if (rc < 0)   /* no handle yet: the reason is per thread */
		return fail_msg("dd_store_create", rc, dd_last_errmsg());
	return 0;
}
/* [/open] */

static int run(unsigned char *mon, unsigned char *tue)
{
	dd_store *a = NULL, *b = NULL;
	dd_store_info si;
	struct membuf m = {NULL, 0, 0, 0};
	struct progress pg = {0, 0, 0};
	int rc;

	rc = create_store(&a, path_a);
	if (rc < 0)
		return rc;

	if ((rc = dd_store_info_get(a, &si)) < 0 ||
	    (rc = write_snapshot(a, "monday", mon, IMAGE)) < 0 ||
	    (rc = write_snapshot_zerocopy(a, "tuesday", tue, IMAGE)) < 0 ||
	    (rc = read_in_parallel(a, mon, tue)) < 0)
		goto out;
	printf("store a: block size %" PRIu32 ", 2 snapshots written and "
	       "read back\n", si.block_size);
	if ((rc = print_cache_stats(a)) < 0)
		goto out;

	/* the receiving store: same block size as the sender's */
	if ((rc = create_store(&b, path_b)) < 0)
		goto out;
	if ((rc = send_to_memory(a, "monday", NULL, &m, &pg)) < 0 ||
	    (rc = recv_from_memory(b, &m)) < 0)
		goto out;
	m.len = 0;
	if ((rc = send_to_memory(a, "tuesday", "monday", &m, &pg)) < 0 ||
	    (rc = recv_from_memory(b, &m)) < 0 ||
	    (rc = check_snapshot(b, "monday", mon, IMAGE)) < 0 ||
	    (rc = check_snapshot(b, "tuesday", tue, IMAGE)) < 0)
		goto out;
	printf("progress callback: %" PRIu64 " calls\n", pg.calls);

	/* cancellation: the progress callback says stop */
	pg.cancel = 1;
	m.len = 0;
	rc = send_to_memory(a, "tuesday", NULL, &m, &pg);
	if (rc != DD_ECANCELED) {
		rc = fail_msg("cancelled send", DD_EINVAL,
			      "expected DD_ECANCELED");
		goto out;
	}
	printf("cancelled send: %s\n", dd_store_errmsg(a));

	if ((rc = stream_via_fd(a, "tuesday", path_stream)) < 0 ||
	    (rc = expect_missing(a)) < 0)
		goto out;

	/* a receiver that refuses: store c has twice the block size */
	{
		dd_create_opts co = DD_CREATE_OPTS_INIT;
		dd_store *c = NULL;

		co.block_size = 2 * BLOCK;
		rc = dd_store_create(&c, path_c, &co, NULL);
		if (rc < 0) {
			fail_msg("dd_store_create", rc, dd_last_errmsg());
			goto out;
		}
		rc = refused_over_socket(a, "tuesday", c);
		dd_store_close(c);
		if (rc < 0)
			goto out;
	}
	printf("snapshots of a:\n");
	if ((rc = list_snapshots(a)) < 0 || (rc = maintain(a)) < 0 ||
	    (rc = check_snapshot(a, "tuesday", tue, IMAGE)) < 0)
		goto out;
	printf("snapshots of a after delete and gc:\n");
	rc = list_snapshots(a);
out:
	free(m.data);
	dd_store_close(b);   /* after every reader and writer is closed */
	dd_store_close(a);
	return rc;
}

int main(void)
{
	unsigned char *mon = malloc(IMAGE), *tue = malloc(IMAGE);
	const char *t = getenv("TMPDIR");
	int rc;

	snprintf(tmpdir, sizeof(tmpdir), "%s/dd-embed-XXXXXX",
		 t && *t ? t : "/tmp");
	if (!mon || !tue || !mkdtemp(tmpdir)) {
		fprintf(stderr, "embed_example: setup failed\n");
		return 1;
	}
	snprintf(path_a, sizeof(path_a), "%s/a", tmpdir);
	snprintf(path_b, sizeof(path_b), "%s/b", tmpdir);
	snprintf(path_c, sizeof(path_c), "%s/c", tmpdir);
	snprintf(path_stream, sizeof(path_stream), "%s/t.dds", tmpdir);
	make_image(mon, 0);
	make_image(tue, 1);
	rc = run(mon, tue);
	nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(mon);
	free(tue);
	if (rc < 0)
		return 1;
	printf("ok\n");
	return 0;
}
