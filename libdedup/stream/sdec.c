/*
 * sdec.c -- the replication stream's record decoder (format/stream.md).
 *
 * The input is hostile.  It reads through a 64 KiB buffer over the read
 * callback; a record's frame is checked (header CRC, type, flags, the
 * payload length against the per-type limits of §3) before a byte of its
 * payload is read, so the only allocations are the read buffer and one
 * payload buffer of 64 + block size bytes (sized once the HEADER has
 * fixed the block size): about 1 MiB + 64 KiB at most.  Then the payload
 * CRC, then the fields.  Every message names the record number and its
 * byte offset, so damage is located where it happens.
 *
 * It knows nothing about stores, blocks' contents or hashes beyond
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
#include "stream/sdig.h"
#include "stream/stream.h"
#include "stream/wire.h"

#define DD_SDEC_RBUF ((size_t)64 << 10)

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
	dd_sdig *sd_dig;           /* the stream digest (§8) */
	int sd_state;
	uint64_t sd_nrec;          /* records decoded, HEADER is record 0 */
	uint64_t sd_roff;          /* offset of the current record */
	int sd_rtype;              /* type of the current record */
	uint32_t sd_bs;
	bool sd_var;               /* content-defined: positions are bytes */
	uint32_t sd_max;           /* the longest block */
	uint64_t sd_size, sd_nblocks, sd_resume, sd_next; /* var: nblocks is
							    the size */
	uint64_t sd_blocks, sd_data, sd_refs, sd_zero_blocks;
	uint64_t sd_digest_bytes;  /* bytes given to sd_dig */
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
	if (!d->sd_rbuf || !d->sd_pbuf || dd_sdig_new(&d->sd_dig) != 0) {
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
	dd_sdig_free(d->sd_dig);
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
		return len > DD_SDATA_FIXED && len <= DD_SDATA_FIXED + d->sd_max;
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
		dd_sdig_update(d->sd_dig, f, sizeof(f));
		dd_sdig_update(d->sd_dig, d->sd_pbuf, len);
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
	if (h->sh_features & ~DD_SF_VARBLOCK)
		return dd_sdec_fail(d, err, DD_ENOTSUP,
				    "unknown stream feature flags 0x%x",
				    h->sh_features);
	/* §12: blocks of varying length, their chunker in byte 26 */
	h->sh_chunker = h->sh_features ? p[26] : DD_CHUNKER_FIXED;
	if (h->sh_features && h->sh_chunker != DD_CHUNKER_FASTCDC)
		return dd_sdec_fail(d, err, DD_ENOTSUP, "unknown chunker %u",
				    p[26]);
	h->sh_flags = dd_get_le32(p + 16);
	h->sh_block_size = dd_get_le32(p + 20);
	h->sh_hash_alg = p[24];
	h->sh_codec = p[25];
	h->sh_size = dd_get_le64(p + 28);
	h->sh_resume_from = dd_get_le64(p + 36);
	memcpy(h->sh_digest, p + 44, 32);
	memcpy(h->sh_base_digest, p + 76, 32);
	incr = h->sh_flags & DD_SH_INCREMENTAL;
	if (h->sh_flags & ~DD_SH_KNOWN)
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "unknown header flags 0x%x", h->sh_flags);
	/* one digest of content-defined blocks: already run-based */
	if (h->sh_flags & DD_SH_DIGEST2 && h->sh_features)
		return dd_sdec_fail(d, err, DD_EFORMAT, "digest version 2 "
				    "flag on content-defined blocks");
	if (h->sh_hash_alg != DD_STREAM_HASH_SHA256)
		return dd_sdec_fail(d, err, DD_ENOTSUP,
				    "unknown hash algorithm %u", h->sh_hash_alg);
	if (h->sh_codec != DD_CODEC_NONE && h->sh_codec != DD_CODEC_ZSTD)
		return dd_sdec_fail(d, err, DD_ENOTSUP, "unknown codec %u",
				    h->sh_codec);
	if (p[27] || (!h->sh_features && p[26]))
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "reserved header bytes not zero");
	if (!dd_chunker_valid(h->sh_chunker, h->sh_block_size))
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "block size %u is not a power of two in "
				    "[4 KiB, %s]", h->sh_block_size,
				    h->sh_chunker == DD_CHUNKER_FIXED
				    ? "1 MiB" : "256 KiB");
	if (h->sh_size > DD_STREAM_SIZE_MAX)
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "image size %llu over 2^63",
				    (unsigned long long)h->sh_size);
	/* §3.1: refused before any work is spent on what it claims */
	if (!dd_stream_size_ok(h->sh_chunker, dd_shdr_dv(h), h->sh_block_size,
			       h->sh_size))
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "image of %llu bytes has %llu blocks, over "
				    "the limit of 2^32 (content digest "
				    "version 1)",
				    (unsigned long long)h->sh_size,
				    (unsigned long long)dd_block_count(
					    h->sh_size, h->sh_block_size));
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
	d->sd_nblocks = h->sh_chunker == DD_CHUNKER_FIXED
		? dd_block_count(h->sh_size, h->sh_block_size) : h->sh_size;
	if (h->sh_resume_from > d->sd_nblocks)
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "resume_from %llu past the image's %llu "
				    "blocks (or bytes)",
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
	d->sd_max = dd_stream_block_max(&h);
	d->sd_var = h.sh_chunker != DD_CHUNKER_FIXED;
	nb = dd_realloc(d->sd_pbuf, DD_SDATA_FIXED + (size_t)d->sd_max);
	if (!nb) {
		d->sd_state = DD_SDEC_FAILED;
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	}
	d->sd_pbuf = nb;
	d->sd_pcap = DD_SDATA_FIXED + (size_t)d->sd_max;
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

	if (idx < d->sd_next || (d->sd_var && idx != d->sd_next))
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "block %llu out of order (expected %s"
				    "%llu)", (unsigned long long)idx,
				    d->sd_var ? "" : ">= ",
				    (unsigned long long)d->sd_next);
	if (idx >= d->sd_nblocks)
		return dd_sdec_fail(d, err, DD_EFORMAT,
				    "block %llu past the image's %llu %s",
				    (unsigned long long)idx,
				    (unsigned long long)d->sd_nblocks,
				    d->sd_var ? "bytes" : "blocks");
	if (d->sd_var) {
		/* §12: any length up to the chunker's longest, in the image */
		if (lsize == 0 || lsize > d->sd_max ||
		    lsize > d->sd_size - idx)
			return dd_sdec_fail(d, err, DD_EFORMAT,
					    "block at byte %llu: lsize %u out "
					    "of range", (unsigned long long)idx,
					    lsize);
		d->sd_next = idx + lsize;
		d->sd_blocks++;
		return 0;
	}
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
	if (r->sr_idx < d->sd_next || (d->sd_var && r->sr_idx != d->sd_next))
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
	/* var: one hole of sr_count bytes (§12) */
	d->sd_blocks += d->sd_var ? 1 : r->sr_count;
	d->sd_zero_blocks += d->sd_var ? 1 : r->sr_count;
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
	dd_sdig_final(d->sd_dig, digest);
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
