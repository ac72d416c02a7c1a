// Register-only PTX instructions. Each instruction dispatches on its opcode and type once per
// warp and then loops over the lanes, so decode cost is shared by up to 32 threads.
//
// Built with -frounding-math (see CMakeLists.txt) because directed-rounding variants (.rz, .rm,
// .rp) switch the host rounding mode around the lane loop.

#include "server/backend/sim/ptx/alu.h"

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <limits>
#include <type_traits>

#include "server/backend/sim/ptx/float16.h"

namespace cuwire::ptx {
namespace {

using u64 = uint64_t;
using i64 = int64_t;

// Switches the host FPU to a PTX directed rounding mode for one instruction.
class RoundingScope {
 public:
  explicit RoundingScope(Rounding r) {
    int mode = -1;
    if (r == Rounding::kRz) mode = FE_TOWARDZERO;
    if (r == Rounding::kRm) mode = FE_DOWNWARD;
    if (r == Rounding::kRp) mode = FE_UPWARD;
    if (mode >= 0) {
      saved_ = std::fegetround();
      std::fesetround(mode);
    }
  }
  ~RoundingScope() {
    if (saved_ >= 0) std::fesetround(saved_);
  }
  RoundingScope(const RoundingScope&) = delete;
  RoundingScope& operator=(const RoundingScope&) = delete;

 private:
  int saved_ = -1;
};

inline float F32(u64 v) { return BitsFloat(static_cast<uint32_t>(v)); }
inline u64 U32F(float f) { return FloatBits(f); }
// The bits of an f32 arithmetic result (add, sub, mul, div, min, max, fma). A NaN is the
// canonical NaN, as the GPU's single precision has no NaN payloads. The host's NaN, where two
// inputs are NaN, depends on the instruction form the compiler picked (a vectorised whole-warp
// loop may compute b + a; FmaF32's FMA clone and libm's fmaf differ), so passing it on would
// make the answer depend on the lane mask and the host CPU.
inline u64 ArithF32(float f) { return std::isnan(f) ? 0x7fffffffu : FloatBits(f); }
// min (max = false) or max of two floats: a NaN operand gives the other, and -0 is less than
// +0. fmin/fmax may return either of two zeros, and the whole-warp and per-lane loops did.
template <class F>
F MinMax(bool max, F x, F y) {
  if (std::isnan(x)) return y;
  if (std::isnan(y)) return x;
  if (x == y) return std::signbit(x) != max ? x : y;
  return (x < y) != max ? x : y;
}
inline double F64(u64 v) { return BitsDouble(v); }

inline float FlushF(float f) {
  return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.0f, f) : f;
}
inline float SatF(float f) {
  if (std::isnan(f)) return 0.0f;
  return std::min(1.0f, std::max(0.0f, f));
}
inline double SatD(double f) {
  if (std::isnan(f)) return 0.0;
  return std::min(1.0, std::max(0.0, f));
}

inline float HalfIn(Type t, uint16_t h) {
  return (t == Type::kBF16 || t == Type::kBF16x2) ? Bf16ToFloat(h) : HalfToFloat(h);
}
inline uint16_t HalfOut(Type t, float f) {
  return (t == Type::kBF16 || t == Type::kBF16x2) ? FloatToBf16(f) : FloatToHalf(f);
}

// `v` rounded per `r` to a binary format with `mant` fraction bits, minimum normal exponent
// `emin` and largest finite value `max`, returned as a double (exact in that format, or inf).
// Used for conversions to f16/bf16, which must round once from the source value.
double RoundToFormat(double v, int mant, int emin, double max, Rounding r) {
  if (std::isnan(v) || std::isinf(v) || v == 0) return v;
  double mag = std::fabs(v);
  bool neg = v < 0;
  int e;
  std::frexp(mag, &e);  // mag = f * 2^e, f in [0.5, 1): exponent of the leading bit is e - 1
  int q = std::max(e - 1, emin) - mant;
  double m = std::ldexp(mag, -q);  // exact: power-of-two scaling of a double
  switch (r) {
    case Rounding::kRz:
    case Rounding::kRzi:
      m = std::trunc(m);
      break;
    case Rounding::kRm:
    case Rounding::kRmi:
      m = neg ? std::ceil(m) : std::floor(m);
      break;
    case Rounding::kRp:
    case Rounding::kRpi:
      m = neg ? std::floor(m) : std::ceil(m);
      break;
    case Rounding::kRna:
      m = std::round(m);
      break;
    default:
      m = std::nearbyint(m);
      break;  // ties to even in the default environment
  }
  double out = std::ldexp(m, q);
  if (out > max) {
    // Past the largest finite value: to-nearest overflows to inf only at max + half an ulp
    // (which is where nearbyint lands on the next power of two); directed modes away from the
    // value's direction clamp to max.
    bool to_inf = r == Rounding::kDefault || r == Rounding::kRn || r == Rounding::kRna ||
                  ((r == Rounding::kRp || r == Rounding::kRpi) && !neg) ||
                  ((r == Rounding::kRm || r == Rounding::kRmi) && neg);
    out = to_inf ? HUGE_VAL : max;
  }
  return neg ? -out : out;
}

// Applies a float function to each 16-bit half of packed operands (1 or 2 halves).
template <class F>
u64 HalfMap(Type t, bool sat, u64 a, u64 b, u64 c, F f) {
  int n = (t == Type::kF16x2 || t == Type::kBF16x2) ? 2 : 1;
  u64 r = 0;
  for (int i = 0; i < n; ++i) {
    int sh = 16 * i;
    float x =
        f(HalfIn(t, static_cast<uint16_t>(a >> sh)), HalfIn(t, static_cast<uint16_t>(b >> sh)),
          HalfIn(t, static_cast<uint16_t>(c >> sh)));
    if (sat) x = SatF(x);
    r |= static_cast<u64>(HalfOut(t, x)) << sh;
  }
  return r;
}

double ToDouble(Type t, u64 v) {
  switch (t) {
    case Type::kF16:
      return HalfToFloat(static_cast<uint16_t>(v));
    case Type::kBF16:
      return Bf16ToFloat(static_cast<uint16_t>(v));
    case Type::kF32:
      return F32(v);
    case Type::kF64:
      return F64(v);
    default:
      return 0;
  }
}

// Float comparisons follow PTX: ordered ones are false on NaN, the *u forms true.
bool CompareFloat(Cmp c, double a, double b) {
  bool unord = std::isnan(a) || std::isnan(b);
  switch (c) {
    case Cmp::kEq:
      return !unord && a == b;
    case Cmp::kNe:
      return !unord && a != b;
    case Cmp::kLt:
    case Cmp::kLo:
      return !unord && a < b;
    case Cmp::kLe:
    case Cmp::kLs:
      return !unord && a <= b;
    case Cmp::kGt:
    case Cmp::kHi:
      return !unord && a > b;
    case Cmp::kGe:
    case Cmp::kHs:
      return !unord && a >= b;
    case Cmp::kEqu:
      return unord || a == b;
    case Cmp::kNeu:
      return unord || a != b;
    case Cmp::kLtu:
      return unord || a < b;
    case Cmp::kLeu:
      return unord || a <= b;
    case Cmp::kGtu:
      return unord || a > b;
    case Cmp::kGeu:
      return unord || a >= b;
    case Cmp::kNum:
      return !unord;
    case Cmp::kNan:
      return unord;
  }
  return false;
}

bool CompareInt(Cmp c, Type t, u64 a, u64 b) {
  int w = TypeBits(t);
  if (t == Type::kPred) w = 1;
  u64 ua = Trunc(a, w), ub = Trunc(b, w);
  i64 sa = Sext(a, w), sb = Sext(b, w);
  bool s = IsSigned(t);
  switch (c) {
    case Cmp::kEq:
    case Cmp::kEqu:
      return ua == ub;
    case Cmp::kNe:
    case Cmp::kNeu:
      return ua != ub;
    case Cmp::kLt:
    case Cmp::kLtu:
      return s ? sa < sb : ua < ub;
    case Cmp::kLe:
    case Cmp::kLeu:
      return s ? sa <= sb : ua <= ub;
    case Cmp::kGt:
    case Cmp::kGtu:
      return s ? sa > sb : ua > ub;
    case Cmp::kGe:
    case Cmp::kGeu:
      return s ? sa >= sb : ua >= ub;
    case Cmp::kLo:
      return ua < ub;
    case Cmp::kLs:
      return ua <= ub;
    case Cmp::kHi:
      return ua > ub;
    case Cmp::kHs:
      return ua >= ub;
    case Cmp::kNum:
      return true;
    case Cmp::kNan:
      return false;
  }
  return false;
}

bool Compare(Cmp c, Type t, u64 a, u64 b, bool ftz) {
  if (t == Type::kF32) {
    float x = F32(a), y = F32(b);
    if (ftz) {
      x = FlushF(x);
      y = FlushF(y);
    }
    return CompareFloat(c, x, y);
  }
  if (IsFloat(t)) return CompareFloat(c, ToDouble(t, a), ToDouble(t, b));
  return CompareInt(c, t, a, b);
}

bool Combine(BoolOp op, bool t, bool c) {
  switch (op) {
    case BoolOp::kNone:
      return t;
    case BoolOp::kAnd:
      return t && c;
    case BoolOp::kOr:
      return t || c;
    case BoolOp::kXor:
      return t != c;
  }
  return t;
}

// Float -> integer with PTX semantics: round per mode, NaN -> 0, saturate to the range.
u64 FloatToInt(double v, Rounding r, Type dt) {
  if (std::isnan(v)) return 0;
  switch (r) {
    case Rounding::kRni:
    case Rounding::kRn:
      v = std::nearbyint(v);
      break;
    case Rounding::kRmi:
    case Rounding::kRm:
      v = std::floor(v);
      break;
    case Rounding::kRpi:
    case Rounding::kRp:
      v = std::ceil(v);
      break;
    default:
      v = std::trunc(v);
      break;
  }
  int w = TypeBits(dt);
  if (IsSigned(dt)) {
    double lo = -std::ldexp(1.0, w - 1), hi = std::ldexp(1.0, w - 1);
    if (v <= lo) return Trunc(static_cast<u64>(static_cast<i64>(lo)), w);
    if (v >= hi) return Trunc((u64{1} << (w - 1)) - 1, w);
    return Trunc(static_cast<u64>(static_cast<i64>(v)), w);
  }
  double hi = std::ldexp(1.0, w);
  if (v <= 0) return 0;
  if (v >= hi) return Trunc(~u64{0}, w);
  return Trunc(static_cast<u64>(v), w);
}

u64 Cvt(const Inst& in, u64 a) {
  Type dt = in.type, st = in.type2;
  int dw = TypeBits(dt), sw = TypeBits(st);
  if (IsFloat(st)) {
    double v = ToDouble(st, a);
    if (st == Type::kF32 && in.ftz) v = FlushF(static_cast<float>(v));
    if (!IsFloat(dt)) return FloatToInt(v, in.rnd, dt);
    // Float -> float; the .rni-style modes round to an integral value in the source format.
    switch (in.rnd) {
      case Rounding::kRni:
        v = std::nearbyint(v);
        break;
      case Rounding::kRzi:
        v = std::trunc(v);
        break;
      case Rounding::kRmi:
        v = std::floor(v);
        break;
      case Rounding::kRpi:
        v = std::ceil(v);
        break;
      default:
        break;
    }
    if (in.sat) v = SatD(v);
    switch (dt) {
      case Type::kF64:
        return DoubleBits(v);
      case Type::kF32: {
        float f;
        {
          RoundingScope rs(in.rnd);
          // Volatile on both sides keeps the narrowing inside the rounding scope: GCC may move
          // a register-only conversion past the fesetround() that ends it, -frounding-math or
          // not (seen at -O2 under ASan).
          volatile double vv = v;
          volatile float fv = static_cast<float>(vv);
          f = fv;
        }
        if (in.ftz) f = FlushF(f);
        return U32F(f);
      }
      case Type::kF16:
      case Type::kBF16: {
        u64 h = ToHalfBits(dt, v, in.rnd);
        if (in.ftz && dt == Type::kF16 && (h & 0x7c00) == 0) h &= 0x8000;
        return h;
      }
      default:
        return 0;
    }
  }
  // Integer source.
  bool ss = IsSigned(st);
  i64 sv = Sext(a, sw);
  u64 uv = Trunc(a, sw);
  if (dt == Type::kF16 || dt == Type::kBF16) {
    // 64-bit integers above 2^53 are rounded twice; nvcc does not emit such conversions.
    return ToHalfBits(dt, ss ? static_cast<double>(sv) : static_cast<double>(uv), in.rnd);
  }
  if (IsFloat(dt)) {
    // Converted into volatiles inside the rounding scope, as above.
    volatile double d64 = 0;
    volatile float f32 = 0;
    {
      RoundingScope rs(in.rnd);
      if (dt == Type::kF64) {
        d64 = ss ? static_cast<double>(sv) : static_cast<double>(uv);
      } else {
        f32 = ss ? static_cast<float>(sv) : static_cast<float>(uv);
      }
    }
    switch (dt) {
      case Type::kF64:
        return DoubleBits(d64);
      case Type::kF32:
        return U32F(f32);
      case Type::kF16:
        return FloatToHalf(f32);
      case Type::kBF16:
        return FloatToBf16(f32);
      default:
        return 0;
    }
  }
  if (in.sat) {
    __int128 v = ss ? static_cast<__int128>(sv) : static_cast<__int128>(uv);
    __int128 lo, hi;
    if (IsSigned(dt)) {
      lo = -(static_cast<__int128>(1) << (dw - 1));
      hi = (static_cast<__int128>(1) << (dw - 1)) - 1;
    } else {
      lo = 0;
      hi = (static_cast<__int128>(1) << dw) - 1;
    }
    v = std::min(hi, std::max(lo, v));
    return Trunc(static_cast<u64>(v), dw);
  }
  return Trunc(ss ? static_cast<u64>(sv) : uv, dw);
}

u64 Bfe(Type t, u64 a, u64 pos_in, u64 len_in) {
  int w = TypeBits(t);
  u64 pos = pos_in & 0xff, len = len_in & 0xff;
  if (len == 0) return 0;
  u64 field = 0;
  u64 nbits = 0;
  if (pos < static_cast<u64>(w)) {
    nbits = std::min<u64>(len, w - pos);
    field = Trunc(Trunc(a, w) >> pos, static_cast<int>(nbits));
  }
  if (IsSigned(t)) {
    u64 sbit_pos = std::min<u64>(pos + len - 1, w - 1);
    bool sbit = (a >> sbit_pos) & 1;
    if (sbit) field |= ~Trunc(~u64{0}, static_cast<int>(nbits));
  }
  return Trunc(field, w);
}

u64 Bfi(Type t, u64 a, u64 b, u64 pos_in, u64 len_in) {
  int w = TypeBits(t);
  u64 pos = pos_in & 0xff, len = len_in & 0xff;
  if (len == 0 || pos >= static_cast<u64>(w)) return Trunc(b, w);
  int n = static_cast<int>(std::min<u64>(len, w - pos));
  u64 m = Trunc(~u64{0}, n) << pos;
  return Trunc((b & ~m) | ((a << pos) & m), w);
}

u64 Prmt(u64 a, u64 b, u64 c) {
  u64 tmp = (Trunc(b, 32) << 32) | Trunc(a, 32);
  u64 r = 0;
  for (int i = 0; i < 4; ++i) {
    unsigned sel = (c >> (4 * i)) & 0xf;
    u64 byte = (tmp >> (8 * (sel & 7))) & 0xff;
    if (sel & 8) byte = (byte & 0x80) ? 0xff : 0;
    r |= byte << (8 * i);
  }
  return r;
}

u64 Brev(u64 v, int w) {
  u64 r = 0;
  for (int i = 0; i < w; ++i) r |= ((v >> i) & 1) << (w - 1 - i);
  return r;
}

// setp on 32- and 64-bit integers with the comparison chosen once, not per lane. T is the
// type's signed or unsigned C++ counterpart; false where the comparison needs the general path.
template <class T>
bool SetpInt(Cmp c, u64* d, const u64* a, const u64* b, uint32_t mask) {
  using U = std::make_unsigned_t<T>;
  auto run = [&](auto op) {
    ForLanes(mask, [&](int l) { d[l] = op(static_cast<T>(a[l]), static_cast<T>(b[l])); });
  };
  auto unsigned_run = [&](auto op) {
    ForLanes(mask, [&](int l) { d[l] = op(static_cast<U>(a[l]), static_cast<U>(b[l])); });
  };
  switch (c) {
    case Cmp::kEq:
    case Cmp::kEqu:
      unsigned_run([](U x, U y) { return x == y; });
      return true;
    case Cmp::kNe:
    case Cmp::kNeu:
      unsigned_run([](U x, U y) { return x != y; });
      return true;
    case Cmp::kLt:
    case Cmp::kLtu:
      run([](T x, T y) { return x < y; });
      return true;
    case Cmp::kLe:
    case Cmp::kLeu:
      run([](T x, T y) { return x <= y; });
      return true;
    case Cmp::kGt:
    case Cmp::kGtu:
      run([](T x, T y) { return x > y; });
      return true;
    case Cmp::kGe:
    case Cmp::kGeu:
      run([](T x, T y) { return x >= y; });
      return true;
    case Cmp::kLo:
      unsigned_run([](U x, U y) { return x < y; });
      return true;
    case Cmp::kLs:
      unsigned_run([](U x, U y) { return x <= y; });
      return true;
    case Cmp::kHi:
      unsigned_run([](U x, U y) { return x > y; });
      return true;
    case Cmp::kHs:
      unsigned_run([](U x, U y) { return x >= y; });
      return true;
    default:
      return false;
  }
}

bool SetpIntTyped(Cmp c, Type t, u64* d, const u64* a, const u64* b, uint32_t mask) {
  switch (t) {
    case Type::kS32:
      return SetpInt<int32_t>(c, d, a, b, mask);
    case Type::kU32:
    case Type::kB32:
      return SetpInt<uint32_t>(c, d, a, b, mask);
    case Type::kS64:
      return SetpInt<int64_t>(c, d, a, b, mask);
    case Type::kU64:
    case Type::kB64:
      return SetpInt<uint64_t>(c, d, a, b, mask);
    default:
      return false;
  }
}

// Integer binary ops specialised on width so the lane loop is branch-free.
template <int W, class F>
void IntLoop(u64* d, const u64* a, const u64* b, uint32_t mask, F f) {
  ForLanes(mask, [&](int l) { d[l] = Trunc(f(a[l], b[l]), W); });
}
template <class F>
void IntBinary(int w, u64* d, const u64* a, const u64* b, uint32_t mask, F f) {
  switch (w) {
    case 32:
      IntLoop<32>(d, a, b, mask, f);
      break;
    case 64:
      IntLoop<64>(d, a, b, mask, f);
      break;
    case 16:
      IntLoop<16>(d, a, b, mask, f);
      break;
    case 8:
      IntLoop<8>(d, a, b, mask, f);
      break;
    default:
      IntLoop<1>(d, a, b, mask, f);
      break;  // .pred logic
  }
}

// `bit_op`: f32 is a bit operation (copysign), whose NaN results keep their payload.
template <class F32Op, class F64Op>
void FloatBinary(const Inst& in, u64* d, const u64* a, const u64* b, uint32_t mask, F32Op f32,
                 F64Op f64, bool bit_op = false) {
  RoundingScope rs(in.rnd);
  if (in.type == Type::kF32) {
    bool ftz = in.ftz, sat = in.sat;
    ForLanes(mask, [&](int l) {
      float x = F32(a[l]), y = F32(b[l]);
      if (ftz) {
        x = FlushF(x);
        y = FlushF(y);
      }
      float r = f32(x, y);
      if (ftz) r = FlushF(r);
      if (sat) r = SatF(r);
      d[l] = bit_op ? U32F(r) : ArithF32(r);
    });
  } else if (in.type == Type::kF64) {
    ForLanes(mask, [&](int l) {
      double r = f64(F64(a[l]), F64(b[l]));
      if (in.sat) r = SatD(r);
      d[l] = DoubleBits(r);
    });
  } else {
    ForLanes(mask, [&](int l) {
      d[l] = HalfMap(in.type, in.sat, a[l], b[l], 0,
                     [&](float x, float y, float) { return f32(x, y); });
    });
  }
}

template <class F32Op, class F64Op>
void FloatUnary(const Inst& in, u64* d, const u64* a, uint32_t mask, F32Op f32, F64Op f64) {
  if (in.type == Type::kF32) {
    bool ftz = in.ftz;
    ForLanes(mask, [&](int l) {
      float x = F32(a[l]);
      if (ftz) x = FlushF(x);
      float r = f32(x);
      if (ftz) r = FlushF(r);
      if (in.sat) r = SatF(r);
      d[l] = U32F(r);
    });
  } else if (in.type == Type::kF64) {
    ForLanes(mask, [&](int l) { d[l] = DoubleBits(f64(F64(a[l]))); });
  } else {
    ForLanes(mask, [&](int l) {
      d[l] = HalfMap(in.type, in.sat, a[l], 0, 0, [&](float x, float, float) { return f32(x); });
    });
  }
}

u64 MulHi(Type t, u64 a, u64 b) {
  int w = TypeBits(t);
  if (IsSigned(t)) {
    __int128 p = static_cast<__int128>(Sext(a, w)) * Sext(b, w);
    return Trunc(static_cast<u64>(p >> w), w);
  }
  unsigned __int128 p = static_cast<unsigned __int128>(Trunc(a, w)) * Trunc(b, w);
  return Trunc(static_cast<u64>(p >> w), w);
}

u64 MulWide(Type t, u64 a, u64 b) {
  int w = TypeBits(t);
  if (IsSigned(t)) return Trunc(static_cast<u64>(Sext(a, w) * Sext(b, w)), 2 * w);
  return Trunc(Trunc(a, w) * Trunc(b, w), 2 * w);
}

u64 Mul24(Type t, u64 a, u64 b, bool hi) {
  i64 p;
  if (IsSigned(t))
    p = Sext(a, 24) * Sext(b, 24);
  else
    p = static_cast<i64>(Trunc(a, 24) * Trunc(b, 24));
  return Trunc(static_cast<u64>(hi ? (p >> 16) : p), 32);
}

u64 IntDiv(Type t, u64 a, u64 b) {
  int w = TypeBits(t);
  if (IsSigned(t)) {
    i64 x = Sext(a, w), y = Sext(b, w);
    if (y == 0) return Trunc(~u64{0}, w);
    if (y == -1) return Trunc(u64{0} - static_cast<u64>(x), w);  // INT_MIN / -1 wraps
    return Trunc(static_cast<u64>(x / y), w);
  }
  u64 x = Trunc(a, w), y = Trunc(b, w);
  if (y == 0) return Trunc(~u64{0}, w);
  return x / y;
}

u64 IntRem(Type t, u64 a, u64 b) {
  int w = TypeBits(t);
  if (IsSigned(t)) {
    i64 x = Sext(a, w), y = Sext(b, w);
    if (y == 0) return Trunc(static_cast<u64>(x), w);
    if (y == -1) return 0;
    return Trunc(static_cast<u64>(x % y), w);
  }
  u64 x = Trunc(a, w), y = Trunc(b, w);
  if (y == 0) return x;
  return x % y;
}

u64 AbsBits(Type t, u64 a) {
  switch (t) {
    case Type::kF32:
      return a & 0x7fffffffu;
    case Type::kF64:
      return a & 0x7fffffffffffffffull;
    case Type::kF16:
    case Type::kBF16:
      return a & 0x7fff;
    case Type::kF16x2:
    case Type::kBF16x2:
      return a & 0x7fff7fffu;
    default: {
      int w = TypeBits(t);
      i64 v = Sext(a, w);
      return Trunc(v < 0 ? u64{0} - static_cast<u64>(v) : static_cast<u64>(v), w);
    }
  }
}

u64 NegBits(Type t, u64 a) {
  switch (t) {
    case Type::kF32:
      return (a ^ 0x80000000u) & 0xffffffffu;
    case Type::kF64:
      return a ^ 0x8000000000000000ull;
    case Type::kF16:
    case Type::kBF16:
      return (a ^ 0x8000) & 0xffff;
    case Type::kF16x2:
    case Type::kBF16x2:
      return (a ^ 0x80008000u) & 0xffffffffu;
    default:
      return Trunc(u64{0} - a, TypeBits(t));
  }
}

bool Testp(TestpOp op, Type t, u64 a) {
  double v = ToDouble(t, a);
  int c = t == Type::kF32 ? std::fpclassify(F32(a)) : std::fpclassify(v);
  switch (op) {
    case TestpOp::kFinite:
      return std::isfinite(v);
    case TestpOp::kInfinite:
      return std::isinf(v);
    case TestpOp::kNumber:
      return !std::isnan(v);
    case TestpOp::kNotANumber:
      return std::isnan(v);
    case TestpOp::kNormal:
      return c == FP_NORMAL;
    case TestpOp::kSubnormal:
      return c == FP_SUBNORMAL;
  }
  return false;
}

// Element `i` of a packed value: `bits` wide, sign-extended if `sign`.
inline i64 Elem(u64 v, int i, int bits, bool sign) {
  u64 e = Trunc(v >> (i * bits), bits);
  return sign ? Sext(e, bits) : static_cast<i64>(e);
}

// add/sub/min/max on .u16x2 / .s16x2.
u64 Packed16(Op op, Type t, u64 a, u64 b) {
  bool sign = t == Type::kS16x2;
  u64 r = 0;
  for (int i = 0; i < 2; ++i) {
    i64 x = Elem(a, i, 16, sign), y = Elem(b, i, 16, sign);
    i64 v = op == Op::kAdd   ? x + y
            : op == Op::kSub ? x - y
            : op == Op::kMin ? std::min(x, y)
                             : std::max(x, y);
    r |= Trunc(static_cast<u64>(v), 16) << (16 * i);
  }
  return r;
}

u64 Bfind(Type t, u64 a, bool shiftamt) {
  int w = TypeBits(t);
  u64 v = Trunc(a, w);
  if (IsSigned(t) && Sext(v, w) < 0) v = Trunc(~v, w);  // first bit that differs from the sign
  if (v == 0) return 0xffffffffu;
  u64 pos = static_cast<u64>(63 - __builtin_clzll(v));
  return shiftamt ? static_cast<u64>(w - 1) - pos : pos;
}

// dp4a / dp2a{.lo,.hi}: 32-bit wrapping dot products of bytes (b) with bytes / halves (a).
u64 DotProduct(const Inst& in, u64 a, u64 b, u64 c) {
  bool sa = IsSigned(in.type), sb = IsSigned(in.type2);
  i64 acc = static_cast<i64>(Trunc(c, 32));
  if (in.op == Op::kDp4a) {
    for (int i = 0; i < 4; ++i) acc += Elem(a, i, 8, sa) * Elem(b, i, 8, sb);
  } else {
    int first = in.mod ? 2 : 0;
    for (int i = 0; i < 2; ++i) acc += Elem(a, i, 16, sa) * Elem(b, first + i, 8, sb);
  }
  return Trunc(static_cast<u64>(acc), 32);
}

// vabsdiff2 / vabsdiff4 with the default mask and selectors: per-element |a - b|, or with .add
// their sum plus c.
u64 Vabsdiff(const Inst& in, u64 a, u64 b, u64 c) {
  int n = in.vec, bits = 32 / n;
  bool sa = IsSigned(in.type), sb = IsSigned(in.type2);
  u64 r = 0;
  i64 sum = 0;
  for (int i = 0; i < n; ++i) {
    i64 x = Elem(a, i, bits, sa), y = Elem(b, i, bits, sb);
    i64 v = x > y ? x - y : y - x;
    sum += v;
    r |= Trunc(static_cast<u64>(v), bits) << (bits * i);
  }
  return in.mod ? Trunc(static_cast<u64>(sum) + c, 32) : r;
}

inline Type HalfElem(Type t) { return t == Type::kBF16x2 ? Type::kBF16 : Type::kF16; }
inline bool IsPackedHalf(Type t) { return t == Type::kF16x2 || t == Type::kBF16x2; }

// fma.f32 without ftz or saturation, the bulk of a matrix product's instructions: one loop in
// which the compiler uses the CPU's FMA instruction where it has one (the version is chosen when
// the server loads), else libm's fmaf. Either rounds once, in the current rounding mode.
__attribute__((target_clones("fma", "default"))) void FmaF32(u64* d, const u64* a, const u64* b,
                                                             const u64* c, uint32_t mask) {
  if (mask == ~uint32_t{0}) {
    for (int l = 0; l < 32; ++l) d[l] = ArithF32(std::fma(F32(a[l]), F32(b[l]), F32(c[l])));
    return;
  }
  while (mask) {
    const int l = __builtin_ctz(mask);
    mask &= mask - 1;
    d[l] = ArithF32(std::fma(F32(a[l]), F32(b[l]), F32(c[l])));
  }
}

}  // namespace

uint16_t ToHalfBits(Type t, double v, Rounding r) {
  bool bf = t == Type::kBF16 || t == Type::kBF16x2;
  if (std::isnan(v)) return 0x7fff;  // the canonical NaN, as the GPU converts any NaN
  double x = bf ? RoundToFormat(v, 7, -126, 0x1.fep127, r) : RoundToFormat(v, 10, -14, 65504.0, r);
  // x is exact in the target format (or inf), so the nearest-even conversions below are exact.
  return bf ? FloatToBf16(static_cast<float>(x)) : FloatToHalf(static_cast<float>(x));
}

bool ExecAlu(const Inst& in, u64* R, uint32_t mask) {
  u64* d = R + static_cast<size_t>(in.d[0]) * 32;
  const u64* a = in.s[0] != kNoSlot ? R + static_cast<size_t>(in.s[0]) * 32 : nullptr;
  const u64* b = in.s[1] != kNoSlot ? R + static_cast<size_t>(in.s[1]) * 32 : nullptr;
  const u64* c = in.s[2] != kNoSlot ? R + static_cast<size_t>(in.s[2]) * 32 : nullptr;
  const Type t = in.type;
  const int w = TypeBits(t);
  const bool is_float = IsFloat(t);

  switch (in.op) {
    case Op::kAdd:
      if (is_float) {
        FloatBinary(
            in, d, a, b, mask, [](float x, float y) { return x + y; },
            [](double x, double y) { return x + y; });
      } else if (t == Type::kU16x2 || t == Type::kS16x2) {
        ForLanes(mask, [&](int l) { d[l] = Packed16(in.op, t, a[l], b[l]); });
      } else if (in.sat) {  // add.sat.s32
        ForLanes(mask, [&](int l) {
          i64 r = Sext(a[l], 32) + Sext(b[l], 32);
          d[l] = Trunc(static_cast<u64>(std::clamp<i64>(r, INT32_MIN, INT32_MAX)), 32);
        });
      } else {
        IntBinary(w, d, a, b, mask, [](u64 x, u64 y) { return x + y; });
      }
      return true;
    case Op::kSub:
      if (is_float) {
        FloatBinary(
            in, d, a, b, mask, [](float x, float y) { return x - y; },
            [](double x, double y) { return x - y; });
      } else if (t == Type::kU16x2 || t == Type::kS16x2) {
        ForLanes(mask, [&](int l) { d[l] = Packed16(in.op, t, a[l], b[l]); });
      } else if (in.sat) {
        ForLanes(mask, [&](int l) {
          i64 r = Sext(a[l], 32) - Sext(b[l], 32);
          d[l] = Trunc(static_cast<u64>(std::clamp<i64>(r, INT32_MIN, INT32_MAX)), 32);
        });
      } else {
        IntBinary(w, d, a, b, mask, [](u64 x, u64 y) { return x - y; });
      }
      return true;
    case Op::kMulLo:
      if (is_float) {
        FloatBinary(
            in, d, a, b, mask, [](float x, float y) { return x * y; },
            [](double x, double y) { return x * y; });
      } else {
        IntBinary(w, d, a, b, mask, [](u64 x, u64 y) { return x * y; });
      }
      return true;
    case Op::kMulHi:
      ForLanes(mask, [&](int l) { d[l] = MulHi(t, a[l], b[l]); });
      return true;
    case Op::kMulWide:
      if (t == Type::kS32) {
        ForLanes(mask, [&](int l) {
          d[l] = static_cast<u64>(static_cast<i64>(static_cast<int32_t>(a[l])) *
                                  static_cast<int32_t>(b[l]));
        });
      } else {
        ForLanes(mask, [&](int l) { d[l] = MulWide(t, a[l], b[l]); });
      }
      return true;
    case Op::kMadLo:
      if (w == 32) {
        ForLanes(mask, [&](int l) { d[l] = Trunc(a[l] * b[l] + c[l], 32); });
      } else {
        ForLanes(mask, [&](int l) { d[l] = Trunc(a[l] * b[l] + c[l], w); });
      }
      return true;
    case Op::kMadHi:
      ForLanes(mask, [&](int l) { d[l] = Trunc(MulHi(t, a[l], b[l]) + c[l], w); });
      return true;
    case Op::kMadWide:
      ForLanes(mask, [&](int l) { d[l] = Trunc(MulWide(t, a[l], b[l]) + c[l], 2 * w); });
      return true;
    case Op::kMul24Lo:
    case Op::kMul24Hi:
      ForLanes(mask, [&](int l) { d[l] = Mul24(t, a[l], b[l], in.op == Op::kMul24Hi); });
      return true;
    case Op::kMad24Lo:
    case Op::kMad24Hi:
      ForLanes(mask, [&](int l) {
        d[l] = Trunc(Mul24(t, a[l], b[l], in.op == Op::kMad24Hi) + c[l], 32);
      });
      return true;
    case Op::kFma: {
      RoundingScope rs(in.rnd);
      if (t == Type::kF32 && !in.ftz && !in.sat) {
        FmaF32(d, a, b, c, mask);
      } else if (t == Type::kF32) {
        bool ftz = in.ftz, sat = in.sat;
        ForLanes(mask, [&](int l) {
          float x = F32(a[l]), y = F32(b[l]), z = F32(c[l]);
          if (ftz) {
            x = FlushF(x);
            y = FlushF(y);
            z = FlushF(z);
          }
          float r = std::fma(x, y, z);
          if (ftz) r = FlushF(r);
          if (sat) r = SatF(r);
          d[l] = ArithF32(r);
        });
      } else if (t == Type::kF64) {
        ForLanes(mask, [&](int l) {
          double r = std::fma(F64(a[l]), F64(b[l]), F64(c[l]));
          if (in.sat) r = SatD(r);
          d[l] = DoubleBits(r);
        });
      } else {
        ForLanes(mask, [&](int l) {
          d[l] = HalfMap(t, in.sat, a[l], b[l], c[l],
                         [](float x, float y, float z) { return std::fma(x, y, z); });
        });
      }
      return true;
    }
    case Op::kAddCC:
    case Op::kAddC:
    case Op::kSubCC:
    case Op::kSubC: {
      u64* carry = R + static_cast<size_t>(kSlotCarry) * 32;
      bool use_carry = in.op == Op::kAddC || in.op == Op::kSubC;
      bool set_carry = in.op == Op::kAddCC || in.op == Op::kSubCC || in.mod;
      bool sub = in.op == Op::kSubCC || in.op == Op::kSubC;
      ForLanes(mask, [&](int l) {
        unsigned __int128 x = Trunc(a[l], w), y = Trunc(b[l], w);
        unsigned __int128 cin = use_carry ? (carry[l] & 1) : 0;
        unsigned __int128 r = sub ? x - y - cin : x + y + cin;
        d[l] = Trunc(static_cast<u64>(r), w);
        // Carry out of bit w (for subtraction: the borrow).
        if (set_carry) carry[l] = static_cast<u64>((r >> w) & 1);
      });
      return true;
    }
    case Op::kDiv:
      if (is_float) {
        FloatBinary(
            in, d, a, b, mask, [](float x, float y) { return x / y; },
            [](double x, double y) { return x / y; });
      } else {
        ForLanes(mask, [&](int l) { d[l] = IntDiv(t, a[l], b[l]); });
      }
      return true;
    case Op::kRem:
      ForLanes(mask, [&](int l) { d[l] = IntRem(t, a[l], b[l]); });
      return true;
    case Op::kAbs:
      ForLanes(mask, [&](int l) {
        u64 r = AbsBits(t, a[l]);
        if (t == Type::kF32 && in.ftz) r = U32F(FlushF(F32(r)));
        d[l] = r;
      });
      return true;
    case Op::kNeg:
      ForLanes(mask, [&](int l) {
        u64 r = NegBits(t, a[l]);
        if (t == Type::kF32 && in.ftz) r = U32F(FlushF(F32(r)));
        d[l] = r;
      });
      return true;
    case Op::kMin:
    case Op::kMax: {
      bool mx = in.op == Op::kMax;
      if (is_float && in.nan) {
        // .NaN: a NaN operand gives the canonical NaN (0x7fffffff, 0x7fff for 16-bit types).
        FloatBinary(
            in, d, a, b, mask,
            [mx](float x, float y) {
              if (std::isnan(x) || std::isnan(y)) return BitsFloat(0x7fffffffu);
              return MinMax(mx, x, y);
            },
            [mx](double x, double y) {
              if (std::isnan(x) || std::isnan(y)) return BitsDouble(0x7fffffffffffffffull);
              return MinMax(mx, x, y);
            });
      } else if (is_float) {
        FloatBinary(
            in, d, a, b, mask, [mx](float x, float y) { return MinMax(mx, x, y); },
            [mx](double x, double y) { return MinMax(mx, x, y); });
      } else if (t == Type::kU16x2 || t == Type::kS16x2) {
        ForLanes(mask, [&](int l) { d[l] = Packed16(in.op, t, a[l], b[l]); });
      } else if (IsSigned(t)) {
        ForLanes(mask, [&](int l) {
          i64 x = Sext(a[l], w), y = Sext(b[l], w);
          d[l] = Trunc(static_cast<u64>(mx ? std::max(x, y) : std::min(x, y)), w);
        });
      } else {
        ForLanes(mask, [&](int l) {
          u64 x = Trunc(a[l], w), y = Trunc(b[l], w);
          d[l] = mx ? std::max(x, y) : std::min(x, y);
        });
      }
      return true;
    }
    case Op::kAnd:
      IntBinary(w, d, a, b, mask, [](u64 x, u64 y) { return x & y; });
      return true;
    case Op::kOr:
      IntBinary(w, d, a, b, mask, [](u64 x, u64 y) { return x | y; });
      return true;
    case Op::kXor:
      IntBinary(w, d, a, b, mask, [](u64 x, u64 y) { return x ^ y; });
      return true;
    case Op::kNot:
      ForLanes(mask, [&](int l) { d[l] = Trunc(~a[l], w); });
      return true;
    case Op::kCnot:
      ForLanes(mask, [&](int l) { d[l] = Trunc(a[l], w) == 0 ? 1 : 0; });
      return true;
    case Op::kShl:
      ForLanes(mask, [&](int l) {
        u64 n = Trunc(b[l], 32);
        d[l] = n >= static_cast<u64>(w) ? 0 : Trunc(a[l] << n, w);
      });
      return true;
    case Op::kShr:
      if (IsSigned(t)) {
        ForLanes(mask, [&](int l) {
          u64 n = std::min<u64>(Trunc(b[l], 32), w - 1);
          d[l] = Trunc(static_cast<u64>(Sext(a[l], w) >> n), w);
        });
      } else {
        ForLanes(mask, [&](int l) {
          u64 n = Trunc(b[l], 32);
          d[l] = n >= static_cast<u64>(w) ? 0 : Trunc(a[l], w) >> n;
        });
      }
      return true;
    case Op::kShfL:
    case Op::kShfR: {
      bool left = in.op == Op::kShfL, clamp = in.mod != 0;
      ForLanes(mask, [&](int l) {
        u64 v = (Trunc(b[l], 32) << 32) | Trunc(a[l], 32);
        u64 n = Trunc(c[l], 32);
        n = clamp ? std::min<u64>(n, 32) : (n & 31);
        d[l] = left ? Trunc((v << n) >> 32, 32) : Trunc(v >> n, 32);
      });
      return true;
    }
    case Op::kLop3: {
      uint32_t lut = in.aux;
      ForLanes(mask, [&](int l) {
        u64 r = 0;
        for (int i = 0; i < 8; ++i) {
          if (!((lut >> i) & 1)) continue;
          r |= ((i & 4) ? a[l] : ~a[l]) & ((i & 2) ? b[l] : ~b[l]) & ((i & 1) ? c[l] : ~c[l]);
        }
        d[l] = Trunc(r, w);
      });
      return true;
    }
    case Op::kBfe:
      ForLanes(mask, [&](int l) { d[l] = Bfe(t, a[l], b[l], c[l]); });
      return true;
    case Op::kBmsk:
      ForLanes(mask, [&](int l) {
        u64 pos = a[l] & 0xffffffffu, width = b[l] & 0xffffffffu;
        if (in.aux) {  // .wrap
          pos &= 31;
          width &= 31;
        } else {  // .clamp
          pos = std::min<u64>(pos, 32);
          width = std::min<u64>(width, 32);
        }
        d[l] = (((u64{1} << width) - 1) << pos) & 0xffffffffu;
      });
      return true;
    case Op::kBfi: {
      const u64* e = R + static_cast<size_t>(in.s[3]) * 32;
      ForLanes(mask, [&](int l) { d[l] = Bfi(t, a[l], b[l], c[l], e[l]); });
      return true;
    }
    case Op::kBrev:
      ForLanes(mask, [&](int l) { d[l] = Brev(Trunc(a[l], w), w); });
      return true;
    case Op::kPopc:
      ForLanes(mask, [&](int l) { d[l] = static_cast<u64>(__builtin_popcountll(Trunc(a[l], w))); });
      return true;
    case Op::kClz:
      ForLanes(mask, [&](int l) {
        u64 v = Trunc(a[l], w);
        d[l] = v == 0 ? static_cast<u64>(w) : static_cast<u64>(__builtin_clzll(v) - (64 - w));
      });
      return true;
    case Op::kPrmt:
      ForLanes(mask, [&](int l) { d[l] = Prmt(a[l], b[l], c[l]); });
      return true;
    case Op::kSelp:
      ForLanes(mask, [&](int l) { d[l] = Trunc(c[l] ? a[l] : b[l], w); });
      return true;
    case Op::kSetp: {
      Cmp cmp = static_cast<Cmp>(in.mod);
      u64* q = in.d[1] != kNoSlot ? R + static_cast<size_t>(in.d[1]) * 32 : nullptr;
      bool neg_c = in.vec != 0 && in.bool_op != BoolOp::kNone;
      if (IsPackedHalf(in.type2)) {
        // setp.f16x2 p|q: p from the lower halves, q from the upper halves.
        Type et = HalfElem(in.type2);
        ForLanes(mask, [&](int l) {
          bool cv = c ? ((c[l] != 0) != neg_c) : false;
          d[l] = Combine(in.bool_op, Compare(cmp, et, Trunc(a[l], 16), Trunc(b[l], 16), false), cv);
          if (q)
            q[l] =
                Combine(in.bool_op,
                        Compare(cmp, et, Trunc(a[l] >> 16, 16), Trunc(b[l] >> 16, 16), false), cv);
        });
        return true;
      }
      // The common case, kept tight.
      if (in.bool_op == BoolOp::kNone && q == nullptr &&
          SetpIntTyped(cmp, in.type2, d, a, b, mask)) {
        return true;
      }
      ForLanes(mask, [&](int l) {
        bool r = Compare(cmp, in.type2, a[l], b[l], in.ftz);
        bool cv = c ? ((c[l] != 0) != neg_c) : false;
        bool p = Combine(in.bool_op, r, cv);
        bool np = Combine(in.bool_op, !r, cv);
        d[l] = p;
        if (q) q[l] = np;
      });
      return true;
    }
    case Op::kSet: {
      Cmp cmp = static_cast<Cmp>(in.mod);
      bool neg_c = in.vec != 0 && in.bool_op != BoolOp::kNone;
      if (IsPackedHalf(in.type2)) {
        // Each 16-bit half of d holds its halves' result: 1.0 for f16x2/bf16x2, else all ones.
        Type et = HalfElem(in.type2);
        u64 one = t == Type::kF16x2 ? 0x3c00 : t == Type::kBF16x2 ? 0x3f80 : 0xffff;
        ForLanes(mask, [&](int l) {
          bool cv = c ? ((c[l] != 0) != neg_c) : false;
          u64 r = 0;
          for (int i = 0; i < 2; ++i) {
            bool v =
                Compare(cmp, et, Trunc(a[l] >> (16 * i), 16), Trunc(b[l] >> (16 * i), 16), false);
            if (Combine(in.bool_op, v, cv)) r |= one << (16 * i);
          }
          d[l] = r;
        });
        return true;
      }
      ForLanes(mask, [&](int l) {
        bool r = Compare(cmp, in.type2, a[l], b[l], in.ftz);
        bool cv = c ? ((c[l] != 0) != neg_c) : false;
        r = Combine(in.bool_op, r, cv);
        if (t == Type::kF32)
          d[l] = r ? U32F(1.0f) : 0;
        else
          d[l] = r ? Trunc(~u64{0}, w) : 0;
      });
      return true;
    }
    case Op::kSlct:
      ForLanes(mask, [&](int l) {
        bool ge = in.type2 == Type::kF32 ? F32(c[l]) >= 0.0f : Sext(c[l], 32) >= 0;
        d[l] = Trunc(ge ? a[l] : b[l], w);
      });
      return true;
    case Op::kMov:
      if (w == 64) {
        ForLanes(mask, [&](int l) { d[l] = a[l]; });
      } else {
        ForLanes(mask, [&](int l) { d[l] = Trunc(a[l], w); });
      }
      return true;
    case Op::kPack: {
      int n = in.vec, ew = w / n;
      ForLanes(mask, [&](int l) {
        u64 r = 0;
        for (int i = 0; i < n; ++i)
          r |= Trunc(R[static_cast<size_t>(in.s[i]) * 32 + l], ew) << (i * ew);
        d[l] = r;
      });
      return true;
    }
    case Op::kUnpack: {
      int n = in.vec, ew = w / n;
      ForLanes(mask, [&](int l) {
        u64 v = a[l];  // read before any destination (which may alias the source) is written
        for (int i = 0; i < n; ++i)
          R[static_cast<size_t>(in.d[i]) * 32 + l] = Trunc(v >> (i * ew), ew);
      });
      return true;
    }
    case Op::kCvt:
      if (t == Type::kF16x2 || t == Type::kBF16x2) {
        // cvt.rn.f16x2.f32 d, a, b: d = {a -> upper half, b -> lower half}.
        ForLanes(mask, [&](int l) {
          u64 hi = ToHalfBits(t, ToDouble(in.type2, a[l]), in.rnd);
          u64 lo = ToHalfBits(t, ToDouble(in.type2, b[l]), in.rnd);
          d[l] = (hi << 16) | lo;
        });
        return true;
      }
      if (t == Type::kS64 && in.type2 == Type::kS32) {
        ForLanes(mask, [&](int l) { d[l] = static_cast<u64>(Sext(a[l], 32)); });
      } else if (t == Type::kU64 && in.type2 == Type::kU32) {
        ForLanes(mask, [&](int l) { d[l] = Trunc(a[l], 32); });
      } else {
        ForLanes(mask, [&](int l) { d[l] = Cvt(in, a[l]); });
      }
      return true;
    case Op::kSqrt: {
      RoundingScope rs(in.rnd);
      FloatUnary(
          in, d, a, mask, [](float x) { return std::sqrt(x); },
          [](double x) { return std::sqrt(x); });
      return true;
    }
    case Op::kRsqrt:
      FloatUnary(
          in, d, a, mask, [](float x) { return 1.0f / std::sqrt(x); },
          [](double x) { return 1.0 / std::sqrt(x); });
      return true;
    case Op::kRcp: {
      RoundingScope rs(in.rnd);
      FloatUnary(
          in, d, a, mask, [](float x) { return 1.0f / x; }, [](double x) { return 1.0 / x; });
      return true;
    }
    case Op::kEx2:
      FloatUnary(
          in, d, a, mask, [](float x) { return std::exp2(x); },
          [](double x) { return std::exp2(x); });
      return true;
    case Op::kLg2:
      FloatUnary(
          in, d, a, mask, [](float x) { return std::log2(x); },
          [](double x) { return std::log2(x); });
      return true;
    case Op::kSin:
      FloatUnary(
          in, d, a, mask, [](float x) { return std::sin(x); },
          [](double x) { return std::sin(x); });
      return true;
    case Op::kCos:
      FloatUnary(
          in, d, a, mask, [](float x) { return std::cos(x); },
          [](double x) { return std::cos(x); });
      return true;
    case Op::kTanh:
      FloatUnary(
          in, d, a, mask, [](float x) { return std::tanh(x); },
          [](double x) { return std::tanh(x); });
      return true;
    case Op::kCopysign:
      // copysign d, a, b: the magnitude of b with the sign of a.
      FloatBinary(
          in, d, a, b, mask, [](float x, float y) { return std::copysign(y, x); },
          [](double x, double y) { return std::copysign(y, x); }, /*bit_op=*/true);
      return true;
    case Op::kTestp:
      ForLanes(mask, [&](int l) { d[l] = Testp(static_cast<TestpOp>(in.mod), t, a[l]); });
      return true;
    case Op::kMadCarry: {
      u64* carry = R + static_cast<size_t>(kSlotCarry) * 32;
      bool cin = in.mod & 1, cout = in.mod & 2, hi = in.mod & 4;
      ForLanes(mask, [&](int l) {
        u64 p = hi ? MulHi(t, a[l], b[l]) : Trunc(a[l] * b[l], w);
        unsigned __int128 r =
            static_cast<unsigned __int128>(p) + Trunc(c[l], w) + (cin ? (carry[l] & 1) : 0);
        d[l] = Trunc(static_cast<u64>(r), w);
        if (cout) carry[l] = static_cast<u64>((r >> w) & 1);
      });
      return true;
    }
    case Op::kBfind:
      ForLanes(mask, [&](int l) { d[l] = Bfind(t, a[l], in.mod != 0); });
      return true;
    case Op::kDp4a:
    case Op::kDp2a:
      ForLanes(mask, [&](int l) { d[l] = DotProduct(in, a[l], b[l], c[l]); });
      return true;
    case Op::kSad:
      ForLanes(mask, [&](int l) {
        bool greater =
            IsSigned(t) ? Sext(a[l], w) > Sext(b[l], w) : Trunc(a[l], w) > Trunc(b[l], w);
        u64 diff = greater ? a[l] - b[l] : b[l] - a[l];  // exact modulo 2^w
        d[l] = Trunc(diff + c[l], w);
      });
      return true;
    case Op::kVabsdiff:
      ForLanes(mask, [&](int l) { d[l] = Vabsdiff(in, a[l], b[l], c[l]); });
      return true;
    default:
      return false;
  }
}

bool ExecAluReference(const Inst& in, u64* R, uint32_t mask) {
  const Type t = in.type;
  const int w = TypeBits(t);
  // Integer add/sub/mul.lo/and/or/xor wrap at the type's width; .pred logic at one bit.
  const int int_bits = w == 8 || w == 16 || w == 32 || w == 64 ? w : 1;
  const bool plain_int = !IsFloat(t) && t != Type::kU16x2 && t != Type::kS16x2 && !in.sat;
  for (uint32_t m = mask; m; m &= m - 1) {
    const int l = __builtin_ctz(m);
    auto src = [&](int i) {
      return in.s[i] == kNoSlot ? 0 : R[static_cast<size_t>(in.s[i]) * 32 + l];
    };
    const u64 a = src(0), b = src(1), c = src(2);
    u64* d = R + static_cast<size_t>(in.d[0]) * 32 + l;
    switch (in.op) {
      case Op::kAdd:
        if (!plain_int) break;
        *d = Trunc(a + b, int_bits);
        continue;
      case Op::kSub:
        if (!plain_int) break;
        *d = Trunc(a - b, int_bits);
        continue;
      case Op::kMulLo:
        if (IsFloat(t)) break;
        *d = Trunc(a * b, int_bits);
        continue;
      case Op::kAnd:
        *d = Trunc(a & b, int_bits);
        continue;
      case Op::kOr:
        *d = Trunc(a | b, int_bits);
        continue;
      case Op::kXor:
        *d = Trunc(a ^ b, int_bits);
        continue;
      case Op::kMulWide:
        *d = MulWide(t, a, b);
        continue;
      case Op::kMadLo:
        *d = Trunc(a * b + c, w);
        continue;
      case Op::kFma: {
        if (t != Type::kF32) break;
        RoundingScope rs(in.rnd);
        float x = F32(a), y = F32(b), z = F32(c);
        if (in.ftz) {
          x = FlushF(x);
          y = FlushF(y);
          z = FlushF(z);
        }
        float r = std::fma(x, y, z);
        if (in.ftz) r = FlushF(r);
        if (in.sat) r = SatF(r);
        *d = ArithF32(r);
        continue;
      }
      case Op::kSetp: {
        if (IsPackedHalf(in.type2)) break;
        const bool neg_c = in.vec != 0 && in.bool_op != BoolOp::kNone;
        const bool r = Compare(static_cast<Cmp>(in.mod), in.type2, a, b, in.ftz);
        const bool cv = in.s[2] != kNoSlot && ((c != 0) != neg_c);
        const bool p = Combine(in.bool_op, r, cv), np = Combine(in.bool_op, !r, cv);
        *d = p;
        if (in.d[1] != kNoSlot) R[static_cast<size_t>(in.d[1]) * 32 + l] = np;
        continue;
      }
      case Op::kMov:
        *d = Trunc(a, w);
        continue;
      case Op::kCvt:
        if (t == Type::kF16x2 || t == Type::kBF16x2) break;
        *d = Cvt(in, a);
        continue;
      default:
        break;
    }
    // No specialisation: ExecAlu's general code, one lane at a time.
    if (!ExecAlu(in, R, 1u << l)) return false;
  }
  return true;
}

}  // namespace cuwire::ptx
