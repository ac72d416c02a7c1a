// Tensor maps (protocol/wire_formats.h: TensorMapArgs). A map names global memory by address, and a
// kernel given the map reads and writes that memory through it: before the backend encodes one,
// the tensor its dimensions and strides span from the address must lie in one allocation of the
// session, as every device pointer a client sends must. The arrays are read only after the rank
// is known to be at most 5, and each must hold exactly the elements the rank calls for.

#include <cuda.h>

#include <cstring>
#include <span>

#include "server/backend/tensor_map_layout.h"
#include "server/session/dispatch.h"

namespace cuwire::server {
namespace {

// An array of exactly `n` elements of T, copied out of the message.
template <typename T>
bool get_exact(ArgReader& in, T* out, size_t n) {
  std::span<const uint8_t> raw;
  if (!in.get_array(&raw, sizeof(T)) || raw.size() != n * sizeof(T)) return false;
  if (n) std::memcpy(out, raw.data(), raw.size());
  return true;
}

// The fixed part and the dimensions and strides every kind of map has, with the enums as their
// cuda.h types once they are known to be in range; read_common checks the tensor's memory as
// the session's.
struct Common {
  formats::TensorMapArgs a{};
  cuuint64_t dims[formats::kMaxTensorRank] = {};
  cuuint64_t strides[formats::kMaxTensorRank] = {};
  CUtensorMapDataType type{};
  CUtensorMapInterleave interleave{};
  CUtensorMapSwizzle swizzle{};
  CUtensorMapL2promotion l2{};
  CUtensorMapFloatOOBfill oob{};
  void* address = nullptr;
};

CUresult read_common(SessionContext& cx, ArgReader& in, Common* c) {
  if (!in.get(&c->a)) return in.malformed();
  if (c->a.reserved != 0) return in.malformed();
  const uint32_t rank = c->a.rank;
  if (rank == 0 || rank > formats::kMaxTensorRank) return CUDA_ERROR_INVALID_VALUE;
  // The enums become their cuda.h types: values outside them go no further.
  if (tensor_element_bits(c->a.data_type) == 0 || c->a.interleave > CU_TENSOR_MAP_INTERLEAVE_32B ||
      c->a.swizzle > CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B ||
      c->a.l2_promotion > CU_TENSOR_MAP_L2_PROMOTION_L2_256B ||
      c->a.oob_fill > CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA ||
      c->a.wide_mode > CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  c->type = static_cast<CUtensorMapDataType>(c->a.data_type);
  c->interleave = static_cast<CUtensorMapInterleave>(c->a.interleave);
  c->swizzle = static_cast<CUtensorMapSwizzle>(c->a.swizzle);
  c->l2 = static_cast<CUtensorMapL2promotion>(c->a.l2_promotion);
  c->oob = static_cast<CUtensorMapFloatOOBfill>(c->a.oob_fill);
  c->address = reinterpret_cast<void*>(c->a.global_address);
  if (!get_exact(in, c->dims, rank) || !get_exact(in, c->strides, rank - 1)) {
    return in.malformed();
  }
  uint64_t span = 0;
  if (!tensor_span_bytes(c->a.data_type, rank, c->dims, c->strides, &span)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return cx.check_range(c->a.global_address, span);
}

CUresult reply(ReplyWriter& out, const CUtensorMap& map) {
  out.put_bytes(&map, sizeof map);
  return CUDA_SUCCESS;
}

}  // namespace

CUresult custom_cuTensorMapEncodeTiled(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  Common c;
  if (CUresult e = read_common(cx, in, &c)) return e;
  cuuint32_t box[formats::kMaxTensorRank] = {}, element_strides[formats::kMaxTensorRank] = {};
  if (!get_exact(in, box, c.a.rank) || !get_exact(in, element_strides, c.a.rank) || !in.at_end()) {
    return in.malformed();
  }
  CUtensorMap map{};
  if (CUresult e = cx.backend().cuTensorMapEncodeTiled(&map, c.type, c.a.rank, c.address, c.dims,
                                                       c.strides, box, element_strides,
                                                       c.interleave, c.swizzle, c.l2, c.oob)) {
    return e;
  }
  return reply(out, map);
}

CUresult custom_cuTensorMapEncodeIm2col(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  Common c;
  if (CUresult e = read_common(cx, in, &c)) return e;
  if (c.a.rank < 3) return CUDA_ERROR_INVALID_VALUE;  // the corners need rank - 2 >= 1
  int lower[formats::kMaxTensorRank] = {}, upper[formats::kMaxTensorRank] = {};
  cuuint32_t element_strides[formats::kMaxTensorRank] = {};
  if (!get_exact(in, lower, c.a.rank - 2) || !get_exact(in, upper, c.a.rank - 2) ||
      !get_exact(in, element_strides, c.a.rank) || !in.at_end()) {
    return in.malformed();
  }
  CUtensorMap map{};
  if (CUresult e = cx.backend().cuTensorMapEncodeIm2col(
          &map, c.type, c.a.rank, c.address, c.dims, c.strides, lower, upper,
          c.a.channels_per_pixel, c.a.pixels_per_column, element_strides, c.interleave, c.swizzle,
          c.l2, c.oob)) {
    return e;
  }
  return reply(out, map);
}

CUresult custom_cuTensorMapEncodeIm2colWide(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  Common c;
  if (CUresult e = read_common(cx, in, &c)) return e;
  cuuint32_t element_strides[formats::kMaxTensorRank] = {};
  if (!get_exact(in, element_strides, c.a.rank) || !in.at_end()) return in.malformed();
  CUtensorMap map{};
  if (CUresult e = cx.backend().cuTensorMapEncodeIm2colWide(
          &map, c.type, c.a.rank, c.address, c.dims, c.strides, c.a.lower_corner_width,
          c.a.upper_corner_width, c.a.channels_per_pixel, c.a.pixels_per_column, element_strides,
          c.interleave, static_cast<CUtensorMapIm2ColWideMode>(c.a.wide_mode), c.swizzle, c.l2,
          c.oob)) {
    return e;
  }
  return reply(out, map);
}

}  // namespace cuwire::server
