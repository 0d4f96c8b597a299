/*
 * chunker.c -- libFuzzer harness, differential, for content-defined
 * blocks: the FastCDC cutter (libdedup/chunk/fastcdc.c,
 * format/chunker.md) and the block maps of content-defined blocks, keyed
 * by offset (libdedup/catalog/maps.c, format/store.md §4.2).
 *
 * Input: byte 0 picks the average (4, 8 or 16 KiB); byte 1 the lengths
 * handed to the cutter; the rest is an image.
 *
 *  1. The image is cut to its end by the cutter, and every cut is
 *     checked against a one-byte-a-step transcription of §3 (the cutter
 *     rolls two bytes a step), for the whole rest and for shorter
 *     prefixes (final or not): every byte-1-chosen stride up to 5 avg
 *     (at least 5 avg / 16: each check reads the prefix), and one byte
 *     either side of min, avg, max and the block's own length; any
 *     difference, or a length outside 1..max (or below min before the
 *     image's end), aborts.
 *  2. The blocks become a block map in a temporary catalog, every third
 *     one left out as a hole; dd_bmap_find of bytes around every edge
 *     and inside every block and hole must give the entry a linear
 *     search gives, or abort.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dedup.h"
#include "chunk/chunk.h"
#include "catalog/db_internal.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_MAX_BLOCKS 4096

static dd_db *fz_db;

/* §3, one byte a step: the hash rolled from 64 bytes before the first
 * candidate, each length from min to max - 1 tested with its mask. */
static size_t fz_ref_cut(uint32_t avg, const uint8_t *p, size_t len,
			 bool final)
{
	const uint64_t *g = dd_fastcdc_gear();
	size_t min = avg / 4, max = 4 * (size_t)avg;
	unsigned bits = 0;
	uint64_t ms, ml, h = 0;

	while ((1u << (bits + 1)) <= avg)
		bits++;
	ms = (((uint64_t)1 << (bits + 2)) - 1) << (63 - (bits + 2));
	ml = (((uint64_t)1 << (bits - 2)) - 1) << (63 - (bits - 2));
	if (len >= min) {
		for (size_t j = min - 64; j < min - 1; j++)
			h = (h << 1) + g[p[j]];
		for (size_t l = min; l <= len && l < max; l++) {
			h = (h << 1) + g[p[l - 1]];
			if (!(h & (l < avg ? ms : ml)))
				return l;
		}
	}
	if (len >= max)
		return max;
	return final ? len : 0;
}

static void fz_check_cut(const dd_cutter *c, uint32_t avg, const uint8_t *p,
			 size_t len, bool final)
{
	size_t got = c->cu_next(c, p, len, final);

	if (got != fz_ref_cut(avg, p, len, final))
		abort();
	if (got > c->cu_max || (got == 0 && final && len > 0) ||
	    (got && got < c->cu_min && !(final && got == len)) || got > len)
		abort();
}

/* The entry holding byte x, or the next after it: by a linear search. */
static size_t fz_linear(const uint64_t *off, const uint32_t *len, size_t n,
			uint64_t x)
{
	for (size_t i = 0; i < n; i++)
		if (off[i] + len[i] > x)
			return i;
	return n;
}

static void fz_map(const uint64_t *off, const uint32_t *len, size_t n,
		   uint32_t max)
{
	dd_err err = {0};
	dd_txn *txn;
	dd_bmap_cur *cur;
	dd_ddt_key key = {{0}, 0};
	uint64_t end = n ? off[n - 1] + len[n - 1] : 0, got;

	if (!fz_db && dd_db_open(&fz_db, &err, fz_tmpdir(), true, false) != 0)
		abort();
	dd_db_set_varblock(fz_db, max);
	if (dd_txn_begin(fz_db, &err, true, &txn) != 0)
		abort();
	for (size_t i = 0; i < n; i++) {
		memcpy(key.dk_hash, &off[i], sizeof(off[i]));
		if (dd_bmap_append(txn, &err, 7, off[i], len[i], &key) != 0)
			abort();
	}
	if (dd_bmap_open(txn, &err, 7, &cur) != 0)
		abort();
	for (size_t i = 0; i <= n; i++) {
		uint64_t at = i < n ? off[i] : end;
		uint64_t probe[] = {at ? at - 1 : 0, at, at + 1,
				    i < n ? at + len[i] / 2 : end + 100};

		for (size_t k = 0; k < sizeof(probe) / sizeof(probe[0]); k++) {
			size_t want = fz_linear(off, len, n, probe[k]);
			int rc = dd_bmap_find(cur, &err, probe[k], &got, &key);

			if (want == n ? rc != 0
				      : rc != 1 || got != off[want] ||
					dd_bmap_len(cur) != len[want])
				abort();
		}
	}
	dd_bmap_close(cur);
	dd_txn_abort(txn);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint64_t off[FZ_MAX_BLOCKS];
	static uint32_t len[FZ_MAX_BLOCKS];
	uint32_t avg;
	size_t n = 0, m = 0, at = 0, step, edge[4];
	const uint8_t *img;
	dd_cutter c;

	if (size < 2)
		return 0;
	avg = 4096u << (data[0] % 3);
	step = 1 + data[1] * 97u;
	if (step < 5 * avg / 16)
		step = 5 * avg / 16;
	img = data + 2;
	size -= 2;
	dd_cutter_fastcdc(&c, avg);
	/* min, avg, max, and (0) the block's own length, each +- 1 */
	edge[0] = avg / 4;
	edge[1] = avg;
	edge[2] = 4 * (size_t)avg;
	edge[3] = 0;
	while (at < size && n < FZ_MAX_BLOCKS) {
		size_t l = c.cu_next(&c, img + at, size - at, true);

		fz_check_cut(&c, avg, img + at, size - at, true);
		/* shorter prefixes: the cut must not move while it fits.
		 * Each check costs the prefix's length, so a short stride
		 * would make an input quadratic (seconds each under ASan):
		 * the edges of the rule are checked apart instead. */
		for (size_t part = step; part < size - at && part < 5 * avg;
		     part += step) {
			fz_check_cut(&c, avg, img + at, part, false);
			fz_check_cut(&c, avg, img + at, part, true);
		}
		for (size_t e = 0; e < sizeof(edge) / sizeof(edge[0]); e++) {
			size_t part = edge[e] == 0 ? l : edge[e];

			for (size_t d = part - 1; d <= part + 1; d++)
				if (d > 0 && d < size - at) {
					fz_check_cut(&c, avg, img + at, d, false);
					fz_check_cut(&c, avg, img + at, d, true);
				}
		}
		/* every third block a hole: not in the map */
		if (n % 3 != 2) {
			off[m] = at;
			len[m++] = (uint32_t)l;
		}
		at += l;
		n++;
	}
	fz_map(off, len, m, c.cu_max);
	return 0;
}
