// Session: one client connection, from Hello to disconnect. Runs on its own thread; calls are
// executed in the order they arrive, which is the order the client's lane sent them (design
// decision 5).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "driver_api.h"
#include "frame.h"
#include "messages.h"
#include "stream.h"

namespace cuwire::server {

struct SessionConfig {
  FrameLimits limits;
  std::string token;         // empty: no token needed
  std::string server_name;
  std::string backend_name;  // reported in Welcome
};

class Session {
 public:
  Session(uint64_t id, std::unique_ptr<Stream> stream, const SessionConfig& config,
          DriverApi& backend);
  ~Session();

  // Handshake, then serve calls until the peer leaves or breaks the protocol. Everything the
  // session held is reclaimed before this returns.
  void run();
  // Makes run() return soon; safe from any thread.
  void stop();

  uint64_t id() const { return id_; }
  const std::string& peer() const { return peer_; }

 private:
  bool handshake();
  void reject(ErrorKind kind, const std::string& why);

  uint64_t id_;
  std::unique_ptr<Stream> stream_;
  const SessionConfig& config_;
  DriverApi& backend_;
  std::string peer_;
  std::string client_;  // "name[pid]" once known
  uint64_t current_context_ = 0;  // context id current on this session's thread
};

}  // namespace cuwire::server
