// Device count, properties and memory info through the runtime.
#include "tests/e2e/check.h"

int main() {
  int n = 0;
  CHECK(cudaGetDeviceCount(&n));
  EXPECT(n >= 1, "%d devices", n);
  cudaDeviceProp p;
  CHECK(cudaGetDeviceProperties(&p, 0));
  printf("device 0: %s, cc %d.%d, %d SMs, %zu MiB, warp %d, max threads/block %d\n", p.name,
         p.major, p.minor, p.multiProcessorCount, p.totalGlobalMem >> 20, p.warpSize,
         p.maxThreadsPerBlock);
  EXPECT(p.major >= 3, "compute capability %d.%d", p.major, p.minor);
  EXPECT(p.warpSize == 32, "warp size %d", p.warpSize);
  EXPECT(p.maxThreadsPerBlock >= 256, "max threads %d", p.maxThreadsPerBlock);
  EXPECT(p.totalGlobalMem > 0, "no memory");
  int v = 0;
  CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxBlockDimX, 0));
  EXPECT(v == p.maxThreadsDim[0], "%d vs %d", v, p.maxThreadsDim[0]);
  size_t free_b = 0, total_b = 0;
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  EXPECT(total_b > 0 && free_b <= total_b, "free %zu total %zu", free_b, total_b);
  int drv = 0, rt = 0;
  CHECK(cudaDriverGetVersion(&drv));
  CHECK(cudaRuntimeGetVersion(&rt));
  EXPECT(drv >= rt, "driver %d < runtime %d", drv, rt);
  CHECK(cudaSetDevice(0));
  CHECK(cudaDeviceSynchronize());
  printf("ok\n");
  return 0;
}
