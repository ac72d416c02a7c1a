// Compute caps on a GPU (design decision 9), above the backend: the same code on sim and cuda.
//
// ComputeScheduler is one GPU's: it holds a session's work call (manifest: work) until the
// session's tenant may run (ComputeShare decides) and watches the submissions in flight. Each
// admitted submission is followed, on its stream, by a marker event of the session's; a
// thread of the scheduler asks the backend whether the markers completed (cuEventQuery) while
// anyone has work in flight, so a tenant's slice ends when its work is done, as the GPU saw it.
//
// ComputeGate is a session's WorkGate (dispatch.h): it finds the GPU of the call's context,
// asks that GPU's scheduler, and keeps the session's marker events (per context, reused).
//
// A GPU with no compute-capped tenant has a scheduler that only measures (meter mode): every
// submission is admitted at once and marked the same way, and a tenant's busy time is the time
// it had work on the GPU, to the poll interval. The first compute cap set there (a reload,
// cuwire tenant set) turns it into a scheduler that shares, keeping the busy time measured so
// far. A relay has no schedulers of its own: its upstream measures.
//
// Threads: admit/submitted/retire run on session threads (each in its own context, as the
// thread-affinity contract in call_executor.h says); the poll thread only queries and never
// destroys events. Markers are taken out of the scheduler (retire) before their events or
// contexts are destroyed.
#pragma once

#include <cuda.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "server/backend/backend.h"
#include "server/session/dispatch.h"
#include "server/tenancy/compute_share.h"

namespace cuwire::server {

class Tenant;

// Where the scheduler reads the time (tests may give their own).
class SchedulerClock {
 public:
  virtual ~SchedulerClock() = default;
  virtual std::chrono::nanoseconds now() const = 0;
};
const SchedulerClock& steady_clock();

class ComputeScheduler {
 public:
  // The poll thread queries markers through `backend`. `meter_only`: admit everything, only
  // measure, until a tenant here gets a compute cap (set_cap).
  ComputeScheduler(Backend& backend, ComputeShare::Options options = {},
                   const SchedulerClock& clock = steady_clock(), bool meter_only = false);
  ~ComputeScheduler();
  ComputeScheduler(const ComputeScheduler&) = delete;
  ComputeScheduler& operator=(const ComputeScheduler&) = delete;

  // The index of `tenant` here (added on first use).
  int tenant_index(const Tenant* tenant);
  // The tenant's compute cap changed (a reload): from now on its share is held to it. A cap on
  // a scheduler that only measured makes it share from now on.
  void set_cap(const Tenant* tenant, int cap_percent);
  bool meter_only() const;
  // The GPU time `tenant` has been charged here, in nanoseconds (0 before its first work).
  uint64_t busy_ns(const Tenant* tenant);
  // Blocks until tenant t may submit one piece of work; counted in flight from then on.
  void admit(int t);
  // The admitted submission of t is marked by `marker` (recorded after it on its stream);
  // null: nothing to watch (complete at once).
  void submitted(int t, CUevent marker);
  // Stops watching `markers` (about to be destroyed): their submissions count as complete.
  void retire(const std::vector<CUevent>& markers);
  // True when the marker's submission was seen complete (and the event may be reused).
  bool done(CUevent marker);

 private:
  void poll_loop();
  // One submission of t is complete (or abandoned) as of `now`. Needs mu_.
  void complete(int t, std::chrono::nanoseconds now);

  // Meter mode: a tenant's submissions in flight and the time it had any.
  struct Meter {
    int inflight = 0;
    std::chrono::nanoseconds since{0};  // when inflight last went from 0 to 1
    std::chrono::nanoseconds busy{0};   // closed intervals; after the switch to sharing, the
                                        // busy time measured before it
  };

  Backend& backend_;
  const SchedulerClock& clock_;
  mutable std::mutex mu_;
  std::condition_variable changed_;     // the share's state moved on: waiters try again
  std::condition_variable work_;        // markers to poll, or stopping
  ComputeShare share_;                  // guarded by mu_
  std::map<const Tenant*, int> index_;  // guarded by mu_
  std::map<CUevent, int> inflight_;     // guarded by mu_: marker -> tenant
  std::vector<int> waiting_;            // guarded by mu_: per tenant
  std::vector<Meter> meters_;           // guarded by mu_: per tenant
  bool meter_only_ = false;             // guarded by mu_
  bool stopping_ = false;               // guarded by mu_
  std::thread poller_;
};

// The schedulers of a server's GPUs, by backend device; a GPU without compute caps has none.
using ComputeSchedulers = std::map<CUdevice, std::unique_ptr<ComputeScheduler>>;

class ComputeGate final : public WorkGate {
 public:
  ComputeGate(SessionContext& cx, ComputeSchedulers& schedulers, const Tenant* tenant)
      : cx_(cx), schedulers_(schedulers), tenant_(tenant) {}
  ~ComputeGate() override;
  CUresult before_work(CUstream stream) override;
  void after_work(CUstream stream, CUresult rc, bool complete) override;
  // Before context `ctx_id` (0: all of them) is destroyed: its markers go first.
  void retire_context(uint64_t ctx_id) override;
  bool shares_gpu() override;

 private:
  struct Marker {
    CUevent event;
    ComputeScheduler* scheduler;
  };
  struct PerContext {
    CUdevice device = -1;
    ComputeScheduler* scheduler = nullptr;
    int tenant = -1;
    std::vector<Marker> markers;  // created in this context, in flight or reusable
  };
  void retire(PerContext& c);
  // The current context's entry, made on first use; an error when its device cannot be told.
  CUresult current(PerContext** out);

  SessionContext& cx_;
  ComputeSchedulers& schedulers_;
  const Tenant* tenant_;
  std::map<uint64_t, PerContext> contexts_;  // by context id
  PerContext* admitted_ = nullptr;           // between before_work and after_work
  bool skip_ = false;                        // the stream captures: nothing runs now
};

}  // namespace cuwire::server
