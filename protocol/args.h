// Packing of call arguments inside a Call message's `args` and a Reply's `outs`: scalars in
// native little-endian layout, arrays as a u64 byte length then the bytes, strings as a u32
// length (0xffffffff for NULL) then the bytes. Both ends are generated from one manifest, so
// the layout needs no per-field tags.
//
// ArgCursor reads hostile input: every read is bounds-checked and a failed read sticks.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "protocol/inline_vector.h"

namespace cuwire {

inline constexpr uint32_t kNullString = 0xffffffffu;

class ArgCursor {
 public:
  explicit ArgCursor(std::span<const uint8_t> data) : data_(data) {}

  template <typename T>
  bool get(T* v) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (!take(sizeof(T))) return false;
    std::memcpy(v, data_.data() + pos_ - sizeof(T), sizeof(T));
    return true;
  }
  // An array: u64 byte length then bytes; the view points into the message.
  bool get_bytes(std::span<const uint8_t>* out) {
    uint64_t n = 0;
    if (!get(&n) || n > remaining()) return fail();
    *out = data_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  // A string: u32 length (kNullString for NULL) then bytes, no terminator.
  bool get_string(std::string* out, bool* is_null) {
    uint32_t n = 0;
    if (!get(&n)) return false;
    *is_null = n == kNullString;
    if (*is_null) {
      out->clear();
      return true;
    }
    if (n > remaining()) return fail();
    out->assign(reinterpret_cast<const char*>(data_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  bool at_end() const { return ok_ && pos_ == data_.size(); }
  bool ok() const { return ok_; }
  size_t remaining() const { return data_.size() - pos_; }

 private:
  bool take(size_t n) {
    if (!ok_ || n > remaining()) return fail();
    pos_ += n;
    return true;
  }
  bool fail() {
    ok_ = false;
    return false;
  }
  std::span<const uint8_t> data_;
  size_t pos_ = 0;
  bool ok_ = true;
};

class ArgBuffer {
 public:
  template <typename T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    append(&v, sizeof(T));
  }
  void put_bytes(const void* p, size_t n) {
    put<uint64_t>(n);
    append(p, n);
  }
  void put_string(const char* s) {
    if (!s) {
      put<uint32_t>(kNullString);
      return;
    }
    size_t n = std::strlen(s);
    put<uint32_t>(static_cast<uint32_t>(n));
    append(s, n);
  }
  void append(const void* p, size_t n) {
    if (n == 0) return;  // an empty array may come with a null pointer
    bytes_.append(static_cast<const uint8_t*>(p), n);
  }
  void clear() { bytes_.clear(); }
  std::span<const uint8_t> data() const { return bytes_.span(); }

 private:
  // A call's arguments are rarely over a few hundred bytes: those cost no allocation.
  InlineVector<uint8_t, 256> bytes_;
};

}  // namespace cuwire
