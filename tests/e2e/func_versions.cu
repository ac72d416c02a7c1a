// A function reports the architecture its image was built for (cudaFuncGetAttributes:
// ptxVersion, binaryVersion), not the device's: this program is built for sm_80 alone
// (-arch=sm_80) and runs on a device of another compute capability. Libraries decide by it:
// thrust's sort (CUB) compares the PTX version with the architectures it was compiled for, and
// fails with cudaErrorInvalidDeviceFunction when they do not match.
#include <thrust/device_vector.h>
#include <thrust/sort.h>

#include <vector>

#include "tests/e2e/check.h"

__global__ void scale(int* v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] *= 3;
}

int main() {
  cudaFuncAttributes a{};
  CHECK(cudaFuncGetAttributes(&a, scale));
  EXPECT(a.ptxVersion == 80, "ptxVersion %d (built for sm_80)", a.ptxVersion);
  EXPECT(a.binaryVersion == 80, "binaryVersion %d (built for sm_80)", a.binaryVersion);

  const int n = 1000;
  std::vector<int> host(n);
  for (int i = 0; i < n; ++i) host[i] = (i * 7919) % n;  // a permutation of 0..n-1
  thrust::device_vector<int> d(host.begin(), host.end());
  scale<<<(n + 255) / 256, 256>>>(thrust::raw_pointer_cast(d.data()), n);
  CHECK(cudaGetLastError());
  thrust::sort(d.begin(), d.end());
  CHECK(cudaDeviceSynchronize());
  std::vector<int> sorted(n);
  thrust::copy(d.begin(), d.end(), sorted.begin());
  for (int i = 0; i < n; ++i) EXPECT(sorted[i] == 3 * i, "sorted[%d] = %d", i, sorted[i]);
  printf("func_versions: all checks passed\n");
  return 0;
}
