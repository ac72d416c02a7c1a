// The sim backend: a simulated GPU for development and CI. Device memory lives in host RAM at
// device-like addresses; kernels run in the PTX interpreter (server/backend/sim/ptx).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "server/backend/backend.h"

namespace cuwire::server {

std::unique_ptr<Backend> make_sim_backend(const SimOptions& options);

// For tests that hold what the server keeps and counts against the sim's own figures, on a
// backend make_sim_backend made (anything else answers empty and 0).
struct SimAddressRange {
  CUdeviceptr base = 0;  // where kernels reach it
  size_t size = 0;
  bool host = false;  // page-locked host memory (cuMemHostAlloc, cuMemHostRegister)
};
// Every range the sim has handed out and not taken back: device allocations of every kind,
// mappings, and page-locked host memory.
std::vector<SimAddressRange> sim_address_ranges(Backend& sim);
// Device memory the sim spends on `device` now, at its own granularity: allocations, physical
// allocations, arrays and what contexts' limits reserve.
uint64_t sim_used_bytes(Backend& sim, int device);

}  // namespace cuwire::server
