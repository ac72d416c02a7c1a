#!/bin/sh
# The client libraries need nothing but glibc (issue 38): their NEEDED entries are glibc's own
# libraries, and no symbol asks for a glibc newer than the one README.md states.
#   check_self_contained.sh READELF OBJDUMP MAX_GLIBC LIBRARY...
set -u
readelf=$1 objdump=$2 max=$3
shift 3
status=0
for lib in "$@"; do
  needed=$("$readelf" -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  for n in $needed; do
    case $n in
      libc.so.6 | libm.so.6 | libdl.so.2 | libpthread.so.0 | librt.so.1 | ld-linux-x86-64.so.2) ;;
      *)
        echo "check_self_contained: $lib needs $n, not a glibc library" >&2
        status=1
        ;;
    esac
  done
  newest=$("$objdump" -T "$lib" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -t. -k1,1n -k2,2n -u | tail -1)
  if [ -z "$newest" ]; then
    echo "check_self_contained: no glibc symbol versions in $lib" >&2
    status=1
  elif [ "$(printf '%s\n%s\n' "$newest" "$max" | sort -t. -k1,1n -k2,2n | tail -1)" != "$max" ]; then
    echo "check_self_contained: $lib asks for glibc $newest, newer than $max" >&2
    status=1
  else
    echo "ok: $lib needs $(echo $needed | tr ' ' ','), glibc $newest at most"
  fi
done
exit $status
