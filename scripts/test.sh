#!/usr/bin/env bash
# Sets up, builds and runs every test of cuwire.
#   scripts/test.sh              release build with warnings as errors, all tests
#   scripts/test.sh --sanitize   the same under ASan + UBSan (separate build directory)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

build=build
flags=(-DCMAKE_BUILD_TYPE=Release -DCUWIRE_WERROR=ON)
if [ "${1:-}" = "--sanitize" ]; then
  build=build-asan
  flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUWIRE_WERROR=ON -DCUWIRE_SANITIZE=address,undefined
         -DCUWIRE_BUILD_BENCHMARKS=OFF)
fi
jobs="$(nproc)"

cmake -S . -B "$build" "${flags[@]}"
cmake --build "$build" -j"$jobs"
ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 600
