#include "protocol/frame.h"

#include <algorithm>
#include <cstring>

#include "protocol/byte_stream.h"

namespace cuwire {

Status check_header(const FrameHeader& h, const FrameLimits& limits) {
  if (h.magic != kFrameMagic) return Status::malformed("bad frame magic");
  if (h.type == 0 || h.type > kMaxFrameType) {
    return Status::unknown_type("unknown frame type " + std::to_string(h.type));
  }
  if (h.message_bytes % 8 != 0) return Status::malformed("message length not a multiple of 8");
  if (h.message_bytes > limits.max_message_bytes) {
    return Status::too_large("message of " + std::to_string(h.message_bytes) +
                             " bytes over the limit of " +
                             std::to_string(limits.max_message_bytes));
  }
  if (h.bulk_bytes > limits.max_bulk_bytes) {
    return Status::too_large("bulk of " + std::to_string(h.bulk_bytes) +
                             " bytes over the limit of " + std::to_string(limits.max_bulk_bytes));
  }
  return Status::ok();
}

Status read_frame(ByteStream& stream, const FrameLimits& limits, Frame* out) {
  if (Status s = stream.read_exact(&out->header, sizeof(FrameHeader)); !s) return s;
  if (Status s = check_header(out->header, limits); !s) return s;
  // Past a valid header the peer owes us the whole frame: an end here is a truncated frame.
  auto truncated = [](const Status& s) {
    return s.code() == Status::Code::kMalformed
               ? s
               : Status::malformed("truncated frame: " + s.message());
  };
  out->message.resize(out->header.message_bytes / 8);
  if (out->header.message_bytes > 0) {
    if (Status s = stream.read_exact(out->message.data(), out->header.message_bytes); !s) {
      return truncated(s);
    }
  }
  // Bulk memory grows with the bytes that actually arrive, so a header that merely claims a
  // large payload cannot make us allocate it.
  constexpr uint64_t kBulkStep = 8u << 20;
  out->bulk.clear();
  uint64_t have = 0;
  while (have < out->header.bulk_bytes) {
    uint64_t step = std::min(kBulkStep, out->header.bulk_bytes - have);
    out->bulk.resize(have + step);
    if (Status s = stream.read_exact(out->bulk.data() + have, step); !s) return truncated(s);
    have += step;
  }
  return Status::ok();
}

Status write_frame(ByteStream& stream, FrameHeader header, std::span<const uint8_t> message,
                   std::span<const std::span<const uint8_t>> bulk) {
  header.message_bytes = static_cast<uint32_t>(message.size());
  header.bulk_bytes = 0;
  for (auto b : bulk) header.bulk_bytes += b.size();
  constexpr size_t kInlinePieces = 8;
  std::span<const uint8_t> inline_pieces[kInlinePieces];
  std::vector<std::span<const uint8_t>> heap_pieces;
  std::span<const uint8_t>* pieces = inline_pieces;
  size_t n = 2 + bulk.size();
  if (n > kInlinePieces) {
    heap_pieces.resize(n);
    pieces = heap_pieces.data();
  }
  pieces[0] = {reinterpret_cast<const uint8_t*>(&header), sizeof header};
  pieces[1] = message;
  for (size_t i = 0; i < bulk.size(); ++i) pieces[2 + i] = bulk[i];
  return stream.write_all({pieces, n});
}

}  // namespace cuwire

namespace cuwire {

FrameReader::FrameReader(ByteStream& stream, size_t buffer_bytes)
    : stream_(stream), buf_(buffer_bytes) {}

Status FrameReader::fill(size_t n) {
  if (end_ - begin_ >= n) return Status::ok();
  if (begin_ > 0) {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  while (end_ < n) {
    size_t got = 0;
    if (Status s = stream_.read_some(buf_.data() + end_, buf_.size() - end_, &got); !s) {
      // Part of a header already here: the peer closed in the middle of a frame.
      if (end_ > 0 && s.code() == Status::Code::kDisconnected) {
        return Status::malformed("truncated frame: " + s.message());
      }
      return s;
    }
    end_ += got;
  }
  return Status::ok();
}

Status FrameReader::take(void* p, size_t n) {
  auto* out = static_cast<uint8_t*>(p);
  const size_t have = std::min(n, end_ - begin_);
  if (have) std::memcpy(out, buf_.data() + begin_, have);
  begin_ += have;
  out += have;
  n -= have;
  if (n == 0) return Status::ok();
  // Little left: read it together with whatever follows it. Much: straight to its place.
  if (n < buf_.size() / 2) {
    if (Status s = fill(n); !s) return s;
    std::memcpy(out, buf_.data() + begin_, n);
    begin_ += n;
    return Status::ok();
  }
  return stream_.read_exact(out, n);
}

Status FrameReader::read_head(const FrameLimits& limits, Frame* out) {
  if (bulk_left_) return Status::failed("read_head with bulk bytes of the last frame left");
  if (Status s = fill(sizeof(FrameHeader)); !s) return s;
  std::memcpy(&out->header, buf_.data() + begin_, sizeof(FrameHeader));
  begin_ += sizeof(FrameHeader);
  if (Status s = check_header(out->header, limits); !s) return s;
  auto truncated = [](const Status& s) {
    return s.code() == Status::Code::kMalformed
               ? s
               : Status::malformed("truncated frame: " + s.message());
  };
  out->message.resize(out->header.message_bytes / 8);
  out->bulk.clear();
  if (Status s = take(out->message.data(), out->header.message_bytes); !s) return truncated(s);
  bulk_left_ = out->header.bulk_bytes;
  lane_bytes_ = 0;
  if (out->header.flags & kFlagBulkInLane) {
    const uint64_t trailer = out->header.flags & kFlagResultTrailer ? sizeof(ResultTrailer) : 0;
    if (bulk_left_ < trailer) return Status::malformed("lane frame shorter than its trailer");
    lane_bytes_ = bulk_left_ - trailer;
    bulk_left_ = trailer;
  }
  return Status::ok();
}

Status FrameReader::read_bulk(void* p, size_t n) {
  if (n > bulk_left_) return Status::failed("read_bulk past the frame's bulk bytes");
  Status s = take(p, n);
  if (!s) {
    return s.code() == Status::Code::kMalformed
               ? s
               : Status::malformed("truncated frame: " + s.message());
  }
  bulk_left_ -= n;
  return Status::ok();
}

Status FrameReader::skip_bulk(uint64_t n) {
  uint8_t sink[4096];
  while (n > 0) {
    const size_t step = static_cast<size_t>(std::min<uint64_t>(n, sizeof sink));
    if (Status s = read_bulk(sink, step); !s) return s;
    n -= step;
  }
  return Status::ok();
}

Status FrameReader::read_rest(Frame* out) {
  constexpr uint64_t kBulkStep = 8u << 20;
  uint64_t have = out->bulk.size();
  while (bulk_left_ > 0) {
    const uint64_t step = std::min(kBulkStep, bulk_left_);
    out->bulk.resize(have + step);
    if (Status s = read_bulk(out->bulk.data() + have, step); !s) return s;
    have += step;
  }
  return Status::ok();
}

Status FrameReader::read(const FrameLimits& limits, Frame* out) {
  if (Status s = read_head(limits, out); !s) return s;
  return read_rest(out);
}

}  // namespace cuwire
