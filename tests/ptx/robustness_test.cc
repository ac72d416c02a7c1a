// Damaged PTX must never crash the interpreter: parse either fails with a message or yields a
// module whose launches end with an error code or complete.

#include <cstdint>

#include "tests/ptx/harness.h"

namespace cuwire::ptx::testing {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) out.push_back(line);
  return out;
}

std::string Join(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

// Every handle names the same small texture and surface, so damaged texture kernels get as far
// as sampling with whatever coordinates they compute.
class AnyHandleMemory : public FakeGlobalMemory {
 public:
  AnyHandleMemory() {
    texture_.texels.data = texels_;
    texture_.texels.bytes = sizeof texels_;
    texture_.texels.width = 4;
    texture_.texels.height = 4;
    texture_.texels.row_pitch = 16;
    texture_.texels.slice_pitch = 64;
    texture_.texels.format = TexelFormat::kU8;
    texture_.linear_filter = true;
    surface_.texels = texture_.texels;
  }
  const TextureObject* texture(uint64_t) override { return &texture_; }
  const SurfaceObject* surface(uint64_t) override { return &surface_; }

 private:
  uint8_t texels_[64] = {};
  TextureObject texture_;
  SurfaceObject surface_;
};

// Parses `text` and, if that succeeds, launches every kernel with zeroed parameters and a small
// instruction budget. Returns the number of launches that ran.
int ParseAndRun(const std::string& text) {
  std::string error;
  std::unique_ptr<Module> m = Module::parse(text, &error);
  if (!m) {
    EXPECT_FALSE(error.empty());
    return 0;
  }
  AnyHandleMemory mem;
  std::unordered_map<std::string, uint64_t> vars;
  for (const VariableInfo& v : m->variables()) vars[v.name] = mem.Alloc(v.size);
  int runs = 0;
  for (const KernelInfo& k : m->kernels()) {
    std::vector<uint8_t> params(k.param_bytes, 0);
    LaunchConfig cfg;
    cfg.block = {40, 1, 1};
    cfg.dynamic_shared_bytes = 256;
    cfg.params = params.data();
    cfg.params_size = params.size();
    cfg.max_instructions = 20000;
    LaunchResult r = m->launch(k.name, cfg, vars, mem);
    if (r.error != LaunchError::kNone) {
      EXPECT_FALSE(r.message.empty());
    }
    ++runs;
  }
  return runs;
}

class PtxRobustness : public ::testing::TestWithParam<const char*> {};

TEST_P(PtxRobustness, TruncatedText) {
  std::string text = ReadFile(std::string(CUWIRE_PTX_KERNEL_DIR) + "/" + GetParam() + ".ptx");
  ASSERT_FALSE(text.empty());
  for (size_t cut = 0; cut < text.size(); cut += text.size() / 40 + 1)
    ParseAndRun(text.substr(0, cut));
}

TEST_P(PtxRobustness, DeletedLines) {
  std::string text = ReadFile(std::string(CUWIRE_PTX_KERNEL_DIR) + "/" + GetParam() + ".ptx");
  std::vector<std::string> lines = Lines(text);
  int ran = 0;
  for (size_t i = 0; i < lines.size(); i += 11) {
    std::vector<std::string> damaged = lines;
    damaged.erase(damaged.begin() + static_cast<std::ptrdiff_t>(i));
    ran += ParseAndRun(Join(damaged));
  }
  EXPECT_GT(ran, 0);
}

TEST_P(PtxRobustness, CorruptedOperands) {
  std::string text = ReadFile(std::string(CUWIRE_PTX_KERNEL_DIR) + "/" + GetParam() + ".ptx");
  std::vector<std::string> lines = Lines(text);
  uint32_t seed = 12345;
  auto rnd = [&seed] {
    seed = seed * 1103515245u + 12345u;
    return seed >> 8;
  };
  static const char* kJunk[] = {"%r1",        "0",          "-1",       "[%rd1+-8]",
                                "{%f1, %f2}", "0f7FC00000", "%p1",      "$L__BB0_1",
                                ";",          "(",          "%rd1|%p1", "99999999999999999999"};
  for (int iter = 0; iter < 60; ++iter) {
    std::vector<std::string> damaged = lines;
    for (int k = 0; k < 3; ++k) {
      std::string& l = damaged[rnd() % damaged.size()];
      size_t comma = l.find(',');
      if (comma == std::string::npos) continue;
      l = l.substr(0, comma + 1) + " " + kJunk[rnd() % (sizeof kJunk / sizeof kJunk[0])] + ";";
    }
    ParseAndRun(Join(damaged));
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, PtxRobustness,
                         ::testing::Values("arith", "memory", "warp", "texture"));

// ---- Hostile text: what a client may send on purpose. Each must fail parse() with a message
// (or parse and run), never overflow the stack or allocate without bound.

constexpr const char* kHeader = ".version 8.0\n.target sm_75\n.address_size 64\n";

std::string Entry(const std::string& decls, const std::string& body) {
  return std::string(kHeader) + decls + ".visible .entry k(.param .u64 out)\n{\n" +
         "  .reg .b32 %r<8>;\n  .reg .b64 %rd<8>;\n  .reg .pred %p<4>;\n" + body + "  ret;\n}\n";
}

// Fails to parse, with a message that contains `what`.
void ExpectRejected(const std::string& text, const std::string& what) {
  std::string error;
  std::unique_ptr<Module> m = Module::parse(text, &error);
  EXPECT_EQ(m, nullptr);
  EXPECT_NE(error.find(what), std::string::npos) << error;
}

TEST(PtxHostile, DeeplyNestedVectorOperand) {
  const int depth = 200000;
  std::string op = std::string(depth, '{') + "%r1" + std::string(depth, '}');
  ExpectRejected(Entry("", "  mov.b32 %r2, " + op + ";\n"), "nested");
}

TEST(PtxHostile, DeeplyNestedCallList) {
  const int depth = 200000;
  std::string op = std::string(depth, '(') + "%r1" + std::string(depth, ')');
  ExpectRejected(Entry("", "  call f, " + op + ";\n"), "nested");
}

TEST(PtxHostile, LongNegationChain) {
  ExpectRejected(Entry("", "  @%p1 mov.pred %p2, " + std::string(300000, '!') + "%p1;\n"),
                 "nested");
}

TEST(PtxHostile, DeeplyNestedInitializer) {
  const int depth = 200000;
  std::string init = std::string(depth, '{') + "1" + std::string(depth, '}');
  ExpectRejected(std::string(kHeader) + ".global .u32 g[1] = " + init + ";\n", "nested");
}

TEST(PtxHostile, ModerateNestingStillParses) {
  std::string text = std::string(kHeader) + ".global .u32 g[2][2] = {{1, 2}, {3, 4}};\n";
  std::string error;
  EXPECT_NE(Module::parse(text, &error), nullptr) << error;
}

TEST(PtxHostile, HugeNumericLiterals) {
  // Out of the double range: std::stod throws, which must become a syntax error.
  ExpectRejected(std::string(kHeader) + ".global .f32 g = 1e999999;\n", "bad float");
  ExpectRejected(std::string(kHeader) + ".global .f64 g[1] = {-1e999999};\n", "bad float");
  ExpectRejected(Entry("", "  add.f32 %r1, %r1, 1e999999;\n"), "bad float");
  // Integers wrap like nvcc's 64-bit literals; a long one is still one token.
  std::string error;
  EXPECT_NE(
      Module::parse(Entry("", "  add.u32 %r1, %r1, " + std::string(5000, '9') + ";\n"), &error),
      nullptr)
      << error;
}

TEST(PtxHostile, HugeArrays) {
  ExpectRejected(Entry("", "  .local .b8 buf[1000000000000];\n  mov.u64 %rd1, buf;\n"),
                 "too large");
  ExpectRejected(Entry("", "  .shared .b8 buf[1000000000000];\n  mov.u64 %rd1, buf;\n"),
                 "too large");
  ExpectRejected(Entry(".shared .b8 buf[1000000000000];\n", "  mov.u64 %rd1, buf;\n"), "too large");
  ExpectRejected(Entry("", "  .local .b8 buf[65536][65536][65536];\n  mov.u64 %rd1, buf;\n"),
                 "too large");
  ExpectRejected(std::string(kHeader) + ".global .b8 g[1000000000000];\n", "too large");
  ExpectRejected(std::string(kHeader) + ".visible .entry k(.param .b8 p[100000000])\n{\n}\n",
                 "too large");
}

TEST(PtxHostile, LocalMemoryPerThreadIsBounded) {
  // 512 KiB per thread is the GPU's limit; one byte more is refused, as ptxas does.
  auto kernel = [](uint64_t bytes) {
    return Entry("", "  .local .align 16 .b8 buf[" + std::to_string(bytes) +
                         "];\n  mov.u64 %rd1, buf;\n  st.local.u32 [%rd1], %r1;\n");
  };
  ExpectRejected(kernel((512u << 10) + 16), "too much local data");
  std::string error;
  std::unique_ptr<Module> m = Module::parse(kernel(512u << 10), &error);
  ASSERT_NE(m, nullptr) << error;
  EXPECT_EQ(m->kernels()[0].thread_bytes, 512u << 10);
}

TEST(PtxHostile, HugeThreadCounts) {
  std::string text =
      std::string(kHeader) + ".visible .entry k() .maxntid 65536, 65536, 65536\n{\n  ret;\n}\n";
  ExpectRejected(text, "thread count too large");
}

// A chain of functions, each calling the next: deeper than recursion in the decoder could
// follow, decoded in time linear in its length; running it overflows the call stack (255
// frames), while a chain of 200 runs.
std::string CallChain(int n) {
  std::string text = kHeader;
  for (int i = n - 1; i >= 0; --i) {
    text += ".func f" + std::to_string(i) + "()\n{\n";
    if (i + 1 < n) text += "  call f" + std::to_string(i + 1) + ";\n";
    text += "  ret;\n}\n";
  }
  return text + ".visible .entry k()\n{\n  call f0;\n  ret;\n}\n";
}

TEST(PtxHostile, LongCallChain) {
  std::string error;
  std::unique_ptr<Module> m = Module::parse(CallChain(50000), &error);
  ASSERT_NE(m, nullptr) << error;
  FakeGlobalMemory mem;
  LaunchResult r = m->launch("k", LaunchConfig{}, {}, mem);
  EXPECT_EQ(r.error, LaunchError::kTrap);
  EXPECT_NE(r.message.find("call stack overflow"), std::string::npos) << r.message;

  m = Module::parse(CallChain(200), &error);
  ASSERT_NE(m, nullptr) << error;
  LaunchConfig cfg;
  cfg.block = {64, 1, 1};
  r = m->launch("k", cfg, {}, mem);
  EXPECT_EQ(r.error, LaunchError::kNone) << r.message;
}

// Mutual recursion through a long cycle is still found (and fails only when executed).
TEST(PtxHostile, LongRecursiveCycle) {
  const int n = 20000;
  std::string text = kHeader;
  for (int i = 0; i < n; ++i) text += ".func f" + std::to_string(i) + "();\n";
  for (int i = 0; i < n; ++i) {
    text += ".func f" + std::to_string(i) + "()\n{\n  call f" + std::to_string((i + 1) % n) +
            ";\n  ret;\n}\n";
  }
  text += ".visible .entry k()\n{\n  call f0;\n  ret;\n}\n";
  std::string error;
  std::unique_ptr<Module> m = Module::parse(text, &error);
  ASSERT_NE(m, nullptr) << error;
  FakeGlobalMemory mem;
  LaunchResult r = m->launch("k", LaunchConfig{}, {}, mem);
  EXPECT_EQ(r.error, LaunchError::kUnsupportedOpcode) << r.message;
  EXPECT_NE(r.message.find("recursive call"), std::string::npos) << r.message;
}

// The instruction budget also stops kernels that spin through barriers, which return to the
// block scheduler between time slices.
TEST(PtxHostile, InstructionBudgetStopsBarrierLoops) {
  std::string text = Entry("", "LOOP:\n  bar.sync 0;\n  bra.uni LOOP;\n");
  std::string error;
  std::unique_ptr<Module> m = Module::parse(text, &error);
  ASSERT_NE(m, nullptr) << error;
  FakeGlobalMemory mem;
  uint64_t out = mem.Alloc(8);
  LaunchConfig cfg;
  cfg.block = {64, 1, 1};
  cfg.params = &out;
  cfg.params_size = 8;
  cfg.max_instructions = 100000;
  LaunchResult r = m->launch("k", cfg, {}, mem);
  EXPECT_EQ(r.error, LaunchError::kTimeout);
  EXPECT_NE(r.message.find("budget"), std::string::npos) << r.message;
  EXPECT_LE(r.instructions, cfg.max_instructions + 64u * 4096u);
}

// Empty blocks cost budget too: the largest grid of them ends within it.
TEST(PtxHostile, InstructionBudgetBoundsHugeGrids) {
  std::string error;
  std::unique_ptr<Module> m =
      Module::parse(std::string(kHeader) + ".visible .entry k()\n{\n  ret;\n}\n", &error);
  ASSERT_NE(m, nullptr) << error;
  FakeGlobalMemory mem;
  LaunchConfig cfg;
  cfg.grid = {0x7fffffffu, 65535, 65535};
  cfg.dynamic_shared_bytes = 48 << 10;
  cfg.max_instructions = 1000000;
  LaunchResult r = m->launch("k", cfg, {}, mem);
  EXPECT_EQ(r.error, LaunchError::kTimeout);
  EXPECT_LE(r.instructions, cfg.max_instructions + 4096u);
}

TEST(PtxHostile, TooFewParameterBytes) {
  std::string error;
  std::unique_ptr<Module> m = Module::parse(Entry("", ""), &error);
  ASSERT_NE(m, nullptr) << error;
  FakeGlobalMemory mem;
  uint32_t four = 0;
  LaunchConfig cfg;
  cfg.params = &four;
  cfg.params_size = 4;  // the kernel takes 8
  LaunchResult r = m->launch("k", cfg, {}, mem);
  EXPECT_EQ(r.error, LaunchError::kInvalidLaunch);
}

}  // namespace
}  // namespace cuwire::ptx::testing
