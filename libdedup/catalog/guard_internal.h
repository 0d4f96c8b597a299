/*
 * guard_internal.h -- what guard.c shares with guard_free.c.  Only those
 * two include it.
 */
#ifndef DD_CATALOG_GUARD_INTERNAL_H
#define DD_CATALOG_GUARD_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "catalog/db_internal.h"

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

/* guard_free.c: no page on the free list is in use by a tree. */
int dd_guard_free_pages(dd_txn *txn, dd_err *err);

#endif
