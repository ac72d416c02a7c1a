// Several streams with pinned memory, async copies, kernels and events.
#include "tests/e2e/check.h"

__global__ void scale(float* x, float f, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= f;
}

int main() {
  const int kStreams = 4, n = 4096;
  cudaStream_t s[kStreams];
  float* host[kStreams];
  float* dev[kStreams];
  cudaEvent_t start, stop, done[kStreams];
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  for (int k = 0; k < kStreams; ++k) {
    CHECK(cudaStreamCreateWithFlags(&s[k], cudaStreamNonBlocking));
    CHECK(cudaMallocHost(&host[k], n * sizeof(float)));
    CHECK(cudaMalloc(&dev[k], n * sizeof(float)));
    CHECK(cudaEventCreateWithFlags(&done[k], cudaEventDisableTiming));
    for (int i = 0; i < n; ++i) host[k][i] = float(i + k);
  }
  unsigned int flags = 0;
  CHECK(cudaHostGetFlags(&flags, host[0]));
  cudaPointerAttributes attr;
  CHECK(cudaPointerGetAttributes(&attr, dev[0]));
  EXPECT(attr.type == cudaMemoryTypeDevice, "device pointer type %d", (int)attr.type);
  CHECK(cudaEventRecord(start, 0));
  for (int k = 0; k < kStreams; ++k) {
    CHECK(cudaMemcpyAsync(dev[k], host[k], n * sizeof(float), cudaMemcpyHostToDevice, s[k]));
    scale<<<(n + 127) / 128, 128, 0, s[k]>>>(dev[k], float(k + 2), n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyAsync(host[k], dev[k], n * sizeof(float), cudaMemcpyDeviceToHost, s[k]));
    CHECK(cudaEventRecord(done[k], s[k]));
  }
  // Stream 0 waits for all of them before `stop`.
  for (int k = 0; k < kStreams; ++k) CHECK(cudaStreamWaitEvent(0, done[k], 0));
  CHECK(cudaEventRecord(stop, 0));
  CHECK(cudaEventSynchronize(stop));
  EXPECT(cudaEventQuery(stop) == cudaSuccess, "stop event not complete");
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  EXPECT(ms >= 0, "elapsed %f", ms);
  for (int k = 0; k < kStreams; ++k) {
    CHECK(cudaStreamSynchronize(s[k]));
    EXPECT(cudaStreamQuery(s[k]) == cudaSuccess, "stream %d busy", k);
    for (int i = 0; i < n; ++i) {
      EXPECT(host[k][i] == float(i + k) * float(k + 2), "stream %d [%d] = %f", k, i, host[k][i]);
    }
  }
  for (int k = 0; k < kStreams; ++k) {
    CHECK(cudaEventDestroy(done[k]));
    CHECK(cudaFreeHost(host[k]));
    CHECK(cudaFree(dev[k]));
    CHECK(cudaStreamDestroy(s[k]));
  }
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  printf("ok\n");
  return 0;
}
