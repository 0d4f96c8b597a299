/*
 * test_common.c -- common/: error messages, errno mapping, CRC-32C, fault
 * injection through the allocation and I/O wrappers, the I/O wrappers on a
 * real file, and the worker pool.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dedup.h"
#include "common/alloc.h"
#include "common/crc32c.h"
#include "common/err.h"
#include "common/faults.h"
#include "common/hmap.h"
#include "common/io.h"
#include "common/pool.h"

/* ---- errors --------------------------------------------------------------*/

static void test_err_format(void **state)
{
	dd_err err;

	(void)state;
	dd_err_clear(&err);
	assert_int_equal(err.de_code, DD_OK);
	assert_string_equal(err.de_msg, "");

	assert_int_equal(dd_err_set(&err, DD_ECHECKSUM,
				    "block sha256 mismatch (pack %d, off %d)",
				    3, 40960),
			 DD_ECHECKSUM);
	assert_int_equal(err.de_code, DD_ECHECKSUM);
	assert_string_equal(err.de_msg,
			    "DD_ECHECKSUM: block sha256 mismatch (pack 3, off 40960)");

	/* A NULL handle is allowed and the code still comes back. */
	assert_int_equal(dd_err_set(NULL, DD_EIO, "x"), DD_EIO);

	/* Adding context to the handle's own message is safe. */
	dd_err_set(&err, err.de_code, "reading snapshot a: %s", err.de_msg);
	assert_string_equal(err.de_msg,
			    "DD_ECHECKSUM: reading snapshot a: DD_ECHECKSUM: "
			    "block sha256 mismatch (pack 3, off 40960)");

	/* errno survives recording an error. */
	errno = ENOSPC;
	dd_err_set(&err, DD_EIO, "x");
	assert_int_equal(errno, ENOSPC);

	dd_err_set_errno(&err, ENOSPC, "write %s at offset %d", "p.pack", 8);
	assert_int_equal(err.de_code, DD_ENOSPC);
	assert_string_equal(err.de_msg, "DD_ENOSPC: write p.pack at offset 8: "
			    "No space left on device");
}

static void test_err_truncate(void **state)
{
	char big[3 * DD_ERRMSG_MAX];
	dd_err err;

	(void)state;
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	memset(&err, 0x55, sizeof(err));
	dd_err_set(&err, DD_ECORRUPT, "%s", big);
	assert_int_equal(strlen(err.de_msg), DD_ERRMSG_MAX - 1);
	assert_memory_equal(err.de_msg, "DD_ECORRUPT: xxx", 16);
	assert_int_equal(err.de_msg[DD_ERRMSG_MAX - 2], 'x');

	dd_err_set_errno(&err, EIO, "%s", big);
	assert_int_equal(strlen(err.de_msg), DD_ERRMSG_MAX - 1);
	assert_int_equal(err.de_code, DD_EIO);
}

static void test_err_copy(void **state)
{
	dd_err a, b;

	(void)state;
	dd_err_set(&a, DD_EBUSY, "store locked by pid %d", 42);
	memset(&b, 0, sizeof(b));
	assert_int_equal(dd_err_copy(&b, &a), DD_EBUSY);
	assert_int_equal(b.de_code, DD_EBUSY);
	assert_string_equal(b.de_msg, "DD_EBUSY: store locked by pid 42");
	assert_int_equal(dd_err_copy(NULL, &a), DD_EBUSY);
	assert_int_equal(dd_err_copy(&b, NULL), DD_OK);
	assert_int_equal(b.de_code, DD_OK);
	assert_string_equal(b.de_msg, "");
	assert_int_equal(dd_err_copy(&a, &a), DD_EBUSY);
	assert_string_equal(a.de_msg, "DD_EBUSY: store locked by pid 42");
	dd_err_clear(NULL);
}

static void test_err_names(void **state)
{
	(void)state;
	assert_string_equal(dd_strerror(DD_ECHECKSUM),
			    "DD_ECHECKSUM: checksum mismatch");
	assert_string_equal(dd_strerror(1), "DD_E?: unknown error");
	assert_string_equal(dd_strerror(-18), "DD_E?: unknown error");
	assert_string_equal(dd_strerror(DD_EBLOCKSIZE),
			    "DD_EBLOCKSIZE: block size differs from the store's");
	assert_string_equal(dd_strerror(-2147483647 - 1), "DD_E?: unknown error");
	assert_string_equal(dd_err_symbol(DD_ECHECKSUM), "DD_ECHECKSUM");
	assert_string_equal(dd_err_symbol(DD_EFORMAT), "DD_EFORMAT");
	assert_string_equal(dd_err_symbol(99), "DD_E?");
	/* Every code has a name, and dd_strerror starts with the symbol. */
	for (int c = DD_OK; c >= DD_EBLOCKSIZE; c--) {
		const char *sym = dd_err_symbol(c);
		const char *text = dd_strerror(c);

		assert_string_not_equal(sym, "DD_E?");
		assert_int_equal(strncmp(text, sym, strlen(sym)), 0);
		assert_int_equal(text[strlen(sym)], ':');
	}

	assert_int_equal(dd_version_number(), DD_VERSION_NUMBER);
	assert_string_equal(dd_version_string(), "0.1.0");
}

static void test_errno_map(void **state)
{
	(void)state;
	assert_int_equal(dd_errno_code(ENOSPC), DD_ENOSPC);
	assert_int_equal(dd_errno_code(EDQUOT), DD_ENOSPC);
	assert_int_equal(dd_errno_code(EACCES), DD_EPERM);
	assert_int_equal(dd_errno_code(EPERM), DD_EPERM);
	assert_int_equal(dd_errno_code(EROFS), DD_EPERM);
	assert_int_equal(dd_errno_code(ENOENT), DD_ENOENT);
	assert_int_equal(dd_errno_code(ENOMEM), DD_ENOMEM);
	assert_int_equal(dd_errno_code(EIO), DD_EIO);
	assert_int_equal(dd_errno_code(EBADF), DD_EIO);
	assert_int_equal(dd_errno_code(0), DD_EIO);
}

/* ---- crc32c --------------------------------------------------------------*/

static void test_crc32c_vectors(void **state)
{
	static const uint8_t zeros[32], ones[32] = {
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	uint8_t inc[32];

	(void)state;
	assert_int_equal(dd_crc32c(0, "123456789", 9), 0xE3069283u);
	assert_int_equal(dd_crc32c_sw(0, "123456789", 9), 0xE3069283u);
	assert_int_equal(dd_crc32c(0, "", 0), 0);
	assert_int_equal(dd_crc32c(0, NULL, 0), 0);
	/* RFC 3720 (iSCSI) appendix B.4 test patterns. */
	for (int i = 0; i < 32; i++)
		inc[i] = (uint8_t)i;
	assert_int_equal(dd_crc32c(0, zeros, 32), 0x8A9136AAu);
	assert_int_equal(dd_crc32c(0, ones, 32), 0x62A8AB43u);
	assert_int_equal(dd_crc32c(0, inc, 32), 0x46DD794Eu);
	assert_int_equal(dd_crc32c_sw(0, zeros, 32), 0x8A9136AAu);
	assert_int_equal(dd_crc32c_sw(0, ones, 32), 0x62A8AB43u);
	assert_int_equal(dd_crc32c_sw(0, inc, 32), 0x46DD794Eu);
}

static void test_crc32c_chain_unaligned(void **state)
{
	enum { N = 1024 };
	uint8_t *buf = malloc(N + 16);
	uint32_t seed = 12345;

	(void)state;
	assert_non_null(buf);
	for (int i = 0; i < N + 16; i++) {
		seed = seed * 1103515245u + 12345u;
		buf[i] = (uint8_t)(seed >> 16);
	}
	for (size_t off = 0; off < 16; off++) {
		for (size_t len = 0; len <= 300; len++) {
			uint32_t hw = dd_crc32c(0, buf + off, len);

			assert_int_equal(hw, dd_crc32c_sw(0, buf + off, len));
		}
		assert_int_equal(dd_crc32c(0, buf + off, N),
				 dd_crc32c_sw(0, buf + off, N));
	}
	/* Chaining over every split equals the checksum of the whole. */
	uint32_t whole = dd_crc32c(0, buf + 3, 257);

	for (size_t cut = 0; cut <= 257; cut++) {
		uint32_t a = dd_crc32c(0, buf + 3, cut);

		assert_int_equal(dd_crc32c(a, buf + 3 + cut, 257 - cut), whole);
		a = dd_crc32c_sw(0, buf + 3, cut);
		assert_int_equal(dd_crc32c_sw(a, buf + 3 + cut, 257 - cut),
				 whole);
	}
	assert_int_equal(dd_crc32c(dd_crc32c(0, "1234", 4), "56789", 5),
			 0xE3069283u);
	free(buf);
}

/* ---- fault injection ------------------------------------------------------*/

static int teardown_faults(void **state)
{
	(void)state;
	dd_fault_disarm_all();
	return 0;
}

static void test_fault_alloc(void **state)
{
	void *p[4];

	(void)state;
	dd_fault_disarm_all();
	dd_fault_arm(DD_FAULT_ALLOC, 3, ENOMEM, 0);
	p[0] = dd_malloc(10);
	p[1] = dd_calloc(2, 8);
	errno = 0;
	p[2] = dd_strdup("abc");
	assert_null(p[2]);
	assert_int_equal(errno, ENOMEM);
	assert_int_equal(dd_fault_hits(DD_FAULT_ALLOC), 1);
	/* Not sticky: the next one succeeds. */
	p[3] = dd_realloc(p[0], 100);
	assert_non_null(p[1]);
	assert_non_null(p[3]);
	assert_int_equal(dd_fault_hits(DD_FAULT_ALLOC), 1);

	/* Sticky: the first call and all later ones fail; realloc leaves
	 * the old block alone.  The errno is ENOMEM whatever was armed. */
	dd_fault_arm(DD_FAULT_ALLOC, 1, EIO, 1);
	errno = 0;
	assert_null(dd_realloc(p[3], 1000));
	assert_int_equal(errno, ENOMEM);
	assert_null(dd_malloc(1));
	assert_null(dd_calloc(1, 1));
	assert_int_equal(dd_fault_hits(DD_FAULT_ALLOC), 4);
	/* Other classes are unaffected. */
	assert_int_equal(dd_fault_check(DD_FAULT_WRITE), 0);
	assert_int_equal(dd_fault_hits(DD_FAULT_WRITE), 0);

	dd_fault_arm(DD_FAULT_ALLOC, 0, 0, 0);
	p[0] = dd_malloc(0);
	assert_non_null(p[0]);
	dd_free(p[0]);
	dd_free(p[1]);
	dd_free(p[3]);
	dd_free(NULL);

	dd_fault_disarm_all();
	assert_int_equal(dd_fault_hits(DD_FAULT_ALLOC), 0);
	assert_null(dd_strdup(NULL));
}

/* Fault counting on many threads: exactly one call fails; armed sticky,
 * that call and every one after it (none racing it slips through). */
static atomic_int dd_test_fault_failures;

static void fault_job(void *ctx, size_t item, unsigned worker)
{
	(void)ctx;
	(void)item;
	(void)worker;
	if (dd_fault_check(DD_FAULT_SYNC))
		atomic_fetch_add(&dd_test_fault_failures, 1);
}

static void test_fault_threads(void **state)
{
	dd_pool *pool;

	(void)state;
	dd_fault_disarm_all();
	assert_int_equal(dd_pool_new(&pool, 3), DD_OK);
	atomic_store(&dd_test_fault_failures, 0);
	dd_fault_arm(DD_FAULT_SYNC, 5000, EIO, 0);
	dd_pool_run(pool, fault_job, NULL, 20000);
	assert_int_equal(atomic_load(&dd_test_fault_failures), 1);
	assert_int_equal(dd_fault_hits(DD_FAULT_SYNC), 1);

	dd_fault_disarm_all();
	atomic_store(&dd_test_fault_failures, 0);
	dd_fault_arm(DD_FAULT_SYNC, 5000, EIO, 1);
	dd_pool_run(pool, fault_job, NULL, 20000);
	assert_int_equal(atomic_load(&dd_test_fault_failures), 20000 - 4999);
	assert_int_equal(dd_fault_hits(DD_FAULT_SYNC), 20000 - 4999);
	dd_fault_disarm_all();
	dd_pool_free(pool);
}

/* ---- I/O wrappers ---------------------------------------------------------*/

struct tmpdir {
	char path[64];
	char file[96];
};

static void tmpdir_make(struct tmpdir *t)
{
	strcpy(t->path, "/tmp/dd_test_common.XXXXXX");
	assert_non_null(mkdtemp(t->path));
	snprintf(t->file, sizeof(t->file), "%s/f", t->path);
}

static void tmpdir_remove(struct tmpdir *t)
{
	char p[128];

	unlink(t->file);
	snprintf(p, sizeof(p), "%s/g", t->path);
	unlink(p);
	assert_int_equal(rmdir(t->path), 0);
}

static void test_io_file(void **state)
{
	struct tmpdir t;
	uint8_t wbuf[10000], rbuf[10000];
	char g[128];
	uint64_t size;
	size_t got;
	dd_err err;
	int fd, dfd, flags;

	(void)state;
	dd_fault_disarm_all();
	tmpdir_make(&t);
	for (size_t i = 0; i < sizeof(wbuf); i++)
		wbuf[i] = (uint8_t)(i * 7 + 1);

	fd = dd_io_open(&err, t.file, O_RDWR | O_CREAT | O_EXCL, 0644);
	assert_true(fd >= 0);
	flags = fcntl(fd, F_GETFD);
	assert_true(flags & FD_CLOEXEC);

	assert_int_equal(dd_io_pwrite_full(&err, fd, wbuf, 4096, 0, "f"), 0);
	assert_int_equal(dd_io_pwrite_full(&err, fd, wbuf + 4096, 5904, 4096,
					   "f"), 0);
	assert_int_equal(dd_io_fdatasync(&err, fd, "f"), 0);
	assert_int_equal(dd_io_fsize(&err, fd, &size, "f"), 0);
	assert_int_equal(size, 10000);

	memset(rbuf, 0, sizeof(rbuf));
	assert_int_equal(dd_io_pread_full(&err, fd, rbuf, 10000, 0, "f"), 0);
	assert_memory_equal(rbuf, wbuf, 10000);
	assert_int_equal(dd_io_pread_full(&err, fd, rbuf, 100, 9900, "f"), 0);
	assert_memory_equal(rbuf, wbuf + 9900, 100);

	/* Past the end: pread_full is corruption, pread a short count. */
	dd_err_clear(&err);
	assert_int_equal(dd_io_pread_full(&err, fd, rbuf, 200, 9900,
					  "pack 0000002a.pack"), DD_ECORRUPT);
	assert_int_equal(err.de_code, DD_ECORRUPT);
	assert_string_equal(err.de_msg, "DD_ECORRUPT: short read pack "
			    "0000002a.pack at offset 9900: 100 of 200 bytes");
	assert_int_equal(dd_io_pread(&err, fd, rbuf, 200, 9900, &got, "f"), 0);
	assert_int_equal(got, 100);
	assert_memory_equal(rbuf, wbuf + 9900, 100);
	assert_int_equal(dd_io_pread(&err, fd, rbuf, 200, 20000, &got, "f"), 0);
	assert_int_equal(got, 0);

	/* Sequential read and write. */
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	assert_int_equal(dd_io_read(&err, fd, rbuf, 6000, &got, "f"), 0);
	assert_int_equal(got, 6000);
	assert_memory_equal(rbuf, wbuf, 6000);
	assert_int_equal(dd_io_read(&err, fd, rbuf, 6000, &got, "f"), 0);
	assert_int_equal(got, 4000);
	assert_memory_equal(rbuf, wbuf + 6000, 4000);
	assert_int_equal(dd_io_write_full(&err, fd, "tail", 4, "f"), 0);
	assert_int_equal(dd_io_fsize(&err, fd, &size, "f"), 0);
	assert_int_equal(size, 10004);

	assert_int_equal(dd_io_ftruncate(&err, fd, 5000, "f"), 0);
	assert_int_equal(dd_io_fsize(&err, fd, &size, "f"), 0);
	assert_int_equal(size, 5000);
	dd_io_close(fd);
	dd_io_close(-1);

	/* Open by directory fd, rename, directory sync. */
	dfd = dd_io_open(&err, t.path, O_RDONLY | O_DIRECTORY, 0);
	assert_true(dfd >= 0);
	fd = dd_io_openat(&err, dfd, "f", O_RDONLY, 0);
	assert_true(fd >= 0);
	assert_int_equal(dd_io_pread_full(&err, fd, rbuf, 5000, 0, "f"), 0);
	assert_memory_equal(rbuf, wbuf, 5000);
	dd_io_close(fd);
	snprintf(g, sizeof(g), "%s/g", t.path);
	assert_int_equal(dd_io_rename(&err, t.file, g), 0);
	assert_int_equal(dd_io_fsync_dir(&err, t.path), 0);
	fd = dd_io_openat(&err, dfd, "f", O_RDONLY, 0);
	assert_int_equal(fd, DD_ENOENT);
	assert_int_equal(err.de_code, DD_ENOENT);
	assert_string_equal(err.de_msg,
			    "DD_ENOENT: open f: No such file or directory");
	assert_int_equal(dd_io_rename(&err, t.file, g), DD_ENOENT);
	assert_int_equal(dd_io_rename(&err, g, t.file), 0);
	dd_io_close(dfd);

	/* Errors from the system carry the path. */
	fd = dd_io_open(&err, "/nonexistent/dir/x", O_RDONLY, 0);
	assert_int_equal(fd, DD_ENOENT);
	assert_string_equal(err.de_msg, "DD_ENOENT: open /nonexistent/dir/x: "
			    "No such file or directory");
	assert_int_equal(dd_io_pread_full(&err, -1, rbuf, 1, 0, "x"), DD_EIO);
	assert_string_equal(err.de_msg, "DD_EIO: read x at offset 0: "
			    "Bad file descriptor");
	assert_int_equal(dd_io_pread_full(&err, 0, rbuf, 1, UINT64_MAX, "x"),
			 DD_EINVAL);
	tmpdir_remove(&t);
}

static void test_io_faults(void **state)
{
	struct tmpdir t;
	uint8_t buf[4096];
	dd_err err;
	int fd;

	(void)state;
	dd_fault_disarm_all();
	tmpdir_make(&t);
	memset(buf, 0xab, sizeof(buf));

	fd = dd_io_open(&err, t.file, O_RDWR | O_CREAT, 0644);
	assert_true(fd >= 0);

	/* The second write fails with ENOSPC, once. */
	dd_fault_arm(DD_FAULT_WRITE, 2, ENOSPC, 0);
	assert_int_equal(dd_io_pwrite_full(&err, fd, buf, 4096, 0, "f"), 0);
	assert_int_equal(dd_io_pwrite_full(&err, fd, buf, 4096, 4096,
					   "pack 0000002a.pack"), DD_ENOSPC);
	assert_int_equal(err.de_code, DD_ENOSPC);
	assert_string_equal(err.de_msg, "DD_ENOSPC: write pack 0000002a.pack "
			    "at offset 4096: No space left on device");
	assert_int_equal(dd_fault_hits(DD_FAULT_WRITE), 1);
	assert_int_equal(dd_io_pwrite_full(&err, fd, buf, 4096, 4096, "f"), 0);
	assert_int_equal(dd_fault_hits(DD_FAULT_WRITE), 1);

	/* ftruncate and write(2) count as writes. */
	dd_fault_arm(DD_FAULT_WRITE, 1, EIO, 0);
	assert_int_equal(dd_io_ftruncate(&err, fd, 0, "f"), DD_EIO);
	dd_fault_arm(DD_FAULT_WRITE, 1, EDQUOT, 0);
	assert_int_equal(dd_io_write_full(&err, fd, buf, 1, "f"), DD_ENOSPC);
	assert_int_equal(dd_fault_hits(DD_FAULT_WRITE), 3);

	/* Reads: the message has the offset; sticky keeps failing. */
	dd_fault_arm(DD_FAULT_READ, 1, EIO, 1);
	assert_int_equal(dd_io_pread_full(&err, fd, buf, 100, 4096,
					  "pack 0000002a.pack"), DD_EIO);
	assert_string_equal(err.de_msg, "DD_EIO: read pack 0000002a.pack at "
			    "offset 4096: Input/output error");
	assert_int_equal(dd_io_read(&err, fd, buf, 1, NULL, "f"), DD_EIO);
	assert_int_equal(dd_fault_hits(DD_FAULT_READ), 2);
	dd_fault_arm(DD_FAULT_READ, 0, 0, 0);
	assert_int_equal(dd_io_pread_full(&err, fd, buf, 100, 4096, "f"), 0);

	dd_fault_arm(DD_FAULT_SYNC, 1, EIO, 0);
	assert_int_equal(dd_io_fdatasync(&err, fd, "f"), DD_EIO);
	dd_fault_arm(DD_FAULT_SYNC, 1, EIO, 0);
	assert_int_equal(dd_io_fsync_dir(&err, t.path), DD_EIO);
	assert_int_equal(dd_fault_hits(DD_FAULT_SYNC), 2);
	dd_io_close(fd);

	dd_fault_arm(DD_FAULT_OPEN, 1, EACCES, 0);
	fd = dd_io_open(&err, t.file, O_RDONLY, 0);
	assert_int_equal(fd, DD_EPERM);
	{
		char want[160];

		snprintf(want, sizeof(want),
			 "DD_EPERM: open %s: Permission denied", t.file);
		assert_string_equal(err.de_msg, want);
	}
	dd_fault_disarm_all();
	assert_int_equal(dd_fault_hits(DD_FAULT_OPEN), 0);
	tmpdir_remove(&t);
}

static void test_io_rename_delay(void **state)
{
	struct tmpdir t;
	char g[128], buf[4];
	dd_err err;
	int fd;

	(void)state;
	dd_fault_disarm_all();
	tmpdir_make(&t);
	snprintf(g, sizeof(g), "%s/g", t.path);
	fd = dd_io_open(&err, t.file, O_RDWR | O_CREAT, 0644);
	assert_true(fd >= 0);
	assert_int_equal(dd_io_pwrite_full(&err, fd, "abcd", 4, 0, "f"), 0);

	dd_fault_arm(DD_FAULT_RENAME, 1, EIO, 0);
	assert_int_equal(dd_io_rename(&err, t.file, g), DD_EIO);
	assert_int_equal(access(t.file, F_OK), 0);
	assert_int_equal(dd_io_rename(&err, t.file, g), 0);
	assert_int_equal(dd_io_rename(&err, g, t.file), 0);

	/* The read delay slows pread down and nothing else. */
	struct timespec a, b;

	dd_fault_set_read_delay_us(20000);
	assert_int_equal(dd_fault_read_delay_us(), 20000);
	clock_gettime(CLOCK_MONOTONIC, &a);
	assert_int_equal(dd_io_pread_full(&err, fd, buf, 4, 0, "f"), 0);
	clock_gettime(CLOCK_MONOTONIC, &b);
	assert_memory_equal(buf, "abcd", 4);
	assert_true((b.tv_sec - a.tv_sec) * 1000000000L +
		    (b.tv_nsec - a.tv_nsec) >= 20000000L);
	dd_fault_disarm_all();
	assert_int_equal(dd_fault_read_delay_us(), 0);

	/* Not the cache tier's reads (dd_io_pread_full_nodelay), which see
	 * injected faults and short reads as every read does. */
	dd_fault_set_read_delay_us(2000000);
	clock_gettime(CLOCK_MONOTONIC, &a);
	memset(buf, 0, sizeof(buf));
	assert_int_equal(dd_io_pread_full_nodelay(&err, fd, buf, 4, 0, "f"), 0);
	clock_gettime(CLOCK_MONOTONIC, &b);
	assert_memory_equal(buf, "abcd", 4);
	assert_true((b.tv_sec - a.tv_sec) * 1000000000L +
		    (b.tv_nsec - a.tv_nsec) < 1000000000L);
	dd_fault_disarm_all();
	dd_fault_arm(DD_FAULT_READ, 1, EIO, 0);
	assert_int_equal(dd_io_pread_full_nodelay(&err, fd, buf, 4, 0, "f"),
			 DD_EIO);
	assert_int_equal(dd_fault_hits(DD_FAULT_READ), 1);
	dd_fault_disarm_all();
	assert_int_equal(dd_io_pread_full_nodelay(&err, fd, buf, 4, 2, "f"),
			 DD_ECORRUPT);
	assert_string_equal(err.de_msg, "DD_ECORRUPT: short read f at offset "
			    "2: 2 of 4 bytes");
	dd_io_close(fd);
	tmpdir_remove(&t);
}

/* ---- pool ------------------------------------------------------------------*/

#define POOL_ITEMS 1000000

struct pool_test {
	unsigned width;
	uint64_t *sums;             /* per worker: plain, never shared */
	atomic_int *inside;         /* per worker: calls in progress */
	atomic_uint_least64_t bad;  /* index out of range or slot shared */
	uint8_t *seen;              /* per item: how many times it ran */
};

static void pool_job(void *ctx, size_t item, unsigned worker)
{
	struct pool_test *pt = ctx;

	if (worker >= pt->width) {
		atomic_fetch_add(&pt->bad, 1);
		return;
	}
	if (atomic_fetch_add(&pt->inside[worker], 1) != 0)
		atomic_fetch_add(&pt->bad, 1);
	/* A data race here would be caught by ThreadSanitizer. */
	pt->sums[worker] += item;
	pt->seen[item]++;
	atomic_fetch_sub(&pt->inside[worker], 1);
}

static void pool_check(struct pool_test *pt, size_t n, int caller_works)
{
	uint64_t total = 0;

	assert_int_equal(atomic_load(&pt->bad), 0);
	for (unsigned w = 0; w < pt->width; w++)
		total += pt->sums[w];
	assert_int_equal(total, (uint64_t)n * (n - 1) / 2);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(pt->seen[i], 1);
	if (!caller_works)
		assert_int_equal(pt->sums[0], 0);
}

static void pool_reset(struct pool_test *pt)
{
	memset(pt->sums, 0, pt->width * sizeof(*pt->sums));
	memset(pt->seen, 0, POOL_ITEMS);
	atomic_store(&pt->bad, 0);
}

static void pool_case(unsigned threads)
{
	struct pool_test pt;
	dd_pool *pool;

	assert_int_equal(dd_pool_new(&pool, threads), DD_OK);
	pt.width = dd_pool_width(pool);
	if (threads)
		assert_int_equal(pt.width, threads + 1);
	else
		assert_true(pt.width >= 2);
	pt.sums = calloc(pt.width, sizeof(*pt.sums));
	pt.inside = calloc(pt.width, sizeof(*pt.inside));
	pt.seen = malloc(POOL_ITEMS);
	assert_non_null(pt.sums);
	assert_non_null(pt.inside);
	assert_non_null(pt.seen);
	for (unsigned w = 0; w < pt.width; w++)
		atomic_init(&pt.inside[w], 0);

	for (int round = 0; round < 3; round++) {
		pool_reset(&pt);
		dd_pool_run(pool, pool_job, &pt, POOL_ITEMS);
		pool_check(&pt, POOL_ITEMS, 1);

		pool_reset(&pt);
		dd_pool_start(pool, pool_job, &pt, POOL_ITEMS);
		dd_pool_wait(pool);
		pool_check(&pt, POOL_ITEMS, 0);
	}
	/* Small jobs, back to back, and a wait with nothing running. */
	for (size_t n = 0; n < 40; n++) {
		pool_reset(&pt);
		if (n & 1) {
			dd_pool_start(pool, pool_job, &pt, n);
			dd_pool_wait(pool);
		} else {
			dd_pool_run(pool, pool_job, &pt, n);
		}
		if (n)
			pool_check(&pt, n, n & 1 ? 0 : 1);
		dd_pool_wait(pool);
	}
	/* start then run: run waits for the job in flight first. */
	pool_reset(&pt);
	dd_pool_start(pool, pool_job, &pt, POOL_ITEMS / 2);
	dd_pool_wait(pool);
	dd_pool_start(pool, pool_job, &pt, 0);
	dd_pool_free(pool);    /* waits for any job still running */
	pool_check(&pt, POOL_ITEMS / 2, 0);
	free(pt.sums);
	free(pt.inside);
	free(pt.seen);
}

static void test_pool(void **state)
{
	(void)state;
	pool_case(1);
	pool_case(3);
	pool_case(0);
}

static void test_pool_args(void **state)
{
	dd_pool *pool = NULL;

	(void)state;
	assert_int_equal(dd_pool_new(NULL, 1), DD_EINVAL);
	assert_int_equal(dd_pool_new(&pool, 100000), DD_EINVAL);
	assert_null(pool);
	dd_pool_free(NULL);
	assert_int_equal(dd_pool_width(NULL), 1);

	/* An allocation failure is reported, nothing leaks. */
	dd_fault_arm(DD_FAULT_ALLOC, 2, ENOMEM, 0);
	assert_int_equal(dd_pool_new(&pool, 2), DD_ENOMEM);
	assert_null(pool);
	dd_fault_disarm_all();
}

/* ---- hmap: RAM table, then the spill file ---------------------------------*/

static void hmap_key(uint8_t key[32], uint64_t i)
{
	/* SHA-256 keys are uniform: spread i over the bytes like one */
	uint64_t x = i * 0x9E3779B97F4A7C15ull + 1;

	for (int k = 0; k < 32; k++) {
		x ^= x >> 29;
		x *= 0xBF58476D1CE4E5B9ull;
		key[k] = (uint8_t)(x >> 56);
	}
}

static void test_hmap_spill(void **state)
{
	const uint64_t n = 100000;
	dd_hmap *m;
	dd_err err;
	uint8_t key[32];
	uint64_t v;

	(void)state;
	/* 256 KiB of RAM holds ~4k entries: the rest must spill */
	assert_int_equal(dd_hmap_new(&m, &err, 256 * 1024, NULL), 0);
	for (uint64_t i = 0; i < n; i++) {
		hmap_key(key, i);
		assert_int_equal(dd_hmap_put(m, &err, key, i * 3), 0);
	}
	assert_int_equal(dd_hmap_count(m), n);
	for (uint64_t i = 0; i < n; i += 7) {
		hmap_key(key, i);
		assert_int_equal(dd_hmap_get(m, &err, key, &v), 0);
		assert_int_equal(v, i * 3);
	}
	/* replacing, in RAM and on disk */
	hmap_key(key, 5);
	assert_int_equal(dd_hmap_put(m, &err, key, 77), 0);
	hmap_key(key, n - 1);
	assert_int_equal(dd_hmap_put(m, &err, key, 88), 0);
	assert_int_equal(dd_hmap_count(m), n);
	hmap_key(key, 5);
	assert_int_equal(dd_hmap_get(m, &err, key, &v), 0);
	assert_int_equal(v, 77);
	hmap_key(key, n - 1);
	assert_int_equal(dd_hmap_get(m, &err, key, &v), 0);
	assert_int_equal(v, 88);
	for (uint64_t i = n; i < n + 1000; i++) {
		hmap_key(key, i);
		assert_int_equal(dd_hmap_get(m, &err, key, &v), DD_ENOENT);
	}
	dd_hmap_free(m);
}

static void test_hmap_write_fault(void **state)
{
	dd_hmap *m;
	dd_err err;
	uint8_t key[32];
	int rc = 0;

	(void)state;
	assert_int_equal(dd_hmap_new(&m, &err, 64 * 1024, NULL), 0);
	dd_fault_arm(DD_FAULT_WRITE, 10, ENOSPC, 0);
	for (uint64_t i = 0; i < 20000 && !rc; i++) {
		hmap_key(key, i);
		rc = dd_hmap_put(m, &err, key, i);
	}
	assert_int_equal(rc, DD_ENOSPC);
	assert_non_null(strstr(err.de_msg, "hmap spill"));
	dd_hmap_free(m);
}

/* The default budget (16 MiB) holds a 1 GiB stream of 4 KiB blocks --
 * 262,144 keys -- in RAM: with every write and read of a spill file made
 * to fail, none of the puts and gets touches one. */
static void test_hmap_ram_holds_1g_of_4k(void **state)
{
	const uint64_t n = 262144;
	dd_hmap *m;
	dd_err err;
	uint8_t key[32];
	uint64_t v;

	(void)state;
	assert_int_equal(dd_hmap_new(&m, &err, 0, NULL), 0);
	dd_fault_arm(DD_FAULT_WRITE, 1, EIO, 1);
	dd_fault_arm(DD_FAULT_READ, 1, EIO, 1);
	dd_fault_arm(DD_FAULT_OPEN, 1, EIO, 1);
	for (uint64_t i = 0; i < n; i++) {
		hmap_key(key, i);
		assert_int_equal(dd_hmap_put(m, &err, key, i), 0);
	}
	for (uint64_t i = 0; i < n + 1000; i += 3) {
		hmap_key(key, i);
		assert_int_equal(dd_hmap_get(m, &err, key, &v),
				 i < n ? 0 : DD_ENOENT);
		if (i < n)
			assert_int_equal(v, i);
	}
	assert_int_equal(dd_fault_hits(DD_FAULT_WRITE), 0);
	assert_int_equal(dd_fault_hits(DD_FAULT_READ), 0);
	dd_hmap_free(m);
}

/* Past RAM, a key never put is answered by the spill's filter, not by a
 * read of the spill file: with reads failing, nearly every such get is
 * still DD_ENOENT (the filter's false positives read, and fail). */
static void test_hmap_spill_filter(void **state)
{
	const uint64_t n = 100000, absent = 10000;
	dd_hmap *m;
	dd_err err;
	uint8_t key[32];
	uint64_t v, failed = 0;

	(void)state;
	/* 1 MiB: ~22,000 keys in RAM, the rest spilled, a 128 KiB filter */
	assert_int_equal(dd_hmap_new(&m, &err, 1 << 20, NULL), 0);
	for (uint64_t i = 0; i < n; i++) {
		hmap_key(key, i);
		assert_int_equal(dd_hmap_put(m, &err, key, i), 0);
	}
	hmap_key(key, n - 1);   /* spilled: the file answers */
	assert_int_equal(dd_hmap_get(m, &err, key, &v), 0);
	assert_int_equal(v, n - 1);
	dd_fault_arm(DD_FAULT_READ, 1, EIO, 1);
	for (uint64_t i = n; i < n + absent; i++) {
		int rc;

		hmap_key(key, i);
		rc = dd_hmap_get(m, &err, key, &v);
		if (rc == DD_EIO)
			failed++;
		else
			assert_int_equal(rc, DD_ENOENT);
	}
	/* 78,000 spilled keys in 1 Mbit, 4 probes: about 0.5% */
	assert_true(failed < absent / 50);
	hmap_key(key, n - 1);   /* a spilled key is read from the file */
	assert_int_equal(dd_hmap_get(m, &err, key, &v), DD_EIO);
	dd_hmap_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_err_format),
		cmocka_unit_test(test_err_truncate),
		cmocka_unit_test(test_err_copy),
		cmocka_unit_test(test_err_names),
		cmocka_unit_test(test_errno_map),
		cmocka_unit_test(test_crc32c_vectors),
		cmocka_unit_test(test_crc32c_chain_unaligned),
		cmocka_unit_test_teardown(test_fault_alloc, teardown_faults),
		cmocka_unit_test_teardown(test_fault_threads, teardown_faults),
		cmocka_unit_test_teardown(test_io_file, teardown_faults),
		cmocka_unit_test_teardown(test_io_faults, teardown_faults),
		cmocka_unit_test_teardown(test_io_rename_delay, teardown_faults),
		cmocka_unit_test(test_pool),
		cmocka_unit_test_teardown(test_pool_args, teardown_faults),
		cmocka_unit_test(test_hmap_spill),
		cmocka_unit_test_teardown(test_hmap_write_fault, teardown_faults),
		cmocka_unit_test_teardown(test_hmap_ram_holds_1g_of_4k,
					  teardown_faults),
		cmocka_unit_test_teardown(test_hmap_spill_filter,
					  teardown_faults),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
