#include "sim_backend.h"

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

namespace cuwire::server {
namespace {

// Each simulated device owns a 1 TiB window of the device address space; addresses are
// 256-byte aligned and never reused, so a stale pointer can never alias a new allocation.
constexpr CUdeviceptr kDeviceWindowBase = 0x0000'0200'0000'0000ull;
constexpr CUdeviceptr kDeviceWindowSize = 0x0000'0100'0000'0000ull;
constexpr size_t kAllocAlign = 256;

struct Allocation {
  size_t size = 0;
  std::unique_ptr<uint8_t[]> bytes;
};

struct SimDevice {
  int ordinal = 0;
  uint64_t total_bytes = 0;
  uint64_t used_bytes = 0;     // guarded by SimBackend::mu_
  CUdeviceptr next_address = 0;
};

class SimBackend final : public DriverApi {
 public:
  explicit SimBackend(const SimOptions& o) {
    for (int i = 0; i < o.gpus; ++i) {
      SimDevice d;
      d.ordinal = i;
      d.total_bytes = o.memory_bytes;
      d.next_address = kDeviceWindowBase + static_cast<CUdeviceptr>(i) * kDeviceWindowSize;
      devices_.push_back(d);
    }
  }

  CUresult cuInit(unsigned int flags) override {
    return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }

  CUresult cuDeviceGetCount(int* count) override {
    *count = static_cast<int>(devices_.size());
    return CUDA_SUCCESS;
  }

  CUresult cuDeviceGet(CUdevice* device, int ordinal) override {
    if (ordinal < 0 || ordinal >= static_cast<int>(devices_.size())) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
  }

  CUresult cuDeviceGetName(char* name, int len, CUdevice dev) override {
    if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
    if (len <= 0) return CUDA_ERROR_INVALID_VALUE;
    std::snprintf(name, static_cast<size_t>(len), "cuwire sim GPU %d", dev);
    return CUDA_SUCCESS;
  }

  CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) override {
    if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = devices_[dev].total_bytes;
    return CUDA_SUCCESS;
  }

  CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) override {
    if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
    static const char kPrefix[] = "cuwire-sim-gpu";
    std::memset(uuid->bytes, 0, sizeof uuid->bytes);
    std::memcpy(uuid->bytes, kPrefix, sizeof kPrefix - 1);
    uuid->bytes[15] = static_cast<char>(dev);
    return CUDA_SUCCESS;
  }

  CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) override {
    if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
    return device_attribute(attrib, dev, pi);
  }

  CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) override {
    if (bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    SimDevice& d = devices_[0];
    std::unique_lock lock(mu_);
    if (bytesize > d.total_bytes - d.used_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
    Allocation a;
    a.size = bytesize;
    a.bytes.reset(new (std::nothrow) uint8_t[bytesize]());
    if (!a.bytes) return CUDA_ERROR_OUT_OF_MEMORY;
    CUdeviceptr p = d.next_address;
    d.next_address += (bytesize + kAllocAlign - 1) / kAllocAlign * kAllocAlign;
    d.used_bytes += bytesize;
    allocations_.emplace(p, std::move(a));
    *dptr = p;
    return CUDA_SUCCESS;
  }

  CUresult cuMemFree_v2(CUdeviceptr dptr) override {
    if (dptr == 0) return CUDA_SUCCESS;
    std::unique_lock lock(mu_);
    auto it = allocations_.find(dptr);
    if (it == allocations_.end()) return CUDA_ERROR_INVALID_VALUE;
    devices_[0].used_bytes -= it->second.size;
    allocations_.erase(it);
    return CUDA_SUCCESS;
  }

  CUresult cuMemGetInfo_v2(size_t* free, size_t* total) override {
    std::shared_lock lock(mu_);
    *total = devices_[0].total_bytes;
    *free = devices_[0].total_bytes - devices_[0].used_bytes;
    return CUDA_SUCCESS;
  }

  CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) override {
    std::shared_lock lock(mu_);
    uint8_t* p = translate(dst, n);
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (n) std::memcpy(p, src, n);
    return CUDA_SUCCESS;
  }

  CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) override {
    std::shared_lock lock(mu_);
    uint8_t* p = translate(src, n);
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (n) std::memcpy(dst, p, n);
    return CUDA_SUCCESS;
  }

  CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char uc, size_t n) override {
    std::shared_lock lock(mu_);
    uint8_t* p = translate(dst, n);
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (n) std::memset(p, uc, n);
    return CUDA_SUCCESS;
  }

  CUresult cuStreamCreate(CUstream* stream, unsigned int flags) override {
    *stream = reinterpret_cast<CUstream>(new int(0));
    return CUDA_SUCCESS;
  }
  CUresult cuStreamDestroy_v2(CUstream stream) override {
    delete reinterpret_cast<int*>(stream);
    return CUDA_SUCCESS;
  }
  CUresult cuStreamSynchronize(CUstream) override { return CUDA_SUCCESS; }

 private:
  bool valid(CUdevice dev) const { return dev >= 0 && dev < static_cast<int>(devices_.size()); }

  // Host bytes behind [p, p+n) inside one live allocation; caller holds mu_.
  uint8_t* translate(CUdeviceptr p, size_t n) {
    auto it = allocations_.upper_bound(p);
    if (it == allocations_.begin()) return nullptr;
    --it;
    size_t off = p - it->first;
    if (off >= it->second.size || n > it->second.size - off) return n == 0 ? nullptr : nullptr;
    return it->second.bytes.get() + off;
  }

  CUresult device_attribute(CUdevice_attribute a, CUdevice dev, int* v) {
    switch (a) {
      case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
      case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *v = 1024; break;
      case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *v = 1024; break;
      case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *v = 64; break;
      case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 2147483647; break;
      case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *v = 65535; break;
      case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
      case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
      case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 8; break;
      case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 7; break;
      case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 5; break;
      default: *v = 0; break;
    }
    return CUDA_SUCCESS;
  }

  std::vector<SimDevice> devices_;
  std::shared_mutex mu_;
  std::map<CUdeviceptr, Allocation> allocations_;
};

}  // namespace

std::unique_ptr<DriverApi> make_sim_backend(const SimOptions& options) {
  return std::make_unique<SimBackend>(options);
}

}  // namespace cuwire::server
