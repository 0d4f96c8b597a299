/*
 * writer_internal.h -- the snapshot writer's state, shared by writer.c
 * (images written as bytes, through the block pipeline) and receive.c,
 * which wraps a writer fed with hashed, compressed blocks from a
 * replication stream.  Only store/ includes it.
 */
#ifndef DD_STORE_WRITER_INTERNAL_H
#define DD_STORE_WRITER_INTERNAL_H

#include "chunk/pipeline.h"
#include "store/store_internal.h"

#define DD_WRITER_BATCH_BYTES ((size_t)4 << 20)

enum {
	DD_W_OPEN,
	DD_W_FAILED,
	DD_W_COMMITTED,
	DD_W_ABORTED,
	DD_W_SUSPENDED   /* kept for later by its owner (receive.c) */
};

/* Runs at every commit while the writer is open, before the pack is
 * sealed, in the commit's transaction (w_txn): a resumable receive saves
 * its state there (receive.c).  Cleared when the writer finishes. */
typedef int (*dd_writer_hook)(void *ctx);

struct dd_writer {
	dd_store *w_store;
	dd_err w_err;
	int w_state;
	char w_name[DD_NAME_MAX + 1];
	uint64_t w_id;
	dd_txn *w_txn;
	dd_pack *w_pack;          /* active pack, writable; NULL until needed */
	uint64_t w_pack_next;     /* meta pack.next */
	uint32_t w_bs;
	dd_pipe *w_pipe;          /* bytes in; NULL when fed blocks */
	dd_scratch w_sc;          /* verify-mode reads on the writer thread */
	/* per pool worker: dd_writer_keep's probes -- for the background
	 * workers a read txn on the DDT, parked at every commit -- and the
	 * store's codec contexts, for the pipeline */
	unsigned w_nworkers;
	dd_txn **w_probe;
	dd_codec_ctx **w_zctx;
	dd_digest *w_digest;
	uint64_t w_size;
	uint64_t w_blocks;
	uint64_t w_zero;
	uint64_t w_new_blocks;    /* records appended (dd_writer_stats_get) */
	uint64_t w_new_lsize;
	uint64_t w_new_bytes;     /* their headers and payloads */
	uint64_t w_uncommitted;   /* logical bytes since the last commit */
	uint64_t w_uncommitted_blocks; /* blocks since the last commit */
	dd_writer_hook w_on_commit;
	void *w_on_commit_ctx;
};


int dd_writer_fail(dd_writer *w, int rc);

/* Takes the lock, reserves the snapshot id (pending) -- or continues
 * pending resume_id when not 0 --, opens the write transaction and the
 * active pack. */
int dd_writer_open(dd_writer **out, dd_store *s, const char *name,
		   uint64_t resume_id);

/* Appends a record to the active pack (rolling over when full). */
int dd_writer_append(dd_writer *w, const dd_pack_rec *rec, const void *payload,
		     uint32_t *pack, uint64_t *off);

/* Syncs the pack, records its end, commits; reopens a txn if asked. */
int dd_writer_sync_commit(dd_writer *w, bool reopen);

/* Is an intermediate commit due after `bytes` more logical bytes in
 * `blocks` more blocks?  By bytes (512 MiB) and by blocks: LMDB keeps a
 * transaction's dirty pages in RAM, about one page per block touched at
 * small block sizes, so the block count bounds the writer's memory. */
bool dd_writer_commit_due(const dd_writer *w, uint64_t bytes, uint64_t blocks);

/* Adds the snapshot record (w_size, w_blocks, w_zero, the digest) and
 * commits: the snapshot becomes visible.  When expect_digest is not NULL
 * the computed digest must equal it (DD_ECHECKSUM otherwise). */
int dd_writer_finish(dd_writer *w, const uint8_t *expect_digest);

#endif
