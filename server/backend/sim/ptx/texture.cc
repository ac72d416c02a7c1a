// Texture fetching as the CUDA Programming Guide's texture-fetching appendix describes it, and
// unformatted surface access as the PTX ISA describes suld.b/sust.b.

#include "server/backend/sim/ptx/texture.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "server/backend/sim/ptx/float16.h"

namespace cuwire::ptx {
namespace {

uint32_t FormatBytes(TexelFormat f) {
  switch (f) {
    case TexelFormat::kU8:
    case TexelFormat::kS8:
      return 1;
    case TexelFormat::kU16:
    case TexelFormat::kS16:
    case TexelFormat::kF16:
      return 2;
    case TexelFormat::kU32:
    case TexelFormat::kS32:
    case TexelFormat::kF32:
      return 4;
  }
  return 4;
}

// CUarray_format's values, which is what txq/suq .channel_data_type report.
uint32_t FormatCode(TexelFormat f) {
  switch (f) {
    case TexelFormat::kU8:
      return 0x01;
    case TexelFormat::kU16:
      return 0x02;
    case TexelFormat::kU32:
      return 0x03;
    case TexelFormat::kS8:
      return 0x08;
    case TexelFormat::kS16:
      return 0x09;
    case TexelFormat::kS32:
      return 0x0a;
    case TexelFormat::kF16:
      return 0x10;
    case TexelFormat::kF32:
      return 0x20;
  }
  return 0;
}

// PTX's txq .addr_mode enumeration: wrap, mirror, clamp_ogl, clamp_to_edge, clamp_to_border.
uint32_t AddressCode(AddressMode m) {
  switch (m) {
    case AddressMode::kWrap:
      return 0;
    case AddressMode::kMirror:
      return 1;
    case AddressMode::kClamp:
      return 3;
    case AddressMode::kBorder:
      return 4;
  }
  return 3;
}

// Axes addressed by coordinates; layers and cube faces are selected, not addressed.
int Axes(ResourceShape s) {
  switch (s) {
    case ResourceShape::k1D:
    case ResourceShape::k1DLayered:
    case ResourceShape::kLinear:
      return 1;
    case ResourceShape::k3D:
      return 3;
    default:
      return 2;
  }
}
bool IsLayered(ResourceShape s) {
  return s == ResourceShape::k1DLayered || s == ResourceShape::k2DLayered ||
         s == ResourceShape::kCubeLayered;
}
bool IsCube(ResourceShape s) {
  return s == ResourceShape::kCube || s == ResourceShape::kCubeLayered;
}

uint64_t ElemBytes(const TexelLayout& l) { return uint64_t{FormatBytes(l.format)} * l.channels; }

// Host pointer to `size` bytes at byte `x_bytes` of row `y` of `plane` (depth slice, layer or
// face), or nullptr when that range is not inside [data, data + bytes).
uint8_t* ElementAt(const TexelLayout& l, uint64_t x_bytes, uint64_t y, uint64_t plane,
                   uint64_t size) {
  uint64_t a, b, off;
  if (__builtin_mul_overflow(plane, l.slice_pitch, &a) ||
      __builtin_mul_overflow(y, l.row_pitch, &b) || __builtin_add_overflow(a, b, &off) ||
      __builtin_add_overflow(off, x_bytes, &off) || off > l.bytes || size > l.bytes - off ||
      !l.data)
    return nullptr;
  return l.data + off;
}

// Float to a texel index without overflow: NaN reads as 0, huge values saturate well outside
// any extent (extents are 32-bit).
int64_t FloorIndex(float v) {
  if (!(v == v)) return 0;
  v = std::clamp(v, -4294967296.0f, 4294967296.0f);
  return static_cast<int64_t>(std::floor(v));
}

// Linear-filtering weight: the GPU keeps the fraction in 9-bit fixed point with 8 fractional
// bits, so 1.0 is representable and the weight is a multiple of 1/256.
float Weight(float frac) {
  if (!std::isfinite(frac)) return 0.0f;
  return std::floor(frac * 256.0f + 0.5f) / 256.0f;
}

// Brings index i on an axis of n texels into range under `m`; -1 selects the border.
int64_t Address(int64_t i, uint32_t n, AddressMode m) {
  int64_t size = n;
  switch (m) {
    case AddressMode::kWrap: {
      int64_t r = i % size;
      return r < 0 ? r + size : r;
    }
    case AddressMode::kMirror: {
      int64_t period = 2 * size;
      int64_t r = i % period;
      if (r < 0) r += period;
      return r >= size ? period - 1 - r : r;
    }
    case AddressMode::kClamp:
      return std::clamp<int64_t>(i, 0, size - 1);
    case AddressMode::kBorder:
      return (i < 0 || i >= size) ? -1 : i;
  }
  return std::clamp<int64_t>(i, 0, size - 1);
}

// A texel as the read mode returns it: floats for float reads, 32-bit integers otherwise.
// Channels the format lacks read (0, 0, 0, 1).
struct Texel {
  float f[4] = {0, 0, 0, 1};
  uint32_t u[4] = {0, 0, 0, 1};
};

// Float reads: float formats always; 8/16-bit integer formats unless read_as_integer
// (normalized to [0, 1] / [-1, 1]). 32-bit integer formats always read as integers (CUDA
// refuses cudaReadModeNormalizedFloat for them).
bool ReturnsFloat(const TextureObject& t) {
  switch (t.texels.format) {
    case TexelFormat::kF16:
    case TexelFormat::kF32:
      return true;
    case TexelFormat::kU32:
    case TexelFormat::kS32:
      return false;
    default:
      return !t.read_as_integer;
  }
}

float SrgbToLinear(float c) {
  return c <= 0.04045f ? c / 12.92f : std::pow((c + 0.055f) / 1.055f, 2.4f);
}

Texel Decode(const TextureObject& t, const uint8_t* p) {
  Texel x;
  const TexelLayout& l = t.texels;
  uint32_t size = FormatBytes(l.format);
  for (int c = 0; c < l.channels && c < 4; ++c) {
    const uint8_t* q = p + c * size;
    switch (l.format) {
      case TexelFormat::kU8:
        x.u[c] = q[0];
        x.f[c] = q[0] / 255.0f;
        break;
      case TexelFormat::kS8: {
        int8_t v;
        std::memcpy(&v, q, 1);
        x.u[c] = static_cast<uint32_t>(static_cast<int32_t>(v));
        x.f[c] = std::max(v / 127.0f, -1.0f);
        break;
      }
      case TexelFormat::kU16: {
        uint16_t v;
        std::memcpy(&v, q, 2);
        x.u[c] = v;
        x.f[c] = v / 65535.0f;
        break;
      }
      case TexelFormat::kS16: {
        int16_t v;
        std::memcpy(&v, q, 2);
        x.u[c] = static_cast<uint32_t>(static_cast<int32_t>(v));
        x.f[c] = std::max(v / 32767.0f, -1.0f);
        break;
      }
      case TexelFormat::kU32:
      case TexelFormat::kS32: {
        uint32_t v;
        std::memcpy(&v, q, 4);
        x.u[c] = v;
        x.f[c] = BitsFloat(v);
        break;
      }
      case TexelFormat::kF16: {
        uint16_t v;
        std::memcpy(&v, q, 2);
        x.f[c] = HalfToFloat(v);
        x.u[c] = FloatBits(x.f[c]);
        break;
      }
      case TexelFormat::kF32: {
        uint32_t v;
        std::memcpy(&v, q, 4);
        x.u[c] = v;
        x.f[c] = BitsFloat(v);
        break;
      }
    }
  }
  // sRGB applies to the colour channels of 8-bit unsigned normalized data, not to alpha.
  if (t.srgb && l.format == TexelFormat::kU8 && ReturnsFloat(t))
    for (int c = 0; c < l.channels && c < 3; ++c) x.f[c] = SrgbToLinear(x.f[c]);
  return x;
}

int32_t SaturateToInt(float v) {
  if (!(v == v)) return 0;
  if (v >= 2147483647.0f) return 2147483647;
  if (v <= -2147483648.0f) return -2147483647 - 1;
  return static_cast<int32_t>(v);
}

// What one lookup addresses, in texel space.
struct Footprint {
  int axes = 1;
  uint32_t extent[3] = {1, 1, 1};
  AddressMode mode[3] = {AddressMode::kClamp, AddressMode::kClamp, AddressMode::kClamp};
  float pos[3] = {0, 0, 0};
  uint64_t plane = 0;         // layer or face; 3D textures address depth as an axis instead
  bool zero_outside = false;  // linear memory: out-of-range reads return 0, not the border
};

// Cube-map face selection (Programming Guide, "Cubemap Textures"): the major axis picks the
// face, the other two components projected onto it give (s, t), mapped to [0, 1]. Ties go to
// x, then y.
void CubeFace(float x, float y, float z, uint32_t* face, float* u, float* v) {
  float ax = std::fabs(x), ay = std::fabs(y), az = std::fabs(z);
  float s, t, m;
  if (ax >= ay && ax >= az) {
    m = ax;
    *face = x >= 0 ? 0 : 1;
    s = x >= 0 ? -z : z;
    t = -y;
  } else if (ay >= az) {
    m = ay;
    *face = y >= 0 ? 2 : 3;
    s = x;
    t = y >= 0 ? z : -z;
  } else {
    m = az;
    *face = z >= 0 ? 4 : 5;
    s = z >= 0 ? x : -x;
    t = -y;
  }
  *u = (s / m + 1.0f) * 0.5f;
  *v = (t / m + 1.0f) * 0.5f;
}

// `l`: the layout sampled (texels, or a mipmap level).
Footprint Prepare(const TextureObject& t, const TexelLayout& l, const TexCoord& c) {
  Footprint fp;
  fp.axes = Axes(t.shape);
  fp.extent[0] = l.width;
  if (fp.axes >= 2) fp.extent[1] = l.height;
  if (fp.axes >= 3) fp.extent[2] = l.depth;
  float coord[3] = {c.f[0], c.f[1], c.f[2]};
  bool normalized = t.normalized_coords && !c.integer;
  bool wrap_ok = normalized;  // wrap and mirror need normalized coordinates; else clamp
  if (IsCube(t.shape)) {
    uint32_t face;
    CubeFace(c.f[0], c.f[1], c.f[2], &face, &coord[0], &coord[1]);
    normalized = !c.integer;
    wrap_ok = false;
    uint64_t cubes = l.layers / 6;
    uint64_t cube =
        t.shape == ResourceShape::kCubeLayered ? std::min<uint64_t>(c.layer, cubes - 1) : 0;
    fp.plane = cube * 6 + face;
  } else if (IsLayered(t.shape)) {
    fp.plane = std::min<uint64_t>(c.layer, l.layers - 1);
  }
  for (int a = 0; a < 3; ++a) {
    AddressMode m = t.address[a];
    if (!wrap_ok && (m == AddressMode::kWrap || m == AddressMode::kMirror)) m = AddressMode::kClamp;
    if (IsCube(t.shape)) m = AddressMode::kClamp;  // no seamless filtering across faces
    fp.mode[a] = m;
    // Wrap and mirror act on the normalized coordinate (Programming Guide): wrap takes
    // frac(x); mirror takes frac(x) where floor(x) is even and 1 - frac(x) where it is odd.
    // Filter neighbours that fall off the edge are then wrapped or mirrored as indices.
    float x = coord[a];
    if (std::isfinite(x) && (m == AddressMode::kWrap || m == AddressMode::kMirror)) {
      float f = std::floor(x);
      bool odd = std::fmod(f, 2.0f) != 0.0f;
      x -= f;
      if (m == AddressMode::kMirror && odd) x = 1.0f - x;
    }
    fp.pos[a] = normalized ? x * static_cast<float>(fp.extent[a]) : x;
  }
  if (t.shape == ResourceShape::kLinear) {
    fp.zero_outside = true;
    fp.mode[0] = AddressMode::kBorder;
  }
  return fp;
}

// The texel at addressed indices (any -1: the border). False if it lies outside memory.
bool Fetch(const TextureObject& t, const TexelLayout& l, const Footprint& fp, const int64_t idx[3],
           Texel* out) {
  for (int a = 0; a < fp.axes; ++a) {
    if (idx[a] >= 0) continue;
    if (fp.zero_outside) {
      *out = Texel{{0, 0, 0, 0}, {0, 0, 0, 0}};
      return true;
    }
    for (int c = 0; c < 4; ++c) {
      out->f[c] = t.border_color[c];
      out->u[c] = static_cast<uint32_t>(SaturateToInt(t.border_color[c]));
    }
    return true;
  }
  uint64_t elem = ElemBytes(l);
  uint64_t x = static_cast<uint64_t>(idx[0]);
  uint64_t y = fp.axes >= 2 ? static_cast<uint64_t>(idx[1]) : 0;
  uint64_t plane = fp.axes >= 3 ? static_cast<uint64_t>(idx[2]) : fp.plane;
  const uint8_t* p = ElementAt(l, x * elem, y, plane, elem);
  if (!p) return false;
  *out = Decode(t, p);
  return true;
}

void Emit(const Texel& x, bool as_float, uint32_t out[4]) {
  for (int c = 0; c < 4; ++c) out[c] = as_float ? FloatBits(x.f[c]) : x.u[c];
}

}  // namespace

bool ValidTexelLayout(const TexelLayout& l, ResourceShape shape, std::string* why) {
  if (l.width == 0 || l.height == 0 || l.depth == 0 || l.layers == 0) {
    *why = "has an empty extent";
    return false;
  }
  if (l.channels != 1 && l.channels != 2 && l.channels != 4) {
    *why = "has " + std::to_string(l.channels) + " channels (1, 2 or 4 expected)";
    return false;
  }
  if (IsCube(shape) && (l.layers < 6 || l.layers % 6 != 0)) {
    *why = "is a cube map with " + std::to_string(l.layers) + " faces";
    return false;
  }
  if (l.bytes && !l.data) {
    *why = "has no memory";
    return false;
  }
  return true;
}

namespace {

// One lookup in layout `l` (the texture, or one mipmap level) with the object's filtering.
bool SampleLevel(const TextureObject& t, const TexelLayout& l, const TexCoord& c, bool filter,
                 Texel* r) {
  Footprint fp = Prepare(t, l, c);
  if (!filter) {
    int64_t idx[3] = {0, 0, 0};
    for (int a = 0; a < fp.axes; ++a) {
      int64_t i = c.integer ? c.i[a] : FloorIndex(fp.pos[a]);
      idx[a] = Address(i, fp.extent[a], fp.mode[a]);
    }
    return Fetch(t, l, fp, idx, r);
  }
  // tex(x) = sum over the 2^axes neighbours of prod(alpha or 1 - alpha) * T[i (+1)], with the
  // texel centres at +0.5 (Programming Guide, "Linear Filtering").
  int64_t base[3] = {0, 0, 0};
  float alpha[3] = {0, 0, 0};
  for (int a = 0; a < fp.axes; ++a) {
    float b = fp.pos[a] - 0.5f;
    base[a] = FloorIndex(b);
    alpha[a] = Weight(b - std::floor(b));
  }
  float sum[4] = {0, 0, 0, 0};
  for (int k = 0; k < (1 << fp.axes); ++k) {
    float weight = 1.0f;
    int64_t idx[3] = {0, 0, 0};
    for (int a = 0; a < fp.axes; ++a) {
      int bit = (k >> a) & 1;
      weight *= bit ? alpha[a] : 1.0f - alpha[a];
      idx[a] = Address(base[a] + bit, fp.extent[a], fp.mode[a]);
    }
    Texel x;
    if (!Fetch(t, l, fp, idx, &x)) return false;
    for (int ch = 0; ch < 4; ++ch) sum[ch] += weight * x.f[ch];
  }
  std::copy(sum, sum + 4, r->f);
  return true;
}

// The level of detail of a lookup in a mipmapped object, before the clamp to its levels: the
// instruction's (0, lod, or from the gradients), biased, then clamped to the object's range.
float LevelOfDetail(const TextureObject& t, const TexCoord& c) {
  float lod = 0.0f;
  if (c.lod_mode == TexLod::kLevel) {
    lod = c.lod;
  } else if (c.lod_mode == TexLod::kGrad) {
    // Footprint lengths in level-0 texels: normalized gradients scale by the extent.
    const TexelLayout& l = t.levels[0];
    const int axes = IsCube(t.shape) ? 3 : Axes(t.shape);
    const float size[3] = {static_cast<float>(l.width), static_cast<float>(l.height),
                           static_cast<float>(IsCube(t.shape) ? l.width : l.depth)};
    const bool scale = t.normalized_coords || IsCube(t.shape);
    double x2 = 0, y2 = 0;
    for (int a = 0; a < axes; ++a) {
      double dx = c.dpdx[a] * (scale ? size[a] : 1.0f);
      double dy = c.dpdy[a] * (scale ? size[a] : 1.0f);
      x2 += dx * dx;
      y2 += dy * dy;
    }
    const double rho = std::sqrt(std::max(x2, y2));
    lod = rho > 0 ? static_cast<float>(std::log2(rho)) : -std::numeric_limits<float>::infinity();
  }
  if (!(lod == lod)) lod = 0.0f;  // NaN: the base level
  lod += t.lod_bias;
  return std::clamp(lod, t.min_lod, std::max(t.min_lod, t.max_lod));
}

}  // namespace

bool ValidObject(const TextureObject& t, std::string* why) {
  if (!ValidTexelLayout(t.texels, t.shape, why)) return false;
  if (t.levels.size() > 32) {
    *why = "has " + std::to_string(t.levels.size()) + " mipmap levels";
    return false;
  }
  for (size_t i = 0; i < t.levels.size(); ++i) {
    const TexelLayout& l = t.levels[i];
    if (!ValidTexelLayout(l, t.shape, why)) {
      *why = "mipmap level " + std::to_string(i) + " " + *why;
      return false;
    }
    if (l.format != t.texels.format || l.channels != t.texels.channels) {
      *why = "has mipmap level " + std::to_string(i) + " in another format";
      return false;
    }
  }
  return true;
}

bool ValidObject(const SurfaceObject& s, std::string* why) {
  return ValidTexelLayout(s.texels, s.shape, why);
}

bool SampleTexture(const TextureObject& t, const TexCoord& c, uint32_t out[4]) {
  bool as_float = ReturnsFloat(t);
  bool filter = t.linear_filter && as_float && !c.integer && t.shape != ResourceShape::kLinear;
  Texel r;
  if (t.levels.empty()) {
    if (!SampleLevel(t, t.texels, c, filter, &r)) return false;
    Emit(r, as_float, out);
    return true;
  }
  const float top = static_cast<float>(t.levels.size() - 1);
  const float lod = std::clamp(LevelOfDetail(t, c), 0.0f, top);
  if (!t.mip_linear || !as_float || c.integer) {
    // The nearest level: d = ceil(lod + 0.5) - 1 above 0.5, the base level below.
    const size_t d = lod <= 0.5f ? 0 : static_cast<size_t>(std::ceil(lod + 0.5f)) - 1;
    if (!SampleLevel(t, t.levels[std::min(d, t.levels.size() - 1)], c, filter, &r)) return false;
    Emit(r, as_float, out);
    return true;
  }
  // Linear between floor(lod) and the level above, by the fraction (8 fractional bits).
  const size_t d0 = static_cast<size_t>(std::floor(lod));
  const size_t d1 = std::min(d0 + 1, t.levels.size() - 1);
  const float f = Weight(lod - std::floor(lod));
  Texel a, b;
  if (!SampleLevel(t, t.levels[d0], c, filter, &a)) return false;
  if (f > 0 && !SampleLevel(t, t.levels[d1], c, filter, &b)) return false;
  for (int ch = 0; ch < 4; ++ch) r.f[ch] = f > 0 ? (1.0f - f) * a.f[ch] + f * b.f[ch] : a.f[ch];
  Emit(r, as_float, out);
  return true;
}

bool GatherTexture(const TextureObject& t, const TexCoord& c, int comp, uint32_t out[4]) {
  // tld4 reads the base level (it has no level of detail).
  const TexelLayout& l = t.levels.empty() ? t.texels : t.levels[0];
  Footprint fp = Prepare(t, l, c);
  bool as_float = ReturnsFloat(t);
  int64_t i = FloorIndex(fp.pos[0] - 0.5f);
  int64_t j = FloorIndex(fp.pos[1] - 0.5f);
  int64_t z = fp.axes >= 3 ? Address(FloorIndex(fp.pos[2]), fp.extent[2], fp.mode[2]) : 0;
  static constexpr int kOffsets[4][2] = {{0, 1}, {1, 1}, {1, 0}, {0, 0}};
  for (int n = 0; n < 4; ++n) {
    int64_t idx[3] = {Address(i + kOffsets[n][0], fp.extent[0], fp.mode[0]),
                      fp.axes >= 2 ? Address(j + kOffsets[n][1], fp.extent[1], fp.mode[1]) : 0, z};
    Texel x;
    if (!Fetch(t, l, fp, idx, &x)) return false;
    out[n] = as_float ? FloatBits(x.f[comp & 3]) : x.u[comp & 3];
  }
  return true;
}

namespace {

uint32_t CommonQuery(const TexelLayout& l, ResourceShape shape, TexQuery q, uint32_t lod) {
  int axes = Axes(shape);
  auto level = [&](uint32_t v) { return lod >= 32 ? 1u : std::max(1u, v >> lod); };
  switch (q) {
    case TexQuery::kWidth:
      return level(l.width);
    case TexQuery::kHeight:
      return axes >= 2 ? level(l.height) : 0;
    case TexQuery::kDepth:
      return axes >= 3 ? level(l.depth) : 0;
    case TexQuery::kChannelDataType:
      return FormatCode(l.format);
    case TexQuery::kChannelOrder:
      return l.channels;
    case TexQuery::kArraySize:
      if (shape == ResourceShape::kCubeLayered) return l.layers / 6;
      return IsLayered(shape) ? l.layers : 0;
    case TexQuery::kMemoryLayout:
      return shape == ResourceShape::kLinear || shape == ResourceShape::kPitch2D;
    default:
      return 0;
  }
}

}  // namespace

uint32_t QueryTexture(const TextureObject& t, TexQuery q, uint32_t lod) {
  switch (q) {
    case TexQuery::kNormalizedCoords:
      return t.normalized_coords;
    case TexQuery::kFilterMode:
      return t.linear_filter;
    case TexQuery::kAddrMode0:
      return AddressCode(t.address[0]);
    case TexQuery::kAddrMode1:
      return AddressCode(t.address[1]);
    case TexQuery::kAddrMode2:
      return AddressCode(t.address[2]);
    case TexQuery::kNumMipmapLevels:
      return static_cast<uint32_t>(t.levels.size());
    case TexQuery::kNumSamples:
      return 0;
    default:
      return CommonQuery(t.texels, t.shape, q, lod);
  }
}

uint32_t QuerySurface(const SurfaceObject& s, TexQuery q) {
  return CommonQuery(s.texels, s.shape, q, 0);
}

SurfaceAccess ResolveSurface(const SurfaceObject& s, const SurfaceCoord& c, uint32_t size,
                             SurfaceClamp mode, uint8_t** host) {
  const TexelLayout& l = s.texels;
  int axes = Axes(s.shape);
  int64_t row_bytes = static_cast<int64_t>(uint64_t{l.width} * ElemBytes(l));
  int64_t height = axes >= 2 ? l.height : 1;
  int64_t depth = axes >= 3 ? l.depth : 1;
  uint64_t layers = IsLayered(s.shape) || IsCube(s.shape) ? l.layers : 1;
  if ((static_cast<uint32_t>(c.x) & (size - 1)) != 0) return SurfaceAccess::kMisaligned;
  int64_t x = c.x, y = c.y, z = c.z;
  uint64_t layer = c.layer;
  bool inside = x >= 0 && x + size <= row_bytes && y >= 0 && y < height && z >= 0 && z < depth &&
                layer < layers;
  if (!inside) {
    if (mode == SurfaceClamp::kTrap) return SurfaceAccess::kOutOfRange;
    if (mode == SurfaceClamp::kZero || row_bytes < size) return SurfaceAccess::kSkip;
    // .clamp: the nearest element inside the surface.
    x = std::clamp<int64_t>(x, 0, (row_bytes - size) / size * size);
    y = std::clamp<int64_t>(y, 0, height - 1);
    z = std::clamp<int64_t>(z, 0, depth - 1);
    layer = std::min<uint64_t>(layer, layers - 1);
  }
  uint64_t plane = axes >= 3 ? static_cast<uint64_t>(z) : layer;
  *host = ElementAt(l, static_cast<uint64_t>(x), static_cast<uint64_t>(y), plane, size);
  return *host ? SurfaceAccess::kOk : SurfaceAccess::kOutsideMemory;
}

}  // namespace cuwire::ptx
