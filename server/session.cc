#include "session.h"

#include <spdlog/spdlog.h>

#include <set>

#include "call_ids.h"
#include "bulk_extent.h"
#include "device_output.h"
#include "dispatch.h"
#include "messages.h"

namespace cuwire::server {
namespace {

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

}  // namespace

Session::Session(uint64_t id, std::unique_ptr<Stream> stream, const SessionConfig& config,
                 DriverApi& backend)
    : id_(id), stream_(std::move(stream)), config_(config), backend_(backend),
      peer_(stream_->peer()), client_("?") {}

Session::~Session() = default;

void Session::stop() { stream_->shutdown(); }

void Session::reject(ErrorKind kind, const std::string& why) {
  spdlog::warn("session {} ({} {}): {}: {}; closing", id_, peer_, client_, error_kind_name(kind),
               why);
  send_error(*stream_, kind, why);
  stream_->shutdown();
}

bool Session::handshake() {
  Frame f;
  Status s = read_frame(*stream_, config_.limits, &f);
  if (!s) {
    if (s.code() == Status::Code::kDisconnected) {
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
  client_ = hello.client_name + "[" + std::to_string(hello.pid) + "]";
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
  if (!config_.token.empty() && hello.token != config_.token) {
    reject(ErrorKind::kUnauthorized, hello.token.empty() ? "a token is required" : "wrong token");
    return false;
  }
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
  CallContext cx(backend_);
  current_context_ = 0;
  Frame f;
  std::vector<uint8_t> msg;
  ReplyWriter out(config_.limits.max_bulk_bytes);
  // Device printf: the contexts this session ran calls in, whose kernels' output its
  // synchronizing replies carry.
  auto* device_output = dynamic_cast<DeviceOutputSource*>(&backend_);
  std::set<uint64_t> output_contexts;
  std::string output_text;
  for (;;) {
    Status s = read_frame(*stream_, config_.limits, &f);
    if (!s) {
      if (s.code() == Status::Code::kDisconnected) {
        spdlog::info("session {} ({} {}): disconnected", id_, peer_, client_);
      } else {
        reject(kind_for(s), s.message());
      }
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
    ArgReader in(call.args, f.bulk);
    out.clear();
    bool known = true;
    // Each call runs in the calling app thread's current context; switching costs nothing
    // when one thread (the common case) keeps one context.
    CUresult rc = CUDA_SUCCESS;
    if (call.context != current_context_) {
      CUcontext ctx = nullptr;
      rc = cx.lookup(HandleKind::kContext, call.context, &ctx);
      if (rc == CUDA_SUCCESS) rc = backend_.cuCtxSetCurrent(ctx);
      if (rc == CUDA_SUCCESS) {
        current_context_ = call.context;
        cx.set_current_context(call.context);
      }
    }
    if (device_output && rc == CUDA_SUCCESS && call.context != 0) {
      output_contexts.insert(call.context);
    }
    if (rc == CUDA_SUCCESS) {
      BulkScope bulk_scope(f.bulk);
      rc = dispatch_call(call.call_id, cx, in, out, &known);
    }
    if (!known) {
      spdlog::warn("session {} ({}): unknown call id {}", id_, client_, call.call_id);
    } else if (in.was_malformed()) {
      spdlog::warn("session {} ({}): malformed arguments for {}", id_, client_,
                   call_name(call.call_id));
    }
    if (f.header.flags & kFlagNoReply) {
      // A stream-capture error of a fire-and-forget call invalidated its capture, which the
      // capture's end reports; the client already returned it where it can tell (check= in
      // the manifest). Deferring it too would fail an unrelated later call.
      if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) cx.defer_error(rc);
      continue;
    }
    if (rc == CUDA_SUCCESS && call_is_sync(call.call_id)) rc = cx.take_deferred_error();
    output_text.clear();
    if (device_output && call_is_sync(call.call_id)) {
      for (auto it = output_contexts.begin(); it != output_contexts.end();) {
        CUcontext ctx = nullptr;
        if (cx.lookup(HandleKind::kContext, *it, &ctx) != CUDA_SUCCESS || !ctx) {
          it = output_contexts.erase(it);  // destroyed: its output went with it
          continue;
        }
        device_output->take_device_output(ctx, kMaxDeviceOutputPerReply - output_text.size(),
                                          &output_text);
        ++it;
      }
    }
    bool send_outs = rc == CUDA_SUCCESS;
    encode_reply(static_cast<uint32_t>(rc), send_outs ? out.outs() : std::span<const uint8_t>{},
                 &msg,
                 {reinterpret_cast<const uint8_t*>(output_text.data()), output_text.size()});
    FrameHeader h;
    h.type = static_cast<uint16_t>(FrameType::kReply);
    h.sequence = f.header.sequence;
    std::span<const uint8_t> bulk[1] = {send_outs ? out.bulk() : std::span<const uint8_t>{}};
    if (Status w = write_frame(*stream_, h, msg, bulk); !w) {
      spdlog::info("session {} ({} {}): disconnected: {}", id_, peer_, client_, w.message());
      break;
    }
  }
  size_t bytes = cx.allocated_bytes(), allocs = cx.allocation_count(), handles = cx.handle_count();
  cx.reclaim();
  if (current_context_ != 0) backend_.cuCtxSetCurrent(nullptr);
  if (allocs || handles) {
    spdlog::info("session {} ({}): reclaimed {} allocations ({} bytes) and {} handles", id_,
                 client_, allocs, bytes, handles);
  }
}

}  // namespace cuwire::server
