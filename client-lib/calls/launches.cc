// Kernel launches (checked on the client against the device's limits, their arguments packed
// by the function's parameter layout), host functions in streams, occupancy helpers, profiler
// markers. Their wire formats: protocol/wire_formats.h.

#include <cuda.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "client-lib/core/client_call.h"
#include "client-lib/core/client_state.h"
#include "protocol/inline_vector.h"
#include "protocol/wire_formats.h"

using namespace cuwire;
using namespace cuwire::client;

namespace {

uint64_t handle_id(const void* h) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(h)); }

// ---- launches

// A launch whose grid or block is outside the device's limits (a dimension of 0 or past its
// maximum, too many threads in a block) fails with the driver's code 9, which cuda.h does not
// name and cudart reports as cudaErrorInvalidConfiguration ("invalid configuration argument"),
// the error such a launch gives on a GPU; CUDA_ERROR_INVALID_VALUE would read as
// cudaErrorInvalidValue.
constexpr CUresult kInvalidConfiguration = static_cast<CUresult>(9);

// *answer_now: whether the launch's answer depends on what only the server knows (a dynamic
// shared memory size past the device's default, which the function may or may not have been
// allowed, with its static shared memory; a cooperative grid, which must fit on the device at
// once): such a launch waits for the server's answer, so that its error is the launch's, as
// on a GPU, not a later call's. So does a launch with a cluster dimension (launch() below).
CUresult check_launch(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                      unsigned shared, bool* answer_now) {
  CUdevice dev = 0;
  if (CUresult e = current_device(&dev)) return e;
  LaunchLimits l;
  if (CUresult e = launch_limits(dev, &l)) return e;
  *answer_now = shared > static_cast<unsigned>(std::max(l.max_shared_default, 0));
  const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  for (int i = 0; i < 3; ++i) {
    if (grid[i] == 0 || block[i] == 0) return kInvalidConfiguration;
    if (block[i] > static_cast<unsigned>(l.max_block[i])) return kInvalidConfiguration;
    if (grid[i] > static_cast<unsigned>(l.max_grid[i])) return kInvalidConfiguration;
  }
  if (uint64_t{bx} * by * bz > static_cast<uint64_t>(l.max_threads_per_block)) {
    return kInvalidConfiguration;
  }
  if (l.max_shared_optin > 0 && shared > static_cast<unsigned>(l.max_shared_optin)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

// A launch's packed parameters: most kernels take well under 1 KiB, which costs no allocation.
using ParamBuffer = InlineVector<uint8_t, 1024>;

// Packs the kernel's arguments into one buffer by its parameter layout.
CUresult pack_params(CUfunction f, void** kernelParams, void** extra,
                     const std::vector<formats::ParamSlot>** slots, ParamBuffer* buf) {
  if (CUresult e = param_layout(handle_id(f), slots)) return e;
  size_t size = 0;
  for (auto& s : **slots) size = std::max<size_t>(size, size_t{s.offset} + s.size);
  if (kernelParams) {
    buf->resize_zeroed(size);
    for (size_t i = 0; i < (*slots)->size(); ++i) {
      const auto& s = (**slots)[i];
      if (!kernelParams[i]) return CUDA_ERROR_INVALID_VALUE;
      std::memcpy(buf->data() + s.offset, kernelParams[i], s.size);
    }
    return CUDA_SUCCESS;
  }
  if (extra) {
    const void* p = nullptr;
    size_t n = 0;
    bool have_size = false;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        p = extra[i + 1];
      } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        n = *static_cast<size_t*>(extra[i + 1]);
        have_size = true;
      } else {
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
    if (!p || !have_size || n < size) return CUDA_ERROR_INVALID_VALUE;
    buf->clear();
    buf->append(static_cast<const uint8_t*>(p), size);
    return CUDA_SUCCESS;
  }
  if (size != 0) return CUDA_ERROR_INVALID_VALUE;
  buf->clear();
  return CUDA_SUCCESS;
}

CUresult launch(CallId id, CUfunction f, const unsigned grid[3], const unsigned block[3],
                unsigned shared, CUstream stream, void** kernelParams, void** extra,
                const CUlaunchAttribute* attrs, unsigned num_attrs) {
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (kernelParams && extra) return CUDA_ERROR_INVALID_VALUE;
  bool answer_now = false;
  if (CUresult e = check_launch(grid[0], grid[1], grid[2], block[0], block[1], block[2], shared,
                                &answer_now)) {
    return e;
  }
  if (id == CallId::k_cuLaunchCooperativeKernel) answer_now = true;
  for (unsigned i = 0; i < num_attrs; ++i) {
    if (attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && attrs[i].value.cooperative) {
      answer_now = true;
    }
    // Whether the device launches clusters of that shape is the server's to say.
    if (attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) answer_now = true;
  }
  const std::vector<formats::ParamSlot>* slots = nullptr;
  ParamBuffer buf;
  if (CUresult e = pack_params(f, kernelParams, extra, &slots, &buf)) return e;
  adopt_pinned_pointers(buf.data(), buf.size());
  formats::LaunchArgs a{};
  a.function = handle_id(f);
  a.stream = handle_id(stream);
  for (int i = 0; i < 3; ++i) {
    a.grid[i] = grid[i];
    a.block[i] = block[i];
  }
  a.shared_mem_bytes = shared;
  a.num_params = static_cast<uint32_t>(slots->size());
  a.num_attrs = num_attrs;
  ArgWriter w(id);
  w.put(a);
  w.put_array(slots->data(), slots->size());
  w.put_array(attrs, num_attrs);
  w.own_bulk(buf.data(), buf.size());
  if (answer_now) {
    return w.call_result();
  }
  return w.send_async();
}

}  // namespace

namespace cuwire::client {

CUresult pack_kernel_params(CUfunction f, void** kernelParams, void** extra,
                            std::vector<uint8_t>* out) {
  if (kernelParams && extra) return CUDA_ERROR_INVALID_VALUE;
  const std::vector<formats::ParamSlot>* slots = nullptr;
  ParamBuffer buf;
  if (CUresult e = pack_params(f, kernelParams, extra, &slots, &buf)) return e;
  out->assign(buf.data(), buf.data() + buf.size());
  return CUDA_SUCCESS;
}

}  // namespace cuwire::client

extern "C" {

// ---- launches: fire-and-forget; configuration errors are found here, at once.

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void** kernelParams,
                                void** extra) {
  const unsigned grid[3] = {gridDimX, gridDimY, gridDimZ},
                 block[3] = {blockDimX, blockDimY, blockDimZ};
  return launch(CallId::k_cuLaunchKernel, f, grid, block, sharedMemBytes, hStream, kernelParams,
                extra, nullptr, 0);
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                           unsigned int gridDimY, unsigned int gridDimZ,
                                           unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes,
                                           CUstream hStream, void** kernelParams) {
  const unsigned grid[3] = {gridDimX, gridDimY, gridDimZ},
                 block[3] = {blockDimX, blockDimY, blockDimZ};
  return launch(CallId::k_cuLaunchCooperativeKernel, f, grid, block, sharedMemBytes, hStream,
                kernelParams, nullptr, nullptr, 0);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                  void** extra) {
  if (!config) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    switch (config->attrs[i].id) {
      case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
      case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT:
      case CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE:
        return unsupported("cuLaunchKernelEx with event or graph-node attributes");
      default:
        break;
    }
  }
  const unsigned grid[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
  const unsigned block[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
  return launch(CallId::k_cuLaunchKernelEx, f, grid, block, config->sharedMemBytes, config->hStream,
                kernelParams, extra, config->attrs, config->numAttrs);
}

// ---- occupancy: the best block size, searched on the client with the server's per-size answer.

CUresult CUDAAPI cuOccupancyMaxPotentialBlockSizeWithFlags(
    int* minGridSize, int* blockSize, CUfunction func,
    CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t dynamicSMemSize, int blockSizeLimit,
    unsigned int flags) {
  if (!minGridSize || !blockSize || !func) return CUDA_ERROR_INVALID_VALUE;
  CUdevice dev = 0;
  if (CUresult e = current_device(&dev)) return e;
  LaunchLimits l;
  if (CUresult e = launch_limits(dev, &l)) return e;
  int sms = 0, warp = 32, func_max = 0;
  if (CUresult e = cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev))
    return e;
  cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev);
  if (cuFuncGetAttribute(&func_max, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func) !=
      CUDA_SUCCESS) {
    func_max = l.max_threads_per_block;
  }
  int limit = std::min(l.max_threads_per_block, func_max > 0 ? func_max : l.max_threads_per_block);
  if (blockSizeLimit > 0) limit = std::min(limit, blockSizeLimit);
  int best_threads = 0, best_block = 0, best_blocks = 0;
  for (int bs = (limit / warp) * warp; bs > 0; bs -= warp) {
    size_t smem = blockSizeToDynamicSMemSize ? blockSizeToDynamicSMemSize(bs) : dynamicSMemSize;
    int blocks = 0;
    if (CUresult e =
            cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, func, bs, smem, flags)) {
      return e;
    }
    if (blocks * bs > best_threads) {
      best_threads = blocks * bs;
      best_block = bs;
      best_blocks = blocks;
    }
  }
  if (best_block == 0) {
    *blockSize = 0;
    *minGridSize = 0;
    return CUDA_SUCCESS;
  }
  *blockSize = best_block;
  *minGridSize = best_blocks * sms;
  return CUDA_SUCCESS;
}

// ---- clusters: the server answers for the launch configuration (its cluster dimension, if
// any; other attributes change nothing).

namespace {
CUresult cluster_query(CallId id, int* out, CUfunction func, const CUlaunchConfig* config) {
  if (!out || !func || !config || (config->numAttrs && !config->attrs))
    return CUDA_ERROR_INVALID_VALUE;
  formats::ClusterQuery q{};
  q.function = handle_id(func);
  q.grid[0] = config->gridDimX;
  q.grid[1] = config->gridDimY;
  q.grid[2] = config->gridDimZ;
  q.block[0] = config->blockDimX;
  q.block[1] = config->blockDimY;
  q.block[2] = config->blockDimZ;
  q.shared_mem_bytes = config->sharedMemBytes;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) continue;
    q.cluster[0] = config->attrs[i].value.clusterDim.x;
    q.cluster[1] = config->attrs[i].value.clusterDim.y;
    q.cluster[2] = config->attrs[i].value.clusterDim.z;
  }
  ArgWriter w(id);
  w.put(q);
  return w.call_for<int32_t>(out);
}
}  // namespace

CUresult CUDAAPI cuOccupancyMaxPotentialClusterSize(int* clusterSize, CUfunction func,
                                                    const CUlaunchConfig* config) {
  return cluster_query(CallId::k_cuOccupancyMaxPotentialClusterSize, clusterSize, func, config);
}

CUresult CUDAAPI cuOccupancyMaxActiveClusters(int* numClusters, CUfunction func,
                                              const CUlaunchConfig* config) {
  return cluster_query(CallId::k_cuOccupancyMaxActiveClusters, numClusters, func, config);
}

CUresult CUDAAPI cuOccupancyMaxPotentialBlockSize(int* minGridSize, int* blockSize, CUfunction func,
                                                  CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                  size_t dynamicSMemSize, int blockSizeLimit) {
  return cuOccupancyMaxPotentialBlockSizeWithFlags(
      minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize, blockSizeLimit, 0);
}

}  // extern "C"
