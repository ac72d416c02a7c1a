// A relay's link to its upstream gpu-server (design decisions 12 and 13).
//
// A relay's cuda backend is cuwire's client library. Each relay session gets an upstream
// session of its own (a session connection of the library, bound to the session's thread), so
// the upstream keeps the relay's sessions apart exactly as it keeps any clients apart: contexts,
// pool grants, handle budgets, deferred errors, failures, head-of-line blocking. The library's
// process-wide connection serves the relay's own questions (devices at start, the admin API).
// A session whose upstream session ends while the upstream server still answers (evicted or
// timed out there) fails alone.
//
// When the upstream server itself is lost (the upstream
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

#include "server/backend/backend.h"

namespace cuwire::server {

// The library's session connections (cuwire_client_session_*); all null for a library that
// has none: every relay session then shares the process-wide connection.
struct UpstreamSessionFns {
  void* (*open)() = nullptr;
  void (*bind)(void*) = nullptr;
  void (*close)(void*) = nullptr;
  int (*answers)() = nullptr;  // the calling thread's upstream server still answers
};

class UpstreamLink {
 public:
  using StatusFn = CUresult (*)();
  using ResetFn = void (*)();
  using SessionFns = UpstreamSessionFns;
  UpstreamLink(Backend& api, StatusFn status, ResetFn reset, std::string upstream,
               SessionFns sessions = {})
      : api_(api),
        status_(status),
        reset_(reset),
        upstream_(std::move(upstream)),
        sessions_(sessions) {}

  // An upstream session of its own for a relay session (null: none; the session's calls then
  // go over the process-wide connection). It connects on its first call.
  void* open_session() { return sessions_.open ? sessions_.open() : nullptr; }
  // Makes `session` the calling thread's for the library's calls (null: the process-wide one).
  void bind(void* session) {
    if (sessions_.bind) sessions_.bind(session);
  }
  // Ends it, and its upstream session with it; none of its calls may be under way.
  void close_session(void* session) {
    if (sessions_.close && session) sessions_.close(session);
  }

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
  Backend& api_;
  StatusFn status_;
  ResetFn reset_;
  std::string upstream_;  // for log lines
  SessionFns sessions_;
  std::shared_mutex mu_;  // shared: a call in flight; exclusive: a reset
  std::atomic<uint64_t> epoch_{1};
  std::atomic<bool> lost_{false};
};

}  // namespace cuwire::server
