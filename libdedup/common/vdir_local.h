/*
 * vdir_local.h -- what only the local backend (vdir_local.c) can tell
 * vdir.c: the directory's fd, and where a file's holes are.  Both take a
 * vdir or a file of that backend (dd_vdir_is_local).
 */
#ifndef DD_COMMON_VDIR_LOCAL_H
#define DD_COMMON_VDIR_LOCAL_H

#include <stdint.h>

#include "vdir.h"

int dd_vdir_local_fd(const dd_vdir *d);
/* dd_vfile_seek_data for a local file. */
int dd_vfile_local_seek_data(dd_vfile *f, uint64_t off, uint64_t *data);

#endif
