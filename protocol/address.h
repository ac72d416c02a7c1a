// Endpoint addresses, one syntax everywhere (gpu-server --listen, CUWIRE_SERVER):
//   unix:PATH        a Unix domain socket
//   tcp:HOST:PORT    TCP with TCP_NODELAY; HOST may be a name, IPv4, or [IPv6]
//   tls:HOST:PORT    TLS 1.3 over TCP
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "status.h"

namespace cuwire {

struct Address {
  enum class Kind { kUnix, kTcp, kTls };
  Kind kind = Kind::kUnix;
  std::string path;  // kUnix
  std::string host;  // kTcp, kTls (without brackets)
  uint16_t port = 0;

  std::string to_string() const;
};

Status parse_address(std::string_view text, Address* out);

}  // namespace cuwire
