/* What `nvidia-smi -L` and `nvidia-smi --query-gpu=name,memory.total,memory.used,
 * utilization.gpu --format=csv` print, from whichever libnvidia-ml.so.1 the loader finds
 * (dlopen, as monitoring tools and frameworks load it): under `cuwire run`, cuwire's. Then
 * each GPU's running processes, and the answers NVML gives to what it cannot tell.
 *   nvml_smi */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "client-lib/nvml/nvml_abi.h"

#define LOAD(fn)                           \
  fn##_t fn##_p = (fn##_t)dlsym(lib, #fn); \
  if (!fn##_p) {                           \
    printf("missing %s\n", #fn);           \
    return 1;                              \
  }                                        \
  (void)0

typedef nvmlReturn_t (*nvmlInit_v2_t)(void);
typedef nvmlReturn_t (*nvmlShutdown_t)(void);
typedef const char* (*nvmlErrorString_t)(nvmlReturn_t);
typedef nvmlReturn_t (*nvmlDeviceGetCount_v2_t)(unsigned*);
typedef nvmlReturn_t (*nvmlDeviceGetHandleByIndex_v2_t)(unsigned, nvmlDevice_t*);
typedef nvmlReturn_t (*nvmlDeviceGetHandleByUUID_t)(const char*, nvmlDevice_t*);
typedef nvmlReturn_t (*nvmlDeviceGetHandleByPciBusId_v2_t)(const char*, nvmlDevice_t*);
typedef nvmlReturn_t (*nvmlDeviceGetName_t)(nvmlDevice_t, char*, unsigned);
typedef nvmlReturn_t (*nvmlDeviceGetUUID_t)(nvmlDevice_t, char*, unsigned);
typedef nvmlReturn_t (*nvmlDeviceGetPciInfo_v3_t)(nvmlDevice_t, nvmlPciInfo_t*);
typedef nvmlReturn_t (*nvmlDeviceGetMemoryInfo_t)(nvmlDevice_t, nvmlMemory_t*);
typedef nvmlReturn_t (*nvmlDeviceGetUtilizationRates_t)(nvmlDevice_t, nvmlUtilization_t*);
typedef nvmlReturn_t (*nvmlDeviceGetComputeRunningProcesses_v3_t)(nvmlDevice_t, unsigned*,
                                                                  nvmlProcessInfo_t*);
typedef nvmlReturn_t (*nvmlDeviceGetTemperature_t)(nvmlDevice_t, nvmlTemperatureSensors_t,
                                                   unsigned*);
typedef nvmlReturn_t (*nvmlSystemGetDriverVersion_t)(char*, unsigned);
typedef nvmlReturn_t (*nvmlSystemGetCudaDriverVersion_t)(int*);

int main(void) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  unsigned count = 0, i;
  nvmlReturn_t r;
  if (!lib) {
    printf("no libnvidia-ml.so.1: %s\n", dlerror());
    return 1;
  }
  LOAD(nvmlInit_v2);
  LOAD(nvmlShutdown);
  LOAD(nvmlErrorString);
  LOAD(nvmlDeviceGetCount_v2);
  LOAD(nvmlDeviceGetHandleByIndex_v2);
  LOAD(nvmlDeviceGetHandleByUUID);
  LOAD(nvmlDeviceGetHandleByPciBusId_v2);
  LOAD(nvmlDeviceGetName);
  LOAD(nvmlDeviceGetUUID);
  LOAD(nvmlDeviceGetPciInfo_v3);
  LOAD(nvmlDeviceGetMemoryInfo);
  LOAD(nvmlDeviceGetUtilizationRates);
  LOAD(nvmlDeviceGetComputeRunningProcesses_v3);
  LOAD(nvmlDeviceGetTemperature);
  LOAD(nvmlSystemGetDriverVersion);
  LOAD(nvmlSystemGetCudaDriverVersion);

  r = nvmlDeviceGetCount_v2_p(&count);
  printf("before init: %s\n", nvmlErrorString_p(r));
  r = nvmlInit_v2_p();
  if (r != NVML_SUCCESS) {
    printf("init: %s\n", nvmlErrorString_p(r));
    return 1;
  }
  if ((r = nvmlDeviceGetCount_v2_p(&count)) != NVML_SUCCESS) {
    printf("count: %s\n", nvmlErrorString_p(r));
    return 1;
  }
  /* nvidia-smi -L */
  for (i = 0; i < count; ++i) {
    nvmlDevice_t dev;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "", uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "";
    if (nvmlDeviceGetHandleByIndex_v2_p(i, &dev) || nvmlDeviceGetName_p(dev, name, sizeof name) ||
        nvmlDeviceGetUUID_p(dev, uuid, sizeof uuid)) {
      printf("GPU %u: unreadable\n", i);
      return 1;
    }
    printf("GPU %u: %s (UUID: %s)\n", i, name, uuid);
  }
  /* nvidia-smi --query-gpu=name,memory.total,memory.used,utilization.gpu --format=csv */
  printf("name, memory.total [MiB], memory.used [MiB], utilization.gpu [%%]\n");
  for (i = 0; i < count; ++i) {
    nvmlDevice_t dev;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "";
    nvmlMemory_t mem;
    nvmlUtilization_t util;
    nvmlDeviceGetHandleByIndex_v2_p(i, &dev);
    nvmlDeviceGetName_p(dev, name, sizeof name);
    if ((r = nvmlDeviceGetMemoryInfo_p(dev, &mem)) ||
        (r = nvmlDeviceGetUtilizationRates_p(dev, &util))) {
      printf("%s, %s\n", name, nvmlErrorString_p(r));
      return 1;
    }
    printf("%s, %llu MiB, %llu MiB, %u %%\n", name, mem.total >> 20, mem.used >> 20, util.gpu);
  }
  /* Processes, and finding a GPU again by its UUID and its PCI bus id. */
  for (i = 0; i < count; ++i) {
    nvmlDevice_t dev, again;
    nvmlProcessInfo_t procs[16];
    unsigned n = 16, k, temp = 0;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "";
    nvmlPciInfo_t pci;
    nvmlDeviceGetHandleByIndex_v2_p(i, &dev);
    nvmlDeviceGetUUID_p(dev, uuid, sizeof uuid);
    nvmlDeviceGetPciInfo_v3_p(dev, &pci);
    printf(
        "GPU %u: bus %s, by uuid %s, by bus id %s\n", i, pci.busId,
        nvmlDeviceGetHandleByUUID_p(uuid, &again) == NVML_SUCCESS && again == dev ? "same"
                                                                                  : "other",
        nvmlDeviceGetHandleByPciBusId_v2_p(pci.busIdLegacy, &again) == NVML_SUCCESS && again == dev
            ? "same"
            : "other");
    r = nvmlDeviceGetComputeRunningProcesses_v3_p(dev, &n, procs);
    if (r != NVML_SUCCESS) {
      printf("GPU %u: processes: %s\n", i, nvmlErrorString_p(r));
      continue;
    }
    for (k = 0; k < n; ++k) {
      printf("GPU %u: process %u, %llu MiB\n", i, procs[k].pid, procs[k].usedGpuMemory >> 20);
    }
    printf("GPU %u: temperature: %s\n", i,
           nvmlErrorString_p(nvmlDeviceGetTemperature_p(dev, NVML_TEMPERATURE_GPU, &temp)));
  }
  {
    nvmlDevice_t dev;
    char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "";
    int cuda = 0;
    nvmlSystemGetDriverVersion_p(driver, sizeof driver);
    nvmlSystemGetCudaDriverVersion_p(&cuda);
    printf("driver %s, cuda %d\n", driver, cuda);
    printf("index %u: %s\n", count,
           nvmlErrorString_p(nvmlDeviceGetHandleByIndex_v2_p(count, &dev)));
  }
  nvmlShutdown_p();
  printf("after shutdown: %s\n", nvmlErrorString_p(nvmlDeviceGetCount_v2_p(&count)));
  return 0;
}
