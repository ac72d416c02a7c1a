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
#include "host_memory.h"

namespace cuwire::client {
namespace {

// Device buffers that stand in for pageable host memory in a capture; given back with the last
// graph that uses them.
struct StagingBuffers {
  std::mutex mu;
  std::vector<CUdeviceptr> blocks;  // guarded by mu
  StagingBuffers() = default;
  StagingBuffers(const StagingBuffers&) = delete;
  StagingBuffers& operator=(const StagingBuffers&) = delete;
  ~StagingBuffers() {
    for (CUdeviceptr p : blocks) cuMemFree_v2(p);
  }
};

struct Capture {
  uint64_t id;
  bool ended = false;
  // Copies from or to host memory the capture could not hold: each went to a staging buffer,
  // and the graph copies the host's bytes in before it runs and the results out after.
  // Host functions enqueued in the capture run after it too, in order with those copies.
  std::mutex mu;
  std::vector<CUDA_MEMCPY3D> before;  // guarded by mu
  std::vector<CapturedAfter> after;   // guarded by mu
  std::shared_ptr<StagingBuffers> staging = std::make_shared<StagingBuffers>();
  // cuStreamBeginCaptureToGraph: the built graph the captured work joins, after these nodes.
  CUgraph to_graph = nullptr;                // guarded by mu
  std::vector<CUgraphNode> to_deps;          // guarded by mu
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
  auto c = std::make_shared<Capture>();
  c->id = t.next_id++;
  t.streams[key(stream)] = std::move(c);
}

namespace {

// The stream's capture, which ends: every stream in it leaves it.
std::shared_ptr<Capture> end_capture(CUstream stream) {
  CaptureTable& t = table();
  std::lock_guard lock(t.mu);
  auto it = t.streams.find(key(stream));
  if (it == t.streams.end()) return nullptr;
  std::shared_ptr<Capture> c = it->second;
  c->ended = true;
  for (auto s = t.streams.begin(); s != t.streams.end();) {
    s = s->second == c ? t.streams.erase(s) : std::next(s);
  }
  return c;
}

}  // namespace

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

namespace {

// A device buffer for a captured copy of `n` host bytes at `host`, with the copy between it and
// the host that the graph makes at each launch: before the captured work (the host's bytes in)
// or after it (the results out).
CUresult stage(Capture& c, const void* host, size_t n, bool to_device, CUdeviceptr* out) {
  CUdeviceptr buf = 0;
  if (CUresult e = cuMemAlloc_v2(&buf, n)) return e;
  {
    std::lock_guard lock(c.staging->mu);
    c.staging->blocks.push_back(buf);
  }
  CUDA_MEMCPY3D copy{};
  copy.WidthInBytes = n;
  copy.Height = copy.Depth = 1;
  if (to_device) {
    copy.srcMemoryType = CU_MEMORYTYPE_HOST;
    copy.srcHost = host;
    copy.srcPitch = n;
    copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    copy.dstDevice = buf;
    copy.dstPitch = n;
  } else {
    copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    copy.srcDevice = buf;
    copy.srcPitch = n;
    copy.dstMemoryType = CU_MEMORYTYPE_HOST;
    copy.dstHost = const_cast<void*>(host);
    copy.dstPitch = n;
  }
  std::lock_guard lock(c.mu);
  if (to_device) {
    c.before.push_back(copy);
  } else {
    c.after.push_back(CapturedAfter{copy, {}});
  }
  *out = buf;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult check_host_copy_htod(CUdeviceptr dst, const void* src, size_t n, CUstream stream,
                              bool* handled) {
  std::shared_ptr<Capture> c = capture_of(stream);
  if (!c) {
    wait_host_calls(stream);  // one of them may write the source (host_calls.cc)
    return CUDA_SUCCESS;
  }
  if (n == 0) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  *handled = true;
  if (pinned_device_range(src, n)) {
    return cuMemcpyDtoDAsync_v2(dst, reinterpret_cast<CUdeviceptr>(src), n, stream);
  }
  if (!host_range_ok(src, n, HostAccess::kRead)) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr buf = 0;
  if (CUresult e = stage(*c, src, n, true, &buf)) return e;
  return cuMemcpyDtoDAsync_v2(dst, buf, n, stream);
}

CUresult check_host_copy_dtoh(void* dst, CUdeviceptr src, size_t n, CUstream stream,
                              bool* handled) {
  std::shared_ptr<Capture> c = capture_of(stream);
  if (!c || n == 0) return CUDA_SUCCESS;
  *handled = true;
  if (pinned_device_range(dst, n)) {
    return cuMemcpyDtoDAsync_v2(reinterpret_cast<CUdeviceptr>(dst), src, n, stream);
  }
  if (!host_range_ok(dst, n, HostAccess::kReadWrite)) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr buf = 0;
  if (CUresult e = stage(*c, dst, n, false, &buf)) return e;
  return cuMemcpyDtoDAsync_v2(buf, src, n, stream);
}

bool capture_host_function(CUstream stream, CUhostFn fn, void* data) {
  std::shared_ptr<Capture> c = capture_of(stream);
  if (!c) return false;
  std::lock_guard lock(c->mu);
  c->after.push_back(CapturedAfter{{}, CUDA_HOST_NODE_PARAMS{fn, data}});
  return true;
}

CUresult check_host_copy_htoa(CUarray, size_t, const void*, size_t, CUstream stream, bool*) {
  wait_host_calls(stream);
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

// The server ends the capture and returns its graph. A capture that staged host copies
// (check_host_copy_htod / _dtoh) comes back as a client graph around it, which moves the host
// bytes at each launch.
// A capture into a built graph (cuStreamBeginCaptureToGraph) is a capture on the server like any
// other; at its end, the captured graph joins the built one as a child-graph node after the
// dependencies it began with, and the built graph is the capture's result.
CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                             const CUgraphNode* dependencies,
                                             const CUgraphEdgeData* dependencyData,
                                             size_t numDependencies, CUstreamCaptureMode mode) {
  if (!hGraph || (numDependencies && !dependencies)) return CUDA_ERROR_INVALID_VALUE;
  if (dependencyData) {
    for (size_t i = 0; i < numDependencies; ++i) {
      if (dependencyData[i].from_port || dependencyData[i].to_port || dependencyData[i].type) {
        return client::unsupported("cuStreamBeginCaptureToGraph (edges with ports)");
      }
    }
  }
  // Only a graph built here can take the captured work; a captured graph cannot.
  if (!client::is_built_graph(hGraph)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = cuStreamBeginCapture_v2(hStream, mode)) return e;
  std::shared_ptr<client::Capture> c = client::capture_of(hStream);
  if (c) {
    std::lock_guard lock(c->mu);
    c->to_graph = hGraph;
    c->to_deps.assign(dependencies, dependencies + numDependencies);
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  std::shared_ptr<client::Capture> pending = client::capture_of(hStream);
  CUgraph target = nullptr;
  std::vector<CUgraphNode> deps;
  if (pending) {
    std::lock_guard lock(pending->mu);
    target = pending->to_graph;
    deps = pending->to_deps;
  }
  if (!phGraph && !target) return CUDA_ERROR_INVALID_VALUE;
  CUgraph captured = nullptr;
  client::ArgWriter w(CallId::k_cuStreamEndCapture);
  w.put_handle(hStream);
  client::OutReader r;
  const CUresult rc = w.call(&r);
  if (rc == CUDA_SUCCESS) r.get_handles(&captured, 1);
  const CUresult read = rc == CUDA_SUCCESS ? r.finish() : rc;
  std::shared_ptr<client::Capture> c = read == CUDA_SUCCESS || rc == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                                           ? client::end_capture(hStream)
                                           : nullptr;
  if (read != CUDA_SUCCESS) return read;
  std::vector<CUDA_MEMCPY3D> before;
  std::vector<client::CapturedAfter> after;
  if (c) {
    std::lock_guard lock(c->mu);
    before.swap(c->before);
    after.swap(c->after);
  }
  if (!before.empty() || !after.empty()) {
    const uint64_t server_graph = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(captured));
    if (CUresult e = client::wrap_captured_graph(server_graph, before, after, c->staging, &captured)) {
      return e;
    }
  }
  if (!target) {
    *phGraph = captured;
    return CUDA_SUCCESS;
  }
  CUgraphNode node = nullptr;
  const CUresult added =
      cuGraphAddChildGraphNode(&node, target, deps.data(), deps.size(), captured);
  cuGraphDestroy(captured);  // the node holds its own copy, or the server's instantiation of it
  if (added != CUDA_SUCCESS) return added;
  if (phGraph) *phGraph = target;
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

}  // extern "C"
