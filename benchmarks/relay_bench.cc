// What a relay adds: a gpu-server on the cuda backend whose driver is cuwire's own
// libcuda.so.1 (gpu-server --driver), in front of a second gpu-server, against the same client
// talking to that second server directly, both measured in the same run:
//   SyncCall/cuMemGetInfo/{one_hop,relay,worker}   a synchronous call (never cached)
//   HtoD/<bytes>/{one_hop,relay,worker}            cuMemcpyHtoD of 64 KiB, 1 MiB, 16 MiB
//   DtoH/<bytes>/{one_hop,relay,worker}            cuMemcpyDtoH of the same sizes
// `worker` is a second relay like the first whose sessions run in worker processes
// (--isolation tenant, design decision 14): the client's connection is handed to the worker,
// so against `relay` it measures what isolation by process costs a call. Both relays also listen
// on tcp:127.0.0.1, and `relay_tcp` and `worker_tcp` measure the same over TCP.
// After the usual table, comparisons: per call, the relay's time minus one hop's and their
// ratio; per copy, both bandwidths and the relay's as a fraction of one hop's; then the same of
// the worker against the in-process relay. By default each
// benchmark runs 9 repetitions interleaved at random with the others' (kDefaultFlags; flags
// given on the command line win), and the comparison is of their medians.
//
// The program starts both servers itself, as child processes of the gpu-server binary on Unix
// sockets in a private temporary directory: upstream `gpu-server --backend sim`, then the relay
// `CUWIRE_SERVER=<upstream> gpu-server --backend cuda --driver <libcuda.so.1>`. It stops them
// and removes the directory at exit, on a failure, and on SIGINT/SIGTERM; a server outlives no
// crash of this program (PR_SET_PDEATHSIG).
//
// One client for both paths: WireClient speaks the wire protocol as libcuda.so.1 does (the
// same frames, arguments in the generated stubs' layout, reply bulk read straight into the
// caller's buffer), one connection per path. The client library itself cannot be used: it
// holds one process-wide connection, so one process could not reach two servers through it.
// Before measuring, the program checks that each path reaches the upstream server on every
// call: memory allocated through one path changes what cuMemGetInfo reports through the other.
//
// On a machine with few cores, pin it (`taskset -c 1 relay_bench`; the servers inherit the
// affinity): unpinned, the scheduler may put the relay on a core of its own, and on a VM a
// wake-up across vCPUs can cost more than the whole call (docs/benchmarks.md, "Relay against one
// hop").

#include <benchmark/benchmark.h>
#include <cuda.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "generated/call_ids.h"
#include "protocol/args.h"
#include "protocol/handle_kind.h"
#include "protocol/messages.h"
#include "protocol/transport.h"
#include "protocol/wire_formats.h"

extern char** environ;

namespace {

using namespace cuwire;
using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// Cleanup on a fatal signal: only async-signal-safe calls, on paths laid out before any server
// starts.

constexpr size_t kMaxPath = 256;
constexpr size_t kMaxFiles = 12;

struct SignalCleanup {
  pid_t owner = 0;  // this process (a forked child about to exec must not clean up)
  std::atomic<pid_t> servers[3] = {0, 0, 0};
  char dir[kMaxPath] = {};
  char files[kMaxFiles][kMaxPath] = {};
  size_t file_count = 0;
};
SignalCleanup g_cleanup;

void on_fatal_signal(int sig) {
  if (getpid() == g_cleanup.owner) {
    for (auto& s : g_cleanup.servers) {
      if (pid_t pid = s.load()) kill(pid, SIGKILL);
    }
    for (auto& s : g_cleanup.servers) {
      if (pid_t pid = s.load()) waitpid(pid, nullptr, 0);
    }
    for (size_t i = 0; i < g_cleanup.file_count; ++i) unlink(g_cleanup.files[i]);
    rmdir(g_cleanup.dir);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

bool copy_path(char* dst, const std::string& src) {
  if (src.size() >= kMaxPath) return false;
  std::memcpy(dst, src.c_str(), src.size() + 1);
  return true;
}

// ---------------------------------------------------------------------------------------------
// A gpu-server child process. Its stdout and stderr go to a log file, shown when it fails.

class ServerProcess {
 public:
  ServerProcess(std::string name, std::atomic<pid_t>* signal_slot)
      : name_(std::move(name)), signal_slot_(signal_slot) {}
  ~ServerProcess() { stop(); }

  // Starts `gpu-server args...` with `env` and waits until it serves (its --ready-file appears).
  bool start(const std::vector<std::string>& args, const std::vector<std::string>& env,
             const std::string& log, const std::string& ready, std::string* error) {
    log_ = log;
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(CUWIRE_GPU_SERVER));
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (log_fd < 0) {
      *error = "cannot create " + log + ": " + std::strerror(errno);
      return false;
    }
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
      // Only async-signal-safe calls from here to exec.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // the parent is already gone
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    close(log_fd);
    if (pid < 0) {
      *error = std::string("fork: ") + std::strerror(errno);
      return false;
    }
    pid_ = pid;
    signal_slot_->store(pid);
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (access(ready.c_str(), F_OK) != 0) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        forget();
        *error = name_ + " gpu-server exited before serving:\n" + log_text();
        return false;
      }
      if (Clock::now() > deadline) {
        *error = name_ + " gpu-server did not start within 30 s:\n" + log_text();
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }

  // SIGTERM (the server drains), SIGKILL past a grace period.
  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (waitpid(pid_, nullptr, WNOHANG) != pid_) {
      if (Clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    forget();
  }

  std::string log_text() const {
    std::ifstream in(log_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  void forget() {
    pid_ = 0;
    signal_slot_->store(0);
  }

  std::string name_;
  std::atomic<pid_t>* signal_slot_;
  std::string log_;
  pid_t pid_ = 0;
};

// This process's environment with `name` set to `value` (or removed, for an empty value).
std::vector<std::string> environment_with(const std::string& name, const std::string& value) {
  std::vector<std::string> env;
  const std::string prefix = name + "=";
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, prefix.c_str(), prefix.size()) != 0) env.emplace_back(*e);
  }
  if (!value.empty()) env.push_back(prefix + value);
  return env;
}

// The upstream sim server and the relay in front of it, in a private temporary directory.
class RelayChain {
 public:
  RelayChain()
      : upstream_("upstream", &g_cleanup.servers[0]),
        relay_("relay", &g_cleanup.servers[1]),
        worker_("worker relay", &g_cleanup.servers[2]) {}
  ~RelayChain() {
    worker_.stop();  // first: the relays are the upstream's clients
    relay_.stop();
    upstream_.stop();
    for (auto& f : files_) unlink(f.c_str());
    if (!dir_.empty()) rmdir(dir_.c_str());
  }

  bool start(std::string* error) {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/cuwire-relay-bench-XXXXXX";
    if (!mkdtemp(tmpl.data())) {
      *error = "mkdtemp " + tmpl + ": " + std::strerror(errno);
      return false;
    }
    dir_ = tmpl;
    g_cleanup.owner = getpid();
    bool fits = copy_path(g_cleanup.dir, dir_);
    for (const char* f : {"upstream.sock", "relay.sock", "upstream.ready", "relay.ready",
                          "upstream.ready.tmp", "relay.ready.tmp", "upstream.log", "relay.log",
                          "worker.sock", "worker.ready", "worker.ready.tmp", "worker.log"}) {
      files_.push_back(dir_ + "/" + f);
      fits = fits && g_cleanup.file_count < kMaxFiles &&
             copy_path(g_cleanup.files[g_cleanup.file_count++], files_.back());
    }
    if (!fits) {
      *error = "temporary directory path too long: " + dir_;
      return false;
    }
    struct sigaction sa {};
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGABRT}) sigaction(sig, &sa, nullptr);

    const std::string upstream = "unix:" + dir_ + "/upstream.sock";
    const std::string relay = "unix:" + dir_ + "/relay.sock";
    if (!upstream_.start({"--backend", "sim", "--listen", upstream, "--ready-file",
                          dir_ + "/upstream.ready", "--log-level", "warn", "--drain-timeout", "1s"},
                         environment_with("CUWIRE_SERVER", ""), dir_ + "/upstream.log",
                         dir_ + "/upstream.ready", error)) {
      return false;
    }
    if (!relay_.start({"--backend", "cuda", "--driver", CUWIRE_LIBRARY, "--listen", relay,
                       "--listen", "tcp:127.0.0.1:0", "--ready-file", dir_ + "/relay.ready",
                       "--log-level", "warn", "--drain-timeout", "1s"},
                      environment_with("CUWIRE_SERVER", upstream), dir_ + "/relay.log",
                      dir_ + "/relay.ready", error)) {
      return false;
    }
    const std::string worker = "unix:" + dir_ + "/worker.sock";
    if (!worker_.start({"--backend", "cuda", "--driver", CUWIRE_LIBRARY, "--listen", worker,
                        "--listen", "tcp:127.0.0.1:0", "--ready-file", dir_ + "/worker.ready",
                        "--log-level", "warn", "--drain-timeout", "1s", "--isolation", "tenant"},
                       environment_with("CUWIRE_SERVER", upstream), dir_ + "/worker.log",
                       dir_ + "/worker.ready", error)) {
      return false;
    }
    if (!parse_address(upstream, &upstream_address) || !parse_address(relay, &relay_address) ||
        !parse_address(worker, &worker_address)) {
      *error = "cannot parse " + upstream + ", " + relay + " or " + worker;
      return false;
    }
    // Each relay's tcp: listener, as bound: the second line of its ready file.
    for (auto [ready, out] : {std::pair{dir_ + "/relay.ready", &relay_tcp_address},
                              std::pair{dir_ + "/worker.ready", &worker_tcp_address}}) {
      std::ifstream in(ready);
      std::string line;
      std::getline(in, line);
      if (!std::getline(in, line) || !parse_address(line, out)) {
        *error = ready + " has no tcp: address";
        return false;
      }
    }
    return true;
  }

  std::string logs() const {
    return "upstream server log:\n" + upstream_.log_text() + "relay server log:\n" +
           relay_.log_text() + "worker relay server log:\n" + worker_.log_text();
  }

  Address upstream_address, relay_address, worker_address, relay_tcp_address, worker_tcp_address;

 private:
  ServerProcess upstream_, relay_, worker_;
  std::string dir_;
  std::vector<std::string> files_;
};

// ---------------------------------------------------------------------------------------------
// The client: the wire protocol as libcuda.so.1 speaks it (client-lib/core/connection.cc), for the
// few calls measured here. Argument and result layouts are those of the generated stubs
// (build/generated/client_stubs.cc); a drift from them fails the checks before measuring.
// Not thread-safe.

class WireClient {
 public:
  // Connects, says Hello and creates the session's primary context on device 0, which every
  // later call names as its current context.
  bool open(const Address& server, std::string* error) {
    if (Status s = connect_stream(server, {}, &stream_); !s) {
      *error = "connect to " + server.to_string() + ": " + s.to_string();
      return false;
    }
    HelloMsg hello;
    hello.manifest_hash = kManifestHash;
    hello.client_name = "relay_bench";
    hello.pid = static_cast<uint32_t>(getpid());
    encode_hello(hello, &msg_);
    FrameHeader h;
    h.type = static_cast<uint16_t>(FrameType::kHello);
    Frame welcome;
    WelcomeMsg w;
    if (Status s = write_frame(*stream_, h, msg_); !s) return fail(s.to_string(), error);
    if (Status s = read_frame(*stream_, limits_, &welcome); !s) return fail(s.to_string(), error);
    if (Status s = decode_welcome(welcome, &w); !s) {
      ErrorMsg e;
      if (decode_error(welcome, &e)) return fail("refused: " + e.message, error);
      return fail(s.to_string(), error);
    }
    const uint64_t ctx = kClientIdBase + 1;
    args_.clear();
    args_.put(formats::ContextArgs{ctx, 0, 0});
    if (CUresult rc = call(CallId::k_cuDevicePrimaryCtxRetain, {}, nullptr, 0)) {
      return fail("cuDevicePrimaryCtxRetain: " + describe(rc), error);
    }
    context_ = ctx;
    return true;
  }

  CUresult mem_get_info(size_t* free, size_t* total) {
    args_.clear();
    if (CUresult rc = call(CallId::k_cuMemGetInfo_v2, {}, nullptr, 0)) return rc;
    return take_outs(free, total);
  }

  CUresult mem_alloc(CUdeviceptr* p, size_t n) {
    args_.clear();
    args_.put(n);
    if (CUresult rc = call(CallId::k_cuMemAlloc_v2, {}, nullptr, 0)) return rc;
    return take_outs(p);
  }

  CUresult mem_free(CUdeviceptr p) {
    args_.clear();
    args_.put(p);
    return call(CallId::k_cuMemFree_v2, {}, nullptr, 0);
  }

  CUresult htod(CUdeviceptr dst, const void* src, size_t n) {
    args_.clear();
    args_.put(dst);
    args_.put<uint64_t>(n);  // the in-array's length; its bytes travel as bulk
    args_.put(n);
    return call(CallId::k_cuMemcpyHtoD_v2, {static_cast<const uint8_t*>(src), n}, nullptr, 0);
  }

  CUresult dtoh(void* dst, CUdeviceptr src, size_t n) {
    args_.clear();
    args_.put(src);
    args_.put(n);
    return call(CallId::k_cuMemcpyDtoH_v2, {}, dst, n);
  }

  // A CUresult with what went wrong on the wire, if that was it.
  std::string describe(CUresult rc) const {
    return "CUresult " + std::to_string(rc) + (lost_.empty() ? "" : " (" + lost_ + ")");
  }

 private:
  // One round trip. Transport and protocol failures are CUDA_ERROR_DEVICE_UNAVAILABLE, as in
  // the client library, and end the connection.
  CUresult call(CallId id, std::span<const uint8_t> bulk, void* reply_bulk, size_t reply_bytes) {
    if (!stream_) return CUDA_ERROR_DEVICE_UNAVAILABLE;
    encode_call(static_cast<uint32_t>(id), context_, args_.data(), &msg_);
    FrameHeader h;
    h.type = static_cast<uint16_t>(FrameType::kCall);
    h.sequence = ++sequence_;
    const std::span<const uint8_t> pieces[] = {bulk};
    if (Status s = write_frame(*stream_, h, msg_, bulk.empty() ? std::span(pieces, 0) : pieces);
        !s) {
      return lost(s.to_string());
    }
    FrameHeader& r = reply_.header;
    if (Status s = stream_->read_exact(&r, sizeof r); !s) return lost(s.to_string());
    if (Status s = check_header(r, limits_); !s) return lost(s.to_string());
    reply_.message.resize(r.message_bytes / 8);
    if (Status s = stream_->read_exact(reply_.message.data(), r.message_bytes); !s) {
      return lost(s.to_string());
    }
    if (reply_.type() == FrameType::kError) {
      ErrorMsg e;
      decode_error(reply_, &e);
      return lost(std::string("server error: ") + error_kind_name(e.kind) + ": " + e.message);
    }
    if (reply_.type() != FrameType::kReply || r.sequence != sequence_) {
      return lost("reply out of order");
    }
    // A reply carries all of the bulk bytes asked for, or none (a failed call); a streamed one
    // (1 MiB or more) then its result in a trailer (frame.h: kFlagResultTrailer).
    const bool trailer = r.flags & kFlagResultTrailer;
    const uint64_t trailer_bytes = trailer ? sizeof(ResultTrailer) : 0;
    if (r.bulk_bytes) {
      if (r.bulk_bytes != reply_bytes + trailer_bytes) return lost("reply bulk size mismatch");
      if (Status s = stream_->read_exact(reply_bulk, reply_bytes); !s) {
        return lost(s.to_string());
      }
    }
    ResultTrailer t;
    if (trailer) {
      if (Status s = stream_->read_exact(&t, sizeof t); !s) return lost(s.to_string());
    }
    ReplyView v;
    if (Status s = decode_reply(reply_, &v); !s) return lost(s.to_string());
    outs_.assign(v.outs.begin(), v.outs.end());
    return static_cast<CUresult>(trailer ? t.result : v.result);
  }

  // The reply's results, in order; CUDA_ERROR_UNKNOWN when it holds other than their bytes.
  template <typename... T>
  CUresult take_outs(T*... out) {
    ArgCursor c(outs_);
    return ((c.get(out) && ...) && c.at_end()) ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
  }

  CUresult lost(std::string why) {
    lost_ = std::move(why);
    stream_.reset();
    return CUDA_ERROR_DEVICE_UNAVAILABLE;
  }

  bool fail(const std::string& why, std::string* error) {
    *error = why;
    stream_.reset();
    return false;
  }

  std::unique_ptr<ByteStream> stream_;
  FrameLimits limits_;
  ArgBuffer args_;
  std::vector<uint8_t> msg_;
  Frame reply_;
  std::vector<uint8_t> outs_;
  uint64_t sequence_ = 0;
  uint64_t context_ = 0;
  std::string lost_;
};

// ---------------------------------------------------------------------------------------------
// Checks before measuring.

constexpr size_t kProbeBytes = 64u << 20;

// Whether `probe`'s cuMemGetInfo reaches the upstream server's device on each call: memory
// `other` allocates and frees there shows in its answers.
bool sees_upstream(WireClient& probe, WireClient& other, const char* probe_name,
                   std::string* error) {
  size_t before = 0, during = 0, after = 0, total = 0;
  CUdeviceptr p = 0;
  auto succeeded = [&](WireClient& c, CUresult rc) {
    if (rc == CUDA_SUCCESS) return true;
    *error = std::string("checking the ") + probe_name + " path: " + c.describe(rc);
    return false;
  };
  if (!succeeded(probe, probe.mem_get_info(&before, &total)) ||
      !succeeded(other, other.mem_alloc(&p, kProbeBytes)) ||
      !succeeded(probe, probe.mem_get_info(&during, &total)) ||
      !succeeded(other, other.mem_free(p)) ||
      !succeeded(probe, probe.mem_get_info(&after, &total))) {
    return false;
  }
  if (before < during + kProbeBytes || after != before) {
    *error = std::string(probe_name) + ": cuMemGetInfo does not follow the upstream device's " +
             "memory (free " + std::to_string(before) + ", then " + std::to_string(during) +
             " with 64 MiB more allocated, then " + std::to_string(after) + ")";
    return false;
  }
  return true;
}

// Whether bytes copied to `c`'s device memory come back unchanged.
bool copies_round_trip(WireClient& c, CUdeviceptr buffer, size_t n, const char* name,
                       std::string* error) {
  std::vector<uint8_t> out(n), back(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(i * 131 + 7);
  CUresult rc = c.htod(buffer, out.data(), n);
  if (rc == CUDA_SUCCESS) rc = c.dtoh(back.data(), buffer, n);
  if (rc != CUDA_SUCCESS || out != back) {
    *error = std::string(name) + ": a copied buffer does not come back (" + c.describe(rc) + ")";
    return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// The benchmarks.

struct Path {
  const char* name;  // one_hop, relay, worker, relay_tcp, worker_tcp
  WireClient* client;
  CUdeviceptr buffer;  // kMaxCopy bytes of device memory
};

constexpr size_t kCopySizes[] = {64u << 10, 1u << 20, 16u << 20};
constexpr size_t kMaxCopy = 16u << 20;

void sync_call(benchmark::State& state, Path path) {
  size_t free = 0, total = 0;
  for (auto _ : state) {
    if (CUresult rc = path.client->mem_get_info(&free, &total)) {
      state.SkipWithError(("cuMemGetInfo: " + path.client->describe(rc)).c_str());
      break;
    }
    benchmark::DoNotOptimize(free);
  }
}

void copy_htod(benchmark::State& state, Path path, size_t n) {
  std::vector<uint8_t> src(n, 3);
  for (auto _ : state) {
    if (CUresult rc = path.client->htod(path.buffer, src.data(), n)) {
      state.SkipWithError(("cuMemcpyHtoD: " + path.client->describe(rc)).c_str());
      break;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}

void copy_dtoh(benchmark::State& state, Path path, size_t n) {
  std::vector<uint8_t> dst(n, 1);
  for (auto _ : state) {
    if (CUresult rc = path.client->dtoh(dst.data(), path.buffer, n)) {
      state.SkipWithError(("cuMemcpyDtoH: " + path.client->describe(rc)).c_str());
      break;
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}

std::string size_name(size_t n) {
  return n >= (1u << 20) ? std::to_string(n >> 20) + "MiB" : std::to_string(n >> 10) + "KiB";
}

// Whether a run ended in SkipWithError: Run::skipped from Google Benchmark 1.8 on,
// Run::error_occurred before.
template <typename Run>
auto failed(const Run& r, int) -> decltype(static_cast<bool>(r.skipped)) {
  return static_cast<bool>(r.skipped);
}
template <typename Run>
bool failed(const Run& r, long) {
  return r.error_occurred;
}

// The console table as usual, then the relay against one hop, pair by pair.
class ComparingReporter : public benchmark::ConsoleReporter {
 public:
  // In colour on a terminal only (a display reporter of our own does not see --benchmark_color).
  ComparingReporter() : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular) {}

  // A measured set: "<what>/one_hop", "<what>/relay" and "<what>/worker"; bytes per iteration,
  // 0 for calls.
  void expect(const std::string& what, size_t bytes) { pairs_.push_back({what, bytes}); }

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      const std::string& name = r.run_name.function_name;
      const bool median = r.run_type == Run::RT_Aggregate && r.aggregate_name == "median";
      if (failed(r, 0) || (r.run_type == Run::RT_Aggregate && !median)) continue;
      if (!median && medians_.count(name)) continue;
      if (median) medians_.insert(name);
      // Seconds per iteration.
      seconds_[name] = r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit);
    }
  }

  // `b` against `a` (path names), headed `title`; `an` and `bn` name them in the columns.
  void print_comparison(const char* title, const char* a, const char* b, const char* an,
                        const char* bn) const {
    std::printf("\n%s, same run (real time per call%s):\n", title,
                medians_.empty() ? "" : ", medians of the repetitions");
    const std::string adds = std::string(bn) + " adds";
    std::printf("  %-24s %12s %12s %12s %8s\n", "call", an, bn, adds.c_str(), "ratio");
    for (auto& [what, bytes] : pairs_) {
      const double one = seconds(what + "/" + a), two = seconds(what + "/" + b);
      if (bytes != 0 || one <= 0 || two <= 0) continue;
      std::printf("  %-24s %9.1f us %9.1f us %9.1f us %7.2fx\n", what.c_str(), one * 1e6, two * 1e6,
                  (two - one) * 1e6, two / one);
    }
    std::printf("  %-24s %12s %12s %12s %8s\n", "copy", an, bn, adds.c_str(), "share");
    for (auto& [what, bytes] : pairs_) {
      const double one = seconds(what + "/" + a), two = seconds(what + "/" + b);
      if (bytes == 0 || one <= 0 || two <= 0) continue;
      const double gib = static_cast<double>(bytes) / (1u << 30);
      std::printf("  %-24s %6.2f GiB/s %6.2f GiB/s %9.0f us %8.2f\n", what.c_str(), gib / one,
                  gib / two, (two - one) * 1e6, one / two);
    }
  }

 private:
  double seconds(const std::string& name) const {
    auto it = seconds_.find(name);
    return it == seconds_.end() ? 0 : it->second;
  }

  std::vector<std::pair<std::string, size_t>> pairs_;
  std::map<std::string, double> seconds_;
  std::set<std::string> medians_;
};

// Defaults for a shared, noisy machine, put before the command line's own flags (which win):
// short repetitions of every benchmark in random order, so that a burst of load elsewhere
// falls on both paths alike, and their medians compared.
const char* const kDefaultFlags[] = {
    "--benchmark_repetitions=9",
    "--benchmark_enable_random_interleaving=true",
    "--benchmark_min_time=0.1",
    "--benchmark_display_aggregates_only=true",
};

int run(int argc, char** argv) {
  std::vector<char*> args(argv, argv + 1);
  for (const char* f : kDefaultFlags) args.push_back(const_cast<char*>(f));
  args.insert(args.end(), argv + 1, argv + argc);
  int args_count = static_cast<int>(args.size());
  benchmark::Initialize(&args_count, args.data());
  if (benchmark::ReportUnrecognizedArguments(args_count, args.data())) return 1;
  signal(SIGPIPE, SIG_IGN);

  RelayChain chain;
  std::string error;
  if (!chain.start(&error)) {
    std::fprintf(stderr, "relay_bench: %s\n", error.c_str());
    return 1;
  }
  WireClient one_hop, relay, worker, relay_tcp, worker_tcp;
  Path paths[] = {{"one_hop", &one_hop, 0},
                  {"relay", &relay, 0},
                  {"worker", &worker, 0},
                  {"relay_tcp", &relay_tcp, 0},
                  {"worker_tcp", &worker_tcp, 0}};
  bool ok = one_hop.open(chain.upstream_address, &error) &&
            relay.open(chain.relay_address, &error) && worker.open(chain.worker_address, &error) &&
            relay_tcp.open(chain.relay_tcp_address, &error) &&
            worker_tcp.open(chain.worker_tcp_address, &error) &&
            sees_upstream(one_hop, relay, "one hop", &error) &&
            sees_upstream(relay, one_hop, "relay", &error) &&
            sees_upstream(worker, one_hop, "worker", &error) &&
            sees_upstream(worker_tcp, one_hop, "worker over tcp", &error);
  for (Path& p : paths) {
    if (!ok) break;
    if (CUresult rc = p.client->mem_alloc(&p.buffer, kMaxCopy)) {
      error = std::string(p.name) + ": cuMemAlloc: " + p.client->describe(rc);
      ok = false;
    } else {
      ok = copies_round_trip(*p.client, p.buffer, kMaxCopy, p.name, &error);
    }
  }
  if (!ok) {
    std::fprintf(stderr, "relay_bench: %s\n%s", error.c_str(), chain.logs().c_str());
    return 1;
  }

  ComparingReporter reporter;
  auto both = [&](const std::string& what, size_t bytes, auto&& fn) {
    for (const Path& p : paths) {
      benchmark::RegisterBenchmark((what + "/" + p.name).c_str(), fn, p)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
    reporter.expect(what, bytes);
  };
  both("SyncCall/cuMemGetInfo", 0, sync_call);
  for (size_t n : kCopySizes) {
    both("HtoD/" + size_name(n), n, [n](benchmark::State& s, Path p) { copy_htod(s, p, n); });
  }
  for (size_t n : kCopySizes) {
    both("DtoH/" + size_name(n), n, [n](benchmark::State& s, Path p) { copy_dtoh(s, p, n); });
  }
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_comparison("relay against one hop", "one_hop", "relay", "one hop", "relay");
  reporter.print_comparison("a worker process against in-process (both relays, unix:)", "relay",
                            "worker", "in-process", "worker");
  reporter.print_comparison("a worker process against in-process (both relays, tcp:)", "relay_tcp",
                            "worker_tcp", "in-process", "worker");
  benchmark::Shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }
