// Compute caps (design decision 9): how one GPU's time is shared among tenants, as a policy
// with no threads and no clock of its own, so that tests drive it on a fake clock.
//
// The GPU runs one tenant's work at a time (a time slice, as a GPU without MPS runs one
// context at a time); the tenant holding it is charged the slice's wall time, from the grant
// to the moment its last submission is seen complete. That is the tenant's busy time: measured,
// never estimated from the work.
//
// A capped tenant (cap c, a fraction) earns credit at c seconds per second, up to a bound, and
// spends it while it holds the GPU. It may take the GPU once its credit reaches one quantum and
// keeps it until the credit is spent; so over any window its share is c, give or take a slice.
// Capped tenants whose credit allows come first, the one owed most first. Uncapped tenants
// share what is left, in slices of one quantum in turn, and are made to give the GPU back as
// soon as a capped tenant is owed it. A capped tenant with `borrow` may also run on credit it
// does not have while nobody else wants the GPU (its debt is bounded by one quantum); without,
// it is held to its cap even alone.
//
// A tenant has at most max_inflight submissions on the GPU at once, so a tenant asked to give
// the GPU back is done within that many submissions.
//
// Its state is of fixed size with no pointers, so that processes sharing a GPU can keep it in
// memory they all map (compute_scheduler.h). Another process may have written anything there:
// the share reads its count of tenants and the holder's index through count() and holder(),
// which keep them within the array. Indices callers pass are theirs to check.
//
// Thread-safety: none; ComputeScheduler (compute_scheduler.h) serialises every call.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

namespace cuwire::server {

class ComputeShare {
 public:
  using Nanos = std::chrono::nanoseconds;
  struct Options {
    Nanos quantum = std::chrono::milliseconds(10);
    // Credit a capped tenant may gather while it waits (it keeps what it is owed while others
    // finish their slices, not more).
    Nanos max_credit = std::chrono::milliseconds(100);
    int max_inflight = 8;
  };

  // Tenants one GPU tells apart.
  static constexpr int kMaxTenants = 256;
  // Above any real count, and any real time, in a share: what another process wrote there is
  // brought within them (repair(); ComputeScheduler's own shared counts too).
  static constexpr int kMaxCount = 1 << 16;
  static constexpr Nanos kFar{int64_t{1} << 62};

  explicit ComputeShare(Options options) : opt_(options) {}

  // A tenant on this GPU: cap_percent 1-100, or 0 for none. Its index is returned; -1 when the
  // GPU has kMaxTenants already.
  int add_tenant(int cap_percent, bool borrow, Nanos now);
  // Tenant t's cap is now cap_percent (0: none), as of `now`: what it earned so far stands.
  void set_cap(int t, int cap_percent, Nanos now);
  // Tenant t is gone (nothing of it in flight or waiting): its index holds nothing until
  // reuse() gives it to another tenant. False when it still has work.
  bool clear(int t, Nanos now);
  // A cleared index given to a new tenant, as add_tenant would set it up.
  void reuse(int t, int cap_percent, bool borrow, Nanos now);
  // Whether index t holds a tenant's work now (in flight or waiting).
  bool active(int t) const { return tenants_[t].inflight > 0 || tenants_[t].waiting > 0; }

  // Tenant t asks to submit one piece of work at `now`: true when it may (the submission is
  // then counted in flight until completed()). A submitter that waits for its turn says so
  // with set_waiting around the wait, so the tenant counts as wanting the GPU meanwhile.
  bool try_submit(int t, Nanos now);
  // One submission of tenant t is complete (or abandoned) as of `now`.
  void completed(int t, Nanos now);
  // Submitters of tenant t waiting for the GPU (they count as wanting it).
  void set_waiting(int t, int waiting, Nanos now);
  // Brings the state up to `now`: credit, charges, and whether the holder must give way.
  void advance(Nanos now);
  // Sets tenant t's counts outright (what its submitters hold, when they are known better
  // than the share's own count: a process that shared it died mid-change).
  void restore(int t, int inflight, int waiting, Nanos now);

  // Brings every field within the range its real values lie in (another process that maps the
  // share may have written anything), so that the arithmetic on them stays in range.
  void repair();

  // Busy time charged to tenant t so far.
  Nanos busy(int t) const { return tenants_[t].busy; }
  // The tenant holding the GPU, or -1.
  int holder() const;
  // Tenants added so far.
  int count() const;
  bool anyone_waiting() const;

 private:
  struct TenantState {
    double cap = 0;      // fraction; 0: uncapped
    uint8_t borrow = 0;  // a bool kept as a byte (shared memory: any value may be written)
    Nanos credit{0};
    Nanos busy{0};
    int inflight = 0;
    int waiting = 0;
    Nanos last_grant{0};
  };
  bool owed(const TenantState& s) const { return s.cap > 0 && s.credit >= opt_.quantum; }
  // The waiting tenant the GPU goes to next, or -1.
  int next() const;
  void grant(int t, Nanos now);
  void release();

  Options opt_;  // set once; not const, so that repair() can bring it back
  std::array<TenantState, kMaxTenants> tenants_{};
  int count_ = 0;  // tenants_ in use
  int holder_ = -1;
  // The holder may not submit more; the GPU passes on once it is done. A bool kept as a byte.
  uint8_t draining_ = 0;
  Nanos slice_start_{0};
  Nanos last_{0};  // the time advance() last saw
};

}  // namespace cuwire::server
