// 3D copies between contexts (cuMemcpy3DPeer): with unified addressing every device pointer
// names its device, so a peer copy is the plain 3D copy once both contexts are known to be
// this process's; the server executes it as cuMemcpy3D (protocol/wire_formats.h, 2D/3D copies).

#include <cuda.h>

#include "client-lib/core/client_state.h"
#include "protocol/copy_descriptors.h"

namespace {

CUresult to_plain(const CUDA_MEMCPY3D_PEER* p, CUDA_MEMCPY3D* c) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  cuwire::client::ContextInfo info;
  for (CUcontext ctx : {p->srcContext, p->dstContext}) {
    if (ctx && !cuwire::client::context_info(
                   static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ctx)), &info)) {
      return CUDA_ERROR_INVALID_CONTEXT;
    }
  }
  *c = CUDA_MEMCPY3D{};
  cuwire::copy_3d_fields(*p, c);
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* pCopy) {
  CUDA_MEMCPY3D c;
  if (CUresult e = to_plain(pCopy, &c)) return e;
  return cuMemcpy3D_v2(&c);
}

CUresult CUDAAPI cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* pCopy, CUstream hStream) {
  CUDA_MEMCPY3D c;
  if (CUresult e = to_plain(pCopy, &c)) return e;
  return cuMemcpy3DAsync_v2(&c, hStream);
}

}  // extern "C"
