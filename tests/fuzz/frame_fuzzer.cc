// libFuzzer target for everything that reads bytes from a peer: the frame reader (header
// checks, truncation), the capnp message decoders, and the argument cursor.
//
// Input: the bytes a peer sends on one connection. Frames are read until the bytes run out
// or the reader refuses them, as a server session does.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "protocol/args.h"
#include "protocol/byte_stream.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace {

class BytesStream final : public cuwire::ByteStream {
 public:
  BytesStream(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  cuwire::Status read_exact(void* buf, size_t n) override {
    if (pos_ == size_) return cuwire::Status::disconnected("end of input");
    if (n > size_ - pos_) {
      pos_ = size_;
      return cuwire::Status::malformed("truncated");
    }
    std::memcpy(buf, data_ + pos_, n);
    pos_ += n;
    return cuwire::Status::ok();
  }
  // Hands out odd-sized pieces, so frames split across reads at every kind of boundary.
  cuwire::Status read_some(void* buf, size_t n, size_t* got) override {
    if (pos_ == size_) return cuwire::Status::disconnected("end of input");
    *got = std::min({n, size_ - pos_, 1 + pos_ % 13});
    std::memcpy(buf, data_ + pos_, *got);
    pos_ += *got;
    return cuwire::Status::ok();
  }
  cuwire::Status write_all(std::span<const std::span<const uint8_t>>) override {
    return cuwire::Status::ok();
  }
  void close_write() override {}
  void shutdown() override {}
  std::string peer() const override { return "fuzz"; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  BytesStream stream(data, size);
  cuwire::FrameLimits limits;
  limits.max_message_bytes = 1 << 16;
  limits.max_bulk_bytes = 1 << 16;
  cuwire::Frame f;
  // Through the buffered reader, as a server session reads.
  cuwire::FrameReader reader(stream, 256);
  for (int i = 0; i < 16; ++i) {
    if (!reader.read(limits, &f)) break;
    (void)cuwire::decode_any(f);
    cuwire::CallView call;
    if (cuwire::decode_call(f, &call)) {
      // Walk the args as a generated dispatcher would: scalars, arrays, strings.
      cuwire::ArgCursor c(call.args);
      uint64_t v;
      std::span<const uint8_t> bytes;
      std::string s;
      bool is_null;
      while (c.ok() && !c.at_end()) {
        uint8_t tag;
        if (!c.get(&tag)) break;
        switch (tag % 3) {
          case 0:
            c.get(&v);
            break;
          case 1:
            c.get_bytes(&bytes);
            break;
          case 2:
            c.get_string(&s, &is_null);
            break;
        }
      }
    }
  }
  return 0;
}
