/* A client for sm_partition_test: what its device 0 shows of SMs, and whether cooperative
 * launches of one 1024-thread block per SM fit. Prints
 *   "sms A resource B context C coop_all NAME coop_more NAME"
 * A: CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT; B: cuDeviceGetDevResource's SM count; C:
 * cuCtxGetDevResource's for its primary context; then the results of cooperative launches of
 * as many 1024-thread blocks as A SMs hold at once, and of one block more.
 * With "sms N" it launches N blocks instead and prints "coop N NAME". */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/server/probe.h"

static const char kPtx[] =
    ".version 7.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    ".visible .entry fill()\n"
    "{\n"
    "  ret;\n"
    "}\n";

static void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    printf("error %s %s\n", what, name(r));
    exit(1);
  }
}

static CUresult coop(CUfunction f, int blocks) {
  CUresult r = cuLaunchCooperativeKernel(f, (unsigned)blocks, 1, 1, 1024, 1, 1, 0, NULL, NULL);
  return r ? r : cuCtxSynchronize();
}

int main(int argc, char** argv) {
  CUdevice dev = 0;
  CUcontext ctx = NULL;
  CUmodule mod = NULL;
  CUfunction f = NULL;
  CUdevResource device, context;
  int sms = 0, per_sm = 0;
  const char* step = NULL;
  CUresult r = primary_context(&dev, &ctx, &step);
  check(r, step);
  check(cuModuleLoadData(&mod, kPtx), "cuModuleLoadData");
  check(cuModuleGetFunction(&f, mod, "fill"), "cuModuleGetFunction");
  if (argc == 3 && !strcmp(argv[1], "sms")) {
    int n = atoi(argv[2]);
    printf("coop %d %s\n", n, name(coop(f, n)));
    return 0;
  }
  check(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
        "cuDeviceGetAttribute");
  check(cuDeviceGetDevResource(dev, &device, CU_DEV_RESOURCE_TYPE_SM), "cuDeviceGetDevResource");
  check(cuCtxGetDevResource(ctx, &context, CU_DEV_RESOURCE_TYPE_SM), "cuCtxGetDevResource");
  check(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, 1024, 0),
        "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  printf("sms %d resource %u context %u", sms, device.sm.smCount, context.sm.smCount);
  printf(" coop_all %s", name(coop(f, per_sm * sms)));
  printf(" coop_more %s\n", name(coop(f, per_sm * sms + 1)));
  return 0;
}
