/*
 * sdig.h -- the stream digest (format/stream.md §8) on a thread of its
 * own.
 *
 * A receive decodes, hashes every block to check it, looks it up and
 * stores it on one thread; the SHA-256 of the whole stream was a second
 * pass of SHA-256 over every byte on that same thread, about a fifth of
 * a 4 KiB receive's time.  The bytes to digest are copied into chunks of
 * 1 MiB, and a chunk that fills is digested by a thread while the next
 * one fills: the copy costs a tenth of the hash.  A stream shorter than
 * a chunk never starts the thread; a thread that cannot start leaves the
 * digest to the caller's thread.  The digest is the same either way: the
 * bytes reach SHA-256 in order.
 */
#ifndef DD_STREAM_SDIG_H
#define DD_STREAM_SDIG_H

#include <stddef.h>
#include <stdint.h>

typedef struct dd_sdig dd_sdig;

/* DD_ENOMEM */
int dd_sdig_new(dd_sdig **out);
void dd_sdig_update(dd_sdig *g, const void *buf, size_t len);
/* The digest of every byte given; g takes no more. */
void dd_sdig_final(dd_sdig *g, uint8_t out[32]);
/* Waits for the thread, if any. */
void dd_sdig_free(dd_sdig *g);

#endif
