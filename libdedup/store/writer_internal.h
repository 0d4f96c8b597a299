/*
 * writer_internal.h -- the snapshot writer's state, shared by writer.c
 * (images written as bytes) and receive.c (images arriving as hashed,
 * compressed blocks from a replication stream).  Only store/ includes it.
 */
#ifndef DD_STORE_WRITER_INTERNAL_H
#define DD_STORE_WRITER_INTERNAL_H

#include <stdatomic.h>
#include <sys/types.h>

#include "store/store_internal.h"

#define DD_WRITER_BATCH_BYTES ((size_t)4 << 20)
#define DD_WRITER_RING 3

enum { DD_SLOT_ZERO, DD_SLOT_DUP, DD_SLOT_NEW };
enum {
	DD_W_OPEN,
	DD_W_FAILED,
	DD_W_COMMITTED,
	DD_W_ABORTED,
	DD_W_SUSPENDED   /* a resumable receive kept for later (receive.c) */
};

typedef struct dd_slot {
	dd_ddt_key sl_key;
	uint32_t sl_lsize;
	uint32_t sl_psize;
	uint8_t sl_kind;
	uint8_t sl_codec;
	bool sl_nodata;         /* its bytes never reached bt_data: read from
				   a file, the DDT held them already */
	int sl_rc;
} dd_slot;

typedef struct dd_batch {
	uint8_t *bt_data;       /* bt_cap blocks of logical bytes */
	size_t bt_fill;         /* bytes in bt_data */
	/* dd_writer_write_file: bytes [bt_src_start, bt_src_end) of bt_data
	 * are read by the hash stage, on the pool, with pread from bt_src_fd
	 * (the batch's own dup, closed once read) at bt_src_off onwards;
	 * bt_src_fd is -1 when every byte is in bt_data already.  At most one
	 * such range per batch, of the file bt_src_dev/bt_src_ino. */
	int bt_src_fd;
	dev_t bt_src_dev;
	ino_t bt_src_ino;
	uint64_t bt_src_off;
	size_t bt_src_start, bt_src_end;
	atomic_int bt_read_failed; /* set once by the first failed pread */
	dd_err bt_read_err;     /* ...which left its message here */
	dd_slot *bt_slot;
	uint8_t *bt_out;        /* compressed payloads, one stride per slot */
	uint32_t *bt_new;       /* slots of new blocks, in order */
	size_t bt_nnew;
	size_t bt_nblk;
	uint64_t bt_first;      /* image block index of slot 0 */
} dd_batch;

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
	size_t w_cap;             /* blocks per batch */
	size_t w_stride;          /* bytes per slot in bt_out */
	dd_batch w_batch[DD_WRITER_RING];
	int w_cur;                /* the batch being filled */
	dd_batch *w_hashing;      /* stage 1 in the running job, or NULL */
	dd_batch *w_compressing;  /* stage 3 in the running job, or NULL */
	size_t w_job_ncomp;       /* job items below this compress */
	bool w_job_running;
	bool w_pool_held;
	dd_scratch w_sc;          /* verify-mode reads on the writer thread */
	/* dd_writer_write_file, per pool worker (dd_hash_prepare): a buffer
	 * for two blocks that the bytes are read into, and for the background workers a
	 * read txn on the DDT, parked at every commit. */
	unsigned w_nworkers;
	uint8_t **w_hot;
	dd_txn **w_probe;
	dd_digest *w_digest;
	uint64_t w_size;
	uint64_t w_blocks;
	uint64_t w_zero;
	uint64_t w_new_blocks;    /* records appended (dd_writer_stats_get) */
	uint64_t w_new_lsize;
	uint64_t w_new_bytes;     /* their headers and payloads */
	uint64_t w_uncommitted;   /* logical bytes since the last commit */
	uint64_t w_uncommitted_blocks; /* blocks since the last commit */
	bool w_raw;               /* fed by dd_recv_put_* (receive.c) */
	uint8_t *w_vbuf;          /* receive, verify mode: the stored copy */
	bool w_resumable;         /* receive: keep what arrived on failure */
	uint64_t w_final_size;    /* receive: the size the stream announced */
	uint8_t w_final_digest[32];
};


int dd_writer_fail(dd_writer *w, int rc);

/* Takes the lock, reserves the snapshot id (pending) -- or continues
 * pending resume_id when not 0 --, opens the write transaction and the
 * active pack. */
int dd_writer_open(dd_writer **out, dd_store *s, const char *name,
		   uint64_t resume_id);

/* receive.c: records a resumable receive's state in its pending entry. */
int dd_recv_save_state(dd_writer *w);

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
