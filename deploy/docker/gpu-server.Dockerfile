# The image of deploy/kubernetes/gpu-server.yaml: gpu-server, the admin CLI `cuwire` and
# cuwire-k8s-plugin, with the client libraries beside them. Built from the repository root:
#
#   docker build -f deploy/docker/gpu-server.Dockerfile -t REGISTRY/cuwire/gpu-server:0.1.0 .
#
# (--build-arg CUDA_VERSION=13.x takes another CUDA 13 toolkit from NVIDIA's Debian 12
# repository; amd64 and arm64 builds both work.)
#
# /opt/cuwire is laid out as `cmake --install build --prefix /opt/cuwire` lays it out:
#   /opt/cuwire/bin/           gpu-server, cuwire, cuwire-k8s-plugin
#   /opt/cuwire/lib/cuwire/    libcuda.so.1, libnvidia-ml.so.1, libcuwire_nvrtc.so (the client
#                              libraries: glibc 2.34 or newer is all they need;
#                              deploy/docker/client-libs.Dockerfile carries them alone)
#   /opt/cuwire/share/cuwire/  the samples
# There is no NVIDIA driver inside: gpu-server's cuda backend loads the node's libcuda.so.1,
# which the NVIDIA container runtime (runtimeClassName: nvidia) puts into the container along
# with the GPUs the NVIDIA device plugin gave the pod. No ENTRYPOINT: the manifests name the
# program (/opt/cuwire/bin/gpu-server or /opt/cuwire/bin/cuwire-k8s-plugin).

# ---- build: Debian 12, the packages of scripts/setup.sh, NVIDIA's CUDA toolkit (nvcc, cuda.h)
FROM debian:12 AS build
# One CUDA 13.x toolkit, as NVIDIA's Debian 12 repository names it ("13.0" -> cuda-nvcc-13-0).
ARG CUDA_VERSION=13.0
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      ca-certificates curl \
 && case "$(dpkg --print-architecture)" in \
      amd64) repo=x86_64 ;; \
      arm64) repo=sbsa ;; \
      *) echo "no CUDA repository for $(dpkg --print-architecture)" >&2; exit 1 ;; \
    esac \
 && curl -fsSL -o /tmp/cuda-keyring.deb \
      "https://developer.download.nvidia.com/compute/cuda/repos/debian12/${repo}/cuda-keyring_1.1-1_all.deb" \
 && dpkg -i /tmp/cuda-keyring.deb \
 && rm /tmp/cuda-keyring.deb \
 && apt-get update -q \
 && v="${CUDA_VERSION//./-}" \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      "cuda-nvcc-$v" "cuda-cudart-dev-$v" "cuda-driver-dev-$v" "cuda-nvrtc-dev-$v" \
      "cuda-profiler-api-$v" \
 && rm -rf /var/lib/apt/lists/* \
 && test -x "/usr/local/cuda-${CUDA_VERSION}/bin/nvcc" \
 && test -f "/usr/local/cuda-${CUDA_VERSION}/include/cuda.h" \
 && test -f "/usr/local/cuda-${CUDA_VERSION}/include/cudaProfiler.h" \
 && test -f "/usr/local/cuda-${CUDA_VERSION}/include/nvrtc.h"
# cmake/CuwireCuda.cmake and scripts/setup.sh find the toolkit through CUDA_HOME: nvcc, cuda.h and
# cudaProfiler.h (the generated driver code includes both), the static cudart the samples link,
# lib64/stubs/libcuda.so, and nvrtc.h (the NVRTC shim).
ENV CUDA_HOME=/usr/local/cuda-${CUDA_VERSION}
ENV PATH=${CUDA_HOME}/bin:${PATH}

# The Debian packages the build needs, as scripts/setup.sh lists them (run as root: no sudo).
COPY scripts/setup.sh /tmp/setup.sh
RUN bash /tmp/setup.sh && rm -rf /var/lib/apt/lists/* /tmp/setup.sh

# What the build reads, and nothing more (no build/ trees of the working copy; the samples
# build tests/programs/driver_smoke.c).
WORKDIR /src
COPY CMakeLists.txt ./
COPY cmake cmake
COPY protocol protocol
COPY server server
COPY client-lib client-lib
COPY k8s-plugin k8s-plugin
COPY samples samples
COPY tests/programs tests/programs
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=Release \
      -DCUWIRE_BUILD_TESTS=OFF -DCUWIRE_BUILD_BENCHMARKS=OFF -DCUWIRE_FUZZ=OFF \
 && cmake --build build -j"$(nproc)" \
 && cmake --install build --prefix /opt/cuwire \
 && test -x /opt/cuwire/bin/gpu-server \
 && test -x /opt/cuwire/bin/cuwire-k8s-plugin \
 && test -f /opt/cuwire/lib/cuwire/libcuda.so.1 \
 && test -f /opt/cuwire/lib/cuwire/libnvidia-ml.so.1

# ---- runtime: Debian 12 slim and the shared libraries the three programs load
FROM debian:12-slim
# gpu-server:        libssl3 (libssl, libcrypto), libzstd1, liblz4-1, libcapnp-0.9.2 (libcapnp,
#                    libkj), libtomlplusplus3, libspdlog1.10, libfmt9
# cuwire:            libtomlplusplus3, libssl3
# cuwire-k8s-plugin: libgrpc++1.51 (with libgrpc29, libabsl20220623), libprotobuf32, libssl3,
#                    libspdlog1.10, libfmt9
# libstdc++6 and libgcc-s1 are in the base image; the client libraries need only glibc.
RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      libssl3 libzstd1 liblz4-1 libcapnp-0.9.2 libtomlplusplus3 libspdlog1.10 libfmt9 \
      libgrpc++1.51 libgrpc29 libabsl20220623 libprotobuf32 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/cuwire /opt/cuwire
ENV PATH=/opt/cuwire/bin:${PATH}
# The loader finds every library each program needs (fails the build otherwise).
RUN for p in /opt/cuwire/bin/*; do \
      if ldd "$p" | grep -q 'not found'; then ldd "$p"; exit 1; fi; \
    done \
 && gpu-server --version && cuwire-k8s-plugin --version
LABEL org.opencontainers.image.title="cuwire gpu-server" \
      org.opencontainers.image.version="0.1.0"
# 7740: the tls: listener of deploy/kubernetes/gpu-server.yaml; 9400: /metrics and /healthz.
EXPOSE 7740 9400
