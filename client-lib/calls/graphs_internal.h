// What graphs.cc, graphs_nodes.cc and graphs_exec.cc share of the graphs built node by node on
// the client: the graphs, nodes and executable graphs, their tables, the memory of allocation
// nodes, and the helpers more than one of them uses. The design: graphs.cc.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "client-lib/core/client_call.h"
#include "client-lib/core/id_set.h"
#include "protocol/handle_kind.h"

namespace cuwire::client::graphs {

// Client graph handles: ids of their own range, never a server id nor a client-minted one.
inline constexpr uint64_t kLocalIdBase = uint64_t{3} << 44;

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
AllocTable& allocs();

// Gives a block back once no graph holds it and it is free. Called with the table's lock held;
// the free itself happens after (the block is out of the table, so the free is not intercepted).
bool release_if_done(AllocTable& t, std::map<CUdeviceptr, GraphAllocation>::iterator it);

// Something a node refers to by `id` and lets go of (Release) when its holder goes; shared
// (through a shared_ptr) by a graph, its clones and its executable graphs, never copied.
template <typename Id, void (*Release)(Id)>
struct Held {
  Id id;
  explicit Held(Id i) : id(i) {}
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
  ~Held() { Release(id); }
};

// Drops one hold on an allocation node's block, giving it back once free and unheld.
inline void drop_allocation_hold(CUdeviceptr p) {
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

// A node's hold on its block.
using AllocationHold = Held<CUdeviceptr, &drop_allocation_hold>;

// An allocation node's block made live by a launch on `stream`.
void allocated_by_launch(CUdeviceptr p, CUstream stream);

// Whether an allocation node's block is live: made by a launch and not freed since.
bool allocation_live(CUdeviceptr p);

// The block freed, in order on `stream`, or at once (nullptr: cuMemFree); given back to the
// backend once no graph holds it.
void freed(CUdeviceptr p, CUstream stream, bool on_stream);

inline void destroy_server_exec(uint64_t id) {
  ArgWriter w(CallId::k_cuGraphExecDestroy);
  w.put(id);
  w.send_async();
}

// A captured graph instantiated on the server, launched by a child-graph node.
using ServerExec = Held<uint64_t, &destroy_server_exec>;

// Captured graphs the app moved into a child graph node: the node owns them now.
IdSet& moved_server_graphs();

// Destroys captured graph `id` on the server, forgetting what the client kept of it (cached
// replies, its shape and node handles).
CUresult destroy_server_graph(uint64_t id);

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
// memory holding its value (server/calls/graphs.cc), which device code sets through
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
  // staging buffers a captured host copy left to this graph (client-lib/calls/graphs_capture.cc)
  std::shared_ptr<void> keep;
  // empty: the launch waits here for the stream, which brings the device's writes to pinned
  // memory to the host before the host functions after it (a capture's,
  // client-lib/calls/graphs_capture.cc)
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
  uint64_t node = 0;         // the graph node it came from: the handle exec updates name
  std::vector<size_t> deps;  // its dependencies, as places in Exec::order, ascending
  Params p;
  bool enabled = true;
  std::shared_ptr<struct Exec> child;                // a client child graph, instantiated
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
Tables& tables();

// The kernel each function came from (cuKernelGetFunction): a kernel node reports both, and the
// runtime finds its own function by the kernel.
struct KernelOfFunction {
  std::mutex mu;
  std::map<uint64_t, CUkernel> kernels;  // guarded by mu
};
KernelOfFunction& kernel_of_function();

inline uint64_t id_of(const void* h) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(h));
}
inline bool is_local(uint64_t id) { return id >= kLocalIdBase && id < kLocalIdBase + kIdRange; }

// Lookups; the caller holds the tables' lock.
Graph* graph_locked(CUgraph h);
Node* node_locked(CUgraphNode h);
std::shared_ptr<Exec> exec_locked(CUgraphExec h);

inline CUgraphNode handle(const Node* n) {
  return reinterpret_cast<CUgraphNode>(static_cast<uintptr_t>(n->id));
}
inline CUgraphNode handle(uint64_t id) {
  return reinterpret_cast<CUgraphNode>(static_cast<uintptr_t>(id));
}

// A captured graph's node (a handle its shape gave), or null; the caller holds the tables' lock.
const CapturedNode* captured_node_locked(CUgraphNode h);
// Takes a graph, its nodes and the graphs inside them out of the tables; the caller holds the
// tables' lock.
void unregister_graph_locked(Graph& g);
// The node's kernel arguments as the app gave them: pointers into the packed copy.
void refresh_arg_ptrs(Node& n);

// ---- turning the app's parameters into a node's (graphs_nodes.cc)
CUresult kernel_params(const CUDA_KERNEL_NODE_PARAMS& in, Params* p);
CUresult memcpy_params(const CUDA_MEMCPY3D& c, Params* p);
CUresult memset_params(const CUDA_MEMSET_NODE_PARAMS& m, Params* p);
CUresult host_params(const CUDA_HOST_NODE_PARAMS& h, Params* p);

// A copy of graph `src` (under no id yet); `mapping`, if given, gets each node's copy. The
// caller holds the tables' lock.
std::shared_ptr<Graph> clone_locked(const Graph& src, std::map<const Node*, Node*>* mapping);

// What a graph holds that CUDA restricts, its child graphs' included: allocation and free nodes
// (no clone, no child but a moved one, one executable graph at a time, no node or edge
// removed), conditional nodes (no clone, no child, one executable graph at a time).
struct Restricted {
  bool memory = false;       // allocation or free nodes
  bool conditional = false;  // conditional nodes
  bool any() const { return memory || conditional; }
};
Restricted restricted_nodes(const Graph& g);

// Whether captured graph `graph` holds allocation or free nodes (its shape, asked of the server
// once). A graph too large to list counts as holding none.
bool captured_memory_nodes(uint64_t graph);

// The graph's nodes in an order that keeps every dependency (ties: the order they were added).
CUresult topological_order(const Graph& g, std::vector<const Node*>* out);

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
LaunchOrder& launch_order();

// The executable graphs the app instantiated from captured graphs and has not destroyed, with
// the flags they were instantiated with: a launch, upload or destroy of another id is refused
// here (the server's answer would come only with the next synchronisation).
IdSet& server_execs();

}  // namespace cuwire::client::graphs
