// The client's one connection to gpu-server: one ordered lane that every app thread shares, so
// the server sees calls in an order consistent with what the app observed (design decision 5).
//
// Thread-safety: all public functions are safe from any thread; one call is on the wire at a
// time (a round trip holds the lane until its reply arrives).
#pragma once

#include <cuda.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "address.h"
#include "client_call.h"
#include "frame.h"
#include "stream.h"

namespace cuwire::client {

struct ClientConfig {
  std::string server;  // CUWIRE_SERVER: one address, or several separated by commas
  std::string token;   // CUWIRE_TOKEN
  std::string ca_file; // CUWIRE_CA
  // CUWIRE_TIMEOUT: how long the server may stay silent before the client checks on it; zero:
  // never check. See Connection for what it means exactly.
  std::chrono::milliseconds timeout{kDefaultTimeout};

  static constexpr std::chrono::milliseconds kDefaultTimeout{60'000};
  // Connecting and the handshake never take longer than this, nor than `timeout`.
  static constexpr std::chrono::milliseconds kMaxConnectTime{15'000};
  std::chrono::milliseconds connect_timeout() const;
};

// Reads CUWIRE_SERVER (default unix:/tmp/cuwire.sock; several addresses separated by commas
// make the client choose among them), CUWIRE_TOKEN, CUWIRE_CA, CUWIRE_TIMEOUT
// (seconds, fractions allowed; default 60; 0: no limit).
ClientConfig config_from_environment();

// Every call waits for its answer, fire-and-forget ones too, so that each error is the caller's
// (cuwire_client_answer_every_call: a relay serves many sessions over this one connection, and
// a deferred error would otherwise reach whichever session synchronises next).
void set_answer_every_call(bool on);

// Timeouts. A call's reply may legitimately take minutes (a synchronize behind a long
// kernel), so a server is not declared gone for silence alone. When a call has waited
// CUWIRE_TIMEOUT for its reply (counting the time its frame takes to write), the client opens
// a fresh connection and handshakes: a server that answers is alive and busy, and the call
// waits on (checked again every CUWIRE_TIMEOUT); one that does not answer within
// CUWIRE_TIMEOUT either (stopped, hung, its host gone) is declared lost. The call then returns
// CUDA_ERROR_DEVICE_UNAVAILABLE, with one stderr line naming the server, as when the server
// closes the connection. So a dead server costs a waiting call about twice CUWIRE_TIMEOUT at
// most, and a live one is never cut off. Connecting is bounded on its own
// (ClientConfig::connect_timeout).
class Connection {
 public:
  // The process-wide connection, connecting on first use. Never null.
  static Connection& get();

  // CUDA_SUCCESS once connected; otherwise the error every call returns.
  CUresult ensure_connected();

  CUresult round_trip(const ArgWriter& w, OutReader* out);
  CUresult send_async(const ArgWriter& w);

  const std::string& backend() const { return backend_; }

  // Without a lock, for a relay checking on its upstream: CUDA_SUCCESS while connected or not
  // yet tried, else the error every call returns (the connection failed or was lost).
  CUresult status() const { return state_.load(std::memory_order_acquire); }
  // Forgets a failed or lost connection, so the next call connects afresh (cuwire_client_reset).
  // Calls of other threads must not be under way.
  void reset();

 private:
  Connection() = default;
  // CUWIRE_SERVER names one server or several (a,b,c): with several, each is asked for its
  // room for this client's tenant first, and the session opens on the best by the policy the
  // servers report (connection.cc: rank_by_room).
  CUresult connect_locked();
  // A session's handshake with the server `text` names; false, with *why (one sentence naming
  // the server), when there is none.
  bool open_session(const std::string& text, const Address& addr, std::string* why);
  CUresult lost_locked(const std::string& why);
  CUresult send_locked(const ArgWriter& w, uint16_t flags, uint64_t* seq);

  // The watchdog (see the class comment): watch() before a frame goes out, unwatch() once the
  // call is over; unwatch() is true when the watchdog declared the server gone, which it does
  // by shutting the stream down (waking the blocked read or write).
  void watch(Stream* stream);
  bool unwatch();
  void run_watchdog();
  // True when a fresh connection's handshake with `server` is answered within the timeout.
  bool server_answers(const Address& server);
  std::string timed_out_text() const;

  std::mutex mu_;
  std::unique_ptr<Stream> stream_;   // guarded by mu_
  bool tried_ = false;               // guarded by mu_
  CUresult failure_ = CUDA_SUCCESS;  // guarded by mu_: sticky once connecting failed or the link broke
  std::atomic<CUresult> state_{CUDA_SUCCESS};  // failure_ once the connection failed, for status()
  uint64_t next_seq_ = 1;            // guarded by mu_
  std::string address_;              // guarded by mu_: the server connected to, for messages
  std::string backend_;
  std::vector<uint8_t> msg_;         // guarded by mu_: scratch for the encoded message
  Frame reply_;                      // guarded by mu_
  FrameLimits limits_;
  ClientConfig config_;              // set once by the first connect_locked, then read-only

  // Lock order: mu_ before wd_mu_; the watchdog thread takes wd_mu_ alone.
  std::mutex wd_mu_;
  std::condition_variable wd_cv_;
  bool wd_started_ = false;                         // guarded by wd_mu_
  Stream* watched_ = nullptr;                       // guarded by wd_mu_: the stream in use
  uint64_t watch_count_ = 0;                        // guarded by wd_mu_: which call is watched
  std::chrono::steady_clock::time_point deadline_;  // guarded by wd_mu_
  bool fired_ = false;                              // guarded by wd_mu_
  Address live_server_;                             // guarded by wd_mu_: the one connected to
};

}  // namespace cuwire::client
