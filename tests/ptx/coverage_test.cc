// Runs the coverage corpus (tests/ptx/kernels/coverage*.cu: intrinsics, libdevice math, atomics,
// memory forms and warp primitives that real CUDA programs use) through the PTX interpreter,
// for several targets and -G builds, and compares with CPU references.

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "server/backend/sim/ptx/float16.h"
#include "tests/ptx/harness.h"

namespace cuwire::ptx::testing {
namespace {

using u32 = uint32_t;
using u64 = uint64_t;
using i64 = int64_t;

// ---- references ----------------------------------------------------------------------------

// `f()` evaluated with the host rounding mode set to `mode` (the file builds with
// -frounding-math; volatiles keep the operation inside the scope).
template <class F>
auto Rounded(int mode, F f) {
  int saved = std::fegetround();
  std::fesetround(mode);
  volatile auto r = f();
  std::fesetround(saved);
  return r;
}

// PTX float -> integer conversion: round (already done by the caller), NaN -> 0, saturate.
template <class T>
u64 SatInt(double v) {
  if (std::isnan(v)) return 0;
  if (v <= static_cast<double>(std::numeric_limits<T>::min()))
    return static_cast<u64>(static_cast<i64>(std::numeric_limits<T>::min()));
  if (v >= static_cast<double>(std::numeric_limits<T>::max()))
    return static_cast<u64>(std::numeric_limits<T>::max());
  return static_cast<u64>(static_cast<T>(v));
}

u32 Brev32(u32 v) {
  u32 r = 0;
  for (int i = 0; i < 32; ++i) r |= ((v >> i) & 1u) << (31 - i);
  return r;
}
u64 Brev64(u64 v) {
  return (u64{Brev32(static_cast<u32>(v))} << 32) | Brev32(static_cast<u32>(v >> 32));
}

i64 Byte(u32 v, int i, bool sign) {
  u32 b = (v >> (8 * i)) & 0xff;
  return sign ? static_cast<int8_t>(b) : static_cast<i64>(b);
}
i64 Half16(u32 v, int i, bool sign) {
  u32 h = (v >> (16 * i)) & 0xffff;
  return sign ? static_cast<int16_t>(h) : static_cast<i64>(h);
}

// Per-element SIMD reference: `f(x, y)` on n elements of 32 / n bits.
template <class F>
u32 Simd(u32 a, u32 b, int n, bool sign, F f) {
  int bits = 32 / n;
  u32 r = 0;
  for (int i = 0; i < n; ++i) {
    i64 x = n == 4 ? Byte(a, i, sign) : Half16(a, i, sign);
    i64 y = n == 4 ? Byte(b, i, sign) : Half16(b, i, sign);
    u64 e = static_cast<u64>(f(x, y)) & ((u64{1} << bits) - 1);
    r |= static_cast<u32>(e << (bits * i));
  }
  return r;
}

float Hf(uint16_t h) { return HalfToFloat(h); }
uint16_t H(float f) { return FloatToHalf(f); }
uint16_t Bf(float f) { return FloatToBf16(f); }
float Bff(uint16_t b) { return Bf16ToFloat(b); }
u32 Fb(float f) { return FloatBits(f); }
u64 Db(double d) { return DoubleBits(d); }

// Within `ulps` units in the last place of `want` (floats), or both NaN.
::testing::AssertionResult NearF(float got, float want, float rel, float abs_tol) {
  if (std::isnan(got) && std::isnan(want)) return ::testing::AssertionSuccess();
  if (got == want) return ::testing::AssertionSuccess();
  if (std::fabs(got - want) <= rel * std::fabs(want) + abs_tol)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << got << " want " << want;
}
::testing::AssertionResult NearD(double got, double want, double rel, double abs_tol) {
  if (std::isnan(got) && std::isnan(want)) return ::testing::AssertionSuccess();
  if (got == want) return ::testing::AssertionSuccess();
  if (std::fabs(got - want) <= rel * std::fabs(want) + abs_tol)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << got << " want " << want;
}

// ---- fixture -------------------------------------------------------------------------------

class CoverageTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    m_ = LoadKernelFile(GetParam(), mem_);
    ASSERT_TRUE(m_.module);
  }

  template <class... Args>
  void Run(const std::string& kernel, Dim3 grid, Dim3 block, uint32_t shared, const Args&... args) {
    LaunchResult r = Launch(m_, mem_, kernel, grid, block, shared, args...);
    ASSERT_EQ(r.error, LaunchError::kNone) << kernel << ": " << r.message;
  }

  FakeGlobalMemory mem_;
  LoadedModule m_;
};

// coverage.cu: compute_75, -G, compute_90.
class Coverage : public CoverageTest {};
INSTANTIATE_TEST_SUITE_P(Targets, Coverage,
                         ::testing::Values("coverage", "coverage_g", "coverage_sm90"));

// coverage_sm80.cu: compute_80, -G, compute_90.
class CoverageSm80 : public CoverageTest {};
INSTANTIATE_TEST_SUITE_P(Targets, CoverageSm80,
                         ::testing::Values("coverage_sm80", "coverage_sm80_g", "coverage_sm80_90"));

std::vector<u32> Bits(int n, u32 seed) {
  std::vector<u32> v(n);
  u64 s = seed;
  for (int i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = static_cast<u32>(s >> 29);
  }
  v[0] = 0;
  v[1] = 0xffffffffu;
  v[2] = 0x80000000u;
  v[3] = 1;
  return v;
}

// ---- integer intrinsics ----------------------------------------------------------------------

TEST_P(Coverage, IntegerIntrinsics) {
  const int n = 64;
  std::vector<u32> x = Bits(n, 1), y = Bits(n, 2);
  y[0] = 0x00ff0040u;
  uint64_t dx = mem_.Upload(x), dy = mem_.Upload(y), dout = mem_.Alloc(n * 32 * 8);
  Run("int_intrinsics", {2, 1, 1}, {32, 1, 1}, 0, dx, dy, dout, n);
  std::vector<u64> out = mem_.Download<u64>(dout, n * 32);
  for (int i = 0; i < n; ++i) {
    u32 a = x[i], b = y[i];
    int32_t sa = static_cast<int32_t>(a), sb = static_cast<int32_t>(b);
    u64 la = (u64{a} << 32) | b, lb = (u64{b} << 29) ^ a;
    u64 fs = (u64{b} << 32) | a;
    u32 lc = std::min<u32>(b & 63, 32), rc = lc;
    u64 want[32] = {
        Brev32(a),
        Brev64(la),
        a ? static_cast<u64>(__builtin_clz(a)) : 32,
        la ? static_cast<u64>(__builtin_clzll(la)) : 64,
        static_cast<u64>(__builtin_popcount(a)),
        static_cast<u64>(__builtin_popcountll(la)),
        a ? static_cast<u64>(__builtin_ctz(a) + 1) : 0,
        lb ? static_cast<u64>(__builtin_ctzll(lb) + 1) : 0,
        0,  // byte_perm, below
        static_cast<u32>((fs << (b & 31)) >> 32),
        static_cast<u32>(fs >> (b & 31)),
        static_cast<u32>(lc == 32 ? a : (fs << lc) >> 32),
        static_cast<u32>(rc == 32 ? b : fs >> rc),
        static_cast<u32>(static_cast<i64>(static_cast<int32_t>(a << 8) >> 8) *
                         (static_cast<int32_t>(b << 8) >> 8)),
        static_cast<u32>(u64{a & 0xffffff} * (b & 0xffffff)),
        static_cast<u32>((u64{a} * b) >> 32),
        static_cast<u32>(static_cast<u64>(static_cast<i64>(sa) * sb) >> 32),
        static_cast<u64>((static_cast<unsigned __int128>(la) * lb) >> 64),
        static_cast<u64>((static_cast<__int128>(static_cast<i64>(la)) * static_cast<i64>(lb)) >>
                         64),
        static_cast<u32>(static_cast<u32>(std::llabs(i64{sa} - sb)) + 7u),
        static_cast<u32>((a > b ? a - b : b - a) + 9u),
        0,
        0,
        0,
        0,  // dot products, below
        static_cast<u32>(static_cast<int32_t>((i64{sa} + sb) >> 1)),
        static_cast<u32>(static_cast<int32_t>((i64{sa} + sb + 1) >> 1)),
        static_cast<u32>((u64{a} + b) >> 1),
        static_cast<u32>((u64{a} + b + 1) >> 1),
        (a >> (b & 7)) & ((1u << ((b >> 8) & 15)) - 1),
        static_cast<u32>(static_cast<int32_t>(a << 3) >> 11),
        (a & 0xff00ff00u) | ((b << 4) & 0x00ff00ffu),
    };
    u64 tmp = (u64{b} << 32) | a;
    u32 sel = b & 0x7777, perm = 0;
    for (int k = 0; k < 4; ++k)
      perm |= static_cast<u32>((tmp >> (8 * ((sel >> (4 * k)) & 7))) & 0xff) << (8 * k);
    want[8] = perm;
    i64 dot = 100, udot = 5, d2lo = -3, d2hi = 11;
    for (int k = 0; k < 4; ++k) {
      dot += Byte(a, k, true) * Byte(b, k, true);
      udot += Byte(a, k, false) * Byte(b, k, false);
    }
    for (int k = 0; k < 2; ++k) {
      d2lo += Half16(a, k, true) * Byte(b, k, true);
      d2hi += Half16(a, k, false) * Byte(b, 2 + k, false);
    }
    want[21] = static_cast<u32>(dot);
    want[22] = static_cast<u32>(udot);
    want[23] = static_cast<u32>(d2lo);
    want[24] = static_cast<u32>(d2hi);
    for (int k = 0; k < 32; ++k)
      ASSERT_EQ(out[i * 32 + k], want[k]) << "i=" << i << " k=" << k << " a=" << a << " b=" << b;
  }
}

TEST_P(Coverage, SimdIntrinsics) {
  const int n = 48;
  std::vector<u32> x = Bits(n, 3), y = Bits(n, 4);
  x[5] = y[5];
  uint64_t dx = mem_.Upload(x), dy = mem_.Upload(y), dout = mem_.Alloc(n * 12 * 4);
  Run("simd_intrinsics", {1, 1, 1}, {64, 1, 1}, 0, dx, dy, dout, n);
  std::vector<u32> out = mem_.Download<u32>(dout, n * 12);
  for (int i = 0; i < n; ++i) {
    u32 a = x[i], b = y[i];
    i64 sad = 0;
    for (int k = 0; k < 4; ++k) sad += std::llabs(Byte(a, k, true) - Byte(b, k, true));
    u32 want[12] = {
        Simd(a, b, 2, false, [](i64 p, i64 q) { return p + q; }),
        Simd(a, b, 4, false, [](i64 p, i64 q) { return p + q; }),
        Simd(a, b, 4, false, [](i64 p, i64 q) { return p - q; }),
        Simd(a, b, 4, false, [](i64 p, i64 q) { return std::llabs(p - q); }),
        Simd(a, b, 4, false, [](i64 p, i64 q) { return std::max(p, q); }),
        Simd(a, b, 2, true, [](i64 p, i64 q) { return std::min(p, q); }),
        Simd(a, b, 4, false, [](i64 p, i64 q) { return p == q ? 0xff : 0; }),
        Simd(a, b, 2, false, [](i64 p, i64 q) { return p > q ? 0xffff : 0; }),
        Simd(a, b, 4, false, [](i64 p, i64 q) { return (p + q + 1) >> 1; }),
        static_cast<u32>(sad),
        Simd(a, b, 2, true, [](i64 p, i64 q) { return std::clamp<i64>(p + q, -32768, 32767); }),
        Simd(a, b, 4, false, [](i64 p, i64 q) { return p < q ? 1 : 0; }),
    };
    for (int k = 0; k < 12; ++k)
      ASSERT_EQ(out[i * 12 + k], want[k])
          << "i=" << i << " k=" << k << std::hex << " a=" << a << " b=" << b;
  }
}

// ---- conversions and rounding ----------------------------------------------------------------

std::vector<float> ConversionInputs() {
  std::vector<float> f = {0.0f,       -0.0f,       0.5f,   1.5f,     2.5f,     -0.5f,    -1.5f,
                          -2.5f,      0.49999997f, 3.7f,   -3.7f,    123.456f, -987.25f, 1e10f,
                          -1e10f,     3e9f,        5e9f,   -3e9f,    1e20f,    -1e20f,   NAN,
                          INFINITY,   -INFINITY,   1e-40f, 65535.5f, 255.7f,   -129.3f,  32767.9f,
                          8388609.0f, 16777217.0f, -0.75f, 0.999999f};
  for (int i = 0; i < 16; ++i) f.push_back((i - 8) * 0.37f + 0.125f * (i % 3));
  return f;
}

TEST_P(Coverage, Conversions) {
  std::vector<float> f = ConversionInputs();
  const int n = static_cast<int>(f.size());
  std::vector<double> d(n);
  for (int i = 0; i < n; ++i)
    d[i] = i % 5 == 0 ? static_cast<double>(f[i]) : (i - 20) * 0.3141592653589793 + 1e-9 * i;
  d[7] = 1e-310;
  d[9] = 3.4e39;
  d[11] = -2.5;
  uint64_t df = mem_.Upload(f), dd = mem_.Upload(d), dout = mem_.Alloc(n * 40 * 8);
  Run("conversions", {1, 1, 1}, {64, 1, 1}, 0, df, dd, dout, n);
  std::vector<u64> out = mem_.Download<u64>(dout, n * 40);
  auto to_float = [](int mode, long double v) {
    return Fb(Rounded(mode, [v] { return static_cast<float>(v); }));
  };
  for (int i = 0; i < n; ++i) {
    float x = f[i];
    double y = d[i];
    u64* o = &out[i * 40];
    auto check = [&](int k, u64 want) {
      EXPECT_EQ(o[k], want) << "i=" << i << " k=" << k << " f=" << x << " d=" << y;
    };
    auto low32 = [](u64 v) { return v & 0xffffffffu; };
    check(0, low32(SatInt<int32_t>(std::nearbyint(x))));
    check(1, low32(SatInt<int32_t>(std::trunc(x))));
    check(2, low32(SatInt<int32_t>(std::floor(x))));
    check(3, low32(SatInt<int32_t>(std::ceil(x))));
    check(4, SatInt<uint32_t>(std::nearbyint(x)));
    check(5, SatInt<uint32_t>(std::floor(x)));
    check(6, SatInt<int64_t>(std::nearbyint(x)));
    check(7, SatInt<uint64_t>(std::ceil(x)));
    check(8, low32(SatInt<int32_t>(std::nearbyint(y))));
    check(9, low32(SatInt<int32_t>(std::floor(y))));
    check(10, SatInt<int64_t>(std::ceil(y)));
    check(11, SatInt<uint64_t>(std::trunc(y)));
    int32_t iy = static_cast<int32_t>(SatInt<int32_t>(std::trunc(y * 1e6)));
    check(12, Fb(static_cast<float>(iy)));
    check(13, to_float(FE_TOWARDZERO, iy | 0x1000001));
    check(14, to_float(FE_DOWNWARD, 0xffffff01u ^ static_cast<u32>(i)));
    check(15, to_float(FE_UPWARD, static_cast<int64_t>(SatInt<int64_t>(std::trunc(y * 1e12)))));
    check(16, Fb(static_cast<float>(y)));
    check(17, to_float(FE_TOWARDZERO, y));
    check(18, to_float(FE_DOWNWARD, y));
    check(19, to_float(FE_UPWARD, y));
    check(20, Fb(std::nearbyint(x)));
    check(21, Fb(std::trunc(x)));
    check(22, Fb(std::floor(x)));
    check(23, Fb(std::ceil(x)));
    // roundf is cvt.rzi(add.rz(x, copysign(0.5, x))): the add returns the canonical NaN.
    check(24, std::isnan(x) ? 0x7fffffffu : Fb(std::round(x)));
    check(25, SatInt<int64_t>(std::nearbyint(x)));
    if (std::isfinite(x) && std::fabs(x) < 1e18f) check(26, static_cast<u64>(std::llround(x)));
    check(27, Fb(std::isnan(x) || x <= 0 ? 0.0f : std::min(x, 1.0f)));  // -0 saturates to +0
    check(28, Db(std::nearbyint(y)));
    check(29, Db(std::round(y)));
    check(30, Db(std::trunc(y)));
    check(31, Db(y) >> 32);
    check(32, Db(y) & 0xffffffffu);
    check(33, Db(y) ^ 1);
    if (std::isfinite(x) && std::fabs(x) < 30000) {
      check(34, static_cast<u64>(static_cast<i64>(x)));
      check(35, static_cast<uint8_t>(static_cast<int>(x)));
      check(36, static_cast<u64>(static_cast<i64>(static_cast<short>(x))));
    }
    if (y * 1e15 >= 0 && y * 1e15 < 1.8e19)
      check(37, Db(static_cast<double>(static_cast<u64>(y * 1e15))));
    if (std::fabs(y * 1e15) < 9e18) check(38, Fb(static_cast<float>(static_cast<i64>(y * 1e15))));
    if (y * 1e18 >= 0 && y * 1e18 < 1.8e19) {
      u64 v = static_cast<u64>(y * 1e18) | 1;
      check(39, Db(Rounded(FE_DOWNWARD, [v] { return static_cast<double>(v); })));
    }
  }
}

TEST_P(Coverage, RoundedArithmetic) {
  const int n = 40;
  std::vector<float> x(n), y(n);
  std::vector<double> dx(n), dy(n);
  for (int i = 0; i < n; ++i) {
    x[i] = (i - 17) * 1.1f + 1.0f / (i + 3);
    y[i] = (i % 9 - 4.5f) * 0.7f + 1e-3f * i;
    dx[i] = (i - 13) * 2.718281828459045 + 1.0 / (i + 7);
    dy[i] = (i % 11 - 5.5) * 0.3 + 1e-7 * i;
  }
  x[3] = 1e-39f;  // subnormal operand
  y[4] = 3e38f;   // overflow under some modes
  x[4] = 2.0f;
  uint64_t a = mem_.Upload(x), b = mem_.Upload(y), c = mem_.Upload(dx), e = mem_.Upload(dy),
           dout = mem_.Alloc(n * 24 * 8);
  Run("rounded_arith", {1, 1, 1}, {64, 1, 1}, 0, a, b, c, e, dout, n);
  std::vector<u64> out = mem_.Download<u64>(dout, n * 24);
  const int rz = FE_TOWARDZERO, ru = FE_UPWARD, rd = FE_DOWNWARD, rn = FE_TONEAREST;
  for (int i = 0; i < n; ++i) {
    volatile float p = x[i], q = y[i];
    volatile double r = dx[i], s = dy[i];
    u64 want[24] = {
        Fb(Rounded(rz, [&] { return p + q; })),
        Fb(Rounded(ru, [&] { return p + q; })),
        Fb(Rounded(rd, [&] { return p - q; })),
        Fb(Rounded(ru, [&] { return p * q; })),
        Fb(Rounded(rz, [&] { return p * q; })),
        Fb(Rounded(rd, [&] { return std::fma(p, q, 1.0f); })),
        Fb(Rounded(rn, [&] { return p / q; })),
        Fb(Rounded(rz, [&] { return p / q; })),
        Fb(Rounded(rn, [&] { return 1.0f / q; })),
        Fb(Rounded(ru, [&] { return 1.0f / q; })),
        Fb(Rounded(rn, [&] { return std::sqrt(std::fabs(p)); })),
        Fb(Rounded(rd, [&] { return std::sqrt(std::fabs(p)); })),
        Db(Rounded(rz, [&] { return r + s; })),
        Db(Rounded(ru, [&] { return r * s; })),
        Db(Rounded(rd, [&] { return r / s; })),
        Db(Rounded(rn, [&] { return 1.0 / s; })),
        Db(Rounded(ru, [&] { return std::sqrt(std::fabs(r)); })),
        Db(Rounded(rz, [&] { return std::fma(r, s, 0.5); })),
        Fb(p / q),
        Db(r / s),
        Fb(std::sqrt(std::fabs(q))),
        Db(std::sqrt(std::fabs(s))),
        Fb(1.0f / q),
        Db(1.0 / s),
    };
    for (int k = 0; k < 24; ++k)
      EXPECT_EQ(out[i * 24 + k], want[k])
          << "i=" << i << " k=" << k << " x=" << x[i] << " y=" << y[i];
  }
}

TEST_P(Coverage, FloatClassification) {
  std::vector<float> x = {0.0f,     -0.0f,     1.0f,   -2.5f,   NAN,     -NAN,
                          INFINITY, -INFINITY, 1e-40f, -1e-45f, 3.4e38f, 1.17549435e-38f,
                          7.0f,     -7.0f,     0.1f,   100.0f};
  std::vector<float> y = {1.0f,  2.0f, NAN,       -3.0f, 4.0f,  NAN,  1.0f, INFINITY,
                          -1.0f, 0.5f, -INFINITY, 2.0f,  -0.0f, 7.0f, NAN,  1e-40f};
  const int n = static_cast<int>(x.size());
  std::vector<double> d(n);
  for (int i = 0; i < n; ++i) d[i] = i % 3 == 0 ? static_cast<double>(x[i]) : 1.0 / (i - 8);
  d[4] = NAN;
  d[5] = -INFINITY;
  d[7] = 4.9e-324;
  uint64_t dx = mem_.Upload(x), dy = mem_.Upload(y), dd = mem_.Upload(d),
           dout = mem_.Alloc(n * 16 * 4);
  Run("float_classify", {1, 1, 1}, {32, 1, 1}, 0, dx, dy, dd, dout, n);
  std::vector<u32> out = mem_.Download<u32>(dout, n * 16);
  for (int i = 0; i < n; ++i) {
    float a = x[i], b = y[i];
    double v = d[i];
    float fd = (std::isnan(a) || std::isnan(b)) ? NAN : (a > b ? a - b : 0.0f);
    u32 want[16] = {
        std::isnan(a),
        std::isinf(a),
        std::isfinite(a),
        std::signbit(a),
        std::isnan(v),
        std::isinf(v),
        std::isfinite(v),
        std::signbit(v),
        Fb(std::fmin(a, b)),
        Fb(std::fmax(a, b)),
        Fb(std::copysign(a, b)),
        static_cast<u32>(Db(std::fmin(v, static_cast<double>(b))) >> 32),
        static_cast<u32>(Db(std::copysign(v, static_cast<double>(a))) >> 32),
        Fb(std::fabs(a) + fd),
        std::fabs(a) >= 1.17549435e-38f && std::isfinite(a),
        static_cast<u32>(std::isnan(b) | (std::isinf(b) << 1) | (std::isfinite(b) << 2)),
    };
    for (int k = 0; k < 16; ++k) {
      if ((k == 8 || k == 9 || k == 13) && std::isnan(BitsFloat(want[k]))) {
        EXPECT_TRUE(std::isnan(BitsFloat(out[i * 16 + k]))) << "i=" << i << " k=" << k;
        continue;
      }
      if (k == 11 && std::isnan(BitsDouble(u64{want[k]} << 32))) continue;
      EXPECT_EQ(out[i * 16 + k], want[k]) << "i=" << i << " k=" << k << " a=" << a << " b=" << b;
    }
  }
}

// ---- libdevice math ------------------------------------------------------------------------

TEST_P(Coverage, MathLibraryFloat) {
  const int n = 48;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = (i - 23.5f) * 0.83f;
    y[i] = (i % 13 - 6.25f) * 1.37f;
  }
  uint64_t dx = mem_.Upload(x), dy = mem_.Upload(y), dout = mem_.Alloc(n * 24 * 4),
           diout = mem_.Alloc(n * 4 * 4);
  Run("libm_f32", {1, 1, 1}, {64, 1, 1}, 0, dx, dy, dout, diout, n);
  std::vector<float> out = mem_.Download<float>(dout, n * 24);
  std::vector<int> iout = mem_.Download<int>(diout, n * 4);
  for (int i = 0; i < n; ++i) {
    float a = x[i], b = y[i];
    const float* o = &out[i * 24];
    int e;
    float fr = std::frexp(a, &e);
    EXPECT_EQ(o[0], fr) << i;
    EXPECT_EQ(iout[i * 4 + 0], e) << i;
    EXPECT_EQ(o[1], std::ldexp(a, static_cast<int>(b))) << i;
    float ip;
    EXPECT_EQ(o[2], std::modf(a, &ip)) << i;
    EXPECT_EQ(o[3], ip) << i;
    EXPECT_EQ(o[4], std::fmod(a, b)) << i;
    EXPECT_EQ(o[5], std::remainder(a, b)) << i;
    int q;
    EXPECT_EQ(o[6], std::remquo(a, b, &q)) << i;
    EXPECT_EQ(iout[i * 4 + 1], q & 7) << i;
    const float rel = 4e-6f, abs_tol = 1e-6f;
    EXPECT_TRUE(NearF(o[7], std::erf(a * 0.1f), rel, abs_tol)) << i << " erff";
    EXPECT_TRUE(NearF(o[8], std::erfc(a * 0.1f), rel, abs_tol)) << i << " erfcf";
    EXPECT_TRUE(NearF(o[9], std::lgamma(std::fabs(a) + 0.5f), rel, abs_tol)) << i << " lgammaf";
    EXPECT_TRUE(NearF(o[10], std::tgamma(std::fabs(a) * 0.1f + 0.5f), rel, abs_tol))
        << i << " tgammaf";
    EXPECT_TRUE(NearF(o[11], std::exp(a * 0.05f), rel, abs_tol)) << i << " expf";
    EXPECT_TRUE(NearF(o[12], std::pow(10.0f, a * 0.01f), rel, abs_tol)) << i << " exp10f";
    EXPECT_TRUE(NearF(o[13], std::log1p(std::fabs(a)), rel, abs_tol)) << i << " log1pf";
    EXPECT_TRUE(NearF(o[14], std::expm1(a * 0.01f), rel, abs_tol)) << i << " expm1f";
    EXPECT_TRUE(NearF(o[15], std::cbrt(a), rel, abs_tol)) << i << " cbrtf";
    EXPECT_TRUE(NearF(o[16], std::hypot(a, b), rel, abs_tol)) << i << " hypotf";
    EXPECT_TRUE(NearF(o[17], std::atan2(a, b), rel, abs_tol)) << i << " atan2f";
    EXPECT_TRUE(NearF(o[18], std::pow(std::fabs(a) + 1.0f, b * 0.1f), rel, abs_tol))
        << i << " powf";
    EXPECT_TRUE(NearF(o[19], static_cast<float>(std::sin(M_PI * (a * 0.01f))), rel, abs_tol))
        << i << " sinpif";
    EXPECT_TRUE(NearF(o[20], std::asinh(a), rel, abs_tol)) << i << " asinhf";
    EXPECT_EQ(o[21], std::logb(a)) << i;
    EXPECT_EQ(iout[i * 4 + 2], std::ilogb(a)) << i;
    EXPECT_EQ(o[22], std::nextafter(a, b)) << i;
    EXPECT_EQ(o[23], std::fma(a, b, -a)) << i;
    EXPECT_TRUE(NearF(BitsFloat(static_cast<u32>(iout[i * 4 + 3])), std::sin(a) + std::cos(a), rel,
                      abs_tol))
        << i << " sincosf";
  }
}

TEST_P(Coverage, MathLibraryDouble) {
  const int n = 40;
  std::vector<double> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = (i - 19.5) * 0.913;
    y[i] = (i % 11 - 5.25) * 1.71;
  }
  uint64_t dx = mem_.Upload(x), dy = mem_.Upload(y), dout = mem_.Alloc(n * 16 * 8),
           diout = mem_.Alloc(n * 4);
  Run("libm_f64", {1, 1, 1}, {64, 1, 1}, 0, dx, dy, dout, diout, n);
  std::vector<double> out = mem_.Download<double>(dout, n * 16);
  std::vector<int> iout = mem_.Download<int>(diout, n);
  for (int i = 0; i < n; ++i) {
    double a = x[i], b = y[i];
    const double* o = &out[i * 16];
    int e;
    EXPECT_EQ(o[0], std::frexp(a, &e)) << i;
    EXPECT_EQ(iout[i], e) << i;
    EXPECT_EQ(o[1], std::ldexp(a, static_cast<int>(b))) << i;
    EXPECT_EQ(o[2], std::fmod(a, b)) << i;
    EXPECT_EQ(o[3], std::remainder(a, b)) << i;
    const double rel = 1e-14, abs_tol = 1e-15;
    EXPECT_TRUE(NearD(o[4], std::erf(a * 0.1), rel, abs_tol)) << i << " erf";
    EXPECT_TRUE(NearD(o[5], std::lgamma(std::fabs(a) + 0.5), rel, abs_tol)) << i << " lgamma";
    EXPECT_TRUE(NearD(o[6], std::tgamma(std::fabs(a) * 0.1 + 0.5), rel, abs_tol)) << i << " tgamma";
    EXPECT_TRUE(NearD(o[7], std::exp(a * 0.05), rel, abs_tol)) << i << " exp";
    EXPECT_TRUE(NearD(o[8], std::log(std::fabs(a) + 1.0), rel, abs_tol)) << i << " log";
    EXPECT_TRUE(NearD(o[9], std::sin(a), rel, abs_tol)) << i << " sin";
    EXPECT_TRUE(NearD(o[10], std::cos(b), rel, abs_tol)) << i << " cos";
    EXPECT_TRUE(NearD(o[11], std::pow(std::fabs(a) + 1.0, b * 0.1), rel, abs_tol)) << i << " pow";
    EXPECT_TRUE(NearD(o[12], std::atan2(a, b), rel, abs_tol)) << i << " atan2";
    EXPECT_TRUE(NearD(o[13], std::cbrt(a), rel, abs_tol)) << i << " cbrt";
    EXPECT_TRUE(NearD(o[14], 1.0 / std::sqrt(std::fabs(a) + 1.0), rel, abs_tol)) << i << " rsqrt";
    double ip;
    double fr = std::modf(a, &ip);
    EXPECT_EQ(o[15], fr + ip * 0.5) << i;
  }
}

// ---- half and bfloat16 -----------------------------------------------------------------------

TEST_P(Coverage, HalfArithmetic) {
  const int n = 48;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = (i - 20) * 0.37f;
    y[i] = (i % 7) * 1.3f - 3.1f;
  }
  uint64_t dx = mem_.Upload(x), dy = mem_.Upload(y), dout = mem_.Alloc(n * 24 * 4);
  Run("half_arith", {1, 1, 1}, {64, 1, 1}, 0, dx, dy, dout, n);
  std::vector<u32> out = mem_.Download<u32>(dout, n * 24);
  auto pack = [](uint16_t lo, uint16_t hi) { return u32{lo} | (u32{hi} << 16); };
  for (int i = 0; i < n; ++i) {
    uint16_t a = H(x[i]), b = H(y[i]), c = H(y[i]), e = H(x[i] * 0.5f);  // a2 = (a, b), b2 = (c, e)
    float A = Hf(a), B = Hf(b), C = Hf(c), E = Hf(e);
    float v = x[i] * 1.001f;
    uint16_t rz = H(v);
    if (std::fabs(Hf(rz)) > std::fabs(v)) --rz;  // one step toward zero (same sign, magnitude bits)
    u32 want[24] = {
        H(A + B),
        H(A - B),
        H(A * B),
        H(static_cast<float>(static_cast<double>(A) * B + 1.5)),
        static_cast<u32>(a ^ 0x8000),
        static_cast<u32>(a & 0x7fff),
        H(std::fmax(A, B)),
        H(std::fmin(A, B)),
        static_cast<u32>((A == B) | ((A < B) << 1) | ((A > B) << 2) | (std::isnan(A) << 3) |
                         ((A >= B) << 4) | (std::isinf(B) << 5)),
        pack(H(A + C), H(B + E)),
        pack(H(A * C), H(B * E)),
        pack(H(static_cast<float>(static_cast<double>(A) * C + 0.25)),
             H(static_cast<float>(static_cast<double>(B) * E + 0.25))),
        pack(H(std::fmax(A, C)), H(std::fmax(B, E))),
        pack(H(A - C), H(B - E)),
        Fb(A + B),
        pack(c, e),
        H(A / B),
        H(std::sqrt(std::fabs(A))),
        static_cast<u32>(1 | ((A < C && B < E) << 1)),
        static_cast<u32>(static_cast<int>(std::nearbyint(A))) & 0xffff,
        H(static_cast<float>(i * 3 - 50)),
        pack(a, b) ^ 0x80008000u,
        rz,
        Fb(A * E),
    };
    for (int k = 0; k < 24; ++k)
      EXPECT_EQ(out[i * 24 + k], want[k])
          << "i=" << i << " k=" << k << " x=" << x[i] << " y=" << y[i];
  }
}

TEST_P(Coverage, Bfloat16) {
  const int n = 40;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = (i - 15) * 0.731f + 0.001f;
    y[i] = (i % 6) * 2.9f - 7.3f;
  }
  uint64_t dx = mem_.Upload(x), dy = mem_.Upload(y), dout = mem_.Alloc(n * 8 * 4);
  Run("bf16_arith", {1, 1, 1}, {64, 1, 1}, 0, dx, dy, dout, n);
  std::vector<u32> out = mem_.Download<u32>(dout, n * 8);
  for (int i = 0; i < n; ++i) {
    uint16_t a = Bf(x[i]), b = static_cast<uint16_t>(Fb(y[i]) >> 16);  // b: round toward zero
    float A = Bff(a), B = Bff(b);
    u32 want[8] = {
        a,    b, Fb(A + B), Bf(A + B), Bf(A * B), Bf(A - B), u32{Bf(x[i])} | (u32{Bf(y[i])} << 16),
        A < B};
    for (int k = 0; k < 8; ++k) EXPECT_EQ(out[i * 8 + k], want[k]) << "i=" << i << " k=" << k;
  }
}

// ---- atomics ---------------------------------------------------------------------------------

TEST_P(Coverage, Atomics) {
  const int threads = 64;
  std::vector<int> i32(8 + threads, 0);
  i32[2] = 1000;
  i32[4] = 1000;
  std::vector<u64> u64s = {0, 0, 0, ~0ull, 0, 0, 1, 0};
  std::vector<float> f32 = {0, -1};
  std::vector<double> f64 = {0};
  std::vector<u32> h2 = {0};
  std::vector<uint16_t> h1 = {0, 0}, u16 = {0, 0};
  std::vector<int> scoped = {0, 0, 0, 0};
  uint64_t di = mem_.Upload(i32), du = mem_.Upload(u64s), df = mem_.Upload(f32),
           dd = mem_.Upload(f64), dh2 = mem_.Upload(h2), dh1 = mem_.Upload(h1),
           du16 = mem_.Upload(u16), ds = mem_.Upload(scoped);
  Run("atomics_wide", {1, 1, 1}, {threads, 1, 1}, 0, di, du, df, dd, dh2, dh1, du16, ds);
  i32 = mem_.Download<int>(di, 8 + threads);
  u64s = mem_.Download<u64>(du, 8);
  f32 = mem_.Download<float>(df, 2);
  EXPECT_EQ(i32[0], 64 % 11);
  EXPECT_EQ(i32[1], 0);
  EXPECT_EQ(i32[2], 100 - 63);
  EXPECT_EQ(i32[3], 63 * 5);
  EXPECT_EQ(i32[4], 1000 - 2 * threads);
  EXPECT_EQ(i32[5], 63 * 64 / 2);
  EXPECT_EQ(static_cast<u32>(i32[6]), 0xffffffffu);
  std::vector<int> prevs(i32.begin() + 8, i32.end());
  std::sort(prevs.begin(), prevs.end());
  for (int t = 0; t < threads; ++t) EXPECT_EQ(prevs[t], 1000 - 2 * (threads - 1 - t));
  EXPECT_EQ(u64s[0], u64{63 * 64 / 2} << 33);
  EXPECT_EQ(static_cast<i64>(u64s[1]), -63);
  EXPECT_EQ(u64s[2], 189u);
  EXPECT_EQ(u64s[3], 0u);
  EXPECT_EQ(u64s[4], ~0ull);
  u64 x = 0, cas = 1;
  for (u64 t = 0; t < threads; ++t) {
    x ^= t * t * 0x9E3779B97F4A7C15ull;
    cas = cas * 3 + 1;
  }
  EXPECT_EQ(u64s[5], x);
  EXPECT_EQ(u64s[6], cas);
  EXPECT_EQ(f32[0], 64.0f);
  EXPECT_TRUE(f32[1] >= 0 && f32[1] < 64 && f32[1] == std::floor(f32[1])) << f32[1];
  EXPECT_EQ(mem_.Download<double>(dd, 1)[0], 0.5 * 63 * 64 / 2);
  EXPECT_EQ(mem_.Download<u32>(dh2, 1)[0], (u32{H(32.0f)} << 16) | H(64.0f));
  EXPECT_EQ(mem_.Download<uint16_t>(dh1, 1)[0], H(16.0f));
  EXPECT_EQ(mem_.Download<uint16_t>(du16, 1)[0], 3 * threads);
  scoped = mem_.Download<int>(ds, 4);
  EXPECT_EQ(scoped, (std::vector<int>{64, 128, 7, 9}));
}

TEST_P(Coverage, SharedAtomics) {
  uint64_t dout = mem_.Alloc(16), df = mem_.Alloc(8);
  Run("shared_atomics", {2, 1, 1}, {96, 1, 1}, 0, dout, df);
  std::vector<u64> out = mem_.Download<u64>(dout, 2);
  EXPECT_EQ(out[0], u64{95 * 96 / 2} << 32);
  EXPECT_EQ(out[1], 1000u);
  std::vector<float> f = mem_.Download<float>(df, 2);
  EXPECT_EQ(f[0], 48.0f);
  EXPECT_EQ(f[1], 24.0f);
}

// ---- memory forms ----------------------------------------------------------------------------

TEST_P(Coverage, LoadForms) {
  const int n = 40;
  std::vector<float> f4(n * 4);
  std::vector<int> i4(n * 4);
  std::vector<double> d2(n * 2);
  std::vector<uint8_t> u4(n * 4);
  std::vector<int16_t> s2(n * 2);
  std::vector<int8_t> c2(n * 2);
  std::vector<i64> l2(n * 2);
  std::vector<uint16_t> h2(n * 2);
  for (int i = 0; i < n * 4; ++i) {
    f4[i] = i * 0.25f - 7;
    i4[i] = i * 1001 - 50000;
    u4[i] = static_cast<uint8_t>(i * 37);
  }
  for (int i = 0; i < n * 2; ++i) {
    d2[i] = i * 1.5 - 3;
    s2[i] = static_cast<int16_t>(i * 300 - 9000);
    c2[i] = static_cast<int8_t>(i * 5 - 100);
    l2[i] = (i64{i} << 40) + i * 7 - 1000000;
    h2[i] = H(i * 0.5f - 10);
  }
  uint64_t a = mem_.Upload(f4), b = mem_.Upload(i4), c = mem_.Upload(d2), d = mem_.Upload(u4),
           e = mem_.Upload(s2), f = mem_.Upload(c2), g = mem_.Upload(l2), h = mem_.Upload(h2),
           dout = mem_.Alloc(n * 8 * 4);
  Run("load_forms", {1, 1, 1}, {64, 1, 1}, 0, a, b, c, d, e, f, g, h, dout, n);
  std::vector<float> out = mem_.Download<float>(dout, n * 8);
  for (int i = 0; i < n; ++i) {
    const float* o = &out[i * 8];
    EXPECT_EQ(o[0], f4[i * 4] + f4[i * 4 + 1] * 2 + f4[i * 4 + 2] * 3 + f4[i * 4 + 3] * 4) << i;
    EXPECT_EQ(o[1], static_cast<float>(i4[i * 4] - i4[i * 4 + 1] + i4[i * 4 + 2] - i4[i * 4 + 3]))
        << i;
    EXPECT_EQ(o[2], static_cast<float>(d2[i * 2] * d2[i * 2 + 1])) << i;
    EXPECT_EQ(o[3], static_cast<float>(u4[i * 4] + u4[i * 4 + 1] * 3 + u4[i * 4 + 2] * 5 +
                                       u4[i * 4 + 3] * 7))
        << i;
    EXPECT_EQ(o[4], static_cast<float>(s2[i * 2] * s2[i * 2 + 1]) +
                        static_cast<float>(c2[i * 2] - c2[i * 2 + 1]))
        << i;
    EXPECT_EQ(o[5], static_cast<float>(l2[i * 2] % 1000 + l2[i * 2 + 1] % 1000)) << i;
    EXPECT_EQ(o[6], Hf(h2[i * 2]) - Hf(h2[i * 2 + 1])) << i;
    EXPECT_EQ(o[7], f4[i * 4 + 1]) << i;
  }
}

TEST_P(Coverage, StoreForms) {
  const int n = 40;
  uint64_t f4 = mem_.Alloc(n * 16), i2 = mem_.Alloc(n * 8), d2 = mem_.Alloc(n * 16),
           u4 = mem_.Alloc(n * 4), s4 = mem_.Alloc(n * 8), q = mem_.Alloc(n * 16);
  Run("store_forms", {1, 1, 1}, {64, 1, 1}, 0, f4, i2, d2, u4, s4, q, n);
  std::vector<float> F = mem_.Download<float>(f4, n * 4);
  std::vector<int> I = mem_.Download<int>(i2, n * 2), Q = mem_.Download<int>(q, n * 4);
  std::vector<double> D = mem_.Download<double>(d2, n * 2);
  std::vector<uint8_t> U = mem_.Download<uint8_t>(u4, n * 4);
  std::vector<int16_t> S = mem_.Download<int16_t>(s4, n * 4);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(F[i * 4 + 0], static_cast<float>(i));
    EXPECT_EQ(F[i * 4 + 1], i + 0.5f);
    EXPECT_EQ(F[i * 4 + 2], static_cast<float>(-i));
    EXPECT_EQ(F[i * 4 + 3], 2.0f * i);
    EXPECT_EQ(I[i * 2], i * 7);
    EXPECT_EQ(I[i * 2 + 1], -i);
    EXPECT_EQ(D[i * 2], i * 0.25);
    EXPECT_EQ(D[i * 2 + 1], 1e10 + i);
    EXPECT_EQ(U[i * 4], i);
    EXPECT_EQ(U[i * 4 + 1], i + 1);
    EXPECT_EQ(U[i * 4 + 2], 255 - i);
    EXPECT_EQ(U[i * 4 + 3], 7);
    EXPECT_EQ(S[i * 4], -i);
    EXPECT_EQ(S[i * 4 + 1], i * 100);
    EXPECT_EQ(S[i * 4 + 2], 3);
    EXPECT_EQ(S[i * 4 + 3], -32768 + i);
    for (int k = 0; k < 4; ++k) EXPECT_EQ(Q[i * 4 + k], i * (k + 1));
  }
}

// ---- special registers, warp-level, cooperative groups ---------------------------------------

TEST_P(Coverage, SpecialRegisters) {
  uint64_t dout = mem_.Alloc(64 * 8 * 8);
  Run("specials", {1, 1, 1}, {64, 1, 1}, 0, dout);
  std::vector<u64> out = mem_.Download<u64>(dout, 64 * 8);
  for (int t = 0; t < 64; ++t) {
    const u64* o = &out[t * 8];
    EXPECT_EQ(o[0], 1u) << t;
    EXPECT_EQ(o[1], 1u) << t;
    EXPECT_EQ(o[2], 1u) << t;
    EXPECT_EQ(o[3], static_cast<u64>(t % 32)) << t;
    EXPECT_EQ(o[4], 1u) << t;
    EXPECT_EQ(o[5], 1u) << t;
    EXPECT_EQ(o[6], (1u << (t % 32)) - 1) << t;
    EXPECT_EQ(o[7], 0xffffffffu) << t;
  }
}

// A clock wait ends having seen its cycles pass, and costs far fewer instructions than the
// cycles waited: each read of the clock moves it on, as the rest of an SM would meanwhile.
TEST_P(Coverage, ClockWaitsEndCheaply) {
  const int blocks = 64, threads = 256;
  const long long cycles = 1'000'000;
  uint64_t dout = mem_.Alloc(blocks * threads * 8);
  LaunchResult r = Launch(m_, mem_, "clock_wait", {blocks, 1, 1}, {threads, 1, 1}, 0, cycles, dout);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  std::vector<u64> out = mem_.Download<u64>(dout, blocks * threads);
  for (int t = 0; t < blocks * threads; ++t) ASSERT_GE(out[t], static_cast<u64>(cycles)) << t;
  // Without the per-read step each thread would loop about cycles / (32 * 5) = 6250 times.
  EXPECT_LT(r.instructions, uint64_t{blocks} * threads * 5000) << "thread-instructions";
}

std::vector<int> WarpInputs(int n) {
  std::vector<int> v(n);
  for (int t = 0; t < n; ++t) v[t] = (t * 37 + 11) % 101;
  return v;
}

TEST_P(Coverage, WarpPrimitives) {
  const int n = 64;
  std::vector<int> v = WarpInputs(n);
  uint64_t din = mem_.Upload(v), dout = mem_.Alloc(n * 16 * 4);
  Run("warp_ops", {1, 1, 1}, {n, 1, 1}, 0, din, dout);
  std::vector<int> out = mem_.Download<int>(dout, n * 16);
  int block_or = 0, block_and = 1, block_count = 0;
  for (int t = 0; t < n; ++t) {
    block_or |= v[t] == 3;
    block_and &= v[t] >= 0;
    block_count += v[t] & 1;
  }
  for (int t = 0; t < n; ++t) {
    int lane = t % 32, base = t - lane;
    auto at = [&](int l) { return v[base + l]; };
    u32 any3 = 0, any40 = 0, ballot = 0;
    bool any17 = false;
    for (int l = 0; l < 32; ++l) {
      if ((at(l) & 3) == (v[t] & 3)) any3 |= 1u << l;
      if ((at(l) & 1) == (v[t] & 1)) any40 |= 1u << l;
      if (at(l) > 50) ballot |= 1u << l;
      any17 = any17 || at(l) == 17;
    }
    int want[16] = {
        at((lane & ~7) + ((lane + 3) & 7)),
        lane % 16 >= 2 ? at(lane - 2) : v[t],
        lane % 8 + 3 < 8 ? at(lane + 3) : v[t],
        at(lane ^ 5),
        lane + 1 < 32 ? at(lane + 1) : v[t],
        at(lane ^ 1) + (lane ^ 1),
        at(0),
        static_cast<int>(any3),
        -1,
        1,
        static_cast<int>(any40),
        static_cast<int>(ballot),
        static_cast<int>(any17) | 2 | 4,
        lane < 20 ? 20 + at(19) : -1,
        999 * at(lane ^ 2),
        block_or + 2 * block_and + 4 * block_count,
    };
    for (int k = 0; k < 16; ++k) EXPECT_EQ(out[t * 16 + k], want[k]) << "t=" << t << " k=" << k;
  }
}

TEST_P(Coverage, CooperativeGroups) {
  const int n = 64;
  std::vector<int> v = WarpInputs(n);
  uint64_t din = mem_.Upload(v), dout = mem_.Alloc(n * 8 * 4);
  Run("coop_groups", {1, 1, 1}, {n, 1, 1}, 0, din, dout);
  std::vector<int> out = mem_.Download<int>(dout, n * 8);
  for (int t = 0; t < n; ++t) {
    int lane = t % 32, base = t - lane, tile = t - t % 8;
    int sum = 0, mx = v[tile], below = 0, odd_rank = 0, odd_count = 0;
    u32 ballot = 0;
    for (int l = 0; l < 32; ++l) {
      sum += v[base + l];
      if (l < lane) below += v[base + l];
      if (v[base + l] & 1) {
        ballot |= 1u << l;
        ++odd_count;
        if (l < lane) ++odd_rank;
      }
    }
    for (int k = 0; k < 8; ++k) mx = std::max(mx, v[tile + k]);
    int want[8] = {sum,
                   mx,
                   t % 8 + 1 < 8 ? v[t + 1] : v[t],
                   static_cast<int>(ballot),
                   (t / 8) * 100 + t % 8,
                   t % 4 + 40,
                   (v[t] & 1) ? odd_rank * 100 + odd_count : -1,
                   below};
    for (int k = 0; k < 8; ++k) EXPECT_EQ(out[t * 8 + k], want[k]) << "t=" << t << " k=" << k;
  }
}

// ---- calls, control flow, grids, heap, alloca --------------------------------------------------

TEST_P(Coverage, CallsWithManyParametersAndStructReturns) {
  const int n = 50;
  uint64_t dout = mem_.Alloc(n * 4 * 8);
  Run("calls", {1, 1, 1}, {64, 1, 1}, 0, dout, n);
  std::vector<double> out = mem_.Download<double>(dout, n * 4);
  for (int i = 0; i < n; ++i) {
    double d = i * 1.5 * 2.0 + static_cast<double>(1000000000000ll + i);
    int k = 0;
    for (int m = 0; m < 5; ++m) k += i * m + (i & 0x7f) - i + 7 * i + (i + 1) * (i + 2) - 5;
    EXPECT_EQ(out[i * 4 + 0], d) << i;
    EXPECT_EQ(out[i * 4 + 1], k) << i;
    EXPECT_EQ(out[i * 4 + 2], i * 0.5f * 3.0f) << i;
    EXPECT_EQ(out[i * 4 + 3], static_cast<float>(2.0f * i) * static_cast<float>(i + 1)) << i;
  }
}

TEST_P(Coverage, SwitchAndLocalArrays) {
  const int n = 100;
  std::vector<int> in(n);
  for (int i = 0; i < n; ++i) in[i] = (i * 7919) % 1000 - 300;
  uint64_t din = mem_.Upload(in), dout = mem_.Alloc(n * 2 * 4);
  Run("control", {2, 1, 1}, {64, 1, 1}, 0, din, dout, n);
  std::vector<int> out = mem_.Download<int>(dout, n * 2);
  for (int i = 0; i < n; ++i) {
    int v = in[i];
    // The kernel's switch: what each of its cases gives, and 0 past the last.
    const int cases[] = {11,    v * 3,  v - 7, v ^ 0x55, -v, v * 4,
                         v / 3, 123456, v % 5, v * v,    1,  v + 100};
    int r = (v & 15) < 12 ? cases[v & 15] : 0;
    int idx = (v * 7) % 37 < 0 ? 0 : (v * 7) % 37;
    EXPECT_EQ(out[i * 2], r) << i;
    EXPECT_EQ(out[i * 2 + 1], idx * v + (i % 37) * v) << i;
  }
}

TEST_P(Coverage, LargeThreeDimensionalGrid) {
  Dim3 grid{300, 20, 3}, block{4, 2, 2};
  size_t n = size_t{grid.x} * grid.y * grid.z * block.x * block.y * block.z;
  uint64_t dout = mem_.Alloc(n * 4), dsum = mem_.Alloc(8);
  Run("grid3d", grid, block, 0, dout, dsum);
  std::vector<u32> out = mem_.Download<u32>(dout, n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], static_cast<u32>(i) ^ 0x5a5a) << i;
  EXPECT_EQ(mem_.Download<u64>(dsum, 1)[0], u64{grid.x} * grid.y * grid.z);
}

TEST_P(Coverage, DeviceMalloc) {
  const int threads = 64, n = 10;
  uint64_t dout = mem_.Alloc(threads * 4);
  Run("device_malloc", {3, 1, 1}, {threads, 1, 1}, 0, dout, n);
  std::vector<int> out = mem_.Download<int>(dout, threads);
  for (int t = 0; t < threads; ++t) EXPECT_EQ(out[t], 45 * t) << t;
}

TEST_P(Coverage, DeviceMallocReturnsNullWhenTheHeapIsFull) {
  const KernelInfo* k = m_.module->find_kernel("device_malloc");
  ASSERT_NE(k, nullptr);
  uint64_t dout = mem_.Alloc(64 * 4);
  std::vector<uint8_t> params = PackParams(*k, dout, 1000);  // 4000 bytes per thread
  LaunchConfig cfg;
  cfg.block = {64, 1, 1};
  cfg.params = params.data();
  cfg.params_size = params.size();
  cfg.malloc_heap_bytes = 40000;  // room for 10 allocations
  LaunchResult r = m_.module->launch("device_malloc", cfg, m_.vars, mem_);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  std::vector<int> out = mem_.Download<int>(dout, 64);
  int failed = 0;
  for (int t = 0; t < 64; ++t) {
    if (out[t] == -1)
      ++failed;
    else
      EXPECT_EQ(out[t], t * 999 * 1000 / 2) << t;
  }
  EXPECT_GT(failed, 0);
  EXPECT_LT(failed, 64);
}

TEST_P(Coverage, StackAlloca) {
  const int threads = 64;
  std::vector<int> in(threads);
  for (int t = 0; t < threads; ++t) in[t] = 1 + (t * 5) % 13;
  uint64_t din = mem_.Upload(in), dout = mem_.Alloc(threads * 4);
  Run("stack_alloca", {2, 1, 1}, {threads, 1, 1}, 0, din, dout);
  std::vector<int> out = mem_.Download<int>(dout, threads);
  for (int t = 0; t < threads; ++t) {
    int n = in[t], s = 0;
    for (int k = 0; k < n; ++k) s += (k * 5) % n + t;
    EXPECT_EQ(out[t], s) << t;
  }
}

TEST_P(Coverage, FunctionPointers) {
  const int n = 40;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = i * 0.75f - 9;
  uint64_t dx = mem_.Upload(x), dout = mem_.Alloc(n * 2 * 4);
  Run("function_pointers", {1, 1, 1}, {64, 1, 1}, 0, dx, dout, n);
  std::vector<float> out = mem_.Download<float>(dout, n * 2);
  auto apply = [](int op, float a, float b) {
    return op == 0 ? a + b : op == 1 ? a * b : std::fmax(a, b) * 2.0f;
  };
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(out[i * 2], apply(i % 3, x[i], 3.0f)) << i;  // table in a .global initializer
    int local[3] = {2, 0, 1};
    EXPECT_EQ(out[i * 2 + 1], apply(local[(i / 3) % 3], x[i], -1.5f)) << i;
  }
}

// ---- sm_80 and newer -----------------------------------------------------------------------

TEST_P(CoverageSm80, WarpReductions) {
  const int n = 64;
  std::vector<int> v = WarpInputs(n);
  uint64_t din = mem_.Upload(v), dout = mem_.Alloc(n * 8 * 4);
  Run("warp_reduce_ops", {1, 1, 1}, {n, 1, 1}, 0, din, dout);
  std::vector<u32> out = mem_.Download<u32>(dout, n * 8);
  for (int t = 0; t < n; ++t) {
    int base = t - t % 32, tile = t - t % 16;
    int sum = 0, mn = 1 << 30, mx = -(1 << 30), tsum = 0;
    u32 umin = ~0u, uand = ~0u, uor = 0, uxor = 0;
    for (int l = 0; l < 32; ++l) {
      int x = v[base + l];
      u32 u = static_cast<u32>(x) * 2654435761u;
      sum += x;
      mn = std::min(mn, x - 50);
      mx = std::max(mx, x - 50);
      umin = std::min(umin, u);
      uand &= u | 0x10;
      uor |= u & 0xf0f0;
      uxor ^= u;
    }
    for (int l = 0; l < 16; ++l) tsum += v[tile + l];
    u32 want[8] = {
        static_cast<u32>(sum), static_cast<u32>(mn), static_cast<u32>(mx), umin, uand, uor, uxor,
        static_cast<u32>(tsum)};
    for (int k = 0; k < 8; ++k) EXPECT_EQ(out[t * 8 + k], want[k]) << "t=" << t << " k=" << k;
  }
}

TEST_P(CoverageSm80, PipelineAsyncCopy) {
  const int blocks = 3;
  std::vector<float> in(blocks * 256 * 4);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 97) * 0.5f - 3;
  uint64_t din = mem_.Upload(in), dout = mem_.Alloc(blocks * 128 * 4);
  Run("async_copy", {blocks, 1, 1}, {128, 1, 1}, 0, din, dout);
  std::vector<float> out = mem_.Download<float>(dout, blocks * 128);
  auto at = [&](int b, int tile, int k, int c) { return in[((b * 256 + tile * 128 + k) * 4) + c]; };
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < 128; ++t) {
      float a = at(b, 0, (t + 1) % 128, 0) + at(b, 0, t, 3);
      float c = at(b, 1, (t + 5) % 128, 1) + at(b, 1, t, 2);
      EXPECT_EQ(out[b * 128 + t], a * 2 + c) << b << " " << t;
    }
}

TEST_P(CoverageSm80, CooperativeGroupsMemcpyAsync) {
  const int blocks = 2, threads = 64, n = 300;
  std::vector<int> in(blocks * n);
  for (int i = 0; i < blocks * n; ++i) in[i] = i * 3 - 250;
  uint64_t din = mem_.Upload(in), dout = mem_.Alloc(blocks * threads * 4);
  Run("cg_memcpy_async", {blocks, 1, 1}, {threads, 1, 1}, n * 4, din, dout, n);
  std::vector<int> out = mem_.Download<int>(dout, blocks * threads);
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < threads; ++t) {
      int s = 0;
      for (int k = t; k < n; k += threads) s += in[b * n + k] * (k % 7);
      EXPECT_EQ(out[b * threads + t], s) << b << " " << t;
    }
}

TEST_P(CoverageSm80, Bfloat16Native) {
  const int n = 40;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = (i - 15) * 0.731f + 0.001f;
    y[i] = (i % 6) * 2.9f - 7.3f;
  }
  y[3] = NAN;
  uint64_t dx = mem_.Upload(x), dy = mem_.Upload(y), dout = mem_.Alloc(n * 8 * 4);
  Run("bf16_native", {1, 1, 1}, {64, 1, 1}, 0, dx, dy, dout, n);
  std::vector<u32> out = mem_.Download<u32>(dout, n * 8);
  for (int i = 0; i < n; ++i) {
    uint16_t a = Bf(x[i]), b = Bf(y[i]);
    float A = Bff(a), B = Bff(b), C = Bff(Bf(1.5f));
    auto fma = [](float p, float q, float r) {
      return Bf(static_cast<float>(static_cast<double>(p) * q + r));
    };
    if (i == 3) {
      EXPECT_EQ(out[i * 8 + 6], 0x7fffu);  // __hmax_nan
      continue;
    }
    u32 want[8] = {Bf(A + B),
                   Bf(A * B),
                   fma(A, B, A),
                   Bf(std::fmax(A, B)),
                   u32{fma(A, B, A)} | (u32{fma(B, C, B)} << 16),
                   u32{Bf(std::fmin(A, B))} | (u32{Bf(std::fmin(B, C))} << 16),
                   H(std::fmax(Hf(H(x[i])), Hf(H(y[i])))),
                   static_cast<u32>(a & 0x7fff)};
    for (int k = 0; k < 8; ++k) EXPECT_EQ(out[i * 8 + k], want[k]) << "i=" << i << " k=" << k;
  }
}

TEST_P(CoverageSm80, AtomicsAndMemoryOrders) {
  const int threads = 64;
  std::vector<uint16_t> bf = {0, 0};
  std::vector<u32> bf2 = {0};
  std::vector<int> flag = {0};
  std::vector<u64> acc = {0};
  std::vector<int> data(256, 0);
  uint64_t dbf = mem_.Upload(bf), dbf2 = mem_.Upload(bf2), dflag = mem_.Upload(flag),
           dacc = mem_.Upload(acc), ddata = mem_.Upload(data);
  Run("atomics_sm80", {1, 1, 1}, {threads, 1, 1}, 0, dbf, dbf2, dflag, dacc, ddata);
  EXPECT_EQ(mem_.Download<uint16_t>(dbf, 1)[0], Bf(64.0f));
  EXPECT_EQ(mem_.Download<u32>(dbf2, 1)[0], u32{Bf(32.0f)} | (u32{Bf(128.0f)} << 16));
  EXPECT_EQ(mem_.Download<int>(dflag, 1)[0], 1);
  EXPECT_EQ(mem_.Download<u64>(dacc, 1)[0], 63u * 64 / 2);
  data = mem_.Download<int>(ddata, 256);
  EXPECT_EQ(data[0], 42);
  for (int t = 0; t < threads; ++t) EXPECT_EQ(data[1 + t], 42 + t);
  EXPECT_EQ(data[200], 63);
}

TEST_P(CoverageSm80, VectorAtomics) {
  const int threads = 64;
  std::vector<float> a = {0, 0}, b = {0, 0, 0, 0}, sum = {0};
  uint64_t da = mem_.Upload(a), db = mem_.Upload(b), ds = mem_.Upload(sum);
  Run("vector_atomics", {1, 1, 1}, {threads, 1, 1}, 0, da, db, ds);
  EXPECT_EQ(mem_.Download<float>(da, 2), (std::vector<float>{64.0f, 32.0f}));
  EXPECT_EQ(mem_.Download<float>(db, 4), (std::vector<float>{64.0f, 128.0f, 192.0f, 504.0f}));
  // Each thread saw a distinct old value: the sum of 1.5 * k over k = 0..63.
  EXPECT_EQ(mem_.Download<float>(ds, 1)[0], 1.5f * 63 * 64 / 2);
}

}  // namespace
}  // namespace cuwire::ptx::testing
