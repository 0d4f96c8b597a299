/*
 * zero.h -- is a byte range all zero?
 *
 * The one zero test of the library, in common/ so that every module may
 * use it: chunk/ for zero blocks (holes, DESIGN.md), and the format
 * decoders of pack/ and cache/ for reserved bytes, which must be zero
 * (format/pack.md, format/cache.md).  chunk/chunk.h re-exports it.
 */
#ifndef DD_COMMON_ZERO_H
#define DD_COMMON_ZERO_H

#include <stdbool.h>
#include <stddef.h>

/* True when len bytes at buf are all zero (len 0: true, buf may then be
 * NULL).  Word-at-a-time. */
bool dd_is_zero(const void *buf, size_t len);

#endif
