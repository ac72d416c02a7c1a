// Graphs built node by node, client side. A graph made with cuGraphCreate, its nodes and its
// executable graphs live in this process: adding, querying and changing nodes needs no round
// trip, and a launch replays the nodes, in an order that keeps every dependency, as the stream
// calls they stand for (a kernel launch, a copy, a memset, an event record or wait, a host
// function). Those calls are the ones the app could have made itself, so they reach the server
// fire-and-forget and in one batch, and every backend runs them; copies from or to host memory
// (pageable or pinned) take the host's bytes at each launch and deliver device-to-host results
// by the next synchronisation, as CUDA specifies for host memory in graphs.
//
// Graphs a stream capture recorded live on the server (sim_graph.cc, or the cuda backend's own
// graphs); their handles are the server's ids. They can be instantiated and launched as before,
// and become a node of a client graph as a child graph: the server instantiates it at once
// (which copies its operations, as CUDA clones a child graph) and the node launches that.
//
// Memory-allocation nodes allocate when they are added, so that the address is known at once
// and stays the same for every launch, as CUDA promises. The allocation is the graph's until
// the graph and its executable graphs are gone; a free node or the app's cuMemFree of it only
// marks it free (the next launch makes it live again, at the same address), and it is given
// back once it is both free and no graph holds it.
//
// This file: the graphs and their tables, the memory of allocation nodes, creation and
// destruction, structure (nodes, edges, dependencies), cloning, DOT output. graphs_nodes.cc adds
// nodes and gets and sets their parameters; graphs_exec.cc instantiates, updates and launches;
// graphs_internal.h is what the three share.

#include <cuda.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "client-lib/calls/graphs_internal.h"
#include "client-lib/core/client_call.h"
#include "client-lib/core/client_state.h"
#include "client-lib/core/id_set.h"
#include "protocol/wire_formats.h"

namespace cuwire::client::graphs {

AllocTable& allocs() {
  static AllocTable* t = new AllocTable();  // leaked: used by atexit handlers too
  return *t;
}

bool release_if_done(AllocTable& t, std::map<CUdeviceptr, GraphAllocation>::iterator it) {
  if (it->second.holders > 0 || it->second.live) return false;
  t.blocks.erase(it);
  return true;
}

void allocated_by_launch(CUdeviceptr p, CUstream stream) {
  AllocTable& t = allocs();
  std::lock_guard lock(t.mu);
  auto it = t.blocks.find(p);
  if (it == t.blocks.end() || it->second.live) return;
  it->second.live = true;
  size_t need = it->second.bytes;
  auto take = [&need](size_t& pool) {
    const size_t n = std::min(need, pool);
    pool -= n;
    need -= n;
  };
  auto own = t.freed_on_stream.find(stream);
  if (own != t.freed_on_stream.end()) take(own->second);
  take(t.freed_anywhere);
  t.footprint += need;
  t.footprint_high = std::max(t.footprint_high, t.footprint);
}

bool allocation_live(CUdeviceptr p) {
  AllocTable& t = allocs();
  std::lock_guard lock(t.mu);
  auto it = t.blocks.find(p);
  return it != t.blocks.end() && it->second.live;
}

void freed(CUdeviceptr p, CUstream stream, bool on_stream) {
  AllocTable& t = allocs();
  bool give_back = false;
  {
    std::lock_guard lock(t.mu);
    auto it = t.blocks.find(p);
    if (it == t.blocks.end()) return;
    if (it->second.live) {
      (on_stream ? t.freed_on_stream[stream] : t.freed_anywhere) += it->second.bytes;
    }
    it->second.live = false;
    give_back = release_if_done(t, it);
  }
  if (give_back) {
    LibraryCalls library;
    cuMemFree_v2(p);
  }
}

IdSet& moved_server_graphs() {
  static IdSet* s = new IdSet();  // leaked: used by atexit handlers too
  return *s;
}

namespace {
void forget_shape(uint64_t graph);
}  // namespace

CUresult destroy_server_graph(uint64_t id) {
  forget_cached(id);
  forget_shape(id);
  ArgWriter w(CallId::k_cuGraphDestroy);
  w.put(id);
  return w.send_async();
}

Tables& tables() {
  static Tables* t = new Tables();  // leaked: used by atexit handlers too
  return *t;
}

KernelOfFunction& kernel_of_function() {
  static KernelOfFunction* t = new KernelOfFunction();  // leaked: used by atexit handlers too
  return *t;
}

Graph* graph_locked(CUgraph h) {
  auto it = tables().graphs.find(id_of(h));
  return it == tables().graphs.end() ? nullptr : it->second.get();
}
Node* node_locked(CUgraphNode h) {
  auto it = tables().nodes.find(id_of(h));
  return it == tables().nodes.end() ? nullptr : it->second;
}
std::shared_ptr<Exec> exec_locked(CUgraphExec h) {
  auto it = tables().execs.find(id_of(h));
  return it == tables().execs.end() ? nullptr : it->second;
}

namespace {

// The shape of captured graph `graph` (a server id), asked of the server the first time.
CUresult captured_shape(uint64_t graph, std::shared_ptr<const CapturedShape>* out) {
  Tables& t = tables();
  {
    std::lock_guard lock(t.mu);
    auto it = t.shapes.find(graph);
    if (it != t.shapes.end()) {
      *out = it->second;
      return CUDA_SUCCESS;
    }
  }
  ArgWriter w(CallId::k_cuGraphGetNodes);
  w.put(graph);
  w.put(uint32_t{1});
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  uint64_t n = 0, ne = 0;
  r.get_array(&n, 1);
  std::vector<uint32_t> types(r.ok() && n <= r.remaining() / sizeof(uint32_t) ? n : 0);
  r.get_array(types.data(), types.size());
  r.get_array(&ne, 1);
  std::vector<uint32_t> ends(r.ok() && ne <= r.remaining() / (2 * sizeof(uint32_t)) ? 2 * ne : 0);
  r.get_array(ends.data(), ends.size());
  if (CUresult e = r.finish()) return e;
  if (types.size() != n || ends.size() != 2 * ne) return CUDA_ERROR_INVALID_VALUE;
  auto shape = std::make_shared<CapturedShape>();
  for (uint32_t type : types) shape->types.push_back(static_cast<CUgraphNodeType>(type));
  for (size_t i = 0; i < ne; ++i) {
    if (ends[2 * i] >= n || ends[2 * i + 1] >= n) return CUDA_ERROR_INVALID_VALUE;
    shape->edges.emplace_back(ends[2 * i], ends[2 * i + 1]);
  }
  std::lock_guard lock(t.mu);
  auto [it, fresh] = t.shapes.emplace(graph, nullptr);
  if (fresh) {  // else another thread asked meanwhile: its handles stand
    for (size_t i = 0; i < n; ++i) shape->ids.push_back(t.next_id++);
    it->second = shape;
    for (size_t i = 0; i < n; ++i) {
      t.captured_nodes[shape->ids[i]] = CapturedNode{shape, static_cast<uint32_t>(i)};
    }
  }
  *out = it->second;
  return CUDA_SUCCESS;
}

// Forgets a captured graph's shape and its node handles (the graph is destroyed).
void forget_shape(uint64_t graph) {
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  auto it = t.shapes.find(graph);
  if (it == t.shapes.end()) return;
  for (uint64_t id : it->second->ids) t.captured_nodes.erase(id);
  t.shapes.erase(it);
}

}  // namespace

const CapturedNode* captured_node_locked(CUgraphNode h) {
  auto it = tables().captured_nodes.find(id_of(h));
  return it == tables().captured_nodes.end() ? nullptr : &it->second;
}

namespace {
// The handles of a captured node's neighbours: its dependencies, or (`dependents`) the nodes
// that depend on it.
std::vector<CUgraphNode> captured_neighbours(const CapturedNode& n, bool dependents) {
  std::vector<CUgraphNode> v;
  for (const auto& [from, to] : n.shape->edges) {
    if (dependents ? from == n.index : to == n.index) {
      v.push_back(handle(n.shape->ids[dependents ? to : from]));
    }
  }
  return v;
}
}  // namespace

void unregister_graph_locked(Graph& g) {
  Tables& t = tables();
  for (auto& n : g.nodes) {
    t.nodes.erase(n->id);
    if (n->p.child) unregister_graph_locked(*n->p.child);
    for (auto& b : n->p.bodies) unregister_graph_locked(*b);
  }
  t.graphs.erase(g.id);
}

void refresh_arg_ptrs(Node& n) {
  n.arg_ptrs.clear();
  if (n.p.type != CU_GRAPH_NODE_TYPE_KERNEL) return;
  n.p.kernel.kernelParams = nullptr;
  n.p.kernel.extra = nullptr;
  const std::vector<formats::ParamSlot>* slots = nullptr;
  if (param_layout(id_of(n.p.launch), &slots) != CUDA_SUCCESS) return;
  for (const auto& s : *slots) n.arg_ptrs.push_back(n.p.args.data() + s.offset);
  n.p.kernel.kernelParams = n.arg_ptrs.empty() ? nullptr : n.arg_ptrs.data();
}

namespace {
void find_restricted(const Graph& g, Restricted* r) {
  for (const auto& n : g.nodes) {
    if (r->memory && r->conditional) return;
    r->memory |= formats::is_memory_node(n->p.type) || n->p.server_memory_nodes;
    r->conditional |= n->p.type == CU_GRAPH_NODE_TYPE_CONDITIONAL;
    if (n->p.child) find_restricted(*n->p.child, r);
  }
}
}  // namespace
Restricted restricted_nodes(const Graph& g) {
  Restricted r;
  find_restricted(g, &r);
  return r;
}

bool captured_memory_nodes(uint64_t graph) {
  std::shared_ptr<const CapturedShape> shape;
  if (captured_shape(graph, &shape) != CUDA_SUCCESS) return false;
  return std::any_of(shape->types.begin(), shape->types.end(), formats::is_memory_node);
}

std::shared_ptr<Graph> clone_locked(const Graph& src, std::map<const Node*, Node*>* mapping) {
  Tables& t = tables();
  auto g = std::make_shared<Graph>();
  g->conds = src.conds;  // the clone's conditional nodes name the same handles
  std::map<const Node*, Node*> local;
  std::map<const Node*, Node*>& map = mapping ? *mapping : local;
  for (const auto& n : src.nodes) {
    auto c = std::make_unique<Node>();
    c->id = t.next_id++;
    c->graph = g.get();
    c->p = n->p;
    if (n->p.child) {
      c->p.child = clone_locked(*n->p.child, nullptr);
      c->p.child->owned_by_node = true;
      c->p.child->id = t.next_id++;
      t.graphs[c->p.child->id] = c->p.child;
    }
    for (auto& b : c->p.bodies) {
      b = clone_locked(*b, nullptr);
      b->owned_by_node = true;
      b->id = t.next_id++;
      t.graphs[b->id] = b;
      c->body_handles.push_back(reinterpret_cast<CUgraph>(static_cast<uintptr_t>(b->id)));
    }
    if (c->p.hold) {  // the clone holds the block too
      AllocTable& a = allocs();
      std::lock_guard lock(a.mu);
      auto it = a.blocks.find(c->p.hold->id);
      if (it != a.blocks.end()) ++it->second.holders;
      c->p.hold = std::make_shared<AllocationHold>(c->p.hold->id);
    }
    refresh_arg_ptrs(*c);
    map[n.get()] = c.get();
    t.nodes[c->id] = c.get();
    g->nodes.push_back(std::move(c));
  }
  // Dependencies once every node has its copy: a node may depend on one added after it
  // (cuGraphAddDependencies).
  for (size_t i = 0; i < src.nodes.size(); ++i) {
    for (Node* d : src.nodes[i]->deps) {
      auto it = map.find(d);
      if (it != map.end()) g->nodes[i]->deps.push_back(it->second);
    }
  }
  return g;
}

CUresult topological_order(const Graph& g, std::vector<const Node*>* out) {
  std::map<const Node*, size_t> pending;
  std::map<const Node*, std::vector<const Node*>> dependents;
  for (const auto& n : g.nodes) {
    pending[n.get()] = n->deps.size();
    for (const Node* d : n->deps) dependents[d].push_back(n.get());
  }
  std::set<size_t> ready;
  std::map<const Node*, size_t> index;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    index[g.nodes[i].get()] = i;
    if (g.nodes[i]->deps.empty()) ready.insert(i);
  }
  out->clear();
  while (!ready.empty()) {
    const Node* n = g.nodes[*ready.begin()].get();
    ready.erase(ready.begin());
    out->push_back(n);
    for (const Node* m : dependents[n]) {
      if (--pending[m] == 0) ready.insert(index[m]);
    }
  }
  return out->size() == g.nodes.size() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;  // a cycle
}

namespace {

// Fills an array the app sized (CUDA's convention for node lists): with `out` null, reports
// the count only; otherwise writes up to *count entries, nulls the rest, and reports how many
// it wrote.
template <typename T>
void fill(const std::vector<T>& v, T* out, size_t* count) {
  if (!out) {
    *count = v.size();
    return;
  }
  const size_t n = std::min(*count, v.size());
  std::copy(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n), out);
  for (size_t i = n; i < *count; ++i) out[i] = T{};
  *count = n;
}

std::vector<Node*> dependents_of(const Node& n) {
  std::vector<Node*> out;
  for (const auto& m : n.graph->nodes) {
    if (std::find(m->deps.begin(), m->deps.end(), &n) != m->deps.end()) out.push_back(m.get());
  }
  return out;
}

}  // namespace

}  // namespace cuwire::client::graphs

namespace cuwire::client {

using namespace graphs;

void on_kernel_function(CUfunction* f, CUkernel kernel) {
  KernelOfFunction& kf = kernel_of_function();
  std::lock_guard lock(kf.mu);
  kf.kernels[id_of(*f)] = kernel;
}

// The app freed memory an allocation node made (cuMemFree, cuMemFreeAsync): only marked free,
// the block stays the graph's (check= in the manifest).
namespace {
CUresult graph_free(CUdeviceptr p, CUstream stream, bool on_stream, bool* handled) {
  AllocTable& t = allocs();
  {
    std::lock_guard lock(t.mu);
    auto it = t.blocks.find(p);
    if (it == t.blocks.end()) return CUDA_SUCCESS;
    if (!it->second.live) return CUDA_ERROR_INVALID_VALUE;  // freed twice
  }
  *handled = true;
  freed(p, stream, on_stream);
  return CUDA_SUCCESS;
}
}  // namespace

CUresult check_graph_free(CUdeviceptr p, bool* handled) {
  return graph_free(p, nullptr, false, handled);
}

CUresult check_graph_free_async(CUdeviceptr p, CUstream stream, bool* handled) {
  return graph_free(p, stream, true, handled);
}

bool holds_only(CUgraph g, CUgraphNode only) {
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  const Graph* gr = graph_locked(g);
  if (!gr || !gr->conds.empty()) return false;
  if (gr->nodes.empty()) return true;
  return gr->nodes.size() == 1 && only && gr->nodes[0]->id == id_of(only);
}

bool is_built_graph(CUgraph g) {
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  return graph_locked(g) != nullptr;
}

void reset_graph_state() {
  {
    LaunchOrder& o = launch_order();
    std::lock_guard lock(o.mu);
    o.execs.clear();  // their events were the old session's
  }
  server_execs().clear();
  moved_server_graphs().clear();
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  t.graphs.clear();
  t.nodes.clear();
  t.execs.clear();
  AllocTable& a = allocs();
  std::lock_guard alock(a.mu);
  a.blocks.clear();
  a.footprint = a.footprint_high = a.freed_anywhere = 0;
  a.freed_on_stream.clear();
  KernelOfFunction& kf = kernel_of_function();
  std::lock_guard klock(kf.mu);
  kf.kernels.clear();
}

}  // namespace cuwire::client

using namespace cuwire;
using namespace cuwire::client;
using namespace cuwire::client::graphs;

namespace {

// cuGraphNodeGetDependencies_v2, or (dependents) cuGraphNodeGetDependentNodes_v2: the nodes
// `hNode` depends on, or that depend on it.
CUresult get_neighbours(CUgraphNode hNode, bool dependents, CUgraphNode* nodes,
                        CUgraphEdgeData* edgeData, size_t* num) {
  if (!num) return CUDA_ERROR_INVALID_VALUE;
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  std::vector<CUgraphNode> v;
  if (const CapturedNode* c = captured_node_locked(hNode)) {
    v = captured_neighbours(*c, dependents);
  } else if (Node* n = node_locked(hNode)) {
    for (const Node* d : dependents ? dependents_of(*n) : n->deps) v.push_back(handle(d));
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (edgeData && nodes) {
    for (size_t i = 0; i < std::min(*num, v.size()); ++i) edgeData[i] = CUgraphEdgeData{};
  }
  fill(v, nodes, num);
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuGraphCreate(CUgraph* phGraph, unsigned int flags) {
  if (!phGraph || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  auto g = std::make_shared<Graph>();
  g->id = t.next_id++;
  t.graphs[g->id] = g;
  *phGraph = reinterpret_cast<CUgraph>(static_cast<uintptr_t>(g->id));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) {
  const uint64_t id = id_of(hGraph);
  if (moved_server_graphs().contains(id)) return CUDA_ERROR_INVALID_VALUE;  // a node's now
  if (!is_local(id)) {
    user_objects_drop(id);
    return destroy_server_graph(id);
  }
  std::shared_ptr<Graph> gone;  // destroyed after the lock: its holds may free memory
  Tables& t = tables();
  {
    std::lock_guard lock(t.mu);
    auto it = t.graphs.find(id);
    if (it == t.graphs.end() || it->second->owned_by_node) return CUDA_ERROR_INVALID_VALUE;
    gone = it->second;
    unregister_graph_locked(*gone);
  }
  user_objects_drop(id);  // only once the destroy holds: a node's graph keeps its references
  return CUDA_SUCCESS;
}

// ---- structure

CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode* nodes, size_t* numNodes) {
  if (!numNodes) return CUDA_ERROR_INVALID_VALUE;
  if (!is_local(id_of(hGraph))) {  // a captured graph: its operations, counted on the server
    if (nodes) {
      std::shared_ptr<const CapturedShape> shape;
      if (CUresult e = captured_shape(id_of(hGraph), &shape)) return e;
      std::vector<CUgraphNode> v;
      for (uint64_t id : shape->ids) v.push_back(handle(id));
      fill(v, nodes, numNodes);
      return CUDA_SUCCESS;
    }
    ArgWriter w(CallId::k_cuGraphGetNodes);
    w.put_handle(hGraph);
    return w.call_for<uint64_t>(numNodes);
  }
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  Graph* g = graph_locked(hGraph);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUgraphNode> v;
  for (const auto& n : g->nodes) v.push_back(handle(n.get()));
  fill(v, nodes, numNodes);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode* rootNodes, size_t* numRootNodes) {
  if (!numRootNodes) return CUDA_ERROR_INVALID_VALUE;
  if (!is_local(id_of(hGraph))) {  // a captured graph: the nodes no edge leads to
    std::shared_ptr<const CapturedShape> shape;
    if (CUresult e = captured_shape(id_of(hGraph), &shape)) return e;
    std::vector<bool> led_to(shape->ids.size());
    for (const auto& edge : shape->edges) led_to[edge.second] = true;
    std::vector<CUgraphNode> v;
    for (size_t i = 0; i < shape->ids.size(); ++i) {
      if (!led_to[i]) v.push_back(handle(shape->ids[i]));
    }
    fill(v, rootNodes, numRootNodes);
    return CUDA_SUCCESS;
  }
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  Graph* g = graph_locked(hGraph);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUgraphNode> v;
  for (const auto& n : g->nodes) {
    if (n->deps.empty()) v.push_back(handle(n.get()));
  }
  fill(v, rootNodes, numRootNodes);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphGetEdges_v2(CUgraph hGraph, CUgraphNode* from, CUgraphNode* to,
                                    CUgraphEdgeData* edgeData, size_t* numEdges) {
  if (!numEdges || (!from != !to)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUgraphNode> f, d;
  if (!is_local(id_of(hGraph))) {  // a captured graph: the edges the server reported
    std::shared_ptr<const CapturedShape> shape;
    if (CUresult e = captured_shape(id_of(hGraph), &shape)) return e;
    for (const auto& [a, b] : shape->edges) {
      f.push_back(handle(shape->ids[a]));
      d.push_back(handle(shape->ids[b]));
    }
  }
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  if (is_local(id_of(hGraph))) {
    Graph* g = graph_locked(hGraph);
    if (!g) return CUDA_ERROR_INVALID_VALUE;
    for (const auto& n : g->nodes) {
      for (const Node* dep : n->deps) {
        f.push_back(handle(dep));
        d.push_back(handle(n.get()));
      }
    }
  }
  if (from) {
    size_t n = *numEdges;
    fill(f, from, &n);
    fill(d, to, numEdges);
    if (edgeData) {
      for (size_t i = 0; i < *numEdges; ++i) edgeData[i] = CUgraphEdgeData{};
    }
    return CUDA_SUCCESS;
  }
  *numEdges = f.size();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphNodeGetDependencies_v2(CUgraphNode hNode, CUgraphNode* dependencies,
                                               CUgraphEdgeData* edgeData, size_t* numDependencies) {
  return get_neighbours(hNode, false, dependencies, edgeData, numDependencies);
}

CUresult CUDAAPI cuGraphNodeGetDependentNodes_v2(CUgraphNode hNode, CUgraphNode* dependentNodes,
                                                 CUgraphEdgeData* edgeData,
                                                 size_t* numDependentNodes) {
  return get_neighbours(hNode, true, dependentNodes, edgeData, numDependentNodes);
}

CUresult CUDAAPI cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode* from,
                                           const CUgraphNode* to, const CUgraphEdgeData* edgeData,
                                           size_t numDependencies) {
  if (numDependencies && (!from || !to)) return CUDA_ERROR_INVALID_VALUE;
  if (edgeData) {
    for (size_t i = 0; i < numDependencies; ++i) {
      if (edgeData[i].from_port || edgeData[i].to_port || edgeData[i].type) {
        return unsupported("cuGraphAddDependencies (edges with ports)");
      }
    }
  }
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  Graph* g = graph_locked(hGraph);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < numDependencies; ++i) {  // all checked before any is added
    Node* f = node_locked(from[i]);
    Node* d = node_locked(to[i]);
    if (!f || !d || f == d || f->graph != g || d->graph != g ||
        std::find(d->deps.begin(), d->deps.end(), f) != d->deps.end()) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  for (size_t i = 0; i < numDependencies; ++i)
    node_locked(to[i])->deps.push_back(node_locked(from[i]));
  std::vector<const Node*> order;
  if (topological_order(*g, &order) != CUDA_SUCCESS) {  // a cycle: undo
    for (size_t i = 0; i < numDependencies; ++i) {
      auto& deps = node_locked(to[i])->deps;
      deps.erase(std::find(deps.begin(), deps.end(), node_locked(from[i])));
    }
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphRemoveDependencies_v2(CUgraph hGraph, const CUgraphNode* from,
                                              const CUgraphNode* to, const CUgraphEdgeData*,
                                              size_t numDependencies) {
  if (numDependencies && (!from || !to)) return CUDA_ERROR_INVALID_VALUE;
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  Graph* g = graph_locked(hGraph);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  if (restricted_nodes(*g).memory) return CUDA_ERROR_NOT_SUPPORTED;  // CUDA keeps their edges
  for (size_t i = 0; i < numDependencies; ++i) {
    Node* f = node_locked(from[i]);
    Node* d = node_locked(to[i]);
    if (!f || !d || d->graph != g ||
        std::find(d->deps.begin(), d->deps.end(), f) == d->deps.end()) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  for (size_t i = 0; i < numDependencies; ++i) {
    auto& deps = node_locked(to[i])->deps;
    deps.erase(std::find(deps.begin(), deps.end(), node_locked(from[i])));
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphDestroyNode(CUgraphNode hNode) {
  std::unique_ptr<Node> gone;
  Tables& t = tables();
  {
    std::lock_guard lock(t.mu);
    Node* n = node_locked(hNode);
    if (!n) return CUDA_ERROR_INVALID_VALUE;
    Graph* g = n->graph;
    if (restricted_nodes(*g).memory) return CUDA_ERROR_NOT_SUPPORTED;  // CUDA keeps their nodes
    for (auto& m : g->nodes) {
      auto& deps = m->deps;
      deps.erase(std::remove(deps.begin(), deps.end(), n), deps.end());
    }
    auto it = std::find_if(g->nodes.begin(), g->nodes.end(), [&](auto& p) { return p.get() == n; });
    gone = std::move(*it);
    g->nodes.erase(it);
    t.nodes.erase(gone->id);
    if (gone->p.child) unregister_graph_locked(*gone->p.child);
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphClone(CUgraph* phGraphClone, CUgraph originalGraph) {
  if (!phGraphClone) return CUDA_ERROR_INVALID_VALUE;
  if (!is_local(id_of(originalGraph))) {
    // A graph with memory nodes is not cloned (CUDA's rule).
    if (captured_memory_nodes(id_of(originalGraph))) return CUDA_ERROR_NOT_SUPPORTED;
    // A captured graph lives on the server, whose operations have no node handles here: the
    // clone is a built graph holding a copy of it as its one child-graph node (the server
    // copies the operations at once, as for any captured child), which launches the same work.
    CUgraph g = nullptr;
    if (CUresult e = cuGraphCreate(&g, 0)) return e;
    CUgraphNode n = nullptr;
    if (CUresult e = cuGraphAddChildGraphNode(&n, g, nullptr, 0, originalGraph)) {
      cuGraphDestroy(g);
      return e;
    }
    user_objects_copy(id_of(originalGraph), id_of(g));
    *phGraphClone = g;
    return CUDA_SUCCESS;
  }
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  Graph* g = graph_locked(originalGraph);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  // Nor is one with memory or conditional nodes.
  if (restricted_nodes(*g).any()) return CUDA_ERROR_NOT_SUPPORTED;
  std::shared_ptr<Graph> c = clone_locked(*g, nullptr);
  c->id = t.next_id++;
  t.graphs[c->id] = c;
  *phGraphClone = reinterpret_cast<CUgraph>(static_cast<uintptr_t>(c->id));
  user_objects_copy(id_of(originalGraph), c->id);
  return CUDA_SUCCESS;
}

// Clones keep the order of their original's nodes: the n-th node answers for the n-th.
CUresult CUDAAPI cuGraphNodeFindInClone(CUgraphNode* phNode, CUgraphNode hOriginalNode,
                                        CUgraph hClonedGraph) {
  if (!phNode) return CUDA_ERROR_INVALID_VALUE;
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  Node* n = node_locked(hOriginalNode);
  Graph* c = graph_locked(hClonedGraph);
  if (!n || !c || c->nodes.size() != n->graph->nodes.size()) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n->graph->nodes.size(); ++i) {
    if (n->graph->nodes[i].get() == n && c->nodes[i]->p.type == n->p.type) {
      *phNode = handle(c->nodes[i].get());
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

namespace {
CUresult write_file(const char* path, const void* data, size_t n) {
  FILE* f = std::fopen(path, "w");
  if (!f) return CUDA_ERROR_OPERATING_SYSTEM;
  const bool ok = std::fwrite(data, 1, n, f) == n;
  return std::fclose(f) == 0 && ok ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
}

// A captured graph's DOT, as the server's backend writes it (protocol/wire_formats.h): its
// length first, then the text.
CUresult server_dot_print(uint64_t graph, const char* path, unsigned flags) {
  uint64_t length = 0;
  {
    ArgWriter w(CallId::k_cuGraphDebugDotPrint);
    w.put(graph);
    w.put(static_cast<uint32_t>(flags));
    w.put(uint64_t{0});
    if (CUresult e = w.call_for(&length)) return e;
  }
  std::string text(length, '\0');
  if (length) {
    ArgWriter w(CallId::k_cuGraphDebugDotPrint);
    w.put(graph);
    w.put(static_cast<uint32_t>(flags));
    w.put(length);
    w.reply_bulk(text.data(), text.size());
    if (CUresult e = w.call_result()) return e;
  }
  return write_file(path, text.data(), text.size());
}
}  // namespace

CUresult CUDAAPI cuGraphDebugDotPrint(CUgraph hGraph, const char* path, unsigned int flags) {
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  if (!is_local(id_of(hGraph))) return server_dot_print(id_of(hGraph), path, flags);
  static const char* const kNames[] = {
      "kernel",    "memcpy",     "memset",       "host",           "graph",
      "empty",     "wait_event", "event_record", "ext_sem_signal", "ext_sem_wait",
      "mem_alloc", "mem_free",   "batch_mem_op", "conditional"};
  std::string dot = "digraph cuwire_graph {\n";
  {
    Tables& t = tables();
    std::lock_guard lock(t.mu);
    Graph* g = graph_locked(hGraph);
    if (!g) return CUDA_ERROR_INVALID_VALUE;
    for (const auto& n : g->nodes) {
      const unsigned type = n->p.type;
      dot += "  n" + std::to_string(n->id - kLocalIdBase) + " [label=\"" +
             (type < std::size(kNames) ? kNames[type] : "node") + "\"];\n";
      for (const Node* d : n->deps) {
        dot += "  n" + std::to_string(d->id - kLocalIdBase) + " -> n" +
               std::to_string(n->id - kLocalIdBase) + ";\n";
      }
    }
  }
  dot += "}\n";
  return write_file(path, dot.data(), dot.size());
}

// ---- memory of allocation nodes, as the device reports it

CUresult CUDAAPI cuDeviceGetGraphMemAttribute(CUdevice, CUgraphMem_attribute attr, void* value) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  AllocTable& t = allocs();
  std::lock_guard lock(t.mu);
  cuuint64_t v = 0;
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
      v = t.footprint;
      break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
      v = t.footprint_high;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  *static_cast<cuuint64_t*>(value) = v;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceSetGraphMemAttribute(CUdevice, CUgraphMem_attribute attr, void* value) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (attr != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH && attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;  // only a reset
  AllocTable& t = allocs();
  std::lock_guard lock(t.mu);
  t.footprint_high = t.footprint;
  return CUDA_SUCCESS;
}

// Blocks no graph holds are given back to the backend as soon as they are free; a trim gives
// the footprint's freed bytes back, keeping what is live.
CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice) {
  AllocTable& t = allocs();
  std::lock_guard lock(t.mu);
  size_t freed_bytes = t.freed_anywhere;
  for (const auto& [stream, n] : t.freed_on_stream) freed_bytes += n;
  t.footprint -= std::min(t.footprint, freed_bytes);
  t.freed_anywhere = 0;
  t.freed_on_stream.clear();
  return CUDA_SUCCESS;
}

}  // extern "C"
