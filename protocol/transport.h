// Transports: connecting to and listening on Addresses. Asio and OpenSSL stay inside
// transport.cc; callers see ByteStream.
//
// Thread-safety: a Listener's accept loop runs on its own thread; stop() may be called from
// any thread and makes run() return.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "protocol/address.h"
#include "protocol/byte_stream.h"
#include "protocol/status.h"

namespace cuwire {

struct TlsClientOptions {
  std::string ca_file;  // PEM bundle that must have signed the server's certificate
};

struct TlsServerOptions {
  std::string cert_file;  // PEM certificate chain
  std::string key_file;   // PEM private key
};

// Connects (and for TLS, handshakes and verifies the server's name against the CA).
Status connect_stream(const Address& address, const TlsClientOptions& tls,
                      std::unique_ptr<ByteStream>* out);

class Listener {
 public:
  // Called on the accept thread for each new connection. For TLS the handshake has not run
  // yet: it runs on the first read/write, so a slow peer never holds up accepting.
  using AcceptFn = std::function<void(std::unique_ptr<ByteStream>)>;
  // Called on the accept thread with one line when accepting starts failing (once per episode:
  // out of descriptors, the loop retries every 100 ms instead of spinning) and when it works
  // again.
  using ErrorFn = std::function<void(const std::string&)>;

  virtual ~Listener() = default;
  // Accepts until stop(); returns then.
  virtual void run(AcceptFn on_accept, ErrorFn on_error) = 0;
  void run(AcceptFn on_accept) { run(std::move(on_accept), nullptr); }
  virtual void stop() = 0;
  // The bound address; for tcp:HOST:0 it carries the port the OS chose.
  virtual Address local_address() const = 0;
};

// Who may connect to a Unix socket: its file's mode and group, set right after bind and
// before listen, so no connection comes before them.
struct UnixSocketAccess {
  int mode = -1;       // permission bits such as 0660; -1: as the umask leaves them
  int64_t group = -1;  // the socket file's group id; -1: the process's own
};

// Binds and listens. A Unix socket path is taken over only from a server that is gone (a
// socket nobody accepts on); a live server's socket or any other file there is an error. The
// listener removes its socket file when it goes, unless another server has bound the path since.
// `unix_access` applies to unix: addresses only.
Status listen_on(const Address& address, const TlsServerOptions& tls,
                 std::unique_ptr<Listener>* out, const UnixSocketAccess& unix_access = {});

// A stream over a connected unix: or tcp: socket `fd` that another process accepted and passed
// here (ByteStream::native_handle); it owns the descriptor from now on, closed on failure too.
// `peer` names the peer in log lines, as the accepting side named it.
Status adopt_stream(int fd, std::string peer, std::unique_ptr<ByteStream>* out);

// Compares two secrets (tokens) in a time that depends on neither their contents nor their
// lengths: SHA-256 digests of both, compared with CRYPTO_memcmp.
bool secrets_equal(std::string_view a, std::string_view b);

}  // namespace cuwire
