// What device memory costs on the libcuda.so.1 in front of it, for the figures the server
// charges tenants (design decision 13): a context's own footprint (ServerConfig::
// context_memory), the step between small allocations (SessionContext::granularity), and what
// larger allocations spend. Natively that is the NVIDIA driver's answer, under `cuwire run`
// cuwire's; scripts/gpu-check.sh prints the driver's.
//
// Output, one line:
//   memory_footprint: context BYTES; step BYTES; N one-byte allocations spent BYTES;
//   SIZE spends BYTES; ...
// Free-memory figures move in whole pages on a GPU, so small allocations may show 0 or a page.

#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/gpu/driver_symbols.h"

namespace cuwire::gpu_check {
namespace {

// Versioned names cuda.h redefines, looked up as the driver exports them.
struct Memory {
  CUresult (*get_info)(size_t*, size_t*) = nullptr;
  CUresult (*alloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*free)(CUdeviceptr) = nullptr;
  CUresult (*ctx_create)(CUcontext*, CUctxCreateParams*, unsigned, CUdevice) = nullptr;
  CUresult (*ctx_destroy)(CUcontext) = nullptr;

  bool load() {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return false;
    get_info = reinterpret_cast<decltype(get_info)>(dlsym(h, "cuMemGetInfo_v2"));
    alloc = reinterpret_cast<decltype(alloc)>(dlsym(h, "cuMemAlloc_v2"));
    free = reinterpret_cast<decltype(free)>(dlsym(h, "cuMemFree_v2"));
    ctx_create = reinterpret_cast<decltype(ctx_create)>(dlsym(h, "cuCtxCreate_v4"));
    ctx_destroy = reinterpret_cast<decltype(ctx_destroy)>(dlsym(h, "cuCtxDestroy_v2"));
    return get_info && alloc && free && ctx_create && ctx_destroy;
  }
  size_t free_bytes() const {
    size_t f = 0, t = 0;
    return get_info(&f, &t) == CUDA_SUCCESS ? f : 0;
  }
};

int run() {
  Driver d;
  Memory m;
  if (!d.load() || !m.load()) {
    std::fprintf(stderr, "memory_footprint: libcuda.so.1 lacks what it needs\n");
    return 1;
  }
  CUdevice dev = 0;
  CUcontext primary = nullptr;
  CUresult rc = d.cuInit(0);
  if (rc == CUDA_SUCCESS) rc = d.cuDeviceGet(&dev, 0);
  if (rc == CUDA_SUCCESS) rc = d.cuDevicePrimaryCtxRetain(&primary, dev);
  if (rc == CUDA_SUCCESS) rc = d.cuCtxSetCurrent(primary);
  if (rc != CUDA_SUCCESS) {
    std::fprintf(stderr, "memory_footprint: no context: %s\n", d.error_name(rc).c_str());
    return 1;
  }
  std::string line = "memory_footprint:";

  // A second context, as the server makes one per session context.
  const size_t before_ctx = m.free_bytes();
  CUcontext ctx = nullptr;
  rc = m.ctx_create(&ctx, nullptr, 0, dev);
  if (rc != CUDA_SUCCESS) {
    std::fprintf(stderr, "memory_footprint: cuCtxCreate: %s\n", d.error_name(rc).c_str());
    return 1;
  }
  const size_t with_ctx = m.free_bytes();
  line += " context " + std::to_string(before_ctx > with_ctx ? before_ctx - with_ctx : 0) + ";";
  m.ctx_destroy(ctx);
  d.cuCtxSetCurrent(primary);

  // Small allocations: the smallest distance between two of them is the allocator's step.
  constexpr int kSmall = 64;
  std::vector<CUdeviceptr> small;
  const size_t before_small = m.free_bytes();
  for (int i = 0; i < kSmall; ++i) {
    CUdeviceptr p = 0;
    if (m.alloc(&p, 1) != CUDA_SUCCESS) break;
    small.push_back(p);
  }
  const size_t after_small = m.free_bytes();
  std::vector<CUdeviceptr> sorted = small;
  std::sort(sorted.begin(), sorted.end());
  uint64_t step = 0;
  for (size_t i = 1; i < sorted.size(); ++i) {
    const uint64_t gap = sorted[i] - sorted[i - 1];
    if (gap && (!step || gap < step)) step = gap;
  }
  for (CUdeviceptr p : small) m.free(p);
  line += " step " + std::to_string(step) + "; " + std::to_string(small.size()) +
          " one-byte allocations spent " +
          std::to_string(before_small > after_small ? before_small - after_small : 0) + ";";

  // Larger ones, each alone.
  for (size_t bytes : {size_t{1} << 20, (size_t{1} << 20) + 1, (size_t{2} << 20) + 1,
                       size_t{3} << 20, (size_t{16} << 20) + 1}) {
    const size_t before = m.free_bytes();
    CUdeviceptr p = 0;
    if (m.alloc(&p, bytes) != CUDA_SUCCESS) continue;
    const size_t after = m.free_bytes();
    m.free(p);
    line += " " + std::to_string(bytes) + " spends " +
            std::to_string(before > after ? before - after : 0) + ";";
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace
}  // namespace cuwire::gpu_check

int main() { return cuwire::gpu_check::run(); }
