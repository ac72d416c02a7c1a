// Kinds of driver handles that cross the wire as 64-bit ids. The generator maps each cuda.h
// handle type to one of these (protocol/gen/generate.py, HANDLE_KINDS).
#pragma once

#include <cstdint>

namespace cuwire {

enum class HandleKind : uint8_t {
  kContext,
  kModule,
  kFunction,
  kLibrary,
  kKernel,
  kArray,
  kMipmappedArray,
  kTexref,
  kSurfref,
  kEvent,
  kStream,
  kGraphicsResource,
  kExternalMemory,
  kExternalSemaphore,
  kGraph,
  kGraphNode,
  kGraphExec,
  kMemoryPool,
  kUserObject,
  kGraphDeviceNode,
  kAsyncCallback,
  kGreenContext,
  kLinkState,
  kDevResourceDesc,
  kLogsCallback,
};

// Handle ids are opaque to the app but must never be mistaken for one another: ids the client
// mints (streams, events, ... created without a round trip) and ids the server assigns (handles
// a call returns) come from disjoint ranges.
inline constexpr uint64_t kClientIdBase = uint64_t{1} << 44;
inline constexpr uint64_t kServerIdBase = uint64_t{2} << 44;
inline constexpr uint64_t kIdRange = uint64_t{1} << 44;

inline bool is_client_id(uint64_t id) {
  return id >= kClientIdBase && id < kClientIdBase + kIdRange;
}

}  // namespace cuwire
