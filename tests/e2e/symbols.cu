// cudaMemcpyToSymbol / FromSymbol, __constant__ memory, __device__ globals.
#include "tests/e2e/check.h"

__constant__ int coeffs[8];
__device__ int counter;
__device__ float table[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

__global__ void apply(int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = coeffs[i % 8] * i + (int)table[i % 16];
  if (i == 0) counter = 42;
}

int main() {
  int h[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  CHECK(cudaMemcpyToSymbol(coeffs, h, sizeof h));
  int back[8] = {};
  CHECK(cudaMemcpyFromSymbol(back, coeffs, sizeof back));
  for (int i = 0; i < 8; ++i) EXPECT(back[i] == h[i], "coeffs[%d] = %d", i, back[i]);
  const int n = 256;
  int* d;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  apply<<<2, 128>>>(d, n);
  CHECK(cudaGetLastError());
  int out[n];
  CHECK(cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i)
    EXPECT(out[i] == h[i % 8] * i + (i % 16) + 1, "out[%d] = %d", i, out[i]);
  int c = 0;
  CHECK(cudaMemcpyFromSymbol(&c, counter, sizeof c));
  EXPECT(c == 42, "counter = %d", c);
  void* addr = nullptr;
  size_t size = 0;
  CHECK(cudaGetSymbolAddress(&addr, table));
  CHECK(cudaGetSymbolSize(&size, table));
  EXPECT(size == 16 * sizeof(float), "table size %zu", size);
  float t[16];
  CHECK(cudaMemcpy(t, addr, sizeof t, cudaMemcpyDeviceToHost));
  EXPECT(t[15] == 16.0f, "table[15] = %f", t[15]);
  CHECK(cudaFree(d));
  printf("ok\n");
  return 0;
}
