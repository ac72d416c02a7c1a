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

#include "frame.h"
#include "status.h"

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
};

struct WelcomeMsg {
  uint32_t protocol_version = kProtocolVersion;
  uint64_t session_id = 0;
  std::string server_name;
  std::string backend;
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

// Encoders append the flat capnp message (segment table + segments) to *out after clearing it.
void encode_hello(const HelloMsg& m, std::vector<uint8_t>* out);
void encode_welcome(const WelcomeMsg& m, std::vector<uint8_t>* out);
void encode_error(const ErrorMsg& m, std::vector<uint8_t>* out);
void encode_call(uint32_t call_id, uint64_t context, std::span<const uint8_t> args,
                 std::vector<uint8_t>* out);
void encode_reply(uint32_t result, std::span<const uint8_t> outs, std::vector<uint8_t>* out,
                  std::span<const uint8_t> device_output = {});

Status decode_hello(const Frame& f, HelloMsg* out);
Status decode_welcome(const Frame& f, WelcomeMsg* out);
Status decode_error(const Frame& f, ErrorMsg* out);
Status decode_call(const Frame& f, CallView* out);
Status decode_reply(const Frame& f, ReplyView* out);

// Decodes a message of whatever type the header names, discarding it: for the fuzzer and for
// validating frames. kUnknownType for types without a message.
Status decode_any(const Frame& f);

// Sends an Error frame (best effort: the peer may already be gone).
void send_error(Stream& stream, ErrorKind kind, const std::string& message);

}  // namespace cuwire
