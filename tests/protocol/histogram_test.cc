#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "protocol/histogram.h"

namespace cuwire {
namespace {

TEST(LatencyHistogram, BucketsAreContiguousAndNarrow) {
  for (size_t i = 0; i + 1 < LatencyHistogram::kBuckets; ++i) {
    uint64_t lo = LatencyHistogram::lower_bound_of(i), hi = LatencyHistogram::lower_bound_of(i + 1);
    ASSERT_LT(lo, hi) << i;
    ASSERT_EQ(LatencyHistogram::index_of(lo), i);
    ASSERT_EQ(LatencyHistogram::index_of(hi - 1), i);
    // Above the linear range a bucket spans at most 1/64 of its lower bound.
    if (lo >= LatencyHistogram::kLinearLimit) {
      ASSERT_LE((hi - lo) * 64, lo) << i;
    }
  }
  // 100 s lands in a real bucket, not the overflow one.
  EXPECT_LT(LatencyHistogram::index_of(100'000'000'000ull), LatencyHistogram::kBuckets - 1);
}

TEST(LatencyHistogram, QuantilesWithinOnePercent) {
  LatencyHistogram h;
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> dist(10.0, 2.0);  // ~22 us median, wide spread
  std::vector<uint64_t> values;
  for (int i = 0; i < 100000; ++i) {
    uint64_t v = static_cast<uint64_t>(dist(rng)) + 100;
    values.push_back(v);
    h.record(v);
  }
  std::sort(values.begin(), values.end());
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    double exact =
        static_cast<double>(values[LatencyHistogram::nearest_rank(q, values.size()) - 1]);
    double got = static_cast<double>(h.quantile(q));
    EXPECT_NEAR(got, exact, exact * 0.01) << "q=" << q;
  }
  EXPECT_EQ(h.count(), values.size());
  EXPECT_EQ(h.min(), values.front());
  EXPECT_EQ(h.max(), values.back());
  EXPECT_EQ(h.quantile(1.0), values.back());

  LatencyHistogram other;
  other.record(1);
  h.merge(other);
  EXPECT_EQ(h.min(), 1u);
  EXPECT_EQ(h.count(), values.size() + 1);
}

// Percentiles of a few values are ranks among them: the p99 of two values is the larger, the
// median of two the smaller, of three the middle one.
TEST(LatencyHistogram, SmallCountsTakeTheNearestRank) {
  LatencyHistogram two;
  two.record(1000);
  two.record(50000);
  EXPECT_NEAR(static_cast<double>(two.quantile(0.99)), 50000.0, 500.0);
  EXPECT_NEAR(static_cast<double>(two.quantile(0.5)), 1000.0, 10.0);
  LatencyHistogram three;
  for (uint64_t v : {3000u, 1000u, 2000u}) three.record(v);
  EXPECT_NEAR(static_cast<double>(three.quantile(0.5)), 2000.0, 20.0);
  EXPECT_NEAR(static_cast<double>(three.quantile(0.9)), 3000.0, 30.0);
  LatencyHistogram hundred;
  for (uint64_t v = 1; v <= 100; ++v) hundred.record(v);  // exact buckets below 128 ns
  EXPECT_EQ(hundred.quantile(0.99), 99u);
  EXPECT_EQ(hundred.quantile(0.5), 50u);
  EXPECT_EQ(LatencyHistogram::nearest_rank(0.99, 2), 2u);
  EXPECT_EQ(LatencyHistogram::nearest_rank(0.01, 2), 1u);
}

}  // namespace
}  // namespace cuwire
