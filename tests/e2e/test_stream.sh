#!/usr/bin/env bash
# test_stream.sh -- ddsend / ddrecv end to end: raw files (-f, -o, -n),
# stores (full, incremental, refusals that must leave the target store
# unchanged), damaged streams, usage errors.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ -x "$DDSEND" ] || fail "$DDSEND not built"
[ -x "$DDRECV" ] || fail "$DDRECV not built"
BS=131072

# ---- usage ------------------------------------------------------------------
note "usage errors"
usage_error() { # MESSAGE CMD ARGS...
	local msg=$1
	shift
	run "$@" </dev/null
	assert_rc 2 "$msg"
	assert_one_line "$msg"
	assert_empty "$T/out" "$msg (stdout)"
}
usage_error "ddsend no argument" "$DDSEND"
usage_error "ddsend unknown option" "$DDSEND" --frob "$T/s@a"
usage_error "ddsend -i without value" "$DDSEND" -i
usage_error "ddsend no @" "$DDSEND" "$T/s"
usage_error "ddsend bad name" "$DDSEND" "$T/s@.."
usage_error "ddsend extra" "$DDSEND" "$T/s@a" x
usage_error "ddsend -f with -i" "$DDSEND" -f /dev/null -i a
usage_error "ddsend -b not power of two" "$DDSEND" -b 5000 -f /dev/null
usage_error "ddsend -c bad" "$DDSEND" -c 42 -f /dev/null
usage_error "ddsend base of another store" "$DDSEND" -i "$T/other@a" "$T/s@b"
usage_error "ddsend --json=- (stdout is the stream)" "$DDSEND" --json=- "$T/s@a"
usage_error "ddrecv no argument" "$DDRECV"
usage_error "ddrecv -o and -n" "$DDRECV" -o "$T/x" -n
usage_error "ddrecv --json with -A" "$DDRECV" --json -A "$T/s"
usage_error "ddrecv -n --json=FILE" "$DDRECV" -n --json="$T/x"
usage_error "ddrecv -s with -o" "$DDRECV" -s -o "$T/x"
usage_error "ddrecv extra" "$DDRECV" "$T/s" "$T/t"
for c in "$DDSEND" "$DDRECV"; do
	run "$c" --help
	assert_rc 0 "$c --help"
	assert_grep '^usage: ' "$T/out" "$c --help on stdout"
	run "$c" --version
	assert_rc 0 "$c --version"
	assert_grep '^dd(send|recv) \(libdedup\) [0-9]+\.[0-9]+\.[0-9]+$' "$T/out" "$c --version"
done

# ---- raw files ----------------------------------------------------------------
note "ddsend -f | ddrecv -o"
# blocks: 0 1 0 zero zero 2 1 zero, then a short random tail
gen_blocks "$T/img" $BS 0 1 0 z z 2 1 z t5000:1
"$DDSEND" -f "$T/img" >"$T/img.dds" 2>"$T/err" || fail "ddsend -f: $(cat "$T/err")"
assert_empty "$T/err" "ddsend -f stderr"
run_in "$T/img.dds" "$DDRECV" -o "$T/img.out"
assert_rc 0 "ddrecv -o"
assert_same "$T/img" "$T/img.out" "ddrecv -o rebuilds the bytes"
"$DDSEND" -f "$T/img" | "$DDRECV" -o "$T/img.out2" || fail "pipe"
assert_same "$T/img" "$T/img.out2" "ddsend -f | ddrecv -o"
# zero blocks are holes in the output
alloc=$(stat -c '%b*%B' "$T/img.out" | bc)
[ "$alloc" -lt "$(stat -c %s "$T/img")" ] || fail "zero runs were not left as holes ($alloc bytes allocated)"
# 4 KiB blocks and no compression
"$DDSEND" -b 4K -c none -f "$T/img" | "$DDRECV" -o "$T/img.out3" || fail "4K none"
assert_same "$T/img" "$T/img.out3" "-b 4K -c none"
# an empty file
: >"$T/empty"
"$DDSEND" -f "$T/empty" | "$DDRECV" -o "$T/empty.out" || fail "empty"
assert_same "$T/empty" "$T/empty.out" "empty file"
# a pipe cannot be sent (read twice)
run bash -c "cat '$T/img' | '$DDSEND' -f /dev/stdin >/dev/null"
assert_rc 1 "ddsend -f of a pipe"
assert_one_line "ddsend -f of a pipe"

note "ddrecv -n"
run_in "$T/img.dds" "$DDRECV" -n
assert_rc 0 "ddrecv -n"
assert_grep '^name: +img$' "$T/out" "-n name"
assert_grep '^block size: +131072$' "$T/out" "-n block size"
assert_grep "^size: +$((8 * BS + 5000)) bytes" "$T/out" "-n size"
assert_grep '^  DATA +4 records' "$T/out" "-n DATA count"
assert_grep '^  REF +2 records' "$T/out" "-n REF count"
assert_grep '^  ZERO +2 records +3 blocks' "$T/out" "-n ZERO count"
assert_grep "^stream bytes: +$(stat -c %s "$T/img.dds") " "$T/out" "-n stream bytes"
run_in "$T/img.dds" "$DDRECV" -n --json
assert_rc 0 "ddrecv -n --json"
assert_json "$T/out" "-n --json"
assert_eq 4 "$(json_get "$T/out" "j['data_records']")" "json data_records"
assert_eq 3 "$(json_get "$T/out" "j['zero_blocks']")" "json zero_blocks"

note "damaged streams"
len=$(stat -c %s "$T/img.dds")
for cut in 0 1 15 16 100 $((len / 2)) $((len - 1)); do
	head -c "$cut" "$T/img.dds" >"$T/cut.dds"
	run_in "$T/cut.dds" "$DDRECV" -n
	assert_rc 1 "ddrecv -n of a stream cut at $cut"
	assert_one_line "cut at $cut"
	assert_grep "cut short at byte $cut" "$T/err" "cut at $cut"
	run_in "$T/cut.dds" "$DDRECV" -o "$T/cut.out"
	assert_rc 1 "ddrecv -o of a stream cut at $cut"
	[ ! -e "$T/cut.out" ] || fail "ddrecv -o left a partial file behind (cut $cut)"
done
for at in 0 20 200 $((len / 2)) $((len - 40)); do
	python3 - "$T/img.dds" "$T/flip.dds" "$at" <<'EOF'
import sys
d = bytearray(open(sys.argv[1], 'rb').read()); d[int(sys.argv[3])] ^= 0x10
open(sys.argv[2], 'wb').write(d)
EOF
	run_in "$T/flip.dds" "$DDRECV" -n
	assert_rc 1 "ddrecv -n of a stream flipped at $at"
	assert_one_line "flip at $at"
	assert_grep 'DD_ECHECKSUM: stream record [0-9]+ (\([A-Z]+\) )?at byte [0-9]+' "$T/err" "flip at $at names the record"
done
printf 'not a stream at all, just text that goes on for a while\n' >"$T/junk"
run_in "$T/junk" "$DDRECV" -n
assert_rc 1 "junk"
assert_one_line "junk"

# ---- stores (dd_send / dd_recv) -------------------------------------------------
note "stores: full and incremental"
S=$T/s S2=$T/s2
"$DEDUP" init --block-size $BS "$S" 2>"$T/err" || fail "init"
"$DEDUP" init --block-size $BS "$S2" 2>"$T/err" || fail "init s2"
gen_blocks "$T/a" $BS 0 1 2 3 z 4 1 5 t777:2
gen_blocks "$T/b" $BS 0 1 9 3 z 4 1 8 t777:2
"$DEDUP" put "$S@a" "$T/a" 2>"$T/err" || fail "put a"
"$DEDUP" put "$S@b" "$T/b" 2>"$T/err" || fail "put b"

snapshot_state() { # STORE OUT: names and bytes of every snapshot
	local st=$1 out=$2 n
	"$DEDUP" ls --json "$st" | python3 -c '
import json, sys
j = json.load(sys.stdin)
snaps = j["snapshots"] if isinstance(j, dict) else j
for s in snaps: print(s["name"])' >"$out.names"
	: >"$out"
	while read -r n; do
		printf '%s %s\n' "$n" "$("$DEDUP" get "$st@$n" - | sha256sum | cut -c1-64)" >>"$out"
	done <"$out.names"
}

run bash -c "'$DDSEND' '$S@a' | '$DDRECV' '$S2'"
assert_rc 0 "ddsend S@a | ddrecv S2"
"$DEDUP" get "$S2@a" "$T/a.back" 2>"$T/err" || fail "get S2@a"
assert_same "$T/a" "$T/a.back" "full stream into a store"

"$DDSEND" -i a "$S@b" >"$T/incr.dds" 2>"$T/err" || fail "ddsend -i"
"$DDSEND" "$S@b" >"$T/full_b.dds" 2>"$T/err" || fail "ddsend full b"
[ "$(stat -c %s "$T/incr.dds")" -lt "$(stat -c %s "$T/full_b.dds")" ] ||
	fail "incremental stream is not smaller than the full one"
run_in "$T/incr.dds" "$DDRECV" -n
assert_rc 0 "ddrecv -n of an incremental"
assert_grep '^base: +a$' "$T/out" "-n base"
for base in a @a "$S@a"; do
	"$DDSEND" -i "$base" "$S@b" | cmp -s - "$T/incr.dds" ||
		fail "ddsend -i '$base' gives another stream"
done
run_in "$T/incr.dds" "$DDRECV" "$S2"
assert_rc 0 "incremental into S2"
"$DEDUP" get "$S2@b" "$T/b.back" 2>"$T/err" || fail "get S2@b"
assert_same "$T/b" "$T/b.back" "incremental stream into a store"
run_in "$T/full_b.dds" "$DDRECV" "$S2@b2"
assert_rc 0 "receive under another name"
"$DEDUP" get "$S2@b2" "$T/b2.back" 2>"$T/err" || fail "get S2@b2"
assert_same "$T/b" "$T/b2.back" "ddrecv STORE@NAME"

note "stores: refusals leave the target unchanged"
snapshot_state "$S2" "$T/state0"
refused() { # MESSAGE STREAM-FILE TARGET
	run_in "$2" "$DDRECV" "$3"
	assert_nonzero "$1"
	assert_one_line "$1"
	snapshot_state "$S2" "$T/state1"
	cmp -s "$T/state0" "$T/state1" || fail "$1: the store changed"
}
refused "snapshot exists" "$T/full_b.dds" "$S2"
S4K=$T/s4k
"$DEDUP" init --block-size 4096 "$S4K" 2>"$T/err" || fail "init 4k"
"$DEDUP" put "$S4K@a" "$T/a" 2>"$T/err" || fail "put 4k"
"$DDSEND" "$S4K@a" >"$T/4k.dds" 2>"$T/err" || fail "ddsend 4k"
refused "a stream of another block size" "$T/4k.dds" "$S2@x4k"
assert_grep '^ddrecv: DD_EBLOCKSIZE: stream block size 4096 differs from the store.s 131072' \
	"$T/err" "another block size: its own code"
# incremental whose base is missing: a fresh store
S3=$T/s3
"$DEDUP" init --block-size $BS "$S3" 2>"$T/err" || fail "init s3"
run_in "$T/incr.dds" "$DDRECV" "$S3"
assert_nonzero "incremental without its base"
assert_one_line "incremental without its base"
[ "$("$DEDUP" ls --json "$S3" | tr -d '[:space:]')" = "[]" ] || fail "S3 got a snapshot"
# incremental whose base has the same name but other content
"$DEDUP" rm "$S2@b" 2>"$T/err" || fail "rm S2@b"
"$DEDUP" rm "$S2@a" 2>"$T/err" || fail "rm S2@a"
"$DEDUP" put "$S2@a" "$T/b" 2>"$T/err" || fail "put other a"
snapshot_state "$S2" "$T/state0"
refused "incremental whose base differs" "$T/incr.dds" "$S2"
grep -qi 'base' "$T/err" || fail "the base refusal does not say 'base'"
# damaged streams
len=$(stat -c %s "$T/full_b.dds")
for cut in 10 $((len / 2)) $((len - 1)); do
	head -c "$cut" "$T/full_b.dds" >"$T/cut.dds"
	refused "stream cut at $cut" "$T/cut.dds" "$S2@cut"
	assert_grep 'cut short' "$T/err" "cut at $cut"
done
for at in 30 $((len / 2)) $((len - 10)); do
	python3 - "$T/full_b.dds" "$T/flip.dds" "$at" <<'EOF'
import sys
d = bytearray(open(sys.argv[1], 'rb').read()); d[int(sys.argv[3])] ^= 1
open(sys.argv[2], 'wb').write(d)
EOF
	refused "stream flipped at $at" "$T/flip.dds" "$S2@flip"
done
refused "not a stream" "$T/junk" "$S2@junk"
refused "a raw-file stream with a bad name target" "$T/img.dds" "$S2@bad/name"

note "stores: ddrecv creates a missing target with the stream's block size"
run_in "$T/4k.dds" "$DDRECV" -v "$T/new4k"
assert_rc 0 "ddrecv into a new store"
assert_grep "created store '.*/new4k' \(fixed, block size 4096\)" "$T/err" "-v says it created the store"
"$DEDUP" get "$T/new4k@a" "$T/new4k.back" 2>"$T/err" || fail "get new4k@a"
assert_same "$T/a" "$T/new4k.back" "a created store holds the snapshot"
"$DDSEND" "$T/new4k@a" 2>"$T/err" | cmp -s - "$T/4k.dds" ||
	fail "the created store (block size 4096) sends another stream"
run_in "$T/4k.dds" "$DDRECV" --no-create "$T/none"
assert_rc 1 "--no-create of a missing store"
assert_one_line "--no-create of a missing store"
assert_grep 'DD_ENOENT' "$T/err" "--no-create names DD_ENOENT"
[ ! -e "$T/none" ] || fail "--no-create created $T/none"
usage_error "ddrecv --no-create with -o" "$DDRECV" --no-create -o "$T/x"
# a receive that fails leaves no store behind, nor anything in an empty
# directory it was given
head -c 70000 "$T/4k.dds" >"$T/cut4k.dds"
run_in "$T/cut4k.dds" "$DDRECV" "$T/none"
assert_rc 1 "a cut stream into a new store"
assert_one_line "a cut stream into a new store"
[ ! -e "$T/none" ] || fail "a failed receive left the store it created"
mkdir "$T/emptydir"
run_in "$T/cut4k.dds" "$DDRECV" "$T/emptydir"
assert_rc 1 "a cut stream into an empty directory"
[ -d "$T/emptydir" ] && [ -z "$(ls -A "$T/emptydir")" ] ||
	fail "a failed receive into an empty directory left $(ls -A "$T/emptydir")"
run_in "$T/incr.dds" "$DDRECV" "$T/none"
assert_rc 1 "an incremental into a new store (no base)"
[ ! -e "$T/none" ] || fail "a refused incremental left the store it created"
run_in "$T/junk" "$DDRECV" "$T/none"
assert_rc 1 "junk into a new store"
assert_one_line "junk into a new store"
[ ! -e "$T/none" ] || fail "junk created a store"
# something that is not a store is not overwritten
mkdir "$T/notstore" && echo x >"$T/notstore/file"
run_in "$T/4k.dds" "$DDRECV" "$T/notstore"
assert_rc 1 "a directory that is not a store"
assert_one_line "a directory that is not a store"
[ "$(ls -A "$T/notstore")" = file ] || fail "ddrecv changed a directory that is not a store"

note "stores: a receive beside a running put"
# A put that waits on its input holds its writer open: a receive into the
# same store goes on beside it; one into the name it writes is refused.
mkfifo "$T/fifo"
"$DEDUP" put "$S2@slow" "$T/fifo" 2>"$T/put.err" &
putpid=$!
exec 9>"$T/fifo"
printf 'x' >&9
sleep 1
refused "a receive into a name being written" "$T/img.dds" "$S2@slow"
assert_grep 'being written' "$T/err" "a name being written"
run_in "$T/img.dds" "$DDRECV" "$S2@beside"
assert_rc 0 "a receive beside a running put"
"$DEDUP" get "$S2@beside" >"$T/beside.out" 2>"$T/err" || fail "get beside"
assert_same "$T/img" "$T/beside.out" "the snapshot received beside a put"
exec 9>&-
wait "$putpid" || fail "the slow put failed: $(cat "$T/put.err")"
[ "$("$DEDUP" get "$S2@slow" | od -An -c | tr -d ' \n')" = "x" ] ||
	fail "the slow put's snapshot is not its one byte"

note "ok"
