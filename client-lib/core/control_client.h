// A control connection to gpu-server (cuwire.capnp: Hello.control): no session is made; each
// request is a command with JSON arguments and gets one JSON answer (server/ops/admin.h lists the
// commands). The cuwire CLI uses it for the admin API, libnvidia-ml.so.1 for its tenant's view.
//
// Thread-safety: one ControlClient per thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "protocol/byte_stream.h"
#include "protocol/status.h"

namespace cuwire::client {

struct ControlOptions {
  std::string server;   // one address (address.h); a comma-separated list: its first
  std::string token;    // the admin token, or a tenant's
  std::string ca_file;  // for tls: servers
  std::string client_name = "cuwire";
  // Bounds connecting, the handshake and each request.
  std::chrono::milliseconds timeout{10'000};
};

class ControlClient {
 public:
  // Connects and handshakes; a refusal (wrong token, another build) comes back as the
  // server's reason.
  static Status connect(const ControlOptions& options, std::unique_ptr<ControlClient>* out);
  ~ControlClient();

  // Sends `command` with `args_json` (an object, or empty) and waits for its answer: *body
  // gets the JSON object; a refusal or a failure is the Status, with the server's reason.
  // kDisconnected: the connection is over (gone, or the server let it go: idle, shutting
  // down), and a new ControlClient may be tried.
  Status request(const std::string& command, const std::string& args_json, std::string* body);

  const std::string& address() const { return address_; }
  const std::string& backend() const { return backend_; }

 private:
  ControlClient() = default;
  std::unique_ptr<ByteStream> stream_;
  std::chrono::milliseconds timeout_{0};
  uint64_t sequence_ = 1;
  std::string address_;
  std::string backend_;
};

}  // namespace cuwire::client
