/*
 * bench_cutter.c -- the FastCDC cutter alone, one thread: how many bytes
 * a second it cuts (chunk/fastcdc.c), over a buffer larger than the
 * caches, as the pipeline calls it (one block after the other, each call
 * given the rest of the buffer).  bench_cdc.sh puts the figure beside
 * `openssl speed -evp sha256` of the same run.  Like `openssl speed`
 * (without -elapsed), the rate divides by the CPU time of the thread, so
 * that other jobs on a shared machine slow neither figure; the rate by
 * wall-clock time is printed too (fastcdc_wall_mbps).
 *
 *   bench_cutter AVG SECONDS FILE|-   (-: pseudo-random bytes)
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dedup.h"
#include "chunk/chunk.h"

#define BUF_BYTES ((size_t)64 << 20)

static double now(clockid_t clk)
{
	struct timespec t;

	clock_gettime(clk, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	uint32_t avg = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 0) : 131072;
	double secs = argc > 2 ? atof(argv[2]) : 2.0, t0, t, w0, w;
	const char *src = argc > 3 ? argv[3] : "-";
	uint8_t *buf = malloc(BUF_BYTES);
	unsigned long long bytes = 0, blocks = 0, passes = 0;
	uint64_t s = 0x2545f4914f6cdd1dull;
	dd_cutter c;
	size_t have = 0;

	if (!buf || !dd_chunker_valid(DD_CHUNKER_FASTCDC, avg))
		return 2;
	if (strcmp(src, "-") != 0) {
		int fd = open(src, O_RDONLY);
		ssize_t n;

		if (fd < 0)
			return 2;
		while (have < BUF_BYTES &&
		       (n = read(fd, buf + have, BUF_BYTES - have)) > 0)
			have += (size_t)n;
		close(fd);
	}
	for (size_t i = have; i < BUF_BYTES; i++) {
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		buf[i] = (uint8_t)(s >> 40);
	}
	dd_cutter_fastcdc(&c, avg);
	w0 = now(CLOCK_MONOTONIC);
	t0 = now(CLOCK_THREAD_CPUTIME_ID);
	for (; (t = now(CLOCK_THREAD_CPUTIME_ID) - t0) < secs; passes++)
		for (size_t off = 0; off < BUF_BYTES; blocks++) {
			size_t l = c.cu_next(&c, buf + off, BUF_BYTES - off,
					     true);

			off += l;
			bytes += l;
		}
	w = now(CLOCK_MONOTONIC) - w0;
	printf("fastcdc_mbps\t%.1f\n", (double)bytes / t / 1e6);
	printf("fastcdc_wall_mbps\t%.1f\n", (double)bytes / w / 1e6);
	printf("fastcdc_mean_block\t%.0f\n", (double)bytes / (double)blocks);
	printf("passes\t%llu\n", passes);
	free(buf);
	return 0;
}
