// gpu-server: serves CUDA driver calls from cuwire clients on a GPU host (or on the sim
// backend where there is no GPU).

#include <spdlog/sinks/ansicolor_sink.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <algorithm>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>
#include <tuple>

#include "generated/call_ids.h"
#include "server/backend/sim/sim_profile.h"
#include "server/ops/config_file.h"
#include "server/ops/metrics.h"
#include "server/session/server.h"
#include "server/worker/worker_main.h"

namespace {

// Tells systemd (Type=notify: READY=1, RELOADING=1, STOPPING=1, STATUS=...) how the server is
// doing, when it runs under it: $NOTIFY_SOCKET names a datagram socket ('@': abstract).
void notify_service_manager(const std::string& state) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (!path || (path[0] != '/' && path[0] != '@')) return;
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  const size_t n = std::strlen(path);
  if (n >= sizeof sa.sun_path) return;
  std::memcpy(sa.sun_path, path, n);
  if (sa.sun_path[0] == '@') sa.sun_path[0] = '\0';
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + n);
  (void)sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&sa), len);
  close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cuwire;
  using namespace cuwire::server;

  // A worker process (design decision 14), started by a front with its channel on a descriptor:
  // nothing on its command line but that.
  if (argc == 3 && std::strcmp(argv[1], "--worker") == 0) {
    std::signal(SIGPIPE, SIG_IGN);
    char* end = nullptr;
    const long fd = std::strtol(argv[2], &end, 10);
    if (!end || *end || fd < 0 || fd > 1024) {
      std::fprintf(stderr, "gpu-server --worker: '%s' is not a descriptor\n", argv[2]);
      return 2;
    }
    return worker_main(static_cast<int>(fd));
  }

  CLI::App app{"gpu-server: CUDA API remoting server of cuwire"};
  app.set_version_flag("--version", std::string("gpu-server ") + cuwire_version() + " (CUDA " +
                                        cuda_version() + " driver API, " +
                                        std::to_string(kManifestEntries) + " calls)");
  std::vector<std::string> listen;
  std::string backend = "auto", sim_memory = "16GiB", log_level = "info", token;
  std::string tls_cert, tls_key, max_message = "1MiB", max_bulk = "2GiB", ready_file;
  std::string token_file, handshake_timeout = "10s", idle_timeout = "0", drain_timeout = "10s";
  std::string admin_token_file;
  int sim_gpus = 1;
  SimOptions sim_defaults;
  uint64_t sim_budget = sim_defaults.instruction_budget;
  int sim_max_streams = sim_defaults.max_streams_per_context;
  int sim_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string sim_profile = sim_defaults.profile;
  const ServerLimits default_limits;
  int64_t max_connections = static_cast<int64_t>(default_limits.max_connections);
  int64_t max_sessions = static_cast<int64_t>(default_limits.max_sessions);
  int64_t max_handshakes_per_peer = static_cast<int64_t>(default_limits.max_handshakes_per_peer);
  std::string placement = "spread";
  int64_t max_sessions_per_gpu = 0;
  const HandleLimits default_handles;
  int64_t max_contexts = static_cast<int64_t>(default_handles.max_contexts);
  int64_t max_streams = static_cast<int64_t>(default_handles.max_streams);
  int64_t max_handles = static_cast<int64_t>(default_handles.max_handles);
  bool allow_insecure = false;
  std::string config_file, check_config_file;
  app.add_option("--config", config_file,
                 "TOML file with the server's settings and its tenants ([server], [sim], "
                 "[[tenant]]); flags given here override it");
  app.add_option("--check-config", check_config_file,
                 "check a config file, say what is wrong with it (file, line, reason) or that "
                 "it is good, and exit");
  app.add_option("--listen", listen,
                 "address to serve: unix:PATH, tcp:HOST:PORT, tls:HOST:PORT "
                 "(repeatable; or listen in the config file; default: "
                 "unix:/tmp/cuwire.sock, where the client looks first)");
  std::string socket_mode, socket_group;
  app.add_option("--socket-mode", socket_mode,
                 "mode of the unix: listeners' socket files, in octal (e.g. 0660: the owner and "
                 "the group may connect); also [server] socket_mode. Default: as the umask "
                 "leaves it");
  app.add_option("--socket-group", socket_group,
                 "group of the unix: listeners' socket files, a name or a number (e.g. cuwire: "
                 "its members may connect, with --socket-mode 0660); also [server] socket_group");
  app.add_option("--backend", backend, "auto, sim or cuda")->capture_default_str();
  std::string driver;
  app.add_option("--driver", driver,
                 "driver library of the cuda backend (default: the system's libcuda.so.1); "
                 "cuwire's own libcuda.so.1 here, with CUWIRE_SERVER set, makes this server a "
                 "relay in front of that gpu-server");
  std::string device_printf = "client", busy_time = "measured";
  app.add_option("--device-printf", device_printf,
                 "cuda backend: where kernels' printf output goes: client (back to the program "
                 "that printed it, with the reply to its synchronizing call) or server (this "
                 "process's stdout, as the driver leaves it)")
      ->capture_default_str()
      ->check(CLI::IsMember({"client", "server"}));
  app.add_option("--busy-time", busy_time,
                 "measured: each GPU's busy time per tenant is measured (an event after each "
                 "submission, polled) for the figures, top and NVML utilization; off: only on "
                 "GPUs with compute caps, which need it")
      ->check(CLI::IsMember({"measured", "off"}))
      ->capture_default_str();
  std::string isolation = "auto", worker_idle = "60s", worker_timeout = "10s";
  app.add_option("--isolation", isolation,
                 "tenant: each tenant's sessions in a worker process of their own; session: a "
                 "worker per session; none: every session in this process; auto: tenant on the "
                 "cuda backend over a real driver, none on the sim and on a relay (the log says "
                 "why; design decision 14)")
      ->check(CLI::IsMember({"auto", "tenant", "session", "none"}))
      ->capture_default_str();
  app.add_option("--worker-idle", worker_idle,
                 "isolation tenant: a worker with no session for this long is let go")
      ->capture_default_str();
  app.add_option("--worker-timeout", worker_timeout,
                 "a worker process that does not answer the front for this long is killed as hung")
      ->capture_default_str();
  std::string shm_lane = "on";
  app.add_option("--shm-lane", shm_lane,
                 "on: a client on this host may bring a shared-memory lane (a memfd passed over "
                 "the Unix socket) through which large copies' bytes travel instead of the "
                 "socket; off: every byte takes the socket")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  int64_t read_spin_us = cuwire::server::SessionConfig::kDefaultReadSpin.count();
  app.add_option("--read-spin-us", read_spin_us,
                 "how long a session polls its connection for the next call before it sleeps, "
                 "in microseconds (an adaptive bound that shrinks when calls come slower); 0: "
                 "never poll")
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000}))
      ->capture_default_str();
  app.add_option("--sim-gpus", sim_gpus, "simulated devices (sim backend)")->capture_default_str();
  app.add_option("--sim-memory", sim_memory, "memory per simulated device, e.g. 8GiB")
      ->capture_default_str();
  app.add_option("--sim-instruction-budget", sim_budget,
                 "thread-instructions one sim kernel launch may run before it fails with "
                 "CUDA_ERROR_LAUNCH_TIMEOUT (0 = no limit)")
      ->capture_default_str();
  app.add_option("--sim-max-streams", sim_max_streams, "streams per sim context")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--sim-threads", sim_threads,
                 "threads that run the blocks of one sim kernel launch, per simulated device "
                 "(default: the host's cores)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  std::string profile_help = "what the simulated devices report themselves to be:";
  for (const sim::SimProfile& p : sim::sim_profiles())
    profile_help += std::string("\n  ") + p.name + ": " + p.description;
  app.add_option("--sim-profile", sim_profile, profile_help)->capture_default_str();
  app.add_option("--tls-cert", tls_cert, "PEM certificate chain for tls: listeners");
  app.add_option("--tls-key", tls_key, "PEM private key for tls: listeners");
  app.add_option("--token", token,
                 "token every client must present (clients: CUWIRE_TOKEN); visible to other "
                 "users in ps, prefer --token-file or the CUWIRE_SERVER_TOKEN environment "
                 "variable");
  app.add_option("--token-file", token_file,
                 "read the token from the first line of this file (keep it mode 600)");
  app.add_option("--admin-token-file", admin_token_file,
                 "the admin API's token (cuwire gpus, sessions, stats, top, tenant set, evict), "
                 "from the first line of this file; also [server] admin_token_file");
  app.add_flag("--allow-insecure", allow_insecure,
               "serve a network (non-loopback) address over plain tcp:, or without a token; "
               "refused otherwise. unix: sockets and loopback addresses never need it");
  app.add_option("--max-connections", max_connections,
                 "most connections open at once, in handshake or in session; one thread each "
                 "(1-65536)")
      ->capture_default_str();
  app.add_option("--max-sessions", max_sessions,
                 "most sessions (clients past Hello) at once (1-65536, at most "
                 "--max-connections)")
      ->capture_default_str();
  app.add_option("--placement", placement,
                 "which GPU a new session runs on: spread (most free first) or binpack")
      ->check(CLI::IsMember({"spread", "binpack"}))
      ->capture_default_str();
  app.add_option("--max-sessions-per-gpu", max_sessions_per_gpu,
                 "most sessions placed on one GPU (0: no bound)")
      ->check(CLI::Range(int64_t{0}, int64_t{65536}))
      ->capture_default_str();
  app.add_option("--max-contexts-per-session", max_contexts,
                 "contexts one session may hold (1-65536)")
      ->capture_default_str();
  app.add_option("--max-streams-per-session", max_streams,
                 "streams one session may hold, across its contexts (1-1048576)")
      ->capture_default_str();
  app.add_option("--max-handles-per-session", max_handles,
                 "handles of every kind one session may hold (1-16777216)")
      ->capture_default_str();
  app.add_option("--max-handshakes-per-peer", max_handshakes_per_peer,
                 "most connections from one peer still in their handshake: one IP address, "
                 "or one uid over a unix: socket (1-65536)")
      ->capture_default_str();
  app.add_option("--handshake-timeout", handshake_timeout,
                 "a connection that has not completed Hello (TLS handshake included) this long "
                 "after accept is closed, e.g. 10s, 500ms (1ms-1h)")
      ->capture_default_str();
  app.add_option("--idle-timeout", idle_timeout,
                 "close a session that moves no byte this long while the server waits on it; "
                 "time spent executing its calls does not count (0: never, the default)")
      ->capture_default_str();
  app.add_option("--drain-timeout", drain_timeout,
                 "on SIGTERM/SIGINT: how long calls in progress may run on before every "
                 "connection is closed regardless (0: close at once, at most 1h); a second "
                 "signal exits at once")
      ->capture_default_str();
  app.add_option("--max-message", max_message, "largest control message accepted")
      ->capture_default_str();
  app.add_option("--max-bulk", max_bulk, "largest bulk payload in one frame")
      ->capture_default_str();
  app.add_option("--ready-file", ready_file, "write the bound addresses here once serving");
  std::string metrics;
  app.add_option("--metrics", metrics,
                 "serve Prometheus metrics at http://HOST:PORT/metrics (e.g. 127.0.0.1:9400)");
  std::string context_memory = "auto";
  app.add_option("--context-memory", context_memory,
                 "device memory charged to a tenant for each context its sessions make, what a "
                 "context spends of its own (e.g. 256MiB); auto: 256MiB on the cuda backend, 0 "
                 "on the sim (which charges what it spends) and on a relay (its upstream does)")
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  // A bad setting: said on stderr, and the exit status.
  auto bad = [](const std::string& line) {
    std::fprintf(stderr, "gpu-server: %s\n", line.c_str());
    return 2;
  };
  if (!check_config_file.empty()) {
    FileConfig file;
    if (Status s = load_config_file(check_config_file, &file); !s) return bad(s.message());
    std::vector<std::string> warnings;
    if (Status s = check_config_further(check_config_file, file, &warnings); !s) {
      return bad(s.message());
    }
    for (const auto& w : warnings) std::fprintf(stderr, "gpu-server: warning: %s\n", w.c_str());
    std::printf("%s: good (%zu tenants)\n", check_config_file.c_str(), file.tenants.size());
    return 0;
  }
  FileConfig file;
  if (!config_file.empty()) {
    if (Status s = load_config_file(config_file, &file); !s) return bad(s.message());
    // The file's values, where no flag gave one.
    auto from_file = [&](const char* flag, auto& value, const auto& in_file) {
      if (app.count(flag) == 0 && in_file) {
        value = static_cast<std::decay_t<decltype(value)>>(*in_file);
      }
    };
    from_file("--listen", listen, file.listen);
    from_file("--socket-mode", socket_mode, file.socket_mode);
    from_file("--socket-group", socket_group, file.socket_group);
    from_file("--backend", backend, file.backend);
    from_file("--driver", driver, file.driver);
    from_file("--device-printf", device_printf, file.device_printf);
    from_file("--busy-time", busy_time, file.busy_time);
    from_file("--shm-lane", shm_lane, file.shm_lane);
    from_file("--tls-cert", tls_cert, file.tls_cert);
    from_file("--tls-key", tls_key, file.tls_key);
    from_file("--token-file", token_file, file.token_file);
    from_file("--log-level", log_level, file.log_level);
    from_file("--handshake-timeout", handshake_timeout, file.handshake_timeout);
    from_file("--idle-timeout", idle_timeout, file.idle_timeout);
    from_file("--drain-timeout", drain_timeout, file.drain_timeout);
    from_file("--metrics", metrics, file.metrics);
    from_file("--context-memory", context_memory, file.context_memory);
    from_file("--isolation", isolation, file.isolation);
    from_file("--worker-idle", worker_idle, file.worker_idle);
    from_file("--worker-timeout", worker_timeout, file.worker_timeout);
    from_file("--allow-insecure", allow_insecure, file.allow_insecure);
    from_file("--max-connections", max_connections, file.max_connections);
    from_file("--max-sessions", max_sessions, file.max_sessions);
    from_file("--max-handshakes-per-peer", max_handshakes_per_peer, file.max_handshakes_per_peer);
    from_file("--placement", placement, file.placement);
    from_file("--max-sessions-per-gpu", max_sessions_per_gpu, file.max_sessions_per_gpu);
    from_file("--sim-gpus", sim_gpus, file.sim_gpus);
    from_file("--sim-memory", sim_memory, file.sim_memory);
    from_file("--sim-instruction-budget", sim_budget, file.sim_instruction_budget);
    from_file("--sim-max-streams", sim_max_streams, file.sim_max_streams);
    from_file("--sim-threads", sim_threads, file.sim_threads);
    from_file("--sim-profile", sim_profile, file.sim_profile);
  }

  // The log goes to stdout as it was at start: the cuda backend may route fd 1 through a pipe
  // to collect device printf output (stdout_capture.h), which log lines must not join. Worker
  // processes log there too.
  int log_fd = -1;
  if (int fd = dup(STDOUT_FILENO); fd >= 0) {
    log_fd = fd;
    if (FILE* log_out = fdopen(fd, "w")) {
      auto sink = std::make_shared<spdlog::sinks::ansicolor_sink<spdlog::details::console_mutex>>(
          log_out, spdlog::color_mode::automatic);
      spdlog::set_default_logger(std::make_shared<spdlog::logger>("gpu-server", sink));
    } else {
      close(fd);
      log_fd = -1;
    }
  }
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ gpu-server: %v");

  ServerConfig cfg;
  if (listen.empty()) listen.push_back(kDefaultAddress);
  for (const auto& text : listen) {
    Address a;
    if (Status s = parse_address(text, &a); !s) return bad(s.message());
    cfg.listen.push_back(a);
  }
  uint64_t v = 0;
  for (auto [text, what] :
       {std::pair{&sim_memory, "--sim-memory"}, std::pair{&max_message, "--max-message"},
        std::pair{&max_bulk, "--max-bulk"}}) {
    if (Status s = parse_size(*text, &v); !s) return bad(std::string(what) + ": " + s.message());
    if (text == &sim_memory) cfg.sim.memory_bytes = v;
    if (text == &max_message) {
      if (v < 4096 || v > (1u << 30)) return bad("--max-message must be between 4KiB and 1GiB");
      cfg.session.limits.max_message_bytes = static_cast<uint32_t>(v);
    }
    if (text == &max_bulk) cfg.session.limits.max_bulk_bytes = v;
  }
  for (auto [value, what] :
       {std::pair{max_connections, "--max-connections"}, std::pair{max_sessions, "--max-sessions"},
        std::pair{max_handshakes_per_peer, "--max-handshakes-per-peer"}}) {
    if (value < 1 || value > 65536) {
      return bad(std::string(what) + " must be between 1 and 65536, not " + std::to_string(value));
    }
  }
  cfg.limits.max_connections = static_cast<size_t>(max_connections);
  cfg.limits.max_sessions = static_cast<size_t>(max_sessions);
  cfg.limits.max_handshakes_per_peer = static_cast<size_t>(max_handshakes_per_peer);
  for (auto [value, what, most] :
       {std::tuple{max_contexts, "--max-contexts-per-session", int64_t{1} << 16},
        std::tuple{max_streams, "--max-streams-per-session", int64_t{1} << 20},
        std::tuple{max_handles, "--max-handles-per-session", int64_t{1} << 24}}) {
    if (value < 1 || value > most) {
      return bad(std::string(what) + " must be between 1 and " + std::to_string(most) + ", not " +
                 std::to_string(value));
    }
  }
  cfg.session.handles = {static_cast<size_t>(max_contexts), static_cast<size_t>(max_streams),
                         static_cast<size_t>(max_handles)};
  std::chrono::milliseconds drain{0};
  constexpr std::chrono::milliseconds kHour = std::chrono::hours(1);
  for (auto [text, what] :
       {std::pair{&handshake_timeout, "--handshake-timeout"},
        std::pair{&idle_timeout, "--idle-timeout"}, std::pair{&drain_timeout, "--drain-timeout"}}) {
    std::chrono::milliseconds d{0};
    if (Status s = parse_duration(*text, &d); !s) {
      return bad(std::string(what) + ": " + s.message());
    }
    if (text == &handshake_timeout) {
      if (d.count() == 0 || d > kHour) return bad("--handshake-timeout must be between 1ms and 1h");
      cfg.session.handshake_timeout = d;
    } else if (text == &idle_timeout) {
      cfg.session.idle_timeout = d;
    } else {
      if (d > kHour) return bad("--drain-timeout must be at most 1h");
      drain = d;
    }
  }
  std::string token_warning;
  if (Status s = resolve_token(token, token_file, std::getenv("CUWIRE_SERVER_TOKEN"),
                               &cfg.session.token, &token_warning);
      !s) {
    return bad(s.message());
  }
  if (!token_warning.empty()) spdlog::warn("{}", token_warning);
  cfg.allow_insecure = allow_insecure;
  cfg.backend = backend;
  cfg.driver = driver;
  cfg.device_printf_to_client = device_printf == "client";
  cfg.measure_busy = busy_time == "measured";
  cfg.session.shm_lane = shm_lane == "on";
  // One processor: a poll would only keep the client from sending.
  cfg.session.read_spin = std::thread::hardware_concurrency() == 1
                              ? std::chrono::microseconds(0)
                              : std::chrono::microseconds(read_spin_us);
  cfg.sim.gpus = sim_gpus;
  cfg.sim.instruction_budget = sim_budget;
  cfg.sim.max_streams_per_context = sim_max_streams;
  cfg.sim.threads = sim_threads;
  if (!sim::find_sim_profile(sim_profile)) {
    std::string names;
    for (const sim::SimProfile& p : sim::sim_profiles())
      names += std::string(names.empty() ? "" : ", ") + p.name;
    return bad("sim profile '" + sim_profile + "' (--sim-profile, [sim] profile) is not one of " +
               names);
  }
  cfg.sim.profile = sim_profile;
  cfg.tls = {tls_cert, tls_key};
  cfg.socket_mode = socket_mode;
  cfg.socket_group = socket_group;
  cfg.tenants = file.tenants;
  cfg.open = file.open.value_or(true);
  parse_placement(placement, &cfg.placement);  // checked by CLI11 and the config file
  cfg.max_sessions_per_gpu = static_cast<int>(max_sessions_per_gpu);
  cfg.metrics = metrics;
  cfg.isolation = isolation;
  cfg.worker_log_fd = log_fd;
  if (Status s = parse_duration(worker_idle, &cfg.worker_idle); !s) {
    return bad("--worker-idle: " + s.message());
  }
  if (Status s = parse_duration(worker_timeout, &cfg.worker_timeout); !s) {
    return bad("--worker-timeout: " + s.message());
  }
  if (context_memory != "auto") {
    uint64_t bytes = 0;
    if (Status s = parse_size(context_memory, &bytes); !s) {
      return bad("--context-memory: " + s.message());
    }
    cfg.context_memory = bytes;
  }
  if (!cfg.tenants.empty() && !cfg.session.token.empty()) {
    return bad(
        "the config file names tenants, each with its token: no --token, --token-file "
        "or CUWIRE_SERVER_TOKEN besides");
  }
  cfg.session.admin_token_sha256 = file.admin_token_sha256;
  if (!admin_token_file.empty()) {
    std::string admin;
    if (Status s = read_token_file(admin_token_file, &admin); !s) return bad(s.message());
    cfg.session.admin_token_sha256 = token_digest(admin);
    for (const TenantSpec& t : cfg.tenants) {
      if (t.token_sha256 == *cfg.session.admin_token_sha256) {
        return bad("--admin-token-file holds tenant " + t.name + "'s token");
      }
    }
  }
  if (cfg.session.admin_token_sha256 && !cfg.session.token.empty() &&
      token_digest(cfg.session.token) == *cfg.session.admin_token_sha256) {
    return bad("the admin token must differ from the clients' token");
  }
  if (Status s = check_config(cfg); !s) return bad(s.message());

  // Every connection holds a socket and its own event-loop descriptors (about 4 in all): ask
  // for the hard limit, and say so when even that is short of --max-connections.
  if (rlimit nofile{}; getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    if (nofile.rlim_cur < nofile.rlim_max) {
      nofile.rlim_cur = nofile.rlim_max;
      setrlimit(RLIMIT_NOFILE, &nofile);
      getrlimit(RLIMIT_NOFILE, &nofile);
    }
    rlim_t want = static_cast<rlim_t>(cfg.limits.max_connections) * 4 + 64;
    if (nofile.rlim_cur != RLIM_INFINITY && nofile.rlim_cur < want) {
      spdlog::warn(
          "the descriptor limit ({}) is below what --max-connections {} may need "
          "(about {}); accepting will pause when it runs out",
          static_cast<unsigned long long>(nofile.rlim_cur), cfg.limits.max_connections,
          static_cast<unsigned long long>(want));
    }
  }
  char host[256] = "gpu-server";
  gethostname(host, sizeof host - 1);
  cfg.session.server_name = host;

  std::signal(SIGPIPE, SIG_IGN);
  // Block the stop signals in every thread (threads inherit the mask) and wait for them here.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigset_t waited = stop_signals;
  sigaddset(&waited, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &waited, nullptr);
  Server server(cfg);
  if (Status s = server.start(); !s) {
    std::fprintf(stderr, "gpu-server: %s\n", s.message().c_str());
    return 1;
  }
  if (!ready_file.empty()) {
    std::string tmp = ready_file + ".tmp";
    if (FILE* f = std::fopen(tmp.c_str(), "w")) {
      for (const auto& a : server.addresses()) std::fprintf(f, "%s\n", a.to_string().c_str());
      std::fclose(f);
      std::rename(tmp.c_str(), ready_file.c_str());
    }
  }
  notify_service_manager("READY=1\nSTATUS=serving\n");
  int sig = 0;
  // SIGHUP: the config file's tenant caps again, while sessions run (Server::reload).
  for (;;) {
    if (sigwait(&waited, &sig) != 0) continue;
    if (sig != SIGHUP) break;
    if (config_file.empty()) {
      spdlog::warn("SIGHUP: no --config file to reload");
      continue;
    }
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    notify_service_manager(
        fmt::format("RELOADING=1\nMONOTONIC_USEC={}\n",
                    static_cast<long long>(now.tv_sec) * 1'000'000 + now.tv_nsec / 1000));
    FileConfig again;
    if (Status s = load_config_file(config_file, &again); !s) {
      spdlog::error("SIGHUP: {} not reloaded: {}", config_file, s.message());
    } else {
      const int changed = server.reload(again.tenants);
      spdlog::info("SIGHUP: {} reloaded: caps of {} tenant(s) changed", config_file, changed);
    }
    notify_service_manager("READY=1\nSTATUS=serving\n");
  }
  notify_service_manager("STOPPING=1\n");
  spdlog::info("signal {}: draining (up to {} ms); a second signal exits at once", sig,
               drain.count());
  // The drain ends every connection within its timeout, but a call stuck inside the backend
  // could still hold its thread: past a grace period, or at a second signal, exit regardless.
  std::thread([stop_signals, drain] {
    timespec grace{static_cast<time_t>(drain.count() / 1000 + 5),
                   static_cast<long>(drain.count() % 1000) * 1'000'000};
    int second = sigtimedwait(&stop_signals, nullptr, &grace);
    if (second > 0) {
      spdlog::warn("signal {}: exiting without waiting for the drain", second);
    } else {
      spdlog::error("the drain did not finish within its timeout; exiting");
    }
    spdlog::default_logger()->flush();
    std::_Exit(1);
  }).detach();
  if (server.drain(drain)) spdlog::info("drained; exiting");
  return 0;
}
