/*
 * lmdb_page.c -- libFuzzer harness for dd_lm_page_verify (libdedup/catalog/
 * lmdb_page.c), the rules the whole-file check and the guard apply to
 * an LMDB page before LMDB reads it.
 *
 * Input: one selector byte (bits 0-1: tree kind mod 3, bit 2: leaf,
 * bit 3: expect another page number), two bytes of last page number
 * (LE), then the page (cut or zero-padded to 4096 bytes, in a buffer of
 * exactly that size so that ASan sees any read past it).  A page that
 * passes is then read the way LMDB reads it: every node's key and inline
 * value or child, and the guard's binary search (dd_lm_search, as
 * mdb_node_search) for the input's last bytes.  The harness aborts if a passing page breaks a promise of
 * dd_lm_page_verify: a node outside the page, keys out of order, a child
 * outside [2, last_pg].
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/lmdb_page.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_PSIZE 4096

static volatile uint64_t fz_sink;

static void fz_touch(const uint8_t *p, size_t n)
{
	uint64_t s = 0;

	for (size_t i = 0; i < n; i++)
		s += p[i];
	fz_sink += s;
}

static void fz_check_passed(const uint8_t *pg, uint64_t last_pg, bool leaf,
			    enum dd_lm_tree_kind kind)
{
	unsigned n = dd_lm_nkeys(pg);

	for (unsigned i = 0; i < n; i++) {
		const uint8_t *node = dd_lm_node(pg, i);
		size_t off = (size_t)(node - pg), ksize = dd_lm_node_ksize(node);

		if (off + LM_NODEHDR + ksize > FZ_PSIZE)
			abort();
		fz_touch(dd_lm_node_key(node), ksize);
		if (!leaf) {
			uint64_t child = dd_lm_node_child(node);

			if (child < 2 || child > last_pg)
				abort();
		} else if (dd_lm_node_flags(node) & LM_F_BIGDATA) {
			fz_touch(dd_lm_node_key(node) + ksize, 8);
		} else {
			size_t dsize = dd_lm_node_dsize(node);

			if (off + LM_NODEHDR + ksize + dsize > FZ_PSIZE)
				abort();
			fz_touch(dd_lm_node_key(node) + ksize, dsize);
		}
		if (i > (leaf ? 0u : 1u) && kind != LM_TREE_FREE) {
			const uint8_t *prev = dd_lm_node(pg, i - 1);

			if (dd_lm_cmp(dd_lm_node_key(prev), dd_lm_node_ksize(prev),
				   dd_lm_node_key(node), ksize) >= 0)
				abort();
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	enum dd_lm_tree_kind kind;
	uint64_t pgno, last_pg;
	uint8_t *pg;
	bool leaf, exact;
	size_t klen = size > 36 ? 33 : 1;

	if (size < 3)
		return 0;
	kind = (enum dd_lm_tree_kind)((data[0] & 3) % 3);
	leaf = data[0] & 4;
	pg = calloc(1, FZ_PSIZE);
	if (!pg)
		abort();
	memcpy(pg, data + 3, size - 3 < FZ_PSIZE ? size - 3 : FZ_PSIZE);
	pgno = dd_get_le64(pg) ^ ((data[0] & 8) ? 1 : 0);
	last_pg = 2 + dd_get_le16(data + 1);
	if (pgno > last_pg)
		last_pg = pgno;
	if (!dd_lm_page_verify(pg, FZ_PSIZE, pgno, last_pg, leaf, kind)) {
		fz_check_passed(pg, last_pg, leaf, kind);
		fz_sink += dd_lm_search(pg, leaf, data + size - klen, klen, &exact);
	}
	free(pg);
	return 0;
}
