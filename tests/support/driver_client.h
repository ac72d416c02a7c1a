// For suites whose own process is a client through cuwire's libcuda.so.1, linked into the test
// as its driver (the test links cuwire_cuda as well as cuwire_test_support).
#pragma once

#include <cuda.h>
#include <gtest/gtest.h>

#include "tests/support/test_support.h"

namespace cuwire::testing {

// Points this process's client library at `server` (which must have started), then makes
// device 0's primary context current (in *ctx when ctx is not null). A caller wraps it in
// ASSERT_NO_FATAL_FAILURE to stop where it fails.
inline void use_server(const TestServer& server, CUcontext* ctx = nullptr) {
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  server.export_address();
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUdevice dev;
  CUcontext primary;
  ASSERT_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary, dev), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(primary), CUDA_SUCCESS);
  if (ctx) *ctx = primary;
}

}  // namespace cuwire::testing
