// Virtual memory management, client side: each call goes to the server (server/vmm_calls.cc),
// which checks it against the session's reservations and handles. The client keeps its
// mappings among its device allocations, so that copies and launches treat their addresses
// as device memory, until they are unmapped.

#include <cuda.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

#include "client_call.h"

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

CUresult simple_call(ArgWriter& w) {
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  return r.finish();
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
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  uint64_t g = 0;
  r.get_array(&g, 1);
  if (CUresult e = r.finish()) return e;
  *granularity = g;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                     unsigned long long flags) {
  if (!ptr) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuMemAddressReserve);
  w.put(static_cast<uint64_t>(size));
  w.put(static_cast<uint64_t>(alignment));
  w.put(static_cast<uint64_t>(addr));
  w.put(static_cast<uint64_t>(flags));
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  uint64_t p = 0;
  r.get_array(&p, 1);
  if (CUresult e = r.finish()) return e;
  *ptr = p;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  ArgWriter w(CallId::k_cuMemAddressFree);
  w.put(static_cast<uint64_t>(ptr));
  w.put(static_cast<uint64_t>(size));
  return simple_call(w);
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                             const CUmemAllocationProp* prop, unsigned long long flags) {
  if (!handle || !prop) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuMemCreate);
  w.put(static_cast<uint64_t>(size));
  w.put(*prop);
  w.put(static_cast<uint64_t>(flags));
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  uint64_t h = 0;
  r.get_array(&h, 1);
  if (CUresult e = r.finish()) return e;
  *handle = h;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  ArgWriter w(CallId::k_cuMemRelease);
  w.put(static_cast<uint64_t>(handle));
  return simple_call(w);
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                          unsigned long long flags) {
  ArgWriter w(CallId::k_cuMemMap);
  w.put(static_cast<uint64_t>(ptr));
  w.put(static_cast<uint64_t>(size));
  w.put(static_cast<uint64_t>(offset));
  w.put(static_cast<uint64_t>(handle));
  w.put(static_cast<uint64_t>(flags));
  if (CUresult e = simple_call(w)) return e;
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
  if (CUresult e = simple_call(w)) return e;
  Mappings& m = mappings();
  std::lock_guard lock(m.mu);
  for (auto it = m.ranges.lower_bound(ptr); it != m.ranges.end() && it->first < ptr + size;) {
    note_free(it->first);
    it = m.ranges.erase(it);
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (!desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuMemSetAccess);
  w.put(static_cast<uint64_t>(ptr));
  w.put(static_cast<uint64_t>(size));
  w.put(static_cast<uint64_t>(count));
  for (size_t i = 0; i < count; ++i) w.put(desc[i]);
  return simple_call(w);
}

CUresult CUDAAPI cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  if (!flags || !location) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuMemGetAccess);
  w.put(*location);
  w.put(static_cast<uint64_t>(ptr));
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  uint64_t f = 0;
  r.get_array(&f, 1);
  if (CUresult e = r.finish()) return e;
  *flags = f;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuMemRetainAllocationHandle);
  w.put(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(addr)));
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  uint64_t h = 0;
  r.get_array(&h, 1);
  if (CUresult e = r.finish()) return e;
  *handle = h;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                        CUmemGenericAllocationHandle handle) {
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuMemGetAllocationPropertiesFromHandle);
  w.put(static_cast<uint64_t>(handle));
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  r.get_array(prop, 1);
  return r.finish();
}

}  // extern "C"

// Shareable handles (POSIX file descriptors) of physical memory, for another process of the
// same tenant on the same server (server/shareable_calls.cc). The server answers an export
// with an id and a secret; the descriptor the app gets is a sealed memfd holding them, which
// it may pass to another process (SCM_RIGHTS, inheritance) as it would pass the driver's. The
// importer's client reads them back and the server gives its session a handle of the same
// memory. A descriptor of anything else is refused.
namespace {
constexpr char kShareableMagic[16] = "cuwire-shareabl";
struct ShareableContents {
  char magic[16];
  uint64_t id;
  uint8_t secret[32];
};
}  // namespace

extern "C" {

CUresult CUDAAPI cuMemExportToShareableHandle(void* shareableHandle, CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType,
                                              unsigned long long flags) {
  if (!shareableHandle) return CUDA_ERROR_INVALID_VALUE;
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return handleType == CU_MEM_HANDLE_TYPE_FABRIC || handleType == CU_MEM_HANDLE_TYPE_WIN32 ||
                   handleType == CU_MEM_HANDLE_TYPE_WIN32_KMT
               ? CUDA_ERROR_NOT_SUPPORTED
               : CUDA_ERROR_INVALID_VALUE;
  }
  ArgWriter w(CallId::k_cuMemExportToShareableHandle);
  w.put(static_cast<uint64_t>(handle));
  w.put(static_cast<uint64_t>(flags));
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  ShareableContents c{};
  std::memcpy(c.magic, kShareableMagic, sizeof c.magic);
  r.get_array(&c.id, 1);
  r.get_array(c.secret, sizeof c.secret);
  if (CUresult e = r.finish()) return e;
  const int fd = memfd_create("cuwire-shareable-memory", MFD_ALLOW_SEALING);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (pwrite(fd, &c, sizeof c, 0) != static_cast<ssize_t>(sizeof c) ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    close(fd);
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  *static_cast<int*>(shareableHandle) = fd;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                                CUmemAllocationHandleType shHandleType) {
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return shHandleType == CU_MEM_HANDLE_TYPE_FABRIC || shHandleType == CU_MEM_HANDLE_TYPE_WIN32 ||
                   shHandleType == CU_MEM_HANDLE_TYPE_WIN32_KMT
               ? CUDA_ERROR_NOT_SUPPORTED
               : CUDA_ERROR_INVALID_VALUE;
  }
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(osHandle));
  struct stat st{};
  ShareableContents c{};
  if (fd < 0 || fstat(fd, &st) != 0 || st.st_size != static_cast<off_t>(sizeof c) ||
      pread(fd, &c, sizeof c, 0) != static_cast<ssize_t>(sizeof c) ||
      std::memcmp(c.magic, kShareableMagic, sizeof c.magic) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ArgWriter w(CallId::k_cuMemImportFromShareableHandle);
  w.put(c.id);
  std::array<uint8_t, sizeof c.secret> secret;
  std::memcpy(secret.data(), c.secret, secret.size());
  w.put(secret);
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  uint64_t h = 0;
  r.get_array(&h, 1);
  if (CUresult e = r.finish()) return e;
  *handle = h;
  return CUDA_SUCCESS;
}

}  // extern "C"
