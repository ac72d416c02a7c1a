/* A driver that fails on purpose, for the worker tests (design decision 14): cuwire's own client
 * library (a relay to another gpu-server) with cuMemAlloc_v2 in front of it. An allocation of
 * one of the sizes in fault_sizes.h makes the process running it fail that way, at the moment a
 * test chooses; every other call is the client library's, whose symbols this library's
 * dependency provides (dlsym on this library's handle finds them there).
 *   gpu-server --backend cuda --driver libfault_driver.so */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "tests/support/fault_sizes.h"

typedef CUresult(CUDAAPI* AllocFn)(CUdeviceptr*, size_t);

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  static AllocFn next;
  switch (bytes) {
    case FAULT_SEGV:
      *(volatile int*)(size_t)0 = 1;
      break;
    case FAULT_ABORT:
      abort();
    case FAULT_EXIT:
      _exit(3);
    case FAULT_KILL:
      raise(SIGKILL);
      break;
    case FAULT_HANG:
      raise(SIGSTOP);
      break;
    default:
      break;
  }
  if (!next) next = (AllocFn)dlsym(RTLD_NEXT, "cuMemAlloc_v2");
  return next ? next(p, bytes) : CUDA_ERROR_NOT_INITIALIZED;
}
