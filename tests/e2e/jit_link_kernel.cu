// Half of a program linked at run time (jit_link.cu): a kernel calling a device function and
// reading a variable that jit_link_device.cu defines. Built with -rdc, as PTX.
#include <cstdio>

extern __device__ int scale(int x);
extern __device__ int offset_value;

extern "C" __global__ void apply(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = scale(p[i]) + offset_value;
  if (i == 0) printf("apply: p[0] = %d\n", p[0]);
}
