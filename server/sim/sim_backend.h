// The sim backend: a simulated GPU for development and CI. Device memory lives in host RAM at
// device-like addresses; kernels run in the PTX interpreter (server/sim/ptx).
#pragma once

#include <memory>

#include "backend.h"
#include "driver_api.h"

namespace cuwire::server {

std::unique_ptr<DriverApi> make_sim_backend(const SimOptions& options);

}  // namespace cuwire::server
