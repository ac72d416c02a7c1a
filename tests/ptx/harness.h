// Test helpers for the PTX interpreter: device memory over host buffers, parameter packing and
// module loading.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/backend/sim/ptx/ptx.h"
#include "tests/ptx/host_memory.h"

namespace cuwire::ptx::testing {

// The directives hand-written test PTX starts with.
inline constexpr const char* kHeader = R"(
.version 8.0
.target sm_75
.address_size 64
)";

// A hand-written entry `name(params)`: a `.reg` line for each of `regs` (".b32 %r<8>"), then
// `body`, which ends in its own ret.
inline std::string Entry(const std::string& name, const std::string& params,
                         std::initializer_list<const char*> regs, const std::string& body) {
  std::string ptx = "\n.visible .entry " + name + "(" + params + ")\n{\n";
  for (const char* r : regs) ptx += std::string("  .reg ") + r + ";\n";
  return ptx + body + "}\n";
}

// Device memory as separate host buffers at fixed device addresses (256-byte rounded), with a
// guard gap between allocations so an access just past the end of one is illegal.
class FakeGlobalMemory : public HostBufferMemory<256> {
 public:
  template <class T>
  std::vector<T> Download(uint64_t addr, size_t n) {
    std::vector<T> out(n);
    uint8_t* p = translate(addr, n * sizeof(T));
    EXPECT_NE(p, nullptr);
    if (p && n) std::memcpy(out.data(), p, n * sizeof(T));
    return out;
  }
};

// A parsed module with its variables placed in `memory`.
struct LoadedModule {
  std::unique_ptr<Module> module;
  std::unordered_map<std::string, uint64_t> vars;
};

inline LoadedModule LoadPtx(const std::string& text, FakeGlobalMemory& mem) {
  LoadedModule lm;
  std::string error;
  lm.module = Module::parse(text, &error);
  EXPECT_NE(lm.module, nullptr) << error;
  if (!lm.module) return lm;
  for (const VariableInfo& v : lm.module->variables()) {
    std::vector<uint8_t> bytes(v.size, 0);
    std::copy(v.initializer.begin(), v.initializer.end(), bytes.begin());
    lm.vars[v.name] = mem.Upload(bytes);
  }
  return lm;
}

inline LoadedModule LoadKernelFile(const std::string& name, FakeGlobalMemory& mem) {
  std::string text = ReadFile(std::string(CUWIRE_PTX_KERNEL_DIR) + "/" + name + ".ptx");
  EXPECT_FALSE(text.empty()) << "missing generated PTX " << name;
  return LoadPtx(text, mem);
}

template <class... Args>
std::vector<uint8_t> PackParams(const KernelInfo& k, const Args&... args) {
  std::vector<uint8_t> buf(k.param_bytes, 0);
  size_t i = 0;
  auto put = [&](const auto& a) {
    EXPECT_LT(i, k.params.size());
    if (i >= k.params.size()) return;
    EXPECT_EQ(k.params[i].size, sizeof(a)) << "param " << i << " of " << k.name;
    std::memcpy(buf.data() + k.params[i].offset, &a, std::min<size_t>(sizeof(a), k.params[i].size));
    ++i;
  };
  (put(args), ...);
  (void)put;  // a kernel without parameters
  EXPECT_EQ(i, k.params.size()) << "param count of " << k.name;
  return buf;
}

// Launches `kernel` with `cfg`'s settings (pool, heap, cooperative, budget) and these.
template <class... Args>
LaunchResult LaunchWith(LaunchConfig cfg, const LoadedModule& lm, FakeGlobalMemory& mem,
                        const std::string& kernel, Dim3 grid, Dim3 block, uint32_t dyn_shared,
                        const Args&... args) {
  const KernelInfo* k = lm.module->find_kernel(kernel);
  EXPECT_NE(k, nullptr) << kernel;
  if (!k) return LaunchResult{LaunchError::kInvalidLaunch, "no kernel", 0, {}};
  std::vector<uint8_t> params = PackParams(*k, args...);
  cfg.grid = grid;
  cfg.block = block;
  cfg.dynamic_shared_bytes = dyn_shared;
  cfg.params = params.data();
  cfg.params_size = params.size();
  return lm.module->launch(kernel, cfg, lm.vars, mem);
}

template <class... Args>
LaunchResult Launch(const LoadedModule& lm, FakeGlobalMemory& mem, const std::string& kernel,
                    Dim3 grid, Dim3 block, uint32_t dyn_shared, const Args&... args) {
  return LaunchWith(LaunchConfig{}, lm, mem, kernel, grid, block, dyn_shared, args...);
}

}  // namespace cuwire::ptx::testing
