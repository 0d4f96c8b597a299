/*
 * manifest.c -- snapshot manifests (format/manifest.md): their names,
 * the header (§3), writing and publishing (§7); manifest_read.c reads and
 * verifies them (§6); manifest_internal.h holds the encoding's constants
 * the two share.
 *
 * Writing streams entries through a buffer into ID.tmp after the header
 * and the name; the header is written last, when the list's length and
 * CRC are known.  The content digest is computed from the entries as they
 * come and must equal the one the caller computed from the data, so a
 * block map that damage changed is never published.
 *
 * A snapshot of content-defined blocks has a manifest with feature bit 0
 * set and the chunker in header byte 104 (§3.1); its list has tags of its
 * own, each block with its length and each run of holes as bytes (§4.1),
 * and a reader that knows no such feature refuses it whole (DD_ENOTSUP).
 */
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/crc32c.h"
#include "common/endian.h"
#include "common/vdir.h"
#include "common/zero.h"
#include "store/manifest.h"
#include "store/manifest_internal.h"
#include "store/store_internal.h"

static const char *const dd_mf_suffix[] = {
	[DD_MANIFEST_SNAP] = "snap", [DD_MANIFEST_TMP] = "tmp",
	[DD_MANIFEST_DEL] = "del",
};

void dd_manifest_name(char buf[DD_MANIFEST_NAME_MAX], uint64_t id, int state)
{
	snprintf(buf, DD_MANIFEST_NAME_MAX, "%016llx.%s",
		 (unsigned long long)id, dd_mf_suffix[state]);
}

int dd_manifest_parse_name(const char *name, uint64_t *id, int *state)
{
	uint64_t v = 0;

	if (strlen(name) < 18 || name[16] != '.')
		return 0;
	for (int i = 0; i < 16; i++) {
		char c = name[i];
		int d = c >= '0' && c <= '9' ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;

		if (d < 0)
			return 0;
		v = v << 4 | (uint64_t)d;
	}
	for (int st = DD_MANIFEST_SNAP; st <= DD_MANIFEST_DEL; st++) {
		if (!strcmp(name + 17, dd_mf_suffix[st])) {
			*id = v;
			*state = st;
			return 1;
		}
	}
	return 0;
}

/* ---- header (§3) -----------------------------------------------------------*/

static void dd_mf_hdr_encode(uint8_t p[DD_MANIFEST_HDR_SIZE],
			     const dd_manifest_hdr *h, size_t namelen)
{
	memset(p, 0, DD_MANIFEST_HDR_SIZE);
	memcpy(p, DD_MF_MAGIC, 8);
	dd_put_le32(p + 8, DD_MANIFEST_VERSION);
	dd_put_le64(p + 16, h->mh_id);
	dd_put_le64(p + 24, (uint64_t)h->mh_ctime);
	dd_put_le64(p + 32, h->mh_size);
	dd_put_le64(p + 40, h->mh_blocks);
	dd_put_le64(p + 48, h->mh_zero_blocks);
	dd_put_le32(p + 56, h->mh_block_size);
	dd_put_le16(p + 60, (uint16_t)h->mh_hash_kind);
	dd_put_le16(p + 62, (uint16_t)namelen);
	memcpy(p + 64, h->mh_digest, DD_HASH_SIZE);
	dd_put_le64(p + 96, h->mh_list_bytes);
	if (h->mh_chunker != DD_CHUNKER_FIXED) {
		dd_put_le32(p + 12, DD_MF_FEATURE_VARBLOCK);
		p[DD_MF_CHUNKER_OFF] = (uint8_t)h->mh_chunker;
	} else if (h->mh_dv == DD_DIGEST_V2) {
		dd_put_le32(p + 12, DD_MF_FEATURE_DIGEST2);
	}
	dd_put_le32(p + 124, dd_crc32c(0, p, 124));
}

/* The checks of §3 that need only the header; *namelen gets n. */
int dd_manifest_hdr_decode(dd_err *err, const uint8_t *p, const char *label,
			   dd_manifest_hdr *h, size_t *namelen)
{
	uint32_t version = dd_get_le32(p + 8), features = dd_get_le32(p + 12);
	bool var = features & DD_MF_FEATURE_VARBLOCK;
	size_t rsv;
	uint64_t bs;

	if (memcmp(p, DD_MF_MAGIC, 8))
		return dd_err_set(err, DD_ECORRUPT, "%s: not a manifest", label);
	if (version > DD_MANIFEST_VERSION)
		return dd_err_set(err, DD_EVERSION, "%s: manifest version %u "
				  "is newer than this build reads (%u)", label,
				  version, DD_MANIFEST_VERSION);
	if (version == 0)
		return dd_err_set(err, DD_ECORRUPT, "%s: manifest version 0",
				  label);
	if (dd_get_le32(p + 124) != dd_crc32c(0, p, 124))
		return dd_err_set(err, DD_ECORRUPT, "%s: manifest header "
				  "checksum mismatch", label);
	if (features & ~(DD_MF_FEATURE_VARBLOCK | DD_MF_FEATURE_DIGEST2))
		return dd_err_set(err, DD_ENOTSUP, "%s: manifest uses features "
				  "%#x this build does not know", label,
				  features);
	/* a content-defined digest is run-based already: one version */
	if (var && features & DD_MF_FEATURE_DIGEST2)
		return dd_err_set(err, DD_ECORRUPT, "%s: manifest features "
				  "%#x", label, features);
	rsv = var ? DD_MF_CHUNKER_OFF + 1 : DD_MF_CHUNKER_OFF;
	if (!dd_is_zero(p + rsv, 124 - rsv))
		return dd_err_set(err, DD_ECORRUPT, "%s: reserved manifest "
				  "header bytes are not zero", label);
	memset(h, 0, sizeof(*h));
	if (var && p[DD_MF_CHUNKER_OFF] != DD_CHUNKER_FASTCDC)
		return dd_err_set(err, DD_ECORRUPT, "%s: manifest chunker %u",
				  label, p[DD_MF_CHUNKER_OFF]);
	h->mh_chunker = var ? p[DD_MF_CHUNKER_OFF] : DD_CHUNKER_FIXED;
	h->mh_dv = features & DD_MF_FEATURE_DIGEST2 ? DD_DIGEST_V2
						    : DD_DIGEST_V1;
	h->mh_id = dd_get_le64(p + 16);
	h->mh_ctime = (int64_t)dd_get_le64(p + 24);
	h->mh_size = dd_get_le64(p + 32);
	h->mh_blocks = dd_get_le64(p + 40);
	h->mh_zero_blocks = dd_get_le64(p + 48);
	h->mh_block_size = dd_get_le32(p + 56);
	h->mh_hash_kind = dd_get_le16(p + 60);
	*namelen = dd_get_le16(p + 62);
	memcpy(h->mh_digest, p + 64, DD_HASH_SIZE);
	h->mh_list_bytes = dd_get_le64(p + 96);
	bs = h->mh_block_size;
	if (!dd_chunker_valid(h->mh_chunker, bs))
		return dd_err_set(err, DD_ECORRUPT, "%s: manifest block size "
				  "%llu", label, (unsigned long long)bs);
	if (h->mh_hash_kind != DD_HASH_SHA256 &&
	    h->mh_hash_kind != DD_HASH_TEST_WEAK16)
		return dd_err_set(err, DD_ECORRUPT, "%s: manifest hash kind "
				  "%#x", label, h->mh_hash_kind);
	/* content-defined: a block has a byte at least, the image one block
	 * at least (a run of holes is one) */
	if ((h->mh_chunker == DD_CHUNKER_FIXED
	     ? h->mh_blocks != dd_block_count(h->mh_size, (uint32_t)bs)
	     : h->mh_blocks > h->mh_size || (h->mh_size && !h->mh_blocks)) ||
	    h->mh_zero_blocks > h->mh_blocks)
		return dd_err_set(err, DD_ECORRUPT, "%s: manifest sizes "
				  "disagree", label);
	if (*namelen == 0 || *namelen > DD_NAME_MAX)
		return dd_err_set(err, DD_ECORRUPT, "%s: manifest name of %zu "
				  "bytes", label, *namelen);
	if (h->mh_list_bytes / (h->mh_chunker == DD_CHUNKER_FIXED
				? DD_MF_ENT_MAX : DD_MF_LENT_MAX) >
	    h->mh_blocks)
		return dd_err_set(err, DD_ECORRUPT, "%s: manifest list of "
				  "%llu bytes for %llu blocks", label,
				  (unsigned long long)h->mh_list_bytes,
				  (unsigned long long)h->mh_blocks);
	return 0;
}

/* ---- writing (§7) ----------------------------------------------------------*/

struct dd_manifest_writer {
	dd_vdir *mw_dir;
	dd_vfile *mw_f;            /* ID.tmp, open until _free */
	int mw_chunker;
	int mw_dv;                 /* the content digest's version */
	uint64_t mw_id;
	char mw_name[DD_NAME_MAX + 1];
	size_t mw_namelen;
	char mw_tmp[DD_MANIFEST_NAME_MAX];
	uint8_t *mw_buf;
	size_t mw_fill;
	uint64_t mw_list_off;      /* list bytes handed to the file */
	uint32_t mw_crc;           /* over the name and the list so far */
	uint64_t mw_blocks, mw_holes;
	uint64_t mw_pending_holes; /* a run not yet written (var: bytes) */
	uint64_t mw_bytes;         /* var: bytes the entries cover */
	dd_digest *mw_digest;
};

int dd_manifest_write_begin(dd_manifest_writer **out, dd_err *err,
			    dd_vdir *dir, uint64_t id, const char *name,
			    int chunker, int dv, uint32_t block_size)
{
	dd_manifest_writer *mw;
	int rc;

	if (dd_name_check(name))
		return dd_err_set(err, DD_ENAME, "invalid snapshot name");
	mw = dd_calloc(1, sizeof(*mw));
	if (!mw)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	strcpy(mw->mw_name, name);
	mw->mw_namelen = strlen(name);
	mw->mw_crc = dd_crc32c(0, name, mw->mw_namelen);
	mw->mw_dir = dir;
	mw->mw_id = id;
	mw->mw_chunker = chunker;
	mw->mw_dv = chunker == DD_CHUNKER_FIXED ? dv : DD_DIGEST_V1;
	dd_manifest_name(mw->mw_tmp, id, DD_MANIFEST_TMP);
	mw->mw_buf = dd_malloc(DD_MF_BUF);
	rc = mw->mw_buf ? dd_digest_new(&mw->mw_digest, err, chunker,
					mw->mw_dv, block_size)
			: dd_err_set(err, DD_ENOMEM, "out of memory");
	if (!rc)
		rc = dd_vdir_open_file(dir, err, mw->mw_tmp, DD_VF_CREATE,
				       &mw->mw_f);
	if (rc) {
		dd_manifest_write_free(mw);
		return rc;
	}
	*out = mw;
	return 0;
}

/* Writes the buffered entries at their place after the header and name. */
static int dd_mf_flush(dd_manifest_writer *mw, dd_err *err)
{
	int rc;

	if (!mw->mw_fill)
		return 0;
	mw->mw_crc = dd_crc32c(mw->mw_crc, mw->mw_buf, mw->mw_fill);
	rc = dd_vfile_pwrite_full(mw->mw_f, err, mw->mw_buf, mw->mw_fill,
				  DD_MANIFEST_HDR_SIZE + mw->mw_namelen +
					  mw->mw_list_off);
	mw->mw_list_off += mw->mw_fill;
	mw->mw_fill = 0;
	return rc;
}

static int dd_mf_put(dd_manifest_writer *mw, dd_err *err, const uint8_t *e,
		     size_t n)
{
	if (mw->mw_fill + n > DD_MF_BUF) {
		int rc = dd_mf_flush(mw, err);

		if (rc)
			return rc;
	}
	memcpy(mw->mw_buf + mw->mw_fill, e, n);
	mw->mw_fill += n;
	return 0;
}

static int dd_mf_put_holes(dd_manifest_writer *mw, dd_err *err)
{
	uint8_t e[9];

	if (!mw->mw_pending_holes)
		return 0;
	e[0] = mw->mw_chunker == DD_CHUNKER_FIXED ? DD_MF_TAG_HOLES
						  : DD_MF_TAG_LHOLE;
	dd_put_le64(e + 1, mw->mw_pending_holes);
	mw->mw_pending_holes = 0;
	return dd_mf_put(mw, err, e, sizeof(e));
}

int dd_manifest_write_block(dd_manifest_writer *mw, dd_err *err,
			    const uint8_t hash[DD_HASH_SIZE], uint8_t variant,
			    uint32_t len)
{
	uint8_t e[DD_MF_LENT_MAX];
	bool var = mw->mw_chunker != DD_CHUNKER_FIXED;
	size_t n = 0;
	int rc = dd_mf_put_holes(mw, err);

	if (rc)
		return rc;
	if (var && len == 0)
		return dd_err_set(err, DD_EINVAL, "a manifest block of 0 bytes");
	if (variant) {
		e[n++] = var ? DD_MF_TAG_LVBLOCK : DD_MF_TAG_VBLOCK;
		e[n++] = variant;
	} else {
		e[n++] = var ? DD_MF_TAG_LBLOCK : DD_MF_TAG_BLOCK;
	}
	if (var) {
		dd_put_le32(e + n, len);
		n += 4;
		mw->mw_bytes += len;
	}
	memcpy(e + n, hash, DD_HASH_SIZE);
	dd_digest_block(mw->mw_digest, hash, len);
	mw->mw_blocks++;
	return dd_mf_put(mw, err, e, n + DD_HASH_SIZE);
}

int dd_manifest_write_holes(dd_manifest_writer *mw, dd_err *err, uint64_t n)
{
	(void)err;
	if (mw->mw_chunker != DD_CHUNKER_FIXED) {
		if (!n)
			return 0;
		if (!mw->mw_pending_holes) {  /* a run starts: one hole */
			mw->mw_blocks++;
			mw->mw_holes++;
		}
		dd_digest_block(mw->mw_digest, NULL, n);
		mw->mw_pending_holes += n;
		mw->mw_bytes += n;
		return 0;
	}
	dd_digest_zeros(mw->mw_digest, n);
	mw->mw_pending_holes += n;
	mw->mw_blocks += n;
	mw->mw_holes += n;
	return 0;
}

int dd_manifest_write_finish(dd_manifest_writer *mw, dd_err *err,
			     const dd_manifest_hdr *hdr)
{
	uint8_t head[DD_MANIFEST_HDR_SIZE], tail[DD_MANIFEST_TRAILER_SIZE];
	uint8_t digest[DD_HASH_SIZE];
	dd_manifest_hdr h = *hdr;
	uint64_t end;
	int rc = dd_mf_put_holes(mw, err);

	if (!rc)
		rc = dd_mf_flush(mw, err);
	if (rc)
		return rc;
	if (hdr->mh_chunker != mw->mw_chunker ||
	    (mw->mw_chunker == DD_CHUNKER_FIXED && hdr->mh_dv != mw->mw_dv))
		return dd_err_set(err, DD_EINVAL, "manifest header of another "
				  "chunker or digest version");
	if (hdr->mh_id != mw->mw_id || strcmp(hdr->mh_name, mw->mw_name) ||
	    mw->mw_blocks != hdr->mh_blocks ||
	    mw->mw_holes != hdr->mh_zero_blocks ||
	    (mw->mw_chunker != DD_CHUNKER_FIXED &&
	     mw->mw_bytes != hdr->mh_size))
		return dd_err_set(err, DD_ECORRUPT, "snapshot '%s': its block "
				  "map covers %llu blocks (%llu holes), the "
				  "snapshot %llu (%llu)", mw->mw_name,
				  (unsigned long long)mw->mw_blocks,
				  (unsigned long long)mw->mw_holes,
				  (unsigned long long)hdr->mh_blocks,
				  (unsigned long long)hdr->mh_zero_blocks);
	dd_digest_final(mw->mw_digest, hdr->mh_size, hdr->mh_block_size, digest);
	if (memcmp(digest, hdr->mh_digest, DD_HASH_SIZE))
		return dd_err_set(err, DD_ECORRUPT, "snapshot '%s': its block "
				  "map does not give the content digest of the "
				  "data written (damaged catalog: not "
				  "committing it)", mw->mw_name);
	h.mh_list_bytes = mw->mw_list_off;
	end = DD_MANIFEST_HDR_SIZE + mw->mw_namelen + h.mh_list_bytes;
	memcpy(tail, DD_MF_END_MAGIC, 4);
	dd_put_le32(tail + 4, mw->mw_crc);
	dd_mf_hdr_encode(head, &h, mw->mw_namelen);
	rc = dd_vfile_pwrite_full(mw->mw_f, err, tail, sizeof(tail), end);
	if (!rc)
		rc = dd_vfile_pwrite_full(mw->mw_f, err, head, sizeof(head), 0);
	if (!rc)
		rc = dd_vfile_pwrite_full(mw->mw_f, err, mw->mw_name,
					  mw->mw_namelen, DD_MANIFEST_HDR_SIZE);
	if (!rc)
		rc = dd_vfile_sync(mw->mw_f, err);
	return rc;
}

void dd_manifest_write_free(dd_manifest_writer *mw)
{
	if (!mw)
		return;
	/* an unpublished ID.tmp is no part of the store (a published one
	 * has another name now); a failure to remove it leaves it to
	 * recovery */
	if (mw->mw_f) {
		dd_vfile_close(mw->mw_f);
		(void)dd_vdir_unlink(mw->mw_dir, NULL, mw->mw_tmp);
	}
	dd_digest_free(mw->mw_digest);
	dd_free(mw->mw_buf);
	dd_free(mw);
}

int dd_manifest_move(dd_vdir *dir, dd_err *err, uint64_t id, int from,
		     int to, bool *moved)
{
	char a[DD_MANIFEST_NAME_MAX], b[DD_MANIFEST_NAME_MAX];
	int rc;

	dd_manifest_name(a, id, from);
	dd_manifest_name(b, id, to);
	*moved = false;
	rc = dd_vdir_rename(dir, err, a, b, true);
	if (rc == DD_EEXIST)
		return dd_err_set(err, DD_EEXIST, "manifest %s exists already "
				  "(an older catalog reused a snapshot id?): "
				  "run dedup repair", b);
	if (rc)
		return rc;
	*moved = true;
	return dd_vdir_sync(dir, err);
}

int dd_manifest_remove(dd_vdir *dir, dd_err *err, uint64_t id, int state)
{
	char n[DD_MANIFEST_NAME_MAX];

	dd_manifest_name(n, id, state);
	return dd_vdir_unlink(dir, err, n);
}

