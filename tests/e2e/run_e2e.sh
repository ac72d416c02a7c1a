#!/bin/sh
# Runs one end-to-end program unmodified through `cuwire run` against a gpu-server with the sim
# backend that this script starts on a private Unix socket and stops afterwards.
#   run_e2e.sh GPU_SERVER CUWIRE PROGRAM [ARGS...]
# Exit status: the program's (124 when it ran past E2E_TIMEOUT seconds, default 300).
set -u
server=$1 cuwire=$2
shift 2
dir=$(mktemp -d "${TMPDIR:-/tmp}/cuwire-e2e.XXXXXX")
sock="$dir/gpu.sock"
"$server" --listen "unix:$sock" --backend sim >"$dir/server.log" 2>&1 &
spid=$!
i=0
while [ ! -S "$sock" ] && [ $i -lt 100 ]; do
  sleep 0.05
  i=$((i + 1))
done
if [ ! -S "$sock" ]; then
  echo "run_e2e: gpu-server did not start:" >&2
  cat "$dir/server.log" >&2
  kill "$spid" 2>/dev/null
  rm -rf "$dir"
  exit 1
fi
timeout "${E2E_TIMEOUT:-300}" "$cuwire" run --server "unix:$sock" -- "$@"
rc=$?
kill "$spid" 2>/dev/null
wait "$spid" 2>/dev/null
if [ $rc -ne 0 ]; then
  echo "run_e2e: exit status $rc; server log:" >&2
  tail -n 30 "$dir/server.log" >&2
fi
rm -rf "$dir"
exit $rc
