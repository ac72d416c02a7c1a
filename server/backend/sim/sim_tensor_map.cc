// Tensor maps on the sim: every argument is checked as cuda.h documents it for
// cuTensorMapEncodeTiled, cuTensorMapEncodeIm2col and cuTensorMapEncodeIm2colWide, and the
// arguments are kept in the map's 128 opaque bytes (a layout of the sim's own, which only the
// sim reads). The sim runs no TMA instructions, so no kernel here reads a map; a map is made so
// that programs which build them on the host (and choose their kernels by the device) work.

#include <cstring>

#include "server/backend/sim/sim_gpu.h"
#include "server/backend/tensor_map_layout.h"

namespace cuwire::server::sim {
namespace {

constexpr uint64_t kMagic = 0x50414d54'53574331ull;  // "1CWSTMAP"
enum class MapKind : uint64_t { kTiled = 1, kIm2col = 2, kIm2colWide = 3 };

bool packed16(CUtensorMapDataType t) {
  return t == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B || t == CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B;
}
bool packed(CUtensorMapDataType t) {
  return packed16(t) || t == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B;
}
bool floating(CUtensorMapDataType t) {
  switch (t) {
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ:
      return true;
    default:
      return false;
  }
}

// The swizzle's span in bytes (0: none).
uint32_t swizzle_span(CUtensorMapSwizzle s) {
  switch (s) {
    case CU_TENSOR_MAP_SWIZZLE_32B:
      return 32;
    case CU_TENSOR_MAP_SWIZZLE_64B:
      return 64;
    case CU_TENSOR_MAP_SWIZZLE_NONE:
      return 0;
    default:
      return 128;  // the 128B modes
  }
}

// What every kind of map requires: the map's alignment, the data type, the rank (min_rank..5),
// the address, dimensions, strides, element strides and the enums; `inner_bytes` is the box's
// inner dimension in bytes (Tiled: boxDim[0] elements; im2col: channelsPerPixel).
CUresult check_common(const CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank,
                      uint32_t min_rank, const void* address, const cuuint64_t* dims,
                      const cuuint64_t* strides, const cuuint32_t* element_strides,
                      CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                      CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob,
                      uint64_t inner_bytes) {
  if (!map || reinterpret_cast<uintptr_t>(map) % 64 != 0) return CUDA_ERROR_INVALID_VALUE;
  if (tensor_element_bits(type) == 0) return CUDA_ERROR_INVALID_VALUE;
  if (interleave > CU_TENSOR_MAP_INTERLEAVE_32B || swizzle > CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B ||
      l2 > CU_TENSOR_MAP_L2_PROMOTION_L2_256B ||
      oob > CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (interleave != CU_TENSOR_MAP_INTERLEAVE_NONE) min_rank = 3;
  if (rank < min_rank || rank > 5) return CUDA_ERROR_INVALID_VALUE;
  if ((rank > 1 && !strides) || !dims || !element_strides) return CUDA_ERROR_INVALID_VALUE;
  const bool wide_align = interleave == CU_TENSOR_MAP_INTERLEAVE_32B || packed16(type);
  const uintptr_t align = wide_align ? 32 : 16;
  if (!address || reinterpret_cast<uintptr_t>(address) % align != 0)
    return CUDA_ERROR_INVALID_VALUE;
  for (cuuint32_t i = 0; i < rank; ++i) {
    if (dims[i] == 0 || dims[i] > (uint64_t{1} << 32)) return CUDA_ERROR_INVALID_VALUE;
    if (element_strides[i] == 0 || element_strides[i] > 8) return CUDA_ERROR_INVALID_VALUE;
  }
  if (packed16(type) && dims[0] % 128 != 0) return CUDA_ERROR_INVALID_VALUE;
  if (type == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B && dims[0] % 2 != 0)
    return CUDA_ERROR_INVALID_VALUE;
  for (cuuint32_t i = 0; i + 1 < rank; ++i) {
    if (strides[i] % (wide_align ? 32 : 16) != 0 || strides[i] >= (uint64_t{1} << 40)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  uint64_t span = 0;
  if (!tensor_span_bytes(type, rank, dims, strides, &span)) return CUDA_ERROR_INVALID_VALUE;
  if (interleave == CU_TENSOR_MAP_INTERLEAVE_32B && swizzle != CU_TENSOR_MAP_SWIZZLE_32B) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (type == CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B &&
      interleave != CU_TENSOR_MAP_INTERLEAVE_NONE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && swizzle != CU_TENSOR_MAP_SWIZZLE_NONE &&
      inner_bytes > swizzle_span(swizzle)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (type == CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B &&
      !(swizzle == CU_TENSOR_MAP_SWIZZLE_NONE || swizzle == CU_TENSOR_MAP_SWIZZLE_128B ||
        swizzle == CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B ||
        swizzle == CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (type == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B &&
      !(swizzle == CU_TENSOR_MAP_SWIZZLE_NONE || swizzle == CU_TENSOR_MAP_SWIZZLE_128B ||
        swizzle == CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (oob == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA &&
      (!floating(type) || packed(type))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

// The sim's layout: what the map was made from, word by word.
void encode(CUtensorMap* map, MapKind kind, CUtensorMapDataType type, cuuint32_t rank,
            const void* address, const cuuint64_t* dims, const cuuint64_t* strides,
            const uint64_t (&extra)[4]) {
  uint64_t w[16] = {};
  w[0] = kMagic;
  w[1] = static_cast<uint64_t>(kind) | uint64_t{type} << 8 | uint64_t{rank} << 16;
  w[2] = reinterpret_cast<uintptr_t>(address);
  for (cuuint32_t i = 0; i < rank; ++i) w[3 + i] = dims[i];
  for (cuuint32_t i = 0; i + 1 < rank; ++i) w[8 + i] = strides[i];
  for (int i = 0; i < 4; ++i) w[12 + i] = extra[i];
  static_assert(sizeof w == sizeof(CUtensorMap));
  std::memcpy(map, w, sizeof w);
}

// Up to 5 small values in one word, 12 bits each.
uint64_t pack12(const cuuint32_t* v, cuuint32_t n) {
  uint64_t out = 0;
  for (cuuint32_t i = 0; i < n; ++i) out |= uint64_t{v[i] & 0xfffu} << (12 * i);
  return out;
}
uint64_t enums(CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
               CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  return uint64_t{interleave} | uint64_t{swizzle} << 8 | uint64_t{l2} << 16 | uint64_t{oob} << 24;
}

}  // namespace

CUresult SimGpu::cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank,
                                        void* address, const cuuint64_t* dims,
                                        const cuuint64_t* strides, const cuuint32_t* box,
                                        const cuuint32_t* element_strides,
                                        CUtensorMapInterleave interleave,
                                        CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                        CUtensorMapFloatOOBfill oob) {
  if (!box || rank == 0 || rank > 5) return CUDA_ERROR_INVALID_VALUE;
  for (cuuint32_t i = 0; i < rank; ++i) {
    if (box[i] == 0 || box[i] > 256) return CUDA_ERROR_INVALID_VALUE;
  }
  const uint64_t inner_bytes = (uint64_t{box[0]} * tensor_element_bits(type) + 7) / 8;
  if (CUresult e = check_common(map, type, rank, 1, address, dims, strides, element_strides,
                                interleave, swizzle, l2, oob, inner_bytes)) {
    return e;
  }
  if (interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && inner_bytes % 16 != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (packed16(type) && box[0] != 128) return CUDA_ERROR_INVALID_VALUE;
  encode(
      map, MapKind::kTiled, type, rank, address, dims, strides,
      {pack12(box, rank), pack12(element_strides, rank), enums(interleave, swizzle, l2, oob), 0});
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuTensorMapEncodeIm2col(CUtensorMap* map, CUtensorMapDataType type,
                                         cuuint32_t rank, void* address, const cuuint64_t* dims,
                                         const cuuint64_t* strides, const int* lower,
                                         const int* upper, cuuint32_t channels, cuuint32_t pixels,
                                         const cuuint32_t* element_strides,
                                         CUtensorMapInterleave interleave,
                                         CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                         CUtensorMapFloatOOBfill oob) {
  if (rank < 3 || rank > 5 || !lower || !upper) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t inner_bytes = (uint64_t{channels} * tensor_element_bits(type) + 7) / 8;
  if (CUresult e = check_common(map, type, rank, 3, address, dims, strides, element_strides,
                                interleave, swizzle, l2, oob, inner_bytes)) {
    return e;
  }
  // The corner offsets: one in [-32768, 32767] for rank 3, two in [-128, 127] for rank 4,
  // three in [-16, 15] for rank 5; the box they bound is not empty.
  const int limit = rank == 3 ? 32768 : rank == 4 ? 128 : 16;
  // Kept as 16 bits a corner offset at rank 3, 8 bits at ranks 4 and 5 (all their range needs).
  const int bits = rank == 3 ? 16 : 8;
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  uint64_t corners = 0;
  for (cuuint32_t i = 0; i + 2 < rank; ++i) {
    if (lower[i] < -limit || lower[i] >= limit || upper[i] < -limit || upper[i] >= limit) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    // The box spans dims[i + 1] - lower + upper pixels along this dimension.
    if (static_cast<int64_t>(dims[i + 1]) - lower[i] + upper[i] <= 0)
      return CUDA_ERROR_INVALID_VALUE;
    const uint64_t pair =
        (static_cast<uint64_t>(lower[i]) & mask) | (static_cast<uint64_t>(upper[i]) & mask) << bits;
    corners |= pair << (2 * bits * i);
  }
  if (channels == 0 || channels > 256 || pixels == 0 || pixels > 1024)
    return CUDA_ERROR_INVALID_VALUE;
  if (packed16(type) && channels != 128) return CUDA_ERROR_INVALID_VALUE;
  encode(map, MapKind::kIm2col, type, rank, address, dims, strides,
         {pack12(element_strides, rank), enums(interleave, swizzle, l2, oob),
          uint64_t{channels} | uint64_t{pixels} << 32, corners});
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuTensorMapEncodeIm2colWide(
    CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* address,
    const cuuint64_t* dims, const cuuint64_t* strides, int lower_width, int upper_width,
    cuuint32_t channels, cuuint32_t pixels, const cuuint32_t* element_strides,
    CUtensorMapInterleave interleave, CUtensorMapIm2ColWideMode mode, CUtensorMapSwizzle swizzle,
    CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  if (rank < 3 || rank > 5 || mode > CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // The wide modes take only these swizzles, and no interleave.
  if (interleave != CU_TENSOR_MAP_INTERLEAVE_NONE ||
      !(swizzle == CU_TENSOR_MAP_SWIZZLE_64B || swizzle == CU_TENSOR_MAP_SWIZZLE_128B ||
        swizzle == CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const uint64_t inner_bytes = (uint64_t{channels} * tensor_element_bits(type) + 7) / 8;
  if (CUresult e = check_common(map, type, rank, 3, address, dims, strides, element_strides,
                                interleave, swizzle, l2, oob, inner_bytes)) {
    return e;
  }
  // Either width offset in [-32768, 32767], whatever the rank.
  constexpr int limit = 32768;
  if (lower_width < -limit || lower_width >= limit || upper_width < -limit ||
      upper_width >= limit || static_cast<int64_t>(dims[1]) - lower_width + upper_width <= 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (channels == 0 || channels > 256) return CUDA_ERROR_INVALID_VALUE;
  if (mode == CU_TENSOR_MAP_IM2COL_WIDE_MODE_W && (pixels == 0 || pixels > 1024)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (packed16(type) && channels != 128) return CUDA_ERROR_INVALID_VALUE;
  encode(map, MapKind::kIm2colWide, type, rank, address, dims, strides,
         {pack12(element_strides, rank), enums(interleave, swizzle, l2, oob) | uint64_t{mode} << 32,
          uint64_t{channels} | uint64_t{pixels} << 32,
          uint64_t{static_cast<uint32_t>(lower_width)} |
              uint64_t{static_cast<uint32_t>(upper_width)} << 32});
  return CUDA_SUCCESS;
}

}  // namespace cuwire::server::sim
