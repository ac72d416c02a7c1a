// Kernels whose images tests/image/image_test.cc takes apart. The signatures are the expected
// values there: keep the two in step.
struct Triple {  // 24 bytes, 8-byte aligned
  double a;
  double b;
  int c;
  int d;
};

__device__ int g_dev[16];
__device__ int g_init = 5;
__constant__ float g_const[8];

extern "C" __global__ void kern_a(float* p, int n, double d, Triple t) {
  if (static_cast<int>(threadIdx.x) < n) p[threadIdx.x] = static_cast<float>(d + t.a + t.c);
}

// C++ linkage on purpose: the cubin must report the mangled name.
__global__ void kern_b(char c, short s, long long ll, float* out) { out[0] = c + s + ll; }

extern "C" __global__ void kern_globals(int* out) {
  out[threadIdx.x] = g_dev[threadIdx.x] + g_init + static_cast<int>(g_const[threadIdx.x & 7]);
}

extern "C" __global__ void kern_empty() {}

// Past 4 KiB of parameters (CUDA 12.1+) nvcc describes them with a different attribute.
struct Big {
  char bytes[20000];
};
extern "C" __global__ void kern_big(int a, Big b, int* out) { out[0] = a + b.bytes[threadIdx.x]; }
