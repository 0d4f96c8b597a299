#!/usr/bin/python3
# gen_kfilter.py -- writes kfilter_v2.txt for tests/unit/test_catalog.c
# (test_kf_golden): the header of a key filter and the bits of three
# hashes, computed from format/kfilter.md by this second implementation,
# independent of libdedup/catalog/kfilter.c.  Run from anywhere:
#   python3 tests/golden/gen_kfilter.py
import hashlib, struct
M=(1<<64)-1
def mix(x):
    x^=x>>30; x=(x*0xbf58476d1ce4e5b9)&M
    x^=x>>27; x=(x*0x94d049bb133111eb)&M
    return x^(x>>31)
def crc32c(data):
    crc=0xffffffff
    for b in data:
        crc^=b
        for _ in range(8):
            crc=(crc>>1)^(0x82f63b78 if crc&1 else 0)
    return crc^0xffffffff
blocks=4096
out=["# format/kfilter.md: a filter of 4096 blocks, generation 1, built from",
     "# the three hashes below (SHA-256 of the ASCII strings a, b, c).",
     "# header: its 64 bytes in hex; then per hash: hash, block, six bit numbers;",
     "# then per block: its sum (CRC-32C of its 64 bytes) when it holds bits,",
     "# and 'zero' the sum of a block without"]
hdr=bytearray(64); hdr[0:8]=b"DDKEYFLT"; struct.pack_into("<IIQQQ",hdr,8,2,6,blocks,1,3)
struct.pack_into("<I",hdr,60,crc32c(bytes(hdr[:60])))
out.append("header "+hdr.hex())
content={}
for s in (b"a",b"b",b"c"):
    h=hashlib.sha256(s).digest()
    a=struct.unpack_from("<Q",h,0)[0]; b=struct.unpack_from("<Q",h,8)[0]
    blk=(mix(a)*blocks)>>64
    w=mix(b^0x9e3779b97f4a7c15)
    bits=[(w>>(9*i))&511 for i in range(6)]
    out.append("hash %s %d %s"%(h.hex(),blk," ".join(map(str,bits))))
    cont=content.setdefault(blk,bytearray(64))
    for bit in bits: cont[bit//8]|=1<<(bit%8)
for blk in sorted(content):
    out.append("sum %d %08x"%(blk,crc32c(bytes(content[blk]))))
out.append("zero %08x"%crc32c(bytes(64)))
import os
open(os.path.join(os.path.dirname(os.path.abspath(__file__)),"kfilter_v2.txt"),"w").write("\n".join(out)+"\n")
