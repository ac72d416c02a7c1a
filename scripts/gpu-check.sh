#!/usr/bin/env bash
# The checks that need a GPU, for a session lent a device machine. That machine is bare (no
# Debian packages, nothing to fetch), so the binaries are built here and carried there:
#
#   bash scripts/gpu-check.sh pack     here: Release build, install into .gpu/ with the shared
#                                      libraries the binaries need, the test programs below, and
#                                      sm_90 cubins from every nvcc found here (.gpu/ is
#                                      git-ignored; it must stay under 64 MiB to be carried)
#   bash scripts/gpu-check.sh run      there (carry .gpu): the GPU facts the code relies on, from
#                                      the real driver, and every end-to-end program natively
#                                      and through cuwire against gpu-server --backend cuda;
#                                      prints a short table last: check, result, detail
#
# What run checks, each under its own time limit and all within GPU_CHECK_BUDGET seconds
# (default 420); a check that fails never stops the others:
#   - kernel parameter layouts: cuwire's .nv.info parser against the driver's
#     cuFuncGetParamInfo and cuKernelGetParamInfo, on cubins from each packed nvcc
#     (tests/gpu/param_info_check.cc), natively and through gpu-server
#   - what a context and allocations of several sizes spend on the driver
#     (tests/gpu/memory_footprint.cc): the figures tenants are charged (--context-memory, the
#     allocation step)
#   - the driver's export tables against those the client library serves
#     (tests/gpu/export_tables_probe.cc), and every export-table slot a program run through
#     cuwire asked for that the library does not serve
#   - PyTorch (scripts/torch_step.py): a few training steps natively and through cuwire
#   - every end-to-end program natively and through cuwire, wall times side by side; cuBLAS
#     SGEMM's checksum the same both ways
#   - kernels_test against the GPU server: a kernel's sticky error ends only its own context
#   - a relay (gpu-server --backend cuda over cuwire's own libcuda.so.1) in front of the GPU
#     server: vector_add and cuBLAS SGEMM through it
#   - SM partitions: a tenant with 16 SMs of its own, and green contexts made by programs
# GPU_CHECK_BACKEND=sim runs the server on the sim instead (to try the script without a GPU;
# native runs then fail).
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=.gpu

# Every nvcc found here, once each: CUDA_HOME's, the PATH's, /usr/local/cuda's and each
# /usr/local/cuda-12* and -13* toolkit.
nvccs() {
  local seen=" " n real
  for n in "${CUDA_HOME:+$CUDA_HOME/bin/nvcc}" "$(command -v nvcc || true)" \
    /usr/local/cuda/bin/nvcc /usr/local/cuda-12*/bin/nvcc /usr/local/cuda-13*/bin/nvcc; do
    if [ -z "$n" ] || [ ! -x "$n" ]; then continue; fi
    real="$(readlink -f "$n")"
    case "$seen" in *" $real "*) continue ;; esac
    seen="$seen$real "
    echo "$n"
  done
}

# Kernels for param_info_check, for the GPU host's sm_90, by every nvcc: the layouts in .nv.info
# are the compiler's, so each compiler version is a separate check.
pack_cubins() {
  local nvcc ver out
  while read -r nvcc; do
    ver="$("$nvcc" --version | sed -n 's/.*release \([0-9][0-9.]*\),.*/\1/p')"
    out="$bundle/cubins/nvcc-${ver:-unknown}"
    mkdir -p "$out"
    if "$nvcc" -cubin -arch=sm_90 -o "$out/server_kernels.sm_90.cubin" tests/server/kernels.cu &&
      "$nvcc" -cubin -arch=sm_90 -o "$out/image_kernels.sm_90.cubin" tests/image/kernels.cu &&
      "$nvcc" -fatbin -gencode arch=compute_75,code=sm_75 -gencode arch=compute_90,code=sm_90 \
        -o "$out/image_kernels.sm_75_sm_90.fatbin" tests/image/kernels.cu; then
      echo "$ver $nvcc" >>"$bundle/cubins/nvcc-versions"
    else
      echo "pack: $nvcc (CUDA $ver) failed to compile the kernels; its cubins are left out" >&2
      rm -rf "$out"
    fi
  done < <(nvccs)
  echo "pack: cubins from nvcc $(awk '{print $1}' "$bundle/cubins/nvcc-versions" | paste -sd, -)"
}

pack() {
  bash scripts/setup.sh
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j"$(nproc)" --target gpu-server cuwire cuwire_cuda e2e_programs samples \
    kernels_test foreign_client server_test_kernels param_info_check export_tables_probe \
    memory_footprint sm_probe green_probe
  rm -rf "$bundle"
  cmake --install build --prefix "$bundle/prefix" >/dev/null
  mkdir -p "$bundle/e2e" "$bundle/deps" "$bundle/tests" "$bundle/cubins"
  find build/tests/e2e -maxdepth 1 -type f \( -name '*_static' -o -name '*_shared' -o -name '*.ptx' \) \
    -exec cp {} "$bundle/e2e/" \;
  cp build/samples/vector_add "$bundle/e2e/"
  local tests=(build/tests/server/kernels_test build/tests/server/foreign_client
    build/tests/gpu/param_info_check build/tests/gpu/export_tables_probe
    build/tests/gpu/memory_footprint build/tests/server/sm_probe build/tests/server/green_probe)
  cp "${tests[@]}" build/tests/server/kernels/kernels.ptx build/tests/server/kernels/kernels.fatbin \
    "$bundle/tests/"
  pack_cubins
  # Shared libraries from this machine's packages; the C and C++ runtimes, the loader and the
  # NVIDIA driver are the device machine's own (newer there than here).
  for bin in "$bundle"/prefix/bin/* "$bundle"/prefix/lib/cuwire/libcuda.so.1 \
    "$bundle"/tests/kernels_test "$bundle"/tests/foreign_client "$bundle"/tests/param_info_check \
    "$bundle"/tests/export_tables_probe "$bundle"/tests/memory_footprint "$bundle"/tests/sm_probe \
    "$bundle"/tests/green_probe; do
    ldd "$bin" | awk '/=> \// {print $3}'
  done | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda.so*) ;;
      libstdc++.so*|libgcc_s.so*) ;;
      *) cp -L "$lib" "$bundle/deps/" ;;
    esac
  done
  du -sh "$bundle"
  if [ "$(du -sm "$bundle" | cut -f1)" -gt 60 ]; then
    echo "pack: $bundle is over 60 MiB; the device machine takes 64 MiB of carried files" >&2
  fi
}

# ------------------------------------------------------------------------------------------------
# run: helpers. Globals: dir (scratch), deadline (epoch seconds), checks (the final table).

now() { date +%s.%N; }

# bounded SECONDS CMD...: CMD under timeout, cut to what is left of the budget; 125 when none is.
bounded() {
  local want=$1 left
  shift
  left=$((deadline - $(date +%s)))
  if [ "$left" -lt 5 ]; then
    echo "gpu-check: not run, the time budget is spent"
    return 125
  fi
  [ "$want" -le "$left" ] || want=$left
  timeout -k 5 "$want" "$@"
}

# timed OUT SECONDS CMD...: bounded CMD with its stdout and stderr in OUT; sets rc and secs.
timed() {
  local out=$1 t0 t1
  shift
  t0=$(now)
  bounded "$@" >"$out" 2>&1
  rc=$?
  t1=$(now)
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
}

# How a command ended, in words.
ended() {
  case "$1" in
    0) echo "ok" ;;
    124 | 137) echo "timed out" ;;
    125) echo "not run (time budget spent)" ;;
    *) echo "exit $1" ;;
  esac
}

# failure RC OUT: how a command ended and the line of its output that says why.
failure() {
  if [ "$1" -eq 125 ]; then
    echo "not run: the time budget was spent"
  else
    echo "$(ended "$1"): $(last_error "$2")"
  fi
}

# out_of_time: less than 5 s of the budget is left.
out_of_time() { [ $((deadline - $(date +%s))) -lt 5 ]; }

# row CHECK RESULT DETAIL: one line of the final table (RESULT: ok, FAIL, DIFFERS, not run).
row() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$checks"; }

# The last line of a file that says what went wrong, else its last non-empty line.
last_error() {
  local line
  line="$(grep -E 'rror|FAIL|fail|cannot|not supported|Traceback' "$1" 2>/dev/null | tail -n 1)"
  [ -n "$line" ] || line="$(grep -v '^[[:space:]]*$' "$1" 2>/dev/null | tail -n 1)"
  printf '%s' "${line:0:200}"
}

# wait_ready FILE PID: gpu-server wrote its ready file (within 30 s: the driver's first cuInit
# on a GPU host may take a while) and still runs.
wait_ready() {
  for _ in $(seq 300); do
    [ -f "$1" ] && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# ------------------------------------------------------------------------------------------------
# run: the checks.

# param_info_row CHECK DETAIL_PREFIX OUT WHERE CMD...: runs param_info_check, shows the kernels
# that were not ok when it fails, and adds the table row (ok, FAIL, or DIFFERS on a mismatch).
param_info_row() {
  local check=$1 prefix=$2 out=$3 where=$4 summary result
  shift 4
  timed "$out" 60 "$@"
  summary="$(sed -n 's/^param_info_check: //p' "$out" | tail -n 1)"
  result=ok
  if [ "$rc" -ne 0 ]; then
    result=FAIL
    grep -q '^DIFFERS' "$out" && result=DIFFERS
    echo "--- param_info_check, $where ($(ended "$rc")):"
    grep -v '^ok ' "$out" | tail -n 30
  fi
  row "$check" "$result" "$prefix${summary:-$(last_error "$out")}"
}

check_param_info() {
  local vdir ver files
  for vdir in "$bundle"/cubins/nvcc-*/; do
    [ -d "$vdir" ] || continue
    ver="${vdir%/}"
    ver="${ver##*/nvcc-}"
    files=("$vdir"*.cubin "$vdir"*.fatbin)
    param_info_row "param info: nvcc $ver" "" "$dir/param_info.$ver.native" \
      "nvcc $ver, natively" "${probe[@]}" "$bundle/tests/param_info_check" "${files[@]}"
  done
  if ! compgen -G "$bundle/cubins/nvcc-12*" >/dev/null; then
    row "param info: nvcc 12" "not run" "no CUDA 12 nvcc where the bundle was packed"
  fi
  # The same layouts through cuwire: the server asks the driver, the client caches the answer.
  vdir="$(compgen -G "$bundle/cubins/nvcc-*/" | tail -n 1)"
  if [ -z "$vdir" ]; then
    row "param info: through gpu-server" "not run" "no cubins packed"
  elif [ "$server_ok" != 1 ]; then
    row "param info: through gpu-server" FAIL "gpu-server did not start"
  else
    ver="${vdir%/}"
    ver="${ver##*/nvcc-}"
    files=("$vdir"*.cubin "$vdir"*.fatbin)
    param_info_row "param info: through gpu-server" "nvcc $ver: " "$dir/param_info.remote" \
      "nvcc $ver, through cuwire" "${cuwire[@]}" run --server "unix:$sock" -- \
      "$bundle/tests/param_info_check" "${files[@]}"
  fi
}

# export_verdict NATIVE REMOTE: RESULT<TAB>DETAIL from the probe's two outputs: every table
# present in the driver and TOOLS_CONTEXT's slot count as cuwire assumes; size headers that
# differ from cuwire's are listed.
export_verdict() {
  python3 - "$@" <<'EOF'
import sys

def tables(path):
    out, tools = {}, ""
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        return out, tools
    for line in lines:
        f = line.split()
        if len(f) >= 3 and f[2] in ("present", "absent") and f[1].count("-") == 4:
            out[f[0]] = " ".join(f[2:])
        elif line.startswith("TOOLS_CONTEXT:"):
            tools = line
    return out, tools

drv, drv_tools = tables(sys.argv[1])
cw, _ = tables(sys.argv[2])
known = [n for n in drv if not n.startswith("(")]
absent = [n for n in known if not drv[n].startswith("present")]

def size(status):
    return status.split("size_header=")[1].split()[0] + " B" if "size_header=" in status else "none"

diffs = []
for name in known:
    if name in cw and cw[name] != drv[name] and drv[name].startswith("present") \
            and cw[name].startswith("present"):
        diffs.append(f"{name} {size(drv[name])} in the driver, {size(cw[name])} in cuwire")
ok = bool(known) and not absent and drv_tools.endswith(": same")
detail = [f"{len(known) - len(absent)}/{len(known)} present in the driver"]
if absent:
    detail.append("absent: " + ", ".join(absent))
detail.append(drv_tools or "TOOLS_CONTEXT: no answer")
if diffs:
    detail.append("size headers differ: " + "; ".join(diffs))
elif cw:
    detail.append("size headers as cuwire's")
extra = [n for n in drv if n.startswith("(") and drv[n].startswith("present")]
if extra:
    detail.append("the table cudart asks for first is present in the driver (cuwire refuses it)")
print(("ok" if ok else "DIFFERS") + "\t" + "; ".join(detail))
EOF
}

# What a context and allocations spend on the driver: the figures behind --context-memory's
# default (256 MiB) and the allocation step tenants are charged at (server/session/dispatch.h).
check_memory_footprint() {
  timed "$dir/memory_footprint" 30 "${probe[@]}" "$bundle/tests/memory_footprint"
  echo "--- memory footprint ($(ended "$rc")):"
  cat "$dir/memory_footprint"
  if [ "$rc" -ne 0 ]; then
    row "memory footprint" FAIL "$(failure "$rc" "$dir/memory_footprint")"
    return
  fi
  row "memory footprint" info "$(sed -n 's/^memory_footprint: //p' "$dir/memory_footprint")"
}

check_export_tables() {
  local n_rc r_rc=-1 verdict
  timed "$dir/export_tables.native" 30 "${probe[@]}" "$bundle/tests/export_tables_probe"
  n_rc=$rc
  echo "--- the driver's export tables ($(ended "$n_rc")):"
  cat "$dir/export_tables.native"
  if [ "$server_ok" = 1 ]; then
    timed "$dir/export_tables.remote" 30 "${cuwire[@]}" run --server "unix:$sock" -- \
      "$bundle/tests/export_tables_probe"
    r_rc=$rc
    echo "--- cuwire's export tables ($(ended "$r_rc")):"
    cat "$dir/export_tables.remote"
  fi
  if [ "$n_rc" -ne 0 ]; then
    row "export tables: driver" FAIL "probe $(failure "$n_rc" "$dir/export_tables.native")"
    return
  fi
  verdict="$(export_verdict "$dir/export_tables.native" "$dir/export_tables.remote")"
  row "export tables: driver" "${verdict%%$'\t'*}" "${verdict#*$'\t'}"
  if [ "$r_rc" -ne 0 ]; then
    row "export tables: through cuwire" FAIL "probe $(failure "$r_rc" "$dir/export_tables.remote")"
  fi
}

# Every export-table slot the client library was asked for and does not serve, over every run
# through cuwire (cuBLAS programs, PyTorch, kernels_test, relay runs).
check_export_slots() {
  local found list
  local pattern='export table [A-Z_]+ slot [0-9]+ is not supported'
  pattern="$pattern|unknown driver export table [0-9a-f-]+"
  found="$(grep -H -o -E "$pattern" "$dir"/*.remote 2>/dev/null | sort -u)"
  if [ -z "$found" ]; then
    row "export table slots used, not served" ok "none (in every run through cuwire)"
    return
  fi
  echo "--- export-table slots the client library does not serve, by program:"
  echo "$found"
  # "TABLE slot N (prog, prog)" for each slot.
  list="$(echo "$found" | sed -E 's|^.*/([^/]+)\.remote:(.*)$|\1\t\2|' | awk -F'\t' '
    { key = $2; sub(/^export table /, "", key); sub(/ is not supported$/, "", key)
      sub(/^unknown driver export table /, "table ", key)
      if (key in progs) progs[key] = progs[key] ", " $1
      else { order[n++] = key; progs[key] = $1 } }
    END { for (i = 0; i < n; i++) printf "%s%s (%s)", (i ? "; " : ""), order[i], progs[order[i]] }')"
  row "export table slots used, not served" GAPS "$list"
}

# compare_losses NATIVE REMOTE: RESULT<TAB>DETAIL for torch_step.py's losses and parameter
# sums, line by line: identical, or the largest relative difference against the tolerance.
compare_losses() {
  python3 - "$@" <<'EOF'
import re, sys

def values(path):
    out = {}
    for line in open(path, errors="replace"):
        m = re.match(r"^((?:mlp|conv) (?:step \d+ loss|parameter sum)) (\S+)$", line.strip())
        if m:
            out[m.group(1)] = float(m.group(2))
    return out

tolerance = 1e-5
a, b = values(sys.argv[1]), values(sys.argv[2])
if not a:
    print("DIFFERS\tno losses natively")
elif not b:
    print("FAIL\tno losses remotely")
else:
    common = [k for k in a if k in b]
    worst, at = 0.0, ""
    for k in common:
        d = abs(a[k] - b[k]) / max(abs(a[k]), 1e-30)
        if d != d or d > worst:
            worst, at = d, k
    missing = len(a) - len(common)
    if missing:
        print(f"FAIL\tremote stopped after {len(common)} of {len(a)} values")
    elif all(a[k] == b[k] for k in common):
        print(f"ok\tlosses identical ({len(common)} values to 6 digits)")
    elif worst <= tolerance:
        print(f"ok\tlosses within {tolerance:g} relative (largest {worst:.2g} at {at})")
    else:
        print(f"DIFFERS\tlosses differ: {worst:.3g} relative at {at} (tolerance {tolerance:g})")
EOF
}

check_torch() {
  local py=${GPU_CHECK_PYTHON:-python3} n_rc n_s r_rc r_s cmp result detail
  if out_of_time; then
    row "PyTorch training steps" "not run" "the time budget was spent"
    return
  fi
  if ! command -v "$py" >/dev/null; then
    row "PyTorch training steps" "not run" "no $py"
    return
  fi
  timed "$dir/torch.native" 120 "${native[@]}" "$py" scripts/torch_step.py
  n_rc=$rc
  n_s=$secs
  echo "--- PyTorch natively ($(ended "$n_rc"), $n_s s):"
  tail -n 15 "$dir/torch.native"
  if [ "$n_rc" -eq 2 ]; then
    row "PyTorch training steps" "not run" "$(last_error "$dir/torch.native")"
    return
  fi
  if [ "$server_ok" != 1 ]; then
    row "PyTorch training steps" FAIL "gpu-server did not start; native $(ended "$n_rc") $n_s s"
    return
  fi
  timed "$dir/torch.remote" 180 "${cuwire[@]}" run --server "unix:$sock" -- "$py" scripts/torch_step.py
  r_rc=$rc
  r_s=$secs
  echo "--- PyTorch through cuwire ($(ended "$r_rc"), $r_s s):"
  if [ "$r_rc" -ne 0 ] && grep -q '^torch_step: ' "$dir/torch.remote"; then
    echo "(the first error)"
    grep -m 1 -A 30 '^torch_step: ' "$dir/torch.remote"
    echo "(the last lines)"
    tail -n 10 "$dir/torch.remote"
  else
    tail -n 25 "$dir/torch.remote"
  fi
  if grep -q '^cuwire: ' "$dir/torch.remote"; then
    echo "(what cuwire's client library said)"
    grep '^cuwire: ' "$dir/torch.remote" | sort | uniq -c | sort -rn | head -n 20
  fi
  cmp="$(compare_losses "$dir/torch.native" "$dir/torch.remote")"
  result="${cmp%%$'\t'*}"
  detail="${cmp#*$'\t'}"
  if [ "$r_rc" -ne 0 ]; then
    result=FAIL
    # The first stage's error (later ones may only follow from it), else the last error line.
    local first
    first="$(grep -m 1 '^torch_step: ' "$dir/torch.remote")"
    if [ -n "$first" ] && [ "$r_rc" -ne 124 ] && [ "$r_rc" -ne 137 ]; then
      detail="remote exit $r_rc: ${first:0:200}; $detail"
    else
      detail="remote $(failure "$r_rc" "$dir/torch.remote"); $detail"
    fi
    first="$(grep -m 1 '^cuwire: ' "$dir/torch.remote")"
    [ -z "$first" ] || detail="$detail; first cuwire message: ${first:0:160}"
  else
    detail="ran remotely; $detail"
  fi
  [ "$n_rc" -eq 0 ] || { result=FAIL; detail="native $(failure "$n_rc" "$dir/torch.native"); $detail"; }
  row "PyTorch training steps" "$result" "$detail; wall native ${n_s} s, remote ${r_s} s"
}

# Every end-to-end program natively and through cuwire; the wall-time table.
check_e2e() {
  local prog name args n r n_s n_ok=0 r_ok=0 total=0 failed=()
  printf '%-26s %-8s %-8s %10s %10s %7s\n' program native remote native_s remote_s ratio >"$table"
  for prog in "$bundle"/e2e/*_static "$bundle"/e2e/*_shared; do
    name="$(basename "$prog")"
    if out_of_time; then
      failed+=("(the rest: time budget spent)")
      break
    fi
    args=()
    case "$name" in
      driver_ptx_*) args=("$bundle/e2e/driver_ptx_kernel.ptx") ;;
    esac
    total=$((total + 1))
    timed "$dir/$name.native" 60 "${native_e2e[@]}" "$prog" "${args[@]}"
    if [ "$rc" -eq 0 ]; then n=ok; n_ok=$((n_ok + 1)); else n=FAIL; fi
    n_s=$secs
    [ $n = ok ] || { echo "--- $name failed natively ($(ended "$rc")):"; tail -n 15 "$dir/$name.native"; }
    if [ "$server_ok" = 1 ]; then
      timed "$dir/$name.remote" 120 "${cuwire_e2e[@]}" run --server "unix:$sock" -- "$prog" "${args[@]}"
    else
      rc=1 secs=0
    fi
    if [ "$rc" -eq 0 ]; then
      r=ok
      r_ok=$((r_ok + 1))
    else
      r=FAIL
      failed+=("$name")
      echo "--- $name through cuwire failed ($(ended "$rc")):"
      tail -n 15 "$dir/$name.remote" 2>/dev/null
    fi
    awk -v p="$name" -v n="$n" -v r="$r" -v a="$n_s" -v b="$secs" \
      'BEGIN { printf "%-26s %-8s %-8s %10.3f %10.3f %7.2f\n", p, n, r, a, b, (a > 0 ? b / a : 0) }' >>"$table"
  done
  local result=ok
  if [ "$n_ok" -ne "$total" ] || [ "$r_ok" -ne "$total" ]; then result=FAIL; fi
  row "e2e programs" "$result" \
    "native $n_ok/$total ok, through cuwire $r_ok/$total ok${failed[*]:+; remote failures: ${failed[*]}}"
  # cuBLAS SGEMM: one line with its checksum, which must be the same both ways.
  local v ln lr
  for v in static shared; do
    name="cublas_sgemm_$v"
    if [ ! -f "$dir/$name.native" ]; then
      row "cuBLAS SGEMM ($v cudart)" "not run" "not packed (no libcublas where packed)"
      continue
    fi
    ln="$(grep -m 1 '^cublas_sgemm ' "$dir/$name.native")"
    lr="$(grep -m 1 '^cublas_sgemm ' "$dir/$name.remote" 2>/dev/null)"
    if [ -z "$ln" ]; then
      row "cuBLAS SGEMM ($v cudart)" FAIL "native: $(last_error "$dir/$name.native")"
    elif [ -z "$lr" ]; then
      row "cuBLAS SGEMM ($v cudart)" FAIL "remote: $(last_error "$dir/$name.remote")"
    elif [ "$ln" = "$lr" ]; then
      row "cuBLAS SGEMM ($v cudart)" ok "same result both ways: ${ln#*, }"
    else
      row "cuBLAS SGEMM ($v cudart)" DIFFERS "native ${ln#*, } / remote ${lr#*, }"
    fi
  done
}

# kernels_test against the GPU server: every test, and the sticky-error one on its own line.
check_kernels_test() {
  if [ "$server_ok" != 1 ]; then
    row "sticky error ends one context" FAIL "gpu-server did not start"
    return
  fi
  local out="$dir/kernels_test.remote" passed skipped failed sticky
  if out_of_time; then
    row "sticky error ends one context" "not run" "the time budget was spent"
    return
  fi
  timed "$out" 180 env KERNELS_TEST_SERVER="unix:$sock" \
    KERNELS_TEST_PTX="$PWD/$bundle/tests/kernels.ptx" \
    KERNELS_TEST_FATBIN="$PWD/$bundle/tests/kernels.fatbin" \
    KERNELS_TEST_FOREIGN_CLIENT="$PWD/$bundle/tests/foreign_client" \
    "${cuwire[@]}" run --server "unix:$sock" -- "$bundle/tests/kernels_test" --gtest_color=no
  passed="$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$out")"
  skipped="$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$out")"
  failed="$(awk '/^\[  FAILED  \] [A-Za-z]/ { sub(/,$/, "", $4); print $4 }' "$out" | sort -u |
    sed 's|^Images/KernelsTest\.||' | paste -sd ' ' -)"
  if [ "$rc" -ne 0 ]; then
    echo "--- kernels_test against the GPU server ($(ended "$rc")), failures:"
    grep -E -B2 -A8 'Failure$|^\[  FAILED  \]' "$out" | head -n 80
    [ -n "$failed" ] || tail -n 20 "$out"
  fi
  sticky="$(grep -c \
    '^\[       OK \] Images/KernelsTest\.AnotherSessionsHandlesAndPointersAreRefused' "$out")"
  if [ "$sticky" -eq 2 ]; then
    row "sticky error ends one context" ok \
      "illegal address in one context; the session's other context and a second client go on (ptx, fatbin)"
  elif grep -q 'AnotherSessionsHandlesAndPointersAreRefused' <<<"$failed"; then
    row "sticky error ends one context" FAIL "$(sed -n \
      '/^\[ RUN      \] Images\/KernelsTest\.AnotherSessions/,/^\[  FAILED  \]/p' "$out" |
      grep -A3 -m 1 'Failure$' | sed '1s|^.*/||' | tr -s ' \n' ' ' | cut -c1-200)"
  else
    row "sticky error ends one context" FAIL "did not run: $(failure "$rc" "$out")"
  fi
  row "kernels_test on the GPU server" "$([ "$rc" -eq 0 ] && echo ok || echo FAIL)" \
    "${passed:-0} passed, ${skipped:-0} skipped${failed:+, failed: $failed}; $(ended "$rc") in $secs s"
}

# A relay in front of the GPU server: gpu-server --backend cuda over cuwire's own libcuda.so.1.
check_relay() {
  if [ "$server_ok" != 1 ]; then
    row "relay: vector_add" FAIL "gpu-server did not start"
    return
  fi
  local rsock="$dir/relay.sock" ln lr
  if out_of_time; then
    row "relay: vector_add" "not run" "the time budget was spent"
    return
  fi
  CUWIRE_SERVER="unix:$sock" LD_LIBRARY_PATH="$deps" "$bundle/prefix/bin/gpu-server" \
    --listen "unix:$rsock" --backend cuda --driver "$PWD/$bundle/prefix/lib/cuwire/libcuda.so.1" \
    --ready-file "$dir/relay.ready" >"$dir/relay.log" 2>&1 &
  rpid=$!
  if ! wait_ready "$dir/relay.ready" "$rpid"; then
    echo "--- the relay did not start:"
    tail -n 20 "$dir/relay.log"
    row "relay: vector_add" FAIL "the relay did not start: $(last_error "$dir/relay.log")"
    return
  fi
  timed "$dir/relay_vector_add.remote" 60 "${cuwire_e2e[@]}" run --server "unix:$rsock" -- \
    "$bundle/e2e/vector_add"
  if [ "$rc" -eq 0 ]; then
    row "relay: vector_add" ok "client -> relay -> GPU server in $secs s"
  else
    row "relay: vector_add" FAIL "$(failure "$rc" "$dir/relay_vector_add.remote")"
    tail -n 15 "$dir/relay_vector_add.remote"
  fi
  if [ -x "$bundle/e2e/cublas_sgemm_static" ]; then
    timed "$dir/relay_cublas_sgemm.remote" 120 "${cuwire_e2e[@]}" run --server "unix:$rsock" -- \
      "$bundle/e2e/cublas_sgemm_static"
    ln="$(grep -m 1 '^cublas_sgemm ' "$dir/cublas_sgemm_static.native" 2>/dev/null)"
    lr="$(grep -m 1 '^cublas_sgemm ' "$dir/relay_cublas_sgemm.remote")"
    if [ -z "$lr" ]; then
      row "relay: cuBLAS SGEMM" FAIL "$(failure "$rc" "$dir/relay_cublas_sgemm.remote")"
      tail -n 15 "$dir/relay_cublas_sgemm.remote"
    elif [ "$lr" = "$ln" ]; then
      row "relay: cuBLAS SGEMM" ok "same result as natively, $secs s"
    else
      row "relay: cuBLAS SGEMM" DIFFERS "relay ${lr#*, } / native ${ln:-(no native result)}"
    fi
  else
    row "relay: cuBLAS SGEMM" "not run" "not packed (no libcublas where packed)"
  fi
  kill "$rpid" 2>/dev/null
  wait "$rpid" 2>/dev/null
  rpid=''
  echo "--- relay log (warnings and errors)"
  grep -v ' info ' "$dir/relay.log" | tail -n 20
}

# SM partitions (green contexts) on the real driver: a second GPU server whose tenant `part` has
# 16 SMs of its own; sm_probe must see 16 and have cooperative grids past them refused, and
# green_probe makes green contexts of its own (groups of 8, compute capability 9.0's step), for
# `part` and for `whole`, which has the GPU.
check_green() {
  local gsock="$dir/green.sock" line gpid
  if out_of_time; then
    row "SM partition: 16 SMs" "not run" "the time budget was spent"
    return
  fi
  printf '[[tenant]]\nname = "part"\ntoken = "part-token"\nsms = 16\n[[tenant]]\nname = "whole"\ntoken = "whole-token"\n' >"$dir/green.toml"
  LD_LIBRARY_PATH="$deps" "$bundle/prefix/bin/gpu-server" --listen "unix:$gsock" \
    --backend "${GPU_CHECK_BACKEND:-cuda}" --config "$dir/green.toml" \
    --ready-file "$dir/green.ready" >"$dir/green.log" 2>&1 &
  gpid=$!
  if ! wait_ready "$dir/green.ready" "$gpid"; then
    tail -n 20 "$dir/green.log"
    row "SM partition: 16 SMs" FAIL "the server did not start: $(last_error "$dir/green.log")"
    return
  fi
  timed "$dir/sm_probe.out" 60 env CUWIRE_TOKEN=part-token "${cuwire[@]}" run --server "unix:$gsock" \
    -- "$bundle/tests/sm_probe"
  line="$(tail -n 1 "$dir/sm_probe.out")"
  case "$line" in
    "sms 16 resource 16 context 16 coop_all CUDA_SUCCESS coop_more CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE")
      row "SM partition: 16 SMs" ok "$line" ;;
    *) row "SM partition: 16 SMs" FAIL "${line:0:200}" ;;
  esac
  for t in part whole; do
    timed "$dir/green_probe.$t" 60 env CUWIRE_TOKEN=$t-token "${cuwire[@]}" run \
      --server "unix:$gsock" -- "$bundle/tests/green_probe" 8
    line="$(tail -n 1 "$dir/green_probe.$t")"
    case "$line" in
      "green ok "*) row "green contexts ($t)" ok "$line" ;;
      *) row "green contexts ($t)" FAIL "${line:0:200}" ;;
    esac
  done
  kill "$gpid" 2>/dev/null
  wait "$gpid" 2>/dev/null
  echo "--- SM-partition server log (warnings and errors)"
  grep -v ' info ' "$dir/green.log" | tail -n 20
}

# Libraries the packed programs need that this host has but not on the loader's path (cuBLAS
# from a CUDA toolkit or from PyTorch's wheels); printed as a path list.
library_dirs() {
  local missing lib d sp found=""
  missing="$(for p in "$bundle"/e2e/*_static "$bundle"/e2e/*_shared; do ldd "$p" 2>/dev/null; done |
    awk '/not found/ { print $1 }' | grep -v '^libcuda\.so' | sort -u)"
  [ -n "$missing" ] || return 0
  local places=(/usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/local/cuda-*/targets/*/lib)
  while read -r sp; do
    [ -d "$sp/nvidia" ] && places+=("$sp"/nvidia/*/lib "$sp"/nvidia/*/*/lib)
  done < <(python3 -c 'import site
print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null)
  for lib in $missing; do
    for d in "${places[@]}"; do
      if [ -e "$d/$lib" ]; then
        case ":$found:" in *":$d:"*) ;; *) found="${found:+$found:}$d" ;; esac
        break
      fi
    done
  done
  echo "$found"
}

run() {
  set +e  # every check reports its own failure; none stops the others
  if [ ! -x "$bundle/prefix/bin/gpu-server" ]; then
    echo "gpu-check: no $bundle here: run 'scripts/gpu-check.sh pack' and carry $bundle" >&2
    exit 1
  fi
  deadline=$(($(date +%s) + ${GPU_CHECK_BUDGET:-420}))
  local backend="${GPU_CHECK_BACKEND:-cuda}" extra
  dir="$(mktemp -d)"
  checks="$dir/checks"
  table="$dir/table"
  : >"$checks"
  timeout 20 nvidia-smi -L 2>&1 || true
  echo "packed cubins from nvcc:" \
    "$(awk '{print $1}' "$bundle/cubins/nvcc-versions" 2>/dev/null | paste -sd, -)"
  extra="$(library_dirs)"
  [ -z "$extra" ] || echo "gpu-check: libraries the programs need found in $extra"
  # Only cuwire's own binaries get the carried libraries; native runs see the plain system.
  # The end-to-end programs also get the libraries found for them (never PyTorch, which
  # brings its own).
  deps="$PWD/$bundle/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  native=(env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}")
  native_e2e=(env "LD_LIBRARY_PATH=$extra${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  # The probes run natively need the carried libraries (compression, for the image parser);
  # deps never holds a libcuda, so they still open the system's driver.
  probe=(env "LD_LIBRARY_PATH=$deps")
  cuwire=(env "LD_LIBRARY_PATH=$deps" "$bundle/prefix/bin/cuwire")
  cuwire_e2e=(env "LD_LIBRARY_PATH=$deps${extra:+:$extra}" "$bundle/prefix/bin/cuwire")
  sock="$dir/gpu.sock"
  spid='' rpid=''
  LD_LIBRARY_PATH="$deps" "$bundle/prefix/bin/gpu-server" --listen "unix:$sock" --backend "$backend" \
    --ready-file "$dir/ready" >"$dir/server.log" 2>&1 &
  spid=$!
  stop() {
    [ -z "$rpid" ] || { kill "$rpid" 2>/dev/null; wait "$rpid" 2>/dev/null; }
    [ -z "$spid" ] || { kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null; }
    rpid='' spid=''
    echo "--- gpu-server log (warnings and errors)"
    grep -v ' info ' "$dir/server.log" | tail -n 40
  }
  trap stop EXIT
  server_ok=0
  if wait_ready "$dir/ready" "$spid"; then
    server_ok=1
  else
    echo "gpu-check: gpu-server --backend $backend did not start:"
    tail -n 20 "$dir/server.log"
    row "gpu-server --backend $backend" FAIL "did not start: $(last_error "$dir/server.log")"
  fi

  check_param_info
  check_memory_footprint
  check_export_tables
  check_torch
  check_e2e
  check_kernels_test
  check_relay
  check_green
  check_export_slots
  if [ "$server_ok" = 1 ]; then
    echo "--- vector_add through cuwire on the GPU, with its latency table"
    bounded 60 env CUWIRE_STATS=1 "${cuwire_e2e[@]}" run --server "unix:$sock" -- "$bundle/e2e/vector_add"
  fi
  trap - EXIT
  stop
  echo "--- end-to-end programs (wall seconds; ratio = remote / native)"
  cat "$table"
  echo "--- results"
  printf '%-38s %-8s %s\n' check result detail
  while IFS=$'\t' read -r c r d; do
    printf '%-38s %-8s %s\n' "$c" "$r" "$d"
  done <"$checks"
  awk -F'\t' '$2 == "FAIL" || $2 == "DIFFERS" { bad = 1 } END { exit bad }' "$checks"
}

case "${1:-}" in
  pack) pack ;;
  run) run ;;
  *) echo "usage: scripts/gpu-check.sh pack|run" >&2; exit 2 ;;
esac
