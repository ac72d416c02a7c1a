/* A client for admin_test: allocates MIB MiB on device 0, prints "ready", then waits for a line
 * on stdin; then makes one more call (an allocation and a synchronize) and prints
 * "after <error name>", so a test can see what an evicted session's client gets.
 *   hold_probe MIB */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/server/probe.h"

int main(int argc, char** argv) {
  CUdevice dev = 0;
  CUcontext ctx = NULL;
  CUdeviceptr d = 0, more = 0;
  char line[16];
  CUresult r;
  if (argc < 2) return 2;
  r = primary_context(&dev, &ctx, NULL);
  if (!r) r = cuMemAlloc(&d, (size_t)atoi(argv[1]) << 20);
  if (!r) r = cuCtxSynchronize();
  if (r) {
    printf("failed %s\n", name(r));
    return 1;
  }
  printf("ready\n");
  fflush(stdout);
  if (!fgets(line, sizeof line, stdin)) return 0;
  r = cuMemAlloc(&more, 1 << 20);
  if (!r) r = cuCtxSynchronize();
  printf("after %s\n", name(r));
  fflush(stdout);
  return 0;
}
