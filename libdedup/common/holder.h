/*
 * holder.h -- how a lock's holder is named in messages.
 *
 * "pid N on HOST since YYYY-MM-DDTHH:MM:SSZ" (UTC, the time of the call):
 * the text a refused waiter prints, in the store's lock files
 * (format/store.md §1) and in RADOS locks (rados/lock.c).  It is for
 * messages only: what says a holder is alive is its lock.
 */
#ifndef DD_COMMON_HOLDER_H
#define DD_COMMON_HOLDER_H

#include <stddef.h>

void dd_holder_ident(char *buf, size_t len);

#endif
