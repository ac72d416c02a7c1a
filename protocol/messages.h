// Plain structs for the capnp messages of cuwire.capnp, and their encoding. Callers never see
// capnp headers: encode/decode live in messages.cc.
//
// Decoding is hostile-input safe: any malformed message is a kMalformed Status, never an
// exception or a crash.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "protocol/frame.h"
#include "protocol/status.h"

namespace cuwire {

// Mirrors wire::Error::Kind in cuwire.capnp (same order).
enum class ErrorKind : uint16_t {
  kFailed = 0,
  kMalformedFrame,
  kFrameTooLarge,
  kUnknownType,
  kVersionMismatch,
  kManifestMismatch,
  kUnauthorized,
  kOverloaded,
  kUnexpected,
  kGoingAway,
};
const char* error_kind_name(ErrorKind k);

struct HelloMsg {
  uint32_t protocol_version = kProtocolVersion;
  uint64_t manifest_hash = 0;
  std::string client_name;
  uint32_t pid = 0;
  std::string token;
  // Ask for the server's room for this token's tenant instead of a session (cuwire.capnp).
  bool probe = false;
  // A control connection instead of a session (cuwire.capnp): Control requests follow.
  bool control = false;
  // A memfd follows the Hello (cuwire.capnp, shm_lane.h).
  bool lane = false;
  // The host-call connection of session `host_call_session`, with the key its Welcome gave.
  bool host_calls = false;
  uint64_t host_call_session = 0;
  std::string host_call_key{};
};

// A server's answer to a probe Hello: what placement (server/tenancy/placement.h) has left for a
// new session of the client's tenant, on the GPU it would choose.
struct RoomMsg {
  bool fits = false;
  uint64_t memory_left = 0;   // bytes
  uint32_t compute_left = 0;  // percent
  uint32_t sessions = 0;      // on that GPU now
  std::string why;            // when it does not fit
  std::string placement;      // "spread" | "binpack"; empty: the server places no session
};

struct WelcomeMsg {
  uint32_t protocol_version = kProtocolVersion;
  uint64_t session_id = 0;
  std::string server_name;
  std::string backend;
  // Set by a server answering a probe Hello; false from a server that made a session of it
  // (one older than probes).
  bool has_room = false;
  // `{}`: a brace list of the fields before it (WelcomeMsg{version, id, name, backend}) then
  // draws no -Wmissing-field-initializers.
  RoomMsg room{};
  bool lane = false;            // the server took the client's data lane
  std::string host_call_key{};  // empty: the server takes no host-call connection
};

// A HostCall or HostCallDone frame's message (cuwire.capnp).
struct HostCallMsg {
  uint64_t id = 0;
  uint32_t status = 0;
};

struct ErrorMsg {
  ErrorKind kind = ErrorKind::kFailed;
  std::string message;
};

// A decoded call; `args` points into the frame it was decoded from.
struct CallView {
  uint32_t call_id = 0;
  uint64_t context = 0;
  std::span<const uint8_t> args;
};

// A decoded reply; `outs` and `device_output` point into the frame it was decoded from.
struct ReplyView {
  uint32_t result = 0;
  std::span<const uint8_t> outs;
  std::span<const uint8_t> device_output;  // device printf text for the client's stdout
};

// A request on a control connection, and its answer (server/ops/admin.h has the commands).
struct ControlMsg {
  std::string command;
  std::string args;  // JSON object text; empty: none
};
struct ControlReplyMsg {
  bool ok = false;
  std::string error;  // when !ok
  std::string body;   // when ok: JSON object text
};

// Encoders write the flat message (segment table + one segment, Cap'n Proto's layout of
// cuwire.capnp: protocol/wire_layout.h) to *out, replacing what it held.
void encode_hello(const HelloMsg& m, std::vector<uint8_t>* out);
void encode_welcome(const WelcomeMsg& m, std::vector<uint8_t>* out);
void encode_error(const ErrorMsg& m, std::vector<uint8_t>* out);
void encode_host_call(const HostCallMsg& m, std::vector<uint8_t>* out);
void encode_call(uint32_t call_id, uint64_t context, std::span<const uint8_t> args,
                 std::vector<uint8_t>* out);
// The same Call message written straight into `out`, for the client's enqueue path: exactly
// call_message_bytes(args.size()) bytes, the single-segment message a capnp builder writes
// (tests/protocol/wire_layout_test.cc checks them byte for byte).
size_t call_message_bytes(size_t args_bytes);
void encode_call_into(uint32_t call_id, uint64_t context, std::span<const uint8_t> args,
                      uint8_t* out);
void encode_reply(uint32_t result, std::span<const uint8_t> outs, std::vector<uint8_t>* out,
                  std::span<const uint8_t> device_output = {});

void encode_control(const ControlMsg& m, std::vector<uint8_t>* out);
void encode_control_reply(const ControlReplyMsg& m, std::vector<uint8_t>* out);

Status decode_hello(const Frame& f, HelloMsg* out);
Status decode_control(const Frame& f, ControlMsg* out);
Status decode_control_reply(const Frame& f, ControlReplyMsg* out);
Status decode_welcome(const Frame& f, WelcomeMsg* out);
Status decode_error(const Frame& f, ErrorMsg* out);
// `type`: kHostCall or kHostCallDone, which carry the same message.
Status decode_host_call(const Frame& f, FrameType type, HostCallMsg* out);
Status decode_call(const Frame& f, CallView* out);
Status decode_reply(const Frame& f, ReplyView* out);
// A Reply read whole (bulk included, as read_frame reads it): *bulk is its bulk bytes without
// the result trailer of a streamed reply (frame.h: kFlagResultTrailer), whose result then
// replaces the message's in *out.
Status decode_whole_reply(const Frame& f, ReplyView* out, std::span<const uint8_t>* bulk);

// Decodes a message of whatever type the header names, discarding it: for the fuzzer and for
// validating frames. kUnknownType for types without a message.
Status decode_any(const Frame& f);

// Sends an Error frame (best effort: the peer may already be gone).
void send_error(ByteStream& stream, ErrorKind kind, const std::string& message);

}  // namespace cuwire
