// Gaps users found running real programs (issue 37), each checked as a program sees it:
//  a. pointer attributes of pinned host memory: type host, host and device pointer the host
//     address itself (unified addressing);
//  b. a PTX module calling an extern function nobody defines does not load, and the JIT error
//     log names the function;
//  c. the default pool counts a stream-ordered allocation (used and reserved memory, their high
//     marks);
//  d. a host function in a capture between copies through one pinned page; a kernel that polls
//     mapped pinned memory the host writes while it runs; an interprocess memory handle opened
//     twice in one process; a kernel's attributes reaching the function cuKernelGetFunction
//     gives, and the function's own reaching launches of the kernel; pool release thresholds,
//     trimming, the pool attributes and a pointer's pool; address reservations far above the
//     device's memory, mapped in pieces.
#include <cuda.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/check_driver.h"
#include "tests/e2e/child_process.h"

// ---------------------------------------------------------------------------------------------
// a. Pointer attributes of pinned host memory

static void expect_pinned_attributes(const void* p, const char* what) {
  cudaPointerAttributes a;
  CHECK(cudaPointerGetAttributes(&a, p));
  EXPECT(a.type == cudaMemoryTypeHost, "%s: type %d", what, (int)a.type);
  EXPECT(a.hostPointer == p, "%s: host pointer %p of %p", what, a.hostPointer, p);
  EXPECT(a.devicePointer == p, "%s: device pointer %p of %p", what, a.devicePointer, p);
  // The driver's view: the same, one attribute at a time.
  CUdeviceptr dev = 0;
  CU(cuPointerGetAttribute(&dev, CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                           reinterpret_cast<CUdeviceptr>(p)));
  EXPECT(dev == reinterpret_cast<CUdeviceptr>(p), "%s: the driver's device pointer %llx", what,
         (unsigned long long)dev);
  void* host = nullptr;
  CU(cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER,
                           reinterpret_cast<CUdeviceptr>(p)));
  EXPECT(host == p, "%s: the driver's host pointer %p", what, host);
}

static void pinned_pointer_attributes() {
  struct Case {
    size_t bytes;
    unsigned flags;  // cudaHostAlloc's; ~0u: cudaMallocHost
  };
  const Case cases[] = {{1, ~0u},
                        {64, ~0u},
                        {size_t{1} << 20, ~0u},
                        {4096, cudaHostAllocDefault},
                        {100, cudaHostAllocPortable},
                        {8192, cudaHostAllocMapped},
                        {3000, cudaHostAllocWriteCombined | cudaHostAllocMapped}};
  for (const Case& c : cases) {
    char* p = nullptr;
    if (c.flags == ~0u) {
      CHECK(cudaMallocHost(&p, c.bytes));
    } else {
      CHECK(cudaHostAlloc(&p, c.bytes, c.flags));
    }
    char what[64];
    snprintf(what, sizeof what, "%zu bytes, flags %d", c.bytes, (int)c.flags);
    expect_pinned_attributes(p, what);
    expect_pinned_attributes(p + c.bytes - 1, what);  // its last byte
    CHECK(cudaFreeHost(p));
  }
  // Asked from a thread other than the one that allocated it, before any kernel used it.
  int* q = nullptr;
  CHECK(cudaMallocHost(&q, 4096));
  cudaPointerAttributes a;
  cudaError_t rc = cudaErrorUnknown;
  std::thread([&] { rc = cudaPointerGetAttributes(&a, q); }).join();
  CHECK(rc);
  EXPECT(a.type == cudaMemoryTypeHost && a.devicePointer == q && a.hostPointer == q,
         "another thread's view: type %d, device %p, host %p", (int)a.type, a.devicePointer,
         a.hostPointer);
  CHECK(cudaFreeHost(q));
}

// ---------------------------------------------------------------------------------------------
// b. A call to an extern function nobody defines

static const char kCallsMissing[] = R"(
.version 7.0
.target sm_75
.address_size 64

.extern .func missing_helper
(
  .param .b32 missing_helper_param_0
)
;

.visible .entry calls_missing(
  .param .u32 calls_missing_param_0
)
{
  .reg .b32 %r<2>;

  ld.param.u32 %r1, [calls_missing_param_0];
  {
  .reg .b32 temp_param_reg;
  .param .b32 param0;
  st.param.b32 [param0+0], %r1;
  call.uni
  missing_helper,
  (
  param0
  );
  }
  ret;
}
)";

static void unresolved_extern_function() {
  char error_log[4096] = {}, info_log[4096] = {};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                            CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {error_log, reinterpret_cast<void*>(uintptr_t{sizeof error_log}), info_log,
                    reinterpret_cast<void*>(uintptr_t{sizeof info_log})};
  CUmodule mod = nullptr;
  const CUresult rc = cuModuleLoadDataEx(&mod, kCallsMissing, 4, options, values);
  // The driver's JIT (ptxas) fails the compilation: "Unresolved extern function".
  EXPECT(rc == CUDA_ERROR_INVALID_PTX || rc == CUDA_ERROR_NO_BINARY_FOR_GPU,
         "a module calling an undefined extern function loaded: %d", (int)rc);
  EXPECT(strstr(error_log, "missing_helper") != nullptr,
         "the JIT error log does not name the function: \"%s\"", error_log);
  EXPECT(cuModuleLoadData(&mod, kCallsMissing) == rc, "cuModuleLoadData");
}

// ---------------------------------------------------------------------------------------------
// c. The default pool counts what it holds

static unsigned long long pool_attr(cudaMemPool_t pool, cudaMemPoolAttr a) {
  cuuint64_t v = 0;
  CHECK(cudaMemPoolGetAttribute(pool, a, &v));
  return v;
}

static void default_pool_counts() {
  const unsigned long long mib = 1ull << 20;
  cudaMemPool_t pool = nullptr;
  CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (cudaStream_t stream : {cudaStream_t{}, s}) {
    void* p = nullptr;
    CHECK(cudaMallocAsync(&p, mib, stream));
    CHECK(cudaStreamSynchronize(stream));
    const unsigned long long used = pool_attr(pool, cudaMemPoolAttrUsedMemCurrent),
                             reserved = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent),
                             used_high = pool_attr(pool, cudaMemPoolAttrUsedMemHigh),
                             reserved_high = pool_attr(pool, cudaMemPoolAttrReservedMemHigh);
    EXPECT(used >= mib, "used %llu after a 1 MiB allocation", used);
    EXPECT(reserved >= used, "reserved %llu, used %llu", reserved, used);
    EXPECT(used_high >= used, "used high mark %llu, used %llu", used_high, used);
    EXPECT(reserved_high >= reserved, "reserved high mark %llu, reserved %llu", reserved_high,
           reserved);
    CHECK(cudaFreeAsync(p, stream));
    CHECK(cudaStreamSynchronize(stream));
    EXPECT(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent) == 0, "used %llu after the free",
           pool_attr(pool, cudaMemPoolAttrUsedMemCurrent));
    EXPECT(pool_attr(pool, cudaMemPoolAttrUsedMemHigh) >= mib, "the used high mark fell");
    EXPECT(pool_attr(pool, cudaMemPoolAttrReservedMemHigh) >= mib, "the reserved high mark fell");
  }
  // The marks restart at the current figures.
  cuuint64_t zero = 0;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero));
  EXPECT(pool_attr(pool, cudaMemPoolAttrUsedMemHigh) == 0, "used high mark after its reset");
  EXPECT(pool_attr(pool, cudaMemPoolAttrReservedMemHigh) ==
             pool_attr(pool, cudaMemPoolAttrReservedMemCurrent),
         "reserved high mark after its reset");
  CHECK(cudaStreamDestroy(s));
}

// ---------------------------------------------------------------------------------------------
// d1. A host function in a capture between copies through one pinned page

__global__ void plus(const int* in, int* out, int n, int k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] + k;
}

struct PageParts {
  int* page;  // [0, n): copied in from the device; [n, 2n): the function's; [2n, 3n): copied in
  int n;
  int calls;
};

// Doubles the first part into the second, reading what the copy before it brought.
static void CUDART_CB double_into_second(void* arg) {
  PageParts* pp = static_cast<PageParts*>(arg);
  for (int i = 0; i < pp->n; ++i) pp->page[pp->n + i] = pp->page[i] * 2;
  ++pp->calls;
}

static void host_function_between_pinned_copies() {
  const int n = 300;  // three parts of one 4 KiB page
  const size_t bytes = n * sizeof(int);
  int* page = nullptr;
  CHECK(cudaMallocHost(&page, 4096));
  int *d_in, *d_a, *d_b, *d_c;
  for (int** p : {&d_in, &d_a, &d_b, &d_c}) CHECK(cudaMalloc(p, bytes));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  PageParts pp{page, n, 0};
  for (int captured = 0; captured < 2; ++captured) {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t x = nullptr;
    auto enqueue = [&] {
      plus<<<(n + 127) / 128, 128, 0, s>>>(d_in, d_a, n, 1);
      CHECK(cudaMemcpyAsync(page, d_a, bytes, cudaMemcpyDeviceToHost, s));
      CHECK(cudaLaunchHostFunc(s, double_into_second, &pp));
      CHECK(cudaMemcpyAsync(d_b, page + n, bytes, cudaMemcpyHostToDevice, s));
      plus<<<(n + 127) / 128, 128, 0, s>>>(d_b, d_c, n, 5);
      CHECK(cudaMemcpyAsync(page + 2 * n, d_c, bytes, cudaMemcpyDeviceToHost, s));
    };
    if (captured) {
      CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      enqueue();
      CHECK(cudaStreamEndCapture(s, &g));
      CHECK(cudaGraphInstantiate(&x, g, 0));
    }
    for (int round = 0; round < 3; ++round) {
      std::vector<int> in(n);
      for (int i = 0; i < n; ++i) in[i] = i * (round + 1) + 7 * captured;
      CHECK(cudaMemcpy(d_in, in.data(), bytes, cudaMemcpyHostToDevice));
      for (int i = 0; i < 3 * n; ++i) page[i] = -1;
      const int calls = pp.calls;
      if (captured) {
        launch_and_wait(x, s);
      } else {
        enqueue();
        CHECK(cudaStreamSynchronize(s));
      }
      EXPECT(pp.calls == calls + 1, "the host function ran %d times", pp.calls - calls);
      for (int i = 0; i < n; ++i) {
        const int a = in[i] + 1, b = a * 2, c = b + 5;
        EXPECT(page[i] == a && page[n + i] == b && page[2 * n + i] == c,
               "%s, round %d, element %d: %d %d %d, want %d %d %d",
               captured ? "captured" : "in a stream", round, i, page[i], page[n + i],
               page[2 * n + i], a, b, c);
      }
    }
    if (captured) destroy_graph(x, g);
  }
  CHECK(cudaStreamDestroy(s));
  free_device(d_in, d_a, d_b, d_c);
  CHECK(cudaFreeHost(page));
}

// ---------------------------------------------------------------------------------------------
// d2. Zero-copy polling: a kernel waits for a flag the host writes into mapped pinned memory

// Spins until *flag is set, counting its turns in *count (the same page: the host's write of
// the flag must not take the count back), then writes the flag plus one and its count to out.
__global__ void wait_for_flag(volatile int* flag, volatile int* count, int* out) {
  int seen, turns = 0;
  while ((seen = *flag) == 0) *count = ++turns;
  out[0] = seen + 1;
  out[1] = turns;
}

static void kernel_polls_mapped_memory() {
  int* h = nullptr;  // [0] the flag, [1] the count, [2..3] the kernel's answer
  CHECK(cudaHostAlloc(&h, 4096, cudaHostAllocMapped));
  for (int i = 0; i < 4; ++i) h[i] = 0;
  int* d = nullptr;
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&d), h, 0));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // On a stream of its own, then on the legacy default stream, which synchronous copies wait for.
  for (int round = 1; round <= 3; ++round) {
    cudaStream_t on = round == 3 ? cudaStream_t{} : s;
    wait_for_flag<<<1, 1, 0, on>>>(d, d + 1, d + 2);
    CHECK(cudaGetLastError());
    usleep(20000);  // the kernel is running (spinning) by now
    *reinterpret_cast<volatile int*>(h) = 40 + round;
    if (on) {
      CHECK(cudaStreamSynchronize(on));
    } else {
      CHECK(cudaDeviceSynchronize());
    }
    EXPECT(h[2] == 41 + round, "round %d: the kernel wrote %d, want %d", round, h[2], 41 + round);
    EXPECT(h[1] == h[3], "round %d: the kernel counted %d turns, its page holds %d", round, h[3],
           h[1]);
    h[0] = 0;
  }
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFreeHost(h));
}

// ---------------------------------------------------------------------------------------------
// d3. An interprocess memory handle opened twice in one process (the child)

static int ipc_child(const char* hex) {
  const cudaIpcMemHandle_t handle = from_hex<cudaIpcMemHandle_t>(hex);
  int *a = nullptr, *b = nullptr;
  CHECK(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&a), handle, cudaIpcMemLazyEnablePeerAccess));
  CHECK(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&b), handle, cudaIpcMemLazyEnablePeerAccess));
  EXPECT(a == b, "opened twice: %p, then %p", static_cast<void*>(a), static_cast<void*>(b));
  CHECK(cudaIpcCloseMemHandle(b));
  int v = 0;
  CHECK(cudaMemcpy(&v, a + 5, sizeof v, cudaMemcpyDeviceToHost));  // still open once
  EXPECT(v == 5 * 7, "a[5] = %d after one of two closes", v);
  const int mine = -3;
  CHECK(cudaMemcpy(a + 6, &mine, sizeof mine, cudaMemcpyHostToDevice));
  CHECK(cudaIpcCloseMemHandle(a));
  EXPECT(cudaIpcCloseMemHandle(a) != cudaSuccess, "a third close of a handle opened twice");
  cudaGetLastError();
  return 0;
}

static void ipc_handle_opened_twice(const char* self) {
  const int n = 64;
  int* d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  std::vector<int> h(n);
  for (int i = 0; i < n; ++i) h[i] = i * 7;
  CHECK(cudaMemcpy(d, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  cudaIpcMemHandle_t handle;
  CHECK(cudaIpcGetMemHandle(&handle, d));
  EXPECT(run_self(self, {"ipc", to_hex(handle)}) == 0, "the interprocess child failed");
  int v = 0;
  CHECK(cudaMemcpy(&v, d + 6, sizeof v, cudaMemcpyDeviceToHost));
  EXPECT(v == -3, "d[6] = %d after the child wrote it", v);
  CHECK(cudaFree(d));
}

// ---------------------------------------------------------------------------------------------
// d4. A kernel's attributes and the function cuKernelGetFunction gives

// Writes `bytes` (the dynamic shared memory the launch gave) into the last word of it and
// reads it back into *out.
static const char kLastShared[] = R"(
.version 7.0
.target sm_75
.address_size 64

.extern .shared .align 16 .b8 dyn[];

.visible .entry last_shared_a(
  .param .u64 last_shared_a_param_0,
  .param .u32 last_shared_a_param_1
)
{
  .reg .b32 %r<5>;
  .reg .b64 %rd<3>;

  ld.param.u64 %rd1, [last_shared_a_param_0];
  ld.param.u32 %r1, [last_shared_a_param_1];
  mov.u32 %r2, dyn;
  add.s32 %r3, %r2, %r1;
  st.shared.u32 [%r3+-4], %r1;
  bar.sync 0;
  ld.shared.u32 %r4, [%r3+-4];
  cvta.to.global.u64 %rd2, %rd1;
  st.global.u32 [%rd2], %r4;
  ret;
}

.visible .entry last_shared_b(
  .param .u64 last_shared_b_param_0,
  .param .u32 last_shared_b_param_1
)
{
  .reg .b32 %r<5>;
  .reg .b64 %rd<3>;

  ld.param.u64 %rd1, [last_shared_b_param_0];
  ld.param.u32 %r1, [last_shared_b_param_1];
  mov.u32 %r2, dyn;
  add.s32 %r3, %r2, %r1;
  st.shared.u32 [%r3+-4], %r1;
  bar.sync 0;
  ld.shared.u32 %r4, [%r3+-4];
  cvta.to.global.u64 %rd2, %rd1;
  st.global.u32 [%rd2], %r4;
  ret;
}
)";

static CUresult launch_with_shared(CUfunction f, CUdeviceptr out, unsigned bytes) {
  void* params[] = {&out, &bytes};
  CUresult rc = cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, bytes, nullptr, params, nullptr);
  if (rc == CUDA_SUCCESS) rc = cuCtxSynchronize();
  return rc;
}

static void kernel_attributes_reach_functions() {
  CUdevice dev;
  CU(cuCtxGetDevice(&dev));
  int optin = 0;
  CU(cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev));
  EXPECT(optin > 48 * 1024, "opt-in shared memory per block: %d", optin);
  const unsigned big = static_cast<unsigned>(optin);
  CUlibrary lib;
  CU(cuLibraryLoadData(&lib, kLastShared, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel ka, kb;
  CU(cuLibraryGetKernel(&ka, lib, "last_shared_a"));
  CU(cuLibraryGetKernel(&kb, lib, "last_shared_b"));
  CUdeviceptr out;
  CU(cuMemAlloc(&out, sizeof(unsigned)));

  // Set on the kernel: a launch through its function may use it.
  CU(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin, ka, dev));
  CUfunction fa;
  CU(cuKernelGetFunction(&fa, ka));
  int seen = 0;
  CU(cuFuncGetAttribute(&seen, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, fa));
  EXPECT(seen == optin, "the kernel's function reports %d, the kernel was given %d", seen, optin);
  CU(launch_with_shared(fa, out, big));
  unsigned got = 0;
  CU(cuMemcpyDtoH(&got, out, sizeof got));
  EXPECT(got == big, "through the function: %u", got);
  // A function handle asked for after the setting, and the kernel itself, alike.
  CUfunction fa2;
  CU(cuKernelGetFunction(&fa2, ka));
  CU(launch_with_shared(fa2, out, big));
  CU(launch_with_shared(reinterpret_cast<CUfunction>(ka), out, big));

  // Set on the kernel's function: it overrides the kernel's setting, for launches of the
  // kernel in this context too; cuKernelGetAttribute still reports the kernel's own.
  CUfunction fb;
  CU(cuKernelGetFunction(&fb, kb));
  int before = 0;
  CU(cuKernelGetAttribute(&before, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, kb, dev));
  CU(cuFuncSetAttribute(fb, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin));
  CU(launch_with_shared(fb, out, big));
  CU(launch_with_shared(reinterpret_cast<CUfunction>(kb), out, big));
  CU(cuMemcpyDtoH(&got, out, sizeof got));
  EXPECT(got == big, "through the kernel: %u", got);
  int after = 0;
  CU(cuKernelGetAttribute(&after, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, kb, dev));
  EXPECT(after == before, "the kernel's own setting changed from %d to %d", before, after);
  // Even a kernel setting made later does not undo the function's.
  CU(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 0, kb, dev));
  CU(launch_with_shared(fb, out, big));

  CU(cuMemFree(out));
  CU(cuLibraryUnload(lib));
}

// ---------------------------------------------------------------------------------------------
// d5. Pools: release thresholds and trimming, attributes, a pointer's pool

static void pool_thresholds_and_handles() {
  CUdevice dev;
  CU(cuCtxGetDevice(&dev));
  int types = 0;
  CU(cuDeviceGetAttribute(&types, CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, dev));
  EXPECT(types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, "pool handle types %d", types);
  int rt_types = 0;
  CHECK(cudaDeviceGetAttribute(&rt_types, cudaDevAttrMemoryPoolSupportedHandleTypes, 0));
  EXPECT(rt_types == types, "the runtime's pool handle types %d, the driver's %d", rt_types, types);
  int pools = 0;
  CU(cuDeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, dev));
  EXPECT(pools == 1, "memory pools supported: %d", pools);

  CUmemoryPool pool = nullptr;
  CU(cuDeviceGetDefaultMemPool(&pool, dev));
  cudaMemPool_t rt_pool = nullptr;
  CHECK(cudaDeviceGetDefaultMemPool(&rt_pool, 0));
  EXPECT(reinterpret_cast<void*>(pool) == reinterpret_cast<void*>(rt_pool),
         "the default pool: driver %p, runtime %p", static_cast<void*>(pool),
         static_cast<void*>(rt_pool));
  cuuint64_t threshold = 1;
  CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
  EXPECT(threshold == 0, "default release threshold %llu", (unsigned long long)threshold);

  // Below the threshold, freed memory stays reserved across synchronisations until trimmed.
  const size_t mib = size_t{1} << 20;
  cuuint64_t keep = 64 * mib;
  CU(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
  CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
  EXPECT(threshold == keep, "release threshold %llu", (unsigned long long)threshold);
  CUstream s;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr p = 0;
  CU(cuMemAllocAsync(&p, mib, s));
  CUmemoryPool of = nullptr;
  CU(cuPointerGetAttribute(&of, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p));
  EXPECT(of == pool, "the allocation's pool %p, the default pool %p", static_cast<void*>(of),
         static_cast<void*>(pool));
  CU(cuMemFreeAsync(p, s));
  CU(cuStreamSynchronize(s));
  CU(cuCtxSynchronize());
  cuuint64_t used = 1, reserved = 0;
  CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
  CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
  EXPECT(used == 0, "used %llu after the free", (unsigned long long)used);
  EXPECT(reserved >= mib, "reserved %llu after a free below the threshold",
         (unsigned long long)reserved);
  // Reserved memory serves the next allocation without growing the pool.
  CU(cuMemAllocAsync(&p, mib, s));
  CU(cuStreamSynchronize(s));
  cuuint64_t again = 0;
  CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &again));
  EXPECT(again == reserved, "reserved %llu, then %llu for the same allocation again",
         (unsigned long long)reserved, (unsigned long long)again);
  CU(cuMemFreeAsync(p, s));
  CU(cuStreamSynchronize(s));
  CU(cuMemPoolTrimTo(pool, 0));
  CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
  EXPECT(reserved == 0, "reserved %llu after trimming to 0", (unsigned long long)reserved);
  // Threshold 0: a synchronisation gives freed memory back.
  cuuint64_t none = 0;
  CU(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &none));
  CU(cuMemAllocAsync(&p, mib, s));
  CU(cuMemFreeAsync(p, s));
  CU(cuStreamSynchronize(s));
  CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
  EXPECT(reserved == 0, "reserved %llu after a synchronisation with threshold 0",
         (unsigned long long)reserved);

  // An explicit pool: its own attributes, and its allocations name it.
  CUmemPoolProps props = {};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = dev;
  CUmemoryPool mine = nullptr;
  CU(cuMemPoolCreate(&mine, &props));
  CU(cuMemAllocFromPoolAsync(&p, 3 * mib, mine, s));
  CU(cuStreamSynchronize(s));
  CU(cuPointerGetAttribute(&of, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p + 100));
  EXPECT(of == mine, "the explicit pool's allocation names %p, want %p", static_cast<void*>(of),
         static_cast<void*>(mine));
  CU(cuMemPoolGetAttribute(mine, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
  EXPECT(used >= 3 * mib, "the explicit pool's used memory %llu", (unsigned long long)used);
  CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
  EXPECT(used == 0, "the default pool's used memory %llu", (unsigned long long)used);
  int follow = -1;
  CU(cuMemPoolGetAttribute(mine, CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES, &follow));
  EXPECT(follow == 1, "reuse follows event dependencies: %d", follow);
  CU(cuMemFreeAsync(p, s));
  CU(cuStreamSynchronize(s));
  CU(cuMemPoolDestroy(mine));
  CU(cuStreamDestroy(s));
}

// ---------------------------------------------------------------------------------------------
// d6. Address reservations far larger than the device's memory

__global__ void fill_ints(int* p, int n, int v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v + i;
}

static void large_address_reservations() {
  CUdevice dev;
  CU(cuCtxGetDevice(&dev));
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t gran = 0;
  CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  const size_t gib = size_t{1} << 30;
  for (size_t size : {512 * gib, 1024 * gib}) {
    CUdeviceptr va = 0;
    CU(cuMemAddressReserve(&va, size, 0, 0, 0));
    // Two pieces mapped inside it, far apart: at its start and above 256 GiB.
    const size_t offsets[] = {0, 300 * gib};
    CUmemGenericAllocationHandle h[2];
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = dev;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    const int n = static_cast<int>(gran / sizeof(int));
    for (int k = 0; k < 2; ++k) {
      CU(cuMemCreate(&h[k], gran, &prop, 0));
      CU(cuMemMap(va + offsets[k], gran, 0, h[k], 0));
      CU(cuMemSetAccess(va + offsets[k], gran, &access, 1));
      int* piece = reinterpret_cast<int*>(va + offsets[k]);
      fill_ints<<<(n + 255) / 256, 256>>>(piece, n, 1000 * (k + 1));
      CHECK(cudaGetLastError());
    }
    CHECK(cudaDeviceSynchronize());
    for (int k = 0; k < 2; ++k) {
      std::vector<int> got(n);
      CHECK(cudaMemcpy(got.data(), reinterpret_cast<void*>(va + offsets[k]), gran,
                       cudaMemcpyDeviceToHost));
      for (int i = 0; i < n; i += 997) {
        EXPECT(got[i] == 1000 * (k + 1) + i, "%zu GiB reservation, piece %d: [%d] = %d", size / gib,
               k, i, got[i]);
      }
    }
    for (int k = 0; k < 2; ++k) {
      CU(cuMemUnmap(va + offsets[k], gran));
      CU(cuMemRelease(h[k]));
    }
    CU(cuMemAddressFree(va, size));
  }
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "ipc") == 0) return ipc_child(argv[2]);
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr));  // the primary context, current for the driver calls too
  // `driver_gaps PART` runs one part alone.
  const char* only = argc == 2 ? argv[1] : nullptr;
  auto part = [&](const char* name, auto check) {
    if (!only || strcmp(only, name) == 0) check();
  };
  part("pinned_attributes", pinned_pointer_attributes);
  part("unresolved_extern", unresolved_extern_function);
  part("default_pool", default_pool_counts);
  part("host_function_copies", host_function_between_pinned_copies);
  part("mapped_polling", kernel_polls_mapped_memory);
  part("ipc_twice", [&] { ipc_handle_opened_twice(argv[0]); });
  part("kernel_attributes", kernel_attributes_reach_functions);
  part("pools", pool_thresholds_and_handles);
  part("reservations", large_address_reservations);
  printf("driver_gaps: all checks passed\n");
  return 0;
}
