// Server: listeners, the backend, and the live sessions.
//
// Every connection runs on its own thread, from accept (handshake) to its end (session), so
// the threads are bounded by ServerLimits::max_connections. A connection over a limit gets a
// kOverloaded Error from one small refusal thread and is closed.
//
// Thread-safety: start(), stop() and drain() from the owning thread; each listener accepts on
// its own thread and each connection runs on its own thread. The queries are safe from any
// thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "protocol/address.h"
#include "protocol/transport.h"
#include "server/backend/backend.h"
#include "server/calls/host_calls.h"
#include "server/ops/metrics_http.h"
#include "server/session/session.h"
#include "server/tenancy/compute_scheduler.h"
#include "server/tenancy/placement.h"
#include "server/tenancy/sm_partition.h"
#include "server/tenancy/tenants.h"
#include "server/worker/worker_pool.h"

namespace cuwire::server {

// What a server shared by untrusted clients takes at once.
struct ServerLimits {
  // Open connections of every kind (handshaking or in session): the bound on threads.
  size_t max_connections = 512;
  // Sessions past Hello.
  size_t max_sessions = 256;
  // Connections from one peer that have not finished Hello: one IP address over TCP and TLS,
  // one uid over a Unix socket (SO_PEERCRED). A connection past its Hello (a session, a
  // control or host-call connection, a probe) holds none.
  size_t max_handshakes_per_peer = 16;
};

struct ServerConfig {
  std::vector<Address> listen;
  // The unix: listeners' socket files (--socket-mode, --socket-group): an octal mode such as
  // "0660" and a group by name or number; empty: as the umask leaves them, the server's group.
  std::string socket_mode, socket_group;
  TlsServerOptions tls;
  SessionConfig session;
  ServerLimits limits;
  // Serve on a network address without TLS, or without a token. Off: start() refuses such a
  // listener (unix: sockets and loopback tcp:/tls: addresses are always allowed).
  bool allow_insecure = false;
  std::string backend = "auto";
  std::string driver;  // --driver: the cuda backend's driver library (empty: libcuda.so.1)
  // The cuda backend's device printf output goes back to the client that printed it
  // (stdout_capture.h); off (--device-printf server), it stays on the server's stdout.
  bool device_printf_to_client = true;
  // Busy time measured on every GPU (compute_scheduler.h: schedulers that only measure where no
  // compute cap shares the GPU); off: only where compute caps need a scheduler.
  bool measure_busy = true;
  SimOptions sim;
  // Tenants (tenants.h, config_file.h); none: an open server with one default tenant, unless
  // `open` is false: then none is served until tenants are added at run time.
  std::vector<TenantSpec> tenants;
  bool open = true;
  // Placement of sessions on GPUs (placement.h); max_sessions_per_gpu 0: no bound.
  PlacementPolicy placement = PlacementPolicy::kSpread;
  int max_sessions_per_gpu = 0;
  // HOST:PORT of the HTTP endpoint for Prometheus (metrics.h); empty: none.
  std::string metrics;
  // Device memory charged to a session's tenant for each context it makes (design decision 13:
  // what a context spends of its own). None: kCudaContextMemory on the cuda backend with a
  // real driver, 0 on the sim (which charges what it spends itself) and on a relay (whose
  // upstream charges it).
  std::optional<uint64_t> context_memory;
  static constexpr uint64_t kCudaContextMemory = uint64_t{256} << 20;
  // Tests: serve from this backend instead of creating one (not owned; must outlive the
  // server). `backend` and `sim` are then ignored.
  Backend* backend_override = nullptr;
  // Isolation by process (design decision 14, server/worker/worker_pool.h): "tenant" (each
  // tenant's sessions in a worker process of their own), "session" (a worker per session),
  // "none" (every session in this process), or "auto": tenant on the cuda backend over a real
  // driver, where everything the config asks for crosses into workers (auto_isolation).
  std::string isolation = "auto";
  // The executable run as a worker (with --worker FD); empty: this process's own.
  std::string worker_program;
  // Where workers log; -1: this process's stderr.
  int worker_log_fd = -1;
  // A tenant's worker with no session for this long is let go (isolation "tenant").
  std::chrono::milliseconds worker_idle{60'000};
  // A worker that has not said it serves within this is killed and its session refused.
  std::chrono::milliseconds worker_start_timeout{30'000};
  // A worker that does not answer the front within this is killed as hung.
  std::chrono::milliseconds worker_timeout{10'000};
};

// The configuration's own consistency: limits, timeouts, and listeners that would expose the
// server (see ServerConfig::allow_insecure). start() checks it first.
Status check_config(const ServerConfig& config);

// What isolation "auto" is for `config` on backend `backend` (a relay when `relay`): tenant on
// the cuda backend over a real driver, where a VMM mapping, a pool or a driver crash would
// otherwise be every tenant's; none on the sim (it checks every access itself), on a relay
// (its upstream server keeps the relay's sessions apart) and for an embedded backend; *why says
// which.
Isolation auto_isolation(const ServerConfig& config, const std::string& backend, bool relay,
                         std::string* why);

// True for the addresses only this host can reach: localhost, 127.0.0.0/8, ::1.
bool is_loopback_host(const std::string& host);

// A Unix socket file's mode: octal permission bits ("0660", "660"), at most 0777.
Status parse_socket_mode(const std::string& text, int* mode);
// A group by name or number, as this host knows it (getgrnam).
Status resolve_group(const std::string& name, int64_t* gid);

// Durations like "10s", "500ms", "2m", "1h"; a bare number is seconds.
Status parse_duration(const std::string& text, std::chrono::milliseconds* out);

// The token clients must present, from at most one source: --token (`flag`, visible to
// anyone on the host through ps), --token-file (`file`: its first line, the file should be
// readable by the server alone), or else the environment (`env`, CUWIRE_SERVER_TOKEN). An
// empty result means no token. *warning gets a line to log, or stays empty.
Status resolve_token(const std::string& flag, const std::string& file, const char* env,
                     std::string* token, std::string* warning);

class Server {
 public:
  explicit Server(ServerConfig config);
  ~Server();

  // Creates the backend and binds every listener; nothing is served before this succeeds.
  Status start();
  // Closes the listeners, ends every session at once, waits for their threads.
  void stop();
  // The orderly end (SIGTERM): closes the listeners, lets each call being executed finish and
  // send its reply, tells every client kGoingAway and closes its connection, waits up to
  // `timeout` for all that, then stop(). True when every connection ended within the timeout.
  bool drain(std::chrono::milliseconds timeout);

  // Bound addresses, in --listen order (tcp port 0 resolved); empty once stopped or drained.
  std::vector<Address> addresses() const;
  // The metrics endpoint's address (ServerConfig::metrics); empty without one.
  std::optional<Address> metrics_address() const;
  // The server's figures now, as /metrics serves them (metrics.h).
  std::string metrics_text() const;
  // A reload (SIGHUP): the caps of `tenants` (a config file's, already checked) take effect
  // for the tenants of those names while their sessions run; what cannot change live (tokens,
  // tenants added or removed, gpus, sms, ...) is logged as waiting for a restart. Returns
  // the number of tenants whose caps changed.
  int reload(const std::vector<TenantSpec>& tenants);
  // A control request (admin.h): the admin API for the admin token, a tenant's own view for a
  // tenant's. Safe from any thread.
  ControlReplyMsg control(const ControlCaller& caller, const ControlMsg& request);
  const std::string& backend_name() const { return backend_.name; }
  // Open connections, in their handshake or in session.
  size_t session_count() const;
  // Bytes the open sessions keep in buffers between calls.
  size_t retained_buffer_bytes() const;

 private:
  struct Live {
    std::unique_ptr<Session> session;
    std::thread thread;
    std::string peer_key;     // key of handshakes_by_peer_ ("uid:N" or the IP); empty: none
    bool admitted = false;    // past Hello: counted in admitted_, not in handshakes_by_peer_
    bool control = false;     // a control connection past Hello: counted in controls_
    bool past_hello = false;  // a host-call connection or probe past Hello: no slot held
    const Tenant* control_key = nullptr;  // its key in controls_ (null: the admin's)
  };
  struct Refusal {
    std::unique_ptr<ByteStream> stream;
    std::string why;
  };

  // The GPUs sessions are placed on, as the backend reports them.
  Status make_gpu_pool();
  // Isolation by process: the workers sessions are handed to (ServerConfig::isolation).
  Status make_worker_pool();
  void on_accept(std::unique_ptr<ByteStream> stream);
  std::string admit(uint64_t id);
  std::string admit_control(uint64_t id, const ControlCaller& caller);
  std::string admit_past_hello(uint64_t id);              // host-call connections and probes
  void release_handshake_locked(const std::string& key);  // needs mu_
  void connection_ended(uint64_t id);
  void refuse(std::unique_ptr<ByteStream> stream, const std::string& why);
  void refusal_loop();
  void close_listeners();
  void reap_finished();

  // admin.cc: the commands of the admin API and the tenants' view.
  std::string admin_gpus(const Tenant* scope = nullptr) const;
  std::string admin_sessions() const;
  std::string admin_stats(const std::string& tenant, std::string* error) const;
  std::string admin_usage() const;
  std::string admin_tenant_set(const std::string& args, std::string* error);
  std::string admin_evict(const std::string& args, std::string* error);
  // Tenants made and ended at run time (cuwire tenant add / remove).
  std::string admin_tenant_add(const std::string& args, std::string* error);
  // Removed tenants nothing is left of (no session, no memory, no worker) are forgotten: in
  // the registry, the GPUs' schedules, the SM partitions and the figures' caches. Returned
  // for the caller to look at; freed when the last holder lets go. Needs caps_mu_.
  std::vector<TenantRef> retire_removed_locked();
  std::string admin_tenant_remove(const std::string& args, std::string* error);
  std::string tenant_view(const ControlCaller& caller);
  // The live sessions' Info (Session::info), by id.
  std::vector<Session::Info> session_infos() const;
  // GPU time `t` has used on `device` (0 where no scheduler measures it).
  uint64_t busy_ns(const Tenant* t, CUdevice device) const;
  // Every tenant's, removed ones' included.
  uint64_t busy_total_ns(CUdevice device) const;
  // The tenant's busy share of `device` (percent) since the previous ask, at least a second
  // back (utilization as NVML reports it); `t` null: every tenant's together.
  unsigned utilization(const Tenant* t, CUdevice device);
  // Applies new caps to a tenant while its sessions run (reload, cuwire tenant set); *notes
  // gets what holds only after a restart.
  void apply_caps(Tenant* t, const Tenant::Caps& caps, const char* source,
                  std::vector<std::string>* notes);
  void apply_caps_locked(Tenant* t, const Tenant::Caps& caps, const char* source,
                         std::vector<std::string>* notes);  // needs caps_mu_

  ServerConfig config_;
  BackendChoice backend_;
  Backend* api_ = nullptr;  // backend_.api, or config_.backend_override
  std::shared_ptr<StdoutCapture> device_printf_;
  std::unique_ptr<TenantRegistry> tenants_;
  std::unique_ptr<HostCallRegistry> host_calls_;
  std::unique_ptr<GpuPool> gpus_;
  // GPUs with compute-capped tenants, or whose busy time is measured; with workers, in memory
  // they map (schedules_fd_). Before workers_: the pool forgets a dead worker's share there.
  ComputeSchedulers compute_;
  int schedules_fd_ = -1;
  std::unique_ptr<WorkerPool> workers_;  // isolation by process; null: none
  Isolation isolation_ = Isolation::kNone;
  SmPartitions partitions_;  // tenants' SMs of their own
  std::unique_ptr<MetricsHttp> metrics_;
  std::vector<std::unique_ptr<Listener>> listeners_;
  std::vector<std::thread> listener_threads_;

  mutable std::mutex mu_;
  std::condition_variable ended_;                // signalled when a connection ends
  std::unordered_map<uint64_t, Live> sessions_;  // guarded by mu_; every open connection
  std::vector<uint64_t> finished_;               // guarded by mu_
  // Connections not yet past Hello, by peer ("uid:N" for Unix peers, else the IP address);
  // guarded by mu_.
  std::unordered_map<std::string, size_t> handshakes_by_peer_;
  size_t admitted_ = 0;                    // guarded by mu_; sessions past Hello
  std::map<const Tenant*, int> controls_;  // guarded by mu_; control connections by tenant
  uint64_t next_session_id_ = 1;           // guarded by mu_
  bool stopping_ = false;                  // guarded by mu_
  bool draining_ = false;                  // guarded by mu_

  // Refusals wait here for the refusal thread, so a peer that never reads (or never finishes
  // its TLS handshake) cannot hold up accepting.
  std::mutex refusal_mu_;
  std::condition_variable refusal_cv_;
  std::deque<Refusal> refusals_;  // guarded by refusal_mu_
  bool refusals_stop_ = false;    // guarded by refusal_mu_
  LogRateLimit refusal_log_;      // guarded by refusal_mu_
  std::thread refusal_thread_;

  // Utilization samples (utilization()): per tenant (null: all) and GPU.
  struct UtilSample {
    std::chrono::steady_clock::time_point at;
    uint64_t busy_ns = 0;
    unsigned percent = 0;
  };
  std::mutex util_mu_;
  std::map<std::pair<const Tenant*, CUdevice>, UtilSample> util_;  // guarded by util_mu_
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::mutex caps_mu_;  // one change of caps at a time (reload, tenant set)
};

}  // namespace cuwire::server
