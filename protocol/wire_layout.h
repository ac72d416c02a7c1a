// Cap'n Proto's wire layout for the few fixed structs of cuwire.capnp, read and written by hand
// (protocol/messages.cc): no Cap'n Proto library at run time, so the client library links into
// any process with nothing but glibc. The layout is the one the Cap'n Proto encoding
// specification describes and `capnp` generates for cuwire.capnp; tests/protocol compares both
// byte for byte and decodes each with the other.
//
// A message is a segment table (u32 segment count - 1, u32 size in words per segment, padded to
// a word) and its segments. Writers here make one segment; readers follow struct, list and far
// pointers across segments (what a Cap'n Proto builder makes of a large message), checking every
// offset and size against the segment it lies in: a message is never trusted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace cuwire::wire_layout {

// One struct of a message being written: `data_words` words of data, then `pointers` pointers,
// then the objects they point at (byte lists), all in one segment.
class StructWriter {
 public:
  StructWriter(uint16_t data_words, uint16_t pointers);
  void u16(size_t byte_offset, uint16_t v) { put(byte_offset, &v, 2); }
  void u32(size_t byte_offset, uint32_t v) { put(byte_offset, &v, 4); }
  void u64(size_t byte_offset, uint64_t v) { put(byte_offset, &v, 8); }
  void bit(size_t bit_offset, bool v);
  // Text (NUL-terminated byte list) and Data (byte list) in pointer slot `index`.
  void text(uint16_t index, std::string_view s) { bytes(index, s.data(), s.size(), true); }
  void data(uint16_t index, std::span<const uint8_t> d) { bytes(index, d.data(), d.size(), false); }
  // A struct in pointer slot `index`, written after the objects already placed.
  void child(uint16_t index, const StructWriter& s);
  // The whole single-segment message, root pointer first, into *out (cleared).
  void finish(std::vector<uint8_t>* out) const;

 private:
  void put(size_t byte_offset, const void* v, size_t n);
  void bytes(uint16_t index, const void* p, size_t n, bool nul);
  uint16_t data_words_, pointers_;
  std::vector<uint64_t> words_;  // the struct's sections, then what its pointers point at
};

// A struct of a message being read. A field past the struct's data section reads 0, a pointer
// past its pointer section is null, as the encoding specifies for a struct of an older schema.
class StructReader {
 public:
  StructReader() = default;
  uint16_t u16(size_t byte_offset) const;
  uint32_t u32(size_t byte_offset) const;
  uint64_t u64(size_t byte_offset) const;
  bool bit(size_t bit_offset) const;
  bool has(uint16_t index) const;
  // False (with *why) when the pointer is not null and not a byte list inside the message.
  bool text(uint16_t index, std::string* out, std::string* why) const;
  bool data(uint16_t index, std::span<const uint8_t>* out, std::string* why) const;
  // A null pointer gives an empty struct (every field 0).
  bool child(uint16_t index, StructReader* out, std::string* why) const;

 private:
  friend class MessageReader;
  const class MessageReader* message_ = nullptr;
  uint32_t segment_ = 0;
  size_t data_ = 0;      // word index of the data section in the segment
  size_t pointers_ = 0;  // word index of the pointer section
  uint16_t data_words_ = 0, pointer_count_ = 0;
  bool bytes_at(uint16_t index, std::span<const uint8_t>* out, std::string* why) const;
};

// A message's segments, over bytes the caller keeps alive (8-byte aligned or not).
class MessageReader {
 public:
  // False (with *why) when the segment table does not describe exactly what lies in `bytes`.
  bool open(std::span<const uint8_t> bytes, std::string* why);
  bool root(StructReader* out, std::string* why) const;

 private:
  friend class StructReader;
  struct Segment {
    const uint8_t* p = nullptr;
    size_t words = 0;
  };
  uint64_t word(uint32_t segment, size_t index) const {
    uint64_t w;
    std::memcpy(&w, segments_[segment].p + 8 * index, 8);
    return w;
  }
  // Resolves the pointer at word `at` of `segment` (following far pointers) to its target:
  // *target_segment and *target (word index) with the pointer word that describes it (*tag).
  bool resolve(uint32_t segment, size_t at, uint32_t* target_segment, size_t* target, uint64_t* tag,
               std::string* why) const;
  bool struct_at(uint32_t segment, size_t at, StructReader* out, std::string* why) const;
  std::vector<Segment> segments_;
};

}  // namespace cuwire::wire_layout
