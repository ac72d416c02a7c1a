#include "protocol/status.h"

namespace cuwire {

std::string Status::to_string() const {
  const char* name = "ok";
  switch (code_) {
    case Code::kOk:
      return "ok";
    case Code::kDisconnected:
      name = "disconnected";
      break;
    case Code::kMalformed:
      name = "malformed";
      break;
    case Code::kTooLarge:
      name = "too large";
      break;
    case Code::kUnknownType:
      name = "unknown type";
      break;
    case Code::kRejected:
      name = "rejected";
      break;
    case Code::kInvalidArgument:
      name = "invalid argument";
      break;
    case Code::kFailed:
      name = "failed";
      break;
  }
  return std::string(name) + ": " + message_;
}

}  // namespace cuwire
