// Damaged PTX must never crash the interpreter: parse either fails with a message or yields a
// module whose launches end with an error code or complete.

#include <cstdint>

#include "harness.h"

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
class AnyHandleMemory : public HostMemory {
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
  static const char* kJunk[] = {"%r1", "0", "-1", "[%rd1+-8]", "{%f1, %f2}", "0f7FC00000",
                                "%p1", "$L__BB0_1", ";", "(", "%rd1|%p1", "99999999999999999999"};
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

INSTANTIATE_TEST_SUITE_P(Kernels, PtxRobustness, ::testing::Values("arith", "memory", "warp",
                                                                       "texture"));

}  // namespace
}  // namespace cuwire::ptx::testing
