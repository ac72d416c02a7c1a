// Device profiles of the simulated GPU (gpu-server --sim-profile NAME): the compute capability
// the sim reports, and the limits and figures that go with it, so that a program or library
// that picks its kernels by compute capability (cuBLAS, cuSOLVER) asks for ones whose PTX the
// toolkit carries. The interpreter is the same under every profile; what changes is what the
// device says it is, which PTX a fatbin gives it, and the per-block and per-SM limits.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace cuwire::server::sim {

struct SimProfile {
  const char* name;            // --sim-profile value
  const char* description;     // one line for --help
  const char* device_name;     // cuDeviceGetName
  int major, minor;            // compute capability
  int shared_per_block_optin;  // bytes, cudaFuncAttributeMaxDynamicSharedMemorySize limit
  int shared_per_sm;           // bytes
  int threads_per_sm;
  int blocks_per_sm;
  int l2_bytes;
  int clock_khz, memory_clock_khz, bus_width_bits;
  int single_to_double_ratio;
  uint32_t pci_device_id;  // device << 16 | vendor
  uint32_t arch() const { return static_cast<uint32_t>(major * 10 + minor); }
};

// Every profile, the default first.
std::span<const SimProfile> sim_profiles();

// The profile named `name`, or nullptr.
const SimProfile* find_sim_profile(std::string_view name);

}  // namespace cuwire::server::sim
