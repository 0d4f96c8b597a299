/*
 * stream.h -- the replication stream: record encoder and decoder.
 *
 * A stream is a HEADER record, then DATA / REF / ZERO records in increasing
 * block order, then an END record (format/stream.md).  Every record is
 * framed with its type, length and CRC-32C, so damage is found at the
 * record where it happens; END carries totals and a SHA-256 of every byte
 * before it.  The encoder and decoder know nothing of stores or LMDB;
 * send.c, recv.c and heal.c reach a store only through store/replica.h:
 *
 *   senc.c    the record encoder, sdec.c the decoder (this header;
 *             wire.h holds the rules they share);
 *   send.c    dd_send: a store's snapshot as a stream (store/replica.h);
 *   recv.c    dd_recv: a stream into a store, through the receiving
 *             writer (store/replica.h);
 *   rsend.c   dd_send_fd: a file or device as a stream, without a store,
 *             through the block pipeline (chunk/pipeline.h);
 *   heal.c    good copies for a heal, from another store or a stream;
 *   rrecv.c   dd_recv_fd and dd_stream_check: a stream rebuilt into a file
 *             or device, or only checked (rrbatch.c its ring of batches);
 *   rawio.c   what rsend.c and rrecv.c share: fd callbacks, codecs.
 */
#ifndef DD_STREAM_STREAM_H
#define DD_STREAM_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dedup.h"
#include "chunk/chunk.h"
#include "common/err.h"

#define DD_STREAM_VERSION 1
#define DD_STREAM_HASH_SHA256 1

enum dd_srec_type {
	DD_SREC_HEADER = 1,
	DD_SREC_DATA = 2,
	DD_SREC_REF = 3,
	DD_SREC_ZERO = 4,
	DD_SREC_END = 5
};

/* Limits and fixed sizes of format/stream.md §3. */
#define DD_SHDR_FIXED 112u           /* HEADER payload without the names */
#define DD_SHDR_MAX 4096u            /* largest HEADER payload */
#define DD_SDATA_FIXED 64u           /* DATA payload before the block bytes */
#define DD_SREF_LEN 48u
#define DD_SZERO_LEN 16u
#define DD_SEND_LEN 72u
#define DD_STREAM_SIZE_MAX ((uint64_t)1 << 63)  /* largest image */
/* Most blocks an image of fixed blocks with a content digest of version
 * 1 may have (format/stream.md §3.1): that digest hashes 32 bytes for
 * every block, a hole too, so what a stream's size claims must be bounded
 * before a receiver spends time on it -- 2^32 blocks is 128 GiB of
 * SHA-256, about a minute.  A digest of version 2 counts a run of holes
 * once: only the image's size bounds it. */
#define DD_STREAM_BLOCKS_MAX ((uint64_t)1 << 32)

/* Is `size` an image a stream may carry (§3, §3.1), its digest of
 * version dv? */
static inline bool dd_stream_size_ok(int chunker, int dv, uint32_t block_size,
				     uint64_t size)
{
	return size <= DD_STREAM_SIZE_MAX &&
	       (dd_digest_runs(chunker, dv) ||
		dd_block_count(size, block_size) <= DD_STREAM_BLOCKS_MAX);
}

/* Header flags (sh_flags). */
#define DD_SH_INCREMENTAL 0x1u
/* The content digest is of version 2 (format/stream.md §4, format/store.md
 * §6): fixed blocks only; a reader of version 1 refuses the bit. */
#define DD_SH_DIGEST2 0x2u
#define DD_SH_KNOWN (DD_SH_INCREMENTAL | DD_SH_DIGEST2)
/* Header feature bits (sh_features, format/stream.md §12): blocks of
 * varying length, cut by the chunker in header byte 26; positions are
 * byte offsets. */
#define DD_SF_VARBLOCK 0x1u

typedef struct dd_stream_hdr {
	uint32_t sh_version;
	uint32_t sh_features;        /* must-understand feature bits: 0, or
					DD_SF_VARBLOCK iff sh_chunker is not
					fixed (the encoder sets it) */
	uint32_t sh_flags;
	int sh_chunker;              /* enum dd_chunker */
	uint32_t sh_block_size;      /* fixed: the size; else the average */
	uint8_t sh_hash_alg;         /* DD_STREAM_HASH_SHA256 */
	uint8_t sh_codec;            /* codec of DATA payloads (informative;
					each DATA record names its own) */
	char sh_name[DD_NAME_MAX + 1];
	char sh_base[DD_NAME_MAX + 1];  /* "" unless incremental */
	uint64_t sh_size;            /* logical bytes of the image */
	uint8_t sh_digest[32];       /* content digest (format/store.md §6) */
	uint8_t sh_base_digest[32];
	uint64_t sh_resume_from;     /* first position the stream carries */
} dd_stream_hdr;

/*
 * Positions: a block index in a stream of fixed blocks; a byte offset in
 * one of content-defined blocks (DD_SF_VARBLOCK), whose ZERO records
 * count bytes, each one hole, and whose records follow each other byte
 * for byte (format/stream.md §12).
 */
typedef struct dd_srec {
	int sr_type;
	uint64_t sr_idx;             /* DATA, REF, ZERO: first position */
	uint64_t sr_count;           /* ZERO: blocks in the run (var: bytes) */
	uint8_t sr_hash[32];         /* DATA, REF */
	uint8_t sr_codec;            /* DATA */
	uint32_t sr_lsize;           /* DATA, REF: logical bytes */
	uint32_t sr_psize;           /* DATA: payload bytes */
	const uint8_t *sr_payload;   /* DATA: valid until the next decode */
	/* END: totals as the sender counted them */
	uint64_t sr_blocks;          /* data + ref + zero blocks */
	uint64_t sr_data;
	uint64_t sr_refs;
	uint64_t sr_zero_blocks;     /* var: ZERO records */
} dd_srec;

/* The content digest version opts ask for: 0 (the sender's default), 1
 * or 2; -1 for anything else.  A struct before version 3 asks for 0. */
static inline int dd_send_opts_dv(const dd_send_opts *o)
{
	int dv = o && o->version >= 3 ? o->digest_version : 0;

	return dv >= 0 && dv <= DD_DIGEST_V2 ? dv : -1;
}

/* The content digest version of a stream's header. */
static inline int dd_shdr_dv(const dd_stream_hdr *h)
{
	return h->sh_flags & DD_SH_DIGEST2 ? DD_DIGEST_V2 : DD_DIGEST_V1;
}

/* The longest block of a stream's header (chunker, block size). */
uint32_t dd_stream_block_max(const dd_stream_hdr *h);

/* ---- encoder ------------------------------------------------------------*/

typedef struct dd_senc dd_senc;

int dd_senc_new(dd_senc **out, dd_err *err, dd_write_fn fn, void *ctx);
void dd_senc_free(dd_senc *e);
int dd_senc_header(dd_senc *e, dd_err *err, const dd_stream_hdr *h);
int dd_senc_data(dd_senc *e, dd_err *err, uint64_t idx, const uint8_t *hash,
		 uint8_t codec, uint32_t lsize, uint32_t psize,
		 const void *payload);
int dd_senc_ref(dd_senc *e, dd_err *err, uint64_t idx, const uint8_t *hash,
		uint32_t lsize);
/* Adjacent zero runs are merged into one record. */
int dd_senc_zero(dd_senc *e, dd_err *err, uint64_t idx, uint64_t count);
/* Flushes a pending zero run and writes END (totals, stream digest). */
int dd_senc_end(dd_senc *e, dd_err *err);
/* Bytes written so far. */
uint64_t dd_senc_bytes(const dd_senc *e);

/* ---- decoder ------------------------------------------------------------*/

typedef struct dd_sdec dd_sdec;

int dd_sdec_new(dd_sdec **out, dd_err *err, dd_read_fn fn, void *ctx);
void dd_sdec_free(dd_sdec *d);

/* The public description of a stream with header h, named name (the
 * header's, or the name it is received under). */
void dd_stream_info_of(dd_stream_info *in, const dd_stream_hdr *h,
		       const char *name);

/* Reads and checks the HEADER: magic, version (DD_EVERSION if newer),
 * features (DD_ENOTSUP), block size, name (no '/', "..", NUL), limits. */
int dd_sdec_header(dd_sdec *d, dd_err *err, dd_stream_hdr *out);

/* Reads the next record and returns its type (> 0), or a negative DD_E*
 * code.  Checks framing and CRC (DD_ECHECKSUM), sizes (DD_EFORMAT), that
 * block indices increase and stay within the image, and at END the totals
 * and the stream digest.  A stream that ends before END is DD_EFORMAT
 * "stream cut short".  After END it keeps returning DD_SREC_END. */
int dd_sdec_next(dd_sdec *d, dd_err *err, dd_srec *out);

uint64_t dd_sdec_bytes(const dd_sdec *d);

/* After END: checks that the input ends there too (DD_EFORMAT "data after
 * the END record" otherwise).  Reads at most one more byte. */
int dd_sdec_expect_eof(dd_sdec *d, dd_err *err);

/* ---- store-less streams (rrecv.c, rawio.c) --------------------------------*/

/* dd_stream_check, also returning the number of REF records that name a
 * block not carried earlier in the stream (allowed in incremental and
 * resumed streams: the receiver holds them). */
int dd_stream_check_ex(const dd_recv_opts *opts, dd_read_fn fn, void *ctx,
		       dd_stream_info *info, uint64_t *base_refs);

/* n codec contexts of one codec and level, one per pool worker; on
 * failure the codec's code, with a message in err. */
typedef struct dd_codec_ctx dd_codec_ctx;
int dd_raw_codecs(dd_codec_ctx ***out, dd_err *err, unsigned n, int codec,
		  int level);
void dd_raw_codecs_free(dd_codec_ctx **c, unsigned n);

#endif
