// A kernel compiled at run time with NVRTC for the device's own architecture
// (--gpu-architecture=sm_XY) and loaded as the CUBIN NVRTC made, as NVIDIA's *_nvrtc samples
// and JIT-compiling libraries do. The sim runs PTX: `cuwire run` preloads libcuwire_nvrtc.so,
// which keeps each CUBIN's PTX, and the client sends that instead (client-lib/nvrtc/nvrtc_shim.cc).
// The program sees NVRTC's own CUBIN, unchanged.
#include <nvrtc.h>

#include <string.h>

#include <string>
#include <vector>

#include "tests/e2e/check.h"
#include "tests/e2e/check_driver.h"

#define NVRTC(x)                                                                                  \
  do {                                                                                            \
    nvrtcResult r_ = (x);                                                                         \
    if (r_ != NVRTC_SUCCESS) {                                                                    \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x, nvrtcGetErrorString(r_)); \
      exit(1);                                                                                    \
    }                                                                                             \
  } while (0)

static const char kSource[] =
    "extern \"C\" __global__ void scale(float* y, const float* x, float a, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = a * x[i] + (float)i;\n"
    "}\n";

static std::vector<char> compile(const std::string& arch) {
  nvrtcProgram prog;
  NVRTC(nvrtcCreateProgram(&prog, kSource, "scale.cu", 0, nullptr, nullptr));
  const std::string option = "--gpu-architecture=" + arch;
  const char* options[] = {option.c_str()};
  NVRTC(nvrtcCompileProgram(prog, 1, options));
  size_t n = 0;
  NVRTC(nvrtcGetCUBINSize(prog, &n));
  std::vector<char> cubin(n);
  NVRTC(nvrtcGetCUBIN(prog, cubin.data()));
  NVRTC(nvrtcDestroyProgram(&prog));
  return cubin;
}

int main() {
  CHECK(cudaFree(nullptr));  // the runtime's primary context, current for the driver calls
  int major = 0, minor = 0;
  CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
  const std::vector<char> cubin = compile("sm_" + std::to_string(major * 10 + minor));
  EXPECT(cubin.size() > 4 && memcmp(cubin.data(),
                                    "\x7f"
                                    "ELF",
                                    4) == 0,
         "NVRTC's CUBIN is not an ELF image (%zu bytes)", cubin.size());

  CUmodule module;
  CU(cuModuleLoadData(&module, cubin.data()));
  CUfunction fn;
  CU(cuModuleGetFunction(&fn, module, "scale"));
  const int n = 1000;
  std::vector<float> hx(n), hy(n, -1.f);
  for (int i = 0; i < n; ++i) hx[i] = (float)(i % 13);
  float *x, *y;
  CHECK(cudaMalloc((void**)&x, n * sizeof(float)));
  CHECK(cudaMalloc((void**)&y, n * sizeof(float)));
  CHECK(cudaMemcpy(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  float a = 3.f;
  int count = n;
  void* args[] = {&y, &x, &a, &count};
  CU(cuLaunchKernel(fn, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
  CHECK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    EXPECT(hy[i] == 3.f * (float)(i % 13) + (float)i, "y[%d] = %f", i, hy[i]);
  }
  // A copy of the CUBIN elsewhere in memory is the same image.
  std::vector<char> copy(cubin);
  CUmodule again;
  CU(cuModuleLoadData(&again, copy.data()));
  CU(cuModuleUnload(again));
  CU(cuModuleUnload(module));
  free_device(x, y);
  printf("nvrtc_cubin: all checks passed\n");
  return 0;
}
