# cuwire's client libraries alone, in a small image: /opt/cuwire/lib/cuwire with libcuda.so.1,
# libnvidia-ml.so.1 and libcuwire_nvrtc.so, taken from the gpu-server image
# (deploy/docker/gpu-server.Dockerfile) so that both come from one build. Built from the
# repository root after that image:
#
#   docker build -f deploy/docker/gpu-server.Dockerfile -t REGISTRY/cuwire/gpu-server:0.1.0 .
#   docker build -f deploy/docker/client-libs.Dockerfile \
#     --build-arg SERVER_IMAGE=REGISTRY/cuwire/gpu-server:0.1.0 \
#     -t REGISTRY/cuwire/client-libs:0.1.0 .
#
# Two uses:
#   - The initContainer of deploy/kubernetes/gpu-server.yaml runs it with a hostPath mounted at
#     /host/lib: the libraries are put there (the node's /var/lib/cuwire/lib), the directory
#     cuwire-k8s-plugin is given as --client-lib-dir and mounts into every container granted
#     cuwire.io/gpu-memory, cuwire.io/gpu-compute or cuwire.io/gpu.
#   - An image that brings its own libraries copies them in (they need nothing but glibc 2.34
#     or newer, so any image will do):
#       COPY --from=REGISTRY/cuwire/client-libs:0.1.0 /opt/cuwire/lib/cuwire/ /usr/local/cuwire/lib/
#     and puts that directory first on LD_LIBRARY_PATH.
#
# Each file is written beside its old copy and renamed over it: containers that run with the
# directory mounted keep the library they loaded (writing into it in place would change the
# pages those programs have mapped), and new containers get the new one.

ARG SERVER_IMAGE=registry.example.com/cuwire/gpu-server:0.1.0

FROM ${SERVER_IMAGE} AS server

FROM busybox:1.36
COPY --from=server /opt/cuwire/lib/cuwire/ /opt/cuwire/lib/cuwire/
# busybox's image has no /usr/local: made first.
RUN mkdir -p /usr/local/bin \
 && printf '%s\n' \
      '#!/bin/sh' \
      '# cuwire-install-libs DIR: the client libraries into DIR, each renamed into place.' \
      'set -eu' \
      'dest="${1:-/host/lib}"' \
      'mkdir -p "$dest"' \
      'cd /opt/cuwire/lib/cuwire' \
      'for f in *; do' \
      '  rm -rf "$dest/.$f.new"' \
      '  cp -a "$f" "$dest/.$f.new"' \
      '  mv -f "$dest/.$f.new" "$dest/$f"' \
      'done' \
      'ls -l "$dest"' \
      > /usr/local/bin/cuwire-install-libs \
 && chmod 0755 /usr/local/bin/cuwire-install-libs \
 && test -f /opt/cuwire/lib/cuwire/libcuda.so.1 \
 && test -f /opt/cuwire/lib/cuwire/libnvidia-ml.so.1
LABEL org.opencontainers.image.title="cuwire client libraries" \
      org.opencontainers.image.version="0.1.0"
CMD ["/usr/local/bin/cuwire-install-libs", "/host/lib"]
