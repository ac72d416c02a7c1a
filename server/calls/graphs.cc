// Graphs: stream capture, instantiating, launching and updating captured graphs, conditional
// handles, and what a session may read of a captured graph (its nodes, its DOT text).

#include <cuda.h>

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/backend/backend.h"
#include "server/session/dispatch.h"

namespace cuwire::server {

// cuStreamBeginCapture_v2 (generated wire format: u64 stream id, u32 mode). The mode's rule is
// about the app's threads (which calls a thread may make while a capture is open), and the
// client, which sees them, applies it (check_unsafe_in_capture in client-lib). On the server
// every call of a session comes from one thread: the driver would take that thread for the
// capturing one and refuse the session's calls that the app made, legally, from other threads
// or through the client's own staging; in global mode it would refuse other sessions' calls
// too. So the backend captures in relaxed mode; the rules about streams (no synchronisation of
// a capturing stream, no implicit dependency through the legacy stream) are the driver's.
CUresult custom_cuStreamBeginCapture_v2(SessionContext& cx, ArgReader& in, ReplyWriter&) {
  uint64_t stream_id = 0;
  CUstreamCaptureMode mode{};
  if (!in.get(&stream_id) || !in.get(&mode) || !in.at_end()) return in.malformed();
  CUstream stream = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kStream, stream_id, &stream)) return e;
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return cx.backend().cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_RELAXED);
}

// cuStreamEndCapture (generated wire format: u64 stream id -> u64 graph id): the capture's
// graph-owned allocations become the graph's (SessionContext::note_stream_alloc).
CUresult custom_cuStreamEndCapture(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t stream_id = 0;
  CUstream stream = nullptr;
  if (CUresult e = in.get_only_handle(cx, HandleKind::kStream, false, &stream_id, &stream)) {
    return e;
  }
  if (CUresult e = cx.check_room(HandleKind::kGraph, 1)) return e;
  const uint64_t capture = cx.capture_id(stream);
  CUgraph graph = nullptr;
  const CUresult rc = cx.backend().cuStreamEndCapture(stream, &graph);
  const uint64_t graph_id = rc == CUDA_SUCCESS ? cx.export_handle(HandleKind::kGraph, graph) : 0;
  // The capture is over, made or not (an invalidated capture ends too).
  if (capture) cx.end_capture_allocs(capture, graph_id);
  if (rc != CUDA_SUCCESS) return rc;
  out.put(graph_id);
  return CUDA_SUCCESS;
}

// cuGraphInstantiateWithFlags (generated wire format: u64 graph id, u64 flags -> u64 exec id).
CUresult custom_cuGraphInstantiateWithFlags(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t graph_id = 0;
  unsigned long long flags = 0;
  if (!in.get(&graph_id) || !in.get(&flags) || !in.at_end()) return in.malformed();
  CUgraph graph = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kGraph, graph_id, &graph)) return e;
  if (CUresult e = cx.check_room(HandleKind::kGraphExec, 1)) return e;
  CUgraphExec exec = nullptr;
  if (CUresult e = cx.backend().cuGraphInstantiateWithFlags(&exec, graph, flags)) return e;
  const uint64_t exec_id = cx.export_handle(HandleKind::kGraphExec, exec);
  cx.instantiate_allocs(graph_id, exec_id, flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
  out.put(exec_id);
  return CUDA_SUCCESS;
}

// cuGraphLaunch (generated wire format: u64 exec id, u64 stream id): graph-owned memory the
// app freed since the last launch is the session's again (and charged) before the launch.
CUresult custom_cuGraphLaunch(SessionContext& cx, ArgReader& in, ReplyWriter&) {
  uint64_t exec_id = 0, stream_id = 0;
  if (!in.get(&exec_id) || !in.get(&stream_id) || !in.at_end()) return in.malformed();
  CUgraphExec exec = nullptr;
  CUstream stream = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kGraphExec, exec_id, &exec)) return e;
  if (CUresult e = cx.lookup(HandleKind::kStream, stream_id, &stream)) return e;
  if (CUresult e = cx.revive_graph_allocs(exec_id)) return e;
  return cx.submit_work(stream, [&] { return cx.backend().cuGraphLaunch(exec, stream); });
}

// in: u64 exec id, u64 graph id (both captured graphs). out: u32 the update's result.
CUresult custom_cuGraphExecUpdate_v2(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t exec_id = 0, graph_id = 0;
  if (!in.get(&exec_id) || !in.get(&graph_id) || !in.at_end()) return in.malformed();
  CUgraphExec x = nullptr;
  CUgraph g = nullptr;
  if (CUresult e = cx.lookup_owned(HandleKind::kGraphExec, exec_id, &x)) return e;
  if (CUresult e = cx.lookup(HandleKind::kGraph, graph_id, &g)) return e;
  if (!x || !g) return CUDA_ERROR_INVALID_VALUE;
  CUgraphExecUpdateResultInfo info{};
  if (CUresult e = cx.backend().cuGraphExecUpdate_v2(x, g, &info)) return e;
  out.put(static_cast<uint32_t>(info.result));
  return CUDA_SUCCESS;
}

// Conditional handles of the client's graphs (client-lib/calls/graphs_nodes.cc). in: u32 default
// value, u32 flags. out: u64 the handle. The backend makes it without a graph (the sim: a 4-byte
// cell of device memory, sim_gpu.h; a real driver refuses a null graph), and the session may then
// copy to and from it, and free it, like an allocation of its own: the client sets and reads
// the value that way.
CUresult custom_cuGraphConditionalHandleCreate(SessionContext& cx, ArgReader& in,
                                               ReplyWriter& out) {
  uint32_t value = 0, flags = 0;
  if (!in.get(&value) || !in.get(&flags) || !in.at_end()) return in.malformed();
  CUgraphConditionalHandle h = 0;
  if (CUresult e =
          cx.backend().cuGraphConditionalHandleCreate(&h, nullptr, nullptr, value, flags)) {
    return e;
  }
  if (CUresult e = cx.on_alloc(static_cast<CUdeviceptr>(h), sizeof(uint32_t))) return e;
  out.put(static_cast<uint64_t>(h));
  return CUDA_SUCCESS;
}

// The largest captured graph whose shape a session gets: its reply (4 bytes a node, 8 an edge)
// stays well inside one message, beside what else a reply may carry (device printf text).
constexpr size_t kMaxShapeNodes = size_t{1} << 15;
constexpr size_t kMaxShapeEdges = size_t{1} << 16;

// cuGraphGetNodes of a captured graph. in: u64 graph id [, u32 1: the shape too]. out: u64
// node count [, then each node's u32 type, u64 edge count, and each edge as u32 indexes of
// its two nodes]. The backend's node handles name its own objects and never leave the server:
// the client makes handles of its own for the nodes (client-lib/calls/graphs.cc).
CUresult custom_cuGraphGetNodes(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t id = 0;
  uint32_t shape = 0;
  if (!in.get(&id)) return in.malformed();
  if (!in.at_end() && !in.get(&shape)) return in.malformed();
  if (!in.at_end() || shape > 1) return in.malformed();
  CUgraph g = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kGraph, id, &g)) return e;
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  Backend& api = cx.backend();
  size_t n = 0;
  if (CUresult e = api.cuGraphGetNodes(g, nullptr, &n)) return e;
  if (!shape) {
    out.put(static_cast<uint64_t>(n));
    return CUDA_SUCCESS;
  }
  if (n > kMaxShapeNodes) return CUDA_ERROR_NOT_SUPPORTED;
  std::vector<CUgraphNode> nodes(n);
  size_t got = n;
  if (CUresult e = api.cuGraphGetNodes(g, nodes.data(), &got)) return e;
  if (got != n) return CUDA_ERROR_UNKNOWN;  // the graph changed under the call
  std::unordered_map<CUgraphNode, uint32_t> index;
  std::vector<uint32_t> types(n);
  for (size_t i = 0; i < n; ++i) {
    CUgraphNodeType t{};
    if (CUresult e = api.cuGraphNodeGetType(nodes[i], &t)) return e;
    types[i] = static_cast<uint32_t>(t);
    index.emplace(nodes[i], static_cast<uint32_t>(i));
  }
  size_t ne = 0;
  if (CUresult e = api.cuGraphGetEdges_v2(g, nullptr, nullptr, nullptr, &ne)) return e;
  if (ne > kMaxShapeEdges) return CUDA_ERROR_NOT_SUPPORTED;
  std::vector<CUgraphNode> from(ne), to(ne);
  size_t got_edges = ne;
  if (ne) {
    if (CUresult e = api.cuGraphGetEdges_v2(g, from.data(), to.data(), nullptr, &got_edges)) {
      return e;
    }
  }
  if (got_edges != ne) return CUDA_ERROR_UNKNOWN;  // the graph changed under the call
  std::vector<uint32_t> edges;
  edges.reserve(2 * ne);
  for (size_t i = 0; i < ne; ++i) {
    auto f = index.find(from[i]), d = index.find(to[i]);
    if (f == index.end() || d == index.end()) return CUDA_ERROR_UNKNOWN;
    edges.push_back(f->second);
    edges.push_back(d->second);
  }
  out.put(static_cast<uint64_t>(n));
  for (uint32_t t : types) out.put(t);
  out.put(static_cast<uint64_t>(ne));
  for (uint32_t e : edges) out.put(e);
  return CUDA_SUCCESS;
}

// The DOT flags whose output names only what the session may see: not node, function or event
// handles, nor the host pointers of copy and host nodes (the server's staging buffers and
// callbacks). VERBOSE stands for all of them.
constexpr unsigned kSafeDotFlags =
    CU_GRAPH_DEBUG_DOT_FLAGS_RUNTIME_TYPES | CU_GRAPH_DEBUG_DOT_FLAGS_MEMSET_NODE_PARAMS |
    CU_GRAPH_DEBUG_DOT_FLAGS_KERNEL_NODE_ATTRIBUTES |
    CU_GRAPH_DEBUG_DOT_FLAGS_MEM_ALLOC_NODE_PARAMS | CU_GRAPH_DEBUG_DOT_FLAGS_MEM_FREE_NODE_PARAMS |
    CU_GRAPH_DEBUG_DOT_FLAGS_EXTRA_TOPO_INFO;
// The largest DOT text a session gets back.
constexpr size_t kMaxDotBytes = size_t{64} << 20;

CUresult custom_cuGraphDebugDotPrint(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t id = 0, want = 0;
  uint32_t flags = 0;
  if (!in.get(&id) || !in.get(&flags) || !in.get(&want) || !in.at_end()) return in.malformed();
  CUgraph g = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kGraph, id, &g)) return e;
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  if (flags & CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE) flags = kSafeDotFlags;
  flags &= kSafeDotFlags;
  // A file only this process can read, gone once read.
  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/cuwire-dot-XXXXXX";
  const int fd = mkstemp(path.data());
  if (fd < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  close(fd);
  std::string text;
  CUresult rc = cx.backend().cuGraphDebugDotPrint(g, path.c_str(), flags);
  if (rc == CUDA_SUCCESS) {
    std::ifstream f(path, std::ios::binary);
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    if (!f.good() && !f.eof()) rc = CUDA_ERROR_OPERATING_SYSTEM;
  }
  unlink(path.c_str());
  if (rc != CUDA_SUCCESS) return rc;
  if (text.size() > kMaxDotBytes) return CUDA_ERROR_OUT_OF_MEMORY;
  if (want == 0) {
    out.put(static_cast<uint64_t>(text.size()));
    return CUDA_SUCCESS;
  }
  if (want != text.size() || !out.reserve_bulk_ok(want)) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(out.add_bulk(want), text.data(), want);
  return CUDA_SUCCESS;
}

}  // namespace cuwire::server
