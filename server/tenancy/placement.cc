#include "server/tenancy/placement.h"

#include <fmt/format.h>

#include <algorithm>

#include "server/tenancy/tenants.h"

namespace cuwire::server {
namespace {

std::string mib(uint64_t bytes) { return fmt::format("{} MiB", bytes >> 20); }

}  // namespace

bool parse_placement(const std::string& text, PlacementPolicy* out) {
  if (text == "spread") {
    *out = PlacementPolicy::kSpread;
  } else if (text == "binpack") {
    *out = PlacementPolicy::kBinpack;
  } else {
    return false;
  }
  return true;
}

const char* placement_name(PlacementPolicy policy) {
  return policy == PlacementPolicy::kBinpack ? "binpack" : "spread";
}

GpuPool::GpuPool(std::vector<GpuInfo> gpus, PlacementPolicy policy, int max_sessions_per_gpu)
    : policy_(policy), max_sessions_per_gpu_(max_sessions_per_gpu) {
  for (const GpuInfo& g : gpus) {
    Gpu gpu;
    gpu.info = g;
    gpus_.push_back(std::move(gpu));
  }
}

GpuPool::Lease::Lease(GpuPool& pool, Tenant* tenant, size_t gpu, std::vector<CUdevice> devices)
    : pool_(pool), tenant_(tenant), gpu_(gpu), device_(devices[0]), devices_(std::move(devices)) {}

GpuPool::Lease::~Lease() { pool_.release(gpu_, tenant_); }

bool GpuPool::holds(size_t g, const Tenant& t, uint64_t* memory_left, std::string* lack) const {
  const Gpu& gpu = gpus_[g];
  const TenantSpec& spec = t.spec();
  // Memory the tenants already here hold back: a capped tenant its cap, the others their use.
  uint64_t held = 0;
  int committed = 0;
  for (const auto& [other, n] : gpu.tenants) {
    const uint64_t mine = other->memory_used(gpu.info.device);
    held +=
        other->memory_capped() ? std::max(other->memory_cap(gpu.info.memory_total), mine) : mine;
    committed += other->compute();
  }
  *memory_left = gpu.info.memory_total - std::min(held, gpu.info.memory_total);
  const bool here = gpu.tenants.count(&t) > 0;
  if (!spec.may_use(gpu.info.device)) {
    *lack = "not among the tenant's gpus";
  } else if (max_sessions_per_gpu_ && gpu.sessions >= max_sessions_per_gpu_) {
    *lack = fmt::format("{} sessions, the most per GPU (max_sessions_per_gpu)", gpu.sessions);
  } else if (const int compute = t.compute(); !here && compute && committed + compute > 100) {
    *lack = fmt::format("compute: {}% committed to other tenants, {}% needed", committed, compute);
  } else if (!here && t.memory_capped() && t.memory_cap(gpu.info.memory_total) > *memory_left) {
    *lack = fmt::format("memory: {} left, {} needed", mib(*memory_left),
                        mib(t.memory_cap(gpu.info.memory_total)));
  } else {
    return true;
  }
  return false;
}

PlacementPolicy GpuPool::policy_for(const Tenant& t) const {
  PlacementPolicy policy = policy_;
  if (!t.spec().placement.empty()) parse_placement(t.spec().placement, &policy);
  return policy;
}

int GpuPool::choose(const Tenant& t, uint64_t* memory_left, std::string* why) const {
  const PlacementPolicy policy = policy_for(t);
  int best = -1;
  uint64_t best_left = 0;
  std::string lacks;
  for (size_t g = 0; g < gpus_.size(); ++g) {
    uint64_t left = 0;
    std::string lack;
    if (!holds(g, t, &left, &lack)) {
      lacks += fmt::format("{}GPU {}: {}", lacks.empty() ? "" : "; ", gpus_[g].info.device, lack);
      continue;
    }
    bool better = best < 0;
    if (!better && policy == PlacementPolicy::kSpread) {
      better = left > best_left || (left == best_left && gpus_[g].sessions < gpus_[best].sessions);
    } else if (!better) {
      better = left < best_left;
    }
    if (better) {
      best = static_cast<int>(g);
      best_left = left;
    }
  }
  *memory_left = best_left;
  if (best < 0) {
    *why = gpus_.empty() ? "the server has no GPU"
                         : "no GPU can hold a session of tenant " + t.name() + " (" + lacks + ")";
  }
  return best;
}

std::unique_ptr<GpuPool::Lease> GpuPool::place(Tenant& tenant, std::string* why) {
  std::lock_guard lock(mu_);
  uint64_t left = 0;
  const int g = choose(tenant, &left, why);
  if (g < 0) return nullptr;
  Gpu& gpu = gpus_[g];
  ++gpu.sessions;
  ++gpu.tenants[&tenant];
  std::vector<CUdevice> devices{gpu.info.device};
  for (const Gpu& other : gpus_) {
    if (other.info.device != gpu.info.device && tenant.spec().may_use(other.info.device)) {
      devices.push_back(other.info.device);
    }
  }
  return std::unique_ptr<Lease>(new Lease(*this, &tenant, g, std::move(devices)));
}

void GpuPool::release(size_t g, Tenant* t) {
  std::lock_guard lock(mu_);
  Gpu& gpu = gpus_[g];
  --gpu.sessions;
  if (auto it = gpu.tenants.find(t); it != gpu.tenants.end() && --it->second == 0) {
    gpu.tenants.erase(it);
  }
}

GpuPool::Room GpuPool::room_for(const Tenant& tenant) const {
  std::lock_guard lock(mu_);
  Room r;
  r.policy = policy_for(tenant);
  const int g = choose(tenant, &r.memory_left, &r.why);
  r.fits = g >= 0;
  if (!r.fits) return r;
  const Gpu& gpu = gpus_[g];
  r.device = gpu.info.device;
  r.sessions = gpu.sessions;
  r.compute_left = 100;
  for (const auto& [other, n] : gpu.tenants) r.compute_left -= other->compute();
  return r;
}

std::vector<GpuPool::GpuState> GpuPool::state() const {
  std::lock_guard lock(mu_);
  std::vector<GpuState> out;
  for (const Gpu& g : gpus_) {
    GpuState st{g.info, g.sessions, {}};
    for (const auto& [t, n] : g.tenants) {
      if (n > 0) st.tenants[t->name()] += n;
    }
    out.push_back(std::move(st));
  }
  return out;
}

}  // namespace cuwire::server
