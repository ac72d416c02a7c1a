// Driver functions answered on the client without a round trip.

#include <cuda.h>

#include <algorithm>
#include <cstring>

#include "connection.h"
#include "error_table.h"
#include "proc_table.h"

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

CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  using cuwire::client::kProcTable;
  using cuwire::client::kProcTableSize;
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  const cuwire::client::ProcEntry* best = nullptr;
  bool too_new = false;
  for (size_t i = 0; i < kProcTableSize; ++i) {
    const auto& e = kProcTable[i];
    if (std::strcmp(e.name, symbol) != 0) continue;
    if (e.since > cudaVersion) {
      too_new = true;
      continue;
    }
    if (!best || e.since > best->since) best = &e;
  }
  if (!best) {
    if (status) {
      *status = too_new ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                        : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = best->fn;
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetExportTable(const void** ppExportTable, const CUuuid* pExportTableId) {
  if (!ppExportTable || !pExportTableId) return CUDA_ERROR_INVALID_VALUE;
  *ppExportTable = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // extern "C"
