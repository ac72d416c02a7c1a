// Errors as CUDA reports them, each followed by normal work.
#include "tests/e2e/check.h"

__global__ void touch(int* p) { p[threadIdx.x] = threadIdx.x; }
// Fills n ints of dynamic shared memory with ones and sums them into p[0].
__global__ void shared_sum(int* p, int n) {
  extern __shared__ int s[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = 1;
  __syncthreads();
  if (threadIdx.x == 0) {
    int t = 0;
    for (int i = 0; i < n; ++i) t += s[i];
    p[0] = t;
  }
}

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
  EXPECT(e == cudaErrorInvalidValue || e == cudaErrorInvalidDevicePointer, "bad cudaFree gave %s",
         cudaGetErrorName(e));
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
  // More dynamic shared memory than the default, not allowed for the function: refused at the
  // launch with "invalid argument"; allowed (cudaFuncSetAttribute), it runs. Neither leaves an
  // error for the next synchronisation.
  int default_shared = 0;
  CHECK(cudaDeviceGetAttribute(&default_shared, cudaDevAttrMaxSharedMemoryPerBlock, 0));
  const int big = default_shared + 1024;
  shared_sum<<<1, 32, big>>>(d, big / 4);
  e = cudaGetLastError();
  EXPECT(e == cudaErrorInvalidValue, "%d bytes of dynamic shared memory gave %s", big,
         cudaGetErrorName(e));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFuncSetAttribute(shared_sum, cudaFuncAttributeMaxDynamicSharedMemorySize, big));
  shared_sum<<<1, 32, big>>>(d, big / 4);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  int sum = 0;
  CHECK(cudaMemcpy(&sum, d, sizeof sum, cudaMemcpyDeviceToHost));
  EXPECT(sum == big / 4, "the kernel with %d bytes of shared memory summed %d, want %d", big, sum,
         big / 4);
  CHECK(cudaFree(d));
  normal_work();
  CHECK(cudaDeviceSynchronize());
  printf("ok\n");
  return 0;
}
