// What cuwire-k8s-plugin may hand out and what it has handed out: the room on each GPU of the
// gpu-servers it serves, the grants made from it, and the device lists the kubelet sees.
//
// The kubelet counts an extended resource in devices: a pod asking for
// `cuwire.io/gpu-memory: 4096` is given 4096 device IDs. So memory is advertised one device per
// memory unit (1 MiB unless --memory-unit says otherwise), compute one device per percent, and
// whole cards one device per card. Which IDs the kubelet picks carries no meaning: the ledger
// places each grant itself, on the GPU with the most room (`place`), and advertises, for each
// resource, the IDs the kubelet already holds plus one free ID per unit of room, so the
// kubelet's free count is the room there is (docs/kubernetes.md).
//
// Not thread-safe: the plugin holds one mutex around it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace cuwire::k8s {

enum class Resource { kMemory, kCompute, kCard };
inline constexpr Resource kResources[] = {Resource::kMemory, Resource::kCompute, Resource::kCard};

// "cuwire.io/gpu-memory", "cuwire.io/gpu-compute", "cuwire.io/gpu".
const char* resource_name(Resource r);
// The socket name in the kubelet's device-plugin directory: "cuwire-gpu-memory.sock", ...
const char* socket_name(Resource r);
// "memory", "compute", "gpu": the grant's token file name in the container.
const char* short_name(Resource r);

struct LedgerOptions {
  uint64_t memory_unit_mib = 1;           // MiB per memory device
  uint64_t memory_granularity_mib = 128;  // grants are multiples of this (a multiple of the unit)
  int compute_granularity = 5;            // percent
};

// One GPU of one gpu-server, as last read from the server.
struct GpuRoom {
  int server = 0;  // index in the plugin's server list
  int index = 0;   // the server's GPU index
  std::string name, uuid;
  uint64_t memory_mib = 0;  // the GPU's memory less what tenants not made by the plugin cap
  int compute = 100;        // 100 less the compute caps of tenants not made by the plugin
  bool shared = false;      // tenants not made by the plugin may use it: never a whole card
  bool healthy = true;      // its server answered the last refresh
};

// One Allocate of one resource for one container.
struct Grant {
  std::string id;  // 16 hex digits: the token file's directory
  Resource resource = Resource::kMemory;
  std::vector<std::string> devices;  // the kubelet's device IDs
  uint64_t amount = 0;               // MiB, percent or cards
  int server = 0;
  std::vector<int> gpus;  // the server's GPU indices it was placed on
  std::string tenant;     // the tenant serving it on that server
  bool joined = false;    // its tenant serves the container's other grants too
};

class Ledger {
 public:
  explicit Ledger(LedgerOptions options) : options_(options) {}

  const LedgerOptions& options() const { return options_; }

  // Replaces what is known of `server`'s GPUs (a refresh); grants stay.
  void set_server(int server, std::vector<GpuRoom> gpus);
  // Marks every GPU of `server` unhealthy (unreachable) or healthy again.
  void set_health(int server, bool healthy);
  const std::vector<GpuRoom>& gpus() const { return gpus_; }

  // The amount `devices` asks for: MiB, percent, or cards. Refuses a count that is not a
  // multiple of the granularity, and IDs the ledger never advertised or that another grant
  // holds.
  bool amount_of(Resource r, const std::vector<std::string>& devices, uint64_t* amount,
                 std::string* error) const;

  // Where a grant of `amount` of `r` fits: the healthy GPU with the most room of that kind
  // (cards: the first free whole cards of one server). `extra` adds memory/compute to place
  // together (a container's grants joined into one tenant); `ignore` names grants whose room
  // counts as free (the ones being joined). Empty with *error set when nothing fits.
  bool place(Resource r, uint64_t amount, int* server, std::vector<int>* gpus, std::string* error,
             uint64_t extra_memory_mib = 0, int extra_compute = 0,
             const std::set<std::string>& ignore = {}, int only_server = -1) const;

  void add(const Grant& g);
  std::optional<Grant> remove(const std::string& id);
  const std::map<std::string, Grant>& grants() const { return grants_; }
  // The grant holding device `id` of resource `r`, or null.
  const Grant* holder(Resource r, const std::string& device) const;
  Grant* find(const std::string& id);

  // Free room of one GPU, after the grants on it (memory in MiB, compute in percent).
  uint64_t free_memory(const GpuRoom& g, const std::set<std::string>& ignore = {}) const;
  int free_compute(const GpuRoom& g, const std::set<std::string>& ignore = {}) const;
  bool free_card(const GpuRoom& g, const std::set<std::string>& ignore = {}) const;

  // The device IDs to advertise for `r`, with their health: the IDs grants hold (healthy when
  // their server is), then free IDs, one per unit of room on healthy GPUs.
  std::vector<std::pair<std::string, bool>> devices(Resource r) const;

 private:
  bool on(const Grant& g, const GpuRoom& gpu) const;

  LedgerOptions options_;
  std::vector<GpuRoom> gpus_;
  std::map<std::string, Grant> grants_;
};

}  // namespace cuwire::k8s
