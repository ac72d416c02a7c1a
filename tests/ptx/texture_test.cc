// Texture and surface objects: nvcc-compiled kernels (kernels/texture.cu) sample host-side
// texel buffers through the interpreter; results are compared with CPU references written from
// the CUDA Programming Guide's texture-fetching appendix.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>

#include "tests/ptx/harness.h"

namespace cuwire::ptx::testing {
namespace {

// Device memory plus a table of texture and surface objects over host texel buffers.
class TextureMemory : public FakeGlobalMemory {
 public:
  // Tightly packed texels (row_pitch = width * element size) in storage owned by this object.
  template <class T>
  TexelLayout Texels(const std::vector<T>& data, uint32_t width, uint32_t height, uint32_t depth,
                     uint32_t layers, TexelFormat format, uint8_t channels) {
    auto& buf =
        storage_.emplace_back(std::make_unique<std::vector<uint8_t>>(data.size() * sizeof(T)));
    if (!data.empty()) std::memcpy(buf->data(), data.data(), buf->size());
    uint32_t elem = channels * (format == TexelFormat::kU8 || format == TexelFormat::kS8 ? 1u
                                : format == TexelFormat::kU16 || format == TexelFormat::kS16 ||
                                        format == TexelFormat::kF16
                                    ? 2u
                                    : 4u);
    uint64_t row_pitch = uint64_t{width} * elem;
    TexelLayout l{buf->data(), buf->size(), row_pitch, row_pitch * height, width, height, depth,
                  layers,      format,      channels};
    EXPECT_EQ(l.bytes, l.slice_pitch * std::max(depth, layers)) << "texel data size";
    return l;
  }

  uint64_t AddTexture(const TextureObject& t) {
    uint64_t h = next_handle_++;
    textures_[h] = t;
    return h;
  }
  uint64_t AddSurface(const SurfaceObject& s) {
    uint64_t h = next_handle_++;
    surfaces_[h] = s;
    return h;
  }

  const TextureObject* texture(uint64_t h) override {
    auto it = textures_.find(h);
    return it == textures_.end() ? nullptr : &it->second;
  }
  const SurfaceObject* surface(uint64_t h) override {
    auto it = surfaces_.find(h);
    return it == surfaces_.end() ? nullptr : &it->second;
  }

 private:
  std::vector<std::unique_ptr<std::vector<uint8_t>>> storage_;
  std::map<uint64_t, TextureObject> textures_;
  std::map<uint64_t, SurfaceObject> surfaces_;
  uint64_t next_handle_ = 0x7e570001;  // textures and surfaces never share a handle
};

// Launches `kernel` over n threads, 64 per block.
template <class... Args>
LaunchResult LaunchN(const LoadedModule& m, TextureMemory& mem, const std::string& kernel, int n,
                     const Args&... args) {
  uint32_t blocks = static_cast<uint32_t>((n + 63) / 64);
  return Launch(m, mem, kernel, {blocks, 1, 1}, {64, 1, 1}, 0, args...);
}

struct F4 {
  float x, y, z, w;
};

// The GPU's linear-filtering weight: 8 fractional bits (Programming Guide, "Linear Filtering").
float Q8(float frac) { return std::floor(frac * 256.0f + 0.5f) / 256.0f; }

int ClampIndex(int i, int n) { return std::min(std::max(i, 0), n - 1); }

class PtxTexture : public ::testing::Test {
 protected:
  void SetUp() override {
    m_ = LoadKernelFile("texture", mem_);
    ASSERT_TRUE(m_.module);
  }

  // Runs sample_2d over `xy` (x, y pairs).
  std::vector<F4> Sample2D(uint64_t tex, const std::vector<float>& xy) {
    int n = static_cast<int>(xy.size() / 2);
    uint64_t dxy = mem_.Upload(xy), dout = mem_.Alloc(n * sizeof(F4));
    LaunchResult r = LaunchN(m_, mem_, "sample_2d", n, tex, dxy, dout, n);
    EXPECT_EQ(r.error, LaunchError::kNone) << r.message;
    return mem_.Download<F4>(dout, n);
  }

  TextureMemory mem_;
  LoadedModule m_;
};

TEST_F(PtxTexture, Tex1DfetchOnLinearMemoryReadsZeroOutOfRange) {
  std::vector<float> data(10);
  for (int i = 0; i < 10; ++i) data[i] = 1.5f * i - 3.0f;
  TextureObject t;
  t.shape = ResourceShape::kLinear;
  t.texels = mem_.Texels(data, 10, 1, 1, 1, TexelFormat::kF32, 1);
  uint64_t h = mem_.AddTexture(t);
  const int n = 16, first = -3;
  uint64_t out = mem_.Alloc(n * 4);
  LaunchResult r = LaunchN(m_, mem_, "fetch_linear", n, h, first, out, n);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  std::vector<float> got = mem_.Download<float>(out, n);
  for (int i = 0; i < n; ++i) {
    int idx = first + i;
    EXPECT_EQ(got[i], idx >= 0 && idx < 10 ? data[idx] : 0.0f) << "index " << idx;
  }
}

TEST_F(PtxTexture, Point2DClampUnnormalized) {
  const int w = 5, h = 4;
  std::vector<float> data(w * h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) data[y * w + x] = y * 10.0f + x;
  TextureObject t;
  t.texels = mem_.Texels(data, w, h, 1, 1, TexelFormat::kF32, 1);
  // Wrap is only honoured with normalized coordinates; unnormalized lookups clamp.
  t.address[0] = AddressMode::kWrap;
  uint64_t tex = mem_.AddTexture(t);
  std::vector<float> xs = {-1.5f, -0.2f, 0.0f, 0.49f, 0.99f, 1.0f, 2.7f, 4.99f, 5.0f, 7.3f};
  std::vector<float> ys = {-3.0f, 0.5f, 1.2f, 3.99f, 4.0f, 9.0f};
  std::vector<float> xy;
  for (float y : ys)
    for (float x : xs) xy.insert(xy.end(), {x, y});
  std::vector<F4> got = Sample2D(tex, xy);
  for (size_t k = 0; k < got.size(); ++k) {
    float x = xy[2 * k], y = xy[2 * k + 1];
    int i = ClampIndex(static_cast<int>(std::floor(x)), w);
    int j = ClampIndex(static_cast<int>(std::floor(y)), h);
    EXPECT_EQ(got[k].x, data[j * w + i]) << x << "," << y;
    // One-channel float: (x, 0, 0, 1).
    EXPECT_EQ(got[k].y, 0.0f);
    EXPECT_EQ(got[k].z, 0.0f);
    EXPECT_EQ(got[k].w, 1.0f);
  }
}

// Reference bilinear filter of a one-channel float texture with unnormalized coordinates.
float Bilinear(const std::vector<float>& tex, int w, int h, float x, float y, bool border,
               float border_value) {
  float xb = x - 0.5f, yb = y - 0.5f;
  float fx = std::floor(xb), fy = std::floor(yb);
  float a = Q8(xb - fx), b = Q8(yb - fy);
  int i = static_cast<int>(fx), j = static_cast<int>(fy);
  auto at = [&](int ii, int jj) {
    if (border && (ii < 0 || ii >= w || jj < 0 || jj >= h)) return border_value;
    return tex[ClampIndex(jj, h) * w + ClampIndex(ii, w)];
  };
  return (1 - a) * (1 - b) * at(i, j) + a * (1 - b) * at(i + 1, j) + (1 - a) * b * at(i, j + 1) +
         a * b * at(i + 1, j + 1);
}

TEST_F(PtxTexture, Linear2DClampAndBorder) {
  const int w = 4, h = 3;
  std::vector<float> data = {1, 2, 4, 8, -3, 0.5f, 7, 11, 100, -20, 3.25f, 6};
  TextureObject t;
  t.texels = mem_.Texels(data, w, h, 1, 1, TexelFormat::kF32, 1);
  t.linear_filter = true;
  uint64_t clamp = mem_.AddTexture(t);
  t.address[0] = t.address[1] = AddressMode::kBorder;
  t.border_color[0] = -5.0f;
  uint64_t border = mem_.AddTexture(t);
  std::vector<float> xy;
  for (float y = -1.0f; y < 4.5f; y += 0.29f)
    for (float x = -1.0f; x < 5.5f; x += 0.37f) xy.insert(xy.end(), {x, y});
  std::vector<F4> got_clamp = Sample2D(clamp, xy);
  std::vector<F4> got_border = Sample2D(border, xy);
  for (size_t k = 0; k < got_clamp.size(); ++k) {
    float x = xy[2 * k], y = xy[2 * k + 1];
    EXPECT_NEAR(got_clamp[k].x, Bilinear(data, w, h, x, y, false, 0), 1e-4) << x << "," << y;
    EXPECT_NEAR(got_border[k].x, Bilinear(data, w, h, x, y, true, -5.0f), 1e-4) << x << "," << y;
    EXPECT_EQ(got_clamp[k].w, 1.0f);
  }
  // At a texel centre the filter returns the texel exactly.
  std::vector<F4> centre = Sample2D(clamp, {2.5f, 1.5f});
  EXPECT_EQ(centre[0].x, 7.0f);
  // Halfway between two texels: equal weights.
  std::vector<F4> half = Sample2D(clamp, {1.0f, 0.5f});
  EXPECT_EQ(half[0].x, 1.5f);
}

TEST_F(PtxTexture, NormalizedWrapMirrorBorderPoint) {
  const int n = 4;
  std::vector<float> data(n * n);
  for (int i = 0; i < n * n; ++i) data[i] = static_cast<float>(i);
  TextureObject t;
  t.texels = mem_.Texels(data, n, n, 1, 1, TexelFormat::kF32, 1);
  t.normalized_coords = true;
  t.address[0] = AddressMode::kWrap;
  t.address[1] = AddressMode::kMirror;
  uint64_t wrap_mirror = mem_.AddTexture(t);
  t.address[0] = t.address[1] = AddressMode::kBorder;
  t.border_color[0] = 42.0f;
  t.border_color[3] = 0.5f;
  uint64_t border = mem_.AddTexture(t);
  std::vector<float> coords = {-1.375f, -0.25f, 0.0f, 0.125f, 0.5f, 0.875f, 1.0f, 1.25f, 2.625f};
  std::vector<float> xy;
  for (float y : coords)
    for (float x : coords) xy.insert(xy.end(), {x, y});
  std::vector<F4> got = Sample2D(wrap_mirror, xy);
  std::vector<F4> got_border = Sample2D(border, xy);
  // Programming Guide: wrap uses frac(x); mirror uses frac(x) when floor(x) is even, 1 - frac(x)
  // when odd; then point sampling takes floor(x * N), clamped.
  auto wrap = [](float x) { return x - std::floor(x); };
  auto mirror = [](float x) {
    float f = x - std::floor(x);
    return static_cast<int64_t>(std::floor(x)) % 2 == 0 ? f : 1.0f - f;
  };
  for (size_t k = 0; k < got.size(); ++k) {
    float x = xy[2 * k], y = xy[2 * k + 1];
    int i = ClampIndex(static_cast<int>(std::floor(wrap(x) * n)), n);
    int j = ClampIndex(static_cast<int>(std::floor(mirror(y) * n)), n);
    EXPECT_EQ(got[k].x, data[j * n + i]) << x << "," << y;
    bool inside = x >= 0 && x < 1 && y >= 0 && y < 1;
    int bi = static_cast<int>(std::floor(x * n)), bj = static_cast<int>(std::floor(y * n));
    EXPECT_EQ(got_border[k].x, inside ? data[bj * n + bi] : 42.0f) << x << "," << y;
    EXPECT_EQ(got_border[k].w, inside ? 1.0f : 0.5f) << x << "," << y;
  }
}

TEST_F(PtxTexture, Uchar4NormalizedAndElementReads) {
  const int w = 3, h = 2;
  std::vector<uint8_t> data(w * h * 4);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 37 + 5);
  TextureObject t;
  t.texels = mem_.Texels(data, w, h, 1, 1, TexelFormat::kU8, 4);
  uint64_t normalized = mem_.AddTexture(t);
  t.read_as_integer = true;
  uint64_t element = mem_.AddTexture(t);
  t.read_as_integer = false;
  t.linear_filter = true;
  uint64_t filtered = mem_.AddTexture(t);

  std::vector<float> xy;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) xy.insert(xy.end(), {x + 0.5f, y + 0.5f});
  std::vector<F4> got = Sample2D(normalized, xy);
  for (int k = 0; k < w * h; ++k) {
    const uint8_t* px = &data[k * 4];
    EXPECT_EQ(got[k].x, px[0] / 255.0f);
    EXPECT_EQ(got[k].y, px[1] / 255.0f);
    EXPECT_EQ(got[k].z, px[2] / 255.0f);
    EXPECT_EQ(got[k].w, px[3] / 255.0f);
  }

  int n = w * h;
  uint64_t dxy = mem_.Upload(xy), dout = mem_.Alloc(n * 4);
  LaunchResult r = LaunchN(m_, mem_, "sample_2d_uchar4", n, element, dxy, dout, n);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  EXPECT_EQ(mem_.Download<uint8_t>(dout, n * 4), data);

  // Linear filtering blends the normalized values.
  std::vector<F4> mid = Sample2D(filtered, {1.25f, 1.0f});
  float a = Q8(0.75f), b = Q8(0.5f);
  auto texel = [&](int x, int y, int c) { return data[(y * w + x) * 4 + c] / 255.0f; };
  for (int c = 0; c < 4; ++c) {
    float want = (1 - a) * (1 - b) * texel(0, 0, c) + a * (1 - b) * texel(1, 0, c) +
                 (1 - a) * b * texel(0, 1, c) + a * b * texel(1, 1, c);
    EXPECT_NEAR((&mid[0].x)[c], want, 1e-6) << "channel " << c;
  }
}

TEST_F(PtxTexture, ReadModesAndMissingChannels) {
  // Signed 8-bit normalized: v / 127, with -128 clamped to -1.
  std::vector<int8_t> s8 = {-128, -127, -1, 0, 64, 127};
  TextureObject t;
  t.texels = mem_.Texels(s8, 6, 1, 1, 1, TexelFormat::kS8, 1);
  uint64_t ts8 = mem_.AddTexture(t);
  // Two-channel unsigned 16-bit normalized: (x, y, 0, 1).
  std::vector<uint16_t> u16 = {0, 65535, 32768, 1, 1000, 50000};
  t.texels = mem_.Texels(u16, 3, 1, 1, 1, TexelFormat::kU16, 2);
  uint64_t tu16 = mem_.AddTexture(t);
  // Half floats become floats.
  std::vector<uint16_t> f16 = {0x3e00, 0xc000, 0x3555, 0x7bff};  // 1.5, -2, ~0.3333, 65504
  t.texels = mem_.Texels(f16, 4, 1, 1, 1, TexelFormat::kF16, 1);
  uint64_t tf16 = mem_.AddTexture(t);
  // sRGB: the colour channels go through the sRGB curve, alpha does not.
  std::vector<uint8_t> srgb = {0, 10, 128, 200, 255, 64, 32, 100};
  t.texels = mem_.Texels(srgb, 2, 1, 1, 1, TexelFormat::kU8, 4);
  t.srgb = true;
  uint64_t tsrgb = mem_.AddTexture(t);

  std::vector<float> row6 = {0.5f, 0.5f, 1.5f, 0.5f, 2.5f, 0.5f,
                             3.5f, 0.5f, 4.5f, 0.5f, 5.5f, 0.5f};
  std::vector<F4> got = Sample2D(ts8, row6);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(got[i].x, std::max(s8[i] / 127.0f, -1.0f)) << i;
    EXPECT_EQ(got[i].w, 1.0f);
  }
  got = Sample2D(tu16, std::vector<float>(row6.begin(), row6.begin() + 6));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].x, u16[2 * i] / 65535.0f) << i;
    EXPECT_EQ(got[i].y, u16[2 * i + 1] / 65535.0f) << i;
    EXPECT_EQ(got[i].z, 0.0f);
    EXPECT_EQ(got[i].w, 1.0f);
  }
  got = Sample2D(tf16, std::vector<float>(row6.begin(), row6.begin() + 8));
  EXPECT_EQ(got[0].x, 1.5f);
  EXPECT_EQ(got[1].x, -2.0f);
  EXPECT_EQ(got[2].x, 0.333251953125f);
  EXPECT_EQ(got[3].x, 65504.0f);
  got = Sample2D(tsrgb, std::vector<float>(row6.begin(), row6.begin() + 4));
  auto linear = [](float c) {
    return c <= 0.04045f ? c / 12.92f : std::pow((c + 0.055f) / 1.055f, 2.4f);
  };
  for (int i = 0; i < 2; ++i) {
    EXPECT_NEAR(got[i].x, linear(srgb[4 * i] / 255.0f), 1e-6);
    EXPECT_NEAR(got[i].y, linear(srgb[4 * i + 1] / 255.0f), 1e-6);
    EXPECT_NEAR(got[i].z, linear(srgb[4 * i + 2] / 255.0f), 1e-6);
    EXPECT_EQ(got[i].w, srgb[4 * i + 3] / 255.0f);
  }
  EXPECT_NEAR(got[0].z, 0.2158605f, 1e-6);  // sRGB 128 -> linear
}

TEST_F(PtxTexture, LevelAndGradSampleLevelZero) {
  std::vector<float> data = {1, 2, 3, 4, 5, 6};
  TextureObject t;
  t.texels = mem_.Texels(data, 3, 2, 1, 1, TexelFormat::kF32, 1);
  uint64_t tex = mem_.AddTexture(t);
  std::vector<float> xy = {0.5f, 0.5f, 2.5f, 1.5f, 1.9f, 0.1f};
  uint64_t dxy = mem_.Upload(xy), dout = mem_.Alloc(6 * 4);
  LaunchResult r = LaunchN(m_, mem_, "sample_2d_lod_grad", 3, tex, dxy, dout, 3);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  EXPECT_EQ(mem_.Download<float>(dout, 6), (std::vector<float>{1, 1, 6, 6, 2, 2}));
}

// A mipmapped object: tex.level takes the level it names, tex.grad the one its gradients give
// (log2 of 8 level-0 texels: 3), both clamped by the object's max_lod; a level in another
// format fails the launch instead of being read as level 0's.
TEST_F(PtxTexture, MipmapLevelsByLodAndGradient) {
  std::vector<float> l0(8 * 4, 0.0f), l1(4 * 2, 100.0f), l2(2 * 1, 200.0f);
  l2[1] = 201.0f;
  TextureObject t;
  t.normalized_coords = true;
  t.levels = {mem_.Texels(l0, 8, 4, 1, 1, TexelFormat::kF32, 1),
              mem_.Texels(l1, 4, 2, 1, 1, TexelFormat::kF32, 1),
              mem_.Texels(l2, 2, 1, 1, 1, TexelFormat::kF32, 1)};
  t.texels = t.levels[0];
  t.max_lod = 2;
  uint64_t all = mem_.AddTexture(t);
  t.max_lod = 1;
  uint64_t upto1 = mem_.AddTexture(t);
  std::vector<float> xy = {0.75f, 0.5f};
  uint64_t dxy = mem_.Upload(xy), dout = mem_.Alloc(2 * 4);
  LaunchResult r = LaunchN(m_, mem_, "sample_2d_lod_grad", 1, all, dxy, dout, 1);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  EXPECT_EQ(mem_.Download<float>(dout, 2), (std::vector<float>{201, 201}));
  r = LaunchN(m_, mem_, "sample_2d_lod_grad", 1, upto1, dxy, dout, 1);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  EXPECT_EQ(mem_.Download<float>(dout, 2), (std::vector<float>{100, 100}));
  std::vector<uint16_t> half(2, 0);
  t.levels[2] = mem_.Texels(half, 2, 1, 1, 1, TexelFormat::kF16, 1);
  uint64_t mixed = mem_.AddTexture(t);
  r = LaunchN(m_, mem_, "sample_2d_lod_grad", 1, mixed, dxy, dout, 1);
  EXPECT_EQ(r.error, LaunchError::kIllegalAddress);
  EXPECT_NE(r.message.find("mipmap level 2 in another format"), std::string::npos) << r.message;
}

TEST_F(PtxTexture, Point1DNormalized) {
  std::vector<float> data = {10, 20, 30, 40, 50, 60, 70, 80};
  TextureObject t;
  t.texels = mem_.Texels(data, 8, 1, 1, 1, TexelFormat::kF32, 1);
  t.shape = ResourceShape::k1D;
  t.normalized_coords = true;
  uint64_t tex = mem_.AddTexture(t);
  std::vector<float> x = {0.0f, 0.124f, 0.125f, 0.5f, 0.99f, 1.0f, -0.5f};
  uint64_t dx = mem_.Upload(x), dout = mem_.Alloc(x.size() * 4);
  int n = static_cast<int>(x.size());
  LaunchResult r = LaunchN(m_, mem_, "sample_1d", n, tex, dx, dout, n);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  EXPECT_EQ(mem_.Download<float>(dout, n), (std::vector<float>{10, 10, 20, 50, 80, 80, 10}));
}

TEST_F(PtxTexture, Texture3DPointAndTrilinear) {
  const int w = 4, h = 3, d = 2;
  std::vector<float> data(w * h * d);
  for (int z = 0; z < d; ++z)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) data[(z * h + y) * w + x] = z * 100.0f + y * 10.0f + x * x;
  TextureObject t;
  t.shape = ResourceShape::k3D;
  t.texels = mem_.Texels(data, w, h, d, 1, TexelFormat::kF32, 1);
  uint64_t point = mem_.AddTexture(t);
  t.linear_filter = true;
  uint64_t linear = mem_.AddTexture(t);
  std::vector<F4> xyz;
  for (float z = -0.5f; z < 2.8f; z += 0.45f)
    for (float y = 0.2f; y < 3.5f; y += 0.7f)
      for (float x = -0.3f; x < 4.6f; x += 0.55f) xyz.push_back({x, y, z, 0});
  int n = static_cast<int>(xyz.size());
  uint64_t dxyz = mem_.Upload(xyz), dpoint = mem_.Alloc(n * 4), dlin = mem_.Alloc(n * 4);
  ASSERT_EQ(LaunchN(m_, mem_, "sample_3d", n, point, dxyz, dpoint, n).error, LaunchError::kNone);
  ASSERT_EQ(LaunchN(m_, mem_, "sample_3d", n, linear, dxyz, dlin, n).error, LaunchError::kNone);
  std::vector<float> got_point = mem_.Download<float>(dpoint, n);
  std::vector<float> got_lin = mem_.Download<float>(dlin, n);
  auto at = [&](int x, int y, int z) {
    return data[(ClampIndex(z, d) * h + ClampIndex(y, h)) * w + ClampIndex(x, w)];
  };
  for (int k = 0; k < n; ++k) {
    F4 c = xyz[k];
    EXPECT_EQ(got_point[k], at(static_cast<int>(std::floor(c.x)), static_cast<int>(std::floor(c.y)),
                               static_cast<int>(std::floor(c.z))));
    float xb = c.x - 0.5f, yb = c.y - 0.5f, zb = c.z - 0.5f;
    int i = static_cast<int>(std::floor(xb)), j = static_cast<int>(std::floor(yb)),
        l = static_cast<int>(std::floor(zb));
    float a = Q8(xb - std::floor(xb)), b = Q8(yb - std::floor(yb)), g = Q8(zb - std::floor(zb));
    float want = 0;
    for (int dz = 0; dz < 2; ++dz)
      for (int dy = 0; dy < 2; ++dy)
        for (int dx = 0; dx < 2; ++dx)
          want +=
              (dx ? a : 1 - a) * (dy ? b : 1 - b) * (dz ? g : 1 - g) * at(i + dx, j + dy, l + dz);
    EXPECT_NEAR(got_lin[k], want, 1e-3) << c.x << "," << c.y << "," << c.z;
  }
}

TEST_F(PtxTexture, LayeredTextures) {
  const int w = 4, h = 2, layers = 3;
  std::vector<float> data(w * h * layers);
  for (int l = 0; l < layers; ++l)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) data[(l * h + y) * w + x] = l * 100.0f + y * 10.0f + x;
  TextureObject t;
  t.shape = ResourceShape::k2DLayered;
  t.texels = mem_.Texels(data, w, h, 1, layers, TexelFormat::kF32, 1);
  uint64_t tex2d = mem_.AddTexture(t);
  // Layer indices past the end clamp to the last layer.
  std::vector<F4> xyl = {{0.5f, 0.5f, 0, 0},
                         {3.5f, 1.5f, 0, 1},
                         {1.2f, 0.7f, 0, 2},
                         {2.9f, 1.1f, 0, 7},
                         {-4.0f, 9.0f, 0, 1}};
  int n = static_cast<int>(xyl.size());
  uint64_t dxyl = mem_.Upload(xyl), dout = mem_.Alloc(n * 4);
  LaunchResult r = LaunchN(m_, mem_, "sample_2d_layered", n, tex2d, dxyl, dout, n);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  EXPECT_EQ(mem_.Download<float>(dout, n), (std::vector<float>{0, 113, 201, 212, 110}));

  // 1D layered: one row per layer.
  t.shape = ResourceShape::k1DLayered;
  t.texels = mem_.Texels(data, w * h, 1, 1, layers, TexelFormat::kF32, 1);
  uint64_t tex1d = mem_.AddTexture(t);
  std::vector<float> x = {0.5f, 7.5f, 5.2f, 100.0f};
  std::vector<int> layer = {0, 1, 2, 2};
  uint64_t dx = mem_.Upload(x), dl = mem_.Upload(layer), dout1 = mem_.Alloc(4 * 4);
  r = LaunchN(m_, mem_, "sample_1d_layered", 4, tex1d, dx, dl, dout1, 4);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  EXPECT_EQ(mem_.Download<float>(dout1, 4), (std::vector<float>{0, 113, 211, 213}));
}

// Programming Guide, "Cubemap Textures": face and (s, t) for direction (x, y, z).
void CubeReference(float x, float y, float z, int* face, float* u, float* v) {
  float ax = std::fabs(x), ay = std::fabs(y), az = std::fabs(z), s, t, m;
  if (ax > ay && ax > az) {
    *face = x > 0 ? 0 : 1;
    m = ax;
    s = x > 0 ? -z : z;
    t = -y;
  } else if (ay > az) {
    *face = y > 0 ? 2 : 3;
    m = ay;
    s = x;
    t = y > 0 ? z : -z;
  } else {
    *face = z > 0 ? 4 : 5;
    m = az;
    s = z > 0 ? x : -x;
    t = -y;
  }
  *u = (s / m + 1) / 2;
  *v = (t / m + 1) / 2;
}

TEST_F(PtxTexture, CubeMapSelectsFaces) {
  const int w = 4;
  std::vector<float> data(w * w * 6);
  for (int f = 0; f < 6; ++f)
    for (int y = 0; y < w; ++y)
      for (int x = 0; x < w; ++x) data[(f * w + y) * w + x] = f * 100.0f + y * 10.0f + x;
  TextureObject t;
  t.shape = ResourceShape::kCube;
  t.normalized_coords = true;
  t.texels = mem_.Texels(data, w, w, 1, 6, TexelFormat::kF32, 1);
  uint64_t tex = mem_.AddTexture(t);
  std::vector<F4> dirs = {{1, -0.25f, 0.5f, 0}, {-1, 0.3f, -0.6f, 0}, {0.2f, 1, 0.7f, 0},
                          {-0.4f, -1, 0.1f, 0}, {0.6f, -0.3f, 1, 0},  {-0.1f, 0.8f, -1, 0},
                          {2, 0.1f, 0.1f, 0},   {-0.9f, 3, -2.9f, 0}, {0.05f, -0.2f, -7, 0}};
  int n = static_cast<int>(dirs.size());
  uint64_t dd = mem_.Upload(dirs), dout = mem_.Alloc(n * 4);
  LaunchResult r = LaunchN(m_, mem_, "sample_cube", n, tex, dd, dout, n);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  std::vector<float> got = mem_.Download<float>(dout, n);
  std::set<int> faces;
  for (int k = 0; k < n; ++k) {
    int face;
    float u, v;
    CubeReference(dirs[k].x, dirs[k].y, dirs[k].z, &face, &u, &v);
    faces.insert(face);
    int i = ClampIndex(static_cast<int>(std::floor(u * w)), w);
    int j = ClampIndex(static_cast<int>(std::floor(v * w)), w);
    EXPECT_EQ(got[k], data[(face * w + j) * w + i]) << "direction " << k;
  }
  EXPECT_EQ(faces.size(), 6u);
  EXPECT_EQ(got[0], 21.0f);  // +x face, s = -z = -0.5, t = -y = 0.25: texel (1, 2)
}

TEST_F(PtxTexture, Tld4GathersBilinearFootprint) {
  const int w = 4, h = 3;
  std::vector<float> data(w * h);
  for (int i = 0; i < w * h; ++i) data[i] = i * 1.5f + 1;
  TextureObject t;
  t.texels = mem_.Texels(data, w, h, 1, 1, TexelFormat::kF32, 1);
  uint64_t tex = mem_.AddTexture(t);
  std::vector<float> xy = {1.0f, 1.0f, 2.3f, 1.8f, 0.2f, 0.1f, 3.9f, 2.9f, 2.5f, 2.5f};
  int n = static_cast<int>(xy.size() / 2);
  uint64_t dxy = mem_.Upload(xy), dout = mem_.Alloc(n * 2 * sizeof(F4));
  LaunchResult r = LaunchN(m_, mem_, "gather_2d", n, tex, dxy, dout, n);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  std::vector<F4> got = mem_.Download<F4>(dout, n * 2);
  for (int k = 0; k < n; ++k) {
    int i = static_cast<int>(std::floor(xy[2 * k] - 0.5f));
    int j = static_cast<int>(std::floor(xy[2 * k + 1] - 0.5f));
    auto at = [&](int x, int y) { return data[ClampIndex(y, h) * w + ClampIndex(x, w)]; };
    // Counter-clockwise from the lower left: (i, j+1), (i+1, j+1), (i+1, j), (i, j).
    F4 r0 = got[2 * k];
    EXPECT_EQ(r0.x, at(i, j + 1)) << k;
    EXPECT_EQ(r0.y, at(i + 1, j + 1)) << k;
    EXPECT_EQ(r0.z, at(i + 1, j)) << k;
    EXPECT_EQ(r0.w, at(i, j)) << k;
    F4 alpha = got[2 * k + 1];  // a one-channel texture's alpha reads 1
    EXPECT_EQ(alpha.x, 1.0f);
    EXPECT_EQ(alpha.w, 1.0f);
  }

  // Integer gather of the second channel of an int4 texture.
  std::vector<int32_t> ints(w * h * 4);
  for (int i = 0; i < w * h; ++i)
    for (int c = 0; c < 4; ++c) ints[i * 4 + c] = (c == 1 ? -1 : 1) * (i * 10 + c);
  t.texels = mem_.Texels(ints, w, h, 1, 1, TexelFormat::kS32, 4);
  uint64_t itex = mem_.AddTexture(t);
  uint64_t iout = mem_.Alloc(16);
  r = LaunchN(m_, mem_, "gather_2d_int", 1, itex, mem_.Upload(std::vector<float>{2.0f, 1.0f}), iout,
              1);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  // x = 2.0, y = 1.0: i = 1, j = 0.
  EXPECT_EQ(mem_.Download<int32_t>(iout, 4), (std::vector<int32_t>{-51, -61, -21, -11}));
}

TEST_F(PtxTexture, TxqAndSuqReportObjectAttributes) {
  std::vector<uint8_t> texels(7 * 5 * 4);
  TextureObject t;
  t.texels = mem_.Texels(texels, 7, 5, 1, 1, TexelFormat::kU8, 4);
  t.normalized_coords = true;
  t.linear_filter = true;
  t.address[0] = AddressMode::kWrap;
  t.address[1] = AddressMode::kBorder;
  uint64_t tex = mem_.AddTexture(t);
  std::vector<float> surf(6 * 3 * 4);
  SurfaceObject s;
  s.shape = ResourceShape::k2DLayered;
  s.texels = mem_.Texels(surf, 6, 3, 1, 4, TexelFormat::kF32, 1);
  uint64_t sh = mem_.AddSurface(s);
  uint64_t out = mem_.Alloc(18 * 4);
  LaunchResult r = Launch(m_, mem_, "query", {1, 1, 1}, {1, 1, 1}, 0, tex, sh, out);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  std::vector<int32_t> want = {
      7, 5, 0,              // width, height, depth (a 2D texture has none)
      1, 4,                 // CU_AD_FORMAT_UNSIGNED_INT8, 4 channels
      1, 1,                 // normalized coordinates, linear filter
      0, 4,                 // wrap, clamp_to_border
      0, 0,                 // not an array, no mipmaps
      3,                    // txq.level.width at level 1: 7 >> 1
      6, 3, 0, 4, 0x20, 0,  // suq: width, height, depth, array_size, FLOAT, block layout
  };
  EXPECT_EQ(mem_.Download<int32_t>(out, 18), want);
}

TEST_F(PtxTexture, Surface2DWriteThenRead) {
  const int w = 5, h = 3;
  std::vector<float> in(w * h);
  for (int i = 0; i < w * h; ++i) in[i] = i * 0.75f - 2;
  // Rows 32 bytes apart: more than the 20 bytes of texels.
  std::vector<float> backing(8 * h, -1.0f);
  SurfaceObject s;
  s.texels = mem_.Texels(backing, 8, h, 1, 1, TexelFormat::kF32, 1);
  s.texels.width = w;
  uint64_t sh = mem_.AddSurface(s);
  uint64_t din = mem_.Upload(in), dout = mem_.Alloc(w * h * 4);
  LaunchResult r = Launch(m_, mem_, "surf_write_2d", {1, h, 1}, {8, 1, 1}, 0, sh, din, w, h);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  const float* texels = reinterpret_cast<const float*>(s.texels.data);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < 8; ++x)
      EXPECT_EQ(texels[y * 8 + x], x < w ? in[y * w + x] * 2 : -1.0f) << x << "," << y;
  r = Launch(m_, mem_, "surf_read_2d", {1, h, 1}, {8, 1, 1}, 0, sh, dout, w, h);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  std::vector<float> got = mem_.Download<float>(dout, w * h);
  for (int i = 0; i < w * h; ++i) EXPECT_EQ(got[i], in[i] * 2) << i;
}

TEST_F(PtxTexture, SurfaceBoundaryModes) {
  const int w = 5, h = 3;
  std::vector<float> data(w * h);
  for (int i = 0; i < w * h; ++i) data[i] = static_cast<float>(i + 1);
  SurfaceObject s;
  s.texels = mem_.Texels(data, w, h, 1, 1, TexelFormat::kF32, 1);
  uint64_t sh = mem_.AddSurface(s);
  uint64_t out = mem_.Alloc(8);
  struct Case {
    int x, y;  // x in bytes
    float zero, clamp;
  };
  const Case cases[] = {
      {8, 1, 8, 8},     // inside: element (2, 1)
      {-4, 1, 0, 6},    // left of the row: clamps to (0, 1)
      {20, 2, 0, 15},   // one past the row: clamps to (4, 2)
      {4, 7, 0, 12},    // below the last row: clamps to (1, 2)
      {400, -3, 0, 5},  // clamps to (4, 0)
  };
  for (const Case& c : cases) {
    LaunchResult r =
        Launch(m_, mem_, "surf_read_modes", {1, 1, 1}, {1, 1, 1}, 0, sh, c.x, c.y, out);
    ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
    EXPECT_EQ(mem_.Download<float>(out, 2), (std::vector<float>{c.zero, c.clamp}))
        << c.x << "," << c.y;
  }
  // .trap: the launch fails, naming the surface.
  LaunchResult r = Launch(m_, mem_, "surf_read_trap", {1, 1, 1}, {1, 1, 1}, 0, sh, 20, 0, out);
  EXPECT_EQ(r.error, LaunchError::kIllegalAddress);
  EXPECT_NE(r.message.find("out-of-range surface read"), std::string::npos) << r.message;
  r = Launch(m_, mem_, "surf_read_trap", {1, 1, 1}, {1, 1, 1}, 0, sh, 0, 3, out);
  EXPECT_EQ(r.error, LaunchError::kIllegalAddress);
  r = Launch(m_, mem_, "surf_read_trap", {1, 1, 1}, {1, 1, 1}, 0, sh, 16, 2, out);
  EXPECT_EQ(r.error, LaunchError::kNone) << r.message;
  // x is in bytes and must be aligned to the access size.
  r = Launch(m_, mem_, "surf_read_trap", {1, 1, 1}, {1, 1, 1}, 0, sh, 2, 0, out);
  EXPECT_EQ(r.error, LaunchError::kMisalignedAddress) << r.message;

  // Writes: .zero drops an out-of-range store, .clamp stores to the nearest element.
  r = Launch(m_, mem_, "surf_write_modes", {1, 1, 1}, {1, 1, 1}, 0, sh, 24, 1, 50.0f);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  const float* texels = reinterpret_cast<const float*>(s.texels.data);
  std::vector<float> now(texels, texels + w * h);
  std::vector<float> want = data;
  want[1 * w + 4] = 51.0f;
  EXPECT_EQ(now, want);
}

TEST_F(PtxTexture, SurfaceVectorFormats) {
  // 1D uchar4: sust/suld .v4.b8.
  const int n = 6;
  SurfaceObject s1;
  s1.shape = ResourceShape::k1D;
  s1.texels = mem_.Texels(std::vector<uint8_t>(n * 4), n, 1, 1, 1, TexelFormat::kU8, 4);
  uint64_t h1 = mem_.AddSurface(s1);
  uint64_t out1 = mem_.Alloc(n * 4);
  LaunchResult r = Launch(m_, mem_, "surf_1d_uchar4", {1, 1, 1}, {n, 1, 1}, 0, h1, out1, n);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  std::vector<uint8_t> got1 = mem_.Download<uint8_t>(out1, n * 4);
  for (int i = 0; i < n; ++i) {
    int j = n - 1 - i;
    EXPECT_EQ(s1.texels.data[i * 4 + 3], 255 - i);
    EXPECT_EQ(got1[i * 4], j);
    EXPECT_EQ(got1[i * 4 + 1], j + 1);
    EXPECT_EQ(got1[i * 4 + 2], j + 2);
    EXPECT_EQ(got1[i * 4 + 3], 255 - j);
  }

  // 3D float4: sust/suld .v4.b32, x in bytes = 16 * element.
  const int w = 3, h = 2, d = 2, n3 = w * h * d;
  SurfaceObject s3;
  s3.shape = ResourceShape::k3D;
  s3.texels = mem_.Texels(std::vector<float>(n3 * 4), w, h, d, 1, TexelFormat::kF32, 4);
  uint64_t h3 = mem_.AddSurface(s3);
  uint64_t out3 = mem_.Alloc(n3 * 16);
  r = Launch(m_, mem_, "surf_3d_float4", {1, 1, 1}, {n3, 1, 1}, 0, h3, out3, w, h, n3);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  std::vector<F4> got3 = mem_.Download<F4>(out3, n3);
  const F4* texels3 = reinterpret_cast<const F4*>(s3.texels.data);
  for (int i = 0; i < n3; ++i) {
    F4 want = {static_cast<float>(i % w), static_cast<float>(i / w % h),
               static_cast<float>(i / (w * h)), static_cast<float>(i)};
    EXPECT_EQ(std::memcmp(&got3[i], &want, 16), 0) << i;
    EXPECT_EQ(std::memcmp(&texels3[i], &want, 16), 0) << i;
  }

  // 2D layered short2: sust/suld .a2d.v2.b16.
  const int layers = 3, n2 = w * h * layers;
  SurfaceObject s2;
  s2.shape = ResourceShape::k2DLayered;
  s2.texels = mem_.Texels(std::vector<int16_t>(n2 * 2), w, h, 1, layers, TexelFormat::kS16, 2);
  uint64_t h2 = mem_.AddSurface(s2);
  uint64_t out2 = mem_.Alloc(n2 * 4);
  r = Launch(m_, mem_, "surf_2d_layered_short2", {1, 1, 1}, {n2, 1, 1}, 0, h2, out2, w, h, n2);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  std::vector<int16_t> got2 = mem_.Download<int16_t>(out2, n2 * 2);
  const int16_t* texels2 = reinterpret_cast<const int16_t*>(s2.texels.data);
  for (int i = 0; i < n2; ++i) {
    EXPECT_EQ(got2[2 * i], i);
    EXPECT_EQ(got2[2 * i + 1], -i);
    EXPECT_EQ(texels2[2 * i], i);  // element order: layer-major, then rows
  }
}

TEST_F(PtxTexture, UnknownHandleFailsWithIllegalAddress) {
  std::vector<float> data = {1, 2, 3, 4};
  SurfaceObject s;
  s.texels = mem_.Texels(data, 2, 2, 1, 1, TexelFormat::kF32, 1);
  uint64_t surface = mem_.AddSurface(s);
  uint64_t dxy = mem_.Upload(std::vector<float>{0.5f, 0.5f}), dout = mem_.Alloc(16);
  uint64_t bogus = 0xbad0c0de;
  LaunchResult r = LaunchN(m_, mem_, "sample_2d", 1, bogus, dxy, dout, 1);
  EXPECT_EQ(r.error, LaunchError::kIllegalAddress);
  EXPECT_NE(r.message.find("0xbad0c0de"), std::string::npos) << r.message;
  // A surface handle does not name a texture, nor the reverse.
  r = LaunchN(m_, mem_, "sample_2d", 1, surface, dxy, dout, 1);
  EXPECT_EQ(r.error, LaunchError::kIllegalAddress);
  EXPECT_NE(r.message.find("texture"), std::string::npos) << r.message;
  r = Launch(m_, mem_, "surf_read_trap", {1, 1, 1}, {1, 1, 1}, 0, bogus, 0, 0, dout);
  EXPECT_EQ(r.error, LaunchError::kIllegalAddress);
  EXPECT_NE(r.message.find("0xbad0c0de"), std::string::npos) << r.message;
}

TEST_F(PtxTexture, LayoutLargerThanItsMemoryNeverReadsPastIt) {
  // The layout claims 4x4 floats but only 3 rows of memory back it.
  std::vector<float> data(16, 7.0f);
  TextureObject t;
  t.texels = mem_.Texels(data, 4, 4, 1, 1, TexelFormat::kF32, 1);
  t.texels.bytes = 4 * 4 * 3;
  uint64_t tex = mem_.AddTexture(t);
  std::vector<F4> ok = Sample2D(tex, {0.5f, 2.5f});
  EXPECT_EQ(ok[0].x, 7.0f);
  uint64_t dxy = mem_.Upload(std::vector<float>{0.5f, 3.5f}), dout = mem_.Alloc(16);
  LaunchResult r = LaunchN(m_, mem_, "sample_2d", 1, tex, dxy, dout, 1);
  EXPECT_EQ(r.error, LaunchError::kIllegalAddress);
  EXPECT_NE(r.message.find("outside its memory"), std::string::npos) << r.message;

  SurfaceObject s;
  s.texels = t.texels;
  uint64_t sh = mem_.AddSurface(s);
  r = Launch(m_, mem_, "surf_read_trap", {1, 1, 1}, {1, 1, 1}, 0, sh, 12, 3, dout);
  EXPECT_EQ(r.error, LaunchError::kIllegalAddress);
  EXPECT_NE(r.message.find("outside its memory"), std::string::npos) << r.message;

  // Layouts the sampler cannot address at all are refused before any access.
  t.texels.channels = 3;
  uint64_t three = mem_.AddTexture(t);
  r = LaunchN(m_, mem_, "sample_2d", 1, three, dxy, dout, 1);
  EXPECT_EQ(r.error, LaunchError::kIllegalAddress);
  EXPECT_NE(r.message.find("channels"), std::string::npos) << r.message;
}

// Forms nvcc does not emit from the CUDA headers but PTX allows: a .texref kernel parameter as
// the handle, and the residency predicate of sparse lookups.
TEST(PtxTextureHandwritten, TexrefParamAndResidencyPredicate) {
  std::string ptx = std::string(kHeader) +
                    Entry("k", ".param .texref t, .param .u64 out",
                          {".pred %p<2>", ".f32 %f<8>", ".b32 %r<4>", ".b64 %rd<4>"}, R"(
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
  mov.f32 %f5, 0f3FC00000;
  mov.f32 %f6, 0f3F000000;
  tex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}|%p1, [t, {%f5, %f6}];
  st.global.f32 [%rd1], %f1;
  selp.u32 %r1, 1, 0, %p1;
  st.global.u32 [%rd1+4], %r1;
  txq.width.b32 %r2, [t];
  st.global.u32 [%rd1+8], %r2;
  ret;
)") + Entry("f16", ".param .u64 t", {".f16 %h<4>", ".f32 %f<4>", ".b64 %rd<2>"}, R"(
  ld.param.u64 %rd1, [t];
  tex.2d.v4.f16.f32 {%h0, %h1, %h2, %h3}, [%rd1, {%f1, %f2}];
  ret;
)");
  TextureMemory mem;
  LoadedModule m = LoadPtx(ptx, mem);
  ASSERT_TRUE(m.module);
  std::vector<float> data = {3, 9, 27, 81};
  TextureObject t;
  t.texels = mem.Texels(data, 2, 2, 1, 1, TexelFormat::kF32, 1);
  uint64_t tex = mem.AddTexture(t);
  uint64_t out = mem.Alloc(12);
  LaunchResult r = Launch(m, mem, "k", {1, 1, 1}, {1, 1, 1}, 0, tex, out);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  std::vector<uint32_t> got = mem.Download<uint32_t>(out, 3);
  float x;
  std::memcpy(&x, &got[0], 4);
  EXPECT_EQ(x, 9.0f);  // texel (1, 0)
  EXPECT_EQ(got[1], 1u);
  EXPECT_EQ(got[2], 2u);
  // Half-precision results are not implemented: only executing them fails.
  r = Launch(m, mem, "f16", {1, 1, 1}, {1, 1, 1}, 0, tex);
  EXPECT_EQ(r.error, LaunchError::kUnsupportedOpcode);
  EXPECT_NE(r.message.find("tex.2d.v4.f16.f32"), std::string::npos) << r.message;
}

}  // namespace
}  // namespace cuwire::ptx::testing
