// Dynamic shared memory above 48 KiB: a kernel opts in with cudaFuncSetAttribute
// (cudaFuncAttributeMaxDynamicSharedMemorySize) and then launches with 64 KiB, the most this
// device gives a block; without the opt-in the same launch fails.
#include <string.h>

#include "tests/e2e/check.h"

__global__ void reverse_through_shared(const int* in, int* out, int n) {
  extern __shared__ int buf[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = in[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buf[n - 1 - i] * 2;
}

int main() {
  const int bytes = 64 << 10, n = bytes / 4;
  int max_optin = 0;
  CHECK(cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  EXPECT(max_optin >= bytes, "opt-in shared memory %d", max_optin);
  int *in, *out;
  CHECK(cudaMalloc(&in, bytes));
  CHECK(cudaMalloc(&out, bytes));
  int host[n];
  for (int i = 0; i < n; ++i) host[i] = i * 3 + 1;
  CHECK(cudaMemcpy(in, host, bytes, cudaMemcpyHostToDevice));

  // Without the opt-in: more than 48 KiB is refused (at the launch, or through cuwire at the
  // next synchronisation, as launches do not wait for an answer), and nothing else fails.
  reverse_through_shared<<<1, 256, bytes>>>(in, out, n);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  EXPECT(e == cudaErrorInvalidValue, "64 KiB launch without the opt-in: %s", cudaGetErrorName(e));

  CHECK(cudaFuncSetAttribute(reverse_through_shared, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             bytes));
  cudaFuncAttributes attr;
  CHECK(cudaFuncGetAttributes(&attr, reverse_through_shared));
  EXPECT(attr.maxDynamicSharedSizeBytes == bytes, "max dynamic shared %d",
         attr.maxDynamicSharedSizeBytes);
  const char* name = nullptr;
  CHECK(cudaFuncGetName(&name, reverse_through_shared));
  EXPECT(name && strstr(name, "reverse_through_shared"), "the kernel's name: %s",
         name ? name : "(null)");
  int blocks = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, reverse_through_shared, 256, bytes));
  EXPECT(blocks == 1, "%d blocks of 64 KiB per SM", blocks);
  reverse_through_shared<<<2, 256, bytes>>>(in, out, n);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  int got[n];
  CHECK(cudaMemcpy(got, out, bytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(got[i] == host[n - 1 - i] * 2, "out[%d] = %d", i, got[i]);

  // Beyond what the device has: refused, both the opt-in and the launch.
  EXPECT(cudaFuncSetAttribute(reverse_through_shared, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              max_optin + 1024) == cudaErrorInvalidValue,
         "opt-in too large");
  reverse_through_shared<<<1, 256, max_optin + 1024>>>(in, out, n);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  EXPECT(e == cudaErrorInvalidValue, "launch above the device's limit: %s", cudaGetErrorName(e));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFree(in));
  CHECK(cudaFree(out));
  printf("big_shared: all checks passed\n");
  return 0;
}
