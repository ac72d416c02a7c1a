// The server's figures (design decision 10): for every tenant and call, log-linear histograms
// of service time (the call's execution, from the start of its dispatch to its reply being
// ready) and of queue time (from the frame's arrival to that start), calls and errors by code;
// per tenant, the bytes moved each way (frame bulk: copies, images).
//
// A session records into its own SessionStats, which only its thread writes: recording takes
// constant time, no lock and, after a call's first time in the session, no allocation. Readers
// (a metrics scrape, the admin API) add up a tenant's live sessions through relaxed atomics
// and what its ended sessions left (TenantStats). Call ids index a fixed table, so no client
// value can grow it: an id the manifest does not have counts as call "unknown".
//
// Thread-safety: SessionStats::record from the owning session's thread only; everything else
// from any thread.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "protocol/histogram.h"

namespace cuwire::server {

// LatencyHistogram's buckets as relaxed atomics: one writer, readers at any time (a snapshot
// read while the writer records may be a call behind in one field, never torn).
class AtomicHistogram {
 public:
  void record(uint64_t ns) {
    bump(buckets_[LatencyHistogram::index_of(ns)]);
    bump(count_);
    sum_.store(sum_.load(std::memory_order_relaxed) + ns, std::memory_order_relaxed);
    if (ns > max_.load(std::memory_order_relaxed)) max_.store(ns, std::memory_order_relaxed);
    const uint64_t min = min_.load(std::memory_order_relaxed);
    if (min == 0 || ns < min) min_.store(ns ? ns : 1, std::memory_order_relaxed);
  }
  void add_to(LatencyHistogram* out) const;

 private:
  template <typename T>
  static void bump(std::atomic<T>& a) {
    a.store(a.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  std::array<std::atomic<uint32_t>, LatencyHistogram::kBuckets> buckets_{};
  std::atomic<uint64_t> count_{0}, sum_{0}, min_{0}, max_{0};
};

// What a reader gets: figures added up over sessions.
struct CallSnapshot {
  LatencyHistogram service, queue;
  std::map<int, uint64_t> errors;  // CUresult -> calls that returned it
};
struct StatsSnapshot {
  std::map<uint32_t, CallSnapshot> calls;  // by call id (0: ids the manifest does not have)
  uint64_t bytes_in = 0;                   // to the server: host to device
  uint64_t bytes_out = 0;                  // from the server: device to host
  void merge(const StatsSnapshot& o);
  uint64_t total_calls() const;
};

class SessionStats {
 public:
  // Call ids below this are counted as themselves (the manifest's are); others as 0.
  static constexpr uint32_t kCallSlots = 2048;
  // Distinct error codes one call keeps apart (the last slot is CUDA_ERROR_UNKNOWN's, which
  // also counts the codes past the others).
  static constexpr size_t kErrorSlots = 8;

  // `gpu`: the backend device the session was placed on; -1: none.
  explicit SessionStats(int gpu = -1) : gpu_(gpu) {}
  ~SessionStats();
  SessionStats(const SessionStats&) = delete;
  SessionStats& operator=(const SessionStats&) = delete;

  void record(uint32_t call_id, uint64_t queue_ns, uint64_t service_ns, CUresult rc,
              uint64_t bytes_in, uint64_t bytes_out);
  void add_to(StatsSnapshot* out) const;

  int gpu() const { return gpu_; }
  // Calls recorded so far.
  uint64_t calls() const { return recorded_.load(std::memory_order_relaxed); }
  // Device memory the session holds, as its thread last set it (after each call).
  void set_memory(uint64_t bytes) { memory_.store(bytes, std::memory_order_relaxed); }
  uint64_t memory() const { return memory_.load(std::memory_order_relaxed); }

 private:
  struct Call {
    AtomicHistogram service, queue;
    std::array<std::atomic<int32_t>, kErrorSlots> codes{};  // 0: slot free
    std::array<std::atomic<uint64_t>, kErrorSlots> errors{};
  };
  std::array<std::atomic<Call*>, kCallSlots> calls_{};  // owned; made by the writer
  std::atomic<uint64_t> bytes_in_{0}, bytes_out_{0};
  const int gpu_;
  std::atomic<uint64_t> recorded_{0}, memory_{0};
};

// A tenant's figures: its live sessions' and what its ended sessions left, kept per GPU.
class TenantStats {
 public:
  static constexpr int kAllGpus = -2;
  // A session placed on backend device `gpu` (-1: none).
  std::shared_ptr<SessionStats> open_session(int gpu = -1);
  // The session ended: its figures join the tenant's totals.
  void close_session(const std::shared_ptr<SessionStats>& s);
  // The figures of the sessions on `gpu`, or of all of them.
  StatsSnapshot snapshot(int gpu = kAllGpus) const;
  // The live sessions' own figures.
  std::vector<std::shared_ptr<const SessionStats>> live() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<SessionStats>> live_;  // guarded by mu_
  std::map<int, StatsSnapshot> ended_;               // guarded by mu_: by GPU
};

// The manifest's name of a call id ("unknown" for ids it does not have, and for 0), and a
// CUresult's name from cuda.h ("CUDA_ERROR_<n>" for codes it does not name).
std::string call_label(uint32_t id);
std::string error_name(int code);

}  // namespace cuwire::server
