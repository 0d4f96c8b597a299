#!/usr/bin/env python3
"""zero_stream.py OUT SIZE BLOCK_SIZE [NAME]: writes a replication stream
(format/stream.md) of an image of SIZE bytes, all zeros, as ONE zero run:
HEADER, one ZERO record over every block, END -- valid frame and payload
CRCs and END digest.  The HEADER's content digest is computed
(format/store.md §6) when the image has at most 2^24 blocks, else left
zero (a receiver must refuse such a stream before it could check it)."""
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


def main():
    out, size, bs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    name = (sys.argv[4] if len(sys.argv) > 4 else 'z').encode()
    nblocks = (size + bs - 1) // bs
    digest = bytes(32)
    if nblocks <= 1 << 24:
        h = hashlib.sha256()
        zeros = bytes(32 * 4096)
        left = nblocks
        while left:
            n = min(left, 4096)
            h.update(zeros[:32 * n])
            left -= n
        h.update(struct.pack('<QI', size, bs))
        digest = h.digest()
    hdr = (b'DDSTREAM' + struct.pack('<IIIIBBBBQQ', 1, 0, 0, bs, 1, 1, 0, 0,
                                     size, 0)
           + digest + bytes(32) + struct.pack('<H', len(name)) + name
           + struct.pack('<H', 0))
    body = record(1, hdr) + record(4, struct.pack('<QQ', 0, nblocks))
    end = struct.pack('<QQQQQ', nblocks, 0, 0, nblocks, len(body))
    end += hashlib.sha256(body).digest()
    with open(out, 'wb') as f:
        f.write(body + record(5, end))


main()
