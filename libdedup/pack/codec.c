/*
 * codec.c -- block payload codecs: none and zstd (format/pack.md §4).
 *
 * The only includer of <zstd.h>.  A dd_codec_ctx holds one ZSTD_CCtx and
 * one ZSTD_DCtx, created once and reused for every block, because creating
 * them per block costs more than compressing a small block.  A context is
 * used by one thread at a time (the store keeps one per worker).
 *
 * Compression never makes a block bigger: when zstd's output is not smaller
 * than the input, the block is stored with DD_CODEC_NONE.
 *
 * Decompression treats the payload as hostile.  Before zstd runs, the frame
 * header must declare exactly pr_lsize bytes and the frame must fill the
 * payload exactly (one frame, no dictionary), so the output buffer of
 * pr_lsize bytes is always enough and nothing past the frame is ignored
 * silently.  Every zstd failure is DD_ECORRUPT with zstd's reason.
 */
#include <string.h>

#include <zstd.h>
#include <zstd_errors.h>

#include <dedup.h>

#include "common/alloc.h"
#include "pack.h"

struct dd_codec_ctx {
	int cc_codec;           /* enum dd_codec used to compress */
	int cc_level;           /* zstd level */
	ZSTD_CCtx *cc_cctx;     /* NULL for DD_CODEC_NONE */
	ZSTD_DCtx *cc_dctx;     /* always: any store may hold zstd records */
};

/* The parameters every block is compressed with; they stay set across
 * blocks (ZSTD_compress2 resets only the session).  Level 1 takes the
 * minimum match of level 2 (5 bytes instead of 6 for a block of 128 KiB or
 * less): on system binaries and libraries -- the benchmark's tar of
 * /usr/lib -- packs come out 2.1% smaller for 6% more compression CPU,
 * the best trade of the level-1 variants measured (tests/bench/README.md).
 * Only the encoder changes: the frames are ordinary zstd frames. */
static int dd_codec_tune(ZSTD_CCtx *cctx, dd_err *err, int level)
{
	size_t r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel,
					  level);

	if (!ZSTD_isError(r) && level == 1)
		r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_minMatch, 5);
	if (ZSTD_isError(r))
		return dd_err_set(err, DD_EINVAL, "zstd level %d: %s", level,
				  ZSTD_getErrorName(r));
	return 0;
}

int dd_codec_new(dd_codec_ctx **out, dd_err *err, int codec, int level)
{
	dd_codec_ctx *c;
	int rc = 0;

	if (!out)
		return dd_err_set(err, DD_EINVAL, "codec: NULL argument");
	if (codec != DD_CODEC_NONE && codec != DD_CODEC_ZSTD)
		return dd_err_set(err, DD_EINVAL, "codec %d unknown", codec);
	if (codec == DD_CODEC_ZSTD && (level < 1 || level > 19))
		return dd_err_set(err, DD_EINVAL,
				  "zstd level %d outside [1, 19]", level);
	c = dd_calloc(1, sizeof(*c));
	if (!c)
		return dd_err_set(err, DD_ENOMEM, "codec: out of memory");
	c->cc_codec = codec;
	c->cc_level = level;
	c->cc_dctx = ZSTD_createDCtx();
	if (!c->cc_dctx)
		rc = dd_err_set(err, DD_ENOMEM, "zstd: cannot create a "
				"decompression context");
	if (!rc && codec == DD_CODEC_ZSTD) {
		c->cc_cctx = ZSTD_createCCtx();
		rc = c->cc_cctx ? dd_codec_tune(c->cc_cctx, err, level)
				: dd_err_set(err, DD_ENOMEM, "zstd: cannot "
					     "create a compression context");
	}
	if (rc) {
		dd_codec_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

void dd_codec_free(dd_codec_ctx *c)
{
	if (!c)
		return;
	ZSTD_freeCCtx(c->cc_cctx);
	ZSTD_freeDCtx(c->cc_dctx);
	dd_free(c);
}

size_t dd_codec_bound(size_t len)
{
	/* zstd's bound is >= len, so it also covers the stored copy. */
	return ZSTD_compressBound(len);
}

int dd_codec_compress(dd_codec_ctx *c, dd_err *err, void *dst,
		      const void *src, size_t len, uint32_t *psize,
		      uint8_t *codec_used)
{
	size_t r;

	if (!c || !dst || !src || !psize || !codec_used)
		return dd_err_set(err, DD_EINVAL, "codec: NULL argument");
	if (len < 1 || len > DD_BLOCK_SIZE_MAX)
		return dd_err_set(err, DD_EINVAL,
				  "codec: block size %zu outside [1, %u]", len,
				  DD_BLOCK_SIZE_MAX);
	if (c->cc_codec == DD_CODEC_ZSTD) {
		r = ZSTD_compress2(c->cc_cctx, dst, dd_codec_bound(len), src,
				   len);
		if (ZSTD_isError(r)) {
			if (ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation)
				return dd_err_set(err, DD_ENOMEM,
						  "zstd compress: %s",
						  ZSTD_getErrorName(r));
			return dd_err_set(err, DD_EIO, "zstd compress: %s",
					  ZSTD_getErrorName(r));
		}
		if (r < len) {
			*psize = (uint32_t)r;
			*codec_used = DD_CODEC_ZSTD;
			return 0;
		}
		/* Did not shrink: a copy reads faster and is no bigger. */
	}
	memcpy(dst, src, len);
	*psize = (uint32_t)len;
	*codec_used = DD_CODEC_NONE;
	return 0;
}

int dd_codec_decompress(dd_codec_ctx *c, dd_err *err, const dd_pack_rec *rec,
			const void *payload, void *dst)
{
	unsigned long long fcs;
	size_t lsize, psize, r;

	if (!c || !rec || !payload || !dst)
		return dd_err_set(err, DD_EINVAL, "codec: NULL argument");
	lsize = rec->pr_lsize;
	psize = rec->pr_psize;
	/* dst holds pr_lsize bytes; the record may come from anywhere. */
	if (lsize < 1 || lsize > DD_BLOCK_SIZE_MAX)
		return dd_err_set(err, DD_ECORRUPT,
				  "record lsize %zu outside [1, %u]", lsize,
				  DD_BLOCK_SIZE_MAX);
	switch (rec->pr_codec) {
	case DD_CODEC_NONE:
		if (psize != lsize)
			return dd_err_set(err, DD_ECORRUPT,
					  "uncompressed payload of %zu bytes for lsize %zu",
					  psize, lsize);
		memcpy(dst, payload, lsize);
		return 0;
	case DD_CODEC_ZSTD:
		break;
	default:
		return dd_err_set(err, DD_ENOTSUP,
				  "record codec %u is not supported by this build",
				  (unsigned)rec->pr_codec);
	}

	if (psize < 1)
		return dd_err_set(err, DD_ECORRUPT, "empty zstd payload");
	fcs = ZSTD_getFrameContentSize(payload, psize);
	if (fcs == ZSTD_CONTENTSIZE_ERROR)
		return dd_err_set(err, DD_ECORRUPT,
				  "zstd payload is not a valid frame");
	if (fcs == ZSTD_CONTENTSIZE_UNKNOWN)
		return dd_err_set(err, DD_ECORRUPT,
				  "zstd frame has no content size");
	if (fcs != lsize)
		return dd_err_set(err, DD_ECORRUPT,
				  "zstd frame content size %llu != lsize %zu", fcs,
				  lsize);
	/* format/pack.md §4: exactly one frame fills the payload. */
	r = ZSTD_findFrameCompressedSize(payload, psize);
	if (ZSTD_isError(r))
		return dd_err_set(err, DD_ECORRUPT, "zstd frame: %s",
				  ZSTD_getErrorName(r));
	if (r != psize)
		return dd_err_set(err, DD_ECORRUPT,
				  "zstd frame of %zu bytes in a payload of %zu",
				  r, psize);
	if (ZSTD_getDictID_fromFrame(payload, psize) != 0)
		return dd_err_set(err, DD_ECORRUPT,
				  "zstd frame requires a dictionary");
	r = ZSTD_decompressDCtx(c->cc_dctx, dst, lsize, payload, psize);
	if (ZSTD_isError(r)) {
		if (ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation)
			return dd_err_set(err, DD_ENOMEM, "zstd decompress: %s",
					  ZSTD_getErrorName(r));
		return dd_err_set(err, DD_ECORRUPT, "zstd decompress: %s",
				  ZSTD_getErrorName(r));
	}
	if (r != lsize)
		return dd_err_set(err, DD_ECORRUPT,
				  "zstd payload decoded to %zu bytes, lsize %zu", r,
				  lsize);
	return 0;
}
