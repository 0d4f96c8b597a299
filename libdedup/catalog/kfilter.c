/*
 * kfilter.c -- the DDT's key filter (kfilter.h, format/kfilter.md).
 *
 * One file per catalog, db/keys.flt, mapped shared by every process that
 * writes: inserts set bits with atomic ORs (other threads and processes
 * test them meanwhile), and a transaction that set one syncs the file
 * before LMDB commits it, so the filter holds every hash of every
 * committed DDT state, a power cut included.
 *
 * A process keeps each mapping it made until the catalog closes: a probe
 * may be testing the one a rebuild replaced.  Such a stale mapping only
 * lacks what was inserted after the rebuild -- a "no" that costs a copy,
 * never a wrong answer about data -- and inserts always go to the file
 * of the generation meta names, read once per write transaction.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog/kfilter.h"
#include "catalog/db_internal.h"
#include "common/alloc.h"
#include "common/crc32c.h"
#include "common/endian.h"
#include "common/io.h"

struct dd_kf {
	uint8_t *kf_map;           /* the whole file */
	size_t kf_len;
	_Atomic uint64_t *kf_bits; /* kf_nblocks blocks of 8 words */
	uint8_t *kf_sums;          /* each block's CRC-32C, LE32 (§1) */
	uint64_t kf_nblocks;
	uint64_t kf_gen;
	struct dd_kf *kf_retired;  /* mappings made before this one */
};

/* ---- the hash's bits -------------------------------------------------------*/

/* SHA-256 is uniform already; the mix keeps the test-only weak hash
 * (meta hash 0x7f01) from crowding a few blocks. */
static uint64_t dd_kf_mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* The block a hash's bits are in, and the DD_KF_PROBES 9-bit positions
 * in it, from the hash's first 16 bytes (format/kfilter.md §2). */
static uint64_t dd_kf_block(uint64_t nblocks, const uint8_t *hash,
			    uint64_t *bits)
{
	uint64_t a = dd_kf_mix(dd_get_le64(hash));

	*bits = dd_kf_mix(dd_get_le64(hash + 8) ^ 0x9e3779b97f4a7c15ull);
	return (uint64_t)(((unsigned __int128)a * nblocks) >> 64);
}

static bool dd_kf_test(const struct dd_kf *kf, const uint8_t *hash)
{
	uint64_t bits, b = dd_kf_block(kf->kf_nblocks, hash, &bits);
	_Atomic uint64_t *w = kf->kf_bits + b * 8;

	for (int i = 0; i < DD_KF_PROBES; i++, bits >>= 9) {
		unsigned bit = bits & 511;

		if (!(atomic_load_explicit(&w[bit >> 6], memory_order_relaxed) &
		      ((uint64_t)1 << (bit & 63))))
			return false;
	}
	return true;
}

/* A block's sum (format/kfilter.md §1).  Bits change only inside write
 * transactions, one at a time (LMDB's writer lock): a writer reads a
 * block no other writer is changing.  Probes read bits meanwhile and
 * never the sums; a process mapping the file checks every sum without
 * the lock (dd_kf_map), so bits and sums are read atomically, and a
 * block caught between its bits and its sum only makes that mapping
 * fail -- the writer then maps it again under the lock
 * (dd_db_kf_prepare). */
static uint32_t dd_kf_block_sum(const struct dd_kf *kf, uint64_t b)
{
	uint64_t words[8];

	for (int i = 0; i < 8; i++)
		words[i] = atomic_load_explicit(&kf->kf_bits[b * 8 + i],
						memory_order_relaxed);
	return dd_crc32c(0, words, sizeof(words));
}

static uint32_t *dd_kf_sum_at(const struct dd_kf *kf, uint64_t b)
{
	return (uint32_t *)(void *)(kf->kf_sums + b * 4);
}

static bool dd_kf_block_ok(const struct dd_kf *kf, uint64_t b)
{
	uint32_t le = __atomic_load_n(dd_kf_sum_at(kf, b), __ATOMIC_RELAXED);

	return le32toh(le) == dd_kf_block_sum(kf, b);
}

static void dd_kf_block_seal(struct dd_kf *kf, uint64_t b)
{
	__atomic_store_n(dd_kf_sum_at(kf, b), htole32(dd_kf_block_sum(kf, b)),
			 __ATOMIC_RELAXED);
}

/* Sets a hash's bits in block *b; true if one was not set. */
static bool dd_kf_set(struct dd_kf *kf, const uint8_t *hash, uint64_t *b)
{
	uint64_t bits;
	_Atomic uint64_t *w;
	bool changed = false;

	*b = dd_kf_block(kf->kf_nblocks, hash, &bits);
	w = kf->kf_bits + *b * 8;
	for (int i = 0; i < DD_KF_PROBES; i++, bits >>= 9) {
		unsigned bit = bits & 511;
		uint64_t m = (uint64_t)1 << (bit & 63);

		if (!(atomic_load_explicit(&w[bit >> 6], memory_order_relaxed) &
		      m)) {
			atomic_fetch_or_explicit(&w[bit >> 6], m,
						 memory_order_relaxed);
			changed = true;
		}
	}
	return changed;
}

/* ---- the file --------------------------------------------------------------*/

static void dd_kf_header(uint8_t *h, uint64_t nblocks, uint64_t gen,
			 uint64_t entries)
{
	memset(h, 0, DD_KF_HDR_SIZE);
	memcpy(h, DD_KF_MAGIC, 8);
	dd_put_le32(h + 8, DD_KF_VERSION);
	dd_put_le32(h + 12, DD_KF_PROBES);
	dd_put_le64(h + 16, nblocks);
	dd_put_le64(h + 24, gen);
	dd_put_le64(h + 32, entries);
	dd_put_le32(h + 60, dd_crc32c(0, h, 60));
}

/* A file of nblocks: the header, the blocks, their sums (§1). */
static uint64_t dd_kf_file_size(uint64_t nblocks)
{
	return DD_KF_HDR_SIZE + nblocks * (DD_KF_BLOCK + 4);
}

static void dd_kf_lay_out(struct dd_kf *kf, uint8_t *file, uint64_t nblocks)
{
	kf->kf_bits = (_Atomic uint64_t *)(file + DD_KF_HDR_SIZE);
	kf->kf_sums = file + DD_KF_HDR_SIZE + nblocks * DD_KF_BLOCK;
	kf->kf_nblocks = nblocks;
}

/* The header's fields, if it is one this build writes, for a file of len
 * bytes. */
static bool dd_kf_header_ok(const uint8_t *h, uint64_t len, uint64_t *nblocks,
			    uint64_t *gen)
{
	if (len < DD_KF_HDR_SIZE || memcmp(h, DD_KF_MAGIC, 8) != 0 ||
	    dd_get_le32(h + 60) != dd_crc32c(0, h, 60) ||
	    dd_get_le32(h + 8) != DD_KF_VERSION ||
	    dd_get_le32(h + 12) != DD_KF_PROBES)
		return false;
	*nblocks = dd_get_le64(h + 16);
	*gen = dd_get_le64(h + 24);
	return *nblocks >= 1 && *nblocks <= DD_KF_MAX_BLOCKS &&
	       len == dd_kf_file_size(*nblocks);
}

static int dd_kf_path(dd_db *db, char *out, size_t cap)
{
	const char *dir;

	if (mdb_env_get_path(db->db_env, &dir) != 0)
		return -1;
	return snprintf(out, cap, "%s/%s", dir, DD_KF_FILE) < (int)cap ? 0 : -1;
}

/* Maps the file if it is of generation gen; NULL if not, or absent, or
 * damaged -- all of which a rebuild mends. */
static struct dd_kf *dd_kf_map(dd_db *db, uint64_t gen)
{
	uint8_t h[DD_KF_HDR_SIZE];
	uint64_t nblocks, fgen;
	struct dd_kf *kf = NULL;
	char path[4300];
	struct stat st;
	void *map;
	int fd;

	if (dd_kf_path(db, path, sizeof(path)) != 0)
		return NULL;
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) != 0 ||
	    pread(fd, h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    !dd_kf_header_ok(h, (uint64_t)st.st_size, &nblocks, &fgen) ||
	    fgen != gen)
		goto out;
	map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE,
		   MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		goto out;
	kf = dd_calloc(1, sizeof(*kf));
	if (!kf) {
		munmap(map, (size_t)st.st_size);
		goto out;
	}
	kf->kf_map = map;
	kf->kf_len = (size_t)st.st_size;
	dd_kf_lay_out(kf, kf->kf_map, nblocks);
	kf->kf_gen = gen;
	/* every block's sum: a damaged one is no filter, and is rebuilt
	 * (about a millisecond per 4 M DDT entries) */
	for (uint64_t b = 0; b < nblocks; b++)
		if (!dd_kf_block_ok(kf, b)) {
			munmap(map, (size_t)st.st_size);
			dd_free(kf);
			kf = NULL;
			break;
		}
out:
	close(fd);
	return kf;
}

/* db_kf becomes kf; the mapping it replaces stays until the catalog
 * closes (a probe may be in it). */
static void dd_kf_attach(dd_db *db, struct dd_kf *kf)
{
	struct dd_kf *old;

	pthread_mutex_lock(&db->db_kf_lock);
	old = atomic_load(&db->db_kf);
	if (kf) {
		kf->kf_retired = old;
		atomic_store(&db->db_kf, kf);
		db->db_kf_detached = false;
	} else if (old) {
		/* no usable file of meta's generation: keep the old one for
		 * probes (a stale "no" costs a copy), add to none */
		db->db_kf_detached = true;
	}
	pthread_mutex_unlock(&db->db_kf_lock);
}

void dd_db_kf_close(dd_db *db)
{
	struct dd_kf *kf = atomic_load(&db->db_kf);

	while (kf) {
		struct dd_kf *next = kf->kf_retired;

		munmap(kf->kf_map, kf->kf_len);
		dd_free(kf);
		kf = next;
	}
	atomic_store(&db->db_kf, NULL);
}

/* ---- building ---------------------------------------------------------------*/

/* A build sets the bits of millions of keys at random places in a
 * buffer of megabytes, a cache miss each: it names each key's block
 * DD_KF_AHEAD keys before it sets the bits there (prefetched meanwhile),
 * and with plain stores -- the buffer is its own until it is a file. */
#define DD_KF_AHEAD 16

struct dd_kf_pending {
	uint64_t kp_block, kp_bits;
};

struct dd_kf_build {
	struct dd_kf kb_kf;        /* over an anonymous buffer */
	uint64_t *kb_words;        /* kb_kf's bits, for plain stores */
	struct dd_kf_pending kb_ring[DD_KF_AHEAD];
	uint64_t kb_n;
	uint64_t kb_flagged;       /* entries MISSING or DAMAGED: the walk is
				      the unflagged claim's census too */
};

static void dd_kf_build_set(struct dd_kf_build *kb,
			    const struct dd_kf_pending *kp)
{
	uint64_t *w = kb->kb_words + kp->kp_block * 8, bits = kp->kp_bits;

	for (int i = 0; i < DD_KF_PROBES; i++, bits >>= 9)
		w[(bits & 511) >> 6] |= (uint64_t)1 << (bits & 63);
}

static int dd_kf_build_one(void *arg, const dd_ddt_key *key,
			   const dd_ddt_ent *ent)
{
	struct dd_kf_build *kb = arg;
	struct dd_kf_pending *kp = &kb->kb_ring[kb->kb_n % DD_KF_AHEAD];

	if (kb->kb_n >= DD_KF_AHEAD)
		dd_kf_build_set(kb, kp);
	kp->kp_block = dd_kf_block(kb->kb_kf.kf_nblocks, key->dk_hash,
				   &kp->kp_bits);
	__builtin_prefetch(kb->kb_words + kp->kp_block * 8, 1);
	kb->kb_n++;
	kb->kb_flagged += dd_ddt_ent_flagged(ent);
	return 0;
}

/* The keys still in the ring. */
static void dd_kf_build_end(struct dd_kf_build *kb)
{
	uint64_t from = kb->kb_n > DD_KF_AHEAD ? kb->kb_n - DD_KF_AHEAD : 0;

	for (uint64_t i = from; i < kb->kb_n; i++)
		dd_kf_build_set(kb, &kb->kb_ring[i % DD_KF_AHEAD]);
}

static uint64_t dd_kf_blocks_for(uint64_t entries)
{
	uint64_t n = (entries * DD_KF_BUILD_BITS + DD_KF_BLOCK * 8 - 1) /
		     (DD_KF_BLOCK * 8);

	if (n < DD_KF_MIN_BLOCKS)
		n = DD_KF_MIN_BLOCKS;
	return n > DD_KF_MAX_BLOCKS ? DD_KF_MAX_BLOCKS : n;
}

/* Is kf, of meta's generation, fit for a DDT of `entries`? */
static bool dd_kf_fits(const struct dd_kf *kf, uint64_t entries)
{
	return kf->kf_nblocks >= DD_KF_MAX_BLOCKS ||
	       entries * DD_KF_MIN_BITS <= kf->kf_nblocks * DD_KF_BLOCK * 8;
}

static int dd_kf_meta(dd_txn *txn, dd_err *err, const char *key,
		      uint64_t *out);

/* Inside the write transaction txn -- no insert runs meanwhile --: the
 * filter of every hash the DDT holds, written whole as a generation no
 * file had before (meta ddt.filter.last counts them: a withdrawn filter
 * leaves ddt.filter 0, and this process may still map its file), with
 * a temporary file, a rename and a directory sync; then meta names it. */
static int dd_kf_rebuild(dd_txn *txn, dd_err *err, uint64_t entries,
			 uint64_t *genp)
{
	dd_db *db = txn->tx_db;
	struct dd_kf_build kb;
	uint64_t nblocks = dd_kf_blocks_for(entries);
	size_t len = (size_t)dd_kf_file_size(nblocks);
	uint64_t gen, last = 0;
	const char *dir;
	uint8_t *buf;
	int rc = dd_kf_meta(txn, err, "ddt.filter", &gen);

	if (!rc)
		rc = dd_kf_meta(txn, err, "ddt.filter.last", &last);
	if (rc)
		return rc;
	gen = (last > gen ? last : gen) + 1;
	memset(&kb, 0, sizeof(kb));
	if (mdb_env_get_path(db->db_env, &dir) != 0)
		return dd_err_set(err, DD_EIO, "lmdb: no catalog path");
	buf = dd_calloc(1, len);
	if (!buf)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	dd_kf_lay_out(&kb.kb_kf, buf, nblocks);
	kb.kb_words = (uint64_t *)(buf + DD_KF_HDR_SIZE);
	/* order does not matter here: one cursor, not the runs' merge */
	rc = dd_ddt_scan(txn, err, dd_kf_build_one, &kb);
	dd_kf_build_end(&kb);
	for (uint64_t b = 0; !rc && b < nblocks; b++)
		dd_kf_block_seal(&kb.kb_kf, b);
	if (!rc)
		dd_ddt_census_done(txn, kb.kb_flagged);
	if (!rc) {
		dd_kf_header(buf, nblocks, gen, kb.kb_n);
		rc = dd_io_replace_file(err, dir, DD_KF_FILE, buf, len);
	}
	dd_free(buf);
	if (!rc)
		rc = dd_meta_put_u64(txn, err, "ddt.filter", gen);
	if (!rc)
		rc = dd_meta_put_u64(txn, err, "ddt.filter.last", gen);
	txn->tx_kf_rebuilt = !rc;
	*genp = gen;
	return rc;
}

/* A meta counter of the filter's, 0 when absent (an older catalog):
 * ddt.filter, the generation the inserts keep (0: none), ddt.filter.last
 * and ddt.filter.txn (format/kfilter.md §3). */
static int dd_kf_meta(dd_txn *txn, dd_err *err, const char *key,
		      uint64_t *out)
{
	int rc = dd_meta_get_u64(txn, err, key, out);

	if (rc == DD_ENOENT) {
		*out = 0;
		dd_err_clear(err);
		return 0;
	}
	return rc;
}

/* The generation meta names and the DDT's entries, as txn sees them, and
 * whether meta has the unflagged claim (db.h) at all. */
static int dd_kf_state(dd_txn *txn, dd_err *err, uint64_t *gen,
		       uint64_t *entries, bool *claim_known)
{
	int rc = dd_kf_meta(txn, err, "ddt.filter", gen);

	if (!rc)
		rc = dd_ddt_count(txn, err, entries);
	return rc ? rc : dd_ddt_unflagged_known(txn, err, claim_known);
}

/* Whether the filter this process maps is meta's and fits; if not, the
 * file of meta's generation is mapped if it fits. */
static bool dd_kf_current(dd_db *db, uint64_t gen, uint64_t entries)
{
	struct dd_kf *kf = atomic_load(&db->db_kf);

	if (kf && kf->kf_gen == gen && !atomic_load(&db->db_kf_detached))
		return dd_kf_fits(kf, entries);
	kf = gen ? dd_kf_map(db, gen) : NULL;
	if (kf && !dd_kf_fits(kf, entries)) {
		munmap(kf->kf_map, kf->kf_len);
		dd_free(kf);
		kf = NULL;
	}
	if (kf)
		dd_kf_attach(db, kf);
	return kf != NULL;
}

int dd_db_kf_prepare(dd_db *db, dd_err *err)
{
	uint64_t gen, entries;
	bool known;
	dd_txn *txn;
	int rc;

	db->db_kf_enabled = true;   /* inserts keep meta's filter */
	rc = dd_txn_begin(db, err, false, &txn);
	if (rc)
		return rc;
	rc = dd_kf_state(txn, err, &gen, &entries, &known);
	dd_txn_abort(txn);
	if (rc || (dd_kf_current(db, gen, entries) && known))
		return rc;
	/* rebuild, unless another process did while this one waited for
	 * the write transaction; a catalog without the unflagged claim (an
	 * older build's) gets it from the rebuild's walk, or one of its own */
	rc = dd_txn_begin(db, err, true, &txn);
	if (rc)
		return rc;
	rc = dd_kf_state(txn, err, &gen, &entries, &known);
	if (!rc && !dd_kf_current(db, gen, entries))
		rc = dd_kf_rebuild(txn, err, entries, &gen);
	else if (!rc && !known)
		rc = dd_ddt_census(txn, err, NULL);
	if (rc) {
		dd_txn_abort(txn);
		return rc;
	}
	rc = dd_txn_commit(txn, err);
	/* a file system that cannot map it shared: no filter, no error */
	if (!rc)
		dd_kf_current(db, gen, entries);
	return rc;
}

bool dd_db_kf_maybe(dd_db *db, const uint8_t hash[DD_HASH_SIZE])
{
	struct dd_kf *kf = atomic_load_explicit(&db->db_kf,
						memory_order_acquire);

	return !kf || dd_kf_test(kf, hash);
}

bool dd_db_kf_mapped(dd_db *db)
{
	return atomic_load(&db->db_kf) != NULL && !db->db_kf_detached;
}

static int dd_kf_sync(struct dd_kf *kf, dd_err *err)
{
	if (msync(kf->kf_map, kf->kf_len, MS_SYNC) != 0)
		return dd_err_set_errno(err, errno, "%s: msync", DD_KF_FILE);
	return 0;
}

/* ---- inserts (ddt.c) and commits (db.c) ----------------------------------*/

/* The filter of the generation meta names, mapped, for txn's inserts
 * (NULL: none, or found damaged in txn); read once per write txn, and
 * whether it holds every key of the commit txn starts from (the chain of
 * commits, format/kfilter.md §3). */
static int dd_kf_txn_filter(dd_txn *txn, dd_err *err, struct dd_kf **out)
{
	dd_db *db = txn->tx_db;
	struct dd_kf *kf;

	*out = NULL;
	if (!db->db_kf_enabled || txn->tx_kf_damaged)
		return 0;
	if (!txn->tx_kf_checked) {
		uint64_t gen;
		int rc = dd_kf_meta(txn, err, "ddt.filter", &gen);

		if (rc)
			return rc;
		txn->tx_kf_checked = true;
		kf = atomic_load(&db->db_kf);
		if (!kf || kf->kf_gen != gen || db->db_kf_detached) {
			kf = gen ? dd_kf_map(db, gen) : NULL;
			dd_kf_attach(db, kf);
		}
		rc = dd_kf_txn_holds(txn, err, gen, &txn->tx_kf_holds);
		if (rc)
			return rc;
	}
	kf = atomic_load(&db->db_kf);
	if (kf && !db->db_kf_detached)
		*out = kf;
	return 0;
}

/* A block whose sum fails: the file was damaged since it was mapped.
 * The transaction adds to it no more, and withdraws it at its commit
 * (ddt.filter 0): the next writer rebuilds it. */
static void dd_kf_txn_damaged(dd_txn *txn)
{
	txn->tx_kf_damaged = true;
	txn->tx_kf_holds = false;
}

int dd_kf_txn_test_add(dd_txn *txn, dd_err *err, const uint8_t *hash,
		       bool *absent)
{
	struct dd_kf *kf;
	uint64_t bits, b;
	int rc = dd_kf_txn_filter(txn, err, &kf);

	*absent = false;
	if (rc || !kf)
		return rc;
	b = dd_kf_block(kf->kf_nblocks, hash, &bits);
	if (!dd_kf_block_ok(kf, b)) {
		dd_kf_txn_damaged(txn);
		return 0;
	}
	*absent = txn->tx_kf_holds && !dd_kf_test(kf, hash);
	if (dd_kf_set(kf, hash, &b)) {
		dd_kf_block_seal(kf, b);
		txn->tx_kf_dirty = kf;
	}
	return 0;
}

int dd_kf_txn_add(dd_txn *txn, dd_err *err, const uint8_t *hash)
{
	bool absent;

	return dd_kf_txn_test_add(txn, err, hash, &absent);
}

uint64_t dd_kf_txn_gen(dd_txn *txn)
{
	struct dd_kf *kf = atomic_load(&txn->tx_db->db_kf);

	return txn->tx_kf_checked && !txn->tx_kf_damaged && kf &&
	       !txn->tx_db->db_kf_detached ? kf->kf_gen : 0;
}

/* Every write transaction of a build that knows the filter leaves its id
 * in meta ddt.filter.txn.  LMDB numbers commits one by one, so a
 * transaction that finds there anything but its own id less one follows
 * a commit of a build that does not know the filter -- whose inserts the
 * filter may lack: it withdraws the filter (ddt.filter 0) and the next
 * writer rebuilds it.  A rebuild's own transaction keeps what it built. */
static int dd_kf_txn_chain(dd_txn *txn, dd_err *err)
{
	uint64_t id = (uint64_t)mdb_txn_id(txn->tx_mdb), last;
	int rc = dd_kf_meta(txn, err, "ddt.filter.txn", &last);

	if (!rc && ((last != id - 1 && !txn->tx_kf_rebuilt) ||
		    txn->tx_kf_damaged)) {
		uint64_t gen;

		rc = dd_kf_meta(txn, err, "ddt.filter", &gen);
		if (!rc && gen)
			rc = dd_meta_put_u64(txn, err, "ddt.filter", 0);
	}
	return rc ? rc : dd_meta_put_u64(txn, err, "ddt.filter.txn", id);
}

int dd_kf_txn_holds(dd_txn *txn, dd_err *err, uint64_t gen, bool *out)
{
	uint64_t id = (uint64_t)mdb_txn_id(txn->tx_mdb), in_force, last;
	int rc = dd_kf_meta(txn, err, "ddt.filter", &in_force);

	if (!rc)
		rc = dd_kf_meta(txn, err, "ddt.filter.txn", &last);
	*out = !rc && gen && in_force == gen &&
	       last == (txn->tx_write ? id - 1 : id);
	return rc;
}

int dd_kf_txn_commit(dd_txn *txn, dd_err *err)
{
	int rc = txn->tx_write ? dd_kf_txn_chain(txn, err) : 0;

	if (!rc && txn->tx_kf_dirty)
		rc = dd_kf_sync(txn->tx_kf_dirty, err);
	return rc;
}
