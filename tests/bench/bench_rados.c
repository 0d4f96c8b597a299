/*
 * bench_rados.c -- object size for RADOS packs: throughput of writing and
 * reading TOTAL bytes as objects of each size, through libdedup's RADOS
 * client (libdedup/rados/), one operation at a time as one writer or
 * reader of a store would issue them.  Driven by bench_rados.sh.
 *
 *   bench_rados --pool P [--total-mib N] [--sizes-mib 4,8,...]
 *               [--rounds N] [--piece-mib N]
 *
 * For each object size S and each round: the objects are written whole
 * (write_full, one operation per object); read whole; written again as
 * appends of --piece-mib (a pack growing by its write buffer); read in
 * --piece-mib pieces; then removed.  Each figure is the best round, in
 * MB/s (10^6 bytes) of object bytes.  Every object read is compared with
 * what was written.  Output: one line per size, and "key<TAB>value"
 * lines on stderr for the script's record.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dedup.h"
#include "rados/rados.h"

#define MIB (1024u * 1024u)

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what, const dd_err *err)
{
	fprintf(stderr, "bench_rados: %s: %s\n", what, err ? err->de_msg : "");
	exit(1);
}

static void fill(unsigned char *buf, size_t len)
{
	uint64_t x = 0x9e3779b97f4a7c15ull;

	for (size_t i = 0; i + 8 <= len; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(buf + i, &x, 8);
	}
}

struct bench {
	dd_rados_pool *pool;
	unsigned char *data, *back;
	size_t size, piece;
	unsigned count;
};

static void oid_of(char *buf, size_t len, unsigned i)
{
	snprintf(buf, len, "packs/%08x", i);
}

/* Object i holds data shifted by i bytes: no two objects alike. */
static const unsigned char *obj_bytes(const struct bench *b, unsigned i)
{
	return b->data + (i % 4096);
}

/* Writes every object whole (piece >= size: one write_full each) or as
 * appends of piece bytes. */
static double write_objects(struct bench *b, size_t piece)
{
	dd_err err = {0};
	char oid[32];
	double t0 = now();

	for (unsigned i = 0; i < b->count; i++) {
		oid_of(oid, sizeof(oid), i);
		if (piece >= b->size) {
			if (dd_rados_write_full(b->pool, &err, oid,
						obj_bytes(b, i), b->size))
				die("write_full", &err);
			continue;
		}
		for (size_t off = 0; off < b->size; off += piece) {
			size_t n = b->size - off < piece ? b->size - off
							 : piece;

			if (dd_rados_append(b->pool, &err, oid,
					    obj_bytes(b, i) + off, n))
				die("append", &err);
		}
	}
	return now() - t0;
}

static double read_back(struct bench *b, size_t piece)
{
	dd_err err = {0};
	char oid[32];
	double t0 = now(), spent = 0;

	for (unsigned i = 0; i < b->count; i++) {
		oid_of(oid, sizeof(oid), i);
		for (size_t off = 0; off < b->size; off += piece) {
			size_t n = b->size - off < piece ? b->size - off : piece;
			size_t got = 0;
			double c0;

			if (dd_rados_read(b->pool, &err, oid, b->back + off, n,
					  off, &got))
				die("read", &err);
			if (got != n) {
				fprintf(stderr, "bench_rados: %s: %zu bytes at "
					"%zu, expected %zu\n", oid, got, off,
					n);
				exit(1);
			}
			/* the check is not the cluster's time */
			c0 = now();
			if (memcmp(b->back + off, obj_bytes(b, i) + off, n)) {
				fprintf(stderr, "bench_rados: %s differs at "
					"%zu\n", oid, off);
				exit(1);
			}
			spent += now() - c0;
		}
	}
	return now() - t0 - spent;
}

static void remove_all(struct bench *b)
{
	dd_err err = {0};
	char oid[32];

	for (unsigned i = 0; i < b->count; i++) {
		oid_of(oid, sizeof(oid), i);
		if (dd_rados_remove(b->pool, &err, oid))
			die("remove", &err);
	}
}

static double best(double a, double b)
{
	return a < b ? a : b;
}

int main(int argc, char **argv)
{
	const char *pool = NULL, *sizes = "4,8,16,32,64";
	unsigned total_mib = 512, rounds = 3, piece_mib = 4;
	dd_rados_conf conf = {120, 60, 60};
	struct bench b = {0};
	dd_rados *ra;
	dd_err err = {0};
	char *list, *tok, *save;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!v) {
			fprintf(stderr, "bench_rados: %s needs a value\n", a);
			return 2;
		}
		if (strcmp(a, "--pool") == 0)
			pool = v;
		else if (strcmp(a, "--total-mib") == 0)
			total_mib = (unsigned)atoi(v);
		else if (strcmp(a, "--sizes-mib") == 0)
			sizes = v;
		else if (strcmp(a, "--rounds") == 0)
			rounds = (unsigned)atoi(v);
		else if (strcmp(a, "--piece-mib") == 0)
			piece_mib = (unsigned)atoi(v);
		else {
			fprintf(stderr, "bench_rados: unknown option %s\n", a);
			return 2;
		}
		i++;
	}
	if (!pool || !total_mib || !rounds || !piece_mib) {
		fprintf(stderr, "bench_rados: --pool P [--total-mib N] "
			"[--sizes-mib 4,8] [--rounds N] [--piece-mib N]\n");
		return 2;
	}
	if (dd_rados_connect(&ra, &err, &conf))
		die("connect", &err);
	if (dd_rados_pool_open(&b.pool, &err, ra, pool, "bench"))
		die("open pool", &err);
	b.piece = (size_t)piece_mib * MIB;
	printf("%-8s %8s %12s %12s %12s %12s\n", "object", "objects",
	       "write_full", "append", "read_whole", "read_piece");
	list = strdup(sizes);
	for (tok = strtok_r(list, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		unsigned mib = (unsigned)atoi(tok);
		double tw = 1e30, ta = 1e30, tr = 1e30, tp = 1e30, mb;

		if (mib == 0 || mib > 64 || total_mib % mib) {
			fprintf(stderr, "bench_rados: size %s MiB: 1 to 64, "
				"dividing the total\n", tok);
			return 2;
		}
		b.size = (size_t)mib * MIB;
		b.count = total_mib / mib;
		free(b.data);
		free(b.back);
		b.data = malloc(b.size + 4096);
		b.back = malloc(b.size);
		if (!b.data || !b.back) {
			fprintf(stderr, "bench_rados: out of memory\n");
			return 1;
		}
		fill(b.data, b.size + 4096);
		for (unsigned r = 0; r < rounds; r++) {
			tw = best(tw, write_objects(&b, b.size));
			tr = best(tr, read_back(&b, b.size));
			remove_all(&b);
			ta = best(ta, write_objects(&b, b.piece));
			tp = best(tp, read_back(&b, b.piece));
			remove_all(&b);
		}
		mb = (double)total_mib * MIB / 1e6;
		printf("%4u MiB %8u %9.0f MB/s %7.0f MB/s %7.0f MB/s %7.0f MB/s\n",
		       mib, b.count, mb / tw, mb / ta, mb / tr, mb / tp);
		fprintf(stderr, "write_full_%u\t%.1f\nappend_%u\t%.1f\n"
			"read_whole_%u\t%.1f\nread_piece_%u\t%.1f\n", mib,
			mb / tw, mib, mb / ta, mib, mb / tr, mib, mb / tp);
		fflush(stdout);
	}
	free(list);
	free(b.data);
	free(b.back);
	dd_rados_pool_close(b.pool);
	dd_rados_disconnect(ra);
	return 0;
}
