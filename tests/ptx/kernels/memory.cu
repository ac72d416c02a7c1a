// Shared memory, barriers, atomics, globals and constants for the PTX interpreter tests.

#define TILE 16

extern "C" __global__ void matmul(const float* A, const float* B, float* C, int n) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  int tx = threadIdx.x, ty = threadIdx.y;
  int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
  float acc = 0.0f;
  for (int k = 0; k < n; k += TILE) {
    As[ty][tx] = (row < n && k + tx < n) ? A[row * n + k + tx] : 0.0f;
    Bs[ty][tx] = (col < n && k + ty < n) ? B[(k + ty) * n + col] : 0.0f;
    __syncthreads();
    for (int j = 0; j < TILE; ++j) acc += As[ty][j] * Bs[j][tx];
    __syncthreads();
  }
  if (row < n && col < n) C[row * n + col] = acc;
}

extern "C" __global__ void block_reduce(const int* in, int* out, int n) {
  __shared__ int buf[256];
  int t = threadIdx.x;
  int i = blockIdx.x * blockDim.x + t;
  buf[t] = i < n ? in[i] : 0;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) buf[t] += buf[t + s];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = buf[0];
}

extern "C" __global__ void histogram(const unsigned char* data, int n, unsigned* bins) {
  __shared__ unsigned local[16];
  if (threadIdx.x < 16) local[threadIdx.x] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    atomicAdd(&local[data[i] % 16], 1u);
  __syncthreads();
  if (threadIdx.x < 16) atomicAdd(&bins[threadIdx.x], local[threadIdx.x]);
}

// out: [0]=min [1]=max [2]=exch count [3]=cas winners [4]=and [5]=or [6]=xor [7]=inc [8]=dec
//      [9]=sum of exch results
extern "C" __global__ void atomics(int* out, float* fsum, double* dsum, unsigned long long* u64) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  atomicMin(&out[0], 1000 - t);
  atomicMax(&out[1], t * 3);
  int prev = atomicExch(&out[2], t);
  atomicAdd(&out[9], prev);
  if (atomicCAS(&out[3], 0, t + 1) == 0) atomicAdd(&out[10], 1);
  atomicAnd(&out[4], ~(1 << (t % 31)));
  atomicOr(&out[5], 1 << (t % 31));
  atomicXor(&out[6], t);
  atomicInc(reinterpret_cast<unsigned*>(&out[7]), 9u);
  atomicDec(reinterpret_cast<unsigned*>(&out[8]), 5u);
  atomicAdd(fsum, 0.5f);
  atomicAdd(dsum, 0.25);
  atomicAdd(u64, 1ull << 33);
  __shared__ int s_max;
  if (threadIdx.x == 0) s_max = 0;
  __syncthreads();
  atomicMax(&s_max, threadIdx.x);
  __syncthreads();
  if (threadIdx.x == 0) atomicAdd(&out[11], s_max);
}

__device__ int g_counter;
__device__ float g_table[4] = {1.5f, 2.5f, 3.5f, 4.5f};
__constant__ float c_coeffs[4];
__constant__ int c_bias = 7;

extern "C" __global__ void globals(float* out) {
  int t = threadIdx.x;
  out[t] = g_table[t % 4] * c_coeffs[t % 4] + c_bias;
  atomicAdd(&g_counter, 1);
}

extern "C" __global__ void dynamic_shared(const float* in, float* out) {
  extern __shared__ float dyn[];
  int t = threadIdx.x;
  dyn[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = dyn[blockDim.x - 1 - t];
}

extern "C" __global__ void local_array(const int* in, int* out, int n) {
  int buf[24];
  int t = threadIdx.x;
  for (int i = 0; i < 24; ++i) buf[i] = in[(t + i) % n] * (i + 1);
  int k = in[t % n] % 24;
  if (k < 0) k = -k;
  out[t] = buf[k] + buf[(k + 5) % 24];
}

extern "C" __global__ void out_of_bounds(float* p, long long offset) { p[offset] = 1.0f; }

// out per block: [0]=__syncthreads_count(odd) [1]=__syncthreads_and(t<limit)
// [2]=__syncthreads_or(t==7)
extern "C" __global__ void barrier_reduce(int* out, int limit) {
  int t = threadIdx.x;
  int c = __syncthreads_count(t & 1);
  int a = __syncthreads_and(t < limit);
  int o = __syncthreads_or(t == 7);
  if (t == 0) {
    out[blockIdx.x * 3 + 0] = c;
    out[blockIdx.x * 3 + 1] = a;
    out[blockIdx.x * 3 + 2] = o;
  }
}
