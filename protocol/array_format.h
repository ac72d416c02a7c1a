// Element sizes of CUDA array formats, shared by the client (batch copies count array offsets
// in elements) and the sim backend (array storage).
#pragma once

#include <cuda.h>

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

}  // namespace cuwire
