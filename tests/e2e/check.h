// Shared by the end-to-end programs: each checks its own results and exits non-zero on the
// first failure, naming the line and the CUDA error.
#pragma once
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#define CHECK(x)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_), \
              cudaGetErrorString(e_));                                                             \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

#define EXPECT(cond, ...)                                                 \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "%s:%d: expected %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                       \
      fprintf(stderr, "\n");                                              \
      exit(1);                                                            \
    }                                                                     \
  } while (0)

// A device copy of a host vector, for the program to cudaFree.
template <typename T>
T* upload(const std::vector<T>& v) {
  T* d = nullptr;
  CHECK(cudaMalloc(&d, sizeof(T) * v.size()));
  CHECK(cudaMemcpy(d, v.data(), sizeof(T) * v.size(), cudaMemcpyHostToDevice));
  return d;
}

// Frees device allocations at the end of a program, each call checked.
template <typename... T>
void free_device(T*... p) {
  for (void* q : {static_cast<void*>(p)...}) CHECK(cudaFree(q));
}

// Launches an executable graph on s and waits for it.
inline void launch_and_wait(cudaGraphExec_t x, cudaStream_t s) {
  CHECK(cudaGraphLaunch(x, s));
  CHECK(cudaStreamSynchronize(s));
}

// Destroys an executable graph and the graph it was made from.
inline void destroy_graph(cudaGraphExec_t x, cudaGraph_t g) {
  CHECK(cudaGraphExecDestroy(x));
  CHECK(cudaGraphDestroy(g));
}

// CUDA's rule for a graph with conditional or memory nodes (`what` it holds): neither a clone of
// it nor a copy of it as a child graph node of `parent`.
inline void expect_uncopyable(cudaGraph_t g, cudaGraph_t parent, const char* what) {
  cudaGraph_t clone;
  EXPECT(cudaGraphClone(&clone, g) == cudaErrorNotSupported, "a clone of a graph with %s", what);
  cudaGetLastError();
  cudaGraphNode_t child;
  EXPECT(cudaGraphAddChildGraphNode(&child, parent, nullptr, 0, g) == cudaErrorNotSupported,
         "a graph with %s copied into a child node", what);
  cudaGetLastError();
}

// Updates executable graph `x` to `g`, which differs from its graph only in parameters: CUDA
// must accept the update.
inline void update_exec(cudaGraphExec_t x, cudaGraph_t g) {
  cudaGraphExecUpdateResultInfo info;
  CHECK(cudaGraphExecUpdate(x, g, &info));
  EXPECT(info.result == cudaGraphExecUpdateSuccess, "exec update result %d", (int)info.result);
}
