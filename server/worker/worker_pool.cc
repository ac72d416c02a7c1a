#include "server/worker/worker_pool.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "server/worker/ledger.h"

extern char** environ;

namespace cuwire::server {

namespace {

using Clock = std::chrono::steady_clock;

// The descriptor a worker finds its channel on (gpu-server --worker 3).
constexpr int kWorkerChannelFd = 3;
// How long a worker told to quit (or found gone) has before it is killed.
constexpr auto kQuitBound = std::chrono::seconds(5);

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* abbrev = sigabbrev_np(sig);
    std::string text = "killed by signal " + std::to_string(sig) +
                       (abbrev ? std::string(" (SIG") + abbrev + ")" : std::string());
    if (sig == SIGKILL) text += ": the kernel's OOM killer, an operator, or the front";
    if (WCOREDUMP(status)) text += ", core dumped";
    return text;
  }
  return "ended (wait status " + std::to_string(status) + ")";
}

// Waits for `pid` up to `bound`, then kills it and waits; its wait status.
int reap(int pid, std::chrono::milliseconds bound) {
  int status = 0;
  const auto until = Clock::now() + bound;
  for (;;) {
    const int r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return 0;
    if (Clock::now() >= until) break;
    usleep(10'000);
  }
  kill(pid, SIGKILL);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace

bool parse_isolation(const std::string& text, Isolation* out) {
  if (text == "none") {
    *out = Isolation::kNone;
  } else if (text == "tenant") {
    *out = Isolation::kTenant;
  } else if (text == "session") {
    *out = Isolation::kSession;
  } else {
    return false;
  }
  return true;
}

const char* isolation_name(Isolation i) {
  switch (i) {
    case Isolation::kNone:
      return "none";
    case Isolation::kTenant:
      return "tenant";
    case Isolation::kSession:
      return "session";
  }
  return "?";
}

struct WorkerPool::Remote {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;  // guarded by mu
  std::string why;    // guarded by mu
  void finish(std::string w) {
    std::lock_guard lock(mu);
    if (!done) {
      done = true;
      why = std::move(w);
    }
    cv.notify_all();
  }
};

struct WorkerPool::Worker {
  enum class State { kStarting, kReady, kDead };
  int number = 0;
  int pid = 0;
  // Its tenant: alive while the worker is among all_ (a removed tenant is retired only once
  // its last worker has gone); the name is the worker's own copy, for after.
  const Tenant* tenant = nullptr;
  std::string tenant_name;
  std::pair<const Tenant*, uint64_t> key;
  size_t slot = 0;
  std::shared_ptr<TenantLedger> ledger;  // its tenant's
  int record = -1;                       // its record in the GPUs' schedules; -1: none
  std::string label;                     // "worker 3 (tenant a)"
  WorkerChannel channel;
  // The rest is guarded by the pool's mu_.
  State state = State::kStarting;
  std::string why;  // kDead: how it ended
  std::map<uint64_t, std::shared_ptr<Remote>> sessions;
  Clock::time_point idle_since = Clock::now();
  bool quitting = false;
  // Pings (janitor): the one unanswered, and since when; `hung` once it went unanswered.
  uint64_t ping = 0;
  Clock::time_point ping_sent{};
  Clock::time_point last_word = Clock::now();
  bool hung = false;
  bool reader = false;   // its read_loop runs (and buries it)
  bool reaping = false;  // its read_loop waits for it: its pid is not to be signalled by others
};

namespace {

class RemoteSessionImpl final : public RemoteSession {
 public:
  RemoteSessionImpl(std::shared_ptr<WorkerPool::Worker> w, uint64_t id,
                    std::shared_ptr<WorkerPool::Remote> r)
      : w_(std::move(w)), id_(id), r_(std::move(r)) {}
  std::string wait() override {
    std::unique_lock lock(r_->mu);
    r_->cv.wait(lock, [&] { return r_->done; });
    return r_->why;
  }
  void drain() override { command(ToWorker::Kind::kDrain); }
  void evict() override { command(ToWorker::Kind::kEvict); }
  void abandon() override { r_->finish(""); }
  int worker_pid() const override;

 private:
  void command(ToWorker::Kind kind) {
    ToWorker m;
    m.kind = kind;
    m.id = id_;
    (void)w_->channel.send(m);  // a worker that is gone ends the session anyway
  }
  std::shared_ptr<WorkerPool::Worker> w_;
  uint64_t id_;
  std::shared_ptr<WorkerPool::Remote> r_;
};

int RemoteSessionImpl::worker_pid() const { return w_->pid; }

}  // namespace

Status WorkerPool::create(WorkerOptions options, const std::vector<TenantRef>& tenants,
                          std::unique_ptr<WorkerPool>* out) {
  if (options.program.empty()) return Status::invalid_argument("no worker program");
  std::unique_ptr<WorkerPool> pool(new WorkerPool(std::move(options)));
  for (const TenantRef& t : tenants) {
    if (Status s = pool->add_tenant(t.get()); !s) return s;
  }
  pool->janitor_ = std::thread([p = pool.get()] { p->janitor(); });
  *out = std::move(pool);
  return Status::ok();
}

Status WorkerPool::add_tenant(Tenant* t) {
  std::unique_ptr<TenantLedger> ledger;
  if (Status s = TenantLedger::create(options_.devices, &ledger); !s) return s;
  std::shared_ptr<TenantLedger> shared = std::move(ledger);
  t->count_in(shared, Tenant::kReadOnly);
  std::lock_guard lock(mu_);
  ledgers_[t] = std::move(shared);
  return Status::ok();
}

void WorkerPool::remove_tenant(const Tenant* t) {
  std::lock_guard lock(mu_);
  for (auto it = live_.begin(); it != live_.end();) {
    Worker& w = *it->second;
    if (w.tenant == t && w.state == Worker::State::kReady && w.sessions.empty() && !w.quitting) {
      w.quitting = true;
      ToWorker q;
      q.kind = ToWorker::Kind::kQuit;
      if (w.channel.send(q).code() == Status::Code::kRejected) kill_hung_locked(w);
      spdlog::debug("{}: its tenant is removed; letting it go", w.label);
      it = live_.erase(it);
    } else {
      ++it;
    }
  }
  // The last of its workers to go takes the ledger with it (bury); none left: now.
  removed_.insert(t);
  forget_if_removed_locked(t);
  changed_.notify_all();
}

bool WorkerPool::holds(const Tenant* t) const {
  std::lock_guard lock(mu_);
  return ledgers_.count(t) || removed_.count(t) ||
         std::any_of(all_.begin(), all_.end(), [&](const auto& w) { return w->tenant == t; });
}

WorkerPool::~WorkerPool() { stop(); }

Status WorkerPool::start(const std::shared_ptr<Worker>& w) {
  int worker_fd = -1;
  if (Status s = WorkerChannel::pair(&w->channel, &worker_fd); !s) return s;
  if (worker_fd == kWorkerChannelFd) {
    // dup2 onto itself would keep close-on-exec: move it first.
    const int moved = fcntl(worker_fd, F_DUPFD_CLOEXEC, kWorkerChannelFd + 1);
    close(worker_fd);
    if (moved < 0) return Status::failed(std::string("worker channel: ") + std::strerror(errno));
    worker_fd = moved;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  const int log_fd = options_.log_fd >= 0 ? options_.log_fd : STDERR_FILENO;
  posix_spawn_file_actions_adddup2(&actions, log_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, log_fd, STDERR_FILENO);
  posix_spawn_file_actions_adddup2(&actions, worker_fd, kWorkerChannelFd);
  // Nothing else of the front's (its listeners, other tenants' sockets) reaches the worker.
  posix_spawn_file_actions_addclosefrom_np(&actions, kWorkerChannelFd + 1);
  const std::string fd_text = std::to_string(kWorkerChannelFd);
  char* argv[] = {const_cast<char*>(options_.program.c_str()), const_cast<char*>("--worker"),
                  const_cast<char*>(fd_text.c_str()), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, options_.program.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(worker_fd);
  if (rc != 0) {
    return Status::failed("cannot start a worker (" + options_.program + "): " + std::strerror(rc));
  }
  w->pid = pid;
  ToWorker init;
  init.kind = ToWorker::Kind::kInit;
  init.init = options_.init;
  init.init.tenant_name = w->tenant->name();
  const Tenant::Caps caps = w->tenant->caps();
  init.init.caps = {caps.memory_bytes, caps.memory_fraction, caps.compute};
  init.init.slot = static_cast<uint32_t>(w->slot);
  init.init.label = w->label;
  init.init.borrow = w->tenant->spec().borrow;
  init.init.schedule_record = w->record;
  if (options_.partitions) {
    for (const auto& [device, share] : options_.partitions->of(w->tenant->name())) {
      init.init.partitions.push_back({device, share.sms, share.step, share.first, share.count});
    }
  }
  std::vector<int> fds{w->ledger->fd()};
  if (options_.schedules_fd >= 0) fds.push_back(options_.schedules_fd);
  FromWorker ready;
  Status s = w->channel.send(init, fds);
  if (s) s = w->channel.receive(&ready, options_.start_timeout);
  if (s && ready.kind != FromWorker::Kind::kReady) s = Status::failed("it spoke out of turn");
  if (s && !ready.error.empty()) s = Status::failed(ready.error);
  if (!s) {
    w->channel.shutdown();
    // Its channel is shut: a worker still starting sees the end of it and exits.
    const int status = reap(pid, std::chrono::seconds(2));
    const std::string why = fmt::format("{} (pid {}) did not start: {}; it {}", w->label, pid,
                                        s.message(), describe_exit(status));
    spdlog::error("{}", why);
    return Status::failed(why);
  }
  try {
    std::lock_guard lock(mu_);
    std::thread([this, w] {
      read_loop(w);
      std::lock_guard l(mu_);
      --readers_active_;
      changed_.notify_all();
    }).detach();
    ++readers_active_;  // under mu_: the thread counts itself down only after this
    w->reader = true;
  } catch (const std::system_error& e) {
    w->channel.shutdown();
    reap(pid, std::chrono::seconds(0));
    return Status::failed(w->label + ": no thread to read its channel: " + e.what());
  }
  spdlog::info("{}: pid {}, serving", w->label, pid);
  return Status::ok();
}

std::unique_ptr<RemoteSession> WorkerPool::hand_over(const Request& r, std::string* why) {
  if (!r.tenant) {
    *why = "the session has no tenant to give a worker";
    return nullptr;
  }
  const std::pair<const Tenant*, uint64_t> key{
      r.tenant, options_.isolation == Isolation::kSession ? r.id : 0};
  auto remote = std::make_shared<Remote>();
  std::shared_ptr<Worker> w;
  // The worker found may be let go (idle) or die before the session is registered with it:
  // then another is found or started, a few times at most.
  for (int attempt = 0; attempt < 3 && !w; ++attempt) {
    w = worker_for(key, r.tenant, why);
    if (!w) return nullptr;
    std::lock_guard lock(mu_);
    if (w->state != Worker::State::kReady || w->quitting || w->hung) {
      w = nullptr;
      continue;
    }
    w->sessions[r.id] = remote;
  }
  if (!w) {
    *why = "no worker process of tenant " + r.tenant->name() + " stayed up to take the session";
    return nullptr;
  }
  ToWorker m;
  m.kind = ToWorker::Kind::kOpen;
  m.open.id = r.id;
  m.open.sequence = r.sequence;
  m.open.client = r.client;
  m.open.pid = r.pid;
  m.open.peer = r.peer;
  m.open.gpu = r.gpu;
  m.open.devices.assign(r.devices.begin(), r.devices.end());
  m.open.lane = r.lane_fd >= 0;
  m.open.stats = r.stats_fd >= 0;
  std::vector<int> fds{r.socket_fd};
  if (r.lane_fd >= 0) fds.push_back(r.lane_fd);
  if (r.stats_fd >= 0) fds.push_back(r.stats_fd);
  if (Status s = w->channel.send(m, fds); !s) {
    std::lock_guard lock(mu_);
    w->sessions.erase(r.id);
    if (s.code() == Status::Code::kRejected) kill_hung_locked(*w);
    *why = w->label + " is gone: " + s.message();
    return nullptr;
  }
  return std::make_unique<RemoteSessionImpl>(w, r.id, remote);
}

std::shared_ptr<WorkerPool::Worker> WorkerPool::worker_for(
    const std::pair<const Tenant*, uint64_t>& key, const Tenant* tenant, std::string* why) {
  std::shared_ptr<Worker> w;
  bool starter = false;
  {
    std::unique_lock lock(mu_);
    if (stopping_) {
      *why = "the server is shutting down";
      return nullptr;
    }
    auto ledger = ledgers_.find(tenant);
    if (ledger == ledgers_.end() || removed_.count(tenant)) {
      *why = "tenant " + tenant->name() + " is removed";
      return nullptr;
    }
    if (auto it = live_.find(key); it != live_.end()) {
      w = it->second;
    } else {
      std::vector<bool>& used = slots_[tenant];
      used.resize(TenantLedger::kSlots);
      size_t slot = 0;
      while (slot < used.size() && used[slot]) ++slot;
      if (slot == used.size()) {
        *why = fmt::format("tenant {} has {} worker processes, the most one tenant may have",
                           tenant->name(), TenantLedger::kSlots);
        return nullptr;
      }
      int record = -1;
      if (options_.schedules) {
        records_.resize(ComputeScheduler::kMaxProcesses);
        auto free = std::find(records_.begin(), records_.end(), false);
        if (free == records_.end()) {
          *why = fmt::format(
              "the server has {} worker processes, the most it keeps apart on its "
              "GPUs' schedules",
              ComputeScheduler::kMaxProcesses);
          return nullptr;
        }
        *free = true;
        record = static_cast<int>(free - records_.begin());
      }
      used[slot] = true;
      w = std::make_shared<Worker>();
      w->record = record;
      w->number = next_number_++;
      w->tenant = tenant;
      w->key = key;
      w->slot = slot;
      w->ledger = ledger->second;
      w->tenant_name = tenant->name();
      w->label = fmt::format("worker {} (tenant {})", w->number, w->tenant_name);
      live_[key] = w;
      all_.push_back(w);
      starter = true;
    }
  }
  if (starter) {
    Status s;
    try {
      s = start(w);
    } catch (const std::exception& e) {
      s = Status::failed(w->label + " did not start: " + e.what());
    }
    std::lock_guard lock(mu_);
    if (!s) {
      w->state = Worker::State::kDead;
      w->why = s.message();
      if (auto it = live_.find(key); it != live_.end() && it->second == w) live_.erase(it);
      // A worker that got as far as its reader is that reader's to bury; else it is let go here.
      if (!w->reader) {
        release_locked(*w);
        std::erase(all_, w);
        forget_if_removed_locked(w->tenant);
      }
    } else if (w->state == Worker::State::kStarting) {  // not buried meanwhile
      w->state = Worker::State::kReady;
      w->idle_since = Clock::now();
    }
    changed_.notify_all();
  }
  std::unique_lock lock(mu_);
  changed_.wait(lock, [&] { return w->state != Worker::State::kStarting; });
  if (w->state == Worker::State::kDead) {
    *why = w->why.empty() ? w->label + " is gone" : w->why;
    return nullptr;
  }
  return w;
}

void WorkerPool::kill_hung_locked(Worker& w) {
  if (w.pid <= 0 || w.hung || w.reaping) return;
  w.hung = true;
  spdlog::error("{} (pid {}) has not answered for {} ms; killing it", w.label, w.pid,
                options_.hang_timeout.count());
  kill(w.pid, SIGKILL);
  w.channel.shutdown();  // its reader sees the end now, whoever else holds the other end
}

bool WorkerPool::hand_over_host_calls(const HostCalls& h, std::string* why) {
  std::shared_ptr<Worker> w;
  {
    std::lock_guard lock(mu_);
    for (const auto& candidate : all_) {
      if (candidate->tenant == h.tenant && candidate->state == Worker::State::kReady &&
          candidate->sessions.count(h.session)) {
        w = candidate;
      }
    }
  }
  // The worker checks the key; the front, that the session is this tenant's.
  if (!w) {
    *why = "no session of this tenant has this host-call key";
    return false;
  }
  ToWorker m;
  m.kind = ToWorker::Kind::kHostCalls;
  m.host_calls = {h.id, h.sequence, h.session, h.key, h.client, h.peer};
  if (Status s = w->channel.send(m, {h.socket_fd}); !s) {
    *why = w->label + " is gone: " + s.message();
    return false;
  }
  return true;
}

void WorkerPool::read_loop(std::shared_ptr<Worker> w) {
  std::string broke;
  for (;;) {
    FromWorker f;
    Status s = w->channel.receive(&f, std::chrono::milliseconds(-1));
    if (!s) {
      if (s.code() != Status::Code::kDisconnected) broke = s.message();
      break;
    }
    // What a worker had no reason to send ends it: the front trusts nothing it says.
    if (f.kind == FromWorker::Kind::kReady) {
      broke = "it said it was ready again";
      break;
    }
    if (f.kind == FromWorker::Kind::kPong) {
      std::lock_guard lock(mu_);
      if (f.id != w->ping) {
        broke = "it answered a ping it was not sent";
        break;
      }
      w->ping = 0;
      w->last_word = Clock::now();
      continue;
    }
    std::shared_ptr<Remote> ended;
    {
      std::lock_guard lock(mu_);
      auto it = w->sessions.find(f.id);
      if (it == w->sessions.end()) {
        broke = "it ended session " + std::to_string(f.id) + ", which is not one of its";
        break;
      }
      ended = std::move(it->second);
      w->sessions.erase(it);
      if (w->sessions.empty()) {
        w->idle_since = Clock::now();
        // isolation "session": its one session is over, and so is the worker.
        if (options_.isolation == Isolation::kSession && !w->quitting) {
          w->quitting = true;
          if (auto l = live_.find(w->key); l != live_.end() && l->second == w) live_.erase(l);
          ToWorker q;
          q.kind = ToWorker::Kind::kQuit;
          if (w->channel.send(q).code() == Status::Code::kRejected) kill_hung_locked(*w);
        }
      }
    }
    ended->finish("");
  }
  bool quitting = false, hung = false;
  {
    std::lock_guard lock(mu_);
    quitting = w->quitting && broke.empty() && !w->hung;
    hung = w->hung;
    w->reaping = true;  // from here its pid is this thread's to wait for
  }
  if (!broke.empty()) {
    spdlog::error("{} (pid {}) broke its channel ({}); killing it", w->label, w->pid, broke);
    kill(w->pid, SIGKILL);
  }
  // Its channel ended: the process has exited, or is about to.
  const int status =
      reap(w->pid, quitting ? std::chrono::milliseconds(kQuitBound) : std::chrono::seconds(2));
  const std::string how = hung ? fmt::format("did not answer within {} ms and was killed",
                                             options_.hang_timeout.count())
                               : describe_exit(status);
  if (quitting && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    spdlog::info("{} (pid {}) quit", w->label, w->pid);
    bury(w, "");
  } else {
    bury(w, fmt::format("{} (pid {}) {}", w->label, w->pid, how));
  }
}

void WorkerPool::release_locked(Worker& w) {
  w.ledger->clear(w.slot);
  slots_[w.tenant][w.slot] = false;
  if (w.record >= 0) {
    bool forgotten = true;
    for (auto& [device, s] : *options_.schedules)
      forgotten = s->forget_process(w.record) && forgotten;
    // A record the front could not clear stays taken: a new worker must not inherit its counts.
    if (forgotten) records_[static_cast<size_t>(w.record)] = false;
    w.record = -1;
  }
}

void WorkerPool::forget_if_removed_locked(const Tenant* t) {
  if (!removed_.count(t)) return;
  if (std::any_of(all_.begin(), all_.end(), [&](const auto& w) { return w->tenant == t; })) return;
  removed_.erase(t);
  ledgers_.erase(t);
  slots_.erase(t);
}

void WorkerPool::bury(const std::shared_ptr<Worker>& w, const std::string& why) {
  std::map<uint64_t, std::shared_ptr<Remote>> sessions;
  {
    std::lock_guard lock(mu_);
    w->state = Worker::State::kDead;
    w->why = why;
    if (auto it = live_.find(w->key); it != live_.end() && it->second == w) live_.erase(it);
    sessions.swap(w->sessions);
    // What it held is gone with it: its slot's counts go, then the slot is free again.
    release_locked(*w);
    std::erase(all_, w);
    forget_if_removed_locked(w->tenant);
    changed_.notify_all();
  }
  if (!why.empty()) {
    spdlog::error("{}; {} session(s) of tenant {} end with it", why, sessions.size(),
                  w->tenant_name);
  }
  for (auto& [id, remote] : sessions) {
    remote->finish(why.empty() ? w->label + " quit" : "the worker process serving it died: " + why);
  }
}

void WorkerPool::caps_changed(const Tenant& t) {
  const Tenant::Caps c = t.caps();
  ToWorker m;
  m.kind = ToWorker::Kind::kCaps;
  m.caps = {c.memory_bytes, c.memory_fraction, c.compute};
  std::lock_guard lock(mu_);
  for (const auto& w : all_) {
    if (w->tenant != &t || w->state != Worker::State::kReady) continue;
    if (w->channel.send(m).code() == Status::Code::kRejected) kill_hung_locked(*w);
  }
}

void WorkerPool::janitor() {
  // Pings go out a few times per bound, each waited for up to the bound.
  const auto tick = std::clamp<std::chrono::milliseconds>(
      options_.hang_timeout / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
  uint64_t next_ping = 1;
  std::unique_lock lock(mu_);
  while (!stopping_) {
    changed_.wait_for(lock, tick);
    if (stopping_) break;
    const auto now = Clock::now();
    for (const auto& w : all_) {
      if (w->state != Worker::State::kReady || w->hung || w->quitting) continue;
      if (w->ping && now - w->ping_sent > options_.hang_timeout) {
        kill_hung_locked(*w);  // its channel ends; read_loop buries it
      } else if (!w->ping && now - w->last_word >= tick) {
        w->ping = next_ping++;
        w->ping_sent = now;
        ToWorker p;
        p.kind = ToWorker::Kind::kPing;
        p.id = w->ping;
        // A full channel is a worker that does not read: as hung as one that does not answer.
        if (w->channel.send(p).code() == Status::Code::kRejected) kill_hung_locked(*w);
        spdlog::trace("{}: ping {}", w->label, p.id);
      }
    }
    if (options_.isolation != Isolation::kTenant && removed_.empty()) continue;
    for (auto it = live_.begin(); it != live_.end();) {
      Worker& w = *it->second;
      // Idle past options_.idle (isolation "tenant"), or a removed tenant's and idle at all.
      const bool removed = removed_.count(w.tenant) > 0;
      if (w.state == Worker::State::kReady && w.sessions.empty() && !w.quitting &&
          (removed ||
           (options_.isolation == Isolation::kTenant && now - w.idle_since >= options_.idle))) {
        w.quitting = true;
        ToWorker q;
        q.kind = ToWorker::Kind::kQuit;
        if (w.channel.send(q).code() == Status::Code::kRejected) kill_hung_locked(w);
        if (removed) {
          spdlog::debug("{}: its tenant is removed; letting it go", w.label);
        } else {
          spdlog::debug("{}: idle for {} s; letting it go", w.label,
                        std::chrono::duration_cast<std::chrono::seconds>(options_.idle).count());
        }
        it = live_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

void WorkerPool::stop() {
  std::vector<std::shared_ptr<Worker>> workers;
  {
    std::lock_guard lock(mu_);
    if (stopped_) return;
    stopped_ = stopping_ = true;
    workers = all_;
    for (const auto& w : workers) w->quitting = true;
    changed_.notify_all();
  }
  if (janitor_.joinable()) janitor_.join();
  ToWorker q;
  q.kind = ToWorker::Kind::kQuit;
  for (const auto& w : workers) (void)w->channel.send(q);
  std::unique_lock lock(mu_);
  if (!changed_.wait_for(lock, kQuitBound, [&] { return readers_active_ == 0; })) {
    for (const auto& w : all_) {
      if (w->pid <= 0 || w->reaping) continue;  // not started, or its reader waits for it
      spdlog::warn("{} (pid {}) did not quit within {} s; killing it", w->label, w->pid,
                   std::chrono::duration_cast<std::chrono::seconds>(kQuitBound).count());
      kill(w->pid, SIGKILL);
      w->channel.shutdown();
    }
    changed_.wait(lock, [&] { return readers_active_ == 0; });
  }
}

std::vector<WorkerPool::WorkerState> WorkerPool::workers() const {
  std::lock_guard lock(mu_);
  std::vector<WorkerState> out;
  for (const auto& w : all_) {
    if (w->state != Worker::State::kReady) continue;
    out.push_back({w->pid, w->tenant->name(), w->sessions.size()});
  }
  return out;
}

}  // namespace cuwire::server
