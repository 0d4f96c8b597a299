/*
 * db_internal.h -- what the files of catalog/ share.  Only catalog/ includes it.
 */
#ifndef DD_DDT_DB_INTERNAL_H
#define DD_DDT_DB_INTERNAL_H

#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "catalog/db.h"
#include "catalog/lmdb_page.h"

enum dd_dbi_index {
	DD_DBI_META = 0,
	DD_DBI_DDT0,
	DD_DBI_DDT1,
	DD_DBI_SNAP,
	DD_DBI_BMAP,
	DD_DBI_PEND,
	DD_DBI_PACKS,
	DD_DBI_COUNT
};

/* The guard's trees: libdedup's tables, then LMDB's own two. */
#define DD_TREE_MAIN DD_DBI_COUNT
#define DD_TREE_FREE (DD_DBI_COUNT + 1)
#define DD_TREE_COUNT (DD_DBI_COUNT + 2)

extern const char *const dd_db_names[DD_DBI_COUNT];

struct dd_db {
	MDB_env *db_env;
	MDB_dbi db_dbi[DD_DBI_COUNT];
	dev_t db_dev;              /* registry key (db.c) */
	ino_t db_ino;
	int db_refs;
	struct dd_db *db_next;
	void *db_map;              /* LMDB's map, for MADV_RANDOM; set */
	size_t db_map_len;         /* at open (NULL: not found) */
	bool db_map_read;          /* ... and dd_guard_get's answers: the
				      only map of the file found */
	/* guard.c */
	bool db_guard_off;         /* an LMDB whose page layout the guard and
				      the whole-file check do not know */
	int db_fd;                 /* data.mdb: LMDB's descriptor */
	uint32_t db_psize;
	uint64_t db_max_pg;        /* the last page the map can hold */
	_Atomic uint64_t *db_sound; /* which pages passed, and as what */
	size_t db_sound_bytes;
	/* the last write transaction's branch-page cache (guard.c) */
	uint8_t *_Atomic db_guard_wcache;
	char db_file[4200];        /* data.mdb's path, for messages */
	/* the snapshot (txnid) whose free list was last checked against the
	 * pages in use, or that this process's own writer committed on one
	 * checked: a write txn on it skips the check (guard.c) */
	_Atomic uint64_t db_free_checked;
	/* block maps of blocks with lengths of their own, none longer than
	 * this (maps.c); 0: fixed blocks, keyed by index */
	_Atomic uint32_t db_var_max;
	/* kfilter.c: the key filter this process maps (NULL: none), the
	 * lock of its replacement; inserts keep it once a writer asked
	 * (db_kf_enabled); detached: the mapping is not meta's generation
	 * and none is, so inserts add to nothing */
	struct dd_kf *_Atomic db_kf;
	pthread_mutex_t db_kf_lock;
	_Atomic bool db_kf_enabled;
	_Atomic bool db_kf_detached;
};

/* A cursor's guard: where in the committed tree the cursor is, so that
 * the leaf it steps onto next is checked first. */
struct dd_guard_level {
	uint64_t pgno;
	unsigned idx, nkeys;
};
struct dd_guard_cur {
	int gc_tree;
	bool gc_at;                /* on a leaf; false past the last */
	bool gc_read_leaf;         /* read leaves (else only check them) */
	unsigned gc_depth;
	struct dd_guard_level gc_lv[LM_MAXDEPTH];
	unsigned gc_last_len;
	uint8_t gc_last[LM_MAXKEY]; /* the leaf's last key */
	/* DD_GUARD_JUMP: the skipped range the next leaf begins in */
	const dd_key_range *gc_jump;
};

/* The keys whose descent reaches one leaf: [lo, hi), inf when open. */
struct dd_guard_fences {
	bool gf_lo_inf, gf_hi_inf;
	unsigned gf_lo_len, gf_hi_len;
	uint8_t gf_lo[LM_MAXKEY], gf_hi[LM_MAXKEY];
};

/* The last leaf a transaction checked in a table (guard.c). */
struct dd_guard_leaf {
	bool gl_valid;
	bool gl_neighbours;        /* and what a delete there may read */
	struct dd_guard_fences gl_fences;
	struct dd_guard_cur gl_cur;
};

/* Branch pages a txn keeps (guard.c): a writer's random lookups cross
 * a few hundred of them between commits. */
#define DD_GUARD_CACHE_WRITE ((size_t)4 << 20)
#define DD_GUARD_CACHE_READ ((size_t)256 << 10)
#define DD_GUARD_WAYS 4

/* One snapshot's table roots, as the guard reads them (guard.c). */
struct dd_lm_tree_root {
	uint64_t root;             /* LM_P_INVALID: empty */
	unsigned depth;
};

struct dd_guard_snap {
	uint64_t gs_last_pg;       /* of the committed snapshot read */
	uint64_t gs_file_pgs;      /* pages the file held at its begin: the
				      pages LMDB may read (dd_guard_begin) */
	struct dd_lm_tree_root gs_tree[DD_TREE_COUNT];
	uint8_t *gs_buf;           /* a leaf page */
	size_t gs_nslots;          /* 0 until a branch page is read */
	uint8_t *gs_slots;         /* branch pages, gs_nslots of them */
	uint64_t *gs_slot_pgno;    /* 0: empty */
	uint8_t *gs_slot_next;     /* per set of DD_GUARD_WAYS: next to go */
	struct dd_guard_leaf gs_leaf[DD_DBI_COUNT];
	uint64_t gs_txnid;         /* the snapshot all of the above is of */
	bool gs_ready;             /* dd_guard_begin passed it */
};

struct dd_txn {
	dd_db *tx_db;
	MDB_txn *tx_mdb;
	MDB_dbi tx_ddt;            /* the live DDT table */
	MDB_dbi tx_ddt_other;      /* the one gc compacts into */
	unsigned tx_ddt_which;     /* 0: ddt0 live, 1: ddt1 live */
	bool tx_write;
	bool tx_parked;            /* a read txn after dd_txn_reset */
	/* renewed on the snapshot it parked on -- nothing committed
	 * meanwhile (LMDB numbers every commit) --: what the guard and
	 * dd_txn_load_ddt read of it still holds, and is not read again
	 * (a writer's lookup renews once a batch: 15 page reads each) */
	bool tx_same_snap;
	struct dd_guard_snap tx_guard;
	/* key ranges each table's cursors pass over (dd_txn_skip) */
	const dd_key_range *tx_skip[DD_DBI_COUNT];
	size_t tx_nskip[DD_DBI_COUNT];
	/* kfilter.c: meta's filter generation was read; the filter a
	 * bit was set in, to sync before the commit */
	bool tx_kf_checked;
	bool tx_kf_rebuilt;
	bool tx_kf_holds;          /* it holds every key of the commit the
				      txn starts from (dd_kf_txn_holds) */
	bool tx_kf_damaged;        /* a block's sum failed: withdrawn */
	struct dd_kf *tx_kf_dirty;
	/* ddt.c: a write transaction's cursor on a DDT table (tx_ddt_cur_tree),
	 * opened at its first update; LMDB closes it when the transaction
	 * ends */
	MDB_cursor *tx_ddt_cur;
	int tx_ddt_cur_tree;
	/* ddt.c: meta ddt.unflagged's claim.  tx_ddt_flagged: this
	 * transaction wrote an entry flagged MISSING or DAMAGED, or its
	 * census found one; tx_ddt_census: it walked the whole DDT
	 * (dd_ddt_census_done), so it knows without the chain */
	bool tx_ddt_flagged;
	bool tx_ddt_census;
	/* ddt_run.c: the sorted runs 1..tx_ddt_runs (meta ddt.runs); the
	 * part a key was last found in (0: main); whether this write
	 * transaction's inserts go to a run (dd_ddt_use_runs), the run it
	 * appends to (0: none yet), its last key, and its cursor there */
	uint64_t tx_ddt_runs;
	uint64_t tx_ddt_hit;
	bool tx_ddt_to_runs;
	uint64_t tx_ddt_run;
	uint8_t tx_ddt_run_last[DD_DDT_KEY_SIZE];
	MDB_cursor *tx_ddt_run_cur;
};


/* kfilter.c: an insert of hash into the DDT in write txn adds it to the
 * filter; before a write txn commits, it leaves its id in meta (the
 * filter is withdrawn when the previous commit's was not there) and
 * syncs the bits it set; the catalog's close unmaps. */
int dd_kf_txn_add(dd_txn *txn, dd_err *err, const uint8_t *hash);

int dd_kf_txn_commit(dd_txn *txn, dd_err *err);
/* ddt.c: before a write txn commits, meta ddt.unflagged takes its id when
 * no DDT entry is flagged after it, else 0 (db.h, dd_ddt_unflagged) */
int dd_ddt_txn_commit(dd_txn *txn, dd_err *err);
void dd_db_kf_close(dd_db *db);

/* check.c: the structural check of data.mdb (fd, page size psize) for
 * the snapshot whose meta page has this txnid; on_damage as
 * dd_db_check_pages' (may be NULL).  DD_DB_CHECK_RETRY when
 * neither meta page has it any more (a writer committed twice since the
 * txnid was read). */
#define DD_DB_CHECK_RETRY 1
int dd_db_check_file(dd_err *err, int fd, const char *path, uint32_t psize,
		     uint64_t txnid, dd_db_damage_fn on_damage, void *ctx);

/*
 * guard.c: before each LMDB call, the pages it will read in the
 * committed snapshot are checked (dd_lm_page_verify), so that damage LMDB
 * would crash on is DD_ECORRUPT instead.  Each returns 0 or a DD_E* code
 * with err set.
 */
enum dd_guard_op {
	DD_GUARD_READ,   /* mdb_get, and mdb_put without MDB_APPEND */
	DD_GUARD_DEL,    /* mdb_del, mdb_cursor_del */
	DD_GUARD_APPEND, /* mdb_put with MDB_APPEND */
};
#define DD_GUARD_PUT DD_GUARD_READ

int dd_guard_open(dd_db *db, dd_err *err, int fd, uint32_t psize,
		  uint64_t map_bytes, const char *file);
void dd_guard_close(dd_db *db);
/* After mdb_txn_begin or mdb_txn_renew; DD_DB_CHECK_RETRY when a read
 * txn's snapshot was overwritten meanwhile (begin it again). */
int dd_guard_begin(dd_txn *txn, dd_err *err);
/* Does txn's guard state hold for the snapshot its LMDB transaction is
 * on -- a read transaction renewed on the one it last began on? */
bool dd_guard_holds(const dd_txn *txn);
void dd_guard_end(dd_txn *txn);
int dd_guard_key(dd_txn *txn, dd_err *err, int tree, const void *key,
		 size_t klen, enum dd_guard_op op);
/* After dd_guard_key(k, DD_GUARD_READ) in a read transaction: mdb_get's
 * answer from the leaf that call checked, without LMDB's own descent to
 * it.  1: found, *v in LMDB's map (valid while the transaction is, as
 * mdb_get's is); 0: not there; -1: ask mdb_get. */
int dd_guard_get(dd_txn *txn, int tree, const MDB_val *k, MDB_val *v);
/* Every page of a tree (before mdb_drop). */
int dd_guard_table(dd_txn *txn, dd_err *err, int tree);

void dd_guard_cur_init(struct dd_guard_cur *cur, int tree);
/* Before MDB_SET_RANGE to key, or MDB_FIRST when key is NULL.  Either
 * may return DD_GUARD_JUMP: LMDB would step onto a leaf that begins in
 * a range txn skips (cur->gc_jump); cursor.c seeks past it instead. */
#define DD_GUARD_JUMP 2
int dd_guard_seek(dd_txn *txn, dd_err *err, struct dd_guard_cur *cur,
		  const void *key, size_t klen);
/* Before MDB_NEXT from the entry with this key. */
int dd_guard_next(dd_txn *txn, dd_err *err, struct dd_guard_cur *cur,
		  const void *key, size_t klen);

/* A cursor's moves, guarded and past the ranges txn skips (cursor.c):
 * 1 with *k and *v at the entry reached, 0 past the table's last, or a
 * DD_E* code with err set (`what` names the operation).  seek goes to
 * the first key at or after key (NULL: the table's first); next from
 * the entry *k holds, which the cursor's last move returned. */
int dd_cursor_seek(dd_txn *txn, dd_err *err, MDB_cursor *mc,
		   struct dd_guard_cur *g, const void *key, size_t klen,
		   MDB_val *k, MDB_val *v, const char *what);
int dd_cursor_next(dd_txn *txn, dd_err *err, MDB_cursor *mc,
		   struct dd_guard_cur *g, MDB_val *k, MDB_val *v,
		   const char *what);

/*
 * A table's operations with their guard (db.c).  `tree` is a DD_DBI_*
 * index; `what` names the operation in errors.  get and del return
 * DD_ENOENT for an absent key without setting err; put returns DD_EEXIST
 * (err unset) when MDB_APPEND meets a key not past the last.
 */
int dd_table_get(dd_txn *txn, dd_err *err, int tree, MDB_val *k, MDB_val *v,
		 const char *what);
int dd_table_put(dd_txn *txn, dd_err *err, int tree, MDB_val *k, MDB_val *v,
		 unsigned flags, const char *what);
int dd_table_del(dd_txn *txn, dd_err *err, int tree, MDB_val *k,
		 const char *what);
/* Every entry in key order; fn returning non-zero stops the walk with
 * that value. */
typedef int (*dd_table_fn)(void *ctx, dd_err *err, const MDB_val *k,
			   const MDB_val *v);
int dd_table_walk(dd_txn *txn, dd_err *err, int tree, dd_table_fn fn,
		  void *ctx, const char *what);

/*
 * ddt_run.c: the DDT's sorted runs (format/ddt.md §5).  A run entry's
 * key is 33 bytes 0xff, the run (BE64), the entry's key.
 */
#define DD_RUN_KEY_SIZE DD_DDT_PART_KEY_MAX
_Static_assert(DD_RUN_KEY_SIZE == 2 * DD_DDT_KEY_SIZE + 8, "run key size");
/* Reads meta ddt.runs into txn (at its begin). */
int dd_ddt_runs_load(dd_txn *txn, dd_err *err);
/* Finds the entry of key kb in table `tree`'s parts: 0 with *v its value
 * and rk, *rklen its table key; DD_ENOENT in none.  cur NULL: by mdb_get;
 * else cur is left at the entry (a write transaction's update).  A part
 * whose key lies in a range txn passes over (dd_txn_skip) is not looked
 * in: passed (when not NULL) gets the first such key, *passed_len its
 * length (0: none). */
int dd_ddt_locate(dd_txn *txn, dd_err *err, int tree,
		  const uint8_t kb[DD_DDT_KEY_SIZE], MDB_cursor *cur,
		  uint8_t rk[DD_RUN_KEY_SIZE], size_t *rklen, MDB_val *v,
		  uint8_t *passed, size_t *passed_len);
/* Appends kb's entry to a run (kb is in no part: the caller knows). */
int dd_ddt_run_append(dd_txn *txn, dd_err *err,
		      const uint8_t kb[DD_DDT_KEY_SIZE],
		      const uint8_t vb[DD_DDT_VAL_SIZE]);
/* Every entry of table `tree`, its parts merged in key order; k is the
 * entry's 33-byte key.  A key met twice is damage. */
int dd_ddt_parts_walk(dd_txn *txn, dd_err *err, int tree, dd_table_fn fn,
		      void *ctx);
/* The same in table order -- main, then each run: one cursor, no merge,
 * for walks that only count or collect (a key met twice is not seen). */
int dd_ddt_parts_scan(dd_txn *txn, dd_err *err, int tree, dd_table_fn fn,
		      void *ctx);
/* After a compaction wrote every part into one table: no runs. */
int dd_ddt_runs_folded(dd_txn *txn, dd_err *err);

/* Translates an LMDB return code into a DD_E* code with a message. */
int dd_mdb_error(dd_err *err, int rc, const char *what);

/* Damage found in the catalog: DD_ECORRUPT with the message and the way
 * out, so every command that meets it names it (format/store.md §7):
 * "...: the catalog is damaged: run dedup repair". */
int dd_db_damage(dd_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
