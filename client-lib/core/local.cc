// Driver functions answered on the client without a round trip.

#include <cuda.h>

#include <algorithm>
#include <cstring>

#include "client-lib/core/client_state.h"
#include "client-lib/core/connection.h"
#include "protocol/error_table.h"

namespace {

// cuGetErrorName and cuGetErrorString: the `field` of `error`'s entry in the error table.
CUresult error_text(CUresult error, const char* cuwire::ErrorInfo::*field, const char** pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  auto* end = cuwire::kErrorTable + cuwire::kErrorTableSize;
  auto* it = std::lower_bound(cuwire::kErrorTable, end, static_cast<int>(error),
                              [](const cuwire::ErrorInfo& e, int c) { return e.code < c; });
  if (it == end || it->code != static_cast<int>(error)) {
    *pStr = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pStr = (*it).*field;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

// Marks this library as cuwire's, so that gpu-server never loads it as the NVIDIA driver.
extern const char cuwire_client_library[];
const char cuwire_client_library[] = "cuwire";

// For a gpu-server relaying through this library (its cuda backend's driver): whether the
// connection to the upstream server is up (CUDA_SUCCESS, also before the first call) or the
// error every call now returns; every call waiting for its answer, so that an error of a
// fire-and-forget call goes to the session that made it, not to whichever synchronises next;
// and starting over once the connection failed, so that the next call connects afresh. The
// relay calls cuwire_client_reset only while no other call is under way.
CUresult cuwire_client_status() { return cuwire::client::Connection::get().status(); }

void cuwire_client_answer_every_call(int on) { cuwire::client::set_answer_every_call(on != 0); }

// For a relay: an upstream session of its own for each of its sessions (Connection::
// make_session). open makes one (it connects on its first call); bind makes it the calling
// thread's (null: the process-wide connection again); close ends it, and its upstream session
// with it, once none of its calls is under way.
void* cuwire_client_session_open() {
  using cuwire::client::Connection;
  try {
    auto c = Connection::make_session();
    auto* handle = new std::shared_ptr<Connection>(std::move(c));
    return handle;
  } catch (...) {
    return nullptr;
  }
}

void cuwire_client_session_bind(void* session) {
  using cuwire::client::Connection;
  Connection::bind(session ? static_cast<std::shared_ptr<Connection>*>(session)->get() : nullptr);
}

// Whether the upstream server of the calling thread's connection still answers a fresh
// connection: 1 when it does (only this session was lost), 0 when it is gone.
int cuwire_client_upstream_answers() {
  return cuwire::client::Connection::get().server_still_answers() ? 1 : 0;
}

void cuwire_client_session_close(void* session) {
  using namespace cuwire::client;
  if (!session) return;
  auto* handle = static_cast<std::shared_ptr<Connection>*>(session);
  Connection::bind(handle->get());
  reset_host_calls();  // its host-call connection ends, and its thread
  Connection::bind(nullptr);
  (*handle)->close();
  delete handle;
}

void cuwire_client_reset() {
  using namespace cuwire::client;
  reset_client_state();
  reset_capture_state();
  reset_graph_state();
  reset_host_calls();
  reset_ipc_state();
  reset_vmm_state();
  reset_device_attributes();
  Connection::get().reset();
}

CUresult CUDAAPI cuDriverGetVersion(int* driverVersion) {
  if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
  // The API version this library implements: the cuda.h it was built against.
  *driverVersion = CUDA_VERSION;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char** pStr) {
  return error_text(error, &cuwire::ErrorInfo::name, pStr);
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char** pStr) {
  return error_text(error, &cuwire::ErrorInfo::message, pStr);
}

// Profiler markers mean nothing remotely.
CUresult CUDAAPI cuProfilerStart(void) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuProfilerStop(void) { return CUDA_SUCCESS; }

}  // extern "C"
