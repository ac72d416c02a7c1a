#include "server/ops/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "server/tenancy/compute_scheduler.h"
#include "server/tenancy/placement.h"
#include "server/ops/stats.h"
#include "server/tenancy/tenants.h"

namespace cuwire::server {
namespace {

// Histogram bucket bounds, 100 ns to 100 s in 1-2.5-5 steps.
constexpr std::array<uint64_t, 28> kBoundsNs = {
    100, 250, 500, 1'000, 2'500, 5'000, 10'000, 25'000, 50'000, 100'000, 250'000, 500'000,
    1'000'000, 2'500'000, 5'000'000, 10'000'000, 25'000'000, 50'000'000, 100'000'000,
    250'000'000, 500'000'000, 1'000'000'000, 2'500'000'000, 5'000'000'000, 10'000'000'000,
    25'000'000'000, 50'000'000'000, 100'000'000'000};

// A label value as the format wants it: backslash, double quote and newline escaped.
std::string escape(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

double seconds(uint64_t ns) { return static_cast<double>(ns) / 1e9; }

class Writer {
 public:
  void family(const char* name, const char* type, const char* help) {
    fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name,
                   type);
  }
  template <typename V>
  void sample(const std::string& name, const std::string& labels, V value) {
    if (labels.empty()) {
      fmt::format_to(std::back_inserter(out_), "{} {}\n", name, value);
    } else {
      fmt::format_to(std::back_inserter(out_), "{}{{{}}} {}\n", name, labels, value);
    }
  }
  void histogram(const char* name, const std::string& labels, const LatencyHistogram& h) {
    const std::string bucket = std::string(name) + "_bucket";
    for (uint64_t bound : kBoundsNs) {
      sample(bucket, fmt::format("{},le=\"{}\"", labels, seconds(bound)), h.count_at_most(bound));
    }
    // The total of the buckets, so that +Inf and _count agree even in a snapshot taken while
    // a call was being recorded.
    const uint64_t total = h.count_at_most(UINT64_MAX - 1);
    sample(bucket, labels + ",le=\"+Inf\"", total);
    sample(std::string(name) + "_sum", labels, seconds(h.sum()));
    sample(std::string(name) + "_count", labels, total);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

std::string tenant_label(const Tenant& t) { return "tenant=\"" + escape(t.name()) + "\""; }

}  // namespace

const char* cuwire_version() { return CUWIRE_VERSION; }

std::string cuda_version() {
  return std::to_string(CUDA_VERSION / 1000) + "." + std::to_string(CUDA_VERSION % 1000 / 10);
}

std::string render_metrics(const MetricsSources& src) {
  Writer w;
  w.family("cuwire_build_info", "gauge", "The server's version, CUDA version and backend.");
  w.sample("cuwire_build_info",
           fmt::format("version=\"{}\",cuda=\"{}\",backend=\"{}\"", cuwire_version(),
                       cuda_version(), escape(src.backend)),
           1);
  std::vector<GpuPool::GpuState> gpus;
  if (src.gpus) gpus = src.gpus->state();
  const auto& tenants = src.tenants->tenants();

  // Per tenant.
  std::vector<StatsSnapshot> stats;
  for (const auto& t : tenants) stats.push_back(t->stats().snapshot());
  w.family("cuwire_sessions", "gauge", "Sessions open, by tenant.");
  for (const auto& t : tenants) w.sample("cuwire_sessions", tenant_label(*t), t->sessions());
  w.family("cuwire_transfer_bytes_total", "counter",
           "Bytes carried in calls' bulk data (copies, images), by tenant and direction.");
  for (size_t i = 0; i < tenants.size(); ++i) {
    const std::string l = tenant_label(*tenants[i]);
    w.sample("cuwire_transfer_bytes_total", l + ",direction=\"host_to_device\"",
             stats[i].bytes_in);
    w.sample("cuwire_transfer_bytes_total", l + ",direction=\"device_to_host\"",
             stats[i].bytes_out);
  }
  w.family("cuwire_calls_total", "counter", "Calls served, by tenant.");
  for (size_t i = 0; i < tenants.size(); ++i) {
    w.sample("cuwire_calls_total", tenant_label(*tenants[i]), stats[i].total_calls());
  }
  w.family("cuwire_tenant_compute_limit_ratio", "gauge",
           "The tenant's compute cap as a share of each GPU's time (1: no cap).");
  for (const auto& t : tenants) {
    w.sample("cuwire_tenant_compute_limit_ratio", tenant_label(*t),
             t->compute() ? t->compute() / 100.0 : 1.0);
  }

  // Per tenant and GPU.
  w.family("cuwire_tenant_memory_used_bytes", "gauge",
           "Device memory the tenant's sessions hold, by tenant and GPU.");
  for (const auto& t : tenants) {
    for (const auto& g : gpus) {
      w.sample("cuwire_tenant_memory_used_bytes",
               fmt::format("{},gpu=\"{}\"", tenant_label(*t), g.info.device),
               t->memory_used(g.info.device));
    }
  }
  w.family("cuwire_tenant_memory_limit_bytes", "gauge",
           "The tenant's memory cap on each GPU (the GPU's memory when it has none).");
  for (const auto& t : tenants) {
    for (const auto& g : gpus) {
      w.sample("cuwire_tenant_memory_limit_bytes",
               fmt::format("{},gpu=\"{}\"", tenant_label(*t), g.info.device),
               t->memory_cap(g.info.memory_total));
    }
  }
  w.family("cuwire_tenant_gpu_busy_seconds_total", "counter",
           "GPU time the tenant's work ran, measured by marker events after each submission "
           "(to the scheduler's poll interval), by tenant and GPU.");
  for (const auto& t : tenants) {
    for (const auto& g : gpus) {
      uint64_t busy = 0;
      if (src.compute) {
        auto it = src.compute->find(g.info.device);
        if (it != src.compute->end()) busy = it->second->busy_ns(t.get());
      }
      w.sample("cuwire_tenant_gpu_busy_seconds_total",
               fmt::format("{},gpu=\"{}\"", tenant_label(*t), g.info.device), seconds(busy));
    }
  }

  // Per GPU.
  w.family("cuwire_gpu_memory_total_bytes", "gauge", "Each GPU's device memory.");
  for (const auto& g : gpus) {
    w.sample("cuwire_gpu_memory_total_bytes", fmt::format("gpu=\"{}\"", g.info.device),
             g.info.memory_total);
  }
  w.family("cuwire_gpu_memory_used_bytes", "gauge",
           "Device memory all tenants' sessions hold on each GPU.");
  for (const auto& g : gpus) {
    uint64_t used = 0;
    for (const auto& t : tenants) used += t->memory_used(g.info.device);
    w.sample("cuwire_gpu_memory_used_bytes", fmt::format("gpu=\"{}\"", g.info.device), used);
  }
  w.family("cuwire_gpu_sessions", "gauge", "Sessions placed on each GPU.");
  for (const auto& g : gpus) {
    w.sample("cuwire_gpu_sessions", fmt::format("gpu=\"{}\"", g.info.device), g.sessions);
  }

  // Per tenant and call.
  w.family("cuwire_call_duration_seconds", "histogram",
           "Service time of calls, from the start of their execution to their reply, by "
           "tenant and call.");
  for (size_t i = 0; i < tenants.size(); ++i) {
    for (const auto& [id, c] : stats[i].calls) {
      w.histogram("cuwire_call_duration_seconds",
                  tenant_label(*tenants[i]) + ",call=\"" + call_label(id) + "\"", c.service);
    }
  }
  w.family("cuwire_call_queue_seconds", "histogram",
           "Time calls waited from their frame's arrival to the start of their execution, by "
           "tenant and call.");
  for (size_t i = 0; i < tenants.size(); ++i) {
    for (const auto& [id, c] : stats[i].calls) {
      w.histogram("cuwire_call_queue_seconds",
                  tenant_label(*tenants[i]) + ",call=\"" + call_label(id) + "\"", c.queue);
    }
  }
  w.family("cuwire_call_errors_total", "counter",
           "Calls that failed, by tenant, call and CUDA error.");
  for (size_t i = 0; i < tenants.size(); ++i) {
    for (const auto& [id, c] : stats[i].calls) {
      for (const auto& [code, n] : c.errors) {
        w.sample("cuwire_call_errors_total",
                 fmt::format("{},call=\"{}\",code=\"{}\"", tenant_label(*tenants[i]),
                             call_label(id), error_name(code)),
                 n);
      }
    }
  }
  return w.take();
}

}  // namespace cuwire::server
