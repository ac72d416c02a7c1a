// A server that stops answering (stopped, hung, its host gone) while keeping the connection
// open: with CUWIRE_TIMEOUT the client's calls fail with CUDA_ERROR_DEVICE_UNAVAILABLE within
// a bound instead of waiting forever; a server that is only slow is waited for; connecting to
// a server that never answers the handshake is bounded too. The client is cuwire's
// libcuda.so.1, linked as this test's driver; each test runs in a process of its own (ctest).

#include <cuda.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "protocol/frame.h"
#include "protocol/messages.h"
#include "protocol/transport.h"
#include "tests/support/test_support.h"

namespace cuwire::testing {
namespace {

using namespace std::chrono_literals;

// A gpu-server stand-in that answers Hello as the real one does, then treats calls as the test
// asks: never answered (the first connection only; later ones, such as the client's liveness
// check, are accepted and never read, as a stopped process would) or answered late.
class FakeServer {
 public:
  enum class Calls { kNeverAnswer, kAnswerLate };

  FakeServer(const std::string& path, Calls calls, std::chrono::milliseconds delay = 0ms)
      : calls_(calls), delay_(delay) {
    Address a;
    EXPECT_TRUE(parse_address("unix:" + path, &a));
    address_ = a.to_string();
    EXPECT_TRUE(listen_on(a, {}, &listener_).is_ok());
    accept_thread_ = std::thread([this] {
      listener_->run([this](std::unique_ptr<ByteStream> s) {
        std::shared_ptr<ByteStream> stream(std::move(s));
        std::lock_guard l(mu_);
        const int n = connections_++;
        streams_.push_back(stream);
        threads_.emplace_back([this, stream, n] { serve(*stream, n); });
      });
    });
  }

  ~FakeServer() {
    listener_->stop();
    accept_thread_.join();
    std::lock_guard l(mu_);
    for (auto& s : streams_) s->shutdown();
    for (auto& t : threads_) t.join();
  }

  const std::string& address() const { return address_; }
  int connections() {
    std::lock_guard l(mu_);
    return connections_;
  }

 private:
  void serve(ByteStream& s, int n) {
    if (calls_ == Calls::kNeverAnswer && n > 0) return;  // held open, never read
    Frame f;
    if (!read_frame(s, FrameLimits{}, &f) || f.type() != FrameType::kHello) return;
    // A lane offered with the Hello is declined (Welcome.lane stays false).
    HelloMsg hello;
    int lane = -1;
    if (decode_hello(f, &hello) && hello.lane && s.receive_fd(&lane) && lane >= 0) close(lane);
    WelcomeMsg w;
    w.backend = "fake";
    std::vector<uint8_t> msg;
    encode_welcome(w, &msg);
    FrameHeader h;
    h.type = static_cast<uint16_t>(FrameType::kWelcome);
    h.sequence = f.header.sequence;
    if (!write_frame(s, h, msg)) return;
    while (read_frame(s, FrameLimits{}, &f)) {
      if (f.type() != FrameType::kCall) return;  // Goodbye
      if (calls_ == Calls::kNeverAnswer || (f.header.flags & kFlagNoReply)) continue;
      std::this_thread::sleep_for(delay_);
      encode_reply(CUDA_SUCCESS, {}, &msg);
      FrameHeader r;
      r.type = static_cast<uint16_t>(FrameType::kReply);
      r.sequence = f.header.sequence;
      if (!write_frame(s, r, msg)) return;
    }
  }

  Calls calls_;
  std::chrono::milliseconds delay_;
  std::string address_;
  std::unique_ptr<Listener> listener_;
  std::thread accept_thread_;
  std::mutex mu_;
  int connections_ = 0;                               // guarded by mu_
  std::vector<std::shared_ptr<ByteStream>> streams_;  // guarded by mu_
  std::vector<std::thread> threads_;                  // guarded by mu_
};

TEST(ClientTimeout, SilentServerIsDeclaredLost) {
  TempDir dir;
  FakeServer srv(dir.file("s.sock"), FakeServer::Calls::kNeverAnswer);
  setenv("CUWIRE_SERVER", srv.address().c_str(), 1);
  setenv("CUWIRE_TIMEOUT", "1", 1);
  ::testing::internal::CaptureStderr();
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(cuInit(0), CUDA_ERROR_DEVICE_UNAVAILABLE);
  int count = 0;
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_ERROR_DEVICE_UNAVAILABLE);
  std::string err = ::testing::internal::GetCapturedStderr();
  // Not a timing assertion: a hang would trip the test's timeout; this documents the intent.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
  EXPECT_NE(err.find("lost gpu-server at " + srv.address() + ": timed out"), std::string::npos)
      << err;
  EXPECT_EQ(err.find("lost gpu-server", err.find("lost gpu-server") + 1), std::string::npos)
      << "said more than once: " << err;
}

TEST(ClientTimeout, SlowServerThatAnswersIsWaitedFor) {
  TempDir dir;
  FakeServer srv(dir.file("s.sock"), FakeServer::Calls::kAnswerLate, 3500ms);
  setenv("CUWIRE_SERVER", srv.address().c_str(), 1);
  setenv("CUWIRE_TIMEOUT", "1", 1);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cuInit(0), CUDA_SUCCESS);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("lost gpu-server"), std::string::npos) << err;
  // The client checked on the server with fresh connections while it waited.
  EXPECT_GE(srv.connections(), 2);
}

TEST(ClientTimeout, HandshakeWithoutAnswerIsBounded) {
  TempDir dir;
  Address a;
  ASSERT_TRUE(parse_address("unix:" + dir.file("s.sock"), &a));
  std::unique_ptr<Listener> listener;  // listens, never accepts: connects queue, nobody reads
  ASSERT_TRUE(listen_on(a, {}, &listener).is_ok());
  setenv("CUWIRE_SERVER", a.to_string().c_str(), 1);
  setenv("CUWIRE_TIMEOUT", "1", 1);
  ::testing::internal::CaptureStderr();
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(cuInit(0), CUDA_ERROR_NO_DEVICE);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
  EXPECT_NE(err.find("gpu-server at " + a.to_string()), std::string::npos) << err;
  EXPECT_NE(err.find("timed out"), std::string::npos) << err;
}

}  // namespace
}  // namespace cuwire::testing
