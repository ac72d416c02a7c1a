#!/usr/bin/env bash
# Sets up, builds and runs every test of cuwire: first a release build with warnings as errors,
# then the same tests (less the load tests) under ASan + UBSan (LeakSanitizer included) in a
# separate build directory.
#   scripts/test.sh              both
#   scripts/test.sh --release    the release build only
#   scripts/test.sh --sanitize   the sanitizer build only
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/format.sh --check
jobs="$(nproc)"

# run BUILD "CTEST ARGS" CMAKE ARGS...
run() {
  local build=$1 ctest_args=$2
  shift 2
  echo "=== $build: $*"
  cmake -S . -B "$build" "$@"
  cmake --build "$build" -j"$jobs"
  # shellcheck disable=SC2086
  ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 600 $ctest_args
}

mode="${1:-all}"
if [ "$mode" = all ] || [ "$mode" = --release ]; then
  run build "" -DCMAKE_BUILD_TYPE=Release -DCUWIRE_WERROR=ON
fi
if [ "$mode" = all ] || [ "$mode" = --sanitize ]; then
  # The load tests (kill loop, 64 clients) and the variants (label `variant`: the same tests
  # again through a relay) ran in the release pass; the sanitizer pass runs each test once. The
  # dispatch fuzzer needs a build without g++'s sanitizers and is not built here.
  # After the release pass, its e2e programs (plain CUDA programs, nvcc-built) are run again
  # rather than built again.
  prebuilt=""
  if [ "$mode" = all ]; then prebuilt="$PWD/build/tests/e2e"; fi
  run build-asan "-LE load|variant" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUWIRE_WERROR=ON \
    -DCUWIRE_SANITIZE=address,undefined -DCUWIRE_BUILD_BENCHMARKS=OFF \
    -DCUWIRE_E2E_PREBUILT="$prebuilt"
fi
