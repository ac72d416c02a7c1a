// Runs of device-memory bytes in a frame's bulk. A HostCall frame brings a host function the
// current bytes of the memory it may read (client-lib/calls/managed_memory.h: the host mirrors of
// managed memory); its HostCallDone takes back the bytes it wrote. Each run is a head
// {u64 device address, u64 length} in host byte order (client and server share a little-endian
// ABI), then `length` bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

namespace cuwire {

struct MemoryRunHead {
  uint64_t device = 0;
  uint64_t bytes = 0;
};
static_assert(sizeof(MemoryRunHead) == 16, "the run layout is part of the protocol");

// Calls fn(device, bytes) for each run in order; false (after the runs before it) when `bulk`
// is not a whole sequence of runs, or fn returns false.
template <typename F>
bool for_each_memory_run(std::span<const uint8_t> bulk, F&& fn) {
  while (!bulk.empty()) {
    MemoryRunHead h;
    if (bulk.size() < sizeof h) return false;
    std::memcpy(&h, bulk.data(), sizeof h);
    bulk = bulk.subspan(sizeof h);
    if (h.bytes > bulk.size()) return false;
    if (!fn(h.device, bulk.first(h.bytes))) return false;
    bulk = bulk.subspan(h.bytes);
  }
  return true;
}

}  // namespace cuwire
