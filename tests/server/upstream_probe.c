/* A client for relay_test: sets up a context and device memory and copies into it, printing
 * "ready <error name>" (CUDA_SUCCESS when all of that worked). With the argument "wait", for
 * every line on stdin it then copies again, printing "copy <error name>" and "info <error name>"
 * (cuMemGetInfo). With "badstream" it asks for a stream with flags no driver accepts (a
 * fire-and-forget call whose error is deferred), prints "create <name>" and "info <name>" (a
 * round trip that does not synchronise), waits for a line, then prints "sync <name>"
 * (cuCtxSynchronize, where the deferred error belongs). Always exits 0: the test reads the
 * names. */
#include <cuda.h>
#include <stdio.h>

#include "tests/server/probe.h"

int main(int argc, char** argv) {
  CUdevice dev = 0;
  CUcontext ctx = NULL;
  CUdeviceptr d = 0;
  char data[256] = {1, 2, 3}, line[16];
  size_t free_bytes = 0, total = 0;
  CUresult r = primary_context(&dev, &ctx, NULL);
  if (!r) r = cuMemAlloc(&d, sizeof data);
  if (!r) r = cuMemcpyHtoD(d, data, sizeof data);
  printf("ready %s\n", name(r));
  fflush(stdout);
  if (argc > 1 && argv[1][0] == 'b') {
    CUstream s = NULL;
    printf("create %s\n", name(cuStreamCreate(&s, 0x80)));
    printf("info %s\n", name(cuMemGetInfo(&free_bytes, &total)));
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 0;
    printf("sync %s\n", name(cuCtxSynchronize()));
    fflush(stdout);
  }
  if (argc > 1 && argv[1][0] == 'w') {
    while (fgets(line, sizeof line, stdin)) {
      printf("copy %s\n", name(cuMemcpyHtoD(d, data, sizeof data)));
      printf("info %s\n", name(cuMemGetInfo(&free_bytes, &total)));
      fflush(stdout);
    }
  }
  return 0;
}
