// ComputeShare (server/tenancy/compute_share.h) on a fake clock: tenants with saturating work on
// one GPU model that runs submissions in order, one at a time, each for a fixed time. Shares are
// measured from what the model ran (not from what the policy charged), over 10-second windows.
#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <vector>

#include "server/tenancy/compute_share.h"

namespace cuwire::server {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using Nanos = std::chrono::nanoseconds;

struct Load {
  int cap = 0;  // percent; 0: uncapped
  bool borrow = false;
  Nanos work = milliseconds(2);  // one submission's time on the GPU
  bool active = true;            // has work at all
};

// Runs `loads` for `total`, and returns each tenant's share (percent of wall time the model
// ran its work) in every 10-second window after the first second.
// A tenant's cap changing while the model runs (a reload).
struct CapChange {
  Nanos at;
  size_t tenant;
  int cap;
};

std::vector<std::vector<double>> run(const std::vector<Load>& loads, Nanos total,
                                     Nanos poll = microseconds(200),
                                     const std::vector<CapChange>& changes = {}) {
  ComputeShare share({});
  const Nanos step = microseconds(50);
  std::vector<int> ids;
  for (const Load& l : loads) ids.push_back(share.add_tenant(l.cap, l.borrow, Nanos{0}));
  struct Item {
    int tenant;
    Nanos left;
  };
  std::deque<Item> gpu;                               // in submission order
  std::vector<int> finished_unseen(loads.size(), 0);  // complete, not yet polled
  std::vector<Nanos> ran(loads.size(), Nanos{0});
  std::vector<std::vector<double>> windows;
  std::vector<Nanos> window_start_ran(loads.size(), Nanos{0});
  const Nanos window = std::chrono::seconds(10);
  Nanos window_start = std::chrono::seconds(1);
  Nanos next_poll{0};
  for (Nanos now{0}; now < total; now += step) {
    for (const CapChange& c : changes) {
      if (c.at == now) share.set_cap(ids[c.tenant], c.cap, now);
    }
    // Submitters: each active tenant submits whenever the policy lets it.
    for (size_t t = 0; t < loads.size(); ++t) {
      if (!loads[t].active) continue;
      bool any = false;
      while (share.try_submit(ids[t], now)) {
        gpu.push_back({ids[t], loads[t].work});
        any = true;
      }
      share.set_waiting(ids[t], any ? 0 : 1, now);
    }
    // The GPU runs the oldest submission for one step.
    if (!gpu.empty()) {
      ran[gpu.front().tenant] += step;
      gpu.front().left -= step;
      if (gpu.front().left <= Nanos{0}) {
        ++finished_unseen[gpu.front().tenant];
        gpu.pop_front();
      }
    }
    // The poll thread sees completions late.
    if (now >= next_poll) {
      for (size_t t = 0; t < loads.size(); ++t) {
        for (; finished_unseen[t] > 0; --finished_unseen[t]) share.completed(ids[t], now);
      }
      share.advance(now);
      next_poll = now + poll;
    }
    if (now == window_start) window_start_ran = ran;
    if (now == window_start + window) {
      std::vector<double> w;
      for (size_t t = 0; t < loads.size(); ++t) {
        w.push_back(100.0 * static_cast<double>((ran[t] - window_start_ran[t]).count()) /
                    static_cast<double>(window.count()));
      }
      windows.push_back(w);
      window_start = now;
      window_start_ran = ran;
    }
  }
  return windows;
}

void expect_shares(const std::vector<std::vector<double>>& windows, std::vector<double> want,
                   double within) {
  ASSERT_FALSE(windows.empty());
  for (const auto& w : windows) {
    for (size_t t = 0; t < want.size(); ++t) {
      EXPECT_NEAR(w[t], want[t], within) << "tenant " << t;
    }
  }
}

TEST(ComputeShare, ThirtySeventyHoldsEachCap) {
  expect_shares(run({{30}, {70}}, std::chrono::seconds(31)), {30, 70}, 3);
}

TEST(ComputeShare, ACapChangedWhileRunningHoldsFromThen) {
  // 30/70 for the first window, 60/40 from 11 s on.
  const auto w = run({{30}, {70}}, std::chrono::seconds(22), microseconds(200),
                     {{std::chrono::seconds(11), 0, 60}, {std::chrono::seconds(11), 1, 40}});
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NEAR(w[0][0], 30, 3);
  EXPECT_NEAR(w[0][1], 70, 3);
  EXPECT_NEAR(w[1][0], 60, 3);
  EXPECT_NEAR(w[1][1], 40, 3);
}

TEST(ComputeShare, TwentyThirtyFiftyHoldsEachCap) {
  expect_shares(run({{20}, {30}, {50}}, std::chrono::seconds(31)), {20, 30, 50}, 3);
}

TEST(ComputeShare, UnevenWorkSizesDoNotMoveTheShares) {
  Load a{30}, b{70};
  a.work = microseconds(300);
  b.work = milliseconds(7);
  expect_shares(run({a, b}, std::chrono::seconds(31)), {30, 70}, 3);
}

TEST(ComputeShare, CappedTenantAloneIsHeldToItsCap) {
  expect_shares(run({{30}}, std::chrono::seconds(21)), {30}, 3);
}

TEST(ComputeShare, CappedTenantWithBorrowUsesIdleTime) {
  Load a{30};
  a.borrow = true;
  auto w = run({a}, std::chrono::seconds(21));
  ASSERT_FALSE(w.empty());
  for (const auto& x : w) EXPECT_GT(x[0], 90);
}

TEST(ComputeShare, UncappedTenantsShareWhatTheCappedOneLeaves) {
  // 30 capped; two uncapped split the other 70 evenly (work-conserving among themselves).
  expect_shares(run({{30}, {0}, {0}}, std::chrono::seconds(31)), {30, 35, 35}, 3);
}

TEST(ComputeShare, BorrowingGivesWayToOthers) {
  Load a{30};
  a.borrow = true;
  expect_shares(run({a, {70}}, std::chrono::seconds(31)), {30, 70}, 3);
}

TEST(ComputeShare, IdleCappedTenantLeavesItsShareToOthers) {
  Load idle{50};
  idle.active = false;
  // The uncapped tenant takes everything the idle capped one does not use.
  auto w = run({idle, {0}}, std::chrono::seconds(21));
  ASSERT_FALSE(w.empty());
  for (const auto& x : w) {
    EXPECT_EQ(x[0], 0);
    EXPECT_GT(x[1], 95);
  }
}

TEST(ComputeShare, ChargesWhatTheGpuRanToTheRightTenant) {
  ComputeShare share({});
  const int a = share.add_tenant(0, false, Nanos{0});
  ASSERT_TRUE(share.try_submit(a, milliseconds(1)));
  EXPECT_EQ(share.holder(), a);
  share.completed(a, milliseconds(4));
  EXPECT_EQ(share.holder(), -1);  // done and nothing more: the GPU is free
  EXPECT_EQ(share.busy(a), milliseconds(3));
}

}  // namespace
}  // namespace cuwire::server
