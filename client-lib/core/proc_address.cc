// cuGetProcAddress: how static cudart (and anything else) finds every driver entry point.
// Answers depend on the CUDA version the caller was built for (the newest variant not newer
// than it) and on the per-thread default stream flag (the _ptds/_ptsz variant).

#include <cuda.h>

#include <cstring>

#include "client-lib/core/proc_table.h"
#include "client-lib/core/trace.h"

// cuda.h turns cuGetProcAddress into cuGetProcAddress_v2; the old four-argument function of
// CUDA 11.3 keeps its own name in the library's ABI.
#undef cuGetProcAddress

extern "C" CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                             cuuint64_t flags);

namespace {

CUresult lookup(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                CUdriverProcAddressQueryResult* status) {
  using cuwire::client::kProcTable;
  using cuwire::client::kProcTableSize;
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  if (flags & ~uint64_t{CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM}) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (std::strcmp(symbol, "cuGetProcAddress") == 0 && cudaVersion < 12000) {
    *pfn = reinterpret_cast<void*>(&cuGetProcAddress);
    if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
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
  const bool ptds = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  *pfn = ptds ? best->fn_ptds : best->fn;
  // CUWIRE_TRACE: hand-written functions are handed out behind a thunk that traces them.
  if (cuwire::client::g_trace && best->traced) *pfn = ptds ? best->traced_ptds : best->traced;
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  return lookup(symbol, pfn, cudaVersion, flags, status);
}

CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                  cuuint64_t flags) {
  return lookup(symbol, pfn, cudaVersion, flags, nullptr);
}

}  // extern "C"
