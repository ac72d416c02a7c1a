// Devices and contexts of the sim backend.

#include <cstring>
#include <string>
#include <thread>

#include "server/backend/sim/sim_profile.h"
#include "tests/sim/sim_fixture.h"

namespace cuwire::server::testing {
namespace {

TEST(SimInit, CallsBeforeInitFail) {
  auto api = make_sim_backend(SimOptions{});
  int n = 0;
  EXPECT_EQ(api->cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(api->cuInit(1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api->cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(api->cuDeviceGetCount(&n), CUDA_SUCCESS);
  EXPECT_EQ(n, 1);
}

TEST_F(SimTest, DeviceIdentity) {
  int n = 0;
  ASSERT_EQ(api_->cuDeviceGetCount(&n), CUDA_SUCCESS);
  EXPECT_EQ(n, 2);
  CUdevice d = -1;
  EXPECT_EQ(api_->cuDeviceGet(&d, 1), CUDA_SUCCESS);
  EXPECT_EQ(d, 1);
  EXPECT_EQ(api_->cuDeviceGet(&d, 2), CUDA_ERROR_INVALID_DEVICE);
  char name[64];
  EXPECT_EQ(api_->cuDeviceGetName(name, sizeof name, 0), CUDA_SUCCESS);
  EXPECT_NE(std::strlen(name), 0u);
  size_t total = 0;
  EXPECT_EQ(api_->cuDeviceTotalMem_v2(&total, 1), CUDA_SUCCESS);
  EXPECT_EQ(total, kSimMemory);
  CUuuid u0, u1;
  ASSERT_EQ(api_->cuDeviceGetUuid_v2(&u0, 0), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuDeviceGetUuid_v2(&u1, 1), CUDA_SUCCESS);
  EXPECT_NE(std::memcmp(u0.bytes, u1.bytes, 16), 0);
  char bus0[32], bus1[32];
  ASSERT_EQ(api_->cuDeviceGetPCIBusId(bus0, sizeof bus0, 0), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuDeviceGetPCIBusId(bus1, sizeof bus1, 1), CUDA_SUCCESS);
  EXPECT_STRNE(bus0, bus1);
  CUdevice back = -1;
  EXPECT_EQ(api_->cuDeviceGetByPCIBusId(&back, bus1), CUDA_SUCCESS);
  EXPECT_EQ(back, 1);
  EXPECT_EQ(api_->cuDeviceGetByPCIBusId(&back, "0000:99:00.0"), CUDA_ERROR_INVALID_DEVICE);
  int major = 0, minor = 0;
  EXPECT_EQ(api_->cuDeviceComputeCapability(&major, &minor, 0), CUDA_SUCCESS);
  EXPECT_EQ(major * 10 + minor, 75);
}

TEST_F(SimTest, EveryAttributeAnswers) {
  for (int a = 1; a < CU_DEVICE_ATTRIBUTE_MAX; ++a) {
    int v = -12345;
    EXPECT_EQ(api_->cuDeviceGetAttribute(&v, static_cast<CUdevice_attribute>(a), 0), CUDA_SUCCESS)
        << "attribute " << a;
  }
  auto attr = [&](CUdevice_attribute a, int dev = 0) {
    int v = 0;
    EXPECT_EQ(api_->cuDeviceGetAttribute(&v, a, dev), CUDA_SUCCESS);
    return v;
  };
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), 7);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR), 5);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), 4);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE), 32);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z), 64);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X), 2147483647);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK), 48 << 10);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN), 64 << 10);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING), 1);
  EXPECT_NE(attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0), attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 1));
  int v;
  EXPECT_EQ(api_->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api_->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 5),
            CUDA_ERROR_INVALID_DEVICE);
  CUdevprop p;
  ASSERT_EQ(api_->cuDeviceGetProperties(&p, 0), CUDA_SUCCESS);
  EXPECT_EQ(p.maxThreadsPerBlock, 1024);
  EXPECT_EQ(p.SIMDWidth, 32);
}

// gpu-server --sim-profile: each profile's compute capability and limits, consistently through
// every query that reports them.
TEST(SimProfiles, EachReportsItsGeneration) {
  ASSERT_GE(sim::sim_profiles().size(), 3u);
  EXPECT_STREQ(sim::sim_profiles()[0].name, SimOptions{}.profile.c_str());  // default first
  EXPECT_EQ(sim::find_sim_profile("sm_99"), nullptr);
  for (const sim::SimProfile& p : sim::sim_profiles()) {
    SimOptions o;
    o.profile = p.name;
    auto api = make_sim_backend(o);
    ASSERT_EQ(api->cuInit(0), CUDA_SUCCESS);
    auto attr = [&](CUdevice_attribute a) {
      int v = -1;
      EXPECT_EQ(api->cuDeviceGetAttribute(&v, a, 0), CUDA_SUCCESS);
      return v;
    };
    EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), p.major) << p.name;
    EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR), p.minor) << p.name;
    int major = 0, minor = 0;
    EXPECT_EQ(api->cuDeviceComputeCapability(&major, &minor, 0), CUDA_SUCCESS);
    EXPECT_EQ(major * 10 + minor, static_cast<int>(p.arch())) << p.name;
    char name[64];
    ASSERT_EQ(api->cuDeviceGetName(name, sizeof name, 0), CUDA_SUCCESS);
    EXPECT_NE(std::string(name).find(p.name), std::string::npos) << name;
    EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
              p.shared_per_block_optin);
    EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR), p.shared_per_sm);
    EXPECT_GE(p.shared_per_sm, p.shared_per_block_optin);
    EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR), p.threads_per_sm);
    EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR), p.blocks_per_sm);
    EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK), 48 << 10);
    // Thread-block clusters from compute capability 9.0 on.
    EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH), p.arch() >= 90 ? 1 : 0) << p.name;
  }
  // An unknown name (refused by gpu-server before it gets here) falls back to the default.
  SimOptions o;
  o.profile = "sm_99";
  auto api = make_sim_backend(o);
  ASSERT_EQ(api->cuInit(0), CUDA_SUCCESS);
  int major = 0, minor = 0;
  EXPECT_EQ(api->cuDeviceComputeCapability(&major, &minor, 0), CUDA_SUCCESS);
  EXPECT_EQ(major * 10 + minor, 75);
}

TEST_F(SimTest, PeerQueries) {
  int can = -1;
  EXPECT_EQ(api_->cuDeviceCanAccessPeer(&can, 0, 1), CUDA_SUCCESS);
  EXPECT_EQ(can, 1);
  EXPECT_EQ(api_->cuDeviceCanAccessPeer(&can, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(can, 0);
  int v = -1;
  EXPECT_EQ(api_->cuDeviceGetP2PAttribute(&v, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 1),
            CUDA_SUCCESS);
  EXPECT_EQ(v, 1);
  EXPECT_EQ(api_->cuDeviceGetP2PAttribute(&v, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 0),
            CUDA_ERROR_INVALID_DEVICE);
}

TEST_F(SimTest, PrimaryContextState) {
  unsigned flags = 99;
  int active = 0;
  ASSERT_EQ(api_->cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 1);
  ASSERT_EQ(api_->cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
  CUcontext again = nullptr;
  ASSERT_EQ(api_->cuDevicePrimaryCtxRetain(&again, 0), CUDA_SUCCESS);
  EXPECT_EQ(again, ctx_);
  EXPECT_EQ(api_->cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuDevicePrimaryCtxSetFlags_v2(1, CU_CTX_SCHED_BLOCKING_SYNC), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(flags, unsigned{CU_CTX_SCHED_BLOCKING_SYNC});
  EXPECT_EQ(api_->cuDevicePrimaryCtxRelease_v2(1), CUDA_ERROR_INVALID_CONTEXT);
  // Destroying a primary context is refused: it is released instead.
  EXPECT_EQ(api_->cuCtxDestroy_v2(ctx_), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(SimTest, ContextStackIsPerThread) {
  CUcontext c1 = nullptr;
  ASSERT_EQ(api_->cuCtxCreate_v4(&c1, nullptr, 0, 1), CUDA_SUCCESS);
  CUcontext cur = nullptr;
  EXPECT_EQ(api_->cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, c1);
  CUdevice dev = -1;
  EXPECT_EQ(api_->cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  std::thread([&] {
    CUcontext other = reinterpret_cast<CUcontext>(1);
    EXPECT_EQ(api_->cuCtxGetCurrent(&other), CUDA_SUCCESS);
    EXPECT_EQ(other, nullptr);
    CUdevice d;
    EXPECT_EQ(api_->cuCtxGetDevice(&d), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(api_->cuCtxPushCurrent_v2(ctx_), CUDA_SUCCESS);
    EXPECT_EQ(api_->cuCtxGetDevice(&d), CUDA_SUCCESS);
    EXPECT_EQ(d, 0);
    EXPECT_EQ(api_->cuCtxPopCurrent_v2(&other), CUDA_SUCCESS);
    EXPECT_EQ(other, ctx_);
  }).join();
  CUcontext popped = nullptr;
  EXPECT_EQ(api_->cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, c1);
  EXPECT_EQ(api_->cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, ctx_);
  unsigned long long id0 = 0, id1 = 0;
  EXPECT_EQ(api_->cuCtxGetId(ctx_, &id0), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuCtxGetId(c1, &id1), CUDA_SUCCESS);
  EXPECT_NE(id0, id1);
  EXPECT_EQ(api_->cuCtxDestroy_v2(c1), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuCtxGetId(c1, &id1), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(api_->cuCtxDestroy_v2(c1), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(SimTest, DestroyedCurrentContextIsReported) {
  CUcontext c1 = nullptr;
  ASSERT_EQ(api_->cuCtxCreate_v4(&c1, nullptr, 0, 0), CUDA_SUCCESS);
  std::thread([&] { EXPECT_EQ(api_->cuCtxSetCurrent(c1), CUDA_SUCCESS); }).join();
  ASSERT_EQ(api_->cuCtxPushCurrent_v2(c1), CUDA_SUCCESS);  // stack: primary, c1, c1
  ASSERT_EQ(api_->cuCtxDestroy_v2(c1), CUDA_SUCCESS);      // pops one of the two
  CUdeviceptr p;
  EXPECT_EQ(api_->cuMemAlloc_v2(&p, 16), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CUcontext popped;
  EXPECT_EQ(api_->cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemAlloc_v2(&p, 16), CUDA_SUCCESS);
}

TEST_F(SimTest, LimitsAndConfigs) {
  size_t v = 0;
  EXPECT_EQ(api_->cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 32 << 20), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuCtxGetLimit(&v, CU_LIMIT_MALLOC_HEAP_SIZE), CUDA_SUCCESS);
  EXPECT_EQ(v, size_t{32} << 20);
  EXPECT_EQ(api_->cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE), CUDA_SUCCESS);
  EXPECT_GT(v, 0u);
  EXPECT_EQ(api_->cuCtxSetLimit(static_cast<CUlimit>(0x55), 1), CUDA_ERROR_UNSUPPORTED_LIMIT);
  EXPECT_EQ(api_->cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_SHARED), CUDA_SUCCESS);
  CUfunc_cache cc;
  EXPECT_EQ(api_->cuCtxGetCacheConfig(&cc), CUDA_SUCCESS);
  EXPECT_EQ(cc, CU_FUNC_CACHE_PREFER_SHARED);
  int least = 1, greatest = 1;
  EXPECT_EQ(api_->cuCtxGetStreamPriorityRange(&least, &greatest), CUDA_SUCCESS);
  EXPECT_EQ(least, 0);
  EXPECT_LT(greatest, 0);
  unsigned version = 0;
  EXPECT_EQ(api_->cuCtxGetApiVersion(nullptr, &version), CUDA_SUCCESS);
  EXPECT_GT(version, 0u);
  EXPECT_EQ(api_->cuCtxSynchronize(), CUDA_SUCCESS);
}

TEST_F(SimTest, ContextDestroyFreesItsMemory) {
  CUcontext c1 = nullptr;
  ASSERT_EQ(api_->cuCtxCreate_v4(&c1, nullptr, 0, 1), CUDA_SUCCESS);
  size_t free0 = 0, total = 0;
  ASSERT_EQ(api_->cuMemGetInfo_v2(&free0, &total), CUDA_SUCCESS);
  CUdeviceptr p;
  ASSERT_EQ(api_->cuMemAlloc_v2(&p, 8 << 20), CUDA_SUCCESS);
  CUstream s;
  ASSERT_EQ(api_->cuStreamCreate(&s, 0), CUDA_SUCCESS);
  size_t free1 = 0;
  ASSERT_EQ(api_->cuMemGetInfo_v2(&free1, &total), CUDA_SUCCESS);
  EXPECT_EQ(free0 - free1, size_t{8} << 20);
  ASSERT_EQ(api_->cuCtxDestroy_v2(c1), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuCtxCreate_v4(&c1, nullptr, 0, 1), CUDA_SUCCESS);
  size_t free2 = 0;
  ASSERT_EQ(api_->cuMemGetInfo_v2(&free2, &total), CUDA_SUCCESS);
  EXPECT_EQ(free2, free0);
  EXPECT_EQ(api_->cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api_->cuCtxDestroy_v2(c1), CUDA_SUCCESS);
}

}  // namespace
}  // namespace cuwire::server::testing
