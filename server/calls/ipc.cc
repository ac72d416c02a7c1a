// Interprocess memory and event handles (cuIpcGetMemHandle, cuIpcOpenMemHandle,
// cuIpcCloseMemHandle, cuIpcGetEventHandle, cuIpcOpenEventHandle), and the export data of
// pool allocations (cuMemPoolExportPointer, cuMemPoolImportPointer), between sessions of one
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

#include "server/session/dispatch.h"

namespace cuwire::server {
namespace {

using HandleBytes = std::array<char, sizeof(CUipcMemHandle::reserved)>;
static_assert(sizeof(CUipcEventHandle::reserved) == sizeof(HandleBytes));
static_assert(sizeof(CUmemPoolPtrExportData::reserved) == sizeof(HandleBytes));

// What a handle's bytes name.
enum class Kind { kMemory, kEvent, kPoolPointer };

template <typename H>
HandleBytes bytes_of(const H& h) {
  HandleBytes b;
  std::memcpy(b.data(), h.reserved, b.size());
  return b;
}

// The handles this server made, with the tenant of the session that made each. A handle is
// the backend's own bytes, untouched, so that a relay's upstream server can check it too.
struct Exported {
  std::string tenant;
  const SessionContext* owner;
  CUdeviceptr base;
};
// Handles of each kind by their bytes.
using Key = std::pair<Kind, HandleBytes>;
struct Registry {
  std::mutex mu;
  std::map<Key, Exported> handles;  // guarded by mu
};
Registry& registry() {
  static Registry* r = new Registry();  // leaked: sessions may end during static destruction
  return *r;
}

// Whether `key` is a handle this server made for a session of `tenant`; *base gets the
// address of the memory it names.
bool may_open(const Key& key, const std::string& tenant, CUdeviceptr* base = nullptr) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.handles.find(key);
  if (it == r.handles.end() || it->second.tenant != tenant) return false;
  if (base) *base = it->second.base;
  return true;
}

void remember(const Key& key, const SessionContext& cx, CUdeviceptr base) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.handles[key] = Exported{cx.ipc_tenant(), &cx, base};
}

// in: u64 dptr. out: the handle `get` makes of the allocation there (Data: its 64 bytes),
// remembered as a handle of `kind`.
template <typename Data>
CUresult export_allocation(SessionContext& cx, ArgReader& in, ReplyWriter& out, Kind kind,
                           CUresult (DriverApi::*get)(Data*, CUdeviceptr)) {
  CUdeviceptr p = 0;
  if (!in.get(&p) || !in.at_end()) return in.malformed();
  // Only the base of an allocation of this session: never memory it opened from another.
  if (!cx.is_allocation_base(p)) return CUDA_ERROR_INVALID_VALUE;
  Data d{};
  if (CUresult e = (cx.backend().*get)(&d, p)) return e;
  remember({kind, bytes_of(d)}, cx, p);
  out.put(d);
  return CUDA_SUCCESS;
}

}  // namespace

void ipc_forget(const SessionContext* owner, CUdeviceptr base) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  for (auto it = r.handles.begin(); it != r.handles.end();) {
    const bool gone = it->second.owner == owner &&
                      (base == 0 || (it->first.first != Kind::kEvent && it->second.base == base));
    it = gone ? r.handles.erase(it) : std::next(it);
  }
}

// in: u64 dptr. out: the 64-byte handle.
CUresult custom_cuIpcGetMemHandle(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return export_allocation(cx, in, out, Kind::kMemory, &DriverApi::cuIpcGetMemHandle);
}

// The importing session's view of memory the backend just opened at p for it: the whole
// allocation, recorded as an import (`pool`: a pool's, see SessionContext::on_import), or undone
// with `undo` when p is not an allocation's base. out: u64 dptr, u64 bytes.
template <typename Undo>
CUresult opened(SessionContext& cx, CUdeviceptr p, bool pool, Undo&& undo, ReplyWriter& out) {
  CUdeviceptr base = 0;
  size_t size = 0;
  if (CUresult e = cx.backend().cuMemGetAddressRange_v2(&base, &size, p);
      e != CUDA_SUCCESS || base != p) {
    undo();
    return e != CUDA_SUCCESS ? e : CUDA_ERROR_INVALID_VALUE;
  }
  cx.on_import(p, size, pool);
  out.put(static_cast<uint64_t>(p));
  out.put(static_cast<uint64_t>(size));
  return CUDA_SUCCESS;
}

// in: the 64-byte handle, u32 flags. out: u64 dptr, u64 bytes.
CUresult custom_cuIpcOpenMemHandle_v2(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  CUipcMemHandle h{};
  uint32_t flags = 0;
  if (!in.get(&h) || !in.get(&flags) || !in.at_end()) return in.malformed();
  // One this server made for a session of this tenant, whose memory is still allocated.
  if (!may_open({Kind::kMemory, bytes_of(h)}, cx.ipc_tenant())) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr p = 0;
  if (CUresult e = cx.backend().cuIpcOpenMemHandle_v2(&p, h, flags)) return e;
  return opened(
      cx, p, false, [&] { cx.backend().cuIpcCloseMemHandle(p); }, out);
}

// in: u64 dptr, a pointer cuIpcOpenMemHandle gave this session. out: u32 opens of it left
// (0: the memory is no longer mapped in the session).
CUresult custom_cuIpcCloseMemHandle(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  CUdeviceptr p = 0;
  if (!in.get(&p) || !in.at_end()) return in.malformed();
  uint32_t left = 0;
  if (!cx.drop_import(p, &left)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = cx.backend().cuIpcCloseMemHandle(p)) return e;
  out.put(left);
  return CUDA_SUCCESS;
}

// in: u64 event id (an event made with CU_EVENT_INTERPROCESS). out: the 64-byte handle.
CUresult custom_cuIpcGetEventHandle(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t id = 0;
  CUevent ev = nullptr;
  if (CUresult e = in.get_only_handle(cx, HandleKind::kEvent, true, &id, &ev)) return e;
  if (!ev) return CUDA_ERROR_INVALID_HANDLE;
  CUipcEventHandle h{};
  if (CUresult e = cx.backend().cuIpcGetEventHandle(&h, ev)) return e;
  remember({Kind::kEvent, bytes_of(h)}, cx, 0);
  out.put(h);
  return CUDA_SUCCESS;
}

// in: the 64-byte handle. out: u64 id of the session's new event, which shares the
// exporter's records.
CUresult custom_cuIpcOpenEventHandle(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  CUipcEventHandle h{};
  if (!in.get(&h) || !in.at_end()) return in.malformed();
  if (!may_open({Kind::kEvent, bytes_of(h)}, cx.ipc_tenant())) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = cx.check_room(HandleKind::kEvent)) return e;
  CUevent ev = nullptr;
  if (CUresult e = cx.backend().cuIpcOpenEventHandle(&ev, h)) return e;
  out.put(cx.export_handle(HandleKind::kEvent, ev));
  return CUDA_SUCCESS;
}

// in: u64 dptr, the base of a stream-ordered allocation of the session's. out: the 64-byte
// export data (the backend refuses memory of a pool not made with POSIX descriptor handles).
CUresult custom_cuMemPoolExportPointer(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return export_allocation(cx, in, out, Kind::kPoolPointer, &DriverApi::cuMemPoolExportPointer);
}

// in: u64 pool id (a pool the session imported), the 64-byte export data. out: u64 dptr,
// u64 bytes: the session may use the memory until it frees the pointer.
CUresult custom_cuMemPoolImportPointer(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t pool_id = 0;
  CUmemPoolPtrExportData d{};
  if (!in.get(&pool_id) || !in.get(&d) || !in.at_end()) return in.malformed();
  CUmemoryPool pool = nullptr;
  if (CUresult e = cx.lookup_owned(HandleKind::kMemoryPool, pool_id, &pool)) return e;
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  // A backend that tells an import from the allocation by context (the sim, a relay's
  // upstream server) ends the import at the importer's free, and never hands the address
  // out again. The driver runs every session in the server's one process, which exported the
  // allocation: whether it imports it apart is not known (no GPU was lent to find out), and if
  // not, the importer's free would free the exporter's allocation and the exporter's free
  // would leave the import naming an address the driver may give another session next.
  if (!cx.backend_keeps_imports_apart()) return CUDA_ERROR_NOT_SUPPORTED;
  // Data this server made for a session of this tenant, whose memory is still allocated and
  // which this session has not imported yet; the backend checks that it is memory of the pool
  // the import shows.
  CUdeviceptr exported = 0;
  if (!may_open({Kind::kPoolPointer, bytes_of(d)}, cx.ipc_tenant(), &exported) ||
      cx.has_import(exported)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUdeviceptr p = 0;
  if (CUresult e = cx.backend().cuMemPoolImportPointer(&p, pool, &d)) return e;
  return opened(
      cx, p, true, [&] { cx.backend().cuMemFree_v2(p); }, out);
}

}  // namespace cuwire::server
