/*
 * layout.c -- the DEDUP file: a store's format and, from format 2, its
 * options and identity (format/store.md §1), and the catalog's `meta`
 * table that mirrors them (§2).
 *
 * The options live in DEDUP as well as in the catalog because the catalog
 * can be lost: `dedup repair` rebuilds it from DEDUP, the manifests and
 * the packs.  At open the two must agree; a catalog whose options differ
 * belongs to another store (or is damaged) and is refused, naming repair.
 * DEDUP is only ever replaced whole (temporary file, rename, directory
 * fsync).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "common/endian.h"
#include "common/io.h"
#include "catalog/ucnt.h"
#include "store/store_internal.h"

/* The option keys, in meta and in DEDUP alike (format/store.md §2);
 * the last, the chunker, only in stores of format 3 (formats 2 and 4 are
 * fixed blocks). */
static const char *const dd_opt_keys[DD_STORE_NOPTS] = {
	"block_size", "verify", "compress", "compress_level", "hash",
	"chunker",
};

/* meta's feature bit of a store whose blocks have lengths of their own
 * (format/store.md §2, §4.2). */
#define DD_META_FEATURE_VARBLOCK 0x1u

int dd_store_conf_check(dd_err *err, const char *path, const dd_store_conf *c)
{
	const uint64_t *v = c->sc_opt;

	if (v[DD_STORE_OPT_CHUNKER] > DD_CHUNKER_FASTCDC ||
	    !dd_chunker_valid((int)v[DD_STORE_OPT_CHUNKER], v[0]) ||
	    v[1] > 1 || v[2] > DD_COMPRESS_ZSTD || v[3] > 22 ||
	    (v[4] != DD_HASH_SHA256 && v[4] != DD_HASH_TEST_WEAK16))
		return dd_err_set(err, DD_ECORRUPT,
				  "%s: store options out of range", path);
	return 0;
}

/* One "key value" line of format 2; unknown keys are ignored. */
static int dd_conf_line(dd_store_conf *c, const char *line)
{
	const char *sp = strchr(line, ' ');
	size_t klen = sp ? (size_t)(sp - line) : 0;
	char *end;

	if (!sp)
		return 0;
	if (klen == 4 && !strncmp(line, "uuid", 4)) {
		if (strlen(sp + 1) != 32)
			return -1;
		for (int i = 0; i < 16; i++) {
			unsigned b;

			if (sscanf(sp + 1 + 2 * i, "%2x", &b) != 1)
				return -1;
			c->sc_uuid[i] = (uint8_t)b;
		}
		c->sc_have_uuid = true;
		return 0;
	}
	for (int i = 0; i < DD_STORE_NOPTS; i++) {
		if (strlen(dd_opt_keys[i]) != klen ||
		    strncmp(line, dd_opt_keys[i], klen))
			continue;
		errno = 0;
		c->sc_opt[i] = strtoull(sp + 1, &end, 10);
		if (errno || *end || sp[1] == '-' || !sp[1])
			return -1;
		c->sc_have |= 1u << i;
	}
	return 0;
}

int dd_store_conf_read(dd_err *err, const char *path, dd_store_conf *c)
{
	char fpath[4096], buf[1024];
	size_t got = 0;
	int fd, rc;

	memset(c, 0, sizeof(*c));
	snprintf(fpath, sizeof(fpath), "%s/DEDUP", path);
	fd = dd_io_open(err, fpath, O_RDONLY, 0);
	if (fd == DD_ENOENT) {
		struct stat st;

		if (stat(path, &st) != 0)
			return dd_err_set(err, DD_ENOENT, "%s: no such store",
					  path);
		return dd_err_set(err, DD_ENOENT,
				  "%s: not a libdedup store (no DEDUP file)",
				  path);
	}
	if (fd < 0)
		return fd;
	rc = dd_io_read(err, fd, buf, sizeof(buf) - 1, &got, fpath);
	dd_io_close(fd);
	if (rc)
		return rc;
	buf[got] = 0;
	return dd_store_conf_parse(err, path, buf, c);
}

int dd_store_conf_parse(dd_err *err, const char *path, char *text,
			dd_store_conf *c)
{
	char *line, *save = NULL;
	long fmt = -1;

	memset(c, 0, sizeof(*c));
	line = strtok_r(text, "\n", &save);
	if (!line || strcmp(line, DD_STORE_MAGIC_LINE) != 0)
		return dd_err_set(err, DD_EFORMAT,
				  "%s: not a libdedup store (bad DEDUP file)",
				  path);
	while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
		if (!strncmp(line, "format ", 7)) {
			char *end;

			errno = 0;
			fmt = strtol(line + 7, &end, 10);
			if (errno || *end || fmt < 1)
				fmt = 0;
		} else if (dd_conf_line(c, line) != 0) {
			return dd_err_set(err, DD_ECORRUPT, "%s: DEDUP file "
					  "has a bad line '%.40s'", path, line);
		}
	}
	if (fmt == 0 || fmt == -1)
		return dd_err_set(err, DD_ECORRUPT,
				  "%s: DEDUP file has no valid format line", path);
	if (fmt > DD_STORE_FORMAT)
		return dd_err_set(err, DD_EVERSION,
				  "%s: store format %ld is newer than this "
				  "build reads (format %d); upgrade libdedup",
				  path, fmt, DD_STORE_FORMAT);
	c->sc_format = (int)fmt;
	/* formats 2 and 4 have no chunker (fixed blocks), 3 must name one */
	if (fmt >= 2 && (c->sc_have != (1u << DD_STORE_NOPTS) - 1 -
			 (DD_STORE_FORMAT_HAS_CHUNKER(fmt)
				  ? 0 : 1u << DD_STORE_OPT_CHUNKER) ||
			 !c->sc_have_uuid))
		return dd_err_set(err, DD_ECORRUPT, "%s: DEDUP file lacks the "
				  "store's options", path);
	return fmt >= 2 ? dd_store_conf_check(err, path, c) : 0;
}

int dd_store_conf_write(dd_err *err, const char *path, const dd_store_conf *c)
{
	char body[512];
	int n;

	n = snprintf(body, sizeof(body), "%s\nformat %d\n", DD_STORE_MAGIC_LINE,
		     c->sc_format);
	for (int i = 0; c->sc_format >= 2 && i < DD_STORE_NOPTS; i++)
		if (i != DD_STORE_OPT_CHUNKER ||
		    DD_STORE_FORMAT_HAS_CHUNKER(c->sc_format))
			n += snprintf(body + n, sizeof(body) - (size_t)n,
				      "%s %" PRIu64 "\n", dd_opt_keys[i],
				      c->sc_opt[i]);
	if (c->sc_format >= 2) {
		n += snprintf(body + n, sizeof(body) - (size_t)n, "uuid ");
		for (int i = 0; i < 16; i++)
			n += snprintf(body + n, sizeof(body) - (size_t)n,
				      "%02x", c->sc_uuid[i]);
		n += snprintf(body + n, sizeof(body) - (size_t)n, "\n");
	}
	return dd_io_replace_file(err, path, "DEDUP", body, (size_t)n);
}

int dd_store_conf_new_uuid(dd_err *err, dd_store_conf *c)
{
	if (getrandom(c->sc_uuid, sizeof(c->sc_uuid), 0) !=
	    (ssize_t)sizeof(c->sc_uuid))
		return dd_err_set_errno(err, errno, "getrandom");
	c->sc_have_uuid = true;
	return 0;
}

/* ---- meta (format/store.md §2) ----------------------------------------------*/

int dd_store_meta_init(dd_txn *txn, dd_err *err, const dd_store_conf *c,
		       uint64_t pack_next, uint64_t snap_next)
{
	bool fixed = c->sc_opt[DD_STORE_OPT_CHUNKER] == DD_CHUNKER_FIXED;
	int rc = dd_meta_put_u64(txn, err, "format", 1);

	/* a store of fixed blocks has the meta of format 2, no chunker */
	if (!rc)
		rc = dd_meta_put_u64(txn, err, "features",
				     fixed ? 0 : DD_META_FEATURE_VARBLOCK);
	for (int i = 0; !rc && i < DD_STORE_NOPTS; i++)
		if (i != DD_STORE_OPT_CHUNKER || !fixed)
			rc = dd_meta_put_u64(txn, err, dd_opt_keys[i],
					     c->sc_opt[i]);
	if (!rc)
		rc = dd_meta_put_u64(txn, err, "pack.next", pack_next);
	if (!rc)
		rc = dd_meta_put_u64(txn, err, "snap.next", snap_next);
	if (!rc)
		rc = dd_meta_put_u64(txn, err, "ddt.live", 0);
	if (!rc && c->sc_have_uuid)
		rc = dd_meta_put_u64(txn, err, "store.uuid0",
				     dd_get_le64(c->sc_uuid));
	if (!rc && c->sc_have_uuid)
		rc = dd_meta_put_u64(txn, err, "store.uuid1",
				     dd_get_le64(c->sc_uuid + 8));
	return rc;
}

int dd_store_meta_read(dd_txn *txn, dd_err *err, const char *path,
		       dd_store_conf *out)
{
	uint64_t fmt, features, u[2];
	int rc = dd_meta_get_u64(txn, err, "format", &fmt);

	if (!rc)
		rc = dd_meta_get_u64(txn, err, "features", &features);
	for (int i = 0; !rc && i < DD_STORE_NOPTS; i++) {
		rc = dd_meta_get_u64(txn, err, dd_opt_keys[i], &out->sc_opt[i]);
		if (rc == DD_ENOENT && i == DD_STORE_OPT_CHUNKER) {
			out->sc_opt[i] = DD_CHUNKER_FIXED;
			rc = 0;
		}
	}
	if (rc == DD_ENOENT)
		return dd_err_set(err, DD_ECORRUPT, "%s: store metadata is "
				  "incomplete: the catalog is damaged: run "
				  "dedup repair", path);
	if (rc)
		return rc;
	if (fmt > 1)
		return dd_err_set(err, DD_EVERSION, "%s: catalog format %llu "
				  "is newer than this build reads (1)", path,
				  (unsigned long long)fmt);
	if (features & ~(uint64_t)(DD_META_FEATURE_VARBLOCK |
				   DD_META_FEATURE_UCNT |
				   DD_META_FEATURE_DDT_RUNS))
		return dd_err_set(err, DD_ENOTSUP,
				  "%s: store uses features %#llx this build "
				  "does not know", path,
				  (unsigned long long)features);
	/* uncounted positions only in a store of fixed blocks (§4.3) */
	if (!(features & DD_META_FEATURE_VARBLOCK) !=
	    (out->sc_opt[DD_STORE_OPT_CHUNKER] == DD_CHUNKER_FIXED) ||
	    ((features & DD_META_FEATURE_VARBLOCK) &&
	     (features & DD_META_FEATURE_UCNT)))
		return dd_err_set(err, DD_ECORRUPT, "%s: the catalog's "
				  "features and chunker disagree: the catalog "
				  "is damaged: run dedup repair", path);
	rc = dd_meta_get_u64(txn, err, "store.uuid0", &u[0]);
	if (!rc)
		rc = dd_meta_get_u64(txn, err, "store.uuid1", &u[1]);
	out->sc_have_uuid = rc == 0;
	if (!rc) {
		dd_put_le64(out->sc_uuid, u[0]);
		dd_put_le64(out->sc_uuid + 8, u[1]);
	}
	if (rc && rc != DD_ENOENT)
		return rc;
	return dd_store_conf_check(err, path, out);
}
