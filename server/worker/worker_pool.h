// WorkerPool: the front's side of isolation by process (design decision 14).
//
// The front keeps the listeners, authentication, placement, admission, the admin API and the
// figures; a session past its admission is handed to a worker process (gpu-server --worker,
// worker_main.h) together with the client's socket, and the worker answers its Hello and serves
// its calls on that socket: no frame passes through the front. With isolation "tenant" one
// worker serves every session of a tenant (made at its first session, let go once it has been
// idle for a while); with "session", each session has a worker of its own, let go when it ends.
//
// Each tenant's memory is counted in a ledger (ledger.h) that its workers share with the front,
// so caps stay exact across workers and the front's figures and placement see every worker's use.
//
// A worker that dies (a crash in the driver, an abort, the OOM killer) ends only the sessions
// it held: the front tells each client why (its calls then fail with
// CUDA_ERROR_DEVICE_UNAVAILABLE), logs which worker died and how, zeroes its memory in the
// ledger, and the tenant's next session gets a new worker.
//
// Thread-safety: all functions are safe from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "server/session/session.h"
#include "server/tenancy/compute_scheduler.h"
#include "server/tenancy/sm_partition.h"
#include "server/tenancy/tenants.h"
#include "server/worker/channel.h"

namespace cuwire::server {

class TenantLedger;

enum class Isolation { kNone, kTenant, kSession };
// "none" / "tenant" / "session"; false for anything else.
bool parse_isolation(const std::string& text, Isolation* out);
const char* isolation_name(Isolation i);

struct WorkerOptions {
  Isolation isolation = Isolation::kTenant;
  // The executable run as a worker (gpu-server, run with --worker FD).
  std::string program;
  // Where workers log (their stdout and stderr); -1: the front's stderr.
  int log_fd = -1;
  // Settings every worker gets (tenant, slot and label are filled in per worker).
  ToWorker::Init init;
  // Devices the ledgers count (the backend's GPUs).
  size_t devices = 1;
  // A new worker that has not said it serves within this is killed, and its session refused.
  std::chrono::milliseconds start_timeout{30'000};
  // isolation "tenant": a worker with no session for this long is let go.
  std::chrono::milliseconds idle{60'000};
  // A worker that does not answer the front's ping within this is hung: it is killed, and
  // its sessions end as a dead worker's do.
  std::chrono::milliseconds hang_timeout{10'000};
  // The GPUs' schedules workers share (compute_scheduler.h: make_shared_schedulers), the
  // front's side (not owned), and their memfd (not owned); null, -1: none.
  ComputeSchedulers* schedules = nullptr;
  int schedules_fd = -1;
  // The tenants' SM partitions (not owned; null: none): a worker gets its tenant's.
  const SmPartitions* partitions = nullptr;
};

class WorkerPool final : public SessionHandoff {
 public:
  // Makes a ledger for each of `tenants` and counts their memory there from now on.
  static Status create(WorkerOptions options, const std::vector<TenantRef>& tenants,
                       std::unique_ptr<WorkerPool>* out);
  ~WorkerPool() override;
  // A tenant added at run time: a ledger of its own, its memory counted there from now on.
  Status add_tenant(Tenant* t);
  // The tenant is removed and its sessions have ended: its idle workers are let go now, and
  // its ledger once the last of them is gone. No session of it is handed over from now on.
  void remove_tenant(const Tenant* t);
  // Whether the pool still keeps anything of `t`: its ledger, or a worker (a removed tenant
  // is freed only once it keeps nothing).
  bool holds(const Tenant* t) const;

  std::unique_ptr<RemoteSession> hand_over(const Request& r, std::string* why) override;
  bool hand_over_host_calls(const HostCalls& h, std::string* why) override;
  // The tenant's caps changed (a reload, cuwire tenant set): its workers apply them.
  void caps_changed(const Tenant& t);
  // Lets every worker go: each is told to quit, and killed when it has not within a bound.
  void stop();

  // The workers now, for the admin API.
  struct WorkerState {
    int pid = 0;
    std::string tenant;
    size_t sessions = 0;
  };
  std::vector<WorkerState> workers() const;

  struct Worker;
  struct Remote;

 private:
  explicit WorkerPool(WorkerOptions options) : options_(std::move(options)) {}
  // Starts a worker for `tenant` and waits for its word; *why when it cannot.
  Status start(const std::shared_ptr<Worker>& w);
  // The live worker for `key`, started if there is none (and waited for while it starts);
  // null, with *why, when none could be had.
  std::shared_ptr<Worker> worker_for(const std::pair<const Tenant*, uint64_t>& key,
                                     const Tenant* tenant, std::string* why);
  // A worker that does not answer or does not read: killed, its reader buries it. Needs mu_.
  void kill_hung_locked(Worker& w);
  // Reads what the worker says until its channel ends; then reaps it.
  void read_loop(std::shared_ptr<Worker> w);
  // The worker is gone: its sessions end with `why`, its memory leaves the ledger.
  void bury(const std::shared_ptr<Worker>& w, const std::string& why);
  // Lets go of workers idle past options_.idle (isolation "tenant").
  void janitor();
  // The worker's ledger slot and schedule record are free again, what it held there forgotten.
  // Needs mu_.
  void release_locked(Worker& w);
  // A removed tenant whose last worker went: its ledger and slots are forgotten. Needs mu_.
  void forget_if_removed_locked(const Tenant* t);

  const WorkerOptions options_;

  mutable std::mutex mu_;
  // The tenants' ledgers (guarded by mu_); a removed tenant's goes with its last worker.
  std::map<const Tenant*, std::shared_ptr<TenantLedger>> ledgers_;
  std::condition_variable changed_;
  // Live and starting workers, by key: the tenant (isolation "tenant") or the session id.
  std::map<std::pair<const Tenant*, uint64_t>, std::shared_ptr<Worker>> live_;  // guarded by mu_
  std::map<const Tenant*, std::vector<bool>> slots_;  // guarded by mu_: ledger slots in use
  std::set<const Tenant*> removed_;  // guarded by mu_: removed, some worker not yet gone
  std::vector<bool> records_;        // guarded by mu_: schedule records in use (ComputeScheduler)
  std::vector<std::shared_ptr<Worker>> all_;  // guarded by mu_: every worker not buried
  int readers_active_ = 0;                    // guarded by mu_: read_loop threads
  int next_number_ = 1;                       // guarded by mu_
  bool stopping_ = false;                     // guarded by mu_
  bool stopped_ = false;                      // guarded by mu_: stop() ran
  std::thread janitor_;
};

}  // namespace cuwire::server
