/* Stand-ins for a broken NVIDIA driver, to see what gpu-server --backend cuda says at start
 * (gpu_server_cli_test): built once per case with FAKE_VERSION (what cuDriverGetVersion
 * reports), FAKE_INIT (what cuInit returns) and FAKE_COUNT (devices). Only these few functions
 * exist; gpu-server must give one clear line before it needs any other. */
#include <cuda.h>

CUresult CUDAAPI cuDriverGetVersion(int* v) {
  *v = FAKE_VERSION;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuInit(unsigned int flags) {
  (void)flags;
  return (CUresult)FAKE_INIT;
}

CUresult CUDAAPI cuDeviceGetCount(int* count) {
  *count = FAKE_COUNT;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char** name) {
  *name = error == CUDA_ERROR_NO_DEVICE ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN";
  return CUDA_SUCCESS;
}

#if FAKE_VERSION >= 12040
CUresult CUDAAPI cuFuncGetParamInfo(CUfunction f, size_t index, size_t* offset, size_t* size) {
  (void)f;
  (void)index;
  (void)offset;
  (void)size;
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult CUDAAPI cuKernelGetParamInfo(CUkernel k, size_t index, size_t* offset, size_t* size) {
  (void)k;
  (void)index;
  (void)offset;
  (void)size;
  return CUDA_ERROR_NOT_SUPPORTED;
}
#endif
