#include "server/backend/backend.h"

#include <dlfcn.h>

#include <cctype>
#include <charconv>
#include <cstdlib>

#include "server/backend/cuda/cuda_driver_api.h"
#include "server/backend/relay/upstream.h"
#include "server/backend/sim/sim_backend.h"

namespace cuwire::server {
namespace {

// The oldest driver the cuda backend works with: launches need each kernel's parameter layout
// (cuFuncGetParamInfo, cuKernelGetParamInfo), which CUDA 12.4 introduced.
constexpr int kMinDriverVersion = 12040;

std::string cuda_version_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

// "CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)", as the driver `h` names it.
std::string error_text(void* h, CUresult rc) {
  using Describe = CUresult (*)(CUresult, const char**);
  auto get_name = reinterpret_cast<Describe>(dlsym(h, "cuGetErrorName"));
  auto get_string = reinterpret_cast<Describe>(dlsym(h, "cuGetErrorString"));
  const char* name = nullptr;
  const char* text = nullptr;
  if (!get_name || get_name(rc, &name) != CUDA_SUCCESS || !name) {
    return "CUresult " + std::to_string(static_cast<int>(rc));
  }
  std::string s = name;
  if (get_string && get_string(rc, &text) == CUDA_SUCCESS && text) {
    s += std::string(" (") + text + ")";
  }
  return s;
}

// Loads the driver library for the cuda backend. By default that is the system's
// libcuda.so.1; cuwire's own client library has the same name, and finding it there would make
// the server a client of itself by accident, so it is refused. Named with --driver, cuwire's
// library is what the operator asked for: the server relays its clients' calls to the server
// that library points at (CUWIRE_SERVER), a relay in front of another gpu-server.
// Every way it can fail is one line that says what to do.
Status load_cuda(const std::string& driver, BackendChoice* out) {
  const std::string path = driver.empty() ? "libcuda.so.1" : driver;
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    return Status::failed("cannot load the driver library " + path + ": " + dlerror() +
                          (driver.empty() ? " (is the NVIDIA driver installed? --driver names "
                                            "another library)"
                                          : ""));
  }
  const bool relay = dlsym(h, "cuwire_client_library") != nullptr;
  if (relay && driver.empty()) {
    dlclose(h);
    return Status::failed(
        "libcuda.so.1 on the library path is cuwire's client library, not the "
        "NVIDIA driver (name it with --driver to relay to another gpu-server)");
  }
  if (!dlsym(h, "cuInit") || !dlsym(h, "cuDriverGetVersion")) {
    dlclose(h);
    return Status::failed(path + " is not a CUDA driver library (it has no cuInit)");
  }
  const std::string what =
      relay ? "the upstream gpu-server (through " + path + ")" : "the NVIDIA driver (" + path + ")";
  int version = 0;
  reinterpret_cast<CUresult (*)(int*)>(dlsym(h, "cuDriverGetVersion"))(&version);
  if (version < kMinDriverVersion || !dlsym(h, "cuFuncGetParamInfo") ||
      !dlsym(h, "cuKernelGetParamInfo")) {
    return Status::failed(what + " supports CUDA " + cuda_version_text(version) +
                          "; the cuda backend needs a driver for CUDA " +
                          cuda_version_text(kMinDriverVersion) +
                          " or newer (kernel parameter layouts: cuFuncGetParamInfo)");
  }
  auto api = make_cuda_backend(h);
  CUresult rc = api->cuInit(0);
  if (rc != CUDA_SUCCESS) {
    return Status::failed(what + " reports no usable GPU: cuInit: " + error_text(h, rc));
  }
  int count = 0;
  rc = api->cuDeviceGetCount(&count);
  if (rc != CUDA_SUCCESS) {
    return Status::failed(what + " reports no usable GPU: cuDeviceGetCount: " + error_text(h, rc));
  }
  if (count == 0) return Status::failed(what + " reports no GPU (cuDeviceGetCount: 0)");
  if (relay) {
    auto status = reinterpret_cast<UpstreamLink::StatusFn>(dlsym(h, "cuwire_client_status"));
    auto reset = reinterpret_cast<UpstreamLink::ResetFn>(dlsym(h, "cuwire_client_reset"));
    auto answer_every_call =
        reinterpret_cast<void (*)(int)>(dlsym(h, "cuwire_client_answer_every_call"));
    if (!status || !reset || !answer_every_call) {
      return Status::failed(path +
                            " is an older cuwire client library, without the functions "
                            "a relay needs (cuwire_client_status, cuwire_client_reset, "
                            "cuwire_client_answer_every_call)");
    }
    // An upstream session per relay session, where the library can make them.
    UpstreamLink::SessionFns sessions;
    sessions.open = reinterpret_cast<void* (*)()>(dlsym(h, "cuwire_client_session_open"));
    sessions.bind = reinterpret_cast<void (*)(void*)>(dlsym(h, "cuwire_client_session_bind"));
    sessions.close = reinterpret_cast<void (*)(void*)>(dlsym(h, "cuwire_client_session_close"));
    sessions.answers = reinterpret_cast<int (*)()>(dlsym(h, "cuwire_client_upstream_answers"));
    if (!sessions.open || !sessions.bind || !sessions.close || !sessions.answers) sessions = {};
    // Sessions that share the library's one upstream session would see each other's deferred
    // errors (whichever synchronised next): there each call waits for its answer, and the relay
    // defers it for the session that made it. With an upstream session each, the upstream keeps
    // a session's deferred errors for that session, and fire-and-forget stays so on both hops.
    answer_every_call(sessions.open ? 0 : 1);
    const char* upstream = std::getenv("CUWIRE_SERVER");
    out->upstream = std::make_shared<UpstreamLink>(
        *api, status, reset, upstream ? upstream : "(CUWIRE_SERVER unset)", sessions);
  }
  out->api = std::move(api);
  out->name = "cuda";
  out->why = std::to_string(count) + " GPU(s), CUDA " + cuda_version_text(version) +
             (relay ? ", relaying through cuwire's client library " + path : " driver " + path);
  return Status::ok();
}

}  // namespace

Status make_backend(const std::string& name, const SimOptions& sim, BackendChoice* out,
                    const std::string& driver) {
  if (name == "cuda") return load_cuda(driver, out);
  if (name == "sim" || name == "auto") {
    std::string why = "requested";
    if (name == "auto") {
      Status s = load_cuda(driver, out);
      if (s) return s;
      why = "auto: " + s.message();
      out->fallback = s.message();
    }
    if (sim.gpus < 1 || sim.gpus > 64) {
      return Status::invalid_argument("--sim-gpus must be 1..64");
    }
    out->api = make_sim_backend(sim);
    // The server process initialises its driver once, as any CUDA process does; clients'
    // cuInit calls then only check that it succeeded.
    if (CUresult rc = out->api->cuInit(0); rc != CUDA_SUCCESS) {
      return Status::failed("sim backend failed to initialise (CUresult " + std::to_string(rc) +
                            ")");
    }
    out->name = "sim";
    out->why = why;
    return Status::ok();
  }
  return Status::invalid_argument("unknown backend '" + name + "' (expected auto, sim or cuda)");
}

CUresult Backend::launch_sent_kernel(LaunchKind kind, const CUlaunchConfig& c, CUfunction f,
                                     SentKernelParams params) {
  void** kp = params.pointers.empty() ? nullptr : const_cast<void**>(params.pointers.data());
  switch (kind) {
    case LaunchKind::kPlain:
      return cuLaunchKernel(f, c.gridDimX, c.gridDimY, c.gridDimZ, c.blockDimX, c.blockDimY,
                            c.blockDimZ, c.sharedMemBytes, c.hStream, kp, nullptr);
    case LaunchKind::kCooperative:
      return cuLaunchCooperativeKernel(f, c.gridDimX, c.gridDimY, c.gridDimZ, c.blockDimX,
                                       c.blockDimY, c.blockDimZ, c.sharedMemBytes, c.hStream, kp);
    case LaunchKind::kEx:
      return cuLaunchKernelEx(&c, f, kp, nullptr);
  }
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace cuwire::server
