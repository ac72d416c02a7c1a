#include "server/tenancy/compute_scheduler.h"

#include <algorithm>

#include "server/tenancy/tenants.h"

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
// ComputeScheduler

ComputeScheduler::ComputeScheduler(Backend& backend, ComputeShare::Options options,
                                   const SchedulerClock& clock, bool meter_only)
    : backend_(backend), clock_(clock), share_(options), meter_only_(meter_only) {
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

int ComputeScheduler::tenant_index(const Tenant* tenant) {
  std::lock_guard lock(mu_);
  auto it = index_.find(tenant);
  if (it != index_.end()) return it->second;
  const TenantSpec* spec = tenant ? &tenant->spec() : nullptr;
  const int t =
      share_.add_tenant(tenant ? tenant->compute() : 0, spec && spec->borrow, clock_.now());
  index_[tenant] = t;
  waiting_.push_back(0);
  meters_.emplace_back();
  return t;
}

void ComputeScheduler::set_cap(const Tenant* tenant, int cap_percent) {
  std::lock_guard lock(mu_);
  const auto now = clock_.now();
  if (meter_only_ && cap_percent > 0) {
    // From now on the GPU is shared; what was measured so far stays each tenant's busy time.
    // Submissions in flight complete through the share, which counts none of them (its
    // counts only go down to 0).
    for (Meter& m : meters_) {
      if (m.inflight > 0) m.busy += now - m.since;
      m.inflight = 0;
    }
    meter_only_ = false;
  }
  auto it = index_.find(tenant);
  if (it != index_.end()) share_.set_cap(it->second, cap_percent, now);
}

bool ComputeScheduler::meter_only() const {
  std::lock_guard lock(mu_);
  return meter_only_;
}

uint64_t ComputeScheduler::busy_ns(const Tenant* tenant) {
  std::lock_guard lock(mu_);
  auto it = index_.find(tenant);
  if (it == index_.end()) return 0;
  const Meter& m = meters_[it->second];
  auto busy = m.busy;
  if (meter_only_) {
    if (m.inflight > 0) busy += clock_.now() - m.since;
  } else {
    busy += share_.busy(it->second);
  }
  return static_cast<uint64_t>(busy.count());
}

void ComputeScheduler::complete(int t, std::chrono::nanoseconds now) {
  if (!meter_only_) {
    share_.completed(t, now);
    return;
  }
  Meter& m = meters_[t];
  if (m.inflight > 0 && --m.inflight == 0) m.busy += now - m.since;
}

void ComputeScheduler::admit(int t) {
  std::unique_lock lock(mu_);
  if (meter_only_) {
    Meter& m = meters_[t];
    if (m.inflight++ == 0) m.since = clock_.now();
    return;
  }
  if (share_.try_submit(t, clock_.now())) return;
  share_.set_waiting(t, ++waiting_[t], clock_.now());
  work_.notify_all();  // the poll thread keeps the share moving while anyone waits
  while (!share_.try_submit(t, clock_.now())) {
    changed_.wait_for(lock, kPollInterval);
  }
  share_.set_waiting(t, --waiting_[t], clock_.now());
  changed_.notify_all();
}

void ComputeScheduler::submitted(int t, CUevent marker) {
  std::lock_guard lock(mu_);
  const bool idle = inflight_.empty();
  if (marker) {
    inflight_[marker] = t;
  } else {
    complete(t, clock_.now());
  }
  // The poll thread sleeps only while nothing is in flight; nobody waits on a meter.
  if (idle && marker) work_.notify_all();
  if (!meter_only_) changed_.notify_all();
}

void ComputeScheduler::retire(const std::vector<CUevent>& markers) {
  std::lock_guard lock(mu_);
  for (CUevent m : markers) {
    auto it = inflight_.find(m);
    if (it == inflight_.end()) continue;
    complete(it->second, clock_.now());
    inflight_.erase(it);
  }
  changed_.notify_all();
}

bool ComputeScheduler::done(CUevent marker) {
  std::lock_guard lock(mu_);
  return inflight_.count(marker) == 0;
}

void ComputeScheduler::poll_loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (inflight_.empty() && !share_.anyone_waiting()) {
      work_.wait(lock);
      continue;
    }
    // Queried under the lock: retire() takes markers out before their events are destroyed.
    for (auto it = inflight_.begin(); it != inflight_.end();) {
      if (backend_.cuEventQuery(it->first) == CUDA_ERROR_NOT_READY) {
        ++it;
        continue;
      }
      // Complete, or failed (its context faulted): either way the GPU is done with it.
      complete(it->second, clock_.now());
      it = inflight_.erase(it);
    }
    share_.advance(clock_.now());
    changed_.notify_all();
    work_.wait_for(lock, kPollInterval);
  }
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
  c->scheduler->submitted(c->tenant, marker);
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
