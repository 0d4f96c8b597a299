/*
 * codec.c -- the replication stream's record encoder and decoder
 * (format/stream.md).
 *
 * Encoder: records are framed (§2) into a 1 MiB buffer that goes to the
 * write callback when full, so a pipe sees large writes whatever the
 * record sizes.  The encoder checks its caller as strictly as the decoder
 * checks a stream (order, sizes, codecs): a sender bug becomes DD_EINVAL
 * here rather than a stream every receiver refuses.  Every byte before
 * END also goes through SHA-256 for the stream digest (§8).
 *
 * Decoder: the input is hostile.  It reads through a 64 KiB buffer over
 * the read callback; a record's frame is checked (header CRC, type, flags,
 * the payload length against the per-type limits of §3) before a byte of
 * its payload is read, so the only allocations are the read buffer and one
 * payload buffer of 64 + block size bytes (sized once the HEADER has
 * fixed the block size): about 1 MiB + 64 KiB at most.  Then the payload
 * CRC, then the fields.  Every message names the record number and its
 * byte offset, so damage is located where it happens.
 *
 * Neither side knows about stores, blocks' contents or hashes beyond
 * carrying them: verifying a block's SHA-256 is the receiver's job (§9).
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
#include "stream/stream.h"

#define DD_SFRAME 16                  /* §2 record frame */
#define DD_SENC_BUF ((size_t)1 << 20) /* encoder output buffer */
#define DD_SDEC_RBUF ((size_t)64 << 10)

static const uint8_t dd_stream_magic[8] = {'D', 'D', 'S', 'T', 'R', 'E', 'A', 'M'};

/* ---- shared helpers -------------------------------------------------------*/

static const char *dd_srec_name(int type)
{
	switch (type) {
	case DD_SREC_HEADER: return "HEADER";
	case DD_SREC_DATA: return "DATA";
	case DD_SREC_REF: return "REF";
	case DD_SREC_ZERO: return "ZERO";
	case DD_SREC_END: return "END";
	default: return "unknown";
	}
}

/* Snapshot name rules (§4.2), the same as dd_name_check: this module is
 * kept free of the store.  n bytes at p, not NUL-terminated. */
static bool dd_sname_ok(const uint8_t *p, size_t n)
{
	if (n < 1 || n > DD_NAME_MAX)
		return false;
	if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (p[i] < 0x20 || p[i] == 0x7f || p[i] == '/' || p[i] == '@')
			return false;
	return true;
}

/* Codec and size rules shared by DATA's encoder and decoder (§5.2);
 * returns a static reason or NULL. */
static const char *dd_sdata_bad(uint8_t codec, uint32_t lsize, uint32_t psize)
{
	if (codec != DD_CODEC_NONE && codec != DD_CODEC_ZSTD)
		return "unknown codec";
	if (psize < 1 || psize > DD_BLOCK_SIZE_MAX)
		return "psize out of range";
	if (codec == DD_CODEC_NONE && psize != lsize)
		return "codec none with psize != lsize";
	if (codec == DD_CODEC_ZSTD && psize > lsize)
		return "zstd payload larger than the block";
	return NULL;
}

/* ---- encoder --------------------------------------------------------------*/

enum { DD_SENC_NEW, DD_SENC_BODY, DD_SENC_DONE, DD_SENC_FAILED };

struct dd_senc {
	dd_write_fn se_fn;
	void *se_ctx;
	uint8_t *se_buf;
	size_t se_len;             /* bytes waiting in se_buf */
	uint64_t se_bytes;         /* stream bytes produced, buffered included */
	dd_sha256_ctx *se_sha;     /* stream digest (§8) */
	int se_state;
	uint32_t se_bs;
	uint64_t se_size;
	uint64_t se_nblocks;
	uint64_t se_next;          /* lowest index the next record may carry */
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
	if (!e->se_buf || dd_sha256_new(&e->se_sha) != 0) {
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
	dd_sha256_free(e->se_sha);
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
		dd_sha256_update(e->se_sha, p, len);
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

static int dd_senc_hdr_check(dd_senc *e, dd_err *err, const dd_stream_hdr *h)
{
	size_t nl = strnlen(h->sh_name, sizeof(h->sh_name));
	size_t bl = strnlen(h->sh_base, sizeof(h->sh_base));
	bool incr = h->sh_flags & DD_SH_INCREMENTAL;
	uint64_t nb;

	if (h->sh_version != DD_STREAM_VERSION || h->sh_features != 0 ||
	    (h->sh_flags & ~DD_SH_INCREMENTAL) ||
	    h->sh_hash_alg != DD_STREAM_HASH_SHA256 ||
	    (h->sh_codec != DD_CODEC_NONE && h->sh_codec != DD_CODEC_ZSTD))
		return dd_senc_fail(e, err, "bad version/features/flags/hash/"
				    "codec in the header");
	if (!dd_block_size_valid(h->sh_block_size) ||
	    h->sh_size > DD_STREAM_SIZE_MAX)
		return dd_senc_fail(e, err, "bad block size %u or size %llu",
				    h->sh_block_size,
				    (unsigned long long)h->sh_size);
	if (!dd_sname_ok((const uint8_t *)h->sh_name, nl) ||
	    (incr && !dd_sname_ok((const uint8_t *)h->sh_base, bl)) ||
	    (!incr && bl != 0))
		return dd_senc_fail(e, err, "bad name or base (lengths %zu, "
				    "%zu)", nl, bl);
	nb = dd_block_count(h->sh_size, h->sh_block_size);
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
	dd_put_le32(p + 12, h->sh_features);
	dd_put_le32(p + 16, h->sh_flags);
	dd_put_le32(p + 20, h->sh_block_size);
	p[24] = h->sh_hash_alg;
	p[25] = h->sh_codec;
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
	e->se_size = h->sh_size;
	e->se_nblocks = dd_block_count(h->sh_size, h->sh_block_size);
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
	if (idx < e->se_next || idx >= e->se_nblocks)
		return dd_senc_fail(e, err, "block %llu out of order or past "
				    "the image (next allowed %llu)",
				    (unsigned long long)idx,
				    (unsigned long long)e->se_next);
	if (lsize != dd_block_lsize(e->se_size, e->se_bs, idx))
		return dd_senc_fail(e, err, "block %llu: lsize %llu is not the "
				    "block's size", (unsigned long long)idx,
				    (unsigned long long)lsize);
	return dd_senc_zero_flush(e, err);
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
	dd_put_le64(p, idx);
	memcpy(p + 8, hash, 32);
	p[40] = codec;
	dd_put_le32(p + 44, lsize);
	dd_put_le32(p + 48, psize);
	rc = dd_senc_record(e, err, DD_SREC_DATA, p, sizeof(p), payload, psize);
	if (rc)
		return rc;
	e->se_next = idx + 1;
	e->se_blocks++;
	e->se_data++;
	return 0;
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
	dd_put_le64(p, idx);
	memcpy(p + 8, hash, 32);
	dd_put_le32(p + 40, lsize);
	rc = dd_senc_record(e, err, DD_SREC_REF, p, sizeof(p), NULL, 0);
	if (rc)
		return rc;
	e->se_next = idx + 1;
	e->se_blocks++;
	e->se_refs++;
	return 0;
}

int dd_senc_zero(dd_senc *e, dd_err *err, uint64_t idx, uint64_t count)
{
	int rc;

	rc = dd_senc_usable(e, err, DD_SENC_BODY);
	if (rc)
		return rc;
	if (count == 0 || idx < e->se_next || idx >= e->se_nblocks ||
	    count > e->se_nblocks - idx)
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
	e->se_next = idx + count;
	e->se_blocks += count;
	e->se_zero_blocks += count;
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
	dd_sha256_final(e->se_sha, p + 40);
	rc = dd_senc_record(e, err, DD_SREC_END, p, sizeof(p), NULL, 0);
	if (!rc)
		rc = dd_senc_flush(e, err);
	if (!rc)
		e->se_state = DD_SENC_DONE;
	return rc;
}

/* ---- decoder --------------------------------------------------------------*/

enum { DD_SDEC_NEW, DD_SDEC_BODY, DD_SDEC_DONE, DD_SDEC_FAILED };

struct dd_sdec {
	dd_read_fn sd_fn;
	void *sd_ctx;
	uint8_t *sd_rbuf;          /* read buffer, DD_SDEC_RBUF bytes */
	size_t sd_rpos, sd_rlen;
	bool sd_eof;
	uint64_t sd_off;           /* stream bytes consumed by records */
	uint8_t *sd_pbuf;          /* one record payload */
	size_t sd_pcap;
	dd_sha256_ctx *sd_sha;
	int sd_state;
	uint64_t sd_nrec;          /* records decoded, HEADER is record 0 */
	uint64_t sd_roff;          /* offset of the current record */
	int sd_rtype;              /* type of the current record */
	uint32_t sd_bs;
	uint64_t sd_size, sd_nblocks, sd_resume, sd_next;
	uint64_t sd_blocks, sd_data, sd_refs, sd_zero_blocks;
	uint64_t sd_digest_bytes;  /* bytes hashed into sd_sha */
};

int dd_sdec_new(dd_sdec **out, dd_err *err, dd_read_fn fn, void *ctx)
{
	dd_sdec *d;

	if (!out || !fn)
		return dd_err_set(err, DD_EINVAL, "stream decoder: no callback");
	d = dd_calloc(1, sizeof(*d));
	if (!d)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	d->sd_rbuf = dd_malloc(DD_SDEC_RBUF);
	d->sd_pcap = DD_SHDR_MAX;
	d->sd_pbuf = dd_malloc(d->sd_pcap);
	if (!d->sd_rbuf || !d->sd_pbuf || dd_sha256_new(&d->sd_sha) != 0) {
		dd_sdec_free(d);
		return dd_err_set(err, DD_ENOMEM,
				  "out of memory for the stream decoder");
	}
	d->sd_fn = fn;
	d->sd_ctx = ctx;
	*out = d;
	return 0;
}

void dd_sdec_free(dd_sdec *d)
{
	if (!d)
		return;
	dd_sha256_free(d->sd_sha);
	dd_free(d->sd_rbuf);
	dd_free(d->sd_pbuf);
	dd_free(d);
}

uint64_t dd_sdec_bytes(const dd_sdec *d)
{
	return d ? d->sd_off : 0;
}

/* Every refusal names the record and where it starts. */
static int dd_sdec_fail(dd_sdec *d, dd_err *err, int code, const char *fmt,
			...) __attribute__((format(printf, 4, 5)));

static int dd_sdec_fail(dd_sdec *d, dd_err *err, int code, const char *fmt,
			...)
{
	char msg[300];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	d->sd_state = DD_SDEC_FAILED;
	/* The type is named once the frame that gives it checked out. */
	return dd_err_set(err, code, "stream record %llu%s%s%s at byte %llu: "
			  "%s", (unsigned long long)d->sd_nrec,
			  d->sd_rtype ? " (" : "",
			  d->sd_rtype ? dd_srec_name(d->sd_rtype) : "",
			  d->sd_rtype ? ")" : "",
			  (unsigned long long)d->sd_roff, msg);
}

static int dd_sdec_cut(dd_sdec *d, dd_err *err, uint64_t at)
{
	d->sd_state = DD_SDEC_FAILED;
	if (d->sd_rtype == 0)
		return dd_err_set(err, DD_EFORMAT,
				  "stream cut short at byte %llu (before "
				  "record %llu; no END record)",
				  (unsigned long long)at,
				  (unsigned long long)d->sd_nrec);
	return dd_err_set(err, DD_EFORMAT,
			  "stream cut short at byte %llu (inside record %llu, "
			  "%s, at byte %llu)", (unsigned long long)at,
			  (unsigned long long)d->sd_nrec,
			  dd_srec_name(d->sd_rtype),
			  (unsigned long long)d->sd_roff);
}

/* One call of the read callback into dst; *got 0 means end of stream. */
static int dd_sdec_read(dd_sdec *d, dd_err *err, void *dst, size_t len,
			size_t *got)
{
	int rc;

	*got = 0;
	rc = d->sd_fn(d->sd_ctx, dst, len, got);
	if (rc == 0 && *got <= len)
		return 0;
	d->sd_state = DD_SDEC_FAILED;
	if (rc == 0)
		return dd_err_set(err, DD_EINVAL,
				  "stream read callback returned %zu bytes "
				  "for %zu", *got, len);
	if (rc > 0)
		rc = DD_EIO;
	if (d->sd_fn == dd_fd_read && dd_thread_err()->de_code == rc) {
		if (err != dd_thread_err())
			dd_err_copy(err, dd_thread_err());
		return rc;
	}
	return dd_err_set(err, rc, "stream read failed after byte %llu",
			  (unsigned long long)d->sd_off);
}

/* Exactly len bytes into dst, through the read buffer; big reads go
 * straight into dst.  A stream that ends first is cut short (§9). */
static int dd_sdec_get(dd_sdec *d, dd_err *err, void *dst, size_t len)
{
	uint8_t *p = dst;
	size_t got;
	int rc;

	while (len) {
		size_t n = d->sd_rlen - d->sd_rpos;

		if (n) {
			n = n < len ? n : len;
			memcpy(p, d->sd_rbuf + d->sd_rpos, n);
			d->sd_rpos += n;
			d->sd_off += n;
			p += n;
			len -= n;
			continue;
		}
		if (d->sd_eof)
			return dd_sdec_cut(d, err, d->sd_off);
		if (len >= DD_SDEC_RBUF) {
			rc = dd_sdec_read(d, err, p, len, &got);
			d->sd_off += got;
			p += got;
			len -= got;
		} else {
			rc = dd_sdec_read(d, err, d->sd_rbuf, DD_SDEC_RBUF,
					  &got);
			d->sd_rpos = 0;
			d->sd_rlen = got;
		}
		if (rc)
			return rc;
		if (got == 0)
			d->sd_eof = true;
	}
	return 0;
}

/* Payload length limits of §3, known from the frame alone. */
static bool dd_sdec_len_ok(const dd_sdec *d, int type, uint32_t len)
{
	switch (type) {
	case DD_SREC_HEADER:
		return len >= DD_SHDR_FIXED + 1 && len <= DD_SHDR_MAX;
	case DD_SREC_DATA:
		return len > DD_SDATA_FIXED && len <= DD_SDATA_FIXED + d->sd_bs;
	case DD_SREC_REF:
		return len == DD_SREF_LEN;
	case DD_SREC_ZERO:
		return len == DD_SZERO_LEN;
	case DD_SREC_END:
		return len == DD_SEND_LEN;
	}
	return false;
}

/* Reads one record's frame and payload and checks both CRCs (§2). */
static int dd_sdec_record(dd_sdec *d, dd_err *err, uint32_t *plen)
{
	uint8_t f[DD_SFRAME];
	uint32_t len;
	int rc, type;

	d->sd_roff = d->sd_off;
	d->sd_rtype = 0;
	rc = dd_sdec_get(d, err, f, sizeof(f));
	if (rc)
		return rc;
	if (dd_get_le32(f + 12) != dd_crc32c(0, f, 12))
		return dd_sdec_fail(d, err, DD_ECHECKSUM,
				    "record frame CRC mismatch%s",
				    d->sd_nrec ? "" :
				    " (damaged, or not a libdedup stream)");
	type = f[0];
	len = dd_get_le32(f + 4);
	if (type < DD_SREC_HEADER || type > DD_SREC_END)
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "unknown record type %d", type);
	d->sd_rtype = type;
	if (f[1])
		return dd_sdec_fail(d, err, DD_ENOTSUP,
				    "record flags 0x%02x not understood", f[1]);
	if (dd_get_le16(f + 2))
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "reserved frame bytes not zero");
	if ((d->sd_nrec == 0) != (type == DD_SREC_HEADER))
		return dd_sdec_fail(d, err, DD_EFORMAT, "%s",
				    d->sd_nrec ? "a second HEADER" :
				    "not a libdedup stream (no HEADER first)");
	if (!dd_sdec_len_ok(d, type, len))
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "payload length %u out of range", len);
	rc = dd_sdec_get(d, err, d->sd_pbuf, len);
	if (rc)
		return rc;
	if (dd_get_le32(f + 8) != dd_crc32c(0, d->sd_pbuf, len))
		return dd_sdec_fail(d, err, DD_ECHECKSUM,
				    "payload CRC mismatch");
	if (type != DD_SREC_END) {
		dd_sha256_update(d->sd_sha, f, sizeof(f));
		dd_sha256_update(d->sd_sha, d->sd_pbuf, len);
		d->sd_digest_bytes = d->sd_off;
	}
	*plen = len;
	return 0;
}

/* Copies a length-prefixed name; *pos advances past it. */
static int dd_sdec_name(dd_sdec *d, dd_err *err, const uint8_t *p,
			uint32_t len, size_t *pos, char *out, const char *what)
{
	size_t n;

	if (*pos + 2 > len)
		return dd_sdec_fail(d, err, DD_EFORMAT, "%s length missing",
				    what);
	n = dd_get_le16(p + *pos);
	*pos += 2;
	if (n > len - *pos)
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "%s of %zu bytes runs past the record",
				    what, n);
	if (n && !dd_sname_ok(p + *pos, n))
		return dd_sdec_fail(d, err, DD_ENAME, "invalid %s (1-255 "
				    "bytes; no '/', '@', NUL or control "
				    "characters; not '.' or '..')", what);
	memcpy(out, p + *pos, n);
	out[n] = '\0';
	*pos += n;
	return 0;
}

/* §4: version, features, flags, sizes and names. */
static int dd_sdec_hdr_parse(dd_sdec *d, dd_err *err, const uint8_t *p,
			     uint32_t len, dd_stream_hdr *h)
{
	size_t pos = 108;
	bool incr;
	int rc;

	memset(h, 0, sizeof(*h));
	if (memcmp(p, dd_stream_magic, 8) != 0)
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "not a libdedup stream (bad magic)");
	h->sh_version = dd_get_le32(p + 8);
	if (h->sh_version > DD_STREAM_VERSION)
		return dd_sdec_fail(d, err, DD_EVERSION,
				    "stream format version %u is newer than "
				    "this build supports (%u)", h->sh_version,
				    DD_STREAM_VERSION);
	if (h->sh_version == 0)
		return dd_sdec_fail(d, err, DD_EFORMAT, "stream version 0");
	h->sh_features = dd_get_le32(p + 12);
	if (h->sh_features)
		return dd_sdec_fail(d, err, DD_ENOTSUP,
				    "unknown stream feature flags 0x%x",
				    h->sh_features);
	h->sh_flags = dd_get_le32(p + 16);
	h->sh_block_size = dd_get_le32(p + 20);
	h->sh_hash_alg = p[24];
	h->sh_codec = p[25];
	h->sh_size = dd_get_le64(p + 28);
	h->sh_resume_from = dd_get_le64(p + 36);
	memcpy(h->sh_digest, p + 44, 32);
	memcpy(h->sh_base_digest, p + 76, 32);
	incr = h->sh_flags & DD_SH_INCREMENTAL;
	if (h->sh_flags & ~DD_SH_INCREMENTAL)
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "unknown header flags 0x%x", h->sh_flags);
	if (h->sh_hash_alg != DD_STREAM_HASH_SHA256)
		return dd_sdec_fail(d, err, DD_ENOTSUP,
				    "unknown hash algorithm %u", h->sh_hash_alg);
	if (h->sh_codec != DD_CODEC_NONE && h->sh_codec != DD_CODEC_ZSTD)
		return dd_sdec_fail(d, err, DD_ENOTSUP, "unknown codec %u",
				    h->sh_codec);
	if (dd_get_le16(p + 26))
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "reserved header bytes not zero");
	if (!dd_block_size_valid(h->sh_block_size))
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "block size %u is not a power of two in "
				    "[4 KiB, 1 MiB]", h->sh_block_size);
	if (h->sh_size > DD_STREAM_SIZE_MAX)
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "image size %llu over 2^63",
				    (unsigned long long)h->sh_size);
	rc = dd_sdec_name(d, err, p, len, &pos, h->sh_name, "snapshot name");
	if (!rc)
		rc = dd_sdec_name(d, err, p, len, &pos, h->sh_base,
				  "base name");
	if (rc)
		return rc;
	if (pos != len)
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "%zu bytes after the names", len - pos);
	if (!h->sh_name[0])
		return dd_sdec_fail(d, err, DD_ENAME, "empty snapshot name");
	if (incr != (h->sh_base[0] != '\0') ||
	    (!incr && !dd_is_zero(h->sh_base_digest, 32)))
		return dd_sdec_fail(d, err, DD_EFORMAT, "%s",
				    incr ? "incremental stream without a base" :
				    "full stream with a base name or digest");
	d->sd_nblocks = dd_block_count(h->sh_size, h->sh_block_size);
	if (h->sh_resume_from > d->sd_nblocks)
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "resume_from %llu past the image's %llu "
				    "blocks",
				    (unsigned long long)h->sh_resume_from,
				    (unsigned long long)d->sd_nblocks);
	return 0;
}

int dd_sdec_header(dd_sdec *d, dd_err *err, dd_stream_hdr *out)
{
	dd_stream_hdr h;
	uint32_t len;
	uint8_t *nb;
	int rc;

	if (!d || !out)
		return dd_err_set(err, DD_EINVAL, "stream decoder: NULL argument");
	if (d->sd_state != DD_SDEC_NEW)
		return dd_err_set(err, DD_ESTATE,
				  "stream decoder: HEADER already read");
	rc = dd_sdec_record(d, err, &len);
	if (!rc)
		rc = dd_sdec_hdr_parse(d, err, d->sd_pbuf, len, &h);
	if (rc) {
		d->sd_state = DD_SDEC_FAILED;
		return rc;
	}
	/* Now that the block size is known, the payload buffer can hold the
	 * largest DATA record (§3); nothing larger is ever read. */
	nb = dd_realloc(d->sd_pbuf, DD_SDATA_FIXED + (size_t)h.sh_block_size);
	if (!nb) {
		d->sd_state = DD_SDEC_FAILED;
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	}
	d->sd_pbuf = nb;
	d->sd_pcap = DD_SDATA_FIXED + (size_t)h.sh_block_size;
	d->sd_bs = h.sh_block_size;
	d->sd_size = h.sh_size;
	d->sd_resume = d->sd_next = h.sh_resume_from;
	d->sd_nrec = 1;
	d->sd_state = DD_SDEC_BODY;
	*out = h;
	return 0;
}

/* §6: a block record's index and logical size. */
static int dd_sdec_block(dd_sdec *d, dd_err *err, uint64_t idx,
			 uint32_t lsize)
{
	uint32_t want;

	if (idx < d->sd_next)
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "block %llu out of order (expected >= "
				    "%llu)", (unsigned long long)idx,
				    (unsigned long long)d->sd_next);
	if (idx >= d->sd_nblocks)
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "block %llu past the image's %llu blocks",
				    (unsigned long long)idx,
				    (unsigned long long)d->sd_nblocks);
	want = dd_block_lsize(d->sd_size, d->sd_bs, idx);
	if (lsize != want)
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "block %llu: lsize %u, expected %u",
				    (unsigned long long)idx, lsize, want);
	d->sd_next = idx + 1;
	d->sd_blocks++;
	return 0;
}

static int dd_sdec_data(dd_sdec *d, dd_err *err, uint32_t len, dd_srec *r)
{
	const uint8_t *p = d->sd_pbuf;
	const char *why;

	r->sr_idx = dd_get_le64(p);
	memcpy(r->sr_hash, p + 8, 32);
	r->sr_codec = p[40];
	r->sr_lsize = dd_get_le32(p + 44);
	r->sr_psize = dd_get_le32(p + 48);
	r->sr_payload = p + DD_SDATA_FIXED;
	if (!dd_is_zero(p + 41, 3) || !dd_is_zero(p + 52, 12))
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "reserved bytes not zero");
	if (r->sr_codec != DD_CODEC_NONE && r->sr_codec != DD_CODEC_ZSTD)
		return dd_sdec_fail(d, err, DD_ENOTSUP, "unknown codec %u",
				    r->sr_codec);
	if ((uint64_t)r->sr_psize + DD_SDATA_FIXED != len)
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "psize %u does not match the record "
				    "length %u", r->sr_psize, len);
	why = dd_sdata_bad(r->sr_codec, r->sr_lsize, r->sr_psize);
	if (why)
		return dd_sdec_fail(d, err, DD_EFORMAT, "%s (lsize %u, "
				    "psize %u)", why, r->sr_lsize,
				    r->sr_psize);
	d->sd_data++;
	return dd_sdec_block(d, err, r->sr_idx, r->sr_lsize);
}

static int dd_sdec_ref(dd_sdec *d, dd_err *err, dd_srec *r)
{
	const uint8_t *p = d->sd_pbuf;

	r->sr_idx = dd_get_le64(p);
	memcpy(r->sr_hash, p + 8, 32);
	r->sr_lsize = dd_get_le32(p + 40);
	if (dd_get_le32(p + 44))
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "reserved bytes not zero");
	d->sd_refs++;
	return dd_sdec_block(d, err, r->sr_idx, r->sr_lsize);
}

static int dd_sdec_zero(dd_sdec *d, dd_err *err, dd_srec *r)
{
	r->sr_idx = dd_get_le64(d->sd_pbuf);
	r->sr_count = dd_get_le64(d->sd_pbuf + 8);
	if (r->sr_count == 0)
		return dd_sdec_fail(d, err, DD_EFORMAT, "empty zero run");
	if (r->sr_idx < d->sd_next)
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "block %llu out of order (expected >= "
				    "%llu)", (unsigned long long)r->sr_idx,
				    (unsigned long long)d->sd_next);
	if (r->sr_idx >= d->sd_nblocks ||
	    r->sr_count > d->sd_nblocks - r->sr_idx)
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "zero run of %llu blocks at %llu past the "
				    "image's %llu blocks",
				    (unsigned long long)r->sr_count,
				    (unsigned long long)r->sr_idx,
				    (unsigned long long)d->sd_nblocks);
	d->sd_next = r->sr_idx + r->sr_count;
	d->sd_blocks += r->sr_count;
	d->sd_zero_blocks += r->sr_count;
	return 0;
}

/* §8: END's totals and digest against what was decoded, then that every
 * block from resume_from on was carried. */
static int dd_sdec_end(dd_sdec *d, dd_err *err, dd_srec *r)
{
	const uint8_t *p = d->sd_pbuf;
	uint8_t digest[32];

	r->sr_blocks = dd_get_le64(p);
	r->sr_data = dd_get_le64(p + 8);
	r->sr_refs = dd_get_le64(p + 16);
	r->sr_zero_blocks = dd_get_le64(p + 24);
	dd_sha256_final(d->sd_sha, digest);
	if (r->sr_blocks != d->sd_blocks || r->sr_data != d->sd_data ||
	    r->sr_refs != d->sd_refs || r->sr_zero_blocks != d->sd_zero_blocks)
		return dd_sdec_fail(d, err, DD_ECHECKSUM,
				    "totals (%llu blocks: %llu data, %llu ref, "
				    "%llu zero) do not match the stream's "
				    "(%llu: %llu, %llu, %llu)",
				    (unsigned long long)r->sr_blocks,
				    (unsigned long long)r->sr_data,
				    (unsigned long long)r->sr_refs,
				    (unsigned long long)r->sr_zero_blocks,
				    (unsigned long long)d->sd_blocks,
				    (unsigned long long)d->sd_data,
				    (unsigned long long)d->sd_refs,
				    (unsigned long long)d->sd_zero_blocks);
	if (dd_get_le64(p + 32) != d->sd_digest_bytes)
		return dd_sdec_fail(d, err, DD_ECHECKSUM,
				    "stream length %llu does not match the "
				    "%llu bytes received",
				    (unsigned long long)dd_get_le64(p + 32),
				    (unsigned long long)d->sd_digest_bytes);
	if (memcmp(digest, p + 40, 32) != 0)
		return dd_sdec_fail(d, err, DD_ECHECKSUM,
				    "stream SHA-256 mismatch");
	if (d->sd_next != d->sd_nblocks)
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "stream ends after block %llu of the "
				    "image's %llu",
				    (unsigned long long)d->sd_next,
				    (unsigned long long)d->sd_nblocks);
	return 0;
}

int dd_sdec_next(dd_sdec *d, dd_err *err, dd_srec *out)
{
	uint32_t len;
	int rc;

	if (!d || !out)
		return dd_err_set(err, DD_EINVAL, "stream decoder: NULL argument");
	if (d->sd_state == DD_SDEC_DONE) {
		memset(out, 0, sizeof(*out));
		out->sr_type = DD_SREC_END;
		return DD_SREC_END;
	}
	if (d->sd_state != DD_SDEC_BODY)
		return dd_err_set(err, DD_ESTATE, "stream decoder: %s",
				  d->sd_state == DD_SDEC_NEW ?
				  "HEADER not read yet" : "used after an error");
	rc = dd_sdec_record(d, err, &len);
	if (rc)
		return rc;
	memset(out, 0, sizeof(*out));
	out->sr_type = d->sd_rtype;
	switch (d->sd_rtype) {
	case DD_SREC_DATA:
		rc = dd_sdec_data(d, err, len, out);
		break;
	case DD_SREC_REF:
		rc = dd_sdec_ref(d, err, out);
		break;
	case DD_SREC_ZERO:
		rc = dd_sdec_zero(d, err, out);
		break;
	default:
		rc = dd_sdec_end(d, err, out);
		break;
	}
	if (rc)
		return rc;
	d->sd_nrec++;
	if (out->sr_type == DD_SREC_END)
		d->sd_state = DD_SDEC_DONE;
	return out->sr_type;
}

int dd_sdec_expect_eof(dd_sdec *d, dd_err *err)
{
	uint8_t b;
	size_t got;
	int rc;

	if (!d || d->sd_state != DD_SDEC_DONE)
		return dd_err_set(err, DD_ESTATE,
				  "stream decoder: END not reached");
	if (d->sd_rpos < d->sd_rlen)
		got = 1;
	else if (d->sd_eof)
		got = 0;
	else if ((rc = dd_sdec_read(d, err, &b, 1, &got)) != 0)
		return rc;
	if (got)
		return dd_err_set(err, DD_EFORMAT,
				  "data after the END record at byte %llu",
				  (unsigned long long)d->sd_off);
	return 0;
}
