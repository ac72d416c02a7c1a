// The classic: copy in, add on the device, copy out.
#include <vector>

#include "tests/e2e/check.h"

__global__ void add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

int main() {
  const int n = 10000;
  std::vector<float> a(n), b(n), c(n);
  for (int i = 0; i < n; ++i) {
    a[i] = i * 0.5f;
    b[i] = 1000.0f - i;
  }
  float *da = upload(a), *db = upload(b), *dc;
  CHECK(cudaMalloc(&dc, n * sizeof(float)));
  add<<<(n + 255) / 256, 256>>>(da, db, dc, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(c.data(), dc, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(c[i] == a[i] + b[i], "c[%d] = %f", i, c[i]);
  // cudaMemcpyDefault goes through the driver's unified cuMemcpy.
  std::vector<float> back(n);
  CHECK(cudaMemcpy(back.data(), dc, n * sizeof(float), cudaMemcpyDefault));
  EXPECT(back[n - 1] == c[n - 1], "default-kind copy");
  free_device(da, db, dc);
  printf("ok\n");
  return 0;
}
