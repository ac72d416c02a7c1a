#include "server/worker/worker_main.h"

#include <fcntl.h>
#include <spdlog/sinks/ansicolor_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "protocol/transport.h"
#include "server/backend/backend.h"
#include "server/backend/cuda/stdout_capture.h"
#include "server/calls/host_calls.h"
#include "server/session/session.h"
#include "server/tenancy/compute_scheduler.h"
#include "server/tenancy/sm_partition.h"
#include "server/tenancy/tenants.h"
#include "server/worker/channel.h"
#include "server/worker/ledger.h"

namespace cuwire::server {

namespace {

// The front's settings come first, at once.
constexpr auto kInitBound = std::chrono::seconds(30);

void log_to_stdout(const std::string& label, const std::string& level) {
  // As the front: the log keeps fd 1 as it was, which device printf capture may take over.
  if (int fd = dup(STDOUT_FILENO); fd >= 0) {
    if (FILE* out = fdopen(fd, "w")) {
      auto sink = std::make_shared<spdlog::sinks::ansicolor_sink<spdlog::details::console_mutex>>(
          out, spdlog::color_mode::automatic);
      spdlog::set_default_logger(std::make_shared<spdlog::logger>("gpu-server", sink));
    } else {
      close(fd);
    }
  }
  if (!level.empty()) spdlog::set_level(spdlog::level::from_str(level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ gpu-server " + label + ": %v");
}

class Worker {
 public:
  Worker(WorkerChannel channel) : channel_(std::move(channel)) {}
  int run();

 private:
  Status init(const ToWorker::Init& init, std::vector<int>& fds);
  void open(const ToWorker::Open& o, std::vector<int>& fds);
  void host_calls(const ToWorker::HostCalls& h, std::vector<int>& fds);
  // Runs a session on connection `stream` on a thread of its own as connection `id`; `run`
  // serves it there. `report_end`: the front is told when it ends (a session; not a host-call
  // connection, which the front does not follow). False when it could not be started.
  bool serve(uint64_t id, std::unique_ptr<ByteStream> stream, std::function<void(Session&)> run,
             bool report_end);
  // Tells the front session `id` has ended.
  void ended(uint64_t id);
  void reap(bool all);

  WorkerChannel channel_;
  std::unique_ptr<Tenant> tenant_;
  BackendChoice backend_;
  ComputeSchedulers compute_;  // the GPUs' schedules, shared with the front; before backend_ goes
  SmPartitions partitions_;    // the tenants' SMs of their own
  std::shared_ptr<StdoutCapture> device_printf_;
  std::unique_ptr<HostCallRegistry> host_call_registry_;
  SessionConfig config_;

  struct Live {
    std::unique_ptr<Session> session;
    std::thread thread;
  };
  std::mutex mu_;
  std::map<uint64_t, Live> sessions_;  // guarded by mu_
  std::vector<uint64_t> finished_;     // guarded by mu_
};

Status Worker::init(const ToWorker::Init& in, std::vector<int>& fds) {
  log_to_stdout(in.label, in.log_level);
  const size_t want = in.schedule_devices.empty() ? 1 : 2;
  if (fds.size() != want) {
    for (int fd : fds) close(fd);
    fds.clear();
    return Status::invalid_argument("the settings came without the ledger or the schedules");
  }
  std::unique_ptr<TenantLedger> ledger;
  const int ledger_fd = fds[0];
  const int schedules_fd = want == 2 ? fds[1] : -1;
  fds.clear();
  Status attached = TenantLedger::attach(ledger_fd, &ledger);
  if (attached && in.slot >= TenantLedger::kSlots)
    attached = Status::invalid_argument("no such ledger slot");
  if (!attached) {
    if (schedules_fd >= 0) close(schedules_fd);
    return attached;
  }
  TenantSpec spec;
  spec.name = in.tenant_name;
  spec.borrow = in.borrow;
  tenant_ = std::make_unique<Tenant>(spec);
  tenant_->set_caps({in.caps.memory_bytes, in.caps.memory_fraction, in.caps.compute});
  tenant_->count_in(std::shared_ptr<TenantLedger>(std::move(ledger)), in.slot);
  Status made = make_backend("cuda", SimOptions{}, &backend_, in.driver);
  if (made && schedules_fd >= 0) {
    // The GPUs' schedules the front and the tenant's other workers share (compute caps, busy
    // time): admitted here, counted there.
    made = attach_shared_schedulers(*backend_.api, schedules_fd, in.schedule_devices,
                                    in.schedule_record, &compute_);
    if (made && !compute_.empty()) config_.compute = &compute_;
  }
  if (schedules_fd >= 0) close(schedules_fd);
  if (!made) return made;
  if (!in.partitions.empty()) {
    // The tenant's SMs, where the front placed them among every partitioned tenant's.
    for (const auto& p : in.partitions) {
      SmShare share;
      share.sms = p.sms;
      share.step = p.step;
      share.first = p.first;
      share.count = p.count;
      if (Status s = partitions_.adopt(*backend_.api, in.tenant_name, p.device, share); !s)
        return s;
    }
    config_.partitions = &partitions_;
  }
  if (in.device_printf_to_client) {
    if (Status s = StdoutCapture::acquire(&device_printf_); !s) return s;
    config_.device_printf = device_printf_.get();
  }
  config_.upstream = backend_.upstream.get();
  host_call_registry_ = std::make_unique<HostCallRegistry>();
  config_.host_calls = host_call_registry_.get();
  config_.limits.max_message_bytes = in.max_message_bytes;
  config_.limits.max_bulk_bytes = in.max_bulk_bytes;
  config_.server_name = in.server_name;
  config_.backend_name = in.backend_name;
  config_.handshake_timeout = std::chrono::milliseconds(0);  // the front bounded it
  config_.idle_timeout = std::chrono::milliseconds(in.idle_timeout_ms);
  config_.read_spin = std::chrono::microseconds(in.read_spin_us);
  config_.shm_lane = in.shm_lane;
  config_.handles.max_contexts = in.max_contexts;
  config_.handles.max_streams = in.max_streams;
  config_.handles.max_handles = in.max_handles;
  config_.context_memory = in.context_memory;
  return Status::ok();
}

void Worker::open(const ToWorker::Open& o, std::vector<int>& fds) {
  reap(false);
  if (fds.empty()) {
    // Its socket did not come (this process is out of descriptors): the front ends it.
    spdlog::error("session {}: handed over without its socket", o.id);
    ended(o.id);
    return;
  }
  std::unique_ptr<ByteStream> stream;
  const int socket_fd = fds[0];
  size_t next = 1;
  const int lane_fd = o.lane && fds.size() > next ? fds[next++] : -1;
  const int stats_fd = o.stats && fds.size() > next ? fds[next++] : -1;
  for (size_t i = next; i < fds.size(); ++i) close(fds[i]);
  fds.clear();
  if (Status s = adopt_stream(socket_fd, o.peer, &stream); !s) {
    if (lane_fd >= 0) close(lane_fd);
    if (stats_fd >= 0) close(stats_fd);
    spdlog::error("session {}: {}", o.id, s.message());
    ended(o.id);
    return;
  }
  auto h = std::make_shared<Session::Handed>();
  h->tenant = tenant_.get();
  h->sequence = o.sequence;
  h->client = o.client;
  h->gpu = o.gpu;
  h->devices.assign(o.devices.begin(), o.devices.end());
  h->lane_fd = lane_fd;
  h->stats_fd = stats_fd;
  if (!serve(
          o.id, std::move(stream), [h](Session& s) { s.run_handed(std::move(*h)); }, true)) {
    if (h->lane_fd >= 0) close(h->lane_fd);
    if (h->stats_fd >= 0) close(h->stats_fd);
    ended(o.id);
  }
}

void Worker::ended(uint64_t id) {
  FromWorker f;
  f.kind = FromWorker::Kind::kEnded;
  f.id = id;
  (void)channel_.send(f);
}

void Worker::host_calls(const ToWorker::HostCalls& h, std::vector<int>& fds) {
  reap(false);
  for (size_t i = 1; i < fds.size(); ++i) close(fds[i]);
  if (fds.empty()) return;
  const int socket_fd = fds[0];
  fds.clear();
  std::unique_ptr<ByteStream> stream;
  if (Status s = adopt_stream(socket_fd, h.peer, &stream); !s) {
    spdlog::error("connection {}: {}", h.id, s.message());
    return;
  }
  Tenant* tenant = tenant_.get();
  (void)serve(
      h.id, std::move(stream),
      [h, tenant](Session& s) {
        s.run_handed_host_calls(h.session, h.key, h.sequence, tenant, h.client);
      },
      false);
}

bool Worker::serve(uint64_t id, std::unique_ptr<ByteStream> stream,
                   std::function<void(Session&)> run, bool report_end) {
  std::lock_guard lock(mu_);
  if (sessions_.count(id)) return false;  // the front gives each connection its own id
  try {
    Live& live = sessions_[id];
    live.session = std::make_unique<Session>(id, std::move(stream), config_, *backend_.api);
    Session* raw = live.session.get();
    live.thread = std::thread([this, raw, id, report_end, run = std::move(run)] {
      try {
        run(*raw);
      } catch (const std::exception& e) {
        spdlog::error("session {}: ended by an exception: {}", id, e.what());
        raw->stop();
      } catch (...) {
        spdlog::error("session {}: ended by an exception", id);
        raw->stop();
      }
      if (report_end) ended(id);
      std::lock_guard l(mu_);
      finished_.push_back(id);
    });
  } catch (const std::exception& e) {
    // No memory or no thread for it: this connection alone is refused.
    spdlog::error("connection {}: not served: {}", id, e.what());
    sessions_.erase(id);
    return false;
  }
  return true;
}

void Worker::reap(bool all) {
  std::vector<Live> done;
  {
    std::lock_guard lock(mu_);
    std::vector<uint64_t> ids;
    if (all) {
      for (auto& [id, live] : sessions_) ids.push_back(id);
    } else {
      ids.swap(finished_);
    }
    for (uint64_t id : ids) {
      auto it = sessions_.find(id);
      if (it == sessions_.end()) continue;
      done.push_back(std::move(it->second));
      sessions_.erase(it);
    }
    if (all) finished_.clear();
  }
  for (Live& l : done) {
    if (all) l.session->stop();
    if (l.thread.joinable()) l.thread.join();
  }
}

int Worker::run() {
  ToWorker m;
  std::vector<int> fds;
  if (Status s = channel_.receive(&m, &fds, kInitBound); !s || m.kind != ToWorker::Kind::kInit) {
    for (int fd : fds) close(fd);
    std::fprintf(stderr, "gpu-server --worker: no settings from the front: %s\n",
                 s ? "it sent something else" : s.message().c_str());
    return 1;
  }
  FromWorker ready;
  ready.kind = FromWorker::Kind::kReady;
  if (Status s = init(m.init, fds); !s) {
    ready.error = s.message();
    spdlog::error("cannot serve: {}", s.message());
    (void)channel_.send(ready);
    return 1;
  }
  if (!channel_.send(ready)) return 1;
  for (;;) {
    fds.clear();
    Status s = channel_.receive(&m, &fds, std::chrono::milliseconds(-1));
    if (!s) {
      // The front is gone (or spoke nonsense): nothing may outlive it.
      if (s.code() != Status::Code::kDisconnected) spdlog::error("channel: {}", s.message());
      break;
    }
    switch (m.kind) {
      case ToWorker::Kind::kOpen:
        open(m.open, fds);
        break;
      case ToWorker::Kind::kHostCalls:
        host_calls(m.host_calls, fds);
        break;
      case ToWorker::Kind::kDrain:
      case ToWorker::Kind::kEvict: {
        std::lock_guard lock(mu_);
        if (auto it = sessions_.find(m.id); it != sessions_.end()) {
          if (m.kind == ToWorker::Kind::kDrain) {
            it->second.session->drain();
          } else {
            it->second.session->evict();
          }
        }
        break;
      }
      case ToWorker::Kind::kCaps:
        tenant_->set_caps({m.caps.memory_bytes, m.caps.memory_fraction, m.caps.compute});
        break;
      case ToWorker::Kind::kPing: {
        FromWorker pong;
        pong.kind = FromWorker::Kind::kPong;
        pong.id = m.id;
        (void)channel_.send(pong);
        break;
      }
      case ToWorker::Kind::kQuit:
        reap(true);
        return 0;
      case ToWorker::Kind::kInit:
        break;  // once only
    }
    for (int fd : fds) close(fd);
  }
  reap(true);
  return 0;
}

}  // namespace

int worker_main(int fd) {
  // Nothing the driver starts (a helper process) keeps the channel open past this process: the
  // front learns of its end from the channel's.
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  Worker w{WorkerChannel(fd)};
  return w.run();
}

}  // namespace cuwire::server
