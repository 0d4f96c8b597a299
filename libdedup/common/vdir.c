/*
 * vdir.c -- the backend-independent half of vdir.h: a dd_vdir is a
 * backend's ops table and its state, and every dd_vdir_* and dd_vfile_*
 * call is handed to the ops of the directory it belongs to.
 *
 * What is the same for every backend lives here once: the name check of
 * an open, the "short read" of dd_vfile_pread_full (worded as
 * dd_io_pread_full words it, so a local store's messages are what they
 * were before vdir) and the questions only a local directory can answer
 * (its fd, where its holes are), asked of vdir_local.c.
 */
#include <stdio.h>
#include <string.h>

#include <dedup.h>

#include "common/alloc.h"
#include "common/vdir.h"
#include "common/vdir_local.h"

struct dd_vdir {
	const dd_vdir_ops *vd_ops;
	void *vd_priv;
};

int dd_vdir_new(dd_vdir **out, dd_err *err, const dd_vdir_ops *ops,
		void *priv)
{
	dd_vdir *d;

	if (!out || !ops)
		return dd_err_set(err, DD_EINVAL, "dd_vdir_new: bad argument");
	/* on failure priv stays the caller's: there is no d to close */
	d = dd_calloc(1, sizeof(*d));
	if (!d)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	d->vd_ops = ops;
	d->vd_priv = priv;
	*out = d;
	return 0;
}

void *dd_vdir_priv(const dd_vdir *d)
{
	return d ? d->vd_priv : NULL;
}

void dd_vdir_close(dd_vdir *d)
{
	if (!d)
		return;
	d->vd_ops->close(d);
	dd_free(d);
}

bool dd_vdir_is_local(const dd_vdir *d)
{
	return d && d->vd_ops->local;
}

int dd_vdir_fd(const dd_vdir *d)
{
	return dd_vdir_is_local(d) ? dd_vdir_local_fd(d) : -1;
}

int dd_vdir_open_file(dd_vdir *d, dd_err *err, const char *name, int flags,
		      dd_vfile **out)
{
	if (!d || !name || !out)
		return dd_err_set(err, DD_EINVAL,
				  "dd_vdir_open_file: bad argument");
	/* every backend keeps the name in vf_name, for its messages */
	if (strlen(name) >= sizeof(((dd_vfile *)0)->vf_name))
		return dd_err_set(err, DD_EINVAL, "open %s: name too long",
				  name);
	return d->vd_ops->open_file(d, err, name, flags, out);
}

int dd_vdir_stat(dd_vdir *d, dd_err *err, const char *name, uint64_t *size)
{
	uint64_t dummy;

	if (!d || !name)
		return dd_err_set(err, DD_EINVAL, "dd_vdir_stat: bad argument");
	return d->vd_ops->stat(d, err, name, size ? size : &dummy);
}

int dd_vdir_unlink(dd_vdir *d, dd_err *err, const char *name)
{
	if (!d || !name)
		return dd_err_set(err, DD_EINVAL, "dd_vdir_unlink: bad argument");
	return d->vd_ops->unlink(d, err, name);
}

int dd_vdir_rename(dd_vdir *d, dd_err *err, const char *from, const char *to,
		   bool noreplace)
{
	if (!d || !from || !to)
		return dd_err_set(err, DD_EINVAL, "dd_vdir_rename: bad argument");
	return d->vd_ops->rename(d, err, from, to, noreplace);
}

int dd_vdir_sync(dd_vdir *d, dd_err *err)
{
	if (!d)
		return dd_err_set(err, DD_EINVAL, "dd_vdir_sync: no directory");
	return d->vd_ops->sync(d, err);
}

int dd_vdir_list(dd_vdir *d, dd_err *err, dd_vdir_list_fn fn, void *arg)
{
	if (!d || !fn)
		return dd_err_set(err, DD_EINVAL, "dd_vdir_list: bad argument");
	return d->vd_ops->list(d, err, fn, arg);
}

/* ---- files -----------------------------------------------------------------*/

void dd_vfile_close(dd_vfile *f)
{
	if (f)
		f->vf_dir->vd_ops->file_close(f);
}

const char *dd_vfile_name(const dd_vfile *f)
{
	return f->vf_name;
}

int dd_vfile_pread(dd_vfile *f, dd_err *err, void *buf, size_t len,
		   uint64_t off, size_t *got)
{
	size_t dummy;

	return f->vf_dir->vd_ops->pread(f, err, buf, len, off,
					got ? got : &dummy);
}

int dd_vfile_pread_full(dd_vfile *f, dd_err *err, void *buf, size_t len,
			uint64_t off)
{
	size_t got = 0;
	int rc;

	/* One call: a backend's pread returns short only at the end of the
	 * file (local: dd_io_pread reads on to len or EOF), and a second
	 * call would count twice against the injected faults. */
	rc = f->vf_dir->vd_ops->pread(f, err, buf, len, off, &got);
	if (rc)
		return rc;
	if (got < len)
		/* a file shorter than its index says is damage, not I/O */
		return dd_err_set(err, DD_ECORRUPT,
				  "short read %s at offset %llu: %zu of %zu bytes",
				  f->vf_name, (unsigned long long)off, got,
				  len);
	return 0;
}

int dd_vfile_pwrite_full(dd_vfile *f, dd_err *err, const void *buf,
			 size_t len, uint64_t off)
{
	return f->vf_dir->vd_ops->pwrite_full(f, err, buf, len, off);
}

int dd_vfile_size(dd_vfile *f, dd_err *err, uint64_t *size)
{
	return f->vf_dir->vd_ops->size(f, err, size);
}

int dd_vfile_truncate(dd_vfile *f, dd_err *err, uint64_t len)
{
	return f->vf_dir->vd_ops->truncate(f, err, len);
}

int dd_vfile_sync(dd_vfile *f, dd_err *err)
{
	return f->vf_dir->vd_ops->file_sync(f, err);
}

void dd_vfile_writeback(dd_vfile *f, uint64_t off, uint64_t len)
{
	f->vf_dir->vd_ops->writeback(f, off, len);
}

int dd_vfile_drop_written(dd_vfile *f, dd_err *err, uint64_t off,
			  uint64_t len, bool synced)
{
	return f->vf_dir->vd_ops->drop_written(f, err, off, len, synced);
}

int dd_vfile_lock(dd_vfile *f, dd_err *err)
{
	return f->vf_dir->vd_ops->lock(f, err);
}

int dd_vfile_punch(dd_vfile *f, dd_err *err, uint64_t off, uint64_t len)
{
	return f->vf_dir->vd_ops->punch(f, err, off, len);
}

int dd_vfile_seek_data(dd_vfile *f, uint64_t off, uint64_t *data)
{
	/* elsewhere no hole is known: every byte may be data */
	if (dd_vdir_is_local(f->vf_dir))
		return dd_vfile_local_seek_data(f, off, data);
	*data = off;
	return 0;
}
