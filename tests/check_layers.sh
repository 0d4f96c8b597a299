#!/usr/bin/env bash
# tests/check_layers.sh -- the module rules of docs/design.md, from the
# code: every `#include "..."` under libdedup/ is an arrow from the
# including file's module (its directory) to the included file's.  Fails
# (exit 1, one line per breach) on
#
#   - an import circle between modules (found with tsort(1));
#   - an arrow that runs up docs/design.md's module table ("Dependencies
#     run one way, down this list"), or names a module the table lacks;
#   - a foreign library included outside its one module: <lmdb.h> outside
#     catalog/, <zstd.h> outside pack/, <openssl/...> outside hash/.
#
#   tests/check_layers.sh [SOURCE_DIR]     (default: the repository root)
#
# Run by ctest as lint.check_layers.
set -euo pipefail

SRC=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
LIB=$SRC/libdedup
DESIGN=$SRC/docs/design.md
[[ -d $LIB && -f $DESIGN ]] || { echo "check_layers: no $LIB or $DESIGN" >&2; exit 2; }

# The modules, top (depends on nothing) to bottom, from the table's rows
# "| `name/` | ...": include/ and cmd/ are not under libdedup/.
mapfile -t ORDER < <(awk '/^## Modules/ { on = 1; next } on && /^## / { on = 0 }
	on && /^\| `[a-z0-9_]+\/` \|/ { m = $2; gsub(/[`\/]/, "", m); print m }' "$DESIGN")
((${#ORDER[@]} > 0)) || { echo "check_layers: no module table in $DESIGN" >&2; exit 2; }
declare -A RANK=()
for i in "${!ORDER[@]}"; do RANK[${ORDER[$i]}]=$i; done

# "from to file" for every include of another module's header; a plain
# name ("pipeline.h") or ./ is the file's own module.
EDGES=$(cd "$LIB" && find . -name '*.[ch]' | sort | while read -r f; do
	from=${f#./}
	from=${from%%/*}
	sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" |
	while read -r inc; do
		inc=${inc#../}
		case $inc in
		*/*) to=${inc%%/*} ;;
		*) to=$from ;;
		esac
		[[ $to == "$from" ]] || echo "$from $to ${f#./}"
	done
done)

bad=0
# the modules' directories must all be in the table
for d in "$LIB"/*/; do
	m=$(basename "$d")
	if [[ -z ${RANK[$m]+x} ]]; then
		echo "check_layers: libdedup/$m/ is not in docs/design.md's module table"
		bad=1
	fi
done
while read -r from to file; do
	[[ -n $from ]] || continue
	if [[ -z ${RANK[$to]+x} ]]; then
		echo "check_layers: libdedup/$file includes from '$to', not a module of docs/design.md"
		bad=1
	elif [[ -n ${RANK[$from]+x} ]] && ((RANK[$to] > RANK[$from])); then
		echo "check_layers: libdedup/$file ($from/) includes $to/, which docs/design.md puts below it"
		bad=1
	fi
done <<<"$EDGES"

# circles, whatever the table says: tsort names one and fails
if ! out=$(awk 'NF == 3 { print $2, $1 }' <<<"$EDGES" | sort -u | tsort 2>&1 >/dev/null); then
	echo "check_layers: an import circle between modules:"
	sed 's/^/  /' <<<"$out"
	bad=1
fi

# foreign headers: each library enters through one module
check_foreign() {
	local pattern=$1 owner=$2 name=$3 hits
	hits=$(cd "$LIB" && grep -rlE "^[[:space:]]*#[[:space:]]*include[[:space:]]*<$pattern" --include='*.[ch]' . |
		sed 's|^\./||' | grep -v "^$owner/" || true)
	if [[ -n $hits ]]; then
		echo "check_layers: $name included outside $owner/: $(echo $hits)"
		bad=1
	fi
}
check_foreign 'lmdb\.h' catalog '<lmdb.h>'
check_foreign 'zstd\.h' pack '<zstd.h>'
check_foreign 'openssl/' hash '<openssl/...>'

if ((bad)); then
	exit 1
fi
n=$(awk 'NF == 3 { print $1, $2 }' <<<"$EDGES" | sort -u | wc -l)
echo "check_layers: ${#ORDER[@]} modules, $n arrows between them, no circle, none upward"
