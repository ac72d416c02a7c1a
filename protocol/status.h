// Status: a cheap value type for the outcome of an operation that can fail for reasons outside
// our control (peer, input, OS). Our own bugs are asserts, not Status.
#pragma once

#include <string>
#include <utility>

namespace cuwire {

class Status {
 public:
  enum class Code {
    kOk = 0,
    kDisconnected,  // the peer or the transport is gone; retrying on this stream is useless
    kMalformed,     // bytes that do not decode: bad magic, truncated, invalid capnp
    kTooLarge,      // a length over a configured limit
    kUnknownType,   // a frame type we do not know
    kRejected,      // a valid message the peer may not send: version/manifest/token mismatch
    kInvalidArgument,
    kFailed,  // anything else
  };

  Status() = default;
  static Status ok() { return Status(); }
  static Status disconnected(std::string m) { return Status(Code::kDisconnected, std::move(m)); }
  static Status malformed(std::string m) { return Status(Code::kMalformed, std::move(m)); }
  static Status too_large(std::string m) { return Status(Code::kTooLarge, std::move(m)); }
  static Status unknown_type(std::string m) { return Status(Code::kUnknownType, std::move(m)); }
  static Status rejected(std::string m) { return Status(Code::kRejected, std::move(m)); }
  static Status invalid_argument(std::string m) {
    return Status(Code::kInvalidArgument, std::move(m));
  }
  static Status failed(std::string m) { return Status(Code::kFailed, std::move(m)); }

  bool is_ok() const { return code_ == Code::kOk; }
  explicit operator bool() const { return is_ok(); }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

 private:
  Status(Code c, std::string m) : code_(c), message_(std::move(m)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

}  // namespace cuwire
