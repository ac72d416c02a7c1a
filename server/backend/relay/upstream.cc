#include "server/backend/relay/upstream.h"

#include <spdlog/spdlog.h>

#include <mutex>

namespace cuwire::server {

uint64_t UpstreamLink::join() {
  if (!lost_.load(std::memory_order_acquire)) return epoch_.load(std::memory_order_acquire);
  std::unique_lock lock(mu_);
  if (lost_.load(std::memory_order_acquire)) {
    // Every call in flight has finished (each holds mu_ shared); the calls of older sessions
    // never reach the library again.
    reset_();
    epoch_.fetch_add(1, std::memory_order_acq_rel);
    CUresult rc = api_.cuInit(0);
    if (rc == CUDA_SUCCESS) rc = status_();
    if (rc == CUDA_SUCCESS) {
      lost_.store(false, std::memory_order_release);
      spdlog::info("relay: reconnected to the upstream gpu-server {}", upstream_);
    } else {
      spdlog::warn(
          "relay: the upstream gpu-server {} is still unreachable; this session's "
          "calls fail with CUDA_ERROR_DEVICE_UNAVAILABLE and the next session tries "
          "again",
          upstream_);
    }
  }
  return epoch_.load(std::memory_order_acquire);
}

UpstreamLink::Use UpstreamLink::use(uint64_t epoch) {
  Use u;
  u.lock_ = std::shared_lock(mu_);
  u.ok_ = epoch == epoch_.load(std::memory_order_acquire) && !lost_.load(std::memory_order_acquire);
  if (!u.ok_) u.lock_.unlock();
  return u;
}

void UpstreamLink::check(CUresult rc) {
  if (rc == CUDA_SUCCESS || lost_.load(std::memory_order_acquire)) return;
  if (status_() == CUDA_SUCCESS) return;
  // A session connection lost while its server still answers: the upstream ended that session
  // alone (evicted it, timed it out), and only its relay session fails.
  if (sessions_.answers && sessions_.answers()) return;
  if (!lost_.exchange(true, std::memory_order_acq_rel)) {
    spdlog::warn(
        "relay: lost the upstream gpu-server {}; its sessions' calls fail with "
        "CUDA_ERROR_DEVICE_UNAVAILABLE until a new session reconnects",
        upstream_);
  }
}

}  // namespace cuwire::server
