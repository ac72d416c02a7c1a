// Virtual memory management: address ranges reserved without memory, physical allocations
// (cuMemCreate) charged to the device like any allocation, and mappings of the one into the
// other. A mapping is an Allocation over the physical block's bytes, so copies, kernels and
// every range check see it as device memory; unmapped parts of a reservation are no
// allocation at all, and an access there faults.

#include <cstdlib>
#include <cstring>

#include "server/backend/sim/sim_gpu.h"

namespace cuwire::server::sim {
namespace {

constexpr size_t kGranularity = size_t{2} << 20;
// Reservations are address space only, and programs reserve far more of it than a device has
// memory (a TiB for a growing pool, as on a GPU with 49-bit addresses): they come from a window
// of their own, above the devices' 1 TiB windows (sim_device.cc) and below the host aliases.
constexpr CUdeviceptr kReservationBase = 0x0000'3000'0000'0000ull;
constexpr CUdeviceptr kReservationEnd = 0x0000'6000'0000'0000ull;
constexpr size_t kMaxReservation = size_t{1} << 44;  // 16 TiB in one reservation

bool aligned(uint64_t v) { return v % kGranularity == 0; }

CUdeviceptr align_up(CUdeviceptr v, size_t align) { return (v + align - 1) / align * align; }

}  // namespace

struct SimGpu::Physical {
  uint8_t* bytes = nullptr;
  size_t size = 0;
  int device = 0;
  // Generic compression, as asked: the sim keeps bytes as they are, which is what compression
  // looks like from a program (the device attribute says it is supported).
  unsigned char compression = CU_MEM_ALLOCATION_COMP_NONE;
  // The app's handle references (cuMemCreate, cuMemRetainAllocationHandle) and the mappings
  // of it, guarded by mem_mu_: the device counts the memory in use until both are gone.
  int refs = 1;
  size_t maps = 0;
  unsigned handle_types = CU_MEM_HANDLE_TYPE_NONE;  // what it may be exported as
  ~Physical() { std::free(bytes); }
};

namespace {
// What the sim's shareable handle (export_shareable) names: the physical allocation.
struct SimShareable {
  uint64_t handle;
};
constexpr char kSimShareableMagic[16] = "cuwire-sim-phys";
}  // namespace

CUresult SimGpu::cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType type,
                                              unsigned long long flags) {
  if (!shareable || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  {
    std::shared_lock lock(mem_mu_);
    auto p = physical_.find(handle);
    if (p == physical_.end() ||
        !(p->second->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  SimShareable c{};
  c.handle = handle;
  return export_shareable(shareable, "cuwire-sim-shareable", kSimShareableMagic, c);
}

CUresult SimGpu::cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle,
                                                void* os_handle, CUmemAllocationHandleType type) {
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  SimShareable c{};
  if (!import_shareable(os_handle, kSimShareableMagic, &c)) return CUDA_ERROR_INVALID_VALUE;
  std::unique_lock lock(mem_mu_);
  auto p = physical_.find(c.handle);
  if (p == physical_.end()) return CUDA_ERROR_INVALID_VALUE;  // released since
  ++p->second->refs;  // one more reference, which the importer releases
  *handle = c.handle;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                               CUmemAllocationGranularity_flags option) {
  if (!granularity || !prop) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return CUDA_ERROR_INVALID_VALUE;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id < 0 ||
      prop->location.id >= static_cast<int>(devices_.size()))
    return CUDA_ERROR_INVALID_VALUE;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr,
                                     unsigned long long flags) {
  if (!ptr || size == 0 || !aligned(size) || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (alignment != 0 && (alignment & (alignment - 1))) return CUDA_ERROR_INVALID_VALUE;
  if (size > kMaxReservation || alignment > kMaxReservation) return CUDA_ERROR_OUT_OF_MEMORY;
  const size_t align = std::max(alignment, kGranularity);
  std::unique_lock lock(mem_mu_);
  // A reservation belongs to no device until mapped. Addresses are handed out once, as device
  // memory's are, so a freed reservation's stale pointers fault; only when the window is spent
  // does a new reservation take the first gap freed ones left.
  if (next_reservation_ == 0) next_reservation_ = kReservationBase;
  CUdeviceptr start = align_up(next_reservation_, align);
  if (start > kReservationEnd || size > kReservationEnd - start) {
    start = 0;
    CUdeviceptr from = kReservationBase;
    for (auto it = reservations_.begin();; ++it) {
      const CUdeviceptr gap_end = it == reservations_.end() ? kReservationEnd : it->first;
      const CUdeviceptr at = align_up(from, align);
      if (at <= gap_end && size <= gap_end - at) {
        start = at;
        break;
      }
      if (it == reservations_.end()) break;
      from = it->first + it->second;
    }
    if (start == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  } else {
    next_reservation_ = start + size;
  }
  reservations_[start] = size;
  *ptr = start;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  std::unique_lock lock(mem_mu_);
  auto it = reservations_.find(ptr);
  if (it == reservations_.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  auto m = allocations_.lower_bound(ptr);
  if (m != allocations_.end() && m->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;  // mapped
  reservations_.erase(it);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                             const CUmemAllocationProp* prop, unsigned long long flags) {
  if (!handle || !prop || size == 0 || !aligned(size) || flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id < 0 ||
      prop->location.id >= static_cast<int>(devices_.size()) ||
      (prop->requestedHandleTypes & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (prop->allocFlags.compressionType != CU_MEM_ALLOCATION_COMP_NONE &&
      prop->allocFlags.compressionType != CU_MEM_ALLOCATION_COMP_GENERIC) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto p = std::make_shared<Physical>();
  p->size = size;
  p->device = prop->location.id;
  p->compression = prop->allocFlags.compressionType;
  p->handle_types = prop->requestedHandleTypes;
  std::unique_lock lock(mem_mu_);
  Device& d = devices_[p->device];
  if (size > d.total_bytes - d.used_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  p->bytes = static_cast<uint8_t*>(std::calloc(size, 1));
  if (!p->bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  d.used_bytes += size;
  const uint64_t id = next_physical_++;
  physical_[id] = std::move(p);
  *handle = id;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemRelease(CUmemGenericAllocationHandle handle) {
  std::unique_lock lock(mem_mu_);
  auto it = physical_.find(handle);
  if (it == physical_.end()) return CUDA_ERROR_INVALID_VALUE;
  if (--it->second->refs > 0) return CUDA_SUCCESS;
  // The memory goes with its last mapping (each holds the block), and is in use until then.
  if (it->second->maps == 0) devices_[it->second->device].used_bytes -= it->second->size;
  physical_.erase(it);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Allocation> a = find(reinterpret_cast<CUdeviceptr>(addr), 1);
  if (!a || !a->keep || !a->vmm_handle) return CUDA_ERROR_INVALID_VALUE;  // not a mapping
  std::unique_lock lock(mem_mu_);
  auto it = physical_.find(a->vmm_handle);
  if (it != physical_.end()) {
    ++it->second->refs;
  } else {
    // Released, still mapped (so still counted in use): the handle names the block again.
    auto p = std::static_pointer_cast<Physical>(a->keep);
    p->refs = 1;
    physical_[a->vmm_handle] = std::move(p);
  }
  *handle = a->vmm_handle;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags) {
  if (size == 0 || !aligned(ptr) || !aligned(size) || !aligned(offset) || flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  std::unique_lock lock(mem_mu_);
  auto p = physical_.find(handle);
  if (p == physical_.end()) return CUDA_ERROR_INVALID_VALUE;
  if (offset > p->second->size || size > p->second->size - offset) return CUDA_ERROR_INVALID_VALUE;
  auto r = reservations_.upper_bound(ptr);
  if (r == reservations_.begin()) return CUDA_ERROR_INVALID_VALUE;
  --r;
  if (ptr - r->first >= r->second || size > r->second - (ptr - r->first))
    return CUDA_ERROR_INVALID_VALUE;
  auto m = allocations_.lower_bound(ptr);
  if (m != allocations_.end() && m->first < ptr + size) return CUDA_ERROR_ALREADY_MAPPED;
  if (m != allocations_.begin()) {
    auto before = std::prev(m);
    if (before->first + before->second->size > ptr) return CUDA_ERROR_ALREADY_MAPPED;
  }
  auto a = std::make_shared<Allocation>();
  a->base = ptr;
  a->size = size;
  a->bytes = p->second->bytes + offset;
  a->owned = false;
  a->keep = p->second;
  a->vmm_handle = handle;
  a->kind = MemKind::kDevice;
  a->device = p->second->device;
  a->ctx_id = ctx->id;
  a->ctx = reinterpret_cast<CUcontext>(ctx.get());
  a->buffer_id = next_buffer_id_++;
  allocations_.emplace(ptr, std::move(a));
  ++p->second->maps;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemUnmap(CUdeviceptr ptr, size_t size) {
  if (size == 0 || !aligned(ptr) || !aligned(size)) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  if (current(&ctx) == CUDA_SUCCESS) sync_context(*ctx);  // queued work may still use it
  std::unique_lock lock(mem_mu_);
  bool any = false;
  for (auto m = allocations_.lower_bound(ptr); m != allocations_.end() && m->first < ptr + size;) {
    if (!m->second->keep) return any ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    auto* phys = static_cast<Physical*>(m->second->keep.get());
    if (--phys->maps == 0 && phys->refs == 0) devices_[phys->device].used_bytes -= phys->size;
    m = allocations_.erase(m);
    any = true;
  }
  return any ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// Every byte of [ptr, ptr+size) mapped.
bool SimGpu::mapped(CUdeviceptr ptr, size_t size) {
  CUdeviceptr at = ptr;
  while (at < ptr + size) {
    std::shared_ptr<Allocation> a = find(at, 1);
    if (!a || !a->keep) return false;
    at = a->base + a->size;
  }
  return true;
}

CUresult SimGpu::cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                size_t count) {
  if (size == 0 || !desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id < 0 ||
        desc[i].location.id >= static_cast<int>(devices_.size()) ||
        desc[i].flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return mapped(ptr, size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult SimGpu::cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location,
                                CUdeviceptr ptr) {
  if (!flags || !location) return CUDA_ERROR_INVALID_VALUE;
  if (!mapped(ptr, 1)) return CUDA_ERROR_INVALID_VALUE;
  *flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                        CUmemGenericAllocationHandle handle) {
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  std::shared_lock lock(mem_mu_);
  auto p = physical_.find(handle);
  if (p == physical_.end()) return CUDA_ERROR_INVALID_VALUE;
  std::memset(prop, 0, sizeof *prop);
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = p->second->device;
  prop->allocFlags.compressionType = p->second->compression;
  return CUDA_SUCCESS;
}

}  // namespace cuwire::server::sim
