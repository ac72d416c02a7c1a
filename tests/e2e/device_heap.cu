// Device-side malloc and free: memory one kernel allocates stays valid in later kernels until
// device code frees it, as CUDA keeps it; the heap's size follows cudaLimitMallocHeapSize, and
// malloc returns NULL once the heap is full.
#include "tests/e2e/check.h"

struct Node {
  int value;
  Node* next;
};

// Each thread builds a short list on the device heap and publishes its head.
__global__ void build(Node** heads, int depth) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  Node* head = nullptr;
  for (int i = 0; i < depth; ++i) {
    Node* n = static_cast<Node*>(malloc(sizeof(Node)));
    if (!n) {
      heads[t] = nullptr;
      return;
    }
    n->value = t * 100 + i;
    n->next = head;
    head = n;
  }
  heads[t] = head;
}

// A later kernel walks the lists, and adds one to each value.
__global__ void walk(Node** heads, long long* sums) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  long long sum = 0;
  for (Node* n = heads[t]; n; n = n->next) {
    n->value += 1;
    sum += n->value;
  }
  sums[t] = sum;
}

__global__ void release(Node** heads) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  Node* n = heads[t];
  while (n) {
    Node* next = n->next;
    free(n);
    n = next;
  }
  heads[t] = nullptr;
}

// Allocates `bytes` per thread until malloc fails; counts the successes.
__global__ void fill(int* ok, size_t bytes) {
  void* p = malloc(bytes);
  atomicAdd(ok, p != nullptr);
}

int main() {
  size_t heap = 0;
  CHECK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 4 << 20));
  CHECK(cudaDeviceGetLimit(&heap, cudaLimitMallocHeapSize));
  EXPECT(heap == (4u << 20), "heap limit %zu", heap);

  const int threads = 256, depth = 5;
  Node** heads;
  long long* sums;
  CHECK(cudaMalloc(&heads, threads * sizeof(Node*)));
  CHECK(cudaMalloc(&sums, threads * sizeof(long long)));
  build<<<2, threads / 2>>>(heads, depth);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  for (int round = 1; round <= 2; ++round) {
    walk<<<4, threads / 4>>>(heads, sums);
    CHECK(cudaDeviceSynchronize());
    long long got[threads];
    CHECK(cudaMemcpy(got, sums, sizeof got, cudaMemcpyDeviceToHost));
    for (int t = 0; t < threads; ++t) {
      long long want = 0;
      for (int i = 0; i < depth; ++i) want += t * 100 + i + round;
      EXPECT(got[t] == want, "round %d thread %d: sum %lld, want %lld", round, t, got[t], want);
    }
  }
  release<<<1, threads>>>(heads);
  CHECK(cudaDeviceSynchronize());

  // The heap is full after about 4 MiB of 64 KiB blocks (and everything above was freed).
  int* ok;
  CHECK(cudaMalloc(&ok, sizeof(int)));
  CHECK(cudaMemset(ok, 0, sizeof(int)));
  fill<<<1, 128>>>(ok, 64 << 10);
  CHECK(cudaDeviceSynchronize());
  int got_ok = 0;
  CHECK(cudaMemcpy(&got_ok, ok, sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT(got_ok > 0 && got_ok < 128, "%d of 128 allocations of 64 KiB in a 4 MiB heap", got_ok);
  CHECK(cudaFree(ok));
  CHECK(cudaFree(heads));
  CHECK(cudaFree(sums));
  printf("device_heap: all checks passed\n");
  return 0;
}
