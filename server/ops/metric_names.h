// The metric families gpu-server exports on /metrics (metrics.h), each defined once: its name,
// type, label names and help text. render_metrics writes every family's HELP and TYPE lines and
// its samples from these entries, in this order; the tests read the same table (that the
// exposition declares exactly these families, and that the Grafana dashboard in deploy/ names
// only these metrics and their labels).
//
// Names follow Prometheus' conventions (base units, _total for counters, _seconds and _bytes).
// A histogram's samples are its name with _bucket (with label le besides the table's), _sum and
// _count. Labels are listed in the order samples carry them.
//
// Header-only, constexpr: no other server headers.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace cuwire::server {

enum class MetricType { kCounter, kGauge, kHistogram };

// The type as the TYPE line writes it.
constexpr std::string_view type_name(MetricType t) {
  switch (t) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// A family's label names, split from the table's comma-separated list.
struct MetricLabels {
  static constexpr size_t kMax = 4;
  std::array<std::string_view, kMax> names{};
  size_t size = 0;
  constexpr const std::string_view* begin() const { return names.data(); }
  constexpr const std::string_view* end() const { return names.data() + size; }
  constexpr bool contains(std::string_view n) const {
    for (std::string_view l : *this) {
      if (l == n) return true;
    }
    return false;
  }
};

struct MetricDef {
  std::string_view name;
  MetricType type;
  std::string_view label_list;  // "tenant,gpu"; "" for none
  std::string_view help;

  constexpr MetricLabels labels() const {
    MetricLabels out;
    std::string_view rest = label_list;
    while (!rest.empty() && out.size < MetricLabels::kMax) {
      const size_t comma = rest.find(',');
      out.names[out.size++] = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    return out;
  }
};

// X(id, name, type, labels, help), in the order of the exposition.
#define CUWIRE_METRICS(X)                                                                         \
  X(kBuildInfo, "cuwire_build_info", kGauge, "version,cuda,backend",                              \
    "The server's version, CUDA version and backend.")                                            \
  X(kBackendFallback, "cuwire_backend_fallback", kGauge, "",                                      \
    "1 when --backend auto found no usable GPU driver and serves the simulated GPU instead.")     \
  /* Per tenant. */                                                                               \
  X(kSessions, "cuwire_sessions", kGauge, "tenant", "Sessions open, by tenant.")                  \
  X(kTransferBytes, "cuwire_transfer_bytes_total", kCounter, "tenant,direction",                  \
    "Bytes carried in calls' bulk data (copies, images), by tenant and direction.")               \
  X(kCalls, "cuwire_calls_total", kCounter, "tenant", "Calls served, by tenant.")                 \
  X(kTenantComputeLimit, "cuwire_tenant_compute_limit_ratio", kGauge, "tenant",                   \
    "The tenant's compute cap as a share of each GPU's time (1: no cap).")                        \
  /* Per tenant and GPU. */                                                                       \
  X(kTenantMemoryUsed, "cuwire_tenant_memory_used_bytes", kGauge, "tenant,gpu",                   \
    "Device memory the tenant's sessions hold, by tenant and GPU.")                               \
  X(kTenantMemoryLimit, "cuwire_tenant_memory_limit_bytes", kGauge, "tenant,gpu",                 \
    "The tenant's memory cap on each GPU (the GPU's memory when it has none).")                   \
  X(kTenantGpuBusy, "cuwire_tenant_gpu_busy_seconds_total", kCounter, "tenant,gpu",               \
    "GPU time the tenant's work ran, measured by marker events after each submission "            \
    "(to the scheduler's poll interval), by tenant and GPU.")                                     \
  /* Per GPU. */                                                                                  \
  X(kGpuInfo, "cuwire_gpu_info", kGauge, "gpu,uuid,model,pci_bus_id",                             \
    "1 for each GPU, with its UUID, model and PCI bus id: joins cuwire's gpu label to DCGM's.")   \
  X(kGpuMemoryTotal, "cuwire_gpu_memory_total_bytes", kGauge, "gpu", "Each GPU's device memory.") \
  X(kGpuMemoryUsed, "cuwire_gpu_memory_used_bytes", kGauge, "gpu",                                \
    "Device memory all tenants' sessions hold on each GPU.")                                      \
  X(kGpuSessions, "cuwire_gpu_sessions", kGauge, "gpu", "Sessions placed on each GPU.")           \
  /* Per tenant and call. */                                                                      \
  X(kCallDuration, "cuwire_call_duration_seconds", kHistogram, "tenant,call",                     \
    "Service time of calls, from the start of their execution to their reply, by "                \
    "tenant and call.")                                                                           \
  X(kCallQueue, "cuwire_call_queue_seconds", kHistogram, "tenant,call",                           \
    "Time calls waited from their frame's arrival to the start of their execution, by "           \
    "tenant and call.")                                                                           \
  X(kCallErrors, "cuwire_call_errors_total", kCounter, "tenant,call,code",                        \
    "Calls that failed, by tenant, call and CUDA error.")

// metric::kSessions and the others, one constant each.
namespace metric {
#define CUWIRE_METRIC_CONSTANT(id, name, type, labels, help) \
  inline constexpr MetricDef id{name, MetricType::type, labels, help};
CUWIRE_METRICS(CUWIRE_METRIC_CONSTANT)
#undef CUWIRE_METRIC_CONSTANT
}  // namespace metric

// Every family, in the order of the exposition.
inline constexpr std::array kMetrics = {
#define CUWIRE_METRIC_ENTRY(id, name, type, labels, help) metric::id,
    CUWIRE_METRICS(CUWIRE_METRIC_ENTRY)
#undef CUWIRE_METRIC_ENTRY
};

namespace metric_checks {
constexpr bool is_name_char(char c, bool first, bool colons) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colons && c == ':') ||
         (!first && c >= '0' && c <= '9');
}
constexpr bool is_name(std::string_view s, bool colons) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (!is_name_char(s[i], i == 0, colons)) return false;
  }
  return true;
}
// What the text format and Prometheus' conventions ask of the table.
constexpr bool well_formed() {
  for (size_t i = 0; i < kMetrics.size(); ++i) {
    const MetricDef& m = kMetrics[i];
    if (!is_name(m.name, true) || m.help.empty()) return false;
    // HELP text escapes only these; none of ours needs them.
    if (m.help.find_first_of("\\\n") != std::string_view::npos) return false;
    if ((m.type == MetricType::kCounter) != m.name.ends_with("_total")) return false;
    const MetricLabels labels = m.labels();
    size_t commas = 0;
    for (char c : m.label_list) commas += c == ',';
    if (!m.label_list.empty() && labels.size != commas + 1) return false;
    for (size_t a = 0; a < labels.size; ++a) {
      if (!is_name(labels.names[a], false) || labels.names[a].starts_with("__")) return false;
      if (m.type == MetricType::kHistogram && labels.names[a] == "le") return false;
      for (size_t b = 0; b < a; ++b) {
        if (labels.names[a] == labels.names[b]) return false;
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (kMetrics[j].name == m.name) return false;
    }
  }
  return true;
}
static_assert(well_formed(), "a metric's name, labels or help text breaks the format's rules");
}  // namespace metric_checks

// The entry named `name`, or null.
constexpr const MetricDef* find_metric(std::string_view name) {
  for (const MetricDef& m : kMetrics) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

}  // namespace cuwire::server
