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
 * Threads: a dd_store may be shared by several threads, and so may every
 * operation on it: readers, writers, dd_snapshot_delete and dd_store_gc
 * run at the same time, from threads of one process and from several
 * processes.  Each dd_reader and each dd_writer is used by one thread at a
 * time (one per thread); dd_writer_cancel is the exception.  Writers never
 * wait for one another to finish: each appends to its own pack and updates
 * the catalog in short transactions (LMDB takes them one at a time).  A
 * block two writers store at once is kept once; the spare copy is garbage
 * that gc reclaims.  What needs the store to itself -- dd_store_repair, a
 * second dd_store_gc -- gets DD_EBUSY naming the holder, or waits (see
 * dd_open_opts).
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
	DD_EFORMAT = -16,   /* input that is not of the expected format */
	DD_EBLOCKSIZE = -17 /* a stream's blocks are not cut as the store's
			       (block size or chunker) */
};

/* A static string naming the code: "DD_ECHECKSUM: checksum mismatch". */
DD_API const char *dd_strerror(int code);

/* Progress: bytes done and total (0 when unknown).  A non-zero return
 * cancels the operation with DD_ECANCELED.  Called on the thread that
 * called the operation. */
typedef int (*dd_progress_fn)(void *ctx, uint64_t done, uint64_t total);

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

/*
 * How images are cut into blocks (format/chunker.md).  A store cuts with
 * one chunker, chosen when it is created; streams and scans name theirs.
 *  - DD_CHUNKER_FIXED: blocks of block_size bytes from the image's start
 *    (the last one short).  Right for disk images and block devices, whose
 *    changes stay in place.
 *  - DD_CHUNKER_FASTCDC: content-defined blocks (FastCDC, normalized
 *    chunking): block_size is the average, a power of two from
 *    DD_FASTCDC_AVG_MIN to DD_FASTCDC_AVG_MAX, and blocks are avg/4 to
 *    avg*4 bytes.  Where a block ends depends on its own bytes, so an
 *    insertion or deletion moves only the blocks around it: right for
 *    backup streams (tar, database dumps, mailboxes) whose bytes shift.
 */
enum dd_chunker {
	DD_CHUNKER_FIXED = 0,
	DD_CHUNKER_FASTCDC = 1
};
#define DD_FASTCDC_AVG_MIN (4u * 1024)
#define DD_FASTCDC_AVG_MAX (256u * 1024)

/* Options fixed when a store is created.  Version 1 callers pass a
 * struct that ends at `compress_level`: their stores cut fixed blocks. */
typedef struct dd_create_opts {
	unsigned version;      /* DD_CREATE_OPTS_VERSION */
	uint32_t block_size;   /* fixed: power of two in [4 KiB, 1 MiB];
				  fastcdc: the average, a power of two in
				  [4 KiB, 256 KiB]; 0 = 128 KiB */
	int verify;            /* compare bytes on a hash match (dedup=verify) */
	int compress;          /* enum dd_compress */
	int compress_level;    /* zstd level 1..19; 0 = 1 */
	/* ---- version 2 ---- */
	int chunker;           /* enum dd_chunker: how images are cut */
} dd_create_opts;
#define DD_CREATE_OPTS_VERSION 2
#define DD_CREATE_OPTS_INIT {DD_CREATE_OPTS_VERSION, 0, 0, DD_COMPRESS_ZSTD, \
			     0, DD_CHUNKER_FIXED}

/* Options for one open handle.  Version 1 callers pass a struct that ends
 * at `threads`; the fields after it take their defaults for them. */
typedef struct dd_open_opts {
	unsigned version;     /* DD_OPEN_OPTS_VERSION */
	int wait_for_lock;    /* wait instead of DD_EBUSY while repair has the
				 store, or (gc) another gc runs */
	int readonly;         /* refuse every write through this handle */
	unsigned threads;     /* worker threads for hashing/compression; 0 = cores */
	/* ---- version 2: block caches (see "block caches" below) ---- */
	int no_cache;         /* open without the store's L2 devices */
	uint64_t l1_size;     /* bytes of RAM for L1; 0 = the store's setting
				 (default DD_CACHE_L1_DEFAULT); DD_CACHE_OFF =
				 no L1 */
	uint64_t l2_write_max;/* L2 feed rate, bytes per second; 0 = the
				 store's setting (default
				 DD_CACHE_L2_WRITE_MAX_DEFAULT) */
	int l2_feed_sequential; /* 0 = the store's setting (default: no);
				   1 = feed blocks of long sequential reads to
				   L2 too; -1 = do not */
	/* ---- version 3 ---- */
	unsigned lock_timeout_ms; /* with wait_for_lock: DD_EBUSY after this
				     many milliseconds (0 = wait for ever) */
	/* ---- version 4 ---- */
	int defer_catalog_check; /* 1: skip the whole-file check of the
				    catalog at open (format/store.md §10), as
				    on a store too big for it, so that a
				    damaged catalog opens for
				    dd_store_scrub_ext to name every damaged
				    page and what it holds; each call still
				    checks the pages it reads */
} dd_open_opts;
#define DD_OPEN_OPTS_VERSION 4
#define DD_OPEN_OPTS_INIT {DD_OPEN_OPTS_VERSION, 0, 0, 0, 0, 0, 0, 0, 0, 0}

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

/* How the store cuts images: *out gets an enum dd_chunker (block_size of
 * dd_store_info is then the fixed size or the FastCDC average).
 * Errors: DD_EINVAL (NULL). */
DD_API int dd_store_chunker_get(dd_store *store, int *out);

/* ---- writing a snapshot -------------------------------------------------*/

typedef struct dd_writer dd_writer;

/* Starts snapshot `name` (1..255 bytes, no '/', no NUL, not "." or "..",
 * no control characters).  Any number of writers may be open at once, on
 * this handle and others (see the top of this file).  Errors: DD_ENAME,
 * DD_EEXIST (a snapshot of that name is committed, or being written: the
 * message names the writer), DD_EBUSY (repair has the store: see
 * wait_for_lock), DD_EPERM (read-only handle), DD_EIO. */
DD_API int dd_writer_begin(dd_writer **out, dd_store *store, const char *name);

typedef struct dd_writer_opts {
	unsigned version;          /* DD_WRITER_OPTS_VERSION */
	dd_progress_fn progress;   /* after each batch of blocks is stored
				      (4 MiB, or 16 blocks if more): the
				      image's bytes stored so far, holes
				      included, and progress_total.  Runs
				      on the writing thread, inside the
				      call that moved the batch on
				      (dd_writer_write, _produce,
				      _write_file, _commit); the last call
				      of dd_writer_commit has done == the
				      image's size.  A non-zero return
				      cancels: that call fails with
				      DD_ECANCELED.  May be NULL */
	void *progress_ctx;
	uint64_t progress_total;   /* progress's total (0 = unknown) */
} dd_writer_opts;
#define DD_WRITER_OPTS_VERSION 1
#define DD_WRITER_OPTS_INIT {DD_WRITER_OPTS_VERSION, NULL, NULL, 0}

/* dd_writer_begin with options (opts may be NULL).  Errors: those of
 * dd_writer_begin, DD_EINVAL for an unknown version. */
DD_API int dd_writer_begin_opts(dd_writer **out, dd_store *store,
				const char *name, const dd_writer_opts *opts);

/* Stops a writer, from any thread, e.g. one that watches for a deadline
 * while another writes.  It takes effect within one batch (4 MiB) of the
 * writer's bytes: the next call on the writing thread that moves a batch
 * on fails with DD_ECANCELED, and the writer can then only be aborted or
 * freed (nothing of it becomes visible).  A cancel that comes after
 * dd_writer_commit has stored the last batch does not stop the commit.  w
 * must not be freed during the call. */
DD_API void dd_writer_cancel(dd_writer *w);

/* Appends len bytes to the image.  Blocks are cut, hashed, deduplicated and
 * compressed as data arrives; memory stays bounded whatever the image size.
 * After an error the writer can only be aborted. */
DD_API int dd_writer_write(dd_writer *w, const void *buf, size_t len);

/* Zero-copy writing: *buf and *len get space inside the writer's own
 * buffer (at least one byte); fill some of it, e.g. with read(2), then
 * pass the count to dd_writer_produce.  The space stays valid until the
 * next call on the writer.  Saves the copy dd_writer_write makes. */
DD_API int dd_writer_buffer(dd_writer *w, void **buf, size_t *len);
DD_API int dd_writer_produce(dd_writer *w, size_t n);

/* Appends len bytes of the file or block device fd, from offset off, to
 * the image.  The writer's workers read them (pread) where they hash them,
 * so the copy out of the page cache is spread over the cores: the fastest
 * way to store a regular file.  The call reads as it goes, a batch (4 MiB)
 * at a time, reporting progress and checking for a cancel after each; when
 * it returns, all but the last two or three batches are read and stored.
 * Those are read as the pipeline reaches them, by the next call or
 * dd_writer_commit, through the writer's own duplicate of fd: fd may be
 * closed when the call returns, but the range should not change until
 * dd_writer_commit, and a read error or a file that shrank fails that call
 * or a later one (DD_EIO).  fd's offset is not used or moved.  Calls may
 * mix with dd_writer_write. */
DD_API int dd_writer_write_file(dd_writer *w, int fd, uint64_t off,
				uint64_t len);

/* Makes the snapshot durable and visible.  DD_ESTATE after a failed write. */
DD_API int dd_writer_commit(dd_writer *w);

/* Drops everything written; the snapshot never becomes visible and the
 * space written is released (gc reclaims pack bytes). */
DD_API void dd_writer_abort(dd_writer *w);

/* Releases the writer (aborting it if neither committed nor aborted). */
DD_API void dd_writer_free(dd_writer *w);

DD_API const char *dd_writer_errmsg(const dd_writer *w);

/* What a writer has taken and stored so far: the blocks its pipeline has
 * processed, so final only after dd_writer_commit (read it before
 * dd_writer_free).  new_* count the blocks the store held no copy of --
 * what the snapshot added to the packs; a block that repeats within the
 * image is stored, and counted, once. */
typedef struct dd_writer_stats {
	unsigned version;          /* DD_WRITER_STATS_VERSION: set by the caller */
	uint64_t bytes;            /* logical bytes, holes included */
	uint64_t blocks;           /* blocks cut, holes included */
	uint64_t zero_blocks;      /* holes: never stored */
	uint64_t new_blocks;       /* blocks stored */
	uint64_t new_lsize;        /* their logical bytes */
	uint64_t new_bytes;        /* their bytes in the packs: compressed
				      payload + record header
				      (format/pack.md) */
	/* version 2: */
	uint64_t map_blocks;       /* blocks a re-put found in the block map
				      of the snapshot it repeats, at the same
				      index, without a dedup-table lookup
				      (fixed blocks read from a file, store
				      without verify) */
} dd_writer_stats;
#define DD_WRITER_STATS_VERSION 2

/* Errors: DD_EINVAL (NULL, or a version this build does not know). */
DD_API int dd_writer_stats_get(const dd_writer *w, dd_writer_stats *out);

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
 * its SHA-256: DD_ECHECKSUM rather than wrong bytes.  Once reads go on
 * where the last ended for 4 MiB, and the caller spends time of its own
 * between them (a quarter of a read's), each read starts decoding the
 * next range of its own length (at most 8 MiB, 512 blocks) on threads of
 * the reader's own, for the read that asks for it: up to 8 MiB more
 * memory, and failures still reported by the read that covers the
 * block. */
DD_API int dd_reader_pread(dd_reader *r, void *buf, size_t len, uint64_t off,
			   size_t *nread);

/* Salvage: called by dd_reader_pread_salvage for each block of the range
 * whose stored bytes cannot be read back -- damaged (DD_ECHECKSUM,
 * DD_ECORRUPT), lost, or unreadable (DD_EIO) --, in image order: `off`
 * and `len` are the part of the range it covers, `msg` the one-line
 * message (valid during the call).  A non-zero return stops the read
 * with DD_ECANCELED. */
typedef int (*dd_salvage_cb)(void *ctx, uint64_t off, uint64_t len,
			     int error, const char *msg);

/* dd_reader_pread, except that a block whose bytes cannot be read back
 * reads as zeros and is reported through cb (not NULL); everything else
 * is as checked as ever.  Damage to the catalog -- a block map that does
 * not match the snapshot's digest, a DDT entry missing -- still fails the
 * read.  Errors: those of dd_reader_pread, DD_EINVAL for a NULL cb,
 * DD_ECANCELED from cb. */
DD_API int dd_reader_pread_salvage(dd_reader *r, void *buf, size_t len,
				   uint64_t off, size_t *nread,
				   dd_salvage_cb cb, void *ctx);

/* As lseek's SEEK_DATA: *data_off gets the offset of the first byte at or
 * after off in a block that holds data, or the image's size when only
 * holes follow (off past the end: the size).  One seek in the block map,
 * however long the holes: a restore of a sparse image skips them (dedup
 * get does) instead of reading zeros.  Like SEEK_DATA it may report a
 * hole as data (a hole inside a range the reader is already decoding
 * ahead), never data as a hole.  The holes skipped count as read for the
 * content-digest check of reads that go forward from the image's start,
 * which the block map proves them to be.  Errors: DD_EINVAL, DD_ECORRUPT
 * (a map entry past the snapshot's end, or a map that does not match the
 * digest when the skip reaches the end), DD_EIO. */
DD_API int dd_reader_next_data(dd_reader *r, uint64_t off,
			       uint64_t *data_off);

DD_API void dd_reader_close(dd_reader *r);
DD_API const char *dd_reader_errmsg(const dd_reader *r);

/* ---- snapshots ----------------------------------------------------------*/

typedef struct dd_snapshot_info {
	char name[DD_NAME_MAX + 1];
	uint64_t size;         /* logical bytes */
	uint64_t blocks;       /* number of blocks, holes included */
	uint64_t zero_blocks;  /* blocks that are holes */
	int64_t ctime;         /* commit time, seconds since the epoch */
	uint8_t digest[32];    /* content digest, format/store.md §6 */
} dd_snapshot_info;

/* Lists committed snapshots in name order.  *out is an array of *count
 * entries released with dd_snapshot_list_free (NULL when *count is 0). */
DD_API int dd_snapshot_list(dd_store *store, dd_snapshot_info **out,
			    size_t *count);
DD_API void dd_snapshot_list_free(dd_snapshot_info *list);

DD_API int dd_snapshot_stat(dd_store *store, const char *name,
			    dd_snapshot_info *out);

/* Deletes a snapshot and drops its block references, beside running
 * writers and gc.  Space comes back with dd_store_gc.  DD_ENOENT if
 * absent. */
DD_API int dd_snapshot_delete(dd_store *store, const char *name);

/* ---- snapshot lifecycle: space, differences, retention -------------------*/

/*
 * What one snapshot holds alone: the blocks whose every reference comes
 * from it (a block it references k times, and nothing else does, is its
 * own).  Deleting the snapshot drops them to reference count 0, and gc then
 * reclaims their bytes -- all of them when their packs are deleted or
 * rewritten; gc leaves a pack that stays mostly live (dd_gc_opts
 * rewrite_below) as it is until more of it is dead.  Blocks no pack holds
 * (lost, format/ddt.md §3) have no bytes and are not counted.
 *
 * Cost: from the catalog only, no pack data is read: one sweep of the
 * snapshot's block map, one DDT lookup per block (about 2 us each with
 * the catalog in the page cache; tests/bench/bench_lifecycle.sh), and a
 * table of the blocks other snapshots may share -- 64 MiB of RAM at most
 * (about 700,000 blocks), spilled to $TMPDIR beyond.  So one call takes
 * about as long as the snapshot has blocks; for every snapshot of a store,
 * as long as the store has block references (dd_stat referenced_blocks).
 * The figure is as of one read transaction.
 */
typedef struct dd_snapshot_usage {
	unsigned version;          /* DD_SNAPSHOT_USAGE_VERSION: set by caller */
	uint64_t referenced_blocks;/* its blocks that are not holes */
	uint64_t unique_blocks;    /* distinct blocks only it references */
	uint64_t unique_lsize;     /* their logical bytes */
	uint64_t unique_bytes;     /* their bytes in the packs: compressed
				      payload + record header -- what
				      deleting it and gc would free */
} dd_snapshot_usage;
#define DD_SNAPSHOT_USAGE_VERSION 1

/* Errors: DD_EINVAL (NULL, unknown version), DD_ENAME, DD_ENOENT,
 * DD_ECORRUPT (a block map naming a block the DDT lacks, or more
 * references than the DDT counts: damaged metadata), DD_ENOMEM, DD_EIO
 * (the spill file). */
DD_API int dd_snapshot_usage_get(dd_store *store, const char *name,
				 dd_snapshot_usage *out);

/*
 * The byte ranges in which two snapshots of a store differ, from their
 * block maps alone (no data is read): a block differs when its hash
 * differs, when one side is a hole and the other is not, and everywhere
 * past the end of the shorter snapshot.  Two holes are the same.  Ranges
 * come in increasing offset order, adjacent changed blocks coalesced into
 * one range, and cover [0, max(size_from, size_to)); their bytes in `to`
 * are what an incremental copy of `from` needs.
 *
 * An iterator: dd_diff_open, dd_diff_next until it gives a range of
 * length 0, dd_diff_close.  It holds one read transaction: both snapshots
 * are seen as of the open, even if deleted meanwhile.  Memory is constant;
 * time is one step per block-map entry of both snapshots (8192 entries
 * per GiB at 128 KiB blocks: milliseconds).  While it walks, it feeds
 * each map into its snapshot's content digest (format/store.md §6): the
 * call that reaches the end fails with DD_ECORRUPT when a map does not
 * match its snapshot (damaged metadata) -- the ranges returned before it
 * are then not to be trusted.  One thread at a time per iterator.
 */
typedef struct dd_diff dd_diff;

typedef struct dd_diff_range {
	unsigned version;          /* DD_DIFF_RANGE_VERSION: set by the caller */
	uint64_t offset;           /* bytes from the image's start */
	uint64_t length;           /* 0: no more ranges */
} dd_diff_range;
#define DD_DIFF_RANGE_VERSION 1

/* Errors: DD_EINVAL, DD_ENAME, DD_ENOENT (either snapshot), DD_ECORRUPT,
 * DD_ENOMEM, DD_EIO. */
DD_API int dd_diff_open(dd_diff **out, dd_store *store, const char *from,
			const char *to);
/* The next range into *out (length 0 at the end, and on every call after
 * it).  Errors: DD_EINVAL (NULL, unknown version), DD_ECORRUPT, DD_EIO;
 * after an error the iterator only returns it again. */
DD_API int dd_diff_next(dd_diff *d, dd_diff_range *out);
DD_API void dd_diff_close(dd_diff *d);
DD_API const char *dd_diff_errmsg(const dd_diff *d);

/*
 * Retention rules, with the semantics of borg prune.  Each rule keeps the
 * newest snapshot of each of the last N periods (hour, day, ISO week,
 * month, year) that have snapshots; the rules apply in the order last,
 * hourly, daily, weekly, monthly, yearly, and a snapshot an earlier rule
 * kept does not count for a later one.  When a rule finds fewer periods
 * than it may keep, it also keeps the oldest snapshot (borg's "[oldest]",
 * in borg 1.2).  keep_last counts snapshots: borg's --keep-last is its
 * per-second rule, and borg's microsecond times never share a second,
 * where snapshot times (whole seconds) may.  Periods are in local time
 * (the TZ environment variable), as in borg and restic: a "daily" backup
 * is one per calendar day where the operator is; utc = 1 takes UTC
 * instead, the same wherever the store is read.
 */
enum dd_prune_rule {
	DD_PRUNE_NONE = 0,         /* kept by no rule: to be deleted */
	DD_PRUNE_LAST = 1,
	DD_PRUNE_HOURLY = 2,
	DD_PRUNE_DAILY = 3,
	DD_PRUNE_WEEKLY = 4,
	DD_PRUNE_MONTHLY = 5,
	DD_PRUNE_YEARLY = 6
};
#define DD_PRUNE_ALL (-1)          /* a keep count: every period */

typedef struct dd_prune_opts {
	unsigned version;          /* DD_PRUNE_OPTS_VERSION */
	int keep_last;             /* each: 0 = rule off, N > 0, or */
	int keep_hourly;           /* DD_PRUNE_ALL */
	int keep_daily;
	int keep_weekly;
	int keep_monthly;
	int keep_yearly;
	int utc;                   /* periods in UTC instead of local time */
	const char *prefix;        /* dd_prune: only snapshots whose name
				      starts with it; NULL = all */
	int dry_run;               /* dd_prune: delete nothing */
} dd_prune_opts;
#define DD_PRUNE_OPTS_VERSION 1
#define DD_PRUNE_OPTS_INIT {DD_PRUNE_OPTS_VERSION, 0, 0, 0, 0, 0, 0, 0, \
			    NULL, 0}

/* Why a snapshot is kept. */
typedef struct dd_prune_mark {
	int rule;                  /* enum dd_prune_rule; NONE: not kept */
	unsigned rank;             /* 1.. within its rule (borg's "#n") */
	int oldest;                /* kept as the rule's oldest (above) */
} dd_prune_mark;

/* The selection alone, pure: marks[i] for times[i] (seconds since the
 * epoch), in any order; of equal times, the later in the array counts as
 * the newer.  Needs no store and changes nothing.  At least one rule must
 * be on (a selection that keeps nothing is refused: DD_EINVAL), as must
 * every count be >= DD_PRUNE_ALL.  Errors: DD_EINVAL, DD_ENOMEM; the
 * reason in dd_last_errmsg(). */
DD_API int dd_prune_select(const dd_prune_opts *opts, const int64_t *times,
			   size_t n, dd_prune_mark *marks);

/* One snapshot as dd_prune saw it. */
typedef struct dd_prune_entry {
	char name[DD_NAME_MAX + 1];
	int64_t ctime;
	dd_prune_mark mark;        /* rule NONE: deleted (dry run: would be) */
} dd_prune_entry;

/* Applies the rules to the store's snapshots (those whose name starts with
 * opts->prefix; of equal times, the one created later is the newer) and
 * deletes those no rule keeps, oldest first, with one
 * dd_snapshot_delete each (gc reclaims the space later).  *out gets every snapshot considered, newest first,
 * *count entries, released with dd_prune_free (NULL when *count is 0).
 * A snapshot deleted meanwhile by someone else counts as deleted.
 * Errors: those of dd_prune_select and dd_snapshot_delete; on an error
 * the deletions before it stay done, and the message says how many. */
DD_API int dd_prune(dd_store *store, const dd_prune_opts *opts,
		    dd_prune_entry **out, size_t *count);
DD_API void dd_prune_free(dd_prune_entry *list);

/* ---- statistics ---------------------------------------------------------*/

#define DD_HIST_BUCKETS 32 /* bucket i: refcounts in [2^i, 2^(i+1)) */

typedef struct dd_hist_row {
	uint64_t blocks;       /* unique blocks in the bucket */
	uint64_t lsize;        /* their logical bytes */
	uint64_t psize;        /* their stored bytes */
	uint64_t ref_blocks;   /* references to them */
	uint64_t ref_lsize;    /* logical bytes of those references */
	uint64_t ref_psize;    /* stored bytes they would take, each
				  reference stored apart */
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
	/* ---- version 2: a version 1 caller's struct ends above ---- */
	uint64_t ddt_runs;         /* sorted runs of new entries a flush
				      appended, not yet folded into the
				      table (format/ddt.md §5) */
	uint64_t filter_segments;  /* the DDT key filter's segments
				      (format/kfilter.md); 0: none in force,
				      the next writer builds one */
	uint64_t filter_bytes;     /* its file's size */
	double filter_bits_per_entry; /* its bits per DDT entry (a segment
				      is full under 24, rebuilt under 12) */
} dd_stat;
#define DD_STAT_VERSION 2

DD_API int dd_store_stat(dd_store *store, dd_stat *out);

/* ---- gc and scrub -------------------------------------------------------*/

/* Version 1 callers pass a struct that ends at `rewrite_below`. */
typedef struct dd_gc_opts {
	unsigned version;      /* DD_GC_OPTS_VERSION */
	double rewrite_below;  /* rewrite packs whose live fraction is below
				  this (0..1); 0 selects the default, 0.8 */
	/* ---- version 2 ---- */
	dd_progress_fn progress; /* bytes of live blocks copied out of the
				    packs being rewritten, of all of them
				    (the slow part); the last call has done
				    == total.  A non-zero return stops gc
				    with DD_ECANCELED, the store unchanged.
				    May be NULL */
	void *progress_ctx;
} dd_gc_opts;
#define DD_GC_OPTS_VERSION 2
#define DD_GC_OPTS_INIT {DD_GC_OPTS_VERSION, 0.0, NULL, NULL}

typedef struct dd_gc_result {
	uint64_t ddt_entries_removed;
	uint64_t packs_rewritten;
	uint64_t packs_deleted;
	uint64_t blocks_moved;
	uint64_t bytes_reclaimed;  /* pack bytes freed on disk */
} dd_gc_result;

/* Removes unreferenced blocks, rewrites sparse packs, compacts the DDT
 * (when no writer runs).  Runs beside writers and never frees a block one
 * of them may still reference (format/store.md §7.1).  One gc at a time:
 * DD_EBUSY naming the one that runs (or waits: wait_for_lock).  out may
 * be NULL. */
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

/* Called by dd_store_scrub_ext (dd_scrub_opts v2) once per snapshot whose
 * catalog records are damaged -- its block map unlike the DDT, its
 * content digest or its manifest, or on a damaged LMDB page --: every
 * block of it may not read back.  msg is the one-line message (valid
 * during the call). */
typedef int (*dd_scrub_snap_cb)(const char *snapshot, int error,
				const char *msg, void *ctx);

/* Called by dd_store_scrub_ext (dd_scrub_opts v3, with damaged_snapshot
 * set) for each damaged page of the catalog that scrub goes on past:
 * once for the page (snapshot NULL), with a message that says what it
 * held, what that means and the way out (dedup repair rebuilds the
 * catalog from the packs and manifests); then once for each run of
 * bytes of a snapshot that the page leaves unreadable -- block-map
 * entries on it, blocks whose DDT entries are on it, the snapshot whose
 * record is on it (message NULL).  Strings are valid during the call. */
typedef struct dd_scrub_page {
	const char *table;       /* the LMDB table: "ddt0", "ddt1", "snap",
				    "bmap", "packs", "pend" or "meta" */
	uint64_t page;           /* its number in STORE/db/data.mdb */
	const char *message;     /* the page's report; NULL for a run */
	const char *snapshot;    /* a run's snapshot; NULL for the page */
	uint64_t offset;         /* a run: bytes [offset, offset + length) */
	uint64_t length;
} dd_scrub_page;
typedef int (*dd_scrub_page_cb)(const dd_scrub_page *page, void *ctx);

/* Version 1 callers pass a struct that ends at `progress_ctx`, version
 * 2 callers one that ends at `damaged_snapshot_ctx`. */
typedef struct dd_scrub_opts {
	unsigned version;          /* DD_SCRUB_OPTS_VERSION */
	dd_scrub_cb bad;           /* as dd_store_scrub's cb; may be NULL */
	void *bad_ctx;
	dd_progress_fn progress;   /* pack bytes read (record headers and
				      payloads), of the packs' committed
				      bytes; a last call with done == total
				      once every block is read (the catalog
				      checks after it read no pack).  May
				      be NULL */
	void *progress_ctx;
	/* ---- version 2 ---- */
	dd_scrub_snap_cb damaged_snapshot; /* may be NULL; with it, scrub
				      goes on past a damaged snapshot to
				      check the others, and fails with
				      DD_ECORRUPT at the end */
	void *damaged_snapshot_ctx;
	/* ---- version 3 ---- */
	dd_scrub_page_cb damaged_page; /* may be NULL; with
				      damaged_snapshot, each damaged
				      catalog page and what it affects */
	void *damaged_page_ctx;
} dd_scrub_opts;
#define DD_SCRUB_OPTS_VERSION 3
#define DD_SCRUB_OPTS_INIT {DD_SCRUB_OPTS_VERSION, NULL, NULL, NULL, NULL, \
			    NULL, NULL, NULL, NULL}

/* dd_store_scrub with options (opts may be NULL).  Errors: those of
 * dd_store_scrub, DD_EINVAL for an unknown version, DD_ECANCELED from
 * either callback. */
DD_API int dd_store_scrub_ext(dd_store *store, const dd_scrub_opts *opts,
			      dd_scrub_result *out);

/* ---- helpers for tools --------------------------------------------------*/

/* Checks a snapshot name: 0 or DD_ENAME. */
DD_API int dd_name_check(const char *name);

/* ---- replication streams (format/stream.md) ------------------------------*/

/* I/O callbacks: return 0 or a negative DD_E* code (passed up unchanged).
 * A read callback sets *got to the bytes read; 0 means end of stream. */
typedef int (*dd_write_fn)(void *ctx, const void *buf, size_t len);
typedef int (*dd_read_fn)(void *ctx, void *buf, size_t len, size_t *got);

/* Ready-made callbacks over file descriptors (ctx points to an int fd).
 * dd_fd_write never raises SIGPIPE in the host: SIGPIPE is blocked in the
 * calling thread while it writes, so a reader that closed its end (a pipe,
 * a socket) fails the write with DD_EIO ("Broken pipe") and the process
 * lives on.  A receiver that fails must close (or shut down) its end, so
 * that its sender fails too instead of blocking once the pipe is full. */
DD_API int dd_fd_write(void *ctx, const void *buf, size_t len);
DD_API int dd_fd_read(void *ctx, void *buf, size_t len, size_t *got);

/* Version 1 callers pass a struct that ends at `tmpdir`. */
typedef struct dd_send_opts {
	unsigned version;          /* DD_SEND_OPTS_VERSION */
	const char *base;          /* incremental: base snapshot name, or NULL */
	const char *resume_token;  /* from an interrupted resumable receive */
	dd_progress_fn progress;
	void *progress_ctx;
	uint64_t mem_limit;        /* bytes of RAM for the sent-block table
				      before it spills to disk; 0 = 16 MiB */
	const char *tmpdir;        /* where it spills; NULL = $TMPDIR or /tmp */
	/* ---- version 2 ---- */
	int chunker;               /* dd_send_fd: how to cut the file (enum
				      dd_chunker; block_size is then the
				      FastCDC average).  dd_send sends a
				      snapshot as its store cut it */
	/* ---- version 3 ---- */
	int digest_version;        /* content digest of fixed blocks
				      (format/store.md §6): 0 = version 2
				      for dd_send_fd, the snapshot's own for
				      dd_send; 1 = version 1, for a receiver
				      of an older build (at most 2^32
				      blocks; dd_send computes it from the
				      block map); 2 = version 2 */
} dd_send_opts;
#define DD_SEND_OPTS_VERSION 3
#define DD_SEND_OPTS_INIT {DD_SEND_OPTS_VERSION, NULL, NULL, NULL, NULL, 0, \
			   NULL, DD_CHUNKER_FIXED, 0}

/* What a stream holds: filled by receive and by dd_stream_check. */
typedef struct dd_stream_info {
	uint32_t format_version;
	uint32_t block_size;
	char name[DD_NAME_MAX + 1];
	char base[DD_NAME_MAX + 1];   /* empty for a full stream */
	uint64_t size;                /* logical bytes of the image */
	uint8_t digest[32];           /* content digest (format/store.md §6) */
	uint8_t base_digest[32];      /* the base's content digest; zeros
					 for a full stream */
	uint64_t data_records, data_bytes;   /* payload bytes carried */
	uint64_t ref_records;         /* blocks sent as references */
	uint64_t zero_records, zero_blocks;  /* runs of zero blocks (holes),
						and the blocks in them */
	uint64_t stream_bytes;        /* bytes of the whole stream read */
	uint64_t resume_from;         /* first block index carried (a byte
					 offset when content-defined) */
	char resume_token[128];       /* dd_recv with opts->resumable: the
					 token of what this receive kept when
					 it failed ("" when nothing was kept) */
	int chunker;                  /* enum dd_chunker: how the stream's
					 blocks are cut (block_size is then
					 the average); added in 0.1 with
					 content-defined streams, at the end */
} dd_stream_info;

/* Writes the stream of snapshot `name` (incremental against opts->base
 * when set) to fn.  Errors: DD_ENOENT, DD_ENAME, the callback's code. */
DD_API int dd_send(dd_store *store, const char *name, const dd_send_opts *opts,
		   dd_write_fn fn, void *ctx);

/* Streams a raw file or block device (fd, read from its start) with
 * in-stream dedup, without a store; `name` goes in the header, cut by
 * opts->chunker (fixed by default).  block_size 0 = 128 KiB (the FastCDC
 * average: 4 KiB to 256 KiB); compress_level 0 = zstd level 1, -1 = none.
 * Errors go to dd_last_errmsg(). */
DD_API int dd_send_fd(int fd, const char *name, uint32_t block_size,
		      int compress_level, const dd_send_opts *opts,
		      dd_write_fn fn, void *ctx);

typedef struct dd_recv_opts {
	unsigned version;          /* DD_RECV_OPTS_VERSION */
	const char *name;          /* snapshot name to create; NULL = the
				      stream's own */
	int resumable;             /* keep what arrived if interrupted */
	dd_progress_fn progress;
	void *progress_ctx;
	uint64_t mem_limit;        /* as in dd_send_opts */
	const char *tmpdir;        /* where tables spill; NULL = $TMPDIR or
				      /tmp */
} dd_recv_opts;
#define DD_RECV_OPTS_VERSION 1
#define DD_RECV_OPTS_INIT {DD_RECV_OPTS_VERSION, NULL, 0, NULL, NULL, 0, NULL}

/* Receives a stream into the store.  Every block is checked against its
 * SHA-256 before it is stored, and blocks the store already holds are not
 * stored again.  The snapshot becomes visible only after the end record
 * checks out; on any failure the store is left as it was.  info may be
 * NULL.  Errors: DD_EFORMAT, DD_ECHECKSUM, DD_ECORRUPT, DD_EVERSION,
 * DD_ENOTSUP, DD_EEXIST, DD_ENOENT (missing base), DD_EBUSY,
 * DD_EBLOCKSIZE (the stream's block size or chunker is not the store's:
 * refused at the header, nothing stored), the callback's code. */
DD_API int dd_recv(dd_store *store, const dd_recv_opts *opts, dd_read_fn fn,
		   void *ctx, dd_stream_info *info);

/* Rebuilds the raw image into fd (a regular file or block device) without
 * a store.  fd must be open for reading and writing: a REF record's block
 * is read back from where it was first written (and checked again).
 * Errors go to dd_last_errmsg(). */
DD_API int dd_recv_fd(int fd, const dd_recv_opts *opts, dd_read_fn fn,
		      void *ctx, dd_stream_info *info);

/* Checks a whole stream and describes it, writing nothing. */
DD_API int dd_stream_check(const dd_recv_opts *opts, dd_read_fn fn, void *ctx,
			   dd_stream_info *info);

/* Bytes that always hold a stream's HEADER record (format/stream.md §2,
 * §4): its frame and the largest payload. */
#define DD_STREAM_HEADER_MAX 4112

/* Reads the HEADER record at the start of buf -- the stream's first
 * DD_STREAM_HEADER_MAX bytes, or all of a shorter stream; bytes after the
 * header are ignored -- into *info: format_version, block_size, name,
 * base, size, digest, base_digest and resume_from; the counts are 0.
 * Nothing past the header is checked.  What a receiver learns before it
 * opens a store: `ddrecv` creates a missing store with the stream's block
 * size, then hands dd_recv these bytes again, followed by the rest.
 * Errors: DD_EINVAL, DD_EFORMAT (not a stream, or buf ends inside the
 * header), DD_ECHECKSUM, DD_EVERSION, DD_ENOTSUP; the reason in
 * dd_last_errmsg(). */
DD_API int dd_stream_header(const void *buf, size_t len, dd_stream_info *info);

/* Discards a partial resumable receive kept in the store. */
DD_API int dd_recv_abort_partial(dd_store *store);

/* The resume token of a partial receive, if any: copied into buf (NUL-
 * terminated); DD_ENOENT when there is none. */
DD_API int dd_recv_resume_token(dd_store *store, char *buf, size_t len);

/* Calls fn once for every partial receive kept in the store (there may be
 * several, of different snapshots), oldest first, with the snapshot name
 * it will have and its resume token (both valid during the call).
 * Errors: DD_EINVAL (no callback), DD_ECANCELED when fn returns
 * non-zero, the catalog's errors. */
typedef int (*dd_recv_partial_fn)(const char *name, const char *token,
				  void *ctx);
DD_API int dd_recv_partial_walk(dd_store *store, dd_recv_partial_fn fn,
				void *ctx);

/* The message of the last failed call in this thread that has no handle
 * (dd_store_open, dd_store_create, dd_send_fd, dd_recv_fd,
 * dd_stream_check, dd_stream_header, dd_scan_*).  Never NULL. */
DD_API const char *dd_last_errmsg(void);

/* ---- repair -------------------------------------------------------------*/

/*
 * The packs (every record carries its block's hash) and the snapshot
 * manifests (format/manifest.md) are a store's truth; the catalog in
 * STORE/db (the DDT, snapshots, block maps, reference counts, the pack
 * table) is an index over them.  dd_store_repair rebuilds that index from
 * them: when db/ is missing, damaged, or an older copy.  It builds the new
 * catalog beside the old one (STORE/db.repair) and swaps it in with one
 * rename, so a crash during repair leaves the old catalog in place; run
 * again, it gives the same catalog.  It walks record headers, not
 * payloads, unless opts->verify.
 *
 * What it cannot use it reports through opts->report and moves aside so
 * that the store works without it: a pack whose file header is
 * unreadable (renamed NNNNNNNN.pack.damaged), a manifest that fails its
 * checks (ID.snap.damaged), damaged records inside a pack (skipped: the
 * walk finds the next good record).  A snapshot whose manifest names a
 * block no pack holds is restored all the same, that block marked lost
 * (reads of it fail with DD_ECORRUPT; a later put or receive of data
 * holding it brings it back), and reported with its first missing byte.
 */
enum dd_repair_event_kind {
	DD_REPAIR_INCOMPLETE = 1,  /* snapshot `name` lacks blocks; `offset`:
				      its first missing byte, `length`: the
				      blocks missing */
	DD_REPAIR_BAD_MANIFEST = 2,/* manifest file `name` refused (moved
				      aside) */
	DD_REPAIR_BAD_PACK = 3,    /* pack file `name` unreadable (moved
				      aside) */
	DD_REPAIR_BAD_RECORDS = 4  /* pack `name`: `length` bytes from
				      `offset` skipped as damaged */
};

typedef struct dd_repair_event {
	int kind;                  /* enum dd_repair_event_kind */
	const char *name;          /* valid during the call only */
	uint64_t offset;
	uint64_t length;
	int error;                 /* the DD_E* code behind it */
	const char *message;       /* one line */
} dd_repair_event;
typedef void (*dd_repair_report_fn)(void *ctx, const dd_repair_event *ev);

typedef struct dd_repair_opts {
	unsigned version;          /* DD_REPAIR_OPTS_VERSION */
	int verify;                /* also decompress and hash every record */
	int wait_for_lock;         /* wait for running writers to finish
				      (repair needs the store to itself) */
	dd_repair_report_fn report;/* may be NULL */
	void *report_ctx;
	dd_progress_fn progress;   /* pack bytes walked; may be NULL */
	void *progress_ctx;
	/* ---- version 2 ---- */
	unsigned lock_timeout_ms;  /* with wait_for_lock: DD_EBUSY after this
				      many milliseconds (0 = wait for ever) */
} dd_repair_opts;
#define DD_REPAIR_OPTS_VERSION 2
#define DD_REPAIR_OPTS_INIT {DD_REPAIR_OPTS_VERSION, 0, 0, NULL, NULL, NULL, \
			     NULL, 0}

typedef struct dd_repair_result {
	unsigned version;          /* DD_REPAIR_RESULT_VERSION: set by caller */
	uint64_t snapshots;        /* restored (incomplete ones included) */
	uint64_t incomplete_snapshots; /* lacking at least one block */
	uint64_t blocks;           /* distinct blocks found in the packs */
	uint64_t unreferenced_blocks;  /* of those, used by no snapshot: gc
					  reclaims them */
	uint64_t missing_blocks;   /* distinct blocks no pack holds */
	uint64_t packs;            /* pack files walked */
	uint64_t pack_bytes;       /* their bytes */
	uint64_t records;          /* good records walked */
	uint64_t damaged_records;  /* damaged stretches skipped */
	uint64_t damaged_bytes;    /* their bytes */
	uint64_t damaged_packs;    /* pack files moved aside */
	uint64_t damaged_manifests;/* manifests moved aside */
} dd_repair_result;
#define DD_REPAIR_RESULT_VERSION 1

/* Rebuilds the catalog of the store at path (format 2 or later; a
 * format-1 store has no manifests and gets DD_ENOTSUP).  Needs the store
 * to itself: DD_EBUSY naming the running writers, or waits (wait_for_lock,
 * until lock_timeout_ms).  Returns 0 when the new catalog is in place -- check
 * out->incomplete_snapshots and damaged_manifests: a store can be repaired
 * and still have lost data.  out may be NULL.  Errors (the old catalog
 * stays): DD_ENOENT, DD_EVERSION, DD_ENOTSUP (a test-hash store), DD_EBUSY,
 * DD_ENOMEM, DD_EIO, DD_ENOSPC; the reason in dd_last_errmsg(). */
DD_API int dd_store_repair(const char *path, const dd_repair_opts *opts,
			   dd_repair_result *out);

/* ---- healing from a good copy (dedup repair --from) ------------------------*/

/*
 * Heals the blocks of a store that scrub found damaged (their DDT entries
 * flagged DAMAGED, format/ddt.md §3) or that repair found in no pack
 * (MISSING), and that a snapshot still uses, from a good copy: another
 * store holding the same blocks, or a replication stream (the output of
 * dd_send, e.g. of the same snapshot in another store).  Blocks are
 * matched by SHA-256 and each copy is checked against it before it is
 * kept.  It runs beside writers, readers and gc, as a writer does
 * (format/store.md §9.1): the copies are appended to packs of its own and
 * synced, then each entry still damaged or lost as it was read points at
 * its copy, in one short transaction; every snapshot using it reads
 * again.  A block the source lacks stays as it was.
 */
/* Called once per block healed (healed 1) or still damaged or lost
 * (healed 0) after the heal committed. */
typedef void (*dd_heal_report_fn)(void *ctx, const uint8_t hash[32],
				  uint32_t lsize, int healed);

typedef struct dd_heal_opts {
	unsigned version;          /* DD_HEAL_OPTS_VERSION */
	const char *source;        /* the path of another store; NULL: read
				      a stream through `read` */
	dd_read_fn read;           /* with source NULL: the stream */
	void *read_ctx;
	dd_heal_report_fn report;  /* may be NULL */
	void *report_ctx;
} dd_heal_opts;
#define DD_HEAL_OPTS_VERSION 1
#define DD_HEAL_OPTS_INIT {DD_HEAL_OPTS_VERSION, NULL, NULL, NULL, NULL, NULL}

typedef struct dd_heal_result {
	uint64_t wanted;           /* entries damaged or lost and in use */
	uint64_t healed;           /* of those, healed by this call */
	uint64_t missing;          /* still damaged or lost after it */
} dd_heal_result;

/* Heals store from opts->source or the stream (see above).  Returns 0
 * when it ran to the end -- check out->missing: 0 only if nothing is left
 * to heal.  out may be NULL.  Errors (nothing changed): DD_EINVAL (no
 * source, an unknown version), DD_EPERM (a read-only handle), DD_EBUSY
 * (repair has the store, or the source), DD_ENOENT (no store at source),
 * DD_ENOTSUP (a store not keyed by SHA-256), DD_EFORMAT, DD_ECHECKSUM,
 * DD_EVERSION (a damaged or foreign stream), DD_ENOMEM, DD_EIO,
 * DD_ENOSPC, the read callback's code. */
DD_API int dd_store_heal_from(dd_store *store, const dd_heal_opts *opts,
			      dd_heal_result *out);

/* ---- scanning existing data (dedup scan) ---------------------------------*/

/*
 * What deduplication and compression would save on data that exists now,
 * without a store: the figures `dd_store_stat` would report after
 * `dd_writer` had stored each scanned image as a snapshot of a new store,
 * for several block sizes in one read pass.
 *
 * Lifecycle: dd_scan_new, then any number of dd_scan_add_path /
 * dd_scan_add_fd (each image is cut into blocks from its own start, as a
 * snapshot would be), then dd_scan_finish, then the accessors, then
 * dd_scan_free.  A dd_scan is used by one thread at a time; separate scans
 * are independent.  Errors of dd_scan_new go to dd_last_errmsg(); errors
 * on a handle to dd_scan_errmsg().
 *
 * Modes:
 *  - DD_SCAN_EXACT: every distinct block is counted.  Its table lives in
 *    RAM up to mem_limit and spills to sorted runs in temp files (in
 *    tmpdir, unlinked at once) beyond it; the result is exact either way:
 *    equal to dd_store_stat of a new store with that block size holding
 *    the same images (verify off), with the same compressor and level.
 *  - DD_SCAN_SAMPLE: only blocks whose key (SHA-256, or XXH3 where
 *    key_fast) begins with `shift` zero bits are tracked (1 in 2^shift
 *    block contents, every copy of them); when the table reaches
 *    mem_limit, shift grows by one and half the sample is dropped, so
 *    memory stays fixed whatever the data size.
 *    Referenced and zero counts stay exact; unique counts, sizes and the
 *    histogram are estimates scaled by 2^shift, with a relative error bound
 *    at 99% confidence in the result (dedup_error, compress_error).
 *
 * Both chunkers in exact mode: the fixed blocks are compressed; the
 * FastCDC blocks' compressed sizes are, unless compress_exact, estimated
 * from the compression of the fixed blocks whose bytes each covers
 * (stored_estimated in its results; their dedup figures stay exact).
 * With both chunkers, unless compress_exact, the FastCDC blocks are told
 * apart by a 128-bit XXH3 key rather than SHA-256 (key_fast): a key only
 * counts blocks in a scan, and hashing every byte a second time with
 * SHA-256 was most of what the second chunker cost.
 * It was 0.5% to 1.1% above the compressed figure on the benchmark images
 * and on a mixed corpus (docs/api.md, "Scanning existing data").
 */

typedef struct dd_scan dd_scan;

enum dd_scan_mode {
	DD_SCAN_EXACT = 0,
	DD_SCAN_SAMPLE = 1
};

/* Most block sizes one scan takes: every power of two from 4 KiB to 1 MiB. */
#define DD_SCAN_MAX_BLOCK_SIZES 9
/* Most results of one scan: each chunker with each of its block sizes,
 * 9 fixed sizes and 7 FastCDC averages (4 KiB to 256 KiB). */
#define DD_SCAN_MAX_RESULTS 16

/* Bytes per entry of this store's DDT on disk once compacted by gc: 33-byte
 * key + 32-byte value + LMDB node header and page index (format/ddt.md
 * §4, 76 bytes) plus branch pages and page slack, as measured by
 * tests/bench/bench_store.sh (≈ 79-80 bytes per entry after gc). */
#define DD_SCAN_DDT_ENTRY_BYTES 79

/* Called once per input that is skipped or only partly read (unreadable,
 * vanished, changed while read, not a file or device).  path is the
 * input's path or label, code a DD_E* code, msg one line; both strings are
 * valid during the call only.  It runs on the thread that called
 * dd_scan_add_*. */
typedef void (*dd_scan_warn_fn)(void *ctx, const char *path, int code,
				const char *msg);

typedef struct dd_scan_opts {
	unsigned version;          /* DD_SCAN_OPTS_VERSION */
	const uint32_t *block_sizes; /* nblock_sizes distinct powers of two in
				      [4 KiB, 1 MiB]; copied by dd_scan_new;
				      NULL/0 = DD_BLOCK_SIZE_DEFAULT alone */
	size_t nblock_sizes;
	int compress;              /* enum dd_compress */
	int compress_level;        /* zstd 1..19; 0 = 1 */
	int mode;                  /* enum dd_scan_mode */
	unsigned sample_shift;     /* sample mode: start at 1 in 2^shift
				      (0..32); 0 = every block until memory
				      runs out */
	uint64_t mem_limit;        /* bytes for tables and buffers; 0 =
				      256 MiB.  The process needs a few MiB
				      more for code and libraries */
	const char *tmpdir;        /* spill directory; NULL = $TMPDIR or /tmp */
	unsigned threads;          /* hashing/compression threads besides
				      the caller's; 0 = cores (cores - 1
				      with FastCDC, which the caller's
				      thread cuts) */
	dd_progress_fn progress;   /* bytes read so far; may be NULL */
	void *progress_ctx;
	uint64_t progress_total;   /* the total passed to progress (0 =
				      unknown); see dd_scan_path_bytes */
	dd_scan_warn_fn warn;      /* may be NULL: warnings are only counted */
	void *warn_ctx;
	/* ---- version 2 ---- */
	const int *chunkers;       /* nchunkers distinct enum dd_chunker, in
				      the order of the results; copied;
				      NULL/0 = DD_CHUNKER_FIXED alone.  Each
				      is evaluated with each block size (the
				      FastCDC average: 4 KiB to 256 KiB), all
				      in the same read pass */
	size_t nchunkers;
	/* ---- version 3 ---- */
	int compress_exact;        /* with both chunkers in exact mode, 0:
				      only the fixed blocks are compressed and
				      the FastCDC blocks' compressed sizes are
				      estimated from them (stored_estimated);
				      1: every cutter's distinct blocks are
				      compressed, for exact figures (about
				      twice the time on compressible data).
				      With both chunkers in either mode, 0
				      also keys the FastCDC blocks by XXH3
				      (key_fast), 1 by SHA-256 */
} dd_scan_opts;
#define DD_SCAN_OPTS_VERSION 3
#define DD_SCAN_OPTS_INIT {DD_SCAN_OPTS_VERSION, NULL, 0, DD_COMPRESS_ZSTD, \
			   0, DD_SCAN_EXACT, 0, 0, NULL, 0, NULL, NULL, 0,   \
			   NULL, NULL, NULL, 0, 0}

/* Figures for one chunker and block size.  In sample mode the fields
 * marked (est.) are estimates; the others are exact in both modes.  For
 * FastCDC, blocks and zero_blocks count a run of zero blocks once, as a
 * fastcdc store's snapshots do (format/chunker.md §5). */
typedef struct dd_scan_result {
	unsigned version;          /* DD_SCAN_RESULT_VERSION: set by the caller */
	uint32_t block_size;       /* FastCDC: the average */
	int mode;                  /* enum dd_scan_mode */
	uint64_t logical_bytes;    /* bytes read, zero blocks included */
	uint64_t blocks;           /* blocks cut, zero blocks included */
	uint64_t zero_blocks;      /* all-zero blocks (holes: never stored) */
	uint64_t referenced_blocks;/* non-zero blocks */
	uint64_t referenced_bytes; /* their logical bytes */
	uint64_t unique_blocks;    /* distinct non-zero blocks (est.) */
	uint64_t unique_bytes;     /* their logical bytes (est.) */
	uint64_t stored_bytes;     /* their compressed bytes (est.) */
	uint64_t ddt_bytes;        /* unique_blocks * DD_SCAN_DDT_ENTRY_BYTES */
	double dedup_ratio;        /* referenced_bytes / unique_bytes; 1 if none */
	double compress_ratio;     /* unique_bytes / stored_bytes; 1 if none */
	unsigned sample_shift;     /* sample mode: 1 in 2^shift; else 0 */
	uint64_t sampled_blocks;   /* distinct blocks the estimate rests on */
	double confidence;         /* of the bounds below: 0.99; 1 when exact */
	double dedup_error;        /* relative bound on dedup_ratio (0 = exact;
				      HUGE_VAL when the sample is too small) */
	double compress_error;     /* relative bound on compress_ratio */
	uint64_t spill_runs;       /* exact mode: sorted runs written to disk */
	uint64_t spill_bytes;      /* and their bytes */
	dd_hist_row hist[DD_HIST_BUCKETS]; /* by refcount, as dd_stat (est.) */
	/* ---- version 2 ---- */
	int chunker;               /* enum dd_chunker */
	/* ---- version 3 ---- */
	int stored_estimated;      /* 1: stored_bytes, compress_ratio and the
				      histogram's psize columns are estimated:
				      each block given the compressed size of
				      the fixed blocks' bytes it covers, in
				      proportion (a scan of both chunkers,
				      without compress_exact); 0: compressed */
	/* ---- version 4 ---- */
	int key_fast;              /* 1: distinct blocks told apart by a
				      128-bit XXH3 key, not SHA-256 (the
				      FastCDC results of a scan of both
				      chunkers, without compress_exact):
				      the same figures but on data made to
				      collide; 0: SHA-256, as a store */
} dd_scan_result;
#define DD_SCAN_RESULT_VERSION 4

/* What the scan read, over all block sizes. */
typedef struct dd_scan_info {
	unsigned version;          /* DD_SCAN_INFO_VERSION: set by the caller */
	uint64_t images;           /* files, devices and streams read */
	uint64_t bytes;            /* bytes read */
	uint64_t skipped;          /* inputs skipped or partly read (warned) */
	uint64_t special;          /* fifos, sockets, char/block devices met
				      inside directories: not read, not
				      warned (name devices explicitly) */
	size_t nblock_sizes;
	/* ---- version 2 ---- */
	size_t nresults;           /* chunkers x block sizes: the indices
				      of dd_scan_result_get */
} dd_scan_info;
#define DD_SCAN_INFO_VERSION 2

/* Creates a scan.  opts may be NULL (128 KiB fixed blocks, zstd level 1,
 * exact, 256 MiB).  Errors: DD_EINVAL (a block size out of range for a
 * chunker, not a power of two or listed twice; a chunker unknown or
 * listed twice; a bad level, mode or shift), DD_ENOMEM; the reason in
 * dd_last_errmsg().  A scan with FastCDC reads holes of sparse files (its
 * cut points depend on every byte), one of fixed blocks alone skips
 * them. */
DD_API int dd_scan_new(dd_scan **out, const dd_scan_opts *opts);

/* Scans path: a regular file, a block device (or any readable non-
 * directory named explicitly), or a directory, recursively in name order,
 * never following symbolic links (a symlink named as path itself is
 * followed).  Inside directories only regular files are read.  Every input
 * that cannot be read -- permissions, vanished, shrank or failed while
 * read, path too long -- is reported through opts->warn, counted in
 * dd_scan_info.skipped, and the scan goes on: the call still returns 0.
 * Errors (the scan cannot go on; it can then only be freed): DD_EINVAL,
 * DD_ESTATE (after dd_scan_finish), DD_ENOMEM, DD_EIO / DD_ENOSPC (spill
 * file), DD_ECANCELED (progress callback). */
DD_API int dd_scan_add_path(dd_scan *scan, const char *path);

/* Scans fd as one image from its current position to end of file (a pipe,
 * stdin, a file or device).  label names it in warnings (NULL: "fd N").
 * fd stays open and is the caller's.  Errors as dd_scan_add_path; a read
 * error on fd is a warning (the image counts up to it). */
DD_API int dd_scan_add_fd(dd_scan *scan, int fd, const char *label);

/* Ends the read phase: merges spilled runs and computes the results.
 * Errors: DD_ESTATE (called twice or after a failure), DD_EIO, DD_ENOMEM. */
DD_API int dd_scan_finish(dd_scan *scan);

/* Results for the index-th chunker and block size, after dd_scan_finish:
 * index = c * nblock_sizes + b for chunker c of opts->chunkers and block
 * size b of opts->block_sizes (so the index-th block size when one
 * chunker is scanned).  out->version must be set; a version-1 struct
 * gets no chunker.  Errors: DD_EINVAL (bad index or version), DD_ESTATE
 * (not finished). */
DD_API int dd_scan_result_get(const dd_scan *scan, size_t index,
			      dd_scan_result *out);

/* Totals; valid at any time (running figures before dd_scan_finish).
 * Errors: DD_EINVAL. */
DD_API int dd_scan_info_get(const dd_scan *scan, dd_scan_info *out);

/* The last error on the handle (one line, "DD_EIO: ..."), valid until the
 * next call on it; "no error" when there was none.  Never NULL. */
DD_API const char *dd_scan_errmsg(const dd_scan *scan);

/* Removes temp files, frees everything.  Accepts NULL. */
DD_API void dd_scan_free(dd_scan *scan);

/* Bytes a dd_scan_add_path(path) would read, for a progress total: sizes of
 * regular files (and block devices named as path), recursively, without
 * following symlinks; unreadable entries count 0.  Thread-safe.
 * Errors: DD_EINVAL, DD_ENOENT / DD_EPERM for path itself
 * (dd_last_errmsg()). */
DD_API int dd_scan_path_bytes(const char *path, uint64_t *out);

/* ---- block caches: L1 (RAM) and L2 (SSD paths) ----------------------------*/

/*
 * Reads of snapshot blocks (dd_reader_pread) go through two caches before
 * the packs.  L1 keeps decompressed blocks in RAM, per store handle, with
 * scan-resistant eviction (S3-FIFO).  L2 is one or more cache paths --
 * files on SSD filesystems or block devices -- configured in the store:
 * blocks leaving L1 are written to them in large sequential batches at a
 * limited rate, and their index is kept on the device (format/cache.md),
 * so a cache is warm again after a restart.  Every block read from L2 is
 * checked against its SHA-256; a mismatch is counted (l2_cksum_errors),
 * the entry dropped and the block read from the packs.  A missing,
 * foreign, unreadable or full device never fails a read: the handle says
 * so once in its message (dd_store_errmsg), counts it, and reads the
 * packs.  A device is used by one process at a time (flock): other
 * processes see it as DD_CACHE_BUSY.  Stores that use a test hash have no
 * caches.  Tunables kept in the store (dd_cache_config_set) are
 * overridden per handle by dd_open_opts.
 */
#define DD_CACHE_L1_DEFAULT ((uint64_t)64 << 20)
#define DD_CACHE_L2_WRITE_MAX_DEFAULT ((uint64_t)8 << 20)
#define DD_CACHE_OFF UINT64_MAX
#define DD_CACHE_PATH_MAX 1024   /* bytes of a device path, NUL included */

enum dd_cache_state {
	DD_CACHE_ONLINE = 0,      /* in use */
	DD_CACHE_REBUILDING = 1,  /* its index is being read; reads miss */
	DD_CACHE_MISSING = 2,     /* the path does not exist */
	DD_CACHE_FOREIGN = 3,     /* not a cache device of this store */
	DD_CACHE_FAULTED = 4,     /* an I/O error; no longer used */
	DD_CACHE_FULL = 5,        /* no space to write (a sparse file) */
	DD_CACHE_BUSY = 6,        /* used by another process */
	DD_CACHE_OFFLINE = 7      /* not opened (no_cache, or no read yet) */
};

/* "online", "rebuilding", "missing", ... */
DD_API const char *dd_cache_state_name(int state);

/* The figures of one store handle since it was opened. */
typedef struct dd_cache_stats {
	unsigned version;          /* DD_CACHE_STATS_VERSION: set by the caller */
	uint64_t l1_size;          /* budget in bytes (0: no L1) */
	uint64_t l1_bytes;         /* bytes held now */
	uint64_t l1_blocks;        /* blocks held now */
	uint64_t l1_hits;
	uint64_t l1_misses;
	uint64_t l2_devices;       /* configured devices, whatever their state */
	uint64_t l2_size;          /* ring bytes of the devices in use */
	uint64_t l2_entries;       /* blocks indexed on them */
	uint64_t l2_bytes;         /* their bytes */
	uint64_t l2_hits;
	uint64_t l2_misses;        /* L1 misses that L2 did not serve either */
	uint64_t l2_read_bytes;
	uint64_t l2_write_bytes;   /* data, log blocks and headers written */
	uint64_t l2_cksum_errors;  /* blocks read from L2 that failed SHA-256 */
	uint64_t l2_dev_errors;    /* devices taken out of use (missing,
				      foreign, I/O error, full) */
	uint64_t l2_log_errors;    /* damaged log blocks met by rebuilds */
	uint64_t l2_feed_drops;    /* blocks leaving L1 not fed (queue full) */
	uint64_t l2_rebuilds;      /* index rebuilds completed */
	uint64_t l2_rebuild_entries; /* entries they restored */
	uint64_t l2_rebuild_ms;    /* their total time */
	uint64_t l2_write_max;     /* feed rate in effect, bytes per second */
	int l2_feed_sequential;    /* 1 when sequential reads are fed */
	uint64_t pack_read_ops;    /* block records read from the packs */
	uint64_t pack_read_bytes;  /* their bytes (header + payload) */
} dd_cache_stats;
#define DD_CACHE_STATS_VERSION 1

/* Errors: DD_EINVAL (NULL, or a version this build does not know). */
DD_API int dd_cache_stats_get(dd_store *store, dd_cache_stats *out);

/* One configured L2 device. */
typedef struct dd_cache_dev {
	char path[DD_CACHE_PATH_MAX];
	uint64_t size;             /* bytes, as configured */
	uint64_t entries;          /* blocks indexed */
	uint64_t bytes;            /* their bytes */
	int state;                 /* enum dd_cache_state */
	char message[256];         /* why, when not online; else empty */
} dd_cache_dev;

/* Lists the store's L2 devices in configuration order, waiting for their
 * index rebuilds to end.  *out (*count entries, NULL when 0) is released
 * with dd_cache_list_free.  Errors: DD_EINVAL, DD_ENOMEM. */
DD_API int dd_cache_list(dd_store *store, dd_cache_dev **out, size_t *count);
DD_API void dd_cache_list_free(dd_cache_dev *list);

#define DD_CACHE_ADD_FORCE 0x1u /* reformat a device that holds other data */

/* Adds L2 device `path` (absolute, < DD_CACHE_PATH_MAX bytes) to the
 * store's configuration and starts using it through this handle.  A
 * missing path is created as a regular file of `size` bytes (at least 4
 * MiB + 8 KiB); size 0 takes an existing file's or device's size.  The
 * device is formatted (format/cache.md); one that holds data -- another
 * store's cache, or anything non-zero where the header goes -- is refused
 * without DD_CACHE_ADD_FORCE.  One configuration change at a time (writers
 * go on).  Errors: DD_EINVAL,
 * DD_EEXIST (configured already, or holds data), DD_EPERM, DD_EBUSY,
 * DD_EIO, DD_ENOSPC. */
DD_API int dd_cache_add(dd_store *store, const char *path, uint64_t size,
			unsigned flags);

/* Removes `path` from the configuration (and stops using it); the device's
 * contents are left as they are.  DD_ENOENT when
 * it is not configured. */
DD_API int dd_cache_remove(dd_store *store, const char *path);

/* Tunables kept in the store (STORE/cache.conf). */
typedef struct dd_cache_config {
	unsigned version;          /* DD_CACHE_CONFIG_VERSION */
	uint64_t l1_size;          /* 0 = default; DD_CACHE_OFF = no L1 */
	uint64_t l2_write_max;     /* 0 = default */
	int l2_feed_sequential;    /* 0 = default (no), 1 = yes, -1 = no */
} dd_cache_config;
#define DD_CACHE_CONFIG_VERSION 1
#define DD_CACHE_CONFIG_INIT {DD_CACHE_CONFIG_VERSION, 0, 0, 0}

/* Reads / writes the stored tunables (set applies to handles opened
 * afterwards). */
DD_API int dd_cache_config_get(dd_store *store, dd_cache_config *out);
DD_API int dd_cache_config_set(dd_store *store, const dd_cache_config *cfg);

/* Writes what the L2 feed has queued (at the write rate) with its log
 * block, so that another process finds it; dd_store_close does it too. */
DD_API int dd_cache_flush(dd_store *store);

#ifdef __cplusplus
}
#endif
#endif /* DEDUP_H */
