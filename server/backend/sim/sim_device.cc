// Devices: construction of the simulated GPUs, their attributes and identity. The attribute
// set models a part of the chosen profile's generation (sim_profile.h; sm_75 by default).

#include <cstdio>
#include <cstring>

#include "server/backend/sim/sim_gpu.h"

namespace cuwire::server::sim {
namespace {

// Each simulated device owns a 1 TiB window of the device address space; addresses are
// 256-byte aligned and never reused, so a stale pointer never aliases a new allocation.
// Pinned host memory gets device-visible aliases in a window above all device windows;
// address reservations (sim_vmm.cc) take theirs from 0x3000'0000'0000 up to those aliases.
constexpr CUdeviceptr kDeviceWindowBase = 0x0000'0200'0000'0000ull;
constexpr CUdeviceptr kDeviceWindowSize = 0x0000'0100'0000'0000ull;
constexpr CUdeviceptr kHostAliasBase = 0x0000'6000'0000'0000ull;

constexpr int kSharedPerBlock = 48 << 10;
constexpr int kPciBusBase = 0x17;

std::atomic<uint64_t> g_next_instance{1};

}  // namespace

SimGpu::SimGpu(const SimOptions& o)
    : options_(o),
      profile_(find_sim_profile(o.profile) ? *find_sim_profile(o.profile) : sim_profiles()[0]),
      instance_(g_next_instance++),
      devices_(static_cast<size_t>(o.gpus)),
      next_host_alias_(kHostAliasBase) {
  for (int i = 0; i < o.gpus; ++i) {
    Device& d = devices_[i];
    d.ordinal = i;
    d.total_bytes = o.memory_bytes;
    d.next_address = kDeviceWindowBase + static_cast<CUdeviceptr>(i) * kDeviceWindowSize;
    d.default_pool = std::make_unique<Pool>();
    d.default_pool->device = i;
    d.default_pool->is_default = true;
    d.default_pool->props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    d.default_pool->props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.default_pool->props.location.id = i;
    d.current_pool = d.default_pool.get();
    workers_.push_back(
        std::make_unique<ptx::WorkerPool>(static_cast<unsigned>(std::max(1, o.threads))));
  }
}

SimGpu::~SimGpu() {
  std::vector<CtxPtr> all;
  {
    std::unique_lock lock(mu_);
    for (auto& [p, c] : contexts_) all.push_back(c);
    contexts_.clear();
  }
  for (auto& c : all) {
    c->alive = false;
    clear_context(*c);
  }
}

CUresult SimGpu::cuInit(unsigned flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  initialized_ = true;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuDeviceGetCount(int* count) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(devices_.size());
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuDeviceGet(CUdevice* device, int ordinal) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<size_t>(len), "%s", profile_.device_name);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = devices_[dev].total_bytes;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  // A version-4-shaped UUID, stable per ordinal so that tools can tell devices apart.
  static const unsigned char kBase[16] = {0x63, 0x77, 0x73, 0x69, 0x6d, 0x2d, 0x47, 0x50,
                                          0x82, 0x55, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  std::memcpy(uuid->bytes, kBase, sizeof kBase);
  uuid->bytes[14] = static_cast<char>(dev >> 8);
  uuid->bytes[15] = static_cast<char>(dev & 0xff);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuDeviceGetLuid(char*, unsigned*, CUdevice dev) {
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_ERROR_NOT_SUPPORTED;  // LUIDs exist on Windows only
}

CUresult SimGpu::cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  return device_attribute(attrib, dev, pi);
}

CUresult SimGpu::device_attribute(CUdevice_attribute a, int dev, int* v) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *v = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
      *v = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
      *v = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
      *v = 64;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
      *v = 2147483647;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
      *v = 65535;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
      *v = 65535;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
      *v = kSharedPerBlock;
      break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
      *v = 64 << 10;
      break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      *v = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
      *v = 2147483647;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
      *v = 65536;
      break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
      *v = profile_.clock_khz;
      break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
      *v = 512;
      break;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
      *v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *v = options_.sm_count;
      break;
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
      *v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE:
      *v = CU_COMPUTEMODE_DEFAULT;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH:
      *v = 131072;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH:
      *v = 131072;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT:
      *v = 65536;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH:
      *v = 16384;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT:
      *v = 16384;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH:
      *v = 16384;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH:
      *v = 32768;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT:
      *v = 32768;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS:
      *v = 2048;
      break;
    case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT:
      *v = 512;
      break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
      *v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
      *v = kPciBusBase + dev;
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
      *v = profile_.memory_clock_khz;
      break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
      *v = profile_.bus_width_bits;
      break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
      *v = profile_.l2_bytes;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      *v = profile_.threads_per_sm;
      break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
      *v = 3;
      break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
      *v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH:
      *v = 32768;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS:
      *v = 2048;
      break;
    case CU_DEVICE_ATTRIBUTE_CAN_TEX2D_GATHER:
      *v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH:
      *v = 32768;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT:
      *v = 32768;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE:
      *v = 8192;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE:
      *v = 8192;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE:
      *v = 32768;
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
      *v = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH:
      *v = 32768;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH:
      *v = 32768;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS:
      *v = 2046;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH:
      *v = 32768;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH:
      *v = 131072;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT:
      *v = 65536;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH:
      *v = 16384;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT:
      *v = 16384;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH:
      *v = 16384;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH:
      *v = 32768;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS:
      *v = 2048;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH:
      *v = 32768;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT:
      *v = 32768;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS:
      *v = 2048;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH:
      *v = 32768;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH:
      *v = 32768;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS:
      *v = 2046;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH:
      *v = 268435456;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH:
      *v = 131072;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT:
      *v = 65000;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH:
      *v = 2097120;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH:
      *v = 32768;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT:
      *v = 32768;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *v = profile_.major;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *v = profile_.minor;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH:
      *v = 32768;
      break;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
      *v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
      *v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
      *v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
      *v = profile_.shared_per_sm;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
      *v = 65536;
      break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
      *v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID:
      *v = dev;
      break;
    case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO:
      *v = profile_.single_to_double_ratio;
      break;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
      *v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED:
      *v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1:
      *v = 1;  // stream memory operations (sim_stream.cc)
      break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1:
      *v = 1;  // stream memory operations (sim_stream.cc)
      break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1:
      *v = 1;  // stream memory operations (sim_stream.cc)
      break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
      *v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      *v = profile_.shared_per_block_optin;
      break;
    case CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES:
      *v = 1;  // stream memory operations (sim_stream.cc)
      break;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
      *v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      *v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
      *v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
      *v = profile_.blocks_per_sm;
      break;
    case CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED:
      *v = 1;
      break;  // sim_vmm.cc
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED:
      *v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
      *v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
      *v = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
      break;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:
      *v = profile_.arch() >= 90 ? 1 : 0;  // thread-block clusters (sim_launch.cc)
      break;
    case CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
      *v = 1;  // stream memory operations (sim_stream.cc)
      break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR:
      *v = 1;  // stream memory operations (sim_stream.cc)
      break;
    case CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT:
      *v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG:
      *v = CU_DEVICE_NUMA_CONFIG_NONE;
      break;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID:
      *v = -1;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_MPS_ENABLED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID:
      *v = -1;
      break;
    case CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID:
      *v = static_cast<int>(profile_.pci_device_id);
      break;
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID:
      *v = 0x12a210de;
      break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED:
      *v = 0;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuDeviceGetProperties(CUdevprop* prop, CUdevice dev) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->sharedMemPerBlock = kSharedPerBlock;
  prop->totalConstantMemory = 64 << 10;
  prop->SIMDWidth = 32;
  prop->memPitch = 2147483647;
  prop->regsPerBlock = 65536;
  prop->clockRate = profile_.clock_khz;
  prop->textureAlign = 512;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (!major || !minor) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *major = profile_.major;
  *minor = profile_.minor;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuDeviceGetPCIBusId(char* bus_id, int len, CUdevice dev) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (!bus_id || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(bus_id, static_cast<size_t>(len), "0000:%02X:00.0", kPciBusBase + dev);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuDeviceGetByPCIBusId(CUdevice* dev, const char* bus_id) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (!dev || !bus_id) return CUDA_ERROR_INVALID_VALUE;
  // Accepts [domain:]bus:device[.function] in hex, as the driver does.
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  int n = 0;
  if (std::sscanf(bus_id, "%x:%x:%x.%x%n", &domain, &bus, &device, &function, &n) == 4 ||
      std::sscanf(bus_id, "%x:%x:%x%n", &domain, &bus, &device, &n) == 3) {
  } else if (std::sscanf(bus_id, "%x:%x.%x%n", &bus, &device, &function, &n) == 3) {
    domain = 0;
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (bus_id[n] != '\0') return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < static_cast<int>(devices_.size()); ++i) {
    if (domain == 0 && bus == static_cast<unsigned>(kPciBusBase + i) && device == 0 &&
        function == 0) {
      *dev = i;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
}

CUresult SimGpu::cuDeviceCanAccessPeer(int* can, CUdevice dev, CUdevice peer) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (!can) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev) || !valid_device(peer)) return CUDA_ERROR_INVALID_DEVICE;
  *can = dev != peer ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attrib, CUdevice src,
                                         CUdevice dst) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(src) || !valid_device(dst) || src == dst) return CUDA_ERROR_INVALID_DEVICE;
  switch (attrib) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
      *value = 0;
      break;
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
      *value = 1;
      break;
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
      *value = 0;
      break;
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED:
      *value = 0;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pool = reinterpret_cast<CUmemoryPool>(devices_[dev].default_pool.get());
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::shared_lock lock(mu_);
  *pool = reinterpret_cast<CUmemoryPool>(devices_[dev].current_pool);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuDeviceSetMemPool(CUdevice dev, CUmemoryPool h) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Pool* p = pool_of(h);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  if (p->device != dev) return CUDA_ERROR_INVALID_DEVICE;
  std::unique_lock lock(mu_);
  devices_[dev].current_pool = p;
  return CUDA_SUCCESS;
}

}  // namespace cuwire::server::sim
