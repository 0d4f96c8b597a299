/*
 * stream_decoder.c -- libFuzzer harness for the replication stream decoder
 * (format/stream.md, libdedup/stream/sdec.c) and dd_stream_check.
 *
 * Each input is a stream.  Its first byte, if any, sets how many bytes the
 * read callback hands out per call (1..256, or everything), so partial
 * reads are fuzzed along with the content.  The input goes through the
 * decoder record by record until END or an error, then through
 * dd_stream_check (which also decompresses and verifies DATA blocks and
 * resolves REFs).  Invariant 3 of DESIGN.md is the property under test:
 * whatever the bytes, a clear error and no crash, leak or overflow.
 *
 * Built two ways (fuzz/CMakeLists.txt): with clang -fsanitize=fuzzer as a
 * real fuzzer, and with fuzz/replay.c as a plain program that runs every
 * file of the corpus directories given on its command line (ctest).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedup.h"
#include "stream/stream.h"

/* dd_stream_check hashes 32 bytes per block for the content digest, a
 * hole too, and the decoder refuses a header claiming more than 2^32
 * blocks (format/stream.md §3.1) -- up to a minute of hashing, by the
 * stream's own word.  What a fuzzer's input claims beyond this many
 * blocks is skipped; a claim the decoder should have refused runs, and
 * the replay's time limit (replay.c) catches it spinning. */
#define FUZZ_MAX_BLOCKS ((uint64_t)1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct fuzz_in {
	const uint8_t *p;
	size_t len, pos, step;
};

static int fuzz_read(void *ctx, void *buf, size_t len, size_t *got)
{
	struct fuzz_in *in = ctx;
	size_t n = in->len - in->pos;

	if (n > len)
		n = len;
	if (in->step && n > in->step)
		n = in->step;
	memcpy(buf, in->p + in->pos, n);
	in->pos += n;
	*got = n;
	return 0;
}

/* Decodes records until END or an error; returns the header's block
 * count (0 when the header was refused). */
static uint64_t fuzz_decode(struct fuzz_in *in)
{
	dd_err err = {0};
	dd_stream_hdr h;
	dd_srec r;
	dd_sdec *d;
	uint64_t nblocks = 0;
	int rc;

	if (dd_sdec_new(&d, &err, fuzz_read, in) != 0)
		return 0;
	if (dd_sdec_header(d, &err, &h) == 0) {
		nblocks = h.sh_size / h.sh_block_size + 1;
		do {
			rc = dd_sdec_next(d, &err, &r);
		} while (rc > 0 && rc != DD_SREC_END);
		if (rc == DD_SREC_END)
			(void)dd_sdec_expect_eof(d, &err);
	}
	dd_sdec_free(d);
	return nblocks;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = {0};
	dd_stream_info info;
	uint64_t nblocks;

	if (size == 0)
		return 0;
	in.step = data[0] < 128 ? (size_t)data[0] + 1 : 0;
	in.p = data + 1;
	in.len = size - 1;
	nblocks = fuzz_decode(&in);
	if (nblocks == 0 ||
	    (nblocks > FUZZ_MAX_BLOCKS && nblocks <= DD_STREAM_BLOCKS_MAX + 1))
		return 0;
	in.pos = 0;
	(void)dd_stream_check(NULL, fuzz_read, &in, &info);
	return 0;
}
