// A plain CUDA runtime program, built by nvcc the default way (static cudart). Nothing in it
// knows about cuwire: run it with `cuwire run -- vector_add` and it runs on a gpu-server.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <vector>

#define CHECK(x)                                                                               \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      return 1;                                                                                \
    }                                                                                          \
  } while (0)

__global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

__global__ void saxpy(float alpha, const float* x, float* y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    y[i] = alpha * x[i] + y[i];
  }
}

int main() {
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%d device(s); device 0: %s, compute %d.%d, %d SMs, %zu MiB\n", count, prop.name,
              prop.major, prop.minor, prop.multiProcessorCount, prop.totalGlobalMem >> 20);

  const int n = 1 << 16;
  std::vector<float> a(n), b(n), c(n);
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 2.0f * static_cast<float>(i);
  }
  float *da, *db, *dc;
  CHECK(cudaMalloc(&da, n * sizeof(float)));
  CHECK(cudaMalloc(&db, n * sizeof(float)));
  CHECK(cudaMalloc(&dc, n * sizeof(float)));
  CHECK(cudaMemcpy(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), n * sizeof(float), cudaMemcpyHostToDevice));

  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  CHECK(cudaEventRecord(start));
  for (int rep = 0; rep < 10; ++rep) {
    vector_add<<<(n + 255) / 256, 256>>>(da, db, dc, n);
    CHECK(cudaGetLastError());
  }
  saxpy<<<64, 256>>>(0.5f, da, dc, n);
  CHECK(cudaGetLastError());
  CHECK(cudaEventRecord(stop));
  CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  CHECK(cudaMemcpy(c.data(), dc, n * sizeof(float), cudaMemcpyDeviceToHost));

  for (int i = 0; i < n; ++i) {
    float want = 3.0f * i + 0.5f * i;
    if (std::fabs(c[i] - want) > 1e-3f * std::fabs(want) + 1e-3f) {
      std::fprintf(stderr, "wrong result at %d: %f, want %f\n", i, c[i], want);
      return 1;
    }
  }
  std::printf("vector_add x10 + saxpy on %d elements: results correct, %.3f ms on the device\n", n,
              ms);
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  return 0;
}
