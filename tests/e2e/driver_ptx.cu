// A driver-API program: loads PTX with cuModuleLoadData and launches a kernel that takes a
// struct argument, through cuLaunchKernel (kernelParams) and the `extra` buffer form.
// argv[1]: the PTX file (built from driver_ptx_kernel.cu).
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "driver_ptx_args.h"

#define DCHECK(x)                                                                   \
  do {                                                                              \
    CUresult r_ = (x);                                                              \
    if (r_ != CUDA_SUCCESS) {                                                       \
      const char* s_ = "?";                                                         \
      cuGetErrorName(r_, &s_);                                                      \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x, s_);        \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: driver_ptx KERNEL.ptx\n");
    return 2;
  }
  std::ifstream f(argv[1]);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string ptx = ss.str();
  if (ptx.empty()) {
    fprintf(stderr, "cannot read %s\n", argv[1]);
    return 2;
  }
  DCHECK(cuInit(0));
  CUdevice dev;
  DCHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  DCHECK(cuCtxCreate(&ctx, nullptr, 0, dev));
  CUmodule mod;
  DCHECK(cuModuleLoadData(&mod, ptx.c_str()));
  CUfunction fn;
  DCHECK(cuModuleGetFunction(&fn, mod, "saxpy_struct"));
  if (cuModuleGetFunction(&fn, mod, "no_such_kernel") != CUDA_ERROR_NOT_FOUND) {
    fprintf(stderr, "missing kernel not reported\n");
    return 1;
  }
  DCHECK(cuModuleGetFunction(&fn, mod, "saxpy_struct"));
  size_t off = 0, size = 0;
  DCHECK(cuFuncGetParamInfo(fn, 0, &off, &size));
  if (size != sizeof(SaxpyArgs)) {
    fprintf(stderr, "param 0 size %zu, expected %zu\n", size, sizeof(SaxpyArgs));
    return 1;
  }
  const int n = 1000;
  std::vector<float> x(n), y(n), out(n);
  for (int i = 0; i < n; ++i) {
    x[i] = float(i);
    y[i] = float(2 * i);
  }
  CUdeviceptr dx, dy;
  DCHECK(cuMemAlloc(&dx, n * sizeof(float)));
  DCHECK(cuMemAlloc(&dy, n * sizeof(float)));
  DCHECK(cuMemcpyHtoD(dx, x.data(), n * sizeof(float)));
  DCHECK(cuMemcpyHtoD(dy, y.data(), n * sizeof(float)));
  SaxpyArgs a;
  a.x = reinterpret_cast<const float*>(dx);
  a.y = reinterpret_cast<float*>(dy);
  a.a = 3.0f;
  a.n = n;
  int scale = 1;
  void* params[] = {&a, &scale};
  DCHECK(cuLaunchKernel(fn, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr));
  DCHECK(cuCtxSynchronize());
  DCHECK(cuMemcpyDtoH(out.data(), dy, n * sizeof(float)));
  for (int i = 0; i < n; ++i) {
    if (out[i] != 3.0f * i + 2 * i) {
      fprintf(stderr, "out[%d] = %f\n", i, out[i]);
      return 1;
    }
  }
  // Same launch through the packed-buffer form.
  size_t off1 = 0;
  DCHECK(cuFuncGetParamInfo(fn, 1, &off1, &size));
  std::vector<char> buf(off1 + sizeof(int));
  std::memcpy(buf.data(), &a, sizeof a);
  scale = 2;
  std::memcpy(buf.data() + off1, &scale, sizeof scale);
  size_t buf_size = buf.size();
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf.data(), CU_LAUNCH_PARAM_BUFFER_SIZE,
                   &buf_size, CU_LAUNCH_PARAM_END};
  DCHECK(cuLaunchKernel(fn, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, nullptr, extra));
  DCHECK(cuCtxSynchronize());
  DCHECK(cuMemcpyDtoH(out.data(), dy, n * sizeof(float)));
  for (int i = 0; i < n; ++i) {
    float want = 2 * (3.0f * i + 2 * i) + 3.0f * i;
    if (out[i] != want) {
      fprintf(stderr, "extra launch: out[%d] = %f, want %f\n", i, out[i], want);
      return 1;
    }
  }
  // An invalid configuration fails at once.
  if (cuLaunchKernel(fn, 1, 1, 1, 4096, 1, 1, 0, nullptr, params, nullptr) == CUDA_SUCCESS) {
    fprintf(stderr, "oversized block accepted\n");
    return 1;
  }
  DCHECK(cuMemFree(dx));
  DCHECK(cuMemFree(dy));
  DCHECK(cuModuleUnload(mod));
  DCHECK(cuCtxDestroy(ctx));
  printf("ok\n");
  return 0;
}
