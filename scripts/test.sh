#!/usr/bin/env bash
# Sets up, builds and runs every test of cuwire: first a release build with warnings as errors,
# then the same tests under ASan + UBSan (LeakSanitizer included) in a separate build directory.
#   scripts/test.sh              both
#   scripts/test.sh --release    the release build only
#   scripts/test.sh --sanitize   the sanitizer build only
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
jobs="$(nproc)"

run() {
  local build=$1
  shift
  echo "=== $build: $*"
  cmake -S . -B "$build" "$@"
  cmake --build "$build" -j"$jobs"
  ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 600
}

mode="${1:-all}"
if [ "$mode" = all ] || [ "$mode" = --release ]; then
  run build -DCMAKE_BUILD_TYPE=Release -DCUWIRE_WERROR=ON
fi
if [ "$mode" = all ] || [ "$mode" = --sanitize ]; then
  run build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUWIRE_WERROR=ON \
    -DCUWIRE_SANITIZE=address,undefined -DCUWIRE_BUILD_BENCHMARKS=OFF
fi
