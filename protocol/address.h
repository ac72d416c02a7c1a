// Endpoint addresses, one syntax everywhere (gpu-server --listen, CUWIRE_SERVER):
//   unix:PATH        a Unix domain socket
//   tcp:HOST:PORT    TCP with TCP_NODELAY; HOST may be a name, IPv4, or [IPv6]
//   tls:HOST:PORT    TLS 1.3 over TCP
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/status.h"

namespace cuwire {

// Where the client library looks when CUWIRE_SERVER is not set, and where gpu-server serves
// without --listen: `gpu-server &` then `cuwire run -- ./app` needs no address.
inline constexpr char kDefaultAddress[] = "unix:/tmp/cuwire.sock";

struct Address {
  enum class Kind { kUnix, kTcp, kTls };
  Kind kind = Kind::kUnix;
  std::string path;  // kUnix
  std::string host;  // kTcp, kTls (without brackets)
  uint16_t port = 0;

  std::string to_string() const;
};

Status parse_address(std::string_view text, Address* out);

// One address of a list, as written (for messages) and parsed.
struct ListedAddress {
  std::string text;
  Address address;
};
// Addresses separated by commas (CUWIRE_SERVER); one address is a list of one. The first bad
// one fails the list. A unix: path in a list therefore cannot hold a comma.
Status parse_address_list(std::string_view text, std::vector<ListedAddress>* out);

}  // namespace cuwire
