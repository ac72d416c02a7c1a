// StdoutCapture (server/backend/cuda/stdout_capture.h): what a window's thread writes to stdout is
// the window's text, whatever else the process writes passes through, and removing the capture
// gives fd 1 back. The test points fd 1 at a file first, so "the real stdout" can be read.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "server/backend/cuda/stdout_capture.h"
#include "tests/support/test_support.h"

namespace cuwire::testing {
namespace {

using server::StdoutCapture;

class StdoutCaptureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::fflush(stdout);
    saved_ = dup(STDOUT_FILENO);
    int fd = open(dir_.file("stdout").c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_GE(dup2(fd, STDOUT_FILENO), 0);
    close(fd);
  }
  void TearDown() override {
    std::fflush(stdout);
    dup2(saved_, STDOUT_FILENO);
    close(saved_);
  }
  std::string real_stdout() {
    std::fflush(stdout);
    return read_file(dir_.file("stdout"));
  }

  TempDir dir_;
  int saved_ = -1;
};

void write_fd1(const std::string& s) {
  ASSERT_EQ(write(STDOUT_FILENO, s.data(), s.size()), static_cast<ssize_t>(s.size()));
}

TEST_F(StdoutCaptureTest, WindowsTakeTheirTextAndTheRestPassesThrough) {
  {
    std::shared_ptr<StdoutCapture> c;
    ASSERT_TRUE(StdoutCapture::acquire(&c).is_ok());
    std::printf("before\n");
    std::string text;
    size_t dropped = 0;
    int v = c->run(&text, 1 << 20, &dropped, [] {
      std::printf("buffered by stdio ");  // flushed by the window's end
      write_fd1("written to fd 1\n");
      return 7;
    });
    EXPECT_EQ(v, 7);
    // stdio's buffer reaches the pipe when the window ends, after the raw write.
    EXPECT_EQ(text, "written to fd 1\nbuffered by stdio ");
    EXPECT_EQ(dropped, 0u);
    std::printf("after\n");
    std::fflush(stdout);
    // A second acquire shares the capture.
    std::shared_ptr<StdoutCapture> again;
    ASSERT_TRUE(StdoutCapture::acquire(&again).is_ok());
    EXPECT_EQ(again.get(), c.get());
  }
  // Released: fd 1 is the file again, and everything outside the window reached it.
  write_fd1("released\n");
  EXPECT_EQ(real_stdout(), "before\nafter\nreleased\n");
}

TEST_F(StdoutCaptureTest, MoreThanAPipeHoldsAndTheLimit) {
  std::shared_ptr<StdoutCapture> c;
  ASSERT_TRUE(StdoutCapture::acquire(&c).is_ok());
  const std::string big(1 << 20, 'x');  // far more than a pipe buffers
  std::string text;
  size_t dropped = 0;
  c->run(&text, 4 << 20, &dropped, [&] { write_fd1(big); });
  EXPECT_EQ(text.size(), big.size());
  EXPECT_EQ(dropped, 0u);
  // A window appends to what is there, up to max_bytes in all.
  c->run(&text, (1 << 20) + 100, &dropped, [&] { write_fd1(std::string(1000, 'y')); });
  EXPECT_EQ(text.size(), (1u << 20) + 100);
  EXPECT_EQ(dropped, 900u);
  c.reset();
  EXPECT_EQ(real_stdout(), "");
}

TEST_F(StdoutCaptureTest, ConcurrentWindowsKeepTheirOwnText) {
  std::shared_ptr<StdoutCapture> c;
  ASSERT_TRUE(StdoutCapture::acquire(&c).is_ok());
  constexpr int kThreads = 4, kRounds = 50;
  std::vector<std::string> texts(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        size_t dropped = 0;
        c->run(&texts[t], 1 << 20, &dropped, [&] { std::printf("thread %d round %d\n", t, i); });
      }
    });
  }
  // Meanwhile, other output: a window takes whatever reaches fd 1 while it is open, from any
  // thread (so gpu-server writes its log elsewhere), and the rest passes through.
  for (int i = 0; i < 100; ++i) write_fd1("outside\n");
  for (auto& th : threads) th.join();
  const std::string outside = "outside\n";
  size_t outside_seen = 0;
  auto strip = [&](std::string s) {
    for (size_t at; (at = s.find(outside)) != std::string::npos; ++outside_seen) {
      s.erase(at, outside.size());
    }
    return s;
  };
  for (int t = 0; t < kThreads; ++t) {
    std::string want;
    for (int i = 0; i < kRounds; ++i) {
      want += "thread " + std::to_string(t) + " round " + std::to_string(i) + "\n";
    }
    EXPECT_EQ(strip(texts[t]), want) << "thread " << t;
  }
  c.reset();
  EXPECT_EQ(strip(real_stdout()), "");
  EXPECT_EQ(outside_seen, 100u);
}

}  // namespace
}  // namespace cuwire::testing
