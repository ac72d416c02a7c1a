#include "server/tenancy/compute_share.h"

#include <algorithm>

namespace cuwire::server {

int ComputeShare::add_tenant(int cap_percent, bool borrow, Nanos now) {
  const int t = count();
  if (t == kMaxTenants) return -1;
  count_ = t + 1;
  reuse(t, cap_percent, borrow, now);
  return t;
}

void ComputeShare::reuse(int t, int cap_percent, bool borrow, Nanos now) {
  advance(now);
  TenantState& s = tenants_[static_cast<size_t>(t)];
  s = TenantState{};
  s.cap = cap_percent / 100.0;
  s.borrow = borrow;
  s.credit = s.cap > 0 ? opt_.quantum : Nanos{0};  // a newcomer may start at once
}

bool ComputeShare::clear(int t, Nanos now) {
  advance(now);
  if (active(t)) return false;
  if (holder() == t) release();
  tenants_[static_cast<size_t>(t)] = TenantState{};
  advance(now);  // the GPU goes to whoever waits next
  return true;
}

void ComputeShare::repair() {
  using std::chrono::seconds;
  opt_.quantum = std::clamp<Nanos>(opt_.quantum, Nanos{1000}, seconds(10));
  opt_.max_credit = std::clamp<Nanos>(opt_.max_credit, Nanos{0}, seconds(100));
  opt_.max_inflight = std::clamp(opt_.max_inflight, 1, kMaxCount);
  count_ = count();
  holder_ = holder();
  slice_start_ = std::clamp(slice_start_, Nanos{0}, kFar);
  last_ = std::clamp(last_, Nanos{0}, kFar);
  const Nanos top = std::max(opt_.max_credit, opt_.quantum);
  for (int i = 0; i < count_; ++i) {
    TenantState& s = tenants_[static_cast<size_t>(i)];
    s.cap = s.cap > 0 ? std::min(s.cap, 1.0) : 0.0;  // NaN too
    s.credit = std::clamp(s.credit, -kFar, top);     // a long kernel can run far past its credit
    s.busy = std::clamp(s.busy, Nanos{0}, kFar);
    s.inflight = std::clamp(s.inflight, 0, kMaxCount);
    s.waiting = std::clamp(s.waiting, 0, kMaxCount);
    s.last_grant = std::clamp(s.last_grant, Nanos{0}, kFar);
  }
}

int ComputeShare::count() const { return std::clamp(count_, 0, kMaxTenants); }

int ComputeShare::holder() const {
  const int h = holder_;
  return h >= 0 && h < count() ? h : -1;
}

void ComputeShare::restore(int t, int inflight, int waiting, Nanos now) {
  tenants_[t].inflight = inflight;
  tenants_[t].waiting = waiting;
  advance(now);
}

void ComputeShare::set_cap(int t, int cap_percent, Nanos now) {
  advance(now);  // credit up to now at the old rate
  TenantState& s = tenants_[t];
  s.cap = cap_percent / 100.0;
  if (s.cap == 0) s.credit = Nanos{0};
}

bool ComputeShare::anyone_waiting() const {
  return std::any_of(tenants_.begin(), tenants_.begin() + count(),
                     [](const TenantState& s) { return s.waiting > 0; });
}

int ComputeShare::next() const {
  int best = -1;
  // Capped tenants owed the GPU, the one owed most first.
  for (size_t i = 0; i < static_cast<size_t>(count()); ++i) {
    const TenantState& s = tenants_[i];
    if (s.waiting > 0 && owed(s) && (best < 0 || s.credit > tenants_[best].credit)) {
      best = static_cast<int>(i);
    }
  }
  if (best >= 0) return best;
  // Then the uncapped ones in turn, then those that may borrow, the longest waiting first.
  for (bool borrowing : {false, true}) {
    for (size_t i = 0; i < static_cast<size_t>(count()); ++i) {
      const TenantState& s = tenants_[i];
      const bool may = borrowing ? (s.cap > 0 && s.borrow) : s.cap == 0;
      if (s.waiting > 0 && may && (best < 0 || s.last_grant < tenants_[best].last_grant)) {
        best = static_cast<int>(i);
      }
    }
    if (best >= 0) return best;
  }
  return -1;
}

void ComputeShare::grant(int t, Nanos now) {
  holder_ = t;
  draining_ = false;
  slice_start_ = now;
  tenants_[t].last_grant = now;
}

void ComputeShare::release() {
  holder_ = -1;
  draining_ = false;
}

void ComputeShare::advance(Nanos now) {
  const Nanos dt = std::max(now - last_, Nanos{0});
  last_ = std::max(now, last_);
  const int n = count();
  int holder = this->holder();
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
    TenantState& s = tenants_[i];
    if (s.cap > 0) {
      s.credit = std::min(s.credit + Nanos(static_cast<int64_t>(s.cap * dt.count())),
                          std::max(opt_.max_credit, opt_.quantum));
    }
    if (static_cast<int>(i) == holder) {
      s.busy += dt;
      if (s.cap > 0) {
        s.credit -= dt;
        if (s.borrow) s.credit = std::max(s.credit, -opt_.quantum);
      }
    }
  }
  if (holder >= 0 && !draining_) {
    const TenantState& h = tenants_[holder];
    bool other_uncapped = false, other_owed = false;
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      const TenantState& s = tenants_[i];
      if (static_cast<int>(i) == holder || s.waiting == 0) continue;
      other_owed = other_owed || owed(s);
      other_uncapped = other_uncapped || s.cap == 0;
    }
    if (h.cap > 0) {
      // Spent: give way, unless borrowing what nobody else wants.
      if (h.credit < Nanos{0} && !(h.borrow && !other_owed && !other_uncapped)) draining_ = true;
    } else if (other_owed || (other_uncapped && now - slice_start_ >= opt_.quantum)) {
      draining_ = true;
    }
  }
  if (holder >= 0) {
    const TenantState& h = tenants_[holder];
    // Done with the GPU: nothing in flight and, draining or not, nothing more coming now.
    if (h.inflight == 0 && (draining_ || h.waiting == 0)) {
      release();
      holder = -1;
    }
  }
  if (holder < 0) {
    if (int t = next(); t >= 0) grant(t, now);
  }
}

bool ComputeShare::try_submit(int t, Nanos now) {
  TenantState& s = tenants_[t];
  ++s.waiting;  // wanting the GPU now
  advance(now);
  --s.waiting;
  if (holder() != t || draining_ || s.inflight >= opt_.max_inflight) return false;
  ++s.inflight;
  return true;
}

void ComputeShare::completed(int t, Nanos now) {
  if (tenants_[t].inflight > 0) --tenants_[t].inflight;
  advance(now);
}

void ComputeShare::set_waiting(int t, int waiting, Nanos now) {
  tenants_[t].waiting = waiting;
  advance(now);
}

}  // namespace cuwire::server
