/*
 * bench_codec.c -- zstd parameter variants on independent blocks, the way
 * the store compresses (pack/codec.c): each block its own frame, its size
 * known.  Prints, per variant, the total compressed size and the best CPU
 * time of --rounds passes, both relative to stock level 1.  Blocks that do
 * not shrink count at their own size, as the store keeps them.
 *
 * Build and run: tests/bench/bench_codec.sh (it compiles this file).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

struct variant {
	const char *name;
	int level, hash_log, min_match;  /* 0: the level's own value */
};

static const struct variant variants[] = {
	{"level 1 (zstd's own)", 1, 0, 0},
	{"level 1, min match 5 (libdedup)", 1, 0, 5},
	{"level 1, min match 4", 1, 0, 4},
	{"level 1, hash log 14", 1, 14, 0},
	{"level 1, hash log 14, min match 5", 1, 14, 5},
	{"level 2 (zstd's own)", 2, 0, 0},
};
#define NVAR (sizeof(variants) / sizeof(variants[0]))

static double cpu_seconds(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static size_t compress_all(const struct variant *v, const unsigned char *src,
			   size_t n, size_t bs, unsigned char *out)
{
	ZSTD_CCtx *cc = ZSTD_createCCtx();
	size_t total = 0;

	if (!cc)
		exit(1);
	ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, v->level);
	if (v->hash_log)
		ZSTD_CCtx_setParameter(cc, ZSTD_c_hashLog, v->hash_log);
	if (v->min_match)
		ZSTD_CCtx_setParameter(cc, ZSTD_c_minMatch, v->min_match);
	for (size_t off = 0; off < n; off += bs) {
		size_t len = n - off < bs ? n - off : bs;
		size_t r = ZSTD_compress2(cc, out, ZSTD_compressBound(bs),
					  src + off, len);

		if (ZSTD_isError(r)) {
			fprintf(stderr, "zstd: %s\n", ZSTD_getErrorName(r));
			exit(1);
		}
		total += r < len ? r : len;
	}
	ZSTD_freeCCtx(cc);
	return total;
}

int main(int argc, char **argv)
{
	size_t bs = argc > 2 ? strtoul(argv[2], NULL, 0) : 131072;
	int rounds = argc > 3 ? atoi(argv[3]) : 3;
	size_t size[NVAR];
	double best[NVAR];
	unsigned char *src, *out;
	struct stat st;
	int fd;

	if (argc < 2 || bs == 0 || rounds < 1) {
		fprintf(stderr, "usage: bench_codec FILE [BLOCK_SIZE [ROUNDS]]\n");
		return 2;
	}
	fd = open(argv[1], O_RDONLY);
	if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) {
		perror(argv[1]);
		return 1;
	}
	src = mmap(NULL, (size_t)st.st_size, PROT_READ,
		   MAP_PRIVATE | MAP_POPULATE, fd, 0);
	out = malloc(ZSTD_compressBound(bs));
	if (src == MAP_FAILED || !out)
		return 1;
	for (size_t i = 0; i < NVAR; i++)
		best[i] = 1e30;
	for (int r = 0; r < rounds; r++) /* interleaved: load hits all alike */
		for (size_t i = 0; i < NVAR; i++) {
			double t = cpu_seconds();

			size[i] = compress_all(&variants[i], src,
					       (size_t)st.st_size, bs, out);
			t = cpu_seconds() - t;
			if (t < best[i])
				best[i] = t;
		}
	printf("%-36s %14s %8s %9s %8s\n", "variant", "bytes", "size",
	       "cpu s", "cpu");
	for (size_t i = 0; i < NVAR; i++)
		printf("%-36s %14zu %+7.2f%% %9.3f %+7.1f%%\n", variants[i].name,
		       size[i], 100.0 * (double)size[i] / (double)size[0] - 100,
		       best[i], 100.0 * best[i] / best[0] - 100);
	return 0;
}
