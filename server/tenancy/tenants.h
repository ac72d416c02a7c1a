// Tenants (design decision 9): who may use the server, and how much of each GPU.
//
// A tenant is named in the configuration (config_file.h) with its token and its caps. A client
// proves which tenant it is with the token in its Hello, or, over a Unix socket and without a
// token, by its uid (the tenant's `uids`, as the kernel reports the peer); every session of a
// tenant is charged to it. With no tenant configured the server is open: every client is the
// one default tenant, without caps.
//
// Memory: every allocation a session makes on a device (SessionContext::on_alloc) is charged to
// its tenant on that device, across all the tenant's sessions, and uncharged when it is freed
// or reclaimed. One that would pass the tenant's cap there is undone and refused with
// CUDA_ERROR_OUT_OF_MEMORY. cuMemGetInfo and cuDeviceTotalMem show a capped tenant its cap as
// the device's total and its own use in the free figure.
//
// Thread-safety: all functions are safe from any thread.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/ops/stats.h"
#include "server/session/log_rate_limit.h"

namespace cuwire::server {

struct TenantSpec {
  std::string name;
  std::array<uint8_t, 32> token_sha256{};  // SHA-256 of the token
  bool has_token = true;                   // false: only `uids` name the tenant
  std::vector<uint32_t> uids;              // Unix-socket peers' uids that are this tenant
  uint64_t memory_bytes = 0;               // per GPU; 0: no byte cap
  double memory_fraction = 0;              // of each GPU's memory, (0, 1]; 0: none
  int compute = 0;                         // percent of each GPU's time, 1-100; 0: no cap
  std::vector<int> gpus;                   // the GPUs it may use; empty: any
  int max_sessions = 0;                    // 0: no limit
  std::string placement;                   // spread | binpack; empty: the server's
  bool borrow = false;                     // compute: may use GPU time nobody else wants
  int sms = 0;  // SMs of each GPU it uses, its own partition (green contexts); 0: all, shared
  bool runtime = false;  // added at run time (cuwire tenant add), not by the config file

  // Whether `gpus` lets the tenant use backend device `device`.
  bool may_use(int device) const {
    return gpus.empty() || std::find(gpus.begin(), gpus.end(), device) != gpus.end();
  }
};

// SHA-256 of a token, as a tenant's token_sha256 holds it.
std::array<uint8_t, 32> token_digest(const std::string& token);

// A tenant's device memory, counted per device across all its sessions.
class TenantLedger;

class MemoryAccount {
 public:
  virtual ~MemoryAccount() = default;
  // Adds n bytes on `device` (whose memory is `device_total` bytes); CUDA_ERROR_OUT_OF_MEMORY,
  // with nothing added, when that would pass the cap there.
  virtual CUresult charge(int device, uint64_t device_total, uint64_t n) = 0;
  virtual void uncharge(int device, uint64_t n) = 0;
  // What the tenant sees of a device whose driver reports *free and *total: at most its cap as
  // the total, and the cap less its own use as the free figure (never more than *free).
  virtual void view(int device, size_t* free, size_t* total) const = 0;
  // False when no charge is ever refused (the device's total is then not needed).
  virtual bool capped() const = 0;
};

class Tenant final : public MemoryAccount {
 public:
  explicit Tenant(TenantSpec spec)
      : spec_(std::move(spec)), caps_{spec_.memory_bytes, spec_.memory_fraction, spec_.compute} {}
  // What the configuration said at start; the caps may have changed since (caps()).
  const TenantSpec& spec() const { return spec_; }
  const std::string& name() const { return spec_.name; }

  // The caps in force, which a reload (SIGHUP) changes while sessions run.
  struct Caps {
    uint64_t memory_bytes = 0;   // 0: none
    double memory_fraction = 0;  // 0: none
    int compute = 0;             // percent; 0: none
    bool operator==(const Caps&) const = default;
  };
  Caps caps() const {
    std::lock_guard lock(caps_mu_);
    return caps_;
  }
  void set_caps(const Caps& c) {
    std::lock_guard lock(caps_mu_);
    caps_ = c;
  }
  int compute() const { return caps().compute; }

  // The tenant's memory cap on a device of `device_total` bytes (device_total when uncapped).
  uint64_t memory_cap(uint64_t device_total) const;
  // The memory cap `c` sets on a device of `device_total` bytes.
  static uint64_t cap_of(const Caps& c, uint64_t device_total);
  bool memory_capped() const {
    const Caps c = caps();
    return c.memory_bytes || c.memory_fraction > 0;
  }
  // Whether a charge on this thread was refused by a tenant's cap since the last call (then
  // cleared): the session marks the call's reply (kFlagCapReached).
  static bool take_cap_refused();
  // Bytes the tenant holds on `device` now.
  uint64_t memory_used(int device) const;

  CUresult charge(int device, uint64_t device_total, uint64_t n) override;
  void uncharge(int device, uint64_t n) override;
  void view(int device, size_t* free, size_t* total) const override;
  bool capped() const override { return memory_capped(); }

  // From now on its memory is counted in `ledger` (server/worker/ledger.h), which the processes
  // holding its sessions share, as `slot`: this process's (kReadOnly: the front, which holds
  // no session's memory and only reads). Called before any session is charged.
  static constexpr size_t kReadOnly = SIZE_MAX;
  void count_in(std::shared_ptr<TenantLedger> ledger, size_t slot) {
    ledger_ = std::move(ledger);
    slot_ = slot;
  }
  const std::shared_ptr<TenantLedger>& ledger() const { return ledger_; }

  // Sessions: false when the tenant already has max_sessions.
  bool add_session();
  // Whether add_session would succeed now (a snapshot), and why not, as the refusal says it.
  bool session_room() const { return spec_.max_sessions <= 0 || sessions() < spec_.max_sessions; }
  std::string max_sessions_reached() const;
  void remove_session();
  int sessions() const { return sessions_.load(std::memory_order_relaxed); }

  // Whether it was removed at run time (TenantRegistry::remove): a session that found it
  // before then ends once it sees this.
  bool removed() const { return removed_.load(); }
  void mark_removed() { removed_.store(true); }

  // Its calls' figures (stats.h).
  TenantStats& stats() { return stats_; }
  const TenantStats& stats() const { return stats_; }

 private:
  const TenantSpec spec_;
  mutable std::mutex mu_;
  mutable std::mutex caps_mu_;            // taken alone, or after mu_
  Caps caps_;                             // guarded by caps_mu_
  std::map<int, uint64_t> used_;          // guarded by mu_: device -> bytes (without a ledger)
  std::shared_ptr<TenantLedger> ledger_;  // set before any session; null: used_ counts
  size_t slot_ = kReadOnly;
  LogRateLimit refusals_;  // guarded by mu_: a client may be refused at will
  std::atomic<int> sessions_{0};
  std::atomic<bool> removed_{false};
  TenantStats stats_;
};

// Tenants are shared: the registry holds each while it is served (and, once removed, until
// nothing of it is left on the server: retire), and whoever works with one holds it too (a
// session for its life, a snapshot for its loop), so a tenant removed at run time is freed
// when the last of them lets go.
using TenantRef = std::shared_ptr<Tenant>;

class TenantRegistry {
 public:
  // No specs: an open server, whose one default tenant has no caps; unless `open` is false:
  // then no tenant until some are added at run time.
  explicit TenantRegistry(std::vector<TenantSpec> specs, bool open = true);
  bool open() const { return open_; }
  // The tenant whose token this is (every tenant is compared, in constant time each); null
  // when none is. On an open server, the default tenant.
  TenantRef find(const std::string& token);
  // The tenant whose `uids` hold `uid`; null when none does, and on an open server.
  TenantRef find_uid(uint32_t uid);
  // The tenants served now, in the order they were made (a snapshot: tenants come and go).
  std::vector<TenantRef> tenants() const;
  TenantRef named(const std::string& name) const;
  // tenants() and those removed but not yet retired: what GPU-wide figures add up (a removed
  // tenant's sessions may still hold memory until they end).
  std::vector<TenantRef> all() const;
  // A tenant made at run time, served from now on. The caller checked it against the others.
  Tenant* add(TenantRef t);
  // Serves the tenant no more: its token and uids find nothing from now on. It stays among
  // all() (sessions, schedulers and figures may still count it) until retired.
  void remove(Tenant* t);
  // The removed tenants `done` says are gone from the server (no session, no memory), no
  // longer held here: the caller forgets them where else they are kept (by name, or as keys)
  // and lets go.
  std::vector<TenantRef> retire(const std::function<bool(const Tenant&)>& done);
  size_t removed_count() const;

 private:
  const bool open_;
  mutable std::mutex mu_;
  std::vector<TenantRef> tenants_;  // guarded by mu_
  std::vector<TenantRef> removed_;  // guarded by mu_
};

}  // namespace cuwire::server
