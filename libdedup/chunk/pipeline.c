/*
 * pipeline.c -- the block pipeline (pipeline.h): batches, cutting, the
 * hash and compress stages, and the ring that overlaps the stages.  A
 * file's bytes handed to a batch and read by stage 1 are prange.c's;
 * pipeline_internal.h holds the state the two share, pstage.c the pool
 * hand-off.
 *
 * Cutting.  A batch's bytes are cut on the caller's thread when the batch
 * is full or its image ends, each cutter from its own position, region by
 * region: region r is batch bytes [r R, (r + 1) R), R (pp_region) a
 * multiple of the alignment, and it owns the blocks that start in it, of
 * every cutter, listed together (pb_reg_first).  Images start aligned
 * (pp_align: the largest fixed block size), so a fixed-size block never
 * crosses a region; a cutter that reads the bytes has them read before it
 * cuts, so for it crossing does not matter.  Bytes after the last cut of
 * a full batch (a content-defined cutter waiting for its next cut point)
 * move to the next batch.  Beside a reading cutter (dedup scan of both
 * chunkers) fixed ones cut the batch's bytes too, each from its own
 * position: once bytes moved on, their blocks no longer start on region
 * bounds, which is fine, as every byte of such a batch is in pb_data
 * before stage 1 (a reading cutter needs them there).
 *
 * Stage 1, one pool item per region.  A file range is not read by the
 * caller: the worker that hashes a region reads the range's part of it,
 * so the copy out of the page cache is spread over the cores.  When the
 * sink may not need the bytes (DD_PIPE_BYTES_NONE, or _SOME) and the
 * range covers all of the region's blocks, they are read into the
 * worker's own buffer (pp_hot), which stays in its cache for SHA-256, and
 * only what po_keep asks for is copied into the batch: a changed copy's
 * known blocks are never copied at all.
 *
 * The ring.  pp_cur is filling, pp_hashing is in stage 1 and pp_working
 * in stage 3 of the running job.  A step waits for the job (the caller
 * helps: dd_pool_join), stores the compressed batch unless po_store_late
 * lets it wait, looks the hashed one up, starts the next job -- hash the
 * batch just filled, compress the one just looked up -- and then stores
 * the compressed batch if it waited, while the pool runs.  Filling moves
 * on to the stored batch's buffer.  Each batch passes the serial stages
 * in order, so blocks reach the sink in image order.  Kept payloads need
 * two buffers: the batch in stage 3 writes one while the batch stored
 * meanwhile reads the other (pp_zout, taken in turn).
 */
#include <string.h>

#include "dedup.h"
#include "chunk/pipeline_internal.h"
#include "common/alloc.h"
#include "common/io.h"
#include "hash/fastkey.h"
#include "hash/hash.h"

/* ---- stage 1 -------------------------------------------------------------*/

/* Blocks a list of dd_blk_hash holds: a list ends in one block's tail
 * hashed alone, so the longer the list the less of that. */
#define DD_BLK_LIST 32

void dd_blk_hash(dd_hasher *h, dd_blk *blk, size_t n, const uint8_t *buf,
		 size_t buf_off, unsigned fast_cuts)
{
	dd_hash_msg m[DD_BLK_LIST];
	size_t nm = 0;

	for (size_t j = 0; j < n; j++) {
		dd_blk *bk = &blk[j];
		const uint8_t *data = buf + (bk->bk_off - buf_off);

		if (dd_is_zero(data, bk->bk_len)) {
			bk->bk_kind = DD_BLK_ZERO;
			continue;
		}
		bk->bk_kind = DD_BLK_DATA;
		if (fast_cuts >> bk->bk_cut & 1) {
			dd_fastkey(data, bk->bk_len, bk->bk_hash);
			continue;
		}
		m[nm++] = (dd_hash_msg){ data, bk->bk_len, bk->bk_hash };
		if (nm == DD_BLK_LIST) {
			dd_hasher_sum_list(h, m, nm);
			nm = 0;
		}
	}
	dd_hasher_sum_list(h, m, nm);
}

/* Stage 1 for region r of b: read its part of the range, if any, then
 * hash its blocks. */
static void dd_pipe_hash_region(dd_pipe *p, dd_pbatch *b, size_t r,
				unsigned worker)
{
	size_t beg = r * p->pp_region, end = beg + p->pp_region;
	size_t first = b->pb_reg_first[r], last = b->pb_reg_first[r + 1];
	const uint8_t *buf = b->pb_data;
	size_t buf_off = 0;
	bool hot = false;
	void (*ahead)(void *, const dd_pbatch *, size_t) =
		p->pp_cfg.pc_bytes == DD_PIPE_BYTES_SOME
			? p->pp_cfg.pc_ops->po_keep_ahead
			: NULL;

	if (first == last)
		return;
	if (b->pb_src_fd >= 0 && beg < b->pb_src_end && end > b->pb_src_start) {
		size_t rb = beg > b->pb_src_start ? beg : b->pb_src_start;
		size_t re = end < b->pb_src_end ? end : b->pb_src_end;
		bool ok;

		/* the worker's buffer only if it can hold all the blocks */
		hot = p->pp_cfg.pc_bytes != DD_PIPE_BYTES_ALL && rb == beg;
		for (size_t j = first; hot && j < last; j++)
			hot = b->pb_blk[j].bk_off + b->pb_blk[j].bk_len <= re;
		if (hot) {
			buf = p->pp_hot[worker];
			buf_off = beg;
			ok = dd_pipe_read(p, b, p->pp_hot[worker], rb, re);
		} else {
			ok = dd_pipe_read(p, b, b->pb_data + rb, rb, re);
		}
		if (!ok) {
			for (size_t j = first; j < last; j++)
				b->pb_blk[j].bk_kind = DD_BLK_ZERO;
			return;
		}
	}
	dd_blk_hash(p->pp_stage.ps_hasher[worker], b->pb_blk + first,
		    last - first, buf, buf_off, p->pp_cfg.pc_fast_cuts);
	for (size_t j = first; hot && ahead && j < last &&
			       j < first + DD_PIPE_KEEP_AHEAD; j++)
		if (b->pb_blk[j].bk_kind != DD_BLK_ZERO)
			ahead(p->pp_cfg.pc_ctx, b, j);
	for (size_t j = first; hot && j < last; j++) {
		dd_blk *bk = &b->pb_blk[j];

		if (ahead && j + DD_PIPE_KEEP_AHEAD < last &&
		    b->pb_blk[j + DD_PIPE_KEEP_AHEAD].bk_kind != DD_BLK_ZERO)
			ahead(p->pp_cfg.pc_ctx, b, j + DD_PIPE_KEEP_AHEAD);
		if (bk->bk_kind != DD_BLK_ZERO &&
		    p->pp_cfg.pc_bytes == DD_PIPE_BYTES_SOME &&
		    p->pp_cfg.pc_ops->po_keep(p->pp_cfg.pc_ctx, b, j, worker))
			memcpy(b->pb_data + bk->bk_off,
			       buf + (bk->bk_off - buf_off), bk->bk_len);
		else
			bk->bk_nodata = true;
	}
}

/* ---- stage 3 -------------------------------------------------------------*/

static uint8_t *dd_pipe_zdst(const dd_pipe *p, const dd_pbatch *b, size_t j,
			     unsigned worker)
{
	if (!p->pp_cfg.pc_zkeep)
		return p->pp_zout[worker];
	return p->pp_zout_of[b->pb_id] + j * p->pp_cfg.pc_zbound;
}

const uint8_t *dd_pipe_payload(const dd_pipe *p, const dd_pbatch *b,
			       size_t j)
{
	return dd_pipe_zdst(p, b, j, 0);
}

/* Stage 3 for b's j-th listed block; the first failure keeps its message
 * for the step, which reports it before b is stored. */
static void dd_pipe_compress(dd_pipe *p, dd_pbatch *b, size_t j,
			     unsigned worker)
{
	const dd_pipe_cfg *c = &p->pp_cfg;
	dd_blk *bk = &b->pb_blk[b->pb_new[j]];
	dd_err err;
	int rc = c->pc_compress(dd_pstage_solo(&p->pp_stage) ? c->pc_zctx_solo
					   : c->pc_zctx[worker], &err,
				dd_pipe_zdst(p, b, j, worker),
				b->pb_data + bk->bk_off, bk->bk_len,
				&bk->bk_psize, &bk->bk_codec);

	if (rc && atomic_exchange(&b->pb_z_failed, 1) == 0)
		dd_err_set(&b->pb_z_err, rc, "compressing block %llu failed "
			   "(%s)", (unsigned long long)bk->bk_idx, err.de_msg);
}

/* The pool job: stage 3 of pp_working's listed blocks, then stage 1 of
 * pp_hashing's regions, as one parallel-for. */
static void dd_pipe_job(void *arg, size_t item, unsigned worker)
{
	dd_pipe *p = arg;

	if (item < p->pp_job_nwork)
		dd_pipe_compress(p, p->pp_working, item, worker);
	else
		dd_pipe_hash_region(p, p->pp_hashing, item - p->pp_job_nwork,
				    worker);
}

/* ---- cutting -------------------------------------------------------------*/

/* Cuts b's bytes up to pb_fill, region by region, every cutter from its
 * position; all of them when final (the image ends there). */
static int dd_pipe_cut(dd_pipe *p, dd_pbatch *b, bool final)
{
	size_t end = b->pb_fill, ncut = p->pp_cfg.pc_ncut;

	if (p->pp_reads && b->pb_src_fd >= 0) {
		int rc = dd_pipe_read_now(p, b);

		if (rc)
			return rc;
	}
	for (;;) {
		size_t lo = end, r, span_end;
		bool moved = false;

		for (size_t c = 0; c < ncut; c++)
			if (p->pp_pos[c] < lo)
				lo = p->pp_pos[c];
		if (lo >= end)
			break;
		r = lo / p->pp_region;
		span_end = (r + 1) * p->pp_region;
		while (b->pb_nreg <= r)
			b->pb_reg_first[b->pb_nreg++] = b->pb_nblk;
		for (size_t c = 0; c < ncut; c++) {
			const dd_cutter *cu = &p->pp_cut[c];
			size_t *pos = &p->pp_pos[c];

			while (*pos < span_end && *pos < end) {
				size_t n = cu->cu_next(cu, cu->cu_reads ?
						       b->pb_data + *pos : NULL,
						       end - *pos, final);
				dd_blk *bk;

				if (n == 0)
					break;
				bk = &b->pb_blk[b->pb_nblk++];
				bk->bk_off = (uint32_t)*pos;
				bk->bk_len = (uint32_t)n;
				bk->bk_idx = p->pp_idx[c]++;
				bk->bk_ioff = p->pp_ioff[c];
				p->pp_ioff[c] += n;
				bk->bk_cut = (uint8_t)c;
				bk->bk_kind = DD_BLK_ZERO;
				bk->bk_nodata = false;
				b->pb_bytes += n;
				*pos += n;
				moved = true;
			}
		}
		if (!moved)
			break;
	}
	b->pb_reg_first[b->pb_nreg] = b->pb_nblk;
	return 0;
}

/* The first byte no cutter has cut yet. */
static size_t dd_pipe_uncut(const dd_pipe *p)
{
	size_t lo = SIZE_MAX;

	for (size_t c = 0; c < p->pp_cfg.pc_ncut; c++)
		if (p->pp_pos[c] < lo)
			lo = p->pp_pos[c];
	return lo;
}

int dd_pipe_end_image(dd_pipe *p)
{
	dd_pbatch *b = &p->pp_b[p->pp_cur];
	int rc = dd_pipe_cut(p, b, true);

	if (rc)
		return rc;
	b->pb_fill = (b->pb_fill + p->pp_align - 1) / p->pp_align * p->pp_align;
	for (size_t c = 0; c < p->pp_cfg.pc_ncut; c++) {
		p->pp_pos[c] = b->pb_fill;
		p->pp_idx[c] = 0;
		p->pp_ioff[c] = 0;
	}
	p->pp_image++;
	return b->pb_fill == p->pp_cap ? dd_pipe_step(p) : 0;
}

/* ---- the ring ------------------------------------------------------------*/

static void dd_pbatch_reset(dd_pbatch *b)
{
	b->pb_fill = 0;
	b->pb_nblk = 0;
	b->pb_nreg = 0;
	b->pb_nnew = 0;
	b->pb_bytes = 0;
	atomic_store(&b->pb_z_failed, 0);
}

void dd_pipe_wait(dd_pipe *p)
{
	if (p)
		dd_pstage_wait(&p->pp_stage);
}

static int dd_pipe_store(dd_pipe *p, dd_pbatch *b)
{
	const dd_pipe_ops *o = p->pp_cfg.pc_ops;
	int rc = 0;

	if (atomic_load(&b->pb_z_failed))
		rc = dd_err_copy(p->pp_cfg.pc_err, &b->pb_z_err);
	else if (o->po_store)
		rc = o->po_store(p->pp_cfg.pc_ctx, b);
	p->pp_stored += b->pb_bytes;
	dd_pbatch_reset(b);
	if (!rc && p->pp_progress &&
	    p->pp_progress(p->pp_progress_ctx, p->pp_stored,
			   p->pp_progress_total) != 0)
		rc = dd_err_set(p->pp_cfg.pc_err, DD_ECANCELED, "cancelled by "
				"the progress callback");
	return rc;
}

void dd_pipe_set_progress(dd_pipe *p, dd_progress_fn fn, void *ctx,
			  uint64_t total)
{
	p->pp_progress = fn;
	p->pp_progress_ctx = ctx;
	p->pp_progress_total = total;
}

void dd_pipe_cancel(dd_pipe *p)
{
	atomic_store(&p->pp_cancel, true);
}

/* Filling moves from batch `from` to pp_cur, whose buffer is free now
 * that the compressed batch is stored: bytes past from's last cut (a
 * cutter waiting for its next cut point) go along -- the step read them
 * before the pool got `from` -- and the cutters' positions follow. */
static void dd_pipe_carry(dd_pipe *p, dd_pbatch *from)
{
	dd_pbatch *to = &p->pp_b[p->pp_cur];
	size_t at = dd_pipe_uncut(p), n = from->pb_fill - at;

	if (n > 0) {
		memcpy(to->pb_data, from->pb_data + at, n);
		from->pb_fill = at;
		to->pb_fill = n;
	}
	for (size_t c = 0; c < p->pp_cfg.pc_ncut; c++)
		p->pp_pos[c] -= at;
}

int dd_pipe_step(dd_pipe *p)
{
	const dd_pipe_ops *o = p->pp_cfg.pc_ops;
	void *ctx = p->pp_cfg.pc_ctx;
	dd_pbatch *fill = &p->pp_b[p->pp_cur];
	dd_pbatch *done, *hashed;
	int rc;

	/* a cancel takes effect here, so within one batch of the caller's;
	 * the running job is waited for first: the pool lock it holds is
	 * this thread's to release, and a writer cancelled from another
	 * thread may be freed from there */
	if (atomic_load(&p->pp_cancel)) {
		dd_pipe_wait(p);
		return dd_err_set(p->pp_cfg.pc_err, DD_ECANCELED, "cancelled");
	}
	rc = dd_pipe_cut(p, fill, false);

	/* bytes past the last cut go to the next batch: if they are a
	 * range's, read it here, before the pool reads fill's */
	if (!rc && dd_pipe_uncut(p) < fill->pb_fill && fill->pb_src_fd >= 0 &&
	    fill->pb_src_end > dd_pipe_uncut(p))
		rc = dd_pipe_read_now(p, fill);
	dd_pipe_wait(p);
	done = p->pp_working;
	hashed = p->pp_hashing;
	p->pp_working = NULL;
	p->pp_hashing = NULL;
	if (!rc && done && !(o->po_store_late && o->po_store_late(ctx, done))) {
		rc = dd_pipe_store(p, done);
		done = NULL;
	}
	if (!rc && hashed) {
		rc = dd_pipe_end_range(p, hashed);
		if (!rc && o->po_lookup)
			rc = o->po_lookup(ctx, hashed);
	}
	if (rc)
		return rc;
	p->pp_working = hashed;
	if (hashed && p->pp_cfg.pc_compress && p->pp_cfg.pc_zkeep)
		p->pp_zout_of[hashed->pb_id] = p->pp_zout[p->pp_nworked++ % 2];
	if (fill->pb_nblk > 0) {
		p->pp_hashing = fill;
		p->pp_cur = (p->pp_cur + 1) % DD_PIPE_RING;
	} else if (dd_pipe_uncut(p) >= fill->pb_fill) {
		dd_pbatch_reset(fill); /* alignment padding only */
		for (size_t c = 0; c < p->pp_cfg.pc_ncut; c++)
			p->pp_pos[c] = 0;
	}
	p->pp_job_nwork = p->pp_working && p->pp_cfg.pc_compress
				  ? p->pp_working->pb_nnew : 0;
	if (p->pp_job_nwork || p->pp_hashing) {
		size_t n = p->pp_job_nwork +
			   (p->pp_hashing ? p->pp_hashing->pb_nreg : 0);

		dd_pstage_start(&p->pp_stage, dd_pipe_job, p, n);
	}
	if (done)
		rc = dd_pipe_store(p, done);
	if (!rc && p->pp_hashing == fill)
		dd_pipe_carry(p, fill);
	return rc;
}

int dd_pipe_drain(dd_pipe *p)
{
	dd_pbatch *b = &p->pp_b[p->pp_cur];
	int rc = 0;

	if (dd_pipe_uncut(p) < b->pb_fill)
		rc = dd_pipe_end_image(p);
	while (!rc && (p->pp_b[p->pp_cur].pb_nblk > 0 || p->pp_hashing ||
		       p->pp_working || dd_pstage_busy(&p->pp_stage)))
		rc = dd_pipe_step(p);
	return rc;
}

/* ---- filling -------------------------------------------------------------*/

size_t dd_pipe_room(const dd_pipe *p)
{
	return p->pp_cap - p->pp_b[p->pp_cur].pb_fill;
}

void dd_pipe_buffer(dd_pipe *p, void **buf, size_t *len)
{
	dd_pbatch *b = &p->pp_b[p->pp_cur];

	*buf = b->pb_data + b->pb_fill;
	*len = p->pp_cap - b->pb_fill;
}

int dd_pipe_produce(dd_pipe *p, size_t n)
{
	dd_pbatch *b = &p->pp_b[p->pp_cur];

	if (n > p->pp_cap - b->pb_fill)
		return dd_err_set(p->pp_cfg.pc_err, DD_EINVAL, "%zu bytes is "
				  "more than the buffer given", n);
	b->pb_fill += n;
	return b->pb_fill == p->pp_cap ? dd_pipe_step(p) : 0;
}

int dd_pipe_write(dd_pipe *p, const void *buf, size_t len)
{
	const uint8_t *src = buf;
	int rc = 0;

	while (!rc && len > 0) {
		void *dst;
		size_t room;

		dd_pipe_buffer(p, &dst, &room);
		if (room > len)
			room = len;
		memcpy(dst, src, room);
		src += room;
		len -= room;
		rc = dd_pipe_produce(p, room);
	}
	return rc;
}

/* ---- setup ---------------------------------------------------------------*/

size_t dd_pipe_batch_bytes(const dd_pipe *p)
{
	return p->pp_cap;
}

size_t dd_pipe_batch_blocks(const dd_pipe *p)
{
	return p->pp_maxblk;
}

size_t dd_pipe_region_bytes(const dd_pipe *p)
{
	return p->pp_region;
}

dd_pbatch *dd_pipe_batch(dd_pipe *p, unsigned id)
{
	return &p->pp_b[id];
}

size_t dd_pipe_mem(const dd_pipe *p)
{
	size_t per = p->pp_cap + p->pp_maxblk * (sizeof(dd_blk) +
						 sizeof(uint32_t)) +
		     (p->pp_cap / p->pp_region + 1) * sizeof(size_t);

	size_t zout = !p->pp_cfg.pc_compress ? 0 : p->pp_cfg.pc_zkeep
		? 2 * p->pp_maxblk * p->pp_cfg.pc_zbound
		: p->pp_width * p->pp_cfg.pc_zbound;

	return DD_PIPE_RING * per + zout +
	       (p->pp_hot ? p->pp_width * p->pp_region : 0);
}

/* Geometry: the alignment (the largest fixed block, or the shortest
 * block a reading cutter cuts), the region (two of the longest blocks at
 * least, so they too are hashed in pairs, up to DD_PIPE_REGION_MIN, and
 * as many as the hasher has lanes if that is at most DD_PIPE_REGION_WIDE),
 * a batch of whole regions, and the block slots: per cutter, its shortest
 * blocks, plus one short last block for every image the batch can
 * start. */
static int dd_pipe_plan(dd_pipe *p, const dd_pipe_cfg *c)
{
	size_t maxlen = 0, cap, wide;

	if (c->pc_ncut == 0 || c->pc_ncut > DD_PIPE_MAX_CUT || !c->pc_cut ||
	    !c->pc_pool || !c->pc_ops ||
	    (c->pc_bytes == DD_PIPE_BYTES_SOME && !c->pc_ops->po_keep) ||
	    (c->pc_compress && (!c->pc_zctx || !c->pc_zbound)) ||
	    (c->pc_compress && c->pc_pool_lock && !c->pc_zctx_solo))
		return dd_err_set(c->pc_err, DD_EINVAL, "bad pipeline setup");
	p->pp_align = 1;
	for (size_t i = 0; i < c->pc_ncut; i++) {
		const dd_cutter *cu = &c->pc_cut[i];
		size_t a = cu->cu_reads ? cu->cu_min : cu->cu_max;

		if (!cu->cu_next || cu->cu_min == 0 || cu->cu_min > cu->cu_max)
			return dd_err_set(c->pc_err, DD_EINVAL, "bad cutter");
		p->pp_cut[i] = *cu;
		p->pp_reads |= cu->cu_reads;
		if (a > p->pp_align)
			p->pp_align = a;
		if (cu->cu_max > maxlen)
			maxlen = cu->cu_max;
	}
	for (size_t i = 0; i < c->pc_ncut; i++)
		if (!p->pp_cut[i].cu_reads &&
		    p->pp_align % p->pp_cut[i].cu_max != 0)
			return dd_err_set(c->pc_err, DD_EINVAL, "block sizes "
					  "that do not divide each other");
	cap = c->pc_batch > 2 * maxlen ? c->pc_batch : 2 * maxlen;
	p->pp_region = 2 * maxlen;
	p->pp_region = (p->pp_region + p->pp_align - 1) / p->pp_align *
		       p->pp_align;
	while (p->pp_region < DD_PIPE_REGION_MIN && p->pp_region < cap)
		p->pp_region *= 2;
	/* a region lists its blocks together for SHA-256: as many of the
	 * longest as keep the hasher's lanes busy, if that is not too much
	 * for a core's cache (an item is then one full list) */
	wide = dd_hasher_list_width() * maxlen;
	if (wide <= DD_PIPE_REGION_WIDE)
		while (p->pp_region < wide && p->pp_region < cap)
			p->pp_region *= 2;
	p->pp_cap = (cap + p->pp_region - 1) / p->pp_region * p->pp_region;
	if (p->pp_cap > UINT32_MAX)
		return dd_err_set(c->pc_err, DD_EINVAL, "batch too large");
	p->pp_maxblk = 0;
	for (size_t i = 0; i < c->pc_ncut; i++)
		p->pp_maxblk += p->pp_cap / p->pp_cut[i].cu_min +
				p->pp_cap / p->pp_align + 1;
	return 0;
}

static int dd_pipe_alloc(dd_pipe *p)
{
	const dd_pipe_cfg *c = &p->pp_cfg;
	int rc;

	for (unsigned i = 0; i < DD_PIPE_RING; i++) {
		dd_pbatch *b = &p->pp_b[i];

		b->pb_id = i;
		b->pb_data = dd_malloc(p->pp_cap);
		b->pb_blk = dd_calloc(p->pp_maxblk, sizeof(*b->pb_blk));
		b->pb_new = dd_calloc(p->pp_maxblk, sizeof(*b->pb_new));
		b->pb_reg_first = dd_calloc(p->pp_cap / p->pp_region + 1,
					    sizeof(size_t));
		if (!b->pb_data || !b->pb_blk || !b->pb_new || !b->pb_reg_first)
			return dd_err_set(c->pc_err, DD_ENOMEM,
					  "out of memory");
	}
	rc = dd_pstage_init(&p->pp_stage, c->pc_err, c->pc_pool,
			    c->pc_pool_lock, c->pc_hash_kind);
	if (rc)
		return rc;
	p->pp_width = p->pp_stage.ps_width;
	if (c->pc_compress) {
		unsigned n = c->pc_zkeep ? 2 : p->pp_width;
		size_t each = c->pc_zkeep ? p->pp_maxblk * c->pc_zbound
					  : c->pc_zbound;

		p->pp_zout = dd_calloc(n, sizeof(*p->pp_zout));
		p->pp_nzout = p->pp_zout ? n : 0;
		for (unsigned i = 0; i < p->pp_nzout; i++)
			if (!(p->pp_zout[i] = dd_malloc(each)))
				return dd_err_set(c->pc_err, DD_ENOMEM,
						  "out of memory");
		if (!p->pp_zout)
			return dd_err_set(c->pc_err, DD_ENOMEM,
					  "out of memory");
	}
	if (c->pc_bytes == DD_PIPE_BYTES_ALL)
		return 0;
	p->pp_hot = dd_calloc(p->pp_width, sizeof(*p->pp_hot));
	if (!p->pp_hot)
		return dd_err_set(c->pc_err, DD_ENOMEM, "out of memory");
	for (unsigned i = 0; i < p->pp_width; i++)
		if (!(p->pp_hot[i] = dd_malloc(p->pp_region)))
			return dd_err_set(c->pc_err, DD_ENOMEM,
					  "out of memory");
	return 0;
}

int dd_pipe_new(dd_pipe **out, const dd_pipe_cfg *cfg)
{
	dd_pipe *p = dd_calloc(1, sizeof(*p));
	int rc;

	if (!p)
		return dd_err_set(cfg->pc_err, DD_ENOMEM, "out of memory");
	/* dd_pipe_free closes these: from calloc they would name fd 0 */
	for (int i = 0; i < DD_PIPE_RING; i++)
		p->pp_b[i].pb_src_fd = -1;
	atomic_init(&p->pp_cancel, false);
	p->pp_cfg = *cfg;
	p->pp_cfg.pc_cut = NULL;
	rc = dd_pipe_plan(p, cfg);
	if (!rc)
		rc = dd_pipe_alloc(p);
	if (rc) {
		dd_pipe_free(p);
		return rc;
	}
	*out = p;
	return 0;
}

void dd_pipe_free(dd_pipe *p)
{
	if (!p)
		return;
	dd_pipe_wait(p);
	for (int i = 0; i < DD_PIPE_RING; i++) {
		dd_pbatch *b = &p->pp_b[i];

		if (b->pb_src_fd >= 0) /* a failed run: nothing to report */
			dd_io_close(b->pb_src_fd);
		dd_free(b->pb_src_label);
		dd_free(b->pb_data);
		dd_free(b->pb_blk);
		dd_free(b->pb_new);
		dd_free(b->pb_reg_first);
	}
	dd_pstage_fini(&p->pp_stage);
	for (unsigned i = 0; p->pp_hot && i < p->pp_width; i++)
		dd_free(p->pp_hot[i]);
	for (unsigned i = 0; i < p->pp_nzout; i++)
		dd_free(p->pp_zout[i]);
	dd_free(p->pp_hot);
	dd_free(p->pp_zout);
	dd_free(p);
}
