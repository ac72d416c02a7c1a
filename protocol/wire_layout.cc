#include "protocol/wire_layout.h"

namespace cuwire::wire_layout {
namespace {

constexpr uint64_t kStruct = 0, kList = 1, kFar = 2;
constexpr uint64_t kByteElements = 2;  // list element size code of a byte list
constexpr uint32_t kMaxSegments = 512;

uint64_t struct_pointer(int64_t offset, uint16_t data_words, uint16_t pointers) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(offset) << 2) | kStruct) |
         (uint64_t{data_words} << 32) | (uint64_t{pointers} << 48);
}

uint64_t byte_list_pointer(int64_t offset, uint64_t count) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(offset) << 2) | kList) |
         (kByteElements << 32) | (count << 35);
}

// The signed word offset of a struct or list pointer, from the word after it.
int64_t offset_of(uint64_t p) { return static_cast<int32_t>(static_cast<uint32_t>(p)) >> 2; }

}  // namespace

StructWriter::StructWriter(uint16_t data_words, uint16_t pointers)
    : data_words_(data_words), pointers_(pointers), words_(data_words + pointers, 0) {}

void StructWriter::put(size_t byte_offset, const void* v, size_t n) {
  if (byte_offset + n > size_t{data_words_} * 8) return;  // not a field of this struct
  std::memcpy(reinterpret_cast<uint8_t*>(words_.data()) + byte_offset, v, n);
}

void StructWriter::bit(size_t bit_offset, bool v) {
  if (bit_offset >= size_t{data_words_} * 64) return;
  auto* b = reinterpret_cast<uint8_t*>(words_.data()) + bit_offset / 8;
  const uint8_t mask = static_cast<uint8_t>(1u << (bit_offset % 8));
  *b = static_cast<uint8_t>(v ? (*b | mask) : (*b & ~mask));
}

void StructWriter::bytes(uint16_t index, const void* p, size_t n, bool nul) {
  if (index >= pointers_) return;
  const size_t at = size_t{data_words_} + index;
  const size_t target = words_.size();
  const uint64_t count = n + (nul ? 1 : 0);
  words_.resize(target + (count + 7) / 8, 0);
  if (n) std::memcpy(reinterpret_cast<uint8_t*>(words_.data() + target), p, n);
  words_[at] =
      byte_list_pointer(static_cast<int64_t>(target) - static_cast<int64_t>(at + 1), count);
}

void StructWriter::child(uint16_t index, const StructWriter& s) {
  if (index >= pointers_) return;
  const size_t at = size_t{data_words_} + index;
  const size_t target = words_.size();
  // The child's own pointers are relative to where they lie: the block moves as a whole.
  words_.insert(words_.end(), s.words_.begin(), s.words_.end());
  words_[at] = struct_pointer(static_cast<int64_t>(target) - static_cast<int64_t>(at + 1),
                              s.data_words_, s.pointers_);
}

void StructWriter::finish(std::vector<uint8_t>* out) const {
  const uint64_t segment_words = 1 + words_.size();  // the root pointer, then the struct
  const uint64_t head[2] = {segment_words << 32, struct_pointer(0, data_words_, pointers_)};
  out->resize(sizeof head + 8 * words_.size());
  std::memcpy(out->data(), head, sizeof head);
  if (!words_.empty()) std::memcpy(out->data() + sizeof head, words_.data(), 8 * words_.size());
}

bool MessageReader::open(std::span<const uint8_t> bytes, std::string* why) {
  segments_.clear();
  if (bytes.size() < 8) {
    *why = "a message shorter than its segment table";
    return false;
  }
  uint32_t count_minus_one = 0;
  std::memcpy(&count_minus_one, bytes.data(), 4);
  if (count_minus_one >= kMaxSegments) {
    *why = "a message of more than " + std::to_string(kMaxSegments) + " segments";
    return false;
  }
  const size_t count = size_t{count_minus_one} + 1;
  const size_t table_bytes = (count + 2) / 2 * 8;
  if (bytes.size() < table_bytes) {
    *why = "a segment table longer than the message";
    return false;
  }
  size_t at = table_bytes;
  for (size_t i = 0; i < count; ++i) {
    uint32_t words = 0;
    std::memcpy(&words, bytes.data() + 4 + 4 * i, 4);
    if (uint64_t{words} * 8 > bytes.size() - at) {
      *why = "segments longer than the message";
      return false;
    }
    segments_.push_back({bytes.data() + at, words});
    at += size_t{words} * 8;
  }
  if (segments_[0].words == 0) {
    *why = "a message without its root";
    return false;
  }
  return true;
}

bool MessageReader::resolve(uint32_t segment, size_t at, uint32_t* target_segment, size_t* target,
                            uint64_t* tag, std::string* why) const {
  uint64_t p = word(segment, at);
  uint32_t seg = segment;
  size_t from = at;  // the word the offset counts from is the one after `from`
  if ((p & 3) == kFar) {
    const bool double_far = (p >> 2) & 1;
    const size_t pad = (p >> 3) & 0x1fffffff;
    const uint64_t pad_segment = p >> 32;
    if (pad_segment >= segments_.size() ||
        pad + (double_far ? 2 : 1) > segments_[pad_segment].words) {
      *why = "a far pointer outside the message";
      return false;
    }
    seg = static_cast<uint32_t>(pad_segment);
    if (!double_far) {
      p = word(seg, pad);
      from = pad;
      if ((p & 3) == kFar) {
        *why = "a far pointer to a far pointer";
        return false;
      }
    } else {
      // A landing pad of two words: a far pointer to the object's start, then its tag.
      const uint64_t start = word(seg, pad);
      p = word(seg, pad + 1);
      if ((start & 3) != kFar || ((start >> 2) & 1) || (p & 3) == kFar) {
        *why = "a malformed double-far landing pad";
        return false;
      }
      const uint64_t object_segment = start >> 32;
      const size_t object = (start >> 3) & 0x1fffffff;
      if (object_segment >= segments_.size() || object > segments_[object_segment].words) {
        *why = "a far pointer outside the message";
        return false;
      }
      *target_segment = static_cast<uint32_t>(object_segment);
      *target = object;
      *tag = p;
      return true;
    }
  }
  if ((p & 3) == 3) {
    *why = "a capability pointer";
    return false;
  }
  const int64_t t = static_cast<int64_t>(from) + 1 + offset_of(p);
  if (t < 0 || static_cast<uint64_t>(t) > segments_[seg].words) {
    *why = "a pointer outside its segment";
    return false;
  }
  *target_segment = seg;
  *target = static_cast<size_t>(t);
  *tag = p;
  return true;
}

bool MessageReader::struct_at(uint32_t segment, size_t at, StructReader* out,
                              std::string* why) const {
  *out = StructReader();
  out->message_ = this;
  if (word(segment, at) == 0) return true;  // null: every field reads 0
  uint32_t seg = 0;
  size_t target = 0;
  uint64_t tag = 0;
  if (!resolve(segment, at, &seg, &target, &tag, why)) return false;
  if ((tag & 3) != kStruct) {
    *why = "a list where a struct belongs";
    return false;
  }
  const uint16_t data_words = static_cast<uint16_t>(tag >> 32);
  const uint16_t pointers = static_cast<uint16_t>(tag >> 48);
  if (size_t{data_words} + pointers > segments_[seg].words - target) {
    *why = "a struct running past its segment";
    return false;
  }
  out->segment_ = seg;
  out->data_ = target;
  out->pointers_ = target + data_words;
  out->data_words_ = data_words;
  out->pointer_count_ = pointers;
  return true;
}

bool MessageReader::root(StructReader* out, std::string* why) const {
  return struct_at(0, 0, out, why);
}

uint16_t StructReader::u16(size_t byte_offset) const {
  uint16_t v = 0;
  if (message_ && byte_offset + 2 <= size_t{data_words_} * 8) {
    std::memcpy(&v, message_->segments_[segment_].p + 8 * data_ + byte_offset, 2);
  }
  return v;
}

uint32_t StructReader::u32(size_t byte_offset) const {
  uint32_t v = 0;
  if (message_ && byte_offset + 4 <= size_t{data_words_} * 8) {
    std::memcpy(&v, message_->segments_[segment_].p + 8 * data_ + byte_offset, 4);
  }
  return v;
}

uint64_t StructReader::u64(size_t byte_offset) const {
  uint64_t v = 0;
  if (message_ && byte_offset + 8 <= size_t{data_words_} * 8) {
    std::memcpy(&v, message_->segments_[segment_].p + 8 * data_ + byte_offset, 8);
  }
  return v;
}

bool StructReader::bit(size_t bit_offset) const {
  if (!message_ || bit_offset >= size_t{data_words_} * 64) return false;
  const uint8_t b = message_->segments_[segment_].p[8 * data_ + bit_offset / 8];
  return (b >> (bit_offset % 8)) & 1;
}

bool StructReader::has(uint16_t index) const {
  return message_ && index < pointer_count_ && message_->word(segment_, pointers_ + index) != 0;
}

bool StructReader::bytes_at(uint16_t index, std::span<const uint8_t>* out, std::string* why) const {
  *out = {};
  if (!has(index)) return true;
  uint32_t seg = 0;
  size_t target = 0;
  uint64_t tag = 0;
  if (!message_->resolve(segment_, pointers_ + index, &seg, &target, &tag, why)) return false;
  if ((tag & 3) != kList || ((tag >> 32) & 7) != kByteElements) {
    *why = "not a byte list where text or data belongs";
    return false;
  }
  const uint64_t count = tag >> 35;
  if ((count + 7) / 8 > message_->segments_[seg].words - target) {
    *why = "a list running past its segment";
    return false;
  }
  *out = {message_->segments_[seg].p + 8 * target, static_cast<size_t>(count)};
  return true;
}

bool StructReader::text(uint16_t index, std::string* out, std::string* why) const {
  std::span<const uint8_t> b;
  if (!bytes_at(index, &b, why)) return false;
  out->clear();
  if (b.empty()) return true;
  if (b.back() != 0) {
    *why = "text without its NUL";
    return false;
  }
  out->assign(reinterpret_cast<const char*>(b.data()), b.size() - 1);
  return true;
}

bool StructReader::data(uint16_t index, std::span<const uint8_t>* out, std::string* why) const {
  return bytes_at(index, out, why);
}

bool StructReader::child(uint16_t index, StructReader* out, std::string* why) const {
  *out = StructReader();
  if (!has(index)) {
    out->message_ = message_;
    return true;
  }
  return message_->struct_at(segment_, pointers_ + index, out, why);
}

}  // namespace cuwire::wire_layout
