/*
 * vdir.h -- the directories a store keeps its durable data in (packs/ and
 * manifests/), local or in a RADOS pool.
 *
 * A local store's packs and manifests are files in directories of the
 * store; a store named `rados:POOL/NAME` keeps them as objects of its
 * pool namespace, named "packs/NAME" and "manifests/NAME"
 * (rados/vdir_rados.c).  pack/ and store/ see one interface, so every
 * piece of code that writes, reads, walks, repairs, scrubs or collects
 * packs and manifests is written once for both.
 *
 * The calls mirror the POSIX calls on a directory descriptor that they
 * replace, with their rules:
 *
 *  - durability: a local write is durable after dd_vfile_sync, a new name
 *    or a rename after dd_vdir_sync; a RADOS write is durable on every
 *    replica when it returns, so both syncs do nothing there;
 *  - rename is atomic locally (renameat2); on RADOS it is a copy made by
 *    one exclusive create of the whole object, then the removal of the
 *    old name: a crash between leaves both names, each complete, and the
 *    callers' rules say which wins (format/store.md §1, manifests);
 *  - locks: dd_vfile_lock is flock(2) locally; on RADOS it succeeds, as
 *    the store holds the store-wide RADOS lock whenever it writes
 *    (store/rstore.c), so no other process can append to a pack;
 *  - dd_vfile_punch is DD_ENOTSUP on RADOS, and dd_vfile_writeback a
 *    hint that does nothing there, as dd_vfile_drop_written does (a
 *    RADOS write leaves nothing in this host's page cache).
 *
 * Errors are DD_E* codes with one line naming the file (local: "NAME";
 * RADOS: "POOL/NS/OBJECT"); a missing name is DD_ENOENT, an exclusive
 * create of an existing one DD_EEXIST.  Local calls go through io.h, so
 * tests inject faults into them as before.
 *
 * Threads: a vdir and a vfile may be used from several threads at once
 * (reads and writes at offsets); one thread at a time appends to a file.
 */
#ifndef DD_COMMON_VDIR_H
#define DD_COMMON_VDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef struct dd_vdir dd_vdir;
typedef struct dd_vfile dd_vfile;

/* dd_vdir_open_file flags. */
#define DD_VF_WRITE 0x1    /* open for writing as well as reading */
#define DD_VF_CREATE 0x2   /* create it, exclusively (DD_EEXIST); implies
			      DD_VF_WRITE */

/* Opens directory path (which must exist) as a local vdir. */
int dd_vdir_open_local(dd_vdir **out, dd_err *err, const char *path);
/* NULL is fine. */
void dd_vdir_close(dd_vdir *d);

/* A POSIX directory (flock, punched holes and the directory's fd exist)? */
bool dd_vdir_is_local(const dd_vdir *d);
/* The directory's fd when local, else -1. */
int dd_vdir_fd(const dd_vdir *d);

int dd_vdir_open_file(dd_vdir *d, dd_err *err, const char *name, int flags,
		      dd_vfile **out);
/* size of name; DD_ENOENT when there is no such name. */
int dd_vdir_stat(dd_vdir *d, dd_err *err, const char *name, uint64_t *size);
int dd_vdir_unlink(dd_vdir *d, dd_err *err, const char *name);
/* noreplace: DD_EEXIST when `to` exists (renameat2 RENAME_NOREPLACE). */
int dd_vdir_rename(dd_vdir *d, dd_err *err, const char *from, const char *to,
		   bool noreplace);
/* Makes the names created, renamed and removed so far durable. */
int dd_vdir_sync(dd_vdir *d, dd_err *err);
/* Calls fn for every name in d (not "." or ".."), in no particular order;
 * a non-zero return of fn stops the listing and is returned. */
typedef int (*dd_vdir_list_fn)(void *arg, const char *name);
int dd_vdir_list(dd_vdir *d, dd_err *err, dd_vdir_list_fn fn, void *arg);

void dd_vfile_close(dd_vfile *f);   /* NULL is fine */
const char *dd_vfile_name(const dd_vfile *f);
/* Up to len bytes at off; *got the count (0 at the end). */
int dd_vfile_pread(dd_vfile *f, dd_err *err, void *buf, size_t len,
		   uint64_t off, size_t *got);
/* Exactly len bytes at off: DD_ECORRUPT "short read" past the end. */
int dd_vfile_pread_full(dd_vfile *f, dd_err *err, void *buf, size_t len,
			uint64_t off);
int dd_vfile_pwrite_full(dd_vfile *f, dd_err *err, const void *buf,
			 size_t len, uint64_t off);
int dd_vfile_size(dd_vfile *f, dd_err *err, uint64_t *size);
int dd_vfile_truncate(dd_vfile *f, dd_err *err, uint64_t len);
int dd_vfile_sync(dd_vfile *f, dd_err *err);
/* Starts writing [off, off + len) back without waiting (a hint). */
void dd_vfile_writeback(dd_vfile *f, uint64_t off, uint64_t len);
/* Waits for [off, off + len) to be written back, then drops it from the
 * page cache (dd_io_drop_written): an error means written data is lost,
 * and the next sync of f will not say so.  synced: a dd_vfile_sync since
 * the range was written returned 0, so there is nothing to wait for. */
int dd_vfile_drop_written(dd_vfile *f, dd_err *err, uint64_t off,
			  uint64_t len, bool synced);
/* Exclusive, without waiting, for as long as f stays open: DD_EBUSY when
 * another handle holds it. */
int dd_vfile_lock(dd_vfile *f, dd_err *err);
/* Gives back the space of [off, off + len), which then reads as zeros;
 * the size is unchanged.  DD_ENOTSUP where that cannot be done. */
int dd_vfile_punch(dd_vfile *f, dd_err *err, uint64_t off, uint64_t len);
/* Where the data at or after off starts, stepping over the holes the
 * backend knows of (local: lseek SEEK_DATA, for the ranges dd_vfile_punch
 * gave back): 0 with *data >= off (off itself where nothing is known), or
 * 1 when only holes are left to the end of the file. */
int dd_vfile_seek_data(dd_vfile *f, uint64_t off, uint64_t *data);

/* ---- backends ------------------------------------------------------------
 * A backend fills a dd_vdir_ops and makes its directories with
 * dd_vdir_new; its files embed struct dd_vfile as their first member. */

struct dd_vfile {
	dd_vdir *vf_dir;
	char vf_name[64];
};

typedef struct dd_vdir_ops {
	bool local;
	int (*open_file)(dd_vdir *d, dd_err *err, const char *name, int flags,
			 dd_vfile **out);
	int (*stat)(dd_vdir *d, dd_err *err, const char *name, uint64_t *size);
	int (*unlink)(dd_vdir *d, dd_err *err, const char *name);
	int (*rename)(dd_vdir *d, dd_err *err, const char *from,
		      const char *to, bool noreplace);
	int (*sync)(dd_vdir *d, dd_err *err);
	int (*list)(dd_vdir *d, dd_err *err, dd_vdir_list_fn fn, void *arg);
	void (*close)(dd_vdir *d);

	void (*file_close)(dd_vfile *f);
	int (*pread)(dd_vfile *f, dd_err *err, void *buf, size_t len,
		     uint64_t off, size_t *got);
	int (*pwrite_full)(dd_vfile *f, dd_err *err, const void *buf,
			   size_t len, uint64_t off);
	int (*size)(dd_vfile *f, dd_err *err, uint64_t *size);
	int (*truncate)(dd_vfile *f, dd_err *err, uint64_t len);
	int (*file_sync)(dd_vfile *f, dd_err *err);
	void (*writeback)(dd_vfile *f, uint64_t off, uint64_t len);
	int (*drop_written)(dd_vfile *f, dd_err *err, uint64_t off,
			    uint64_t len, bool synced);
	int (*lock)(dd_vfile *f, dd_err *err);
	int (*punch)(dd_vfile *f, dd_err *err, uint64_t off, uint64_t len);
} dd_vdir_ops;

/* A directory of backend ops whose state is priv (freed by ops->close). */
int dd_vdir_new(dd_vdir **out, dd_err *err, const dd_vdir_ops *ops,
		void *priv);
void *dd_vdir_priv(const dd_vdir *d);

#endif
