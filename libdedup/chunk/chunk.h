/*
 * chunk.h -- the block pipeline's module: what a byte stream becomes on
 * its way to a store, a scan or a stream.
 *
 * chunk/ owns everything that turns bytes into an ordered stream of
 * (block, hash):
 *
 *   chunk.c     block rules: sizes, counts, the length of an image's last
 *               block, zero blocks (holes: never hashed, never stored);
 *   cut.c       the cutter interface, the fixed-size cutter and the
 *               chunkers' rules (sizes, the longest block);
 *   fastcdc.c   the content-defined cutter (format/chunker.md): a gear
 *               hash with normalized chunking, two bytes a step;
 *   digest.c    the content digest of an image (format/store.md §6), the
 *               one hash over that stream;
 *   pipeline.c  the pipeline itself (pipeline.h): batches read from a
 *               source, cut, zero-tested and hashed two blocks at a time
 *               on a pool, and handed in order to a sink; prange.c the
 *               ranges of files it reads; pstage.c the pool stage of a
 *               ring of batches, which the raw receiver shares.
 *
 * It sits on common/ and hash/ only: no store, no stream, no codec (a
 * sink brings its compressor).  Its sinks (store/writer.c, scan/scan.c,
 * stream/rsend.c) plug their own stages in; the raw receiver
 * (stream/rrbatch.c), whose blocks come cut, uses its hash stage
 * (dd_blk_hash) and pool stage (pstage.h).
 */
#ifndef DD_CHUNK_CHUNK_H
#define DD_CHUNK_CHUNK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dedup.h"         /* enum dd_chunker */
#include "common/err.h"
#include "common/zero.h"    /* dd_is_zero: a zero block is all zero bytes */
#include "hash/hash.h"

/* ---- block rules (chunk.c) -----------------------------------------------*/

/* True for a power of two in [DD_BLOCK_SIZE_MIN, DD_BLOCK_SIZE_MAX]. */
bool dd_block_size_valid(uint64_t bs);

/* Number of blocks an image of `size` bytes has. */
static inline uint64_t dd_block_count(uint64_t size, uint32_t bs)
{
	return size / bs + (size % bs != 0);
}

/* The logical size of block idx (< dd_block_count) of an image of `size`
 * bytes: bs, except for a short last block. */
static inline uint32_t dd_block_lsize(uint64_t size, uint32_t bs, uint64_t idx)
{
	uint64_t off = idx * bs;

	return size - off >= bs ? bs : (uint32_t)(size - off);
}

/* ---- cutters (cut.c) -----------------------------------------------------*/

/*
 * A cutter says where blocks end.  Given the len >= 1 bytes that follow
 * the end of the previous block, cu_next returns the length of the next
 * block: from 1 to cu_max, shorter than len only at a cut point of its
 * choosing; or 0 when no cut point lies within len and more bytes may
 * come (!final).  When `final`, the bytes are the image's last and it
 * must cut (a last block may be short).  The fixed cutter cuts every
 * cu_max bytes and never looks at the bytes (cu_reads false: data may be
 * NULL); the content-defined one (FastCDC) sets cu_reads, and then the
 * pipeline reads a batch's bytes before cutting it.  Blocks of a
 * content-defined cutter have any length up to cu_max; cu_min is the
 * shortest it cuts before an image's end (it bounds a batch's block
 * count).  Cutters keep no state between calls: a block's end depends on
 * its own bytes only.
 */
typedef struct dd_cutter dd_cutter;
typedef size_t (*dd_cut_fn)(const dd_cutter *c, const uint8_t *data,
			    size_t len, bool final);

struct dd_cutter {
	dd_cut_fn cu_next;
	uint32_t cu_min;
	uint32_t cu_max;
	bool cu_reads;
	/* a content-defined cutter's own: the size where the mask changes,
	 * and the masks before and after it (format/chunker.md §3) */
	uint32_t cu_avg;
	uint64_t cu_mask_s, cu_mask_l;
};

/* A cutter of fixed-size blocks of bs bytes (dd_block_size_valid, or any
 * size from 1 in tests). */
void dd_cutter_fixed(dd_cutter *c, uint32_t bs);

/* The FastCDC cutter of average avg (dd_chunker_valid). */
void dd_cutter_fastcdc(dd_cutter *c, uint32_t avg);

/* Is bs a valid size for chunker (enum dd_chunker): a fixed block size
 * (dd_block_size_valid) or a FastCDC average (a power of two in
 * [DD_FASTCDC_AVG_MIN, DD_FASTCDC_AVG_MAX])? */
bool dd_chunker_valid(int chunker, uint64_t bs);
/* Its longest block: bs, or 4 * bs for FastCDC (at most 1 MiB). */
uint32_t dd_chunker_max(int chunker, uint32_t bs);
/* "fixed", "fastcdc", or "?" */
const char *dd_chunker_name(int chunker);
/* The cutter of a valid (chunker, bs). */
void dd_cutter_init(dd_cutter *c, int chunker, uint32_t bs);

/* The gear table of format/chunker.md §2 (256 entries), for tests. */
const uint64_t *dd_fastcdc_gear(void);

/* ---- the content digest (digest.c; format/store.md §6) --------------------*/

/* SHA-256 over the image's blocks, then its size (le64) and block size
 * (le32).  Version 1 of fixed blocks: each block's hash in order (32 zero
 * bytes for a hole).  Run-based -- content-defined blocks (chunker
 * fastcdc) and version 2 of fixed blocks --: each hash followed by the
 * block's length (le64), a run of holes once with its total length, then
 * size, block size and the chunker (u8). */
typedef struct dd_digest dd_digest;

/* Digest versions of fixed blocks (format/store.md §6); an image cut by
 * content has one digest, run-based, whatever the version says. */
enum { DD_DIGEST_V1 = 1, DD_DIGEST_V2 = 2 };

/* Does a run of holes cost one entry in this digest, whatever its length
 * (content-defined blocks, or fixed blocks of version 2)? */
static inline bool dd_digest_runs(int chunker, int version)
{
	return chunker != DD_CHUNKER_FIXED || version == DD_DIGEST_V2;
}

/* block_size: of every block of a fixed image but the last (the size
 * given to dd_digest_final says how short that one is). */
int dd_digest_new(dd_digest **out, dd_err *err, int chunker, int version,
		  uint32_t block_size);
/* The next block: its hash, or NULL for a hole, and its length (only a
 * content-defined image's digest takes it in; fixed: any). */
void dd_digest_block(dd_digest *d, const uint8_t *hash_or_null, uint64_t len);
/* count holes at once (fixed): O(1) in version 2, 32 bytes each in 1 */
void dd_digest_zeros(dd_digest *d, uint64_t count);
/* Blocks and holes so far, as the formats count them: a run of holes is
 * one hole in a content-defined image (format/chunker.md §5), every fixed
 * block one (either version). */
void dd_digest_counts(const dd_digest *d, uint64_t *blocks, uint64_t *zero);
/* Writes the digest; d is then ready for another image of the same
 * chunker, version and block size. */
void dd_digest_final(dd_digest *d, uint64_t size, uint32_t block_size,
		     uint8_t out[DD_HASH_SIZE]);
void dd_digest_free(dd_digest *d);

#endif
