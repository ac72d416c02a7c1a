// Kernel parameter layout as the assembler lays it out: in
// `.param .u64 .ptr .global .align 4 p` the alignment is the pointee's, so the 8-byte pointer
// after a 4-byte int sits at offset 8 (cuSOLVER's kernels are declared this way). Loaded as
// PTX with the driver API and launched both ways: kernelParams and the packed `extra` buffer.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/e2e/check_driver.h"

// set_info(int n, int* info, short s, double* out): *info = n + s; *out = n * 0.5.
static const char kPtx[] = R"(
.version 7.0
.target sm_75
.address_size 64

.visible .entry set_info(
  .param .u32 set_info_param_0,
  .param .u64 .ptr .global .align 4 set_info_param_1,
  .param .u16 set_info_param_2,
  .param .u64 .ptr .align 8 set_info_param_3
)
{
  .reg .b16 %rs<2>;
  .reg .b32 %r<4>;
  .reg .b64 %rd<5>;
  .reg .f64 %fd<2>;

  ld.param.u32 %r1, [set_info_param_0];
  ld.param.u64 %rd1, [set_info_param_1];
  ld.param.u16 %rs1, [set_info_param_2];
  ld.param.u64 %rd3, [set_info_param_3];
  cvta.to.global.u64 %rd2, %rd1;
  cvt.s32.s16 %r2, %rs1;
  add.s32 %r3, %r1, %r2;
  st.global.u32 [%rd2], %r3;
  cvta.to.global.u64 %rd4, %rd3;
  cvt.rn.f64.s32 %fd1, %r1;
  mul.f64 %fd1, %fd1, 0d3FE0000000000000;
  st.global.f64 [%rd4], %fd1;
  ret;
}
)";

// Whether set_info wrote what the launch (`how`) should have given; says what it wrote if not.
static bool wrote(const char* how, CUdeviceptr info, CUdeviceptr out, int want_info,
                  double want_out) {
  int got = 0;
  double half = 0;
  CU(cuMemcpyDtoH(&got, info, 4));
  CU(cuMemcpyDtoH(&half, out, 8));
  if (got == want_info && half == want_out) return true;
  fprintf(stderr, "%s: info %d (want %d), out %g (want %g)\n", how, got, want_info, half, want_out);
  return false;
}

int main() {
  CU(cuInit(0));
  CUdevice dev;
  CU(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CU(cuModuleLoadData(&mod, kPtx));
  CUfunction fn;
  CU(cuModuleGetFunction(&fn, mod, "set_info"));

  // The layout the kernel reports: offsets 0, 8, 16, 24 (each at its own size's alignment).
  const size_t want_offset[] = {0, 8, 16, 24}, want_size[] = {4, 8, 2, 8};
  for (int i = 0; i < 4; ++i) {
    size_t off = 0, size = 0;
    CU(cuFuncGetParamInfo(fn, i, &off, &size));
    if (off != want_offset[i] || size != want_size[i]) {
      fprintf(stderr, "parameter %d at offset %zu (%zu bytes), want %zu (%zu bytes)\n", i, off,
              size, want_offset[i], want_size[i]);
      return 1;
    }
  }

  CUdeviceptr info, out;
  CU(cuMemAlloc(&info, 4));
  CU(cuMemAlloc(&out, 8));
  int n = 1234;
  short s = -34;
  void* params[] = {&n, &info, &s, &out};
  CU(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
  CU(cuCtxSynchronize());
  if (!wrote("kernelParams launch", info, out, 1200, 617.0)) return 1;

  // The packed form: the caller lays the parameters out itself, at the same offsets.
  unsigned char buf[32] = {};
  n = 77;
  s = 3;
  memcpy(buf + 0, &n, 4);
  memcpy(buf + 8, &info, 8);
  memcpy(buf + 16, &s, 2);
  memcpy(buf + 24, &out, 8);
  size_t size = sizeof buf;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  CU(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, extra));
  CU(cuCtxSynchronize());
  if (!wrote("packed launch", info, out, 80, 38.5)) return 1;
  for (CUdeviceptr p : {info, out}) CU(cuMemFree(p));
  CU(cuModuleUnload(mod));
  CU(cuDevicePrimaryCtxRelease(dev));
  printf("param_align: all checks passed\n");
  return 0;
}
