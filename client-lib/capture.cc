// Stream capture and graphs, client side. The server records what a capturing stream is given
// and replays it at cuGraphLaunch; the client only mirrors which streams capture (begun here,
// or joined by waiting on an event recorded in a capturing stream), so the capture queries are
// answered without a round trip.

#include <cuda.h>

#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "client_call.h"
#include "client_state.h"

namespace cuwire::client {
namespace {

struct Capture {
  uint64_t id;
  bool ended = false;
};

// The per-thread default stream is a different stream in each thread.
using StreamKey = std::pair<uintptr_t, std::thread::id>;
StreamKey key(CUstream s) {
  return {reinterpret_cast<uintptr_t>(s),
          s == CU_STREAM_PER_THREAD ? std::this_thread::get_id() : std::thread::id()};
}

struct CaptureTable {
  std::mutex mu;
  uint64_t next_id = 1;
  std::map<StreamKey, std::shared_ptr<Capture>> streams;     // guarded by mu
  std::map<uintptr_t, std::weak_ptr<Capture>> events;        // guarded by mu
};
CaptureTable& table() {
  static CaptureTable* t = new CaptureTable();  // leaked: used by atexit handlers too
  return *t;
}

std::shared_ptr<Capture> capture_of(CUstream s) {
  CaptureTable& t = table();
  std::lock_guard lock(t.mu);
  auto it = t.streams.find(key(s));
  return it == t.streams.end() ? nullptr : it->second;
}

thread_local CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

}  // namespace

void reset_capture_state() {
  CaptureTable& t = table();
  std::lock_guard lock(t.mu);
  t.streams.clear();
  t.events.clear();
}

void on_capture_begin(CUstream stream, CUstreamCaptureMode) {
  CaptureTable& t = table();
  std::lock_guard lock(t.mu);
  t.streams[key(stream)] = std::make_shared<Capture>(Capture{t.next_id++});
}

void on_capture_end(CUstream stream, CUgraph*) {
  CaptureTable& t = table();
  std::lock_guard lock(t.mu);
  auto it = t.streams.find(key(stream));
  if (it == t.streams.end()) return;
  std::shared_ptr<Capture> c = it->second;
  c->ended = true;
  for (auto s = t.streams.begin(); s != t.streams.end();) {
    s = s->second == c ? t.streams.erase(s) : std::next(s);
  }
}

void on_event_record(CUevent event, CUstream stream) {
  CaptureTable& t = table();
  std::lock_guard lock(t.mu);
  auto it = t.streams.find(key(stream));
  if (it != t.streams.end()) {
    t.events[reinterpret_cast<uintptr_t>(event)] = it->second;
  } else {
    t.events.erase(reinterpret_cast<uintptr_t>(event));
  }
}

void on_event_record_with_flags(CUevent event, CUstream stream, unsigned int) {
  on_event_record(event, stream);
}

void on_stream_wait_event(CUstream stream, CUevent event, unsigned int) {
  CaptureTable& t = table();
  std::lock_guard lock(t.mu);
  auto it = t.events.find(reinterpret_cast<uintptr_t>(event));
  if (it == t.events.end()) return;
  std::shared_ptr<Capture> c = it->second.lock();
  if (c && !c->ended) t.streams[key(stream)] = std::move(c);  // the stream joins the capture
}

CUresult check_host_copy(CUstream stream) {
  return capture_of(stream) ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult check_host_copy_htod(CUdeviceptr dst, const void* src, size_t n, CUstream stream,
                              bool* handled) {
  if (!capture_of(stream)) return CUDA_SUCCESS;
  if (n == 0 || !pinned_device_range(src, n)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  *handled = true;
  return cuMemcpyDtoDAsync_v2(dst, reinterpret_cast<CUdeviceptr>(src), n, stream);
}

CUresult check_host_copy_dtoh(void* dst, CUdeviceptr src, size_t n, CUstream stream,
                              bool* handled) {
  if (!capture_of(stream)) return CUDA_SUCCESS;
  if (n == 0 || !pinned_device_range(dst, n)) return CUDA_SUCCESS;  // the server refuses it
  *handled = true;
  return cuMemcpyDtoDAsync_v2(reinterpret_cast<CUdeviceptr>(dst), src, n, stream);
}

CUresult check_host_copy_htoa(CUarray, size_t, const void*, size_t, CUstream stream, bool*) {
  return check_host_copy(stream);
}

}  // namespace cuwire::client

using namespace cuwire;

extern "C" {

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  if (!captureStatus) return CUDA_ERROR_INVALID_VALUE;
  *captureStatus = client::capture_of(hStream) ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                                               : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

// The graph under construction and its open dependencies live on the server; they are
// reported as none.
CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                           cuuint64_t* id_out, CUgraph* graph_out,
                                           const CUgraphNode** dependencies_out,
                                           const CUgraphEdgeData** edgeData_out,
                                           size_t* numDependencies_out) {
  if (!captureStatus_out) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<client::Capture> c = client::capture_of(hStream);
  *captureStatus_out = c ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  if (id_out) *id_out = c ? c->id : 0;
  if (graph_out) *graph_out = nullptr;
  if (dependencies_out) *dependencies_out = nullptr;
  if (edgeData_out) *edgeData_out = nullptr;
  if (numDependencies_out) *numDependencies_out = 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (!mode || *mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, client::t_capture_mode);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec* phGraphExec, CUgraph hGraph,
                                              CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  const bool upload = params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
  CUresult rc = cuGraphInstantiateWithFlags(phGraphExec, hGraph,
                                            params->flags & ~cuuint64_t{CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD});
  if (rc == CUDA_SUCCESS && upload) rc = cuGraphUpload(*phGraphExec, params->hUploadStream);
  params->hErrNode_out = nullptr;
  params->result_out = rc == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  return rc;
}

CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode* nodes, size_t* numNodes) {
  if (!numNodes) return CUDA_ERROR_INVALID_VALUE;
  if (nodes) return client::unsupported("cuGraphGetNodes (node handles)");
  client::ArgWriter w(CallId::k_cuGraphGetNodes);
  w.put_handle(hGraph);
  client::OutReader r;
  if (CUresult e = w.call(&r)) return e;
  uint64_t n = 0;
  r.get_array(&n, 1);
  if (CUresult e = r.finish()) return e;
  *numNodes = n;
  return CUDA_SUCCESS;
}

}  // extern "C"
