// Register-only instructions (arithmetic, logic, conversions, comparisons), executed for the
// lanes of one warp. Internal to the interpreter.
#pragma once

#include <cstdint>

#include "server/backend/sim/ptx/program.h"

namespace cuwire::ptx {

// Executes `in` for every lane in `mask`. `regs` is the warp's register file (slot * 32 + lane).
// Returns false if `in.op` is not a register-only instruction.
bool ExecAlu(const Inst& in, uint64_t* regs, uint32_t mask);

// ExecAlu's results computed the plain way, for LaunchConfig::reference: lane by lane through
// the general helpers, without ExecAlu's specialisations (width-specialised integer loops,
// setp with the comparison chosen once per warp, the f32 fma loop, the mov/cvt/mul.wide/mad.lo
// shortcuts, ForLanes' whole-warp loop). A new specialisation in ExecAlu needs its plain form
// here, and its instruction in tests/ptx/fastpath_test.cc's generator.
bool ExecAluReference(const Inst& in, uint64_t* regs, uint32_t mask);

// `v` converted to f16 (t = kF16/kF16x2) or bf16 (kBF16/kBF16x2) bits, rounded once per `r`.
uint16_t ToHalfBits(Type t, double v, Rounding r);

inline uint64_t Trunc(uint64_t v, int bits) {
  return bits >= 64 ? v : v & ((uint64_t{1} << bits) - 1);
}
inline int64_t Sext(uint64_t v, int bits) {
  if (bits >= 64) return static_cast<int64_t>(v);
  int sh = 64 - bits;
  return static_cast<int64_t>(v << sh) >> sh;
}

// Lanes in ascending order. A whole warp runs as a plain loop, which the compiler unrolls and,
// where the body allows, vectorises.
template <class F>
inline void ForLanes(uint32_t mask, F&& f) {
  if (mask == ~uint32_t{0}) {
    for (int l = 0; l < 32; ++l) f(l);
    return;
  }
  while (mask) {
    f(__builtin_ctz(mask));
    mask &= mask - 1;
  }
}

}  // namespace cuwire::ptx
