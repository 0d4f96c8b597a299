/*
 * block.c -- reading one stored block, checked.
 *
 * Every read of a block goes through dd_block_read: the record header is
 * checked (CRC, and that it matches the DDT entry: sizes and hash), the
 * payload decompressed to exactly the logical size, and the result hashed
 * and compared with the key (DESIGN.md invariant 2).  A mismatch is
 * DD_ECHECKSUM naming the pack and offset, never silent data.
 */
#include <string.h>

#include "store/store_internal.h"

int dd_block_read(dd_store *s, dd_err *err, dd_scratch *sc,
		  const dd_ddt_key *key, const dd_ddt_ent *ent, void *dst)
{
	dd_pack_rec expect = {
		.pr_codec = ent->de_codec,
		.pr_lsize = ent->de_lsize,
		.pr_psize = ent->de_psize,
	}, rec;
	uint8_t got[DD_HASH_SIZE];
	dd_pack *p;
	int rc;

	if (ent->de_lsize > s->st_block_size ||
	    (size_t)ent->de_psize + DD_PACK_REC_HDR_SIZE > sc->sc_rbuf_len)
		return dd_err_set(err, DD_ECORRUPT,
				  "ddt entry sizes out of range (lsize %u, "
				  "psize %u)", ent->de_lsize, ent->de_psize);
	memcpy(expect.pr_hash, key->dk_hash, DD_HASH_SIZE);
	rc = dd_store_pack(s, err, ent->de_pack, &p);
	if (rc)
		return rc;
	rc = dd_pack_read_rec(p, err, ent->de_offset, &expect, &rec,
			      sc->sc_rbuf, sc->sc_rbuf_len);
	if (rc)
		return rc;
	rc = dd_codec_decompress(sc->sc_codec, err, &rec,
				 sc->sc_rbuf + DD_PACK_REC_HDR_SIZE, dst);
	if (rc)
		return rc;
	dd_hasher_sum(sc->sc_hasher, dst, ent->de_lsize, got);
	if (memcmp(got, key->dk_hash, DD_HASH_SIZE) != 0)
		return dd_err_set(err, DD_ECHECKSUM,
				  "block sha256 mismatch (pack %u, off %llu)",
				  ent->de_pack,
				  (unsigned long long)ent->de_offset);
	return 0;
}
