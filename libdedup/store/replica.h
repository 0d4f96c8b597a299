/*
 * replica.h -- what the replication stream needs from a store.
 *
 * Sending reads a snapshot block by block with each block's stored record
 * as it is (compressed payload, never recompressed).  Receiving feeds a
 * writer with blocks that arrive hashed and compressed: each one is
 * decompressed and checked against its SHA-256 before it is stored, and a
 * block the store already holds is referenced, not stored again -- the
 * receiver dedups against everything it has, not only the stream.
 * stream/ sees only this header of store/ (and no LMDB).
 */
#ifndef DD_STORE_REPLICA_H
#define DD_STORE_REPLICA_H

#include <stdbool.h>
#include <stdint.h>

#include "dedup.h"
#include "common/err.h"

typedef struct dd_replica_snap {
	uint64_t rps_size;
	uint64_t rps_blocks;
	uint32_t rps_block_size;
	int rps_chunker;             /* enum dd_chunker: the store's */
	int rps_dv;                  /* rps_digest's version (DD_DIGEST_V1/2) */
	uint8_t rps_digest[32];
} dd_replica_snap;

typedef struct dd_replica_blk {
	uint8_t rpb_hash[32];
	uint8_t rpb_codec;
	uint32_t rpb_lsize;
	uint32_t rpb_psize;
	const uint8_t *rpb_payload;  /* valid until the next call */
} dd_replica_blk;

/* Copies a local error into the handle's message (thread-safe); returns
 * its code. */
int dd_store_fail(dd_store *s, const dd_err *err);
int dd_store_failf(dd_store *s, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- sending ------------------------------------------------------------*/

typedef struct dd_replica_iter dd_replica_iter;

/* Opens snapshot `name` in a read transaction held until close.  Fails
 * with DD_ENOTSUP for a store whose block hash is not SHA-256. */
int dd_replica_iter_open(dd_replica_iter **out, dd_err *err, dd_store *s,
			 const char *name, dd_replica_snap *info);
/* The next stored (non-hole) block at position >= from (first call) or
 * after the last one: 1 with *idx, and blk's hash and lsize (from the
 * block map and the snapshot's size: no DDT lookup), 0 at the end.  A
 * position is a block index, or a byte offset for content-defined blocks
 * (rps_chunker not fixed), whose holes are the gaps between blocks. */
int dd_replica_iter_next(dd_replica_iter *it, dd_err *err, uint64_t from,
			 uint64_t *idx, dd_replica_blk *blk);
/* Completes blk for the block dd_replica_iter_next gave last: codec, psize
 * and the stored payload (valid until the next call), after checking its
 * DDT entry (DD_ECORRUPT if missing or of another size) and its record's
 * header. */
int dd_replica_iter_load(dd_replica_iter *it, dd_err *err,
			 dd_replica_blk *blk);
void dd_replica_iter_close(dd_replica_iter *it);

/* The content digest of snapshot `name` in version dv (format/store.md
 * §6): its record's when it has that version (or is content-defined),
 * else computed from its block map, which must give the record's own
 * digest too (DD_ECORRUPT otherwise).  Version 1 of an image over 2^32
 * blocks is refused (DD_EINVAL: format/stream.md §3.1). */
int dd_replica_digest(dd_store *s, dd_err *err, const char *name, int dv,
		      uint8_t out[32]);

/* ---- receiving (receive.c) ------------------------------------------------*/

/* A writer of snapshot `name` fed block by block in increasing position
 * order (as dd_replica_iter_next gives them); holes are the positions
 * never given.  dv: the stream's content digest version, the snapshot's
 * (a fixed store of format 2 becomes format 4 for version 2).  DD_EINVAL if chunker and block_size are not the store's,
 * DD_ENOTSUP for a store not keyed by SHA-256. */
typedef struct dd_replica_writer dd_replica_writer;

int dd_replica_begin(dd_replica_writer **out, dd_err *err, dd_store *s,
		     const char *name, int chunker, uint32_t block_size,
		     int dv);
/* Verifies (decompress, SHA-256) then stores or references the block. */
int dd_replica_put_data(dd_replica_writer *rw, uint64_t idx,
			const uint8_t hash[32], uint8_t codec, uint32_t lsize,
			uint32_t psize, const void *payload);
/* A block the store must already hold: DD_EFORMAT if it does not. */
int dd_replica_put_ref(dd_replica_writer *rw, uint64_t idx,
		       const uint8_t hash[32], uint32_t lsize);
/* Ends the image at `size` bytes and commits if its content digest equals
 * `digest` (DD_ECHECKSUM otherwise, and nothing becomes visible). */
int dd_replica_finish(dd_replica_writer *rw, uint64_t size,
		      const uint8_t digest[32]);
/* The last error's message. */
const char *dd_replica_errmsg(const dd_replica_writer *rw);
/* Aborts (rolling back) unless finished or suspended; NULL is fine. */
void dd_replica_free(dd_replica_writer *rw);

/* A resumable receive: what arrived is kept when it fails (after
 * dd_replica_suspend) or dies; size and digest are the stream's. */
int dd_replica_set_resumable(dd_replica_writer *rw, uint64_t size,
			     const uint8_t digest[32]);
/* Commits what arrived and keeps it for a resume; then free the writer. */
int dd_replica_suspend(dd_replica_writer *rw);
/* Continues the kept receive of the snapshot with this content digest,
 * whose next position must be `from`.  DD_ENOENT if there is none. */
int dd_replica_resume(dd_replica_writer **out, dd_err *err, dd_store *s,
		      const uint8_t digest[32], uint64_t from, int chunker,
		      uint32_t block_size, int dv);
/* The resume token of the kept receive ("ddr1:<digest>:<next position>",
 * format/store.md §5) and its name; DD_ENOENT if there is none. */
int dd_replica_token(dd_store *s, dd_err *err, char *buf, size_t len,
		     char *name, size_t namelen);
/* fn(name, token, ctx) for every kept receive, in the order of their
 * ids (oldest first); a non-zero return stops it with DD_ECANCELED. */
typedef int (*dd_replica_token_fn)(const char *name, const char *token,
				   void *ctx);
int dd_replica_tokens(dd_store *s, dd_err *err, dd_replica_token_fn fn,
		      void *ctx);
/* The token of this (suspended) receive. */
int dd_replica_writer_token(const dd_replica_writer *rw, char *buf,
			    size_t len);
/* Reads a token back: the content digest and the next block. */
int dd_replica_token_parse(dd_err *err, const char *tok, uint8_t digest[32],
			   uint64_t *next);
/* Drops every kept receive whose writer is gone (a live resumer's
 * stays). */
int dd_replica_discard(dd_store *s, dd_err *err);

/* ---- healing from a good copy (heal.c, format/store.md §9.1) ---------------*/

/* A heal of store s: enters it (lock shared, recovery, as a writer) and
 * collects the DDT entries flagged DAMAGED or MISSING that a snapshot
 * references.  DD_ENOTSUP for a store not keyed by SHA-256. */
typedef struct dd_heal dd_heal;
int dd_heal_begin(dd_heal **out, dd_err *err, dd_store *s);
/* Wanted entries that have no copy yet. */
size_t dd_heal_wanted(const dd_heal *h);
/* A block of a stream: if wanted, decompressed and checked against hash
 * (DD_ECHECKSUM, DD_EFORMAT, DD_ECORRUPT), then appended to the heal's
 * pack; else skipped unread. */
int dd_heal_offer(dd_heal *h, dd_err *err, const uint8_t hash[32],
		  uint8_t codec, uint32_t lsize, uint32_t psize,
		  const void *payload);
/* Every wanted block src holds a good record of, read through its
 * checked path and appended. */
int dd_heal_from_store(dd_heal *h, dd_err *err, dd_store *src);
/* Syncs the copies and points the entries at them in one write
 * transaction (those still damaged or lost as the heal read them); then
 * reports each healed or still wanted block. */
int dd_heal_finish(dd_heal *h, dd_err *err, dd_heal_report_fn report,
		   void *ctx, dd_heal_result *out);
/* After a failure: cuts the heal's packs back to their empty ends. */
void dd_heal_abort(dd_heal *h);
/* Leaves the store; NULL is fine. */
void dd_heal_free(dd_heal *h);

#endif
