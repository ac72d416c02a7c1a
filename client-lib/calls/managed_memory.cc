// Managed memory: host mirrors at device addresses, page-granular write tracking, push before
// calls and pull after synchronisation (managed_memory.h), and the driver functions for it.

#include "client-lib/calls/managed_memory.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "client-lib/core/client_state.h"
#include "generated/call_ids.h"
#include "protocol/memory_runs.h"

namespace cuwire::client::managed {
namespace {

// One managed allocation as the signal handler sees it. A slot is free while base == 0; it is
// filled, then published by storing base (release), and retired by storing base = 0 first.
struct Slot {
  std::atomic<uintptr_t> base{0};
  std::atomic<size_t> span{0};                        // mapped bytes, whole pages
  std::atomic<std::atomic<uint8_t>*> dirty{nullptr};  // one flag per page
  std::atomic<CUcontext> ctx{nullptr};                // the context it was allocated in
  size_t app_bytes = 0;  // what the app asked for; guarded by Table::mu
  // Registered memory (track_registered): the device copy is at host + delta, only
  // [lo, hi) of the pages is the app's registration (pulls write no byte outside it), and the
  // pages are the app's own (never unmapped here). Guarded by Table::mu.
  uint64_t delta = 0;
  uintptr_t lo = 0, hi = 0;
  bool own_map = true;
  // Zero-copy memory: host memory mapped for the device (pinned or registered), which the host
  // may write while kernels run, as zero-copy programs do (a flag a running kernel polls); a
  // write there does not wait for the device (settle_before_host_write). Since kernels may
  // write other bytes of a page meanwhile, a push sends only the bytes the host changed: each
  // page's twin keeps its bytes as they were when the host began writing it (the fault, or a
  // copy's reply about to land), and the push sends what differs from it (kDirtyTwin). Span
  // bytes, reserved lazily (MAP_NORESERVE); null for managed memory.
  std::atomic<uint8_t*> twin{nullptr};
};

// A page's state in Slot::dirty.
constexpr uint8_t kClean = 0;
constexpr uint8_t kDirty = 1;      // the push sends the whole page
constexpr uint8_t kDirtyTwin = 2;  // the push sends the bytes that differ from the page's twin

// Managed allocations one process may hold at a time (the handler scans them linearly).
constexpr size_t kMaxSlots = 4096;
// Largest single transfer of a push or pull (well under the frame's bulk limit).
constexpr size_t kMaxTransfer = size_t{256} << 20;

Slot g_slots[kMaxSlots];
std::atomic<size_t> g_slot_end{0};     // slots [0, g_slot_end) have ever been used
std::atomic<size_t> g_live{0};         // mirrors currently mapped: the hooks' fast path
std::atomic<bool> g_any_dirty{false};  // set by the handler, cleared by a push
std::atomic<int> g_pushing{0};         // pushes under way (push_dirty)
// A call that may write device memory went out since the last full pull.
std::atomic<bool> g_device_stale{false};
const size_t g_page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
struct sigaction g_previous;           // the SIGSEGV action we chain to
thread_local bool t_inside = false;    // this thread is pushing or pulling: no hooks
thread_local bool t_settling = false;  // this thread's fault handler is settling the device
thread_local bool t_wrote = false;     // this thread dirtied a page since its last push_dirty

struct Table {
  std::mutex mu;                      // guards table changes and serialises pushes and pulls
  std::map<uint64_t, Slot*> by_base;  // guarded by mu
  // The mirrors of each library's __managed__ variables, by their base (guarded by mu).
  std::multimap<CUlibrary, uint64_t> variables;
  // Libraries whose variables were asked for with no context current: the primary context of
  // device 0 was retained for them (their home) until they are unloaded (guarded by mu).
  std::map<CUlibrary, CUdevice> homes;
};
Table& table() {
  static Table* t = new Table();  // leaked: atexit handlers still call into the driver
  return *t;
}

// ---- the fault handler: async-signal-safe code only (atomics, mprotect, sigaction).

void chain(int sig, siginfo_t* info, void* uctx) {
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) {
      g_previous.sa_sigaction(sig, info, uctx);
      return;
    }
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  // Default action: restore it; returning re-runs the faulting access, which now kills.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigaction(sig, &dfl, nullptr);
}

// The host is about to write a mirror page while device work that may write managed memory is
// queued or running (a launch since the last full synchronisation). Left alone, one side's
// writes would be lost: the next push overwrites what the device wrote, or a pull what the
// host wrote (host and device atomics on one managed word). Instead the write waits for the
// device, as if the app had synchronised first, and the mirrors are refreshed: the host's
// write then follows the device's, one of the orders a GPU with concurrent managed access
// allows. Not async-signal-safe: it makes driver calls from the handler, which is sound only
// because the fault comes from the app's own access to a mirror, never from inside this
// library with a lock held (the library's own accesses run with t_inside set).
void settle_before_host_write(CUcontext owner) {
  // A host function's thread makes no driver calls: its function's view of the device is
  // settled around it by the server (take_device_bytes, give_host_writes).
  if (t_inside || t_settling || on_host_call_thread() || !g_device_stale.load()) return;
  t_settling = true;
  LibraryCalls library;
  CUcontext current = nullptr;
  const bool pushed = (cuCtxGetCurrent(&current) != CUDA_SUCCESS || !current) && owner &&
                      cuCtxPushCurrent(owner) == CUDA_SUCCESS;
  cuCtxSynchronize();  // its hooks push dirty pages, then pull the clean ones
  if (pushed) cuCtxPopCurrent(&current);
  t_settling = false;
}

void on_fault(int sig, siginfo_t* info, void* uctx) {
  const int saved_errno = errno;
  const auto a = reinterpret_cast<uintptr_t>(info->si_addr);
  const size_t end = g_slot_end.load(std::memory_order_acquire);
  for (size_t i = 0; i < end; ++i) {
    Slot& s = g_slots[i];
    const uintptr_t b = s.base.load(std::memory_order_acquire);
    if (!b || a - b >= s.span.load(std::memory_order_relaxed)) continue;
    const size_t page = (a - b) / g_page;
    std::atomic<uint8_t>& state = s.dirty.load(std::memory_order_relaxed)[page];
    uint8_t mark = kDirty;
    if (uint8_t* twin = s.twin.load(std::memory_order_relaxed)) {
      // A clean page is still read-only: no write of the host's is in it yet. A dirty one
      // (protected while all of it waits for its first push) stays whole.
      const uint8_t was = state.load(std::memory_order_acquire);
      if (was == kClean) {
        std::memcpy(twin + page * g_page, reinterpret_cast<const void*>(b + page * g_page), g_page);
        mark = kDirtyTwin;
      } else {
        mark = was;
      }
    } else {
      settle_before_host_write(s.ctx.load(std::memory_order_relaxed));
    }
    // Dirty before writable: a push that sees the page clean has not lost this write yet.
    state.store(mark, std::memory_order_release);
    t_wrote = true;
    g_any_dirty.store(true, std::memory_order_release);
    mprotect(reinterpret_cast<void*>(b + page * g_page), g_page, PROT_READ | PROT_WRITE);
    errno = saved_errno;
    return;
  }
  errno = saved_errno;
  chain(sig, info, uctx);
}

void install_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_previous);
  });
}

size_t pages_of(const Slot& s) { return s.span.load(std::memory_order_relaxed) / g_page; }

void protect(uintptr_t addr, size_t n, int prot) {
  mprotect(reinterpret_cast<void*>(addr), n, prot);
}

// Runs [first, last) of pages of s that are dirty (any dirty state), or clean, as `dirty` says,
// each handed to fn.
template <typename Fn>
CUresult for_each_run(Slot& s, bool dirty, Fn&& fn) {
  const uintptr_t b = s.base.load(std::memory_order_relaxed);
  std::atomic<uint8_t>* d = s.dirty.load(std::memory_order_relaxed);
  const size_t n = pages_of(s);
  auto wanted = [&](size_t k) { return (d[k].load(std::memory_order_acquire) != kClean) == dirty; };
  for (size_t i = 0; i < n;) {
    if (!wanted(i)) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < n && (j - i) * g_page < kMaxTransfer && wanted(j)) ++j;
    if (CUresult e = fn(b + i * g_page, (j - i) * g_page, d + i, j - i)) return e;
    i = j;
  }
  return CUDA_SUCCESS;
}

// Pages of [p, p + n) that lie in mirrors become writable and dirty, as if the host wrote them.
void mark_written(uintptr_t p, size_t n) {
  if (n == 0) return;
  Table& t = table();
  std::lock_guard lock(t.mu);
  auto it = t.by_base.upper_bound(p + n - 1);
  while (it != t.by_base.begin()) {
    --it;
    Slot& s = *it->second;
    const uintptr_t b = it->first, e = b + s.span.load(std::memory_order_relaxed);
    if (e <= p) break;
    const uintptr_t lo = std::max(b, p), hi = std::min(e, p + n);
    std::atomic<uint8_t>* d = s.dirty.load(std::memory_order_relaxed);
    uint8_t* twin = s.twin.load(std::memory_order_relaxed);
    for (size_t page = (lo - b) / g_page; b + page * g_page < hi; ++page) {
      if (d[page].load() != kClean) continue;
      if (twin) {
        std::memcpy(twin + page * g_page, reinterpret_cast<const void*>(b + page * g_page), g_page);
      }
      d[page].store(twin ? kDirtyTwin : kDirty);
    }
    const uintptr_t first = b + (lo - b) / g_page * g_page;
    protect(first, hi - first, PROT_READ | PROT_WRITE);
    g_any_dirty.store(true);
  }
}

// Calls that never write device memory: after them the mirrors need no pull.
bool leaves_device_memory_alone(uint32_t id) {
  switch (static_cast<CallId>(id)) {
    case CallId::k_cuMemcpyDtoH_v2:
    case CallId::k_cuMemcpyDtoHAsync_v2:
    case CallId::k_cuCtxSynchronize:
    case CallId::k_cuCtxSynchronize_v2:
    case CallId::k_cuStreamSynchronize:
    case CallId::k_cuEventSynchronize:
    case CallId::k_cuStreamQuery:
    case CallId::k_cuEventQuery:
    case CallId::k_cuEventRecord:
    case CallId::k_cuEventElapsedTime_v2:
    case CallId::k_cuEventCreate:
    case CallId::k_cuEventDestroy_v2:
    case CallId::k_cuStreamCreate:
    case CallId::k_cuStreamDestroy_v2:
    case CallId::k_cuMemGetInfo_v2:
    case CallId::k_cuMemGetAddressRange_v2:
    case CallId::k_cuMemAlloc_v2:
    case CallId::k_cuMemFree_v2:
    case CallId::k_cuMemAllocManaged:
    case CallId::k_cuDeviceGetAttribute:
    case CallId::k_cuFuncGetParamInfo:
    case CallId::k_cuModuleGetFunction:
    case CallId::k_cuLibraryGetKernel:
      return true;
    default:
      return false;
  }
}

// Whether a synchronising call waits for all device work (then one pull covers everything).
bool synchronises_everything(uint32_t id) {
  return id == static_cast<uint32_t>(CallId::k_cuCtxSynchronize) ||
         id == static_cast<uint32_t>(CallId::k_cuCtxSynchronize_v2);
}

void unmap_locked(Table& t, std::map<uint64_t, Slot*>::iterator it) {
  Slot& s = *it->second;
  const size_t span = s.span.load(std::memory_order_relaxed);
  s.base.store(0, std::memory_order_release);  // the handler stops matching it first
  if (s.own_map) {
    munmap(reinterpret_cast<void*>(it->first), span);
  } else {
    protect(it->first, span, PROT_READ | PROT_WRITE);  // the app's pages, as they were
  }
  s.own_map = true;
  if (uint8_t* twin = s.twin.exchange(nullptr)) munmap(twin, span);
  s.delta = 0;
  s.lo = s.hi = 0;
  std::atomic<uint8_t>* d = s.dirty.exchange(nullptr);
  munmap(d, std::max<size_t>(span / g_page, 1));
  s.span.store(0);
  t.by_base.erase(it);
  g_live.fetch_sub(1);
}

struct InsideGuard {
  InsideGuard() { t_inside = true; }
  ~InsideGuard() { t_inside = false; }
  InsideGuard(const InsideGuard&) = delete;
  InsideGuard& operator=(const InsideGuard&) = delete;
};

// The views of the host function running now (take_device_bytes .. give_host_writes).
std::mutex g_held_mu;
std::vector<MirrorRange> g_held;  // guarded by g_held_mu

// Whether [device, device + n) overlaps one of `ranges`.
bool overlaps_any(const std::vector<MirrorRange>& ranges, uint64_t device, size_t n) {
  for (const MirrorRange& r : ranges) {
    if (device < r.device + r.bytes && r.device < device + n) return true;
  }
  return false;
}

bool held_by_host_call(uint64_t device, size_t n) {
  std::lock_guard lock(g_held_mu);
  return overlaps_any(g_held, device, n);
}

// [a, a + n) clipped to the slot's registration, if it has one: false when nothing is left.
bool clip(const Slot& s, uintptr_t* a, size_t* n) {
  if (s.hi == 0) return true;
  const uintptr_t lo = std::max(*a, s.lo), hi = std::min(*a + *n, s.hi);
  if (lo >= hi) return false;
  *a = lo;
  *n = hi - lo;
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The page tracker

namespace {
// Anonymous memory at exactly addr, or false (errno set).
bool map_at(uint64_t addr, size_t bytes, int prot) {
  void* want = reinterpret_cast<void*>(addr);
  void* p = mmap(want, bytes, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED) return false;
  if (p != want) {  // a kernel before 4.17 treats the flag as a hint
    munmap(p, bytes);
    errno = EEXIST;
    return false;
  }
  return true;
}

// Tracks the mapping at addr (already mapped and protected as it should be); every page
// starts dirty when `all_dirty`, so the next push sends the whole range.
bool track_locked(Table& t, uint64_t addr, size_t bytes, size_t app_bytes, bool all_dirty) {
  size_t i = 0;
  while (i < kMaxSlots && g_slots[i].base.load() != 0) ++i;
  if (i == kMaxSlots) {
    errno = ENOMEM;
    return false;
  }
  void* d = mmap(nullptr, std::max<size_t>(bytes / g_page, 1), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (d == MAP_FAILED) return false;
  if (all_dirty) std::memset(d, 1, bytes / g_page);
  install_handler();
  Slot& s = g_slots[i];
  s.app_bytes = app_bytes;
  CUcontext ctx = nullptr;
  cuCtxGetCurrent(&ctx);
  s.ctx.store(ctx, std::memory_order_relaxed);
  s.span.store(bytes, std::memory_order_relaxed);
  s.dirty.store(static_cast<std::atomic<uint8_t>*>(d), std::memory_order_relaxed);
  s.base.store(addr, std::memory_order_release);
  size_t end = g_slot_end.load();
  while (end < i + 1 && !g_slot_end.compare_exchange_weak(end, i + 1)) {
  }
  t.by_base[addr] = &s;
  g_live.fetch_add(1);
  if (all_dirty) g_any_dirty.store(true);
  return true;
}
}  // namespace

namespace {
// Makes tracked slot s zero-copy memory, with twins for its pages (Slot::twin).
bool give_twin(Slot& s) {
  const size_t span = s.span.load();
  void* twin = mmap(nullptr, span, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (twin == MAP_FAILED) return false;
  s.twin.store(static_cast<uint8_t*>(twin));
  return true;
}
}  // namespace

bool map_mirror(uint64_t addr, size_t bytes, size_t app_bytes) {
  Table& t = table();
  std::lock_guard lock(t.mu);
  if (!map_at(addr, bytes, PROT_READ)) return false;
  if (!track_locked(t, addr, bytes, app_bytes, false)) {
    const int e = errno;
    munmap(reinterpret_cast<void*>(addr), bytes);
    errno = e;
    return false;
  }
  return true;
}

bool map_untracked(uint64_t addr, size_t bytes) {
  return map_at(addr, bytes, PROT_READ | PROT_WRITE);
}

namespace {
// The whole pages around [p, p + n): [*first, *first + *span).
void whole_pages(uintptr_t p, size_t n, uintptr_t* first, size_t* span) {
  *first = p / g_page * g_page;
  *span = (p + n - *first + g_page - 1) / g_page * g_page;
}

// The tracked range with pages in [first, first + span), else t.by_base.end(). Called with t.mu
// held.
std::map<uint64_t, Slot*>::iterator overlap_locked(Table& t, uintptr_t first, size_t span) {
  auto it = t.by_base.lower_bound(first + span);
  if (it == t.by_base.begin()) return t.by_base.end();
  --it;
  return it->first + it->second->span.load() > first ? it : t.by_base.end();
}
}  // namespace

bool track_registered(uintptr_t p, size_t n, uint64_t device) {
  uintptr_t first = 0;
  size_t span = 0;
  whole_pages(p, n, &first, &span);
  Table& t = table();
  std::lock_guard lock(t.mu);
  // Pages shared with another tracked range cannot have two device copies.
  if (overlap_locked(t, first, span) != t.by_base.end()) {
    errno = EEXIST;
    return false;
  }
  if (!track_locked(t, first, span, n, true)) return false;
  Slot& s = *t.by_base[first];
  s.own_map = false;
  if (!give_twin(s)) {
    unmap_locked(t, t.by_base.find(first));
    return false;
  }
  s.lo = p;
  s.hi = p + n;
  s.delta = device - p;  // host byte p lives at device
  protect(first, span, PROT_READ);
  return true;
}

CUresult mirror_variable(uint64_t p, size_t n, CUlibrary library) {
  if (n == 0 || p + n < p) return CUDA_ERROR_INVALID_VALUE;
  uintptr_t first = 0;
  size_t span = 0;
  whole_pages(p, n, &first, &span);
  Table& t = table();
  std::lock_guard lock(t.mu);
  auto it = overlap_locked(t, first, span);
  if (it != t.by_base.end()) {
    const Slot& s = *it->second;
    if (it->first == first && s.lo == p && s.hi == p + n) return CUDA_SUCCESS;  // asked again
    errno = EEXIST;  // a host page already mirrors another managed range
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (!map_at(first, span, PROT_READ | PROT_WRITE)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult rc;
  {
    InsideGuard g;
    LibraryCalls library_calls;
    rc = cuMemcpyDtoH_v2(reinterpret_cast<void*>(p), p, n);  // its initial value
  }
  if (rc == CUDA_SUCCESS && !track_locked(t, first, span, p + n - first, false))
    rc = CUDA_ERROR_OUT_OF_MEMORY;
  if (rc != CUDA_SUCCESS) {
    munmap(reinterpret_cast<void*>(first), span);
    return rc;
  }
  Slot& s = *t.by_base[first];
  s.lo = p;  // pushes and pulls move the variable's bytes only
  s.hi = p + n;
  protect(first, span, PROT_READ);
  t.variables.emplace(library, first);
  return CUDA_SUCCESS;
}

bool adopt(uint64_t addr, size_t bytes, size_t app_bytes) {
  Table& t = table();
  std::lock_guard lock(t.mu);
  if (t.by_base.count(addr)) return true;
  if (!track_locked(t, addr, bytes, app_bytes, true)) return false;
  if (Slot& s = *t.by_base[addr]; !give_twin(s)) {
    s.own_map = false;  // the block's memory stays, plain and writable, as it was
    unmap_locked(t, t.by_base.find(addr));
    return false;
  }
  // Dirty first, then protected: the push sends everything; later host writes fault again.
  protect(addr, bytes, PROT_READ);
  return true;
}

namespace {
// How long a bounded wait for the table's lock lasts (set_bounded_wait).
std::atomic<int64_t> g_bounded_wait_ms{500};

// The table's lock; bounded: given up after g_bounded_wait_ms.
bool lock_table(std::unique_lock<std::mutex>& lock, bool bounded) {
  if (!bounded) {
    lock.lock();
    return true;
  }
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(g_bounded_wait_ms.load(std::memory_order_relaxed));
  while (!lock.try_lock()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// Which dirty runs a push takes (by their device range); the others stay dirty and writable.
using RunFilter = std::function<bool(uint64_t device, size_t n)>;

using SendFn = std::function<CUresult(uint64_t, uint64_t, size_t)>;

// The runs [first, second) of the n bytes at `now` that differ from those at `old`. Runs fewer
// than kChangeGap bytes apart are one (the untouched high bytes of the numbers the host wrote
// would split a rewritten page into thousands of sends), and more than kMaxChanges of them are
// one from the first to the last: those unchanged bytes go along, and a kernel's write to just
// them meanwhile is lost. A flag apart from the rest of what the host wrote goes alone.
void changes(const uint8_t* now, const uint8_t* old, size_t n,
             std::vector<std::pair<size_t, size_t>>* runs) {
  constexpr size_t kChangeGap = 8, kMaxChanges = 32;
  runs->clear();
  for (size_t i = 0; i < n;) {
    while (i + 8 <= n && std::memcmp(now + i, old + i, 8) == 0) i += 8;
    while (i < n && now[i] == old[i]) ++i;
    if (i == n) break;
    size_t j = i + 1;
    while (j < n && now[j] != old[j]) ++j;
    if (!runs->empty() && i - runs->back().second < kChangeGap) {
      runs->back().second = j;
    } else {
      runs->emplace_back(i, j);
    }
    i = j;
  }
  if (runs->size() > kMaxChanges) {
    const std::pair<size_t, size_t> all{runs->front().first, runs->back().second};
    runs->assign(1, all);
  }
}

// Sends the host's changes to the dirty pages [a, a + n) of zero-copy slot s that lie in
// [from, from + len) (a registration's bytes): of a page with a twin (kDirtyTwin) the runs of
// bytes that differ from it (changes()), of any other the whole page; runs that meet are sent
// as one. Chunk
// by chunk, each chunk's pages are cleaned and their twins copied aside, then protected and
// compared with the copies: a write that faults meanwhile takes a new twin, which neither
// changes the comparison nor leaves that write unsent. A kernel's writes to the rest of a page
// the host wrote stay on the device.
CUresult push_zero_copy(const Slot& s, uintptr_t a, size_t n, std::atomic<uint8_t>* d,
                        uintptr_t from, size_t len, const SendFn& send) {
  constexpr size_t kChunkPages = 256;
  const uint8_t* twin = s.twin.load(std::memory_order_relaxed);
  const uintptr_t base = s.base.load(std::memory_order_relaxed), end = from + len;
  const size_t pages = n / g_page;
  std::vector<uint8_t> was(std::min(pages, kChunkPages) * g_page);
  uint8_t marks[kChunkPages];
  std::vector<std::pair<size_t, size_t>> runs;
  uintptr_t run_lo = 0, run_hi = 0;  // the run being gathered
  auto flush = [&]() -> CUresult {
    const uintptr_t lo = run_lo, hi = run_hi;
    run_lo = run_hi = 0;
    return hi > lo ? send(lo, lo + s.delta, hi - lo) : CUDA_SUCCESS;
  };
  auto add = [&](uintptr_t lo, uintptr_t hi) -> CUresult {
    if (run_hi > run_lo && run_hi == lo) {
      run_hi = hi;
      return CUDA_SUCCESS;
    }
    if (CUresult e = flush()) return e;
    run_lo = lo;
    run_hi = hi;
    return CUDA_SUCCESS;
  };
  for (size_t c = 0; c < pages; c += kChunkPages) {
    const size_t m = std::min(kChunkPages, pages - c);
    const uintptr_t chunk = a + c * g_page;
    for (size_t k = 0; k < m; ++k) {
      marks[k] = d[c + k].exchange(kClean, std::memory_order_acq_rel);
      if (marks[k] == kDirtyTwin) {
        std::memcpy(was.data() + k * g_page, twin + (chunk + k * g_page - base), g_page);
      }
    }
    protect(chunk, m * g_page, PROT_READ);
    CUresult rc = CUDA_SUCCESS;
    for (size_t k = 0; k < m && rc == CUDA_SUCCESS; ++k) {
      const uintptr_t page = chunk + k * g_page;
      const uintptr_t lo = std::max(page, from), hi = std::min(page + g_page, end);
      if (lo >= hi) continue;
      if (marks[k] != kDirtyTwin) {
        rc = add(lo, hi);
        continue;
      }
      changes(reinterpret_cast<const uint8_t*>(lo), was.data() + k * g_page + (lo - page), hi - lo,
              &runs);
      for (size_t r = 0; r < runs.size() && rc == CUDA_SUCCESS; ++r) {
        rc = add(lo + runs[r].first, lo + runs[r].second);
      }
    }
    if (rc == CUDA_SUCCESS) rc = flush();
    if (rc != CUDA_SUCCESS) {
      for (size_t k = 0; k < m; ++k) d[c + k].store(kDirty);  // the later chunks are still dirty
      return rc;
    }
  }
  return CUDA_SUCCESS;
}

// Sends every dirty page `wanted` takes (all, when it is empty), whatever g_any_dirty says
// (push_dirty clears it first).
CUresult push_pages(const SendFn& send, bool bounded, const RunFilter& wanted = {}) {
  Table& t = table();
  std::unique_lock lock(t.mu, std::defer_lock);
  if (!lock_table(lock, bounded)) {
    g_any_dirty.store(true);
    return CUDA_ERROR_NOT_READY;
  }
  bool kept = false;
  for (auto& [base, slot] : t.by_base) {
    const bool zero_copy = slot->twin.load(std::memory_order_relaxed) != nullptr;
    CUresult e = for_each_run(
        *slot, true, [&](uintptr_t a, size_t n, std::atomic<uint8_t>* d, size_t pages) {
          uintptr_t from = a;
          size_t len = n;
          const bool in_range = clip(*slot, &from, &len);
          if (in_range && wanted && !wanted(from + slot->delta, len)) {
            kept = true;  // left as it is, for another push
            return CUDA_SUCCESS;
          }
          CUresult rc = CUDA_SUCCESS;
          if (zero_copy) {
            rc = push_zero_copy(*slot, a, n, d, from, in_range ? len : 0, send);
          } else {
            // Clean, then protected, then sent: a write before the protection is in what is
            // sent, and one after it faults and marks the page again (cleaning after protecting
            // could erase that mark and leave the page writable and clean).
            for (size_t k = 0; k < pages; ++k) d[k].store(kClean, std::memory_order_release);
            protect(a, n, PROT_READ);
            if (in_range) rc = send(from, from + slot->delta, len);
            if (rc != CUDA_SUCCESS) {
              for (size_t k = 0; k < pages; ++k) d[k].store(kDirty);
            }
          }
          if (rc == CUDA_ERROR_NOT_READY) {  // the sender leaves these for a later push
            kept = true;
            return CUDA_SUCCESS;
          }
          return rc;
        });
    if (e != CUDA_SUCCESS) {
      g_any_dirty.store(true);
      return e;
    }
  }
  if (kept) g_any_dirty.store(true);
  return CUDA_SUCCESS;
}
}  // namespace

void set_bounded_wait(std::chrono::milliseconds wait) {
  g_bounded_wait_ms.store(wait.count(), std::memory_order_relaxed);
}

CUresult push_dirty(const std::function<CUresult(uint64_t, uint64_t, size_t)>& send,
                    const std::function<bool(uint64_t, size_t)>& wanted) {
  // A push of another thread under way may be sending this thread's writes (it cleared the
  // flag after they marked their pages): when this thread wrote since its last push, it then
  // waits for the table, so that they are on the device before its call goes out. The flag is
  // read first: a push that cleared it counted itself before, so a count read after the flag
  // sees it until it has ended. A thread that wrote nothing never waits for another's push.
  const bool wrote = std::exchange(t_wrote, false);
  if (!g_any_dirty.load() && (!wrote || g_pushing.load() == 0)) return CUDA_SUCCESS;
  g_pushing.fetch_add(1);
  g_any_dirty.store(false);
  const CUresult rc = push_pages(send, false, wanted);
  g_pushing.fetch_sub(1);
  return rc;
}

namespace {
// fetch(host, device, n, zero_copy): the device's bytes [device, device + n) to host address
// `host` (a mirror's bytes, or a buffer of pull_pages' own), of zero-copy memory or not.
using FetchFn = std::function<CUresult(uint64_t, uint64_t, size_t, bool)>;

// Of zero-copy slot s, the pages the host wrote that have twins (kDirtyTwin) take the bytes the
// device changed and the host did not (those equal to the twin's), in the page and in its twin:
// the host's own changes stay for the next push, a kernel's writes to the rest of the page reach
// the host. Bytes the device left alone are not touched, so no write of the host's to them is
// lost while this runs.
CUresult merge_written(Slot& s, const FetchFn& fetch, std::vector<uint8_t>* buf) {
  uint8_t* twin = s.twin.load(std::memory_order_relaxed);
  std::atomic<uint8_t>* d = s.dirty.load(std::memory_order_relaxed);
  const uintptr_t b = s.base.load(std::memory_order_relaxed);
  const size_t n = pages_of(s);
  for (size_t i = 0; i < n;) {
    if (d[i].load(std::memory_order_acquire) != kDirtyTwin) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < n && (j - i) * g_page < kMaxTransfer &&
           d[j].load(std::memory_order_acquire) == kDirtyTwin) {
      ++j;
    }
    uintptr_t at = b + i * g_page;
    size_t len = (j - i) * g_page;
    i = j;
    if (!clip(s, &at, &len)) continue;
    buf->resize(len);
    if (CUresult e = fetch(reinterpret_cast<uintptr_t>(buf->data()), at + s.delta, len, true)) {
      return e;
    }
    auto* page = reinterpret_cast<uint8_t*>(at);
    uint8_t* was = twin + (at - b);
    const uint8_t* now = buf->data();
    for (size_t k = 0; k < len; ++k) {
      if (now[k] != was[k] && page[k] == was[k]) {
        page[k] = now[k];
        was[k] = now[k];
      }
    }
  }
  return CUDA_SUCCESS;
}

// Refreshes every page that is not dirty with fetch, and merges the zero-copy pages the host
// wrote (merge_written).
CUresult pull_pages(const FetchFn& fetch, bool bounded) {
  Table& t = table();
  std::unique_lock lock(t.mu, std::defer_lock);
  if (!lock_table(lock, bounded)) return CUDA_ERROR_NOT_READY;
  std::vector<uint8_t> buf;
  for (auto& [base, slot] : t.by_base) {
    const bool zero_copy = slot->twin.load(std::memory_order_relaxed) != nullptr;
    CUresult e =
        for_each_run(*slot, false, [&](uintptr_t a, size_t n, std::atomic<uint8_t>*, size_t) {
          protect(a, n, PROT_READ | PROT_WRITE);
          uintptr_t to = a;
          size_t len = n;
          CUresult rc =
              clip(*slot, &to, &len) ? fetch(to, to + slot->delta, len, zero_copy) : CUDA_SUCCESS;
          protect(a, n, PROT_READ);
          return rc;
        });
    if (e == CUDA_SUCCESS && zero_copy) e = merge_written(*slot, fetch, &buf);
    if (e != CUDA_SUCCESS) return e;
  }
  return CUDA_SUCCESS;
}
}  // namespace

CUresult pull_clean(const std::function<CUresult(uint64_t, uint64_t, size_t)>& fetch,
                    bool bounded) {
  return pull_pages(
      [&](uint64_t host, uint64_t device, size_t n, bool) { return fetch(host, device, n); },
      bounded);
}

size_t dirty_pages() {
  Table& t = table();
  std::lock_guard lock(t.mu);
  size_t count = 0;
  for (auto& [base, slot] : t.by_base) {
    std::atomic<uint8_t>* d = slot->dirty.load();
    for (size_t i = 0; i < pages_of(*slot); ++i) count += d[i].load() != 0;
  }
  return count;
}

bool tracking() { return g_live.load(std::memory_order_acquire) != 0; }

std::vector<MirrorRange> mirror_ranges() {
  std::vector<MirrorRange> out;
  Table& t = table();
  std::lock_guard lock(t.mu);
  for (const auto& [base, slot] : t.by_base) {
    // The device copy: a registration's or a variable's bytes, or what the app allocated.
    if (slot->hi != 0) {
      out.push_back({slot->lo + slot->delta, slot->hi - slot->lo});
    } else if (slot->app_bytes) {
      out.push_back({base + slot->delta, slot->app_bytes});
    }
  }
  return out;
}

bool device_may_be_ahead() { return g_device_stale.load(); }

// The host-call thread waits for the table's lock half a second at most (bounded): another
// thread may hold it across a synchronous copy (a pull after a synchronisation, a push before a
// call) that waits for the very stream this function holds. Then the function sees the mirrors
// as they are, and its writes stay dirty for the next call to push.
void take_device_bytes(std::span<const uint8_t> runs, const std::vector<MirrorRange>& ranges) {
  {
    std::lock_guard lock(g_held_mu);
    g_held = ranges;
  }
  if (runs.empty()) return;
  std::map<uint64_t, std::span<const uint8_t>> by_device;
  if (!for_each_memory_run(runs, [&](uint64_t p, std::span<const uint8_t> b) {
        if (!b.empty()) by_device[p] = b;
        return true;
      })) {
    return;  // not what a server sends: nothing of it is used
  }
  InsideGuard g;
  pull_clean(
      [&](uint64_t host, uint64_t device, size_t n) {
        // Every run overlapping [device, device + n), by the part that overlaps.
        auto it = by_device.upper_bound(device);
        if (it != by_device.begin()) --it;
        for (; it != by_device.end() && it->first < device + n; ++it) {
          const uint64_t lo = std::max<uint64_t>(it->first, device);
          const uint64_t hi = std::min<uint64_t>(it->first + it->second.size(), device + n);
          if (lo >= hi) continue;
          std::memcpy(reinterpret_cast<void*>(host + (lo - device)),
                      it->second.data() + (lo - it->first), hi - lo);
        }
        return CUDA_SUCCESS;
      },
      true);
}

void give_host_writes(const std::vector<MirrorRange>& ranges, std::vector<uint8_t>* runs) {
  struct Release {
    ~Release() {
      std::lock_guard lock(g_held_mu);
      g_held.clear();
    }
  } release;
  if (ranges.empty()) return;
  InsideGuard g;
  // Every dirty page, not only when g_any_dirty is set: another thread's push may have cleared
  // it and be about to leave these pages dirty (held), setting it again only after this looked.
  auto in_view = [&](uint64_t device, size_t n) { return overlaps_any(ranges, device, n); };
  push_pages(
      [&](uint64_t host, uint64_t device, size_t n) {
        // The part of the run in each range (a run of whole pages may reach past the app's bytes,
        // which are not sent); in_view passes only runs that some range overlaps.
        for (const MirrorRange& r : ranges) {
          const uint64_t lo = std::max<uint64_t>(device, r.device);
          const uint64_t hi = std::min<uint64_t>(device + n, r.device + r.bytes);
          if (lo >= hi) continue;
          const MemoryRunHead h{lo, hi - lo};
          const auto* hb = reinterpret_cast<const uint8_t*>(&h);
          runs->insert(runs->end(), hb, hb + sizeof h);
          const auto* b = reinterpret_cast<const uint8_t*>(host + (lo - device));
          runs->insert(runs->end(), b, b + (hi - lo));
        }
        return CUDA_SUCCESS;
      },
      true, in_view);  // pages outside the views stay as they are, for the app's next push
}

bool find(uint64_t p, uint64_t* base, size_t* size) {
  if (g_live.load(std::memory_order_acquire) == 0) return false;
  Table& t = table();
  std::lock_guard lock(t.mu);
  auto it = t.by_base.upper_bound(p);
  if (it == t.by_base.begin()) return false;
  --it;
  if (p - it->first >= std::max<size_t>(it->second->app_bytes, 1)) return false;
  if (base) *base = it->first;
  if (size) *size = it->second->app_bytes;
  return true;
}

void forget(uint64_t base) {
  if (g_live.load(std::memory_order_acquire) == 0) return;
  Table& t = table();
  std::lock_guard lock(t.mu);
  auto it = t.by_base.find(base);
  if (it == t.by_base.end()) return;
  // With the allocation, under the table's lock: a new one at the same address, advised at
  // once, keeps its advice.
  forget_advice(base, it->second->span.load(std::memory_order_relaxed));
  unmap_locked(t, it);
}

void forget_all() {
  Table& t = table();
  std::lock_guard lock(t.mu);
  while (!t.by_base.empty()) unmap_locked(t, t.by_base.begin());
  t.variables.clear();
  forget_all_advice();
}

namespace {

// Whether host address a lies in zero-copy memory (Slot::twin). Lock-free, as the fault handler
// looks: callers may hold the table's lock.
bool zero_copy_at(uintptr_t a) {
  const size_t end = g_slot_end.load(std::memory_order_acquire);
  for (size_t i = 0; i < end; ++i) {
    const Slot& s = g_slots[i];
    const uintptr_t b = s.base.load(std::memory_order_acquire);
    if (b && a - b < s.span.load(std::memory_order_relaxed)) {
      return s.twin.load(std::memory_order_relaxed) != nullptr;
    }
  }
  return false;
}

// A non-blocking stream of the current context for the copies of zero-copy memory: a kernel on
// the legacy stream may be polling that very memory for what the host writes, and a synchronous
// copy, which waits for the legacy stream, would wait for the kernel forever. Made on first
// use; finish() waits for its copies and destroys it.
class AsideStream {
 public:
  AsideStream() = default;
  AsideStream(const AsideStream&) = delete;
  AsideStream& operator=(const AsideStream&) = delete;
  ~AsideStream() { finish(); }
  CUresult get(CUstream* out) {
    if (!stream_) {
      if (CUresult e = cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING)) return e;
    }
    *out = stream_;
    return CUDA_SUCCESS;
  }
  CUresult finish() {
    if (!stream_) return CUDA_SUCCESS;
    const CUresult rc = cuStreamSynchronize(stream_);
    cuStreamDestroy_v2(stream_);
    stream_ = nullptr;
    return rc;
  }

 private:
  CUstream stream_ = nullptr;
};

CUresult push_to_device() {
  InsideGuard g;
  LibraryCalls library;
  AsideStream aside;
  const CUresult rc = push_dirty(
      [&](uint64_t host, uint64_t device, size_t n) {
        const auto* from = reinterpret_cast<const void*>(host);
        if (!zero_copy_at(host)) return cuMemcpyHtoD_v2(device, from, n);
        CUstream s = nullptr;
        if (CUresult e = aside.get(&s)) return e;
        return cuMemcpyHtoDAsync_v2(device, from, n, s);
      },
      // Pages a running host function may write go with its answer: left dirty and writable.
      [](uint64_t device, size_t n) { return !held_by_host_call(device, n); });
  const CUresult done = aside.finish();  // the copies are on the device before the call goes
  return rc != CUDA_SUCCESS ? rc : done;
}

CUresult pull_from_device() {
  InsideGuard g;
  LibraryCalls library;
  AsideStream aside;
  return pull_pages(
      [&](uint64_t host, uint64_t device, size_t n, bool zero_copy) {
        auto* to = reinterpret_cast<void*>(host);
        if (!zero_copy) return cuMemcpyDtoH_v2(to, device, n);
        CUstream s = nullptr;
        if (CUresult e = aside.get(&s)) return e;
        return cuMemcpyDtoHAsync_v2(to, device, n, s);  // answered once its stream got there
      },
      false);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Hooks

CUresult before_call(const ArgWriter& w) {
  if (t_inside || g_live.load(std::memory_order_acquire) == 0) return CUDA_SUCCESS;
  if (!leaves_device_memory_alone(w.id())) g_device_stale.store(true);
  if (CUresult e = push_to_device()) return e;
  // After the push, which would protect them again: the reply is written into these pages.
  for (const BulkTarget& target : w.reply_bulk()) {
    mark_written(reinterpret_cast<uintptr_t>(target.data), target.size);
  }
  return CUDA_SUCCESS;
}

CUresult after_call(uint32_t call_id, CUresult rc) {
  if (rc != CUDA_SUCCESS || t_inside || g_live.load(std::memory_order_acquire) == 0) return rc;
  if (!call_is_sync(call_id) || !g_device_stale.load()) return rc;
  // Only a full synchronisation settles the device: after a stream's, other streams may still
  // be writing, so later synchronising calls pull again.
  if (synchronises_everything(call_id)) g_device_stale.store(false);
  return pull_from_device();
}

}  // namespace cuwire::client::managed

// ---------------------------------------------------------------------------------------------
// Driver functions

using namespace cuwire;
using namespace cuwire::client;

namespace {

void say(const char* what, CUdeviceptr p, size_t n) {
  std::fprintf(stderr, "cuwire: cannot map managed memory at 0x%llx (%zu bytes) on the host: %s\n",
               static_cast<unsigned long long>(p), n, what);
}

CUresult server_alloc_managed(size_t bytes, unsigned flags, CUdeviceptr* out) {
  ArgWriter w(CallId::k_cuMemAllocManaged);
  w.put(bytes);
  w.put(flags);
  return w.call_for(out);
}

}  // namespace

CUresult cuwire::client::managed::alloc_device_copy(size_t bytes, CUdeviceptr* out) {
  return server_alloc_managed(bytes, CU_MEM_ATTACH_GLOBAL, out);
}

namespace {

// A page-aligned managed allocation of `span` bytes (a whole number of pages) on the server.
CUresult alloc_aligned(size_t span, unsigned flags, size_t page, CUdeviceptr* out) {
  CUdeviceptr p = 0;
  if (CUresult e = server_alloc_managed(span, flags, &p)) return e;
  if (p % page == 0) {
    *out = p;
    return CUDA_SUCCESS;
  }
  // A bump allocator (the sim's) places the next allocation right after this one: free it,
  // fill the rest of the page with a padding allocation, and ask again.
  const size_t pad = page - (p + span) % page;
  cuMemFree_v2(p);
  CUdeviceptr padding = 0;
  if (CUresult e = cuMemAlloc_v2(&padding, pad)) return e;
  CUresult e = server_alloc_managed(span, flags, &p);
  cuMemFree_v2(padding);
  if (e != CUDA_SUCCESS) return e;
  if (p % page != 0) {
    cuMemFree_v2(p);
    say("the server's allocation is not page aligned", p, span);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *out = p;
  return CUDA_SUCCESS;
}

bool covers_managed(CUdeviceptr p, size_t n) {
  uint64_t base = 0;
  size_t size = 0;
  if (!managed::find(p, &base, &size)) return false;
  return n <= size - (p - base);
}

}  // namespace

namespace cuwire::client::managed {

CUresult alloc_backed(size_t bytes, CUdeviceptr* out, size_t* span_out) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (bytes > (size_t{1} << 48)) return CUDA_ERROR_OUT_OF_MEMORY;
  const size_t span = (std::max<size_t>(bytes, 1) + page - 1) / page * page;
  CUdeviceptr p = 0;
  if (CUresult e = alloc_aligned(span, CU_MEM_ATTACH_GLOBAL, page, &p)) return e;
  if (!map_untracked(p, span)) {
    say(std::strerror(errno), p, span);
    cuMemFree_v2(p);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *out = p;
  *span_out = span;
  return CUDA_SUCCESS;
}

}  // namespace cuwire::client::managed

namespace cuwire::client {

void on_library_unload(CUlibrary library) {
  std::vector<uint64_t> bases;
  bool home = false;
  CUdevice home_device = 0;
  {
    managed::Table& t = managed::table();
    std::lock_guard lock(t.mu);
    auto [lo, hi] = t.variables.equal_range(library);
    for (auto it = lo; it != hi; ++it) bases.push_back(it->second);
    t.variables.erase(lo, hi);
    if (auto it = t.homes.find(library); it != t.homes.end()) {
      home = true;
      home_device = it->second;
      t.homes.erase(it);
    }
  }
  for (uint64_t base : bases) note_free(base);  // forgets the mirror with the address
  if (home) cuDevicePrimaryCtxRelease_v2(home_device);
}

}  // namespace cuwire::client

extern "C" {

// A __managed__ variable: the server's answer, and a host mirror of it at the same address, as
// the program's host code reads and writes the variable there.
CUresult CUDAAPI cuLibraryGetManaged(CUdeviceptr* dptr, size_t* bytes, CUlibrary library,
                                     const char* name) {
  // The runtime asks at library load, before any context is current. Managed variables belong
  // to no context in CUDA; here they live in an instance of the library in a context, so the
  // primary context of device 0 is their home, retained until the library is unloaded.
  CUcontext current = nullptr;
  if (CUresult e = cuCtxGetCurrent(&current)) return e;
  if (!current) {
    CUcontext primary = nullptr;
    if (CUresult e = cuDevicePrimaryCtxRetain(&primary, 0)) return e;
    CUresult rc = cuCtxPushCurrent_v2(primary);
    if (rc == CUDA_SUCCESS) {
      rc = cuLibraryGetManaged(dptr, bytes, library, name);
      CUcontext popped = nullptr;
      cuCtxPopCurrent_v2(&popped);
    }
    bool kept = false;
    if (rc == CUDA_SUCCESS) {
      managed::Table& t = managed::table();
      std::lock_guard lock(t.mu);
      kept = t.homes.emplace(library, 0).second;
    }
    if (!kept) cuDevicePrimaryCtxRelease_v2(0);  // failed, or the library has its home already
    return rc;
  }
  ArgWriter w(CallId::k_cuLibraryGetManaged);
  w.put<uint8_t>(1);
  w.put<uint8_t>(1);
  w.put_handle(library);
  w.put_string(name);
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  CUdeviceptr p = 0;
  size_t n = 0;
  r.get_array(&p, 1);
  r.get_array(&n, 1);
  if (CUresult e = r.finish()) return e;
  if (CUresult e = managed::mirror_variable(p, n, library)) {
    say(errno == EEXIST ? "a host page of it already mirrors other managed memory"
                        : std::strerror(errno),
        p, n);
    return e;
  }
  note_alloc(p, n);
  if (dptr) *dptr = p;
  if (bytes) *bytes = n;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (bytesize > (size_t{1} << 48)) return CUDA_ERROR_OUT_OF_MEMORY;
  const size_t span = (bytesize + page - 1) / page * page;
  CUdeviceptr p = 0;
  if (CUresult e = alloc_aligned(span, flags, page, &p)) return e;
  if (!managed::map_mirror(p, span, bytesize)) {
    say(std::strerror(errno), p, span);
    cuMemFree_v2(p);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  note_alloc(p, bytesize);
  *dptr = p;
  return CUDA_SUCCESS;
}

// Managed memory has one home (the device) and a mirror kept at synchronisation points:
// prefetches and advice move nothing. Their arguments are checked as the driver does, and
// they are recorded for cuMemRangeGetAttribute (client-lib/calls/managed_memory_advice.cc).
CUresult CUDAAPI cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                                       unsigned int flags, CUstream hStream) {
  if (flags != 0 || !covers_managed(devPtr, count)) return CUDA_ERROR_INVALID_VALUE;
  if (!managed::valid_location(location)) {
    return location.type == CU_MEM_LOCATION_TYPE_DEVICE ? CUDA_ERROR_INVALID_DEVICE
                                                        : CUDA_ERROR_INVALID_VALUE;
  }
  managed::prefetched(devPtr, count, location);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                                CUmemLocation location) {
  if (advice < CU_MEM_ADVISE_SET_READ_MOSTLY || advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!covers_managed(devPtr, count)) return CUDA_ERROR_INVALID_VALUE;
  const bool located = advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION ||
                       advice == CU_MEM_ADVISE_SET_ACCESSED_BY ||
                       advice == CU_MEM_ADVISE_UNSET_ACCESSED_BY;
  if (located && !managed::valid_location(location)) {
    return location.type == CU_MEM_LOCATION_TYPE_DEVICE ? CUDA_ERROR_INVALID_DEVICE
                                                        : CUDA_ERROR_INVALID_VALUE;
  }
  managed::advise(devPtr, count, advice, location);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRangeGetAttribute(void* data, size_t dataSize,
                                        CUmem_range_attribute attribute, CUdeviceptr devPtr,
                                        size_t count) {
  if (count == 0 || !covers_managed(devPtr, count)) return CUDA_ERROR_INVALID_VALUE;
  return managed::range_attribute(data, dataSize, attribute, devPtr, count);
}

CUresult CUDAAPI cuMemRangeGetAttributes(void** data, size_t* dataSizes,
                                         CUmem_range_attribute* attributes, size_t numAttributes,
                                         CUdeviceptr devPtr, size_t count) {
  if (!data || !dataSizes || !attributes || numAttributes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (count == 0 || !covers_managed(devPtr, count)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < numAttributes; ++i) {
    if (CUresult e =
            managed::range_attribute(data[i], dataSizes[i], attributes[i], devPtr, count)) {
      return e;
    }
  }
  return CUDA_SUCCESS;
}

}  // extern "C"
