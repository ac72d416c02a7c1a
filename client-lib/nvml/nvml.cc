// cuwire's libnvidia-ml.so.1: the NVML calls monitoring tools and frameworks make, answered
// from gpu-server's view of the caller's tenant (server/ops/admin.h: `view`) over a control
// connection, so no session is made, counted or placed for it.
//
// What a tenant sees: the GPUs it may use, in the server's order; its memory cap as each GPU's
// total and its own sessions' use as the used figure; its busy share of the GPU as the GPU
// utilization; its own sessions as the running processes (their pids are on the client hosts).
// Static facts (names, UUIDs, PCI bus ids, compute capability) come once with nvmlInit;
// memory, utilization and processes are asked anew each time. What a remote, shared GPU does
// not expose (temperatures, clocks, power, fans) is NVML_ERROR_NOT_SUPPORTED.
//
// Configuration is the client library's: CUWIRE_SERVER (with several addresses, the first),
// the token (CUWIRE_TOKEN, CUWIRE_TOKEN_FILE or CUWIRE_TOKEN_DIR), CUWIRE_CA.
//
// Thread-safety: every entry point takes one lock, as NVML is callable from any thread.
#include <pthread.h>
#include <strings.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "client-lib/core/control_client.h"
#include "client-lib/core/token.h"
#include "client-lib/nvml/nvml_abi.h"
#include "protocol/address.h"

#define NVML_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using json = nlohmann::json;
using cuwire::client::ControlClient;
using cuwire::client::ControlOptions;

struct nvmlDeviceData {
  unsigned index = 0;
  std::string name, uuid, pci_bus_id;
  int cc_major = 0, cc_minor = 0;
};

}  // namespace

// The opaque handle NVML hands out points at one of these.
struct nvmlDevice_st {
  nvmlDeviceData d;
};

namespace {

struct State {
  std::mutex mu;
  int inits = 0;  // nvmlInit calls not yet matched by nvmlShutdown
  std::unique_ptr<ControlClient> client;
  ControlOptions options;
  std::string driver_version;
  int cuda_version = 0;
  // Handles stay valid for the process' life (a caller may keep one past nvmlShutdown).
  std::vector<std::unique_ptr<nvmlDevice_st>> devices;
  unsigned count = 0;  // devices of the current init
};

State& state() {
  // Never destroyed: NVML may be called from atexit handlers. A child of fork() does not share
  // the parent's connection: it makes its own on its next ask (its copy of the parent's is
  // dropped without a word, which would be the parent's).
  static State* s = [] {
    static State* made = new State();
    pthread_atfork(nullptr, nullptr, [] {
      new (&made->mu) std::mutex();  // a parent's thread may have held it at the fork
      (void)made->client.release();  // leaked: its socket stays the parent's
    });
    return made;
  }();
  return *s;
}

void say(const std::string& line) { std::fprintf(stderr, "cuwire nvml: %s\n", line.c_str()); }

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The tenant's view now; false (after one line on stderr) when the server does not answer.
bool ask_view(State& s, json* out) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!s.client) {
      if (cuwire::Status st = ControlClient::connect(s.options, &s.client); !st) {
        say(st.message());
        return false;
      }
    }
    std::string body;
    cuwire::Status st = s.client->request("view", "", &body);
    if (st) {
      *out = json::parse(body, nullptr, false);
      if (out->is_object()) return true;
      say("gpu-server answered with something that is not a view");
      return false;
    }
    s.client.reset();  // a dropped connection is tried once more, afresh
    if (st.code() != cuwire::Status::Code::kDisconnected) {
      say(st.message());
      return false;
    }
  }
  return false;
}

// The device's entry in a fresh view (matched by UUID, else by index).
bool device_view(State& s, const nvmlDevice_st* dev, json* out) {
  json v;
  if (!ask_view(s, &v)) return false;
  const auto gpus = v.find("gpus");
  if (gpus == v.end() || !gpus->is_array()) return false;
  for (const json& g : *gpus) {
    if (!g.is_object()) continue;
    const bool same = dev->d.uuid.empty() ? g.contains("index") && g["index"] == dev->d.index
                                          : g.contains("uuid") && g["uuid"] == dev->d.uuid;
    if (same) {
      *out = g;
      return true;
    }
  }
  return false;
}

nvmlReturn_t init_locked(State& s) {
  if (s.inits > 0) {
    ++s.inits;
    return NVML_SUCCESS;
  }
  s.options = ControlOptions{};
  const cuwire::client::Credentials c = cuwire::client::credentials_from_environment();
  s.options.server = !c.server.empty()              ? c.server
                     : env("CUWIRE_SERVER").empty() ? cuwire::kDefaultAddress
                                                    : env("CUWIRE_SERVER");
  s.options.token = c.token;
  s.options.ca_file = env("CUWIRE_CA");
  s.options.client_name = "nvml";
  json v;
  if (!ask_view(s, &v)) return NVML_ERROR_DRIVER_NOT_LOADED;
  // Handles of an earlier init stand for nothing until this one names their GPU again.
  for (auto& h : s.devices) h->d.index = UINT_MAX;
  s.count = 0;
  try {
    s.driver_version = v.value("driver_version", "");
    s.cuda_version = v.value("cuda_version", 0);
    for (const json& g : v.value("gpus", json::array())) {
      nvmlDeviceData d;
      d.index = s.count;
      d.name = g.value("name", "");
      d.uuid = g.value("uuid", "");
      d.pci_bus_id = g.value("pci_bus_id", "");
      if (auto cc = g.find("compute_capability");
          cc != g.end() && cc->is_array() && cc->size() == 2) {
        d.cc_major = (*cc)[0].get<int>();
        d.cc_minor = (*cc)[1].get<int>();
      }
      // A handle of an earlier init for the same GPU is the same handle.
      nvmlDevice_st* slot = nullptr;
      for (auto& h : s.devices) {
        if (!d.uuid.empty() && h->d.uuid == d.uuid) slot = h.get();
      }
      if (!slot) {
        s.devices.push_back(std::make_unique<nvmlDevice_st>());
        slot = s.devices.back().get();
      }
      slot->d = d;
      ++s.count;
    }
  } catch (const std::exception& e) {  // a view of unexpected shape (another version)
    for (auto& h : s.devices) h->d.index = UINT_MAX;
    s.count = 0;
    say(std::string("gpu-server's view is unreadable: ") + e.what());
    return NVML_ERROR_UNKNOWN;
  }
  s.inits = 1;
  return NVML_SUCCESS;
}

// The handle of the current init for index i, or null.
nvmlDevice_st* by_index(State& s, unsigned i) {
  for (auto& h : s.devices) {
    if (h->d.index == i && i < s.count) return h.get();
  }
  return nullptr;
}

bool valid(State& s, nvmlDevice_t dev) {
  for (auto& h : s.devices) {
    if (h.get() == dev) return dev->d.index < s.count;
  }
  return false;
}

// Copies `text` into a caller's buffer of `length` bytes.
nvmlReturn_t copy_out(const std::string& text, char* buf, unsigned length) {
  if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
  if (text.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(buf, text.c_str(), text.size() + 1);
  return NVML_SUCCESS;
}

// The body of every entry point that takes a device: locked, initialized, a valid handle.
#define DEVICE_CALL(dev)                             \
  State& s = state();                                \
  std::lock_guard lock(s.mu);                        \
  if (s.inits == 0) return NVML_ERROR_UNINITIALIZED; \
  if (!valid(s, dev)) return NVML_ERROR_INVALID_ARGUMENT

// "0000:01:00.0" and "00000000:01:00.0" name the same bus id; compared without case.
bool same_bus_id(const std::string& a, const std::string& b) {
  unsigned d1, b1, s1, f1, d2, b2, s2, f2;
  if (std::sscanf(a.c_str(), "%x:%x:%x.%x", &d1, &b1, &s1, &f1) != 4) return false;
  if (std::sscanf(b.c_str(), "%x:%x:%x.%x", &d2, &b2, &s2, &f2) != 4) return false;
  return d1 == d2 && b1 == b2 && s1 == s2 && f1 == f2;
}

// nvmlDeviceGetHandleByUUID and ByPciBusId: the first device `match` accepts (`key` its name).
template <typename Match>
nvmlReturn_t find_device(const char* key, nvmlDevice_t* device, Match match) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (s.inits == 0) return NVML_ERROR_UNINITIALIZED;
  if (!key || !device) return NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned i = 0; i < s.count; ++i) {
    nvmlDevice_st* d = by_index(s, i);
    if (d && match(d)) {
      *device = d;
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

template <typename Info>
nvmlReturn_t running_processes(nvmlDevice_t dev, unsigned* count, Info* infos, bool compute) {
  DEVICE_CALL(dev);
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  json g;
  if (!device_view(s, dev, &g)) return NVML_ERROR_GPU_IS_LOST;
  try {
    const json procs = compute ? g.value("processes", json::array()) : json::array();
    if (procs.size() > *count || (!infos && !procs.empty())) {
      *count = static_cast<unsigned>(procs.size());
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = static_cast<unsigned>(procs.size());
    for (size_t i = 0; i < procs.size(); ++i) {
      Info info{};
      info.pid = procs[i].value("pid", 0u);
      info.usedGpuMemory = procs[i].value("memory_used", 0ull);
      if constexpr (sizeof(Info) == sizeof(nvmlProcessInfo_t)) {
        info.gpuInstanceId = 0xFFFFFFFFu;
        info.computeInstanceId = 0xFFFFFFFFu;
      }
      infos[i] = info;
    }
  } catch (const std::exception&) {
    return NVML_ERROR_UNKNOWN;
  }
  return NVML_SUCCESS;
}

nvmlReturn_t fill_pci(nvmlDevice_t dev, nvmlPciInfo_t* pci, bool legacy_only) {
  DEVICE_CALL(dev);
  if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned domain = 0, bus = 0, device = 0, fn = 0;
  if (std::sscanf(dev->d.pci_bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &fn) != 4) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  nvmlPciInfo_t out{};
  std::snprintf(out.busIdLegacy, sizeof out.busIdLegacy, "%04X:%02X:%02X.%X", domain, bus, device,
                fn);
  out.domain = domain;
  out.bus = bus;
  out.device = device;
  out.pciDeviceId = 0x10DE;  // NVIDIA's vendor id; the device id is not known remotely
  if (legacy_only) {
    std::memcpy(pci, &out, offsetof(nvmlPciInfo_t, busId));
    return NVML_SUCCESS;
  }
  std::snprintf(out.busId, sizeof out.busId, "%08X:%02X:%02X.%X", domain, bus, device, fn);
  *pci = out;
  return NVML_SUCCESS;
}

nvmlReturn_t memory_of(nvmlDevice_t dev, unsigned long long* total, unsigned long long* used) {
  DEVICE_CALL(dev);
  json g;
  if (!device_view(s, dev, &g)) return NVML_ERROR_GPU_IS_LOST;
  try {
    *total = g.value("memory_total", 0ull);
    *used = std::min(g.value("memory_used", 0ull), *total);
  } catch (const std::exception&) {
    return NVML_ERROR_UNKNOWN;
  }
  return NVML_SUCCESS;
}

}  // namespace

NVML_EXPORT nvmlReturn_t nvmlInit_v2(void) {
  State& s = state();
  std::lock_guard lock(s.mu);
  return init_locked(s);
}
NVML_EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
NVML_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int) { return nvmlInit_v2(); }

NVML_EXPORT nvmlReturn_t nvmlShutdown(void) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (s.inits == 0) return NVML_ERROR_UNINITIALIZED;
  if (--s.inits == 0) {
    s.client.reset();
    s.count = 0;
  }
  return NVML_SUCCESS;
}

NVML_EXPORT const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED:
      return "Already Initialized";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER:
      return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
      return "Timeout";
    case NVML_ERROR_IRQ_ISSUE:
      return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
      return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM:
      return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED:
      return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM:
      return "GPU access blocked by the operating system";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return "Driver/library version mismatch";
    case NVML_ERROR_IN_USE:
      return "In use by another client";
    case NVML_ERROR_MEMORY:
      return "Insufficient Memory";
    case NVML_ERROR_NO_DATA:
      return "No data";
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
      return "Insufficient resources";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED:
      return "Deprecated";
    case NVML_ERROR_NOT_READY:
      return "Not ready";
    case NVML_ERROR_GPU_NOT_FOUND:
      return "GPU not found";
    case NVML_ERROR_INVALID_STATE:
      return "Invalid state";
    default:
      return "Unknown Error";
  }
}

NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (s.inits == 0) return NVML_ERROR_UNINITIALIZED;
  return copy_out(s.driver_version, version, length);
}

NVML_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (s.inits == 0) return NVML_ERROR_UNINITIALIZED;
  // NVML's own version is the CUDA major version, then the driver's ("13.580.65.06").
  return copy_out(std::to_string(s.cuda_version / 1000) + "." + s.driver_version, version, length);
}

NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* v) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (!v) return NVML_ERROR_INVALID_ARGUMENT;
  if (s.inits == 0) return NVML_ERROR_UNINITIALIZED;
  *v = s.cuda_version;
  return NVML_SUCCESS;
}
NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* v) {
  return nvmlSystemGetCudaDriverVersion(v);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (s.inits == 0) return NVML_ERROR_UNINITIALIZED;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = s.count;
  return NVML_SUCCESS;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) {
  return nvmlDeviceGetCount_v2(count);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (s.inits == 0) return NVML_ERROR_UNINITIALIZED;
  if (!device) return NVML_ERROR_INVALID_ARGUMENT;
  nvmlDevice_st* d = by_index(s, index);
  if (!d) return NVML_ERROR_INVALID_ARGUMENT;
  *device = d;
  return NVML_SUCCESS;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  return find_device(uuid, device, [&](const nvmlDevice_st* d) {
    return strcasecmp(d->d.uuid.c_str(), uuid) == 0;
  });
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id,
                                                          nvmlDevice_t* device) {
  return find_device(bus_id, device,
                     [&](const nvmlDevice_st* d) { return same_bus_id(d->d.pci_bus_id, bus_id); });
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* bus_id, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByPciBusId_v2(bus_id, device);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned int* index) {
  DEVICE_CALL(dev);
  if (!index) return NVML_ERROR_INVALID_ARGUMENT;
  *index = dev->d.index;
  return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t dev, unsigned int* minor) {
  return nvmlDeviceGetIndex(dev, minor);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char* name, unsigned int length) {
  DEVICE_CALL(dev);
  return copy_out(dev->d.name, name, length);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char* uuid, unsigned int length) {
  DEVICE_CALL(dev);
  if (dev->d.uuid.empty()) return NVML_ERROR_NOT_SUPPORTED;
  return copy_out(dev->d.uuid, uuid, length);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t dev, nvmlPciInfo_t* pci) {
  return fill_pci(dev, pci, false);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t dev, nvmlPciInfo_t* pci) {
  return fill_pci(dev, pci, false);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t dev, nvmlPciInfo_t* pci) {
  return fill_pci(dev, pci, true);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t* memory) {
  if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned long long total = 0, used = 0;
  if (nvmlReturn_t r = memory_of(dev, &total, &used)) return r;
  memory->total = total;
  memory->used = used;
  memory->free = total - used;
  return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t* memory) {
  if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
  if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  unsigned long long total = 0, used = 0;
  if (nvmlReturn_t r = memory_of(dev, &total, &used)) return r;
  memory->total = total;
  memory->reserved = 0;
  memory->used = used;
  memory->free = total - used;
  return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t* u) {
  DEVICE_CALL(dev);
  if (!u) return NVML_ERROR_INVALID_ARGUMENT;
  json g;
  if (!device_view(s, dev, &g)) return NVML_ERROR_GPU_IS_LOST;
  try {
    u->gpu = std::min(g.value("utilization", 0u), 100u);
  } catch (const std::exception&) {
    return NVML_ERROR_UNKNOWN;
  }
  u->memory = 0;  // memory-controller activity is not measured
  return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev,
                                                                 unsigned int* count,
                                                                 nvmlProcessInfo_t* infos) {
  return running_processes(dev, count, infos, true);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t dev,
                                                                 unsigned int* count,
                                                                 nvmlProcessInfo_t* infos) {
  return running_processes(dev, count, infos, true);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t dev, unsigned int* count,
                                                              nvmlProcessInfo_v1_t* infos) {
  return running_processes(dev, count, infos, true);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t dev,
                                                                  unsigned int* count,
                                                                  nvmlProcessInfo_t* infos) {
  return running_processes(dev, count, infos, false);  // a remote GPU runs no graphics
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t dev, int* major,
                                                            int* minor) {
  DEVICE_CALL(dev);
  if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
  *major = dev->d.cc_major;
  *minor = dev->d.cc_minor;
  return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t dev, nvmlComputeMode_t* mode) {
  DEVICE_CALL(dev);
  if (!mode) return NVML_ERROR_INVALID_ARGUMENT;
  *mode = NVML_COMPUTEMODE_DEFAULT;  // shared by the server's sessions
  return NVML_SUCCESS;
}

// What a remote, shared GPU does not expose: NVML's answer for a GPU without the sensor.
#define NOT_SUPPORTED(name, ...)                                 \
  NVML_EXPORT nvmlReturn_t name(nvmlDevice_t dev, __VA_ARGS__) { \
    DEVICE_CALL(dev);                                            \
    return NVML_ERROR_NOT_SUPPORTED;                             \
  }
NOT_SUPPORTED(nvmlDeviceGetTemperature, nvmlTemperatureSensors_t, unsigned int*)
NOT_SUPPORTED(nvmlDeviceGetPowerUsage, unsigned int*)
NOT_SUPPORTED(nvmlDeviceGetFanSpeed, unsigned int*)
NOT_SUPPORTED(nvmlDeviceGetClockInfo, nvmlClockType_t, unsigned int*)
NOT_SUPPORTED(nvmlDeviceGetMaxClockInfo, nvmlClockType_t, unsigned int*)
NOT_SUPPORTED(nvmlDeviceGetPerformanceState, nvmlPstates_t*)
NOT_SUPPORTED(nvmlDeviceGetPersistenceMode, nvmlEnableState_t*)
NOT_SUPPORTED(nvmlDeviceGetPowerManagementLimit, unsigned int*)
NOT_SUPPORTED(nvmlDeviceGetEnforcedPowerLimit, unsigned int*)
NOT_SUPPORTED(nvmlDeviceGetTotalEnergyConsumption, unsigned long long*)
NOT_SUPPORTED(nvmlDeviceGetSerial, char*, unsigned int)
NOT_SUPPORTED(nvmlDeviceGetVbiosVersion, char*, unsigned int)
