/*
 * spill.c -- exact mode beyond the memory cap: sorted runs on disk.
 *
 * When a block size's table is full, its entries are sorted by hash and
 * appended to that block size's spill file as one run of 48-byte records
 * (hash, refcount, logical size, compressed size; little-endian, field by
 * field), and the table starts empty again.  A block seen before a spill
 * and again after it then has an entry in two runs: its refcounts add up
 * when the runs are merged, and its sizes are equal in both because they
 * depend on the bytes alone.  So the merged result is exactly the table an
 * unbounded memory would have held.
 *
 * The final merge is a k-way heap merge that hands each distinct block to
 * a sink once, in hash order.  Its buffers come out of the memory budget;
 * when there are more runs than the budget can give a useful buffer to
 * (16 KiB each), groups of runs are first merged into longer runs appended
 * to the same file (a multi-pass merge: each pass divides the number of
 * runs by the fan-in).
 *
 * The file is unlinked right after it is created, so it disappears with
 * the process whatever happens; nothing here is a format that outlives a
 * run.  All I/O goes through common/io.h (faults can be injected).
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/endian.h"
#include "common/io.h"
#include "scan/scan.h"

#define DD_SPILL_STAGE_RECS 4096          /* 192 KiB write staging */
#define DD_SPILL_MIN_BUF (16u << 10)      /* smallest useful read buffer */
#define DD_SPILL_MAX_BUF (1u << 20)

void dd_scan_rec_encode(uint8_t *out, const dd_scan_ent *e)
{
	memcpy(out, e->se_hash, DD_HASH_SIZE);
	dd_put_le64(out + 32, e->se_refcnt);
	dd_put_le32(out + 40, e->se_lsize);
	dd_put_le32(out + 44, e->se_psize);
}

void dd_scan_rec_decode(const uint8_t *in, dd_scan_ent *e)
{
	memcpy(e->se_hash, in, DD_HASH_SIZE);
	e->se_refcnt = dd_get_le64(in + 32);
	e->se_lsize = dd_get_le32(in + 40);
	e->se_psize = dd_get_le32(in + 44);
}

void dd_scan_spill_init(dd_scan_spill *sp, const char *dir)
{
	memset(sp, 0, sizeof(*sp));
	sp->sp_fd = -1;
	sp->sp_dir = dir;
}

void dd_scan_spill_fini(dd_scan_spill *sp)
{
	dd_io_close(sp->sp_fd);
	dd_free(sp->sp_runs);
	sp->sp_fd = -1;
	sp->sp_runs = NULL;
	sp->sp_nruns = sp->sp_capruns = 0;
}

/* Creates the temp file and unlinks it at once. */
static int dd_spill_open(dd_scan_spill *sp, dd_err *err)
{
	static unsigned counter;
	char path[4096];
	int fd = DD_EEXIST;

	for (int tries = 0; tries < 100 && fd == DD_EEXIST; tries++) {
		int n = snprintf(path, sizeof(path), "%s/dd-scan.%ld.%u.%lx",
				 sp->sp_dir, (long)getpid(),
				 __atomic_fetch_add(&counter, 1,
						    __ATOMIC_RELAXED),
				 (unsigned long)time(NULL));

		if (n < 0 || (size_t)n >= sizeof(path))
			return dd_err_set(err, DD_EINVAL, "spill directory "
					  "path too long: %.200s", sp->sp_dir);
		fd = dd_io_open(err, path, O_RDWR | O_CREAT | O_EXCL, 0600);
	}
	if (fd < 0)
		return fd;
	(void)unlink(path);
	sp->sp_fd = fd;
	return 0;
}

static int dd_spill_add_run(dd_scan_spill *sp, dd_err *err, uint64_t off,
			    uint64_t count)
{
	if (sp->sp_nruns == sp->sp_capruns) {
		size_t cap = sp->sp_capruns ? 2 * sp->sp_capruns : 16;
		dd_scan_run *r = dd_realloc(sp->sp_runs, cap * sizeof(*r));

		if (!r)
			return dd_err_set(err, DD_ENOMEM, "out of memory");
		sp->sp_runs = r;
		sp->sp_capruns = cap;
	}
	sp->sp_runs[sp->sp_nruns++] = (dd_scan_run){off, count};
	sp->sp_total_runs++;
	return 0;
}

/* ---- writing a run -----------------------------------------------------*/

typedef struct dd_run_writer {
	dd_scan_spill *rw_sp;
	dd_err *rw_err;
	uint8_t *rw_buf;
	size_t rw_n;          /* records staged */
	uint64_t rw_start;
	uint64_t rw_count;
	int rw_rc;
} dd_run_writer;

static int dd_rw_flush(dd_run_writer *rw)
{
	dd_scan_spill *sp = rw->rw_sp;
	size_t len = rw->rw_n * DD_SCAN_REC_SIZE;
	int rc;

	if (!len)
		return 0;
	rc = dd_io_pwrite_full(rw->rw_err, sp->sp_fd, rw->rw_buf, len,
			       sp->sp_end, "scan spill file");
	if (rc)
		return rc;
	sp->sp_end += len;
	sp->sp_bytes += len;
	rw->rw_n = 0;
	return 0;
}

static int dd_rw_begin(dd_run_writer *rw, dd_scan_spill *sp, dd_err *err)
{
	int rc = 0;

	memset(rw, 0, sizeof(*rw));
	rw->rw_sp = sp;
	rw->rw_err = err;
	if (sp->sp_fd < 0)
		rc = dd_spill_open(sp, err);
	if (rc)
		return rc;
	rw->rw_buf = dd_malloc(DD_SPILL_STAGE_RECS * DD_SCAN_REC_SIZE);
	if (!rw->rw_buf)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	rw->rw_start = sp->sp_end;
	return 0;
}

/* A sink: stages a record, writing the stage when it is full.  The first
 * error sticks in rw_rc (a sink cannot return one). */
static void dd_rw_put(void *ctx, const dd_scan_ent *e)
{
	dd_run_writer *rw = ctx;

	if (rw->rw_rc)
		return;
	dd_scan_rec_encode(rw->rw_buf + rw->rw_n * DD_SCAN_REC_SIZE, e);
	rw->rw_count++;
	if (++rw->rw_n == DD_SPILL_STAGE_RECS)
		rw->rw_rc = dd_rw_flush(rw);
}

static int dd_rw_end(dd_run_writer *rw)
{
	int rc = rw->rw_rc;

	if (!rc)
		rc = dd_rw_flush(rw);
	if (!rc)
		rc = dd_spill_add_run(rw->rw_sp, rw->rw_err, rw->rw_start,
				      rw->rw_count);
	dd_free(rw->rw_buf);
	rw->rw_buf = NULL;
	return rc;
}

int dd_scan_spill_run(dd_scan_spill *sp, dd_err *err, const dd_scan_table *t)
{
	dd_run_writer rw;
	int rc = dd_rw_begin(&rw, sp, err);

	for (size_t i = 0; !rc && i < t->tb_count && !rw.rw_rc; i++)
		dd_rw_put(&rw, &t->tb_ent[i]);
	if (rc) {
		dd_free(rw.rw_buf);
		return rc;
	}
	return dd_rw_end(&rw);
}

/* ---- merging runs ------------------------------------------------------*/

typedef struct dd_cursor {
	uint64_t cu_off;      /* next unread record on disk */
	uint64_t cu_left;     /* records not yet read from disk */
	uint8_t *cu_buf;
	size_t cu_cap;        /* records the buffer holds */
	size_t cu_n, cu_pos;  /* records in the buffer, next one */
	dd_scan_ent cu_cur;   /* the current (smallest unconsumed) record */
} dd_cursor;

typedef struct dd_merge {
	dd_scan_spill *mg_sp;
	dd_err *mg_err;
	dd_cursor *mg_cur;
	dd_cursor **mg_heap;
	size_t mg_nheap;
} dd_merge;

static int dd_cursor_fill(dd_merge *m, dd_cursor *c)
{
	size_t n = c->cu_left < c->cu_cap ? (size_t)c->cu_left : c->cu_cap;
	int rc = dd_io_pread_full(m->mg_err, m->mg_sp->sp_fd, c->cu_buf,
				  n * DD_SCAN_REC_SIZE, c->cu_off,
				  "scan spill file");

	if (rc)
		return rc;
	c->cu_off += n * DD_SCAN_REC_SIZE;
	c->cu_left -= n;
	c->cu_n = n;
	c->cu_pos = 0;
	return 0;
}

/* Moves c to its next record; *more is false at the end of its run. */
static int dd_cursor_next(dd_merge *m, dd_cursor *c, bool *more)
{
	int rc;

	*more = false;
	if (c->cu_pos == c->cu_n) {
		if (c->cu_left == 0)
			return 0;
		rc = dd_cursor_fill(m, c);
		if (rc)
			return rc;
	}
	dd_scan_rec_decode(c->cu_buf + c->cu_pos++ * DD_SCAN_REC_SIZE,
			   &c->cu_cur);
	*more = true;
	return 0;
}

static bool dd_heap_less(dd_merge *m, size_t a, size_t b)
{
	return memcmp(m->mg_heap[a]->cu_cur.se_hash,
		      m->mg_heap[b]->cu_cur.se_hash, DD_HASH_SIZE) < 0;
}

static void dd_heap_down(dd_merge *m, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, min = i;
		dd_cursor *tmp;

		if (l < m->mg_nheap && dd_heap_less(m, l, min))
			min = l;
		if (r < m->mg_nheap && dd_heap_less(m, r, min))
			min = r;
		if (min == i)
			return;
		tmp = m->mg_heap[i];
		m->mg_heap[i] = m->mg_heap[min];
		m->mg_heap[min] = tmp;
		i = min;
	}
}

/* Advances the heap's top cursor, dropping it at the end of its run. */
static int dd_heap_advance(dd_merge *m)
{
	bool more;
	int rc = dd_cursor_next(m, m->mg_heap[0], &more);

	if (rc)
		return rc;
	if (!more)
		m->mg_heap[0] = m->mg_heap[--m->mg_nheap];
	if (m->mg_nheap)
		dd_heap_down(m, 0);
	return 0;
}

/* Sets up cursors over runs[0..n) with bufrecs records of buffer each. */
static int dd_merge_open(dd_merge *m, const dd_scan_run *runs, size_t n,
			 size_t bufrecs)
{
	m->mg_cur = dd_calloc(n, sizeof(*m->mg_cur));
	m->mg_heap = dd_calloc(n, sizeof(*m->mg_heap));
	if (!m->mg_cur || !m->mg_heap)
		return dd_err_set(m->mg_err, DD_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		dd_cursor *c = &m->mg_cur[i];
		bool more;
		int rc;

		c->cu_off = runs[i].sr_off;
		c->cu_left = runs[i].sr_count;
		c->cu_cap = bufrecs;
		c->cu_buf = dd_malloc(bufrecs * DD_SCAN_REC_SIZE);
		if (!c->cu_buf)
			return dd_err_set(m->mg_err, DD_ENOMEM, "out of memory");
		rc = dd_cursor_next(m, c, &more);
		if (rc)
			return rc;
		if (more)
			m->mg_heap[m->mg_nheap++] = c;
	}
	for (size_t i = m->mg_nheap / 2; i-- > 0;)
		dd_heap_down(m, i);
	return 0;
}

static void dd_merge_close(dd_merge *m, size_t n)
{
	for (size_t i = 0; m->mg_cur && i < n; i++)
		dd_free(m->mg_cur[i].cu_buf);
	dd_free(m->mg_cur);
	dd_free(m->mg_heap);
}

/* The merge proper: equal hashes from several runs become one entry whose
 * refcount is their sum. */
static int dd_merge_loop(dd_merge *m, dd_scan_sink_fn sink, void *ctx)
{
	while (m->mg_nheap) {
		dd_scan_ent acc = m->mg_heap[0]->cu_cur;
		int rc = dd_heap_advance(m);

		while (!rc && m->mg_nheap &&
		       !memcmp(m->mg_heap[0]->cu_cur.se_hash, acc.se_hash,
			       DD_HASH_SIZE)) {
			acc.se_refcnt += m->mg_heap[0]->cu_cur.se_refcnt;
			rc = dd_heap_advance(m);
		}
		if (rc)
			return rc;
		sink(ctx, &acc);
	}
	return 0;
}

static int dd_merge_runs(dd_scan_spill *sp, dd_err *err,
			 const dd_scan_run *runs, size_t n, size_t bufrecs,
			 dd_scan_sink_fn sink, void *ctx)
{
	dd_merge m = {sp, err, NULL, NULL, 0};
	int rc = dd_merge_open(&m, runs, n, bufrecs);

	if (!rc)
		rc = dd_merge_loop(&m, sink, ctx);
	dd_merge_close(&m, n);
	return rc;
}

/* One intermediate pass: runs[0..n) become one run at the end of the list
 * (the file grows; the space of merged runs is not reused). */
static int dd_merge_pass(dd_scan_spill *sp, dd_err *err, size_t n,
			 size_t bufrecs)
{
	dd_scan_run *group = dd_malloc(n * sizeof(*group));
	dd_run_writer rw;
	int rc;

	if (!group)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	memcpy(group, sp->sp_runs, n * sizeof(*group));
	memmove(sp->sp_runs, sp->sp_runs + n,
		(sp->sp_nruns - n) * sizeof(*group));
	sp->sp_nruns -= n;
	rc = dd_rw_begin(&rw, sp, err);
	if (!rc) {
		rc = dd_merge_runs(sp, err, group, n, bufrecs, dd_rw_put, &rw);
		if (rc)
			dd_free(rw.rw_buf);
		else
			rc = dd_rw_end(&rw);
	}
	dd_free(group);
	return rc;
}

int dd_scan_spill_merge(dd_scan_spill *sp, dd_err *err, size_t budget,
			dd_scan_sink_fn sink, void *ctx)
{
	size_t fanin = budget / DD_SPILL_MIN_BUF;
	size_t buf;
	int rc;

	if (fanin < 2)
		fanin = 2;
	while (sp->sp_nruns > fanin) {
		rc = dd_merge_pass(sp, err, fanin,
				   DD_SPILL_MIN_BUF / DD_SCAN_REC_SIZE);
		if (rc)
			return rc;
	}
	if (sp->sp_nruns == 0)
		return 0;
	buf = budget / sp->sp_nruns;
	if (buf > DD_SPILL_MAX_BUF)
		buf = DD_SPILL_MAX_BUF;
	if (buf < DD_SPILL_MIN_BUF)
		buf = DD_SPILL_MIN_BUF;
	return dd_merge_runs(sp, err, sp->sp_runs, sp->sp_nruns,
			     buf / DD_SCAN_REC_SIZE, sink, ctx);
}
