#!/usr/bin/env bash
# Builds NVIDIA sample programs from a local copy of the cuda-samples repository (nothing of
# them is in this project) and runs each, unmodified, through cuwire against a gpu-server on
# the sim backend, each under a time limit; prints pass / fail / waived / timeout / no-build
# per sample and a count.
#
#   bash scripts/run-samples.sh SAMPLES_DIR [options] [SAMPLE...]
#
#   SAMPLES_DIR      a checkout of github.com/NVIDIA/cuda-samples (its Samples/ and Common/)
#   SAMPLE...        sample names (vectorAdd) or paths under SAMPLES_DIR; default: the list in
#                    scripts/samples.txt
#   --list FILE      sample names from FILE, one per line, optionally followed by arguments
#                    for the program; '#' starts a comment
#   --timeout S      seconds each program may run (default 120)
#   --build-dir DIR  where the programs are built (default build/samples)
#   --server ADDR    use a running gpu-server instead of starting one (e.g. unix:/run/x.sock)
#   --server-args "ARGS"  extra arguments for the gpu-server this script starts
#                    (default "--sim-gpus 2")
#   --jobs N         parallel nvcc builds (default: the core count)
#
# Each sample is built with nvcc from the .cu, .cpp and .c files of its directory (and the
# Common/ helpers it includes that have a .cpp: helper_multiprocess, multithreading), with
# SAMPLES_DIR/Common on the include path and the toolkit's libraries on the link line, and
# runs from a directory of links to its own files (samples read their data files relative to
# it), with CUDA_PATH set to the toolkit (the NVRTC samples find headers through it). Exit status 2
# is a waived sample (the sample decided the device lacks something), as the samples report it.
# A sample that needs something this build does not give (a graphics library, MPI) is
# reported as no-build with the first nvcc error line.
#
# Needs: gpu-server and cuwire built (build/server/gpu-server, build/client-lib/cuwire, or
# GPU_SERVER / CUWIRE in the environment), nvcc (CUDA_HOME or PATH).
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }

[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage 0 ;; esac
samples=$(cd "$1" 2>/dev/null && pwd) || { echo "run-samples: no directory $1" >&2; exit 2; }
shift
list="" timeout_s=120 build="$here/build/samples" server="" jobs=$(nproc 2>/dev/null || echo 2)
server_args="--sim-gpus 2"
names=()
while [ $# -gt 0 ]; do
  case "$1" in
    --list) list=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --server) server=$2; shift 2 ;;
    --server-args) server_args=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) echo "run-samples: unknown option $1" >&2; exit 2 ;;
    *) names+=("$1"); shift ;;
  esac
done
[ -d "$samples/Samples" ] || { echo "run-samples: $samples has no Samples/ (not cuda-samples?)" >&2; exit 2; }

nvcc=${CUDA_HOME:+$CUDA_HOME/bin/nvcc}
[ -n "$nvcc" ] && [ -x "$nvcc" ] || nvcc=$(command -v nvcc || true)
[ -n "$nvcc" ] || { echo "run-samples: no nvcc (set CUDA_HOME or put nvcc on PATH)" >&2; exit 2; }
cuda_home=$(cd "$(dirname "$nvcc")/.." && pwd)
gpu_server=${GPU_SERVER:-$here/build/server/gpu-server}
cuwire=${CUWIRE:-$here/build/client-lib/cuwire}
for b in "$gpu_server" "$cuwire"; do
  [ -x "$b" ] || { echo "run-samples: $b is not built (cmake --build build)" >&2; exit 2; }
done

# The samples to run: "name args..." lines.
entries=()
if [ ${#names[@]} -gt 0 ]; then
  entries=("${names[@]}")
else
  list=${list:-$here/scripts/samples.txt}
fi
if [ -n "$list" ]; then
  [ -r "$list" ] || { echo "run-samples: cannot read $list" >&2; exit 2; }
  while IFS= read -r line; do
    line=${line%%#*}
    line=$(echo "$line" | sed 's/^[[:space:]]*//;s/[[:space:]]*$//')
    [ -n "$line" ] && entries+=("$line")
  done <"$list"
fi
[ ${#entries[@]} -gt 0 ] || { echo "run-samples: no samples given" >&2; exit 2; }

# sample_dir NAME: the sample's directory (a path under SAMPLES_DIR, or found by name).
sample_dir() {
  if [ -d "$samples/$1" ]; then echo "$samples/$1"; return; fi
  find "$samples/Samples" -mindepth 2 -maxdepth 3 -type d -name "$1" | sort | head -n 1
}

libs=""
for l in cuda cublas cublasLt cufft curand cusolver cusparse nvrtc nvJitLink npps nppc nppial nppif nppig nppisu nppist nppitc; do
  if [ -e "$cuda_home/lib64/lib$l.so" ] || [ -e "$cuda_home/lib64/stubs/lib$l.so" ]; then
    libs="$libs -l$l"
  fi
done

mkdir -p "$build"
# cmake_value DIR VAR: the file name a sample's CMakeLists.txt sets VAR to, or nothing.
cmake_value() {
  sed -n "s/.*set($2 \"[^\"]*\/\([^\"/]*\)\").*/\1/p" "$1/CMakeLists.txt" 2>/dev/null | head -n 1
}

# build NAME DIR: nvcc the sample into $build/NAME; the log in $build/NAME.log. A driver-API
# sample's kernel file becomes the fatbin or PTX its CMakeLists.txt names, in the directory the
# program runs in ($build/NAME.run, which links to every file of the sample's directory).
build_one() {
  local name=$1 dir=$2 srcs kernel fatbin ptx
  kernel=$(cmake_value "$dir" CUDA_KERNEL_SOURCE)
  fatbin=$(cmake_value "$dir" CUDA_FATBIN_FILE)
  ptx=$(cmake_value "$dir" CUDA_PTX_FILE)
  # Sources beside the CMakeLists.txt, or in its src/ (the Monte Carlo samples), headers in inc/.
  srcs=$(find "$dir" "$dir/src" -maxdepth 1 \( -name '*.cu' -o -name '*.cpp' -o -name '*.c' \) ! -name "${kernel:-/}" 2>/dev/null | sort)
  [ -n "$srcs" ] || { echo "no .cu, .cpp or .c files in $dir" >"$build/$name.log"; return 1; }
  local extra=""
  # shellcheck disable=SC2086
  grep -qs 'omp.h' $srcs && extra="-Xcompiler -fopenmp -lgomp"
  # Helpers of Common/ that a sample's CMakeLists.txt compiles in beside it.
  local helper
  for helper in helper_multiprocess multithreading; do
    # shellcheck disable=SC2086
    # (a sample that carries its own copy, as simpleCallback does, builds that one)
    if grep -qs "#include \"$helper.h\"" $srcs && [ -f "$samples/Common/$helper.cpp" ] &&
       [ ! -f "$dir/$helper.cpp" ]; then
      srcs="$srcs $samples/Common/$helper.cpp"
    fi
  done
  : >"$build/$name.log"
  rm -rf "$build/$name.run"
  mkdir -p "$build/$name.run"
  for f in "$dir"/* "$dir"/.[!.]*; do
    [ -e "$f" ] && ln -s "$f" "$build/$name.run/"
  done
  # Toolkit headers the sample's CMakeLists copies beside the program for NVRTC
  # (${CUDA_INCLUDE_DIR}/cooperative_groups.h, .../cccl/nv, ...): linked into its run directory.
  local inc
  for inc in $(grep -os '\${CUDA_INCLUDE_DIR}/[A-Za-z0-9_./]*' "$dir/CMakeLists.txt" | sort -u); do
    inc="$cuda_home/include/${inc#\$\{CUDA_INCLUDE_DIR\}/}"
    [ -e "$inc" ] && [ ! -e "$build/$name.run/$(basename "$inc")" ] && ln -s "$inc" "$build/$name.run/"
  done
  if [ -n "$kernel" ] && [ -n "$fatbin" ]; then
    "$nvcc" -I"$samples/Common" -fatbin -o "$build/$name.run/$fatbin" "$dir/$kernel" >>"$build/$name.log" 2>&1 || return 1
  fi
  if [ -n "$kernel" ] && [ -n "$ptx" ]; then
    "$nvcc" -I"$samples/Common" -ptx -o "$build/$name.run/$ptx" "$dir/$kernel" >>"$build/$name.log" 2>&1 || return 1
  fi
  # shellcheck disable=SC2086
  "$nvcc" -std=c++17 -O2 -I"$samples/Common" -I"$dir" -I"$dir/inc" -o "$build/$name" $srcs $extra \
    -L"$cuda_home/lib64" -L"$cuda_home/lib64/stubs" -Xlinker -rpath="$cuda_home/lib64" \
    $libs -lpthread >>"$build/$name.log" 2>&1
}

echo "run-samples: building ${#entries[@]} samples with $nvcc ($jobs at a time) into $build"
declare -A dir_of
running=0
for e in "${entries[@]}"; do
  name=${e%% *}
  d=$(sample_dir "$name")
  key=$(basename "$name")
  dir_of[$key]=$d
  if [ -z "$d" ]; then
    echo "not found under $samples/Samples" >"$build/$key.log"
    rm -f "$build/$key"
    continue
  fi
  # Rebuild only when a source is newer than the program.
  if [ -x "$build/$key" ] && [ -d "$build/$key.run" ] && [ -z "$(find "$d" -maxdepth 1 -newer "$build/$key" \( -name '*.cu' -o -name '*.cpp' -o -name '*.c' -o -name '*.h' -o -name '*.cuh' \))" ]; then
    continue
  fi
  rm -f "$build/$key"
  build_one "$key" "$d" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
done
wait

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cuwire-samples.XXXXXX")
spid=""
cleanup() {
  [ -n "$spid" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
if [ -z "$server" ]; then
  server="unix:$tmp/gpu.sock"
  # shellcheck disable=SC2086
  "$gpu_server" --listen "$server" --backend sim $server_args >"$tmp/server.log" 2>&1 &
  spid=$!
  for _ in $(seq 100); do [ -S "$tmp/gpu.sock" ] && break; sleep 0.05; done
  [ -S "$tmp/gpu.sock" ] || { echo "run-samples: gpu-server did not start:" >&2; cat "$tmp/server.log" >&2; exit 1; }
fi

printf '%-36s %-9s %8s  %s\n' sample result seconds detail
pass=0 fail=0 waived=0 timed=0 nobuild=0
for e in "${entries[@]}"; do
  name=${e%% *}
  args=""
  [ "$name" != "$e" ] && args=${e#* }
  key=$(basename "$name")
  if [ ! -x "$build/$key" ]; then
    detail=$(grep -m1 -iE 'error|not found|no \.cu' "$build/$key.log" 2>/dev/null | cut -c1-100)
    printf '%-36s %-9s %8s  %s\n' "$key" no-build - "$detail"
    nobuild=$((nobuild + 1))
    continue
  fi
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  (cd "$build/$key.run" && CUDA_PATH=$cuda_home timeout "$timeout_s" "$cuwire" run --server "$server" -- "$build/$key" $args) \
    >"$build/$key.out" 2>&1 </dev/null
  rc=$?
  secs=$(echo "$(date +%s.%N) - $start" | bc 2>/dev/null | xargs printf '%.1f' 2>/dev/null || echo -)
  case $rc in
    0) result=pass; pass=$((pass + 1)); detail="" ;;
    2) result=waived; waived=$((waived + 1)); detail=$(grep -m1 -i waiv "$build/$key.out" | cut -c1-100) ;;
    124) result=timeout; timed=$((timed + 1)); detail="over ${timeout_s}s" ;;
    *) result=fail; fail=$((fail + 1)); detail="exit $rc: $(grep -v '^\s*$' "$build/$key.out" | tail -n 1 | cut -c1-90)" ;;
  esac
  printf '%-36s %-9s %8s  %s\n' "$key" "$result" "$secs" "$detail"
done
echo "run-samples: ${#entries[@]} samples: $pass pass, $fail fail, $waived waived, $timed timeout, $nobuild no-build (outputs in $build/*.out)"
[ "$fail" -eq 0 ] && [ "$timed" -eq 0 ]
