// Device memory over host buffers and file reading for the PTX interpreter's tests and
// benchmarks (no gtest here: benchmarks/ptx_bench.cc includes it too).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "server/backend/sim/ptx/ptx.h"

namespace cuwire::ptx::testing {

// Device memory as separate host buffers at fixed device addresses: each allocation rounded up
// to kAlign bytes, with a 4 KiB guard gap after it so an access just past the end of one is
// illegal.
template <uint64_t kAlign>
class HostBufferMemory : public GlobalMemory {
 public:
  uint64_t Alloc(size_t bytes) {
    uint64_t addr = next_;
    next_ += (bytes + kAlign - 1) / kAlign * kAlign + 4096;
    buffers_[addr].assign(bytes, 0);
    return addr;
  }

  template <class T>
  uint64_t Upload(const std::vector<T>& v) {
    uint64_t addr = Alloc(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(buffers_[addr].data(), v.data(), v.size() * sizeof(T));
    return addr;
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

}  // namespace cuwire::ptx::testing
