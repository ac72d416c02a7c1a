// A network you can dial (issue 39): a user-space emulator of one link for TCP. It accepts
// connections on one address and forwards each to another, holding every chunk of bytes for a
// one-way delay and pacing each direction to a bandwidth, as a link of that delay and rate
// would deliver them: a chunk of n bytes read at t leaves the link at
//   depart = max(t, when the previous chunk left) + n / bandwidth,
// and is written on at depart + delay (store and forward, per chunk as the socket gave it).
// No kernel queueing discipline is needed (the machines that run the benchmarks have none).
//
// Timing: each connection has a thread of its own, which sleeps in ppoll() until shortly before
// the next chunk is due (the thread's timer slack set to 1 ns) and spins the last stretch, so
// a release is late by a few microseconds at most on an idle core. What it delivers on a given
// machine is measured (measure(), `cuwire-netem --measure`), never assumed.
//
// Backpressure: a direction stops reading once it holds more than the link's
// bandwidth-delay product plus `buffer` bytes, so a fast sender is held back by TCP's own flow
// control, as by a real link's queue.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "protocol/address.h"
#include "protocol/status.h"

namespace cuwire::netem {

using Nanos = std::chrono::nanoseconds;

struct LinkSpec {
  Nanos rtt{0};                // round trip: each direction holds bytes for rtt / 2
  double bits_per_second = 0;  // each direction's rate; 0: unlimited
  std::string name;            // a profile's, or empty
  // Bytes a direction may hold beyond the bandwidth-delay product before it stops reading.
  uint64_t buffer = 4u << 20;
  // Spin (rather than sleep) when the next chunk is due within this.
  Nanos spin{50'000};
  // And for this long after the last bytes moved: the answer to a small message comes back
  // within a round trip, and a thread that slept meanwhile would add its wake-up to it.
  Nanos idle_spin{200'000};
};

// The named profiles: "10gbe" (50 us, 10 Gbit/s), "25gbe" (25 us, 25 Gbit/s), "100gbe"
// (10 us, 100 Gbit/s), "cross-rack" (200 us, 25 Gbit/s), "loopback" (no delay, unlimited).
bool profile(const std::string& name, LinkSpec* out);
std::vector<std::string> profile_names();
// "25us", "0.2ms", "200000ns" -> nanoseconds; "25Gbit", "10G", "800Mbit", "3.2GB/s" -> bit/s.
bool parse_duration(const std::string& text, Nanos* out);
bool parse_rate(const std::string& text, double* out);
std::string describe(const LinkSpec& link);

// One link between `listen` and `to`: serves until stop().
class Emulator {
 public:
  // Listens on `listen` (tcp:HOST:PORT, port 0: one the system picks; unix:PATH) and forwards
  // every connection to `to` through the link.
  static Status start(const Address& listen, const Address& to, const LinkSpec& link,
                      std::unique_ptr<Emulator>* out);
  ~Emulator();
  // Where it listens (the port the system picked, where asked for 0).
  const Address& address() const { return bound_; }
  // Bytes forwarded so far, each way (toward `to`, back from it).
  uint64_t bytes_up() const { return up_.load(); }
  uint64_t bytes_down() const { return down_.load(); }
  // Stops accepting, ends every connection, joins every thread.
  void stop();

 private:
  Emulator() = default;
  void accept_loop();
  void serve(int client, int upstream);

  LinkSpec link_;
  Address to_, bound_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe: stop() writes, every thread polls its read end
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> up_{0}, down_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> connections_;  // guarded by mu_
};

// What a link delivers on this machine, against what was asked.
struct Fidelity {
  LinkSpec asked;
  // Round trips of a 4-byte ping-pong (microseconds): direct (the machine's own loopback)
  // and through the emulator.
  double direct_rtt_p50_us = 0, rtt_p50_us = 0, rtt_p99_us = 0, rtt_mean_us = 0;
  int round_trips = 0;
  // A one-way bulk transfer: direct and through the emulator (Gbit/s).
  double direct_gbit = 0, gbit = 0;
  uint64_t bulk_bytes = 0;
};
// Measures `link` with `round_trips` ping-pongs and a transfer of `bulk_bytes`, over loopback
// TCP. Fails only when the sockets cannot be had.
Status measure(const LinkSpec& link, int round_trips, uint64_t bulk_bytes, Fidelity* out);

}  // namespace cuwire::netem
