// Virtual memory management through the server: every range a call names must lie in one of
// the session's reservations, every physical allocation handle must be the session's own, and
// physical memory is charged to the tenant when it is created (as every other allocation
// path is). Mappings become ranges the session may copy to and from and launch on; what lies
// between them is no memory of the session's.

#include <cuda.h>

#include <cstring>
#include <vector>

#include "server/session/dispatch.h"

namespace cuwire::server {
namespace {

constexpr size_t kMaxReservations = 4096;
constexpr size_t kMaxAccessDescs = 64;
constexpr size_t kMaxHandles = size_t{1} << 16;

bool within_reservation(const SessionContext::VmmState& v, CUdeviceptr p, size_t n) {
  auto it = v.reservations.upper_bound(p);
  if (it == v.reservations.begin() || n == 0) return false;
  --it;
  return p - it->first < it->second && n <= it->second - (p - it->first);
}

// A client's allocation properties: the Windows metadata pointer means nothing here.
CUmemAllocationProp clean(CUmemAllocationProp prop) {
  prop.win32HandleMetaData = nullptr;
  return prop;
}

}  // namespace

void vmm_reclaim(SessionContext& cx) {
  SessionContext::VmmState& v = cx.vmm();
  Backend& api = cx.backend();
  auto safely = [](auto&& f) {
    try {
      f();
    } catch (...) {
    }
  };
  // Plain pairs, not structured bindings: clang 14 (the fuzzer's compiler) cannot capture those.
  for (const auto& mapping : v.mappings)
    safely([&] { api.cuMemUnmap(mapping.first, mapping.second.size); });
  v.mappings.clear();
  for (auto& handle : v.handles) {
    for (int i = 0; i < handle.second.refs; ++i) safely([&] { api.cuMemRelease(handle.first); });
    cx.refund(&handle.second.charge);
  }
  v.handles.clear();
  for (const auto& reservation : v.reservations)
    safely([&] { api.cuMemAddressFree(reservation.first, reservation.second); });
  v.reservations.clear();
}

// in: prop, u32 option. out: u64 granularity.
CUresult custom_cuMemGetAllocationGranularity(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  CUmemAllocationProp prop{};
  uint32_t option = 0;
  if (!in.get(&prop) || !in.get(&option) || !in.at_end()) return in.malformed();
  prop = clean(prop);
  size_t g = 0;
  if (CUresult e = cx.backend().cuMemGetAllocationGranularity(
          &g, &prop, static_cast<CUmemAllocationGranularity_flags>(option)))
    return e;
  out.put(static_cast<uint64_t>(g));
  return CUDA_SUCCESS;
}

// in: u64 size, alignment, addr, flags. out: u64 ptr.
CUresult custom_cuMemAddressReserve(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t size = 0, alignment = 0, addr = 0, flags = 0;
  if (!in.get(&size) || !in.get(&alignment) || !in.get(&addr) || !in.get(&flags) || !in.at_end())
    return in.malformed();
  if (cx.vmm().reservations.size() >= kMaxReservations) return CUDA_ERROR_OUT_OF_MEMORY;
  CUdeviceptr p = 0;
  if (CUresult e = cx.backend().cuMemAddressReserve(&p, size, alignment, addr, flags)) return e;
  cx.vmm().reservations[p] = size;
  out.put(static_cast<uint64_t>(p));
  return CUDA_SUCCESS;
}

// in: u64 ptr, size.
CUresult custom_cuMemAddressFree(SessionContext& cx, ArgReader& in, ReplyWriter&) {
  uint64_t p = 0, size = 0;
  if (!in.get(&p) || !in.get(&size) || !in.at_end()) return in.malformed();
  auto& r = cx.vmm().reservations;
  auto it = r.find(p);
  if (it == r.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = cx.backend().cuMemAddressFree(p, size)) return e;
  r.erase(it);
  return CUDA_SUCCESS;
}

// in: u64 size, prop, u64 flags. out: u64 handle.
CUresult custom_cuMemCreate(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t size = 0, flags = 0;
  CUmemAllocationProp prop{};
  if (!in.get(&size) || !in.get(&prop) || !in.get(&flags) || !in.at_end()) return in.malformed();
  prop = clean(prop);
  if (cx.vmm().handles.size() >= kMaxHandles) return CUDA_ERROR_OUT_OF_MEMORY;
  SessionContext::Charge charge;
  if (CUresult e = cx.precharge(CheckedSize(size), &charge)) return e;
  CUmemGenericAllocationHandle h = 0;
  if (CUresult e = cx.backend().cuMemCreate(&h, size, &prop, flags)) {
    cx.refund(&charge);
    return e;
  }
  cx.vmm().handles[h] = SessionContext::VmmState::Handle{charge, 1, 0};
  out.put(static_cast<uint64_t>(h));
  return CUDA_SUCCESS;
}

namespace {
// A physical allocation nothing holds any more: its memory is the tenant's again.
void refund_if_unheld(SessionContext& cx,
                      std::map<uint64_t, SessionContext::VmmState::Handle>::iterator it) {
  // The app's last reference: what it exported of the handle ends (server/calls/shareable.cc).
  if (it->second.refs == 0) shareable_forget(&cx, ShareableKind::kMemory, it->first);
  if (it->second.refs > 0 || it->second.maps > 0) return;
  cx.refund(&it->second.charge);
  cx.vmm().handles.erase(it);
}
}  // namespace

// in: u64 handle.
CUresult custom_cuMemRelease(SessionContext& cx, ArgReader& in, ReplyWriter&) {
  uint64_t h = 0;
  if (!in.get(&h) || !in.at_end()) return in.malformed();
  auto& handles = cx.vmm().handles;
  auto it = handles.find(h);
  if (it == handles.end() || it->second.refs == 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = cx.backend().cuMemRelease(h)) return e;
  // Still mapped, the memory is still there: charged until its last mapping goes.
  --it->second.refs;
  refund_if_unheld(cx, it);
  return CUDA_SUCCESS;
}

// in: u64 address. out: u64 handle (one more reference the app releases).
CUresult custom_cuMemRetainAllocationHandle(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t addr = 0;
  if (!in.get(&addr) || !in.at_end()) return in.malformed();
  SessionContext::VmmState& v = cx.vmm();
  auto m = v.mappings.upper_bound(addr);
  if (m == v.mappings.begin()) return CUDA_ERROR_INVALID_VALUE;
  --m;
  if (addr - m->first >= m->second.size) return CUDA_ERROR_INVALID_VALUE;
  auto held = v.handles.find(m->second.handle);
  if (held == v.handles.end()) return CUDA_ERROR_INVALID_VALUE;
  CUmemGenericAllocationHandle h = 0;
  if (CUresult e = cx.backend().cuMemRetainAllocationHandle(&h, reinterpret_cast<void*>(addr)))
    return e;
  if (h != m->second.handle) {  // not the mapping's: a backend this server does not understand
    cx.backend().cuMemRelease(h);
    return CUDA_ERROR_INVALID_VALUE;
  }
  ++held->second.refs;
  out.put(static_cast<uint64_t>(h));
  return CUDA_SUCCESS;
}

// in: u64 ptr, size, offset, handle, flags.
CUresult custom_cuMemMap(SessionContext& cx, ArgReader& in, ReplyWriter&) {
  uint64_t p = 0, size = 0, offset = 0, h = 0, flags = 0;
  if (!in.get(&p) || !in.get(&size) || !in.get(&offset) || !in.get(&h) || !in.get(&flags) ||
      !in.at_end())
    return in.malformed();
  SessionContext::VmmState& v = cx.vmm();
  auto held = v.handles.find(h);
  if (held == v.handles.end() || held->second.refs == 0 || !within_reservation(v, p, size))
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = cx.backend().cuMemMap(p, size, offset, h, flags)) return e;
  v.mappings[p] = SessionContext::VmmState::Mapping{size, h};
  ++held->second.maps;
  return CUDA_SUCCESS;
}

// in: u64 ptr, size.
CUresult custom_cuMemUnmap(SessionContext& cx, ArgReader& in, ReplyWriter&) {
  uint64_t p = 0, size = 0;
  if (!in.get(&p) || !in.get(&size) || !in.at_end()) return in.malformed();
  SessionContext::VmmState& v = cx.vmm();
  if (!within_reservation(v, p, size)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = cx.backend().cuMemUnmap(p, size)) return e;
  for (auto it = v.mappings.lower_bound(p); it != v.mappings.end() && it->first < p + size;) {
    auto held = v.handles.find(it->second.handle);
    it = v.mappings.erase(it);
    if (held != v.handles.end()) {
      --held->second.maps;
      refund_if_unheld(cx, held);
    }
  }
  return CUDA_SUCCESS;
}

// in: u64 ptr, size, count, then count CUmemAccessDesc.
CUresult custom_cuMemSetAccess(SessionContext& cx, ArgReader& in, ReplyWriter&) {
  uint64_t p = 0, size = 0, count = 0;
  if (!in.get(&p) || !in.get(&size) || !in.get(&count)) return in.malformed();
  if (count == 0 || count > kMaxAccessDescs) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUmemAccessDesc> desc(count);
  for (auto& d : desc) {
    if (!in.get(&d)) return in.malformed();
  }
  if (!in.at_end()) return in.malformed();
  if (!within_reservation(cx.vmm(), p, size)) return CUDA_ERROR_INVALID_VALUE;
  return cx.backend().cuMemSetAccess(p, size, desc.data(), desc.size());
}

// in: location, u64 ptr. out: u64 flags.
CUresult custom_cuMemGetAccess(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  CUmemLocation location{};
  uint64_t p = 0;
  if (!in.get(&location) || !in.get(&p) || !in.at_end()) return in.malformed();
  if (!within_reservation(cx.vmm(), p, 1)) return CUDA_ERROR_INVALID_VALUE;
  unsigned long long flags = 0;
  if (CUresult e = cx.backend().cuMemGetAccess(&flags, &location, p)) return e;
  out.put(static_cast<uint64_t>(flags));
  return CUDA_SUCCESS;
}

// in: u64 handle. out: prop.
CUresult custom_cuMemGetAllocationPropertiesFromHandle(SessionContext& cx, ArgReader& in,
                                                       ReplyWriter& out) {
  uint64_t h = 0;
  if (!in.get(&h) || !in.at_end()) return in.malformed();
  auto held = cx.vmm().handles.find(h);
  if (held == cx.vmm().handles.end() || held->second.refs == 0) return CUDA_ERROR_INVALID_VALUE;
  CUmemAllocationProp prop{};
  if (CUresult e = cx.backend().cuMemGetAllocationPropertiesFromHandle(&prop, h)) return e;
  out.put(clean(prop));
  return CUDA_SUCCESS;
}

}  // namespace cuwire::server
