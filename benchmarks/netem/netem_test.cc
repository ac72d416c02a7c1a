// The link emulator (netem.h): what it must do whatever the machine. Bytes arrive intact and in
// order both ways; a round trip takes at least the RTT asked; a transfer takes at least its
// bytes over the bandwidth; both ends learn of the other's close. Upper bounds (how close it
// comes to what was asked) are the benchmark's to measure (cuwire-netem --measure), not a test's.
#include "benchmarks/netem/netem.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace cuwire::netem {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

// A listening socket on 127.0.0.1 whose one connection is served by `serve(fd)` on a thread.
class Far {
 public:
  template <typename Serve>
  explicit Far(Serve serve) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    EXPECT_EQ(listen(fd_, 4), 0);
    socklen_t len = sizeof sa;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    EXPECT_TRUE(
        parse_address("tcp:127.0.0.1:" + std::to_string(ntohs(sa.sin_port)), &address_).is_ok());
    thread_ = std::thread([this, serve] {
      const int c = accept(fd_, nullptr, nullptr);
      if (c >= 0) {
        serve(c);
        close(c);
      }
    });
  }
  ~Far() {
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
  }
  const Address& address() const { return address_; }

 private:
  int fd_ = -1;
  Address address_;
  std::thread thread_;
};

int dial(const Address& a) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = htons(a.port);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

bool read_n(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool write_n(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = write(fd, c, n);
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

std::unique_ptr<Emulator> through(const Address& to, const LinkSpec& link) {
  Address listen;
  EXPECT_TRUE(parse_address("tcp:127.0.0.1:0", &listen).is_ok());
  std::unique_ptr<Emulator> em;
  Status s = Emulator::start(listen, to, link, &em);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return em;
}

TEST(Netem, ProfilesAndUnits) {
  LinkSpec l;
  ASSERT_TRUE(profile("25gbe", &l));
  EXPECT_EQ(l.rtt, microseconds(25));
  EXPECT_EQ(l.bits_per_second, 25e9);
  ASSERT_TRUE(profile("cross-rack", &l));
  EXPECT_EQ(l.rtt, microseconds(200));
  for (const auto& name : profile_names()) EXPECT_TRUE(profile(name, &l)) << name;
  EXPECT_FALSE(profile("40gbe", &l));
  Nanos d{};
  EXPECT_TRUE(parse_duration("25us", &d));
  EXPECT_EQ(d, microseconds(25));
  EXPECT_TRUE(parse_duration("0.2ms", &d));
  EXPECT_EQ(d, microseconds(200));
  EXPECT_FALSE(parse_duration("25", &d));
  EXPECT_FALSE(parse_duration("-1us", &d));
  double r = 0;
  EXPECT_TRUE(parse_rate("25Gbit", &r));
  EXPECT_EQ(r, 25e9);
  EXPECT_TRUE(parse_rate("3GB/s", &r));
  EXPECT_EQ(r, 24e9);
  EXPECT_FALSE(parse_rate("fast", &r));
}

// Bytes both ways, intact and in order, through a link with a delay; each round trip takes at
// least the RTT asked.
TEST(Netem, HoldsEachRoundTripForItsRtt) {
  Far echo([](int c) {
    char buf[4096];
    for (;;) {
      const ssize_t n = read(c, buf, sizeof buf);
      if (n <= 0 || !write_n(c, buf, static_cast<size_t>(n))) return;
    }
  });
  LinkSpec link;
  link.rtt = milliseconds(2);
  auto em = through(echo.address(), link);
  const int fd = dial(em->address());
  for (int i = 0; i < 20; ++i) {
    std::string sent =
        "message " + std::to_string(i) + std::string(static_cast<size_t>(i) * 97, 'x');
    const auto t0 = Clock::now();
    ASSERT_TRUE(write_n(fd, sent.data(), sent.size()));
    std::string got(sent.size(), '\0');
    ASSERT_TRUE(read_n(fd, got.data(), got.size()));
    EXPECT_GE(Clock::now() - t0, milliseconds(2));
    EXPECT_EQ(got, sent);
  }
  // The client closes: the far end sees the end, closes in turn, and the client sees that.
  shutdown(fd, SHUT_WR);
  char c;
  EXPECT_EQ(read(fd, &c, 1), 0);
  close(fd);
  EXPECT_GE(em->bytes_up(), 20u * 8);
  EXPECT_EQ(em->bytes_up(), em->bytes_down());
}

// A transfer is paced: 4 MiB at 200 Mbit/s takes at least 4 MiB * 8 / 200 Mbit/s (168 ms), and
// every byte arrives.
TEST(Netem, PacesEachDirectionToItsBandwidth) {
  std::atomic<uint64_t> received{0}, sum{0};
  Far sink([&](int c) {
    std::vector<unsigned char> buf(1 << 16);
    for (;;) {
      const ssize_t n = read(c, buf.data(), buf.size());
      if (n <= 0) break;
      for (ssize_t i = 0; i < n; ++i) sum += buf[static_cast<size_t>(i)];
      received += static_cast<uint64_t>(n);
    }
    const uint64_t total = received;
    write_n(c, &total, sizeof total);
  });
  LinkSpec link;
  link.bits_per_second = 200e6;
  auto em = through(sink.address(), link);
  const int fd = dial(em->address());
  std::vector<unsigned char> block(1 << 20);
  uint64_t want_sum = 0;
  for (size_t i = 0; i < block.size(); ++i) {
    block[i] = static_cast<unsigned char>(i * 31 + 7);
    want_sum += block[i];
  }
  const auto t0 = Clock::now();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(write_n(fd, block.data(), block.size()));
  shutdown(fd, SHUT_WR);
  uint64_t got = 0;
  ASSERT_TRUE(read_n(fd, &got, sizeof got));
  const auto took = Clock::now() - t0;
  close(fd);
  EXPECT_EQ(got, 4u << 20);
  EXPECT_EQ(sum, 4 * want_sum);
  EXPECT_GE(took, milliseconds(4 * 8 * 1048576 / 200'000));  // 167 ms
}

// Nothing listens where it forwards: the client's connection is closed, and the emulator
// serves the next one.
TEST(Netem, AFarEndThatIsNotThereClosesTheConnection) {
  Address nowhere;
  ASSERT_TRUE(parse_address("tcp:127.0.0.1:1", &nowhere).is_ok());
  auto em = through(nowhere, LinkSpec{});
  const int fd = dial(em->address());
  char c;
  EXPECT_LE(read(fd, &c, 1), 0);
  close(fd);
  em->stop();
}

}  // namespace
}  // namespace cuwire::netem
