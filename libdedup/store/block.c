/*
 * block.c -- reading one stored block, checked.
 *
 * Every read of a block goes through dd_block_read: the record header is
 * checked (CRC, and that it matches the DDT entry: sizes and hash), the
 * payload decompressed to exactly the logical size, and the result hashed
 * and compared with the key (DESIGN.md invariant 2).  A mismatch is
 * DD_ECHECKSUM naming the pack and offset, never silent data.
 *
 * Snapshot reads come through dd_block_read_cached, which asks the
 * caches first (cache/cache.h) and offers what it read from a pack to L1.
 * Scrub, gc and the writer call dd_block_read: scrub must check the
 * packs themselves, and bulk reads must not flush the working set.
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

	if (ent->de_flags & DD_DDE_MISSING) {
		char hex[2 * DD_HASH_SIZE + 1];

		dd_hash_hex(key->dk_hash, hex);
		return dd_err_set(err, DD_ECORRUPT, "block %.16s is lost: no "
				  "pack holds it (a put or receive of data "
				  "holding it stores it again)", hex);
	}
	if (ent->de_lsize > s->st_block_max ||
	    (size_t)ent->de_psize + DD_PACK_REC_HDR_SIZE > sc->sc_rbuf_len)
		return dd_err_set(err, DD_ECORRUPT,
				  "ddt entry sizes out of range (lsize %u, "
				  "psize %u)", ent->de_lsize, ent->de_psize);
	memcpy(expect.pr_hash, key->dk_hash, DD_HASH_SIZE);
	rc = dd_store_pack(s, err, ent->de_pack, &p);
	/* a committed entry names a pack that exists until no reader can
	 * see the entry (gc dooms, then reaps): a missing one is damage, as
	 * scrub reports it (dd_scrub_bad.error), not "no such snapshot" */
	if (rc == DD_ENOENT)
		return dd_err_set(err, DD_ECORRUPT, "ddt entry names pack %u, "
				  "which does not exist", ent->de_pack);
	if (rc)
		return rc;
	rc = dd_pack_read_rec(p, err, ent->de_offset, &expect, &rec,
			      sc->sc_rbuf, sc->sc_rbuf_len);
	if (s->st_cache)        /* pack I/O, counted apart from the caches */
		dd_cache_count_pack(s->st_cache,
				    DD_PACK_REC_HDR_SIZE + ent->de_psize);
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

/* The cache key of a DDT key: hash then variant (cache/cache.h). */
static void dd_block_cache_key(const dd_ddt_key *key,
			       uint8_t out[DD_CACHE_KEY_SIZE])
{
	memcpy(out, key->dk_hash, DD_HASH_SIZE);
	out[DD_HASH_SIZE] = key->dk_variant;
}

int dd_block_read_cached(dd_store *s, dd_err *err, dd_scratch *sc,
			 const dd_ddt_key *key, const dd_ddt_ent *ent,
			 void *dst, unsigned flags)
{
	uint8_t ck[DD_CACHE_KEY_SIZE];
	int rc;

	if (ent->de_lsize > s->st_block_max)
		return dd_block_read(s, err, sc, key, ent, dst); /* the error */
	dd_block_cache_key(key, ck);
	/* L1, then L2: an L2 block is checked against the hash in there,
	 * and a damaged one is dropped and counted, never returned. */
	if (dd_cache_get(s->st_cache, sc->sc_hasher, ck, ent->de_lsize, dst,
			 flags) == 0)
		return 0;
	rc = dd_block_read(s, err, sc, key, ent, dst);
	if (!rc)
		dd_cache_put(s->st_cache, ck, dst, ent->de_lsize, flags);
	return rc;
}
