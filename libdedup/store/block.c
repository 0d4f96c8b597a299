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
 *
 * dd_block_read_list reads up to DD_BLOCK_LIST_MAX blocks as
 * dd_block_read_cached reads each, but hashes those read from packs as
 * one list (dd_hasher_sum_list: sixteen at a time on AVX-512, else two
 * on SHA-NI, each 1.5-1.8 times the bytes per second of one at a time):
 * a snapshot read spent more than a quarter of its time in SHA-256.  A
 * block's bytes are returned only once checked; a block that does not
 * match is DD_ECHECKSUM with the same message as dd_block_read's.
 */
#include <string.h>

#include "store/store_internal.h"

/* Everything dd_block_read does but the hash check: the record read and
 * checked against the entry, its payload decompressed into dst.  dst's
 * bytes are not yet known to be the block's. */
static int dd_block_fetch(dd_store *s, dd_err *err, dd_scratch *sc,
			  const dd_ddt_key *key, const dd_ddt_ent *ent,
			  void *dst)
{
	dd_pack_rec expect = {
		.pr_codec = ent->de_codec,
		.pr_lsize = ent->de_lsize,
		.pr_psize = ent->de_psize,
	}, rec;
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
	return dd_codec_decompress(sc->sc_codec, err, &rec,
				   sc->sc_rbuf + DD_PACK_REC_HDR_SIZE, dst);
}

/* The hash of the block's bytes against its key (invariant 2). */
static int dd_block_check(dd_err *err, const dd_ddt_key *key,
			  const dd_ddt_ent *ent, const uint8_t got[DD_HASH_SIZE])
{
	if (memcmp(got, key->dk_hash, DD_HASH_SIZE) != 0)
		return dd_err_set(err, DD_ECHECKSUM,
				  "block sha256 mismatch (pack %u, off %llu)",
				  ent->de_pack,
				  (unsigned long long)ent->de_offset);
	return 0;
}

int dd_block_read(dd_store *s, dd_err *err, dd_scratch *sc,
		  const dd_ddt_key *key, const dd_ddt_ent *ent, void *dst)
{
	uint8_t got[DD_HASH_SIZE];
	int rc = dd_block_fetch(s, err, sc, key, ent, dst);

	if (rc)
		return rc;
	dd_hasher_sum(sc->sc_hasher, dst, ent->de_lsize, got);
	return dd_block_check(err, key, ent, got);
}

/* The cache key of a DDT key: hash then variant (cache/cache.h). */
static void dd_block_cache_key(const dd_ddt_key *key,
			       uint8_t out[DD_CACHE_KEY_SIZE])
{
	memcpy(out, key->dk_hash, DD_HASH_SIZE);
	out[DD_HASH_SIZE] = key->dk_variant;
}

/* The caches' copy of req's block (0), or 1: it must be read from its
 * pack.  A block too large for any is read (the error) at once. */
static int dd_block_from_cache(dd_store *s, dd_scratch *sc,
			       dd_block_req *req)
{
	uint8_t ck[DD_CACHE_KEY_SIZE];

	if (req->br_ent->de_lsize > s->st_block_max) {
		req->br_rc = dd_block_read(s, req->br_err, sc, req->br_key,
					   req->br_ent, req->br_dst);
		return 0;
	}
	dd_block_cache_key(req->br_key, ck);
	return dd_cache_get(s->st_cache, sc->sc_hasher, ck,
			    req->br_ent->de_lsize, req->br_dst,
			    req->br_flags) == 0 ? 0 : 1;
}

/* A block read from its pack and checked: offered to L1. */
static void dd_block_to_cache(dd_store *s, const dd_block_req *req)
{
	uint8_t ck[DD_CACHE_KEY_SIZE];

	dd_block_cache_key(req->br_key, ck);
	dd_cache_put(s->st_cache, ck, req->br_dst, req->br_ent->de_lsize,
		     req->br_flags);
}

void dd_block_read_list(dd_store *s, dd_scratch *sc, dd_block_req *req,
			size_t n)
{
	dd_block_req *need[DD_BLOCK_LIST_MAX];
	dd_hash_msg m[DD_BLOCK_LIST_MAX] = { { 0 } };
	uint8_t got[DD_BLOCK_LIST_MAX][DD_HASH_SIZE];
	size_t nm = 0;

	for (size_t i = 0; i < n; i++) {
		req[i].br_rc = 0;
		if (dd_block_from_cache(s, sc, &req[i]) == 0)
			continue;
		req[i].br_rc = dd_block_fetch(s, req[i].br_err, sc,
					      req[i].br_key, req[i].br_ent,
					      req[i].br_dst);
		if (req[i].br_rc)
			continue;
		need[nm] = &req[i];
		m[nm] = (dd_hash_msg){ req[i].br_dst, req[i].br_ent->de_lsize,
				       got[nm] };
		nm++;
	}
	if (nm == 1)
		dd_hasher_sum(sc->sc_hasher, m[0].hm_p, m[0].hm_len, got[0]);
	else
		dd_hasher_sum_list(sc->sc_hasher, m, nm);
	for (size_t i = 0; i < nm; i++) {
		need[i]->br_rc = dd_block_check(need[i]->br_err,
						need[i]->br_key,
						need[i]->br_ent, got[i]);
		if (!need[i]->br_rc)
			dd_block_to_cache(s, need[i]);
	}
}

int dd_block_read_cached(dd_store *s, dd_err *err, dd_scratch *sc,
			 const dd_ddt_key *key, const dd_ddt_ent *ent,
			 void *dst, unsigned flags)
{
	dd_block_req req = {
		.br_key = key, .br_ent = ent, .br_dst = dst, .br_flags = flags,
		.br_err = err,
	};

	dd_block_read_list(s, sc, &req, 1);
	return req.br_rc;
}
