// The server going away under a running program: the call in flight and every later call fail
// with an error (CUDA_ERROR_DEVICE_UNAVAILABLE), promptly; nothing hangs and nothing crashes.

#include <cuda.h>
#include <gtest/gtest.h>

#include <chrono>

#include "server/session/server.h"
#include "tests/support/test_support.h"

namespace cuwire::testing {
namespace {

TEST(ServerGone, LaterCallsFailPromptly) {
  TempDir dir;
  server::ServerConfig cfg;
  Address a;
  ASSERT_TRUE(parse_address("unix:" + dir.file("s.sock"), &a));
  cfg.listen = {a};
  cfg.backend = "sim";
  auto srv = std::make_unique<server::Server>(cfg);
  ASSERT_TRUE(srv->start().is_ok());
  setenv("CUWIRE_SERVER", a.to_string().c_str(), 1);

  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUdevice dev;
  CUcontext ctx;
  ASSERT_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
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
