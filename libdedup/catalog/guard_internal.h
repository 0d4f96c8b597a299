/*
 * guard_internal.h -- what the guard's files share: guard.c (pages and a
 * transaction's snapshot), guard_walk.c (the walks of LMDB's operations)
 * and guard_free.c (the free list).  Only those three include it.
 */
#ifndef DD_CATALOG_GUARD_INTERNAL_H
#define DD_CATALOG_GUARD_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "catalog/db_internal.h"
#include "catalog/lmdb_page.h"

/* Page pgno of tree, which must be sound as a leaf or a branch; *out gets
 * its bytes (read with pread, into the txn's buffers) when `need`, or a
 * page that has not passed before. */
int dd_guard_page(dd_txn *txn, dd_err *err, int tree, uint64_t pgno,
		  bool leaf, bool need, const uint8_t **out);
/* DD_ECORRUPT naming the page, its table and what is wrong. */
int dd_guard_bad(const dd_txn *txn, dd_err *err, int tree, uint64_t pgno,
		 const char *what);

/* fn for every leaf of tree, left to right, as LMDB's cursor steps onto
 * them; fn's failure, or the walk's, ends it. */
typedef int (*dd_guard_leaf_fn)(dd_txn *txn, dd_err *err, int tree,
				uint64_t leaf, void *ctx);
int dd_guard_walk_leaves(dd_txn *txn, dd_err *err, int tree,
			 dd_guard_leaf_fn fn, void *ctx);

/* Which pages passed (guard.c): 0 not yet checked, else the role a page
 * passed as, dd_guard_role(its tree's kind, leaf or branch). */
unsigned dd_guard_memo(const dd_db *db, uint64_t pgno);
void dd_guard_memo_set(dd_db *db, uint64_t pgno, unsigned v);
unsigned dd_guard_role(enum dd_lm_tree_kind kind, bool leaf);

/* A descent (guard_walk.c): to a key's leaf, or the leftmost or the
 * rightmost one. */
enum dd_guard_to { DD_GUARD_KEY, DD_GUARD_FIRST, DD_GUARD_LAST };
/* From the root of cur's tree down to the leaf of `to`, as
 * mdb_page_search goes; with f, narrows f to the keys whose descent is
 * this one. */
int dd_guard_from_root(dd_txn *txn, dd_err *err, struct dd_guard_cur *cur,
		       enum dd_guard_to to, const void *key, size_t klen,
		       struct dd_guard_fences *f);

/* guard_free.c: no page on the free list is in use by a tree. */
int dd_guard_free_pages(dd_txn *txn, dd_err *err);

#endif
