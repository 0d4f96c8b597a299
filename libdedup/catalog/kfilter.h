/*
 * kfilter.h -- the DDT's key filter: a blocked Bloom filter over the
 * hashes of every DDT key, in db/keys.flt (format/kfilter.md).
 *
 * A put asks it before the DDT: "no" means the DDT holds no entry of that
 * hash, so a new block costs no DDT read -- which, once the DDT is larger
 * than the memory it may use, is a disk read per block (Data Domain's
 * summary vector, Zhu et al., FAST'08).  "Maybe" means ask the DDT.
 *
 * The invariant: every hash the DDT holds is in the filter whose
 * generation meta `ddt.filter` names, for inserts by builds that know the
 * filter -- dd_ddt_insert and dd_ddt_put add to it (kf_txn_add) and a
 * transaction that set a bit syncs the file before it commits.  Nothing
 * rests on it but speed: a hash the filter lacks (an older build's
 * insert, a damaged file) makes a put store a block the DDT holds, and
 * its commit then references the entry and the copy is garbage for gc
 * (wops.c, dd_apply_new), as when two writers store one block at once.
 *
 * It is a scalable Bloom filter of up to DD_KF_SEG_MAX segments; inserts
 * go to the newest.  When that one is full, a writer adds a segment --
 * the file grown in place, not a walk of the DDT -- before the keys
 * it is about to insert (dd_kf_txn_reserve, at a flush or at the commit
 * of a writer that does not defer; at a writer's open,
 * dd_db_kf_prepare).  It is rebuilt from a walk of the DDT, inside
 * a write transaction so that no insert runs meanwhile, when a writer
 * finds it missing, damaged or of another generation, overfilled, or
 * with DD_KF_SEG_MAX segments full.
 */
#ifndef DD_CATALOG_KFILTER_H
#define DD_CATALOG_KFILTER_H

#include <stdbool.h>
#include <stdint.h>

#include "dedup.h"
#include "catalog/db.h"

#define DD_KF_FILE "keys.flt"
#define DD_KF_MAGIC "DDKEYFLT"
#define DD_KF_VERSION 3
#define DD_KF_HDR_SIZE 256        /* with the segment table */
#define DD_KF_BLOCK 64            /* bytes: one cache line */
#define DD_KF_PROBES 10           /* bits set per key, in one block */
#define DD_KF_SEG_MAX 8           /* segments: past them, a rebuild */
#define DD_KF_BUILD_BITS 32       /* per key a segment is made for */
#define DD_KF_FULL_BITS 24        /* per key: fewer, and a segment is full */
#define DD_KF_OVER_BITS 12        /* per key: fewer, and it is rebuilt */
#define DD_KF_MIN_BLOCKS 4096     /* 256 KiB */
#define DD_KF_MAX_BLOCKS ((uint64_t)1 << 32)

/* Segments a writer adds before it rebuilds instead: DD_KF_SEG_MAX
 * (tests lower it). */
extern unsigned dd_kf_seg_max;
/* The fewest blocks a segment is made with: DD_KF_MIN_BLOCKS (tests lower
 * it, to fill a segment with a few thousand keys). */
extern uint64_t dd_kf_min_blocks;

/* Makes sure the catalog has a filter of the generation meta names, big
 * enough for the DDT, and maps it for this process's probes and inserts;
 * rebuilds it otherwise.  Fails as the catalog's and the file's I/O
 * fail; a file that cannot be mapped leaves the process without a filter
 * (its probes ask the DDT), which is no error. */
int dd_db_kf_prepare(dd_db *db, dd_err *err);

/* false: the DDT holds no key of this hash (as of any committed state).
 * true: it may -- or there is no filter. */
bool dd_db_kf_maybe(dd_db *db, const uint8_t hash[DD_HASH_SIZE]);

/* Write txn, before it adds n keys (a flush's new ones): makes room for
 * them in the filter, adding a segment -- the file grown in place, not a
 * walk of the DDT -- or rebuilding it when it has DD_KF_SEG_MAX
 * (format/kfilter.md §4).  A filter missing, damaged or whose chain is
 * broken is left to the next dd_db_kf_prepare. */
int dd_kf_txn_reserve(dd_txn *txn, dd_err *err, uint64_t n);

/* Does the filter of generation gen hold every hash of the DDT txn
 * starts from?  meta ddt.filter names gen, and ddt.filter.txn that very
 * commit: no build that does not know the filter committed since. */
int dd_kf_txn_holds(dd_txn *txn, dd_err *err, uint64_t gen, bool *out);
/* Write txn: adds hash to the filter, as an insert does, and first
 * *absent: the filter says no key of the DDT txn starts from has this
 * hash, and may be trusted to (its block's sum checks, and it holds
 * every key of that commit: format/ddt.md §5).  A block whose sum fails
 * withdraws the filter at txn's commit. */
int dd_kf_txn_test_add(dd_txn *txn, dd_err *err, const uint8_t *hash,
		       bool *absent);
/* Write txn: fetches into the cache what dd_kf_txn_test_add will read
 * of hash, which a loop asks some keys later. */
void dd_kf_txn_prefetch(dd_txn *txn, const uint8_t *hash);
/* The generation of the filter write txn adds to (0: none). */
uint64_t dd_kf_txn_gen(dd_txn *txn);

/* Fetches into the cache the blocks dd_db_kf_maybe will read for hash,
 * which the caller asks some hashes later. */
void dd_db_kf_prefetch(dd_db *db, const uint8_t hash[DD_HASH_SIZE]);

/* What `dedup stat` shows of the filter in force: from the header of the
 * file of the generation meta names (its blocks' sums are the next
 * writer's to check); all 0 when there is none -- missing, stale or
 * damaged --, which the next writer rebuilds. */
typedef struct dd_kf_info {
	unsigned ki_segments;
	uint64_t ki_bytes;      /* the file's */
	uint64_t ki_bits;       /* the segments' */
} dd_kf_info;
int dd_kf_txn_info(dd_txn *txn, dd_err *err, dd_kf_info *out);

/* Is the filter in use (prepared, mapped) in this process? */
bool dd_db_kf_mapped(dd_db *db);

#endif
