#include "protocol/messages.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cstring>

#include "protocol/byte_stream.h"
#include "protocol/cuwire.capnp.h"

namespace cuwire {
namespace {

// Small messages fit in one stack segment; the builder allocates only for large ones.
constexpr size_t kScratchWords = 64;

void flatten(capnp::MessageBuilder& b, std::vector<uint8_t>* out) {
  auto segments = b.getSegmentsForOutput();
  // Segment table: u32 (count-1), u32 size per segment, padded to a word.
  size_t table_words = (segments.size() + 2) / 2;
  size_t total = table_words * 8;
  for (auto s : segments) total += s.size() * 8;
  out->resize(total);
  uint8_t* p = out->data();
  std::memset(p, 0, table_words * 8);
  uint32_t count_minus_one = static_cast<uint32_t>(segments.size() - 1);
  std::memcpy(p, &count_minus_one, 4);
  for (size_t i = 0; i < segments.size(); ++i) {
    uint32_t n = static_cast<uint32_t>(segments[i].size());
    std::memcpy(p + 4 + 4 * i, &n, 4);
  }
  p += table_words * 8;
  for (auto s : segments) {
    std::memcpy(p, s.begin(), s.size() * 8);
    p += s.size() * 8;
  }
}

capnp::ReaderOptions reader_options(const Frame& f) {
  capnp::ReaderOptions o;
  // Bounds the work a hostile message can cause; a legal message never nears it.
  o.traversalLimitInWords = f.message.size() * 4 + 64;
  o.nestingLimit = 16;
  return o;
}

std::string text(capnp::Text::Reader t) { return std::string(t.begin(), t.size()); }

// Runs `fn` over a reader of the frame's message, turning any capnp exception into kMalformed.
template <typename Root, typename Fn>
Status with_root(const Frame& f, FrameType expected, Fn&& fn) {
  if (f.type() != expected) return Status::malformed("unexpected frame type");
  if (f.message.empty()) return Status::malformed("empty message");
  Status result;
  kj::Maybe<kj::Exception> e = kj::runCatchingExceptions([&]() {
    capnp::FlatArrayMessageReader reader(
        kj::ArrayPtr<const capnp::word>(reinterpret_cast<const capnp::word*>(f.message.data()),
                                        f.message.size()),
        reader_options(f));
    fn(reader.getRoot<Root>());
  });
  KJ_IF_MAYBE (ex, e) {
    return Status::malformed(std::string("undecodable message: ") + ex->getDescription().cStr());
  }
  return result;
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
  capnp::word scratch[kScratchWords] = {};
  capnp::MallocMessageBuilder b(kj::arrayPtr(scratch, kScratchWords));
  auto h = b.initRoot<wire::Hello>();
  h.setProtocolVersion(m.protocol_version);
  h.setManifestHash(m.manifest_hash);
  h.setClientName(m.client_name);
  h.setPid(m.pid);
  h.setToken(m.token);
  h.setProbe(m.probe);
  h.setControl(m.control);
  h.setLane(m.lane);
  h.setHostCalls(m.host_calls);
  h.setHostCallSession(m.host_call_session);
  h.setHostCallKey(kj::arrayPtr(reinterpret_cast<const uint8_t*>(m.host_call_key.data()),
                                m.host_call_key.size()));
  flatten(b, out);
}

void encode_control(const ControlMsg& m, std::vector<uint8_t>* out) {
  capnp::MallocMessageBuilder b;
  auto c = b.initRoot<wire::Control>();
  c.setCommand(m.command);
  c.setArgs(m.args);
  flatten(b, out);
}

void encode_control_reply(const ControlReplyMsg& m, std::vector<uint8_t>* out) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<wire::ControlReply>();
  r.setOk(m.ok);
  r.setError(m.error);
  r.setBody(m.body);
  flatten(b, out);
}

void encode_welcome(const WelcomeMsg& m, std::vector<uint8_t>* out) {
  capnp::word scratch[kScratchWords] = {};
  capnp::MallocMessageBuilder b(kj::arrayPtr(scratch, kScratchWords));
  auto w = b.initRoot<wire::Welcome>();
  w.setProtocolVersion(m.protocol_version);
  w.setSessionId(m.session_id);
  w.setServerName(m.server_name);
  w.setBackend(m.backend);
  w.setLane(m.lane);
  w.setHostCallKey(kj::arrayPtr(reinterpret_cast<const uint8_t*>(m.host_call_key.data()),
                                m.host_call_key.size()));
  if (m.has_room) {
    auto r = w.initRoom();
    r.setFits(m.room.fits);
    r.setMemoryLeft(m.room.memory_left);
    r.setComputeLeft(m.room.compute_left);
    r.setSessions(m.room.sessions);
    r.setWhy(m.room.why);
    r.setPlacement(m.room.placement);
  }
  flatten(b, out);
}

void encode_host_call(const HostCallMsg& m, std::vector<uint8_t>* out) {
  capnp::word scratch[kScratchWords] = {};
  capnp::MallocMessageBuilder b(kj::arrayPtr(scratch, kScratchWords));
  auto c = b.initRoot<wire::HostCall>();
  c.setId(m.id);
  c.setStatus(m.status);
  flatten(b, out);
}

void encode_error(const ErrorMsg& m, std::vector<uint8_t>* out) {
  capnp::word scratch[kScratchWords] = {};
  capnp::MallocMessageBuilder b(kj::arrayPtr(scratch, kScratchWords));
  auto e = b.initRoot<wire::Error>();
  e.setKind(static_cast<wire::Error::Kind>(m.kind));
  e.setMessage(m.message);
  flatten(b, out);
}

void encode_call(uint32_t call_id, uint64_t context, std::span<const uint8_t> args,
                 std::vector<uint8_t>* out) {
  capnp::word scratch[kScratchWords] = {};
  capnp::MallocMessageBuilder b(kj::arrayPtr(scratch, kScratchWords));
  auto c = b.initRoot<wire::Call>();
  c.setCallId(call_id);
  c.setContext(context);
  c.setArgs(kj::arrayPtr(args.data(), args.size()));
  flatten(b, out);
}

// The layout encode_call's builder produces for wire::Call (callId @0 :UInt32, context @1
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
  capnp::word scratch[kScratchWords] = {};
  capnp::MallocMessageBuilder b(kj::arrayPtr(scratch, kScratchWords));
  auto r = b.initRoot<wire::Reply>();
  r.setResult(result);
  r.setOuts(kj::arrayPtr(outs.data(), outs.size()));
  if (!device_output.empty()) {
    r.setDeviceOutput(kj::arrayPtr(device_output.data(), device_output.size()));
  }
  flatten(b, out);
}

Status decode_hello(const Frame& f, HelloMsg* out) {
  return with_root<wire::Hello>(f, FrameType::kHello, [&](wire::Hello::Reader h) {
    out->protocol_version = h.getProtocolVersion();
    out->manifest_hash = h.getManifestHash();
    out->client_name = text(h.getClientName());
    out->pid = h.getPid();
    out->token = text(h.getToken());
    out->probe = h.getProbe();
    out->control = h.getControl();
    out->lane = h.getLane();
    out->host_calls = h.getHostCalls();
    out->host_call_session = h.getHostCallSession();
    auto k = h.getHostCallKey();
    out->host_call_key.assign(reinterpret_cast<const char*>(k.begin()), k.size());
  });
}

Status decode_control(const Frame& f, ControlMsg* out) {
  return with_root<wire::Control>(f, FrameType::kControl, [&](wire::Control::Reader c) {
    out->command = text(c.getCommand());
    out->args = text(c.getArgs());
  });
}

Status decode_control_reply(const Frame& f, ControlReplyMsg* out) {
  return with_root<wire::ControlReply>(f, FrameType::kControlReply,
                                       [&](wire::ControlReply::Reader r) {
                                         out->ok = r.getOk();
                                         out->error = text(r.getError());
                                         out->body = text(r.getBody());
                                       });
}

Status decode_welcome(const Frame& f, WelcomeMsg* out) {
  return with_root<wire::Welcome>(f, FrameType::kWelcome, [&](wire::Welcome::Reader w) {
    out->protocol_version = w.getProtocolVersion();
    out->session_id = w.getSessionId();
    out->server_name = text(w.getServerName());
    out->backend = text(w.getBackend());
    out->lane = w.getLane();
    auto k = w.getHostCallKey();
    out->host_call_key.assign(reinterpret_cast<const char*>(k.begin()), k.size());
    out->has_room = w.hasRoom();
    if (out->has_room) {
      auto r = w.getRoom();
      out->room.fits = r.getFits();
      out->room.memory_left = r.getMemoryLeft();
      out->room.compute_left = r.getComputeLeft();
      out->room.sessions = r.getSessions();
      out->room.why = text(r.getWhy());
      out->room.placement = text(r.getPlacement());
    }
  });
}

Status decode_host_call(const Frame& f, FrameType type, HostCallMsg* out) {
  return with_root<wire::HostCall>(f, type, [&](wire::HostCall::Reader c) {
    out->id = c.getId();
    out->status = c.getStatus();
  });
}

Status decode_error(const Frame& f, ErrorMsg* out) {
  return with_root<wire::Error>(f, FrameType::kError, [&](wire::Error::Reader e) {
    auto k = static_cast<uint16_t>(e.getKind());
    out->kind = k <= static_cast<uint16_t>(ErrorKind::kGoingAway) ? static_cast<ErrorKind>(k)
                                                                  : ErrorKind::kFailed;
    out->message = text(e.getMessage());
  });
}

Status decode_call(const Frame& f, CallView* out) {
  return with_root<wire::Call>(f, FrameType::kCall, [&](wire::Call::Reader c) {
    out->call_id = c.getCallId();
    out->context = c.getContext();
    auto a = c.getArgs();
    out->args = {a.begin(), a.size()};
  });
}

Status decode_reply(const Frame& f, ReplyView* out) {
  return with_root<wire::Reply>(f, FrameType::kReply, [&](wire::Reply::Reader r) {
    out->result = r.getResult();
    auto o = r.getOuts();
    out->outs = {o.begin(), o.size()};
    auto d = r.getDeviceOutput();
    out->device_output = {d.begin(), d.size()};
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
