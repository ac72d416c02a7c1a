#include "protocol/size.h"

#include <cctype>
#include <charconv>
#include <cstdint>

namespace cuwire {

Status parse_size(const std::string& text, uint64_t* out) {
  const char* b = text.data();
  const char* e = b + text.size();
  uint64_t n = 0;
  auto [p, ec] = std::from_chars(b, e, n);
  if (ec != std::errc() || p == b) return Status::invalid_argument("bad size '" + text + "'");
  std::string unit(p, e);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  uint64_t mul = 1;
  if (unit.empty() || unit == "b")
    mul = 1;
  else if (unit == "k" || unit == "kib")
    mul = 1ull << 10;
  else if (unit == "m" || unit == "mib")
    mul = 1ull << 20;
  else if (unit == "g" || unit == "gib")
    mul = 1ull << 30;
  else if (unit == "t" || unit == "tib")
    mul = 1ull << 40;
  else if (unit == "kb")
    mul = 1000ull;
  else if (unit == "mb")
    mul = 1000ull * 1000;
  else if (unit == "gb")
    mul = 1000ull * 1000 * 1000;
  else
    return Status::invalid_argument("bad size unit in '" + text + "' (use B, KiB, MiB, GiB)");
  if (n > UINT64_MAX / mul) return Status::invalid_argument("size '" + text + "' overflows");
  *out = n * mul;
  return Status::ok();
}

}  // namespace cuwire
