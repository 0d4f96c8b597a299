/*
 * store_meta.c -- libFuzzer harness for the STORE/DEDUP format file
 * (format/store.md §1; dd_format_file_check in libdedup/store/store.c)
 * and what dd_store_open does after it accepts the file.
 *
 * One valid store is created per process in a temporary directory; each
 * input replaces its DEDUP file, then the store is opened (read-only and,
 * for every input whose first byte is odd, read-write too) and closed.
 * Whatever the bytes: an error code or an open store, never a crash.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dedup.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fz_store[4200], fz_dedup[4300];

static void fz_init(void)
{
	dd_store *s;

	if (fz_store[0])
		return;
	snprintf(fz_store, sizeof(fz_store), "%s/store", fz_tmpdir());
	snprintf(fz_dedup, sizeof(fz_dedup), "%s/DEDUP", fz_store);
	if (dd_store_create(&s, fz_store, NULL, NULL) != 0) {
		fprintf(stderr, "fuzz: dd_store_create: %s\n",
			dd_store_errmsg(NULL));
		abort();
	}
	dd_store_close(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dd_open_opts ro = DD_OPEN_OPTS_INIT, rw = DD_OPEN_OPTS_INIT;
	dd_store *s;

	fz_init();
	fz_write_file(fz_dedup, data, size);
	ro.readonly = 1;
	ro.no_cache = 1;
	ro.threads = 1;
	rw.no_cache = 1;
	rw.threads = 1;
	if (dd_store_open(&s, fz_store, &ro) == 0)
		dd_store_close(s);
	else
		(void)dd_store_errmsg(NULL);
	if (size && (data[0] & 1) && dd_store_open(&s, fz_store, &rw) == 0)
		dd_store_close(s);
	return 0;
}
