// SM partitions (design decision 9, compute caps): a tenant configured with `sms = N` gets N
// streaming multiprocessors of each GPU it uses, apart from other partitioned tenants'. The
// server splits the GPU's SMs once at start (cuDeviceGetDevResource,
// cuDevSmResourceSplitByCount) and gives each such tenant a disjoint set of the split's groups
// as a resource descriptor; every context a session of the tenant then makes on that GPU is a
// green context of that descriptor (SessionContext::make_context), and the tenant sees the
// partition's SM count as the device's (CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
// cuDeviceGetDevResource). Tenants without `sms` use every SM, the partitions' included:
// partitions keep partitioned tenants apart. The same code runs on the cuda backend (green
// contexts need a CUDA 12.4 driver) and the sim, which implements the green-context calls.
// A tenant added at run time (cuwire tenant add --sms) takes the first free groups that hold
// its SMs; a removed tenant's groups are free again once its sessions have ended.
//
// Thread-safety: all functions are safe from any thread; a session copies its tenant's shares
// (of) when it starts.
#pragma once

#include <cuda.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "protocol/status.h"

namespace cuwire::server {

class Backend;

struct TenantSpec;

// The backend's SM resource of a partition, which the tenant sees as its device's
// (cuDeviceGetDevResource) and may split further. CUDA splits only a device's or a context's
// resource, so the first asker makes a green context of the partition, kept while the backend
// lives, and asks it.
class PartitionResource {
 public:
  CUresult get(Backend& api, CUdevResourceDesc desc, CUdevice device, CUdevResource* out);
  // The partition is given up (its tenant removed, its sessions ended): the green context made
  // to ask it goes.
  void release(Backend& api);

 private:
  std::mutex mu_;
  CUgreenCtx green_ = nullptr;  // guarded by mu_; made by the first get
  CUdevResource resource_{};    // guarded by mu_
};

// One tenant's partition of one GPU.
struct SmShare {
  CUdevResourceDesc desc = nullptr;  // the backend's, for cuGreenCtxCreate
  unsigned sms = 0;                  // SMs it holds (the tenant's `sms`, rounded up to groups)
  std::shared_ptr<PartitionResource> resource;
  // Where it lies in the GPU's split into groups of `step` SMs: groups first .. first+count-1,
  // for a session that makes its own descriptor (make_partition_desc).
  unsigned step = 0, first = 0, count = 0;
};

// `share`'s descriptor on `device` made anew through `api`, splitting the GPU as
// SmPartitions::make did: for a relay's session, whose objects live in an upstream session of
// its own where the server's descriptor is unknown.
CUresult make_partition_desc(Backend& api, CUdevice device, const SmShare& share,
                             CUdevResourceDesc* out);

class SmPartitions {
 public:
  // Partitions each of `gpus` among the tenants with `sms` that may use it. Refused, naming the
  // GPU and the tenants, when the backend has no green contexts or the SMs asked for do not fit.
  static Status make(Backend& api, const std::vector<CUdevice>& gpus,
                     const std::vector<TenantSpec>& tenants, SmPartitions* out);
  // A partition for `tenant` (its sms > 0) on each of `gpus` it may use, in the first groups
  // no other tenant holds: all of them, or none and why (the GPU, its free SMs, the holders).
  Status add(Backend& api, const std::vector<CUdevice>& gpus, const TenantSpec& tenant);
  // The tenant's partition of `device`, placed where another process's split put it
  // (share.step, first, count, sms): a worker's copy of the front's (worker_main.h).
  Status adopt(Backend& api, const std::string& tenant, CUdevice device, const SmShare& share);
  // The tenant's partitions are given up, their groups free for others. Its sessions have
  // ended (a session still holding a copy would keep SMs that are no longer its own).
  void remove(Backend& api, const std::string& tenant);
  bool empty() const;
  // The tenant's partition of each GPU it has one on, by backend device.
  std::map<int, SmShare> of(const std::string& tenant) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, SmShare> shares_;  // guarded by mu_: (tenant, device)
};

}  // namespace cuwire::server
