#!/usr/bin/env bash
# test_stream_bounds.sh -- what a stream claims costs nothing before it is
# checked (format/stream.md §3.1).
#
# A 249-byte stream with valid checksums whose HEADER claims an image of
# 2^62 bytes, all one ZERO record, used to keep `ddrecv -n` and a receive
# into a store hashing 2^48 holes into the content digest (about 100 days).
# It is refused within a second by both, the store left as it was; so is a
# stream one block over the limit of 2^32 blocks.  A zero run within the
# limit (64 GiB of holes) is accepted within a second by both.  ddrecv -o
# to a file does the same: refuses within a second, leaving no file and
# an existing one as it was, and writes 64 GiB of holes as holes within
# a second.  ddsend -f of a sparse file of 64 GiB holding a few MiB
# reads only its data (SEEK_DATA): within a few seconds, where reading
# every byte took about 40, and the round trip is exact.
#
# The 2^32-block cap is version 1's (its digest hashes 32 bytes a hole).
# A stream whose content digest is of version 2 (a run of holes one
# entry, format/store.md §6) claiming 2^62 bytes of holes at 4 KiB blocks
# (2^50 blocks) is accepted within a second of CPU by ddrecv -n and by a
# receive into a store; scrub of that snapshot and ddsend of it back
# (into ddrecv -n) take under a second too; ddrecv -o writes it as holes
# within a second where the file system allows such a file (tmpfs), and
# an image of nearly 16 TiB (ext4's largest file) anyway.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

GEN="$DD_SRC/tests/e2e/zero_stream.py"

# within_1s CMD...: runs CMD (stdin as given), fails unless it used under
# a second of CPU (user + system: the work done, which a loaded machine
# does not inflate as it does the wall clock -- a spin over 2^48 blocks
# would take days of it) and ended within 10 s of wall clock (no wait
# either); $RC as run sets it.
within_1s() {
	local t0=$EPOCHREALTIME t1 cpu
	run /usr/bin/time -f '%U %S' -o "$T/cpu" timeout 20 "$@"
	t1=$EPOCHREALTIME
	cpu=$(awk 'END { print $1 + $2 }' "$T/cpu")
	python3 -c "import sys; sys.exit(0 if $cpu < 1.0 and $t1 - $t0 < 10 else 1)" ||
		fail "$*: took $cpu s of CPU, $(python3 -c "print(round($t1 - $t0, 2))") s"
}

python3 "$GEN" "$T/z62.dds" $((1 << 62)) 16384 z
assert_eq 249 "$(stat -c %s "$T/z62.dds")" "size of the 2^62 stream"
python3 "$GEN" "$T/over.dds" $(((1 << 32) * 4096 + 1)) 4096 over
python3 "$GEN" "$T/z36.dds" $((1 << 36)) 1048576 z36

S="$T/s"
"$DEDUP" init --block-size 16K "$S"
gen_random "$T/a.img" 100000 bounds-a
"$DEDUP" put "$S@a" "$T/a.img"
"$DEDUP" ls --json "$S" >"$T/ls.before"

for f in z62 over; do
	note "$f: refused by ddrecv -n and by a receive into a store"
	within_1s sh -c "exec \"\$0\" -n <\"\$1\"" "$DDRECV" "$T/$f.dds"
	assert_rc 1 "ddrecv -n of $f"
	assert_one_line "ddrecv -n of $f"
	assert_grep 'DD_EFORMAT: .*over the limit of 2\^32' "$T/err" "ddrecv -n of $f"
	within_1s sh -c "exec \"\$0\" -q \"\$1\" <\"\$2\"" "$DDRECV" "$S" "$T/$f.dds"
	assert_rc 1 "receive of $f into a store"
	assert_one_line "receive of $f into a store"
	assert_grep 'over the limit of 2\^32' "$T/err" "receive of $f"
	"$DEDUP" ls --json "$S" >"$T/ls.after"
	assert_same "$T/ls.before" "$T/ls.after" "the store after $f"
	within_1s sh -c "exec \"\$0\" -o \"\$1\" <\"\$2\"" "$DDRECV" "$T/$f.out" "$T/$f.dds"
	assert_rc 1 "ddrecv -o of $f"
	assert_one_line "ddrecv -o of $f"
	assert_grep 'over the limit of 2\^32' "$T/err" "ddrecv -o of $f"
	[ ! -e "$T/$f.out" ] || fail "ddrecv -o of $f left an output file"
	echo keep >"$T/keep.out"
	within_1s sh -c "exec \"\$0\" -o \"\$1\" <\"\$2\"" "$DDRECV" "$T/keep.out" "$T/$f.dds"
	assert_rc 1 "ddrecv -o of $f over an existing file"
	assert_eq keep "$(cat "$T/keep.out")" "the existing file after $f"
done

# accepted STREAM STORE BS SIZE WHAT: STREAM of SIZE bytes of holes is
# accepted within a second by ddrecv -n and by a receive into a new store
# STORE of block size BS, whose snapshot has that size.
accepted() {
	within_1s sh -c "exec \"\$0\" -n <\"\$1\"" "$DDRECV" "$1"
	assert_rc 0 "ddrecv -n of $5"
	assert_grep "$(($4 / $3)) blocks" "$T/out" "ddrecv -n of $5: the run's blocks"
	"$DEDUP" init --block-size "$3" "$2"
	within_1s sh -c "exec \"\$0\" -q \"\$1\" <\"\$2\"" "$DDRECV" "$2" "$1"
	assert_rc 0 "receive of $5"
	run "$DEDUP" ls --json "$2"
	assert_eq "$4" "$(json_get "$T/out" "j[0]['size']")" "size of $5 received"
}

# holes_out STREAM FILE SIZE WHAT: ddrecv -o writes STREAM's SIZE bytes
# of holes into FILE as holes within a second; FILE is removed after.
holes_out() {
	within_1s sh -c "exec \"\$0\" -q -o \"\$1\" <\"\$2\"" "$DDRECV" "$2" "$1"
	local rc=$RC size blocks
	size=$(stat -c %s "$2" 2>/dev/null) blocks=$(stat -c %b "$2" 2>/dev/null)
	rm -f "$2"
	RC=$rc
	assert_rc 0 "ddrecv -o of $4"
	assert_eq "$3" "$size" "size written by ddrecv -o of $4"
	assert_eq 0 "$blocks" "ddrecv -o wrote $4 as holes, not zeros"
}

note "64 GiB of holes: accepted within a second"
S2="$T/s2"
accepted "$T/z36.dds" "$S2" 1048576 $((1 << 36)) "64 GiB of holes"
run "$DEDUP" scrub "$S2"
assert_rc 0 "scrub after the zero run"
holes_out "$T/z36.dds" "$T/z36.out" $((1 << 36)) "64 GiB of holes"

note "digest version 2: 2^62 bytes of holes at 4 KiB accepted"
python3 "$GEN" --digest-version 2 "$T/v2.dds" $((1 << 62)) 4096 z62
S4="$T/s4"
accepted "$T/v2.dds" "$S4" 4096 $((1 << 62)) "2^62 bytes of holes (version 2)"
within_1s "$DEDUP" scrub "$S4"
assert_rc 0 "scrub of the 2^62-byte snapshot"
within_1s sh -c "\"\$0\" \"\$1@z62\" | \"\$2\" -n" "$DDSEND" "$S4" "$DDRECV"
assert_rc 0 "ddsend of the 2^62-byte snapshot into ddrecv -n"
assert_grep "content digest: $(python3 -c "
import hashlib, struct
print(hashlib.sha256(bytes(32) + struct.pack('<QQIB', 1 << 62, 1 << 62, 4096, 0)).hexdigest())")" \
	"$T/out" "the digest sent back"
within_1s sh -c "\"\$0\" \"\$1@z62\" | \"\$2\" -q \"\$3\"" "$DDSEND" "$S4" "$DDRECV" "$T/s5"
assert_rc 0 "ddsend of the 2^62-byte snapshot into another store"
# the catalog rebuilt from its manifest (one hole entry, checked against
# the digest in O(1)), and a diff of the snapshot with itself: as cheap
rm -rf "$S4/db"
within_1s "$DEDUP" repair "$S4"
assert_rc 0 "repair of the store of the 2^62-byte snapshot"
within_1s "$DEDUP" scrub "$S4"
assert_rc 0 "scrub after repair"
within_1s "$DEDUP" diff "$S4@z62" "$S4@z62"
assert_rc 0 "diff of the 2^62-byte snapshot with itself"
# version 1 of 2^50 blocks does not exist: asked for, it is refused
run sh -c "\"\$0\" --digest-version 1 \"\$1@z62\" >/dev/null" "$DDSEND" "$S4"
assert_rc 1 "ddsend --digest-version 1 of 2^50 blocks"
assert_grep '2\^32' "$T/err" "the refusal names the cap"
if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] && [ -w /dev/shm ]; then
	holes_out "$T/v2.dds" "$(mktemp /dev/shm/dd-bounds.XXXXXX)" \
		$((1 << 62)) "2^62 bytes of holes (tmpfs)"
else
	note "no tmpfs at /dev/shm: the 2^62-byte file output is not tried"
fi
# nearly 16 TiB, not a multiple of the block size: the last hole is short
big=$(((1 << 44) - (1 << 20) + 12345))
python3 "$GEN" --digest-version 2 "$T/v2big.dds" $big 4096 big
holes_out "$T/v2big.dds" "$T/big.out" $big "nearly 16 TiB of holes"
# and out of a store: get skips the holes (dd_reader_next_data, one seek
# in the block map) instead of reading 16 TiB of zeros
"$DEDUP" init --block-size 4K "$T/s6"
within_1s sh -c "exec \"\$0\" -q \"\$1\" <\"\$2\"" "$DDRECV" "$T/s6" "$T/v2big.dds"
assert_rc 0 "receive of nearly 16 TiB of holes"
within_1s "$DEDUP" get "$T/s6@big" "$T/big.get"
assert_rc 0 "get of nearly 16 TiB of holes"
assert_eq $big "$(stat -c %s "$T/big.get")" "size written by get"
assert_eq 0 "$(stat -c %b "$T/big.get")" "get wrote holes, not zeros"
rm -f "$T/big.get"

# same_sparse A B: A and B are the same bytes, compared on the data
# extents of either (SEEK_DATA): outside them both are holes.
same_sparse() {
	python3 - "$1" "$2" <<'EOF'
import os, sys
fa, fb = (os.open(p, os.O_RDONLY) for p in sys.argv[1:3])
size = os.fstat(fa).st_size
if os.fstat(fb).st_size != size:
    sys.exit('sizes differ')
def extents(fd):
    at, out = 0, []
    while at < size:
        try:
            d = os.lseek(fd, at, os.SEEK_DATA)
        except OSError:
            break
        h = os.lseek(fd, d, os.SEEK_HOLE)
        out.append((d, h))
        at = h
    return out
ext = extents(fa) + extents(fb)
if not ext:
    sys.exit('no data in either file')
for d, h in ext:
    while d < h:
        n = min(h - d, 1 << 20)
        if os.pread(fa, n, d) != os.pread(fb, n, d):
            sys.exit('bytes differ at %d' % d)
        d += n
EOF
}

note "ddsend -f of a sparse file of 64 GiB: its holes are not read"
truncate -s 64G "$T/sparse.img"
gen_random "$T/part" $((3 * 1024 * 1024 + 12345)) sparse-part
dd if="$T/part" of="$T/sparse.img" bs=1M seek=40000 conv=notrunc status=none
dd if="$T/part" of="$T/sparse.img" bs=1000 seek=$((((1 << 36) - 5000) / 1000)) \
	count=5 conv=notrunc status=none
dd if="$T/part" of="$T/sparse.img" bs=4096 seek=3 count=1 conv=notrunc status=none
t0=$EPOCHREALTIME
run "$DDSEND" -f "$T/sparse.img"
t1=$EPOCHREALTIME
assert_rc 0 "ddsend -f of the sparse file"
python3 -c "import sys; sys.exit(0 if $t1 - $t0 < 3.0 else 1)" ||
	fail "ddsend -f of 64 GiB of holes took $(python3 -c "print(round($t1 - $t0, 2))") s"
mv "$T/out" "$T/sparse.dds"
[ "$(stat -c %s "$T/sparse.dds")" -lt $((5 * 1024 * 1024)) ] ||
	fail "the stream of the sparse file is $(stat -c %s "$T/sparse.dds") bytes"
within_1s sh -c "exec \"\$0\" -o \"\$1\" <\"\$2\"" "$DDRECV" "$T/sparse.out" "$T/sparse.dds"
assert_rc 0 "ddrecv -o of the sparse file's stream"
same_sparse "$T/sparse.img" "$T/sparse.out" ||
	fail "the sparse file's round trip differs"
rm -f "$T/sparse.out"
S3="$T/s3"
"$DEDUP" init "$S3"
run sh -c "exec \"\$0\" -q \"\$1\" <\"\$2\"" "$DDRECV" "$S3" "$T/sparse.dds"
assert_rc 0 "receive of the sparse file's stream into a store"
run "$DEDUP" scrub "$S3"
assert_rc 0 "scrub after the sparse file"
within_1s "$DEDUP" get "$S3@sparse.img" "$T/sparse.get"
assert_rc 0 "get of the sparse file's snapshot"
same_sparse "$T/sparse.img" "$T/sparse.get" ||
	fail "get of the sparse file's snapshot differs"
rm -f "$T/sparse.get"
note "ddsend -f of a file of 70,000 data extents reads only them"
# One 4 KiB block in every MiB: more extents than a sender could list at
# once (it kept 65,536 and read the rest whole, 4.4 GiB of holes a pass).
# What the process read is its rchar (/proc/PID/io), read while it is a
# zombie: the data twice (the two passes) and nothing of the holes.
python3 - "$T/many.img" <<'EOF2'
import os, struct, sys
fd = os.open(sys.argv[1], os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o644)
for i in range(70000):
    os.pwrite(fd, struct.pack('<Q', i) * 512, i << 20)
os.ftruncate(fd, 70000 << 20)
EOF2
read_chars=$(python3 - "$DDSEND" "$T/many.img" "$T/many.dds" <<'EOF2'
import os, subprocess, sys
with open(sys.argv[3], 'wb') as out:
    p = subprocess.Popen([sys.argv[1], '-q', '-b', '4K', '-f', sys.argv[2]],
                         stdout=out)
    os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
    io = open('/proc/%d/io' % p.pid).read()
    if p.wait() != 0:
        sys.exit('ddsend -f failed')
print(dict(l.split(': ') for l in io.splitlines())['rchar'])
EOF2
) || fail "ddsend -f of the file of 70,000 extents"
data=$((70000 * 4096))
[ "$read_chars" -ge $((2 * data)) ] && [ "$read_chars" -lt $((2 * data + (1 << 20))) ] ||
	fail "ddsend -f read $read_chars bytes of a file holding $data (twice: $((2 * data)))"
run sh -c "exec \"\$0\" -o \"\$1\" <\"\$2\"" "$DDRECV" "$T/many.out" "$T/many.dds"
assert_rc 0 "ddrecv -o of the file of 70,000 extents"
same_sparse "$T/many.img" "$T/many.out" ||
	fail "the round trip of the file of 70,000 extents differs"
rm -f "$T/many.img" "$T/many.out" "$T/many.dds"
echo "PASS [$TEST_NAME]"
