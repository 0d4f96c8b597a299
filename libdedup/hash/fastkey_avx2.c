/* fastkey_avx2.c -- dd_fastkey with AVX2 (CMakeLists.txt compiles this file
 * alone with -mavx2 on x86-64; dd_fastkey calls it only where the CPU has
 * AVX2).  Elsewhere it is empty. */
#if defined(__x86_64__)
#define DD_FASTKEY_NAME dd_fastkey_avx2
#include "hash/fastkey_impl.h"
#else
typedef int dd_fastkey_avx2_unused;   /* ISO C: no empty file */
#endif
