#include "client-lib/core/connection.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>

#include "client-lib/calls/managed_memory.h"
#include "client-lib/core/call_stats.h"
#include "client-lib/core/client_state.h"
#include "client-lib/core/host_access.h"
#include "client-lib/core/token.h"
#include "protocol/address.h"
#include "protocol/image.h"
#include "protocol/inline_vector.h"
#include "protocol/messages.h"
#include "protocol/shm_lane.h"
#include "protocol/transport.h"

namespace cuwire::client {
namespace {

std::string program_name() {
  char buf[256] = {};
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "?";
  std::string path(buf, static_cast<size_t>(n));
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// One line on stderr, the only output the library makes; the app's own output stays clean.
void say(const std::string& line) { std::fprintf(stderr, "cuwire: %s\n", line.c_str()); }

std::string seconds_text(std::chrono::milliseconds t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(t.count()) / 1000.0);
  return buf;
}

void encode_hello_for(const ClientConfig& cfg, const std::string& name, bool probe,
                      std::vector<uint8_t>* out, bool lane = false) {
  HelloMsg hello;
  hello.lane = lane;
  hello.manifest_hash = kManifestHash;
  hello.client_name = name;
  hello.pid = static_cast<uint32_t>(getpid());
  hello.token = cfg.token;
  hello.probe = probe;
  encode_hello(hello, out);
}

// One connect and Hello, on a thread of its own so that the caller can stop waiting for it: a
// blackholed TCP address holds connect(2) for minutes (the kernel's SYN retries), and a server
// that accepts but never answers would hold the handshake forever. A dial given up on is left
// to end by itself: its stream, if it has one yet, is shut down, and whatever it opened closes
// when it returns.
struct Dial {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;           // guarded by mu
  bool abandoned = false;      // guarded by mu
  bool connected = false;      // guarded by mu
  ByteStream* open = nullptr;  // guarded by mu: the stream while the handshake runs
  Status status;               // guarded by mu, then the waiter's once done
  std::unique_ptr<ByteStream> stream;
  Frame answer;
};

// `lane_fd`: a data lane's memfd to pass right after the Hello (shm_lane.h), or -1; the dial
// owns it and closes it.
void run_dial(const std::shared_ptr<Dial>& d, const Address& addr, const std::string& ca_file,
              const std::vector<uint8_t>& hello, uint64_t sequence, int lane_fd) {
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) close(fd);
    }
  } closer{lane_fd};
  std::unique_ptr<ByteStream> stream;
  Status s = connect_stream(addr, {ca_file}, &stream);
  Frame f;
  if (s) {
    {
      std::lock_guard l(d->mu);
      if (d->abandoned) return;
      d->open = stream.get();
      d->connected = true;
    }
    FrameHeader h;
    h.type = static_cast<uint16_t>(FrameType::kHello);
    h.sequence = sequence;
    s = write_frame(*stream, h, hello);
    if (s && lane_fd >= 0) s = stream->send_fd(lane_fd);
    if (s) s = read_frame(*stream, FrameLimits{}, &f);
  }
  std::lock_guard l(d->mu);
  d->open = nullptr;
  d->status = s;
  d->stream = std::move(stream);
  d->answer = std::move(f);
  d->done = true;
  d->cv.notify_all();
}

// Starts a connect and Hello: on a thread of its own when `bounded` (and a thread is to be
// had), else here, done when this returns.
std::shared_ptr<Dial> start_dial(const Address& addr, const ClientConfig& cfg,
                                 const std::vector<uint8_t>& hello, uint64_t sequence, bool bounded,
                                 int lane_fd = -1) {
  auto d = std::make_shared<Dial>();
  if (bounded) {
    try {
      std::thread([d, addr, ca = cfg.ca_file, hello, sequence, lane_fd] {
        run_dial(d, addr, ca, hello, sequence, lane_fd);
      }).detach();
      return d;
    } catch (const std::system_error&) {
      // No thread to spare: dial here, unbounded, as without a limit.
    }
  }
  run_dial(d, addr, cfg.ca_file, hello, sequence, lane_fd);
  return d;
}

// Waits for a started dial until `deadline` (`limit` after it started, for the message), then
// gives it up. *answer is the server's first frame; *connected tells a failure to connect from
// one during the handshake.
Status finish_dial(Dial& d, std::chrono::steady_clock::time_point deadline,
                   std::chrono::milliseconds limit, std::unique_ptr<ByteStream>* out, Frame* answer,
                   bool* connected) {
  std::unique_lock l(d.mu);
  if (!d.cv.wait_until(l, deadline, [&] { return d.done; })) {
    d.abandoned = true;
    if (d.open) d.open->shutdown();
    *connected = d.connected;
    return Status::disconnected("no answer within " + seconds_text(limit) + " (timed out)");
  }
  *connected = d.connected;
  if (!d.status) return d.status;
  *out = std::move(d.stream);
  *answer = std::move(d.answer);
  return Status::ok();
}

// Connects and sends Hello (and a lane's memfd, which the dial takes), within `limit` (zero:
// no limit).
Status dial(const Address& addr, const ClientConfig& cfg, const std::vector<uint8_t>& hello,
            uint64_t sequence, std::chrono::milliseconds limit, std::unique_ptr<ByteStream>* out,
            Frame* answer, bool* connected, int lane_fd = -1) {
  auto d = start_dial(addr, cfg, hello, sequence, limit.count() > 0, lane_fd);
  return finish_dial(*d, std::chrono::steady_clock::now() + limit, limit, out, answer, connected);
}

// What kept a dial to `server` from a Welcome, as one sentence naming the server; empty when
// the server answered with one, decoded into *w.
std::string dial_problem(const std::string& server, const Status& s, bool connected, const Frame& f,
                         WelcomeMsg* w) {
  if (!s) {
    return (connected ? "handshake with gpu-server at " + server + " failed: "
                      : "cannot reach gpu-server at " + server + ": ") +
           s.message();
  }
  if (f.type() == FrameType::kError) {
    ErrorMsg e;
    decode_error(f, &e);
    return "gpu-server at " + server + " refused the connection: " + error_kind_name(e.kind) +
           ": " + e.message;
  }
  if (Status d = decode_welcome(f, w); !d) {
    return "gpu-server at " + server + " answered Hello with something else: " + d.message();
  }
  return "";
}

// Goodbye on a connection the server made a session of, so its log says "goodbye" instead of
// a dropped connection.
void say_goodbye(ByteStream& stream, uint64_t sequence) {
  FrameHeader h;
  h.type = static_cast<uint16_t>(FrameType::kGoodbye);
  h.sequence = sequence;
  (void)write_frame(stream, h, {});
}

// Several servers: probes them all at once, each within the connect timeout, for their room
// for this client's tenant. Returns the indices of those with room, best first by the policy
// that the first in the list to name one reports (the servers apply it, so the client does):
// spread, the most memory left (then the fewest sessions); binpack, the least memory left
// that still fits. Ties keep list order; servers that give no figures (they place no session,
// or are older than probes) come after those that do. why[i] gets a sentence for each server
// left out.
std::vector<size_t> rank_by_room(const std::vector<ListedAddress>& servers, const ClientConfig& cfg,
                                 std::vector<std::string>* why) {
  std::vector<uint8_t> hello;
  encode_hello_for(cfg, program_name(), true, &hello);
  const std::chrono::milliseconds limit = cfg.connect_timeout();
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<std::shared_ptr<Dial>> dials;
  for (const ListedAddress& e : servers)
    dials.push_back(start_dial(e.address, cfg, hello, 1, true));
  // figures: the server's room holds placement's figures (it places sessions, and knows probes).
  struct Answer {
    bool figures = false;
    RoomMsg room;
  };
  std::vector<Answer> answers(servers.size());
  std::vector<size_t> fitting;
  std::string policy;
  why->assign(servers.size(), "");
  for (size_t i = 0; i < servers.size(); ++i) {
    std::unique_ptr<ByteStream> stream;
    Frame f;
    bool connected = false;
    WelcomeMsg w;
    const Status s = finish_dial(*dials[i], deadline, limit, &stream, &f, &connected);
    (*why)[i] = dial_problem(servers[i].text, s, connected, f, &w);
    if (!(*why)[i].empty()) continue;
    if (!w.has_room) {
      // A server older than probes took the probe for a session: it has room, figures unknown.
      say_goodbye(*stream, 2);
      fitting.push_back(i);
      continue;
    }
    if (policy.empty()) policy = w.room.placement;
    if (!w.room.fits) {
      (*why)[i] = "gpu-server at " + servers[i].text +
                  " has no room: " + (w.room.why.empty() ? "it did not say why" : w.room.why);
      continue;
    }
    answers[i].figures = !w.room.placement.empty();
    answers[i].room = std::move(w.room);
    fitting.push_back(i);
  }
  const bool binpack = policy == "binpack";
  std::stable_sort(fitting.begin(), fitting.end(), [&](size_t a, size_t b) {
    if (answers[a].figures != answers[b].figures) return answers[a].figures;
    if (!answers[a].figures) return false;
    const RoomMsg &ra = answers[a].room, &rb = answers[b].room;
    if (binpack) return ra.memory_left < rb.memory_left;
    if (ra.memory_left != rb.memory_left) return ra.memory_left > rb.memory_left;
    return ra.sessions < rb.sessions;
  });
  return fitting;
}

// A whole number of microseconds from the environment, at most a second; `fallback` when unset
// or not such a number (said once).
std::chrono::microseconds micros_from_environment(const char* name,
                                                  std::chrono::microseconds fallback) {
  const char* t = std::getenv(name);
  if (!t || !*t) return fallback;
  char* end = nullptr;
  const long long v = std::strtoll(t, &end, 10);
  if (end == t || *end != '\0' || v < 0 || v > 1'000'000) {
    say(std::string(name) + "=" + t + " is not a number of microseconds (0 to 1000000); using " +
        std::to_string(fallback.count()));
    return fallback;
  }
  return std::chrono::microseconds(v);
}

}  // namespace

ClientConfig config_from_environment() {
  ClientConfig c;
  const char* s = std::getenv("CUWIRE_SERVER");
  c.server = s && *s ? s : kDefaultAddress;
  // A grant directory's server goes with its token (token.h).
  const Credentials credentials = credentials_from_environment();
  c.token = credentials.token;
  if (!credentials.server.empty()) c.server = credentials.server;
  if (const char* ca = std::getenv("CUWIRE_CA")) c.ca_file = ca;
  if (const char* t = std::getenv("CUWIRE_TIMEOUT"); t && *t) {
    char* end = nullptr;
    double secs = std::strtod(t, &end);
    if (end == t || *end != '\0' || !(secs >= 0) || secs > 1e9) {
      say(std::string("CUWIRE_TIMEOUT=") + t + " is not a number of seconds; using " +
          seconds_text(c.timeout));
    } else {
      // A positive value never rounds down to zero, which would mean no limit at all.
      const long long ms = std::llround(secs * 1000);
      c.timeout = std::chrono::milliseconds(secs > 0 ? std::max(ms, 1LL) : 0);
    }
  }
  if (const char* l = std::getenv("CUWIRE_SHM_LANE"); l && std::string(l) == "0")
    c.shm_lane = false;
  c.batch_delay = micros_from_environment("CUWIRE_BATCH_US", c.batch_delay);
  c.reply_spin = micros_from_environment("CUWIRE_SPIN_US", c.reply_spin);
  // One processor: a poll would only keep the server from answering.
  if (std::thread::hardware_concurrency() == 1) c.reply_spin = std::chrono::microseconds(0);
  return c;
}

std::chrono::milliseconds ClientConfig::connect_timeout() const {
  return timeout.count() == 0 ? kMaxConnectTime : std::min(timeout, kMaxConnectTime);
}

namespace {
thread_local bool t_host_call_thread = false;
thread_local Connection* t_bound = nullptr;  // a session connection (Connection::bind)
}  // namespace

bool on_host_call_thread() { return t_host_call_thread; }
void mark_host_call_thread() { t_host_call_thread = true; }

struct Connection::ReplyCache {
  std::mutex mu;
  std::unordered_map<std::string, std::vector<uint8_t>> replies;  // guarded by mu
};

Connection::Connection() : replies_(std::make_shared<ReplyCache>()) {}

Connection& Connection::get() {
  if (t_bound) return *t_bound;
  // Leaked on purpose: app threads and atexit handlers (cudart's among them) may still call
  // into the driver while static destructors run.
  static Connection* c = new Connection();
  return *c;
}

std::shared_ptr<Connection> Connection::make_session() {
  std::shared_ptr<Connection> c(new Connection());
  c->session_ = true;
  return c;
}

void Connection::bind(Connection* c) { t_bound = c; }

std::shared_ptr<Connection> Connection::keep_alive() {
  return session_ ? shared_from_this() : nullptr;
}

void Connection::close() {
  reset();
  {
    std::lock_guard lock(io_mu_);
    tried_ = true;  // never again: every call answers as a lost connection's would
    failure_ = CUDA_ERROR_DEVICE_UNAVAILABLE;
    state_.store(failure_, std::memory_order_release);
  }
  {
    std::lock_guard o(out_mu_);
    std::lock_guard w(wd_mu_);
    closing_ = true;
  }
  out_cv_.notify_all();
  wd_cv_.notify_all();
}

CUresult Connection::ensure_connected() {
  std::lock_guard lock(io_mu_);
  return connect_locked();
}

CUresult Connection::connect_locked() {
  if (stream_) return CUDA_SUCCESS;
  if (tried_) return failure_;
  tried_ = true;
  config_ = config_from_environment();
  // Until the handshake succeeds the driver behaves as one with no device.
  failure_ = CUDA_ERROR_NO_DEVICE;
  state_.store(failure_, std::memory_order_release);
  std::vector<ListedAddress> servers;
  if (Status s = parse_address_list(config_.server, &servers); !s) {
    say("CUWIRE_SERVER: " + s.message());
    return failure_;
  }
  if (servers.size() == 1) {
    // One server: no probe, straight to the session.
    std::string why;
    if (!open_session(servers[0].text, servers[0].address, &why)) {
      say(why);
      return failure_;
    }
  } else {
    std::vector<std::string> why;
    bool opened = false;
    // A server may fill up between its probe and the session: then the next best is tried.
    for (size_t i : rank_by_room(servers, config_, &why)) {
      if ((opened = open_session(servers[i].text, servers[i].address, &why[i]))) break;
    }
    if (!opened) {
      std::string all;
      for (const std::string& w : why) all += (all.empty() ? "" : "; ") + w;
      say("no gpu-server in CUWIRE_SERVER can take a session: " + all);
      return failure_;
    }
  }
  install_stats_report();
  failure_ = CUDA_SUCCESS;
  state_.store(CUDA_SUCCESS, std::memory_order_release);
  return CUDA_SUCCESS;
}

bool Connection::open_session(const std::string& text, const Address& addr, std::string* why) {
  // On the server's host (a Unix socket), a shared-memory lane for large copies' bytes.
  std::unique_ptr<ShmLane> lane;
  int lane_fd = -1;
  if (addr.kind == Address::Kind::kUnix && config_.shm_lane) {
    if (Status l = ShmLane::create(&lane, &lane_fd); !l) lane.reset();
  }
  encode_hello_for(config_, program_name(), false, &msg_, lane != nullptr);
  std::unique_ptr<ByteStream> stream;
  Frame f;
  bool connected = false;
  WelcomeMsg w;
  uint64_t seq;
  {
    std::lock_guard o(out_mu_);
    seq = next_seq_++;
  }
  // A refusal that says to try again shortly (a burst of this peer's connections past the
  // server's per-peer bound on handshakes, which clears in milliseconds) is tried again, backing
  // off, within the connect timeout: many processes of one user starting at once all get their
  // sessions. Other refusals go on to the next server at once.
  const auto deadline = std::chrono::steady_clock::now() + config_.connect_timeout();
  auto pause = std::chrono::milliseconds(2);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    // Each dial takes a descriptor of the lane of its own (and closes it): a try after a
    // refusal must not pass, or close, a number the first try closed and this process may
    // have given to another file since.
    int dial_lane = lane_fd >= 0 ? fcntl(lane_fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (lane_fd >= 0 && dial_lane < 0) {
      // No descriptor to spare: this session goes without a lane (its Hello says so).
      ::close(lane_fd);
      lane_fd = -1;
      lane.reset();
      encode_hello_for(config_, program_name(), false, &msg_, false);
    }
    const Status s = dial(addr, config_, msg_, seq, std::max(left, std::chrono::milliseconds(1)),
                          &stream, &f, &connected, dial_lane);
    *why = dial_problem(text, s, connected, f, &w);
    if (why->empty()) break;
    const bool again = s && f.type() == FrameType::kError &&
                       why->find("try again shortly") != std::string::npos &&
                       std::chrono::steady_clock::now() + pause < deadline;
    if (!again) {
      if (lane_fd >= 0) ::close(lane_fd);
      return false;
    }
    std::this_thread::sleep_for(pause + std::chrono::milliseconds(getpid() % 3));
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
    stream.reset();
  }
  if (lane_fd >= 0) ::close(lane_fd);
  lane_ = w.lane ? std::move(lane) : nullptr;
  address_ = text;
  session_id_ = w.session_id;
  host_call_key_ = w.host_call_key;
  generation_.fetch_add(1, std::memory_order_acq_rel);
  backend_ = w.backend;
  stream_ = std::move(stream);
  stream_->set_read_spin(config_.reply_spin);
  reader_ = std::make_unique<FrameReader>(*stream_);
  if (!sending_) sending_ = std::make_unique_for_overwrite<uint8_t[]>(kBatchBytes);
  {
    std::lock_guard o(out_mu_);
    if (!out_) out_ = std::make_unique_for_overwrite<uint8_t[]>(kBatchBytes);
    out_size_ = 0;
  }
  connected_.store(true, std::memory_order_release);
  std::lock_guard l(wd_mu_);
  live_server_ = addr;
  return true;
}

CUresult Connection::open_host_calls(std::unique_ptr<ByteStream>* out, uint64_t* generation) {
  HelloMsg hello;
  std::string server;
  Address addr;
  {
    std::lock_guard lock(io_mu_);
    if (CUresult e = connect_locked()) return e;
    *generation = generation_.load(std::memory_order_acquire);
    if (host_call_key_.empty()) return CUDA_ERROR_NOT_SUPPORTED;
    hello.host_calls = true;
    hello.host_call_session = session_id_;
    hello.host_call_key = host_call_key_;
    server = address_;
    std::lock_guard l(wd_mu_);
    addr = live_server_;
  }
  hello.manifest_hash = kManifestHash;
  hello.client_name = program_name();
  hello.pid = static_cast<uint32_t>(getpid());
  hello.token = config_.token;
  std::vector<uint8_t> msg;
  encode_hello(hello, &msg);
  Frame f;
  bool connected = false;
  WelcomeMsg w;
  const Status s = dial(addr, config_, msg, 1, config_.connect_timeout(), out, &f, &connected);
  if (std::string why = dial_problem(server, s, connected, f, &w); !why.empty()) {
    static std::once_flag said;
    std::call_once(said, [&] {
      say(why + " (host-call connection); host functions run on the enqueuing thread");
    });
    out->reset();
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

void Connection::drop_stream_locked() {
  connected_.store(false, std::memory_order_release);
  {
    std::lock_guard o(out_mu_);
    out_size_ = 0;
  }
  if (stream_) stream_->shutdown();
  reader_.reset();
  lane_.reset();
  stream_.reset();
}

void Connection::reset() {
  {
    // What the session was told goes with it.
    std::lock_guard lock(replies_->mu);
    replies_->replies.clear();
  }
  std::lock_guard lock(io_mu_);
  unwatch();
  drop_stream_locked();
  tried_ = false;
  failure_ = CUDA_SUCCESS;
  state_.store(CUDA_SUCCESS, std::memory_order_release);
}

CUresult Connection::lost_locked(const std::string& why) {
  // Before the stream goes: the watchdog must not touch it after this.
  const bool timed_out = unwatch();
  say("lost gpu-server at " + address_ + ": " + (timed_out ? timed_out_text() : why));
  drop_stream_locked();  // calls still buffered are lost with the server
  // The device is gone for good for this process: CUDA reports such a loss this way.
  failure_ = CUDA_ERROR_DEVICE_UNAVAILABLE;
  state_.store(failure_, std::memory_order_release);
  return failure_;
}

bool Connection::append_locked(const ArgWriter& w, uint16_t flags, uint64_t* seq, bool copy_bulk) {
  const size_t message = call_message_bytes(w.args().size());
  uint64_t bulk = 0;
  for (auto b : w.bulk()) bulk += b.size();
  const size_t frame = sizeof(FrameHeader) + message + (copy_bulk ? bulk : 0);
  if (frame > kBatchBytes - out_size_) return false;
  FrameHeader h;
  h.type = static_cast<uint16_t>(FrameType::kCall);
  h.flags = flags;
  h.message_bytes = static_cast<uint32_t>(message);
  h.bulk_bytes = bulk;
  h.sequence = *seq = next_seq_++;
  uint8_t* p = out_.get() + out_size_;
  std::memcpy(p, &h, sizeof h);
  encode_call_into(w.id(), current_context_id(), w.args(), p + sizeof h);
  p += sizeof h + message;
  if (copy_bulk) {
    for (auto b : w.bulk()) {
      if (!b.empty()) std::memcpy(p, b.data(), b.size());
      p += b.size();
    }
  }
  out_size_ += frame;
  return true;
}

CUresult Connection::flush_locked(std::span<const std::span<const uint8_t>> tail) {
  size_t n = 0;
  {
    std::lock_guard o(out_mu_);
    n = out_size_;
    if (n) out_.swap(sending_);
    out_size_ = 0;
  }
  if (n == 0 && tail.empty()) return CUDA_SUCCESS;
  watch(stream_.get());
  Status s;
  if (tail.empty()) {
    const std::span<const uint8_t> piece[1] = {{sending_.get(), n}};
    s = stream_->write_all(piece);
  } else {
    constexpr size_t kInline = 8;
    std::span<const uint8_t> inline_pieces[kInline];
    std::vector<std::span<const uint8_t>> heap;
    std::span<const uint8_t>* pieces = inline_pieces;
    if (tail.size() + 1 > kInline) {
      heap.resize(tail.size() + 1);
      pieces = heap.data();
    }
    pieces[0] = {sending_.get(), n};
    for (size_t i = 0; i < tail.size(); ++i) pieces[1 + i] = tail[i];
    s = stream_->write_all({pieces, tail.size() + 1});
  }
  if (!s) return lost_locked(farewell_locked(s.message()));
  return CUDA_SUCCESS;
}

std::string Connection::farewell_locked(const std::string& why) {
  // A write fails when the server has closed the connection; what it said before closing (why
  // it ended the session: evicted, its tenant removed, shutting down) may wait unread.
  if (!stream_ || !reader_ || stream_->timed_out()) return why;
  StreamTimeouts t;
  t.deadline = StreamTimeouts::Clock::now() + std::chrono::milliseconds(200);
  stream_->set_timeouts(t);
  Frame f;
  for (int frames = 0; frames < 64; ++frames) {
    if (Status s = reader_->read_head(limits_, &f); !s) break;
    if (f.type() == FrameType::kError) {
      ErrorMsg e;
      decode_error(f, &e);
      if (e.kind == ErrorKind::kGoingAway && !e.message.empty()) return e.message;
      break;
    }
    if (f.header.bulk_bytes && !reader_->skip_bulk(f.header.bulk_bytes)) break;
  }
  return why;
}

namespace {
bool is_call(uint32_t id, CallId a, CallId b) {
  return id == static_cast<uint32_t>(a) || id == static_cast<uint32_t>(b);
}
}  // namespace

CUresult Connection::send_now_locked(const ArgWriter& w, uint16_t flags, uint64_t* seq) {
  if (CUresult e = connect_locked()) return e;
  const size_t message = call_message_bytes(w.args().size());
  if (message > limits_.max_message_bytes) return CUDA_ERROR_INVALID_VALUE;
  uint64_t bulk = 0;
  for (auto b : w.bulk()) bulk += b.size();
  if (lane_) {
    // A large copy's bytes through the lane: the frame first, then the bytes, in its order.
    if (bulk >= ShmLane::kMinCopyBytes &&
        is_call(w.id(), CallId::k_cuMemcpyHtoD_v2, CallId::k_cuMemcpyHtoDAsync_v2)) {
      if (CUresult e = send_frame_locked(w, flags | kFlagBulkInLane, seq, false)) return e;
      ByteStream* stream = stream_.get();
      for (auto b : w.bulk()) {
        if (Status s = lane_->produce(true, b.data(), b.size(),
                                      [stream] { return !stream->peer_closed(); });
            !s) {
          return lost_locked(s.message());
        }
      }
      return CUDA_SUCCESS;
    }
    uint64_t reply = 0;
    for (const BulkTarget& t : w.reply_bulk()) reply += t.size;
    if (reply >= ShmLane::kMinCopyBytes &&
        is_call(w.id(), CallId::k_cuMemcpyDtoH_v2, CallId::k_cuMemcpyDtoHAsync_v2)) {
      flags |= kFlagReplyInLane;
    }
  }
  return send_frame_locked(w, flags, seq, bulk <= kInlineBulk);
}

CUresult Connection::send_frame_locked(const ArgWriter& w, uint16_t flags, uint64_t* seq,
                                       bool copy_bulk) {
  const size_t message = call_message_bytes(w.args().size());
  uint64_t bulk = 0;
  for (auto b : w.bulk()) bulk += b.size();
  const bool lane_bulk = flags & kFlagBulkInLane;
  for (;;) {
    bool alone = false;
    {
      std::lock_guard o(out_mu_);
      if (append_locked(w, flags, seq, copy_bulk)) break;
      // Larger than the buffer itself (arguments of hundreds of KiB): a frame of its own, once
      // the buffer is empty. Calls appended after this point go out after it (io_mu_ is ours).
      if (out_size_ == 0) {
        alone = true;
        *seq = next_seq_++;
      }
    }
    if (alone) {
      FrameHeader h;
      h.type = static_cast<uint16_t>(FrameType::kCall);
      h.flags = flags;
      h.message_bytes = static_cast<uint32_t>(message);
      h.bulk_bytes = bulk;
      h.sequence = *seq;
      msg_.resize(sizeof h + message);
      std::memcpy(msg_.data(), &h, sizeof h);
      encode_call_into(w.id(), current_context_id(), w.args(), msg_.data() + sizeof h);
      watch(stream_.get());
      InlineVector<std::span<const uint8_t>, 4> pieces;
      pieces.push_back({msg_.data(), msg_.size()});
      if (!lane_bulk) {
        for (auto b : w.bulk()) pieces.push_back(b);
      }
      if (Status s = stream_->write_all(pieces.span()); !s) {
        return lost_locked(farewell_locked(s.message()));
      }
      return CUDA_SUCCESS;
    }
    if (CUresult e = flush_locked()) return e;
  }
  return flush_locked(copy_bulk || lane_bulk ? std::span<const std::span<const uint8_t>>{}
                                             : w.bulk());
}

CUresult Connection::send_async(const ArgWriter& w) {
  if (on_host_call_thread()) return CUDA_ERROR_NOT_PERMITTED;
  // config_ is written before connected_ is first set, and read-only after.
  if (connected_.load(std::memory_order_acquire) && config_.batch_delay.count() > 0) {
    uint64_t bulk = 0;
    for (auto b : w.bulk()) bulk += b.size();
    if (bulk <= kInlineBulk) {
      std::unique_lock o(out_mu_);
      uint64_t seq;
      // A lost connection clears connected_ under io_mu_ and empties the buffer under out_mu_;
      // a call appended in between is dropped with the rest, as calls in flight are.
      if (append_locked(w, kFlagNoReply, &seq, true)) {
        if (out_size_ ==
            static_cast<size_t>(sizeof(FrameHeader)) + call_message_bytes(w.args().size()) + bulk) {
          // The first call of a batch: the flusher sends it within batch_delay.
          first_buffered_ = std::chrono::steady_clock::now();
          if (!flusher_started_) start_flusher_locked();
          if (flusher_waiting_) out_cv_.notify_one();
        }
        return CUDA_SUCCESS;
      }
      // Full: written below, with this call at its end.
    }
  }
  std::lock_guard lock(io_mu_);
  uint64_t seq;
  if (CUresult e = send_now_locked(w, kFlagNoReply, &seq)) return e;
  // The watchdog shut the stream down just as the write finished.
  if (unwatch()) return lost_locked("");
  return CUDA_SUCCESS;
}

void Connection::start_flusher_locked() {
  try {
    std::thread([this, keep = keep_alive()] { run_flusher(); }).detach();
    flusher_started_ = true;
  } catch (const std::system_error&) {
    // No thread to spare: calls wait for the next call that needs an answer, or a full buffer;
    // tried again at the next batch.
  }
}

void Connection::run_flusher() {
  // The batch bound is tens of microseconds: the default timer slack (50 us) would double it.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  std::unique_lock o(out_mu_);
  for (;;) {
    flusher_waiting_ = true;
    out_cv_.wait(o, [&] { return out_size_ > 0 || closing_; });
    flusher_waiting_ = false;
    if (closing_) return;
    const auto due = first_buffered_ + config_.batch_delay;
    o.unlock();
    std::this_thread::sleep_until(due);
    {
      std::lock_guard lock(io_mu_);
      // A call that needed an answer may have sent the batch meanwhile: then nothing is left.
      // Without a connection (lost as the calls were buffered) they are dropped, as calls in
      // flight are.
      if (!stream_) {
        std::lock_guard o2(out_mu_);
        out_size_ = 0;
      } else if (flush_locked() == CUDA_SUCCESS && unwatch()) {
        lost_locked("");
      }
    }
    o.lock();
  }
}

CUresult Connection::round_trip(const ArgWriter& w, OutReader* out) {
  if (on_host_call_thread()) return CUDA_ERROR_NOT_PERMITTED;
  std::lock_guard lock(io_mu_);
  uint64_t seq;
  if (CUresult e = send_now_locked(w, 0, &seq)) return e;
  // While the server works: a destination that cannot take the reply's bytes has them dropped.
  const bool writable = w.destinations_writable();
  FrameHeader& h = reply_.header;
  if (Status s = reader_->read_head(limits_, &reply_); !s) {
    return s.code() == Status::Code::kDisconnected ? lost_locked(s.message())
                                                   : lost_locked(s.to_string());
  }
  if (reply_.type() == FrameType::kError) {
    ErrorMsg e;
    decode_error(reply_, &e);
    // The server ended the session and says why (evicted by its admin, its tenant removed,
    // shutting down): that sentence alone.
    if (e.kind == ErrorKind::kGoingAway && !e.message.empty()) return lost_locked(e.message);
    return lost_locked(std::string("server error: ") + error_kind_name(e.kind) + ": " + e.message);
  }
  if (reply_.type() != FrameType::kReply || h.sequence != seq) {
    return lost_locked("reply out of order");
  }
  if (h.flags & kFlagCapReached) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      say("an allocation was refused: this program's tenant has reached its memory cap on "
          "gpu-server at " +
          address_ + " (CUDA_ERROR_OUT_OF_MEMORY; `cuwire smi` shows the cap)");
    }
  }
  // Bulk bytes go straight to the app's buffers (checked writable above); a reply carries all
  // of them or none, then, when streamed, its result.
  ResultTrailer trailer;
  const bool has_trailer = h.flags & kFlagResultTrailer;
  if (h.flags & kFlagBulkInLane) {
    // The bytes came through the lane; the trailer follows on the socket.
    uint64_t want = 0;
    for (auto& t : w.reply_bulk()) want += t.size;
    if (!lane_ || !has_trailer || reader_->lane_bytes() != want) {
      return lost_locked("reply bytes in a lane that was not asked for");
    }
    ByteStream* stream = stream_.get();
    for (auto& t : w.reply_bulk()) {
      if (Status s = lane_->consume(false, writable ? t.data : nullptr, t.size,
                                    [stream] { return !stream->peer_closed(); });
          !s) {
        return lost_locked(s.message());
      }
    }
    if (Status s = reader_->read_bulk(&trailer, sizeof trailer); !s)
      return lost_locked(s.message());
  } else if (h.bulk_bytes) {
    uint64_t want = has_trailer ? sizeof trailer : 0;
    for (auto& t : w.reply_bulk()) want += t.size;
    if (h.bulk_bytes != want) return lost_locked("reply bulk size mismatch");
    for (auto& t : w.reply_bulk()) {
      Status s = writable ? reader_->read_bulk(t.data, t.size) : reader_->skip_bulk(t.size);
      if (!s) return lost_locked(s.message());
    }
    if (has_trailer) {
      if (Status s = reader_->read_bulk(&trailer, sizeof trailer); !s) {
        return lost_locked(s.message());
      }
    }
  } else if (has_trailer) {
    return lost_locked("reply without its result trailer");
  }
  // The reply is all here, but the watchdog shut the stream down as it came: later calls fail.
  if (unwatch()) lost_locked("");
  ReplyView r;
  if (Status d = decode_reply(reply_, &r); !d) return lost_locked(d.message());
  out->buffer().assign(r.outs.begin(), r.outs.end());
  if (!r.device_output.empty()) {
    // Device printf, as the driver does at a synchronizing call: after whatever the app
    // printed before it, so flush the app's buffered stdout first.
    std::fflush(stdout);
    std::fwrite(r.device_output.data(), 1, r.device_output.size(), stdout);
    std::fflush(stdout);
  }
  if (!writable) return CUDA_ERROR_INVALID_VALUE;
  if (has_trailer && trailer.result != CUDA_SUCCESS) return static_cast<CUresult>(trailer.result);
  return static_cast<CUresult>(r.result);
}

// ---------------------------------------------------------------------------------------------
// The watchdog (connection.h: Timeouts). It never wakes per call: a watched call's deadline is
// always later than the watchdog's next wake-up, which then sleeps on to that deadline.

void Connection::watch(ByteStream* stream) {
  if (config_.timeout.count() == 0) return;
  std::lock_guard l(wd_mu_);
  watched_ = stream;
  ++watch_count_;
  fired_ = false;
  deadline_ = std::chrono::steady_clock::now() + config_.timeout;
  if (!wd_started_) {
    try {
      std::thread([this, keep = keep_alive()] { run_watchdog(); }).detach();
      wd_started_ = true;
    } catch (const std::system_error&) {
      // No thread to spare: calls wait without a limit, as with CUWIRE_TIMEOUT=0; tried again
      // at the next call.
    }
  }
}

bool Connection::unwatch() {
  if (config_.timeout.count() == 0) return false;
  std::lock_guard l(wd_mu_);
  watched_ = nullptr;
  return fired_;
}

void Connection::run_watchdog() {
  std::unique_lock l(wd_mu_);
  for (;;) {
    if (closing_) return;
    if (!watched_) {
      wd_cv_.wait_for(l, config_.timeout);
      continue;
    }
    if (std::chrono::steady_clock::now() < deadline_) {
      wd_cv_.wait_until(l, deadline_);
      continue;
    }
    const uint64_t call = watch_count_;
    const Address server = live_server_;
    l.unlock();
    const bool alive = server_answers(server, config_.timeout);
    l.lock();
    if (!watched_ || watch_count_ != call) continue;  // that call is over
    if (alive) {
      deadline_ = std::chrono::steady_clock::now() + config_.timeout;
      continue;
    }
    fired_ = true;
    // Wakes the read or write blocked on it; the calling thread then reports the loss. The
    // stream is alive: it goes only after unwatch(), which waits for wd_mu_.
    watched_->shutdown();
    watched_ = nullptr;
  }
}

bool Connection::server_still_answers() {
  Address server;
  {
    std::lock_guard l(wd_mu_);
    server = live_server_;
  }
  if (server.to_string().empty()) return false;
  return server_answers(server, config_.connect_timeout());
}

bool Connection::server_answers(const Address& server, std::chrono::milliseconds timeout) {
  std::vector<uint8_t> hello;
  // A probe: answered as a session's Hello would be, and no session is made of it.
  encode_hello_for(config_, program_name() + " (liveness check)", true, &hello);
  std::unique_ptr<ByteStream> stream;
  Frame f;
  bool connected = false;
  if (!dial(server, config_, hello, 1, timeout, &stream, &f, &connected)) return false;
  // Any answer, even a refusal, shows the server at work. A server older than probes made a
  // session of it.
  WelcomeMsg w;
  if (f.type() == FrameType::kWelcome && decode_welcome(f, &w) && !w.has_room) {
    say_goodbye(*stream, 2);
  }
  return true;
}

std::string Connection::timed_out_text() const {
  const std::string t = seconds_text(config_.timeout);
  return "timed out: no reply within " + t + ", and no answer to a fresh connection within " + t +
         " either (CUWIRE_TIMEOUT)";
}

// ---------------------------------------------------------------------------------------------
// client_call.h

void OutReader::take(void* p, size_t n) {
  if (n == 0) return;  // an empty array may come with a null pointer
  if (!ok_ || n > bytes_.size() - pos_) {
    ok_ = false;
    return;
  }
  std::memcpy(p, bytes_.data() + pos_, n);
  pos_ += n;
}

namespace {
uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}
}  // namespace

// The app's host buffers of a call (client-lib/core/host_access.h), checked before any byte of its
// frame is written: after managed::before_call, which unprotects managed pages a reply is written
// into. Pinned memory the library allocated needs no asking: it is mapped read-write.
CUresult ArgWriter::check_host_buffers() const {
  if (!app_bulk_.empty()) {
    HostPageProbe readable(HostAccess::kRead);
    for (auto piece : app_bulk_) {
      if (!in_library_host_memory(piece.data(), piece.size())) {
        readable.add(piece.data(), piece.size());
      }
    }
    if (!readable.ok()) return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

bool ArgWriter::destinations_writable() const {
  if (reply_bulk_.empty()) return true;
  HostPageProbe writable(HostAccess::kReadWrite);
  for (const BulkTarget& t : reply_bulk_) {
    if (!in_library_host_memory(t.data, t.size)) writable.add(t.data, t.size);
  }
  return writable.ok();
}

// Managed memory (managed_memory.h): host writes reach the device before any call, device
// writes come back after a synchronising one.
CUresult ArgWriter::call(OutReader* out) {
  CaptureCallGate gate;
  if (CUresult e = check_unsafe_in_capture(id_)) return e;
  if (CUresult e = managed::before_call(*this)) return e;
  if (CUresult e = check_host_buffers()) return e;
  uint64_t t0 = now_ns();
  CUresult rc = Connection::get().round_trip(*this, out);
  record_call(id_, now_ns() - t0, CallKind::kRoundTrip, bulk_bytes());
  return managed::after_call(id_, rc);
}

namespace {
std::atomic<bool> g_answer_every_call{false};
}  // namespace

void set_answer_every_call(bool on) { g_answer_every_call.store(on); }

CUresult ArgWriter::send_async() {
  if (g_answer_every_call.load(std::memory_order_relaxed)) {
    OutReader unused;
    return call(&unused);
  }
  CaptureCallGate gate;
  if (CUresult e = managed::before_call(*this)) return e;
  if (CUresult e = check_host_buffers()) return e;
  const uint64_t t0 = call_ticks();
  CUresult rc = Connection::get().send_async(*this);
  record_call(id_, ticks_to_ns(call_ticks() - t0), CallKind::kAsync, bulk_bytes());
  return rc;
}

namespace {

// The PTX libcuwire_nvrtc.so (nvrtc_shim.cc, preloaded by `cuwire run`) kept for a CUBIN that
// NVRTC made in this process, when the backend runs PTX only (the sim); else null.
const char* nvrtc_ptx_for(const void* img, size_t n) {
  using Lookup = const char* (*)(const void*, size_t);
  static const auto lookup =
      reinterpret_cast<Lookup>(dlsym(RTLD_DEFAULT, "cuwire_nvrtc_ptx_of_cubin"));
  if (!lookup || n < 4 ||
      std::memcmp(img,
                  "\x7f"
                  "ELF",
                  4) != 0)
    return nullptr;
  if (Connection::get().backend() != "sim") return nullptr;
  return lookup(img, n);
}

}  // namespace

CUresult ArgWriter::image(const void* p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  const void* img = image::resolve_wrapper(p);
  size_t n = img ? image::image_size(img) : 0;
  if (n == 0) return CUDA_ERROR_INVALID_IMAGE;
  if (const char* ptx = nvrtc_ptx_for(img, n)) {
    bulk(ptx, std::strlen(ptx) + 1);
    return CUDA_SUCCESS;
  }
  bulk(img, n);
  return CUDA_SUCCESS;
}

uint64_t ArgWriter::bulk_bytes() const {
  uint64_t n = 0;
  for (const auto& b : bulk_) n += b.size();
  for (const BulkTarget& t : reply_bulk_) n += t.size;
  return n;
}

CUresult ArgWriter::call_cached(OutReader* out) {
  const uint64_t t0 = now_ns();
  std::string key(reinterpret_cast<const char*>(&id_), sizeof id_);
  key.append(reinterpret_cast<const char*>(args().data()), args().size());
  Connection::ReplyCache& c = Connection::get().reply_cache();
  {
    std::lock_guard lock(c.mu);
    auto it = c.replies.find(key);
    if (it != c.replies.end()) {
      out->buffer() = it->second;
      record_call(id_, now_ns() - t0, CallKind::kLocal);
      return CUDA_SUCCESS;
    }
  }
  CUresult rc = call(out);
  if (rc == CUDA_SUCCESS) {
    std::lock_guard lock(c.mu);
    c.replies.emplace(std::move(key), out->buffer());
  }
  return rc;
}

void forget_cached(uint64_t id) {
  Connection::ReplyCache& c = Connection::get().reply_cache();
  std::lock_guard lock(c.mu);
  for (auto it = c.replies.begin(); it != c.replies.end();) {
    const std::string& key = it->first;  // call id (u32), then the arguments
    if (key.size() >= sizeof(uint32_t) + sizeof id &&
        std::memcmp(key.data() + sizeof(uint32_t), &id, sizeof id) == 0) {
      it = c.replies.erase(it);
    } else {
      ++it;
    }
  }
}

uint64_t mint_handle() {
  static std::atomic<uint64_t> next{kClientIdBase + 1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

CUresult unsupported(const char* name) {
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard lock(mu);
  if (said.insert(name).second) say(std::string(name) + " is not supported");
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace cuwire::client
