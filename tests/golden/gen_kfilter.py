#!/usr/bin/python3
# gen_kfilter.py -- writes kfilter_v3.txt for tests/unit/test_catalog.c
# (test_kf_golden): the header of a key filter of two segments and the
# bits of three hashes, computed from format/kfilter.md by this second
# implementation, independent of libdedup/catalog/kfilter.c.  Run from
# anywhere:
#   python3 tests/golden/gen_kfilter.py
import hashlib, os, struct
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
# segment 0: 4096 blocks, built of the DDT's 2 entries (a, b); segment 1:
# 8192 blocks, added when the DDT held 2 entries, before c was inserted
segs=[(4096,0),(8192,2)]
members=[(b"a",0),(b"b",0),(b"c",1)]
out=["# format/kfilter.md: a filter of generation 2 and two segments: 0 of",
     "# 4096 blocks, built of the hashes of a and b (SHA-256 of those ASCII",
     "# strings); 1 of 8192 blocks, added when the DDT held 2 entries, then",
     "# c inserted.",
     "# header: its 256 bytes in hex; then per hash: hash, segment, block, ten",
     "# bit numbers; then per block with bits: segment, block, its sum (CRC-32C",
     "# of its 64 bytes); 'zero' the sum of a block without"]
hdr=bytearray(256); hdr[0:8]=b"DDKEYFLT"
struct.pack_into("<IIIIQQ",hdr,8,3,10,len(segs),0,2,2)
for i,(n,added) in enumerate(segs):
    struct.pack_into("<QQ",hdr,64+16*i,n,added)
struct.pack_into("<I",hdr,252,crc32c(bytes(hdr[:252])))
out.append("header "+hdr.hex())
content={}
for s,seg in members:
    h=hashlib.sha256(s).digest()
    a,b,c=struct.unpack_from("<QQQ",h,0)
    blk=(mix(a)*segs[seg][0])>>64
    w=mix(b^0x9e3779b97f4a7c15); v=mix(c^0x7f4a7c159e3779b9)
    bits=[(w>>(9*i))&511 for i in range(7)]+[(v>>(9*i))&511 for i in range(3)]
    out.append("hash %s %d %d %s"%(h.hex(),seg,blk," ".join(map(str,bits))))
    cont=content.setdefault((seg,blk),bytearray(64))
    for bit in bits: cont[bit//8]|=1<<(bit%8)
for seg,blk in sorted(content):
    out.append("sum %d %d %08x"%(seg,blk,crc32c(bytes(content[(seg,blk)]))))
out.append("zero %08x"%crc32c(bytes(64)))
open(os.path.join(os.path.dirname(os.path.abspath(__file__)),"kfilter_v3.txt"),"w").write("\n".join(out)+"\n")
