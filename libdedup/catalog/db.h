/*
 * db.h -- the catalog: the store's LMDB environment, holding the dedup
 * table, snapshots, block maps, packs and metadata.  This module is the
 * only includer of <lmdb.h>.
 *
 * Named databases (format/ddt.md and format/store.md give the encodings):
 *
 *   meta   string key -> value      format version, store options, counters;
 *          "ucnt/"||be64 id||be64 row -> bitmap  uncounted positions (ucnt.h)
 *   ddt0   hash||variant -> entry   the dedup table (one of ddt0/ddt1 is
 *   ddt1                            live; gc rebuilds it into the other in
 *                                   key order to compact it, §ddt.4)
 *   snap   name -> snapshot record  committed snapshots
 *   bmap   be64 id||be64 idx -> key  block maps; a missing index is a hole
 *          be64 id||be64 off -> key||len   ... of content-defined blocks,
 *                                   by offset; a gap is a hole
 *   pend   be64 id -> name           snapshots being written (rolled back
 *                                   by the next writer after a crash)
 *   packs  be32 pack id -> record   committed end of each pack file
 *
 * Every write happens in one write transaction at a time (LMDB allows one
 * per environment, across processes: writers queue for it, briefly).
 * LMDB forbids opening one environment twice in a process, so dd_db_open
 * shares one handle per (device, inode) of the directory, refcounted.
 */
#ifndef DD_CATALOG_DB_H
#define DD_CATALOG_DB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "hash/hash.h"

typedef struct dd_db dd_db;
typedef struct dd_txn dd_txn;

int dd_db_open(dd_db **out, dd_err *err, const char *dir, bool create,
	       bool readonly);
void dd_db_close(dd_db *db);

/* A new catalog that nobody reads until it is complete (dedup repair
 * builds one beside the store's): its commits are not synced one by one;
 * dd_db_sync makes all of it durable at the end. */
int dd_db_open_unsynced(dd_db **out, dd_err *err, const char *dir);
int dd_db_sync(dd_db *db, dd_err *err);

/* Walks every page of data.mdb's newest snapshot through pread and checks
 * LMDB's own structure (check.c), so that damage LMDB would crash on is
 * DD_ECORRUPT instead.  dd_db_open does it for files of up to
 * DD_DB_CHECK_AT_OPEN_MAX bytes (about 25 ms from page cache at the
 * limit); scrub always. */
#define DD_DB_CHECK_AT_OPEN_MAX ((uint64_t)64 << 20)
int dd_db_check(dd_db *db, dd_err *err);

/* A damaged page of one of libdedup's tables, found by
 * dd_db_check_pages: the page, the one-line DD_ECORRUPT message, and the
 * keys it held or led to -- those from dp_lo (NULL: the table's first)
 * up to, not including, dp_hi (NULL: to the table's end), the bounds
 * its parent page gives it.  Valid during the call only. */
typedef struct dd_db_damage_page {
	const char *dp_table;
	uint64_t dp_pgno;
	const char *dp_msg;
	const uint8_t *dp_lo, *dp_hi;
	size_t dp_lolen, dp_hilen;
} dd_db_damage_page;
typedef int (*dd_db_damage_fn)(void *ctx, const dd_db_damage_page *p);

/* dd_db_check that goes on past a damaged page of a named table (its
 * subtree is skipped) after reporting it through fn, so that scrub can
 * name what each one holds.  DD_ECORRUPT with the first one's message
 * when any was reported.  Damage to LMDB's own trees (the free list, the
 * table of tables) stops the walk as in dd_db_check, with its message:
 * it is reported first, dp_table "(free list)" or "(main)" and no key
 * range, so that fn learns the walk stopped short.  Damage found before
 * any tree is walked (the meta page's table records) is not reported.
 * A non-zero return from fn stops the walk with DD_ECANCELED. */
int dd_db_check_pages(dd_db *db, dd_err *err, dd_db_damage_fn fn, void *ctx);

/* Ranges of one table's keys that a read transaction passes over
 * (dd_txn_skip): the keys of damaged pages, [kr_lo, kr_hi) as
 * dd_db_check_pages reports them; a NULL bound is the table's end on
 * that side. */
typedef struct dd_key_range {
	const uint8_t *kr_lo, *kr_hi;
	size_t kr_lolen, kr_hilen;
} dd_key_range;

/* Makes read transaction txn pass over ranges r[0..n) of the keys of
 * table `table` ("ddt0", "snap", "bmap", ...: dd_db_damage_page's
 * dp_table): its walks and cursors neither read a page of them nor
 * return a key in them; keys outside them are all returned (cursor.c).
 * The ranges must be sorted and disjoint, none ending where the next
 * begins, and are the caller's: they must outlive txn.  A later call for
 * the same table replaces them.  DD_EINVAL for a write txn or a table
 * libdedup does not keep. */
int dd_txn_skip(dd_txn *txn, dd_err *err, const char *table,
		const dd_key_range *r, size_t n);
/* The range of r[0..n) (sorted as dd_txn_skip's) that holds key, or
 * NULL; key NULL: the one that begins at the table's start, if any. */
const dd_key_range *dd_key_ranges_find(const dd_key_range *r, size_t n,
				       const void *key, size_t klen);

/* Opens like dd_db_open, without the whole-file check: for scrub, which
 * runs it itself and reports every damaged page (the guard still checks
 * every page each call reads). */
int dd_db_open_unchecked(dd_db **out, dd_err *err, const char *dir,
			 bool readonly);

/* A write transaction must stay on the thread that began it. */
int dd_txn_begin(dd_db *db, dd_err *err, bool write, dd_txn **out);
int dd_txn_commit(dd_txn *txn, dd_err *err);
void dd_txn_abort(dd_txn *txn);

/* A read transaction can be parked and later moved to the newest commit
 * without giving its reader slot back (LMDB's reset/renew): a parked one
 * holds back no page LMDB could reuse.  dd_txn_renew of one that is not
 * parked does nothing. */
void dd_txn_reset(dd_txn *txn);
int dd_txn_renew(dd_txn *txn, dd_err *err);

/* ---- meta ---------------------------------------------------------------*/

/* DD_ENOENT when absent; DD_ECORRUPT when the value is not 8 bytes. */
int dd_meta_get_u64(dd_txn *txn, dd_err *err, const char *key, uint64_t *out);
int dd_meta_put_u64(dd_txn *txn, dd_err *err, const char *key, uint64_t v);
/* Sets (on) or clears a bit of meta `features` (format/store.md §2),
 * writing only when it changes; an absent key is 0. */
int dd_meta_feature(dd_txn *txn, dd_err *err, uint64_t bit, bool on);

/* ---- the dedup table (format/ddt.md) -------------------------------------*/

#define DD_DDT_KEY_SIZE 33
#define DD_DDT_VAL_SIZE 32
#define DD_DDT_MAX_VARIANT 255

/* Entry flags. */
#define DD_DDE_PENDING 0x0001u /* in the writer's current batch, not yet in a
				  pack: de_offset is the batch index.  Never
				  committed (format/ddt.md §3). */
#define DD_DDE_MISSING 0x0002u /* no pack holds the block: repair found it
				  in a manifest only.  Pack, offset, psize and
				  codec are 0; a read fails, a writer that
				  brings the block stores it here */
#define DD_DDE_DAMAGED 0x0004u /* scrub found the record at (pack, offset)
				  unreadable: a writer that brings the block
				  stores it and points the entry at it
				  (format/ddt.md §3) */

typedef struct dd_ddt_key {
	uint8_t dk_hash[DD_HASH_SIZE];
	uint8_t dk_variant; /* > 0 only for verified collisions */
} dd_ddt_key;

typedef struct dd_ddt_ent {
	uint8_t de_codec;
	uint16_t de_flags;
	uint32_t de_pack;
	uint64_t de_offset;   /* of the record header in the pack */
	uint32_t de_psize;    /* stored payload bytes */
	uint32_t de_lsize;    /* logical bytes */
	uint64_t de_refcnt;   /* block-map references; 0 awaits gc */
	uint64_t de_dead_since; /* refcnt 0: the transaction that brought it
				   to 0 (0: unknown, long ago); gc frees it
				   only once no running writer is older */
} dd_ddt_ent;

/* A count field with this bit set is a dead entry's death transaction. */
#define DD_DDT_DEAD ((uint64_t)1 << 63)

/* A key as 32 bytes, for tables keyed by a hash (common/hmap.h): the hash
 * itself for variant 0, else the SHA-256 of hash and variant -- so that
 * verify-mode variants of one hash stay apart. */
void dd_ddt_key_flat(const dd_ddt_key *key, uint8_t out[DD_HASH_SIZE]);

/* DD_ENOENT when absent; DD_ECORRUPT for a value that fails to decode. */
int dd_ddt_get(dd_txn *txn, dd_err *err, const dd_ddt_key *key,
	       dd_ddt_ent *out);
int dd_ddt_put(dd_txn *txn, dd_err *err, const dd_ddt_key *key,
	       const dd_ddt_ent *ent);
/* dd_ddt_get in a write txn through its cursor, which a flush moves in
 * key order (ddt.c): most lookups stay on the leaf it is on. */
int dd_ddt_get_w(dd_txn *txn, dd_err *err, const dd_ddt_key *key,
		 dd_ddt_ent *out);
/* n more references to the entry of key, in one descent of the tree (a
 * cursor's get, then its put in place) where get + put take two; a dead
 * entry comes alive again.  *out is the entry as written.  DD_ENOENT
 * (err unset) when key is absent or its entry MISSING (no bytes to
 * reference); DD_ECORRUPT when the count would overflow. */
int dd_ddt_add_refs(dd_txn *txn, dd_err *err, const dd_ddt_key *key,
		    uint64_t n, dd_ddt_ent *out);
/* The entry (any variant of hash) that names the record at pack, off:
 * 0 with *ent, DD_ENOENT when none does, or the lookup's error -- a
 * damaged entry is not "none": callers about to destroy an unnamed record
 * must stop on it. */
int dd_ddt_find_record(dd_txn *txn, dd_err *err, const uint8_t *hash,
		       uint32_t pack, uint64_t off, dd_ddt_ent *ent);
/* Adds key unless it is there: 0 when added, DD_EEXIST with *old its entry
 * when it was (one descent of the tree where get + put take two). */
int dd_ddt_insert(dd_txn *txn, dd_err *err, const dd_ddt_key *key,
		  const dd_ddt_ent *ent, dd_ddt_ent *old);
/* dd_ddt_insert of a key whose hash no committed DDT state txn starts
 * from holds -- the key filter said so while the chain of commits held
 * (format/ddt.md §5), and that question (dd_kf_txn_test_add) put the
 * hash in the filter txn keeps: no part is looked in first, and the
 * filter is not asked again. */
int dd_ddt_insert_absent(dd_txn *txn, dd_err *err, const dd_ddt_key *key,
			 const dd_ddt_ent *ent, dd_ddt_ent *old);
/* The longest table key of a DDT entry: a run's (format/ddt.md §5). */
#define DD_DDT_PART_KEY_MAX 74
/* dd_ddt_get in a transaction that passes over damaged pages
 * (dd_txn_skip): DD_ENOENT when no part it reads holds key; *passed_len
 * is then not 0 when a part the key might be in lies in a range passed
 * over, and passed[] that part's table key (dd_scrub_pages_find). */
int dd_ddt_get_past(dd_txn *txn, dd_err *err, const dd_ddt_key *key,
		    dd_ddt_ent *out, uint8_t passed[DD_DDT_PART_KEY_MAX],
		    size_t *passed_len);
/* Whether this write transaction's inserts go to a sorted run
 * (format/ddt.md §5): a flush of many new keys says so. */
void dd_ddt_use_runs(dd_txn *txn, bool on);
/* The DDT's sorted runs as txn sees them (meta ddt.runs). */
uint64_t dd_ddt_runs(const dd_txn *txn);
/* At most this many runs: a flush that would start one more first folds
 * them into the main table (dd_ddt_fold). */
#define DD_DDT_RUNS_MAX 32
/* meta `features` bit: the live DDT may hold runs (format/store.md §2) */
#define DD_META_FEATURE_DDT_RUNS 0x4u
int dd_ddt_del(dd_txn *txn, dd_err *err, const dd_ddt_key *key);

/* The live DDT's table, "ddt0" or "ddt1" (format/ddt.md §4). */
const char *dd_ddt_live_table(const dd_txn *txn);

/* Walks the live DDT in key order; fn returning non-zero stops the walk
 * with that value.  fn must not write to the DDT (use dd_ddt_put after). */
typedef int (*dd_ddt_walk_fn)(void *ctx, const dd_ddt_key *key,
			      const dd_ddt_ent *ent);
int dd_ddt_walk(dd_txn *txn, dd_err *err, dd_ddt_walk_fn fn, void *ctx);
/* Every entry once, not in key order (the main part, then each run:
 * format/ddt.md §5) -- one cursor, for a walk that only counts or
 * collects; fn as dd_ddt_walk's. */
int dd_ddt_scan(dd_txn *txn, dd_err *err, dd_ddt_walk_fn fn, void *ctx);
/* The number of DDT entries (live and dead) as txn sees it: LMDB's count,
 * no walk. */
int dd_ddt_count(dd_txn *txn, dd_err *err, uint64_t *n);

/*
 * The unflagged claim (format/store.md §2, meta ddt.unflagged): whether
 * no entry of the DDT is flagged MISSING or DAMAGED, known without a
 * walk.  Every write transaction of a build that keeps it leaves its own
 * id there when the claim holds after it, 0 when it may not (it wrote a
 * flagged entry); a commit of a build that does not keep it leaves the
 * id stale, and the next one withdraws the claim.  So the claim holds in
 * txn exactly when meta names the commit txn starts from (*out true).
 * Absent in older catalogs: unknown until a census.
 */
int dd_ddt_unflagged(dd_txn *txn, dd_err *err, bool *out);
/* Whether meta has the claim at all, true or withdrawn (*out); a writer
 * takes a census when it has not (dd_db_kf_prepare). */
int dd_ddt_unflagged_known(dd_txn *txn, dd_err *err, bool *out);
/* Whether meta has the claim and it does not hold in txn (*out): what a
 * census may restore after flags were cleared (scrub, heal).  A catalog
 * without the claim is not: its first writer takes the census, and
 * readers leave an older build's catalog as it was. */
int dd_ddt_unflagged_withdrawn(dd_txn *txn, dd_err *err, bool *out);
/* Write transaction: a walk of the whole DDT counts its flagged entries
 * (*flagged, may be NULL), and the claim becomes what it found. */
int dd_ddt_census(dd_txn *txn, dd_err *err, uint64_t *flagged);
/* The same, for a walk of every entry the caller made in txn (the key
 * filter's rebuild): it found `flagged` of them flagged. */
void dd_ddt_census_done(dd_txn *txn, uint64_t flagged);
/* Is this entry flagged MISSING or DAMAGED? */
bool dd_ddt_ent_flagged(const dd_ddt_ent *e);

/* Rewrites the live DDT into the other table in key order (full pages) and
 * makes that the live one, dropping entries with refcount 0.  *removed
 * gets their count.  Write transaction only. */
int dd_ddt_compact(dd_txn *txn, dd_err *err, uint64_t *removed);
/* The same, keeping every entry: folds the runs into one table. */
int dd_ddt_fold(dd_txn *txn, dd_err *err);

typedef struct dd_db_usage {
	uint64_t ddt_entries;
	uint64_t ddt_bytes;     /* pages of the live DDT tree x page size */
	uint64_t meta_bytes;    /* pages of every other table */
	uint64_t file_bytes;    /* pages in use in the data file */
} dd_db_usage;
int dd_db_usage_get(dd_txn *txn, dd_err *err, dd_db_usage *out);

/* ---- snapshots and block maps (format/store.md) ---------------------------*/

typedef struct dd_snap_rec {
	uint64_t sr_id;
	uint32_t sr_block_size;
	uint64_t sr_size;
	uint64_t sr_blocks;
	uint64_t sr_zero_blocks;
	int64_t sr_ctime;
	uint8_t sr_digest[DD_HASH_SIZE];
	int sr_digest_version;  /* DD_DIGEST_V1 or _V2 (fixed blocks; flag
				   bit 1, format/store.md §3); 0 reads as 1 */
} dd_snap_rec;

int dd_snap_get(dd_txn *txn, dd_err *err, const char *name, dd_snap_rec *out);
int dd_snap_put(dd_txn *txn, dd_err *err, const char *name,
		const dd_snap_rec *rec);
int dd_snap_del(dd_txn *txn, dd_err *err, const char *name);

typedef int (*dd_snap_walk_fn)(void *ctx, const char *name,
			       const dd_snap_rec *rec);
int dd_snap_walk(dd_txn *txn, dd_err *err, dd_snap_walk_fn fn, void *ctx);
/* The snapshot with this id, by a walk (used after crashes); DD_ENOENT. */
int dd_snap_find_id(dd_txn *txn, dd_err *err, uint64_t id,
		    char name[DD_NAME_MAX + 1], dd_snap_rec *rec);
/* Drops every block-map reference of snapshot id (refcount - 1 each, a
 * count reaching 0 recording the transaction, format/ddt.md §1) and
 * deletes its map.  Write transaction. */
int dd_snap_drop_refs(dd_txn *txn, dd_err *err, uint64_t id);
/* The same for a map only part of whose entries count a reference (a
 * writer that defers its DDT changes, store/defer.h): counted says which;
 * the others are deleted without touching the DDT. */
typedef bool (*dd_bmap_counted_fn)(void *ctx, uint64_t pos,
				   const dd_ddt_key *key);
int dd_snap_drop_refs_if(dd_txn *txn, dd_err *err, uint64_t id,
			 dd_bmap_counted_fn counted, void *ctx);

/*
 * A block map entry is found by its position: the block's index in a
 * store of fixed blocks, its byte offset in a store whose blocks have
 * lengths of their own (content-defined, format/store.md §4.2), whose
 * entries also hold each block's length.  Which one a catalog has is the
 * store's (meta's chunker): dd_db_set_varblock says so once it is read.
 */

/* max_len 0: fixed blocks (the default); else each block is 1..max_len
 * bytes and its map is keyed by offset. */
void dd_db_set_varblock(dd_db *db, uint32_t max_len);
/* 0, or the longest block of a content-defined catalog. */
uint32_t dd_db_varblock(const dd_db *db);

/* Appends the entry at position pos of snapshot id: positions must
 * increase within a snapshot (else DD_ECORRUPT), while other snapshots'
 * maps may grow at the same time (MDB_APPEND when it is the table's last
 * key, an ordinary put otherwise); len, the
 * block's length, is kept in a content-defined catalog (1..max_len),
 * ignored in a fixed one. */
int dd_bmap_append(dd_txn *txn, dd_err *err, uint64_t id, uint64_t pos,
		   uint32_t len, const dd_ddt_key *key);
/* Appends block number idx of snapshot id, bytes [off, off + len) of the
 * image, at the position the catalog keys it by. */
int dd_bmap_append_block(dd_txn *txn, dd_err *err, uint64_t id, uint64_t idx,
			 uint64_t off, uint32_t len, const dd_ddt_key *key);

/* A cursor over one snapshot's block map from a starting position. */
typedef struct dd_bmap_cur dd_bmap_cur;
int dd_bmap_open(dd_txn *txn, dd_err *err, uint64_t id, dd_bmap_cur **out);
/* Positions at the first entry with position >= pos.  Returns 1 and
 * fills *pos_out/key when found, 0 at the end of this snapshot's map. */
int dd_bmap_seek(dd_bmap_cur *cur, dd_err *err, uint64_t pos,
		 uint64_t *pos_out, dd_ddt_key *key);
int dd_bmap_next(dd_bmap_cur *cur, dd_err *err, uint64_t *pos_out,
		 dd_ddt_key *key);
/* The length of the entry the last seek, next or find returned: the
 * block's bytes in a content-defined catalog, 0 in a fixed one. */
uint32_t dd_bmap_len(const dd_bmap_cur *cur);
/* Content-defined catalogs: positions at the entry whose block holds
 * byte off -- or, when off is in a hole, the first entry after it.
 * Returns 1 with *off_out (<= off when the block holds it) and key, 0
 * when no entry is left at or after off.  O(log n): a seek to off minus
 * the longest block, then a few steps (blocks are at least a quarter of
 * the average, format/chunker.md §3).  DD_EINVAL in a fixed catalog. */
int dd_bmap_find(dd_bmap_cur *cur, dd_err *err, uint64_t off,
		 uint64_t *off_out, dd_ddt_key *key);
void dd_bmap_close(dd_bmap_cur *cur);

/* Deletes a snapshot's whole map, calling fn for each entry first (to drop
 * its reference).  Write transaction only.  fn may write to the DDT. */
typedef int (*dd_bmap_drop_fn)(void *ctx, uint64_t pos,
			       const dd_ddt_key *key);
int dd_bmap_drop(dd_txn *txn, dd_err *err, uint64_t id, dd_bmap_drop_fn fn,
		 void *ctx);

/* Walks every entry of every map (scrub maps bad blocks to snapshots). */
typedef int (*dd_bmap_walk_fn)(void *ctx, uint64_t id, uint64_t pos,
			       const dd_ddt_key *key);
int dd_bmap_walk_all(dd_txn *txn, dd_err *err, dd_bmap_walk_fn fn, void *ctx);

/* Snapshots being written: id -> name and, for a resumable receive, the
 * state it resumes from (format/store.md §5: name, NUL, state bytes). */
#define DD_PEND_STATE_MAX 128
typedef struct dd_pend_rec {
	char pr_name[DD_NAME_MAX + 1];
	uint8_t pr_state[DD_PEND_STATE_MAX];
	size_t pr_state_len;          /* 0: not resumable */
} dd_pend_rec;

int dd_pend_put(dd_txn *txn, dd_err *err, uint64_t id, const char *name);
int dd_pend_put_state(dd_txn *txn, dd_err *err, uint64_t id, const char *name,
		      const void *state, size_t len);
typedef int (*dd_pend_walk_fn)(void *ctx, uint64_t id, const dd_pend_rec *rec);
int dd_pend_walk(dd_txn *txn, dd_err *err, dd_pend_walk_fn fn, void *ctx);
int dd_pend_del(dd_txn *txn, dd_err *err, uint64_t id);
/* First pending id, 1 if found, 0 if none. */
int dd_pend_first(dd_txn *txn, dd_err *err, uint64_t *id);

/* ---- packs ----------------------------------------------------------------*/

/* Committed end offset of a live pack (format/store.md §5); DD_ENOENT for
 * an absent or doomed one. */
int dd_packs_get(dd_txn *txn, dd_err *err, uint32_t id, uint64_t *end);
int dd_packs_put(dd_txn *txn, dd_err *err, uint32_t id, uint64_t end);
int dd_packs_del(dd_txn *txn, dd_err *err, uint32_t id);
/* Live packs only. */
typedef int (*dd_packs_walk_fn)(void *ctx, uint32_t id, uint64_t end);
int dd_packs_walk(dd_txn *txn, dd_err *err, dd_packs_walk_fn fn, void *ctx);

/* A pack gc emptied is doomed, not deleted: readers that began before the
 * commit `since` (a transaction id) may still read it.  Its file goes
 * once no reader is older than that (store.c). */
int dd_packs_doom(dd_txn *txn, dd_err *err, uint32_t id, uint64_t since);
typedef int (*dd_doomed_walk_fn)(void *ctx, uint32_t id, uint64_t since);
int dd_packs_walk_doomed(dd_txn *txn, dd_err *err, dd_doomed_walk_fn fn,
			 void *ctx);


/* The id this transaction has (a write transaction: the one it commits
 * as). */
uint64_t dd_txn_id(const dd_txn *txn);
/* The id of the environment's last commit, in any process. */
int dd_db_last_commit(dd_db *db, dd_err *err, uint64_t *txnid);
/* The oldest transaction id a live reader of the environment holds, in
 * any process; UINT64_MAX when there is none.  Clears stale readers. */
int dd_db_oldest_reader(dd_db *db, dd_err *err, uint64_t *txnid);

#endif
