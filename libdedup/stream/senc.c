/*
 * senc.c -- the replication stream's record encoder (format/stream.md).
 *
 * Records are framed (§2) into a 1 MiB buffer that goes to the write
 * callback when full, so a pipe sees large writes whatever the record
 * sizes.  The encoder checks its caller as strictly as the decoder
 * (sdec.c) checks a stream (order, sizes, codecs): a sender bug becomes
 * DD_EINVAL here rather than a stream every receiver refuses.  Every byte
 * before END also goes through SHA-256 for the stream digest (§8).  It
 * knows nothing of stores or of blocks' contents.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dedup.h"
#include "chunk/chunk.h"
#include "common/alloc.h"
#include "common/crc32c.h"
#include "common/endian.h"
#include "hash/hash.h"
#include "pack/pack.h"
#include "stream/sdig.h"
#include "stream/stream.h"
#include "stream/wire.h"

#define DD_SENC_BUF ((size_t)1 << 20) /* encoder output buffer */

enum { DD_SENC_NEW, DD_SENC_BODY, DD_SENC_DONE, DD_SENC_FAILED };

struct dd_senc {
	dd_write_fn se_fn;
	void *se_ctx;
	uint8_t *se_buf;
	size_t se_len;             /* bytes waiting in se_buf */
	uint64_t se_bytes;         /* stream bytes produced, buffered included */
	dd_sdig *se_dig;           /* stream digest (§8) */
	int se_state;
	uint32_t se_bs;
	bool se_var;               /* content-defined: positions are bytes */
	uint32_t se_max;           /* the longest block */
	uint64_t se_size;
	uint64_t se_nblocks;       /* the end of positions: blocks, or bytes */
	uint64_t se_next;          /* lowest position the next record may
				      carry (var: the one it must) */
	uint64_t se_zidx, se_zcount;  /* pending zero run, count 0 = none */
	uint64_t se_blocks, se_data, se_refs, se_zero_blocks;
};

int dd_senc_new(dd_senc **out, dd_err *err, dd_write_fn fn, void *ctx)
{
	dd_senc *e;

	if (!out || !fn)
		return dd_err_set(err, DD_EINVAL, "stream encoder: no callback");
	e = dd_calloc(1, sizeof(*e));
	if (!e)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	e->se_buf = dd_malloc(DD_SENC_BUF);
	if (!e->se_buf || dd_sdig_new(&e->se_dig) != 0) {
		dd_senc_free(e);
		return dd_err_set(err, DD_ENOMEM,
				  "out of memory for the stream encoder");
	}
	e->se_fn = fn;
	e->se_ctx = ctx;
	*out = e;
	return 0;
}

void dd_senc_free(dd_senc *e)
{
	if (!e)
		return;
	dd_sdig_free(e->se_dig);
	dd_free(e->se_buf);
	dd_free(e);
}

uint64_t dd_senc_bytes(const dd_senc *e)
{
	return e ? e->se_bytes : 0;
}

/* Hands len bytes to the callback.  A failing dd_fd_write left its own
 * message (with errno text) in the thread record: keep that one. */
static int dd_senc_write(dd_senc *e, dd_err *err, const void *p, size_t len)
{
	int rc;

	if (len == 0)
		return 0;
	rc = e->se_fn(e->se_ctx, p, len);
	if (rc == 0)
		return 0;
	e->se_state = DD_SENC_FAILED;
	if (rc > 0)
		rc = DD_EIO;
	if (e->se_fn == dd_fd_write && dd_thread_err()->de_code == rc) {
		if (err != dd_thread_err())
			dd_err_copy(err, dd_thread_err());
		return rc;
	}
	return dd_err_set(err, rc, "stream write failed before byte %llu",
			  (unsigned long long)e->se_bytes);
}

static int dd_senc_flush(dd_senc *e, dd_err *err)
{
	int rc = dd_senc_write(e, err, e->se_buf, e->se_len);

	e->se_len = 0;
	return rc;
}

/* Appends bytes to the output (and to the digest unless it is END's). */
static int dd_senc_put(dd_senc *e, dd_err *err, const void *p, size_t len,
		       bool digest)
{
	int rc;

	if (digest)
		dd_sdig_update(e->se_dig, p, len);
	e->se_bytes += len;
	if (e->se_len + len > DD_SENC_BUF) {
		rc = dd_senc_flush(e, err);
		if (rc)
			return rc;
		if (len >= DD_SENC_BUF / 2)  /* big payload: no copy */
			return dd_senc_write(e, err, p, len);
	}
	memcpy(e->se_buf + e->se_len, p, len);
	e->se_len += len;
	return 0;
}

/* Frames and emits one record (§2): a fixed part and an optional payload
 * (DATA's compressed bytes) that are one record payload together. */
static int dd_senc_record(dd_senc *e, dd_err *err, int type,
			  const uint8_t *fixed, size_t flen,
			  const void *payload, size_t plen)
{
	uint8_t f[DD_SFRAME];
	bool digest = type != DD_SREC_END;
	uint32_t crc = dd_crc32c(0, fixed, flen);
	int rc;

	if (plen)
		crc = dd_crc32c(crc, payload, plen);
	f[0] = (uint8_t)type;
	f[1] = 0;
	dd_put_le16(f + 2, 0);
	dd_put_le32(f + 4, (uint32_t)(flen + plen));
	dd_put_le32(f + 8, crc);
	dd_put_le32(f + 12, dd_crc32c(0, f, 12));
	rc = dd_senc_put(e, err, f, sizeof(f), digest);
	if (!rc)
		rc = dd_senc_put(e, err, fixed, flen, digest);
	if (!rc && plen)
		rc = dd_senc_put(e, err, payload, plen, digest);
	return rc;
}

static int dd_senc_usable(dd_senc *e, dd_err *err, int want)
{
	if (!e)
		return dd_err_set(err, DD_EINVAL, "stream encoder: NULL handle");
	if (e->se_state == want)
		return 0;
	if (e->se_state == DD_SENC_FAILED)
		return dd_err_set(err, DD_ESTATE,
				  "stream encoder: used after an error");
	return dd_err_set(err, DD_ESTATE, "stream encoder: %s",
			  e->se_state == DD_SENC_NEW ? "no HEADER yet" :
			  e->se_state == DD_SENC_DONE ? "stream already ended" :
			  "HEADER already written");
}

static int dd_senc_fail(dd_senc *e, dd_err *err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Caller misuse: the stream would be refused by every receiver. */
static int dd_senc_fail(dd_senc *e, dd_err *err, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	e->se_state = DD_SENC_FAILED;
	return dd_err_set(err, DD_EINVAL, "stream encoder: %s", msg);
}

uint32_t dd_stream_block_max(const dd_stream_hdr *h)
{
	return dd_chunker_max(h->sh_chunker, h->sh_block_size);
}

/* The feature bits a header of this chunker has (§12). */
static uint32_t dd_shdr_features(const dd_stream_hdr *h)
{
	return h->sh_chunker == DD_CHUNKER_FIXED ? 0 : DD_SF_VARBLOCK;
}

static int dd_senc_hdr_check(dd_senc *e, dd_err *err, const dd_stream_hdr *h)
{
	size_t nl = strnlen(h->sh_name, sizeof(h->sh_name));
	size_t bl = strnlen(h->sh_base, sizeof(h->sh_base));
	bool incr = h->sh_flags & DD_SH_INCREMENTAL;
	uint64_t nb;

	if (h->sh_version != DD_STREAM_VERSION ||
	    (h->sh_features & ~dd_shdr_features(h)) ||
	    (h->sh_flags & ~DD_SH_KNOWN) ||
	    (h->sh_flags & DD_SH_DIGEST2 &&
	     h->sh_chunker != DD_CHUNKER_FIXED) ||
	    h->sh_hash_alg != DD_STREAM_HASH_SHA256 ||
	    (h->sh_codec != DD_CODEC_NONE && h->sh_codec != DD_CODEC_ZSTD))
		return dd_senc_fail(e, err, "bad version/features/flags/hash/"
				    "codec in the header");
	if (!dd_chunker_valid(h->sh_chunker, h->sh_block_size) ||
	    !dd_stream_size_ok(h->sh_chunker, dd_shdr_dv(h), h->sh_block_size,
			       h->sh_size))
		return dd_senc_fail(e, err, "bad chunker %d, block size %u or "
				    "size %llu", h->sh_chunker,
				    h->sh_block_size,
				    (unsigned long long)h->sh_size);
	if (!dd_sname_ok((const uint8_t *)h->sh_name, nl) ||
	    (incr && !dd_sname_ok((const uint8_t *)h->sh_base, bl)) ||
	    (!incr && bl != 0))
		return dd_senc_fail(e, err, "bad name or base (lengths %zu, "
				    "%zu)", nl, bl);
	nb = h->sh_chunker == DD_CHUNKER_FIXED
		     ? dd_block_count(h->sh_size, h->sh_block_size)
		     : h->sh_size;
	if (h->sh_resume_from > nb)
		return dd_senc_fail(e, err, "resume_from %llu past %llu blocks",
				    (unsigned long long)h->sh_resume_from,
				    (unsigned long long)nb);
	return 0;
}

/* §4: the HEADER payload. */
static size_t dd_shdr_encode(uint8_t *p, const dd_stream_hdr *h)
{
	size_t nl = strlen(h->sh_name), bl = strlen(h->sh_base);

	memset(p, 0, DD_SHDR_FIXED);
	memcpy(p, dd_stream_magic, 8);
	dd_put_le32(p + 8, h->sh_version);
	dd_put_le32(p + 12, dd_shdr_features(h));
	dd_put_le32(p + 16, h->sh_flags);
	dd_put_le32(p + 20, h->sh_block_size);
	p[24] = h->sh_hash_alg;
	p[25] = h->sh_codec;
	if (h->sh_chunker != DD_CHUNKER_FIXED)
		p[26] = (uint8_t)h->sh_chunker;
	dd_put_le64(p + 28, h->sh_size);
	dd_put_le64(p + 36, h->sh_resume_from);
	memcpy(p + 44, h->sh_digest, 32);
	memcpy(p + 76, h->sh_base_digest, 32);
	dd_put_le16(p + 108, (uint16_t)nl);
	memcpy(p + 110, h->sh_name, nl);
	dd_put_le16(p + 110 + nl, (uint16_t)bl);
	memcpy(p + 112 + nl, h->sh_base, bl);
	return DD_SHDR_FIXED + nl + bl;
}

int dd_senc_header(dd_senc *e, dd_err *err, const dd_stream_hdr *h)
{
	uint8_t p[DD_SHDR_MAX];
	int rc;

	rc = dd_senc_usable(e, err, DD_SENC_NEW);
	if (rc)
		return rc;
	if (!h)
		return dd_senc_fail(e, err, "no header");
	rc = dd_senc_hdr_check(e, err, h);
	if (rc)
		return rc;
	e->se_bs = h->sh_block_size;
	e->se_var = h->sh_chunker != DD_CHUNKER_FIXED;
	e->se_max = dd_stream_block_max(h);
	e->se_size = h->sh_size;
	e->se_nblocks = e->se_var ? h->sh_size
				  : dd_block_count(h->sh_size, h->sh_block_size);
	e->se_next = h->sh_resume_from;
	rc = dd_senc_record(e, err, DD_SREC_HEADER, p, dd_shdr_encode(p, h),
			    NULL, 0);
	if (!rc)
		e->se_state = DD_SENC_BODY;
	return rc;
}

static int dd_senc_zero_flush(dd_senc *e, dd_err *err)
{
	uint8_t p[DD_SZERO_LEN];

	if (!e->se_zcount)
		return 0;
	dd_put_le64(p, e->se_zidx);
	dd_put_le64(p + 8, e->se_zcount);
	e->se_zcount = 0;
	return dd_senc_record(e, err, DD_SREC_ZERO, p, sizeof(p), NULL, 0);
}

/* Index and size checks shared by DATA and REF (§6). */
static int dd_senc_block_check(dd_senc *e, dd_err *err, uint64_t idx,
			       const uint8_t *hash, uint32_t lsize)
{
	if (!hash)
		return dd_senc_fail(e, err, "no hash for block %llu",
				    (unsigned long long)idx);
	if (idx < e->se_next || idx >= e->se_nblocks ||
	    (e->se_var && idx != e->se_next))
		return dd_senc_fail(e, err, "block %llu out of order or past "
				    "the image (next allowed %llu)",
				    (unsigned long long)idx,
				    (unsigned long long)e->se_next);
	if (e->se_var ? lsize == 0 || lsize > e->se_max ||
			lsize > e->se_size - idx
		      : lsize != dd_block_lsize(e->se_size, e->se_bs, idx))
		return dd_senc_fail(e, err, "block %llu: lsize %llu is not the "
				    "block's size", (unsigned long long)idx,
				    (unsigned long long)lsize);
	return dd_senc_zero_flush(e, err);
}

/* DATA and REF (§5, §6) start alike, with the block index and its hash,
 * and each is one block of the image. */
static int dd_senc_block(dd_senc *e, dd_err *err, int type, uint8_t *p,
			 size_t len, uint64_t idx, const uint8_t *hash,
			 uint32_t lsize, const void *payload, uint32_t psize)
{
	int rc;

	dd_put_le64(p, idx);
	memcpy(p + 8, hash, 32);
	rc = dd_senc_record(e, err, type, p, len, payload, psize);
	if (rc)
		return rc;
	e->se_next = idx + (e->se_var ? lsize : 1);
	e->se_blocks++;
	return 0;
}

int dd_senc_data(dd_senc *e, dd_err *err, uint64_t idx, const uint8_t *hash,
		 uint8_t codec, uint32_t lsize, uint32_t psize,
		 const void *payload)
{
	uint8_t p[DD_SDATA_FIXED];
	const char *why;
	int rc;

	rc = dd_senc_usable(e, err, DD_SENC_BODY);
	if (rc)
		return rc;
	why = dd_sdata_bad(codec, lsize, psize);
	if (why || !payload)
		return dd_senc_fail(e, err, "DATA block %llu: bad payload "
				    "(%s, psize %u)", (unsigned long long)idx,
				    why ? why : "no payload", psize);
	rc = dd_senc_block_check(e, err, idx, hash, lsize);
	if (rc)
		return rc;
	memset(p, 0, sizeof(p));
	p[40] = codec;
	dd_put_le32(p + 44, lsize);
	dd_put_le32(p + 48, psize);
	rc = dd_senc_block(e, err, DD_SREC_DATA, p, sizeof(p), idx, hash,
			   lsize, payload, psize);
	if (!rc)
		e->se_data++;
	return rc;
}

int dd_senc_ref(dd_senc *e, dd_err *err, uint64_t idx, const uint8_t *hash,
		uint32_t lsize)
{
	uint8_t p[DD_SREF_LEN];
	int rc;

	rc = dd_senc_usable(e, err, DD_SENC_BODY);
	if (!rc)
		rc = dd_senc_block_check(e, err, idx, hash, lsize);
	if (rc)
		return rc;
	memset(p, 0, sizeof(p));
	dd_put_le32(p + 40, lsize);
	rc = dd_senc_block(e, err, DD_SREC_REF, p, sizeof(p), idx, hash,
			   lsize, NULL, 0);
	if (!rc)
		e->se_refs++;
	return rc;
}

int dd_senc_zero(dd_senc *e, dd_err *err, uint64_t idx, uint64_t count)
{
	int rc;

	rc = dd_senc_usable(e, err, DD_SENC_BODY);
	if (rc)
		return rc;
	if (count == 0 || idx < e->se_next || idx >= e->se_nblocks ||
	    count > e->se_nblocks - idx || (e->se_var && idx != e->se_next))
		return dd_senc_fail(e, err, "zero run at block %llu of %llu "
				    "blocks out of order or past the image",
				    (unsigned long long)idx,
				    (unsigned long long)count);
	if (e->se_zcount && e->se_zidx + e->se_zcount == idx) {
		e->se_zcount += count;
	} else {
		rc = dd_senc_zero_flush(e, err);
		if (rc)
			return rc;
		e->se_zidx = idx;
		e->se_zcount = count;
	}
	/* var: count is bytes, and a ZERO record is one hole (§12) */
	if (e->se_var && e->se_zcount == count) {
		e->se_blocks++;
		e->se_zero_blocks++;
	} else if (!e->se_var) {
		e->se_blocks += count;
		e->se_zero_blocks += count;
	}
	e->se_next = idx + count;
	return 0;
}

int dd_senc_end(dd_senc *e, dd_err *err)
{
	uint8_t p[DD_SEND_LEN];
	int rc;

	rc = dd_senc_usable(e, err, DD_SENC_BODY);
	if (!rc)
		rc = dd_senc_zero_flush(e, err);
	if (rc)
		return rc;
	/* §7: a stream covers every block from resume_from to the end. */
	if (e->se_next != e->se_nblocks)
		return dd_senc_fail(e, err, "END after block %llu of %llu",
				    (unsigned long long)e->se_next,
				    (unsigned long long)e->se_nblocks);
	dd_put_le64(p, e->se_blocks);
	dd_put_le64(p + 8, e->se_data);
	dd_put_le64(p + 16, e->se_refs);
	dd_put_le64(p + 24, e->se_zero_blocks);
	dd_put_le64(p + 32, e->se_bytes);
	dd_sdig_final(e->se_dig, p + 40);
	rc = dd_senc_record(e, err, DD_SREC_END, p, sizeof(p), NULL, 0);
	if (!rc)
		rc = dd_senc_flush(e, err);
	if (!rc)
		e->se_state = DD_SENC_DONE;
	return rc;
}
