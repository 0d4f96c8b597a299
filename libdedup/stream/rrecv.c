/*
 * rrecv.c -- replication streams into a file or device, without a store:
 * dd_recv_fd rebuilds the image, dd_stream_check verifies a stream and
 * describes it, writing nothing.  This file owns the records: decoding,
 * the rules a REF and the content digest must meet, setup and the API;
 * rrbatch.c the ring of batches they fill (the pool's check, the writer
 * thread); rrecv_internal.h the state the two share.
 *
 * The calling thread decodes records (framing, CRCs, stream digest:
 * serial by nature) and queues DATA and REF blocks in a batch; full
 * batches go to the pool threads (chunk/pstage.h, the pool stage the
 * block pipeline uses too), which decompress DATA or read a REF's earlier
 * copy back from the output, and check each block's SHA-256 with the
 * block pipeline's hash stage (dd_blk_hash: the zero test, and two
 * blocks at a time), while the calling thread decodes the next batch.  Checked batches go to a writer thread, which writes
 * them in order in runs of adjacent blocks, so neither decoding nor
 * checking waits for the page cache; a ring of small batches bounds what
 * is in flight.  A REF whose source block is not written yet forces the
 * pending batches out first, so a REF is always read from bytes already
 * written and verified.  The content digest is computed from the
 * records' hashes in order and checked at END.  dd_stream_check is the
 * same loop with no output: REFs only have to name a hash seen before
 * (or, in an incremental or resumed stream, one the receiver is expected
 * to hold).
 *
 * Why not a source of the block pipeline itself: the pipeline cuts bytes
 * it is given and hashes them; here blocks come cut, as records, and
 * their bytes exist only once the pool has decompressed or read them
 * back, and a REF must wait until its first copy is written.  What is the
 * same -- the pool hand-off, the per-worker hashers, the zero test and
 * the paired SHA-256 -- is the pipeline's code (pstage.c, dd_blk_hash).
 *
 * A stream of content-defined blocks (format/stream.md §12) gives byte
 * offsets where a fixed one gives block indices, and blocks of any length
 * up to its chunker's longest: a batch keeps its blocks back to back in
 * rrb_out (rj_ooff), the seen-table maps a hash to the offset of its
 * first copy, and a ZERO record is a hole of that many bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/fs.h>

#include "dedup.h"
#include "common/alloc.h"
#include "common/hmap.h"
#include "common/io.h"
#include "pack/pack.h"
#include "stream/rrecv_internal.h"

static int dd_rrecv_data(dd_rrecv *r, const dd_srec *s)
{
	dd_rrbatch *b;
	dd_rjob *j;
	int rc;

	r->rr_info.data_records++;
	r->rr_info.data_bytes += s->sr_psize;
	rc = dd_hmap_put(r->rr_seen, r->rr_err, s->sr_hash, s->sr_idx);
	if (rc)
		return rc;
	j = dd_rrecv_slot(r, s->sr_lsize, &rc);
	if (!j)
		return rc;
	b = r->rr_cur;
	j->rj_idx = s->sr_idx;
	j->rj_kind = DD_SREC_DATA;
	j->rj_codec = s->sr_codec;
	j->rj_lsize = s->sr_lsize;
	j->rj_psize = s->sr_psize;
	memcpy(j->rj_hash, s->sr_hash, 32);
	j->rj_poff = b->rrb_plen;
	memcpy(b->rrb_pay + b->rrb_plen, s->sr_payload, s->sr_psize);
	b->rrb_plen += s->sr_psize;
	return 0;
}

static int dd_rrecv_ref(dd_rrecv *r, const dd_srec *s, uint64_t nrec)
{
	const dd_stream_hdr *h = &r->rr_h;
	uint64_t src;
	dd_rjob *j;
	int rc;

	r->rr_info.ref_records++;
	rc = dd_hmap_get(r->rr_seen, r->rr_err, s->sr_hash, &src);
	if (rc == DD_ENOENT &&
	    (h->sh_flags & DD_SH_INCREMENTAL || h->sh_resume_from) &&
	    r->rr_fd < 0) {
		/* Held by the base, or sent before the resume point. */
		r->rr_base_refs++;
		return 0;
	}
	if (rc == DD_ENOENT)
		return dd_err_set(r->rr_err, DD_EFORMAT,
				  "stream record %llu (REF) for block %llu: "
				  "references a block never sent",
				  (unsigned long long)nrec,
				  (unsigned long long)s->sr_idx);
	if (rc)
		return rc;
	/* var: a copy of another length fails its hash when read back */
	if (!r->rr_var &&
	    dd_block_lsize(h->sh_size, h->sh_block_size, src) != s->sr_lsize)
		return dd_err_set(r->rr_err, DD_EFORMAT,
				  "stream record %llu (REF) for block %llu: "
				  "its hash names block %llu, of another size",
				  (unsigned long long)nrec,
				  (unsigned long long)s->sr_idx,
				  (unsigned long long)src);
	if (r->rr_fd < 0)
		return 0;
	/* a REF is read back from bytes already written and checked */
	if (src >= dd_rrecv_unwritten(r)) {
		rc = dd_rrecv_drain(r);
		if (rc)
			return rc;
	}
	j = dd_rrecv_slot(r, s->sr_lsize, &rc);
	if (!j)
		return rc;
	j->rj_idx = s->sr_idx;
	j->rj_src = src;
	j->rj_kind = DD_SREC_REF;
	j->rj_lsize = s->sr_lsize;
	memcpy(j->rj_hash, s->sr_hash, 32);
	return 0;
}

/* A zero run: a hole in a regular file (sized with ftruncate at the
 * start, so nothing to write), zeros written on a device. */
static int dd_rrecv_zero(dd_rrecv *r, const dd_srec *s)
{
	dd_rjob *j;
	int rc;

	r->rr_info.zero_records++;
	r->rr_info.zero_blocks += r->rr_var ? 1 : s->sr_count;
	if (r->rr_digest_on && r->rr_var)
		dd_digest_block(r->rr_digest, NULL, s->sr_count);
	else if (r->rr_digest_on)
		dd_digest_zeros(r->rr_digest, s->sr_count);
	if (!r->rr_dev)
		return 0;
	j = dd_rrecv_slot(r, 0, &rc);
	if (!j)
		return rc;
	j->rj_idx = s->sr_idx;
	j->rj_count = s->sr_count;
	j->rj_kind = DD_SREC_ZERO;
	j->rj_lsize = 0;
	return 0;
}

static int dd_rrecv_end(dd_rrecv *r)
{
	uint8_t digest[32];
	int rc = dd_rrecv_drain(r);

	if (rc)
		return rc;
	if (r->rr_digest_on) {
		dd_digest_final(r->rr_digest, r->rr_h.sh_size,
				r->rr_h.sh_block_size, digest);
		if (memcmp(digest, r->rr_h.sh_digest, 32) != 0)
			return dd_err_set(r->rr_err, DD_ECHECKSUM,
					  "content digest of the blocks "
					  "received does not match the "
					  "stream header's");
	}
	return dd_sdec_expect_eof(r->rr_dec, r->rr_err);
}

static int dd_rrecv_record(dd_rrecv *r, const dd_srec *s, uint64_t nrec)
{
	if (r->rr_digest_on && s->sr_type != DD_SREC_ZERO &&
	    s->sr_type != DD_SREC_END)
		dd_digest_block(r->rr_digest, s->sr_hash, s->sr_lsize);
	switch (s->sr_type) {
	case DD_SREC_DATA:
		return dd_rrecv_data(r, s);
	case DD_SREC_REF:
		return dd_rrecv_ref(r, s, nrec);
	case DD_SREC_ZERO:
		return dd_rrecv_zero(r, s);
	default:
		return dd_rrecv_end(r);
	}
}

static int dd_rrecv_loop(dd_rrecv *r)
{
	const dd_recv_opts *o = r->rr_opts;
	uint64_t bs = r->rr_h.sh_block_size, nrec = 1;
	dd_srec s;
	int rc, type;

	do {
		type = dd_sdec_next(r->rr_dec, r->rr_err, &s);
		if (type < 0)
			return type;
		rc = dd_rrecv_record(r, &s, nrec++);
		if (rc)
			return rc;
		if (o->progress && s.sr_type != DD_SREC_END) {
			uint64_t last = s.sr_idx + (s.sr_count ? s.sr_count :
						    r->rr_var ? s.sr_lsize : 1);
			uint64_t done = r->rr_var ? last : last * bs;

			if (o->progress(o->progress_ctx,
					done > r->rr_h.sh_size ? r->rr_h.sh_size
							       : done,
					r->rr_h.sh_size) != 0)
				return dd_err_set(r->rr_err, DD_ECANCELED,
						  "stopped by the progress "
						  "callback");
		}
	} while (type != DD_SREC_END);
	return 0;
}

static int dd_rrecv_setup(dd_rrecv *r)
{
	size_t bs;
	int rc;

	r->rr_var = r->rr_h.sh_chunker != DD_CHUNKER_FIXED;
	r->rr_max = dd_stream_block_max(&r->rr_h);
	bs = r->rr_max;   /* a job's room in a batch: the longest block */

	r->rr_cap = DD_RRECV_BATCH / bs;
	if (r->rr_cap < DD_RRECV_BATCH_MIN)
		r->rr_cap = DD_RRECV_BATCH_MIN;
	for (int i = 0; i < DD_RRECV_RING; i++) {
		dd_rrbatch *b = &r->rr_b[i];

		b->rrb_job = dd_calloc(r->rr_cap, sizeof(*b->rrb_job));
		b->rrb_pay = dd_malloc(r->rr_cap * bs);
		b->rrb_out = dd_malloc(r->rr_cap * bs);
		if (!b->rrb_job || !b->rrb_pay || !b->rrb_out)
			return dd_err_set(r->rr_err, DD_ENOMEM,
					  "out of memory");
	}
	r->rr_cur = &r->rr_b[0];
	rc = dd_pool_new(&r->rr_pool, 0);
	if (rc)
		return dd_err_set(r->rr_err, rc, "cannot start worker threads");
	r->rr_width = dd_pool_width(r->rr_pool);
	rc = dd_raw_codecs(&r->rr_codec, r->rr_err, r->rr_width,
			   DD_CODEC_NONE, 0);
	if (!rc)
		rc = dd_pstage_init(&r->rr_stage, r->rr_err, r->rr_pool, NULL,
				    DD_HASH_SHA256);
	if (rc)
		return rc;
	r->rr_digest_on = r->rr_h.sh_resume_from == 0;
	rc = dd_digest_new(&r->rr_digest, r->rr_err, r->rr_h.sh_chunker,
			   dd_shdr_dv(&r->rr_h), r->rr_h.sh_block_size);
	if (rc)
		return rc;
	return dd_hmap_new(&r->rr_seen, r->rr_err, r->rr_opts->mem_limit,
			   r->rr_opts->tmpdir);
}

/* The pool first (its job may read rr_fly), then the writer: neither runs
 * once the buffers are freed. */
static void dd_rrecv_cleanup(dd_rrecv *r)
{
	dd_pstage_fini(&r->rr_stage);
	dd_rwriter_stop(r);
	dd_pool_free(r->rr_pool);
	dd_raw_codecs_free(r->rr_codec, r->rr_width);
	for (int i = 0; i < DD_RRECV_RING; i++) {
		dd_free(r->rr_b[i].rrb_job);
		dd_free(r->rr_b[i].rrb_pay);
		dd_free(r->rr_b[i].rrb_out);
	}
	dd_hmap_free(r->rr_seen);
	dd_digest_free(r->rr_digest);
	dd_sdec_free(r->rr_dec);
	pthread_cond_destroy(&r->rr_wcv);
	pthread_cond_destroy(&r->rr_dcv);
	pthread_mutex_destroy(&r->rr_mu);
}

/* Prepares the output: a regular file is emptied and sized (so an image
 * too large for it fails now, and zero runs stay holes); a device must
 * be large enough.  A file that is empty already is not truncated to 0:
 * ext4 (auto_da_alloc) then writes the whole file back when it is closed,
 * which would make close() wait for the image to reach the disk. */
static int dd_rrecv_output(dd_rrecv *r)
{
	struct stat st;
	uint64_t devsize;
	int rc;

	if (fstat(r->rr_fd, &st) != 0)
		return dd_err_set_errno(r->rr_err, errno, "fstat output");
	if (S_ISREG(st.st_mode)) {
		rc = st.st_size ? dd_io_ftruncate(r->rr_err, r->rr_fd, 0,
						  "output") : 0;
		return rc ? rc : dd_io_ftruncate(r->rr_err, r->rr_fd,
						 r->rr_h.sh_size, "output");
	}
	if (!S_ISBLK(st.st_mode))
		return dd_err_set(r->rr_err, DD_ENOTSUP, "output is not a "
				  "regular file or block device");
	if (ioctl(r->rr_fd, BLKGETSIZE64, &devsize) != 0)
		return dd_err_set_errno(r->rr_err, errno,
					"BLKGETSIZE64 on output");
	if (devsize < r->rr_h.sh_size)
		return dd_err_set(r->rr_err, DD_ENOSPC, "output device holds "
				  "%llu bytes, the image has %llu",
				  (unsigned long long)devsize,
				  (unsigned long long)r->rr_h.sh_size);
	r->rr_dev = true;
	return 0;
}

static int dd_rrecv_run(dd_rrecv *r, dd_read_fn fn, void *ctx)
{
	int rc;

	rc = dd_sdec_new(&r->rr_dec, r->rr_err, fn, ctx);
	if (!rc)
		rc = dd_sdec_header(r->rr_dec, r->rr_err, &r->rr_h);
	if (rc)
		return rc;
	dd_stream_info_of(&r->rr_info, &r->rr_h, r->rr_h.sh_name);
	if (r->rr_fd >= 0 && (r->rr_h.sh_flags & DD_SH_INCREMENTAL))
		return dd_err_set(r->rr_err, DD_ENOTSUP, "incremental stream "
				  "(base '%s'): it needs its base, receive it "
				  "into a store", r->rr_h.sh_base);
	if (r->rr_fd >= 0 && r->rr_h.sh_resume_from)
		return dd_err_set(r->rr_err, DD_ENOTSUP, "resumed stream "
				  "(from block %llu): receive it into the store "
				  "that holds the first part",
				  (unsigned long long)r->rr_h.sh_resume_from);
	rc = dd_rrecv_setup(r);
	if (!rc && r->rr_fd >= 0)
		rc = dd_rrecv_output(r);
	if (!rc && r->rr_fd >= 0)
		rc = dd_rwriter_start(r);
	if (!rc)
		rc = dd_rrecv_loop(r);
	r->rr_info.stream_bytes = dd_sdec_bytes(r->rr_dec);
	return rc;
}

static int dd_rrecv_main(int fd, const dd_recv_opts *opts, dd_read_fn fn,
			 void *ctx, dd_stream_info *info, uint64_t *base_refs)
{
	static const dd_recv_opts defaults = DD_RECV_OPTS_INIT;
	dd_err *err = dd_thread_err();
	dd_rrecv r;
	int rc;

	dd_err_clear(err);
	if (!opts)
		opts = &defaults;
	if (!fn)
		return dd_err_set(err, DD_EINVAL, "no read callback");
	if (opts->version == 0 || opts->version > DD_RECV_OPTS_VERSION)
		return dd_err_set(err, DD_EINVAL, "dd_recv_opts version %u "
				  "not supported", opts->version);
	memset(&r, 0, sizeof(r));
	pthread_mutex_init(&r.rr_mu, NULL);
	pthread_cond_init(&r.rr_wcv, NULL);
	pthread_cond_init(&r.rr_dcv, NULL);
	r.rr_fd = fd;
	r.rr_opts = opts;
	r.rr_err = err;
	rc = dd_rrecv_run(&r, fn, ctx);
	dd_rrecv_cleanup(&r);
	if (rc)
		return rc;
	if (info)
		*info = r.rr_info;
	if (base_refs)
		*base_refs = r.rr_base_refs;
	return 0;
}

int dd_recv_fd(int fd, const dd_recv_opts *opts, dd_read_fn fn, void *ctx,
	       dd_stream_info *info)
{
	if (fd < 0)
		return dd_err_set(dd_thread_err(), DD_EINVAL,
				  "dd_recv_fd: bad fd %d", fd);
	return dd_rrecv_main(fd, opts, fn, ctx, info, NULL);
}

int dd_stream_check(const dd_recv_opts *opts, dd_read_fn fn, void *ctx,
		    dd_stream_info *info)
{
	return dd_rrecv_main(-1, opts, fn, ctx, info, NULL);
}

int dd_stream_check_ex(const dd_recv_opts *opts, dd_read_fn fn, void *ctx,
		       dd_stream_info *info, uint64_t *base_refs)
{
	return dd_rrecv_main(-1, opts, fn, ctx, info, base_refs);
}
