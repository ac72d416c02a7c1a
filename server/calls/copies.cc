// Copies: 2D and 3D copies, array to host, and the linear copies between host and device,
// whole or streamed (server/calls/copies.h).

#include "server/calls/copies.h"

#include <cuda.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "generated/call_ids.h"
#include "protocol/args.h"
#include "protocol/copy_descriptors.h"
#include "protocol/frame.h"
#include "protocol/wire_formats.h"
#include "server/backend/backend.h"
#include "server/session/dispatch.h"

namespace cuwire::server {

// ---------------------------------------------------------------------------------------------
// Copies

namespace {
// Bytes a strided region spans: `rows` rows of `width` bytes, `pitch` apart.
bool region_bytes(size_t width, size_t rows, size_t pitch, size_t* out) {
  if (rows == 0 || width == 0) {
    *out = 0;
    return true;
  }
  if (rows > 1 && pitch < width) return false;
  if (rows - 1 > (SIZE_MAX - width) / (pitch ? pitch : 1)) return false;
  *out = (rows - 1) * pitch + width;
  return true;
}

// The device side of a 2D/3D copy: `d` planes of `h` rows of `w` bytes at (x, y, z) in a volume
// of rows `pitch` apart and planes `height` rows apart must lie in one session allocation.
// A 2D copy uses neither z nor height: the caller passes 0 and 1 for them, whatever the
// client's descriptor holds, so the region checked is the region copied.
CUresult check_region(SessionContext& cx, CUdeviceptr base, size_t x, size_t y, size_t z,
                      size_t pitch, size_t height, size_t w, size_t h, size_t d) {
  size_t plane = 0, span = 0;
  if (d > 1 && height < h) return CUDA_ERROR_INVALID_VALUE;
  const CheckedSize plane_pitch = CheckedSize(pitch) * (d > 1 ? height : 1);
  if (!plane_pitch.ok() || !region_bytes(w, h, pitch, &plane) ||
      !region_bytes(plane, d, plane_pitch.value(), &span)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const CheckedSize offset = CheckedSize(x) + (CheckedSize(y) + CheckedSize(z) * height) * pitch;
  const CheckedSize start = CheckedSize(base) + offset;
  if (!start.ok() || span == 0) return start.ok() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  return cx.check_range(start.value(), span);
}

CUresult copy(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  formats::CopyArgs a{};
  if (!in.get(&a)) return in.malformed();
  CUDA_MEMCPY3D c = a.desc;
  const auto kind = static_cast<formats::CopyKind>(a.kind);
  if (a.kind > 2) return in.malformed();
  if (kind != formats::CopyKind::k3D) {
    // What a 2D copy ignores is neither checked nor passed on.
    c.Depth = 1;
    c.srcZ = c.dstZ = c.srcLOD = c.dstLOD = 0;
    c.srcHeight = c.dstHeight = 1;
  }
  const size_t w = c.WidthInBytes, h = c.Height, d = c.Depth ? c.Depth : 1;
  if (h != 0 && d > SIZE_MAX / h) return CUDA_ERROR_INVALID_VALUE;
  const size_t rows = h * d;
  if (rows != 0 && w > SIZE_MAX / rows) return CUDA_ERROR_INVALID_VALUE;
  const size_t packed = w * rows;
  CUstream stream = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kStream, a.stream, &stream)) return e;
  c.srcArray = c.dstArray = nullptr;
  c.reserved0 = c.reserved1 = nullptr;
  // A host end is the packed rows: the request's bulk for the source, the reply's for the
  // destination. A device end's region must lie in the session's memory; an array end's array
  // must be the session's (the lookup), and the backend checks the region against it.
  auto place_end = [&](CUmemorytype type, CUdeviceptr p, size_t& x, size_t& y, size_t& z,
                       size_t& pitch, size_t& height, CUarray client_array,
                       CUarray* array) -> CUresult {
    if (type == CU_MEMORYTYPE_HOST) {
      x = y = z = 0;
      pitch = w;
      height = h;
      return CUDA_SUCCESS;
    }
    if (type == CU_MEMORYTYPE_DEVICE) return check_region(cx, p, x, y, z, pitch, height, w, h, d);
    if (type != CU_MEMORYTYPE_ARRAY) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult e =
            cx.lookup(HandleKind::kArray, reinterpret_cast<uintptr_t>(client_array), array)) {
      return e;
    }
    return *array ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  };
  // Source.
  if (CUresult e = place_end(c.srcMemoryType, c.srcDevice, c.srcXInBytes, c.srcY, c.srcZ,
                             c.srcPitch, c.srcHeight, a.desc.srcArray, &c.srcArray)) {
    return e;
  }
  c.srcHost = nullptr;
  if (c.srcMemoryType == CU_MEMORYTYPE_HOST) {
    std::span<const uint8_t> rows_in;
    if (!in.get_bulk(&rows_in) || rows_in.size() != packed) return in.malformed();
    c.srcHost = rows_in.data();
  }
  if (!in.at_end()) return in.malformed();
  // Destination.
  if (CUresult e = place_end(c.dstMemoryType, c.dstDevice, c.dstXInBytes, c.dstY, c.dstZ,
                             c.dstPitch, c.dstHeight, a.desc.dstArray, &c.dstArray)) {
    return e;
  }
  c.dstHost = nullptr;
  const bool dst_host = c.dstMemoryType == CU_MEMORYTYPE_HOST;
  if (dst_host) {
    if (!out.reserve_bulk_ok(packed)) return CUDA_ERROR_INVALID_VALUE;
    c.dstHost = out.add_bulk(packed);
  }
  if (packed == 0) return CUDA_SUCCESS;
  Backend& api = cx.backend();
  CUresult rc = cx.submit_work(stream, [&]() -> CUresult {
    if (kind == formats::CopyKind::k3D) {
      return a.async ? api.cuMemcpy3DAsync_v2(&c, stream) : api.cuMemcpy3D_v2(&c);
    } else {
      CUDA_MEMCPY2D p{};
      copy_2d_fields(c, &p);
      if (kind == formats::CopyKind::k2DUnaligned) return api.cuMemcpy2DUnaligned_v2(&p);
      return a.async ? api.cuMemcpy2DAsync_v2(&p, stream) : api.cuMemcpy2D_v2(&p);
    }
  });
  if (rc != CUDA_SUCCESS) return rc;
  // The reply carries the bytes: they must be final before it leaves.
  if (a.async && dst_host) return api.cuStreamSynchronize(stream);
  return CUDA_SUCCESS;
}
}  // namespace

CUresult custom_cuMemcpy2D_v2(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return copy(cx, in, out);
}
CUresult custom_cuMemcpy2DUnaligned_v2(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return copy(cx, in, out);
}
CUresult custom_cuMemcpy3D_v2(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return copy(cx, in, out);
}
CUresult custom_cuMemcpy2DAsync_v2(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return copy(cx, in, out);
}
CUresult custom_cuMemcpy3DAsync_v2(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return copy(cx, in, out);
}

// cuMemcpyAtoHAsync_v2: the generated wire format (u64 array id, u64 srcOffset, u64 ByteCount,
// u64 stream id; reply bulk: the bytes), answered once the bytes are final, as for DtoHAsync.
CUresult custom_cuMemcpyAtoHAsync_v2(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t array_id = 0, stream_id = 0;
  size_t offset = 0, n = 0;
  if (!in.get(&array_id) || !in.get(&offset) || !in.get(&n) || !in.get(&stream_id) ||
      !in.at_end()) {
    return in.malformed();
  }
  CUarray array = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kArray, array_id, &array)) return e;
  CUstream stream = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kStream, stream_id, &stream)) return e;
  if (!out.reserve_bulk_ok(n)) return CUDA_ERROR_INVALID_VALUE;
  uint8_t* buf = out.add_bulk(n);
  if (CUresult e = cx.submit_work(stream, [&] {
        return cx.backend().cuMemcpyAtoHAsync_v2(buf, array, offset, n, stream);
      })) {
    return e;
  }
  return cx.backend().cuStreamSynchronize(stream);
}

// ---------------------------------------------------------------------------------------------
// The linear copies between host and device, whole or streamed (server/calls/copies.h), and their
// custom server functions. Wire formats: the generated client stubs' (the manifest's parameter
// order): cuMemcpyHtoD_v2 u64 dst, u64 bulk length, u64 count; cuMemcpyHtoDAsync_v2 the same
// then u64 stream id; cuMemcpyDtoH_v2 u64 src, u64 count; cuMemcpyDtoHAsync_v2 the same then
// u64 stream id. Host-to-device bytes are the frame's bulk; device-to-host ones the reply's.

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
  ChunkCopies(Backend& api, CUstream stream) : api_(api), stream_(stream) {
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

  Backend& api_;
  CUstream stream_;
  CUevent done_[2] = {nullptr, nullptr};
  bool overlap_ = false;
};

// Host to device, the bytes coming from the connection.
CUresult stream_to_device(Backend& api, const StreamedIo& io, CUdeviceptr dst, size_t n,
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
CUresult stream_from_device(Backend& api, const StreamedIo& io, CUdeviceptr src, size_t n,
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
  auto len = [&](size_t k) {
    return std::min(CopyStaging::kChunkBytes, n - k * CopyStaging::kChunkBytes);
  };
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
// under compute caps (see server/calls/copies.h): the caller admits it alone.
CUresult copy_chunk(Backend& api, const StreamedIo& io, bool to_device, CUdeviceptr dev,
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

// The copies on a shared GPU, chunk by chunk through the first staging buffer: `step(buf, off,
// len, rc)` moves the chunk at `off`, keeping the first failure of a copy in rc (the result);
// a step's own failure (not CUDA_SUCCESS) ends them at once with it.
template <typename Step>
CUresult each_shared_chunk(const StreamedIo& io, size_t n, Step&& step) {
  uint8_t* buf = io.staging->buffer(0);
  if (!buf) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult rc = CUDA_SUCCESS;
  for (size_t off = 0; off < n; off += CopyStaging::kChunkBytes) {
    const size_t len = std::min(CopyStaging::kChunkBytes, n - off);
    if (CUresult e = step(buf, off, len, rc)) return e;
  }
  return rc;
}

// Host to device on a shared GPU: each chunk read from the connection before its copy is
// admitted. A failure is kept and the rest of the bytes are read and dropped.
CUresult stream_to_device_shared(SessionContext& cx, const StreamedIo& io, CUdeviceptr dst,
                                 size_t n, CUstream stream) {
  auto step = [&](uint8_t* buf, size_t off, size_t len, CUresult& rc) -> CUresult {
    if (!io.channel->read_in(buf, len)) return kConnectionLost;
    if (rc == CUDA_SUCCESS) {
      rc = cx.run_work(
          stream, [&] { return copy_chunk(cx.backend(), io, true, dst + off, buf, len, stream); });
    }
    return CUDA_SUCCESS;
  };
  return each_shared_chunk(io, n, step);
}

// Device to host on a shared GPU: each chunk's copy admitted alone, its bytes written to the
// connection after. The first chunk is copied before the reply begins.
CUresult stream_from_device_shared(SessionContext& cx, const StreamedIo& io, CUdeviceptr src,
                                   size_t n, CUstream stream) {
  auto step = [&](uint8_t* buf, size_t off, size_t len, CUresult& rc) -> CUresult {
    if (rc == CUDA_SUCCESS) {
      rc = cx.run_work(
          stream, [&] { return copy_chunk(cx.backend(), io, false, src + off, buf, len, stream); });
    }
    if (off == 0) {
      if (rc != CUDA_SUCCESS) return rc;
      if (!io.channel->begin_reply(n)) return kConnectionLost;
    }
    // After a failure the promised bytes still go out; the result trailer tells.
    return io.channel->write_out(buf, len) ? CUDA_SUCCESS : kConnectionLost;
  };
  return each_shared_chunk(io, n, step);
}

// Both host-to-device copies. A streamed call's bytes are all still on the connection.
CUresult host_to_device(SessionContext& cx, ArgReader& in, CUdeviceptr dst, uint64_t bulk,
                        size_t count, CUstream stream, bool async) {
  const StreamedIo* io = cx.streamed();
  const bool streamed = io && io->channel && io->channel->in_left() > 0;
  std::span<const uint8_t> whole;
  if (streamed ? io->channel->in_left() != bulk : !in.take_bulk(bulk, &whole)) {
    return in.malformed();
  }
  if (!in.at_end() || bulk != count) return in.malformed();
  if (CUresult e = cx.check_range(dst, count)) return e;
  Backend& api = cx.backend();
  // A streamed copy is complete when it returns, as is a synchronous one from the server's
  // (pageable) buffer; a small async one is not.
  if (streamed) {
    if (cx.work_shares_gpu()) return stream_to_device_shared(cx, *io, dst, count, stream);
    return cx.run_work(stream, [&] { return stream_to_device(api, *io, dst, count, stream); });
  }
  if (!async)
    return cx.run_work(stream, [&] { return api.cuMemcpyHtoD_v2(dst, whole.data(), count); });
  return cx.submit_work(stream,
                        [&] { return api.cuMemcpyHtoDAsync_v2(dst, whole.data(), count, stream); });
}

// Both device-to-host copies: the reply carries the bytes, so they are final before it leaves.
CUresult device_to_host(SessionContext& cx, ReplyWriter& out, CUdeviceptr src, size_t count,
                        CUstream stream, bool async) {
  if (CUresult e = cx.check_range(src, count)) return e;
  Backend& api = cx.backend();
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

CUresult custom_cuMemcpyHtoD_v2(SessionContext& cx, ArgReader& in, ReplyWriter&) {
  CUdeviceptr dst = 0;
  uint64_t bulk = 0;
  size_t count = 0;
  if (!in.get(&dst) || !in.get(&bulk) || !in.get(&count)) return in.malformed();
  return host_to_device(cx, in, dst, bulk, count, nullptr, false);
}

CUresult custom_cuMemcpyHtoDAsync_v2(SessionContext& cx, ArgReader& in, ReplyWriter&) {
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

CUresult custom_cuMemcpyDtoH_v2(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  CUdeviceptr src = 0;
  size_t count = 0;
  if (!in.get(&src) || !in.get(&count) || !in.at_end()) return in.malformed();
  return device_to_host(cx, out, src, count, nullptr, false);
}

CUresult custom_cuMemcpyDtoHAsync_v2(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
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
