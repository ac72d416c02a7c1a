// LatencyHistogram: a log-linear histogram in the manner of HdrHistogram, for latencies from
// 100 ns to 100 s at about 1% precision, in fixed memory (no allocation when recording).
//
// Buckets: values below 128 ns are exact-ish (one bucket per ns); above, each power of two is
// split into 64 linear sub-buckets, so a bucket is at most 1/64 (1.6%) of its value wide and
// the midpoint reported is within 0.8%.
//
// Thread-safety: none; callers serialise (per-thread histograms or a lock).
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

namespace cuwire {

class LatencyHistogram {
 public:
  static constexpr int kSubBits = 6;                              // 64 sub-buckets per power of two
  static constexpr uint64_t kLinearLimit = 1u << (kSubBits + 1);  // 128: one bucket per ns
  static constexpr int kMaxExponent = 37;                         // 2^37 ns ~ 137 s
  static constexpr size_t kBuckets =
      kLinearLimit + (kMaxExponent - kSubBits) * (size_t{1} << kSubBits);

  void record(uint64_t ns) {
    ++buckets_[index_of(ns)];
    ++count_;
    sum_ += ns;
    if (ns > max_) max_ = ns;
    if (count_ == 1 || ns < min_) min_ = ns;
  }

  void merge(const LatencyHistogram& o) {
    for (size_t i = 0; i < kBuckets; ++i) buckets_[i] += o.buckets_[i];
    if (o.count_ && (count_ == 0 || o.min_ < min_)) min_ = o.min_;
    count_ += o.count_;
    sum_ += o.sum_;
    if (o.max_ > max_) max_ = o.max_;
  }

  // Values recorded elsewhere (a concurrent histogram's snapshot): n of them in bucket i, then
  // the whole set's count, sum and extremes.
  void add_bucket(size_t i, uint64_t n) { buckets_[i] += n; }
  void add_summary(uint64_t count, uint64_t sum, uint64_t min, uint64_t max) {
    if (count == 0) return;
    if (count_ == 0 || min < min_) min_ = min;
    if (max > max_) max_ = max;
    count_ += count;
    sum_ += sum;
  }
  // Values at most `ns`, to the bucket: every value of a bucket that ends above ns is left out
  // (Prometheus' cumulative `le` buckets).
  uint64_t count_at_most(uint64_t ns) const {
    uint64_t n = 0;
    for (size_t i = 0; i < kBuckets && lower_bound_of(i + 1) <= ns + 1; ++i) n += buckets_[i];
    return n;
  }

  uint64_t count() const { return count_; }
  uint64_t bucket(size_t i) const { return buckets_[i]; }
  uint64_t sum() const { return sum_; }
  uint64_t min() const { return min_; }
  uint64_t max() const { return max_; }
  double mean() const { return count_ ? static_cast<double>(sum_) / count_ : 0.0; }

  // Value at quantile q in [0, 1] by nearest rank (the ceil(q * count)-th smallest, so the p99
  // of two values is the larger), as the midpoint of the bucket holding it (exact extremes).
  uint64_t quantile(double q) const {
    if (count_ == 0) return 0;
    if (q <= 0) return min_;
    if (q >= 1) return max_;
    uint64_t rank = nearest_rank(q, count_);
    uint64_t seen = 0;
    for (size_t i = 0; i < kBuckets; ++i) {
      seen += buckets_[i];
      if (seen >= rank) {
        uint64_t lo = lower_bound_of(i), hi = lower_bound_of(i + 1);
        uint64_t mid = lo + (hi - lo) / 2;
        return mid < min_ ? min_ : (mid > max_ ? max_ : mid);
      }
    }
    return max_;
  }

  // The nearest rank (1-based) of quantile q in (0, 1) among n values: ceil(q * n), less a
  // hair so that a product that should be whole (0.99 * 100) is not rounded up past it.
  static uint64_t nearest_rank(double q, uint64_t n) {
    const double r = std::ceil(q * static_cast<double>(n) - 1e-9);
    if (!(r >= 1)) return 1;  // NaN too
    return r >= static_cast<double>(n) ? n : static_cast<uint64_t>(r);
  }

  // Bucket layout, public for tests and for exporting as cumulative buckets.
  static size_t index_of(uint64_t v) {
    if (v < kLinearLimit) return static_cast<size_t>(v);
    int e = std::bit_width(v) - 1;  // v in [2^e, 2^(e+1)), e >= kSubBits + 1
    if (e >= kMaxExponent + 1) return kBuckets - 1;
    uint64_t sub = (v >> (e - kSubBits)) & ((uint64_t{1} << kSubBits) - 1);
    return kLinearLimit + static_cast<size_t>(e - kSubBits - 1) * (size_t{1} << kSubBits) +
           static_cast<size_t>(sub);
  }
  static uint64_t lower_bound_of(size_t i) {
    if (i < kLinearLimit) return i;
    size_t k = i - kLinearLimit;
    int e = static_cast<int>(k >> kSubBits) + kSubBits + 1;
    uint64_t sub = k & ((size_t{1} << kSubBits) - 1);
    return (uint64_t{1} << e) + (sub << (e - kSubBits));
  }

 private:
  std::array<uint64_t, kBuckets> buckets_{};  // a server's totals outgrow 32 bits
  uint64_t count_ = 0, sum_ = 0, min_ = 0, max_ = 0;
};

}  // namespace cuwire
