// JIT linking through the driver API (cuLinkCreate ... cuLinkDestroy): a kernel in one module
// calls a function and reads a variable of another, given as PTX text, a PTX file, a host object
// file (nvcc -dc) and a static library (nvcc -lib); both modules print, so their internal
// printf strings must stay apart. One input alone loads as it is; two definitions of one symbol
// fail with the reason in the error log.
//   jit_link KERNEL.ptx DEVICE.ptx DEVICE.o LIBDEVICE.a
#include <cuda.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/check.h"
#include "tests/e2e/check_driver.h"

static std::string read_file(const char* path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT(f.good(), "cannot read %s", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Linker {
  char info[4096] = {}, error[4096] = {};
  float wall = -1;
  CUlinkState state = nullptr;
  // CUDA writes the output options (log sizes, wall time) into these values: they live as
  // long as the link state.
  CUjit_option opts[6] = {CU_JIT_INFO_LOG_BUFFER,  CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                          CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                          CU_JIT_WALL_TIME,        CU_JIT_LOG_VERBOSE};
  void* vals[6] = {info,  reinterpret_cast<void*>(sizeof info),
                   error, reinterpret_cast<void*>(sizeof error),
                   &wall, reinterpret_cast<void*>(1)};
  Linker() { CU(cuLinkCreate(6, opts, vals, &state)); }
  size_t info_size() const { return reinterpret_cast<uintptr_t>(vals[1]); }
  size_t error_size() const { return reinterpret_cast<uintptr_t>(vals[3]); }
  ~Linker() { CU(cuLinkDestroy(state)); }
};

// Links the kernel's PTX with `add` (which adds the other half), loads the result and checks
// the kernel's output.
template <typename Add>
static void link_and_run(const char* what, const std::string& kernel_ptx, Add add) {
  Linker l;
  CU(cuLinkAddData(l.state, CU_JIT_INPUT_PTX, const_cast<char*>(kernel_ptx.c_str()),
                   kernel_ptx.size() + 1, "jit_link_kernel.ptx", 0, nullptr, nullptr));
  add(l.state);
  void* image = nullptr;
  size_t size = 0;
  const CUresult linked = cuLinkComplete(l.state, &image, &size);
  EXPECT(linked == CUDA_SUCCESS, "%s: cuLinkComplete failed (%d): %s", what, (int)linked, l.error);
  EXPECT(image && size > 0, "%s: an image", what);
  EXPECT(std::strstr(l.info, "link") != nullptr, "%s: the info log says what was linked: '%s'",
         what, l.info);
  EXPECT(l.wall >= 0, "%s: the wall time is set", what);
  EXPECT(l.info_size() == std::strlen(l.info), "%s: the info log's size is %zu for '%s'", what,
         l.info_size(), l.info);
  EXPECT(l.error_size() == 0, "%s: the error log's size is %zu", what, l.error_size());
  CUmodule mod;
  CU(cuModuleLoadData(&mod, image));
  CUfunction fn;
  CU(cuModuleGetFunction(&fn, mod, "apply"));
  const int n = 300;
  std::vector<int> h(n);
  for (int i = 0; i < n; ++i) h[i] = i - 7;
  CUdeviceptr d;
  CU(cuMemAlloc(&d, n * sizeof(int)));
  CU(cuMemcpyHtoD(d, h.data(), n * sizeof(int)));
  int count = n;
  void* args[] = {&d, &count};
  CU(cuLaunchKernel(fn, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
  CU(cuCtxSynchronize());
  CU(cuMemcpyDtoH(h.data(), d, n * sizeof(int)));
  for (int i = 0; i < n; ++i) {
    EXPECT(h[i] == 3 * (i - 7) + 11, "%s: p[%d] = %d, want %d", what, i, h[i], 3 * (i - 7) + 11);
  }
  CU(cuMemFree(d));
  CU(cuModuleUnload(mod));
  printf("%s: linked and ran\n", what);
}

int main(int argc, char** argv) {
  EXPECT(argc == 5, "usage: jit_link KERNEL.ptx DEVICE.ptx DEVICE.o LIBDEVICE.a");
  CHECK(cudaFree(nullptr));  // a current context, through the runtime
  const std::string kernel_ptx = read_file(argv[1]);
  const std::string device_ptx = read_file(argv[2]);

  // One input: loaded as it is; the variable it defines is there.
  {
    Linker l;
    CU(cuLinkAddFile(l.state, CU_JIT_INPUT_PTX, argv[2], 0, nullptr, nullptr));
    void* image = nullptr;
    size_t size = 0;
    CU(cuLinkComplete(l.state, &image, &size));
    CUmodule mod;
    CU(cuModuleLoadData(&mod, image));
    CUdeviceptr var;
    size_t bytes = 0;
    CU(cuModuleGetGlobal(&var, &bytes, mod, "offset_value"));
    int value = 0;
    CU(cuMemcpyDtoH(&value, var, sizeof value));
    EXPECT(bytes == sizeof(int) && value == 11, "offset_value = %d (%zu bytes)", value, bytes);
    CU(cuModuleUnload(mod));
  }
  link_and_run("PTX + PTX text", kernel_ptx, [&](CUlinkState s) {
    CU(cuLinkAddData(s, CU_JIT_INPUT_PTX, const_cast<char*>(device_ptx.c_str()),
                     device_ptx.size() + 1, "jit_link_device.ptx", 0, nullptr, nullptr));
  });
  link_and_run("PTX + PTX file", kernel_ptx, [&](CUlinkState s) {
    CU(cuLinkAddFile(s, CU_JIT_INPUT_PTX, argv[2], 0, nullptr, nullptr));
  });
  link_and_run("PTX + object", kernel_ptx, [&](CUlinkState s) {
    CU(cuLinkAddFile(s, CU_JIT_INPUT_OBJECT, argv[3], 0, nullptr, nullptr));
  });
  link_and_run("PTX + library", kernel_ptx, [&](CUlinkState s) {
    CU(cuLinkAddFile(s, CU_JIT_INPUT_LIBRARY, argv[4], 0, nullptr, nullptr));
  });

  // Two definitions of the same symbols: refused, with the reason in the error log.
  {
    Linker l;
    CU(cuLinkAddData(l.state, CU_JIT_INPUT_PTX, const_cast<char*>(device_ptx.c_str()),
                     device_ptx.size() + 1, "a", 0, nullptr, nullptr));
    CU(cuLinkAddData(l.state, CU_JIT_INPUT_PTX, const_cast<char*>(device_ptx.c_str()),
                     device_ptx.size() + 1, "b", 0, nullptr, nullptr));
    void* image = nullptr;
    size_t size = 0;
    EXPECT(cuLinkComplete(l.state, &image, &size) != CUDA_SUCCESS, "a duplicate definition fails");
    EXPECT(std::strstr(l.error, "more than one") != nullptr, "the error log says why: '%s'",
           l.error);
    EXPECT(l.error_size() == std::strlen(l.error), "the error log's size is %zu", l.error_size());
  }
  // Bad input is refused: a missing file, a bad link state.
  {
    Linker l;
    EXPECT(cuLinkAddFile(l.state, CU_JIT_INPUT_PTX, "/nonexistent/x.ptx", 0, nullptr, nullptr) ==
               CUDA_ERROR_FILE_NOT_FOUND,
           "a missing file");
    EXPECT(cuLinkAddData(l.state, CU_JIT_INPUT_OBJECT, const_cast<char*>("not an object"), 13, "x",
                         0, nullptr, nullptr) == CUDA_ERROR_INVALID_IMAGE,
           "an object without device code");
  }
  EXPECT(cuLinkDestroy(reinterpret_cast<CUlinkState>(0x1234)) == CUDA_ERROR_INVALID_VALUE,
         "a made-up state");
  printf("jit_link: all checks passed\n");
  return 0;
}
