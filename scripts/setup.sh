#!/usr/bin/env bash
# Installs every Debian package that cuwire's build, tests and benchmarks need, and checks for
# the CUDA toolkit. Non-interactive and idempotent: when everything is present it changes
# nothing.
set -euo pipefail

packages=(
  build-essential cmake pkg-config python3 python3-yaml
  libasio-dev capnproto libcapnp-dev libssl-dev
  libzstd-dev liblz4-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libcli11-dev libspdlog-dev libtomlplusplus-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev clang-format
  openssl
  python3-matplotlib
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install packages" >&2; exit 1; }
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

# The CUDA toolkit (nvcc, cuda.h) is not a Debian package here; it must already be installed.
cuda_home="${CUDA_HOME:-}"
if [ -z "$cuda_home" ]; then
  if command -v nvcc >/dev/null; then
    cuda_home="$(dirname "$(dirname "$(command -v nvcc)")")"
  elif [ -x /usr/local/cuda/bin/nvcc ]; then
    cuda_home=/usr/local/cuda
  fi
fi
if [ -z "$cuda_home" ] || [ ! -x "$cuda_home/bin/nvcc" ] || [ ! -f "$cuda_home/include/cuda.h" ]; then
  echo "setup: the CUDA toolkit is missing: cuwire needs nvcc and cuda.h." >&2
  echo "setup: install the CUDA toolkit and set CUDA_HOME (e.g. /usr/local/cuda) or put nvcc on the PATH." >&2
  exit 1
fi
echo "setup: CUDA toolkit at $cuda_home ($("$cuda_home/bin/nvcc" --version | tail -n 2 | head -n 1))"
