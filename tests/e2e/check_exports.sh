#!/bin/sh
# Every function the toolkit's stub libcuda.so exports must be exported by cuwire's
# libcuda.so.1 too: libraries resolve driver entry points with dlsym (cuBLASLt 13 looks up
# ~80, old ABI variants such as cuGraphInstantiate and cuStreamGetCaptureInfo_v2 included)
# and refuse to start when one is missing.
#   check_exports.sh NM STUB_LIBCUDA CUWIRE_LIBCUDA
set -u
nm=$1 stub=$2 ours=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/cuwire-exports.XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$nm" -D --defined-only "$stub" | awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }' | sort -u >"$dir/stub" || exit 1
"$nm" -D --defined-only "$ours" | awk '{ sub(/@.*/, "", $3); print $3 }' | sort -u >"$dir/ours" || exit 1
[ -s "$dir/stub" ] || { echo "check_exports: no symbols in $stub" >&2; exit 1; }
missing=$(comm -23 "$dir/stub" "$dir/ours")
if [ -n "$missing" ]; then
  echo "check_exports: $(echo "$missing" | wc -l) driver functions are not exported by $ours:" >&2
  echo "$missing" >&2
  exit 1
fi
echo "ok: all $(wc -l <"$dir/stub") functions of $stub are exported"
