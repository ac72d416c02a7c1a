// The linear copies between host and device, whole or streamed (streamed_copy.h), and their
// custom server functions. Wire formats: the generated client stubs' (the manifest's parameter
// order): cuMemcpyHtoD_v2 u64 dst, u64 bulk length, u64 count; cuMemcpyHtoDAsync_v2 the same
// then u64 stream id; cuMemcpyDtoH_v2 u64 src, u64 count; cuMemcpyDtoHAsync_v2 the same then
// u64 stream id. Host-to-device bytes are the frame's bulk; device-to-host ones the reply's.

#include "streamed_copy.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "args.h"
#include "call_ids.h"
#include "dispatch.h"
#include "frame.h"

namespace cuwire::server {

bool streams_request_bulk(uint32_t call_id, uint64_t bulk_bytes) {
  return bulk_bytes >= kStreamedCopyBytes &&
         (call_id == static_cast<uint32_t>(CallId::k_cuMemcpyHtoD_v2) ||
          call_id == static_cast<uint32_t>(CallId::k_cuMemcpyHtoDAsync_v2));
}

bool streams_reply_bulk(uint32_t call_id, std::span<const uint8_t> args) {
  if (call_id != static_cast<uint32_t>(CallId::k_cuMemcpyDtoH_v2) &&
      call_id != static_cast<uint32_t>(CallId::k_cuMemcpyDtoHAsync_v2)) {
    return false;
  }
  ArgCursor c(args);
  uint64_t src = 0, n = 0;
  return c.get(&src) && c.get(&n) && n >= kStreamedCopyBytes;
}

CopyStaging::~CopyStaging() {
  for (int i = 0; i < 2; ++i) {
    if (!buf_[i]) continue;
    // The session's last bytes go before the memory does (design decision 13).
    std::memset(buf_[i], 0, kChunkBytes);
    if (registered_[i]) api_.cuMemHostUnregister(buf_[i]);
    std::free(buf_[i]);
  }
}

uint8_t* CopyStaging::buffer(int i) {
  if (!buf_[i]) {
    // The server's own memory, page-locked for the current context alone (not PORTABLE: that
    // would put it within reach of every context of the process, other sessions' too). When
    // the app destroys that context the driver unlocks it and it stays valid, as pageable
    // memory, which copies from any context of the session still take.
    void* p = std::aligned_alloc(kPageBytes, kChunkBytes);
    if (!p) return nullptr;
    std::memset(p, 0, kChunkBytes);
    registered_[i] = api_.cuMemHostRegister_v2(p, kChunkBytes, 0) == CUDA_SUCCESS;
    buf_[i] = static_cast<uint8_t*>(p);
  }
  return buf_[i];
}

namespace {

// What a copy returns when the connection broke under it: the session ends at its next read.
constexpr CUresult kConnectionLost = CUDA_ERROR_DEVICE_UNAVAILABLE;

// A backend's copies of one chunk through a staging buffer, with events that tell when a
// buffer is free again so that the connection and the copy overlap. A backend without events
// copies each chunk to completion instead (synchronously, or on the stream and waiting).
class ChunkCopies {
 public:
  ChunkCopies(DriverApi& api, CUstream stream) : api_(api), stream_(stream) {
    overlap_ = api_.cuEventCreate(&done_[0], CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS &&
               api_.cuEventCreate(&done_[1], CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS;
  }
  ~ChunkCopies() {
    for (CUevent e : done_) {
      if (e) api_.cuEventDestroy_v2(e);
    }
  }
  ChunkCopies(const ChunkCopies&) = delete;
  ChunkCopies& operator=(const ChunkCopies&) = delete;

  // Starts a copy of chunk i's n bytes (buffer i, 0 or 1) between `host` and `dev`.
  CUresult to_device(int i, CUdeviceptr dev, const uint8_t* host, size_t n) {
    return start(i, [&](bool async) {
      return async ? api_.cuMemcpyHtoDAsync_v2(dev, host, n, stream_)
                   : api_.cuMemcpyHtoD_v2(dev, host, n);
    });
  }
  CUresult to_host(int i, uint8_t* host, CUdeviceptr dev, size_t n) {
    return start(i, [&](bool async) {
      return async ? api_.cuMemcpyDtoHAsync_v2(host, dev, n, stream_)
                   : api_.cuMemcpyDtoH_v2(host, dev, n);
    });
  }
  // Waits until buffer i's copy is done.
  CUresult wait(int i) { return overlap_ ? api_.cuEventSynchronize(done_[i]) : CUDA_SUCCESS; }
  // Waits until every copy started is done.
  CUresult wait_all() { return overlap_ ? api_.cuStreamSynchronize(stream_) : CUDA_SUCCESS; }

 private:
  // copy(true) starts the copy on the stream, copy(false) makes it synchronously. With events:
  // on the stream, then marked. Without: to completion (synchronously for the null stream,
  // else on the stream and waiting for it).
  template <typename Copy>
  CUresult start(int i, Copy&& copy) {
    const bool async = overlap_ || stream_ != nullptr;
    const CUresult e = copy(async);
    if (e != CUDA_SUCCESS || !async) return e;
    return overlap_ ? api_.cuEventRecord(done_[i], stream_) : api_.cuStreamSynchronize(stream_);
  }

  DriverApi& api_;
  CUstream stream_;
  CUevent done_[2] = {nullptr, nullptr};
  bool overlap_ = false;
};

// Host to device, the bytes coming from the connection.
CUresult stream_to_device(DriverApi& api, const StreamedIo& io, CUdeviceptr dst, size_t n,
                          CUstream stream) {
  BulkChannel& ch = *io.channel;
  if (io.direct && io.direct->addressable_in_one_piece(dst, n)) {
    // Straight into device memory, in one read.
    return io.direct->device_memory_io(dst, n, stream, [&](uint8_t* p) {
      return ch.read_in(p, n) ? CUDA_SUCCESS : kConnectionLost;
    });
  }
  uint8_t* const buf[2] = {io.staging->buffer(0), io.staging->buffer(1)};
  if (!buf[0] || !buf[1]) return CUDA_ERROR_OUT_OF_MEMORY;
  // Chunk k is read into buffer k % 2 while chunk k - 1 is copied from the other. A failure is
  // kept, and the rest of the bytes are read (and dropped) so the connection stays in step.
  ChunkCopies copies(api, stream);
  CUresult rc = CUDA_SUCCESS;
  size_t k = 0;
  for (size_t off = 0; off < n; off += CopyStaging::kChunkBytes, ++k) {
    const size_t len = std::min(CopyStaging::kChunkBytes, n - off);
    const int i = static_cast<int>(k % 2);
    if (k >= 2 && rc == CUDA_SUCCESS) rc = copies.wait(i);
    if (!ch.read_in(buf[i], len)) return kConnectionLost;
    if (rc == CUDA_SUCCESS) rc = copies.to_device(i, dst + off, buf[i], len);
  }
  // Both buffers are free again before the call returns, and the copy is complete.
  const CUresult waited = copies.wait_all();
  return rc != CUDA_SUCCESS ? rc : waited;
}

// Device to host, the bytes going to the connection as the reply's.
CUresult stream_from_device(DriverApi& api, const StreamedIo& io, CUdeviceptr src, size_t n,
                            CUstream stream) {
  BulkChannel& ch = *io.channel;
  if (io.direct && io.direct->addressable_in_one_piece(src, n)) {
    return io.direct->device_memory_io(src, n, stream, [&](uint8_t* p) {
      if (!ch.begin_reply(n) || !ch.write_out(p, n)) return kConnectionLost;
      return CUDA_SUCCESS;
    });
  }
  uint8_t* const buf[2] = {io.staging->buffer(0), io.staging->buffer(1)};
  if (!buf[0] || !buf[1]) return CUDA_ERROR_OUT_OF_MEMORY;
  ChunkCopies copies(api, stream);
  const size_t chunks = (n + CopyStaging::kChunkBytes - 1) / CopyStaging::kChunkBytes;
  auto len = [&](size_t k) { return std::min(CopyStaging::kChunkBytes, n - k * CopyStaging::kChunkBytes); };
  auto start = [&](size_t k) {
    const int i = static_cast<int>(k % 2);
    return copies.to_host(i, buf[i], src + k * CopyStaging::kChunkBytes, len(k));
  };
  // The first chunk is copied before the reply begins: a copy that cannot start (an error
  // left by earlier work) is answered plainly, without bytes.
  CUresult rc = start(0);
  if (rc == CUDA_SUCCESS) rc = copies.wait(0);
  if (rc != CUDA_SUCCESS) return rc;
  if (!ch.begin_reply(n)) return kConnectionLost;
  // Chunk k goes out while chunk k + 1 is copied into the other buffer. After a failure the
  // promised bytes still go out (the result trailer says they are not the copy).
  for (size_t k = 0; k < chunks; ++k) {
    if (k + 1 < chunks && rc == CUDA_SUCCESS) rc = start(k + 1);
    if (!ch.write_out(buf[k % 2], len(k))) return kConnectionLost;
    if (k + 1 < chunks && rc == CUDA_SUCCESS) rc = copies.wait(static_cast<int>((k + 1) % 2));
  }
  return rc;
}

// One chunk copied to completion between a staging buffer and device memory, for a GPU shared
// under compute caps (see streamed_copy.h): the caller admits it alone.
CUresult copy_chunk(DriverApi& api, const StreamedIo& io, bool to_device, CUdeviceptr dev,
                    uint8_t* host, size_t n, CUstream stream) {
  if (io.direct && io.direct->addressable_in_one_piece(dev, n)) {
    return io.direct->device_memory_io(dev, n, stream, [&](uint8_t* p) {
      if (to_device) {
        std::memcpy(p, host, n);
      } else {
        std::memcpy(host, p, n);
      }
      return CUDA_SUCCESS;
    });
  }
  ChunkCopies copies(api, stream);
  CUresult rc = to_device ? copies.to_device(0, dev, host, n) : copies.to_host(0, host, dev, n);
  const CUresult waited = copies.wait_all();
  return rc != CUDA_SUCCESS ? rc : waited;
}

// Host to device on a shared GPU: each chunk read from the connection before its copy is
// admitted. A failure is kept and the rest of the bytes are read and dropped.
CUresult stream_to_device_shared(CallContext& cx, const StreamedIo& io, CUdeviceptr dst,
                                 size_t n, CUstream stream) {
  uint8_t* buf = io.staging->buffer(0);
  if (!buf) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult rc = CUDA_SUCCESS;
  for (size_t off = 0; off < n; off += CopyStaging::kChunkBytes) {
    const size_t len = std::min(CopyStaging::kChunkBytes, n - off);
    if (!io.channel->read_in(buf, len)) return kConnectionLost;
    if (rc != CUDA_SUCCESS) continue;
    rc = cx.run_work(stream, [&] {
      return copy_chunk(cx.api(), io, true, dst + off, buf, len, stream);
    });
  }
  return rc;
}

// Device to host on a shared GPU: each chunk's copy admitted alone, its bytes written to the
// connection after. The first chunk is copied before the reply begins.
CUresult stream_from_device_shared(CallContext& cx, const StreamedIo& io, CUdeviceptr src,
                                   size_t n, CUstream stream) {
  uint8_t* buf = io.staging->buffer(0);
  if (!buf) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult rc = CUDA_SUCCESS;
  for (size_t off = 0; off < n; off += CopyStaging::kChunkBytes) {
    const size_t len = std::min(CopyStaging::kChunkBytes, n - off);
    if (rc == CUDA_SUCCESS) {
      rc = cx.run_work(stream, [&] {
        return copy_chunk(cx.api(), io, false, src + off, buf, len, stream);
      });
    }
    if (off == 0) {
      if (rc != CUDA_SUCCESS) return rc;
      if (!io.channel->begin_reply(n)) return kConnectionLost;
    }
    // After a failure the promised bytes still go out; the result trailer tells.
    if (!io.channel->write_out(buf, len)) return kConnectionLost;
  }
  return rc;
}

// Both host-to-device copies. A streamed call's bytes are all still on the connection.
CUresult host_to_device(CallContext& cx, ArgReader& in, CUdeviceptr dst, uint64_t bulk,
                        size_t count, CUstream stream, bool async) {
  const StreamedIo* io = cx.streamed();
  const bool streamed = io && io->channel && io->channel->in_left() > 0;
  std::span<const uint8_t> whole;
  if (streamed ? io->channel->in_left() != bulk : !in.take_bulk(bulk, &whole)) {
    return in.malformed();
  }
  if (!in.at_end() || bulk != count) return in.malformed();
  if (CUresult e = cx.check_range(dst, count)) return e;
  DriverApi& api = cx.api();
  // A streamed copy is complete when it returns, as is a synchronous one from the server's
  // (pageable) buffer; a small async one is not.
  if (streamed) {
    if (cx.work_shares_gpu()) return stream_to_device_shared(cx, *io, dst, count, stream);
    return cx.run_work(stream, [&] { return stream_to_device(api, *io, dst, count, stream); });
  }
  if (!async) return cx.run_work(stream, [&] { return api.cuMemcpyHtoD_v2(dst, whole.data(), count); });
  return cx.submit_work(stream,
                        [&] { return api.cuMemcpyHtoDAsync_v2(dst, whole.data(), count, stream); });
}

// Both device-to-host copies: the reply carries the bytes, so they are final before it leaves.
CUresult device_to_host(CallContext& cx, ReplyWriter& out, CUdeviceptr src, size_t count,
                        CUstream stream, bool async) {
  if (CUresult e = cx.check_range(src, count)) return e;
  DriverApi& api = cx.api();
  const StreamedIo* io = cx.streamed();
  if (io && io->channel) {
    // A reply is one frame whatever way its bytes go: bounded as any frame's bulk, trailer
    // included.
    const CheckedSize reply = CheckedSize(count) + CheckedSize(sizeof(ResultTrailer));
    if (!reply.ok() || !out.reserve_bulk_ok(reply.value())) return CUDA_ERROR_INVALID_VALUE;
    if (cx.work_shares_gpu()) return stream_from_device_shared(cx, *io, src, count, stream);
    return cx.run_work(stream, [&] { return stream_from_device(api, *io, src, count, stream); });
  }
  if (!out.reserve_bulk_ok(count)) return CUDA_ERROR_INVALID_VALUE;
  uint8_t* buf = out.add_bulk(count);
  if (!async) return cx.run_work(stream, [&] { return api.cuMemcpyDtoH_v2(buf, src, count); });
  return cx.run_work(stream, [&] {
    const CUresult e = api.cuMemcpyDtoHAsync_v2(buf, src, count, stream);
    return e == CUDA_SUCCESS ? api.cuStreamSynchronize(stream) : e;
  });
}

}  // namespace

CUresult custom_cuMemcpyHtoD_v2(CallContext& cx, ArgReader& in, ReplyWriter&) {
  CUdeviceptr dst = 0;
  uint64_t bulk = 0;
  size_t count = 0;
  if (!in.get(&dst) || !in.get(&bulk) || !in.get(&count)) return in.malformed();
  return host_to_device(cx, in, dst, bulk, count, nullptr, false);
}

CUresult custom_cuMemcpyHtoDAsync_v2(CallContext& cx, ArgReader& in, ReplyWriter&) {
  CUdeviceptr dst = 0;
  uint64_t bulk = 0, stream_id = 0;
  size_t count = 0;
  if (!in.get(&dst) || !in.get(&bulk) || !in.get(&count) || !in.get(&stream_id)) {
    return in.malformed();
  }
  CUstream stream = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kStream, stream_id, &stream)) return e;
  return host_to_device(cx, in, dst, bulk, count, stream, true);
}

CUresult custom_cuMemcpyDtoH_v2(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  CUdeviceptr src = 0;
  size_t count = 0;
  if (!in.get(&src) || !in.get(&count) || !in.at_end()) return in.malformed();
  return device_to_host(cx, out, src, count, nullptr, false);
}

CUresult custom_cuMemcpyDtoHAsync_v2(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  CUdeviceptr src = 0;
  size_t count = 0;
  uint64_t stream_id = 0;
  if (!in.get(&src) || !in.get(&count) || !in.get(&stream_id) || !in.at_end()) {
    return in.malformed();
  }
  CUstream stream = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kStream, stream_id, &stream)) return e;
  return device_to_host(cx, out, src, count, stream, true);
}

}  // namespace cuwire::server
