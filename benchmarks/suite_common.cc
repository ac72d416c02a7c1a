// bench_suite's shared pieces, declared in suite_common.h: failure, time and statistics,
// sockets, timing, sample files, and starting and stopping the orchestrator's processes.

#include "benchmarks/suite_common.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

extern char** environ;

namespace cuwire::bench {

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

namespace {

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

}  // namespace

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

std::string size_text(uint64_t n) {
  if (n >= (1u << 30) && n % (1u << 30) == 0) return std::to_string(n >> 30) + " GiB";
  if (n >= (1u << 20) && n % (1u << 20) == 0) return std::to_string(n >> 20) + " MiB";
  if (n >= (1u << 10) && n % (1u << 10) == 0) return std::to_string(n >> 10) + " KiB";
  return std::to_string(n) + " B";
}

// ---------------------------------------------------------------------------------------------
// Sockets: unix:PATH and tcp:HOST:PORT, TCP_NODELAY on TCP. `spin`: never sleep in the kernel,
// poll with MSG_DONTWAIT instead.

namespace {
// Moves n bytes at c through `io` (a send or recv of what is left), retrying on EINTR and, with
// `spin`, on EAGAIN. False on an error or once the peer has closed (a 0 from recv; send never
// returns 0 for a non-empty stream write).
template <typename Byte, typename Io>
bool move_all(Byte* c, size_t n, bool spin, Io&& io) {
  while (n > 0) {
    const ssize_t m = io(c, n);
    if (m == 0) return false;
    if (m < 0) {
      if (errno == EINTR || (spin && (errno == EAGAIN || errno == EWOULDBLOCK))) continue;
      return false;
    }
    c += m;
    n -= static_cast<size_t>(m);
  }
  return true;
}
}  // namespace

bool send_all(int fd, const void* p, size_t n, bool spin) {
  const int flags = MSG_NOSIGNAL | (spin ? MSG_DONTWAIT : 0);
  return move_all(static_cast<const char*>(p), n, spin,
                  [&](const char* c, size_t left) { return send(fd, c, left, flags); });
}

bool recv_all(int fd, void* p, size_t n, bool spin) {
  const int flags = spin ? MSG_DONTWAIT : 0;
  return move_all(static_cast<char*>(p), n, spin,
                  [&](char* c, size_t left) { return recv(fd, c, left, flags); });
}

void set_nodelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

namespace {

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

}  // namespace

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
// Timing, sample files.

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

uint32_t saturate_ns(uint64_t ns) {
  return static_cast<uint32_t>(std::min<uint64_t>(ns, UINT32_MAX));
}

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
// Processes: the orchestrator's children and servers.

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
pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, int out_fd,
            int err_fd, const std::vector<int>& keep) {
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

std::vector<std::string> ServerProcess::start(const std::string& name,
                                              const std::vector<std::string>& argv,
                                              const std::vector<std::string>& env,
                                              const std::string& log, const std::string& ready) {
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

void ServerProcess::check_alive() {
  int status = 0;
  if (pid_ > 0 && waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = 0;
    slot_->store(0);
    die(name_ + " died (" + exit_text(status) + "):\n" + read_text(log_));
  }
}

std::string ServerProcess::log_tail() const {
  const std::string text = read_text(log_);
  return text.size() > 4000 ? text.substr(text.size() - 4000) : text;
}

void ServerProcess::stop() {
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

}  // namespace cuwire::bench
