// Interprocess memory and event handles, client side: the server makes and checks them
// (server/ipc_calls.cc);
// the client keeps an opened range among its device allocations, so that copies and launches
// treat its pointers as device memory, until it is closed.

#include <cuda.h>

#include <cstdint>

#include "client_call.h"

using namespace cuwire;
using namespace cuwire::client;

extern "C" {

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  if (!pHandle) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuIpcGetMemHandle);
  w.put(static_cast<uint64_t>(dptr));
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  r.get_array(pHandle, 1);
  return r.finish();
}

CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  if (!pdptr) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuIpcOpenMemHandle_v2);
  w.put(handle);
  w.put(static_cast<uint32_t>(Flags));
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  uint64_t p = 0, size = 0;
  r.get_array(&p, 1);
  r.get_array(&size, 1);
  if (CUresult e = r.finish()) return e;
  note_alloc(p, size);
  *pdptr = p;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr) {
  ArgWriter w(CallId::k_cuIpcCloseMemHandle);
  w.put(static_cast<uint64_t>(dptr));
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  if (CUresult e = r.finish()) return e;
  note_free(dptr);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle* pHandle, CUevent event) {
  if (!pHandle) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuIpcGetEventHandle);
  w.put_handle(event);
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  r.get_array(pHandle, 1);
  return r.finish();
}

CUresult CUDAAPI cuIpcOpenEventHandle(CUevent* phEvent, CUipcEventHandle handle) {
  if (!phEvent) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuIpcOpenEventHandle);
  w.put(handle);
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  r.get_handles(phEvent, 1);
  return r.finish();
}

}  // extern "C"
