// Shared-memory addresses are 32 bits wide: an address register plus a constant offset wraps
// there, as compilers rely on when they fold an offset into the access (a register holding
// the array's start less 8, read at [r+8]; a 64 KiB window read back to front at [r+65520]).
// The accesses are written in PTX so that they have exactly that form.
#include "tests/e2e/check.h"

__global__ void read_below_start(double* out) {
  __shared__ double s[32];
  s[threadIdx.x] = threadIdx.x + 0.5;
  __syncthreads();
  // The start of s less 8, wrapped when s starts at 0, then +8: s[threadIdx.x].
  const unsigned r = static_cast<unsigned>(__cvta_generic_to_shared(s)) + threadIdx.x * 8u - 8u;
  double v;
  asm volatile("ld.shared.f64 %0, [%1+8];" : "=d"(v) : "r"(r));
  out[threadIdx.x] = v;
}

constexpr int kWindow = 64 << 10;       // dynamic shared memory, opted in
constexpr int kVectors = kWindow / 16;  // uint4 elements
__global__ void read_back_to_front(unsigned* out) {
  extern __shared__ uint4 window[];
  for (int i = threadIdx.x; i < kVectors; i += blockDim.x)
    window[i] = make_uint4(4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3);
  __syncthreads();
  const unsigned start = static_cast<unsigned>(__cvta_generic_to_shared(window));
  unsigned sum = 0;
  for (int i = threadIdx.x; i < kVectors; i += blockDim.x) {
    // Element kVectors-1-i, at start + 65520 - 16*i: the register holds start - 16*i.
    const unsigned r = start - 16u * static_cast<unsigned>(i);
    unsigned a, b, c, d;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4+65520];"
                 : "=r"(a), "=r"(b), "=r"(c), "=r"(d)
                 : "r"(r));
    const unsigned e = kVectors - 1 - i;
    if (a != 4 * e || b != 4 * e + 1 || c != 4 * e + 2 || d != 4 * e + 3) sum += 1u << 20;
    sum += a & 1;  // 0: a is always a multiple of 4
  }
  out[threadIdx.x] = sum;
}

int main() {
  double* d = nullptr;
  CHECK(cudaMalloc(&d, 32 * sizeof(double)));
  read_below_start<<<1, 32>>>(d);
  CHECK(cudaGetLastError());
  double h[32];
  CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 32; ++i) EXPECT(h[i] == i + 0.5, "lane %d read %f", i, h[i]);

  CHECK(cudaFuncSetAttribute(read_back_to_front, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kWindow));
  unsigned* o = nullptr;
  CHECK(cudaMalloc(&o, 256 * sizeof(unsigned)));
  read_back_to_front<<<1, 256, kWindow>>>(o);
  CHECK(cudaGetLastError());
  unsigned ho[256];
  CHECK(cudaMemcpy(ho, o, sizeof ho, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 256; ++i) EXPECT(ho[i] == 0, "thread %d: %u wrong vectors", i, ho[i] >> 20);
  CHECK(cudaFree(d));
  CHECK(cudaFree(o));
  printf("shared_wrap: all checks passed\n");
  return 0;
}
