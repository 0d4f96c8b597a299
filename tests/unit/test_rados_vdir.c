/*
 * test_rados_vdir.c -- a store directory as RADOS objects
 * (rados/vdir_rados.c), on the test cluster (ctest fixture `ceph`,
 * CEPH_CONF): the calls of common/vdir.h keep the rules of the local
 * directory they stand in for -- exclusive create, short reads at the
 * end, rename without replacing, a listing of one directory only -- and
 * the read-ahead window never serves bytes written after it was read.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "dedup.h"
#include "common/vdir.h"
#include "rados/rados.h"

static char t_pool[64];
static dd_rados *t_ra;
static dd_rados_pool *t_p;

static dd_vdir *t_dir(const char *name)
{
	dd_err err = {0};
	dd_vdir *d = NULL;

	if (dd_rados_vdir_open(&d, &err, t_p, name))
		fail_msg("vdir %s: %s", name, err.de_msg);
	return d;
}

static dd_vfile *t_file(dd_vdir *d, const char *name, int flags)
{
	dd_err err = {0};
	dd_vfile *f = NULL;

	if (dd_vdir_open_file(d, &err, name, flags, &f))
		fail_msg("open %s: %s", name, err.de_msg);
	return f;
}

static void test_create_read_write(void **state)
{
	dd_vdir *d = t_dir("packs");
	dd_vfile *f = t_file(d, "00000001.pack", DD_VF_CREATE), *g = NULL;
	unsigned char buf[32];
	dd_err err = {0};
	uint64_t size = 1;
	size_t got = 99;

	(void)state;
	assert_false(dd_vdir_is_local(d));
	assert_int_equal(dd_vdir_fd(d), -1);
	/* created empty, exclusively */
	assert_int_equal(dd_vfile_size(f, &err, &size), 0);
	assert_int_equal(size, 0);
	assert_int_equal(dd_vdir_open_file(d, &err, "00000001.pack",
					   DD_VF_CREATE, &g), DD_EEXIST);
	assert_int_equal(dd_vdir_open_file(d, &err, "00000002.pack", 0, &g),
			 DD_ENOENT);
	assert_non_null(strstr(err.de_msg, "packs/00000002.pack"));

	assert_int_equal(dd_vfile_pwrite_full(f, &err, "0123456789", 10, 0),
			 0);
	assert_int_equal(dd_vfile_pwrite_full(f, &err, "ab", 2, 20), 0);
	assert_int_equal(dd_vfile_size(f, &err, &size), 0);
	assert_int_equal(size, 22);
	/* the gap reads as zeros, a read past the end is short */
	assert_int_equal(dd_vfile_pread(f, &err, buf, sizeof(buf), 8, &got), 0);
	assert_int_equal(got, 14);
	assert_memory_equal(buf, "89\0\0\0\0\0\0\0\0\0\0ab", 14);
	assert_int_equal(dd_vfile_pread_full(f, &err, buf, 4, 20),
			 DD_ECORRUPT);
	assert_int_equal(dd_vfile_truncate(f, &err, 5), 0);
	assert_int_equal(dd_vdir_stat(d, &err, "00000001.pack", &size), 0);
	assert_int_equal(size, 5);
	/* what a local file system gives and RADOS does not */
	assert_int_equal(dd_vfile_lock(f, &err), 0);
	assert_int_equal(dd_vfile_punch(f, &err, 0, 4), DD_ENOTSUP);
	assert_int_equal(dd_vfile_sync(f, &err), 0);
	dd_vfile_close(f);
	assert_int_equal(dd_vdir_unlink(d, &err, "00000001.pack"), 0);
	assert_int_equal(dd_vdir_unlink(d, &err, "00000001.pack"), DD_ENOENT);
	dd_vdir_close(d);
}

static void test_rename(void **state)
{
	dd_vdir *d = t_dir("manifests");
	dd_vfile *f = t_file(d, "0000000000000001.tmp", DD_VF_CREATE);
	dd_vfile *g = t_file(d, "0000000000000002.snap", DD_VF_CREATE);
	char buf[16];
	dd_err err = {0};
	uint64_t size;

	(void)state;
	assert_int_equal(dd_vfile_pwrite_full(f, &err, "manifest1", 9, 0), 0);
	dd_vfile_close(f);
	dd_vfile_close(g);
	/* never over an existing name: both stay as they were */
	assert_int_equal(dd_vdir_rename(d, &err, "0000000000000001.tmp",
					"0000000000000002.snap", true),
			 DD_EEXIST);
	assert_int_equal(dd_vdir_stat(d, &err, "0000000000000001.tmp", &size),
			 0);
	assert_int_equal(size, 9);
	assert_int_equal(dd_vdir_stat(d, &err, "0000000000000002.snap",
				      &size), 0);
	assert_int_equal(size, 0);
	/* the publish: whole under the new name, gone under the old */
	assert_int_equal(dd_vdir_rename(d, &err, "0000000000000001.tmp",
					"0000000000000001.snap", true), 0);
	assert_int_equal(dd_vdir_stat(d, &err, "0000000000000001.tmp", NULL),
			 DD_ENOENT);
	f = t_file(d, "0000000000000001.snap", 0);
	assert_int_equal(dd_vfile_pread_full(f, &err, buf, 9, 0), 0);
	assert_memory_equal(buf, "manifest1", 9);
	dd_vfile_close(f);
	assert_int_equal(dd_vdir_rename(d, &err, "0000000000000009.tmp",
					"0000000000000009.snap", true),
			 DD_ENOENT);
	dd_vdir_close(d);
}

static int t_count(void *arg, const char *name)
{
	int *n = arg;

	/* names only, no directory, and only this directory's */
	assert_null(strchr(name, '/'));
	assert_int_equal(strncmp(name, "l", 1), 0);
	(*n)++;
	return 0;
}

static void test_list(void **state)
{
	dd_vdir *d = t_dir("listdir"), *o = t_dir("listdir2");
	char name[32];
	dd_err err = {0};
	int n = 0;

	(void)state;
	for (int i = 0; i < 5; i++) {
		snprintf(name, sizeof(name), "l%d", i);
		dd_vfile_close(t_file(d, name, DD_VF_CREATE));
	}
	dd_vfile_close(t_file(o, "other", DD_VF_CREATE));
	/* an object below the directory is not one of its names */
	assert_int_equal(dd_rados_write_full(t_p, &err, "listdir/x/y", "z", 1),
			 0);
	assert_int_equal(dd_vdir_list(d, &err, t_count, &n), 0);
	assert_int_equal(n, 5);
	dd_vdir_close(d);
	dd_vdir_close(o);
}

/* A read in order fills the window; a write through the directory after
 * it must be seen by the next read, served from the window or not. */
static void test_window_never_stale(void **state)
{
	size_t len = 6u << 20, got;
	unsigned char *big = malloc(len), buf[4096];
	dd_vdir *d = t_dir("packs");
	dd_vfile *w = t_file(d, "0000000a.pack", DD_VF_CREATE), *r;
	dd_err err = {0};

	(void)state;
	assert_non_null(big);
	for (size_t i = 0; i < len; i++)
		big[i] = (unsigned char)(i * 7 + (i >> 12));
	assert_int_equal(dd_vfile_pwrite_full(w, &err, big, len, 0), 0);
	r = t_file(d, "0000000a.pack", 0);
	/* in order, record by record, across the window's end */
	for (size_t off = 0; off < len; off += sizeof(buf)) {
		size_t n = len - off < sizeof(buf) ? len - off : sizeof(buf);

		assert_int_equal(dd_vfile_pread(r, &err, buf, n, off, &got),
				 0);
		assert_int_equal(got, n);
		assert_memory_equal(buf, big + off, n);
	}
	/* back to the start: within no window, read as asked */
	assert_int_equal(dd_vfile_pread(r, &err, buf, 64, 0, &got), 0);
	assert_memory_equal(buf, big, 64);
	/* a tail cut and written again through another handle */
	assert_int_equal(dd_vfile_pread(r, &err, buf, 64, 64, &got), 0);
	assert_int_equal(dd_vfile_truncate(w, &err, 100), 0);
	assert_int_equal(dd_vfile_pwrite_full(w, &err, "NEWBYTES", 8, 128), 0);
	assert_int_equal(dd_vfile_pread(r, &err, buf, 64, 128, &got), 0);
	assert_int_equal(got, 8);
	assert_memory_equal(buf, "NEWBYTES", 8);
	dd_vfile_close(r);
	dd_vfile_close(w);
	dd_vdir_close(d);
	free(big);
}

static int t_group_setup(void **state)
{
	dd_err err = {0};

	(void)state;
	snprintf(t_pool, sizeof(t_pool), "ddvdir-%ld", (long)getpid());
	if (dd_rados_connect(&t_ra, &err, &(dd_rados_conf){10, 10, 20}) ||
	    dd_rados_pool_create(t_ra, &err, t_pool) ||
	    dd_rados_pool_open(&t_p, &err, t_ra, t_pool, "s")) {
		fprintf(stderr, "test_rados_vdir: no test cluster (CEPH_CONF="
			"%s): %s\n", getenv("CEPH_CONF") ? getenv("CEPH_CONF")
			: "unset", err.de_msg);
		return -1;
	}
	return 0;
}

static int t_group_teardown(void **state)
{
	dd_err err = {0};
	int rc = 0;

	(void)state;
	dd_rados_pool_close(t_p);
	if (t_ra && dd_rados_pool_delete(t_ra, &err, t_pool)) {
		fprintf(stderr, "test_rados_vdir: %s\n", err.de_msg);
		rc = -1;
	}
	dd_rados_disconnect(t_ra);
	return rc;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_read_write),
		cmocka_unit_test(test_rename),
		cmocka_unit_test(test_list),
		cmocka_unit_test(test_window_never_stale),
	};

	return cmocka_run_group_tests(tests, t_group_setup, t_group_teardown);
}
