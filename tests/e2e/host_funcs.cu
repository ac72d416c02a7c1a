// Host functions in stream order without blocking (client-lib/calls/host_calls.cc):
// cudaLaunchHostFunc, cudaStreamAddCallback and host nodes of a graph return at once; each function
// runs on another thread when its stream gets there; later work of the stream waits for it; other
// streams do not; a host copy enqueued after it sees what it wrote.
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/e2e/check.h"

namespace {

std::atomic<int> gate{0};
std::atomic<int> gate_timed_out{0};
std::atomic<int> ran{0};
int order[8];
pthread_t main_thread;
std::atomic<int> on_main{0};

void note(int what) {
  if (pthread_equal(pthread_self(), main_thread)) on_main = 1;
  order[ran++] = what;
}

// Holds its stream until the main thread opens the gate (at most 30 s).
void CUDART_CB wait_for_gate(void*) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!gate.load()) {
    if (std::chrono::steady_clock::now() > until) {
      gate_timed_out = 1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  note(1);
}

void CUDART_CB mark(void* what) { note(static_cast<int>(reinterpret_cast<intptr_t>(what))); }

__global__ void set(int* p, int i, int v) { p[i] = v; }
__global__ void twice(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] *= 2;
}

// Writes the pattern a later host-to-device copy of the stream must see.
void CUDART_CB fill(void* p) {
  int* h = static_cast<int*>(p);
  for (int i = 0; i < 256; ++i) h[i] = i + 1000;
}

struct CallbackSeen {
  cudaStream_t stream = nullptr;
  cudaError_t status = cudaErrorUnknown;
  int calls = 0;
};
void CUDART_CB callback(cudaStream_t s, cudaError_t status, void* p) {
  auto* seen = static_cast<CallbackSeen*>(p);
  seen->stream = s;
  seen->status = status;
  ++seen->calls;
}

// A CUDA call from a host function is refused, as CUDA specifies.
std::atomic<int> inner_call = -1;
void CUDART_CB call_cuda(void*) { inner_call = static_cast<int>(cudaStreamQuery(nullptr)); }

struct Counter {
  std::atomic<int> next{0};
  int wrong = 0;
};
Counter per_stream[2];
struct Tick {
  Counter* c;
  int expect;
};
void CUDART_CB tick(void* p) {
  auto* t = static_cast<Tick*>(p);
  if (t->c->next.fetch_add(1) != t->expect) ++t->c->wrong;
}

}  // namespace

int main() {
  main_thread = pthread_self();
  cudaStream_t s, other;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  int* d = nullptr;
  CHECK(cudaMalloc(&d, 256 * sizeof(int)));
  CHECK(cudaMemset(d, 0, 256 * sizeof(int)));

  // 1. The enqueuing calls return while the first function holds the stream.
  set<<<1, 1, 0, s>>>(d, 0, 1);
  CHECK(cudaLaunchHostFunc(s, wait_for_gate, nullptr));
  CHECK(cudaLaunchHostFunc(s, mark, reinterpret_cast<void*>(2)));
  set<<<1, 1, 0, s>>>(d, 1, 2);
  CHECK(cudaGetLastError());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT(ran.load() == 0, "%d host functions ran before the gate opened", ran.load());
  EXPECT(cudaStreamQuery(s) == cudaErrorNotReady, "the held stream reports done");
  // Another stream is not held.
  set<<<1, 1, 0, other>>>(d, 2, 3);
  CHECK(cudaStreamSynchronize(other));
  int got[3] = {};
  CHECK(cudaMemcpyAsync(got, d, sizeof got, cudaMemcpyDeviceToHost, other));
  CHECK(cudaStreamSynchronize(other));
  EXPECT(got[0] == 1 && got[1] == 0 && got[2] == 3,
         "while held: %d %d %d (the kernel after the host functions ran early?)", got[0], got[1],
         got[2]);
  gate = 1;
  CHECK(cudaStreamSynchronize(s));
  EXPECT(!gate_timed_out.load(),
         "the host function was never released: it ran on the "
         "enqueuing thread");
  EXPECT(ran.load() == 2 && order[0] == 1 && order[1] == 2, "order %d: %d %d", ran.load(), order[0],
         order[1]);
  EXPECT(!on_main.load(), "a host function ran on the enqueuing thread");
  CHECK(cudaMemcpy(got, d, sizeof got, cudaMemcpyDeviceToHost));
  EXPECT(got[1] == 2, "the kernel after the host functions did not run: %d", got[1]);

  // 2. A host copy enqueued after a host function sees what the function wrote.
  int* h = nullptr;
  CHECK(cudaMallocHost(&h, 256 * sizeof(int)));
  static int pageable[256];
  for (int i = 0; i < 256; ++i) h[i] = pageable[i] = -1;
  CHECK(cudaLaunchHostFunc(s, fill, h));
  CHECK(cudaMemcpyAsync(d, h, 256 * sizeof(int), cudaMemcpyHostToDevice, s));
  twice<<<1, 256, 0, s>>>(d, 256);
  CHECK(cudaLaunchHostFunc(s, fill, pageable));
  CHECK(cudaMemcpyAsync(d + 128, pageable, 128 * sizeof(int), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(h, d, 256 * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < 256; ++i) {
    const int want = i < 128 ? 2 * (i + 1000) : i - 128 + 1000;
    EXPECT(h[i] == want, "element %d: %d, want %d", i, h[i], want);
  }

  // 3. cudaStreamAddCallback: the stream, the status and the data.
  CallbackSeen seen;
  CHECK(cudaStreamAddCallback(s, callback, &seen, 0));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(seen.calls == 1 && seen.stream == s && seen.status == cudaSuccess,
         "callback: %d calls, stream %p, status %d", seen.calls, (void*)seen.stream,
         (int)seen.status);

  // 4. A CUDA call from a host function is refused; the program goes on.
  CHECK(cudaLaunchHostFunc(s, call_cuda, nullptr));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(inner_call.load() != cudaSuccess && inner_call.load() != -1,
         "a CUDA call inside a host function answered %d", inner_call.load());
  (void)cudaGetLastError();

  // 5. A host node of a graph: the launch returns while it holds the stream.
  gate = 0;
  ran = 0;
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  cudaHostNodeParams hp = {wait_for_gate, nullptr};
  cudaGraphNode_t host_node, kernel_node;
  CHECK(cudaGraphAddHostNode(&host_node, g, nullptr, 0, &hp));
  int idx = 3, val = 4;
  void* args[] = {&d, &idx, &val};
  cudaKernelNodeParams kp = {};
  kp.func = reinterpret_cast<void*>(set);
  kp.gridDim = dim3(1);
  kp.blockDim = dim3(1);
  kp.kernelParams = args;
  CHECK(cudaGraphAddKernelNode(&kernel_node, g, &host_node, 1, &kp));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  CHECK(cudaMemset(d, 0, 256 * sizeof(int)));
  CHECK(cudaGraphLaunch(exec, s));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT(ran.load() == 0 && cudaStreamQuery(s) == cudaErrorNotReady,
         "the graph's host node did not hold its stream");
  gate = 1;
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemcpy(got, d, sizeof(int) * 3, cudaMemcpyDeviceToHost));
  int fourth = 0;
  CHECK(cudaMemcpy(&fourth, d + 3, sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT(ran.load() == 1 && fourth == 4, "graph: %d host runs, kernel wrote %d", ran.load(),
         fourth);
  destroy_graph(exec, g);

  // 6. Many functions on two streams, each stream's in its order.
  static Tick ticks[2][500];
  cudaStream_t both[2] = {s, other};
  for (int i = 0; i < 500; ++i) {
    for (int k = 0; k < 2; ++k) {
      ticks[k][i] = {&per_stream[k], i};
      CHECK(cudaLaunchHostFunc(both[k], tick, &ticks[k][i]));
    }
  }
  CHECK(cudaDeviceSynchronize());
  for (int k = 0; k < 2; ++k) {
    EXPECT(per_stream[k].next.load() == 500 && per_stream[k].wrong == 0,
           "stream %d: %d of 500 ran, %d out of order", k, per_stream[k].next.load(),
           per_stream[k].wrong);
  }

  CHECK(cudaFreeHost(h));
  CHECK(cudaFree(d));
  for (cudaStream_t st : {s, other}) CHECK(cudaStreamDestroy(st));
  printf("host_funcs: all checks passed\n");
  return 0;
}
