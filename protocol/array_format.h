// Element sizes of CUDA array formats and the levels of mipmapped arrays, shared by the client
// (batch copies count array offsets in elements), the server (what a mipmapped array holds) and
// the sim backend (array storage).
#pragma once

#include <cuda.h>

#include <algorithm>
#include <cstddef>

namespace cuwire {

// Bytes of one channel of `f`, or 0 for a format cuwire does not support (planar video
// formats, block-compressed formats).
inline size_t array_channel_bytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4;
    default:
      return 0;
  }
}

// Bytes of one element (all channels), or 0 when the format or channel count is invalid.
inline size_t array_element_bytes(CUarray_format f, unsigned channels) {
  if (channels != 1 && channels != 2 && channels != 4) return 0;
  return array_channel_bytes(f) * channels;
}

// Whether a mipmapped array's depth is an axis its levels halve (a 3D array's), not layers or
// cube faces.
inline bool mipmap_depth_axis(const CUDA_ARRAY3D_DESCRIPTOR& d) {
  return d.Depth != 0 && !(d.Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP));
}

// The levels cuMipmappedArrayCreate makes for `requested`: clamped to
// [1, 1 + floor(log2(largest extent))], as the driver documents.
inline unsigned mipmap_levels(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned requested) {
  const size_t largest = std::max({d.Width, d.Height, mipmap_depth_axis(d) ? d.Depth : 0});
  unsigned most = 1;
  while (most < 32 && (largest >> most) != 0) ++most;
  return std::clamp(requested, 1u, most);
}

// The descriptor of level `i`: half the level before on every axis that is not layers or cube
// faces, at least 1.
inline CUDA_ARRAY3D_DESCRIPTOR mipmap_level(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned i) {
  CUDA_ARRAY3D_DESCRIPTOR l = d;
  l.Width = std::max<size_t>(1, d.Width >> i);
  if (d.Height) l.Height = std::max<size_t>(1, d.Height >> i);
  if (mipmap_depth_axis(d)) l.Depth = std::max<size_t>(1, d.Depth >> i);
  return l;
}

}  // namespace cuwire
