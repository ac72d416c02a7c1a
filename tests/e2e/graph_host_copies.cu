// Copies to and from pinned host memory inside a stream capture (CUDA allows them): a graph
// of host-to-device copy, kernel, device-to-host copy is launched several times, the host
// changing the input between launches; after each synchronisation the output holds that
// launch's result.
#include "check.h"

__global__ void scale_add(const int* in, int* out, int n, int k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 3 + k;
}

int main() {
  const int n = 5000;
  const size_t bytes = sizeof(int) * n;
  int *h_in, *h_out;
  CHECK(cudaMallocHost(&h_in, bytes));
  CHECK(cudaHostAlloc(&h_out, bytes, cudaHostAllocDefault));
  int *d_in, *d_out;
  CHECK(cudaMalloc(&d_in, bytes));
  CHECK(cudaMalloc(&d_out, bytes));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  for (int i = 0; i < n; ++i) h_in[i] = i;
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemcpyAsync(d_in, h_in, bytes, cudaMemcpyHostToDevice, s));
  scale_add<<<(n + 255) / 256, 256, 0, s>>>(d_in, d_out, n, 7);
  CHECK(cudaMemcpyAsync(h_out, d_out, bytes, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamEndCapture(s, &graph));
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  EXPECT(nodes == 3, "the graph has %zu nodes, want 3", nodes);
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  // Nothing ran during the capture.
  for (int i = 0; i < n; ++i) EXPECT(h_out[i] == 0, "h_out[%d] = %d before any launch", i, h_out[i]);

  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < n; ++i) h_in[i] = i * (round + 1) - round;
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; ++i) {
      const int want = (i * (round + 1) - round) * 3 + 7;
      EXPECT(h_out[i] == want, "round %d: h_out[%d] = %d, want %d", round, i, h_out[i], want);
    }
  }
  // Through cudaMemcpyDefault (unified addressing) too, in a second graph.
  cudaGraph_t g2;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemcpyAsync(d_in, h_out, bytes, cudaMemcpyDefault, s));
  CHECK(cudaMemcpyAsync(h_in, d_in, bytes, cudaMemcpyDefault, s));
  CHECK(cudaStreamEndCapture(s, &g2));
  cudaGraphExec_t e2;
  CHECK(cudaGraphInstantiate(&e2, g2, 0));
  h_out[17] = -5;
  CHECK(cudaGraphLaunch(e2, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(h_in[17] == -5, "h_in[17] = %d after the copy graph", h_in[17]);
  EXPECT(h_in[n - 1] == h_out[n - 1], "h_in[n-1] = %d", h_in[n - 1]);

  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphExecDestroy(e2));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaGraphDestroy(g2));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d_in));
  CHECK(cudaFree(d_out));
  CHECK(cudaFreeHost(h_in));
  CHECK(cudaFreeHost(h_out));
  printf("graph_host_copies: all checks passed\n");
  return 0;
}
