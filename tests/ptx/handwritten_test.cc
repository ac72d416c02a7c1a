// Hand-written PTX: error paths and instructions nvcc rarely emits from the test kernels.

#include <cmath>
#include <cstdint>

#include "tests/ptx/harness.h"

namespace cuwire::ptx::testing {
namespace {

// Wraps `body` in a kernel `k(.param .u64 out)` with %r, %rd, %f, %fd, %p, %rs registers;
// %rd1 = out (global address), %r1 = tid.x, %rd2 = out + tid.x * kSlots * 8.
std::string Kernel(const std::string& body, const std::string& extra = "") {
  return std::string(kHeader) + extra +
         Entry("k", ".param .u64 out",
               {".pred %p<8>", ".b16 %rs<8>", ".b32 %r<32>", ".b64 %rd<16>", ".f32 %f<16>",
                ".f64 %fd<8>"},
               R"(  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 512;
  add.s64 %rd2, %rd1, %rd3;
)" + body + R"(
  ret;
)");
}

constexpr int kSlots = 64;

// Runs the kernel with `threads` threads; each owns kSlots 64-bit output slots at %rd2.
std::vector<uint64_t> RunSlots(const std::string& body, int threads = 1,
                               const std::string& extra = "") {
  FakeGlobalMemory mem;
  LoadedModule m = LoadPtx(Kernel(body, extra), mem);
  if (!m.module) return std::vector<uint64_t>(kSlots * threads, 0xdeadbeef);
  uint64_t out = mem.Alloc(threads * kSlots * 8);
  LaunchResult r = Launch(m, mem, "k", {1, 1, 1}, {static_cast<uint32_t>(threads), 1, 1}, 0, out);
  EXPECT_EQ(r.error, LaunchError::kNone) << r.message;
  return mem.Download<uint64_t>(out, threads * kSlots);
}

// `st.global.u64 [%rd2+8*slot], reg;`
std::string Out(int slot, const std::string& reg) {
  return "  st.global.u64 [%rd2+" + std::to_string(slot * 8) + "], " + reg + ";\n";
}
// Stores predicate %p1 as 0/1 into `slot`.
std::string OutPred(int slot) { return "  selp.u64 %rd9, 1, 0, %p1;\n" + Out(slot, "%rd9"); }
uint64_t F32(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
uint64_t F64(double d) {
  uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}

TEST(PtxHandwritten, UnknownOpcodeFailsLaunchNamingIt) {
  FakeGlobalMemory mem;
  std::string text = Kernel(R"(
  @%p1 frobnicate.b32 %r2, %r1;
  st.global.u64 [%rd2], 1;
)");
  LoadedModule m = LoadPtx(text, mem);
  ASSERT_TRUE(m.module);  // the module stays loadable
  uint64_t out = mem.Alloc(8);
  LaunchResult r = Launch(m, mem, "k", {1, 1, 1}, {1, 1, 1}, 0, out);
  EXPECT_EQ(r.error, LaunchError::kUnsupportedOpcode);
  EXPECT_NE(r.message.find("frobnicate.b32"), std::string::npos) << r.message;
}

TEST(PtxHandwritten, UnsupportedInstructionOnlyFailsWhenExecuted) {
  FakeGlobalMemory mem;
  std::string text = Kernel(R"(
  setp.ne.s32 %p1, %r1, 0;
  @%p1 bra SKIP;
  st.global.u64 [%rd2], 42;
  bra.uni DONE;
SKIP:
  sust.p.2d.v4.b32.trap [%rd1, {%r1, %r2}], {%r3, %r4, %r5, %r6};
DONE:
)");
  LoadedModule m = LoadPtx(text, mem);
  ASSERT_TRUE(m.module);
  uint64_t out = mem.Alloc(64);
  LaunchResult r = Launch(m, mem, "k", {1, 1, 1}, {1, 1, 1}, 0, out);
  EXPECT_EQ(r.error, LaunchError::kNone) << r.message;
  EXPECT_EQ(mem.Download<uint64_t>(out, 1)[0], 42u);
  r = Launch(m, mem, "k", {1, 1, 1}, {2, 1, 1}, 0, out);
  EXPECT_EQ(r.error, LaunchError::kUnsupportedOpcode);
  EXPECT_NE(r.message.find("sust.p.2d.v4.b32.trap"), std::string::npos) << r.message;
}

TEST(PtxHandwritten, MalformedPtxReportsLine) {
  std::string error;
  std::string text = std::string(kHeader) + R"(.visible .entry k()
{
  .reg .b32 %r<4>;
  add.s32 %r1, %r2 %r3;
  ret;
}
)";
  EXPECT_EQ(Module::parse(text, &error), nullptr);
  EXPECT_NE(error.find("line 8"), std::string::npos) << error;

  error.clear();
  text = std::string(kHeader) + ".visible .entry k()\n{\n  add.s32 %r1, %r2, %r3;\n  ret;\n}\n";
  EXPECT_EQ(Module::parse(text, &error), nullptr);
  EXPECT_NE(error.find("line 7"), std::string::npos) << error;
  EXPECT_NE(error.find("%r1"), std::string::npos) << error;

  error.clear();
  EXPECT_EQ(Module::parse(".version 8.0\n.visible .entry k(\n", &error), nullptr);
  EXPECT_NE(error.find("line"), std::string::npos) << error;

  error.clear();
  text = std::string(kHeader) + ".visible .entry k()\n{\n  bra.uni NOWHERE;\n}\n";
  EXPECT_EQ(Module::parse(text, &error), nullptr);
  EXPECT_NE(error.find("NOWHERE"), std::string::npos) << error;
}

TEST(PtxHandwritten, InvalidLaunches) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadPtx(Kernel(""), mem);
  ASSERT_TRUE(m.module);
  LaunchConfig cfg;
  uint64_t out = 0;
  cfg.params = &out;
  cfg.params_size = 8;
  EXPECT_EQ(m.module->launch("nope", cfg, m.vars, mem).error, LaunchError::kInvalidLaunch);
  cfg.params_size = 4;
  EXPECT_EQ(m.module->launch("k", cfg, m.vars, mem).error, LaunchError::kInvalidLaunch);
  cfg.params_size = 8;
  cfg.block = {2048, 1, 1};
  EXPECT_EQ(m.module->launch("k", cfg, m.vars, mem).error, LaunchError::kInvalidLaunch);
  cfg.block = {0, 1, 1};
  EXPECT_EQ(m.module->launch("k", cfg, m.vars, mem).error, LaunchError::kInvalidLaunch);
}

TEST(PtxHandwritten, TrapAndInstructionLimit) {
  LaunchResult r;
  FakeGlobalMemory mem;
  LoadedModule m = LoadPtx(Kernel("  trap;\n"), mem);
  ASSERT_TRUE(m.module);
  uint64_t out = mem.Alloc(8);
  r = Launch(m, mem, "k", {1, 1, 1}, {1, 1, 1}, 0, out);
  EXPECT_EQ(r.error, LaunchError::kTrap);

  LoadedModule spin = LoadPtx(Kernel("LOOP:\n  bra.uni LOOP;\n"), mem);
  ASSERT_TRUE(spin.module);
  const KernelInfo* k = spin.module->find_kernel("k");
  LaunchConfig cfg;
  cfg.params = &out;
  cfg.params_size = 8;
  cfg.block = {64, 1, 1};
  cfg.max_instructions = 100000;
  r = spin.module->launch("k", cfg, spin.vars, mem);
  EXPECT_EQ(r.error, LaunchError::kTimeout);
  EXPECT_NE(k, nullptr);
}

TEST(PtxHandwritten, ComparisonsAndSelection) {
  std::string body = R"(
  mov.f32 %f1, 0f7FC00000;
  mov.f32 %f2, 0f3F800000;
  mov.u32 %r2, -1;
  setp.lt.f32 %p1, %f1, %f2;
)" + OutPred(0) + "  setp.ltu.f32 %p1, %f1, %f2;\n" +
                     OutPred(1) + "  setp.nan.f32 %p1, %f1, %f2;\n" + OutPred(2) +
                     "  setp.num.f32 %p1, %f2, %f2;\n" + OutPred(3) +
                     "  setp.ne.f32 %p1, %f1, %f2;\n" + OutPred(4) +
                     "  setp.neu.f32 %p1, %f1, %f2;\n" + OutPred(5) +
                     "  setp.lo.u32 %p1, %r2, 1;\n" + OutPred(6) + "  setp.lt.s32 %p1, %r2, 1;\n" +
                     OutPred(7) + "  setp.hi.u32 %p1, %r2, 1;\n" + OutPred(8) +
                     "  setp.eq.s32 %p2, %r1, 0;\n"
                     "  setp.gt.or.s32 %p1|%p3, %r2, 0, %p2;\n" +
                     OutPred(9) + "  selp.u64 %rd9, 1, 0, %p3;\n" + Out(10, "%rd9") +
                     "  setp.ge.and.f32 %p1, %f2, %f2, !%p2;\n" + OutPred(11) + R"(
  set.lt.u32.s32 %r3, %r2, 0;
  cvt.u64.u32 %rd9, %r3;
)" + Out(12, "%rd9") +
                     R"(
  set.gt.f32.f32 %f3, %f2, 0f00000000;
  mov.b32 %r3, %f3;
  cvt.u64.u32 %rd9, %r3;
)" + Out(13, "%rd9") +
                     R"(
  slct.s32.s32 %r4, 10, 20, %r2;
  cvt.u64.u32 %rd9, %r4;
)" + Out(14, "%rd9") +
                     R"(
  mov.u64 %rd4, -5;
  setp.lt.s64 %p1, %rd4, 3;
)" + OutPred(15) + "  setp.lt.u64 %p1, %rd4, 3;\n" +
                     OutPred(16) + R"(
  mov.f64 %fd1, 0d3FF0000000000000;
  setp.geu.f64 %p1, %fd1, 0d4000000000000000;
)" + OutPred(17) + R"(
  testp.notanumber.f32 %p1, %f1;
)" + OutPred(18) + "  testp.finite.f32 %p1, %f2;\n" +
                     OutPred(19) + "  testp.subnormal.f32 %p1, 0f00000001;\n" + OutPred(20) +
                     "  not.pred %p1, %p2;\n" + OutPred(21) + "  xor.pred %p1, %p2, 1;\n" +
                     OutPred(22);
  std::vector<uint64_t> o = RunSlots(body);
  std::vector<uint64_t> expect = {0,           1,         1,  1, 0, 1, 0, 1, 1, 1, 1, 0,
                                  0xffffffffu, F32(1.0f), 20, 1, 0, 0, 1, 1, 1, 0, 0};
  for (size_t i = 0; i < expect.size(); ++i) EXPECT_EQ(o[i], expect[i]) << "slot " << i;
}

// Every integer comparison on 32- and 64-bit operands, across a whole warp and across part of
// one: each lane compares its own value (-16..15, as 32 and as 64 bits) with 3 and with -2,
// as the host does.
TEST(PtxHandwritten, IntegerComparisonsPerLane) {
  struct Case {
    const char* cmp;
    const char* type;
  };
  const std::vector<Case> cases = {
      {"eq", "b32"}, {"ne", "b32"}, {"eq", "s32"}, {"ne", "u32"}, {"lt", "s32"}, {"le", "s32"},
      {"gt", "s32"}, {"ge", "s32"}, {"lt", "u32"}, {"le", "u32"}, {"gt", "u32"}, {"ge", "u32"},
      {"lo", "u32"}, {"ls", "u32"}, {"hi", "u32"}, {"hs", "u32"}, {"eq", "b64"}, {"ne", "s64"},
      {"lt", "s64"}, {"le", "s64"}, {"gt", "s64"}, {"ge", "s64"}, {"lt", "u64"}, {"ge", "u64"},
      {"lo", "u64"}, {"ls", "u64"}, {"hi", "u64"}, {"hs", "u64"}};
  std::string body = R"(
  sub.s32 %r2, %r1, 16;
  cvt.s64.s32 %rd4, %r2;
)";
  int slot = 0;
  for (const char* rhs : {"3", "-2"}) {
    for (const Case& c : cases) {
      const bool wide = c.type[1] == '6';
      body += std::string("  setp.") + c.cmp + "." + c.type + " %p1, " + (wide ? "%rd4" : "%r2") +
              ", " + rhs + ";\n" + OutPred(slot++);
    }
  }
  // The same comparisons where only the odd lanes run them.
  std::string diverged = body;
  diverged.replace(diverged.find("  setp."), 0,
                   "  and.b32 %r3, %r1, 1;\n  setp.eq.u32 %p2, %r3, 0;\n  @%p2 bra DONE;\n");
  diverged += "DONE:\n";
  for (bool half : {false, true}) {
    std::vector<uint64_t> o = RunSlots(half ? diverged : body, 32);
    for (int l = 0; l < 32; ++l) {
      if (half && l % 2 == 0) continue;
      const int64_t v = l - 16;
      int k = 0;
      for (int64_t rhs : {int64_t{3}, int64_t{-2}}) {
        for (const Case& c : cases) {
          const bool wide = c.type[1] == '6';
          const bool is_signed = c.type[0] == 's';
          // 32-bit operands compare their low words; 64-bit ones the whole register.
          const uint64_t ua = wide ? static_cast<uint64_t>(v) : static_cast<uint32_t>(v);
          const uint64_t ub = wide ? static_cast<uint64_t>(rhs) : static_cast<uint32_t>(rhs);
          const std::string cmp = c.cmp;
          bool want;
          if (cmp == "eq")
            want = ua == ub;
          else if (cmp == "ne")
            want = ua != ub;
          else if (cmp == "lo")
            want = ua < ub;
          else if (cmp == "ls")
            want = ua <= ub;
          else if (cmp == "hi")
            want = ua > ub;
          else if (cmp == "hs")
            want = ua >= ub;
          else if (is_signed) {
            want = cmp == "lt"   ? v < rhs
                   : cmp == "le" ? v <= rhs
                   : cmp == "gt" ? v > rhs
                                 : v >= rhs;
          } else {
            want = cmp == "lt"   ? ua < ub
                   : cmp == "le" ? ua <= ub
                   : cmp == "gt" ? ua > ub
                                 : ua >= ub;
          }
          EXPECT_EQ(o[static_cast<size_t>(l) * kSlots + k], want ? 1u : 0u)
              << "setp." << c.cmp << "." << c.type << " " << v << ", " << rhs << " in lane " << l
              << (half ? " (odd lanes only)" : "");
          ++k;
        }
      }
    }
  }
}

TEST(PtxHandwritten, Conversions) {
  std::string body = R"(
  mov.f32 %f1, 0f40200000;
  cvt.rni.s32.f32 %r2, %f1;
  cvt.s64.s32 %rd4, %r2;
)" + Out(0, "%rd4") + R"(
  neg.f32 %f2, %f1;
  cvt.rmi.s32.f32 %r2, %f2;
  cvt.s64.s32 %rd4, %r2;
)" + Out(1, "%rd4") + R"(
  cvt.rpi.s32.f32 %r2, %f1;
  cvt.s64.s32 %rd4, %r2;
)" + Out(2, "%rd4") + R"(
  cvt.rzi.s32.f32 %r2, %f2;
  cvt.s64.s32 %rd4, %r2;
)" + Out(3, "%rd4") + R"(
  cvt.rni.s32.f32 %r2, 0f501502F9;
  cvt.u64.u32 %rd4, %r2;
)" + Out(4, "%rd4") + R"(
  cvt.rzi.u32.f32 %r2, 0fC0A00000;
  cvt.u64.u32 %rd4, %r2;
)" + Out(5, "%rd4") + R"(
  mov.u32 %r3, 300;
  cvt.sat.u8.s32 %r2, %r3;
  cvt.u64.u32 %rd4, %r2;
)" + Out(6, "%rd4") + R"(
  mov.u32 %r3, 128;
  cvt.s64.s8 %rd4, %r3;
)" + Out(7, "%rd4") + R"(
  mov.f64 %fd1, 0d3FD5555555555555;
  cvt.rz.f32.f64 %f3, %fd1;
  mov.b32 %r2, %f3;
  cvt.u64.u32 %rd4, %r2;
)" + Out(8, "%rd4") + R"(
  cvt.rn.f32.f64 %f3, %fd1;
  mov.b32 %r2, %f3;
  cvt.u64.u32 %rd4, %r2;
)" + Out(9, "%rd4") + R"(
  cvt.sat.f32.f32 %f3, 0f3FC00000;
  mov.b32 %r2, %f3;
  cvt.u64.u32 %rd4, %r2;
)" + Out(10, "%rd4") +
                     R"(
  cvt.f64.f32 %fd2, %f1;
  mov.b64 %rd4, %fd2;
)" + Out(11, "%rd4") +
                     R"(
  mov.u64 %rd5, -7;
  cvt.rn.f64.s64 %fd2, %rd5;
  mov.b64 %rd4, %fd2;
)" + Out(12, "%rd4") +
                     R"(
  cvt.rni.f32.f32 %f3, 0f40300000;
  mov.b32 %r2, %f3;
  cvt.u64.u32 %rd4, %r2;
)" + Out(13, "%rd4") +
                     R"(
  cvt.rn.f16.f32 %rs1, 0f3E800000;
  cvt.u64.u16 %rd4, %rs1;
)" + Out(14, "%rd4") +
                     R"(
  cvt.rn.bf16.f32 %rs1, 0f3F808000;
  cvt.u64.u16 %rd4, %rs1;
)" + Out(15, "%rd4") +
                     R"(
  cvt.rn.f16x2.f32 %r2, 0f3F800000, 0f40000000;
  cvt.u64.u32 %rd4, %r2;
)" + Out(16, "%rd4") +
                     R"(
  mov.b32 %r2, 0x3C004000;
  add.f16x2 %r3, %r2, %r2;
  cvt.u64.u32 %rd4, %r3;
)" + Out(17, "%rd4") +
                     R"(
  cvt.rzi.s64.f64 %rd4, 0dC3E0000000000001;
)" + Out(18, "%rd4");
  std::vector<uint64_t> o = RunSlots(body);
  std::vector<uint64_t> expect = {2,
                                  static_cast<uint64_t>(-3),
                                  3,
                                  static_cast<uint64_t>(-2),
                                  0x7fffffff,
                                  0,
                                  255,
                                  static_cast<uint64_t>(-128),
                                  0x3eaaaaaa,
                                  0x3eaaaaab,
                                  F32(1.0f),
                                  F64(2.5),
                                  F64(-7.0),
                                  F32(3.0f),
                                  0x3400,
                                  0x3f80,
                                  0x3c004000,
                                  0x40004400,
                                  0x8000000000000000ull};
  for (size_t i = 0; i < expect.size(); ++i) EXPECT_EQ(o[i], expect[i]) << "slot " << i;
}

TEST(PtxHandwritten, IntegerAndBitInstructions) {
  std::string body = R"(
  bfe.u32 %r2, 0xF0F0F0F0, 4, 8;
  cvt.u64.u32 %rd4, %r2;
)" + Out(0, "%rd4") + R"(
  bfe.s32 %r2, 0x00000F80, 7, 5;
  cvt.u64.u32 %rd4, %r2;
)" + Out(1, "%rd4") + R"(
  bfi.b32 %r2, 0xAB, 0x12345678, 8, 8;
  cvt.u64.u32 %rd4, %r2;
)" + Out(2, "%rd4") + R"(
  shf.l.wrap.b32 %r2, 0x80000000, 1, 4;
  cvt.u64.u32 %rd4, %r2;
)" + Out(3, "%rd4") + R"(
  shf.r.clamp.b32 %r2, 0x10, 1, 4;
  cvt.u64.u32 %rd4, %r2;
)" + Out(4, "%rd4") + R"(
  lop3.b32 %r2, 0xF0, 0xCC, 0xAA, 0x96;
  cvt.u64.u32 %rd4, %r2;
)" + Out(5, "%rd4") + R"(
  mov.u64 %rd5, 0x00F0000000000001;
  popc.b64 %r2, %rd5;
  clz.b64 %r3, %rd5;
  mul.wide.u32 %rd4, %r2, 1000;
  cvt.u64.u32 %rd6, %r3;
  add.s64 %rd4, %rd4, %rd6;
)" + Out(6, "%rd4") + R"(
  mov.u64 %rd5, -3;
  mul.hi.u64 %rd4, %rd5, %rd5;
)" + Out(7, "%rd4") + R"(
  mul.hi.s64 %rd4, %rd5, 0x7000000000000000;
)" + Out(8, "%rd4") + R"(
  mov.u32 %r5, 0xFFFFFFFF;
  add.cc.u32 %r2, %r5, 1;
  addc.u32 %r3, 5, 0;
  mov.b64 %rd4, {%r2, %r3};
)" + Out(9, "%rd4") + R"(
  sub.cc.u32 %r2, 0, 1;
  subc.u32 %r3, 10, 0;
  mov.b64 %rd4, {%r2, %r3};
)" + Out(10, "%rd4") +
                     R"(
  mul24.hi.u32 %r2, 0x00FFFFFF, 0x00FFFFFF;
  cvt.u64.u32 %rd4, %r2;
)" + Out(11, "%rd4") +
                     R"(
  mad.wide.s32 %rd4, -3, 1000000000, 7;
)" + Out(12, "%rd4") +
                     R"(
  mov.b64 {%r2, %r3}, 0x1122334455667788;
  cvt.u64.u32 %rd4, %r3;
)" + Out(13, "%rd4") +
                     R"(
  shr.s32 %r2, -64, 40;
  cvt.s64.s32 %rd4, %r2;
)" + Out(14, "%rd4") +
                     R"(
  shl.b32 %r2, 1, 32;
  cvt.u64.u32 %rd4, %r2;
)" + Out(15, "%rd4") +
                     R"(
  abs.s32 %r2, -17;
  neg.s32 %r3, %r2;
  min.s32 %r4, %r3, 3;
  max.u32 %r5, %r3, 3;
  cvt.s64.s32 %rd4, %r4;
  cvt.u64.u32 %rd5, %r5;
  xor.b64 %rd4, %rd4, %rd5;
)" + Out(16, "%rd4") +
                     R"(
  div.s32 %r2, -2147483648, -1;
  rem.s32 %r3, -7, 0;
  mov.b64 %rd4, {%r2, %r3};
)" + Out(17, "%rd4") +
                     R"(
  brev.b64 %rd4, 1;
)" + Out(18, "%rd4") +
                     R"(
  prmt.b32 %r2, 0x80, 0, 0x8888;
  cvt.u64.u32 %rd4, %r2;
)" + Out(19, "%rd4") +
                     R"(
  cnot.b32 %r2, 0;
  not.b32 %r3, 0;
  mov.b64 %rd4, {%r2, %r3};
)" + Out(20, "%rd4") +
                     R"(
  mov.b16 %rs1, 0xFFFF;
  add.u16 %rs2, %rs1, 2;
  cvt.u64.u16 %rd4, %rs2;
)" + Out(21, "%rd4") +
                     R"(
  add.sat.s32 %r2, 2147483647, 10;
  cvt.u64.u32 %rd4, %r2;
)" + Out(22, "%rd4");
  std::vector<uint64_t> o = RunSlots(body);
  int64_t wide = -3LL * 1000000000LL + 7;
  std::vector<uint64_t> expect = {
      0x0F,
      0xffffffffu,
      0x1234AB78,
      0x18,
      0x10000001,
      0x96,
      5 * 1000 + 8,
      0xfffffffffffffffaull,
      static_cast<uint64_t>((static_cast<__int128>(-3) * 0x7000000000000000LL) >> 64),
      (uint64_t{6} << 32) | 0,
      (uint64_t{9} << 32) | 0xffffffffu,
      0xfffffe00u,
      static_cast<uint64_t>(wide),
      0x11223344,
      static_cast<uint64_t>(-1),
      0,
      static_cast<uint64_t>(-17) ^ 0xffffffefu,
      0x80000000u | (uint64_t{0xfffffff9} << 32),
      0x8000000000000000ull,
      0xffffffffu,
      1 | (uint64_t{0xffffffff} << 32),
      1,
      0x7fffffff};
  for (size_t i = 0; i < expect.size(); ++i) EXPECT_EQ(o[i], expect[i]) << "slot " << i;
}

TEST(PtxHandwritten, FloatMath) {
  std::string body = R"(
  rcp.rn.f64 %fd1, 0d4008000000000000;
  mov.b64 %rd4, %fd1;
)" + Out(0, "%rd4") + R"(
  sqrt.rn.f32 %f1, 0f40800000;
  mov.b32 %r2, %f1;
  cvt.u64.u32 %rd4, %r2;
)" + Out(1, "%rd4") + R"(
  ex2.approx.f32 %f1, 0f40400000;
  lg2.approx.f32 %f2, 0f41000000;
  add.f32 %f1, %f1, %f2;
  mov.b32 %r2, %f1;
  cvt.u64.u32 %rd4, %r2;
)" + Out(2, "%rd4") + R"(
  copysign.f32 %f1, 0fBF800000, 0f40000000;
  mov.b32 %r2, %f1;
  cvt.u64.u32 %rd4, %r2;
)" + Out(3, "%rd4") + R"(
  min.f32 %f1, 0f7FC00000, 0f40000000;
  mov.b32 %r2, %f1;
  cvt.u64.u32 %rd4, %r2;
)" + Out(4, "%rd4") + R"(
  div.rn.f64 %fd1, 0d3FF0000000000000, 0d4008000000000000;
  mov.b64 %rd4, %fd1;
)" + Out(5, "%rd4") + R"(
  abs.f64 %fd1, 0dC000000000000000;
  neg.f64 %fd1, %fd1;
  mov.b64 %rd4, %fd1;
)" + Out(6, "%rd4") + R"(
  add.rz.f32 %f1, 0f3F800000, 0f33800001;
  add.rn.f32 %f2, 0f3F800000, 0f33800001;
  mov.b32 %r2, %f1;
  mov.b32 %r3, %f2;
  mov.b64 %rd4, {%r2, %r3};
)" + Out(7, "%rd4") + R"(
  mul.ftz.f32 %f1, 0f00400000, 0f3F800000;
  mov.b32 %r2, %f1;
  cvt.u64.u32 %rd4, %r2;
)" + Out(8, "%rd4") + R"(
  fma.rn.sat.f32 %f1, 0f40000000, 0f40000000, 0f00000000;
  mov.b32 %r2, %f1;
  cvt.u64.u32 %rd4, %r2;
)" + Out(9, "%rd4") + R"(
  sin.approx.f32 %f1, 0f00000000;
  cos.approx.f32 %f2, 0f00000000;
  add.f32 %f1, %f1, %f2;
  tanh.approx.f32 %f2, 0f00000000;
  add.f32 %f1, %f1, %f2;
  rsqrt.approx.f32 %f2, 0f40800000;
  add.f32 %f1, %f1, %f2;
  mov.b32 %r2, %f1;
  cvt.u64.u32 %rd4, %r2;
)" + Out(10, "%rd4");
  std::vector<uint64_t> o = RunSlots(body);
  std::vector<uint64_t> expect = {F64(1.0 / 3.0),
                                  F32(2.0f),
                                  F32(11.0f),
                                  F32(-2.0f),
                                  F32(2.0f),
                                  F64(1.0 / 3.0),
                                  F64(-2.0),
                                  F32(1.0f) | (uint64_t{F32(1.0f + 0x1p-23f)} << 32),
                                  0,
                                  F32(1.0f),
                                  F32(1.5f)};
  for (size_t i = 0; i < expect.size(); ++i) EXPECT_EQ(o[i], expect[i]) << "slot " << i;
}

TEST(PtxHandwritten, MemorySpacesAndVectors) {
  std::string extra = R"(
.global .align 8 .b8 gbuf[32] = {1, 2, 3, 4, 5, 6, 7, 8};
.const .align 4 .u32 ctab[4] = {10, 20, 30, 40};
.shared .align 16 .b8 sbuf[64];
)";
  std::string body = R"(
  .local .align 8 .b8 depot[16];
  ld.global.u64 %rd4, [gbuf];
)" + Out(0, "%rd4") + R"(
  mov.u64 %rd5, ctab;
  ld.const.u32 %r2, [%rd5+8];
  ld.const.u32 %r3, [ctab+12];
  mov.b64 %rd4, {%r2, %r3};
)" + Out(1, "%rd4") + R"(
  mov.u32 %r4, sbuf;
  st.shared.v4.u32 [%r4], {%r2, %r3, %r2, %r3};
  ld.shared.v2.u32 {%r5, %r6}, [sbuf+8];
  mov.b64 %rd4, {%r5, %r6};
)" + Out(2, "%rd4") + R"(
  mov.u64 %rd6, sbuf;
  cvta.shared.u64 %rd7, %rd6;
  ld.u32 %r5, [%rd7+4];
  isspacep.shared %p1, %rd7;
  selp.u32 %r6, 1, 0, %p1;
  isspacep.global %p1, %rd7;
  selp.u32 %r7, 2, 0, %p1;
  add.s32 %r6, %r6, %r7;
  mov.b64 %rd4, {%r5, %r6};
)" + Out(3, "%rd4") + R"(
  mov.u64 %rd8, depot;
  cvta.local.u64 %rd9, %rd8;
  st.u32 [%rd9+4], %r1;
  ld.local.u32 %r5, [depot+4];
  cvt.u64.u32 %rd4, %r5;
)" + Out(4, "%rd4") + R"(
  atom.shared.add.u32 %r5, [sbuf+32], 3;
  atom.add.u32 %r6, [%rd7+32], 4;
  ld.shared.u32 %r7, [sbuf+32];
  mov.b64 %rd4, {%r6, %r7};
)" + Out(5, "%rd4") + R"(
  cvta.global.u64 %rd10, %rd2;
  atom.global.exch.b64 %rd11, [%rd10+48], 99;
  ld.global.s8 %r5, [gbuf+0];
  mov.u64 %rd12, gbuf;
  mov.u32 %r8, 0xFF;
  st.global.u8 [%rd12+1], %r8;
  ld.global.s8 %r5, [gbuf+1];
  cvt.s64.s32 %rd4, %r5;
)" + Out(6, "%rd4") + R"(
  red.global.add.u64 [%rd2+56], 5;
  red.global.add.u64 [%rd2+56], 6;
)";
  std::vector<uint64_t> o = RunSlots(body, 1, extra);
  EXPECT_EQ(o[0], 0x0807060504030201ull);
  EXPECT_EQ(o[1], 30u | (uint64_t{40} << 32));
  EXPECT_EQ(o[2], 30u | (uint64_t{40} << 32));
  EXPECT_EQ(o[3], 40u | (uint64_t{1} << 32));
  EXPECT_EQ(o[4], 0u);
  EXPECT_EQ(o[5], 3u | (uint64_t{7} << 32));
  EXPECT_EQ(o[6], static_cast<uint64_t>(-1));
  EXPECT_EQ(o[7], 11u);
}

// A warp's loads and stores are checked for all its lanes at once where they all land in shared
// memory or in one global range; every lane still gets its own bytes, a load may overwrite its
// address register, lanes storing to one address leave the highest lane's value, and one lane
// out of range or misaligned fails the launch naming that lane.
TEST(PtxHandwritten, WarpWideAccessesKeepEachLaneApart) {
  const std::string extra = ".shared .align 8 .b8 sbuf[128];\n";
  std::string body = R"(
  mov.u32 %r2, sbuf;
  shl.b32 %r3, %r1, 2;
  add.s32 %r3, %r2, %r3;
  st.shared.u32 [%r3], %r1;
  bar.sync 0;
  sub.s32 %r4, 31, %r1;
  shl.b32 %r4, %r4, 2;
  add.s32 %r4, %r2, %r4;
  ld.shared.u32 %r5, [%r4];
  ld.shared.u32 %r4, [%r4];
  mov.b64 %rd4, {%r5, %r4};
)" + Out(0, "%rd4") + R"(
  bar.sync 0;
  st.shared.u32 [sbuf+64], %r1;
  bar.sync 0;
  ld.shared.u32 %r6, [sbuf+64];
  cvt.u64.u32 %rd4, %r6;
)" + Out(1, "%rd4") + R"(
  sub.s32 %r7, 31, %r1;
  mul.wide.u32 %rd5, %r7, 512;
  add.s64 %rd5, %rd1, %rd5;
  ld.global.u64 %rd6, [%rd5+16];
)" + Out(3, "%rd6") + R"(
  ld.global.u64 %rd5, [%rd5+16];
)" + Out(4, "%rd5") + R"(
  sub.s32 %r8, 7, %r1;
  and.b32 %r8, %r8, 7;
  shl.b32 %r8, %r8, 3;
  add.s32 %r8, %r2, %r8;
  ld.shared.v2.u32 {%r9, %r10}, [%r8];
  mov.b64 %rd7, {%r9, %r10};
)" + Out(5, "%rd7");
  // Slot 2 of each lane holds its lane number before the kernel reads it across lanes.
  FakeGlobalMemory mem;
  LoadedModule m = LoadPtx(Kernel(body, extra), mem);
  ASSERT_TRUE(m.module);
  std::vector<uint64_t> init(32 * kSlots, 0);
  for (int l = 0; l < 32; ++l) init[l * kSlots + 2] = 1000 + l;
  uint64_t out = mem.Upload(init);
  LaunchResult r = Launch(m, mem, "k", {1, 1, 1}, {32, 1, 1}, 0, out);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  std::vector<uint64_t> o = mem.Download<uint64_t>(out, 32 * kSlots);
  for (uint64_t l = 0; l < 32; ++l) {
    EXPECT_EQ(o[l * kSlots + 0], (31 - l) | ((31 - l) << 32)) << "lane " << l;
    EXPECT_EQ(o[l * kSlots + 1], 31u) << "lane " << l;  // the highest lane's store stays
    EXPECT_EQ(o[l * kSlots + 3], 1000 + (31 - l)) << "lane " << l;
    EXPECT_EQ(o[l * kSlots + 4], 1000 + (31 - l)) << "lane " << l;
    const uint64_t pair = (7 - l) & 7;  // words 2p and 2p+1, written by those lanes
    EXPECT_EQ(o[l * kSlots + 5], (2 * pair) | ((2 * pair + 1) << 32)) << "lane " << l;
  }

  // Lane 16 reads past the 128 bytes of shared memory; lane 5 reads a misaligned word.
  LoadedModule far = LoadPtx(Kernel(R"(
  shl.b32 %r3, %r1, 3;
  mov.u32 %r2, sbuf;
  add.s32 %r3, %r2, %r3;
  ld.shared.u32 %r4, [%r3];
)",
                                    extra),
                             mem);
  ASSERT_TRUE(far.module);
  r = Launch(far, mem, "k", {1, 1, 1}, {32, 1, 1}, 0, out);
  EXPECT_EQ(r.error, LaunchError::kIllegalAddress) << r.message;
  EXPECT_NE(r.message.find("thread (16,0,0)"), std::string::npos) << r.message;
  LoadedModule skew = LoadPtx(Kernel(R"(
  shl.b32 %r3, %r1, 2;
  setp.eq.u32 %p1, %r1, 5;
  selp.u32 %r4, 2, 0, %p1;
  add.s32 %r3, %r3, %r4;
  mov.u32 %r2, sbuf;
  add.s32 %r3, %r2, %r3;
  st.shared.u32 [%r3], %r1;
)",
                                     extra),
                              mem);
  ASSERT_TRUE(skew.module);
  r = Launch(skew, mem, "k", {1, 1, 1}, {32, 1, 1}, 0, out);
  EXPECT_EQ(r.error, LaunchError::kMisalignedAddress) << r.message;
  EXPECT_NE(r.message.find("thread (5,0,0)"), std::string::npos) << r.message;
  // Lane 31's global read lies far past the allocation the others read.
  LoadedModule wild = LoadPtx(Kernel(R"(
  setp.eq.u32 %p1, %r1, 31;
  selp.u64 %rd5, 0x10000000, 0, %p1;
  add.s64 %rd5, %rd2, %rd5;
  ld.global.u64 %rd6, [%rd5];
)"),
                              mem);
  ASSERT_TRUE(wild.module);
  r = Launch(wild, mem, "k", {1, 1, 1}, {32, 1, 1}, 0, out);
  EXPECT_EQ(r.error, LaunchError::kIllegalAddress) << r.message;
  EXPECT_NE(r.message.find("thread (31,0,0)"), std::string::npos) << r.message;
}

TEST(PtxHandwritten, DeviceFunctionWithSeveralParamsAndScopes) {
  std::string extra = R"(
.func (.param .b64 ret0, .param .b32 ret1) pair(.param .b32 a, .param .b64 b)
{
  .reg .b32 %x<3>;
  .reg .b64 %y<3>;
  ld.param.b32 %x1, [a];
  ld.param.b64 %y1, [b];
  cvt.u64.u32 %y2, %x1;
  add.s64 %y2, %y2, %y1;
  st.param.b64 [ret0], %y2;
  mul.lo.s32 %x2, %x1, 3;
  st.param.b32 [ret1], %x2;
  ret;
}
)";
  std::string body = R"(
  {
  .reg .b32 %temp;
  .param .b32 pa;
  .param .b64 pb;
  .param .b64 r0;
  .param .b32 r1;
  add.s32 %temp, %r1, 1;
  st.param.b32 [pa], %temp;
  st.param.b64 [pb], 1000;
  call.uni (r0, r1), pair, (pa, pb);
  ld.param.b64 %rd4, [r0];
  ld.param.b32 %r5, [r1];
  }
)" + Out(0, "%rd4") + R"(
  cvt.u64.u32 %rd4, %r5;
)" + Out(1, "%rd4");
  std::vector<uint64_t> o = RunSlots(body, 3, extra);
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(o[t * kSlots + 0], 1000u + t + 1) << t;
    EXPECT_EQ(o[t * kSlots + 1], 3u * (t + 1)) << t;
  }
}

TEST(PtxHandwritten, WarpInstructions) {
  std::string body = R"(
  and.b32 %r2, %r1, 31;
  setp.eq.s32 %p2, %r2, 7;
  vote.sync.any.pred %p1, %p2, -1;
)" + OutPred(0) + R"(
  vote.sync.uni.pred %p1, %p2, -1;
)" + OutPred(1) + R"(
  setp.lt.u32 %p2, %r2, 100;
  vote.sync.uni.pred %p1, %p2, -1;
)" + OutPred(2) + R"(
  shr.u32 %r3, %r2, 3;
  match.any.sync.b32 %r4, %r3, -1;
  cvt.u64.u32 %rd4, %r4;
)" + Out(3, "%rd4") + R"(
  shfl.sync.idx.b32 %r5|%p1, %r2, 3, 0x181F, -1;
  cvt.u64.u32 %rd4, %r5;
)" + Out(4, "%rd4") + R"(
  shfl.sync.up.b32 %r5|%p1, %r2, 2, 0, -1;
  selp.u32 %r6, 100, 0, %p1;
  add.s32 %r5, %r5, %r6;
  cvt.u64.u32 %rd4, %r5;
)" + Out(5, "%rd4") + R"(
  shfl.sync.bfly.b32 %r5, %r2, 16, 31, -1;
  cvt.u64.u32 %rd4, %r5;
)" + Out(6, "%rd4") + R"(
  mov.u32 %r7, %laneid;
  mov.u32 %r8, %lanemask_lt;
  mov.b64 %rd4, {%r7, %r8};
)" + Out(7, "%rd4") + R"(
  bar.warp.sync -1;
  setp.lt.u32 %p3, %r2, 5;
  @%p3 bra SMALL;
  activemask.b32 %r9;
  bra.uni JOIN;
SMALL:
  activemask.b32 %r9;
JOIN:
  activemask.b32 %r10;
  mov.b64 %rd4, {%r9, %r10};
)" + Out(8, "%rd4") + R"(
  match.all.sync.b32 %r4|%p1, 5, -1;
  selp.u32 %r6, 1, 0, %p1;
  mov.b64 %rd4, {%r4, %r6};
)" + Out(9, "%rd4");
  std::vector<uint64_t> o = RunSlots(body, 32);
  for (int t = 0; t < 32; ++t) {
    const uint64_t* x = &o[t * kSlots];
    EXPECT_EQ(x[0], 1u) << t;
    EXPECT_EQ(x[1], 0u) << t;
    EXPECT_EQ(x[2], 1u) << t;
    EXPECT_EQ(x[3], 0xffu << (8 * (t / 8))) << t;
    // Segments of 8 lanes (c = 0x181F, as __shfl_sync(.., 3, 8)); idx 3 within each segment.
    EXPECT_EQ(x[4], static_cast<uint64_t>((t & ~7) | 3)) << t;
    EXPECT_EQ(x[5], t >= 2 ? static_cast<uint64_t>(t - 2 + 100) : static_cast<uint64_t>(t)) << t;
    EXPECT_EQ(x[6], static_cast<uint64_t>(t ^ 16)) << t;
    EXPECT_EQ(x[7], static_cast<uint64_t>(t) | (uint64_t{(1u << t) - 1} << 32)) << t;
    uint64_t branch_mask = t < 5 ? 0x1f : 0xffffffe0u;
    EXPECT_EQ(x[8], branch_mask | (uint64_t{0xffffffffu} << 32)) << t;
    EXPECT_EQ(x[9], 0xffffffffu | (uint64_t{1} << 32)) << t;
  }
}

TEST(PtxHandwritten, BarrierWaitsOnlyForLiveThreads) {
  // Threads >= 40 exit early; the rest meet at two barriers and exchange through shared memory.
  std::string extra = ".shared .align 4 .b8 sh[512];\n";
  std::string body = R"(
  setp.ge.u32 %p1, %r1, 40;
  @%p1 bra DONE;
  mov.u32 %r2, sh;
  shl.b32 %r3, %r1, 2;
  add.s32 %r4, %r2, %r3;
  st.shared.u32 [%r4], %r1;
  bar.sync 0;
  sub.s32 %r5, 39, %r1;
  shl.b32 %r5, %r5, 2;
  add.s32 %r5, %r2, %r5;
  ld.shared.u32 %r6, [%r5];
  barrier.sync 0;
  st.shared.u32 [%r4], 7;
  bar.sync 0;
  ld.shared.u32 %r7, [%r5];
  mov.b64 %rd4, {%r6, %r7};
)" + Out(0, "%rd4") + "DONE:\n";
  std::vector<uint64_t> o = RunSlots(body, 100, extra);
  for (int t = 0; t < 40; ++t)
    EXPECT_EQ(o[t * kSlots], static_cast<uint64_t>(39 - t) | (uint64_t{7} << 32)) << t;
  for (int t = 40; t < 100; ++t) EXPECT_EQ(o[t * kSlots], 0u) << t;
}

// Programmatic dependent launch (cuBLASLt 13's kernels): a stream's grids run one after the
// other here, so both forms pass through and the code around them runs.
TEST(PtxHandwritten, GridDependencyControlPassesThrough) {
  std::vector<uint64_t> o = RunSlots(R"(
  griddepcontrol.wait;
  mov.u64 %rd4, 7;
  griddepcontrol.launch_dependents;
)" + Out(0, "%rd4"),
                                     2);
  EXPECT_EQ(o[0], 7u);
  EXPECT_EQ(o[kSlots], 7u);
}

// mma.sync.aligned.m8n8k4.row.col.f64 (cuSOLVER's DMMA): lane l, group g = l/4, t = l%4,
// holds A[g][t], B[t][g] and C/D[g][2t..2t+1]. A[g][k] = g*4+k+1, B[k][n] = (k-n)/2,
// C[g][n] = g*8+n, all built from the lane number.
TEST(PtxHandwritten, DoublePrecisionMma) {
  std::vector<uint64_t> o = RunSlots(R"(
  shr.u32 %r2, %r1, 2;
  and.b32 %r3, %r1, 3;
  add.u32 %r4, %r1, 1;
  cvt.rn.f64.u32 %fd1, %r4;
  sub.s32 %r5, %r3, %r2;
  cvt.rn.f64.s32 %fd2, %r5;
  mul.f64 %fd2, %fd2, 0d3FE0000000000000;
  shl.b32 %r6, %r2, 3;
  shl.b32 %r7, %r3, 1;
  add.u32 %r6, %r6, %r7;
  cvt.rn.f64.u32 %fd3, %r6;
  add.f64 %fd4, %fd3, 0d3FF0000000000000;
  mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%fd5, %fd6}, {%fd1}, {%fd2}, {%fd3, %fd4};
  mov.b64 %rd4, %fd5;
  mov.b64 %rd5, %fd6;
)" + Out(0, "%rd4") + Out(1, "%rd5"),
                                     32);
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < 2; ++i) {
      const int n = 2 * t + i;
      double want = g * 8 + n;
      for (int k = 0; k < 4; ++k) want += (g * 4 + k + 1) * ((k - n) * 0.5);
      EXPECT_EQ(o[l * kSlots + i], F64(want)) << "lane " << l << " D[" << g << "][" << n << "]";
    }
  }
}

// .L2::cache_hint loads and stores take a cache-policy operand last, which changes nothing.
TEST(PtxHandwritten, CacheHintOperandIsSkipped) {
  std::vector<uint64_t> o = RunSlots(R"(
  mov.u64 %rd4, 0;
  createpolicy.fractional.L2::evict_last.b64 %rd4, 1.0;
  mov.u64 %rd5, 41;
  st.global.L2::cache_hint.u64 [%rd2+8], %rd5, %rd4;
  ld.global.L2::cache_hint.u64 %rd6, [%rd2+8], %rd4;
  add.u64 %rd6, %rd6, 1;
)" + Out(0, "%rd6"));
  EXPECT_EQ(o[0], 42u);
}

// ldmatrix: 32 threads fill four 8x8 b16 matrices in shared memory (element (j, r, c) =
// j*64 + r*8 + c), thread 8j+r points at row r of matrix j, and each thread gets row g,
// columns 2t and 2t+1 of every matrix (with .trans, column g, rows 2t and 2t+1).
TEST(PtxHandwritten, LdmatrixGivesEachLaneItsFragment) {
  const std::string extra = ".shared .align 16 .b16 mats[256];\n";
  std::string body = R"(
  mov.u32 %r2, mats;
  shl.b32 %r3, %r1, 4;
  add.u32 %r4, %r2, %r3;
  shl.b32 %r5, %r1, 3;
  add.u32 %r6, %r5, 1;
  add.u32 %r7, %r5, 2;
  add.u32 %r8, %r5, 3;
  add.u32 %r9, %r5, 4;
  add.u32 %r10, %r5, 5;
  add.u32 %r11, %r5, 6;
  add.u32 %r12, %r5, 7;
  cvt.u16.u32 %rs1, %r5;
  cvt.u16.u32 %rs2, %r6;
  cvt.u16.u32 %rs3, %r7;
  cvt.u16.u32 %rs4, %r8;
  st.shared.v4.u16 [%r4], {%rs1, %rs2, %rs3, %rs4};
  cvt.u16.u32 %rs1, %r9;
  cvt.u16.u32 %rs2, %r10;
  cvt.u16.u32 %rs3, %r11;
  cvt.u16.u32 %rs4, %r12;
  st.shared.v4.u16 [%r4+8], {%rs1, %rs2, %rs3, %rs4};
  bar.sync 0;
  ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r13, %r14, %r15, %r16}, [%r4];
  ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%r17, %r18}, [%r4];
  ldmatrix.sync.aligned.m8n8.x1.shared::cta.b16 %r19, [%r4];
  cvt.u64.u32 %rd4, %r13;
)" + Out(0, "%rd4");
  const char* regs[] = {"%r14", "%r15", "%r16", "%r17", "%r18", "%r19"};
  for (int i = 0; i < 6; ++i)
    body += std::string("  cvt.u64.u32 %rd4, ") + regs[i] + ";\n" + Out(i + 1, "%rd4");
  std::vector<uint64_t> o = RunSlots(body, 32, extra);
  auto pair = [](int lo, int hi) { return static_cast<uint64_t>(lo) | uint64_t(hi) << 16; };
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int j = 0; j < 4; ++j)
      EXPECT_EQ(o[l * kSlots + j], pair(j * 64 + g * 8 + 2 * t, j * 64 + g * 8 + 2 * t + 1))
          << "x4 lane " << l << " matrix " << j;
    for (int j = 0; j < 2; ++j)
      EXPECT_EQ(o[l * kSlots + 4 + j], pair(j * 64 + 2 * t * 8 + g, j * 64 + (2 * t + 1) * 8 + g))
          << "trans lane " << l << " matrix " << j;
    EXPECT_EQ(o[l * kSlots + 6], pair(g * 8 + 2 * t, g * 8 + 2 * t + 1)) << "x1 lane " << l;
  }
}

// cvt to TF32 keeps 10 mantissa bits: rna rounds ties away from zero, rn to even, rz down.
TEST(PtxHandwritten, CvtToTf32Rounds) {
  // 1 + 2^-11 (a tie, even below), 1 + 2^-10 + 2^-11 (a tie, odd below), 1 + 2^-11 + 2^-23
  // (above the tie), infinity.
  std::vector<uint64_t> o = RunSlots(R"(
  cvt.rna.tf32.f32 %r2, 0f3F801000;
  cvt.rn.tf32.f32 %r3, 0f3F801000;
  cvt.rz.tf32.f32 %r4, 0f3F803000;
  cvt.rn.tf32.f32 %r5, 0f3F803000;
  cvt.rn.tf32.f32 %r6, 0f3F801001;
  cvt.rna.tf32.f32 %r7, 0f7F800000;
  mov.b64 %rd4, {%r2, %r3};
  mov.b64 %rd5, {%r4, %r5};
  mov.b64 %rd6, {%r6, %r7};
)" + Out(0, "%rd4") + Out(1, "%rd5") +
                                     Out(2, "%rd6"));
  auto two = [](uint32_t lo, uint32_t hi) { return uint64_t{lo} | uint64_t{hi} << 32; };
  EXPECT_EQ(o[0], two(0x3F802000u, 0x3F800000u));
  EXPECT_EQ(o[1], two(0x3F802000u, 0x3F804000u));
  EXPECT_EQ(o[2], two(0x3F802000u, 0x7F800000u));
}

}  // namespace
}  // namespace cuwire::ptx::testing
