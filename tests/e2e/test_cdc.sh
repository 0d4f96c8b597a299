#!/usr/bin/env bash
# test_cdc.sh -- content-defined blocks through the commands: `dedup init
# --chunker fastcdc`, put / get of images that shift (an insertion costs
# only the blocks around it), ls, stat, diff, rm + gc, scrub, repair from
# the manifests alone; replication with ddsend / ddrecv, full, incremental
# and resumed, and refused by a store of the other chunker with one line;
# `ddsend --chunker fastcdc -f` with `ddrecv -o`; `dedup scan --chunker
# fixed,fastcdc` in text and JSON, its fastcdc figures those of the store;
# reads through the L1 and L2 caches;
# and the options' usage errors.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

S=$T/s S2=$T/s2 F=$T/fixed
note "init: format 3, the chunker in DEDUP"
"$DEDUP" init --chunker fastcdc --block-size 16K "$S" 2>"$T/err" || fail "init"
assert_grep '^format 3$' "$S/DEDUP" "DEDUP of a fastcdc store"
assert_grep '^chunker 1$' "$S/DEDUP" "DEDUP chunker line"
"$DEDUP" init "$F" 2>"$T/err" || fail "init fixed"
assert_grep '^format 4$' "$F/DEDUP" "DEDUP of a fixed store"
grep -q '^chunker' "$F/DEDUP" && fail "a fixed store's DEDUP names a chunker"
for bad in "--chunker fastcdc --block-size 512K" "--chunker rabin" \
	   "--chunker fastcdc --block-size 2K"; do
	# shellcheck disable=SC2086
	run "$DEDUP" init $bad "$T/bad"
	assert_rc 2 "init $bad"
	assert_one_line "init $bad"
done

note "put and get: a shifted copy costs the blocks around the insertion"
gen_random "$T/r" $((4 * 1024 * 1024)) cdc
{ head -c 1500000 "$T/r"; head -c 300000 /dev/zero; tail -c +1500001 "$T/r"; } >"$T/a"
{ head -c 777777 "$T/a"; printf 'inserted bytes'; tail -c +777778 "$T/a"; } >"$T/b"
"$DEDUP" put "$S@a" "$T/a" 2>"$T/err" || fail "put a"
run "$DEDUP" put -v "$S@b" - <"$T/b"
assert_rc 0 "put b from stdin"
new=$(grep -o '[0-9]* new' "$T/err" | head -n 1 | cut -d' ' -f1)
[ -n "$new" ] && [ "$new" -le 4 ] || fail "put b stored $new new blocks (shifted copy)"
for s in a b; do
	"$DEDUP" get "$S@$s" "$T/$s.back" 2>"$T/err" || fail "get $s"
	assert_same "$T/$s" "$T/$s.back" "get $s"
done
"$DEDUP" ls "$S" >"$T/ls" 2>"$T/err" || fail "ls"
assert_grep '^b ' "$T/ls" "ls lists b"
"$DEDUP" stat "$S" >"$T/stat" 2>"$T/err" || fail "stat"
assert_grep 'fastcdc, average block 16 KiB' "$T/stat" "stat names the chunker"
"$DEDUP" stat --json "$S" >"$T/stat.json" 2>"$T/err" || fail "stat --json"
assert_eq fastcdc "$(json_get "$T/stat.json" 'j["chunker"]')" "stat JSON chunker"
assert_eq 2 "$(json_get "$T/stat.json" 'j["zero_blocks"]')" "zero run: one hole in each of two snapshots"
"$DEDUP" diff "$S@a" b >"$T/diff" 2>"$T/err" || fail "diff"
assert_grep '^77[0-9]{4} ' "$T/diff" "diff starts near the insertion"

note "replication: full, incremental, resumed; a fixed store refuses"
"$DEDUP" init --chunker fastcdc --block-size 16K "$S2" 2>"$T/err" || fail "init s2"
"$DDSEND" "$S@a" >"$T/a.dds" 2>"$T/err" || fail "ddsend a"
"$DDSEND" -i a "$S@b" >"$T/b.dds" 2>"$T/err" || fail "ddsend -i a b"
[ "$(stat -c %s "$T/b.dds")" -lt 300000 ] || fail "incremental stream of b is $(stat -c %s "$T/b.dds") bytes"
run_in "$T/a.dds" "$DDRECV" "$F"
assert_rc 1 "a fastcdc stream into a fixed store"
assert_one_line "a fastcdc stream into a fixed store"
assert_grep 'fastcdc.*fixed' "$T/err" "the refusal names both chunkers"
kept_half "$T/a.dds" "$S2"
run bash -c "'$DDSEND' -t '$tok' '$S@a' | '$DDRECV' -s '$S2'"
assert_rc 0 "resumed receive"
run_in "$T/b.dds" "$DDRECV" "$S2"
assert_rc 0 "incremental receive"
"$DEDUP" get "$S2@b" "$T/b.back2" 2>"$T/err" || fail "get b from s2"
assert_same "$T/b" "$T/b.back2" "b through a stream"
run_in "$T/a.dds" "$DDRECV" -n
assert_rc 0 "ddrecv -n of a fastcdc stream"
"$DDRECV" -o "$T/a.raw" <"$T/a.dds" 2>"$T/err" || fail "ddrecv -o"
assert_same "$T/a" "$T/a.raw" "ddrecv -o of a store's stream"

note "ddsend --chunker fastcdc -f and ddrecv -o"
"$DDSEND" --chunker fastcdc -b 16K -f "$T/b" >"$T/bf.dds" 2>"$T/err" || fail "ddsend -f fastcdc"
"$DDRECV" -o "$T/b.raw" <"$T/bf.dds" 2>"$T/err" || fail "ddrecv -o fastcdc"
assert_same "$T/b" "$T/b.raw" "raw fastcdc stream"
"$DDRECV" "$S2@bf" <"$T/bf.dds" 2>"$T/err" || fail "raw stream into the fastcdc store"
"$DEDUP" ls --json "$S2" >"$T/ls.json" 2>"$T/err"
d_b=$(json_get "$T/ls.json" '[s["digest"] for s in j if s["name"] == "b"][0]')
d_bf=$(json_get "$T/ls.json" '[s["digest"] for s in j if s["name"] == "bf"][0]')
assert_eq "$d_b" "$d_bf" "the same cut by ddsend -f and by put: the same content digest"
run "$DDSEND" --chunker fastcdc -b 1M -f "$T/b"
assert_rc 2 "ddsend -f fastcdc with a 1M average"
run "$DDSEND" --chunker fastcdc "$S@a"
assert_rc 2 "--chunker without -f"

note "rm, gc, scrub, repair"
"$DEDUP" rm "$S@a" 2>"$T/err" || fail "rm a"
"$DEDUP" gc "$S" >/dev/null 2>"$T/err" || fail "gc"
"$DEDUP" scrub "$S" >/dev/null 2>"$T/err" || fail "scrub"
rm -rf "$S/db"
"$DEDUP" repair "$S" >/dev/null 2>"$T/err" || fail "repair"
"$DEDUP" get "$S@b" - 2>"$T/err" | cmp -s - "$T/b" || fail "b after repair"
"$DEDUP" scrub "$S" >/dev/null 2>"$T/err" || fail "scrub after repair"

note "scan: both chunkers side by side; fastcdc's figures are the store's (--compress-exact)"
"$DEDUP" scan --chunker fixed,fastcdc --block-size 16K "$T/a" "$T/b" >"$T/scan" 2>"$T/err" || fail "scan"
assert_grep '^fixed 16 KiB ' "$T/scan" "scan summary: fixed"
assert_grep '^fastcdc 16 KiB .*~' "$T/scan" "scan summary: fastcdc, estimated"
assert_grep '^~ estimated from the fixed blocks' "$T/scan" "scan summary: the estimate said"
"$DEDUP" scan --json --compress-exact --chunker fastcdc,fixed --block-size 16K "$T/a" "$T/b" >"$T/scan.json" 2>"$T/err" || fail "scan --json"
assert_json "$T/scan.json" "scan --json"
assert_eq '[false, false]' "$(json_get "$T/scan.json" '[r["stored_estimated"] for r in j["results"]]')" "scan --compress-exact: nothing estimated"
"$DEDUP" scan --json --chunker fastcdc,fixed --block-size 16K "$T/a" "$T/b" >"$T/scan-est.json" 2>"$T/err" || fail "scan --json (estimated)"
assert_json "$T/scan-est.json" "scan --json (estimated)"
assert_eq '[true, false]' "$(json_get "$T/scan-est.json" '[r["stored_estimated"] for r in j["results"]]')" "scan: fastcdc estimated"
assert_eq '["sha256", "sha256"]' "$(json_get "$T/scan.json" '[r["key"] for r in j["results"]]')" "scan --compress-exact: SHA-256 keys"
assert_eq '["xxh3-128", "sha256"]' "$(json_get "$T/scan-est.json" '[r["key"] for r in j["results"]]')" "scan: fastcdc keyed by XXH3-128"
assert_grep '^fastcdc blocks told apart by XXH3-128' "$T/scan" "scan summary: the fast key said"
# the XXH3-keyed counts are the SHA-256-keyed ones
for k in unique_blocks unique_bytes referenced_blocks zero_blocks; do
	assert_eq "$(json_get "$T/scan.json" "j['results'][0]['$k']")" \
		"$(json_get "$T/scan-est.json" "j['results'][0]['$k']")" "scan fastcdc $k, estimated or not"
done
assert_eq "$(json_get "$T/scan.json" "j['results'][1]['stored_bytes']")" \
	"$(json_get "$T/scan-est.json" "j['results'][1]['stored_bytes']")" "scan fixed stored_bytes, compressed either way"
est_off=$(python3 -c 'import json, sys
e, x = (json.load(open(f))["results"][0]["stored_bytes"] for f in sys.argv[1:])
print(abs(e - x) / x)' "$T/scan-est.json" "$T/scan.json")
python3 -c "import sys; sys.exit(not $est_off <= 0.03)" || fail "scan: estimated stored_bytes $est_off off the compressed figure"
assert_eq '["fastcdc", "fixed"]' "$(json_get "$T/scan.json" '[r["chunker"] for r in j["results"]]')" "scan JSON order"
"$DEDUP" init --chunker fastcdc --block-size 16K "$T/s3" 2>"$T/err"
"$DEDUP" put "$T/s3@a" "$T/a" 2>"$T/err" && "$DEDUP" put "$T/s3@b" "$T/b" 2>"$T/err" || fail "put into s3"
"$DEDUP" stat --json "$T/s3" >"$T/s3.json" 2>"$T/err"
for k in unique_blocks unique_bytes stored_bytes referenced_blocks zero_blocks; do
	assert_eq "$(json_get "$T/s3.json" "j['$k']")" \
		"$(json_get "$T/scan.json" "j['results'][0]['$k']")" "scan fastcdc $k vs the store"
done
fixed_u=$(json_get "$T/scan.json" 'j["results"][1]["unique_bytes"]')
cdc_u=$(json_get "$T/scan.json" 'j["results"][0]["unique_bytes"]')
[ "$cdc_u" -lt "$fixed_u" ] || fail "fastcdc should dedup the shifted copy ($cdc_u vs $fixed_u)"
run "$DEDUP" scan --chunker fastcdc --block-size 1M "$T/a"
assert_rc 2 "scan fastcdc 1M"
assert_one_line "scan fastcdc 1M"
run "$DEDUP" scan --chunker fastcdc,fastcdc "$T/a"
assert_rc 2 "scan chunker twice"

note "caches: blocks of varying length through L1 and L2"
"$DEDUP" cache add --size 64M "$T/s3" "$T/l2" 2>"$T/err" || fail "cache add"
# a small L1 evicts into L2; `get` reads sequentially, so feed those too
run "$DEDUP" get --l1-size 64K --l2-feed-sequential --stats "$T/c1.json" "$T/s3@b" "$T/b.c1"
assert_rc 0 "get, feeding L2"
assert_same "$T/b" "$T/b.c1" "get through the caches"
cold=$(json_get "$T/c1.json" 'j["pack_read_ops"]')
[ "$(json_get "$T/c1.json" 'j["l2_entries"]')" -ge 1 ] || fail "nothing went to L2"
get_until "$T/b" "$T/c2.json" 'j["l2_hits"]' --l1-size 64K "$T/s3@b" "$T/b.c2"
[ "$UNTIL" -ge 1 ] || fail "no L2 hit on a fastcdc store"
assert_eq "$cold" "$(json_get "$T/c2.json" 'j["l2_hits"] + j["pack_read_ops"]')" "L2 hits + pack reads"
assert_eq 0 "$(json_get "$T/c2.json" 'j["l2_cksum_errors"]')" "no L2 checksum error"
note "ok"
