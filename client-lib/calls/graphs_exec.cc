// Executable graphs of the graphs built on the client (graphs.cc): instantiation, exec updates
// and parameter changes, enabling nodes, uploads and launches, which replay the nodes as the
// stream calls they stand for, one launch of a graph after another.

#include <cuda.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "client-lib/calls/graphs_internal.h"
#include "client-lib/core/client_call.h"
#include "client-lib/core/id_set.h"

namespace cuwire::client::graphs {
namespace {

CUresult instantiate_locked(const Graph& g, unsigned long long flags, std::shared_ptr<Exec>* out) {
  std::vector<const Node*> order;
  if (CUresult e = topological_order(g, &order)) return e;
  auto x = std::make_shared<Exec>();
  x->flags = flags;
  x->conds = g.conds;
  std::map<const Node*, size_t> place;
  for (const Node* n : order) {
    ExecNode en;
    en.node = n->id;
    for (const Node* d : n->deps) en.deps.push_back(place.at(d));  // before n in the order
    std::sort(en.deps.begin(), en.deps.end());
    place[n] = x->order.size();
    en.p = n->p;
    // A kernel node's priority counts only in a graph instantiated to use it, as in CUDA.
    if (!(flags & CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY)) {
      std::erase_if(en.p.attrs, [](const CUlaunchAttribute& a) {
        return a.id == CU_LAUNCH_ATTRIBUTE_PRIORITY;
      });
    }
    if (n->p.child) {
      if (CUresult e = instantiate_locked(*n->p.child, 0, &en.child)) return e;
      x->conds.insert(x->conds.end(), en.child->conds.begin(), en.child->conds.end());
    }
    for (const auto& b : n->p.bodies) {
      std::shared_ptr<Exec> body;
      if (CUresult e = instantiate_locked(*b, 0, &body)) return e;
      x->conds.insert(x->conds.end(), body->conds.begin(), body->conds.end());
      en.bodies.push_back(std::move(body));
    }
    x->order.push_back(std::move(en));
  }
  *out = std::move(x);
  return CUDA_SUCCESS;
}

// Whether graph g can give its parameters to executable graph `was`: the same number of
// nodes, each of the same type and with dependencies in the same places of the topological
// orders, within CUDA's limits for exec updates (a conditional node's handle, type and body
// count; an allocation's address; a free's pointer), child graphs and conditional bodies
// checked the same way (CUDA's update is recursive). Fills `info` where it fails.
CUresult check_update_locked(const Exec& was, const Graph& g, CUgraphExecUpdateResultInfo* info) {
  auto fail = [info](CUgraphExecUpdateResult why, const Node* n) {
    info->result = why;
    info->errorNode = n ? handle(n) : nullptr;
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  };
  std::vector<const Node*> order;
  if (CUresult e = topological_order(g, &order)) return e;
  if (order.size() != was.order.size())
    return fail(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, nullptr);
  std::map<const Node*, size_t> place;
  for (size_t i = 0; i < order.size(); ++i) place[order[i]] = i;
  for (size_t i = 0; i < order.size(); ++i) {
    const ExecNode& before = was.order[i];
    const Node* now = order[i];
    std::vector<size_t> deps;
    for (const Node* d : now->deps) deps.push_back(place.at(d));
    std::sort(deps.begin(), deps.end());
    if (deps != before.deps) return fail(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, now);
    const Params& p = now->p;
    if (p.type != before.p.type) return fail(CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED, now);
    bool same = true;
    switch (p.type) {
      case CU_GRAPH_NODE_TYPE_CONDITIONAL:
        same = p.cond.handle == before.p.cond.handle && p.cond.type == before.p.cond.type &&
               p.cond.size == before.p.cond.size && p.bodies.size() == before.bodies.size();
        break;
      case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
        same = p.alloc.dptr == before.p.alloc.dptr;
        break;
      case CU_GRAPH_NODE_TYPE_MEM_FREE:
        same = p.free_ptr == before.p.free_ptr;
        break;
      case CU_GRAPH_NODE_TYPE_GRAPH:
        // A built child and a captured one (run by the server) are not one topology.
        if (!p.child != !before.child)
          return fail(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, now);
        break;
      default:
        break;
    }
    if (!same) return fail(CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED, now);
    // Inside a child or a body, the node named is the one of g holding it (CUDA: "the node
    // from hGraph").
    if (p.child && check_update_locked(*before.child, *p.child, info)) {
      return fail(info->result, now);
    }
    for (size_t b = 0; b < p.bodies.size(); ++b) {
      if (check_update_locked(*before.bodies[b], *p.bodies[b], info))
        return fail(info->result, now);
    }
  }
  return CUDA_SUCCESS;
}

// ---- launching: each node as the stream call it stands for

CUresult run(const Exec& x, CUstream s);

CUresult run_node(const ExecNode& en, CUstream s) {
  const Params& p = en.p;
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      const CUDA_KERNEL_NODE_PARAMS& k = p.kernel;
      size_t size = p.args.size();
      void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, const_cast<uint8_t*>(p.args.data()),
                       CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
      if (!p.attrs.empty()) {
        CUlaunchConfig config{};
        config.gridDimX = k.gridDimX;
        config.gridDimY = k.gridDimY;
        config.gridDimZ = k.gridDimZ;
        config.blockDimX = k.blockDimX;
        config.blockDimY = k.blockDimY;
        config.blockDimZ = k.blockDimZ;
        config.sharedMemBytes = k.sharedMemBytes;
        config.hStream = s;
        config.attrs = const_cast<CUlaunchAttribute*>(p.attrs.data());
        config.numAttrs = static_cast<unsigned>(p.attrs.size());
        return cuLaunchKernelEx(&config, p.launch, nullptr, size ? extra : nullptr);
      }
      return cuLaunchKernel(p.launch, k.gridDimX, k.gridDimY, k.gridDimZ, k.blockDimX, k.blockDimY,
                            k.blockDimZ, k.sharedMemBytes, s, nullptr, size ? extra : nullptr);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return cuMemcpy3DAsync_v2(&p.copy, s);
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return p.sync_host_memory ? cuStreamSynchronize(s) : CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const CUDA_MEMSET_NODE_PARAMS& m = p.memset;
      const size_t pitch = m.height > 1 ? m.pitch : m.width * m.elementSize;
      switch (m.elementSize) {
        case 1:
          return cuMemsetD2D8Async(m.dst, pitch, static_cast<unsigned char>(m.value), m.width,
                                   m.height, s);
        case 2:
          return cuMemsetD2D16Async(m.dst, pitch, static_cast<unsigned short>(m.value), m.width,
                                    m.height, s);
        default:
          return cuMemsetD2D32Async(m.dst, pitch, m.value, m.width, m.height, s);
      }
    }
    case CU_GRAPH_NODE_TYPE_HOST:
      // A host function like any other (host_calls.cc): it sees the device's bytes of managed
      // memory as the nodes before it left them, and the nodes after it see its writes.
      return cuLaunchHostFunc(s, p.host.fn, p.host.userData);
    case CU_GRAPH_NODE_TYPE_GRAPH:
      if (en.child) return run(*en.child, s);
      {
        ArgWriter w(CallId::k_cuGraphLaunch);
        w.put(p.server_child->id);
        w.put_handle(s);
        return w.send_async();
      }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return cuEventRecord(p.event, s);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return cuStreamWaitEvent(s, p.event, 0);
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      allocated_by_launch(p.alloc.dptr, s);
      return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_MEM_FREE:  // a graph allocation is only marked free (check_graph_free)
      return cuMemFreeAsync(p.free_ptr, s);
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
      // The handle's value as the stream has it when it gets here: a round trip, so the launch
      // returns only once the stream reached the node (and, for a loop, its last iteration).
      uint32_t v = 0;
      auto read = [&] { return cuMemcpyDtoHAsync_v2(&v, p.cond.handle, sizeof v, s); };
      if (CUresult e = read()) return e;
      switch (p.cond.type) {
        case CU_GRAPH_COND_TYPE_IF:
          if (v) return run(*en.bodies[0], s);
          return en.bodies.size() > 1 ? run(*en.bodies[1], s) : CUDA_SUCCESS;
        case CU_GRAPH_COND_TYPE_WHILE:
          while (v) {
            if (CUresult e = run(*en.bodies[0], s)) return e;
            if (CUresult e = read()) return e;
          }
          return CUDA_SUCCESS;
        case CU_GRAPH_COND_TYPE_SWITCH:
          return v < en.bodies.size() ? run(*en.bodies[v], s) : CUDA_SUCCESS;
        default:
          return CUDA_ERROR_INVALID_VALUE;
      }
    }
    default:
      return CUDA_SUCCESS;
  }
}

CUresult run(const Exec& x, CUstream s) {
  for (const ExecNode& en : x.order) {
    if (!en.enabled) continue;
    if (CUresult e = run_node(en, s)) return e;
  }
  return CUDA_SUCCESS;
}

// ---- executable graphs: the node an update or a parameter change names

ExecNode* exec_node(Exec& x, CUgraphNode h) {
  for (ExecNode& en : x.order) {
    if (en.node == id_of(h)) return &en;
  }
  return nullptr;
}

// Changes an executable graph's copy of one node; `make` builds the new parameters.
template <typename F>
CUresult set_exec_node(CUgraphExec hx, CUgraphNode hn, CUgraphNodeType type, F make) {
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  std::shared_ptr<Exec> x = exec_locked(hx);
  if (!x) return CUDA_ERROR_INVALID_VALUE;
  ExecNode* en = exec_node(*x, hn);
  if (!en || en->p.type != type) return CUDA_ERROR_INVALID_VALUE;
  Params p = en->p;
  if (CUresult e = make(&p)) return e;
  en->p = std::move(p);
  return CUDA_SUCCESS;
}

// An executable graph's node of `type` gets the app's `params` (null: INVALID_VALUE), made into
// node parameters by `make`.
template <typename P>
CUresult set_exec_params(CUgraphExec hx, CUgraphNode hn, CUgraphNodeType type, const P* params,
                         CUresult (*make)(const P&, Params*)) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  return set_exec_node(hx, hn, type, [&](Params* p) { return make(*params, p); });
}

// An event record or wait node of an executable graph gets event `event`.
CUresult set_exec_event(CUgraphExec hx, CUgraphNode hn, CUgraphNodeType type, CUevent event) {
  if (!event) return CUDA_ERROR_INVALID_VALUE;
  return set_exec_node(hx, hn, type, [&](Params* p) {
    p->event = event;
    return CUDA_SUCCESS;
  });
}

}  // namespace

LaunchOrder& launch_order() {
  static LaunchOrder* o = new LaunchOrder();  // leaked: used by atexit handlers too
  return *o;
}

namespace {

void order_launch(uint64_t exec, CUstream s) {
  CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
  if (cuStreamIsCapturing(s, &capturing) != CUDA_SUCCESS ||
      capturing != CU_STREAM_CAPTURE_STATUS_NONE) {
    return;
  }
  LaunchOrder& o = launch_order();
  std::lock_guard lock(o.mu);
  auto [it, first] = o.execs.try_emplace(exec);
  LaunchOrder::Last& last = it->second;
  if (!first && last.stream != s) {
    if (!last.event && cuEventCreate(&last.event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
      last.event = nullptr;
    }
    // A stream destroyed since has nothing left to wait for.
    if (last.event && cuEventRecord(last.event, last.stream) == CUDA_SUCCESS) {
      cuStreamWaitEvent(s, last.event, 0);
    }
  }
  last.stream = s;
}

void forget_launch_order(uint64_t exec) {
  CUevent ev = nullptr;
  {
    LaunchOrder& o = launch_order();
    std::lock_guard lock(o.mu);
    auto it = o.execs.find(exec);
    if (it == o.execs.end()) return;
    ev = it->second.event;
    o.execs.erase(it);
  }
  if (ev) cuEventDestroy_v2(ev);
}

}  // namespace

IdSet& server_execs() {
  static IdSet* e = new IdSet();  // leaked: used by atexit handlers too
  return *e;
}

namespace {

bool server_exec_live(uint64_t id) { return server_execs().contains(id); }

CUresult server_graph_launch(uint64_t exec, CUstream s) {
  ArgWriter w(CallId::k_cuGraphLaunch);
  w.put(exec);
  w.put_handle(s);
  return w.send_async();
}

}  // namespace

}  // namespace cuwire::client::graphs

using namespace cuwire;
using namespace cuwire::client;
using namespace cuwire::client::graphs;

extern "C" {

// ---- executable graphs

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph,
                                             unsigned long long flags) {
  if (!phGraphExec) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t id = id_of(hGraph);
  if (!is_local(id)) {
    if (moved_server_graphs().contains(id)) return CUDA_ERROR_INVALID_VALUE;  // a node's now
    ArgWriter w(CallId::k_cuGraphInstantiateWithFlags);
    w.put(id);
    w.put(flags);
    if (CUresult e = w.call_for_handle(phGraphExec)) return e;
    server_execs().insert(id_of(*phGraphExec), flags);
    user_objects_copy(id, id_of(*phGraphExec));
    return CUDA_SUCCESS;
  }
  constexpr unsigned long long kKnown =
      CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
      CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  if (flags & ~kKnown) return CUDA_ERROR_INVALID_VALUE;
  if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) {
    return unsupported("cuGraphInstantiate (graphs launched from the device)");
  }
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  Graph* g = graph_locked(hGraph);
  if (!g || g->moved) return CUDA_ERROR_INVALID_VALUE;
  // A graph with memory or conditional nodes has one executable graph at a time, as in CUDA
  // (which documents no error code for a second; this is INVALID_VALUE).
  const bool sole = restricted_nodes(*g).any();
  if (sole && !g->sole_exec.expired()) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Exec> x;
  if (CUresult e = instantiate_locked(*g, flags, &x)) return e;
  x->id = t.next_id++;
  t.execs[x->id] = x;
  if (sole) g->sole_exec = x;
  *phGraphExec = reinterpret_cast<CUgraphExec>(static_cast<uintptr_t>(x->id));
  user_objects_copy(id, x->id);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphExecGetFlags(CUgraphExec hGraphExec, cuuint64_t* flags) {
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  if (!is_local(id_of(hGraphExec))) {
    uint64_t instantiated = 0;
    if (!server_execs().find(id_of(hGraphExec), &instantiated)) return CUDA_ERROR_INVALID_VALUE;
    *flags = instantiated;
    return CUDA_SUCCESS;
  }
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  std::shared_ptr<Exec> x = exec_locked(hGraphExec);
  if (!x) return CUDA_ERROR_INVALID_VALUE;
  *flags = x->flags;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
  const uint64_t id = id_of(hGraphExec);
  if (!is_local(id)) {
    if (!server_exec_live(id)) return CUDA_ERROR_INVALID_VALUE;
    ArgWriter w(CallId::k_cuGraphUpload);
    w.put(id);
    w.put_handle(hStream);
    return w.send_async();
  }
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  return exec_locked(hGraphExec) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  const uint64_t id = id_of(hGraphExec);
  if (!is_local(id) && !server_exec_live(id)) return CUDA_ERROR_INVALID_VALUE;
  user_objects_launched(id, hStream);
  if (!is_local(id)) {
    order_launch(id, hStream);
    return server_graph_launch(id, hStream);
  }
  std::shared_ptr<Exec> x;
  {
    Tables& t = tables();
    std::lock_guard lock(t.mu);
    x = exec_locked(hGraphExec);
    if (!x) return CUDA_ERROR_INVALID_VALUE;
    x = std::make_shared<Exec>(*x);  // this launch's parameters, whatever changes them meanwhile
  }
  // An allocation an earlier launch made and the app did not free: CUDA refuses the launch,
  // unless the graph was instantiated to free it on launch.
  for (const ExecNode& en : x->order) {
    if (en.p.type != CU_GRAPH_NODE_TYPE_MEM_ALLOC || !allocation_live(en.p.alloc.dptr)) continue;
    if (!(x->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH))
      return CUDA_ERROR_INVALID_VALUE;
    freed(en.p.alloc.dptr, nullptr, false);
  }
  order_launch(id, hStream);
  for (const auto& c : x->conds) {
    if (!(c->flags & CU_GRAPH_COND_ASSIGN_DEFAULT)) continue;
    if (CUresult e = cuMemsetD32Async(c->cell, c->value, 1, hStream)) return e;
  }
  return run(*x, hStream);
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) {
  const uint64_t id = id_of(hGraphExec);
  if (!is_local(id) && !server_execs().erase(id)) return CUDA_ERROR_INVALID_VALUE;
  forget_launch_order(id);
  user_objects_drop(id);
  if (!is_local(id)) {
    forget_cached(id);
    ArgWriter w(CallId::k_cuGraphExecDestroy);
    w.put(id);
    return w.send_async();
  }
  std::shared_ptr<Exec> gone;  // destroyed after the lock: its holds may free memory
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  auto it = t.execs.find(id);
  if (it == t.execs.end()) return CUDA_ERROR_INVALID_VALUE;
  gone = std::move(it->second);
  t.execs.erase(it);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  return set_exec_params(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_KERNEL, nodeParams, kernel_params);
}

CUresult CUDAAPI cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_MEMCPY3D* copyParams, CUcontext) {
  return set_exec_params(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_MEMCPY, copyParams, memcpy_params);
}

CUresult CUDAAPI cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_MEMSET_NODE_PARAMS* memsetParams,
                                                CUcontext) {
  return set_exec_params(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_MEMSET, memsetParams, memset_params);
}

CUresult CUDAAPI cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                              const CUDA_HOST_NODE_PARAMS* nodeParams) {
  return set_exec_params(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_HOST, nodeParams, host_params);
}

CUresult CUDAAPI cuGraphExecEventRecordNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                    CUevent event) {
  return set_exec_event(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_EVENT_RECORD, event);
}

CUresult CUDAAPI cuGraphExecEventWaitNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                  CUevent event) {
  return set_exec_event(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_WAIT_EVENT, event);
}

CUresult CUDAAPI cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                    CUgraph childGraph) {
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  std::shared_ptr<Exec> x = exec_locked(hGraphExec);
  if (!x) return CUDA_ERROR_INVALID_VALUE;
  ExecNode* en = exec_node(*x, hNode);
  Graph* g = graph_locked(childGraph);
  if (!en || en->p.type != CU_GRAPH_NODE_TYPE_GRAPH || !en->child || !g)
    return CUDA_ERROR_INVALID_VALUE;
  // The same rules as cuGraphExecUpdate's (CUDA documents only INVALID_VALUE here).
  CUgraphExecUpdateResultInfo info{};
  if (check_update_locked(*en->child, *g, &info)) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Exec> child;
  if (CUresult e = instantiate_locked(*g, 0, &child)) return e;
  for (size_t i = 0; i < child->order.size(); ++i) {
    child->order[i].node = en->child->order[i].node;
  }
  en->child = std::move(child);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphNodeSetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode,
                                       unsigned int isEnabled) {
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  std::shared_ptr<Exec> x = exec_locked(hGraphExec);
  ExecNode* en = x ? exec_node(*x, hNode) : nullptr;
  if (!en) return CUDA_ERROR_INVALID_VALUE;
  const CUgraphNodeType type = en->p.type;
  if (type != CU_GRAPH_NODE_TYPE_KERNEL && type != CU_GRAPH_NODE_TYPE_MEMCPY &&
      type != CU_GRAPH_NODE_TYPE_MEMSET) {
    return CUDA_ERROR_INVALID_VALUE;  // CUDA enables and disables only these
  }
  en->enabled = isEnabled != 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphNodeGetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode,
                                       unsigned int* isEnabled) {
  if (!isEnabled) return CUDA_ERROR_INVALID_VALUE;
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  std::shared_ptr<Exec> x = exec_locked(hGraphExec);
  ExecNode* en = x ? exec_node(*x, hNode) : nullptr;
  if (!en) return CUDA_ERROR_INVALID_VALUE;
  *isEnabled = en->enabled;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                          CUgraphNodeParams* nodeParams) {
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  switch (nodeParams->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      CUDA_KERNEL_NODE_PARAMS k{};
      std::memcpy(&k, &nodeParams->kernel, sizeof k);
      return cuGraphExecKernelNodeSetParams_v2(hGraphExec, hNode, &k);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return cuGraphExecMemcpyNodeSetParams(hGraphExec, hNode, &nodeParams->memcpy.copyParams,
                                            nullptr);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const auto& m = nodeParams->memset;
      CUDA_MEMSET_NODE_PARAMS v1{m.dst, m.pitch, m.value, m.elementSize, m.width, m.height};
      return cuGraphExecMemsetNodeSetParams(hGraphExec, hNode, &v1, m.ctx);
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
      CUDA_HOST_NODE_PARAMS h{nodeParams->host.fn, nodeParams->host.userData};
      return cuGraphExecHostNodeSetParams(hGraphExec, hNode, &h);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH:
      return cuGraphExecChildGraphNodeSetParams(hGraphExec, hNode, nodeParams->graph.graph);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return cuGraphExecEventRecordNodeSetEvent(hGraphExec, hNode, nodeParams->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return cuGraphExecEventWaitNodeSetEvent(hGraphExec, hNode, nodeParams->eventWait.event);
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// An executable graph takes a graph's parameters when both have the same nodes, of the same
// types, with the same dependencies, each in the same place of their topological orders.
CUresult CUDAAPI cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                                      CUgraphExecUpdateResultInfo* resultInfo) {
  if (!resultInfo) return CUDA_ERROR_INVALID_VALUE;
  *resultInfo = CUgraphExecUpdateResultInfo{};
  resultInfo->result = CU_GRAPH_EXEC_UPDATE_ERROR;
  const bool local_exec = is_local(id_of(hGraphExec)), local_graph = is_local(id_of(hGraph));
  if (moved_server_graphs().contains(id_of(hGraph))) return CUDA_ERROR_INVALID_VALUE;  // a node's
  if (!local_exec && !local_graph) {  // two captured graphs: the server updates
    ArgWriter w(CallId::k_cuGraphExecUpdate_v2);
    w.put(id_of(hGraphExec));
    w.put(id_of(hGraph));
    OutReader r;
    const CUresult rc = w.call(&r);
    if (rc == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) {
      resultInfo->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    }
    if (rc != CUDA_SUCCESS) return rc;
    uint32_t result = 0;
    r.get_array(&result, 1);
    if (CUresult e = r.finish()) return e;
    resultInfo->result = static_cast<CUgraphExecUpdateResult>(result);
    return CUDA_SUCCESS;
  }
  if (local_exec != local_graph) {  // a built graph and a captured one: not the same topology
    resultInfo->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  }
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  std::shared_ptr<Exec> x = exec_locked(hGraphExec);
  Graph* g = graph_locked(hGraph);
  if (!x || !g || g->moved) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = check_update_locked(*x, *g, resultInfo)) return e;
  std::shared_ptr<Exec> fresh;
  if (CUresult e = instantiate_locked(*g, x->flags, &fresh)) return e;
  for (size_t i = 0; i < fresh->order.size(); ++i) {
    fresh->order[i].node = x->order[i].node;  // the exec keeps answering to its own nodes
    fresh->order[i].enabled = x->order[i].enabled;
  }
  x->order = std::move(fresh->order);
  x->conds = std::move(fresh->conds);
  resultInfo->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  return CUDA_SUCCESS;
}

}  // extern "C"
