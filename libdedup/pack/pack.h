/*
 * pack.h -- pack files: append-only files of compressed block records.
 *
 * A pack is a 64-byte file header followed by records (format/pack.md).
 * Each record is a 64-byte self-describing header (magic, codec, sizes,
 * SHA-256 of the logical bytes, CRC-32C of the header) and the stored
 * payload.  A pack can be read alone, without the DDT: scrub and a rebuild
 * walk it record by record.
 *
 * Write order (DESIGN.md invariant 1): records are appended with
 * dd_pack_append, made durable by dd_pack_sync, and only then does the
 * store commit the LMDB transaction that references them.  Bytes past the
 * length the store recorded at its last commit are an unreferenced tail;
 * recovery truncates them once the pack's writer is gone (dd_pack_lock).
 *
 * This module is the only includer of <zstd.h>.
 */
#ifndef DD_PACK_PACK_H
#define DD_PACK_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/vdir.h"

#define DD_PACK_FILE_HDR_SIZE 64
#define DD_PACK_REC_HDR_SIZE 64
#define DD_PACK_VERSION 1

enum dd_codec {
	DD_CODEC_NONE = 0,
	DD_CODEC_ZSTD = 1
};

/* A decoded record header (format/pack.md §3). */
typedef struct dd_pack_rec {
	uint8_t pr_codec;      /* enum dd_codec */
	uint32_t pr_lsize;     /* logical (uncompressed) bytes */
	uint32_t pr_psize;     /* stored payload bytes */
	uint8_t pr_hash[32];   /* hash of the logical bytes */
} dd_pack_rec;

/* ---- record headers (pure, no I/O) -------------------------------------*/

void dd_pack_rec_encode(uint8_t out[DD_PACK_REC_HDR_SIZE],
			const dd_pack_rec *rec);
/* Checks magic, version, CRC and size limits (lsize and psize in
 * [1, DD_BLOCK_SIZE_MAX], psize <= lsize for zstd, psize == lsize for none).
 * DD_ECORRUPT or DD_EVERSION with a message. */
int dd_pack_rec_decode(dd_err *err, const uint8_t in[DD_PACK_REC_HDR_SIZE],
		       dd_pack_rec *out);

/* The codec and size limits of format/pack.md §3.1 alone: DD_ENOTSUP for an
 * unknown codec, DD_ECORRUPT for sizes out of range. */
int dd_pack_rec_check_sizes(dd_err *err, const dd_pack_rec *rec);

void dd_pack_file_hdr_encode(uint8_t out[DD_PACK_FILE_HDR_SIZE],
			     uint32_t pack_id);
int dd_pack_file_hdr_decode(dd_err *err,
			    const uint8_t in[DD_PACK_FILE_HDR_SIZE],
			    uint32_t *pack_id);

/* ---- codecs (one per thread) -------------------------------------------*/

typedef struct dd_codec_ctx dd_codec_ctx;

/* level: zstd level 1..19 (ignored for DD_CODEC_NONE).  DD_EINVAL for an
 * unknown codec or a level out of range, DD_ENOMEM; with a message in err
 * (which may be NULL). */
int dd_codec_new(dd_codec_ctx **out, dd_err *err, int codec, int level);
void dd_codec_free(dd_codec_ctx *c);

/* Worst-case payload size for len logical bytes. */
size_t dd_codec_bound(size_t len);

/* Compresses src into dst (capacity dd_codec_bound(len)); sets *psize and
 * *codec_used.  A block that does not shrink is stored with DD_CODEC_NONE
 * (the payload is then a copy of src). */
int dd_codec_compress(dd_codec_ctx *c, dd_err *err, void *dst,
		      const void *src, size_t len, uint32_t *psize,
		      uint8_t *codec_used);

/* Decodes a payload of rec into dst (capacity >= rec->pr_lsize); checks the
 * result is exactly pr_lsize bytes.  DD_ECORRUPT on a bad payload. */
int dd_codec_decompress(dd_codec_ctx *c, dd_err *err, const dd_pack_rec *rec,
			const void *payload, void *dst);

/* ---- pack files ---------------------------------------------------------*/

typedef struct dd_pack dd_pack;

/* Creates NNNNNNNN.pack (8 hex digits of id) in dir (the store's packs/
 * directory) exclusively, writes its header, syncs it and the directory,
 * and opens it for appending.  DD_EEXIST if the file exists (an orphan
 * of a crash: format/pack.md §6); on any other failure no file is left
 * behind. */
int dd_pack_create(dd_pack **out, dd_err *err, dd_vdir *dir, uint32_t id);
/* Opens an existing pack; checks the file header (format/pack.md §2.2,
 * including that it names pack id).  writable: for appends, which go at
 * the current end of file until dd_pack_truncate sets the end. */
int dd_pack_open(dd_pack **out, dd_err *err, dd_vdir *dir, uint32_t id,
		 int writable);
void dd_pack_close(dd_pack *p);
uint32_t dd_pack_id(const dd_pack *p);

/* The file name of pack id: "0000002a.pack" (buf >= 16 bytes). */
void dd_pack_name(char *buf, size_t len, uint32_t id);

/* Takes the pack's own lock (dd_vfile_lock: flock locally; exclusive,
 * without waiting) for as long as this handle stays open: the store's
 * writers hold it on every pack they append to, and gc and recovery touch
 * no pack whose lock they cannot take.  DD_EBUSY when another handle
 * holds it. */
int dd_pack_lock(dd_pack *p, dd_err *err);
/* Appending: the end offset where the next record goes. */
uint64_t dd_pack_end(const dd_pack *p);
/* Sets the append end (after truncating the file to it): the store passes
 * its committed length.  DD_ECORRUPT if end is past the end of the file
 * (committed data is missing; the file is never extended). */
int dd_pack_truncate(dd_pack *p, dd_err *err, uint64_t end);

/* Appends a record (header + payload) at the end; *offset gets the offset
 * of its header.  Records gather in a 1 MiB buffer: in the file after
 * dd_pack_flush, durable after dd_pack_sync. */
int dd_pack_append(dd_pack *p, dd_err *err, const dd_pack_rec *rec,
		   const void *payload, uint64_t *offset);
/* Writes the appended records still buffered into the file (not durable):
 * before another handle reads them. */
int dd_pack_flush(dd_pack *p, dd_err *err);
/* Flush, then dd_vfile_sync (fdatasync locally).  After a failed write or sync every later append
 * and sync on this handle fails with DD_EIO (unsynced records may be
 * lost). */
int dd_pack_sync(dd_pack *p, dd_err *err);

/* Reads the record at offset: checks its header (and that it matches
 * `expect` -- lsize, psize and hash -- when expect is not NULL), reads the
 * payload into buf (capacity >= DD_PACK_REC_HDR_SIZE + pr_psize; the
 * payload starts at buf + DD_PACK_REC_HDR_SIZE).  Thread-safe (pread). */
int dd_pack_read_rec(dd_pack *p, dd_err *err, uint64_t offset,
		     const dd_pack_rec *expect, dd_pack_rec *rec, void *buf,
		     size_t buflen);

/* Gives back the space of bytes [off, off + len) of a pack (dead records
 * gc chose, format/pack.md §6.1): dd_vfile_punch (fallocate PUNCH_HOLE
 * locally), the file's size unchanged; the range then reads as zeros.
 * DD_ENOTSUP when the file system (or backend) cannot; the pack must be
 * open for writing. */
int dd_pack_punch(dd_pack *p, dd_err *err, uint64_t off, uint64_t len);
/* Walks a pack record by record from its first record (for scrub and
 * rebuild).  A punched range (64 zero bytes where a header would start)
 * is stepped over to the next non-zero byte, the next record's start
 * (format/pack.md §5.3).  Calls fn for each; stops at the first damaged header, the end
 * of file, or `limit` bytes (0: no limit); *end gets the offset after the
 * last record fn accepted, whatever the walk returns.  fn returning
 * non-zero stops the walk with that value.  Returns 0 when the walk ends
 * exactly at the end of file or at the limit; a damaged or truncated
 * record, or a limit past the end of file, is reported with its code
 * (DD_ECORRUPT, DD_EVERSION, DD_ENOTSUP) and a message -- a torn tail past
 * the committed length looks like that, so rebuild uses *end.  Headers
 * are checked; payloads are the caller's to verify (format/pack.md §5.3).
 * The payload pointer is valid during the call only. */
typedef int (*dd_pack_walk_fn)(void *ctx, uint64_t offset,
			       const dd_pack_rec *rec, const void *payload);
int dd_pack_walk(dd_pack *p, dd_err *err, uint64_t limit, dd_pack_walk_fn fn,
		 void *ctx, uint64_t *end);
/* The same over headers only, to the end of file: fn gets NULL for the
 * payload (its bytes are not read; a payload cut short by the end of file
 * still stops the walk). */
int dd_pack_walk_headers(dd_pack *p, dd_err *err, dd_pack_walk_fn fn,
			 void *ctx, uint64_t *end);
/* The same from offset `from` (a record's start) to the end of file, with
 * or without payloads: repair goes on past damage from where
 * dd_pack_find_record finds the next record. */
int dd_pack_walk_from(dd_pack *p, dd_err *err, uint64_t from, bool payloads,
		      dd_pack_walk_fn fn, void *ctx, uint64_t *end);
/* The first offset >= from where a record header decodes (format/pack.md
 * §3, CRC included) and its payload fits in the file: 1 with *next, 0 if
 * there is none.  Damage between records is skipped this way; a false
 * match needs a valid CRC-32C over random bytes (1 in 2^32 per offset
 * that also reads "DDRC"), and its payload is still checked by hash. */
int dd_pack_find_record(dd_pack *p, dd_err *err, uint64_t from,
			uint64_t *next);

#endif
