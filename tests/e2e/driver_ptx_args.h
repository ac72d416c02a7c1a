// The struct argument of driver_ptx's kernel, shared by the kernel and the host program.
#pragma once
struct SaxpyArgs {
  const float* x;
  float* y;
  float a;
  int n;
};
