#include "call_stats.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "call_ids.h"
#include "histogram.h"

namespace cuwire::client {

std::string format_bytes(uint64_t b) {
  char buf[32];
  if (b == 0) return "-";
  if (b < 10'000) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  else if (b < 10'000'000) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else if (b < 10'000'000'000ull) std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1048576.0);
  else std::snprintf(buf, sizeof buf, "%.1f GiB", b / 1073741824.0);
  return buf;
}

std::string format_ns(uint64_t ns) {
  char buf[32];
  if (ns < 10'000) std::snprintf(buf, sizeof buf, "%.2f us", ns / 1e3);
  else if (ns < 10'000'000) std::snprintf(buf, sizeof buf, "%.1f us", ns / 1e3);
  else std::snprintf(buf, sizeof buf, "%.1f ms", ns / 1e6);
  return buf;
}

namespace {

struct CallRow {
  LatencyHistogram hist;
  uint64_t bytes = 0;
};

// A call answered locally and the same call sent are two rows.
using RowKey = std::pair<uint32_t, CallKind>;

struct Table {
  std::mutex mu;
  std::map<RowKey, std::unique_ptr<CallRow>> rows;  // guarded by mu
};

const char* kind_name(CallKind k) {
  switch (k) {
    case CallKind::kRoundTrip: return "reply";
    case CallKind::kAsync: return "async";
    case CallKind::kLocal: return "local";
  }
  return "?";
}

Table& table() {
  static Table* t = new Table();  // leaked: used from atexit
  return *t;
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

}  // namespace

void record_call(uint32_t call_id, uint64_t ns, CallKind kind, uint64_t bytes) {
  Table& t = table();
  std::lock_guard lock(t.mu);
  auto& row = t.rows[{call_id, kind}];
  if (!row) row = std::make_unique<CallRow>();
  row->hist.record(ns);
  row->bytes += bytes;
}

std::string format_call_stats() {
  Table& t = table();
  struct Row {
    RowKey key;
    LatencyHistogram hist;
    uint64_t bytes;
  };
  std::vector<Row> rows;
  {
    std::lock_guard lock(t.mu);
    for (auto& [key, row] : t.rows) rows.push_back({key, row->hist, row->bytes});
  }
  std::sort(rows.begin(), rows.end(),
            [](const Row& a, const Row& b) { return a.hist.sum() > b.hist.sum(); });
  std::string out =
      "cuwire: client-observed latency per driver call (reply: a round trip; async: sent "
      "without waiting; local: answered from the client's caches)\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-32s %-5s %8s %11s %11s %11s %11s %11s %11s\n", "call",
                "how", "count", "p50", "p90", "p99", "max", "total", "bytes");
  out += line;
  uint64_t calls = 0, total = 0, bytes = 0, local = 0;
  for (const Row& r : rows) {
    const char* name = call_name(r.key.first);
    const LatencyHistogram& h = r.hist;
    std::snprintf(line, sizeof line, "%-32s %-5s %8llu %11s %11s %11s %11s %11s %11s\n",
                  name ? name : "?", kind_name(r.key.second),
                  static_cast<unsigned long long>(h.count()), format_ns(h.quantile(0.5)).c_str(),
                  format_ns(h.quantile(0.9)).c_str(), format_ns(h.quantile(0.99)).c_str(),
                  format_ns(h.max()).c_str(), format_ns(h.sum()).c_str(), format_bytes(r.bytes).c_str());
    out += line;
    calls += h.count();
    total += h.sum();
    bytes += r.bytes;
    if (r.key.second == CallKind::kLocal) local += h.count();
  }
  std::snprintf(line, sizeof line, "%-32s %-5s %8llu %11s %11s %11s %11s %11s %11s\n",
                "all calls", "", static_cast<unsigned long long>(calls), "", "", "", "",
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
