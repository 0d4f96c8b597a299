/*
 * test_api.c -- the public API under misuse, through include/dedup.h only:
 * NULL handles and arguments for every function that takes them, writers
 * used after commit or abort, a reader of a snapshot deleted after open,
 * overflowing lengths, failing and cancelling callbacks, options structs of
 * unknown versions (and an old dd_open_opts), and one store shared by
 * reader threads while a writer thread writes.  Misuse must return the
 * documented code, leave a message, and never crash.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dedup.h"

#define KiB 1024u
#define MiB (1024u * 1024u)
#define BS (4 * KiB)

/* ---- helpers ------------------------------------------------------------*/

struct fixture {
	char base[64];
	char path[80];
	char path2[80];
	dd_store *st;
};

static void rm_rf(const char *path)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
	assert_int_equal(system(cmd), 0);
}

/* Deterministic bytes: image `seed` at offset off. */
static uint8_t byte_at(unsigned seed, uint64_t off)
{
	uint64_t x = (off / 8) * 0x9e3779b97f4a7c15ull + seed * 0xbf58476d1ce4e5b9ull;

	x ^= x >> 31;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 29;
	return (uint8_t)(x >> (8 * (off % 8)));
}

static void fill(uint8_t *p, size_t len, unsigned seed, uint64_t off)
{
	size_t i;

	for (i = 0; i < len; i++)
		p[i] = byte_at(seed, off + i);
}

static void write_image(dd_store *st, const char *name, unsigned seed,
			size_t size)
{
	uint8_t *buf = malloc(64 * KiB);
	dd_writer *w;
	size_t off, n;

	assert_non_null(buf);
	assert_int_equal(dd_writer_begin(&w, st, name), 0);
	for (off = 0; off < size; off += n) {
		n = size - off < 64 * KiB ? size - off : 64 * KiB;
		fill(buf, n, seed, off);
		assert_int_equal(dd_writer_write(w, buf, n), 0);
	}
	assert_int_equal(dd_writer_commit(w), 0);
	dd_writer_free(w);
	free(buf);
}

static void check_image(dd_reader *r, unsigned seed, size_t size)
{
	uint8_t *buf = malloc(64 * KiB), *exp = malloc(64 * KiB);
	uint64_t off = 0;

	assert_non_null(buf);
	assert_non_null(exp);
	assert_int_equal(dd_reader_size(r), size);
	while (off < size) {
		size_t got;

		assert_int_equal(dd_reader_pread(r, buf, 64 * KiB, off, &got), 0);
		assert_true(got > 0);
		fill(exp, got, seed, off);
		assert_memory_equal(buf, exp, got);
		off += got;
	}
	free(buf);
	free(exp);
}

static size_t count_snapshots(dd_store *st)
{
	dd_snapshot_info *list;
	size_t n;

	assert_int_equal(dd_snapshot_list(st, &list, &n), 0);
	dd_snapshot_list_free(list);
	return n;
}

/* The handle's message names the code: "DD_EINVAL: ...". */
#define assert_msg(msg, code) assert_msg_at(msg, code, __LINE__)

static void assert_msg_at(const char *msg, int code, int line)
{
	const char *sym = dd_strerror(code);
	size_t n = strcspn(sym, ":");

	assert_non_null(msg);
	if (strncmp(msg, sym, n) != 0)
		fail_msg("line %d: message '%s' does not start with %.*s", line,
			 msg, (int)n, sym);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	dd_create_opts co = DD_CREATE_OPTS_INIT;

	assert_non_null(f);
	strcpy(f->base, "/tmp/dd-test-api-XXXXXX");
	assert_non_null(mkdtemp(f->base));
	snprintf(f->path, sizeof(f->path), "%s/a", f->base);
	snprintf(f->path2, sizeof(f->path2), "%s/b", f->base);
	co.block_size = BS;
	assert_int_equal(dd_store_create(&f->st, f->path, &co, NULL), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	dd_store_close(f->st);
	rm_rf(f->base);
	free(f);
	return 0;
}

/* ---- memory streams -----------------------------------------------------*/

struct mem {
	uint8_t *data;
	size_t len, cap, pos;
	size_t fail_after;   /* a read or write past this many bytes fails */
	int code;            /* with this code */
};

static int mem_write(void *ctx, const void *buf, size_t len)
{
	struct mem *m = ctx;

	if (m->code && m->len + len > m->fail_after)
		return m->code;
	if (m->len + len > m->cap) {
		size_t cap = m->cap ? m->cap : 64 * KiB;
		uint8_t *p;

		while (cap < m->len + len)
			cap *= 2;
		p = realloc(m->data, cap);
		if (!p)
			return DD_ENOMEM;
		m->data = p;
		m->cap = cap;
	}
	memcpy(m->data + m->len, buf, len);
	m->len += len;
	return 0;
}

static int mem_read(void *ctx, void *buf, size_t len, size_t *got)
{
	struct mem *m = ctx;
	size_t n = m->len - m->pos < len ? m->len - m->pos : len;

	if (m->code && m->pos + n > m->fail_after)
		return m->code;
	memcpy(buf, m->data + m->pos, n);
	m->pos += n;
	*got = n;
	return 0;
}

static int stop_progress(void *ctx, uint64_t done, uint64_t total)
{
	int *calls = ctx;

	(void)done;
	(void)total;
	return ++*calls >= 1;
}

/* ---- NULL arguments -----------------------------------------------------*/

static void test_null_store_functions(void **state)
{
	struct fixture *f = *state;
	dd_store *st = f->st, *out = NULL;
	dd_store_info si;
	dd_snapshot_info info, *list = NULL;
	dd_stat s;
	dd_gc_result gr;
	dd_scrub_result sr;
	size_t count;

	assert_non_null(dd_strerror(DD_EINVAL));
	assert_non_null(dd_strerror(12345));
	assert_non_null(dd_strerror(-12345));
	assert_non_null(dd_version_string());
	assert_non_null(dd_last_errmsg());
	assert_non_null(dd_store_errmsg(NULL));

	assert_int_equal(dd_store_create(NULL, f->path2, NULL, NULL), DD_EINVAL);
	assert_int_equal(dd_store_create(&out, NULL, NULL, NULL), DD_EINVAL);
	assert_null(out);
	assert_msg(dd_last_errmsg(), DD_EINVAL);
	assert_int_equal(dd_store_open(NULL, f->path, NULL), DD_EINVAL);
	assert_int_equal(dd_store_open(&out, NULL, NULL), DD_EINVAL);
	assert_null(out);
	assert_msg(dd_store_errmsg(NULL), DD_EINVAL);
	dd_store_close(NULL);

	assert_int_equal(dd_store_info_get(NULL, &si), DD_EINVAL);
	assert_int_equal(dd_store_info_get(st, NULL), DD_EINVAL);
	assert_msg(dd_store_errmsg(st), DD_EINVAL);

	assert_int_equal(dd_snapshot_list(NULL, &list, &count), DD_EINVAL);
	assert_int_equal(dd_snapshot_list(st, NULL, &count), DD_EINVAL);
	assert_int_equal(dd_snapshot_list(st, &list, NULL), DD_EINVAL);
	assert_msg(dd_store_errmsg(st), DD_EINVAL);
	dd_snapshot_list_free(NULL);
	assert_int_equal(dd_snapshot_stat(NULL, "x", &info), DD_EINVAL);
	assert_int_equal(dd_snapshot_stat(st, NULL, &info), DD_ENAME);
	assert_int_equal(dd_snapshot_stat(st, "x", NULL), DD_EINVAL);
	assert_msg(dd_store_errmsg(st), DD_EINVAL);
	assert_int_equal(dd_snapshot_delete(NULL, "x"), DD_EINVAL);
	assert_int_equal(dd_snapshot_delete(st, NULL), DD_ENAME);
	assert_msg(dd_store_errmsg(st), DD_ENAME);

	s.version = DD_STAT_VERSION;
	assert_int_equal(dd_store_stat(NULL, &s), DD_EINVAL);
	assert_int_equal(dd_store_stat(st, NULL), DD_EINVAL);
	assert_msg(dd_store_errmsg(st), DD_EINVAL);
	assert_int_equal(dd_snapshot_delete(st, "x"), DD_ENOENT);
	assert_msg(dd_store_errmsg(st), DD_ENOENT);
	assert_int_equal(dd_store_scrub(st, NULL, NULL, NULL), 0);
	assert_int_equal(dd_store_gc(st, NULL, NULL), 0);
	assert_int_equal(dd_store_gc(NULL, NULL, &gr), DD_EINVAL);
	assert_int_equal(dd_store_scrub(NULL, NULL, NULL, &sr), DD_EINVAL);

	assert_int_equal(dd_name_check(NULL), DD_ENAME);
	assert_int_equal(dd_name_check(""), DD_ENAME);
	assert_int_equal(dd_name_check("a/b"), DD_ENAME);
}

static void test_null_writer_reader(void **state)
{
	struct fixture *f = *state;
	dd_store *st = f->st;
	dd_writer *w = NULL;
	dd_reader *r = NULL;
	uint8_t buf[16];
	void *p;
	size_t n;

	assert_int_equal(dd_writer_begin(NULL, st, "w"), DD_EINVAL);
	assert_int_equal(dd_writer_begin(&w, NULL, "w"), DD_EINVAL);
	assert_int_equal(dd_writer_begin(&w, st, NULL), DD_ENAME);
	assert_null(w);
	assert_msg(dd_store_errmsg(st), DD_ENAME);
	assert_int_equal(dd_writer_begin(NULL, st, "w"), DD_EINVAL);
	assert_msg(dd_store_errmsg(st), DD_EINVAL);
	assert_int_equal(dd_writer_begin(&w, st, "a/b"), DD_ENAME);
	assert_null(w);
	assert_int_equal(dd_writer_write(NULL, buf, 1), DD_EINVAL);
	assert_int_equal(dd_writer_buffer(NULL, &p, &n), DD_EINVAL);
	assert_int_equal(dd_writer_produce(NULL, 1), DD_EINVAL);
	assert_int_equal(dd_writer_commit(NULL), DD_EINVAL);
	dd_writer_abort(NULL);
	dd_writer_free(NULL);
	assert_non_null(dd_writer_errmsg(NULL));

	assert_int_equal(dd_writer_begin(&w, st, "w"), 0);
	assert_int_equal(dd_writer_write(w, NULL, 1), DD_EINVAL);
	assert_msg(dd_writer_errmsg(w), DD_EINVAL);
	dd_writer_free(w);   /* after an error: abort, free */
	assert_int_equal(dd_writer_begin(&w, st, "w"), 0);
	assert_int_equal(dd_writer_buffer(w, NULL, &n), DD_EINVAL);
	assert_msg(dd_writer_errmsg(w), DD_EINVAL);
	dd_writer_free(w);
	assert_int_equal(dd_writer_begin(&w, st, "w"), 0);
	assert_int_equal(dd_writer_buffer(w, &p, NULL), DD_EINVAL);
	dd_writer_free(w);
	/* more than the buffer handed out */
	assert_int_equal(dd_writer_begin(&w, st, "w"), 0);
	assert_int_equal(dd_writer_buffer(w, &p, &n), 0);
	assert_int_equal(dd_writer_produce(w, n + 1), DD_EINVAL);
	assert_msg(dd_writer_errmsg(w), DD_EINVAL);
	dd_writer_free(w);
	assert_int_equal(dd_writer_begin(&w, st, "w"), 0);
	assert_int_equal(dd_writer_produce(w, SIZE_MAX), DD_EINVAL);
	dd_writer_free(w);
	assert_int_equal(count_snapshots(st), 0);

	write_image(st, "img", 1, 10 * KiB);
	assert_int_equal(dd_reader_open(NULL, st, "img"), DD_EINVAL);
	assert_int_equal(dd_reader_open(&r, NULL, "img"), DD_EINVAL);
	assert_int_equal(dd_reader_open(&r, st, NULL), DD_ENAME);
	assert_null(r);
	assert_msg(dd_store_errmsg(st), DD_ENAME);
	assert_int_equal(dd_reader_open(NULL, st, "img"), DD_EINVAL);
	assert_msg(dd_store_errmsg(st), DD_EINVAL);
	assert_int_equal(dd_reader_open(&r, st, "nope"), DD_ENOENT);
	assert_msg(dd_store_errmsg(st), DD_ENOENT);
	assert_int_equal(dd_reader_open(&r, st, ".."), DD_ENAME);
	assert_null(r);
	assert_int_equal(dd_reader_size(NULL), 0);
	assert_int_equal(dd_reader_pread(NULL, buf, 1, 0, &n), DD_EINVAL);
	dd_reader_close(NULL);
	assert_non_null(dd_reader_errmsg(NULL));

	assert_int_equal(dd_reader_open(&r, st, "img"), 0);
	assert_int_equal(dd_reader_pread(r, NULL, 1, 0, &n), DD_EINVAL);
	assert_msg(dd_reader_errmsg(r), DD_EINVAL);
	assert_int_equal(dd_reader_pread(r, buf, 1, 0, NULL), DD_EINVAL);
	/* the reader still works after misuse */
	check_image(r, 1, 10 * KiB);
	dd_reader_close(r);
}


/* dd_recv_partial_walk's callback: counts (a NULL ctx: there must be
 * none), keeps the last name and token, stops when asked. */
struct partial_list {
	int n, stop;
	char name[256], token[128];
};

static int partial_seen(const char *name, const char *token, void *ctx)
{
	struct partial_list *pl = ctx;

	assert_non_null(pl);
	pl->n++;
	snprintf(pl->name, sizeof(pl->name), "%s", name);
	snprintf(pl->token, sizeof(pl->token), "%s", token);
	return pl->stop;
}

static void test_null_streams(void **state)
{
	struct fixture *f = *state;
	dd_store *st = f->st;
	struct mem m = {NULL, 0, 0, 0, 0, 0};
	dd_stream_info info;
	char tok[128];
	int fd = -1;
	uint8_t b[4];
	size_t got;

	write_image(st, "img", 1, 10 * KiB);
	assert_int_equal(dd_fd_write(NULL, b, 1), DD_EINVAL);
	assert_int_equal(dd_fd_read(NULL, b, 1, &got), DD_EINVAL);
	assert_int_equal(dd_fd_read(&fd, b, 1, NULL), DD_EINVAL);
	assert_int_not_equal(dd_fd_write(&fd, b, 1), 0);   /* fd -1 */

	assert_int_equal(dd_send(NULL, "img", NULL, mem_write, &m), DD_EINVAL);
	assert_int_equal(dd_send(st, NULL, NULL, mem_write, &m), DD_ENAME);
	assert_int_equal(dd_send(st, "img", NULL, NULL, &m), DD_EINVAL);
	assert_msg(dd_store_errmsg(st), DD_EINVAL);
	assert_int_equal(dd_send(st, "nope", NULL, mem_write, &m), DD_ENOENT);
	assert_int_equal(dd_send_fd(-1, "x", 0, 0, NULL, mem_write, &m), DD_EINVAL);
	assert_int_equal(dd_send_fd(0, NULL, 0, 0, NULL, mem_write, &m), DD_ENAME);
	assert_int_equal(dd_send_fd(0, "x", 0, 0, NULL, NULL, &m), DD_EINVAL);
	assert_msg(dd_last_errmsg(), DD_EINVAL);
	assert_int_equal(m.len, 0);

	assert_int_equal(dd_recv(NULL, NULL, mem_read, &m, &info), DD_EINVAL);
	assert_int_equal(dd_recv(st, NULL, NULL, &m, &info), DD_EINVAL);
	assert_msg(dd_store_errmsg(st), DD_EINVAL);
	assert_int_equal(dd_recv_fd(-1, NULL, mem_read, &m, &info), DD_EINVAL);
	assert_int_equal(dd_recv_fd(0, NULL, NULL, &m, &info), DD_EINVAL);
	assert_int_equal(dd_stream_check(NULL, NULL, &m, &info), DD_EINVAL);
	assert_int_equal(dd_recv_abort_partial(NULL), DD_EINVAL);
	assert_int_equal(dd_recv_resume_token(NULL, tok, sizeof(tok)), DD_EINVAL);
	assert_int_equal(dd_recv_resume_token(st, NULL, sizeof(tok)), DD_EINVAL);
	assert_int_equal(dd_recv_resume_token(st, tok, 0), DD_EINVAL);
	assert_int_equal(dd_recv_resume_token(st, tok, sizeof(tok)), DD_ENOENT);
	assert_int_equal(dd_recv_partial_walk(NULL, partial_seen, NULL),
			 DD_EINVAL);
	assert_int_equal(dd_recv_partial_walk(st, NULL, NULL), DD_EINVAL);
	assert_int_equal(dd_recv_partial_walk(st, partial_seen, NULL), 0);
	free(m.data);
}

static void test_null_scan_cache(void **state)
{
	struct fixture *f = *state;
	dd_store *st = f->st;
	dd_scan *scan = NULL;
	dd_scan_result sres;
	dd_scan_info sinfo;
	dd_cache_stats cs;
	dd_cache_dev *devs = NULL;
	dd_cache_config cc = DD_CACHE_CONFIG_INIT;
	size_t count;
	uint64_t bytes;

	assert_int_equal(dd_scan_new(NULL, NULL), DD_EINVAL);
	assert_int_equal(dd_scan_add_path(NULL, "/"), DD_EINVAL);
	assert_int_equal(dd_scan_add_fd(NULL, 0, NULL), DD_EINVAL);
	assert_int_equal(dd_scan_finish(NULL), DD_EINVAL);
	sres.version = DD_SCAN_RESULT_VERSION;
	sinfo.version = DD_SCAN_INFO_VERSION;
	assert_int_equal(dd_scan_result_get(NULL, 0, &sres), DD_EINVAL);
	assert_int_equal(dd_scan_info_get(NULL, &sinfo), DD_EINVAL);
	assert_non_null(dd_scan_errmsg(NULL));
	dd_scan_free(NULL);
	assert_int_equal(dd_scan_path_bytes(NULL, &bytes), DD_EINVAL);
	assert_int_equal(dd_scan_path_bytes(f->base, NULL), DD_EINVAL);

	assert_int_equal(dd_scan_new(&scan, NULL), 0);
	assert_int_equal(dd_scan_add_path(scan, NULL), DD_EINVAL);
	assert_msg(dd_scan_errmsg(scan), DD_EINVAL);
	dd_scan_free(scan);
	assert_int_equal(dd_scan_new(&scan, NULL), 0);
	assert_int_equal(dd_scan_add_fd(scan, -1, NULL), DD_EINVAL);
	dd_scan_free(scan);
	assert_int_equal(dd_scan_new(&scan, NULL), 0);
	assert_int_equal(dd_scan_result_get(scan, 0, NULL), DD_EINVAL);
	assert_int_equal(dd_scan_result_get(scan, 0, &sres), DD_ESTATE);
	assert_int_equal(dd_scan_info_get(scan, NULL), DD_EINVAL);
	assert_int_equal(dd_scan_finish(scan), 0);
	assert_int_equal(dd_scan_finish(scan), DD_ESTATE);
	assert_int_equal(dd_scan_result_get(scan, 1, &sres), DD_EINVAL);
	assert_int_equal(dd_scan_result_get(scan, SIZE_MAX, &sres), DD_EINVAL);
	assert_int_equal(dd_scan_add_path(scan, f->base), DD_ESTATE);
	dd_scan_free(scan);

	assert_non_null(dd_cache_state_name(-1));
	assert_non_null(dd_cache_state_name(1000));
	cs.version = DD_CACHE_STATS_VERSION;
	assert_int_equal(dd_cache_stats_get(NULL, &cs), DD_EINVAL);
	assert_int_equal(dd_cache_stats_get(st, NULL), DD_EINVAL);
	assert_int_equal(dd_cache_list(NULL, &devs, &count), DD_EINVAL);
	assert_int_equal(dd_cache_list(st, NULL, &count), DD_EINVAL);
	assert_int_equal(dd_cache_list(st, &devs, NULL), DD_EINVAL);
	dd_cache_list_free(NULL);
	assert_int_equal(dd_cache_add(NULL, "/tmp/x", 0, 0), DD_EINVAL);
	assert_int_equal(dd_cache_add(st, NULL, 0, 0), DD_EINVAL);
	assert_int_equal(dd_cache_add(st, "relative/path", 0, 0), DD_EINVAL);
	assert_int_equal(dd_cache_remove(NULL, "/tmp/x"), DD_EINVAL);
	assert_int_equal(dd_cache_remove(st, NULL), DD_EINVAL);
	assert_int_equal(dd_cache_config_get(NULL, &cc), DD_EINVAL);
	assert_int_equal(dd_cache_config_get(st, NULL), DD_EINVAL);
	assert_int_equal(dd_cache_config_set(NULL, &cc), DD_EINVAL);
	assert_int_equal(dd_cache_config_set(st, NULL), DD_EINVAL);
	assert_int_equal(dd_cache_flush(NULL), DD_EINVAL);
}

/* ---- writers after commit and abort ------------------------------------*/

static void test_writer_after_commit_abort(void **state)
{
	struct fixture *f = *state;
	dd_store *st = f->st;
	dd_writer *w;
	uint8_t buf[100] = {1};
	void *p;
	size_t n;

	assert_int_equal(dd_writer_begin(&w, st, "c"), 0);
	assert_int_equal(dd_writer_write(w, buf, sizeof(buf)), 0);
	assert_int_equal(dd_writer_commit(w), 0);
	assert_int_equal(dd_writer_write(w, buf, sizeof(buf)), DD_ESTATE);
	assert_msg(dd_writer_errmsg(w), DD_ESTATE);
	assert_int_equal(dd_writer_buffer(w, &p, &n), DD_ESTATE);
	assert_int_equal(dd_writer_produce(w, 1), DD_ESTATE);
	assert_int_equal(dd_writer_commit(w), DD_ESTATE);
	dd_writer_abort(w);   /* after commit: nothing happens */
	dd_writer_free(w);
	assert_int_equal(count_snapshots(st), 1);

	assert_int_equal(dd_writer_begin(&w, st, "a"), 0);
	assert_int_equal(dd_writer_write(w, buf, sizeof(buf)), 0);
	dd_writer_abort(w);
	assert_int_equal(dd_writer_write(w, buf, sizeof(buf)), DD_ESTATE);
	assert_msg(dd_writer_errmsg(w), DD_ESTATE);
	assert_int_equal(dd_writer_buffer(w, &p, &n), DD_ESTATE);
	assert_int_equal(dd_writer_produce(w, 1), DD_ESTATE);
	assert_int_equal(dd_writer_commit(w), DD_ESTATE);
	dd_writer_abort(w);   /* twice */
	dd_writer_free(w);
	assert_int_equal(count_snapshots(st), 1);
	/* the abort released the name */
	assert_int_equal(dd_writer_begin(&w, st, "a"), 0);
	assert_int_equal(dd_writer_commit(w), 0);
	dd_writer_free(w);
	assert_int_equal(count_snapshots(st), 2);
}

/* ---- readers and deletion -----------------------------------------------*/

static void test_reader_of_deleted_snapshot(void **state)
{
	struct fixture *f = *state;
	dd_store *st = f->st;
	dd_reader *r, *r2 = NULL;

	write_image(st, "gone", 7, 300 * KiB + 5);
	assert_int_equal(dd_reader_open(&r, st, "gone"), 0);
	assert_int_equal(dd_snapshot_delete(st, "gone"), 0);
	assert_int_equal(dd_reader_open(&r2, st, "gone"), DD_ENOENT);
	assert_null(r2);
	assert_msg(dd_store_errmsg(st), DD_ENOENT);
	check_image(r, 7, 300 * KiB + 5);   /* the reader's view */
	assert_int_equal(dd_snapshot_delete(st, "gone"), DD_ENOENT);
	dd_reader_close(r);
	assert_int_equal(count_snapshots(st), 0);
}

static void test_pread_overflow(void **state)
{
	struct fixture *f = *state;
	dd_reader *r;
	uint8_t buf[16], exp[16];
	size_t got = 99;
	uint64_t size = 10 * KiB + 3;
	int rc;

	write_image(f->st, "img", 3, (size_t)size);
	assert_int_equal(dd_reader_open(&r, f->st, "img"), 0);
	/* only 5 bytes remain: len SIZE_MAX is clamped by the image end */
	assert_int_equal(dd_reader_pread(r, buf, SIZE_MAX, size - 5, &got), 0);
	assert_int_equal(got, 5);
	fill(exp, 5, 3, size - 5);
	assert_memory_equal(buf, exp, 5);
	/* offsets at and past the end, and where off + len wraps */
	got = 99;
	assert_int_equal(dd_reader_pread(r, buf, sizeof(buf), size, &got), 0);
	assert_int_equal(got, 0);
	got = 99;
	rc = dd_reader_pread(r, buf, SIZE_MAX, UINT64_MAX - 1, &got);
	assert_true(rc == 0 || rc == DD_EINVAL);
	if (rc == 0)
		assert_int_equal(got, 0);
	got = 99;
	rc = dd_reader_pread(r, buf, sizeof(buf), UINT64_MAX, &got);
	assert_true(rc == 0 || rc == DD_EINVAL);
	if (rc == 0)
		assert_int_equal(got, 0);
	got = 99;
	assert_int_equal(dd_reader_pread(r, buf, 0, 0, &got), 0);
	assert_int_equal(got, 0);
	check_image(r, 3, (size_t)size);
	dd_reader_close(r);
}

/* ---- callbacks ----------------------------------------------------------*/

static void test_failing_callbacks(void **state)
{
	struct fixture *f = *state;
	dd_create_opts co = DD_CREATE_OPTS_INIT;
	dd_send_opts so = DD_SEND_OPTS_INIT;
	dd_recv_opts ro = DD_RECV_OPTS_INIT;
	struct mem m = {NULL, 0, 0, 0, 0, 0}, bad = {NULL, 0, 0, 0, 0, 0};
	dd_store *dst;
	dd_stream_info info;
	dd_reader *r;
	char tok[128];
	int calls = 0;

	write_image(f->st, "img", 5, 200 * KiB);
	/* a write callback that fails at once, and after some bytes */
	bad.code = DD_EIO;
	assert_int_equal(dd_send(f->st, "img", NULL, mem_write, &bad), DD_EIO);
	bad.fail_after = 50 * KiB;
	assert_int_equal(dd_send(f->st, "img", NULL, mem_write, &bad), DD_EIO);
	free(bad.data);
	bad.code = DD_ENOSPC;
	bad.len = 0;
	bad.data = NULL;
	bad.cap = 0;
	assert_int_equal(dd_send(f->st, "img", NULL, mem_write, &bad), DD_ENOSPC);
	free(bad.data);
	/* progress that says stop */
	so.progress = stop_progress;
	so.progress_ctx = &calls;
	assert_int_equal(dd_send(f->st, "img", &so, mem_write, &m), DD_ECANCELED);
	assert_msg(dd_store_errmsg(f->st), DD_ECANCELED);
	assert_true(calls >= 1);

	m.len = 0;
	assert_int_equal(dd_send(f->st, "img", NULL, mem_write, &m), 0);
	co.block_size = BS;
	assert_int_equal(dd_store_create(&dst, f->path2, &co, NULL), 0);
	/* a read callback that fails midway: nothing appears */
	m.code = DD_EIO;
	m.fail_after = m.len / 2;
	assert_int_equal(dd_recv(dst, NULL, mem_read, &m, &info), DD_EIO);
	assert_int_equal(count_snapshots(dst), 0);
	assert_int_equal(dd_recv_resume_token(dst, tok, sizeof(tok)), DD_ENOENT);
	m.pos = 0;
	m.fail_after = 0;
	m.code = DD_EPERM;
	assert_int_equal(dd_recv(dst, NULL, mem_read, &m, &info), DD_EPERM);
	assert_int_equal(count_snapshots(dst), 0);
	/* a receive cancelled by its progress callback */
	m.pos = 0;
	m.code = 0;
	calls = 0;
	ro.progress = stop_progress;
	ro.progress_ctx = &calls;
	assert_int_equal(dd_recv(dst, &ro, mem_read, &m, &info), DD_ECANCELED);
	assert_int_equal(count_snapshots(dst), 0);
	/* a store of another block size: its own code, nothing stored */
	{
		dd_store *other;
		char path3[96];

		snprintf(path3, sizeof(path3), "%s/other", f->base);
		co.block_size = 2 * BS;
		assert_int_equal(dd_store_create(&other, path3, &co, NULL), 0);
		m.pos = 0;
		assert_int_equal(dd_recv(other, NULL, mem_read, &m, &info),
				 DD_EBLOCKSIZE);
		assert_msg(dd_store_errmsg(other), DD_EBLOCKSIZE);
		assert_non_null(strstr(dd_store_errmsg(other), "4096"));
		assert_int_equal(count_snapshots(other), 0);
		dd_store_close(other);
	}
	/* the store is intact and takes the stream afterwards */
	m.pos = 0;
	assert_int_equal(dd_recv(dst, NULL, mem_read, &m, &info), 0);
	assert_int_equal(dd_reader_open(&r, dst, "img"), 0);
	check_image(r, 5, 200 * KiB);
	dd_reader_close(r);
	dd_store_close(dst);
	free(m.data);
}

/* ---- options versions ---------------------------------------------------*/

/* dd_open_opts as version 1 of the header declared it. */
struct open_opts_v1 {
	unsigned version;
	int wait_for_lock;
	int readonly;
	unsigned threads;
};

static void test_options_versions(void **state)
{
	struct fixture *f = *state;
	dd_create_opts co = DD_CREATE_OPTS_INIT;
	dd_open_opts oo = DD_OPEN_OPTS_INIT;
	dd_gc_opts go = DD_GC_OPTS_INIT;
	dd_send_opts so = DD_SEND_OPTS_INIT;
	dd_recv_opts ro = DD_RECV_OPTS_INIT;
	dd_scan_opts sco = DD_SCAN_OPTS_INIT;
	dd_cache_config cc = DD_CACHE_CONFIG_INIT;
	dd_stat s;
	dd_cache_stats cs;
	dd_scan_result sres;
	dd_scan_info sinfo;
	struct mem m = {NULL, 0, 0, 0, 0, 0};
	struct open_opts_v1 *v1;
	dd_store *st = NULL;
	dd_scan *scan = NULL;
	dd_writer *w;
	unsigned bad[2] = {0, 1000};
	int i;

	write_image(f->st, "img", 2, 8 * KiB);
	for (i = 0; i < 2; i++) {
		co.version = bad[i];
		assert_int_equal(dd_store_create(&st, f->path2, &co, NULL), DD_EINVAL);
		assert_null(st);
		assert_msg(dd_last_errmsg(), DD_EINVAL);
		co.version = DD_CREATE_OPTS_VERSION;
		oo.version = bad[i];
		assert_int_equal(dd_store_create(&st, f->path2, &co, &oo), DD_EINVAL);
		assert_int_equal(dd_store_open(&st, f->path, &oo), DD_EINVAL);
		assert_null(st);
		oo.version = DD_OPEN_OPTS_VERSION;

		go.version = bad[i];
		assert_int_equal(dd_store_gc(f->st, &go, NULL), DD_EINVAL);
		assert_msg(dd_store_errmsg(f->st), DD_EINVAL);
		go.version = DD_GC_OPTS_VERSION;
		so.version = bad[i];
		assert_int_equal(dd_send(f->st, "img", &so, mem_write, &m), DD_EINVAL);
		assert_int_equal(m.len, 0);
		so.version = DD_SEND_OPTS_VERSION;
		ro.version = bad[i];
		assert_int_equal(dd_recv(f->st, &ro, mem_read, &m, NULL), DD_EINVAL);
		assert_int_equal(dd_stream_check(&ro, mem_read, &m, NULL), DD_EINVAL);
		ro.version = DD_RECV_OPTS_VERSION;
		sco.version = bad[i];
		assert_int_equal(dd_scan_new(&scan, &sco), DD_EINVAL);
		assert_null(scan);
		sco.version = DD_SCAN_OPTS_VERSION;
		cc.version = bad[i];
		assert_int_equal(dd_cache_config_set(f->st, &cc), DD_EINVAL);
		assert_int_equal(dd_cache_config_get(f->st, &cc), DD_EINVAL);
		cc.version = DD_CACHE_CONFIG_VERSION;

		s.version = bad[i];
		assert_int_equal(dd_store_stat(f->st, &s), DD_EINVAL);
		cs.version = bad[i];
		assert_int_equal(dd_cache_stats_get(f->st, &cs), DD_EINVAL);
	}
	/* the refused creates left nothing behind */
	assert_int_equal(dd_store_create(&st, f->path2, &co, &oo), 0);
	dd_store_close(st);
	st = NULL;
	assert_int_equal(dd_scan_new(&scan, NULL), 0);
	assert_int_equal(dd_scan_finish(scan), 0);
	sres.version = 0;
	sinfo.version = 0;
	assert_int_equal(dd_scan_result_get(scan, 0, &sres), DD_EINVAL);
	assert_int_equal(dd_scan_info_get(scan, &sinfo), DD_EINVAL);
	dd_scan_free(scan);

	/* an old caller's dd_open_opts: exactly the version 1 bytes */
	v1 = malloc(sizeof(*v1));
	assert_non_null(v1);
	v1->version = 1;
	v1->wait_for_lock = 0;
	v1->readonly = 1;
	v1->threads = 1;
	assert_int_equal(dd_store_open(&st, f->path, (const dd_open_opts *)(void *)v1), 0);
	assert_int_equal(dd_writer_begin(&w, st, "ro"), DD_EPERM);   /* readonly held */
	dd_store_close(st);
	v1->readonly = 0;
	assert_int_equal(dd_store_open(&st, f->path, (const dd_open_opts *)(void *)v1), 0);
	write_image(st, "v1", 4, 20 * KiB);
	dd_store_close(st);
	free(v1);
	assert_int_equal(count_snapshots(f->st), 2);
	free(m.data);
}

/* ---- threads: readers beside a writer ----------------------------------*/

#define IMG_A (2 * MiB + 123)
#define IMG_B (3 * MiB)

struct job {
	dd_store *st;
	unsigned seed;
	int rc;       /* 0, a DD_E* code, or 1: bytes differ */
};

static void *reader_thread(void *arg)
{
	struct job *j = arg;
	uint8_t *buf = malloc(64 * KiB), *exp = malloc(64 * KiB);
	uint64_t x = j->seed * 0x9e3779b97f4a7c15ull + 1;
	dd_reader *r = NULL;
	int i;

	if (!buf || !exp) {
		j->rc = DD_ENOMEM;
		goto out;
	}
	j->rc = dd_reader_open(&r, j->st, "a");
	for (i = 0; i < 150 && j->rc == 0; i++) {
		uint64_t off;
		size_t len, got, want;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		off = x % (IMG_A + 10);
		len = (size_t)(x >> 40) % (64 * KiB) + 1;
		j->rc = dd_reader_pread(r, buf, len, off, &got);
		if (j->rc < 0)
			break;
		want = off >= IMG_A ? 0 : (IMG_A - off < len ? (size_t)(IMG_A - off) : len);
		fill(exp, want, 1, off);
		if (got != want || memcmp(buf, exp, got) != 0)
			j->rc = 1;
	}
out:
	dd_reader_close(r);
	free(buf);
	free(exp);
	return NULL;
}

static void *writer_thread(void *arg)
{
	struct job *j = arg;
	uint8_t *buf = malloc(64 * KiB);
	dd_writer *w = NULL;
	size_t off, n;

	j->rc = buf ? dd_writer_begin(&w, j->st, "b") : DD_ENOMEM;
	for (off = 0; off < IMG_B && j->rc == 0; off += n) {
		n = IMG_B - off < 64 * KiB ? IMG_B - off : 64 * KiB;
		fill(buf, n, 2, off);
		j->rc = dd_writer_write(w, buf, n);
	}
	if (j->rc == 0)
		j->rc = dd_writer_commit(w);
	dd_writer_free(w);
	free(buf);
	return NULL;
}

static void test_threads_readers_and_writer(void **state)
{
	struct fixture *f = *state;
	struct job jobs[4];
	pthread_t tid[4];
	dd_reader *r;
	int i;

	write_image(f->st, "a", 1, IMG_A);
	for (i = 0; i < 4; i++) {
		jobs[i].st = f->st;
		jobs[i].seed = (unsigned)i + 1;
		jobs[i].rc = -100;
		assert_int_equal(pthread_create(&tid[i], NULL,
						i == 3 ? writer_thread : reader_thread,
						&jobs[i]), 0);
	}
	for (i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(tid[i], NULL), 0);
		if (jobs[i].rc != 0)
			fail_msg("thread %d: %d (%s)", i, jobs[i].rc,
				 jobs[i].rc == 1 ? "bytes differ"
						 : dd_strerror(jobs[i].rc));
	}
	assert_int_equal(dd_reader_open(&r, f->st, "b"), 0);
	check_image(r, 2, IMG_B);
	dd_reader_close(r);
	assert_int_equal(dd_reader_open(&r, f->st, "a"), 0);
	check_image(r, 1, IMG_A);
	dd_reader_close(r);
}

/* Snapshots of a fastcdc store travel as streams of content-defined
 * blocks (format/stream.md §12): full and incremental into another
 * fastcdc store, never into a fixed one (refused, naming both chunkers);
 * an interrupted resumable receive keeps what arrived and a stream from
 * the token's byte offset completes it. */
static void test_cdc_streams(void **state)
{
	struct fixture *f = *state;
	dd_create_opts co = DD_CREATE_OPTS_INIT;
	dd_recv_opts ro = DD_RECV_OPTS_INIT;
	dd_send_opts so = DD_SEND_OPTS_INIT;
	struct mem full = {0}, incr = {0}, rest = {0};
	dd_store *src, *dst, *fixed;
	char p1[96], p2[96], p3[96], tok[128];
	dd_stream_info info;
	dd_reader *r;
	int chunker = -1;

	(void)f;
	snprintf(p1, sizeof(p1), "%s/c1", f->base);
	snprintf(p2, sizeof(p2), "%s/c2", f->base);
	snprintf(p3, sizeof(p3), "%s/c3", f->base);
	co.chunker = DD_CHUNKER_FASTCDC;
	co.block_size = 8 * KiB;
	assert_int_equal(dd_store_create(&src, p1, &co, NULL), 0);
	assert_int_equal(dd_store_create(&dst, p2, &co, NULL), 0);
	assert_int_equal(dd_store_create(&fixed, p3, NULL, NULL), 0);
	assert_int_equal(dd_store_chunker_get(fixed, &chunker), 0);
	assert_int_equal(chunker, DD_CHUNKER_FIXED);
	write_image(src, "one", 11, 3 * MiB + 5);
	write_image(src, "two", 11, 3 * MiB + 105);  /* grown at its end */
	assert_int_equal(dd_send(src, "one", NULL, mem_write, &full), 0);
	so.base = "one";
	assert_int_equal(dd_send(src, "two", &so, mem_write, &incr), 0);
	/* only the blocks at the end changed */
	assert_true(incr.len < 200 * KiB);
	/* into a fixed store: refused, nothing written */
	assert_int_equal(dd_recv(fixed, NULL, mem_read, &full, &info),
			 DD_EBLOCKSIZE);
	assert_non_null(strstr(dd_store_errmsg(fixed), "fastcdc"));
	assert_int_equal(count_snapshots(fixed), 0);
	/* into the fastcdc store, interrupted half-way but resumable */
	full.pos = 0;
	full.code = DD_EIO;
	full.fail_after = full.len / 2;
	ro.resumable = 1;
	assert_int_equal(dd_recv(dst, &ro, mem_read, &full, &info), DD_EIO);
	assert_int_equal(count_snapshots(dst), 0);
	assert_int_equal(dd_recv_resume_token(dst, tok, sizeof(tok)), 0);
	/* the walk gives the same one, with the name it will have */
	{
		struct partial_list pl = {0};

		assert_int_equal(dd_recv_partial_walk(dst, partial_seen, &pl),
				 0);
		assert_int_equal(pl.n, 1);
		assert_string_equal(pl.name, "one");
		assert_string_equal(pl.token, tok);
		pl.stop = 1;
		assert_int_equal(dd_recv_partial_walk(dst, partial_seen, &pl),
				 DD_ECANCELED);
	}
	memset(&so, 0, sizeof(so));
	so.version = DD_SEND_OPTS_VERSION;
	so.resume_token = tok;
	assert_int_equal(dd_send(src, "one", &so, mem_write, &rest), 0);
	assert_true(rest.len < full.len);
	assert_int_equal(dd_recv(dst, &ro, mem_read, &rest, &info), 0);
	assert_true(info.resume_from > 0);
	assert_int_equal(dd_reader_open(&r, dst, "one"), 0);
	check_image(r, 11, 3 * MiB + 5);
	dd_reader_close(r);
	/* and the incremental on top */
	incr.pos = 0;
	assert_int_equal(dd_recv(dst, NULL, mem_read, &incr, &info), 0);
	assert_int_equal(dd_reader_open(&r, dst, "two"), 0);
	check_image(r, 11, 3 * MiB + 105);
	dd_reader_close(r);
	dd_store_close(src);
	dd_store_close(dst);
	dd_store_close(fixed);
	free(full.data);
	free(incr.data);
	free(rest.data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_null_store_functions, setup, teardown),
		cmocka_unit_test_setup_teardown(test_null_writer_reader, setup, teardown),
		cmocka_unit_test_setup_teardown(test_null_streams, setup, teardown),
		cmocka_unit_test_setup_teardown(test_null_scan_cache, setup, teardown),
		cmocka_unit_test_setup_teardown(test_writer_after_commit_abort, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reader_of_deleted_snapshot, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pread_overflow, setup, teardown),
		cmocka_unit_test_setup_teardown(test_failing_callbacks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_options_versions, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cdc_streams, setup, teardown),
		cmocka_unit_test_setup_teardown(test_threads_readers_and_writer, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
