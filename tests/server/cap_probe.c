/* A client for tenant_test: allocates blocks of 64 MiB through one allocation path until the
 * server refuses one (or `most` succeeded), then prints
 *   "blocks N error <name> total T free F"
 * (cuMemGetInfo and cuDeviceTotalMem after the allocations; total must agree in both). With a
 * third argument it then waits for a line on stdin before it exits (and its memory goes).
 * The block is, by path: linear, pitched, managed or stream-ordered memory (`pool`: from a pool
 * of its own); a CUDA array (2D, or 3D: `array3d`); a module or a library whose PTX defines a
 * 64 MiB global variable; or physical memory for virtual memory management (`vmm`: cuMemCreate;
 * `vmm_mapped`: each block mapped into one reservation and its handle released at once, so
 * only the mapping holds it, and given back by unmapping it); or graph-owned memory (`graph`:
 * MOST graphs each capture a cuMemAllocAsync of a block, which the probe frees before the
 * first launch; each launch then makes its graph's block again).
 *   cap_probe linear|pitch|managed|async|pool|array|array3d|module|library|vmm|vmm_mapped|graph
 *             MOST [hold] */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/server/probe.h"

/* One 64 MiB __device__ array, as nvcc writes it in PTX. */
static const char kBigGlobal[] =
    ".version 7.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    "// a comment that names .global .b8 nothing[1];\n"
    ".visible .global .align 4 .b8 big[67108864];\n";

int main(int argc, char** argv) {
  const size_t block = (size_t)64 << 20;
  CUdevice dev = 0;
  CUcontext ctx = NULL;
  CUstream stream = NULL;
  CUmemoryPool pool = NULL;
  CUdeviceptr d = 0;
  CUarray array = NULL;
  CUmodule module = NULL;
  CUlibrary library = NULL;
  CUmemGenericAllocationHandle vmm = 0;
  CUdeviceptr va = 0, mapped = 0;
  CUresult r, first = CUDA_SUCCESS;
  int n = 0, most;
  size_t free_bytes = 0, total = 0, device_total = 0;
  char line[16];
  if (argc < 3) return 2;
  most = atoi(argv[2]);
  r = primary_context(&dev, &ctx, NULL);
  if (!r) r = cuStreamCreate(&stream, 0);
  if (!r && !strcmp(argv[1], "pool")) {
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    r = cuMemPoolCreate(&pool, &props);
  }
  if (!r && !strcmp(argv[1], "vmm_mapped"))
    r = cuMemAddressReserve(&va, (size_t)(most + 1) * block, 0, 0, 0);
  CUgraphExec* execs = NULL;
  CUdeviceptr* owned = NULL;
  if (!strcmp(argv[1], "graph")) {
    execs = calloc((size_t)most, sizeof *execs);
    owned = calloc((size_t)most, sizeof *owned);
    if (!execs || !owned) return 2;
    for (int i = 0; !r && i < most; ++i) {
      CUgraph g = NULL;
      r = cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
      if (!r) r = cuMemAllocAsync(&owned[i], block, stream);
      if (!r) r = cuStreamEndCapture(stream, &g);
      if (!r) r = cuGraphInstantiate(&execs[i], g, 0);
      if (g) cuGraphDestroy(g);
      if (!r) r = cuMemFree(owned[i]);
    }
  }
  for (int again = 0; again < 2; ++again) {
    while (!r && n < most) {
      size_t pitch = 0;
      CUdeviceptr nd = 0;
      CUarray na = NULL;
      CUmodule nm = NULL;
      CUlibrary nl = NULL;
      CUmemGenericAllocationHandle nh = 0;
      if (!strcmp(argv[1], "linear")) {
        r = cuMemAlloc(&nd, block);
      } else if (!strcmp(argv[1], "pitch")) {
        r = cuMemAllocPitch(&nd, &pitch, 1 << 20, 64, 16); /* 1 MiB rows, a whole 64 MiB */
      } else if (!strcmp(argv[1], "managed")) {
        r = cuMemAllocManaged(&nd, block, CU_MEM_ATTACH_GLOBAL);
      } else if (!strcmp(argv[1], "async")) {
        r = cuMemAllocAsync(&nd, block, stream);
        if (!r) r = cuStreamSynchronize(stream);
      } else if (!strcmp(argv[1], "pool")) {
        r = cuMemAllocFromPoolAsync(&nd, block, pool, stream);
        if (!r) r = cuStreamSynchronize(stream);
      } else if (!strcmp(argv[1], "array")) {
        CUDA_ARRAY_DESCRIPTOR desc = {4096, 4096, CU_AD_FORMAT_FLOAT, 1}; /* 64 MiB */
        r = cuArrayCreate(&na, &desc);
      } else if (!strcmp(argv[1], "array3d")) {
        CUDA_ARRAY3D_DESCRIPTOR desc = {256, 256, 256, CU_AD_FORMAT_UNSIGNED_INT8, 4, 0};
        r = cuArray3DCreate(&na, &desc);
      } else if (!strcmp(argv[1], "module")) {
        r = cuModuleLoadData(&nm, kBigGlobal);
      } else if (!strcmp(argv[1], "library")) {
        r = cuLibraryLoadData(&nl, kBigGlobal, NULL, NULL, 0, NULL, NULL, 0);
      } else if (!strcmp(argv[1], "vmm")) {
        CUmemAllocationProp prop = device_memory_prop();
        r = cuMemCreate(&nh, block, &prop, 0);
      } else if (!strcmp(argv[1], "vmm_mapped")) {
        CUmemGenericAllocationHandle h = 0;
        CUmemAllocationProp prop = device_memory_prop();
        r = cuMemCreate(&h, block, &prop, 0);
        if (!r) r = cuMemMap(va + (size_t)n * block, block, 0, h, 0);
        if (h) cuMemRelease(h);
        if (!r) mapped = va + (size_t)n * block;
      } else if (!strcmp(argv[1], "graph")) {
        r = cuGraphLaunch(execs[n], stream);
        if (!r) r = cuStreamSynchronize(stream);
        if (!r) nd = owned[n];
      } else {
        return 2;
      }
      if (!r) {
        ++n;
        d = nd;
        array = na;
        module = nm;
        library = nl;
        vmm = nh;
      }
    }
    if (again == 0) {
      /* Refused: the report's figures are taken now, then the newest block is given back (freed,
       * destroyed or unloaded) and one more is asked for, which must fit again. */
      cuMemGetInfo(&free_bytes, &total);
      cuDeviceTotalMem(&device_total, dev);
      first = r;
      if (n == 0 || !r) break;
      if (d) r = cuMemFree(d);
      if (array) r = cuArrayDestroy(array);
      if (module) r = cuModuleUnload(module);
      if (library) r = cuLibraryUnload(library);
      if (vmm) r = cuMemRelease(vmm);
      if (mapped) r = cuMemUnmap(mapped, block);
      if (r) break;
      most = n--;
    }
  }
  free(execs);
  free(owned);
  printf("blocks %d error %s total %zu free %zu device_total %zu again %s\n", n, name(first), total,
         free_bytes, device_total, name(r));
  fflush(stdout);
  if (argc > 3 && !fgets(line, sizeof line, stdin)) return 0;
  return 0;
}
