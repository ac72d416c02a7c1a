// cuDeviceGetAttribute answered from a per-device table fetched in one round trip
// (protocol/wire_formats.h): static cudart alone reads over a hundred attributes at start-up,
// which would otherwise be as many round trips.

#include <cuda.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "client-lib/core/call_stats.h"
#include "client-lib/core/client_call.h"
#include "client-lib/core/client_state.h"
#include "generated/call_ids.h"
#include "protocol/wire_formats.h"

namespace cuwire::client {
namespace {

struct AttributeTables {
  std::mutex mu;
  std::unordered_map<CUdevice, std::vector<formats::AttributeValue>> by_device;  // guarded by mu
};

AttributeTables& tables() {
  static AttributeTables* t = new AttributeTables();  // leaked: used from atexit handlers
  return *t;
}

CUresult fetch(CUdevice dev, std::vector<formats::AttributeValue>* out) {
  ArgWriter w(CallId::k_cuDeviceGetAttribute);
  w.put<int32_t>(dev);
  OutReader r;
  if (CUresult rc = w.call(&r)) return rc;
  uint32_t count = 0;
  r.get_array(&count, 1);
  if (count > formats::kMaxAttributes) return CUDA_ERROR_UNKNOWN;
  out->resize(count);
  r.get_array(out->data(), count);
  return r.finish();
}

}  // namespace

void reset_device_attributes() {
  AttributeTables& t = tables();
  std::lock_guard lock(t.mu);
  t.by_device.clear();
}

}  // namespace cuwire::client

extern "C" CUresult CUDAAPI cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  using namespace cuwire::client;
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  AttributeTables& t = tables();
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock lock(t.mu);
  auto it = t.by_device.find(dev);
  const bool cached = it != t.by_device.end();
  if (!cached) {
    // Fetched outside the lock: a round trip must not block other threads' lookups.
    lock.unlock();
    std::vector<cuwire::formats::AttributeValue> table;
    if (CUresult rc = fetch(dev, &table)) return rc;
    lock.lock();
    it = t.by_device.emplace(dev, std::move(table)).first;
  }
  const auto& table = it->second;
  if (cached) {
    // Answered here (the stats table's lock is only ever taken last); a fetch counted as the
    // round trip it was.
    record_call(static_cast<uint32_t>(cuwire::CallId::k_cuDeviceGetAttribute),
                static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now() - t0)
                                          .count()),
                CallKind::kLocal);
  }
  if (attrib < 0 || static_cast<size_t>(attrib) >= table.size()) return CUDA_ERROR_INVALID_VALUE;
  if (table[attrib].result != CUDA_SUCCESS) return static_cast<CUresult>(table[attrib].result);
  *pi = table[attrib].value;
  // The host sees managed memory through a mirror kept coherent at synchronisation points
  // (managed_memory.h), not concurrently with running kernels, whatever the device can do.
  if (attrib == CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS) *pi = 0;
  return CUDA_SUCCESS;
}
