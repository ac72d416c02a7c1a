// Interprocess memory and event handles, client side: the server makes and checks them
// (server/calls/ipc.cc);
// the client keeps an opened range among its device allocations, so that copies and launches
// treat its pointers as device memory, until it is closed.

#include <cuda.h>

#include <cstdint>

#include "client-lib/core/client_call.h"
#include "client-lib/core/id_set.h"

namespace cuwire::client {
namespace {

IdSet& ipc_events() {
  static IdSet* e = new IdSet();  // leaked: used by atexit handlers too
  return *e;
}

uint64_t id_of(CUevent e) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(e)); }

bool is_ipc_event(CUevent e) { return ipc_events().contains(id_of(e)); }

void note_ipc_event(CUevent e) { ipc_events().insert(id_of(e)); }

CUresult record_now(CallId id, CUevent event, CUstream stream, const unsigned* flags) {
  ArgWriter w(id);
  w.put_handle(event);
  w.put_handle(stream);
  if (flags) w.put(*flags);
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  return r.finish();
}

}  // namespace

void reset_ipc_state() { ipc_events().clear(); }

CUresult take_opened_memory(OutReader& r, CUdeviceptr* out) {
  uint64_t p = 0, size = 0;
  r.get_array(&p, 1);
  r.get_array(&size, 1);
  if (CUresult e = r.finish()) return e;
  note_alloc(p, size);
  *out = p;
  return CUDA_SUCCESS;
}

void on_event_create(CUevent* event, unsigned int flags) {
  if (flags & CU_EVENT_INTERPROCESS) note_ipc_event(*event);
}

CUresult check_event_record(CUevent event, CUstream stream, bool* handled) {
  if (!is_ipc_event(event)) return CUDA_SUCCESS;
  *handled = true;
  const CUresult rc = record_now(CallId::k_cuEventRecord, event, stream, nullptr);
  if (rc == CUDA_SUCCESS) on_event_record(event, stream);
  return rc;
}

CUresult check_event_record_with_flags(CUevent event, CUstream stream, unsigned int flags,
                                       bool* handled) {
  if (!is_ipc_event(event)) return CUDA_SUCCESS;
  *handled = true;
  const CUresult rc = record_now(CallId::k_cuEventRecordWithFlags, event, stream, &flags);
  if (rc == CUDA_SUCCESS) on_event_record_with_flags(event, stream, flags);
  return rc;
}

}  // namespace cuwire::client

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
  return take_opened_memory(r, pdptr);
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr) {
  ArgWriter w(CallId::k_cuIpcCloseMemHandle);
  w.put(static_cast<uint64_t>(dptr));
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  uint32_t left = 0;
  r.get_array(&left, 1);
  if (CUresult e = r.finish()) return e;
  if (left == 0) note_free(dptr);  // opened more than once: mapped until the last close
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
  if (CUresult e = r.finish()) return e;
  note_ipc_event(*phEvent);
  return CUDA_SUCCESS;
}

}  // extern "C"
