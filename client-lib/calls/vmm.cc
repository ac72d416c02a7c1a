// Virtual memory management, client side: each call goes to the server (server/calls/vmm.cc),
// which checks it against the session's reservations and handles. The client keeps its
// mappings among its device allocations, so that copies and launches treat their addresses
// as device memory, until they are unmapped.

#include <cuda.h>

#include <cstdint>
#include <map>
#include <mutex>

#include "client-lib/core/client_call.h"

using namespace cuwire;
using namespace cuwire::client;

namespace {

struct Mappings {
  std::mutex mu;
  std::map<CUdeviceptr, size_t> ranges;  // guarded by mu
};
Mappings& mappings() {
  static Mappings* m = new Mappings();  // leaked: used by atexit handlers too
  return *m;
}

}  // namespace

void cuwire::client::reset_vmm_state() {
  Mappings& m = mappings();
  std::lock_guard lock(m.mu);
  m.ranges.clear();
}

extern "C" {

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                               CUmemAllocationGranularity_flags option) {
  if (!granularity || !prop) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuMemGetAllocationGranularity);
  w.put(*prop);
  w.put(static_cast<uint32_t>(option));
  return w.call_for<uint64_t>(granularity);
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags) {
  if (!ptr) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuMemAddressReserve);
  w.put(static_cast<uint64_t>(size));
  w.put(static_cast<uint64_t>(alignment));
  w.put(static_cast<uint64_t>(addr));
  w.put(static_cast<uint64_t>(flags));
  return w.call_for<uint64_t>(ptr);
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  ArgWriter w(CallId::k_cuMemAddressFree);
  w.put(static_cast<uint64_t>(ptr));
  w.put(static_cast<uint64_t>(size));
  return w.call_result();
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                             const CUmemAllocationProp* prop, unsigned long long flags) {
  if (!handle || !prop) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuMemCreate);
  w.put(static_cast<uint64_t>(size));
  w.put(*prop);
  w.put(static_cast<uint64_t>(flags));
  return w.call_for<uint64_t>(handle);
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  ArgWriter w(CallId::k_cuMemRelease);
  w.put(static_cast<uint64_t>(handle));
  return w.call_result();
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags) {
  ArgWriter w(CallId::k_cuMemMap);
  w.put(static_cast<uint64_t>(ptr));
  w.put(static_cast<uint64_t>(size));
  w.put(static_cast<uint64_t>(offset));
  w.put(static_cast<uint64_t>(handle));
  w.put(static_cast<uint64_t>(flags));
  if (CUresult e = w.call_result()) return e;
  note_alloc(ptr, size);
  Mappings& m = mappings();
  std::lock_guard lock(m.mu);
  m.ranges[ptr] = size;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  ArgWriter w(CallId::k_cuMemUnmap);
  w.put(static_cast<uint64_t>(ptr));
  w.put(static_cast<uint64_t>(size));
  if (CUresult e = w.call_result()) return e;
  Mappings& m = mappings();
  std::lock_guard lock(m.mu);
  for (auto it = m.ranges.lower_bound(ptr); it != m.ranges.end() && it->first < ptr + size;) {
    note_free(it->first);
    it = m.ranges.erase(it);
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                size_t count) {
  if (!desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuMemSetAccess);
  w.put(static_cast<uint64_t>(ptr));
  w.put(static_cast<uint64_t>(size));
  w.put(static_cast<uint64_t>(count));
  for (size_t i = 0; i < count; ++i) w.put(desc[i]);
  return w.call_result();
}

CUresult CUDAAPI cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location,
                                CUdeviceptr ptr) {
  if (!flags || !location) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuMemGetAccess);
  w.put(*location);
  w.put(static_cast<uint64_t>(ptr));
  return w.call_for<uint64_t>(flags);
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuMemRetainAllocationHandle);
  w.put(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(addr)));
  return w.call_for<uint64_t>(handle);
}

CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                        CUmemGenericAllocationHandle handle) {
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuMemGetAllocationPropertiesFromHandle);
  w.put(static_cast<uint64_t>(handle));
  return w.call_for(prop);
}

}  // extern "C"
