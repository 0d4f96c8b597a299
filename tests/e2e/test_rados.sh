#!/usr/bin/env bash
# test_rados.sh -- stores in a RADOS pool (issue #15), on the one-node
# cluster of tests/ceph/cluster.sh (ctest's `ceph` fixture: CEPH_CONF,
# DD_CEPH_DIR, DD_CEPH_SCRIPT set).
#
# Two "machines" are two local catalogs (DEDUP_CACHE_DIR): everything one
# commits, the other lists and reads.  Then the faults: a writer holding
# the store while another asks, the OSD stopped in the middle of a put,
# a writer killed with SIGKILL -- no lost or half snapshot, scrub clean.
source "$(dirname "$0")/lib.sh"

: "${CEPH_CONF:?run under the ctest fixture ceph (CEPH_CONF)}"
: "${DD_CEPH_DIR:?}" "${DD_CEPH_SCRIPT:?}"
POOL=dde2e$$
S=rados:$POOL/s1
export CEPH_ARGS="--rados_osd_op_timeout=5 --rados_mon_op_timeout=5 --client_mount_timeout=5"
ceph osd pool create "$POOL" 8 >/dev/null 2>&1 || fail "cannot create pool $POOL"
trap 'ceph osd pool rm "$POOL" "$POOL" --yes-i-really-really-mean-it >/dev/null 2>&1; "$DD_CEPH_SCRIPT" osd-start "$DD_CEPH_DIR" >/dev/null 2>&1 || true; rm -rf "$T"' EXIT

M1=$T/m1
M2=$T/m2
on() { local m=$1; shift; DEDUP_CACHE_DIR=$m "$@"; }

gen_random "$T/a" $((3 << 20)) a
cp "$T/a" "$T/b"
gen_random "$T/b.tail" $((1 << 20)) b
cat "$T/b.tail" >>"$T/b"     # b: a, then 1 MiB new

note "librados is loaded for a rados: store only"
# libdedup opens librados at the first connection (rados/librados_load.h):
# linked, Ceph's static initialisers cost every command ~35 ms at start
run "$DEDUP" init "$T/plain"
assert_rc 0 "init of a local store"
LD_DEBUG=files "$DEDUP" ls "$T/plain" >/dev/null 2>"$T/ld.local" || fail "ls of a local store"
grep -q librados "$T/ld.local" && fail "ls of a local store loaded librados"

note "init, two puts, get, ls"
run on "$M1" "$DEDUP" init --block-size 64K "$S"
assert_rc 0 "init"
run on "$M1" "$DEDUP" init "$S"
assert_rc 1 "a second init"
assert_grep "exists" "$T/err" "a second init says the store exists"
LD_DEBUG=files on "$M1" "$DEDUP" put "$S@a" "$T/a" >/dev/null 2>"$T/ld.rados" || fail "put a"
assert_grep "librados" "$T/ld.rados" "a rados: store's put loads librados"
run on "$M1" "$DEDUP" put --json "$S@b" "$T/b"
assert_rc 0 "put b"
assert_eq 16 "$(json_get "$T/out" "j['new_blocks']")" "b stores only its new 1 MiB"
run on "$M1" "$DEDUP" get "$S@a" "$T/a.out"
assert_rc 0 "get a"
assert_same "$T/a" "$T/a.out" "a comes back"
run on "$M1" "$DEDUP" ls "$S"
assert_rc 0 "ls"
assert_eq "a b" "$(awk 'NR > 1 { printf "%s%s", sep, $1; sep = " " }' "$T/out")" "ls on machine 1"

note "a second machine lists and reads everything"
run on "$M2" "$DEDUP" ls "$S"
assert_rc 0 "ls on machine 2"
assert_eq "a b" "$(awk 'NR > 1 { printf "%s%s", sep, $1; sep = " " }' "$T/out")" "ls on machine 2"
run on "$M2" "$DEDUP" get "$S@b" "$T/b.out"
assert_rc 0 "get b on machine 2"
assert_same "$T/b" "$T/b.out" "b comes back on machine 2"

note "rm, gc, scrub"
gen_random "$T/x" $((1 << 20)) x
run on "$M1" "$DEDUP" put "$S@x" "$T/x"
assert_rc 0 "put x"
run on "$M1" "$DEDUP" rm "$S@a"
assert_rc 0 "rm a"
run on "$M1" "$DEDUP" rm "$S@x"
assert_rc 0 "rm x"
run on "$M1" "$DEDUP" gc --json "$S"
assert_rc 0 "gc"
# a's blocks are all b's; x's 16 blocks (1 MiB, incompressible) go
freed=$(json_get "$T/out" 'j["bytes_freed"]')
[ "$freed" -ge $((1 << 20)) ] && [ "$freed" -lt $((2 << 20)) ] || fail "gc freed $freed bytes, not x's 1 MiB"
assert_eq 16 "$(json_get "$T/out" 'j["ddt_entries_removed"]')" "gc removes x's 16 entries"
# the pool holds b's manifest alone, and packs of b's bytes only
rados -p "$POOL" -N s1 ls | sort >"$T/objects"
assert_eq "1" "$(grep -c '^manifests/' "$T/objects")" "one manifest left: $(tr '\n' ' ' <"$T/objects")"
grep -q '^manifests/[0-9a-f]*\.snap$' "$T/objects" || fail "the manifest left is not a committed one"
for o in DEDUP gen lock; do grep -qx "$o" "$T/objects" || fail "no $o object"; done
packs=$(on "$M1" "$DEDUP" stat --json "$S" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pack_bytes"])')
[ "$packs" -lt $((5 << 20)) ] || fail "packs hold $packs bytes after gc, more than b's 4 MiB"
run on "$M1" "$DEDUP" scrub "$S"
assert_rc 0 "scrub after gc"
run on "$M2" "$DEDUP" ls "$S"
assert_eq "b" "$(awk 'NR > 1 { printf "%s%s", sep, $1; sep = " " }' "$T/out")" "machine 2 sees the rm"
run on "$M2" "$DEDUP" get "$S@b" "$T/b.out"
assert_rc 0 "get b after gc"
assert_same "$T/b" "$T/b.out" "b after gc"
run on "$M2" "$DEDUP" scrub --json "$S"
assert_rc 0 "scrub on machine 2"

note "L1 and an L2 device on machine 2"
run on "$M2" "$DEDUP" cache add --size 64M "$S" "$T/l2dev"
assert_rc 0 "cache add on machine 2"
# L2 is fed what leaves L1: an L1 smaller than b
run on "$M2" "$DEDUP" cache set --l1-size 1M "$S"
assert_rc 0 "cache set on machine 2"
run on "$M2" "$DEDUP" get --l2-feed-sequential --stats "$T/st1.json" "$S@b" "$T/b.out"
assert_rc 0 "get feeding L2"
assert_same "$T/b" "$T/b.out" "b through the caches"
[ "$(json_get "$T/st1.json" 'j["pack_read_ops"]')" -ge 1 ] || fail "cold get read no pack"
entries=$(json_get "$T/st1.json" 'j["l2_entries"]')
[ "$entries" -ge 1 ] || fail "L2 holds no block after a fed get"
export DEDUP_CACHE_DIR=$M2
get_until "$T/b" "$T/st2.json" 'j["l2_hits"]' "$S@b" "$T/b.out"
unset DEDUP_CACHE_DIR
[ "$UNTIL" -ge 1 ] || fail "no L2 hit after a restart"
note "L2: $entries blocks fed, $UNTIL hits after a restart"

note "ddsend rados | ddrecv local, and back"
run on "$M1" bash -c "'$DDSEND' '$S@b' | '$DDRECV' '$T/local'"
assert_rc 0 "ddsend rados | ddrecv local"
run "$DEDUP" get "$T/local@b" "$T/b.out"
assert_same "$T/b" "$T/b.out" "b received into a local store"
gen_random "$T/c" $((2 << 20)) c
run "$DEDUP" put "$T/local@c" "$T/c"
assert_rc 0 "put c locally"
run on "$M2" bash -c "'$DDSEND' -i b '$T/local@c' | '$DDRECV' '$S'"
assert_rc 0 "ddsend -i local | ddrecv rados on machine 2"
run on "$M1" "$DEDUP" get "$S@c" "$T/c.out"
assert_rc 0 "machine 1 reads what machine 2 received"
assert_same "$T/c" "$T/c.out" "c on machine 1"

note "bytes kept locally"
stored=$(on "$M1" "$DEDUP" stat --json "$S" | python3 -c 'import json,sys; print(json.load(sys.stdin)["logical_bytes"])')
kept=$(du -sb "$M1" | cut -f1)
note "machine 1 keeps $kept bytes for $stored logical bytes"

note "a writer holds the store: another machine is told who"
mkfifo "$T/fifo"
DEDUP_CACHE_DIR=$M1 "$DEDUP" put "$S@slow" - <"$T/fifo" >"$T/slow.out" 2>"$T/slow.err" &
slow=$!
exec 7>"$T/fifo"
head -c $((1 << 20)) "$T/c" >&7
sleep 2
run on "$M2" "$DEDUP" put "$S@d" "$T/c"
assert_nonzero "put on machine 2 while machine 1 writes"
assert_grep "held by pid $slow on" "$T/err" "the holder is named"
assert_one_line "the refusal"
exec 7>&-
wait "$slow" || fail "the slow put failed: $(cat "$T/slow.err")"
run on "$M2" "$DEDUP" put "$S@d" "$T/c"
assert_rc 0 "put on machine 2 once machine 1 is done"

note "the OSD stopped in the middle of a put"
gen_random "$T/e" $((8 << 20)) e
DEDUP_CACHE_DIR=$M1 "$DEDUP" put "$S@e" - <"$T/fifo" >"$T/e.out" 2>"$T/e.err" &
wr=$!
exec 7>"$T/fifo"
head -c $((2 << 20)) "$T/e" >&7
sleep 1
"$DD_CEPH_SCRIPT" osd-stop "$DD_CEPH_DIR" >/dev/null
start=$(date +%s)
cat "$T/e" >&7 2>/dev/null || true
exec 7>&-
set +e
wait "$wr"
rc=$?
set -e
took=$(($(date +%s) - start))
[ "$rc" -ne 0 ] || fail "put succeeded with the OSD stopped"
# one bound (5 s) and the slack of a loaded machine: later steps fail at once
[ "$took" -le 15 ] || fail "put took $took s to fail with the OSD stopped"
note "put failed after $took s: $(head -n 1 "$T/e.err")"
"$DD_CEPH_SCRIPT" osd-start "$DD_CEPH_DIR" >/dev/null
# its lock runs out (it released it if it could)
run on "$M1" "$DEDUP" put --wait=60 "$S@e" "$T/e"
assert_rc 0 "put once the OSD is back"
run on "$M2" "$DEDUP" get "$S@e" "$T/e.out"
assert_same "$T/e" "$T/e.out" "e after the OSD came back"
run on "$M2" "$DEDUP" scrub "$S"
assert_rc 0 "scrub after the OSD stop"

note "a writer killed with SIGKILL"
DEDUP_CACHE_DIR=$M2 "$DEDUP" put "$S@f" - <"$T/fifo" >/dev/null 2>"$T/f.err" &
wr=$!
exec 7>"$T/fifo"
head -c $((3 << 20)) "$T/e" >&7
sleep 2
kill -0 "$wr" 2>/dev/null || fail "the put to kill ended early: $(cat "$T/f.err")"
kill -9 "$wr"
exec 7>&-
wait "$wr" 2>/dev/null && fail "the killed put exited 0"
run on "$M1" "$DEDUP" ls "$S"
assert_rc 0 "ls after the kill"
assert_eq "b c d e slow" "$(awk 'NR > 1 { printf "%s%s", sep, $1; sep = " " }' "$T/out")" "no half snapshot"
run on "$M1" "$DEDUP" put --wait=60 "$S@f" "$T/e"
assert_rc 0 "put after the killed writer's claim ran out"
run on "$M2" "$DEDUP" scrub "$S"
assert_rc 0 "scrub after the kill"
for n in b c d e f; do
	case $n in b) f=$T/b ;; c|d) f=$T/c ;; e|f) f=$T/e ;; esac
	run on "$M2" "$DEDUP" get "$S@$n" "$T/x.out"
	assert_rc 0 "get $n at the end"
	assert_same "$f" "$T/x.out" "$n at the end"
done
note "repair rebuilds a machine's catalog from the pool"
rm -rf "$M1"/*/db
run on "$M1" "$DEDUP" repair "$S"
assert_rc 0 "repair of machine 1's catalog"
run on "$M1" "$DEDUP" ls "$S"
assert_eq "b c d e f slow" "$(awk 'NR > 1 { printf "%s%s", sep, $1; sep = " " }' "$T/out")" "ls after repair"
run on "$M1" "$DEDUP" get "$S@c" "$T/x.out"
assert_same "$T/c" "$T/x.out" "c after repair"
echo "PASS [$TEST_NAME]"
