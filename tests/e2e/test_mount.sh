#!/usr/bin/env bash
# test_mount.sh -- `dedup mount` / `dedup umount`: the snapshots of a store
# as read-only files (FUSE).
#
# An ext4 image made with `mkfs.ext4 -d` is stored, mounted, read back
# with cmp through the mount, and -- as root, with loop devices -- itself
# loop-mounted read-only from the mount, a file inside compared with its
# source.  Also: the directory follows put and rm, writes are refused, a
# file opened before its snapshot is removed still reads, -f stays in the
# foreground until `dedup umount`, and a bad store or mount point fails
# with one line before anything is mounted.
#
# Prints SKIP and exits 0 where FUSE cannot run: dedup built without
# libfuse3, no /dev/fuse (containers), no fusermount3 as non-root, or a
# mount the kernel refuses.  The loop mount is skipped alone (SKIP line)
# without root, loop devices or mkfs.ext4.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

skip() {
	echo "SKIP [$TEST_NAME]: $*"
	exit 0
}

M=$T/mnt
L=$T/loop
MPID=
cleanup() {
	if grep -qs " $L " /proc/mounts; then umount "$L" 2>/dev/null || umount -l "$L" 2>/dev/null || true; fi
	if grep -qs " $M " /proc/mounts; then
		fusermount3 -u -z "$M" 2>/dev/null || umount -l "$M" 2>/dev/null || true
	fi
	if [ -n "$MPID" ]; then kill "$MPID" 2>/dev/null || true; fi
	rm -rf "$T"
}
trap cleanup EXIT

mounted() { grep -qs " $1 fuse" /proc/mounts; }

# wait_mounted DIR: up to 10 s for DIR to be a FUSE mount
wait_mounted() {
	for _ in $(seq 100); do
		mounted "$1" && return 0
		sleep 0.1
	done
	return 1
}

wait_unmounted() {
	for _ in $(seq 100); do
		mounted "$1" || return 0
		sleep 0.1
	done
	return 1
}

# ---- can FUSE run here? ------------------------------------------------------
mkdir -p "$M" "$L"
run "$DEDUP" mount "$T/none" "$M"
if grep -q "built without libfuse3" "$T/err"; then
	skip "dedup built without libfuse3 ($(cat "$T/err"))"
fi
assert_rc 1 "mount of a missing store"
assert_one_line "mount of a missing store"
mkdir "$T/empty"
run "$DEDUP" mount "$T/empty" "$M"
assert_rc 1 "mount of a directory that is no store"
assert_one_line "mount of a directory that is no store"
assert_grep "DD_ENOENT" "$T/err" "mount of no store names DD_ENOENT"
mounted "$M" && fail "a failed mount left a mount behind"
[ -c /dev/fuse ] || skip "no /dev/fuse"
{ exec 3</dev/fuse; } 2>/dev/null || skip "/dev/fuse cannot be opened"
exec 3<&-
if ! command -v fusermount3 >/dev/null 2>&1 && [ "$(id -u)" -ne 0 ]; then
	skip "no fusermount3 (Debian package fuse3) and not root"
fi

# ---- the image ---------------------------------------------------------------
S=$T/s
run "$DEDUP" init --block-size 64K "$S"
assert_rc 0 "init"
mkdir -p "$T/tree/sub"
gen_random "$T/tree/random.bin" $((3 << 20)) r1
python3 -c "
import sys
with open(sys.argv[1], 'w') as f:
    for i in range(40000):
        f.write('line %d of a text file inside the image\n' % i)
" "$T/tree/sub/text.txt"
HAVE_EXT4=0
if command -v mkfs.ext4 >/dev/null 2>&1 &&
	mkfs.ext4 -q -F -b 4096 -d "$T/tree" "$T/disk.img" 16M >"$T/mkfs.out" 2>&1; then
	HAVE_EXT4=1
else
	echo "SKIP [$TEST_NAME]: no mkfs.ext4 -d here; a random image instead"
	gen_random "$T/disk.img" $((16 << 20)) disk
fi
run "$DEDUP" put "$S@disk" "$T/disk.img"
assert_rc 0 "put disk"
gen_random "$T/odd.img" $(((1 << 20) + 77)) odd
python3 -c "import sys; open(sys.argv[1], 'ab').write(bytes(200000))" "$T/odd.img"
run "$DEDUP" put "$S@odd" "$T/odd.img"
assert_rc 0 "put odd"

# ---- mount in the foreground -------------------------------------------------
note "mount -f"
"$DEDUP" mount -f "$S" "$M" 2>"$T/mount.err" &
MPID=$!
if ! wait_mounted "$M"; then
	if kill -0 "$MPID" 2>/dev/null; then
		fail "mount -f: not mounted after 10 s"
	fi
	wait "$MPID" || true
	skip "the kernel refused the FUSE mount: $(head -c 300 "$T/mount.err")"
fi
kill -0 "$MPID" 2>/dev/null || fail "mount -f did not stay in the foreground"

run ls "$M"
assert_eq "disk odd" "$(tr '\n' ' ' <"$T/out" | sed 's/ $//')" "the mount lists the snapshots"
assert_eq "$(stat -c %s "$T/disk.img")" "$(stat -c %s "$M/disk")" "size of disk"
assert_eq "$(stat -c %s "$T/odd.img")" "$(stat -c %s "$M/odd")" "size of odd"
cmp "$T/disk.img" "$M/disk" || fail "cmp of disk through the mount"
cmp "$T/odd.img" "$M/odd" || fail "cmp of odd through the mount"
# random reads: pieces at odd offsets, across block boundaries
python3 - "$T/odd.img" "$M/odd" <<'EOF' || fail "random reads through the mount"
import os, random, sys
want = open(sys.argv[1], 'rb').read()
fd = os.open(sys.argv[2], os.O_RDONLY)
r = random.Random(5)
for _ in range(300):
    off = r.randrange(0, len(want) + 10)
    n = r.randrange(1, 300000)
    got = os.pread(fd, n, off)
    if got != want[off:off + n]:
        sys.exit('pread(%d, %d) differs' % (n, off))
os.close(fd)
EOF

note "read-only"
if touch "$M/new" 2>/dev/null; then fail "a file was created in the mount"; fi
if (echo x >>"$M/odd") 2>/dev/null; then fail "a snapshot was written through the mount"; fi
if rm -f "$M/odd" 2>/dev/null && [ ! -e "$M/odd" ]; then fail "a snapshot was removed through the mount"; fi

note "the list follows put and rm; an open file keeps reading"
run "$DEDUP" put "$S@later" "$T/odd.img"
assert_rc 0 "put while mounted"
sleep 1.2    # entry and attribute timeouts: 1 s
[ -f "$M/later" ] || fail "a snapshot put after the mount is not listed"
exec 4<"$M/later"
run "$DEDUP" rm "$S@later"
assert_rc 0 "rm while mounted"
sleep 1.2
ls "$M" | grep -qx later && fail "a removed snapshot is still listed"
cmp "$T/odd.img" - <&4 || fail "a file open before its snapshot's rm"
exec 4<&-
sleep 1.2
[ -e "$M/later" ] && fail "a removed snapshot is still there once closed"

# ---- loop mount of the ext4 image, read-only -----------------------------------
if [ "$HAVE_EXT4" = 1 ] && [ "$(id -u)" -eq 0 ] &&
	mount -o loop,ro -t ext4 "$M/disk" "$L" 2>"$T/loop.err"; then
	note "loop mount of the ext4 image through the mount"
	cmp "$T/tree/random.bin" "$L/random.bin" || fail "random.bin inside the image"
	cmp "$T/tree/sub/text.txt" "$L/sub/text.txt" || fail "text.txt inside the image"
	umount "$L" || fail "umount of the loop mount"
else
	echo "SKIP [$TEST_NAME]: loop mount of the image (needs root, loop devices and mkfs.ext4: $(head -c 200 "$T/loop.err" 2>/dev/null))"
fi

note "dedup umount"
run "$DEDUP" umount "$M"
assert_rc 0 "umount"
wait_unmounted "$M" || fail "still mounted after dedup umount"
set +e
wait "$MPID"
rc=$?
set -e
MPID=
assert_eq 0 "$rc" "mount -f exits 0 once unmounted"

# ---- mount as a daemon ---------------------------------------------------------
note "mount without -f returns once mounted"
run "$DEDUP" mount "$S" "$M"
assert_rc 0 "mount"
assert_empty "$T/out" "mount stdout"
mounted "$M" || fail "not mounted when mount returned"
cmp "$T/odd.img" "$M/odd" || fail "cmp through the daemon's mount"
run "$DEDUP" umount "$M"
assert_rc 0 "umount of the daemon's mount"
wait_unmounted "$M" || fail "still mounted after dedup umount"

note "errors"
run "$DEDUP" mount "$S" "$T/no-such-dir"
assert_rc 1 "mount on a missing directory"
assert_one_line "mount on a missing directory"
run "$DEDUP" mount "$S"
assert_rc 2 "mount without a mount point"
run "$DEDUP" umount "$M"
assert_nonzero "umount of what is not mounted"
assert_one_line "umount of what is not mounted"

echo "PASS [$TEST_NAME]"
