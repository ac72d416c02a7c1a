// Stream capture and graphs. A capturing stream's operations are recorded as the closures the
// stream would have run (copies, memsets, launches, host functions), in capture order, each
// with its node type and a label (NodeInfo); a graph instantiated from them replays the
// closures on the launch stream. Streams join a capture by
// waiting on an event recorded in it. Copies from or to the caller's host memory cannot be
// replayed (the bytes are gone after the call) and are refused during capture, as CUDA refuses
// pageable copies. Graphs built node by node are not simulated (only cuGraphCreate's empty
// graph).

#include <algorithm>
#include <cstdio>
#include <string>

#include "protocol/wire_formats.h"
#include "server/backend/sim/sim_gpu.h"

namespace cuwire::server::sim {

std::shared_ptr<Capture> SimGpu::capture_of(Stream& s) {
  std::shared_lock lock(mu_);
  return s.capture;
}

void SimGpu::invalidate_capture(Stream& s) {
  if (std::shared_ptr<Capture> c = capture_of(s)) c->invalidated = true;
}

CUresult SimGpu::refuse_in_capture(Stream& s) {
  if (!capture_of(s)) return CUDA_SUCCESS;
  invalidate_capture(s);
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

CUresult SimGpu::cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode) {
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CtxPtr ctx;
  std::shared_ptr<Stream> s;
  if (CUresult e = stream_of(h, &ctx, &s)) return e;
  if (s->legacy()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // the legacy stream cannot
  std::unique_lock lock(mu_);
  if (s->capture) return CUDA_ERROR_ILLEGAL_STATE;
  auto c = std::make_shared<Capture>();
  c->id = next_capture_++;
  c->mode = mode;
  c->graph = std::make_shared<SimGraph>();
  c->origin = s.get();
  s->capture = std::move(c);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuStreamEndCapture(CUstream h, CUgraph* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  std::shared_ptr<Stream> s;
  if (CUresult e = stream_of(h, &ctx, &s)) return e;
  std::unique_lock lock(mu_);
  std::shared_ptr<Capture> c = s->capture;
  if (!c) return CUDA_ERROR_ILLEGAL_STATE;
  if (c->origin != s.get()) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  // Every stream in the capture leaves it.
  c->ended = true;
  auto leave = [&](const std::shared_ptr<Stream>& t) {
    if (t && t->capture == c) t->capture = nullptr;
  };
  for (auto& [raw, ctxp] : contexts_) {
    leave(ctxp->null_stream);
    for (const auto& t : ctxp->streams) leave(t);
    for (const auto& [tid, t] : ctxp->per_thread_streams) leave(t);
  }
  s->capture = nullptr;
  *out = nullptr;
  if (c->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  {
    std::lock_guard glock(c->graph->mu);
    for (const auto& [stream, ops] : c->stream_ops) {
      if (stream != c->origin && ops.captured > ops.joined)
        return CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
    }
  }
  SimGraph* key = c->graph.get();
  graphs_.emplace(key, std::move(c->graph));
  *out = reinterpret_cast<CUgraph>(key);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus* status) {
  return stream_query(h, status, [this](const CtxPtr&, Stream& s) {
    std::shared_ptr<Capture> c = capture_of(s);
    return !c               ? CU_STREAM_CAPTURE_STATUS_NONE
           : c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                            : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  });
}

CUresult SimGpu::cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus* status,
                                           cuuint64_t* id, CUgraph* graph, const CUgraphNode** deps,
                                           const CUgraphEdgeData** edges, size_t* num_deps) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  std::shared_ptr<Stream> s;
  if (CUresult e = stream_of(h, &ctx, &s)) return e;
  std::shared_ptr<Capture> c = capture_of(*s);
  *status = !c               ? CU_STREAM_CAPTURE_STATUS_NONE
            : c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                             : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (id) *id = c ? c->id : 0;
  if (graph) *graph = c ? reinterpret_cast<CUgraph>(c->graph.get()) : nullptr;
  if (deps) *deps = nullptr;
  if (edges) *edges = nullptr;
  if (num_deps) *num_deps = 0;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuGraphCreate(CUgraph* out, unsigned flags) {
  if (!out || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  auto g = std::make_shared<SimGraph>();
  std::unique_lock lock(mu_);
  SimGraph* key = g.get();
  graphs_.emplace(key, std::move(g));
  *out = reinterpret_cast<CUgraph>(key);
  return CUDA_SUCCESS;
}

// A recorded operation's node handle is its address in the graph's list, valid while the graph
// lives and no capture adds to it; the handles a listing gave out are remembered with their
// graph (node_graphs_), so a node's question looks at that graph only. Its edges are the
// dependencies the capture recorded (GraphOp::deps): the fork and join of its streams.

std::shared_ptr<SimGraph> SimGpu::graph_of(CUgraph h) {
  std::shared_lock lock(mu_);
  auto it = graphs_.find(reinterpret_cast<SimGraph*>(h));
  return it == graphs_.end() ? nullptr : it->second;
}

CUresult SimGpu::cuGraphGetNodes(CUgraph h, CUgraphNode* nodes, size_t* count) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<SimGraph> g = graph_of(h);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g->mu);
  if (!nodes) {
    *count = g->ops.size();
    return CUDA_SUCCESS;
  }
  const size_t listed = std::min(*count, g->ops.size());
  {
    std::lock_guard nlock(nodes_mu_);
    for (size_t i = 0; i < listed; ++i) node_graphs_[&g->ops[i]] = g.get();
  }
  g->nodes_listed = g->nodes_listed || listed > 0;
  for (size_t i = 0; i < *count; ++i) {
    nodes[i] = i < listed ? reinterpret_cast<CUgraphNode>(&g->ops[i]) : nullptr;
  }
  *count = listed;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  if (!node || !type) return CUDA_ERROR_INVALID_VALUE;
  const auto* op = reinterpret_cast<const GraphOp*>(node);
  SimGraph* owner = nullptr;
  {
    std::lock_guard lock(nodes_mu_);
    auto it = node_graphs_.find(op);
    if (it == node_graphs_.end()) return CUDA_ERROR_INVALID_VALUE;
    owner = it->second;
  }
  std::shared_ptr<SimGraph> g = graph_of(reinterpret_cast<CUgraph>(owner));
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g->mu);
  // Still one of its operations (a capture into the graph may have moved them since).
  if (g->ops.empty() || op < g->ops.data() || op >= g->ops.data() + g->ops.size()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *type = op->node.type;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuGraphGetEdges_v2(CUgraph h, CUgraphNode* from, CUgraphNode* to,
                                    CUgraphEdgeData* data, size_t* count) {
  if (!count || !from != !to) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<SimGraph> g = graph_of(h);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g->mu);
  size_t edges = 0;
  for (const GraphOp& op : g->ops) edges += op.deps.size();
  if (!from) {
    *count = edges;
    return CUDA_SUCCESS;
  }
  size_t listed = 0;
  for (size_t i = 0; i < g->ops.size() && listed < *count; ++i) {
    for (size_t k = 0; k < g->ops[i].deps.size() && listed < *count; ++k, ++listed) {
      from[listed] = reinterpret_cast<CUgraphNode>(&g->ops[g->ops[i].deps[k]]);
      to[listed] = reinterpret_cast<CUgraphNode>(&g->ops[i]);
      if (data) data[listed] = CUgraphEdgeData{};
    }
  }
  for (size_t i = listed; i < *count; ++i) {
    from[i] = to[i] = nullptr;
    if (data) data[i] = CUgraphEdgeData{};
  }
  *count = listed;
  return CUDA_SUCCESS;
}

namespace {
const char* node_type_name(CUgraphNodeType t) {
  switch (t) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      return "kernel";
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return "memcpy";
    case CU_GRAPH_NODE_TYPE_MEMSET:
      return "memset";
    case CU_GRAPH_NODE_TYPE_HOST:
      return "host";
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return "wait_event";
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return "event_record";
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      return "mem_alloc";
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      return "mem_free";
    default:
      return "empty";
  }
}

// A DOT string literal's body: quotes and backslashes escaped, no line breaks.
std::string dot_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out;
}
}  // namespace

// A captured graph's DOT: its operations, each with its type and what it does, and the
// dependencies the capture recorded. No flag adds anything (no handles, no host pointers).
CUresult SimGpu::cuGraphDebugDotPrint(CUgraph h, const char* path, unsigned) {
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<SimGraph> g = graph_of(h);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  std::string dot = "digraph cuwire_captured_graph {\n";
  {
    std::lock_guard lock(g->mu);
    for (size_t i = 0; i < g->ops.size(); ++i) {
      const NodeInfo& n = g->ops[i].node;
      dot += "  op" + std::to_string(i) + " [shape=box, label=\"" + std::to_string(i) + ": " +
             node_type_name(n.type) + (n.label.empty() ? "" : "\\n" + dot_escape(n.label)) +
             "\"];\n";
      for (uint32_t d : g->ops[i].deps) {
        dot += "  op" + std::to_string(d) + " -> op" + std::to_string(i) + ";\n";
      }
    }
  }
  dot += "}\n";
  FILE* f = std::fopen(path, "w");
  if (!f) return CUDA_ERROR_OPERATING_SYSTEM;
  const bool ok = std::fwrite(dot.data(), 1, dot.size(), f) == dot.size();
  return std::fclose(f) == 0 && ok ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
}

CUresult SimGpu::cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph h,
                                             unsigned long long flags) {
  constexpr unsigned long long kKnown =
      CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
      CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  if (!out || (flags & ~kKnown)) return CUDA_ERROR_INVALID_VALUE;
  std::unique_lock lock(mu_);
  auto it = graphs_.find(reinterpret_cast<SimGraph*>(h));
  if (it == graphs_.end()) return CUDA_ERROR_INVALID_VALUE;
  SimGraph& g = *it->second;
  auto exec = std::make_unique<SimGraphExec>();
  bool memory_nodes = false;
  {
    std::lock_guard glock(g.mu);
    exec->ops = std::make_shared<const std::vector<GraphOp>>(g.ops);
    exec->allocations = g.allocations;
    memory_nodes = std::any_of(g.ops.begin(), g.ops.end(), [](const GraphOp& op) {
      return formats::is_memory_node(op.node.type);
    });
  }
  if (memory_nodes) {
    // One executable graph at a time (CUDA documents no code for a second; INVALID_VALUE).
    if (g.sole_exec) return CUDA_ERROR_INVALID_VALUE;
    g.sole_exec = exec.get();
    exec->sole_of = it->second;
  }
  SimGraphExec* key = exec.get();
  graph_execs_.emplace(key, std::move(exec));
  *out = reinterpret_cast<CUgraphExec>(key);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuGraphUpload(CUgraphExec h, CUstream hs) {
  CtxPtr ctx;
  std::shared_ptr<Stream> s;
  if (CUresult e = stream_of(hs, &ctx, &s)) return e;
  std::shared_lock lock(mu_);
  return graph_execs_.count(reinterpret_cast<SimGraphExec*>(h)) ? CUDA_SUCCESS
                                                                : CUDA_ERROR_INVALID_VALUE;
}

CUresult SimGpu::cuGraphLaunch(CUgraphExec h, CUstream hs) {
  CtxPtr ctx;
  std::shared_ptr<Stream> s;
  if (CUresult e = stream_of(hs, &ctx, &s)) return e;
  if (CUresult e = ctx->sticky.load()) return e;
  std::shared_ptr<const std::vector<GraphOp>> ops;
  std::vector<std::shared_ptr<Allocation>> allocations;
  {
    std::shared_lock lock(mu_);
    auto it = graph_execs_.find(reinterpret_cast<SimGraphExec*>(h));
    if (it == graph_execs_.end()) return CUDA_ERROR_INVALID_VALUE;
    ops = it->second->ops;
    allocations = it->second->allocations;
  }
  for (const auto& a : allocations) revive(a);
  // One queued operation per recorded one: a fault stops the rest through the sticky error,
  // and a capturing launch stream records them again (a graph launched inside a capture).
  for (const GraphOp& op : *ops) {
    submit(*ctx, *s, op.run, {}, NodeDesc(op.node.type, [&] { return op.node.label; }));
  }
  return CUDA_SUCCESS;
}

// An executable graph takes a captured graph's operations when both hold as many, of the same
// types in the same order: captures of the same work (kernel arguments changed, say) record
// the same sequence.
CUresult SimGpu::cuGraphExecUpdate_v2(CUgraphExec hx, CUgraph hg,
                                      CUgraphExecUpdateResultInfo* info) {
  if (!info) return CUDA_ERROR_INVALID_VALUE;
  *info = CUgraphExecUpdateResultInfo{};
  info->result = CU_GRAPH_EXEC_UPDATE_ERROR;
  std::unique_lock lock(mu_);
  auto x = graph_execs_.find(reinterpret_cast<SimGraphExec*>(hx));
  auto g = graphs_.find(reinterpret_cast<SimGraph*>(hg));
  if (x == graph_execs_.end() || g == graphs_.end()) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard glock(g->second->mu);
  if (g->second->ops.size() != x->second->ops->size()) {
    info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  }
  for (size_t i = 0; i < g->second->ops.size(); ++i) {
    if (g->second->ops[i].deps != (*x->second->ops)[i].deps) {
      info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
      return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
    if (g->second->ops[i].node.type != (*x->second->ops)[i].node.type) {
      info->result = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
      return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
  }
  // Launches already queued hold the old operations.
  x->second->ops = std::make_shared<const std::vector<GraphOp>>(g->second->ops);
  x->second->allocations = g->second->allocations;
  info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuGraphExecDestroy(CUgraphExec h) {
  std::unique_ptr<SimGraphExec> gone;  // queued replays hold their own copies of the ops
  std::unique_lock lock(mu_);
  gone = take_registered(graph_execs_, h);
  if (!gone) return CUDA_ERROR_INVALID_VALUE;
  if (std::shared_ptr<SimGraph> g = gone->sole_of.lock(); g && g->sole_exec == gone.get()) {
    g->sole_exec = nullptr;
  }
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuGraphDestroy(CUgraph h) {
  std::shared_ptr<SimGraph> gone;
  std::unique_lock lock(mu_);
  gone = take_registered(graphs_, h);
  if (!gone) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard glock(gone->mu);
  if (gone->nodes_listed) {
    std::lock_guard nlock(nodes_mu_);
    std::erase_if(node_graphs_, [&](const auto& n) { return n.second == gone.get(); });
  }
  return CUDA_SUCCESS;
}

}  // namespace cuwire::server::sim
