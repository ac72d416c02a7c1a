// bench_suite: the measurements behind benchmarks/run.sh. Every cuwire figure is measured over
// both the unix: and the tcp: transport against a `gpu-server --backend sim` this program
// starts, beside a baseline measured in the same run on the same transport:
//
//   latency    cuMemcpyDtoH_v2 of 4 bytes, one call at a time: p50 and p99, against a raw
//              ping-pong of the same request and reply sizes (taken from the wire by `frames`
//              below), once with blocking reads and once with both ends spinning on
//              MSG_DONTWAIT
//   launch     cuLaunchKernel of an empty kernel, N in a loop: the loop alone (enqueue) and the
//              loop plus cuCtxSynchronize, against raw writes of N launch-sized frames (one
//              send each) and the server's acknowledgement of the last
//   bandwidth  cuMemcpyHtoD_v2 / cuMemcpyDtoH_v2, pageable and pinned (cuMemHostAlloc) host
//              buffers, 4 KiB to 1 GiB, against a raw stream of the same bytes (up: client
//              writes N, server answers 8; down: 8-byte request, server writes N) and a
//              single-thread memcpy
//   scaling    1, 4, 16, 64 client processes each making synchronous cuMemGetInfo_v2 calls
//              (never answered from the client's caches) for a fixed window after a common
//              start: calls/s of all, p99 latency over all calls, the slowest client's calls
//              as a share of the mean client's; against as many raw blocking ping-pong clients
//
// Processes. The client library reads CUWIRE_SERVER once per process and keeps one
// connection, so every measurement runs in a child process: this binary again, with a
// subcommand (`client ...` loads libcuda.so.1 with dlopen; `raw ...` speaks plain POSIX
// sockets to `raw-server`, a third subcommand, which this program also starts). Servers and
// children die with this process (PR_SET_PDEATHSIG); the servers are stopped at exit and on
// SIGINT/SIGTERM. Children print one JSON object on stdout; progress goes to stderr as
// `[k/N] what`, the table to stdout at the end, everything to the --json file.
//
// The machine is shared and noisy: nothing here judges a figure, it is printed beside its
// target for people to read. Times are CLOCK_MONOTONIC.
//
// Files: this one, the orchestrating process (servers, children, figures, table, JSON) and
// main; suite_children.cc, the measuring subcommands; suite_common.{h,cc}, what they share.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "benchmarks/suite_common.h"

namespace cuwire::bench {
namespace {

// ---------------------------------------------------------------------------------------------
// The orchestrating process: servers, children, figures, table, JSON.

// Servers to stop on a fatal signal (async-signal-safe: kill and waitpid only).
std::atomic<pid_t> g_servers[2] = {0, 0};

void on_fatal_signal(int sig) {
  for (auto& s : g_servers) {
    if (pid_t pid = s.load()) kill(pid, SIGKILL);
  }
  for (auto& s : g_servers) {
    if (pid_t pid = s.load()) waitpid(pid, nullptr, 0);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

std::string g_self;     // this executable, for the children
std::string g_own_tmp;  // the temporary directory this process made, removed at exit

// At exit of the orchestrating process, die() included: no server outlives it, no
// directory of its own stays behind.
void stop_servers_and_clean_up() {
  for (auto& s : g_servers) {
    if (pid_t pid = s.exchange(0)) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  if (!g_own_tmp.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(g_own_tmp, ec);
  }
}

struct Settings {
  bool quick = false;
  std::string json_path, tmp, gpu_server, library, command, git_commit, build_dir;
  // NAME=VALUE given to the shm-lane clients (the lane is the client's default over unix:),
  // and to the unix clients whose copies must take the socket.
  std::vector<std::string> shm_env = {"CUWIRE_SHM_LANE=1"};
  std::vector<std::string> socket_env = {"CUWIRE_SHM_LANE=0"};
  // Derived from quick.
  uint64_t latency_iters = 20000, latency_warmup = 1000, latency_rounds = 4;
  // Bursts of 1000 launches, each followed by a synchronize: a burst fits in the socket's and
  // the client's buffers, so its loop times what the client spends per launch, not the server
  // (a longer loop waits on the sim running the kernels once the buffers are full).
  uint64_t launch_count = 1000, launch_reps = 50;
  double copy_min_seconds = 0.25;
  uint64_t copy_min_reps = 3;
  double scale_seconds = 2.0;
  std::vector<int> client_counts = {1, 4, 16, 64};
  std::vector<uint64_t> sizes;
  std::vector<uint64_t> skipped_sizes;  // too large for the memory available
};

// A /proc/meminfo figure in bytes ("MemTotal:", "MemAvailable:"); 0 if absent.
uint64_t mem_bytes(const char* key) {
  std::ifstream in("/proc/meminfo");
  std::string k, unit;
  uint64_t kib = 0;
  while (in >> k >> kib >> unit) {
    if (k == key) return kib * 1024;
  }
  return 0;
}

const char* const kTransports[] = {"unix", "tcp"};

// A figure of the table and the JSON: a cuwire value beside its baseline.
struct Target {
  bool on_ratio = true;  // the bound applies to value/baseline, else to the value
  bool at_most = true;   // value (or ratio) <= bound, else >=
  double bound = 0;
  std::string text;
};

struct Figure {
  std::string id, group, name, transport, unit;
  double value = 0;
  std::string baseline_name;
  double baseline = 0;
  std::optional<Target> target;
  std::string also_name;  // a second baseline, shown beside the first (memcpy)
  double also = 0;
  double ratio() const { return value / baseline; }
  std::optional<bool> met() const {
    if (!target) return std::nullopt;
    const double x = target->on_ratio ? ratio() : value;
    return target->at_most ? x <= target->bound : x >= target->bound;
  }
};

Target ratio_at_most(double b) {
  char t[32];
  std::snprintf(t, sizeof t, "<= %gx", b);
  return {true, true, b, t};
}
Target ratio_at_least(double b) {
  char t[32];
  std::snprintf(t, sizeof t, ">= %gx", b);
  return {true, false, b, t};
}

class Suite {
 public:
  explicit Suite(Settings s) : s_(std::move(s)), gpu_(&g_servers[0]), raw_(&g_servers[1]) {}

  void run() {
    start_servers();
    plan();
    const size_t total = steps_.size();
    const uint64_t t0 = now_ns();
    for (size_t i = 0; i < total; ++i) {
      std::fprintf(stderr, "[%zu/%zu] %s ...\n", i + 1, total, steps_[i].label.c_str());
      steps_[i].run();
      gpu_.check_alive();
      raw_.check_alive();
    }
    seconds_ = static_cast<double>(now_ns() - t0) * 1e-9;
    gpu_.stop();
    raw_.stop();
    make_figures();
    print_table();
    write_json();
  }

 private:
  struct Step {
    std::string label;
    std::function<void()> run;
  };

  void start_servers() {
    const std::string& d = s_.tmp;
    const std::vector<std::string> env = environment({"CUWIRE_SERVER"}, {});
    // Many clients connect at once in the scaling runs: handshakes per peer raised for them.
    auto gpu =
        gpu_.start("gpu-server",
                   {s_.gpu_server, "--backend", "sim", "--listen", "unix:" + d + "/gpu.sock",
                    "--listen", "tcp:127.0.0.1:0", "--ready-file", d + "/gpu.ready", "--log-level",
                    "warn", "--drain-timeout", "1s", "--max-handshakes-per-peer", "256"},
                   env, d + "/gpu-server.log", d + "/gpu.ready");
    auto raw = raw_.start("raw-server",
                          {g_self, "raw-server", "--listen", "unix:" + d + "/raw.sock", "--listen",
                           "tcp:127.0.0.1:0", "--ready-file", d + "/raw.ready"},
                          env, d + "/raw-server.log", d + "/raw.ready");
    for (const auto* list : {&gpu, &raw}) {
      for (const std::string& a : *list) {
        const std::string t = a.substr(0, a.find(':'));
        (list == &gpu ? gpu_addr_ : raw_addr_)[t] = a;
      }
    }
    for (const char* t : kTransports) {
      if (!gpu_addr_.count(t) || !raw_addr_.count(t)) die(std::string("no ") + t + " address");
    }
  }

  // The command line of a child: this binary, `args`, and for a client the library to load.
  std::vector<std::string> with_library(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {g_self};
    argv.insert(argv.end(), args.begin(), args.end());
    if (!args.empty() && args[0] == "client") {
      argv.push_back("--library");
      argv.push_back(s_.library);
    }
    return argv;
  }

  // Runs `bench_suite args...` and returns the JSON it printed; `server`: the child's
  // CUWIRE_SERVER (empty: none), `extra_env`: more NAME=VALUE.
  json child(const std::vector<std::string>& args, const std::string& server = "",
             const std::vector<std::string>& extra_env = {}) {
    std::vector<std::string> argv = with_library(args);
    std::vector<std::string> add = extra_env;
    if (!server.empty()) add.push_back("CUWIRE_SERVER=" + server);
    std::vector<std::string> drop = {"CUWIRE_SERVER"};
    for (const std::string& e : s_.shm_env) drop.push_back(e.substr(0, e.find('=')));
    for (const std::string& e : s_.socket_env) drop.push_back(e.substr(0, e.find('=')));
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) die(errno_text("pipe"));
    const pid_t pid = spawn(argv, environment(drop, add), p[1], -1);
    close(p[1]);
    std::string out;
    char buf[4096];
    for (;;) {
      const ssize_t r = read(p[0], buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      out.append(buf, static_cast<size_t>(r));
    }
    close(p[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::string cmd;
    for (auto& a : args) cmd += " " + a;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      die("`bench_suite" + cmd + "` failed (" + exit_text(status) + ")\ngpu-server log (end):\n" +
          gpu_.log_tail());
    }
    try {
      return json::parse(out);
    } catch (const std::exception& e) {
      die("`bench_suite" + cmd + "` printed no JSON (" + e.what() + "): " + out);
    }
  }

  // `clients` children `args... --ready-fd --start-fd --samples` started together behind one
  // barrier; what they did, and all their latency samples.
  json scale(int clients, const std::vector<std::string>& args, const std::string& server) {
    int ready[2], start[2];
    if (pipe2(ready, O_CLOEXEC) != 0 || pipe2(start, O_CLOEXEC) != 0) die(errno_text("pipe"));
    std::vector<pid_t> pids;
    std::vector<std::string> outs, sample_files;
    const std::vector<std::string> env = environment(
        {"CUWIRE_SERVER"}, server.empty() ? std::vector<std::string>{}
                                          : std::vector<std::string>{"CUWIRE_SERVER=" + server});
    for (int i = 0; i < clients; ++i) {
      outs.push_back(s_.tmp + "/scale-" + std::to_string(i) + ".json");
      sample_files.push_back(s_.tmp + "/scale-" + std::to_string(i) + ".samples");
      std::vector<std::string> argv = with_library(args);
      for (const auto& a :
           std::vector<std::string>{"--ready-fd", std::to_string(ready[1]), "--start-fd",
                                    std::to_string(start[0]), "--samples", sample_files.back()}) {
        argv.push_back(a);
      }
      const int out = open(outs.back().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (out < 0) die(errno_text("create " + outs.back()));
      pids.push_back(spawn(argv, env, out, -1, {ready[1], start[0]}));
      close(out);
    }
    close(ready[1]);
    close(start[0]);
    // Everyone connected and made one call: then all start at once. A child that exits before
    // it is ready has failed: the others are stopped and the run ends.
    int seen = 0;
    std::string failure;
    const uint64_t deadline = now_ns() + 120'000'000'000u;
    while (seen < clients && failure.empty()) {
      pollfd pfd{ready[0], POLLIN, 0};
      if (poll(&pfd, 1, 100) > 0) {
        char c[64];
        const ssize_t r = read(ready[0], c, sizeof c);
        if (r > 0) seen += static_cast<int>(r);
      }
      for (int i = 0; i < clients && failure.empty(); ++i) {
        int status = 0;
        if (waitpid(pids[i], &status, WNOHANG) == pids[i]) {
          pids[i] = 0;
          failure = "client " + std::to_string(i) + " exited before the start (" +
                    exit_text(status) + ")";
        }
      }
      if (failure.empty() && now_ns() > deadline) {
        failure = std::to_string(clients - seen) + " clients not ready after 120 s";
      }
    }
    close(ready[0]);
    if (!failure.empty()) {
      for (pid_t pid : pids) {
        if (pid > 0) kill(pid, SIGKILL);
      }
      for (pid_t pid : pids) {
        if (pid > 0) waitpid(pid, nullptr, 0);
      }
      close(start[1]);
      die("scaling with " + std::to_string(clients) + " clients: " + failure +
          "\ngpu-server log (end):\n" + gpu_.log_tail());
    }
    close(start[1]);
    std::vector<double> all;
    std::vector<double> calls, rates;
    for (int i = 0; i < clients; ++i) {
      int status = 0;
      while (waitpid(pids[i], &status, 0) < 0 && errno == EINTR) {
      }
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        die("scaling client " + std::to_string(i) + " of " + std::to_string(clients) + " failed (" +
            exit_text(status) + ")\ngpu-server log (end):\n" + gpu_.log_tail());
      }
      json r = json::parse(read_text(outs[i]));
      calls.push_back(r["calls"].get<double>());
      rates.push_back(r["calls"].get<double>() / r["seconds"].get<double>());
      std::ifstream in(sample_files[i], std::ios::binary);
      std::vector<uint32_t> s(r["calls"].get<size_t>());
      in.read(reinterpret_cast<char*>(s.data()), static_cast<std::streamsize>(s.size() * 4));
      if (!in) die("short sample file " + sample_files[i]);
      for (uint32_t v : s) all.push_back(v);
      unlink(outs[i].c_str());
      unlink(sample_files[i].c_str());
    }
    double sum_rate = 0, sum_calls = 0;
    for (double r : rates) sum_rate += r;
    for (double c : calls) sum_calls += c;
    const double mean_calls = sum_calls / clients;
    std::sort(all.begin(), all.end());
    return {{"clients", clients},
            {"calls_per_s", sum_rate},
            {"p50_ns", quantile(all, 0.5)},
            {"p99_ns", quantile(all, 0.99)},
            {"slowest_share", *std::min_element(calls.begin(), calls.end()) / mean_calls},
            {"calls", calls}};
  }

  void plan() {
    const std::string frames_socket = s_.tmp + "/frames-proxy.sock";
    steps_.push_back({"frame sizes of a 4-byte DtoH, cuMemGetInfo and a launch (unix)", [=, this] {
                        frames_ = child({"client", "frames", "--proxy-socket", frames_socket},
                                        gpu_addr_["unix"]);
                      }});
    // 1. Latency of a 4-byte synchronous copy, in rounds: each round a fresh process per
    // series, the series one after the other, so that where the scheduler happens to put
    // client and server (on a VM a wake-up across vCPUs costs tens of microseconds) and bursts
    // of load elsewhere fall on cuwire and its baselines alike. The figures pool all rounds.
    const uint64_t per_round = std::max<uint64_t>(1, s_.latency_iters / s_.latency_rounds);
    const std::string iters = std::to_string(per_round), warmup = std::to_string(s_.latency_warmup);
    for (uint64_t r = 1; r <= s_.latency_rounds; ++r) {
      const std::string round =
          " (round " + std::to_string(r) + "/" + std::to_string(s_.latency_rounds) + ")";
      for (const char* t : kTransports) {
        const std::string tr = t;
        for (const char* mode : {"blocking", "spinning"}) {
          const std::string m = mode;
          steps_.push_back({"4-byte ping-pong raw " + m + " " + tr + round, [=, this] {
                              latency_round(tr, "raw_" + m,
                                            {"raw", "ping", "--server", raw_addr_[tr], "--mode", m,
                                             "--request", frame_bytes("dtoh4", "request"),
                                             "--reply", frame_bytes("dtoh4", "reply"), "--iters",
                                             iters, "--warmup", warmup},
                                            "");
                            }});
        }
        steps_.push_back({"4-byte cuMemcpyDtoH latency cuwire " + tr + round, [=, this] {
                            latency_round(
                                tr, "cuwire",
                                {"client", "latency", "--iters", iters, "--warmup", warmup},
                                gpu_addr_[tr]);
                          }});
      }
    }
    // 2. Launches.
    for (const char* t : kTransports) {
      const std::string tr = t;
      const std::string count = std::to_string(s_.launch_count),
                        reps = std::to_string(s_.launch_reps);
      steps_.push_back({"launch-sized frames raw " + tr, [=, this] {
                          results_["launch"][tr]["raw"] = child(
                              {"raw", "frames", "--server", raw_addr_[tr], "--size",
                               frame_bytes("launch", "request"), "--count", count, "--reps", reps});
                        }});
      steps_.push_back({"empty-kernel launches cuwire " + tr, [=, this] {
                          results_["launch"][tr]["cuwire"] =
                              child({"client", "launch", "--count", count, "--reps", reps},
                                    gpu_addr_[tr]);
                        }});
    }
    // 3. Bandwidth, size by size, so that a burst of load elsewhere falls on a figure and its
    // baselines alike.
    for (uint64_t n : s_.sizes) {
      const std::string bytes = std::to_string(n);
      const std::vector<std::string> timing = {"--min-seconds", std::to_string(s_.copy_min_seconds),
                                               "--min-reps", std::to_string(s_.copy_min_reps)};
      auto with_timing = [timing](std::vector<std::string> a) {
        a.insert(a.end(), timing.begin(), timing.end());
        return a;
      };
      steps_.push_back({"memcpy " + size_text(n), [=, this] {
                          record_point("host", "memcpy",
                                       child(with_timing({"raw", "memcpy", "--bytes", bytes})));
                        }});
      for (const char* t : kTransports) {
        const std::string tr = t;
        for (const char* dir : {"up", "down"}) {
          const std::string d = dir;
          const std::string copy_dir = d == "up" ? "h2d" : "d2h";
          steps_.push_back({"raw stream " + d + " " + tr + " " + size_text(n), [=, this] {
                              record_point(
                                  tr, "raw_" + d,
                                  child(with_timing({"raw", "stream", "--server", raw_addr_[tr],
                                                     "--direction", d, "--bytes", bytes})));
                            }});
          // Over unix: the socket's figure, with the lane off.
          plan_bandwidth(n, copy_dir, tr, tr,
                         tr == "unix" ? s_.socket_env : std::vector<std::string>{}, with_timing);
        }
      }
      plan_second_unix_configuration(n, with_timing);
    }
    // 4. Scaling.
    for (const char* t : kTransports) {
      const std::string tr = t;
      const std::string secs = std::to_string(s_.scale_seconds);
      for (int k : s_.client_counts) {
        const std::string clients = std::to_string(k);
        steps_.push_back({"scaling raw " + tr + " " + clients + " clients", [=, this] {
                            results_["scaling"][tr]["raw"].push_back(
                                scale(k,
                                      {"raw", "scale", "--server", raw_addr_[tr], "--request",
                                       frame_bytes("mem_get_info", "request"), "--reply",
                                       frame_bytes("mem_get_info", "reply"), "--seconds", secs},
                                      ""));
                          }});
        steps_.push_back({"scaling cuwire " + tr + " " + clients + " clients", [=, this] {
                            results_["scaling"][tr]["cuwire"].push_back(
                                scale(k, {"client", "scale", "--seconds", secs}, gpu_addr_[tr]));
                          }});
      }
    }
  }

  // ---- The same-host shared-memory lane: a second unix configuration. --------------------
  // Over unix: the client library moves large copies' bytes through a shared-memory lane
  // (protocol/shm_lane.h) unless CUWIRE_SHM_LANE=0. The unix rows above are the socket's (lane
  // off); these measure the copies once more with the lane on (shm_env, which --shm-env
  // replaces), as transport "unix (shm lane)", against single-thread memcpy (target >= 0.7x
  // at 64 MiB).
  template <typename WithTiming>
  void plan_second_unix_configuration(uint64_t n, const WithTiming& with_timing) {
    if (s_.shm_env.empty()) return;
    for (const char* dir : {"h2d", "d2h"}) {
      plan_bandwidth(n, dir, kShmTransport, "unix", s_.shm_env, with_timing);
    }
  }

  // The bandwidth steps of n-byte copies in direction `dir` ("h2d" or "d2h"), from pageable
  // and from pinned host memory, recorded as transport `tr`: the client child talks to the
  // server's `server_tr` address with `env` set.
  template <typename WithTiming>
  void plan_bandwidth(uint64_t n, const std::string& dir, const std::string& tr,
                      const std::string& server_tr, const std::vector<std::string>& env,
                      const WithTiming& with_timing) {
    const std::string bytes = std::to_string(n);
    for (const char* host : {"pageable", "pinned"}) {
      const std::string h = host;
      steps_.push_back({(dir == "h2d" ? "H2D" : "D2H") + std::string(" bandwidth ") + tr + " " + h +
                            " " + size_text(n),
                        [=, this] {
                          record_point(tr, dir + "_" + h,
                                       child(with_timing({"client", "copy", "--direction", dir,
                                                          "--host", h, "--bytes", bytes}),
                                             gpu_addr_[server_tr], env));
                        }});
    }
  }
  static constexpr const char* kShmTransport = "unix (shm lane)";

  // One round of a latency series: its samples kept, its p50 noted.
  void latency_round(const std::string& transport, const std::string& series,
                     std::vector<std::string> args, const std::string& server) {
    const std::string path = s_.tmp + "/latency.samples";
    args.push_back("--samples");
    args.push_back(path);
    const json r = child(args, server);
    std::vector<double> samples = read_samples(path);
    unlink(path.c_str());
    if (samples.size() != r["count"].get<size_t>()) die("latency samples lost: " + path);
    auto& all = latency_samples_[transport][series];
    all.insert(all.end(), samples.begin(), samples.end());
    results_["latency_rounds"][transport][series].push_back(r["p50_ns"]);
  }

  std::string frame_bytes(const std::string& call, const std::string& side) const {
    const double b = frames_.at(call).at(side).get<double>();
    return std::to_string(std::max<int64_t>(1, std::llround(b)));
  }

  void record_point(const std::string& transport, const std::string& series, json point) {
    point["series"] = series;
    results_["bandwidth"][transport][series].push_back(point);
  }

  // The bandwidth point of `series` at `bytes`, or nullopt (skipped or not measured).
  std::optional<double> gib(const std::string& transport, const std::string& series,
                            uint64_t bytes) const {
    const json& b = results_.value("bandwidth", json::object());
    if (!b.contains(transport) || !b[transport].contains(series)) return std::nullopt;
    for (const json& p : b[transport][series]) {
      if (p.contains("gib_per_s") && p["bytes"].get<uint64_t>() == bytes) {
        return p["gib_per_s"].get<double>();
      }
    }
    return std::nullopt;
  }

  void make_figures() {
    for (const auto& [transport, by_series] : latency_samples_) {
      for (const auto& [series, samples] : by_series) {
        results_["latency"][transport][series] = latency_summary(samples);
        results_["latency"][transport][series]["round_p50_ns"] =
            results_["latency_rounds"][transport][series];
      }
    }
    results_.erase("latency_rounds");
    auto add = [&](std::string id, std::string group, std::string name, std::string transport,
                   std::string unit, double value, std::string baseline_name, double baseline,
                   std::optional<Target> target) {
      Figure f;
      f.id = std::move(id);
      f.group = std::move(group);
      f.name = std::move(name);
      f.transport = std::move(transport);
      f.unit = std::move(unit);
      f.value = value;
      f.baseline_name = std::move(baseline_name);
      f.baseline = baseline;
      f.target = std::move(target);
      figures_.push_back(std::move(f));
    };
    for (const char* t : kTransports) {
      const json& l = results_["latency"][t];
      const double us = 1e-3;
      const double c50 = l["cuwire"]["p50_ns"].get<double>() * us,
                   c99 = l["cuwire"]["p99_ns"].get<double>() * us;
      const double b50 = l["raw_blocking"]["p50_ns"].get<double>() * us,
                   b99 = l["raw_blocking"]["p99_ns"].get<double>() * us;
      const double s50 = l["raw_spinning"]["p50_ns"].get<double>() * us,
                   s99 = l["raw_spinning"]["p99_ns"].get<double>() * us;
      const bool is_unix = std::string(t) == "unix";
      add("dtoh4_p50_vs_blocking", "latency", "4 B DtoH p50 / raw blocking", t, "us", c50,
          "raw blocking ping-pong p50", b50, ratio_at_most(1.25));
      add("dtoh4_p99_vs_blocking", "latency", "4 B DtoH p99 / raw blocking", t, "us", c99,
          "raw blocking ping-pong p99", b99, ratio_at_most(2.0));
      add("dtoh4_p50_vs_spinning", "latency", "4 B DtoH p50 / raw spinning", t, "us", c50,
          "raw spinning ping-pong p50", s50,
          is_unix ? std::optional<Target>(ratio_at_most(2.0)) : std::nullopt);
      add("dtoh4_p99_vs_spinning", "latency", "4 B DtoH p99 / raw spinning", t, "us", c99,
          "raw spinning ping-pong p99", s99, std::nullopt);
    }
    for (const char* t : kTransports) {
      const json& c = results_["launch"][t]["cuwire"];
      const json& r = results_["launch"][t]["raw"];
      const std::string n = std::to_string(s_.launch_count);
      const double ce = c["enqueue_ns"].get<double>(), ct = c["total_ns"].get<double>();
      const double re = r["enqueue_ns"].get<double>(), rt = r["total_ns"].get<double>();
      add("launch_enqueue_ns", "launch", "launch enqueue per launch (" + n + ")", t, "ns", ce,
          "raw send of a launch-sized frame", re, Target{false, true, 500, "<= 500 ns"});
      add("launch_enqueue_rate", "launch", "launches enqueued/s (" + n + ")", t, "1/s", 1e9 / ce,
          "raw launch-sized frames sent/s", 1e9 / re, Target{false, false, 2e6, ">= 2 M/s"});
      add("launch_total_rate", "launch", "launches/s incl. sync (" + n + ")", t, "1/s", 1e9 / ct,
          "raw frames/s incl. ack", 1e9 / rt, std::nullopt);
    }
    auto bandwidth_figures = [&](const std::string& t, const std::string& base_transport,
                                 bool vs_memcpy, double target) {
      for (uint64_t n : s_.sizes) {
        for (const char* dir : {"h2d", "d2h"}) {
          const std::string d = dir;
          const std::string raw_series = d == "h2d" ? "raw_up" : "raw_down";
          const auto raw = gib(base_transport, raw_series, n);
          const auto mem = gib("host", "memcpy", n);
          for (const char* host : {"pageable", "pinned"}) {
            const auto v = gib(t, d + "_" + host, n);
            if (!v) continue;
            Figure f;
            f.id = d + "_" + host + "_" + std::to_string(n);
            f.group = "bandwidth";
            f.name = (d == "h2d" ? "H2D " : "D2H ") + std::string(host) + " " + size_text(n);
            f.transport = t;
            f.unit = "GiB/s";
            f.value = *v;
            if (vs_memcpy) {
              if (!mem) continue;
              f.baseline_name = "single-thread memcpy";
              f.baseline = *mem;
            } else {
              if (!raw) continue;
              f.baseline_name = d == "h2d" ? "raw stream up" : "raw stream down";
              f.baseline = *raw;
              if (mem) {
                f.also_name = "single-thread memcpy";
                f.also = *mem;
              }
            }
            if (n == (64u << 20)) f.target = ratio_at_least(target);
            figures_.push_back(f);
          }
        }
      }
    };
    for (const char* t : kTransports) bandwidth_figures(t, t, false, 0.9);
    if (!s_.shm_env.empty()) bandwidth_figures(kShmTransport, "unix", true, 0.7);
    for (const char* t : kTransports) {
      const json& c = results_["scaling"][t]["cuwire"];
      const json& r = results_["scaling"][t]["raw"];
      for (size_t i = 0; i < c.size() && i < r.size(); ++i) {
        const std::string k = std::to_string(c[i]["clients"].get<int>());
        add("scale_calls_per_s_" + k, "scaling", "calls/s, " + k + " clients", t, "1/s",
            c[i]["calls_per_s"].get<double>(), "raw blocking ping-pong clients",
            r[i]["calls_per_s"].get<double>(), std::nullopt);
        add("scale_p99_" + k, "scaling", "call p99, " + k + " clients", t, "us",
            c[i]["p99_ns"].get<double>() * 1e-3, "raw blocking ping-pong p99",
            r[i]["p99_ns"].get<double>() * 1e-3, std::nullopt);
        add("scale_slowest_share_" + k, "scaling", "slowest/mean client, " + k + " clients", t,
            "share", c[i]["slowest_share"].get<double>(), "raw clients' slowest/mean",
            r[i]["slowest_share"].get<double>(), std::nullopt);
      }
    }
  }

  static std::string value_text(double v, const std::string& unit) {
    char buf[64];
    if (unit == "1/s") {
      if (v >= 1e6) {
        std::snprintf(buf, sizeof buf, "%.2f M/s", v / 1e6);
      } else {
        std::snprintf(buf, sizeof buf, "%.1f k/s", v / 1e3);
      }
    } else if (unit == "share") {
      std::snprintf(buf, sizeof buf, "%.2f", v);
    } else if (unit == "us" || unit == "ns") {
      std::snprintf(buf, sizeof buf, "%.1f %s", v, unit.c_str());
    } else {
      std::snprintf(buf, sizeof buf, "%.2f %s", v, unit.c_str());
    }
    return buf;
  }

  void print_table() const {
    std::printf("\ncuwire benchmark suite%s: gpu-server --backend sim, %.0f s of measuring\n",
                s_.quick ? " (--quick)" : "", seconds_);
    std::printf(
        "frames (bytes on the wire): 4-byte DtoH %.0f request / %.0f reply, "
        "cuMemGetInfo %.0f / %.0f, launch %.1f request\n",
        frames_["dtoh4"]["request"].get<double>(), frames_["dtoh4"]["reply"].get<double>(),
        frames_["mem_get_info"]["request"].get<double>(),
        frames_["mem_get_info"]["reply"].get<double>(), frames_["launch"]["request"].get<double>());
    std::string group;
    for (const Figure& f : figures_) {
      if (f.group != group) {
        group = f.group;
        std::printf("\n%-38s %-16s %12s %12s  %-34s %7s  %-10s %s\n", group.c_str(), "transport",
                    "cuwire", "baseline", "(baseline is)", "ratio", "target", "");
      }
      std::string target, verdict;
      if (f.target) {
        target = f.target->text;
        verdict = *f.met() ? "met" : "MISSED";
      }
      std::string also;
      if (!f.also_name.empty()) {
        char buf[96];
        std::snprintf(buf, sizeof buf, "  memcpy %s (%.2fx)", value_text(f.also, f.unit).c_str(),
                      f.value / f.also);
        also = buf;
      }
      std::printf("%-38s %-16s %12s %12s  %-34s %6.2fx  %-10s %-6s%s\n", f.name.c_str(),
                  f.transport.c_str(), value_text(f.value, f.unit).c_str(),
                  value_text(f.baseline, f.unit).c_str(), f.baseline_name.c_str(), f.ratio(),
                  target.c_str(), verdict.c_str(), also.c_str());
    }
    std::fflush(stdout);
  }

  void write_json() const {
    utsname u{};
    uname(&u);
    char date[64];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    json figures = json::array();
    for (const Figure& f : figures_) {
      json j = {{"id", f.id},
                {"group", f.group},
                {"name", f.name},
                {"transport", f.transport},
                {"unit", f.unit},
                {"value", f.value},
                {"baseline", {{"name", f.baseline_name}, {"value", f.baseline}, {"unit", f.unit}}},
                {"ratio", f.ratio()}};
      if (f.target) {
        j["target"] = {{"text", f.target->text},
                       {"applies_to", f.target->on_ratio ? "ratio" : "value"},
                       {"bound", f.target->bound},
                       {"at_most", f.target->at_most},
                       {"met", *f.met()}};
      }
      if (!f.also_name.empty()) {
        j["also"] = {{"name", f.also_name}, {"value", f.also}, {"ratio", f.value / f.also}};
      }
      figures.push_back(j);
    }
    json settings = {
        {"latency_iters", s_.latency_iters},   {"latency_rounds", s_.latency_rounds},
        {"latency_warmup", s_.latency_warmup}, {"launch_count", s_.launch_count},
        {"launch_reps", s_.launch_reps},       {"copy_min_seconds", s_.copy_min_seconds},
        {"copy_min_reps", s_.copy_min_reps},   {"scale_seconds", s_.scale_seconds},
        {"client_counts", s_.client_counts},   {"sizes", s_.sizes},
        {"skipped_sizes", s_.skipped_sizes},   {"shm_env", s_.shm_env}};
    json out = {{"schema", 1},
                {"command", s_.command},
                {"date", date},
                {"quick", s_.quick},
                {"seconds", seconds_},
                {"git_commit", s_.git_commit},
                {"build_dir", s_.build_dir},
                {"host",
                 {{"nproc", std::thread::hardware_concurrency()},
                  {"uname", std::string(u.sysname) + " " + u.nodename + " " + u.release + " " +
                                u.version + " " + u.machine},
                  {"mem_total_bytes", mem_bytes("MemTotal:")}}},
                {"server", "gpu-server --backend sim"},
                {"transports", {"unix", "tcp"}},
                {"settings", settings},
                {"frames", frames_},
                {"figures", figures},
                {"results", results_}};
    std::ofstream f(s_.json_path);
    f << out.dump(1) << "\n";
    if (!f) die("cannot write " + s_.json_path);
    std::fprintf(stderr, "bench_suite: wrote %s\n", s_.json_path.c_str());
  }

 private:
  Settings s_;
  ServerProcess gpu_, raw_;
  std::map<std::string, std::string> gpu_addr_, raw_addr_;
  std::vector<Step> steps_;
  std::map<std::string, std::map<std::string, std::vector<double>>> latency_samples_;
  json frames_, results_ = json::object();
  std::vector<Figure> figures_;
  double seconds_ = 0;
};

int orchestrate(const Options& o) {
  Settings s;
  s.quick = o.has("quick");
  s.json_path = o.need("json");
  s.gpu_server = o.get("gpu-server", CUWIRE_GPU_SERVER);
  s.library = o.get("library", CUWIRE_LIBRARY);
  s.command = o.get("command", "bench_suite");
  s.git_commit = o.get("git-commit", "unknown");
  s.build_dir = o.get("build-dir", "");
  bool shm_given = false;
  for (const std::string& e : o.all("shm-env")) {
    if (e.find('=') == std::string::npos || e.front() == '=') die("--shm-env wants NAME=VALUE");
    if (!shm_given) s.shm_env.clear();
    shm_given = true;
    s.shm_env.push_back(e);
  }
  if (s.quick) {
    s.latency_iters = 5000;
    s.latency_warmup = 300;
    s.latency_rounds = 2;
    s.launch_count = 1000;
    s.launch_reps = 10;
    s.copy_min_seconds = 0.05;
    s.copy_min_reps = 2;
    s.scale_seconds = 0.5;
    s.client_counts = {1, 4, 16};
  }
  std::vector<uint64_t> sizes = {4u << 10, 64u << 10, 1u << 20, 16u << 20, 64u << 20, 256u << 20};
  if (!s.quick) sizes.push_back(1u << 30);
  // A copy of n bytes holds about 2n in the client and server processes at once (host buffer,
  // device memory) and up to 2n more in the raw baselines: 4n and 2 GiB to spare, or skipped.
  const uint64_t available = mem_bytes("MemAvailable:");
  for (uint64_t n : sizes) {
    if (s.quick && n > (64u << 20)) continue;
    if (4 * n + (2ull << 30) <= available) {
      s.sizes.push_back(n);
    } else {
      s.skipped_sizes.push_back(n);
      std::fprintf(stderr, "bench_suite: skipping %s copies: %.1f GiB of memory available\n",
                   size_text(n).c_str(), static_cast<double>(available) / kGiB);
    }
  }
  // A private directory for sockets, logs and samples; removed at exit unless given.
  bool own_tmp = false;
  s.tmp = o.get("tmp");
  if (s.tmp.empty()) {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/cuwire-bench-XXXXXX";
    if (!mkdtemp(tmpl.data())) die(errno_text("mkdtemp"));
    s.tmp = tmpl;
    own_tmp = true;
  }
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  if (own_tmp) g_own_tmp = s.tmp;
  std::atexit(stop_servers_and_clean_up);  // also on die()
  Suite(s).run();
  return 0;
}

std::string self_path() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) die(errno_text("readlink /proc/self/exe"));
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace
}  // namespace cuwire::bench

using namespace cuwire::bench;

int main(int argc, char** argv) {
  g_self = self_path();
  const std::string first = argc > 1 ? argv[1] : "";
  if (first == "raw-server") return raw_server_main(Options(argc, argv, 2, {}));
  if (first == "client" && argc > 2) {
    Options o(argc, argv, 3, {});
    return client_main(argv[2], o, o.get("library", CUWIRE_LIBRARY));
  }
  if (first == "raw" && argc > 2) return raw_main(argv[2], Options(argc, argv, 3, {}));
  if (first == "-h" || first == "--help") {
    std::printf(
        "usage: bench_suite --json FILE [--quick] [--tmp DIR] [--shm-env NAME=VALUE]\n"
        "                   [--gpu-server PATH] [--library PATH] [--command TEXT]\n"
        "                   [--git-commit TEXT] [--build-dir DIR]\n"
        "Normally run by benchmarks/run.sh, which also draws the plots.\n");
    return 0;
  }
  return orchestrate(Options(argc, argv, 1, {"quick"}));
}
