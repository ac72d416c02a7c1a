#include "server/ops/stats.h"

#include <algorithm>

#include "generated/call_ids.h"
#include "protocol/error_table.h"

namespace cuwire::server {

void AtomicHistogram::add_to(LatencyHistogram* out) const {
  const uint64_t count = count_.load(std::memory_order_relaxed);
  if (count == 0) return;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (uint32_t n = buckets_[i].load(std::memory_order_relaxed)) out->add_bucket(i, n);
  }
  out->add_summary(count, sum_.load(std::memory_order_relaxed),
                   min_.load(std::memory_order_relaxed), max_.load(std::memory_order_relaxed));
}

void StatsSnapshot::merge(const StatsSnapshot& o) {
  for (const auto& [id, c] : o.calls) {
    CallSnapshot& mine = calls[id];
    mine.service.merge(c.service);
    mine.queue.merge(c.queue);
    for (const auto& [code, n] : c.errors) mine.errors[code] += n;
  }
  bytes_in += o.bytes_in;
  bytes_out += o.bytes_out;
}

uint64_t StatsSnapshot::total_calls() const {
  uint64_t n = 0;
  for (const auto& [id, c] : calls) n += c.service.count();
  return n;
}

SessionStats::~SessionStats() {
  for (auto& c : calls_) delete c.load(std::memory_order_relaxed);
}

void SessionStats::record(uint32_t call_id, uint64_t queue_ns, uint64_t service_ns, CUresult rc,
                          uint64_t bytes_in, uint64_t bytes_out) {
  // An id the manifest does not have is call 0, "unknown": one row however many such ids.
  const uint32_t slot = call_id < kCallSlots && call_name(call_id) ? call_id : 0;
  recorded_.store(recorded_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  Call* c = calls_[slot].load(std::memory_order_relaxed);
  if (!c) {
    c = new Call();
    calls_[slot].store(c, std::memory_order_release);  // readers see it built
  }
  c->service.record(service_ns);
  c->queue.record(queue_ns);
  if (rc != CUDA_SUCCESS) {
    const int32_t code = static_cast<int32_t>(rc);
    // The last slot is CUDA_ERROR_UNKNOWN's, where codes past the others' go as well.
    size_t i = 0;
    for (; i + 1 < kErrorSlots; ++i) {
      const int32_t seen = c->codes[i].load(std::memory_order_relaxed);
      if (seen == code) break;
      if (seen == 0) {
        c->codes[i].store(code, std::memory_order_release);
        break;
      }
    }
    if (i + 1 == kErrorSlots) c->codes[i].store(CUDA_ERROR_UNKNOWN, std::memory_order_release);
    c->errors[i].store(c->errors[i].load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  if (bytes_in)
    bytes_in_.store(bytes_in_.load(std::memory_order_relaxed) + bytes_in,
                    std::memory_order_relaxed);
  if (bytes_out)
    bytes_out_.store(bytes_out_.load(std::memory_order_relaxed) + bytes_out,
                     std::memory_order_relaxed);
}

void SessionStats::add_to(StatsSnapshot* out) const {
  for (uint32_t id = 0; id < kCallSlots; ++id) {
    const Call* c = calls_[id].load(std::memory_order_acquire);
    if (!c) continue;
    CallSnapshot& s = out->calls[id];
    c->service.add_to(&s.service);
    c->queue.add_to(&s.queue);
    for (size_t i = 0; i < kErrorSlots; ++i) {
      const int32_t code = c->codes[i].load(std::memory_order_acquire);
      if (code == 0) continue;
      if (uint64_t n = c->errors[i].load(std::memory_order_relaxed)) s.errors[code] += n;
    }
  }
  out->bytes_in += bytes_in_.load(std::memory_order_relaxed);
  out->bytes_out += bytes_out_.load(std::memory_order_relaxed);
}

std::shared_ptr<SessionStats> TenantStats::open_session(int gpu) {
  auto s = std::make_shared<SessionStats>(gpu);
  std::lock_guard lock(mu_);
  live_.push_back(s);
  return s;
}

void TenantStats::close_session(const std::shared_ptr<SessionStats>& s) {
  StatsSnapshot left;
  s->add_to(&left);
  std::lock_guard lock(mu_);
  ended_[s->gpu()].merge(left);
  std::erase(live_, s);
}

StatsSnapshot TenantStats::snapshot(int gpu) const {
  std::vector<std::shared_ptr<SessionStats>> live;
  StatsSnapshot out;
  {
    std::lock_guard lock(mu_);
    live = live_;
    for (const auto& [g, snap] : ended_) {
      if (gpu == kAllGpus || g == gpu) out.merge(snap);
    }
  }
  for (const auto& s : live) {
    if (gpu == kAllGpus || s->gpu() == gpu) s->add_to(&out);
  }
  return out;
}

std::vector<std::shared_ptr<const SessionStats>> TenantStats::live() const {
  std::lock_guard lock(mu_);
  return {live_.begin(), live_.end()};
}

std::string call_label(uint32_t id) {
  const char* n = id ? call_name(id) : nullptr;
  return n ? n : "unknown";
}

std::string error_name(int code) {
  auto* end = kErrorTable + kErrorTableSize;
  auto* it = std::lower_bound(kErrorTable, end, code,
                              [](const ErrorInfo& e, int c) { return e.code < c; });
  if (it != end && it->code == code) return it->name;
  return "CUDA_ERROR_" + std::to_string(code);
}

}  // namespace cuwire::server
