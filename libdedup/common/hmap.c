/*
 * hmap.c -- hash -> u64 table: open addressing in RAM, spilling to disk.
 *
 * Keys are SHA-256 digests, so their first 8 bytes are already uniformly
 * spread: they index the table directly, no further hashing.  The RAM
 * table doubles until it would pass mem_limit; after that, new entries go
 * to a spill file organised as a second, on-disk open-addressing table of
 * fixed 40-byte slots (key, value) read and written with pread/pwrite, so
 * memory stays bounded whatever the number of entries.  The disk table
 * doubles by rehashing into a new file when it is 3/4 full.
 */
#include <fcntl.h>
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

typedef struct dd_hslot {
	uint8_t hs_key[32];
	uint64_t hs_val;
	uint8_t hs_used;
} dd_hslot;

typedef struct dd_hdisk {
	int hd_fd;
	uint64_t hd_slots;   /* power of two */
	uint64_t hd_count;
} dd_hdisk;

struct dd_hmap {
	dd_hslot *hm_slot;
	uint64_t hm_cap;     /* power of two */
	uint64_t hm_count;
	uint64_t hm_limit;   /* bytes */
	char hm_tmpdir[512];
	dd_hdisk hm_disk;    /* hd_fd < 0 until the first spill */
};

static uint64_t dd_hkey(const uint8_t key[32])
{
	return dd_get_le64(key);
}

int dd_hmap_new(dd_hmap **out, dd_err *err, uint64_t mem_limit,
		const char *tmpdir)
{
	dd_hmap *m = dd_calloc(1, sizeof(*m));

	if (!m)
		return dd_err_set(err, DD_ENOMEM, "out of memory");
	m->hm_limit = mem_limit ? mem_limit : (uint64_t)16 << 20;
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
	uint64_t i = dd_hkey(key) & (cap - 1);

	while (slot[i].hs_used && memcmp(slot[i].hs_key, key, 32) != 0)
		i = (i + 1) & (cap - 1);
	return &slot[i];
}

static int dd_hram_grow(dd_hmap *m)
{
	uint64_t ncap = m->hm_cap * 2;
	dd_hslot *ns;

	if (ncap * sizeof(dd_hslot) > m->hm_limit)
		return 1; /* over the limit: spill instead */
	ns = dd_calloc(ncap, sizeof(*ns));
	if (!ns)
		return 1;
	for (uint64_t i = 0; i < m->hm_cap; i++)
		if (m->hm_slot[i].hs_used)
			*dd_hram_find(ns, ncap, m->hm_slot[i].hs_key) =
				m->hm_slot[i];
	dd_free(m->hm_slot);
	m->hm_slot = ns;
	m->hm_cap = ncap;
	return 0;
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
	uint64_t i = dd_hkey(key) & (d->hd_slots - 1);

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

/* Doubles the disk table: every entry rehashed into a new file. */
static int dd_hdisk_grow(dd_hmap *m, dd_err *err)
{
	dd_hdisk old = m->hm_disk;
	uint8_t buf[DD_HMAP_SLOT];
	static const uint8_t zero[32];
	int rc = dd_hdisk_create(m, err, old.hd_slots * 2, &m->hm_disk.hd_fd);

	if (rc) {
		m->hm_disk = old;
		return rc;
	}
	m->hm_disk.hd_slots = old.hd_slots * 2;
	m->hm_disk.hd_count = 0;
	for (uint64_t i = 0; !rc && i < old.hd_slots; i++) {
		rc = dd_io_pread_full(err, old.hd_fd, buf, sizeof(buf),
				      i * DD_HMAP_SLOT, "hmap spill");
		if (!rc && (memcmp(buf, zero, 32) || dd_get_le64(buf + 32)))
			rc = dd_hdisk_put(m, err, buf,
					  dd_get_le64(buf + 32) - 1);
	}
	dd_io_close(old.hd_fd);
	return rc;
}

static int dd_hdisk_put(dd_hmap *m, dd_err *err, const uint8_t key[32],
			uint64_t val)
{
	dd_hdisk *d = &m->hm_disk;
	uint64_t slot, old;
	int found, rc;

	if (d->hd_fd < 0) {
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
	if (!rc && !found)
		d->hd_count++;
	return rc;
}

/* ---- public -------------------------------------------------------------*/

int dd_hmap_put(dd_hmap *m, dd_err *err, const uint8_t key[32], uint64_t val)
{
	dd_hslot *s = dd_hram_find(m->hm_slot, m->hm_cap, key);

	if (s->hs_used) {
		s->hs_val = val;
		return 0;
	}
	/* keep RAM at most 3/4 full; when it cannot grow, go to disk */
	if ((m->hm_count + 1) * 4 > m->hm_cap * 3) {
		if (dd_hram_grow(m) != 0)
			return dd_hdisk_put(m, err, key, val);
		s = dd_hram_find(m->hm_slot, m->hm_cap, key);
	}
	memcpy(s->hs_key, key, 32);
	s->hs_val = val;
	s->hs_used = 1;
	m->hm_count++;
	return 0;
}

int dd_hmap_get(dd_hmap *m, dd_err *err, const uint8_t key[32], uint64_t *val)
{
	dd_hslot *s = dd_hram_find(m->hm_slot, m->hm_cap, key);
	uint64_t slot;
	int found, rc;

	if (s->hs_used) {
		*val = s->hs_val;
		return 0;
	}
	if (m->hm_disk.hd_fd < 0)
		return DD_ENOENT;
	rc = dd_hdisk_find(&m->hm_disk, err, key, &slot, val, &found);
	if (rc)
		return rc;
	return found ? 0 : DD_ENOENT;
}
