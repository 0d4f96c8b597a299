/*
 * manifest.h -- snapshot manifests (format/manifest.md): the durable,
 * self-describing record of one committed snapshot, beside the packs.
 *
 * A manifest is written once, from the snapshot's block map, checked
 * against the content digest the writer computed from the data, made
 * durable as ID.tmp and published by renaming it to ID.snap: that rename
 * is the snapshot's commit.  It is never changed afterwards; deletion
 * renames it to ID.del first.  Readers verify the whole file (header CRC,
 * list CRC, totals, content digest) before they hand out one entry, so a
 * consumer that acts on entries never acts on a damaged manifest.
 *
 * This file knows nothing of the catalog: store/ feeds it block-map
 * entries and consumes its entries.
 */
#ifndef DD_STORE_MANIFEST_H
#define DD_STORE_MANIFEST_H

#include <stdbool.h>
#include <stdint.h>

#include "dedup.h"
#include "common/err.h"
#include "common/vdir.h"
#include "hash/hash.h"

#define DD_MANIFEST_DIR "manifests"
#define DD_MANIFEST_HDR_SIZE 128
#define DD_MANIFEST_TRAILER_SIZE 8
#define DD_MANIFEST_VERSION 1
/* "ID.snap": 16 hex digits, a suffix, NUL */
#define DD_MANIFEST_NAME_MAX 24

enum dd_manifest_state {
	DD_MANIFEST_SNAP,   /* published: committed */
	DD_MANIFEST_TMP,    /* being written */
	DD_MANIFEST_DEL     /* deleted */
};

typedef struct dd_manifest_hdr {
	int mh_chunker;             /* enum dd_chunker (format/manifest.md
				       §3.1: a feature bit and a byte) */
	uint64_t mh_id;
	int64_t mh_ctime;
	uint64_t mh_size;
	uint64_t mh_blocks;
	uint64_t mh_zero_blocks;
	uint32_t mh_block_size;
	uint32_t mh_hash_kind;
	uint8_t mh_digest[DD_HASH_SIZE];
	int mh_dv;                  /* mh_digest's version: DD_DIGEST_V1 or
				       _V2 (fixed only: feature bit 1) */
	uint64_t mh_list_bytes;     /* filled in by the writer */
	char mh_name[DD_NAME_MAX + 1];
} dd_manifest_hdr;

/* The file name of manifest id in a state ("00000000000000ff.snap"). */
void dd_manifest_name(char buf[DD_MANIFEST_NAME_MAX], uint64_t id, int state);
/* Parses a directory entry's name: 1 with *id and *state for a manifest
 * name, 0 for anything else. */
int dd_manifest_parse_name(const char *name, uint64_t *id, int *state);

/* ---- writing ---------------------------------------------------------------*/

typedef struct dd_manifest_writer dd_manifest_writer;

/* Creates ID.tmp in dir, the store's manifests (exclusively, DD_EEXIST:
 * a leftover one is removed only by recovery, never here) for snapshot
 * id called name, of an image cut by chunker (enum dd_chunker) into
 * blocks of block_size, its content digest of version dv. */
int dd_manifest_write_begin(dd_manifest_writer **out, dd_err *err,
			    dd_vdir *dir, uint64_t id, const char *name,
			    int chunker, int dv, uint32_t block_size);
/* Appends block entries in image order; len, the block's length, is
 * written for content-defined blocks (and ignored for fixed ones). */
int dd_manifest_write_block(dd_manifest_writer *mw, dd_err *err,
			    const uint8_t hash[DD_HASH_SIZE], uint8_t variant,
			    uint32_t len);
/* n holes (fixed blocks), or n bytes of holes (content-defined: holes
 * that follow each other are one, format/manifest.md §4.1). */
int dd_manifest_write_holes(dd_manifest_writer *mw, dd_err *err, uint64_t n);
/* Checks the entries against hdr (block and hole totals; the content
 * digest they produce must equal hdr->mh_digest: DD_ECORRUPT otherwise),
 * writes header and trailer and makes ID.tmp durable.  hdr's id and name
 * must be those given to _begin. */
int dd_manifest_write_finish(dd_manifest_writer *mw, dd_err *err,
			     const dd_manifest_hdr *hdr);
/* Closes; removes ID.tmp unless it was published since. */
void dd_manifest_write_free(dd_manifest_writer *mw);

/* Renames ID.`from` to ID.`to` (states), replacing nothing (DD_EEXIST if
 * ID.`to` exists), then syncs the directory.  *moved tells whether the
 * rename happened, even when the sync then failed. */
int dd_manifest_move(dd_vdir *dir, dd_err *err, uint64_t id, int from,
		     int to, bool *moved);
/* Removes ID in that state; DD_ENOENT if absent. */
int dd_manifest_remove(dd_vdir *dir, dd_err *err, uint64_t id, int state);

/* ---- reading ---------------------------------------------------------------*/

typedef struct dd_manifest_reader dd_manifest_reader;

typedef struct dd_manifest_ent {
	bool me_hole;              /* a run of me_count holes */
	uint64_t me_index;         /* first block it covers */
	uint64_t me_count;         /* 1 for a block (and for any hole of
				      content-defined blocks) */
	uint64_t me_off;           /* its first byte (content-defined) */
	uint64_t me_len;           /* its bytes (content-defined) */
	uint8_t me_variant;
	uint8_t me_hash[DD_HASH_SIZE];
} dd_manifest_ent;

/* Opens the manifest in fd (not taken: the caller closes it after
 * _close) and verifies all of it (format/manifest.md §6); expect_id is
 * the id its name gives, or UINT64_MAX to accept any.  max_blocks bounds
 * the blocks the header may claim (0: no bound beyond the format's).
 * label names the file in messages. */
int dd_manifest_read_open(dd_manifest_reader **out, dd_err *err, int fd,
			  const char *label, uint64_t expect_id,
			  uint64_t max_blocks, dd_manifest_hdr *hdr);
/* The same for ID in a state in dir (the store's manifests), reading a
 * file of its own.  DD_ENOENT if there is no such file. */
int dd_manifest_open_at(dd_manifest_reader **out, dd_err *err, dd_vdir *dir,
			uint64_t id, int state, dd_manifest_hdr *hdr);
/* Reads only the header of ID.snap in dir, checked (§3) but without the
 * list walk: what a listing needs. */
int dd_manifest_read_header_at(dd_vdir *dir, dd_err *err, uint64_t id,
			       dd_manifest_hdr *hdr);
/* The next entry: 1 and *ent, or 0 after the last. */
int dd_manifest_read_next(dd_manifest_reader *mr, dd_err *err,
			  dd_manifest_ent *ent);
void dd_manifest_read_close(dd_manifest_reader *mr);

#endif
