#include "server/worker/ledger.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <new>
#include <string>

#include "server/worker/shared_block.h"

namespace cuwire::server {

namespace {

constexpr uint64_t kMagic = 0x6377'4c65'6467'6572;  // "cwLedger"
// How long a charge waits for the lock before it refuses the allocation.
constexpr int kLockSeconds = 5;

}  // namespace

struct TenantLedger::Header {
  uint64_t magic;
  uint64_t devices;
  pthread_mutex_t lock;
};

// The counts follow the header, aligned to 64 bytes: [slot][device].
size_t TenantLedger::size_for(size_t devices) {
  const size_t head = (sizeof(Header) + 63) / 64 * 64;
  return head + kSlots * devices * sizeof(uint64_t);
}

TenantLedger::TenantLedger(int fd, void* base, size_t bytes, size_t devices)
    : fd_(fd), base_(base), bytes_(bytes), devices_(devices) {}

TenantLedger::~TenantLedger() {
  munmap(base_, bytes_);
  close(fd_);
}

std::atomic<uint64_t>& TenantLedger::cell(size_t slot, int device) const {
  const size_t head = (sizeof(Header) + 63) / 64 * 64;
  auto* cells = reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(base_) + head);
  return cells[slot * devices_ + static_cast<size_t>(device)];
}

Status TenantLedger::create(size_t devices, std::unique_ptr<TenantLedger>* out) {
  static_assert(std::atomic<uint64_t>::is_always_lock_free);
  if (devices == 0 || devices > kMaxDevices) {
    return Status::invalid_argument("a tenant ledger counts 1 to " + std::to_string(kMaxDevices) +
                                    " devices, not " + std::to_string(devices));
  }
  SharedBlock block;
  if (Status st = create_shared_block("cuwire-tenant-ledger", size_for(devices), &block);
      !st.is_ok())
    return st;
  auto* h = new (block.base) Header{};
  h->magic = kMagic;
  h->devices = devices;
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&h->lock, &a);
  pthread_mutexattr_destroy(&a);
  out->reset(new TenantLedger(block.fd, block.base, block.bytes, devices));
  return Status::ok();
}

Status TenantLedger::attach(int fd, std::unique_ptr<TenantLedger>* out) {
  SharedBlock block;
  if (Status st = attach_shared_block(fd, size_for(1), size_for(kMaxDevices), &block); !st.is_ok())
    return Status::invalid_argument("a tenant ledger's descriptor is not one");
  const auto* h = static_cast<const Header*>(block.base);
  if (h->magic != kMagic || h->devices == 0 || h->devices > kMaxDevices ||
      size_for(h->devices) != block.bytes) {
    release_shared_block(&block);
    return Status::invalid_argument("a tenant ledger's layout is not this build's");
  }
  out->reset(new TenantLedger(block.fd, block.base, block.bytes, h->devices));
  return Status::ok();
}

bool TenantLedger::charge(size_t slot, int device, uint64_t cap, uint64_t n, uint64_t* used) {
  *used = 0;
  if (slot >= kSlots || device < 0 || static_cast<size_t>(device) >= devices_) return false;
  auto* h = static_cast<Header*>(base_);
  timespec deadline{};
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += kLockSeconds;
  int rc = pthread_mutex_timedlock(&h->lock, &deadline);
  if (rc == EOWNERDEAD) {
    // A worker died holding it: its one store either happened or did not; both are whole.
    pthread_mutex_consistent(&h->lock);
    rc = 0;
  }
  if (rc != 0) return false;
  const uint64_t sum = this->used(device);
  *used = sum;
  const bool fits = n <= cap && sum <= cap - n;
  if (fits) cell(slot, device).fetch_add(n, std::memory_order_relaxed);
  pthread_mutex_unlock(&h->lock);
  return fits;
}

void TenantLedger::uncharge(size_t slot, int device, uint64_t n) {
  if (slot >= kSlots || device < 0 || static_cast<size_t>(device) >= devices_) return;
  // The slot's worker's sessions write it from their threads (and the front, once that worker is
  // gone): never below zero.
  std::atomic<uint64_t>& c = cell(slot, device);
  uint64_t held = c.load(std::memory_order_relaxed);
  while (!c.compare_exchange_weak(held, held - std::min(n, held), std::memory_order_relaxed)) {
  }
}

uint64_t TenantLedger::used(int device) const {
  if (device < 0 || static_cast<size_t>(device) >= devices_) return 0;
  uint64_t sum = 0;
  for (size_t s = 0; s < kSlots; ++s) {
    const uint64_t v = cell(s, device).load(std::memory_order_relaxed);
    sum = v > UINT64_MAX - sum ? UINT64_MAX : sum + v;  // a misbehaving worker cannot wrap it
  }
  return sum;
}

uint64_t TenantLedger::slot_used(size_t slot, int device) const {
  if (slot >= kSlots || device < 0 || static_cast<size_t>(device) >= devices_) return 0;
  return cell(slot, device).load(std::memory_order_relaxed);
}

void TenantLedger::clear(size_t slot) {
  if (slot >= kSlots) return;
  for (size_t d = 0; d < devices_; ++d) cell(slot, static_cast<int>(d)).store(0);
}

}  // namespace cuwire::server
