// Contexts (local stack, server-side creation), pinned host memory and pointer queries, and
// the client's tables (client_state.h).

#include "client-lib/core/client_state.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <type_traits>
#include <unordered_map>

#include "client-lib/calls/managed_memory.h"
#include "client-lib/core/client_call.h"
#include "client-lib/core/connection.h"

namespace cuwire::client {
namespace {

struct PrimaryState {
  uint64_t id = 0;
  bool created = false;
  int refs = 0;
  unsigned flags = 0;
};

struct ContextTable {
  std::mutex mu;
  std::unordered_map<uint64_t, ContextInfo> contexts;  // guarded by mu
  std::map<int, PrimaryState> primaries;               // guarded by mu
  std::unordered_map<uint64_t, uint64_t> greens;       // guarded by mu: green id -> context id
};
ContextTable& contexts() {
  static ContextTable* t = new ContextTable();  // leaked: atexit handlers still call in
  return *t;
}

// A thread's context stack. Trivially destructible on purpose: cudart's exit handlers call
// into the driver after thread-local destructors have run, so a std::vector here would be read
// after it was freed. CUDA apps nest contexts a few deep at most.
class ContextStack {
 public:
  static constexpr size_t kMaxDepth = 64;
  bool empty() const { return depth_ == 0; }
  uint64_t& back() { return ids_[depth_ - 1]; }
  bool push_back(uint64_t id) {
    if (depth_ == kMaxDepth) return false;
    ids_[depth_++] = id;
    return true;
  }
  void pop_back() { --depth_; }
  void erase_all(uint64_t id) {
    size_t kept = 0;
    for (size_t i = 0; i < depth_; ++i) {
      if (ids_[i] != id) ids_[kept++] = ids_[i];
    }
    depth_ = kept;
  }

 private:
  uint64_t ids_[kMaxDepth];
  size_t depth_ = 0;
};
static_assert(std::is_trivially_destructible_v<ContextStack>);
thread_local ContextStack t_stack;

struct PinnedBlock {
  size_t size;
  unsigned flags;
  bool owned;           // cuMemHostAlloc (we free it) vs cuMemHostRegister (the app's memory)
  bool mapped;          // tracked as managed memory: kernels may use it (see cuMemHostAlloc)
  bool backed;          // a managed allocation of the session at the same address (cuMemHostAlloc)
  size_t span;          // bytes mapped with mmap (0: from posix_memalign)
  uint64_t device = 0;  // registered memory: its device copy, once asked for (0: none)
};
// Backed blocks not yet tracked: launches look for pointers into them while there are any.
std::atomic<size_t> g_dormant{0};
// Bounds of every backed block made so far ([lo, hi), never shrunk): a launch's parameter words
// outside them are no pointers into a dormant block, without taking the table's lock.
std::atomic<uintptr_t> g_backed_lo{UINTPTR_MAX}, g_backed_hi{0};

struct MemoryTable {
  std::mutex mu;
  std::map<uint64_t, size_t> device;                                      // guarded by mu
  std::map<uintptr_t, PinnedBlock> pinned;                                // guarded by mu
  std::unordered_map<uint64_t, std::vector<formats::ParamSlot>> layouts;  // guarded by mu
  std::map<int, LaunchLimits> limits;                                     // guarded by mu
};
MemoryTable& memory() {
  static MemoryTable* t = new MemoryTable();
  return *t;
}

uint64_t id_of(CUcontext c) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(c)); }
CUcontext ctx_of(uint64_t id) { return reinterpret_cast<CUcontext>(static_cast<uintptr_t>(id)); }

CUresult send_context_call(CallId id, uint64_t ctx_id, CUdevice dev, unsigned flags) {
  ArgWriter w(id);
  w.put(formats::ContextArgs{ctx_id, static_cast<int32_t>(dev), flags});
  return w.call_result();
}

// Copies the entry for `key` in the context table's `map` to *out; false when there is none.
template <typename Map>
bool find_context_entry(Map ContextTable::*map, uint64_t key, typename Map::mapped_type* out) {
  ContextTable& t = contexts();
  std::lock_guard lock(t.mu);
  auto it = (t.*map).find(key);
  if (it == (t.*map).end()) return false;
  *out = it->second;
  return true;
}

}  // namespace

uint64_t current_context_id() {
  ContextStack& st = t_stack;
  return st.empty() ? 0 : st.back();
}

bool context_info(uint64_t ctx_id, ContextInfo* out) {
  return find_context_entry(&ContextTable::contexts, ctx_id, out);
}

void add_green_context(uint64_t green_id, uint64_t ctx_id, CUdevice dev) {
  ContextTable& t = contexts();
  std::lock_guard lock(t.mu);
  t.greens[green_id] = ctx_id;
  t.contexts[ctx_id] = ContextInfo{dev, 0, false, green_id};
}

bool green_context(uint64_t green_id, uint64_t* ctx_id) {
  return find_context_entry(&ContextTable::greens, green_id, ctx_id);
}

void remove_green_context(uint64_t green_id) {
  uint64_t ctx_id = 0;
  {
    ContextTable& t = contexts();
    std::lock_guard lock(t.mu);
    auto it = t.greens.find(green_id);
    if (it == t.greens.end()) return;
    ctx_id = it->second;
    t.greens.erase(it);
    t.contexts.erase(ctx_id);
  }
  t_stack.erase_all(ctx_id);
  forget_cached(ctx_id);
  forget_cached(green_id);
}

CUresult current_device(CUdevice* dev) {
  ContextInfo info;
  if (!context_info(current_context_id(), &info)) return CUDA_ERROR_INVALID_CONTEXT;
  *dev = info.device;
  return CUDA_SUCCESS;
}

namespace {
// Creates the server side of dev's primary context if it is not there yet. Holds t.mu.
CUresult ensure_primary_locked(ContextTable& t, CUdevice dev, PrimaryState** out) {
  PrimaryState& p = t.primaries[dev];
  if (!p.id) p.id = mint_handle();
  if (!p.created) {
    if (CUresult e = send_context_call(CallId::k_cuDevicePrimaryCtxRetain, p.id, dev, p.flags)) {
      return e;
    }
    p.created = true;
    t.contexts[p.id] = ContextInfo{dev, p.flags, true};
  }
  *out = &p;
  return CUDA_SUCCESS;
}
}  // namespace

CUresult primary_context(CUdevice dev, uint64_t* ctx_id) {
  ContextTable& t = contexts();
  std::lock_guard lock(t.mu);
  PrimaryState* p = nullptr;
  if (CUresult e = ensure_primary_locked(t, dev, &p)) return e;
  *ctx_id = p->id;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// memory tables

void reset_client_state() {
  {
    ContextTable& t = contexts();
    std::lock_guard lock(t.mu);
    t.contexts.clear();
    t.primaries.clear();
    t.greens.clear();
  }
  {
    MemoryTable& m = memory();
    std::lock_guard lock(m.mu);
    m.device.clear();
    m.layouts.clear();
    m.limits.clear();
    // Tracked pinned memory is a managed allocation of the old session whose mirror goes with
    // it; untracked pinned memory stays valid host memory, no longer backed on the device.
    std::erase_if(m.pinned, [](const auto& kv) { return kv.second.mapped; });
    for (auto& [base, b] : m.pinned) {
      if (b.backed) g_dormant.fetch_sub(1);
      b.backed = false;
      b.device = 0;  // registered memory's device copy went with the session
    }
  }
  managed::forget_all();
  // This thread's stack; every other thread's names contexts of the old session until it sets
  // one (a relay serves each session on a thread of its own).
  while (!t_stack.empty()) t_stack.pop_back();
}

void note_alloc(CUdeviceptr p, size_t n) {
  MemoryTable& m = memory();
  std::lock_guard lock(m.mu);
  m.device[p] = n;
}

void note_free(CUdeviceptr p) {
  {
    MemoryTable& m = memory();
    std::lock_guard lock(m.mu);
    m.device.erase(p);
  }
  managed::forget(p);  // a managed allocation's host mirror goes with it
}

bool find_device_allocation(uint64_t p, uint64_t* base, size_t* size) {
  MemoryTable& m = memory();
  std::lock_guard lock(m.mu);
  auto it = m.device.upper_bound(p);
  if (it == m.device.begin()) return false;
  --it;
  if (p - it->first >= std::max<size_t>(it->second, 1)) return false;
  *base = it->first;
  *size = it->second;
  return true;
}

bool is_device_pointer(uint64_t p) {
  uint64_t b;
  size_t s;
  return find_device_allocation(p, &b, &s);
}

namespace {
// The pinned block holding p, or the table's end. Caller holds m.mu.
decltype(MemoryTable::pinned)::const_iterator pinned_block(const MemoryTable& m, const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  auto it = m.pinned.upper_bound(a);
  if (it == m.pinned.begin()) return m.pinned.end();
  --it;
  return a - it->first < std::max<size_t>(it->second.size, 1) ? it : m.pinned.end();
}
}  // namespace

bool in_library_host_memory(const void* p, size_t n) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  MemoryTable& m = memory();
  std::lock_guard lock(m.mu);
  auto it = m.pinned.upper_bound(a);
  if (it == m.pinned.begin()) return false;
  --it;
  const PinnedBlock& b = it->second;
  // Not mapped (DEVICEMAP) memory: managed underneath, its pages change protection.
  return b.owned && !b.mapped && a - it->first <= b.size && n <= b.size - (a - it->first);
}

namespace {
// Starts tracking the backed block holding p, if it is not yet: from the next call on, the
// device copy is kept coherent with it like managed memory.
void adopt_block(uintptr_t p) {
  MemoryTable& m = memory();
  uintptr_t base = 0;
  size_t size = 0, span = 0;
  {
    std::lock_guard lock(m.mu);
    auto it = pinned_block(m, reinterpret_cast<void*>(p));
    if (it == m.pinned.end() || !it->second.backed || it->second.mapped) return;
    base = it->first;
    size = it->second.size;
    span = it->second.span;
  }
  // Not under m.mu: the tracker's lock comes first where both are taken.
  if (!managed::adopt(base, span, size)) return;
  std::lock_guard lock(m.mu);
  auto it = m.pinned.find(base);
  if (it != m.pinned.end() && it->second.backed && !it->second.mapped) {
    it->second.mapped = true;
    g_dormant.fetch_sub(1);
  }
}
}  // namespace

void adopt_pinned_pointers(const uint8_t* data, size_t n) {
  if (g_dormant.load(std::memory_order_relaxed) == 0) return;
  const uintptr_t lo = g_backed_lo.load(std::memory_order_relaxed);
  const uintptr_t hi = g_backed_hi.load(std::memory_order_relaxed);
  // Words pointing into a dormant block, found under one lock; adopted after it (rarely any:
  // only the first launch that uses a block).
  std::vector<uintptr_t> found;
  {
    MemoryTable& m = memory();
    std::unique_lock lock(m.mu, std::defer_lock);
    for (size_t off = 0; off + 8 <= n; off += 8) {
      uint64_t v;
      std::memcpy(&v, data + off, 8);
      if (v < lo || v >= hi) continue;
      if (!lock.owns_lock()) lock.lock();
      auto it = pinned_block(m, reinterpret_cast<void*>(static_cast<uintptr_t>(v)));
      if (it != m.pinned.end() && it->second.backed && !it->second.mapped) {
        found.push_back(static_cast<uintptr_t>(v));
      }
    }
  }
  for (uintptr_t p : found) adopt_block(p);
}

bool pinned_device_range(const void* p, size_t n) {
  uintptr_t base = 0;
  {
    MemoryTable& m = memory();
    std::lock_guard lock(m.mu);
    auto it = pinned_block(m, p);
    if (it == m.pinned.end() || !it->second.backed) return false;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if (n > it->second.size || a - it->first > it->second.size - n) return false;
    if (it->second.mapped) return true;
    base = it->first;
  }
  adopt_block(base);
  MemoryTable& m = memory();
  std::lock_guard lock(m.mu);
  auto it = m.pinned.find(base);
  return it != m.pinned.end() && it->second.mapped;
}

bool find_pinned(const void* p, void** base, size_t* size, unsigned* flags) {
  MemoryTable& m = memory();
  std::lock_guard lock(m.mu);
  auto it = pinned_block(m, p);
  if (it == m.pinned.end()) return false;
  if (base) *base = reinterpret_cast<void*>(it->first);
  if (size) *size = it->second.size;
  if (flags) *flags = it->second.flags;
  return true;
}

CUresult param_layout(uint64_t func_id, const std::vector<formats::ParamSlot>** out) {
  MemoryTable& m = memory();
  {
    std::lock_guard lock(m.mu);
    auto it = m.layouts.find(func_id);
    if (it != m.layouts.end()) {
      *out = &it->second;
      return CUDA_SUCCESS;
    }
  }
  if (func_id == 0) return CUDA_ERROR_INVALID_HANDLE;
  ArgWriter w(CallId::k_cuFuncGetParamInfo);
  w.put(func_id);
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  uint32_t n = 0;
  r.get_array(&n, 1);
  if (n > formats::kMaxParams) return CUDA_ERROR_UNKNOWN;
  std::vector<formats::ParamSlot> slots(n);
  r.get_array(slots.data(), n);
  if (CUresult e = r.finish()) return e;
  std::lock_guard lock(m.mu);
  // unordered_map never moves its values, so the pointer stays good.
  *out = &m.layouts.emplace(func_id, std::move(slots)).first->second;
  return CUDA_SUCCESS;
}

CUresult launch_limits(CUdevice dev, LaunchLimits* out) {
  MemoryTable& m = memory();
  {
    std::lock_guard lock(m.mu);
    auto it = m.limits.find(dev);
    if (it != m.limits.end()) {
      *out = it->second;
      return CUDA_SUCCESS;
    }
  }
  LaunchLimits l;
  const std::pair<CUdevice_attribute, int*> attrs[] = {
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &l.max_threads_per_block},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, &l.max_block[0]},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, &l.max_block[1]},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, &l.max_block[2]},
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, &l.max_grid[0]},
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, &l.max_grid[1]},
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, &l.max_grid[2]},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &l.max_shared_optin},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, &l.max_shared_default},
  };
  for (auto& [a, p] : attrs) {
    if (CUresult e = cuDeviceGetAttribute(p, a, dev)) return e;
  }
  std::lock_guard lock(m.mu);
  m.limits[dev] = l;
  *out = l;
  return CUDA_SUCCESS;
}

}  // namespace cuwire::client

// ---------------------------------------------------------------------------------------------
// Driver functions: contexts

using namespace cuwire;
using namespace cuwire::client;

extern "C" {

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  ContextTable& t = contexts();
  std::lock_guard lock(t.mu);
  PrimaryState* p = nullptr;
  if (CUresult e = ensure_primary_locked(t, dev, &p)) return e;
  ++p->refs;
  *pctx = ctx_of(p->id);
  return CUDA_SUCCESS;
}

// The server keeps a released primary context until the session ends (or a reset): its
// memory stays valid, which only differs from CUDA for an app that releases the last
// reference and then reads a pointer it should consider gone.
CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  ContextTable& t = contexts();
  std::lock_guard lock(t.mu);
  auto it = t.primaries.find(dev);
  if (it == t.primaries.end() || it->second.refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --it->second.refs;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  if (flags &
      ~(CU_CTX_SCHED_MASK | CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_SYNC_MEMOPS | CU_CTX_MAP_HOST)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int count = 0;
  if (CUresult e = cuDeviceGetCount(&count)) return e;
  if (dev < 0 || dev >= count) return CUDA_ERROR_INVALID_DEVICE;
  ContextTable& t = contexts();
  std::lock_guard lock(t.mu);
  t.primaries[dev].flags = flags;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  int count = 0;
  if (CUresult e = cuDeviceGetCount(&count)) return e;
  if (dev < 0 || dev >= count) return CUDA_ERROR_INVALID_DEVICE;
  ContextTable& t = contexts();
  std::lock_guard lock(t.mu);
  auto it = t.primaries.find(dev);
  *flags = it == t.primaries.end() ? 0 : it->second.flags;
  *active = it != t.primaries.end() && it->second.refs > 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  ContextTable& t = contexts();
  std::lock_guard lock(t.mu);
  auto it = t.primaries.find(dev);
  if (it == t.primaries.end() || !it->second.created) return CUDA_SUCCESS;
  PrimaryState& p = it->second;
  if (CUresult e = send_context_call(CallId::k_cuDevicePrimaryCtxReset_v2, p.id, dev, p.flags)) {
    return e;
  }
  p.refs = 0;
  // Device memory of the old context is gone: forget it.
  MemoryTable& m = memory();
  std::lock_guard mlock(m.mu);
  m.device.clear();
  m.layouts.clear();
  managed::forget_all();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                                CUdevice dev) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (params &&
      (params->execAffinityParams || params->numExecAffinityParams || params->cigParams)) {
    return unsupported("cuCtxCreate_v4 with execution affinity or CIG parameters");
  }
  uint64_t id = mint_handle();
  if (CUresult e = send_context_call(CallId::k_cuCtxCreate_v4, id, dev, flags)) return e;
  {
    ContextTable& t = contexts();
    std::lock_guard lock(t.mu);
    t.contexts[id] = ContextInfo{dev, flags, false};
  }
  *pctx = ctx_of(id);
  // Too deep a stack: the context exists but is not made current, as memory would not allow.
  if (!t_stack.push_back(id)) return CUDA_ERROR_OUT_OF_MEMORY;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) {
  uint64_t id = id_of(ctx);
  ContextInfo info;
  if (!ctx || !context_info(id, &info)) return CUDA_ERROR_INVALID_CONTEXT;
  // A primary context is released, a green context's by cuGreenCtxDestroy.
  if (info.primary || info.green) return CUDA_ERROR_INVALID_CONTEXT;
  ArgWriter w(CallId::k_cuCtxDestroy_v2);
  w.put(id);
  if (CUresult e = w.call_result()) return e;
  {
    ContextTable& t = contexts();
    std::lock_guard lock(t.mu);
    t.contexts.erase(id);
  }
  t_stack.erase_all(id);
  forget_cached(id);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) {
  ContextInfo info;
  if (!ctx || !context_info(id_of(ctx), &info)) return CUDA_ERROR_INVALID_CONTEXT;
  if (!t_stack.push_back(id_of(ctx))) return CUDA_ERROR_OUT_OF_MEMORY;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext* pctx) {
  if (t_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = ctx_of(t_stack.back());
  t_stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  if (!ctx) {
    if (!t_stack.empty()) t_stack.pop_back();
    return CUDA_SUCCESS;
  }
  ContextInfo info;
  if (!context_info(id_of(ctx), &info)) return CUDA_ERROR_INVALID_CONTEXT;
  if (t_stack.empty()) {
    t_stack.push_back(id_of(ctx));
  } else {
    t_stack.back() = id_of(ctx);
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext* pctx) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = ctx_of(current_context_id());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  return current_device(device);
}

CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!ctx) return current_device(device);
  ContextInfo info;
  if (!context_info(id_of(ctx), &info)) return CUDA_ERROR_INVALID_CONTEXT;
  *device = info.device;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Pinned host memory lives in the client: the app reads and writes it directly, and copies to
// and from it go over the wire like any host memory. Under unified addressing kernels may also
// use it at its host address, so each block is backed by a managed allocation of the session
// at the same address (managed_memory.h). Until a kernel may use it the block is plain memory
// that only the app writes, and copies through it take the fast path; it is tracked like
// managed memory (pushed before calls, pulled after synchronisations) from the first launch
// with a parameter pointing into it, from cuMemHostGetDevicePointer, or from the start for
// DEVICEMAP memory. A pointer into an untracked block that a kernel finds only in device
// memory reads the block as it was allocated (zeros). CUWIRE_PINNED_DEVICE=0, or a session
// that cannot back the block (its memory cap), gives plain host memory kernels cannot reach.
// Memory the app registers has no device address here.

namespace {
bool pinned_backing_wanted() {
  static const bool wanted = [] {
    const char* v = std::getenv("CUWIRE_PINNED_DEVICE");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return wanted;
}
}  // namespace

CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  if (!pp) return CUDA_ERROR_INVALID_VALUE;
  if (Flags &
      ~(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  MemoryTable& m = memory();
  CUdeviceptr d = 0;
  size_t span = 0;
  if (pinned_backing_wanted() && managed::alloc_backed(bytesize, &d, &span) == CUDA_SUCCESS) {
    const bool track = Flags & CU_MEMHOSTALLOC_DEVICEMAP;
    if (track && !managed::adopt(d, span, bytesize)) {
      cuMemFree_v2(d);
      munmap(reinterpret_cast<void*>(d), span);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    std::lock_guard lock(m.mu);
    m.pinned[d] = PinnedBlock{bytesize, Flags, true, track, true, span, 0};
    if (!track) g_dormant.fetch_add(1);
    for (uintptr_t lo = g_backed_lo.load(); d < lo && !g_backed_lo.compare_exchange_weak(lo, d);) {
    }
    for (uintptr_t hi = g_backed_hi.load();
         d + span > hi && !g_backed_hi.compare_exchange_weak(hi, d + span);) {
    }
    *pp = reinterpret_cast<void*>(d);
    return CUDA_SUCCESS;
  }
  if (Flags & CU_MEMHOSTALLOC_DEVICEMAP) return CUDA_ERROR_OUT_OF_MEMORY;
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytesize ? bytesize : 1) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard lock(m.mu);
  m.pinned[reinterpret_cast<uintptr_t>(p)] = PinnedBlock{bytesize, Flags, true, false, false, 0, 0};
  *pp = p;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocHost_v2(void** pp, size_t bytesize) {
  return cuMemHostAlloc(pp, bytesize, 0);
}

CUresult CUDAAPI cuMemFreeHost(void* p) {
  PinnedBlock b;
  {
    MemoryTable& m = memory();
    std::lock_guard lock(m.mu);
    auto it = m.pinned.find(reinterpret_cast<uintptr_t>(p));
    if (it == m.pinned.end() || !it->second.owned) return CUDA_ERROR_INVALID_VALUE;
    b = it->second;
    if (b.backed && !b.mapped) g_dormant.fetch_sub(1);
    m.pinned.erase(it);
  }
  CUresult e = CUDA_SUCCESS;
  // A tracked block's mirror is unmapped with its allocation (note_free).
  if (b.backed) e = cuMemFree_v2(reinterpret_cast<CUdeviceptr>(p));
  if (b.mapped) return e;
  if (b.span) {
    munmap(p, b.span);
  } else {
    std::free(p);
  }
  return e;
}

CUresult CUDAAPI cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  if (!p || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (find_pinned(p, nullptr, nullptr, nullptr)) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  MemoryTable& m = memory();
  std::lock_guard lock(m.mu);
  m.pinned[reinterpret_cast<uintptr_t>(p)] =
      PinnedBlock{bytesize, Flags, false, false, false, 0, 0};
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostUnregister(void* p) {
  uint64_t device = 0;
  {
    MemoryTable& m = memory();
    std::lock_guard lock(m.mu);
    auto it = m.pinned.find(reinterpret_cast<uintptr_t>(p));
    if (it == m.pinned.end() || it->second.owned) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    device = it->second.device;
    m.pinned.erase(it);
  }
  if (device) {
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    managed::forget(reinterpret_cast<uintptr_t>(p) / page * page);  // the app's pages stay
    cuMemFree_v2(device);
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostGetFlags(unsigned int* pFlags, void* p) {
  if (!pFlags) return CUDA_ERROR_INVALID_VALUE;
  unsigned flags = 0;
  if (!find_pinned(p, nullptr, nullptr, &flags)) return CUDA_ERROR_INVALID_VALUE;
  *pFlags = flags;
  return CUDA_SUCCESS;
}

// Backed pinned memory has its host address on the device too (and is tracked from now on).
// Registered memory gets a device copy at another address on first asking, kept coherent
// like managed memory from then on (the app chose the host address, which the device may not
// have free). Other host memory is out of the remote GPU's reach.
CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  if (!pdptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  adopt_block(reinterpret_cast<uintptr_t>(p));
  MemoryTable& m = memory();
  std::unique_lock lock(m.mu);
  auto it = pinned_block(m, p);
  if (it == m.pinned.end()) return CUDA_ERROR_INVALID_VALUE;
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (!it->second.owned) {
    if (!it->second.device) {
      const uintptr_t base = it->first;
      const size_t size = it->second.size;
      lock.unlock();  // calls go out; the tracker's lock comes before m.mu
      CUdeviceptr d = 0;
      LibraryCalls library;  // the registration's backing, for a call CUDA allows in captures
      if (CUresult e = managed::alloc_device_copy(size, &d)) return e;
      if (!managed::track_registered(base, size, d)) {
        cuMemFree_v2(d);
        return unsupported(
            "cuMemHostGetDevicePointer (registered memory sharing a page with "
            "other tracked memory)");
      }
      lock.lock();
      auto again = m.pinned.find(base);
      if (again == m.pinned.end()) return CUDA_ERROR_INVALID_VALUE;  // unregistered meanwhile
      again->second.device = d;
      *pdptr = d + (a - base);
      return CUDA_SUCCESS;
    }
    *pdptr = it->second.device + (a - it->first);
    return CUDA_SUCCESS;
  }
  if (!it->second.mapped) {
    return unsupported(
        "cuMemHostGetDevicePointer (pinned memory without a device allocation "
        "behind it)");
  }
  *pdptr = a;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Pointer attributes, answered from the client's tables.

namespace {

// The device address of pinned memory at p (0: none yet): backed memory has its host address
// on the device too; registered memory has its device copy once cuMemHostGetDevicePointer made
// it. *registered: p is registered memory.
CUdeviceptr pinned_device_address(const void* p, bool* registered) {
  MemoryTable& m = memory();
  std::lock_guard lock(m.mu);
  auto it = pinned_block(m, p);
  *registered = false;
  if (it == m.pinned.end()) return 0;
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (it->second.owned) return it->second.backed ? a : 0;
  *registered = true;
  return it->second.device ? it->second.device + (a - it->first) : 0;
}

CUresult pointer_attribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr,
                           bool lenient) {
  uint64_t base = 0;
  size_t size = 0;
  void* hbase = nullptr;
  unsigned hflags = 0;
  bool dev = find_device_allocation(ptr, &base, &size);
  // Managed memory lives on the device and is mapped at the same address on the host.
  bool is_managed = dev && managed::find(ptr, nullptr, nullptr);
  bool host = !dev && find_pinned(reinterpret_cast<void*>(ptr), &hbase, &size, &hflags);
  if (host) base = reinterpret_cast<uintptr_t>(hbase);
  if (!dev && !host) {
    if (!lenient) return CUDA_ERROR_INVALID_VALUE;
  }
  CUdevice device = 0;
  current_device(&device);
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) = (dev || host) ? ctx_of(current_context_id()) : nullptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) = dev ? CU_MEMORYTYPE_DEVICE : host ? CU_MEMORYTYPE_HOST : 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: {
      // Pinned memory is mapped for the device, as under unified addressing. Registered memory
      // gets its device copy when this asks for it alone, as cuMemHostGetDevicePointer; a
      // query of several attributes (cudaPointerGetAttributes, which libraries call to learn a
      // pointer's kind) reports a copy only once one was made.
      CUdeviceptr d = dev ? ptr : 0;
      if (host) {
        bool registered = false;
        d = pinned_device_address(reinterpret_cast<void*>(ptr), &registered);
        if (!d && registered && !lenient &&
            cuMemHostGetDevicePointer_v2(&d, reinterpret_cast<void*>(ptr), 0) != CUDA_SUCCESS) {
          d = 0;
        }
      }
      if (!d && !lenient) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<CUdeviceptr*>(data) = d;
      return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (!host && !is_managed && !lenient) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = host || is_managed ? reinterpret_cast<void*>(ptr) : nullptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_MAPPED:
      *static_cast<int*>(data) = dev || host;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      *static_cast<unsigned long long*>(data) = base;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<int*>(data) = is_managed;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
      *static_cast<int*>(data) = 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = (dev || host) ? device : -2;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = base;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) = size;
      return CUDA_SUCCESS;
    // The mapping a pointer lies in: a virtual-memory mapping is its own range in the table.
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      if (!dev && !lenient) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) =
          dev ? reinterpret_cast<void*>(static_cast<uintptr_t>(base)) : nullptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
      if (!dev && !lenient) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<size_t*>(data) = dev ? size : 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
      *static_cast<unsigned long long*>(data) = 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      *static_cast<unsigned*>(data) = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: {
      // The pool a stream-ordered allocation came from: the server's to say (a round trip).
      CUmemoryPool pool = nullptr;
      if (dev) {
        ArgWriter w(CallId::k_cuPointerGetAttribute);
        w.put(static_cast<uint32_t>(attribute));
        w.put(static_cast<uint64_t>(ptr));
        if (CUresult e = w.call_for_handle(&pool); e != CUDA_SUCCESS && !lenient) return e;
      }
      *static_cast<CUmemoryPool*>(data) = pool;
      return CUDA_SUCCESS;
    }
    default:
      return lenient ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }
}
}  // namespace

// The one settable attribute, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS (Open MPI and UCX set it on
// buffers they hand to the network): synchronous copies to and from the memory then complete
// before they return, which every synchronous copy here does already; any value is accepted for
// memory CUDA knows.
CUresult CUDAAPI cuPointerSetAttribute(const void* value, CUpointer_attribute attribute,
                                       CUdeviceptr ptr) {
  if (!value || attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS) return CUDA_ERROR_INVALID_VALUE;
  if (is_device_pointer(ptr) ||
      find_pinned(reinterpret_cast<void*>(ptr), nullptr, nullptr, nullptr)) {
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  return pointer_attribute(data, attribute, ptr, false);
}

// As the driver does, memory this process does not know is reported as unregistered host
// memory (type 0) rather than as an error.
CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute* attributes,
                                        void** data, CUdeviceptr ptr) {
  if (!attributes || !data) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < numAttributes; ++i) {
    if (!data[i]) continue;
    if (CUresult e = pointer_attribute(data[i], attributes[i], ptr, true)) return e;
  }
  return CUDA_SUCCESS;
}

}  // extern "C"
