/*
 * writer_internal.h -- the snapshot writer's state, shared by writer.c
 * (images written as bytes, through the block pipeline), receive.c, which
 * wraps a writer fed with hashed, compressed blocks from a replication
 * stream, and the two halves every writer has: wops.c (what a commit
 * interval decided, applied to the catalog at its commit) and wpack.c
 * (the packs a writer appends to).  Only store/ includes it.
 *
 * Many writers run at once (docs/design.md, "Concurrent writers").  A
 * writer holds no catalog lock while it works: it decides each block's
 * fate against a read transaction, appends new blocks to packs only it
 * writes, and records its decisions as operations; a commit applies them
 * in one short write transaction.
 */
#ifndef DD_STORE_WRITER_INTERNAL_H
#define DD_STORE_WRITER_INTERNAL_H

#include "chunk/pipeline.h"
#include "store/defer.h"
#include "store/store_internal.h"

#define DD_WRITER_BATCH_BYTES ((size_t)4 << 20)

enum {
	DD_W_OPEN,
	DD_W_FAILED,
	DD_W_COMMITTED,
	DD_W_ABORTED,
	DD_W_SUSPENDED   /* kept for later by its owner (receive.c) */
};

/* Runs at every commit while the writer is open, in the commit's write
 * transaction (w_txn): a resumable receive saves its state there
 * (receive.c).  Cleared when the writer finishes. */
typedef int (*dd_writer_hook)(void *ctx);

/* ---- wops.c: one commit interval's decisions ---------------------------*/

enum {
	DD_OP_REF,   /* a reference to a DDT entry found usable */
	DD_OP_NEW,   /* a block this writer appended (or will) to its pack */
	DD_OP_PREF,  /* a reference to a NEW op of this interval */
	DD_OP_LREF   /* a REF found in the block map of the snapshot a re-put
			repeats (wloc.c): its entry's flags are checked, and
			a damaged one healed from the input, at the flush
			-- unless no entry is flagged (wucnt.c) */
};

/* One non-hole block of the image. */
typedef struct dd_wop {
	uint64_t op_idx;          /* block index in the image */
	uint64_t op_ioff;         /* its first byte's offset in the image */
	dd_ddt_key op_key;        /* REF: the entry; NEW: the variant to try
				     first, and after its commit the one it
				     got; PREF: copied from its NEW op */
	uint8_t op_kind;
	uint8_t op_codec;         /* NEW: the record, once placed */
	bool op_placed;
	bool op_absent;           /* NEW, in a flush: the key filter said no
				     entry has its hash (dd_flush_absent) */
	uint32_t op_lsize;
	uint32_t op_psize;
	uint32_t op_pack;
	uint64_t op_off;          /* NEW not placed: batch << 32 | block */
	uint32_t op_target;       /* PREF: its NEW op */
} dd_wop;

typedef struct dd_wops {
	dd_wop *wo_op;
	size_t wo_n, wo_cap;
	uint64_t *wo_ix;          /* NEW ops by key: a tag of the hash and
				     op index + 1, 0 empty (wops.c) */
	size_t wo_ixcap;          /* a power of two, >= 2 * NEW ops */
	size_t wo_nnew;
	dd_wop **wo_ord;          /* the commit's order (wops.c) */
	uint8_t *wo_kstart;       /* 1: wo_ord[i] starts a key's run */
	size_t wo_nkeys;          /* distinct keys in it */
	size_t wo_ordcap;
	size_t wo_mapped;         /* ops whose block-map entries are in the
				     catalog (a deferring writer's, below) */
} dd_wops;

void dd_wops_free(dd_wops *wo);
/* Room for n ops, and the key index for n NEW ones, before they come: a
 * list grown by doubling copies itself and re-enters every NEW op at
 * each step (at 262,144 ops of a 1 GiB put, 5% of its CPU).  Only a
 * hint: an allocation that fails leaves the list to grow as it goes. */
void dd_wops_reserve(dd_wops *wo, size_t n);
/* Adds an op (its index in *at); a NEW one enters the key index. */
int dd_wops_add(dd_wops *wo, dd_err *err, const dd_wop *op, uint32_t *at);
/* The NEW op of this interval with exactly this key, if any. */
dd_wop *dd_wops_find_new(dd_wops *wo, const dd_ddt_key *key, uint32_t *at);
/* Fetches the index slot dd_wops_find_new reads first for this hash
 * (variant 0) into the cache: asked some blocks ahead of the lookup. */
void dd_wops_prefetch_key(const dd_wops *wo, const uint8_t *hash);
/* Empties the list after a commit. */
void dd_wops_reset(dd_wops *wo);
/* wo_ord: the ops by DDT key, then by their place in wo_op (dd_wop_cmp,
 * a qsort comparator of dd_wop pointers); wo_kstart where each key's run
 * of ops begins. */
int dd_wops_order(dd_wops *wo, dd_err *err);
int dd_wop_cmp(const void *a, const void *b);

/* ---- the writer --------------------------------------------------------*/

struct dd_writer {
	dd_store *w_store;
	dd_err w_err;
	int w_state;
	char w_name[DD_NAME_MAX + 1];
	uint64_t w_id;
	bool w_receive;           /* a receive: admitted beside dead kept
				     receives of its name, which its commit
				     drops (wlife.c) */
	int w_lockfd;             /* STORE/lock, shared */
	int w_regfd;              /* STORE/writers/ID: this writer runs */
	uint64_t w_start;         /* entries dead at or before it are not
				     usable (gc may free them) */
	dd_txn *w_rtxn;           /* lookups: renewed per batch, parked
				     between */
	dd_txn *w_txn;            /* a commit's write txn, while it runs */
	dd_wops w_ops;            /* this commit interval's decisions; a
				     deferring writer's, every interval's
				     since its last flush */
	bool w_defer;             /* DDT changes deferred across intervals
				     (store/defer.h): a put without verify */
	dd_defer_mark w_mark;     /* its mark, as its `pend` value has it */
	uint64_t w_defer_min, w_defer_max; /* ops before a flush (wops.c) */
	bool w_absent_ok;         /* this flush transaction may trust
				     op_absent (wops.c, dd_flush_absent) */
	/* a flush's uncounted positions (catalog/ucnt.h), one row of bits
	 * per DD_UCNT_SPAN positions its ops fall in, written in each of
	 * its transactions (wops.c); wu_n 0: every reference counted */
	struct dd_wubits {
		size_t wu_n;
		uint64_t *wu_row;         /* ascending */
		uint8_t *wu_bits;         /* wu_n * DD_UCNT_BYTES, zeroed
					     once stored */
		uint8_t *wu_pre;          /* by wo_ord index of a run's
					     start: its entry checked on the
					     pool (dd_wub_precheck), for the
					     current transaction only */
		bool wu_lrefs_live;       /* the current transaction's: a
					     run of LREF ops only is left
					     uncounted unchecked
					     (dd_wub_lrefs) */
	} w_ub;
	struct dd_wloc *w_loc;    /* a re-put's locality (wloc.c), or NULL */
	uint64_t w_fed;           /* image bytes given to the pipeline */
	dd_pack *w_pack;          /* active pack, writable and locked; NULL
				     until the first new block */
	dd_pack **w_full;         /* packs filled this interval: synced and
				     recorded at the commit, closed after */
	size_t w_nfull;
	uint32_t w_bs;
	dd_pipe *w_pipe;          /* bytes in; NULL when fed blocks */
	dd_scratch w_sc;          /* verify-mode reads on the writer thread */
	uint8_t *w_vbuf;          /* verify mode: a second block */
	/* per pool worker: dd_writer_keep's probes, read txns parked at
	 * every commit, and the store's codec contexts, for the pipeline */
	unsigned w_nworkers;
	dd_txn **w_probe;
	uint64_t w_ncommit;       /* commits that applied DDT changes so far
				     (a deferring writer's flushes): a
				     probe's answer of no holds only until
				     the next (writer.c) */
	dd_codec_ctx **w_zctx;
	dd_digest *w_digest;
	int w_dv;                 /* the snapshot's content digest version
				     (DD_DIGEST_V1/_V2; format/store.md §6) */
	uint64_t w_size;
	uint64_t w_blocks;
	uint64_t w_zero;
	uint64_t w_new_blocks;    /* records appended (dd_writer_stats_get) */
	uint64_t w_new_lsize;
	uint64_t w_new_bytes;     /* their headers and payloads */
	uint64_t w_map_blocks;    /* LREF ops (dd_writer_stats_get) */
	uint64_t w_uncommitted;   /* logical bytes since the last commit */
	uint64_t w_uncommitted_blocks; /* blocks since the last commit */
	dd_writer_hook w_on_commit;
	void *w_on_commit_ctx;
};

int dd_writer_fail(dd_writer *w, int rc);

/* ---- wucnt.c: a flush's uncounted references (catalog/ucnt.h) -------------*/

/* At a flush's start: the rows its ops' positions fall in, when it may
 * leave references uncounted (a deferring writer of fixed blocks). */
int dd_wub_begin(dd_writer *w);
/* In a flush's transaction, one key's run: when its entry is alive, its
 * REF and LREF ops' positions become uncounted (*done), and the caller
 * applies only its NEW and PREF ops. */
int dd_wub_apply(dd_writer *w, dd_wop **run, size_t n, bool *done);
/* Right after each of a flush's write transactions began: whether in it
 * a run of LREF ops only is alive without a look at its entry
 * (wu_lrefs_live): every source map they came from is still committed,
 * and no entry of the DDT is flagged (meta's unflagged claim). */
void dd_wub_lrefs(dd_writer *w);
/* Right after the flush's first write transaction began, when that
 * transaction is to apply every op (a re-put): each run's entry checked
 * on the store's pool, if it is free, in read transactions that see the
 * same state; dd_wub_apply then uses the results.  An accelerator only:
 * a run left unchecked is checked by dd_wub_apply as before. */
void dd_wub_precheck(dd_writer *w);
/* The results go: the next transaction may see other writers' commits. */
void dd_wub_precheck_end(dd_writer *w);
/* Before the transaction's commit: its bits into its ucnt rows. */
int dd_wub_store(dd_writer *w);
void dd_wub_free(dd_writer *w);

/* ---- wloc.c: a re-put's locality -----------------------------------------*/

/*
 * A put of an image the store holds already finds most blocks in the
 * block map of that snapshot, at the same index, in the order of the
 * image: a sequential read where the DDT would take a random one per
 * block (a disk read each once the DDT outgrows memory).  A deferring
 * writer of fixed blocks fed from files adopts as its source the first
 * committed snapshot -- those whose names share the longest prefix with
 * its own first, newest first among equals, eight at every 64th probe
 * hit -- whose map holds, at the index of a block the DDT probe found,
 * the same key; then each worker's cursor in
 * that map answers before the probe.  Such a block is an LREF op: a
 * committed snapshot counts its entry, so it is alive (or dead since this
 * writer began, which gc keeps); its flags are checked at the flush,
 * which heals a lost or damaged entry with the block read again from the
 * input -- the bytes a probe's NEW would have stored.  When the flush's
 * transaction still has every source the writer adopted and no entry
 * flagged (the unflagged claim, catalog/db.h), it needs no look at all
 * (dd_wub_lrefs).
 */
/* Sets w_loc up when w may use it; failures only leave it off. */
void dd_wloc_open(dd_writer *w);
void dd_wloc_free(dd_writer *w);
/* Pool worker: does the source map hold block bk's key at its index? */
bool dd_wloc_match(dd_writer *w, unsigned worker, dd_txn *txn,
		   const dd_blk *bk);
/* Pool worker: the probe found bk's entry usable; maybe adopt a source. */
void dd_wloc_adopt(dd_writer *w, unsigned worker, dd_txn *txn,
		   const dd_blk *bk);
/* Closes the workers' cursors before their txns are parked. */
void dd_wloc_park(dd_writer *w);
/* In a flush's transaction txn: is every source the writer adopted (and
 * so every snapshot its LREF ops were read from) still committed?  Then
 * each LREF's entry is alive in txn: the snapshot counts it, or leaves
 * it uncounted, which holds it at 1 at least (invariant U).  True when
 * none was adopted. */
bool dd_wloc_sources_live(dd_writer *w, dd_txn *txn);
/* dd_writer_write_file's range [off, off + len) of fd is the image from
 * w_fed on: kept (a dup of fd) for healing until no op names it. */
int dd_wloc_range(dd_writer *w, int fd, uint64_t off, uint64_t len);
/* After a flush: ranges before image offset `from` are let go. */
void dd_wloc_flushed(dd_writer *w, uint64_t from);
/* In a flush's transaction: op, an LREF of key, found its entry old
 * flagged MISSING or DAMAGED: read the block again from the input, check
 * it, append it, sync, and point the entry at it, refs references more. */
int dd_wloc_heal(dd_writer *w, const dd_wop *op, const dd_ddt_key *key,
		 const dd_ddt_ent *old, uint64_t refs);
/* In w_txn: key's entry, old, takes the record ours names as its own
 * (ours's flags, none), old's references kept and ours's de_refcnt
 * added (wops.c). */
int dd_writer_takeover(dd_writer *w, const dd_ddt_key *key,
		       const dd_ddt_ent *old, const dd_ddt_ent *ours);

/* Enters the store (shared lock, recovery), reserves the snapshot id and
 * name (pending) -- or continues pending resume_id when not 0 --, and
 * registers the writer as running.  receive: a receive (dd_replica),
 * which a kept partial receive of the same name does not stop and whose
 * commit drops it (format/store.md §5).  dv: the content digest version
 * of the snapshot (a received one keeps its stream's); 0 for a new one,
 * version 2 (a fixed store of format 2 becomes format 4 first:
 * dd_store_digest2), or 1 where it cannot now (RADOS, lock busy). */
int dd_writer_open(dd_writer **out, dd_store *s, const char *name,
		   uint64_t resume_id, bool receive, int dv);

/* May this DDT entry, as w_rtxn (or a probe) saw it, be referenced?
 * Alive, or dead since this writer started (gc keeps those); never a
 * lost one, nor one scrub found damaged (the writer stores its copy and
 * the commit points the entry at it). */
bool dd_writer_usable(const dd_writer *w, const dd_ddt_ent *ent);

/* Verify mode: are the bytes of NEW op `op` (placed or still in the
 * pipeline) data?  Of the DDT entry ent? */
int dd_writer_same_op(dd_writer *w, const dd_wop *op, const uint8_t *data,
		      uint32_t lsize, bool *same);
int dd_writer_same_ent(dd_writer *w, const dd_ddt_key *key,
		       const dd_ddt_ent *ent, const uint8_t *data,
		       uint32_t lsize, bool *same);

/* Moves w_rtxn to the newest commit (beginning it the first time). */
int dd_writer_renew(dd_writer *w);

/* ---- wpack.c: the packs a writer appends to ----------------------------*/

/* Writes this writer's buffered records into its packs, before they are
 * read back through another handle (verify mode).  0 or the error. */
int dd_writer_flush_packs(dd_writer *w);

/* Appends a record to the active pack (taking one first, rolling over
 * when full).  Not durable until the commit. */
int dd_writer_append(dd_writer *w, const dd_pack_rec *rec, const void *payload,
		     uint32_t *pack, uint64_t *off);
/* Syncs the packs of this interval (data before metadata). */
int dd_writer_sync_packs(dd_writer *w);
/* Records their ends in w_txn. */
int dd_writer_record_packs(dd_writer *w);
/* After the commit: the full packs are closed (their locks go). */
void dd_writer_close_full(dd_writer *w);
/* Every pack closed, its lock given up. */
void dd_writer_close_packs(dd_writer *w);
/* A new pack, locked, its id taken from pack.next in a short write
 * transaction of its own, which also records it (empty: its committed
 * end is its header) when `record`.  gc's new pack is not: gc records it
 * when it commits, and removes it if it fails (a crash leaves it to
 * recovery, which removes unrecorded packs nobody holds). */
int dd_store_new_pack(dd_store *s, dd_err *err, bool record, dd_pack **out);
/* Closes a pack made by dd_store_new_pack that no commit recorded, and
 * removes its file. */
void dd_store_drop_new_pack(dd_store *s, dd_pack *p);

/* ---- committing (wops.c) -----------------------------------------------*/

/* Is an intermediate commit due after `bytes` more logical bytes in
 * `blocks` more blocks?  By bytes (512 MiB) and by blocks, which bound
 * the ops list and the commit's write transaction. */
bool dd_writer_commit_due(const dd_writer *w, uint64_t bytes, uint64_t blocks);

/* The commit of an interval: packs synced, then one write transaction
 * applies the ops (references counted, new entries added, the block map
 * appended), runs the commit hook, records the packs' ends -- a deferring
 * writer's appends the block map only, and flushes when its ops call for
 * it (wops.c).  Every NEW op must be placed. */
int dd_writer_sync_commit(dd_writer *w);
/* The same for the last interval: a deferring writer applies every DDT
 * change it holds, and its `pend` value loses its mark (every block-map
 * entry counts now), before the manifest is published.  mapped(arg), when
 * given, runs once the last interval has committed the whole block map,
 * before that flush: the flush changes no block-map entry (a deferring
 * writer never runs in verify mode, the one mode that may move a block to
 * another variant of its key at the commit). */
int dd_writer_sync_commit_last(dd_writer *w, void (*mapped)(void *),
			       void *arg);
/* The pending record a writer begins with: a deferring writer's holds its
 * mark (nothing counted yet). */
int dd_writer_pend_put(dd_writer *w, dd_txn *txn);
/* Does a new put defer (store/defer.h)?  Sets its flush thresholds:
 * dd_writer_defer_min/_max, or both DEDUP_DEFER_OPS from the environment
 * (decimal; 0: no deferring). */
bool dd_writer_defer_setup(dd_writer *w);

/* Adds the snapshot record (w_size, w_blocks, w_zero, the digest) and
 * commits: the snapshot becomes visible.  When expect_digest is not NULL
 * the computed digest must equal it (DD_ECHECKSUM otherwise). */
int dd_writer_finish(dd_writer *w, const uint8_t *expect_digest);

/* Gives up the writer's hold on the store: read txns, packs, its
 * registration, the store lock.  Recovery (by this writer when
 * `recover`, or the next one) then rolls back what it left pending. */
void dd_writer_release(dd_writer *w, bool recover);

#endif
