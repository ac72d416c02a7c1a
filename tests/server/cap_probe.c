/* A client for tenant_test: allocates blocks of 64 MiB through one allocation path until the
 * server refuses one (or `most` succeeded), then prints
 *   "blocks N error <name> total T free F"
 * (cuMemGetInfo and cuDeviceTotalMem after the allocations; total must agree in both). With a
 * third argument it then waits for a line on stdin before it exits (and its memory goes).
 *   cap_probe linear|pitch|managed|async MOST [hold] */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* name(CUresult r) {
  const char* n = NULL;
  cuGetErrorName(r, &n);
  return n ? n : "?";
}

int main(int argc, char** argv) {
  const size_t block = (size_t)64 << 20;
  CUdevice dev = 0;
  CUcontext ctx = NULL;
  CUstream stream = NULL;
  CUresult r;
  int n = 0, most;
  size_t free_bytes = 0, total = 0, device_total = 0;
  char line[16];
  if (argc < 3) return 2;
  most = atoi(argv[2]);
  r = cuInit(0);
  if (!r) r = cuDeviceGet(&dev, 0);
  if (!r) r = cuDevicePrimaryCtxRetain(&ctx, dev);
  if (!r) r = cuCtxSetCurrent(ctx);
  if (!r) r = cuStreamCreate(&stream, 0);
  while (!r && n < most) {
    CUdeviceptr d = 0;
    size_t pitch = 0;
    if (!strcmp(argv[1], "linear")) {
      r = cuMemAlloc(&d, block);
    } else if (!strcmp(argv[1], "pitch")) {
      r = cuMemAllocPitch(&d, &pitch, 1 << 20, 64, 16);  /* 1 MiB rows, a whole 64 MiB */
    } else if (!strcmp(argv[1], "managed")) {
      r = cuMemAllocManaged(&d, block, CU_MEM_ATTACH_GLOBAL);
    } else if (!strcmp(argv[1], "async")) {
      r = cuMemAllocAsync(&d, block, stream);
      if (!r) r = cuStreamSynchronize(stream);
    } else {
      return 2;
    }
    if (!r) ++n;
  }
  cuMemGetInfo(&free_bytes, &total);
  cuDeviceTotalMem(&device_total, dev);
  printf("blocks %d error %s total %zu free %zu device_total %zu\n", n, name(r), total,
         free_bytes, device_total);
  fflush(stdout);
  if (argc > 3 && !fgets(line, sizeof line, stdin)) return 0;
  return 0;
}
