/*
 * cli_parse.c -- libFuzzer harness for the command-line parsers of
 * cmd/util.c (compiled into the harness): parse_size, parse_size_list,
 * parse_compress_spec and split_snapref, and the library's dd_name_check.
 * Only functions that return are called (die* exit by design).
 *
 * The input, NUL-terminated (cut at its first NUL), goes to each parser.
 * Properties checked besides "no crash": a size that parses prints back
 * to digits that parse to the same value, human_size / nicenum format it
 * within their buffers, a list yields at most its capacity, a compress
 * spec gives a valid codec and level (and a refused one, -1 or -2,
 * leaves both untouched), and split_snapref's name passes dd_name_check.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedup.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_LIST_MAX 8

static void fz_size(const char *s)
{
	uint64_t v, w;
	char buf[32];

	if (parse_size(s, &v) != 0)
		return;
	snprintf(buf, sizeof(buf), "%" PRIu64, v);
	if (parse_size(buf, &w) != 0 || w != v)
		abort();
	(void)human_size(buf, sizeof(buf), v);
	(void)nicenum(buf, sizeof(buf), v);
}

static void fz_list(const char *s)
{
	uint64_t out[FZ_LIST_MAX];
	const char *bad = NULL;
	size_t n = 0;

	if (parse_size_list(s, out, FZ_LIST_MAX, &n, &bad) == 0) {
		if (n == 0 || n > FZ_LIST_MAX)
			abort();
	} else if (!bad || bad < s || bad > s + strlen(s)) {
		abort();
	}
}

static void fz_compress(const char *s)
{
	int codec = -1, level = -1;
	int rc = parse_compress_spec(s, &codec, &level);

	if (rc == -1 || rc == -2) {
		if (codec != -1 || level != -1)
			abort();        /* a failure sets nothing */
		return;
	}
	if (rc != 0)
		abort();
	if ((codec != DD_COMPRESS_NONE && codec != DD_COMPRESS_ZSTD) ||
	    level < 0 || level > 19)
		abort();
}

static void fz_snapref(const char *s)
{
	char *store = NULL, *name = NULL;
	const char *why = NULL;

	if (split_snapref(s, &store, &name, &why) == 0) {
		if (!store[0] || dd_name_check(name) != 0)
			abort();
		free(store);
		free(name);
	} else if (!why) {
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = 0;
	fz_size(s);
	fz_list(s);
	fz_compress(s);
	fz_snapref(s);
	(void)dd_name_check(s);
	free(s);
	return 0;
}
