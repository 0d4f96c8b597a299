/*
 * vdir_rados.c -- a store directory (common/vdir.h) as objects of a RADOS
 * pool namespace: the file NAME of directory DIR is the object "DIR/NAME".
 *
 * What a POSIX directory gives for free is made here from RADOS's rules:
 *
 *  - durability: an OSD acknowledges a write once every replica holds it,
 *    so the file and directory syncs have nothing left to do;
 *  - exclusive create: one write operation that creates the object only
 *    if it does not exist (dd_rados_write_full_if with version 0);
 *  - rename: RADOS has none.  It is an exclusive create of `to` holding
 *    all of `from` in one write -- atomic: a reader sees all of it or no
 *    object --, then the removal of `from`.  A crash between leaves both
 *    names, each whole; the store's rules say which counts (a manifest's
 *    later state wins, format/store.md §1).  An object is one write, so a
 *    renamed file is at most DD_RADOS_IO_MAX bytes;
 *  - locks: the store takes its store-wide RADOS lock before it writes
 *    (store/rstore.c), so a pack has one appender without a lock of its
 *    own; punching holes is not offered.
 *
 * Reads that follow each other through a file (a pack walked by scrub or
 * repair, a restore reading a pack's records in order) are served from a
 * window of DD_VR_WINDOW bytes read ahead, one network round trip instead
 * of one per record.  A window is only trusted while nothing was written
 * through its directory since it was read (vd_gen): a tail cut and
 * written again must never be served stale.  Writers elsewhere hold the
 * store lock and change nothing a reader's catalog names.  A directory
 * owns DD_VR_WINDOWS windows and its files borrow them, the least
 * recently used taken back first: the memory stays bounded however many
 * packs a restore goes through (a store keeps every pack it read open).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/vdir.h"
#include "rados/rados_internal.h"

/* A window is two halves read as one RADOS operation each: while the
 * reader consumes one, the other is read ahead.  A restore of 512 MiB
 * (tests/bench/bench_rados_store.sh) took the same time with halves of
 * 2, 4 and 8 MiB; the smallest keeps the least memory. */
#define DD_VR_HALF ((size_t)2 << 20)
#define DD_VR_WINDOW (2 * DD_VR_HALF)
#define DD_VR_WINDOWS 3
#define DD_VR_DIR_MAX 32
#define DD_VR_OID_MAX (DD_VR_DIR_MAX + sizeof(((dd_vfile *)0)->vf_name) + 1)

struct vr_file;

typedef struct vr_dir {
	dd_rados_pool *vd_pool;
	char vd_dir[DD_VR_DIR_MAX];      /* "packs" */
	_Atomic uint64_t vd_gen;         /* bumped by every change through it */
	/* the windows; vd_mu, taken after a file's vr_mu (a holder's vr_mu
	 * only by trylock), guards which file holds which */
	pthread_mutex_t vd_mu;
	uint8_t *vd_buf[DD_VR_WINDOWS];
	struct vr_file *vd_holder[DD_VR_WINDOWS];
	uint64_t vd_used[DD_VR_WINDOWS]; /* vd_tick at its last refill */
	uint64_t vd_tick;
} vr_dir;

/* Half i of a window: bytes [vs_off, vs_off + vs_len) of the object at
 * vr_win + i * DD_VR_HALF, once its read (vs_aio) is waited for. */
typedef struct vr_seg {
	bool vs_valid;
	uint64_t vs_off;
	size_t vs_len;
	dd_rados_aio *vs_aio;
} vr_seg;

typedef struct vr_file {
	dd_vfile vr_base;                /* first: a dd_vfile * is a vr_file * */
	char vr_oid[DD_VR_OID_MAX];
	pthread_mutex_t vr_mu;           /* the window */
	int vr_slot;                     /* the window borrowed, or -1 */
	uint8_t *vr_win;
	vr_seg vr_seg[2];
	uint64_t vr_win_gen;             /* vd_gen when it was read */
	uint64_t vr_next;                /* where the last read ended */
} vr_file;

static vr_dir *vr_dir_of(dd_vdir *d)
{
	return dd_vdir_priv(d);
}

static int vr_oid(dd_err *err, const vr_dir *vd, const char *name, char *buf,
		  size_t len)
{
	int n = snprintf(buf, len, "%s/%s", vd->vd_dir, name);

	if (n < 0 || (size_t)n >= len || !name[0] || strchr(name, '/'))
		return dd_err_set(err, DD_EINVAL, "rados: bad object name "
				  "%s/%s", vd->vd_dir, name);
	return 0;
}

static void vr_changed(vr_dir *vd)
{
	atomic_fetch_add(&vd->vd_gen, 1);
}

/* ---- files ------------------------------------------------------------------*/

static int vr_open_file(dd_vdir *d, dd_err *err, const char *name, int flags,
			dd_vfile **out)
{
	vr_dir *vd = vr_dir_of(d);
	vr_file *f;
	int rc;

	if (strlen(name) >= sizeof(f->vr_base.vf_name))
		return dd_err_set(err, DD_EINVAL, "rados: name too long: %s",
				  name);
	f = dd_calloc(1, sizeof(*f));
	if (!f)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	rc = vr_oid(err, vd, name, f->vr_oid, sizeof(f->vr_oid));
	if (!rc && (flags & DD_VF_CREATE)) {
		rc = dd_rados_write_full_if(vd->vd_pool, err, f->vr_oid, "", 0,
					    0, NULL);
		if (rc == DD_EBUSY)   /* the object was there first */
			rc = dd_err_set(err, DD_EEXIST, "%s: exists", name);
		vr_changed(vd);
	} else if (!rc) {
		rc = dd_rados_stat(vd->vd_pool, err, f->vr_oid, NULL, NULL);
	}
	if (rc) {
		dd_free(f);
		return rc;
	}
	f->vr_base.vf_dir = d;
	f->vr_slot = -1;
	snprintf(f->vr_base.vf_name, sizeof(f->vr_base.vf_name), "%s", name);
	pthread_mutex_init(&f->vr_mu, NULL);
	*out = &f->vr_base;
	return 0;
}

/* Waits for half i's read: 0 with vs_len set, or the read's error (the
 * half is then invalid). */
static int vr_seg_settle(vr_file *f, dd_err *err, int i)
{
	vr_seg *sg = &f->vr_seg[i];
	int rc = 0;

	if (sg->vs_aio) {
		rc = dd_rados_aio_wait(sg->vs_aio, err, &sg->vs_len);
		sg->vs_aio = NULL;
		if (rc)
			sg->vs_valid = false;
	}
	return rc;
}

/* Forgets the window's bytes (a read still running is waited for: its
 * buffer must not be reused under it). */
static void vr_drop(vr_file *f)
{
	for (int i = 0; i < 2; i++) {
		(void)vr_seg_settle(f, NULL, i);
		f->vr_seg[i].vs_valid = false;
	}
}

/* Starts reading half i at off; a failure leaves it invalid (the read is
 * then made directly, and says why). */
static void vr_seg_start(vr_file *f, int i, uint64_t off)
{
	vr_dir *vd = vr_dir_of(f->vr_base.vf_dir);
	vr_seg *sg = &f->vr_seg[i];

	sg->vs_off = off;
	sg->vs_len = 0;
	sg->vs_valid = dd_rados_aio_read(vd->vd_pool, NULL, f->vr_oid,
					 f->vr_win + i * DD_VR_HALF,
					 DD_VR_HALF, off, &sg->vs_aio) == 0;
}

static void vr_file_close(dd_vfile *vf)
{
	vr_file *f = (vr_file *)vf;
	vr_dir *vd = vr_dir_of(vf->vf_dir);

	vr_drop(f);
	pthread_mutex_lock(&vd->vd_mu);
	if (f->vr_slot >= 0)
		vd->vd_holder[f->vr_slot] = NULL;
	pthread_mutex_unlock(&vd->vd_mu);
	pthread_mutex_destroy(&f->vr_mu);
	dd_free(f);
}

/* A window for f (whose vr_mu the caller holds): a free one, else the
 * least recently refilled one whose holder is not busy.  false: none to
 * be had now, read directly. */
static bool vr_borrow(vr_dir *vd, vr_file *f)
{
	int pick = -1;

	pthread_mutex_lock(&vd->vd_mu);
	vd->vd_tick++;
	if (f->vr_slot >= 0) {
		vd->vd_used[f->vr_slot] = vd->vd_tick;
		pthread_mutex_unlock(&vd->vd_mu);
		return true;
	}
	for (int i = 0; i < DD_VR_WINDOWS && pick < 0; i++)
		if (!vd->vd_holder[i])
			pick = i;
	for (int i = 0; i < DD_VR_WINDOWS && pick < 0; i++) {
		int lru = -1;

		for (int j = 0; j < DD_VR_WINDOWS; j++)
			if (vd->vd_holder[j] && (lru < 0 ||
			    vd->vd_used[j] < vd->vd_used[lru]))
				lru = j;
		if (lru < 0)
			break;
		if (pthread_mutex_trylock(&vd->vd_holder[lru]->vr_mu) == 0) {
			vr_file *h = vd->vd_holder[lru];

			vr_drop(h);
			h->vr_slot = -1;
			h->vr_win = NULL;
			pthread_mutex_unlock(&h->vr_mu);
			vd->vd_holder[lru] = NULL;
			pick = lru;
		} else {
			vd->vd_used[lru] = vd->vd_tick;   /* busy: try another */
		}
	}
	if (pick >= 0 && !vd->vd_buf[pick])
		vd->vd_buf[pick] = dd_malloc(DD_VR_WINDOW);
	if (pick >= 0 && vd->vd_buf[pick]) {
		vd->vd_holder[pick] = f;
		vd->vd_used[pick] = vd->vd_tick;
		f->vr_slot = pick;
		f->vr_win = vd->vd_buf[pick];
	}
	pthread_mutex_unlock(&vd->vd_mu);
	return f->vr_slot >= 0;
}

static int vr_read(vr_file *f, dd_err *err, void *buf, size_t len,
		   uint64_t off, size_t *got)
{
	vr_dir *vd = vr_dir_of(f->vr_base.vf_dir);
	size_t done = 0;

	/* librados reads at most an int's worth; packs are far smaller */
	while (done < len) {
		size_t n = len - done, part;
		int rc;

		if (n > DD_RADOS_IO_MAX)
			n = DD_RADOS_IO_MAX;
		rc = dd_rados_read(vd->vd_pool, err, f->vr_oid,
				   (uint8_t *)buf + done, n, off + done, &part);
		if (rc)
			return rc;
		done += part;
		if (part < n)
			break;
	}
	*got = done;
	return 0;
}

/* Half holding byte at, -1 if none (a half still being read is taken to
 * hold all it asked for). */
static int vr_seg_find(const vr_file *f, uint64_t at)
{
	for (int i = 0; i < 2; i++) {
		const vr_seg *sg = &f->vr_seg[i];
		size_t len = sg->vs_aio ? DD_VR_HALF : sg->vs_len;

		if (sg->vs_valid && at >= sg->vs_off && at - sg->vs_off < len)
			return i;
	}
	return -1;
}

/* Does the object end at `at` (a half that ended short there)? */
static bool vr_seg_ends_at(const vr_file *f, uint64_t at)
{
	for (int i = 0; i < 2; i++) {
		const vr_seg *sg = &f->vr_seg[i];

		if (sg->vs_valid && !sg->vs_aio && sg->vs_len < DD_VR_HALF &&
		    at == sg->vs_off + sg->vs_len)
			return true;
	}
	return false;
}

/* [off, off + len) from the window: 1 served (*got, short only at the
 * object's end), 0 when the window does not hold it all, or an error. */
static int vr_serve(vr_file *f, dd_err *err, void *buf, size_t len,
		    uint64_t off, size_t *got)
{
	size_t done = 0;

	while (done < len) {
		uint64_t at = off + done;
		int i = vr_seg_find(f, at), rc;
		vr_seg *sg;
		size_t n;

		if (i < 0) {
			if (vr_seg_ends_at(f, at))
				break;
			return 0;
		}
		sg = &f->vr_seg[i];
		rc = vr_seg_settle(f, err, i);
		if (rc)
			return rc;
		if (at >= sg->vs_off + sg->vs_len)
			break;   /* the object ends in this half */
		n = (size_t)(sg->vs_off + sg->vs_len - at);
		if (n > len - done)
			n = len - done;
		memcpy((uint8_t *)buf + done, f->vr_win + i * DD_VR_HALF +
		       (at - sg->vs_off), n);
		done += n;
	}
	*got = done;
	f->vr_next = off + done;
	/* into the later half: the earlier one reads on past it */
	{
		int late = f->vr_seg[1].vs_off > f->vr_seg[0].vs_off;
		vr_seg *l = &f->vr_seg[late], *e = &f->vr_seg[!late];

		if (l->vs_valid && e->vs_valid && off + done > l->vs_off &&
		    (l->vs_aio || l->vs_len == DD_VR_HALF)) {
			(void)vr_seg_settle(f, NULL, !late);
			vr_seg_start(f, !late, l->vs_off + DD_VR_HALF);
		}
	}
	return 1;
}

/* Serves [off, off + len) from the window when it holds it, refilling the
 * window at off for a read that continues the last one.  1 when served
 * (*got set), 0 when the caller reads directly, or an error. */
static int vr_window_read(vr_file *f, dd_err *err, void *buf, size_t len,
			  uint64_t off, size_t *got)
{
	vr_dir *vd = vr_dir_of(f->vr_base.vf_dir);
	uint64_t gen = atomic_load(&vd->vd_gen);
	int rc = 0;

	if (len > DD_VR_HALF)
		return 0;
	pthread_mutex_lock(&f->vr_mu);
	if (f->vr_win && f->vr_win_gen != gen)
		vr_drop(f);
	if (f->vr_win) {
		rc = vr_serve(f, err, buf, len, off, got);
		if (rc)
			goto out;
	}
	if (off != f->vr_next && (!f->vr_win || vr_seg_find(f, off) < 0))
		goto out;   /* not in order: read what was asked only */
	if (!vr_borrow(vd, f))
		goto out;   /* every window busy: read what was asked only */
	vr_drop(f);
	f->vr_win_gen = gen;
	vr_seg_start(f, 0, off);
	vr_seg_start(f, 1, off + DD_VR_HALF);
	rc = vr_serve(f, err, buf, len, off, got);
out:
	pthread_mutex_unlock(&f->vr_mu);
	return rc;
}

static int vr_pread(dd_vfile *vf, dd_err *err, void *buf, size_t len,
		    uint64_t off, size_t *got)
{
	vr_file *f = (vr_file *)vf;
	int rc = vr_window_read(f, err, buf, len, off, got);

	if (rc)
		return rc < 0 ? rc : 0;
	rc = vr_read(f, err, buf, len, off, got);
	if (!rc) {
		pthread_mutex_lock(&f->vr_mu);
		f->vr_next = off + *got;
		pthread_mutex_unlock(&f->vr_mu);
	}
	return rc;
}

static int vr_pwrite_full(dd_vfile *vf, dd_err *err, const void *buf,
			  size_t len, uint64_t off)
{
	vr_file *f = (vr_file *)vf;
	vr_dir *vd = vr_dir_of(vf->vf_dir);
	size_t done = 0;

	vr_changed(vd);
	while (done < len) {
		size_t n = len - done;
		int rc;

		if (n > DD_RADOS_IO_MAX)
			n = DD_RADOS_IO_MAX;
		rc = dd_rados_write(vd->vd_pool, err, f->vr_oid,
				    (const uint8_t *)buf + done, n, off + done);
		if (rc)
			return rc;
		done += n;
	}
	return 0;
}

static int vr_size(dd_vfile *vf, dd_err *err, uint64_t *size)
{
	vr_file *f = (vr_file *)vf;

	return dd_rados_stat(vr_dir_of(vf->vf_dir)->vd_pool, err, f->vr_oid,
			     size, NULL);
}

static int vr_truncate(dd_vfile *vf, dd_err *err, uint64_t len)
{
	vr_file *f = (vr_file *)vf;
	vr_dir *vd = vr_dir_of(vf->vf_dir);

	vr_changed(vd);
	return dd_rados_truncate(vd->vd_pool, err, f->vr_oid, len);
}

/* Durable on return of every write. */
static int vr_file_sync(dd_vfile *vf, dd_err *err)
{
	(void)vf;
	(void)err;
	return 0;
}

static void vr_writeback(dd_vfile *vf, uint64_t off, uint64_t len)
{
	(void)vf;
	(void)off;
	(void)len;
}

static int vr_drop_written(dd_vfile *vf, dd_err *err, uint64_t off,
			   uint64_t len, bool synced)
{
	(void)vf;
	(void)err;
	(void)off;
	(void)len;
	(void)synced;
	return 0;
}

/* The store-wide RADOS lock makes its holder the only appender. */
static int vr_lock(dd_vfile *vf, dd_err *err)
{
	(void)vf;
	(void)err;
	return 0;
}

static int vr_punch(dd_vfile *vf, dd_err *err, uint64_t off, uint64_t len)
{
	(void)off;
	(void)len;
	return dd_err_set(err, DD_ENOTSUP, "%s: a RADOS object cannot "
			  "punch holes", vf->vf_name);
}

/* ---- the directory ------------------------------------------------------------*/

static int vr_stat(dd_vdir *d, dd_err *err, const char *name, uint64_t *size)
{
	vr_dir *vd = vr_dir_of(d);
	char oid[DD_VR_OID_MAX];
	int rc = vr_oid(err, vd, name, oid, sizeof(oid));

	return rc ? rc : dd_rados_stat(vd->vd_pool, err, oid, size, NULL);
}

static int vr_unlink(dd_vdir *d, dd_err *err, const char *name)
{
	vr_dir *vd = vr_dir_of(d);
	char oid[DD_VR_OID_MAX];
	int rc = vr_oid(err, vd, name, oid, sizeof(oid));

	vr_changed(vd);
	return rc ? rc : dd_rados_remove(vd->vd_pool, err, oid);
}

static int vr_rename(dd_vdir *d, dd_err *err, const char *from,
		     const char *to, bool noreplace)
{
	vr_dir *vd = vr_dir_of(d);
	char a[DD_VR_OID_MAX], b[DD_VR_OID_MAX];
	uint8_t *buf = NULL;
	uint64_t size;
	size_t got;
	int rc = vr_oid(err, vd, from, a, sizeof(a));

	if (!rc)
		rc = vr_oid(err, vd, to, b, sizeof(b));
	if (!rc)
		rc = dd_rados_stat(vd->vd_pool, err, a, &size, NULL);
	if (!rc && size > DD_RADOS_IO_MAX)
		rc = dd_err_set(err, DD_ENOTSUP, "rados: rename %s: %llu bytes,"
				" more than one write holds", a,
				(unsigned long long)size);
	if (!rc && !(buf = dd_malloc(size ? (size_t)size : 1)))
		rc = dd_err_set(err, DD_ENOMEM, "out of memory");
	if (!rc)
		rc = dd_rados_read(vd->vd_pool, err, a, buf, (size_t)size, 0,
				   &got);
	if (!rc && got != size)
		rc = dd_err_set(err, DD_ECORRUPT, "rados: rename %s: it "
				"changed while it was copied", a);
	vr_changed(vd);
	if (!rc && noreplace) {
		rc = dd_rados_write_full_if(vd->vd_pool, err, b, buf, got, 0,
					    NULL);
		if (rc == DD_EBUSY)
			rc = dd_err_set(err, DD_EEXIST, "%s: exists", to);
	} else if (!rc) {
		rc = dd_rados_write_full(vd->vd_pool, err, b, buf, got);
	}
	if (!rc)
		rc = dd_rados_remove(vd->vd_pool, err, a);
	dd_free(buf);
	return rc;
}

static int vr_sync(dd_vdir *d, dd_err *err)
{
	(void)d;
	(void)err;
	return 0;
}

typedef struct vr_list {
	size_t vl_skip;           /* "DIR/" */
	dd_vdir_list_fn vl_fn;
	void *vl_arg;
} vr_list;

static int vr_list_one(void *arg, const char *oid)
{
	vr_list *vl = arg;

	return strchr(oid + vl->vl_skip, '/')
		       ? 0 : vl->vl_fn(vl->vl_arg, oid + vl->vl_skip);
}

static int vr_list_names(dd_vdir *d, dd_err *err, dd_vdir_list_fn fn,
			 void *arg)
{
	vr_dir *vd = vr_dir_of(d);
	char prefix[DD_VR_DIR_MAX + 1];
	vr_list vl = { strlen(vd->vd_dir) + 1, fn, arg };

	snprintf(prefix, sizeof(prefix), "%s/", vd->vd_dir);
	return dd_rados_list(vd->vd_pool, err, prefix, vr_list_one, &vl);
}

static void vr_close(dd_vdir *d)
{
	vr_dir *vd = vr_dir_of(d);

	for (int i = 0; i < DD_VR_WINDOWS; i++)
		dd_free(vd->vd_buf[i]);
	pthread_mutex_destroy(&vd->vd_mu);
	dd_free(vd);
}

static const dd_vdir_ops vr_ops = {
	.local = false,
	.open_file = vr_open_file,
	.stat = vr_stat,
	.unlink = vr_unlink,
	.rename = vr_rename,
	.sync = vr_sync,
	.list = vr_list_names,
	.close = vr_close,
	.file_close = vr_file_close,
	.pread = vr_pread,
	.pwrite_full = vr_pwrite_full,
	.size = vr_size,
	.truncate = vr_truncate,
	.file_sync = vr_file_sync,
	.writeback = vr_writeback,
	.drop_written = vr_drop_written,
	.lock = vr_lock,
	.punch = vr_punch,
};

int dd_rados_vdir_open(struct dd_vdir **out, dd_err *err, dd_rados_pool *p,
		       const char *dir)
{
	vr_dir *vd;
	int rc;

	if (!p || strlen(dir) >= DD_VR_DIR_MAX || !dir[0])
		return dd_err_set(err, DD_EINVAL, "rados: bad directory");
	vd = dd_calloc(1, sizeof(*vd));
	if (!vd)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	vd->vd_pool = p;
	pthread_mutex_init(&vd->vd_mu, NULL);
	snprintf(vd->vd_dir, sizeof(vd->vd_dir), "%s", dir);
	rc = dd_vdir_new(out, err, &vr_ops, vd);
	if (rc) {
		pthread_mutex_destroy(&vd->vd_mu);
		dd_free(vd);
	}
	return rc;
}
