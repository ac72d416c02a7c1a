// Threads sharing streams and events: one thread records, another waits on the event.
#include <atomic>
#include <thread>
#include <vector>

#include "tests/e2e/check.h"

__global__ void fill(int* p, int v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}
__global__ void add_one(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1;
}

int main() {
  const int n = 2048;
  int* d;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  cudaStream_t producer, consumer;
  CHECK(cudaStreamCreate(&producer));
  CHECK(cudaStreamCreate(&consumer));
  cudaEvent_t ready;
  CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  std::atomic<bool> recorded{false};
  std::thread a([&] {
    CHECK(cudaSetDevice(0));
    fill<<<n / 256, 256, 0, producer>>>(d, 41, n);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(ready, producer));
    recorded = true;
  });
  std::thread b([&] {
    CHECK(cudaSetDevice(0));
    while (!recorded) std::this_thread::yield();
    CHECK(cudaStreamWaitEvent(consumer, ready, 0));
    add_one<<<n / 256, 256, 0, consumer>>>(d, n);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(consumer));
  });
  a.join();
  b.join();
  std::vector<int> h(n);
  CHECK(cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(h[i] == 42, "h[%d] = %d", i, h[i]);
  // Many threads allocating and copying at once.
  std::vector<std::thread> ts;
  std::atomic<int> good{0};
  for (int t = 0; t < 8; ++t) {
    ts.emplace_back([&, t] {
      int* p;
      CHECK(cudaMalloc(&p, 1024));
      std::vector<char> src(1024, (char)t), dst(1024);
      CHECK(cudaMemcpy(p, src.data(), 1024, cudaMemcpyHostToDevice));
      CHECK(cudaMemcpy(dst.data(), p, 1024, cudaMemcpyDeviceToHost));
      if (src == dst) ++good;
      CHECK(cudaFree(p));
    });
  }
  for (auto& t : ts) t.join();
  EXPECT(good == 8, "%d of 8 threads copied correctly", good.load());
  CHECK(cudaEventDestroy(ready));
  for (cudaStream_t st : {producer, consumer}) CHECK(cudaStreamDestroy(st));
  CHECK(cudaFree(d));
  printf("ok\n");
  return 0;
}
