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

// The record of an interprocess event (flags null: cuEventRecord, else cuEventRecordWithFlags),
// made with a round trip, then noted as the stub would note it; *handled is set. Nothing for
// other events.
CUresult record_ipc_event(CUevent event, CUstream stream, const unsigned* flags, bool* handled) {
  if (!is_ipc_event(event)) return CUDA_SUCCESS;
  *handled = true;
  ArgWriter w(flags ? CallId::k_cuEventRecordWithFlags : CallId::k_cuEventRecord);
  w.put_handle(event);
  w.put_handle(stream);
  if (flags) w.put(*flags);
  const CUresult rc = w.call_result();
  if (rc != CUDA_SUCCESS) return rc;
  if (flags) {
    on_event_record_with_flags(event, stream, *flags);
  } else {
    on_event_record(event, stream);
  }
  return CUDA_SUCCESS;
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
  return record_ipc_event(event, stream, nullptr, handled);
}

CUresult check_event_record_with_flags(CUevent event, CUstream stream, unsigned int flags,
                                       bool* handled) {
  return record_ipc_event(event, stream, &flags, handled);
}

}  // namespace cuwire::client

using namespace cuwire;
using namespace cuwire::client;

extern "C" {

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  if (!pHandle) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuIpcGetMemHandle);
  w.put(static_cast<uint64_t>(dptr));
  return w.call_for(pHandle);
}

CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle,
                                       unsigned int Flags) {
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
  uint32_t left = 0;
  if (CUresult e = w.call_for(&left)) return e;
  if (left == 0) note_free(dptr);  // opened more than once: mapped until the last close
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle* pHandle, CUevent event) {
  if (!pHandle) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuIpcGetEventHandle);
  w.put_handle(event);
  return w.call_for(pHandle);
}

CUresult CUDAAPI cuIpcOpenEventHandle(CUevent* phEvent, CUipcEventHandle handle) {
  if (!phEvent) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuIpcOpenEventHandle);
  w.put(handle);
  if (CUresult e = w.call_for_handle(phEvent)) return e;
  note_ipc_event(*phEvent);
  return CUDA_SUCCESS;
}

}  // extern "C"
