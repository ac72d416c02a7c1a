#include "client-lib/core/call_stats.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

#include "generated/call_ids.h"
#include "protocol/histogram.h"

namespace cuwire::client {

std::string format_bytes(uint64_t b) {
  char buf[32];
  if (b == 0) return "-";
  if (b < 10'000)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  else if (b < 10'000'000)
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else if (b < 10'000'000'000ull)
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1048576.0);
  else
    std::snprintf(buf, sizeof buf, "%.1f GiB", b / 1073741824.0);
  return buf;
}

std::string format_ns(uint64_t ns) {
  char buf[32];
  if (ns < 10'000)
    std::snprintf(buf, sizeof buf, "%.2f us", ns / 1e3);
  else if (ns < 10'000'000)
    std::snprintf(buf, sizeof buf, "%.1f us", ns / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.1f ms", ns / 1e6);
  return buf;
}

namespace {

// A row of one thread's shard: written by that thread only, read by the report from any thread.
// Single-writer updates are a relaxed load and store (plain moves on x86-64), never a locked
// read-modify-write; a reader sees each counter whole.
struct ShardRow {
  std::array<std::atomic<uint64_t>, LatencyHistogram::kBuckets> buckets{};
  std::atomic<uint64_t> count{0}, sum{0}, min{0}, max{0}, bytes{0};

  static void bump(std::atomic<uint64_t>& a, uint64_t by) {
    a.store(a.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
  void record(uint64_t ns, uint64_t b) {
    bump(buckets[LatencyHistogram::index_of(ns)], 1);
    const uint64_t n = count.load(std::memory_order_relaxed);
    if (n == 0 || ns < min.load(std::memory_order_relaxed))
      min.store(ns, std::memory_order_relaxed);
    if (ns > max.load(std::memory_order_relaxed)) max.store(ns, std::memory_order_relaxed);
    bump(sum, ns);
    bump(bytes, b);
    count.store(n + 1, std::memory_order_relaxed);
  }
  void add_to(LatencyHistogram* h, uint64_t* b) const {
    for (size_t i = 0; i < buckets.size(); ++i) {
      if (uint64_t n = buckets[i].load(std::memory_order_relaxed)) h->add_bucket(i, n);
    }
    h->add_summary(count.load(std::memory_order_relaxed), sum.load(std::memory_order_relaxed),
                   min.load(std::memory_order_relaxed), max.load(std::memory_order_relaxed));
    *b += bytes.load(std::memory_order_relaxed);
  }
};

// A row per (call, kind), found by slot = call id * 3 + kind in chunks of 64 allocated on first
// use: a thread that makes a dozen kinds of call holds a few chunks, not a row per call.
constexpr size_t kChunkBits = 6, kChunks = 128;
constexpr size_t kSlots = kChunks << kChunkBits;
struct Chunk {
  std::array<std::atomic<ShardRow*>, size_t{1} << kChunkBits> rows{};
};

// One thread's rows, without a lock. A thread that ends hands its shard (rows and all) to the
// next thread that starts recording, so a program that makes threads and joins them keeps a
// shard per live thread, not one per thread it ever had.
struct Shard {
  std::array<std::atomic<Chunk*>, kChunks> chunks{};

  ShardRow& row(size_t slot) {
    std::atomic<Chunk*>& c = chunks[slot >> kChunkBits];
    Chunk* chunk = c.load(std::memory_order_relaxed);
    if (!chunk) {
      chunk = new Chunk();
      c.store(chunk, std::memory_order_release);
    }
    std::atomic<ShardRow*>& r = chunk->rows[slot & ((size_t{1} << kChunkBits) - 1)];
    ShardRow* row = r.load(std::memory_order_relaxed);
    if (!row) {
      row = new ShardRow();
      r.store(row, std::memory_order_release);
    }
    return *row;
  }
};

// A call answered locally and the same call sent are two rows.
using RowKey = std::pair<uint32_t, CallKind>;

struct Table {
  std::mutex mu;
  std::vector<Shard*> shards;  // guarded by mu; never freed: the report reads them at exit
  std::vector<Shard*> idle;    // guarded by mu; shards of threads that ended
  // Call ids past the slots (none today: the manifest's ids are below 1500).
  std::map<RowKey, std::unique_ptr<ShardRow>> overflow;  // guarded by mu
};

Table& table() {
  static Table* t = new Table();  // leaked: used from atexit and from ending threads
  return *t;
}

struct ShardLease {
  Shard* shard = nullptr;
  ~ShardLease() {
    if (!shard) return;
    Table& t = table();
    std::lock_guard lock(t.mu);
    t.idle.push_back(shard);
  }
  Shard& get() {
    if (shard) return *shard;
    Table& t = table();
    std::lock_guard lock(t.mu);
    if (!t.idle.empty()) {
      shard = t.idle.back();
      t.idle.pop_back();
    } else {
      shard = new Shard();
      t.shards.push_back(shard);
    }
    return *shard;
  }
};
thread_local ShardLease t_shard;

const char* kind_name(CallKind k) {
  switch (k) {
    case CallKind::kRoundTrip:
      return "reply";
    case CallKind::kAsync:
      return "async";
    case CallKind::kLocal:
      return "local";
  }
  return "?";
}

void report() {
  const char* where = std::getenv("CUWIRE_STATS");
  if (!where || !*where || std::string(where) == "0") return;
  std::string text = format_call_stats();
  // exit() runs this before it flushes stdio: flush the program's own output first so the
  // table comes after it.
  std::fflush(stdout);
  std::string w(where);
  if (w == "1" || w == "stderr") {
    std::fputs(text.c_str(), stderr);
    return;
  }
  if (FILE* f = std::fopen(where, "w")) {
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
}

// The cycle counter as a clock: only where the CPU says it ticks at a constant rate through
// sleep states (CPUID 0x80000007 EDX bit 8) and the kernel keeps time by it, so that it agrees
// across cores. Otherwise ticks are CLOCK_MONOTONIC nanoseconds.
bool detect_tsc() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0x80000007, &a, &b, &c, &d) || !(d & (1u << 8))) return false;
  FILE* f = std::fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
  if (!f) return false;
  char name[32] = {};
  const bool tsc = std::fgets(name, sizeof name, f) && std::strncmp(name, "tsc\n", 4) == 0;
  std::fclose(f);
  return tsc;
#else
  return false;
#endif
}

uint64_t read_tsc() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return 0;
#endif
}

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

struct TickClock {
  bool tsc = detect_tsc();
  // The pair every calibration measures from: taken when the library is first used.
  uint64_t tick0 = 0, ns0 = 0;
  // Nanoseconds per tick as 32.32 fixed point, from the longest span measured so far.
  std::atomic<uint64_t> mult{0};

  TickClock() {
    if (tsc) {
      tick0 = read_tsc();
      ns0 = monotonic_ns();
    }
  }
  void calibrate() {
    const uint64_t t = read_tsc(), ns = monotonic_ns();
    if (t <= tick0 || ns <= ns0) return;
    mult.store(
        static_cast<uint64_t>((static_cast<unsigned __int128>(ns - ns0) << 32) / (t - tick0)),
        std::memory_order_relaxed);
  }
};

TickClock& tick_clock() {
  static TickClock c;
  return c;
}
// Made before main() runs, so the calibration's span starts with the program.
[[maybe_unused]] TickClock& g_tick_clock_at_load = tick_clock();

}  // namespace

uint64_t call_ticks() { return tick_clock().tsc ? read_tsc() : monotonic_ns(); }

uint64_t ticks_to_ns(uint64_t ticks) {
  TickClock& c = tick_clock();
  if (!c.tsc) return ticks;
  // Calibrated again at this thread's 1st, 2nd, 4th, ... conversion, then every 65536th: the
  // span grows with the program, and with it the precision (two clock reads of jitter over
  // milliseconds), for one clock read now and then.
  thread_local uint64_t conversions = 0;
  ++conversions;
  uint64_t mult = c.mult.load(std::memory_order_relaxed);
  if (mult == 0 || (conversions & (conversions - 1)) == 0 || (conversions & 0xffff) == 0) {
    c.calibrate();
    mult = c.mult.load(std::memory_order_relaxed);
    if (mult == 0) return ticks;  // no span yet: the first tick of the program
  }
  return static_cast<uint64_t>((static_cast<unsigned __int128>(ticks) * mult) >> 32);
}

void record_call(uint32_t call_id, uint64_t ns, CallKind kind, uint64_t bytes) {
  const size_t slot = static_cast<size_t>(call_id) * 3 + static_cast<size_t>(kind);
  if (slot < kSlots) {
    t_shard.get().row(slot).record(ns, bytes);
    return;
  }
  Table& t = table();
  std::lock_guard lock(t.mu);
  auto& row = t.overflow[{call_id, kind}];
  if (!row) row = std::make_unique<ShardRow>();
  row->record(ns, bytes);
}

std::string format_call_stats() {
  Table& t = table();
  struct Row {
    RowKey key;
    LatencyHistogram hist;
    uint64_t bytes;
  };
  std::map<RowKey, Row> merged;
  {
    std::lock_guard lock(t.mu);
    auto add = [&](RowKey key, const ShardRow& row) {
      Row& r = merged.try_emplace(key, Row{key, {}, 0}).first->second;
      row.add_to(&r.hist, &r.bytes);
    };
    for (const Shard* shard : t.shards) {
      for (size_t c = 0; c < kChunks; ++c) {
        const Chunk* chunk = shard->chunks[c].load(std::memory_order_acquire);
        if (!chunk) continue;
        for (size_t i = 0; i < chunk->rows.size(); ++i) {
          const ShardRow* row = chunk->rows[i].load(std::memory_order_acquire);
          if (!row) continue;
          const size_t slot = (c << kChunkBits) + i;
          add({static_cast<uint32_t>(slot / 3), static_cast<CallKind>(slot % 3)}, *row);
        }
      }
    }
    for (auto& [key, row] : t.overflow) add(key, *row);
  }
  std::vector<Row> rows;
  for (auto& [key, row] : merged) {
    if (row.hist.count() > 0) rows.push_back(std::move(row));
  }
  std::sort(rows.begin(), rows.end(),
            [](const Row& a, const Row& b) { return a.hist.sum() > b.hist.sum(); });
  std::string out =
      "cuwire: client-observed latency per driver call (reply: a round trip; async: sent "
      "without waiting; local: answered from the client's caches)\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-32s %-5s %8s %11s %11s %11s %11s %11s %11s\n", "call", "how",
                "count", "p50", "p90", "p99", "max", "total", "bytes");
  out += line;
  uint64_t calls = 0, total = 0, bytes = 0, local = 0;
  for (const Row& r : rows) {
    const char* name = call_name(r.key.first);
    const LatencyHistogram& h = r.hist;
    std::snprintf(line, sizeof line, "%-32s %-5s %8llu %11s %11s %11s %11s %11s %11s\n",
                  name ? name : "?", kind_name(r.key.second),
                  static_cast<unsigned long long>(h.count()), format_ns(h.quantile(0.5)).c_str(),
                  format_ns(h.quantile(0.9)).c_str(), format_ns(h.quantile(0.99)).c_str(),
                  format_ns(h.max()).c_str(), format_ns(h.sum()).c_str(),
                  format_bytes(r.bytes).c_str());
    out += line;
    calls += h.count();
    total += h.sum();
    bytes += r.bytes;
    if (r.key.second == CallKind::kLocal) local += h.count();
  }
  std::snprintf(line, sizeof line, "%-32s %-5s %8llu %11s %11s %11s %11s %11s %11s\n", "all calls",
                "", static_cast<unsigned long long>(calls), "", "", "", "",
                format_ns(total).c_str(), format_bytes(bytes).c_str());
  out += line;
  std::snprintf(line, sizeof line, "%llu of them answered locally, without the server\n",
                static_cast<unsigned long long>(local));
  out += line;
  return out;
}

void install_stats_report() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* where = std::getenv("CUWIRE_STATS");
    if (where && *where && std::string(where) != "0") std::atexit(report);
  });
}

}  // namespace cuwire::client
