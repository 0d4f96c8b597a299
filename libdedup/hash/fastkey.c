/*
 * fastkey.c -- dd_fastkey (fastkey.h): the baseline variant (SSE2 on
 * x86-64; elsewhere whatever xxHash picks for the target), and on x86-64
 * the choice between it and AVX2's, made once.
 */
#include <pthread.h>

#define DD_FASTKEY_NAME dd_fastkey_sse2
#include "hash/fastkey_impl.h"

typedef void dd_fastkey_fn(const void *, size_t, uint8_t *);

static dd_fastkey_fn *dd_fastkey_best;
static pthread_once_t dd_fastkey_once = PTHREAD_ONCE_INIT;

static void dd_fastkey_choose(void)
{
#if defined(__x86_64__)
	__builtin_cpu_init();
	dd_fastkey_best = __builtin_cpu_supports("avx2") ? dd_fastkey_avx2
							 : dd_fastkey_sse2;
#else
	dd_fastkey_best = dd_fastkey_sse2;
#endif
}

void dd_fastkey(const void *buf, size_t len, uint8_t out[DD_HASH_SIZE])
{
	pthread_once(&dd_fastkey_once, dd_fastkey_choose);
	dd_fastkey_best(buf, len, out);
}
