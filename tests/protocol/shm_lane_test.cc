// The shared-memory data lane (protocol/shm_lane.h): bytes cross it whole and in order in both
// directions, across the rings' ends; a server refuses a memfd it cannot trust; a peer that
// scribbles on the counters cannot make the other side read or write outside the lane.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "protocol/shm_lane.h"

namespace cuwire {
namespace {

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = static_cast<uint8_t>(seed >> 24);
  }
  return v;
}

TEST(ShmLane, BytesCrossWholeAndInOrderBothWays) {
  std::unique_ptr<ShmLane> client, server;
  int fd = -1;
  ASSERT_TRUE(ShmLane::create(&client, &fd).is_ok());
  ASSERT_TRUE(ShmLane::attach(dup(fd), &server).is_ok());
  close(fd);
  // Copies of odd sizes, together many times the ring, so every wrap-around is crossed.
  const std::vector<size_t> sizes = {
      1,      4095, ShmLane::kRingBytes - 3, ShmLane::kRingBytes + 17, 3 * ShmLane::kRingBytes + 5,
      1 << 20};
  for (bool up : {true, false}) {
    ShmLane& producer = up ? *client : *server;
    ShmLane& consumer = up ? *server : *client;
    std::thread writer([&] {
      for (size_t i = 0; i < sizes.size(); ++i) {
        const std::vector<uint8_t> v = pattern(sizes[i], static_cast<uint32_t>(i));
        ASSERT_TRUE(producer.produce(up, v.data(), v.size(), nullptr).is_ok());
      }
    });
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::vector<uint8_t> got(sizes[i]);
      if (i % 2) {
        ASSERT_TRUE(consumer.consume(up, got.data(), got.size(), nullptr).is_ok());
      } else {
        size_t at = 0;  // through the in-place reader
        ASSERT_TRUE(consumer
                        .consume(up, nullptr, got.size(), nullptr,
                                 [&](const uint8_t* p, size_t n) {
                                   std::memcpy(got.data() + at, p, n);
                                   at += n;
                                 })
                        .is_ok());
      }
      ASSERT_EQ(got, pattern(sizes[i], static_cast<uint32_t>(i))) << up << " copy " << i;
    }
    writer.join();
  }
}

TEST(ShmLane, AWaitEndsWhenThePeerIsGone) {
  std::unique_ptr<ShmLane> client, server;
  int fd = -1;
  ASSERT_TRUE(ShmLane::create(&client, &fd).is_ok());
  ASSERT_TRUE(ShmLane::attach(fd, &server).is_ok());
  std::atomic<int> asked{0};
  std::vector<uint8_t> buf(16);
  // Nothing is produced: the consumer asks whether to go on, and stops when told no.
  const Status s = server->consume(true, buf.data(), buf.size(), [&] { return ++asked < 3; });
  EXPECT_EQ(s.code(), Status::Code::kDisconnected);
  EXPECT_EQ(asked.load(), 3);
}

TEST(ShmLane, TheServerRefusesWhatItCannotTrust) {
  std::unique_ptr<ShmLane> lane;
  const int unsealed = memfd_create("t", MFD_CLOEXEC);
  ASSERT_EQ(ftruncate(unsealed, 4096 + 2 * ShmLane::kRingBytes), 0);
  EXPECT_FALSE(ShmLane::attach(unsealed, &lane).is_ok());
  const int wrong_header = memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_EQ(ftruncate(wrong_header, 4096 + 2 * ShmLane::kRingBytes), 0);
  ASSERT_EQ(fcntl(wrong_header, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  EXPECT_FALSE(ShmLane::attach(wrong_header, &lane).is_ok());
  EXPECT_EQ(lane, nullptr);
}

TEST(ShmLane, CountersAPeerScribblesOnStayInsideTheLane) {
  std::unique_ptr<ShmLane> client, server;
  int fd = -1;
  ASSERT_TRUE(ShmLane::create(&client, &fd).is_ok());
  ASSERT_TRUE(ShmLane::attach(dup(fd), &server).is_ok());
  // The client's view of the header, written at will.
  auto* raw = static_cast<uint8_t*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(raw, MAP_FAILED);
  close(fd);
  // Every word of the header's counters set to huge values: the server's reads and writes
  // stay in its rings (ASan would see otherwise), and it goes on.
  for (size_t off = 16; off + 8 <= 4096; off += 8) {
    const uint64_t junk = 0xfffffffffffffff0ull - off;
    std::memcpy(raw + off, &junk, sizeof junk);
  }
  std::vector<uint8_t> got(ShmLane::kRingBytes * 2);
  int polls = 0;
  (void)server->consume(true, got.data(), got.size(), [&] { return ++polls < 2; });
  const std::vector<uint8_t> out(ShmLane::kRingBytes * 2, 7);
  polls = 0;
  (void)server->produce(false, out.data(), out.size(), [&] { return ++polls < 2; });
  munmap(raw, 4096);
}

}  // namespace
}  // namespace cuwire
