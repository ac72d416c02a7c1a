// cudaDeviceReset in the middle of a program: the primary context, and everything made in it
// (memory, streams, events), goes; the program's kernels do not (cudart keeps its libraries,
// which belong to no context), so work after the reset runs as before.
#include <vector>

#include "tests/e2e/check.h"

__global__ void scale(float* p, float k, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] *= k;
}

static void round_trip(float k) {
  const int n = 4096;
  std::vector<float> h(n), back(n);
  for (int i = 0; i < n; ++i) h[i] = i * 0.25f;
  float* d = nullptr;
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaMalloc(&d, n * sizeof(float)));
  CHECK(cudaMemcpyAsync(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
  scale<<<(n + 255) / 256, 256, 0, s>>>(d, k, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpyAsync(back.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) EXPECT(back[i] == h[i] * k, "back[%d] = %f", i, back[i]);
  // Memory and a stream left behind on purpose: the reset takes them.
  (void)d;
}

int main() {
  round_trip(2.0f);
  size_t free_before = 0, total = 0;
  CHECK(cudaMemGetInfo(&free_before, &total));
  CHECK(cudaDeviceReset());
  round_trip(3.0f);
  CHECK(cudaDeviceReset());
  size_t free_after = 0;
  CHECK(cudaMemGetInfo(&free_after, &total));
  EXPECT(free_after > free_before, "the reset released memory (%zu before, %zu after)", free_before,
         free_after);
  round_trip(0.5f);
  printf("device_reset: ok\n");
  return 0;
}
