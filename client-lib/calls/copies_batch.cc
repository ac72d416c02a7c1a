// Batch copies (cuMemcpyBatchAsync, cuMemcpy3DBatchAsync, CUDA 12.8+): each copy of the batch
// becomes the plain async copy it describes, in order, on the batch's stream. The attributes
// (source access order, location hints, overlap preference) are hints the remote copies do
// not need: stream order always holds, which every access order allows.

#include <cuda.h>

#include <cstdint>

#include "client-lib/core/client_call.h"
#include "protocol/array_format.h"

#undef cuMemcpyBatchAsync
#undef cuMemcpy3DBatchAsync

namespace {

constexpr size_t kNoIndex = SIZE_MAX;

bool legacy_stream(CUstream s) { return s == nullptr || s == CU_STREAM_LEGACY; }

bool valid_access_order(CUmemcpySrcAccessOrder o) {
  return o == CU_MEMCPY_SRC_ACCESS_ORDER_STREAM ||
         o == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL || o == CU_MEMCPY_SRC_ACCESS_ORDER_ANY;
}

CUresult batch(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
               CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, CUstream stream,
               size_t* fail) {
  *fail = kNoIndex;
  if (count == 0 || !dsts || !srcs || !sizes || !attrs || !attrsIdxs || numAttrs == 0 ||
      numAttrs > count || legacy_stream(stream)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (attrsIdxs[0] != 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t k = 0; k < numAttrs; ++k) {
    if (k > 0 && attrsIdxs[k] <= attrsIdxs[k - 1]) return CUDA_ERROR_INVALID_VALUE;
    if (attrsIdxs[k] >= count || !valid_access_order(attrs[k].srcAccessOrder)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  for (size_t i = 0; i < count; ++i) {
    if (sizes[i] == 0) {
      *fail = i;
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (CUresult e = cuMemcpyAsync(dsts[i], srcs[i], sizes[i], stream)) {
      *fail = i;
      return e;
    }
  }
  return CUDA_SUCCESS;
}

// One operand of a 3D batch copy as the source or destination half of a CUDA_MEMCPY3D.
struct Side {
  CUmemorytype type;
  CUdeviceptr ptr;
  CUarray array;
  size_t x, y, z;        // x in bytes
  size_t pitch, height;  // pointer operands
};

CUresult element_bytes(CUarray a, size_t* out) {
  CUDA_ARRAY3D_DESCRIPTOR d{};
  if (CUresult e = cuArray3DGetDescriptor_v2(&d, a)) return e;
  *out = cuwire::array_element_bytes(d.Format, d.NumChannels);
  return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult operand(const CUmemcpy3DOperand& o, const CUextent3D& ext, size_t elem, Side* s) {
  switch (o.type) {
    case CU_MEMCPY_OPERAND_TYPE_POINTER: {
      size_t row = o.op.ptr.rowLength ? o.op.ptr.rowLength : ext.width;
      size_t layer = o.op.ptr.layerHeight ? o.op.ptr.layerHeight : ext.height;
      if (row < ext.width || layer < ext.height) return CUDA_ERROR_INVALID_VALUE;
      size_t pitch;
      if (__builtin_mul_overflow(row, elem, &pitch)) return CUDA_ERROR_INVALID_VALUE;
      *s = Side{CU_MEMORYTYPE_UNIFIED, o.op.ptr.ptr, nullptr, 0, 0, 0, pitch, layer};
      return CUDA_SUCCESS;
    }
    case CU_MEMCPY_OPERAND_TYPE_ARRAY: {
      size_t x;
      if (__builtin_mul_overflow(o.op.array.offset.x, elem, &x)) return CUDA_ERROR_INVALID_VALUE;
      *s = Side{CU_MEMORYTYPE_ARRAY,
                0,
                o.op.array.array,
                x,
                o.op.array.offset.y,
                o.op.array.offset.z,
                0,
                0};
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult copy_op(const CUDA_MEMCPY3D_BATCH_OP& op, CUstream stream) {
  const CUextent3D& ext = op.extent;
  if (ext.width == 0 || ext.height == 0 || ext.depth == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_access_order(op.srcAccessOrder)) return CUDA_ERROR_INVALID_VALUE;
  // Elements are bytes between pointers and the array's element otherwise; two arrays must
  // agree.
  size_t elem = 1;
  bool src_array = op.src.type == CU_MEMCPY_OPERAND_TYPE_ARRAY;
  bool dst_array = op.dst.type == CU_MEMCPY_OPERAND_TYPE_ARRAY;
  if (src_array) {
    if (CUresult e = element_bytes(op.src.op.array.array, &elem)) return e;
  }
  if (dst_array) {
    size_t d = 0;
    if (CUresult e = element_bytes(op.dst.op.array.array, &d)) return e;
    if (src_array && d != elem) return CUDA_ERROR_INVALID_VALUE;
    elem = d;
  }
  Side src{}, dst{};
  if (CUresult e = operand(op.src, ext, elem, &src)) return e;
  if (CUresult e = operand(op.dst, ext, elem, &dst)) return e;
  CUDA_MEMCPY3D c{};
  if (__builtin_mul_overflow(ext.width, elem, &c.WidthInBytes)) return CUDA_ERROR_INVALID_VALUE;
  c.Height = ext.height;
  c.Depth = ext.depth;
  c.srcMemoryType = src.type;
  c.srcDevice = src.ptr;
  c.srcArray = src.array;
  c.srcXInBytes = src.x;
  c.srcY = src.y;
  c.srcZ = src.z;
  c.srcPitch = src.pitch;
  c.srcHeight = src.height;
  c.dstMemoryType = dst.type;
  c.dstDevice = dst.ptr;
  c.dstArray = dst.array;
  c.dstXInBytes = dst.x;
  c.dstY = dst.y;
  c.dstZ = dst.z;
  c.dstPitch = dst.pitch;
  c.dstHeight = dst.height;
  return cuMemcpy3DAsync_v2(&c, stream);
}

CUresult batch3d(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* ops, unsigned long long flags,
                 CUstream stream, size_t* fail) {
  *fail = kNoIndex;
  if (numOps == 0 || !ops || flags != 0 || legacy_stream(stream)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < numOps; ++i) {
    if (CUresult e = copy_op(ops[i], stream)) {
      *fail = i;
      return e;
    }
  }
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuMemcpyBatchAsync_v2(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                       size_t count, CUmemcpyAttributes* attrs, size_t* attrsIdxs,
                                       size_t numAttrs, CUstream hStream) {
  size_t fail;
  return batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream, &fail);
}

CUresult CUDAAPI cuMemcpy3DBatchAsync_v2(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList,
                                         unsigned long long flags, CUstream hStream) {
  size_t fail;
  return batch3d(numOps, opList, flags, hStream, &fail);
}

// CUDA 12.8 and 12.9 exported these names with one more parameter, failIdx: the index of the
// copy that failed, or SIZE_MAX when the error concerns no single copy. cuda.h declares only
// the newer forms, so the older ones (and their per-thread-stream twins) are declared here.
using BatchAsyncV1 = CUresult CUDAAPI(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                      size_t count, CUmemcpyAttributes* attrs, size_t* attrsIdxs,
                                      size_t numAttrs, size_t* failIdx, CUstream hStream);
using Batch3DAsyncV1 = CUresult CUDAAPI(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList,
                                        size_t* failIdx, unsigned long long flags,
                                        CUstream hStream);
BatchAsyncV1 cuMemcpyBatchAsync, cuMemcpyBatchAsync_ptsz;
Batch3DAsyncV1 cuMemcpy3DBatchAsync, cuMemcpy3DBatchAsync_ptsz;

CUresult CUDAAPI cuMemcpyBatchAsync(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                    size_t count, CUmemcpyAttributes* attrs, size_t* attrsIdxs,
                                    size_t numAttrs, size_t* failIdx, CUstream hStream) {
  size_t fail;
  CUresult e = batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream, &fail);
  if (failIdx) *failIdx = fail;
  return e;
}

CUresult CUDAAPI cuMemcpyBatchAsync_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                         size_t count, CUmemcpyAttributes* attrs, size_t* attrsIdxs,
                                         size_t numAttrs, size_t* failIdx, CUstream hStream) {
  if (hStream == nullptr) hStream = CU_STREAM_PER_THREAD;
  return cuMemcpyBatchAsync(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream);
}

CUresult CUDAAPI cuMemcpy3DBatchAsync(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList,
                                      size_t* failIdx, unsigned long long flags, CUstream hStream) {
  size_t fail;
  CUresult e = batch3d(numOps, opList, flags, hStream, &fail);
  if (failIdx) *failIdx = fail;
  return e;
}

CUresult CUDAAPI cuMemcpy3DBatchAsync_ptsz(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList,
                                           size_t* failIdx, unsigned long long flags,
                                           CUstream hStream) {
  if (hStream == nullptr) hStream = CU_STREAM_PER_THREAD;
  return cuMemcpy3DBatchAsync(numOps, opList, failIdx, flags, hStream);
}

}  // extern "C"
