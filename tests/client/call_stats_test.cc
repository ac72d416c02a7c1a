// The client's CUWIRE_STATS table (client-lib/core/call_stats.h): calls answered locally are rows
// of their own, and each row carries the bulk bytes of its calls.

#include <gtest/gtest.h>

#include <time.h>

#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client-lib/core/call_stats.h"
#include "generated/call_ids.h"

namespace cuwire::client {
namespace {

std::string row_of(const std::string& table, const std::string& call, const std::string& how) {
  std::istringstream in(table);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string c, h;
    words >> c >> h;
    if (c == call && h == how) return line;
  }
  return "";
}

TEST(ClientCallStats, LocalAnswersAndBytesHaveTheirColumns) {
  const auto attr = static_cast<uint32_t>(CallId::k_cuDeviceGetAttribute);
  const auto copy = static_cast<uint32_t>(CallId::k_cuMemcpyHtoD_v2);
  const auto launch = static_cast<uint32_t>(CallId::k_cuLaunchKernel);
  record_call(attr, 50'000, CallKind::kRoundTrip);
  for (int i = 0; i < 99; ++i) record_call(attr, 80, CallKind::kLocal);
  record_call(copy, 300'000, CallKind::kRoundTrip, 3 << 20);
  record_call(copy, 300'000, CallKind::kRoundTrip, 1 << 20);
  record_call(launch, 2'000, CallKind::kAsync, 24);
  const std::string t = format_call_stats();
  const std::string local = row_of(t, "cuDeviceGetAttribute", "local");
  ASSERT_FALSE(local.empty()) << t;
  EXPECT_NE(local.find(" 99 "), std::string::npos) << local;
  EXPECT_NE(local.find("0.08 us"), std::string::npos) << local;
  EXPECT_FALSE(row_of(t, "cuDeviceGetAttribute", "reply").empty()) << t;
  const std::string copies = row_of(t, "cuMemcpyHtoD_v2", "reply");
  EXPECT_NE(copies.find("4096.0 KiB"), std::string::npos) << copies;
  EXPECT_NE(row_of(t, "cuLaunchKernel", "async").find("24 B"), std::string::npos) << t;
  EXPECT_NE(t.find("99 of them answered locally"), std::string::npos) << t;
  const std::string all = row_of(t, "all", "calls");
  EXPECT_NE(all.find(" 103 "), std::string::npos) << all;
}

// Each thread records into rows of its own; the table adds them up, those of ended threads too.
TEST(ClientCallStats, RowsOfEveryThreadAddUp) {
  const auto id = static_cast<uint32_t>(CallId::k_cuStreamWaitEvent);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([id, t] {
      for (int i = 0; i < 1000; ++i) record_call(id, 1'000 * (t + 1), CallKind::kAsync, 8);
    });
  }
  for (auto& th : threads) th.join();
  // A thread started after the others ended reuses a shard: its calls still count once.
  std::thread([id] { record_call(id, 9'000'000, CallKind::kAsync, 8); }).join();
  const std::string row = row_of(format_call_stats(), "cuStreamWaitEvent", "async");
  ASSERT_FALSE(row.empty());
  EXPECT_NE(row.find(" 4001 "), std::string::npos) << row;
  EXPECT_NE(row.find("9.0 ms"), std::string::npos) << row;    // the max
  EXPECT_NE(row.find("31.3 KiB"), std::string::npos) << row;  // 4001 * 8 bytes
}

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

// The cheap clock agrees with CLOCK_MONOTONIC over the same interval, whichever clock it is on
// this machine. Each tick reading is bracketed by two monotonic ones, so a thread preempted
// between them widens the bracket instead of failing the check.
TEST(ClientCallStats, CallTicksMeasureNanoseconds) {
  for (int round = 0; round < 3; ++round) {
    const uint64_t a0 = monotonic_ns(), t0 = call_ticks(), b0 = monotonic_ns();
    const timespec nap{0, 3'000'000};
    nanosleep(&nap, nullptr);
    const uint64_t a1 = monotonic_ns(), t1 = call_ticks(), b1 = monotonic_ns();
    const double shortest = static_cast<double>(a1 - b0), longest = static_cast<double>(b1 - a0);
    const double ticks = static_cast<double>(ticks_to_ns(t1 - t0));
    EXPECT_GE(shortest, 3e6);
    EXPECT_GE(ticks, 0.98 * shortest - 20'000) << "round " << round;
    EXPECT_LE(ticks, 1.02 * longest + 20'000) << "round " << round;
  }
}

}  // namespace
}  // namespace cuwire::client
