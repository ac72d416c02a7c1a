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

#include <cuda.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "client_call.h"
#include "client_state.h"
#include "custom_calls.h"
#include "handle_kind.h"
#include "id_set.h"

namespace cuwire::client {
namespace {

// Client graph handles: ids of their own range, never a server id nor a client-minted one.
constexpr uint64_t kLocalIdBase = uint64_t{3} << 44;

// ---- memory of allocation nodes

struct GraphAllocation {
  size_t bytes = 0;
  int holders = 0;    // graphs and executable graphs whose allocation node made it
  bool live = false;  // allocated by a launch (or at creation) and not freed since
};

// What the device reports of graph memory follows CUDA's model, though the blocks are made
// when their nodes are added: the footprint is the physical memory a graph pool would hold.
// An allocation by a launch takes memory freed earlier on its stream (or freed synchronously),
// as CUDA reuses it where lifetimes cannot overlap, and grows the footprint by the rest;
// memory freed stays in the footprint until a trim gives it back. Nothing before a launch.
struct AllocTable {
  std::mutex mu;
  std::map<CUdeviceptr, GraphAllocation> blocks;  // guarded by mu
  // Guarded by mu: the footprint and its high mark; freed bytes it holds, reusable by later
  // allocations on the stream that freed them, or on any stream.
  size_t footprint = 0, footprint_high = 0;
  std::map<CUstream, size_t> freed_on_stream;
  size_t freed_anywhere = 0;
};
AllocTable& allocs() {
  static AllocTable* t = new AllocTable();  // leaked: used by atexit handlers too
  return *t;
}

// Gives a block back once no graph holds it and it is free. Called with the table's lock held;
// the free itself happens after (the block is out of the table, so the free is not intercepted).
bool release_if_done(AllocTable& t, std::map<CUdeviceptr, GraphAllocation>::iterator it) {
  if (it->second.holders > 0 || it->second.live) return false;
  t.blocks.erase(it);
  return true;
}

// A node's hold on its block: shared by a graph, its clones and its executable graphs.
struct AllocationHold {
  CUdeviceptr p;
  explicit AllocationHold(CUdeviceptr ptr) : p(ptr) {}
  AllocationHold(const AllocationHold&) = delete;
  AllocationHold& operator=(const AllocationHold&) = delete;
  ~AllocationHold() {
    AllocTable& t = allocs();
    bool give_back = false;
    {
      std::lock_guard lock(t.mu);
      auto it = t.blocks.find(p);
      if (it != t.blocks.end()) {
        --it->second.holders;
        give_back = release_if_done(t, it);
      }
    }
    if (give_back) {
      LibraryCalls library;
      cuMemFree_v2(p);
    }
  }
};

// An allocation node's block made live by a launch on `stream`.
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

// Whether an allocation node's block is live: made by a launch and not freed since.
bool allocation_live(CUdeviceptr p) {
  AllocTable& t = allocs();
  std::lock_guard lock(t.mu);
  auto it = t.blocks.find(p);
  return it != t.blocks.end() && it->second.live;
}

// The block freed, in order on `stream`, or at once (nullptr: cuMemFree); given back to the
// backend once no graph holds it.
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

// A captured graph instantiated on the server, launched by a child-graph node.
struct ServerExec {
  uint64_t id;
  explicit ServerExec(uint64_t i) : id(i) {}
  ServerExec(const ServerExec&) = delete;
  ServerExec& operator=(const ServerExec&) = delete;
  ~ServerExec() {
    ArgWriter w(CallId::k_cuGraphExecDestroy);
    w.put(id);
    w.send_async();
  }
};

// Captured graphs the app moved into a child graph node: the node owns them now.
IdSet& moved_server_graphs() {
  static IdSet* s = new IdSet();  // leaked: used by atexit handlers too
  return *s;
}

void forget_shape(uint64_t graph);

// Destroys captured graph `id` on the server, forgetting what the client kept of it (cached
// replies, its shape and node handles).
CUresult destroy_server_graph(uint64_t id) {
  forget_cached(id);
  forget_shape(id);
  ArgWriter w(CallId::k_cuGraphDestroy);
  w.put(id);
  return w.send_async();
}

// A captured graph moved into a child graph node: destroyed with the last node holding it
// (the node launches the server's instance of it, made when it was moved).
struct MovedServerGraph {
  uint64_t id;
  explicit MovedServerGraph(uint64_t i) : id(i) { moved_server_graphs().insert(id); }
  MovedServerGraph(const MovedServerGraph&) = delete;
  MovedServerGraph& operator=(const MovedServerGraph&) = delete;
  ~MovedServerGraph() {
    moved_server_graphs().erase(id);
    destroy_server_graph(id);
  }
};

struct Graph;

// A conditional handle (cuGraphConditionalHandleCreate): the server's 4-byte cell of device
// memory holding its value (server/custom_calls.cc), which device code sets through
// cudaGraphSetConditional. Freed when no graph, node or executable graph holds it.
struct CondCell {
  CUdeviceptr cell;
  unsigned value;  // the default
  unsigned flags;  // CU_GRAPH_COND_ASSIGN_DEFAULT: the default is set at each launch
  CondCell(CUdeviceptr c, unsigned v, unsigned f) : cell(c), value(v), flags(f) {}
  CondCell(const CondCell&) = delete;
  CondCell& operator=(const CondCell&) = delete;
  ~CondCell() {
    LibraryCalls library;
    cuMemFree_v2(cell);
  }
};

// What a node does: copied whole when a graph is cloned or instantiated.
struct Params {
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  // kernel: the launch, its arguments packed by the function's layout
  CUDA_KERNEL_NODE_PARAMS kernel{};  // as the app gave it (a CUfunction or a CUkernel)
  CUfunction launch = nullptr;       // the handle launched: the function, else the kernel
  std::vector<uint8_t> args;
  // kernel: its launch attributes (cuGraphKernelNodeSetAttribute), at most one per id
  std::vector<CUlaunchAttribute> attrs;
  // memcpy, memset, host, event record / wait, memory free
  CUDA_MEMCPY3D copy{};
  CUDA_MEMSET_NODE_PARAMS memset{};
  CUDA_HOST_NODE_PARAMS host{};
  CUevent event = nullptr;
  CUdeviceptr free_ptr = 0;
  // memory allocation
  CUDA_MEM_ALLOC_NODE_PARAMS alloc{};
  std::shared_ptr<AllocationHold> hold;
  // child graph: a client graph (the node's own copy) or a captured one, instantiated
  std::shared_ptr<Graph> child;
  std::shared_ptr<ServerExec> server_child;
  uint64_t server_graph = 0;
  bool server_memory_nodes = false;  // the captured child holds allocation or free nodes
  std::shared_ptr<struct MovedServerGraph> moved_server_graph;  // moved into the node
  // staging buffers a captured host copy left to this graph (capture.cc)
  std::shared_ptr<void> keep;
  // empty: the launch waits here for the stream, which brings the device's writes to pinned
  // memory to the host before the host functions after it (a capture's, capture.cc)
  bool sync_host_memory = false;
  // conditional: the handle, the type and the body graphs (the node's own)
  CUDA_CONDITIONAL_NODE_PARAMS cond{};
  std::vector<std::shared_ptr<Graph>> bodies;
};

struct Node {
  uint64_t id = 0;
  Graph* graph = nullptr;
  Params p;
  std::vector<Node*> deps;
  // The kernel's arguments as pointers into p.args, for cuGraphKernelNodeGetParams.
  std::vector<void*> arg_ptrs;
  // A conditional node's body graphs, the array CUDA hands the app (phGraph_out).
  std::vector<CUgraph> body_handles;
};

struct Graph {
  uint64_t id = 0;
  std::vector<std::unique_ptr<Node>> nodes;  // in the order they were added
  bool owned_by_node = false;                // a child graph node's copy: not destroyed by the app
  // Moved into a child graph node (CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE): the app's handle now
  // names the node's graph, which is not instantiated, moved or updated from on its own, and
  // takes no new allocation or free nodes.
  bool moved = false;
  // A graph with allocation, free or conditional nodes has one executable graph at a time.
  std::weak_ptr<struct Exec> sole_exec;
  std::vector<std::shared_ptr<CondCell>> conds;  // the conditional handles made for it
};

struct ExecNode {
  uint64_t node = 0;  // the graph node it came from: the handle exec updates name
  std::vector<size_t> deps;  // its dependencies, as places in Exec::order, ascending
  Params p;
  bool enabled = true;
  std::shared_ptr<struct Exec> child;  // a client child graph, instantiated
  std::vector<std::shared_ptr<struct Exec>> bodies;  // a conditional node's, instantiated
};

struct Exec {
  uint64_t id = 0;
  unsigned long long flags = 0;
  std::vector<ExecNode> order;  // a topological order of the graph's nodes
  // The conditional handles of the graph and of those inside it: each launch sets those with
  // CU_GRAPH_COND_ASSIGN_DEFAULT to their default first.
  std::vector<std::shared_ptr<CondCell>> conds;
};

// A captured graph's shape, as the server reports it (custom_cuGraphGetNodes): its nodes, under
// handles of the client's own, with their types and edges. Fetched at the first question about
// its nodes; a captured graph does not change. Its nodes answer questions of structure and
// type; their parameters live on the server and are not reported.
struct CapturedShape {
  std::vector<uint64_t> ids;  // node handles, in the server's order
  std::vector<CUgraphNodeType> types;
  std::vector<std::pair<uint32_t, uint32_t>> edges;  // (from, to) as indexes of ids
};
struct CapturedNode {
  std::shared_ptr<const CapturedShape> shape;
  uint32_t index;
};

struct Tables {
  // Recursive: a graph, node or executable graph destroyed under it may hold the last
  // reference to a captured graph moved into a node (MovedServerGraph), whose destruction
  // forgets that graph's shape under it again.
  std::recursive_mutex mu;
  uint64_t next_id = kLocalIdBase + 1;
  std::map<uint64_t, std::shared_ptr<Graph>> graphs;  // guarded by mu
  std::map<uint64_t, Node*> nodes;                    // guarded by mu
  std::map<uint64_t, std::shared_ptr<Exec>> execs;    // guarded by mu
  // Captured graphs' shapes by graph id, and their nodes by handle; guarded by mu.
  std::map<uint64_t, std::shared_ptr<const CapturedShape>> shapes;
  std::map<uint64_t, CapturedNode> captured_nodes;
};
Tables& tables() {
  static Tables* t = new Tables();  // leaked: used by atexit handlers too
  return *t;
}

// The kernel each function came from (cuKernelGetFunction): a kernel node reports both, and the
// runtime finds its own function by the kernel.
struct KernelOfFunction {
  std::mutex mu;
  std::map<uint64_t, CUkernel> kernels;  // guarded by mu
};
KernelOfFunction& kernel_of_function() {
  static KernelOfFunction* t = new KernelOfFunction();  // leaked: used by atexit handlers too
  return *t;
}

uint64_t id_of(const void* h) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(h)); }
bool is_local(uint64_t id) { return id >= kLocalIdBase && id < kLocalIdBase + kIdRange; }

// Lookups; the caller holds the tables' lock.
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

CUgraphNode handle(const Node* n) { return reinterpret_cast<CUgraphNode>(static_cast<uintptr_t>(n->id)); }
CUgraphNode handle(uint64_t id) { return reinterpret_cast<CUgraphNode>(static_cast<uintptr_t>(id)); }

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

const CapturedNode* captured_node_locked(CUgraphNode h) {
  auto it = tables().captured_nodes.find(id_of(h));
  return it == tables().captured_nodes.end() ? nullptr : &it->second;
}

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

void unregister_graph_locked(Graph& g) {
  Tables& t = tables();
  for (auto& n : g.nodes) {
    t.nodes.erase(n->id);
    if (n->p.child) unregister_graph_locked(*n->p.child);
    for (auto& b : n->p.bodies) unregister_graph_locked(*b);
  }
  t.graphs.erase(g.id);
}

// The node's kernel arguments as the app gave them: pointers into the packed copy.
void refresh_arg_ptrs(Node& n) {
  n.arg_ptrs.clear();
  if (n.p.type != CU_GRAPH_NODE_TYPE_KERNEL) return;
  n.p.kernel.kernelParams = nullptr;
  n.p.kernel.extra = nullptr;
  const std::vector<custom::ParamSlot>* slots = nullptr;
  if (param_layout(id_of(n.p.launch), &slots) != CUDA_SUCCESS) return;
  for (const auto& s : *slots) n.arg_ptrs.push_back(n.p.args.data() + s.offset);
  n.p.kernel.kernelParams = n.arg_ptrs.empty() ? nullptr : n.arg_ptrs.data();
}

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
  if (m.elementSize != 1 && m.elementSize != 2 && m.elementSize != 4) return CUDA_ERROR_INVALID_VALUE;
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

std::shared_ptr<Graph> clone_locked(const Graph& src, std::map<const Node*, Node*>* mapping);

// What a graph holds that CUDA restricts, its child graphs' included: allocation and free nodes
// (no clone, no child but a moved one, one executable graph at a time, no node or edge
// removed), conditional nodes (no clone, no child, one executable graph at a time).
struct Restricted {
  bool memory = false;       // allocation or free nodes
  bool conditional = false;  // conditional nodes
  bool any() const { return memory || conditional; }
};
void find_restricted(const Graph& g, Restricted* r) {
  for (const auto& n : g.nodes) {
    if (r->memory && r->conditional) return;
    r->memory |= custom::is_memory_node(n->p.type) || n->p.server_memory_nodes;
    r->conditional |= n->p.type == CU_GRAPH_NODE_TYPE_CONDITIONAL;
    if (n->p.child) find_restricted(*n->p.child, r);
  }
}
Restricted restricted_nodes(const Graph& g) {
  Restricted r;
  find_restricted(g, &r);
  return r;
}

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
// capture (capture.cc's segments and wrapped copies, which follow CUDA's rules already).
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
      if (g->owned_by_node || (parent && contains_graph(*g, parent))) return CUDA_ERROR_INVALID_VALUE;
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
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  uint64_t exec = 0;
  r.get_array(&exec, 1);
  if (CUresult e = r.finish()) return e;
  p->server_child = std::make_shared<ServerExec>(exec);
  p->server_graph = id;
  p->server_memory_nodes = server_memory_nodes;
  if (how == ChildOwnership::kMove) p->moved_server_graph = std::make_shared<MovedServerGraph>(id);
  return CUDA_SUCCESS;
}

// Whether captured graph `graph` holds allocation or free nodes (its shape, asked of the server
// once). A graph too large to list counts as holding none.
bool captured_memory_nodes(uint64_t graph) {
  std::shared_ptr<const CapturedShape> shape;
  if (captured_shape(graph, &shape) != CUDA_SUCCESS) return false;
  return std::any_of(shape->types.begin(), shape->types.end(), custom::is_memory_node);
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
  return add_node(out, hg, deps, ndeps, [&](Params* p) {
    return child_params(child, p, how, graph_locked(hg), memory);
  });
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
      auto it = a.blocks.find(c->p.hold->p);
      if (it != a.blocks.end()) ++it->second.holders;
      c->p.hold = std::make_shared<AllocationHold>(c->p.hold->p);
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

// The graph's nodes in an order that keeps every dependency (ties: the order they were added).
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
      std::erase_if(en.p.attrs,
                    [](const CUlaunchAttribute& a) { return a.id == CU_LAUNCH_ATTRIBUTE_PRIORITY; });
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
  if (order.size() != was.order.size()) return fail(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, nullptr);
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
      case CU_GRAPH_NODE_TYPE_MEM_ALLOC: same = p.alloc.dptr == before.p.alloc.dptr; break;
      case CU_GRAPH_NODE_TYPE_MEM_FREE: same = p.free_ptr == before.p.free_ptr; break;
      case CU_GRAPH_NODE_TYPE_GRAPH:
        // A built child and a captured one (run by the server) are not one topology.
        if (!p.child != !before.child) return fail(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, now);
        break;
      default: break;
    }
    if (!same) return fail(CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED, now);
    // Inside a child or a body, the node named is the one of g holding it (CUDA: "the node
    // from hGraph").
    if (p.child && check_update_locked(*before.child, *p.child, info)) {
      return fail(info->result, now);
    }
    for (size_t b = 0; b < p.bodies.size(); ++b) {
      if (check_update_locked(*before.bodies[b], *p.bodies[b], info)) return fail(info->result, now);
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
        case 1: return cuMemsetD2D8Async(m.dst, pitch, static_cast<unsigned char>(m.value), m.width, m.height, s);
        case 2: return cuMemsetD2D16Async(m.dst, pitch, static_cast<unsigned short>(m.value), m.width, m.height, s);
        default: return cuMemsetD2D32Async(m.dst, pitch, m.value, m.width, m.height, s);
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

// Launches of one executable graph run one after another, whatever their streams: CUDA orders
// each behind the graph's earlier launches. A launch on another stream than the last one
// waits for an event recorded now on that one, which may wait for a little more than that
// launch (work queued there since), never less. A launch into a capturing stream is a node of
// that capture, not a launch, and is not ordered here.
struct LaunchOrder {
  struct Last {
    CUstream stream = nullptr;
    CUevent event = nullptr;  // made on the first change of stream
  };
  std::mutex mu;
  std::map<uint64_t, Last> execs;  // guarded by mu
};
LaunchOrder& launch_order() {
  static LaunchOrder* o = new LaunchOrder();  // leaked: used by atexit handlers too
  return *o;
}

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

// The executable graphs the app instantiated from captured graphs and has not destroyed, with
// the flags they were instantiated with: a launch, upload or destroy of another id is refused
// here (the server's answer would come only with the next synchronisation).
IdSet& server_execs() {
  static IdSet* e = new IdSet();  // leaked: used by atexit handlers too
  return *e;
}
bool server_exec_live(uint64_t id) { return server_execs().contains(id); }

CUresult server_graph_launch(uint64_t exec, CUstream s) {
  ArgWriter w(CallId::k_cuGraphLaunch);
  w.put(exec);
  w.put_handle(s);
  return w.send_async();
}

}  // namespace

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

// A captured graph with host copies (capture.cc): a client graph of the host-to-staging copies,
// the captured graph as a child, then the staging-to-host copies. Takes over `server_graph`.
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
    case CU_GRAPH_COND_TYPE_IF: size_ok = c->size == 1 || c->size == 2; break;
    case CU_GRAPH_COND_TYPE_WHILE: size_ok = c->size == 1; break;
    case CU_GRAPH_COND_TYPE_SWITCH: size_ok = c->size >= 1 && c->size <= kMaxBranches; break;
    default: break;
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

// ---- adding nodes

CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode* phGraphNode, CUgraph hGraph,
                                         const CUgraphNode* dependencies, size_t numDependencies,
                                         const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  return add_node(phGraphNode, hGraph, dependencies, numDependencies,
                  [&](Params* p) { return kernel_params(*nodeParams, p); });
}

CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                      const CUgraphNode* dependencies, size_t numDependencies,
                                      const CUDA_MEMCPY3D* copyParams, CUcontext) {
  if (!copyParams) return CUDA_ERROR_INVALID_VALUE;
  return add_node(phGraphNode, hGraph, dependencies, numDependencies,
                  [&](Params* p) { return memcpy_params(*copyParams, p); });
}

CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                      const CUgraphNode* dependencies, size_t numDependencies,
                                      const CUDA_MEMSET_NODE_PARAMS* memsetParams, CUcontext) {
  if (!memsetParams) return CUDA_ERROR_INVALID_VALUE;
  return add_node(phGraphNode, hGraph, dependencies, numDependencies,
                  [&](Params* p) { return memset_params(*memsetParams, p); });
}

CUresult CUDAAPI cuGraphAddHostNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                    const CUgraphNode* dependencies, size_t numDependencies,
                                    const CUDA_HOST_NODE_PARAMS* nodeParams) {
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  return add_node(phGraphNode, hGraph, dependencies, numDependencies,
                  [&](Params* p) { return host_params(*nodeParams, p); });
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
  if (!event) return CUDA_ERROR_INVALID_VALUE;
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, [&](Params* p) {
    p->type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
    p->event = event;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphAddEventWaitNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                         const CUgraphNode* dependencies, size_t numDependencies,
                                         CUevent event) {
  if (!event) return CUDA_ERROR_INVALID_VALUE;
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, [&](Params* p) {
    p->type = CU_GRAPH_NODE_TYPE_WAIT_EVENT;
    p->event = event;
    return CUDA_SUCCESS;
  });
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
  // Without a graph: a relay's server asking its upstream for a bare handle (custom_calls.cc).
  if (hGraph) {
    Tables& t = tables();
    std::lock_guard lock(t.mu);
    if (!graph_locked(hGraph)) return CUDA_ERROR_INVALID_VALUE;
  }
  ArgWriter w(CallId::k_cuGraphConditionalHandleCreate);
  w.put<uint32_t>(defaultLaunchValue);
  w.put<uint32_t>(flags);
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  uint64_t h = 0;
  r.get_array(&h, 1);
  if (CUresult e = r.finish()) return e;
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

CUresult CUDAAPI cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  return with_node(hNode, CU_GRAPH_NODE_TYPE_KERNEL, [&](Node& n) {
    *nodeParams = n.p.kernel;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphKernelNodeSetParams_v2(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  return set_node(hNode, CU_GRAPH_NODE_TYPE_KERNEL,
                  [&](Params* p) { return kernel_params(*nodeParams, p); });
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
    return unsupported("cuGraphKernelNodeSetAttribute (device-updatable kernel nodes, NVLink "
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
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  return with_node(hNode, CU_GRAPH_NODE_TYPE_MEMCPY, [&](Node& n) {
    *nodeParams = n.p.copy;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D* nodeParams) {
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  return set_node(hNode, CU_GRAPH_NODE_TYPE_MEMCPY,
                  [&](Params* p) { return memcpy_params(*nodeParams, p); });
}

CUresult CUDAAPI cuGraphMemsetNodeGetParams(CUgraphNode hNode, CUDA_MEMSET_NODE_PARAMS* nodeParams) {
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  return with_node(hNode, CU_GRAPH_NODE_TYPE_MEMSET, [&](Node& n) {
    *nodeParams = n.p.memset;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphMemsetNodeSetParams(CUgraphNode hNode, const CUDA_MEMSET_NODE_PARAMS* nodeParams) {
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  return set_node(hNode, CU_GRAPH_NODE_TYPE_MEMSET,
                  [&](Params* p) { return memset_params(*nodeParams, p); });
}

CUresult CUDAAPI cuGraphHostNodeGetParams(CUgraphNode hNode, CUDA_HOST_NODE_PARAMS* nodeParams) {
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  return with_node(hNode, CU_GRAPH_NODE_TYPE_HOST, [&](Node& n) {
    *nodeParams = n.p.host;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphHostNodeSetParams(CUgraphNode hNode, const CUDA_HOST_NODE_PARAMS* nodeParams) {
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  return set_node(hNode, CU_GRAPH_NODE_TYPE_HOST,
                  [&](Params* p) { return host_params(*nodeParams, p); });
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
  if (!event_out) return CUDA_ERROR_INVALID_VALUE;
  return with_node(hNode, CU_GRAPH_NODE_TYPE_EVENT_RECORD, [&](Node& n) {
    *event_out = n.p.event;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphEventRecordNodeSetEvent(CUgraphNode hNode, CUevent event) {
  if (!event) return CUDA_ERROR_INVALID_VALUE;
  return set_node(hNode, CU_GRAPH_NODE_TYPE_EVENT_RECORD, [&](Params* p) {
    p->event = event;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphEventWaitNodeGetEvent(CUgraphNode hNode, CUevent* event_out) {
  if (!event_out) return CUDA_ERROR_INVALID_VALUE;
  return with_node(hNode, CU_GRAPH_NODE_TYPE_WAIT_EVENT, [&](Node& n) {
    *event_out = n.p.event;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphEventWaitNodeSetEvent(CUgraphNode hNode, CUevent event) {
  if (!event) return CUDA_ERROR_INVALID_VALUE;
  return set_node(hNode, CU_GRAPH_NODE_TYPE_WAIT_EVENT, [&](Params* p) {
    p->event = event;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphMemAllocNodeGetParams(CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS* params_out) {
  if (!params_out) return CUDA_ERROR_INVALID_VALUE;
  return with_node(hNode, CU_GRAPH_NODE_TYPE_MEM_ALLOC, [&](Node& n) {
    *params_out = n.p.alloc;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphMemFreeNodeGetParams(CUgraphNode hNode, CUdeviceptr* dptr_out) {
  if (!dptr_out) return CUDA_ERROR_INVALID_VALUE;
  return with_node(hNode, CU_GRAPH_NODE_TYPE_MEM_FREE, [&](Node& n) {
    *dptr_out = n.p.free_ptr;
    return CUDA_SUCCESS;
  });
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
    OutReader r;
    if (CUresult e = w.call(&r)) return e;
    uint64_t n = 0;
    r.get_array(&n, 1);
    if (CUresult e = r.finish()) return e;
    *numNodes = n;
    return CUDA_SUCCESS;
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
  if (!numDependencies) return CUDA_ERROR_INVALID_VALUE;
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  std::vector<CUgraphNode> v;
  if (const CapturedNode* c = captured_node_locked(hNode)) {
    v = captured_neighbours(*c, false);
  } else if (Node* n = node_locked(hNode)) {
    for (const Node* d : n->deps) v.push_back(handle(d));
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (edgeData && dependencies) {
    for (size_t i = 0; i < std::min(*numDependencies, v.size()); ++i) edgeData[i] = CUgraphEdgeData{};
  }
  fill(v, dependencies, numDependencies);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphNodeGetDependentNodes_v2(CUgraphNode hNode, CUgraphNode* dependentNodes,
                                                 CUgraphEdgeData* edgeData, size_t* numDependentNodes) {
  if (!numDependentNodes) return CUDA_ERROR_INVALID_VALUE;
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  std::vector<CUgraphNode> v;
  if (const CapturedNode* c = captured_node_locked(hNode)) {
    v = captured_neighbours(*c, true);
  } else if (Node* n = node_locked(hNode)) {
    for (const Node* d : dependents_of(*n)) v.push_back(handle(d));
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (edgeData && dependentNodes) {
    for (size_t i = 0; i < std::min(*numDependentNodes, v.size()); ++i) edgeData[i] = CUgraphEdgeData{};
  }
  fill(v, dependentNodes, numDependentNodes);
  return CUDA_SUCCESS;
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
  for (size_t i = 0; i < numDependencies; ++i) node_locked(to[i])->deps.push_back(node_locked(from[i]));
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
    if (!f || !d || d->graph != g || std::find(d->deps.begin(), d->deps.end(), f) == d->deps.end()) {
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

// A captured graph's DOT, as the server's backend writes it (protocol/custom_calls.h): its
// length first, then the text.
CUresult server_dot_print(uint64_t graph, const char* path, unsigned flags) {
  uint64_t length = 0;
  {
    ArgWriter w(CallId::k_cuGraphDebugDotPrint);
    w.put(graph);
    w.put(static_cast<uint32_t>(flags));
    w.put(uint64_t{0});
    OutReader r;
    if (CUresult e = w.call(&r)) return e;
    r.get_array(&length, 1);
    if (CUresult e = r.finish()) return e;
  }
  std::string text(length, '\0');
  if (length) {
    ArgWriter w(CallId::k_cuGraphDebugDotPrint);
    w.put(graph);
    w.put(static_cast<uint32_t>(flags));
    w.put(length);
    w.reply_bulk(text.data(), text.size());
    OutReader r;
    if (CUresult e = w.call(&r)) return e;
    if (CUresult e = r.finish()) return e;
  }
  return write_file(path, text.data(), text.size());
}
}  // namespace

CUresult CUDAAPI cuGraphDebugDotPrint(CUgraph hGraph, const char* path, unsigned int flags) {
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  if (!is_local(id_of(hGraph))) return server_dot_print(id_of(hGraph), path, flags);
  static const char* const kNames[] = {"kernel", "memcpy", "memset", "host", "graph", "empty",
                                       "wait_event", "event_record", "ext_sem_signal",
                                       "ext_sem_wait", "mem_alloc", "mem_free", "batch_mem_op",
                                       "conditional"};
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
    OutReader r;
    if (CUresult e = w.call(&r)) return e;
    r.get_handles(phGraphExec, 1);
    if (CUresult e = r.finish()) return e;
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
    if (!(x->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)) return CUDA_ERROR_INVALID_VALUE;
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
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  return set_exec_node(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_KERNEL,
                       [&](Params* p) { return kernel_params(*nodeParams, p); });
}

CUresult CUDAAPI cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_MEMCPY3D* copyParams, CUcontext) {
  if (!copyParams) return CUDA_ERROR_INVALID_VALUE;
  return set_exec_node(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_MEMCPY,
                       [&](Params* p) { return memcpy_params(*copyParams, p); });
}

CUresult CUDAAPI cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_MEMSET_NODE_PARAMS* memsetParams, CUcontext) {
  if (!memsetParams) return CUDA_ERROR_INVALID_VALUE;
  return set_exec_node(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_MEMSET,
                       [&](Params* p) { return memset_params(*memsetParams, p); });
}

CUresult CUDAAPI cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                              const CUDA_HOST_NODE_PARAMS* nodeParams) {
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  return set_exec_node(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_HOST,
                       [&](Params* p) { return host_params(*nodeParams, p); });
}

CUresult CUDAAPI cuGraphExecEventRecordNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                    CUevent event) {
  if (!event) return CUDA_ERROR_INVALID_VALUE;
  return set_exec_node(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_EVENT_RECORD, [&](Params* p) {
    p->event = event;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphExecEventWaitNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                  CUevent event) {
  if (!event) return CUDA_ERROR_INVALID_VALUE;
  return set_exec_node(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_WAIT_EVENT, [&](Params* p) {
    p->event = event;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                    CUgraph childGraph) {
  Tables& t = tables();
  std::lock_guard lock(t.mu);
  std::shared_ptr<Exec> x = exec_locked(hGraphExec);
  if (!x) return CUDA_ERROR_INVALID_VALUE;
  ExecNode* en = exec_node(*x, hNode);
  Graph* g = graph_locked(childGraph);
  if (!en || en->p.type != CU_GRAPH_NODE_TYPE_GRAPH || !en->child || !g) return CUDA_ERROR_INVALID_VALUE;
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

CUresult CUDAAPI cuGraphNodeSetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int isEnabled) {
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

CUresult CUDAAPI cuGraphNodeGetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int* isEnabled) {
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
      return cuGraphExecMemcpyNodeSetParams(hGraphExec, hNode, &nodeParams->memcpy.copyParams, nullptr);
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

// ---- memory of allocation nodes, as the device reports it

CUresult CUDAAPI cuDeviceGetGraphMemAttribute(CUdevice, CUgraphMem_attribute attr, void* value) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  AllocTable& t = allocs();
  std::lock_guard lock(t.mu);
  cuuint64_t v = 0;
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: v = t.footprint; break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: v = t.footprint_high; break;
    default: return CUDA_ERROR_INVALID_VALUE;
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
