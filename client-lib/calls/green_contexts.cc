// Green contexts: creation and destruction (one round trip each, which also gives the green
// context's CUcontext), the CUcontext answered locally, and SM splits. The server keeps the
// driver's SM resources; the client's copies name them (protocol/wire_formats.h: ResourceRef).

#include <cuda.h>

#include <algorithm>
#include <vector>

#include "client-lib/core/client_call.h"
#include "client-lib/core/client_state.h"
#include "generated/call_ids.h"
#include "protocol/wire_formats.h"

namespace cuwire::client {
namespace {

uint64_t id_of(const void* h) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(h)); }
template <typename H>
H handle_of(uint64_t id) {
  return reinterpret_cast<H>(static_cast<uintptr_t>(id));
}

}  // namespace
}  // namespace cuwire::client

using namespace cuwire;
using namespace cuwire::client;

extern "C" {

CUresult CUDAAPI cuGreenCtxCreate(CUgreenCtx* ph, CUdevResourceDesc desc, CUdevice dev,
                                  unsigned int flags) {
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuGreenCtxCreate);
  w.put(formats::GreenContextArgs{id_of(desc), static_cast<int32_t>(dev), flags});
  formats::GreenContextIds ids{};
  if (CUresult e = w.call_for(&ids)) return e;
  add_green_context(ids.green_id, ids.ctx_id, dev);
  *ph = handle_of<CUgreenCtx>(ids.green_id);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGreenCtxDestroy(CUgreenCtx g) {
  uint64_t ctx_id = 0;
  if (!g || !green_context(id_of(g), &ctx_id)) return CUDA_ERROR_INVALID_CONTEXT;
  ArgWriter w(CallId::k_cuGreenCtxDestroy);
  w.put(id_of(g));
  if (CUresult e = w.call_result()) return e;
  remove_green_context(id_of(g));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxFromGreenCtx(CUcontext* pctx, CUgreenCtx g) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  uint64_t ctx_id = 0;
  if (!g || !green_context(id_of(g), &ctx_id)) return CUDA_ERROR_INVALID_CONTEXT;
  *pctx = handle_of<CUcontext>(ctx_id);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevSmResourceSplitByCount(CUdevResource* result, unsigned int* nb_groups,
                                             const CUdevResource* input, CUdevResource* remaining,
                                             unsigned int use_flags, unsigned int min_count) {
  if (!nb_groups || !input) return CUDA_ERROR_INVALID_VALUE;
  formats::SplitArgs a{};
  a.groups = result ? *nb_groups : 0;
  a.use_flags = use_flags;
  a.min_count = min_count;
  a.want_result = result != nullptr;
  a.want_remaining = remaining != nullptr;
  ArgWriter w(CallId::k_cuDevSmResourceSplitByCount);
  w.put(a);
  w.put(*input);
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  uint32_t n = 0;
  r.get_array(&n, 1);
  if (CUresult e = r.finish()) return e;
  // The server never makes more groups than there was room for.
  if (result && n > *nb_groups) return CUDA_ERROR_UNKNOWN;
  if (result) r.get_array(result, n);
  if (remaining) r.get_array(remaining, 1);
  if (CUresult e = r.finish()) return e;
  *nb_groups = n;
  return CUDA_SUCCESS;
}

}  // extern "C"
