// Memory that handles hold (manifest: holds=), charged to the tenant before the backend makes
// them, and memory as the session's tenant sees it.

#include <cuda.h>

#include <cstddef>
#include <cstdint>

#include "protocol/array_format.h"
#include "server/backend/backend.h"
#include "server/session/dispatch.h"

namespace cuwire::server {

// ---------------------------------------------------------------------------------------------
// Memory that handles hold (manifest: holds=), charged to the tenant before the backend makes
// them.

namespace {

// Bytes of one element of an array format, per channel for the formats whose channel count is
// the descriptor's, and 0 for block-compressed formats (array_texels charges them by block).
// Formats without a plain layout (YUV planar and packed ones) are charged 4 bytes a channel,
// more than any of them takes: a cap is never passed by a format counted short.
uint64_t format_bytes(unsigned f) {
  switch (f) {
    case enum_value(CU_AD_FORMAT_UNSIGNED_INT8):
    case enum_value(CU_AD_FORMAT_SIGNED_INT8):
    case enum_value(CU_AD_FORMAT_UNORM_INT8X1):
    case enum_value(CU_AD_FORMAT_UNORM_INT8X2):
    case enum_value(CU_AD_FORMAT_UNORM_INT8X4):
    case enum_value(CU_AD_FORMAT_SNORM_INT8X1):
    case enum_value(CU_AD_FORMAT_SNORM_INT8X2):
    case enum_value(CU_AD_FORMAT_SNORM_INT8X4):
      return 1;
    case enum_value(CU_AD_FORMAT_UNSIGNED_INT16):
    case enum_value(CU_AD_FORMAT_SIGNED_INT16):
    case enum_value(CU_AD_FORMAT_HALF):
    case enum_value(CU_AD_FORMAT_UNORM_INT16X1):
    case enum_value(CU_AD_FORMAT_UNORM_INT16X2):
    case enum_value(CU_AD_FORMAT_UNORM_INT16X4):
    case enum_value(CU_AD_FORMAT_SNORM_INT16X1):
    case enum_value(CU_AD_FORMAT_SNORM_INT16X2):
    case enum_value(CU_AD_FORMAT_SNORM_INT16X4):
      return 2;
    case enum_value(CU_AD_FORMAT_UNSIGNED_INT32):
    case enum_value(CU_AD_FORMAT_SIGNED_INT32):
    case enum_value(CU_AD_FORMAT_FLOAT):
      return 4;
    case enum_value(CU_AD_FORMAT_UNORM_INT_101010_2):
      return 1;  // four channels of one byte each: 32 bits a texel
    default:
      return 4;
  }
}

// BC1 and BC4 keep a 4x4 block in 8 bytes, the other block-compressed formats in 16; 0: not
// block-compressed.
uint64_t block_bytes(unsigned f) {
  switch (f) {
    case enum_value(CU_AD_FORMAT_BC1_UNORM):
    case enum_value(CU_AD_FORMAT_BC1_UNORM_SRGB):
    case enum_value(CU_AD_FORMAT_BC4_UNORM):
    case enum_value(CU_AD_FORMAT_BC4_SNORM):
      return 8;
    case enum_value(CU_AD_FORMAT_BC2_UNORM):
    case enum_value(CU_AD_FORMAT_BC2_UNORM_SRGB):
    case enum_value(CU_AD_FORMAT_BC3_UNORM):
    case enum_value(CU_AD_FORMAT_BC3_UNORM_SRGB):
    case enum_value(CU_AD_FORMAT_BC5_UNORM):
    case enum_value(CU_AD_FORMAT_BC5_SNORM):
    case enum_value(CU_AD_FORMAT_BC6H_UF16):
    case enum_value(CU_AD_FORMAT_BC6H_SF16):
    case enum_value(CU_AD_FORMAT_BC7_UNORM):
    case enum_value(CU_AD_FORMAT_BC7_UNORM_SRGB):
      return 16;
    default:
      return 0;
  }
}

// An array of width x height x depth (0 as 1: a 1D array has height 0; depth is the layer
// count of a layered array, 6 for a cube map).
CheckedSize array_texels(size_t width, size_t height, size_t depth, unsigned format,
                         unsigned channels) {
  const CheckedSize h = height ? CheckedSize(height) : CheckedSize(1);
  const CheckedSize d = depth ? CheckedSize(depth) : CheckedSize(1);
  if (uint64_t block = block_bytes(format)) {
    return (CheckedSize(width) + 3) / 4 * ((h + 3) / 4) * d * block;
  }
  return CheckedSize(width) * h * d * CheckedSize(channels) * format_bytes(format);
}

}  // namespace

CheckedSize array_bytes(SessionContext&, CUarray*, const CUDA_ARRAY_DESCRIPTOR* desc) {
  if (!desc) return CheckedSize(0);
  return array_texels(desc->Width, desc->Height, 0, wire_enum(desc->Format), desc->NumChannels);
}

CheckedSize array3d_bytes(SessionContext&, CUarray*, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  if (!desc) return CheckedSize(0);
  return array_texels(desc->Width, desc->Height, desc->Depth, wire_enum(desc->Format),
                      desc->NumChannels);
}

// Every level of a mipmapped array, as the backend makes them (protocol/array_format.h).
CheckedSize mipmapped_array_bytes(SessionContext&, CUmipmappedArray*,
                                  const CUDA_ARRAY3D_DESCRIPTOR* desc, unsigned levels) {
  if (!desc) return CheckedSize(0);
  CheckedSize total(0);
  for (unsigned i = 0, n = mipmap_levels(*desc, levels); i < n; ++i) {
    const CUDA_ARRAY3D_DESCRIPTOR l = mipmap_level(*desc, i);
    total = total + array_texels(l.Width, l.Height, l.Depth, wire_enum(l.Format), l.NumChannels);
  }
  return total;
}

CheckedSize module_globals_bytes(SessionContext& cx, CUmodule*, const void*) {
  return cx.image_globals_bytes();
}

// ---------------------------------------------------------------------------------------------
// Memory as the session's tenant sees it (tenants.h): a capped tenant's cap is its total.

CUresult custom_cuMemGetInfo_v2(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  if (!in.at_end()) return in.malformed();
  size_t free = 0, total = 0;
  if (CUresult e = cx.backend().cuMemGetInfo_v2(&free, &total)) return e;
  CUdevice dev = 0;
  if (CUresult e = cx.backend().cuCtxGetDevice(&dev)) return e;
  cx.memory_view(dev, &free, &total);
  out.put_bytes(&free, sizeof free);
  out.put_bytes(&total, sizeof total);
  return CUDA_SUCCESS;
}

CUresult custom_cuDeviceTotalMem_v2(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  CUdevice dev = 0;
  if (CUresult e = in.get_only_device(cx, &dev)) return e;
  size_t total = 0;
  if (CUresult e = cx.backend().cuDeviceTotalMem_v2(&total, dev)) return e;
  size_t free = total;
  cx.memory_view(dev, &free, &total);
  out.put_bytes(&total, sizeof total);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Pointer attributes the client cannot answer from its own tables

// cuPointerGetAttribute (in: u32 attribute, u64 ptr; out: u64 pool id, 0: none), for
// CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE alone: the pool a stream-ordered allocation came from is
// the backend's to know (cuMemAllocAsync's is the session's current or its own default pool,
// which the client may never have asked for). The answer is the session's id of that pool, or
// none where the session has no name for it (another session's memory it imported).
CUresult custom_cuPointerGetAttribute(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  uint32_t attribute = 0;
  uint64_t ptr = 0;
  if (!in.get(&attribute) || !in.get(&ptr) || !in.at_end()) return in.malformed();
  if (attribute != CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = cx.check_range(ptr, 1)) return e;
  CUmemoryPool pool = nullptr;
  if (CUresult e =
          cx.backend().cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, ptr)) {
    return e;
  }
  out.put(pool ? cx.known_id(HandleKind::kMemoryPool, pool) : uint64_t{0});
  return CUDA_SUCCESS;
}

}  // namespace cuwire::server
