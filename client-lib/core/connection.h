// The client's connection to gpu-server: one ordered lane that every app thread shares, so the
// server sees calls in an order consistent with what the app observed (design decision 5). A
// relay's sessions each have a session connection of their own (Connection::make_session).
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

#include "client-lib/core/client_call.h"
#include "protocol/address.h"
#include "protocol/byte_stream.h"
#include "protocol/frame.h"
#include "protocol/shm_lane.h"

namespace cuwire::client {

// Fire-and-forget calls are batched (see Connection): they wait in the connection's buffer at
// most this long before they are written, unless a call that needs an answer, or a full buffer,
// sends them sooner. CUWIRE_BATCH_US overrides it (0: every call is written at once).
inline constexpr std::chrono::microseconds kDefaultBatchDelay{50};
// A call waiting for its reply polls the socket this long before it sleeps (an adaptive bound:
// protocol/byte_stream.h, set_read_spin). CUWIRE_SPIN_US overrides it (0: never poll).
inline constexpr std::chrono::microseconds kDefaultReplySpin{50};

struct ClientConfig {
  std::string server;   // CUWIRE_SERVER: one address, or several separated by commas
  std::string token;    // token_from_environment()
  std::string ca_file;  // CUWIRE_CA
  // CUWIRE_TIMEOUT: how long the server may stay silent before the client checks on it; zero:
  // never check. See Connection for what it means exactly.
  std::chrono::milliseconds timeout{kDefaultTimeout};

  static constexpr std::chrono::milliseconds kDefaultTimeout{60'000};
  // Connecting and the handshake never take longer than this, nor than `timeout`.
  static constexpr std::chrono::milliseconds kMaxConnectTime{15'000};
  std::chrono::milliseconds connect_timeout() const;
  std::chrono::microseconds batch_delay{kDefaultBatchDelay};  // CUWIRE_BATCH_US
  std::chrono::microseconds reply_spin{kDefaultReplySpin};    // CUWIRE_SPIN_US
  // Over a Unix socket, offer the server a shared-memory lane for large copies' bytes
  // (protocol/shm_lane.h); CUWIRE_SHM_LANE=0 turns it off.
  bool shm_lane = true;
};

// Reads CUWIRE_SERVER (default unix:/tmp/cuwire.sock; several addresses separated by commas
// make the client choose among them), the token (token_from_environment, token.h), CUWIRE_CA,
// CUWIRE_TIMEOUT (seconds, fractions allowed; default 60; 0: no limit).
ClientConfig config_from_environment();

// Every call waits for its answer, fire-and-forget ones too, so that each error is the caller's
// (cuwire_client_answer_every_call: for a relay that serves many sessions over one connection,
// where a deferred error would otherwise reach whichever session synchronises next; a relay
// with session connections leaves it off).
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
//
// Batching. A fire-and-forget call (a launch, an async copy or memset, an event record) is
// encoded straight into the connection's send buffer: no system call, no allocation, and the
// buffer's lock is never held across I/O. The buffer goes out in one write when a call that
// needs an answer follows (its frame rides at the buffer's end, so order is the app's), when it
// fills, or at the latest batch_delay after its first call, written by the connection's flusher
// thread, which sleeps while the buffer is empty: an idle client costs nothing.
// The host-call thread (host_calls.cc) marks itself: calls it makes answer
// CUDA_ERROR_NOT_PERMITTED (client_call.h: on_host_call_thread).
void mark_host_call_thread();

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // The calling thread's connection: the session connection bound to it (bind), else the
  // process-wide one, connecting on first use.
  static Connection& get();

  // Session connections, for a relay (design decision 13): each of the relay's sessions gets
  // an upstream session of its own, so the upstream keeps them apart as it keeps any clients
  // apart. A session connection connects on its first call, as the process-wide one does, and
  // serves the calls of the threads it is bound to. The library's tables stay process-wide:
  // the upstream names every object by a device address or an id unique in its process.
  static std::shared_ptr<Connection> make_session();
  // Binds `c` to the calling thread (null: back to the process-wide connection).
  static void bind(Connection* c);
  // Ends a session connection: its upstream session ends, its threads return. No call of it
  // may be under way, and none may follow.
  void close();
  bool is_session() const { return session_; }
  // Whether the server this connection was on answers a fresh connection (within the connect
  // timeout): after a loss, tells a server that is gone from one that ended only this session.
  bool server_still_answers();
  // State that goes with the connection's session (host_calls.cc), made on first use.
  template <typename T>
  std::shared_ptr<T> session_state() {
    std::lock_guard lock(state_mu_);
    if (!session_state_) session_state_ = std::make_shared<T>();
    return std::static_pointer_cast<T>(session_state_);
  }

  // CUDA_SUCCESS once connected; otherwise the error every call returns.
  CUresult ensure_connected();

  CUresult round_trip(const ArgWriter& w, OutReader* out);
  CUresult send_async(const ArgWriter& w);

  const std::string& backend() const { return backend_; }

  // The session's host-call connection (server/calls/host_calls.h), freshly opened to the server
  // this connection's session is on; *generation: that session's (see generation()).
  // CUDA_ERROR_NOT_SUPPORTED when the server takes none (it predates them, or is an in-process
  // test server) or refused this one (said on stderr once): the caller then runs host
  // functions itself.
  CUresult open_host_calls(std::unique_ptr<ByteStream>* out, uint64_t* generation);
  // Counts the sessions this process opened: a host-call connection of an older one is stale.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

  // Without a lock, for a relay checking on its upstream: CUDA_SUCCESS while connected or not
  // yet tried, else the error every call returns (the connection failed or was lost).
  CUresult status() const { return state_.load(std::memory_order_acquire); }
  // Forgets a failed or lost connection, so the next call connects afresh (cuwire_client_reset).
  // Calls of other threads must not be under way.
  void reset();

  // Replies of calls the manifest marks cached (ArgWriter::call_cached), this connection's own:
  // what a session was told (a device's resources naming objects of that session, a device's
  // figures where the session's devices are ordered its own first) is not another session's.
  struct ReplyCache;
  ReplyCache& reply_cache() { return *replies_; }

 private:
  Connection();
  // CUWIRE_SERVER names one server or several (a,b,c): with several, each is asked for its
  // room for this client's tenant first, and the session opens on the best by the policy the
  // servers report (connection.cc: rank_by_room).
  CUresult connect_locked();
  // A frame of `w` (header, message, and bulk bytes up to kInlineBulk copied) appended to the
  // send buffer under out_mu_; false when it does not fit in the buffer's free space.
  bool append_locked(const ArgWriter& w, uint16_t flags, uint64_t* seq, bool copy_bulk);
  // Writes out the send buffer, then (bulk of the last frame) `tail`; io_mu_ held.
  CUresult flush_locked(std::span<const std::span<const uint8_t>> tail = {});
  // Puts `w` on the wire behind everything buffered; io_mu_ held. With `reply`, the caller then
  // reads its reply; *seq is its sequence number.
  CUresult send_now_locked(const ArgWriter& w, uint16_t flags, uint64_t* seq);
  // The frame of `w` behind everything buffered, its bulk copied into the buffer (copy_bulk),
  // written after it, or (kFlagBulkInLane) left to the caller to put in the lane.
  CUresult send_frame_locked(const ArgWriter& w, uint16_t flags, uint64_t* seq, bool copy_bulk);
  void run_flusher();
  void start_flusher_locked();
  // A session's handshake with the server `text` names; false, with *why (one sentence naming
  // the server), when there is none.
  bool open_session(const std::string& text, const Address& addr, std::string* why);
  CUresult lost_locked(const std::string& why);
  // After a failed write: the server's parting words, if it said why it closed (kGoingAway)
  // before; else `why`.
  std::string farewell_locked(const std::string& why);
  // Closes the session's stream and drops the calls still buffered (reset, lost_locked).
  void drop_stream_locked();

  // The watchdog (see the class comment): watch() before a frame goes out, unwatch() once the
  // call is over; unwatch() is true when the watchdog declared the server gone, which it does
  // by shutting the stream down (waking the blocked read or write).
  void watch(ByteStream* stream);
  bool unwatch();
  void run_watchdog();
  // True when a fresh connection's handshake with `server` is answered within `timeout`.
  bool server_answers(const Address& server, std::chrono::milliseconds timeout);
  std::string timed_out_text() const;

  bool session_ = false;  // made by make_session
  std::shared_ptr<ReplyCache> replies_;
  std::mutex state_mu_;
  std::shared_ptr<void> session_state_;  // guarded by state_mu_
  // A closed session connection's threads return; they hold it until then.
  bool closing_ = false;                     // guarded by out_mu_ and wd_mu_ (set under both)
  std::shared_ptr<Connection> keep_alive();  // null for the process-wide connection

  // Lock order: io_mu_ before out_mu_ before wd_mu_. io_mu_ is held across I/O (a round trip
  // holds it until its reply is read); out_mu_ never is.
  std::mutex io_mu_;
  std::unique_ptr<ByteStream> stream_;   // guarded by io_mu_
  std::unique_ptr<FrameReader> reader_;  // guarded by io_mu_: replies, from stream_
  std::unique_ptr<ShmLane> lane_;  // guarded by io_mu_: the data lane, when the server took it
  bool tried_ = false;             // guarded by io_mu_
  CUresult failure_ =
      CUDA_SUCCESS;  // guarded by io_mu_: sticky once connecting failed or the link broke
  std::atomic<CUresult> state_{CUDA_SUCCESS};  // failure_ once the connection failed, for status()
  std::atomic<bool> connected_{false};  // stream_ is set: calls may be buffered without io_mu_
  std::string address_;                 // guarded by io_mu_: the server connected to, for messages
  std::string backend_;
  uint64_t session_id_ = 0;    // guarded by io_mu_: the server's id of the session
  std::string host_call_key_;  // guarded by io_mu_: from the Welcome; empty: none
  std::atomic<uint64_t> generation_{0};
  std::vector<uint8_t> msg_;  // guarded by io_mu_: scratch for Hello and oversized calls
  Frame reply_;               // guarded by io_mu_
  FrameLimits limits_;
  ClientConfig config_;  // set once by the first connect_locked, then read-only

  // The send buffer (see Batching). Two buffers: calls are appended to out_ while sending_ is
  // being written.
  static constexpr size_t kBatchBytes = 256 << 10;
  // An async call's bulk bytes up to this are copied into the buffer; larger ones are written
  // from the app's memory at once, behind the buffer.
  static constexpr size_t kInlineBulk = 64 << 10;
  std::mutex out_mu_;
  std::condition_variable out_cv_;  // the flusher waits on it for a first call
  std::unique_ptr<uint8_t[]> out_;  // guarded by out_mu_
  size_t out_size_ = 0;             // guarded by out_mu_
  uint64_t next_seq_ = 1;           // guarded by out_mu_
  std::chrono::steady_clock::time_point first_buffered_;  // guarded by out_mu_
  bool flusher_started_ = false;                          // guarded by out_mu_
  bool flusher_waiting_ = false;        // guarded by out_mu_: asleep until a first call
  std::unique_ptr<uint8_t[]> sending_;  // guarded by io_mu_

  // Lock order: io_mu_ before wd_mu_; the watchdog thread takes wd_mu_ alone.
  std::mutex wd_mu_;
  std::condition_variable wd_cv_;
  bool wd_started_ = false;                         // guarded by wd_mu_
  ByteStream* watched_ = nullptr;                   // guarded by wd_mu_: the stream in use
  uint64_t watch_count_ = 0;                        // guarded by wd_mu_: which call is watched
  std::chrono::steady_clock::time_point deadline_;  // guarded by wd_mu_
  bool fired_ = false;                              // guarded by wd_mu_
  Address live_server_;                             // guarded by wd_mu_: the one connected to
};

}  // namespace cuwire::client
