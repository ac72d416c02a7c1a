// Stream capture and graphs: a capture that forks into a second stream and joins back, graph
// instantiation and repeated launches, the capture queries, a capture invalidated by an
// illegal synchronisation, and launches of one executable graph on different streams, which
// run one after another; executable-graph updates between captures, and a captured graph's DOT.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/check.h"

__global__ void axpb(float* x, int n, float a, float b) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = a * x[i] + b;
}

__global__ void add_into(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}

// Reads, dawdles, then writes back one more: two launches that overlap lose an increment.
__global__ void slow_increment(int* p) {
  int v = *p;
  for (int i = 0; i < 2000; ++i) __nanosleep(100);
  *p = v + 1;
}

// A host function that holds its stream for a while, then says so.
static std::atomic<bool> released{false};
static void CUDART_CB hold_then_release(void*) {
  usleep(200 * 1000);
  released = true;
}

int main() {
  const int n = 1000;
  float *x, *y, *z;
  CHECK(cudaMalloc((void**)&x, n * sizeof(float)));
  CHECK(cudaMalloc((void**)&y, n * sizeof(float)));
  CHECK(cudaMalloc((void**)&z, n * sizeof(float)));
  std::vector<float> hx(n);
  for (int i = 0; i < n; ++i) hx[i] = (float)(i % 17);
  CHECK(cudaMemcpy(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(y, 0, n * sizeof(float)));

  cudaStream_t s, s2;
  for (cudaStream_t* st : {&s, &s2}) CHECK(cudaStreamCreateWithFlags(st, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  for (cudaEvent_t* e : {&fork, &join}) CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));

  cudaStreamCaptureStatus st;
  CHECK(cudaStreamIsCapturing(s, &st));
  EXPECT(st == cudaStreamCaptureStatusNone, "capturing before the capture");
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaStreamIsCapturing(s, &st));
  EXPECT(st == cudaStreamCaptureStatusActive, "not capturing after begin");
  unsigned long long id = 0;
  CHECK(cudaStreamGetCaptureInfo(s, &st, &id));
  EXPECT(st == cudaStreamCaptureStatusActive && id != 0, "capture info %d %llu", (int)st, id);
  // x = 2x + 1 on s; z = 0 then z += x on s2 (forked after the first kernel); y += x on s.
  axpb<<<(n + 255) / 256, 256, 0, s>>>(x, n, 2.0f, 1.0f);
  CHECK(cudaEventRecord(fork, s));
  CHECK(cudaStreamWaitEvent(s2, fork, 0));
  CHECK(cudaStreamIsCapturing(s2, &st));
  EXPECT(st == cudaStreamCaptureStatusActive, "the forked stream did not join the capture");
  CHECK(cudaMemsetAsync(z, 0, n * sizeof(float), s2));
  add_into<<<(n + 255) / 256, 256, 0, s2>>>(z, x, n);
  CHECK(cudaEventRecord(join, s2));
  add_into<<<(n + 255) / 256, 256, 0, s>>>(y, x, n);
  CHECK(cudaStreamWaitEvent(s, join, 0));
  cudaGraph_t graph;
  CHECK(cudaStreamEndCapture(s, &graph));
  CHECK(cudaStreamIsCapturing(s2, &st));
  EXPECT(st == cudaStreamCaptureStatusNone, "the forked stream still captures");
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  EXPECT(nodes == 4, "graph has %zu nodes", nodes);
  // Its nodes, each with its type; the edges every node reports are the graph's, and the roots
  // are the nodes with no dependencies: the first kernel, which the memset (then the second
  // stream's kernel) and the first stream's second kernel follow.
  {
    std::vector<cudaGraphNode_t> all(nodes + 1, nullptr);
    size_t asked = all.size();
    CHECK(cudaGraphGetNodes(graph, all.data(), &asked));
    EXPECT(asked == 4 && all[4] == nullptr, "%zu nodes listed, the spare entry %p", asked,
           static_cast<void*>(all[4]));
    int kernels = 0, memsets = 0;
    size_t deps_seen = 0, roots_seen = 0, dependents_seen = 0;
    for (size_t i = 0; i < 4; ++i) {
      cudaGraphNodeType type;
      CHECK(cudaGraphNodeGetType(all[i], &type));
      kernels += type == cudaGraphNodeTypeKernel;
      memsets += type == cudaGraphNodeTypeMemset;
      size_t deps = 0, dependents = 0;
      CHECK(cudaGraphNodeGetDependencies(all[i], nullptr, nullptr, &deps));
      CHECK(cudaGraphNodeGetDependentNodes(all[i], nullptr, nullptr, &dependents));
      deps_seen += deps;
      dependents_seen += dependents;
      roots_seen += deps == 0;
    }
    EXPECT(kernels == 3 && memsets == 1, "%d kernel and %d memset nodes", kernels, memsets);
    size_t edges = 0, roots = 0;
    CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &edges));
    CHECK(cudaGraphGetRootNodes(graph, nullptr, &roots));
    EXPECT(edges == 3 && edges == deps_seen && edges == dependents_seen,
           "%zu edges; the nodes name %zu dependencies and %zu dependents", edges, deps_seen,
           dependents_seen);
    EXPECT(roots == 1 && roots == roots_seen, "%zu roots; %zu nodes without dependencies", roots,
           roots_seen);
    cudaGraphNode_t root = nullptr;
    CHECK(cudaGraphGetRootNodes(graph, &root, &roots));
    size_t forked = 0;
    CHECK(cudaGraphNodeGetDependentNodes(root, nullptr, nullptr, &forked));
    EXPECT(forked == 2, "the capture forks after its first kernel: %zu dependents", forked);
    std::vector<cudaGraphNode_t> from(edges), to(edges);
    CHECK(cudaGraphGetEdges(graph, from.data(), to.data(), nullptr, &edges));
    for (size_t i = 0; i < edges; ++i) {
      EXPECT(std::find(all.begin(), all.end(), from[i]) != all.end() &&
                 std::find(all.begin(), all.end(), to[i]) != all.end(),
             "edge %zu names a node the graph did not list", i);
    }
  }

  // Nothing ran while capturing.
  std::vector<float> hy(n), hz(n);
  CHECK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(hy[i] == 0.0f, "y[%d] = %f before any launch", i, hy[i]);

  // A clone of the captured graph does the same work: two launches of the graph and one of
  // its clone are three replays; the clone may go once instantiated.
  cudaGraph_t clone;
  CHECK(cudaGraphClone(&clone, graph));
  cudaGraphExec_t exec, clone_exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphInstantiate(&clone_exec, clone, 0));
  CHECK(cudaGraphDestroy(clone));
  const int launches = 3;
  for (int k = 0; k < launches - 1; ++k) CHECK(cudaGraphLaunch(exec, s));
  launch_and_wait(clone_exec, s);
  CHECK(cudaGraphExecDestroy(clone_exec));
  // A captured graph's executable graph tells the flags it was made with (an upload is not
  // one of them); destroyed, it is not launched again.
  {
    cudaGraphExec_t gone;
    cudaGraphInstantiateParams params = {};
    params.flags = cudaGraphInstantiateFlagAutoFreeOnLaunch | cudaGraphInstantiateFlagUpload;
    params.uploadStream = s;
    CHECK(cudaGraphInstantiateWithParams(&gone, graph, &params));
    unsigned long long flags = ~0ull;
    CHECK(cudaGraphExecGetFlags(gone, &flags));
    EXPECT(flags == cudaGraphInstantiateFlagAutoFreeOnLaunch,
           "the executable graph's flags are "
           "%llu",
           flags);
    CHECK(cudaGraphExecDestroy(gone));
    EXPECT(cudaGraphExecGetFlags(gone, &flags) == cudaErrorInvalidValue,
           "a destroyed executable graph told its flags");
    EXPECT(cudaGraphLaunch(gone, s) == cudaErrorInvalidValue,
           "a destroyed executable graph launched");
    EXPECT(cudaGraphExecDestroy(gone) == cudaErrorInvalidValue,
           "an executable graph destroyed twice");
    cudaGetLastError();
    CHECK(cudaStreamSynchronize(s));
  }
  // CPU model of three replays.
  std::vector<float> mx(hx), my(n, 0.0f), mz(n, 0.0f);
  for (int k = 0; k < launches; ++k)
    for (int i = 0; i < n; ++i) {
      mx[i] = 2.0f * mx[i] + 1.0f;
      mz[i] = mx[i];
      my[i] += mx[i];
    }
  std::vector<float> got(n);
  CHECK(cudaMemcpy(got.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hz.data(), z, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    EXPECT(got[i] == mx[i], "x[%d] = %f, want %f", i, got[i], mx[i]);
    EXPECT(hy[i] == my[i], "y[%d] = %f, want %f", i, hy[i], my[i]);
    EXPECT(hz[i] == mz[i], "z[%d] = %f, want %f", i, hz[i], mz[i]);
  }

  // Synchronising a capturing stream is illegal and ends the capture as invalidated.
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  axpb<<<1, 32, 0, s>>>(x, 32, 1.0f, 0.0f);
  cudaError_t e = cudaStreamSynchronize(s);
  EXPECT(e == cudaErrorStreamCaptureUnsupported, "sync in capture: %s", cudaGetErrorName(e));
  cudaGraph_t bad = nullptr;
  e = cudaStreamEndCapture(s, &bad);
  EXPECT(e == cudaErrorStreamCaptureInvalidated && bad == nullptr, "end of invalidated capture: %s",
         cudaGetErrorName(e));
  cudaGetLastError();
  // A 2D copy from pageable host memory is captured, as CUDA does (graph_host_copies.cu checks
  // the bytes at each launch); a graph never launched leaves nothing over for later calls.
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemcpy2DAsync(x, 16 * sizeof(float), hx.data(), 16 * sizeof(float), 16 * sizeof(float),
                          4, cudaMemcpyHostToDevice, s));
  bad = nullptr;
  CHECK(cudaStreamEndCapture(s, &bad));
  CHECK(cudaGraphDestroy(bad));
  CHECK(cudaDeviceSynchronize());
  // The stream works normally afterwards.
  axpb<<<(n + 255) / 256, 256, 0, s>>>(y, n, 0.0f, 5.0f);
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(hy[i] == 5.0f, "y[%d] = %f after the capture", i, hy[i]);

  // An executable graph updated from a second capture of the same work, arguments changed.
  {
    cudaGraph_t g1, g2;
    cudaGraphExec_t x1;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    axpb<<<(n + 255) / 256, 256, 0, s>>>(y, n, 0.0f, 1.0f);
    CHECK(cudaStreamEndCapture(s, &g1));
    CHECK(cudaGraphInstantiate(&x1, g1, 0));
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    axpb<<<(n + 255) / 256, 256, 0, s>>>(y, n, 0.0f, 9.0f);
    CHECK(cudaStreamEndCapture(s, &g2));
    update_exec(x1, g2);
    launch_and_wait(x1, s);
    CHECK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i)
      EXPECT(hy[i] == 9.0f, "y[%d] = %f after the updated launch", i, hy[i]);
    // A capture of other work (a memset in place of the kernel) does not update it, and the
    // executable graph keeps launching what it had.
    cudaGraph_t g3;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(cudaMemsetAsync(y, 0, n * sizeof(float), s));
    CHECK(cudaStreamEndCapture(s, &g3));
    cudaGraphExecUpdateResultInfo info;
    EXPECT(cudaGraphExecUpdate(x1, g3, &info) == cudaErrorGraphExecUpdateFailure,
           "a memset updated a kernel launch");
    EXPECT(info.result == cudaGraphExecUpdateErrorNodeTypeChanged ||
               info.result == cudaGraphExecUpdateErrorTopologyChanged,
           "update result %d", (int)info.result);
    (void)cudaGetLastError();
    CHECK(cudaMemset(y, 0, n * sizeof(float)));
    launch_and_wait(x1, s);
    CHECK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i)
      EXPECT(hy[i] == 9.0f, "y[%d] = %f after a refused update", i, hy[i]);

    // A captured graph's DOT names its kernel.
    char dot_path[] = "/tmp/cuwire-e2e-dot-XXXXXX";
    const int fd = mkstemp(dot_path);
    EXPECT(fd >= 0, "no temporary file");
    if (fd >= 0) {
      close(fd);
      CHECK(cudaGraphDebugDotPrint(g2, dot_path, cudaGraphDebugDotFlagsVerbose));
      std::string dot;
      if (FILE* f = fopen(dot_path, "r")) {
        char buf[4096];
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, f)) > 0) dot.append(buf, got);
        fclose(f);
      }
      unlink(dot_path);
      EXPECT(dot.rfind("digraph", 0) == 0, "the DOT file begins with '%.20s'", dot.c_str());
      EXPECT(dot.find("axpb") != std::string::npos, "the DOT does not name the kernel axpb");
    }
    destroy_graph(x1, g1);
    CHECK(cudaGraphDestroy(g2));
    CHECK(cudaGraphDestroy(g3));
  }

  // One executable graph launched on three streams back to back: CUDA orders each launch
  // behind the graph's earlier ones. Built node by node, and captured.
  {
    int* counter;
    CHECK(cudaMalloc(&counter, sizeof(int)));
    cudaStream_t t[3];
    for (auto& st : t) CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    for (int captured = 0; captured < 2; ++captured) {
      CHECK(cudaMemset(counter, 0, sizeof(int)));
      cudaGraph_t g;
      if (captured) {
        CHECK(cudaStreamBeginCapture(t[0], cudaStreamCaptureModeGlobal));
        slow_increment<<<1, 1, 0, t[0]>>>(counter);
        CHECK(cudaStreamEndCapture(t[0], &g));
      } else {
        CHECK(cudaGraphCreate(&g, 0));
        void* args[] = {&counter};
        cudaKernelNodeParams kp = {};
        kp.func = reinterpret_cast<void*>(slow_increment);
        kp.gridDim = dim3(1);
        kp.blockDim = dim3(1);
        kp.kernelParams = args;
        cudaGraphNode_t node;
        CHECK(cudaGraphAddKernelNode(&node, g, nullptr, 0, &kp));
      }
      cudaGraphExec_t gx;
      CHECK(cudaGraphInstantiate(&gx, g, 0));
      // The first launch waits behind a host function; the second, on another stream, must
      // wait for the first.
      released = false;
      CHECK(cudaLaunchHostFunc(t[0], hold_then_release, nullptr));
      CHECK(cudaGraphLaunch(gx, t[0]));
      CHECK(cudaGraphLaunch(gx, t[1]));
      CHECK(cudaStreamSynchronize(t[1]));
      EXPECT(released, "%s graph: its launch on a second stream ran before its first launch",
             captured ? "a captured" : "a built");
      for (int round = 0; round < 4; ++round) CHECK(cudaGraphLaunch(gx, t[(round + 2) % 3]));
      CHECK(cudaDeviceSynchronize());
      int launched = 0;
      CHECK(cudaMemcpy(&launched, counter, sizeof launched, cudaMemcpyDeviceToHost));
      EXPECT(launched == 6, "%s graph: 6 launches on 3 streams counted %d",
             captured ? "a captured" : "a built", launched);
      destroy_graph(gx, g);
    }
    for (auto& st : t) CHECK(cudaStreamDestroy(st));
    CHECK(cudaFree(counter));
  }

  // External event records and waits in a capture are nodes: each launch records the event
  // where the record stands, and waits for the event's record of that moment.
  {
    cudaStream_t cs, other;
    CHECK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    cudaEvent_t gate, start, stop;
    CHECK(cudaEventCreateWithFlags(&gate, cudaEventDisableTiming));
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    cudaGraph_t eg;
    CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    CHECK(cudaStreamWaitEvent(cs, gate, cudaEventWaitExternal));
    CHECK(cudaEventRecordWithFlags(start, cs, cudaEventRecordExternal));
    axpb<<<(n + 255) / 256, 256, 0, cs>>>(x, n, 1.0f, 1.0f);
    CHECK(cudaEventRecordWithFlags(stop, cs, cudaEventRecordExternal));
    CHECK(cudaStreamEndCapture(cs, &eg));
    cudaGraphExec_t ex;
    CHECK(cudaGraphInstantiate(&ex, eg, 0));
    released = false;
    CHECK(cudaLaunchHostFunc(other, hold_then_release, nullptr));
    CHECK(cudaEventRecord(gate, other));
    launch_and_wait(ex, cs);
    EXPECT(released, "the graph did not wait for the event it waits on externally");
    float ms = -1;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    EXPECT(ms >= 0, "elapsed time between the graph's external records: %f", ms);
    destroy_graph(ex, eg);
    for (cudaEvent_t ev : {gate, start, stop}) CHECK(cudaEventDestroy(ev));
    for (cudaStream_t st : {cs, other}) CHECK(cudaStreamDestroy(st));
  }

  // The capture modes' rule: a potentially unsafe call (here cudaMalloc) is refused on the
  // thread of a capture that is not relaxed, and in global mode from any thread while a global
  // capture is open; it invalidates the capture, whose end then fails, and the stream works on.
  {
    auto prohibited = [&](cudaStreamCaptureMode mode, bool from_other_thread) {
      CHECK(cudaStreamBeginCapture(s, mode));
      axpb<<<(n + 255) / 256, 256, 0, s>>>(z, n, 1.f, 0.f);
      void* p = nullptr;
      cudaError_t e = cudaSuccess;
      if (from_other_thread) {
        std::thread([&] { e = cudaMalloc(&p, 256); }).join();
      } else {
        e = cudaMalloc(&p, 256);
      }
      cudaStreamCaptureStatus status;
      CHECK(cudaStreamIsCapturing(s, &status));
      cudaGraph_t g = nullptr;
      const cudaError_t end = cudaStreamEndCapture(s, &g);
      cudaGetLastError();
      if (p) cudaFree(p);
      if (g) cudaGraphDestroy(g);
      const bool refused = e == cudaErrorStreamCaptureUnsupported;
      EXPECT(refused == (status == cudaStreamCaptureStatusInvalidated),
             "mode %d other thread %d: malloc %s, status %d", (int)mode, (int)from_other_thread,
             cudaGetErrorName(e), (int)status);
      EXPECT(refused == (end == cudaErrorStreamCaptureInvalidated),
             "mode %d other thread %d: malloc %s, end %s", (int)mode, (int)from_other_thread,
             cudaGetErrorName(e), cudaGetErrorName(end));
      EXPECT(refused || end == cudaSuccess, "end of a capture: %s", cudaGetErrorName(end));
      return refused;
    };
    EXPECT(prohibited(cudaStreamCaptureModeGlobal, false), "global, same thread: allowed");
    EXPECT(prohibited(cudaStreamCaptureModeGlobal, true), "global, other thread: allowed");
    EXPECT(prohibited(cudaStreamCaptureModeThreadLocal, false), "thread-local, same: allowed");
    EXPECT(!prohibited(cudaStreamCaptureModeThreadLocal, true), "thread-local, other: refused");
    EXPECT(!prohibited(cudaStreamCaptureModeRelaxed, false), "relaxed: refused");
    // A thread that exchanged its mode for relaxed may allocate during a global capture, and
    // a pageable copy (staged by the library) is no prohibited call.
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    EXPECT(mode == cudaStreamCaptureModeGlobal, "the thread's mode was %d", (int)mode);
    void* p = nullptr;
    CHECK(cudaMalloc(&p, 256));
    CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    std::vector<float> staged(n, 2.f);
    CHECK(cudaMemcpyAsync(z, staged.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
    cudaGraph_t g = nullptr;
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaFree(p));
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    launch_and_wait(x, s);
    float back = 0;
    CHECK(cudaMemcpy(&back, z + n - 1, sizeof back, cudaMemcpyDeviceToHost));
    EXPECT(back == 2.f, "the relaxed capture's copy gave %f", back);
    destroy_graph(x, g);
    // Waiting for an event recorded in an open capture is refused and invalidates it.
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    CHECK(cudaEventRecord(fork, s));
    EXPECT(cudaEventQuery(fork) == cudaErrorStreamCaptureUnsupported, "query of a captured event");
    EXPECT(cudaEventSynchronize(fork) == cudaErrorStreamCaptureUnsupported,
           "synchronisation with a captured event");
    g = nullptr;
    EXPECT(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated,
           "a capture whose event was waited for ended");
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    // The stream and the event work as before.
    CHECK(cudaEventRecord(fork, s));
    CHECK(cudaEventSynchronize(fork));
    // A capture that is not relaxed ends on the thread that began it.
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    axpb<<<(n + 255) / 256, 256, 0, s>>>(z, n, 1.f, 0.f);
    cudaError_t elsewhere = cudaSuccess;
    cudaGraph_t other_g = nullptr;
    std::thread([&] { elsewhere = cudaStreamEndCapture(s, &other_g); }).join();
    EXPECT(elsewhere == cudaErrorStreamCaptureWrongThread, "an end on another thread: %s",
           cudaGetErrorName(elsewhere));
    cudaGetLastError();
    g = nullptr;
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphDestroy(g));
    // A fork whose work is not joined back to the origin stream: the end fails, and no stream
    // captures after it; joined after its work, the same capture ends.
    for (int joined = 0; joined < 2; ++joined) {
      CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      CHECK(cudaEventRecord(fork, s));
      CHECK(cudaStreamWaitEvent(s2, fork, 0));
      CHECK(cudaEventRecord(join, s2));  // before the fork's work: joins none of it
      axpb<<<(n + 255) / 256, 256, 0, s2>>>(z, n, 1.f, 0.f);
      if (joined) CHECK(cudaEventRecord(join, s2));
      CHECK(cudaStreamWaitEvent(s, join, 0));
      g = nullptr;
      const cudaError_t end = cudaStreamEndCapture(s, &g);
      cudaGetLastError();
      EXPECT(end == (joined ? cudaSuccess : cudaErrorStreamCaptureUnjoined),
             "end of a capture with a fork %s: %s", joined ? "joined" : "not joined",
             cudaGetErrorName(end));
      CHECK(cudaStreamIsCapturing(s2, &st));
      EXPECT(st == cudaStreamCaptureStatusNone, "the fork still captures after the end");
      if (g) CHECK(cudaGraphDestroy(g));
    }
  }

  destroy_graph(exec, graph);
  for (cudaEvent_t e : {fork, join}) CHECK(cudaEventDestroy(e));
  for (cudaStream_t st : {s, s2}) CHECK(cudaStreamDestroy(st));
  free_device(x, y, z);
  printf("graphs: all checks passed\n");
  return 0;
}
