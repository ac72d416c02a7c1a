// The memory a tensor map describes (cuTensorMapEncode*): its element size and the bytes its
// global dimensions and strides span from the global address. Shared by the server's check of
// the address (server/calls/tensor_maps.cc) and the sim's encoding (sim/sim_tensor_map.cc).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace cuwire::server {

// Bits per element of a tensor map data type as it lies in memory (the packed types: 16 values
// in 8 or 16 bytes); 0 for a value that is not a data type.
inline uint32_t tensor_element_bits(uint32_t data_type) {
  switch (data_type) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8:
    case CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B:
    case CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B:
      return 8;
    case CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B:
      return 4;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
      return 16;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_INT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ:
      return 32;
    case CU_TENSOR_MAP_DATA_TYPE_UINT64:
    case CU_TENSOR_MAP_DATA_TYPE_INT64:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64:
      return 64;
    default:
      return 0;
  }
}

// The bytes from the global address to the end of the tensor's last element: globalDim[0]
// elements, then (globalDim[i] - 1) strides of globalStrides[i - 1] for each higher dimension.
// False for a zero dimension, an unknown data type or a span past 64 bits.
inline bool tensor_span_bytes(uint32_t data_type, uint32_t rank, const cuuint64_t* dims,
                              const cuuint64_t* strides, uint64_t* out) {
  const uint32_t bits = tensor_element_bits(data_type);
  if (bits == 0 || rank == 0) return false;
  for (uint32_t i = 0; i < rank; ++i) {
    if (dims[i] == 0) return false;
  }
  uint64_t span = 0;
  if (__builtin_mul_overflow(dims[0], uint64_t{bits}, &span)) return false;
  span = (span + 7) / 8;
  for (uint32_t i = 1; i < rank; ++i) {
    uint64_t step = 0;
    if (__builtin_mul_overflow(dims[i] - 1, strides[i - 1], &step) ||
        __builtin_add_overflow(span, step, &span)) {
      return false;
    }
  }
  *out = span;
  return true;
}

}  // namespace cuwire::server
