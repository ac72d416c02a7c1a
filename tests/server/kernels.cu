// Kernels for the server tests: loaded as PTX text and as fatbins through gpu-server, run on
// the sim backend, checked against CPU references in kernels_test.cc.
#include <cuda_fp16.h>

extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

extern "C" __global__ void saxpy_f32(float alpha, const float* x, float* y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    y[i] = fmaf(alpha, x[i], y[i]);
  }
}

extern "C" __global__ void saxpy_f64(double alpha, const double* x, double* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = alpha * x[i] + y[i];
}

#define TILE 16
// C[m x n] = A[m x k] * B[k x n], row-major, shared-memory tiles.
extern "C" __global__ void matmul_tiled(const float* A, const float* B, float* C, int m, int n,
                                        int k) {
  __shared__ float as[TILE][TILE];
  __shared__ float bs[TILE][TILE];
  int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.0f;
  for (int t = 0; t < (k + TILE - 1) / TILE; ++t) {
    int ac = t * TILE + threadIdx.x, br = t * TILE + threadIdx.y;
    as[threadIdx.y][threadIdx.x] = (row < m && ac < k) ? A[row * k + ac] : 0.0f;
    bs[threadIdx.y][threadIdx.x] = (br < k && col < n) ? B[br * n + col] : 0.0f;
    __syncthreads();
    for (int i = 0; i < TILE; ++i) acc += as[threadIdx.y][i] * bs[i][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n) C[row * n + col] = acc;
}

// One partial sum per block, tree reduction over dynamic shared memory.
extern "C" __global__ void block_sum(const int* in, long long* out, int n) {
  extern __shared__ long long partial[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  partial[threadIdx.x] = i < n ? in[i] : 0;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

// Warp-shuffle reduction; lane 0 of every warp adds its warp's sum to *out.
extern "C" __global__ void warp_sum(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? in[i] : 0.0f;
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, v);
}

// 64-bin histogram: per-block bins in shared memory, merged with global atomics.
extern "C" __global__ void histogram64(const unsigned char* data, unsigned* bins, int n) {
  __shared__ unsigned local[64];
  for (int b = threadIdx.x; b < 64; b += blockDim.x) local[b] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    atomicAdd(&local[data[i] & 63], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < 64; b += blockDim.x) atomicAdd(&bins[b], local[b]);
}

struct Affine {
  float scale;
  double offset;
  int pad[3];
  short tag;
};

// A struct by value.
extern "C" __global__ void apply_affine(Affine p, const float* in, double* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = p.scale * in[i] + p.offset + p.tag;
}

__device__ int counter;
__constant__ float coeffs[4];
__device__ float table[8] = {1, 2, 3, 4, 5, 6, 7, 8};

// Globals and constants: reads __constant__ coeffs and an initialised __device__ table, counts
// threads in a __device__ global.
extern "C" __global__ void use_globals(float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = coeffs[i & 3] * table[i & 7];
    atomicAdd(&counter, 1);
  }
}

// Spins for a while, then writes a marker: used to check stream ordering across streams.
extern "C" __global__ void slow_write(int* flag, int value, int spins) {
  volatile int sink = 0;
  for (int i = 0; i < spins; ++i) sink += i;
  *flag = value + (sink & 0);
}

extern "C" __global__ void copy_plus_one(const int* flag, int* out) { *out = *flag + 1; }

// Writes through whatever pointer it is given: an illegal address faults the launch.
extern "C" __global__ void write_to(int* p) { *p = 1; }
