// Conditional graph nodes (client-lib/calls/graphs_nodes.cc and graphs_exec.cc; the sim's
// cudaGraphSetConditional): IF with and without ELSE, WHILE, SWITCH, a WHILE inside an IF,
// defaults set at each launch, clones, bodies filled by stream capture
// (cudaStreamBeginCaptureToGraph), a conditional node added to a graph under capture, and the
// refusals of a handle of another graph and of a wrong number of bodies.
#include "tests/e2e/check.h"

__global__ void set_if_odd(const int* in, cudaGraphConditionalHandle h) {
  cudaGraphSetConditional(h, *in & 1);
}
__global__ void add(int* p, int i, int v) { p[i] += v; }
// One iteration: counts down, and asks for another while the count is not yet zero.
__global__ void count_down(int* counter, int* iterations, cudaGraphConditionalHandle h) {
  --*counter;
  ++*iterations;
  cudaGraphSetConditional(h, *counter > 0 ? 1 : 0);
}
__global__ void set_value(const int* in, cudaGraphConditionalHandle h) {
  cudaGraphSetConditional(h, static_cast<unsigned>(*in));
}

namespace {

cudaGraphNode_t kernel_node(cudaGraph_t g, const cudaGraphNode_t* dep, void* func, void** args) {
  cudaGraphNodeParams p = {cudaGraphNodeTypeKernel};
  p.kernel.func = func;
  p.kernel.gridDim = dim3(1);
  p.kernel.blockDim = dim3(1);
  p.kernel.kernelParams = args;
  cudaGraphNode_t n;
  CHECK(cudaGraphAddNode(&n, g, dep, nullptr, dep ? 1 : 0, &p));
  return n;
}

cudaGraph_t* conditional_node(cudaGraph_t g, const cudaGraphNode_t* dep,
                              cudaGraphConditionalHandle h, cudaGraphConditionalNodeType type,
                              unsigned size, cudaGraphNode_t* out = nullptr) {
  cudaGraphNodeParams p = {cudaGraphNodeTypeConditional};
  p.conditional.handle = h;
  p.conditional.type = type;
  p.conditional.size = size;
  cudaGraphNode_t n;
  CHECK(cudaGraphAddNode(&n, g, dep, nullptr, dep ? 1 : 0, &p));
  EXPECT(p.conditional.phGraph_out != nullptr, "no body graphs");
  if (out) *out = n;
  return p.conditional.phGraph_out;
}

// One iteration of a WHILE body: counts *counter down, *iterations up, and decides h.
void count_down_node(cudaGraph_t body, int* counter, int* iterations,
                     cudaGraphConditionalHandle h) {
  void* args[] = {&counter, &iterations, &h};
  kernel_node(body, nullptr, (void*)count_down, args);
}

// A WHILE node of g with a new handle (into *h) whose default, 1, is set at each launch: the
// node's body graph.
cudaGraph_t while_node(cudaGraph_t g, cudaGraphConditionalHandle* h,
                       cudaGraphNode_t* out = nullptr) {
  CHECK(cudaGraphConditionalHandleCreate(h, g, 1, cudaGraphCondAssignDefault));
  return conditional_node(g, nullptr, *h, cudaGraphCondTypeWhile, 1, out)[0];
}

// A kernel reading *in sets a new handle of g (into *h); the conditional node it decides,
// behind it: the node's body graphs.
cudaGraph_t* decided_node(cudaGraph_t g, void* decide, const int* in, cudaGraphConditionalHandle* h,
                          cudaGraphConditionalNodeType type, unsigned size) {
  CHECK(cudaGraphConditionalHandleCreate(h, g));
  void* decide_args[] = {&in, h};
  cudaGraphNode_t n = kernel_node(g, nullptr, decide, decide_args);
  return conditional_node(g, &n, *h, type, size);
}

cudaGraph_t new_graph() {
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  return g;
}

cudaGraphExec_t instantiate(cudaGraph_t g) {
  cudaGraphExec_t x;
  CHECK(cudaGraphInstantiate(&x, g, 0));
  return x;
}

int read(const int* d, int i) {
  int v = 0;
  CHECK(cudaMemcpy(&v, d + i, sizeof v, cudaMemcpyDeviceToHost));
  return v;
}

}  // namespace

int main() {
  int *in, *out;
  CHECK(cudaMalloc(&in, 4 * sizeof(int)));
  CHECK(cudaMalloc(&out, 20 * sizeof(int)));
  CHECK(cudaMemset(out, 0, 20 * sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));

  // IF / ELSE: the kernel before the node decides; out[0] counts the then-branch, out[1] the
  // else-branch.
  {
    cudaGraph_t g = new_graph();
    cudaGraphConditionalHandle h;
    cudaGraph_t* bodies = decided_node(g, (void*)set_if_odd, in, &h, cudaGraphCondTypeIf, 2);
    int zero = 0, one = 1, v = 1;
    void* then_args[] = {&out, &zero, &v};
    void* else_args[] = {&out, &one, &v};
    kernel_node(bodies[0], nullptr, (void*)add, then_args);
    kernel_node(bodies[1], nullptr, (void*)add, else_args);
    cudaGraphExec_t x = instantiate(g);
    CHECK(cudaMemset(out, 0, 16 * sizeof(int)));
    for (int input : {1, 2, 3, 5, 8}) {
      CHECK(cudaMemcpy(in, &input, sizeof input, cudaMemcpyHostToDevice));
      CHECK(cudaGraphLaunch(x, s));
    }
    CHECK(cudaStreamSynchronize(s));
    EXPECT(read(out, 0) == 3 && read(out, 1) == 2, "if/else: then %d times, else %d times",
           read(out, 0), read(out, 1));
    // CUDA's rules for a graph with conditional nodes: no clone, no child graph node, one
    // executable graph at a time (another once the first is gone).
    cudaGraph_t parent = new_graph();
    expect_uncopyable(g, parent, "conditional nodes");
    CHECK(cudaGraphDestroy(parent));
    cudaGraphExec_t cx;
    EXPECT(cudaGraphInstantiate(&cx, g, 0) != cudaSuccess, "a second executable graph");
    cudaGetLastError();
    CHECK(cudaGraphExecDestroy(x));
    cx = instantiate(g);
    CHECK(cudaGraphLaunch(cx, s));  // input 8: else
    CHECK(cudaStreamSynchronize(s));
    EXPECT(read(out, 1) == 3, "the new executable graph: else %d times", read(out, 1));
    CHECK(cudaGraphExecDestroy(cx));

    // Refused: a handle made for another graph, and an IF with three bodies.
    cudaGraph_t other = new_graph();
    cudaGraphNodeParams p = {cudaGraphNodeTypeConditional};
    p.conditional.handle = h;
    p.conditional.type = cudaGraphCondTypeIf;
    p.conditional.size = 1;
    cudaGraphNode_t n;
    EXPECT(cudaGraphAddNode(&n, other, nullptr, nullptr, 0, &p) != cudaSuccess,
           "a handle of another graph was taken");
    (void)cudaGetLastError();
    cudaGraphConditionalHandle oh;
    CHECK(cudaGraphConditionalHandleCreate(&oh, other));
    p.conditional.handle = oh;
    p.conditional.size = 3;
    EXPECT(cudaGraphAddNode(&n, other, nullptr, nullptr, 0, &p) != cudaSuccess,
           "an IF with three bodies was taken");
    (void)cudaGetLastError();
    CHECK(cudaGraphDestroy(other));
    CHECK(cudaGraphDestroy(g));
  }

  // WHILE, with the handle's default (1) set at each launch: the body runs until the counter
  // reaches zero.
  {
    cudaGraph_t g = new_graph();
    cudaGraphConditionalHandle h;
    cudaGraph_t body = while_node(g, &h);
    int* counter = out + 2;
    int* iterations = out + 3;
    count_down_node(body, counter, iterations, h);
    cudaGraphExec_t x = instantiate(g);
    const int start = 7;
    for (int launch = 0; launch < 2; ++launch) {
      CHECK(cudaMemcpy(counter, &start, sizeof start, cudaMemcpyHostToDevice));
      launch_and_wait(x, s);
    }
    EXPECT(read(out, 2) == 0 && read(out, 3) == 14, "while: counter %d, %d iterations",
           read(out, 2), read(out, 3));
    destroy_graph(x, g);
  }

  // A WHILE body filled by capturing a stream into it (cudaStreamBeginCaptureToGraph), and a
  // capture into the top graph after the loop, behind it.
  {
    cudaGraph_t g = new_graph();
    cudaGraphConditionalHandle h;
    cudaGraphNode_t loop_node;
    cudaGraph_t body = while_node(g, &h, &loop_node);
    int* counter = out + 8;
    int* iterations = out + 9;
    cudaStream_t cs;
    CHECK(cudaStreamCreate(&cs));
    CHECK(
        cudaStreamBeginCaptureToGraph(cs, body, nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
    add<<<1, 1, 0, cs>>>(out, 10, 1);  // once per iteration
    count_down<<<1, 1, 0, cs>>>(counter, iterations, h);
    CHECK(cudaStreamEndCapture(cs, nullptr));
    CHECK(
        cudaStreamBeginCaptureToGraph(cs, g, &loop_node, nullptr, 1, cudaStreamCaptureModeGlobal));
    add<<<1, 1, 0, cs>>>(out, 11, 100);  // after the loop
    cudaGraph_t same = nullptr;
    CHECK(cudaStreamEndCapture(cs, &same));
    EXPECT(same == g, "the capture into a graph returned another graph");
    CHECK(cudaStreamDestroy(cs));
    size_t n = 0;
    CHECK(cudaGraphGetNodes(g, nullptr, &n));
    EXPECT(n == 2, "%zu nodes in the graph, want the loop and the captured work", n);
    cudaGraphExec_t x = instantiate(g);
    const int start = 5;
    CHECK(cudaMemcpy(counter, &start, sizeof start, cudaMemcpyHostToDevice));
    launch_and_wait(x, s);
    EXPECT(read(out, 9) == 5 && read(out, 10) == 5 && read(out, 11) == 100,
           "captured body: %d iterations, %d adds, after the loop %d", read(out, 9), read(out, 10),
           read(out, 11));
    destroy_graph(x, g);
  }

  // A conditional node added to a graph under capture, as the app finds it through
  // cudaStreamGetCaptureInfo, made the capture's dependency (cudaStreamUpdateCaptureDependencies),
  // with its body captured from another stream; kernels before and after it are captured.
  {
    cudaStream_t cs, body_stream;
    CHECK(cudaStreamCreate(&cs));
    CHECK(cudaStreamCreate(&body_stream));
    CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureStatus status;
    cudaGraph_t capturing = nullptr;
    const cudaGraphNode_t* deps = nullptr;
    size_t ndeps = 0;
    CHECK(cudaStreamGetCaptureInfo(cs, &status, nullptr, &capturing, &deps, nullptr, &ndeps));
    EXPECT(status == cudaStreamCaptureStatusActive && capturing, "no graph under capture");
    cudaGraphConditionalHandle h;
    CHECK(cudaGraphConditionalHandleCreate(&h, capturing, 1, cudaGraphCondAssignDefault));
    int* counter = out + 12;
    int* iterations = out + 13;
    const int start = 4;
    CHECK(cudaMemcpyAsync(counter, &start, sizeof start, cudaMemcpyHostToDevice, cs));
    add<<<1, 1, 0, cs>>>(out, 14, 1000);  // before the loop
    CHECK(cudaStreamGetCaptureInfo(cs, &status, nullptr, &capturing, &deps, nullptr, &ndeps));
    cudaGraphNodeParams p = {cudaGraphNodeTypeConditional};
    p.conditional.handle = h;
    p.conditional.type = cudaGraphCondTypeWhile;
    p.conditional.size = 1;
    cudaGraphNode_t loop;
    CHECK(cudaGraphAddNode(&loop, capturing, deps, nullptr, ndeps, &p));
    CHECK(cudaStreamUpdateCaptureDependencies(cs, &loop, nullptr, 1,
                                              cudaStreamSetCaptureDependencies));
    CHECK(cudaStreamBeginCaptureToGraph(body_stream, p.conditional.phGraph_out[0], nullptr, nullptr,
                                        0, cudaStreamCaptureModeRelaxed));
    count_down<<<1, 1, 0, body_stream>>>(counter, iterations, h);
    CHECK(cudaStreamEndCapture(body_stream, nullptr));
    add<<<1, 1, 0, cs>>>(out, 15, 1);  // after the loop: sees the counter at zero
    cudaGraph_t g;
    CHECK(cudaStreamEndCapture(cs, &g));
    cudaGraphExec_t x = instantiate(g);
    CHECK(cudaGraphLaunch(x, s));
    launch_and_wait(x, s);
    EXPECT(read(out, 13) == 8 && read(out, 14) == 2000 && read(out, 15) == 2 && read(out, 12) == 0,
           "captured loop: %d iterations, before %d, after %d, counter %d", read(out, 13),
           read(out, 14), read(out, 15), read(out, 12));
    destroy_graph(x, g);

    // Asked for the graph under capture, and nothing added to it: the capture is as it was.
    CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    CHECK(cudaStreamGetCaptureInfo(cs, &status, nullptr, &capturing, &deps, nullptr, &ndeps));
    add<<<1, 1, 0, cs>>>(out, 14, 1);
    CHECK(cudaStreamEndCapture(cs, &g));
    x = instantiate(g);
    launch_and_wait(x, s);
    EXPECT(read(out, 14) == 2001, "plain capture after the query: %d", read(out, 14));
    destroy_graph(x, g);

    // The same in a capture of two streams: the app's node (a memset of out[17]) becomes the
    // origin's dependency; the forked stream's work before and after the update runs once per
    // launch, and the kernel after the node sees its value.
    cudaEvent_t fk, jn;
    CHECK(cudaEventCreateWithFlags(&fk, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&jn, cudaEventDisableTiming));
    CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    CHECK(cudaEventRecord(fk, cs));
    CHECK(cudaStreamWaitEvent(body_stream, fk, 0));
    add<<<1, 1, 0, body_stream>>>(out, 16, 1);
    add<<<1, 1, 0, cs>>>(out, 17, 100);  // overwritten by the app's memset after it
    CHECK(cudaStreamGetCaptureInfo(cs, &status, nullptr, &capturing, &deps, nullptr, &ndeps));
    cudaMemsetParams ms = {};
    ms.dst = out + 17;
    ms.value = 7;
    ms.elementSize = sizeof(int);
    ms.width = 1;
    ms.height = 1;
    cudaGraphNode_t set17;
    CHECK(cudaGraphAddMemsetNode(&set17, capturing, deps, ndeps, &ms));
    CHECK(cudaStreamUpdateCaptureDependencies(cs, &set17, nullptr, 1,
                                              cudaStreamSetCaptureDependencies));
    add<<<1, 1, 0, body_stream>>>(out, 16, 10);
    add<<<1, 1, 0, cs>>>(out, 17, 1);
    CHECK(cudaEventRecord(jn, body_stream));
    CHECK(cudaStreamWaitEvent(cs, jn, 0));
    CHECK(cudaStreamEndCapture(cs, &g));
    x = instantiate(g);
    for (int round = 1; round <= 2; ++round) {
      launch_and_wait(x, s);
      EXPECT(read(out, 16) == 11 * round && read(out, 17) == 8,
             "update in a capture of two streams, launch %d: out[16] = %d, out[17] = %d", round,
             read(out, 16), read(out, 17));
    }
    destroy_graph(x, g);
    CHECK(cudaEventDestroy(fk));
    CHECK(cudaEventDestroy(jn));
    CHECK(cudaStreamDestroy(cs));
    CHECK(cudaStreamDestroy(body_stream));
  }

  // SWITCH over three bodies; a value past the last runs none. Body i adds 10 + i to out[4].
  {
    cudaGraph_t g = new_graph();
    cudaGraphConditionalHandle h;
    cudaGraph_t* bodies = decided_node(g, (void*)set_value, in, &h, cudaGraphCondTypeSwitch, 3);
    int four = 4, adds[3] = {10, 11, 12};
    for (int i = 0; i < 3; ++i) {
      void* args[] = {&out, &four, &adds[i]};
      kernel_node(bodies[i], nullptr, (void*)add, args);
    }
    cudaGraphExec_t x = instantiate(g);
    int total = 0;
    for (int input : {2, 0, 7, 1}) {
      CHECK(cudaMemcpy(in, &input, sizeof input, cudaMemcpyHostToDevice));
      launch_and_wait(x, s);
      if (input < 3) total += 10 + input;
    }
    EXPECT(read(out, 4) == total, "switch: %d, want %d", read(out, 4), total);
    destroy_graph(x, g);
  }

  // A WHILE inside an IF: the loop runs only when the input is odd.
  {
    cudaGraph_t g = new_graph();
    cudaGraphConditionalHandle hif;
    cudaGraph_t* then = decided_node(g, (void*)set_if_odd, in, &hif, cudaGraphCondTypeIf, 1);
    cudaGraphConditionalHandle hwhile;
    cudaGraph_t loop = while_node(then[0], &hwhile);
    int* counter = out + 5;
    int* iterations = out + 6;
    count_down_node(loop, counter, iterations, hwhile);
    cudaGraphExec_t x = instantiate(g);
    const int start = 3;
    for (int input : {3, 4}) {
      CHECK(cudaMemcpy(in, &input, sizeof input, cudaMemcpyHostToDevice));
      CHECK(cudaMemcpy(counter, &start, sizeof start, cudaMemcpyHostToDevice));
      launch_and_wait(x, s);
    }
    EXPECT(read(out, 6) == 3, "nested: %d iterations, want 3 (one odd launch)", read(out, 6));
    destroy_graph(x, g);
  }

  CHECK(cudaStreamDestroy(s));
  free_device(in, out);
  printf("graph_conditional: all checks passed\n");
  return 0;
}
