// The client's fast path through cuwire's libcuda.so.1 and an in-process server (sim):
// fire-and-forget calls are buffered and batched (client-lib/core/connection.h: Batching), yet they
// reach the server on their own within the bound, keep the app's order across threads and
// batches, carry the bytes the app had when it called, and report their errors at the next
// synchronising call; large copies stream in both directions (server/calls/copies.h).

#include <cuda.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "generated/call_ids.h"
#include "protocol/messages.h"
#include "protocol/shm_lane.h"
#include "protocol/transport.h"
#include "server/session/server.h"
#include "server/session/session.h"
#include "tests/support/driver_client.h"

namespace cuwire::testing {
namespace {

using json = nlohmann::json;

class FastPath : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // FAST_PATH_TEST_RELAY=LIB: through a relay in front of the server (gpu-server --backend
    // cuda over LIB, cuwire's libcuda.so.1), whose copies go through staging buffers.
    server_ = new TestServer({.memory_bytes = uint64_t{2} << 30,
                              .relay_library = env_or_empty("FAST_PATH_TEST_RELAY"),
                              .relay_gpu_server = GPU_SERVER});
    ASSERT_NO_FATAL_FAILURE(use_server(*server_, &ctx_));
  }
  static void TearDownTestSuite() { delete server_; }

  // How many calls of `name` the server has executed, by its admin API.
  static uint64_t server_count(const std::string& name) {
    server::ControlCaller admin;
    admin.admin = true;
    const ControlReplyMsg r = server_->server().control(admin, ControlMsg{"stats", ""});
    EXPECT_TRUE(r.ok) << r.error;
    uint64_t n = 0;
    const json body = json::parse(r.body);
    for (const json& t : body["tenants"]) {
      for (const json& c : t["calls_by_name"]) {
        if (c["call"] == name) n += c["count"].get<uint64_t>();
      }
    }
    return n;
  }

  static TestServer* server_;
  static CUcontext ctx_;
};
TestServer* FastPath::server_ = nullptr;
CUcontext FastPath::ctx_ = nullptr;

TEST_F(FastPath, BufferedCallsReachTheServerWithoutASynchronisingCall) {
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc(&d, 64), CUDA_SUCCESS);
  const uint64_t before = server_count("cuMemsetD8Async");
  for (int i = 0; i < 10; ++i) ASSERT_EQ(cuMemsetD8Async(d, 1, 64, nullptr), CUDA_SUCCESS);
  // No call of this client waits for an answer from here on: only the flusher can send them.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (server_count("cuMemsetD8Async") < before + 10 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(server_count("cuMemsetD8Async"), before + 10);
  EXPECT_EQ(cuMemFree(d), CUDA_SUCCESS);
}

TEST_F(FastPath, ManyBatchesKeepTheirOrder) {
  // Far more calls than one buffer holds: each memset overwrites the last, so the bytes left
  // are the last call's only if every batch went out whole and in order.
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc(&d, 256), CUDA_SUCCESS);
  constexpr int kCalls = 20000;
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_EQ(cuMemsetD8Async(d + (i % 4) * 64, static_cast<unsigned char>(i), 64, nullptr),
              CUDA_SUCCESS);
  }
  uint8_t back[256];
  ASSERT_EQ(cuMemcpyDtoH(back, d, sizeof back), CUDA_SUCCESS);
  for (int q = 0; q < 4; ++q) {
    const auto want = static_cast<uint8_t>(kCalls - 4 + q);
    for (int j = 0; j < 64; ++j) ASSERT_EQ(back[q * 64 + j], want) << q << " " << j;
  }
  EXPECT_EQ(cuMemFree(d), CUDA_SUCCESS);
}

TEST_F(FastPath, AsyncCopiesCarryTheBytesTheAppHadWhenItCalled) {
  // Small sources are copied into the batch, large ones written at once: either way the app
  // may reuse its buffer as soon as the call returns.
  for (size_t n : {size_t{1000}, size_t{40} << 10, size_t{200} << 10, size_t{3} << 20}) {
    CUdeviceptr d = 0;
    ASSERT_EQ(cuMemAlloc(&d, n), CUDA_SUCCESS);
    std::vector<uint8_t> src(n, 0x5a);
    ASSERT_EQ(cuMemcpyHtoDAsync(d, src.data(), n, nullptr), CUDA_SUCCESS);
    std::memset(src.data(), 0xa5, n);
    std::vector<uint8_t> back(n);
    ASSERT_EQ(cuMemcpyDtoH(back.data(), d, n), CUDA_SUCCESS);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], 0x5a) << n << " at " << i;
    EXPECT_EQ(cuMemFree(d), CUDA_SUCCESS);
  }
}

TEST_F(FastPath, AnAsyncErrorComesBackAtTheNextSynchronisingCall) {
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc(&d, 64), CUDA_SUCCESS);
  // Past the allocation's end: refused by the server, told at the next synchronising call.
  ASSERT_EQ(cuMemsetD8Async(d + 32, 1, 64, nullptr), CUDA_SUCCESS);
  EXPECT_NE(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(d), CUDA_SUCCESS);
}

TEST_F(FastPath, ThreadsSharingTheConnectionKeepTheirOwnOrder) {
  // Each thread overwrites its own bytes many times, asynchronously, with round trips of the
  // other threads in between; each ends with its own last value.
  constexpr int kThreads = 4, kCalls = 3000;
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc(&d, kThreads * 64), CUDA_SUCCESS);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      if (cuCtxSetCurrent(ctx_) != CUDA_SUCCESS) ++failures;
      for (int i = 0; i < kCalls; ++i) {
        if (cuMemsetD8Async(d + t * 64, static_cast<unsigned char>(i + t), 64, nullptr)) {
          ++failures;
        }
        size_t free = 0, total = 0;
        if (i % 100 == 0 && cuMemGetInfo(&free, &total) != CUDA_SUCCESS) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  std::vector<uint8_t> back(kThreads * 64);
  ASSERT_EQ(cuMemcpyDtoH(back.data(), d, back.size()), CUDA_SUCCESS);
  for (int t = 0; t < kThreads; ++t) {
    for (int j = 0; j < 64; ++j) {
      ASSERT_EQ(back[t * 64 + j], static_cast<uint8_t>(kCalls - 1 + t)) << t;
    }
  }
  EXPECT_EQ(cuMemFree(d), CUDA_SUCCESS);
}

// Bytes that differ at every position and in every copy.
std::vector<uint8_t> pattern(size_t n, unsigned seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

TEST_F(FastPath, LargeCopiesStreamBothWaysWholeAndInOrder) {
  // Sizes around the streaming threshold and the staging chunk, odd ones included.
  for (size_t n :
       {size_t{1} << 20, (size_t{1} << 20) - 1, (size_t{9} << 20) + 7, size_t{40} << 20}) {
    CUdeviceptr d = 0;
    ASSERT_EQ(cuMemAlloc(&d, n + 64), CUDA_SUCCESS);
    ASSERT_EQ(cuMemsetD8(d + n, 0x77, 64), CUDA_SUCCESS);
    const std::vector<uint8_t> src = pattern(n, static_cast<unsigned>(n));
    ASSERT_EQ(cuMemcpyHtoD(d, src.data(), n), CUDA_SUCCESS);
    std::vector<uint8_t> back(n + 64, 0);
    ASSERT_EQ(cuMemcpyDtoH(back.data(), d, n + 64), CUDA_SUCCESS);
    ASSERT_TRUE(std::equal(src.begin(), src.end(), back.begin())) << n;
    for (size_t i = n; i < n + 64; ++i) ASSERT_EQ(back[i], 0x77) << n;
    // The async forms, on a stream of the app's, behind a memset that must land first.
    CUstream s = nullptr;
    ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    ASSERT_EQ(cuMemsetD8Async(d, 0, n, s), CUDA_SUCCESS);
    const std::vector<uint8_t> src2 = pattern(n, 7);
    ASSERT_EQ(cuMemcpyHtoDAsync(d, src2.data(), n, s), CUDA_SUCCESS);
    std::vector<uint8_t> back2(n, 0);
    ASSERT_EQ(cuMemcpyDtoHAsync(back2.data(), d, n, s), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    ASSERT_TRUE(back2 == src2) << n;
    EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
    EXPECT_EQ(cuMemFree(d), CUDA_SUCCESS);
  }
}

TEST_F(FastPath, ALargeCopyTheServerRefusesLeavesTheConnectionInStep) {
  // Refused before a byte of it is used (the range is past the allocation): its bytes are read
  // and dropped, and the next call is understood.
  constexpr size_t kBytes = 8 << 20;
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc(&d, kBytes), CUDA_SUCCESS);
  const std::vector<uint8_t> src = pattern(kBytes, 3);
  EXPECT_EQ(cuMemcpyHtoD(d + 4096, src.data(), kBytes), CUDA_ERROR_INVALID_VALUE);
  std::vector<uint8_t> back(kBytes);
  EXPECT_EQ(cuMemcpyDtoH(back.data(), d + 4096, kBytes), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemcpyHtoDAsync(d + 4096, src.data(), kBytes, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemcpyHtoD(d, src.data(), kBytes), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(back.data(), d, kBytes), CUDA_SUCCESS);
  EXPECT_TRUE(back == src);
  EXPECT_EQ(cuMemFree(d), CUDA_SUCCESS);
}

TEST_F(FastPath, AStreamedCopyFollowsTheWorkQueuedBeforeIt) {
  // A large device-to-host copy on the legacy stream waits for an async copy queued on it
  // just before, and a large host-to-device copy lands before a memset queued after it.
  constexpr size_t kBytes = 6 << 20;
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc(&d, kBytes), CUDA_SUCCESS);
  const std::vector<uint8_t> src = pattern(kBytes, 11);
  ASSERT_EQ(cuMemcpyHtoDAsync(d, src.data(), kBytes, nullptr), CUDA_SUCCESS);
  std::vector<uint8_t> back(kBytes);
  ASSERT_EQ(cuMemcpyDtoH(back.data(), d, kBytes), CUDA_SUCCESS);
  EXPECT_TRUE(back == src);
  ASSERT_EQ(cuMemcpyHtoD(d, src.data(), kBytes), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8Async(d, 0xee, 16, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(back.data(), d, kBytes), CUDA_SUCCESS);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(back[i], 0xee);
  EXPECT_TRUE(std::equal(src.begin() + 16, src.end(), back.begin() + 16));
  EXPECT_EQ(cuMemFree(d), CUDA_SUCCESS);
}

// ---- the shared-memory lane, from a hostile client's side (over the raw protocol)

// A session over the raw protocol whose Hello offers `lane_fd` as its lane (-1: no lane);
// *welcome is the server's answer.
std::unique_ptr<ByteStream> raw_session(const Address& server, int lane_fd, WelcomeMsg* welcome) {
  std::unique_ptr<ByteStream> s;
  EXPECT_TRUE(connect_stream(server, {}, &s).is_ok());
  HelloMsg hello;
  hello.manifest_hash = kManifestHash;
  hello.client_name = "lane-test";
  hello.lane = lane_fd >= 0;
  std::vector<uint8_t> msg;
  encode_hello(hello, &msg);
  EXPECT_TRUE(send_raw(*s, FrameType::kHello, msg).is_ok());
  if (lane_fd >= 0) {
    EXPECT_TRUE(s->send_fd(lane_fd).is_ok());
  }
  Frame f;
  EXPECT_TRUE(read_frame(*s, FrameLimits{}, &f).is_ok());
  EXPECT_TRUE(decode_welcome(f, welcome).is_ok());
  return s;
}

// Whether the server takes `fd` as a session's lane.
bool lane_taken(const Address& server, int fd) {
  WelcomeMsg w;
  std::unique_ptr<ByteStream> s = raw_session(server, fd, &w);
  Frame f;
  // The session works either way.
  std::vector<uint8_t> call;
  encode_call(static_cast<uint32_t>(CallId::k_cuDeviceGetCount), 0, {}, &call);
  EXPECT_TRUE(send_raw(*s, FrameType::kCall, call, 2).is_ok());
  EXPECT_TRUE(read_frame(*s, FrameLimits{}, &f).is_ok());
  EXPECT_EQ(f.type(), FrameType::kReply);
  return w.lane;
}

TEST_F(FastPath, TheServerTakesOnlyASealedLaneOfItsSize) {
  if (server_->relay()) GTEST_SKIP() << "talks to the server itself";
  const Address server = server_->server().addresses().at(0);
  std::unique_ptr<ShmLane> lane;
  int good = -1;
  ASSERT_TRUE(ShmLane::create(&lane, &good).is_ok());
  EXPECT_TRUE(lane_taken(server, good));
  close(good);
  // Not sealed: the client could cut it under the server's mapping.
  const int unsealed = memfd_create("unsealed", MFD_CLOEXEC);
  ASSERT_GE(unsealed, 0);
  ASSERT_EQ(ftruncate(unsealed, 4096 + 2 * ShmLane::kRingBytes), 0);
  EXPECT_FALSE(lane_taken(server, unsealed));
  close(unsealed);
  // Sealed, but too small to hold the lane.
  const int small = memfd_create("small", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(small, 0);
  ASSERT_EQ(ftruncate(small, 4096), 0);
  ASSERT_EQ(fcntl(small, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  EXPECT_FALSE(lane_taken(server, small));
  close(small);
  // Not a memfd at all.
  const int pipe_end[2] = {-1, -1};
  ASSERT_EQ(pipe(const_cast<int*>(pipe_end)), 0);
  EXPECT_FALSE(lane_taken(server, pipe_end[0]));
  close(pipe_end[0]);
  close(pipe_end[1]);
}

TEST_F(FastPath, LaneBytesWhereNoneMayBeEndOnlyThatSession) {
  if (server_->relay()) GTEST_SKIP() << "talks to the server itself";
  const Address server = server_->server().addresses().at(0);
  for (bool with_lane : {false, true}) {
    std::unique_ptr<ShmLane> lane;
    int fd = -1;
    if (with_lane) {
      ASSERT_TRUE(ShmLane::create(&lane, &fd).is_ok());
    }
    WelcomeMsg w;
    std::unique_ptr<ByteStream> s = raw_session(server, fd, &w);
    if (fd >= 0) close(fd);
    ASSERT_EQ(w.lane, with_lane);
    Frame f;
    // Without a lane any lane frame is refused; with one, a call that takes no copy's bytes.
    ArgBuffer args;
    std::vector<uint8_t> call;
    encode_call(static_cast<uint32_t>(CallId::k_cuDeviceGetCount), 0, args.data(), &call);
    FrameHeader h;
    h.type = static_cast<uint16_t>(FrameType::kCall);
    h.flags = kFlagBulkInLane;
    h.sequence = 2;
    h.message_bytes = static_cast<uint32_t>(call.size());
    h.bulk_bytes = 2 << 20;
    const std::span<const uint8_t> pieces[2] = {{reinterpret_cast<const uint8_t*>(&h), sizeof h},
                                                call};
    ASSERT_TRUE(s->write_all(pieces).is_ok());
    ASSERT_TRUE(read_frame(*s, FrameLimits{}, &f).is_ok());
    ASSERT_EQ(f.type(), FrameType::kError) << with_lane;
    ErrorMsg e;
    ASSERT_TRUE(decode_error(f, &e).is_ok());
    EXPECT_EQ(e.kind, ErrorKind::kMalformedFrame) << e.message;
  }
  // Everyone else goes on.
  size_t free = 0, total = 0;
  EXPECT_EQ(cuMemGetInfo(&free, &total), CUDA_SUCCESS);
}

}  // namespace
}  // namespace cuwire::testing
