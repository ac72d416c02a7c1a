// __managed__ variables: module globals in managed memory, one address on the host and the
// device. Initial values reach the host; host writes reach kernels at the next launch; kernel
// writes reach the host after a synchronisation; symbol copies and pointer attributes agree.
#include "tests/e2e/check.h"

__managed__ int counter = 5;
__managed__ float samples[3000];  // three pages and a part
__managed__ int flags[4] = {1, 2, 3, 4};
__device__ int plain = 9;  // an ordinary global beside them

__global__ void count(int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    samples[i] = samples[i] * 2.0f + i;
    atomicAdd(&counter, 1);
  }
}

__global__ void sum_flags(int* out) { *out = flags[0] + flags[1] + flags[2] + flags[3] + plain; }

int main() {
  // Initial values, before any other runtime call.
  EXPECT(counter == 5, "initial counter %d", counter);
  EXPECT(flags[0] == 1 && flags[3] == 4, "initial flags %d %d", flags[0], flags[3]);
  for (int i = 0; i < 3000; ++i) EXPECT(samples[i] == 0.0f, "samples[%d] zero", i);

  // Host writes, then a kernel reads and writes, then the host reads.
  for (int i = 0; i < 3000; ++i) samples[i] = 1.0f;
  count<<<(3000 + 255) / 256, 256>>>(3000);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  EXPECT(counter == 3005, "counter %d after the kernel", counter);
  for (int i = 0; i < 3000; ++i) EXPECT(samples[i] == 2.0f + i, "samples[%d] = %g", i, samples[i]);

  // Again, after host writes to some pages only.
  counter = 100;
  samples[2999] = 0.5f;
  count<<<1, 10>>>(10);
  CHECK(cudaDeviceSynchronize());
  EXPECT(counter == 110, "counter %d after the second kernel", counter);
  EXPECT(samples[2999] == 0.5f, "untouched by the kernel: %g", samples[2999]);
  EXPECT(samples[0] == 4.0f, "samples[0] %g", samples[0]);

  // The symbol's address is the variable's, and it is managed memory.
  int* addr = nullptr;
  CHECK(cudaGetSymbolAddress((void**)&addr, counter));
  EXPECT(addr == &counter, "symbol address %p, variable at %p", (void*)addr, (void*)&counter);
  size_t size = 0;
  CHECK(cudaGetSymbolSize(&size, samples));
  EXPECT(size == sizeof samples, "symbol size %zu", size);
  cudaPointerAttributes attr;
  CHECK(cudaPointerGetAttributes(&attr, samples));
  EXPECT(attr.type == cudaMemoryTypeManaged, "type %d", (int)attr.type);

  // Symbol copies see and change the same bytes as host accesses.
  int v = 0;
  CHECK(cudaMemcpyFromSymbol(&v, counter, sizeof v));
  EXPECT(v == 110, "counter copied from the symbol: %d", v);
  const int fresh[4] = {10, 20, 30, 40};
  CHECK(cudaMemcpyToSymbol(flags, fresh, sizeof fresh));
  EXPECT(flags[2] == 30, "flags[2] after the symbol copy: %d", flags[2]);
  flags[3] = 1000;
  int* out = nullptr;
  CHECK(cudaMalloc(&out, sizeof(int)));
  sum_flags<<<1, 1>>>(out);
  CHECK(cudaMemcpy(&v, out, sizeof v, cudaMemcpyDeviceToHost));
  EXPECT(v == 10 + 20 + 30 + 1000 + 9, "sum on the device %d", v);
  CHECK(cudaFree(out));

  printf("managed_vars: all checks passed\n");
  return 0;
}
