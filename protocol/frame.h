// Frames: the unit of the cuwire wire protocol.
//
// A frame is a 32-byte little-endian header, then `message_bytes` of Cap'n Proto message
// (a flat segment table + segments, as capnp::messageToFlatArray writes it), then `bulk_bytes`
// of raw payload. The bulk part carries memcpy data and module images; it is never copied into
// a message builder.
//
// Thread-safety: FrameReader and FrameWriter are not thread-safe; one owner per stream direction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "protocol/status.h"

namespace cuwire {

class ByteStream;

inline constexpr uint32_t kFrameMagic = 0x31575543;  // "CUW1"
inline constexpr uint32_t kProtocolVersion = 1;

enum class FrameType : uint16_t {
  kHello = 1,
  kWelcome = 2,
  kError = 3,
  kCall = 4,
  kReply = 5,
  kGoodbye = 6,
  kControl = 7,        // on a control connection (Hello.control): a request
  kControlReply = 8,   // its answer
  kHostCall = 9,       // on a host-call connection (Hello.hostCalls): server asks, run this
  kHostCallDone = 10,  // client: it returned
};
inline constexpr uint16_t kMaxFrameType = 10;

// Frame flags.
inline constexpr uint16_t kFlagNoReply = 1 << 0;  // kCall: fire-and-forget, errors deferred
// kReply: the bulk bytes end with a ResultTrailer whose result replaces the message's. A server
// streaming a large reply starts sending it before the copy that produces its bytes is done, so
// a failure part-way can only be told after them.
inline constexpr uint16_t kFlagResultTrailer = 1 << 1;

// kCall, kReply: the frame's bulk bytes (less a result trailer, which stays on the stream)
// travel through the connection's shared-memory lane (shm_lane.h), in order, not the stream.
inline constexpr uint16_t kFlagBulkInLane = 1 << 2;
// kCall: the reply's bulk bytes may travel through the lane (the reply then says so with
// kFlagBulkInLane).
inline constexpr uint16_t kFlagReplyInLane = 1 << 3;
// kReply: the call failed because the session's tenant reached its memory cap (the client
// library says so on stderr, once).
inline constexpr uint16_t kFlagCapReached = 1 << 4;

struct ResultTrailer {
  uint32_t result = 0;  // CUresult
  uint32_t reserved = 0;
};
static_assert(sizeof(ResultTrailer) == 8, "the trailer layout is part of the protocol");

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint16_t type = 0;
  uint16_t flags = 0;
  uint32_t message_bytes = 0;  // multiple of 8 (capnp words)
  uint32_t reserved = 0;
  uint64_t bulk_bytes = 0;
  uint64_t sequence = 0;
};
static_assert(sizeof(FrameHeader) == 32, "the header layout is part of the protocol");

struct FrameLimits {
  uint32_t max_message_bytes = 1u << 20;  // 1 MiB of capnp message
  uint64_t max_bulk_bytes = 1ull << 31;   // 2 GiB of payload in one frame
};

// A decoded frame; `message` holds capnp words (8-byte aligned).
struct Frame {
  FrameHeader header;
  std::vector<uint64_t> message;
  std::vector<uint8_t> bulk;

  FrameType type() const { return static_cast<FrameType>(header.type); }
  std::span<const uint8_t> message_bytes() const {
    return {reinterpret_cast<const uint8_t*>(message.data()), message.size() * 8};
  }
};

// Checks a header against the protocol and the limits. The kind of a failure tells the peer
// what went wrong (see wire::Error::Kind): kMalformed, kTooLarge or kUnknownType.
Status check_header(const FrameHeader& h, const FrameLimits& limits);

// Reads one whole frame. Transport failures (peer gone, truncated frame) come back as
// kDisconnected; protocol violations as the check_header kinds. Never throws.
Status read_frame(ByteStream& stream, const FrameLimits& limits, Frame* out);

// Reads frames through a buffer: one read(2) takes in whatever the peer has sent, often several
// small frames at once (a client's batch of fire-and-forget calls), and the frames are then
// taken from memory. Bulk bytes past what is buffered are read straight to their destination.
//
// Not thread-safe: one reader per stream, and nothing else reads that stream while it lives
// (bytes it buffered would be lost to the other reader).
class FrameReader {
 public:
  explicit FrameReader(ByteStream& stream, size_t buffer_bytes = 64 << 10);
  FrameReader(const FrameReader&) = delete;
  FrameReader& operator=(const FrameReader&) = delete;

  // The next frame's header and message; its bulk bytes (header.bulk_bytes) are left to
  // read_bulk/skip_bulk/read_rest, and must all be taken before the next read_head.
  Status read_head(const FrameLimits& limits, Frame* out);
  // The current frame's next n bulk bytes into p (n at most what is left of them).
  Status read_bulk(void* p, size_t n);
  // Drops the current frame's next n bulk bytes.
  Status skip_bulk(uint64_t n);
  // The rest of the current frame's bulk bytes into out->bulk, which grows with the bytes that
  // actually arrive (a header that merely claims a large payload allocates nothing).
  Status read_rest(Frame* out);
  // read_head then read_rest: one whole frame, as read_frame reads it.
  Status read(const FrameLimits& limits, Frame* out);

  // Bulk bytes of the current frame not yet taken from the stream.
  uint64_t bulk_left() const { return bulk_left_; }
  // Bulk bytes of the current frame that travel through the lane (kFlagBulkInLane).
  uint64_t lane_bytes() const { return lane_bytes_; }
  // Bytes read from the stream and not yet taken (later frames); for tests.
  size_t buffered() const { return end_ - begin_; }

 private:
  // Makes at least n (at most the buffer's size) bytes available in buf_[begin_, end_).
  Status fill(size_t n);
  // Takes n bytes into p: from the buffer, then the stream.
  Status take(void* p, size_t n);

  ByteStream& stream_;
  std::vector<uint8_t> buf_;
  size_t begin_ = 0, end_ = 0;
  uint64_t bulk_left_ = 0;
  uint64_t lane_bytes_ = 0;
};

// Writes header + message + bulk pieces with one gather write. `bulk` pieces are sent in
// order without copying; header.message_bytes/bulk_bytes are filled in here.
Status write_frame(ByteStream& stream, FrameHeader header, std::span<const uint8_t> message,
                   std::span<const std::span<const uint8_t>> bulk = {});

}  // namespace cuwire
