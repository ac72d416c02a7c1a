// make_sim_backend: the sim backend's factory; the implementation is SimGpu (sim_gpu.h).

#include "server/backend/sim/sim_backend.h"

#include "server/backend/sim/sim_gpu.h"

namespace cuwire::server {

std::unique_ptr<Backend> make_sim_backend(const SimOptions& options) {
  return std::make_unique<sim::SimGpu>(options);
}

std::vector<SimAddressRange> sim_address_ranges(Backend& sim) {
  auto* gpu = dynamic_cast<sim::SimGpu*>(&sim);
  return gpu ? gpu->address_ranges() : std::vector<SimAddressRange>{};
}

uint64_t sim_used_bytes(Backend& sim, int device) {
  auto* gpu = dynamic_cast<sim::SimGpu*>(&sim);
  return gpu ? gpu->used_bytes(device) : 0;
}

}  // namespace cuwire::server
