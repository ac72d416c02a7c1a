#include "session.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <new>
#include <optional>
#include <set>
#include <stdexcept>

#include "call_ids.h"
#include "bulk_extent.h"
#include "device_output.h"
#include "stdout_capture.h"
#include "upstream.h"
#include "dispatch.h"
#include "messages.h"
#include "transport.h"

namespace cuwire::server {
namespace {

using Clock = std::chrono::steady_clock;

ErrorKind kind_for(const Status& s) {
  switch (s.code()) {
    case Status::Code::kTooLarge: return ErrorKind::kFrameTooLarge;
    case Status::Code::kUnknownType: return ErrorKind::kUnknownType;
    case Status::Code::kMalformed: return ErrorKind::kMalformedFrame;
    default: return ErrorKind::kFailed;
  }
}

// Device printf text carried by one reply; what does not fit waits for the next synchronizing
// call. Leaves room for the outs under FrameLimits::max_message_bytes (1 MiB by default).
constexpr size_t kMaxDeviceOutputPerReply = 512 << 10;
// Captured device output a session may have waiting for its replies (as the sim backend keeps
// per context); more is dropped, with a warning.
constexpr size_t kMaxCapturedDeviceOutput = 4 << 20;

// The last Error frame to a peer the server lets go may take this long; a peer that does not
// read cannot hold the session's thread with it.
constexpr auto kFarewellTimeout = std::chrono::seconds(1);

// What a call that threw answers. Out of memory (bad_alloc, and length_error: a size no
// container can hold) is CUDA_ERROR_OUT_OF_MEMORY, as the driver answers an allocation it
// cannot make; anything else is a server fault the client cannot act on: CUDA_ERROR_UNKNOWN.
// The session goes on either way: an exception is the call's failure, not the session's.
CUresult result_for_exception(std::exception_ptr e, std::string* what) {
  try {
    std::rethrow_exception(e);
  } catch (const std::bad_alloc&) {
    *what = "out of memory";
    return CUDA_ERROR_OUT_OF_MEMORY;
  } catch (const std::length_error& x) {
    *what = std::string("length error: ") + x.what();
    return CUDA_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& x) {
    *what = x.what();
    return CUDA_ERROR_UNKNOWN;
  } catch (...) {
    *what = "an exception of unknown type";
    return CUDA_ERROR_UNKNOWN;
  }
}

const char* result_name(CUresult rc) {
  return rc == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_UNKNOWN";
}

std::string millis(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

// Gives a buffer's memory back when it grew past what a session keeps between calls.
template <typename V>
void release_if_large(V* v) {
  if (v->capacity() * sizeof(typename V::value_type) > kRetainedBufferBytes) V().swap(*v);
}

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

Session::Session(uint64_t id, std::unique_ptr<Stream> stream, const SessionConfig& config,
                 DriverApi& backend, AdmitFn admit)
    : id_(id), stream_(std::move(stream)), config_(config), backend_(backend),
      admit_(std::move(admit)), peer_(stream_->peer()), client_("?") {
  // The handshake's bound runs from accept, which is now.
  if (config_.handshake_timeout.count() > 0) {
    StreamTimeouts t;
    t.deadline = Clock::now() + config_.handshake_timeout;
    stream_->set_timeouts(t);
  }
}

Session::~Session() = default;

void Session::stop() { stream_->shutdown(); }

void Session::drain() {
  draining_ = true;
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
  spdlog::info("session {} ({} {}): the server is shutting down; closing", id_, peer_, client_);
  farewell(ErrorKind::kGoingAway, "the server is shutting down");
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
  if (hello.protocol_version != kProtocolVersion) {
    reject(ErrorKind::kVersionMismatch,
           "client speaks protocol " + std::to_string(hello.protocol_version) +
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
  if (!config_.token.empty() && !secrets_equal(hello.token, config_.token)) {
    reject(ErrorKind::kUnauthorized, hello.token.empty() ? "a token is required" : "wrong token");
    return false;
  }
  if (admit_) {
    if (std::string why = admit_(); !why.empty()) {
      reject(ErrorKind::kOverloaded, why);
      return false;
    }
  }
  // From here on the handshake bound is over; the idle bound, if any, takes its place.
  StreamTimeouts t;
  t.idle = config_.idle_timeout;
  stream_->set_timeouts(t);
  WelcomeMsg w;
  w.session_id = id_;
  w.server_name = config_.server_name;
  w.backend = config_.backend_name;
  std::vector<uint8_t> msg;
  encode_welcome(w, &msg);
  FrameHeader h;
  h.type = static_cast<uint16_t>(FrameType::kWelcome);
  h.sequence = f.header.sequence;
  if (!write_frame(*stream_, h, msg)) return false;
  spdlog::info("session {} ({} {}): connected", id_, peer_, client_);
  return true;
}

void Session::run() {
  if (!handshake()) return;
  serve();
}

void Session::serve() {
  CallContext cx(backend_, config_.handles);
  Frame f;
  std::vector<uint8_t> msg;
  auto out = std::make_unique<ReplyWriter>(config_.limits.max_bulk_bytes);
  // Device printf: the contexts this session ran calls in, whose kernels' output its
  // synchronizing replies carry.
  auto* device_output = dynamic_cast<DeviceOutputSource*>(&backend_);
  std::set<uint64_t> output_contexts;
  std::string output_text;
  // Device printf where the backend prints it on the server's stdout (the cuda backend): what
  // this session's synchronizing calls wrote there, not yet sent.
  StdoutCapture* capture = config_.device_printf;
  // A relay: calls reach the upstream only while this session's epoch is current (upstream.h).
  UpstreamLink* link = config_.upstream;
  const uint64_t epoch = link ? link->join() : 0;
  std::string captured;
  size_t captured_dropped = 0;
  for (;;) {
    if (draining_) {
      going_away();
      break;
    }
    Status s = read_frame(*stream_, config_.limits, &f);
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
    if (draining_) {
      going_away();
      break;
    }
    if (f.type() == FrameType::kGoodbye) {
      spdlog::info("session {} ({} {}): goodbye", id_, peer_, client_);
      break;
    }
    if (f.type() != FrameType::kCall) {
      reject(ErrorKind::kUnexpected, "only Call and Goodbye frames may follow Hello");
      break;
    }
    CallView call;
    if (Status d = decode_call(f, &call); !d) {
      reject(ErrorKind::kMalformedFrame, d.message());
      break;
    }
    const bool wants_reply = !(f.header.flags & kFlagNoReply);
    bool send_outs = false;
    CUresult rc = CUDA_SUCCESS;
    // The session's boundary for one call: whatever the call throws (an allocation the host
    // cannot make, a bug) becomes this call's result; the session and the server go on.
    try {
      ArgReader in(call.args, f.bulk);
      out->clear();
      bool known = true;
      std::optional<UpstreamLink::Use> use;
      if (link) {
        use.emplace(link->use(epoch));
        if (!*use) rc = CUDA_ERROR_DEVICE_UNAVAILABLE;
      }
      // Each call runs in the calling app thread's current context; switching costs nothing
      // when one thread (the common case) keeps one context.
      if (rc == CUDA_SUCCESS && call.context != cx.current_context()) {
        CUcontext ctx = nullptr;
        rc = cx.lookup(HandleKind::kContext, call.context, &ctx);
        if (rc == CUDA_SUCCESS) rc = backend_.cuCtxSetCurrent(ctx);
        if (rc == CUDA_SUCCESS) cx.set_current_context(call.context);
      }
      if (device_output && rc == CUDA_SUCCESS && call.context != 0) {
        output_contexts.insert(call.context);
      }
      if (rc == CUDA_SUCCESS) {
        BulkScope bulk_scope(f.bulk);
        if (capture && cx.may_print() && call_is_sync(call.call_id)) {
          rc = capture->run(&captured, kMaxCapturedDeviceOutput, &captured_dropped,
                            [&] { return dispatch_call(call.call_id, cx, in, *out, &known); });
        } else {
          rc = dispatch_call(call.call_id, cx, in, *out, &known);
        }
        if (link) link->check(rc);
      }
      if (!known) {
        warn_limited(fmt::format("session {} ({}): unknown call id {}", id_, client_,
                                 call.call_id));
      } else if (in.was_malformed()) {
        warn_limited(fmt::format("session {} ({}): malformed arguments for {}", id_, client_,
                                 call_name(call.call_id)));
      }
      if (!wants_reply) {
        // A stream-capture error of a fire-and-forget call invalidated its capture, which the
        // capture's end reports; the client already returned it where it can tell (check= in
        // the manifest). Deferring it too would fail an unrelated later call.
        if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) {
          cx.defer_error(rc);
        }
      } else {
        if (rc == CUDA_SUCCESS && call_is_sync(call.call_id)) rc = cx.take_deferred_error();
        output_text.clear();
        if (device_output && call_is_sync(call.call_id)) {
          for (auto it = output_contexts.begin(); it != output_contexts.end();) {
            CUcontext ctx = nullptr;
            if (cx.lookup(HandleKind::kContext, *it, &ctx) != CUDA_SUCCESS || !ctx) {
              it = output_contexts.erase(it);  // destroyed: its output went with it
              continue;
            }
            device_output->take_device_output(
                ctx, kMaxDeviceOutputPerReply - output_text.size(), &output_text);
            ++it;
          }
        }
        if (!captured.empty() && call_is_sync(call.call_id)) {
          size_t n = std::min(captured.size(), kMaxDeviceOutputPerReply - output_text.size());
          output_text.append(captured, 0, n);
          captured.erase(0, n);
        }
        if (captured_dropped > 0) {
          warn_limited(fmt::format("session {} ({}): {} bytes of device printf output dropped "
                                   "(more than {} waiting)", id_, client_, captured_dropped,
                                   kMaxCapturedDeviceOutput));
          captured_dropped = 0;
        }
        send_outs = rc == CUDA_SUCCESS;
        encode_reply(static_cast<uint32_t>(rc),
                     send_outs ? out->outs() : std::span<const uint8_t>{}, &msg,
                     {reinterpret_cast<const uint8_t*>(output_text.data()), output_text.size()});
      }
    } catch (...) {
      std::string what;
      rc = result_for_exception(std::current_exception(), &what);
      warn_limited(fmt::format("session {} ({}): {} failed inside the server: {}; answered {}",
                               id_, client_, call_name(call.call_id), what, result_name(rc)));
      // Whatever the call built is dropped with its memory.
      out = std::make_unique<ReplyWriter>(config_.limits.max_bulk_bytes);
      output_text.clear();
      send_outs = false;
      if (!wants_reply) {
        cx.defer_error(rc);
      } else {
        encode_reply(static_cast<uint32_t>(rc), {}, &msg);
      }
    }
    if (wants_reply) {
      FrameHeader h;
      h.type = static_cast<uint16_t>(FrameType::kReply);
      h.sequence = f.header.sequence;
      std::span<const uint8_t> bulk[1] = {send_outs ? out->bulk() : std::span<const uint8_t>{}};
      if (Status w = write_frame(*stream_, h, msg, bulk); !w) {
        if (stream_->timed_out()) {
          spdlog::info("session {} ({} {}): the client did not take its reply within the idle "
                       "timeout of {}; closing",
                       id_, peer_, client_, millis(config_.idle_timeout));
        } else {
          spdlog::info("session {} ({} {}): disconnected: {}", id_, peer_, client_, w.message());
        }
        break;
      }
    }
    // Memory committed for this call alone goes back now.
    if (out->bulk().size() > kRetainedBufferBytes || out->outs().size() > kRetainedBufferBytes) {
      out = std::make_unique<ReplyWriter>(config_.limits.max_bulk_bytes);
    }
    release_if_large(&f.bulk);
    release_if_large(&f.message);
    release_if_large(&msg);
    release_if_large(&output_text);
    retained_bytes_.store(f.bulk.capacity() + f.message.capacity() * sizeof(uint64_t) +
                              msg.capacity() + output_text.capacity() + out->bulk().size() +
                              out->outs().size(),
                          std::memory_order_relaxed);
  }
  size_t bytes = cx.allocated_bytes(), allocs = cx.allocation_count(), handles = cx.handle_count();
  std::optional<UpstreamLink::Use> use;
  if (link) use.emplace(link->use(epoch));
  if (use && !*use) {
    // What the session made lived in an upstream session that is gone.
    cx.forget_all();
    if (allocs || handles) {
      spdlog::info("session {} ({}): {} allocations and {} handles went with the lost upstream",
                   id_, client_, allocs, handles);
    }
    return;
  }
  cx.reclaim();
  if (cx.current_context() != 0) backend_.cuCtxSetCurrent(nullptr);
  if (allocs || handles) {
    spdlog::info("session {} ({}): reclaimed {} allocations ({} bytes) and {} handles", id_,
                 client_, allocs, bytes, handles);
  }
}

}  // namespace cuwire::server
