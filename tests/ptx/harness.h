// Test helpers for the PTX interpreter: device memory over host buffers, parameter packing and
// module loading.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/backend/sim/ptx/ptx.h"

namespace cuwire::ptx::testing {

// Device memory as separate host buffers at fixed device addresses, with a guard gap between
// allocations so an access just past the end of one is illegal.
class FakeGlobalMemory : public GlobalMemory {
 public:
  uint64_t Alloc(size_t bytes) {
    uint64_t addr = next_;
    next_ += (bytes + 255) / 256 * 256 + 4096;
    buffers_[addr].assign(bytes, 0);
    return addr;
  }

  template <class T>
  uint64_t Upload(const std::vector<T>& v) {
    uint64_t addr = Alloc(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(buffers_[addr].data(), v.data(), v.size() * sizeof(T));
    return addr;
  }

  template <class T>
  std::vector<T> Download(uint64_t addr, size_t n) {
    std::vector<T> out(n);
    uint8_t* p = translate(addr, n * sizeof(T));
    EXPECT_NE(p, nullptr);
    if (p && n) std::memcpy(out.data(), p, n * sizeof(T));
    return out;
  }

  uint8_t* translate(uint64_t addr, uint64_t len) override {
    auto it = buffers_.upper_bound(addr);
    if (it == buffers_.begin()) return nullptr;
    --it;
    uint64_t off = addr - it->first;
    if (off > it->second.size() || len > it->second.size() - off) return nullptr;
    return it->second.data() + off;
  }

 private:
  uint64_t next_ = 0x10000000;
  std::map<uint64_t, std::vector<uint8_t>> buffers_;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

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
LaunchResult Launch(const LoadedModule& lm, FakeGlobalMemory& mem, const std::string& kernel, Dim3 grid,
                    Dim3 block, uint32_t dyn_shared, const Args&... args) {
  return LaunchWith(LaunchConfig{}, lm, mem, kernel, grid, block, dyn_shared, args...);
}

}  // namespace cuwire::ptx::testing
