// TenantLedger: one tenant's device memory, counted across the processes that hold its sessions
// (design decision 14). The front makes it, a memfd, and each of the tenant's workers maps it.
//
// A worker counts what its sessions hold in a slot of its own, one counter per device. A charge
// sums every slot of the device under a lock the tenant's workers share and adds to its own slot
// only when the sum stays within the cap, so a cap holds exactly across workers. The lock is
// robust: a worker that dies holding it leaves nothing half-done, since the one write made under
// it is a single store to the dead worker's own slot. The front reads the sums without the lock
// (its figures and placement) and clears a dead worker's slot, which nobody else writes.
//
// A ledger holds one tenant's figures only, so a worker that misbehaves can misstate its own
// tenant's use and no one else's.
//
// Thread-safety: all functions are safe from any thread of any process that maps the ledger.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "protocol/status.h"

namespace cuwire::server {

class TenantLedger {
 public:
  // Workers of one tenant at once (isolation = "session": its sessions in workers).
  static constexpr size_t kSlots = 64;
  // Devices a ledger counts (backend ordinals 0 .. devices-1).
  static constexpr size_t kMaxDevices = 64;

  // A new ledger for `devices` devices, every count zero (the front).
  static Status create(size_t devices, std::unique_ptr<TenantLedger>* out);
  // Maps the ledger behind `fd`, made by create() in another process (a worker); takes `fd`.
  static Status attach(int fd, std::unique_ptr<TenantLedger>* out);
  ~TenantLedger();
  TenantLedger(const TenantLedger&) = delete;
  TenantLedger& operator=(const TenantLedger&) = delete;

  // The memfd, for passing to a worker (owned by the ledger).
  int fd() const { return fd_; }
  size_t devices() const { return devices_; }

  // Adds `n` bytes to `slot`'s count on `device` when the tenant's use there stays within `cap`
  // bytes; false (nothing added) when it would not, or the lock could not be had within a
  // bound (a worker of the same tenant holding it). *used: the tenant's use there before.
  bool charge(size_t slot, int device, uint64_t cap, uint64_t n, uint64_t* used);
  // Takes `n` bytes (at most what the slot holds) off `slot`'s count on `device`.
  void uncharge(size_t slot, int device, uint64_t n);
  // The tenant's use of `device`, every slot together (a snapshot, read without the lock).
  uint64_t used(int device) const;
  // What `slot` holds on `device`.
  uint64_t slot_used(size_t slot, int device) const;
  // A worker that is gone: its counts are zeroed (the front, for a slot no live worker has).
  void clear(size_t slot);

 private:
  struct Header;
  TenantLedger(int fd, void* base, size_t bytes, size_t devices);
  std::atomic<uint64_t>& cell(size_t slot, int device) const;
  static size_t size_for(size_t devices);

  int fd_;
  void* base_;
  size_t bytes_;
  size_t devices_;
};

}  // namespace cuwire::server
