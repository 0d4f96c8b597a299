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
 * dropped map's own uncounted positions, and gives each entry it takes to
 * 0 that another map's uncounted position names one count back, clearing
 * that bit (dd_ucnt_revive).  So gc, which frees only entries of count 0,
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

#define DD_UCNT_SPAN 8192u                 /* positions per row */
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

/* Write txn, in dd_snap_drop_refs_if: the entries whose counts it took
 * to 0 (keys in zeroed, value 1) get one count back from the first
 * uncounted position of others that names each, whose bit is cleared. */
int dd_ucnt_revive(dd_txn *txn, dd_err *err, dd_ucnt_set *others,
		   dd_hmap *zeroed);

#endif
