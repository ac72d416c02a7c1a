// Graphs built on the client (graphs.cc): adding nodes, getting and setting their parameters,
// the client graph a capture's host copies are wrapped in, and child-graph nodes made for
// captures.

#include <cuda.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "client-lib/calls/graphs_internal.h"
#include "client-lib/core/client_call.h"

namespace cuwire::client::graphs {

// ---- turning the app's parameters into a node's

CUresult kernel_params(const CUDA_KERNEL_NODE_PARAMS& in, Params* p) {
  CUDA_KERNEL_NODE_PARAMS k = in;
  // A CUkernel launches as itself (cuLaunchKernel takes either).
  const CUfunction launch = k.func ? k.func : reinterpret_cast<CUfunction>(k.kern);
  if (!launch) return CUDA_ERROR_INVALID_VALUE;
  if (k.gridDimX == 0 || k.gridDimY == 0 || k.gridDimZ == 0 || k.blockDimX == 0 ||
      k.blockDimY == 0 || k.blockDimZ == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::vector<uint8_t> args;
  if (CUresult e = pack_kernel_params(launch, k.kernelParams, k.extra, &args)) return e;
  if (k.func) {
    KernelOfFunction& kf = kernel_of_function();
    std::lock_guard lock(kf.mu);
    auto it = kf.kernels.find(id_of(k.func));
    k.kern = it == kf.kernels.end() ? nullptr : it->second;
  }
  k.kernelParams = nullptr;
  k.extra = nullptr;
  p->type = CU_GRAPH_NODE_TYPE_KERNEL;
  p->kernel = k;
  p->launch = launch;
  p->args = std::move(args);
  return CUDA_SUCCESS;
}

namespace {
// Whether CUDA takes `id` as an attribute of a kernel node ("valid for graph nodes").
bool kernel_node_attribute(CUlaunchAttributeID id) {
  switch (id) {
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
    case CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE:
    case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING:
      return true;
    default:
      return false;
  }
}
}  // namespace

CUresult memcpy_params(const CUDA_MEMCPY3D& c, Params* p) {
  auto type_ok = [](CUmemorytype t) {
    return t == CU_MEMORYTYPE_HOST || t == CU_MEMORYTYPE_DEVICE || t == CU_MEMORYTYPE_ARRAY ||
           t == CU_MEMORYTYPE_UNIFIED;
  };
  if (!type_ok(c.srcMemoryType) || !type_ok(c.dstMemoryType)) return CUDA_ERROR_INVALID_VALUE;
  if (c.WidthInBytes == 0 && c.Height == 0 && c.Depth == 0) return CUDA_ERROR_INVALID_VALUE;
  p->type = CU_GRAPH_NODE_TYPE_MEMCPY;
  p->copy = c;
  return CUDA_SUCCESS;
}

CUresult memset_params(const CUDA_MEMSET_NODE_PARAMS& m, Params* p) {
  if (m.elementSize != 1 && m.elementSize != 2 && m.elementSize != 4)
    return CUDA_ERROR_INVALID_VALUE;
  if (!m.dst || m.width == 0 || m.height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (m.height > 1 && m.pitch < m.width * m.elementSize) return CUDA_ERROR_INVALID_VALUE;
  p->type = CU_GRAPH_NODE_TYPE_MEMSET;
  p->memset = m;
  return CUDA_SUCCESS;
}

CUresult host_params(const CUDA_HOST_NODE_PARAMS& h, Params* p) {
  if (!h.fn) return CUDA_ERROR_INVALID_VALUE;
  p->type = CU_GRAPH_NODE_TYPE_HOST;
  p->host = h;
  return CUDA_SUCCESS;
}

namespace {

// Whether `inner` is `g` or a graph inside it (a child's, a conditional body's).
bool contains_graph(const Graph& g, const Graph* inner) {
  if (&g == inner) return true;
  for (const auto& n : g.nodes) {
    if (n->p.child && contains_graph(*n->p.child, inner)) return true;
    for (const auto& b : n->p.bodies) {
      if (contains_graph(*b, inner)) return true;
    }
  }
  return false;
}

// How a child graph becomes a node's: cloned (cuGraphAddChildGraphNode, CUDA's default), moved
// (CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE: the node owns the very graph), or taken over from a
// capture (client-lib/calls/graphs_capture.cc's segments and wrapped copies, which follow CUDA's
// rules already).
enum class ChildOwnership { kClone, kMove, kCapture };

// A child graph: a client graph is copied, or moved into the node; a captured graph on the
// server is instantiated there, which copies its operations (moved: the node also keeps the
// graph, and destroys it). `parent` is the graph the node joins; `server_memory_nodes` whether
// a captured child holds allocation or free nodes (asked of the server before the tables'
// lock is taken).
CUresult child_params(CUgraph child, Params* p, ChildOwnership how = ChildOwnership::kCapture,
                      const Graph* parent = nullptr, bool server_memory_nodes = false) {
  const uint64_t id = id_of(child);
  p->type = CU_GRAPH_NODE_TYPE_GRAPH;
  const bool by_app = how != ChildOwnership::kCapture;
  if (is_local(id)) {
    Graph* g = graph_locked(child);
    if (!g || (by_app && g->moved)) return CUDA_ERROR_INVALID_VALUE;
    // CUDA's rules, not limits of this library: a graph with conditional nodes is no child,
    // and one with memory nodes only a moved one.
    const Restricted r = by_app ? restricted_nodes(*g) : Restricted{};
    if (r.conditional) return CUDA_ERROR_NOT_SUPPORTED;
    if (how == ChildOwnership::kClone && r.memory) return CUDA_ERROR_NOT_SUPPORTED;
    if (how == ChildOwnership::kMove) {
      // Another node's graph, or one holding the parent, is not the app's to move.
      if (g->owned_by_node || (parent && contains_graph(*g, parent)))
        return CUDA_ERROR_INVALID_VALUE;
      p->child = tables().graphs.at(id);  // keeps its id: the app's handle names it still
      return CUDA_SUCCESS;
    }
    p->child = clone_locked(*g, nullptr);
    p->child->owned_by_node = true;
    return CUDA_SUCCESS;
  }
  if (by_app && moved_server_graphs().contains(id)) return CUDA_ERROR_INVALID_VALUE;
  if (how == ChildOwnership::kClone && server_memory_nodes) return CUDA_ERROR_NOT_SUPPORTED;
  ArgWriter w(CallId::k_cuGraphInstantiateWithFlags);
  w.put(id);
  w.put<unsigned long long>(0);
  uint64_t exec = 0;
  if (CUresult e = w.call_for(&exec)) return e;
  p->server_child = std::make_shared<ServerExec>(exec);
  p->server_graph = id;
  p->server_memory_nodes = server_memory_nodes;
  if (how == ChildOwnership::kMove) p->moved_server_graph = std::make_shared<MovedServerGraph>(id);
  return CUDA_SUCCESS;
}

CUresult alloc_params(CUDA_MEM_ALLOC_NODE_PARAMS* a, Params* p) {
  if (a->bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (a->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      a->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      a->poolProps.handleTypes != CU_MEM_HANDLE_TYPE_NONE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUdeviceptr ptr = 0;
  LibraryCalls library;  // a graph's block, not the app's allocation
  if (CUresult e = cuMemAlloc_v2(&ptr, a->bytesize)) return e;
  {
    AllocTable& t = allocs();
    std::lock_guard lock(t.mu);
    t.blocks[ptr] = GraphAllocation{a->bytesize, 1, false};
  }
  a->dptr = ptr;
  p->type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  p->alloc = *a;
  p->alloc.accessDescs = nullptr;  // the app's array is not kept
  p->alloc.accessDescCount = 0;
  p->hold = std::make_shared<AllocationHold>(ptr);
  return CUDA_SUCCESS;
}

// A new node's dependencies: nodes of graph g, none twice. The caller holds the tables' lock.
CUresult dependencies_locked(const Graph& g, const CUgraphNode* deps, size_t ndeps,
                             std::vector<Node*>* d) {
  if (ndeps && !deps) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < ndeps; ++i) {
    Node* n = node_locked(deps[i]);
    if (!n || n->graph != &g || std::find(d->begin(), d->end(), n) != d->end()) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    d->push_back(n);
  }
  return CUDA_SUCCESS;
}

// Adds a node to graph g after its checked dependencies `d`; the caller holds the tables' lock.
void insert_node_locked(CUgraphNode* out, Graph* g, std::vector<Node*> d, Params p, Node** made) {
  Tables& t = tables();
  auto n = std::make_unique<Node>();
  n->id = t.next_id++;
  n->graph = g;
  n->p = std::move(p);
  n->deps = std::move(d);
  refresh_arg_ptrs(*n);
  if (n->p.child && n->p.child->id != 0) {
    // Moved in by the app: the node owns the graph, under the handle the app has.
    n->p.child->owned_by_node = n->p.child->moved = true;
  } else if (n->p.child) {
    n->p.child->id = t.next_id++, t.graphs[n->p.child->id] = n->p.child;
  }
  for (auto& b : n->p.bodies) b->id = t.next_id++, t.graphs[b->id] = b;
  *out = handle(n.get());
  t.nodes[n->id] = n.get();
  if (made) *made = n.get();
  g->nodes.push_back(std::move(n));
}

// Adds a node after checking its dependencies; the caller holds the tables' lock.
CUresult add_node_locked(CUgraphNode* out, CUgraph hg, const CUgraphNode* deps, size_t ndeps,
                         Params p, Node** made = nullptr) {
  Graph* g = graph_locked(hg);
  if (!g || !out) return CUDA_ERROR_INVALID_VALUE;
  std::vector<Node*> d;
  if (CUresult e = dependencies_locked(*g, deps, ndeps, &d)) return e;
  insert_node_locked(out, g, std::move(d), std::move(p), made);
  return CUDA_SUCCESS;
}

// Adds a node whose parameters `make` builds under the tables' lock, once the graph and the
// dependencies are known to be good (a moved child is the node's only if it is added).
template <typename F>
CUresult add_node(CUgraphNode* out, CUgraph hg, const CUgraphNode* deps, size_t ndeps, F make) {
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  Graph* g = graph_locked(hg);
  if (!g || !out) return CUDA_ERROR_INVALID_VALUE;
  std::vector<Node*> d;
  if (CUresult e = dependencies_locked(*g, deps, ndeps, &d)) return e;
  Params p;
  if (CUresult e = make(&p)) return e;
  insert_node_locked(out, g, std::move(d), std::move(p), nullptr);
  return CUDA_SUCCESS;
}

// A child graph node the app adds: `child` cloned or moved into it.
CUresult add_child_node(CUgraphNode* out, CUgraph hg, const CUgraphNode* deps, size_t ndeps,
                        CUgraph child, ChildOwnership how) {
  if (id_of(child) == id_of(hg)) return CUDA_ERROR_INVALID_VALUE;
  const bool memory = !is_local(id_of(child)) && captured_memory_nodes(id_of(child));
  return add_node(out, hg, deps, ndeps,
                  [&](Params* p) { return child_params(child, p, how, graph_locked(hg), memory); });
}

// A node with the parameters `make` builds from the app's `in`.
template <typename T>
CUresult add_params_node(CUgraphNode* out, CUgraph hg, const CUgraphNode* deps, size_t ndeps,
                         const T* in, CUresult (*make)(const T&, Params*)) {
  if (!in) return CUDA_ERROR_INVALID_VALUE;
  return add_node(out, hg, deps, ndeps, [&](Params* p) { return make(*in, p); });
}

// An event record or event wait node (`type`) on a non-null `event`.
CUresult add_event_node(CUgraphNode* out, CUgraph hg, const CUgraphNode* deps, size_t ndeps,
                        CUgraphNodeType type, CUevent event) {
  if (!event) return CUDA_ERROR_INVALID_VALUE;
  return add_node(out, hg, deps, ndeps, [&](Params* p) {
    p->type = type;
    p->event = event;
    return CUDA_SUCCESS;
  });
}

// A node of a graph, of the given type, for the getters and setters. A captured graph's nodes
// have no parameters here.
template <typename F>
CUresult with_node(CUgraphNode hn, CUgraphNodeType type, F f) {
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  Node* n = node_locked(hn);
  if (!n && captured_node_locked(hn)) return unsupported("node parameters of a captured graph");
  if (!n || n->p.type != type) return CUDA_ERROR_INVALID_VALUE;
  return f(*n);
}

// Sets a node's parameters to what `make` builds (a failed make changes nothing).
template <typename F>
CUresult set_node(CUgraphNode hn, CUgraphNodeType type, F make) {
  return with_node(hn, type, [&](Node& n) {
    Params p = n.p;
    if (CUresult e = make(&p)) return e;
    n.p = std::move(p);
    refresh_arg_ptrs(n);
    return CUDA_SUCCESS;
  });
}

// A getter: *out becomes the node's parameter `field`.
template <typename T>
CUresult get_param(CUgraphNode hn, CUgraphNodeType type, T Params::*field, T* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  return with_node(hn, type, [&](Node& n) {
    *out = n.p.*field;
    return CUDA_SUCCESS;
  });
}

// A setter of the parameters `make` builds from the app's `in`.
template <typename T>
CUresult set_params(CUgraphNode hn, CUgraphNodeType type, const T* in,
                    CUresult (*make)(const T&, Params*)) {
  if (!in) return CUDA_ERROR_INVALID_VALUE;
  return set_node(hn, type, [&](Params* p) { return make(*in, p); });
}

// A setter of one parameter, `field`, to a non-null `value`.
template <typename T>
CUresult set_param(CUgraphNode hn, CUgraphNodeType type, T Params::*field, T value) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  return set_node(hn, type, [&](Params* p) {
    p->*field = value;
    return CUDA_SUCCESS;
  });
}

}  // namespace

}  // namespace cuwire::client::graphs

namespace cuwire::client {

using namespace graphs;

// A captured graph with host copies (client-lib/calls/graphs_capture.cc): a client graph of the
// host-to-staging copies, the captured graph as a child, then the staging-to-host copies. Takes
// over `server_graph`.
CUresult wrap_captured_graph(uint64_t server_graph, const std::vector<CUDA_MEMCPY3D>& before,
                             const std::vector<CapturedAfter>& after, std::shared_ptr<void> keep,
                             CUgraph* out) {
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  auto g = std::make_shared<Graph>();
  g->id = t.next_id++;
  t.graphs[g->id] = g;
  const CUgraph hg = reinterpret_cast<CUgraph>(static_cast<uintptr_t>(g->id));
  std::vector<CUgraphNode> firsts;
  CUresult rc = CUDA_SUCCESS;
  for (const CUDA_MEMCPY3D& c : before) {
    Params p;
    p.type = CU_GRAPH_NODE_TYPE_MEMCPY;
    p.copy = c;
    p.keep = keep;
    CUgraphNode n = nullptr;
    if ((rc = add_node_locked(&n, hg, nullptr, 0, std::move(p)))) break;
    firsts.push_back(n);
  }
  Params child;
  CUgraphNode middle = nullptr;
  if (rc == CUDA_SUCCESS) rc = child_params(reinterpret_cast<CUgraph>(server_graph), &child);
  if (rc == CUDA_SUCCESS) {
    child.keep = keep;
    rc = add_node_locked(&middle, hg, firsts.data(), firsts.size(), std::move(child));
  }
  CUgraphNode last = middle;  // each after the one before: they keep the capture's order
  for (size_t i = 0; rc == CUDA_SUCCESS && i < after.size(); ++i) {
    Params p;
    if (after[i].host.fn) {
      p.type = CU_GRAPH_NODE_TYPE_HOST;
      p.host = after[i].host;
    } else if (after[i].for_host_functions) {
      p.type = CU_GRAPH_NODE_TYPE_EMPTY;
      p.sync_host_memory = true;
    } else {
      p.type = CU_GRAPH_NODE_TYPE_MEMCPY;
      p.copy = after[i].copy;
    }
    p.keep = keep;
    CUgraphNode n = nullptr;
    rc = add_node_locked(&n, hg, &last, 1, std::move(p));
    last = n;
  }
  destroy_server_graph(server_graph);  // the server's instance holds its operations
  if (rc != CUDA_SUCCESS) {
    unregister_graph_locked(*g);
    return rc;
  }
  *out = hg;
  return CUDA_SUCCESS;
}

namespace {

// A conditional node (cuGraphAddNode): IF with one or two bodies, WHILE with one, SWITCH with
// one or more, over a handle made for this graph; the bodies are the node's own graphs, which
// the app fills: c->phGraph_out becomes the node's array of them, as CUDA owns it.
CUresult add_conditional_node(CUgraphNode* out, CUgraph hg, const CUgraphNode* deps, size_t ndeps,
                              CUDA_CONDITIONAL_NODE_PARAMS* c) {
  constexpr unsigned kMaxBranches = 4096;
  bool size_ok = false;
  switch (c->type) {
    case CU_GRAPH_COND_TYPE_IF:
      size_ok = c->size == 1 || c->size == 2;
      break;
    case CU_GRAPH_COND_TYPE_WHILE:
      size_ok = c->size == 1;
      break;
    case CU_GRAPH_COND_TYPE_SWITCH:
      size_ok = c->size >= 1 && c->size <= kMaxBranches;
      break;
    default:
      break;
  }
  if (!size_ok) return CUDA_ERROR_INVALID_VALUE;
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  Graph* g = graph_locked(hg);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  const bool known = std::any_of(g->conds.begin(), g->conds.end(),
                                 [&](const auto& cell) { return cell->cell == c->handle; });
  if (!known) return CUDA_ERROR_INVALID_VALUE;  // not a handle made for this graph
  Params p;
  p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  p.cond = *c;
  p.cond.phGraph_out = nullptr;
  for (unsigned i = 0; i < c->size; ++i) {
    auto b = std::make_shared<Graph>();
    b->owned_by_node = true;
    p.bodies.push_back(std::move(b));
  }
  Node* made = nullptr;
  if (CUresult e = add_node_locked(out, hg, deps, ndeps, std::move(p), &made)) return e;
  for (const auto& b : made->p.bodies) {
    made->body_handles.push_back(reinterpret_cast<CUgraph>(static_cast<uintptr_t>(b->id)));
  }
  c->phGraph_out = made->body_handles.data();
  return CUDA_SUCCESS;
}

}  // namespace

CUresult make_child_node(CUgraphNode node, CUgraph child) {
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  Node* n = node_locked(node);
  if (!n || n->p.type != CU_GRAPH_NODE_TYPE_EMPTY) return CUDA_ERROR_INVALID_VALUE;
  Params p;
  if (CUresult e = child_params(child, &p)) return e;
  n->p = std::move(p);
  if (n->p.child) n->p.child->id = t.next_id++, t.graphs[n->p.child->id] = n->p.child;
  return CUDA_SUCCESS;
}

}  // namespace cuwire::client

using namespace cuwire;
using namespace cuwire::client;
using namespace cuwire::client::graphs;

extern "C" {

// ---- adding nodes

CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode* phGraphNode, CUgraph hGraph,
                                         const CUgraphNode* dependencies, size_t numDependencies,
                                         const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  return add_params_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams,
                         &kernel_params);
}

CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                      const CUgraphNode* dependencies, size_t numDependencies,
                                      const CUDA_MEMCPY3D* copyParams, CUcontext) {
  return add_params_node(phGraphNode, hGraph, dependencies, numDependencies, copyParams,
                         &memcpy_params);
}

CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                      const CUgraphNode* dependencies, size_t numDependencies,
                                      const CUDA_MEMSET_NODE_PARAMS* memsetParams, CUcontext) {
  return add_params_node(phGraphNode, hGraph, dependencies, numDependencies, memsetParams,
                         &memset_params);
}

CUresult CUDAAPI cuGraphAddHostNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                    const CUgraphNode* dependencies, size_t numDependencies,
                                    const CUDA_HOST_NODE_PARAMS* nodeParams) {
  return add_params_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams,
                         &host_params);
}

CUresult CUDAAPI cuGraphAddChildGraphNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                          const CUgraphNode* dependencies, size_t numDependencies,
                                          CUgraph childGraph) {
  return add_child_node(phGraphNode, hGraph, dependencies, numDependencies, childGraph,
                        ChildOwnership::kClone);
}

CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                     const CUgraphNode* dependencies, size_t numDependencies) {
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, [](Params* p) {
    p->type = CU_GRAPH_NODE_TYPE_EMPTY;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphAddEventRecordNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                           const CUgraphNode* dependencies, size_t numDependencies,
                                           CUevent event) {
  return add_event_node(phGraphNode, hGraph, dependencies, numDependencies,
                        CU_GRAPH_NODE_TYPE_EVENT_RECORD, event);
}

CUresult CUDAAPI cuGraphAddEventWaitNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                         const CUgraphNode* dependencies, size_t numDependencies,
                                         CUevent event) {
  return add_event_node(phGraphNode, hGraph, dependencies, numDependencies,
                        CU_GRAPH_NODE_TYPE_WAIT_EVENT, event);
}

CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                        const CUgraphNode* dependencies, size_t numDependencies,
                                        CUDA_MEM_ALLOC_NODE_PARAMS* nodeParams) {
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, [&](Params* p) {
    // A graph moved into a node takes no new memory nodes (CUDA's rule).
    if (graph_locked(hGraph)->moved) return CUDA_ERROR_INVALID_VALUE;
    return alloc_params(nodeParams, p);
  });
}

CUresult CUDAAPI cuGraphAddMemFreeNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                       const CUgraphNode* dependencies, size_t numDependencies,
                                       CUdeviceptr dptr) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, [&](Params* p) {
    if (graph_locked(hGraph)->moved) return CUDA_ERROR_INVALID_VALUE;
    p->type = CU_GRAPH_NODE_TYPE_MEM_FREE;
    p->free_ptr = dptr;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphConditionalHandleCreate(CUgraphConditionalHandle* pHandle_out,
                                                CUgraph hGraph, CUcontext ctx,
                                                unsigned int defaultLaunchValue,
                                                unsigned int flags) {
  if (!pHandle_out || (flags & ~unsigned{CU_GRAPH_COND_ASSIGN_DEFAULT})) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  (void)ctx;  // the handle's memory is the current context's
  // Without a graph: a relay's server asking its upstream for a bare handle
  // (server/calls/graphs.cc).
  if (hGraph) {
    Tables& t = tables();
    std::lock_guard lock(t.mu);
    if (!graph_locked(hGraph)) return CUDA_ERROR_INVALID_VALUE;
  }
  ArgWriter w(CallId::k_cuGraphConditionalHandleCreate);
  w.put<uint32_t>(defaultLaunchValue);
  w.put<uint32_t>(flags);
  uint64_t h = 0;
  if (CUresult e = w.call_for(&h)) return e;
  if (hGraph) {
    auto cell = std::make_shared<CondCell>(h, defaultLaunchValue, flags);
    Tables& t = tables();
    std::lock_guard lock(t.mu);
    Graph* g = graph_locked(hGraph);
    if (!g) return CUDA_ERROR_INVALID_VALUE;  // destroyed meanwhile; the cell goes with `cell`
    g->conds.push_back(std::move(cell));
  }
  *pHandle_out = h;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode* phGraphNode, CUgraph hGraph,
                                   const CUgraphNode* dependencies, const CUgraphEdgeData* edgeData,
                                   size_t numDependencies, CUgraphNodeParams* nodeParams) {
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  if (edgeData) {
    for (size_t i = 0; i < numDependencies; ++i) {
      if (edgeData[i].from_port || edgeData[i].to_port || edgeData[i].type) {
        return unsupported("cuGraphAddNode (edges with ports)");
      }
    }
  }
  switch (nodeParams->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      CUDA_KERNEL_NODE_PARAMS k{};
      std::memcpy(&k, &nodeParams->kernel, sizeof k);  // v3 has v2's layout
      return cuGraphAddKernelNode_v2(phGraphNode, hGraph, dependencies, numDependencies, &k);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if (nodeParams->memcpy.flags || nodeParams->memcpy.reserved) return CUDA_ERROR_INVALID_VALUE;
      return cuGraphAddMemcpyNode(phGraphNode, hGraph, dependencies, numDependencies,
                                  &nodeParams->memcpy.copyParams, nodeParams->memcpy.copyCtx);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const auto& m = nodeParams->memset;
      CUDA_MEMSET_NODE_PARAMS v1{m.dst, m.pitch, m.value, m.elementSize, m.width, m.height};
      return cuGraphAddMemsetNode(phGraphNode, hGraph, dependencies, numDependencies, &v1, m.ctx);
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
      CUDA_HOST_NODE_PARAMS h{nodeParams->host.fn, nodeParams->host.userData};
      return cuGraphAddHostNode(phGraphNode, hGraph, dependencies, numDependencies, &h);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH:
      if (nodeParams->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE) {
        return add_child_node(phGraphNode, hGraph, dependencies, numDependencies,
                              nodeParams->graph.graph, ChildOwnership::kMove);
      }
      if (nodeParams->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      return cuGraphAddChildGraphNode(phGraphNode, hGraph, dependencies, numDependencies,
                                      nodeParams->graph.graph);
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return cuGraphAddEmptyNode(phGraphNode, hGraph, dependencies, numDependencies);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return cuGraphAddEventWaitNode(phGraphNode, hGraph, dependencies, numDependencies,
                                     nodeParams->eventWait.event);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return cuGraphAddEventRecordNode(phGraphNode, hGraph, dependencies, numDependencies,
                                       nodeParams->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
      CUDA_MEM_ALLOC_NODE_PARAMS a{};
      a.poolProps = nodeParams->alloc.poolProps;
      a.accessDescs = nodeParams->alloc.accessDescs;
      a.accessDescCount = nodeParams->alloc.accessDescCount;
      a.bytesize = nodeParams->alloc.bytesize;
      CUresult rc = cuGraphAddMemAllocNode(phGraphNode, hGraph, dependencies, numDependencies, &a);
      if (rc == CUDA_SUCCESS) nodeParams->alloc.dptr = a.dptr;
      return rc;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      return cuGraphAddMemFreeNode(phGraphNode, hGraph, dependencies, numDependencies,
                                   nodeParams->free.dptr);
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      return add_conditional_node(phGraphNode, hGraph, dependencies, numDependencies,
                                  &nodeParams->conditional);
    default:
      return unsupported("cuGraphAddNode (external semaphore and memory-operation nodes)");
  }
}

// ---- node parameters

CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType* type) {
  if (!type) return CUDA_ERROR_INVALID_VALUE;
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  if (const CapturedNode* c = captured_node_locked(hNode)) {
    *type = c->shape->types[c->index];
    return CUDA_SUCCESS;
  }
  Node* n = node_locked(hNode);
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  *type = n->p.type;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphKernelNodeGetParams_v2(CUgraphNode hNode,
                                               CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  return get_param(hNode, CU_GRAPH_NODE_TYPE_KERNEL, &Params::kernel, nodeParams);
}

CUresult CUDAAPI cuGraphKernelNodeSetParams_v2(CUgraphNode hNode,
                                               const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  return set_params(hNode, CU_GRAPH_NODE_TYPE_KERNEL, nodeParams, &kernel_params);
}

// Kernel node attributes: kept with the node (cloned and instantiated with it) and given to
// each launch of it, where the server checks them as it checks cuLaunchKernelEx's.
CUresult CUDAAPI cuGraphKernelNodeGetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
                                               CUkernelNodeAttrValue* value_out) {
  if (!value_out) return CUDA_ERROR_INVALID_VALUE;
  return with_node(hNode, CU_GRAPH_NODE_TYPE_KERNEL, [&](Node& n) {
    if (!kernel_node_attribute(attr)) return CUDA_ERROR_INVALID_VALUE;
    *value_out = CUkernelNodeAttrValue{};  // what a node has until one is set
    for (const CUlaunchAttribute& a : n.p.attrs) {
      if (a.id == attr) *value_out = a.value;
    }
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphKernelNodeSetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
                                               const CUkernelNodeAttrValue* value) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (attr == CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE ||
      attr == CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING) {
    return unsupported(
        "cuGraphKernelNodeSetAttribute (device-updatable kernel nodes, NVLink "
        "scheduling hints)");
  }
  return with_node(hNode, CU_GRAPH_NODE_TYPE_KERNEL, [&](Node& n) {
    if (!kernel_node_attribute(attr)) return CUDA_ERROR_INVALID_VALUE;
    for (CUlaunchAttribute& a : n.p.attrs) {
      if (a.id == attr) {
        a.value = *value;
        return CUDA_SUCCESS;
      }
    }
    CUlaunchAttribute a{};
    a.id = attr;
    a.value = *value;
    n.p.attrs.push_back(a);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src) {
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  Node* to = node_locked(dst);
  const Node* from = node_locked(src);
  if (!to || !from || to->p.type != CU_GRAPH_NODE_TYPE_KERNEL ||
      from->p.type != CU_GRAPH_NODE_TYPE_KERNEL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  to->p.attrs = from->p.attrs;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphMemcpyNodeGetParams(CUgraphNode hNode, CUDA_MEMCPY3D* nodeParams) {
  return get_param(hNode, CU_GRAPH_NODE_TYPE_MEMCPY, &Params::copy, nodeParams);
}

CUresult CUDAAPI cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D* nodeParams) {
  return set_params(hNode, CU_GRAPH_NODE_TYPE_MEMCPY, nodeParams, &memcpy_params);
}

CUresult CUDAAPI cuGraphMemsetNodeGetParams(CUgraphNode hNode,
                                            CUDA_MEMSET_NODE_PARAMS* nodeParams) {
  return get_param(hNode, CU_GRAPH_NODE_TYPE_MEMSET, &Params::memset, nodeParams);
}

CUresult CUDAAPI cuGraphMemsetNodeSetParams(CUgraphNode hNode,
                                            const CUDA_MEMSET_NODE_PARAMS* nodeParams) {
  return set_params(hNode, CU_GRAPH_NODE_TYPE_MEMSET, nodeParams, &memset_params);
}

CUresult CUDAAPI cuGraphHostNodeGetParams(CUgraphNode hNode, CUDA_HOST_NODE_PARAMS* nodeParams) {
  return get_param(hNode, CU_GRAPH_NODE_TYPE_HOST, &Params::host, nodeParams);
}

CUresult CUDAAPI cuGraphHostNodeSetParams(CUgraphNode hNode,
                                          const CUDA_HOST_NODE_PARAMS* nodeParams) {
  return set_params(hNode, CU_GRAPH_NODE_TYPE_HOST, nodeParams, &host_params);
}

CUresult CUDAAPI cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph* phGraph) {
  if (!phGraph) return CUDA_ERROR_INVALID_VALUE;
  return with_node(hNode, CU_GRAPH_NODE_TYPE_GRAPH, [&](Node& n) {
    const uint64_t id = n.p.child ? n.p.child->id : n.p.server_graph;
    *phGraph = reinterpret_cast<CUgraph>(static_cast<uintptr_t>(id));
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphEventRecordNodeGetEvent(CUgraphNode hNode, CUevent* event_out) {
  return get_param(hNode, CU_GRAPH_NODE_TYPE_EVENT_RECORD, &Params::event, event_out);
}

CUresult CUDAAPI cuGraphEventRecordNodeSetEvent(CUgraphNode hNode, CUevent event) {
  return set_param(hNode, CU_GRAPH_NODE_TYPE_EVENT_RECORD, &Params::event, event);
}

CUresult CUDAAPI cuGraphEventWaitNodeGetEvent(CUgraphNode hNode, CUevent* event_out) {
  return get_param(hNode, CU_GRAPH_NODE_TYPE_WAIT_EVENT, &Params::event, event_out);
}

CUresult CUDAAPI cuGraphEventWaitNodeSetEvent(CUgraphNode hNode, CUevent event) {
  return set_param(hNode, CU_GRAPH_NODE_TYPE_WAIT_EVENT, &Params::event, event);
}

CUresult CUDAAPI cuGraphMemAllocNodeGetParams(CUgraphNode hNode,
                                              CUDA_MEM_ALLOC_NODE_PARAMS* params_out) {
  return get_param(hNode, CU_GRAPH_NODE_TYPE_MEM_ALLOC, &Params::alloc, params_out);
}

CUresult CUDAAPI cuGraphMemFreeNodeGetParams(CUgraphNode hNode, CUdeviceptr* dptr_out) {
  return get_param(hNode, CU_GRAPH_NODE_TYPE_MEM_FREE, &Params::free_ptr, dptr_out);
}

CUresult CUDAAPI cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams* nodeParams) {
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  switch (nodeParams->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      CUDA_KERNEL_NODE_PARAMS k{};
      std::memcpy(&k, &nodeParams->kernel, sizeof k);
      return cuGraphKernelNodeSetParams_v2(hNode, &k);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return cuGraphMemcpyNodeSetParams(hNode, &nodeParams->memcpy.copyParams);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const auto& m = nodeParams->memset;
      CUDA_MEMSET_NODE_PARAMS v1{m.dst, m.pitch, m.value, m.elementSize, m.width, m.height};
      return cuGraphMemsetNodeSetParams(hNode, &v1);
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
      CUDA_HOST_NODE_PARAMS h{nodeParams->host.fn, nodeParams->host.userData};
      return cuGraphHostNodeSetParams(hNode, &h);
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return cuGraphEventRecordNodeSetEvent(hNode, nodeParams->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return cuGraphEventWaitNodeSetEvent(hNode, nodeParams->eventWait.event);
    default:
      return CUDA_ERROR_INVALID_VALUE;  // CUDA changes no other type's parameters
  }
}

}  // extern "C"
