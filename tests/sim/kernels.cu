// Kernels the sim backend tests run through the PTX interpreter.

extern "C" __global__ void vec_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

__constant__ float scale_c[4] = {1.0f, 2.0f, 3.0f, 4.0f};
__device__ int offset_g = 7;

extern "C" __global__ void use_globals(float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = scale_c[i % 4] + static_cast<float>(offset_g);
}

// Takes a while on the interpreter: used to show that queued work really waits.
extern "C" __global__ void spin(unsigned* out, int iters) {
  unsigned v = threadIdx.x;
  for (int i = 0; i < iters; ++i) v = v * 1664525u + 1013904223u;
  out[threadIdx.x] = v;
}

extern "C" __global__ void add_one(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1;
}

extern "C" __global__ void poke(int* p) { *p = 1; }

extern "C" __global__ void reverse_shared(int* p) {
  __shared__ int tile[128];
  tile[threadIdx.x] = p[threadIdx.x];
  __syncthreads();
  p[threadIdx.x] = tile[blockDim.x - 1 - threadIdx.x];
}
