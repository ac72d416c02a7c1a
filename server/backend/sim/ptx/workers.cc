// DeviceHeap and WorkerPool (ptx.h): the state launches share.

#include <algorithm>
#include <new>

#include "server/backend/sim/ptx/ptx.h"

namespace cuwire::ptx {

DeviceHeap::~DeviceHeap() {
  if (bytes_ && uncharge_) uncharge_(capacity_);
}

bool DeviceHeap::set_capacity(uint64_t bytes) {
  std::lock_guard lock(mu_);
  if (bytes_) return false;
  capacity_ = bytes;
  return true;
}

uint64_t DeviceHeap::capacity() const {
  std::lock_guard lock(mu_);
  return capacity_;
}

// First fit, 16-byte aligned.
uint64_t DeviceHeap::alloc(uint64_t size) {
  std::lock_guard lock(mu_);
  if (size > capacity_) return 0;
  if (!bytes_) {
    if (charge_ && !charge_(capacity_)) return 0;
    bytes_.reset(new (std::nothrow) uint8_t[capacity_]());
    if (!bytes_) {
      if (uncharge_) uncharge_(capacity_);
      return 0;
    }
    size_.store(capacity_, std::memory_order_relaxed);
    base_.store(bytes_.get(), std::memory_order_release);
  }
  const uint64_t need = std::max<uint64_t>(16, (size + 15) / 16 * 16);
  uint64_t at = 0;
  for (const auto& [off, len] : blocks_) {
    if (off - at >= need) break;
    at = off + len;
  }
  if (at + need > capacity_) return 0;
  blocks_[at] = need;
  return kGenericHeapBase + at;
}

bool DeviceHeap::free(uint64_t ptr) {
  if (ptr < kGenericHeapBase) return false;
  std::lock_guard lock(mu_);
  return blocks_.erase(ptr - kGenericHeapBase) == 1;
}

uint8_t* DeviceHeap::translate(uint64_t addr, uint64_t size) const {
  uint8_t* base = base_.load(std::memory_order_acquire);
  if (!base || addr < kGenericHeapBase) return nullptr;
  const uint64_t off = addr - kGenericHeapBase;
  const uint64_t n = size_.load(std::memory_order_relaxed);
  if (off > n || size > n - off) return nullptr;
  return base + off;
}

struct WorkerPool::Batch {
  const std::function<void()>* job = nullptr;
  unsigned running = 0;  // helpers inside job; guarded by WorkerPool::mu_
  std::condition_variable done;
};

WorkerPool::WorkerPool(unsigned threads) {
  for (unsigned i = 1; i < threads; ++i) helpers_.emplace_back([this] { loop(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : helpers_) t.join();
}

void WorkerPool::loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    Batch* b = queue_.front();
    queue_.pop_front();
    ++b->running;
    lock.unlock();
    (*b->job)();
    lock.lock();
    if (--b->running == 0) b->done.notify_all();
  }
}

void WorkerPool::run(unsigned helpers, const std::function<void()>& job) {
  helpers = std::min<unsigned>(helpers, static_cast<unsigned>(helpers_.size()));
  if (helpers == 0) {
    job();
    return;
  }
  Batch b;
  b.job = &job;
  {
    std::lock_guard lock(mu_);
    for (unsigned i = 0; i < helpers; ++i) queue_.push_back(&b);
  }
  if (helpers == 1) {
    cv_.notify_one();
  } else {
    cv_.notify_all();
  }
  job();
  std::unique_lock lock(mu_);
  queue_.erase(std::remove(queue_.begin(), queue_.end(), &b), queue_.end());
  b.done.wait(lock, [&] { return b.running == 0; });
}

}  // namespace cuwire::ptx
