/* What the tests' client programs (the *_probe.c beside this file) share: the names they print
 * for results, device 0's primary context, and the properties of physical memory on device 0. */
#ifndef CUWIRE_TESTS_SERVER_PROBE_H
#define CUWIRE_TESTS_SERVER_PROBE_H

#include <cuda.h>
#include <string.h>

/* The result's name as the tests read it ("?" for one the driver does not name). */
static inline const char* name(CUresult r) {
  const char* n = NULL;
  cuGetErrorName(r, &n);
  return n ? n : "?";
}

/* cuInit, then device 0's primary context made current. The first failure is returned, and the
 * call that failed is named in *what (when what is not NULL), for probes that report it. */
static inline CUresult primary_context(CUdevice* dev, CUcontext* ctx, const char** what) {
  const char* step = "cuInit";
  CUresult r = cuInit(0);
  if (!r) {
    step = "cuDeviceGet";
    r = cuDeviceGet(dev, 0);
  }
  if (!r) {
    step = "cuDevicePrimaryCtxRetain";
    r = cuDevicePrimaryCtxRetain(ctx, *dev);
  }
  if (!r) {
    step = "cuCtxSetCurrent";
    r = cuCtxSetCurrent(*ctx);
  }
  if (what) *what = step;
  return r;
}

/* Pinned physical memory on device 0, for cuMemCreate. */
static inline CUmemAllocationProp device_memory_prop(void) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  return prop;
}

#endif
