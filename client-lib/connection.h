// The client's one connection to gpu-server: one ordered lane that every app thread shares, so
// the server sees calls in an order consistent with what the app observed (design decision 5).
//
// Thread-safety: all public functions are safe from any thread; one call is on the wire at a
// time (a round trip holds the lane until its reply arrives).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "client_call.h"
#include "frame.h"
#include "stream.h"

namespace cuwire::client {

struct ClientConfig {
  std::string server;  // CUWIRE_SERVER
  std::string token;   // CUWIRE_TOKEN
  std::string ca_file; // CUWIRE_CA
};

// Reads CUWIRE_SERVER (default unix:/tmp/cuwire.sock), CUWIRE_TOKEN, CUWIRE_CA.
ClientConfig config_from_environment();

class Connection {
 public:
  // The process-wide connection, connecting on first use. Never null.
  static Connection& get();

  // CUDA_SUCCESS once connected; otherwise the error every call returns.
  CUresult ensure_connected();

  CUresult round_trip(const ArgWriter& w, OutReader* out);
  CUresult send_async(const ArgWriter& w);

  const std::string& backend() const { return backend_; }

 private:
  Connection() = default;
  CUresult connect_locked();
  CUresult lost_locked(const std::string& why);
  CUresult send_locked(const ArgWriter& w, uint16_t flags, uint64_t* seq);

  std::mutex mu_;
  std::unique_ptr<Stream> stream_;   // guarded by mu_
  bool tried_ = false;               // guarded by mu_
  CUresult failure_ = CUDA_SUCCESS;  // guarded by mu_: sticky once connecting failed or the link broke
  uint64_t next_seq_ = 1;            // guarded by mu_
  std::string address_;
  std::string backend_;
  std::vector<uint8_t> msg_;         // guarded by mu_: scratch for the encoded message
  Frame reply_;                      // guarded by mu_
  FrameLimits limits_;
};

}  // namespace cuwire::client
