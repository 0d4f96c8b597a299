/*
 * manifest.c -- libFuzzer harness for snapshot manifests
 * (format/manifest.md; libdedup/store/manifest.c): each input is a
 * manifest file, read through an in-memory file (memfd) by
 * dd_manifest_read_open and walked to its end with dd_manifest_read_next.
 *
 * Whatever the bytes: an error code, or a verified manifest whose entries
 * cover exactly the blocks its header claims -- never a crash, a leak or
 * an overread.  The header may claim at most 2^20 blocks here so that a
 * valid run of holes (whose digest costs one hash update per block, §6)
 * stays within the fuzzer's time per input.  A manifest of content-
 * defined blocks (§4.1) must also cover its size byte for byte.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "store/manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dd_manifest_reader *mr;
	dd_manifest_hdr h;
	dd_manifest_ent e;
	dd_err err;
	uint64_t covered = 0, bytes = 0;
	int fd = memfd_create("manifest", MFD_CLOEXEC), rc;

	if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size))
		abort();
	rc = dd_manifest_read_open(&mr, &err, fd, "fuzz", UINT64_MAX, 1u << 20,
				   &h);
	if (rc == 0) {
		while ((rc = dd_manifest_read_next(mr, &err, &e)) == 1) {
			if (e.me_index != covered || e.me_count == 0)
				abort();   /* verified, yet not contiguous */
			if (h.mh_chunker != DD_CHUNKER_FIXED &&
			    (e.me_off != bytes || e.me_len == 0))
				abort();
			covered += e.me_count;
			bytes += e.me_len;
		}
		if (rc != 0 || covered != h.mh_blocks ||
		    (h.mh_chunker != DD_CHUNKER_FIXED && bytes != h.mh_size))
			abort();
		dd_manifest_read_close(mr);
	}
	close(fd);
	return 0;
}
