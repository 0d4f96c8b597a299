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

/* One segment of the mapped file (format/kfilter.md §1, §4). */
struct dd_kf_seg {
	_Atomic uint64_t *ks_bits; /* ks_nblocks blocks of 8 words */
	uint8_t *ks_sums;          /* each block's CRC-32C, LE32 (§1) */
	uint64_t ks_nblocks;
	uint64_t ks_added;         /* DDT entries when it was added */
};

struct dd_kf {
	uint8_t *kf_map;           /* the whole file */
	size_t kf_len;
	unsigned kf_nseg;          /* inserts go to the last */
	struct dd_kf_seg kf_seg[DD_KF_SEG_MAX];
	uint64_t kf_gen;
	uint64_t kf_walked;        /* header: entries segment 0 was built of */
	dev_t kf_dev;              /* the file mapped (dd_kf_grow) */
	ino_t kf_ino;
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

/* A hash's place (format/kfilter.md §2): `a` picks its block in each
 * segment, `w[0]` and `w[1]` the DD_KF_PROBES 9-bit positions in that
 * block (seven from the first word, three from the second). */
struct dd_kf_pos {
	uint64_t a, w[2];
};

static struct dd_kf_pos dd_kf_pos_of(const uint8_t *hash)
{
	return (struct dd_kf_pos){
		.a = dd_kf_mix(dd_get_le64(hash)),
		.w = {dd_kf_mix(dd_get_le64(hash + 8) ^ 0x9e3779b97f4a7c15ull),
		      dd_kf_mix(dd_get_le64(hash + 16) ^
				0x7f4a7c159e3779b9ull)},
	};
}

/* Bit i of the hash's DD_KF_PROBES, 0..511 in its block. */
static unsigned dd_kf_bit(const struct dd_kf_pos *p, int i)
{
	return i < 7 ? (unsigned)(p->w[0] >> (9 * i)) & 511
		     : (unsigned)(p->w[1] >> (9 * (i - 7))) & 511;
}

static uint64_t dd_kf_block(const struct dd_kf_seg *ks, struct dd_kf_pos p)
{
	return (uint64_t)(((unsigned __int128)p.a * ks->ks_nblocks) >> 64);
}

static bool dd_kf_block_has(const _Atomic uint64_t *w,
			    const struct dd_kf_pos *p)
{
	for (int i = 0; i < DD_KF_PROBES; i++) {
		unsigned bit = dd_kf_bit(p, i);

		if (!(atomic_load_explicit(&w[bit >> 6], memory_order_relaxed) &
		      ((uint64_t)1 << (bit & 63))))
			return false;
	}
	return true;
}

/* Is the hash in some segment?  Its block in each is fetched before any
 * is tested: one cache miss's wait for all of them. */
static bool dd_kf_test(const struct dd_kf *kf, struct dd_kf_pos p)
{
	const _Atomic uint64_t *w[DD_KF_SEG_MAX];

	for (unsigned s = 0; s < kf->kf_nseg; s++) {
		const struct dd_kf_seg *ks = &kf->kf_seg[s];

		w[s] = ks->ks_bits + dd_kf_block(ks, p) * 8;
		__builtin_prefetch((const void *)w[s]);
	}
	for (unsigned s = kf->kf_nseg; s-- > 0;)   /* the newest first */
		if (dd_kf_block_has(w[s], &p))
			return true;
	return false;
}

/* A block's sum (format/kfilter.md §1).  Bits change only inside write
 * transactions, one at a time (LMDB's writer lock): a writer reads a
 * block no other writer is changing.  Probes read bits meanwhile and
 * never the sums; a process mapping the file checks every sum without
 * the lock (dd_kf_map), so bits and sums are read atomically, and a
 * block caught between its bits and its sum only makes that mapping
 * fail -- the writer then maps it again under the lock
 * (dd_db_kf_prepare). */
static uint32_t dd_kf_block_sum(const struct dd_kf_seg *ks, uint64_t b)
{
	uint64_t words[8];

	for (int i = 0; i < 8; i++)
		words[i] = atomic_load_explicit(&ks->ks_bits[b * 8 + i],
						memory_order_relaxed);
	return dd_crc32c(0, words, sizeof(words));
}

static uint32_t *dd_kf_sum_at(const struct dd_kf_seg *ks, uint64_t b)
{
	return (uint32_t *)(void *)(ks->ks_sums + b * 4);
}

static bool dd_kf_block_ok(const struct dd_kf_seg *ks, uint64_t b)
{
	uint32_t le = __atomic_load_n(dd_kf_sum_at(ks, b), __ATOMIC_RELAXED);

	return le32toh(le) == dd_kf_block_sum(ks, b);
}

static bool dd_kf_seg_ok(const struct dd_kf_seg *ks)
{
	for (uint64_t b = 0; b < ks->ks_nblocks; b++)
		if (!dd_kf_block_ok(ks, b))
			return false;
	return true;
}

static void dd_kf_block_seal(struct dd_kf_seg *ks, uint64_t b)
{
	__atomic_store_n(dd_kf_sum_at(ks, b), htole32(dd_kf_block_sum(ks, b)),
			 __ATOMIC_RELAXED);
}

/* Sets a hash's bits in its block *b of the newest segment; true if one
 * was not set.  Only a write transaction sets bits, one at a time across
 * processes (LMDB's writer lock), so a word is read and written back
 * whole -- no read-modify-write bus lock per bit; probes meanwhile read
 * each word whole, before or after. */
static bool dd_kf_set(struct dd_kf *kf, struct dd_kf_pos p, uint64_t *b)
{
	struct dd_kf_seg *ks = &kf->kf_seg[kf->kf_nseg - 1];
	_Atomic uint64_t *w;
	bool changed = false;

	*b = dd_kf_block(ks, p);
	w = ks->ks_bits + *b * 8;
	for (int i = 0; i < DD_KF_PROBES; i++) {
		unsigned bit = dd_kf_bit(&p, i);
		uint64_t m = (uint64_t)1 << (bit & 63);

		uint64_t old = atomic_load_explicit(&w[bit >> 6],
						    memory_order_relaxed);

		if (!(old & m)) {
			atomic_store_explicit(&w[bit >> 6], old | m,
					      memory_order_relaxed);
			changed = true;
		}
	}
	return changed;
}

/* ---- the file --------------------------------------------------------------*/

/* What a header says (format/kfilter.md §1). */
struct dd_kf_layout {
	unsigned kl_nseg;
	uint64_t kl_nblocks[DD_KF_SEG_MAX];
	uint64_t kl_added[DD_KF_SEG_MAX];
	uint64_t kl_gen;
	uint64_t kl_walked;
};

static void dd_kf_header(uint8_t *h, const struct dd_kf_layout *kl)
{
	memset(h, 0, DD_KF_HDR_SIZE);
	memcpy(h, DD_KF_MAGIC, 8);
	dd_put_le32(h + 8, DD_KF_VERSION);
	dd_put_le32(h + 12, DD_KF_PROBES);
	dd_put_le32(h + 16, kl->kl_nseg);
	dd_put_le64(h + 24, kl->kl_gen);
	dd_put_le64(h + 32, kl->kl_walked);
	for (unsigned s = 0; s < kl->kl_nseg; s++) {
		dd_put_le64(h + 64 + 16 * s, kl->kl_nblocks[s]);
		dd_put_le64(h + 72 + 16 * s, kl->kl_added[s]);
	}
	dd_put_le32(h + DD_KF_HDR_SIZE - 4,
		    dd_crc32c(0, h, DD_KF_HDR_SIZE - 4));
}

/* A segment's bytes: its blocks, then their sums (§1). */
static uint64_t dd_kf_seg_size(uint64_t nblocks)
{
	return nblocks * (DD_KF_BLOCK + 4);
}

static uint64_t dd_kf_file_size(const struct dd_kf_layout *kl)
{
	uint64_t len = DD_KF_HDR_SIZE;

	for (unsigned s = 0; s < kl->kl_nseg; s++)
		len += dd_kf_seg_size(kl->kl_nblocks[s]);
	return len;
}

static void dd_kf_lay_out(struct dd_kf *kf, uint8_t *file,
			  const struct dd_kf_layout *kl)
{
	uint8_t *at = file + DD_KF_HDR_SIZE;

	kf->kf_nseg = kl->kl_nseg;
	kf->kf_gen = kl->kl_gen;
	kf->kf_walked = kl->kl_walked;
	for (unsigned s = 0; s < kl->kl_nseg; s++) {
		struct dd_kf_seg *ks = &kf->kf_seg[s];

		ks->ks_nblocks = kl->kl_nblocks[s];
		ks->ks_added = kl->kl_added[s];
		ks->ks_bits = (_Atomic uint64_t *)(void *)at;
		ks->ks_sums = at + ks->ks_nblocks * DD_KF_BLOCK;
		at += dd_kf_seg_size(ks->ks_nblocks);
	}
}

static bool dd_kf_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* The header's fields, if it is one this build writes, for a file of len
 * bytes. */
static bool dd_kf_header_ok(const uint8_t *h, uint64_t len,
			    struct dd_kf_layout *kl)
{
	if (len < DD_KF_HDR_SIZE || memcmp(h, DD_KF_MAGIC, 8) != 0 ||
	    dd_get_le32(h + DD_KF_HDR_SIZE - 4) !=
		    dd_crc32c(0, h, DD_KF_HDR_SIZE - 4) ||
	    dd_get_le32(h + 8) != DD_KF_VERSION ||
	    dd_get_le32(h + 12) != DD_KF_PROBES)
		return false;
	kl->kl_nseg = dd_get_le32(h + 16);
	kl->kl_gen = dd_get_le64(h + 24);
	kl->kl_walked = dd_get_le64(h + 32);
	if (kl->kl_nseg < 1 || kl->kl_nseg > DD_KF_SEG_MAX ||
	    !dd_kf_zero(h + 20, 4) || !dd_kf_zero(h + 40, 24) ||
	    !dd_kf_zero(h + 64 + 16 * kl->kl_nseg,
			DD_KF_HDR_SIZE - 4 - 64 - 16 * kl->kl_nseg))
		return false;
	for (unsigned s = 0; s < kl->kl_nseg; s++) {
		kl->kl_nblocks[s] = dd_get_le64(h + 64 + 16 * s);
		kl->kl_added[s] = dd_get_le64(h + 72 + 16 * s);
		if (kl->kl_nblocks[s] < 1 ||
		    kl->kl_nblocks[s] > DD_KF_MAX_BLOCKS ||
		    (s == 0 ? kl->kl_added[s] != 0
			    : kl->kl_added[s] < kl->kl_added[s - 1]))
			return false;
	}
	return kl->kl_gen >= 1 && len == dd_kf_file_size(kl);
}

static int dd_kf_path(dd_db *db, char *out, size_t cap)
{
	const char *dir;

	if (mdb_env_get_path(db->db_env, &dir) != 0)
		return -1;
	return snprintf(out, cap, "%s/%s", dir, DD_KF_FILE) < (int)cap ? 0 : -1;
}

static void dd_kf_unmap(struct dd_kf *kf)
{
	munmap(kf->kf_map, kf->kf_len);
	dd_free(kf);
}

/* Opens the file (open(2) flags) if its header is one of generation gen,
 * with *kl and *st its header's fields and its stat; -1 if not, or
 * absent, or its header damaged. */
static int dd_kf_open_gen(dd_db *db, uint64_t gen, int flags,
			  struct dd_kf_layout *kl, struct stat *st)
{
	uint8_t h[DD_KF_HDR_SIZE];
	char path[4300];
	int fd;

	if (dd_kf_path(db, path, sizeof(path)) != 0)
		return -1;
	fd = open(path, flags | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (fstat(fd, st) != 0 ||
	    pread(fd, h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    !dd_kf_header_ok(h, (uint64_t)st->st_size, kl) ||
	    kl->kl_gen != gen) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Maps the file if it is of generation gen; NULL if not, or absent, or
 * damaged -- all of which a rebuild mends. */
static struct dd_kf *dd_kf_map(dd_db *db, uint64_t gen)
{
	struct dd_kf_layout kl;
	struct dd_kf *kf = NULL;
	struct stat st;
	void *map;
	int fd = dd_kf_open_gen(db, gen, O_RDWR, &kl, &st);

	if (fd < 0)
		return NULL;
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
	kf->kf_dev = st.st_dev;
	kf->kf_ino = st.st_ino;
	dd_kf_lay_out(kf, kf->kf_map, &kl);
	/* every block's sum: a damaged one is no filter, and is rebuilt
	 * (about a millisecond per 4 M DDT entries) */
	for (unsigned s = 0; kf && s < kf->kf_nseg; s++)
		if (!dd_kf_seg_ok(&kf->kf_seg[s])) {
			dd_kf_unmap(kf);
			kf = NULL;
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
	uint64_t kp_block;
	struct dd_kf_pos kp_pos;
};

struct dd_kf_build {
	struct dd_kf_seg kb_seg;   /* over an anonymous buffer */
	uint64_t *kb_words;        /* kb_seg's bits, for plain stores */
	struct dd_kf_pending kb_ring[DD_KF_AHEAD];
	uint64_t kb_n;
	uint64_t kb_flagged;       /* entries MISSING or DAMAGED: the walk is
				      the unflagged claim's census too */
};

static void dd_kf_build_set(struct dd_kf_build *kb,
			    const struct dd_kf_pending *kp)
{
	uint64_t *w = kb->kb_words + kp->kp_block * 8;

	for (int i = 0; i < DD_KF_PROBES; i++) {
		unsigned bit = dd_kf_bit(&kp->kp_pos, i);

		w[bit >> 6] |= (uint64_t)1 << (bit & 63);
	}
}

static int dd_kf_build_one(void *arg, const dd_ddt_key *key,
			   const dd_ddt_ent *ent)
{
	struct dd_kf_build *kb = arg;
	struct dd_kf_pending *kp = &kb->kb_ring[kb->kb_n % DD_KF_AHEAD];
	struct dd_kf_pos p = dd_kf_pos_of(key->dk_hash);

	if (kb->kb_n >= DD_KF_AHEAD)
		dd_kf_build_set(kb, kp);
	kp->kp_block = dd_kf_block(&kb->kb_seg, p);
	kp->kp_pos = p;
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

uint64_t dd_kf_min_blocks = DD_KF_MIN_BLOCKS;

/* A segment's blocks for `keys` (a rebuild's, or a new segment's). */
static uint64_t dd_kf_blocks_for(uint64_t keys)
{
	uint64_t n = (keys * DD_KF_BUILD_BITS + DD_KF_BLOCK * 8 - 1) /
		     (DD_KF_BLOCK * 8);

	if (n < dd_kf_min_blocks)
		n = dd_kf_min_blocks;
	return n > DD_KF_MAX_BLOCKS ? DD_KF_MAX_BLOCKS : n;
}

/* Segment s's keys, of a DDT of `entries` (format/kfilter.md §4). */
static uint64_t dd_kf_seg_keys(const struct dd_kf *kf, unsigned s,
			       uint64_t entries)
{
	uint64_t from = kf->kf_seg[s].ks_added;
	uint64_t to = s + 1 < kf->kf_nseg ? kf->kf_seg[s + 1].ks_added
					  : entries;

	return to > from ? to - from : 0;
}

/* Does a segment keep at least bits_per_key for `keys`? */
static bool dd_kf_seg_takes(const struct dd_kf_seg *ks, uint64_t keys,
			    unsigned bits_per_key)
{
	return ks->ks_nblocks >= DD_KF_MAX_BLOCKS ||
	       keys * bits_per_key <= ks->ks_nblocks * DD_KF_BLOCK * 8;
}

enum dd_kf_need { DD_KF_ROOM, DD_KF_GROW, DD_KF_REBUILD };

unsigned dd_kf_seg_max = DD_KF_SEG_MAX;

/* What kf, of meta's generation, needs before n more keys go into a DDT
 * of `entries`: nothing, a segment, or a rebuild (§4). */
static enum dd_kf_need dd_kf_need(const struct dd_kf *kf, uint64_t entries,
				  uint64_t n)
{
	unsigned last = kf->kf_nseg - 1;

	for (unsigned s = 0; s < kf->kf_nseg; s++)
		if (!dd_kf_seg_takes(&kf->kf_seg[s],
				     dd_kf_seg_keys(kf, s, entries),
				     DD_KF_OVER_BITS))
			return DD_KF_REBUILD;
	if (dd_kf_seg_takes(&kf->kf_seg[last],
			    dd_kf_seg_keys(kf, last, entries) + n,
			    DD_KF_FULL_BITS))
		return DD_KF_ROOM;
	return kf->kf_nseg < dd_kf_seg_max && kf->kf_nseg < DD_KF_SEG_MAX
		       ? DD_KF_GROW
		       : DD_KF_REBUILD;
}

static int dd_kf_meta(dd_txn *txn, dd_err *err, const char *key,
		      uint64_t *out);

/* A generation no file had before: meta ddt.filter.last counts them (a
 * withdrawn filter leaves ddt.filter 0, and this process may still map
 * its file). */
static int dd_kf_next_gen(dd_txn *txn, dd_err *err, uint64_t *gen)
{
	uint64_t last = 0;
	int rc = dd_kf_meta(txn, err, "ddt.filter", gen);

	if (!rc)
		rc = dd_kf_meta(txn, err, "ddt.filter.last", &last);
	if (!rc)
		*gen = (last > *gen ? last : *gen) + 1;
	return rc;
}

/* Meta names the file of kl's generation, in txn, and this process maps
 * it for txn's inserts (a file system that cannot map it shared: no
 * filter, no error). */
static int dd_kf_name(dd_txn *txn, dd_err *err, const struct dd_kf_layout *kl)
{
	int rc = dd_meta_put_u64(txn, err, "ddt.filter", kl->kl_gen);

	if (!rc)
		rc = dd_meta_put_u64(txn, err, "ddt.filter.last", kl->kl_gen);
	if (!rc)
		dd_kf_attach(txn->tx_db, dd_kf_map(txn->tx_db, kl->kl_gen));
	return rc;
}

/* The file of kl's generation, buf whole (its header written here),
 * replaces the one in force: a temporary file, a rename and a directory
 * sync; then meta names it. */
static int dd_kf_install(dd_txn *txn, dd_err *err,
			 const struct dd_kf_layout *kl, uint8_t *buf)
{
	const char *dir;
	int rc;

	if (mdb_env_get_path(txn->tx_db->db_env, &dir) != 0)
		return dd_err_set(err, DD_EIO, "lmdb: no catalog path");
	dd_kf_header(buf, kl);
	rc = dd_io_replace_file(err, dir, DD_KF_FILE, buf,
				(size_t)dd_kf_file_size(kl));
	return rc ? rc : dd_kf_name(txn, err, kl);
}

/* Inside the write transaction txn -- no insert runs meanwhile --: the
 * filter of every hash the DDT holds, one segment sized for `keys`
 * (the DDT's entries, and those about to be added). */
static int dd_kf_rebuild(dd_txn *txn, dd_err *err, uint64_t keys)
{
	struct dd_kf_layout kl = {.kl_nseg = 1};
	struct dd_kf_build kb;
	uint8_t *buf;
	int rc = dd_kf_next_gen(txn, err, &kl.kl_gen);

	if (rc)
		return rc;
	kl.kl_nblocks[0] = dd_kf_blocks_for(keys);
	buf = dd_calloc(1, (size_t)dd_kf_file_size(&kl));
	if (!buf)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	memset(&kb, 0, sizeof(kb));
	{
		struct dd_kf view;

		dd_kf_lay_out(&view, buf, &kl);
		kb.kb_seg = view.kf_seg[0];
	}
	kb.kb_words = (uint64_t *)(void *)kb.kb_seg.ks_bits;
	/* order does not matter here: one cursor, not the runs' merge */
	rc = dd_ddt_scan(txn, err, dd_kf_build_one, &kb);
	dd_kf_build_end(&kb);
	for (uint64_t b = 0; !rc && b < kb.kb_seg.ks_nblocks; b++)
		dd_kf_block_seal(&kb.kb_seg, b);
	if (!rc)
		dd_ddt_census_done(txn, kb.kb_flagged);
	kl.kl_walked = kb.kb_n;
	if (!rc)
		rc = dd_kf_install(txn, err, &kl, buf);
	dd_free(buf);
	if (!rc) {
		txn->tx_kf_rebuilt = true;
		txn->tx_kf_holds = true;   /* the walk saw every commit */
	}
	return rc;
}

/* A block whose sum fails: the file was damaged since it was mapped.
 * The transaction adds to it no more, and withdraws it at its commit
 * (ddt.filter 0): the next writer rebuilds it. */
static void dd_kf_txn_damaged(dd_txn *txn)
{
	txn->tx_kf_damaged = true;
	txn->tx_kf_holds = false;
}

/* The new segment's sums, from `off` of fd: every block zero. */
static int dd_kf_write_zero_sums(dd_err *err, int fd, uint64_t off,
				 uint64_t nblocks)
{
	static const uint8_t zero[DD_KF_BLOCK];
	uint32_t sums[4096], le = htole32(dd_crc32c(0, zero, sizeof(zero)));
	int rc = 0;

	for (size_t i = 0; i < 4096; i++)
		sums[i] = le;
	for (uint64_t b = 0; !rc && b < nblocks; b += 4096) {
		uint64_t n = nblocks - b < 4096 ? nblocks - b : 4096;

		rc = dd_io_pwrite_full(err, fd, sums, (size_t)n * 4, off + b * 4,
				       DD_KF_FILE);
	}
	return rc;
}

/* Inside the write transaction txn, whose filter kf holds every key of
 * the commit it starts from: the same file grown by one segment, for
 * `keys`, without a walk of the DDT (format/kfilter.md §4).  The
 * segments in force stay where they are, untouched: the new one is
 * appended, synced, and only then does the header name it, as a new
 * generation, and meta in txn after it.  A crash between leaves a file
 * whose size or generation is not meta's: rebuilt. */
static int dd_kf_grow(dd_txn *txn, dd_err *err, const struct dd_kf *kf,
		      uint64_t entries, uint64_t keys)
{
	struct dd_kf_layout kl = {.kl_nseg = kf->kf_nseg + 1,
				  .kl_walked = kf->kf_walked};
	uint8_t h[DD_KF_HDR_SIZE];
	char path[4300];
	struct stat st;
	uint64_t nb;
	int fd, rc = dd_kf_next_gen(txn, err, &kl.kl_gen);

	if (rc)
		return rc;
	/* the segments in force are checked whole (a CRC pass over the
	 * file, milliseconds): a damaged one is withdrawn now, not grown */
	for (unsigned s = 0; s < kf->kf_nseg; s++) {
		if (!dd_kf_seg_ok(&kf->kf_seg[s])) {
			dd_kf_txn_damaged(txn);
			return 0;
		}
		kl.kl_nblocks[s] = kf->kf_seg[s].ks_nblocks;
		kl.kl_added[s] = kf->kf_seg[s].ks_added;
	}
	nb = kl.kl_nblocks[kf->kf_nseg] = dd_kf_blocks_for(keys);
	kl.kl_added[kf->kf_nseg] = entries;
	if (dd_kf_path(txn->tx_db, path, sizeof(path)) != 0)
		return dd_err_set(err, DD_EINVAL, "%s: path too long",
				  DD_KF_FILE);
	fd = dd_io_open(err, path, O_RDWR | O_CLOEXEC, 0);
	if (fd < 0)
		return fd;
	/* the file this process maps, as it mapped it; if not -- replaced
	 * or cut under it -- it is not the filter in force: withdrawn */
	if (fstat(fd, &st) != 0 || st.st_ino != kf->kf_ino ||
	    st.st_dev != kf->kf_dev || (uint64_t)st.st_size != kf->kf_len) {
		dd_io_close(fd);
		dd_kf_txn_damaged(txn);
		return 0;
	}
	rc = dd_io_ftruncate(err, fd, kf->kf_len + dd_kf_seg_size(nb),
			     DD_KF_FILE);
	if (!rc)
		rc = dd_kf_write_zero_sums(err, fd,
					   kf->kf_len + nb * DD_KF_BLOCK, nb);
	if (!rc)
		rc = dd_io_fdatasync(err, fd, DD_KF_FILE);
	if (!rc) {
		dd_kf_header(h, &kl);
		rc = dd_io_pwrite_full(err, fd, h, sizeof(h), 0, DD_KF_FILE);
	}
	if (!rc)
		rc = dd_io_fdatasync(err, fd, DD_KF_FILE);
	dd_io_close(fd);
	if (!rc)
		rc = dd_kf_name(txn, err, &kl);
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

static int dd_kf_txn_filter(dd_txn *txn, dd_err *err, struct dd_kf **out);

/* Makes room in the filter txn adds to for n more keys (format/kfilter.md
 * §4): a segment, or a rebuild.  With mend (a writer's open), also
 * rebuilds a filter missing, stale, damaged or whose chain of commits is
 * broken; without (a flush), leaves those to the next writer's open. */
static int dd_kf_reserve(dd_txn *txn, dd_err *err, uint64_t n, bool mend)
{
	uint64_t entries;
	struct dd_kf *kf;
	enum dd_kf_need need;
	int rc = dd_kf_txn_filter(txn, err, &kf);

	if (rc || !txn->tx_db->db_kf_enabled || txn->tx_kf_damaged)
		return rc;
	rc = dd_ddt_count(txn, err, &entries);
	if (rc)
		return rc;
	if (!kf || !txn->tx_kf_holds)
		need = mend ? DD_KF_REBUILD : DD_KF_ROOM;
	else
		need = dd_kf_need(kf, entries, n);
	switch (need) {
	case DD_KF_GROW:
		return dd_kf_grow(txn, err, kf, entries, entries + n);
	case DD_KF_REBUILD:
		return dd_kf_rebuild(txn, err, entries + n);
	default:
		return 0;
	}
}

/* Maps the newest segment's pages writable ahead of n inserts that will
 * touch most of them.  Each first write to a page of the shared map
 * since the last sync is a page fault (the kernel tracks dirty pages);
 * a flush of 262,144 keys into a 16 MiB segment took 4,096 of them, one
 * at a time, where one madvise takes them all.  Only when n keys would
 * touch most pages anyway (a 4 KiB page holds 64 blocks, a key sets
 * bits in one): the pages made writable are written at the sync,
 * changed or not.  A hint: a kernel without MADV_POPULATE_WRITE (before 5.14)
 * faults them one by one as before. */
static void dd_kf_populate(const struct dd_kf *kf, uint64_t n)
{
#ifdef MADV_POPULATE_WRITE
	const struct dd_kf_seg *ks = &kf->kf_seg[kf->kf_nseg - 1];
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo, hi;

	if (n < 2 * (ks->ks_nblocks / (page / DD_KF_BLOCK)))
		return;
	/* the segment's bits and sums are contiguous (format/kfilter.md §1) */
	lo = (uintptr_t)ks->ks_bits & ~(page - 1);
	hi = ((uintptr_t)(ks->ks_sums + ks->ks_nblocks * 4) + page - 1) &
	     ~(page - 1);
	(void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
#else
	(void)kf, (void)n;
#endif
}

int dd_kf_txn_reserve(dd_txn *txn, dd_err *err, uint64_t n)
{
	struct dd_kf *kf;
	int rc = dd_kf_reserve(txn, err, n, false);

	if (!rc)
		rc = dd_kf_txn_filter(txn, err, &kf);
	if (!rc && kf && !txn->tx_kf_damaged)
		dd_kf_populate(kf, n);
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

/* Whether the filter of meta's generation is mapped (mapping it if need
 * be) and has room for the DDT as it is. */
static bool dd_kf_current(dd_db *db, uint64_t gen, uint64_t entries)
{
	struct dd_kf *kf = atomic_load(&db->db_kf);

	if (!kf || kf->kf_gen != gen || atomic_load(&db->db_kf_detached)) {
		kf = gen ? dd_kf_map(db, gen) : NULL;
		if (!kf)
			return false;
		dd_kf_attach(db, kf);
	}
	return dd_kf_need(kf, entries, 0) == DD_KF_ROOM;
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
	/* rebuild or grow, unless another process did while this one
	 * waited for the write transaction; a catalog without the
	 * unflagged claim (an older build's) gets it from the rebuild's
	 * walk, or one of its own */
	rc = dd_txn_begin(db, err, true, &txn);
	if (rc)
		return rc;
	rc = dd_kf_reserve(txn, err, 0, true);
	if (!rc && !txn->tx_kf_rebuilt)
		rc = dd_ddt_unflagged_known(txn, err, &known);
	if (!rc && !txn->tx_kf_rebuilt && !known)
		rc = dd_ddt_census(txn, err, NULL);
	if (rc) {
		dd_txn_abort(txn);
		return rc;
	}
	return dd_txn_commit(txn, err);
}

bool dd_db_kf_maybe(dd_db *db, const uint8_t hash[DD_HASH_SIZE])
{
	struct dd_kf *kf = atomic_load_explicit(&db->db_kf,
						memory_order_acquire);

	return !kf || dd_kf_test(kf, dd_kf_pos_of(hash));
}

void dd_db_kf_prefetch(dd_db *db, const uint8_t hash[DD_HASH_SIZE])
{
	struct dd_kf *kf = atomic_load_explicit(&db->db_kf,
						memory_order_acquire);
	struct dd_kf_pos p = dd_kf_pos_of(hash);

	for (unsigned s = 0; kf && s < kf->kf_nseg; s++) {
		const struct dd_kf_seg *ks = &kf->kf_seg[s];

		__builtin_prefetch((const void *)(ks->ks_bits +
						  dd_kf_block(ks, p) * 8));
	}
}

int dd_kf_txn_info(dd_txn *txn, dd_err *err, dd_kf_info *out)
{
	struct dd_kf_layout kl;
	struct stat st;
	uint64_t gen;
	int fd, rc = dd_kf_meta(txn, err, "ddt.filter", &gen);

	memset(out, 0, sizeof(*out));
	if (rc || !gen)
		return rc;
	fd = dd_kf_open_gen(txn->tx_db, gen, O_RDONLY, &kl, &st);
	if (fd < 0)
		return 0;
	close(fd);
	out->ki_segments = kl.kl_nseg;
	out->ki_bytes = (uint64_t)st.st_size;
	for (unsigned s = 0; s < kl.kl_nseg; s++)
		out->ki_bits += kl.kl_nblocks[s] * DD_KF_BLOCK * 8;
	return 0;
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

int dd_kf_txn_test_add(dd_txn *txn, dd_err *err, const uint8_t *hash,
		       bool *absent)
{
	struct dd_kf_pos p = dd_kf_pos_of(hash);
	struct dd_kf *kf;
	uint64_t b;
	int rc = dd_kf_txn_filter(txn, err, &kf);

	*absent = false;
	if (rc || !kf)
		return rc;
	/* the answer rests on the hash's block in every segment */
	for (unsigned s = 0; s < kf->kf_nseg; s++)
		if (!dd_kf_block_ok(&kf->kf_seg[s],
				    dd_kf_block(&kf->kf_seg[s], p))) {
			dd_kf_txn_damaged(txn);
			return 0;
		}
	*absent = txn->tx_kf_holds && !dd_kf_test(kf, p);
	if (dd_kf_set(kf, p, &b)) {
		dd_kf_block_seal(&kf->kf_seg[kf->kf_nseg - 1], b);
		txn->tx_kf_dirty = kf;
	}
	return 0;
}

void dd_kf_txn_prefetch(dd_txn *txn, const uint8_t *hash)
{
	struct dd_kf *kf = atomic_load(&txn->tx_db->db_kf);
	struct dd_kf_pos p = dd_kf_pos_of(hash);

	if (!txn->tx_kf_checked || !kf)
		return;
	for (unsigned s = 0; s < kf->kf_nseg; s++) {
		const struct dd_kf_seg *ks = &kf->kf_seg[s];
		uint64_t b = dd_kf_block(ks, p);

		__builtin_prefetch((const void *)(ks->ks_bits + b * 8), 1);
		__builtin_prefetch(ks->ks_sums + b * 4, 1);
	}
}

/* An insert's: only the newest segment's block is read, and only when
 * a bit is missing there (a flush asked dd_kf_txn_test_add first, which
 * set them): its sum is checked before the bits change and the sum is
 * rewritten, so a damaged block is never sealed as good. */
int dd_kf_txn_add(dd_txn *txn, dd_err *err, const uint8_t *hash)
{
	struct dd_kf_pos p = dd_kf_pos_of(hash);
	struct dd_kf_seg *ks;
	struct dd_kf *kf;
	uint64_t b;
	int rc = dd_kf_txn_filter(txn, err, &kf);

	if (rc || !kf)
		return rc;
	ks = &kf->kf_seg[kf->kf_nseg - 1];
	b = dd_kf_block(ks, p);
	if (dd_kf_block_has(ks->ks_bits + b * 8, &p))
		return 0;
	if (!dd_kf_block_ok(ks, b)) {
		dd_kf_txn_damaged(txn);
		return 0;
	}
	dd_kf_set(kf, p, &b);
	dd_kf_block_seal(ks, b);
	txn->tx_kf_dirty = kf;
	return 0;
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
