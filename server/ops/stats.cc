#include "server/ops/stats.h"

#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <type_traits>

#include "generated/call_ids.h"
#include "protocol/error_table.h"
#include "server/worker/shared_block.h"

namespace cuwire::server {

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

namespace {

template <typename T>
T load(const T& cell, std::memory_order order = std::memory_order_relaxed) {
  return std::atomic_ref<T>(const_cast<T&>(cell)).load(order);
}
template <typename T>
void store(T& cell, T value, std::memory_order order = std::memory_order_relaxed) {
  std::atomic_ref<T>(cell).store(value, order);
}
// One writer: a load and a store, no read-modify-write.
template <typename T>
void add(T& cell, T n) {
  store(cell, static_cast<T>(load(cell) + n));
}

// A LatencyHistogram's cells: one writer, readers at any time (a snapshot read while the
// writer records may be a call behind in one field, never torn).
struct HistogramCells {
  uint32_t buckets[LatencyHistogram::kBuckets];
  uint64_t count, sum, min, max;

  void record(uint64_t ns) {
    add(buckets[LatencyHistogram::index_of(ns)], 1u);
    add(count, uint64_t{1});
    add(sum, ns);
    if (ns > load(max)) store(max, ns);
    const uint64_t m = load(min);
    if (m == 0 || ns < m) store(min, ns ? ns : 1);
  }
  void add_to(LatencyHistogram* out) const {
    const uint64_t n = load(count);
    if (n == 0) return;
    for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) {
      if (uint32_t b = load(buckets[i])) out->add_bucket(i, b);
    }
    out->add_summary(n, load(sum), load(min), load(max));
  }
};

struct CallCells {
  HistogramCells service, queue;
  int32_t codes[SessionStats::kErrorSlots];  // 0: slot free
  uint64_t errors[SessionStats::kErrorSlots];
};

constexpr uint64_t kBlockMagic = 0x6377'5374'6174'7331;  // "cwStats1"

}  // namespace

// All zeros is a block with nothing recorded (a fresh mapping is one). Each cell has one
// writer, the session's thread; index[id] is published (release) after its entry's first use.
struct StatsBlock {
  uint64_t magic;
  uint64_t recorded, memory, bytes_in, bytes_out;
  uint32_t entries;                          // entries made so far (writer's count)
  uint16_t index[SessionStats::kCallSlots];  // call -> entry + 1; 0: none yet
  CallCells entry[SessionStats::kCallEntries];
};
static_assert(std::is_trivially_copyable_v<StatsBlock>);
static_assert(std::atomic_ref<uint64_t>::required_alignment <= alignof(uint64_t));

Status SessionStats::create(int gpu, bool shared, std::shared_ptr<SessionStats>* out) {
  SharedBlock block;
  if (shared) {
    if (Status st = create_shared_block("cuwire-session-stats", sizeof(StatsBlock), &block);
        !st.is_ok())
      return st;
  } else {
    // Sparse: a page is taken when first written.
    block.base = mmap(nullptr, sizeof(StatsBlock), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (block.base == MAP_FAILED)
      return Status::failed(std::string("session figures: ") + std::strerror(errno));
  }
  auto* stats = static_cast<StatsBlock*>(block.base);
  store(stats->magic, kBlockMagic);
  out->reset(new SessionStats(gpu, block.fd, stats));
  return Status::ok();
}

Status SessionStats::attach(int fd, int gpu, std::shared_ptr<SessionStats>* out) {
  SharedBlock block;
  if (!attach_shared_block(fd, sizeof(StatsBlock), sizeof(StatsBlock), &block).is_ok() ||
      load(static_cast<StatsBlock*>(block.base)->magic) != kBlockMagic) {
    release_shared_block(&block);
    return Status::invalid_argument("session figures: not a figures block of this build");
  }
  out->reset(new SessionStats(gpu, block.fd, static_cast<StatsBlock*>(block.base)));
  return Status::ok();
}

SessionStats::~SessionStats() {
  munmap(block_, sizeof(StatsBlock));
  if (fd_ >= 0) close(fd_);
}

uint64_t SessionStats::calls() const { return load(block_->recorded); }
void SessionStats::set_memory(uint64_t bytes) { store(block_->memory, bytes); }
uint64_t SessionStats::memory() const { return load(block_->memory); }

uint32_t SessionStats::entry_of(uint32_t slot) {
  if (uint16_t e = load(block_->index[slot])) return e;
  const uint32_t made = load(block_->entries);
  // The last entry is kept for call "unknown", where calls past the others go as well.
  if (made + 1 >= kCallEntries && slot != 0) return entry_of(0);
  store(block_->entries, made + 1);
  const auto e = static_cast<uint16_t>(made + 1);
  store(block_->index[slot], e, std::memory_order_release);  // readers see the entry from now
  return e;
}

void SessionStats::record(uint32_t call_id, uint64_t queue_ns, uint64_t service_ns, CUresult rc,
                          uint64_t bytes_in, uint64_t bytes_out) {
  // An id the manifest does not have is call 0, "unknown": one row however many such ids.
  const uint32_t slot = call_id < kCallSlots && call_name(call_id) ? call_id : 0;
  add(block_->recorded, uint64_t{1});
  CallCells& c = block_->entry[entry_of(slot) - 1];
  c.service.record(service_ns);
  c.queue.record(queue_ns);
  if (rc != CUDA_SUCCESS) {
    const int32_t code = static_cast<int32_t>(rc);
    // The last slot is CUDA_ERROR_UNKNOWN's, where codes past the others' go as well.
    size_t i = 0;
    for (; i + 1 < kErrorSlots; ++i) {
      const int32_t seen = load(c.codes[i]);
      if (seen == code) break;
      if (seen == 0) {
        store(c.codes[i], code, std::memory_order_release);
        break;
      }
    }
    if (i + 1 == kErrorSlots)
      store(c.codes[i], int32_t{CUDA_ERROR_UNKNOWN}, std::memory_order_release);
    add(c.errors[i], uint64_t{1});
  }
  if (bytes_in) add(block_->bytes_in, bytes_in);
  if (bytes_out) add(block_->bytes_out, bytes_out);
}

void SessionStats::add_to(StatsSnapshot* out) const {
  for (uint32_t id = 0; id < kCallSlots; ++id) {
    const uint16_t e = load(block_->index[id], std::memory_order_acquire);
    if (e == 0 || e > kCallEntries) continue;
    const CallCells& c = block_->entry[e - 1];
    CallSnapshot& s = out->calls[id];
    c.service.add_to(&s.service);
    c.queue.add_to(&s.queue);
    for (size_t i = 0; i < kErrorSlots; ++i) {
      const int32_t code = load(c.codes[i], std::memory_order_acquire);
      if (code == 0) continue;
      if (uint64_t n = load(c.errors[i])) s.errors[code] += n;
    }
  }
  out->bytes_in += load(block_->bytes_in);
  out->bytes_out += load(block_->bytes_out);
}

std::shared_ptr<SessionStats> TenantStats::open_session(int gpu, bool shared) {
  std::shared_ptr<SessionStats> s;
  if (Status st = SessionStats::create(gpu, shared, &s); !st) {
    spdlog::warn("a session goes uncounted: {}", st.message());
    return nullptr;
  }
  std::lock_guard lock(mu_);
  live_.push_back(s);
  return s;
}

void TenantStats::close_session(const std::shared_ptr<SessionStats>& s) {
  if (!s) return;
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
