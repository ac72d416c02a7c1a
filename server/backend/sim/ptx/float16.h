// IEEE binary16 and bfloat16 conversions, done by hand so the interpreter does not depend on
// compiler support for _Float16.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace cuwire::ptx {

inline uint32_t FloatBits(float f) { return std::bit_cast<uint32_t>(f); }
inline float BitsFloat(uint32_t b) { return std::bit_cast<float>(b); }
inline uint64_t DoubleBits(double d) { return std::bit_cast<uint64_t>(d); }
inline double BitsDouble(uint64_t b) { return std::bit_cast<double>(b); }

inline float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  if (exp == 0x1f) return BitsFloat(sign | 0x7f800000u | (man << 13));  // inf / nan
  if (exp == 0) {
    // Zero or subnormal: value = man * 2^-24, exact in float.
    float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  return BitsFloat(sign | ((exp + 112) << 23) | (man << 13));
}

// Round to nearest even (cvt.rn.f16.f32).
inline uint16_t FloatToHalf(float f) {
  uint32_t x = FloatBits(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00 |
                                 (abs > 0x7f800000u ? 0x200 | ((abs >> 13) & 0x3ff) : 0));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00);  // rounds to >= 65520
  if (abs < 0x38800000u) {
    // Result is subnormal or zero: round abs * 2^24 to an integer, ties to even.
    float scaled = BitsFloat(abs) * 16777216.0f;  // exact: power of two scaling
    float r = std::nearbyint(scaled);             // default FP env rounds ties to even
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(r));
  }
  uint32_t exp = (abs >> 23) - 112;
  uint32_t man = abs & 0x7fffff;
  uint32_t h = (exp << 10) | (man >> 13);
  uint32_t rest = man & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // carry into exponent is correct
  return static_cast<uint16_t>(sign | h);
}

inline float Bf16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

inline uint16_t FloatToBf16(float f) {
  uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // nan
  uint32_t lsb = (x >> 16) & 1;
  x += 0x7fff + lsb;
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace cuwire::ptx
