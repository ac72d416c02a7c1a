// Device printf: the kernels' output reaches this program's stdout at synchronizing calls, after
// what the program printed before them. CMake checks the whole output (PASS_REGULAR_EXPRESSION);
// the last line is printed only when every check passed.
#include "tests/e2e/check.h"

__global__ void hello() { printf("hello from block %d thread %d\n", blockIdx.x, threadIdx.x); }

__global__ void values(const char* s, int* ret) {
  *ret =
      printf("int=%d uint=%u hex=%#x long=%ld ull=%llu char=%c str=%s float=%.3f double=%e\n", -42,
             4000000000u, 255, -1234567890123L, 18446744073709551615ull, 'Q', s, 2.5f, 1.0e-3);
}

int main() {
  printf("before launch\n");
  hello<<<2, 2>>>();
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  printf("after sync\n");

  const char text[] = "device string";
  char* ds;
  int* dret;
  CHECK(cudaMalloc(&ds, sizeof text));
  CHECK(cudaMalloc(&dret, sizeof(int)));
  CHECK(cudaMemcpy(ds, text, sizeof text, cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  values<<<1, 1, 0, stream>>>(ds, dret);
  CHECK(cudaStreamSynchronize(stream));
  int ret = 0;
  // A synchronous copy flushes too (nothing is pending by now).
  CHECK(cudaMemcpy(&ret, dret, sizeof ret, cudaMemcpyDeviceToHost));
  EXPECT(ret == 9, "printf returned %d, expected 9 (its argument count)", ret);
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(ds));
  CHECK(cudaFree(dret));
  printf("printf: all checks passed\n");
  return 0;
}
