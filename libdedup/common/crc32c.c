/*
 * crc32c.c -- CRC-32C (Castagnoli, reflected polynomial 0x82F63B78).
 *
 * The conventional pre- and post-inversion happen inside, so that
 * dd_crc32c(0, ...) is the standard CRC ("123456789" -> 0xE3069283) and a
 * result can be passed back in to continue over more bytes.
 *
 * On x86-64 with SSE4.2 the crc32 instruction does the work; elsewhere a
 * slice-by-8 table (8 KiB, built once) processes 8 bytes per step.  Both
 * read memory bytewise or through memcpy, so any alignment and either
 * byte order are fine.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "common/crc32c.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DD_CRC32C_X86 1
#include <nmmintrin.h>
#endif

#define DD_CRC32C_POLY 0x82F63B78u

static uint32_t dd_crc32c_table[8][256];
static pthread_once_t dd_crc32c_once = PTHREAD_ONCE_INIT;

static void dd_crc32c_init_table(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (DD_CRC32C_POLY & (0u - (c & 1)));
		dd_crc32c_table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++) {
			uint32_t c = dd_crc32c_table[t - 1][i];

			dd_crc32c_table[t][i] =
				(c >> 8) ^ dd_crc32c_table[0][c & 0xff];
		}
}

static uint32_t dd_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

uint32_t dd_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
	const uint32_t(*t)[256] = (const uint32_t(*)[256])dd_crc32c_table;
	const uint8_t *p = buf;
	uint32_t c = ~crc;

	pthread_once(&dd_crc32c_once, dd_crc32c_init_table);
	while (len >= 8) {
		uint32_t lo = dd_le32(p) ^ c;
		uint32_t hi = dd_le32(p + 4);

		c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^
		    t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
		    t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^
		    t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
		p += 8;
		len -= 8;
	}
	while (len--)
		c = (c >> 8) ^ t[0][(c ^ *p++) & 0xff];
	return ~c;
}

#ifdef DD_CRC32C_X86
__attribute__((target("sse4.2")))
static uint32_t dd_crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	uint64_t c = ~crc;

	/* Align so the 8-byte loads do not straddle cache lines. */
	while (len && ((uintptr_t)p & 7)) {
		c = _mm_crc32_u8((uint32_t)c, *p++);
		len--;
	}
	while (len >= 8) {
		uint64_t w;

		memcpy(&w, p, 8);
		c = _mm_crc32_u64(c, w);
		p += 8;
		len -= 8;
	}
	while (len--)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	return ~(uint32_t)c;
}

/* 0 = not probed yet, 1 = hardware, 2 = table.  Racing probes agree. */
static atomic_int dd_crc32c_impl;

uint32_t dd_crc32c(uint32_t crc, const void *buf, size_t len)
{
	int impl = atomic_load_explicit(&dd_crc32c_impl, memory_order_relaxed);

	if (impl == 0) {
		__builtin_cpu_init();
		impl = __builtin_cpu_supports("sse4.2") ? 1 : 2;
		atomic_store_explicit(&dd_crc32c_impl, impl,
				      memory_order_relaxed);
	}
	if (impl == 1)
		return dd_crc32c_hw(crc, buf, len);
	return dd_crc32c_sw(crc, buf, len);
}
#else
uint32_t dd_crc32c(uint32_t crc, const void *buf, size_t len)
{
	return dd_crc32c_sw(crc, buf, len);
}
#endif
