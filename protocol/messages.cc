#include "protocol/messages.h"

#include <cstring>

#include "protocol/byte_stream.h"
#include "protocol/wire_layout.h"

namespace cuwire {
namespace {

using wire_layout::MessageReader;
using wire_layout::StructReader;
using wire_layout::StructWriter;

// cuwire.capnp's structs as Cap'n Proto lays them out: data words, pointers, and each field's
// byte (or bit) offset in the data section or its pointer index. tests/protocol checks these
// against the schema compiled by capnp.
namespace hello {
constexpr uint16_t kData = 4, kPointers = 3;
constexpr size_t kVersion = 0, kPid = 4, kManifest = 8, kHostCallSession = 24;  // bytes
constexpr size_t kProbe = 128, kControl = 129, kLane = 130, kHostCalls = 131;   // bits
constexpr uint16_t kClientName = 0, kToken = 1, kHostCallKey = 2;
}  // namespace hello
namespace welcome {
constexpr uint16_t kData = 2, kPointers = 4;
constexpr size_t kVersion = 0, kSession = 8, kLane = 32;
constexpr uint16_t kServerName = 0, kBackend = 1, kRoom = 2, kHostCallKey = 3;
}  // namespace welcome
namespace room {
constexpr uint16_t kData = 3, kPointers = 2;
constexpr size_t kFits = 0, kComputeLeft = 4, kMemoryLeft = 8, kSessions = 16;
constexpr uint16_t kWhy = 0, kPlacement = 1;
}  // namespace room
namespace host_call {
constexpr uint16_t kData = 2, kPointers = 0;
constexpr size_t kId = 0, kStatus = 8;
}  // namespace host_call
namespace error {
constexpr uint16_t kData = 1, kPointers = 1;
constexpr size_t kKind = 0;
constexpr uint16_t kMessage = 0;
}  // namespace error
namespace call {
constexpr uint16_t kData = 2, kPointers = 1;
constexpr size_t kCallId = 0, kContext = 8;
constexpr uint16_t kArgs = 0;
}  // namespace call
namespace reply {
constexpr uint16_t kData = 1, kPointers = 2;
constexpr size_t kResult = 0;
constexpr uint16_t kOuts = 0, kDeviceOutput = 1;
}  // namespace reply
namespace control {
constexpr uint16_t kData = 0, kPointers = 2;
constexpr uint16_t kCommand = 0, kArgs = 1;
}  // namespace control
namespace control_reply {
constexpr uint16_t kData = 1, kPointers = 2;
constexpr size_t kOk = 0;
constexpr uint16_t kError = 0, kBody = 1;
}  // namespace control_reply

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Runs `fn` over the root struct of the frame's message; `fn` returns false with *why set when
// a field does not decode.
template <typename Fn>
Status with_root(const Frame& f, FrameType expected, Fn&& fn) {
  if (f.type() != expected) return Status::malformed("unexpected frame type");
  if (f.message.empty()) return Status::malformed("empty message");
  MessageReader m;
  StructReader r;
  std::string why;
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(f.message.data()),
                                       f.message.size() * 8);
  if (!m.open(bytes, &why) || !m.root(&r, &why) || !fn(r, &why)) {
    return Status::malformed("undecodable message: " + why);
  }
  return Status::ok();
}

}  // namespace

const char* error_kind_name(ErrorKind k) {
  switch (k) {
    case ErrorKind::kFailed:
      return "failed";
    case ErrorKind::kMalformedFrame:
      return "malformed frame";
    case ErrorKind::kFrameTooLarge:
      return "frame too large";
    case ErrorKind::kUnknownType:
      return "unknown frame type";
    case ErrorKind::kVersionMismatch:
      return "protocol version mismatch";
    case ErrorKind::kManifestMismatch:
      return "manifest mismatch";
    case ErrorKind::kUnauthorized:
      return "unauthorized";
    case ErrorKind::kOverloaded:
      return "overloaded";
    case ErrorKind::kUnexpected:
      return "unexpected message";
    case ErrorKind::kGoingAway:
      return "going away";
  }
  return "unknown error kind";
}

void encode_hello(const HelloMsg& m, std::vector<uint8_t>* out) {
  StructWriter h(hello::kData, hello::kPointers);
  h.u32(hello::kVersion, m.protocol_version);
  h.u64(hello::kManifest, m.manifest_hash);
  h.text(hello::kClientName, m.client_name);
  h.u32(hello::kPid, m.pid);
  h.text(hello::kToken, m.token);
  h.bit(hello::kProbe, m.probe);
  h.bit(hello::kControl, m.control);
  h.bit(hello::kLane, m.lane);
  h.bit(hello::kHostCalls, m.host_calls);
  h.u64(hello::kHostCallSession, m.host_call_session);
  h.data(hello::kHostCallKey, bytes_of(m.host_call_key));
  h.finish(out);
}

void encode_control(const ControlMsg& m, std::vector<uint8_t>* out) {
  StructWriter c(control::kData, control::kPointers);
  c.text(control::kCommand, m.command);
  c.text(control::kArgs, m.args);
  c.finish(out);
}

void encode_control_reply(const ControlReplyMsg& m, std::vector<uint8_t>* out) {
  StructWriter r(control_reply::kData, control_reply::kPointers);
  r.bit(control_reply::kOk, m.ok);
  r.text(control_reply::kError, m.error);
  r.text(control_reply::kBody, m.body);
  r.finish(out);
}

void encode_welcome(const WelcomeMsg& m, std::vector<uint8_t>* out) {
  StructWriter w(welcome::kData, welcome::kPointers);
  w.u32(welcome::kVersion, m.protocol_version);
  w.u64(welcome::kSession, m.session_id);
  w.text(welcome::kServerName, m.server_name);
  w.text(welcome::kBackend, m.backend);
  w.bit(welcome::kLane, m.lane);
  w.data(welcome::kHostCallKey, bytes_of(m.host_call_key));
  if (m.has_room) {
    StructWriter r(room::kData, room::kPointers);
    r.bit(room::kFits, m.room.fits);
    r.u64(room::kMemoryLeft, m.room.memory_left);
    r.u32(room::kComputeLeft, m.room.compute_left);
    r.u32(room::kSessions, m.room.sessions);
    r.text(room::kWhy, m.room.why);
    r.text(room::kPlacement, m.room.placement);
    w.child(welcome::kRoom, r);
  }
  w.finish(out);
}

void encode_host_call(const HostCallMsg& m, std::vector<uint8_t>* out) {
  StructWriter c(host_call::kData, host_call::kPointers);
  c.u64(host_call::kId, m.id);
  c.u32(host_call::kStatus, m.status);
  c.finish(out);
}

void encode_error(const ErrorMsg& m, std::vector<uint8_t>* out) {
  StructWriter e(error::kData, error::kPointers);
  e.u16(error::kKind, static_cast<uint16_t>(m.kind));
  e.text(error::kMessage, m.message);
  e.finish(out);
}

void encode_call(uint32_t call_id, uint64_t context, std::span<const uint8_t> args,
                 std::vector<uint8_t>* out) {
  out->resize(call_message_bytes(args.size()));
  encode_call_into(call_id, context, args, out->data());
}

// The layout encode_call produces for Call (callId @0 :UInt32, context @1
// :UInt64, args @2 :Data): segment table (one segment), root struct pointer, the struct's two
// data words and one pointer, then the Data list's bytes padded to a word.
size_t call_message_bytes(size_t args_bytes) { return 8 * (1 + 4 + (args_bytes + 7) / 8); }

void encode_call_into(uint32_t call_id, uint64_t context, std::span<const uint8_t> args,
                      uint8_t* out) {
  const size_t arg_words = (args.size() + 7) / 8;
  const uint64_t words[5] = {
      // Segment table: segment count - 1 (0), then the segment's size in words.
      uint64_t{0} | (uint64_t{4 + arg_words} << 32),
      // Root: struct pointer, offset 0, 2 data words, 1 pointer.
      (uint64_t{2} << 32) | (uint64_t{1} << 48),
      uint64_t{call_id},
      context,
      // args: list pointer, offset 0, element size 2 (bytes), element count.
      uint64_t{1} | (uint64_t{2} << 32) | (uint64_t{args.size()} << 35),
  };
  std::memcpy(out, words, sizeof words);
  if (!args.empty()) std::memcpy(out + sizeof words, args.data(), args.size());
  const size_t pad = arg_words * 8 - args.size();
  if (pad) std::memset(out + sizeof words + args.size(), 0, pad);
}

void encode_reply(uint32_t result, std::span<const uint8_t> outs, std::vector<uint8_t>* out,
                  std::span<const uint8_t> device_output) {
  StructWriter r(reply::kData, reply::kPointers);
  r.u32(reply::kResult, result);
  r.data(reply::kOuts, outs);
  if (!device_output.empty()) r.data(reply::kDeviceOutput, device_output);
  r.finish(out);
}

Status decode_hello(const Frame& f, HelloMsg* out) {
  return with_root(f, FrameType::kHello, [&](const StructReader& h, std::string* why) {
    out->protocol_version = h.u32(hello::kVersion);
    out->manifest_hash = h.u64(hello::kManifest);
    out->pid = h.u32(hello::kPid);
    out->probe = h.bit(hello::kProbe);
    out->control = h.bit(hello::kControl);
    out->lane = h.bit(hello::kLane);
    out->host_calls = h.bit(hello::kHostCalls);
    out->host_call_session = h.u64(hello::kHostCallSession);
    std::span<const uint8_t> key;
    if (!h.text(hello::kClientName, &out->client_name, why) ||
        !h.text(hello::kToken, &out->token, why) || !h.data(hello::kHostCallKey, &key, why)) {
      return false;
    }
    out->host_call_key.assign(reinterpret_cast<const char*>(key.data()), key.size());
    return true;
  });
}

Status decode_control(const Frame& f, ControlMsg* out) {
  return with_root(f, FrameType::kControl, [&](const StructReader& c, std::string* why) {
    return c.text(control::kCommand, &out->command, why) && c.text(control::kArgs, &out->args, why);
  });
}

Status decode_control_reply(const Frame& f, ControlReplyMsg* out) {
  return with_root(f, FrameType::kControlReply, [&](const StructReader& r, std::string* why) {
    out->ok = r.bit(control_reply::kOk);
    return r.text(control_reply::kError, &out->error, why) &&
           r.text(control_reply::kBody, &out->body, why);
  });
}

Status decode_welcome(const Frame& f, WelcomeMsg* out) {
  return with_root(f, FrameType::kWelcome, [&](const StructReader& w, std::string* why) {
    out->protocol_version = w.u32(welcome::kVersion);
    out->session_id = w.u64(welcome::kSession);
    out->lane = w.bit(welcome::kLane);
    std::span<const uint8_t> key;
    if (!w.text(welcome::kServerName, &out->server_name, why) ||
        !w.text(welcome::kBackend, &out->backend, why) ||
        !w.data(welcome::kHostCallKey, &key, why)) {
      return false;
    }
    out->host_call_key.assign(reinterpret_cast<const char*>(key.data()), key.size());
    out->has_room = w.has(welcome::kRoom);
    if (out->has_room) {
      StructReader r;
      if (!w.child(welcome::kRoom, &r, why)) return false;
      out->room.fits = r.bit(room::kFits);
      out->room.memory_left = r.u64(room::kMemoryLeft);
      out->room.compute_left = r.u32(room::kComputeLeft);
      out->room.sessions = r.u32(room::kSessions);
      if (!r.text(room::kWhy, &out->room.why, why) ||
          !r.text(room::kPlacement, &out->room.placement, why)) {
        return false;
      }
    }
    return true;
  });
}

Status decode_host_call(const Frame& f, FrameType type, HostCallMsg* out) {
  return with_root(f, type, [&](const StructReader& c, std::string*) {
    out->id = c.u64(host_call::kId);
    out->status = c.u32(host_call::kStatus);
    return true;
  });
}

Status decode_error(const Frame& f, ErrorMsg* out) {
  return with_root(f, FrameType::kError, [&](const StructReader& e, std::string* why) {
    const uint16_t k = e.u16(error::kKind);
    out->kind = k <= static_cast<uint16_t>(ErrorKind::kGoingAway) ? static_cast<ErrorKind>(k)
                                                                  : ErrorKind::kFailed;
    return e.text(error::kMessage, &out->message, why);
  });
}

Status decode_call(const Frame& f, CallView* out) {
  return with_root(f, FrameType::kCall, [&](const StructReader& c, std::string* why) {
    out->call_id = c.u32(call::kCallId);
    out->context = c.u64(call::kContext);
    return c.data(call::kArgs, &out->args, why);
  });
}

Status decode_reply(const Frame& f, ReplyView* out) {
  return with_root(f, FrameType::kReply, [&](const StructReader& r, std::string* why) {
    out->result = r.u32(reply::kResult);
    return r.data(reply::kOuts, &out->outs, why) &&
           r.data(reply::kDeviceOutput, &out->device_output, why);
  });
}

Status decode_whole_reply(const Frame& f, ReplyView* out, std::span<const uint8_t>* bulk) {
  if (Status s = decode_reply(f, out); !s) return s;
  *bulk = {f.bulk.data(), f.bulk.size()};
  if (!(f.header.flags & kFlagResultTrailer)) return Status::ok();
  ResultTrailer t;
  if (bulk->size() < sizeof t) return Status::malformed("reply without its result trailer");
  std::memcpy(&t, bulk->data() + bulk->size() - sizeof t, sizeof t);
  *bulk = bulk->first(bulk->size() - sizeof t);
  if (t.result != 0) out->result = t.result;
  return Status::ok();
}

Status decode_any(const Frame& f) {
  switch (f.type()) {
    case FrameType::kHello: {
      HelloMsg m;
      return decode_hello(f, &m);
    }
    case FrameType::kWelcome: {
      WelcomeMsg m;
      return decode_welcome(f, &m);
    }
    case FrameType::kError: {
      ErrorMsg m;
      return decode_error(f, &m);
    }
    case FrameType::kCall: {
      CallView m;
      return decode_call(f, &m);
    }
    case FrameType::kReply: {
      ReplyView m;
      return decode_reply(f, &m);
    }
    case FrameType::kGoodbye:
      return Status::ok();
    case FrameType::kControl: {
      ControlMsg m;
      return decode_control(f, &m);
    }
    case FrameType::kControlReply: {
      ControlReplyMsg m;
      return decode_control_reply(f, &m);
    }
    case FrameType::kHostCall:
    case FrameType::kHostCallDone: {
      HostCallMsg m;
      return decode_host_call(f, f.type(), &m);
    }
  }
  return Status::unknown_type("frame type " + std::to_string(f.header.type));
}

void send_error(ByteStream& stream, ErrorKind kind, const std::string& message) {
  std::vector<uint8_t> msg;
  encode_error({kind, message}, &msg);
  FrameHeader h;
  h.type = static_cast<uint16_t>(FrameType::kError);
  (void)write_frame(stream, h, msg);
}

}  // namespace cuwire
