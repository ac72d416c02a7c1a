// Hostile and faulty clients against the sim backend: module images and launches a client may
// send on purpose. Each must end in an error for that call (or that context), never in a crash
// or unbounded allocation, and the backend must go on serving normal work afterwards.

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/sim/sim_fixture.h"

namespace cuwire::server::testing {
namespace {

constexpr const char* kHeader = ".version 8.0\n.target sm_75\n.address_size 64\n";

// `k(.param .u64 out, .param .u32 n, .param .u64 more)` with `body`; *out = n when it returns.
std::string Kernel(const std::string& decls, const std::string& body) {
  return std::string(kHeader) + ".visible .entry k(.param .u64 out, .param .u32 n, " +
         ".param .u64 more)\n{\n  .reg .b32 %r<8>;\n  .reg .b64 %rd<8>;\n" + decls +
         "  ld.param.u64 %rd1, [out];\n  ld.param.u32 %r1, [n];\n" + body +
         "  st.global.u32 [%rd1], %r1;\n  ret;\n}\n";
}

class SimRobustnessTest : public SimTest {
 protected:
  // Replaces the fixture's backend with one made from `o` (gpus, memory as the fixture's).
  void Reset(SimOptions o) {
    TearDown();
    Start(o);
  }

  CUresult load_text(const std::string& text, CUmodule* m) {
    texts_.push_back(text);
    return api_->cuModuleLoadData(m, texts_.back().c_str());
  }

  // Launches k with (out, n, 0) on `block` threads; returns the launch's result.
  CUresult launch(CUfunction f, CUdeviceptr out, unsigned n, unsigned block, CUstream s = nullptr) {
    uint64_t more = 0;
    void* params[] = {&out, &n, &more};
    return api_->cuLaunchKernel(f, 1, 1, 1, block, 1, 1, 0, s, params, nullptr);
  }

  // A normal launch in the current context runs and stores n.
  void expect_normal_launch(unsigned n) {
    CUmodule m = nullptr;
    ASSERT_EQ(load_text(Kernel("", ""), &m), CUDA_SUCCESS);
    CUfunction f = function(m, "k");
    CUdeviceptr out = 0;
    ASSERT_EQ(api_->cuMemAlloc_v2(&out, 4), CUDA_SUCCESS);
    ASSERT_EQ(launch(f, out, n, 32), CUDA_SUCCESS);
    unsigned got = 0;
    ASSERT_EQ(api_->cuMemcpyDtoH_v2(&got, out, 4), CUDA_SUCCESS);
    EXPECT_EQ(got, n);
    EXPECT_EQ(api_->cuMemFree_v2(out), CUDA_SUCCESS);
    EXPECT_EQ(api_->cuModuleUnload(m), CUDA_SUCCESS);
  }

  std::vector<std::string> texts_;  // images stay alive while loaded
};

TEST_F(SimRobustnessTest, HostileImagesAreInvalidPtx) {
  const int depth = 100000;
  std::vector<std::string> images = {
      Kernel("",
             "  mov.b32 %r2, " + std::string(depth, '{') + "%r1" + std::string(depth, '}') + ";\n"),
      std::string(kHeader) + ".global .u32 g[1] = " + std::string(depth, '{') + "1" +
          std::string(depth, '}') + ";\n",
      std::string(kHeader) + ".global .f64 g = 1e999999;\n",
      Kernel("  .local .b8 buf[1000000000000];\n", "  mov.u64 %rd2, buf;\n"),
      Kernel("  .shared .b8 buf[1000000000000];\n", "  mov.u64 %rd2, buf;\n"),
      Kernel("  .local .b8 buf[600000];\n", "  mov.u64 %rd2, buf;\n"),
      std::string(kHeader) + ".global .b8 g[1000000000000];\n",
  };
  for (const std::string& image : images) {
    CUmodule m = nullptr;
    EXPECT_EQ(load_text(image, &m), CUDA_ERROR_INVALID_PTX) << image.substr(0, 200);
  }
  expect_normal_launch(7);
}

// A module-scope variable larger than the device fails the load with OUT_OF_MEMORY without
// committing host memory.
TEST_F(SimRobustnessTest, HugeGlobalVariableIsOutOfMemory) {
  CUmodule m = nullptr;
  EXPECT_EQ(load_text(std::string(kHeader) + ".global .b8 g[4000000000];\n", &m),
            CUDA_ERROR_OUT_OF_MEMORY);
  CUdeviceptr p = 0;
  EXPECT_EQ(api_->cuMemAlloc_v2(&p, size_t{1} << 47), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(api_->cuMemAlloc_v2(&p, ~size_t{0}), CUDA_ERROR_OUT_OF_MEMORY);
  expect_normal_launch(8);
}

// Local memory is reserved out of device memory for the threads of a block (the sim runs one
// block at a time), before anything is allocated: a block that cannot get it is refused with
// OUT_OF_MEMORY at launch, and a smaller block of the same kernel runs.
TEST_F(SimRobustnessTest, LocalMemoryIsCheckedBeforeLaunch) {
  CUmodule m = nullptr;
  ASSERT_EQ(load_text(Kernel("  .local .align 16 .b8 buf[524288];\n",
                             "  mov.u64 %rd2, buf;\n  st.local.u32 [%rd2+524284], %r1;\n"),
                      &m),
            CUDA_SUCCESS);
  CUfunction f = function(m, "k");
  int local = 0;
  ASSERT_EQ(api_->cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f), CUDA_SUCCESS);
  EXPECT_EQ(local, 524288);
  CUdeviceptr out = 0;
  ASSERT_EQ(api_->cuMemAlloc_v2(&out, 4), CUDA_SUCCESS);
  // 1024 threads x 512 KiB = 512 MiB > the device's 64 MiB.
  EXPECT_EQ(launch(f, out, 5, 1024), CUDA_ERROR_OUT_OF_MEMORY);
  // 32 threads x 512 KiB = 16 MiB fits.
  ASSERT_EQ(launch(f, out, 6, 32), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuCtxSynchronize(), CUDA_SUCCESS);
  unsigned got = 0;
  ASSERT_EQ(api_->cuMemcpyDtoH_v2(&got, out, 4), CUDA_SUCCESS);
  EXPECT_EQ(got, 6u);
  // The reservation ends with the launch.
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(api_->cuMemGetInfo_v2(&free_bytes, &total), CUDA_SUCCESS);
  EXPECT_GT(free_bytes, total - (1u << 20));
}

TEST_F(SimRobustnessTest, BadLaunchDimensionsAndSharedMemory) {
  CUmodule m = nullptr;
  ASSERT_EQ(load_text(Kernel("", ""), &m), CUDA_SUCCESS);
  CUfunction f = function(m, "k");
  CUdeviceptr out = 0;
  ASSERT_EQ(api_->cuMemAlloc_v2(&out, 4), CUDA_SUCCESS);
  unsigned n = 1;
  uint64_t more = 0;
  void* params[] = {&out, &n, &more};
  auto go = [&](unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                unsigned shared) {
    return api_->cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, nullptr, params, nullptr);
  };
  EXPECT_EQ(go(1, 1, 1, 2048, 1, 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(go(1, 1, 1, 32, 32, 2, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(go(1, 1, 1, 1, 1, 65, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(go(0, 1, 1, 1, 1, 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(go(1, 65536, 1, 1, 1, 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(go(0x80000000u, 1, 1, 1, 1, 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(go(1, 1, 1, 32, 1, 1, 0xffffffffu), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(go(1, 1, 1, 32, 1, 1, 64 << 10), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api_->cuCtxSynchronize(), CUDA_SUCCESS);
  expect_normal_launch(9);
}

// Interpreter memory of running launches is bounded: a launch that alone exceeds the bound is
// refused at once; launches on many streams that fit only a few at a time wait for each other
// and all complete.
TEST_F(SimRobustnessTest, LaunchHostMemoryIsBounded) {
  SimOptions o;
  o.launch_memory_bytes = 100 << 10;  // a few 32-thread blocks of k (~16 KiB each), not 1024
  Reset(o);
  CUmodule m = nullptr;
  ASSERT_EQ(load_text(Kernel("", ""), &m), CUDA_SUCCESS);
  CUfunction f = function(m, "k");
  CUdeviceptr out = 0;
  ASSERT_EQ(api_->cuMemAlloc_v2(&out, 4 * 64), CUDA_SUCCESS);
  EXPECT_EQ(launch(f, out, 1, 1024), CUDA_ERROR_OUT_OF_MEMORY);
  std::vector<CUstream> streams(8);
  for (CUstream& s : streams) ASSERT_EQ(api_->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), 0);
  for (unsigned i = 0; i < 64; ++i) {
    ASSERT_EQ(launch(f, out + 4 * i, i, 32, streams[i % streams.size()]), CUDA_SUCCESS);
  }
  ASSERT_EQ(api_->cuCtxSynchronize(), CUDA_SUCCESS);
  std::vector<unsigned> got(64);
  ASSERT_EQ(api_->cuMemcpyDtoH_v2(got.data(), out, 4 * 64), CUDA_SUCCESS);
  for (unsigned i = 0; i < 64; ++i) EXPECT_EQ(got[i], i);
  for (CUstream s : streams) EXPECT_EQ(api_->cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

// A client's launch carries its parameter count and bytes (Backend::launch_sent_kernel): fewer
// than the kernel takes is refused instead of read out of bounds.
TEST_F(SimRobustnessTest, TooFewParameterBytesAreRefused) {
  CUlaunchConfig one{};
  one.gridDimX = one.gridDimY = one.gridDimZ = 1;
  one.blockDimX = one.blockDimY = one.blockDimZ = 1;
  auto launch_sent = [&](CUfunction fn, std::span<void* const> ptrs,
                         std::span<const uint8_t> bytes) {
    return api_->launch_sent_kernel(LaunchKind::kPlain, one, fn, {ptrs, bytes});
  };
  CUmodule m = nullptr;
  ASSERT_EQ(load_text(Kernel("", ""), &m), CUDA_SUCCESS);
  CUfunction f = function(m, "k");
  CUdeviceptr out = 0;
  ASSERT_EQ(api_->cuMemAlloc_v2(&out, 4), CUDA_SUCCESS);
  // The layout is (u64 @0, u32 @8, u64 @16): 24 bytes.
  alignas(8) uint8_t sent[24] = {};
  std::memcpy(sent, &out, 8);
  uint32_t n = 11;
  std::memcpy(sent + 8, &n, 4);
  {
    // One parameter of three.
    void* ptrs[] = {sent};
    EXPECT_EQ(launch_sent(f, ptrs, {sent, 8}), CUDA_ERROR_INVALID_VALUE);
  }
  {
    // Three parameters, but the bytes end inside the last one.
    void* ptrs[] = {sent, sent + 8, sent + 16};
    EXPECT_EQ(launch_sent(f, ptrs, {sent, 20}), CUDA_ERROR_INVALID_VALUE);
  }
  {
    // A parameter pointing outside what was sent.
    uint64_t elsewhere = 0;
    void* ptrs[] = {sent, sent + 8, &elsewhere};
    EXPECT_EQ(launch_sent(f, ptrs, {sent, 24}), CUDA_ERROR_INVALID_VALUE);
  }
  {
    void* ptrs[] = {sent, sent + 8, sent + 16};
    ASSERT_EQ(launch_sent(f, ptrs, {sent, 24}), CUDA_SUCCESS);
  }
  unsigned got = 0;
  ASSERT_EQ(api_->cuMemcpyDtoH_v2(&got, out, 4), CUDA_SUCCESS);
  EXPECT_EQ(got, 11u);
  // No parameters at all.
  EXPECT_EQ(api_->cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_VALUE);
}

// A launch past the instruction budget fails with LAUNCH_TIMEOUT in its context; the backend
// (and other contexts) go on.
TEST_F(SimRobustnessTest, InstructionBudgetEndsInfiniteLoops) {
  SimOptions o;
  o.instruction_budget = 100000;
  Reset(o);
  CUcontext victim = nullptr;
  ASSERT_EQ(api_->cuCtxCreate_v4(&victim, nullptr, 0, 0), CUDA_SUCCESS);
  CUmodule m = nullptr;
  ASSERT_EQ(load_text(Kernel("", "LOOP:\n  bra.uni LOOP;\n"), &m), CUDA_SUCCESS);
  CUfunction f = function(m, "k");
  CUdeviceptr out = 0;
  ASSERT_EQ(api_->cuMemAlloc_v2(&out, 4), CUDA_SUCCESS);
  ASSERT_EQ(launch(f, out, 1, 256), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuCtxSynchronize(), CUDA_ERROR_LAUNCH_TIMEOUT);
  ASSERT_EQ(api_->cuCtxDestroy_v2(victim), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  expect_normal_launch(12);
  EXPECT_EQ(api_->cuCtxSynchronize(), CUDA_SUCCESS);
}

TEST_F(SimRobustnessTest, StreamsPerContextAreBounded) {
  SimOptions o;
  o.max_streams_per_context = 4;
  Reset(o);
  std::vector<CUstream> streams(4);
  for (CUstream& s : streams) ASSERT_EQ(api_->cuStreamCreate(&s, 0), CUDA_SUCCESS);
  CUstream extra = nullptr;
  EXPECT_EQ(api_->cuStreamCreate(&extra, 0), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(api_->cuStreamCreateWithPriority(&extra, 0, -1), CUDA_ERROR_OUT_OF_MEMORY);
  // Another context has its own allowance.
  CUcontext other = nullptr;
  ASSERT_EQ(api_->cuCtxCreate_v4(&other, nullptr, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamCreate(&extra, 0), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuCtxDestroy_v2(other), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamDestroy_v2(streams[0]), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamCreate(&streams[0], 0), CUDA_SUCCESS);
  for (CUstream s : streams) EXPECT_EQ(api_->cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

// A full stream makes the submitter wait until the worker makes room; nothing is lost.
TEST_F(SimRobustnessTest, QueuedWorkPerStreamIsBounded) {
  SimOptions o;
  o.max_queued_per_stream = 2;
  Reset(o);
  CUstream s = nullptr;
  ASSERT_EQ(api_->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(api_->cuMemAlloc_v2(&p, 4), CUDA_SUCCESS);
  std::atomic<bool> release{false};
  // Holds the worker until released.
  auto hold = [](void* user) {
    auto* r = static_cast<std::atomic<bool>*>(user);
    while (!r->load()) std::this_thread::yield();
  };
  ASSERT_EQ(api_->cuLaunchHostFunc(s, hold, &release), CUDA_SUCCESS);
  std::atomic<int> submitted{0};
  std::thread submitter([&] {
    ASSERT_EQ(api_->cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    for (unsigned i = 1; i <= 50; ++i) {
      ASSERT_EQ(api_->cuMemsetD32Async(p, i, 1, s), CUDA_SUCCESS);
      submitted.fetch_add(1);
    }
  });
  // The worker is held, so at most 2 operations fit behind it (plus one the worker may have
  // taken before the host function): the submitter cannot get through all 50.
  while (submitted.load() < 2) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_LT(submitted.load(), 50);
  release = true;
  submitter.join();
  EXPECT_EQ(submitted.load(), 50);
  ASSERT_EQ(api_->cuStreamSynchronize(s), CUDA_SUCCESS);
  unsigned got = 0;
  ASSERT_EQ(api_->cuMemcpyDtoH_v2(&got, p, 4), CUDA_SUCCESS);
  EXPECT_EQ(got, 50u);
  EXPECT_EQ(api_->cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

}  // namespace
}  // namespace cuwire::server::testing
