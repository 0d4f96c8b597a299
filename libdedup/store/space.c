/*
 * space.c -- giving space back when the file system is full
 * (format/pack.md §6.1, format/store.md §1 "reserve").
 *
 * gc rewrites a pack by copying its live records into a new one, which
 * needs room for the copy first.  When there is none (DD_ENOSPC), or a
 * pack is kept as it is (mostly live, held, or holding a damaged live
 * block), gc punches its dead records out in place instead: after its
 * commit has deleted their DDT entries -- so no writer can take them
 * again -- and once no reader older than that commit is left, the
 * ranges of a pack's records that no DDT entry names are handed back
 * with fallocate(PUNCH_HOLE).  The file keeps its size, the ranges read
 * as zeros, and pack walks step over them; a later gc rewrites the pack
 * (compaction) when its live fraction falls below the threshold and
 * there is room.
 *
 * A catalog commit needs free pages too, and on a file system at 100% the
 * LMDB file cannot grow: STORE/reserve, a file of DD_RESERVE_BYTES
 * allocated blocks, is removed by rm or gc when a commit fails for lack
 * of space, and the commit retried; gc makes it again once it has
 * freed space.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "store/store_internal.h"

/* A record walked, its range to punch growing while records are dead. */
struct dd_punch {
	dd_txn *pu_txn;
	dd_pack *pu_pack;
	uint64_t pu_limit;       /* the committed end */
	uint64_t pu_from;        /* start of the dead run, or 0 */
	uint64_t pu_to;          /* its end */
	uint64_t pu_punched;
	dd_err *pu_err;
	int pu_rc;               /* a punch that failed */
};

static int dd_punch_flush(struct dd_punch *pu)
{
	int rc;

	if (pu->pu_to <= pu->pu_from)
		return 0;
	rc = dd_pack_punch(pu->pu_pack, pu->pu_err, pu->pu_from,
			   pu->pu_to - pu->pu_from);
	if (!rc)
		pu->pu_punched += pu->pu_to - pu->pu_from;
	pu->pu_from = pu->pu_to = 0;
	return rc;
}

static int dd_punch_rec(void *ctx, uint64_t off, const dd_pack_rec *rec,
			const void *payload)
{
	struct dd_punch *pu = ctx;
	uint64_t end = off + DD_PACK_REC_HDR_SIZE + rec->pr_psize;
	bool named;

	dd_ddt_ent ent;
	int rc;

	(void)payload;
	if (end > pu->pu_limit)
		return 1;   /* past the committed end: a writer's, or a tail */
	/* a lookup that fails (a damaged entry) punches nothing more */
	rc = dd_ddt_find_record(pu->pu_txn, pu->pu_err, rec->pr_hash,
				dd_pack_id(pu->pu_pack), off, &ent);
	if (rc && rc != DD_ENOENT) {
		pu->pu_rc = rc;
		return 1;
	}
	named = rc == 0;
	if (named || pu->pu_to != off) {
		/* a live record, or a gap (punched before) ends the run */
		pu->pu_rc = dd_punch_flush(pu);
		if (pu->pu_rc)
			return 1;
		if (named)
			return 0;
		pu->pu_from = off;
	}
	pu->pu_to = end;
	return 0;
}

int dd_space_punch_pack(dd_store *s, dd_err *err, dd_pack *p,
			uint64_t *punched)
{
	struct dd_punch pu = {.pu_pack = p, .pu_err = err};
	dd_err walk_err = {0};
	uint64_t oldest;
	int rc = dd_txn_begin(s->st_db, err, false, &pu.pu_txn);

	*punched = 0;
	if (rc)
		return rc;
	/* what is unnamed is decided from this snapshot: a reader of an
	 * older one may still need a record a later commit moved away from
	 * (a writer's takeover), so no punch while such a reader is open */
	rc = dd_db_oldest_reader(s->st_db, err, &oldest);
	if (!rc && oldest < dd_txn_id(pu.pu_txn)) {
		dd_txn_abort(pu.pu_txn);
		return 0;
	}
	if (!rc)
		rc = dd_packs_get(pu.pu_txn, err, dd_pack_id(p),
				  &pu.pu_limit);
	if (rc == DD_ENOENT) {
		dd_txn_abort(pu.pu_txn);
		return 0;   /* doomed meanwhile: it goes whole */
	}
	if (!rc) {
		rc = dd_pack_walk_from(p, &walk_err, DD_PACK_FILE_HDR_SIZE,
				       false, dd_punch_rec, &pu, NULL);
		/* the committed end reached (1), or damage: what was walked
		 * before it is punched, the rest stays for scrub to name */
		if (pu.pu_rc)
			rc = pu.pu_rc;
		else if (rc == 1 || rc == DD_ECORRUPT || rc == DD_EVERSION ||
			 rc == DD_ENOTSUP)
			rc = 0;
		else if (rc)
			dd_err_copy(err, &walk_err);
	}
	if (!rc)
		rc = dd_punch_flush(&pu);
	dd_txn_abort(pu.pu_txn);
	*punched = pu.pu_punched;
	return rc;
}

/* ---- STORE/reserve -----------------------------------------------------------*/

static int dd_reserve_path(const dd_store *s, char *buf, size_t len,
			   const char *leaf)
{
	int n = snprintf(buf, len, "%s/%s", s->st_path, leaf);

	return n < 0 || (size_t)n >= len ? -1 : 0;
}

void dd_space_reserve_make(dd_store *s)
{
	char path[4096], tmp[4096];
	struct stat st;
	int fd;

	if (dd_reserve_path(s, path, sizeof(path), DD_RESERVE_NAME) ||
	    dd_reserve_path(s, tmp, sizeof(tmp), DD_RESERVE_NAME ".tmp") ||
	    stat(path, &st) == 0)
		return;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	/* allocated blocks, not a sparse file: what is released must be
	 * space the file system gets back */
	if (posix_fallocate(fd, 0, DD_RESERVE_BYTES) != 0 ||
	    fdatasync(fd) != 0 || rename(tmp, path) != 0)
		unlink(tmp);
	close(fd);
}

bool dd_space_reserve_release(dd_store *s)
{
	char path[4096];

	return dd_reserve_path(s, path, sizeof(path), DD_RESERVE_NAME) == 0 &&
	       unlink(path) == 0;
}
