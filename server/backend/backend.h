// The backend seam (Backend: the driver's functions and the optional faces, and the
// thread-affinity contract), and choosing and creating the backend a server runs on.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "generated/driver_api.h"
#include "protocol/size.h"
#include "protocol/status.h"

namespace cuwire::server {

struct SimOptions {
  int gpus = 1;
  uint64_t memory_bytes = uint64_t{16} << 30;  // per simulated device
  int sm_count = 40;                           // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
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

// The backend's optional faces: what a backend may offer beyond the driver's functions. Not
// part of cuda.h, so not in DriverApi; a backend answers Backend::device_output() and the rest
// with itself where it has the face, null where it has not.

// Text a backend's kernels wrote with device printf, waiting to reach the client. The sim
// backend has it; the cuda backend has not (the real driver prints device printf output on the
// server's own stdout: backend/cuda/stdout_capture.h).
class DeviceOutputSource {
 public:
  virtual ~DeviceOutputSource() = default;
  // Moves up to `max_bytes` of the output pending for `ctx` (oldest first, whole kernels'
  // output in completion order) to the end of *out; the rest stays pending. An unknown or
  // destroyed context has none. Thread-safe.
  virtual void take_device_output(CUcontext ctx, size_t max_bytes, std::string* out) = 0;
};

// A backend whose device memory is host memory the server can address (the sim).
class DeviceMemoryIo {
 public:
  virtual ~DeviceMemoryIo() = default;
  // Runs io(host address of [p, p + n)) on device memory of the current context, ordered as a
  // copy on `stream` would be: after the work queued there before it (the legacy stream's rules
  // for the null stream), before any work queued after it; returns when io has returned, with
  // io's result (or the error that kept it from running). A capturing stream refuses it
  // (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), as it refuses a copy from host memory.
  virtual CUresult device_memory_io(CUdeviceptr p, size_t n, CUstream stream,
                                    const std::function<CUresult(uint8_t*)>& io) = 0;
  // Whether [p, p + n) is one piece of host memory here (not, for one, a range across two
  // virtual-memory mappings): else the copy goes through staging buffers and the backend's
  // copies.
  virtual bool addressable_in_one_piece(CUdeviceptr p, size_t n) = 0;
  // Where [p, p + n) of a managed allocation is host memory here, with *keep holding it valid
  // however long the caller needs it (past a free); null when the range is not one managed
  // allocation's. Safe from any thread (host functions read it on a backend thread).
  virtual uint8_t* managed_host_view(CUdeviceptr p, size_t n, std::shared_ptr<void>* keep) = 0;
};

// A backend that keeps sessions apart inside itself (the sim, whose kernels reach memory by
// the contexts that own it): told which session each context and memory pool a session was
// given belongs to, so that what CUDA grants a whole process (a pool's access for a device)
// reaches that session's contexts only.
class SessionObjects {
 public:
  virtual ~SessionObjects() = default;
  // `session`: a tag no other live session has (never 0).
  virtual void set_context_session(CUcontext ctx, uint64_t session) = 0;
  virtual void set_pool_session(CUmemoryPool pool, uint64_t session) = 0;
  // Device memory the backend reserves for a context on its own (the device heap, when device
  // code first allocates from it) is first asked of `reserve(device, bytes, false)`, which may
  // refuse it (false: the reservation fails as on a full device), and given back with
  // reserve(device, bytes, true). Called from any of the backend's threads.
  using Reserve = std::function<bool(int device, uint64_t bytes, bool give_back)>;
  virtual void set_context_reservations(CUcontext ctx, Reserve reserve) = 0;
};

// Kernel parameters as a client sent them: `pointers` are the kernelParams entries (one per
// parameter) and every parameter lies inside `bytes`.
struct SentKernelParams {
  std::span<void* const> pointers;
  std::span<const uint8_t> bytes;
};

// Which driver function a client's launch is: cuLaunchKernel, cuLaunchCooperativeKernel or
// cuLaunchKernelEx.
enum class LaunchKind : uint8_t { kPlain, kCooperative, kEx };

// The seam between the server and a backend: the driver's functions (DriverApi, generated from
// the manifest with cuda.h's signatures) and the optional faces above. Backends: the cuda
// backend (backend/cuda: the real driver, or cuwire's own client library in a relay) and the
// sim (backend/sim). The server holds every backend as a Backend.
//
// Thread affinity, a contract the whole server relies on: a session calls its backend from one
// OS thread, its own, for its whole life (server/session/call_executor.h). The current context
// is per thread, as in CUDA: a context made current by a session's call stays current on that
// thread until the session's next call changes it, and a call that needs one runs in it. Many
// sessions share one backend, so implementations must be thread-safe. One call comes from
// elsewhere: the compute scheduler's poll thread (server/tenancy/compute_scheduler.h) asks
// cuEventQuery about sessions' marker events, which, as in CUDA, needs no current context.
class Backend : public DriverApi {
 public:
  virtual DeviceOutputSource* device_output() { return nullptr; }
  virtual DeviceMemoryIo* device_memory_io() { return nullptr; }
  virtual SessionObjects* session_objects() { return nullptr; }

  // A launch whose kernel parameters a client sent (server/calls/launches.cc): `config` holds
  // the grid, block, shared memory and stream (and, for kEx, the attributes). Driver launch
  // functions take kernelParams without a count; a backend that reads the parameters itself
  // (sim) overrides this to check the kernel's layout against `params`, so a launch with fewer
  // parameter bytes than the kernel takes is refused instead of read out of bounds. The
  // default calls the driver function `kind` names.
  virtual CUresult launch_sent_kernel(LaunchKind kind, const CUlaunchConfig& config, CUfunction f,
                                      SentKernelParams params);
};

class UpstreamLink;

struct BackendChoice {
  std::unique_ptr<Backend> api;
  std::string name;  // "sim" or "cuda"
  std::string why;   // for the start-up log: why auto chose it
  // Where `auto` found no usable driver and chose the sim: why (empty otherwise). The server
  // warns of it and reports it with its GPUs, since programs then run on no real GPU.
  std::string fallback;
  // A relay (the cuda backend over cuwire's client library): its link to the upstream server.
  std::shared_ptr<UpstreamLink> upstream;
};

// name: "sim", "cuda" or "auto" (cuda when a driver with at least one GPU loads, else sim).
// driver: the driver library the cuda backend loads (empty: the system's libcuda.so.1); when it
// is cuwire's own client library the server relays to the gpu-server it points at.
Status make_backend(const std::string& name, const SimOptions& sim, BackendChoice* out,
                    const std::string& driver = "");

// Sizes: protocol/size.h.
using cuwire::parse_size;

}  // namespace cuwire::server
