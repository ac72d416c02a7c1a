// The part of the capture rules (client_call.h: check_unsafe_in_capture, LibraryCalls) that
// every round trip meets: a relaxed load while nothing captures. The rules themselves need the
// client's capture table (client-lib/calls/graphs_capture.cc), which registers them when the
// library loads.

#include <atomic>
#include <shared_mutex>

#include "client-lib/core/client_call.h"

namespace cuwire::client {

namespace {
thread_local int t_library_calls = 0;
std::atomic<int> g_open_captures{0};
std::atomic<CaptureRule> g_rule{nullptr};
// Held shared by a call going out while captures are open, exclusively by a thread cutting one.
std::shared_mutex g_cut_gate;
thread_local int t_gate_depth = 0;  // > 0: this thread holds the gate (or cuts)
}  // namespace

// A call takes the gate only while captures are open. A thread inside a gated call (holding
// the gate shared) cannot take it exclusively: its cut goes on without keeping other threads
// out.
template <bool Exclusive>
CaptureGate<Exclusive>::CaptureGate() {
  if (t_gate_depth++ > 0 || (!Exclusive && !captures_open())) return;
  if constexpr (Exclusive) {
    g_cut_gate.lock();
  } else {
    g_cut_gate.lock_shared();
  }
  locked_ = true;
}
template <bool Exclusive>
CaptureGate<Exclusive>::~CaptureGate() {
  --t_gate_depth;
  if (!locked_) return;
  if constexpr (Exclusive) {
    g_cut_gate.unlock();
  } else {
    g_cut_gate.unlock_shared();
  }
}
template class CaptureGate<false>;
template class CaptureGate<true>;

LibraryCalls::LibraryCalls() { ++t_library_calls; }
LibraryCalls::~LibraryCalls() { --t_library_calls; }

void set_capture_rule(CaptureRule rule) { g_rule.store(rule); }
void note_captures_open(int delta) { g_open_captures.fetch_add(delta); }
void reset_captures_open() { g_open_captures.store(0); }
bool captures_open() { return g_open_captures.load(std::memory_order_relaxed) > 0; }

CUresult check_unsafe_in_capture(uint32_t call_id) {
  if (!captures_open() || t_library_calls > 0) return CUDA_SUCCESS;
  const CaptureRule rule = g_rule.load(std::memory_order_relaxed);
  return rule ? rule(call_id) : CUDA_SUCCESS;
}

}  // namespace cuwire::client
