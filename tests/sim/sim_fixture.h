// Shared set-up for the sim backend tests: a two-device sim with a small memory, cuInit done
// and device 0's primary context current on the test thread.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "server/backend/backend.h"
#include "server/backend/sim/sim_backend.h"

namespace cuwire::server::testing {

inline constexpr uint64_t kSimMemory = 64ull << 20;

inline std::string read_data(const std::string& name) {
  std::ifstream f(std::string(CUWIRE_SIM_TEST_DATA) + "/" + name, std::ios::binary);
  EXPECT_TRUE(f.good()) << name;
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return s;
}

class SimTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(SimOptions{}); }
  void TearDown() override {
    api_->cuCtxSetCurrent(nullptr);
    api_->cuDevicePrimaryCtxRelease_v2(0);
    api_.reset();
  }

  // Makes the backend from `o` with the fixture's gpus, memory and SMs, and makes device 0's
  // primary context current.
  void Start(SimOptions o) {
    o.gpus = 2;
    o.memory_bytes = kSimMemory;
    o.sm_count = 4;
    api_ = make_sim_backend(o);
    ASSERT_EQ(api_->cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(api_->cuDevicePrimaryCtxRetain(&ctx_, 0), CUDA_SUCCESS);
    ASSERT_EQ(api_->cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  }

  // Loads kernels.<kind> (ptx text gets its NUL) as a module of the current context.
  CUmodule load(const std::string& file) {
    image_ = read_data(file);
    CUmodule m = nullptr;
    EXPECT_EQ(api_->cuModuleLoadData(&m, image_.c_str()), CUDA_SUCCESS) << file;
    return m;
  }

  CUfunction function(CUmodule m, const char* name) {
    CUfunction f = nullptr;
    EXPECT_EQ(api_->cuModuleGetFunction(&f, m, name), CUDA_SUCCESS) << name;
    return f;
  }

  std::unique_ptr<server::Backend> api_;
  CUcontext ctx_ = nullptr;
  std::string image_;
};

}  // namespace cuwire::server::testing
