// The client's CUWIRE_STATS table (client-lib/call_stats.h): calls answered locally are rows of
// their own, and each row carries the bulk bytes of its calls.

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "call_ids.h"
#include "call_stats.h"

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

}  // namespace
}  // namespace cuwire::client
