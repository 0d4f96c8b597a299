/*
 * db_internal.h -- what the files of ddt/ share.  Only ddt/ includes it.
 */
#ifndef DD_DDT_DB_INTERNAL_H
#define DD_DDT_DB_INTERNAL_H

#include <lmdb.h>
#include <sys/types.h>

#include "ddt/db.h"

enum dd_dbi_index {
	DD_DBI_META = 0,
	DD_DBI_DDT0,
	DD_DBI_DDT1,
	DD_DBI_SNAP,
	DD_DBI_BMAP,
	DD_DBI_PEND,
	DD_DBI_PACKS,
	DD_DBI_COUNT
};

struct dd_db {
	MDB_env *db_env;
	MDB_dbi db_dbi[DD_DBI_COUNT];
	dev_t db_dev;              /* registry key (db.c) */
	ino_t db_ino;
	int db_refs;
	struct dd_db *db_next;
	void *db_map;              /* LMDB's map, for dd_db_trim_map */
	size_t db_map_len;
	bool db_map_looked;
};

struct dd_txn {
	dd_db *tx_db;
	MDB_txn *tx_mdb;
	MDB_dbi tx_ddt;            /* the live DDT table */
	MDB_dbi tx_ddt_other;      /* the one gc compacts into */
	unsigned tx_ddt_which;     /* 0: ddt0 live, 1: ddt1 live */
	bool tx_write;
	bool tx_parked;            /* a read txn after dd_txn_reset */
};

/* check.c: the structural check of data.mdb (fd, page size psize) for
 * the snapshot whose meta page has this txnid.  DD_DB_CHECK_RETRY when
 * neither meta page has it any more (a writer committed twice since the
 * txnid was read). */
#define DD_DB_CHECK_RETRY 1
int dd_db_check_file(dd_err *err, int fd, const char *path, uint32_t psize,
		     uint64_t txnid);

/* Translates an LMDB return code into a DD_E* code with a message. */
int dd_mdb_error(dd_err *err, int rc, const char *what);

#endif
