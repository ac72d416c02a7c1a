// Stream capture and graphs: a capture that forks into a second stream and joins back, graph
// instantiation and repeated launches, the capture queries, and a capture invalidated by an
// illegal synchronisation.
#include <vector>

#include "check.h"

__global__ void axpb(float* x, int n, float a, float b) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = a * x[i] + b;
}

__global__ void add_into(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}

int main() {
  const int n = 1000;
  float *x, *y, *z;
  CHECK(cudaMalloc((void**)&x, n * sizeof(float)));
  CHECK(cudaMalloc((void**)&y, n * sizeof(float)));
  CHECK(cudaMalloc((void**)&z, n * sizeof(float)));
  std::vector<float> hx(n);
  for (int i = 0; i < n; ++i) hx[i] = (float)(i % 17);
  CHECK(cudaMemcpy(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(y, 0, n * sizeof(float)));

  cudaStream_t s, s2;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));

  cudaStreamCaptureStatus st;
  CHECK(cudaStreamIsCapturing(s, &st));
  EXPECT(st == cudaStreamCaptureStatusNone, "capturing before the capture");
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaStreamIsCapturing(s, &st));
  EXPECT(st == cudaStreamCaptureStatusActive, "not capturing after begin");
  unsigned long long id = 0;
  CHECK(cudaStreamGetCaptureInfo(s, &st, &id));
  EXPECT(st == cudaStreamCaptureStatusActive && id != 0, "capture info %d %llu", (int)st, id);
  // x = 2x + 1 on s; z = 0 then z += x on s2 (forked after the first kernel); y += x on s.
  axpb<<<(n + 255) / 256, 256, 0, s>>>(x, n, 2.0f, 1.0f);
  CHECK(cudaEventRecord(fork, s));
  CHECK(cudaStreamWaitEvent(s2, fork, 0));
  CHECK(cudaStreamIsCapturing(s2, &st));
  EXPECT(st == cudaStreamCaptureStatusActive, "the forked stream did not join the capture");
  CHECK(cudaMemsetAsync(z, 0, n * sizeof(float), s2));
  add_into<<<(n + 255) / 256, 256, 0, s2>>>(z, x, n);
  CHECK(cudaEventRecord(join, s2));
  add_into<<<(n + 255) / 256, 256, 0, s>>>(y, x, n);
  CHECK(cudaStreamWaitEvent(s, join, 0));
  cudaGraph_t graph;
  CHECK(cudaStreamEndCapture(s, &graph));
  CHECK(cudaStreamIsCapturing(s2, &st));
  EXPECT(st == cudaStreamCaptureStatusNone, "the forked stream still captures");
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  EXPECT(nodes == 4, "graph has %zu nodes", nodes);

  // Nothing ran while capturing.
  std::vector<float> hy(n), hz(n);
  CHECK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(hy[i] == 0.0f, "y[%d] = %f before any launch", i, hy[i]);

  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const int launches = 3;
  for (int k = 0; k < launches; ++k) CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  // CPU model of three replays.
  std::vector<float> mx(hx), my(n, 0.0f), mz(n, 0.0f);
  for (int k = 0; k < launches; ++k)
    for (int i = 0; i < n; ++i) {
      mx[i] = 2.0f * mx[i] + 1.0f;
      mz[i] = mx[i];
      my[i] += mx[i];
    }
  std::vector<float> got(n);
  CHECK(cudaMemcpy(got.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hz.data(), z, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    EXPECT(got[i] == mx[i], "x[%d] = %f, want %f", i, got[i], mx[i]);
    EXPECT(hy[i] == my[i], "y[%d] = %f, want %f", i, hy[i], my[i]);
    EXPECT(hz[i] == mz[i], "z[%d] = %f, want %f", i, hz[i], mz[i]);
  }

  // Synchronising a capturing stream is illegal and ends the capture as invalidated.
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  axpb<<<1, 32, 0, s>>>(x, 32, 1.0f, 0.0f);
  cudaError_t e = cudaStreamSynchronize(s);
  EXPECT(e == cudaErrorStreamCaptureUnsupported, "sync in capture: %s", cudaGetErrorName(e));
  cudaGraph_t bad = nullptr;
  e = cudaStreamEndCapture(s, &bad);
  EXPECT(e == cudaErrorStreamCaptureInvalidated && bad == nullptr, "end of invalidated capture: %s",
         cudaGetErrorName(e));
  cudaGetLastError();
  // A 2D copy from pageable host memory is not captured yet (1D ones are: graph_nodes.cu):
  // refused at once, the capture invalidated, and nothing left over for later calls.
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  e = cudaMemcpy2DAsync(x, 16 * sizeof(float), hx.data(), 16 * sizeof(float), 16 * sizeof(float),
                        4, cudaMemcpyHostToDevice, s);
  EXPECT(e == cudaErrorStreamCaptureUnsupported, "host copy in capture: %s", cudaGetErrorName(e));
  bad = nullptr;
  e = cudaStreamEndCapture(s, &bad);
  EXPECT(e == cudaErrorStreamCaptureInvalidated && bad == nullptr,
         "end after a host copy: %s", cudaGetErrorName(e));
  cudaGetLastError();
  CHECK(cudaDeviceSynchronize());
  // The stream works normally afterwards.
  axpb<<<(n + 255) / 256, 256, 0, s>>>(y, n, 0.0f, 5.0f);
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(hy[i] == 5.0f, "y[%d] = %f after the capture", i, hy[i]);

  // An executable graph updated from a second capture of the same work, arguments changed.
  {
    cudaGraph_t g1, g2;
    cudaGraphExec_t x1;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    axpb<<<(n + 255) / 256, 256, 0, s>>>(y, n, 0.0f, 1.0f);
    CHECK(cudaStreamEndCapture(s, &g1));
    CHECK(cudaGraphInstantiate(&x1, g1, 0));
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    axpb<<<(n + 255) / 256, 256, 0, s>>>(y, n, 0.0f, 9.0f);
    CHECK(cudaStreamEndCapture(s, &g2));
    cudaGraphExecUpdateResultInfo info;
    CHECK(cudaGraphExecUpdate(x1, g2, &info));
    EXPECT(info.result == cudaGraphExecUpdateSuccess, "update result %d", (int)info.result);
    CHECK(cudaGraphLaunch(x1, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) EXPECT(hy[i] == 9.0f, "y[%d] = %f after the updated launch", i, hy[i]);
    CHECK(cudaGraphExecDestroy(x1));
    CHECK(cudaGraphDestroy(g1));
    CHECK(cudaGraphDestroy(g2));
  }

  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaEventDestroy(fork));
  CHECK(cudaEventDestroy(join));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaStreamDestroy(s2));
  CHECK(cudaFree(x));
  CHECK(cudaFree(y));
  CHECK(cudaFree(z));
  printf("graphs: all checks passed\n");
  return 0;
}
