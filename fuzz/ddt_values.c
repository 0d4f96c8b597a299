/*
 * ddt_values.c -- libFuzzer harness for the value decoders of the LMDB
 * tables (format/ddt.md, format/store.md; libdedup/catalog/ddt.c, maps.c):
 * DDT keys and values, snapshot records, block map entries, pending
 * records and pack records.
 *
 * The decoders are static; they are reached the way the store reaches
 * them.  The input is a list of raw table entries
 *
 *     table (1 byte, mod 6) | klen (1) | key | vlen (2, LE) | value
 *
 * (table: 0 ddt0, 1 ddt1, 2 snap, 3 pend, 4 packs, 5 bmap), put with
 * mdb_put into one write transaction of a temporary environment (made
 * once per process), then read back through dd_ddt_get / dd_ddt_walk /
 * dd_ddt_compact, dd_snap_get / dd_snap_walk, dd_pend_walk /
 * dd_pend_first, dd_packs_get / dd_packs_walk / dd_packs_walk_doomed and
 * dd_bmap_walk_all / dd_bmap_seek.  The transaction is aborted after
 * each input, which resets every table.  Each input is read twice: by a
 * catalog of fixed blocks, and by one of content-defined blocks
 * (format/store.md §4.2: values with lengths, dd_bmap_find).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dedup.h"
#include "common/endian.h"
#include "catalog/db_internal.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_MAX_ENTRIES 64

static dd_db *fz_db;

static const enum dd_dbi_index fz_tables[] = {
	DD_DBI_DDT0, DD_DBI_DDT1, DD_DBI_SNAP, DD_DBI_PEND, DD_DBI_PACKS,
	DD_DBI_BMAP
};
#define FZ_NTABLES (sizeof(fz_tables) / sizeof(fz_tables[0]))

struct fz_ent {
	unsigned table;
	const uint8_t *key, *val;
	size_t klen, vlen;
};

static void fz_init(void)
{
	dd_err err = {0};

	if (fz_db)
		return;
	if (dd_db_open(&fz_db, &err, fz_tmpdir(), true, false) != 0) {
		fprintf(stderr, "fuzz: dd_db_open: %s\n", err.de_msg);
		abort();
	}
}

/* Callbacks: touch what they are given, so the sanitizers see it. */
static volatile uint64_t fz_sink;

static int fz_ddt_fn(void *ctx, const dd_ddt_key *key, const dd_ddt_ent *ent)
{
	(void)ctx;
	fz_sink += key->dk_variant + ent->de_offset + ent->de_lsize;
	return 0;
}

static int fz_snap_fn(void *ctx, const char *name, const dd_snap_rec *rec)
{
	(void)ctx;
	fz_sink += strlen(name) + rec->sr_blocks;
	return 0;
}

static int fz_pend_fn(void *ctx, uint64_t id, const dd_pend_rec *rec)
{
	(void)ctx;
	fz_sink += id + strlen(rec->pr_name) + rec->pr_state_len +
		   (rec->pr_state_len ? rec->pr_state[rec->pr_state_len - 1]
				      : 0);
	return 0;
}

static int fz_packs_fn(void *ctx, uint32_t id, uint64_t end)
{
	(void)ctx;
	fz_sink += id + end;
	return 0;
}

static int fz_bmap_fn(void *ctx, uint64_t id, uint64_t idx,
		      const dd_ddt_key *key)
{
	(void)ctx;
	fz_sink += id + idx + key->dk_variant;
	return 0;
}

static size_t fz_parse(const uint8_t *data, size_t size, struct fz_ent *e)
{
	size_t n = 0, pos = 0;

	while (n < FZ_MAX_ENTRIES && size - pos >= 2) {
		e[n].table = data[pos] % FZ_NTABLES;
		e[n].klen = data[pos + 1];
		pos += 2;
		if (size - pos < e[n].klen + 2)
			break;
		e[n].key = data + pos;
		pos += e[n].klen;
		e[n].vlen = dd_get_le16(data + pos);
		pos += 2;
		if (e[n].vlen > size - pos)
			e[n].vlen = size - pos;
		e[n].val = data + pos;
		pos += e[n].vlen;
		n++;
	}
	return n;
}

static void fz_lookups(dd_txn *txn, const struct fz_ent *e)
{
	dd_err err = {0};

	switch (fz_tables[e->table]) {
	case DD_DBI_DDT0:
		if (e->klen == DD_DDT_KEY_SIZE) {
			dd_ddt_key key;
			dd_ddt_ent ent;

			memcpy(key.dk_hash, e->key, DD_HASH_SIZE);
			key.dk_variant = e->key[DD_HASH_SIZE];
			(void)dd_ddt_get(txn, &err, &key, &ent);
		}
		break;
	case DD_DBI_SNAP:
		if (e->klen > 0 && !memchr(e->key, 0, e->klen)) {
			char name[256];
			dd_snap_rec rec;

			memcpy(name, e->key, e->klen);
			name[e->klen] = 0;
			(void)dd_snap_get(txn, &err, name, &rec);
		}
		break;
	case DD_DBI_PACKS:
		if (e->klen == 4) {
			uint32_t id = (uint32_t)e->key[0] << 24 |
				      (uint32_t)e->key[1] << 16 |
				      (uint32_t)e->key[2] << 8 | e->key[3];
			uint64_t end;

			(void)dd_packs_get(txn, &err, id, &end);
		}
		break;
	case DD_DBI_BMAP:
		if (e->klen >= 8) {
			dd_bmap_cur *cur;
			dd_ddt_key key;
			uint64_t idx;

			if (dd_bmap_open(txn, &err, dd_get_be64(e->key),
					 &cur) == 0) {
				if (dd_bmap_seek(cur, &err, 0, &idx, &key) == 1)
					while (dd_bmap_next(cur, &err, &idx,
							    &key) == 1)
						fz_sink += dd_bmap_len(cur);
				if (e->klen >= 16 &&
				    dd_db_varblock(txn->tx_db) &&
				    dd_bmap_find(cur, &err,
						 dd_get_be64(e->key + 8), &idx,
						 &key) == 1)
					fz_sink += idx + dd_bmap_len(cur);
				dd_bmap_close(cur);
			}
		}
		break;
	default:
		break;
	}
}

static void fz_one(const struct fz_ent *ents, size_t n)
{
	dd_err err = {0};
	dd_txn *txn;
	dd_db_usage usage;
	uint64_t id, removed;

	if (dd_txn_begin(fz_db, &err, true, &txn) != 0)
		abort();
	for (size_t i = 0; i < n; i++) {
		MDB_val k = {ents[i].klen, (void *)ents[i].key};
		MDB_val v = {ents[i].vlen, (void *)ents[i].val};

		/* LMDB refuses empty and over-long keys: skip those. */
		(void)mdb_put(txn->tx_mdb,
			      txn->tx_db->db_dbi[fz_tables[ents[i].table]], &k,
			      &v, 0);
	}
	for (size_t i = 0; i < n; i++)
		fz_lookups(txn, &ents[i]);
	(void)dd_ddt_walk(txn, &err, fz_ddt_fn, NULL);
	(void)dd_snap_walk(txn, &err, fz_snap_fn, NULL);
	(void)dd_pend_walk(txn, &err, fz_pend_fn, NULL);
	(void)dd_pend_first(txn, &err, &id);
	(void)dd_packs_walk(txn, &err, fz_packs_fn, NULL);
	(void)dd_packs_walk_doomed(txn, &err, fz_packs_fn, NULL);
	(void)dd_bmap_walk_all(txn, &err, fz_bmap_fn, NULL);
	(void)dd_db_usage_get(txn, &err, &usage);
	/* Compaction decodes the live table and re-encodes what it keeps. */
	if (dd_ddt_compact(txn, &err, &removed) == 0)
		(void)dd_ddt_walk(txn, &err, fz_ddt_fn, NULL);
	dd_txn_abort(txn);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_ent ents[FZ_MAX_ENTRIES];
	size_t n;

	fz_init();
	n = fz_parse(data, size, ents);
	dd_db_set_varblock(fz_db, 0);
	fz_one(ents, n);
	/* the same bytes read as a catalog of content-defined blocks */
	dd_db_set_varblock(fz_db, 16384);
	fz_one(ents, n);
	dd_db_set_varblock(fz_db, 0);
	return 0;
}
