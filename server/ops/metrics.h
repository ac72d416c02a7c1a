// The server's figures in the Prometheus text exposition format (version 0.0.4), for
// http://ADDR/metrics (metrics_http.h). The families, their names, types, labels and help text
// are the table in metric_names.h, in its order; labels take only values the server chose: tenant
// names from the configuration, call names from the manifest (an unknown call id is "unknown"),
// error names from cuda.h, GPU ordinals. Configured tenants that are idle report zeros.
//
// Thread-safety: render_metrics may run on any thread while sessions run.
#pragma once

#include <map>
#include <memory>
#include <string>

#include <cuda.h>

namespace cuwire::server {

class TenantRegistry;
class GpuPool;
class ComputeScheduler;

struct MetricsSources {
  const TenantRegistry* tenants = nullptr;
  const GpuPool* gpus = nullptr;  // null: no GPU figures
  // GPUs with a compute scheduler, whose busy time is measured (compute_scheduler.h).
  const std::map<CUdevice, std::unique_ptr<ComputeScheduler>>* compute = nullptr;
  std::string backend;            // "sim", "cuda", "relay"
  bool backend_fallback = false;  // --backend auto fell back to the sim
};

std::string render_metrics(const MetricsSources& sources);

// "0.1.0", and the CUDA version the driver API was built against ("13.0").
const char* cuwire_version();
std::string cuda_version();

}  // namespace cuwire::server
