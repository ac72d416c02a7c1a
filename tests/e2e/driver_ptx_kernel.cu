// Compiled to PTX for driver_ptx: y = scale * y + a * x, with the operands in one struct.
#include "tests/e2e/driver_ptx_args.h"

extern "C" __global__ void saxpy_struct(SaxpyArgs args, int scale) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < args.n) args.y[i] = scale * args.y[i] + args.a * args.x[i];
}
