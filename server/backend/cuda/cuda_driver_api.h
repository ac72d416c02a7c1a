// The cuda backend: DriverApi over the real libcuda.so.1, resolved at run time so that
// gpu-server builds and starts on hosts without a GPU.
#pragma once

#include <memory>

#include "generated/driver_api.h"

namespace cuwire {

// `handle` is a dlopen handle of the vendor driver. Symbols it lacks answer NOT_SUPPORTED.
std::unique_ptr<DriverApi> load_cuda_driver(void* handle);

}  // namespace cuwire
