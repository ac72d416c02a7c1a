// Interprocess memory and event handles (cuIpcGetMemHandle, cuIpcOpenMemHandle,
// cuIpcCloseMemHandle, cuIpcGetEventHandle, cuIpcOpenEventHandle) between sessions of one
// tenant. An event handle is kept until the exporting session ends; the backend refuses one
// whose event was destroyed. The backend's handle names the memory; the server keeps each
// handle it made with the exporting session's tenant until that memory is freed, so a session
// of another tenant, a handle made up or altered, or one whose memory is gone is refused
// before the backend sees it. The importing session may then use the memory like its own
// allocation until it closes the handle; it never frees it. Handles do not outlive the server
// process.

#include <cuda.h>

#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "dispatch.h"

namespace cuwire::server {
namespace {

using HandleBytes = std::array<char, sizeof(CUipcMemHandle::reserved)>;
static_assert(sizeof(CUipcEventHandle::reserved) == sizeof(HandleBytes));

template <typename H>
HandleBytes bytes_of(const H& h) {
  HandleBytes b;
  std::memcpy(b.data(), h.reserved, b.size());
  return b;
}

// Whether `key` is a handle this server made for a session of `tenant`.
bool may_open(const std::pair<bool, HandleBytes>& key, const std::string& tenant);

// The handles this server made, with the tenant of the session that made each. A handle is
// the backend's own bytes, untouched, so that a relay's upstream server can check it too.
struct Exported {
  std::string tenant;
  const CallContext* owner;
  CUdeviceptr base;
};
// Memory and event handles, each kind by its bytes.
using Key = std::pair<bool, HandleBytes>;  // (an event's, the bytes)
struct Registry {
  std::mutex mu;
  std::map<Key, Exported> handles;  // guarded by mu
};
Registry& registry() {
  static Registry* r = new Registry();  // leaked: sessions may end during static destruction
  return *r;
}

bool may_open(const Key& key, const std::string& tenant) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.handles.find(key);
  return it != r.handles.end() && it->second.tenant == tenant;
}

void remember(const Key& key, const CallContext& cx, CUdeviceptr base) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.handles[key] = Exported{cx.ipc_tenant(), &cx, base};
}

}  // namespace

void ipc_forget(const CallContext* owner, CUdeviceptr base) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  for (auto it = r.handles.begin(); it != r.handles.end();) {
    const bool gone = it->second.owner == owner && (base == 0 || (!it->first.first && it->second.base == base));
    it = gone ? r.handles.erase(it) : std::next(it);
  }
}

// in: u64 dptr. out: the 64-byte handle.
CUresult custom_cuIpcGetMemHandle(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  CUdeviceptr p = 0;
  if (!in.get(&p) || !in.at_end()) return in.malformed();
  // Only the base of an allocation of this session: never memory it opened from another.
  if (p == 0 || cx.check_free(p) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  CUipcMemHandle h{};
  if (CUresult e = cx.api().cuIpcGetMemHandle(&h, p)) return e;
  remember({false, bytes_of(h)}, cx, p);
  out.put(h);
  return CUDA_SUCCESS;
}

// in: the 64-byte handle, u32 flags. out: u64 dptr, u64 bytes.
CUresult custom_cuIpcOpenMemHandle_v2(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  CUipcMemHandle h{};
  uint32_t flags = 0;
  if (!in.get(&h) || !in.get(&flags) || !in.at_end()) return in.malformed();
  // One this server made for a session of this tenant, whose memory is still allocated.
  if (!may_open({false, bytes_of(h)}, cx.ipc_tenant())) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr p = 0;
  if (CUresult e = cx.api().cuIpcOpenMemHandle_v2(&p, h, flags)) return e;
  CUdeviceptr base = 0;
  size_t size = 0;
  if (CUresult e = cx.api().cuMemGetAddressRange_v2(&base, &size, p); e != CUDA_SUCCESS || base != p) {
    cx.api().cuIpcCloseMemHandle(p);
    return e != CUDA_SUCCESS ? e : CUDA_ERROR_INVALID_VALUE;
  }
  cx.on_import(p, size);
  out.put(static_cast<uint64_t>(p));
  out.put(static_cast<uint64_t>(size));
  return CUDA_SUCCESS;
}

// in: u64 dptr, a pointer cuIpcOpenMemHandle gave this session. out: u32 opens of it left
// (0: the memory is no longer mapped in the session).
CUresult custom_cuIpcCloseMemHandle(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  CUdeviceptr p = 0;
  if (!in.get(&p) || !in.at_end()) return in.malformed();
  uint32_t left = 0;
  if (!cx.drop_import(p, &left)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = cx.api().cuIpcCloseMemHandle(p)) return e;
  out.put(left);
  return CUDA_SUCCESS;
}

// in: u64 event id (an event made with CU_EVENT_INTERPROCESS). out: the 64-byte handle.
CUresult custom_cuIpcGetEventHandle(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t id = 0;
  if (!in.get(&id) || !in.at_end()) return in.malformed();
  CUevent ev = nullptr;
  if (CUresult e = cx.lookup_owned(HandleKind::kEvent, id, &ev)) return e;
  if (!ev) return CUDA_ERROR_INVALID_HANDLE;
  CUipcEventHandle h{};
  if (CUresult e = cx.api().cuIpcGetEventHandle(&h, ev)) return e;
  remember({true, bytes_of(h)}, cx, 0);
  out.put(h);
  return CUDA_SUCCESS;
}

// in: the 64-byte handle. out: u64 id of the session's new event, which shares the
// exporter's records.
CUresult custom_cuIpcOpenEventHandle(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  CUipcEventHandle h{};
  if (!in.get(&h) || !in.at_end()) return in.malformed();
  if (!may_open({true, bytes_of(h)}, cx.ipc_tenant())) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = cx.check_room(HandleKind::kEvent)) return e;
  CUevent ev = nullptr;
  if (CUresult e = cx.api().cuIpcOpenEventHandle(&ev, h)) return e;
  out.put(cx.export_handle(HandleKind::kEvent, ev));
  return CUDA_SUCCESS;
}

}  // namespace cuwire::server
