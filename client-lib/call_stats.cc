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
namespace {

struct CallRow {
  LatencyHistogram hist;
  bool async = false;
};

struct Table {
  std::mutex mu;
  std::map<uint32_t, std::unique_ptr<CallRow>> rows;  // guarded by mu
};

Table& table() {
  static Table* t = new Table();  // leaked: used from atexit
  return *t;
}

std::string fmt_ns(uint64_t ns) {
  char buf[32];
  if (ns < 10'000) std::snprintf(buf, sizeof buf, "%.2f us", ns / 1e3);
  else if (ns < 10'000'000) std::snprintf(buf, sizeof buf, "%.1f us", ns / 1e3);
  else std::snprintf(buf, sizeof buf, "%.1f ms", ns / 1e6);
  return buf;
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

void record_call(uint32_t call_id, uint64_t ns, bool async) {
  Table& t = table();
  std::lock_guard lock(t.mu);
  auto& row = t.rows[call_id];
  if (!row) row = std::make_unique<CallRow>();
  row->hist.record(ns);
  row->async = async;
}

std::string format_call_stats() {
  Table& t = table();
  std::vector<std::pair<uint32_t, LatencyHistogram>> rows;
  {
    std::lock_guard lock(t.mu);
    for (auto& [id, row] : t.rows) rows.emplace_back(id, row->hist);
  }
  std::sort(rows.begin(), rows.end(),
            [](auto& a, auto& b) { return a.second.sum() > b.second.sum(); });
  std::string out = "cuwire: client-observed latency per driver call\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-32s %8s %11s %11s %11s %11s %11s\n", "call", "count",
                "p50", "p90", "p99", "max", "total");
  out += line;
  uint64_t calls = 0, total = 0;
  for (auto& [id, h] : rows) {
    const char* name = call_name(id);
    std::snprintf(line, sizeof line, "%-32s %8llu %11s %11s %11s %11s %11s\n", name ? name : "?",
                  static_cast<unsigned long long>(h.count()), fmt_ns(h.quantile(0.5)).c_str(),
                  fmt_ns(h.quantile(0.9)).c_str(), fmt_ns(h.quantile(0.99)).c_str(),
                  fmt_ns(h.max()).c_str(), fmt_ns(h.sum()).c_str());
    out += line;
    calls += h.count();
    total += h.sum();
  }
  std::snprintf(line, sizeof line, "%-32s %8llu %11s %11s %11s %11s %11s\n", "all calls",
                static_cast<unsigned long long>(calls), "", "", "", "", fmt_ns(total).c_str());
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
