// Shareable handles (POSIX file descriptors) of physical memory (cuMemExportToShareableHandle,
// cuMemImportFromShareableHandle) and of memory pools (cuMemPoolExportToShareableHandle,
// cuMemPoolImportFromShareableHandle) between sessions of one tenant: memMapIPCDrv's, NCCL's
// and streamOrderedAllocationIPC's way of reaching one process's memory from another. The
// backend exports the handle as a POSIX file descriptor held here (the cuda backend's driver
// makes a real one, the sim one of its own); the client gets an id and a 32-byte secret,
// which it hands to the app in a memfd (client-lib/calls/shareable.cc). An import with both, from a
// session of the exporter's tenant, gets the importing session its own handle of the same
// memory or pool from the backend. Physical memory stays charged to the tenant, once, for as
// long as any session holds a handle or mapping of it (SessionContext::SharedCharge): an exporter
// that releases its handle while an importer maps it has not given the memory back. An export
// lasts while the exporting session holds the handle or pool: once it released it (or ended),
// an import is refused, where CUDA would keep it for the descriptor.

#include <cuda.h>
#include <sys/random.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "server/session/dispatch.h"

namespace cuwire::server {
namespace {

using Secret = std::array<uint8_t, 32>;

struct Export {
  ShareableKind kind;
  std::string tenant;
  const SessionContext* owner;
  uint64_t handle;  // the exporting session's backend handle (or pool)
  int fd;           // the backend's shareable handle, closed with the export
  Secret secret;
  std::shared_ptr<SessionContext::SharedCharge> charge;  // physical memory's; null for pools
};

struct Registry {
  std::mutex mu;
  uint64_t next_id = 1;
  std::map<uint64_t, Export> exports;  // guarded by mu
};
Registry& registry() {
  static Registry* r = new Registry();  // leaked: sessions may end during static destruction
  return *r;
}

constexpr size_t kMaxExports = size_t{1} << 16;

bool random_secret(Secret* s) {
  size_t got = 0;
  while (got < s->size()) {
    const ssize_t n = getrandom(s->data() + got, s->size() - got, 0);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

// Registers the descriptor `fd` the backend exported of `handle` (taking it over) for the
// session's tenant, and answers with its id and a fresh secret.
CUresult register_export(SessionContext& cx, ShareableKind kind, uint64_t handle, int fd,
                         std::shared_ptr<SessionContext::SharedCharge> charge, ReplyWriter& out) {
  Export e{kind, cx.ipc_tenant(), &cx, handle, fd, {}, std::move(charge)};
  if (!random_secret(&e.secret)) {
    close(fd);
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  uint64_t id = 0;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    if (r.exports.size() >= kMaxExports) {
      close(fd);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    id = r.next_id++;
    r.exports.emplace(id, e);
  }
  out.put(id);
  out.put_bytes(e.secret.data(), e.secret.size());
  return CUDA_SUCCESS;
}

// Reads an import's id and secret and, when they name an export of `kind` of the session's
// tenant, calls import(export) while the export cannot go. A wrong
// secret looks like no export at all; so does another tenant's, or one of the other kind.
template <typename F>
CUresult with_export(SessionContext& cx, ShareableKind kind, ArgReader& in, F&& import) {
  uint64_t id = 0;
  Secret secret{};
  if (!in.get(&id) || !in.get(&secret) || !in.at_end()) return in.malformed();
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.exports.find(id);
  if (it == r.exports.end() || it->second.kind != kind || it->second.secret != secret ||
      it->second.tenant != cx.ipc_tenant()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return import(it->second);
}

void* os_handle(int fd) { return reinterpret_cast<void*>(static_cast<intptr_t>(fd)); }

// An export the session made of `handle` already answers again, with its id and secret: one
// descriptor per exported handle or pool, so a session's exports (and the server's descriptors
// they hold) are bounded by what it holds.
bool reply_existing(const SessionContext& cx, ShareableKind kind, uint64_t handle,
                    ReplyWriter& out) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  for (const auto& [id, e] : r.exports) {
    if (e.owner == &cx && e.kind == kind && e.handle == handle) {
      out.put(id);
      out.put_bytes(e.secret.data(), e.secret.size());
      return true;
    }
  }
  return false;
}

template <typename Pred>
void forget_where(Pred gone) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  for (auto it = r.exports.begin(); it != r.exports.end();) {
    if (gone(it->second)) {
      close(it->second.fd);
      it = r.exports.erase(it);
    } else {
      ++it;
    }
  }
}
}  // namespace

void shareable_forget(const SessionContext* owner, ShareableKind kind, uint64_t handle) {
  forget_where(
      [&](const Export& e) { return e.owner == owner && e.kind == kind && e.handle == handle; });
}

void shareable_forget_all(const SessionContext* owner) {
  forget_where([&](const Export& e) { return e.owner == owner; });
}

// in: u64 handle, u64 flags. out: u64 id, 32-byte secret.
CUresult custom_cuMemExportToShareableHandle(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t h = 0, flags = 0;
  if (!in.get(&h) || !in.get(&flags) || !in.at_end()) return in.malformed();
  auto held = cx.vmm().handles.find(h);
  if (held == cx.vmm().handles.end() || held->second.refs == 0 || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (reply_existing(cx, ShareableKind::kMemory, h, out)) return CUDA_SUCCESS;
  int fd = -1;
  if (CUresult rc = cx.backend().cuMemExportToShareableHandle(
          &fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)) {
    return rc;
  }
  if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
  return register_export(cx, ShareableKind::kMemory, h, fd, cx.share(&held->second.charge), out);
}

// in: u64 id, 32-byte secret. out: u64 handle (the importing session's own reference).
CUresult custom_cuMemImportFromShareableHandle(SessionContext& cx, ArgReader& in,
                                               ReplyWriter& out) {
  if (cx.vmm().handles.size() >= (size_t{1} << 16)) return CUDA_ERROR_OUT_OF_MEMORY;
  return with_export(cx, ShareableKind::kMemory, in, [&](const Export& e) {
    CUmemGenericAllocationHandle h = 0;
    if (CUresult rc = cx.backend().cuMemImportFromShareableHandle(
            &h, os_handle(e.fd), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
      return rc;
    }
    // Charged to the tenant once, in the export's shared charge, which this handle now holds
    // too (not in this session's own bytes); a handle the session holds already (the sim names
    // one memory by one handle) gains a reference.
    SessionContext::Charge share;
    share.shared = e.charge;
    auto [held, fresh] =
        cx.vmm().handles.try_emplace(h, SessionContext::VmmState::Handle{std::move(share), 1, 0});
    if (!fresh) ++held->second.refs;
    out.put(static_cast<uint64_t>(h));
    return CUDA_SUCCESS;
  });
}

// in: u64 pool id (one the session made). out: u64 id, 32-byte secret. The backend refuses a
// pool not made with POSIX descriptor handles.
CUresult custom_cuMemPoolExportToShareableHandle(SessionContext& cx, ArgReader& in,
                                                 ReplyWriter& out) {
  uint64_t pool_id = 0;
  CUmemoryPool pool = nullptr;
  if (CUresult e = in.get_only_handle(cx, HandleKind::kMemoryPool, true, &pool_id, &pool)) return e;
  if (!pool || cx.is_default_pool(pool_id)) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t handle = reinterpret_cast<uintptr_t>(pool);
  if (reply_existing(cx, ShareableKind::kPool, handle, out)) return CUDA_SUCCESS;
  int fd = -1;
  if (CUresult rc = cx.backend().cuMemPoolExportToShareableHandle(
          &fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)) {
    return rc;
  }
  if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
  return register_export(cx, ShareableKind::kPool, handle, fd, nullptr, out);
}

// in: u64 id, 32-byte secret. out: u64 pool id, the importing session's own pool, which shows
// the exporter's allocations (cuMemPoolImportPointer) and holds no memory.
CUresult custom_cuMemPoolImportFromShareableHandle(SessionContext& cx, ArgReader& in,
                                                   ReplyWriter& out) {
  if (CUresult e = cx.check_room(HandleKind::kMemoryPool)) return e;
  return with_export(cx, ShareableKind::kPool, in, [&](const Export& e) {
    CUmemoryPool pool = nullptr;
    if (CUresult rc = cx.backend().cuMemPoolImportFromShareableHandle(
            &pool, os_handle(e.fd), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)) {
      return rc;
    }
    out.put(cx.export_handle(HandleKind::kMemoryPool, pool));
    return CUDA_SUCCESS;
  });
}

}  // namespace cuwire::server
