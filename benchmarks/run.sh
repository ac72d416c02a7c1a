#!/usr/bin/env bash
# cuwire's benchmark suite, one command: builds what it needs, measures, prints the table, writes
# the JSON and draws the plots.
#
#   benchmarks/run.sh [--json FILE] [--plot DIR] [--quick] [--build DIR] [--no-build]
#                     [--shm-env NAME=VALUE] [--no-apps]
#
#   --json FILE   where the results go; default BUILD/benchmarks/results.json
#   --plot DIR    where the PNG plots go (latency.png, bandwidth.png, scaling.png); default
#                 BUILD/benchmarks/plots
#   --quick       the short run (about 20-60 s on a 2-core machine; what ctest -L bench runs):
#                 fewer iterations, copies up to 64 MiB, 1/4/16 clients
#   --build DIR   the build directory (default build/ at the top of the tree); configured
#                 (Release) if it is not, and gpu-server, libcuda.so.1 and bench_suite are built
#                 in it unless --no-build
#   --shm-env NAME=VALUE  the environment of the shared-memory lane's rows ("unix (shm lane)",
#                 the unix copies measured again with the lane on; default CUWIRE_SHM_LANE=1);
#                 the plain unix rows are the socket's (CUWIRE_SHM_LANE=0)
#   --no-apps     leave out the application section (benchmarks/apps.py: whole programs over
#                 unix: and through cuwire-netem at each link profile, beside a model), whose
#                 results go to FILE's name with -apps (results-apps.json) and DIR/apps.png
#
# What is measured (build/benchmarks/bench_suite, benchmarks/suite_main.cc, says more): against a
# `gpu-server --backend sim` the suite starts on a private unix socket and on tcp:127.0.0.1 (a
# free port), over both transports, each figure beside a baseline from the same run: the
# latency of a synchronous 4-byte cuMemcpyDtoH (p50, p99) against raw blocking and spinning
# ping-pongs of the same frame sizes; empty-kernel launches enqueued per second against raw
# sends of launch-sized frames; H2D/D2H bandwidth (pageable and pinned host memory, 4 KiB to
# 1 GiB) against a raw socket stream and single-thread memcpy; 1/4/16/64 client processes of
# synchronous calls against as many raw ping-pong clients. Targets are printed beside the
# figures; nothing fails for missing one (the machines are shared and noisy).
#
# Everything lives in a temporary directory removed at exit, also on failure or Ctrl-C; the
# servers and clients die with the suite.
set -euo pipefail

src="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$src/build"
json=""
plot=""
quick=()
shm=()
do_build=1
apps=1
command_line="benchmarks/run.sh $*"

usage() { sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    --json) json="${2:?--json needs a file}"; shift 2 ;;
    --plot) plot="${2:?--plot needs a directory}"; shift 2 ;;
    --build) build="${2:?--build needs a directory}"; shift 2 ;;
    --quick) quick=(--quick); shift ;;
    --no-build) do_build=0; shift ;;
    --no-apps) apps=0; shift ;;
    --shm-env) shm+=(--shm-env "${2:?--shm-env needs NAME=VALUE}"); shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
build="$(mkdir -p "$build" && cd "$build" && pwd)"
json="${json:-$build/benchmarks/results.json}"
plot="${plot:-$build/benchmarks/plots}"

# matplotlib comes from Debian (python3-matplotlib, scripts/setup.sh): a python3 earlier on the
# PATH (a virtualenv, pyenv) may not see it.
python=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import matplotlib' 2>/dev/null; then python="$p"; break; fi
done
if [ -z "$python" ]; then
  echo "run.sh: no python3 with matplotlib: install python3-matplotlib (scripts/setup.sh)" >&2
  exit 1
fi

if ((do_build)); then
  if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release >&2
  fi
  cmake --build "$build" -j"$(nproc)" --target gpu-server cuwire_cuda bench_suite cuwire-netem \
    bench_apps >&2
fi
suite="$build/benchmarks/bench_suite"
if [ ! -x "$suite" ]; then
  echo "run.sh: $suite is missing: cmake --build $build --target bench_suite" >&2
  exit 1
fi

commit="$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)"
if [ "$commit" != unknown ] && [ -n "$(git -C "$src" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  commit="$commit-dirty"
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/cuwire-bench-XXXXXX")"
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$(dirname "$json")" "$plot"
# In the background, so that a signal to this script reaches the trap at once.
"$suite" --json "$json" --tmp "$tmp" --build-dir "$build" --git-commit "$commit" \
  --command "$command_line" "${quick[@]}" "${shm[@]}" &
pid=$!
wait "$pid"
pid=""
"$python" "$src/benchmarks/plot.py" "$json" "$plot"
echo "run.sh: results in $json, plots in $plot" >&2
if ((apps)); then
  # Whole programs over unix: and through the emulated links (apps.py says how).
  "$python" "$src/benchmarks/apps.py" --build "$build" --json "${json%.json}-apps.json" \
    --plot "$plot" "${quick[@]}" &
  pid=$!
  wait "$pid"
  pid=""
fi
