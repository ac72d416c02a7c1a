// Green contexts on the sim: SM resources and their splits, descriptors, contexts limited to a
// partition, and context-wide event records and waits. The fixture's devices have 4 SMs.

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/sim/sim_fixture.h"

namespace cuwire::server::testing {
namespace {

class SimGreenTest : public SimTest {
 protected:
  CUdevResource device_sms(CUdevice dev = 0) {
    CUdevResource r{};
    EXPECT_EQ(api_->cuDeviceGetDevResource(dev, &r, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS);
    return r;
  }
  // A green context on `groups` groups of 2 SMs of device 0, from one split.
  CUgreenCtx green(unsigned groups) {
    CUdevResource all = device_sms();
    std::vector<CUdevResource> parts(2);
    unsigned n = 2;
    EXPECT_EQ(api_->cuDevSmResourceSplitByCount(parts.data(), &n, &all, nullptr, 0, 2),
              CUDA_SUCCESS);
    EXPECT_EQ(n, 2u);
    CUdevResourceDesc desc = nullptr;
    EXPECT_EQ(api_->cuDevResourceGenerateDesc(&desc, parts.data(), groups), CUDA_SUCCESS);
    CUgreenCtx g = nullptr;
    EXPECT_EQ(api_->cuGreenCtxCreate(&g, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_SUCCESS);
    return g;
  }
};

TEST_F(SimGreenTest, DeviceResourceSplitsIntoGroups) {
  CUdevResource all = device_sms();
  EXPECT_EQ(all.type, CU_DEV_RESOURCE_TYPE_SM);
  EXPECT_EQ(all.sm.smCount, 4u);
  EXPECT_EQ(all.sm.minSmPartitionSize, 2u);
  EXPECT_EQ(all.sm.smCoscheduledAlignment, 2u);

  // Asking how many groups a split makes, then making them.
  unsigned n = 0;
  ASSERT_EQ(api_->cuDevSmResourceSplitByCount(nullptr, &n, &all, nullptr, 0, 2), CUDA_SUCCESS);
  EXPECT_EQ(n, 2u);
  CUdevResource parts[4]{}, rest{};
  n = 4;
  ASSERT_EQ(api_->cuDevSmResourceSplitByCount(parts, &n, &all, &rest, 0, 2), CUDA_SUCCESS);
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(parts[0].sm.smCount, 2u);
  EXPECT_EQ(parts[1].sm.smCount, 2u);
  EXPECT_EQ(rest.sm.smCount, 0u);
  // Fewer groups than fit: the rest is the remainder.
  n = 1;
  ASSERT_EQ(api_->cuDevSmResourceSplitByCount(parts, &n, &all, &rest, 0, 2), CUDA_SUCCESS);
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(rest.sm.smCount, 2u);
  // Counts round up to the alignment; without co-scheduling any count goes.
  n = 4;
  ASSERT_EQ(api_->cuDevSmResourceSplitByCount(parts, &n, &all, nullptr, 0, 3), CUDA_SUCCESS);
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(parts[0].sm.smCount, 4u);
  n = 4;
  ASSERT_EQ(api_->cuDevSmResourceSplitByCount(parts, &n, &all, nullptr,
                                              CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING, 1),
            CUDA_SUCCESS);
  EXPECT_EQ(n, 4u);
  EXPECT_EQ(parts[3].sm.smCount, 1u);
}

TEST_F(SimGreenTest, BadSplitsAreRefused) {
  CUdevResource all = device_sms();
  CUdevResource parts[2]{};
  unsigned n = 2;
  EXPECT_EQ(api_->cuDevSmResourceSplitByCount(parts, nullptr, &all, nullptr, 0, 2),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api_->cuDevSmResourceSplitByCount(parts, &n, &all, nullptr, 0, 5),
            CUDA_ERROR_INVALID_VALUE);  // more SMs than there are
  EXPECT_EQ(api_->cuDevSmResourceSplitByCount(parts, &n, &all, nullptr, 0x80, 2),
            CUDA_ERROR_INVALID_VALUE);  // unknown flag
  CUdevResource changed = all;
  changed.sm.smCount = 64;  // the public fields are output only
  EXPECT_EQ(api_->cuDevSmResourceSplitByCount(parts, &n, &changed, nullptr, 0, 2),
            CUDA_ERROR_INVALID_VALUE);
  CUdevResource forged{};
  forged.type = CU_DEV_RESOURCE_TYPE_SM;
  forged.sm.smCount = 4;
  EXPECT_EQ(api_->cuDevSmResourceSplitByCount(parts, &n, &forged, nullptr, 0, 2),
            CUDA_ERROR_INVALID_VALUE);
  CUdevResource untyped = all;
  std::memset(&untyped.type, 0x7f, sizeof untyped.type);
  EXPECT_EQ(api_->cuDevSmResourceSplitByCount(parts, &n, &untyped, nullptr, 0, 2),
            CUDA_ERROR_INVALID_RESOURCE_TYPE);
  // The groups of a split are not split again.
  ASSERT_EQ(api_->cuDevSmResourceSplitByCount(parts, &n, &all, nullptr, 0, 2), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuDevSmResourceSplitByCount(parts, &n, &parts[0], nullptr, 0, 2),
            CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
  CUdevResource r{};
  EXPECT_EQ(api_->cuDeviceGetDevResource(0, &r, static_cast<CUdevResourceType>(7)),
            CUDA_ERROR_INVALID_RESOURCE_TYPE);
  EXPECT_EQ(api_->cuDeviceGetDevResource(9, &r, CU_DEV_RESOURCE_TYPE_SM),
            CUDA_ERROR_INVALID_DEVICE);
}

TEST_F(SimGreenTest, DescriptorsTakeGroupsOfOneSplit) {
  CUdevResource all = device_sms();
  CUdevResource a[2]{}, b[2]{};
  unsigned n = 2;
  ASSERT_EQ(api_->cuDevSmResourceSplitByCount(a, &n, &all, nullptr, 0, 2), CUDA_SUCCESS);
  n = 2;
  ASSERT_EQ(api_->cuDevSmResourceSplitByCount(b, &n, &all, nullptr, 0, 2), CUDA_SUCCESS);
  CUdevResourceDesc desc = nullptr;
  CUdevResource mixed[2] = {a[0], b[1]};
  EXPECT_EQ(api_->cuDevResourceGenerateDesc(&desc, mixed, 2),
            CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
  CUdevResource twice[2] = {a[0], a[0]};
  EXPECT_EQ(api_->cuDevResourceGenerateDesc(&desc, twice, 2),
            CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
  EXPECT_EQ(api_->cuDevResourceGenerateDesc(&desc, a, 0), CUDA_ERROR_INVALID_VALUE);
  CUdevResource other = device_sms(1);
  CUdevResource devices[2] = {a[0], other};
  EXPECT_EQ(api_->cuDevResourceGenerateDesc(&desc, devices, 2),
            CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
  ASSERT_EQ(api_->cuDevResourceGenerateDesc(&desc, a, 2), CUDA_SUCCESS);
  CUgreenCtx g = nullptr;
  EXPECT_EQ(api_->cuGreenCtxCreate(&g, desc, 0, 0), CUDA_ERROR_INVALID_VALUE);  // flag required
  EXPECT_EQ(api_->cuGreenCtxCreate(&g, desc, 1, CU_GREEN_CTX_DEFAULT_STREAM),
            CUDA_ERROR_INVALID_VALUE);  // another device's SMs
  EXPECT_EQ(api_->cuGreenCtxCreate(&g, reinterpret_cast<CUdevResourceDesc>(&n), 0,
                                   CU_GREEN_CTX_DEFAULT_STREAM),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(api_->cuGreenCtxCreate(&g, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_SUCCESS);
  CUdevResource mine{};
  ASSERT_EQ(api_->cuGreenCtxGetDevResource(g, &mine, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS);
  EXPECT_EQ(mine.sm.smCount, 4u);
  EXPECT_EQ(api_->cuGreenCtxDestroy(g), CUDA_SUCCESS);
}

TEST_F(SimGreenTest, GreenContextRunsOnItsPartition) {
  CUgreenCtx g = green(1);
  ASSERT_NE(g, nullptr);
  CUcontext gc = nullptr;
  ASSERT_EQ(api_->cuCtxFromGreenCtx(&gc, g), CUDA_SUCCESS);
  CUdevResource r{};
  ASSERT_EQ(api_->cuCtxGetDevResource(gc, &r, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS);
  EXPECT_EQ(r.sm.smCount, 2u);
  ASSERT_EQ(api_->cuCtxGetDevResource(ctx_, &r, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS);
  EXPECT_EQ(r.sm.smCount, 4u);
  unsigned long long id = 0, ctx_id = 0;
  ASSERT_EQ(api_->cuGreenCtxGetId(g, &id), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuCtxGetId(gc, &ctx_id), CUDA_SUCCESS);
  EXPECT_EQ(id, ctx_id);

  // The primary context's limits, then the green context's, for the same kernel.
  auto figures = [&](int* min_grid, CUresult* coop3) {
    image_ = read_data("kernels.ptx");
    CUmodule m = nullptr;
    ASSERT_EQ(api_->cuModuleLoadData(&m, image_.c_str()), CUDA_SUCCESS);
    CUfunction f = nullptr;
    ASSERT_EQ(api_->cuModuleGetFunction(&f, m, "add_one"), CUDA_SUCCESS);
    int block = 0;
    ASSERT_EQ(api_->cuOccupancyMaxPotentialBlockSize(min_grid, &block, f, nullptr, 0, 1024),
              CUDA_SUCCESS);
    CUdeviceptr p = 0;
    const int n = 4 * 1024;
    ASSERT_EQ(api_->cuMemAlloc_v2(&p, n * sizeof(int)), CUDA_SUCCESS);
    ASSERT_EQ(api_->cuMemsetD8_v2(p, 0, n * sizeof(int)), CUDA_SUCCESS);
    void* params[] = {&p, const_cast<int*>(&n)};
    // 1024 threads a block: one block per SM.
    *coop3 = api_->cuLaunchCooperativeKernel(f, 3, 1, 1, 1024, 1, 1, 0, nullptr, params);
    ASSERT_EQ(api_->cuLaunchCooperativeKernel(f, 2, 1, 1, 1024, 1, 1, 0, nullptr, params),
              CUDA_SUCCESS);
    std::vector<int> out(n);
    ASSERT_EQ(api_->cuMemcpyDtoH_v2(out.data(), p, n * sizeof(int)), CUDA_SUCCESS);
    EXPECT_EQ(out[0], *coop3 == CUDA_SUCCESS ? 2 : 1);
    EXPECT_EQ(out[2047], *coop3 == CUDA_SUCCESS ? 2 : 1);
    EXPECT_EQ(api_->cuMemFree_v2(p), CUDA_SUCCESS);
    EXPECT_EQ(api_->cuModuleUnload(m), CUDA_SUCCESS);
  };
  int primary_grid = 0, green_grid = 0;
  CUresult primary_coop = CUDA_SUCCESS, green_coop = CUDA_SUCCESS;
  figures(&primary_grid, &primary_coop);
  ASSERT_EQ(api_->cuCtxPushCurrent_v2(gc), CUDA_SUCCESS);
  figures(&green_grid, &green_coop);
  CUcontext popped = nullptr;
  ASSERT_EQ(api_->cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, gc);
  EXPECT_EQ(primary_coop, CUDA_SUCCESS);
  EXPECT_EQ(green_coop, CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  EXPECT_EQ(primary_grid, 2 * green_grid);

  // Streams of the green context name it, and the device's primary context.
  CUstream s = nullptr;
  EXPECT_EQ(api_->cuGreenCtxStreamCreate(&s, g, 0, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(api_->cuGreenCtxStreamCreate(&s, g, CU_STREAM_NON_BLOCKING, 0), CUDA_SUCCESS);
  CUgreenCtx owner = nullptr;
  CUcontext pc = nullptr;
  ASSERT_EQ(api_->cuStreamGetGreenCtx(s, &owner), CUDA_SUCCESS);
  EXPECT_EQ(owner, g);
  ASSERT_EQ(api_->cuStreamGetCtx_v2(s, &pc, &owner), CUDA_SUCCESS);
  EXPECT_EQ(owner, g);
  EXPECT_EQ(pc, ctx_);
  ASSERT_EQ(api_->cuStreamGetCtx_v2(nullptr, &pc, &owner), CUDA_SUCCESS);
  EXPECT_EQ(owner, nullptr);
  EXPECT_EQ(pc, ctx_);

  // A green context is destroyed as one, never as an ordinary context.
  EXPECT_EQ(api_->cuCtxDestroy_v2(gc), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(api_->cuGreenCtxDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuCtxFromGreenCtx(&gc, g), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(api_->cuGreenCtxDestroy(g), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(api_->cuGreenCtxDestroy(reinterpret_cast<CUgreenCtx>(ctx_)),
            CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(SimGreenTest, ContextRecordCoversEveryStream) {
  CUgreenCtx g = green(1);
  CUstream a = nullptr, b = nullptr;
  ASSERT_EQ(api_->cuGreenCtxStreamCreate(&a, g, CU_STREAM_NON_BLOCKING, 0), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuGreenCtxStreamCreate(&b, g, CU_STREAM_NON_BLOCKING, 0), CUDA_SUCCESS);
  std::atomic<int> done{0};
  auto slow = [](void* p) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    static_cast<std::atomic<int>*>(p)->fetch_add(1);
  };
  ASSERT_EQ(api_->cuLaunchHostFunc(a, slow, &done), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuLaunchHostFunc(b, slow, &done), CUDA_SUCCESS);
  CUevent ev = nullptr;
  ASSERT_EQ(api_->cuEventCreate(&ev, 0), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuGreenCtxRecordEvent(g, ev), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuEventSynchronize(ev), CUDA_SUCCESS);
  EXPECT_EQ(done.load(), 2);

  // A wait holds back the context's streams until the event completes.
  std::atomic<int> order{0};
  std::atomic<int> seen{-1};
  CUstream other = nullptr;
  ASSERT_EQ(api_->cuStreamCreate(&other, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuLaunchHostFunc(other, slow, &order), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuEventRecord(ev, other), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuGreenCtxWaitEvent(g, ev), CUDA_SUCCESS);
  struct Probe {
    std::atomic<int>* order;
    std::atomic<int>* seen;
  } probe{&order, &seen};
  ASSERT_EQ(api_->cuLaunchHostFunc(
                a,
                [](void* p) {
                  auto* pr = static_cast<Probe*>(p);
                  pr->seen->store(pr->order->load());
                },
                &probe),
            CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamSynchronize(a), CUDA_SUCCESS);
  EXPECT_EQ(seen.load(), 1);
  // The ordinary context has the same two calls.
  ASSERT_EQ(api_->cuCtxRecordEvent(ctx_, ev), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuEventSynchronize(ev), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuCtxWaitEvent(ctx_, ev), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuStreamDestroy_v2(other), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuEventDestroy_v2(ev), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuGreenCtxDestroy(g), CUDA_SUCCESS);
}

}  // namespace
}  // namespace cuwire::server::testing
