// Launch and stream attributes: only values a session may set reach the backend. Attributes that
// carry a handle (programmatic and completion events) or an address the driver writes
// (device-updatable kernel nodes) are not supported through the server.

#include <cuda.h>

#include "server/session/dispatch.h"

namespace cuwire::server {

CUresult check_attribute(SessionContext& cx, CUlaunchAttributeID id,
                         const CUlaunchAttributeValue& v, bool launch) {
  switch (id) {
    case CU_LAUNCH_ATTRIBUTE_IGNORE:
    case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
      return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
    case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      return launch ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW: {
      // A cache hint over memory: it must be the session's.
      const CUaccessPolicyWindow& w = v.accessPolicyWindow;
      if (w.num_bytes == 0) return CUDA_SUCCESS;
      return cx.check_range(reinterpret_cast<CUdeviceptr>(w.base_ptr), w.num_bytes);
    }
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

CUresult verify_stream_attribute(SessionContext& cx, CUstream, CUstreamAttrID attr,
                                 const CUstreamAttrValue* value) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  return check_attribute(cx, attr, *value, /*launch=*/false);
}

}  // namespace cuwire::server
