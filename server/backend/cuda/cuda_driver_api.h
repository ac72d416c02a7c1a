// The cuda backend: a Backend over the real libcuda.so.1 (or, in a relay, cuwire's own client
// library), resolved at run time so that gpu-server builds and starts on hosts without a GPU.
// The class itself is generated from the manifest (generated/cuda_driver_api.cc).
#pragma once

#include <memory>

#include "server/backend/backend.h"

namespace cuwire {

// `handle` is a dlopen handle of the vendor driver. Symbols it lacks answer NOT_SUPPORTED.
std::unique_ptr<server::Backend> make_cuda_backend(void* handle);

}  // namespace cuwire
