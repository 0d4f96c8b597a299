/*
 * lmdb_page.h -- LMDB 0.9's page layout, for the code that reads its
 * pages itself before LMDB does: the whole-file check (check.c) and the
 * per-operation guard (guard.c).  Only catalog/ includes it.
 *
 * The layout is data format 1 on a 64-bit host (lmdb.h and mdb.c of
 * liblmdb 0.9.24, Debian 12).  LMDB writes its fields in host order;
 * these read them as little-endian, the order of the x86-64 and arm64
 * hosts libdedup is built and tested on.
 */
#ifndef DD_DDT_LMDB_PAGE_H
#define DD_DDT_LMDB_PAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/endian.h"

/* The LMDB releases whose file layout this header describes: 0.9.x
 * (data format 1).  Another one is not guarded: dd_lm_layout_known. */
#define LM_KNOWN_MAJOR 0
#define LM_KNOWN_MINOR 9

#define LM_MAGIC 0xBEEFC0DEu
#define LM_DATA_VERSION 1u
#define LM_PAGEHDR 16           /* pgno 8, pad 2, flags 2, lower 2, upper 2 */
#define LM_NODEHDR 8            /* lo 2, hi 2, flags 2, ksize 2 */
#define LM_META_DBS 24          /* offset of mm_dbs[2] after the header */
#define LM_DB_SIZE 48           /* pad 4, flags 2, depth 2, 4 counts, root */
#define LM_META_LAST_PG 120
#define LM_META_TXNID 128
#define LM_P_BRANCH 0x01
#define LM_P_LEAF 0x02
#define LM_P_OVERFLOW 0x04
#define LM_P_META 0x08
#define LM_P_LEAF2 0x20
#define LM_P_SUBP 0x40
#define LM_P_KINDS (LM_P_BRANCH | LM_P_LEAF | LM_P_OVERFLOW | LM_P_META | \
		    LM_P_LEAF2 | LM_P_SUBP)
#define LM_F_BIGDATA 0x01
#define LM_F_SUBDATA 0x02
#define LM_F_DUPDATA 0x04
#define LM_P_INVALID UINT64_MAX
#define LM_MAXKEY 511           /* mdb_env_get_maxkeysize() */
#define LM_MAXDEPTH 32

/* Which tree a page belongs to: each allows different leaf nodes. */
enum dd_lm_tree_kind {
	LM_TREE_FREE,   /* txnid -> page list; values may be overflow runs */
	LM_TREE_MAIN,   /* name -> table record (F_SUBDATA) */
	LM_TREE_TABLE,  /* libdedup's tables: short plain values only */
};

/* An MDB_db record: a table's root and what its tree holds. */
struct dd_lm_db {
	uint16_t flags, depth;
	uint64_t branch, leaf, overflow, entries, root;
};

static inline void dd_lm_db_decode(const uint8_t *p, struct dd_lm_db *db)
{
	db->flags = dd_get_le16(p + 4);
	db->depth = dd_get_le16(p + 6);
	db->branch = dd_get_le64(p + 8);
	db->leaf = dd_get_le64(p + 16);
	db->overflow = dd_get_le64(p + 24);
	db->entries = dd_get_le64(p + 32);
	db->root = dd_get_le64(p + 40);
}

static inline unsigned dd_lm_nkeys(const uint8_t *pg)
{
	return (dd_get_le16(pg + 12) - LM_PAGEHDR) / 2;
}

/* Node i of a page that dd_lm_page_verify passed. */
static inline const uint8_t *dd_lm_node(const uint8_t *pg, unsigned i)
{
	return pg + dd_get_le16(pg + LM_PAGEHDR + 2 * i);
}

static inline unsigned dd_lm_node_ksize(const uint8_t *node)
{
	return dd_get_le16(node + 6);
}

static inline const uint8_t *dd_lm_node_key(const uint8_t *node)
{
	return node + LM_NODEHDR;
}

static inline unsigned dd_lm_node_flags(const uint8_t *node)
{
	return dd_get_le16(node + 4);
}

/* A leaf node's data size; a branch node's child is in the same bytes. */
static inline size_t dd_lm_node_dsize(const uint8_t *node)
{
	return dd_get_le16(node) | (size_t)dd_get_le16(node + 2) << 16;
}

static inline uint64_t dd_lm_node_child(const uint8_t *node)
{
	return dd_get_le16(node) | (uint64_t)dd_get_le16(node + 2) << 16 |
	       (uint64_t)dd_get_le16(node + 4) << 32;
}

/* LMDB's default key order (mdb_cmp_memn): bytes, then length. */
int dd_lm_cmp(const void *a, size_t alen, const void *b, size_t blen);

/* Is LMDB major.minor one whose pages this file reads (0.9)?  The guard
 * and the whole-file check read LMDB's pages themselves; on a layout they
 * were not written for they would judge sound pages damaged, or damaged
 * ones sound, so they do not run at all then (db.c). */
bool dd_lm_layout_known(int major, int minor);

/*
 * Everything LMDB trusts about one branch or leaf page, from its bytes
 * alone: the header names page pgno and the kind `leaf` calls for; the
 * key count and free-space bounds fit; each node lies inside the page's
 * node area with its key (and, in a leaf, its inline value); keys
 * increase (from node 1 in a branch, whose node 0 has no key); a
 * branch has the two keys LMDB asserts it has (one in the free list),
 * and names children in [2, last_pg]; a leaf node's flags are ones its
 * tree may hold.  Overflow runs are the caller's to follow.  NULL when
 * all holds, else what failed.
 */
const char *dd_lm_page_verify(const uint8_t *pg, uint32_t psize, uint64_t pgno,
			   uint64_t last_pg, bool leaf, enum dd_lm_tree_kind kind);

/* mdb_node_search, probe for probe, on a page dd_lm_page_verify passed: the
 * index of the first key >= key (nkeys if none), *exact when it is
 * equal.  A branch's node 0 has no key, so its search starts at 1. */
unsigned dd_lm_search(const uint8_t *pg, bool leaf, const void *key, size_t klen,
		   bool *exact);

/* A free-list record: a count, then that many page numbers, each in
 * [2, last_pg].  NULL when sound, else what failed. */
const char *dd_lm_page_list(const uint8_t *val, size_t vlen, uint64_t last_pg);

#endif
