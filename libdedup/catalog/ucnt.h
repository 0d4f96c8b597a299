/*
 * ucnt.h -- uncounted block-map positions (format/store.md §4.3).
 *
 * A re-put of data the store holds used to pay one DDT reference-count
 * write per block: at 4 KiB blocks, a 1 GiB re-put's flush rewrote nearly
 * every DDT leaf.  A deferring writer (store/defer.h) instead marks a
 * position *uncounted* when the entry it names is alive in the flush's
 * transaction -- one bit, in a row of DD_UCNT_SPAN positions kept in
 * table meta under key "ucnt/" (map id, row) -- and writes no count.
 *
 * Invariant U: the entry an uncounted position names has a reference
 * count of at least 1.  It holds when the bit is set (the writer checks
 * in the same transaction), and only a decrement can break it, and every
 * decrement is dd_snap_drop_refs_if (catalog/maps.c): it skips the
 * dropped map's own uncounted positions, and leaves an entry it would
 * take to 0 at 1 when another map's uncounted position names it, whose
 * reference that count becomes, clearing its bit (dd_ucnt_index_take).  So gc, which frees only entries of count 0,
 * never frees a block an uncounted position names.
 *
 * Readers that want every reference -- scrub's counts, stat's figures,
 * what a snapshot holds alone -- add the uncounted ones (dd_ucnt_extra).
 * Meta `features` bit 1 keeps builds that do not know the table out of a
 * catalog that has rows in it.
 */
#ifndef DD_CATALOG_UCNT_H
#define DD_CATALOG_UCNT_H

#include <stdbool.h>
#include <stdint.h>

#include "dedup.h"
#include "catalog/db.h"
#include "common/hmap.h"

#define DD_UCNT_SHIFT 13
#define DD_UCNT_SPAN (1u << DD_UCNT_SHIFT) /* positions per row: 8192 */
#define DD_UCNT_BYTES (DD_UCNT_SPAN / 8)   /* a row's value */
#define DD_UCNT_KEY_SIZE 21                /* "ucnt/", be64 id, be64 row */
/* meta `features` bit: meta may hold ucnt rows (format/store.md §2) */
#define DD_META_FEATURE_UCNT 0x2u

typedef struct dd_ucnt_row {
	uint64_t ur_id;
	uint64_t ur_row;          /* positions ur_row * SPAN .. + SPAN - 1 */
	uint8_t *ur_bits;         /* DD_UCNT_BYTES, bit p % 8 of byte p / 8 */
	bool ur_dirty;            /* changed since loaded (dd_ucnt_store) */
} dd_ucnt_row;

/* Rows in key order: by id, then row. */
typedef struct dd_ucnt_set {
	size_t us_n, us_cap;
	dd_ucnt_row *us_row;
	dd_err *us_err;           /* while loading */
	uint64_t us_only;         /* while loading: this id's rows only */
} dd_ucnt_set;

/* Loads every row (id 0), or those of map id. */
int dd_ucnt_load(dd_txn *txn, dd_err *err, uint64_t id, dd_ucnt_set *set);
bool dd_ucnt_has(const dd_ucnt_set *set, uint64_t id, uint64_t pos);
void dd_ucnt_free(dd_ucnt_set *set);
/* Its uncounted positions. */
uint64_t dd_ucnt_count(const dd_ucnt_set *set);

static inline bool dd_ucnt_bit(const uint8_t *bits, uint64_t pos)
{
	pos %= DD_UCNT_SPAN;
	return bits[pos / 8] >> (pos % 8) & 1;
}

static inline void dd_ucnt_set_bit(uint8_t *bits, uint64_t pos, bool on)
{
	uint8_t m = (uint8_t)(1u << (pos % DD_UCNT_SPAN % 8));

	pos %= DD_UCNT_SPAN;
	bits[pos / 8] = (uint8_t)(on ? bits[pos / 8] | m : bits[pos / 8] & ~m);
}

/* Has a row's bitmap no bit set? */
bool dd_ucnt_none(const uint8_t *bits);

/* Write txn: ORs bits into map id's row `row` (creating it), and sets
 * the features bit the first time. */
int dd_ucnt_or(dd_txn *txn, dd_err *err, uint64_t id, uint64_t row,
	       const uint8_t bits[DD_UCNT_BYTES]);
/* Write txn: writes the set's dirty rows back (deleting those left with
 * no bit). */
int dd_ucnt_store(dd_txn *txn, dd_err *err, dd_ucnt_set *set);
/* Write txn: deletes map id's rows (those in own, loaded for id). */
int dd_ucnt_drop(dd_txn *txn, dd_err *err, const dd_ucnt_set *own);

/* Write txn: when the rows left (every row but those just dropped) hold
 * no bit, the table is empty: the features bit goes, and builds that do
 * not know it may open the catalog again. */
int dd_ucnt_settle(dd_txn *txn, dd_err *err, const dd_ucnt_set *left);

/* Every uncounted position of the set with the key its map names, in
 * (id, position) order.  A bit whose position the map lacks is damage. */
typedef int (*dd_ucnt_fn)(void *ctx, dd_ucnt_row *row, uint64_t pos,
			  const dd_ddt_key *key);
int dd_ucnt_walk(dd_txn *txn, dd_err *err, dd_ucnt_set *set, dd_ucnt_fn fn,
		 void *ctx);

/* The uncounted references of each key (flat, dd_ddt_key_flat): *out
 * NULL when there are none, else a table to free. */
int dd_ucnt_extra(dd_txn *txn, dd_err *err, dd_hmap **out);
/* Its count for key (0 when map is NULL). */
int dd_ucnt_extra_get(dd_hmap *map, dd_err *err, const dd_ddt_key *key,
		      uint64_t *n);

/* For a drop (dd_snap_drop_refs_if): each key's first uncounted position
 * in the set, in walk order.  *out is a table to free. */
int dd_ucnt_index(dd_txn *txn, dd_err *err, dd_ucnt_set *set, dd_hmap **out);
/* The drop is about to take key's count from 1 to 0: if an uncounted
 * position the index names is left for key, its bit is cleared in the
 * set (the row marked dirty) and *taken: the entry keeps its count, now
 * that position's reference. */
int dd_ucnt_index_take(dd_hmap *index, dd_err *err, dd_ucnt_set *set,
		       const dd_ddt_key *key, bool *taken);

#endif
