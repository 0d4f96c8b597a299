/*
 * hmap.h -- a table from 32-byte hashes to 64-bit values for the stream
 * code (blocks already sent, where a received block was written).
 *
 * Open addressing in RAM up to `mem_limit` bytes; beyond it the table
 * spills to a temporary file (format: none that outlives the process).
 */
#ifndef DD_COMMON_HMAP_H
#define DD_COMMON_HMAP_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef struct dd_hmap dd_hmap;

/* mem_limit 0 = 16 MiB; tmpdir NULL = $TMPDIR or /tmp. */
int dd_hmap_new(dd_hmap **out, dd_err *err, uint64_t mem_limit,
		const char *tmpdir);
void dd_hmap_free(dd_hmap *m);

/* Inserts or replaces. */
int dd_hmap_put(dd_hmap *m, dd_err *err, const uint8_t key[32], uint64_t val);
/* 0 and *val when present, DD_ENOENT when absent. */
int dd_hmap_get(dd_hmap *m, dd_err *err, const uint8_t key[32], uint64_t *val);
uint64_t dd_hmap_count(const dd_hmap *m);

#endif
