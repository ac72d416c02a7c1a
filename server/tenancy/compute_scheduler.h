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
// Across processes (design decision 14): with tenants in worker processes, a GPU's schedule
// (the share, each tenant's waiters and meter) lives in memory the front and every worker map
// (make_shared_schedulers, attach_shared_schedulers), under a process-shared robust lock, and
// waiters sleep on a futex there. Each process keeps its own markers and polls them itself, so
// no call crosses a process for the schedule: a launch admitted in a worker costs what it costs
// in one process. Each worker has a record there of what it holds (in flight, waiting); when a
// worker dies the front forgets what it held (forget_process), and a process that finds the
// lock's owner died mid-change puts each tenant's counts back from the records. The driver is
// never called under that lock.
//
// Threads: admit/submitted/retire run on session threads (each in its own context, as the
// thread-affinity contract in call_executor.h says); the poll thread only queries and never
// destroys events. Markers are taken out of the scheduler (retire) before their events or
// contexts are destroyed.
#pragma once

#include <cuda.h>

#include <atomic>
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
class UpstreamLink;

// Where a session's markers are asked about. A relay's session has an upstream session of its
// own, bound to the calling thread (server/backend/relay/upstream.h): the poll thread binds it
// for each query of that session's markers, within the session's epoch. Default: the
// process's own driver, as any thread may ask.
struct MarkerRoute {
  UpstreamLink* link = nullptr;
  void* session = nullptr;
  uint64_t epoch = 0;
};

// Where the scheduler reads the time (tests may give their own).
class SchedulerClock {
 public:
  virtual ~SchedulerClock() = default;
  virtual std::chrono::nanoseconds now() const = 0;
};
const SchedulerClock& steady_clock();

class ComputeScheduler {
 public:
  // Worker processes one schedule keeps records of (isolation by process).
  static constexpr int kMaxProcesses = 1024;
  struct State;
  struct Mapping;

  // A schedule of this process alone. The poll thread queries markers through `backend`.
  // `meter_only`: admit everything, only measure, until a tenant here gets a compute cap
  // (set_cap).
  ComputeScheduler(Backend& backend, ComputeShare::Options options = {},
                   const SchedulerClock& clock = steady_clock(), bool meter_only = false);
  // A schedule in `state`, in memory other processes map too; `process`: this process's record
  // there (-1: none, the front).
  ComputeScheduler(Backend& backend, std::shared_ptr<Mapping> mapping, State* state, int process);
  ~ComputeScheduler();
  ComputeScheduler(const ComputeScheduler&) = delete;
  ComputeScheduler& operator=(const ComputeScheduler&) = delete;

  // The index of `tenant` here (added on first use); -1 when the GPU tells no more tenants
  // apart (ComputeShare::kMaxTenants): its work is then neither held nor measured.
  int tenant_index(const Tenant* tenant);
  // The tenant's compute cap changed (a reload): from now on its share is held to it. A cap on
  // a scheduler that only measured makes it share from now on.
  void set_cap(const Tenant* tenant, int cap_percent);
  bool meter_only() const;
  // The GPU time `tenant` has been charged here, in nanoseconds (0 before its first work).
  uint64_t busy_ns(const Tenant* tenant);
  // The GPU time every tenant has been charged here, forgotten ones included (a counter).
  uint64_t busy_total_ns();
  // `tenant` is gone (removed, its sessions ended): its index here is free for another
  // tenant and its busy time joins the forgotten tenants'. False while work of it is still
  // in flight or waiting (asked again later).
  bool forget_tenant(const Tenant* tenant);
  // Blocks until tenant t may submit one piece of work; counted in flight from then on.
  void admit(int t);
  // The admitted submission of t is marked by `marker` (recorded after it on its stream,
  // asked about by `route`); null: nothing to watch (complete at once).
  void submitted(int t, CUevent marker, const MarkerRoute& route = {});
  // Stops watching `markers` (about to be destroyed): their submissions count as complete.
  void retire(const std::vector<CUevent>& markers);
  // True when the marker's submission was seen complete (and the event may be reused).
  bool done(CUevent marker);
  // Worker `process` is gone: what it had in flight counts as complete and its waiters as
  // gone, so its tenant neither keeps the GPU nor is owed it for them (the front). False when
  // that could not be done (the schedule is held past the front's bound): the record is dirty.
  bool forget_process(int process);

 private:
  class Lock;
  struct Process;
  struct Meter;
  void poll_loop();
  // One submission of t is complete (or abandoned) as of `now`. Needs the state's lock.
  void complete_locked(int t, std::chrono::nanoseconds now);
  // Waiters look again (the share's state moved on). Needs the state's lock.
  void changed_locked();
  // The index of the tenant whose key is `key`, or -1. Needs the state's lock.
  int find_locked(uint64_t key) const;
  // This process's record (null: none).
  Process* record() const;

  Backend& backend_;
  const SchedulerClock& clock_;
  std::shared_ptr<Mapping> mapping_;  // keeps state_ mapped
  State* const state_;                // shared with other processes, or this one's alone
  const int process_;                 // this process's record in state_; -1: none
  // The front found the shared state's lock held past its bound (Lock): it waits 10 ms at a
  // time until the lock is free again.
  mutable std::atomic<bool> wedged_{false};
  std::mutex busy_mu_;                      // after the state's lock
  std::map<uint64_t, uint64_t> last_busy_;  // guarded by busy_mu_: busy_ns's last answers
  uint64_t forgotten_busy_ = 0;             // guarded by busy_mu_: forgotten tenants' busy time
  uint64_t last_total_ = 0;                 // guarded by busy_mu_: busy_total_ns's last answer

  // This process's markers in flight, polled by its own thread.
  std::mutex mu_;
  std::condition_variable work_;  // markers to poll, or stopping
  struct Watched {
    int tenant;
    MarkerRoute route;
  };
  std::map<CUevent, Watched> inflight_;  // guarded by mu_: marker -> whose, asked how
  bool stopping_ = false;                // guarded by mu_
  std::thread poller_;
};

// The schedulers of a server's GPUs, by backend device; a GPU without compute caps has none.
using ComputeSchedulers = std::map<CUdevice, std::unique_ptr<ComputeScheduler>>;

// The schedules of `devices` (device -> meter only) in one memfd, *fd (owned by the caller),
// for worker processes to map with attach_shared_schedulers; *out has the front's side.
Status make_shared_schedulers(Backend& backend, const std::map<CUdevice, bool>& devices,
                              ComputeSchedulers* out, int* fd);
// A worker's side of the schedules behind `fd` (not taken), made for `devices` in that order;
// `process`: the worker's record (0 .. kMaxProcesses-1), which the front gave it alone.
Status attach_shared_schedulers(Backend& backend, int fd, const std::vector<CUdevice>& devices,
                                int process, ComputeSchedulers* out);

class ComputeGate final : public WorkGate {
 public:
  ComputeGate(SessionContext& cx, ComputeSchedulers& schedulers, const Tenant* tenant,
              MarkerRoute route = {})
      : cx_(cx), schedulers_(schedulers), tenant_(tenant), route_(route) {}
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
  const MarkerRoute route_;
  std::map<uint64_t, PerContext> contexts_;  // by context id
  PerContext* admitted_ = nullptr;           // between before_work and after_work
  bool skip_ = false;                        // the stream captures: nothing runs now
};

}  // namespace cuwire::server
