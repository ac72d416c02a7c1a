/* A client for worker_test: makes an allocation of the size at which the fault-injecting driver
 * (tests/support/fault_driver.c) makes the worker serving it fail, then prints "after <error
 * name>": what the program sees when the process holding its session dies.
 *   fault_probe segv|abort|exit|kill|hang */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#include "tests/server/probe.h"
#include "tests/support/fault_sizes.h"

int main(int argc, char** argv) {
  CUdevice dev = 0;
  CUcontext ctx = NULL;
  CUdeviceptr d = 0;
  size_t size = 0;
  CUresult r;
  if (argc < 2) return 2;
  if (!strcmp(argv[1], "segv")) size = FAULT_SEGV;
  if (!strcmp(argv[1], "abort")) size = FAULT_ABORT;
  if (!strcmp(argv[1], "exit")) size = FAULT_EXIT;
  if (!strcmp(argv[1], "kill")) size = FAULT_KILL;
  if (!strcmp(argv[1], "hang")) size = FAULT_HANG;
  if (!size) return 2;
  r = primary_context(&dev, &ctx, NULL);
  if (r) {
    printf("failed %s\n", name(r));
    return 1;
  }
  r = cuMemAlloc(&d, size);
  if (!r) r = cuCtxSynchronize();
  printf("after %s\n", name(r));
  return 0;
}
