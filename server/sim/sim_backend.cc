// make_sim_backend: the sim backend's factory; the implementation is SimGpu (sim_gpu.h).

#include "sim_backend.h"

#include "sim_gpu.h"

namespace cuwire::server {

std::unique_ptr<DriverApi> make_sim_backend(const SimOptions& options) {
  return std::make_unique<sim::SimGpu>(options);
}

}  // namespace cuwire::server
