#include "benchmarks/netem/netem.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>

namespace cuwire::netem {

namespace {

using Clock = std::chrono::steady_clock;

Nanos now() { return std::chrono::duration_cast<Nanos>(Clock::now().time_since_epoch()); }

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // fails harmlessly on Unix sockets
}

// A socket of `a`'s kind, connected (connect) or listening (bind + listen); -1 and *error.
int open_socket(const Address& a, bool listening, Address* bound, std::string* error) {
  if (a.kind == Address::Kind::kUnix) {
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (a.path.size() >= sizeof sa.sun_path) {
      *error = "unix path too long: " + a.path;
      return -1;
    }
    std::memcpy(sa.sun_path, a.path.c_str(), a.path.size() + 1);
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *error = errno_text("socket");
      return -1;
    }
    if (listening) unlink(a.path.c_str());
    const int rc = listening ? bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa)
                             : connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
    if (rc != 0 || (listening && listen(fd, 64) != 0)) {
      *error = errno_text(listening ? "bind" : "connect") + " (" + a.to_string() + ")";
      close(fd);
      return -1;
    }
    if (bound) *bound = a;
    return fd;
  }
  if (a.kind != Address::Kind::kTcp) {
    *error =
        "the emulator forwards tcp: and unix: addresses (TLS passes through as bytes over "
        "tcp:): " +
        a.to_string();
    return -1;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = listening ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(a.port);
  if (int rc = getaddrinfo(a.host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    *error = a.host + ": " + gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    if (listening) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const int rc = listening ? bind(fd, ai->ai_addr, ai->ai_addrlen)
                             : connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc == 0 && (!listening || listen(fd, 64) == 0)) break;
    *error = errno_text(listening ? "bind" : "connect") + " (" + a.to_string() + ")";
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) return -1;
  set_nodelay(fd);
  if (bound) {
    *bound = a;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      bound->port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                   : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    }
  }
  return fd;
}

// One direction of a connection: bytes read from `src`, held as the link would, written to
// `dst`.
struct Direction {
  Direction(int from, int to, const LinkSpec& l, std::atomic<uint64_t>& count)
      : src(from), dst(to), link(l), forwarded(count) {}
  int src, dst;
  const LinkSpec& link;
  std::atomic<uint64_t>& forwarded;
  struct Chunk {
    Nanos release;
    std::vector<char> bytes;
    size_t sent = 0;
  };
  std::deque<Chunk> queue;
  uint64_t held = 0;     // bytes in queue
  Nanos link_free{0};    // when the link has serialised what it was given
  bool eof = false;      // src ended
  bool shut = false;     // dst told (shutdown SHUT_WR)
  bool blocked = false;  // dst's buffer full: wait for POLLOUT

  uint64_t limit() const {
    const double bdp = link.bits_per_second / 8 * std::chrono::duration<double>(link.rtt).count();
    return link.buffer + static_cast<uint64_t>(bdp);
  }
  bool wants_read() const { return !eof && held < limit(); }
  bool done() const { return eof && queue.empty() && shut; }

  // Reads what src has (until it would block or the queue is full); false on an error.
  bool read_some() {
    char buf[64 * 1024];
    while (wants_read()) {
      const ssize_t n = ::read(src, buf, sizeof buf);
      if (n == 0) {
        eof = true;
        break;
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno == EAGAIN || errno == EWOULDBLOCK;
      }
      const Nanos t = now();
      Nanos serialise{0};
      if (link.bits_per_second > 0) {
        serialise = Nanos(static_cast<int64_t>(std::ceil(n * 8.0 * 1e9 / link.bits_per_second)));
      }
      link_free = std::max(t, link_free) + serialise;
      queue.push_back({link_free + link.rtt / 2, std::vector<char>(buf, buf + n)});
      held += static_cast<uint64_t>(n);
    }
    return true;
  }
  // Writes what is due by `t`; false on an error.
  bool flush(Nanos t) {
    blocked = false;
    while (!queue.empty() && queue.front().release <= t) {
      Chunk& c = queue.front();
      const ssize_t n = ::write(dst, c.bytes.data() + c.sent, c.bytes.size() - c.sent);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          blocked = true;
          return true;
        }
        return false;
      }
      c.sent += static_cast<size_t>(n);
      forwarded += static_cast<uint64_t>(n);
      if (c.sent == c.bytes.size()) {
        held -= c.bytes.size();
        queue.pop_front();
      }
    }
    if (eof && queue.empty() && !shut) {
      ::shutdown(dst, SHUT_WR);
      shut = true;
    }
    return true;
  }
};

}  // namespace

bool profile(const std::string& name, LinkSpec* out) {
  using std::chrono::microseconds;
  struct P {
    const char* name;
    int64_t rtt_us;
    double gbit;
  };
  static const P kProfiles[] = {{"loopback", 0, 0},
                                {"100gbe", 10, 100},
                                {"25gbe", 25, 25},
                                {"10gbe", 50, 10},
                                {"cross-rack", 200, 25}};
  for (const P& p : kProfiles) {
    if (name != p.name) continue;
    *out = LinkSpec{};
    out->name = p.name;
    out->rtt = microseconds(p.rtt_us);
    out->bits_per_second = p.gbit * 1e9;
    return true;
  }
  return false;
}

std::vector<std::string> profile_names() {
  return {"loopback", "100gbe", "25gbe", "10gbe", "cross-rack"};
}

bool parse_duration(const std::string& text, Nanos* out) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !(v >= 0) || v > 1e12) return false;
  const std::string unit(end);
  double scale = 0;
  if (unit == "ns") scale = 1;
  if (unit == "us") scale = 1e3;
  if (unit == "ms") scale = 1e6;
  if (unit == "s") scale = 1e9;
  if (scale == 0) return false;
  *out = Nanos(static_cast<int64_t>(std::llround(v * scale)));
  return true;
}

bool parse_rate(const std::string& text, double* out) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !(v >= 0) || v > 1e15) return false;
  const std::string unit(end);
  double scale = 0;
  if (unit == "bit" || unit == "bit/s") scale = 1;
  if (unit == "K" || unit == "Kbit" || unit == "Kbit/s") scale = 1e3;
  if (unit == "M" || unit == "Mbit" || unit == "Mbit/s") scale = 1e6;
  if (unit == "G" || unit == "Gbit" || unit == "Gbit/s") scale = 1e9;
  if (unit == "MB/s") scale = 8e6;
  if (unit == "GB/s") scale = 8e9;
  if (scale == 0) return false;
  *out = v * scale;
  return true;
}

std::string describe(const LinkSpec& link) {
  char buf[128];
  const double rtt_us = std::chrono::duration<double, std::micro>(link.rtt).count();
  if (link.bits_per_second > 0) {
    std::snprintf(buf, sizeof buf, "RTT %.1f us, %.3g Gbit/s", rtt_us, link.bits_per_second / 1e9);
  } else {
    std::snprintf(buf, sizeof buf, "RTT %.1f us, bandwidth unlimited", rtt_us);
  }
  return link.name.empty() ? buf : link.name + " (" + buf + ")";
}

Status Emulator::start(const Address& listen, const Address& to, const LinkSpec& link,
                       std::unique_ptr<Emulator>* out) {
  std::unique_ptr<Emulator> e(new Emulator());
  e->link_ = link;
  e->to_ = to;
  std::string error;
  e->listen_fd_ = open_socket(listen, true, &e->bound_, &error);
  if (e->listen_fd_ < 0) return Status::failed("listen on " + listen.to_string() + ": " + error);
  if (pipe2(e->wake_, O_CLOEXEC | O_NONBLOCK) != 0) return Status::failed(errno_text("pipe"));
  e->acceptor_ = std::thread([p = e.get()] { p->accept_loop(); });
  *out = std::move(e);
  return Status::ok();
}

Emulator::~Emulator() {
  stop();
  for (int fd : wake_) {
    if (fd >= 0) close(fd);
  }
}

void Emulator::stop() {
  if (!stopping_.exchange(true)) {
    if (wake_[1] >= 0) (void)!::write(wake_[1], "x", 1);
  }
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    threads.swap(connections_);
  }
  for (auto& t : threads) t.join();
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
    if (bound_.kind == Address::Kind::kUnix) unlink(bound_.path.c_str());
  }
}

void Emulator::accept_loop() {
  while (!stopping_) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) break;
    if (fds[1].revents) break;
    if (!(fds[0].revents & POLLIN)) continue;
    const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    std::string error;
    const int upstream = open_socket(to_, false, nullptr, &error);
    if (upstream < 0) {
      std::fprintf(stderr, "cuwire-netem: %s\n", error.c_str());
      close(client);
      continue;
    }
    set_nodelay(client);
    std::lock_guard lock(mu_);
    connections_.emplace_back([this, client, upstream] { serve(client, upstream); });
  }
}

void Emulator::serve(int client, int upstream) {
  // Sleeps end within a microsecond or two of when they were asked to, not the default 50 us.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  set_nonblocking(client);
  set_nonblocking(upstream);
  Direction up(client, upstream, link_, up_), down(upstream, client, link_, down_);
  Direction* dirs[2] = {&up, &down};
  bool ok = true;
  Nanos last_moved{0};  // when bytes last came in
  while (ok && !stopping_ && !(up.done() && down.done())) {
    const Nanos t = now();
    for (Direction* d : dirs) ok = ok && d->flush(t);
    if (!ok) break;
    Nanos next = Nanos::max();
    for (Direction* d : dirs) {
      if (!d->queue.empty() && !d->blocked) next = std::min(next, d->queue.front().release);
    }
    pollfd fds[5];
    nfds_t n = 0;
    fds[n++] = {wake_[0], POLLIN, 0};
    int read_at[2] = {-1, -1}, write_at[2] = {-1, -1};
    for (int i = 0; i < 2; ++i) {
      if (dirs[i]->wants_read()) {
        read_at[i] = static_cast<int>(n);
        fds[n++] = {dirs[i]->src, POLLIN, 0};
      }
      if (dirs[i]->blocked) {
        write_at[i] = static_cast<int>(n);
        fds[n++] = {dirs[i]->dst, POLLOUT, 0};
      }
    }
    timespec ts{0, 0};
    const timespec* timeout = nullptr;  // nothing due: until something happens
    if (now() - last_moved < link_.idle_spin) {
      timeout = &ts;  // busy a moment ago: look and come back (a spin)
    } else if (next != Nanos::max()) {
      const Nanos wait = next - now() - link_.spin;
      if (wait > Nanos{0}) {
        ts.tv_sec = static_cast<time_t>(wait.count() / 1'000'000'000);
        ts.tv_nsec = static_cast<long>(wait.count() % 1'000'000'000);
      }
      timeout = &ts;  // due soon: look and come back (a spin)
    }
    if (ppoll(fds, n, timeout, nullptr) < 0 && errno != EINTR) break;
    if (fds[0].revents) break;
    for (int i = 0; i < 2; ++i) {
      if (read_at[i] >= 0 && fds[read_at[i]].revents & (POLLIN | POLLHUP | POLLERR)) {
        ok = ok && dirs[i]->read_some();
        last_moved = now();
      }
      if (write_at[i] >= 0 && fds[write_at[i]].revents & (POLLERR | POLLHUP)) ok = false;
    }
  }
  close(client);
  close(upstream);
}

namespace {

bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// The far end of measure(): each connection says 'E' (echo 4-byte messages until the end) or
// 'S' (a sink: read to the end, then answer how many bytes came).
class Peer {
 public:
  Status start() {
    std::string error;
    Address a;
    if (Status s = parse_address("tcp:127.0.0.1:0", &a); !s) return s;
    fd_ = open_socket(a, true, &address_, &error);
    if (fd_ < 0) return Status::failed(error);
    thread_ = std::thread([this] { loop(); });
    return Status::ok();
  }
  ~Peer() {
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    for (auto& t : served_) t.join();
    if (fd_ >= 0) close(fd_);
  }
  const Address& address() const { return address_; }

 private:
  void loop() {
    for (;;) {
      const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      set_nodelay(c);
      served_.emplace_back([c] {
        char kind = 0;
        if (read_all(c, &kind, 1) && kind == 'E') {
          char msg[4];
          while (read_all(c, msg, 4) && write_all(c, msg, 4)) {
          }
        } else if (kind == 'S') {
          std::vector<char> buf(1 << 20);
          uint64_t total = 0;
          for (;;) {
            const ssize_t r = ::read(c, buf.data(), buf.size());
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            total += static_cast<uint64_t>(r);
          }
          write_all(c, &total, sizeof total);
        }
        close(c);
      });
    }
  }
  int fd_ = -1;
  Address address_;
  std::thread thread_;
  std::vector<std::thread> served_;
};

int dial(const Address& a) {
  std::string error;
  return open_socket(a, false, nullptr, &error);
}

// Round trips of 4 bytes to `a` (microseconds, sorted); empty when it cannot be reached.
std::vector<double> ping_pong(const Address& a, int n) {
  std::vector<double> rtts;
  const int fd = dial(a);
  if (fd < 0) return rtts;
  char msg[4] = {'p', 'i', 'n', 'g'};
  if (write_all(fd, "E", 1)) {
    for (int i = 0; i < n + n / 10; ++i) {  // the first tenth warms up, uncounted
      const auto t0 = Clock::now();
      if (!write_all(fd, msg, 4) || !read_all(fd, msg, 4)) break;
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      if (i >= n / 10) rtts.push_back(us);
    }
  }
  close(fd);
  std::sort(rtts.begin(), rtts.end());
  return rtts;
}

// Gbit/s of a one-way transfer of `bytes` to `a`, to the sink's answer; 0 on a failure.
double bulk(const Address& a, uint64_t bytes) {
  const int fd = dial(a);
  if (fd < 0) return 0;
  std::vector<char> buf(1 << 20, 'x');
  const auto t0 = Clock::now();
  bool ok = write_all(fd, "S", 1);
  for (uint64_t left = bytes; ok && left > 0;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
    ok = write_all(fd, buf.data(), n);
    left -= n;
  }
  ::shutdown(fd, SHUT_WR);
  uint64_t got = 0;
  ok = ok && read_all(fd, &got, sizeof got) && got == bytes;
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  close(fd);
  return ok && secs > 0 ? static_cast<double>(bytes) * 8 / secs / 1e9 : 0;
}

double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

}  // namespace

Status measure(const LinkSpec& link, int round_trips, uint64_t bulk_bytes, Fidelity* out) {
  Peer peer;
  if (Status s = peer.start(); !s) return s;
  Address listen;
  if (Status s = parse_address("tcp:127.0.0.1:0", &listen); !s) return s;
  std::unique_ptr<Emulator> em;
  if (Status s = Emulator::start(listen, peer.address(), link, &em); !s) return s;
  *out = Fidelity{};
  out->asked = link;
  out->round_trips = round_trips;
  out->bulk_bytes = bulk_bytes;
  const auto direct = ping_pong(peer.address(), round_trips);
  const auto through = ping_pong(em->address(), round_trips);
  if (direct.empty() || through.empty()) return Status::failed("the ping-pong did not get through");
  out->direct_rtt_p50_us = quantile(direct, 0.5);
  out->rtt_p50_us = quantile(through, 0.5);
  out->rtt_p99_us = quantile(through, 0.99);
  double sum = 0;
  for (double v : through) sum += v;
  out->rtt_mean_us = sum / static_cast<double>(through.size());
  if (bulk_bytes > 0) {
    out->direct_gbit = bulk(peer.address(), bulk_bytes);
    out->gbit = bulk(em->address(), bulk_bytes);
    if (out->direct_gbit == 0 || out->gbit == 0) return Status::failed("the transfer failed");
  }
  em->stop();
  return Status::ok();
}

}  // namespace cuwire::netem
