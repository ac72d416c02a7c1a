// Copies to and from pinned host memory inside a stream capture (CUDA allows them): a graph
// of host-to-device copy, kernel, device-to-host copy is launched several times, the host
// changing the input between launches; after each synchronisation the output holds that
// launch's result. A host function captured after a copy into pinned memory sees its bytes;
// one in the middle of a capture runs there, between the copies around it, in a capture of one
// stream or of several.
// Stream-ordered allocations in a capture are the graph's: made and freed at every launch.
#include <atomic>
#include <thread>
#include <vector>

#include "tests/e2e/check.h"

__global__ void scale_add(const int* in, int* out, int n, int k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 3 + k;
}

__global__ void fill(int* p, int n, int v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v + i;
}

static int seen_by_host_fn = -1;
static void CUDART_CB read_first(void* p) { seen_by_host_fn = *static_cast<int*>(p); }

struct Doubling {
  int* p;
  int n;
  int calls;
};
static void CUDART_CB double_all(void* arg) {
  Doubling* d = static_cast<Doubling*>(arg);
  for (int i = 0; i < d->n; ++i) d->p[i] *= 2;
  ++d->calls;
}

// A host function in the middle of a capture runs where it was enqueued: after the copy to the
// host before it, and before the copy from the host after it, which takes what it wrote. `mid`
// is pinned or pageable memory; `res` takes the result. Forked: the capture spans three
// streams, the function is on a forked one, a third stream joins after it through an event
// recorded before it, and a second function on the origin reads the joined result.
static void host_function_mid_capture(int* mid, int* res, const char* what, bool forked) {
  const int n = 3000;
  const size_t bytes = sizeof(int) * n;
  int *d_a, *d_b, *d_c, *d_e;
  CHECK(cudaMalloc(&d_a, bytes));
  CHECK(cudaMalloc(&d_b, bytes));
  CHECK(cudaMalloc(&d_c, bytes));
  CHECK(cudaMalloc(&d_e, bytes));
  cudaStream_t s, s2, s3;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s3, cudaStreamNonBlocking));
  cudaEvent_t fork, first_done, join2, join3;
  for (cudaEvent_t* e : {&fork, &first_done, &join2, &join3}) {
    CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  }
  Doubling dbl{mid, n, 0};
  seen_by_host_fn = -1;
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cudaStream_t w = s;  // where the function goes
  if (forked) {
    CHECK(cudaEventRecord(fork, s));
    CHECK(cudaStreamWaitEvent(s2, fork, 0));
    w = s2;
  }
  scale_add<<<(n + 255) / 256, 256, 0, w>>>(d_a, d_b, n, 1);
  CHECK(cudaEventRecord(first_done, w));
  CHECK(cudaMemcpyAsync(mid, d_b, bytes, cudaMemcpyDeviceToHost, w));
  CHECK(cudaLaunchHostFunc(w, double_all, &dbl));
  CHECK(cudaMemcpyAsync(d_a, mid, bytes, cudaMemcpyHostToDevice, w));
  scale_add<<<(n + 255) / 256, 256, 0, w>>>(d_a, d_e, n, 0);
  if (forked) {
    // Joins after the cut, through an event recorded before it: follows the first kernel.
    CHECK(cudaStreamWaitEvent(s3, first_done, 0));
    cudaStreamCaptureStatus st;
    CHECK(cudaStreamIsCapturing(s3, &st));
    EXPECT(st == cudaStreamCaptureStatusActive, "%s: the third stream did not join", what);
    CHECK(cudaMemcpyAsync(d_c, d_b, bytes, cudaMemcpyDeviceToDevice, s3));
    CHECK(cudaEventRecord(join2, s2));
    CHECK(cudaStreamWaitEvent(s, join2, 0));
    CHECK(cudaEventRecord(join3, s3));
    CHECK(cudaStreamWaitEvent(s, join3, 0));
  }
  CHECK(cudaMemcpyAsync(res, d_e, bytes, cudaMemcpyDeviceToHost, s));
  if (forked) CHECK(cudaLaunchHostFunc(s, read_first, res));
  CHECK(cudaStreamEndCapture(s, &g));
  EXPECT(dbl.calls == 0, "%s: the host function ran during the capture", what);
  cudaGraphExec_t e;
  CHECK(cudaGraphInstantiate(&e, g, 0));
  for (int round = 0; round < 2; ++round) {
    std::vector<int> a(n), c(n);
    for (int i = 0; i < n; ++i) a[i] = i - round * 5;
    CHECK(cudaMemcpy(d_a, a.data(), bytes, cudaMemcpyHostToDevice));
    launch_and_wait(e, s);
    EXPECT(dbl.calls == round + 1, "%s: the host function ran %d times", what, dbl.calls);
    for (int i = 0; i < n; ++i) {
      const int want = (a[i] * 3 + 1) * 2 * 3;
      if (res[i] != want) {
        EXPECT(false, "%s, round %d: res[%d] = %d, want %d", what, round, i, res[i], want);
        break;
      }
    }
    if (!forked) continue;
    EXPECT(seen_by_host_fn == res[0], "%s, round %d: the second function saw %d, want %d", what,
           round, seen_by_host_fn, res[0]);
    CHECK(cudaMemcpy(c.data(), d_c, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) {
      if (c[i] != a[i] * 3 + 1) {
        EXPECT(false, "%s, round %d: c[%d] = %d, want %d", what, round, i, c[i], a[i] * 3 + 1);
        break;
      }
    }
  }
  destroy_graph(e, g);
  for (cudaEvent_t ev : {fork, first_done, join2, join3}) CHECK(cudaEventDestroy(ev));
  for (cudaStream_t st : {s, s2, s3}) CHECK(cudaStreamDestroy(st));
  for (int* p : {d_a, d_b, d_c, d_e}) CHECK(cudaFree(p));
}

__global__ void increment(int* p) { atomicAdd(p, 1); }

static std::atomic<int> counted{0};
static void CUDART_CB count_call(void*) { counted.fetch_add(1); }

// Host functions on the origin cut a capture of two streams while another thread launches
// kernels into the second: every kernel is the graph's, none runs during the capture.
static void host_functions_while_another_thread_captures() {
  int* counter;
  CHECK(cudaMalloc(&counter, sizeof(int)));
  CHECK(cudaMemset(counter, 0, sizeof(int)));
  cudaStream_t s, s2;
  for (cudaStream_t* st : {&s, &s2}) CHECK(cudaStreamCreateWithFlags(st, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  for (cudaEvent_t* e : {&fork, &join}) CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  const int kernels = 300, functions = 60;
  counted = 0;
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  CHECK(cudaEventRecord(fork, s));
  CHECK(cudaStreamWaitEvent(s2, fork, 0));
  std::atomic<int> launch_errors{0};
  std::thread other([&] {
    for (int i = 0; i < kernels; ++i) {
      increment<<<1, 1, 0, s2>>>(counter);
      if (cudaGetLastError() != cudaSuccess) launch_errors.fetch_add(1);
    }
  });
  for (int i = 0; i < functions; ++i) CHECK(cudaLaunchHostFunc(s, count_call, nullptr));
  other.join();
  EXPECT(launch_errors == 0, "%d launches into the capture failed", launch_errors.load());
  CHECK(cudaEventRecord(join, s2));
  CHECK(cudaStreamWaitEvent(s, join, 0));
  CHECK(cudaStreamEndCapture(s, &g));
  int during = -1;
  CHECK(cudaMemcpy(&during, counter, sizeof during, cudaMemcpyDeviceToHost));
  EXPECT(during == 0 && counted == 0, "during the capture %d kernels and %d functions ran", during,
         counted.load());
  cudaGraphExec_t e;
  CHECK(cudaGraphInstantiate(&e, g, 0));
  launch_and_wait(e, s);
  int after = -1;
  CHECK(cudaMemcpy(&after, counter, sizeof after, cudaMemcpyDeviceToHost));
  EXPECT(after == kernels && counted == functions, "a launch ran %d kernels and %d functions",
         after, counted.load());
  destroy_graph(e, g);
  for (cudaEvent_t ev : {fork, join}) CHECK(cudaEventDestroy(ev));
  for (cudaStream_t st : {s, s2}) CHECK(cudaStreamDestroy(st));
  CHECK(cudaFree(counter));
}

// 2D and 3D copies of host memory (pageable or pinned) in a capture: the host rows are read
// at each launch, the results land in the host rows only (the bytes between them stay), and a
// 2D copy into a CUDA array works the same way.
static void pitched_copies_in_capture(bool pinned) {
  const char* what = pinned ? "pinned" : "pageable";
  const int w = 100, h = 30, d = 2;  // ints per row, rows, slices
  const int host_pitch = 128;        // ints: 28 between rows stay the app's
  const size_t host_bytes = sizeof(int) * host_pitch * h * d;
  int *in, *out;
  if (pinned) {
    CHECK(cudaMallocHost(&in, host_bytes));
    CHECK(cudaMallocHost(&out, host_bytes));
  } else {
    in = static_cast<int*>(malloc(host_bytes));
    out = static_cast<int*>(malloc(host_bytes));
  }
  int* dev;
  size_t dev_pitch = 0;
  CHECK(cudaMallocPitch(&dev, &dev_pitch, w * sizeof(int), h * d));
  cudaArray_t array;
  cudaChannelFormatDesc fmt = cudaCreateChannelDesc<int>();
  CHECK(cudaMallocArray(&array, &fmt, w, h));
  int* from_array;
  CHECK(cudaMalloc(&from_array, sizeof(int) * w * h));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  // In: the first slice by a 2D copy.
  CHECK(cudaMemcpy2DAsync(dev, dev_pitch, in, host_pitch * sizeof(int), w * sizeof(int), h,
                          cudaMemcpyHostToDevice, s));
  // The second slice by a 3D copy.
  cudaMemcpy3DParms p3 = {};
  p3.srcPtr = make_cudaPitchedPtr(in, host_pitch * sizeof(int), w * sizeof(int), h);
  p3.srcPos = make_cudaPos(0, 0, 1);
  p3.dstPtr = make_cudaPitchedPtr(dev, dev_pitch, w * sizeof(int), h);
  p3.dstPos = make_cudaPos(0, 0, 1);
  p3.extent = make_cudaExtent(w * sizeof(int), h, 1);
  p3.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3DAsync(&p3, s));
  // The first slice into an array too.
  CHECK(cudaMemcpy2DToArrayAsync(array, 0, 0, in, host_pitch * sizeof(int), w * sizeof(int), h,
                                 cudaMemcpyHostToDevice, s));
  scale_add<<<(int)(dev_pitch / sizeof(int) * h * d + 255) / 256, 256, 0, s>>>(
      dev, dev, (int)(dev_pitch / sizeof(int) * h * d), 1);
  CHECK(cudaMemcpy2DFromArrayAsync(from_array, w * sizeof(int), array, 0, 0, w * sizeof(int), h,
                                   cudaMemcpyDeviceToDevice, s));
  // Out: both slices by one 3D copy.
  cudaMemcpy3DParms back = {};
  back.srcPtr = make_cudaPitchedPtr(dev, dev_pitch, w * sizeof(int), h);
  back.dstPtr = make_cudaPitchedPtr(out, host_pitch * sizeof(int), w * sizeof(int), h);
  back.extent = make_cudaExtent(w * sizeof(int), h, d);
  back.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3DAsync(&back, s));
  CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t e;
  CHECK(cudaGraphInstantiate(&e, g, 0));
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < host_pitch * h * d; ++i) {
      in[i] = i * (round + 2);
      out[i] = -7;
    }
    launch_and_wait(e, s);
    for (int z = 0; z < d; ++z) {
      for (int y = 0; y < h; ++y) {
        for (int x = 0; x < host_pitch; ++x) {
          const int i = (z * h + y) * host_pitch + x;
          const int want = x < w ? in[i] * 3 + 1 : -7;
          EXPECT(out[i] == want, "%s round %d: out[%d][%d][%d] = %d, want %d", what, round, z, y, x,
                 out[i], want);
        }
      }
    }
    int got[w * h];
    CHECK(cudaMemcpy(got, from_array, sizeof got, cudaMemcpyDeviceToHost));
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        EXPECT(got[y * w + x] == in[y * host_pitch + x], "%s round %d: array[%d][%d] = %d, want %d",
               what, round, y, x, got[y * w + x], in[y * host_pitch + x]);
      }
    }
  }
  destroy_graph(e, g);
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFreeArray(array));
  free_device(from_array, dev);
  if (pinned) {
    CHECK(cudaFreeHost(in));
    CHECK(cudaFreeHost(out));
  } else {
    free(in);
    free(out);
  }
}

int main() {
  host_functions_while_another_thread_captures();
  pitched_copies_in_capture(false);
  pitched_copies_in_capture(true);
  const int n = 5000;
  const size_t bytes = sizeof(int) * n;
  int *h_in, *h_out;
  CHECK(cudaMallocHost(&h_in, bytes));
  CHECK(cudaHostAlloc(&h_out, bytes, cudaHostAllocDefault));
  int *d_in, *d_out;
  CHECK(cudaMalloc(&d_in, bytes));
  CHECK(cudaMalloc(&d_out, bytes));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  for (int i = 0; i < n; ++i) h_in[i] = i;
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemcpyAsync(d_in, h_in, bytes, cudaMemcpyHostToDevice, s));
  scale_add<<<(n + 255) / 256, 256, 0, s>>>(d_in, d_out, n, 7);
  CHECK(cudaMemcpyAsync(h_out, d_out, bytes, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamEndCapture(s, &graph));
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  EXPECT(nodes == 3, "the graph has %zu nodes, want 3", nodes);
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  // Nothing ran during the capture.
  for (int i = 0; i < n; ++i)
    EXPECT(h_out[i] == 0, "h_out[%d] = %d before any launch", i, h_out[i]);

  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < n; ++i) h_in[i] = i * (round + 1) - round;
    launch_and_wait(exec, s);
    for (int i = 0; i < n; ++i) {
      const int want = (i * (round + 1) - round) * 3 + 7;
      EXPECT(h_out[i] == want, "round %d: h_out[%d] = %d, want %d", round, i, h_out[i], want);
    }
  }
  // Through cudaMemcpyDefault (unified addressing) too, in a second graph.
  cudaGraph_t g2;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemcpyAsync(d_in, h_out, bytes, cudaMemcpyDefault, s));
  CHECK(cudaMemcpyAsync(h_in, d_in, bytes, cudaMemcpyDefault, s));
  CHECK(cudaStreamEndCapture(s, &g2));
  cudaGraphExec_t e2;
  CHECK(cudaGraphInstantiate(&e2, g2, 0));
  h_out[17] = -5;
  launch_and_wait(e2, s);
  EXPECT(h_in[17] == -5, "h_in[17] = %d after the copy graph", h_in[17]);
  EXPECT(h_in[n - 1] == h_out[n - 1], "h_in[n-1] = %d", h_in[n - 1]);

  // A host function after a copy into pinned memory, in a capture: it sees the copied bytes.
  cudaGraph_t g3;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  scale_add<<<(n + 255) / 256, 256, 0, s>>>(d_in, d_out, n, 1);
  CHECK(cudaMemcpyAsync(h_out, d_out, bytes, cudaMemcpyDeviceToHost, s));
  CHECK(cudaLaunchHostFunc(s, read_first, h_out));
  CHECK(cudaStreamEndCapture(s, &g3));
  cudaGraphExec_t e3;
  CHECK(cudaGraphInstantiate(&e3, g3, 0));
  for (int round = 0; round < 2; ++round) {
    CHECK(cudaMemcpy(d_in, &round, sizeof round, cudaMemcpyHostToDevice));
    h_out[0] = -7;
    launch_and_wait(e3, s);
    EXPECT(seen_by_host_fn == round * 3 + 1, "round %d: the host function saw %d, want %d", round,
           seen_by_host_fn, round * 3 + 1);
  }

  {
    int *mid, *res;
    CHECK(cudaMallocHost(&mid, sizeof(int) * 3000));
    CHECK(cudaMallocHost(&res, sizeof(int) * 3000));
    std::vector<int> mid2(3000), res2(3000);
    for (bool forked : {false, true}) {
      host_function_mid_capture(mid, res, forked ? "pinned, forked" : "pinned", forked);
      host_function_mid_capture(mid2.data(), res2.data(), forked ? "pageable, forked" : "pageable",
                                forked);
    }
    CHECK(cudaFreeHost(mid));
    CHECK(cudaFreeHost(res));
  }

  // cudaMallocAsync and cudaFreeAsync in a capture: every launch has the block again.
  cudaGraph_t g4;
  int* tmp = nullptr;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMallocAsync(&tmp, bytes, s));
  EXPECT(tmp != nullptr, "a captured cudaMallocAsync gives an address");
  fill<<<(n + 255) / 256, 256, 0, s>>>(tmp, n, 100);
  CHECK(cudaMemcpyAsync(d_out, tmp, bytes, cudaMemcpyDeviceToDevice, s));
  CHECK(cudaFreeAsync(tmp, s));
  CHECK(cudaStreamEndCapture(s, &g4));
  cudaGraphExec_t e4;
  CHECK(cudaGraphInstantiate(&e4, g4, 0));
  for (int round = 0; round < 3; ++round) {
    CHECK(cudaMemset(d_out, 0, bytes));
    launch_and_wait(e4, s);
    CHECK(cudaMemcpy(h_in, d_out, bytes, cudaMemcpyDeviceToHost));
    EXPECT(h_in[0] == 100 && h_in[n - 1] == 100 + n - 1, "launch %d: %d %d", round, h_in[0],
           h_in[n - 1]);
  }
  // Between launches the graph's block is not the app's: a copy from it is refused.
  EXPECT(cudaMemcpy(h_in, tmp, 4, cudaMemcpyDeviceToHost) != cudaSuccess,
         "the graph's freed block copied from outside a launch");
  cudaGetLastError();

  // A captured cudaMallocAsync with no free in the graph: each launch leaves the block live
  // for the app, which frees it (cudaFree or cudaFreeAsync) before the next launch makes it
  // again at the same address.
  cudaGraph_t g5;
  int* kept = nullptr;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMallocAsync(&kept, bytes, s));
  fill<<<(n + 255) / 256, 256, 0, s>>>(kept, n, 500);
  CHECK(cudaStreamEndCapture(s, &g5));
  cudaGraphExec_t e5;
  CHECK(cudaGraphInstantiate(&e5, g5, 0));
  size_t free_before = 0, free_launched = 0, free_freed = 0, total = 0;
  for (int round = 0; round < 4; ++round) {
    CHECK(cudaMemGetInfo(&free_before, &total));
    CHECK(cudaGraphLaunch(e5, s));
    CHECK(cudaMemcpyAsync(h_in, kept, bytes, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(h_in[0] == 500 && h_in[n - 1] == 500 + n - 1, "kept block, launch %d: %d %d", round,
           h_in[0], h_in[n - 1]);
    CHECK(cudaMemGetInfo(&free_launched, &total));
    // (Before the first launch the block may already be counted: the capture made it.)
    EXPECT(round == 0 || free_launched + bytes <= free_before,
           "launch %d: the graph's block is not counted", round);
    if (round % 2) {
      CHECK(cudaFreeAsync(kept, s));
      CHECK(cudaStreamSynchronize(s));
    } else {
      CHECK(cudaFree(kept));
    }
    CHECK(cudaMemGetInfo(&free_freed, &total));
    EXPECT(free_freed >= free_launched + bytes, "launch %d: the freed block is still counted",
           round);
  }
  // Freed and not launched again: not the app's.
  EXPECT(cudaFree(kept) != cudaSuccess, "the graph's block freed twice");
  cudaGetLastError();
  // Launched again without the app freeing the block in between: refused, as CUDA does,
  // unless the graph was instantiated to free it on launch.
  launch_and_wait(e5, s);
  cudaError_t relaunch = cudaGraphLaunch(e5, s);
  if (relaunch == cudaSuccess) relaunch = cudaStreamSynchronize(s);
  EXPECT(relaunch == cudaErrorInvalidValue, "a relaunch over an unfreed block: %s",
         cudaGetErrorName(relaunch));
  cudaGetLastError();
  CHECK(cudaFree(kept));
  // One executable graph at a time of a graph with an allocation node, as in CUDA.
  cudaGraphExec_t e6;
  EXPECT(cudaGraphInstantiateWithFlags(&e6, g5, cudaGraphInstantiateFlagAutoFreeOnLaunch) !=
             cudaSuccess,
         "a second executable graph of a graph with an allocation node");
  cudaGetLastError();
  CHECK(cudaGraphExecDestroy(e5));
  CHECK(cudaGraphInstantiateWithFlags(&e6, g5, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  for (int round = 0; round < 3; ++round) {
    CHECK(cudaGraphLaunch(e6, s));
    CHECK(cudaMemcpyAsync(h_in, kept, bytes, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(h_in[n - 1] == 500 + n - 1, "auto-free launch %d: %d", round, h_in[n - 1]);
  }
  CHECK(cudaFree(kept));
  for (cudaGraphExec_t e : {e6, e3, e4, exec, e2}) CHECK(cudaGraphExecDestroy(e));
  for (cudaGraph_t g : {g5, g3, g4, graph, g2}) CHECK(cudaGraphDestroy(g));
  CHECK(cudaStreamDestroy(s));
  free_device(d_in, d_out);
  for (int* h : {h_in, h_out}) CHECK(cudaFreeHost(h));
  printf("graph_host_copies: all checks passed\n");
  return 0;
}
