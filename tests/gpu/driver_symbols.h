// The driver API as an application finds it at run time: dlopen("libcuda.so.1"), which is the
// NVIDIA driver natively and cuwire's client library under `cuwire run` (it comes first on
// LD_LIBRARY_PATH). Nothing here links a libcuda, so one binary serves both runs.
//
// Only names cuda.h does not redefine to a versioned symbol (cuCtxCreate is cuCtxCreate_v4)
// may be listed: the type comes from the declaration and the symbol from the spelled name.
#pragma once

#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <string>

namespace cuwire::gpu_check {

#define CUWIRE_DRIVER_SYMBOLS(X) \
  X(cuInit)                      \
  X(cuDriverGetVersion)          \
  X(cuGetErrorName)              \
  X(cuGetExportTable)            \
  X(cuDeviceGet)                 \
  X(cuDeviceGetAttribute)        \
  X(cuDevicePrimaryCtxRetain)    \
  X(cuCtxSetCurrent)             \
  X(cuModuleLoadData)            \
  X(cuModuleUnload)              \
  X(cuModuleGetFunction)         \
  X(cuFuncGetParamInfo)          \
  X(cuLibraryLoadData)           \
  X(cuLibraryUnload)             \
  X(cuLibraryGetKernel)          \
  X(cuKernelGetParamInfo)

struct Driver {
#define CUWIRE_DRIVER_MEMBER(name) decltype(&::name) name = nullptr;
  CUWIRE_DRIVER_SYMBOLS(CUWIRE_DRIVER_MEMBER)
#undef CUWIRE_DRIVER_MEMBER

  // Loads libcuda.so.1 and every symbol above; on failure prints why and returns false.
  bool load() {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      std::fprintf(stderr, "cannot load libcuda.so.1: %s\n", dlerror());
      return false;
    }
    bool ok = true;
#define CUWIRE_DRIVER_LOOKUP(name)                                                       \
  name = reinterpret_cast<decltype(name)>(dlsym(h, #name));                              \
  if (!name) {                                                                           \
    std::fprintf(stderr, "libcuda.so.1 has no %s (a driver older than 12.4?)\n", #name); \
    ok = false;                                                                          \
  }
    CUWIRE_DRIVER_SYMBOLS(CUWIRE_DRIVER_LOOKUP)
#undef CUWIRE_DRIVER_LOOKUP
    return ok;
  }

  // CUDA_ERROR_NAME, or the number when the driver does not know it.
  std::string error_name(CUresult r) const {
    const char* name = nullptr;
    if (cuGetErrorName && cuGetErrorName(r, &name) == CUDA_SUCCESS && name) return name;
    return "CUresult " + std::to_string(static_cast<int>(r));
  }
};

}  // namespace cuwire::gpu_check
