/*
 * manifest_read.c -- reading a snapshot manifest (format/manifest.md §6).
 *
 * Reading verifies first and hands out entries after: the open walks
 * the whole list (tags, totals, CRC, then the content digest) and only
 * then rewinds for dd_manifest_read_next.  The CRC is checked before the
 * digest walks the runs of holes, so a damaged count is refused before it
 * costs anything (§6).
 *
 * Content-defined blocks have tags of their own (§4.1): each block with
 * its length, each run of holes as bytes.
 */
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/crc32c.h"
#include "common/endian.h"
#include "common/io.h"
#include "common/vdir.h"
#include "store/manifest.h"
#include "store/manifest_internal.h"
#include "store/store_internal.h"

/* ---- reading (§6) ----------------------------------------------------------*/

/* Where a manifest is read from: a file of the store's manifests (a
 * dd_vfile, which the reader owns), or a descriptor the caller gave
 * (dd_manifest_read_open: a file anywhere, the fuzz harness's). */
struct dd_mf_src {
	dd_vfile *ms_vf;
	int ms_fd;                 /* when ms_vf is NULL */
	const char *ms_label;      /* names the file in messages */
};

static int dd_mf_pread_full(const struct dd_mf_src *src, dd_err *err,
			    void *buf, size_t len, uint64_t off)
{
	/* a vfile's name is the label: the messages are the same */
	if (src->ms_vf)
		return dd_vfile_pread_full(src->ms_vf, err, buf, len, off);
	return dd_io_pread_full(err, src->ms_fd, buf, len, off,
				src->ms_label);
}

static int dd_mf_size(const struct dd_mf_src *src, dd_err *err,
		      uint64_t *size)
{
	if (src->ms_vf)
		return dd_vfile_size(src->ms_vf, err, size);
	return dd_io_fsize(err, src->ms_fd, size, src->ms_label);
}

struct dd_manifest_reader {
	struct dd_mf_src mr_src;   /* ms_label points at mr_label */
	char mr_label[64];
	dd_manifest_hdr mr_hdr;
	uint64_t mr_list_start;    /* file offset of the list */
	uint64_t mr_pos;           /* list bytes consumed */
	uint64_t mr_index;         /* next block */
	uint64_t mr_off;           /* var: its first byte */
	uint8_t *mr_buf;
	size_t mr_beg, mr_end;     /* unparsed bytes in mr_buf */
	uint64_t mr_buf_pos;       /* list offset of mr_buf[mr_end] */
};

/* Makes at least `want` unparsed bytes available, or all that remain. */
static int dd_mf_fill(dd_manifest_reader *mr, dd_err *err, size_t want)
{
	uint64_t left = mr->mr_hdr.mh_list_bytes - mr->mr_buf_pos;
	size_t have = mr->mr_end - mr->mr_beg, n;
	int rc;

	if (have >= want || left == 0)
		return 0;
	memmove(mr->mr_buf, mr->mr_buf + mr->mr_beg, have);
	mr->mr_beg = 0;
	mr->mr_end = have;
	n = DD_MF_BUF - have;
	if (n > left)
		n = (size_t)left;
	rc = dd_mf_pread_full(&mr->mr_src, err, mr->mr_buf + have, n,
			      mr->mr_list_start + mr->mr_buf_pos);
	if (rc)
		return rc;
	mr->mr_end += n;
	mr->mr_buf_pos += n;
	return 0;
}

static void dd_mf_rewind(dd_manifest_reader *mr)
{
	mr->mr_pos = 0;
	mr->mr_index = 0;
	mr->mr_off = 0;
	mr->mr_beg = mr->mr_end = 0;
	mr->mr_buf_pos = 0;
}

/* The bytes of an entry with this tag in a list of fixed (§4) or
 * content-defined (§4.1) blocks; 0 for a tag that list does not have. */
static size_t dd_mf_ent_len(uint8_t tag, bool var)
{
	switch (tag) {
	case DD_MF_TAG_BLOCK:
		return var ? 0 : 1 + DD_HASH_SIZE;
	case DD_MF_TAG_VBLOCK:
		return var ? 0 : 2 + DD_HASH_SIZE;
	case DD_MF_TAG_HOLES:
		return var ? 0 : 9;
	case DD_MF_TAG_LBLOCK:
		return var ? 5 + DD_HASH_SIZE : 0;
	case DD_MF_TAG_LVBLOCK:
		return var ? 6 + DD_HASH_SIZE : 0;
	case DD_MF_TAG_LHOLE:
		return var ? 9 : 0;
	default:
		return 0;
	}
}

/* Starts entry e at the list's next byte: a tag of the list's kind, and
 * all of its *len bytes, at *p, in the buffer. */
static int dd_mf_entry(dd_manifest_reader *mr, dd_err *err,
		       dd_manifest_ent *e, const uint8_t **p, size_t *len)
{
	bool var = mr->mr_hdr.mh_chunker != DD_CHUNKER_FIXED;
	int rc = dd_mf_fill(mr, err, var ? DD_MF_LENT_MAX : DD_MF_ENT_MAX);

	if (rc)
		return rc;
	*p = mr->mr_buf + mr->mr_beg;
	memset(e, 0, sizeof(*e));
	e->me_index = mr->mr_index;
	e->me_count = 1;
	e->me_off = mr->mr_off;
	*len = dd_mf_ent_len((*p)[0], var);
	if (*len == 0)
		return dd_err_set(err, DD_ECORRUPT, "%s: unknown manifest "
				  "entry tag %#x at list offset %llu",
				  mr->mr_label, (*p)[0],
				  (unsigned long long)mr->mr_pos);
	if (*len > mr->mr_end - mr->mr_beg)
		return dd_err_set(err, DD_ECORRUPT, "%s: manifest list ends "
				  "inside an entry", mr->mr_label);
	return 0;
}

/* dd_mf_parse for a list of content-defined blocks (§4.1): each entry one
 * block or one hole, with its bytes; they must fit the image's size. */
static int dd_mf_parse_var(dd_manifest_reader *mr, dd_err *err,
			   dd_manifest_ent *e, bool prev_hole)
{
	const dd_manifest_hdr *h = &mr->mr_hdr;
	const uint8_t *p;
	size_t len, at;
	int rc = dd_mf_entry(mr, err, e, &p, &len);

	if (rc)
		return rc;
	at = p[0] == DD_MF_TAG_LVBLOCK ? 2 : 1;
	if (p[0] == DD_MF_TAG_LHOLE) {
		e->me_hole = true;
		e->me_len = dd_get_le64(p + 1);
		if (e->me_len == 0 || prev_hole)
			return dd_err_set(err, DD_ECORRUPT, "%s: manifest hole "
					  "not canonical at byte %llu",
					  mr->mr_label,
					  (unsigned long long)mr->mr_off);
	} else {
		e->me_variant = p[0] == DD_MF_TAG_LVBLOCK ? p[1] : 0;
		if (p[0] == DD_MF_TAG_LVBLOCK && e->me_variant == 0)
			return dd_err_set(err, DD_ECORRUPT, "%s: manifest "
					  "variant 0 in a variant entry",
					  mr->mr_label);
		e->me_len = dd_get_le32(p + at);
		memcpy(e->me_hash, p + at + 4, DD_HASH_SIZE);
		if (e->me_len == 0 ||
		    e->me_len > dd_chunker_max(h->mh_chunker, h->mh_block_size))
			return dd_err_set(err, DD_ECORRUPT, "%s: manifest block "
					  "of %llu bytes at byte %llu",
					  mr->mr_label,
					  (unsigned long long)e->me_len,
					  (unsigned long long)mr->mr_off);
	}
	if (e->me_len > h->mh_size - mr->mr_off || mr->mr_index >= h->mh_blocks)
		return dd_err_set(err, DD_ECORRUPT, "%s: manifest list covers "
				  "more than its %llu bytes, %llu blocks",
				  mr->mr_label, (unsigned long long)h->mh_size,
				  (unsigned long long)h->mh_blocks);
	mr->mr_beg += len;
	mr->mr_pos += len;
	mr->mr_index++;
	mr->mr_off += e->me_len;
	return 1;
}

/* Decodes the next entry of the list, checking its tag, its fit in the
 * list and, for holes, the canonical form (§4). */
static int dd_mf_parse(dd_manifest_reader *mr, dd_err *err,
		       dd_manifest_ent *e, bool prev_hole)
{
	const dd_manifest_hdr *h = &mr->mr_hdr;
	const uint8_t *p;
	size_t len;
	int rc;

	if (h->mh_chunker != DD_CHUNKER_FIXED)
		return dd_mf_parse_var(mr, err, e, prev_hole);
	rc = dd_mf_entry(mr, err, e, &p, &len);
	if (rc)
		return rc;
	if (p[0] == DD_MF_TAG_HOLES) {
		e->me_hole = true;
		e->me_count = dd_get_le64(p + 1);
		if (e->me_count == 0 || prev_hole)
			return dd_err_set(err, DD_ECORRUPT, "%s: manifest hole "
					  "run not canonical at block %llu",
					  mr->mr_label,
					  (unsigned long long)mr->mr_index);
	} else if (p[0] == DD_MF_TAG_VBLOCK) {
		e->me_variant = p[1];
		if (e->me_variant == 0)
			return dd_err_set(err, DD_ECORRUPT, "%s: manifest "
					  "variant 0 in a variant entry",
					  mr->mr_label);
		memcpy(e->me_hash, p + 2, DD_HASH_SIZE);
	} else {
		memcpy(e->me_hash, p + 1, DD_HASH_SIZE);
	}
	if (e->me_count > h->mh_blocks - mr->mr_index)
		return dd_err_set(err, DD_ECORRUPT, "%s: manifest list covers "
				  "more than its %llu blocks", mr->mr_label,
				  (unsigned long long)h->mh_blocks);
	mr->mr_beg += len;
	mr->mr_pos += len;
	mr->mr_index += e->me_count;
	return 1;
}

/* The walk of §6: structure, totals and trailer CRC, then the digest. */
static int dd_mf_verify(dd_manifest_reader *mr, dd_err *err)
{
	const dd_manifest_hdr *h = &mr->mr_hdr;
	uint8_t tail[DD_MANIFEST_TRAILER_SIZE], digest[DD_HASH_SIZE];
	uint32_t crc = dd_crc32c(0, h->mh_name, strlen(h->mh_name));
	uint64_t holes = 0;
	dd_manifest_ent e;
	dd_digest *dg = NULL;
	bool prev_hole = false;
	int rc;

	rc = dd_mf_pread_full(&mr->mr_src, err, tail, sizeof(tail),
			      mr->mr_list_start + h->mh_list_bytes);
	if (rc)
		return rc;
	/* pass 1: CRC of the raw bytes, chunk by chunk */
	for (uint64_t off = 0; off < h->mh_list_bytes;) {
		size_t n = h->mh_list_bytes - off > DD_MF_BUF
				   ? DD_MF_BUF : (size_t)(h->mh_list_bytes - off);

		rc = dd_mf_pread_full(&mr->mr_src, err, mr->mr_buf, n,
				      mr->mr_list_start + off);
		if (rc)
			return rc;
		crc = dd_crc32c(crc, mr->mr_buf, n);
		off += n;
	}
	if (memcmp(tail, DD_MF_END_MAGIC, 4) || dd_get_le32(tail + 4) != crc)
		return dd_err_set(err, DD_ECORRUPT, "%s: manifest list "
				  "checksum mismatch", mr->mr_label);
	/* pass 2: entries, totals and the content digest */
	rc = dd_digest_new(&dg, err, h->mh_chunker, h->mh_dv, h->mh_block_size);
	dd_mf_rewind(mr);
	while (!rc && mr->mr_pos < h->mh_list_bytes) {
		rc = dd_mf_parse(mr, err, &e, prev_hole);
		if (rc < 0)
			break;
		rc = 0;
		prev_hole = e.me_hole;
		if (e.me_hole && h->mh_chunker != DD_CHUNKER_FIXED) {
			holes++;
			dd_digest_block(dg, NULL, e.me_len);
		} else if (e.me_hole) {
			holes += e.me_count;
			dd_digest_zeros(dg, e.me_count);
		} else {
			dd_digest_block(dg, e.me_hash, e.me_len);
		}
	}
	if (!rc && h->mh_chunker != DD_CHUNKER_FIXED &&
	    mr->mr_off != h->mh_size)
		rc = dd_err_set(err, DD_ECORRUPT, "%s: manifest list covers "
				"%llu bytes, its header %llu", mr->mr_label,
				(unsigned long long)mr->mr_off,
				(unsigned long long)h->mh_size);
	if (!rc && (mr->mr_index != h->mh_blocks || holes != h->mh_zero_blocks))
		rc = dd_err_set(err, DD_ECORRUPT, "%s: manifest list covers "
				"%llu blocks (%llu holes), its header %llu "
				"(%llu)", mr->mr_label,
				(unsigned long long)mr->mr_index,
				(unsigned long long)holes,
				(unsigned long long)h->mh_blocks,
				(unsigned long long)h->mh_zero_blocks);
	if (!rc) {
		dd_digest_final(dg, h->mh_size, h->mh_block_size, digest);
		if (memcmp(digest, h->mh_digest, DD_HASH_SIZE))
			rc = dd_err_set(err, DD_ECORRUPT, "%s: manifest list "
					"does not give its content digest",
					mr->mr_label);
	}
	dd_digest_free(dg);
	dd_mf_rewind(mr);
	return rc;
}

/* Reads and checks the header and name of the manifest in src. */
static int dd_mf_read_head(dd_err *err, const struct dd_mf_src *src,
			   uint64_t expect_id, dd_manifest_hdr *h)
{
	const char *label = src->ms_label;
	uint8_t head[DD_MANIFEST_HDR_SIZE];
	uint64_t fsize;
	size_t namelen = 0;
	int rc = dd_mf_size(src, err, &fsize);

	if (rc)
		return rc;
	if (fsize < DD_MANIFEST_HDR_SIZE + DD_MANIFEST_TRAILER_SIZE)
		return dd_err_set(err, DD_ECORRUPT, "%s: manifest of %llu "
				  "bytes", label, (unsigned long long)fsize);
	rc = dd_mf_pread_full(src, err, head, sizeof(head), 0);
	if (!rc)
		rc = dd_manifest_hdr_decode(err, head, label, h, &namelen);
	if (rc)
		return rc;
	if (expect_id != UINT64_MAX && h->mh_id != expect_id)
		return dd_err_set(err, DD_ECORRUPT, "%s: manifest of snapshot "
				  "id %llx", label,
				  (unsigned long long)h->mh_id);
	if (fsize != DD_MANIFEST_HDR_SIZE + namelen + h->mh_list_bytes +
			     DD_MANIFEST_TRAILER_SIZE)
		return dd_err_set(err, DD_ECORRUPT, "%s: manifest is %llu "
				  "bytes, its header says %llu", label,
				  (unsigned long long)fsize,
				  (unsigned long long)(DD_MANIFEST_HDR_SIZE +
						       namelen +
						       h->mh_list_bytes +
						       DD_MANIFEST_TRAILER_SIZE));
	rc = dd_mf_pread_full(src, err, h->mh_name, namelen,
			      DD_MANIFEST_HDR_SIZE);
	if (rc)
		return rc;
	h->mh_name[namelen] = 0;
	if (dd_name_check(h->mh_name))
		return dd_err_set(err, DD_ECORRUPT, "%s: manifest names an "
				  "invalid snapshot name", label);
	return 0;
}

/* dd_manifest_read_open for a source; a vfile in it is the reader's
 * once this returns 0. */
static int dd_mf_open_src(dd_manifest_reader **out, dd_err *err,
			  const struct dd_mf_src *src, uint64_t expect_id,
			  uint64_t max_blocks, dd_manifest_hdr *hdr)
{
	dd_manifest_reader *mr = dd_calloc(1, sizeof(*mr));
	int rc;

	if (!mr)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	snprintf(mr->mr_label, sizeof(mr->mr_label), "%s", src->ms_label);
	mr->mr_src = *src;
	mr->mr_src.ms_label = mr->mr_label;
	mr->mr_buf = dd_malloc(DD_MF_BUF);
	rc = mr->mr_buf ? 0 : dd_err_set(err, DD_ENOMEM, "out of memory");
	if (!rc)
		rc = dd_mf_read_head(err, &mr->mr_src, expect_id, &mr->mr_hdr);
	if (!rc && max_blocks && mr->mr_hdr.mh_blocks > max_blocks)
		rc = dd_err_set(err, DD_ECORRUPT, "%s: manifest claims %llu "
				"blocks, more than %llu", mr->mr_label,
				(unsigned long long)mr->mr_hdr.mh_blocks,
				(unsigned long long)max_blocks);
	mr->mr_list_start = DD_MANIFEST_HDR_SIZE + strlen(mr->mr_hdr.mh_name);
	if (!rc)
		rc = dd_mf_verify(mr, err);
	if (rc) {
		/* the source stays the caller's */
		mr->mr_src.ms_vf = NULL;
		dd_manifest_read_close(mr);
		return rc;
	}
	*hdr = mr->mr_hdr;
	*out = mr;
	return 0;
}

int dd_manifest_read_open(dd_manifest_reader **out, dd_err *err, int fd,
			  const char *label, uint64_t expect_id,
			  uint64_t max_blocks, dd_manifest_hdr *hdr)
{
	struct dd_mf_src src = {.ms_fd = fd, .ms_label = label};

	return dd_mf_open_src(out, err, &src, expect_id, max_blocks, hdr);
}

int dd_manifest_open_at(dd_manifest_reader **out, dd_err *err, dd_vdir *dir,
			uint64_t id, int state, dd_manifest_hdr *hdr)
{
	char name[DD_MANIFEST_NAME_MAX];
	struct dd_mf_src src = {.ms_fd = -1};
	int rc;

	dd_manifest_name(name, id, state);
	rc = dd_vdir_open_file(dir, err, name, 0, &src.ms_vf);
	if (rc)
		return rc;
	src.ms_label = dd_vfile_name(src.ms_vf);
	rc = dd_mf_open_src(out, err, &src, id, 0, hdr);
	if (rc)
		dd_vfile_close(src.ms_vf);
	return rc;
}

int dd_manifest_read_header_at(dd_vdir *dir, dd_err *err, uint64_t id,
			       dd_manifest_hdr *hdr)
{
	char name[DD_MANIFEST_NAME_MAX];
	struct dd_mf_src src = {.ms_fd = -1};
	int rc;

	dd_manifest_name(name, id, DD_MANIFEST_SNAP);
	rc = dd_vdir_open_file(dir, err, name, 0, &src.ms_vf);
	if (rc)
		return rc;
	src.ms_label = dd_vfile_name(src.ms_vf);
	rc = dd_mf_read_head(err, &src, id, hdr);
	dd_vfile_close(src.ms_vf);
	return rc;
}

int dd_manifest_read_next(dd_manifest_reader *mr, dd_err *err,
			  dd_manifest_ent *ent)
{
	if (mr->mr_pos >= mr->mr_hdr.mh_list_bytes)
		return 0;
	/* verified at open: a failure here is a file changed since */
	return dd_mf_parse(mr, err, ent, false);
}

void dd_manifest_read_close(dd_manifest_reader *mr)
{
	if (!mr)
		return;
	dd_vfile_close(mr->mr_src.ms_vf);
	dd_free(mr->mr_buf);
	dd_free(mr);
}
