// A relay's link to its upstream gpu-server (design decision 12).
//
// A relay's cuda backend is cuwire's client library, which holds one connection to the
// upstream server for the whole relay process. When that connection is lost (the upstream
// stopped, its host went away), every call through it fails with
// CUDA_ERROR_DEVICE_UNAVAILABLE, and so does every session of the relay: the objects they made
// lived in the upstream session that ended. Recovery is by session, as with a real device
// that comes back: the first session that starts after the loss makes the library start over
// (cuwire_client_reset) and connect afresh. Sessions from before the loss keep answering
// DEVICE_UNAVAILABLE without reaching the library, since the ids they hold may name the new
// upstream session's objects, and leave without reclaiming anything (it is gone already).
//
// Each session has an epoch, the link's at its start; a call goes to the library only while
// its session's epoch is current and the link is up. The reset excludes calls in flight.
//
// Thread-safety: all functions are safe from any thread.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <shared_mutex>
#include <string>

#include "driver_api.h"

namespace cuwire::server {

class UpstreamLink {
 public:
  using StatusFn = CUresult (*)();
  using ResetFn = void (*)();
  UpstreamLink(DriverApi& api, StatusFn status, ResetFn reset, std::string upstream)
      : api_(api), status_(status), reset_(reset), upstream_(std::move(upstream)) {}

  // A session starts: when the upstream was lost, the library starts over and reconnects
  // first. Returns the session's epoch (when the reconnect failed, the session's calls fail
  // and the next session tries again).
  uint64_t join();

  // Holds off a reset while one call of a session runs; false (nothing held) when the session's
  // calls must not reach the library: it is from before a loss, or the link is down.
  class Use {
   public:
    explicit operator bool() const { return ok_; }

   private:
    friend class UpstreamLink;
    std::shared_lock<std::shared_mutex> lock_;
    bool ok_ = false;
  };
  Use use(uint64_t epoch);

  // After a call answered `rc`: whether the library's connection is down is asked of the
  // library itself (an upstream driver may return DEVICE_UNAVAILABLE for reasons of its own).
  void check(CUresult rc);

  bool up() const { return !lost_.load(std::memory_order_acquire); }

 private:
  DriverApi& api_;
  StatusFn status_;
  ResetFn reset_;
  std::string upstream_;  // for log lines
  std::shared_mutex mu_;  // shared: a call in flight; exclusive: a reset
  std::atomic<uint64_t> epoch_{1};
  std::atomic<bool> lost_{false};
};

}  // namespace cuwire::server
