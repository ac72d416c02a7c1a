#include "connection.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "address.h"
#include "image.h"
#include "call_stats.h"
#include "managed_memory.h"
#include "messages.h"
#include "transport.h"

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

}  // namespace

ClientConfig config_from_environment() {
  ClientConfig c;
  const char* s = std::getenv("CUWIRE_SERVER");
  c.server = s && *s ? s : "unix:/tmp/cuwire.sock";
  if (const char* t = std::getenv("CUWIRE_TOKEN")) c.token = t;
  if (const char* ca = std::getenv("CUWIRE_CA")) c.ca_file = ca;
  return c;
}

Connection& Connection::get() {
  // Leaked on purpose: app threads and atexit handlers (cudart's among them) may still call
  // into the driver while static destructors run.
  static Connection* c = new Connection();
  return *c;
}

CUresult Connection::ensure_connected() {
  std::lock_guard lock(mu_);
  return connect_locked();
}

CUresult Connection::connect_locked() {
  if (stream_) return CUDA_SUCCESS;
  if (tried_) return failure_;
  tried_ = true;
  ClientConfig cfg = config_from_environment();
  address_ = cfg.server;
  // Until the handshake succeeds the driver behaves as one with no device.
  failure_ = CUDA_ERROR_NO_DEVICE;
  Address addr;
  if (Status s = parse_address(cfg.server, &addr); !s) {
    say("CUWIRE_SERVER: " + s.message());
    return failure_;
  }
  std::unique_ptr<Stream> stream;
  if (Status s = connect_stream(addr, {cfg.ca_file}, &stream); !s) {
    say("cannot reach gpu-server at " + cfg.server + ": " + s.message());
    return failure_;
  }
  HelloMsg hello;
  hello.manifest_hash = kManifestHash;
  hello.client_name = program_name();
  hello.pid = static_cast<uint32_t>(getpid());
  hello.token = cfg.token;
  encode_hello(hello, &msg_);
  FrameHeader h;
  h.type = static_cast<uint16_t>(FrameType::kHello);
  h.sequence = next_seq_++;
  Frame f;
  Status s = write_frame(*stream, h, msg_);
  if (s) s = read_frame(*stream, limits_, &f);
  if (!s) {
    say("gpu-server at " + cfg.server + " closed the connection during the handshake: " +
        s.message());
    return failure_;
  }
  if (f.type() == FrameType::kError) {
    ErrorMsg e;
    decode_error(f, &e);
    say("gpu-server at " + cfg.server + " refused the connection: " + error_kind_name(e.kind) +
        ": " + e.message);
    return failure_;
  }
  WelcomeMsg w;
  if (Status d = decode_welcome(f, &w); !d) {
    say("gpu-server at " + cfg.server + " answered Hello with something else: " + d.message());
    return failure_;
  }
  backend_ = w.backend;
  stream_ = std::move(stream);
  install_stats_report();
  failure_ = CUDA_SUCCESS;
  return CUDA_SUCCESS;
}

CUresult Connection::lost_locked(const std::string& why) {
  say("lost gpu-server at " + address_ + ": " + why);
  if (stream_) stream_->shutdown();
  stream_.reset();
  // The device is gone for good for this process: CUDA reports such a loss this way.
  failure_ = CUDA_ERROR_DEVICE_UNAVAILABLE;
  return failure_;
}

CUresult Connection::send_locked(const ArgWriter& w, uint16_t flags, uint64_t* seq) {
  if (CUresult e = connect_locked()) return e;
  encode_call(w.id(), current_context_id(), w.args(), &msg_);
  FrameHeader h;
  h.type = static_cast<uint16_t>(FrameType::kCall);
  h.flags = flags;
  h.sequence = *seq = next_seq_++;
  if (Status s = write_frame(*stream_, h, msg_, w.bulk()); !s) return lost_locked(s.message());
  return CUDA_SUCCESS;
}

CUresult Connection::send_async(const ArgWriter& w) {
  std::lock_guard lock(mu_);
  uint64_t seq;
  return send_locked(w, kFlagNoReply, &seq);
}

CUresult Connection::round_trip(const ArgWriter& w, OutReader* out) {
  std::lock_guard lock(mu_);
  uint64_t seq;
  if (CUresult e = send_locked(w, 0, &seq)) return e;
  FrameHeader& h = reply_.header;
  if (Status s = stream_->read_exact(&h, sizeof h); !s) return lost_locked(s.message());
  if (Status s = check_header(h, limits_); !s) return lost_locked(s.to_string());
  reply_.message.resize(h.message_bytes / 8);
  if (Status s = stream_->read_exact(reply_.message.data(), h.message_bytes); !s) {
    return lost_locked(s.message());
  }
  if (reply_.type() == FrameType::kError) {
    ErrorMsg e;
    decode_error(reply_, &e);
    return lost_locked(std::string("server error: ") + error_kind_name(e.kind) + ": " + e.message);
  }
  if (reply_.type() != FrameType::kReply || h.sequence != seq) {
    return lost_locked("reply out of order");
  }
  // Bulk bytes go straight to the app's buffers; a reply carries all of them or none.
  if (h.bulk_bytes) {
    size_t want = 0;
    for (auto& t : w.reply_bulk()) want += t.size;
    if (h.bulk_bytes != want) return lost_locked("reply bulk size mismatch");
    for (auto& t : w.reply_bulk()) {
      if (Status s = stream_->read_exact(t.data, t.size); !s) return lost_locked(s.message());
    }
  }
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
  return static_cast<CUresult>(r.result);
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

// Managed memory (managed_memory.h): host writes reach the device before any call, device
// writes come back after a synchronising one.
CUresult ArgWriter::call(OutReader* out) {
  if (CUresult e = managed::before_call(*this)) return e;
  uint64_t t0 = now_ns();
  CUresult rc = Connection::get().round_trip(*this, out);
  record_call(id_, now_ns() - t0, false);
  return managed::after_call(id_, rc);
}

CUresult ArgWriter::send_async() {
  if (CUresult e = managed::before_call(*this)) return e;
  uint64_t t0 = now_ns();
  CUresult rc = Connection::get().send_async(*this);
  record_call(id_, now_ns() - t0, true);
  return rc;
}

CUresult ArgWriter::image(const void* p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  const void* img = image::resolve_wrapper(p);
  size_t n = img ? image::image_size(img) : 0;
  if (n == 0) return CUDA_ERROR_INVALID_IMAGE;
  bulk(img, n);
  return CUDA_SUCCESS;
}

namespace {
struct ReplyCache {
  std::mutex mu;
  std::unordered_map<std::string, std::vector<uint8_t>> replies;  // guarded by mu
};
ReplyCache& reply_cache() {
  static ReplyCache* c = new ReplyCache();  // leaked: used by atexit handlers too
  return *c;
}
}  // namespace

CUresult ArgWriter::call_cached(OutReader* out) {
  std::string key(reinterpret_cast<const char*>(&id_), sizeof id_);
  key.append(reinterpret_cast<const char*>(args().data()), args().size());
  ReplyCache& c = reply_cache();
  {
    std::lock_guard lock(c.mu);
    auto it = c.replies.find(key);
    if (it != c.replies.end()) {
      out->buffer() = it->second;
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
  ReplyCache& c = reply_cache();
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
