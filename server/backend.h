// Choosing and creating the backend a server runs on.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "driver_api.h"
#include "status.h"

namespace cuwire::server {

struct SimOptions {
  int gpus = 1;
  uint64_t memory_bytes = uint64_t{16} << 30;  // per simulated device
  int sm_count = 40;                            // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
  // A launch stops with CUDA_ERROR_LAUNCH_FAILED after this many thread-instructions, so a
  // kernel that never finishes cannot hold a stream forever (0 = no limit).
  uint64_t max_kernel_instructions = uint64_t{50} << 30;
};

struct BackendChoice {
  std::unique_ptr<DriverApi> api;
  std::string name;  // "sim" or "cuda"
  std::string why;   // for the start-up log: why auto chose it
};

// name: "sim", "cuda" or "auto" (cuda when a driver with at least one GPU loads, else sim).
Status make_backend(const std::string& name, const SimOptions& sim, BackendChoice* out);

// Sizes like "8GiB", "8192MiB", "512MB", "1048576" (bytes).
Status parse_size(const std::string& text, uint64_t* out);

}  // namespace cuwire::server
