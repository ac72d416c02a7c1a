// Copies whose pointers the client sorts into host and device (cuMemcpy, cuMemcpyAsync), and
// 2D/3D copies with host rows, packed here and unpacked from the reply. Their wire formats:
// protocol/wire_formats.h.

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "client-lib/core/client_call.h"
#include "client-lib/core/client_state.h"
#include "client-lib/core/host_access.h"
#include "protocol/copy_descriptors.h"
#include "protocol/wire_formats.h"

using namespace cuwire;
using namespace cuwire::client;

namespace {

uint64_t handle_id(const void* h) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(h)); }

// ---- 2D / 3D copies

CUresult resolve_type(CUmemorytype* t, const void* host, CUdeviceptr dev) {
  switch (*t) {
    case CU_MEMORYTYPE_HOST:
    case CU_MEMORYTYPE_DEVICE:
      return CUDA_SUCCESS;
    case CU_MEMORYTYPE_UNIFIED:
      *t = is_device_pointer(dev) ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
      return CUDA_SUCCESS;
    case CU_MEMORYTYPE_ARRAY:  // the array's id travels; the server checks it and the region
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

const uint8_t* host_row(const CUDA_MEMCPY3D& c, bool src, size_t y, size_t z) {
  if (src) {
    return static_cast<const uint8_t*>(c.srcHost) + c.srcXInBytes +
           (c.srcY + y + (c.srcZ + z) * c.srcHeight) * c.srcPitch;
  }
  return static_cast<const uint8_t*>(c.dstHost) + c.dstXInBytes +
         (c.dstY + y + (c.dstZ + z) * c.dstHeight) * c.dstPitch;
}

// The app's host rows are copied here, in user space, to and from packed buffers: a bad pointer
// must fail the call (INVALID_VALUE, as the driver reports it), not crash the program.
bool host_rows_ok(const CUDA_MEMCPY3D& c, bool src, size_t h, size_t d) {
  if (!(src ? c.srcHost : c.dstHost)) return false;
  HostPageProbe probe(src ? HostAccess::kRead : HostAccess::kReadWrite);
  for (size_t z = 0; z < d; ++z) {
    for (size_t y = 0; y < h; ++y) probe.add(host_row(c, src, y, z), c.WidthInBytes);
  }
  return probe.ok();
}

CUresult copy3d(CUDA_MEMCPY3D c, formats::CopyKind kind, bool async, CUstream stream) {
  if (c.Depth == 0) c.Depth = 1;
  if (CUresult e = resolve_type(&c.srcMemoryType, c.srcHost, c.srcDevice)) return e;
  if (CUresult e = resolve_type(&c.dstMemoryType, c.dstHost, c.dstDevice)) return e;
  if (c.srcMemoryType == CU_MEMORYTYPE_UNIFIED || c.srcMemoryType == CU_MEMORYTYPE_HOST) {
    c.srcMemoryType = CU_MEMORYTYPE_HOST;
    if (!c.srcHost) c.srcHost = reinterpret_cast<const void*>(c.srcDevice);
  }
  if (c.dstMemoryType == CU_MEMORYTYPE_HOST && !c.dstHost) {
    c.dstHost = reinterpret_cast<void*>(c.dstDevice);
  }
  const size_t w = c.WidthInBytes, h = c.Height, d = c.Depth;
  const size_t rows = h * d;
  if (w == 0 || rows == 0) return CUDA_SUCCESS;
  bool src_host = c.srcMemoryType == CU_MEMORYTYPE_HOST;
  bool dst_host = c.dstMemoryType == CU_MEMORYTYPE_HOST;
  if (async && src_host) wait_host_calls(stream);  // one of them may write the source
  if ((src_host && c.srcPitch < w && rows > 1) || (dst_host && c.dstPitch < w && rows > 1)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if ((src_host && !host_rows_ok(c, true, h, d)) || (dst_host && !host_rows_ok(c, false, h, d))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (async && src_host != dst_host) {
    bool staged = false;
    const CUresult e = capture_host_copy3d(&c, stream, &staged);
    if (staged || e != CUDA_SUCCESS) return e;  // staged: captured device to device
  }
  if (src_host && dst_host) {  // host to host: no device involved
    if (async) {
      if (CUresult e = cuStreamSynchronize(stream)) return e;
    }
    for (size_t z = 0; z < d; ++z) {
      for (size_t y = 0; y < h; ++y) {
        std::memmove(const_cast<uint8_t*>(host_row(c, false, y, z)), host_row(c, true, y, z), w);
      }
    }
    return CUDA_SUCCESS;
  }
  formats::CopyArgs a{};
  a.kind = static_cast<uint32_t>(kind);
  a.async = async;
  a.stream = handle_id(stream);
  a.desc = c;
  std::vector<uint8_t> packed_src;
  if (src_host) {
    packed_src.resize(w * rows);
    for (size_t z = 0; z < d; ++z) {
      for (size_t y = 0; y < h; ++y)
        std::memcpy(&packed_src[(z * h + y) * w], host_row(c, true, y, z), w);
    }
    a.desc.srcHost = nullptr;
    a.desc.srcXInBytes = a.desc.srcY = a.desc.srcZ = 0;
    a.desc.srcPitch = w;
    a.desc.srcHeight = h;
  }
  if (dst_host) {
    a.desc.dstHost = nullptr;
    a.desc.dstXInBytes = a.desc.dstY = a.desc.dstZ = 0;
    a.desc.dstPitch = w;
    a.desc.dstHeight = h;
  }
  CallId id = kind == formats::CopyKind::k3D
                  ? (async ? CallId::k_cuMemcpy3DAsync_v2 : CallId::k_cuMemcpy3D_v2)
              : kind == formats::CopyKind::k2DUnaligned
                  ? CallId::k_cuMemcpy2DUnaligned_v2
                  : (async ? CallId::k_cuMemcpy2DAsync_v2 : CallId::k_cuMemcpy2D_v2);
  ArgWriter wr(id);
  wr.put(a);
  if (src_host) wr.own_bulk(packed_src.data(), packed_src.size());
  if (async && !dst_host) {
    const CUresult checked = check_host_copy(stream);  // a capture cannot hold host rows
    if (CUresult e = wr.send_async()) return e;
    return src_host ? checked : CUDA_SUCCESS;
  }
  std::vector<uint8_t> packed_dst;
  if (dst_host) {
    packed_dst.resize(w * rows);
    wr.reply_bulk(packed_dst.data(), packed_dst.size());
  }
  OutReader r;
  if (CUresult e = wr.call(&r)) return e;
  if (dst_host) {
    for (size_t z = 0; z < d; ++z) {
      for (size_t y = 0; y < h; ++y) {
        std::memcpy(const_cast<uint8_t*>(host_row(c, false, y, z)), &packed_dst[(z * h + y) * w],
                    w);
      }
    }
  }
  return CUDA_SUCCESS;
}

CUDA_MEMCPY3D from_2d(const CUDA_MEMCPY2D& p) {
  CUDA_MEMCPY3D c{};
  copy_2d_fields(p, &c);
  c.srcHeight = p.Height;
  c.dstHeight = p.Height;
  c.Depth = 1;
  return c;
}

// A unified copy between two host buffers runs here, in user space (see host_rows_ok).
bool host_to_host_ok(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return n == 0 || (host_range_ok(reinterpret_cast<const void*>(src), n, HostAccess::kRead) &&
                    host_range_ok(reinterpret_cast<const void*>(dst), n, HostAccess::kReadWrite));
}

}  // namespace

extern "C" {

// ---- unified copies: the client's allocation table says which side each pointer is on.

CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  bool dd = is_device_pointer(dst), sd = is_device_pointer(src);
  if (dd && sd) return cuMemcpyDtoD_v2(dst, src, ByteCount);
  if (dd) return cuMemcpyHtoD_v2(dst, reinterpret_cast<const void*>(src), ByteCount);
  if (sd) return cuMemcpyDtoH_v2(reinterpret_cast<void*>(dst), src, ByteCount);
  if (!host_to_host_ok(dst, src, ByteCount)) return CUDA_ERROR_INVALID_VALUE;
  if (ByteCount)
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), ByteCount);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                               CUstream hStream) {
  bool dd = is_device_pointer(dst), sd = is_device_pointer(src);
  if (dd && sd) return cuMemcpyDtoDAsync_v2(dst, src, ByteCount, hStream);
  if (dd) return cuMemcpyHtoDAsync_v2(dst, reinterpret_cast<const void*>(src), ByteCount, hStream);
  if (sd) return cuMemcpyDtoHAsync_v2(reinterpret_cast<void*>(dst), src, ByteCount, hStream);
  if (!host_to_host_ok(dst, src, ByteCount)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = cuStreamSynchronize(hStream)) return e;
  if (ByteCount)
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), ByteCount);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpy2D_v2(const CUDA_MEMCPY2D* pCopy) {
  if (!pCopy) return CUDA_ERROR_INVALID_VALUE;
  return copy3d(from_2d(*pCopy), formats::CopyKind::k2D, false, nullptr);
}

CUresult CUDAAPI cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* pCopy) {
  if (!pCopy) return CUDA_ERROR_INVALID_VALUE;
  return copy3d(from_2d(*pCopy), formats::CopyKind::k2DUnaligned, false, nullptr);
}

CUresult CUDAAPI cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* pCopy, CUstream hStream) {
  if (!pCopy) return CUDA_ERROR_INVALID_VALUE;
  return copy3d(from_2d(*pCopy), formats::CopyKind::k2D, true, hStream);
}

CUresult CUDAAPI cuMemcpy3D_v2(const CUDA_MEMCPY3D* pCopy) {
  if (!pCopy) return CUDA_ERROR_INVALID_VALUE;
  return copy3d(*pCopy, formats::CopyKind::k3D, false, nullptr);
}

CUresult CUDAAPI cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* pCopy, CUstream hStream) {
  if (!pCopy) return CUDA_ERROR_INVALID_VALUE;
  return copy3d(*pCopy, formats::CopyKind::k3D, true, hStream);
}

}  // extern "C"
