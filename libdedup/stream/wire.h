/*
 * wire.h -- the rules the stream's encoder (senc.c) and decoder (sdec.c)
 * share, so that what one writes the other accepts: the magic, the
 * record frame (format/stream.md §2), names (§4.2) and DATA's codec and
 * sizes (§5.2).  Only those two files include it.
 */
#ifndef DD_STREAM_WIRE_H
#define DD_STREAM_WIRE_H

#include <stdbool.h>
#include <stdint.h>

#include "dedup.h"
#include "pack/pack.h"
#include "stream/stream.h"

#define DD_SFRAME 16                  /* §2 record frame */

static const uint8_t dd_stream_magic[8] = {'D', 'D', 'S', 'T', 'R', 'E', 'A', 'M'};

static inline const char *dd_srec_name(int type)
{
	switch (type) {
	case DD_SREC_HEADER: return "HEADER";
	case DD_SREC_DATA: return "DATA";
	case DD_SREC_REF: return "REF";
	case DD_SREC_ZERO: return "ZERO";
	case DD_SREC_END: return "END";
	default: return "unknown";
	}
}

/* Snapshot name rules (§4.2), the same as dd_name_check: this module is
 * kept free of the store.  n bytes at p, not NUL-terminated. */
static inline bool dd_sname_ok(const uint8_t *p, size_t n)
{
	if (n < 1 || n > DD_NAME_MAX)
		return false;
	if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (p[i] < 0x20 || p[i] == 0x7f || p[i] == '/' || p[i] == '@')
			return false;
	return true;
}

/* Codec and size rules shared by DATA's encoder and decoder (§5.2);
 * returns a static reason or NULL. */
static inline const char *dd_sdata_bad(uint8_t codec, uint32_t lsize,
				       uint32_t psize)
{
	if (codec != DD_CODEC_NONE && codec != DD_CODEC_ZSTD)
		return "unknown codec";
	if (psize < 1 || psize > DD_BLOCK_SIZE_MAX)
		return "psize out of range";
	if (codec == DD_CODEC_NONE && psize != lsize)
		return "codec none with psize != lsize";
	if (codec == DD_CODEC_ZSTD && psize > lsize)
		return "zstd payload larger than the block";
	return NULL;
}

#endif
