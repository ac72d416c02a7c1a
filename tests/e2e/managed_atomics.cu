// Host and device atomics on the same managed words: a kernel adds to counters while the host
// (its main thread, then a thread that never called CUDA) adds to the same counters before the
// synchronisation; no side's additions may be lost.
#include <atomic>
#include <thread>

#include "tests/e2e/check.h"

__global__ void add(unsigned* counters, int n, int per_thread) {
  for (int i = 0; i < per_thread; ++i) atomicAdd(&counters[(threadIdx.x + i) % n], 1u);
}

static void host_adds(unsigned* counters, int n, int total) {
  for (int i = 0; i < total; ++i) __atomic_fetch_add(&counters[i % n], 1u, __ATOMIC_RELAXED);
}

int main() {
  const int n = 4, blocks = 32, threads = 128, per_thread = 50;
  const int device_total = blocks * threads * per_thread;  // 204800
  unsigned* counters;
  CHECK(cudaMallocManaged(&counters, n * sizeof(unsigned)));
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < n; ++i) counters[i] = 0;
    add<<<blocks, threads>>>(counters, n, per_thread);
    CHECK(cudaGetLastError());
    const int host_total = 100000;
    if (round == 0) {
      host_adds(counters, n, host_total);
    } else {
      std::thread t(host_adds, counters, n, host_total);
      t.join();
    }
    CHECK(cudaDeviceSynchronize());
    unsigned sum = 0;
    for (int i = 0; i < n; ++i) sum += counters[i];
    EXPECT(sum == static_cast<unsigned>(device_total + host_total),
           "round %d: counters sum to %u, want %d (device %d + host %d)", round, sum,
           device_total + host_total, device_total, host_total);
    for (int i = 0; i < n; ++i) {
      EXPECT(counters[i] == static_cast<unsigned>((device_total + host_total) / n),
             "round %d: counter %d = %u", round, i, counters[i]);
    }
  }
  CHECK(cudaFree(counters));
  printf("managed_atomics: all checks passed\n");
  return 0;
}
