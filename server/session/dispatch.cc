#include "server/session/dispatch.h"

#include "server/calls/copies.h"
#include "server/calls/host_calls.h"
#include "server/session/bulk_extent.h"
#include "server/tenancy/tenants.h"

#include <algorithm>
#include <atomic>
#include <vector>

namespace cuwire::server {

// ---------------------------------------------------------------------------------------------
// ArgReader

bool ArgReader::get_string(const char** out) {
  std::string s;
  bool is_null = false;
  if (!cursor_.get_string(&s, &is_null)) return false;
  if (is_null) {
    *out = nullptr;
    return true;
  }
  strings_.push_back(std::move(s));
  *out = strings_.back().c_str();
  return true;
}

bool ArgReader::get_array(std::span<const uint8_t>* out, size_t elem_size) {
  if (!cursor_.get_bytes(out)) return false;
  return elem_size == 0 || out->size() % elem_size == 0;
}

CUresult ArgReader::get_only_device(const SessionContext& cx, CUdevice* dev) {
  if (!get(dev) || !at_end()) return malformed();
  return cx.device_in(dev);
}

bool ArgReader::get_bulk(std::span<const uint8_t>* out) {
  uint64_t n = 0;
  return cursor_.get(&n) && take_bulk(n, out);
}

bool ArgReader::take_bulk(uint64_t n, std::span<const uint8_t>* out) {
  if (n > bulk_.size() - bulk_pos_) return false;
  *out = bulk_.subspan(bulk_pos_, n);
  bulk_pos_ += n;
  return true;
}

// ---------------------------------------------------------------------------------------------
// ReplyWriter

uint8_t* ReplyWriter::add_bulk(size_t n) {
  size_t at = bulk_.size();
  bulk_.resize(at + n);
  return bulk_.data() + at;
}

// ---------------------------------------------------------------------------------------------
// SessionContext

SessionContext::SessionContext(Backend& api, HandleLimits limits)
    : api_(api), session_objects_(api.session_objects()), limits_(limits) {}

SessionContext::~SessionContext() { reclaim(); }

CUresult SessionContext::lookup_raw(HandleKind kind, uint64_t id, void** out) const {
  *out = nullptr;
  if (id == 0) return CUDA_SUCCESS;  // NULL: the backend decides what it means
  // CU_STREAM_LEGACY (0x1) and CU_STREAM_PER_THREAD (0x2) are values, not handles.
  if (kind == HandleKind::kStream && (id == 0x1 || id == 0x2)) {
    *out = reinterpret_cast<void*>(id);
    return CUDA_SUCCESS;
  }
  auto it = handles_.find(id);
  bool ok = it != handles_.end() &&
            (it->second.kind == kind ||
             // A CUkernel is accepted wherever a CUfunction is, as the driver does.
             (kind == HandleKind::kFunction && it->second.kind == HandleKind::kKernel));
  if (!ok)
    return kind == HandleKind::kContext ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_INVALID_HANDLE;
  *out = it->second.handle;
  return CUDA_SUCCESS;
}

// Contexts (green ones too), resource descriptors and memory pools belong to a device, and
// libraries and their kernels to no context at all (CUDA loads them into every context; cudart
// keeps them across cudaDeviceReset): none of them goes with the context current when it was
// made.
uint64_t SessionContext::context_of_new(HandleKind kind) const {
  switch (kind) {
    case HandleKind::kContext:
    case HandleKind::kGreenContext:
    case HandleKind::kDevResourceDesc:
    case HandleKind::kMemoryPool:
    case HandleKind::kLibrary:
    case HandleKind::kKernel:
      return 0;
    default:
      return current_context_;
  }
}

CUresult SessionContext::check_mint(uint64_t id, HandleKind kind) const {
  if (!is_client_id(id) || handles_.count(id)) return CUDA_ERROR_INVALID_VALUE;
  return check_room(kind);
}

CUresult SessionContext::check_room(HandleKind kind, size_t n) const {
  const bool room = handles_.size() + n <= limits_.max_handles &&
                    (kind != HandleKind::kContext || contexts_ + n <= limits_.max_contexts) &&
                    (kind != HandleKind::kStream || streams_ + n <= limits_.max_streams);
  return room ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

namespace {
size_t* kind_counter(HandleKind kind, size_t* contexts, size_t* streams) {
  if (kind == HandleKind::kContext) return contexts;
  if (kind == HandleKind::kStream) return streams;
  return nullptr;
}
}  // namespace

CUresult SessionContext::bind_raw(HandleKind kind, uint64_t id, void* handle) {
  if (CUresult e = check_mint(id, kind)) return e;
  handles_[id] = {kind, handle, 0, context_of_new(kind), false, {}};
  if (size_t* c = kind_counter(kind, &contexts_, &streams_)) ++*c;
  by_handle_[{kind, handle}] = id;
  tell_backend_owner(kind, handle);
  return CUDA_SUCCESS;
}

void SessionContext::tell_backend_owner(HandleKind kind, void* handle) {
  if (kind != HandleKind::kContext && kind != HandleKind::kMemoryPool) return;
  if (!session_objects_) return;
  if (kind == HandleKind::kContext) {
    session_objects_->set_context_session(static_cast<CUcontext>(handle), session_tag_);
    // What the backend reserves for the context on its own (its device heap) is the tenant's
    // (design decision 13), asked of the tenant's account first. A tenant lives as long as the
    // server, and the session's contexts go before it ends.
    if (account_) {
      session_objects_->set_context_reservations(
          static_cast<CUcontext>(handle),
          [account = account_, api = &api_](int device, uint64_t bytes, bool give_back) {
            if (give_back) {
              account->uncharge(device, bytes);
              return true;
            }
            size_t total = 0;
            if (api->cuDeviceTotalMem_v2(&total, device) != CUDA_SUCCESS && account->capped()) {
              return false;
            }
            return account->charge(device, total, bytes) == CUDA_SUCCESS;
          });
    }
  } else {
    session_objects_->set_pool_session(static_cast<CUmemoryPool>(handle), session_tag_);
  }
}

uint64_t SessionContext::export_raw(HandleKind kind, void* handle, uint64_t parent, bool shared) {
  if (handle == nullptr) return 0;
  auto it = by_handle_.find({kind, handle});
  if (it != by_handle_.end()) return it->second;
  uint64_t id = next_server_id();
  handles_[id] = {kind, handle, parent, shared ? 0 : context_of_new(kind), shared, {}};
  if (size_t* c = kind_counter(kind, &contexts_, &streams_)) ++*c;
  by_handle_[{kind, handle}] = id;
  if (!shared) tell_backend_owner(kind, handle);
  return id;
}

uint64_t SessionContext::next_server_id() {
  static std::atomic<uint64_t> next{kServerIdBase};
  return next.fetch_add(1, std::memory_order_relaxed);
}

uint64_t SessionContext::next_session_tag() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

void SessionContext::release(uint64_t id) {
  std::vector<uint64_t> doomed{id};
  for (size_t i = 0; i < doomed.size(); ++i) {
    uint64_t victim = doomed[i];
    auto it = handles_.find(victim);
    if (it == handles_.end()) continue;
    if (it->second.kind == HandleKind::kModule || it->second.kind == HandleKind::kLibrary) {
      std::erase_if(globals_, [victim](const auto& g) { return g.second.owner == victim; });
    }
    by_handle_.erase({it->second.kind, it->second.handle});
    refund(&it->second.charge);
    if (it->second.kind == HandleKind::kContext) {
      std::erase_if(limit_reservations_,
                    [victim](const auto& r) { return r.first.first == victim; });
    }
    if (size_t* c = kind_counter(it->second.kind, &contexts_, &streams_)) --*c;
    handles_.erase(it);
    param_layouts_.erase(victim);
    for (const auto& [child, entry] : handles_) {
      if (entry.parent == victim) doomed.push_back(child);
    }
  }
}

namespace {
// [p, p+n) inside the range starting at the greatest base <= p, written so nothing overflows.
template <typename Map, typename SizeOf>
bool inside(const Map& m, CUdeviceptr p, size_t n, SizeOf size_of) {
  auto it = m.upper_bound(p);
  if (it == m.begin()) return false;
  --it;
  size_t size = size_of(it->second);
  return p - it->first < size && n <= size - (p - it->first);
}
}  // namespace

CUresult SessionContext::check_range(CUdeviceptr p, size_t n) const {
  if (n == 0) return CUDA_SUCCESS;
  if (inside(allocations_, p, n, [](const Allocation& a) { return a.size; })) return CUDA_SUCCESS;
  if (inside(globals_, p, n, [](const GlobalRange& g) { return g.size; })) return CUDA_SUCCESS;
  if (inside(imports_, p, n, [](const Import& i) { return i.size; })) return CUDA_SUCCESS;
  // Mappings next to each other (a reservation mapped in chunks, as PyTorch's expandable
  // segments grow) are one range to a copy: every byte must lie in one of them.
  CUdeviceptr at = p, end;
  if (__builtin_add_overflow(p, n, &end)) return CUDA_ERROR_INVALID_VALUE;
  while (at < end) {
    auto it = vmm_.mappings.upper_bound(at);
    if (it == vmm_.mappings.begin()) return CUDA_ERROR_INVALID_VALUE;
    --it;
    if (at - it->first >= it->second.size) return CUDA_ERROR_INVALID_VALUE;
    at = it->first + it->second.size;
  }
  return CUDA_SUCCESS;
}

bool SessionContext::is_allocated(CUdeviceptr p, size_t n) const {
  return inside(allocations_, p, n, [](const Allocation& a) { return a.size; }) ||
         inside(globals_, p, n, [](const GlobalRange& g) { return g.size; });
}

void SessionContext::wait_globals_unused(uint64_t owner) const {
  if (!host_calls_) return;
  for (const auto& [p, g] : globals_) {
    if (g.owner == owner) host_calls_->wait_unused(p, g.size);
  }
}

void SessionContext::on_global(CUdeviceptr p, size_t n, uint64_t owner) {
  if (n) globals_[p] = {n, owner};
}

CUresult SessionContext::check_free(CUdeviceptr p) const {
  if (p == 0) return CUDA_SUCCESS;  // cuMemFree(0) is a no-op success in the driver
  auto it = allocations_.find(p);
  size_t size = 0;
  if (auto imported = pool_import(p); imported != imports_.end()) {
    size = imported->second.size;
  } else if (it != allocations_.end()) {
    size = it->second.size;
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // A host function waiting on a stream may still write it (host_calls.h); the free waits,
  // as the driver's waits for the work queued before it.
  if (host_calls_) host_calls_->wait_unused(p, size);
  return CUDA_SUCCESS;
}

namespace {
size_t round_up(size_t n, size_t step) {
  return n > SIZE_MAX - (step - 1) ? SIZE_MAX / step * step : (n + step - 1) / step * step;
}
}  // namespace

size_t SessionContext::granularity(int device) {
  auto it = granularity_.find(device);
  if (it != granularity_.end()) return it->second;
  CUdevice current = -1;
  if (api_.cuCtxGetDevice(&current) != CUDA_SUCCESS || current != device) {
    return kFallbackGranularity;  // asked again where the device is current
  }
  // Two one-byte allocations lie one step apart, in the backend's own allocator (the sim's
  // bump allocator, the driver's sub-allocation of small blocks). Anything that does not look
  // like a step (not a power of two, or past a large page) is not taken for one.
  size_t g = kFallbackGranularity;
  CUdeviceptr a = 0, b = 0;
  if (api_.cuMemAlloc_v2(&a, 1) == CUDA_SUCCESS) {
    if (api_.cuMemAlloc_v2(&b, 1) == CUDA_SUCCESS) {
      const uint64_t d = a > b ? a - b : b - a;
      if (d >= 256 && d <= (uint64_t{2} << 20) && (d & (d - 1)) == 0) g = d;
      api_.cuMemFree_v2(b);
    }
    api_.cuMemFree_v2(a);
  }
  granularity_.emplace(device, g);
  return g;
}

CUresult SessionContext::charge(size_t n, int* device, size_t* spent) {
  *device = 0;
  *spent = n;
  CUdevice dev = 0;
  const CUresult e = api_.cuCtxGetDevice(&dev);
  if (e == CUDA_SUCCESS) {
    *device = dev;
    *spent = round_up(n, granularity(dev));
  }
  if (!account_) return CUDA_SUCCESS;
  if (e != CUDA_SUCCESS && account_->capped()) return e;
  return charge_on(*device, *spent);
}

CUresult SessionContext::charge_on(int device, size_t n) {
  // The device's size, asked once: a cap may be set (a reload) between two charges. A backend
  // that cannot tell it is fine for an uncapped account, which only counts.
  auto it = device_totals_.find(device);
  if (it == device_totals_.end()) {
    size_t bytes = 0;
    if (CUresult t = api_.cuDeviceTotalMem_v2(&bytes, device)) {
      if (!account_->capped()) return account_->charge(device, 0, n);
      return t;
    }
    it = device_totals_.emplace(device, bytes).first;
  }
  return account_->charge(device, it->second, n);
}

CUresult SessionContext::precharge(CheckedSize n, Charge* out) {
  *out = {};
  // A size no allocation can have passes no cap; without one, the backend answers for it (it
  // cannot make such a thing), as it would without cuwire.
  if (!n.ok()) return account_ && account_->capped() ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
  if (n.value() == 0) return CUDA_SUCCESS;
  CUdevice device = 0;
  if (api_.cuCtxGetDevice(&device) != CUDA_SUCCESS) {
    // Libraries load without a current context; their memory is on the session's device 0.
    device = devices_.empty() ? 0 : devices_[0];
  }
  return precharge_on(device, n, out);
}

CUresult SessionContext::precharge_on(int device, CheckedSize n, Charge* out) {
  *out = {};
  if (!n.ok()) return account_ && account_->capped() ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
  if (n.value() == 0) return CUDA_SUCCESS;
  const size_t spent = round_up(n.value(), granularity(device));
  if (account_) {
    if (CUresult e = charge_on(device, spent)) return e;
  }
  *out = {spent, device, true, nullptr};
  allocated_bytes_ += spent;
  return CUDA_SUCCESS;
}

void SessionContext::refund(Charge* c) {
  if (c->charged) {
    allocated_bytes_ -= c->bytes;
    // A shared charge leaves the tenant with its last holder (SharedCharge).
    if (account_ && !c->shared) account_->uncharge(c->device, c->bytes);
  }
  *c = {};
}

std::shared_ptr<SessionContext::SharedCharge> SessionContext::share(Charge* c) {
  if (!c->shared && c->charged && account_) {
    c->shared = std::make_shared<SharedCharge>(account_, c->device, c->bytes);
  }
  return c->shared;
}

SessionContext::SharedCharge::~SharedCharge() { account->uncharge(device, bytes); }

CUresult SessionContext::reserve_for_limit(CUlimit limit, uint64_t before, CheckedSize want,
                                           const std::function<CUresult()>& set) {
  auto h = handles_.find(current_context_);
  if (h == handles_.end() || h->second.kind != HandleKind::kContext) return set();
  const auto key = std::make_pair(current_context_, static_cast<int>(limit));
  auto [r, fresh] = limit_reservations_.try_emplace(key, LimitReservation{before, 0});
  // A figure no device has passes no cap; without one the backend answers for it.
  if (!want.ok()) return account_ && account_->capped() ? CUDA_ERROR_OUT_OF_MEMORY : set();
  const uint64_t extra = want.value() > r->second.before ? want.value() - r->second.before : 0;
  const uint64_t had = r->second.extra;
  Charge& held = h->second.charge;
  int device = held.charged ? held.device : 0;
  if (!held.charged) {
    CUdevice d = 0;
    if (api_.cuCtxGetDevice(&d) == CUDA_SUCCESS) device = d;
  }
  if (extra > had && account_) {
    if (CUresult e = charge_on(device, extra - had)) return e;
  }
  if (CUresult e = set()) {
    if (extra > had && account_) account_->uncharge(device, extra - had);
    return e;
  }
  if (extra < had && account_) account_->uncharge(device, had - extra);
  // The context's handle holds the sum of its limits' reservations (released with it).
  const uint64_t total = held.bytes + extra - had;
  allocated_bytes_ = allocated_bytes_ + extra - had;
  held.bytes = total;
  held.device = device;
  held.charged = total > 0;
  r->second.extra = extra;
  return CUDA_SUCCESS;
}

void SessionContext::hold(HandleKind kind, void* handle, Charge* c) {
  if (!c->charged) return;
  auto it = by_handle_.find({kind, handle});
  if (it == by_handle_.end()) {  // not exported (a null handle): nothing holds it
    refund(c);
    return;
  }
  HandleEntry& h = handles_[it->second];
  refund(&h.charge);  // a backend that returned a handle the session holds: one charge
  h.charge = *c;
  *c = {};
}

CUresult SessionContext::device_in(CUdevice* d) const {
  if (devices_.empty()) return CUDA_SUCCESS;
  if (*d < 0 || static_cast<size_t>(*d) >= devices_.size()) return CUDA_ERROR_INVALID_DEVICE;
  *d = devices_[*d];
  return CUDA_SUCCESS;
}

CUresult SessionContext::device_in(CUmemLocation* l) const {
  if (wire_enum(l->type) != enum_value(CU_MEM_LOCATION_TYPE_DEVICE)) return CUDA_SUCCESS;
  CUdevice d = l->id;
  if (CUresult e = device_in(&d)) return e;
  l->id = d;
  return CUDA_SUCCESS;
}

CUresult SessionContext::device_out(CUdevice* d) const {
  if (devices_.empty()) return CUDA_SUCCESS;
  auto it = std::find(devices_.begin(), devices_.end(), *d);
  // A device the session does not see cannot be named to it.
  if (it == devices_.end()) return CUDA_ERROR_INVALID_DEVICE;
  *d = static_cast<CUdevice>(it - devices_.begin());
  return CUDA_SUCCESS;
}

int SessionContext::device_count(int backend_count) const {
  return devices_.empty() ? backend_count
                          : std::min(backend_count, static_cast<int>(devices_.size()));
}

CUresult SessionContext::on_alloc(CUdeviceptr p, size_t n) {
  int device = 0;
  size_t spent = 0;
  if (CUresult e = charge(n, &device, &spent)) {
    api_.cuMemFree_v2(p);  // undone: the session never sees it
    return e;
  }
  auto [it, fresh] = allocations_.try_emplace(p, Allocation{n, spent, current_context_, device});
  if (!fresh) {  // a backend that reuses an address the session still holds: keep one record
    allocated_bytes_ -= it->second.charged;
    if (account_) account_->uncharge(it->second.device, it->second.charged);
    it->second = {n, spent, current_context_, device};
  }
  allocated_bytes_ += spent;
  return CUDA_SUCCESS;
}

void SessionContext::drop_allocation(std::map<CUdeviceptr, Allocation>::iterator it,
                                     bool free_on_backend) {
  if (free_on_backend) {
    try {
      api_.cuMemFree_v2(it->first);
    } catch (...) {
    }
  }
  allocated_bytes_ -= it->second.charged;
  if (account_) account_->uncharge(it->second.device, it->second.charged);
  ipc_forget(this, it->first);
  allocations_.erase(it);
}

std::map<CUdeviceptr, SessionContext::Import>::const_iterator SessionContext::pool_import(
    CUdeviceptr p) const {
  auto it = imports_.find(p);
  return it != imports_.end() && it->second.pool && it->second.context == current_context_
             ? it
             : imports_.end();
}

bool SessionContext::backend_keeps_imports_apart() const {
  return relay_ || session_objects_ != nullptr;
}

void SessionContext::on_free(CUdeviceptr p) {
  if (auto imported = pool_import(p); imported != imports_.end()) {
    // A pool import: the free ends it (the session imports a pointer once).
    imports_.erase(imported);
    return;
  }
  auto it = allocations_.find(p);
  if (it != allocations_.end()) drop_allocation(it, false);
  // Freed while its capture is open (a free captured after the allocation, or one that ends
  // the capture): not the graph's to make again.
  for (auto& [capture, allocs] : capture_allocs_) {
    std::erase_if(allocs, [p](const GraphAlloc& a) { return a.p == p; });
  }
}

uint64_t SessionContext::capture_id(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  if (api_.cuStreamGetCaptureInfo_v3(stream, &status, &id, nullptr, nullptr, nullptr, nullptr) !=
          CUDA_SUCCESS ||
      status == CU_STREAM_CAPTURE_STATUS_NONE) {
    return 0;
  }
  return id;
}

void SessionContext::note_stream_alloc(CUstream stream, CUdeviceptr p, size_t n) {
  if (const uint64_t capture = capture_id(stream)) capture_allocs_[capture].push_back({p, n});
}

void SessionContext::end_capture_allocs(uint64_t capture, uint64_t graph_id) {
  auto it = capture_allocs_.find(capture);
  if (it == capture_allocs_.end()) return;
  if (graph_id && !it->second.empty()) graph_allocs_[graph_id] = std::move(it->second);
  capture_allocs_.erase(it);
}

void SessionContext::instantiate_allocs(uint64_t graph_id, uint64_t exec_id, bool auto_free) {
  auto it = graph_allocs_.find(graph_id);
  if (it != graph_allocs_.end()) exec_allocs_[exec_id] = ExecAllocs{it->second, auto_free, false};
}

CUresult SessionContext::revive_graph_allocs(uint64_t exec_id) {
  auto it = exec_allocs_.find(exec_id);
  if (it == exec_allocs_.end()) return CUDA_SUCCESS;
  // (Before the first launch the blocks are live from the capture, which made them.)
  if (it->second.launched && !it->second.auto_free) {
    for (const GraphAlloc& a : it->second.allocs) {
      if (allocations_.count(a.p)) return CUDA_ERROR_INVALID_VALUE;
    }
  }
  it->second.launched = true;
  std::vector<CUdeviceptr> added;
  for (const GraphAlloc& a : it->second.allocs) {
    if (allocations_.count(a.p)) continue;  // not freed since the last launch
    int device = 0;
    size_t spent = 0;
    if (CUresult e = charge(a.size, &device, &spent)) {
      for (CUdeviceptr p : added) drop_allocation(allocations_.find(p), false);
      return e;
    }
    allocations_.emplace(a.p, Allocation{a.size, spent, current_context_, device});
    allocated_bytes_ += spent;
    added.push_back(a.p);
  }
  return CUDA_SUCCESS;
}

void SessionContext::memory_view(int device, size_t* free, size_t* total) const {
  if (account_) account_->view(device, free, total);
}

template <typename Pred>
void SessionContext::destroy_where(Pred doomed) {
  // Newest first, by kind in dependency order: work queues, then code, then memory, then the
  // contexts that hold them all. A graph exec goes before the graph it came from, which CUDA
  // lets it outlive. Shared handles are the backend's: never destroyed here.
  std::vector<std::pair<uint64_t, HandleEntry>> order;
  for (const auto& [id, h] : handles_) {
    if (!h.shared && doomed(h.kind, h.context)) order.emplace_back(id, h);
  }
  std::sort(order.begin(), order.end(), [](auto& a, auto& b) { return a.first > b.first; });
  // A backend that throws while destroying one object must not stop the rest from going, nor
  // leave the tables to be reclaimed twice.
  auto safely = [](auto&& destroy) {
    try {
      destroy();
    } catch (...) {
    }
  };
  auto each = [&](HandleKind kind, auto&& destroy) {
    for (auto& [id, h] : order) {
      void* handle = h.handle;
      if (h.kind == kind) safely([&] { destroy(handle); });
    }
  };
  each(HandleKind::kGraphExec,
       [&](void* h) { api_.cuGraphExecDestroy(static_cast<CUgraphExec>(h)); });
  each(HandleKind::kGraph, [&](void* h) { api_.cuGraphDestroy(static_cast<CUgraph>(h)); });
  each(HandleKind::kStream, [&](void* h) { api_.cuStreamDestroy_v2(static_cast<CUstream>(h)); });
  each(HandleKind::kEvent, [&](void* h) { api_.cuEventDestroy_v2(static_cast<CUevent>(h)); });
  each(HandleKind::kModule, [&](void* h) { api_.cuModuleUnload(static_cast<CUmodule>(h)); });
  each(HandleKind::kLibrary, [&](void* h) { api_.cuLibraryUnload(static_cast<CUlibrary>(h)); });
  for (auto it = objects_.begin(); it != objects_.end();) {
    if (!doomed(HandleKind::kTexref, it->second)) {
      ++it;
      continue;
    }
    const bool surface = it->first.first;
    const uint64_t value = it->first.second;
    safely([&] { surface ? api_.cuSurfObjectDestroy(value) : api_.cuTexObjectDestroy(value); });
    it = objects_.erase(it);
  }
  for (auto it = allocations_.begin(); it != allocations_.end();) {
    auto next = std::next(it);
    if (doomed(HandleKind::kArray, it->second.context)) drop_allocation(it, true);
    it = next;
  }
  // A mipmap's levels go with their mipmapped array.
  for (auto& entry : order) {
    const HandleEntry& h = entry.second;
    const bool level = derived_from(entry.first, HandleKind::kMipmappedArray);
    void* handle = h.handle;
    if (h.kind == HandleKind::kArray && !level) {
      safely([&] { api_.cuArrayDestroy(static_cast<CUarray>(handle)); });
    }
  }
  each(HandleKind::kMipmappedArray,
       [&](void* h) { api_.cuMipmappedArrayDestroy(static_cast<CUmipmappedArray>(h)); });
  each(HandleKind::kMemoryPool,
       [&](void* h) { api_.cuMemPoolDestroy(static_cast<CUmemoryPool>(h)); });
  each(HandleKind::kContext, [&](void* h) { destroy_context(static_cast<CUcontext>(h)); });
  for (auto& [id, h] : order) release(id);
}

CUresult SessionContext::make_context(CUdevice device, unsigned flags, CUcontext* out) {
  if (!partition(device)) return api_.cuCtxCreate_v4(out, nullptr, flags, device);
  // A green context has no flags of its own to take (scheduling, host mapping): the driver's
  // defaults apply.
  CUdevResourceDesc desc = nullptr;
  if (CUresult e = partition_desc(device, &desc)) return e;
  CUgreenCtx green = nullptr;
  return make_green_context(desc, device, &green, out);
}

CUresult SessionContext::partition_desc(int device, CUdevResourceDesc* out) {
  const SmShare* share = partition(device);
  if (!share) return CUDA_ERROR_INVALID_VALUE;
  if (!(relay_ && relay_apart_)) {
    *out = share->desc;
    return CUDA_SUCCESS;
  }
  OwnPartition& mine = own_partitions_[device];
  if (!mine.desc) {
    if (CUresult e = make_partition_desc(api_, device, *share, &mine.desc)) return e;
  }
  *out = mine.desc;
  return CUDA_SUCCESS;
}

CUresult SessionContext::partition_resource(int device, CUdevResource* out) {
  const SmShare* share = partition(device);
  if (!share) return CUDA_ERROR_INVALID_VALUE;
  if (!(relay_ && relay_apart_)) return share->resource->get(api_, share->desc, device, out);
  CUdevResourceDesc desc = nullptr;
  if (CUresult e = partition_desc(device, &desc)) return e;
  return own_partitions_[device].resource.get(api_, desc, device, out);
}

CUresult SessionContext::make_green_context(CUdevResourceDesc desc, CUdevice device,
                                            CUgreenCtx* green, CUcontext* ctx) {
  if (CUresult e = api_.cuGreenCtxCreate(green, desc, device, CU_GREEN_CTX_DEFAULT_STREAM))
    return e;
  if (CUresult e = api_.cuCtxFromGreenCtx(ctx, *green)) {
    api_.cuGreenCtxDestroy(*green);
    return e;
  }
  green_contexts_[*ctx] = *green;
  return CUDA_SUCCESS;
}

uint64_t SessionContext::keep_resource(const CUdevResource& r) {
  for (const auto& [id, kept] : resources_) {
    if (std::memcmp(&kept, &r, sizeof r) == 0) return id;
  }
  if (resources_.size() >= kMaxResources) resources_.erase(resources_.begin());
  const uint64_t id = next_resource_id_++;
  resources_[id] = r;
  return id;
}

const CUdevResource* SessionContext::find_resource(uint64_t id) const {
  auto it = resources_.find(id);
  return it == resources_.end() ? nullptr : &it->second;
}

CUresult SessionContext::destroy_context(CUcontext ctx) {
  // A host function still inside the context's memory finishes first (host_calls.h).
  if (host_calls_) host_calls_->wait_unused(0, ~size_t{0});
  auto it = green_contexts_.find(ctx);
  if (it == green_contexts_.end()) return api_.cuCtxDestroy_v2(ctx);
  // cuCtxDestroy pops a context current on this thread; a green context is not left current
  // either.
  CUcontext current = nullptr;
  api_.cuCtxGetCurrent(&current);
  if (current == ctx) api_.cuCtxSetCurrent(nullptr);
  const CUresult rc = api_.cuGreenCtxDestroy(it->second);
  if (rc == CUDA_SUCCESS) green_contexts_.erase(it);  // else reclaim tries again
  return rc;
}

void SessionContext::release_context_contents(uint64_t ctx_id) {
  if (ctx_id == 0) return;
  if (work_gate_) work_gate_->retire_context(ctx_id);
  destroy_where([ctx_id](HandleKind kind, uint64_t context) {
    return kind != HandleKind::kContext && context == ctx_id;
  });
  // Interprocess memory the context opened is closed with it, as the driver closes it.
  std::erase_if(imports_, [ctx_id](const auto& i) { return i.second.context == ctx_id; });
}

void SessionContext::reclaim() {
  // Host functions still inside the session's memory finish first (the channel is closed by
  // now: they return once their stream reaches them).
  if (host_calls_) host_calls_->wait_unused(0, ~size_t{0});
  if (work_gate_) work_gate_->retire_context(0);
  // The session's exports end first: none may be imported once what they name is released
  // (forget_all forgets them again, for a relay's lost upstream, which calls it alone).
  shareable_forget_all(this);
  vmm_reclaim(*this);
  destroy_where([](HandleKind, uint64_t) { return true; });
  forget_all();
}

void SessionContext::forget_all() {
  while (!allocations_.empty()) drop_allocation(allocations_.begin(), false);
  ipc_forget(this, 0);
  shareable_forget_all(this);
  globals_.clear();
  imports_.clear();
  for (auto& [handle, h] : vmm_.handles) refund(&h.charge);
  vmm_ = {};
  for (auto& [id, h] : handles_) refund(&h.charge);
  limit_reservations_.clear();
  allocated_bytes_ = 0;
  handles_.clear();
  by_handle_.clear();
  param_layouts_.clear();
  objects_.clear();
  green_contexts_.clear();
  own_partitions_.clear();
  resources_.clear();
  contexts_ = streams_ = 0;
}

}  // namespace cuwire::server

// ---------------------------------------------------------------------------------------------
// bulk_extent.h

namespace cuwire::server {
namespace {
thread_local std::span<const uint8_t> t_bulk;
}  // namespace

BulkScope::BulkScope(std::span<const uint8_t> bulk) : saved_(t_bulk) { t_bulk = bulk; }
BulkScope::~BulkScope() { t_bulk = saved_; }

bool bulk_extent(const void* p, size_t* len) {
  auto* b = static_cast<const uint8_t*>(p);
  if (t_bulk.empty() || b < t_bulk.data() || b >= t_bulk.data() + t_bulk.size()) return false;
  *len = static_cast<size_t>(t_bulk.data() + t_bulk.size() - b);
  return true;
}

}  // namespace cuwire::server
