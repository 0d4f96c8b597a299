/*
 * table.c -- the scanner's in-RAM table of distinct blocks.
 *
 * Open addressing with linear probing over one flat array of 48-byte
 * entries: no per-entry allocation, so the memory is exactly the budget
 * and a spill can sort the array in place.  Keys are SHA-256 digests, so
 * any 8 bytes are uniform; the slot comes from bytes 8..15 because sample
 * mode keeps only hashes whose *first* bits are zero, and a slot taken from
 * those would crowd the table's low end.  The slot is a multiply-shift
 * ("fastrange") of those bytes, so the capacity need not be a power of two
 * and the whole budget is usable.  A table starts at 64 Ki slots and
 * doubles (dd_scan_table_reserve) while the old and the new array fit the
 * budget together, so a small scan touches little memory; once a spill
 * has emptied it, it takes its whole budget.  The load stays at or under 3/4: at that
 * load a miss probes ~8.5 slots on average (Knuth 6.4), all in one or two
 * cache lines per slot.
 */
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/endian.h"
#include "scan/scan.h"

static size_t dd_tb_home(const dd_scan_table *t, const uint8_t *hash)
{
	uint64_t h = dd_get_le64(hash + 8);

	return (size_t)(((unsigned __int128)h * t->tb_cap) >> 64);
}

static size_t dd_tb_next(const dd_scan_table *t, size_t i)
{
	return i + 1 == t->tb_cap ? 0 : i + 1;
}

/* Slots a table starts with (3 MiB); it doubles up to its budget. */
#define DD_TB_START_SLOTS ((size_t)64 << 10)

static int dd_tb_alloc(dd_scan_table *t, size_t cap)
{
	t->tb_ent = dd_calloc(cap, sizeof(dd_scan_ent));
	if (!t->tb_ent)
		return DD_ENOMEM;
	t->tb_cap = cap;
	t->tb_max = cap / 4 * 3 + (cap % 4) * 3 / 4;
	t->tb_count = 0;
	return 0;
}

int dd_scan_table_init(dd_scan_table *t, size_t budget, size_t min_entries)
{
	size_t need = min_entries + min_entries / 3 + 2;

	memset(t, 0, sizeof(*t));
	t->tb_limit = budget / sizeof(dd_scan_ent);
	if (t->tb_limit < need)
		t->tb_limit = need;
	return dd_tb_alloc(t, t->tb_limit < DD_TB_START_SLOTS ? t->tb_limit
				: need > DD_TB_START_SLOTS ? need
				: DD_TB_START_SLOTS);
}

/* Moves every entry into a fresh array of cap slots. */
static int dd_tb_rehash(dd_scan_table *t, size_t cap)
{
	dd_scan_table old = *t;
	int rc = dd_tb_alloc(t, cap);

	if (rc) {
		*t = old;
		return rc;
	}
	for (size_t i = 0; i < old.tb_cap; i++) {
		const dd_scan_ent *e = &old.tb_ent[i];
		size_t k;

		if (e->se_refcnt == 0)
			continue;
		for (k = dd_tb_home(t, e->se_hash); t->tb_ent[k].se_refcnt;
		     k = dd_tb_next(t, k))
			;
		t->tb_ent[k] = *e;
		t->tb_count++;
	}
	dd_free(old.tb_ent);
	return 0;
}

int dd_scan_table_reserve(dd_scan_table *t, size_t more)
{
	while (t->tb_count + more > t->tb_max && t->tb_cap < t->tb_limit) {
		/* old and new arrays together stay within the budget */
		size_t cap = t->tb_cap * 2 < t->tb_limit - t->tb_cap
				     ? t->tb_cap * 2 : t->tb_limit - t->tb_cap;
		int rc;

		if (cap <= t->tb_cap)
			break;
		rc = dd_tb_rehash(t, cap);
		if (rc)
			return rc;
	}
	return 0;
}

void dd_scan_table_fini(dd_scan_table *t)
{
	dd_free(t->tb_ent);
	memset(t, 0, sizeof(*t));
}

int dd_scan_table_clear(dd_scan_table *t)
{
	if (t->tb_cap == t->tb_limit) {
		memset(t->tb_ent, 0, t->tb_cap * sizeof(dd_scan_ent));
		t->tb_count = 0;
		return 0;
	}
	/* emptied after a spill: now the whole budget is free for one array */
	dd_free(t->tb_ent);
	return dd_tb_alloc(t, t->tb_limit);
}

void dd_scan_table_upsert(dd_scan_table *t, const uint8_t *hash,
			  size_t *slot, bool *found)
{
	size_t i = dd_tb_home(t, hash);

	for (;;) {
		dd_scan_ent *e = &t->tb_ent[i];

		if (e->se_refcnt == 0) {
			memcpy(e->se_hash, hash, DD_HASH_SIZE);
			e->se_lsize = 0;
			e->se_psize = 0;
			t->tb_count++;
			*slot = i;
			*found = false;
			return;
		}
		if (!memcmp(e->se_hash, hash, DD_HASH_SIZE)) {
			*slot = i;
			*found = true;
			return;
		}
		i = dd_tb_next(t, i);
	}
}

static int dd_ent_cmp(const void *a, const void *b)
{
	return memcmp(((const dd_scan_ent *)a)->se_hash,
		      ((const dd_scan_ent *)b)->se_hash, DD_HASH_SIZE);
}

void dd_scan_table_sort(dd_scan_table *t)
{
	size_t n = 0;

	for (size_t i = 0; i < t->tb_cap; i++)
		if (t->tb_ent[i].se_refcnt)
			t->tb_ent[n++] = t->tb_ent[i];
	qsort(t->tb_ent, n, sizeof(dd_scan_ent), dd_ent_cmp);
}

bool dd_scan_sampled(const uint8_t *hash, unsigned shift)
{
	unsigned i = 0;

	if (shift > 8 * DD_HASH_SIZE)
		return false;
	for (; shift >= 8; shift -= 8)
		if (hash[i++])
			return false;
	return shift == 0 || i >= DD_HASH_SIZE || !(hash[i] >> (8 - shift));
}

/* True when slot k lies cyclically in (i, j]. */
static bool dd_tb_between(size_t i, size_t k, size_t j)
{
	return i <= j ? (i < k && k <= j) : (i < k || k <= j);
}

/* Deletes slot i with backward shift (Knuth 6.4 Algorithm R): later
 * entries of the probe run move up so that no lookup meets a gap. */
static void dd_tb_delete(dd_scan_table *t, size_t i)
{
	size_t j = i;

	for (;;) {
		j = dd_tb_next(t, j);
		if (t->tb_ent[j].se_refcnt == 0)
			break;
		if (dd_tb_between(i, dd_tb_home(t, t->tb_ent[j].se_hash), j))
			continue;
		t->tb_ent[i] = t->tb_ent[j];
		i = j;
	}
	memset(&t->tb_ent[i], 0, sizeof(dd_scan_ent));
	t->tb_count--;
}

void dd_scan_table_subsample(dd_scan_table *t, unsigned shift)
{
	/* A deletion may pull a not-yet-seen entry into slot i, so i only
	 * moves on once its slot holds a kept entry or nothing.  Entries
	 * only ever move to slots at or after i (cyclically), and those
	 * that wrap around were already kept, so one sweep suffices. */
	for (size_t i = 0; i < t->tb_cap;) {
		dd_scan_ent *e = &t->tb_ent[i];

		if (e->se_refcnt && !dd_scan_sampled(e->se_hash, shift))
			dd_tb_delete(t, i);
		else
			i++;
	}
}
