// Text a backend's kernels wrote with device printf, waiting to reach the client.
//
// Not part of cuda.h, so not in DriverApi: a backend that can produce such text also implements
// DeviceOutputSource, and the session finds it with dynamic_cast. The sim backend does; the cuda
// backend does not (the real driver prints device printf output on the server's own stdout).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <string>

namespace cuwire::server {

class DeviceOutputSource {
 public:
  virtual ~DeviceOutputSource() = default;
  // Moves up to `max_bytes` of the output pending for `ctx` (oldest first, whole kernels'
  // output in completion order) to the end of *out; the rest stays pending. An unknown or
  // destroyed context has none. Thread-safe.
  virtual void take_device_output(CUcontext ctx, size_t max_bytes, std::string* out) = 0;
};

}  // namespace cuwire::server
