// A rate limit for log lines a peer can trigger at will (definition in session.cc).
#pragma once

#include <chrono>
#include <cstdint>

namespace cuwire::server {

// Lets a burst of events through, then one per interval (a token bucket), and counts what it
// held back, for log lines a peer can trigger at will. Not thread-safe.
class LogRateLimit {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LogRateLimit(int burst = 5, Clock::duration interval = std::chrono::seconds(1))
      : burst_(burst), interval_(interval), tokens_(burst), refilled_(Clock::now()) {}

  // True when this event may be logged; *suppressed is then the number held back since the
  // last one let through.
  bool allow(uint64_t* suppressed);

 private:
  int burst_;
  Clock::duration interval_;
  int tokens_;
  Clock::time_point refilled_;
  uint64_t held_back_ = 0;
};

}  // namespace cuwire::server
