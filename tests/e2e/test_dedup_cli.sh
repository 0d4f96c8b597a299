#!/usr/bin/env bash
# test_dedup_cli.sh -- the `dedup` command line: usage errors, init options,
# byte-exact put/get round trips, ls, rm, name checks, bad stores.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# ---- usage ------------------------------------------------------------------
note "usage errors"
usage_error() { # MESSAGE ARGS...
	local msg=$1
	shift
	run "$DEDUP" "$@"
	assert_rc 2 "$msg"
	assert_one_line "$msg"
	assert_empty "$T/out" "$msg (stdout)"
}
usage_error "no command"
usage_error "unknown command" frobnicate
usage_error "unknown global option" --frob
usage_error "unknown put option" put --frob "$T/s@x"
usage_error "unknown short option" get -Z "$T/s@x"
usage_error "init without store" init
usage_error "init extra argument" init "$T/a" "$T/b"
usage_error "--block-size without value" init --block-size
usage_error "--block-size junk" init --block-size 4x "$T/a"
usage_error "--block-size empty" init --block-size '' "$T/a"
usage_error "--block-size negative" init --block-size -4096 "$T/a"
usage_error "--block-size not a power of two" init --block-size 5000 "$T/a"
usage_error "--block-size too small" init --block-size 2K "$T/a"
usage_error "--block-size too large" init --block-size 2M "$T/a"
usage_error "--block-size overflow" init --block-size 99999999999999999999999 "$T/a"
usage_error "--compress unknown" init --compress lz4 "$T/a"
usage_error "--compress bad level" init --compress zstd:99 "$T/a"
usage_error "--compress level junk" init --compress zstd:x "$T/a"
usage_error "put without snapshot" put
usage_error "put without @" put "$T/s" /dev/null
usage_error "put extra argument" put "$T/s@x" /dev/null /dev/null
usage_error "get extra argument" get "$T/s@x" a b
usage_error "ls without store" ls
usage_error "ls extra" ls "$T/a" "$T/b"
usage_error "stat option of another command" stat --wait "$T/a"
usage_error "rm without @" rm "$T/a"
usage_error "scrub extra" scrub "$T/a" "$T/b"
[ ! -e "$T/a" ] || fail "a usage error created a store"

run "$DEDUP" --help
assert_rc 0 "--help"
assert_grep 'usage: dedup' "$T/out" "--help on stdout"
assert_empty "$T/err" "--help stderr"
run "$DEDUP" put --help
assert_rc 0 "put --help"
assert_grep 'dedup put' "$T/out" "put --help on stdout"
run "$DEDUP" --version
assert_rc 0 "--version"
assert_grep '^dedup \(libdedup\) [0-9]+\.[0-9]+\.[0-9]+$' "$T/out" "--version"

# ---- init -------------------------------------------------------------------
note "init options"
init_check() { # DIR EXPR-ON-STAT-JSON ARGS...
	local dir=$1 expr=$2
	shift 2
	run "$DEDUP" init "$@" "$dir"
	assert_rc 0 "init $*"
	assert_empty "$T/out" "init $* (stdout)"
	[ -f "$dir/DEDUP" ] || fail "init $*: no $dir/DEDUP"
	assert_eq "libdedup store" "$(head -n1 "$dir/DEDUP")" "DEDUP first line"
	run "$DEDUP" stat --json "$dir"
	assert_rc 0 "stat --json after init $*"
	assert_json "$T/out" "stat --json"
	assert_eq true "$(json_get "$T/out" "$expr")" "init $*: $expr"
}
init_check "$T/i-default" "j['block_size'] == 131072 and j['snapshots'] == 0"
init_check "$T/i-bs4k" "j['block_size'] == 4096" --block-size 4096
init_check "$T/i-bs64k" "j['block_size'] == 65536" --block-size 64K
init_check "$T/i-bs1m" "j['block_size'] == 1048576" --block-size=1MiB
init_check "$T/i-verify" "j['verify'] is True" --verify
init_check "$T/i-none" "j['compress'] == 'none'" --compress none
init_check "$T/i-zstd" "j['compress'].startswith('zstd')" --compress zstd
init_check "$T/i-zstd3" "j['compress'] == 'zstd:3'" --compress zstd:3
init_check "$T/i-all" "j['block_size'] == 8192 and j['verify'] and j['compress'] == 'zstd:19'" \
	--verify --compress zstd:19 --block-size 8k
# options after the positional (getopt permutes)
run "$DEDUP" init "$T/i-late" --block-size 16K
assert_rc 0 "init with option after STORE"

run "$DEDUP" init "$T/i-default"
assert_rc 1 "init over an existing store"
assert_one_line "init over an existing store"
mkdir "$T/nonempty" && echo hi >"$T/nonempty/file"
run "$DEDUP" init "$T/nonempty"
assert_rc 1 "init in a non-empty directory"
assert_one_line "init in a non-empty directory"

# ---- put / get round trips ---------------------------------------------------
S="$T/s"
"$DEDUP" init --block-size 4096 "$S"
D="$T/data"
mkdir "$D"
: >"$D/empty"
gen_random "$D/one" 1 one
gen_blocks "$D/block" 4096 1
gen_blocks "$D/short" 4096 1 2 3 t100:short
gen_blocks "$D/holes" 4096 4 5 z z z z 6 z 7 z123 t77:a z z z z
gen_blocks "$D/zeros" 4096 z z z z z z z z
gen_blocks "$D/zero-unaligned" 4096 z100
gen_random "$D/big" $((9 * 1024 * 1024 + 4097)) big  # crosses the read chunks
# shellcheck disable=SC2046
gen_blocks "$D/big-holes" 4096 $(seq 1 300) $(for _ in $(seq 2200); do echo z; done) $(seq 301 400) t5:x

roundtrip() { # STORE NAME FILE
	local store=$1 name=$2 file=$3
	run "$DEDUP" put "$store@$name" "$file"
	assert_rc 0 "put $name"
	assert_empty "$T/out" "put $name (stdout)"
	assert_empty "$T/err" "put $name (stderr)"
	run "$DEDUP" get "$store@$name" "$T/got"
	assert_rc 0 "get $name to a file"
	assert_empty "$T/out" "get $name to a file (stdout)"
	assert_same "$file" "$T/got" "get $name to a file"
	run "$DEDUP" get "$store@$name"
	assert_rc 0 "get $name to stdout"
	assert_same "$file" "$T/out" "get $name to stdout"
	assert_empty "$T/err" "get $name to stdout (stderr)"
	run "$DEDUP" get "$store@$name" -
	assert_rc 0 "get $name to -"
	assert_same "$file" "$T/out" "get $name to -"
}
note "round trips"
for f in empty one block short holes zeros zero-unaligned big big-holes; do
	roundtrip "$S" "$f" "$D/$f"
done
note "round trips, default block size"
"$DEDUP" init "$T/s128"
for f in empty one short holes big big-holes; do
	roundtrip "$T/s128" "$f" "$D/$f"
done

note "stdin"
run_in "$D/short" "$DEDUP" put "$S@stdin-default"
assert_rc 0 "put from stdin (no FILE)"
run "$DEDUP" get "$S@stdin-default"
assert_same "$D/short" "$T/out" "put from stdin (no FILE)"
mkdir -p "$T/tree/sub"
cp "$D/short" "$D/holes" "$T/tree/"
cp "$D/one" "$T/tree/sub/"
tar_det() { tar -C "$T/tree" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - .; }
tar_det >"$T/tree.tar"
tar_det | "$DEDUP" put "$S@tar" - 2>"$T/err" || fail "tar | dedup put -"
run "$DEDUP" get "$S@tar"
assert_same "$T/tree.tar" "$T/out" "tar stream through a pipe"
"$DEDUP" get "$S@tar" | tar -tf - >"$T/list" || fail "tar -t of a restored stream"
assert_grep 'sub/one' "$T/list" "restored tar lists its files"

note "verbose"
run "$DEDUP" put -v "$S@verbose" "$D/short"
assert_rc 0 "put -v"
assert_empty "$T/out" "put -v (stdout)"
[ -s "$T/err" ] || fail "put -v printed no summary on stderr"
run "$DEDUP" get "$S@verbose" -v
assert_rc 0 "get -v (option after positional)"
assert_same "$D/short" "$T/out" "get -v to stdout"

# a store path that contains '@': the snapshot name follows the last '@'
"$DEDUP" init "$T/at@store"
roundtrip "$T/at@store" snap "$D/short"

# ---- ls -----------------------------------------------------------------------
note "ls"
run "$DEDUP" ls "$S"
assert_rc 0 "ls"
assert_grep '^NAME' "$T/out" "ls header"
for f in empty holes big stdin-default tar; do
	grep -q "^$f " "$T/out" || fail "ls does not list $f"
done
assert_grep '[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z' "$T/out" "ls ctime ISO 8601"
run "$DEDUP" ls --json "$S"
assert_rc 0 "ls --json"
assert_json "$T/out" "ls --json"
cp "$T/out" "$T/ls.json"
python3 - "$T/ls.json" "$D" <<'EOF' || fail "ls --json content"
import json, os, re, sys
snaps = {s['name']: s for s in json.load(open(sys.argv[1]))}
for f in ('empty', 'one', 'block', 'short', 'holes', 'zeros', 'big', 'big-holes'):
    s = snaps[f]
    size = os.path.getsize(os.path.join(sys.argv[2], f))
    assert s['size'] == size, f
    assert s['blocks'] == (size + 4095) // 4096, f
    assert re.fullmatch(r'[0-9a-f]{64}', s['digest']), s['digest']
    assert re.fullmatch(r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ', s['ctime']), s['ctime']
assert snaps['empty']['blocks'] == 0
assert snaps['one']['blocks'] == 1
assert snaps['block']['blocks'] == 1
assert snaps['short']['blocks'] == 4
assert snaps['zeros']['blocks'] == 8 and snaps['zeros']['zero_blocks'] == 8
assert snaps['holes']['blocks'] == 14 and snaps['holes']['zero_blocks'] >= 8  # the short zero tail may count
# same bytes, same digest; different bytes, different digest
assert snaps['stdin-default']['digest'] == snaps['short']['digest']
assert snaps['one']['digest'] != snaps['block']['digest']
assert list(snaps) == sorted(snaps, key=lambda n: n.encode()), 'name order'
EOF
"$DEDUP" init "$T/emptystore"
run "$DEDUP" ls --json "$T/emptystore"
assert_rc 0 "ls --json on an empty store"
assert_eq "[]" "$(json_get "$T/out" j)" "ls --json on an empty store"

# ---- rm -----------------------------------------------------------------------
note "rm"
run "$DEDUP" rm "$S@short"
assert_rc 0 "rm"
run "$DEDUP" get "$S@short"
assert_rc 1 "get after rm"
assert_one_line "get after rm"
assert_empty "$T/out" "get after rm (stdout)"
run "$DEDUP" get "$S@short" "$T/should-not-exist"
assert_rc 1 "get after rm to a file"
[ ! -e "$T/should-not-exist" ] || fail "a failed get left its output file"
run "$DEDUP" rm "$S@short"
assert_rc 1 "rm twice"
assert_one_line "rm twice"
run "$DEDUP" ls "$S"
grep -q '^short ' "$T/out" && fail "ls still lists a removed snapshot"
# the other snapshots are intact
run "$DEDUP" get "$S@holes"
assert_same "$D/holes" "$T/out" "other snapshot after rm"
run "$DEDUP" rm --wait "$S@stdin-default"
assert_rc 0 "rm --wait"

# ---- existing names, bad names -------------------------------------------------
note "existing and invalid names"
run "$DEDUP" put "$S@holes" "$D/one"
assert_rc 1 "put of an existing name"
assert_one_line "put of an existing name"
run "$DEDUP" get "$S@holes"
assert_same "$D/holes" "$T/out" "existing snapshot unchanged after refused put"

"$DEDUP" ls --json "$S" >"$T/ls-before"
"$DEDUP" stat --json "$S" >"$T/stat-before"
ls -R "$S" >"$T/tree-before"
long=$(printf 'x%.0s' $(seq 256))
for bad in "a/b" "/abs" ".." "." "" "$long" "$(printf 'tab\there')" "$(printf 'nl\nx')"; do
	run "$DEDUP" put "$S@$bad" "$D/one"
	assert_nonzero "put with name '$bad'"
	assert_one_line "put with name '$bad'"
done
run "$DEDUP" get "$S@../x"
assert_nonzero "get with name '../x'"
assert_one_line "get with name '../x'"
run "$DEDUP" rm "$S@.."
assert_nonzero "rm with name '..'"
"$DEDUP" ls --json "$S" >"$T/ls-after"
"$DEDUP" stat --json "$S" >"$T/stat-after"
ls -R "$S" >"$T/tree-after"
assert_same "$T/ls-before" "$T/ls-after" "snapshot list unchanged by refused names"
assert_same "$T/stat-before" "$T/stat-after" "stat unchanged by refused names"
assert_same "$T/tree-before" "$T/tree-after" "store files unchanged by refused names"
# the boundary: 255 bytes is a valid name
ok255=${long:1}
roundtrip "$S" "$ok255" "$D/one"
roundtrip "$S" "with space and é" "$D/one"

# ---- bad stores and inputs -----------------------------------------------------
note "missing and invalid stores"
for cmd in "ls" "stat" "scrub" "gc"; do
	run "$DEDUP" $cmd "$T/nope"
	assert_rc 1 "$cmd on a missing store"
	assert_one_line "$cmd on a missing store"
done
run "$DEDUP" put "$T/nope@x" "$D/one"
assert_rc 1 "put into a missing store"
assert_one_line "put into a missing store"
[ ! -e "$T/nope" ] || fail "put created a missing store"
run "$DEDUP" get "$T/nope@x" "$T/out-file"
assert_rc 1 "get from a missing store"
assert_one_line "get from a missing store"
[ ! -e "$T/out-file" ] || fail "get from a missing store created its output"
echo "not a store" >"$T/plain"
run "$DEDUP" ls "$T/plain"
assert_rc 1 "ls on a plain file"
assert_one_line "ls on a plain file"
run "$DEDUP" put "$T/plain@x" "$D/one"
assert_rc 1 "put into a plain file"
assert_one_line "put into a plain file"
assert_eq "not a store" "$(cat "$T/plain")" "plain file untouched"
mkdir "$T/emptydir"
run "$DEDUP" ls "$T/emptydir"
assert_rc 1 "ls on an empty directory"
assert_one_line "ls on an empty directory"

note "bad inputs"
run "$DEDUP" put "$S@missing-input" "$T/no-such-file"
assert_rc 1 "put of a missing file"
assert_one_line "put of a missing file"
run "$DEDUP" put "$S@dir-input" "$T/tree"
assert_rc 1 "put of a directory"
assert_one_line "put of a directory"
run "$DEDUP" ls --json "$S"
python3 -c 'import json,sys; n=[s["name"] for s in json.load(open(sys.argv[1]))]; sys.exit("missing-input" in n or "dir-input" in n)' "$T/out" ||
	fail "a failed put left a snapshot"
run "$DEDUP" get "$S@holes" "$T/no-such-dir/out"
assert_rc 1 "get into a missing directory"
assert_one_line "get into a missing directory"

echo "PASS [$TEST_NAME]"
