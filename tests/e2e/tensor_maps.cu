// Tensor maps (cuTensorMapEncodeTiled, cuTensorMapEncodeIm2col, cuTensorMapEncodeIm2colWide,
// cuTensorMapReplaceAddress), as a program that builds TMA descriptors on the host makes them:
// maps over device memory are made, the same arguments give the same map, a map moved to
// another buffer is the map made there; arguments CUDA documents as invalid are refused, and so
// is a tensor that does not lie in the program's memory (past its buffer's end, or host memory).
#include <cuda.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "tests/e2e/check.h"
#include "tests/e2e/check_driver.h"

namespace {

// A rows x cols matrix of floats, rows `pitch` bytes apart, in tiles of 32 x 32.
CUresult tiled(CUtensorMap* m, void* p, cuuint64_t rows, cuuint64_t cols, cuuint64_t pitch,
               cuuint32_t box_cols = 32, CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE) {
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {pitch};
  const cuuint32_t box[2] = {box_cols, 32};
  const cuuint32_t elem[2] = {1, 1};
  return cuTensorMapEncodeTiled(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, p, dims, strides, box, elem,
                                CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

bool same(const CUtensorMap& a, const CUtensorMap& b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

int main() {
  CHECK(cudaFree(nullptr));
  const size_t rows = 64, cols = 64, pitch = cols * sizeof(float);
  float *a, *b;
  CHECK(cudaMalloc(&a, rows * pitch));
  CHECK(cudaMalloc(&b, rows * pitch));

  alignas(64) CUtensorMap m1, m2, m3;
  CU(tiled(&m1, a, rows, cols, pitch));
  CU(tiled(&m2, a, rows, cols, pitch));
  EXPECT(same(m1, m2), "the same arguments made different maps");
  CU(tiled(&m3, b, rows, cols, pitch));
  EXPECT(!same(m1, m3), "maps of two buffers are the same");
  // Moved to the second buffer: the map made there.
  CU(cuTensorMapReplaceAddress(&m2, b));
  EXPECT(same(m2, m3), "a map moved to b differs from the map made over b");
  // A map that no encode made is refused.
  alignas(64) CUtensorMap forged;
  std::memset(&forged, 0x5a, sizeof forged);
  EXPECT(cuTensorMapReplaceAddress(&forged, b) == CUDA_ERROR_INVALID_VALUE,
         "a map no encode made was moved");
  // A 128-byte swizzle takes a box row of 128 bytes (32 floats), not one of 256.
  CU(tiled(&m3, a, rows, cols, pitch, 32, CU_TENSOR_MAP_SWIZZLE_128B));
  EXPECT(
      tiled(&m3, a, rows, cols, pitch, 64, CU_TENSOR_MAP_SWIZZLE_128B) == CUDA_ERROR_INVALID_VALUE,
      "a box row wider than its swizzle");

  // What CUDA documents as invalid.
  char* bytes = reinterpret_cast<char*>(a);
  EXPECT(tiled(&m3, bytes + 4, rows - 1, cols, pitch) == CUDA_ERROR_INVALID_VALUE,
         "an address not 16-byte aligned");
  EXPECT(tiled(&m3, a, rows, cols, pitch + 4) == CUDA_ERROR_INVALID_VALUE,
         "a stride not a multiple of 16");
  EXPECT(tiled(&m3, a, rows, cols, pitch, 300) == CUDA_ERROR_INVALID_VALUE, "a box past 256");
  EXPECT(tiled(&m3, a, rows, cols, pitch, 2) == CUDA_ERROR_INVALID_VALUE,
         "a box row of 8 bytes (not a multiple of 16)");
  EXPECT(tiled(reinterpret_cast<CUtensorMap*>(reinterpret_cast<char*>(&m3) + 8), a, rows, cols,
               pitch) == CUDA_ERROR_INVALID_VALUE,
         "a map not 64-byte aligned");
  {
    const cuuint64_t dims[6] = {8, 8, 8, 8, 8, 8};
    const cuuint64_t strides[5] = {32, 256, 2048, 16384, 131072};
    const cuuint32_t box[6] = {8, 8, 8, 8, 8, 8}, elem[6] = {1, 1, 1, 1, 1, 1};
    EXPECT(cuTensorMapEncodeTiled(&m3, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 6, a, dims, strides, box,
                                  elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                  CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_ERROR_INVALID_VALUE,
           "rank 6");
  }
  // Memory that is not the program's: past the buffer's end, or the host's.
  EXPECT(tiled(&m3, a, rows + 1, cols, pitch) == CUDA_ERROR_INVALID_VALUE,
         "a tensor one row past its buffer");
  void* host = std::aligned_alloc(64, rows * pitch);
  EXPECT(tiled(&m3, host, rows, cols, pitch) == CUDA_ERROR_INVALID_VALUE,
         "a tensor in host memory");
  std::free(host);
  EXPECT(cuTensorMapReplaceAddress(&m1, bytes + pitch) == CUDA_ERROR_INVALID_VALUE,
         "a map moved one row past its buffer's start");

  // im2col over an NHWC tensor of halves: C = 16, W = 8, H = 8, N = 2.
  {
    const cuuint64_t dims[4] = {16, 8, 8, 2};
    const cuuint64_t strides[3] = {32, 256, 2048};
    const int lower[2] = {-1, -1}, upper[2] = {-1, -1};
    const cuuint32_t elem[4] = {1, 1, 1, 1};
    alignas(64) CUtensorMap im;
    CU(cuTensorMapEncodeIm2col(&im, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, a, dims, strides, lower,
                               upper, 16, 64, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                               CU_TENSOR_MAP_SWIZZLE_32B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    const int too_far[2] = {-200, -1};
    EXPECT(cuTensorMapEncodeIm2col(&im, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, a, dims, strides,
                                   too_far, upper, 16, 64, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                   CU_TENSOR_MAP_SWIZZLE_32B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_ERROR_INVALID_VALUE,
           "an im2col corner past [-128, 127] at rank 4");
    EXPECT(cuTensorMapEncodeIm2col(&im, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, a, dims, strides, lower,
                                   upper, 16, 64, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                   CU_TENSOR_MAP_SWIZZLE_32B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_ERROR_INVALID_VALUE,
           "im2col at rank 2");
    CU(cuTensorMapReplaceAddress(&im, b));
  }
  // The wide im2col over C = 16, W = 64, N = 2.
  {
    const cuuint64_t dims[3] = {16, 64, 2};
    const cuuint64_t strides[2] = {32, 2048};
    const cuuint32_t elem[3] = {1, 1, 1};
    alignas(64) CUtensorMap wide;
    CU(cuTensorMapEncodeIm2colWide(
        &wide, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3, b, dims, strides, 0, 0, 16, 64, elem,
        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_IM2COL_WIDE_MODE_W, CU_TENSOR_MAP_SWIZZLE_64B,
        CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    EXPECT(cuTensorMapEncodeIm2colWide(
               &wide, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3, b, dims, strides, 0, 0, 16, 64, elem,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_IM2COL_WIDE_MODE_W,
               CU_TENSOR_MAP_SWIZZLE_32B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_ERROR_INVALID_VALUE,
           "a 32-byte swizzle in a wide im2col");
  }
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  printf("tensor_maps: all checks passed\n");
  return 0;
}
