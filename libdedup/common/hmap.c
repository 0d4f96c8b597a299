/*
 * hmap.c -- hash -> u64 table: open addressing in RAM, spilling to disk.
 *
 * Keys are SHA-256 digests, so their bytes are already uniformly spread:
 * they index the table directly, no further hashing.  A slot is 40 bytes
 * in RAM and in the spill file alike: the key, then the value + 1
 * (little-endian), so that an all-zero slot is empty (values are below
 * UINT64_MAX).
 *
 * The RAM table grows (doubling, and last to whatever fits) within 7/8
 * of mem_limit; after that, new entries go to a spill file organised as
 * a second, on-disk open-addressing table read and written with
 * pread/pwrite, so memory stays bounded whatever the number of entries.
 * The disk table doubles by rehashing into a new file when it is 3/4
 * full.  The last 1/8 of mem_limit is a Bloom filter of the spilled keys:
 * a stream's lookups are mostly of blocks not sent yet, and each such
 * lookup of the spill file cost a pread per probed slot -- a fifth of a
 * 1 GiB send of 4 KiB blocks when 48-byte RAM slots in power-of-two
 * tables spilled it past 196,608 entries.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dedup.h"
#include "common/alloc.h"
#include "common/endian.h"
#include "common/hmap.h"
#include "common/io.h"

#define DD_HMAP_SLOT 40
#define DD_HMAP_FILTER_SHARE 8   /* 1/8 of mem_limit: the spill's filter */
#define DD_HMAP_FILTER_PROBES 4
#define DD_HMAP_GROW_READ 4096   /* slots read at once by a disk rehash */

/* The RAM slot: the spill file's 40 bytes, aligned. */
typedef struct dd_hslot {
	uint8_t hs_key[32];
	uint64_t hs_val1;    /* value + 1; 0: empty */
} dd_hslot;

typedef struct dd_hdisk {
	int hd_fd;
	uint64_t hd_slots;   /* power of two */
	uint64_t hd_count;
} dd_hdisk;

struct dd_hmap {
	dd_hslot *hm_slot;
	uint64_t hm_cap;     /* slots, at most 2^32 */
	uint64_t hm_count;
	uint64_t hm_max_cap; /* what 7/8 of the limit holds */
	uint64_t hm_limit;   /* bytes */
	uint64_t *hm_filter; /* bits of spilled keys; NULL until a spill */
	uint64_t hm_filter_bits;  /* at most 2^32 */
	char hm_tmpdir[512];
	dd_hdisk hm_disk;    /* hd_fd < 0 until the first spill */
};

/* The slot a key starts its probe at, of cap (<= 2^32): the product of
 * the key's first 32 bits and cap, scaled back, so any cap will do. */
static uint64_t dd_hidx(const uint8_t key[32], uint64_t cap)
{
	return ((uint64_t)dd_get_le32(key) * cap) >> 32;
}

int dd_hmap_new(dd_hmap **out, dd_err *err, uint64_t mem_limit,
		const char *tmpdir)
{
	dd_hmap *m = dd_calloc(1, sizeof(*m));

	if (!m)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	m->hm_limit = mem_limit ? mem_limit : (uint64_t)16 << 20;
	m->hm_max_cap = (m->hm_limit - m->hm_limit / DD_HMAP_FILTER_SHARE) /
			sizeof(dd_hslot);
	if (m->hm_max_cap > ((uint64_t)1 << 32))
		m->hm_max_cap = (uint64_t)1 << 32;
	if (!tmpdir)
		tmpdir = getenv("TMPDIR");
	snprintf(m->hm_tmpdir, sizeof(m->hm_tmpdir), "%s",
		 tmpdir && *tmpdir ? tmpdir : "/tmp");
	m->hm_disk.hd_fd = -1;
	m->hm_cap = 1024;
	m->hm_slot = dd_calloc(m->hm_cap, sizeof(*m->hm_slot));
	if (!m->hm_slot) {
		dd_free(m);
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	}
	*out = m;
	return 0;
}

void dd_hmap_free(dd_hmap *m)
{
	if (!m)
		return;
	if (m->hm_disk.hd_fd >= 0)
		dd_io_close(m->hm_disk.hd_fd);
	dd_free(m->hm_filter);
	dd_free(m->hm_slot);
	dd_free(m);
}

uint64_t dd_hmap_count(const dd_hmap *m)
{
	return m->hm_count + m->hm_disk.hd_count;
}

/* Finds key's slot in RAM: the match, or the empty slot ending its run. */
static dd_hslot *dd_hram_find(dd_hslot *slot, uint64_t cap,
			      const uint8_t key[32])
{
	uint64_t i = dd_hidx(key, cap);

	while (slot[i].hs_val1 && memcmp(slot[i].hs_key, key, 32) != 0)
		i = i + 1 == cap ? 0 : i + 1;
	return &slot[i];
}

static int dd_hram_grow(dd_hmap *m)
{
	uint64_t ncap = m->hm_cap * 2;
	dd_hslot *ns;

	if (ncap > m->hm_max_cap)
		ncap = m->hm_max_cap;
	/* less than a quarter more is not worth a rehash: spill instead */
	if (ncap < m->hm_cap + m->hm_cap / 4)
		return 1;
	ns = dd_calloc(ncap, sizeof(*ns));
	if (!ns)
		return 1;
	for (uint64_t i = 0; i < m->hm_cap; i++)
		if (m->hm_slot[i].hs_val1)
			*dd_hram_find(ns, ncap, m->hm_slot[i].hs_key) =
				m->hm_slot[i];
	dd_free(m->hm_slot);
	m->hm_slot = ns;
	m->hm_cap = ncap;
	return 0;
}

/* ---- the spill's filter -----------------------------------------------------*/

/* The bit of the spill's filter for probe j of key: from the key's bytes
 * past the first 8 (the tables' indexes), 4 bytes a probe. */
static uint64_t dd_hfilter_bit(const dd_hmap *m, const uint8_t key[32],
			       unsigned j)
{
	return ((uint64_t)dd_get_le32(key + 8 + 4 * j) * m->hm_filter_bits) >>
	       32;
}

static int dd_hfilter_init(dd_hmap *m, dd_err *err)
{
	uint64_t words = m->hm_limit / DD_HMAP_FILTER_SHARE / 8;

	if (words < 1)
		words = 1;
	if (words > ((uint64_t)1 << 26))   /* 2^32 bits */
		words = (uint64_t)1 << 26;
	m->hm_filter = dd_calloc(words, sizeof(uint64_t));
	if (!m->hm_filter)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	m->hm_filter_bits = words * 64;
	return 0;
}

static void dd_hfilter_add(dd_hmap *m, const uint8_t key[32])
{
	for (unsigned j = 0; j < DD_HMAP_FILTER_PROBES; j++) {
		uint64_t b = dd_hfilter_bit(m, key, j);

		m->hm_filter[b / 64] |= (uint64_t)1 << (b % 64);
	}
}

/* false: key was never spilled. */
static bool dd_hfilter_maybe(const dd_hmap *m, const uint8_t key[32])
{
	for (unsigned j = 0; j < DD_HMAP_FILTER_PROBES; j++) {
		uint64_t b = dd_hfilter_bit(m, key, j);

		if (!(m->hm_filter[b / 64] & ((uint64_t)1 << (b % 64))))
			return false;
	}
	return true;
}

/* ---- the spill file -------------------------------------------------------*/

static int dd_hdisk_create(dd_hmap *m, dd_err *err, uint64_t slots, int *fd)
{
	char path[600];
	int rc;

	snprintf(path, sizeof(path), "%s/libdedup-hmap-XXXXXX", m->hm_tmpdir);
	*fd = mkstemp(path);
	if (*fd < 0)
		return dd_err_set(err, DD_EIO, "cannot create a spill file in %s",
				  m->hm_tmpdir);
	unlink(path); /* anonymous: gone with the process */
	rc = dd_io_ftruncate(err, *fd, slots * DD_HMAP_SLOT, "hmap spill");
	if (rc) {
		dd_io_close(*fd);
		*fd = -1;
	}
	return rc;
}

/* Probes the disk table; *slot_out gets the matching or empty slot. */
static int dd_hdisk_find(dd_hdisk *d, dd_err *err, const uint8_t key[32],
			 uint64_t *slot_out, uint64_t *val, int *found)
{
	uint8_t buf[DD_HMAP_SLOT];
	static const uint8_t zero[32];
	uint64_t i = dd_get_le64(key) & (d->hd_slots - 1);

	for (;;) {
		int rc = dd_io_pread_full(err, d->hd_fd, buf, sizeof(buf),
					  i * DD_HMAP_SLOT, "hmap spill");

		if (rc)
			return rc;
		/* an empty slot is all zero; a used one never is, because
		 * the value is stored + 1 (values are < UINT64_MAX) */
		if (!memcmp(buf, zero, 32) && dd_get_le64(buf + 32) == 0) {
			*found = 0;
			*slot_out = i;
			return 0;
		}
		if (!memcmp(buf, key, 32)) {
			*found = 1;
			*slot_out = i;
			*val = dd_get_le64(buf + 32) - 1;
			return 0;
		}
		i = (i + 1) & (d->hd_slots - 1);
	}
}

static int dd_hdisk_write(dd_hdisk *d, dd_err *err, uint64_t slot,
			  const uint8_t key[32], uint64_t val)
{
	uint8_t buf[DD_HMAP_SLOT];

	memcpy(buf, key, 32);
	dd_put_le64(buf + 32, val + 1);
	return dd_io_pwrite_full(err, d->hd_fd, buf, sizeof(buf),
				 slot * DD_HMAP_SLOT, "hmap spill");
}

static int dd_hdisk_put(dd_hmap *m, dd_err *err, const uint8_t key[32],
			uint64_t val);

/* Doubles the disk table: every entry rehashed into a new file, the old
 * one read DD_HMAP_GROW_READ slots at a time. */
static int dd_hdisk_grow(dd_hmap *m, dd_err *err)
{
	dd_hdisk old = m->hm_disk;
	static const uint8_t zero[DD_HMAP_SLOT];
	uint8_t *buf = dd_malloc((size_t)DD_HMAP_GROW_READ * DD_HMAP_SLOT);
	int rc;

	if (!buf)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	rc = dd_hdisk_create(m, err, old.hd_slots * 2, &m->hm_disk.hd_fd);
	if (rc) {
		m->hm_disk = old;
		dd_free(buf);
		return rc;
	}
	m->hm_disk.hd_slots = old.hd_slots * 2;
	m->hm_disk.hd_count = 0;
	for (uint64_t i = 0; !rc && i < old.hd_slots; i += DD_HMAP_GROW_READ) {
		uint64_t n = old.hd_slots - i < DD_HMAP_GROW_READ
				     ? old.hd_slots - i : DD_HMAP_GROW_READ;

		rc = dd_io_pread_full(err, old.hd_fd, buf, n * DD_HMAP_SLOT,
				      i * DD_HMAP_SLOT, "hmap spill");
		for (uint64_t j = 0; !rc && j < n; j++) {
			const uint8_t *sl = buf + j * DD_HMAP_SLOT;

			if (memcmp(sl, zero, DD_HMAP_SLOT) != 0)
				rc = dd_hdisk_put(m, err, sl,
						  dd_get_le64(sl + 32) - 1);
		}
	}
	dd_io_close(old.hd_fd);
	dd_free(buf);
	return rc;
}

static int dd_hdisk_put(dd_hmap *m, dd_err *err, const uint8_t key[32],
			uint64_t val)
{
	dd_hdisk *d = &m->hm_disk;
	uint64_t slot, old;
	int found, rc;

	if (d->hd_fd < 0) {
		rc = m->hm_filter ? 0 : dd_hfilter_init(m, err);
		if (rc)
			return rc;
		d->hd_slots = 1u << 16;
		rc = dd_hdisk_create(m, err, d->hd_slots, &d->hd_fd);
		if (rc)
			return rc;
	}
	if ((d->hd_count + 1) * 4 > d->hd_slots * 3) {
		rc = dd_hdisk_grow(m, err);
		if (rc)
			return rc;
	}
	rc = dd_hdisk_find(d, err, key, &slot, &old, &found);
	if (!rc)
		rc = dd_hdisk_write(d, err, slot, key, val);
	if (!rc && !found) {
		d->hd_count++;
		dd_hfilter_add(m, key);
	}
	return rc;
}

/* ---- public -------------------------------------------------------------*/

int dd_hmap_put(dd_hmap *m, dd_err *err, const uint8_t key[32], uint64_t val)
{
	dd_hslot *s = dd_hram_find(m->hm_slot, m->hm_cap, key);

	if (s->hs_val1) {
		s->hs_val1 = val + 1;
		return 0;
	}
	/* keep RAM at most 3/4 full; when it cannot grow, go to disk */
	if ((m->hm_count + 1) * 4 > m->hm_cap * 3) {
		if (dd_hram_grow(m) != 0)
			return dd_hdisk_put(m, err, key, val);
		s = dd_hram_find(m->hm_slot, m->hm_cap, key);
	}
	memcpy(s->hs_key, key, 32);
	s->hs_val1 = val + 1;
	m->hm_count++;
	return 0;
}

int dd_hmap_get(dd_hmap *m, dd_err *err, const uint8_t key[32], uint64_t *val)
{
	dd_hslot *s = dd_hram_find(m->hm_slot, m->hm_cap, key);
	uint64_t slot;
	int found, rc;

	if (s->hs_val1) {
		*val = s->hs_val1 - 1;
		return 0;
	}
	if (m->hm_disk.hd_fd < 0 || !dd_hfilter_maybe(m, key))
		return DD_ENOENT;
	rc = dd_hdisk_find(&m->hm_disk, err, key, &slot, val, &found);
	if (rc)
		return rc;
	return found ? 0 : DD_ENOENT;
}
