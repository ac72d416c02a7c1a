// Session: one client connection, from Hello to disconnect. Runs on its own thread; calls are
// executed in the order they arrive, which is the order the client's lane sent them (design
// decision 5).
//
// Each session is a boundary (design decision 11): an exception out of a call becomes that
// call's error, a broken or hostile peer ends its own session, and nothing a client does ends
// the server.
//
// Thread-safety: run() on the session's own thread; stop() and drain() from any thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "protocol/byte_stream.h"
#include "protocol/frame.h"
#include "protocol/messages.h"
#include "protocol/shm_lane.h"
#include "server/backend/backend.h"
#include "server/session/dispatch.h"
#include "server/session/log_rate_limit.h"
#include "server/tenancy/placement.h"

namespace cuwire::server {

class StdoutCapture;
class Tenant;
class TenantRegistry;
using TenantRef = std::shared_ptr<Tenant>;  // as tenants.h says
class ComputeScheduler;
class SmPartitions;
class UpstreamLink;
class SessionStats;
class HostCallChannel;
class HostCallRegistry;

// Isolation by process (design decision 14): a session the front admitted, served by a worker
// process on the client's own socket.
class RemoteSession {
 public:
  virtual ~RemoteSession() = default;
  // Blocks until the worker says the session ended (empty), or the worker is gone (why: which
  // worker, and how it ended) or was let go (stop()).
  virtual std::string wait() = 0;
  // As Session::drain and Session::evict, in the worker.
  virtual void drain() = 0;
  virtual void evict() = 0;
  // wait() returns now (the server stops).
  virtual void abandon() = 0;
  virtual int worker_pid() const = 0;
};

// Hands admitted sessions to worker processes (server/worker/worker_pool.h).
class SessionHandoff {
 public:
  virtual ~SessionHandoff() = default;
  struct Request {
    uint64_t id = 0;
    uint64_t sequence = 0;  // the Hello's, which the worker's Welcome answers
    Tenant* tenant = nullptr;
    std::string client;  // "name[pid]", printable
    uint32_t pid = 0;
    std::string peer;
    int gpu = -1;
    std::vector<CUdevice> devices;
    int socket_fd = -1;  // the client's connection (passed, not given up: the caller keeps it)
    int lane_fd = -1;    // its data lane's memfd; -1: none
    int stats_fd = -1;   // its figures' memfd (SessionStats, shared; passed); -1: none
  };
  // The session is the worker's from now on; null, with *why, when no worker could take it.
  virtual std::unique_ptr<RemoteSession> hand_over(const Request& r, std::string* why) = 0;
  // A host-call connection (cuwire.capnp: Hello.hostCalls) of session `session` of `tenant`,
  // authenticated here: passed to the worker that serves that session, which checks the key
  // and answers the Hello of `sequence`. False, with *why, when no worker of the tenant serves
  // such a session.
  struct HostCalls {
    uint64_t id = 0;  // the connection's
    uint64_t sequence = 0;
    Tenant* tenant = nullptr;
    uint64_t session = 0;
    std::string key;
    std::string client, peer;
    int socket_fd = -1;
  };
  virtual bool hand_over_host_calls(const HostCalls& h, std::string* why) = 0;
};

// Who asks on a control connection (cuwire.capnp: Hello.control; server/ops/admin.h).
struct ControlCaller {
  bool admin = false;        // presented the admin token
  Tenant* tenant = nullptr;  // the tenant whose token it presented; null for the admin
  std::string who;           // "peer client[pid]" for log lines
  // Logs a line the caller can trigger at will, within the connection's rate limit.
  std::function<void(const std::string&)> warn;
};
using ControlFn = std::function<ControlReplyMsg(const ControlCaller&, const ControlMsg&)>;

struct SessionConfig {
  FrameLimits limits;
  std::string token;  // empty: no token needed
  std::string server_name;
  std::string backend_name;  // reported in Welcome
  // From accept to Welcome, a TLS handshake included; a connection that has not said Hello by
  // then is closed. Zero: no bound (not for a shared server).
  std::chrono::milliseconds handshake_timeout{10'000};
  // An authenticated session that moves no byte for this long while the server waits on it
  // (for its next call, or for it to take a reply) is closed with kGoingAway; time spent
  // executing its calls does not count. Zero: never.
  std::chrono::milliseconds idle_timeout{0};
  // How long a session polls its connection for the next call before it sleeps (an adaptive
  // bound, protocol/byte_stream.h: set_read_spin); zero: never.
  std::chrono::microseconds read_spin{kDefaultReadSpin};
  static constexpr std::chrono::microseconds kDefaultReadSpin{50};
  // Whether a client on this host may bring a shared-memory data lane (shm_lane.h).
  bool shm_lane = true;
  // Handles one session may hold (contexts, streams, all kinds together).
  HandleLimits handles;
  // Where device printf output the backend prints on stdout is collected for the client
  // (stdout_capture.h); null: left on the server's stdout, or the backend delivers it itself.
  StdoutCapture* device_printf = nullptr;
  // A relay's link to its upstream server (upstream.h); null for any other backend.
  UpstreamLink* upstream = nullptr;
  // Who may connect and what each tenant may use (tenants.h); null: anyone, uncounted (tests).
  TenantRegistry* tenants = nullptr;
  // The GPUs sessions are placed on (placement.h); null: every session sees every device.
  GpuPool* gpus = nullptr;
  // The GPUs' compute schedulers (compute_scheduler.h); null or empty: no compute caps.
  std::map<CUdevice, std::unique_ptr<ComputeScheduler>>* compute = nullptr;
  // Tenants' SM partitions (sm_partition.h); null: every context uses every SM.
  const SmPartitions* partitions = nullptr;
  // SHA-256 of the admin token (config: [server] admin_token_file); none: no admin.
  std::optional<std::array<uint8_t, 32>> admin_token_sha256;
  // Answers control requests (server/ops/admin.h); null: control connections are refused.
  ControlFn control;
  // Sessions' host-call channels (host_calls.h); null: no host-call connections, and clients
  // run host functions themselves, synchronously.
  HostCallRegistry* host_calls = nullptr;
  // Device memory charged to the tenant for each context a session makes (what a context spends
  // of its own on the backend: ServerConfig::context_memory); 0: nothing.
  uint64_t context_memory = 0;
  // Isolation by process (design decision 14): admitted sessions go to workers; null: served
  // in this process.
  SessionHandoff* handoff = nullptr;
};

// A control connection left silent this long is closed (or after the idle timeout, if less).
inline constexpr std::chrono::milliseconds kControlIdleTimeout{60'000};
// Control connections open at once: the admin's, each tenant's, and all tenants' together.
inline constexpr int kMaxAdminControls = 8;
inline constexpr int kMaxControlsPerTenant = 8;
inline constexpr int kMaxTenantControls = 64;
// A control request's frame: a command and a small JSON object, no bulk bytes.
inline constexpr FrameLimits kControlFrameLimits{64 << 10, 0};
inline constexpr size_t kMaxControlArgs = 4096;

// The client's name from Hello as it may appear in a log line: at most kMaxClientName bytes,
// bytes outside printable ASCII (and the backslash) as \xNN.
inline constexpr size_t kMaxClientName = 64;
std::string printable_client_name(const std::string& raw);

// Replies and frames over this many bytes give their memory back after the call, so a session
// that once moved 512 MiB does not keep 512 MiB resident while it idles.
inline constexpr size_t kRetainedBufferBytes = 1 << 20;

// Gives a buffer's memory back when it grew past what a session keeps between calls.
template <typename V>
void release_if_large(V* v) {
  if (v->capacity() * sizeof(typename V::value_type) > kRetainedBufferBytes) V().swap(*v);
}

class Session {
 public:
  // What a connection asks to become with its Hello.
  enum class Admission { kSession, kControl, kHostCalls, kProbe };
  // Asked once the client has proven itself (protocol, manifest, token; for a host-call
  // connection, its session's key too), before Welcome. An answer other than empty refuses the
  // connection with that reason as kOverloaded (a probe, answered and closed at once, is not
  // refused). Called on the session's thread. For a control connection (Hello.control)
  // `control` is its caller; null otherwise.
  using AdmitFn = std::function<std::string(Admission kind, const ControlCaller* control)>;

  Session(uint64_t id, std::unique_ptr<ByteStream> stream, const SessionConfig& config,
          Backend& backend, AdmitFn admit = nullptr);
  ~Session();

  // Handshake, then serve calls until the peer leaves or breaks the protocol. Everything the
  // session held is reclaimed before this returns.
  void run();

  // In a worker process (design decision 14): a session the front admitted, on the client's
  // socket. Sends the Welcome, then serves calls as run() does.
  struct Handed {
    uint64_t sequence = 0;
    Tenant* tenant = nullptr;
    std::string client;
    int gpu = -1;
    std::vector<CUdevice> devices;
    int lane_fd = -1;   // taken
    int stats_fd = -1;  // the front's block for the session's figures; taken
  };
  void run_handed(Handed h);
  // In a worker: a host-call connection the front authenticated, for session `session`.
  void run_handed_host_calls(uint64_t session, const std::string& key, uint64_t sequence,
                             Tenant* tenant, std::string client);
  // Makes run() return soon; safe from any thread.
  void stop();
  // Asks the session to end for a server shutdown: a call being executed finishes and its
  // reply is sent, then the client is told kGoingAway and the connection closes. Safe from
  // any thread.
  void drain();

  // Ends the session for the admin (cuwire evict): a call being executed finishes, then the
  // client is told kGoingAway, the connection closes and everything it held is reclaimed.
  // Safe from any thread.
  void evict();

  // What the admin API lists of a session; none before its Welcome, or for a control
  // connection. Safe from any thread.
  struct Info {
    uint64_t id = 0;
    std::string tenant;  // empty on an open server
    std::string client;  // program name, printable
    uint32_t pid = 0;    // the client's, on its host
    std::string peer;
    int gpu = -1;  // the backend device it was placed on; -1: none
    std::chrono::system_clock::time_point since;
    std::shared_ptr<const SessionStats> stats;  // null without a tenant
    int worker = 0;  // the worker process serving it (design decision 14); 0: this one
  };
  std::optional<Info> info() const;

  uint64_t id() const { return id_; }
  const std::string& peer() const { return peer_; }
  // Bytes of buffers the session keeps between calls (frame and reply storage).
  size_t retained_buffer_bytes() const { return retained_bytes_.load(std::memory_order_relaxed); }

 private:
  bool handshake();
  // The Hello's token: on a server with tenants, *tenant is the one it names (refused with
  // `unknown` when none does); on an open server, the server's token if it has one, and the
  // default tenant. False after telling the peer why.
  bool authenticate(const HelloMsg& hello, const char* unknown, Tenant** tenant);
  // After a control Hello passed the protocol checks: who it is, by its token, and the
  // Welcome; false (after telling the peer why) when the token is no one's.
  bool accept_control(const HelloMsg& hello, uint64_t sequence);
  // Answers control requests until the peer leaves.
  void serve_control();
  // After a host-call Hello (cuwire.capnp: Hello.hostCalls) passed the protocol checks: the
  // session it names, by its id, key and tenant, and the Welcome; false (after telling the
  // peer why) when there is none.
  bool accept_host_calls(const HelloMsg& hello, uint64_t sequence);
  // The channel of `session` whose key this is, attached to this connection, and the Welcome
  // to the Hello of `sequence`; false (after telling the peer why) when there is none.
  bool attach_host_calls(uint64_t session, const std::string& key, Tenant* tenant,
                         uint64_t sequence);
  // Takes the client's HostCallDone frames until the peer leaves or its session ends.
  void serve_host_calls();
  // The session's channel closes (its end, or a drain): host functions waiting on it return.
  void close_host_calls();
  // The answer to a probe Hello (cuwire.capnp): the room placement has for the tenant, in a
  // Welcome, then close. Nothing is counted, placed or admitted.
  void answer_probe(uint64_t sequence);
  // Welcome (server name and backend filled in here) in answer to the Hello of `sequence`.
  bool send_welcome(WelcomeMsg* w, uint64_t sequence);
  // The session's Welcome (its id, its lane, its host-call key), the idle bound from then on.
  bool welcome(uint64_t sequence);
  // What the admin's list shows of the session as it starts.
  Info new_info(const HelloMsg& hello) const;
  // ", tenant NAME, GPU N" for the log's "connected" line (each where it says something).
  std::string placed() const;
  void serve();
  // The front's side of a session a worker serves: hands it over, then waits for its end.
  bool hand_over(const HelloMsg& hello, uint64_t sequence);
  // The socket a worker is to serve this connection over: the connection's own, or, for a
  // stream that holds state of its own (TLS), one end of a new socket pair whose other end
  // (relay_fd_) the front relays the stream over; the caller closes that end once the worker
  // has its copy (relay_fd_ >= 0 says so). -1 when neither can be had.
  int socket_for_worker();
  // Relays this connection (TLS) over relay_fd_ to the worker holding the pair's other end,
  // until the worker closes its end or stop() shuts the pair down; then closes relay_fd_.
  void relay_to_worker();
  void end_relay();  // closes relay_fd_, if any
  void serve_remote();
  // The last word to a peer: an Error frame (sent within a short bound), then close.
  void farewell(ErrorKind kind, const std::string& why);
  // farewell() with a warning log line.
  void reject(ErrorKind kind, const std::string& why);
  void going_away();
  // While the server drains: going_away() and true, for the caller to end the session.
  bool leave_if_draining();
  // A warning the peer can trigger at will: logged within this session's rate limit.
  void warn_limited(const std::string& line);

  // The tenant its token named, held while the connection lasts (a tenant removed at run time
  // lives on until the last of its connections is gone). First: the members after it may
  // still count into it as they go.
  TenantRef tenant_ref_;
  uint64_t id_;
  std::unique_ptr<ByteStream> stream_;
  const SessionConfig& config_;
  Backend& backend_;
  AdmitFn admit_;
  std::string peer_;
  std::string client_;                   // "name[pid]" once known, printable
  Tenant* tenant_ = nullptr;             // once the Hello's token named it
  bool counted_ = false;                 // counted in tenant_'s sessions
  std::unique_ptr<GpuPool::Lease> gpu_;  // the GPU it was placed on
  int gpu_device_ = -1;                  // its device (-1: none placed)
  std::vector<CUdevice> devices_;        // the devices it sees, its own first; empty: all
  int lane_fd_ = -1;                     // a lane's memfd for the worker to map (handoff)
  // Figures another process records: in the front, those of the session a worker serves (in
  // tenant_'s until it ends); in a worker, the front's block it records into.
  std::shared_ptr<SessionStats> shared_stats_;
  std::unique_ptr<RemoteSession> remote_;  // guarded by info_mu_; a worker serves it
  std::atomic<bool> draining_{false};
  std::atomic<bool> evicted_{false};
  bool control_ = false;                      // a control connection (Hello.control)
  ControlCaller caller_;                      // a control connection's
  std::chrono::milliseconds stream_idle_{0};  // a control connection's idle bound
  mutable std::mutex info_mu_;
  std::optional<Info> info_;  // guarded by info_mu_
  std::atomic<size_t> retained_bytes_{0};
  LogRateLimit warnings_;
  // The client's shared-memory data lane, when it brought one and the server took it.
  std::unique_ptr<ShmLane> lane_;
  // A session's host-call channel (guarded by info_mu_: drain() closes it from elsewhere); on
  // a host-call connection, the channel of the session it serves.
  std::shared_ptr<HostCallChannel> host_calls_;
  bool host_call_connection_ = false;
  bool handed_off_ = false;  // a connection the front passed to a worker: the worker's now
  // A TLS connection a worker serves: the front's end of the socket pair the front relays the
  // connection's bytes over (the worker has the other end); -1: none. Guarded by info_mu_
  // once the session has a worker (stop() shuts it down from another thread).
  int relay_fd_ = -1;
};

}  // namespace cuwire::server
