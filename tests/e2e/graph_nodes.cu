// Graphs built node by node: kernel, memcpy (pageable host memory both ways, device to
// device), memset, host, empty, event record and wait, child graphs (built and captured),
// memory allocation and free nodes; the structure queries, parameter queries and changes,
// clones, executable-graph updates, disabled nodes, the generic cudaGraphAddNode; pageable host
// copies inside a stream capture; user objects; kernel node attributes. Every launch's results
// are checked on the host.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/e2e/check.h"

__global__ void axpb(const int* in, int* out, int n, int a, int b) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * a + b;
}

__global__ void add_one(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1;
}

static void CUDART_CB count_calls(void* p) { ++*static_cast<int*>(p); }

// A kernel node over n elements, 128 threads a block.
static cudaKernelNodeParams kernel_params(void* func, void** args, int n) {
  cudaKernelNodeParams k = {};
  k.func = func;
  k.gridDim = dim3((n + 127) / 128);
  k.blockDim = dim3(128);
  k.kernelParams = args;
  return k;
}
static cudaKernelNodeParams add_one_params(void** args, int n) {
  return kernel_params(reinterpret_cast<void*>(add_one), args, n);
}
static cudaKernelNodeParams axpb_params(void** args, int n) {
  return kernel_params(reinterpret_cast<void*>(axpb), args, n);
}

// User objects: a graph, its clone and its executable graph each hold references; the
// destructor runs once the last goes, after the executable graph's last launch finished, on
// another thread, and a CUDA call from it is refused.
static std::atomic<int> destroyed{0};
static std::atomic<int> destroy_call{-1};
static std::thread::id destroyed_on;
static void CUDART_CB destroy_object(void* p) {
  destroyed_on = std::this_thread::get_id();
  destroy_call = static_cast<int>(cudaStreamQuery(nullptr));
  destroyed += *static_cast<int*>(p);
}

static bool wait_destroyed(int want) {
  for (int i = 0; i < 3000 && destroyed.load() != want; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return destroyed.load() == want;
}

static void user_objects(int* d, int n, cudaStream_t s) {
  static int weight = 1;
  cudaUserObject_t obj;
  CHECK(cudaUserObjectCreate(&obj, &weight, destroy_object, 1, cudaUserObjectNoDestructorSync));
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  void* args[] = {&d, &n};
  const cudaKernelNodeParams k = add_one_params(args, n);
  cudaGraphNode_t node;
  CHECK(cudaGraphAddKernelNode(&node, g, nullptr, 0, &k));
  // The app's one reference moves to the graph; the graph takes two more and gives one back.
  CHECK(cudaGraphRetainUserObject(g, obj, 1, cudaGraphUserObjectMove));
  CHECK(cudaGraphRetainUserObject(g, obj, 2, 0));
  CHECK(cudaGraphReleaseUserObject(g, obj, 1));
  EXPECT(cudaGraphReleaseUserObject(g, obj, 5) == cudaErrorInvalidValue,
         "a graph gave back more references than it holds");
  cudaGetLastError();
  cudaGraph_t clone;
  CHECK(cudaGraphClone(&clone, g));
  cudaGraphExec_t x;
  CHECK(cudaGraphInstantiate(&x, g, 0));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaGraphDestroy(clone));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT(destroyed.load() == 0, "destroyed while an executable graph holds it");
  // A launch still running holds it past the executable graph's destruction.
  for (int i = 0; i < 3; ++i) CHECK(cudaGraphLaunch(x, s));
  CHECK(cudaGraphExecDestroy(x));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(wait_destroyed(1), "the destructor ran %d times, want 1", destroyed.load());
  EXPECT(destroyed_on != std::this_thread::get_id(), "the destructor ran on the app's thread");
  EXPECT(destroy_call.load() == cudaErrorNotPermitted, "a CUDA call from a destructor gave %d",
         destroy_call.load());
  // Plain references: retain and release; the last release destroys it.
  CHECK(cudaUserObjectCreate(&obj, &weight, destroy_object, 2, cudaUserObjectNoDestructorSync));
  CHECK(cudaUserObjectRetain(obj, 1));
  CHECK(cudaUserObjectRelease(obj, 2));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT(destroyed.load() == 1, "destroyed with a reference left");
  CHECK(cudaUserObjectRelease(obj, 1));
  EXPECT(wait_destroyed(2), "the destructor ran %d times in all, want 2", destroyed.load());
  EXPECT(cudaUserObjectCreate(&obj, &weight, destroy_object, 0, cudaUserObjectNoDestructorSync) ==
             cudaErrorInvalidValue,
         "a user object with no reference was made");
  cudaGetLastError();
}

// Kernel node attributes: set, read back, copied to another node, kept by a clone, and given
// to every launch (a cooperative launch, a priority, an access policy window over the kernel's
// own memory).
static void kernel_node_attributes(int* d, int n, cudaStream_t s) {
  CHECK(cudaMemset(d, 0, sizeof(int) * n));
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  void* args[] = {&d, &n};
  const cudaKernelNodeParams k = add_one_params(args, n);
  cudaGraphNode_t first, second, empty;
  CHECK(cudaGraphAddKernelNode(&first, g, nullptr, 0, &k));
  CHECK(cudaGraphAddKernelNode(&second, g, &first, 1, &k));
  CHECK(cudaGraphAddEmptyNode(&empty, g, &second, 1));

  cudaKernelNodeAttrValue v = {};
  CHECK(cudaGraphKernelNodeGetAttribute(first, cudaKernelNodeAttributePriority, &v));
  EXPECT(v.priority == 0, "a new node's priority is %d", v.priority);
  v.priority = 1;
  CHECK(cudaGraphKernelNodeSetAttribute(first, cudaKernelNodeAttributePriority, &v));
  cudaKernelNodeAttrValue window = {};
  window.accessPolicyWindow.base_ptr = d;
  window.accessPolicyWindow.num_bytes = sizeof(int) * n;
  window.accessPolicyWindow.hitRatio = 0.5f;
  window.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
  window.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  CHECK(cudaGraphKernelNodeSetAttribute(first, cudaKernelNodeAttributeAccessPolicyWindow, &window));
  cudaKernelNodeAttrValue coop = {};
  coop.cooperative = 1;
  CHECK(cudaGraphKernelNodeSetAttribute(first, cudaLaunchAttributeCooperative, &coop));
  EXPECT(cudaGraphKernelNodeSetAttribute(first, cudaLaunchAttributeSynchronizationPolicy, &v) ==
             cudaErrorInvalidValue,
         "a stream-only attribute was set on a kernel node");
  EXPECT(cudaGraphKernelNodeGetAttribute(empty, cudaKernelNodeAttributePriority, &v) ==
             cudaErrorInvalidValue,
         "an empty node answered a kernel attribute");
  (void)cudaGetLastError();

  CHECK(cudaGraphKernelNodeCopyAttributes(second, first));
  cudaKernelNodeAttrValue got = {};
  CHECK(cudaGraphKernelNodeGetAttribute(second, cudaKernelNodeAttributePriority, &got));
  EXPECT(got.priority == 1, "the copied priority is %d", got.priority);
  CHECK(cudaGraphKernelNodeGetAttribute(second, cudaKernelNodeAttributeAccessPolicyWindow, &got));
  EXPECT(got.accessPolicyWindow.base_ptr == d &&
             got.accessPolicyWindow.num_bytes == sizeof(int) * n &&
             got.accessPolicyWindow.hitRatio == 0.5f &&
             got.accessPolicyWindow.hitProp == cudaAccessPropertyPersisting,
         "the copied access policy window differs");
  CHECK(cudaGraphKernelNodeGetAttribute(second, cudaLaunchAttributeCooperative, &got));
  EXPECT(got.cooperative == 1, "the copied cooperative flag is %d", got.cooperative);

  cudaGraph_t clone;
  CHECK(cudaGraphClone(&clone, g));
  cudaGraphNode_t cloned;
  CHECK(cudaGraphNodeFindInClone(&cloned, first, clone));
  got = {};
  CHECK(cudaGraphKernelNodeGetAttribute(cloned, cudaKernelNodeAttributePriority, &got));
  EXPECT(got.priority == 1, "the clone's priority is %d", got.priority);

  cudaGraphExec_t x;
  CHECK(cudaGraphInstantiate(&x, g, 0));
  CHECK(cudaGraphLaunch(x, s));
  CHECK(cudaGraphLaunch(x, s));
  std::vector<int> h(n);
  CHECK(cudaMemcpyAsync(h.data(), d, sizeof(int) * n, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) {
    EXPECT(h[i] == 4, "element %d = %d after two launches of two nodes with attributes", i, h[i]);
  }
  CHECK(cudaGraphExecDestroy(x));

  // The attributes reach the launch: an access policy window over memory that is not the
  // program's fails it, as the server checks every launch's window.
  window.accessPolicyWindow.base_ptr = reinterpret_cast<char*>(d) + (size_t{1} << 40);
  CHECK(cudaGraphKernelNodeSetAttribute(first, cudaKernelNodeAttributeAccessPolicyWindow, &window));
  CHECK(cudaGraphInstantiate(&x, g, 0));
  const cudaError_t launched = cudaGraphLaunch(x, s);
  const cudaError_t synced = cudaStreamSynchronize(s);
  EXPECT(launched != cudaSuccess || synced != cudaSuccess,
         "a launch with an access policy window over memory not the program's went through");
  (void)cudaGetLastError();
  CHECK(cudaStreamSynchronize(s));
  destroy_graph(x, clone);
  CHECK(cudaGraphDestroy(g));
}

// CUDA's rules for graphs with allocation or free nodes: one executable graph at a time, no
// clone, no node removed, and a child graph node only by moving the graph into its parent
// (cudaGraphChildGraphOwnershipMove), where the parent owns it and it runs at each launch. For
// a graph built node by node and for a captured one (cudaMallocAsync in the capture).
static void memory_node_rules(const int* d_src, int* d_dst, int n, cudaStream_t s) {
  const size_t bytes = n * sizeof(int);
  int nn = n;
  cudaMemAllocNodeParams ap = {};
  ap.poolProps.allocType = cudaMemAllocationTypePinned;
  ap.poolProps.location.type = cudaMemLocationTypeDevice;
  ap.poolProps.location.id = 0;
  ap.bytesize = bytes;
  cudaGraph_t body;
  CHECK(cudaGraphCreate(&body, 0));
  cudaGraphNode_t alloc, in, inc, out, release;
  CHECK(cudaGraphAddMemAllocNode(&alloc, body, nullptr, 0, &ap));
  int* tmp = static_cast<int*>(ap.dptr);
  CHECK(
      cudaGraphAddMemcpyNode1D(&in, body, &alloc, 1, tmp, d_src, bytes, cudaMemcpyDeviceToDevice));
  void* args[] = {&tmp, &nn};
  const cudaKernelNodeParams k = add_one_params(args, n);
  CHECK(cudaGraphAddKernelNode(&inc, body, &in, 1, &k));
  CHECK(cudaGraphAddMemcpyNode1D(&out, body, &inc, 1, d_dst, tmp, bytes, cudaMemcpyDeviceToDevice));
  CHECK(cudaGraphAddMemFreeNode(&release, body, &out, 1, tmp));

  cudaGraphExec_t first, second;
  CHECK(cudaGraphInstantiate(&first, body, 0));
  EXPECT(cudaGraphInstantiate(&second, body, 0) != cudaSuccess,
         "a second executable graph of a graph with memory nodes");
  cudaGetLastError();
  CHECK(cudaGraphExecDestroy(first));
  CHECK(cudaGraphInstantiate(&second, body, 0));  // the first is gone: allowed again
  CHECK(cudaGraphExecDestroy(second));
  EXPECT(cudaGraphDestroyNode(out) == cudaErrorNotSupported,
         "a node removed from a graph with memory nodes");
  cudaGetLastError();
  cudaGraph_t parent;
  CHECK(cudaGraphCreate(&parent, 0));
  expect_uncopyable(body, parent, "memory nodes");
  cudaGraphNode_t node;

  // Moved into the parent: the node owns the graph, under the same handle.
  cudaGraphNodeParams mp = {};
  mp.type = cudaGraphNodeTypeGraph;
  mp.graph.graph = body;
  mp.graph.ownership = cudaGraphChildGraphOwnershipMove;
  CHECK(cudaGraphAddNode(&node, parent, nullptr, nullptr, 0, &mp));
  cudaGraph_t owned;
  CHECK(cudaGraphChildGraphNodeGetGraph(node, &owned));
  EXPECT(owned == body, "the moved graph keeps its handle");
  EXPECT(cudaGraphDestroy(body) != cudaSuccess, "the moved graph is its parent's to destroy");
  cudaGetLastError();
  EXPECT(cudaGraphInstantiate(&first, body, 0) != cudaSuccess,
         "the moved graph instantiated alone");
  cudaGetLastError();
  cudaGraphNode_t again;
  EXPECT(cudaGraphAddNode(&again, parent, nullptr, nullptr, 0, &mp) != cudaSuccess,
         "a graph moved twice");
  cudaGetLastError();
  cudaMemAllocNodeParams more = ap;
  more.dptr = nullptr;
  EXPECT(cudaGraphAddMemAllocNode(&again, body, nullptr, 0, &more) != cudaSuccess,
         "a memory node added to a moved graph");
  cudaGetLastError();
  // A graph is not moved into itself, nor into a graph inside it.
  cudaGraph_t self_parent;
  CHECK(cudaGraphCreate(&self_parent, 0));
  mp.graph.graph = self_parent;
  EXPECT(cudaGraphAddNode(&again, self_parent, nullptr, nullptr, 0, &mp) != cudaSuccess,
         "a graph moved into itself");
  cudaGetLastError();
  CHECK(cudaGraphDestroy(self_parent));
  // Nor into a graph inside it (a child's cloned graph): a graph would hold itself.
  cudaGraph_t outer_graph, leaf;
  CHECK(cudaGraphCreate(&outer_graph, 0));
  CHECK(cudaGraphCreate(&leaf, 0));
  cudaGraphNode_t leaf_node;
  CHECK(cudaGraphAddEmptyNode(&leaf_node, leaf, nullptr, 0));
  cudaGraphNode_t cloned_child;
  CHECK(cudaGraphAddChildGraphNode(&cloned_child, outer_graph, nullptr, 0, leaf));
  cudaGraph_t inside;
  CHECK(cudaGraphChildGraphNodeGetGraph(cloned_child, &inside));
  mp.graph.graph = outer_graph;
  EXPECT(cudaGraphAddNode(&again, inside, nullptr, nullptr, 0, &mp) != cudaSuccess,
         "a graph moved into a graph inside it");
  cudaGetLastError();
  CHECK(cudaGraphDestroy(outer_graph));
  CHECK(cudaGraphDestroy(leaf));

  cudaGraphExec_t px;
  CHECK(cudaGraphInstantiate(&px, parent, 0));
  // The node's own graph gives the executable graph its parameters again (its allocation
  // addresses are the node's).
  CHECK(cudaGraphExecChildGraphNodeSetParams(px, node, owned));
  std::vector<int> src(n), got(n);
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < n; ++i) src[i] = 3 * i + round;
    CHECK(cudaMemcpy(const_cast<int*>(d_src), src.data(), bytes, cudaMemcpyHostToDevice));
    launch_and_wait(px, s);
    CHECK(cudaMemcpy(got.data(), d_dst, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i += 97) {
      EXPECT(got[i] == 3 * i + round + 1, "moved child, round %d: [%d] = %d", round, i, got[i]);
    }
  }
  EXPECT(cudaGraphInstantiate(&first, parent, 0) != cudaSuccess,
         "a second executable graph of a parent holding memory nodes");
  cudaGetLastError();
  destroy_graph(px, parent);  // the moved graph goes with it

  // A captured graph without memory nodes, moved: the parent's alone (the client refuses it
  // as an app's graph; the server would instantiate it again).
  cudaGraph_t plain;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  add_one<<<(n + 127) / 128, 128, 0, s>>>(d_dst, n);
  CHECK(cudaStreamEndCapture(s, &plain));
  CHECK(cudaGraphCreate(&parent, 0));
  mp.graph.graph = plain;
  CHECK(cudaGraphAddNode(&node, parent, nullptr, nullptr, 0, &mp));
  EXPECT(cudaGraphInstantiate(&first, plain, 0) != cudaSuccess,
         "a moved captured graph instantiated alone");
  cudaGetLastError();
  EXPECT(cudaGraphDestroy(plain) != cudaSuccess, "a moved captured graph destroyed by the app");
  cudaGetLastError();
  EXPECT(cudaGraphAddNode(&again, parent, nullptr, nullptr, 0, &mp) != cudaSuccess,
         "a captured graph moved twice");
  cudaGetLastError();
  CHECK(cudaGraphDestroy(parent));

  // A captured graph with a stream-ordered allocation: the same rules.
  cudaGraph_t captured;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  int* c_tmp = nullptr;
  CHECK(cudaMallocAsync(reinterpret_cast<void**>(&c_tmp), bytes, s));
  CHECK(cudaMemcpyAsync(c_tmp, d_src, bytes, cudaMemcpyDeviceToDevice, s));
  add_one<<<(n + 127) / 128, 128, 0, s>>>(c_tmp, n);
  add_one<<<(n + 127) / 128, 128, 0, s>>>(c_tmp, n);
  CHECK(cudaMemcpyAsync(d_dst, c_tmp, bytes, cudaMemcpyDeviceToDevice, s));
  CHECK(cudaFreeAsync(c_tmp, s));
  CHECK(cudaStreamEndCapture(s, &captured));
  CHECK(cudaGraphCreate(&parent, 0));
  expect_uncopyable(captured, parent, "memory nodes (captured)");
  mp.graph.graph = captured;
  CHECK(cudaGraphAddNode(&node, parent, nullptr, nullptr, 0, &mp));
  EXPECT(cudaGraphDestroy(captured) != cudaSuccess, "the moved captured graph is its parent's");
  cudaGetLastError();
  EXPECT(cudaGraphInstantiate(&first, captured, 0) != cudaSuccess,
         "the moved captured graph instantiated alone");
  cudaGetLastError();
  CHECK(cudaGraphInstantiate(&px, parent, 0));
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < n; ++i) src[i] = i - 7 * round;
    CHECK(cudaMemcpy(const_cast<int*>(d_src), src.data(), bytes, cudaMemcpyHostToDevice));
    launch_and_wait(px, s);
    CHECK(cudaMemcpy(got.data(), d_dst, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i += 97) {
      EXPECT(got[i] == i - 7 * round + 2, "moved captured child, round %d: [%d] = %d", round, i,
             got[i]);
    }
  }
  // The executable graph outlives its graph, and the moved captured graph with it.
  CHECK(cudaGraphDestroy(parent));
  for (int i = 0; i < n; ++i) src[i] = 2 * i;
  CHECK(cudaMemcpy(const_cast<int*>(d_src), src.data(), bytes, cudaMemcpyHostToDevice));
  launch_and_wait(px, s);
  CHECK(cudaMemcpy(got.data(), d_dst, bytes, cudaMemcpyDeviceToHost));
  EXPECT(got[n - 1] == 2 * (n - 1) + 2, "after its graph went: [%d] = %d", n - 1, got[n - 1]);
  CHECK(cudaGraphExecDestroy(px));
}

// Two kernels adding one to d[0, n1) and d[0, n2), the second after the first if `chained`.
static cudaGraph_t two_adds(int** d, int* n1, int* n2, bool chained) {
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  void* first_args[] = {d, n1};
  void* second_args[] = {d, n2};
  cudaKernelNodeParams first = add_one_params(first_args, *n1);
  cudaKernelNodeParams second = add_one_params(second_args, *n2);
  cudaGraphNode_t a, b;
  CHECK(cudaGraphAddKernelNode(&a, g, nullptr, 0, &first));
  CHECK(cudaGraphAddKernelNode(&b, g, chained ? &a : nullptr, chained ? 1 : 0, &second));
  return g;
}

// Executable-graph updates follow CUDA's rules all the way down: the topology an executable
// graph was made with outlives the graph it came from, a child graph's topology counts as the
// parent's (the update is recursive), and cudaGraphExecChildGraphNodeSetParams takes only a
// graph of the child's topology, whose parameters then run.
static void child_graph_updates(int* d, int n, cudaStream_t s) {
  int whole = n, half = n / 2;
  cudaGraph_t chain = two_adds(&d, &whole, &whole, true);
  cudaGraphExec_t x;
  CHECK(cudaGraphInstantiate(&x, chain, 0));
  CHECK(cudaGraphDestroy(chain));  // the executable graph keeps its topology
  cudaGraph_t apart = two_adds(&d, &whole, &whole, false);
  cudaGraphExecUpdateResultInfo info;
  EXPECT(cudaGraphExecUpdate(x, apart, &info) == cudaErrorGraphExecUpdateFailure &&
             info.result == cudaGraphExecUpdateErrorTopologyChanged,
         "an update dropping an edge of a destroyed graph's topology: result %d", (int)info.result);
  CHECK(cudaGraphExecDestroy(x));

  // A parent of one child graph node, the child two chained kernels.
  cudaGraph_t child = two_adds(&d, &whole, &whole, true);
  cudaGraph_t parent, other_parent;
  cudaGraphNode_t node, other_node;
  CHECK(cudaGraphCreate(&parent, 0));
  CHECK(cudaGraphAddChildGraphNode(&node, parent, nullptr, 0, child));
  CHECK(cudaGraphInstantiate(&x, parent, 0));
  CHECK(cudaGraphCreate(&other_parent, 0));
  CHECK(cudaGraphAddChildGraphNode(&other_node, other_parent, nullptr, 0, apart));
  EXPECT(cudaGraphExecUpdate(x, other_parent, &info) == cudaErrorGraphExecUpdateFailure &&
             info.result == cudaGraphExecUpdateErrorTopologyChanged && info.errorNode == other_node,
         "an update changing a child graph's topology: result %d, the node of the graph given %d",
         (int)info.result, info.errorNode == other_node);
  EXPECT(cudaGraphExecChildGraphNodeSetParams(x, node, apart) == cudaErrorInvalidValue,
         "a child graph of another topology taken by cudaGraphExecChildGraphNodeSetParams");

  // The same topology: the second kernel now covers half of d.
  cudaGraph_t shorter = two_adds(&d, &whole, &half, true);
  CHECK(cudaMemsetAsync(d, 0, sizeof(int) * n, s));
  CHECK(cudaGraphExecChildGraphNodeSetParams(x, node, shorter));
  CHECK(cudaGraphLaunch(x, s));
  std::vector<int> h(n);
  CHECK(cudaMemcpyAsync(h.data(), d, sizeof(int) * n, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) {
    EXPECT(h[i] == (i < half ? 2 : 1), "after the child's update, d[%d] = %d", i, h[i]);
  }
  CHECK(cudaGraphExecDestroy(x));
  for (cudaGraph_t g : {child, parent, other_parent, apart, shorter}) CHECK(cudaGraphDestroy(g));
}

int main() {
  const int n = 3000;
  const size_t bytes = sizeof(int) * n;
  std::vector<int> h_in(n), h_out(n, 0);  // pageable host memory
  int *d_in, *d_mid, *d_out;
  CHECK(cudaMalloc(&d_in, bytes));
  CHECK(cudaMalloc(&d_mid, bytes));
  CHECK(cudaMalloc(&d_out, bytes));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // ---- H2D copy -> kernel -> memset of a tail / D2D copy -> D2H copy, with a host node.
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t up, k1, zero, d2d, down, host, empty;
  CHECK(cudaGraphAddMemcpyNode1D(&up, g, nullptr, 0, d_in, h_in.data(), bytes,
                                 cudaMemcpyHostToDevice));
  int a = 3, b = 5, nn = n;
  void* args[] = {&d_in, &d_mid, &nn, &a, &b};
  cudaKernelNodeParams kp = axpb_params(args, n);
  CHECK(cudaGraphAddKernelNode(&k1, g, &up, 1, &kp));
  a = -100;  // the node copied its arguments when it was added
  cudaMemsetParams ms = {};
  ms.dst = d_mid + n - 10;
  ms.value = 0x7f;
  ms.elementSize = 1;
  ms.width = 10 * sizeof(int);
  ms.height = 1;
  CHECK(cudaGraphAddMemsetNode(&zero, g, &k1, 1, &ms));
  CHECK(cudaGraphAddMemcpyNode1D(&d2d, g, &zero, 1, d_out, d_mid, bytes, cudaMemcpyDeviceToDevice));
  CHECK(cudaGraphAddMemcpyNode1D(&down, g, &d2d, 1, h_out.data(), d_out, bytes,
                                 cudaMemcpyDeviceToHost));
  int host_calls = 0;
  cudaHostNodeParams hp = {count_calls, &host_calls};
  CHECK(cudaGraphAddHostNode(&host, g, &down, 1, &hp));
  CHECK(cudaGraphAddEmptyNode(&empty, g, &host, 1));

  // Structure queries.
  size_t count = 0;
  CHECK(cudaGraphGetNodes(g, nullptr, &count));
  EXPECT(count == 7, "graph has %zu nodes, want 7", count);
  std::vector<cudaGraphNode_t> nodes(count);
  CHECK(cudaGraphGetNodes(g, nodes.data(), &count));
  EXPECT(nodes[0] == up && nodes[6] == empty, "nodes come back in the order they were added");
  CHECK(cudaGraphGetRootNodes(g, nullptr, &count));
  EXPECT(count == 1, "%zu root nodes, want 1", count);
  size_t edges = 0;
  CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &edges));
  EXPECT(edges == 6, "%zu edges, want 6", edges);
  cudaGraphNode_t dep = nullptr;
  count = 1;
  CHECK(cudaGraphNodeGetDependencies(k1, &dep, nullptr, &count));
  EXPECT(count == 1 && dep == up, "the kernel node depends on the upload");
  count = 1;
  CHECK(cudaGraphNodeGetDependentNodes(k1, &dep, nullptr, &count));
  EXPECT(count == 1 && dep == zero, "the memset depends on the kernel");
  cudaGraphNodeType type;
  CHECK(cudaGraphNodeGetType(zero, &type));
  EXPECT(type == cudaGraphNodeTypeMemset, "node type %d, want memset", (int)type);
  cudaKernelNodeParams got = {};
  CHECK(cudaGraphKernelNodeGetParams(k1, &got));
  EXPECT(got.gridDim.x == kp.gridDim.x && got.blockDim.x == 128 && got.kernelParams &&
             *static_cast<int*>(got.kernelParams[3]) == 3,
         "kernel node parameters as given (a = %d)",
         got.kernelParams ? *static_cast<int*>(got.kernelParams[3]) : -1);

  cudaGraphExec_t x;
  CHECK(cudaGraphInstantiate(&x, g, 0));
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < n; ++i) h_in[i] = i + round * 1000;  // read at each launch
    launch_and_wait(x, s);
    for (int i = 0; i < n; ++i) {
      const int want = i < n - 10 ? (i + round * 1000) * 3 + 5 : 0x7f7f7f7f;
      EXPECT(h_out[i] == want, "round %d: h_out[%d] = %d, want %d", round, i, h_out[i], want);
    }
    EXPECT(host_calls == round + 1, "host node ran %d times after launch %d", host_calls,
           round + 1);
  }

  // ---- parameter changes: in the executable graph, and in the graph then an exec update.
  a = 2;
  b = -1;
  kp = axpb_params(args, n);
  CHECK(cudaGraphExecKernelNodeSetParams(x, k1, &kp));
  launch_and_wait(x, s);
  EXPECT(h_out[7] == (7 + 2000) * 2 - 1, "after the exec's kernel change: %d", h_out[7]);
  a = 4;
  b = 0;
  kp = axpb_params(args, n);
  CHECK(cudaGraphKernelNodeSetParams(k1, &kp));
  ms.value = 0;
  CHECK(cudaGraphMemsetNodeSetParams(zero, &ms));
  update_exec(x, g);
  launch_and_wait(x, s);
  EXPECT(h_out[7] == (7 + 2000) * 4 && h_out[n - 1] == 0, "after the update: %d %d", h_out[7],
         h_out[n - 1]);
  // Disabling the memset leaves the tail as the kernel wrote it.
  CHECK(cudaGraphNodeSetEnabled(x, zero, 0));
  unsigned enabled = 1;
  CHECK(cudaGraphNodeGetEnabled(x, zero, &enabled));
  EXPECT(enabled == 0, "the memset node is disabled");
  launch_and_wait(x, s);
  EXPECT(h_out[n - 1] == (n - 1 + 2000) * 4, "with the memset disabled: %d", h_out[n - 1]);

  // A topology change is refused by the update.
  cudaGraphNode_t extra_node;
  CHECK(cudaGraphAddEmptyNode(&extra_node, g, nullptr, 0));
  cudaGraphExecUpdateResultInfo info;
  EXPECT(cudaGraphExecUpdate(x, g, &info) != cudaSuccess &&
             info.result == cudaGraphExecUpdateErrorTopologyChanged,
         "an update with a new node fails (result %d)", (int)info.result);
  cudaGetLastError();
  CHECK(cudaGraphDestroyNode(extra_node));

  // Bad structure is refused: a cycle, a node of another graph, a bad node handle.
  EXPECT(cudaGraphAddDependencies(g, &empty, &up, nullptr, 1) == cudaErrorInvalidValue,
         "a cycle is refused");
  cudaGetLastError();
  cudaGraph_t other;
  CHECK(cudaGraphCreate(&other, 0));
  cudaGraphNode_t foreign;
  EXPECT(cudaGraphAddEmptyNode(&foreign, other, &up, 1) == cudaErrorInvalidValue,
         "a dependency on another graph's node is refused");
  cudaGetLastError();
  EXPECT(cudaGraphNodeGetType(reinterpret_cast<cudaGraphNode_t>(0x1234), &type) != cudaSuccess,
         "a made-up node handle is refused");
  cudaGetLastError();

  // ---- a node that depends on one added after it (cudaGraphAddDependencies): cloned, and
  // as a child graph, the order holds.
  {
    cudaGraph_t bg;
    CHECK(cudaGraphCreate(&bg, 0));
    int seven = 7, zero = 0;
    void* inc_args[] = {&d_out, &nn};
    void* set_args[] = {&d_in, &d_out, &nn, &zero, &seven};  // d_out = 7
    cudaKernelNodeParams kp = {};
    kp.gridDim = dim3((n + 127) / 128);
    kp.blockDim = dim3(128);
    cudaGraphNode_t inc_first, set_second;
    kp.func = reinterpret_cast<void*>(add_one);
    kp.kernelParams = inc_args;
    CHECK(cudaGraphAddKernelNode(&inc_first, bg, nullptr, 0, &kp));
    kp.func = reinterpret_cast<void*>(axpb);
    kp.kernelParams = set_args;
    CHECK(cudaGraphAddKernelNode(&set_second, bg, nullptr, 0, &kp));
    CHECK(cudaGraphAddDependencies(bg, &set_second, &inc_first, nullptr, 1));  // set, then add one
    cudaGraph_t bclone, bparent;
    CHECK(cudaGraphClone(&bclone, bg));
    CHECK(cudaGraphCreate(&bparent, 0));
    cudaGraphNode_t bchild;
    CHECK(cudaGraphAddChildGraphNode(&bchild, bparent, nullptr, 0, bg));
    for (cudaGraph_t run : {bclone, bparent}) {
      cudaGraphExec_t bx;
      CHECK(cudaGraphInstantiate(&bx, run, 0));
      CHECK(cudaMemset(d_out, 0, bytes));
      launch_and_wait(bx, s);
      std::vector<int> got(n);
      CHECK(cudaMemcpy(got.data(), d_out, bytes, cudaMemcpyDeviceToHost));
      EXPECT(got[0] == 8 && got[n - 1] == 8, "a dependency on a later node: %d %d", got[0],
             got[n - 1]);
      CHECK(cudaGraphExecDestroy(bx));
    }
    CHECK(cudaGraphDestroy(bparent));
    CHECK(cudaGraphDestroy(bclone));
    CHECK(cudaGraphDestroy(bg));
  }

  // ---- clones, child graphs, events, the generic add.
  cudaGraph_t clone;
  CHECK(cudaGraphClone(&clone, g));
  cudaGraphNode_t k1_clone;
  CHECK(cudaGraphNodeFindInClone(&k1_clone, k1, clone));
  CHECK(cudaGraphNodeGetType(k1_clone, &type));
  EXPECT(type == cudaGraphNodeTypeKernel && k1_clone != k1, "the clone's kernel node");
  // The parent: an event record, the clone as a child, a wait, add_one on d_out (generic add).
  cudaEvent_t ev;
  CHECK(cudaEventCreate(&ev));
  cudaGraph_t parent;
  CHECK(cudaGraphCreate(&parent, 0));
  cudaGraphNode_t child, rec, wait, plus;
  CHECK(cudaGraphAddChildGraphNode(&child, parent, nullptr, 0, clone));
  CHECK(cudaGraphDestroy(clone));  // the node has its own copy
  CHECK(cudaGraphAddEventRecordNode(&rec, parent, &child, 1, ev));
  CHECK(cudaGraphAddEventWaitNode(&wait, parent, &rec, 1, ev));
  void* plus_args[] = {&d_out, &nn};
  cudaGraphNodeParams np = {};
  np.type = cudaGraphNodeTypeKernel;
  np.kernel.func = reinterpret_cast<void*>(add_one);
  np.kernel.gridDim = dim3((n + 127) / 128);
  np.kernel.blockDim = dim3(128);
  np.kernel.kernelParams = plus_args;
  CHECK(cudaGraphAddNode(&plus, parent, &wait, nullptr, 1, &np));
  cudaGraph_t embedded;
  CHECK(cudaGraphChildGraphNodeGetGraph(child, &embedded));
  CHECK(cudaGraphGetNodes(embedded, nullptr, &count));
  EXPECT(count == 7, "the child graph has %zu nodes", count);
  cudaGraphExec_t px;
  CHECK(cudaGraphInstantiate(&px, parent, 0));
  for (int i = 0; i < n; ++i) h_in[i] = 2 * i;
  host_calls = 0;
  launch_and_wait(px, s);
  CHECK(cudaEventSynchronize(ev));
  EXPECT(host_calls == 1, "the child's host node ran %d times", host_calls);
  EXPECT(h_out[11] == 2 * 11 * 4, "the child's result reached the host: %d", h_out[11]);
  std::vector<int> back(n);
  CHECK(cudaMemcpy(back.data(), d_out, bytes, cudaMemcpyDeviceToHost));
  EXPECT(back[11] == 2 * 11 * 4 + 1, "add_one ran after the child: %d", back[11]);

  // ---- a captured graph as a child of a built one.
  cudaGraph_t captured;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  add_one<<<(n + 127) / 128, 128, 0, s>>>(d_out, n);
  add_one<<<(n + 127) / 128, 128, 0, s>>>(d_out, n);
  CHECK(cudaStreamEndCapture(s, &captured));
  cudaGraph_t outer;
  CHECK(cudaGraphCreate(&outer, 0));
  cudaGraphNode_t cap_node, cap_down;
  CHECK(cudaGraphAddChildGraphNode(&cap_node, outer, nullptr, 0, captured));
  CHECK(cudaGraphDestroy(captured));
  CHECK(cudaGraphAddMemcpyNode1D(&cap_down, outer, &cap_node, 1, back.data(), d_out, bytes,
                                 cudaMemcpyDeviceToHost));
  cudaGraphExec_t ox;
  CHECK(cudaGraphInstantiate(&ox, outer, 0));
  CHECK(cudaGraphLaunch(ox, s));
  launch_and_wait(ox, s);
  EXPECT(back[11] == 2 * 11 * 4 + 5, "two launches of the captured child: %d", back[11]);

  // ---- memory nodes: the address is fixed when the node is added and kept by every launch.
  cudaGraph_t mg;
  CHECK(cudaGraphCreate(&mg, 0));
  cudaMemAllocNodeParams ap = {};
  ap.poolProps.allocType = cudaMemAllocationTypePinned;
  ap.poolProps.location.type = cudaMemLocationTypeDevice;
  ap.poolProps.location.id = 0;
  ap.bytesize = bytes;
  cudaGraphNode_t alloc, fill_node, to_host;
  CHECK(cudaGraphAddMemAllocNode(&alloc, mg, nullptr, 0, &ap));
  EXPECT(ap.dptr != nullptr, "the allocation node reports its address");
  int* scratch = static_cast<int*>(ap.dptr);
  CHECK(cudaGraphAddMemcpyNode1D(&fill_node, mg, &alloc, 1, scratch, h_in.data(), bytes,
                                 cudaMemcpyHostToDevice));
  void* add_args[] = {&scratch, &nn};
  const cudaKernelNodeParams ak = add_one_params(add_args, n);
  cudaGraphNode_t inc;
  CHECK(cudaGraphAddKernelNode(&inc, mg, &fill_node, 1, &ak));
  CHECK(cudaGraphAddMemcpyNode1D(&to_host, mg, &inc, 1, h_out.data(), scratch, bytes,
                                 cudaMemcpyDeviceToHost));
  cudaMemAllocNodeParams apq = {};
  CHECK(cudaGraphMemAllocNodeGetParams(alloc, &apq));
  EXPECT(apq.dptr == ap.dptr && apq.bytesize == bytes, "the allocation node's parameters");
  // Graph memory as CUDA reports it: nothing before a launch; the memory a launch allocated
  // stays in the footprint when freed, is reused by the next launch, and goes with a trim.
  auto footprint = [] {
    uint64_t used = 0, reserved = 0;
    CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
    CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &reserved));
    EXPECT(reserved >= used, "reserved %llu, used %llu", (unsigned long long)reserved,
           (unsigned long long)used);
    return used;
  };
  CHECK(cudaDeviceGraphMemTrim(0));
  const uint64_t before = footprint();
  cudaGraphExec_t mx;
  CHECK(cudaGraphInstantiate(&mx, mg, 0));
  CHECK(cudaGraphDestroy(mg));
  EXPECT(footprint() == before, "nothing before a launch: %llu", (unsigned long long)footprint());
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < n; ++i) h_in[i] = i * 5 + round;
    launch_and_wait(mx, s);
    EXPECT(h_out[9] == 9 * 5 + round + 1, "round %d: %d", round, h_out[9]);
    EXPECT(footprint() == before + bytes, "round %d: footprint %llu", round,
           (unsigned long long)footprint());
    // The allocation outlives the launch (no free node): the app may use it, then free it.
    CHECK(cudaMemcpy(back.data(), scratch, bytes, cudaMemcpyDeviceToHost));
    EXPECT(back[9] == h_out[9], "the allocation is readable after the launch");
    CHECK(cudaFree(scratch));  // the next launch makes it live again, at the same address
    EXPECT(footprint() == before + bytes, "freeing keeps the footprint");
  }
  // Launched twice without the app freeing the allocation in between: refused, as CUDA does.
  launch_and_wait(mx, s);
  EXPECT(cudaGraphLaunch(mx, s) == cudaErrorInvalidValue, "a relaunch over an unfreed allocation");
  cudaGetLastError();
  CHECK(cudaFree(scratch));
  uint64_t high = 0;
  CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &high));
  EXPECT(high >= before + bytes, "the high mark: %llu", (unsigned long long)high);
  CHECK(cudaDeviceGraphMemTrim(0));
  EXPECT(footprint() == before, "a trim gives the freed memory back");
  uint64_t reset = 0;
  CHECK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &reset));
  CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &high));
  EXPECT(high == before, "the high mark reset: %llu", (unsigned long long)high);
  CHECK(cudaGraphExecDestroy(mx));

  // ---- pageable host memory in a stream capture.
  std::vector<int> p_in(n), p_out(n, 0);
  cudaGraph_t pg;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemcpyAsync(d_in, p_in.data(), bytes, cudaMemcpyHostToDevice, s));
  axpb<<<(n + 127) / 128, 128, 0, s>>>(d_in, d_mid, n, 7, 1);
  CHECK(cudaMemcpyAsync(p_out.data(), d_mid, bytes, cudaMemcpyDeviceToHost, s));
  static int seen_at_host_fn;  // what the captured host function finds in p_out
  static int* watched;
  watched = &p_out[5];
  CHECK(cudaLaunchHostFunc(
      s, [](void*) { seen_at_host_fn = *watched; }, nullptr));
  CHECK(cudaStreamEndCapture(s, &pg));
  cudaGraphExec_t pgx;
  CHECK(cudaGraphInstantiate(&pgx, pg, 0));
  CHECK(cudaGraphDestroy(pg));
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < n; ++i) p_in[i] = i - round;
    launch_and_wait(pgx, s);
    for (int i = 0; i < n; ++i) {
      EXPECT(p_out[i] == (i - round) * 7 + 1, "captured pageable round %d: p_out[%d] = %d", round,
             i, p_out[i]);
    }
    EXPECT(seen_at_host_fn == (5 - round) * 7 + 1,
           "the captured host function ran after the copy it follows: %d", seen_at_host_fn);
  }
  CHECK(cudaGraphExecDestroy(pgx));

  user_objects(d_mid, n, s);
  kernel_node_attributes(d_mid, n, s);
  memory_node_rules(d_in, d_mid, n, s);
  child_graph_updates(d_mid, n, s);

  for (cudaGraphExec_t e : {ox, px, x}) CHECK(cudaGraphExecDestroy(e));
  for (cudaGraph_t gr : {outer, parent, other, g}) CHECK(cudaGraphDestroy(gr));
  CHECK(cudaEventDestroy(ev));
  CHECK(cudaStreamDestroy(s));
  free_device(d_in, d_mid, d_out);
  printf("graph_nodes: all checks passed\n");
  return 0;
}
