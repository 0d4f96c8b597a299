/*
 * prune.c -- retention rules applied to a store (dd_prune, `dedup
 * prune`): list, select (prune/select.c), delete.
 *
 * The selection sees the committed snapshots of one read transaction,
 * ordered by commit time and, for equal times, by snapshot id -- ids
 * grow with every writer begun, so the later of two snapshots committed
 * in the same second counts as the newer.  Each deletion is a
 * dd_snapshot_delete of its own, so each keeps the commit protocol of
 * format/manifest.md §7 (the manifest renamed first) on its own: a crash or an error between two deletions
 * leaves a store where some went and the rest did not, each whole.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "store/store_internal.h"

typedef struct dd_prune_snap {
	dd_prune_entry ps_ent;
	uint64_t ps_id;
} dd_prune_snap;

typedef struct dd_prune_list {
	dd_err *pl_err;
	const char *pl_prefix;
	size_t pl_prefix_len;
	dd_prune_snap *pl_snap;
	size_t pl_n, pl_cap;
} dd_prune_list;

static int dd_prune_collect(void *arg, const char *name, const dd_snap_rec *r)
{
	dd_prune_list *pl = arg;
	dd_prune_snap *ps;

	if (strncmp(name, pl->pl_prefix, pl->pl_prefix_len) != 0)
		return 0;
	if (pl->pl_n == pl->pl_cap) {
		size_t cap = pl->pl_cap ? pl->pl_cap * 2 : 16;
		dd_prune_snap *ns = dd_realloc(pl->pl_snap, cap * sizeof(*ns));

		if (!ns)
			return dd_err_set(pl->pl_err, DD_ENOMEM, "out of memory");
		pl->pl_snap = ns;
		pl->pl_cap = cap;
	}
	ps = &pl->pl_snap[pl->pl_n++];
	memset(ps, 0, sizeof(*ps));
	strncpy(ps->ps_ent.name, name, DD_NAME_MAX);
	ps->ps_ent.ctime = r->sr_ctime;
	ps->ps_id = r->sr_id;
	return 0;
}

/* Newest first: by time, then by id. */
static int dd_prune_snap_cmp(const void *pa, const void *pb)
{
	const dd_prune_snap *a = pa, *b = pb;

	if (a->ps_ent.ctime != b->ps_ent.ctime)
		return a->ps_ent.ctime > b->ps_ent.ctime ? -1 : 1;
	return a->ps_id > b->ps_id ? -1 : a->ps_id < b->ps_id;
}

/* Lists and marks the snapshots, newest first. */
static int dd_prune_plan(dd_store *s, dd_err *err, const dd_prune_opts *opts,
			 dd_prune_list *pl)
{
	dd_prune_mark *marks = NULL;
	int64_t *times = NULL;
	dd_txn *txn;
	size_t i, n;
	int rc = dd_commit_check(s, err);

	if (!rc)
		rc = dd_txn_begin(s->st_db, err, false, &txn);
	if (rc)
		return rc;
	rc = dd_store_snap_walk(s, err, txn, dd_prune_collect, pl);
	dd_txn_abort(txn);
	if (rc)
		return rc;
	n = pl->pl_n;
	if (n > 1)
		qsort(pl->pl_snap, n, sizeof(*pl->pl_snap), dd_prune_snap_cmp);
	if (n) {
		times = dd_malloc(n * sizeof(*times));
		marks = dd_malloc(n * sizeof(*marks));
		if (!times || !marks) {
			rc = dd_err_set(err, DD_ENOMEM, "out of memory");
			goto out;
		}
	}
	/* dd_prune_select takes the later of equal times as the newer:
	 * oldest first */
	for (i = 0; i < n; i++)
		times[i] = pl->pl_snap[n - 1 - i].ps_ent.ctime;
	rc = dd_prune_select(opts, times, n, marks);
	if (rc) {
		dd_err_set_msg(err, rc, dd_last_errmsg());
		goto out;
	}
	for (i = 0; i < n; i++)
		pl->pl_snap[n - 1 - i].ps_ent.mark = marks[i];
out:
	dd_free(times);
	dd_free(marks);
	return rc;
}

/* Deletes the unmarked ones, oldest first. */
static int dd_prune_delete(dd_store *s, dd_err *err, const dd_prune_list *pl)
{
	size_t todo = 0, done = 0;
	int rc;

	for (size_t i = 0; i < pl->pl_n; i++)
		todo += pl->pl_snap[i].ps_ent.mark.rule == DD_PRUNE_NONE;
	for (size_t i = pl->pl_n; i-- > 0;) {
		const dd_prune_entry *e = &pl->pl_snap[i].ps_ent;

		if (e->mark.rule != DD_PRUNE_NONE)
			continue;
		rc = dd_snapshot_delete(s, e->name);
		if (rc == DD_ENOENT)
			rc = 0;       /* deleted meanwhile: gone all the same */
		if (rc) {
			char what[DD_NAME_MAX + 80];

			dd_err_set_msg(err, rc, dd_store_errmsg(s));
			snprintf(what, sizeof(what), "prune: %zu of %zu deleted, "
				 "then '%s'", done, todo, e->name);
			return dd_err_wrap(err, rc, what, NULL);
		}
		done++;
	}
	return 0;
}

int dd_prune(dd_store *s, const dd_prune_opts *opts, dd_prune_entry **out,
	     size_t *count)
{
	dd_err err = {0};
	dd_prune_list pl = {.pl_err = &err, .pl_prefix = ""};
	dd_prune_entry *list = NULL;
	int rc;

	if (!s || !opts || !out || !count)
		return s ? dd_store_failf(s, DD_EINVAL, "dd_prune: NULL "
					  "argument") : DD_EINVAL;
	if (opts->version == 0 || opts->version > DD_PRUNE_OPTS_VERSION)
		return dd_store_failf(s, DD_EINVAL, "dd_prune_opts version %u "
				      "not supported (use DD_PRUNE_OPTS_INIT)",
				      opts->version);
	if (opts->prefix)
		pl.pl_prefix = opts->prefix;
	pl.pl_prefix_len = strlen(pl.pl_prefix);
	rc = dd_prune_plan(s, &err, opts, &pl);
	/* the list before the deletions: nothing can fail after them */
	if (!rc && pl.pl_n) {
		list = dd_malloc(pl.pl_n * sizeof(*list));
		if (!list)
			rc = dd_err_set(&err, DD_ENOMEM, "out of memory");
		for (size_t i = 0; list && i < pl.pl_n; i++)
			list[i] = pl.pl_snap[i].ps_ent;
	}
	if (!rc && !opts->dry_run)
		rc = dd_prune_delete(s, &err, &pl);
	dd_free(pl.pl_snap);
	if (rc) {
		dd_free(list);
		return dd_store_fail(s, &err);
	}
	*out = list;
	*count = pl.pl_n;
	return 0;
}

void dd_prune_free(dd_prune_entry *list)
{
	dd_free(list);
}
