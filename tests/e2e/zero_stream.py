#!/usr/bin/env python3
"""zero_stream.py [--digest-version 1|2] OUT SIZE BLOCK_SIZE [NAME]: writes
a replication stream (format/stream.md) of an image of SIZE bytes, all
zeros, as ONE zero run: HEADER, one ZERO record over every block, END --
valid frame and payload CRCs and END digest.

Version 1 (the default): the HEADER's content digest (format/store.md §6,
32 zero bytes per block) is computed when the image has at most 2^24
blocks, else left zero (a receiver must refuse such a stream before it
could check it).  Version 2: header flag bit 1 (format/stream.md §4), and
the digest of the run-based rule, one entry for the whole run, whatever
the size."""
import hashlib
import struct
import sys


def crc32c(data, crc=0xFFFFFFFF):
    table = crc32c.table
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


crc32c.table = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    crc32c.table.append(c)


def record(rtype, payload):
    frame = struct.pack('<BBHII', rtype, 0, 0, len(payload), crc32c(payload))
    return frame + struct.pack('<I', crc32c(frame)) + payload


def digest_v2(size, bs):
    """format/store.md §6, version 2: the run once, its bytes, then size,
    block size and chunker 0."""
    h = hashlib.sha256()
    if size:
        h.update(bytes(32) + struct.pack('<Q', size))
    h.update(struct.pack('<QIB', size, bs, 0))
    return h.digest()


def main():
    args = sys.argv[1:]
    version = 1
    if args[:1] == ['--digest-version']:
        version = int(args[1])
        args = args[2:]
    out, size, bs = args[0], int(args[1]), int(args[2])
    name = (args[3] if len(args) > 3 else 'z').encode()
    nblocks = (size + bs - 1) // bs
    digest = bytes(32)
    flags = 0
    if version == 2:
        digest = digest_v2(size, bs)
        flags = 2
    elif nblocks <= 1 << 24:
        h = hashlib.sha256()
        zeros = bytes(32 * 4096)
        left = nblocks
        while left:
            n = min(left, 4096)
            h.update(zeros[:32 * n])
            left -= n
        h.update(struct.pack('<QI', size, bs))
        digest = h.digest()
    hdr = (b'DDSTREAM' + struct.pack('<IIIIBBBBQQ', 1, 0, flags, bs, 1, 1, 0, 0,
                                     size, 0)
           + digest + bytes(32) + struct.pack('<H', len(name)) + name
           + struct.pack('<H', 0))
    body = record(1, hdr) + record(4, struct.pack('<QQ', 0, nblocks))
    end = struct.pack('<QQQQQ', nblocks, 0, 0, nblocks, len(body))
    end += hashlib.sha256(body).digest()
    with open(out, 'wb') as f:
        f.write(body + record(5, end))


main()
