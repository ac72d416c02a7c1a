#include "server/tenancy/compute_scheduler.h"

#include <linux/futex.h>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <new>

#include "server/backend/relay/upstream.h"
#include "server/tenancy/tenants.h"
#include "server/worker/shared_block.h"

namespace cuwire::server {
namespace {

// How often markers in flight are asked about, and waiters look again: a slice ends at most
// this late, which is charged to its tenant.
constexpr auto kPollInterval = std::chrono::microseconds(200);

class SteadySchedulerClock final : public SchedulerClock {
 public:
  std::chrono::nanoseconds now() const override {
    return std::chrono::steady_clock::now().time_since_epoch();
  }
};

}  // namespace

const SchedulerClock& steady_clock() {
  static const SteadySchedulerClock clock;
  return clock;
}

// ---------------------------------------------------------------------------------------------
// The schedule's state

namespace {

constexpr uint64_t kStateMagic = 0x6377'5363'6865'6431;  // "cwSched1"

// A tenant's key in a schedule: its name's FNV-1a hash (the same in every process).
// The key of an index no tenant holds (forget_tenant); no tenant's key is this.
constexpr uint64_t kFreeKey = 0;

uint64_t tenant_key(const Tenant* tenant) {
  uint64_t h = 0xcbf2'9ce4'8422'2325ull;
  if (tenant) {
    for (unsigned char c : tenant->name()) h = (h ^ c) * 0x100'0000'01b3ull;
  }
  return h == kFreeKey ? 1 : h;
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

// What one worker process holds in a schedule: its tenant's submissions in flight, its waiters
// and its metered submissions (a worker serves one tenant).
struct ComputeScheduler::Process {
  int32_t tenant;  // -1: nothing yet
  int32_t inflight;
  int32_t waiting;
  int32_t metered;
};

// Each tenant's meter (meter mode): its submissions in flight and the time it had any.
struct ComputeScheduler::Meter {
  int32_t inflight;
  std::chrono::nanoseconds since;  // when inflight last went from 0 to 1
  std::chrono::nanoseconds busy;   // closed intervals; after the switch to sharing, the busy
                                   // time measured before it
};

// A count read from the shared state, where another process may have written anything: kept
// within what any real count reaches, so that no loop or sum over it runs away.
namespace {
int sane(int v) { return std::clamp(v, 0, ComputeShare::kMaxCount); }
constexpr std::chrono::nanoseconds kFar = ComputeShare::kFar;
// How long the front waits for a GPU's schedule that another process holds (a change takes
// microseconds).
constexpr int kFrontLockSeconds = 1;
}  // namespace

// One GPU's schedule. Every field is guarded by `lock` but the futex words.
struct ComputeScheduler::State {
  explicit State(ComputeShare::Options options, bool meter) : share(options), meter_only(meter) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&lock, &a);
    pthread_mutexattr_destroy(&a);
    for (Process& p : processes) p = Process{-1, 0, 0, 0};
    magic = kStateMagic;
  }
  uint64_t magic = 0;
  pthread_mutex_t lock;
  std::atomic<uint32_t> generation{0};  // futex: moved on at every change waiters care about
  std::atomic<uint32_t> sleepers{0};    // waiters asleep on `generation`
  ComputeShare share;
  uint8_t meter_only;   // a bool, kept as a byte: another process may have written any value
  int32_t tenants = 0;  // read through count(): another process may have written anything
  int count() const { return std::clamp(tenants, 0, ComputeShare::kMaxTenants); }
  uint64_t keys[ComputeShare::kMaxTenants] = {};
  int32_t waiting[ComputeShare::kMaxTenants] = {};
  Meter meters[ComputeShare::kMaxTenants] = {};
  Process processes[kMaxProcesses];
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// The state's memory: this process's alone (heap) or a mapping of a memfd.
struct ComputeScheduler::Mapping {
  void* base = nullptr;
  size_t bytes = 0;
  std::unique_ptr<State> own;
  ~Mapping() {
    if (base) munmap(base, bytes);
  }
};

// The state's lock. A process that died holding it may have left one change half made; the
// records of the processes still here say what each tenant holds, and the share is put back
// to that.
//
// The front takes it bounded (Wait::kBounded): a worker may hold it forever or have written a
// held lock there, and the front's own calls (caps, busy time, forgetting a dead worker) must
// not hang with it. Past the bound (`wedged` from then on), the
// front goes without: held() is false and the caller does nothing there (while the schedule
// stays so, the front waits 10 ms at a time).
class ComputeScheduler::Lock {
 public:
  enum class Wait { kAlways, kBounded };
  Lock(const ComputeScheduler& owner, std::chrono::nanoseconds now, Wait wait = Wait::kAlways)
      : s_(owner.state_) {
    State* const s = s_;
    std::atomic<bool>* const wedged = &owner.wedged_;
    int rc;
    if (wait == Wait::kAlways) {
      rc = pthread_mutex_lock(&s->lock);
    } else {
      // While wedged, a short wait: enough for a change another process is making.
      const auto bound = wedged->load(std::memory_order_relaxed)
                             ? std::chrono::nanoseconds(std::chrono::milliseconds(10))
                             : std::chrono::nanoseconds(std::chrono::seconds(kFrontLockSeconds));
      timespec deadline{};
      clock_gettime(CLOCK_MONOTONIC, &deadline);
      const int64_t ns = deadline.tv_nsec + bound.count();
      deadline.tv_sec += static_cast<time_t>(ns / 1000000000);
      deadline.tv_nsec = static_cast<long>(ns % 1000000000);
      rc = pthread_mutex_clocklock(&s->lock, CLOCK_MONOTONIC, &deadline);
    }
    held_ = rc == 0 || rc == EOWNERDEAD;
    if (wait == Wait::kBounded) {
      if (!held_ && !wedged->exchange(true)) {
        spdlog::error(
            "a GPU's compute schedule has been held by another process for more than {} s "
            "(or its lock was overwritten); the front leaves it alone until it is free",
            kFrontLockSeconds);
      } else if (held_ && wedged->exchange(false)) {
        spdlog::info("a GPU's compute schedule is free again");
      }
      if (!held_) return;
    }
    // kAlways on a lock another process overwrote (an error, not a wait): carry on without it,
    // as every index and count read below is kept in range. A schedule of this process alone
    // needs no repair (nobody else writes it), and its lock is taken on every launch.
    if (!owner.mapping_->own) repair();
    if (rc == EOWNERDEAD) {
      pthread_mutex_consistent(&s->lock);
      int inflight[ComputeShare::kMaxTenants] = {}, waiting[ComputeShare::kMaxTenants] = {},
          metered[ComputeShare::kMaxTenants] = {};
      for (const Process& p : s->processes) {
        const int t = p.tenant;  // read once: another process may change it meanwhile
        if (t < 0 || t >= s->count()) continue;
        inflight[t] = sane(inflight[t] + sane(p.inflight));
        waiting[t] = sane(waiting[t] + sane(p.waiting));
        metered[t] = sane(metered[t] + sane(p.metered));
      }
      for (int t = 0, n = s->count(); t < n; ++t) {
        s->waiting[t] = waiting[t];
        s->meters[t].inflight = metered[t];
        s->share.restore(t, inflight[t], waiting[t], now);
      }
      spdlog::warn("a process sharing a GPU's schedule died changing it; its counts are restored");
    }
  }
  ~Lock() {
    if (held_) pthread_mutex_unlock(&s_->lock);
  }
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

  bool held() const { return held_; }

 private:
  // Brings what the lock guards within range (another process may have written anything), so
  // that the arithmetic on it stays in range; indices are kept within their arrays where read.
  void repair() {
    s_->tenants = s_->count();
    s_->share.repair();
    for (int t = 0; t < s_->tenants; ++t) {
      s_->waiting[t] = sane(s_->waiting[t]);
      Meter& m = s_->meters[t];
      m.inflight = sane(m.inflight);
      m.since = std::clamp(m.since, std::chrono::nanoseconds{0}, kFar);
      m.busy = std::clamp(m.busy, std::chrono::nanoseconds{0}, kFar);
    }
  }

  State* s_;
  bool held_ = false;
};

// ---------------------------------------------------------------------------------------------
// ComputeScheduler

ComputeScheduler::ComputeScheduler(Backend& backend, ComputeShare::Options options,
                                   const SchedulerClock& clock, bool meter_only)
    : backend_(backend),
      clock_(clock),
      mapping_(std::make_shared<Mapping>()),
      state_((mapping_->own = std::make_unique<State>(options, meter_only)).get()),
      process_(-1) {
  poller_ = std::thread([this] { poll_loop(); });
}

ComputeScheduler::ComputeScheduler(Backend& backend, std::shared_ptr<Mapping> mapping, State* state,
                                   int process)
    : backend_(backend),
      clock_(steady_clock()),
      mapping_(std::move(mapping)),
      state_(state),
      process_(process) {
  poller_ = std::thread([this] { poll_loop(); });
}

ComputeScheduler::~ComputeScheduler() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_.notify_all();
  poller_.join();
}

ComputeScheduler::Process* ComputeScheduler::record() const {
  return process_ >= 0 ? &state_->processes[process_] : nullptr;
}

void ComputeScheduler::changed_locked() {
  state_->generation.fetch_add(1, std::memory_order_release);
  if (state_->sleepers.load(std::memory_order_acquire) > 0) {
    futex(&state_->generation, FUTEX_WAKE, INT32_MAX, nullptr);
  }
}

int ComputeScheduler::find_locked(uint64_t key) const {
  for (int t = 0, n = state_->count(); t < n; ++t) {
    if (state_->keys[t] == key) return t;
  }
  return -1;
}

int ComputeScheduler::tenant_index(const Tenant* tenant) {
  const uint64_t key = tenant_key(tenant);
  const auto now = clock_.now();
  Lock lock(*this, now);
  if (const int t = find_locked(key); t >= 0) return t;
  const TenantSpec* spec = tenant ? &tenant->spec() : nullptr;
  const int cap = tenant ? tenant->compute() : 0;
  // An index a forgotten tenant left, else a new one.
  if (const int t = find_locked(kFreeKey); t >= 0) {
    state_->share.reuse(t, cap, spec && spec->borrow, now);
    state_->keys[t] = key;
    state_->waiting[t] = 0;
    state_->meters[t] = Meter{};
    return t;
  }
  const int t = state_->share.add_tenant(cap, spec && spec->borrow, now);
  if (t < 0) {
    spdlog::warn(
        "a GPU's schedule tells {} tenants apart; tenant {}'s work there is neither held "
        "nor measured",
        ComputeShare::kMaxTenants, tenant ? tenant->name() : std::string("(none)"));
    return -1;
  }
  state_->keys[t] = key;
  state_->waiting[t] = 0;
  state_->meters[t] = Meter{};
  state_->tenants = t + 1;
  return t;
}

void ComputeScheduler::set_cap(const Tenant* tenant, int cap_percent) {
  const uint64_t key = tenant_key(tenant);
  const auto now = clock_.now();
  Lock lock(*this, now, Lock::Wait::kBounded);
  if (!lock.held()) {
    spdlog::error("tenant {}'s compute cap on a GPU stays as it was: its schedule is held",
                  tenant ? tenant->name() : std::string("(none)"));
    return;
  }
  if (state_->meter_only && cap_percent > 0) {
    // From now on the GPU is shared; what was measured so far stays each tenant's busy time.
    // Submissions in flight complete through the share, which counts none of them (its
    // counts only go down to 0).
    for (int t = 0, n = state_->count(); t < n; ++t) {
      Meter& m = state_->meters[t];
      if (m.inflight > 0) m.busy += now - m.since;
      m.inflight = 0;
    }
    for (Process& p : state_->processes) p.metered = 0;
    state_->meter_only = false;
  }
  if (const int t = find_locked(key); t >= 0) state_->share.set_cap(t, cap_percent, now);
  changed_locked();
}

bool ComputeScheduler::meter_only() const {
  Lock lock(*this, clock_.now(), Lock::Wait::kBounded);
  return lock.held() && state_->meter_only;
}

uint64_t ComputeScheduler::busy_ns(const Tenant* tenant) {
  const uint64_t key = tenant_key(tenant);
  const auto now = clock_.now();
  Lock lock(*this, now, Lock::Wait::kBounded);
  std::lock_guard last_lock(busy_mu_);
  // A counter never goes back: while the schedule is held elsewhere, the last figure read.
  if (!lock.held()) return last_busy_[key];
  const int t = find_locked(key);
  if (t < 0) return last_busy_[key];
  const Meter& m = state_->meters[t];
  auto busy = m.busy;
  if (state_->meter_only) {
    if (m.inflight > 0) busy += now - m.since;
  } else {
    busy += state_->share.busy(t);
  }
  uint64_t& last = last_busy_[key];
  last = std::max(last, static_cast<uint64_t>(busy.count()));
  return last;
}

uint64_t ComputeScheduler::busy_total_ns() {
  const auto now = clock_.now();
  Lock lock(*this, now, Lock::Wait::kBounded);
  std::lock_guard last_lock(busy_mu_);
  if (!lock.held()) return last_total_;
  std::chrono::nanoseconds busy{0};
  for (int t = 0, n = state_->count(); t < n; ++t) {
    if (state_->keys[t] == kFreeKey) continue;
    const Meter& m = state_->meters[t];
    busy += m.busy;
    if (state_->meter_only) {
      if (m.inflight > 0) busy += now - m.since;
    } else {
      busy += state_->share.busy(t);
    }
  }
  last_total_ = std::max(last_total_, forgotten_busy_ + static_cast<uint64_t>(busy.count()));
  return last_total_;
}

bool ComputeScheduler::forget_tenant(const Tenant* tenant) {
  const uint64_t key = tenant_key(tenant);
  const auto now = clock_.now();
  Lock lock(*this, now, Lock::Wait::kBounded);
  if (!lock.held()) return false;
  const int t = find_locked(key);
  std::lock_guard last_lock(busy_mu_);
  if (t >= 0) {
    const Meter& m = state_->meters[t];
    if (m.inflight > 0 || state_->waiting[t] > 0) return false;
    const uint64_t busy = static_cast<uint64_t>(
        (m.busy + (state_->meter_only ? std::chrono::nanoseconds{0} : state_->share.busy(t)))
            .count());
    if (!state_->share.clear(t, now)) return false;
    forgotten_busy_ += std::max(busy, last_busy_[key]);
    state_->keys[t] = kFreeKey;
    state_->meters[t] = Meter{};
    changed_locked();
  }
  last_busy_.erase(key);
  return true;
}

void ComputeScheduler::complete_locked(int t, std::chrono::nanoseconds now) {
  Process* p = record();
  if (!state_->meter_only) {
    state_->share.completed(t, now);
    if (p && p->inflight > 0) --p->inflight;
    changed_locked();
    return;
  }
  Meter& m = state_->meters[t];
  if (p && p->metered > 0) --p->metered;
  if (m.inflight > 0 && --m.inflight == 0) m.busy += now - m.since;
}

void ComputeScheduler::admit(int t) {
  if (t < 0) return;
  Process* p = record();
  bool counted = false;  // among the tenant's waiters
  for (;;) {
    uint32_t seen = 0;
    {
      const auto now = clock_.now();
      Lock lock(*this, now);
      if (p) p->tenant = t;
      if (state_->meter_only) {
        Meter& m = state_->meters[t];
        if (m.inflight++ == 0) m.since = now;
        if (p) ++p->metered;
        return;
      }
      if (state_->share.try_submit(t, now)) {
        if (p) ++p->inflight;
        if (counted) {
          --state_->waiting[t];
          if (p && p->waiting > 0) --p->waiting;
          state_->share.set_waiting(t, state_->waiting[t], now);
          changed_locked();
        }
        return;
      }
      if (!counted) {
        counted = true;
        ++state_->waiting[t];
        if (p) ++p->waiting;
        state_->share.set_waiting(t, state_->waiting[t], now);
      }
      seen = state_->generation.load(std::memory_order_acquire);
    }
    // Asleep until the schedule moves on, or a poll interval passes (credit is earned with
    // time alone); the share is brought up to date by whoever looks next.
    state_->sleepers.fetch_add(1, std::memory_order_acq_rel);
    const timespec interval{0, std::chrono::nanoseconds(kPollInterval).count()};
    futex(&state_->generation, FUTEX_WAIT, seen, &interval);
    state_->sleepers.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ComputeScheduler::submitted(int t, CUevent marker, const MarkerRoute& route) {
  if (t < 0) return;
  if (marker) {
    std::lock_guard lock(mu_);
    const bool idle = inflight_.empty();
    inflight_[marker] = Watched{t, route};
    // The poll thread sleeps only while nothing of this process is in flight.
    if (idle) work_.notify_all();
    return;
  }
  const auto now = clock_.now();
  Lock lock(*this, now);
  complete_locked(t, now);
}

void ComputeScheduler::retire(const std::vector<CUevent>& markers) {
  std::vector<int> gone;
  {
    std::lock_guard lock(mu_);
    for (CUevent m : markers) {
      auto it = inflight_.find(m);
      if (it == inflight_.end()) continue;
      gone.push_back(it->second.tenant);
      inflight_.erase(it);
    }
  }
  if (gone.empty()) return;
  const auto now = clock_.now();
  Lock lock(*this, now);
  for (int t : gone) complete_locked(t, now);
}

bool ComputeScheduler::done(CUevent marker) {
  std::lock_guard lock(mu_);
  return inflight_.count(marker) == 0;
}

bool ComputeScheduler::forget_process(int process) {
  if (process < 0 || process >= kMaxProcesses) return false;
  const auto now = clock_.now();
  Lock lock(*this, now, Lock::Wait::kBounded);
  if (!lock.held()) return false;
  Process& p = state_->processes[process];
  const int t = p.tenant;
  if (t >= 0 && t < state_->count()) {
    // At most what a tenant may have in flight at once (ComputeShare::Options::max_inflight).
    for (int i = 0, n = std::min(sane(p.inflight), 64); i < n; ++i) state_->share.completed(t, now);
    state_->waiting[t] = std::max(0, sane(state_->waiting[t]) - sane(p.waiting));
    state_->share.set_waiting(t, state_->waiting[t], now);
    Meter& m = state_->meters[t];
    if (p.metered > 0 && m.inflight > 0) {
      m.inflight = std::max(0, sane(m.inflight) - sane(p.metered));
      if (m.inflight == 0) m.busy += now - m.since;
    }
  }
  p = Process{-1, 0, 0, 0};
  changed_locked();
  return true;
}

void ComputeScheduler::poll_loop() {
  std::unique_lock lock(mu_);
  std::vector<int> completed;
  while (!stopping_) {
    if (inflight_.empty()) {
      work_.wait(lock);
      continue;
    }
    // Queried under mu_: retire() takes markers out before their events are destroyed.
    for (auto it = inflight_.begin(); it != inflight_.end();) {
      const MarkerRoute& route = it->second.route;
      CUresult rc = CUDA_ERROR_DEVICE_UNAVAILABLE;  // a relay's lost upstream: nothing runs
      if (!route.link) {
        rc = backend_.cuEventQuery(it->first);
      } else if (auto use = route.link->use(route.epoch)) {
        route.link->bind(route.session);
        rc = backend_.cuEventQuery(it->first);
      }
      if (rc == CUDA_ERROR_NOT_READY) {
        ++it;
        continue;
      }
      // Complete, or failed (its context faulted): either way the GPU is done with it.
      completed.push_back(it->second.tenant);
      it = inflight_.erase(it);
    }
    {
      const auto now = clock_.now();
      Lock state_lock(*this, now);
      for (int t : completed) complete_locked(t, now);
      state_->share.advance(now);
      changed_locked();
    }
    completed.clear();
    work_.wait_for(lock, kPollInterval);
  }
}

// ---------------------------------------------------------------------------------------------
// Schedules shared with worker processes

namespace {

size_t state_stride() { return (sizeof(ComputeScheduler::State) + 63) / 64 * 64; }

}  // namespace

Status make_shared_schedulers(Backend& backend, const std::map<CUdevice, bool>& devices,
                              ComputeSchedulers* out, int* fd) {
  *fd = -1;
  const size_t bytes = state_stride() * std::max<size_t>(devices.size(), 1);
  SharedBlock block;
  if (Status st = create_shared_block("cuwire-compute-schedules", bytes, &block); !st.is_ok())
    return st;
  auto mapping = std::make_shared<ComputeScheduler::Mapping>();
  mapping->base = block.base;
  mapping->bytes = block.bytes;
  size_t i = 0;
  for (const auto& [device, meter_only] : devices) {
    auto* state = new (static_cast<char*>(block.base) + state_stride() * i++)
        ComputeScheduler::State(ComputeShare::Options{}, meter_only);
    (*out)[device] = std::make_unique<ComputeScheduler>(backend, mapping, state, -1);
  }
  *fd = block.fd;
  return Status::ok();
}

Status attach_shared_schedulers(Backend& backend, int fd, const std::vector<CUdevice>& devices,
                                int process, ComputeSchedulers* out) {
  if (process < 0 || process >= ComputeScheduler::kMaxProcesses)
    return Status::invalid_argument("no such record in the compute schedules");
  const size_t bytes = state_stride() * std::max<size_t>(devices.size(), 1);
  SharedBlock block;
  if (!attach_shared_block(dup(fd), bytes, bytes, &block).is_ok())
    return Status::invalid_argument("compute schedules: not the schedules of these GPUs");
  close(block.fd);  // the caller keeps `fd`
  auto mapping = std::make_shared<ComputeScheduler::Mapping>();
  mapping->base = block.base;
  mapping->bytes = block.bytes;
  for (size_t i = 0; i < devices.size(); ++i) {
    auto* state = reinterpret_cast<ComputeScheduler::State*>(static_cast<char*>(block.base) +
                                                             state_stride() * i);
    if (state->magic != kStateMagic)
      return Status::invalid_argument("compute schedules: not the schedules of these GPUs");
    (*out)[devices[i]] = std::make_unique<ComputeScheduler>(backend, mapping, state, process);
  }
  return Status::ok();
}

// ---------------------------------------------------------------------------------------------
// ComputeGate

ComputeGate::~ComputeGate() {
  retire_context(0);
  cx_.set_work_gate(nullptr);
}

CUresult ComputeGate::current(PerContext** out) {
  auto [it, fresh] = contexts_.try_emplace(cx_.current_context());
  PerContext& c = it->second;
  if (fresh) {
    if (CUresult e = cx_.backend().cuCtxGetDevice(&c.device)) {
      contexts_.erase(it);
      return e;
    }
    auto s = schedulers_.find(c.device);
    if (s != schedulers_.end()) {
      c.scheduler = s->second.get();
      c.tenant = c.scheduler->tenant_index(tenant_);
    }
  }
  *out = &c;
  return CUDA_SUCCESS;
}

bool ComputeGate::shares_gpu() {
  PerContext* c = nullptr;
  return current(&c) == CUDA_SUCCESS && c->scheduler && !c->scheduler->meter_only();
}

CUresult ComputeGate::before_work(CUstream stream) {
  admitted_ = nullptr;
  PerContext* found = nullptr;
  if (CUresult e = current(&found)) return e;
  PerContext& c = *found;
  if (!c.scheduler) return CUDA_SUCCESS;
  // Work a capture records does not run now: nothing to admit or mark.
  CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
  cx_.backend().cuStreamIsCapturing(stream, &capturing);
  if (capturing != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_SUCCESS;
  c.scheduler->admit(c.tenant);
  admitted_ = &c;
  return CUDA_SUCCESS;
}

void ComputeGate::after_work(CUstream stream, CUresult rc, bool complete) {
  PerContext* c = admitted_;
  admitted_ = nullptr;
  if (!c) return;
  CUevent marker = nullptr;
  // Work done already needs no marker: it is complete as of now (a synchronous copy's busy
  // time is its call's).
  if (rc == CUDA_SUCCESS && !complete) {
    for (const Marker& m : c->markers) {
      if (c->scheduler->done(m.event)) {
        marker = m.event;
        break;
      }
    }
    if (!marker && cx_.backend().cuEventCreate(&marker, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) {
      c->markers.push_back({marker, c->scheduler});
    }
    if (marker && cx_.backend().cuEventRecord(marker, stream) != CUDA_SUCCESS) marker = nullptr;
  }
  // Without a marker (the call failed, or no event could be made) the submission is over.
  c->scheduler->submitted(c->tenant, marker, route_);
}

void ComputeGate::retire(PerContext& c) {
  if (c.markers.empty()) return;
  std::vector<CUevent> events;
  for (const Marker& m : c.markers) events.push_back(m.event);
  c.scheduler->retire(events);
  for (CUevent e : events) cx_.backend().cuEventDestroy_v2(e);
  c.markers.clear();
}

void ComputeGate::retire_context(uint64_t ctx_id) {
  for (auto it = contexts_.begin(); it != contexts_.end();) {
    if (ctx_id != 0 && it->first != ctx_id) {
      ++it;
      continue;
    }
    retire(it->second);
    it = contexts_.erase(it);
  }
}

}  // namespace cuwire::server
