/* A client for tenant_test and the cap benchmark: keeps its device 0 busy with kernels that
 * each spin for SPIN_US microseconds of real time (%globaltimer), from the wall-clock time
 * START until END (nanoseconds since the epoch), and prints the time its kernels ran on the
 * device within [FROM, TO]:
 *   "busy_ns B kernels K"
 * Each kernel records when it began and ended, so the figure is what the device ran, measured
 * by the device's clock, whatever the server charged.
 *   compute_probe SPIN_US START END FROM TO
 * With "launches N" it prints the time one launch of an empty kernel takes, "ns_per_launch T"
 * (N launches, synchronising after every batch). With "where" it prints its devices instead,
 * "devices N bus0 PCI-ID" (the PCI bus id of its device 0), or "error NAME"; with "where hold" it
 * then keeps its session until a line arrives on stdin. */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char kPtx[] =
    ".version 7.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    ".visible .entry spin(.param .u64 out, .param .u64 ns)\n"
    "{\n"
    "  .reg .u64 %rd<6>;\n"
    "  .reg .pred %p;\n"
    "  ld.param.u64 %rd1, [out];\n"
    "  ld.param.u64 %rd2, [ns];\n"
    "  mov.u64 %rd3, %globaltimer;\n"
    "  add.u64 %rd4, %rd3, %rd2;\n"
    "LOOP:\n"
    "  mov.u64 %rd5, %globaltimer;\n"
    "  setp.lt.u64 %p, %rd5, %rd4;\n"
    "  @%p bra LOOP;\n"
    "  st.global.u64 [%rd1], %rd3;\n"
    "  st.global.u64 [%rd1+8], %rd5;\n"
    "  ret;\n"
    "}\n";

enum { kSlots = 1 << 16, kBatch = 8 };

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* n = NULL;
    cuGetErrorName(r, &n);
    fprintf(stderr, "compute_probe: %s: %s\n", what, n ? n : "?");
    printf("error %s\n", n ? n : "?");
    exit(1);
  }
  return 0;
}

int main(int argc, char** argv) {
  CUdevice dev = 0;
  CUcontext ctx = NULL;
  CUmodule mod = NULL;
  CUfunction spin = NULL;
  CUdeviceptr out = 0;
  uint64_t spin_ns, start, end, from, to, busy = 0, *times;
  CUevent batch_done[2] = {NULL, NULL};
  int n = 0, i;
  check(cuInit(0), "cuInit");
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  if (argc >= 2 && !strcmp(argv[1], "where")) {
    int count = 0;
    char bus[32] = "", line[16];
    check(cuDeviceGetCount(&count), "cuDeviceGetCount");
    check(cuDeviceGetPCIBusId(bus, sizeof bus, dev), "cuDeviceGetPCIBusId");
    printf("devices %d bus0 %s\n", count, bus);
    fflush(stdout);
    if (argc > 2 && !fgets(line, sizeof line, stdin)) return 0;
    return 0;
  }
  if (argc == 3 && !strcmp(argv[1], "launches")) {
    /* The cost of a launch: N empty kernels, in batches of kBatch between synchronisations. */
    uint64_t zero = 0, t0;
    int total = atoi(argv[2]);
    check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    check(cuModuleLoadData(&mod, kPtx), "cuModuleLoadData");
    check(cuModuleGetFunction(&spin, mod, "spin"), "cuModuleGetFunction");
    check(cuMemAlloc(&out, 16), "cuMemAlloc");
    t0 = now_ns();
    for (n = 0; n < total; n += kBatch) {
      for (i = 0; i < kBatch; ++i) {
        void* params[] = {&out, &zero};
        check(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), "cuLaunchKernel");
      }
      check(cuCtxSynchronize(), "cuCtxSynchronize");
    }
    printf("ns_per_launch %.0f\n", (double)(now_ns() - t0) / n);
    return 0;
  }
  if (argc != 6) return 2;
  spin_ns = strtoull(argv[1], NULL, 10) * 1000;
  start = strtoull(argv[2], NULL, 10);
  end = strtoull(argv[3], NULL, 10);
  from = strtoull(argv[4], NULL, 10);
  to = strtoull(argv[5], NULL, 10);
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  check(cuModuleLoadData(&mod, kPtx), "cuModuleLoadData");
  check(cuModuleGetFunction(&spin, mod, "spin"), "cuModuleGetFunction");
  check(cuMemAlloc(&out, (size_t)kSlots * 16), "cuMemAlloc");
  check(cuMemsetD8(out, 0, (size_t)kSlots * 16), "cuMemsetD8");
  while (now_ns() < start) {
  }
  /* Two batches of kernels in flight: the client waits for the one before the batch it just
   * queued, so the device always has the next kernel (a wait for everything queued would leave
   * it idle until this process, on a busy host, gets to queue more). */
  check(cuEventCreate(&batch_done[0], CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  check(cuEventCreate(&batch_done[1], CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  for (int batch = 0; now_ns() < end && n + kBatch <= kSlots; ++batch) {
    for (i = 0; i < kBatch; ++i, ++n) {
      CUdeviceptr slot = out + (CUdeviceptr)n * 16;
      void* params[] = {&slot, &spin_ns};
      check(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), "cuLaunchKernel");
    }
    check(cuEventRecord(batch_done[batch % 2], NULL), "cuEventRecord");
    if (batch > 0) check(cuEventSynchronize(batch_done[(batch + 1) % 2]), "cuEventSynchronize");
  }
  check(cuCtxSynchronize(), "cuCtxSynchronize");
  times = malloc((size_t)n * 16);
  if (!times) return 1;
  check(cuMemcpyDtoH(times, out, (size_t)n * 16), "cuMemcpyDtoH");
  for (i = 0; i < n; ++i) {
    uint64_t a = times[2 * i] < from ? from : times[2 * i];
    uint64_t b = times[2 * i + 1] > to ? to : times[2 * i + 1];
    if (b > a) busy += b - a;
  }
  printf("busy_ns %llu kernels %d\n", (unsigned long long)busy, n);
  free(times);
  return 0;
}
