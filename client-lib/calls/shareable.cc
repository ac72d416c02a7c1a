// Shareable handles (POSIX file descriptors) of physical memory and of memory pools, and the
// export data of pool allocations, for another process of the same tenant on the same server
// (server/calls/shareable.cc, server/calls/ipc.cc). The server answers an export of a handle
// or a pool with an id and a secret; the descriptor the app gets is a sealed memfd holding
// them, which it may pass to another process (SCM_RIGHTS, inheritance) as it would pass the
// driver's. The importer's client reads them back and the server gives its session a handle of
// the same memory or pool. A descriptor of anything else is refused. A pool allocation's export
// data is the backend's own 64 bytes, which the server checks when they come back.

#include <cuda.h>

#include <array>
#include <cstdint>
#include <cstring>

#include "client-lib/core/client_call.h"
#include "protocol/sealed_fd.h"

using namespace cuwire;
using namespace cuwire::client;

namespace {

// What a descriptor holds. The magic tells a pool's from a physical allocation's.
struct Token {
  char magic[16];
  uint64_t id;
  uint8_t secret[32];
};
constexpr char kMemoryMagic[16] = "cuwire-shareabl";
constexpr char kPoolMagic[16] = "cuwire-mempool1";

// Only POSIX descriptors are built; the other types CUDA names are not supported here, and
// anything else is no type at all.
CUresult check_type(CUmemAllocationHandleType type) {
  if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_SUCCESS;
  return type == CU_MEM_HANDLE_TYPE_FABRIC || type == CU_MEM_HANDLE_TYPE_WIN32 ||
                 type == CU_MEM_HANDLE_TYPE_WIN32_KMT
             ? CUDA_ERROR_NOT_SUPPORTED
             : CUDA_ERROR_INVALID_VALUE;
}

// Sends an export call `w` and puts the token its answer makes into *out, a descriptor.
CUresult export_token(ArgWriter& w, const char (&magic)[16], void* out) {
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  Token t{};
  std::memcpy(t.magic, magic, sizeof t.magic);
  r.get_array(&t.id, 1);
  r.get_array(t.secret, sizeof t.secret);
  if (CUresult e = r.finish()) return e;
  const int fd = make_sealed_fd("cuwire-shareable", &t, sizeof t, true);
  if (fd < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  *static_cast<int*>(out) = fd;
  return CUDA_SUCCESS;
}

// Reads the token of descriptor `os_handle` into an import call `w`.
CUresult put_token(void* os_handle, const char (&magic)[16], ArgWriter& w) {
  Token t{};
  if (!read_sealed_fd(static_cast<int>(reinterpret_cast<intptr_t>(os_handle)), &t, sizeof t) ||
      std::memcmp(t.magic, magic, sizeof t.magic) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  w.put(t.id);
  std::array<uint8_t, sizeof t.secret> secret;
  std::memcpy(secret.data(), t.secret, secret.size());
  w.put(secret);
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuMemExportToShareableHandle(void* shareableHandle,
                                              CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType,
                                              unsigned long long flags) {
  if (!shareableHandle) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = check_type(handleType)) return e;
  ArgWriter w(CallId::k_cuMemExportToShareableHandle);
  w.put(static_cast<uint64_t>(handle));
  w.put(static_cast<uint64_t>(flags));
  return export_token(w, kMemoryMagic, shareableHandle);
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle,
                                                void* osHandle,
                                                CUmemAllocationHandleType shHandleType) {
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = check_type(shHandleType)) return e;
  ArgWriter w(CallId::k_cuMemImportFromShareableHandle);
  if (CUresult e = put_token(osHandle, kMemoryMagic, w)) return e;
  return w.call_for<uint64_t>(handle);
}

CUresult CUDAAPI cuMemPoolExportToShareableHandle(void* handle_out, CUmemoryPool pool,
                                                  CUmemAllocationHandleType handleType,
                                                  unsigned long long flags) {
  if (!handle_out || !pool || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = check_type(handleType)) return e;
  ArgWriter w(CallId::k_cuMemPoolExportToShareableHandle);
  w.put_handle(pool);
  return export_token(w, kPoolMagic, handle_out);
}

CUresult CUDAAPI cuMemPoolImportFromShareableHandle(CUmemoryPool* pool_out, void* handle,
                                                    CUmemAllocationHandleType handleType,
                                                    unsigned long long flags) {
  if (!pool_out || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = check_type(handleType)) return e;
  ArgWriter w(CallId::k_cuMemPoolImportFromShareableHandle);
  if (CUresult e = put_token(handle, kPoolMagic, w)) return e;
  return w.call_for_handle(pool_out);
}

CUresult CUDAAPI cuMemPoolExportPointer(CUmemPoolPtrExportData* shareData_out, CUdeviceptr ptr) {
  if (!shareData_out) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuMemPoolExportPointer);
  w.put(static_cast<uint64_t>(ptr));
  return w.call_for(shareData_out);
}

// The imported allocation is device memory of this process until it frees it (cuMemFree or
// cuMemFreeAsync, which end the import, never the exporter's allocation). A process imports a
// pointer once.
CUresult CUDAAPI cuMemPoolImportPointer(CUdeviceptr* ptr_out, CUmemoryPool pool,
                                        CUmemPoolPtrExportData* shareData) {
  if (!ptr_out || !pool || !shareData) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuMemPoolImportPointer);
  w.put_handle(pool);
  w.put(*shareData);
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  return take_opened_memory(r, ptr_out);
}

}  // extern "C"
