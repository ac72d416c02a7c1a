// Transports over Asio (standalone) and OpenSSL. All blocking: a server session and a client
// connection each own their thread of use, so synchronous operations are the simplest correct
// choice and cost no extra hops.

#include "protocol/transport.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <asio.hpp>
#include <asio/ssl.hpp>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <unordered_set>
#include <vector>

namespace cuwire {
namespace {

using asio::ip::tcp;
using unix_socket = asio::local::stream_protocol;

std::string errstr(const asio::error_code& ec) { return ec.message(); }

// A peer that closes in the middle of a read sent a truncated message: that is a protocol
// error worth telling it about. A close between reads is an ordinary disconnect.
Status read_failure(const std::string& peer, size_t got, size_t want, const asio::error_code& ec) {
  if (got > 0 && (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated)) {
    return Status::malformed("truncated: " + std::to_string(got) + " of " + std::to_string(want) +
                             " bytes before the peer closed");
  }
  return Status::disconnected(peer + ": read: " + errstr(ec));
}

std::vector<asio::const_buffer> to_buffers(std::span<const std::span<const uint8_t>> pieces) {
  std::vector<asio::const_buffer> bufs;
  bufs.reserve(pieces.size());
  for (auto p : pieces) {
    if (!p.empty()) bufs.emplace_back(p.data(), p.size());
  }
  return bufs;
}

// ---------------------------------------------------------------------------------------------
// Timeouts

using Clock = StreamTimeouts::Clock;

// One stream operation under bounds, known to the TimeoutWatch while it runs.
struct BoundedOp {
  int fd = -1;
  int how = SHUT_RD;  // what a timeout shuts down
  Clock::time_point deadline;
  Clock::duration idle{};
  std::atomic<Clock::rep> last_progress{0};  // Clock ticks of the last byte moved
  bool fired = false;                        // guarded by TimeoutWatch::mu_

  Clock::time_point expiry() const {
    Clock::time_point e = deadline;
    if (idle.count() > 0) {
      Clock::duration last(last_progress.load(std::memory_order_relaxed));
      e = std::min(e, Clock::time_point(last) + idle);
    }
    return e;
  }
};

// One thread for the whole process fails the operations that pass their bounds, by shutting
// their socket down under them (which wakes a blocked read or write, TLS included); between
// bounds it sleeps. Started by the first bounded operation, so a client never has it; leaked,
// so exit never waits for it.
class TimeoutWatch {
 public:
  static TimeoutWatch& instance() {
    static TimeoutWatch* watch = new TimeoutWatch;
    return *watch;
  }

  void add(BoundedOp* op) {
    std::lock_guard lock(mu_);
    ops_.insert(op);
    if (op->expiry() < next_wake_) cv_.notify_one();
  }

  // Afterwards the watch touches neither op nor its socket. True when op timed out.
  bool remove(BoundedOp* op) {
    std::lock_guard lock(mu_);
    ops_.erase(op);
    return op->fired;
  }

 private:
  TimeoutWatch() {
    std::thread([this] { loop(); }).detach();
  }

  void loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      Clock::time_point now = Clock::now();
      next_wake_ = Clock::time_point::max();
      for (BoundedOp* op : ops_) {
        if (op->fired) continue;
        Clock::time_point e = op->expiry();
        if (e <= now) {
          op->fired = true;
          ::shutdown(op->fd, op->how);
        } else {
          next_wake_ = std::min(next_wake_, e);
        }
      }
      if (next_wake_ == Clock::time_point::max()) {
        cv_.wait(lock);
      } else {
        cv_.wait_until(lock, next_wake_);
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_set<BoundedOp*> ops_;                      // guarded by mu_
  Clock::time_point next_wake_ = Clock::time_point::max();  // guarded by mu_
};

// An Asio completion condition that transfers everything, like asio::transfer_all, and notes
// the time of every chunk for an idle bound.
//
// The chunk is what one system call may move. asio::transfer_all's 64 KiB makes a 64 MiB copy
// a thousand sendmsg/recvmsg calls on each end, each waking the peer; measured on a 2-core VM
// over unix:, that alone cost a streamed 64 MiB copy a fifth of a raw stream's bandwidth. An
// unbounded stream moves everything asked in one call (the kernel loops); under an idle bound
// a chunk stays small enough that a slow but live peer shows progress well within the bound.
struct NoteProgress {
  static constexpr size_t kUnboundedChunk = size_t{1} << 30;
  static constexpr size_t kBoundedChunk = size_t{256} << 10;
  std::atomic<Clock::rep>* last = nullptr;  // null: the stream is unbounded
  size_t operator()(const asio::error_code& ec, size_t) const {
    if (ec) return 0;
    if (!last) return kUnboundedChunk;
    last->store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
    return kBoundedChunk;
  }
};

// A stream's bounds, applied to one operation at a time. A read that times out shuts the
// socket down for reading only, so the owner can still write why it gives up (under a bound
// set anew); a write that times out shuts both ways.
class StreamBounds {
 public:
  enum class Op { kRead, kWrite };

  void set(const StreamTimeouts& t) { t_ = t; }
  bool timed_out() const { return read_timed_out_ || write_timed_out_; }

  // Runs io(NoteProgress) under the bounds on socket fd. False when the operation timed out,
  // or cannot work because an earlier one did.
  template <typename Io>
  bool run(int fd, Op kind, Io&& io) {
    if (write_timed_out_ || (kind == Op::kRead && read_timed_out_)) return false;
    if (!t_.bounded()) {
      io(NoteProgress{});
      return true;
    }
    BoundedOp op;
    op.fd = fd;
    op.how = kind == Op::kRead ? SHUT_RD : SHUT_RDWR;
    op.deadline = t_.deadline;
    op.idle = t_.idle;
    op.last_progress.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
    TimeoutWatch::instance().add(&op);
    io(NoteProgress{&op.last_progress});
    if (!TimeoutWatch::instance().remove(&op)) return true;
    (kind == Op::kRead ? read_timed_out_ : write_timed_out_) = true;
    return false;
  }

  Status failure(const std::string& peer, const char* what) const {
    return Status::disconnected(peer + ": " + what + " timed out");
  }

 private:
  StreamTimeouts t_;
  bool read_timed_out_ = false;
  bool write_timed_out_ = false;
};

// ---------------------------------------------------------------------------------------------
// Plain sockets (Unix, TCP)

// ---------------------------------------------------------------------------------------------
// Polling before sleeping (ByteStream::set_read_spin)

// An adaptive bound on how long a read polls its socket before it blocks. A blocking read that
// waits costs a sleep and a wake-up on both ends of a round trip (tens of microseconds across
// virtual CPUs); polling costs a core for as long as it lasts. The bound follows the waits seen
// lately: twice the last wait when that was within the maximum, halved after a longer one, so
// a peer that answers fast is polled for and an idle one costs a single short poll per wait.
class ReadSpin {
 public:
  void set_max(std::chrono::microseconds max) {
    max_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(max).count();
    budget_ns_ = max_ns_;
  }

  // Polls fd with recv(MSG_DONTWAIT) for up to the current bound. True with *got > 0 when
  // bytes came; false when none did (the caller blocks, then calls waited()).
  bool poll(int fd, void* buf, size_t n, size_t* got) {
    if (max_ns_ <= 0) return false;
    start_ = Clock::now();
    const auto deadline = start_ + std::chrono::nanoseconds(budget_ns_);
    for (unsigned i = 0;; ++i) {
      const ssize_t r = ::recv(fd, buf, n, MSG_DONTWAIT);
      if (r > 0) {
        *got = static_cast<size_t>(r);
        waited(Clock::now());
        return true;
      }
      if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        return false;  // end of stream or an error: the blocking read reports it
      }
      if ((i & 15) == 15 && Clock::now() >= deadline) return false;
      // Where threads outnumber cores, the peer that is to answer may be waiting for this
      // one's core: give it up now and then.
      if ((i & 7) == 7) sched_yield();
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
  }

  // After a poll that found nothing, once the blocking read returned at `now`.
  void waited(Clock::time_point now) {
    if (max_ns_ <= 0) return;
    const int64_t w = std::chrono::duration_cast<std::chrono::nanoseconds>(now - start_).count();
    if (w <= max_ns_) {
      budget_ns_ = std::min<int64_t>(max_ns_, std::max<int64_t>(2 * w, kMinNs));
    } else {
      budget_ns_ = std::max<int64_t>(budget_ns_ / 2, kMinNs);
    }
  }
  bool on() const { return max_ns_ > 0; }

 private:
  static constexpr int64_t kMinNs = 1000;
  int64_t max_ns_ = 0;
  int64_t budget_ns_ = 0;
  Clock::time_point start_;
};

// One byte with room for one passed descriptor (SCM_RIGHTS), for sendmsg and recvmsg.
struct FdMessage {
  explicit FdMessage(char b) : byte(b) {
    iov = {&byte, 1};
    header.msg_iov = &iov;
    header.msg_iovlen = 1;
    header.msg_control = control;
    header.msg_controllen = sizeof control;
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;

  char byte;
  iovec iov{};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr header{};
};

template <typename Socket>
class SocketStream final : public ByteStream {
 public:
  SocketStream(std::unique_ptr<asio::io_context> io, Socket socket, std::string peer)
      : io_(std::move(io)), socket_(std::move(socket)), peer_(std::move(peer)) {
    if constexpr (std::is_same_v<Socket, unix_socket::socket>) {
      ucred c{};
      socklen_t len = sizeof c;
      if (::getsockopt(socket_.native_handle(), SOL_SOCKET, SO_PEERCRED, &c, &len) == 0 &&
          len == sizeof c) {
        credentials_ = PeerCredentials{static_cast<uint32_t>(c.uid), static_cast<uint32_t>(c.gid),
                                       static_cast<int32_t>(c.pid)};
      }
    }
  }

  Status read_some(void* buf, size_t n, size_t* got) override {
    *got = 0;
    if (n == 0) return Status::ok();
    if (!bounds_.timed_out() && spin_.poll(socket_.native_handle(), buf, n, got))
      return Status::ok();
    asio::error_code ec;
    if (!bounds_.run(socket_.native_handle(), StreamBounds::Op::kRead,
                     [&](NoteProgress) { *got = socket_.read_some(asio::buffer(buf, n), ec); })) {
      return bounds_.failure(peer_, "read");
    }
    if (spin_.on()) spin_.waited(Clock::now());
    if (ec) return read_failure(peer_, 0, n, ec);
    return Status::ok();
  }

  void set_read_spin(std::chrono::microseconds max) override { spin_.set_max(max); }

  Status send_fd(int fd) override {
    if constexpr (!std::is_same_v<Socket, unix_socket::socket>) {
      return ByteStream::send_fd(fd);
    } else {
      FdMessage m('L');
      cmsghdr* c = CMSG_FIRSTHDR(&m.header);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
      ssize_t r;
      do {
        r = ::sendmsg(socket_.native_handle(), &m.header, MSG_NOSIGNAL);
      } while (r < 0 && errno == EINTR);
      if (r != 1)
        return Status::disconnected(peer_ + ": passing a descriptor: " + std::strerror(errno));
      return Status::ok();
    }
  }

  Status receive_fd(int* fd) override {
    if constexpr (!std::is_same_v<Socket, unix_socket::socket>) {
      return ByteStream::receive_fd(fd);
    } else {
      *fd = -1;
      Status result;
      if (!bounds_.run(socket_.native_handle(), StreamBounds::Op::kRead, [&](NoteProgress) {
            FdMessage m(0);
            ssize_t r;
            do {
              r = ::recvmsg(socket_.native_handle(), &m.header, MSG_CMSG_CLOEXEC);
            } while (r < 0 && errno == EINTR);
            if (r != 1) {
              result = Status::disconnected(
                  peer_ + ": taking a descriptor: " +
                  (r == 0 ? std::string("end of stream") : std::strerror(errno)));
              return;
            }
            // Only a single descriptor is taken; anything else that came is closed.
            for (cmsghdr* c = CMSG_FIRSTHDR(&m.header); c; c = CMSG_NXTHDR(&m.header, c)) {
              if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
              const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
              for (size_t i = 0; i < count; ++i) {
                int got = -1;
                std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
                if (*fd < 0) {
                  *fd = got;
                } else {
                  ::close(got);
                }
              }
            }
          })) {
        return bounds_.failure(peer_, "read");
      }
      return result;
    }
  }

  bool peer_closed() const override {
    pollfd p{const_cast<Socket&>(socket_).native_handle(), POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
  }

  Status read_exact(void* buf, size_t n) override {
    size_t polled = 0;
    if (n > 0 && !bounds_.timed_out() && spin_.poll(socket_.native_handle(), buf, n, &polled)) {
      if (polled == n) return Status::ok();
      buf = static_cast<uint8_t*>(buf) + polled;
      n -= polled;
    }
    asio::error_code ec;
    size_t got = 0;
    if (!bounds_.run(socket_.native_handle(), StreamBounds::Op::kRead, [&](NoteProgress cond) {
          got = asio::read(socket_, asio::buffer(buf, n), cond, ec);
        })) {
      return bounds_.failure(peer_, "read");
    }
    if (spin_.on() && polled == 0) spin_.waited(Clock::now());
    if (ec) return read_failure(peer_, got + polled, n + polled, ec);
    return Status::ok();
  }

  Status write_all(std::span<const std::span<const uint8_t>> pieces) override {
    asio::error_code ec;
    if (!bounds_.run(socket_.native_handle(), StreamBounds::Op::kWrite, [&](NoteProgress cond) {
          asio::write(socket_, to_buffers(pieces), cond, ec);
        })) {
      return bounds_.failure(peer_, "write");
    }
    if (ec) return Status::disconnected(peer_ + ": write: " + errstr(ec));
    return Status::ok();
  }

  void close_write() override { ::shutdown(socket_.native_handle(), SHUT_WR); }

  void shutdown() override {
    // ::shutdown on the descriptor wakes a read blocked in another thread; Asio's own
    // shutdown is not safe to call concurrently with an operation.
    ::shutdown(socket_.native_handle(), SHUT_RDWR);
  }

  void shutdown_read() override { ::shutdown(socket_.native_handle(), SHUT_RD); }
  void set_timeouts(const StreamTimeouts& t) override { bounds_.set(t); }
  bool timed_out() const override { return bounds_.timed_out(); }
  std::string peer() const override { return peer_; }
  std::optional<PeerCredentials> peer_credentials() const override { return credentials_; }
  int native_handle() const override { return const_cast<Socket&>(socket_).native_handle(); }
  // A listener's name for the peer: its address, with its credentials where it has them.
  void name_peer_with_credentials() {
    if (credentials_) {
      peer_ +=
          " uid " + std::to_string(credentials_->uid) + " pid " + std::to_string(credentials_->pid);
    }
  }

 private:
  std::unique_ptr<asio::io_context> io_;
  Socket socket_;
  std::string peer_;
  std::optional<PeerCredentials> credentials_;  // Unix sockets: SO_PEERCRED at construction
  StreamBounds bounds_;
  ReadSpin spin_;
};

// ---------------------------------------------------------------------------------------------
// TLS 1.3

std::string ssl_error_text() {
  unsigned long e = ERR_get_error();
  if (e == 0) return "unknown TLS error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

class TlsStream final : public ByteStream {
 public:
  TlsStream(std::unique_ptr<asio::io_context> io, std::shared_ptr<asio::ssl::context> ctx,
            tcp::socket socket, std::string peer, bool server_side)
      : io_(std::move(io)),
        ctx_(std::move(ctx)),
        stream_(std::move(socket), *ctx_),
        peer_(std::move(peer)),
        server_side_(server_side) {}

  // Client side: verify the server's certificate chain and name, then handshake.
  Status client_handshake(const std::string& host) {
    stream_.set_verify_mode(asio::ssl::verify_peer);
    stream_.set_verify_callback(asio::ssl::host_name_verification(host));
    SSL_set_tlsext_host_name(stream_.native_handle(), host.c_str());
    return handshake();
  }

  Status read_exact(void* buf, size_t n) override {
    Status hs;
    asio::error_code ec;
    size_t got = 0;
    if (!bounds_.run(fd(), StreamBounds::Op::kRead, [&](NoteProgress cond) {
          hs = handshake();
          if (hs) got = asio::read(stream_, asio::buffer(buf, n), cond, ec);
        })) {
      return bounds_.failure(peer_, handshake_status_ ? "read" : "TLS handshake");
    }
    if (!hs) return hs;
    if (ec) return read_failure(peer_, got, n, ec);
    return Status::ok();
  }

  Status write_all(std::span<const std::span<const uint8_t>> pieces) override {
    Status hs;
    asio::error_code ec;
    if (!bounds_.run(fd(), StreamBounds::Op::kWrite, [&](NoteProgress cond) {
          hs = handshake();
          if (!hs) return;
          // OpenSSL writes one record per buffer; gathering small pieces first avoids tiny
          // records.
          size_t total = 0;
          for (auto p : pieces) total += p.size();
          if (total <= 64 * 1024) {
            scratch_.clear();
            for (auto p : pieces) scratch_.insert(scratch_.end(), p.begin(), p.end());
            asio::write(stream_, asio::buffer(scratch_), cond, ec);
          } else {
            asio::write(stream_, to_buffers(pieces), cond, ec);
          }
        })) {
      return bounds_.failure(peer_, handshake_status_ ? "write" : "TLS handshake");
    }
    if (!hs) return hs;
    if (ec) return Status::disconnected(peer_ + ": write: " + errstr(ec));
    return Status::ok();
  }

  Status read_some(void* buf, size_t n, size_t* got) override {
    *got = 0;
    if (n == 0) return Status::ok();
    Status hs;
    asio::error_code ec;
    if (!bounds_.run(fd(), StreamBounds::Op::kRead, [&](NoteProgress) {
          hs = handshake();
          if (hs) *got = stream_.read_some(asio::buffer(buf, n), ec);
        })) {
      return bounds_.failure(peer_, handshake_status_ ? "read" : "TLS handshake");
    }
    if (!hs) return hs;
    if (ec) return read_failure(peer_, 0, n, ec);
    return Status::ok();
  }

  bool relays() const override { return true; }

  // One thread, asynchronous both ways on this stream's io_context: a TLS stream takes one
  // read and one write at once, never two threads.
  Status relay(int other) override {
    if (Status hs = handshake(); !hs) {
      ::close(other);
      return hs;
    }
    asio::error_code ec;
    unix_socket::socket local(*io_);
    local.assign(unix_socket(), other, ec);
    if (ec) {
      ::close(other);
      return Status::failed("relaying " + peer_ + ": " + errstr(ec));
    }
    // One TLS record's worth each way.
    std::vector<uint8_t> up(16 * 1024), down(16 * 1024);
    bool local_done = false;
    std::function<void()> from_peer, from_local;
    from_peer = [&] {
      stream_.async_read_some(asio::buffer(up), [&](const asio::error_code& e, size_t n) {
        if (e) {
          // The client is gone: the other process reads the end, and the relay waits for it
          // to close.
          local.shutdown(unix_socket::socket::shutdown_send, ec);
          return;
        }
        asio::async_write(local, asio::buffer(up.data(), n),
                          [&](const asio::error_code& we, size_t) {
                            // Not once the other process is done: nothing would cancel it.
                            if (!we && !local_done) from_peer();
                          });
      });
    };
    from_local = [&] {
      local.async_read_some(asio::buffer(down), [&](const asio::error_code& e, size_t n) {
        if (e) {
          // The other process is done: stop reading the client, keep the stream for a last word.
          local_done = true;
          stream_.lowest_layer().cancel(ec);
          return;
        }
        asio::async_write(stream_, asio::buffer(down.data(), n),
                          [&](const asio::error_code& we, size_t) {
                            if (!we) {
                              from_local();
                            } else {
                              // The client cannot be written: the other process hears the end.
                              local.shutdown(unix_socket::socket::shutdown_both, ec);
                              from_local();
                            }
                          });
      });
    };
    io_->restart();
    from_peer();
    from_local();
    io_->run();
    local.close(ec);
    return local_done ? Status::ok() : Status::disconnected(peer_ + ": relay ended");
  }

  // Without close_notify: the peer sees a truncated TLS stream, which is what this is for.
  void close_write() override { ::shutdown(fd(), SHUT_WR); }
  void shutdown() override { ::shutdown(fd(), SHUT_RDWR); }
  void shutdown_read() override { ::shutdown(fd(), SHUT_RD); }
  void set_timeouts(const StreamTimeouts& t) override { bounds_.set(t); }
  bool timed_out() const override { return bounds_.timed_out(); }
  std::string peer() const override { return peer_; }

 private:
  int fd() { return stream_.lowest_layer().native_handle(); }

  Status handshake() {
    if (handshake_done_) return handshake_status_;
    handshake_done_ = true;
    asio::error_code ec;
    stream_.handshake(
        server_side_ ? asio::ssl::stream_base::server : asio::ssl::stream_base::client, ec);
    if (ec) {
      handshake_status_ = Status::disconnected(peer_ + ": TLS handshake: " + errstr(ec));
    }
    return handshake_status_;
  }

  std::unique_ptr<asio::io_context> io_;
  std::shared_ptr<asio::ssl::context> ctx_;
  asio::ssl::stream<tcp::socket> stream_;
  std::string peer_;
  bool server_side_;
  bool handshake_done_ = false;
  Status handshake_status_;
  std::vector<uint8_t> scratch_;
  StreamBounds bounds_;
};

std::string tcp_peer_name(const char* scheme, const tcp::endpoint& ep) {
  std::string host = ep.address().to_string();
  if (ep.address().is_v6()) host = "[" + host + "]";
  return std::string(scheme) + ":" + host + ":" + std::to_string(ep.port());
}

void set_nodelay(tcp::socket& s) {
  asio::error_code ec;
  s.set_option(tcp::no_delay(true), ec);
}

Status make_tls_context(bool server, std::shared_ptr<asio::ssl::context>* out) {
  auto ctx = std::make_shared<asio::ssl::context>(server ? asio::ssl::context::tls_server
                                                         : asio::ssl::context::tls_client);
  if (SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_3_VERSION) != 1) {
    return Status::failed("TLS 1.3 not available: " + ssl_error_text());
  }
  *out = std::move(ctx);
  return Status::ok();
}

Status resolve(const Address& a, tcp::resolver::results_type* out, asio::io_context& io) {
  tcp::resolver r(io);
  asio::error_code ec;
  *out = r.resolve(a.host, std::to_string(a.port), ec);
  if (ec) return Status::failed("cannot resolve " + a.host + ": " + errstr(ec));
  return Status::ok();
}

// ---------------------------------------------------------------------------------------------
// Listeners

// An accept loop's answer to failures. Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS,
// ENOMEM), accepting again at once would spin while the pending connection waits in the
// backlog: the loop sleeps a little between tries and reports the episode once. A failure of
// one connection (ECONNABORTED, EPROTO...) costs nothing.
class AcceptBackoff {
 public:
  explicit AcceptBackoff(Listener::ErrorFn on_error) : on_error_(std::move(on_error)) {}

  void failed(const std::string& where, int err, const std::string& text) {
    bool resource = err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
    if (!resource && (err == ECONNABORTED || err == EPROTO || err == EINTR || err == EAGAIN)) {
      return;
    }
    if (!in_episode_ && on_error_) {
      on_error_(where + ": accept: " + text +
                (resource ? "; retrying every 100 ms" : "; retrying every 10 ms"));
    }
    in_episode_ = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(resource ? 100 : 10));
  }

  void accepted(const std::string& where) {
    if (in_episode_ && on_error_) on_error_(where + ": accepting again");
    in_episode_ = false;
  }

 private:
  Listener::ErrorFn on_error_;
  bool in_episode_ = false;
};

// The accept loop of every listener. `accept_one(io, &ec)` accepts one connection on a fresh
// io_context (each holds descriptors of its own: epoll, eventfd, timerfd, so creating one fails
// like accept() when the process is out of them) and returns its stream, or sets ec.
template <typename AcceptOne>
void accept_loop(const std::atomic<bool>& stopped, const std::string& where,
                 Listener::AcceptFn& on_accept, Listener::ErrorFn on_error,
                 AcceptOne&& accept_one) {
  AcceptBackoff backoff(std::move(on_error));
  while (!stopped) {
    std::unique_ptr<ByteStream> stream;
    try {
      asio::error_code ec;
      stream = accept_one(std::make_unique<asio::io_context>(), &ec);
      if (stopped) break;
      if (ec) {
        backoff.failed(where, ec.value(), errstr(ec));
        continue;
      }
    } catch (const std::system_error& e) {
      if (stopped) break;
      backoff.failed(where, e.code().value(), e.what());
      continue;
    }
    backoff.accepted(where);
    on_accept(std::move(stream));
  }
}

class UnixListener final : public Listener {
 public:
  UnixListener(Address a, UnixSocketAccess access)
      : address_(std::move(a)), access_(access), acceptor_(io_) {}

  Status open() {
    // Whatever is at the path is removed only when it is a socket nobody accepts on any more
    // (left by a server that died): never a live server's socket, never another kind of file.
    struct stat st {};
    if (::lstat(address_.path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) {
        return Status::failed("cannot listen on " + address_.to_string() +
                              ": the path exists and is not a socket");
      }
      asio::io_context probe_io;
      unix_socket::socket probe(probe_io);
      asio::error_code probe_ec;
      probe.connect(unix_socket::endpoint(address_.path), probe_ec);
      if (!probe_ec) {
        return Status::failed("cannot listen on " + address_.to_string() +
                              ": another server is listening there");
      }
      ::unlink(address_.path.c_str());
    }
    asio::error_code ec;
    unix_socket::endpoint ep(address_.path);
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (ec) return Status::failed("cannot listen on " + address_.to_string() + ": " + errstr(ec));
    if (::lstat(address_.path.c_str(), &st) == 0) {
      bound_ = {st.st_dev, st.st_ino};
      have_bound_ = true;
    }
    // Bound but not listening: nobody can connect before the file has its mode and group.
    const char* path = address_.path.c_str();
    if (access_.group >= 0 &&
        ::chown(path, static_cast<uid_t>(-1), static_cast<gid_t>(access_.group)) != 0) {
      return Status::failed("cannot give " + address_.to_string() + " group " +
                            std::to_string(access_.group) + ": " + std::strerror(errno));
    }
    if (access_.mode >= 0 && ::chmod(path, static_cast<mode_t>(access_.mode)) != 0) {
      return Status::failed("cannot set the mode of " + address_.to_string() + ": " +
                            std::strerror(errno));
    }
    acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Status::failed("cannot listen on " + address_.to_string() + ": " + errstr(ec));
    return Status::ok();
  }

  ~UnixListener() override {
    // Only our own socket file: a server started after us may have bound the path since.
    struct stat st {};
    if (have_bound_ && ::lstat(address_.path.c_str(), &st) == 0 &&
        std::pair{st.st_dev, st.st_ino} == bound_) {
      ::unlink(address_.path.c_str());
    }
  }

  void run(AcceptFn on_accept, ErrorFn on_error) override {
    const std::string where = address_.to_string();
    accept_loop(stopped_, where, on_accept, std::move(on_error),
                [&](std::unique_ptr<asio::io_context> io,
                    asio::error_code* ec) -> std::unique_ptr<ByteStream> {
                  unix_socket::socket s(*io);
                  acceptor_.accept(s, *ec);
                  if (*ec || stopped_) return nullptr;
                  auto stream = std::make_unique<SocketStream<unix_socket::socket>>(
                      std::move(io), std::move(s), where);
                  stream->name_peer_with_credentials();
                  return stream;
                });
  }

  void stop() override {
    stopped_ = true;
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);  // wakes accept()
  }

  Address local_address() const override { return address_; }

 private:
  Address address_;
  UnixSocketAccess access_;
  asio::io_context io_;
  unix_socket::acceptor acceptor_;
  std::atomic<bool> stopped_{false};
  std::pair<dev_t, ino_t> bound_{};  // the socket file this listener created
  bool have_bound_ = false;
};

class TcpListener final : public Listener {
 public:
  TcpListener(Address a, std::shared_ptr<asio::ssl::context> tls)
      : address_(std::move(a)), tls_(std::move(tls)), acceptor_(io_) {}

  Status open() {
    tcp::resolver::results_type results;
    if (Status s = resolve(address_, &results, io_); !s) return s;
    asio::error_code ec = asio::error::host_not_found;
    for (const auto& r : results) {
      ec = {};
      acceptor_.open(r.endpoint().protocol(), ec);
      if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
      if (!ec) acceptor_.bind(r.endpoint(), ec);
      if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
      if (!ec) break;
      asio::error_code ignored;
      acceptor_.close(ignored);
    }
    if (ec) return Status::failed("cannot listen on " + address_.to_string() + ": " + errstr(ec));
    address_.port = acceptor_.local_endpoint().port();
    return Status::ok();
  }

  void run(AcceptFn on_accept, ErrorFn on_error) override {
    const char* scheme = tls_ ? "tls" : "tcp";
    accept_loop(
        stopped_, address_.to_string(), on_accept, std::move(on_error),
        [&](std::unique_ptr<asio::io_context> io,
            asio::error_code* ec) -> std::unique_ptr<ByteStream> {
          tcp::socket s(*io);
          acceptor_.accept(s, *ec);
          if (*ec || stopped_) return nullptr;
          set_nodelay(s);
          asio::error_code pec;
          std::string peer = tcp_peer_name(scheme, s.remote_endpoint(pec));
          if (tls_) {
            return std::make_unique<TlsStream>(std::move(io), tls_, std::move(s), peer, true);
          }
          return std::make_unique<SocketStream<tcp::socket>>(std::move(io), std::move(s), peer);
        });
  }

  void stop() override {
    stopped_ = true;
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
  }

  Address local_address() const override { return address_; }

 private:
  Address address_;
  std::shared_ptr<asio::ssl::context> tls_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::atomic<bool> stopped_{false};
};

}  // namespace

Status connect_stream(const Address& address, const TlsClientOptions& tls,
                      std::unique_ptr<ByteStream>* out) {
  auto io = std::make_unique<asio::io_context>();
  asio::error_code ec;
  if (address.kind == Address::Kind::kUnix) {
    unix_socket::socket s(*io);
    s.connect(unix_socket::endpoint(address.path), ec);
    if (ec)
      return Status::disconnected("cannot connect to " + address.to_string() + ": " + errstr(ec));
    *out = std::make_unique<SocketStream<unix_socket::socket>>(std::move(io), std::move(s),
                                                               address.to_string());
    return Status::ok();
  }
  tcp::resolver::results_type results;
  if (Status s = resolve(address, &results, *io); !s) return s;
  tcp::socket s(*io);
  asio::connect(s, results, ec);
  if (ec)
    return Status::disconnected("cannot connect to " + address.to_string() + ": " + errstr(ec));
  set_nodelay(s);
  if (address.kind == Address::Kind::kTcp) {
    *out = std::make_unique<SocketStream<tcp::socket>>(std::move(io), std::move(s),
                                                       address.to_string());
    return Status::ok();
  }
  std::shared_ptr<asio::ssl::context> ctx;
  if (Status st = make_tls_context(false, &ctx); !st) return st;
  if (tls.ca_file.empty()) {
    ctx->set_default_verify_paths(ec);
  } else {
    ctx->load_verify_file(tls.ca_file, ec);
  }
  if (ec) return Status::failed("cannot load CA file '" + tls.ca_file + "': " + errstr(ec));
  auto stream =
      std::make_unique<TlsStream>(std::move(io), ctx, std::move(s), address.to_string(), false);
  if (Status st = stream->client_handshake(address.host); !st) return st;
  *out = std::move(stream);
  return Status::ok();
}

Status listen_on(const Address& address, const TlsServerOptions& tls,
                 std::unique_ptr<Listener>* out, const UnixSocketAccess& unix_access) {
  if (address.kind == Address::Kind::kUnix) {
    auto l = std::make_unique<UnixListener>(address, unix_access);
    if (Status s = l->open(); !s) return s;
    *out = std::move(l);
    return Status::ok();
  }
  std::shared_ptr<asio::ssl::context> ctx;
  if (address.kind == Address::Kind::kTls) {
    if (tls.cert_file.empty() || tls.key_file.empty()) {
      return Status::invalid_argument(address.to_string() +
                                      ": a TLS listener needs --tls-cert and --tls-key");
    }
    if (Status s = make_tls_context(true, &ctx); !s) return s;
    asio::error_code ec;
    ctx->use_certificate_chain_file(tls.cert_file, ec);
    if (ec)
      return Status::failed("cannot load TLS certificate '" + tls.cert_file + "': " + errstr(ec));
    ctx->use_private_key_file(tls.key_file, asio::ssl::context::pem, ec);
    if (ec) return Status::failed("cannot load TLS key '" + tls.key_file + "': " + errstr(ec));
  }
  auto l = std::make_unique<TcpListener>(address, ctx);
  if (Status s = l->open(); !s) return s;
  *out = std::move(l);
  return Status::ok();
}

bool secrets_equal(std::string_view a, std::string_view b) {
  unsigned char da[SHA256_DIGEST_LENGTH], db[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(a.data()), a.size(), da);
  SHA256(reinterpret_cast<const unsigned char*>(b.data()), b.size(), db);
  return CRYPTO_memcmp(da, db, sizeof da) == 0;
}

Status adopt_stream(int fd, std::string peer, std::unique_ptr<ByteStream>* out) {
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  int type = 0;
  socklen_t type_len = sizeof type;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0 ||
      ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_len) != 0 || type != SOCK_STREAM) {
    ::close(fd);
    return Status::invalid_argument("adopting a stream: descriptor " + std::to_string(fd) +
                                    " is not a connected stream socket");
  }
  auto io = std::make_unique<asio::io_context>();
  asio::error_code ec;
  if (local.ss_family == AF_UNIX) {
    unix_socket::socket s(*io);
    s.assign(unix_socket(), fd, ec);
    if (ec) {
      ::close(fd);
      return Status::failed("adopting a unix: stream: " + errstr(ec));
    }
    auto stream = std::make_unique<SocketStream<unix_socket::socket>>(std::move(io), std::move(s),
                                                                      std::move(peer));
    *out = std::move(stream);
    return Status::ok();
  }
  if (local.ss_family == AF_INET || local.ss_family == AF_INET6) {
    tcp::socket s(*io);
    s.assign(local.ss_family == AF_INET ? tcp::v4() : tcp::v6(), fd, ec);
    if (ec) {
      ::close(fd);
      return Status::failed("adopting a tcp: stream: " + errstr(ec));
    }
    *out =
        std::make_unique<SocketStream<tcp::socket>>(std::move(io), std::move(s), std::move(peer));
    return Status::ok();
  }
  ::close(fd);
  return Status::invalid_argument("adopting a stream: descriptor " + std::to_string(fd) +
                                  " is neither a unix: nor a tcp: socket");
}

StreamPair make_stream_pair() {
  auto io_a = std::make_unique<asio::io_context>();
  auto io_b = std::make_unique<asio::io_context>();
  unix_socket::socket a(*io_a), b(*io_b);
  asio::local::connect_pair(a, b);
  StreamPair p;
  p.a =
      std::make_unique<SocketStream<unix_socket::socket>>(std::move(io_a), std::move(a), "pair:a");
  p.b =
      std::make_unique<SocketStream<unix_socket::socket>>(std::move(io_b), std::move(b), "pair:b");
  return p;
}

}  // namespace cuwire
