// Placement (design decision 9): which GPU a new session runs on.
//
// Each session is placed on one GPU, which it sees as its device 0; the other GPUs its tenant
// may use follow as devices 1, 2, ... in the server's order, so multi-GPU programs still find
// them (SessionContext::set_devices translates every device ordinal). The GPU is chosen among
// those that can hold the session:
//   - the tenant may use it (its `gpus`, all when none are named);
//   - it has fewer sessions than max_sessions_per_gpu;
//   - a tenant with a compute cap, new on the GPU, fits beside the caps of the tenants already
//     there (at most 100 percent together);
//   - a tenant with a memory cap, new on the GPU, fits its cap in what the GPU has left: its
//     memory less the caps of the capped tenants there and the use of the uncapped ones.
// `spread` takes the one with the most memory left (then the fewest sessions), `binpack` the
// one with the least that can still hold it; ties go to the lower ordinal. A session no GPU can
// hold is refused, with what each GPU lacks.
//
// Thread-safety: all functions are safe from any thread.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace cuwire::server {

class Tenant;

enum class PlacementPolicy { kSpread, kBinpack };
// "spread" / "binpack"; false for anything else.
bool parse_placement(const std::string& text, PlacementPolicy* out);
// The policy's name as parse_placement reads it.
const char* placement_name(PlacementPolicy policy);

struct GpuInfo {
  CUdevice device = 0;        // the backend's ordinal
  uint64_t memory_total = 0;  // bytes
  // As the backend names the GPU, for the admin API and NVML; empty where it cannot tell.
  std::string name;
  std::string uuid;                // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  std::string pci_bus_id;          // "00000000:01:00.0"
  int cc_major = 0, cc_minor = 0;  // compute capability
};

class GpuPool {
 public:
  // max_sessions_per_gpu: 0 for no bound.
  GpuPool(std::vector<GpuInfo> gpus, PlacementPolicy policy, int max_sessions_per_gpu);

  // A placed session's hold on its GPU, given back when destroyed.
  class Lease {
   public:
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    CUdevice device() const { return device_; }
    // The session's devices: its GPU first, then the tenant's others in order.
    const std::vector<CUdevice>& devices() const { return devices_; }

   private:
    friend class GpuPool;
    Lease(GpuPool& pool, Tenant* tenant, size_t gpu, std::vector<CUdevice> devices);
    GpuPool& pool_;
    Tenant* tenant_;
    size_t gpu_;
    CUdevice device_;
    std::vector<CUdevice> devices_;
  };

  // Places a new session of `tenant`; null, with *why saying what each GPU lacks, when no GPU
  // can hold it.
  std::unique_ptr<Lease> place(Tenant& tenant, std::string* why);

  // What a GPU has left for a new session of `tenant` (a client choosing among servers asks).
  struct Room {
    bool fits = false;
    CUdevice device = 0;
    uint64_t memory_left = 0;  // bytes left on the GPU placement would choose
    int compute_left = 0;      // percent not committed to capped tenants there
    int sessions = 0;          // sessions there now
    std::string why;           // when it does not fit
    PlacementPolicy policy = PlacementPolicy::kSpread;  // what placement applies to the tenant
  };
  Room room_for(const Tenant& tenant) const;

  size_t size() const { return gpus_.size(); }
  // Each GPU with its sessions now (a snapshot), in the pool's order.
  struct GpuState {
    GpuInfo info;
    int sessions = 0;
    std::map<std::string, int> tenants;  // sessions placed here, by tenant name
  };
  std::vector<GpuState> state() const;

 private:
  struct Gpu {
    GpuInfo info;
    int sessions = 0;
    std::map<const Tenant*, int> tenants;  // sessions per tenant placed here
  };
  // The tenant's own placement, else the server's.
  PlacementPolicy policy_for(const Tenant& t) const;
  // Whether gpu `g` can hold a new session of `t`; otherwise *lack says why. Needs mu_.
  bool holds(size_t g, const Tenant& t, uint64_t* memory_left, std::string* lack) const;
  // The GPU the policy picks for `t`, or -1 (with *why). Needs mu_.
  int choose(const Tenant& t, uint64_t* memory_left, std::string* why) const;
  void release(size_t gpu, Tenant* t);

  const PlacementPolicy policy_;
  const int max_sessions_per_gpu_;
  mutable std::mutex mu_;
  std::vector<Gpu> gpus_;  // guarded by mu_
};

}  // namespace cuwire::server
