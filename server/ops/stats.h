// The server's figures (design decision 10): for every tenant and call, log-linear histograms
// of service time (the call's execution, from the start of its dispatch to its reply being
// ready) and of queue time (from the frame's arrival to that start), calls and errors by code;
// per tenant, the bytes moved each way (frame bulk: copies, images).
//
// A session records into its own SessionStats, which only its thread writes: recording takes
// constant time, no lock and no allocation (the block is mapped once, its pages taken as the
// session first uses a call). Readers
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
#include "protocol/status.h"

namespace cuwire::server {

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

struct StatsBlock;

// One session's figures. They live in a block of fixed layout with no pointers in it (an
// anonymous mapping, or a memfd another process maps): the process serving the session
// records there and the front reads it, even after that process died (design decision 14).
// A session counts up to kCallEntries distinct calls apart; calls past them count as call
// "unknown".
class SessionStats {
 public:
  // Call ids below this are counted as themselves (the manifest's are); others as 0.
  static constexpr uint32_t kCallSlots = 2048;
  // Distinct calls one session keeps apart.
  static constexpr uint32_t kCallEntries = 256;
  // Distinct error codes one call keeps apart (the last slot is CUDA_ERROR_UNKNOWN's, which
  // also counts the codes past the others).
  static constexpr size_t kErrorSlots = 8;

  // `gpu`: the backend device the session was placed on; -1: none. `shared`: in a memfd that
  // another process may map (fd()); a session's figures stay in this process otherwise.
  static Status create(int gpu, bool shared, std::shared_ptr<SessionStats>* out);
  // Maps the figures another process made with create(shared) and passed as `fd` (taken).
  static Status attach(int fd, int gpu, std::shared_ptr<SessionStats>* out);
  ~SessionStats();
  SessionStats(const SessionStats&) = delete;
  SessionStats& operator=(const SessionStats&) = delete;

  void record(uint32_t call_id, uint64_t queue_ns, uint64_t service_ns, CUresult rc,
              uint64_t bytes_in, uint64_t bytes_out);
  // Adds the figures up. What another process wrote is read as figures only: an index out of
  // range is skipped, never followed.
  void add_to(StatsSnapshot* out) const;

  int gpu() const { return gpu_; }
  // The memfd of shared figures (-1: not shared); this object keeps it open.
  int fd() const { return fd_; }
  // Calls recorded so far.
  uint64_t calls() const;
  // Device memory the session holds, as its thread last set it (after each call).
  void set_memory(uint64_t bytes);
  uint64_t memory() const;

 private:
  SessionStats(int gpu, int fd, StatsBlock* block) : gpu_(gpu), fd_(fd), block_(block) {}
  // The entry of `slot`, made on first use; null when the session has no room left.
  uint32_t entry_of(uint32_t slot);

  const int gpu_;
  const int fd_;
  StatsBlock* const block_;  // mapped; unmapped with this object
};

// A tenant's figures: its live sessions' and what its ended sessions left, kept per GPU.
class TenantStats {
 public:
  static constexpr int kAllGpus = -2;
  // A session placed on backend device `gpu` (-1: none); its figures in a memfd another process
  // may map where `shared` (SessionStats::create). Null, with the reason logged, when they
  // cannot be had (no memory): the session goes uncounted.
  std::shared_ptr<SessionStats> open_session(int gpu = -1, bool shared = false);
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
