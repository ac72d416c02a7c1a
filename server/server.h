// Server: listeners, the backend, and the live sessions.
//
// Thread-safety: start() and stop() from the owning thread; each listener accepts on its own
// thread and each session runs on its own thread.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "address.h"
#include "backend.h"
#include "session.h"
#include "transport.h"

namespace cuwire::server {

struct ServerConfig {
  std::vector<Address> listen;
  TlsServerOptions tls;
  SessionConfig session;
  std::string backend = "auto";
  SimOptions sim;
  // Tests: serve from this backend instead of creating one (not owned; must outlive the
  // server). `backend` and `sim` are then ignored.
  DriverApi* backend_override = nullptr;
};

class Server {
 public:
  explicit Server(ServerConfig config);
  ~Server();

  // Creates the backend and binds every listener; nothing is served before this succeeds.
  Status start();
  // Closes the listeners, ends every session, waits for their threads.
  void stop();

  // Bound addresses, in --listen order (tcp port 0 resolved).
  std::vector<Address> addresses() const;
  const std::string& backend_name() const { return backend_.name; }
  size_t session_count() const;

 private:
  void on_accept(std::unique_ptr<Stream> stream);
  void reap_finished();

  ServerConfig config_;
  BackendChoice backend_;
  DriverApi* api_ = nullptr;  // backend_.api, or config_.backend_override
  std::vector<std::unique_ptr<Listener>> listeners_;
  std::vector<std::thread> listener_threads_;

  struct Live {
    std::unique_ptr<Session> session;
    std::thread thread;
  };
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Live> sessions_;  // guarded by mu_
  std::vector<uint64_t> finished_;               // guarded by mu_
  uint64_t next_session_id_ = 1;                 // guarded by mu_
  bool stopping_ = false;                        // guarded by mu_
};

}  // namespace cuwire::server
