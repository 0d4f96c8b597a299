/*
 * rstore.h -- a store in a RADOS pool (`rados:POOL/NAME`, issue #15;
 * docs/design.md "Stores in a RADOS pool").
 *
 * The pool holds the store's truth: its DEDUP object, its packs and its
 * manifests (objects "packs/NAME", "manifests/NAME": rados/vdir_rados.c).
 * Each machine keeps a local catalog, an ordinary store directory at
 * $DEDUP_CACHE_DIR/<uuid>/ (default ${XDG_CACHE_HOME:-~/.cache}/libdedup)
 * whose catalog indexes the pool's packs and manifests, built from them
 * as `dedup repair` builds one.
 *
 * Who changes the store holds the store-wide lock, the RADOS lock on the
 * object "lock": exclusive, taken for DD_RSTORE_LOCK_S seconds and renewed
 * by a keeper thread, so a dead holder's claim runs out.  Changes are
 * counted in the object "gen": "SEQ CATALOG", CATALOG the id of the
 * local catalog that made change SEQ.  A change session (dd_rstore_enter
 * .. dd_rstore_leave) raises SEQ from even S to S + 1 as it starts and to
 * S + 2 as it ends; each local catalog records in STORE/rados.gen the SEQ
 * it is consistent with.  A catalog is current when gen says that SEQ, or
 * that SEQ + 1 by itself (its own session running, or cut short: its own
 * recovery handles that as for a local store).  Otherwise another machine
 * changed the store: at open the catalog is rebuilt from the pool, and a
 * handle opened before that change cannot enter (DD_EBUSY: open again).
 */
#ifndef DD_STORE_RSTORE_H
#define DD_STORE_RSTORE_H

#include <stdbool.h>

#include "dedup.h"
#include "common/err.h"
#include "common/vdir.h"

typedef struct dd_rstore dd_rstore;

/* Seconds a holder's claim lasts without renewal. */
#define DD_RSTORE_LOCK_S 30u

bool dd_rstore_is_spec(const char *path);

/* Opens the store named spec: its local catalog directory made and, with
 * catch_up, brought up to date (rebuilt when another machine changed the
 * store).  create: for a new store with these options
 * instead (DD_EEXIST when spec holds one): only the local directory is
 * made, empty, for dd_store_create to fill, then dd_rstore_publish. */
struct dd_store_conf;
int dd_rstore_open(dd_rstore **out, dd_err *err, const char *spec,
		   const struct dd_store_conf *create, bool catch_up);
void dd_rstore_close(dd_rstore *rs);   /* NULL is fine */
/* create, once the local store in dd_rstore_local is made: the pool's
 * DEDUP object (the store exists from then on) and gen. */
int dd_rstore_publish(dd_rstore *rs, dd_err *err);

/* dedup repair of a RADOS store: the local catalog rebuilt from the pool
 * (damaged objects are skipped, never moved aside: format/store.md §11). */
int dd_rstore_repair(dd_err *err, const char *spec,
		     const dd_repair_opts *opts, dd_repair_result *out);

/* The local catalog directory: the store path the rest of store/ uses. */
const char *dd_rstore_local(const dd_rstore *rs);
const char *dd_rstore_spec(const dd_rstore *rs);
/* New vdirs of the pool's packs and manifests (closed by the caller). */
int dd_rstore_vdirs(dd_rstore *rs, dd_err *err, dd_vdir **packs,
		    dd_vdir **manifests);

/* The store-wide lock and the change count, around every change (counted:
 * nested enters of one handle share one session).  wait_ms: how long to
 * wait for another holder. */
int dd_rstore_enter(dd_rstore *rs, dd_err *err, unsigned wait_ms);
/* Before the step that commits (a manifest published): DD_EBUSY "lock
 * lost" once the keeper could not renew the lock. */
int dd_rstore_check(dd_rstore *rs, dd_err *err);
void dd_rstore_leave(dd_rstore *rs);

#endif
