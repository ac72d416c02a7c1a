#!/usr/bin/env bash
# The checks that need a GPU, for a session lent a device machine. That machine is bare (no
# Debian packages, nothing to fetch), so the binaries are built here and carried there:
#
#   bash scripts/gpu-check.sh pack     here: Release build, install into .gpu/ with the shared
#                                      libraries the binaries need (.gpu/ is git-ignored)
#   bash scripts/gpu-check.sh run      there (carry .gpu): every end-to-end CUDA program natively
#                                      on the GPU and through cuwire against gpu-server
#                                      --backend cuda, then the demo's latency table, then a
#                                      short table: program, result native/remote, wall times
#                                      and their ratio (remote / native, both measured here)
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=.gpu

pack() {
  bash scripts/setup.sh
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j"$(nproc)" --target gpu-server cuwire cuwire_cuda e2e_programs samples
  rm -rf "$bundle"
  cmake --install build --prefix "$bundle/prefix" >/dev/null
  mkdir -p "$bundle/e2e" "$bundle/deps"
  find build/tests/e2e -maxdepth 1 -type f \( -name '*_static' -o -name '*_shared' -o -name '*.ptx' \) \
    -exec cp {} "$bundle/e2e/" \;
  cp build/samples/vector_add "$bundle/e2e/"
  # Shared libraries from this machine's packages; the C and C++ runtimes, the loader and the
  # NVIDIA driver are the device machine's own (newer there than here).
  for bin in "$bundle"/prefix/bin/* "$bundle"/prefix/lib/cuwire/libcuda.so.1; do
    ldd "$bin" | awk '/=> \// {print $3}'
  done | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda.so*) ;;
      libstdc++.so*|libgcc_s.so*) ;;
      *) cp -L "$lib" "$bundle/deps/" ;;
    esac
  done
  du -sh "$bundle"
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
}

now() { date +%s.%N; }

run() {
  # Only cuwire's own binaries get the carried libraries; native runs see the plain system.
  deps="$PWD/$bundle/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  nvidia-smi -L || true
  dir="$(mktemp -d)"
  sock="$dir/gpu.sock"
  LD_LIBRARY_PATH="$deps" "$bundle/prefix/bin/gpu-server" --listen "unix:$sock" --backend "${GPU_CHECK_BACKEND:-cuda}" --ready-file "$dir/ready" \
    >"$dir/server.log" 2>&1 &
  spid=$!
  stop() {
    kill "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
    echo "--- gpu-server log (warnings and errors)"
    grep -v ' info ' "$dir/server.log" | tail -n 40 || true
  }
  trap stop EXIT
  for _ in $(seq 100); do [ -f "$dir/ready" ] && break; sleep 0.1; done
  [ -f "$dir/ready" ] || { echo "gpu-check: gpu-server --backend cuda did not start"; exit 1; }
  cuwire=(env LD_LIBRARY_PATH="$deps" "$bundle/prefix/bin/cuwire")
  table="$dir/table"
  printf '%-26s %-8s %-8s %10s %10s %7s\n' program native remote native_s remote_s ratio >"$table"
  for prog in "$bundle"/e2e/*_static "$bundle"/e2e/*_shared; do
    name="$(basename "$prog")"
    args=()
    case "$name" in
      driver_ptx_*) args=("$bundle/e2e/driver_ptx_kernel.ptx") ;;
    esac
    t0=$(now)
    if timeout 120 "$prog" "${args[@]}" >"$dir/$name.native" 2>&1; then n=ok; else n=FAIL; fi
    t1=$(now)
    if timeout 300 "${cuwire[@]}" run --server "unix:$sock" -- "$prog" "${args[@]}" >"$dir/$name.remote" 2>&1; then
      r=ok
    else
      r=FAIL
      echo "--- $name through cuwire failed:"; tail -n 15 "$dir/$name.remote"
    fi
    t2=$(now)
    [ $n = ok ] || { echo "--- $name failed natively:"; tail -n 15 "$dir/$name.native"; }
    awk -v p="$name" -v n="$n" -v r="$r" -v a="$t0" -v b="$t1" -v c="$t2" \
      'BEGIN { printf "%-26s %-8s %-8s %10.3f %10.3f %7.2f\n", p, n, r, b - a, c - b, (c - b) / (b - a) }' >>"$table"
  done
  echo "--- vector_add through cuwire on the GPU, with its latency table"
  CUWIRE_STATS=1 "${cuwire[@]}" run --server "unix:$sock" -- "$bundle/e2e/vector_add" || true
  trap - EXIT
  stop
  echo "--- results (wall seconds per program; ratio = remote / native)"
  cat "$table"
}

case "${1:-}" in
  pack) pack ;;
  run) run ;;
  *) echo "usage: scripts/gpu-check.sh pack|run" >&2; exit 2 ;;
esac
