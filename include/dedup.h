/*
 * dedup.h -- the public API of libdedup.
 *
 * libdedup stores byte images ("snapshots") as fixed-size blocks keyed by
 * SHA-256, keeps every distinct block once in zstd-compressed pack files,
 * and indexes them in a dedup table (DDT) kept in LMDB.
 *
 * Conventions (they hold for every function below):
 *  - Functions return 0 on success or a negative DD_E* code.  Codes are
 *    stable and never renumbered.  dd_strerror() names a code.
 *  - Output parameters come first; a single one is called `out`.  What is
 *    returned through `**out` belongs to the caller and is released with the
 *    matching _close / _free function.  Every _close / _free accepts NULL.
 *    `*out` is set only on success.
 *  - Each handle keeps a one-line message describing its last error, with
 *    context ("DD_ECHECKSUM: block sha256 mismatch (pack 3, off 40960)").
 *    The pointer stays valid until the next call on that handle.
 *  - Options are passed in structs that start with a `version` field;
 *    initialise them with the matching _INIT macro so that fields added in a
 *    later release keep their defaults.
 *  - The library never prints, never calls exit() or abort() on input, and
 *    checks every argument: misuse returns DD_EINVAL.
 *
 * Threads: a dd_store may be shared by several threads.  Readers
 * (dd_reader) are independent handles; use one reader per thread.  A writer
 * (dd_writer) must be used by one thread at a time.  Processes: any number
 * of processes may read one store at any time; one writer at a time (a
 * snapshot writer, dd_snapshot_delete, dd_store_gc) holds the store's writer
 * lock, and a second one gets DD_EBUSY (or waits, see dd_open_opts).
 */
#ifndef DEDUP_H
#define DEDUP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DD_VERSION_MAJOR 0
#define DD_VERSION_MINOR 1
#define DD_VERSION_PATCH 0
#define DD_VERSION_NUMBER \
	(DD_VERSION_MAJOR * 10000 + DD_VERSION_MINOR * 100 + DD_VERSION_PATCH)

#if defined(__GNUC__) && defined(DD_BUILDING_LIBRARY)
#define DD_API __attribute__((visibility("default")))
#else
#define DD_API
#endif

/* Run-time version: compare with DD_VERSION_NUMBER to detect a mismatch
 * between the header a program was built with and the library it runs. */
DD_API unsigned dd_version_number(void);
DD_API const char *dd_version_string(void);

/* ---- errors -------------------------------------------------------------*/

enum dd_error {
	DD_OK = 0,
	DD_EINVAL = -1,     /* invalid argument or API misuse */
	DD_ENOMEM = -2,     /* out of memory */
	DD_EIO = -3,        /* an operating-system I/O error */
	DD_ENOSPC = -4,     /* no space left (disk or LMDB map) */
	DD_ENOENT = -5,     /* no such store or snapshot */
	DD_EEXIST = -6,     /* store or snapshot already exists */
	DD_EBUSY = -7,      /* another writer holds the store */
	DD_ECHECKSUM = -8,  /* stored data does not match its checksum */
	DD_ECORRUPT = -9,   /* a damaged or inconsistent structure */
	DD_EVERSION = -10,  /* written by a newer format version */
	DD_ENOTSUP = -11,   /* a feature this build does not understand */
	DD_ENAME = -12,     /* an invalid snapshot name */
	DD_EPERM = -13,     /* permission denied or read-only */
	DD_ECANCELED = -14, /* stopped by a callback */
	DD_ESTATE = -15,    /* handle used in the wrong state (after commit) */
	DD_EFORMAT = -16    /* input that is not of the expected format */
};

/* A static string naming the code: "DD_ECHECKSUM: checksum mismatch". */
DD_API const char *dd_strerror(int code);

/* ---- stores -------------------------------------------------------------*/

typedef struct dd_store dd_store;

enum dd_compress {
	DD_COMPRESS_NONE = 0,
	DD_COMPRESS_ZSTD = 1
};

#define DD_BLOCK_SIZE_MIN (4u * 1024)
#define DD_BLOCK_SIZE_MAX (1024u * 1024)
#define DD_BLOCK_SIZE_DEFAULT (128u * 1024)
#define DD_NAME_MAX 255

/* Options fixed when a store is created. */
typedef struct dd_create_opts {
	unsigned version;      /* DD_CREATE_OPTS_VERSION */
	uint32_t block_size;   /* power of two in [4 KiB, 1 MiB]; 0 = 128 KiB */
	int verify;            /* compare bytes on a hash match (dedup=verify) */
	int compress;          /* enum dd_compress */
	int compress_level;    /* zstd level 1..19; 0 = 1 */
} dd_create_opts;
#define DD_CREATE_OPTS_VERSION 1
#define DD_CREATE_OPTS_INIT {DD_CREATE_OPTS_VERSION, 0, 0, DD_COMPRESS_ZSTD, 0}

/* Options for one open handle. */
typedef struct dd_open_opts {
	unsigned version;     /* DD_OPEN_OPTS_VERSION */
	int wait_for_lock;    /* writers wait for the lock instead of DD_EBUSY */
	int readonly;         /* refuse every write through this handle */
	unsigned threads;     /* worker threads for hashing/compression; 0 = cores */
} dd_open_opts;
#define DD_OPEN_OPTS_VERSION 1
#define DD_OPEN_OPTS_INIT {DD_OPEN_OPTS_VERSION, 0, 0, 0}

/* Creates a new store in directory `path` (created if missing; it must be
 * empty otherwise) and opens it.  opts may be NULL for the defaults.
 * Errors: DD_EINVAL (bad option), DD_EEXIST (not an empty directory),
 * DD_EIO, DD_EPERM, DD_ENOSPC. */
DD_API int dd_store_create(dd_store **out, const char *path,
			   const dd_create_opts *opts, const dd_open_opts *oopts);

/* Opens an existing store.  oopts may be NULL.
 * Errors: DD_ENOENT (no store there), DD_EVERSION (a newer format),
 * DD_ENOTSUP (unknown feature), DD_ECORRUPT, DD_EIO, DD_EPERM.
 * On failure dd_store_errmsg(NULL) gives the reason (per thread). */
DD_API int dd_store_open(dd_store **out, const char *path,
			 const dd_open_opts *oopts);

/* Closes the store.  Every reader and writer of it must be closed first. */
DD_API void dd_store_close(dd_store *store);

/* The last error of the handle, or of the last failed dd_store_open /
 * dd_store_create in this thread when store is NULL.  Never NULL. */
DD_API const char *dd_store_errmsg(const dd_store *store);

typedef struct dd_store_info {
	uint32_t block_size;
	int verify;
	int compress;
	int compress_level;
	uint32_t format_version;
} dd_store_info;

DD_API int dd_store_info_get(dd_store *store, dd_store_info *out);

/* ---- writing a snapshot -------------------------------------------------*/

typedef struct dd_writer dd_writer;

/* Starts snapshot `name` (1..255 bytes, no '/', no NUL, not "." or "..",
 * no control characters).  Takes the store's writer lock.
 * Errors: DD_ENAME, DD_EEXIST (a committed snapshot has that name),
 * DD_EBUSY, DD_EPERM (read-only handle), DD_EIO. */
DD_API int dd_writer_begin(dd_writer **out, dd_store *store, const char *name);

/* Appends len bytes to the image.  Blocks are cut, hashed, deduplicated and
 * compressed as data arrives; memory stays bounded whatever the image size.
 * After an error the writer can only be aborted. */
DD_API int dd_writer_write(dd_writer *w, const void *buf, size_t len);

/* Makes the snapshot durable and visible.  DD_ESTATE after a failed write. */
DD_API int dd_writer_commit(dd_writer *w);

/* Drops everything written; the snapshot never becomes visible and the
 * space written is released (gc reclaims pack bytes). */
DD_API void dd_writer_abort(dd_writer *w);

/* Releases the writer (aborting it if neither committed nor aborted). */
DD_API void dd_writer_free(dd_writer *w);

DD_API const char *dd_writer_errmsg(const dd_writer *w);

/* ---- reading a snapshot -------------------------------------------------*/

typedef struct dd_reader dd_reader;

/* Opens committed snapshot `name` for random-access reading.  The reader
 * sees the snapshot as committed even if it is deleted meanwhile, until gc
 * reclaims its blocks.  Errors: DD_ENAME, DD_ENOENT, DD_EIO. */
DD_API int dd_reader_open(dd_reader **out, dd_store *store, const char *name);

/* The snapshot's size in bytes. */
DD_API uint64_t dd_reader_size(const dd_reader *r);

/* Reads up to len bytes at offset off into buf; *nread gets the count (less
 * than len only at the end of the image).  Every block is checked against
 * its SHA-256: DD_ECHECKSUM rather than wrong bytes. */
DD_API int dd_reader_pread(dd_reader *r, void *buf, size_t len, uint64_t off,
			   size_t *nread);

DD_API void dd_reader_close(dd_reader *r);
DD_API const char *dd_reader_errmsg(const dd_reader *r);

/* ---- snapshots ----------------------------------------------------------*/

typedef struct dd_snapshot_info {
	char name[DD_NAME_MAX + 1];
	uint64_t size;         /* logical bytes */
	uint64_t blocks;       /* number of blocks, holes included */
	uint64_t zero_blocks;  /* blocks that are holes */
	int64_t ctime;         /* commit time, seconds since the epoch */
	uint8_t digest[32];    /* content digest, format/store.md §5 */
} dd_snapshot_info;

/* Lists committed snapshots in name order.  *out is an array of *count
 * entries released with dd_snapshot_list_free (NULL when *count is 0). */
DD_API int dd_snapshot_list(dd_store *store, dd_snapshot_info **out,
			    size_t *count);
DD_API void dd_snapshot_list_free(dd_snapshot_info *list);

DD_API int dd_snapshot_stat(dd_store *store, const char *name,
			    dd_snapshot_info *out);

/* Deletes a snapshot and drops its block references (takes the writer
 * lock).  Space comes back with dd_store_gc.  DD_ENOENT if absent. */
DD_API int dd_snapshot_delete(dd_store *store, const char *name);

/* ---- statistics ---------------------------------------------------------*/

#define DD_HIST_BUCKETS 32 /* bucket i: refcounts in [2^i, 2^(i+1)) */

typedef struct dd_hist_row {
	uint64_t blocks;       /* unique blocks in the bucket */
	uint64_t lsize;        /* their logical bytes */
	uint64_t psize;        /* their stored bytes */
	uint64_t ref_blocks;   /* references to them */
	uint64_t ref_lsize;
	uint64_t ref_psize;
} dd_hist_row;

typedef struct dd_stat {
	unsigned version;          /* DD_STAT_VERSION: set by the caller */
	uint64_t snapshots;
	uint64_t logical_bytes;    /* sum of snapshot sizes, holes included */
	uint64_t zero_blocks;      /* hole blocks across snapshots */
	uint64_t referenced_blocks;/* non-zero block references */
	uint64_t referenced_bytes; /* their logical bytes */
	uint64_t unique_blocks;    /* DDT entries with refcount > 0 */
	uint64_t unique_bytes;     /* their logical bytes */
	uint64_t stored_bytes;     /* their stored (compressed) payload bytes */
	uint64_t unreferenced_blocks; /* DDT entries awaiting gc */
	uint64_t pack_files;
	uint64_t pack_bytes;       /* bytes of all pack files on disk */
	uint64_t ddt_entries;
	uint64_t ddt_bytes;        /* LMDB pages used by the DDT */
	uint64_t meta_bytes;       /* LMDB pages used by snapshots and maps */
	uint64_t lmdb_file_bytes;  /* size of the LMDB data file */
	double dedup_ratio;        /* referenced_bytes / unique_bytes */
	double compress_ratio;     /* unique_bytes / stored_bytes */
	dd_hist_row hist[DD_HIST_BUCKETS];
} dd_stat;
#define DD_STAT_VERSION 1

DD_API int dd_store_stat(dd_store *store, dd_stat *out);

/* ---- gc and scrub -------------------------------------------------------*/

typedef struct dd_gc_opts {
	unsigned version;      /* DD_GC_OPTS_VERSION */
	double rewrite_below;  /* rewrite packs whose live fraction is below
				  this (0..1); 0 selects the default, 0.8 */
} dd_gc_opts;
#define DD_GC_OPTS_VERSION 1
#define DD_GC_OPTS_INIT {DD_GC_OPTS_VERSION, 0.0}

typedef struct dd_gc_result {
	uint64_t ddt_entries_removed;
	uint64_t packs_rewritten;
	uint64_t packs_deleted;
	uint64_t blocks_moved;
	uint64_t bytes_reclaimed;  /* pack bytes freed on disk */
} dd_gc_result;

/* Removes unreferenced blocks, rewrites sparse packs, compacts the DDT.
 * Takes the writer lock.  out may be NULL. */
DD_API int dd_store_gc(dd_store *store, const dd_gc_opts *opts,
		       dd_gc_result *out);

/* Called by dd_store_scrub once per place that uses a bad block. */
typedef struct dd_scrub_bad {
	uint8_t hash[32];
	uint32_t pack;
	uint64_t pack_offset;
	int error;                  /* DD_ECHECKSUM, DD_ECORRUPT, DD_EIO */
	const char *snapshot;       /* NULL when no snapshot uses the block */
	uint64_t offset;            /* byte offset in that snapshot */
} dd_scrub_bad;
typedef int (*dd_scrub_cb)(const dd_scrub_bad *bad, void *ctx);

typedef struct dd_scrub_result {
	uint64_t blocks_checked;
	uint64_t bytes_checked;
	uint64_t bad_blocks;
} dd_scrub_result;

/* Reads and verifies every stored block.  Returns 0 when all are good,
 * DD_ECHECKSUM when any is bad (after reporting each through cb, which may
 * be NULL; a non-zero return from cb stops with DD_ECANCELED). */
DD_API int dd_store_scrub(dd_store *store, dd_scrub_cb cb, void *ctx,
			  dd_scrub_result *out);

/* ---- helpers for tools --------------------------------------------------*/

/* Checks a snapshot name: 0 or DD_ENAME. */
DD_API int dd_name_check(const char *name);

#ifdef __cplusplus
}
#endif
#endif /* DEDUP_H */
