// Transports over Asio (standalone) and OpenSSL. All blocking: a server session and a client
// connection each own their thread of use, so synchronous operations are the simplest correct
// choice and cost no extra hops.

#include "transport.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <asio.hpp>
#include <asio/ssl.hpp>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <openssl/err.h>
#include <openssl/ssl.h>

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
// Plain sockets (Unix, TCP)

template <typename Socket>
class SocketStream final : public Stream {
 public:
  SocketStream(std::unique_ptr<asio::io_context> io, Socket socket, std::string peer)
      : io_(std::move(io)), socket_(std::move(socket)), peer_(std::move(peer)) {}

  Status read_exact(void* buf, size_t n) override {
    asio::error_code ec;
    size_t got = asio::read(socket_, asio::buffer(buf, n), ec);
    if (ec) return read_failure(peer_, got, n, ec);
    return Status::ok();
  }

  Status write_all(std::span<const std::span<const uint8_t>> pieces) override {
    asio::error_code ec;
    asio::write(socket_, to_buffers(pieces), ec);
    if (ec) return Status::disconnected(peer_ + ": write: " + errstr(ec));
    return Status::ok();
  }

  void close_write() override { ::shutdown(socket_.native_handle(), SHUT_WR); }

  void shutdown() override {
    // ::shutdown on the descriptor wakes a read blocked in another thread; Asio's own
    // shutdown is not safe to call concurrently with an operation.
    ::shutdown(socket_.native_handle(), SHUT_RDWR);
  }

  std::string peer() const override { return peer_; }

 private:
  std::unique_ptr<asio::io_context> io_;
  Socket socket_;
  std::string peer_;
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

class TlsStream final : public Stream {
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
    if (Status s = handshake(); !s) return s;
    asio::error_code ec;
    size_t got = asio::read(stream_, asio::buffer(buf, n), ec);
    if (ec) return read_failure(peer_, got, n, ec);
    return Status::ok();
  }

  Status write_all(std::span<const std::span<const uint8_t>> pieces) override {
    if (Status s = handshake(); !s) return s;
    asio::error_code ec;
    // OpenSSL writes one record per buffer; gathering small pieces first avoids tiny records.
    size_t total = 0;
    for (auto p : pieces) total += p.size();
    if (total <= 64 * 1024) {
      scratch_.clear();
      for (auto p : pieces) scratch_.insert(scratch_.end(), p.begin(), p.end());
      asio::write(stream_, asio::buffer(scratch_), ec);
    } else {
      asio::write(stream_, to_buffers(pieces), ec);
    }
    if (ec) return Status::disconnected(peer_ + ": write: " + errstr(ec));
    return Status::ok();
  }

  // Without close_notify: the peer sees a truncated TLS stream, which is what this is for.
  void close_write() override { ::shutdown(stream_.lowest_layer().native_handle(), SHUT_WR); }
  void shutdown() override { ::shutdown(stream_.lowest_layer().native_handle(), SHUT_RDWR); }
  std::string peer() const override { return peer_; }

 private:
  Status handshake() {
    if (handshake_done_) return handshake_status_;
    handshake_done_ = true;
    asio::error_code ec;
    stream_.handshake(server_side_ ? asio::ssl::stream_base::server
                                   : asio::ssl::stream_base::client,
                      ec);
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

class UnixListener final : public Listener {
 public:
  UnixListener(Address a) : address_(std::move(a)), acceptor_(io_) {}

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
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Status::failed("cannot listen on " + address_.to_string() + ": " + errstr(ec));
    if (::lstat(address_.path.c_str(), &st) == 0) {
      bound_ = {st.st_dev, st.st_ino};
      have_bound_ = true;
    }
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

  void run(AcceptFn on_accept) override {
    while (!stopped_) {
      auto io = std::make_unique<asio::io_context>();
      unix_socket::socket s(*io);
      asio::error_code ec;
      acceptor_.accept(s, ec);
      if (stopped_) break;
      if (ec) continue;  // EMFILE, ECONNABORTED...: the listener stays up
      on_accept(std::make_unique<SocketStream<unix_socket::socket>>(
          std::move(io), std::move(s), address_.to_string()));
    }
  }

  void stop() override {
    stopped_ = true;
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);  // wakes accept()
  }

  Address local_address() const override { return address_; }

 private:
  Address address_;
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

  void run(AcceptFn on_accept) override {
    const char* scheme = tls_ ? "tls" : "tcp";
    while (!stopped_) {
      auto io = std::make_unique<asio::io_context>();
      tcp::socket s(*io);
      asio::error_code ec;
      acceptor_.accept(s, ec);
      if (stopped_) break;
      if (ec) continue;
      set_nodelay(s);
      asio::error_code pec;
      std::string peer = tcp_peer_name(scheme, s.remote_endpoint(pec));
      if (tls_) {
        on_accept(std::make_unique<TlsStream>(std::move(io), tls_, std::move(s), peer, true));
      } else {
        on_accept(std::make_unique<SocketStream<tcp::socket>>(std::move(io), std::move(s), peer));
      }
    }
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
                      std::unique_ptr<Stream>* out) {
  auto io = std::make_unique<asio::io_context>();
  asio::error_code ec;
  if (address.kind == Address::Kind::kUnix) {
    unix_socket::socket s(*io);
    s.connect(unix_socket::endpoint(address.path), ec);
    if (ec) return Status::disconnected("cannot connect to " + address.to_string() + ": " + errstr(ec));
    *out = std::make_unique<SocketStream<unix_socket::socket>>(std::move(io), std::move(s),
                                                               address.to_string());
    return Status::ok();
  }
  tcp::resolver::results_type results;
  if (Status s = resolve(address, &results, *io); !s) return s;
  tcp::socket s(*io);
  asio::connect(s, results, ec);
  if (ec) return Status::disconnected("cannot connect to " + address.to_string() + ": " + errstr(ec));
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
  auto stream = std::make_unique<TlsStream>(std::move(io), ctx, std::move(s), address.to_string(),
                                            false);
  if (Status st = stream->client_handshake(address.host); !st) return st;
  *out = std::move(stream);
  return Status::ok();
}

Status listen_on(const Address& address, const TlsServerOptions& tls,
                 std::unique_ptr<Listener>* out) {
  if (address.kind == Address::Kind::kUnix) {
    auto l = std::make_unique<UnixListener>(address);
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
    if (ec) return Status::failed("cannot load TLS certificate '" + tls.cert_file + "': " + errstr(ec));
    ctx->use_private_key_file(tls.key_file, asio::ssl::context::pem, ec);
    if (ec) return Status::failed("cannot load TLS key '" + tls.key_file + "': " + errstr(ec));
  }
  auto l = std::make_unique<TcpListener>(address, ctx);
  if (Status s = l->open(); !s) return s;
  *out = std::move(l);
  return Status::ok();
}

StreamPair make_stream_pair() {
  auto io_a = std::make_unique<asio::io_context>();
  auto io_b = std::make_unique<asio::io_context>();
  unix_socket::socket a(*io_a), b(*io_b);
  asio::local::connect_pair(a, b);
  StreamPair p;
  p.a = std::make_unique<SocketStream<unix_socket::socket>>(std::move(io_a), std::move(a), "pair:a");
  p.b = std::make_unique<SocketStream<unix_socket::socket>>(std::move(io_b), std::move(b), "pair:b");
  return p;
}

}  // namespace cuwire
