// Helpers shared by the server sides of calls whose wire format is hand-written (manifest
// `server=custom`; the formats are defined in protocol/wire_formats.h, which the client side
// shares), each defined in one file of server/calls/.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "protocol/wire_formats.h"

namespace cuwire::server {

class SessionContext;

// A kernel's parameter sizes, from the backend once per function handle (server/calls/modules.cc):
// what a launch (server/calls/launches.cc) must carry.
CUresult kernel_layout(SessionContext& cx, uint64_t id,
                       const std::vector<formats::ParamSlot>** out);

}  // namespace cuwire::server
