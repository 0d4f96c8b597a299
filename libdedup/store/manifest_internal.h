/*
 * manifest_internal.h -- what manifest.c (names, header, writing) and
 * manifest_read.c (reading, verifying) share: the encoding's constants
 * (format/manifest.md §3-§4) and the header's decoder.
 */
#ifndef DD_STORE_MANIFEST_INTERNAL_H
#define DD_STORE_MANIFEST_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "store/manifest.h"

#define DD_MF_MAGIC "\x89" "DDSNAP\n"
#define DD_MF_END_MAGIC "DDME"
#define DD_MF_TAG_BLOCK 0x01
#define DD_MF_TAG_VBLOCK 0x02
#define DD_MF_TAG_HOLES 0x03
#define DD_MF_ENT_MAX 34          /* the longest entry */
/* content-defined blocks (§4.1): a block with its length, the same of
 * variant v, a hole of n bytes */
#define DD_MF_TAG_LBLOCK 0x04
#define DD_MF_TAG_LVBLOCK 0x05
#define DD_MF_TAG_LHOLE 0x06
#define DD_MF_LENT_MAX 38
#define DD_MF_FEATURE_VARBLOCK 0x1u
/* fixed blocks, content digest of version 2 (format/manifest.md §3.2) */
#define DD_MF_FEATURE_DIGEST2 0x2u
#define DD_MF_CHUNKER_OFF 104     /* header byte: the chunker (§3.1) */
#define DD_MF_BUF (64u * 1024)

/* Decodes and checks the header at p (DD_MANIFEST_HDR_SIZE bytes): magic,
 * version, CRC, features, reserved bytes, sizes that agree; *namelen gets
 * the name's length.  DD_ECORRUPT, DD_EVERSION or DD_ENOTSUP naming label. */
int dd_manifest_hdr_decode(dd_err *err, const uint8_t *p, const char *label,
			   dd_manifest_hdr *h, size_t *namelen);

#endif
