#include "server/session/session.h"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "generated/call_ids.h"
#include "protocol/messages.h"
#include "protocol/transport.h"
#include "server/calls/copies.h"
#include "server/calls/host_calls.h"
#include "server/ops/stats.h"
#include "server/session/call_executor.h"
#include "server/tenancy/tenants.h"

namespace cuwire::server {
namespace {

using Clock = std::chrono::steady_clock;

ErrorKind kind_for(const Status& s) {
  switch (s.code()) {
    case Status::Code::kTooLarge:
      return ErrorKind::kFrameTooLarge;
    case Status::Code::kUnknownType:
      return ErrorKind::kUnknownType;
    case Status::Code::kMalformed:
      return ErrorKind::kMalformedFrame;
    default:
      return ErrorKind::kFailed;
  }
}

// The last Error frame to a peer the server lets go may take this long; a peer that does not
// read cannot hold the session's thread with it.
constexpr auto kFarewellTimeout = std::chrono::seconds(1);

std::string millis(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

}  // namespace

bool LogRateLimit::allow(uint64_t* suppressed) {
  Clock::time_point now = Clock::now();
  if (tokens_ >= burst_) {
    refilled_ = now;
  } else if (auto n = (now - refilled_) / interval_; n > 0) {
    tokens_ = static_cast<int>(std::min<int64_t>(burst_, tokens_ + n));
    refilled_ += n * interval_;
  }
  if (tokens_ == 0) {
    ++held_back_;
    return false;
  }
  --tokens_;
  *suppressed = held_back_;
  held_back_ = 0;
  return true;
}

std::string printable_client_name(const std::string& raw) {
  std::string out;
  size_t n = std::min(raw.size(), kMaxClientName);
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    auto c = static_cast<unsigned char>(raw[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (raw.size() > kMaxClientName) out += "...";
  return out;
}

Session::Session(uint64_t id, std::unique_ptr<ByteStream> stream, const SessionConfig& config,
                 Backend& backend, AdmitFn admit)
    : id_(id),
      stream_(std::move(stream)),
      config_(config),
      backend_(backend),
      admit_(std::move(admit)),
      peer_(stream_->peer()),
      client_("?") {
  // The handshake's bound runs from accept, which is now.
  if (config_.handshake_timeout.count() > 0) {
    StreamTimeouts t;
    t.deadline = Clock::now() + config_.handshake_timeout;
    stream_->set_timeouts(t);
  }
}

Session::~Session() {
  if (counted_) tenant_->remove_session();
  if (lane_fd_ >= 0) close(lane_fd_);
  if (relay_fd_ >= 0) close(relay_fd_);
}

void Session::relay_to_worker() {
  int fd = -1;
  {
    // A copy for the relay to take: the session keeps its own, which stop() shuts down.
    std::lock_guard lock(info_mu_);
    if (relay_fd_ >= 0) fd = fcntl(relay_fd_, F_DUPFD_CLOEXEC, 0);
  }
  if (fd >= 0) {
    (void)stream_->relay(fd);
  } else {
    spdlog::warn("connection {} ({}): cannot relay to its worker: {}", id_, peer_,
                 std::strerror(errno));
  }
  end_relay();
}

void Session::end_relay() {
  std::lock_guard lock(info_mu_);
  if (relay_fd_ >= 0) close(std::exchange(relay_fd_, -1));
}

int Session::socket_for_worker() {
  if (const int fd = stream_->native_handle(); fd >= 0) return fd;
  if (!stream_->relays()) return -1;
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    spdlog::warn("connection {} ({}): socketpair: {}", id_, peer_, std::strerror(errno));
    return -1;
  }
  std::lock_guard lock(info_mu_);
  relay_fd_ = pair[0];
  return pair[1];
}

void Session::stop() {
  stream_->shutdown();
  std::lock_guard lock(info_mu_);
  if (remote_) remote_->abandon();
  // A relay to a worker ends too, even while the worker keeps its end (a call in the driver).
  if (relay_fd_ >= 0) ::shutdown(relay_fd_, SHUT_RDWR);
}

void Session::close_host_calls() {
  std::shared_ptr<HostCallChannel> channel;
  {
    std::lock_guard lock(info_mu_);
    channel = host_calls_;
  }
  if (channel) channel->close();
}

void Session::drain() {
  draining_ = true;
  {
    // A worker serves it: the worker drains it (its reply goes out, then kGoingAway).
    std::lock_guard lock(info_mu_);
    if (remote_) {
      remote_->drain();
      return;
    }
  }
  // A call waiting on a host function (a synchronize) is let go: the client may never run it.
  if (!host_call_connection_) close_host_calls();
  // A read waiting for the next frame ends now; a call being executed is not disturbed, and
  // its reply still goes out (the write side stays open).
  stream_->shutdown_read();
}

void Session::warn_limited(const std::string& line) {
  uint64_t suppressed = 0;
  if (!warnings_.allow(&suppressed)) return;
  if (suppressed) {
    spdlog::warn("{} ({} similar warnings of this session suppressed)", line, suppressed);
  } else {
    spdlog::warn("{}", line);
  }
}

void Session::farewell(ErrorKind kind, const std::string& why) {
  StreamTimeouts t;
  t.deadline = Clock::now() + kFarewellTimeout;
  stream_->set_timeouts(t);
  send_error(*stream_, kind, why);
  stream_->shutdown();
}

void Session::reject(ErrorKind kind, const std::string& why) {
  spdlog::warn("session {} ({} {}): {}: {}; closing", id_, peer_, client_, error_kind_name(kind),
               why);
  farewell(kind, why);
}

void Session::going_away() {
  if (evicted_) {
    spdlog::info("session {} ({} {}): evicted by the admin; closing", id_, peer_, client_);
    farewell(ErrorKind::kGoingAway, "the session was evicted by the server's admin");
    return;
  }
  spdlog::info("session {} ({} {}): the server is shutting down; closing", id_, peer_, client_);
  farewell(ErrorKind::kGoingAway, "the server is shutting down");
}

bool Session::leave_if_draining() {
  if (!draining_) return false;
  going_away();
  return true;
}

void Session::evict() {
  evicted_ = true;
  {
    std::lock_guard lock(info_mu_);
    if (remote_) {
      remote_->evict();
      return;
    }
  }
  drain();
}

std::optional<Session::Info> Session::info() const {
  std::lock_guard lock(info_mu_);
  return info_;
}

bool Session::handshake() {
  Frame f;
  Status s = read_frame(*stream_, config_.limits, &f);
  if (!s) {
    if (draining_) {
      going_away();
    } else if (stream_->timed_out()) {
      spdlog::warn("session {} ({}): no Hello within the handshake timeout of {}; closing", id_,
                   peer_, millis(config_.handshake_timeout));
      farewell(ErrorKind::kGoingAway, "no Hello within " + millis(config_.handshake_timeout));
    } else if (s.code() == Status::Code::kDisconnected) {
      spdlog::info("session {} ({}): gone before Hello: {}", id_, peer_, s.message());
    } else {
      reject(kind_for(s), s.message());
    }
    return false;
  }
  if (f.type() != FrameType::kHello) {
    reject(ErrorKind::kUnexpected, "the first frame must be Hello");
    return false;
  }
  HelloMsg hello;
  if (Status d = decode_hello(f, &hello); !d) {
    reject(ErrorKind::kMalformedFrame, d.message());
    return false;
  }
  client_ = printable_client_name(hello.client_name) + "[" + std::to_string(hello.pid) + "]";
  // A lane's memfd comes right behind its Hello, whatever becomes of the Hello: taken now, so
  // the stream stays in step. Over anything but a Unix socket there is none to take.
  int lane_fd = -1;
  if (hello.lane && stream_->receive_fd(&lane_fd).is_ok() && lane_fd >= 0 && config_.shm_lane &&
      !hello.probe && !hello.control && !hello.host_calls) {
    if (config_.handoff) {
      lane_fd_ = lane_fd;  // the worker that serves the session maps it
    } else if (Status a = ShmLane::attach(lane_fd, &lane_); !a) {
      warn_limited(fmt::format("session {} ({} {}): data lane refused: {}", id_, peer_, client_,
                               a.message()));
    }
  } else if (lane_fd >= 0) {
    close(lane_fd);
  }
  if (hello.protocol_version != kProtocolVersion) {
    reject(ErrorKind::kVersionMismatch, "client speaks protocol " +
                                            std::to_string(hello.protocol_version) +
                                            ", server speaks " + std::to_string(kProtocolVersion));
    return false;
  }
  if (hello.manifest_hash != kManifestHash) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "client manifest %016llx, server manifest %016llx",
                  static_cast<unsigned long long>(hello.manifest_hash),
                  static_cast<unsigned long long>(kManifestHash));
    reject(ErrorKind::kManifestMismatch,
           std::string(buf) + ": client library and gpu-server come from different builds");
    return false;
  }
  if (hello.control) return accept_control(hello, f.header.sequence);
  if (hello.host_calls) return accept_host_calls(hello, f.header.sequence);
  if (!authenticate(hello, "no tenant has this token", &tenant_)) return false;
  // A probe is answered only past the same checks as a session's Hello (a wrong token is
  // refused alike), and before anything counts, places or admits a session.
  if (hello.probe) {
    // Past its Hello: it holds no handshake slot of its peer while it is answered and closed.
    if (admit_) (void)admit_(Admission::kProbe, nullptr);
    answer_probe(f.header.sequence);
    return false;
  }
  if (tenant_) {
    if (!tenant_->add_session()) {
      reject(ErrorKind::kOverloaded, tenant_->max_sessions_reached());
      return false;
    }
    counted_ = true;
    if (config_.gpus) {
      std::string why;
      gpu_ = config_.gpus->place(*tenant_, &why);
      if (!gpu_) {
        reject(ErrorKind::kOverloaded, why);
        return false;
      }
      gpu_device_ = gpu_->device();
      devices_ = gpu_->devices();
    }
  }
  if (admit_) {
    if (std::string why = admit_(Admission::kSession, nullptr); !why.empty()) {
      reject(ErrorKind::kOverloaded, why);
      return false;
    }
  }
  if (config_.handoff) return hand_over(hello, f.header.sequence);
  if (!welcome(f.header.sequence)) return false;
  {
    Info info = new_info(hello);
    std::lock_guard lock(info_mu_);
    info_ = std::move(info);
  }
  // A tenant removed between its token being found and the info above (which the removal's
  // search for sessions reads) is seen here: the session ends instead of outliving it.
  if (tenant_ && tenant_->removed()) {
    farewell(ErrorKind::kGoingAway, "its tenant was removed by the server's admin");
    return false;
  }
  spdlog::info("session {} ({} {}): connected{}", id_, peer_, client_, placed());
  return true;
}

bool Session::welcome(uint64_t sequence) {
  // From here on the handshake bound is over; the idle bound, if any, takes its place.
  StreamTimeouts t;
  t.idle = config_.idle_timeout;
  stream_->set_timeouts(t);
  WelcomeMsg w;
  w.session_id = id_;
  w.lane = lane_ != nullptr;
  if (config_.host_calls) {
    auto channel = config_.host_calls->open(id_, tenant_, &w.host_call_key);
    std::lock_guard lock(info_mu_);
    host_calls_ = std::move(channel);
  }
  return send_welcome(&w, sequence);
}

Session::Info Session::new_info(const HelloMsg& hello) const {
  Info info;
  info.id = id_;
  if (tenant_ && !config_.tenants->open()) info.tenant = tenant_->name();
  info.client = printable_client_name(hello.client_name);
  info.pid = hello.pid;
  info.peer = peer_;
  info.gpu = gpu_device_;
  info.since = std::chrono::system_clock::now();
  return info;
}

std::string Session::placed() const {
  std::string where;
  if (tenant_ && !config_.tenants->open()) where += ", tenant " + tenant_->name();
  if (gpu_ && config_.gpus->size() > 1) where += ", GPU " + std::to_string(gpu_device_);
  return where;
}

bool Session::hand_over(const HelloMsg& hello, uint64_t sequence) {
  SessionHandoff::Request r;
  r.id = id_;
  r.sequence = sequence;
  r.tenant = tenant_;
  r.client = client_;
  r.pid = hello.pid;
  r.peer = peer_;
  r.gpu = gpu_device_;
  r.devices = devices_;
  r.socket_fd = socket_for_worker();
  r.lane_fd = lane_fd_;
  // The worker records the session's figures where the front reads them, even once it is gone.
  if (tenant_) shared_stats_ = tenant_->stats().open_session(gpu_device_, /*shared=*/true);
  r.stats_fd = shared_stats_ ? shared_stats_->fd() : -1;
  std::string why = "this connection's transport cannot be handed to a worker process";
  std::unique_ptr<RemoteSession> remote;
  if (r.socket_fd >= 0) remote = config_.handoff->hand_over(r, &why);
  // The worker has its own copies of the lane and of a relayed connection's socket, if it took
  // the session.
  if (lane_fd_ >= 0) close(lane_fd_);
  lane_fd_ = -1;
  if (relay_fd_ >= 0) close(r.socket_fd);
  if (!remote) {
    end_relay();
    if (tenant_) tenant_->stats().close_session(shared_stats_);
    shared_stats_.reset();
    reject(ErrorKind::kOverloaded, why);
    return false;
  }
  const int worker = remote->worker_pid();
  {
    Info info = new_info(hello);
    info.worker = worker;
    info.stats = shared_stats_;
    std::lock_guard lock(info_mu_);
    info_ = std::move(info);
    remote_ = std::move(remote);
  }
  // A drain or a stop that came while it was handed over reaches the worker too; so does the
  // removal of its tenant between its token being found and the info above (which the
  // removal's search for sessions reads).
  if (draining_) drain();
  if (tenant_ && tenant_->removed()) evict();
  spdlog::info("session {} ({} {}): connected{}, in worker {}", id_, peer_, client_, placed(),
               worker);
  return true;
}

void Session::serve_remote() {
  RemoteSession* remote = nullptr;
  {
    std::lock_guard lock(info_mu_);
    remote = remote_.get();
  }
  // A TLS connection's bytes pass through here, both ways, until the worker closes its end.
  if (relay_fd_ >= 0) relay_to_worker();
  const std::string why = remote->wait();
  if (!why.empty()) {
    // The worker is gone with the session's state: the client learns why, and its calls fail
    // as a lost server's do (CUDA_ERROR_DEVICE_UNAVAILABLE).
    spdlog::warn("session {} ({} {}): {}; closing", id_, peer_, client_, why);
    farewell(ErrorKind::kFailed, why);
  }
  // What the worker recorded, to its last call, joins the tenant's totals.
  if (tenant_) tenant_->stats().close_session(shared_stats_);
}

void Session::run_handed(Handed h) {
  tenant_ = h.tenant;
  client_ = std::move(h.client);
  gpu_device_ = h.gpu;
  devices_ = std::move(h.devices);
  if (h.stats_fd >= 0) {
    if (Status a = SessionStats::attach(h.stats_fd, gpu_device_, &shared_stats_); !a) {
      spdlog::warn("session {} ({} {}): its figures go uncounted: {}", id_, peer_, client_,
                   a.message());
    }
  }
  if (h.lane_fd >= 0) {
    if (!config_.shm_lane) {
      close(h.lane_fd);
    } else if (Status a = ShmLane::attach(h.lane_fd, &lane_); !a) {
      warn_limited(fmt::format("session {} ({} {}): data lane refused: {}", id_, peer_, client_,
                               a.message()));
    }
  }
  if (welcome(h.sequence)) {
    spdlog::debug("session {} ({} {}): serving", id_, peer_, client_);
    serve();
  }
  if (config_.host_calls) {
    close_host_calls();
    config_.host_calls->remove(id_);
  }
  stream_->shutdown();
}

bool Session::send_welcome(WelcomeMsg* w, uint64_t sequence) {
  w->server_name = config_.server_name;
  w->backend = config_.backend_name;
  std::vector<uint8_t> msg;
  encode_welcome(*w, &msg);
  FrameHeader h;
  h.type = static_cast<uint16_t>(FrameType::kWelcome);
  h.sequence = sequence;
  return write_frame(*stream_, h, msg).is_ok();
}

void Session::answer_probe(uint64_t sequence) {
  WelcomeMsg w;
  w.has_room = true;
  RoomMsg& room = w.room;
  if (tenant_ && config_.gpus) {
    const GpuPool::Room r = config_.gpus->room_for(*tenant_);
    room.fits = r.fits;
    room.memory_left = r.memory_left;
    room.compute_left = static_cast<uint32_t>(std::max(r.compute_left, 0));
    room.sessions = static_cast<uint32_t>(std::max(r.sessions, 0));
    room.why = r.why;
    room.placement = placement_name(r.policy);
  } else {
    // Nothing to place on (no tenant registry, or a backend that reported no GPU at start: a
    // relay whose upstream was down): every session would see every device, so it fits,
    // without figures. The client ranks such a server after those that give them.
    room.fits = true;
  }
  // What admission would refuse, as far as a session can see it (the server's max_sessions it
  // cannot: such a server answers fits and then refuses the session, and the client moves on
  // to its next choice). A snapshot: other sessions may start or end before the client comes.
  if (draining_) {
    room.fits = false;
    room.why = "the server is shutting down";
  } else if (tenant_ && !tenant_->session_room()) {
    room.fits = false;
    room.why = tenant_->max_sessions_reached();
  }
  // Still under the handshake's deadline: a peer that does not read cannot hold the thread.
  (void)send_welcome(&w, sequence);
  stream_->shutdown();
  // Debug, not info: a client may probe at will, and a probe changes nothing.
  spdlog::debug("session {} ({} {}): probed: {}", id_, peer_, client_,
                room.fits ? "fits" : "does not fit: " + room.why);
}

bool Session::authenticate(const HelloMsg& hello, const char* unknown, Tenant** tenant) {
  if (config_.tenants && !config_.tenants->open()) {
    // A Unix-socket peer without a token is the tenant whose `uids` hold its uid, if any (the
    // kernel's word, SO_PEERCRED); a token, when given, is checked alone.
    if (hello.token.empty()) {
      if (const auto c = stream_->peer_credentials()) {
        if (TenantRef t = config_.tenants->find_uid(c->uid)) {
          *tenant = t.get();
          tenant_ref_ = std::move(t);
          return true;
        }
      }
    }
    tenant_ref_ = config_.tenants->find(hello.token);
    *tenant = tenant_ref_.get();
    if (!*tenant) {
      reject(ErrorKind::kUnauthorized, hello.token.empty() ? "a token is required" : unknown);
      return false;
    }
    return true;
  }
  if (!config_.token.empty() && !secrets_equal(hello.token, config_.token)) {
    reject(ErrorKind::kUnauthorized, hello.token.empty() ? "a token is required" : "wrong token");
    return false;
  }
  if (config_.tenants) {
    tenant_ref_ = config_.tenants->find(hello.token);
    *tenant = tenant_ref_.get();
  }
  return true;
}

bool Session::accept_control(const HelloMsg& hello, uint64_t sequence) {
  caller_.who = peer_ + " " + client_;
  if (config_.admin_token_sha256) {
    const std::array<uint8_t, 32> d = token_digest(hello.token);
    const auto& want = *config_.admin_token_sha256;
    caller_.admin = !hello.token.empty() &&
                    secrets_equal({reinterpret_cast<const char*>(d.data()), d.size()},
                                  {reinterpret_cast<const char*>(want.data()), want.size()});
  }
  // Otherwise a tenant's token, checked as a session's: its own view only.
  if (!caller_.admin &&
      !authenticate(hello, "neither the admin token nor a tenant's", &caller_.tenant)) {
    return false;
  }
  caller_.warn = [this](const std::string& line) { warn_limited(line); };
  if (admit_) {
    if (std::string why = admit_(Admission::kControl, &caller_); !why.empty()) {
      reject(ErrorKind::kOverloaded, why);
      return false;
    }
  }
  control_ = true;
  StreamTimeouts t;
  t.idle = config_.idle_timeout.count() > 0 ? std::min(config_.idle_timeout, kControlIdleTimeout)
                                            : kControlIdleTimeout;
  stream_idle_ = t.idle;
  stream_->set_timeouts(t);
  WelcomeMsg w;  // session id 0: no session
  if (!send_welcome(&w, sequence)) return false;
  spdlog::debug("connection {} ({} {}): control, {}", id_, peer_, client_,
                caller_.admin    ? "admin"
                : caller_.tenant ? "tenant " + caller_.tenant->name()
                                 : "open");
  return true;
}

bool Session::accept_host_calls(const HelloMsg& hello, uint64_t sequence) {
  host_call_connection_ = true;
  Tenant* tenant = nullptr;
  if (!authenticate(hello, "no tenant has this token", &tenant)) return false;
  if (config_.handoff) {
    // The session's worker holds its channel: the connection is passed there.
    SessionHandoff::HostCalls h;
    h.id = id_;
    h.sequence = sequence;
    h.tenant = tenant;
    h.session = hello.host_call_session;
    h.key = hello.host_call_key;
    h.client = client_;
    h.peer = peer_;
    h.socket_fd = socket_for_worker();
    std::string why = "this connection's transport cannot be handed to a worker process";
    const bool handed = h.socket_fd >= 0 && config_.handoff->hand_over_host_calls(h, &why);
    if (relay_fd_ >= 0) close(h.socket_fd);  // the worker has its own copy, if it took it
    if (!handed) {
      end_relay();
      reject(ErrorKind::kUnauthorized, why);
      return false;
    }
    if (relay_fd_ >= 0) {
      spdlog::debug("connection {} ({} {}): host calls of session {}, to its worker (relayed)", id_,
                    peer_, client_, hello.host_call_session);
      return true;  // run() relays the connection
    }
    handed_off_ = true;
    spdlog::debug("connection {} ({} {}): host calls of session {}, to its worker", id_, peer_,
                  client_, hello.host_call_session);
    return false;  // nothing more here
  }
  return attach_host_calls(hello.host_call_session, hello.host_call_key, tenant, sequence);
}

bool Session::attach_host_calls(uint64_t session, const std::string& key, Tenant* tenant,
                                uint64_t sequence) {
  std::shared_ptr<HostCallChannel> channel =
      config_.host_calls ? config_.host_calls->find(session, key, tenant) : nullptr;
  if (!channel) {
    reject(ErrorKind::kUnauthorized, "no session of this tenant has this host-call key");
    return false;
  }
  // Past its Hello, bounded by its session: it holds no handshake slot of its peer.
  if (admit_) {
    if (std::string why = admit_(Admission::kHostCalls, nullptr); !why.empty()) {
      reject(ErrorKind::kOverloaded, why);
      return false;
    }
  }
  if (!channel->attach(stream_.get())) {
    reject(ErrorKind::kUnexpected, "the session has a host-call connection already");
    return false;
  }
  {
    std::lock_guard lock(info_mu_);
    host_calls_ = std::move(channel);
  }
  // The connection is quiet while no host function runs, for as long as the session lasts.
  stream_->set_timeouts(StreamTimeouts{});
  WelcomeMsg w;  // session id 0: no session of its own
  if (!send_welcome(&w, sequence)) {
    host_calls_->detach();
    return false;
  }
  spdlog::debug("connection {} ({} {}): host calls of session {}", id_, peer_, client_, session);
  return true;
}

void Session::run_handed_host_calls(uint64_t session, const std::string& key, uint64_t sequence,
                                    Tenant* tenant, std::string client) {
  host_call_connection_ = true;
  client_ = std::move(client);
  if (attach_host_calls(session, key, tenant, sequence)) serve_host_calls();
  stream_->shutdown();
}

void Session::serve_host_calls() {
  Frame f;
  for (;;) {
    // A HostCallDone brings back what the function wrote (memory_runs.h).
    constexpr FrameLimits kDoneLimits{kControlFrameLimits.max_message_bytes,
                                      HostCallChannel::kMaxDoneBytes};
    Status s = read_frame(*stream_, kDoneLimits, &f);
    if (!s) break;  // the client left, or its session ended (the channel shut the stream)
    if (f.type() == FrameType::kGoodbye) break;
    HostCallMsg m;
    if (f.type() != FrameType::kHostCallDone) {
      reject(ErrorKind::kUnexpected,
             "only HostCallDone and Goodbye frames follow a host-call Hello");
      break;
    }
    if (Status d = decode_host_call(f, FrameType::kHostCallDone, &m); !d) {
      reject(ErrorKind::kMalformedFrame, d.message());
      break;
    }
    host_calls_->done(m.id, std::move(f.bulk));
  }
  // Host functions still waiting on this connection return: the session's streams go on.
  host_calls_->detach();
}

void Session::serve_control() {
  Frame f;
  std::vector<uint8_t> msg;
  for (;;) {
    if (leave_if_draining()) return;
    Status s = read_frame(*stream_, kControlFrameLimits, &f);
    if (!s) {
      if (draining_) {
        going_away();
      } else if (stream_->timed_out()) {
        // Said, so that the client reconnects at once instead of waiting on a dead socket.
        farewell(ErrorKind::kGoingAway, "idle for " + millis(stream_idle_));
      } else if (s.code() != Status::Code::kDisconnected) {
        reject(kind_for(s), s.message());
      }
      return;
    }
    if (f.type() == FrameType::kGoodbye) return;
    if (f.type() != FrameType::kControl) {
      reject(ErrorKind::kUnexpected, "only Control and Goodbye frames follow a control Hello");
      return;
    }
    ControlMsg request;
    if (Status d = decode_control(f, &request); !d) {
      reject(ErrorKind::kMalformedFrame, d.message());
      return;
    }
    ControlReplyMsg reply;
    if (request.args.size() > kMaxControlArgs) {
      reply.error =
          "the request's arguments are over " + std::to_string(kMaxControlArgs) + " bytes";
    } else if (!config_.control) {
      reply.error = "this server answers no control requests";
    } else {
      try {
        reply = config_.control(caller_, request);
      } catch (const std::exception& e) {
        reply = {false, std::string("the request failed: ") + e.what(), ""};
      }
    }
    encode_control_reply(reply, &msg);
    FrameHeader h;
    h.type = static_cast<uint16_t>(FrameType::kControlReply);
    h.sequence = f.header.sequence;
    if (!write_frame(*stream_, h, msg)) return;
    release_if_large(&f.message);
    release_if_large(&f.bulk);
    release_if_large(&msg);
  }
}

void Session::run() {
  if (handshake()) {
    if (remote_) {
      serve_remote();
    } else if (relay_fd_ >= 0) {
      relay_to_worker();  // host calls a worker serves
    } else if (control_) {
      serve_control();
    } else if (host_call_connection_) {
      serve_host_calls();
    } else {
      serve();
    }
  }
  if (!host_call_connection_ && config_.host_calls) {
    close_host_calls();  // a session that never reached serve()
    config_.host_calls->remove(id_);
  }
  // What the session held of its tenant and its GPU is given back as it ends, not when the
  // server later reaps its thread: the figures, the tenant's max_sessions and placement see
  // it gone at once.
  {
    std::lock_guard lock(info_mu_);
    info_.reset();
  }
  // The peer learns at once that the connection is over, not when the server reaps it (unless
  // a worker serves the connection now: shutting the socket would end it there too).
  if (!handed_off_) stream_->shutdown();
  gpu_.reset();
  if (counted_) {
    tenant_->remove_session();
    counted_ = false;
  }
}

namespace {

// The connection's side of a streamed call (server/calls/copies.h): request bytes from the frame
// reader as the call takes them, reply bytes straight to the stream.
class SessionBulk final : public BulkChannel {
 public:
  // `lane`: the session's data lane, for a call whose request bytes come through it (in_lane)
  // or whose reply's may go through it (reply_in_lane); null otherwise.
  SessionBulk(ByteStream& stream, FrameReader& reader, CallExecutor& calls, const CallView& call,
              uint64_t sequence, ShmLane* lane, bool in_lane, bool reply_in_lane,
              ShmLane::KeepWaiting keep_waiting)
      : stream_(stream),
        reader_(reader),
        calls_(calls),
        call_(call),
        sequence_(sequence),
        lane_(lane),
        lane_in_(in_lane ? reader.lane_bytes() : 0),
        reply_in_lane_(reply_in_lane),
        keep_waiting_(std::move(keep_waiting)) {}

  uint64_t in_left() const override { return lane_ && lane_in_ ? lane_in_ : reader_.bulk_left(); }
  Status read_in(void* p, size_t n) override {
    if (!(lane_ && lane_in_)) return reader_.read_bulk(p, n);
    if (n > lane_in_) return Status::failed("read_in past the call's lane bytes");
    lane_in_ -= n;
    return lane_->consume(true, p, n, keep_waiting_);
  }
  // Request bytes the call did not take, dropped.
  Status skip_in() {
    if (lane_ && lane_in_) {
      const uint64_t n = lane_in_;
      lane_in_ = 0;
      return lane_->consume(true, nullptr, n, keep_waiting_);
    }
    return reader_.skip_bulk(reader_.bulk_left());
  }

  Status begin_reply(uint64_t bytes) override {
    if (begun_) return Status::failed("the reply began already");
    std::vector<uint8_t> msg;
    calls_.encode_streamed_reply(call_, &msg);
    FrameHeader h;
    h.type = static_cast<uint16_t>(FrameType::kReply);
    h.flags = kFlagResultTrailer | (reply_in_lane_ ? kFlagBulkInLane : 0);
    h.sequence = sequence_;
    h.message_bytes = static_cast<uint32_t>(msg.size());
    h.bulk_bytes = bytes + sizeof(ResultTrailer);
    const std::span<const uint8_t> pieces[2] = {{reinterpret_cast<const uint8_t*>(&h), sizeof h},
                                                msg};
    begun_ = true;
    promised_ = bytes;
    return stream_.write_all(pieces);
  }

  Status write_out(const void* p, size_t n) override {
    if (n > promised_ - written_) return Status::failed("more reply bytes than promised");
    written_ += n;
    if (reply_in_lane_) return lane_->produce(false, p, n, keep_waiting_);
    const std::span<const uint8_t> piece[1] = {{static_cast<const uint8_t*>(p), n}};
    return stream_.write_all(piece);
  }

  bool reply_begun() const override { return begun_; }

  // Ends a begun reply: the bytes it promised and did not write (a copy that failed part-way),
  // as zeros, then the result.
  Status finish(CUresult rc) {
    static const uint8_t kZeros[4096] = {};
    while (written_ < promised_) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(sizeof kZeros, promised_ - written_));
      if (Status s = write_out(kZeros, n); !s) return s;
    }
    ResultTrailer t;
    t.result = static_cast<uint32_t>(rc);
    const std::span<const uint8_t> piece[1] = {{reinterpret_cast<const uint8_t*>(&t), sizeof t}};
    return stream_.write_all(piece);
  }

 private:
  ByteStream& stream_;
  FrameReader& reader_;
  CallExecutor& calls_;
  const CallView& call_;
  uint64_t sequence_;
  bool begun_ = false;
  uint64_t promised_ = 0, written_ = 0;
  ShmLane* lane_;
  uint64_t lane_in_;
  bool reply_in_lane_;
  ShmLane::KeepWaiting keep_waiting_;
};

}  // namespace

void Session::serve() {
  CallExecutor calls(
      backend_, config_, tenant_, fmt::format("session {} ({})", id_, client_),
      [this](const std::string& line) { warn_limited(line); }, gpu_device_, shared_stats_);
  {
    std::lock_guard lock(info_mu_);
    calls.set_host_calls(host_calls_);
  }
  {
    std::lock_guard lock(info_mu_);
    if (info_) info_->stats = calls.stats();
  }
  if (!devices_.empty()) calls.set_devices(devices_);
  // Calls are read through a buffer: a client's batch of fire-and-forget calls arrives in one
  // read. Between calls the session polls briefly before it sleeps (SessionConfig::read_spin).
  FrameReader reader(*stream_);
  stream_->set_read_spin(config_.read_spin);
  Frame f;
  std::vector<uint8_t> msg;
  for (;;) {
    if (leave_if_draining()) break;
    Status s = reader.read_head(config_.limits, &f);
    const auto arrival = std::chrono::steady_clock::now();
    // A large copy's bytes stay on the connection for the call to take as it runs (streamed);
    // every other frame is read whole first.
    CallView call;
    const bool is_call = s && f.type() == FrameType::kCall && decode_call(f, &call);
    const bool stream_in = is_call && streams_request_bulk(call.call_id, f.header.bulk_bytes);
    // Bytes in the lane: only a copy that streams may bring them, and only with a lane.
    const bool in_lane = s && (f.header.flags & kFlagBulkInLane);
    if (in_lane && !(stream_in && lane_)) {
      reject(ErrorKind::kMalformedFrame,
             lane_ ? "lane bytes for a call that cannot take them" : "lane bytes without a lane");
      break;
    }
    if (s && !stream_in) s = reader.read_rest(&f);
    if (!s) {
      if (draining_) {
        going_away();
      } else if (stream_->timed_out()) {
        spdlog::info("session {} ({} {}): idle for the idle timeout of {}; closing", id_, peer_,
                     client_, millis(config_.idle_timeout));
        farewell(ErrorKind::kGoingAway, "idle for " + millis(config_.idle_timeout));
      } else if (s.code() == Status::Code::kDisconnected) {
        spdlog::info("session {} ({} {}): disconnected", id_, peer_, client_);
      } else {
        reject(kind_for(s), s.message());
      }
      break;
    }
    // A call that arrived after the drain began is not started.
    if (leave_if_draining()) break;
    if (f.type() == FrameType::kGoodbye) {
      spdlog::info("session {} ({} {}): goodbye", id_, peer_, client_);
      break;
    }
    if (f.type() != FrameType::kCall) {
      reject(ErrorKind::kUnexpected, "only Call and Goodbye frames may follow Hello");
      break;
    }
    if (!is_call) {
      Status d = decode_call(f, &call);
      reject(ErrorKind::kMalformedFrame, d.message());
      break;
    }
    const bool wants_reply = !(f.header.flags & kFlagNoReply);
    std::span<const uint8_t> reply_bulk;
    bool replied = false;
    if (stream_in || (wants_reply && streams_reply_bulk(call.call_id, call.args))) {
      const bool reply_in_lane = lane_ && wants_reply && (f.header.flags & kFlagReplyInLane);
      SessionBulk channel(*stream_, reader, calls, call, f.header.sequence, lane_.get(), in_lane,
                          reply_in_lane, [this] { return !stream_->peer_closed(); });
      const CUresult rc =
          calls.execute(call, f.bulk, wants_reply, &msg, &reply_bulk, arrival, &channel);
      // Request bytes the call did not take (it failed before it read them) are dropped.
      if (Status d = channel.skip_in(); !d) {
        spdlog::info("session {} ({} {}): disconnected: {}", id_, peer_, client_, d.message());
        break;
      }
      if (channel.reply_begun()) {
        if (Status w = channel.finish(rc); !w) {
          spdlog::info("session {} ({} {}): disconnected: {}", id_, peer_, client_, w.message());
          break;
        }
        replied = true;
      }
    } else {
      (void)Tenant::take_cap_refused();
      calls.execute(call, f.bulk, wants_reply, &msg, &reply_bulk, arrival);
    }
    if (wants_reply && !replied) {
      FrameHeader h;
      h.type = static_cast<uint16_t>(FrameType::kReply);
      h.sequence = f.header.sequence;
      if (Tenant::take_cap_refused()) h.flags |= kFlagCapReached;
      std::span<const uint8_t> bulk[1] = {reply_bulk};
      if (Status w = write_frame(*stream_, h, msg, bulk); !w) {
        if (stream_->timed_out()) {
          spdlog::info(
              "session {} ({} {}): the client did not take its reply within the idle "
              "timeout of {}; closing",
              id_, peer_, client_, millis(config_.idle_timeout));
        } else {
          spdlog::info("session {} ({} {}): disconnected: {}", id_, peer_, client_, w.message());
        }
        break;
      }
    }
    calls.release_large_buffers();
    release_if_large(&f.bulk);
    release_if_large(&f.message);
    release_if_large(&msg);
    retained_bytes_.store(f.bulk.capacity() + f.message.capacity() * sizeof(uint64_t) +
                              msg.capacity() + calls.retained_bytes(),
                          std::memory_order_relaxed);
  }
  // Before the session's streams go: a stream holding at a host function is let go, and the
  // host-call connection closes.
  close_host_calls();
  if (config_.host_calls) config_.host_calls->remove(id_);
  calls.finish();
}

}  // namespace cuwire::server
