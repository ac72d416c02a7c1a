// Managed memory's host mirror (client-lib/calls/managed_memory.h): page-granular dirty tracking by
// write faults, pushes before a call, pulls after a synchronising one that never overwrite
// host writes, and chaining of faults outside managed ranges to the previous handler.
#include "client-lib/calls/managed_memory.h"

#include <gtest/gtest.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "generated/call_ids.h"
#include "protocol/memory_runs.h"

// ---- a fake device behind the driver calls the tracker makes
namespace {
uint64_t g_base = 0;
std::vector<uint8_t> g_device;
std::vector<std::pair<uint64_t, size_t>> g_pushes, g_pulls;
}  // namespace

extern "C" CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  g_pushes.emplace_back(dst, n);
  std::memcpy(g_device.data() + (dst - g_base), src, n);
  return CUDA_SUCCESS;
}
extern "C" CUresult CUDAAPI cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  g_pulls.emplace_back(src, n);
  std::memcpy(dst, g_device.data() + (src - g_base), n);
  return CUDA_SUCCESS;
}
// Zero-copy memory's copies go on a non-blocking stream of their own (a kernel on the legacy
// stream may be polling that memory).
std::vector<std::pair<uint64_t, size_t>> g_aside_pushes, g_aside_pulls;
int g_aside_streams = 0;  // made and not yet destroyed
extern "C" CUresult CUDAAPI cuStreamCreate(CUstream* s, unsigned int flags) {
  if (flags != CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
  ++g_aside_streams;
  *s = reinterpret_cast<CUstream>(uintptr_t{0x5});
  return CUDA_SUCCESS;
}
extern "C" CUresult CUDAAPI cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }
extern "C" CUresult CUDAAPI cuStreamDestroy_v2(CUstream) {
  --g_aside_streams;
  return CUDA_SUCCESS;
}
extern "C" CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n,
                                                 CUstream) {
  g_aside_pushes.emplace_back(dst, n);
  std::memcpy(g_device.data() + (dst - g_base), src, n);
  return CUDA_SUCCESS;
}
extern "C" CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream) {
  g_aside_pulls.emplace_back(src, n);
  std::memcpy(dst, g_device.data() + (src - g_base), n);
  return CUDA_SUCCESS;
}
// Not reached by these tests; the tracker's driver functions need them to link.
extern "C" CUresult CUDAAPI cuMemFree_v2(CUdeviceptr) { return CUDA_ERROR_NOT_SUPPORTED; }
extern "C" CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr*, size_t) { return CUDA_ERROR_NOT_SUPPORTED; }
// The fault handler settles the device before a host write while device work is queued; these
// tests queue none (no call goes out), so it never does.
extern "C" CUresult CUDAAPI cuCtxGetCurrent(CUcontext* c) {
  *c = nullptr;
  return CUDA_SUCCESS;
}
extern "C" CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext) { return CUDA_ERROR_NOT_SUPPORTED; }
extern "C" CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext*) { return CUDA_ERROR_NOT_SUPPORTED; }
extern "C" CUresult CUDAAPI cuCtxSynchronize() { return CUDA_ERROR_NOT_SUPPORTED; }
extern "C" CUresult CUDAAPI cuDeviceGetCount(int* n) {
  *n = 1;
  return CUDA_SUCCESS;
}
extern "C" CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext*, CUdevice) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
extern "C" CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
namespace cuwire::client {
void note_alloc(CUdeviceptr, size_t) {}
void note_free(CUdeviceptr) {}
uint64_t current_context_id() { return 0; }
bool in_library_host_memory(const void*, size_t) { return false; }
}  // namespace cuwire::client

namespace {
using namespace cuwire;
using namespace cuwire::client;

sigjmp_buf g_jump;
void test_handler(int) { siglongjmp(g_jump, 1); }

TEST(ManagedMemory, TracksPushesPullsAndChains) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // A handler of the app's, installed before the tracker's: foreign faults must reach it.
  struct sigaction sa {};
  sa.sa_handler = test_handler;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGSEGV, &sa, nullptr), 0);

  // A free address range for the mirror, as a server would hand out.
  void* probe = mmap(nullptr, 4 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(probe, MAP_FAILED);
  munmap(probe, 4 * page);
  g_base = reinterpret_cast<uint64_t>(probe);
  g_device.assign(4 * page, 0);
  ASSERT_TRUE(managed::map_mirror(g_base, 4 * page, 4 * page - 100));
  auto* host = reinterpret_cast<volatile uint8_t*>(g_base);
  uint64_t base = 0;
  size_t size = 0;
  ASSERT_TRUE(managed::find(g_base + 5, &base, &size));
  EXPECT_EQ(base, g_base);
  EXPECT_EQ(size, 4 * page - 100);
  EXPECT_FALSE(managed::find(g_base + 4 * page - 100, nullptr, nullptr));

  // Reads do not dirty; the first write to a page does, once.
  EXPECT_EQ(host[page], 0);
  EXPECT_EQ(managed::dirty_pages(), 0u);
  host[page + 1] = 11;
  host[page + 2] = 12;
  host[3 * page] = 33;
  EXPECT_EQ(managed::dirty_pages(), 2u);

  // Before a call: dirty pages, and only they, go to the device.
  ArgWriter launch(CallId::k_cuLaunchKernel);
  ASSERT_EQ(managed::before_call(launch), CUDA_SUCCESS);
  ASSERT_EQ(g_pushes.size(), 2u);
  EXPECT_EQ(g_pushes[0], std::make_pair(g_base + page, page));
  EXPECT_EQ(g_pushes[1], std::make_pair(g_base + 3 * page, page));
  EXPECT_EQ(g_device[page + 2], 12);
  EXPECT_EQ(managed::dirty_pages(), 0u);

  // The device writes; the host writes page 3 again before synchronising.
  g_device[0] = 7;
  g_device[page + 1] = 9;
  g_device[3 * page] = 99;
  host[3 * page + 1] = 34;
  ASSERT_EQ(managed::after_call(static_cast<uint32_t>(CallId::k_cuCtxSynchronize), CUDA_SUCCESS),
            CUDA_SUCCESS);
  EXPECT_EQ(host[0], 7);
  EXPECT_EQ(host[page + 1], 9);
  EXPECT_EQ(host[3 * page], 33) << "a pull overwrote a host write not yet pushed";
  EXPECT_EQ(host[3 * page + 1], 34);
  ASSERT_EQ(g_pulls.size(), 1u);  // pages 0..2 in one run
  EXPECT_EQ(g_pulls[0], std::make_pair(g_base, 3 * page));

  // Pulled pages are protected again; a non-synchronising call pulls nothing.
  host[0] = 8;
  EXPECT_EQ(managed::dirty_pages(), 2u);
  ASSERT_EQ(managed::after_call(static_cast<uint32_t>(CallId::k_cuLaunchKernel), CUDA_SUCCESS),
            CUDA_SUCCESS);
  EXPECT_EQ(g_pulls.size(), 1u);

  // A fault outside managed memory reaches the previous handler.
  void* guard = mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(guard, MAP_FAILED);
  bool chained = false;
  if (sigsetjmp(g_jump, 1) == 0) {
    *static_cast<volatile uint8_t*>(guard) = 1;
  } else {
    chained = true;
  }
  EXPECT_TRUE(chained);
  munmap(guard, page);

  managed::forget(g_base);
  EXPECT_FALSE(managed::find(g_base, nullptr, nullptr));
  EXPECT_EQ(managed::dirty_pages(), 0u);
}

// A host function's writes go with its answer (give_host_writes) even when another thread's
// push, which leaves the function's pages dirty for it, runs at the same time: that push clears
// the "anything dirty" flag first and sets it again only at its end, which must not make the
// function's thread think that nothing is dirty.
TEST(ManagedMemory, HostFunctionWritesGoWithItsAnswerWhileAnotherThreadPushes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  managed::set_bounded_wait(std::chrono::seconds(60));  // the wait itself is not under test
  struct Restore {
    ~Restore() { managed::set_bounded_wait(std::chrono::milliseconds(500)); }
  } restore;
  void* probe = mmap(nullptr, 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(probe, MAP_FAILED);
  munmap(probe, 2 * page);
  g_base = reinterpret_cast<uint64_t>(probe);
  g_device.assign(2 * page, 0);
  g_pushes.clear();
  ASSERT_TRUE(managed::map_mirror(g_base, 2 * page, 2 * page));
  auto* host = reinterpret_cast<volatile uint8_t*>(g_base);

  // The function runs: its view is held, and it writes page 1.
  const std::vector<managed::MirrorRange> view{{g_base, 2 * page}};
  managed::take_device_bytes({}, view);
  host[page + 3] = 42;
  ASSERT_EQ(managed::dirty_pages(), 1u);

  // Another thread pushes and keeps the held page dirty. While it holds the table, the
  // function returns and hands in its writes.
  std::vector<uint8_t> runs;
  std::thread function_thread;
  std::atomic<bool> answering{false};
  const CUresult rc = managed::push_dirty([&](uint64_t, uint64_t, size_t) {
    function_thread = std::thread([&] {
      answering = true;
      managed::give_host_writes(view, &runs);
    });
    while (!answering) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return CUDA_ERROR_NOT_READY;  // held: left for the function's answer
  });
  EXPECT_EQ(rc, CUDA_SUCCESS);
  ASSERT_TRUE(function_thread.joinable());
  function_thread.join();

  ASSERT_EQ(runs.size(), sizeof(MemoryRunHead) + page)
      << "the function's write was not in its answer";
  MemoryRunHead head;
  std::memcpy(&head, runs.data(), sizeof head);
  EXPECT_EQ(head.device, g_base + page);
  EXPECT_EQ(head.bytes, page);
  EXPECT_EQ(runs[sizeof head + 3], 42);
  EXPECT_EQ(managed::dirty_pages(), 0u);
  EXPECT_TRUE(g_pushes.empty()) << "the function's page was pushed apart from its answer";

  managed::forget(g_base);
}

// Zero-copy memory (pinned memory kernels use, here through adopt): a host write while a kernel
// may run does not wait for the device; a push sends only the bytes the host changed, so a
// kernel's writes to the rest of the page stay; a synchronisation brings the device's changes
// into a page the host wrote meanwhile, keeping the host's. Its copies never wait for the legacy
// stream.
TEST(ManagedMemory, ZeroCopyMemoryMovesOnlyWhatEachSideChanged) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* probe = mmap(nullptr, 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(probe, MAP_FAILED);
  munmap(probe, 2 * page);
  g_base = reinterpret_cast<uint64_t>(probe);
  g_device.assign(2 * page, 0);
  g_pushes.clear();
  g_pulls.clear();
  ASSERT_TRUE(managed::map_untracked(g_base, 2 * page));
  auto* host = reinterpret_cast<volatile uint8_t*>(g_base);
  host[5] = 1;  // plain memory until adopted
  ASSERT_TRUE(managed::adopt(g_base, 2 * page, 2 * page));

  // The first push sends all of it.
  ArgWriter launch(CallId::k_cuLaunchKernel);
  ASSERT_EQ(managed::before_call(launch), CUDA_SUCCESS);
  ASSERT_EQ(g_aside_pushes.size(), 1u);
  EXPECT_EQ(g_aside_pushes[0], std::make_pair(g_base, 2 * page));
  EXPECT_EQ(g_device[5], 1);
  EXPECT_EQ(g_aside_streams, 0);

  // A launch is out: the kernel writes bytes of page 0 while the host writes others (no wait
  // for the device, whose stand-in here would refuse: cuCtxSynchronize).
  g_device[100] = 0xaa;
  g_device[200] = 0xbb;
  for (int i = 8; i < 12; ++i) host[i] = static_cast<uint8_t>(i);
  host[12] = 0;  // written, unchanged: nothing to send
  host[2 * 64] = 5;
  host[2 * 64 + 3] = 6;  // changes a few bytes apart go as one
  ASSERT_EQ(managed::before_call(launch), CUDA_SUCCESS);
  ASSERT_EQ(g_aside_pushes.size(), 3u);
  EXPECT_EQ(g_aside_pushes[1], std::make_pair(g_base + 8, size_t{4}));
  EXPECT_EQ(g_aside_pushes[2], std::make_pair(g_base + 2 * 64, size_t{4}));
  EXPECT_EQ(g_device[11], 11);
  EXPECT_EQ(g_device[100], 0xaa) << "a push overwrote what the kernel wrote";

  // The host writes page 0 again, the kernel writes it too (one byte both: the host's stays,
  // to be pushed); the synchronisation merges the page and refreshes page 1.
  host[16] = 7;
  g_device[16] = 0xdd;
  g_device[300] = 0xcc;
  g_device[page + 1] = 0xee;
  ASSERT_EQ(managed::after_call(static_cast<uint32_t>(CallId::k_cuCtxSynchronize), CUDA_SUCCESS),
            CUDA_SUCCESS);
  EXPECT_TRUE(g_pulls.empty()) << "zero-copy memory pulled on the legacy stream";
  EXPECT_EQ(host[100], 0xaa);
  EXPECT_EQ(host[200], 0xbb);
  EXPECT_EQ(host[300], 0xcc);
  EXPECT_EQ(host[page + 1], 0xee);
  EXPECT_EQ(host[16], 7) << "a pull overwrote a host write not yet pushed";
  EXPECT_EQ(host[8], 8);
  ASSERT_EQ(managed::before_call(launch), CUDA_SUCCESS);
  EXPECT_EQ(g_aside_pushes.back(), std::make_pair(g_base + 16, size_t{1}));
  EXPECT_EQ(g_device[16], 7);
  EXPECT_EQ(g_device[300], 0xcc);
  EXPECT_TRUE(g_pushes.empty()) << "zero-copy memory pushed on the legacy stream";
  EXPECT_EQ(g_aside_streams, 0);
  EXPECT_EQ(managed::dirty_pages(), 0u);
  managed::forget(g_base);
}

}  // namespace
