#include "frame.h"

#include <algorithm>
#include <cstring>

#include "stream.h"

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

Status read_frame(Stream& stream, const FrameLimits& limits, Frame* out) {
  if (Status s = stream.read_exact(&out->header, sizeof(FrameHeader)); !s) return s;
  if (Status s = check_header(out->header, limits); !s) return s;
  // Past a valid header the peer owes us the whole frame: an end here is a truncated frame.
  auto truncated = [](const Status& s) {
    return s.code() == Status::Code::kMalformed ? s : Status::malformed("truncated frame: " + s.message());
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

Status write_frame(Stream& stream, FrameHeader header, std::span<const uint8_t> message,
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
