// Devices as the session sees them, and their attributes.

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "protocol/wire_formats.h"
#include "server/backend/backend.h"
#include "server/session/dispatch.h"
#include "server/tenancy/sm_partition.h"

namespace cuwire::server {

// ---------------------------------------------------------------------------------------------
// Devices as the session sees them (SessionContext::set_devices): a CUdevice is an ordinal.

CUresult custom_cuDeviceGetCount(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  if (!in.at_end()) return in.malformed();
  int count = 0;
  if (CUresult e = cx.backend().cuDeviceGetCount(&count)) return e;
  count = cx.device_count(count);
  out.put_bytes(&count, sizeof count);
  return CUDA_SUCCESS;
}

CUresult custom_cuDeviceGet(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  int ordinal = 0;
  if (!in.get(&ordinal) || !in.at_end()) return in.malformed();
  int count = 0;
  if (CUresult e = cx.backend().cuDeviceGetCount(&count)) return e;
  if (ordinal < 0 || ordinal >= cx.device_count(count)) return CUDA_ERROR_INVALID_DEVICE;
  CUdevice dev = ordinal;
  if (CUresult e = cx.device_in(&dev)) return e;
  CUdevice got = 0;
  if (CUresult e = cx.backend().cuDeviceGet(&got, dev)) return e;
  if (CUresult e = cx.device_out(&got)) return e;
  out.put_bytes(&got, sizeof got);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Device attributes: the whole table at once.

CUresult custom_cuDeviceGetAttribute(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  CUdevice dev = 0;
  if (CUresult e = in.get_only_device(cx, &dev)) return e;
  // Asking for an attribute every device has tells an invalid device from an unknown attribute.
  int probe = 0;
  if (CUresult e = cx.backend().cuDeviceGetAttribute(&probe, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev)) {
    return e;
  }
  static_assert(CU_DEVICE_ATTRIBUTE_MAX <= formats::kMaxAttributes);
  std::vector<formats::AttributeValue> table(CU_DEVICE_ATTRIBUTE_MAX);
  for (int a = 0; a < CU_DEVICE_ATTRIBUTE_MAX; ++a) {
    int v = 0;
    CUresult rc = cx.backend().cuDeviceGetAttribute(&v, static_cast<CUdevice_attribute>(a), dev);
    table[a] = {rc == CUDA_SUCCESS ? v : 0, static_cast<int32_t>(rc)};
  }
  // A tenant with SMs of its own sees them as the device's: grids sized by the SM count (a
  // cooperative launch's) fit its partition.
  if (const SmShare* share = cx.partition(dev)) {
    table[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT].value = static_cast<int32_t>(share->sms);
  }
  out.put(static_cast<uint32_t>(table.size()));
  out.put_bytes(table.data(), table.size() * sizeof(formats::AttributeValue));
  return CUDA_SUCCESS;
}

}  // namespace cuwire::server
