// Arithmetic, conversions and calls for the PTX interpreter tests.
#include <cuda_fp16.h>

extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    y[i] = a * x[i] + y[i];
}

extern "C" __global__ void daxpy(int n, double a, const double* x, double* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

struct Params {
  int count;
  double scale;
  float offsets[3];
  char tag;
};

extern "C" __global__ void struct_by_value(Params p, float* out) {
  int i = threadIdx.x;
  if (i < p.count) out[i] = static_cast<float>(p.scale * i) + p.offsets[i % 3] + p.tag;
}

extern "C" __global__ void int_divmod(const int* a, const int* b, int* q, int* r,
                                      const unsigned* ua, const unsigned* ub, unsigned* uq,
                                      unsigned* ur, const long long* la, const long long* lb,
                                      long long* lq, long long* lr, const unsigned long long* ula,
                                      const unsigned long long* ulb, unsigned long long* ulq,
                                      unsigned long long* ulr, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  q[i] = a[i] / b[i];
  r[i] = a[i] % b[i];
  uq[i] = ua[i] / ub[i];
  ur[i] = ua[i] % ub[i];
  lq[i] = la[i] / lb[i];
  lr[i] = la[i] % lb[i];
  ulq[i] = ula[i] / ulb[i];
  ulr[i] = ula[i] % ulb[i];
}

__device__ __noinline__ float poly(float x, int k) {
  float acc = 0.0f;
  for (int j = 0; j <= k; ++j) acc = acc * x + (j + 1);
  return acc;
}

__device__ __noinline__ int collatz_steps(int v) {
  int steps = 0;
  while (v != 1 && steps < 1000) {
    v = (v & 1) ? 3 * v + 1 : v / 2;
    ++steps;
  }
  return steps;
}

extern "C" __global__ void device_call(const float* x, float* y, int* steps, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  y[i] = poly(x[i], i % 4);
  // Divergent call: only odd threads call.
  steps[i] = (i & 1) ? collatz_steps(i + 1) : -1;
}

extern "C" __global__ void half_convert(const float* in, float* out, __half* h, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __half v = __float2half(in[i]);
  h[i] = v;
  out[i] = __half2float(v) * 2.0f;
}

extern "C" __global__ void math_f32(const float* x, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  out[i * 8 + 0] = sqrtf(v);
  out[i * 8 + 1] = expf(v * 0.1f);
  out[i * 8 + 2] = logf(v);
  out[i * 8 + 3] = sinf(v);
  out[i * 8 + 4] = cosf(v);
  out[i * 8 + 5] = __fdividef(v, 3.0f);
  out[i * 8 + 6] = rsqrtf(v);
  out[i * 8 + 7] = tanhf(v * 0.1f) + fminf(v, 2.0f) + fmaxf(v, 3.0f) + fabsf(-v) + floorf(v * 0.3f);
}

extern "C" __global__ void math_f64(const double* x, double* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double v = x[i];
  out[i * 4 + 0] = sqrt(v);
  out[i * 4 + 1] = exp(v * 0.1);
  out[i * 4 + 2] = 1.0 / v;
  out[i * 4 + 3] = (double)(long long)(v * 1000.5) + (double)(unsigned)(v * 3.0f);
}

extern "C" __global__ void bits(const unsigned* x, unsigned* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned v = x[i];
  out[i * 8 + 0] = __popc(v);
  out[i * 8 + 1] = __clz(v);
  out[i * 8 + 2] = __brev(v);
  out[i * 8 + 3] = __byte_perm(v, 0x12345678u, 0x5140);
  out[i * 8 + 4] = (v >> 5) & 0x3ff;
  out[i * 8 + 5] = (unsigned)((int)v >> 7);
  out[i * 8 + 6] = __umulhi(v, 0x9e3779b9u) ^ (unsigned)__mul24((int)v, 77);
  out[i * 8 + 7] = (unsigned)(((unsigned long long)v * 0x123456789ull) >> 17);
}
