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

#include <arpa/inet.h>
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using json = nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Failure, time, statistics.

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "bench_suite: %s\n", why.c_str());
  std::exit(1);
}

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

// Nearest-rank quantile of sorted values; q in [0, 1].
double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return quantile(v, 0.5);
}

// The levels the latency CDFs are kept at: every percent, finer in the tail.
std::vector<double> cdf_levels() {
  std::vector<double> q = {0.0, 0.005};
  for (int i = 1; i <= 99; ++i) q.push_back(i / 100.0);
  for (int i = 991; i <= 999; ++i) q.push_back(i / 1000.0);
  q.push_back(0.9995);
  q.push_back(0.9999);
  q.push_back(1.0);
  return q;
}

// Latency samples (ns) summarised: count, mean, p50, p99, and the CDF at cdf_levels().
json latency_summary(std::vector<double> ns) {
  std::sort(ns.begin(), ns.end());
  double sum = 0;
  for (double v : ns) sum += v;
  json levels = json::array(), values = json::array();
  for (double q : cdf_levels()) {
    levels.push_back(q);
    values.push_back(quantile(ns, q));
  }
  return {{"count", ns.size()},
          {"mean_ns", ns.empty() ? 0 : sum / static_cast<double>(ns.size())},
          {"p50_ns", quantile(ns, 0.5)},
          {"p99_ns", quantile(ns, 0.99)},
          {"cdf", {{"levels", levels}, {"ns", values}}}};
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string size_text(uint64_t n) {
  if (n >= (1u << 30) && n % (1u << 30) == 0) return std::to_string(n >> 30) + " GiB";
  if (n >= (1u << 20) && n % (1u << 20) == 0) return std::to_string(n >> 20) + " MiB";
  if (n >= (1u << 10) && n % (1u << 10) == 0) return std::to_string(n >> 10) + " KiB";
  return std::to_string(n) + " B";
}

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

bool send_all(int fd, const void* p, size_t n, bool spin = false) {
  const char* c = static_cast<const char*>(p);
  const int flags = MSG_NOSIGNAL | (spin ? MSG_DONTWAIT : 0);
  while (n > 0) {
    const ssize_t w = send(fd, c, n, flags);
    if (w < 0) {
      if (errno == EINTR || (spin && (errno == EAGAIN || errno == EWOULDBLOCK))) continue;
      return false;
    }
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool recv_all(int fd, void* p, size_t n, bool spin = false) {
  char* c = static_cast<char*>(p);
  const int flags = spin ? MSG_DONTWAIT : 0;
  while (n > 0) {
    const ssize_t r = recv(fd, c, n, flags);
    if (r == 0) return false;
    if (r < 0) {
      if (errno == EINTR || (spin && (errno == EAGAIN || errno == EWOULDBLOCK))) continue;
      return false;
    }
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void set_nodelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

bool unix_address(const std::string& path, sockaddr_un* sa) {
  std::memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  if (path.size() >= sizeof sa->sun_path) return false;
  std::memcpy(sa->sun_path, path.c_str(), path.size() + 1);
  return true;
}

// "tcp:HOST:PORT" resolved; HOST may be a bracketed IPv6 address.
addrinfo* tcp_address(const std::string& text, bool passive) {
  const std::string rest = text.substr(4);
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos) die("bad address " + text);
  std::string host = rest.substr(0, colon), port = rest.substr(colon + 1);
  if (host.size() > 1 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  if (int e = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); e != 0 || !res) {
    die("resolve " + text + ": " + gai_strerror(e));
  }
  return res;
}

int connect_to(const std::string& address) {
  if (address.rfind("unix:", 0) == 0) {
    sockaddr_un sa;
    if (!unix_address(address.substr(5), &sa)) die("path too long: " + address);
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      die(errno_text("connect " + address));
    }
    return fd;
  }
  if (address.rfind("tcp:", 0) != 0) die("unsupported address " + address);
  addrinfo* ai = tcp_address(address, false);
  const int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    die(errno_text("connect " + address));
  }
  freeaddrinfo(ai);
  set_nodelay(fd);
  return fd;
}

// Listens on `address` (a tcp port 0 picks one); *bound is the address to connect to.
int listen_at(const std::string& address, std::string* bound) {
  if (address.rfind("unix:", 0) == 0) {
    sockaddr_un sa;
    if (!unix_address(address.substr(5), &sa)) die("path too long: " + address);
    unlink(sa.sun_path);
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
        listen(fd, 512) != 0) {
      die(errno_text("listen " + address));
    }
    *bound = address;
    return fd;
  }
  if (address.rfind("tcp:", 0) != 0) die("unsupported address " + address);
  addrinfo* ai = tcp_address(address, true);
  const int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd < 0) die(errno_text("socket"));
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 512) != 0) {
    die(errno_text("listen " + address));
  }
  freeaddrinfo(ai);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  char host[INET6_ADDRSTRLEN] = {};
  uint16_t port = 0;
  if (ss.ss_family == AF_INET6) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof host);
    port = ntohs(s6->sin6_port);
    *bound = std::string("tcp:[") + host + "]:" + std::to_string(port);
  } else {
    auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &s4->sin_addr, host, sizeof host);
    port = ntohs(s4->sin_port);
    *bound = std::string("tcp:") + host + ":" + std::to_string(port);
  }
  return fd;
}

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

json bandwidth_point(uint64_t bytes, std::pair<double, size_t> timed) {
  return {{"bytes", bytes},
          {"seconds", timed.first},
          {"reps", timed.second},
          {"gib_per_s", static_cast<double>(bytes) / timed.first / kGiB}};
}

void print_json(const json& j) {
  const std::string s = j.dump();
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

// The start barrier of the scaling measurement: tell the parent this process is ready (one
// byte on `ready_fd`), then wait for the parent to close the start pipe (EOF on `start_fd`).
void start_barrier(int ready_fd, int start_fd) {
  const char one = 1;
  if (write(ready_fd, &one, 1) != 1) die(errno_text("barrier write"));
  close(ready_fd);
  char c;
  while (read(start_fd, &c, 1) != 0) {
    if (errno != EINTR) break;
  }
  close(start_fd);
}

// Latencies of the scaling window, as uint32 nanoseconds (saturating), to `path`.
void write_samples(const std::string& path, const std::vector<uint32_t>& samples) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(samples.data()),
            static_cast<std::streamsize>(samples.size() * sizeof(uint32_t)));
  if (!out) die("cannot write " + path);
}

uint32_t saturate_ns(uint64_t ns) { return static_cast<uint32_t>(std::min<uint64_t>(ns, UINT32_MAX)); }

std::vector<double> read_samples(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<double> out;
  uint32_t v;
  while (in.read(reinterpret_cast<char*>(&v), sizeof v)) out.push_back(v);
  return out;
}

// A latency measurement's answer: its summary, and with `--samples PATH` every sample there.
json latency_result(const Options& o, std::vector<double> ns) {
  if (o.has("samples")) {
    std::vector<uint32_t> samples;
    for (double v : ns) samples.push_back(saturate_ns(static_cast<uint64_t>(v)));
    write_samples(o.get("samples"), samples);
  }
  return latency_summary(std::move(ns));
}

// ---------------------------------------------------------------------------------------------
// The raw baselines: `raw-server` and the `raw ...` clients. A connection opens with a
// RawSetup naming what it does until it closes.

constexpr uint32_t kRawMagic = 0x42575243;  // "CRWB"

enum class RawMode : uint32_t {
  kPingBlocking = 1,  // request_bytes in, reply_bytes out, blocking reads and writes
  kPingSpinning = 2,  // the same, both directions polled with MSG_DONTWAIT
  kStreamUp = 3,      // u64 n, then n bytes in; u64 n out
  kStreamDown = 4,    // u64 n in; n bytes out
  kFrames = 5,        // u64 count in, then count frames of request_bytes each; u64 count out
};

struct RawSetup {
  uint32_t magic = kRawMagic;
  uint32_t mode = 0;
  uint64_t request_bytes = 0;
  uint64_t reply_bytes = 0;
};
static_assert(sizeof(RawSetup) == 24);

// A buffer the server reads into or writes from, as a device allocation would be: as large as
// the transfer, faulted in once.
class StreamBuffer {
 public:
  uint8_t* at_least(uint64_t n) {
    if (n > size_) {
      buffer_ = std::make_unique<uint8_t[]>(n);  // value-initialised: every page touched
      size_ = n;
    }
    return buffer_.get();
  }

 private:
  std::unique_ptr<uint8_t[]> buffer_;
  uint64_t size_ = 0;
};

void serve_raw(int fd) {
  RawSetup s;
  if (!recv_all(fd, &s, sizeof s) || s.magic != kRawMagic || s.request_bytes > (1u << 20) ||
      s.reply_bytes > (1u << 20)) {
    close(fd);
    return;
  }
  std::vector<uint8_t> request(std::max<uint64_t>(s.request_bytes, 1)),
      reply(std::max<uint64_t>(s.reply_bytes, 1), 7);
  StreamBuffer buffer;
  uint64_t n = 0;
  switch (static_cast<RawMode>(s.mode)) {
    case RawMode::kPingBlocking:
    case RawMode::kPingSpinning: {
      const bool spin = static_cast<RawMode>(s.mode) == RawMode::kPingSpinning;
      while (recv_all(fd, request.data(), s.request_bytes, spin) &&
             send_all(fd, reply.data(), s.reply_bytes, spin)) {
      }
      break;
    }
    case RawMode::kStreamUp:
      while (recv_all(fd, &n, sizeof n) && recv_all(fd, buffer.at_least(n), n) &&
             send_all(fd, &n, sizeof n)) {
      }
      break;
    case RawMode::kStreamDown:
      while (recv_all(fd, &n, sizeof n) && send_all(fd, buffer.at_least(n), n)) {
      }
      break;
    case RawMode::kFrames:
      while (recv_all(fd, &n, sizeof n)) {
        bool ok = true;
        for (uint64_t i = 0; ok && i < n; ++i) ok = recv_all(fd, request.data(), s.request_bytes);
        if (!ok || !send_all(fd, &n, sizeof n)) break;
      }
      break;
  }
  close(fd);
}

// raw-server --listen ADDR... --ready-file FILE: serves until killed; writes the bound
// addresses, one a line, to FILE once listening.
int raw_server_main(const Options& o) {
  signal(SIGPIPE, SIG_IGN);
  std::vector<pollfd> listeners;
  std::vector<bool> is_tcp;
  std::string lines;
  for (const std::string& a : o.all("listen")) {
    std::string bound;
    listeners.push_back({listen_at(a, &bound), POLLIN, 0});
    is_tcp.push_back(a.rfind("tcp:", 0) == 0);
    lines += bound + "\n";
  }
  const std::string ready = o.need("ready-file");
  {
    std::ofstream out(ready + ".tmp");
    out << lines;
  }
  std::rename((ready + ".tmp").c_str(), ready.c_str());
  for (;;) {
    if (poll(listeners.data(), listeners.size(), -1) < 0) {
      if (errno == EINTR) continue;
      die(errno_text("poll"));
    }
    for (size_t i = 0; i < listeners.size(); ++i) {
      if (!(listeners[i].revents & POLLIN)) continue;
      const int fd = accept4(listeners[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      if (is_tcp[i]) set_nodelay(fd);
      std::thread(serve_raw, fd).detach();
    }
  }
}

int raw_connect(const std::string& server, RawMode mode, uint64_t request, uint64_t reply) {
  const int fd = connect_to(server);
  RawSetup s;
  s.mode = static_cast<uint32_t>(mode);
  s.request_bytes = request;
  s.reply_bytes = reply;
  if (!send_all(fd, &s, sizeof s)) die(errno_text("raw setup"));
  return fd;
}

// raw ping --server A --mode blocking|spinning --request B --reply B --iters N --warmup W
json raw_ping(const Options& o) {
  const bool spin = o.need("mode") == "spinning";
  const uint64_t req = o.num("request"), rep = o.num("reply");
  const int fd = raw_connect(o.need("server"), spin ? RawMode::kPingSpinning : RawMode::kPingBlocking,
                             req, rep);
  std::vector<uint8_t> out(req, 1), in(rep);
  auto once = [&] {
    if (!send_all(fd, out.data(), req, spin) || !recv_all(fd, in.data(), rep, spin)) {
      die(errno_text("raw ping"));
    }
  };
  for (uint64_t i = 0, w = o.num("warmup"); i < w; ++i) once();
  std::vector<double> ns(o.num("iters"));
  for (double& v : ns) {
    const uint64_t t0 = now_ns();
    once();
    v = static_cast<double>(now_ns() - t0);
  }
  close(fd);
  return latency_result(o, std::move(ns));
}

// raw stream --server A --direction up|down --bytes N --min-seconds S --min-reps R
json raw_stream(const Options& o) {
  const bool up = o.need("direction") == "up";
  const uint64_t n = o.num("bytes");
  HostBuffer buffer;
  if (!buffer.allocate(n, 5)) return {{"skipped", "cannot map " + size_text(n) + " of host memory"}};
  const int fd = raw_connect(o.need("server"), up ? RawMode::kStreamUp : RawMode::kStreamDown, 0, 0);
  auto once = [&] {
    uint64_t ack = 0;
    const bool ok = up ? send_all(fd, &n, sizeof n) && send_all(fd, buffer.data(), n) &&
                             recv_all(fd, &ack, sizeof ack)
                       : send_all(fd, &n, sizeof n) && recv_all(fd, buffer.data(), n);
    if (!ok) die(errno_text("raw stream"));
  };
  auto timed = time_median(once, 1, o.num("min-reps"), o.real("min-seconds"));
  close(fd);
  return bandwidth_point(n, timed);
}

// raw memcpy --bytes N --min-seconds S --min-reps R (no server)
json raw_memcpy(const Options& o) {
  const uint64_t n = o.num("bytes");
  HostBuffer a, b;
  if (!a.allocate(n, 1) || !b.allocate(n, 2)) {
    return {{"skipped", "cannot map twice " + size_text(n) + " of host memory"}};
  }
  auto once = [&] {
    std::memcpy(b.data(), a.data(), n);
    asm volatile("" ::: "memory");
  };
  return bandwidth_point(n, time_median(once, 1, o.num("min-reps"), o.real("min-seconds")));
}

// raw frames --server A --size S --count N --reps R: N sends of S bytes (the loop timed alone,
// as a launch loop is), then the server's acknowledgement of the last.
json raw_frames(const Options& o) {
  const uint64_t size = o.num("size"), count = o.num("count"), reps = o.num("reps");
  const int fd = raw_connect(o.need("server"), RawMode::kFrames, size, 0);
  std::vector<uint8_t> frame(size, 3);
  std::vector<double> loop_ns, total_ns;
  for (uint64_t r = 0; r <= reps; ++r) {  // the first round warms up
    uint64_t ack = 0;
    if (!send_all(fd, &count, sizeof count)) die(errno_text("raw frames"));
    const uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < count; ++i) {
      if (!send_all(fd, frame.data(), size)) die(errno_text("raw frames"));
    }
    const uint64_t t1 = now_ns();
    if (!recv_all(fd, &ack, sizeof ack)) die(errno_text("raw frames ack"));
    const uint64_t t2 = now_ns();
    if (r == 0) continue;
    loop_ns.push_back(static_cast<double>(t1 - t0) / static_cast<double>(count));
    total_ns.push_back(static_cast<double>(t2 - t0) / static_cast<double>(count));
  }
  close(fd);
  return {{"count", count},
          {"reps", reps},
          {"frame_bytes", size},
          {"enqueue_ns", median(loop_ns)},
          {"total_ns", median(total_ns)}};
}

// raw scale --server A --request B --reply B --seconds T --ready-fd F --start-fd F --samples P
json raw_scale(const Options& o) {
  const uint64_t req = o.num("request"), rep = o.num("reply");
  const int fd = raw_connect(o.need("server"), RawMode::kPingBlocking, req, rep);
  std::vector<uint8_t> out(req, 1), in(rep);
  auto once = [&] {
    if (!send_all(fd, out.data(), req) || !recv_all(fd, in.data(), rep)) die(errno_text("raw ping"));
  };
  once();
  start_barrier(static_cast<int>(o.num("ready-fd")), static_cast<int>(o.num("start-fd")));
  std::vector<uint32_t> samples;
  samples.reserve(1 << 20);
  const uint64_t start = now_ns(), end = start + static_cast<uint64_t>(o.real("seconds") * 1e9);
  uint64_t t = start;
  while (t < end) {
    once();
    const uint64_t t1 = now_ns();
    samples.push_back(saturate_ns(t1 - t));
    t = t1;
  }
  close(fd);
  write_samples(o.need("samples"), samples);
  return {{"calls", samples.size()}, {"seconds", static_cast<double>(t - start) * 1e-9}};
}

// ---------------------------------------------------------------------------------------------
// The client library, loaded with dlopen (one process per server address: see the header).

// Accepted by the sim's PTX interpreter (tests/ptx use the same version and target).
constexpr const char* kEmptyKernelPtx = R"(
.version 8.0
.target sm_75
.address_size 64

.visible .entry empty()
{
  ret;
}
)";

class Library {
 public:
  void load(const std::string& path) {
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) die(std::string("dlopen: ") + dlerror());
    bind(init, "cuInit");
    bind(primary_ctx_retain, "cuDevicePrimaryCtxRetain");
    bind(ctx_set_current, "cuCtxSetCurrent");
    bind(ctx_synchronize, "cuCtxSynchronize");
    bind(mem_alloc, "cuMemAlloc_v2");
    bind(mem_free, "cuMemFree_v2");
    bind(mem_get_info, "cuMemGetInfo_v2");
    bind(memcpy_htod, "cuMemcpyHtoD_v2");
    bind(memcpy_dtoh, "cuMemcpyDtoH_v2");
    bind(mem_host_alloc, "cuMemHostAlloc");
    bind(mem_free_host, "cuMemFreeHost");
    bind(module_load_data, "cuModuleLoadData");
    bind(module_get_function, "cuModuleGetFunction");
    bind(launch_kernel, "cuLaunchKernel");
    bind(get_error_name, "cuGetErrorName");
  }

  // cuInit, then device 0's primary context made current.
  void open_context() {
    check(init(0), "cuInit");
    CUcontext ctx = nullptr;
    check(primary_ctx_retain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    check(ctx_set_current(ctx), "cuCtxSetCurrent");
  }

  void check(CUresult rc, const char* what) const {
    if (rc == CUDA_SUCCESS) return;
    const char* name = nullptr;
    if (get_error_name(rc, &name) != CUDA_SUCCESS || !name) name = "?";
    die(std::string(what) + " failed: " + name + " (" + std::to_string(rc) + ")");
  }

  CUresult (*init)(unsigned) = nullptr;
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*ctx_synchronize)() = nullptr;
  CUresult (*mem_alloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*mem_free)(CUdeviceptr) = nullptr;
  CUresult (*mem_get_info)(size_t*, size_t*) = nullptr;
  CUresult (*memcpy_htod)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*memcpy_dtoh)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*mem_host_alloc)(void**, size_t, unsigned) = nullptr;
  CUresult (*mem_free_host)(void*) = nullptr;
  CUresult (*module_load_data)(CUmodule*, const void*) = nullptr;
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, unsigned, CUstream, void**, void**) = nullptr;
  CUresult (*get_error_name)(CUresult, const char**) = nullptr;

 private:
  template <typename F>
  void bind(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(handle_, name));
    if (!f) die(std::string("the client library has no ") + name);
  }

  void* handle_ = nullptr;
};

CUfunction load_empty_kernel(const Library& lib) {
  CUmodule module = nullptr;
  CUfunction f = nullptr;
  lib.check(lib.module_load_data(&module, kEmptyKernelPtx), "cuModuleLoadData");
  lib.check(lib.module_get_function(&f, module, "empty"), "cuModuleGetFunction");
  return f;
}

void launch_empty(const Library& lib, CUfunction f) {
  lib.check(lib.launch_kernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            "cuLaunchKernel");
}

// client latency --iters N --warmup W: 4-byte cuMemcpyDtoH_v2, one at a time.
json client_latency(const Library& lib, const Options& o) {
  CUdeviceptr d = 0;
  lib.check(lib.mem_alloc(&d, 4), "cuMemAlloc");
  uint32_t host = 0;
  lib.check(lib.memcpy_htod(d, &host, 4), "cuMemcpyHtoD");
  for (uint64_t i = 0, w = o.num("warmup"); i < w; ++i) {
    lib.check(lib.memcpy_dtoh(&host, d, 4), "cuMemcpyDtoH");
  }
  std::vector<double> ns(o.num("iters"));
  for (double& v : ns) {
    const uint64_t t0 = now_ns();
    const CUresult rc = lib.memcpy_dtoh(&host, d, 4);
    v = static_cast<double>(now_ns() - t0);
    lib.check(rc, "cuMemcpyDtoH");
  }
  return latency_result(o, std::move(ns));
}

// client launch --count N --reps R: N launches of the empty kernel timed alone (enqueue) and
// with the cuCtxSynchronize after them; medians over R rounds, after one round of warm-up.
json client_launch(const Library& lib, const Options& o) {
  const CUfunction f = load_empty_kernel(lib);
  const uint64_t count = o.num("count"), reps = o.num("reps");
  std::vector<double> loop_ns, total_ns;
  for (uint64_t r = 0; r <= reps; ++r) {
    const uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < count; ++i) launch_empty(lib, f);
    const uint64_t t1 = now_ns();
    lib.check(lib.ctx_synchronize(), "cuCtxSynchronize");
    const uint64_t t2 = now_ns();
    if (r == 0) continue;
    loop_ns.push_back(static_cast<double>(t1 - t0) / static_cast<double>(count));
    total_ns.push_back(static_cast<double>(t2 - t0) / static_cast<double>(count));
  }
  return {{"count", count},
          {"reps", reps},
          {"enqueue_ns", median(loop_ns)},
          {"total_ns", median(total_ns)},
          {"enqueue_ns_rounds", loop_ns},
          {"total_ns_rounds", total_ns}};
}

// client copy --direction h2d|d2h --host pageable|pinned --bytes N --min-seconds S --min-reps R
json client_copy(const Library& lib, const Options& o) {
  const bool h2d = o.need("direction") == "h2d", pinned = o.need("host") == "pinned";
  const uint64_t n = o.num("bytes");
  HostBuffer pageable;
  uint8_t* host = nullptr;
  if (pinned) {
    void* p = nullptr;
    if (CUresult rc = lib.mem_host_alloc(&p, n, 0); rc == CUDA_ERROR_OUT_OF_MEMORY) {
      return {{"skipped", "cuMemHostAlloc of " + size_text(n) + ": out of memory"}};
    } else {
      lib.check(rc, "cuMemHostAlloc");
    }
    host = static_cast<uint8_t*>(p);
    std::memset(host, 5, n);
  } else {
    if (!pageable.allocate(n, 5)) return {{"skipped", "cannot map " + size_text(n) + " of host memory"}};
    host = pageable.data();
  }
  CUdeviceptr d = 0;
  if (CUresult rc = lib.mem_alloc(&d, n); rc == CUDA_ERROR_OUT_OF_MEMORY) {
    if (pinned) lib.mem_free_host(host);
    return {{"skipped", "cuMemAlloc of " + size_text(n) + ": out of memory"}};
  } else {
    lib.check(rc, "cuMemAlloc");
  }
  // Device memory written once before anything is timed, so no direction reads untouched pages.
  lib.check(lib.memcpy_htod(d, host, n), "cuMemcpyHtoD");
  auto once = [&] {
    lib.check(h2d ? lib.memcpy_htod(d, host, n) : lib.memcpy_dtoh(host, d, n),
              h2d ? "cuMemcpyHtoD" : "cuMemcpyDtoH");
  };
  // From 64 MiB on, that first copy is warm-up enough (every page of both buffers touched); a
  // 1 GiB copy takes seconds here.
  const int warmup = n >= (64u << 20) ? 0 : 1;
  json point =
      bandwidth_point(n, time_median(once, warmup, o.num("min-reps"), o.real("min-seconds")));
  lib.check(lib.mem_free(d), "cuMemFree");
  if (pinned) lib.check(lib.mem_free_host(host), "cuMemFreeHost");
  return point;
}

// client scale --seconds T --ready-fd F --start-fd F --samples P: cuMemGetInfo_v2 in a loop.
json client_scale(const Library& lib, const Options& o) {
  size_t free = 0, total = 0;
  lib.check(lib.mem_get_info(&free, &total), "cuMemGetInfo");
  start_barrier(static_cast<int>(o.num("ready-fd")), static_cast<int>(o.num("start-fd")));
  std::vector<uint32_t> samples;
  samples.reserve(1 << 20);
  const uint64_t start = now_ns(), end = start + static_cast<uint64_t>(o.real("seconds") * 1e9);
  uint64_t t = start;
  while (t < end) {
    lib.check(lib.mem_get_info(&free, &total), "cuMemGetInfo");
    const uint64_t t1 = now_ns();
    samples.push_back(saturate_ns(t1 - t));
    t = t1;
  }
  write_samples(o.need("samples"), samples);
  return {{"calls", samples.size()}, {"seconds", static_cast<double>(t - start) * 1e-9}};
}

// ---- frame sizes, taken from the wire

// A unix-socket proxy in this process between the client library and the server, counting the
// bytes each way. A count is taken once a synchronous call has returned: by then the proxy has
// counted its whole request (the server answered it) and its whole reply (the client read it),
// as it counts bytes before passing them on.
class CountingProxy {
 public:
  CountingProxy(const std::string& listen_path, std::string upstream)
      : upstream_(std::move(upstream)) {
    std::string bound;
    listener_ = listen_at("unix:" + listen_path, &bound);
    std::thread([this] { accept_loop(); }).detach();
  }
  uint64_t up() const { return up_.load(); }
  uint64_t down() const { return down_.load(); }

 private:
  void accept_loop() {
    for (;;) {
      const int client = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      const int server = connect_to(upstream_);
      std::thread([=, this] { pump(client, server, &up_); }).detach();
      std::thread([=, this] { pump(server, client, &down_); }).detach();
    }
  }
  static void pump(int from, int to, std::atomic<uint64_t>* counter) {
    std::vector<char> buf(1 << 16);
    for (;;) {
      const ssize_t r = recv(from, buf.data(), buf.size(), 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      counter->fetch_add(static_cast<uint64_t>(r));
      if (!send_all(to, buf.data(), static_cast<size_t>(r))) break;
    }
    shutdown(to, SHUT_WR);
  }

  std::string upstream_;
  int listener_ = -1;
  std::atomic<uint64_t> up_{0}, down_{0};
};

// client frames --proxy-socket PATH (CUWIRE_SERVER: the real server): the request and reply
// bytes of one 4-byte cuMemcpyDtoH_v2, one cuMemGetInfo_v2 and one launch of the empty kernel.
[[noreturn]] void client_frames(const Options& o, const std::string& library) {
  const char* server = std::getenv("CUWIRE_SERVER");
  if (!server) die("client frames: CUWIRE_SERVER not set");
  CountingProxy proxy(o.need("proxy-socket"), server);
  setenv("CUWIRE_SERVER", ("unix:" + o.need("proxy-socket")).c_str(), 1);
  Library lib;
  lib.load(library);
  lib.open_context();
  const CUfunction f = load_empty_kernel(lib);
  CUdeviceptr d = 0;
  lib.check(lib.mem_alloc(&d, 4), "cuMemAlloc");
  uint32_t host = 0;
  size_t free = 0, total = 0;
  lib.check(lib.memcpy_dtoh(&host, d, 4), "cuMemcpyDtoH");
  lib.check(lib.mem_get_info(&free, &total), "cuMemGetInfo");
  launch_empty(lib, f);
  lib.check(lib.ctx_synchronize(), "cuCtxSynchronize");

  constexpr int kCalls = 64;
  auto per_call = [&](auto&& op) {
    const uint64_t up0 = proxy.up(), down0 = proxy.down();
    for (int i = 0; i < kCalls; ++i) op();
    return std::pair<double, double>{static_cast<double>(proxy.up() - up0) / kCalls,
                                     static_cast<double>(proxy.down() - down0) / kCalls};
  };
  auto dtoh = per_call([&] { lib.check(lib.memcpy_dtoh(&host, d, 4), "cuMemcpyDtoH"); });
  auto info = per_call([&] { lib.check(lib.mem_get_info(&free, &total), "cuMemGetInfo"); });
  auto sync = per_call([&] { lib.check(lib.ctx_synchronize(), "cuCtxSynchronize"); });
  // Launches are sent without waiting: counted with a synchronize after them, less its own.
  const uint64_t up0 = proxy.up();
  for (int i = 0; i < kCalls; ++i) launch_empty(lib, f);
  lib.check(lib.ctx_synchronize(), "cuCtxSynchronize");
  const double launch =
      (static_cast<double>(proxy.up() - up0) - sync.first) / static_cast<double>(kCalls);
  json out = {{"dtoh4", {{"request", dtoh.first}, {"reply", dtoh.second}}},
              {"mem_get_info", {{"request", info.first}, {"reply", info.second}}},
              {"ctx_synchronize", {{"request", sync.first}, {"reply", sync.second}}},
              {"launch", {{"request", launch}}}};
  print_json(out);
  std::fflush(nullptr);
  _exit(0);  // the proxy's threads are still blocked in recv
}

int client_main(const std::string& what, const Options& o, const std::string& library) {
  if (what == "frames") client_frames(o, library);
  Library lib;
  lib.load(library);
  lib.open_context();
  json out;
  if (what == "latency") {
    out = client_latency(lib, o);
  } else if (what == "launch") {
    out = client_launch(lib, o);
  } else if (what == "copy") {
    out = client_copy(lib, o);
  } else if (what == "scale") {
    out = client_scale(lib, o);
  } else {
    die("unknown client measurement " + what);
  }
  print_json(out);
  return 0;
}

int raw_main(const std::string& what, const Options& o) {
  signal(SIGPIPE, SIG_IGN);
  json out;
  if (what == "ping") {
    out = raw_ping(o);
  } else if (what == "stream") {
    out = raw_stream(o);
  } else if (what == "memcpy") {
    out = raw_memcpy(o);
  } else if (what == "frames") {
    out = raw_frames(o);
  } else if (what == "scale") {
    out = raw_scale(o);
  } else {
    die("unknown raw measurement " + what);
  }
  print_json(out);
  return 0;
}

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

// This process's environment without the variables `drop` names, plus `add` (NAME=VALUE).
std::vector<std::string> environment(const std::vector<std::string>& drop,
                                     const std::vector<std::string>& add) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string s = *e;
    const std::string name = s.substr(0, s.find('='));
    if (std::find(drop.begin(), drop.end(), name) == drop.end()) env.push_back(s);
  }
  env.insert(env.end(), add.begin(), add.end());
  return env;
}

// fork + exec with `env`; in the child, fds `keep` stay open, `out_fd` (if >= 0) becomes
// stdout, and the child dies with this process.
pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
            int out_fd, int err_fd, const std::vector<int>& keep = {}) {
  std::vector<char*> args, envp;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    if (out_fd >= 0) dup2(out_fd, STDOUT_FILENO);
    if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
    for (int fd : keep) fcntl(fd, F_SETFD, 0);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  if (pid < 0) die(errno_text("fork"));
  return pid;
}

std::string exit_text(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ServerProcess {
 public:
  explicit ServerProcess(std::atomic<pid_t>* slot) : slot_(slot) {}
  ~ServerProcess() { stop(); }

  // Starts `argv` (stdout and stderr to `log`) and waits for `ready` to appear; the addresses
  // it lists, one a line.
  std::vector<std::string> start(const std::string& name, const std::vector<std::string>& argv,
                                 const std::vector<std::string>& env, const std::string& log,
                                 const std::string& ready) {
    name_ = name;
    log_ = log;
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) die(errno_text("create " + log));
    pid_ = spawn(argv, env, fd, fd);
    close(fd);
    slot_->store(pid_);
    const uint64_t deadline = now_ns() + 30'000'000'000u;
    while (access(ready.c_str(), F_OK) != 0) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        slot_->store(0);
        die(name + " exited before serving (" + exit_text(status) + "):\n" + read_text(log));
      }
      if (now_ns() > deadline) die(name + " did not start within 30 s:\n" + read_text(log));
      usleep(5000);
    }
    std::vector<std::string> addresses;
    std::istringstream lines(read_text(ready));
    for (std::string l; std::getline(lines, l);) {
      if (!l.empty()) addresses.push_back(l);
    }
    return addresses;
  }

  // Still running? Else dies with its log.
  void check_alive() {
    int status = 0;
    if (pid_ > 0 && waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = 0;
      slot_->store(0);
      die(name_ + " died (" + exit_text(status) + "):\n" + read_text(log_));
    }
  }

  std::string log_tail() const {
    const std::string text = read_text(log_);
    return text.size() > 4000 ? text.substr(text.size() - 4000) : text;
  }

  // SIGTERM, SIGKILL after 5 s.
  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    const uint64_t deadline = now_ns() + 5'000'000'000u;
    while (waitpid(pid_, nullptr, WNOHANG) != pid_) {
      if (now_ns() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        break;
      }
      usleep(5000);
    }
    pid_ = 0;
    slot_->store(0);
  }

 private:
  std::atomic<pid_t>* slot_;
  std::string name_, log_;
  pid_t pid_ = 0;
};

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
    auto gpu = gpu_.start("gpu-server",
                          {s_.gpu_server, "--backend", "sim", "--listen", "unix:" + d + "/gpu.sock",
                           "--listen", "tcp:127.0.0.1:0", "--ready-file", d + "/gpu.ready",
                           "--log-level", "warn", "--drain-timeout", "1s",
                           "--max-handshakes-per-peer", "256"},
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
      die("`bench_suite" + cmd + "` failed (" + exit_text(status) +
          ")\ngpu-server log (end):\n" + gpu_.log_tail());
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
      for (const auto& a : std::vector<std::string>{
               "--ready-fd", std::to_string(ready[1]), "--start-fd", std::to_string(start[0]),
               "--samples", sample_files.back()}) {
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
        die("scaling client " + std::to_string(i) + " of " + std::to_string(clients) +
            " failed (" + exit_text(status) + ")\ngpu-server log (end):\n" + gpu_.log_tail());
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
                            latency_round(tr, "cuwire",
                                          {"client", "latency", "--iters", iters, "--warmup",
                                           warmup},
                                          gpu_addr_[tr]);
                          }});
      }
    }
    // 2. Launches.
    for (const char* t : kTransports) {
      const std::string tr = t;
      const std::string count = std::to_string(s_.launch_count), reps = std::to_string(s_.launch_reps);
      steps_.push_back({"launch-sized frames raw " + tr, [=, this] {
                          results_["launch"][tr]["raw"] =
                              child({"raw", "frames", "--server", raw_addr_[tr], "--size",
                                     frame_bytes("launch", "request"), "--count", count, "--reps",
                                     reps});
                        }});
      steps_.push_back({"empty-kernel launches cuwire " + tr, [=, this] {
                          results_["launch"][tr]["cuwire"] = child(
                              {"client", "launch", "--count", count, "--reps", reps}, gpu_addr_[tr]);
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
                              record_point(tr, "raw_" + d,
                                           child(with_timing({"raw", "stream", "--server",
                                                              raw_addr_[tr], "--direction", d,
                                                              "--bytes", bytes})));
                            }});
          for (const char* host : {"pageable", "pinned"}) {
            const std::string h = host;
            steps_.push_back({(copy_dir == "h2d" ? "H2D" : "D2H") + std::string(" bandwidth ") +
                                  tr + " " + h + " " + size_text(n),
                              [=, this] {
                                // Over unix: the socket's figure, with the lane off.
                                record_point(tr, copy_dir + "_" + h,
                                             child(with_timing({"client", "copy", "--direction",
                                                                copy_dir, "--host", h, "--bytes",
                                                                bytes}),
                                                   gpu_addr_[tr],
                                                   tr == "unix" ? s_.socket_env
                                                                : std::vector<std::string>{}));
                              }});
          }
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
    const std::string bytes = std::to_string(n);
    for (const char* dir : {"h2d", "d2h"}) {
      const std::string d = dir;
      for (const char* host : {"pageable", "pinned"}) {
        const std::string h = host;
        steps_.push_back({(d == "h2d" ? "H2D" : "D2H") + std::string(" bandwidth ") +
                              kShmTransport + " " + h + " " + size_text(n),
                          [=, this] {
                            record_point(kShmTransport, d + "_" + h,
                                         child(with_timing({"client", "copy", "--direction", d,
                                                            "--host", h, "--bytes", bytes}),
                                               gpu_addr_["unix"], s_.shm_env));
                          }});
      }
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
    std::printf("frames (bytes on the wire): 4-byte DtoH %.0f request / %.0f reply, "
                "cuMemGetInfo %.0f / %.0f, launch %.1f request\n",
                frames_["dtoh4"]["request"].get<double>(), frames_["dtoh4"]["reply"].get<double>(),
                frames_["mem_get_info"]["request"].get<double>(),
                frames_["mem_get_info"]["reply"].get<double>(),
                frames_["launch"]["request"].get<double>());
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
    json settings = {{"latency_iters", s_.latency_iters},
                     {"latency_rounds", s_.latency_rounds},
                     {"latency_warmup", s_.latency_warmup},
                     {"launch_count", s_.launch_count},
                     {"launch_reps", s_.launch_reps},
                     {"copy_min_seconds", s_.copy_min_seconds},
                     {"copy_min_reps", s_.copy_min_reps},
                     {"scale_seconds", s_.scale_seconds},
                     {"client_counts", s_.client_counts},
                     {"sizes", s_.sizes},
                     {"skipped_sizes", s_.skipped_sizes},
                     {"shm_env", s_.shm_env}};
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
