/*
 * repair.c -- rebuilding the catalog from the packs and the manifests
 * (format/store.md §9).
 *
 * With the store to itself (STORE/lock exclusive), a new LMDB environment is built in STORE/
 * db.repair, in three passes, then swapped in for STORE/db:
 *
 *   1. packs, by id: every record header (with opts->verify, every
 *      payload decompressed and hashed too) gives a DDT entry, the first
 *      good copy of a hash winning (without verify, a hash that several
 *      records hold is settled by reading those records: the first that
 *      decodes to it wins); damage inside a pack is skipped to
 *      the next record that decodes (dd_pack_find_record); a pack whose
 *      file header is unreadable is moved aside.  The pack table gets each
 *      pack's end after its last good record.
 *   2. manifests, by id: each verified one (others are moved aside)
 *      becomes a snapshot; its blocks become its block map and one
 *      reference each.  A block no pack holds gets a DD_DDE_MISSING entry
 *      (format/ddt.md §3), so the snapshot is restored with its lost
 *      blocks marked.
 *   3. meta: the options and identity from DEDUP, pack.next and snap.next
 *      past every id any file uses.
 *
 * Nothing of the store is read from the old catalog, so a missing, damaged
 * or older one makes no difference; the result depends only on the files,
 * so a second repair gives the same catalog.  The new environment is not
 * synced commit by commit (nobody reads it) but once, whole, before the
 * swap: renameat2(RENAME_EXCHANGE) of db.repair and db, then a sync of the
 * store directory.  A crash before the swap leaves the old catalog and a
 * db.repair the next repair removes; after it, the new catalog.
 *
 * Variants (format/ddt.md §2) are kept as the manifests name them: in a
 * SHA-256 store a variant other than 0 is a second copy stored beside a
 * damaged one in verify mode, and every copy with the right hash is the
 * block, so each variant's entry points at the copy pass 1 chose.  A store
 * keyed by the test hash cannot be repaired: its records do not say which
 * variant they are.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/io.h"
#include "store/manifest.h"
#include "store/rstore.h"
#include "store/store_internal.h"

#define DD_REPAIR_DIR "db.repair"
/* Catalog changes per transaction of the new environment: bounds the
 * dirty pages LMDB holds in RAM. */
#define DD_REPAIR_BATCH 8192

typedef struct dd_repair {
	const char *rp_path;
	dd_err *rp_err;
	dd_repair_opts rp_opts;
	dd_repair_result rp_res;
	dd_store_conf rp_conf;
	int rp_lockfd;
	dd_vdir *rp_packdir, *rp_mfdir;
	/* a RADOS store's catalog rebuilt by a reader (dd_repair_catalog):
	 * nothing in the pool is moved aside or removed, and the directories
	 * are the caller's */
	bool rp_keep;
	dd_db *rp_db;
	dd_txn *rp_txn;
	uint64_t rp_ops;          /* changes in the open transaction */
	uint64_t rp_pack_next;    /* past every pack id seen */
	uint64_t rp_snap_next;    /* past every manifest id seen */
	uint64_t rp_walked, rp_total; /* pack bytes, for progress */
	/* pass 1, the pack being walked */
	uint32_t rp_pack_id;
	char rp_pack_name[16];
	dd_scratch rp_sc;         /* verify: decompress and hash */
	int rp_cb_rc;             /* what stopped a walk from the callback */
	/* without verify: the second and later copies of a hash, for
	 * dd_repair_settle_copies */
	struct dd_repair_copy *rp_copies;
	size_t rp_ncopies, rp_copies_cap;
	/* pass 2, the snapshot being restored */
	uint64_t rp_first_missing;
	uint64_t rp_nmissing;
} dd_repair;

/* Codes that say the bytes read are damaged -- what repair goes on past;
 * any other failure (I/O, memory) stops it with the store as it was. */
static bool dd_is_damage(int rc)
{
	return rc == DD_ECORRUPT || rc == DD_ECHECKSUM || rc == DD_EVERSION ||
	       rc == DD_ENOTSUP;
}

static void dd_repair_note(dd_repair *rp, int kind, const char *name,
			   uint64_t offset, uint64_t length, const dd_err *e)
{
	dd_repair_event ev = {kind, name, offset, length,
			      e ? e->de_code : 0, e ? e->de_msg : ""};

	if (rp->rp_opts.report)
		rp->rp_opts.report(rp->rp_opts.report_ctx, &ev);
}

/* The store's longest block: its block size, or four times the average
 * for content-defined blocks. */
static uint32_t dd_repair_block_max(const dd_repair *rp)
{
	return dd_chunker_max((int)rp->rp_conf.sc_opt[DD_STORE_OPT_CHUNKER],
			      (uint32_t)rp->rp_conf.sc_opt[0]);
}

/* Commits and begins again every DD_REPAIR_BATCH changes. */
static int dd_repair_tick(dd_repair *rp)
{
	int rc;

	if (++rp->rp_ops < DD_REPAIR_BATCH)
		return 0;
	rc = dd_txn_commit(rp->rp_txn, rp->rp_err);
	rp->rp_txn = NULL;
	rp->rp_ops = 0;
	if (!rc)
		rc = dd_txn_begin(rp->rp_db, rp->rp_err, true, &rp->rp_txn);
	return rc;
}

/* ---- files and directories --------------------------------------------------*/

/* Removes a directory of plain files (an LMDB environment). */
static int dd_remove_flat_dir(dd_err *err, const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	int rc = 0;

	if (!d)
		return errno == ENOENT ? 0
				       : dd_err_set_errno(err, errno, "%s", path);
	while (!rc && (de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		rc = dd_io_unlinkat(err, dirfd(d), de->d_name, 0);
	}
	closedir(d);
	if (!rc && rmdir(path) != 0)
		rc = dd_err_set_errno(err, errno, "remove %s", path);
	return rc;
}

/* The sorted ids of a directory's names that parse, and the largest. */
typedef int (*dd_name_parse_fn)(const char *name, uint64_t *id, int *state);

static int dd_pack_parse_name(const char *name, uint64_t *id, int *state)
{
	char *end;
	unsigned long v;

	if (strlen(name) != 13 || strcmp(name + 8, ".pack"))
		return 0;
	errno = 0;
	v = strtoul(name, &end, 16);
	if (errno || end != name + 8 || v == 0 || v > UINT32_MAX)
		return 0;
	*id = v;
	*state = 0;
	return 1;
}

static int dd_u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* A listing's ids, as dd_list_ids gathers them. */
struct dd_id_list {
	dd_err *il_err;
	dd_name_parse_fn il_parse;
	int il_want;
	uint64_t *il_max;
	dd_idset il_set;
};

static int dd_list_id(void *arg, const char *name)
{
	struct dd_id_list *il = arg;
	uint64_t id;
	int state;

	if (!il->il_parse(name, &id, &state))
		return 0;
	if (id + 1 > *il->il_max)
		*il->il_max = id + 1;
	if (il->il_want >= 0 && state != il->il_want)
		return 0;
	return dd_idset_add(il->il_err, &il->il_set, id);
}

/* Ids in state `want` (or any state: -1) of directory dir, sorted;
 * *max gets one past the largest id of any state. */
static int dd_list_ids(dd_err *err, dd_vdir *dir, dd_name_parse_fn parse,
		       int want, uint64_t **out, size_t *n, uint64_t *max)
{
	struct dd_id_list il = {.il_err = err, .il_parse = parse,
				.il_want = want, .il_max = max};
	int rc = dd_vdir_list(dir, err, dd_list_id, &il);

	*out = il.il_set.is_ids;
	*n = il.il_set.is_n;
	if (rc) {
		dd_free(*out);
		*out = NULL;
		return rc;
	}
	if (*n)     /* no file, no array: qsort's must not be NULL */
		qsort(*out, *n, sizeof(uint64_t), dd_u64_cmp);
	return 0;
}

/* Moves a file the store cannot use aside (NAME.damaged), out of every
 * name the store reads, kept for whoever wants to look at it. */
static int dd_move_aside(dd_err *err, dd_vdir *dir, const char *name)
{
	char to[64];

	snprintf(to, sizeof(to), "%s.damaged", name);
	return dd_vdir_rename(dir, err, name, to, false);
}

/* The scratch of the verify pass and of pass 1b: a codec and the store's hasher. */
static int dd_repair_scratch(dd_repair *rp)
{
	const uint64_t *o = rp->rp_conf.sc_opt;

	return dd_scratch_init_for(&rp->rp_sc, rp->rp_err, (int)o[2],
				   (int)o[3], (int)o[4], dd_repair_block_max(rp));
}

/* ---- pass 1: packs -----------------------------------------------------------*/

/* Does this record's payload decode to bytes with its hash? */
static int dd_repair_verify_rec(dd_repair *rp, const dd_pack_rec *rec,
				const void *payload, dd_err *why)
{
	uint8_t got[DD_HASH_SIZE];
	int rc;

	dd_err_clear(why);
	rc = dd_codec_decompress(rp->rp_sc.sc_codec, why, rec, payload,
				 rp->rp_sc.sc_dbuf);
	if (rc && why->de_code != rc)
		dd_err_set(why, rc, "cannot decompress the record");
	if (rc)
		return rc;
	dd_hasher_sum(rp->rp_sc.sc_hasher, rp->rp_sc.sc_dbuf, rec->pr_lsize,
		      got);
	if (memcmp(got, rec->pr_hash, DD_HASH_SIZE))
		return dd_err_set(why, DD_ECHECKSUM, "block sha256 mismatch");
	return 0;
}

static int dd_repair_rec_add(dd_repair *rp, uint64_t offset,
			     const dd_pack_rec *rec, const void *payload);

/* A record holding a hash that an earlier record already gave a DDT
 * entry (format/pack.md §3 records: its place and header). */
typedef struct dd_repair_copy {
	uint32_t rc_pack;
	uint64_t rc_offset;
	dd_pack_rec rc_rec;
} dd_repair_copy;

static int dd_repair_copy_add(dd_repair *rp, uint64_t offset,
			      const dd_pack_rec *rec)
{
	if (rp->rp_ncopies == rp->rp_copies_cap) {
		size_t n = rp->rp_copies_cap ? 2 * rp->rp_copies_cap : 64;
		dd_repair_copy *c = dd_realloc(rp->rp_copies, n * sizeof(*c));

		if (!c)
			return dd_err_set(rp->rp_err, DD_ENOMEM,
					  "out of memory");
		rp->rp_copies = c;
		rp->rp_copies_cap = n;
	}
	rp->rp_copies[rp->rp_ncopies++] = (dd_repair_copy){
		.rc_pack = rp->rp_pack_id, .rc_offset = offset, .rc_rec = *rec};
	return 0;
}

/* The walk's callback; a failure of its own is told apart from the walk's
 * (damage to skip) by rp_cb_rc. */
static int dd_repair_rec(void *arg, uint64_t offset, const dd_pack_rec *rec,
			 const void *payload)
{
	dd_repair *rp = arg;

	rp->rp_cb_rc = dd_repair_rec_add(rp, offset, rec, payload);
	return rp->rp_cb_rc;
}

static int dd_repair_rec_add(dd_repair *rp, uint64_t offset,
			     const dd_pack_rec *rec, const void *payload)
{
	dd_ddt_key key = {.dk_variant = 0};
	dd_ddt_ent ent;
	int rc;

	rp->rp_walked += DD_PACK_REC_HDR_SIZE + rec->pr_psize;
	if (rp->rp_opts.progress &&
	    rp->rp_opts.progress(rp->rp_opts.progress_ctx, rp->rp_walked,
				 rp->rp_total))
		return dd_err_set(rp->rp_err, DD_ECANCELED,
				  "repair stopped by its progress callback");
	if (rec->pr_lsize > dd_repair_block_max(rp))
		return 0;  /* not a block of this store: never referenced */
	if (payload) {
		dd_err why;

		rc = dd_repair_verify_rec(rp, rec, payload, &why);
		if (rc && !dd_is_damage(rc))
			return dd_err_copy(rp->rp_err, &why);
		if (rc) {
			rp->rp_res.damaged_records++;
			rp->rp_res.damaged_bytes += DD_PACK_REC_HDR_SIZE +
						    rec->pr_psize;
			dd_repair_note(rp, DD_REPAIR_BAD_RECORDS,
				       rp->rp_pack_name, offset,
				       DD_PACK_REC_HDR_SIZE + rec->pr_psize,
				       &why);
			return 0;
		}
	}
	rp->rp_res.records++;
	memcpy(key.dk_hash, rec->pr_hash, DD_HASH_SIZE);
	rc = dd_ddt_get(rp->rp_txn, rp->rp_err, &key, &ent);
	if (rc == 0)          /* a second copy (gc, two writers, a heal) */
		return payload ? 0 : dd_repair_copy_add(rp, offset, rec);
	if (rc != DD_ENOENT)
		return rc;
	ent = (dd_ddt_ent){
		.de_codec = rec->pr_codec,
		.de_pack = rp->rp_pack_id,
		.de_offset = offset,
		.de_psize = rec->pr_psize,
		.de_lsize = rec->pr_lsize,
	};
	rc = dd_ddt_put(rp->rp_txn, rp->rp_err, &key, &ent);
	if (!rc)
		rp->rp_res.blocks++;
	return rc ? rc : dd_repair_tick(rp);
}

/* Walks pack id from its first record to its end, past damage. */
static int dd_repair_pack(dd_repair *rp, uint32_t id)
{
	uint64_t off = DD_PACK_FILE_HDR_SIZE, end = off, last_good = off;
	dd_pack *p;
	dd_err e;
	int rc;

	rp->rp_pack_id = id;
	dd_pack_name(rp->rp_pack_name, sizeof(rp->rp_pack_name), id);
	rc = dd_pack_open(&p, &e, rp->rp_packdir, id, 0);
	if (rc && !dd_is_damage(rc))
		return dd_err_copy(rp->rp_err, &e);
	if (rc) {
		rp->rp_res.damaged_packs++;
		dd_repair_note(rp, DD_REPAIR_BAD_PACK, rp->rp_pack_name, 0, 0,
			       &e);
		return rp->rp_keep ? 0 : dd_move_aside(rp->rp_err,
						       rp->rp_packdir,
						       rp->rp_pack_name);
	}
	rp->rp_res.packs++;
	for (;;) {
		uint64_t next;

		rc = dd_pack_walk_from(p, &e, off, rp->rp_opts.verify,
				       dd_repair_rec, rp, &end);
		if (end > off)
			last_good = end;
		if (rc == 0)
			break;
		if (rp->rp_cb_rc)
			goto out;          /* rp_err says why */
		if (!dd_is_damage(rc)) {
			dd_err_copy(rp->rp_err, &e);
			goto out;
		}
		rc = dd_pack_find_record(p, rp->rp_err, end + 1, &next);
		if (rc < 0)
			goto out;
		/* damage between two good records; a torn last record (a
		 * writer that died) has nothing after it and is no damage */
		if (rc == 1) {
			rp->rp_res.damaged_records++;
			rp->rp_res.damaged_bytes += next - end;
			dd_repair_note(rp, DD_REPAIR_BAD_RECORDS,
				       rp->rp_pack_name, end, next - end, &e);
			off = next;
			continue;
		}
		rc = 0;
		break;
	}
	/* a record that was skipped stays where it is: the pack's end is
	 * after its last good one */
	rc = dd_packs_put(rp->rp_txn, rp->rp_err, id, last_good);
	if (!rc)
		rc = dd_repair_tick(rp);
out:
	dd_pack_close(p);
	return rc;
}

static int dd_repair_packs(dd_repair *rp)
{
	uint64_t *ids = NULL, max = 1;
	size_t n = 0;
	int rc = dd_list_ids(rp->rp_err, rp->rp_packdir, dd_pack_parse_name,
			     -1, &ids, &n, &max);

	rp->rp_pack_next = max;
	for (size_t i = 0; !rc && i < n; i++) {
		char name[16];
		uint64_t size;

		dd_pack_name(name, sizeof(name), (uint32_t)ids[i]);
		if (dd_vdir_stat(rp->rp_packdir, NULL, name, &size) == 0)
			rp->rp_total += size;
	}
	rp->rp_res.pack_bytes = rp->rp_total;
	for (size_t i = 0; !rc && i < n; i++)
		rc = dd_repair_pack(rp, (uint32_t)ids[i]);
	dd_free(ids);
	return rc;
}

/* ---- pass 1b: hashes held by several records ----------------------------------*/

/* 0 when the record at (pack, offset) reads and decodes to the bytes of
 * its hash; a damage code (dd_is_damage) when it does not, noted as a
 * damaged record; any other failure stops the repair. */
static int dd_repair_copy_check(dd_repair *rp, uint32_t pack, uint64_t off,
				const dd_pack_rec *expect)
{
	dd_pack *p = NULL;
	dd_pack_rec rec;
	char name[16];
	dd_err why;
	int rc = dd_pack_open(&p, &why, rp->rp_packdir, pack, 0);

	if (!rc)
		rc = dd_pack_read_rec(p, &why, off, expect, &rec,
				      rp->rp_sc.sc_rbuf, rp->rp_sc.sc_rbuf_len);
	if (!rc)
		rc = dd_repair_verify_rec(rp, &rec,
					  rp->rp_sc.sc_rbuf +
						  DD_PACK_REC_HDR_SIZE, &why);
	dd_pack_close(p);
	if (rc && !dd_is_damage(rc))
		return dd_err_copy(rp->rp_err, &why);
	if (rc) {
		dd_pack_name(name, sizeof(name), pack);
		rp->rp_res.damaged_records++;
		rp->rp_res.damaged_bytes += DD_PACK_REC_HDR_SIZE +
					    expect->pr_psize;
		dd_repair_note(rp, DD_REPAIR_BAD_RECORDS, name, off,
			       DD_PACK_REC_HDR_SIZE + expect->pr_psize, &why);
	}
	return rc;
}

static int dd_repair_copy_cmp(const void *a, const void *b)
{
	const dd_repair_copy *x = a, *y = b;
	int c = memcmp(x->rc_rec.pr_hash, y->rc_rec.pr_hash, DD_HASH_SIZE);

	if (c)
		return c;
	if (x->rc_pack != y->rc_pack)
		return x->rc_pack < y->rc_pack ? -1 : 1;
	return x->rc_offset < y->rc_offset ? -1 : x->rc_offset > y->rc_offset;
}

/* Without verify, pass 1 read record headers only and gave each hash the
 * first record holding it.  A hash held by several records (gc's copies,
 * two writers' race, a heal's fresh copy beside the damaged record it
 * replaced) may then point at the damaged one, and a healed block would
 * be lost again.  So each such hash's records are read, the chosen one
 * first, then the others in pack order, and the entry points at the first
 * that decodes to the hash (none: it stays, and reads fail as they would
 * have).  The work is in proportion to the extra copies, not the store. */
static int dd_repair_settle_copies(dd_repair *rp)
{
	int rc = 0;

	if (!rp->rp_ncopies)
		return 0;
	if (!rp->rp_sc.sc_codec)
		rc = dd_repair_scratch(rp);
	qsort(rp->rp_copies, rp->rp_ncopies, sizeof(*rp->rp_copies),
	      dd_repair_copy_cmp);
	for (size_t i = 0, j; !rc && i < rp->rp_ncopies; i = j) {
		const dd_repair_copy *c = &rp->rp_copies[i];
		dd_ddt_key key = {.dk_variant = 0};
		dd_pack_rec chosen;
		dd_ddt_ent ent;

		for (j = i + 1; j < rp->rp_ncopies &&
		     !memcmp(rp->rp_copies[j].rc_rec.pr_hash,
			     c->rc_rec.pr_hash, DD_HASH_SIZE); j++)
			;
		memcpy(key.dk_hash, c->rc_rec.pr_hash, DD_HASH_SIZE);
		rc = dd_ddt_get(rp->rp_txn, rp->rp_err, &key, &ent);
		if (rc)
			break;
		chosen = (dd_pack_rec){.pr_codec = ent.de_codec,
				       .pr_lsize = ent.de_lsize,
				       .pr_psize = ent.de_psize};
		memcpy(chosen.pr_hash, key.dk_hash, DD_HASH_SIZE);
		rc = dd_repair_copy_check(rp, ent.de_pack, ent.de_offset,
					  &chosen);
		for (size_t k = i; dd_is_damage(rc) && k < j; k++) {
			c = &rp->rp_copies[k];
			rc = dd_repair_copy_check(rp, c->rc_pack, c->rc_offset,
						  &c->rc_rec);
			if (rc)
				continue;
			ent.de_codec = c->rc_rec.pr_codec;
			ent.de_pack = c->rc_pack;
			ent.de_offset = c->rc_offset;
			ent.de_psize = c->rc_rec.pr_psize;
			ent.de_lsize = c->rc_rec.pr_lsize;
			rc = dd_ddt_put(rp->rp_txn, rp->rp_err, &key, &ent);
			if (!rc)
				rc = dd_repair_tick(rp);
		}
		if (dd_is_damage(rc))
			rc = 0;   /* no good copy: reads fail, scrub names it */
	}
	return rc;
}

/* ---- pass 2: manifests ------------------------------------------------------*/

/* One block of a manifest: its reference, and its block-map entry. */
static int dd_repair_block(dd_repair *rp, const dd_manifest_hdr *h,
			   const dd_manifest_ent *e)
{
	dd_ddt_key key;
	dd_ddt_ent ent;
	uint64_t bs = h->mh_block_size;
	bool var = h->mh_chunker != DD_CHUNKER_FIXED;
	/* content-defined blocks have their length and offset in the list */
	uint32_t lsize = var ? (uint32_t)e->me_len
			 : e->me_index + 1 == h->mh_blocks
				 ? (uint32_t)(h->mh_size - e->me_index * bs)
				 : (uint32_t)bs;
	uint64_t off = var ? e->me_off : e->me_index * bs;
	int rc;

	memcpy(key.dk_hash, e->me_hash, DD_HASH_SIZE);
	key.dk_variant = e->me_variant;
	rc = dd_ddt_get(rp->rp_txn, rp->rp_err, &key, &ent);
	if (rc == DD_ENOENT && key.dk_variant) {
		/* another copy of the block: where pass 1 found one */
		dd_ddt_key k0 = key;

		k0.dk_variant = 0;
		rc = dd_ddt_get(rp->rp_txn, rp->rp_err, &k0, &ent);
		if (rc == 0 && (ent.de_flags & DD_DDE_MISSING))
			rc = DD_ENOENT;
		if (rc == 0)
			ent.de_refcnt = 0;
	}
	if (rc == DD_ENOENT) {
		ent = (dd_ddt_ent){.de_flags = DD_DDE_MISSING,
				   .de_lsize = lsize};
		rp->rp_res.missing_blocks++;
		rc = 0;
	} else if (!rc && (ent.de_flags & DD_DDE_MISSING) == 0 &&
		   ent.de_lsize != lsize) {
		return dd_err_set(rp->rp_err, DD_ECORRUPT, "snapshot '%s', "
				  "block %llu: the pack record with its hash "
				  "holds %u bytes, the snapshot %u", h->mh_name,
				  (unsigned long long)e->me_index, ent.de_lsize,
				  lsize);
	}
	if (rc)
		return rc;
	if ((ent.de_flags & DD_DDE_MISSING) && !rp->rp_nmissing++)
		rp->rp_first_missing = off;
	ent.de_refcnt++;
	rc = dd_ddt_put(rp->rp_txn, rp->rp_err, &key, &ent);
	if (!rc)
		rc = dd_bmap_append_block(rp->rp_txn, rp->rp_err, h->mh_id,
					  e->me_index, off, lsize, &key);
	return rc ? rc : dd_repair_tick(rp);
}

/* A manifest that cannot be used: reported and moved aside. */
static int dd_repair_bad_manifest(dd_repair *rp, uint64_t id, const dd_err *e)
{
	char name[DD_MANIFEST_NAME_MAX];

	dd_manifest_name(name, id, DD_MANIFEST_SNAP);
	rp->rp_res.damaged_manifests++;
	dd_repair_note(rp, DD_REPAIR_BAD_MANIFEST, name, 0, 0, e);
	return rp->rp_keep ? 0 : dd_move_aside(rp->rp_err, rp->rp_mfdir, name);
}

static int dd_repair_manifest(dd_repair *rp, uint64_t id)
{
	dd_manifest_reader *mr = NULL;
	dd_manifest_hdr h;
	dd_manifest_ent e;
	dd_snap_rec rec, other;
	dd_err why;
	int rc;

	rc = dd_manifest_open_at(&mr, &why, rp->rp_mfdir, id, DD_MANIFEST_SNAP,
				 &h);
	if (rc && !dd_is_damage(rc))
		return dd_err_copy(rp->rp_err, &why);
	if (!rc && (h.mh_block_size != rp->rp_conf.sc_opt[0] ||
		    h.mh_hash_kind != rp->rp_conf.sc_opt[4] ||
		    (uint64_t)h.mh_chunker !=
			    rp->rp_conf.sc_opt[DD_STORE_OPT_CHUNKER]))
		rc = dd_err_set(&why, DD_ECORRUPT, "manifest of '%s': "
				"chunker %s, block size %u or hash %#x is not "
				"the store's", h.mh_name,
				dd_chunker_name(h.mh_chunker), h.mh_block_size,
				h.mh_hash_kind);
	/* dd_repair_dup_names kept one manifest a name, if the headers
	 * read then are the ones read now */
	if (!rc && dd_snap_get(rp->rp_txn, &why, h.mh_name, &other) == 0)
		rc = dd_err_set(&why, DD_ECORRUPT, "another manifest also "
				"names snapshot '%s'", h.mh_name);
	if (rc) {
		dd_manifest_read_close(mr);
		return dd_repair_bad_manifest(rp, id, &why);
	}
	rp->rp_nmissing = 0;
	while ((rc = dd_manifest_read_next(mr, rp->rp_err, &e)) == 1)
		if (!e.me_hole && (rc = dd_repair_block(rp, &h, &e)) != 0)
			break;
	dd_manifest_read_close(mr);
	if (rc)
		return rc;
	dd_manifest_snap_rec(&rec, &h);
	rc = dd_snap_put(rp->rp_txn, rp->rp_err, h.mh_name, &rec);
	if (rc)
		return rc;
	rp->rp_res.snapshots++;
	if (rp->rp_nmissing) {
		dd_err m;

		dd_err_set(&m, DD_ECORRUPT, "snapshot '%s' lacks %llu blocks, "
			   "the first at byte %llu", h.mh_name,
			   (unsigned long long)rp->rp_nmissing,
			   (unsigned long long)rp->rp_first_missing);
		rp->rp_res.incomplete_snapshots++;
		dd_repair_note(rp, DD_REPAIR_INCOMPLETE, h.mh_name,
			       rp->rp_first_missing, rp->rp_nmissing, &m);
	}
	return dd_repair_tick(rp);
}

/* Two manifests naming one snapshot: the later one (higher id) is the
 * snapshot, the other is moved aside.  A pass over the headers first, as
 * the block maps must then be appended in id order. */
static int dd_repair_dup_names(dd_repair *rp, uint64_t *ids, size_t *n)
{
	dd_manifest_hdr *h = dd_calloc(*n ? *n : 1, sizeof(*h));
	size_t kept = 0;
	int rc = 0;

	if (!h)
		return dd_err_set(rp->rp_err, DD_ENOMEM, "out of memory");
	for (size_t i = 0; !rc && i < *n; i++) {
		/* a damaged one is refused by its full read, later */
		rc = dd_manifest_read_header_at(rp->rp_mfdir, rp->rp_err,
						ids[i], &h[i]);
		if (dd_is_damage(rc)) {
			h[i].mh_name[0] = 0;
			rc = 0;
		}
	}
	for (size_t i = 0; !rc && i < *n; i++) {
		bool later = false;

		for (size_t j = i + 1; h[i].mh_name[0] && !later && j < *n; j++)
			later = !strcmp(h[i].mh_name, h[j].mh_name);
		if (later) {
			dd_err why;

			dd_err_set(&why, DD_ECORRUPT, "a later manifest also "
				   "names snapshot '%s'", h[i].mh_name);
			rc = dd_repair_bad_manifest(rp, ids[i], &why);
		} else {
			ids[kept++] = ids[i];
		}
	}
	*n = kept;
	dd_free(h);
	return rc;
}

/* ID.del beside ID.snap: a deletion whose rename was cut short between
 * its two steps on RADOS (format/store.md §11): the later state counts. */
static int dd_repair_drop_deleted(dd_repair *rp, uint64_t *ids, size_t *n)
{
	uint64_t *del = NULL, max = 0;
	size_t ndel = 0, kept = 0, j = 0;
	int rc = dd_list_ids(rp->rp_err, rp->rp_mfdir, dd_manifest_parse_name,
			     DD_MANIFEST_DEL, &del, &ndel, &max);

	for (size_t i = 0; !rc && i < *n; i++) {
		while (j < ndel && del[j] < ids[i])
			j++;
		if (j == ndel || del[j] != ids[i])
			ids[kept++] = ids[i];
	}
	if (!rc)
		*n = kept;
	dd_free(del);
	return rc;
}

static int dd_repair_manifests(dd_repair *rp)
{
	uint64_t *ids = NULL, max = 1;
	size_t n = 0;
	int rc = dd_list_ids(rp->rp_err, rp->rp_mfdir, dd_manifest_parse_name,
			     DD_MANIFEST_SNAP, &ids, &n, &max);

	rp->rp_snap_next = max;
	if (!rc)
		rc = dd_repair_drop_deleted(rp, ids, &n);
	if (!rc)
		rc = dd_repair_dup_names(rp, ids, &n);
	/* in id order: block maps are appended (MDB_APPEND) */
	for (size_t i = 0; !rc && i < n; i++)
		rc = dd_repair_manifest(rp, ids[i]);
	dd_free(ids);
	return rc;
}

static int dd_repair_count_unref(void *arg, const dd_ddt_key *key,
				 const dd_ddt_ent *e)
{
	dd_repair *rp = arg;

	(void)key;
	if (e->de_refcnt == 0)
		rp->rp_res.unreferenced_blocks++;
	return 0;
}

/* ---- the whole -----------------------------------------------------------------*/

/* Builds STORE/db.repair, complete and durable. */
static int dd_repair_build(dd_repair *rp, const char *dir)
{
	int rc = dd_db_open_unsynced(&rp->rp_db, rp->rp_err, dir);

	/* block maps as the store keys them (format/store.md §4) */
	if (!rc && rp->rp_conf.sc_opt[DD_STORE_OPT_CHUNKER] != DD_CHUNKER_FIXED)
		dd_db_set_varblock(rp->rp_db, dd_repair_block_max(rp));
	if (!rc)
		rc = dd_txn_begin(rp->rp_db, rp->rp_err, true, &rp->rp_txn);
	if (!rc)
		rc = dd_repair_packs(rp);
	if (!rc)
		rc = dd_repair_settle_copies(rp);
	if (!rc)
		rc = dd_repair_manifests(rp);
	if (!rc)
		rc = dd_store_meta_init(rp->rp_txn, rp->rp_err, &rp->rp_conf,
					rp->rp_pack_next, rp->rp_snap_next);
	if (!rc)
		rc = dd_ddt_walk(rp->rp_txn, rp->rp_err, dd_repair_count_unref,
				 rp);
	if (!rc) {
		rc = dd_txn_commit(rp->rp_txn, rp->rp_err);
		rp->rp_txn = NULL;
	}
	if (!rc)
		rc = dd_db_sync(rp->rp_db, rp->rp_err);
	dd_txn_abort(rp->rp_txn);
	rp->rp_txn = NULL;
	dd_db_close(rp->rp_db);
	rp->rp_db = NULL;
	return rc;
}

/* db.repair becomes db in one rename; the old catalog, if any, is then
 * removed.  Manifests the old catalog was still catching up on (ID.del,
 * ID.tmp) are resolved by the new one: they go too. */
static int dd_repair_swap(dd_repair *rp, const char *fresh, const char *db)
{
	struct stat st;
	int rc, exists = stat(db, &st) == 0;
	int sfd = dd_io_open(rp->rp_err, rp->rp_path, O_RDONLY | O_DIRECTORY, 0);

	if (sfd < 0)
		return sfd;
	rc = dd_io_renameat(rp->rp_err, sfd, DD_REPAIR_DIR, "db",
			    exists ? RENAME_EXCHANGE : RENAME_NOREPLACE);
	if (!rc)
		rc = dd_io_fsync_dirfd(rp->rp_err, sfd, rp->rp_path);
	dd_io_close(sfd);
	if (rc)
		return rc;
	/* The repair is done.  What follows tidies up, and a failure of it
	 * is no failure of the repair: the next repair removes a leftover
	 * db.repair, the next writer's recovery the manifests. */
	if (exists)
		dd_remove_flat_dir(&(dd_err){0}, fresh);
	for (int st_ = DD_MANIFEST_TMP;
	     !rp->rp_keep && st_ <= DD_MANIFEST_DEL; st_++) {
		uint64_t *ids = NULL, max = 0;
		size_t n = 0;
		dd_err e;

		if (dd_list_ids(&e, rp->rp_mfdir, dd_manifest_parse_name, st_,
				&ids, &n, &max) != 0)
			continue;
		for (size_t i = 0; i < n; i++)
			dd_manifest_remove(rp->rp_mfdir, &e, ids[i], st_);
		dd_free(ids);
	}
	(void)dd_vdir_sync(rp->rp_mfdir, NULL);
	return 0;
}

/* The store to itself: STORE/lock exclusive, naming this process for
 * anyone refused meanwhile (lock.c). */
static int dd_repair_lock(dd_repair *rp)
{
	return dd_lock_take_at(rp->rp_err, rp->rp_path, "lock", true,
			       rp->rp_opts.wait_for_lock != 0,
			       rp->rp_opts.lock_timeout_ms, &rp->rp_lockfd);
}

static int dd_repair_open_dirs(dd_repair *rp)
{
	char p[4096];
	int rc;

	snprintf(p, sizeof(p), "%s/packs", rp->rp_path);
	rc = dd_vdir_open_local(&rp->rp_packdir, rp->rp_err, p);
	if (rc)
		return rc;
	snprintf(p, sizeof(p), "%s/" DD_MANIFEST_DIR, rp->rp_path);
	return dd_vdir_open_local(&rp->rp_mfdir, rp->rp_err, p);
}

/* The options and result structs of the caller, checked. */
static int dd_repair_setup(dd_repair *rp, const dd_repair_opts *opts,
			   const dd_repair_result *out)
{
	dd_err *err = rp->rp_err;

	if (out && out->version != DD_REPAIR_RESULT_VERSION)
		return dd_err_set(err, DD_EINVAL, "dd_repair_result version %u "
				  "not supported", out->version);
	rp->rp_opts = (dd_repair_opts)DD_REPAIR_OPTS_INIT;
	if (opts) {
		if (opts->version == 0 || opts->version > DD_REPAIR_OPTS_VERSION)
			return dd_err_set(err, DD_EINVAL, "dd_repair_opts "
					  "version %u not supported",
					  opts->version);
		if (opts->version == 1)   /* ends before lock_timeout_ms */
			memcpy(&rp->rp_opts, opts,
			       offsetof(dd_repair_opts, lock_timeout_ms));
		else
			rp->rp_opts = *opts;
		rp->rp_opts.version = DD_REPAIR_OPTS_VERSION;
	}
	rp->rp_res.version = DD_REPAIR_RESULT_VERSION;
	return 0;
}

/* The store's options read: can it be repaired?  Before its lock and its
 * directories: a store of format 1 has no manifests directory. */
static int dd_repair_can(dd_repair *rp)
{
	if (rp->rp_conf.sc_format < 2)
		return dd_err_set(rp->rp_err, DD_ENOTSUP, "%s: a store of "
				  "format 1 has no snapshot manifests to "
				  "repair from (a writer of this version "
				  "upgrades it while its catalog is sound)",
				  rp->rp_path);
	if (rp->rp_conf.sc_opt[4] != DD_HASH_SHA256)
		return dd_err_set(rp->rp_err, DD_ENOTSUP, "%s: repair needs a "
				  "store keyed by SHA-256 (this one uses the "
				  "test hash)", rp->rp_path);
	return 0;
}

/* With the store's options read, its lock taken and its directories
 * open: the new catalog built and swapped in. */
static int dd_repair_run(dd_repair *rp)
{
	const char *path = rp->rp_path;
	dd_err *err = rp->rp_err;
	char fresh[4096], db[4096];
	int rc = 0;

	if (rp->rp_opts.verify)
		rc = dd_repair_scratch(rp);
	snprintf(fresh, sizeof(fresh), "%s/" DD_REPAIR_DIR, path);
	snprintf(db, sizeof(db), "%s/db", path);
	/* a crashed repair's leftovers first */
	if (!rc)
		rc = dd_remove_flat_dir(err, fresh);
	if (!rc && mkdir(fresh, 0755) != 0)
		rc = dd_err_set_errno(err, errno, "mkdir %s", fresh);
	if (!rc)
		rc = dd_repair_build(rp, fresh);
	if (!rc)
		rc = dd_repair_swap(rp, fresh, db);
	else
		dd_remove_flat_dir(&(dd_err){0}, fresh);
	dd_scratch_fini(&rp->rp_sc);
	dd_free(rp->rp_copies);
	rp->rp_copies = NULL;
	return rc;
}

/* The whole of a repair of rp_path: its directories opened here unless
 * the caller gave them (a RADOS store's, dd_repair_catalog). */
static int dd_repair_whole(dd_repair *rp, const dd_repair_opts *opts,
			   dd_repair_result *out)
{
	bool own_dirs = !rp->rp_packdir;
	int rc = dd_repair_setup(rp, opts, out);

	if (!rc)
		rc = dd_store_conf_read(rp->rp_err, rp->rp_path, &rp->rp_conf);
	if (!rc)
		rc = dd_repair_can(rp);
	if (!rc)
		rc = dd_repair_lock(rp);
	if (!rc && own_dirs)
		rc = dd_repair_open_dirs(rp);
	if (!rc)
		rc = dd_repair_run(rp);
	if (own_dirs) {
		dd_vdir_close(rp->rp_mfdir);
		dd_vdir_close(rp->rp_packdir);
	}
	if (rp->rp_lockfd >= 0)
		dd_io_close(rp->rp_lockfd);   /* and the lock with it */
	if (!rc && out)
		*out = rp->rp_res;
	return rc;
}

int dd_repair_catalog(dd_err *err, const char *local, dd_vdir *packs,
		      dd_vdir *manifests, const dd_repair_opts *opts,
		      dd_repair_result *out)
{
	dd_repair rp = {.rp_path = local, .rp_err = err, .rp_lockfd = -1,
			.rp_packdir = packs, .rp_mfdir = manifests,
			.rp_keep = true};

	return dd_repair_whole(&rp, opts, out);
}

int dd_store_repair(const char *path, const dd_repair_opts *opts,
		    dd_repair_result *out)
{
	dd_err *err = dd_thread_err();
	dd_repair rp = {.rp_path = path, .rp_err = err, .rp_lockfd = -1};

	dd_err_clear(err);
	if (!path || !*path || strlen(path) > 3000)
		return dd_err_set(err, DD_EINVAL, "dd_store_repair: bad path");
	if (dd_rstore_is_spec(path))
		return dd_rstore_repair(err, path, opts, out);
	return dd_repair_whole(&rp, opts, out);
}
