#include "server/session/server.h"

#include <arpa/inet.h>
#include <grp.h>
#include <spdlog/spdlog.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <exception>

#include "server/backend/cuda/stdout_capture.h"
#include "server/ops/config_file.h"
#include "server/ops/metrics.h"

namespace cuwire::server {
namespace {

using Clock = std::chrono::steady_clock;

// Refused connections waiting for the refusal thread; beyond this they close without a word.
constexpr size_t kMaxPendingRefusals = 64;
// The refusal thread's bound on one refused peer (its TLS handshake included).
constexpr auto kRefusalTimeout = std::chrono::seconds(1);

// "tcp:1.2.3.4:5678" -> "1.2.3.4", "tls:[::1]:5678" -> "::1"; unix: peers -> "".
std::string peer_host(const std::string& peer) {
  size_t colon = peer.find(':');
  if (colon == std::string::npos || peer.compare(0, colon, "unix") == 0) return "";
  std::string rest = peer.substr(colon + 1);
  size_t port = rest.rfind(':');
  if (port != std::string::npos) rest.resize(port);
  if (rest.size() >= 2 && rest.front() == '[' && rest.back() == ']') {
    rest = rest.substr(1, rest.size() - 2);
  }
  return rest;
}

// The key one peer's handshakes count under: "uid:N" for a Unix peer, its IP address for TCP
// and TLS; empty when neither is known (none then: max_connections alone bounds it).
std::string peer_key(const ByteStream& s) {
  if (auto c = s.peer_credentials()) return "uid:" + std::to_string(c->uid);
  return peer_host(s.peer());
}

// "uid:1000" -> "uid 1000"; an IP address as it is.
std::string peer_key_text(const std::string& key) {
  return key.compare(0, 4, "uid:") == 0 ? "uid " + key.substr(4) : key;
}

}  // namespace

Status parse_socket_mode(const std::string& text, int* mode) {
  const auto bad = [&] {
    return Status::invalid_argument("socket mode '" + text +
                                    "' is not an octal mode from 0 to 0777, such as 0660");
  };
  if (text.empty() || text.size() > 4) return bad();
  int v = 0;
  for (char c : text) {
    if (c < '0' || c > '7') return bad();
    v = v * 8 + (c - '0');
  }
  if (v > 0777) return bad();
  *mode = v;
  return Status::ok();
}

Status resolve_group(const std::string& name, int64_t* gid) {
  if (name.empty()) return Status::invalid_argument("an empty socket group");
  std::vector<char> buf(16384);
  group g{};
  group* found = nullptr;
  int rc = getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &found);
  if (rc == 0 && found) {
    *gid = found->gr_gid;
    return Status::ok();
  }
  // A number names a group even where no entry does (a container's ids).
  if (name.find_first_not_of("0123456789") == std::string::npos && name.size() <= 10) {
    const uint64_t v = std::stoull(name);
    if (v < 0xffffffffu) {
      *gid = static_cast<int64_t>(v);
      return Status::ok();
    }
  }
  return Status::invalid_argument("socket group '" + name + "' is not a group of this host");
}

bool is_loopback_host(const std::string& host) {
  if (strcasecmp(host.c_str(), "localhost") == 0) return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

Status parse_duration(const std::string& text, std::chrono::milliseconds* out) {
  const char* b = text.data();
  const char* e = b + text.size();
  uint64_t n = 0;
  auto [p, ec] = std::from_chars(b, e, n);
  if (ec != std::errc() || p == b) {
    return Status::invalid_argument("bad duration '" + text + "' (use e.g. 500ms, 10s, 5m)");
  }
  std::string unit(p, e);
  uint64_t ms_per = 0;
  if (unit.empty() || unit == "s")
    ms_per = 1000;
  else if (unit == "ms")
    ms_per = 1;
  else if (unit == "m" || unit == "min")
    ms_per = 60'000;
  else if (unit == "h")
    ms_per = 3'600'000;
  else
    return Status::invalid_argument("bad duration unit in '" + text + "' (use ms, s, m, h)");
  // A year is more than any bound here needs, and far from overflow.
  constexpr uint64_t kMaxMs = 366ull * 24 * 3'600'000;
  if (n > kMaxMs / ms_per) return Status::invalid_argument("duration '" + text + "' is absurd");
  *out = std::chrono::milliseconds(n * ms_per);
  return Status::ok();
}

Status resolve_token(const std::string& flag, const std::string& file, const char* env,
                     std::string* token, std::string* warning) {
  warning->clear();
  if (!flag.empty() && !file.empty()) {
    return Status::invalid_argument("give the token once: --token or --token-file, not both");
  }
  if (!file.empty()) {
    if (Status s = read_token_file(file, token, "--token-file"); !s) return s;
    struct stat st {};
    if (::stat(file.c_str(), &st) == 0 && (st.st_mode & (S_IRGRP | S_IROTH))) {
      *warning = "--token-file '" + file + "' is readable by other users; chmod 600 it";
    }
    return Status::ok();
  }
  if (!flag.empty()) {
    *warning =
        "--token on the command line is visible to every user of this host (ps); "
        "prefer --token-file or CUWIRE_SERVER_TOKEN";
    *token = flag;
    return Status::ok();
  }
  *token = env ? env : "";
  return Status::ok();
}

Isolation auto_isolation(const ServerConfig& c, const std::string& backend, bool relay,
                         std::string* why) {
  if (backend != "cuda") {
    *why = "the " + backend + " backend checks every access itself";
    return Isolation::kNone;
  }
  if (relay) {
    *why = "a relay's upstream server keeps its sessions apart";
    return Isolation::kNone;
  }
  *why = "each tenant's sessions in a worker process of its own";
  return Isolation::kTenant;
}

Status check_config(const ServerConfig& c) {
  if (c.listen.empty()) return Status::invalid_argument("no --listen address given");
  const ServerLimits& l = c.limits;
  if (l.max_connections == 0 || l.max_sessions == 0 || l.max_handshakes_per_peer == 0) {
    return Status::invalid_argument(
        "--max-connections, --max-sessions and --max-handshakes-per-peer must be at least 1");
  }
  if (l.max_sessions > l.max_connections) {
    return Status::invalid_argument(
        "--max-sessions (" + std::to_string(l.max_sessions) + ") is over --max-connections (" +
        std::to_string(l.max_connections) + "): every session is a connection");
  }
  if (c.session.handshake_timeout.count() < 0 || c.session.idle_timeout.count() < 0) {
    return Status::invalid_argument("timeouts cannot be negative");
  }
  Isolation isolation = Isolation::kNone;
  if (c.isolation != "auto" && !parse_isolation(c.isolation, &isolation)) {
    return Status::invalid_argument("isolation '" + c.isolation +
                                    "' is not one of auto, tenant, session, none");
  }
  if (isolation != Isolation::kNone) {
    const std::string why = "isolation = \"" + c.isolation + "\" (worker processes): ";
    if (c.backend_override) {
      return Status::invalid_argument(why +
                                      "a backend given by the embedding program serves "
                                      "in its own process only");
    }
    if (c.backend == "sim") {
      return Status::invalid_argument(
          why +
          "the sim backend checks every access itself and runs in one process; isolation "
          "by process is the cuda backend's");
    }
    if (c.worker_idle.count() <= 0 || c.worker_start_timeout.count() <= 0 ||
        c.worker_timeout.count() <= 0) {
      return Status::invalid_argument(why +
                                      "worker_idle, worker_timeout and the workers' start "
                                      "timeout must be positive");
    }
  }
  int mode = 0;
  int64_t gid = 0;
  if (!c.socket_mode.empty()) {
    if (Status s = parse_socket_mode(c.socket_mode, &mode); !s) {
      return Status::invalid_argument("--socket-mode: " + s.message());
    }
  }
  if (!c.socket_group.empty()) {
    if (Status s = resolve_group(c.socket_group, &gid); !s) {
      return Status::invalid_argument("--socket-group: " + s.message());
    }
  }
  for (const Address& a : c.listen) {
    if (a.kind == Address::Kind::kUnix || is_loopback_host(a.host)) continue;
    if (c.allow_insecure) continue;
    if (a.kind == Address::Kind::kTcp) {
      return Status::invalid_argument(
          a.to_string() +
          ": plain tcp: on a network address carries tokens and data in the "
          "clear; listen on tls: (with --tls-cert, --tls-key and a token), or pass "
          "--allow-insecure on a network you trust");
    }
    if (c.session.token.empty() && c.tenants.empty()) {
      return Status::invalid_argument(
          a.to_string() +
          ": a network listener without a token lets anyone who can reach it "
          "use the GPUs; give one (--token-file, CUWIRE_SERVER_TOKEN or --token) or tenants "
          "with theirs (--config), or pass --allow-insecure on a network you trust");
    }
  }
  return Status::ok();
}

Server::Server(ServerConfig config) : config_(std::move(config)) {}

Server::~Server() {
  stop();
  workers_.reset();
  if (schedules_fd_ >= 0) close(schedules_fd_);
}

Status Server::start() {
  if (Status s = check_config(config_); !s) return s;
  if (config_.backend_override) {
    backend_.name = "override";
    backend_.why = "given by the embedding program";
    api_ = config_.backend_override;
  } else {
    if (Status s = make_backend(config_.backend, config_.sim, &backend_, config_.driver); !s)
      return s;
    api_ = backend_.api.get();
  }
  // Isolation by process (design decision 14), as asked or as "auto" chooses.
  if (config_.isolation != "auto") {
    parse_isolation(config_.isolation, &isolation_);
  } else if (!config_.backend_override) {
    std::string why;
    isolation_ = auto_isolation(config_, backend_.name, backend_.upstream != nullptr, &why);
    spdlog::info("isolation auto: {} ({})", isolation_name(isolation_), why);
  }
  if (isolation_ != Isolation::kNone && backend_.name != "cuda") {
    return Status::invalid_argument("isolation = \"" + config_.isolation +
                                    "\" (worker processes) is the cuda backend's; this server's "
                                    "backend is " +
                                    backend_.name);
  }
  if (backend_.name == "cuda" && config_.device_printf_to_client &&
      isolation_ == Isolation::kNone) {
    if (Status s = StdoutCapture::acquire(&device_printf_); !s) return s;
    config_.session.device_printf = device_printf_.get();
  }
  config_.session.upstream = backend_.upstream.get();
  const bool real_driver = backend_.name == "cuda" && !backend_.upstream;
  config_.session.context_memory =
      config_.context_memory.value_or(real_driver ? ServerConfig::kCudaContextMemory : 0);
  if (config_.session.context_memory != 0) {
    spdlog::info("each context is charged {} MiB to its tenant (context_memory)",
                 config_.session.context_memory >> 20);
  }
  tenants_ = std::make_unique<TenantRegistry>(config_.tenants, config_.open);
  config_.session.tenants = tenants_.get();
  host_calls_ = std::make_unique<HostCallRegistry>();
  config_.session.host_calls = host_calls_.get();
  if (Status s = make_gpu_pool(); !s) return s;
  config_.session.backend_name = backend_.name;
  if (isolation_ != Isolation::kNone) {
    if (Status s = make_worker_pool(); !s) return s;
  }
  config_.session.control = [this](const ControlCaller& c, const ControlMsg& m) {
    return control(c, m);
  };
  if (backend_.fallback.empty()) {
    spdlog::info("backend: {} ({})", backend_.name, backend_.why);
  } else {
    spdlog::warn("backend: auto found no usable GPU driver ({}); serving the simulated GPU",
                 backend_.fallback);
  }
  if (!config_.metrics.empty()) {
    auto health = [this]() -> std::string {
      std::lock_guard lock(mu_);
      if (stopping_) return "stopping";
      if (draining_) return "draining: no new sessions";
      return "";
    };
    if (Status s = MetricsHttp::start(
            config_.metrics, [this] { return metrics_text(); }, &metrics_, health);
        !s) {
      return s;
    }
    const Address a = metrics_->local_address();
    if (!is_loopback_host(a.host)) {
      spdlog::warn("metrics on {}: anyone who can reach it reads tenant names and figures",
                   a.to_string());
    }
    spdlog::info("metrics at http://{}:{}/metrics", a.host, a.port);
  }
  UnixSocketAccess access;
  if (!config_.socket_mode.empty()) (void)parse_socket_mode(config_.socket_mode, &access.mode);
  if (!config_.socket_group.empty()) (void)resolve_group(config_.socket_group, &access.group);
  for (const Address& a : config_.listen) {
    std::unique_ptr<Listener> l;
    if (Status s = listen_on(a, config_.tls, &l, access); !s) {
      stop();
      return s;
    }
    listeners_.push_back(std::move(l));
  }
  for (const Address& a : config_.listen) {
    if (a.kind == Address::Kind::kUnix || is_loopback_host(a.host)) continue;
    if (a.kind == Address::Kind::kTcp) {
      spdlog::warn(
          "{}: plain tcp: on a network address (--allow-insecure): tokens and data "
          "travel in the clear",
          a.to_string());
    } else if (config_.session.token.empty() && config_.tenants.empty()) {
      spdlog::warn("{}: no token (--allow-insecure): anyone who can reach it may connect",
                   a.to_string());
    }
  }
  refusal_thread_ = std::thread([this] { refusal_loop(); });
  for (auto& l : listeners_) {
    spdlog::info("listening on {}", l->local_address().to_string());
    listener_threads_.emplace_back([this, lp = l.get()] {
      lp->run([this](std::unique_ptr<ByteStream> s) { on_accept(std::move(s)); },
              [](const std::string& line) { spdlog::warn("{}", line); });
    });
  }
  return Status::ok();
}

namespace {

// The GPU's name, UUID and PCI bus id as NVML writes them; left empty where the backend cannot
// tell (a relay whose upstream lacks the call).
void describe_gpu(Backend& api, GpuInfo* g) {
  char buf[256] = {};
  if (api.cuDeviceGetName(buf, sizeof buf - 1, g->device) == CUDA_SUCCESS) {
    // Printable ASCII only, within NVML's name buffer: the figures are JSON and log lines.
    for (const char* p = buf; *p && g->name.size() < 95; ++p) {
      g->name += *p >= 0x20 && *p < 0x7f ? *p : '?';
    }
  }
  CUuuid u{};
  if (api.cuDeviceGetUuid_v2(&u, g->device) == CUDA_SUCCESS) {
    const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
    g->uuid = fmt::format(
        "GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-"
        "{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
        b[14], b[15]);
  }
  (void)api.cuDeviceGetAttribute(&g->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                 g->device);
  (void)api.cuDeviceGetAttribute(&g->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                 g->device);
  std::memset(buf, 0, sizeof buf);
  if (api.cuDeviceGetPCIBusId(buf, 64, g->device) == CUDA_SUCCESS) {
    // The driver writes "dddd:bb:dd.f"; NVML's bus id has an 8-digit domain.
    unsigned domain = 0, bus = 0, dev = 0, fn = 0;
    if (std::sscanf(buf, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) == 4) {
      g->pci_bus_id = fmt::format("{:08X}:{:02X}:{:02X}.{:X}", domain, bus, dev, fn);
    }
  }
}

}  // namespace

Status Server::make_gpu_pool() {
  int count = 0;
  if (api_->cuInit(0) != CUDA_SUCCESS || api_->cuDeviceGetCount(&count) != CUDA_SUCCESS) {
    return Status::ok();  // a backend without devices to place on (tests): sessions see all
  }
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < count; ++i) {
    GpuInfo g;
    size_t total = 0;
    auto failed = [i](const char* call, CUresult rc) {
      return Status::failed(std::string("backend: ") + call + "(" + std::to_string(i) +
                            ") failed: " + std::to_string(rc));
    };
    if (CUresult rc = api_->cuDeviceGet(&g.device, i)) return failed("cuDeviceGet", rc);
    if (CUresult rc = api_->cuDeviceTotalMem_v2(&total, g.device)) {
      return failed("cuDeviceTotalMem", rc);
    }
    g.memory_total = total;
    describe_gpu(*api_, &g);
    gpus.push_back(g);
  }
  for (const TenantSpec& t : config_.tenants) {
    for (int d : t.gpus) {
      if (d >= count) {
        return Status::invalid_argument("tenant " + t.name + ": gpus names GPU " +
                                        std::to_string(d) + ", the server has " +
                                        std::to_string(count));
      }
    }
  }
  // A GPU some compute-capped tenant may use gets a scheduler that shares its time; every
  // other GPU one that measures busy time only (compute_scheduler.h). A relay's upstream
  // measures its own GPUs.
  std::map<CUdevice, bool> scheduled;  // device -> meter only
  for (const GpuInfo& g : gpus) {
    bool capped = false;
    for (const TenantSpec& t : config_.tenants)
      capped = capped || (t.compute && t.may_use(g.device));
    if (capped || (config_.measure_busy && !backend_.upstream)) scheduled[g.device] = !capped;
  }
  if (isolation_ != Isolation::kNone && !scheduled.empty()) {
    // The workers run the work: the schedules are in memory they map (compute_scheduler.h).
    if (Status s = make_shared_schedulers(*api_, scheduled, &compute_, &schedules_fd_); !s)
      return s;
  } else {
    for (const auto& [device, meter_only] : scheduled) {
      compute_[device] = std::make_unique<ComputeScheduler>(*api_, ComputeShare::Options{},
                                                            steady_clock(), meter_only);
    }
  }
  if (!compute_.empty()) config_.session.compute = &compute_;
  std::vector<CUdevice> devices;
  for (const GpuInfo& g : gpus) devices.push_back(g.device);
  if (Status s = SmPartitions::make(*api_, devices, config_.tenants, &partitions_); !s) return s;
  // Always: a tenant added at run time may bring a partition (cuwire tenant add --sms).
  config_.session.partitions = &partitions_;
  gpus_ =
      std::make_unique<GpuPool>(std::move(gpus), config_.placement, config_.max_sessions_per_gpu);
  config_.session.gpus = gpus_.get();
  return Status::ok();
}

Status Server::make_worker_pool() {
  WorkerOptions o;
  o.isolation = isolation_;
  o.program = config_.worker_program;
  if (o.program.empty()) {
    char path[4096];
    const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0) return Status::failed("cannot find this program to run as a worker");
    o.program.assign(path, static_cast<size_t>(n));
  }
  o.log_fd = config_.worker_log_fd;
  ToWorker::Init& i = o.init;
  const SessionConfig& s = config_.session;
  i.driver = config_.driver;
  i.device_printf_to_client = config_.device_printf_to_client;
  i.server_name = s.server_name;
  i.backend_name = backend_.name;
  i.max_message_bytes = s.limits.max_message_bytes;
  i.max_bulk_bytes = s.limits.max_bulk_bytes;
  i.idle_timeout_ms = s.idle_timeout.count();
  i.read_spin_us = s.read_spin.count();
  i.shm_lane = s.shm_lane;
  i.max_contexts = s.handles.max_contexts;
  i.max_streams = s.handles.max_streams;
  i.max_handles = s.handles.max_handles;
  i.context_memory = s.context_memory;
  const auto level = spdlog::level::to_string_view(spdlog::get_level());
  i.log_level.assign(level.data(), level.size());
  o.devices = std::max<size_t>(gpus_ ? gpus_->size() : 0, 1);
  o.idle = config_.worker_idle;
  o.start_timeout = config_.worker_start_timeout;
  o.hang_timeout = config_.worker_timeout;
  if (schedules_fd_ >= 0) {
    o.schedules = &compute_;
    o.schedules_fd = schedules_fd_;
    for (const auto& [device, s] : compute_) o.init.schedule_devices.push_back(device);
  }
  o.partitions = &partitions_;
  if (Status st = WorkerPool::create(std::move(o), tenants_->tenants(), &workers_); !st) return st;
  config_.session.handoff = workers_.get();
  spdlog::info("isolation: {} (sessions in worker processes)", isolation_name(isolation_));
  return Status::ok();
}

void Server::on_accept(std::unique_ptr<ByteStream> stream) {
  reap_finished();
  std::string host = peer_key(*stream);
  std::string why;
  {
    std::lock_guard lock(mu_);
    if (stopping_ || draining_) return;
    size_t open = sessions_.size() - finished_.size();
    auto by_peer = handshakes_by_peer_.find(host);
    if (open >= config_.limits.max_connections) {
      why = "the server has " + std::to_string(open) +
            " connections open, the most it takes (--max-connections); try again later";
    } else if (!host.empty() && by_peer != handshakes_by_peer_.end() &&
               by_peer->second >= config_.limits.max_handshakes_per_peer) {
      why = std::to_string(by_peer->second) + " connections from " + peer_key_text(host) +
            " are still in their handshake, the most one peer may have "
            "(--max-handshakes-per-peer); try again shortly";
    } else {
      uint64_t id = next_session_id_++;
      bool counted = false;
      try {
        if (!host.empty()) {
          ++handshakes_by_peer_[host];
          counted = true;
        }
        Live& live = sessions_[id];
        live.peer_key = host;
        live.session = std::make_unique<Session>(
            id, std::move(stream), config_.session, *api_,
            [this, id](Session::Admission kind, const ControlCaller* control) {
              switch (kind) {
                case Session::Admission::kControl:
                  return admit_control(id, *control);
                case Session::Admission::kHostCalls:
                case Session::Admission::kProbe:
                  return admit_past_hello(id);
                case Session::Admission::kSession:
                  break;
              }
              return admit(id);
            });
        Session* raw = live.session.get();
        live.thread = std::thread([this, raw, id] {
          // Nothing a session does may end the server (design decision 11): what escapes its
          // own boundaries ends this connection alone.
          try {
            raw->run();
          } catch (const std::exception& e) {
            spdlog::error("session {} ({}): ended by an exception: {}", id, raw->peer(), e.what());
            raw->stop();
          } catch (...) {
            spdlog::error("session {} ({}): ended by an exception", id, raw->peer());
            raw->stop();
          }
          connection_ended(id);
        });
        return;
      } catch (const std::exception& e) {
        // No thread (or no memory) for it: the connection closes at once.
        sessions_.erase(id);
        if (counted) release_handshake_locked(host);
        spdlog::error("cannot serve a new connection: {}", e.what());
        return;
      }
    }
  }
  refuse(std::move(stream), why);
}

std::string Server::admit(uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(id);
  if (stopping_ || draining_ || it == sessions_.end()) return "the server is shutting down";
  if (admitted_ >= config_.limits.max_sessions) {
    return "the server has " + std::to_string(admitted_) +
           " sessions, the most it takes (--max-sessions); try again later";
  }
  Live& live = it->second;
  live.admitted = true;
  ++admitted_;
  release_handshake_locked(live.peer_key);
  return "";
}

std::string Server::admit_past_hello(uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(id);
  if (stopping_ || draining_ || it == sessions_.end()) return "the server is shutting down";
  // A host-call connection is bounded by its session (one each, with the session's key), a
  // probe ends once answered: neither holds a handshake slot of its peer past its Hello.
  Live& live = it->second;
  live.past_hello = true;
  release_handshake_locked(live.peer_key);
  return "";
}

void Server::release_handshake_locked(const std::string& key) {
  if (key.empty()) return;
  auto p = handshakes_by_peer_.find(key);
  if (p != handshakes_by_peer_.end() && --p->second == 0) handshakes_by_peer_.erase(p);
}

std::string Server::admit_control(uint64_t id, const ControlCaller& caller) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(id);
  if (stopping_ || draining_ || it == sessions_.end()) return "the server is shutting down";
  const Tenant* key = caller.admin ? nullptr : caller.tenant;
  int& mine = controls_[key];
  int tenants_total = 0;
  for (const auto& [t, n] : controls_) {
    if (t) tenants_total += n;
  }
  if (caller.admin ? mine >= kMaxAdminControls : mine >= kMaxControlsPerTenant) {
    return std::to_string(mine) + " control connections of " +
           (caller.admin ? std::string("the admin") : "this tenant") +
           " are open, the most it may have";
  }
  if (!caller.admin && tenants_total >= kMaxTenantControls) {
    return "the server has " + std::to_string(tenants_total) +
           " tenants' control connections open, the most it takes";
  }
  ++mine;
  Live& live = it->second;
  live.control = true;
  live.control_key = key;
  // A control connection is past its handshake: it no longer holds its peer's handshake slot.
  release_handshake_locked(live.peer_key);
  return "";
}

void Server::connection_ended(uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(id);
  if (it != sessions_.end()) {  // stop() takes every connection out before joining them
    Live& live = it->second;
    if (live.admitted) {
      --admitted_;
    } else if (live.control) {
      if (--controls_[live.control_key] == 0) controls_.erase(live.control_key);
    } else if (!live.past_hello) {
      release_handshake_locked(live.peer_key);
    }
    finished_.push_back(id);
  }
  ended_.notify_all();
}

void Server::refuse(std::unique_ptr<ByteStream> stream, const std::string& why) {
  std::lock_guard lock(refusal_mu_);
  uint64_t suppressed = 0;
  if (refusal_log_.allow(&suppressed)) {
    spdlog::warn("connection from {} refused: {}: {}{}", stream->peer(),
                 error_kind_name(ErrorKind::kOverloaded), why,
                 suppressed ? " (" + std::to_string(suppressed) + " similar refusals not logged)"
                            : std::string());
  }
  if (refusals_stop_ || refusals_.size() >= kMaxPendingRefusals) {
    stream->shutdown();  // closed without a word: the refusal thread has enough to do
    return;
  }
  refusals_.push_back({std::move(stream), why});
  refusal_cv_.notify_one();
}

void Server::refusal_loop() {
  std::unique_lock lock(refusal_mu_);
  for (;;) {
    refusal_cv_.wait(lock, [&] { return refusals_stop_ || !refusals_.empty(); });
    if (refusals_stop_) break;
    Refusal r = std::move(refusals_.front());
    refusals_.pop_front();
    lock.unlock();
    StreamTimeouts t;
    t.deadline = Clock::now() + kRefusalTimeout;
    r.stream->set_timeouts(t);
    send_error(*r.stream, ErrorKind::kOverloaded, r.why);
    r.stream->shutdown();
    r.stream.reset();
    lock.lock();
  }
  refusals_.clear();
}

void Server::reap_finished() {
  std::vector<Live> done;
  {
    std::lock_guard lock(mu_);
    for (uint64_t id : finished_) {
      auto it = sessions_.find(id);
      if (it == sessions_.end()) continue;
      done.push_back(std::move(it->second));
      sessions_.erase(it);
    }
    finished_.clear();
  }
  for (auto& l : done) l.thread.join();
}

void Server::close_listeners() {
  for (auto& l : listeners_) l->stop();
  for (auto& t : listener_threads_) t.join();
  listener_threads_.clear();
  listeners_.clear();  // a unix: socket file goes with its listener
}

bool Server::drain(std::chrono::milliseconds timeout) {
  {
    std::lock_guard lock(mu_);
    draining_ = true;  // /healthz says so from the moment the listeners go
  }
  close_listeners();
  bool clean = true;
  {
    std::unique_lock lock(mu_);
    draining_ = true;
    size_t open = sessions_.size() - finished_.size();
    if (open > 0) {
      spdlog::info("draining {} connections (up to {} ms)", open, timeout.count());
    }
    for (auto& [id, live] : sessions_) live.session->drain();
    clean = ended_.wait_for(lock, timeout, [&] { return sessions_.size() == finished_.size(); });
    if (!clean) {
      spdlog::warn("{} connections still busy {} ms into the drain; closing them",
                   sessions_.size() - finished_.size(), timeout.count());
    }
  }
  stop();
  return clean;
}

std::optional<Address> Server::metrics_address() const {
  if (!metrics_) return std::nullopt;
  return metrics_->local_address();
}

std::string Server::metrics_text() const {
  return render_metrics(
      {tenants_.get(), gpus_.get(), &compute_, backend_.name, !backend_.fallback.empty()});
}

namespace {
std::string caps_text(const Tenant::Caps& c) {
  std::string out = "memory ";
  if (c.memory_bytes) {
    out += std::to_string(c.memory_bytes >> 20) + " MiB";
  } else if (c.memory_fraction > 0) {
    out += fmt::format("{} of each GPU", c.memory_fraction);
  } else {
    out += "uncapped";
  }
  out += ", compute ";
  out += c.compute ? std::to_string(c.compute) + "%" : "uncapped";
  return out;
}
}  // namespace

int Server::reload(const std::vector<TenantSpec>& specs) {
  int changed = 0;
  if (tenants_->open() != (specs.empty() && config_.open)) {
    spdlog::warn("reload: {} tenants takes a restart; nothing changed",
                 specs.empty() ? "removing every" : "adding the first");
    return 0;
  }
  // The file's caps with the tenants added at run time stay within 100 percent of each GPU
  // (the file was checked alone): a reload that would pass it changes nothing.
  if (gpus_) {
    for (const auto& g : gpus_->state()) {
      const int device = g.info.device;
      int sum = 0;
      for (const TenantRef& have : tenants_->tenants()) {
        if (!have->spec().may_use(device)) continue;
        if (have->spec().runtime) {
          sum += have->compute();
          continue;
        }
        for (const TenantSpec& spec : specs) {
          if (spec.name == have->name()) sum += spec.compute;
        }
      }
      if (sum > 100) {
        spdlog::error(
            "reload: with the tenants added at run time, compute caps on GPU {} would sum to {} "
            "percent, over 100; nothing changed",
            device, sum);
        return 0;
      }
    }
  }
  for (const TenantSpec& spec : specs) {
    TenantRef t;
    for (const auto& have : tenants_->tenants()) {
      if (have->name() == spec.name) t = have;
    }
    if (!t) {
      spdlog::warn("reload: tenant {} is new: it is served after a restart", spec.name);
      continue;
    }
    if (t->spec().runtime) {
      // Made at run time: it stays as `cuwire tenant add` made it.
      spdlog::warn(
          "reload: tenant {} was added at run time: the file's tenant of that name is "
          "served after a restart",
          spec.name);
      continue;
    }
    const TenantSpec& was = t->spec();
    std::vector<std::string> later;
    if (spec.token_sha256 != was.token_sha256 || spec.has_token != was.has_token) {
      later.push_back("token");
    }
    if (spec.uids != was.uids) later.push_back("uids");
    if (spec.gpus != was.gpus) later.push_back("gpus");
    if (spec.sms != was.sms) later.push_back("sms");
    if (spec.max_sessions != was.max_sessions) later.push_back("max_sessions");
    if (spec.placement != was.placement) later.push_back("placement");
    if (spec.borrow != was.borrow) later.push_back("borrow");
    if (!later.empty()) {
      std::string what;
      for (const auto& w : later) what += (what.empty() ? "" : ", ") + w;
      spdlog::warn("reload: tenant {}: {} change(s) at the next restart", spec.name, what);
    }
    const Tenant::Caps now{spec.memory_bytes, spec.memory_fraction, spec.compute};
    if (now == t->caps()) continue;
    std::vector<std::string> notes;
    apply_caps(t.get(), now, "reload", &notes);
    for (const auto& n : notes) spdlog::warn("reload: tenant {}: {}", spec.name, n);
    ++changed;
  }
  for (const auto& have : tenants_->tenants()) {
    const bool kept = std::any_of(specs.begin(), specs.end(),
                                  [&](const TenantSpec& s) { return s.name == have->name(); });
    if (!kept && !tenants_->open() && !have->spec().runtime) {
      spdlog::warn("reload: tenant {} is gone from the file: it is served until a restart",
                   have->name());
    }
  }
  return changed;
}

void Server::apply_caps(Tenant* t, const Tenant::Caps& now, const char* source,
                        std::vector<std::string>* notes) {
  std::lock_guard lock(caps_mu_);
  apply_caps_locked(t, now, source, notes);
}

void Server::apply_caps_locked(Tenant* t, const Tenant::Caps& now, const char* source,
                               std::vector<std::string>* notes) {
  const Tenant::Caps before = t->caps();
  t->set_caps(now);
  spdlog::info("{}: tenant {}: {} (was {})", source, t->name(), caps_text(now), caps_text(before));
  for (const auto& [device, scheduler] : compute_) scheduler->set_cap(t, now.compute);
  if (workers_) workers_->caps_changed(*t);
  if (now.compute && gpus_) {
    for (const auto& g : gpus_->state()) {
      if (t->spec().may_use(g.info.device) && !compute_.count(g.info.device)) {
        notes->push_back("GPU " + std::to_string(g.info.device) +
                         " has no compute scheduler (a relay's GPUs are its upstream's): "
                         "no compute cap holds there");
      }
    }
  }
}

void Server::stop() {
  metrics_.reset();
  close_listeners();
  {
    std::lock_guard lock(refusal_mu_);
    refusals_stop_ = true;
    refusal_cv_.notify_all();
  }
  if (refusal_thread_.joinable()) refusal_thread_.join();
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (auto& [id, live] : sessions_) live.session->stop();
  }
  std::vector<Live> all;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, live] : sessions_) all.push_back(std::move(live));
    sessions_.clear();
    finished_.clear();
    handshakes_by_peer_.clear();
    admitted_ = 0;
    controls_.clear();
  }
  for (auto& l : all) l.thread.join();
  if (workers_) workers_->stop();
}

std::vector<Address> Server::addresses() const {
  std::vector<Address> out;
  for (auto& l : listeners_) out.push_back(l->local_address());
  return out;
}

size_t Server::session_count() const {
  std::lock_guard lock(mu_);
  return sessions_.size() - finished_.size();
}

size_t Server::retained_buffer_bytes() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [id, live] : sessions_) n += live.session->retained_buffer_bytes();
  return n;
}

}  // namespace cuwire::server
