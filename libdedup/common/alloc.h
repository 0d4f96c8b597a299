/*
 * alloc.h -- the library's only allocation entry points.
 *
 * All of libdedup allocates through these so that tests can make the Nth
 * allocation fail (see faults.h).  dd_free accepts NULL.
 */
#ifndef DD_COMMON_ALLOC_H
#define DD_COMMON_ALLOC_H

#include <stddef.h>

void *dd_malloc(size_t size);
void *dd_calloc(size_t n, size_t size);
void *dd_realloc(void *p, size_t size);
char *dd_strdup(const char *s);
void dd_free(void *p);

/* A hint for a large array about to be filled: back it with huge pages
 * where whole ones fit (alloc.c).  Changes nothing the caller sees. */
void dd_advise_huge(void *p, size_t len);

#endif
