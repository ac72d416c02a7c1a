// Choosing and creating the backend a server runs on.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "generated/driver_api.h"
#include "protocol/status.h"

namespace cuwire::server {

struct SimOptions {
  int gpus = 1;
  uint64_t memory_bytes = uint64_t{16} << 30;  // per simulated device
  int sm_count = 40;                            // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
  // A launch fails with CUDA_ERROR_LAUNCH_TIMEOUT after this many thread-instructions, so a
  // kernel that never finishes cannot hold a stream (and its session) for long; 0 = no limit.
  // The interpreter runs some 400-900 million thread-instructions a second on two cores, so the
  // default bounds a runaway kernel to about 20-40 s of interpretation there (less on a host
  // with more cores) while NVIDIA's heavier samples (Monte Carlo, mergeSort, warp-aggregated
  // atomics), which run one kernel of several billion, finish (gpu-server
  // --sim-instruction-budget).
  uint64_t instruction_budget = uint64_t{1} << 34;
  // cuStreamCreate fails with CUDA_ERROR_OUT_OF_MEMORY beyond this many streams in one context
  // (each stream gets a worker thread when first used).
  int max_streams_per_context = 1024;
  // Operations queued on one stream and not yet finished; a submitter beyond it waits until
  // the stream drains below it, so a fire-and-forget flood cannot grow memory without bound.
  int max_queued_per_stream = 4096;
  // Host memory the interpreter state of all running launches may take together (registers,
  // local and shared memory, call and alloca stacks: up to ~0.9 GiB for one 1024-thread block).
  // A launch waits on its stream until there is room; one that alone needs more is refused
  // with CUDA_ERROR_OUT_OF_MEMORY. 0 = no limit.
  uint64_t launch_memory_bytes = uint64_t{4} << 30;
  // Threads that run the blocks of one launch, per simulated device (the launching stream's
  // thread among them): gpu-server --sim-threads, default the host's core count.
  int threads = 1;
  // The device profile (server/backend/sim/sim_profile.h): what compute capability the simulated
  // devices report, with the limits that go with it (gpu-server --sim-profile).
  std::string profile = "sm_75";
};

// The kernel parameters of the launch the calling thread is executing, as a client sent them:
// `pointers` are the kernelParams entries and every parameter lies inside `bytes`. Driver
// launch functions take kernelParams without a count; a backend that reads the parameters
// itself (sim) checks the kernel's layout against the scope, when one is set, so a launch
// with fewer parameter bytes than the kernel takes is refused instead of read out of bounds.
class LaunchParamsScope {
 public:
  LaunchParamsScope(std::span<void* const> pointers, std::span<const uint8_t> bytes);
  ~LaunchParamsScope();
  LaunchParamsScope(const LaunchParamsScope&) = delete;
  LaunchParamsScope& operator=(const LaunchParamsScope&) = delete;

  // The current scope's values when kernel_params is the array it names; false otherwise.
  static bool find(void* const* kernel_params, std::span<void* const>* pointers,
                   std::span<const uint8_t>* bytes);

 private:
  const LaunchParamsScope* saved_;
  std::span<void* const> pointers_;
  std::span<const uint8_t> bytes_;
};

class UpstreamLink;

struct BackendChoice {
  std::unique_ptr<DriverApi> api;
  std::string name;  // "sim" or "cuda"
  std::string why;   // for the start-up log: why auto chose it
  // A relay (the cuda backend over cuwire's client library): its link to the upstream server.
  std::shared_ptr<UpstreamLink> upstream;
};

// name: "sim", "cuda" or "auto" (cuda when a driver with at least one GPU loads, else sim).
// driver: the driver library the cuda backend loads (empty: the system's libcuda.so.1); when it
// is cuwire's own client library the server relays to the gpu-server it points at.
Status make_backend(const std::string& name, const SimOptions& sim, BackendChoice* out,
                    const std::string& driver = "");

// Sizes like "8GiB", "8192MiB", "512MB", "1048576" (bytes).
Status parse_size(const std::string& text, uint64_t* out);

}  // namespace cuwire::server
