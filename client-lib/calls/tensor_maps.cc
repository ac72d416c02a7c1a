// Tensor maps (cuTensorMapEncodeTiled, cuTensorMapEncodeIm2col, cuTensorMapEncodeIm2colWide): the
// server's backend encodes them (protocol/wire_formats.h: TensorMapArgs), since the map's layout is
// the driver's own; the map comes back as its 128 bytes, which the app passes to kernels by value.
// cuTensorMapReplaceAddress needs the driver too: the client keeps what each map it was given
// was made from, by the map's bytes, and has the map made again at the new address.

#include <cuda.h>

#include <array>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "client-lib/core/client_call.h"
#include "generated/call_ids.h"
#include "protocol/wire_formats.h"

namespace cuwire::client {
namespace {

using MapBytes = std::array<uint64_t, sizeof(CUtensorMap) / sizeof(uint64_t)>;

// What a map was made from: the call, its fixed arguments and its arrays as they went out.
struct Recipe {
  CallId call;
  formats::TensorMapArgs args;
  std::vector<std::vector<uint8_t>> arrays;
};

// The recipes of the maps made last (at most kMaxRecipes; the oldest go first).
constexpr size_t kMaxRecipes = 65536;
struct Recipes {
  std::mutex mu;
  std::map<MapBytes, Recipe> by_map;  // guarded by mu
  std::deque<MapBytes> order;         // guarded by mu
};
Recipes& recipes() {
  static Recipes* r = new Recipes();  // leaked: used by atexit handlers too
  return *r;
}

MapBytes bytes_of(const CUtensorMap* m) {
  MapBytes b;
  std::memcpy(b.data(), m, sizeof b);
  return b;
}

template <typename T>
std::vector<uint8_t> array_of(const T* p, size_t n) {
  std::vector<uint8_t> v(n * sizeof(T));
  if (n) std::memcpy(v.data(), p, v.size());
  return v;
}

// Sends the recipe; on success *map is the backend's map and the recipe is kept for it.
CUresult encode(const Recipe& r, CUtensorMap* map) {
  ArgWriter w(r.call);
  w.put(r.args);
  for (const auto& a : r.arrays) w.put_array(a.data(), a.size());
  OutReader out;
  if (CUresult e = w.call(&out)) return e;
  CUtensorMap made{};
  out.get_array(&made, 1);
  if (CUresult e = out.finish()) return e;
  std::memcpy(map, &made, sizeof made);
  Recipes& t = recipes();
  std::lock_guard lock(t.mu);
  const MapBytes key = bytes_of(&made);
  if (t.by_map.insert_or_assign(key, r).second) {
    t.order.push_back(key);
    if (t.order.size() > kMaxRecipes) {
      t.by_map.erase(t.order.front());
      t.order.pop_front();
    }
  }
  return CUDA_SUCCESS;
}

// The arguments every kind of map has; false for what no map may have (a misaligned map, no
// arrays, a rank past 5).
bool common(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, uint32_t min_rank,
            void* address, const cuuint64_t* dims, const cuuint64_t* strides,
            const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
            CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob,
            Recipe* r) {
  if (!map || reinterpret_cast<uintptr_t>(map) % 64 != 0) return false;
  if (rank < min_rank || rank > formats::kMaxTensorRank || !dims || !element_strides) return false;
  if (rank > 1 && !strides) return false;
  r->args.global_address = reinterpret_cast<uintptr_t>(address);
  r->args.data_type = type;
  r->args.rank = rank;
  r->args.interleave = interleave;
  r->args.swizzle = swizzle;
  r->args.l2_promotion = l2;
  r->args.oob_fill = oob;
  r->arrays.push_back(array_of(dims, rank));
  r->arrays.push_back(array_of(strides, rank - 1));
  return true;
}

}  // namespace
}  // namespace cuwire::client

using namespace cuwire;
using namespace cuwire::client;

extern "C" {

CUresult CUDAAPI cuTensorMapEncodeTiled(
    CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
    void* globalAddress, const cuuint64_t* globalDim, const cuuint64_t* globalStrides,
    const cuuint32_t* boxDim, const cuuint32_t* elementStrides, CUtensorMapInterleave interleave,
    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
    CUtensorMapFloatOOBfill oobFill) {
  Recipe r{CallId::k_cuTensorMapEncodeTiled, {}, {}};
  if (!boxDim ||
      !common(tensorMap, tensorDataType, tensorRank, 1, globalAddress, globalDim, globalStrides,
              elementStrides, interleave, swizzle, l2Promotion, oobFill, &r)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  r.arrays.push_back(array_of(boxDim, tensorRank));
  r.arrays.push_back(array_of(elementStrides, tensorRank));
  return encode(r, tensorMap);
}

CUresult CUDAAPI cuTensorMapEncodeIm2col(
    CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
    void* globalAddress, const cuuint64_t* globalDim, const cuuint64_t* globalStrides,
    const int* pixelBoxLowerCorner, const int* pixelBoxUpperCorner, cuuint32_t channelsPerPixel,
    cuuint32_t pixelsPerColumn, const cuuint32_t* elementStrides, CUtensorMapInterleave interleave,
    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
    CUtensorMapFloatOOBfill oobFill) {
  Recipe r{CallId::k_cuTensorMapEncodeIm2col, {}, {}};
  if (!pixelBoxLowerCorner || !pixelBoxUpperCorner ||
      !common(tensorMap, tensorDataType, tensorRank, 3, globalAddress, globalDim, globalStrides,
              elementStrides, interleave, swizzle, l2Promotion, oobFill, &r)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  r.args.channels_per_pixel = channelsPerPixel;
  r.args.pixels_per_column = pixelsPerColumn;
  r.arrays.push_back(array_of(pixelBoxLowerCorner, tensorRank - 2));
  r.arrays.push_back(array_of(pixelBoxUpperCorner, tensorRank - 2));
  r.arrays.push_back(array_of(elementStrides, tensorRank));
  return encode(r, tensorMap);
}

CUresult CUDAAPI cuTensorMapEncodeIm2colWide(
    CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
    void* globalAddress, const cuuint64_t* globalDim, const cuuint64_t* globalStrides,
    int pixelBoxLowerCornerWidth, int pixelBoxUpperCornerWidth, cuuint32_t channelsPerPixel,
    cuuint32_t pixelsPerColumn, const cuuint32_t* elementStrides, CUtensorMapInterleave interleave,
    CUtensorMapIm2ColWideMode mode, CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
    CUtensorMapFloatOOBfill oobFill) {
  Recipe r{CallId::k_cuTensorMapEncodeIm2colWide, {}, {}};
  if (!common(tensorMap, tensorDataType, tensorRank, 3, globalAddress, globalDim, globalStrides,
              elementStrides, interleave, swizzle, l2Promotion, oobFill, &r)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  r.args.channels_per_pixel = channelsPerPixel;
  r.args.pixels_per_column = pixelsPerColumn;
  r.args.lower_corner_width = pixelBoxLowerCornerWidth;
  r.args.upper_corner_width = pixelBoxUpperCornerWidth;
  r.args.wide_mode = mode;
  r.arrays.push_back(array_of(elementStrides, tensorRank));
  return encode(r, tensorMap);
}

// The map made again from its recipe at the new address; a map this process was not given
// (or one of the oldest, past the recipes kept) is refused.
CUresult CUDAAPI cuTensorMapReplaceAddress(CUtensorMap* tensorMap, void* globalAddress) {
  if (!tensorMap || reinterpret_cast<uintptr_t>(tensorMap) % 64 != 0)
    return CUDA_ERROR_INVALID_VALUE;
  Recipe r;
  {
    Recipes& t = recipes();
    std::lock_guard lock(t.mu);
    auto it = t.by_map.find(bytes_of(tensorMap));
    if (it == t.by_map.end()) return CUDA_ERROR_INVALID_VALUE;
    r = it->second;
  }
  r.args.global_address = reinterpret_cast<uintptr_t>(globalAddress);
  return encode(r, tensorMap);
}

}  // extern "C"
