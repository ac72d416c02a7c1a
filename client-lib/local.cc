// Driver functions answered on the client without a round trip.

#include <cuda.h>

#include <algorithm>
#include <cstring>

#include "connection.h"
#include "error_table.h"

extern "C" {

// Marks this library as cuwire's, so that gpu-server never loads it as the NVIDIA driver.
extern const char cuwire_client_library[];
const char cuwire_client_library[] = "cuwire";

CUresult CUDAAPI cuDriverGetVersion(int* driverVersion) {
  if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
  // The API version this library implements: the cuda.h it was built against.
  *driverVersion = CUDA_VERSION;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char** pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  auto* end = cuwire::kErrorTable + cuwire::kErrorTableSize;
  auto* it = std::lower_bound(cuwire::kErrorTable, end, static_cast<int>(error),
                              [](const cuwire::ErrorInfo& e, int c) { return e.code < c; });
  if (it == end || it->code != static_cast<int>(error)) {
    *pStr = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pStr = it->name;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char** pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  auto* end = cuwire::kErrorTable + cuwire::kErrorTableSize;
  auto* it = std::lower_bound(cuwire::kErrorTable, end, static_cast<int>(error),
                              [](const cuwire::ErrorInfo& e, int c) { return e.code < c; });
  if (it == end || it->code != static_cast<int>(error)) {
    *pStr = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pStr = it->message;
  return CUDA_SUCCESS;
}

}  // extern "C"
