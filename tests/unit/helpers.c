/*
 * helpers.c -- what several unit-test programs share (helpers.h).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "common/err.h"
#include "common/faults.h"
#include "store/store_internal.h"

/* ---- deterministic bytes ---------------------------------------------------*/

uint64_t th_rng_state;

int th_mem_write(void *ctx, const void *buf, size_t len)
{
	th_mem *m = ctx;

	if (m->len + len > m->cap) {
		m->cap = (m->len + len) * 2 + 4096;
		m->p = realloc(m->p, m->cap);
		assert_non_null(m->p);
	}
	memcpy(m->p + m->len, buf, len);
	m->len += len;
	return 0;
}

int th_mem_read(void *ctx, void *buf, size_t len, size_t *got)
{
	th_mem *m = ctx;
	size_t n = m->len - m->pos;

	if (n > len)
		n = len;
	if (m->max_read && n > m->max_read)
		n = m->max_read;
	memcpy(buf, m->p + m->pos, n);
	m->pos += n;
	*got = n;
	return 0;
}

uint64_t th_rng(void)
{
	th_rng_state ^= th_rng_state << 13;
	th_rng_state ^= th_rng_state >> 7;
	th_rng_state ^= th_rng_state << 17;
	return th_rng_state;
}

/* ---- temporary stores ------------------------------------------------------*/

char *th_tmp_store(void)
{
	char base[64], *path;

	strcpy(base, "/tmp/dd-test-store-XXXXXX");
	assert_non_null(mkdtemp(base));
	path = malloc(strlen(base) + 8);
	assert_non_null(path);
	sprintf(path, "%s/s", base);
	return path;
}

void th_rm_rf(const char *path)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
	assert_int_equal(system(cmd), 0);
}

void th_rm_store(char *path)
{
	char *slash = strrchr(path, '/');

	*slash = 0; /* the mkdtemp base */
	th_rm_rf(path);
	free(path);
}

void th_copy_tree(const char *from, const char *to)
{
	char cmd[1024];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s' && cp -a '%s' '%s'", to, from,
		 to);
	assert_int_equal(system(cmd), 0);
}

void th_flip_byte(const char *file, uint64_t off)
{
	uint8_t x;
	int fd = open(file, O_RDWR);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &x, 1, (off_t)off), 1);
	x ^= 0x40;
	assert_int_equal(pwrite(fd, &x, 1, (off_t)off), 1);
	close(fd);
}

/* ---- images ------------------------------------------------------------------*/

dd_store *th_create(const char *path, uint32_t bs, int verify, int compress,
		    int hash_kind)
{
	dd_create_opts o = DD_CREATE_OPTS_INIT;
	dd_store *s = NULL;

	o.block_size = bs;
	o.verify = verify;
	o.compress = compress;
	assert_int_equal(dd_store_create_kind(&s, path, &o, NULL, hash_kind),
			 0);
	return s;
}

int th_put(dd_store *s, const char *name, const uint8_t *data, size_t n,
	   size_t chunk)
{
	dd_writer *w;
	int rc = dd_writer_begin(&w, s, name);

	if (rc)
		return rc;
	for (size_t off = 0; off < n && !rc; off += chunk)
		rc = dd_writer_write(w, data + off,
				     n - off < chunk ? n - off : chunk);
	if (!rc)
		rc = dd_writer_commit(w);
	dd_writer_free(w);
	return rc;
}

void th_check_image(dd_store *s, const char *name, const uint8_t *data,
		    size_t n)
{
	dd_reader *r;
	uint8_t *buf = malloc(n + 1);
	size_t got;

	assert_non_null(buf);
	assert_int_equal(dd_reader_open(&r, s, name), 0);
	assert_int_equal(dd_reader_size(r), n);
	assert_int_equal(dd_reader_pread(r, buf, n + 1, 0, &got), 0);
	assert_int_equal(got, n);
	assert_memory_equal(buf, data, n);
	dd_reader_close(r);
	free(buf);
}

void th_check_store(const char *path, const th_image *imgs, size_t nimgs)
{
	dd_store *s;
	int rc = dd_store_open(&s, path, NULL);

	if (rc)
		fail_msg("store %s does not open: %s", path, dd_last_errmsg());
	rc = dd_store_scrub(s, NULL, NULL, NULL);
	if (rc)
		fail_msg("scrub of %s: %s", path, dd_store_errmsg(s));
	for (size_t i = 0; i < nimgs; i++)
		th_check_image(s, imgs[i].name, imgs[i].data, imgs[i].size);
	dd_store_close(s);
}

static void th_tmpl_open(th_tmpl *t)
{
	dd_open_opts o = DD_OPEN_OPTS_INIT;

	o.threads = 1;
	if (dd_store_open(&t->s, t->work, &o) != 0)
		fail_msg("%s does not open: %s", t->work, dd_last_errmsg());
}

void th_tmpl_init(th_tmpl *t, char *tmpl)
{
	t->tmpl = tmpl;
	t->work = malloc(strlen(tmpl) + 8);
	assert_non_null(t->work);
	sprintf(t->work, "%s.work", tmpl);
	t->s = NULL;
	th_tmpl_reset(t);
}

void th_tmpl_reset(th_tmpl *t)
{
	dd_store_close(t->s);
	th_copy_tree(t->tmpl, t->work);
	th_tmpl_open(t);
}

void th_tmpl_walk_reset(void *ctx)
{
	th_tmpl_reset(ctx);
}

void th_tmpl_check(th_tmpl *t, const th_image *imgs, size_t nimgs)
{
	dd_store_close(t->s);
	t->s = NULL;
	th_check_store(t->work, imgs, nimgs);
	th_tmpl_open(t);
}

void th_tmpl_fini(th_tmpl *t)
{
	dd_store_close(t->s);
	free(t->work);
	th_rm_store(t->tmpl);   /* the work copy is inside the same dir */
}

/* ---- fault walks ---------------------------------------------------------------*/

static const char *const th_class_names[DD_FAULT_NCLASSES] = {
	[DD_FAULT_ALLOC] = "alloc", [DD_FAULT_READ] = "read",
	[DD_FAULT_WRITE] = "write", [DD_FAULT_SYNC] = "sync",
	[DD_FAULT_RENAME] = "rename", [DD_FAULT_OPEN] = "open",
};

bool th_fault_code(int rc)
{
	return rc == DD_ENOMEM || rc == DD_EIO || rc == DD_ENOSPC;
}

void th_check_errmsg(const char *msg, int rc)
{
	const char *sym = dd_err_symbol(rc);
	size_t n = strlen(sym);

	assert_non_null(msg);
	if (strncmp(msg, sym, n) != 0 || msg[n] != ':' || strchr(msg, '\n'))
		fail_msg("message \"%s\" is not one line naming %s", msg, sym);
}

/* Descriptors open in this process. */
static int th_open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d)) != NULL)
		n += de->d_name[0] != '.';
	closedir(d);
	return n - 1;   /* the one opendir holds */
}

static double th_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

uint64_t th_fault_walk(const th_walk *w)
{
	uint64_t total = 0;
	double t0 = th_now();
	/* DD_TEST_FAULT_STICKY=1: every call after the kth fails too, as on
	 * a disk that stays full (recovery and cleanup then fail as well) */
	int sticky = getenv("DD_TEST_FAULT_STICKY") != NULL;

	for (size_t ci = 0; ci < w->nclasses; ci++) {
		int c = w->classes[ci];
		uint64_t k, failures = 0, tolerated = 0;
		int fds0 = -1;

		if (w->reset)
			w->reset(w->ctx);
		for (k = 1;; k++) {
			int rc, errnum = c == DD_FAULT_ALLOC ? ENOMEM
					 : k % 2 ? ENOSPC : EIO;
			bool hit;

			/* every step starts with the same handles open: a
			 * failure path that leaks a descriptor, or closes one
			 * it never opened (fd 0 of a zeroed struct), shows */
			int fds = th_open_fds();

			if (fds0 < 0)
				fds0 = fds;
			if (fds != fds0 || fcntl(0, F_GETFD) < 0)
				fail_msg("%s: %s step %llu starts with %d open "
					 "descriptors, the first with %d%s",
					 w->what, th_class_names[c],
					 (unsigned long long)k, fds, fds0,
					 fcntl(0, F_GETFD) < 0 ? "; fd 0 closed"
							       : "");
			if (k > w->max_steps)
				fail_msg("%s: %s faults: still failing after "
					 "%llu steps", w->what, th_class_names[c],
					 (unsigned long long)w->max_steps);
			dd_fault_arm((enum dd_fault_class)c, k, errnum, sticky);
			rc = w->op(w->ctx);
			hit = dd_fault_hits((enum dd_fault_class)c) > 0;
			dd_fault_disarm_all();
			if (rc && !hit)
				fail_msg("%s: failed with %s although the %s "
					 "fault at step %llu never fired",
					 w->what, dd_strerror(rc),
					 th_class_names[c],
					 (unsigned long long)k);
			if (rc && !th_fault_code(rc))
				fail_msg("%s: %s fault %llu (%s) gave %s",
					 w->what, th_class_names[c],
					 (unsigned long long)k, strerror(errnum),
					 dd_strerror(rc));
			failures += rc != 0;
			w->after(w->ctx, rc);
			if (!hit)
				break;
			tolerated += rc == 0;
			if (w->reset && (rc == 0 || w->reset_every_step))
				w->reset(w->ctx);
		}
		print_message("%s: %s: %llu steps, %llu failed cleanly, %llu "
			      "tolerated\n", w->what, th_class_names[c],
			      (unsigned long long)k,
			      (unsigned long long)failures,
			      (unsigned long long)tolerated);
		total += failures;
	}
	print_message("%s: walked in %.2f s\n", w->what, th_now() - t0);
	return total;
}
