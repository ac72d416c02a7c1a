#include "server/tenancy/sm_partition.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>

#include "server/backend/backend.h"
#include "server/tenancy/tenants.h"

namespace cuwire::server {

namespace {

// The GPU's SMs (*all) split into groups of `step` (*groups), by cuDevSmResourceSplitByCount.
CUresult split(Backend& api, unsigned step, CUdevResource* all,
               std::vector<CUdevResource>* groups) {
  unsigned n = 0;
  if (CUresult rc = api.cuDevSmResourceSplitByCount(nullptr, &n, all, nullptr, 0, step)) return rc;
  groups->assign(n, CUdevResource{});
  if (n > 0) {
    if (CUresult rc = api.cuDevSmResourceSplitByCount(groups->data(), &n, all, nullptr, 0, step))
      return rc;
    groups->resize(n);
  }
  return CUDA_SUCCESS;
}

}  // namespace

CUresult make_partition_desc(Backend& api, CUdevice device, const SmShare& share,
                             CUdevResourceDesc* out) {
  CUdevResource all{};
  if (CUresult rc = api.cuDeviceGetDevResource(device, &all, CU_DEV_RESOURCE_TYPE_SM)) return rc;
  std::vector<CUdevResource> groups;
  if (CUresult rc = split(api, share.step, &all, &groups)) return rc;
  if (share.count == 0 || share.first + share.count > groups.size())
    return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
  return api.cuDevResourceGenerateDesc(out, groups.data() + share.first, share.count);
}

Status SmPartitions::make(Backend& api, const std::vector<CUdevice>& gpus,
                          const std::vector<TenantSpec>& tenants, SmPartitions* out) {
  for (const TenantSpec& t : tenants) {
    if (t.sms <= 0) continue;
    if (Status s = out->add(api, gpus, t); !s) return s;
  }
  return Status::ok();
}

Status SmPartitions::add(Backend& api, const std::vector<CUdevice>& gpus, const TenantSpec& t) {
  if (t.sms <= 0) return Status::ok();
  std::lock_guard lock(mu_);
  std::vector<std::pair<int, SmShare>> made;
  for (CUdevice gpu : gpus) {
    if (!t.may_use(gpu)) continue;
    const std::string where = "GPU " + std::to_string(gpu) + ": ";
    auto failed = [&](const char* call, CUresult rc) {
      return Status::failed(where + "tenant " + t.name +
                            " has sms, an SM partition, which needs green contexts (a CUDA 12.4 "
                            "driver or later); the backend answers " +
                            call + " with error " + std::to_string(rc));
    };
    CUdevResource all{};
    if (CUresult rc = api.cuDeviceGetDevResource(gpu, &all, CU_DEV_RESOURCE_TYPE_SM)) {
      return failed("cuDeviceGetDevResource", rc);
    }
    const unsigned step = std::max({all.sm.minSmPartitionSize, all.sm.smCoscheduledAlignment, 1u});
    std::vector<CUdevResource> groups;
    if (CUresult rc = split(api, step, &all, &groups)) {
      return failed("cuDevSmResourceSplitByCount", rc);
    }
    // The groups other tenants hold here; the tenant takes the first run of free ones that
    // holds its SMs.
    std::vector<bool> taken(groups.size(), false);
    std::string asked;
    for (const auto& [key, share] : shares_) {
      if (key.second != gpu) continue;
      asked += (asked.empty() ? "" : ", ") + key.first + " " + std::to_string(share.sms);
      for (unsigned g = share.first; g < share.first + share.count && g < taken.size(); ++g)
        taken[g] = true;
    }
    asked += (asked.empty() ? "" : ", ") + t.name + " " + std::to_string(t.sms);
    size_t first = 0, next = 0;
    unsigned got = 0;
    while (got < static_cast<unsigned>(t.sms) && next < groups.size()) {
      if (taken[next]) {
        got = 0;
        first = ++next;
        continue;
      }
      got += groups[next++].sm.smCount;
    }
    if (got < static_cast<unsigned>(t.sms)) {
      return Status::invalid_argument(
          where + "the tenants' sms do not fit: the GPU has " + std::to_string(all.sm.smCount) +
          " SMs, partitioned in groups of " + std::to_string(step) + "; asked: " + asked);
    }
    SmShare share;
    share.sms = got;
    share.step = step;
    share.first = static_cast<unsigned>(first);
    share.count = static_cast<unsigned>(next - first);
    share.resource = std::make_shared<PartitionResource>();
    if (CUresult rc = api.cuDevResourceGenerateDesc(&share.desc, groups.data() + first,
                                                    static_cast<unsigned>(next - first))) {
      return failed("cuDevResourceGenerateDesc", rc);
    }
    if (got != static_cast<unsigned>(t.sms)) {
      spdlog::info("{}tenant {}: a partition of {} SMs ({} asked; partitions come in groups of {})",
                   where, t.name, got, t.sms, step);
    } else {
      spdlog::info("{}tenant {}: a partition of {} SMs of {}", where, t.name, got, all.sm.smCount);
    }
    made.emplace_back(gpu, std::move(share));
  }
  for (auto& [gpu, share] : made) shares_[{t.name, gpu}] = std::move(share);
  return Status::ok();
}

Status SmPartitions::adopt(Backend& api, const std::string& tenant, CUdevice device,
                           const SmShare& placed) {
  SmShare share = placed;
  share.resource = std::make_shared<PartitionResource>();
  if (CUresult rc = make_partition_desc(api, device, share, &share.desc)) {
    return Status::failed("GPU " + std::to_string(device) + ": tenant " + tenant +
                          "'s SM partition (groups " + std::to_string(share.first) + " to " +
                          std::to_string(share.first + share.count - 1) + " of " +
                          std::to_string(share.step) + " SMs) cannot be made here: error " +
                          std::to_string(rc));
  }
  std::lock_guard lock(mu_);
  shares_[{tenant, device}] = std::move(share);
  return Status::ok();
}

void SmPartitions::remove(Backend& api, const std::string& tenant) {
  std::vector<std::shared_ptr<PartitionResource>> gone;
  {
    std::lock_guard lock(mu_);
    for (auto it = shares_.begin(); it != shares_.end();) {
      if (it->first.first == tenant) {
        gone.push_back(it->second.resource);
        it = shares_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const auto& r : gone) {
    if (r) r->release(api);
  }
}

bool SmPartitions::empty() const {
  std::lock_guard lock(mu_);
  return shares_.empty();
}

CUresult PartitionResource::get(Backend& api, CUdevResourceDesc desc, CUdevice device,
                                CUdevResource* out) {
  std::lock_guard lock(mu_);
  if (!green_) {
    // A failure (memory for the green context, say) is the asker's; the next one tries again.
    CUgreenCtx green = nullptr;
    if (CUresult e = api.cuGreenCtxCreate(&green, desc, device, CU_GREEN_CTX_DEFAULT_STREAM)) {
      return e;
    }
    if (CUresult e = api.cuGreenCtxGetDevResource(green, &resource_, CU_DEV_RESOURCE_TYPE_SM)) {
      api.cuGreenCtxDestroy(green);
      return e;
    }
    green_ = green;
  }
  *out = resource_;
  return CUDA_SUCCESS;
}

void PartitionResource::release(Backend& api) {
  std::lock_guard lock(mu_);
  if (green_) api.cuGreenCtxDestroy(green_);
  green_ = nullptr;
}

std::map<int, SmShare> SmPartitions::of(const std::string& tenant) const {
  std::lock_guard lock(mu_);
  std::map<int, SmShare> mine;
  for (const auto& [key, share] : shares_) {
    if (key.first == tenant) mine[key.second] = share;
  }
  return mine;
}

}  // namespace cuwire::server
