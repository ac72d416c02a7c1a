// The server going away under a running program: the call in flight and every later call fail
// with an error (CUDA_ERROR_DEVICE_UNAVAILABLE), promptly; nothing hangs and nothing crashes.

#include <cuda.h>
#include <gtest/gtest.h>

#include <chrono>

#include "tests/support/driver_client.h"

namespace cuwire::testing {
namespace {

TEST(ServerGone, LaterCallsFailPromptly) {
  auto srv = std::make_unique<TestServer>();
  ASSERT_NO_FATAL_FAILURE(use_server(*srv));
  const Address a = srv->address();

  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc(&d, 1024), CUDA_SUCCESS);

  ::testing::internal::CaptureStderr();
  srv->stop();
  srv.reset();
  auto t0 = std::chrono::steady_clock::now();
  char buf[16];
  EXPECT_EQ(cuMemcpyDtoH(buf, d, sizeof buf), CUDA_ERROR_DEVICE_UNAVAILABLE);
  size_t free = 0, total = 0;
  EXPECT_EQ(cuMemGetInfo(&free, &total), CUDA_ERROR_DEVICE_UNAVAILABLE);
  CUstream s;
  EXPECT_NE(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  EXPECT_NE(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_NE(cuMemFree(d), CUDA_SUCCESS);
  std::string err = ::testing::internal::GetCapturedStderr();
  // Not a timing assertion: a hang would trip the test's timeout; this only documents intent.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  // One line names the server and what happened.
  EXPECT_NE(err.find("lost gpu-server at " + a.to_string()), std::string::npos) << err;
  EXPECT_EQ(err.find("lost gpu-server", err.find("lost gpu-server") + 1), std::string::npos)
      << "said more than once: " << err;
}

}  // namespace
}  // namespace cuwire::testing
