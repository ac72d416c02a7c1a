// Modules, libraries and launches of the sim backend. Kernels run in the PTX interpreter.

#include <atomic>
#include <cstring>
#include <numeric>
#include <thread>

#include "server/calls/copies.h"
#include "server/session/bulk_extent.h"
#include "tests/sim/sim_fixture.h"

namespace cuwire::server::testing {
namespace {

struct Buffers {
  CUdeviceptr a = 0, b = 0, c = 0;
};

class SimLaunchTest : public SimTest {
 protected:
  // Runs vec_add over n floats and returns c.
  std::vector<float> vec_add(CUfunction f, int n, CUstream s = nullptr) {
    std::vector<float> a(n), b(n), c(n, -1.0f);
    std::iota(a.begin(), a.end(), 0.0f);
    std::iota(b.begin(), b.end(), 100.0f);
    Buffers d;
    size_t bytes = n * sizeof(float);
    EXPECT_EQ(api_->cuMemAlloc_v2(&d.a, bytes), CUDA_SUCCESS);
    EXPECT_EQ(api_->cuMemAlloc_v2(&d.b, bytes), CUDA_SUCCESS);
    EXPECT_EQ(api_->cuMemAlloc_v2(&d.c, bytes), CUDA_SUCCESS);
    EXPECT_EQ(api_->cuMemcpyHtoD_v2(d.a, a.data(), bytes), CUDA_SUCCESS);
    EXPECT_EQ(api_->cuMemcpyHtoD_v2(d.b, b.data(), bytes), CUDA_SUCCESS);
    void* params[] = {&d.a, &d.b, &d.c, &n};
    unsigned blocks = static_cast<unsigned>((n + 127) / 128);
    EXPECT_EQ(api_->cuLaunchKernel(f, blocks, 1, 1, 128, 1, 1, 0, s, params, nullptr),
              CUDA_SUCCESS);
    EXPECT_EQ(api_->cuMemcpyDtoH_v2(c.data(), d.c, bytes), CUDA_SUCCESS);
    return c;
  }

  // Puts ctx_ in session 1 of `sessions` and makes *pool a device-0 pool (exportable as
  // `handle_types`) of that session.
  void make_session_pool(SessionObjects* sessions, CUmemAllocationHandleType handle_types,
                         CUmemoryPool* pool) {
    sessions->set_context_session(ctx_, 1);
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = handle_types;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    ASSERT_EQ(api_->cuMemPoolCreate(pool, &props), CUDA_SUCCESS);
    sessions->set_pool_session(*pool, 1);
  }
};

void expect_vec_add(const std::vector<float>& c) {
  for (size_t i = 0; i < c.size(); ++i) ASSERT_EQ(c[i], 2.0f * i + 100.0f) << "at " << i;
}

TEST_F(SimLaunchTest, VecAddFromPtx) {
  CUmodule m = load("kernels.ptx");
  ASSERT_NE(m, nullptr);
  expect_vec_add(vec_add(function(m, "vec_add"), 1000));
  EXPECT_EQ(api_->cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuModuleUnload(m), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(SimLaunchTest, VecAddFromFatbin) {
  CUmodule m = load("kernels.fatbin");
  ASSERT_NE(m, nullptr);
  unsigned count = 0;
  ASSERT_EQ(api_->cuModuleGetFunctionCount(&count, m), CUDA_SUCCESS);
  EXPECT_EQ(count, 7u);
  std::vector<CUfunction> fns(count);
  EXPECT_EQ(api_->cuModuleEnumerateFunctions(fns.data(), count, m), CUDA_SUCCESS);
  expect_vec_add(vec_add(function(m, "vec_add"), 300));
}

TEST_F(SimLaunchTest, SaxpyWithPackedParams) {
  CUmodule m = load("kernels.ptx");
  CUfunction f = function(m, "saxpy");
  size_t off = 0, size = 0;
  ASSERT_EQ(api_->cuFuncGetParamInfo(f, 1, &off, &size), CUDA_SUCCESS);
  EXPECT_EQ(off, 8u);
  EXPECT_EQ(size, 8u);
  EXPECT_EQ(api_->cuFuncGetParamInfo(f, 4, &off, &size), CUDA_ERROR_INVALID_VALUE);
  const int n = 64;
  std::vector<float> x(n, 2.0f), y(n, 1.0f);
  CUdeviceptr dx, dy;
  ASSERT_EQ(api_->cuMemAlloc_v2(&dx, n * 4), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemAlloc_v2(&dy, n * 4), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemcpyHtoD_v2(dx, x.data(), n * 4), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemcpyHtoD_v2(dy, y.data(), n * 4), CUDA_SUCCESS);
  struct {
    float a;
    int pad;
    CUdeviceptr x, y;
    int n;
  } packed{3.0f, 0, dx, dy, n};
  size_t packed_size = 28;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE,
                   &packed_size, CU_LAUNCH_PARAM_END};
  ASSERT_EQ(api_->cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, nullptr, nullptr, extra), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemcpyDtoH_v2(y.data(), dy, n * 4), CUDA_SUCCESS);
  EXPECT_EQ(y[0], 7.0f);
  EXPECT_EQ(y[63], 7.0f);
}

TEST_F(SimLaunchTest, GlobalsAndConstants) {
  CUmodule m = load("kernels.ptx");
  CUdeviceptr scale = 0, offset = 0;
  size_t bytes = 0;
  ASSERT_EQ(api_->cuModuleGetGlobal_v2(&scale, &bytes, m, "scale_c"), CUDA_SUCCESS);
  EXPECT_EQ(bytes, 16u);
  ASSERT_EQ(api_->cuModuleGetGlobal_v2(&offset, &bytes, m, "offset_g"), CUDA_SUCCESS);
  EXPECT_EQ(bytes, 4u);
  EXPECT_EQ(api_->cuModuleGetGlobal_v2(&offset, &bytes, m, "nope"), CUDA_ERROR_NOT_FOUND);
  int init = 0;
  ASSERT_EQ(api_->cuMemcpyDtoH_v2(&init, offset, 4), CUDA_SUCCESS);
  EXPECT_EQ(init, 7);  // the initializer was loaded
  // cudaMemcpyToSymbol is an ordinary copy to the symbol's address.
  float scales[4] = {10, 20, 30, 40};
  ASSERT_EQ(api_->cuMemcpyHtoD_v2(scale, scales, sizeof scales), CUDA_SUCCESS);
  CUdeviceptr out;
  int n = 8;
  ASSERT_EQ(api_->cuMemAlloc_v2(&out, n * 4), CUDA_SUCCESS);
  void* params[] = {&out, &n};
  ASSERT_EQ(api_->cuLaunchKernel(function(m, "use_globals"), 1, 1, 1, 8, 1, 1, 0, nullptr, params,
                                 nullptr),
            CUDA_SUCCESS);
  float got[8];
  ASSERT_EQ(api_->cuMemcpyDtoH_v2(got, out, sizeof got), CUDA_SUCCESS);
  EXPECT_EQ(got[0], 17.0f);
  EXPECT_EQ(got[5], 27.0f);
}

TEST_F(SimLaunchTest, BadLaunchDimensions) {
  CUmodule m = load("kernels.ptx");
  CUfunction f = function(m, "poke");
  CUdeviceptr p;
  ASSERT_EQ(api_->cuMemAlloc_v2(&p, 4), CUDA_SUCCESS);
  void* params[] = {&p};
  auto launch = [&](unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                    unsigned shared = 0) {
    return api_->cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, nullptr, params, nullptr);
  };
  EXPECT_EQ(launch(0, 1, 1, 1, 1, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(1, 1, 1, 0, 1, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(1, 1, 1, 1025, 1, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(1, 1, 1, 64, 32, 1), CUDA_ERROR_INVALID_VALUE);  // 2048 threads
  EXPECT_EQ(launch(1, 1, 1, 1, 1, 65), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(1, 65536, 1, 1, 1, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(1, 1, 1, 1, 1, 1, 49 << 10), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api_->cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_VALUE);  // parameters missing
  // Opting in to more dynamic shared memory makes the launch valid.
  EXPECT_EQ(api_->cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 60 << 10),
            CUDA_SUCCESS);
  EXPECT_EQ(launch(1, 1, 1, 1, 1, 1, 49 << 10), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 65 << 10),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api_->cuCtxSynchronize(), CUDA_SUCCESS);
}

TEST_F(SimLaunchTest, IllegalAddressIsStickyInItsContextOnly) {
  CUmodule m = load("kernels.ptx");
  CUfunction poke = function(m, "poke");
  // Another context on another device, with work of its own.
  CUcontext other;
  ASSERT_EQ(api_->cuCtxCreate_v4(&other, nullptr, 0, 1), CUDA_SUCCESS);
  CUdeviceptr q;
  ASSERT_EQ(api_->cuMemAlloc_v2(&q, 16), CUDA_SUCCESS);
  CUcontext popped;
  ASSERT_EQ(api_->cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);

  CUdeviceptr bad = 0x10;  // not an allocation
  void* params[] = {&bad};
  ASSERT_EQ(api_->cuLaunchKernel(poke, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr),
            CUDA_SUCCESS);  // the fault is asynchronous
  EXPECT_EQ(api_->cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(api_->cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);  // and sticky
  CUdeviceptr p;
  EXPECT_EQ(api_->cuMemAlloc_v2(&p, 16), CUDA_ERROR_ILLEGAL_ADDRESS);

  // The other context is untouched.
  ASSERT_EQ(api_->cuCtxPushCurrent_v2(other), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemsetD8_v2(q, 1, 16), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuCtxDestroy_v2(other), CUDA_SUCCESS);

  // A kernel of one context cannot reach another context's memory either.
  ASSERT_EQ(api_->cuDevicePrimaryCtxReset_v2(0), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuCtxSynchronize(), CUDA_SUCCESS);
}

TEST_F(SimLaunchTest, StreamWaitsOnAnotherStreamsKernel) {
  CUmodule m = load("kernels.ptx");
  CUfunction spin = function(m, "spin"), add_one = function(m, "add_one");
  CUstream a, b;
  ASSERT_EQ(api_->cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr scratch, value, copy;
  ASSERT_EQ(api_->cuMemAlloc_v2(&scratch, 32 * 4), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemAlloc_v2(&value, 4), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemAlloc_v2(&copy, 4), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemsetD32_v2(value, 0, 1), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemsetD32_v2(copy, 0xffffffff, 1), CUDA_SUCCESS);
  CUevent start, done;
  ASSERT_EQ(api_->cuEventCreate(&start, 0), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuEventCreate(&done, 0), CUDA_SUCCESS);

  int iters = 20000, n = 1;
  void* spin_params[] = {&scratch, &iters};
  void* add_params[] = {&value, &n};
  ASSERT_EQ(api_->cuEventRecord(start, a), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, a, spin_params, nullptr),
            CUDA_SUCCESS);
  ASSERT_EQ(api_->cuLaunchKernel(add_one, 1, 1, 1, 1, 1, 1, 0, a, add_params, nullptr),
            CUDA_SUCCESS);
  ASSERT_EQ(api_->cuEventRecord(done, a), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamWaitEvent(b, done, 0), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemcpyDtoDAsync_v2(copy, value, 4, b), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamSynchronize(b), CUDA_SUCCESS);
  int got = -5;
  ASSERT_EQ(api_->cuMemcpyDtoH_v2(&got, copy, 4), CUDA_SUCCESS);
  EXPECT_EQ(got, 1);  // b copied only after a's kernels finished
  float ms = 0;
  ASSERT_EQ(api_->cuEventElapsedTime_v2(&ms, start, done), CUDA_SUCCESS);
  EXPECT_GT(ms, 0.0f);
  EXPECT_EQ(api_->cuStreamDestroy_v2(a), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuStreamDestroy_v2(b), CUDA_SUCCESS);
}

TEST_F(SimLaunchTest, SharedMemoryKernel) {
  CUmodule m = load("kernels.ptx");
  CUfunction f = function(m, "reverse_shared");
  int shared = -1;
  ASSERT_EQ(api_->cuFuncGetAttribute(&shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f),
            CUDA_SUCCESS);
  EXPECT_EQ(shared, 512);
  std::vector<int> v(128);
  std::iota(v.begin(), v.end(), 0);
  CUdeviceptr p;
  ASSERT_EQ(api_->cuMemAlloc_v2(&p, 512), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemcpyHtoD_v2(p, v.data(), 512), CUDA_SUCCESS);
  void* params[] = {&p};
  ASSERT_EQ(api_->cuLaunchKernel(f, 1, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemcpyDtoH_v2(v.data(), p, 512), CUDA_SUCCESS);
  EXPECT_EQ(v[0], 127);
  EXPECT_EQ(v[127], 0);
}

TEST_F(SimLaunchTest, FunctionAttributesAndOccupancy) {
  CUmodule m = load("kernels.ptx");
  CUfunction f = function(m, "vec_add");
  int v = 0;
  ASSERT_EQ(api_->cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f), CUDA_SUCCESS);
  EXPECT_GT(v, 0);
  EXPECT_LE(v, 1024);
  ASSERT_EQ(api_->cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_PTX_VERSION, f), CUDA_SUCCESS);
  EXPECT_EQ(v, 75);
  EXPECT_EQ(api_->cuFuncGetAttribute(&v, static_cast<CUfunction_attribute>(999), f),
            CUDA_ERROR_INVALID_VALUE);
  const char* name = nullptr;
  ASSERT_EQ(api_->cuFuncGetName(&name, f), CUDA_SUCCESS);
  EXPECT_STREQ(name, "vec_add");
  CUmodule owner = nullptr;
  ASSERT_EQ(api_->cuFuncGetModule(&owner, f), CUDA_SUCCESS);
  EXPECT_EQ(owner, m);
  int blocks = 0;
  ASSERT_EQ(api_->cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 256, 0), CUDA_SUCCESS);
  EXPECT_EQ(blocks, 4);
  ASSERT_EQ(api_->cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 128, 32 << 10),
            CUDA_SUCCESS);
  EXPECT_EQ(blocks, 2);
  int min_grid = 0, block = 0;
  ASSERT_EQ(api_->cuOccupancyMaxPotentialBlockSize(&min_grid, &block, f, nullptr, 0, 0),
            CUDA_SUCCESS);
  EXPECT_GT(block, 0);
  EXPECT_EQ(min_grid % 4, 0);
  size_t dyn = 0;
  ASSERT_EQ(api_->cuOccupancyAvailableDynamicSMemPerBlock(&dyn, f, 2, 128), CUDA_SUCCESS);
  EXPECT_EQ(dyn, size_t{32} << 10);
}

TEST_F(SimLaunchTest, LibrariesAndKernelHandles) {
  std::string img = read_data("kernels.fatbin");
  CUlibrary lib = nullptr;
  ASSERT_EQ(api_->cuLibraryLoadData(&lib, img.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
            CUDA_SUCCESS);
  unsigned count = 0;
  ASSERT_EQ(api_->cuLibraryGetKernelCount(&count, lib), CUDA_SUCCESS);
  EXPECT_EQ(count, 7u);
  CUkernel k = nullptr;
  ASSERT_EQ(api_->cuLibraryGetKernel(&k, lib, "vec_add"), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuLibraryGetKernel(&k, lib, "nope"), CUDA_ERROR_NOT_FOUND);
  ASSERT_EQ(api_->cuLibraryGetKernel(&k, lib, "vec_add"), CUDA_SUCCESS);
  const char* name = nullptr;
  ASSERT_EQ(api_->cuKernelGetName(&name, k), CUDA_SUCCESS);
  EXPECT_STREQ(name, "vec_add");
  size_t off = 0, size = 0;
  ASSERT_EQ(api_->cuKernelGetParamInfo(k, 3, &off, &size), CUDA_SUCCESS);
  EXPECT_EQ(off, 24u);
  EXPECT_EQ(size, 4u);
  int v = 0;
  ASSERT_EQ(api_->cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_BINARY_VERSION, k, 0), CUDA_SUCCESS);
  EXPECT_EQ(v, 75);
  // CUkernel handles are accepted wherever a CUfunction is, including launches.
  expect_vec_add(vec_add(reinterpret_cast<CUfunction>(k), 256));
  CUfunction f = nullptr;
  ASSERT_EQ(api_->cuKernelGetFunction(&f, k), CUDA_SUCCESS);
  expect_vec_add(vec_add(f, 100));
  // The kernel's per-device settings hold for its function on that device, until the function
  // is given its own.
  ASSERT_EQ(
      api_->cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 40000, k, 0),
      CUDA_SUCCESS);
  ASSERT_EQ(api_->cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f),
            CUDA_SUCCESS);
  EXPECT_EQ(v, 40000);
  ASSERT_EQ(api_->cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 20000),
            CUDA_SUCCESS);
  ASSERT_EQ(api_->cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f),
            CUDA_SUCCESS);
  EXPECT_EQ(v, 20000);
  ASSERT_EQ(api_->cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(v, 40000);
  // The function's own setting holds for the kernel's launches in this context too, and against
  // a later setting of the kernel's; the kernel's other settings still reach the function.
  ASSERT_EQ(api_->cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     reinterpret_cast<CUfunction>(k)),
            CUDA_SUCCESS);
  EXPECT_EQ(v, 20000);
  ASSERT_EQ(
      api_->cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 30000, k, 0),
      CUDA_SUCCESS);
  ASSERT_EQ(
      api_->cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 50, k, 0),
      CUDA_SUCCESS);
  ASSERT_EQ(api_->cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f),
            CUDA_SUCCESS);
  EXPECT_EQ(v, 20000);
  ASSERT_EQ(api_->cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, f),
            CUDA_SUCCESS);
  EXPECT_EQ(v, 50);
  CUdeviceptr g = 0;
  size_t bytes = 0;
  ASSERT_EQ(api_->cuLibraryGetGlobal(&g, &bytes, lib, "offset_g"), CUDA_SUCCESS);
  EXPECT_EQ(bytes, 4u);
  EXPECT_EQ(api_->cuLibraryUnload(lib), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuKernelGetName(&name, k), CUDA_ERROR_INVALID_HANDLE);
}

// Dynamic shared memory past the default, allowed on a library's kernel or on its function in
// this context: launches through either handle may use it, whichever handle was given it.
TEST_F(SimLaunchTest, AKernelsSettingsReachItsFunctionAndBack) {
  std::string img = read_data("kernels.fatbin");
  CUlibrary lib = nullptr;
  ASSERT_EQ(api_->cuLibraryLoadData(&lib, img.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
            CUDA_SUCCESS);
  CUkernel k = nullptr;
  ASSERT_EQ(api_->cuLibraryGetKernel(&k, lib, "vec_add"), CUDA_SUCCESS);
  CUfunction f = nullptr;
  ASSERT_EQ(api_->cuKernelGetFunction(&f, k), CUDA_SUCCESS);
  const unsigned big = 60 << 10;
  Buffers d;
  int n = 0;
  void* params[] = {&d.a, &d.b, &d.c, &n};
  auto launch = [&](CUfunction h) {
    return api_->cuLaunchKernel(h, 1, 1, 1, 32, 1, 1, big, nullptr, params, nullptr);
  };
  EXPECT_EQ(launch(f), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(api_->cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, big, k, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(launch(f), CUDA_SUCCESS);
  EXPECT_EQ(launch(reinterpret_cast<CUfunction>(k)), CUDA_SUCCESS);
  // Given back on the kernel, then allowed on the function alone.
  ASSERT_EQ(api_->cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 0, k, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(launch(reinterpret_cast<CUfunction>(k)), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(api_->cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, big),
            CUDA_SUCCESS);
  EXPECT_EQ(launch(reinterpret_cast<CUfunction>(k)), CUDA_SUCCESS);
  EXPECT_EQ(launch(f), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuLibraryUnload(lib), CUDA_SUCCESS);
}

// A call to an extern function that nothing defines (and the driver does not provide) fails
// the load, as the driver's JIT does ("Unresolved extern function"), and the error log names
// it; a declaration nobody calls, and the functions the driver provides, load.
TEST_F(SimLaunchTest, AnUnresolvedExternFunctionFailsTheLoad) {
  auto ptx = [](const std::string& decl, const std::string& call) {
    return ".version 7.0\n.target sm_75\n.address_size 64\n" + decl +
           "\n.visible .entry k(.param .u32 v)\n{\n.reg .b32 %r<2>;\nld.param.u32 %r1, [v];\n" +
           call + "\nret;\n}\n";
  };
  const std::string missing = ".extern .func helper(.param .b32 x);";
  const std::string calls =
      "{\n.param .b32 p0;\nst.param.b32 [p0+0], %r1;\ncall.uni helper, (p0);\n}";
  char log[512] = {};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log, reinterpret_cast<void*>(uintptr_t{sizeof log})};
  CUmodule m = nullptr;
  std::string text = ptx(missing, calls);
  EXPECT_EQ(api_->cuModuleLoadDataEx(&m, text.c_str(), 2, options, values), CUDA_ERROR_INVALID_PTX);
  EXPECT_NE(std::strstr(log, "unresolved extern function 'helper'"), nullptr) << log;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(values[1]), std::strlen(log));
  CUlibrary lib = nullptr;
  EXPECT_EQ(api_->cuLibraryLoadData(&lib, text.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0),
            CUDA_ERROR_INVALID_PTX);
  // Called from a function no kernel calls: ptxas compiles it all the same.
  text = ptx(missing +
                 "\n.func unused(.param .b32 y)\n{\n.reg .b32 %r<2>;\nld.param.u32 %r1, "
                 "[y];\n" +
                 calls + "\nret;\n}",
             "");
  EXPECT_EQ(api_->cuModuleLoadData(&m, text.c_str()), CUDA_ERROR_INVALID_PTX);
  // Declared, never called.
  text = ptx(missing, "");
  ASSERT_EQ(api_->cuModuleLoadDataEx(&m, text.c_str(), 2, options, values), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(values[1]), 0u);
  EXPECT_EQ(api_->cuModuleUnload(m), CUDA_SUCCESS);
  // Defined after its declaration in the same module.
  text = ptx(missing + "\n.func helper(.param .b32 x)\n{\nret;\n}", calls);
  ASSERT_EQ(api_->cuModuleLoadData(&m, text.c_str()), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuModuleUnload(m), CUDA_SUCCESS);
  // One the driver provides.
  text = ptx(".extern .func free(.param .b64 p);",
             "{\n.param .b64 p0;\nst.param.b64 [p0+0], 0;\ncall.uni free, (p0);\n}");
  ASSERT_EQ(api_->cuModuleLoadData(&m, text.c_str()), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuModuleUnload(m), CUDA_SUCCESS);
}

// A __managed__ variable (`.attribute(.managed)`) is managed memory on pages of its own, found by
// cuLibraryGetManaged; an ordinary global is not, and kernels use both.
TEST_F(SimLaunchTest, ManagedVariables) {
  const char* ptx = R"(
.version 8.0
.target sm_80
.address_size 64
.global .attribute(.managed) .align 4 .u32 counter = 5;
.global .attribute(.managed) .align 4 .b8 table[5000];
.global .align 4 .u32 plain = 7;
.visible .entry bump()
{
  .reg .b32 %r<3>;
  ld.global.u32 %r1, [counter];
  ld.global.u32 %r2, [plain];
  add.u32 %r1, %r1, %r2;
  st.global.u32 [counter], %r1;
  ret;
}
)";
  CUlibrary lib = nullptr;
  ASSERT_EQ(api_->cuLibraryLoadData(&lib, ptx, nullptr, nullptr, 0, nullptr, nullptr, 0),
            CUDA_SUCCESS);
  CUdeviceptr counter = 0, table = 0, g = 0;
  size_t bytes = 0;
  ASSERT_EQ(api_->cuLibraryGetManaged(&counter, &bytes, lib, "counter"), CUDA_SUCCESS);
  EXPECT_EQ(bytes, 4u);
  EXPECT_EQ(counter % 4096, 0u);
  ASSERT_EQ(api_->cuLibraryGetManaged(&table, &bytes, lib, "table"), CUDA_SUCCESS);
  EXPECT_EQ(bytes, 5000u);
  EXPECT_EQ(table % 4096, 0u);
  EXPECT_GE(table, counter + 4096);  // no page shared
  EXPECT_EQ(api_->cuLibraryGetManaged(&g, &bytes, lib, "plain"), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(api_->cuLibraryGetManaged(&g, &bytes, lib, "nope"), CUDA_ERROR_NOT_FOUND);
  ASSERT_EQ(api_->cuLibraryGetGlobal(&g, &bytes, lib, "counter"), CUDA_SUCCESS);
  EXPECT_EQ(g, counter);
  unsigned managed = 0;
  ASSERT_EQ(api_->cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, counter),
            CUDA_SUCCESS);
  EXPECT_EQ(managed, 1u);
  CUkernel k = nullptr;
  ASSERT_EQ(api_->cuLibraryGetKernel(&k, lib, "bump"), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuLaunchKernel(reinterpret_cast<CUfunction>(k), 1, 1, 1, 1, 1, 1, 0, nullptr,
                                 nullptr, nullptr),
            CUDA_SUCCESS);
  uint32_t v = 0;
  ASSERT_EQ(api_->cuMemcpyDtoH_v2(&v, counter, 4), CUDA_SUCCESS);
  EXPECT_EQ(v, 12u);
  EXPECT_EQ(api_->cuLibraryUnload(lib), CUDA_SUCCESS);
}

TEST_F(SimLaunchTest, CubinLoadsButCannotRun) {
  CUmodule m = load("kernels.cubin");
  ASSERT_NE(m, nullptr);
  CUfunction f = function(m, "vec_add");
  size_t off = 0, size = 0;
  ASSERT_EQ(api_->cuFuncGetParamInfo(f, 2, &off, &size), CUDA_SUCCESS);
  EXPECT_EQ(off, 16u);
  EXPECT_EQ(size, 8u);
  CUdeviceptr p = 0;
  int n = 0;
  void* params[] = {&p, &p, &p, &n};
  EXPECT_EQ(api_->cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr),
            CUDA_ERROR_NO_BINARY_FOR_GPU);
}

TEST_F(SimLaunchTest, MalformedImagesAreRejected) {
  CUmodule m = nullptr;
  EXPECT_EQ(api_->cuModuleLoadData(&m, "\x01\x02\x03"), CUDA_ERROR_INVALID_IMAGE);
  EXPECT_EQ(api_->cuModuleLoadData(&m, ".version 7.5\n.target sm_75\nthis is not ptx {"),
            CUDA_ERROR_INVALID_PTX);
  // Images a client sent are bounded by the call's bulk bytes: a fatbin whose header claims
  // more than was sent, or a cut PTX text, never makes the sim read past them.
  std::string fat = read_data("kernels.fatbin");
  for (size_t cut : {size_t{8}, size_t{64}, fat.size() / 2, fat.size() - 1}) {
    std::vector<uint8_t> bulk(fat.begin(), fat.begin() + static_cast<ptrdiff_t>(cut));
    BulkScope scope(bulk);
    EXPECT_NE(api_->cuModuleLoadData(&m, bulk.data()), CUDA_SUCCESS) << cut;
  }
  {
    std::vector<uint8_t> whole(fat.begin(), fat.end());
    BulkScope scope(whole);
    ASSERT_EQ(api_->cuModuleLoadData(&m, whole.data()), CUDA_SUCCESS);
    EXPECT_EQ(api_->cuModuleUnload(m), CUDA_SUCCESS);
  }
  {
    std::string ptx = read_data("kernels.ptx");
    std::vector<uint8_t> half(ptx.begin(), ptx.begin() + static_cast<ptrdiff_t>(ptx.size() / 2));
    BulkScope scope(half);
    EXPECT_EQ(api_->cuModuleLoadData(&m, half.data()), CUDA_ERROR_INVALID_PTX);
  }
  EXPECT_EQ(api_->cuModuleLoad(&m, "/nonexistent/kernels.ptx"), CUDA_ERROR_FILE_NOT_FOUND);
  EXPECT_EQ(api_->cuModuleLoad(&m, CUWIRE_SIM_TEST_DATA "/kernels.ptx"), CUDA_SUCCESS);
}

}  // namespace
}  // namespace cuwire::server::testing

namespace cuwire::server::testing {
namespace {

// Many sessions share one backend: each thread has its own context and current-context stack.
TEST_F(SimTest, ConcurrentContextsOnManyThreads) {
  std::string ptx = read_data("kernels.ptx");
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      CUcontext c;
      if (api_->cuCtxCreate_v4(&c, nullptr, 0, t % 2) != CUDA_SUCCESS) return;
      CUmodule m;
      CUfunction f;
      bool good = api_->cuModuleLoadData(&m, ptx.c_str()) == CUDA_SUCCESS &&
                  api_->cuModuleGetFunction(&f, m, "add_one") == CUDA_SUCCESS;
      CUstream s;
      CUdeviceptr p;
      int n = 256;
      good = good && api_->cuStreamCreate(&s, 0) == CUDA_SUCCESS &&
             api_->cuMemAlloc_v2(&p, n * 4) == CUDA_SUCCESS &&
             api_->cuMemsetD32Async(p, static_cast<unsigned>(t), n, s) == CUDA_SUCCESS;
      void* params[] = {&p, &n};
      for (int i = 0; good && i < 5; ++i)
        good = api_->cuLaunchKernel(f, 2, 1, 1, 128, 1, 1, 0, s, params, nullptr) == CUDA_SUCCESS;
      std::vector<int> out(n);
      good = good && api_->cuStreamSynchronize(s) == CUDA_SUCCESS &&
             api_->cuMemcpyDtoH_v2(out.data(), p, n * 4) == CUDA_SUCCESS;
      for (int v : out) good = good && v == t + 5;
      good = good && api_->cuCtxDestroy_v2(c) == CUDA_SUCCESS;
      if (good) ++ok;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 6);
}

// A pool's grant of access for another device (cuMemPoolSetAccess) reaches the kernels of the
// contexts on that device of the pool's session, never another session's: sessions are the
// sim's processes (SessionObjects).
TEST_F(SimLaunchTest, APoolsGrantReachesItsSessionsContextsOnly) {
  SessionObjects* sessions = api_->session_objects();
  ASSERT_NE(sessions, nullptr);
  CUmemoryPool pool = nullptr;
  ASSERT_NO_FATAL_FAILURE(make_session_pool(sessions, CU_MEM_HANDLE_TYPE_NONE, &pool));
  CUstream s;
  ASSERT_EQ(api_->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(api_->cuMemAllocFromPoolAsync(&p, 4, pool, s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemsetD32Async(p, 0, 1, s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamSynchronize(s), CUDA_SUCCESS);
  CUmemAccessDesc desc{{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  ASSERT_EQ(api_->cuMemPoolSetAccess(pool, &desc, 1), CUDA_SUCCESS);

  // A kernel on device 1 in a context of session `session` adds one to *p.
  auto add_on_device_1 = [&](uint64_t session) {
    CUcontext c = nullptr;
    EXPECT_EQ(api_->cuCtxCreate_v4(&c, nullptr, 0, 1), CUDA_SUCCESS);
    sessions->set_context_session(c, session);
    EXPECT_EQ(api_->cuCtxSetCurrent(c), CUDA_SUCCESS);
    CUfunction add_one = function(load("kernels.ptx"), "add_one");
    int n = 1;
    void* params[] = {&p, &n};
    EXPECT_EQ(api_->cuLaunchKernel(add_one, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr),
              CUDA_SUCCESS);
    const CUresult rc = api_->cuCtxSynchronize();
    EXPECT_EQ(api_->cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    EXPECT_EQ(api_->cuCtxDestroy_v2(c), CUDA_SUCCESS);
    return rc;
  };
  EXPECT_EQ(add_on_device_1(1), CUDA_SUCCESS);
  EXPECT_EQ(add_on_device_1(2), CUDA_ERROR_ILLEGAL_ADDRESS);
  int got = -1;
  ASSERT_EQ(api_->cuMemcpyDtoH_v2(&got, p, 4), CUDA_SUCCESS);
  EXPECT_EQ(got, 1);  // the pool's session added one; the other session reached nothing

  ASSERT_EQ(api_->cuMemFreeAsync(p, s), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemPoolDestroy(pool), CUDA_SUCCESS);
}

// A pool's allocation imported by another session's context (cuMemPoolImportPointer through an
// import of the pool): that context's kernels reach it, its free ends the import and nothing
// more, and no later free of it, synchronous or stream-ordered, reaches the exporter's memory.
TEST_F(SimLaunchTest, APoolImportsFreeEndsTheImportOnly) {
  SessionObjects* sessions = api_->session_objects();
  ASSERT_NE(sessions, nullptr);
  CUmemoryPool pool = nullptr;
  ASSERT_NO_FATAL_FAILURE(
      make_session_pool(sessions, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, &pool));
  CUdeviceptr p = 0;
  ASSERT_EQ(api_->cuMemAllocFromPoolAsync(&p, 4, pool, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api_->cuMemsetD32_v2(p, 41, 1), CUDA_SUCCESS);
  int fd = -1;
  ASSERT_EQ(api_->cuMemPoolExportToShareableHandle(&fd, pool,
                                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_SUCCESS);
  CUmemPoolPtrExportData data{};
  ASSERT_EQ(api_->cuMemPoolExportPointer(&data, p), CUDA_SUCCESS);

  CUcontext other = nullptr;
  ASSERT_EQ(api_->cuCtxCreate_v4(&other, nullptr, 0, 0), CUDA_SUCCESS);
  sessions->set_context_session(other, 2);
  ASSERT_EQ(api_->cuCtxSetCurrent(other), CUDA_SUCCESS);
  CUmemoryPool imported = nullptr;
  ASSERT_EQ(api_->cuMemPoolImportFromShareableHandle(
                &imported, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_SUCCESS);
  CUdeviceptr q = 0;
  EXPECT_EQ(api_->cuMemAllocFromPoolAsync(&q, 4, imported, nullptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(api_->cuMemPoolImportPointer(&q, imported, &data), CUDA_SUCCESS);
  EXPECT_EQ(q, p);
  CUfunction add_one = function(load("kernels.ptx"), "add_one");
  int n = 1;
  void* params[] = {&q, &n};
  ASSERT_EQ(api_->cuLaunchKernel(add_one, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr),
            CUDA_SUCCESS);
  ASSERT_EQ(api_->cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuMemFree_v2(q), CUDA_SUCCESS);              // the import ends
  EXPECT_EQ(api_->cuMemFree_v2(q), CUDA_ERROR_INVALID_VALUE);  // not session 2's memory
  EXPECT_EQ(api_->cuMemFreeAsync(q, nullptr), CUDA_ERROR_INVALID_VALUE);
  // Ended, the import reaches nothing: a launch on it faults this context only.
  ASSERT_EQ(api_->cuLaunchKernel(add_one, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(api_->cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_EQ(api_->cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  EXPECT_EQ(api_->cuCtxDestroy_v2(other), CUDA_SUCCESS);
  int got = -1;
  ASSERT_EQ(api_->cuMemcpyDtoH_v2(&got, p, 4), CUDA_SUCCESS);
  EXPECT_EQ(got, 42);
  EXPECT_EQ(api_->cuMemFree_v2(p), CUDA_SUCCESS);
  close(fd);
  EXPECT_EQ(api_->cuMemPoolDestroy(pool), CUDA_SUCCESS);
}

}  // namespace
}  // namespace cuwire::server::testing
