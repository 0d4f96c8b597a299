/*
 * crc32c.h -- CRC-32C (Castagnoli), used for record-header checksums.
 * Hardware instruction when the CPU has SSE4.2, a table otherwise.
 */
#ifndef DD_COMMON_CRC32C_H
#define DD_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* crc32c(0, buf, len) starts a new checksum; pass the result back in to
 * continue over more bytes. */
uint32_t dd_crc32c(uint32_t crc, const void *buf, size_t len);

/* The portable table version, same results; exposed for tests. */
uint32_t dd_crc32c_sw(uint32_t crc, const void *buf, size_t len);

#endif
