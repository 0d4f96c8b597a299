/*
 * file.c -- pack files on disk (format/pack.md §2, §5, §6).
 *
 * A dd_pack is one open pack file: its file in the packs directory (a
 * dd_vfile: local, or a RADOS object), its id and, for a writer, the
 * offset where the next record goes (pk_end).  All I/O goes through
 * vdir.h, whose local backend calls the dd_io wrappers, so tests can
 * inject faults.
 *
 * Write order (DESIGN.md invariant 1, format/pack.md §6):
 *  - create: exclusively (O_EXCL locally), write the file header, sync it
 *    (fdatasync locally), sync the packs directory -- only then may the
 *    store reference the pack;
 *  - append: header + payload at pk_end, gathered in a write buffer of
 *    DD_PACK_WBUF_BYTES and written in one pwrite when it fills, at
 *    dd_pack_flush and at dd_pack_sync (4 KiB records cost two system
 *    calls each otherwise, most of a small-block put); nothing is durable
 *    until dd_pack_sync, and the store commits its LMDB transaction only
 *    after the sync returned 0;
 *  - a tail past the store's committed length is cut by dd_pack_truncate,
 *    by recovery or the next writer that takes the pack's lock.
 * After a failed sync the kernel may have dropped dirty pages of
 * records we already reported as appended, and after a failed write of the
 * buffer those records are gone for sure, so the handle refuses all
 * further appends and syncs (pk_broken): a later successful sync would
 * otherwise vouch for data that is gone.
 *
 * Reads use pread only (dd_vfile_pread) and never touch pk_end, so any
 * number of threads may call dd_pack_read_rec on one handle while one
 * thread appends -- of the records already written out: one still in the
 * buffer is read only after the appending thread called dd_pack_flush (or
 * dd_pack_sync).  A read with an expected record reads header and payload
 * in one call.
 *
 * The walk treats the file as hostile (format/pack.md §5.3): it never reads
 * a payload before the header has passed every check, and its one buffer is
 * bounded by the format's size limit, not by anything read from the file.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <dedup.h>

#include "common/alloc.h"
#include "common/vdir.h"
#include "common/zero.h"
#include "pack.h"

#define DD_PACK_NAME_LEN 16

struct dd_pack {
	dd_vfile *pk_f;
	uint32_t pk_id;
	int pk_writable;
	int pk_broken;          /* a write or sync failed: no more appends */
	uint64_t pk_end;        /* where the next record goes */
	uint64_t pk_flushed;    /* writeback started up to here */
	uint64_t pk_dropped;    /* ... and out of the page cache up to here */
	uint8_t *pk_wbuf;       /* appended, not yet written: the bytes */
	size_t pk_wlen;         /* [pk_end - pk_wlen, pk_end) of the file */
	char pk_name[DD_PACK_NAME_LEN];
};

/* Appended bytes that start writing back, without waiting, once this many
 * have gathered: the fdatasync a commit makes (data before metadata) then
 * finds little left to write, instead of all of it at once while the
 * writer waits -- the disk works while the cores hash and compress. */
#define DD_PACK_FLUSH_BYTES ((uint64_t)8 << 20)

/* Appended bytes this far behind the end, written back by now, leave the
 * page cache (drop-behind), as do all of them once synced.  A store's
 * packs are written far more than they are read soon after, and keeping
 * them cached has two costs: a put of new data evicts the host's working
 * set for bytes nobody reads, and each page it adds to the cache is a
 * page the kernel takes from its free lists -- on a virtual machine
 * whose host took back the free memory (free page reporting, ballooning)
 * every such page is a fault in the host, which made writing 1 GiB cost
 * 1.8 s of system time here against 0.2 s when the pages were ones just
 * dropped (tests/bench/README.md, seventeenth session).  Dropped pages go
 * back to the free lists, and the next appends reuse them. */
#define DD_PACK_DROP_LAG ((uint64_t)32 << 20)

/* Records gather in a buffer of this size; a bigger one is written alone. */
#define DD_PACK_WBUF_BYTES ((size_t)1 << 20)

/* Drops what was written back up to upto (see DD_PACK_DROP_LAG).  Its
 * wait is where a writeback error shows, and only once: the handle
 * becomes unusable, as after a failed write. */
static int pack_drop_written(dd_pack *p, dd_err *err, uint64_t upto,
			     bool synced)
{
	int rc;

	if (upto <= p->pk_dropped)
		return 0;
	rc = dd_vfile_drop_written(p->pk_f, err, p->pk_dropped,
				   upto - p->pk_dropped, synced);
	if (rc) {
		p->pk_broken = 1;
		return rc;
	}
	p->pk_dropped = upto;
	return 0;
}

static int pack_start_writeback(dd_pack *p, dd_err *err)
{
	uint64_t written = p->pk_end - p->pk_wlen;

	if (written < p->pk_flushed + DD_PACK_FLUSH_BYTES)
		return 0;
	/* a hint: its failure changes nothing, the sync reports errors */
	dd_vfile_writeback(p->pk_f, p->pk_flushed, written - p->pk_flushed);
	p->pk_flushed = written;
	if (written < p->pk_dropped + DD_PACK_DROP_LAG + DD_PACK_FLUSH_BYTES)
		return 0;
	return pack_drop_written(p, err, written - DD_PACK_DROP_LAG, false);
}

/* Writes the buffer out.  On failure the records in it are lost, though
 * their appends returned 0: the handle becomes unusable (see top). */
static int pack_write_buffer(dd_pack *p, dd_err *err)
{
	uint64_t at = p->pk_end - p->pk_wlen;
	int rc;

	if (p->pk_wlen == 0)
		return 0;
	rc = dd_vfile_pwrite_full(p->pk_f, err, p->pk_wbuf, p->pk_wlen, at);
	p->pk_wlen = 0;
	if (rc) {
		p->pk_broken = 1;
		p->pk_end = at;
		/* keeps walks short; the store cuts the tail anyway */
		(void)dd_vfile_truncate(p->pk_f, NULL, at);
		return rc;
	}
	return pack_start_writeback(p, err);
}

void dd_pack_name(char *buf, size_t len, uint32_t id)
{
	if (!buf || len == 0)
		return;
	snprintf(buf, len, "%08" PRIx32 ".pack", id);
}

uint32_t dd_pack_id(const dd_pack *p)
{
	return p->pk_id;
}

uint64_t dd_pack_end(const dd_pack *p)
{
	return p->pk_end;
}

/*
 * Re-records a decode error with the pack name and offset in front.  The
 * inner message may already start with the code's symbol; drop it so the
 * symbol appears once.
 */
static int pack_err_at(dd_err *err, const char *name, uint64_t off,
		       const dd_err *inner)
{
	const char *msg = inner->de_msg;
	const char *sym = dd_err_symbol(inner->de_code);
	size_t n = sym ? strlen(sym) : 0;

	if (n && strncmp(msg, sym, n) == 0 && msg[n] == ':') {
		msg += n + 1;
		while (*msg == ' ')
			msg++;
	}
	return dd_err_set(err, inner->de_code, "pack %s, off %" PRIu64 ": %s",
			  name, off, msg);
}

static int pack_alloc(dd_pack **out, dd_vfile *f, uint32_t id, int writable)
{
	dd_pack *p = dd_calloc(1, sizeof(*p));

	if (!p)
		return DD_ENOMEM;
	p->pk_f = f;
	p->pk_id = id;
	p->pk_writable = writable;
	dd_pack_name(p->pk_name, sizeof(p->pk_name), id);
	*out = p;
	return 0;
}

int dd_pack_create(dd_pack **out, dd_err *err, dd_vdir *dir, uint32_t id)
{
	uint8_t hdr[DD_PACK_FILE_HDR_SIZE];
	char name[DD_PACK_NAME_LEN];
	dd_pack *p = NULL;
	dd_vfile *f;
	int rc;

	if (!out || !dir)
		return dd_err_set(err, DD_EINVAL, "dd_pack_create: bad argument");
	dd_pack_name(name, sizeof(name), id);
	/* exclusive: a pack is never overwritten, even by a confused caller;
	 * DD_EEXIST tells the store an orphan of a crash (format/pack.md
	 * §6) from an I/O error */
	rc = dd_vdir_open_file(dir, err, name, DD_VF_CREATE, &f);
	if (rc == DD_EEXIST)
		return dd_err_set(err, DD_EEXIST, "pack %s already exists",
				  name);
	if (rc)
		return rc;
	dd_pack_file_hdr_encode(hdr, id);
	rc = dd_vfile_pwrite_full(f, err, hdr, sizeof(hdr), 0);
	if (rc)
		goto fail;
	rc = dd_vfile_sync(f, err);
	if (rc)
		goto fail;
	/* the new name, so that it survives a crash */
	rc = dd_vdir_sync(dir, err);
	if (rc)
		goto fail;
	rc = pack_alloc(&p, f, id, 1);
	if (rc) {
		rc = dd_err_set(err, rc, "pack %s: out of memory", name);
		goto fail;
	}
	p->pk_end = DD_PACK_FILE_HDR_SIZE;
	p->pk_flushed = p->pk_end;
	p->pk_dropped = p->pk_end;
	*out = p;
	return 0;
fail:
	/* Leave no half-made file behind: a retry must be able to create
	 * it again. */
	dd_vfile_close(f);
	(void)dd_vdir_unlink(dir, NULL, name);
	return rc;
}

int dd_pack_open(dd_pack **out, dd_err *err, dd_vdir *dir, uint32_t id,
		 int writable)
{
	uint8_t hdr[DD_PACK_FILE_HDR_SIZE];
	char name[DD_PACK_NAME_LEN];
	dd_err inner;
	dd_pack *p = NULL;
	dd_vfile *f;
	uint64_t size;
	uint32_t hid;
	int rc;

	if (!out || !dir)
		return dd_err_set(err, DD_EINVAL, "dd_pack_open: bad argument");
	dd_pack_name(name, sizeof(name), id);
	rc = dd_vdir_open_file(dir, err, name, writable ? DD_VF_WRITE : 0, &f);
	if (rc)
		return rc;
	rc = dd_vfile_size(f, err, &size);
	if (rc)
		goto fail;
	if (size < DD_PACK_FILE_HDR_SIZE) {
		rc = dd_err_set(err, DD_ECORRUPT,
				"pack %s: %" PRIu64 " bytes, shorter than its header",
				name, size);
		goto fail;
	}
	rc = dd_vfile_pread_full(f, err, hdr, sizeof(hdr), 0);
	if (rc)
		goto fail;
	dd_err_clear(&inner);
	rc = dd_pack_file_hdr_decode(&inner, hdr, &hid);
	/* format/pack.md §2.1: a renamed or copied file is not this pack. */
	if (rc == 0 && hid != id)
		rc = dd_err_set(&inner, DD_ECORRUPT,
				"header names pack %08" PRIx32, hid);
	if (rc) {
		rc = pack_err_at(err, name, 0, &inner);
		goto fail;
	}
	rc = pack_alloc(&p, f, id, writable);
	if (rc) {
		rc = dd_err_set(err, rc, "pack %s: out of memory", name);
		goto fail;
	}
	/* The store truncates to its committed length before appending. */
	p->pk_end = size;
	p->pk_flushed = p->pk_end;
	p->pk_dropped = p->pk_end;
	*out = p;
	return 0;
fail:
	dd_vfile_close(f);
	return rc;
}

void dd_pack_close(dd_pack *p)
{
	if (!p)
		return;
	/* what was appended is in the file, as it was before the buffer;
	 * unsynced, it is a tail no commit names unless a sync said so */
	if (p->pk_wlen && !p->pk_broken)
		(void)pack_write_buffer(p, NULL);
	dd_vfile_close(p->pk_f);
	dd_free(p->pk_wbuf);
	dd_free(p);
}

int dd_pack_lock(dd_pack *p, dd_err *err)
{
	int rc = dd_vfile_lock(p->pk_f, err);

	if (rc == DD_EBUSY)
		return dd_err_set(err, DD_EBUSY, "pack %s is in use",
				  p->pk_name);
	return rc;
}

static int pack_check_writable(dd_pack *p, dd_err *err)
{
	if (!p->pk_writable)
		return dd_err_set(err, DD_EPERM, "pack %s: opened read-only",
				  p->pk_name);
	if (p->pk_broken)
		return dd_err_set(err, DD_EIO,
				  "pack %s: unusable after a failed write "
				  "or sync",
				  p->pk_name);
	return 0;
}

int dd_pack_truncate(dd_pack *p, dd_err *err, uint64_t end)
{
	uint64_t size;
	int rc;

	if (!p)
		return dd_err_set(err, DD_EINVAL, "dd_pack_truncate: NULL pack");
	rc = pack_check_writable(p, err);
	if (rc)
		return rc;
	if (end < DD_PACK_FILE_HDR_SIZE)
		return dd_err_set(err, DD_EINVAL,
				  "pack %s: truncate to %" PRIu64 " cuts its header",
				  p->pk_name, end);
	rc = pack_write_buffer(p, err);
	if (!rc)
		rc = dd_vfile_size(p->pk_f, err, &size);
	if (rc)
		return rc;
	/* format/pack.md §6: a committed length past EOF means lost data;
	 * extending with zeros would hide it. */
	if (end > size)
		return dd_err_set(err, DD_ECORRUPT,
				  "pack %s: committed length %" PRIu64 " beyond file size %" PRIu64,
				  p->pk_name, end, size);
	if (end < size) {
		/* Not synced: if the cut is lost in a crash, the tail is
		 * still past the committed length and cut again. */
		rc = dd_vfile_truncate(p->pk_f, err, end);
		if (rc)
			return rc;
	}
	p->pk_end = end;
	p->pk_flushed = p->pk_end;
	p->pk_dropped = p->pk_end;
	return 0;
}

int dd_pack_append(dd_pack *p, dd_err *err, const dd_pack_rec *rec,
		   const void *payload, uint64_t *offset)
{
	uint8_t hdr[DD_PACK_REC_HDR_SIZE];
	dd_err inner;
	uint64_t off;
	size_t size;
	int rc;

	if (!p || !rec || !payload || !offset)
		return dd_err_set(err, DD_EINVAL, "dd_pack_append: NULL argument");
	rc = pack_check_writable(p, err);
	if (rc)
		return rc;
	dd_err_clear(&inner);
	if (dd_pack_rec_check_sizes(&inner, rec) != 0)
		return dd_err_set(err, DD_EINVAL,
				  "pack %s: refusing to append an invalid record: %s",
				  p->pk_name, inner.de_msg);
	size = DD_PACK_REC_HDR_SIZE + (size_t)rec->pr_psize;
	if (p->pk_wlen + size > DD_PACK_WBUF_BYTES) {
		rc = pack_write_buffer(p, err);
		if (rc)
			return rc;
	}
	if (!p->pk_wbuf && size <= DD_PACK_WBUF_BYTES &&
	    !(p->pk_wbuf = dd_malloc(DD_PACK_WBUF_BYTES)))
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	off = p->pk_end;
	dd_pack_rec_encode(hdr, rec);
	if (size <= DD_PACK_WBUF_BYTES) {
		memcpy(p->pk_wbuf + p->pk_wlen, hdr, sizeof(hdr));
		memcpy(p->pk_wbuf + p->pk_wlen + sizeof(hdr), payload,
		       rec->pr_psize);
		p->pk_wlen += size;
		p->pk_end = off + size;
		*offset = off;
		return 0;
	}
	/* bigger than the buffer (empty now): two writes rather than a
	 * copy; a pwritev would make it one system call */
	rc = dd_vfile_pwrite_full(p->pk_f, err, hdr, sizeof(hdr), off);
	if (rc == 0)
		rc = dd_vfile_pwrite_full(p->pk_f, err, payload, rec->pr_psize,
					  off + DD_PACK_REC_HDR_SIZE);
	if (rc) {
		/* pk_end is unchanged, so the next append overwrites the
		 * partial record; cutting it now just keeps walks short. */
		(void)dd_vfile_truncate(p->pk_f, NULL, off);
		return rc;
	}
	p->pk_end = off + size;
	*offset = off;
	return pack_start_writeback(p, err);
}

int dd_pack_flush(dd_pack *p, dd_err *err)
{
	int rc;

	if (!p)
		return dd_err_set(err, DD_EINVAL, "dd_pack_flush: NULL pack");
	rc = pack_check_writable(p, err);
	return rc ? rc : pack_write_buffer(p, err);
}

int dd_pack_sync(dd_pack *p, dd_err *err)
{
	int rc;

	if (!p)
		return dd_err_set(err, DD_EINVAL, "dd_pack_sync: NULL pack");
	rc = pack_check_writable(p, err);
	if (!rc)
		rc = pack_write_buffer(p, err);
	if (rc)
		return rc;
	rc = dd_vfile_sync(p->pk_f, err);
	if (rc) {
		p->pk_broken = 1;
		return rc;
	}
	/* all of it is clean now: nothing to wait for */
	return pack_drop_written(p, err, p->pk_end, true);
}

/* Decodes the header at buf and wraps any error with pack and offset. */
static int pack_decode_at(dd_pack *p, dd_err *err, uint64_t off,
			  const uint8_t *buf, dd_pack_rec *rec)
{
	dd_err inner;
	int rc;

	dd_err_clear(&inner);
	rc = dd_pack_rec_decode(&inner, buf, rec);
	if (rc)
		return pack_err_at(err, p->pk_name, off, &inner);
	return 0;
}

int dd_pack_read_rec(dd_pack *p, dd_err *err, uint64_t offset,
		     const dd_pack_rec *expect, dd_pack_rec *rec, void *buf,
		     size_t buflen)
{
	uint8_t *b = buf;
	dd_err inner;
	dd_pack_rec r;
	uint32_t psize;
	int rc;

	if (!p || !rec || !buf)
		return dd_err_set(err, DD_EINVAL, "dd_pack_read_rec: NULL argument");
	if (buflen < DD_PACK_REC_HDR_SIZE)
		return dd_err_set(err, DD_EINVAL,
				  "pack %s: read buffer of %zu bytes", p->pk_name,
				  buflen);
	/* Offsets come from the DDT, which may be damaged too.  The bound
	 * keeps offset + record within off_t. */
	if (offset < DD_PACK_FILE_HDR_SIZE ||
	    offset > (uint64_t)INT64_MAX - DD_PACK_REC_HDR_SIZE - DD_BLOCK_SIZE_MAX)
		return dd_err_set(err, DD_ECORRUPT,
				  "pack %s: record offset %" PRIu64 " out of range",
				  p->pk_name, offset);

	if (expect) {
		/* The expected sizes come from the DDT: check them before
		 * they size a read.  The codec is the record's business. */
		r = *expect;
		r.pr_codec = DD_CODEC_ZSTD;
		dd_err_clear(&inner);
		rc = dd_pack_rec_check_sizes(&inner, &r);
		if (rc)
			return pack_err_at(err, p->pk_name, offset, &inner);
		psize = expect->pr_psize;
		if (psize > buflen - DD_PACK_REC_HDR_SIZE)
			return dd_err_set(err, DD_EINVAL,
					  "pack %s, off %" PRIu64 ": record of %" PRIu32 " bytes does not fit a %zu-byte buffer",
					  p->pk_name, offset, psize, buflen);
		/* One system call per block: header and payload together. */
		rc = dd_vfile_pread_full(p->pk_f, err, b,
					 DD_PACK_REC_HDR_SIZE + (size_t)psize,
					 offset);
		if (rc)
			return rc;
		rc = pack_decode_at(p, err, offset, b, &r);
		if (rc)
			return rc;
		if (r.pr_lsize != expect->pr_lsize ||
		    r.pr_psize != expect->pr_psize ||
		    memcmp(r.pr_hash, expect->pr_hash, sizeof(r.pr_hash)) != 0)
			return dd_err_set(err, DD_ECORRUPT,
					  "pack %s, off %" PRIu64 ": record (lsize %" PRIu32 ", psize %" PRIu32 ") is not the one expected (lsize %" PRIu32 ", psize %" PRIu32 ")%s",
					  p->pk_name, offset, r.pr_lsize,
					  r.pr_psize, expect->pr_lsize,
					  expect->pr_psize,
					  memcmp(r.pr_hash, expect->pr_hash,
						 sizeof(r.pr_hash)) ?
						  ", hash differs" : "");
		*rec = r;
		return 0;
	}

	rc = dd_vfile_pread_full(p->pk_f, err, b, DD_PACK_REC_HDR_SIZE, offset);
	if (rc)
		return rc;
	rc = pack_decode_at(p, err, offset, b, &r);
	if (rc)
		return rc;
	if (r.pr_psize > buflen - DD_PACK_REC_HDR_SIZE)
		return dd_err_set(err, DD_EINVAL,
				  "pack %s, off %" PRIu64 ": record of %" PRIu32 " bytes does not fit a %zu-byte buffer",
				  p->pk_name, offset, r.pr_psize, buflen);
	rc = dd_vfile_pread_full(p->pk_f, err, b + DD_PACK_REC_HDR_SIZE,
				 r.pr_psize, offset + DD_PACK_REC_HDR_SIZE);
	if (rc)
		return rc;
	*rec = r;
	return 0;
}

static int dd_pack_walk_any(dd_pack *p, dd_err *err, uint64_t from,
			    uint64_t limit, bool payloads, dd_pack_walk_fn fn,
			    void *ctx, uint64_t *end);

int dd_pack_walk(dd_pack *p, dd_err *err, uint64_t limit, dd_pack_walk_fn fn,
		 void *ctx, uint64_t *end)
{
	return dd_pack_walk_any(p, err, DD_PACK_FILE_HDR_SIZE, limit, true, fn,
				ctx, end);
}

int dd_pack_walk_headers(dd_pack *p, dd_err *err, dd_pack_walk_fn fn,
			 void *ctx, uint64_t *end)
{
	return dd_pack_walk_any(p, err, DD_PACK_FILE_HDR_SIZE, 0, false, fn,
				ctx, end);
}

int dd_pack_walk_from(dd_pack *p, dd_err *err, uint64_t from, bool payloads,
		      dd_pack_walk_fn fn, void *ctx, uint64_t *end)
{
	return dd_pack_walk_any(p, err, from, 0, payloads, fn, ctx, end);
}

int dd_pack_find_record(dd_pack *p, dd_err *err, uint64_t from,
			uint64_t *next)
{
	const size_t chunk = (size_t)1 << 20;
	uint8_t *buf = dd_malloc(chunk + DD_PACK_REC_HDR_SIZE);
	uint64_t size;
	int rc;

	if (!buf)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	rc = dd_vfile_size(p->pk_f, err, &size);
	/* chunks overlap by a header, so a header across two is seen */
	for (uint64_t at = from; !rc && at + DD_PACK_REC_HDR_SIZE <= size;
	     at += chunk) {
		size_t got = 0;

		rc = dd_vfile_pread(p->pk_f, err, buf,
				    chunk + DD_PACK_REC_HDR_SIZE, at, &got);
		for (size_t i = 0; !rc && i + DD_PACK_REC_HDR_SIZE <= got &&
				   i < chunk; i++) {
			dd_pack_rec rec;
			dd_err inner;

			if (memcmp(buf + i, "DDRC", 4) ||
			    dd_pack_rec_decode(&inner, buf + i, &rec) != 0 ||
			    rec.pr_psize > size - (at + i) - DD_PACK_REC_HDR_SIZE)
				continue;
			*next = at + i;
			dd_free(buf);
			return 1;
		}
	}
	dd_free(buf);
	return rc;
}

int dd_pack_punch(dd_pack *p, dd_err *err, uint64_t off, uint64_t len)
{
	int rc;

	if (!p || !p->pk_writable)
		return dd_err_set(err, DD_EINVAL, "dd_pack_punch: pack not "
				  "open for writing");
	if (off < DD_PACK_FILE_HDR_SIZE || len == 0 ||
	    len > (uint64_t)INT64_MAX - off)
		return dd_err_set(err, DD_EINVAL, "pack %s: punch of %" PRIu64
				  " bytes at %" PRIu64, p->pk_name, len, off);
	rc = dd_vfile_punch(p->pk_f, err, off, len);
	if (rc == DD_ENOTSUP)
		return dd_err_set(err, DD_ENOTSUP, "pack %s: the file system "
				  "cannot punch holes", p->pk_name);
	return rc;
}

/* A punched range (format/pack.md §6.1) at a record's start: 64 zero
 * bytes where its header was.  *next gets the first non-zero byte at or
 * after off, or bound: the next record's start, since every header begins
 * with its magic.  Holes the file system deallocated are stepped over
 * (dd_vfile_seek_data); the rest is read (buf holds at least 64 KiB). */
static int dd_pack_skip_punched(dd_pack *p, dd_err *err, uint8_t *buf,
				uint64_t off, uint64_t bound, uint64_t *next)
{
	const size_t chunk = (size_t)64 << 10;

	while (off < bound) {
		uint64_t data;
		size_t got, n;
		int rc;

		if (dd_vfile_seek_data(p->pk_f, off, &data))
			break;        /* a hole to the end of the file */
		if (data > off)
			off = data < bound ? data : bound;
		if (off >= bound)
			break;
		n = bound - off < chunk ? (size_t)(bound - off) : chunk;
		rc = dd_vfile_pread(p->pk_f, err, buf, n, off, &got);
		if (rc)
			return rc;
		if (got == 0)
			break;
		for (size_t i = 0; i < got; i++)
			if (buf[i]) {
				*next = off + i;
				return 0;
			}
		off += got;
	}
	*next = bound;
	return 0;
}

static int dd_pack_walk_any(dd_pack *p, dd_err *err, uint64_t from,
			    uint64_t limit, bool payloads, dd_pack_walk_fn fn,
			    void *ctx, uint64_t *end)
{
	const size_t buflen = DD_PACK_REC_HDR_SIZE + DD_BLOCK_SIZE_MAX;
	uint64_t size, bound, off = from;
	uint8_t *buf = NULL;
	dd_pack_rec rec;
	size_t got;
	int rc;

	if (end)
		*end = off;
	if (!p || !fn)
		return dd_err_set(err, DD_EINVAL, "dd_pack_walk: NULL argument");
	rc = dd_vfile_size(p->pk_f, err, &size);
	if (rc)
		return rc;
	bound = (limit == 0 || limit > size) ? size : limit;
	buf = dd_malloc(buflen);
	if (!buf)
		return dd_err_set(err, DD_ENOMEM,
				  "pack %s: no memory for a walk buffer",
				  p->pk_name);

	while (off < bound) {
		if (bound - off < DD_PACK_REC_HDR_SIZE) {
			rc = dd_err_set(err, DD_ECORRUPT,
					"pack %s, off %" PRIu64 ": partial record header (%" PRIu64 " bytes left)",
					p->pk_name, off, bound - off);
			goto out;
		}
		rc = dd_vfile_pread(p->pk_f, err, buf, DD_PACK_REC_HDR_SIZE,
				    off, &got);
		if (rc)
			goto out;
		if (got < DD_PACK_REC_HDR_SIZE) {
			/* Shrunk under us (a writer truncating its tail). */
			rc = dd_err_set(err, DD_ECORRUPT,
					"pack %s, off %" PRIu64 ": partial record header",
					p->pk_name, off);
			goto out;
		}
		if (dd_is_zero(buf, DD_PACK_REC_HDR_SIZE)) {
			/* punched: dead records gc gave back (§6.1) */
			rc = dd_pack_skip_punched(p, err, buf, off, bound, &off);
			if (rc)
				goto out;
			if (end)
				*end = off;
			continue;
		}
		rc = pack_decode_at(p, err, off, buf, &rec);
		if (rc)
			goto out;
		/* Decode bounded psize to 1 MiB: it fits buf, and no sum
		 * below can overflow. */
		if (rec.pr_psize > bound - off - DD_PACK_REC_HDR_SIZE) {
			rc = dd_err_set(err, DD_ECORRUPT,
					"pack %s, off %" PRIu64 ": record payload of %" PRIu32 " bytes runs past %s %" PRIu64,
					p->pk_name, off, rec.pr_psize,
					bound == size ? "end of file" : "limit",
					bound);
			goto out;
		}
		got = rec.pr_psize;
		if (payloads)
			rc = dd_vfile_pread(p->pk_f, err,
					    buf + DD_PACK_REC_HDR_SIZE,
					    rec.pr_psize,
					    off + DD_PACK_REC_HDR_SIZE, &got);
		if (rc)
			goto out;
		if (got < rec.pr_psize) {
			rc = dd_err_set(err, DD_ECORRUPT,
					"pack %s, off %" PRIu64 ": partial record payload",
					p->pk_name, off);
			goto out;
		}
		rc = fn(ctx, off, &rec,
			payloads ? buf + DD_PACK_REC_HDR_SIZE : NULL);
		if (rc)
			goto out;
		off += DD_PACK_REC_HDR_SIZE + rec.pr_psize;
		if (end)
			*end = off;
	}
	/* A limit past the end of the file: committed data is missing. */
	if (limit > size)
		rc = dd_err_set(err, DD_ECORRUPT,
				"pack %s: file ends at %" PRIu64 ", before limit %" PRIu64,
				p->pk_name, size, limit);
out:
	dd_free(buf);
	return rc;
}
