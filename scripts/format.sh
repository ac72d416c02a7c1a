#!/usr/bin/env bash
# The tree's C, C++ and CUDA sources against .clang-format (clang-format from scripts/setup.sh).
#   scripts/format.sh          rewrites every file that does not conform
#   scripts/format.sh --check  changes nothing; lists the files that do not conform and fails
# CI runs the check first (scripts/test.sh), over the whole tree, so it does not depend on
# knowing which files a change touched.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v clang-format >/dev/null || {
  echo "format: clang-format is missing (scripts/setup.sh installs it)" >&2
  exit 1
}
mapfile -t files < <(git ls-files '*.c' '*.cc' '*.h' '*.cu')
if [ "${1:-}" = --check ]; then
  bad=()
  for f in "${files[@]}"; do
    clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if ((${#bad[@]})); then
    printf 'format: not formatted as .clang-format says (run scripts/format.sh):\n' >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files conform"
else
  clang-format -i "${files[@]}"
fi
