// bench_suite's shared pieces (suite_main.cc describes the suite): failure, time and statistics,
// the subcommands' options, sockets, host buffers and timing, sample files, and the processes
// the orchestrator starts. Defined in suite_common.cc unless written here.
#pragma once

#include <sys/mman.h>
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace cuwire::bench {

using json = nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Failure, time, statistics.

[[noreturn]] void die(const std::string& why);

std::string errno_text(const std::string& what);

uint64_t now_ns();

// Nearest-rank quantile of sorted values; q in [0, 1].
double quantile(const std::vector<double>& sorted, double q);

double median(std::vector<double> v);

// Latency samples (ns) summarised: count, mean, p50, p99, and the CDF at cdf_levels().
json latency_summary(std::vector<double> ns);

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string size_text(uint64_t n);

// ---------------------------------------------------------------------------------------------
// Command lines of the subcommands: `--name value` pairs and bare `--flag`s.

class Options {
 public:
  Options(int argc, char** argv, int first, const std::vector<std::string>& flags) {
    for (int i = first; i < argc; ++i) {
      std::string a = argv[i];
      if (a.rfind("--", 0) != 0) die("unexpected argument " + a);
      a = a.substr(2);
      if (std::find(flags.begin(), flags.end(), a) != flags.end()) {
        values_[a].push_back("1");
      } else if (i + 1 < argc) {
        values_[a].push_back(argv[++i]);
      } else {
        die("--" + a + " needs a value");
      }
    }
  }
  bool has(const std::string& k) const { return values_.count(k) != 0; }
  std::string get(const std::string& k, const std::string& fallback = "") const {
    auto it = values_.find(k);
    return it == values_.end() ? fallback : it->second.back();
  }
  std::string need(const std::string& k) const {
    if (!has(k)) die("missing --" + k);
    return get(k);
  }
  uint64_t num(const std::string& k) const { return std::stoull(need(k)); }
  double real(const std::string& k) const { return std::stod(need(k)); }
  std::vector<std::string> all(const std::string& k) const {
    auto it = values_.find(k);
    return it == values_.end() ? std::vector<std::string>{} : it->second;
  }

 private:
  std::map<std::string, std::vector<std::string>> values_;
};

// ---------------------------------------------------------------------------------------------
// Sockets: unix:PATH and tcp:HOST:PORT, TCP_NODELAY on TCP. `spin`: never sleep in the kernel,
// poll with MSG_DONTWAIT instead.

bool send_all(int fd, const void* p, size_t n, bool spin = false);

bool recv_all(int fd, void* p, size_t n, bool spin = false);

void set_nodelay(int fd);

int connect_to(const std::string& address);

// Listens on `address` (a tcp port 0 picks one); *bound is the address to connect to.
int listen_at(const std::string& address, std::string* bound);

// ---------------------------------------------------------------------------------------------
// Host buffers: anonymous mappings, faulted in before anything is timed.

class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer() {
    if (p_) munmap(p_, n_);
  }
  // False when the memory is not there.
  bool allocate(size_t n, int fill) {
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    p_ = static_cast<uint8_t*>(p);
    n_ = n;
    std::memset(p_, fill, n_);
    return true;
  }
  uint8_t* data() const { return p_; }

 private:
  uint8_t* p_ = nullptr;
  size_t n_ = 0;
};

// Times `op` after `warmup` untimed runs, at least `min_reps` times and `min_seconds` long (at
// most 1e6 times); the median run in seconds, and how many were timed.
template <typename Op>
std::pair<double, size_t> time_median(Op&& op, int warmup, size_t min_reps, double min_seconds) {
  for (int i = 0; i < warmup; ++i) op();
  std::vector<double> runs;
  const uint64_t start = now_ns();
  while (runs.size() < min_reps ||
         (static_cast<double>(now_ns() - start) * 1e-9 < min_seconds && runs.size() < 1'000'000)) {
    const uint64_t t0 = now_ns();
    op();
    runs.push_back(static_cast<double>(now_ns() - t0) * 1e-9);
  }
  return {median(runs), runs.size()};
}

json bandwidth_point(uint64_t bytes, std::pair<double, size_t> timed);

void print_json(const json& j);

// The start barrier of the scaling measurement: tell the parent this process is ready (one
// byte on `ready_fd`), then wait for the parent to close the start pipe (EOF on `start_fd`).
void start_barrier(int ready_fd, int start_fd);

// Latencies of the scaling window, as uint32 nanoseconds (saturating), to `path`.
void write_samples(const std::string& path, const std::vector<uint32_t>& samples);

uint32_t saturate_ns(uint64_t ns);

std::vector<double> read_samples(const std::string& path);

// A latency measurement's answer: its summary, and with `--samples PATH` every sample there.
json latency_result(const Options& o, std::vector<double> ns);

// ---------------------------------------------------------------------------------------------
// The measuring subcommands (suite_children.cc), each run in a process of its own.

// raw-server --listen ADDR... --ready-file FILE: serves until killed; writes the bound
// addresses, one a line, to FILE once listening.
int raw_server_main(const Options& o);

// client WHAT ...: latency, launch, copy, scale, frames, through the client library at `library`.
int client_main(const std::string& what, const Options& o, const std::string& library);

// raw WHAT ...: ping, stream, memcpy, frames, scale, the baselines.
int raw_main(const std::string& what, const Options& o);

// ---------------------------------------------------------------------------------------------
// Processes: the orchestrator's children and servers.

// This process's environment without the variables `drop` names, plus `add` (NAME=VALUE).
std::vector<std::string> environment(const std::vector<std::string>& drop,
                                     const std::vector<std::string>& add);

// fork + exec with `env`; in the child, fds `keep` stay open, `out_fd` (if >= 0) becomes
// stdout, and the child dies with this process.
pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, int out_fd,
            int err_fd, const std::vector<int>& keep = {});

std::string exit_text(int status);

std::string read_text(const std::string& path);

class ServerProcess {
 public:
  explicit ServerProcess(std::atomic<pid_t>* slot) : slot_(slot) {}
  ~ServerProcess() { stop(); }

  // Starts `argv` (stdout and stderr to `log`) and waits for `ready` to appear; the addresses
  // it lists, one a line.
  std::vector<std::string> start(const std::string& name, const std::vector<std::string>& argv,
                                 const std::vector<std::string>& env, const std::string& log,
                                 const std::string& ready);

  // Still running? Else dies with its log.
  void check_alive();

  std::string log_tail() const;

  // SIGTERM, SIGKILL after 5 s.
  void stop();

 private:
  std::atomic<pid_t>* slot_;
  std::string name_, log_;
  pid_t pid_ = 0;
};

}  // namespace cuwire::bench
