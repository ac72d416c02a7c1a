#!/usr/bin/env bash
# The main job, end to end: set up, build, start gpu-server on the default backend (auto: the
# GPU when there is one, else the sim), run an unmodified nvcc-built CUDA program through
# cuwire's client library, print its per-call latency table, stop the server.
#   scripts/demo.sh [PROGRAM [ARGS...]]   (default: the vector_add sample)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target gpu-server cuwire cuwire_cuda samples driver_smoke

run_dir="$(mktemp -d)"
sock="$run_dir/gpu-server.sock"
build/server/gpu-server --listen "unix:$sock" --backend auto --ready-file "$run_dir/ready" \
  >"$run_dir/server.log" 2>&1 &
server_pid=$!
cleanup() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  echo "--- gpu-server log"
  cat "$run_dir/server.log"
  rm -rf "$run_dir"
}
trap cleanup EXIT
for _ in $(seq 100); do [ -f "$run_dir/ready" ] && break; sleep 0.1; done
[ -f "$run_dir/ready" ] || { echo "demo: gpu-server did not start"; exit 1; }

if [ $# -eq 0 ]; then
  set -- build/samples/vector_add
fi
echo "--- running $* through cuwire (server unix:$sock)"
CUWIRE_STATS=1 build/client-lib/cuwire run --server "unix:$sock" -- "$@"
