// The driver API's copies with an app's bad host pointer, through cuwire's libcuda.so.1 and an
// in-process server (sim): each fails with CUDA_ERROR_INVALID_VALUE, nothing reaches the device,
// and the connection stays up. The CUDA programs in tests/e2e/host_pointers.cu cover the same
// through cudart; these are the driver entry points cudart does not reach (host-to-host
// unified copies, arrays, batches by the driver API).

#include <cuda.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "tests/support/driver_client.h"

namespace cuwire::testing {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

class BadHostPointer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new TestServer();
    ASSERT_NO_FATAL_FAILURE(use_server(*server_));
  }
  static void TearDownTestSuite() { delete server_; }

  void SetUp() override {
    region_ = static_cast<char*>(
        mmap(nullptr, 3 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(region_, MAP_FAILED);
    ASSERT_EQ(mprotect(region_ + kPage, kPage, PROT_NONE), 0);      // none_
    ASSERT_EQ(mprotect(region_ + 2 * kPage, kPage, PROT_READ), 0);  // readonly_
    none_ = region_ + kPage;
    short_ = none_ - 16;  // 16 good bytes, then the inaccessible page
    readonly_ = region_ + 2 * kPage;
    ASSERT_EQ(cuMemAlloc(&d_, 4096), CUDA_SUCCESS);
    ASSERT_EQ(cuMemsetD8(d_, 7, 4096), CUDA_SUCCESS);
  }
  void TearDown() override {
    // The connection is up and nothing of the failed copies reached the device.
    std::vector<char> back(4096);
    ASSERT_EQ(cuMemcpyDtoH(back.data(), d_, back.size()), CUDA_SUCCESS);
    for (size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], 7) << i;
    EXPECT_EQ(cuMemFree(d_), CUDA_SUCCESS);
    munmap(region_, 3 * kPage);
  }

  static TestServer* server_;
  char* region_ = nullptr;
  char* none_ = nullptr;
  char* short_ = nullptr;
  char* readonly_ = nullptr;
  CUdeviceptr d_ = 0;
};
TestServer* BadHostPointer::server_ = nullptr;

CUdeviceptr as_ptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

TEST_F(BadHostPointer, PlainCopies) {
  for (const void* src : {static_cast<const void*>(nullptr), static_cast<const void*>(none_),
                          static_cast<const void*>(short_)}) {
    EXPECT_EQ(cuMemcpyHtoD(d_, src, 64), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuMemcpyHtoDAsync(d_, src, 64, nullptr), CUDA_ERROR_INVALID_VALUE);
  }
  for (void* dst : {static_cast<void*>(nullptr), static_cast<void*>(none_),
                    static_cast<void*>(short_), static_cast<void*>(readonly_)}) {
    EXPECT_EQ(cuMemcpyDtoH(dst, d_, 64), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuMemcpyDtoHAsync(dst, d_, 64, nullptr), CUDA_ERROR_INVALID_VALUE);
  }
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

TEST_F(BadHostPointer, UnifiedCopies) {
  EXPECT_EQ(cuMemcpy(d_, as_ptr(none_), 64), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpy(as_ptr(readonly_), d_, 64), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyAsync(d_, as_ptr(short_), 64, nullptr), CUDA_ERROR_INVALID_VALUE);
  // Host to host, copied by the client itself: must not crash the program.
  char good[64] = {};
  EXPECT_EQ(cuMemcpy(as_ptr(good), as_ptr(none_), 64), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpy(as_ptr(readonly_), as_ptr(good), 64), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyAsync(as_ptr(short_), as_ptr(good), 64, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpy(as_ptr(good), as_ptr(region_), 64), CUDA_SUCCESS);
}

TEST_F(BadHostPointer, ArrayCopies) {
  const CUDA_ARRAY_DESCRIPTOR desc = array_descriptor(256, 0, CU_AD_FORMAT_UNSIGNED_INT8);
  CUarray arr;
  ASSERT_EQ(cuArrayCreate(&arr, &desc), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyHtoA(arr, 0, none_, 64), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoAAsync(arr, 0, short_, 64, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyAtoH(readonly_, arr, 0, 64), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyAtoHAsync(short_, arr, 0, 64, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuArrayDestroy(arr), CUDA_SUCCESS);
}

TEST_F(BadHostPointer, PitchedCopies) {
  CUDA_MEMCPY2D c{};
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = short_ - 32;  // the third row runs into the inaccessible page
  c.srcPitch = 24;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = d_;
  c.dstPitch = 64;
  c.WidthInBytes = 16;
  c.Height = 3;
  EXPECT_EQ(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpy2DUnaligned(&c), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpy2DAsync(&c, nullptr), CUDA_ERROR_INVALID_VALUE);
  c.srcPitch = 16;  // now the rows end exactly at the inaccessible page
  std::memset(region_, 7, kPage);
  EXPECT_EQ(cuMemcpy2D(&c), CUDA_SUCCESS);
  // Host to host rows, copied by the client itself.
  CUDA_MEMCPY3D h{};
  h.srcMemoryType = CU_MEMORYTYPE_HOST;
  h.srcHost = region_;
  h.srcPitch = 64;
  h.dstMemoryType = CU_MEMORYTYPE_HOST;
  h.dstHost = readonly_;
  h.dstPitch = 64;
  h.WidthInBytes = 64;
  h.Height = 2;
  h.Depth = 1;
  EXPECT_EQ(cuMemcpy3D(&h), CUDA_ERROR_INVALID_VALUE);
  // Device to host rows into read-only memory.
  h.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  h.srcDevice = d_;
  EXPECT_EQ(cuMemcpy3D(&h), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpy3DAsync(&h, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(BadHostPointer, BatchCopies) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUmemcpyAttributes attr{};
  attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  size_t attr_idx = 0;
  CUdeviceptr dsts[1] = {d_};
  CUdeviceptr srcs[1] = {as_ptr(none_)};
  size_t sizes[1] = {64};
  EXPECT_EQ(cuMemcpyBatchAsync(dsts, srcs, sizes, 1, &attr, &attr_idx, 1, s),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

}  // namespace
}  // namespace cuwire::testing
