#include "server/ops/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <string_view>
#include <type_traits>

#include "server/ops/metric_names.h"
#include "server/ops/stats.h"
#include "server/tenancy/compute_scheduler.h"
#include "server/tenancy/placement.h"
#include "server/tenancy/tenants.h"

namespace cuwire::server {
namespace {

// Histogram bucket bounds, 100 ns to 100 s in 1-2.5-5 steps.
constexpr std::array<uint64_t, 28> kBoundsNs = {100,
                                                250,
                                                500,
                                                1'000,
                                                2'500,
                                                5'000,
                                                10'000,
                                                25'000,
                                                50'000,
                                                100'000,
                                                250'000,
                                                500'000,
                                                1'000'000,
                                                2'500'000,
                                                5'000'000,
                                                10'000'000,
                                                25'000'000,
                                                50'000'000,
                                                100'000'000,
                                                250'000'000,
                                                500'000'000,
                                                1'000'000'000,
                                                2'500'000'000,
                                                5'000'000'000,
                                                10'000'000'000,
                                                25'000'000'000,
                                                50'000'000'000,
                                                100'000'000'000};

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

// Converts a label value to text: strings as they are, numbers as fmt writes them.
template <typename T>
std::string text_of(const T& v) {
  if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    return std::string(std::string_view(v));
  } else {
    return fmt::format("{}", v);
  }
}

template <typename V>
void write_sample(std::string* out, std::string_view name, const std::string& labels, V value) {
  if (labels.empty()) {
    fmt::format_to(std::back_inserter(*out), "{} {}\n", name, value);
  } else {
    fmt::format_to(std::back_inserter(*out), "{}{{{}}} {}\n", name, labels, value);
  }
}

// The samples of family M (metric_names.h): its name, and its label names in the table's order
// with the values given, escaped. A sample with too few or too many label values, or a
// histogram's written as a plain sample, does not compile.
template <const MetricDef& M>
class Family {
 public:
  explicit Family(std::string* out) : out_(out) {}

  template <typename V, typename... L>
  void sample(V value, const L&... label_values) {
    static_assert(M.type != MetricType::kHistogram, "a histogram's samples: histogram()");
    static_assert(sizeof...(L) == kLabels.size, "one value for each of the family's labels");
    write_sample(out_, M.name, labels(label_values...), value);
  }

  template <typename... L>
  void histogram(const LatencyHistogram& h, const L&... label_values) {
    static_assert(M.type == MetricType::kHistogram);
    static_assert(sizeof...(L) == kLabels.size, "one value for each of the family's labels");
    const std::string l = labels(label_values...);
    const std::string le = l.empty() ? "le=" : l + ",le=";
    const std::string bucket = std::string(M.name) + "_bucket";
    for (uint64_t bound : kBoundsNs) {
      write_sample(out_, bucket, fmt::format("{}\"{}\"", le, seconds(bound)),
                   h.count_at_most(bound));
    }
    // The total of the buckets, so that +Inf and _count agree even in a snapshot taken while
    // a call was being recorded.
    const uint64_t total = h.count_at_most(UINT64_MAX - 1);
    write_sample(out_, bucket, le + "\"+Inf\"", total);
    write_sample(out_, std::string(M.name) + "_sum", l, seconds(h.sum()));
    write_sample(out_, std::string(M.name) + "_count", l, total);
  }

 private:
  static constexpr MetricLabels kLabels = M.labels();

  static std::string labels() { return ""; }
  template <typename... L>
  static std::string labels(const L&... values) {
    std::string out;
    size_t i = 0;
    auto add = [&](const std::string& value) {
      if (i) out += ',';
      out += kLabels.names[i++];
      out += "=\"";
      out += escape(value);
      out += '"';
    };
    (add(text_of(values)), ...);
    return out;
  }

  std::string* out_;
};

class Writer {
 public:
  // Writes M's HELP and TYPE lines; its samples go through what this returns.
  template <const MetricDef& M>
  Family<M> family() {
    fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", M.name, M.help, M.name,
                   type_name(M.type));
    return Family<M>(&out_);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

const char* cuwire_version() { return CUWIRE_VERSION; }

std::string cuda_version() {
  return std::to_string(CUDA_VERSION / 1000) + "." + std::to_string(CUDA_VERSION % 1000 / 10);
}

std::string render_metrics(const MetricsSources& src) {
  namespace m = metric;
  Writer w;
  w.family<m::kBuildInfo>().sample(1, cuwire_version(), cuda_version(), src.backend);
  w.family<m::kBackendFallback>().sample(src.backend_fallback ? 1 : 0);
  std::vector<GpuPool::GpuState> gpus;
  if (src.gpus) gpus = src.gpus->state();
  const auto& tenants = src.tenants->tenants();

  // Per tenant.
  std::vector<StatsSnapshot> stats;
  for (const auto& t : tenants) stats.push_back(t->stats().snapshot());
  auto sessions = w.family<m::kSessions>();
  for (const auto& t : tenants) sessions.sample(t->sessions(), t->name());
  auto transfer = w.family<m::kTransferBytes>();
  for (size_t i = 0; i < tenants.size(); ++i) {
    transfer.sample(stats[i].bytes_in, tenants[i]->name(), "host_to_device");
    transfer.sample(stats[i].bytes_out, tenants[i]->name(), "device_to_host");
  }
  auto calls = w.family<m::kCalls>();
  for (size_t i = 0; i < tenants.size(); ++i) {
    calls.sample(stats[i].total_calls(), tenants[i]->name());
  }
  auto compute_limit = w.family<m::kTenantComputeLimit>();
  for (const auto& t : tenants) {
    compute_limit.sample(t->compute() ? t->compute() / 100.0 : 1.0, t->name());
  }

  // Per tenant and GPU.
  auto tenant_used = w.family<m::kTenantMemoryUsed>();
  for (const auto& t : tenants) {
    for (const auto& g : gpus) {
      tenant_used.sample(t->memory_used(g.info.device), t->name(), g.info.device);
    }
  }
  auto tenant_limit = w.family<m::kTenantMemoryLimit>();
  for (const auto& t : tenants) {
    for (const auto& g : gpus) {
      tenant_limit.sample(t->memory_cap(g.info.memory_total), t->name(), g.info.device);
    }
  }
  auto tenant_busy = w.family<m::kTenantGpuBusy>();
  for (const auto& t : tenants) {
    for (const auto& g : gpus) {
      uint64_t busy = 0;
      if (src.compute) {
        auto it = src.compute->find(g.info.device);
        if (it != src.compute->end()) busy = it->second->busy_ns(t.get());
      }
      tenant_busy.sample(seconds(busy), t->name(), g.info.device);
    }
  }

  // Per GPU.
  auto gpu_info = w.family<m::kGpuInfo>();
  for (const auto& g : gpus) {
    gpu_info.sample(1, g.info.device, g.info.uuid, g.info.name, g.info.pci_bus_id);
  }
  auto gpu_total = w.family<m::kGpuMemoryTotal>();
  for (const auto& g : gpus) gpu_total.sample(g.info.memory_total, g.info.device);
  auto gpu_used = w.family<m::kGpuMemoryUsed>();
  for (const auto& g : gpus) {
    uint64_t used = 0;
    for (const TenantRef& t : src.tenants->all()) used += t->memory_used(g.info.device);
    gpu_used.sample(used, g.info.device);
  }
  auto gpu_sessions = w.family<m::kGpuSessions>();
  for (const auto& g : gpus) gpu_sessions.sample(g.sessions, g.info.device);

  // Per tenant and call.
  auto duration = w.family<m::kCallDuration>();
  for (size_t i = 0; i < tenants.size(); ++i) {
    for (const auto& [id, c] : stats[i].calls) {
      duration.histogram(c.service, tenants[i]->name(), call_label(id));
    }
  }
  auto queue = w.family<m::kCallQueue>();
  for (size_t i = 0; i < tenants.size(); ++i) {
    for (const auto& [id, c] : stats[i].calls) {
      queue.histogram(c.queue, tenants[i]->name(), call_label(id));
    }
  }
  auto errors = w.family<m::kCallErrors>();
  for (size_t i = 0; i < tenants.size(); ++i) {
    for (const auto& [id, c] : stats[i].calls) {
      for (const auto& [code, n] : c.errors) {
        errors.sample(n, tenants[i]->name(), call_label(id), error_name(code));
      }
    }
  }
  return w.take();
}

}  // namespace cuwire::server
