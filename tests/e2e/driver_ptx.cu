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

#include "tests/e2e/check_driver.h"
#include "tests/e2e/driver_ptx_args.h"

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
  CU(cuInit(0));
  CUdevice dev;
  CU(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CU(cuCtxCreate(&ctx, nullptr, 0, dev));
  CUmodule mod;
  CU(cuModuleLoadData(&mod, ptx.c_str()));
  // With JIT options: the options CUDA writes back (log sizes, wall time) are written, the
  // logs are strings, and a failed load says so in the error log.
  {
    char info[256], error[256];
    memset(info, 'x', sizeof info);
    memset(error, 'x', sizeof error);
    CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                           CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                           CU_JIT_WALL_TIME};
    void* vals[] = {info, reinterpret_cast<void*>(sizeof info), error,
                    reinterpret_cast<void*>(sizeof error), nullptr};
    CUmodule with_options;
    CU(cuModuleLoadDataEx(&with_options, ptx.c_str(), 5, opts, vals));
    if (strlen(info) != reinterpret_cast<uintptr_t>(vals[1]) ||
        strlen(error) != reinterpret_cast<uintptr_t>(vals[3])) {
      fprintf(stderr, "log sizes %zu %zu for logs '%s' '%s'\n",
              (size_t) reinterpret_cast<uintptr_t>(vals[1]),
              (size_t) reinterpret_cast<uintptr_t>(vals[3]), info, error);
      return 1;
    }
    CU(cuModuleUnload(with_options));
    void* again[] = {info, reinterpret_cast<void*>(sizeof info), error,
                     reinterpret_cast<void*>(sizeof error), nullptr};
    if (cuModuleLoadDataEx(&with_options, "not an image", 5, opts, again) == CUDA_SUCCESS ||
        strlen(error) == 0 || strlen(error) != reinterpret_cast<uintptr_t>(again[3])) {
      fprintf(stderr, "a bad image: error log '%s' (%zu)\n", error,
              (size_t) reinterpret_cast<uintptr_t>(again[3]));
      return 1;
    }
  }
  CUfunction fn;
  CU(cuModuleGetFunction(&fn, mod, "saxpy_struct"));
  if (cuModuleGetFunction(&fn, mod, "no_such_kernel") != CUDA_ERROR_NOT_FOUND) {
    fprintf(stderr, "missing kernel not reported\n");
    return 1;
  }
  CU(cuModuleGetFunction(&fn, mod, "saxpy_struct"));
  // Its name, as the module has it; and its loading state (loaded: it was just looked up).
  const char* name = nullptr;
  CU(cuFuncGetName(&name, fn));
  if (!name || strcmp(name, "saxpy_struct") != 0) {
    fprintf(stderr, "cuFuncGetName: '%s'\n", name ? name : "(null)");
    return 1;
  }
  const char* again_name = nullptr;
  CU(cuFuncGetName(&again_name, fn));
  if (again_name != name) {
    fprintf(stderr, "cuFuncGetName: a second call gave another string\n");
    return 1;
  }
  if (cuFuncGetName(&name, nullptr) == CUDA_SUCCESS) {
    fprintf(stderr, "cuFuncGetName of no function succeeded\n");
    return 1;
  }
  CUfunctionLoadingState state = CU_FUNCTION_LOADING_STATE_UNLOADED;
  CU(cuFuncIsLoaded(&state, fn));
  if (state != CU_FUNCTION_LOADING_STATE_LOADED) {
    fprintf(stderr, "cuFuncIsLoaded: %d\n", static_cast<int>(state));
    return 1;
  }
  size_t off = 0, size = 0;
  CU(cuFuncGetParamInfo(fn, 0, &off, &size));
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
  CU(cuMemAlloc(&dx, n * sizeof(float)));
  CU(cuMemAlloc(&dy, n * sizeof(float)));
  CU(cuMemcpyHtoD(dx, x.data(), n * sizeof(float)));
  CU(cuMemcpyHtoD(dy, y.data(), n * sizeof(float)));
  SaxpyArgs a;
  a.x = reinterpret_cast<const float*>(dx);
  a.y = reinterpret_cast<float*>(dy);
  a.a = 3.0f;
  a.n = n;
  int scale = 1;
  void* params[] = {&a, &scale};
  CU(cuLaunchKernel(fn, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr));
  CU(cuCtxSynchronize());
  CU(cuMemcpyDtoH(out.data(), dy, n * sizeof(float)));
  for (int i = 0; i < n; ++i) {
    if (out[i] != 3.0f * i + 2 * i) {
      fprintf(stderr, "out[%d] = %f\n", i, out[i]);
      return 1;
    }
  }
  // Same launch through the packed-buffer form.
  size_t off1 = 0;
  CU(cuFuncGetParamInfo(fn, 1, &off1, &size));
  std::vector<char> buf(off1 + sizeof(int));
  std::memcpy(buf.data(), &a, sizeof a);
  scale = 2;
  std::memcpy(buf.data() + off1, &scale, sizeof scale);
  size_t buf_size = buf.size();
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf.data(), CU_LAUNCH_PARAM_BUFFER_SIZE,
                   &buf_size, CU_LAUNCH_PARAM_END};
  CU(cuLaunchKernel(fn, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, nullptr, extra));
  CU(cuCtxSynchronize());
  CU(cuMemcpyDtoH(out.data(), dy, n * sizeof(float)));
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
  for (CUdeviceptr p : {dx, dy}) CU(cuMemFree(p));
  CU(cuModuleUnload(mod));
  CU(cuCtxDestroy(ctx));
  printf("ok\n");
  return 0;
}
