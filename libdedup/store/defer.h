/*
 * defer.h -- a writer that defers its DDT changes (format/store.md §7.2).
 *
 * At 4 KiB blocks a commit interval's references and new entries land on
 * nearly one DDT leaf page each, so every interval rewrote about a page
 * per block.  A put in a store without verify therefore keeps its DDT
 * changes in memory across intervals -- each interval still syncs its
 * packs and appends its block map -- and applies them in key order when
 * enough have gathered (many per leaf) and before it publishes: the dedup
 * log of OpenZFS's fast dedup, whose durable copy is the writer's own
 * block map and pack records, which a crash rolls back anyway.
 *
 * The invariant a reader of a pending map relies on: an entry counts a
 * DDT reference if and only if dd_defer_counted says so for the writer's
 * mark, kept in its `pend` value and moved in the same transaction as
 * the DDT.  A map without a mark counts every entry.
 */
#ifndef DD_STORE_DEFER_H
#define DD_STORE_DEFER_H

#include <stdbool.h>
#include <stdint.h>

#include "dedup.h"
#include "catalog/db.h"

/* Block-map positions (block index, or byte offset in a content-defined
 * store): those below dm_done count, those in [dm_done, dm_end) count if
 * their key sorts below dm_key (a flush applied in key order up to it),
 * the others do not. */
typedef struct dd_defer_mark {
	uint64_t dm_done;
	uint64_t dm_end;
	dd_ddt_key dm_key;
} dd_defer_mark;

/* The `pend` state that holds a mark: version 2, then done, end (LE64),
 * the key's hash and variant.  A receive's state is version 1, 69 bytes. */
#define DD_DEFER_STATE_VERSION 2
#define DD_DEFER_STATE_SIZE 50

/* DDT key order: hash bytes, then variant (LMDB's order of the keys). */
int dd_ddt_key_cmp(const dd_ddt_key *a, const dd_ddt_key *b);

void dd_defer_encode(const dd_defer_mark *m, uint8_t out[DD_DEFER_STATE_SIZE]);
/* Is rec's state a mark?  Then *m is it. */
bool dd_defer_decode(const dd_pend_rec *rec, dd_defer_mark *m);
/* A pending record with a state that is not a mark: a resumable receive. */
bool dd_pend_is_receive(const dd_pend_rec *rec);

bool dd_defer_counted(const dd_defer_mark *m, uint64_t pos,
		      const dd_ddt_key *key);
/* dd_bmap_counted_fn for dd_snap_drop_refs_if, ctx a dd_defer_mark. */
bool dd_defer_counted_cb(void *ctx, uint64_t pos, const dd_ddt_key *key);

/* The marks of every pending map a transaction sees: gc and scrub count a
 * map's references by them. */
typedef struct dd_defer_set {
	size_t ds_n, ds_cap;
	uint64_t *ds_id;
	dd_defer_mark *ds_mark;
	dd_err *ds_err;           /* while loading */
} dd_defer_set;

int dd_defer_set_load(dd_txn *txn, dd_err *err, dd_defer_set *ds);
/* Does entry (pos, key) of map id count a reference? */
bool dd_defer_set_counted(const dd_defer_set *ds, uint64_t id, uint64_t pos,
			  const dd_ddt_key *key);
void dd_defer_set_free(dd_defer_set *ds);

#endif
