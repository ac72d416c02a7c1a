// Large copies between a client and device memory, streamed (design decision 7): the bytes of a
// host-to-device copy go into device memory while the rest of them are still arriving, and
// those of a device-to-host copy leave while the rest are still being copied. The server never
// holds a whole large copy in a buffer.
//
// The session decides which calls stream (streams_request_bulk, streams_reply_bulk): the
// linear host-to-device and device-to-host copies, sync and async, from kStreamedCopyBytes on.
// Their custom server functions (server/calls/copies.cc) read and write the bytes through the
// call's BulkChannel, and move them
//   - where the backend's device memory is host memory it can address (DeviceMemoryIo: the
//     sim), between the connection and the device memory itself, with no copy in between;
//   - elsewhere (the cuda backend), through two pinned staging buffers (CopyStaging), so that
//     the connection and the device's copy engine work at once.
// Both hold the copy's admission (compute_scheduler.h) while they wait on the client. On a GPU
// shared under compute caps, where work in flight keeps other tenants waiting, a client that
// stalls mid-copy must not hold the GPU: there the bytes go through the staging buffers a
// chunk at a time, read from or written to the connection outside admission, and each chunk's
// copy is admitted on its own.
//
// Thread-safety: everything here belongs to one session and is used on its thread; a
// DeviceMemoryIo may run the session's io function on a thread of its own while the session's
// thread waits for it.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "protocol/status.h"
#include "server/backend/backend.h"

namespace cuwire::server {

// Copies of at least this many bytes stream; smaller ones travel whole, as frame bulk.
inline constexpr uint64_t kStreamedCopyBytes = 1 << 20;

// Whether the call `call_id` with `bulk_bytes` of request bulk streams its request bulk, and
// whether one whose reply would carry `args`' byte count streams its reply (protocol/wire_formats.h
// wire formats: the generated stubs' for cuMemcpyHtoD_v2/cuMemcpyDtoH_v2 and their async
// forms).
bool streams_request_bulk(uint32_t call_id, uint64_t bulk_bytes);
bool streams_reply_bulk(uint32_t call_id, std::span<const uint8_t> args);

// The connection's side of one streamed call (the session implements it).
class BulkChannel {
 public:
  virtual ~BulkChannel() = default;
  // Request bulk bytes still on the connection; read in order.
  virtual uint64_t in_left() const = 0;
  virtual Status read_in(void* p, size_t n) = 0;
  // Starts the reply: its message, with a provisional CUDA_SUCCESS, and a promise of `bytes`
  // bulk bytes, then the final result (frame.h: kFlagResultTrailer). Exactly `bytes` must
  // follow through write_out.
  virtual Status begin_reply(uint64_t bytes) = 0;
  virtual Status write_out(const void* p, size_t n) = 0;
  // Whether begin_reply went out: then the call's result goes in the trailer.
  virtual bool reply_begun() const = 0;
};

// Two page-locked buffers for one session's streamed copies through a backend without
// DeviceMemoryIo (or on a GPU shared under compute caps), made on the first such copy and kept
// until the session ends. They hold the session's bytes, so they are its own (design decision
// 13): the server's memory registered with the backend for the context current at the first
// copy, never portable, within no other session's reach, and cleared before they are freed.
class CopyStaging {
 public:
  static constexpr size_t kChunkBytes = 4 << 20;
  static constexpr size_t kPageBytes = 4096;

  explicit CopyStaging(Backend& api) : api_(api) {}
  ~CopyStaging();
  CopyStaging(const CopyStaging&) = delete;
  CopyStaging& operator=(const CopyStaging&) = delete;

  // Buffer i (0 or 1) of kChunkBytes; page-locked where the backend could make it so. Null when
  // no memory was to be had.
  uint8_t* buffer(int i);
  // Bytes of buffers made so far.
  size_t bytes() const { return (buf_[0] ? kChunkBytes : 0) + (buf_[1] ? kChunkBytes : 0); }

 private:
  Backend& api_;
  uint8_t* buf_[2] = {nullptr, nullptr};
  bool registered_[2] = {false, false};  // page-locked with the backend
};

// What a streamed call's custom function works with (SessionContext::streamed()).
struct StreamedIo {
  BulkChannel* channel = nullptr;
  DeviceMemoryIo* direct = nullptr;  // the backend's, if it has one
  CopyStaging* staging = nullptr;
};

}  // namespace cuwire::server
