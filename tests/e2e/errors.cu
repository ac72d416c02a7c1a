// Errors as CUDA reports them, each followed by normal work.
#include "check.h"

__global__ void touch(int* p) { p[threadIdx.x] = threadIdx.x; }

static void normal_work() {
  int* d;
  CHECK(cudaMalloc(&d, 64 * sizeof(int)));
  touch<<<1, 64>>>(d);
  CHECK(cudaGetLastError());
  int h[64];
  CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 64; ++i) EXPECT(h[i] == i, "h[%d] = %d", i, h[i]);
  CHECK(cudaFree(d));
}

int main() {
  normal_work();
  // Out of memory.
  void* huge = nullptr;
  cudaError_t e = cudaMalloc(&huge, size_t(1) << 50);
  EXPECT(e == cudaErrorMemoryAllocation, "huge cudaMalloc gave %s", cudaGetErrorName(e));
  cudaGetLastError();
  normal_work();
  // Invalid free.
  e = cudaFree((void*)0x1234);
  EXPECT(e == cudaErrorInvalidValue || e == cudaErrorInvalidDevicePointer,
         "bad cudaFree gave %s", cudaGetErrorName(e));
  cudaGetLastError();
  normal_work();
  // Invalid launch configurations fail at once, as on a GPU, with "invalid configuration
  // argument": more threads per block than any device has, an empty grid, a block or grid
  // dimension past its maximum.
  int* d;
  CHECK(cudaMalloc(&d, 4096));
  touch<<<1, 4096>>>(d);
  e = cudaGetLastError();
  EXPECT(e == cudaErrorInvalidConfiguration, "oversized block gave %s", cudaGetErrorName(e));
  touch<<<0, 32>>>(d);
  e = cudaGetLastError();
  EXPECT(e == cudaErrorInvalidConfiguration, "empty grid gave %s", cudaGetErrorName(e));
  touch<<<1, dim3(1, 1, 65)>>>(d);
  e = cudaGetLastError();
  EXPECT(e == cudaErrorInvalidConfiguration, "block z of 65 gave %s", cudaGetErrorName(e));
  touch<<<dim3(1, 65536), 1>>>(d);
  e = cudaGetLastError();
  EXPECT(e == cudaErrorInvalidConfiguration, "grid y of 65536 gave %s", cudaGetErrorName(e));
  CHECK(cudaFree(d));
  normal_work();
  CHECK(cudaDeviceSynchronize());
  printf("ok\n");
  return 0;
}
