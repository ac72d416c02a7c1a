// Sizes of the values behind `void*` parameters whose type depends on another argument, for
// COUNT expressions in the manifest (evaluated by both the client stub and the server).
#pragma once

#include <cuda.h>

#include <cstddef>

namespace cuwire {

// cuMemPoolGetAttribute / cuMemPoolSetAttribute: int for the reuse policies, cuuint64_t for
// sizes. An attribute this build does not know gets 8 bytes; the driver then rejects it.
constexpr size_t mempool_attr_bytes(CUmemPool_attribute attr) {
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      return sizeof(int);
    default:
      return sizeof(cuuint64_t);
  }
}

}  // namespace cuwire
