// Shareable handles of physical memory (cuMemExportToShareableHandle,
// cuMemImportFromShareableHandle) between sessions of one tenant: memMapIPCDrv's and NCCL's
// way of mapping one process's cuMemCreate memory in another. The backend exports the handle
// as a POSIX file descriptor held here (the cuda backend's driver makes a real one, the sim
// one of its own); the client gets an id and a 32-byte secret, which it hands to the app in a
// memfd (client-lib/vmm.cc). An import with both, from a session of the exporter's tenant,
// gets the importing session its own handle of the same memory from the backend; memory
// stays charged to the exporting session, which created it. An export lasts while the
// exporting session holds the handle: once it released it (or ended), an import is refused,
// where CUDA would keep the memory for the descriptor.

#include <cuda.h>
#include <sys/random.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "dispatch.h"

namespace cuwire::server {
namespace {

using Secret = std::array<uint8_t, 32>;

struct Export {
  std::string tenant;
  const CallContext* owner;
  uint64_t handle;  // the exporting session's backend handle
  int fd;           // the backend's shareable handle, closed with the export
  Secret secret;
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

}  // namespace

void shareable_forget(const CallContext* owner, uint64_t handle, bool all) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  for (auto it = r.exports.begin(); it != r.exports.end();) {
    if (it->second.owner == owner && (all || it->second.handle == handle)) {
      close(it->second.fd);
      it = r.exports.erase(it);
    } else {
      ++it;
    }
  }
}

// in: u64 handle, u64 flags. out: u64 id, 32-byte secret.
CUresult custom_cuMemExportToShareableHandle(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t h = 0, flags = 0;
  if (!in.get(&h) || !in.get(&flags) || !in.at_end()) return in.malformed();
  auto held = cx.vmm().handles.find(h);
  if (held == cx.vmm().handles.end() || held->second.refs == 0 || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Export e{cx.ipc_tenant(), &cx, h, -1, {}};
  if (!random_secret(&e.secret)) return CUDA_ERROR_OPERATING_SYSTEM;
  Registry& r = registry();
  {
    std::lock_guard lock(r.mu);
    if (r.exports.size() >= kMaxExports) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  int fd = -1;
  if (CUresult rc = cx.api().cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)) {
    return rc;
  }
  if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
  e.fd = fd;
  uint64_t id = 0;
  {
    std::lock_guard lock(r.mu);
    id = r.next_id++;
    r.exports.emplace(id, e);
  }
  out.put(id);
  out.put_bytes(e.secret.data(), e.secret.size());
  return CUDA_SUCCESS;
}

// in: u64 id, 32-byte secret. out: u64 handle (the importing session's own reference).
CUresult custom_cuMemImportFromShareableHandle(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t id = 0;
  Secret secret{};
  if (!in.get(&id) || !in.get(&secret) || !in.at_end()) {
    return in.malformed();
  }
  if (cx.vmm().handles.size() >= (size_t{1} << 16)) return CUDA_ERROR_OUT_OF_MEMORY;
  Registry& r = registry();
  std::lock_guard lock(r.mu);  // the export stays while the backend imports it
  auto it = r.exports.find(id);
  // A wrong secret looks like no export at all; so does another tenant's.
  if (it == r.exports.end() || it->second.secret != secret || it->second.tenant != cx.ipc_tenant()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUmemGenericAllocationHandle h = 0;
  if (CUresult rc = cx.api().cuMemImportFromShareableHandle(
          &h, reinterpret_cast<void*>(static_cast<intptr_t>(it->second.fd)),
          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
    return rc;
  }
  // Charged to the exporter; a handle the session holds already (the sim names one memory by
  // one handle) gains a reference.
  auto [held, fresh] = cx.vmm().handles.try_emplace(h, CallContext::VmmState::Handle{{}, 1, 0});
  if (!fresh) ++held->second.refs;
  out.put(static_cast<uint64_t>(h));
  return CUDA_SUCCESS;
}

}  // namespace cuwire::server
