#include "server/backend/sim/ptx/device_printf.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace cuwire::ptx {
namespace {

// Width and precision beyond this are clamped: a kernel cannot make one conversion allocate
// more than this many bytes.
constexpr int kMaxFieldWidth = 4096;

// Formats one value with a host format spec the caller built from a validated conversion, so the
// spec always matches T.
template <class T>
void Emit(std::string* out, const std::string& spec, T value) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
  int n = std::snprintf(nullptr, 0, spec.c_str(), value);
  if (n <= 0) return;
  size_t old = out->size();
  out->resize(old + static_cast<size_t>(n) + 1);
  std::snprintf(out->data() + old, static_cast<size_t>(n) + 1, spec.c_str(), value);
#pragma GCC diagnostic pop
  out->resize(old + static_cast<size_t>(n));
}

class ArgCursor {
 public:
  ArgCursor(const DeviceReader& read, uint64_t base) : read_(read), base_(base) {}

  // Reads the next argument of `size` bytes (4 or 8) at its natural alignment.
  bool Next(size_t size, uint64_t* value, PrintfResult* r) {
    *value = 0;
    offset_ = (offset_ + size - 1) / size * size;
    uint64_t addr = base_ + offset_;
    if (base_ == 0) {
      missing_ = true;
      return false;
    }
    if (!read_(addr, value, size)) {
      r->fault = true;
      r->fault_addr = addr;
      return false;
    }
    offset_ += size;
    ++count_;
    return true;
  }
  int count() const { return count_; }
  bool missing() const { return missing_; }

 private:
  const DeviceReader& read_;
  uint64_t base_;
  uint64_t offset_ = 0;
  int count_ = 0;
  bool missing_ = false;
};

// Reads a NUL-terminated string of at most `max` bytes. Reads in chunks that do not cross a
// 64-byte boundary, falling back to single bytes where a chunk is not readable (a string that
// ends just before the end of its allocation).
bool ReadString(const DeviceReader& read, uint64_t addr, size_t max, std::string* s,
                uint64_t* fault_addr) {
  s->clear();
  char buf[64];
  while (s->size() < max) {
    size_t chunk = std::min<size_t>(64 - (addr % 64), max - s->size());
    if (read(addr, buf, chunk)) {
      const void* nul = std::memchr(buf, 0, chunk);
      size_t n = nul ? static_cast<size_t>(static_cast<const char*>(nul) - buf) : chunk;
      s->append(buf, n);
      if (nul) return true;
      addr += chunk;
      continue;
    }
    for (size_t i = 0; i < chunk; ++i, ++addr) {
      char c;
      if (!read(addr, &c, 1)) {
        *fault_addr = addr;
        return false;
      }
      if (c == 0) return true;
      s->push_back(c);
    }
  }
  return true;
}

int ClampField(int64_t v) { return static_cast<int>(std::min<int64_t>(v, kMaxFieldWidth)); }

}  // namespace

PrintfResult FormatDevicePrintf(const DeviceReader& read, uint64_t fmt_addr, uint64_t args,
                                size_t room, std::string* out) {
  PrintfResult r;
  if (fmt_addr == 0) {
    r.value = -1;
    return r;
  }
  std::string fmt;
  if (!ReadString(read, fmt_addr, kPrintfMaxString, &fmt, &r.fault_addr)) {
    r.fault = true;
    return r;
  }
  ArgCursor arg(read, args);
  std::string text;
  size_t i = 0;
  while (i < fmt.size() && text.size() < room) {
    char c = fmt[i];
    if (c != '%') {
      size_t next = fmt.find('%', i);
      if (next == std::string::npos) next = fmt.size();
      text.append(fmt, i, next - i);
      i = next;
      continue;
    }
    size_t start = i++;
    if (i < fmt.size() && fmt[i] == '%') {
      text.push_back('%');
      ++i;
      continue;
    }
    std::string flags;
    while (i < fmt.size() && std::strchr("-+ #0", fmt[i])) flags.push_back(fmt[i++]);
    int width = -1, precision = -1;
    uint64_t v = 0;
    if (i < fmt.size() && fmt[i] == '*') {
      ++i;
      if (!arg.Next(4, &v, &r)) break;
      int w = static_cast<int32_t>(v);
      if (w < 0) {
        flags.push_back('-');
        w = w == INT32_MIN ? INT32_MAX : -w;
      }
      width = ClampField(w);
    } else {
      int64_t w = -1;
      while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') {
        w = std::max<int64_t>(w, 0);
        w = std::min<int64_t>(w * 10 + (fmt[i++] - '0'), 1 << 30);
      }
      if (w >= 0) width = ClampField(w);
    }
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      precision = 0;
      if (i < fmt.size() && fmt[i] == '*') {
        ++i;
        if (!arg.Next(4, &v, &r)) break;
        int p = static_cast<int32_t>(v);
        precision = p < 0 ? -1 : ClampField(p);
      } else {
        int64_t p = 0;
        while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9')
          p = std::min<int64_t>(p * 10 + (fmt[i++] - '0'), 1 << 30);
        precision = ClampField(p);
      }
    }
    // Length modifiers: h/hh narrow the (int-promoted) value; l, ll, z, j, t, q make it 8 bytes.
    int length = 0;  // -2 hh, -1 h, 0 none, 1 long
    while (i < fmt.size() && std::strchr("hlLzjtq", fmt[i])) {
      char m = fmt[i++];
      if (m == 'h')
        length = length == -1 ? -2 : -1;
      else if (m != 'L')
        length = 1;
    }
    if (i >= fmt.size()) {
      text.append(fmt, start, std::string::npos);
      break;
    }
    char conv = fmt[i++];
    std::string spec = "%" + flags;
    if (width >= 0) spec += std::to_string(width);
    if (precision >= 0) {
      spec += '.';
      spec += std::to_string(precision);
    }
    size_t size = length == 1 ? 8 : 4;
    switch (conv) {
      case 'd':
      case 'i': {
        if (!arg.Next(size, &v, &r)) break;
        int64_t s = size == 8 ? static_cast<int64_t>(v) : static_cast<int32_t>(v);
        if (length == -1) s = static_cast<int16_t>(s);
        if (length == -2) s = static_cast<int8_t>(s);
        Emit(&text, spec + "lld", static_cast<long long>(s));
        break;
      }
      case 'u':
      case 'o':
      case 'x':
      case 'X': {
        if (!arg.Next(size, &v, &r)) break;
        uint64_t u = size == 8 ? v : static_cast<uint32_t>(v);
        if (length == -1) u = static_cast<uint16_t>(u);
        if (length == -2) u = static_cast<uint8_t>(u);
        Emit(&text, spec + "ll" + conv, static_cast<unsigned long long>(u));
        break;
      }
      case 'c': {
        if (!arg.Next(4, &v, &r)) break;
        Emit(&text, spec + "c", static_cast<int>(static_cast<unsigned char>(v)));
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G':
      case 'a':
      case 'A': {
        if (!arg.Next(8, &v, &r)) break;
        double d;
        std::memcpy(&d, &v, 8);
        Emit(&text, spec + conv, d);
        break;
      }
      case 's': {
        if (!arg.Next(8, &v, &r)) break;
        std::string s;
        if (v == 0) {
          s = "(null)";
        } else {
          size_t max = precision >= 0 ? static_cast<size_t>(precision) : kPrintfMaxString;
          if (!ReadString(read, v, max, &s, &r.fault_addr)) r.fault = true;
        }
        if (!r.fault) Emit(&text, spec + "s", s.c_str());
        break;
      }
      case 'p': {
        if (!arg.Next(8, &v, &r)) break;
        // Only the value is printed; the host never dereferences it.
        Emit(&text, spec + "p", reinterpret_cast<const void*>(static_cast<uintptr_t>(v)));
        break;
      }
      case 'n':
        arg.Next(8, &v, &r);  // writes nothing: device printf does not support %n
        break;
      default:
        text.append(fmt, start, i - start);  // not a conversion: printed as written
        break;
    }
    if (r.fault || arg.missing()) break;
  }
  if (r.fault) return r;
  out->append(text, 0, std::min(room, text.size()));
  r.value = arg.missing() ? -1 : arg.count();
  return r;
}

}  // namespace cuwire::ptx
