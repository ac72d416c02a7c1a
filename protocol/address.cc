#include "protocol/address.h"

#include <charconv>

namespace cuwire {

std::string Address::to_string() const {
  switch (kind) {
    case Kind::kUnix:
      return "unix:" + path;
    case Kind::kTcp:
    case Kind::kTls: {
      std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
      return std::string(kind == Kind::kTcp ? "tcp:" : "tls:") + h + ":" + std::to_string(port);
    }
  }
  return "?";
}

Status parse_address(std::string_view text, Address* out) {
  auto bad = [&](const char* why) {
    return Status::invalid_argument("bad address '" + std::string(text) + "': " + why +
                                    " (expected unix:PATH, tcp:HOST:PORT or tls:HOST:PORT)");
  };
  size_t colon = text.find(':');
  if (colon == std::string_view::npos) return bad("no scheme");
  std::string_view scheme = text.substr(0, colon), rest = text.substr(colon + 1);
  Address a;
  if (scheme == "unix") {
    if (rest.empty()) return bad("empty path");
    a.kind = Address::Kind::kUnix;
    a.path = std::string(rest);
    *out = std::move(a);
    return Status::ok();
  }
  if (scheme == "tcp") {
    a.kind = Address::Kind::kTcp;
  } else if (scheme == "tls") {
    a.kind = Address::Kind::kTls;
  } else {
    return bad("unknown scheme");
  }
  std::string_view host, port;
  if (!rest.empty() && rest.front() == '[') {
    size_t close = rest.find(']');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      return bad("unterminated [IPv6]");
    }
    host = rest.substr(1, close - 1);
    port = rest.substr(close + 2);
  } else {
    size_t pc = rest.rfind(':');
    if (pc == std::string_view::npos) return bad("no port");
    host = rest.substr(0, pc);
    port = rest.substr(pc + 1);
  }
  if (host.empty()) return bad("empty host");
  unsigned p = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (ec != std::errc() || end != port.data() + port.size() || port.empty() || p > 65535) {
    return bad("port must be a number 0-65535");
  }
  a.host = std::string(host);
  a.port = static_cast<uint16_t>(p);
  *out = std::move(a);
  return Status::ok();
}

Status parse_address_list(std::string_view text, std::vector<ListedAddress>* out) {
  out->clear();
  for (size_t from = 0;;) {
    const size_t comma = text.find(',', from);
    ListedAddress a;
    a.text = std::string(text.substr(from, comma == std::string_view::npos ? comma : comma - from));
    if (Status s = parse_address(a.text, &a.address); !s) return s;
    out->push_back(std::move(a));
    if (comma == std::string_view::npos) return Status::ok();
    from = comma + 1;
  }
}

}  // namespace cuwire
